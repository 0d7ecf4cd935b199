"""Read a finished run directory into what the report shows.

Aggregates come from whole columns with pyarrow (group-bys and joins), never from one Python
object per item: only the capped drill-down and the listed flaky and disagreeing items become
Python objects, so a 100,000-item run reads in seconds with memory bounded by a few columns.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import duckdb
import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]

from evalpipe._internal.adaptive import limit_notes
from evalpipe._internal.arrow import numpy_of
from evalpipe.artifacts import iter_batches, read_item_rows, read_manifest, read_table
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
    "FOUNDRY_PROVIDER",
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
    "classify_metric",
    "disagreements",
    "load_report_data",
    "message_views",
    "row_key",
    "score_view",
]

MetricKind = Literal["judge", "check", "other"]
"""judge: an LLM judge's metric (JudgeEvaluator, Microsoft Foundry); check: a local check run
in-process (LocalEvaluator); other: any other provider."""

FOUNDRY_PROVIDER = "Microsoft Foundry"
_SEP = "\x1f"


def classify_metric(provider: str, has_rating: bool) -> MetricKind:
    """Judge or check, from what scores.parquet records.

    A JudgeEvaluator sets ``rating`` on every score it returns (also on errored and
    not-applicable ones) and no local check does; Foundry's provider is named "Microsoft
    Foundry" (with an agent scope appended when the suite scopes it: "Microsoft Foundry
    (researcher)"); LocalEvaluator's provider is "Local" (or "Local (scope)").
    """
    if has_rating or provider.startswith(FOUNDRY_PROVIDER):
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
    histogram: list[Bin] = field(default_factory=list)

    @property
    def denominator(self) -> int:
        """passed + failed."""
        return self.passed + self.failed


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
    examples: list[DisagreementItem] = field(default_factory=list)

    @property
    def agreement(self) -> float | None:
        """Share of pairs where they agree."""
        if not self.pairs:
            return None
        return 1.0 - (self.check_pass_judge_fail + self.check_fail_judge_pass) / self.pairs


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


# -- column helpers -------------------------------------------------------------------------------


def row_key(items: Any) -> Any:
    """The dataset row of each item: its row_id, else "query N"."""
    fallback = pc.binary_join_element_wise(
        "query ", pc.cast(pc.fill_null(items["query_index"], -1), pa.string()), ""
    )
    return pc.if_else(pc.is_null(items["row_id"]), fallback, items["row_id"])


_SCORED_SQL = """
SELECT s.provider, s.provider_index, s.agent, s.item_id, s.item_status, s.metric, s.score,
       s.status, s.rating,
       CASE WHEN i.agent IS NULL THEN s.item_id
            WHEN i.row_id IS NOT NULL THEN i.row_id
            ELSE 'query ' || CAST(coalesce(i.query_index, -1) AS VARCHAR) END AS row,
       coalesce(i.repetition, 0) AS repetition, i.item_index
FROM scores s LEFT JOIN items i ON s.agent = i.agent AND s.item_id = i.item_id
WHERE s.metric IS NOT NULL
ORDER BY s._spos
"""
"""Each metric row of scores.parquet with its item's dataset row (``row_id``, else "query N";
an item missing from items.parquet keeps its id) and repetition, in file order."""


_SCORED_COLUMNS = {
    "scores": [
        "provider",
        "provider_index",
        "agent",
        "item_id",
        "item_status",
        "metric",
        "score",
        "status",
        "rating",
    ],
    "items": ["agent", "item_id", "row_id", "query_index", "repetition", "item_index"],
}
"""The columns ``_SCORED_SQL`` reads (read with ``read_table``: pyarrow.dataset imports pandas)."""


def scored_rows(run_dir: Any, *, filesystem: Any = None) -> Any:
    """scores.parquet's metric rows (metric not null) joined with each item's dataset row and
    repetition: provider, provider_index, agent, item_id, item_status, metric, score, status,
    rating, row, repetition, item_index (a DuckDB query over the run's files)."""
    con = duckdb.connect(":memory:")
    try:
        scores = read_table(
            run_dir, "scores", columns=_SCORED_COLUMNS["scores"], filesystem=filesystem
        )
        con.register(
            "scores",
            scores.append_column("_spos", pa.array(np.arange(len(scores), dtype=np.int64))),
        )
        con.register(
            "items",
            read_table(run_dir, "items", columns=_SCORED_COLUMNS["items"], filesystem=filesystem),
        )
        return con.sql(_SCORED_SQL).to_arrow_table().combine_chunks()
    finally:
        con.close()


def _kinds(scored: Any) -> dict[tuple[str, str], MetricKind]:
    grouped = scored.group_by(["provider", "metric"]).aggregate([("rating", "count")])
    return {
        (r["provider"], r["metric"]): classify_metric(r["provider"], r["rating_count"] > 0)
        for r in grouped.to_pylist()
    }


# -- the scores as integer codes ------------------------------------------------------------------


class _Vocab:
    """Strings (or None) to dense int32 codes, in the order first seen."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._codes: dict[Any, int] = {}

    def code(self, value: Any) -> int:
        found = self._codes.get(value)
        if found is None:
            found = self._codes[value] = len(self.values)
            self.values.append(value)
        return found

    def encode(self, column: Any) -> np.ndarray:
        """The codes of an Arrow string column (a null is a value of its own)."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        encoded = pc.dictionary_encode(column, null_encoding="encode")
        mapping = np.array(
            [self.code(v) for v in encoded.dictionary.to_pylist()] or [0], dtype=np.int32
        )
        codes: np.ndarray = mapping[numpy_of(encoded.indices, np.int64)]
        return codes


_CODED_COLUMNS = [
    "provider",
    "agent",
    "item_id",
    "item_index",
    "item_status",
    "metric",
    "score",
    "status",
    "rating",
]


@dataclass(slots=True)
class _Coded:
    """scores.parquet for the report as integer codes, never one Python object per row.

    ``keys`` codes each item (agent, item_id); the ``item_*`` arrays hold every score row (the
    drill-down's heads, no-metric rows included), the ``m_*`` arrays the metric rows joined with
    their item's dataset row and repetition as ``scored_rows`` joins them (a row missing from
    items.parquet keeps its item id as its row; one that matches several items is repeated)."""

    providers: _Vocab
    agents: _Vocab
    metrics: _Vocab
    statuses: _Vocab
    """``status`` and ``item_status`` values."""
    keys: Any
    """An item's key string (agent, the separator, item_id) by its code."""
    rows: Any
    """A dataset row's string by its code."""
    item_key: np.ndarray
    item_agent: np.ndarray
    item_index: np.ndarray
    item_status: np.ndarray
    m_provider: np.ndarray
    m_agent: np.ndarray
    m_key: np.ndarray
    m_metric: np.ndarray
    m_status: np.ndarray
    m_score: np.ndarray
    m_scored: np.ndarray
    """The score is not null (NaN is a score)."""
    m_rated: np.ndarray
    m_row: np.ndarray
    m_repetition: np.ndarray

    def status_code(self, status: str) -> int:
        """The code of a status, -2 (no row) when no row has it."""
        return self.statuses._codes.get(status, -2)

    def key_pair(self, code: int) -> tuple[str, str]:
        """The (agent, item_id) of an item code."""
        agent, _, item_id = str(self.keys[code].as_py()).partition(_SEP)
        return agent, item_id


def _coded_scores(run_dir: Any, filesystem: Any) -> _Coded:
    """Read scores.parquet batch by batch into codes; items.parquet's keys once."""
    items = read_table(
        run_dir,
        "items",
        columns=["agent", "item_id", "row_id", "query_index", "repetition"],
        filesystem=filesystem,
    )
    item_keys = pc.binary_join_element_wise(items["agent"], items["item_id"], _SEP)
    keys_encoded = pc.dictionary_encode(item_keys.combine_chunks(), null_encoding="mask")
    dictionary = keys_encoded.dictionary
    # items holding each key code (an item without an id holds none), in file order
    item_code = numpy_of(pc.fill_null(keys_encoded.indices, -1), np.int64)
    holders = np.flatnonzero(item_code >= 0)
    holders = holders[np.argsort(item_code[holders], kind="stable")]
    held = np.bincount(item_code[item_code >= 0], minlength=len(dictionary))
    first_holder = np.concatenate([[0], np.cumsum(held)[:-1]]) if len(held) else held
    rows_encoded = pc.dictionary_encode(row_key(items).combine_chunks())
    item_row = numpy_of(rows_encoded.indices, np.int32)
    row_values: list[Any] = [rows_encoded.dictionary]
    n_rows = len(rows_encoded.dictionary)
    item_repetition = numpy_of(pc.fill_null(items["repetition"], 0), np.int32)
    del items, item_keys, keys_encoded, rows_encoded

    providers, agents, metrics, statuses = _Vocab(), _Vocab(), _Vocab(), _Vocab()
    extra_keys: dict[str, int] = {}
    parts: dict[str, list[np.ndarray]] = {}

    def keep(name: str, values: np.ndarray) -> None:
        parts.setdefault(name, []).append(values)

    for batch in iter_batches(run_dir, "scores", columns=_CODED_COLUMNS, filesystem=filesystem):
        key_text = pc.binary_join_element_wise(batch["agent"], batch["item_id"], _SEP)
        found = pc.index_in(key_text, value_set=dictionary)
        key = numpy_of(pc.fill_null(found, -1), np.int64)
        missing = np.flatnonzero(key < 0)
        if missing.size:  # a provider scored items it was not given
            texts = key_text.take(pa.array(missing)).to_pylist()
            key[missing] = [
                extra_keys.setdefault(t, len(dictionary) + len(extra_keys)) for t in texts
            ]
        agent = agents.encode(batch["agent"])
        keep("item_key", key.astype(np.int32))
        keep("item_agent", agent)
        keep("item_index", numpy_of(batch["item_index"], np.int64))
        keep("item_status", statuses.encode(batch["item_status"]))
        has_metric = numpy_of(pc.is_valid(batch["metric"]), bool)
        at = np.flatnonzero(has_metric)
        rows = batch.filter(pa.array(has_metric))
        score = rows["score"]
        keep("m_provider", providers.encode(rows["provider"]))
        keep("m_agent", agent[at])
        keep("m_key", key[at].astype(np.int32))
        keep("m_metric", metrics.encode(rows["metric"]))
        keep("m_status", statuses.encode(rows["status"]))
        keep("m_score", numpy_of(score, float))
        keep("m_scored", numpy_of(pc.is_valid(score), bool))
        keep("m_rated", numpy_of(pc.is_valid(rows["rating"]), bool))

    def joined(name: str, dtype: Any, order: np.ndarray | None = None) -> np.ndarray:
        chunks = parts.pop(name, None)
        whole = np.concatenate(chunks).astype(dtype, copy=False) if chunks else np.empty(0, dtype)
        return whole if order is None else whole[order]

    m_key = joined("m_key", np.int32)
    # the join: each metric row once per item holding its key (once, without a row, for none)
    matched = m_key < len(dictionary)
    times = np.ones(len(m_key), dtype=np.int64)
    times[matched] = held[m_key[matched]]
    order = np.repeat(np.arange(len(m_key)), times) if bool((times != 1).any()) else None
    if order is None:
        hit = matched
        holder = holders[first_holder[m_key[hit]]]
    else:  # an item id that items.parquet holds more than once (for this agent)
        within = np.arange(len(order)) - np.repeat(np.cumsum(times) - times, times)
        hit = matched[order]
        holder = holders[first_holder[m_key[order][hit]] + within[hit]]
        m_key = m_key[order]
    del times, matched
    m_row = np.full(len(m_key), -1, dtype=np.int32)
    m_row[hit] = item_row[holder]
    m_repetition = np.zeros(len(m_key), dtype=np.int32)
    m_repetition[hit] = item_repetition[holder]
    del holder, item_row, item_repetition
    if extra_keys:
        # a row missing from items.parquet is named by its item id (a row string of its own)
        ids = [text.partition(_SEP)[2] for text in extra_keys]
        known = pc.index_in(pa.array(ids, pa.string()), value_set=row_values[0]).to_pylist()
        new: dict[str, int] = {}
        extra_row = np.array(
            [
                code if code is not None else new.setdefault(item_id, n_rows + len(new))
                for item_id, code in zip(ids, known, strict=True)
            ],
            dtype=np.int32,
        )
        lost = ~hit
        m_row[lost] = extra_row[m_key[lost] - len(dictionary)]
        row_values.append(pa.array(list(new), pa.string()))
    return _Coded(
        providers=providers,
        agents=agents,
        metrics=metrics,
        statuses=statuses,
        keys=pa.concat_arrays([dictionary, pa.array(list(extra_keys), pa.string())]),
        rows=pa.concat_arrays(row_values),
        item_key=joined("item_key", np.int32),
        item_agent=joined("item_agent", np.int32),
        item_index=joined("item_index", np.int64),
        item_status=joined("item_status", np.int32),
        m_provider=joined("m_provider", np.int32, order),
        m_agent=joined("m_agent", np.int32, order),
        m_key=m_key,
        m_metric=joined("m_metric", np.int32, order),
        m_status=joined("m_status", np.int32, order),
        m_score=joined("m_score", float, order),
        m_scored=joined("m_scored", bool, order),
        m_rated=joined("m_rated", bool, order),
        m_row=m_row,
        m_repetition=m_repetition,
    )


def _groups(*codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by a tuple of code columns: each group's first row and each row's group,
    the groups numbered in the order their first row comes."""
    if not len(codes[0]):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    combined = np.zeros(len(codes[0]), dtype=np.int64)
    for column in codes:
        width = int(column.max()) + 2  # -1 (none) is a code too
        combined = combined * width + (column.astype(np.int64) + 1)
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.reshape(-1)]


def _coded_kinds(c: _Coded) -> dict[tuple[str, str], MetricKind]:
    first, group = _groups(c.m_provider, c.m_metric)
    rated = np.bincount(group, weights=c.m_rated, minlength=len(first)) > 0
    out: dict[tuple[str, str], MetricKind] = {}
    for row, has_rating in zip(first.tolist(), rated.tolist(), strict=True):
        provider = c.providers.values[c.m_provider[row]]
        out[(provider, c.metrics.values[c.m_metric[row]])] = classify_metric(provider, has_rating)
    return out


# -- aggregates -----------------------------------------------------------------------------------


def _histogram(values: np.ndarray) -> list[Bin]:
    """Ten bins over [0, 1] for scores in it; one bin per value for whole-number scores over a
    short range (a judge's 1-5); else ten bins between the smallest and the largest score."""
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


def _metric_rows(
    run_dir: Any, filesystem: Any, coded: _Coded, kinds: dict[tuple[str, str], MetricKind]
) -> tuple[list[ResultRow], list[MetricRow], dict[str, int]]:
    summary = read_table(run_dir, "summary", filesystem=filesystem)
    rows = sorted(
        summary.to_pylist(),
        key=lambda r: (r["provider_index"], r["agent_index"], r["metric"] or ""),
    )
    agent_order: dict[str, int] = {}
    for r in rows:
        agent_order.setdefault(r["agent"], r["agent_index"])
    # each provider x agent x metric's non-null scores, in file order
    scored = np.flatnonzero(coded.m_scored)
    first, group = _groups(coded.m_provider[scored], coded.m_agent[scored], coded.m_metric[scored])
    by_group = np.argsort(group, kind="stable")
    bounds = np.cumsum(np.bincount(group, minlength=len(first)))
    values_of = np.split(coded.m_score[scored][by_group], bounds[:-1]) if len(first) else []
    by_key = {
        (
            coded.providers.values[coded.m_provider[scored[row]]],
            coded.agents.values[coded.m_agent[scored[row]]],
            coded.metrics.values[coded.m_metric[scored[row]]],
        ): values
        for row, values in zip(first.tolist(), values_of, strict=True)
    }
    results: list[ResultRow] = []
    metrics: list[MetricRow] = []
    for r in rows:
        if r["kind"] == "result":
            results.append(
                ResultRow(
                    provider=r["provider"],
                    agent=r["agent"],
                    n=r["n"],
                    passed=r["passed"],
                    failed=r["failed"],
                    errored=r["errored"],
                    pass_rate=wilson_interval(r["passed"], r["passed"] + r["failed"]),
                    status=r["status"],
                    error=r["error"],
                    report_url=r["report_url"],
                )
            )
            continue
        values = by_key.get((r["provider"], r["agent"], r["metric"]), np.empty(0))
        metrics.append(
            MetricRow(
                provider=r["provider"],
                agent=r["agent"],
                metric=r["metric"],
                kind=kinds.get((r["provider"], r["metric"]), "other"),
                n=r["n"],
                passed=r["passed"],
                failed=r["failed"],
                errored=r["errored"],
                not_applicable=r["not_applicable"],
                pass_rate=wilson_interval(r["passed"], r["passed"] + r["failed"]),
                score=bootstrap_mean_interval(values),
                score_std=r["score_std"],
                score_min=r["score_min"],
                score_max=r["score_max"],
                histogram=_histogram(values),
            )
        )
    return results, metrics, agent_order


def _per_row(coded: _Coded) -> Any:
    """Per provider, agent, metric and dataset row (their codes): verdict counts and score spread.

    Counted with numpy on the codes, never one group per row in a hash table: at 100,000 items x
    3 checks the group-by's table was the report's peak. The mean and the standard deviation
    (ddof 1) of a row with several scores are Arrow's group-by's, of those rows only; a row with
    one score has it as its mean (as Arrow's mean: 0.0 + score) and no deviation."""
    first, group = _groups(coded.m_provider, coded.m_agent, coded.m_metric, coded.m_row)
    size = len(first)

    def total(weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(group, weights=weights, minlength=size).astype(np.int64)

    status = coded.m_status
    count = total(coded.m_scored)
    mean = np.zeros(size, dtype=float)
    std = np.zeros(size, dtype=float)
    scored = coded.m_scored
    single = np.flatnonzero(scored & (count[group] == 1))
    mean[group[single]] = 0.0 + coded.m_score[single]
    several = np.flatnonzero(scored & (count[group] > 1))
    if several.size:
        spread = (
            pa.table({"g": pa.array(group[several]), "score": pa.array(coded.m_score[several])})
            .group_by(["g"])
            .aggregate([("score", "mean"), ("score", "stddev", pc.VarianceOptions(ddof=1))])
        )
        at = numpy_of(spread["g"], np.int64)
        mean[at] = numpy_of(spread["score_mean"], float)
        std[at] = numpy_of(spread["score_stddev"], float)
    return pa.table(
        {
            "provider": pa.array(coded.m_provider[first]),
            "agent": pa.array(coded.m_agent[first]),
            "metric": pa.array(coded.m_metric[first]),
            "row": pa.array(coded.m_row[first]),
            "p_sum": pa.array(total(status == coded.status_code("pass"))),
            "f_sum": pa.array(total(status == coded.status_code("fail"))),
            "na_sum": pa.array(total(status == coded.status_code("not_applicable"))),
            "one_sum": pa.array(total()),
            "score_mean": pa.array(mean, mask=count == 0),
            "score_stddev": pa.array(std, mask=count <= 1),
            "score_count": pa.array(count),
        }
    )


def _at_k(n: np.ndarray, c: np.ndarray, k: int) -> tuple[float | None, float | None]:
    """The mean over rows of pass@k and of pass^k (None for no row): each computed once per
    distinct (n, c), then averaged over the rows in their order."""
    if not n.size:
        return None, None
    pairs, inverse = np.unique(np.stack([n, c]), axis=1, return_inverse=True)
    at = np.array([pass_at_k(int(n_), int(c_), k) for n_, c_ in pairs.T.tolist()])
    hat = np.array([pass_hat_k(int(n_), int(c_), k) for n_, c_ in pairs.T.tolist()])
    inverse = inverse.reshape(-1)
    return float(np.mean(at[inverse])), float(np.mean(hat[inverse]))


def _variability(
    per_row: Any, coded: _Coded, repetitions: int, max_listed: int
) -> tuple[list[VariabilityRow], list[FlakyItem], int]:
    out: list[VariabilityRow] = []
    flaky_items: list[FlakyItem] = []
    flaky_total = 0
    provider_codes = numpy_of(per_row["provider"], np.int64)
    agent_codes = numpy_of(per_row["agent"], np.int64)
    metric_codes = numpy_of(per_row["metric"], np.int64)
    first, group = _groups(provider_codes, agent_codes, metric_codes)
    named = [
        (
            coded.providers.values[provider_codes[row]],
            coded.agents.values[agent_codes[row]],
            coded.metrics.values[metric_codes[row]],
            number,
        )
        for number, row in enumerate(first.tolist())
    ]
    p_all = numpy_of(per_row["p_sum"], np.int64)
    f_all = numpy_of(per_row["f_sum"], np.int64)
    std_all = numpy_of(per_row["score_stddev"], float)
    by_group = np.argsort(group, kind="stable")
    bounds = np.cumsum(np.bincount(group, minlength=len(first)))
    members = np.split(by_group, bounds[:-1]) if len(first) else []
    for provider, agent, metric, number in sorted(named):
        rows_of = members[number]
        c = p_all[rows_of]
        n = c + f_all[rows_of]
        has = n > 0
        k = max(1, min(repetitions, int(n.max()) if n.size else 1))
        at_k = n >= k
        std = std_all[rows_of]
        flaky = has & (c > 0) & (c < n)
        pass_at, pass_hat = _at_k(n[at_k], c[at_k], k)
        out.append(
            VariabilityRow(
                provider=provider,
                agent=agent,
                metric=metric,
                rows=int(has.sum()),
                k=k,
                pass_at_1=float((c[has] / n[has]).mean()) if has.any() else None,
                pass_at_k=pass_at,
                pass_hat_k=pass_hat,
                at_least_1=int((has & (c >= 1)).sum()),
                all_k=int((at_k & (c == n)).sum()),
                rows_at_k=int(at_k.sum()),
                flaky=int(flaky.sum()),
                score_std_mean=float(np.nanmean(std)) if np.any(~np.isnan(std)) else None,
            )
        )
        flaky_total += int(flaky.sum())
        room = max_listed - len(flaky_items)
        if room > 0 and flaky.any():
            listed = per_row.take(pa.array(rows_of[flaky]))
            listed = listed.set_column(
                listed.schema.get_field_index("row"), "row", coded.rows.take(listed["row"])
            )
            chosen = listed.sort_by("row").slice(0, room).to_pylist()
            for r in chosen:
                flaky_items.append(
                    FlakyItem(
                        provider=provider,
                        agent=agent,
                        metric=metric,
                        row=r["row"],
                        stats=RepetitionStats(
                            n=r["p_sum"] + r["f_sum"],
                            c=r["p_sum"],
                            errored=r["one_sum"] - r["p_sum"] - r["f_sum"] - r["na_sum"],
                            not_applicable=r["na_sum"],
                            mean=r["score_mean"],
                            std=r["score_stddev"],
                            scores=r["score_count"],
                        ),
                    )
                )
    return out, flaky_items, flaky_total


_PAIRS_SQL = """
CREATE TEMP TABLE pairs AS
WITH v AS (
    SELECT s._pos, s.agent, s.item_id, s.row, s.repetition, s.metric, s.status = 'pass' AS passed,
           coalesce(k.kind, 'other') AS kind
    FROM scored s LEFT JOIN kinds k ON s.provider = k.provider AND s.metric = k.metric
    WHERE s.status IN ('pass', 'fail')
)
SELECT c._pos AS check_pos, j._pos AS judge_pos, c.agent, c.item_id, c.row, c.repetition,
       c.metric AS "check", c.passed AS check_passed, j.metric AS judge, j.passed AS judge_passed
FROM v c JOIN v j ON c.agent = j.agent AND c.item_id = j.item_id
WHERE c.kind = 'check' AND j.kind = 'judge'
"""
"""Each check verdict with every judge verdict of its item (same agent and item id)."""

_DISAGREEMENT_COUNTS_SQL = """
SELECT agent, "check", judge, count(*) AS pairs,
       count(*) FILTER (WHERE check_passed AND NOT judge_passed) AS check_pass_judge_fail,
       count(*) FILTER (WHERE judge_passed AND NOT check_passed) AS check_fail_judge_pass
FROM pairs GROUP BY ALL
"""

_DISAGREEMENT_EXAMPLES_SQL = """
SELECT agent, item_id, row, repetition, "check", check_passed, judge, judge_passed
FROM pairs WHERE check_passed <> judge_passed
QUALIFY row_number() OVER (PARTITION BY agent, "check", judge ORDER BY check_pos, judge_pos) <= ?
ORDER BY check_pos, judge_pos
"""
"""The first ``max_examples`` disagreeing pairs of each (agent, check, judge), in file order."""


def disagreements(
    scored: Any,
    kinds: dict[tuple[str, str], MetricKind] | None = None,
    *,
    max_examples: int = 20,
    reasons: dict[tuple[str, str, str], str | None] | None = None,
) -> list[Disagreement]:
    """Per agent, check metric and judge metric: items (same agent and item id) where the check
    passed and the judge failed, and the reverse. Only verdicts (pass/fail) count; the examples
    are the first disagreeing pairs in file order (a DuckDB query over ``scored_rows``)."""
    kinds = kinds if kinds is not None else _kinds(scored)
    if not {"check", "judge"} <= set(kinds.values()):
        return []
    con = duckdb.connect(":memory:")
    try:
        con.register(
            "scored",
            scored.select(
                ["provider", "agent", "item_id", "row", "repetition", "metric", "status"]
            ).append_column("_pos", pa.array(np.arange(len(scored), dtype=np.int64))),
        )
        # typed: with no metric at all the lists are empty, and would have the null type
        con.register(
            "kinds",
            pa.table(
                {
                    "provider": pa.array([p for p, _ in kinds], type=pa.string()),
                    "metric": pa.array([m for _, m in kinds], type=pa.string()),
                    "kind": pa.array(list(kinds.values()), type=pa.string()),
                }
            ),
        )
        con.execute(_PAIRS_SQL)
        counts = _records(con.execute(_DISAGREEMENT_COUNTS_SQL))
        examples = _records(con.execute(_DISAGREEMENT_EXAMPLES_SQL, [max(max_examples, 0)]))
    finally:
        con.close()
    shown: dict[tuple[str, str, str], list[DisagreementItem]] = {}
    for r in examples:
        shown.setdefault((r["agent"], r["check"], r["judge"]), []).append(
            DisagreementItem(
                **r, judge_reason=(reasons or {}).get((r["agent"], r["item_id"], r["judge"]))
            )
        )
    return [
        Disagreement(
            agent=g["agent"],
            check=g["check"],
            judge=g["judge"],
            pairs=int(g["pairs"]),
            check_pass_judge_fail=int(g["check_pass_judge_fail"]),
            check_fail_judge_pass=int(g["check_fail_judge_pass"]),
            examples=shown.get((g["agent"], g["check"], g["judge"]), []),
        )
        for g in sorted(counts, key=lambda g: (g["agent"], g["check"], g["judge"]))
    ]


def _records(cursor: Any) -> list[dict[str, Any]]:
    """A DuckDB result's rows as dicts."""
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


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


def message_views(conversation: str | None) -> list[MessageView]:
    """An item's conversation (items.parquet's JSON) as the drill-down shows it: texts, tool
    calls and results, each cut at MAX_TEXT characters, at most MAX_MESSAGES messages."""
    data = _loads(conversation)
    if not isinstance(data, list):
        return []
    out: list[MessageView] = []
    if len(data) > MAX_MESSAGES:
        hidden = len(data) - MAX_MESSAGES
        data = data[:MAX_MESSAGES]
    else:
        hidden = 0
    for message in data:
        if not isinstance(message, dict):
            out.append(MessageView("?", None, [MessagePart("other", "", _dump(message))]))
            continue
        parts: list[MessagePart] = []
        for content in message.get("contents") or []:
            kind = content.get("type") if isinstance(content, dict) else None
            if kind == "text":
                parts.append(MessagePart("text", "", _cut(str(content.get("text") or "")) or ""))
            elif kind == "function_call":
                parts.append(
                    MessagePart(
                        "call",
                        f"{content.get('name')} (call {content.get('call_id')})",
                        _cut(_dump(content.get("arguments"))) or "",
                    )
                )
            elif kind == "function_result":
                parts.append(
                    MessagePart(
                        "result",
                        f"result of call {content.get('call_id')}",
                        _cut(_dump(content.get("result"))) or "",
                    )
                )
            else:
                parts.append(MessagePart("other", str(kind), _cut(_dump(content)) or ""))
        out.append(MessageView(str(message.get("role")), message.get("author_name"), parts))
    if hidden:
        note = MessagePart(
            "other", "cut", f"{hidden} more messages; the whole transcript is in items.parquet"
        )
        out.append(MessageView("…", None, [note]))
    return out


def score_view(r: dict[str, Any]) -> ScoreView:
    """One scores.parquet row as the drill-down shows it (an item's error on its no-metric row)."""
    diagnostics = _loads(r["diagnostics"]) or []
    dimensions = _loads(r["dimensions"]) or []
    return ScoreView(
        provider=r["provider"],
        metric=r["metric"],
        evaluator=r["evaluator"],
        status=r["status"],
        score=r["score"],
        threshold=r["threshold"],
        label=r["label"],
        rating=r["rating"],
        reason=_cut(r["reason"], "scores.parquet"),
        error_code=r["error_code"] or (None if r["metric"] else r["item_error_code"]),
        error_message=_cut(
            r["error_message"] or (None if r["metric"] else r["item_error_message"]),
            "scores.parquet",
        ),
        diagnostics=[
            (str(d.get("severity")), _cut(str(d.get("message")), "scores.parquet") or "")
            for d in diagnostics
            if isinstance(d, dict)
        ],
        dimensions=[d for d in dimensions if isinstance(d, dict)],
    )


def _text_size(detail: ItemDetail) -> int:
    """About how many characters of text an item adds to the report."""
    size = sum(len(t or "") for t in (detail.query, detail.response, detail.expected_output))
    size += sum(len(p.body) for m in detail.messages for p in m.parts)
    return size + sum(len(s.reason or "") + len(s.error_message or "") for s in detail.scores)


def _key_text(coded: _Coded, code: int) -> str:
    """An item's key string (agent, separator, item id) by its code."""
    return str(coded.keys[code].as_py())


def _key_column(table: Any) -> Any:
    return pc.binary_join_element_wise(table["agent"], pc.fill_null(table["item_id"], ""), _SEP)


_STATUS_RANK = {"pass": 0, "fail": 1, "error": 2, "errored": 2}


def _drill_down(
    run_dir: Any,
    filesystem: Any,
    coded: _Coded,
    agent_order: dict[str, int],
    max_items: int,
) -> tuple[list[ItemDetail], int, int]:
    """The items to show: those not passed by every provider first, then the others, up to
    max_items; returns them with the number of items and of items not passed."""
    heads, of_item = _groups(coded.item_key)  # items in the order scores.parquet first has them
    total = len(heads)
    not_pass = coded.item_status != coded.status_code("pass")
    not_pass &= coded.item_status != coded.statuses._codes.get(None, -2)  # as pc.not_equal
    bad = np.zeros(total, dtype=bool)
    bad[of_item[not_pass]] = True
    not_passed = int(bad.sum())
    if max_items == 0:  # only the counts (the view pages items itself)
        return [], total, not_passed
    index_min = np.full(total, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(index_min, of_item, coded.item_index)
    agent_rank = np.array(
        [agent_order.get(a, 99) for a in coded.agents.values] or [0], dtype=np.int64
    )[coded.item_agent[heads]]
    key_of = coded.item_key[heads]
    if total <= 4 * max_items:

        def verdict(statuses: Sequence[str]) -> str:
            return max(statuses, key=lambda s: _STATUS_RANK.get(s, 3))

        distinct: list[list[str]] = [[] for _ in range(total)]
        for number, code in zip(of_item.tolist(), coded.item_status.tolist(), strict=True):
            status = coded.statuses.values[code]
            if status not in distinct[number]:
                distinct[number].append(status)
        verdicts_of = [verdict(statuses) for statuses in distinct]
        ranked = sorted(
            range(total),
            key=lambda i: (verdicts_of[i] == "pass", int(agent_rank[i]), int(index_min[i])),
        )
        not_passed = sum(v != "pass" for v in verdicts_of)
        chosen = [_key_text(coded, int(key_of[i])) for i in ranked[:max_items]]
        verdicts = {_key_text(coded, int(key_of[i])): verdicts_of[i] for i in range(total)}
    else:
        # many items: rank on the codes, not one Python object per item
        ranked_codes = np.lexsort((np.arange(total), index_min, agent_rank, ~bad))[:max_items]
        chosen = [_key_text(coded, int(key_of[i])) for i in ranked_codes.tolist()]
        verdicts = {
            key: ("fail" if bad[i] else "pass")
            for key, i in zip(chosen, ranked_codes.tolist(), strict=True)
        }
    pairs = [key.partition(_SEP)[::2] for key in chosen]
    item_rows: dict[str, dict[str, Any]] = {}
    for r in read_item_rows(run_dir, "items", pairs, filesystem=filesystem):
        item_rows[f"{r['agent']}{_SEP}{r['item_id']}"] = r
    score_rows: dict[str, list[dict[str, Any]]] = {}
    for r in read_item_rows(run_dir, "scores", pairs, filesystem=filesystem):
        score_rows.setdefault(f"{r['agent']}{_SEP}{r['item_id']}", []).append(r)
    details: list[ItemDetail] = []
    budget = MAX_DRILL_DOWN_TEXT
    for key in chosen:
        if budget <= 0:
            break  # the rest are counted as omitted
        agent, _, item_id = key.partition(_SEP)
        item = item_rows.get(key, {})
        scores = sorted(
            score_rows.get(key, []),
            key=lambda r: (
                r["provider_index"],
                r["score_index"] if r["score_index"] is not None else -1,
            ),
        )
        first = scores[0] if scores else {}
        row = item.get("row_id") or (
            f"query {item['query_index']}" if item.get("query_index") is not None else item_id
        )
        detail = ItemDetail(
            agent=agent,
            item_id=item_id,
            row=row,
            repetition=item.get("repetition") or 0,
            query=_cut(item.get("query", first.get("input_text"))),
            response=_cut(item.get("response", first.get("output_text"))),
            expected_output=_cut(item.get("expected_output")),
            context=_cut(item.get("context")),
            error_code=item.get("error_code") or first.get("item_error_code"),
            error_message=_cut(item.get("error_message") or first.get("item_error_message")),
            messages=message_views(item.get("conversation")),
            scores=[score_view(r) for r in scores],
            verdict=verdicts.get(key, "pass"),
        )
        budget -= _text_size(detail)
        details.append(detail)
    return details, total, not_passed


# -- the whole report -----------------------------------------------------------------------------


def _percentile(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def _judge_reasons(
    run_dir: Any, filesystem: Any, examples: Iterable[DisagreementItem]
) -> dict[tuple[str, str, str], str | None]:
    wanted = {(e.agent, e.item_id, e.judge) for e in examples}
    if not wanted:
        return {}
    keys = pa.array(sorted({f"{a}{_SEP}{i}" for a, i, _ in wanted}), pa.string())
    out: dict[tuple[str, str, str], str | None] = {}
    for batch in iter_batches(
        run_dir,
        "scores",
        columns=["agent", "item_id", "metric", "reason"],
        filesystem=filesystem,
        batch_size=65_536,
    ):
        table = pa.Table.from_batches([batch])
        for r in table.filter(pc.is_in(_key_column(table), keys)).to_pylist():
            key = (r["agent"], r["item_id"], r["metric"])
            if key in wanted:
                out[key] = r["reason"]
    return out


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
    suite = manifest.get("suite") if isinstance(manifest.get("suite"), dict) else {}
    assert isinstance(suite, dict)
    runs = read_table(
        run_dir,
        "runs",
        columns=["status", "cached", "latency_s", "total_tokens"],
        filesystem=filesystem,
    )
    latency = numpy_of(runs["latency_s"].drop_null(), float)
    tokens = pc.sum(runs["total_tokens"]).as_py()
    items = read_table(run_dir, "items", columns=["agent"], filesystem=filesystem)
    counts = items.group_by(["agent"]).aggregate([("agent", "count")]).to_pylist()
    coded = _coded_scores(run_dir, filesystem)
    kinds = _coded_kinds(coded)
    results, metrics, agent_order = _metric_rows(run_dir, filesystem, coded, kinds)
    for r in counts:
        agent_order.setdefault(r["agent"], len(agent_order))
    items_per_agent = sorted(
        ((r["agent"], r["agent_count"]) for r in counts),
        key=lambda a: (a[0] != OVERALL, agent_order.get(a[0], 99)),
    )
    repetitions = suite.get("repetitions") if isinstance(suite.get("repetitions"), int) else None
    if repetitions is None:
        rep = int(coded.m_repetition.max()) if len(coded.m_repetition) else None
        repetitions = (rep or 0) + 1
    variability, flaky, flaky_total = _variability(_per_row(coded), coded, repetitions, max_listed)
    order = {(m.provider, m.agent, m.metric): i for i, m in enumerate(metrics)}
    variability.sort(key=lambda v: order.get((v.provider, v.agent, v.metric), math.inf))
    found = (
        disagreements(
            scored_rows(run_dir, filesystem=filesystem),
            kinds,
            max_examples=max(1, min(20, max_listed)),
        )
        if {"check", "judge"} <= set(kinds.values())
        else []
    )
    reasons = _judge_reasons(run_dir, filesystem, (e for d in found for e in d.examples))
    for d in found:
        for e in d.examples:
            e.judge_reason = reasons.get((e.agent, e.item_id, e.judge))
    details, total, not_passed = _drill_down(run_dir, filesystem, coded, agent_order, max_items)
    del coded
    timings = manifest.get("timings") if isinstance(manifest.get("timings"), dict) else {}
    assert isinstance(timings, dict)
    gate = manifest.get("gate")
    calls_errored = int(pc.sum(pc.cast(pc.equal(runs["status"], "error"), pa.int64())).as_py() or 0)
    calls_cached = int(pc.sum(pc.cast(runs["cached"], pa.int64())).as_py() or 0)
    calls = manifest.get("calls")
    if not isinstance(calls, dict):  # a run written before the manifest counted its calls
        calls = {"made": len(runs) - calls_cached, "reused": calls_cached, "errored": calls_errored}
    return RunReport(
        run_dir=str(run_dir),
        manifest=manifest,
        suite_name=str(suite.get("name") or manifest.get("name") or os.path.basename(str(run_dir))),
        description=suite.get("description"),
        target=manifest.get("target") or suite.get("target"),
        finished_at=timings.get("finished_at"),
        calls=len(runs),
        calls_errored=calls_errored,
        calls_cached=calls_cached,
        calls_text=CallTally.text(calls),
        total_tokens=int(tokens) if tokens is not None else None,
        latency_p50=_percentile(latency, 50),
        latency_p95=_percentile(latency, 95),
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
        gate=gate if isinstance(gate, dict) else None,
        **_spend_and_concurrency(manifest),
    )


def _spend_and_concurrency(manifest: dict[str, Any]) -> dict[str, Any]:
    """The report's spend and limit history from manifest.json (absent in runs before them; a
    part that is not what evalpipe writes is left out, not shown half)."""
    out: dict[str, Any] = {
        "spend": None,
        "spend_text": None,
        "limit_changes": [],
        "limit_notes": [],
    }
    spend = manifest.get("spend")
    if isinstance(spend, dict):
        try:
            text = spend_text(spend)
            shown = {**Spend.from_dict(spend).as_dict(), "budget": spend.get("budget")}
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        else:
            out["spend"], out["spend_text"] = shown, text
    concurrency = manifest.get("concurrency")
    changes = concurrency.get("changes") if isinstance(concurrency, dict) else None
    if isinstance(changes, list):
        keys = ("at", "endpoint", "model", "before", "limit", "reason", "in_flight")
        kept = [c for c in changes if isinstance(c, dict) and all(k in c for k in keys)]
        try:
            notes = limit_notes({"changes": kept})
        except (ValueError, KeyError, TypeError):
            kept, notes = [], []
        out["limit_changes"], out["limit_notes"] = kept, notes
    return out
