"""Running a suite's flow from Python or the command line, and what came of it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from prefect.client.schemas.objects import State
from prefect.exceptions import TerminationSignal
from prefect.settings import PREFECT_API_URL
from prefect.states import Completed

from evalpipe.pipeline.flow import (
    ProgressHook,
    eval_flow,
    filtered_logs,
    finished_outcome,
    flow_run_hook,
    prepared_plan,
    progress_hook,
)
from evalpipe.pipeline.server import ServerError, prefect_api
from evalpipe.runner import RunPlan, RunState
from evalpipe.runner.prepare import claim
from evalpipe.runner.prepare import prepare_suite as prepare_run  # the plan, before any call
from evalpipe.runner.state import RunLock
from evalpipe.suite import EvalSuite

__all__ = [
    "PrefectUnavailableError",
    "RunOutcome",
    "Verdict",
    "arun_suite",
    "prepare_run",
    "run_suite",
]

Verdict = Literal["passed", "warned", "gate_failed", "incomplete"]
"""How a run ended: its gate held (or it has none), its gate failed but the suite is
``warn_only``, its gate failed, or it could not complete (crashed, stopped, timed out)."""


class PrefectUnavailableError(RuntimeError):
    """The Prefect API the run would report to does not answer, or the embedded server could not
    be started (no target was called)."""


@dataclass(slots=True)
class RunOutcome:
    """How a flow run ended and where its artifacts are."""

    run_dir: Path
    """The run directory (Parquet files and manifest.json when the run completed)."""
    state: str
    """The flow run's final state name (Completed, Failed, ...)."""
    verdict: Verdict
    """passed, warned, gate_failed or incomplete (see :data:`Verdict`)."""
    gate_passed: bool | None
    """None when the suite has no gates (or the run did not complete)."""
    message: str | None
    """The failure message (a failed gate names every violated clause)."""
    reusable_calls: int
    """Calls the run found finished already (in the journal of an unfinished earlier run, or the
    re-scored run): they are reused, not made again."""
    published_to: str | None = None
    """Where the finished run was published when the suite's output_dir is a remote URI
    (``run_dir`` is then the local staging copy)."""
    calls: dict[str, Any] = field(default_factory=dict)
    """What happened to the run's target calls (the manifest's ``calls``: made, reused, recorded,
    errored)."""
    notes: list[str] = field(default_factory=list)
    """Things the operator should know (a stale lock taken over)."""
    ui_url: str | None = None
    """The flow run's page in the Prefect UI, when Prefect knows a UI."""

    @property
    def ok(self) -> bool:
        """Completed, and the gate (if any) passed or is warn-only."""
        return self.state == "Completed"


async def check_api() -> None:
    """That the configured Prefect API answers (an unset API is the ephemeral one: fine).

    Raises:
        PrefectUnavailableError: naming the URL and what to do.
    """
    url = PREFECT_API_URL.value()
    if not url:
        return
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            (await client.get(f"{str(url).rstrip('/')}/health")).raise_for_status()
    except httpx.HTTPError as exc:
        raise PrefectUnavailableError(
            f"the Prefect API at {url} does not answer ({type(exc).__name__}: {exc}); start the "
            "server (`prefect server start`), fix PREFECT_API_URL, or unset it to run on a "
            "Prefect server evalpipe starts and keeps"
        ) from None


async def arun_suite(
    suite: EvalSuite,
    *,
    run_dir: str | Path | None = None,
    rescore: str | Path | None = None,
    resume: bool = True,
    progress: ProgressHook | None = None,
    plan: RunPlan | None = None,
    wait: float | None = 0.0,
    on_flow_run: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Validate the suite (before any Prefect start-up or target call), take the run directory
    (``runner.prepare.claim``: chosen again under the suite's placing lock, its lock held), then
    run the flow.

    The plan is prepared once (or ``plan``, from :func:`prepare_run`, is used) and handed to the
    flow: the dataset is loaded and the target factory called once per run. ``wait``: how long to
    wait (seconds; None: as long as it takes) for a live run holding the same directory; when it
    finished that run meanwhile, the outcome is that run's (nothing is called or rewritten).

    Raises:
        SuiteError: for anything wrong with the suite, its dataset, target, evaluators, gates or
            run directory.
        RunLockedError: when a live run holds the directory (after ``wait``).
        PrefectUnavailableError: when the configured Prefect API does not answer.
    """
    if plan is None:
        plan = prepare_run(suite, run_dir=run_dir, rescore=rescore, resume=resume)
    assert plan.run_dir is not None
    await check_api()
    # The directory is chosen again and taken under the suite's placing lock: a run started
    # since (even in the same second) is found, not run beside this one.
    claimed = await asyncio.to_thread(claim, plan, suite, wait=wait)
    plan, lock = claimed.plan, claimed.lock
    assert plan.run_dir is not None
    notes = [lock.took_over] if lock.took_over else []
    if claimed.taken == "finished":  # by the live run this one waited for: it is the result
        lock.release()
        notes.append(
            f"the run this one waited for finished {plan.run_dir}: nothing was called or "
            "rewritten; its result is this command's"
        )
        ended = finished_outcome(plan.run_dir, suite)
        done = ended if isinstance(ended, State) else Completed(data=ended)
        return await _outcome(done, plan.run_dir.resolve(), notes, reusable=0)
    if claimed.taken == "interrupted":
        notes.append(
            f"{plan.run_dir}: its results were written by a run that ended before its report "
            "and artifacts; this run finishes them (nothing is called again)"
        )
    reusable = RunState.peek(plan)
    seen: list[str] = []  # the flow run's UI URL, once it exists

    def announce(url: str) -> None:
        seen.append(url)
        if on_flow_run is not None:
            on_flow_run(url)

    try:
        async with prefect_api(notes):
            api = PREFECT_API_URL.value()  # the configured server's, or the one started
            state = await _watched(
                _flow(plan, suite, lock, rescore, progress, announce),
                plan,
                str(api) if api else None,
            )
    except ServerError as exc:
        raise PrefectUnavailableError(str(exc)) from None
    finally:
        lock.release()
    return await _outcome(state, plan.run_dir.resolve(), notes, reusable, seen[0] if seen else None)


async def _outcome(
    state: State, run_dir: Path, notes: list[str], reusable: int, ui_url: str | None = None
) -> RunOutcome:
    """What came of a run that ended in ``state`` (its data: the flow's outcome) in ``run_dir``."""
    data = await state.aresult(raise_on_failure=False)
    info: dict[str, Any] = data if isinstance(data, dict) else {}
    verdict: Verdict = info.get("verdict") or ("passed" if state.is_completed() else "incomplete")
    message = None
    if not state.is_completed():
        message = str(data) if isinstance(data, BaseException) else state.message
    return RunOutcome(
        run_dir=run_dir,
        state=state.name or state.type.value,
        verdict=verdict,
        gate_passed=info.get("gate_passed"),
        message=message,
        reusable_calls=reusable,
        published_to=info.get("published_to"),
        calls=dict(info.get("calls") or {}),
        notes=notes,
        ui_url=ui_url,
    )


API_PROBE_S = 2.0
"""How often a running suite checks that its Prefect API answers (``GET /health``)."""
API_GONE_S = 15.0
"""How long the Prefect API may answer nothing before the run stops as "could not complete":
long enough for a server to restart, far shorter than Prefect's client retries (5 per request,
2 + 4 + ... + 32 s: about a minute each, ~145 s for a run's last few requests)."""
_ABANDON_S = 10.0
"""How long a flow run whose API is gone is given to end once it is cancelled."""


async def _watched(flow_run: Coroutine[Any, Any, Any], plan: RunPlan, url: str | None) -> Any:
    """The flow run's final state, unless its Prefect API (``url``; None: no server to watch)
    stops answering for API_GONE_S seconds: the run is then stopped (its finished calls are
    journaled) and PrefectUnavailableError says so. Prefect's client retries each request for
    about a minute against a server that is gone, and its engine reports the crash in a shielded
    scope with the same retries; nothing in Prefect gives up sooner, so the run watches its API.

    Raises:
        PrefectUnavailableError: the API is gone, naming it, the run directory and the journaled
            calls.
    """
    if url is None:
        return await flow_run
    running = asyncio.ensure_future(flow_run)
    watch = asyncio.ensure_future(_api_gone(url))
    try:
        await asyncio.wait({running, watch}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this run is cancelled (Ctrl-C): so is its flow run, then it ends
        watch.cancel()
        running.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait({running})
        raise
    if running.done():
        watch.cancel()
        try:
            return running.result()
        except httpx.TransportError as exc:  # Prefect's own retries ran out first
            raise PrefectUnavailableError(_api_lost(url, plan, str(exc))) from None
    failure = watch.exception()  # a signal raised while the watch ran, or None: the API is gone
    # Each cancellation ends one wait of the engine's shielded crash report (its retries against
    # the dead API); the run's calls and journal stop with the first. What Prefect logs meanwhile
    # (the crash it cannot report, its lost events) would bury the one message that matters.
    with filtered_logs(_not_prefect) if failure is None else contextlib.nullcontext():
        deadline = time.monotonic() + _ABANDON_S
        while not running.done() and time.monotonic() < deadline:
            running.cancel()
            await asyncio.wait({running}, timeout=0.5)
    if failure is not None:
        raise failure
    raise PrefectUnavailableError(_api_lost(url, plan, f"no answer for {API_GONE_S:g} s"))


def _not_prefect(record: logging.LogRecord) -> bool:
    return not record.name.startswith("prefect")


async def _api_gone(url: str) -> None:
    """Returns once the API at ``url`` has answered nothing for API_GONE_S seconds."""
    answered = time.monotonic()
    async with httpx.AsyncClient(timeout=API_PROBE_S * 2) as client:
        while True:
            await asyncio.sleep(API_PROBE_S)
            try:
                (await client.get(f"{url.rstrip('/')}/health")).raise_for_status()
                answered = time.monotonic()
            except httpx.HTTPError:
                if time.monotonic() - answered >= API_GONE_S:
                    return


def _api_lost(url: str, plan: RunPlan, why: str) -> str:
    assert plan.run_dir is not None
    journaled = RunState.peek(plan)
    return (
        f"the Prefect API at {url} stopped answering mid-run ({why}); the run stopped: "
        f"{journaled} of {len(plan.calls)} calls are finished and journaled in "
        f"{plan.run_dir / 'journal'}; start the server again (or fix PREFECT_API_URL) and run "
        "the same command to resume: only the missing calls are made"
    )


async def _flow(
    plan: RunPlan,
    suite: EvalSuite,
    lock: RunLock,
    rescore: str | Path | None,
    progress: ProgressHook | None,
    on_flow_run: Callable[[str], None] | None = None,
) -> Any:
    """The flow run of a suite's prepared, locked plan; its final state."""
    assert plan.run_dir is not None
    token = progress_hook.set(progress)
    announced = flow_run_hook.set(on_flow_run)
    prepared = prepared_plan.set((plan, suite, lock))
    try:
        return await eval_flow(
            suite,
            run_dir=str(plan.run_dir),
            rescore=str(rescore) if rescore is not None else None,
            return_state=True,
        )
    finally:
        prepared_plan.reset(prepared)
        flow_run_hook.reset(announced)
        progress_hook.reset(token)


def run_suite(
    suite: EvalSuite,
    *,
    run_dir: str | Path | None = None,
    rescore: str | Path | None = None,
    resume: bool = True,
    progress: ProgressHook | None = None,
    plan: RunPlan | None = None,
    wait: float | None = 0.0,
    on_flow_run: Callable[[str], None] | None = None,
) -> RunOutcome:
    """:func:`arun_suite` from synchronous code.

    Raises:
        KeyboardInterrupt: on Ctrl-C or SIGTERM (Prefect turns SIGTERM into its
            ``TerminationSignal`` while a flow runs; the run's journal is kept either way).
    """
    try:
        return asyncio.run(
            arun_suite(
                suite,
                run_dir=run_dir,
                rescore=rescore,
                resume=resume,
                progress=progress,
                plan=plan,
                wait=wait,
                on_flow_run=on_flow_run,
            )
        )
    except TerminationSignal:
        raise KeyboardInterrupt("SIGTERM") from None
