"""A shard of a run: its target calls, the items their transcripts become, and every provider's scores.

``run_shard`` is the one place calls → items → scores happen: ``evaluate_agent`` and
``evaluate_workflow`` run the whole plan as one shard in-process, the Prefect flow runs one task per
shard in its own process, and a Dask worker runs whole shards of the same plan. Calls fan out over
a bounded pool of workers sharing one semaphore; each finished call is journaled before the next
stage sees it, so a resumed run makes only the calls it is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from evalpipe._internal.calls import is_call_failure
from evalpipe.evaluators.base import AgentScoped, Evaluator
from evalpipe.itemize import RunItems, WorkflowItems, agent_item, workflow_items
from evalpipe.items import EvalItem
from evalpipe.llm import run_answers
from evalpipe.results import Diagnostic, EvalResults
from evalpipe.runner.plan import Call, RunPlan
from evalpipe.runner.state import RunState, StorageError
from evalpipe.secrets import Scrubber
from evalpipe.spend import BudgetReached, Ledger, metering
from evalpipe.tally import OVERALL, errored_results, merge_results
from evalpipe.targets.base import call_agent
from evalpipe.targets.workflow import call_workflow
from evalpipe.transcripts import Transcript, load_transcript

__all__ = [
    "CallOutcome",
    "Scope",
    "ShardResult",
    "Source",
    "build_items",
    "evaluate_items",
    "evaluate_prebuilt",
    "run_calls",
    "run_in_process",
    "run_shard",
]

Source = Literal["made", "reused", "recorded"]
"""Where a call's transcript came from: the target was called now (``made``), the journal or the
re-scored run held it (``reused``), or the dataset row is a recording (``recorded``)."""

Scope = Callable[[int, Evaluator, WorkflowItems], AbstractAsyncContextManager[Any]]
"""What a provider's evaluation of a shard runs inside: ``scope(provider_index, provider, items)``
(the Prefect layer holds global concurrency slots there)."""


@dataclass(slots=True)
class CallOutcome:
    """A finished call: its transcript and where it came from."""

    call: Call
    run: Transcript
    source: Source
    json: str | None = None

    @property
    def reused(self) -> bool:
        """The transcript was not made in this run."""
        return self.source == "reused"

    def transcript_json(self) -> str:
        """The transcript as JSON (serialized once, for the journal and runs.parquet)."""
        if self.json is None:
            self.json = self.run.model_dump_json(fallback=str)
        return self.json


@dataclass(slots=True)
class ShardResult:
    """What a shard became: its calls' outcomes (in call order) and one EvalResults per provider."""

    outcomes: list[CallOutcome]
    results: list[EvalResults]
    items: int
    """How many items the transcripts became (overall and per agent)."""


def _held(plan: RunPlan, state: RunState, call: Call) -> CallOutcome | None:
    """The outcome of a call whose transcript is held already (the re-scored run, the journal, the
    row's recording), or None when the target must be called (:func:`_made`)."""
    stored = plan.stored
    if stored is not None:
        return CallOutcome(call, stored[call.key], "reused")
    journal = state.journal
    if journal is not None and (text := journal.get(call.key)) is not None:
        return CallOutcome(call, load_transcript(plan.kind, text), "reused", text)
    row = plan.rows[call.row_index]
    if row.recorded is not None:
        run = row.recorded
        if call.repetition:
            run = run.model_copy(update={"repetition": call.repetition})
        return CallOutcome(call, run, "recorded")
    return None


async def _made(
    plan: RunPlan,
    call: Call,
    semaphore: asyncio.Semaphore | None,
    state: RunState,
    ledger: Ledger | None,
) -> CallOutcome | None:
    """The outcome of calling the target for ``call`` (its transcript stamped), counted in the
    ``ledger``; None when the budget was spent while the call waited for its slot (it was not
    made: the calls in flight are what a budget stop overshoots by, not the calls waiting)."""
    row = plan.rows[call.row_index]
    target = plan.target
    if target is None:  # pragma: no cover - prepare_suite refuses such a plan
        raise RuntimeError(f"row {row.id!r} has no recording and the plan has no target")
    call_target = (
        call_workflow
        if target.kind == "workflow"
        else functools.partial(call_agent, attempts=plan.call_attempts)
    )
    slots = None
    if semaphore is not None:
        # a slot refuses the call once the run is stopped or the budget is spent
        budget = ledger if ledger is not None and ledger.budget is not None else None
        slots = _UnlessStopped(semaphore, state, budget)
    try:
        made: Transcript = await call_target(
            target.obj,
            row.query,
            query_index=row.index,
            repetition=call.repetition,
            semaphore=slots,
            call_timeout=plan.call_timeout,
        )
    except BaseException:
        if ledger is not None:
            ledger.finish("target", plan.target_model, None, answered=False)
        raise
    spent_out = slots is not None and slots.spent_out
    if ledger is not None:
        ledger.finish("target", plan.target_model, made.usage, answered=not spent_out)
    if spent_out:
        return None
    # it ended now and started its latency ago (the latency excludes waiting for a slot)
    made.ended_at = ended = datetime.now(UTC)
    latency = made.usage.latency_seconds
    made.started_at = ended - timedelta(seconds=latency) if latency is not None else ended
    return CallOutcome(call, made, "made")


def _settle_many(
    plan: RunPlan, state: RunState, outcomes: Sequence[CallOutcome]
) -> list[CallOutcome]:
    """Fetched outcomes made ready for the next stage: a made transcript's secrets masked and,
    without error, journaled; the journal lines written at once (one write, not one a call: a
    write lets another thread take the GIL, for up to its switch interval).

    Raises:
        StorageError: when the journal cannot be written (the run is stopped first).
    """
    journal = state.journal
    scrub = state.scrubber if state.scrubber else None  # told once: it has secrets to mask
    settled: list[CallOutcome] = []
    lines: list[tuple[str, str]] = []
    for outcome in outcomes:
        if outcome.source == "made":
            if scrub is not None:
                serialized = outcome.transcript_json()
                if scrub.found(serialized):
                    # an endpoint or a traceback echoed a secret back: masked before it is stored
                    clean = scrub(serialized)
                    run = load_transcript(plan.kind, clean)
                    outcome = CallOutcome(outcome.call, run, "made", clean)
            if journal is not None and outcome.run.error_code is None:
                lines.append((outcome.call.key, outcome.transcript_json()))
        settled.append(outcome)
    if lines:
        assert journal is not None
        try:
            journal.record_many(lines)
        except OSError as exc:
            failure = StorageError(
                f"cannot journal a finished call in {journal.path}: {exc.strerror or exc}; the "
                "run stopped making calls (the calls journaled so far are kept: free the space "
                "or fix the directory, then run again to resume)"
            )
            state.stop(failure)
            raise failure from exc
    return settled


async def run_calls(
    plan: RunPlan,
    state: RunState,
    calls: Sequence[Call],
    *,
    semaphore: asyncio.Semaphore | None,
    workers: int,
    on_call: Callable[[CallOutcome], None] | None = None,
    on_settled: Callable[[int, CallOutcome], None] | None = None,
    ledger: Ledger | None = None,
) -> list[CallOutcome]:
    """Every call, ``workers`` at a time (the semaphore may bound them further, shared with other
    shards); outcomes in call order whatever order they finish in.

    A finished call is settled (its transcript serialized and journaled, ``on_call`` told) by one
    task per shard, a turn after it finished (or by a worker, once ``workers`` finished calls
    wait: an agent that never yields lets no other task run), so the calls that finish together
    do not hold back the next ones; every call is settled before this returns. ``on_settled(index,
    outcome)`` is told of each settled call (its index in ``calls``) before ``on_call``.

    When the run is stopped (``state.stop``: a call that cannot be journaled) no further call
    starts, here or in any other shard of the state (nor one that was waiting for a slot), and
    the calls in flight are cancelled.
    Cancelled otherwise (a run timeout, SIGTERM), the calls that finished are journaled all the
    same.

    With a ``ledger``, every call made is counted in it (and every call reused from the journal
    as what an earlier attempt spent); once its budget is spent no further call starts, the calls
    in flight finish and are settled, then :class:`~evalpipe.spend.BudgetReached` is raised.

    Raises:
        StorageError: (or the run's other stop reason) when the run was stopped.
        evalpipe.spend.BudgetReached: when the ledger's budget stopped the calls.
    """
    total = len(calls)
    out: list[CallOutcome | None] = [None] * total
    next_index = 0
    count = max(1, min(workers, total))
    unsettled: list[tuple[int, CallOutcome]] = []
    """Finished calls not yet settled, in the order they finished."""
    waiting = asyncio.Event()
    alive = count
    spent_out = False
    """The ledger refused a call: the shard stops taking calls."""

    def settle_finished() -> None:
        while unsettled:
            batch = unsettled.copy()
            unsettled.clear()
            settled = _settle_many(plan, state, [fetched for _, fetched in batch])
            for (index, _), outcome in zip(batch, settled, strict=True):
                out[index] = outcome
                if on_settled is not None:
                    on_settled(index, outcome)
                if on_call is not None:
                    on_call(outcome)

    async def worker() -> None:
        nonlocal next_index, alive, spent_out
        try:
            while next_index < total and state.failure is None and not spent_out:
                index = next_index
                call = calls[index]
                fetched = _held(plan, state, call)
                if fetched is None:
                    if ledger is not None and not ledger.start():
                        spent_out = True  # the budget is spent: this call is left for a rerun
                        break
                    next_index += 1
                    fetched = await _made(plan, call, semaphore, state, ledger)
                    if fetched is None:
                        spent_out = True  # spent while it waited for a slot: not made
                        break
                    if state.failure is not None:
                        break  # refused its slot (or made as the run stopped): not the call's
                else:
                    next_index += 1
                    if ledger is not None and fetched.source == "reused" and plan.stored is None:
                        ledger.reuse("target", plan.target_model, fetched.run.usage)
                unsettled.append((index, fetched))
                if len(unsettled) >= count:
                    settle_finished()
                elif len(unsettled) == 1:
                    waiting.set()
        finally:
            alive -= 1
            waiting.set()

    async def settler() -> None:
        while True:
            await waiting.wait()
            waiting.clear()
            # one turn later: the calls given the slots the finished ones released start first
            await asyncio.sleep(0)
            settle_finished()
            if not alive:
                return

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(count):
                group.create_task(worker())
            group.create_task(settler())
    except BaseException as failed:
        if state.failure is None:
            # cancelled (a run timeout, SIGTERM) or failed elsewhere: the calls that finished are
            # journaled all the same, so a resumed run does not make them again
            with contextlib.suppress(StorageError):
                _settle_many(plan, state, [fetched for _, fetched in unsettled])
        if isinstance(failed, BaseExceptionGroup):
            raise failed.exceptions[0] from None
        raise
    if state.failure is not None:
        raise state.failure
    if spent_out:
        assert ledger is not None
        raise ledger.stop()
    return [o for o in out if o is not None]


class _UnlessStopped:
    """The run's semaphore, refusing a slot once the run is stopped (``state.stop``), or, for
    one call, once the ledger's budget is spent: a call that was waiting for one meanwhile is not
    made (its target never sees it)."""

    __slots__ = ("_ledger", "_semaphore", "_state", "spent_out")

    def __init__(
        self, semaphore: asyncio.Semaphore, state: RunState, ledger: Ledger | None = None
    ) -> None:
        self._semaphore = semaphore
        self._state = state
        self._ledger = ledger
        self.spent_out = False
        """The budget refused the slot."""

    async def __aenter__(self) -> None:
        await self._semaphore.acquire()
        failure = self._state.failure
        if failure is not None:
            self._semaphore.release()
            raise RuntimeError(f"the run stopped: {failure}")
        if self._ledger is not None and self._ledger.reached():
            self._semaphore.release()
            self.spent_out = True
            raise RuntimeError("the run's budget is spent")

    async def __aexit__(self, *exc: object) -> None:
        self._semaphore.release()


def build_items(plan: RunPlan, outcomes: Sequence[CallOutcome]) -> WorkflowItems:
    """The items of a shard's transcripts: one per agent call; for a workflow call an overall item
    and one per agent turn (see :mod:`evalpipe.itemize`).

    Raises:
        ValueError: for a tool with two schemas when the plan is ``strict_tools``.
    """
    return _in_call_order(plan, [_items_of(plan, outcome) for outcome in outcomes])


_CallItems = EvalItem | RunItems
"""One call's items: an agent call's item, a workflow call's items."""


def _items_of(plan: RunPlan, outcome: CallOutcome) -> _CallItems:
    call = outcome.call
    row = plan.rows[call.row_index]
    run = outcome.run
    if plan.kind == "agent":
        return agent_item(
            run,  # type: ignore[arg-type]
            item_id=plan.item_id(call),
            expect=row.expect,
            recorded_head=row.recorded_head,
            declared_tools=plan.target.declared_tools if plan.target is not None else (),
            tools=plan.tools_override,
            split=plan.split,
            strict_tools=plan.strict_tools,
            metadata=plan.metadata(call),
        )
    return workflow_items(
        run,  # type: ignore[arg-type]
        item_id=plan.item_id(call),
        expect=row.expect,
        split=plan.split,
        upstream_context=plan.upstream_context,
        include_overall=plan.include_overall,
        include_per_agent=plan.include_per_agent,
        metadata=plan.metadata(call),
    )


def _in_call_order(plan: RunPlan, built: Sequence[_CallItems | Exception | None]) -> WorkflowItems:
    """A shard's items from each call's, in call order.

    Raises:
        ValueError: (or what else building a call's items raised) for the first call, in call
            order, whose items could not be built.
    """
    items = WorkflowItems()
    for made in built:
        if made is None:  # pragma: no cover - run_calls settles every call or raises
            raise RuntimeError("a call of the shard was not settled")
        if isinstance(made, Exception):
            raise made
        if plan.kind == "agent":
            items.overall.append(made)  # type: ignore[arg-type]
        else:
            items.add(made)  # type: ignore[arg-type]
    return items


async def _evaluate_group(
    plan: RunPlan,
    state: RunState,
    index: int,
    provider: Evaluator,
    items: list[EvalItem],
    name: str,
    first_position: int,
) -> EvalResults:
    """One provider over one group of items; a provider that raises gives errored items.

    A batched provider gets one server-side evaluation per run and group (created by the first
    shard) and one server run per ``batch_size`` items of this shard, tagged so a retry or a
    resume does not pay twice: its ``batch_index`` counts the shard's batches from the shard's
    first call position (unique in the run while a group has no more batches in a shard than
    the shard has calls), so items evaluated in one go (``evaluate_prebuilt``) are batches 0, 1,
    2, ..."""
    batched = plan.batched(provider)
    failing = "could not create the eval: " if batched is not None else ""
    try:
        if batched is None:
            result = await provider.evaluate(items, eval_name=name)
        else:
            key = f"{plan.eval_key}:{name}" if plan.eval_key is not None else None
            eval_id = await state.eval_id(
                name, lambda: batched.create_eval(items, eval_name=name, key=key)
            )
            failing = ""
            size = max(1, int(batched.batch_size or len(items)))
            slots = state.run_slots(index, int(batched.max_concurrent_runs or 1))

            async def batch(offset: int) -> EvalResults:
                async with slots:
                    return await batched.run_batch(
                        eval_id,
                        items[offset : offset + size],
                        eval_name=name,
                        batch_index=first_position + offset // size,
                    )

            parts = await asyncio.gather(*(batch(i) for i in range(0, len(items), size)))
            result = merge_results(list(parts))
    except BudgetReached:
        raise  # the run's budget, not the provider's failure: the items are judged on resume
    except BaseException as exc:
        if not is_call_failure(exc):
            raise
        return errored_results(provider.name, items, name, f"{failing}{type(exc).__name__}: {exc}")
    result.provider = provider.name
    return result


def _empty(provider: Evaluator, name: str) -> EvalResults:
    return EvalResults(
        provider=provider.name,
        run_id=name,
        result_counts={"passed": 0, "failed": 0, "errored": 0},
    )


async def evaluate_items(
    plan: RunPlan,
    state: RunState,
    index: int,
    provider: Evaluator,
    items: WorkflowItems,
    first_position: int = 0,
) -> EvalResults:
    """One provider over one shard's items.

    Agents: one result over the items. Workflows: the overall evaluation
    (``"{name} — overall"``) with ``sub_results`` keyed by agent (``"{name} — {agent}"``), each
    name ending as :meth:`RunPlan.provider_tail` says; without overall items the
    top level is MAF's synthetic aggregate (``run_id="aggregate"``, summed counts). An ``agents:``
    scope limits the groups a provider sees.
    """
    if plan.kind == "agent":
        name = plan.eval_name(provider)
        if not items.overall:
            return _empty(provider, name)
        return await _evaluate_group(
            plan, state, index, provider, items.overall, name, first_position
        )
    groups = {agent: group for agent, group in items.per_agent.items() if group}
    overall = items.overall
    if isinstance(provider, AgentScoped):
        groups = {a: g for a, g in groups.items() if a in provider.agents}
        overall = overall if OVERALL in provider.agents else []
    tail = plan.provider_tail(provider)
    if not groups and not overall:
        return _empty(provider, f"{plan.name}{tail}")
    names = list(groups)
    parts = [(groups[a], f"{plan.name} — {a}{tail}") for a in names]
    if overall:
        parts.append((overall, f"{plan.name} — overall{tail}"))
    done = await asyncio.gather(
        *(_evaluate_group(plan, state, index, provider, g, n, first_position) for g, n in parts)
    )
    subs = dict(zip(names, done[: len(names)], strict=True))
    if overall:
        top = done[-1]
        top.sub_results = subs
        return top
    return EvalResults(
        provider=provider.name,
        eval_id="aggregate",
        run_id="aggregate",
        status="completed" if all(s.status == "completed" for s in subs.values()) else "partial",
        result_counts={
            k: sum(getattr(s, k) for s in subs.values()) for k in ("passed", "failed", "errored")
        },
        sub_results=subs,
    )


async def run_shard(
    plan: RunPlan,
    state: RunState,
    calls: Sequence[Call],
    *,
    semaphore: asyncio.Semaphore | None,
    workers: int,
    on_call: Callable[[CallOutcome], None] | None = None,
    scope: Scope | None = None,
    ledger: Ledger | None = None,
) -> ShardResult:
    """Calls → items → every provider's scores, for one shard of the plan's calls.

    Providers evaluate the shard concurrently, each inside ``scope`` when given; their model
    requests read the answers the run journaled (``state.answers``) and are counted in the
    ``ledger``. When the ledger's budget is spent no new call or request starts; this returns
    once the calls and requests in flight (of every shard counted in the ledger) have finished
    and been kept, by raising :class:`~evalpipe.spend.BudgetReached`.
    """
    built: list[_CallItems | Exception | None] = [None] * len(calls)

    def itemize(index: int, outcome: CallOutcome) -> None:
        # built as calls settle, overlapping the calls still in flight; raised in call order
        try:
            built[index] = _items_of(plan, outcome)
        except Exception as exc:
            built[index] = exc

    try:
        outcomes = await run_calls(
            plan,
            state,
            calls,
            semaphore=semaphore,
            workers=workers,
            on_call=on_call,
            on_settled=itemize,
            ledger=ledger,
        )
        items = _in_call_order(plan, built)
        first = calls[0].position if calls else 0

        async def one(index: int, provider: Evaluator) -> EvalResults:
            # this task's requests (a judge's) are metered and read the run's journaled answers
            metering.set(ledger)
            run_answers.set(state.answers)
            around = scope(index, provider, items) if scope is not None else nullcontext()
            async with around:
                return await evaluate_items(plan, state, index, provider, items, first)

        # every provider finishes (its requests in flight kept) before a stop is raised
        settled = await asyncio.gather(
            *(one(i, p) for i, p in enumerate(plan.providers)), return_exceptions=True
        )
        results: list[EvalResults] = []
        for outcome in settled:
            if isinstance(outcome, BaseException):
                raise outcome
            results.append(outcome)
    except BudgetReached:
        if ledger is not None:
            await ledger.drained()
        raise
    if state.scrubber:
        for result in results:
            _scrub(result, state.scrubber)
    return ShardResult(outcomes, results, items.count)


def _scrub_value(value: Any, scrub: Scrubber) -> Any:
    if isinstance(value, str):
        return scrub(value) if scrub.found(value) else value
    if isinstance(value, dict):
        return {k: _scrub_value(v, scrub) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_value(v, scrub) for v in value]
    return value


def _scrub(result: EvalResults, scrub: Scrubber) -> None:
    """Mask the run's secrets in a provider's results (an endpoint's error that quotes the key,
    a judge answer that echoes it), in place, before anything is written."""
    result.error = _scrub_value(result.error, scrub)
    for item in result.items:
        for name in ("error_message", "input_text", "output_text", "metadata"):
            setattr(item, name, _scrub_value(getattr(item, name), scrub))
        for score in item.scores:
            for name in ("reason", "error_message", "label", "sample"):
                setattr(score, name, _scrub_value(getattr(score, name), scrub))
            if score.diagnostics:
                score.diagnostics = [
                    Diagnostic(d.severity, scrub(d.message)) for d in score.diagnostics
                ]
    for sub in result.sub_results.values():
        _scrub(sub, scrub)


async def run_in_process(
    plan: RunPlan,
    *,
    max_concurrency: int,
    on_call: Callable[[CallOutcome], None] | None = None,
) -> ShardResult:
    """The whole plan as one shard in this process, at most ``max_concurrency`` calls at once,
    nothing journaled.

    Raises:
        ValueError: for ``max_concurrency < 1``.
    """
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}.")
    semaphore = asyncio.Semaphore(max_concurrency)
    return await run_shard(
        plan,
        RunState(),
        plan.calls,
        semaphore=semaphore,
        workers=max_concurrency,
        on_call=on_call,
    )


async def evaluate_prebuilt(
    providers: Sequence[Evaluator],
    items: WorkflowItems,
    name: str,
    *,
    kind: Literal["agent", "workflow"] = "workflow",
) -> list[EvalResults]:
    """Every provider over items built elsewhere (OpenTelemetry traces, Foundry threads): the same
    evaluation and naming as a run's, without calls. One EvalResults per provider, in order."""
    plan = RunPlan(
        name=name,
        kind=kind,
        target=None,
        identity=kind,
        rows=(),
        repetitions=1,
        providers=tuple(providers),
        calls=(),
    )
    state = RunState()
    return list(
        await asyncio.gather(
            *(evaluate_items(plan, state, i, p, items) for i, p in enumerate(providers))
        )
    )
