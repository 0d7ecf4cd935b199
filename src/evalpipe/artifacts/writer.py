"""RunWriter: streams a run's rows into Parquet as results arrive, and commits the files atomically.

Rows are buffered per file and appended as record batches (one row group per flush), so memory
stays bounded by the flush size however many items a run has. Each file is written to a hidden
temporary name and renamed into place on success; manifest.json is written last and so marks a
finished run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, astuple
from pathlib import Path
from types import TracebackType
from typing import Any, Self

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
from evalpipe.messages import Message, ToolDefinition
from evalpipe.results import EvalItemResult, EvalResults
from evalpipe.tally import SummaryRow, SummaryTally, score_status

__all__ = ["SPLIT_AT_PREFIX", "RunWriter", "resolve_filesystem"]

SPLIT_AT_PREFIX = "at:"
"""items.parquet's ``split`` of a workflow agent's item: ``at:N``, the conversation cut after its
first N messages (what the agent received | what it produced)."""

_TOKEN_KEYS = ("input_tokens", "output_tokens", "total_tokens")
_PACKAGES = ("evalpipe", "prefect", "pyarrow", "pydantic", "azure-ai-projects")

_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
_TOOLS: TypeAdapter[list[ToolDefinition]] = TypeAdapter(list[ToolDefinition])
_EXPECTED: TypeAdapter[list[ExpectedToolCall]] = TypeAdapter(list[ExpectedToolCall])


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


class _Sink:
    """One Parquet file: rows buffered as tuples, flushed as one record batch (row group).

    ``constants`` are columns with one value on every row (the run's name): they are not in the
    tuples; every other column is, in schema order.
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
        self.rows: list[tuple[Any, ...]] = []
        self.pending_bytes = 0
        self.written = 0
        self._stream: Any = None
        self._writer: Any = None

    def append(self, row: tuple[Any, ...], size: int = 0) -> None:
        self.rows.append(row)
        self.pending_bytes += size
        if len(self.rows) >= self.max_rows or self.pending_bytes >= self.max_bytes:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        columns = dict(
            zip(
                (f.name for f in self._varying),
                (
                    pa.array(col, type=f.type)
                    for col, f in zip(zip(*self.rows, strict=True), self._varying, strict=True)
                ),
                strict=True,
            )
        )
        n = len(self.rows)
        arrays = [
            pa.array([self.constants[f.name]] * n, type=f.type)
            if f.name in self.constants
            else columns[f.name]
            for f in self.schema
        ]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._open().write_batch(batch)
        self.written += len(self.rows)
        self.rows = []
        self.pending_bytes = 0

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
        self.rows = []


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
        self._item_keys: set[tuple[str, str]] = set()
        self._item_counts: dict[str, int] = {}
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
            added = 0
            for raw in records:
                r = raw if isinstance(raw, RunRecord) else RunRecord.from_mapping(raw)
                transcript = r.transcript
                self._runs.append(
                    (
                        r.run_id,
                        _opt_str(r.row_id),
                        _opt_int(r.query_index),
                        _opt_int(r.repetition),
                        _opt_str(r.target),
                        r.status,
                        r.error_code,
                        r.error_message,
                        _opt_float(r.latency_s),
                        _utc(r.started_at),
                        _utc(r.ended_at),
                        _opt_int(r.input_tokens),
                        _opt_int(r.output_tokens),
                        _opt_int(r.total_tokens),
                        transcript,
                        bool(r.cached),
                    ),
                    len(transcript) if transcript else 0,
                )
                added += 1
            return added

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
            levels = self._tally.check(results)
            self._write_items(levels)
            for index, (result, provider_levels) in enumerate(zip(results, levels, strict=True)):
                for agent, level in provider_levels:
                    self._write_scores(index, result.provider, agent, level)
            self._tally.add(results)

    def summary_rows(self) -> list[SummaryRow]:
        """The summary rows of everything added so far (what summary.parquet will hold)."""
        with self._lock:
            return self._tally.rows()

    def _write_items(self, levels: list[list[tuple[str, EvalResults]]]) -> None:
        batch_keys: set[tuple[str, int]] = set()
        for provider_levels in levels:
            for agent, level in provider_levels:
                for position, item in enumerate(level.input_items):
                    if item.item_id is None:
                        # No id to deduplicate on: the providers' lists are parallel.
                        if (agent, position) in batch_keys:
                            continue
                        batch_keys.add((agent, position))
                    else:
                        key = (agent, item.item_id)
                        if key in self._item_keys:
                            continue
                        self._item_keys.add(key)
                    self._write_item(agent, item)

    def _write_item(self, agent: str, item: EvalItem) -> None:
        index = self._item_counts.get(agent, 0)
        self._item_counts[agent] = index + 1
        query, response = item.query_and_response()
        conversation = _MESSAGES.dump_json(item.conversation, fallback=str).decode()
        usage = item.usage
        metadata = item.metadata
        self._items.append(
            (
                agent,
                index,
                item.item_id,
                item.agent,
                _opt_str(metadata.get("run_id")),
                _opt_str(metadata.get("row_id")),
                item.query_index,
                item.repetition,
                query,
                response,
                _split_name(item.split_strategy),
                conversation,
                item.expected_output,
                item.context,
                None
                if item.expected_tool_calls is None
                else _EXPECTED.dump_json(item.expected_tool_calls, fallback=str).decode(),
                None if item.tools is None else _TOOLS.dump_json(item.tools).decode(),
                item.error_code,
                item.error_message,
                usage is not None,
                usage.input_tokens if usage else None,
                usage.output_tokens if usage else None,
                usage.total_tokens if usage else None,
                usage.latency_seconds if usage else None,
                _json(metadata),
            ),
            len(conversation) + len(query) + len(response),
        )

    def _write_scores(
        self, provider_index: int, provider: str, agent: str, level: EvalResults
    ) -> None:
        append = self._scores.append
        eval_run_id = level.run_id
        key = (provider_index, agent)
        first = self._scored.get(key, 0)
        self._scored[key] = first + len(level.items)
        for item_index, item in enumerate(level.items, start=first):
            head = _item_head(provider, provider_index, eval_run_id, agent, item_index, item)
            size = len(item.input_text or "") + len(item.output_text or "")
            if not item.scores:
                append((*head, *_NO_SCORE), size)
                continue
            for score_index, score in enumerate(item.scores):
                status = score_status(score)
                value = _opt_float(score.score)
                name = str(score.name)
                in_t, out_t, total_t, other = _split_tokens(score.token_usage)
                append(
                    (
                        *head,
                        score_index,
                        name,
                        _opt_str(score.evaluator),
                        value,
                        _opt_bool(score.passed),
                        _opt_str(score.label),
                        _opt_str(score.rating),
                        _opt_str(score.reason),
                        _opt_float(score.threshold),
                        status,
                        _opt_str(score.error_code),
                        _opt_str(score.error_message),
                        None
                        if score.diagnostics is None
                        else _json([asdict(d) for d in score.diagnostics]),
                        None
                        if score.dimensions is None
                        else _json([asdict(d) for d in score.dimensions]),
                        _opt_json(score.sample),
                        in_t,
                        out_t,
                        total_t,
                        other,
                        _opt_float(score.latency_s),
                    ),
                    size,
                )
                size = 0

    def abort(self) -> None:
        """Stop without committing: temporary files are deleted, no final-name file is created."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
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


_NO_SCORE: tuple[None, ...] = (None,) * 20


def _item_head(
    provider: str,
    provider_index: int,
    eval_run_id: str,
    agent: str,
    item_index: int,
    item: EvalItemResult,
) -> tuple[Any, ...]:
    in_t, out_t, total_t, other = _split_tokens(item.token_usage)
    return (
        provider,
        provider_index,
        eval_run_id,
        agent,
        item_index,
        str(item.item_id),
        str(item.status),
        _opt_str(item.error_code),
        _opt_str(item.error_message),
        _opt_str(item.response_id),
        _opt_str(item.input_text),
        _opt_str(item.output_text),
        in_t,
        out_t,
        total_t,
        other,
        _opt_json(item.metadata),
    )


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
