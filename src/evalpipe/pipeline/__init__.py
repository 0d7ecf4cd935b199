"""The Prefect layer: the evaluation flow and its tasks (the only package that imports Prefect).

``eval_flow`` runs an :class:`~evalpipe.suite.EvalSuite` through the runner (``evalpipe.runner``);
``run_suite`` runs it from plain Python (the PREFECT_HOME's embedded server unless
``PREFECT_API_URL`` is set).

The names below load on first use: importing a submodule that does not need Prefect (the embedded
server's ``evalpipe.pipeline.server``, which ``evalpipe server`` uses) does not import Prefect
(1-2 s).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_OF_FLOW = ("eval_flow", "prepared_plan", "progress_hook")
"""The names of ``evalpipe.pipeline.flow``; the others are ``evalpipe.pipeline.run``'s."""


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    where = "evalpipe.pipeline.flow" if name in _OF_FLOW else "evalpipe.pipeline.run"
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value
