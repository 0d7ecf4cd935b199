"""Running a suite's flow from Python or the command line, and what came of it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.pipeline.flow import (
    GateFailedError,
    ProgressHook,
    eval_flow,
    prepared_plan,
    progress_hook,
)
from evalpipe.runner import RunPlan, RunState, find_resumable, new_run_dir
from evalpipe.runner.prepare import prepare_suite
from evalpipe.suite import EvalSuite

__all__ = ["RunOutcome", "arun_suite", "prepare_run", "run_suite"]


@dataclass(slots=True)
class RunOutcome:
    """How a flow run ended and where its artifacts are."""

    run_dir: Path
    """The run directory (Parquet files and manifest.json when the run completed)."""
    state: str
    """The flow run's final state name (Completed, Failed, ...)."""
    gate_passed: bool | None
    """None when the suite has no gates."""
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

    @property
    def ok(self) -> bool:
        """Completed, and the gate (if any) passed or is warn-only."""
        return self.state == "Completed"


def prepare_run(
    suite: EvalSuite,
    *,
    run_dir: str | Path | None = None,
    rescore: str | Path | None = None,
    resume: bool = True,
) -> RunPlan:
    """The run's plan, validated before any Prefect start-up or target call.

    Raises:
        SuiteError: for anything wrong with the suite, its dataset, target, evaluators or gates.
    """
    if run_dir is None:
        found = find_resumable(suite) if resume and rescore is None else None
        run_dir = found or new_run_dir(suite)
    return prepare_suite(suite, run_dir, rescore=rescore)


async def arun_suite(
    suite: EvalSuite,
    *,
    run_dir: str | Path | None = None,
    rescore: str | Path | None = None,
    resume: bool = True,
    progress: ProgressHook | None = None,
    plan: RunPlan | None = None,
) -> RunOutcome:
    """Validate the suite (before any Prefect start-up or target call), then run its flow.

    The plan is prepared once (or ``plan``, from :func:`prepare_run`, is used) and handed to the
    flow: the dataset is loaded and the target factory called once per run.

    Raises:
        SuiteError: for anything wrong with the suite, its dataset, target, evaluators or gates.
    """
    if plan is None:
        plan = prepare_run(suite, run_dir=run_dir, rescore=rescore, resume=resume)
    assert plan.run_dir is not None
    run_path = plan.run_dir.resolve()
    reusable = RunState.peek(plan)
    token = progress_hook.set(progress)
    prepared = prepared_plan.set(plan)
    try:
        state: Any = await eval_flow(
            plan.suite,
            run_dir=str(plan.run_dir),
            rescore=str(rescore) if rescore is not None else None,
            return_state=True,
        )
    finally:
        prepared_plan.reset(prepared)
        progress_hook.reset(token)
    message = None
    gate_passed: bool | None = None
    published_to: str | None = None
    calls: dict[str, Any] = {}
    if state.is_completed():
        data = await state.aresult()
        gate_passed = data.get("gate_passed")
        published_to = data.get("published_to")
        calls = dict(data.get("calls") or {})
    else:
        exc = await state.aresult(raise_on_failure=False)
        message = str(exc) if isinstance(exc, BaseException) else state.message
        if isinstance(exc, GateFailedError):
            gate_passed = False
    return RunOutcome(
        run_dir=run_path,
        state=state.name or state.type.value,
        gate_passed=gate_passed,
        message=message,
        reusable_calls=reusable,
        published_to=published_to,
        calls=calls,
    )


def run_suite(
    suite: EvalSuite,
    *,
    run_dir: str | Path | None = None,
    rescore: str | Path | None = None,
    resume: bool = True,
    progress: ProgressHook | None = None,
    plan: RunPlan | None = None,
) -> RunOutcome:
    """:func:`arun_suite` from synchronous code."""
    return asyncio.run(
        arun_suite(
            suite,
            run_dir=run_dir,
            rescore=rescore,
            resume=resume,
            progress=progress,
            plan=plan,
        )
    )
