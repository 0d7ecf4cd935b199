"""The runner: one Prefect-free path from a plan to results, used by every way of running.

``evaluate_agent`` / ``evaluate_workflow`` build an in-process plan (:func:`in_process_plan`) and run
it as one shard; ``evalpipe run`` and the Prefect flow build a plan from a suite
(``evalpipe.runner.prepare.prepare_suite``: the dataset loaded and the target factory called once)
and run it shard by shard, in the flow's process or on Dask workers, all through :func:`run_shard`.
Importing this package does not import Prefect (nor pyarrow: ``prepare`` loads the artifact readers).
"""

from evalpipe.runner.plan import Call, Row, RunPlan, Target, in_process_plan, resolve_target
from evalpipe.runner.shard import (
    CallOutcome,
    Scope,
    ShardResult,
    evaluate_items,
    evaluate_prebuilt,
    run_in_process,
    run_shard,
)
from evalpipe.runner.state import RUN_MARKER, RunState, find_resumable, new_run_dir

__all__ = [
    "RUN_MARKER",
    "Call",
    "CallOutcome",
    "Row",
    "RunPlan",
    "RunState",
    "Scope",
    "ShardResult",
    "Target",
    "evaluate_items",
    "evaluate_prebuilt",
    "find_resumable",
    "in_process_plan",
    "new_run_dir",
    "resolve_target",
    "run_in_process",
    "run_shard",
]
