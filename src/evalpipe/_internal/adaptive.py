"""How many requests may be in flight to one endpoint: a bound that adapts to the endpoint's 429s.

An endpoint with a quota (requests in flight, per minute, tokens per minute) answers 429 past it. A
fixed bound either floods such an endpoint (every request past the quota is answered 429, and one
answered at once frees its slot for the next request, which is answered 429 at once too) or crawls
below what it takes. :class:`AdaptiveLimit` finds the level, as Inspect AI's adaptive connections
and TCP's congestion window do (AIMD: additive increase, multiplicative decrease):

- it starts at ``min(20, ceiling)`` (:data:`START`) and never leaves ``[floor, ceiling]``;
- until the endpoint first answers 429 it doubles after each clean round (slow start); after
  that a clean round raises it by 5% (at least 1). A clean round is ``limit`` requests (at least
  4) answered on their first attempt, sent at the current limit, with no 429 in between, and none
  counts before the ``Retry-After`` the endpoint last asked for has passed;
- a 429 to a request sent at the current limit starts an episode: the limit is cut to 80%, and
  to the requests still in flight if fewer. A 429 to a request sent before that cut belongs to
  the same episode: it lowers the limit only to the requests still in flight. An episode never
  takes the limit below half of what it was when the episode began (nor below the floor). Inspect
  debounces with a 15 s cooldown; waiting for the requests sent at the new limit instead works at
  any latency: a run of a few seconds would otherwise see one cut.

Every change is logged (``evalpipe.llm``) and recorded as a :class:`LimitChange` in the list the
current context collects (:data:`limit_changes`: a run's shard sets it, and the run's files keep
the changes). Without ``adaptive`` the bound is the ceiling, fixed.

The bound itself is anyio's ``CapacityLimiter``, whose ``total_tokens`` can be changed while tasks
hold and wait for tokens (asyncio's ``Semaphore`` cannot be resized); this module only decides the
number. anyio comes with httpx.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import anyio

__all__ = [
    "DECREASE",
    "FLOOR",
    "INCREASE",
    "START",
    "AdaptiveLimit",
    "LimitChange",
    "limit_changes",
    "limit_notes",
]

logger = logging.getLogger("evalpipe.llm")

START = 20
"""Where an adaptive limit starts (or at its ceiling, when that is lower)."""
FLOOR = 1
"""The lowest an adaptive limit goes."""
DECREASE = 0.8
"""The cut at the start of an episode of 429s."""
INCREASE = 0.05
"""The rise after a clean round, once the endpoint has answered 429 (at least 1)."""
ROUND_FLOOR = 4
"""A clean round is at least this many requests, whatever the limit."""

Reason = Literal["rate limited", "slow start", "clean round"]
"""Why a limit changed: the endpoint answered 429; a clean round before the first 429 (the limit
doubles); a clean round after it (the limit rises by 5%)."""


@dataclass(frozen=True, slots=True)
class LimitChange:
    """One change of an endpoint's limit on requests in flight."""

    at: str
    """When (UTC, ISO 8601)."""
    endpoint: str
    """The endpoint's URL."""
    model: str
    """The model requested (an endpoint's limit is per URL and model)."""
    before: int
    """The limit before the change."""
    limit: int
    """The limit after it."""
    reason: Reason
    """Why (see :data:`Reason`)."""
    in_flight: int
    """The endpoint's requests in flight from this process when it changed."""

    def as_dict(self) -> dict[str, Any]:
        """The change as JSON-ready data (manifest.json's ``concurrency.changes``)."""
        return asdict(self)


limit_changes: contextvars.ContextVar[list[LimitChange] | None] = contextvars.ContextVar(
    "evalpipe_limit_changes", default=None
)
"""Where the changes a request makes are collected (None: logged only). A run's shard sets a list
of its own; a change is recorded in the list of the request that caused it."""


class AdaptiveLimit:
    """The bound on requests in flight to one endpoint (URL and model) in one event loop.

    Args:
        endpoint: the endpoint's URL, for the log and the changes.
        model: the model requested.
        ceiling: the most requests in flight, ever.
        adaptive: adapt between the floor and the ceiling (else: the ceiling, fixed).
    """

    def __init__(self, endpoint: str, model: str, ceiling: int, *, adaptive: bool) -> None:
        self.endpoint = endpoint
        self.model = model
        self.ceiling = max(1, ceiling)
        self.adaptive = adaptive
        self.limit = min(START, self.ceiling) if adaptive else self.ceiling
        """The requests that may be in flight now."""
        self._slots = anyio.CapacityLimiter(self.limit)
        self._generation = 0
        self._clean = 0
        self._throttled = False
        """The endpoint answered 429 at least once (slow start is over)."""
        self._episode_floor = FLOOR
        self._quiet_until = 0.0
        """No rise before this time.monotonic() (the endpoint's last Retry-After)."""
        self.changes = 0

    @property
    def in_flight(self) -> int:
        """Requests holding a slot now."""
        return int(self._slots.borrowed_tokens)

    def ask(self, ceiling: int, *, adaptive: bool) -> None:
        """Another client of the endpoint: the smallest ceiling asked for wins, and the limit
        adapts only while every client asks it to."""
        if ceiling < self.ceiling:
            self.ceiling = max(1, ceiling)
            if self.limit > self.ceiling:
                self._set(self.ceiling)
        self.adaptive = self.adaptive and adaptive

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[int]:
        """Hold one of the endpoint's slots for one HTTP attempt; it gives the limit's generation
        when the request is sent (a 429 to a request sent before the last cut belongs to the
        episode of that cut)."""
        borrower = object()  # a token per attempt: one task may hold slots of several endpoints
        await self._slots.acquire_on_behalf_of(borrower)
        try:
            yield self._generation
        finally:
            self._slots.release_on_behalf_of(borrower)

    def answered(self, sent_at: int, *, first_attempt: bool) -> None:
        """The request was answered (not 429); it counts toward a clean round when it was sent
        at the current limit on its first attempt."""
        if not self.adaptive or not first_attempt or sent_at != self._generation:
            return
        if time.monotonic() < self._quiet_until:
            return
        self._clean += 1
        if self._clean < max(self.limit, ROUND_FLOOR):
            return
        self._clean = 0
        if self._throttled:
            raised = self.limit + max(1, round(self.limit * INCREASE))
            reason: Reason = "clean round"
        else:
            raised = self.limit * 2
            reason = "slow start"
        self._change(min(raised, self.ceiling), reason)

    def rate_limited(self, sent_at: int, retry_after: float | None) -> None:
        """The request was answered 429 (``retry_after``: the seconds the endpoint asked for)."""
        if not self.adaptive:
            return
        self._throttled = True
        self._clean = 0
        if retry_after:
            self._quiet_until = max(self._quiet_until, time.monotonic() + retry_after)
        others = self.in_flight - 1  # this request holds its slot until it returns
        if sent_at == self._generation:  # a new episode
            self._generation += 1
            self._episode_floor = max(FLOOR, self.limit // 2)
            target = min(int(self.limit * DECREASE), others)
        else:  # the episode of the last cut: only down to what is in flight
            target = min(self.limit, others)
        self._change(max(self._episode_floor, target), "rate limited")

    def _change(self, limit: int, reason: Reason) -> None:
        if limit == self.limit:
            return
        change = LimitChange(
            at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            endpoint=self.endpoint,
            model=self.model,
            before=self.limit,
            limit=limit,
            reason=reason,
            in_flight=self.in_flight,
        )
        self._set(limit)
        self.changes += 1
        logger.info(
            "%s (model %s): requests in flight %d -> %d (%s; %d in flight)",
            self.endpoint,
            self.model,
            change.before,
            change.limit,
            reason,
            change.in_flight,
        )
        collected = limit_changes.get()
        if collected is not None:
            collected.append(change)

    def _set(self, limit: int) -> None:
        self.limit = limit
        self._slots.total_tokens = limit


def limit_notes(record: Mapping[str, Any] | None) -> list[str]:
    """One line per endpoint whose limit a run cut (``record``: manifest.json's
    ``concurrency``): from what, to what lowest, how often."""
    changes = (record or {}).get("changes") or []
    by_endpoint: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for change in changes:
        by_endpoint.setdefault((change["endpoint"], change["model"]), []).append(change)
    notes = []
    for (endpoint, model), seen in by_endpoint.items():
        cuts = [c for c in seen if c["reason"] == "rate limited"]
        if not cuts:
            continue
        notes.append(
            f"{endpoint} (model {model}) answered 429: its limit on requests in flight was cut "
            f"{len(cuts)} time(s), from {seen[0]['before']} to as low as "
            f"{min(c['limit'] for c in seen)}, and ended at {seen[-1]['limit']} "
            f"({len(seen)} change(s) in manifest.json's concurrency)"
        )
    return notes
