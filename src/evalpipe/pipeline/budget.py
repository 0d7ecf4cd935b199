"""The flow's side of a run's spend and budget, and of its endpoints' limits on requests in flight.

The flow's own shards (``task_runner: threads``) share one :class:`~evalpipe.spend.Ledger`. A shard
on a task runner's worker gets a share of what is left as its own budget (:meth:`RunSpend.on_worker`)
and a new one while the budget lasts when it spends it (its finished calls are journaled). The
shares never add up to more than what is left, so the budget is overshot at most by the calls in
flight when it is reached (docs/design/architecture.md, docs/operations.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from evalpipe._internal.adaptive import LimitChange
from evalpipe.escape import markdown as md_cell
from evalpipe.runner import RunPlan, RunState
from evalpipe.spend import Budget, BudgetReached, Ledger, Spend
from evalpipe.suite import EvalSuite

__all__ = ["RunSpend", "concurrency_record", "spend_markdown"]


class RunSpend:
    """A run's ledger and the shares of its budget given to workers, in the flow's process."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.ledger = Ledger(plan.budget, plan.prices)
        self.stop: BudgetReached | None = None
        """Set when a shard stopped (or did not start) because the budget is spent."""
        self._turn = asyncio.Condition()
        self._given: dict[int, tuple[int, float]] = {}
        """The shares of the budget given to the shards running on workers now, by job."""

    async def on_worker(self, job: Any, at_once: int, run: Callable[[], Awaitable[Any]]) -> Any:
        """Run a shard on a worker (``run()``: submit it, wait for its rows) with a share of what
        is left of the budget that is not given to the shards running now, divided among the
        free places of the ``at_once`` that run at once; a shard that spent its share gets
        another while the budget lasts (a shard waits for one to come back when everything left
        is given out). What it spent is added to the run's.

        Raises:
            BudgetReached: when the budget is spent.
        """
        while True:
            await self._take(job, at_once)
            try:
                rows = await run()
            except BudgetReached as stop:
                await self._give_back(job, Spend.from_dict(stop.spent or {}))
                continue  # its finished calls are journaled: another share makes the rest
            except BaseException:
                await self._give_back(job, None)
                raise
            await self._give_back(job, rows.spent)
            rows.spent = None  # counted
            return rows

    async def _take(self, job: Any, at_once: int) -> None:
        budget = self.ledger.budget
        if budget is None:
            return
        async with self._turn:
            while True:
                if self.ledger.reached():
                    raise self.ledger.stop()
                tokens, cost = self._free(budget)
                if (tokens is None or tokens > 0) and (cost is None or cost > 1e-12):
                    break
                if not self._given:
                    raise self.ledger.stop()
                await self._turn.wait()
            parts = max(1, at_once - len(self._given))
            job.budget = Budget(
                tokens=None if tokens is None else max(1, tokens // parts),
                cost_usd=None if cost is None else cost / parts,
            )
            self._given[id(job)] = (job.budget.tokens or 0, job.budget.cost_usd or 0.0)

    def _free(self, budget: Budget) -> tuple[int | None, float | None]:
        given_tokens = sum(t for t, _ in self._given.values())
        given_cost = sum(c for _, c in self._given.values())
        spent = self.ledger.spent
        tokens = None if budget.tokens is None else budget.tokens - spent.tokens - given_tokens
        cost = None
        if budget.cost_usd is not None:
            cost = budget.cost_usd - (spent.cost_usd or 0.0) - given_cost
        return tokens, cost

    async def _give_back(self, job: Any, spent: Spend | None) -> None:
        async with self._turn:
            if spent is not None:
                self.ledger.spent.merge(spent)
            self._given.pop(id(job), None)
            self._turn.notify_all()

    def stopped(self) -> str:
        """Why the run stopped, when its budget did: the budget, what was spent, what remains."""
        plan = self.plan
        ledger = self.ledger
        assert ledger.budget is not None
        # target calls not journaled yet (re-read: a worker journals its own)
        recorded = sum(1 for c in plan.calls if plan.rows[c.row_index].recorded is not None)
        remaining = max(0, len(plan.calls) - recorded - RunState.peek(plan))
        return (
            f"the run's budget of {ledger.budget.text()} is spent: {ledger.spent.text()} spent by "
            "this run; no new call was started and the calls in flight finished and were kept. "
            f"{remaining} of {len(plan.calls)} target call(s) remain to be made, and the items "
            "not judged yet remain to be judged: run again with a larger budget (--budget-tokens, "
            "--budget-usd, or budget in the suite) to make only those"
        )

    def record(self) -> dict[str, Any]:
        """manifest.json's ``spend``: this run's spend (totals and by model), its budget and
        prices, and what earlier attempts spent on the calls it reused."""
        ledger = self.ledger
        return {
            **ledger.spent.as_dict(),
            "budget": ledger.budget.model_dump() if ledger.budget is not None else None,
            "prices": {m: p.model_dump() for m, p in sorted(ledger.prices.items())},
            "earlier": ledger.earlier.as_dict(),
        }


def spend_markdown(spend: dict[str, Any], *, stopped: str | None = None) -> str:
    """A run's ``spend`` (as manifest.json keeps it) as markdown: totals, budget, by model."""
    totals = Spend.from_dict(spend)
    lines = [f"**Spent**: {totals.text()} in {totals.calls:,} call(s)"]
    if budget := spend.get("budget"):
        lines.append(f"**Budget**: {Budget.model_validate(budget).text()}")
    earlier = spend.get("earlier") or {}
    if earlier.get("calls"):
        lines.append(
            f"**Reused** (spent by earlier attempts of this run): {Spend.from_dict(earlier).text()} "
            f"in {earlier['calls']:,} call(s)"
        )
    if stopped:
        lines.append(f"**Stopped**: {md_cell(stopped, None)}")
    rows = spend.get("by_model") or []
    if rows:
        lines += [
            "",
            "| calls of | model | calls | input tokens | output tokens | tokens | cost (USD) |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for row in rows:
            cost = "no price" if row["cost_usd"] is None else f"{row['cost_usd']:.6f}"
            lines.append(
                f"| {md_cell(row['kind'])} | {md_cell(row['model'])} | {row['calls']:,} | "
                f"{row['input_tokens']:,} | {row['output_tokens']:,} | {row['tokens']:,} | {cost} |"
            )
        unreported = sum(int(r.get("unreported") or 0) for r in rows)
        if unreported:
            lines.append(
                f"\n{unreported} call(s) reported no token usage: they count as no tokens."
            )
    return "\n".join(lines)


def concurrency_record(suite: EvalSuite, changes: Sequence[LimitChange]) -> dict[str, Any]:
    """manifest.json's ``concurrency``: the run's bound, whether endpoints adapted, and every
    change of an endpoint's limit on requests in flight, in time order."""
    ordered = sorted(changes, key=lambda c: c.at)
    return {
        "limit": suite.concurrency,
        "adaptive": suite.adaptive_concurrency,
        "changes": [c.as_dict() for c in ordered],
    }
