"""Read a finished run directory into what the report shows.

Every aggregate is a DuckDB query over the run's Parquet files (``run_tables``: DuckDB reads a
local file itself, after the artifacts' schema-version checks; a file on a filesystem URI is read
with ``read_table``): the totals, each metric's scores, the repetitions of each dataset row, the
check/judge disagreements and the drill-down's order. Only what is listed becomes Python objects:
the drill-down's items (their rows read back by position with ``read_rows``), the flaky rows and
the disagreeing pairs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import duckdb
import numpy as np

from evalpipe._internal.adaptive import limit_notes
from evalpipe.artifacts import read_manifest, read_rows, read_summary
from evalpipe.artifacts.reader import (
    attach_tables,
    connected,
    manifest_part,
    records,
    run_tables,
)
from evalpipe.report.stats import (
    Interval,
    RepetitionStats,
    bootstrap_mean_interval,
    pass_at_k,
    pass_hat_k,
    wilson_interval,
)
from evalpipe.spend import Spend, spend_text
from evalpipe.tally import OVERALL, CallTally

__all__ = [
    "ITEM_ROWS_SQL",
    "VERDICT_RANK_SQL",
    "Bin",
    "Disagreement",
    "DisagreementItem",
    "FlakyItem",
    "ItemDetail",
    "MessagePart",
    "MessageView",
    "MetricKind",
    "MetricRow",
    "ResultRow",
    "RunReport",
    "ScoreView",
    "VariabilityRow",
    "attach_scored",
    "classify_metric",
    "item_detail",
    "load_report_data",
    "metric_kinds",
    "query_disagreements",
    "scored_connection",
]

MetricKind = Literal["judge", "check", "other"]
"""judge: an LLM judge's metric (JudgeEvaluator, Microsoft Foundry); check: a local check run
in-process (LocalEvaluator); other: any other provider."""


def classify_metric(provider: str, has_rating: bool) -> MetricKind:
    """Judge or check, from what scores.parquet records.

    A JudgeEvaluator sets ``rating`` on every score it returns (also on errored and
    not-applicable ones) and no local check does; Foundry's provider is named "Microsoft
    Foundry" (with an agent scope appended when the suite scopes it: "Microsoft Foundry
    (researcher)"); LocalEvaluator's provider is "Local" (or "Local (scope)").
    """
    if has_rating or provider.startswith("Microsoft Foundry"):
        return "judge"
    if provider == "Local" or provider.startswith("Local ("):
        return "check"
    return "other"


# -- views ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Bin:
    """One histogram bar."""

    low: float
    high: float
    count: int


@dataclass(slots=True)
class MetricRow:
    """One provider × agent × metric: counts with their denominators and intervals."""

    provider: str
    agent: str
    metric: str
    kind: MetricKind
    n: int
    passed: int
    failed: int
    errored: int
    not_applicable: int
    pass_rate: Interval | None
    """Wilson interval over passed + failed (errored and not applicable left out)."""
    score: Interval | None
    """Seeded bootstrap interval of the mean of the non-null scores."""
    score_std: float | None
    score_min: float | None
    score_max: float | None
    denominator: int
    """passed + failed (summary.parquet's ``pass_rate_denominator``)."""
    histogram: list[Bin] = field(default_factory=list)


@dataclass(slots=True)
class ResultRow:
    """One provider × agent: item verdicts."""

    provider: str
    agent: str
    n: int
    passed: int
    failed: int
    errored: int
    pass_rate: Interval | None
    status: str | None
    error: str | None
    report_url: str | None


@dataclass(slots=True)
class VariabilityRow:
    """Repetitions of one metric on one agent: averages over dataset rows."""

    provider: str
    agent: str
    metric: str
    rows: int
    """Dataset rows with at least one verdict."""
    k: int
    pass_at_1: float | None
    pass_at_k: float | None
    pass_hat_k: float | None
    at_least_1: int
    """Rows where at least one repetition passed."""
    all_k: int
    """Rows where every one of at least k repetitions passed."""
    rows_at_k: int
    """Rows with at least k verdicts (pass@k and pass^k average over these)."""
    flaky: int
    score_std_mean: float | None
    """Mean over rows of the standard deviation of the scores across repetitions."""


@dataclass(slots=True)
class FlakyItem:
    """A dataset row whose repetitions disagree on a metric."""

    provider: str
    agent: str
    metric: str
    row: str
    stats: RepetitionStats


@dataclass(slots=True)
class DisagreementItem:
    """One item where a check and a judge disagree."""

    agent: str
    item_id: str
    row: str
    repetition: int
    check: str
    check_passed: bool
    judge: str
    judge_passed: bool
    judge_reason: str | None


@dataclass(slots=True)
class Disagreement:
    """A check metric against a judge metric on one agent's items."""

    agent: str
    check: str
    judge: str
    pairs: int
    """Items where both have a verdict."""
    check_pass_judge_fail: int
    check_fail_judge_pass: int
    agreement: float
    """Share of pairs where they agree."""
    examples: list[DisagreementItem] = field(default_factory=list)


@dataclass(slots=True)
class MessagePart:
    """One content of a message: text, a tool call, a tool result or anything else (as JSON)."""

    kind: Literal["text", "call", "result", "other"]
    title: str
    body: str


@dataclass(slots=True)
class MessageView:
    role: str
    author: str | None
    parts: list[MessagePart]


@dataclass(slots=True)
class ScoreView:
    """One metric of an item, as the drill-down shows it."""

    provider: str
    metric: str | None
    evaluator: str | None
    status: str | None
    score: float | None
    threshold: float | None
    label: str | None
    rating: str | None
    reason: str | None
    error_code: str | None
    error_message: str | None
    diagnostics: list[tuple[str, str]]
    dimensions: list[dict[str, Any]]


@dataclass(slots=True)
class ItemDetail:
    """One evaluated item with its transcript and every provider's metrics."""

    agent: str
    item_id: str
    row: str
    repetition: int
    query: str | None
    response: str | None
    expected_output: str | None
    context: str | None
    error_code: str | None
    error_message: str | None
    messages: list[MessageView]
    scores: list[ScoreView]
    verdict: str
    """"pass" when every provider passed it, else the worst item status."""


@dataclass(slots=True)
class RunReport:
    """Everything the HTML report of one run shows."""

    run_dir: str
    manifest: dict[str, Any]
    suite_name: str
    description: str | None
    target: str | None
    finished_at: str | None
    calls: int
    calls_errored: int
    calls_cached: int
    calls_text: str
    """What happened to the calls, as every sink words it (``CallTally.text``)."""
    total_tokens: int | None
    latency_p50: float | None
    latency_p95: float | None
    items_per_agent: list[tuple[str, int]]
    results: list[ResultRow]
    metrics: list[MetricRow]
    variability: list[VariabilityRow]
    """Repetitions of each metric on each agent, averaged over dataset rows (``_VARIABILITY_SQL``'s
    rows, in the metrics' order)."""
    flaky: list[FlakyItem]
    flaky_total: int
    disagreements: list[Disagreement]
    items: list[ItemDetail]
    items_total: int
    items_not_passed: int
    max_items: int
    gate: dict[str, Any] | None
    spend: dict[str, Any] | None = None
    """manifest.json's ``spend`` (what the run's calls spent, by model, and its budget)."""
    spend_text: str | None = None
    """The spend in one line, as the terminal says it."""
    limit_changes: list[dict[str, Any]] = field(default_factory=list)
    """manifest.json's ``concurrency.changes``: each endpoint's limit on requests in flight."""
    limit_notes: list[str] = field(default_factory=list)
    """One line per endpoint whose limit was cut (the terminal's)."""

    @property
    def items_omitted(self) -> int:
        """Items left out of the drill-down."""
        return self.items_total - len(self.items)

    @property
    def agents(self) -> list[str]:
        return [agent for agent, _ in self.items_per_agent]


# -- the run's tables in DuckDB -------------------------------------------------------------------


ITEM_ROWS_SQL = """
SELECT * REPLACE (coalesce(repetition, 0) AS repetition),
       coalesce(row_id, 'query ' || CAST(coalesce(query_index, -1) AS VARCHAR)) AS row
FROM items
"""
"""items.parquet's rows with each item's dataset row (its ``row_id``, else "query N") and
repetition (0 when none): what pairs an item across runs (``compare``), and what the drill-down,
the flaky rows and the view show."""

_SCORED_SQL = f"""
SELECT s.provider, s.agent, s.item_id, s.metric, s.score, s.status, s.rating,
       coalesce(i.row, s.item_id) AS row, coalesce(i.repetition, 0) AS repetition, s._pos
FROM scores s LEFT JOIN ({ITEM_ROWS_SQL}) i ON s.agent = i.agent AND s.item_id = i.item_id
WHERE s.metric IS NOT NULL
"""
"""Each metric row of scores.parquet with its item's dataset row and repetition (an item missing
from items.parquet keeps its id as its row; one that items.parquet holds twice is repeated) and
its position in scores.parquet (``_pos``)."""

_READ = {
    "scores": [
        "provider",
        "provider_index",
        "agent",
        "item_id",
        "item_index",
        "item_status",
        "metric",
        "score",
        "status",
        "rating",
        "score_index",
    ],
    "items": ["agent", "item_id", "row_id", "query_index", "repetition", "item_index"],
}
"""The columns the report's queries read."""


def attach_scored(
    con: duckdb.DuckDBPyConnection, run_dir: Any, name: str, *, filesystem: Any = None
) -> None:
    """Make ``name`` a table in ``con`` of the run's scored rows (``scored_rows``'s columns; the
    rows in no particular order: ``_pos`` orders them)."""
    attach_tables(con, run_dir, _READ, filesystem=filesystem)
    con.execute(f"CREATE TEMP TABLE {name} AS {_SCORED_SQL}")
    con.execute("DROP VIEW scores; DROP VIEW items")


def scored_connection(run_dir: Any, *, filesystem: Any = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection holding the run's scored rows as the table ``scored``:
    scores.parquet's metric rows (metric not null) with each item's dataset row and repetition
    (provider, agent, item_id, metric, score, status, rating, row, repetition, and ``_pos``: the
    row's position in scores.parquet)."""
    return connected(lambda con: attach_scored(con, run_dir, "scored", filesystem=filesystem))


_KINDS_SQL = "SELECT provider, metric, count(rating) > 0 AS rated FROM {scored} GROUP BY ALL"


def metric_kinds(
    con: duckdb.DuckDBPyConnection, scored: str = "scored"
) -> dict[tuple[str, str], MetricKind]:
    """Each (provider, metric) of the table ``scored``: judge, check or other."""
    return {
        (provider, metric): classify_metric(provider, rated)
        for provider, metric, rated in con.execute(_KINDS_SQL.format(scored=scored)).fetchall()
    }


# -- aggregates -----------------------------------------------------------------------------------


def _histogram(values: np.ndarray) -> list[Bin]:
    """Ten bins over [0, 1] for scores in it; one bin per value for whole-number scores over a
    short range (a judge's 1-5); else ten bins between the smallest and the largest score. A NaN
    score is left out, as the tally leaves it out of the mean."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return []
    low, high = float(values.min()), float(values.max())
    integral = bool(np.all(np.equal(np.mod(values, 1), 0)))
    if low >= 0.0 and high <= 1.0:
        edges = np.linspace(0.0, 1.0, 11)
    elif integral and high - low <= 10:
        edges = np.arange(low - 0.5, high + 1.5, 1.0)
    else:
        edges = np.linspace(low, high, 11)
    counts, edges = np.histogram(values, bins=edges)
    return [Bin(float(edges[i]), float(edges[i + 1]), int(counts[i])) for i in range(len(counts))]


_SCORE_LISTS_SQL = """
SELECT provider, agent, metric, list(score ORDER BY _pos) AS scores
FROM scored WHERE score IS NOT NULL GROUP BY ALL
"""
"""Each provider x agent x metric's scores (NaN included: the bootstrap leaves it out), in
file order (the bootstrap of many distinct scores resamples them in order)."""


def _metric_rows(
    con: duckdb.DuckDBPyConnection, run_dir: Any, filesystem: Any
) -> tuple[list[ResultRow], list[MetricRow], dict[str, int]]:
    """summary.parquet's rows (the tally's counts) with their intervals and histograms, and each
    agent's order (its first ``agent_index``)."""
    rows = sorted(
        read_summary(run_dir, filesystem=filesystem),
        key=lambda r: (r.provider_index, r.agent_index, r.metric or ""),
    )
    kinds = metric_kinds(con)
    found = con.execute(_SCORE_LISTS_SQL).fetchnumpy()  # no Python object per score
    keys = zip(found["provider"], found["agent"], found["metric"], strict=True)
    values = {key: np.asarray(v, dtype=float) for key, v in zip(keys, found["scores"], strict=True)}
    agent_order: dict[str, int] = {}
    results: list[ResultRow] = []
    metrics: list[MetricRow] = []
    for r in rows:
        agent_order.setdefault(r.agent, r.agent_index)
        rate = wilson_interval(r.passed, r.passed + r.failed)
        if r.kind == "result":
            results.append(
                ResultRow(
                    r.provider, r.agent, r.n, r.passed, r.failed, r.errored, rate, r.status,
                    r.error, r.report_url,
                )
            )  # fmt: skip
            continue
        metric = str(r.metric)
        scores = values.get((r.provider, r.agent, metric), np.empty(0))
        metrics.append(
            MetricRow(
                provider=r.provider,
                agent=r.agent,
                metric=metric,
                kind=kinds.get((r.provider, metric), "other"),
                n=r.n,
                passed=r.passed,
                failed=r.failed,
                errored=r.errored,
                not_applicable=r.not_applicable,
                pass_rate=rate,
                score=bootstrap_mean_interval(scores),
                score_std=r.score_std,
                score_min=r.score_min,
                score_max=r.score_max,
                denominator=r.pass_rate_denominator,
                histogram=_histogram(scores),
            )
        )
    return results, metrics, agent_order


_PER_ROW_SQL = """
CREATE TEMP TABLE per_row AS
SELECT provider, agent, metric, row,
       count(*) FILTER (status = 'pass') AS c,
       count(*) FILTER (status IN ('pass', 'fail')) AS n,
       count(*) FILTER (status = 'not_applicable') AS not_applicable,
       count(*) AS total,
       avg(score) AS mean, stddev_samp(score) AS std, count(score) AS scores
FROM scored GROUP BY ALL
"""
"""Per provider, agent, metric and dataset row, over its repetitions: verdicts (n), passes (c),
not applicable, rows, the scores' mean and sample deviation."""

_PER_METRIC_SQL = """
CREATE TEMP TABLE per_metric AS
SELECT provider, agent, metric, greatest(1, least($repetitions, max(n))) AS k
FROM per_row GROUP BY ALL
"""
"""Each metric's k: the run's repetitions, at most the most verdicts a row has."""

_VARIABILITY_SQL = """
WITH at_k AS (
    SELECT provider, agent, metric, sum(pass_at_k(n, c, k) * rows) / sum(rows) AS pass_at_k,
           sum(pass_hat_k(n, c, k) * rows) / sum(rows) AS pass_hat_k
    FROM (SELECT provider, agent, metric, n, c, k, count(*) AS rows
          FROM per_row JOIN per_metric USING (provider, agent, metric) WHERE n >= k GROUP BY ALL)
    GROUP BY ALL
)
SELECT provider, agent, metric,
       count(*) FILTER (n > 0) AS rows,
       any_value(k) AS k,
       avg(c / n) FILTER (n > 0) AS pass_at_1,
       any_value(pass_at_k) AS pass_at_k,
       any_value(pass_hat_k) AS pass_hat_k,
       count(*) FILTER (c > 0) AS at_least_1,
       count(*) FILTER (n >= k AND c = n) AS all_k,
       count(*) FILTER (n >= k) AS rows_at_k,
       count(*) FILTER (c > 0 AND c < n) AS flaky,
       avg(std) FILTER (NOT isnan(std)) AS score_std_mean
FROM per_row JOIN per_metric USING (provider, agent, metric) LEFT JOIN at_k USING (provider, agent, metric)
GROUP BY ALL ORDER BY provider, agent, metric
"""
"""Per metric, over its dataset rows: those with a verdict (``rows``), with at least k verdicts
(``rows_at_k``: pass@k and pass^k average over these, each computed once per (n, c, k) with
``stats``), where a repetition passed (``at_least_1``), where all of at least k passed
(``all_k``), the flaky ones, and the mean over rows of their scores' deviation across repetitions."""

_FLAKY_SQL = """
SELECT provider, agent, metric, row, n, c, total - n - not_applicable AS errored,
       not_applicable, mean, std, scores
FROM per_row WHERE c > 0 AND c < n
ORDER BY provider, agent, metric, row LIMIT $listed
"""


def _variability(
    con: duckdb.DuckDBPyConnection, repetitions: int, max_listed: int
) -> tuple[list[VariabilityRow], list[FlakyItem], int]:
    con.execute(_PER_ROW_SQL)
    con.execute(_PER_METRIC_SQL, {"repetitions": repetitions})
    for function in (pass_at_k, pass_hat_k):
        con.create_function(function.__name__, function, ["BIGINT"] * 3, "DOUBLE")
    out = [VariabilityRow(**r) for r in records(con, _VARIABILITY_SQL)]
    flaky = [
        FlakyItem(
            r.pop("provider"), r.pop("agent"), r.pop("metric"), r.pop("row"), RepetitionStats(**r)
        )
        for r in records(con, _FLAKY_SQL, {"listed": max_listed})
    ]
    con.execute("DROP TABLE per_row; DROP TABLE per_metric")  # a row's worth per dataset row
    return out, flaky, sum(v.flaky for v in out)


_PAIRS_SQL = """
CREATE TEMP TABLE pairs AS
WITH v AS (
    SELECT s._pos, s.agent, s.item_id, s.row, s.repetition, s.metric, s.status = 'pass' AS passed,
           coalesce(k.kind, 'other') AS kind
    FROM {scored} s LEFT JOIN kinds k ON s.provider = k.provider AND s.metric = k.metric
    WHERE s.status IN ('pass', 'fail')
)
SELECT c._pos AS check_pos, j._pos AS judge_pos, c.agent, c.item_id, c.row, c.repetition,
       c.metric AS "check", c.passed AS check_passed, j.metric AS judge, j.passed AS judge_passed
FROM v c JOIN v j ON c.agent = j.agent AND c.item_id = j.item_id
WHERE c.kind = 'check' AND j.kind = 'judge'
"""
"""Each check verdict with every judge verdict of its item (same agent and item id)."""

_DISAGREEMENTS_SQL = """
WITH listed AS (
    SELECT agent, "check", judge,
           list(struct_pack(agent, item_id, row, repetition, "check", check_passed, judge,
                            judge_passed, judge_pos) ORDER BY check_pos, judge_pos) AS examples
    FROM (SELECT * FROM pairs WHERE check_passed <> judge_passed
          QUALIFY row_number() OVER (PARTITION BY agent, "check", judge
                                     ORDER BY check_pos, judge_pos) <= $listed)
    GROUP BY ALL
)
SELECT agent, "check", judge, count(*) AS pairs,
       count(*) FILTER (WHERE check_passed AND NOT judge_passed) AS check_pass_judge_fail,
       count(*) FILTER (WHERE judge_passed AND NOT check_passed) AS check_fail_judge_pass,
       count(*) FILTER (WHERE check_passed = judge_passed) / count(*) AS agreement,
       coalesce(any_value(examples), []) AS examples
FROM pairs LEFT JOIN listed USING (agent, "check", judge)
GROUP BY agent, "check", judge ORDER BY agent, "check", judge
"""
"""Per (agent, check, judge): the pairs, the disagreements each way, the agreement, and the first
``$listed`` disagreeing pairs in file order."""


def query_disagreements(
    con: duckdb.DuckDBPyConnection,
    kinds: Mapping[tuple[str, str], MetricKind],
    max_examples: int,
    *,
    scored: str = "scored",
    run_dir: Any = None,
    filesystem: Any = None,
) -> list[Disagreement]:
    """Per agent, check metric and judge metric of the table ``scored`` of ``con``
    (``attach_scored``'s columns): items (same agent and item id) where the check passed and the
    judge failed, and the reverse. Only verdicts (pass/fail) count; the examples are the first
    ``max_examples`` disagreeing pairs in file order, each with its judge's reason when
    ``run_dir`` is given (read from the judge's row of scores.parquet)."""
    if not {"check", "judge"} <= set(kinds.values()):
        return []
    con.execute("CREATE TEMP TABLE kinds (provider VARCHAR, metric VARCHAR, kind VARCHAR)")
    con.executemany("INSERT INTO kinds VALUES (?, ?, ?)", [(*k, v) for k, v in kinds.items()])
    con.execute(_PAIRS_SQL.format(scored=scored))
    found = records(con, _DISAGREEMENTS_SQL, {"listed": max(max_examples, 0)})
    con.execute("DROP TABLE pairs; DROP TABLE kinds")
    judged = [x.pop("judge_pos") for g in found for x in g["examples"]]
    reasons = iter(
        read_rows(run_dir, "scores", judged, columns=["reason"], filesystem=filesystem)
        if run_dir is not None
        else [{"reason": None}] * len(judged)
    )
    for g in found:
        g["examples"] = [
            DisagreementItem(**x, judge_reason=next(reasons)["reason"]) for x in g["examples"]
        ]
    return [Disagreement(**g) for g in found]


# -- drill-down -----------------------------------------------------------------------------------


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _dump(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


MAX_TEXT = 4_000
"""Characters of one text (a message, a reason, the query) the report shows; the rest is cut, with
its length and where the whole text is."""
MAX_MESSAGES = 60
"""Messages of one item's transcript the report shows."""
MAX_DRILL_DOWN_TEXT = 6_000_000
"""Characters of text the whole drill-down may hold: the report's size is bounded however large
the run's texts are (items past it are left out, and counted)."""


def _cut(text: str | None, where: str = "items.parquet") -> str | None:
    """``text`` up to MAX_TEXT characters; a longer one ends with how long it was and where the
    whole of it is."""
    if text is None or len(text) <= MAX_TEXT:
        return text
    return (
        f"{text[:MAX_TEXT]}… [cut: {len(text):,} characters in all; the whole text is in {where}]"
    )


def _message_views(conversation: str | None) -> list[MessageView]:
    """An item's conversation (items.parquet's JSON) as the drill-down shows it: texts, tool
    calls and results, each cut at MAX_TEXT characters, at most MAX_MESSAGES messages."""
    data = _loads(conversation)
    if not isinstance(data, list):
        return []
    out: list[MessageView] = []
    hidden = max(0, len(data) - MAX_MESSAGES)
    for message in data[:MAX_MESSAGES]:
        if not isinstance(message, dict):
            out.append(MessageView("?", None, [MessagePart("other", "", _dump(message))]))
            continue
        parts: list[MessagePart] = []
        for content in message.get("contents") or []:
            kind = content.get("type") if isinstance(content, dict) else None
            if kind == "text":
                part = MessagePart("text", "", str(content.get("text") or ""))
            elif kind == "function_call":
                title = f"{content.get('name')} (call {content.get('call_id')})"
                part = MessagePart("call", title, _dump(content.get("arguments")))
            elif kind == "function_result":
                title = f"result of call {content.get('call_id')}"
                part = MessagePart("result", title, _dump(content.get("result")))
            else:
                part = MessagePart("other", str(kind), _dump(content))
            part.body = _cut(part.body) or ""
            parts.append(part)
        out.append(MessageView(str(message.get("role")), message.get("author_name"), parts))
    if hidden:
        note = MessagePart(
            "other", "cut", f"{hidden} more messages; the whole transcript is in items.parquet"
        )
        out.append(MessageView("…", None, [note]))
    return out


_AS_IS = ("provider", "metric", "evaluator", "status", "score", "threshold", "label", "rating")
"""The columns of scores.parquet a ScoreView shows as they are."""


def _score_view(r: dict[str, Any]) -> ScoreView:
    """One scores.parquet row as the drill-down shows it (an item's error on its no-metric row)."""
    item_error = not r["metric"]
    return ScoreView(
        **{name: r[name] for name in _AS_IS},
        reason=_cut(r["reason"], "scores.parquet"),
        error_code=r["error_code"] or (r["item_error_code"] if item_error else None),
        error_message=_cut(
            r["error_message"] or (r["item_error_message"] if item_error else None),
            "scores.parquet",
        ),
        diagnostics=[
            (str(d.get("severity")), _cut(str(d.get("message")), "scores.parquet") or "")
            for d in _loads(r["diagnostics"]) or []
            if isinstance(d, dict)
        ],
        dimensions=[d for d in _loads(r["dimensions"]) or [] if isinstance(d, dict)],
    )


def _text_size(detail: ItemDetail) -> int:
    """About how many characters of text an item adds to the report."""
    size = sum(len(t or "") for t in (detail.query, detail.response, detail.expected_output))
    size += sum(len(p.body) for m in detail.messages for p in m.parts)
    return size + sum(len(s.reason or "") + len(s.error_message or "") for s in detail.scores)


def item_detail(
    index: Mapping[str, Any],
    item: Mapping[str, Any],
    scores: Sequence[Mapping[str, Any]],
    *,
    whole: bool = False,
) -> ItemDetail:
    """One item as the drill-down shows it.

    Args:
        index: the item's agent, item_id, row, repetition and verdict (from a query).
        item: its items.parquet row (empty when items.parquet has none: a provider scored an
            item it was not given).
        scores: its scores.parquet rows, by provider and score (the first holds the item's
            error and texts when items.parquet has no row).
        whole: the item's own texts uncut (the view's item page); the report cuts each at
            MAX_TEXT characters.
    """
    first = scores[0] if scores else {}
    text = (lambda t: t) if whole else _cut

    def either(name: str, fallback: str) -> str | None:
        value = item.get(name)
        return text(value if value is not None else first.get(fallback))

    return ItemDetail(
        **{name: index[name] for name in ("agent", "item_id", "row", "repetition", "verdict")},
        query=either("query", "input_text"),
        response=either("response", "output_text"),
        expected_output=text(item.get("expected_output")),
        context=text(item.get("context")),
        error_code=item.get("error_code") or first.get("item_error_code"),
        error_message=text(item.get("error_message") or first.get("item_error_message")),
        messages=_message_views(item.get("conversation")),
        scores=[_score_view(dict(r)) for r in scores],
    )


VERDICT_RANK_SQL = (
    "CASE item_status WHEN 'pass' THEN 0 WHEN 'fail' THEN 1 WHEN 'error' THEN 2 ELSE 3 END"
)
"""How bad an item status is: an item's verdict is its worst status over its scores' rows."""

_VERDICT_SQL = f"""
CREATE TEMP TABLE verdicts AS
SELECT agent, item_id, min(item_index) AS item_index, min(_pos) AS first,
       coalesce(arg_max(item_status, {VERDICT_RANK_SQL}), 'pass') AS verdict
FROM scores GROUP BY agent, item_id
"""
"""Each item (agent × item) scores.parquet has: its verdict (its rows' worst item status,
"pass" when none has one), its index and its first row."""

_DRILL_DOWN_SQL = f"""
WITH chosen AS (
    SELECT v.*, row_number() OVER (
               ORDER BY verdict = 'pass', coalesce(a.rank, 99), item_index, first) AS n
    FROM verdicts v LEFT JOIN agent_rank a USING (agent)
    ORDER BY n LIMIT $max_items
), held AS (
    SELECT agent, item_id, min(_pos) AS item_pos, arg_min(row, _pos) AS row,
           arg_min(repetition, _pos) AS repetition
    FROM ({ITEM_ROWS_SQL}) SEMI JOIN chosen USING (agent, item_id) GROUP BY agent, item_id
), score_rows AS (
    SELECT agent, item_id, list(_pos ORDER BY provider_index, coalesce(score_index, -1), _pos)
               AS score_pos
    FROM scores SEMI JOIN chosen USING (agent, item_id) GROUP BY agent, item_id
)
SELECT c.agent, c.item_id, c.verdict, h.item_pos, coalesce(h.row, c.item_id) AS row,
       coalesce(h.repetition, 0) AS repetition, s.score_pos
FROM chosen c LEFT JOIN held h USING (agent, item_id) LEFT JOIN score_rows s USING (agent, item_id)
ORDER BY c.n
"""
"""The first ``max_items`` items: those not passed first, then by agent (the summary's order),
item index and first row; with where each one's items.parquet row (its first) and
scores.parquet rows (by provider and score) are, its dataset row and repetition."""


def _drill_down(
    con: duckdb.DuckDBPyConnection, agent_order: Mapping[str, int], max_items: int
) -> tuple[list[dict[str, Any]], int, int]:
    """The items to show (where their rows are): those not passed by every provider first, then
    the others, up to max_items; with the number of items and of items not passed."""
    con.execute(_VERDICT_SQL)
    [(total, not_passed)] = con.execute(
        "SELECT count(*), count(*) FILTER (verdict <> 'pass') FROM verdicts"
    ).fetchall()
    if max_items == 0:  # only the counts (the view pages items itself)
        return [], total, not_passed
    con.execute("CREATE TEMP TABLE agent_rank (agent VARCHAR, rank INTEGER)")
    con.executemany("INSERT INTO agent_rank VALUES (?, ?)", list(agent_order.items()))
    return records(con, _DRILL_DOWN_SQL, {"max_items": max_items}), total, not_passed


def _details(run_dir: Any, filesystem: Any, chosen: Sequence[dict[str, Any]]) -> list[ItemDetail]:
    """The chosen items with their rows read back, until MAX_DRILL_DOWN_TEXT is spent."""
    held = [c["item_pos"] for c in chosen if c["item_pos"] is not None]
    items = iter(read_rows(run_dir, "items", held, filesystem=filesystem))
    at = [p for c in chosen for p in c["score_pos"]]
    scores = iter(read_rows(run_dir, "scores", at, filesystem=filesystem))
    details: list[ItemDetail] = []
    budget = MAX_DRILL_DOWN_TEXT
    for c in chosen:
        if budget <= 0:
            break  # the rest are counted as omitted
        item = next(items) if c["item_pos"] is not None else {}
        detail = item_detail(c, item, [next(scores) for _ in c["score_pos"]])
        budget -= _text_size(detail)
        details.append(detail)
    return details


# -- the whole report -----------------------------------------------------------------------------


_TOTALS_SQL = """
SELECT count(*) AS calls,
       count(*) FILTER (status = 'error') AS calls_errored,
       count(*) FILTER (cached) AS calls_cached,
       CAST(sum(total_tokens) AS BIGINT) AS total_tokens,
       quantile_cont(latency_s, 0.5) AS latency_p50,
       quantile_cont(latency_s, 0.95) AS latency_p95
FROM runs
"""
"""The target calls of runs.parquet: how many, errored, reused, their tokens and latency."""


def load_report_data(
    run_dir: str | os.PathLike[str],
    *,
    max_items: int = 200,
    max_listed: int = 200,
    filesystem: Any = None,
) -> RunReport:
    """Read a finished run directory into a RunReport.

    Args:
        run_dir: the run directory (a path, a URI, or a path in ``filesystem``).
        max_items: items in the drill-down: those not passed first, then the others.
        max_listed: flaky rows listed (all are counted).
        filesystem: a pyarrow or fsspec filesystem, as for every artifact reader.

    Raises:
        ArtifactError: the directory is not a finished run (no manifest, a missing file).
        SchemaVersionError: the run was written by a newer evalpipe.
    """
    if max_items < 0 or max_listed < 0:
        raise ValueError("max_items and max_listed must be >= 0")
    manifest = read_manifest(run_dir, filesystem=filesystem)
    suite = manifest_part(manifest, "suite")
    con = run_tables(
        run_dir,
        {**_READ, "runs": ["status", "cached", "latency_s", "total_tokens"]},
        filesystem=filesystem,
    )
    try:
        con.execute(f"CREATE TEMP TABLE scored AS {_SCORED_SQL}")
        [totals] = records(con, _TOTALS_SQL)
        results, metrics, agent_order = _metric_rows(con, run_dir, filesystem)
        counts = con.execute(
            "SELECT agent, count(*) FROM items GROUP BY agent ORDER BY min(_pos)"
        ).fetchall()
        for agent, _ in counts:
            agent_order.setdefault(agent, len(agent_order))
        items_per_agent = sorted(counts, key=lambda a: (a[0] != OVERALL, agent_order.get(a[0], 99)))
        repetitions = suite.get("repetitions")
        if not isinstance(repetitions, int):
            [(most,)] = con.execute("SELECT max(repetition) FROM scored").fetchall()
            repetitions = (most or 0) + 1
        variability, flaky, flaky_total = _variability(con, repetitions, max_listed)
        order = {(m.provider, m.agent, m.metric): i for i, m in enumerate(metrics)}
        variability.sort(key=lambda v: order.get((v.provider, v.agent, v.metric), len(order)))
        found = query_disagreements(
            con,
            metric_kinds(con),
            max(1, min(20, max_listed)),
            run_dir=run_dir,
            filesystem=filesystem,
        )
        chosen, total, not_passed = _drill_down(con, agent_order, max_items)
    finally:
        con.close()  # before the listed rows are read: DuckDB's memory goes back first
    details = _details(run_dir, filesystem, chosen)
    calls = manifest.get("calls")
    if not isinstance(calls, dict):  # a run written before the manifest counted its calls
        calls = {
            "made": totals["calls"] - totals["calls_cached"],
            "reused": totals["calls_cached"],
            "errored": totals["calls_errored"],
        }
    return RunReport(
        run_dir=str(run_dir),
        manifest=manifest,
        suite_name=str(suite.get("name") or manifest.get("name") or os.path.basename(str(run_dir))),
        description=suite.get("description"),
        target=manifest.get("target") or suite.get("target"),
        finished_at=manifest_part(manifest, "timings").get("finished_at"),
        **totals,
        calls_text=CallTally.text(calls),
        items_per_agent=items_per_agent,
        results=results,
        metrics=metrics,
        variability=variability,
        flaky=flaky,
        flaky_total=flaky_total,
        disagreements=found,
        items=details,
        items_total=total,
        items_not_passed=not_passed,
        max_items=max_items,
        gate=manifest["gate"] if isinstance(manifest.get("gate"), dict) else None,
        **_spend_and_concurrency(manifest),
    )


def _spend_and_concurrency(manifest: dict[str, Any]) -> dict[str, Any]:
    """The report's spend and limit history from manifest.json (absent in runs before them; a
    part that is not what evalpipe writes is left out, not shown half)."""
    out: dict[str, Any] = {}  # what is left out keeps RunReport's default
    spend = manifest.get("spend")
    if isinstance(spend, dict):
        try:
            text = spend_text(spend)
            shown = {**Spend.from_dict(spend).as_dict(), "budget": spend.get("budget")}
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        else:
            out["spend"], out["spend_text"] = shown, text
    changes = manifest_part(manifest, "concurrency").get("changes")
    if isinstance(changes, list):
        keys = ("at", "endpoint", "model", "before", "limit", "reason", "in_flight")
        kept = [c for c in changes if isinstance(c, dict) and all(k in c for k in keys)]
        try:
            notes = limit_notes({"changes": kept})
        except (ValueError, KeyError, TypeError):
            kept, notes = [], []
        out["limit_changes"], out["limit_notes"] = kept, notes
    return out
