"""The tally: the one place that turns item results into statuses, counts, rates and summary rows.

Every number evalpipe shows is computed here and read from here by every sink: the providers'
``result_counts`` and ``per_evaluator``, merged results, ``summary.parquet``, the command line's
tables, the HTML report, the Prefect artifacts and the gates. So the rules are written once:

- A metric's status is ``pass``, ``fail``, ``error`` (it could not be computed) or
  ``not_applicable`` (no verdict and no error: a judge metric without its input).
- An item's status is ``error`` when its target call failed or any metric errored, else ``fail``
  when any metric failed, else ``pass`` when one passed; an item with no metric at all fails (MAF's
  rule for zero checks), one whose metrics are all not applicable is errored (nothing judged it).
- Counts: ``n`` is everything a count covers (passed + failed + errored + not_applicable); a pass
  rate is ``passed / (passed + failed)`` and always travels with that denominator and with how
  many errored and not-applicable entries it leaves out. An item that could not be evaluated at all
  (its target call failed: no metrics) counts as errored on every metric of its provider.
- Merging batches: items concatenate in order, counts add up; the status is the batches' common
  status, ``partial`` when completed batches mix with others, and otherwise the worst of
  failed > timeout > canceled > partial.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic_core import to_json

from evalpipe.items import EvalItem
from evalpipe.results import EvalItemResult, EvalResults, EvalScoreResult

__all__ = [
    "ERROR",
    "FAIL",
    "NOT_APPLICABLE",
    "OVERALL",
    "PASS",
    "CallTally",
    "Counts",
    "ItemErrors",
    "ItemStatus",
    "LevelFold",
    "LevelsFold",
    "MetricFold",
    "ScoreStatus",
    "SummaryRow",
    "SummaryTally",
    "call_verdicts",
    "count_results",
    "errored_results",
    "fold_levels",
    "item_status",
    "make_results",
    "merge_results",
    "normalize_status",
    "rate_text",
    "score_status",
    "score_statuses",
    "summary_rows",
]

OVERALL: Final = "overall"
"""The agent name of a provider's top-level result (the whole target)."""
NOT_APPLICABLE: Final = "not_applicable"
"""The status (and label) of a metric that did not apply to an item: neither a verdict nor an error."""
PASS: Final = "pass"
FAIL: Final = "fail"
ERROR: Final = "error"

ScoreStatus = Literal["pass", "fail", "error", "not_applicable"]
"""A metric's status on one item."""
ItemStatus = Literal["pass", "fail", "error"]
"""An item's status: ``pass``/``fail`` are verdicts on the target; ``error`` means it could not be
evaluated (its call or an evaluator broke), which is not a verdict."""

_ITEM_STATUSES: dict[str, ItemStatus] = {
    "pass": PASS,
    "fail": FAIL,
    "error": ERROR,
    "errored": ERROR,
}
_STATUS_ORDER = ("failed", "timeout", "canceled", "partial")


def normalize_status(status: str) -> ItemStatus:
    """An item status as evalpipe counts it (Foundry's ``errored`` is ``error``); anything unknown
    is ``error``: an item whose verdict cannot be read was not evaluated."""
    return _ITEM_STATUSES.get(status, ERROR)


def score_status(score: EvalScoreResult) -> ScoreStatus:
    """One metric's status (see the module docstring)."""
    if score.error_code is not None or score.error_message is not None:
        return ERROR
    if score.diagnostics and any(d.severity == "error" for d in score.diagnostics):
        return ERROR
    if score.label == NOT_APPLICABLE:
        return NOT_APPLICABLE
    if score.passed is not None:
        return PASS if score.passed else FAIL
    if score.score is None:
        return ERROR  # nothing came back
    return NOT_APPLICABLE  # a value without a verdict: no pass/fail; its value still counts


def score_statuses(scores: Sequence[EvalScoreResult]) -> list[ScoreStatus]:
    """``score_status`` of every score."""
    return [score_status(s) for s in scores]


def item_status(
    scores: Sequence[EvalScoreResult], *, errored: bool = False, empty: ItemStatus = "fail"
) -> ItemStatus:
    """An item's status from its top-level metrics (components of a composite are not counted).

    ``errored``: the item could not be evaluated before any metric ran. ``empty``: the status of an
    item without metrics: ``fail`` for local checks (MAF: zero checks fail), ``error`` for a
    provider whose metrics should have come back (Foundry).
    """
    if errored:
        return ERROR
    verdict: ItemStatus | None = None
    top = False
    for score in scores:
        if score.evaluator is not None:
            continue
        top = True
        status = score_status(score)
        if status == ERROR:
            return ERROR
        if status == FAIL:
            verdict = FAIL
        elif status == PASS and verdict is None:
            verdict = PASS
    if not top:
        return empty
    return verdict or ERROR  # every metric not applicable: nothing judged it


@dataclass(slots=True)
class Counts:
    """How many passed, failed, errored and were not applicable, and the pass rate they give."""

    passed: int = 0
    failed: int = 0
    errored: int = 0
    not_applicable: int = 0

    @property
    def n(self) -> int:
        """Everything counted: passed + failed + errored + not_applicable."""
        return self.passed + self.failed + self.errored + self.not_applicable

    @property
    def denominator(self) -> int:
        """passed + failed: what a pass rate divides by."""
        return self.passed + self.failed

    @property
    def pass_rate(self) -> float | None:
        """passed / denominator; None when nothing has a verdict."""
        d = self.denominator
        return self.passed / d if d else None

    def add_all(self, statuses: Sequence[str]) -> Counts:
        """Count each status (an unknown one counts as errored); returns these counts."""
        passed, failed = statuses.count(PASS), statuses.count(FAIL)
        not_applicable = statuses.count(NOT_APPLICABLE)
        self.passed += passed
        self.failed += failed
        self.not_applicable += not_applicable
        self.errored += len(statuses) - passed - failed - not_applicable
        return self

    def as_dict(self) -> dict[str, int]:
        """``{"passed", "failed", "errored"}``, and ``not_applicable`` when there is any."""
        out = {"passed": self.passed, "failed": self.failed, "errored": self.errored}
        if self.not_applicable:
            out[NOT_APPLICABLE] = self.not_applicable
        return out


def rate_text(passed: int, failed: int, errored: int = 0, not_applicable: int = 0) -> str:
    """A pass rate with its denominator and what it leaves out, as every sink words it:
    ``"80.0% (8 of 10; 2 errored, 1 n/a left out)"``, ``"- (0 of 0; 3 errored left out)"``."""
    d = passed + failed
    rate = f"{passed / d:.1%}" if d else "-"
    left = []
    if errored:
        left.append(f"{errored} errored")
    if not_applicable:
        left.append(f"{not_applicable} n/a")
    tail = f"; {', '.join(left)} left out" if left else ""
    return f"{rate} ({passed} of {d}{tail})"


def count_results(
    results: Iterable[EvalItemResult], metrics: Sequence[str] = (), *, prefill: bool = True
) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """``(result_counts, per_evaluator)`` of item results.

    ``metrics`` names the provider's metrics in order: an item that errored with no metric at all
    (its target call failed) counts as errored on each. With ``prefill`` every named metric has a
    bucket even when nothing counted in it; without, a named metric gets one only when such an
    item counts (local checks: MAF keys buckets by the names the checks report). Metrics seen on
    items are added in first-seen order.
    """
    statuses: list[str] = []
    per: dict[str, list[str]] = {m: [] for m in metrics} if prefill else {}
    for result in results:
        status = _ITEM_STATUSES.get(result.status, ERROR)
        statuses.append(status)
        if not result.scores and status == ERROR:
            for metric in metrics:
                per.setdefault(metric, []).append(ERROR)
        for score in result.scores:
            if score.evaluator is None:
                found = per.get(score.name) or per.setdefault(score.name, [])
                found.append(score_status(score))
    return Counts().add_all(statuses).as_dict(), {
        name: Counts().add_all(found).as_dict() for name, found in per.items()
    }


def make_results(
    provider: str,
    items: list[EvalItemResult],
    *,
    metrics: Sequence[str] = (),
    prefill: bool = True,
    input_items: Sequence[EvalItem] = (),
    eval_id: str = "",
    run_id: str = "",
    status: str = "completed",
    error: str | None = None,
    report_url: str | None = None,
) -> EvalResults:
    """A provider's EvalResults over ``items``, its counts from :func:`count_results`."""
    counts, per = count_results(items, metrics, prefill=prefill)
    return EvalResults(
        provider=provider,
        eval_id=eval_id,
        run_id=run_id,
        status=status,
        result_counts=counts,
        report_url=report_url,
        error=error,
        per_evaluator=per,
        items=items,
        input_items=list(input_items),
    )


def errored_results(
    provider: str,
    items: Sequence[EvalItem],
    eval_name: str,
    error: str,
    *,
    code: str = "EvaluatorError",
) -> EvalResults:
    """A provider's "failed" result: every item errored (``code``) with ``error``, so the other
    providers' results (and the items) are kept."""
    results = [
        EvalItemResult(
            item_id=item.item_id if item.item_id is not None else str(i),
            status=ERROR,
            error_code=code,
            error_message=error,
            metadata=item.result_metadata(),
        )
        for i, item in enumerate(items)
    ]
    return make_results(
        provider, results, input_items=items, run_id=eval_name, status="failed", error=error
    )


def _merged_status(statuses: Sequence[str]) -> str:
    distinct = set(statuses)
    if len(distinct) == 1:
        return statuses[0]
    if "completed" in distinct:
        return "partial"
    return next((s for s in _STATUS_ORDER if s in distinct), "partial")


def _add_counts(target: dict[str, int] | None, source: Mapping[str, int]) -> dict[str, int]:
    """``target`` (a new dict for None) with ``source``'s counts added."""
    target = {} if target is None else target
    for key, value in source.items():
        target[key] = target.get(key, 0) + int(value)
    return target


def merge_results(parts: Sequence[EvalResults]) -> EvalResults:
    """One provider's results over several batches of items, as if evaluated in one go.

    Items concatenate in batch order; counts and per-metric counts add up; sub-results merge by
    agent name (first-seen order); the batches' distinct run ids and run-level errors are joined
    with ", " and "; " (a local provider's batches share one run id: its eval name); the status
    follows the module's rule.

    Raises:
        ValueError: for no parts, or parts from different providers.
    """
    if not parts:
        raise ValueError("merge_results needs at least one EvalResults")
    providers = {p.provider for p in parts}
    if len(providers) > 1:
        raise ValueError(f"cannot merge results of different providers: {sorted(providers)}")
    first = parts[0]
    if len(parts) == 1:
        return first
    counts: dict[str, int] | None = None
    per_evaluator: dict[str, dict[str, int]] = {}
    agents: dict[str, list[EvalResults]] = {}
    for part in parts:
        if part.result_counts is not None:
            counts = _add_counts(counts, part.result_counts)
        for name, bucket in part.per_evaluator.items():
            per_evaluator[name] = _add_counts(per_evaluator.get(name), bucket)
        for name, sub in part.sub_results.items():
            agents.setdefault(name, []).append(sub)
    errors = list(dict.fromkeys(p.error for p in parts if p.error))
    run_ids = list(dict.fromkeys(p.run_id for p in parts if p.run_id))
    return EvalResults(
        provider=first.provider,
        eval_id=next((p.eval_id for p in parts if p.eval_id), ""),
        run_id=", ".join(run_ids),
        status=_merged_status([p.status for p in parts]),
        result_counts=counts,
        report_url=next((p.report_url for p in parts if p.report_url), None),
        error="; ".join(errors) if errors else None,
        per_evaluator=per_evaluator,
        items=[item for p in parts for item in p.items],
        input_items=[item for p in parts for item in p.input_items],
        sub_results={name: merge_results(subs) for name, subs in agents.items()},
    )


# ---------------------------------------------------------------------------------------------
# Summary rows: summary.parquet, the command line, the report, the Prefect table artifact


@dataclass(frozen=True, slots=True)
class SummaryRow:
    """One row of summary.parquet: a provider × agent (``kind="result"``, item counts) or a
    provider × agent × metric (``kind="metric"``); see docs/artifacts.md for every column."""

    kind: Literal["result", "metric"]
    provider: str
    provider_index: int
    agent: str
    agent_index: int
    metric: str | None
    n: int
    passed: int
    failed: int
    errored: int
    not_applicable: int
    pass_rate_denominator: int
    pass_rate: float | None
    score_count: int = 0
    score_mean: float | None = None
    score_min: float | None = None
    score_max: float | None = None
    score_std: float | None = None
    status: str | None = None
    eval_id: str | None = None
    eval_run_id: str | None = None
    report_url: str | None = None
    error: str | None = None
    result_counts: str | None = None
    per_evaluator: str | None = None

    @property
    def rate_text(self) -> str:
        """The pass rate with its denominator and what it leaves out (see :func:`rate_text`)."""
        return rate_text(self.passed, self.failed, self.errored, self.not_applicable)

    @property
    def all_passed(self) -> bool:
        """A result row's verdict, as ``EvalResults.all_passed``: completed, at least one item,
        none failed or errored (no items, or a provider that did not complete, is not a pass)."""
        return self.status == "completed" and self.n > 0 and self.failed == self.errored == 0


_status_of = operator.attrgetter("status")


@dataclass(slots=True)
class _MetricAgg:
    counts: Counts = field(default_factory=Counts)
    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    low: float | None = None
    high: float | None = None

    def add_many(self, statuses: list[str], scores: list[float]) -> None:
        """Count the statuses and fold in the scores (none None or NaN) in order."""
        self.counts.add_all(statuses)
        if not scores:
            return
        # Welford's update: a stable mean and variance however many batches arrive.
        count, mean, m2 = self.count, self.mean, self.m2
        for score in scores:
            count += 1
            delta = score - mean
            mean += delta / count
            m2 += delta * (score - mean)
        self.count, self.mean, self.m2 = count, mean, m2
        low, high = min(scores), max(scores)
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)


@dataclass(slots=True)
class _LevelAgg:
    provider: str
    provider_index: int
    agent: str
    agent_index: int
    counts: Counts = field(default_factory=Counts)
    unscored_errors: int = 0
    statuses: list[str] = field(default_factory=list)
    eval_id: str | None = None
    run_id: str | None = None
    report_url: str | None = None
    errors: list[str] = field(default_factory=list)
    result_counts: dict[str, int] | None = None
    per_evaluator: dict[str, dict[str, int]] = field(default_factory=dict)
    metrics: dict[str, _MetricAgg] = field(default_factory=dict)

    def add(self, result: EvalResults) -> None:
        if not self.statuses:
            self.eval_id, self.run_id = result.eval_id, result.run_id
            self.report_url = result.report_url
        self.statuses.append(result.status)
        if result.error is not None:
            self.errors.append(result.error)
        if result.result_counts is not None:
            self.result_counts = _add_counts(self.result_counts, result.result_counts)
        for name, bucket in result.per_evaluator.items():
            self.per_evaluator[name] = _add_counts(self.per_evaluator.get(name), bucket)
        items = result.items
        statuses = [_ITEM_STATUSES.get(s, ERROR) for s in map(_status_of, items)]
        self.counts.add_all(statuses)
        # Each metric's statuses and scores, in item order, then counted and folded per metric:
        # the same numbers as adding them one by one (Welford's update in the same order).
        grouped: dict[str, tuple[list[str], list[float]]] = {}
        for item, status in zip(items, statuses, strict=True):
            scores = item.scores
            if not scores:
                if status == ERROR:
                    self.unscored_errors += 1
                continue
            for score in scores:
                entry = grouped.get(score.name)
                if entry is None:
                    entry = grouped[score.name] = ([], [])
                entry[0].append(score_status(score))
                value = score.score
                if value is not None:
                    number = float(value)
                    if not math.isnan(number):
                        entry[1].append(number)
        metrics = self.metrics
        for name, (metric_statuses, values) in grouped.items():
            agg = metrics.get(name)
            if agg is None:
                agg = metrics[name] = _MetricAgg()
            agg.add_many(metric_statuses, values)

    def rows(self) -> list[SummaryRow]:
        counts = self.result_counts
        out = [
            SummaryRow(
                kind="result",
                **self._where(None, self.counts),
                status=_merged_status(self.statuses) if self.statuses else None,
                eval_id=self.eval_id,
                eval_run_id=self.run_id,
                report_url=self.report_url,
                error="; ".join(dict.fromkeys(self.errors)) if self.errors else None,
                result_counts=None if counts is None else to_json(counts).decode(),
                per_evaluator=to_json(self.per_evaluator).decode(),
            )
        ]
        for metric, agg in self.metrics.items():
            m = dataclasses.replace(agg.counts, errored=agg.counts.errored + self.unscored_errors)
            out.append(
                SummaryRow(
                    kind="metric",
                    **self._where(metric, m),
                    score_count=agg.count,
                    score_mean=agg.mean if agg.count else None,
                    score_min=agg.low,
                    score_max=agg.high,
                    score_std=math.sqrt(agg.m2 / (agg.count - 1)) if agg.count > 1 else None,
                )
            )
        return out

    def _where(self, metric: str | None, c: Counts) -> dict[str, Any]:
        """A row's level, metric and counts."""
        return {
            "provider": self.provider,
            "provider_index": self.provider_index,
            "agent": self.agent,
            "agent_index": self.agent_index,
            "metric": metric,
            "n": c.n,
            **dataclasses.asdict(c),
            "pass_rate_denominator": c.denominator,
            "pass_rate": c.pass_rate,
        }


class SummaryTally:
    """Summary rows accumulated batch by batch (memory bounded by providers × agents × metrics).

    ``add`` takes one batch: the EvalResults of each provider, in provider order; ``rows`` gives
    the rows of summary.parquet, providers in order, each provider's overall level first and then
    its agents in first-seen order.

    Raises:
        ValueError: (from ``add``) when a provider's position changed name since an earlier batch,
            or results nest sub_results more than one level.
    """

    def __init__(self) -> None:
        self._levels: dict[tuple[int, str], _LevelAgg] = {}
        self.providers: list[str] = []
        """Provider names, in order."""

    def check(self, results: Sequence[EvalResults]) -> list[list[tuple[str, EvalResults]]]:
        """The levels of each provider's result; raises (see the class) before anything is added."""
        levels = []
        for index, result in enumerate(results):
            if not isinstance(result, EvalResults):
                raise TypeError(
                    f"results[{index}]: expected EvalResults, got {type(result).__name__}"
                )
            if index < len(self.providers) and self.providers[index] != result.provider:
                raise ValueError(
                    f"results[{index}]: provider {result.provider!r}, but earlier batches had "
                    f"{self.providers[index]!r} at this position; pass the providers in the "
                    "same order in every batch"
                )
            level = [(OVERALL, result)]
            for agent, sub in result.sub_results.items():
                if agent == OVERALL:
                    raise ValueError(
                        f"results[{index}]: sub_results key {OVERALL!r} is reserved for the "
                        "top-level result; rename that agent"
                    )
                if sub.sub_results:
                    raise ValueError(
                        f"results[{index}]: sub_results[{agent!r}] has sub_results of its own; "
                        "run artifacts hold one level of per-agent results"
                    )
                level.append((agent, sub))
            levels.append(level)
        return levels

    def add(self, results: Sequence[EvalResults]) -> None:
        """Count one batch."""
        for index, (result, levels) in enumerate(zip(results, self.check(results), strict=True)):
            if index == len(self.providers):
                self.providers.append(result.provider)
            for agent, level in levels:  # the overall level first, then the agents
                agg = self._levels.get((index, agent))
                if agg is None:
                    seen = sum(1 for p, _ in self._levels if p == index)
                    agg = self._levels[index, agent] = _LevelAgg(
                        result.provider, index, agent, seen
                    )
                agg.add(level)

    def rows(self) -> list[SummaryRow]:
        """Every summary row, in the order summary.parquet holds them."""
        out: list[SummaryRow] = []
        for key in sorted(self._levels, key=lambda k: (k[0], self._levels[k].agent_index)):
            out.extend(self._levels[key].rows())
        return out


def summary_rows(results: Sequence[EvalResults]) -> list[SummaryRow]:
    """The summary rows of finished results (one EvalResults per provider)."""
    tally = SummaryTally()
    tally.add(results)
    return tally.rows()


def call_verdicts(results: Sequence[EvalResults]) -> Counts:
    """The calls' verdicts over every item each became (every provider and agent; items are tied
    to their call by ``metadata["run_id"]``): errored when any of its items errored, else failed
    when any failed, else passed. What the progress bar counts while a run goes on."""
    worst: dict[str, ItemStatus] = {}
    rank = {PASS: 0, FAIL: 1, ERROR: 2}.__getitem__
    for result in results:
        for level in result.iter_results():
            for item in level.items:
                key = (item.metadata or {}).get("run_id")
                if key is not None:
                    status = normalize_status(item.status)
                    worst[str(key)] = max(status, worst.get(str(key), PASS), key=rank)
    return Counts().add_all(list(worst.values()))


# ---------------------------------------------------------------------------------------------
# Target calls


def _quantile(sorted_values: Sequence[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


@dataclass(slots=True)
class CallTally:
    """What happened to a run's target calls: made now, reused from the journal, replayed from a
    recording (no target called), and how many of them errored; latency and tokens of those made."""

    made: int = 0
    """Calls made to the target in this run."""
    reused: int = 0
    """Calls whose transcript was taken from the run's journal (a resumed run) or, re-scoring,
    from the earlier run: the target was not called again."""
    recorded: int = 0
    """Dataset rows evaluated as recorded: no target exists for them."""
    errored: int = 0
    """Calls (of all three kinds) whose transcript is an error."""
    latencies: list[float] = field(default_factory=list, repr=False)
    tokens: int | None = None

    @property
    def total(self) -> int:
        """Every transcript of the run: made + reused + recorded."""
        return self.made + self.reused + self.recorded

    def add(self, source: Literal["made", "reused", "recorded"], transcript: Any) -> None:
        """Count one call's transcript (a TargetRun or WorkflowRun) by where it came from."""
        setattr(self, source, getattr(self, source) + 1)
        if transcript.error_code is not None:
            self.errored += 1
        if source != "made":
            return
        usage = transcript.usage
        if usage.latency_seconds is not None:
            self.latencies.append(float(usage.latency_seconds))
        if usage.total_tokens is not None:
            self.tokens = (self.tokens or 0) + int(usage.total_tokens)

    def merge(self, other: CallTally) -> None:
        """Count another tally's calls as if each had been added here, after those already
        counted (a worker process's shard)."""
        for name in ("made", "reused", "recorded", "errored"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.latencies.extend(other.latencies)
        if other.tokens is not None:
            self.tokens = (self.tokens or 0) + other.tokens

    def as_dict(self) -> dict[str, Any]:
        """What the manifest records under ``calls``."""
        ordered = sorted(self.latencies)
        return {
            "total": self.total,
            "made": self.made,
            "reused": self.reused,
            "recorded": self.recorded,
            "errored": self.errored,
            "latency_p50_s": _quantile(ordered, 0.5),
            "latency_p95_s": _quantile(ordered, 0.95),
            "total_tokens": self.tokens,
        }

    @staticmethod
    def text(calls: Mapping[str, Any]) -> str:
        """The manifest's ``calls`` in words, the same in every sink."""
        made, reused, recorded = (int(calls.get(k, 0) or 0) for k in ("made", "reused", "recorded"))
        errored = int(calls.get("errored", 0) or 0)
        parts = []
        if made or not (reused or recorded):
            parts.append(f"{made} made")
        if reused:
            parts.append(f"{reused} reused (not called again)")
        if recorded:
            parts.append(f"{recorded} recorded (no target called)")
        head = "target calls" if made or reused else "transcripts"
        return f"{head}: {', '.join(parts)}; {errored} errored"


# --------------------------------------------------------------------------------------------
# The gates' fold: per provider, agent and metric, what the gate clauses read


@dataclass(slots=True)
class MetricFold:
    """One metric of one provider and agent, as the gates read it: its computed scores (a value
    and no error) with their items' labels, statuses and passed flags, and how many items
    errored on it or skipped it."""

    labels: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    statuses: list[ScoreStatus] = field(default_factory=list)
    passed: list[bool | None] = field(default_factory=list)
    errored_scored: int = 0
    """Items whose scores of the metric errored, none computed."""
    error_items_named: int = 0
    """Items that could not be evaluated and have a score of the metric."""
    not_applicable: int = 0
    """Items with scores of the metric, none computed and none errored."""


@dataclass(frozen=True, slots=True)
class ItemErrors:
    """An item with an error: it could not be evaluated, or a score of it errored."""

    label: str
    is_error: bool
    error_code: str | None
    errored: tuple[tuple[str, str | None], ...]
    """Its errored scores: (metric, error_code), in order."""
    sound: frozenset[str]
    """The metrics it has a score of that did not error."""


@dataclass(slots=True)
class LevelFold:
    """One provider's results at one level ("" for the top, else the agent) folded once, each
    item and score classified by the tally's rules: the run's status, the metrics it produces,
    its item count, its items with errors, and one ``MetricFold`` per metric."""

    label: str
    provider: str
    status: str
    owned: set[str] = field(default_factory=set)
    """The metrics it produces (its per_evaluator counts or a score name them)."""
    items: int = 0
    errored_items: int = 0
    """Items that could not be evaluated."""
    errors: list[ItemErrors] = field(default_factory=list)
    metrics: dict[str, MetricFold] = field(default_factory=dict)
    statuses: list[str] = field(default_factory=list, compare=False, repr=False)
    """Every batch's run status (``status`` is their merge)."""
    children: dict[str, LevelFold] = field(default_factory=dict, compare=False, repr=False)
    """The sub-results' levels, by agent."""

    def add(self, result: EvalResults) -> None:
        """Fold in one result's items, and its sub-results' into the children."""
        self.statuses.append(result.status)
        self.status = _merged_status(self.statuses)
        for key, sub in result.sub_results.items():
            child = self.children.get(key)
            if child is None:
                child = self.children[key] = LevelFold(key, sub.provider, sub.status)
            child.add(sub)
        self.owned.update(result.per_evaluator)
        label = self.label
        metrics = self.metrics
        for item in result.items:
            self.items += 1
            item_id = item.item_id
            shown = item_id if not label or label in item_id.split("/") else f"{label}:{item_id}"
            is_error = item.is_error
            if is_error:
                self.errored_items += 1
            by_name: dict[str, list[tuple[EvalScoreResult, ScoreStatus]]] = {}
            errored: list[tuple[str, str | None]] = []
            for score, status in zip(item.scores, score_statuses(item.scores), strict=True):
                by_name.setdefault(score.name, []).append((score, status))
                if status == ERROR:
                    errored.append((score.name, score.error_code))
            sound: set[str] = set()
            for name, named in by_name.items():
                fold = metrics.get(name)
                if fold is None:
                    fold = metrics[name] = MetricFold()
                    self.owned.add(name)
                if is_error:
                    fold.error_items_named += 1
                computed = False
                any_error = False
                for score, status in named:
                    if status == ERROR:
                        any_error = True
                        continue
                    sound.add(name)
                    if score.score is not None:
                        computed = True
                        fold.labels.append(shown)
                        fold.values.append(score.score)
                        fold.statuses.append(status)
                        fold.passed.append(score.passed)
                if computed:
                    continue
                if any_error:
                    fold.errored_scored += 1
                else:
                    fold.not_applicable += 1
            if is_error or errored:
                self.errors.append(
                    ItemErrors(shown, is_error, item.error_code, tuple(errored), frozenset(sound))
                )

    def errored_on(self, metric: str) -> int:
        """Items errored on ``metric``: its scores errored and none was computed, or the item
        could not be evaluated and has no score of it."""
        fold = self.metrics.get(metric)
        if fold is None:
            return self.errored_items
        return fold.errored_scored + self.errored_items - fold.error_items_named

    def errors_of(self, metric: str | None) -> Iterator[tuple[str, list[str]]]:
        """Each item with an error (with ``metric``: an error of that metric, or it could not be
        evaluated and has no sound score of it): its label and its errors as text."""
        for item in self.errors:
            if item.is_error and (metric is None or metric not in item.sound):
                yield item.label, [f"{item.label} {item.error_code or 'error'}"]
                continue
            texts = [
                f"{item.label} {name} {code or 'error'}"
                for name, code in item.errored
                if metric in (None, name)
            ]
            if texts:
                yield item.label, texts

    def walk(self) -> Iterator[LevelFold]:
        """This level, then its children's, depth first in first-seen order."""
        yield self
        for child in self.children.values():
            yield from child.walk()


class LevelsFold:
    """A run's results folded per provider and level as they come, batch by batch (a flow's
    shards): ``add`` each batch's results (one per provider, in the providers' order); ``levels``
    is then what ``fold_levels`` of the merged results would be, without keeping any item."""

    __slots__ = ("_tops",)

    def __init__(self) -> None:
        self._tops: list[LevelFold] = []

    def add(self, results: Sequence[EvalResults]) -> None:
        """Fold in one batch's results (``results[p]``: provider ``p``'s)."""
        for index, result in enumerate(results):
            if index == len(self._tops):
                self._tops.append(LevelFold("", result.provider, result.status))
            self._tops[index].add(result)

    @property
    def levels(self) -> list[LevelFold]:
        """Every level, in the merged results' walk order (sub-results first-seen)."""
        return [level for top in self._tops for level in top.walk()]


def fold_levels(results: Sequence[EvalResults]) -> list[LevelFold]:
    """Every provider's results folded per level (sub-results at any depth), in walk order."""
    fold = LevelsFold()
    fold.add(results)
    return fold.levels
