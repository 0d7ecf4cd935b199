"""Evaluator providers: the protocol, local checks, LLM judges (Foundry: ``evalpipe.foundry``).

The deterministic text and tool-use checks live in ``evalpipe.evaluators.nlp`` (imported on use:
sacrebleu and nltk are not loaded until then).
"""

from evalpipe.evaluators.base import Evaluator
from evalpipe.evaluators.judge import JUDGE_METRICS, JudgeConfig, JudgeEvaluator
from evalpipe.evaluators.local import FunctionEvaluator, LocalEvaluator, evaluator

__all__ = [
    "JUDGE_METRICS",
    "Evaluator",
    "FunctionEvaluator",
    "JudgeConfig",
    "JudgeEvaluator",
    "LocalEvaluator",
    "evaluator",
]
