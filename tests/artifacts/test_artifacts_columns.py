"""The column declarations: their values are exactly what the writer's Arrow arrays hold, and a column added to a table is in the writer's and the reader's output."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from artifact_builders import workflow_batch

from evalpipe.artifacts import RunRecord, RunWriter, iter_batches, load_run, read_table
from evalpipe.artifacts.columns import TABLES, Batch, Column
from evalpipe.artifacts.columns import micros as _micros
from evalpipe.artifacts.columns import utcs as _utcs

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


def _reason_length(batch: Batch) -> list[int | None]:
    return [None if r is None else len(r) for r in batch.attr("reason")]


@pytest.mark.parametrize("table", ["scores", "items", "runs"])
def test_a_column_added_in_one_place_is_in_the_writers_and_readers_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    """One Column added to a table's declaration is in the file the writer writes (its schema and
    every row's value) and in what the readers return, with no other change."""
    added = {
        "scores": Column(
            "reason_length", "int64", "Length of the reason.", "score", _reason_length
        ),
        "items": Column(
            "query_length",
            "int64",
            "Length of the query.",
            "item",
            lambda b: [len(q) for q, _ in (i.query_and_response() for i in b.objects)],
        ),
        "runs": Column(
            "has_transcript",
            "bool",
            "A transcript is kept.",
            "call",
            lambda b: [t is not None for t in b.attr("transcript")],
        ),
    }[table]
    # the table's last columns are those of the added column's source
    declared = TABLES[table]
    monkeypatch.setitem(TABLES, table, replace(declared, columns=(*declared.columns, added)))
    batch = workflow_batch(0, 3)
    with RunWriter(tmp_path) as writer:
        writer.add_runs([RunRecord(run_id="c1", transcript="{}"), RunRecord(run_id="c2")])
        writer.add_results(batch)

    written = pq.read_table(tmp_path / f"{table}.parquet")
    assert added.name in written.schema.names
    assert written.schema.field(added.name).metadata[b"description"] == added.doc.encode()
    read = read_table(tmp_path, table)
    assert read.schema.names == TABLES[table].names
    values = read.column(added.name).to_pylist()
    if table == "scores":
        rows = read.select(["reason", added.name]).to_pylist()
        assert {r["reason_length"] for r in rows} - {None}, "every row null"
        for row in rows:
            assert row["reason_length"] == (None if row["reason"] is None else len(row["reason"]))
    elif table == "items":
        assert values == [len(q) for q in read.column("query").to_pylist()]
    else:
        assert values == [True, False]
    assert [list(b.schema.names) for b in iter_batches(tmp_path, table, columns=[added.name])] == [
        [added.name]
    ]
    # the nested results still come back whole: a derived column is not read into a record
    assert load_run(tmp_path, input_items=False)[0].items == batch[0].items


@pytest.mark.parametrize(
    ("rows", "specs", "message"),
    [
        ("| `x` | int46 | A typo. |", {}, "unknown kind 'int46'"),
        ("`x` | string | No table row.", {}, "not a column row"),
        ("| `x` | string | Fine. |", {"y": {"since": 3}}, "no row for the column(s) ['y']"),
    ],
)
def test_a_declaration_mistake_is_named_when_the_module_loads(
    rows: str, specs: dict[str, dict[str, int]], message: str
) -> None:
    """A column row with an unknown kind, a line that is no row, or a spec without its row is
    refused naming it (not a schema that fails later, far from the declaration)."""
    from evalpipe.artifacts.columns import _columns

    with pytest.raises(ValueError) as raised:
        _columns("run", rows, **specs)
    assert message in str(raised.value)
