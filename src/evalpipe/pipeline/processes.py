"""Shards in local worker processes: ``task_runner: processes`` (or ``{processes: N}``).

The flow's process is one event loop and a writer thread under one GIL: a run of CPU-bound local
checks or targets uses one core however many the machine has. Here each shard runs whole in one
of N worker processes (spawned, not forked: the flow's process runs Prefect's threads), which
also turns the shard into the Arrow rows of runs, items and scores (``RowEncoder``) and strips its
results; the flow's process appends those rows to its Parquet files in shard order and counts the
stripped results, so it does little per item. A worker does that a chunk of its shard at a time
(``CHUNK_CALLS``), sending each chunk back as soon as it is done: one task run still carries a big
shard, while a worker holds about a chunk's transcripts, items and rows.

Each worker builds the run's target, providers and split once from the suite (as ``prepare_suite``
does; the flow's process validated them already), opens the run's journal (appending, like a Dask
worker: ``RunState.open(marker=False, lock=False)``) and keeps one event loop for all its shards.
The dataset's rows are not loaded again: each shard job carries the rows of its calls (preparing
100,000 rows took ~4.4 s of CPU and ~100 MB in every worker). The suite's ``concurrency`` is split
across the workers (``split_concurrency``): each worker runs one shard at a time with its share, so
the run never has more target calls in flight than the suite allows.

Nothing here imports Prefect unless a shard's providers hold global concurrency limits
(``limits_scope``): a worker does not pay ``import prefect`` for local checks.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import gc
import json
import multiprocessing
import operator
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, cast

from evalpipe.artifacts.encoder import EncodedBatch, RowEncoder
from evalpipe.evaluators.base import close_providers
from evalpipe.results import EvalItemResult, EvalResults, EvalScoreResult
from evalpipe.runner import Call, CallOutcome, RunPlan, RunState, ShardResult, run_shard
from evalpipe.runner.plan import Row, resolve_target
from evalpipe.suite import (
    EvalSuite,
    build_evaluators,
    build_split,
    build_target,
    shared_evaluators,
)
from evalpipe.tally import CallTally, Counts, SummaryTally, call_verdicts
from evalpipe.transcripts import Transcript

__all__ = [
    "CHUNK_CALLS",
    "DEPTH",
    "WINDOW",
    "ProcessPool",
    "ShardDone",
    "ShardJob",
    "WorkerDiedError",
    "WorkerError",
    "call_columns",
    "encode_shard",
    "split_concurrency",
    "start_early",
    "stop_early",
    "strip_results",
    "take_early",
    "watch_parent",
    "workers_for",
]

PARENT_POLL_S = 0.5
"""How often a worker checks that the flow's process is still its parent."""

STOP_WAIT_S = 5.0
"""How long ``ProcessPool.close`` waits for a worker to finish and exit before terminating it."""

YOUNG_LIMIT = 200_000
"""As the flow's shard collector: one young collection between shards once this many more
objects are alive than at the last one, survivors frozen."""


class WorkerError(RuntimeError):
    """A shard raised in a worker process and its exception could not be sent back as it is: its
    type, message and traceback, as text."""


class WorkerDiedError(RuntimeError):
    """A worker process ended while it held a shard (killed, out of memory, a crash)."""


def split_concurrency(concurrency: int, workers: int) -> list[int]:
    """Each worker's share of the run's concurrency: as equal as can be, every share at least one,
    and their sum the run's ``concurrency`` (fewer workers than ``workers`` when the concurrency is
    smaller).

    Raises:
        ValueError: for a concurrency or a number of workers below one.
    """
    if concurrency < 1 or workers < 1:
        raise ValueError(f"concurrency and workers must be >= 1, got {concurrency}, {workers}")
    n = min(concurrency, workers)
    base, extra = divmod(concurrency, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


_ROW_FIELDS = [f.name for f in dataclasses.fields(Row)]
_ITEM_FIELDS = [f.name for f in dataclasses.fields(EvalItemResult)]
_SCORE_FIELDS = [f.name for f in dataclasses.fields(EvalScoreResult)]
_SCORES_AT = _ITEM_FIELDS.index("scores")
_row_values = operator.attrgetter(*_ROW_FIELDS)
_item_values = operator.attrgetter(*_ITEM_FIELDS)
_score_values = operator.attrgetter(*_SCORE_FIELDS)
"""Rows, item results and score results travel as tuples of their fields, rebuilt with their
constructors: pickling the dataclasses themselves (their generated ``__getstate__`` and
``__setstate__``) cost ~4x as much, on both sides."""


@dataclass(slots=True)
class ShardJob:
    """One shard for a worker: its calls (position, index into ``rows``, repetition, key), the
    rows they call (their fields), the transcripts they re-score (``stored``), how many calls it
    may have in flight, and the providers' global concurrency limits."""

    index: int
    calls: list[tuple[int, int, int, str]]
    rows: list[tuple[Any, ...]]
    stored: dict[str, Transcript] | None
    share: int
    limits: dict[int, tuple[str, int]]
    chunk: int = 0
    """Calls per chunk: the worker runs, encodes and sends back the shard a chunk at a time
    (0: the whole shard as one chunk)."""

    def unpack(self) -> tuple[tuple[Call, ...], tuple[Row, ...]]:
        """The shard's calls and the rows they call."""
        return tuple(Call(*c) for c in self.calls), tuple(Row(*r) for r in self.rows)


def _pack_results(result: EvalResults) -> tuple[EvalResults, list[Any], dict[str, Any]]:
    """A result for the pipe: the model without its items and sub-results, its items as tuples
    (this process does not use the result again)."""
    items = [
        (
            *values[:_SCORES_AT],
            [_score_values(s) for s in values[_SCORES_AT]],
            *values[_SCORES_AT + 1 :],
        )
        for values in map(_item_values, result.items)
    ]
    subs = {name: _pack_results(sub) for name, sub in result.sub_results.items()}
    result.__dict__["items"] = []
    result.__dict__["sub_results"] = {}
    return result, items, subs


def _unpack_results(packed: tuple[EvalResults, list[Any], dict[str, Any]]) -> EvalResults:
    """``_pack_results`` undone: the same result, field for field."""
    result, items, subs = packed
    score: Any = EvalScoreResult
    item: Any = EvalItemResult
    result.__dict__["items"] = [
        item(
            *values[:_SCORES_AT], [score(*s) for s in values[_SCORES_AT]], *values[_SCORES_AT + 1 :]
        )
        for values in items
    ]
    result.__dict__["sub_results"] = {name: _unpack_results(sub) for name, sub in subs.items()}
    return result


@dataclass(slots=True)
class ShardDone:
    """What a worker sends back for a chunk of a shard (``chunk``: its number in the shard): its
    rows (``encoded``), its results stripped (``strip_results``), the facts of its calls and the
    verdicts of its calls."""

    index: int
    encoded: EncodedBatch
    results: list[EvalResults]
    calls: CallTally
    verdicts: Counts
    made: int
    reused: int
    items: int
    n_calls: int
    pid: int = 0
    chunk: int = 0

    def __getstate__(self) -> tuple[Any, ...]:
        packed = [_pack_results(r) for r in self.results]
        return (self.index, self.encoded, packed, self.calls, self.verdicts, self.made,
                self.reused, self.items, self.n_calls, self.pid, self.chunk)  # fmt: skip

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        (self.index, self.encoded, packed, self.calls, self.verdicts, self.made, self.reused,
         self.items, self.n_calls, self.pid, self.chunk) = state  # fmt: skip
        self.results = [_unpack_results(p) for p in packed]


@dataclass(slots=True)
class _Setup:
    """What a worker needs to run the plan's shards: the plan without its rows, calls, target
    and providers (built in the worker), and how many failures keep their texts."""

    plan: RunPlan
    listed: int
    env: dict[str, str] = field(default_factory=dict)
    path: list[str] = field(default_factory=list)


def strip_results(result: EvalResults, kept: dict[tuple[str, str], int], listed: int) -> None:
    """Drop what is written already and not needed for the gate and the summary (the items, their
    texts and metadata), so a long run does not hold every transcript in memory. The query and
    response of the first ``listed`` items of each result that did not pass stay, for the
    failures artifact (``kept`` counts them per provider and result)."""
    result.input_items = []
    level = (result.provider, result.run_id)
    for item in result.items:
        if not item.is_passed and kept.get(level, 0) < listed:
            kept[level] = kept.get(level, 0) + 1
        else:
            item.input_text = item.output_text = None
        item.metadata = None
        for score in item.scores:
            score.sample = None
    for sub in result.sub_results.values():
        strip_results(sub, kept, listed)


def keep_listed(result: EvalResults, kept: dict[tuple[str, str], int], listed: int) -> None:
    """The second half of ``strip_results`` for a result a worker stripped with counts of its own
    shard only: the texts of items that did not pass stay only while the run's count (``kept``)
    is below ``listed``, exactly as ``strip_results`` over the whole run in order keeps them."""
    level = (result.provider, result.run_id)
    for item in result.items:
        if item.is_passed:
            continue
        if kept.get(level, 0) < listed:
            kept[level] = kept.get(level, 0) + 1
        else:
            item.input_text = item.output_text = None
    for sub in result.sub_results.values():
        keep_listed(sub, kept, listed)


def call_columns(plan: RunPlan, outcomes: Sequence[CallOutcome]) -> dict[str, Any]:
    """The calls' rows of runs.parquet as the writer takes them (``RowEncoder.target_runs``,
    ``RunWriter.add_target_runs``): one list per column, the JSON of their messages included."""
    rows = plan.rows
    return {
        "runs": [o.run for o in outcomes],
        "run_ids": [o.call.key for o in outcomes],
        "row_ids": [rows[o.call.row_index].id for o in outcomes],
        "transcripts": [o.transcript_json() for o in outcomes],
        "cached": [o.reused for o in outcomes],
        "target": plan.identity,
        "messages_json": [o.messages_json for o in outcomes],
    }


def encode_shard(encoder: RowEncoder, plan: RunPlan, shard: ShardResult) -> EncodedBatch:
    """A shard's rows of runs, items and scores, as the flow writes them (``_record`` then
    ``RunWriter.add_results``)."""
    runs = encoder.target_runs(**call_columns(plan, shard.outcomes))
    try:
        levels = SummaryTally().check(shard.results)
    except BaseException:
        encoder.clear()
        raise
    batch = encoder.results(shard.results, levels)
    batch.runs = runs
    return batch


def watch_parent(parent_pid: int, interval: float = PARENT_POLL_S) -> threading.Thread:
    """A daemon thread that ends this process (exit status 70) as soon as its parent is no longer
    ``parent_pid``: a worker whose flow process was killed does not live on."""

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(70)
            time.sleep(interval)

    thread = threading.Thread(target=watch, name="evalpipe-parent-watch", daemon=True)
    thread.start()
    return thread


class _InShardOrder:
    """A shard's chunks as the whole shard would have been sent, in an agent run (one result
    level per provider):

    - scores.parquet's rows in the order the whole shard's batch holds them: each provider's rows
      of the shard together, providers in order. The first provider's rows go with their chunk;
      the others' are held (as encoded rows) and go, in order, with the shard's last chunk. Runs
      and items rows go with their chunk: their order is the calls' whatever the chunks.
    - each result's run-level ``error`` (a local or judge provider's: its failures' texts joined
      with "; ", in item order) once per shard, as the whole shard's evaluation gives it: the
      chunks' texts joined, on the last chunk's result (None on the others), so summary.parquet's
      and the merged results' distinct errors are those of the whole shard; a provider that
      raised over every chunk (``errored_results``) has its text once, as over the whole shard.
    """

    __slots__ = ("errors", "first", "held")

    def __init__(self) -> None:
        self.first: tuple[int, str] | None = None
        self.held: dict[tuple[int, str], list[Any]] = {}
        self.errors: dict[int, list[str]] = {}

    def __call__(self, done: ShardDone, *, last: bool) -> None:
        """The chunk's ``encoded.scores`` and results' errors as they are sent."""
        for index, result in enumerate(done.results):
            errors = self.errors.setdefault(index, [])
            # A provider that raised over a whole chunk (a "failed" result, every item errored
            # with one text) raised once over the whole shard: its text once, not once a chunk.
            if result.error and not (result.status == "failed" and result.error in errors):
                errors.append(result.error)
            result.error = "; ".join(errors) or None if last else None
        if last:
            self.errors.clear()
        batch = done.encoded
        sent = []
        for scores in batch.scores:
            key = (scores.provider_index, scores.agent)
            if self.first is None:
                self.first = key
            if key == self.first:
                sent.append(scores)
            else:
                self.held.setdefault(key, []).append(scores)
        if last:
            for parts in self.held.values():
                sent.extend(parts)
            self.held.clear()
        batch.scores = sent


class _Worker:
    """A worker process's state: the run's plan (rows excepted), its journal, one event loop."""

    def __init__(self, setup: _Setup) -> None:
        os.environ.update(setup.env)
        skeleton = setup.plan
        suite = skeleton.suite
        target = None if skeleton.target is None else resolve_target(build_target(suite))
        self.plan = replace(
            skeleton,
            target=target,
            providers=tuple(build_evaluators(suite)),
            split=build_split(suite),
        )
        self.listed = setup.listed
        self.state = RunState.open(self.plan, marker=False, lock=False)
        self.loop = asyncio.new_event_loop()
        self.encoder = RowEncoder()
        self._scopes: dict[tuple[tuple[int, str, int], ...], Any] = {}
        gc.freeze()  # the plan, the target, the modules: never scanned again
        gc.disable()

    def run(self, job: ShardJob, send: Callable[[ShardDone], None]) -> None:
        """Run a shard, chunk by chunk; ``send`` is given each chunk's answer, in order."""
        self.loop.run_until_complete(self._run(job, send))

    def _collect(self) -> None:
        if gc.get_count()[0] >= YOUNG_LIMIT:
            gc.collect(1)
            gc.freeze()

    def _scope(self, limits: dict[int, tuple[str, int]]) -> Any:
        if not limits:
            return None
        from evalpipe.pipeline.limits import limits_scope  # lazy: prefect, only with global limits

        return limits_scope(limits)

    async def _run(self, job: ShardJob, send: Callable[[ShardDone], None]) -> None:
        """The shard's chunks, ``WINDOW`` at a time on one semaphore of the worker's share: the
        next chunk's calls wait for the slots the current one's tail gives back (no drained
        semaphore at a chunk's end). Each chunk is encoded, stripped and sent as soon as it and
        those before it are done, then let go. A chunk that raises cancels those after it (their
        finished calls are journaled) and its exception ends the shard."""
        calls, rows = job.unpack()
        plan = replace(self.plan, rows=rows, calls=calls, stored=job.stored)
        semaphore = asyncio.Semaphore(job.share)
        scope = self._scope(job.limits)
        size = job.chunk if job.chunk > 0 else max(1, len(calls))
        starts = range(0, len(calls), size)
        kept: dict[tuple[str, str], int] = {}
        in_order = _InShardOrder()
        running: collections.deque[asyncio.Task[ShardResult]] = collections.deque()

        def start(k: int) -> None:
            part = calls[starts[k] : starts[k] + size]
            running.append(
                asyncio.ensure_future(
                    run_shard(
                        plan,
                        self.state,
                        part,
                        semaphore=semaphore,
                        workers=job.share,
                        scope=scope,
                    )
                )
            )

        try:
            for k in range(min(WINDOW, len(starts))):
                start(k)
            for k in range(len(starts)):
                shard = await running[0]
                running.popleft()
                done = self._done(job, plan, shard, kept, k)
                del shard
                in_order(done, last=k == len(starts) - 1)
                send(done)
                del done
                if k + WINDOW < len(starts):
                    start(k + WINDOW)
                self._collect()
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    def _done(
        self,
        job: ShardJob,
        plan: RunPlan,
        shard: ShardResult,
        kept: dict[tuple[str, str], int],
        chunk: int,
    ) -> ShardDone:
        """A chunk's answer: its rows encoded, its results stripped (``kept`` counts the texts
        kept over the shard's chunks so far), its calls counted."""
        tally = CallTally()
        made = reused = 0
        for outcome in shard.outcomes:
            tally.add(outcome.source, outcome.run)
            made += outcome.source == "made"
            reused += outcome.source == "reused"
        encoded = encode_shard(self.encoder, plan, shard)
        verdicts = call_verdicts(shard.results)
        for result in shard.results:
            strip_results(result, kept, self.listed)
        return ShardDone(
            index=job.index,
            encoded=encoded,
            results=shard.results,
            calls=tally,
            verdicts=verdicts,
            made=made,
            reused=reused,
            items=shard.items,
            n_calls=len(shard.outcomes),
            pid=os.getpid(),
            chunk=chunk,
        )

    def close(self) -> None:
        suite = self.plan.suite
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(
                close_providers(self.plan.providers, keep=shared_evaluators(suite))
            )
        self.loop.close()
        self.state.close()


def _sendable(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling, else a WorkerError with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        text = "".join(traceback.format_exception(exc)).rstrip()
        return WorkerError(f"{type(exc).__name__}: {exc}\n{text}")
    return exc


_BOOT = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
    "from evalpipe.pipeline.processes import worker_main; worker_main(int(sys.argv[2]), "
    "int(sys.argv[3]))"
)
"""A worker process's program: the flow process's import path first (the target's module, an
evalpipe that is not installed), then ``worker_main``. Not ``multiprocessing``'s spawn, which
runs the parent's main script again in every child (a script without a ``__main__`` guard would
start its evaluation in each worker)."""

DEPTH = 2
"""Shards a worker holds at once: the one it runs and the next, queued in its process (only its
job: calls and rows), so it starts the next as soon as the current one is sent back (the shard's
task run, its job and its pickling overlap the shard before it)."""

CHUNK_CALLS = 250
"""Calls per chunk of a shard: a worker runs, encodes and sends back its shard a chunk at a time,
so it holds a chunk's transcripts, items and rows, not a whole shard's (a shard is one Prefect
task run: big shards spare the server's CPU, small chunks the worker's memory). Measured at
100,000 calls x 3 local checks in shards of 2,000 on 2 workers: a worker's peak ~225 MiB in whole
shards, ~180 in chunks of 500, ~166 in chunks of 250 (~137 idle after setup), at no measurable
CPU cost."""

WINDOW = 2
"""Chunks of a shard a worker runs at once: the one it finishes and the next, whose calls take
the slots the first one's last calls give back."""


def _warm() -> None:
    """What a worker's first shard would otherwise import: nothing any more. A worker builds its
    shard's rows as plain columns (``RowEncoder``, evalpipe.artifacts.encoder) and never imports
    pyarrow, numpy or pandas (~100 MiB and ~1 s of CPU each); the flow's process converts them."""


def _sync_path(path: list[str]) -> None:
    """This process's import path as the flow's process has it now (it may have added the
    suite's directory since this worker started), this process's own entries after it."""
    sys.path[:] = [*path, *(p for p in sys.path if p not in path)]


class _Inbox:
    """A worker's jobs as they arrive: a thread receives them while the worker runs the one
    before, so a queued job is in the process when the current one ends. A stop (None, or the
    pipe closed) ends the worker before any job still queued."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.jobs: queue.SimpleQueue[ShardJob | None] = queue.SimpleQueue()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._receive, name="evalpipe-inbox", daemon=True)
        self.thread.start()

    def _receive(self) -> None:
        while True:
            try:
                job = self.conn.recv()
            except (EOFError, OSError):
                job = None
            if job is None:
                self.stopped.set()
                self.jobs.put(None)
                return
            self.jobs.put(job)

    def next(self) -> ShardJob | None:
        job = self.jobs.get()
        return None if self.stopped.is_set() else job


class _Outbox:
    """A worker's answers on their way: pickled by the worker, written to the pipe by a thread,
    in order, so the worker starts its next shard while the flow's process reads the answer
    (writing waits for that reading: ~1-2 s per worker over a 100,000-call run)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.answers: queue.SimpleQueue[memoryview | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._send, name="evalpipe-outbox", daemon=True)
        self.thread.start()

    def _send(self) -> None:
        while (data := self.answers.get()) is not None:
            try:
                self.conn.send_bytes(data)
            except OSError:  # the flow's process is gone: the parent watch ends this one
                return

    def put(self, message: tuple[str, Any]) -> None:
        self.answers.put(ForkingPickler.dumps(message))

    def close(self) -> None:
        """Once every answer is written."""
        self.answers.put(None)
        self.thread.join()


def worker_main(fd: int, parent_pid: int) -> None:
    """A worker process: it imports what shards use, then takes its setup from the pipe ``fd``
    and runs the shards it is sent, in order, until told to stop (or until its parent
    ``parent_pid`` is gone)."""
    # Ctrl-C reaches the whole process group: the flow's process decides, and stops the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(parent_pid)
    conn = Connection(fd)
    try:
        _warm()
        setup = conn.recv()
        if setup is None:  # stopped before its run was prepared (bad input, an early exit)
            return
        _sync_path(setup.path)
        worker = _Worker(setup)
    except EOFError:
        return
    except BaseException as exc:
        conn.send(("error", _sendable(exc)))
        return
    conn.send(("ready", os.getpid()))
    inbox = _Inbox(conn)
    outbox = _Outbox(conn)
    try:
        while (job := inbox.next()) is not None:
            try:
                worker.run(job, lambda done: outbox.put(("chunk", done)))
            except BaseException as exc:
                outbox.put(("error", _sendable(exc)))
            else:
                outbox.put(("end", None))
            del job
    finally:
        outbox.close()
        worker.close()


_Answer = tuple[str, Any]
"""A worker's answer about a shard: ``("chunk", ShardDone)`` for each chunk, in order, then
``("end", None)``, or ``("error", exception)`` instead of the rest."""

_Pending = tuple[asyncio.AbstractEventLoop, Callable[[_Answer], None]]


class _Process:
    """One worker process, its end of the pipe, its share of the concurrency, and the shards sent
    to it that it has not answered yet (answered in the order they were sent)."""

    def __init__(self, process: subprocess.Popen[bytes], conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.share = 0
        self.held = 0
        """Shards given to this worker and not yet answered (counted on the event loop)."""
        self.pending: collections.deque[_Pending] = collections.deque()
        self.dead: WorkerDiedError | None = None
        self._sending = threading.Lock()
        self._receiver: threading.Thread | None = None

    @classmethod
    def spawn(cls) -> _Process:
        """A new worker process; it imports while it waits for its setup."""
        mine, theirs = multiprocessing.Pipe()
        fd = theirs.fileno()
        process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, json.dumps(sys.path), str(fd), str(os.getpid())],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        return cls(process, mine)

    def send_setup(self, setup: _Setup) -> None:
        with contextlib.suppress(OSError):  # it died already: ready() says so
            self.conn.send(setup)

    def wait(self, timeout: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(max(0.0, timeout))

    def _died(self, when: str) -> WorkerDiedError:
        self.wait(1.0)
        return WorkerDiedError(
            f"worker process {self.process.pid} ended (exit code {self.process.returncode}) {when}"
        )

    def ready(self) -> int:
        """The worker's pid once it is prepared (blocking); then its answers are received.

        Raises:
            WorkerDiedError: when the worker ended first.
            BaseException: what preparing raised in the worker.
        """
        try:
            kind, value = self.conn.recv()
        except (EOFError, OSError):
            raise self._died("while it prepared") from None
        if kind == "error":
            raise value
        self._receiver = threading.Thread(
            target=self._receive, name=f"evalpipe-worker-{self.process.pid}", daemon=True
        )
        self._receiver.start()
        return int(value)

    def _receive(self) -> None:
        """The receiving thread: each answer goes to the oldest shard sent and not ended (its
        chunks, then its end or its error); when the worker ends, every shard it still holds
        fails with WorkerDiedError."""
        while True:
            try:
                kind, value = self.conn.recv()
            except (EOFError, OSError):
                break
            if self.pending:
                loop, deliver = self.pending[0]
                if kind != "chunk":
                    self.pending.popleft()
                _post(loop, deliver, (kind, value))
        self.dead = self._died("while it ran a shard")
        while self.pending:
            loop, deliver = self.pending.popleft()
            _post(loop, deliver, ("error", self.dead))

    def send(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[_Answer], None],
             job: ShardJob) -> None:  # fmt: skip
        """Queue a shard on this worker (blocking while its pipe is full); ``deliver`` gets its
        answers, on ``loop``.

        Raises:
            WorkerDiedError: when the worker ended before it got the shard.
        """
        with self._sending:
            if self.dead is not None:
                raise self.dead
            self.pending.append((loop, deliver))
            try:
                self.conn.send(job)
            except (BrokenPipeError, EOFError, OSError):
                # the receiving thread fails the shard with what it finds
                raise self._died("before it got a shard") from None

    def stop(self) -> None:
        """Ask the worker to finish (unless a shard is being sent to it: it is terminated)."""
        if self._sending.acquire(timeout=0.5):
            try:
                with contextlib.suppress(OSError, ValueError):
                    self.conn.send(None)
            finally:
                self._sending.release()

    def join(self) -> None:
        """After the process ended: its receiving thread, then its end of the pipe."""
        if self._receiver is not None:
            self._receiver.join(5.0)
        with contextlib.suppress(OSError):
            self.conn.close()


def _post(
    loop: asyncio.AbstractEventLoop, deliver: Callable[[_Answer], None], answer: _Answer
) -> None:
    """A worker's answer about a shard, handed to ``deliver`` on the shard's event loop."""
    with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
        loop.call_soon_threadsafe(deliver, answer)


def stop_processes(procs: Sequence[_Process], wait: float) -> None:
    """Stop worker processes: asked to finish, then terminated (and killed) if still alive after
    ``wait`` seconds; their receiving threads and pipes closed."""
    for proc in procs:
        proc.stop()
    deadline = time.monotonic() + wait
    for proc in procs:
        proc.wait(deadline - time.monotonic())
    for proc in procs:
        if proc.process.poll() is None:
            proc.process.terminate()
            proc.wait(1.0)
        if proc.process.poll() is None:
            proc.process.kill()
            proc.process.wait()
        proc.join()


def workers_for(suite: EvalSuite) -> int | None:
    """How many worker processes run a suite's shards (``task_runner: processes``: one per CPU,
    or ``{processes: N}``), at most the suite's concurrency; None for any other task runner."""
    spec = suite.task_runner
    if spec == "processes":
        wanted = os.cpu_count() or 1
    elif isinstance(spec, dict) and "processes" in spec:
        wanted = int(cast(Any, spec["processes"]))
    else:
        return None
    return max(1, min(wanted, int(suite.concurrency)))


_early: list[_Process] = []
_early_lock = threading.Lock()


def start_early(suite: EvalSuite) -> int:
    """Start the worker processes of a suite's run now, before its plan is prepared, so their
    imports (~2 s of CPU each) overlap the preparing (the dataset's rows) instead of the flow.
    The run's ``ProcessPool`` takes them (``take_early``); :func:`stop_early` stops those never
    taken (the run did not start: bad input). How many were started (0 for another task
    runner)."""
    workers = workers_for(suite)
    if workers is None:
        return 0
    stop_early()
    with _early_lock:
        _early.extend(_Process.spawn() for _ in range(workers))
    return workers


def take_early(workers: int) -> list[_Process]:
    """Up to ``workers`` of the processes :func:`start_early` started (alive, not set up), now
    the caller's to stop; any others are stopped."""
    with _early_lock:
        procs = [p for p in _early if p.process.poll() is None]
        taken, rest = procs[:workers], [p for p in _early if p not in procs[:workers]]
        _early.clear()
    stop_processes(rest, 0.0)
    return taken


def stop_early() -> None:
    """Stop the processes :func:`start_early` started that no run took (terminated: they hold
    nothing yet). Safe to call more than once."""
    with _early_lock:
        procs = list(_early)
        _early.clear()
    stop_processes(procs, 0.0)


class ProcessPool:
    """N worker processes for a run's shards; ``run`` queues a shard on the worker holding the
    fewest (at most ``DEPTH`` each), and each worker runs its shards one at a time, in order.

    Use it as an async context manager: the workers start (or are taken from
    :func:`start_early`) and prepare on entry; on exit, however the block ends, they are told to
    stop, waited for ``STOP_WAIT_S`` and terminated if still there, so no worker outlives the run.

    Args:
        plan: The run's plan (a suite run: its suite and run directory).
        workers: How many worker processes (at most the suite's concurrency).
        listed: How many items that did not pass keep their texts, per result (the failures
            artifact's).
        env: Environment variables the workers set before preparing (the Prefect API's URL when
            global concurrency limits are used).
        chunk: Calls per chunk of a shard (default ``CHUNK_CALLS``), in an agent run. A workflow
            run (its items.parquet rows are grouped by agent over a shard) and a run with a
            batched provider (server-side evaluations: one server run per batch of a shard) run
            whole shards.
    """

    def __init__(
        self,
        plan: RunPlan,
        workers: int,
        *,
        listed: int,
        env: dict[str, str] | None = None,
        chunk: int | None = None,
    ) -> None:
        assert plan.suite is not None
        assert plan.run_dir is not None
        chunk = CHUNK_CALLS if chunk is None else chunk
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self.plan = plan
        batched = any(plan.batched(p) is not None for p in plan.providers)
        self.chunk = chunk if plan.kind == "agent" and not batched else 0
        self.shares = split_concurrency(int(plan.suite.concurrency), workers)
        self.listed = listed
        self.env = dict(env or {})
        self.pids: list[int] = []
        self._procs: list[_Process] = []
        self._waiting: list[asyncio.Future[None]] = []
        self._starting = threading.Lock()
        self._closed = False

    @property
    def workers(self) -> int:
        """How many worker processes run shards."""
        return len(self.shares)

    def _setup(self) -> _Setup:
        skeleton = replace(
            self.plan,
            target=None,
            providers=(),
            split=None,
            rows=(),
            calls=(),
            stored=None,
            gates=(),
        )
        if self.plan.target is not None:
            # the worker builds its own target; it only needs to know there is one
            skeleton = replace(skeleton, target=replace(self.plan.target, obj=None))
        return _Setup(plan=skeleton, listed=self.listed, env=self.env, path=list(sys.path))

    def _start(self) -> None:
        setup = self._setup()
        with self._starting:  # a close() meanwhile (the run's timeout) stops all of them
            if self._closed:
                return
            self._procs = take_early(self.workers)
            self._procs.extend(_Process.spawn() for _ in range(self.workers - len(self._procs)))
            procs = list(self._procs)
        for proc, share in zip(procs, self.shares, strict=True):
            proc.share = share
            proc.send_setup(setup)
        for proc in procs:
            self.pids.append(proc.ready())

    async def __aenter__(self) -> ProcessPool:
        try:
            await asyncio.to_thread(self._start)
        except BaseException:
            await asyncio.to_thread(self.close, 0.2)
            raise
        return self

    async def __aexit__(self, kind: object, *exc: object) -> None:
        # after a failure (a timeout, a shard that raised) a worker still busy is not waited for
        await asyncio.to_thread(self.close, STOP_WAIT_S if kind is None else 0.2)

    def job(
        self, index: int, calls: Sequence[Call], limits: dict[int, tuple[str, int]]
    ) -> ShardJob:
        """A shard's job: its calls pointing into the rows it carries, in chunks of the pool's
        ``chunk`` calls (share set by ``chunks``)."""
        positions: dict[int, int] = {}
        rows: list[tuple[Any, ...]] = []
        local: list[tuple[int, int, int, str]] = []
        plan_rows = self.plan.rows
        for call in calls:
            at = positions.get(call.row_index)
            if at is None:
                at = positions[call.row_index] = len(rows)
                rows.append(_row_values(plan_rows[call.row_index]))
            local.append((call.position, at, call.repetition, call.key))
        stored = self.plan.stored
        return ShardJob(
            index=index,
            calls=local,
            rows=rows,
            stored={c.key: stored[c.key] for c in calls} if stored is not None else None,
            share=0,
            limits=dict(limits),
            chunk=self.chunk,
        )

    async def _take(self) -> _Process:
        """The live worker holding the fewest shards, once it holds fewer than ``DEPTH``."""
        while True:
            live = [p for p in self._procs if p.dead is None]
            if not live:
                raise WorkerDiedError("no worker process is left to run the shard")
            proc = min(live, key=operator.attrgetter("held"))
            if proc.held < DEPTH:
                proc.held += 1
                return proc
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(waiter)

    def _give_back(self, proc: _Process) -> None:
        proc.held -= 1
        for waiter in self._waiting:
            if not waiter.done():
                waiter.set_result(None)
                break

    async def chunks(self, job: ShardJob) -> AsyncGenerator[ShardDone, None]:
        """Run a shard on a worker (``_take``), with that worker's share of the concurrency: its
        chunks' answers, in order, as the worker sends them. Close the iterator (``aclosing``)
        when not reading it to its end.

        Raises:
            WorkerDiedError: when the worker ended while it held the shard (the pool is then of no
                further use: the run stops).
            BaseException: what a chunk raised in the worker (a ``WorkerError`` when it could not
                be sent back as it is); the chunks before it came first.
        """
        proc = await self._take()
        try:
            job.share = proc.share
            answers: asyncio.Queue[_Answer] = asyncio.Queue()
            await asyncio.to_thread(proc.send, asyncio.get_running_loop(), answers.put_nowait, job)
            while True:
                kind, value = await answers.get()
                if kind == "chunk":
                    yield value
                    del value
                elif kind == "end":
                    return
                else:
                    raise value
        finally:
            self._give_back(proc)

    async def run(self, job: ShardJob) -> list[ShardDone]:
        """Every chunk's answer of a shard (``chunks``), once the shard is done."""
        async with contextlib.aclosing(self.chunks(job)) as answers:
            return [done async for done in answers]

    def close(self, wait: float = STOP_WAIT_S) -> None:
        """Stop every worker: asked to finish, then terminated (and killed) if still alive after
        ``wait`` seconds. Safe to call more than once."""
        with self._starting:
            self._closed = True
            procs, self._procs = self._procs, []
        stop_processes(procs, wait)
