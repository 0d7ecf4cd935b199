"""Reading a run directory back: the manifest, tables and record batches, run records, and the
nested EvalResults (``load_run``).

Every reader checks the schema version first (the manifest's and each file's) and refuses a
newer or unknown one with a message that says which evalpipe to use.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import fields
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from pydantic import TypeAdapter

from evalpipe.artifacts.schema import (
    ADDED,
    FILES,
    MANIFEST_FILE,
    RUN_NAME,
    SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    SCHEMAS,
    ArtifactError,
    RunRecord,
    SchemaVersionError,
)
from evalpipe.artifacts.writer import SPLIT_AT_PREFIX, resolve_filesystem
from evalpipe.itemize import SplitAt
from evalpipe.items import ConversationSplit, EvalItem, ExpectedToolCall
from evalpipe.messages import Message, ToolDefinition
from evalpipe.results import Diagnostic, EvalItemResult, EvalResults, EvalScoreResult, RubricScore
from evalpipe.tally import OVERALL, SummaryRow
from evalpipe.transcripts import RunUsage

__all__ = [
    "iter_batches",
    "iter_runs",
    "load_run",
    "read_manifest",
    "read_not_passed",
    "read_runs",
    "read_summary",
    "read_table",
]

_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
_TOOLS: TypeAdapter[list[ToolDefinition]] = TypeAdapter(list[ToolDefinition])
_EXPECTED: TypeAdapter[list[ExpectedToolCall]] = TypeAdapter(list[ExpectedToolCall])
_SPLITS = {member.value: member for member in ConversationSplit}
SUMMARY_ROW_COLUMNS = [f.name for f in fields(SummaryRow)]
"""The columns of summary.parquet a SummaryRow holds (not the run's name and times)."""


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


class _Table:
    """An open table file, its schema version, and the columns it lacks (added by later versions)."""

    def __init__(self, parquet: Any, name: str, directory: str, version: int) -> None:
        self.parquet = parquet
        self.name = name
        self.run_name = directory.rstrip("/").rsplit("/", 1)[-1]
        present = set(parquet.schema_arrow.names)
        self.absent = [c for c in ADDED[name] if c not in present]

    def _columns(self, columns: Sequence[str] | None) -> tuple[list[str] | None, list[str]]:
        wanted = list(columns) if columns is not None else list(SCHEMAS[self.name].names)
        missing = [c for c in wanted if c in self.absent]
        if not missing and columns is None:
            return None, []
        return [c for c in wanted if c not in missing], missing

    def _complete(self, data: Any, wanted: Sequence[str] | None, missing: Sequence[str]) -> Any:
        """``data`` with the absent columns filled in (``run_name``: the directory's name; the
        timestamps null), in the asked order."""
        if not missing:
            return data
        schema = SCHEMAS[self.name]
        order = list(wanted) if wanted is not None else list(schema.names)
        arrays = []
        for column in order:
            if column in missing:
                kind = schema.field(column).type
                value = self.run_name if column == RUN_NAME else None
                arrays.append(pa.array([value] * data.num_rows, type=kind))
            else:
                arrays.append(data.column(column))
        maker = pa.Table if isinstance(data, pa.Table) else pa.RecordBatch
        return maker.from_arrays(arrays, names=order)

    def read(self, columns: Sequence[str] | None) -> Any:
        present, missing = self._columns(columns)
        wanted = list(columns) if columns is not None else None
        return self._complete(self.parquet.read(columns=present), wanted, missing)

    def iter_batches(self, batch_size: int, columns: Sequence[str] | None) -> Iterator[Any]:
        present, missing = self._columns(columns)
        wanted = list(columns) if columns is not None else None
        for batch in self.parquet.iter_batches(batch_size=batch_size, columns=present):
            yield self._complete(batch, wanted, missing)


def _open(fs: Any, directory: str, name: str) -> _Table:
    if name not in SCHEMAS:
        raise ValueError(f"unknown run table {name!r}; the tables are {sorted(SCHEMAS)}")
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
    added = ADDED[name]
    missing = [
        c
        for c in SCHEMAS[name].names
        if c not in parquet.schema_arrow.names and added.get(c, 0) <= version
    ]
    if missing:
        raise ArtifactError(f"{path}: missing column(s) {missing}")
    return _Table(parquet, name, directory, version)


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
    fs, path = resolve_filesystem(run_dir, filesystem)
    read_manifest(path, filesystem=fs)
    return _open(fs, path, name).read(columns)


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
    fs, path = resolve_filesystem(run_dir, filesystem)
    read_manifest(path, filesystem=fs)
    return _open(fs, path, name).iter_batches(batch_size, columns)


def iter_runs(
    run_dir: str | os.PathLike[str], *, batch_size: int = 1_024, filesystem: Any = None
) -> Iterator[RunRecord]:
    """The target calls of runs.parquet, in the order they were written, streamed."""
    names = [n for n in SCHEMAS["runs"].names if n != RUN_NAME]
    for batch in iter_batches(
        run_dir, "runs", columns=names, batch_size=batch_size, filesystem=filesystem
    ):
        for row in batch.to_pylist():
            yield RunRecord(**row)


def read_runs(run_dir: str | os.PathLike[str], *, filesystem: Any = None) -> list[RunRecord]:
    """Every target call of runs.parquet (for ``--rescore``: ``record.target_run()`` gives the
    transcript back)."""
    return list(iter_runs(run_dir, filesystem=filesystem))


def read_summary(run_dir: str | os.PathLike[str], *, filesystem: Any = None) -> list[SummaryRow]:
    """summary.parquet's rows, in file order: one per provider × agent and per metric (the numbers
    every sink shows, computed by ``evalpipe.tally``)."""
    table = read_table(run_dir, "summary", columns=SUMMARY_ROW_COLUMNS, filesystem=filesystem)
    return [SummaryRow(**row) for row in table.to_pylist()]


def read_not_passed(
    run_dir: str | os.PathLike[str], *, limit: int = 10, filesystem: Any = None
) -> dict[str, list[dict[str, Any]]]:
    """The items that did not pass, per result (its eval name), at most ``limit`` each, in order:
    ``item_id``, ``item_status``, ``input_text``, ``output_text``, ``item_metadata`` (a dict),
    ``why`` (the item's
    error, else its failed metrics and their reasons). Only scores.parquet's rows of such items are
    read into Python."""
    columns = [
        "eval_run_id",
        "item_index",
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
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for batch in iter_batches(run_dir, "scores", columns=columns, filesystem=filesystem):
        status = batch.column("item_status")
        keep = pc.not_equal(status, "pass")
        if not pc.any(keep).as_py():
            continue
        for row in batch.filter(keep).to_pylist():
            level = out.setdefault(row["eval_run_id"] or "", {})
            item = level.get(row["item_index"])
            if item is None:
                if len(level) >= limit:
                    continue
                item = level[row["item_index"]] = {
                    "item_id": row["item_id"],
                    "item_status": row["item_status"],
                    "input_text": row["input_text"],
                    "output_text": row["output_text"],
                    "item_metadata": _loads(row["item_metadata"]) or {},
                    "error": row["item_error_message"],
                    "failed": [],
                }
            if row["passed"] is False:
                reason = (row["reason"] or "failed").splitlines()[0]
                item["failed"].append(f"{row['metric']}: {reason}")

    def finished(item: dict[str, Any]) -> dict[str, Any]:
        error, failed = item.pop("error"), item.pop("failed")
        return {**item, "why": error or "; ".join(failed)}

    return {
        level: [finished(item) for _, item in sorted(items.items())] for level, items in out.items()
    }


def _tokens(
    input_tokens: int | None, output_tokens: int | None, total_tokens: int | None, other: str | None
) -> dict[str, int] | None:
    values = (
        ("input_tokens", input_tokens),
        ("output_tokens", output_tokens),
        ("total_tokens", total_tokens),
    )
    if other is None and all(v is None for _, v in values):
        return None
    usage = {k: v for k, v in values if v is not None}
    if other is not None:
        usage.update(json.loads(other))
    return usage


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _split(name: str | None) -> Any:
    """A stored split back: a ConversationSplit, a workflow agent's cut (``at:N``), else None."""
    if name is None:
        return None
    if name.startswith(SPLIT_AT_PREFIX) and name[len(SPLIT_AT_PREFIX) :].isdigit():
        return SplitAt(int(name[len(SPLIT_AT_PREFIX) :]))
    return _SPLITS.get(name)


def _item(row: dict[str, Any]) -> EvalItem:
    split = row["split"]
    return EvalItem(
        conversation=_MESSAGES.validate_json(row["conversation"]) if row["conversation"] else [],
        tools=None
        if row["tool_definitions"] is None
        else _TOOLS.validate_json(row["tool_definitions"]),
        context=row["context"],
        expected_output=row["expected_output"],
        expected_tool_calls=None
        if row["expected_tool_calls"] is None
        else _EXPECTED.validate_json(row["expected_tool_calls"]),
        # A custom splitter is a callable: it is not imported back from a data file.
        split_strategy=_split(split),
        item_id=row["item_id"],
        query_index=row["query_index"],
        repetition=row["repetition"],
        agent=row["item_agent"],
        usage=RunUsage(
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            total_tokens=row["total_tokens"],
            latency_seconds=row["latency_s"],
        )
        if row["has_usage"]
        else None,
        error_code=row["error_code"],
        error_message=row["error_message"],
        metadata=json.loads(row["metadata"]),
    )


def _item_result(row: dict[str, Any]) -> EvalItemResult:
    return EvalItemResult(
        item_id=row["item_id"],
        status=row["item_status"],
        scores=[],
        error_code=row["item_error_code"],
        error_message=row["item_error_message"],
        response_id=row["response_id"],
        input_text=row["input_text"],
        output_text=row["output_text"],
        token_usage=_tokens(
            row["item_input_tokens"],
            row["item_output_tokens"],
            row["item_total_tokens"],
            row["item_token_usage_other"],
        ),
        metadata=_loads(row["item_metadata"]),
    )


def _score(row: dict[str, Any]) -> EvalScoreResult:
    diagnostics = _loads(row["diagnostics"])
    dimensions = _loads(row["dimensions"])
    return EvalScoreResult(
        name=row["metric"],
        score=row["score"],
        passed=row["passed"],
        sample=_loads(row["sample"]),
        dimensions=None if dimensions is None else [RubricScore(**d) for d in dimensions],
        reason=row["reason"],
        threshold=row["threshold"],
        label=row["label"],
        error_message=row["error_message"],
        rating=row["rating"],
        diagnostics=None if diagnostics is None else [Diagnostic(**d) for d in diagnostics],
        error_code=row["error_code"],
        evaluator=row["evaluator"],
        token_usage=_tokens(
            row["input_tokens"], row["output_tokens"], row["total_tokens"], row["token_usage_other"]
        ),
        latency_s=row["latency_s"],
    )


def load_run(
    run_dir: str | os.PathLike[str], *, input_items: bool = True, filesystem: Any = None
) -> list[EvalResults]:
    """The run's nested EvalResults: one per provider in provider order, as the evaluation made them.

    The top level is agent "overall"; ``sub_results`` hold the other agents in their original order.
    Items keep their order, every score and item field comes back, and ``input_items`` are the
    EvalItems of items.parquet for that agent. Custom split strategies (callables) are not restored:
    such items come back with ``split_strategy=None``.

    Everything is materialized as Python objects (roughly 20 KiB and 300 µs per item with its
    conversation): for large runs query the tables instead (``read_table``, ``iter_batches``,
    duckdb), or pass ``input_items=False`` to skip rebuilding the EvalItems, the costly part.

    Raises:
        ArtifactError: when the directory is not a finished run or a file is damaged.
        SchemaVersionError: when it was written with a newer schema version.
    """
    read_manifest(run_dir, filesystem=filesystem)
    common = {"filesystem": filesystem}

    items: dict[str, list[tuple[int, EvalItem]]] = {}
    if input_items:
        for batch in iter_batches(run_dir, "items", columns=SCHEMAS["items"].names, **common):
            for row in batch.to_pylist():
                items.setdefault(row["agent"], []).append((row["item_index"], _item(row)))

    results: dict[tuple[int, str], dict[int, EvalItemResult]] = {}
    for batch in iter_batches(run_dir, "scores", columns=SCHEMAS["scores"].names, **common):
        for row in batch.to_pylist():
            level = results.setdefault((row["provider_index"], row["agent"]), {})
            item = level.get(row["item_index"])
            if item is None:
                item = level[row["item_index"]] = _item_result(row)
            if row["score_index"] is not None:
                item.scores.append(_score(row))

    summary = read_table(run_dir, "summary", columns=SCHEMAS["summary"].names, **common)
    levels = sorted(
        (r for r in summary.to_pylist() if r["kind"] == "result"),
        key=lambda r: (r["provider_index"], r["agent_index"]),
    )
    items_by_agent = {
        agent: [item for _, item in sorted(pairs, key=lambda p: p[0])]
        for agent, pairs in items.items()
    }
    out: dict[int, EvalResults] = {}
    for row in levels:
        by_index = results.get((row["provider_index"], row["agent"]), {})
        result = EvalResults(
            provider=row["provider"],
            eval_id=row["eval_id"] or "",
            run_id=row["eval_run_id"] or "",
            status=row["status"] or "completed",
            result_counts=_loads(row["result_counts"]),
            report_url=row["report_url"],
            error=row["error"],
            per_evaluator=_loads(row["per_evaluator"]) or {},
            items=[by_index[i] for i in sorted(by_index)],
            input_items=list(items_by_agent.get(row["agent"], [])),
        )
        if row["agent"] == OVERALL:
            out[row["provider_index"]] = result
        else:
            parent = out.get(row["provider_index"])
            if parent is None:
                raise ArtifactError(
                    f"summary.parquet: agent {row['agent']!r} of provider {row['provider']!r} has "
                    "no overall row"
                )
            parent.sub_results[row["agent"]] = result
    return [out[i] for i in sorted(out)]
