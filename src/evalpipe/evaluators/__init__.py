"""Evaluator providers: the protocol, local checks (more providers land here: judges, Foundry)."""

from evalpipe.evaluators.base import Evaluator
from evalpipe.evaluators.local import FunctionEvaluator, LocalEvaluator, evaluator

__all__ = ["Evaluator", "FunctionEvaluator", "LocalEvaluator", "evaluator"]
