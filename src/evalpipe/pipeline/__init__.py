"""The Prefect layer: the evaluation flow and its tasks (the only package that imports Prefect).

``eval_flow`` runs an :class:`~evalpipe.suite.EvalSuite`; ``run_suite`` runs it from plain Python
(ephemeral Prefect unless ``PREFECT_API_URL`` is set).
"""

from evalpipe.pipeline.flow import GateFailedError, eval_flow, progress_hook
from evalpipe.pipeline.plan import RunPlan, find_resumable, new_run_dir
from evalpipe.pipeline.run import RunOutcome, arun_suite, run_suite

__all__ = [
    "GateFailedError",
    "RunOutcome",
    "RunPlan",
    "arun_suite",
    "eval_flow",
    "find_resumable",
    "new_run_dir",
    "progress_hook",
    "run_suite",
]
