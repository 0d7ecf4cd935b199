"""RunWriter: streams a run's rows into Parquet as results arrive, and commits the files atomically.

Rows are buffered per file and appended as record batches (one row group per flush), so memory
stays bounded by the flush size however many items a run has. Each file is written to a hidden
temporary name and renamed into place on success; manifest.json is written last and so marks a
finished run. A batch's rows are built as plain columns (``RowEncoder``, evalpipe.artifacts.encoder:
here, or in a worker process) and turned into Arrow arrays here.
"""

from __future__ import annotations

import bisect
import contextlib
import datetime as dt
import importlib.metadata
import itertools
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from evalpipe.artifacts.columns import TABLES, Batch, all_null, json_default
from evalpipe.artifacts.encoder import (
    EncodedBatch,
    EncodedRows,
    EncodedScores,
    RowEncoder,
)
from evalpipe.artifacts.schema import (
    FILES,
    MANIFEST_FILE,
    RUN_NAME,
    SCHEMA_VERSION,
    RunRecord,
    schema_of,
)
from evalpipe.results import EvalResults
from evalpipe.tally import SummaryRow, SummaryTally
from evalpipe.transcripts import Transcript

__all__ = ["RunWriter", "resolve_filesystem"]


_PACKAGES = ("evalpipe", "prefect", "pyarrow", "pydantic", "azure-ai-projects")


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


@contextlib.contextmanager
def _naming(path: str) -> Iterator[None]:
    """An OSError raised while writing ``path`` names it: pyarrow's name no file ("Error writing
    bytes to file. Detail: [errno 28] No space left on device"), and a full disk must say which
    file it stopped."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise OSError(exc.errno, reason, path) from exc


def _repeat(value: Any, n: int, type_: Any) -> Any:
    """``pa.array([value] * n, type=type_)``, without the list."""
    if value is None:
        return pa.nulls(n, type_)
    return pa.repeat(pa.scalar(value, type=type_), n)


def _array(values: Any, type_: Any) -> Any:
    """A column's values (a list, or an Arrow array already) as an Arrow array."""
    if isinstance(values, pa.Array):
        return values
    return pa.nulls(len(values), type_) if all_null(values) else pa.array(values, type=type_)


class _Sink:
    """One Parquet file: rows buffered as Arrow record batches, flushed as one row group whenever
    ``max_rows`` rows or ``max_bytes`` of text are pending.

    ``constants`` are the table's ``run`` columns (one value on every row: the run's name,
    suite, ...): they are not passed; every other column is, by name (``extend``).
    """

    def __init__(
        self,
        fs: Any,
        directory: str,
        name: str,
        *,
        atomic: bool,
        max_rows: int,
        constants: Mapping[str, Any],
    ) -> None:
        self.fs = fs
        self.schema = schema_of(name)
        self.constants = {c.name: constants.get(c.name) for c in TABLES[name].of("run")}
        self.file = FILES[name]
        self.final_path = f"{directory}/{self.file}"
        self.path = (
            f"{directory}/.{self.file}.{uuid.uuid4().hex}.tmp" if atomic else self.final_path
        )
        self.atomic = atomic
        self.max_rows = max_rows
        self.max_bytes = 32 * 1024 * 1024
        self._pending: list[Any] = []
        """The pending rows' record batches (or slices of them)."""
        self.pending_rows = 0
        self.pending_bytes = 0
        self.written = 0
        self._stream: Any = None
        self._writer: Any = None

    def extend(self, columns: Mapping[str, Any], sizes: Sequence[int]) -> None:
        """Rows as columns by name (lists or Arrow arrays, every column but the constants) and
        each row's text size; flushed at the same rows as appending them one by one would.

        Raises:
            ValueError: naming a declared column the rows lack.
        """
        n = len(sizes)
        if n == 0:
            return
        missing = [
            f.name for f in self.schema if f.name not in columns and f.name not in self.constants
        ]
        if missing:
            raise ValueError(f"rows without the declared column(s) {missing}")
        batch = pa.RecordBatch.from_arrays(
            [
                _repeat(self.constants[f.name], n, f.type)
                if f.name in self.constants
                else _array(columns[f.name], f.type)
                for f in self.schema
            ],
            schema=self.schema,
        )
        totals = list(itertools.accumulate(sizes, initial=0))  # the text before each row
        start = 0
        while start < n:
            # where a one-by-one append would flush: max_rows reached, or max_bytes (the first
            # row whose running total reaches the budget)
            budget = totals[start] + self.max_bytes - self.pending_bytes
            end = min(
                n,
                start + self.max_rows - self.pending_rows,
                bisect.bisect_left(totals, budget, start + 1),
            )
            self._pending.append(batch.slice(start, end - start))
            self.pending_rows += end - start
            self.pending_bytes += totals[end] - totals[start]
            start = end
            if self.pending_rows >= self.max_rows or self.pending_bytes >= self.max_bytes:
                self.flush()

    def flush(self) -> None:
        """Write the pending rows as one row group (the batches as they are, not joined first),
        then hand the memory freed back to the system (``release_unused``)."""
        if not self.pending_rows:
            return
        table = pa.Table.from_batches(self._pending, schema=self.schema)
        self._pending = []
        with _naming(self.final_path):
            self._open().write_table(table, row_group_size=self.pending_rows)
        del table
        self.written += self.pending_rows
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
        with _naming(self.final_path):
            self._open().close()
            self._stream.close()

    def commit(self) -> None:
        if self.atomic:
            with _naming(self.final_path):
                self.fs.move(self.path, self.final_path)

    def abort(self) -> None:
        """Drop the file, leaving nothing under the final name (atomic mode) or the partial file."""
        for closable in (self._writer, self._stream):
            if closable is not None:
                # Best effort: the run is already failing; the original error is what matters.
                with contextlib.suppress(Exception):
                    closable.close()
        if self._stream is not None:  # the file was opened
            with contextlib.suppress(OSError):
                self.fs.delete_file(self.path)
        self._pending = []
        self.pending_rows = 0


def _score_columns(scores: EncodedScores, first: int) -> dict[str, Any]:
    """scores.parquet's columns of one level's rows, by name: its ``level`` values repeated, its
    items' columns (``item_index`` numbered on from ``first``) taken for each row."""
    n = len(scores.sizes)
    schema = schema_of("scores")
    per_item: dict[str, Any] = {
        "item_index": pa.array(range(first, first + scores.items), type=pa.int64()),
        **{
            name: _array(values, schema.field(name).type) for name, values in scores.results.items()
        },
    }
    if scores.where is not None:
        taken = pa.array(scores.where, type=pa.int64())
        per_item = {name: array.take(taken) for name, array in per_item.items()}
    level = {
        name: _repeat(value, n, schema.field(name).type) for name, value in scores.level.items()
    }
    return {**level, **per_item, **scores.columns}


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
        suite: The ``suite`` column of every table (the suite's name; None without a suite).
        target_version: The ``target_version`` column of every table (the suite's).

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
        suite: str | None = None,
        target_version: str | None = None,
    ) -> None:
        if row_group_size < 1:
            raise ValueError(f"row_group_size must be >= 1, got {row_group_size}")
        self.fs, self.path = resolve_filesystem(run_dir, filesystem)
        self.fs.create_dir(self.path, recursive=True)
        self._atomic = _renames_atomically(self.fs)
        self.run_name = run_name or self.path.rstrip("/").rsplit("/", 1)[-1]
        """The ``run_name`` of every row: the run directory's name unless given."""
        self.started_at = (started_at or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
        """When the run started (UTC)."""
        self._constants: dict[str, Any] = {
            RUN_NAME: self.run_name,
            "suite": suite,
            "target_version": target_version,
        }
        """The value of every ``run`` column but the run's end (known at ``finish``)."""
        self._runs = self._sink("runs", row_group_size)
        self._items = self._sink("items", row_group_size)
        self._scores = self._sink("scores", row_group_size)
        self._sinks = (self._runs, self._items, self._scores)
        self._tally = SummaryTally()
        self._scored: dict[tuple[int, str], int] = {}
        self._item_keys: dict[str, set[str]] = {}
        self._item_counts: dict[str, int] = {}
        self._encoder = RowEncoder()
        self._lock = threading.Lock()
        self._started = time.time()
        self._closed = False

    def _sink(self, name: str, max_rows: int, **constants: Any) -> _Sink:
        return _Sink(
            self.fs,
            self.path,
            name,
            atomic=self._atomic,
            max_rows=max_rows,
            constants={**self._constants, **constants},
        )

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
            return self._append_runs(self._encoder.records(records))

    def add_target_runs(
        self,
        runs: Sequence[Transcript],
        *,
        run_ids: Sequence[str],
        row_ids: Sequence[str | None],
        transcripts: Sequence[str],
        cached: Sequence[bool],
        target: str | None = None,
    ) -> int:
        """Append target calls (TargetRuns or WorkflowRuns) to runs.parquet: the rows ``add_runs``
        of ``RunRecord.from_target_run(runs[i], run_id=run_ids[i], row_id=row_ids[i],
        transcript=transcripts[i], cached=cached[i], target=target)`` writes, without a record per
        call. Returns how many rows were added.

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
            )
            return self._append_runs(encoded)

    def _append_runs(self, encoded: EncodedRows | None) -> int:
        if encoded is None:
            return 0
        self._runs.extend(encoded.columns, encoded.sizes)
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
            levels = self._tally.check(results)
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
            self._append_runs(batch.runs)
            self._append(batch)
            self._tally.add(results)

    def _append(self, batch: EncodedBatch) -> None:
        """The batch's items and scores, their running indexes counted here (the lock is held)."""
        if batch.items is not None:
            self._append_items(batch.items)
        for scores in batch.scores:
            key = (scores.level["provider_index"], scores.level["agent"])
            first = self._scored.get(key, 0)
            self._scored[key] = first + scores.items
            self._scores.extend(_score_columns(scores, first), scores.sizes)

    def _append_items(self, encoded: EncodedRows) -> None:
        """items.parquet's rows of a batch: those an earlier batch wrote (same agent and item id)
        left out, each agent's rows numbered on from the last."""
        kept: list[int] = []
        indexes: list[int] = []
        counts = self._item_counts
        ids = zip(encoded.columns["agent"], encoded.columns["item_id"], strict=True)
        for row, (agent, item_id) in enumerate(ids):
            if item_id is not None:
                written = self._item_keys.setdefault(agent, set())
                if item_id in written:
                    continue
                written.add(item_id)
            kept.append(row)
            indexes.append(counts.get(agent, 0))
            counts[agent] = indexes[-1] + 1
        columns: dict[str, Any] = dict(encoded.columns)
        sizes = encoded.sizes
        if len(kept) != len(sizes):
            columns = {name: [values[i] for i in kept] for name, values in columns.items()}
            sizes = [sizes[i] for i in kept]
        columns["item_index"] = indexes
        self._items.extend(columns, sizes)

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
            summary = self._sink(
                "summary", 1 << 30, run_started_at=self.started_at, run_ended_at=ended
            )
            sinks = (*self._sinks, summary)
            try:
                rows = self._tally.rows()
                summary.extend(TABLES["summary"].values("row", Batch(rows)), [0] * len(rows))
                for s in sinks:
                    s.close()
                # An old manifest must not vouch for files that are being replaced.
                manifest_path = f"{self.path}/{MANIFEST_FILE}"
                if self.fs.get_file_info(manifest_path).type != pafs.FileType.NotFound:
                    self.fs.delete_file(manifest_path)
                for s in sinks:
                    s.commit()
                files = {
                    s.file: {"rows": s.written, "bytes": self.fs.get_file_info(s.final_path).size}
                    for s in sinks
                }
                written = self._write_manifest(dict(manifest or {}), files, ended)
            except BaseException:
                for s in sinks:
                    s.abort()
                raise
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
        text = json.dumps(data, indent=2, ensure_ascii=False, default=json_default)
        final = f"{self.path}/{MANIFEST_FILE}"
        target = f"{self.path}/.{MANIFEST_FILE}.{uuid.uuid4().hex}.tmp" if self._atomic else final
        try:
            with _naming(final):
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
