"""A shard of a suite's run, wherever a Prefect task runner runs it: the one seam between the flow
and where target calls run (docs/design/architecture.md, "One seam").

A shard's calls go through the runner (``runner.run_shard``); what travels back is the rows of its
tables already encoded (``RowEncoder``), its results stripped and its counts (:class:`ShardRows`),
never its transcripts and items. A worker builds the run's target, providers and split from the
suite once per thread (:class:`RunSpec`) and gets the dataset rows each shard uses with it
(:class:`ShardJob`); it appends to the run's journal, so the run directory must be on a filesystem
every worker sees (:class:`RunDirUnseenError`). Prefect is imported only for global concurrency
limits (``limits_scope``), when a job carries any.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import threading
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from evalpipe._internal.adaptive import LimitChange, limit_changes
from evalpipe.artifacts.encoder import EncodedBatch, RowEncoder
from evalpipe.evaluators.base import close_providers
from evalpipe.results import EvalResults
from evalpipe.runner import Call, CallOutcome, RunPlan, RunState, ShardResult, run_shard
from evalpipe.runner.plan import Row, resolve_target
from evalpipe.runner.state import RUN_MARKER
from evalpipe.spend import Budget, Ledger, Price, Spend, tokens_of
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
    "HeldRun",
    "RunDirUnseenError",
    "RunSpec",
    "ShardJob",
    "ShardRows",
    "run_job",
    "run_job_blocking",
    "strip_results",
]


T = TypeVar("T")


class Sealed(Generic[T]):
    """A task parameter that Prefect and Dask pass along without looking inside.

    Prefect's ``quote`` does this for Prefect, but it is a namedtuple, and Dask rebuilds the tuples
    in a task's arguments as plain tuples: a quoted value reached a Dask worker as ``(value,)``.
    A plain object is left alone by both, so a shard's spec and job travel in one.
    """

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


class RunDirUnseenError(RuntimeError):
    """A worker cannot see the run directory the flow's process created (another machine with
    another filesystem): its finished calls would be journaled where nobody reads them."""


@dataclass(frozen=True, slots=True)
class RunSpec:
    """What a worker needs to run a suite's shards: the suite (to build its target, providers and
    split) and the plan without what is built from it, without rows and calls (each job carries
    its own), stored transcripts and gates. Small: it is sent with every shard."""

    key: str
    """The run's identity in a worker's cache: its directory, the suite's fingerprint and a nonce
    of this flow run (a resume of the same directory is another run: a worker that kept the first
    one's journal would not know the calls its other workers finished)."""
    suite: EvalSuite
    skeleton: RunPlan

    @classmethod
    def of(cls, plan: RunPlan, suite: EvalSuite) -> RunSpec:
        """The spec of a prepared suite plan."""
        skeleton = replace(
            plan,
            target=None if plan.target is None else replace(plan.target, obj=None),
            providers=(),
            split=None,
            rows=(),
            calls=(),
            stored=None,
            gates=(),
        )
        return cls(
            key=f"{plan.run_dir}|{suite.fingerprint()}|{uuid.uuid4().hex}",
            suite=suite,
            skeleton=skeleton,
        )


@dataclass(slots=True)
class ShardJob:
    """One shard: its calls, the rows they call (``None``: the registered plan's own rows, in the
    flow's process), the transcripts they re-score, how many calls it may have in flight, the
    providers' global concurrency limits (provider index -> limit name, slots) and, on a worker,
    its share of what is left of the run's budget (set by the flow when the shard starts)."""

    index: int
    calls: tuple[Call, ...]
    rows: tuple[Row, ...] | None
    stored: dict[str, Transcript] | None
    share: int
    limits: dict[int, tuple[str, int]] = field(default_factory=dict)
    budget: Budget | None = None

    @classmethod
    def of(
        cls,
        plan: RunPlan,
        index: int,
        calls: tuple[Call, ...],
        *,
        share: int,
        limits: dict[int, tuple[str, int]],
        carry_rows: bool,
    ) -> ShardJob:
        """A shard's job; ``carry_rows``: with the rows its calls use (their ``row_index`` then
        points into them), for a worker that does not hold the plan's rows."""
        stored = plan.stored
        kept = {c.key: stored[c.key] for c in calls} if stored is not None else None
        if not carry_rows:
            return cls(index, calls, None, kept, share, dict(limits))
        # the plan's row index -> its place among the rows the job carries, in first-use order
        at = {row: n for n, row in enumerate(dict.fromkeys(c.row_index for c in calls))}
        rows = tuple(plan.rows[row] for row in at)
        local = tuple(Call(c.position, at[c.row_index], c.repetition, c.key) for c in calls)
        return cls(index, local, rows, kept, share, dict(limits))


@dataclass(slots=True)
class ShardRows:
    """What a shard sends back: its rows (``batch()``), its results stripped (``strip_results``:
    statuses, scores and the texts of the first failures), the facts and verdicts of its calls.

    Sent from a worker, the rows travel as one pickled and compressed value (zlib's fastest level,
    ~10x), unpacked only where they are written: the task runners unpickle a result more than once
    and keep it until the flow's collector frees it (at 2,000 calls ~12 MiB and ~40 ms each time
    as objects, ~0.35 MiB compressed).
    """

    index: int
    encoded: EncodedBatch | bytes
    """The rows, or (sent from a worker) the rows pickled and compressed."""
    results: list[EvalResults]
    calls: CallTally
    verdicts: Counts
    n_calls: int
    spent: Spend | None = None
    """What the shard's calls spent, when a worker ran it (the flow's own ledger counts the
    shards it runs itself)."""
    limit_changes: list[LimitChange] = field(default_factory=list)
    """The changes of the endpoints' limits on requests in flight that the shard's requests
    made."""

    def batch(self) -> EncodedBatch:
        """The rows (unpacked now when they came from a worker: nothing here keeps them)."""
        encoded = self.encoded
        return pickle.loads(zlib.decompress(encoded)) if isinstance(encoded, bytes) else encoded

    def pack(self) -> None:
        """Pickle and compress the rows into one value (once)."""
        if not isinstance(self.encoded, bytes):
            pickled = pickle.dumps(self.encoded, protocol=pickle.HIGHEST_PROTOCOL)
            self.encoded = zlib.compress(pickled, 1)


def strip_results(result: EvalResults) -> None:
    """Drop what is written already and not needed for the gate and the summary (the items' input
    items, texts, metadata and samples), so a long run does not hold every transcript in memory
    (the failures artifact reads the queries and responses from the run directory)."""
    result.input_items = []
    for item in result.items:
        item.input_text = item.output_text = None
        item.metadata = None
        for score in item.scores:
            score.sample = None
    for sub in result.sub_results.values():
        strip_results(sub)


def _cost(price: Price, outcome: CallOutcome) -> float | None:
    """A call's cost at its price; None for a recording or a call that reported no tokens."""
    inp, out, _ = tokens_of(outcome.run.usage)
    if outcome.source == "recorded" or (inp is None and out is None):
        return None
    return price.cost(inp, out)


@dataclass(slots=True)
class HeldRun:
    """A run as one process (or one worker thread) holds it: in the flow's process (``task_runner:
    threads``) the flow's own plan and journal, passed to its shard tasks as they are."""

    plan: RunPlan
    suite: EvalSuite
    state: RunState
    semaphore: asyncio.Semaphore | None
    """The run-wide bound on calls in flight, in the flow's process; None in a worker (each job
    brings its share)."""
    on_call: Callable[[CallOutcome], None] | None = None
    """Told of every finished call (the flow's progress), in the flow's process."""
    ledger: Ledger | None = None
    """The run's spend and budget, in the flow's process; None in a worker (each job brings its
    share of the budget)."""


_LOCAL = threading.local()
"""A worker thread's event loop and run (``run_job_blocking``)."""


def _built(spec: RunSpec) -> HeldRun:
    """The run built from its spec in a worker: target, providers and split from the suite, the
    journal opened for appending (the flow's process holds the directory's lock)."""
    skeleton = spec.skeleton
    run_dir = skeleton.run_dir
    if run_dir is not None and not (run_dir / RUN_MARKER).exists():
        raise RunDirUnseenError(
            f"the worker on {socket.gethostname()} cannot see the run directory {run_dir} (no "
            f"{RUN_MARKER} there): put the suite's output_dir on a filesystem every worker "
            "mounts at the same path, or run the workers on this machine"
        )
    suite = spec.suite
    plan = replace(
        skeleton,
        target=None if skeleton.target is None else resolve_target(build_target(suite)),
        providers=tuple(build_evaluators(suite)),
        split=build_split(suite),
    )
    return HeldRun(plan, suite, RunState.open(plan, marker=False, lock=False), None)


async def run_job(run: HeldRun, job: ShardJob) -> ShardRows:
    """Run one shard of ``run`` (the flow's, or a worker's) and return its rows."""
    base = run.plan
    plan = replace(
        base,
        rows=base.rows if job.rows is None else job.rows,
        calls=job.calls,
        stored=job.stored if base.stored is None else base.stored,
    )
    semaphore = run.semaphore or asyncio.Semaphore(job.share)
    scope = None
    if job.limits:
        from evalpipe.pipeline.limits import limits_scope  # lazy: only with global limits

        scope = limits_scope(job.limits)
    # a worker's shard counts its spend in a ledger of its own, against its share of the budget
    ledger = run.ledger or Ledger(job.budget, plan.prices)
    changes: list[LimitChange] = []
    collecting = limit_changes.set(changes)
    try:
        shard = await run_shard(
            plan,
            run.state,
            job.calls,
            semaphore=semaphore,
            workers=job.share,
            on_call=run.on_call,
            scope=scope,
            ledger=ledger,
        )
    finally:
        limit_changes.reset(collecting)
    # Off the event loop: encoding is the shard's CPU, and other shards' calls are in flight.
    rows = await asyncio.to_thread(_rows, plan, job, shard)
    rows.spent = ledger.spent if run.ledger is None else None
    rows.limit_changes = changes
    return rows


def _rows(plan: RunPlan, job: ShardJob, shard: ShardResult) -> ShardRows:
    """A finished shard's answer: its rows encoded, its results stripped, its calls counted."""
    outcomes = shard.outcomes
    tally = CallTally()
    for outcome in outcomes:
        tally.add(outcome.source, outcome.run)
    price = plan.prices.get(plan.target_model)
    encoder = RowEncoder()
    runs = encoder.target_runs(
        runs=[o.run for o in outcomes],
        run_ids=[o.call.key for o in outcomes],
        row_ids=[plan.rows[o.call.row_index].id for o in outcomes],
        transcripts=[o.transcript_json() for o in outcomes],
        cached=[o.reused for o in outcomes],
        target=plan.identity,
        costs=None if price is None else [_cost(price, o) for o in outcomes],
    )
    encoded = encoder.results(shard.results, SummaryTally().check(shard.results))
    encoded.runs = runs
    verdicts = call_verdicts(shard.results)
    for result in shard.results:
        strip_results(result)
    return ShardRows(
        index=job.index,
        encoded=encoded,
        results=shard.results,
        calls=tally,
        verdicts=verdicts,
        n_calls=len(outcomes),
    )


def run_job_blocking(spec: RunSpec, job: ShardJob) -> ShardRows:
    """``run_job`` in a worker thread of a task runner (a process pool's, a Dask or Ray worker's).

    Each worker thread keeps one event loop and the run built in it for all its shards: the
    target's and the judges' connections belong to the loop they were opened on, so a loop per
    task (``asyncio.run``, what Prefect does for an async task in a worker process) would close
    them after every shard, and the run would be built again each time. A thread that gets
    another run's shard closes the previous run's providers first.
    """
    loop: asyncio.AbstractEventLoop | None = getattr(_LOCAL, "loop", None)
    if loop is None or loop.is_closed():
        loop = _LOCAL.loop = asyncio.new_event_loop()
    run: HeldRun | None = getattr(_LOCAL, "run", None)
    if run is None or getattr(_LOCAL, "key", None) != spec.key:
        if run is not None:
            loop.run_until_complete(
                close_providers(run.plan.providers, keep=shared_evaluators(run.suite))
            )
            run.state.close()
        run = _LOCAL.run = _built(spec)
        _LOCAL.key = spec.key
    rows = loop.run_until_complete(run_job(run, job))
    rows.pack()  # now: the rows' objects go before the task runner pickles the answer
    return rows
