"""The Evaluator protocol: what every provider (local checks, LLM judges, Foundry) implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from evalpipe.items import EvalItem
from evalpipe.results import EvalResults

__all__ = ["Evaluator"]


@runtime_checkable
class Evaluator(Protocol):
    """A provider that scores a batch of items and returns one EvalResults.

    ``isinstance(x, Evaluator)`` only checks that ``name`` and ``evaluate`` exist (as MAF).
    Providers should report per-item problems as errored items rather than raise.
    """

    name: str

    async def evaluate(self, items: Sequence[EvalItem], *, eval_name: str) -> EvalResults: ...
