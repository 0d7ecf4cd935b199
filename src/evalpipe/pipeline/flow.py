"""The evaluation flow: a suite's run on Prefect, shard by shard, through the runner.

The flow only wraps the runner (``evalpipe.runner``) in Prefect tasks: ``prepare`` (unless the
caller prepared the plan already, as ``evalpipe run`` does), one ``shard-{i}`` task per shard of
target calls (calls, items and every provider's scores: ``runner.run_shard``), then the artifacts,
the gate and the report. Granularity follows shared measurements (docs/pipeline.md): one task per
shard, never per call or item (docs/design/architecture.md, "One seam"); large values travel as
``quote(...)`` so Prefect does not walk them.
"""

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    acreate_link_artifact,
    acreate_markdown_artifact,
    acreate_progress_artifact,
    acreate_table_artifact,
    aupdate_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.events.worker import EventsWorker
from prefect.logging.handlers import APILogWorker
from prefect.runtime import flow_run
from prefect.states import Failed
from prefect.tasks import exponential_backoff
from prefect.utilities.annotations import quote
from prefect.utilities.urls import url_for

from evalpipe import artifacts  # its names load on first use (pyarrow: see _execute)
from evalpipe._internal.adaptive import LimitChange
from evalpipe.evaluators.base import close_providers
from evalpipe.gates import Gate, GateFold, GateReport
from evalpipe.pipeline import dask_worker
from evalpipe.pipeline.budget import RunSpend, concurrency_record, spend_markdown
from evalpipe.pipeline.limits import provider_limits
from evalpipe.pipeline.params import resolve_suite, suite_label
from evalpipe.pipeline.prefect_artifacts import (
    FAILURES_LISTED,
    artifact_key,
    emit_gate_event,
    failures_markdown,
    gate_markdown,
    summary_table,
    view_page,
)
from evalpipe.pipeline.shards import (
    HeldRun,
    RunDirUnseenError,
    RunSpec,
    Sealed,
    ShardJob,
    ShardRows,
    run_job,
    run_job_blocking,
)
from evalpipe.runner import (
    Call,
    CallOutcome,
    RunPlan,
    RunState,
)
from evalpipe.runner.prepare import claim, prepare_suite
from evalpipe.runner.state import (
    RunDirError,
    RunLock,
    RunLockedError,
    StorageError,
    is_remote,
    local_base,
)
from evalpipe.secrets import Scrubber, mask
from evalpipe.spend import BudgetReached
from evalpipe.suite import EvalSuite, SuiteError, shared_evaluators
from evalpipe.tally import OVERALL, CallTally, SummaryRow

if TYPE_CHECKING:
    from evalpipe.artifacts import RunWriter

__all__ = [
    "MAX_SHARD_TASKS",
    "MIN_SHARD_CALLS",
    "SHARDS_PER_SLOT",
    "SHARD_ROUNDS",
    "ProgressHook",
    "eval_flow",
    "finished_outcome",
    "flow_run_hook",
    "prepared_plan",
    "process_worker_setup",
    "progress_hook",
]

ProgressHook = Callable[[str, int, int], None]
"""Called as ``hook(stage, done, total)`` when calls finish ("calls": calls done of all), shards
finish ("items": shards evaluated of all), and the calls' verdicts are known ("passed", "failed",
"errored": calls so far with that verdict, of all calls; ``tally.call_verdicts``)."""

progress_hook: contextvars.ContextVar[ProgressHook | None] = contextvars.ContextVar(
    "evalpipe_progress_hook", default=None
)
"""Set by the CLI to drive its progress bar; the flow calls it from its own event loop."""

flow_run_hook: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "evalpipe_flow_run_hook", default=None
)
"""Set by the CLI: called with the flow run's Prefect UI URL as soon as the flow run exists (when
Prefect knows a UI: PREFECT_UI_URL, or an API URL that is not Prefect Cloud's)."""

process_worker_setup: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "evalpipe_process_worker_setup", default=None
)
"""Set by the CLI: run once in each worker process of a process pool the run starts (Prefect's
``ProcessPoolTaskRunner`` initializer; a picklable function). While it is set, the workers of a Dask
LocalCluster the run starts preload ``evalpipe.pipeline.dask_worker``, which sets the same collector
(``collect_less``, the one setting the CLI hands out)."""

prepared_plan: contextvars.ContextVar[tuple[RunPlan, EvalSuite, RunLock] | None] = (
    contextvars.ContextVar("evalpipe_prepared_plan", default=None)
)
"""A plan the caller prepared (and validated) before starting the flow, and the lock it holds on
the run directory: the flow uses them instead of preparing the suite again, so the dataset is
loaded and the target factory called once."""

MAX_SHARD_TASKS = 50
"""Default shard size aims for at most this many shard tasks per flow run (prefect-notes §2)."""

T = TypeVar("T")


def _q(value: T) -> T:
    """``quote``: pass a large or unhashable value to a task without Prefect walking it."""
    return cast(T, quote(value))


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
is an errored transcript, not a failed task, and the journal keeps a retry from repeating calls."""


MIN_SHARD_CALLS = 32
"""Default shards hold at least this many calls: a shard is a Prefect task run whatever its size
(the 15-call demo ran 15 shards: 1.43 s of flow for 0.14 s of work)."""

SHARD_ROUNDS = 4
"""... and at least this many rounds of a shard's share of the concurrency, so its task-run
overhead (tens of ms in the flow's process, ~110 ms on a process pool) is spread over several
call latencies."""

WORKER_SHARD_CALLS = 2_000
"""Default shards run by a task runner's workers hold at most this many calls (unless that is
fewer than SHARD_ROUNDS rounds): a worker holds a whole shard until it is sent back."""

SHARDS_PER_SLOT = 4
"""... and are otherwise as large as this many shards a task runner's slot allows (at most
MAX_SHARD_TASKS in all, at least one a slot): a shard on a worker costs ~165 ms of CPU
(docs/design/architecture.md), and four a slot still end together."""


def shard_size(plan: RunPlan, suite: EvalSuite, slots: int | None) -> int:
    """Calls per shard task: the suite's ``shard_size``, or the defaults above; ``slots`` is how
    many shards a task runner runs at once (None: the flow's process, whose shards share the
    whole concurrency)."""
    if suite.shard_size is not None:
        return int(suite.shard_size)
    calls = len(plan.calls)
    if slots is None:
        return max(MIN_SHARD_CALLS, SHARD_ROUNDS * plan.concurrency, -(-calls // MAX_SHARD_TASKS))
    smallest = max(MIN_SHARD_CALLS, SHARD_ROUNDS * share_of(plan.concurrency, slots))
    even = -(-calls // max(slots, min(MAX_SHARD_TASKS, SHARDS_PER_SLOT * slots)))
    return max(smallest, min(WORKER_SHARD_CALLS, even))


def share_of(concurrency: int, slots: int) -> int:
    """Each running shard's share of the run's concurrency when ``slots`` shards run at once (the
    shares add up to at most the concurrency)."""
    return max(1, concurrency // max(1, slots))


@task(name="prepare", cache_policy=NO_CACHE, persist_result=False)
async def prepare_task(suite: EvalSuite, run_dir: str | None, rescore: str | None) -> RunPlan:
    """Load and validate the dataset, target, evaluators and gates; pick the run directory (the
    given one, the newest unfinished run of the same target, or a new one)."""
    return prepare_suite(suite, run_dir, rescore=rescore)


@task(name="shard", task_run_name="shard-{index}", **_RETRY_ON_INFRASTRUCTURE)
async def shard_task(index: int, run: HeldRun, job: ShardJob) -> ShardRows:
    """One shard in the flow's process (``task_runner: threads``): its calls (taken from the
    journal when it holds them), their items, every provider's scores, and their rows."""
    return await run_job(run, job)


@task(name="shard", task_run_name="shard-{index}", **_RETRY_ON_INFRASTRUCTURE)
def worker_shard_task(index: int, spec: Sealed[RunSpec], job: Sealed[ShardJob]) -> ShardRows:
    """One shard on a task runner's worker (a process pool's, a Dask or Ray worker's), the same
    work as ``shard_task``; a worker builds the run from ``spec`` once and keeps it."""
    return run_job_blocking(spec.value, job.value)


def _task_runner(suite: EvalSuite, concurrency: int) -> Any:
    """The suite's Prefect task runner for shards, or None to run them in the flow's own event
    loop (``threads``: calls are I/O, one loop holds thousands in flight)."""
    spec = suite.task_runner
    if spec == "threads":
        return None
    if spec == "processes" or "processes" in spec:
        from prefect.task_runners import ProcessPoolTaskRunner

        pool = ProcessPoolTaskRunner(
            max_workers=_slots(None, suite, concurrency), initializer=process_worker_setup.get()
        )
        # The pool forwards its workers' events and logs from a thread that does not see the
        # run's API (set in this context only, as for the kept server): there Prefect started a
        # temporary server of its own (~220 MiB). The runner's documented hook sends them on in
        # this context (docs/design/architecture.md, "One seam").
        context = contextvars.copy_context()
        pool.set_subprocess_message_processor_factories([functools.partial(_forwarder, context)])
        return pool
    extra = "ray" if "ray" in spec else "dask"
    options = dict(spec[extra] or {})
    try:
        if extra == "ray":
            from prefect_ray.task_runners import RayTaskRunner  # optional: the ray extra

            return RayTaskRunner(**options)
        from prefect_dask.task_runners import DaskTaskRunner  # optional: the dask extra
    except ImportError:
        raise SuiteError(
            f"task_runner: {extra} needs prefect-{extra}: pip install 'evalpipe[{extra}]'"
        ) from None
    if "address" in options:
        return DaskTaskRunner(address=options["address"])
    options.setdefault("dashboard_address", None)
    if process_worker_setup.get() is not None:  # `evalpipe run`: its workers collect as a pool's
        options.setdefault("preload", [dask_worker.__name__])
    return DaskTaskRunner(cluster_kwargs=options)


def _forwarder(context: contextvars.Context) -> Any:
    """A process pool's message processor: events and logs go to the events and log workers of
    ``context`` (a copy, entered by the forwarding thread alone), the rest on."""
    copy = context.copy()

    def forward(message_type: str, message_payload: Any) -> tuple[str, Any] | None:
        if message_type not in ("event", "log"):
            return message_type, message_payload
        worker = EventsWorker if message_type == "event" else APILogWorker
        copy.run(lambda: worker.instance().send(message_payload))
        return None

    return forward


def _slots(runner: Any, suite: EvalSuite, concurrency: int) -> int:
    """How many shards the task runner runs at once, at most the run's concurrency: its worker
    processes (``processes``: one per CPU, or ``{processes: N}``), or the threads of the started
    cluster's workers (counted once, when the run starts)."""
    spec = suite.task_runner
    if "processes" in spec:
        wanted = (os.cpu_count() or 1) if spec == "processes" else int(spec["processes"])  # type: ignore[index]
    elif "dask" in spec:
        wanted = int(sum(runner.client.nthreads().values()))
    else:
        import ray  # the ray extra: RayTaskRunner started it

        wanted = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
    return max(1, min(wanted, concurrency))


@task(name="write-artifacts", cache_policy=NO_CACHE, persist_result=False)
async def finish_task(
    writer: "RunWriter", manifest: dict[str, Any]
) -> dict[str, Any] | StorageError:
    """Write summary.parquet and manifest.json, and move every file into place; a file that
    cannot be written (a full disk) is returned as a StorageError naming it (the run could not
    complete: it is not a crash)."""
    try:
        return writer.finish(manifest)
    except OSError as exc:
        return _table_error(writer, exc)


@task(name="gate", cache_policy=NO_CACHE, persist_result=False)
async def gate_task(gate: Gate, fold: GateFold, suite: EvalSuite) -> Any:
    """Check the suite's gates on the run's fold (every shard folded in as it was written); the
    ``<suite>-gate`` artifact lists every clause with its value, bound, n and verdict. The task
    run is Failed when the gate fails (its state's data is the report either way)."""
    report = gate.evaluate(fold)
    logger = get_run_logger()
    await acreate_markdown_artifact(
        key=f"{artifact_key(suite.name)}-gate",
        markdown=gate_markdown(report, suite),
        description=f"{suite.name}: the gate, clause by clause "
        + ("(passed)" if report.passed else "(FAILED)"),
    )
    for line in report.summary().splitlines():  # the task run's state says failed, in red
        logger.info("%s", line)
    if not report.passed:
        return Failed(message=report.summary().splitlines()[0], data=report)
    return report


REPORT_SUBPROCESS_CALLS = 10_000
"""Runs with at least this many calls whose shards ran in the flow's process (``task_runner:
threads``) get their report from a child process: that process is at its high-water mark after
the run (every transcript, item and row passed through it), and the report would grow it by its
peak. On a task runner the flow's process only wrote the rows: the report is written in it (the
child's own imports cost more, ~255 MiB against +125; a 100,000-call run on a two-worker Dask
cluster, whose workers stay up while the report is written: tree peak 1,586 -> 1,464 MiB)."""


@task(name="report", cache_policy=NO_CACHE, persist_result=False)
async def report_task(run_dir: str, in_child: bool) -> str | None:
    """Write ``report.html`` beside the Parquet files (``run_dir`` is absolute; so is the path
    returned), in a child process with ``in_child``. A report that cannot be written is logged,
    not fatal: the Parquet files are the record."""
    logger = get_run_logger()
    started = time.perf_counter()
    try:
        if in_child:
            path = await _report_in_child(run_dir)
        else:
            from evalpipe.report import write_report  # lazy: scipy, only when a report is written

            path = str(await asyncio.to_thread(write_report, run_dir))
    except Exception as exc:
        logger.warning("report.html not written: %s: %s", type(exc).__name__, exc)
        return None
    logger.info("report %s written in %.2f s", path, time.perf_counter() - started)
    return path


async def _report_in_child(run_dir: str) -> str:
    # Arrow's default pool (mimalloc) keeps what the report's group-bys freed: the system
    # allocator gives it back (measured at 100,000 items: peak 500 -> 420 MiB, and faster).
    # One glibc malloc arena instead of one per thread (Parquet's reader threads): the report
    # child's peak at 100,000 items x 3 checks 270 -> 236 MiB, no slower. What the user set is kept.
    env = {
        **os.environ,
        "ARROW_DEFAULT_MEMORY_POOL": os.environ.get("ARROW_DEFAULT_MEMORY_POOL") or "system",
        "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX") or "1",
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "evalpipe.cli",
        "report",
        run_dir,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    _, stderr = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(stderr.decode(errors="replace").strip()[-2000:] or "no output")
    return str(Path(run_dir) / "report.html")


def _baseline(suite: EvalSuite, run_dir: str) -> Path | str | None:
    """The run to compare with: ``last`` is the newest other finished run of the suite,
    ``baseline`` the one ``evalpipe bless`` made its baseline (in the output directory, local or
    a URI), else the run directory named."""
    from evalpipe.artifacts.history import baseline_of, join  # lazy: pyarrow (see _execute)

    if suite.compare_with == "baseline":
        suite_dir = join(str(suite.output_dir), suite.name)
        name = baseline_of(suite_dir)
        if name is None or name == Path(run_dir).name:
            return None
        return join(suite_dir, name)
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
    from evalpipe.report import compare_runs, render_markdown  # lazy: scipy

    logger = get_run_logger()
    baseline = _baseline(suite, run_dir)
    if baseline is None:
        logger.info(
            "compare_with: %s: no %s run of %s to compare with",
            suite.compare_with,
            "blessed (evalpipe bless RUN_DIR)" if suite.compare_with == "baseline" else "earlier",
            suite.name,
        )
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
    overrides = params.get("params")
    if isinstance(overrides, dict) and overrides.get("target_version") not in (None, ""):
        version = str(overrides["target_version"])  # an override names the run, as it runs
    reps = params.get("repetitions")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    parts = [name, version, f"x{reps}" if reps else "", stamp]
    return "-".join(p for p in parts if p)


def _write(writer: "RunWriter", rows: ShardRows) -> None:
    try:
        writer.add_encoded(rows.batch(), rows.results)
    except OSError as exc:
        raise _table_error(writer, exc) from exc


def _table_error(writer: "RunWriter", exc: OSError) -> StorageError:
    """A run's table (or manifest) that could not be written, named, and what to do."""
    where = exc.filename or f"the run's tables in {writer.path}"
    return StorageError(
        f"cannot write {where}: {exc.strerror or exc}; the run stopped (its finished calls are "
        "journaled: free the space, then run again to resume)"
    )


def _announce_flow_run() -> None:
    """Give the flow run's UI page to the caller's :data:`flow_run_hook`, if any. (Not in the
    flow's body: a process pool gets the flow pickled by value with every task run, and the
    globals its body names with it; a ContextVar cannot be pickled.)"""
    page = url_for("flow-run", obj_id=flow_run.id) if flow_run.id else None
    if page and (announce := flow_run_hook.get()) is not None:
        announce(page)


def _take_prepared(
    suite: EvalSuite, run_dir: str | None, rescore: str | None
) -> tuple[RunPlan, RunLock] | None:
    """The caller's prepared plan and lock, when they are this run's (same suite, directory and
    re-scoring)."""
    prepared = prepared_plan.get()
    if prepared is None:
        return None
    plan, prepared_suite, lock = prepared
    if plan.run_dir is None or run_dir is None:
        return None
    rescored = None if rescore is None else Path(rescore).resolve()
    if (
        plan.run_dir.resolve() == Path(run_dir).resolve()
        and rescored == (plan.rescored_from and plan.rescored_from.resolve())
        and prepared_suite.model_dump(mode="json") == suite.model_dump(mode="json")
    ):
        return plan, lock
    return None


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
) -> Any:
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
    suite = resolve_suite(suite, repetitions=repetitions, evaluators=evaluators, params=params)
    await _tag_flow_run(suite.tags)
    logger = get_run_logger()
    _announce_flow_run()
    started = time.perf_counter()
    started_at = datetime.now(UTC)
    prepared = _take_prepared(suite, run_dir, rescore)
    if prepared is not None:
        plan, lock = prepared
    else:
        plan = await prepare_task(suite, run_dir, rescore)
        try:
            claimed = claim(plan, suite)
        except (RunLockedError, RunDirError) as exc:
            logger.error("%s", exc)
            return _incomplete(str(exc))
        plan, lock = claimed.plan, claimed.lock
        if claimed.taken == "finished":  # by another run since this one chose it
            lock.release()
            assert plan.run_dir is not None
            logger.info("%s was finished by another run meanwhile; nothing to do", plan.run_dir)
            return finished_outcome(plan.run_dir, suite)
    assert plan.run_dir is not None
    state = RunState.open(plan, lock=lock)
    try:
        with (
            filtered_logs(_scrubbing(state.scrubber))
            if state.scrubber
            else contextlib.nullcontext()
        ):
            return await _execute(plan, suite, state, logger, started, started_at)
    finally:
        await close_providers(plan.providers, keep=shared_evaluators(suite))
        state.close()


def _scrubbing(scrub: Scrubber) -> Callable[[logging.LogRecord], bool]:
    """A log filter that masks the run's secrets in every record (Prefect's API log handler's
    included)."""

    def check(record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if scrub.found(text):
            record.msg, record.args = scrub(text), ()
        if record.exc_info and record.exc_text is None:
            formatted = logging.Formatter().formatException(record.exc_info)
            if scrub.found(formatted):
                record.exc_text = scrub(formatted)
        return True

    return check


@contextlib.contextmanager
def filtered_logs(check: Callable[[logging.LogRecord], bool]) -> Iterator[None]:
    """``check`` filters what the handlers of the root, Prefect's and evalpipe's loggers write
    while the block runs (the run's secrets masked; Prefect silenced while a lost run ends)."""
    handlers = {
        h
        for name in ("", "prefect", "prefect.flow_runs", "prefect.task_runs", "evalpipe")
        for h in logging.getLogger(name).handlers
    }
    for handler in handlers:
        handler.addFilter(check)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(check)


def _found(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> BaseException | None:
    """The first exception of ``kinds`` that stopped the run (``exc`` or one in its group)."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc if isinstance(exc, kinds) else None
    found: BaseException | None = exc.subgroup(kinds)
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    return found


def finished_outcome(run_dir: Path, suite: EvalSuite) -> Any:
    """How a run another process finished ended, read from its files (nothing is rewritten): the
    flow's outcome for it, a Failed state when its gate failed (unless ``warn_only``)."""
    report = run_dir.resolve() / "report.html"
    outcome = _outcome(run_dir, artifacts.read_manifest(run_dir))
    outcome["report"] = str(report) if report.exists() else None
    return _verdict(outcome, suite, "" if outcome["gate_passed"] is False else None)


def _outcome(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """The flow's outcome of a run whose results are written (``manifest``: its manifest.json),
    before its report and verdict."""
    gate, calls = manifest.get("gate"), manifest.get("calls")
    passed = gate.get("passed") if isinstance(gate, dict) else None
    return {
        "run_dir": str(run_dir.resolve()),
        "published_to": manifest.get("published_to"),
        "calls": dict(calls) if isinstance(calls, dict) else {},
        "gate_passed": passed if isinstance(passed, bool) else None,
    }


def _incomplete(message: str) -> State:
    """The flow run's end when the run could not complete (nothing of it is a verdict)."""
    return Failed(message=message, data={"verdict": "incomplete", "message": message})


async def _execute(
    plan: RunPlan,
    suite: EvalSuite,
    state: RunState,
    logger: Any,
    started: float,
    started_at: datetime,
) -> Any:
    """The run itself, once its directory is held: shards, artifacts, gate, report."""
    assert plan.run_dir is not None
    if (plan.run_dir / artifacts.MANIFEST_FILE).exists():  # claim: interrupted after its manifest
        manifest = artifacts.read_manifest(plan.run_dir)
        logger.info(
            "run directory %s: its results were written by a run that ended before its report, "
            "publication and artifacts (flow run %s); finishing them, nothing is called again",
            plan.run_dir,
            manifest.get("flow_run_id") or "unknown",
        )
        rows = artifacts.read_summary(plan.run_dir)
        return await _publish(plan, suite, logger, rows, manifest, started)
    logger.info(
        "suite %s: %d rows x %d repetitions = %d calls (%d reusable from the journal), "
        "%d provider(s), run directory %s",
        suite.name,
        len(plan.rows),
        suite.repetitions,
        len(plan.calls),
        state.reusable(plan),
        len(plan.providers),
        plan.run_dir,
    )
    key = artifact_key(suite.name)
    progress_id = await acreate_progress_artifact(
        progress=0.0, key=f"{key}-progress", description="target calls evaluated"
    )
    limits = await provider_limits(plan)
    runner = _task_runner(suite, plan.concurrency)
    spec = RunSpec.of(plan, suite)
    spend = RunSpend(plan)
    changes: list[LimitChange] = []  # of the endpoints' limits, as the shards report them
    calls_done = [0]
    verdicts = dict.fromkeys(("passed", "failed", "errored"), 0)
    calls = CallTally()
    last_update = time.monotonic()
    writer = artifacts.RunWriter(
        plan.run_dir,
        started_at=started_at,
        suite=suite.name,
        target_version=suite.target_version or None,
    )
    # What the run keeps of its results: the gate's fold of every shard.
    gate = Gate(plan.gates)
    fold = GateFold(gate) if plan.gates else None
    shards: list[tuple[Call, ...]] = []
    timings: dict[str, float] = {"prepare_s": time.perf_counter() - started}

    def on_call(outcome: CallOutcome) -> None:
        calls_done[0] += 1
        _notify("calls", calls_done[0], len(plan.calls))

    async def process(index: int, shard_calls: tuple[Call, ...]) -> None:
        nonlocal last_update
        await unwritten.acquire()  # released when this shard is written
        try:
            async with running:
                # The job now, not when the run starts: on a task runner it carries its rows and
                # calls (~10 MiB for the shards of 100,000 calls), held only while it is sent.
                job = ShardJob.of(
                    plan,
                    index,
                    shard_calls,
                    share=share,
                    limits=limits,
                    carry_rows=runner is not None,
                )
                if runner is None:
                    if spend.ledger.reached():  # none of the flow's own shards starts then
                        raise spend.ledger.stop()
                    rows = await shard_task(index, _q(here), _q(job))
                else:

                    def submit() -> Any:
                        future = runner.submit(
                            worker_shard_task,
                            parameters={"index": index, "spec": Sealed(spec), "job": Sealed(job)},
                        )
                        return asyncio.to_thread(future.result)

                    rows = await spend.on_worker(job, at_once, submit)
                    calls_done[0] += rows.n_calls
                    _notify("calls", calls_done[0], len(plan.calls))
        except BudgetReached as stop:
            # the run ends once the shards running now are back (their calls in flight kept)
            spend.stop = stop
            shard_written[index].set()
            unwritten.release()
            return
        changes.extend(rows.limit_changes)
        if index:  # written in shard order, whatever order they finish in
            await shard_written[index - 1].wait()
        calls.merge(rows.calls)
        # Off the event loop: Parquet encoding would stall the calls still in flight.
        await asyncio.to_thread(_write, writer, rows)
        for stage in verdicts:
            verdicts[stage] += getattr(rows.verdicts, stage)
            _notify(stage, verdicts[stage], len(plan.calls))
        if fold is not None:
            fold.add(rows.results)
        del rows
        _notify("items", index + 1, len(shards))
        # At most one update a second (each is an API call), and always the last one.
        if index + 1 == len(shards) or time.monotonic() - last_update >= 1.0:
            last_update = time.monotonic()
            await aupdate_progress_artifact(
                artifact_id=progress_id, progress=100.0 * (index + 1) / len(shards)
            )
        shard_written[index].set()
        unwritten.release()

    deadline = asyncio.timeout(suite.timeout)
    try:
        async with contextlib.AsyncExitStack() as stack, deadline:
            if runner is None:
                # one semaphore of the plan's concurrency shared by all of its shards here
                semaphore = asyncio.Semaphore(plan.concurrency)
                here = HeldRun(plan, suite, state, semaphore, on_call, spend.ledger)
                share, queued = plan.concurrency, 0
                size = shard_size(plan, suite, None)
                at_once = 2 + -(-plan.concurrency // size)  # enough to keep the semaphore busy
            else:
                # Started (a local cluster or pool created, a scheduler connected) now: a
                # cluster that is not there fails the run here, not once per shard.
                await asyncio.to_thread(stack.enter_context, runner)
                slots = _slots(runner, suite, plan.concurrency)
                share = share_of(plan.concurrency, slots)
                size = shard_size(plan, suite, slots)
                # Shards submitted beyond the ``slots`` that run, to wait in the task runner: one
                # per worker of a process pool, so a worker starts its next shard as soon as it
                # sends one back (else ~0.2 s of idling a shard). The pool runs at most ``slots``
                # at once, so the calls in flight stay within the concurrency. None on a cluster:
                # a worker that joins later would run a waiting shard above the concurrency.
                queued = slots if "processes" in suite.task_runner else 0
                at_once = slots + queued
                logger.info(
                    "shards run on %s: %d at once, %d calls in flight each",
                    type(runner).__name__,
                    slots,
                    share,
                )
            shards = plan.shards(size)
            shard_written = [asyncio.Event() for _ in shards]
            # ``running`` bounds the shards submitted and not finished (and ``queued``);
            # ``unwritten`` bounds those and the finished ones not yet written (taken in shard
            # order, so the next one to write always has its place): as many again, unless a
            # shard waits in each worker to keep it busy while the flow writes (each finished
            # shard held here is ~15 MiB at 2,000 calls).
            running = asyncio.Semaphore(at_once)
            unwritten = asyncio.Semaphore(at_once if queued else 2 * at_once)
            # a shard that fails stops the others (their calls in flight are cancelled)
            async with asyncio.TaskGroup() as group:
                for i, c in enumerate(shards):
                    group.create_task(process(i, c))
            if spend.stop is not None:
                raise spend.stop
    except BaseException as exc:
        writer.abort()
        stopped = None
        storage = _found(exc, (StorageError, RunDirUnseenError))
        if _found(exc, (BudgetReached,)) is not None:
            stopped = spend.stopped()
        elif isinstance(storage, StorageError):
            stopped = str(storage)
        elif storage is not None:
            stopped = f"{storage}; the run stopped (its finished calls are journaled: run again to resume)"
        elif isinstance(exc, TimeoutError) and deadline.expired():
            stopped = (
                f"the run did not finish within its timeout of {suite.timeout:g} s: "
                f"{calls_done[0]} of {len(plan.calls)} calls done; the finished calls are "
                "journaled, run again to resume"
            )
        if stopped is None:
            raise
        if state.scrubber.found(stopped):  # a worker's traceback may quote what it was given
            stopped = state.scrubber(stopped)
        logger.error("%s", stopped)
        await acreate_markdown_artifact(  # a nightly deployment shows what a stopped run cost
            key=f"{key}-spend",
            markdown=spend_markdown(spend.record(), stopped=stopped),
            description=f"{suite.name}: what the run spent (it could not complete)",
        )
        return _incomplete(stopped)
    timings["calls_and_evaluation_s"] = time.perf_counter() - started - timings["prepare_s"]
    call_counts = calls.as_dict()
    logger.info("%s", CallTally.text(call_counts))
    report = None
    if fold is not None:
        gate_state = await cast(Any, gate_task(_q(gate), _q(fold), _q(suite), return_state=True))
        report = await gate_state.aresult(raise_on_failure=False)
        if isinstance(report, BaseException):  # the gate itself raised: the run is not finished
            raise report
    manifest = {
        "suite": mask(suite.model_dump(mode="json")),
        "suite_fingerprint": suite.fingerprint(),
        "target": plan.identity,
        "providers": [p.name for p in plan.providers],
        "evaluator_specs": mask(suite.evaluators),
        "calls": call_counts,
        "shards": len(shards),
        "rescored_from": str(plan.rescored_from) if plan.rescored_from else None,
        "flow_run_id": str(flow_run.id) if flow_run.id else None,
        "gate": report.model_dump(mode="json") if report is not None else None,
        "timings": timings,
        "spend": spend.record(),
        "concurrency": concurrency_record(suite, changes),
        "published_to": _destination(suite, plan),
    }
    timings["total_s"] = time.perf_counter() - started
    written = await finish_task(_q(writer), manifest)
    if isinstance(written, StorageError):  # a full disk: the calls are journaled, it resumes
        logger.error("%s", written)
        return _incomplete(str(written))
    return await _publish(plan, suite, logger, writer.summary_rows(), written, started)


def _destination(suite: EvalSuite, plan: RunPlan) -> str | None:
    """Where a finished run is published: its URI under a remote ``output_dir``, else None."""
    assert plan.run_dir is not None
    if not is_remote(suite.output_dir):
        return None
    return f"{suite.output_dir.rstrip('/')}/{suite.name}/{plan.run_dir.name}"


async def _publish(
    plan: RunPlan,
    suite: EvalSuite,
    logger: Any,
    rows: list[SummaryRow],
    manifest: dict[str, Any],
    started: float,
) -> Any:
    """What follows a run's written results (``rows``, ``manifest``: summary.parquet's and
    manifest.json's): its report, comparison, publication, Prefect artifacts, gate event and
    verdict (the flow run's end)."""
    assert plan.run_dir is not None
    gate, spent = manifest.get("gate"), manifest.get("spend")
    report = GateReport.model_validate(gate) if isinstance(gate, dict) else None
    outcome = _outcome(plan.run_dir, manifest)
    call_counts = outcome["calls"]
    results = [r for r in rows if r.kind == "result" and r.agent == OVERALL]
    for r in results:
        logger.info(
            "%s: %d passed, %d failed, %d errored of %d items",
            r.provider,
            r.passed,
            r.failed,
            r.errored,
            r.n,
        )
    key = artifact_key(suite.name)
    destination = _destination(suite, plan)
    run_path = plan.run_dir.resolve()
    page = view_page(suite.name, plan.run_dir.name, logger)  # evalpipe view, when configured

    # The artifacts are independent API calls: they go together (a round trip each, in turn, was
    # 30-100 ms apiece), and those that need neither the report nor the publication go while the
    # report is written.
    def summary() -> list[Coroutine[Any, Any, Any]]:
        made = [
            acreate_table_artifact(
                key=f"{key}-summary",
                table=summary_table(rows),
                description=f"{suite.name}: pass rates per provider, agent and metric; "
                + CallTally.text(call_counts),
            ),
            acreate_markdown_artifact(
                key=f"{key}-failures",
                markdown=failures_markdown(
                    run_path,
                    rows,
                    FAILURES_LISTED,
                    rest=f"every item is in {destination or run_path}/scores.parquet and in the report",
                ),
                description="items that did not pass: why, query and response",
            ),
            acreate_link_artifact(
                key=f"{key}-run-dir",
                link=page or destination or run_path.as_uri(),
                link_text=destination or str(run_path),
                description=(
                    f"run published to {destination} (staging copy: {run_path})"
                    if destination
                    else f"run directory (open locally: {run_path})"
                )
                + ("; the link opens its page in evalpipe view" if page else ""),
            ),
        ]
        if spent is not None:
            made.append(
                acreate_markdown_artifact(
                    key=f"{key}-spend",
                    markdown=spend_markdown(spent),
                    description=f"{suite.name}: what the run spent, by model",
                )
            )
        return made

    async with asyncio.TaskGroup() as pending:
        if destination is None:  # a published run's artifacts wait for its publication
            for call in summary():
                pending.create_task(call)
        in_child = suite.task_runner == "threads" and len(plan.calls) >= REPORT_SUBPROCESS_CALLS
        report_path = await report_task(str(run_path), in_child)
        comparison = await compare_task(suite, str(plan.run_dir)) if suite.compare_with else None
        if destination is not None:
            # a task runner's worker imports this module with the flow and has no use for pyarrow
            from evalpipe.artifacts.storage import publish  # lazy: pyarrow (~50 MiB a worker)

            published = await asyncio.to_thread(publish, plan.run_dir, suite.output_dir, suite.name)
            assert published == destination
            logger.info("run published to %s", destination)
            for call in summary():
                pending.create_task(call)
        if report_path is not None:
            where = f"{destination}/report.html" if destination else Path(report_path).as_uri()
            pending.create_task(
                acreate_link_artifact(
                    key=f"{key}-report",
                    link=page or where,
                    link_text="the run in evalpipe view" if page else "report.html",
                    description=f"{suite.name}: the run's HTML report"
                    + (f" in evalpipe view (the file: {where})" if page else " (self-contained)"),
                )
            )
        if comparison is not None:
            pending.create_task(
                acreate_markdown_artifact(
                    key=f"{key}-comparison",
                    markdown=comparison,
                    description=f"{suite.name}: this run against {suite.compare_with}",
                )
            )
    outcome["report"] = report_path
    outcome["results"] = [
        {
            "provider": r.provider,
            "run_id": r.eval_run_id,
            "passed": r.passed,
            "failed": r.failed,
            "errored": r.errored,
            "all_passed": r.all_passed,
        }
        for r in results
    ]
    failures = [] if report is None else [f"{c.clause}: {c.message}" for c in report.failures]
    if report is not None and not report.passed and not failures:
        failures = [report.summary()]
    emit_gate_event(suite, rows, report, failures, outcome)
    text = "; ".join(failures)
    if failures and suite.warn_only:
        logger.warning("gate failed (warn only): %s", text)
    ended = _verdict(outcome, suite, f": {text}" if failures else None)
    if ended is outcome:
        logger.info(
            "run finished in %.2f s: run directory %s; report %s",
            time.perf_counter() - started,
            destination or run_path,
            report_path or "not written",
        )
    return ended


def _verdict(outcome: dict[str, Any], suite: EvalSuite, failed: str | None) -> Any:
    """The flow's end with ``outcome``, its verdict set (``failed``: why the gate failed, None
    when it held): a failed gate ends the flow run Failed (unless ``warn_only``) with the reason
    as its message, a verdict and not a crash (no traceback is logged)."""
    outcome["verdict"] = (
        "passed" if failed is None else "warned" if suite.warn_only else "gate_failed"
    )
    if outcome["verdict"] == "gate_failed":
        return Failed(message=f"gate failed for suite {suite.name}{failed}", data=outcome)
    return outcome


async def _tag_flow_run(tags: Sequence[str]) -> None:
    """Add the suite's tags to the flow run (a deployment's own tags stay)."""
    current = list(flow_run.tags or [])
    missing = [t for t in tags if t not in current]
    if not missing or flow_run.id is None:
        return
    async with get_client() as client:
        await client.update_flow_run(flow_run.id, tags=[*current, *missing])
