"""Aggregates of EvalResults for people: pass rates per metric with explicit denominators."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from evalpipe.items import EvalItem
from evalpipe.results import EvalResults

__all__ = ["MetricSummary", "RunStats", "run_stats", "summarize"]


class MetricSummary(BaseModel):
    """One metric of one provider (and agent, for workflows)."""

    provider: str
    """The provider's name."""
    agent: str
    """The agent, or "overall"."""
    metric: str
    """The check or metric name."""
    passed: int
    """Items that passed this metric."""
    failed: int
    """Items that failed it."""
    errored: int
    """Items where it could not be computed."""
    mean_score: float | None
    """Mean of the scores that exist (None when none do)."""

    @property
    def pass_rate(self) -> float | None:
        """passed / (passed + failed); None with no verdicts."""
        n = self.passed + self.failed
        return self.passed / n if n else None


def summarize(results: Iterable[EvalResults]) -> list[MetricSummary]:
    """One row per provider × agent × metric, sub-results included (agent "overall" on top)."""
    rows: list[MetricSummary] = []
    for top in results:
        pairs = [("overall", top), *top.sub_results.items()]
        for agent, res in pairs:
            scores: dict[str, list[float]] = {}
            for item in res.items:
                for s in item.scores:
                    if s.score is not None and not math.isnan(s.score):
                        scores.setdefault(s.name, []).append(s.score)
            for metric, counts in res.per_evaluator.items():
                values = scores.get(metric, [])
                rows.append(
                    MetricSummary(
                        provider=res.provider,
                        agent=agent,
                        metric=metric,
                        passed=counts.get("passed", 0),
                        failed=counts.get("failed", 0),
                        errored=counts.get("errored", 0),
                        mean_score=sum(values) / len(values) if values else None,
                    )
                )
    return rows


class RunStats(BaseModel):
    """Target-call statistics over a set of items."""

    runs: int
    """Target calls."""
    errored: int
    """Calls that failed."""
    latency_p50: float | None
    """Median latency in seconds."""
    latency_p95: float | None
    """95th-percentile latency in seconds."""
    total_tokens: int | None
    """Tokens summed over the calls that reported them."""


def _quantile(sorted_values: Sequence[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def run_stats(items: Sequence[EvalItem]) -> RunStats:
    """Latency quantiles (nearest rank), token totals and failures of the calls behind ``items``."""
    latencies = sorted(
        i.usage.latency_seconds
        for i in items
        if i.usage is not None and i.usage.latency_seconds is not None
    )
    tokens = [i.usage.total_tokens for i in items if i.usage and i.usage.total_tokens is not None]
    return RunStats(
        runs=len(items),
        errored=sum(1 for i in items if i.error_code),
        latency_p50=_quantile(latencies, 0.5),
        latency_p95=_quantile(latencies, 0.95),
        total_tokens=sum(tokens) if tokens else None,
    )
