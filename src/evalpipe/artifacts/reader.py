"""Reading a run directory back: the manifest, tables and record batches, run records, and the
nested EvalResults (``load_run``).

Every reader checks the schema version first (the manifest's and each file's) and refuses a
newer or unknown one with a message that says which evalpipe to use.
"""

from __future__ import annotations

import array
import bisect
import dataclasses
import functools
import itertools
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from evalpipe.artifacts.columns import TABLES, Column, Source, json_object
from evalpipe.artifacts.schema import (
    FILES,
    MANIFEST_FILE,
    RUN_NAME,
    SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    ArtifactError,
    RunRecord,
    SchemaVersionError,
    schema_of,
)
from evalpipe.artifacts.writer import resolve_filesystem
from evalpipe.items import EvalItem
from evalpipe.results import EvalItemResult, EvalResults, EvalScoreResult
from evalpipe.tally import OVERALL, SummaryRow
from evalpipe.transcripts import RunUsage

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "attach_tables",
    "connected",
    "iter_batches",
    "iter_runs",
    "load_run",
    "local_file",
    "manifest_part",
    "read_manifest",
    "read_not_passed",
    "read_rows",
    "read_runs",
    "read_summary",
    "read_table",
    "records",
    "run_tables",
]

_R = TypeVar("_R")
LOADED: Counter[str] = Counter()
"""What the readers turned into Python objects in this process, by kind, for instrumentation
(``evalpipe run``'s summary must stay off the items): ``items`` (EvalItems rebuilt from
items.parquet), ``item_results`` (EvalItemResults rebuilt from scores.parquet) and
``not_passed_rows`` (scores.parquet rows ``read_not_passed`` read in full) and ``item_rows``
(rows ``read_rows`` read in full)."""


def _check_version(raw: Any, where: str) -> int:
    try:
        version = int(raw)
    except (TypeError, ValueError):
        raise SchemaVersionError(
            f"{where}: unknown artifact schema version {raw!r}; this evalpipe reads versions "
            f"1 to {SCHEMA_VERSION}"
        ) from None
    if version < 1 or version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where}: written with artifact schema version {version}, but this evalpipe reads "
            f"versions 1 to {SCHEMA_VERSION}; upgrade evalpipe to read it"
        )
    return version


def read_manifest(run_dir: str | os.PathLike[str], *, filesystem: Any = None) -> dict[str, Any]:
    """The run's manifest.json, after checking its schema version.

    Raises:
        ArtifactError: when there is no manifest (the run did not finish, or this is not a run
            directory) or it is not a JSON object.
        SchemaVersionError: when it was written with a newer or unknown schema version.
    """
    fs, path = resolve_filesystem(run_dir, filesystem)
    manifest_path = f"{path}/{MANIFEST_FILE}"
    try:
        with fs.open_input_stream(manifest_path) as stream:
            text = stream.read().decode()
    except FileNotFoundError:
        raise ArtifactError(
            f"{manifest_path}: not found; a finished run directory has a manifest.json (it is "
            "written last, so a run that crashed has none)"
        ) from None
    except UnicodeDecodeError as exc:
        raise ArtifactError(
            f"{manifest_path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ArtifactError(f"{manifest_path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{manifest_path}: expected a JSON object, got {type(data).__name__}")
    if "schema_version" not in data:
        raise ArtifactError(f"{manifest_path}: no schema_version; not an evalpipe run manifest")
    _check_version(data["schema_version"], manifest_path)
    return data


def manifest_part(manifest: Mapping[str, Any], key: str) -> dict[str, Any]:
    """manifest.json's object ``key``; empty when it is absent or not an object."""
    part = manifest.get(key)
    return part if isinstance(part, dict) else {}


class _Table:
    """An open table file, and the columns it lacks (added by later schema versions)."""

    def __init__(self, fs: Any, directory: str, name: str, parquet: Any, absent: list[str]) -> None:
        self.fs = fs
        self.name = name
        self.path = f"{directory}/{FILES[name]}"
        self.parquet = parquet
        self.schema = schema_of(name)
        self.run_name = directory.rstrip("/").rsplit("/", 1)[-1]
        self.absent = absent

    def _present(self, columns: Sequence[str] | None) -> tuple[list[str], list[str]]:
        """The asked columns (None: all), and those of them the file has."""
        wanted = list(columns) if columns is not None else self.schema.names
        return wanted, [c for c in wanted if c not in self.absent]

    def _filled(self, data: Any, wanted: list[str]) -> Any:
        """A table or batch read with ``_present``'s columns, the absent ones of ``wanted`` filled
        in where asked (``run_name``: the directory's name; the others null)."""
        for i, name in enumerate(wanted):
            if name in self.absent:
                value = self.run_name if name == RUN_NAME else None
                type_ = self.schema.field(name).type
                data = data.add_column(i, name, pa.array([value] * data.num_rows, type=type_))
        return data

    def read(self, columns: Sequence[str] | None) -> Any:
        wanted, present = self._present(columns)
        return self._filled(self.parquet.read(columns=present), wanted)

    def iter_batches(
        self,
        batch_size: int,
        columns: Sequence[str] | None,
        row_groups: Sequence[int] | None = None,
    ) -> Iterator[Any]:
        wanted, present = self._present(columns)
        for batch in self.parquet.iter_batches(batch_size, row_groups, columns=present):
            yield self._filled(batch, wanted)

    def local(self, columns: Sequence[str]) -> str | None:
        """``local_file``: the file's path, for a reader that opens it itself."""
        local = isinstance(self.fs, pafs.LocalFileSystem) and not any(c in self.path for c in "*?[")
        return self.path if local and not set(columns) & set(self.absent) else None

    def attach(self, con: duckdb.DuckDBPyConnection, columns: Sequence[str]) -> None:
        """``attach_tables`` of this table: a view named as it is."""
        path = self.local(columns)
        if path is not None:
            rel = con.read_parquet(path, file_row_number=True)
            rel.select(", ".join([*columns, "file_row_number AS _pos"])).create_view(self.name)
        else:
            table = self.read(columns)
            con.register(self.name, table.append_column("_pos", _indices(list(range(len(table))))))

    def rows(self, positions: Sequence[int], columns: Sequence[str] | None) -> list[dict[str, Any]]:
        """``read_rows`` of this table."""
        meta = self.parquet.metadata
        starts = list(
            itertools.accumulate(
                (meta.row_group(g).num_rows for g in range(meta.num_row_groups)), initial=0
            )
        )
        wanted = sorted(set(positions))
        if not wanted:
            return []
        if wanted[0] < 0 or wanted[-1] >= starts[-1]:
            bad = wanted[0] if wanted[0] < 0 else wanted[-1]
            raise IndexError(f"{self.name}: no row {bad} (it has {starts[-1]})")
        found: dict[int, dict[str, Any]] = {}
        for group in sorted({bisect.bisect_right(starts, p) - 1 for p in wanted}):
            start = starts[group]
            last = wanted[bisect.bisect_left(wanted, starts[group + 1]) - 1]
            for batch in self.iter_batches(_ROWS_BATCH, columns, row_groups=[group]):
                end = start + batch.num_rows
                here = wanted[bisect.bisect_left(wanted, start) : bisect.bisect_left(wanted, end)]
                if here:
                    rows = batch.take(_indices([p - start for p in here])).to_pylist()
                    found.update(zip(here, rows, strict=True))
                if end > last:
                    break  # the rest of the group holds no asked row
                start = end
        return [found[p] for p in positions]


def _open(
    run_dir: str | os.PathLike[str], name: str, filesystem: Any, *, checked: bool = False
) -> _Table:
    """Table ``name`` of a finished run (its manifest checked first, unless ``checked``), checked."""
    fs, directory = resolve_filesystem(run_dir, filesystem)
    if not checked:
        read_manifest(directory, filesystem=fs)
    if name not in TABLES:
        raise ValueError(f"unknown run table {name!r}; the tables are {sorted(TABLES)}")
    path = f"{directory}/{FILES[name]}"
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        raise ArtifactError(f"{path}: not found; is {directory} a finished evalpipe run directory?")
    try:
        parquet = pq.ParquetFile(fs.open_input_file(path))
    except (pa.ArrowInvalid, OSError) as exc:
        raise ArtifactError(f"{path}: not a readable Parquet file ({exc})") from None
    metadata = parquet.schema_arrow.metadata or {}
    if SCHEMA_VERSION_KEY not in metadata:
        raise ArtifactError(
            f"{path}: no {SCHEMA_VERSION_KEY.decode()} metadata; not written by evalpipe"
        )
    version = _check_version(metadata[SCHEMA_VERSION_KEY].decode(), path)
    # a column the file lacks is filled in if its version is older than the column, else an error
    lacking = [c for c in TABLES[name].columns if c.name not in parquet.schema_arrow.names]
    missing = [c.name for c in lacking if c.since <= version]
    if missing:
        raise ArtifactError(f"{path}: missing column(s) {missing}")
    return _Table(fs, directory, name, parquet, [c.name for c in lacking])


def read_table(
    run_dir: str | os.PathLike[str],
    name: str,
    *,
    columns: Sequence[str] | None = None,
    filesystem: Any = None,
) -> Any:
    """One table of the run (``runs``, ``items``, ``scores`` or ``summary``) as a ``pyarrow.Table``.

    Raises:
        ArtifactError: when the run has no manifest (unfinished), or the file is missing, not
            evalpipe's, or lacks a column.
        SchemaVersionError: when it was written with a newer schema version.
    """
    return _open(run_dir, name, filesystem).read(columns)


def local_file(
    run_dir: str | os.PathLike[str],
    name: str,
    *,
    columns: Sequence[str],
    filesystem: Any = None,
) -> str | None:
    """The path of one table's file on this machine, after the checks ``read_table`` makes, for
    a reader that opens Parquet files itself (DuckDB's ``read_parquet``); None when that reader
    could not take the asked columns from it as they are: the file is on another filesystem,
    lacks a column its schema version did not have yet (``read_table`` fills those in), or its
    path holds a glob character.

    Raises:
        ArtifactError, SchemaVersionError: as ``read_table``.
    """
    return _open(run_dir, name, filesystem).local(columns)


def attach_tables(
    con: duckdb.DuckDBPyConnection,
    run_dir: str | os.PathLike[str],
    tables: Mapping[str, Sequence[str]],
    *,
    filesystem: Any = None,
) -> None:
    """Make each named table of the run a view in ``con`` of the asked columns and ``_pos``, the
    row's position in its file (``read_rows`` reads a row back by it).

    DuckDB reads a local file itself (only the asked columns, streamed: nothing is held between
    queries); a file elsewhere (a filesystem URI) or of an older schema version lacking an asked
    column is read with ``read_table`` and its Arrow table registered.

    Raises:
        ArtifactError, SchemaVersionError: as ``read_table``.
    """
    fs, directory = resolve_filesystem(run_dir, filesystem)
    read_manifest(directory, filesystem=fs)
    for name, columns in tables.items():
        _open(directory, name, fs, checked=True).attach(con, columns)


def run_tables(
    run_dir: str | os.PathLike[str], tables: Mapping[str, Sequence[str]], *, filesystem: Any = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the run's tables attached (``attach_tables``).

    Raises:
        ArtifactError, SchemaVersionError: as ``read_table``.
    """
    return connected(lambda con: attach_tables(con, run_dir, tables, filesystem=filesystem))


def connected(
    attach: Callable[[duckdb.DuckDBPyConnection], None],
) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB connection, after ``attach(con)`` (closed when that raises)."""
    import duckdb  # lazy: only the readers that query load it

    con = duckdb.connect(":memory:")
    try:
        attach(con)
    except BaseException:
        con.close()
        raise
    return con


def records(con: duckdb.DuckDBPyConnection, sql: str, params: Any = None) -> list[dict[str, Any]]:
    """A query's rows as dicts."""
    cursor = con.execute(sql, params)
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def iter_batches(
    run_dir: str | os.PathLike[str],
    name: str,
    *,
    columns: Sequence[str] | None = None,
    batch_size: int = 65_536,
    filesystem: Any = None,
) -> Iterator[Any]:
    """The rows of one table as ``pyarrow.RecordBatch``es of at most ``batch_size`` rows.

    Memory stays bounded by the batch size (and one row group), however large the file.

    Raises:
        ArtifactError, SchemaVersionError: as ``read_table``.
    """
    return _open(run_dir, name, filesystem).iter_batches(batch_size, columns)


def iter_runs(
    run_dir: str | os.PathLike[str], *, batch_size: int = 1_024, filesystem: Any = None
) -> Iterator[RunRecord]:
    """The target calls of runs.parquet, in the order they were written, streamed."""
    return _records(RunRecord, _open(run_dir, "runs", filesystem), "call", batch_size)


def read_runs(run_dir: str | os.PathLike[str], *, filesystem: Any = None) -> list[RunRecord]:
    """Every target call of runs.parquet (for ``--rescore``: ``record.target_run()`` gives the
    transcript back)."""
    return list(iter_runs(run_dir, filesystem=filesystem))


def read_summary(run_dir: str | os.PathLike[str], *, filesystem: Any = None) -> list[SummaryRow]:
    """summary.parquet's rows, in file order: one per provider × agent and per metric (the numbers
    every sink shows, computed by ``evalpipe.tally``)."""
    return list(_records(SummaryRow, _open(run_dir, "summary", filesystem), "row", 65_536))


def _records(
    cls: Callable[..., _R], table: _Table, source: Source, batch_size: int
) -> Iterator[_R]:
    """The table's rows as ``cls`` records, their fields the columns of ``source``."""
    read = _fields(TABLES[table.name].of(source))
    for batch in table.iter_batches(batch_size, [c.name for c in read.values()]):
        for row in batch.to_pylist():
            yield cls(**_record(read, row))


def _fields(columns: Sequence[Column]) -> dict[str, Column]:
    """The columns read back into a record's fields, by field (``Column.field``)."""
    return {c.field: c for c in columns if c.field is not None}


def _record(read: dict[str, Column], row: dict[str, Any]) -> dict[str, Any]:
    """A record's fields from a row: each from the column declared to hold it, decoded."""
    return {f: row[c.name] if c.decode is None else c.decode(row[c.name]) for f, c in read.items()}


def read_rows(
    run_dir: str | os.PathLike[str],
    name: str,
    positions: Sequence[int],
    *,
    columns: Sequence[str] | None = None,
    filesystem: Any = None,
) -> list[dict[str, Any]]:
    """The rows of one table at ``positions`` (0-based, in file order: what a query over
    ``read_table``'s rows numbers them), as dicts in the order asked.

    Only the row groups holding an asked row are read, a batch of rows at a time (memory stays
    bounded by a batch, not a row group of conversations), and only the asked rows become Python
    objects: a report's 200 listed items of a 100,000-item run do not read every conversation
    (``LOADED["item_rows"]`` counts them).

    Raises:
        ArtifactError, SchemaVersionError: as ``read_table``.
        IndexError: a position past the table's last row.
    """
    rows = _open(run_dir, name, filesystem).rows(positions, columns)
    LOADED["item_rows"] += len(set(positions))
    return rows


_ROWS_BATCH = 1_024
"""Rows ``read_rows`` decodes at a time."""


def read_not_passed(
    run_dir: str | os.PathLike[str], *, limit: int = 10, filesystem: Any = None
) -> dict[str, list[dict[str, Any]]]:
    """The items that did not pass, per result (its eval name), at most ``limit`` each, in order:
    ``item_id``, ``item_status``, ``input_text``, ``output_text``, ``item_metadata`` (a dict),
    ``why`` (the item's error, else its failed metrics and their reasons).

    A scan of scores.parquet's three small columns finds the rows of the listed items; only those
    are read in full and into Python (``LOADED["not_passed_rows"]`` counts them). Plain Python, not
    DuckDB: this runs in a run's own process (its Prefect artifact), where DuckDB costs ~40 MiB."""
    table = _open(run_dir, "scores", filesystem)
    small = table.read(["eval_run_id", "item_index", "item_status"])
    listed: dict[str, dict[int, list[int]]] = {}
    """Per result, its listed items in file order, each with the positions of its rows."""
    columns = (small.column(c).to_pylist() for c in small.column_names)
    for position, (level, index, status) in enumerate(zip(*columns, strict=True)):
        if status is None or status == "pass":
            continue
        items = listed.setdefault(level or "", {})
        if index in items or len(items) < limit:
            items.setdefault(index, []).append(position)
    wanted = [p for items in listed.values() for rows in items.values() for p in rows]
    read = iter(table.rows(wanted, _NOT_PASSED_COLUMNS))  # in ``wanted``'s order
    LOADED["not_passed_rows"] += len(wanted)
    out: dict[str, list[dict[str, Any]]] = {}
    for level, items in listed.items():
        for positions in items.values():
            rows = [next(read) for _ in positions]
            first = rows[0]
            failed = [
                f"{r['metric']}: {(r['reason'] or 'failed').splitlines()[0]}"
                for r in rows
                if r["passed"] is False
            ]
            out.setdefault(level, []).append(
                {
                    **{
                        k: first[k] for k in ("item_id", "item_status", "input_text", "output_text")
                    },
                    "item_metadata": json_object(first["item_metadata"]) or {},
                    "why": first["item_error_message"] or "; ".join(failed),
                }
            )
    return out


_NOT_PASSED_COLUMNS = [
    "item_id",
    "item_status",
    "item_error_message",
    "input_text",
    "output_text",
    "item_metadata",
    "metric",
    "passed",
    "reason",
]


def _tokens(*parts: Any) -> dict[str, int] | None:
    """A token_usage back from its four columns (input, output, total, JSON of the others)."""
    *counts, other = parts
    if other is None and counts.count(None) == 3:
        return None
    usage = {k: v for k, v in zip(_TOKENS[:3], counts, strict=True) if v is not None}
    if other is not None:
        usage.update(json.loads(other))
    return usage


def _usage(row: dict[str, Any]) -> RunUsage | None:
    """An item's usage back from its columns (``has_usage``: it was set, maybe all null)."""
    if not row["has_usage"]:
        return None
    return RunUsage(
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        total_tokens=row["total_tokens"],
        latency_seconds=row["latency_s"],
    )


_SHARED = ("metric", "reason", "label", "rating", "error_code", "evaluator", "item_status")
"""Columns whose values repeat across rows: one str object per distinct value, not per row."""
_TOKENS = ("input_tokens", "output_tokens", "total_tokens", "token_usage_other")
"""The four columns of a token_usage (an item's prefixed ``item_``), read back into one dict."""


def _indices(positions: list[int]) -> Any:
    """``positions`` as an Arrow int64 array, built from its bytes: ``pa.array`` of a Python list
    imports pandas (half a second of ``load_run`` in a fresh process)."""
    return pa.Array.from_buffers(
        pa.int64(), len(positions), [None, pa.py_buffer(array.array("q", positions))]
    )


def _pylists(batch: Any, names: Sequence[str], shared: dict[str, str]) -> list[list[Any]]:
    """Columns of ``batch`` as Python lists; the repeating text columns share their strings."""
    out = []
    for name in names:
        column = batch.column(name)
        if column.null_count == len(column):  # most score columns of a local check
            values: list[Any] = [None] * len(column)
        elif name in _SHARED:
            encoded = pc.dictionary_encode(column)
            distinct = [shared.setdefault(v, v) for v in encoded.dictionary.to_pylist()]
            values = [None if i is None else distinct[i] for i in encoded.indices.to_pylist()]
        else:
            values = column.to_pylist()
        out.append(values)
    return out


def _input_items(fs: Any, path: str) -> Callable[[str], Callable[[], list[EvalItem]]]:
    """Each agent's EvalItems of items.parquet, as a loader per agent: the file is read the first
    time any result asks for its agent's (each result gets its own list of the shared items)."""
    _open(path, "items", fs, checked=True)  # a missing or damaged file is an error now

    @functools.cache
    def load() -> dict[str, list[EvalItem]]:
        pairs: dict[str, list[tuple[int, EvalItem]]] = {}
        read = _fields(TABLES["items"].of("item"))
        for batch in _open(path, "items", fs, checked=True).iter_batches(65_536, None):
            for row in batch.to_pylist():
                item = EvalItem(**_record(read, row), usage=_usage(row))
                pairs.setdefault(row["agent"], []).append((row["item_index"], item))
            LOADED["items"] += batch.num_rows
        return {
            agent: [item for _, item in sorted(found, key=lambda p: p[0])]
            for agent, found in pairs.items()
        }

    return lambda agent: lambda: list(load().get(agent, []))


def _batch_records(
    cls: type, columns: Sequence[Column], prefix: str
) -> tuple[list[str], Callable[[Any, list[int], dict[str, str]], list[Any]]]:
    """The columns ``cls``'s records are read from, and how rows of a batch become records (a
    constructor mapped over the columns, in its field order): each field from the column declared
    to hold it (decoded), ``token_usage`` from its four columns (``prefix``ed), ``scores`` a new
    list per record."""
    read = _fields(columns)
    tokens = [f"{prefix}{name}" for name in _TOKENS]
    names = [c.name for c in read.values()] + tokens

    def records(batch: Any, rows: list[int], shared: dict[str, str]) -> list[Any]:
        taken = batch.select(names).take(_indices(rows))
        values = dict(zip(names, _pylists(taken, names, shared), strict=True))
        count = len(rows)
        arguments: list[list[Any]] = []
        for field in dataclasses.fields(cls):
            if field.name == "token_usage":
                parts = [values[t] for t in tokens]
                if all(part.count(None) == count for part in parts):
                    arguments.append([None] * count)
                else:
                    arguments.append(list(map(_tokens, *parts)))
            elif field.name == "scores":
                arguments.append([[] for _ in range(count)])
            else:
                column = read[field.name]
                stored = values[column.name]
                if column.decode is not None and stored.count(None) != count:
                    stored = list(map(column.decode, stored))
                arguments.append(stored)
        return list(map(cls, *arguments))

    return names, records


def _read_results(table: _Table) -> dict[tuple[int, str], dict[int, EvalItemResult]]:
    """scores.parquet's rows as EvalItemResults with their scores, per (provider, agent) and item
    index, built a batch at a time."""
    results: dict[tuple[int, str], dict[int, EvalItemResult]] = {}
    item_names, items_of = _batch_records(EvalItemResult, TABLES["scores"].of("result"), "item_")
    score_names, scores_of = _batch_records(EvalScoreResult, TABLES["scores"].of("score"), "")
    keys = ["provider_index", "agent", "item_index", "score_index"]
    shared: dict[str, str] = {}
    item: EvalItemResult  # set on the first row of every batch (a start)
    for batch in table.iter_batches(8_192, keys + item_names + score_names):
        providers, agents, indices, score_indices = _pylists(batch, keys, shared)
        rows = list(zip(providers, agents, indices, strict=True))
        # An item's rows are consecutive (RunWriter writes them so): its own columns are read
        # from its first row; a row whose item has no earlier row starts one.
        starts = [i for i, row in enumerate(rows) if i == 0 or row != rows[i - 1]]
        heads = iter(items_of(batch, starts, shared))
        scored = [i for i, k in enumerate(score_indices) if k is not None]
        scores = iter(scores_of(batch, scored, shared))
        starts_set = set(starts)
        for position, (provider_index, agent, index) in enumerate(rows):
            if position in starts_set:
                level = results.setdefault((provider_index, agent), {})
                head = next(heads)
                if index not in level:
                    level[index] = head
                    LOADED["item_results"] += 1
                item = level[index]
            if score_indices[position] is not None:
                item.scores.append(next(scores))
    return results


def load_run(
    run_dir: str | os.PathLike[str], *, input_items: bool = True, filesystem: Any = None
) -> list[EvalResults]:
    """The run's nested EvalResults: one per provider in provider order, as the evaluation made them.

    The top level is agent "overall"; ``sub_results`` hold the other agents in their original order.
    Items keep their order, every score and item field comes back, and ``input_items`` are the
    EvalItems of items.parquet for that agent. Custom split strategies (callables) are not restored:
    such items come back with ``split_strategy=None``.

    The item results and their scores are built at once (about 2 µs and 1 KiB per score); the
    EvalItems, the costly part (roughly 20 KiB and 250 µs per item with its conversation), are
    read from items.parquet the first time any result's ``input_items`` is read, for every agent
    at once. ``input_items=False`` leaves them empty. For large runs, query the tables instead
    (``read_table``, ``iter_batches``, duckdb).

    Raises:
        ArtifactError: when the directory is not a finished run or a file is damaged.
        SchemaVersionError: when it was written with a newer schema version.
    """
    fs, path = resolve_filesystem(run_dir, filesystem)
    read_manifest(path, filesystem=fs)  # once: the tables below are opened checked
    loader = _input_items(fs, path) if input_items else None
    results = _read_results(_open(path, "scores", fs, checked=True))
    summary = _records(SummaryRow, _open(path, "summary", fs, checked=True), "row", 65_536)
    levels = sorted(
        (r for r in summary if r.kind == "result"), key=lambda r: (r.provider_index, r.agent_index)
    )
    out: dict[int, EvalResults] = {}
    for row in levels:
        by_index = results.get((row.provider_index, row.agent), {})
        result = EvalResults(
            provider=row.provider,
            eval_id=row.eval_id or "",
            run_id=row.eval_run_id or "",
            status=row.status or "completed",
            result_counts=json_object(row.result_counts),
            report_url=row.report_url,
            error=row.error,
            per_evaluator=json_object(row.per_evaluator) or {},
        )
        # assigned, not passed in: the item results are built already (validating them again
        # costs seconds), and the model does not validate assignments
        result.items = [by_index[i] for i in sorted(by_index)]
        if loader is not None:
            result.defer_input_items(loader(row.agent))
        if row.agent == OVERALL:
            out[row.provider_index] = result
        else:
            parent = out.get(row.provider_index)
            if parent is None:
                raise ArtifactError(
                    f"summary.parquet: agent {row.agent!r} of provider {row.provider!r} has "
                    "no overall row"
                )
            parent.sub_results[row.agent] = result
    return [out[i] for i in sorted(out)]
