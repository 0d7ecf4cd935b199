"""Running a suite's flow from Python or the command line, and what came of it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.pipeline.flow import GateFailedError, ProgressHook, eval_flow, progress_hook
from evalpipe.pipeline.plan import RunPlan, find_resumable, new_run_dir
from evalpipe.suite import EvalSuite

__all__ = ["RunOutcome", "arun_suite", "run_suite"]


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
    resumed_calls: int
    """Calls taken from the journal of an unfinished earlier run."""
    published_to: str | None = None
    """Where the finished run was published when the suite's output_dir is a remote URI
    (``run_dir`` is then the local staging copy)."""

    @property
    def ok(self) -> bool:
        """Completed, and the gate (if any) passed or is warn-only."""
        return self.state == "Completed"


async def arun_suite(
    suite: EvalSuite,
    *,
    run_dir: str | Path | None = None,
    rescore: str | Path | None = None,
    resume: bool = True,
    progress: ProgressHook | None = None,
) -> RunOutcome:
    """Validate the suite (before any Prefect start-up or target call), then run its flow.

    Raises:
        SuiteError: for anything wrong with the suite, its dataset, target, evaluators or gates.
    """
    if run_dir is None:
        found = find_resumable(suite) if resume and rescore is None else None
        run_dir = found or new_run_dir(suite)
    plan = RunPlan.prepare(suite, run_dir, rescore=rescore)  # raises SuiteError early
    plan.start()
    run_path = plan.absolute_run_dir()
    resumed = plan.resumed_calls()
    if plan.journal is not None:
        plan.journal.close()
    del plan  # the flow prepares its own; don't hold the dataset twice during the run
    token = progress_hook.set(progress)
    try:
        state: Any = await eval_flow(
            suite,
            run_dir=str(run_dir),
            rescore=str(rescore) if rescore is not None else None,
            return_state=True,
        )
    finally:
        progress_hook.reset(token)
    message = None
    gate_passed: bool | None = None
    published_to: str | None = None
    if state.is_completed():
        data = await state.aresult()
        gate_passed = data.get("gate_passed")
        published_to = data.get("published_to")
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
        resumed_calls=resumed,
        published_to=published_to,
    )


def run_suite(
    suite: EvalSuite,
    *,
    run_dir: str | Path | None = None,
    rescore: str | Path | None = None,
    resume: bool = True,
    progress: ProgressHook | None = None,
) -> RunOutcome:
    """:func:`arun_suite` from synchronous code."""
    return asyncio.run(
        arun_suite(suite, run_dir=run_dir, rescore=rescore, resume=resume, progress=progress)
    )
