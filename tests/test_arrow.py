"""numpy_of: Arrow columns as numpy arrays, values exactly as pyarrow's own conversion gives them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from evalpipe._internal.arrow import numpy_of


@pytest.mark.parametrize(
    ("column", "dtype", "expected"),
    [
        (pa.array([0.25, None, 3.0]), float, [0.25, np.nan, 3.0]),
        (pa.array([1, 2, 3], pa.int32()), np.int64, [1, 2, 3]),
        (pa.array([1, None, 3]), float, [1.0, np.nan, 3.0]),
        (pa.array([True, None, False, True]), bool, [True, False, False, True]),
        (pa.chunked_array([[1, 2], [3]]), np.int64, [1, 2, 3]),
        (pa.array(list(range(10))).slice(7), np.int64, [7, 8, 9]),
        (pa.array([True, False, True, True]).slice(1), bool, [False, True, True]),
        (pa.array(["pass", "fail"]), object, ["pass", "fail"]),
        (pa.array([], pa.float64()), float, []),
        (pa.chunked_array([], pa.int64()), np.int64, []),
    ],
)
def test_numpy_of_gives_the_values_and_dtype_asked_for(
    column: pa.Array, dtype: object, expected: list[object]
) -> None:
    """Nulls are NaN in floats and False in bools; slices (an offset) and chunks are read at
    their own positions; strings go through objects."""
    got = numpy_of(column, dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.asarray(expected, dtype=dtype))


def test_numpy_of_returns_a_writable_copy() -> None:
    """The result is the caller's: writing to it leaves the Arrow buffer unchanged."""
    column = pa.array([1.0, 2.0])
    got = numpy_of(column, float)
    got[0] = 9.0
    assert column.to_pylist() == [1.0, 2.0]
