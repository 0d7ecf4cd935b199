"""Global concurrency limits: one quota shared by every flow run and worker (Foundry, judges).

In-process caps are semaphores; a Prefect global concurrency limit is used only where several flow
runs or processes share one quota (shared/specs/prefect-notes.md): every Foundry batch holds a slot
of ``foundry``, and a judge's batches hold slots of ``judge:<host>:<model>`` when an operator
created that limit.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast
from urllib.parse import urlsplit

from prefect import get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.asyncio import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

from evalpipe.evaluators.base import Evaluator
from evalpipe.itemize import WorkflowItems
from evalpipe.llm import ChatEndpoint
from evalpipe.runner import RunPlan, Scope

__all__ = [
    "FOUNDRY_LIMIT",
    "Limits",
    "judge_limit_name",
    "limits_scope",
    "provider_limits",
]

Limits = dict[int, tuple[str, int]]
"""Provider index -> (global concurrency limit, slots its batches hold)."""


FOUNDRY_LIMIT = "foundry"
"""The global concurrency limit every Foundry batch holds a slot of."""


def judge_limit_name(provider: Any) -> str | None:
    """``judge:<host>:<model>`` for an LLM judge (its endpoint's quota), None for anything else."""
    endpoint = getattr(provider, "endpoint", None)
    if not isinstance(endpoint, ChatEndpoint):
        return None
    host = urlsplit(endpoint.base_url).hostname or "local"
    return f"judge:{host}:{endpoint.model}"


async def provider_limits(plan: RunPlan) -> Limits:
    """The global concurrency limit each provider's batches hold, by provider index.

    Foundry providers always hold one slot of "foundry", created when missing with the largest
    ``max_concurrent_runs`` of the suite's Foundry providers (an existing limit, set by an
    operator for the whole project's quota, is left as it is). A judge holds
    ``max_concurrency`` slots of ``judge:<host>:<model>`` when an operator created that limit
    (``prefect gcl create judge:api.openai.com:gpt-4o --limit 32``); a judge asking for more than
    the limit is lowered to it. Without the limit, the judge is bounded per flow run by its
    endpoint's ``max_concurrency`` only, and the log says so.
    """
    limits: Limits = {}
    judges: Limits = {}
    foundry: list[int] = []
    for index, provider in enumerate(plan.providers):
        if (batched := plan.batched(provider)) is not None:
            limits[index] = (FOUNDRY_LIMIT, 1)
            foundry.append(int(batched.max_concurrent_runs))
        elif (name := judge_limit_name(provider)) is not None:
            judges[index] = (name, int(cast(Any, provider).endpoint.max_concurrency))
    if not foundry and not judges:
        return limits
    logger = get_run_logger()
    async with get_client() as client:
        if foundry:
            try:
                await client.read_global_concurrency_limit_by_name(FOUNDRY_LIMIT)
            except ObjectNotFound:
                # another flow run may create it meanwhile
                with contextlib.suppress(ObjectAlreadyExists):
                    await client.create_global_concurrency_limit(
                        GlobalConcurrencyLimitCreate(name=FOUNDRY_LIMIT, limit=max(foundry))
                    )
        for index, (name, wanted) in judges.items():
            try:
                gcl = await client.read_global_concurrency_limit_by_name(name)
            except ObjectNotFound:
                logger.info(
                    "no global concurrency limit %r: judge requests are bounded per flow run "
                    "only (create it to share a quota across runs and workers)",
                    name,
                )
                continue
            allowed = max(1, int(gcl.limit))
            if wanted > allowed:  # limits_scope lowers it, wherever the batch runs
                logger.warning(
                    "judge %s: max_concurrency %d lowered to %d, the size of limit %r",
                    plan.providers[index].name,
                    wanted,
                    allowed,
                    name,
                )
            limits[index] = (name, min(wanted, allowed))
    return limits


def limits_scope(limits: Limits) -> Scope:
    """The scope a provider's evaluation of a shard runs in: holding its limit's slots (in the flow
    or on a worker).

    A judge never sends more requests at once than the slots it holds (its ``max_concurrency``
    is lowered to them), and a small batch holds no more slots than it can use (one request per
    item and metric).
    """

    @contextlib.asynccontextmanager
    async def scope(index: int, provider: Evaluator, items: WorkflowItems) -> AsyncIterator[None]:
        limit = limits.get(index)
        if limit is None:
            yield
            return
        name, slots = limit
        endpoint: Any = getattr(provider, "endpoint", None)
        if judge_limit_name(provider) is not None and endpoint.max_concurrency > slots:
            cast(Any, provider).endpoint = endpoint.model_copy(update={"max_concurrency": slots})
        requests = items.count * max(1, len(getattr(provider, "metrics", ()) or ()))
        async with concurrency(name, occupy=max(1, min(slots, requests)), strict=True):
            yield

    return scope
