"""RunWriter: streams a run's rows into Parquet as results arrive, and commits the files atomically.

Rows are buffered per file and appended as record batches (one row group per flush), so memory
stays bounded by the flush size however many items a run has. Each file is written to a hidden
temporary name and renamed into place on success; manifest.json is written last and so marks a
finished run.
"""

from __future__ import annotations

import bisect
import contextlib
import datetime as dt
import importlib.metadata
import itertools
import json
import operator
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, astuple, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_json

from evalpipe.artifacts.schema import (
    FILES,
    ITEMS_SCHEMA,
    MANIFEST_FILE,
    RUN_NAME,
    RUNS_SCHEMA,
    SCHEMA_VERSION,
    SCORES_SCHEMA,
    SUMMARY_SCHEMA,
    RunRecord,
)
from evalpipe.itemize import SplitAt
from evalpipe.items import ConversationSplit, EvalItem, ExpectedToolCall
from evalpipe.messages import Message, TextContent, ToolDefinition
from evalpipe.results import EvalItemResult, EvalResults, EvalScoreResult
from evalpipe.tally import FAIL, PASS, SummaryRow, SummaryTally, score_status
from evalpipe.transcripts import TargetRun, Transcript

__all__ = [
    "SPLIT_AT_PREFIX",
    "EncodedBatch",
    "EncodedItems",
    "EncodedRows",
    "EncodedScores",
    "RowEncoder",
    "RunWriter",
    "resolve_filesystem",
]

SPLIT_AT_PREFIX = "at:"
"""items.parquet's ``split`` of a workflow agent's item: ``at:N``, the conversation cut after its
first N messages (what the agent received | what it produced)."""

_TOKEN_KEYS = ("input_tokens", "output_tokens", "total_tokens")
_PACKAGES = ("evalpipe", "prefect", "pyarrow", "pydantic", "azure-ai-projects")

_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
_TOOLS: TypeAdapter[list[ToolDefinition]] = TypeAdapter(list[ToolDefinition])
_EXPECTED: TypeAdapter[list[ExpectedToolCall]] = TypeAdapter(list[ExpectedToolCall])


def _text_message_json(message: Any) -> str | None:
    """The JSON of a Message of one TextContent and no author (a query), as pydantic writes it,
    from the JSON of its role and text; None for any other message (or when the models are not
    laid out as this expects, ``_TEXT_MESSAGES``)."""
    if type(message) is not Message or message.author_name is not None or not _TEXT_MESSAGES:
        return None
    contents = message.contents
    if len(contents) != 1:
        return None
    content = contents[0]
    role, text = message.role, content.text if type(content) is TextContent else None
    if type(text) is not str or type(role) is not str or content.type != "text":
        return None
    role_json = _ROLES.get(role)
    if role_json is None:
        if len(_ROLES) >= 64:
            _ROLES.clear()
        role_json = _ROLES[role] = to_json(role).decode()
    return (
        f'{{"role":{role_json},"contents":[{{"type":"text","text":{to_json(text).decode()}}}],'
        '"author_name":null}'
    )


_ROLES: dict[str, str] = {}
"""The JSON of a role, by role."""


def _plain_model(model: type[BaseModel], names: list[str]) -> bool:
    """The model's JSON is exactly these fields, in order, each written by its type's own
    serializer (no custom serializers, computed fields or annotated field metadata)."""
    decorators = model.__pydantic_decorators__
    return (
        list(model.model_fields) == names
        and not any(f.metadata or f.exclude for f in model.model_fields.values())
        and not decorators.field_serializers
        and not decorators.model_serializers
        and not decorators.computed_fields
    )


def _text_messages_laid_out() -> bool:
    """``_text_message_json`` writes what pydantic writes: the models hold the fields it expects,
    and it agrees with pydantic on samples (quotes, escapes, non-ASCII, roles)."""
    if not (
        _plain_model(Message, ["role", "contents", "author_name"])
        and _plain_model(TextContent, ["type", "text"])
    ):
        return False
    samples = [
        Message(role, [text])
        for role, text in (
            ("user", 'What\'s "the" weather?\n\t\\ \u00e9\u4e2d\U0001f600 \x00\x1f</script>'),
            ("system", ""),
            ("User", "x"),
        )
    ]
    return all(
        _text_message_json(m) == Message.__pydantic_serializer__.to_json(m, fallback=str).decode()
        for m in samples
    )


_TEXT_MESSAGES = True
_TEXT_MESSAGES = _text_messages_laid_out()
"""``_text_message_json`` may write messages (checked once, at import)."""


def resolve_filesystem(run_dir: str | os.PathLike[str], filesystem: Any = None) -> tuple[Any, str]:
    """The pyarrow filesystem and the path inside it for ``run_dir``.

    ``filesystem`` may be a ``pyarrow.fs.FileSystem``, an fsspec filesystem (wrapped), or None: then
    ``run_dir`` is a local path or a URI that ``pyarrow.fs.FileSystem.from_uri`` understands
    (``s3://bucket/runs/x``, ``file:///tmp/x``) or, failing that, fsspec (``memory://``, ``az://``
    with adlfs installed).
    """
    text = os.fspath(run_dir)
    if filesystem is None:
        if "://" in text:
            return _from_uri(text)
        return pafs.LocalFileSystem(), Path(text).resolve().as_posix()
    if not isinstance(filesystem, pafs.FileSystem):
        filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    return filesystem, text.rstrip("/") or text


def _from_uri(uri: str) -> tuple[Any, str]:
    """pyarrow's own filesystem for a URI (S3, GCS, Azure, HDFS, local), else fsspec's wrapped
    (``abfs://`` with adlfs, ``memory://``, ...).

    Raises:
        ValueError: for a URI neither understands, naming the package to install.
    """
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, str(path)
    except (ValueError, NotImplementedError) as exc:
        arrow_error = str(exc)
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        raise ValueError(
            f"{uri!r}: pyarrow cannot open it ({arrow_error}) and fsspec has no filesystem for "
            f"it ({exc}); install the scheme's package (s3fs for s3://, adlfs for abfs:// and "
            "az://, gcsfs for gs://)"
        ) from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), str(path)


def _renames_atomically(fs: Any) -> bool:
    """Local files (also under a SubTreeFileSystem) rename with os.replace semantics; object stores
    have no rename (pyarrow copies then deletes), so files are written under their final name."""
    if isinstance(fs, pafs.SubTreeFileSystem):
        return _renames_atomically(fs.base_fs)
    return isinstance(fs, pafs.LocalFileSystem)


def _json(value: Any) -> str:
    # pydantic-core's serializer: several times faster than json.dumps on the small dicts of every row.
    return to_json(value, fallback=_json_default).decode()


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def _opt_json(value: Any) -> str | None:
    return None if value is None else _json(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _opt_int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _opt_float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _opt_bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _split_tokens(
    usage: Mapping[str, Any] | None,
) -> tuple[int | None, int | None, int | None, str | None]:
    """A token_usage dict as (input, output, total, JSON of its other keys).

    The JSON is also written when there are no standard integer keys at all, so that ``{}`` is
    told apart from None on the way back.
    """
    if usage is None:
        return None, None, None, None
    standard = {
        k: v for k in _TOKEN_KEYS if isinstance(v := usage.get(k), int) and not isinstance(v, bool)
    }
    other = {k: v for k, v in usage.items() if k not in standard}
    return (
        standard.get("input_tokens"),
        standard.get("output_tokens"),
        standard.get("total_tokens"),
        _json(other) if other or not standard else None,
    )


def _split_name(strategy: Any) -> str | None:
    """How an item's split strategy is stored: the member's value, a custom splitter's name, or None."""
    if strategy is None:
        return None
    if isinstance(strategy, ConversationSplit):
        return strategy.value
    if isinstance(strategy, SplitAt):
        return f"{SPLIT_AT_PREFIX}{strategy.index}"
    module = getattr(strategy, "__module__", None)
    name = getattr(strategy, "__qualname__", None) or type(strategy).__qualname__
    return f"{module}:{name}" if module else str(name)


def _column(
    kept: frozenset[type], convert: Callable[[Any], Any]
) -> Callable[[list[Any]], list[Any]]:
    """A column's converter: the list itself when every value's type is in ``kept`` (the common
    case, no copy), else ``convert`` of every value."""

    def converted(values: list[Any]) -> list[Any]:
        if kept.issuperset(map(type, values)):
            return values
        return [convert(v) for v in values]

    return converted


_NONE = type(None)
_strs = _column(frozenset({str, _NONE}), lambda v: None if v is None else str(v))
"""``_opt_str`` of every value."""
_texts = _column(frozenset({str}), str)
"""``str`` of every value (a non-null column)."""
_ints = _column(frozenset({int, _NONE}), _opt_int)
"""``_opt_int`` of every value."""
_floats = _column(frozenset({float, _NONE}), _opt_float)
"""``_opt_float`` of every value."""
_bools = _column(frozenset({bool, _NONE}), _opt_bool)
"""``_opt_bool`` of every value."""


def _jsons(values: list[Any]) -> list[str | None]:
    """``_opt_json`` of every value."""
    return [None if v is None else _json(v) for v in values]


def _token_columns(usages: list[Any]) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """``_split_tokens`` of every token_usage, as four columns."""
    n = len(usages)
    if usages.count(None) == n:
        nulls: list[Any] = [None] * n
        return nulls, nulls, nulls, nulls
    split = [_split_tokens(u) for u in usages]
    ins, outs, totals, others = (list(c) for c in zip(*split, strict=True))
    return ins, outs, totals, others


def _repeat(value: Any, n: int, type_: Any) -> Any:
    """``pa.array([value] * n, type=type_)``, without the list."""
    if value is None:
        return pa.nulls(n, type_)
    return pa.repeat(pa.scalar(value, type=type_), n)


def _columns(getters: Sequence[Callable[[Any], Any]], objects: Sequence[Any]) -> list[list[Any]]:
    """``[[getter(o) for o in objects] for getter in getters]``, each column by a C-level getter
    mapped over the objects (no bytecode per value)."""
    return [list(map(getter, objects)) for getter in getters]


def _all_of(values: Sequence[Any], type_: type) -> bool:
    """Every value is exactly of ``type_`` (no subclass)."""
    return list(map(type, values)).count(type_) == len(values)


def _all_null(values: Sequence[Any]) -> bool:
    """Every value is None (``values.count(None) == len(values)``, looking at the first one
    before the whole list)."""
    n = len(values)
    return n == 0 or (values[0] is None and values.count(None) == n)


def _pairs(pairs: list[tuple[Any, Any]]) -> tuple[list[Any], list[Any]]:
    """A list of pairs as two lists."""
    return list(map(operator.itemgetter(0), pairs)), list(map(operator.itemgetter(1), pairs))


def _add3(a: int, b: int, c: int) -> int:
    return a + b + c


_ITEM_FIELDS = tuple(
    map(
        operator.attrgetter,
        (
            "item_id",
            "agent",
            "query_index",
            "repetition",
            "metadata",
            "usage",
            "split_strategy",
            "expected_tool_calls",
            "tools",
            "expected_output",
            "context",
            "error_code",
            "error_message",
        ),
    )
)
"""The attributes of an EvalItem that items.parquet's rows take."""
_item_id = operator.attrgetter("item_id")
_ITEM_RESULT_FIELDS = tuple(
    map(
        operator.attrgetter,
        (
            "item_id",
            "status",
            "error_code",
            "error_message",
            "response_id",
            "input_text",
            "output_text",
            "token_usage",
            "metadata",
            "scores",
        ),
    )
)
"""The attributes of an EvalItemResult that scores.parquet's rows take."""
_SCORE_FIELDS = tuple(
    map(
        operator.attrgetter,
        (
            "name",
            "evaluator",
            "score",
            "passed",
            "label",
            "rating",
            "reason",
            "threshold",
            "error_code",
            "error_message",
            "diagnostics",
            "dimensions",
            "sample",
            "token_usage",
            "latency_s",
        ),
    )
)
"""The attributes of an EvalScoreResult that scores.parquet's rows take."""
_RUN_FIELDS = tuple(
    map(
        operator.attrgetter,
        (
            "query_index",
            "repetition",
            "error_code",
            "error_message",
            "started_at",
            "ended_at",
            "usage",
        ),
    )
)
"""The attributes of a TargetRun (or WorkflowRun) that runs.parquet's rows take."""
_USAGE_FIELDS = tuple(
    map(
        operator.attrgetter,
        ("latency_seconds", "input_tokens", "output_tokens", "total_tokens"),
    )
)
"""The attributes of a RunUsage that runs.parquet's rows take."""


class _Sink:
    """One Parquet file: rows buffered as Arrow columns, flushed as one record batch (row group)
    whenever ``max_rows`` rows or ``max_bytes`` of text are pending.

    ``constants`` are columns with one value on every row (the run's name): they are not passed;
    every other column is, in schema order (``extend``: one list or Arrow array per column).
    """

    def __init__(
        self,
        fs: Any,
        directory: str,
        name: str,
        schema: Any,
        *,
        atomic: bool,
        max_rows: int,
        constants: Mapping[str, Any],
    ) -> None:
        self.fs = fs
        self.schema = schema
        self.constants = dict(constants)
        self._varying = [f for f in schema if f.name not in self.constants]
        self.final_path = f"{directory}/{FILES[name]}"
        self.path = (
            f"{directory}/.{FILES[name]}.{uuid.uuid4().hex}.tmp" if atomic else self.final_path
        )
        self.atomic = atomic
        self.max_rows = max_rows
        self.max_bytes = 32 * 1024 * 1024
        self._chunks: list[list[Any]] = []
        """Pending rows: Arrow arrays, one per varying column, per extend (or part of one)."""
        self.pending_rows = 0
        self.pending_bytes = 0
        self.written = 0
        self._stream: Any = None
        self._writer: Any = None

    def append(self, row: tuple[Any, ...], size: int = 0) -> None:
        """One row (every varying column's value, in schema order)."""
        self.extend([[v] for v in row], [size])

    def extend(self, columns: Sequence[Any], sizes: Sequence[int]) -> None:
        """Rows as columns (lists or Arrow arrays, one per varying column, in schema order) and
        each row's text size; flushed at the same rows as appending them one by one would."""
        n = len(sizes)
        if n == 0:
            return
        arrays = [
            c
            if isinstance(c, pa.Array)
            else pa.nulls(n, f.type)
            if _all_null(c)
            else pa.array(c, type=f.type)
            for c, f in zip(columns, self._varying, strict=True)
        ]
        start = 0
        while start < n:
            # The row at which a one-by-one append would flush: max_rows or max_bytes reached.
            cut = min(n, start + self.max_rows - self.pending_rows)
            budget = self.max_bytes - self.pending_bytes
            taken = sum(sizes[start:cut])
            if taken >= budget and cut > start:
                # the first row at which the running total reaches the budget (sizes are >= 0,
                # so the running totals only grow)
                totals = list(itertools.accumulate(sizes[start:cut]))
                at = bisect.bisect_left(totals, budget)
                cut, taken = start + at + 1, totals[at]
            rows = cut - start
            self._chunks.append(
                arrays if start == 0 and cut == n else [a.slice(start, rows) for a in arrays]
            )
            self.pending_rows += rows
            self.pending_bytes += taken
            start = cut
            if self.pending_rows >= self.max_rows or self.pending_bytes >= self.max_bytes:
                self.flush()

    def flush(self) -> None:
        """Write the pending rows as one row group. Each column's pieces are let go as soon as
        they are joined, so the rows are in memory about once, not twice (what was received from
        a worker is held by those pieces); once written, the memory the encoding freed is handed
        back to the system (``release_unused``)."""
        if not self.pending_rows:
            return
        n = self.pending_rows
        chunks = self._chunks
        columns: dict[str, Any] = {}
        for k, f in enumerate(self._varying):
            parts = [chunk[k] for chunk in chunks]
            for chunk in chunks:
                chunk[k] = None  # the sink's own lists (extend): this column's pieces go now
            columns[f.name] = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
            del parts
        self._chunks = []
        arrays = [
            _repeat(self.constants[f.name], n, f.type)
            if f.name in self.constants
            else columns.pop(f.name)
            for f in self.schema
        ]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        del arrays
        self._open().write_batch(batch)
        del batch
        self.written += n
        self.pending_rows = 0
        self.pending_bytes = 0
        pa.default_memory_pool().release_unused()

    def _open(self) -> Any:
        if self._writer is None:
            self._stream = self.fs.open_output_stream(self.path)
            self._writer = pq.ParquetWriter(
                self._stream, self.schema, compression="zstd", write_statistics=True
            )
        return self._writer

    def close(self) -> None:
        """Flush, finish the file (an empty table when no row came) and leave it at the temp path."""
        self.flush()
        self._open().close()
        self._stream.close()

    def commit(self) -> None:
        if self.atomic:
            self.fs.move(self.path, self.final_path)

    def abort(self) -> None:
        """Drop the file, leaving nothing under the final name (atomic mode) or the partial file."""
        for closable in (self._writer, self._stream):
            if closable is not None:
                # Best effort: the run is already failing; the original error is what matters.
                with contextlib.suppress(Exception):
                    closable.close()
        if self._writer is not None or self._stream is not None:
            with contextlib.suppress(OSError):
                self.fs.delete_file(self.path)
        self._chunks = []
        self.pending_rows = 0


def _varying(schema: Any) -> list[Any]:
    """A table's columns other than the run's name (a constant of every sink), in schema order."""
    return [f for f in schema if f.name != RUN_NAME]


_RUNS_FIELDS = _varying(RUNS_SCHEMA)
_ITEMS_FIELDS = _varying(ITEMS_SCHEMA)
_SCORES_FIELDS = _varying(SCORES_SCHEMA)
_ITEM_INDEX = 1
"""items.parquet's ``index`` column, among its varying columns (counted per agent over the run)."""
_SCORE_ITEM_INDEX = 4
"""scores.parquet's ``item_index`` column, among its varying columns (counted per provider and
agent over the run)."""


def _arrays(columns: Sequence[Any], fields: Sequence[Any], n: int) -> list[Any]:
    """Columns (lists or Arrow arrays) as Arrow arrays, converted as ``_Sink.extend`` converts
    them; a None column stays None (filled in when the rows are appended)."""
    return [
        c
        if c is None or isinstance(c, pa.Array)
        else pa.nulls(n, f.type)
        if _all_null(c)
        else pa.array(c, type=f.type)
        for c, f in zip(columns, fields, strict=True)
    ]


@dataclass(slots=True)
class EncodedRows:
    """Rows of one table as Arrow arrays (one per varying column, in schema order) and each row's
    text size: what one ``_Sink.extend`` takes."""

    arrays: list[Any]
    sizes: list[int]


@dataclass(slots=True)
class EncodedItems(EncodedRows):
    """items.parquet's rows of a batch, deduplicated within the batch; the ``index`` column is
    None (counted when appended) and the rows' agents and item ids say which rows an earlier
    batch wrote already."""

    agents: list[str]
    item_ids: list[str | None]


@dataclass(slots=True)
class EncodedScores(EncodedRows):
    """scores.parquet's rows of one result level; ``item_index`` is None (counted per provider and
    agent when appended): ``items`` items, row ``r`` of item ``where[r]`` (None: one row each)."""

    provider_index: int
    agent: str
    items: int
    where: Any


@dataclass(slots=True)
class EncodedBatch:
    """A batch's rows of runs, items and scores, built without files (``RowEncoder``), to be
    appended by ``RunWriter.add_encoded``: rows whose values depend on earlier batches (the
    running indexes, item ids already written) are completed there."""

    runs: EncodedRows | None = None
    items: EncodedItems | None = None
    scores: list[EncodedScores] = field(default_factory=list)


class RowEncoder:
    """Builds a batch's rows of runs.parquet, items.parquet and scores.parquet as Arrow arrays,
    exactly as ``RunWriter`` writes them, without a file or a lock: a worker process encodes its
    shard, the writer of the run appends it (``RunWriter.add_encoded``). ``RunWriter`` encodes
    every batch with one too."""

    def __init__(self) -> None:
        self._messages_json: dict[str, tuple[list[Message], str]] = {}
        """run_id -> (a TargetRun's messages, their JSON), from target_runs until the next
        results."""

    def clear(self) -> None:
        """Forget the messages ``target_runs`` was given (they may change after the batch)."""
        self._messages_json.clear()

    def records(self, records: Iterable[RunRecord | Mapping[str, Any]]) -> EncodedRows | None:
        """runs.parquet's rows of RunRecords (or their dicts); None for none.

        Raises:
            ValueError: for a dict with unknown keys or a record with a bad status.
        """
        rs = [raw if isinstance(raw, RunRecord) else RunRecord.from_mapping(raw) for raw in records]
        if not rs:
            return None
        return self._runs(
            [r.run_id for r in rs],
            [r.row_id for r in rs],
            [r.query_index for r in rs],
            [r.repetition for r in rs],
            [r.target for r in rs],
            [r.status for r in rs],
            [r.error_code for r in rs],
            [r.error_message for r in rs],
            [r.latency_s for r in rs],
            [r.started_at for r in rs],
            [r.ended_at for r in rs],
            [r.input_tokens for r in rs],
            [r.output_tokens for r in rs],
            [r.total_tokens for r in rs],
            [r.transcript for r in rs],
            [bool(r.cached) for r in rs],
        )

    def target_runs(
        self,
        runs: Sequence[Transcript],
        *,
        run_ids: Sequence[str],
        row_ids: Sequence[str | None],
        transcripts: Sequence[str],
        cached: Sequence[bool],
        target: str | None = None,
        messages_json: Sequence[str | None] | None = None,
    ) -> EncodedRows | None:
        """runs.parquet's rows of target calls (see ``RunWriter.add_target_runs``); None for none.

        Raises:
            ValueError: for a run_id that is not a non-empty string, or sequences of different
                lengths.
        """
        n = len(runs)
        shared = len(messages_json) if messages_json is not None else n
        if not len(run_ids) == len(row_ids) == len(transcripts) == len(cached) == shared == n:
            raise ValueError(
                f"add_target_runs: {n} runs but {len(run_ids)} run_ids, {len(row_ids)} row_ids, "
                f"{len(transcripts)} transcripts and {len(cached)} cached flags"
            )
        if not (_all_of(run_ids, str) and "" not in run_ids):
            for run_id in run_ids:
                if not isinstance(run_id, str) or not run_id:
                    raise ValueError(f"RunRecord.run_id must be a non-empty string, got {run_id!r}")
        if not n:
            return None
        query_indexes, repetitions, error_codes, error_messages, started, ended, usages = _columns(
            _RUN_FIELDS, runs
        )
        latencies, input_tokens, output_tokens, total_tokens = _columns(_USAGE_FIELDS, usages)
        encoded = self._runs(
            list(run_ids),
            list(row_ids),
            query_indexes,
            repetitions,
            [target] * n,
            ["ok"] * n
            if _all_null(error_codes)
            else ["ok" if code is None else "error" for code in error_codes],
            error_codes,
            error_messages,
            latencies,
            started,
            ended,
            input_tokens,
            output_tokens,
            total_tokens,
            list(transcripts),
            list(cached) if _all_of(cached, bool) else [bool(c) for c in cached],
        )
        if messages_json is not None:
            known = self._messages_json
            for run_id, run, text in zip(run_ids, runs, messages_json, strict=True):
                if text is not None and isinstance(run, TargetRun) and run.messages:
                    known[run_id] = (run.messages, text)
        return encoded

    def _runs(
        self,
        run_ids: list[str],
        row_ids: list[Any],
        query_indexes: list[Any],
        repetitions: list[Any],
        targets: list[Any],
        statuses: list[str],
        error_codes: list[str | None],
        error_messages: list[str | None],
        latencies: list[Any],
        started: list[dt.datetime | None],
        ended: list[dt.datetime | None],
        input_tokens: list[Any],
        output_tokens: list[Any],
        total_tokens: list[Any],
        transcripts: list[str | None],
        cached: list[bool],
    ) -> EncodedRows:
        """runs.parquet's rows, one list per column."""
        columns = [
            run_ids,
            _strs(row_ids),
            _ints(query_indexes),
            _ints(repetitions),
            _strs(targets),
            statuses,
            error_codes,
            error_messages,
            _floats(latencies),
            _utcs(started),
            _utcs(ended),
            _ints(input_tokens),
            _ints(output_tokens),
            _ints(total_tokens),
            transcripts,
            cached,
        ]
        return EncodedRows(
            _arrays(columns, _RUNS_FIELDS, len(run_ids)),
            [len(t) if t else 0 for t in transcripts],
        )

    def results(
        self, results: Sequence[EvalResults], levels: list[list[tuple[str, EvalResults]]]
    ) -> EncodedBatch:
        """The items' and scores' rows of one batch: the EvalResults of each provider, in
        provider order, and their levels (``SummaryTally.check``); see ``RunWriter.add_results``.
        The messages ``target_runs`` was given are forgotten after it."""
        try:
            batch = EncodedBatch(items=self._items(levels))
            for index, (result, provider_levels) in enumerate(zip(results, levels, strict=True)):
                for agent, level in provider_levels:
                    scores = self._scores(index, result.provider, agent, level)
                    if scores is not None:
                        batch.scores.append(scores)
            return batch
        finally:
            self._messages_json.clear()  # one batch's: the messages may change after it

    def _items(self, levels: list[list[tuple[str, EvalResults]]]) -> EncodedItems | None:
        batch_keys: set[tuple[str, int]] = set()
        seen: dict[str, set[str]] = {}
        agents: list[str] = []
        items: list[EvalItem] = []
        for provider_levels in levels:
            for agent, level in provider_levels:
                written = seen.setdefault(agent, set())
                inputs = level.input_items
                ids = list(map(_item_id, inputs))
                if ids.count(None) == 0 and written.isdisjoint(ids):
                    distinct = set(ids)
                    if len(distinct) == len(ids):
                        # every item named, none seen before: all of them, without a loop per item
                        written |= distinct
                        agents.extend([agent] * len(ids))
                        items.extend(inputs)
                        continue
                for position, item in enumerate(inputs):
                    if item.item_id is None:
                        # No id to deduplicate on: the providers' lists are parallel.
                        if (agent, position) in batch_keys:
                            continue
                        batch_keys.add((agent, position))
                    else:
                        if item.item_id in written:
                            continue
                        written.add(item.item_id)
                    agents.append(agent)
                    items.append(item)
        return self._item_rows(agents, items) if items else None

    def _item_rows(self, agents: list[str], items: list[EvalItem]) -> EncodedItems:
        """items.parquet's rows of ``items`` (``agents[i]`` is item i's result level)."""
        n = len(items)
        queries, responses = _pairs([item.query_and_response() for item in items])
        conversations = self._conversations(items)
        (
            ids,
            item_agents,
            query_indexes,
            repetitions,
            metadata,
            usages,
            splits,
            expected,
            tools,
            expected_outputs,
            contexts,
            error_codes,
            error_messages,
        ) = _columns(_ITEM_FIELDS, items)
        nulls: list[Any] = [None] * n
        if _all_null(usages):
            has_usage = [False] * n
            in_t = out_t = total_t = latency = nulls
        else:
            has_usage = [u is not None for u in usages]
            in_t = [u.input_tokens if u else None for u in usages]
            out_t = [u.output_tokens if u else None for u in usages]
            total_t = [u.total_tokens if u else None for u in usages]
            latency = [u.latency_seconds if u else None for u in usages]
        get_run_id, get_row_id = (
            operator.methodcaller("get", "run_id"),
            operator.methodcaller("get", "row_id"),
        )
        columns = [
            agents,
            None,  # the index: counted per agent over the run, when appended
            ids,
            item_agents,
            _strs(list(map(get_run_id, metadata))),
            _strs(list(map(get_row_id, metadata))),
            query_indexes,
            repetitions,
            queries,
            responses,
            nulls if _all_null(splits) else [_split_name(x) for x in splits],
            conversations,
            expected_outputs,
            contexts,
            _expected_json(expected),
            nulls
            if _all_null(tools)
            else [None if t is None else _TOOLS.dump_json(t).decode() for t in tools],
            error_codes,
            error_messages,
            has_usage,
            in_t,
            out_t,
            total_t,
            latency,
            list(map(_json, metadata)),
        ]
        return EncodedItems(
            _arrays(columns, _ITEMS_FIELDS, n),
            list(map(_add3, map(len, conversations), map(len, queries), map(len, responses))),
            agents,
            ids,
        )

    def _conversations(self, items: list[EvalItem]) -> list[str]:
        """items.parquet's ``conversation`` of each item: ``_MESSAGES.dump_json`` of it, the
        messages of its call (``target_runs``' ``messages_json``) not serialized again."""
        dump = _MESSAGES.dump_json
        known = self._messages_json
        if not known:
            return [dump(item.conversation, fallback=str).decode() for item in items]
        out: list[str] = []
        for item in items:
            conversation = item.conversation
            run_id = item.metadata.get("run_id")
            entry = known.get(run_id) if type(run_id) is str else None
            if entry is not None:
                messages, text = entry
                start = len(conversation) - len(messages)
                if start >= 0 and all(map(operator.is_, conversation[start:], messages)):
                    # a JSON list is "[" + its elements' JSON joined by "," + "]"
                    if start == 0:
                        out.append(text)
                        continue
                    first = _text_message_json(conversation[0]) if start == 1 else None
                    if first is None:
                        first = dump(conversation[:start], fallback=str).decode()[1:-1]
                    out.append(f"[{first},{text[1:]}")
                    continue
            out.append(dump(conversation, fallback=str).decode())
        return out

    def _scores(
        self, provider_index: int, provider: str, agent: str, level: EvalResults
    ) -> EncodedScores | None:
        items = level.items
        if not items:
            return None
        # One row per score, one (scoreless) row for an item without scores: the item's columns
        # are built once per item, then repeated on its rows.
        (
            ids,
            statuses,
            error_codes,
            error_messages,
            response_ids,
            inputs,
            outputs,
            token_usages,
            metadata,
            score_lists,
        ) = _columns(_ITEM_RESULT_FIELDS, items)
        counts = list(map(len, score_lists))
        scores: list[EvalScoreResult | None]
        if 0 in counts:
            counts = [count or 1 for count in counts]
            scores = [score for listed in score_lists for score in (listed or _NO_SCORES)]
        else:
            scores = list(itertools.chain.from_iterable(score_lists))
        n = len(scores)
        repeat = n != len(items)
        sizes_by_item = [len(i or "") + len(o or "") for i, o in zip(inputs, outputs, strict=True)]
        if repeat:
            where = [i for i, count in enumerate(counts) for _ in range(count)]
            sizes = [
                size if k == 0 else 0
                for size, count in zip(sizes_by_item, counts, strict=True)
                for k in range(count)
            ]
        else:
            where = []
            sizes = sizes_by_item
        in_t, out_t, total_t, other_t = _token_columns(token_usages)
        item_columns = [
            _texts(ids),
            _texts(statuses),
            _strs(error_codes),
            _strs(error_messages),
            _strs(response_ids),
            _strs(inputs),
            _strs(outputs),
            in_t,
            out_t,
            total_t,
            other_t,
            _jsons(metadata),
        ]
        fields = _SCORES_FIELDS
        taken = pa.array(where, type=pa.int64()) if repeat else None
        per_item: list[Any] = [None]  # item_index: counted per provider and agent, when appended
        for values, f in zip(item_columns, fields[5:17], strict=True):
            array = (
                pa.nulls(len(items), f.type) if _all_null(values) else pa.array(values, type=f.type)
            )
            per_item.append(array.take(taken) if taken is not None else array)
        constants = [
            _repeat(value, n, f.type)
            for value, f in zip(
                (provider, provider_index, level.run_id, agent), fields[:4], strict=True
            )
        ]
        metrics = _arrays(_score_columns(items, scores), fields[17:], n)
        return EncodedScores(
            [*constants, *per_item, *metrics], sizes, provider_index, agent, len(items), taken
        )


class RunWriter:
    """Writes one run directory: runs, items, scores and summary Parquet files plus manifest.json.

    Use it as a context manager. Rows are streamed to temporary files as they are added; on a clean
    exit (or ``finish``) every file is closed and renamed into place, manifest.json last. If the
    block raises, the temporary files are deleted and no file appears under its final name.

    On a filesystem without rename (object stores such as S3 or GCS) the files are written directly
    under their final names; there, only manifest.json (written last) says the run is complete.

    Args:
        run_dir: The run directory: a local path or a URI (``s3://bucket/runs/2024-06-01``).
        filesystem: A ``pyarrow.fs.FileSystem`` (or fsspec filesystem) holding ``run_dir``.
        row_group_size: Rows buffered per file before they are written as one Parquet row group
            (a group is also written once its text columns reach 32 MiB). Memory is bounded by
            this, not by the size of the run.
        run_name: The ``run_name`` column of every table (default: the run directory's name).
        started_at: When the run started (default: when the writer was opened); the manifest's
            ``started_at`` and summary.parquet's ``run_started_at``.

    Raises:
        ValueError: for a row_group_size below 1.

    Example:
        >>> with RunWriter(run_dir) as writer:  # doctest: +SKIP
        ...     writer.add_runs(records)
        ...     writer.add_results(results_of_one_batch)
        ...     writer.finish({"suite": suite.model_dump(mode="json")})
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        filesystem: Any = None,
        row_group_size: int = 16_384,
        run_name: str | None = None,
        started_at: dt.datetime | None = None,
    ) -> None:
        if row_group_size < 1:
            raise ValueError(f"row_group_size must be >= 1, got {row_group_size}")
        self.fs, self.path = resolve_filesystem(run_dir, filesystem)
        self.fs.create_dir(self.path, recursive=True)
        atomic = _renames_atomically(self.fs)
        self._atomic = atomic
        self.run_name = run_name or self.path.rstrip("/").rsplit("/", 1)[-1]
        """The ``run_name`` of every row: the run directory's name unless given."""
        self.started_at = (started_at or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
        """When the run started (UTC)."""
        constants = {RUN_NAME: self.run_name}

        def sink(name: str, schema: Any) -> _Sink:
            return _Sink(
                self.fs,
                self.path,
                name,
                schema,
                atomic=atomic,
                max_rows=row_group_size,
                constants=constants,
            )

        self._runs = sink("runs", RUNS_SCHEMA)
        self._items = sink("items", ITEMS_SCHEMA)
        self._scores = sink("scores", SCORES_SCHEMA)
        self._sinks = (self._runs, self._items, self._scores)
        self._tally = SummaryTally()
        self._scored: dict[tuple[int, str], int] = {}
        self._item_keys: dict[str, set[str]] = {}
        self._item_counts: dict[str, int] = {}
        self._encoder = RowEncoder()
        """Builds each batch's rows (and keeps a TargetRun's messages' JSON from add_target_runs
        until the next add_results)."""
        self._lock = threading.Lock()
        self._started = time.time()
        self._closed = False
        self._manifest: dict[str, Any] | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.finish({})

    @property
    def manifest(self) -> dict[str, Any] | None:
        """The manifest as written by ``finish`` (None before)."""
        return self._manifest

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"RunWriter for {self.path} is already finished or aborted")

    def add_runs(self, records: Iterable[RunRecord | Mapping[str, Any]]) -> int:
        """Append target calls to runs.parquet; returns how many rows were added.

        Raises:
            ValueError: for a dict with unknown keys or a record with a bad status.
        """
        with self._lock:
            self._check_open()
            encoded = self._encoder.records(records)
            if encoded is None:
                return 0
            self._runs.extend(encoded.arrays, encoded.sizes)
            return len(encoded.sizes)

    def add_target_runs(
        self,
        runs: Sequence[Transcript],
        *,
        run_ids: Sequence[str],
        row_ids: Sequence[str | None],
        transcripts: Sequence[str],
        cached: Sequence[bool],
        target: str | None = None,
        messages_json: Sequence[str | None] | None = None,
    ) -> int:
        """Append target calls (TargetRuns or WorkflowRuns) to runs.parquet: the rows ``add_runs``
        of ``RunRecord.from_target_run(runs[i], run_id=run_ids[i], row_id=row_ids[i],
        transcript=transcripts[i], cached=cached[i], target=target)`` writes, without a record per
        call. Returns how many rows were added.

        ``messages_json[i]``, when given and not None, is the JSON of ``runs[i].messages`` (a
        TargetRun's, serialized when its transcript was): the next ``add_results`` writes the
        conversation of an item whose ``metadata["run_id"]`` is ``run_ids[i]`` and whose
        conversation ends with those very message objects from it, serializing only the messages
        before them. The messages must not change in between.

        Raises:
            ValueError: for a run_id that is not a non-empty string, or sequences of different
                lengths (nothing is written).
        """
        with self._lock:
            self._check_open()
            encoded = self._encoder.target_runs(
                runs,
                run_ids=run_ids,
                row_ids=row_ids,
                transcripts=transcripts,
                cached=cached,
                target=target,
                messages_json=messages_json,
            )
            if encoded is None:
                return 0
            self._runs.extend(encoded.arrays, encoded.sizes)
            return len(encoded.sizes)

    def add_results(self, results: Sequence[EvalResults]) -> None:
        """Append one batch of items: the EvalResults of each provider, in provider order.

        Each provider's items (top level: agent "overall"; sub_results: one agent each) become rows
        of scores.parquet; the evaluated EvalItems (``input_items``, shared by the providers) become
        rows of items.parquet once per (agent, item_id). Counts and score statistics are merged
        into the summary across batches.

        Raises:
            TypeError: for an entry that is not an EvalResults.
            ValueError: when a provider's position changed name since an earlier batch, or the
                results nest sub_results more than one level (nothing of the batch is written).
        """
        with self._lock:
            self._check_open()
            try:
                levels = self._tally.check(results)
            except BaseException:
                self._encoder.clear()
                raise
            self._append(self._encoder.results(results, levels))
            self._tally.add(results)

    def add_encoded(self, batch: EncodedBatch, results: Sequence[EvalResults]) -> None:
        """Append a batch a ``RowEncoder`` built (elsewhere: a worker process), and count
        ``results``, the EvalResults it was built from (their items' input_items, texts and
        samples may be gone: the summary reads only statuses and scores). What the writer writes
        is then what ``add_target_runs`` and ``add_results`` of the same batch write.

        Raises:
            TypeError, ValueError: as ``add_results`` (nothing of the batch is written).
        """
        with self._lock:
            self._check_open()
            self._tally.check(results)
            if batch.runs is not None:
                self._runs.extend(batch.runs.arrays, batch.runs.sizes)
            self._append(batch)
            self._tally.add(results)

    def _append(self, batch: EncodedBatch) -> None:
        """The batch's items and scores, their running indexes counted here (the lock is held)."""
        if batch.items is not None:
            self._append_items(batch.items)
        for scores in batch.scores:
            key = (scores.provider_index, scores.agent)
            first = self._scored.get(key, 0)
            self._scored[key] = first + scores.items
            index = pa.array(
                list(range(first, first + scores.items)),
                type=_SCORES_FIELDS[_SCORE_ITEM_INDEX].type,
            )
            arrays = list(scores.arrays)
            arrays[_SCORE_ITEM_INDEX] = (
                index.take(scores.where) if scores.where is not None else index
            )
            self._scores.extend(arrays, scores.sizes)

    def _append_items(self, encoded: EncodedItems) -> None:
        """items.parquet's rows of a batch: those an earlier batch wrote (same agent and item id)
        left out, each agent's rows numbered on from the last."""
        agents, ids, n = encoded.agents, encoded.item_ids, len(encoded.agents)
        first = agents[0]
        if agents.count(first) == n and ids.count(None) == 0:
            # one agent, every row named (an agent target): the same, without a loop per row
            written = self._item_keys.setdefault(first, set())
            if written.isdisjoint(ids):
                written.update(cast(list[str], ids))  # none is None (counted above)
                start = self._item_counts.get(first, 0)
                self._item_counts[first] = start + n
                arrays = list(encoded.arrays)
                arrays[_ITEM_INDEX] = pa.array(
                    range(start, start + n), type=_ITEMS_FIELDS[_ITEM_INDEX].type
                )
                self._items.extend(arrays, encoded.sizes)
                return
        kept: list[int] | None = None
        for row, (agent, item_id) in enumerate(zip(encoded.agents, encoded.item_ids, strict=True)):
            if item_id is not None:
                written = self._item_keys.setdefault(agent, set())
                if item_id in written:
                    if kept is None:
                        kept = list(range(row))
                    continue
                written.add(item_id)
            if kept is not None:
                kept.append(row)
        agents = encoded.agents
        arrays = list(encoded.arrays)
        sizes = encoded.sizes
        if kept is not None:
            if not kept:
                return
            taken = pa.array(kept, type=pa.int64())
            arrays = [None if a is None else a.take(taken) for a in arrays]
            agents = [agents[i] for i in kept]
            sizes = [sizes[i] for i in kept]
        indexes: list[int] = []
        counts = self._item_counts
        for agent in agents:
            index = counts.get(agent, 0)
            counts[agent] = index + 1
            indexes.append(index)
        arrays[_ITEM_INDEX] = pa.array(indexes, type=_ITEMS_FIELDS[_ITEM_INDEX].type)
        self._items.extend(arrays, sizes)

    def summary_rows(self) -> list[SummaryRow]:
        """The summary rows of everything added so far (what summary.parquet will hold)."""
        with self._lock:
            return self._tally.rows()

    def abort(self) -> None:
        """Stop without committing: temporary files are deleted, no final-name file is created."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._encoder.clear()
            for s in self._sinks:
                s.abort()

    def finish(self, manifest: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Close every file, rename them into place and write manifest.json last.

        Args:
            manifest: What the caller records about the run (suite, evaluator specs, timings, ...);
                evalpipe adds ``schema_version``, ``files``, ``versions``, ``git`` and ``timings``.

        Returns:
            The manifest as written.
        """
        with self._lock:
            self._check_open()
            self._closed = True
            self._encoder.clear()
            ended = dt.datetime.now(dt.UTC)
            summary = _Sink(
                self.fs,
                self.path,
                "summary",
                SUMMARY_SCHEMA,
                atomic=self._atomic,
                max_rows=1 << 30,
                constants={
                    RUN_NAME: self.run_name,
                    "run_started_at": self.started_at,
                    "run_ended_at": ended,
                },
            )
            sinks = (*self._sinks, summary)
            try:
                for row in self._tally.rows():
                    summary.append(astuple(row))
                for s in sinks:
                    s.close()
                # An old manifest must not vouch for files that are being replaced.
                manifest_path = f"{self.path}/{MANIFEST_FILE}"
                if self.fs.get_file_info(manifest_path).type != pafs.FileType.NotFound:
                    self.fs.delete_file(manifest_path)
                for s in sinks:
                    s.commit()
                files = {
                    FILES[name]: {
                        "rows": s.written,
                        "bytes": self.fs.get_file_info(s.final_path).size,
                    }
                    for name, s in zip(("runs", "items", "scores", "summary"), sinks, strict=True)
                }
                written = self._write_manifest(dict(manifest or {}), files, ended)
            except BaseException:
                for s in sinks:
                    s.abort()
                raise
            self._manifest = written
            return written

    def _write_manifest(
        self, data: dict[str, Any], files: dict[str, Any], ended: dt.datetime
    ) -> dict[str, Any]:
        finished = ended.timestamp()
        timings = {
            "writer_opened_at": _iso(self._started),
            "finished_at": _iso(finished),
            "writer_open_seconds": round(finished - self._started, 6),
        }
        caller_timings = data.get("timings")
        if isinstance(caller_timings, Mapping):
            timings = {**timings, **caller_timings}
        data.update(
            run_name=self.run_name,
            started_at=self.started_at.isoformat(),
            ended_at=ended.isoformat(),
            schema_version=SCHEMA_VERSION,
            files=files,
            versions={name: _version(name) for name in _PACKAGES},
            git=data.get("git") or _git_revision(),
            timings=timings,
        )
        data.setdefault("providers", list(self._tally.providers))
        text = json.dumps(data, indent=2, ensure_ascii=False, default=_json_default)
        final = f"{self.path}/{MANIFEST_FILE}"
        target = f"{self.path}/.{MANIFEST_FILE}.{uuid.uuid4().hex}.tmp" if self._atomic else final
        try:
            with self.fs.open_output_stream(target) as out:
                out.write(text.encode())
            if self._atomic:
                self.fs.move(target, final)
        except BaseException:
            if self._atomic:  # a failed write leaves no temporary file behind
                with contextlib.suppress(OSError):
                    self.fs.delete_file(target)
            raise
        result: dict[str, Any] = json.loads(text)
        return result


_NO_SCORES: tuple[None] = (None,)
"""An item without scores has one row, its score columns null."""

_SAMPLE_JSON: dict[str, str] = {}
"""``_json({"reason": r})`` by reason: local checks repeat a few reasons on every item."""


def _sample_json(sample: Any) -> str | None:
    if sample is None:
        return None
    if type(sample) is dict and len(sample) == 1:
        reason = sample.get("reason")
        if type(reason) is str:
            text = _SAMPLE_JSON.get(reason)
            if text is None:
                if len(_SAMPLE_JSON) >= 4096:
                    _SAMPLE_JSON.clear()
                text = _SAMPLE_JSON[reason] = _json(sample)
            return text
    return _json(sample)


def _score_columns(
    items: Sequence[EvalItemResult], scores: list[EvalScoreResult | None]
) -> list[list[Any]]:
    """scores.parquet's metric columns (score_index onwards) of ``scores``, one per row (None: the
    row of an item without scores, its metric columns null)."""
    real = [s for s in scores if s is not None]
    columns = _metric_columns(items, real)
    if len(real) == len(scores):
        return columns
    out: list[list[Any]] = [[None] * len(scores) for _ in columns]
    rows = [row for row, score in enumerate(scores) if score is not None]
    for column, values in zip(out, columns, strict=True):
        for row, value in zip(rows, values, strict=True):
            column[row] = value
    return out


def _metric_columns(
    items: Sequence[EvalItemResult], scores: list[EvalScoreResult]
) -> list[list[Any]]:
    """The metric columns of the rows of ``scores`` (every score of ``items``, in order)."""
    (
        names,
        evaluators,
        values,
        passed,
        labels,
        ratings,
        reasons,
        thresholds,
        error_codes,
        error_messages,
        diagnostics,
        dimensions,
        samples,
        usages,
        latencies,
    ) = _columns(_SCORE_FIELDS, scores)
    in_t, out_t, total_t, other_t = _token_columns(usages)
    n = len(scores)
    nulls: list[Any] = [None] * n
    statuses: list[Any]
    if (
        _all_of(passed, bool)
        and _all_null(error_codes)
        and _all_null(error_messages)
        and _all_null(diagnostics)
        and _all_null(labels)
    ):
        # score_status's common case (a verdict, nothing else) on every row, without the call
        statuses = [PASS] * n if passed.count(True) == n else [PASS if p else FAIL for p in passed]
    else:
        statuses = [
            # score_status's common case (a verdict, nothing else) without the call
            (PASS if s.passed else FAIL)
            if s.passed is not None
            and s.error_code is None
            and s.error_message is None
            and not s.diagnostics
            and s.label is None
            else score_status(s)
            for s in scores
        ]
    return [
        [k for item in items for k in range(len(item.scores))],
        _texts(names),
        _strs(evaluators),
        _floats(values),
        _bools(passed),
        _strs(labels),
        _strs(ratings),
        _strs(reasons),
        _floats(thresholds),
        statuses,
        _strs(error_codes),
        _strs(error_messages),
        nulls
        if _all_null(diagnostics)
        else [None if d is None else _json([asdict(x) for x in d]) for d in diagnostics],
        nulls
        if _all_null(dimensions)
        else [None if d is None else _json([asdict(x) for x in d]) for d in dimensions],
        list(map(_sample_json, samples)),
        in_t,
        out_t,
        total_t,
        other_t,
        _floats(latencies),
    ]


def _expected_json(values: list[list[ExpectedToolCall] | None]) -> list[str | None]:
    """The JSON of each item's expected tool calls, once per distinct list of call objects: the
    items of a row's repetitions, and rows expecting equal calls (``rows_from_dataset``), share
    them. Keyed by the objects' ids, which stay theirs while the items hold them (this call)."""
    out: list[str | None] = []
    done: dict[tuple[int, ...], str] = {}
    for calls in values:
        if calls is None:
            out.append(None)
            continue
        key = tuple(map(id, calls))
        text = done.get(key)
        if text is None:
            text = done[key] = _EXPECTED.dump_json(calls, fallback=str).decode()
        out.append(text)
    return out


def _utcs(values: list[dt.datetime | None]) -> list[dt.datetime | None]:
    """``_utc`` of every value (one already in UTC is kept)."""
    if values and values.count(None) == 0:
        zones = list(map(_tzinfo, values))
        if all(map(operator.is_, zones, itertools.repeat(dt.UTC))):
            return values  # every one in UTC already (a call's stamps): kept, without a loop
    return [v if v is None or v.tzinfo is dt.UTC else _utc(v) for v in values]


_tzinfo = operator.attrgetter("tzinfo")


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    """A timestamp in UTC (a naive one is taken as UTC)."""
    if value is None:
        return None
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, tz=dt.UTC).isoformat()


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_revision() -> dict[str, Any] | None:
    """The current directory's git commit and whether the tree has changes; None outside a repo."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
        if head.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {
        "revision": head.stdout.strip(),
        "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None,
    }
