"""Arrow columns as numpy arrays: one conversion for the report, the comparison and the view.

Numeric and boolean columns are read from their data buffer (pyarrow's ``to_numpy`` imports
pandas when it is installed, 1.0-1.3 s here, even for a float column; ``group_by`` still loads
``pyarrow.dataset``, which imports it too); anything else (strings, nulls in a non-float column)
goes through Python objects, as ``np.asarray`` would.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]

__all__ = ["numpy_of"]


def numpy_of(column: Any, dtype: Any) -> np.ndarray:
    """``column`` (an Arrow Array or ChunkedArray) as a new numpy array of ``dtype``: nulls are
    NaN in a float column, False in a bool column; other types become objects first."""
    want = np.dtype(dtype)
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(arr) == 0:
        return np.empty(0, dtype=want)
    numeric = pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)
    if not (numeric or pa.types.is_boolean(arr.type)) or (
        arr.null_count and want.kind != "f" and not pa.types.is_boolean(arr.type)
    ):
        return np.asarray(arr.to_pylist(), dtype=want)
    if pa.types.is_boolean(arr.type):
        # bit-packed: one byte per value first (nulls as False)
        arr = pc.cast(pc.fill_null(arr, False), pa.uint8())
    elif want.kind == "f" and arr.null_count:
        arr = pc.fill_null(pc.cast(arr, pa.float64()), float("nan"))
    native = np.dtype(_numpy_type(arr.type))
    data = np.frombuffer(
        arr.buffers()[1], dtype=native, count=len(arr), offset=arr.offset * native.itemsize
    )
    return data.astype(want, copy=True)


def _numpy_type(arrow_type: Any) -> str:
    """The numpy type code of a fixed-width numeric Arrow type (``f8``, ``i8``, ``u1``)."""
    if pa.types.is_floating(arrow_type):
        kind = "f"
    elif pa.types.is_signed_integer(arrow_type):
        kind = "i"
    else:
        kind = "u"
    return f"{kind}{arrow_type.bit_width // 8}"
