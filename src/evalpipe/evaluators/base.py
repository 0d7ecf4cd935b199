"""The Evaluator protocol every provider implements, and the optional batched protocol."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from evalpipe.items import EvalItem
from evalpipe.results import EvalResults

__all__ = ["AgentScoped", "BatchedEvaluator", "Evaluator", "close_providers", "metric_names"]

_log = logging.getLogger("evalpipe")

CLOSE_TIMEOUT = 10.0
"""Seconds one provider's ``aclose`` may take at the end of a run."""


@runtime_checkable
class Evaluator(Protocol):
    """A provider that scores a batch of items and returns one EvalResults.

    ``isinstance(x, Evaluator)`` only checks that ``name`` and ``evaluate`` exist (as MAF).
    Providers should report per-item problems as errored items rather than raise.
    """

    name: str

    async def evaluate(self, items: Sequence[EvalItem], *, eval_name: str) -> EvalResults: ...


@runtime_checkable
class BatchedEvaluator(Evaluator, Protocol):
    """A provider whose evaluation lives on a server and runs in batches (Microsoft Foundry).

    A run creates one server-side evaluation per provider (per agent group for workflows) with
    ``create_eval`` and adds one server run per shard of items with ``run_batch``, so a long run is
    one evaluation in the provider's portal and a retried shard does not pay twice. A provider
    declares this by subclassing ``BatchedEvaluator``; ``evaluate`` stays the one-call form.
    """

    batch_size: int
    """Items per server run."""
    max_concurrent_runs: int
    """Server runs of one evaluation in flight at once."""

    async def create_eval(
        self, items: Sequence[EvalItem], *, eval_name: str, key: str | None = None
    ) -> str:
        """Create (or, with a ``key`` already used, find) the evaluation; returns its id."""
        ...

    async def run_batch(
        self, eval_id: str, items: Sequence[EvalItem], *, eval_name: str, batch_index: int = 0
    ) -> EvalResults:
        """Run one batch of items in the evaluation; never raises for a server fault."""
        ...


def metric_names(provider: Any) -> list[str] | None:
    """The metrics a provider says it produces, or None when it does not say (or cannot know
    before it runs). Providers declare them with a ``metric_names`` attribute (an optional part of
    the protocol); a suite's gates are checked against them before the first call."""
    names = getattr(provider, "metric_names", None)
    if names is None:
        return None
    return [str(n) for n in names]


async def close_providers(providers: Sequence[Any], *, keep: Sequence[Any] = ()) -> None:
    """Close the providers a run built (an optional ``aclose`` part of the protocol: e.g.
    ``FoundryEvals`` opens an OpenAI client per event loop), except those in ``keep`` (objects the
    run did not make, such as a module's instance a suite imports: other runs in the process use
    them). Each close is bounded by :data:`CLOSE_TIMEOUT`; a failing or slow one is logged, never
    raised: the run's results are already written."""
    kept = {id(obj) for obj in keep}
    for provider in providers:
        if id(provider) in kept or id(getattr(provider, "inner", None)) in kept:
            continue
        close = getattr(provider, "aclose", None)
        if not callable(close):
            continue
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                closing = close()
                if inspect.isawaitable(closing):
                    await closing
        except Exception as exc:  # closing must not fail a finished run
            _log.warning("closing %s failed: %s: %s", provider.name, type(exc).__name__, exc)


class AgentScoped:
    """A provider that evaluates only some groups of a workflow's items (``agents:`` in a suite).

    ``agents`` names workflow agents; ``"overall"`` is the whole workflow's answer. The scoped
    provider is its own provider, named with the scope, e.g. ``"Local (researcher, overall)"``.
    """

    def __init__(self, inner: Evaluator, agents: Sequence[str]) -> None:
        self.inner = inner
        self.agents = tuple(agents)
        self.name = f"{inner.name} ({', '.join(self.agents)})"

    @property
    def metric_names(self) -> list[str] | None:
        """The inner provider's metrics."""
        return metric_names(self.inner)

    async def evaluate(self, items: Sequence[EvalItem], *, eval_name: str) -> Any:
        return await self.inner.evaluate(items, eval_name=eval_name)

    async def aclose(self) -> None:
        """Close the inner provider (if it has ``aclose``)."""
        await close_providers([self.inner])

    def __repr__(self) -> str:
        return f"AgentScoped({self.inner!r}, agents={list(self.agents)})"
