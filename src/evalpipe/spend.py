"""What a run's model calls spend, and the budget that stops it.

Tokens are what the calls report in ``usage``: the target's calls (each transcript's
``RunUsage``) and the judges' requests (each answer's ``usage``); a call's tokens are its
``total_tokens``, or its input and output tokens added up when no total is reported. Cost is
never guessed: it comes from the prices the suite states per model (``prices: {model:
{input_per_1m, output_per_1m}}``); the target's calls are priced by the model of an ``openai``
target, or by the key ``target`` for a target whose model evalpipe cannot see (a Python agent, a
workflow).

A :class:`Ledger` counts one run's spend in one process; once its :class:`Budget` is reached no
new call starts, the calls in flight finish and are kept, and the run stops with
:class:`BudgetReached`. Calls reused from an earlier attempt of the run cost nothing again: they
are counted apart. Shards on other processes get shares of the budget (``evalpipe.pipeline.budget``).
The judges' requests are metered in ``evalpipe.llm.ChatClient`` through :data:`metering`, the
target's calls by the runner.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "TARGET",
    "Budget",
    "BudgetReached",
    "Kind",
    "Ledger",
    "Price",
    "Spend",
    "metering",
    "spend_text",
    "tokens_of",
]

TARGET = "target"
"""The ``prices`` key of the target's calls when the target's model is not known to evalpipe."""

Kind = Literal["target", "judge"]
"""Whose call: the target's, or an evaluator's (an LLM judge's) request."""


class Price(BaseModel):
    """What a model's tokens cost, in US dollars per million."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_1m: float = Field(ge=0)
    """Dollars per million input (prompt) tokens."""
    output_per_1m: float = Field(ge=0)
    """Dollars per million output (completion) tokens."""

    def cost(self, input_tokens: int | None, output_tokens: int | None) -> float:
        """The cost of one call's tokens (an unreported count costs nothing)."""
        return (
            (input_tokens or 0) * self.input_per_1m + (output_tokens or 0) * self.output_per_1m
        ) / 1e6


class Budget(BaseModel):
    """The most a run may spend: tokens, dollars, or both (the first one reached stops it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: int | None = Field(default=None, ge=1)
    """Tokens of the target's and the judges' calls, added up."""
    cost_usd: float | None = Field(default=None, gt=0)
    """Dollars, at the suite's ``prices`` (a price for every model the run calls is required)."""

    @model_validator(mode="after")
    def _one_at_least(self) -> Budget:
        if self.tokens is None and self.cost_usd is None:
            raise ValueError("a budget names tokens, cost_usd or both, e.g. {tokens: 200000}")
        return self

    def text(self) -> str:
        """The budget in words."""
        parts = []
        if self.tokens is not None:
            parts.append(f"{self.tokens:,} tokens")
        if self.cost_usd is not None:
            parts.append(f"${self.cost_usd:,.4g}")
        return " or ".join(parts)


def tokens_of(usage: Any) -> tuple[int | None, int | None, int]:
    """(input, output, tokens) of a usage (a RunUsage, a usage dict or None): tokens is the
    reported total, else input and output added up (0 when nothing was reported)."""
    if usage is None:
        return None, None, 0
    names = ("input_tokens", "output_tokens", "total_tokens")
    if isinstance(usage, dict):  # an answer's usage (a RunUsage is read by attribute)
        inp, out, total = (usage.get(n) for n in names)
    else:
        inp, out, total = (getattr(usage, n) for n in names)
    inp = inp if isinstance(inp, int) else None
    out = out if isinstance(out, int) else None
    if not isinstance(total, int):
        total = (inp or 0) + (out or 0)
    return inp, out, total


@dataclass(slots=True)
class _Line:
    """What one model's calls of one kind spent."""

    calls: int = 0
    unreported: int = 0
    """Calls whose endpoint reported no token usage (they count as no tokens)."""
    input_tokens: int = 0
    output_tokens: int = 0
    tokens: int = 0
    cost_usd: float | None = 0.0
    """None when the suite states no price for the model."""

    def add(self, other: _Line) -> None:
        for name in ("calls", "unreported", "input_tokens", "output_tokens", "tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.cost_usd = _cost((self, other))


def _cost(lines: Iterable[_Line]) -> float | None:
    """The lines' cost; None when one of them has no price."""
    costs = [line.cost_usd for line in lines]
    return None if None in costs else sum(c for c in costs if c is not None)


@dataclass(slots=True)
class Spend:
    """Tokens and dollars by kind of call and model (what a run, a shard or earlier attempts
    spent)."""

    lines: dict[tuple[str, str], _Line] = field(default_factory=dict)
    """(kind, model) -> what those calls spent."""

    def add(self, kind: str, model: str, usage: Any, price: Price | None) -> None:
        """Count one call."""
        inp, out, tokens = tokens_of(usage)
        call = _Line(
            calls=1,
            unreported=int(inp is None and out is None and tokens == 0),
            input_tokens=inp or 0,
            output_tokens=out or 0,
            tokens=tokens,
            cost_usd=None if price is None else price.cost(inp, out),
        )
        self.lines.setdefault((kind, model), _Line()).add(call)

    def merge(self, other: Spend) -> None:
        """Add another spend (a shard's, from a worker) to this one."""
        for key, line in other.lines.items():
            self.lines.setdefault(key, _Line()).add(line)

    @property
    def tokens(self) -> int:
        """Every call's tokens."""
        return sum(line.tokens for line in self.lines.values())

    @property
    def cost_usd(self) -> float | None:
        """Every call's cost; None when a model in use has no price."""
        return _cost(self.lines.values())

    @property
    def calls(self) -> int:
        """Calls counted."""
        return sum(line.calls for line in self.lines.values())

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the totals and one row per kind and model (manifest.json's ``spend``)."""
        return {
            "tokens": self.tokens,
            "cost_usd": _round(self.cost_usd),
            "calls": self.calls,
            "by_model": [
                {"kind": kind, "model": model, **asdict(line), "cost_usd": _round(line.cost_usd)}
                for (kind, model), line in sorted(self.lines.items())
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Spend:
        """The spend :meth:`as_dict` wrote."""
        spend = cls()
        counts = [f.name for f in fields(_Line) if f.name != "cost_usd"]
        for row in data.get("by_model") or ():
            spend.lines[(str(row["kind"]), str(row["model"]))] = _Line(
                **{name: int(row.get(name) or 0) for name in counts}, cost_usd=row.get("cost_usd")
            )
        return spend

    def text(self) -> str:
        """The spend in words: tokens (target and judges) and the cost when every model is
        priced."""
        target, judge = (
            sum(line.tokens for (k, _), line in self.lines.items() if k == kind)
            for kind in ("target", "judge")
        )
        cost = self.cost_usd
        money = f", ${cost:,.4f}" if cost is not None and self.lines else ""
        return f"{self.tokens:,} tokens (target {target:,}, judges {judge:,}){money}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


class BudgetReached(Exception):
    """The run's budget (or a shard's share of it) is spent: no new call may start.

    Attributes:
        spent: what the shard that stopped spent, when it ran in another process (the flow adds
            it to the run's spend); None otherwise.
    """

    def __init__(self, message: str, spent: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.spent = spent

    def __reduce__(self) -> tuple[Any, ...]:
        # it crosses process boundaries (a worker's shard): keep what was spent
        return (type(self), (str(self), self.spent))


class Ledger:
    """One run's spend in one process, its budget, and the calls in flight.

    Args:
        budget: what the run (or this shard of it) may spend; None: spend is only counted.
        prices: dollars per model (see the module docstring).
    """

    def __init__(self, budget: Budget | None, prices: Mapping[str, Price]) -> None:
        self.budget = budget
        self.prices = dict(prices)
        self.spent = Spend()
        """What this run's calls spent (made now, in this process or added from workers)."""
        self.earlier = Spend()
        """What earlier attempts of the run spent on the calls this run reuses."""
        self.in_flight = 0
        self.refused = 0
        """Calls that did not start because the budget was reached."""
        self._drained: asyncio.Event | None = None

    def reached(self) -> bool:
        """Whether the budget is spent (no new call may start)."""
        budget = self.budget
        if budget is None:
            return False
        if budget.tokens is not None and self.spent.tokens >= budget.tokens:
            return True
        cost = self.spent.cost_usd
        return budget.cost_usd is not None and cost is not None and cost >= budget.cost_usd

    def start(self) -> bool:
        """A call may start (it is counted in flight until :meth:`finish`), unless the budget is
        spent."""
        if self.reached():
            self.refused += 1
            return False
        self.in_flight += 1
        return True

    def finish(self, kind: Kind, model: str, usage: Any, *, answered: bool = True) -> None:
        """A call that :meth:`start` let through ended; ``answered``: it got an answer (its usage,
        possibly None, is counted); a call that failed costs nothing."""
        self.in_flight -= 1
        if answered:
            self.spent.add(kind, model, usage, self.prices.get(model))
        if self.in_flight == 0 and self._drained is not None:
            self._drained.set()

    def reuse(self, kind: Kind, model: str, usage: Any) -> None:
        """A call reused from an earlier attempt of the run: what it cost then."""
        self.earlier.add(kind, model, usage, self.prices.get(model))

    async def drained(self) -> None:
        """Return once no call is in flight (the run's calls in flight finish and are kept before
        a budget stop ends the run)."""
        while self.in_flight > 0:
            self._drained = asyncio.Event()
            await self._drained.wait()
        self._drained = None

    def stop(self) -> BudgetReached:
        """The stop of a shard whose budget is spent (carrying its spend, for the flow to add
        when the shard ran in another process)."""
        assert self.budget is not None
        return BudgetReached(
            f"the budget of {self.budget.text()} is reached: {self.spent.text()} spent",
            self.spent.as_dict(),
        )


metering: contextvars.ContextVar[Ledger | None] = contextvars.ContextVar(
    "evalpipe_metering", default=None
)
"""The ledger an evaluator's model requests are counted in and admitted by (``ChatClient`` reads
it); set by the runner while a shard's items are evaluated, None otherwise (nothing metered)."""


def spend_text(record: Mapping[str, Any]) -> str:
    """A run's ``spend`` (as manifest.json keeps it) in one line: what it spent, against which
    budget, and what earlier attempts spent on the calls it reused."""
    text = Spend.from_dict(record).text()
    if budget := record.get("budget"):
        text += f" of a budget of {Budget.model_validate(budget).text()}"
    earlier = record.get("earlier") or {}
    if earlier.get("calls"):
        text += f"; {earlier['calls']:,} reused call(s) had cost {Spend.from_dict(earlier).text()}"
    return text
