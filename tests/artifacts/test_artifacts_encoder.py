"""RowEncoder's plain columns: exactly the values the writer's Arrow arrays hold."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa

from evalpipe.artifacts.encoder import _micros, _utcs

STAMP = pa.timestamp("us", tz="UTC")


class _Stamp(dt.datetime):
    """A datetime subclass (as some libraries return)."""


def test_timestamps_as_microseconds_convert_to_the_same_arrow_values() -> None:
    """A timestamp column as integer microseconds (UTC, naive, other zones, None, years 1 to
    9999) is the Arrow array pyarrow makes of its datetimes; a column with a datetime subclass
    stays datetimes."""
    rng = random.Random(20)
    span = (dt.datetime(9999, 12, 31) - dt.datetime(1, 1, 2)) // dt.timedelta(microseconds=1)
    values: list[dt.datetime | None] = []
    for k in range(4000):
        naive = dt.datetime(1, 1, 2) + dt.timedelta(microseconds=rng.randrange(span))
        zone = dt.timezone(dt.timedelta(minutes=rng.randrange(-12 * 60, 12 * 60)))
        if 2 < naive.year < 9998:
            naive = naive.replace(tzinfo=(None, dt.UTC, zone)[k % 3])
        values.append(None if k % 7 == 0 else naive)
    values.append(dt.datetime(1970, 1, 1, tzinfo=dt.UTC))
    values.append(dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC))
    micros = _micros(list(values))
    assert {type(v) for v in micros} == {int, type(None)}
    assert pa.array(micros, type=STAMP).equals(pa.array(_utcs(list(values)), type=STAMP))
    assert micros[-2:] == [0, -1]
    every = [v for v in values if v is not None]
    assert pa.array(_micros(every), type=STAMP).equals(pa.array(_utcs(every), type=STAMP))
    odd = [_Stamp(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 1, 2, tzinfo=dt.UTC)]
    assert _micros(odd) == odd
