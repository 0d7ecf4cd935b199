"""The Prefect layer: the evaluation flow and its tasks (the only package that imports Prefect).

``eval_flow`` runs an :class:`~evalpipe.suite.EvalSuite` through the runner (``evalpipe.runner``);
``run_suite`` runs it from plain Python (ephemeral Prefect unless ``PREFECT_API_URL`` is set).
"""

from evalpipe.pipeline.flow import eval_flow, prepared_plan, progress_hook
from evalpipe.pipeline.run import (
    PrefectUnavailableError,
    RunOutcome,
    Verdict,
    arun_suite,
    prepare_run,
    run_suite,
)

__all__ = [
    "PrefectUnavailableError",
    "RunOutcome",
    "Verdict",
    "arun_suite",
    "eval_flow",
    "prepare_run",
    "prepared_plan",
    "progress_hook",
    "run_suite",
]
