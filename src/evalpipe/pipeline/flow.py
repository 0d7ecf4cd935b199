"""The evaluation flow: a suite's target calls, items, evaluations, artifacts and gate, on Prefect.

Granularity follows shared measurements (docs/pipeline.md): one task per *shard* of target calls
(not per call), one task per shard to build items, one task per provider per shard to evaluate
(local checks run in-process inside it), then one task each to write the artifacts and check the
gate. Tasks are awaited with ``asyncio.gather`` from the async flow (``.map``/``.submit`` from an
async flow cost ~16x more per task). Inside a shard, calls run on asyncio; one semaphore bounds
concurrent target calls across every shard of the run. Large values travel as ``quote(...)`` so
Prefect does not walk them.
"""

import asyncio
import contextlib
import contextvars
import gc
import html
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    acreate_link_artifact,
    acreate_markdown_artifact,
    acreate_progress_artifact,
    acreate_table_artifact,
    aupdate_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.concurrency.asyncio import concurrency
from prefect.runtime import flow_run
from prefect.tasks import exponential_backoff
from prefect.utilities.annotations import quote

from evalpipe.artifacts import RunRecord, RunWriter
from evalpipe.pipeline.params import redact, resolve_suite, suite_label
from evalpipe.pipeline.plan import Call, CallOutcome, RunPlan, ShardItems
from evalpipe.pipeline.storage import is_remote, local_base, publish
from evalpipe.results import EvalResults, merge_results
from evalpipe.suite import EvalSuite, SuiteError
from evalpipe.summary import summarize

__all__ = ["GateFailedError", "ProgressHook", "eval_flow", "progress_hook"]

ProgressHook = Callable[[str, int, int], None]
"""Called as ``hook(stage, done, total)`` when calls finish ("calls") and shards finish ("items")."""

progress_hook: contextvars.ContextVar[ProgressHook | None] = contextvars.ContextVar(
    "evalpipe_progress_hook", default=None
)
"""Set by the CLI to drive its progress bar; the flow calls it from its own event loop."""


T = TypeVar("T")


def _q(value: T) -> T:
    """``quote``: pass a large or unhashable value to a task without Prefect walking it."""
    return cast(T, quote(value))


class GateFailedError(Exception):
    """The run's gate failed: the flow run ends Failed with every violated clause in its message."""


def _artifact_key(name: str) -> str:
    """A Prefect artifact key prefix from a suite name (keys allow only ``[a-z0-9-]``)."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "suite"


def _transient(task: Any, task_run: Any, state: Any) -> bool:
    # state.data, not state.result(): the latter never raises for async tasks (prefect-notes §5).
    return isinstance(state.data, OSError)


def _notify(stage: str, done: int, total: int) -> None:
    hook = progress_hook.get()
    if hook is not None:
        hook(stage, done, total)


_RETRY_ON_INFRASTRUCTURE: dict[str, Any] = {
    "cache_policy": NO_CACHE,
    "persist_result": False,
    "retries": 2,
    "retry_delay_seconds": exponential_backoff(backoff_factor=1),
    "retry_jitter_factor": 0.5,
    "retry_condition_fn": _transient,
}
"""Shard tasks retry on infrastructure errors only (OSError: the journal's disk); a failed call
is an errored transcript, not a failed task."""


@task(name="prepare", cache_policy=NO_CACHE, persist_result=False)
async def prepare_task(suite: EvalSuite, run_dir: str, rescore: str | None) -> RunPlan:
    """Load and validate the dataset, target, evaluators and gates; open the run directory."""
    plan = RunPlan.prepare(suite, run_dir, rescore=rescore)
    plan.start()
    return plan


@task(
    name="target-calls",
    task_run_name="calls-{shard_index}",
    **_RETRY_ON_INFRASTRUCTURE,
)
async def run_shard(
    plan: RunPlan,
    shard_index: int,
    calls: Sequence[Call],
    semaphore: asyncio.Semaphore,
    counter: list[int],
) -> int:
    """Make (or take from the journal) one shard's target calls, all at once under the semaphore.

    A call that fails is an errored transcript, not a failed task; the task retries only on
    infrastructure errors (the journal's disk), and the journal keeps a retry from repeating calls.
    The transcripts go to ``plan.shard_outcomes`` (Prefect keeps every task's return value for the
    whole flow run, so tasks return counts, not data); returns how many calls were made.
    """
    total = len(plan.calls)

    async def one(call: Call) -> CallOutcome:
        outcome = await plan.call(call, semaphore)
        counter[0] += 1
        _notify("calls", counter[0], total)
        return outcome

    outcomes = list(await asyncio.gather(*(one(c) for c in calls)))
    plan.shard_outcomes[shard_index] = outcomes
    return sum(1 for o in outcomes if not o.cached)


@task(name="build-items", task_run_name="items-{shard_index}", cache_policy=NO_CACHE)
async def build_items_task(plan: RunPlan, shard_index: int) -> int:
    """Split the shard's transcripts into items: per call, and per agent for workflows.

    The items go to ``plan.shard_items``; returns how many there are.
    """
    items = plan.build_items(plan.shard_outcomes[shard_index])
    plan.shard_items[shard_index] = items
    return items.count


@task(
    name="evaluate",
    task_run_name="{provider_name}-{shard_index}",
    cache_policy=NO_CACHE,
    persist_result=False,
)
async def evaluate_task(
    plan: RunPlan,
    provider_index: int,
    provider_name: str,
    shard_index: int,
    first_position: int,
    limit: tuple[str, int] | None = None,
) -> EvalResults:
    """One provider over one shard's items (local checks run in-process, here).

    ``limit`` is a global concurrency limit and how many of its slots the batch holds while it
    runs: Foundry batches hold one slot of "foundry", and a judge's batches hold as many slots of
    ``judge:<host>:<model>`` as it sends requests at once, so concurrent flow runs (and workers)
    share one quota.
    """
    provider = plan.providers[provider_index]
    return await _evaluate_under(
        plan, provider, plan.shard_items[shard_index], first_position, limit
    )


async def _evaluate_under(
    plan: RunPlan,
    provider: Any,
    items: ShardItems,
    first_position: int,
    limit: tuple[str, int] | None,
) -> EvalResults:
    """``plan.evaluate`` holding ``limit``'s slots while it runs (in the flow or on a worker).

    A judge never sends more requests at once than the slots it holds (its ``max_concurrency``
    is lowered to them), and a small batch holds no more slots than it can use (one request per
    item and metric).
    """
    if limit is None:
        return await plan.evaluate(provider, items, first_position)
    name, slots = limit
    endpoint: Any = getattr(provider, "endpoint", None)
    if judge_limit_name(provider) is not None and endpoint.max_concurrency > slots:
        provider.endpoint = endpoint.model_copy(update={"max_concurrency": slots})
    requests = items.count * max(1, len(getattr(provider, "metrics", ()) or ()))
    async with concurrency(name, occupy=max(1, min(slots, requests)), strict=True):
        return await plan.evaluate(provider, items, first_position)


_WORKER_PLANS: dict[tuple[str, str, str | None], RunPlan] = {}
_WORKER_PLANS_LOCK = threading.Lock()


def _worker_plan(suite: EvalSuite, run_dir: str, rescore: str | None) -> RunPlan:
    """The run's plan in this worker process, prepared once and reused by its later shards."""
    key = (suite.model_dump_json(), run_dir, rescore)
    with _WORKER_PLANS_LOCK:
        plan = _WORKER_PLANS.get(key)
        if plan is None:
            plan = RunPlan.prepare(suite, run_dir, rescore=rescore)
            plan.start()
            _WORKER_PLANS.clear()  # one run at a time per worker process
            _WORKER_PLANS[key] = plan
        return plan


@task(
    name="shard",
    task_run_name="shard-{shard_index}",
    **_RETRY_ON_INFRASTRUCTURE,
)
async def remote_shard_task(
    suite: EvalSuite,
    run_dir: str,
    rescore: str | None,
    shard_index: int,
    calls: Sequence[Call],
    limits: dict[int, tuple[str, int]],
) -> tuple[list[CallOutcome], list[EvalResults]]:
    """A whole shard on a task-runner worker (Dask): calls, items and every provider.

    The worker prepares the run's plan once (dataset, target, evaluators) and appends finished
    calls to the run's journal, so the run directory must be on a filesystem the workers share
    (any directory for a local cluster). Concurrency applies per shard here:
    ``suite.concurrency`` calls at once in each running shard.
    """
    plan = _worker_plan(suite, run_dir, rescore)
    semaphore = asyncio.Semaphore(suite.concurrency)
    outcomes = list(await asyncio.gather(*(plan.call(c, semaphore) for c in calls)))
    items = plan.build_items(outcomes)
    results = [
        await _evaluate_under(plan, provider, items, calls[0].position, limits.get(index))
        for index, provider in enumerate(plan.providers)
    ]
    return outcomes, results


def _task_runner(suite: EvalSuite) -> Any:
    """The suite's task runner for shards, or None to run them in the flow's process."""
    if suite.task_runner == "threads":
        return None
    options = dict(cast(dict[str, Any], suite.task_runner)["dask"] or {})
    try:
        from prefect_dask.task_runners import DaskTaskRunner
    except ImportError:
        raise SuiteError(
            "task_runner: dask needs prefect-dask: pip install 'evalpipe[dask]'"
        ) from None
    if "address" in options:
        return DaskTaskRunner(address=options["address"])
    options.setdefault("dashboard_address", None)
    return DaskTaskRunner(cluster_kwargs=options)


FOUNDRY_LIMIT = "foundry"
"""The global concurrency limit every Foundry batch holds a slot of."""


async def ensure_foundry_limit(plan: RunPlan) -> None:
    """Create the "foundry" global concurrency limit when a suite uses Foundry and it is missing.

    Its size is the largest ``max_concurrent_runs`` of the suite's Foundry providers; an existing
    limit (set by an operator for the whole project's quota) is left as it is.
    """
    sizes = [
        int(getattr(p, "max_concurrent_runs", 4)) for p in plan.providers if plan.is_foundry(p)
    ]
    if not sizes:
        return
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    async with get_client() as client:
        try:
            await client.read_global_concurrency_limit_by_name(FOUNDRY_LIMIT)
        except ObjectNotFound:
            # another flow run may create it meanwhile
            with contextlib.suppress(ObjectAlreadyExists):
                await client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=FOUNDRY_LIMIT, limit=max(sizes))
                )


def judge_limit_name(provider: Any) -> str | None:
    """``judge:<host>:<model>`` for an LLM judge (its endpoint's quota), None for anything else."""
    from urllib.parse import urlsplit

    from evalpipe.llm import ChatEndpoint

    endpoint = getattr(provider, "endpoint", None)
    if not isinstance(endpoint, ChatEndpoint):
        return None
    host = urlsplit(endpoint.base_url).hostname or "local"
    return f"judge:{host}:{endpoint.model}"


async def provider_limits(plan: RunPlan) -> dict[int, tuple[str, int]]:
    """The global concurrency limit each provider's batches hold, by provider index.

    Foundry providers always hold one slot of "foundry" (created when missing). A judge holds
    ``max_concurrency`` slots of ``judge:<host>:<model>`` when an operator created that limit
    (``prefect gcl create judge:api.openai.com:gpt-4o --limit 32``); a judge asking for more than
    the limit is lowered to it. Without the limit, the judge is bounded per flow run by its
    endpoint's ``max_concurrency`` only, and the log says so.
    """
    await ensure_foundry_limit(plan)
    limits: dict[int, tuple[str, int]] = {}
    judges: dict[int, tuple[str, int]] = {}
    for index, provider in enumerate(plan.providers):
        if plan.is_foundry(provider):
            limits[index] = (FOUNDRY_LIMIT, 1)
        elif (name := judge_limit_name(provider)) is not None:
            judges[index] = (name, int(cast(Any, provider).endpoint.max_concurrency))
    if not judges:
        return limits
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    logger = get_run_logger()
    async with get_client() as client:
        for index, (name, wanted) in judges.items():
            try:
                gcl = await client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                logger.info(
                    "no global concurrency limit %r: judge requests are bounded per flow run "
                    "only (create it to share a quota across runs and workers)",
                    name,
                )
                continue
            allowed = max(1, int(gcl.limit))
            if wanted > allowed:  # _evaluate_under lowers it, wherever the batch runs
                logger.warning(
                    "judge %s: max_concurrency %d lowered to %d, the size of limit %r",
                    plan.providers[index].name,
                    wanted,
                    allowed,
                    name,
                )
            limits[index] = (name, min(wanted, allowed))
    return limits


@task(name="write-artifacts", cache_policy=NO_CACHE, persist_result=False)
async def finish_task(writer: RunWriter, manifest: dict[str, Any]) -> dict[str, Any]:
    """Write summary.parquet and manifest.json, and move every file into place."""
    return writer.finish(manifest)


@task(name="gate", cache_policy=NO_CACHE, persist_result=False)
async def gate_task(plan: RunPlan, results: list[EvalResults]) -> Any:
    """Check the suite's gates on the merged results."""
    from evalpipe.gates import evaluate_gates

    return evaluate_gates(plan.gates, results)


REPORT_SUBPROCESS_CALLS = 10_000
"""Runs with at least this many calls get their report from a child process, so the flow's
process (already at its high-water mark after the run) does not grow by the report's peak."""


@task(name="report", cache_policy=NO_CACHE, persist_result=False)
async def report_task(run_dir: str, calls: int) -> str | None:
    """Write ``report.html`` beside the Parquet files (``run_dir`` is absolute; so is the path
    returned). A report that cannot be written is logged, not fatal: the Parquet files are the
    record."""
    logger = get_run_logger()
    started = time.perf_counter()
    try:
        if calls >= REPORT_SUBPROCESS_CALLS:
            path = await _report_in_child(run_dir)
        else:
            from evalpipe.report import write_report

            path = str(await asyncio.to_thread(write_report, run_dir))
    except Exception as exc:
        logger.warning("report.html not written: %s: %s", type(exc).__name__, exc)
        return None
    logger.info("report %s written in %.2f s", path, time.perf_counter() - started)
    return path


async def _report_in_child(run_dir: str) -> str:
    import sys

    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "evalpipe.cli",
        "report",
        run_dir,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(stderr.decode(errors="replace").strip()[-2000:] or "no output")
    return str(Path(run_dir) / "report.html")


def _baseline(suite: EvalSuite, run_dir: str) -> Path | None:
    """The run to compare with: ``last`` is the newest other finished run of the suite."""
    if suite.compare_with != "last":
        return Path(str(suite.compare_with))
    base = local_base(suite.output_dir) / suite.name
    current = Path(run_dir).resolve()
    finished = sorted(
        (p for p in base.glob("*/manifest.json") if p.parent.resolve() != current),
        key=lambda p: p.parent.name,
    )
    return finished[-1].parent if finished else None


@task(name="compare", cache_policy=NO_CACHE, persist_result=False)
async def compare_task(suite: EvalSuite, run_dir: str) -> str | None:
    """Compare the finished run with the suite's baseline; markdown for an artifact, or None."""
    from evalpipe.report import compare_runs, render_markdown

    logger = get_run_logger()
    baseline = _baseline(suite, run_dir)
    if baseline is None:
        logger.info("compare_with: last: no earlier finished run of %s to compare with", suite.name)
        return None
    try:
        comparison = await asyncio.to_thread(compare_runs, baseline, run_dir)
    except Exception as exc:
        logger.warning("comparison with %s failed: %s: %s", baseline, type(exc).__name__, exc)
        return None
    logger.info(
        "compared with %s: %d regression(s), %d improvement(s)",
        baseline,
        comparison.regressions,
        comparison.improvements,
    )
    return str(render_markdown(comparison))


def _flow_run_name() -> str:
    """``{suite}-{target_version}-x{repetitions}-{UTC date and time}`` from the run's parameters."""
    params = flow_run.parameters or {}
    name, version = suite_label(params.get("suite"))
    if not version and isinstance(params.get("params"), dict):
        version = str(params["params"].get("target_version") or "")
    reps = params.get("repetitions")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    parts = [name, version, f"x{reps}" if reps else "", stamp]
    return "-".join(p for p in parts if p)


def _record(plan: RunPlan, outcome: CallOutcome) -> RunRecord:
    return RunRecord.from_target_run(
        outcome.run,
        run_id=outcome.call.key,
        target=plan.identity,
        row_id=plan.rows[outcome.call.row_index].id,
        cached=outcome.cached,
        transcript=outcome.transcript,
    )


@contextlib.contextmanager
def _young_gc_relaxed(threshold: int = 20_000) -> Iterator[None]:
    """Run the young-generation collector every ``threshold`` allocations instead of every 700.

    Transcripts and items are many small acyclic objects; with Prefect's modules loaded, the default
    threshold made the collector re-scan them constantly (measured: 0.32 s -> 0.19 s of CPU for
    3,000 calls). Reference counting still frees them; only the cyclic collector runs less often.
    The old thresholds come back when the shards are done.
    """
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], threshold), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _write(
    writer: RunWriter, plan: RunPlan, outcomes: Sequence[CallOutcome], results: list[EvalResults]
) -> None:
    writer.add_runs(_record(plan, o) for o in outcomes)
    writer.add_results(results)


def _strip(result: EvalResults) -> None:
    """Drop what is written already and not needed for the gate and the summary (the items, their
    texts and metadata), so a long run does not hold every transcript in memory."""
    result.input_items = []
    for item in result.items:
        item.input_text = item.output_text = None
        item.metadata = None
        for score in item.scores:
            score.sample = None
    for sub in result.sub_results.values():
        _strip(sub)


def _summary_table(results: Sequence[EvalResults]) -> list[dict[str, Any]]:
    return [
        {
            "provider": row.provider,
            "agent": row.agent,
            "metric": row.metric,
            "passed": row.passed,
            "failed": row.failed,
            "errored": row.errored,
            "n": row.passed + row.failed,
            "pass rate": None if row.pass_rate is None else round(row.pass_rate, 4),
            "mean score": None if row.mean_score is None else round(row.mean_score, 4),
        }
        for row in summarize(results)
    ]


def _failures_markdown(results: Sequence[EvalResults], limit: int = 50) -> str:
    lines = ["# Items that did not pass", ""]
    count = 0
    for res in results:
        for level in res.iter_results():
            for item in level.items:
                if item.is_passed:
                    continue
                count += 1
                if count > limit:
                    continue
                why = item.error_message or "; ".join(
                    f"{s.name}: {(s.reason or 'failed').splitlines()[0]}"
                    for s in item.scores
                    if s.passed is False
                )
                lines.append(
                    f"- `{html.escape(item.item_id)}` **{item.status}** ({html.escape(level.provider)}"
                    f", {html.escape(level.run_id)}): {_md_escape(why)}"
                )
    if count == 0:
        lines.append("Every item passed.")
    elif count > limit:
        lines.append(f"- ... and {count - limit} more (see scores.parquet)")
    return "\n".join(lines)


def _md_escape(text: str) -> str:
    """Agent and judge text is shown as text: HTML escaped, markdown specials backslashed."""
    escaped = html.escape(text[:500])
    for ch in "\\`*_{}[]()#+!|>~":
        escaped = escaped.replace(ch, "\\" + ch)
    return escaped.replace("\n", " ")


@flow(
    name="evalpipe-eval",
    flow_run_name=_flow_run_name,
    persist_result=False,
    log_prints=False,
)
async def eval_flow(
    suite: EvalSuite | str,
    repetitions: int | None = None,
    evaluators: list[str | dict[str, Any]] | None = None,
    params: dict[str, Any] | None = None,
    run_dir: str | None = None,
    rescore: str | None = None,
) -> dict[str, Any]:
    """Run a suite: target calls in shards, per-agent items, evaluations, Parquet, gate.

    Args:
        suite: The suite: a YAML path (relative to the run's working directory) or the suite
            itself (a form in the Prefect UI).
        repetitions: Overrides the suite's repetitions.
        evaluators: Overrides the suite's evaluator set (the YAML short forms).
        params: Other overrides by dotted key, e.g. ``{"target_version": "v2", "concurrency": 32}``.
        run_dir: Where to write; an unfinished run directory resumes (default: a new directory
            under ``suite.output_dir``).
        rescore: A finished run directory whose transcripts are re-evaluated instead of calling
            the target.

    The flow run fails when the suite's gate fails (unless ``warn_only``), its state message naming
    every violated clause; every run emits ``evalpipe.gate.passed`` or ``evalpipe.gate.failed``.
    """
    from evalpipe.pipeline.plan import find_resumable, new_run_dir

    suite = resolve_suite(suite, repetitions=repetitions, evaluators=evaluators, params=params)
    await _tag_flow_run(suite.tags)
    logger = get_run_logger()
    started = time.perf_counter()
    if run_dir is None:
        found = None if rescore else find_resumable(suite)
        run_dir = str(found or new_run_dir(suite))
    plan: RunPlan = await prepare_task(suite, run_dir, rescore)
    resumed = plan.resumed_calls()
    logger.info(
        "suite %s: %d rows x %d repetitions = %d calls (%d from the journal), %d provider(s), "
        "run directory %s",
        suite.name,
        len(plan.rows),
        suite.repetitions,
        len(plan.calls),
        resumed,
        len(plan.providers),
        plan.run_dir,
    )
    key = _artifact_key(suite.name)
    progress_id = await acreate_progress_artifact(
        progress=0.0, key=f"{key}-progress", description="target calls evaluated"
    )
    limits = await provider_limits(plan)
    shards = plan.shards()
    semaphore = asyncio.Semaphore(suite.concurrency)
    runner = _task_runner(suite)
    # Enough shards in flight to keep the semaphore busy, few enough to bound memory; a task
    # runner queues shards itself, so it gets all of them.
    shard_gate = asyncio.Semaphore(
        max(1, len(shards))
        if runner is not None
        else max(2, 2 * -(-suite.concurrency // plan.shard_size()))
    )
    counter = [0]
    progress_lock = asyncio.Lock()
    write_lock = asyncio.Lock()
    reported = [0]
    last_update = [time.monotonic()]
    writer = RunWriter(plan.run_dir)
    done: dict[int, tuple[list[CallOutcome], list[EvalResults]]] = {}
    next_to_write = 0
    kept: list[list[EvalResults]] = [[] for _ in plan.providers]
    finished_shards = 0
    timings: dict[str, float] = {"prepare_s": time.perf_counter() - started}

    async def process(index: int, calls: list[Call]) -> None:
        nonlocal next_to_write, finished_shards
        async with shard_gate:
            if runner is not None:
                future = runner.submit(
                    remote_shard_task,
                    parameters={
                        "suite": suite,
                        "run_dir": str(plan.run_dir),
                        "rescore": rescore,
                        "shard_index": index,
                        "calls": calls,
                        "limits": limits,
                    },
                )
                outcomes, results = await asyncio.to_thread(future.result)
                counter[0] += len(calls)
                _notify("calls", counter[0], len(plan.calls))
            else:
                await run_shard(_q(plan), index, _q(calls), _q(semaphore), _q(counter))
                await build_items_task(_q(plan), index)
                results = list(
                    await asyncio.gather(
                        *(
                            evaluate_task(
                                _q(plan), p, provider.name, index, calls[0].position, limits.get(p)
                            )
                            for p, provider in enumerate(plan.providers)
                        )
                    )
                )
                plan.shard_items.pop(index, None)
                outcomes = plan.shard_outcomes.pop(index)
        done[index] = (outcomes, results)
        async with write_lock:  # in shard order, whatever order shards finish in
            while next_to_write in done:
                outs, res = done.pop(next_to_write)
                # Off the event loop: Parquet encoding would stall the calls still in flight.
                await asyncio.to_thread(_write, writer, plan, outs, res)
                for p, r in enumerate(res):
                    _strip(r)
                    kept[p].append(r)
                next_to_write += 1
        finished_shards += 1
        _notify("items", finished_shards, len(shards))
        # At most one update a second (each is an API call), and always the last one; sent in
        # order under the lock, so the newest value is the highest.
        now = time.monotonic()
        if finished_shards == len(shards) or now - last_update[0] >= 1.0:
            last_update[0] = now
            async with progress_lock:
                reached = finished_shards
                if reached > reported[0]:
                    reported[0] = reached
                    await aupdate_progress_artifact(
                        artifact_id=progress_id, progress=100.0 * reached / len(shards)
                    )

    try:
        with contextlib.ExitStack() as stack:
            if runner is not None:
                stack.enter_context(runner)
                # Connect (or start the local cluster) once, now: a cluster that is not there
                # fails the run here instead of once per shard.
                await asyncio.to_thread(lambda: runner.client)
                logger.info("shards run on %s", type(runner).__name__)
            stack.enter_context(_young_gc_relaxed())
            await asyncio.gather(*(process(i, calls) for i, calls in enumerate(shards)))
    except BaseException:
        writer.abort()
        raise
    timings["calls_and_evaluation_s"] = time.perf_counter() - started - timings["prepare_s"]
    merged = [merge_results(parts) for parts in kept if parts]
    report = await gate_task(_q(plan), _q(merged)) if plan.gates else None
    manifest = {
        "suite": redact(suite.model_dump(mode="json")),
        "suite_fingerprint": suite.fingerprint(),
        "target": plan.identity,
        "providers": [p.name for p in plan.providers],
        "evaluator_specs": suite.evaluators,
        "calls": len(plan.calls),
        "calls_from_journal": resumed,
        "shards": len(shards),
        "rescored_from": str(plan.rescored_from) if plan.rescored_from else None,
        "flow_run_id": str(flow_run.id) if flow_run.id else None,
        "gate": report.model_dump(mode="json") if report is not None else None,
        "timings": timings,
    }
    timings["total_s"] = time.perf_counter() - started
    destination = (
        f"{suite.output_dir.rstrip('/')}/{suite.name}/{plan.run_dir.name}"
        if is_remote(suite.output_dir)
        else None
    )
    manifest["published_to"] = destination
    await finish_task(_q(writer), manifest)
    if plan.journal is not None:
        plan.journal.close()
    report_path = await report_task(str(plan.absolute_run_dir()), len(plan.calls))
    comparison = await compare_task(suite, str(plan.run_dir)) if suite.compare_with else None
    if destination is not None:
        published = await asyncio.to_thread(publish, plan.run_dir, suite.output_dir, suite.name)
        assert published == destination
        logger.info("run published to %s", destination)
    await acreate_table_artifact(
        key=f"{key}-summary",
        table=_summary_table(merged),
        description=f"{suite.name}: pass rates per provider, agent and metric",
    )
    await acreate_markdown_artifact(
        key=f"{key}-failures", markdown=_failures_markdown(merged), description="failing items"
    )
    run_path = plan.absolute_run_dir()
    await acreate_link_artifact(
        key=f"{key}-run-dir",
        link=destination or run_path.as_uri(),
        link_text=destination or str(run_path),
        description=(
            f"run published to {destination} (staging copy: {run_path})"
            if destination
            else f"run directory (open locally: {run_path})"
        ),
    )
    if report_path is not None:
        where = f"{destination}/report.html" if destination else Path(report_path).as_uri()
        await acreate_link_artifact(
            key=f"{key}-report",
            link=where,
            link_text="report.html",
            description=f"{suite.name}: the run's HTML report (self-contained)",
        )
    if comparison is not None:
        await acreate_markdown_artifact(
            key=f"{key}-comparison",
            markdown=comparison,
            description=f"{suite.name}: this run against {suite.compare_with}",
        )
    outcome = {
        "run_dir": str(run_path),
        "report": report_path,
        "published_to": destination,
        "calls": len(plan.calls),
        "calls_from_journal": resumed,
        "results": [
            {
                "provider": r.provider,
                "run_id": r.run_id,
                "passed": r.passed,
                "failed": r.failed,
                "errored": r.errored,
                "all_passed": r.all_passed,
            }
            for r in merged
        ],
        "gate_passed": None if report is None else report.passed,
    }
    failures = [] if report is None else [f"{c.clause}: {c.message}" for c in report.failures]
    if report is not None and not report.passed and not failures:
        failures = [report.summary()]
    _emit_gate_event(suite, plan, merged, report, failures, outcome)
    if failures:
        text = "; ".join(failures)
        if suite.warn_only:
            logger.warning("gate failed (warn only): %s", text)
        else:
            raise GateFailedError(f"gate failed for suite {suite.name}: {text}")
    logger.info("run %s finished in %.2f s", run_path, time.perf_counter() - started)
    return outcome


async def _tag_flow_run(tags: Sequence[str]) -> None:
    """Add the suite's tags to the flow run (a deployment's own tags stay)."""
    current = list(flow_run.tags or [])
    missing = [t for t in tags if t not in current]
    if not missing or flow_run.id is None:
        return
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        await client.update_flow_run(flow_run.id, tags=[*current, *missing])


GATE_PASSED = "evalpipe.gate.passed"
GATE_FAILED = "evalpipe.gate.failed"


def _emit_gate_event(
    suite: EvalSuite,
    plan: RunPlan,
    merged: Sequence[EvalResults],
    report: Any,
    failures: Sequence[str],
    outcome: dict[str, Any],
) -> None:
    """One event per run for automations: ``evalpipe.gate.failed`` or ``evalpipe.gate.passed``.

    The resource is the suite (``evalpipe.suite.<name>``); related resources are the flow run
    and, for a deployment run, the deployment. A suite without gates passes (``gates: 0``).
    """
    from prefect.events import emit_event
    from prefect.runtime import deployment

    related = []
    if flow_run.id:
        related.append(
            {
                "prefect.resource.id": f"prefect.flow-run.{flow_run.id}",
                "prefect.resource.role": "flow-run",
                "prefect.resource.name": flow_run.name or "",
            }
        )
    if deployment.id:
        related.append(
            {
                "prefect.resource.id": f"prefect.deployment.{deployment.id}",
                "prefect.resource.role": "deployment",
                "prefect.resource.name": deployment.name or "",
            }
        )
    payload = {
        "suite": suite.name,
        "target_version": suite.target_version,
        "run_dir": outcome["run_dir"],
        "calls": outcome["calls"],
        "gates": len(plan.gates),
        "warn_only": suite.warn_only,
        "violated": list(failures),
        "results": [
            {
                "provider": r.provider,
                "passed": r.passed,
                "failed": r.failed,
                "errored": r.errored,
                "pass_rate": r.passed / (r.passed + r.failed) if r.passed + r.failed else None,
            }
            for r in merged
        ],
        "clauses": [] if report is None else report.model_dump(mode="json").get("clauses", []),
    }
    emit_event(
        event=GATE_FAILED if failures else GATE_PASSED,
        resource={
            "prefect.resource.id": f"evalpipe.suite.{suite.name}",
            "prefect.resource.name": suite.name,
        },
        related=related,
        payload=payload,
    )
