"""What the view's pages show, read from run directories.

Runs are found with ``evalpipe.artifacts.find_runs`` and looked up by their suite and run name
among what it found: a request never names a path, so nothing outside the served directory can be
reached. A run's sample table is an index of small columns (no text), a DuckDB table built once per
run from items.parquet and scores.parquet and kept (finished runs are never rewritten); filtering,
sorting and paging are SQL over that index, and only the rows of a page have their query and
response read (``read_rows``, from the row groups that hold them). The report's numbers come from
``evalpipe.report`` (one home for the statistics and the comparison).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from evalpipe.artifacts import (
    ArtifactError,
    DamagedRun,
    RunInfo,
    find_runs,
    read_rows,
)
from evalpipe.artifacts.reader import attach_tables, records, run_tables
from evalpipe.report.compare import Comparison, compare_runs
from evalpipe.report.data import (
    ITEM_ROWS_SQL,
    VERDICT_RANK_SQL,
    ItemDetail,
    RunReport,
    item_detail,
    load_report_data,
)

__all__ = [
    "PAGE_SIZES",
    "STATUSES",
    "BadRequest",
    "Catalog",
    "MetricColumn",
    "NotFound",
    "SampleIndex",
    "SampleQuery",
    "TrendChart",
    "TrendPoint",
    "trend_charts",
]

STATUSES = ("pass", "fail", "error", "errored")
"""Item verdicts and metric statuses the sample table filters on (a metric adds not_applicable)."""
PAGE_SIZES = (10, 25, 50, 100, 200)
"""Rows per page the sample table offers."""
LISTING_TTL_S = 2.0
"""How long the list of runs is kept before the directory is read again."""


class NotFound(LookupError):
    """No such run, item or page in the served directory."""


class BadRequest(ValueError):
    """A query parameter the page cannot take."""


K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A small thread-safe least-recently-used cache; ``get`` computes a missing value once."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[K, threading.Lock] = {}

    def get(self, key: K, build: Callable[[], V]) -> V:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
            lock = self._building.setdefault(key, threading.Lock())
        with lock:  # one build per key, however many requests ask at once
            with self._lock:
                if key in self._data:
                    return self._data[key]
            value = build()
            with self._lock:
                self._data[key] = value
                self._data.move_to_end(key)
                while len(self._data) > self._size:
                    self._data.popitem(last=False)
                self._building.pop(key, None)
            return value


@dataclass(frozen=True, slots=True)
class MetricColumn:
    """One (provider, metric) of a run: a status and a score column of the sample table."""

    key: str
    """``m0``, ``m1``, ...: the column's name in the index and in URLs."""
    provider: str
    metric: str
    label: str
    """The metric's name, with its provider when two providers share the name."""


@dataclass(slots=True)
class SampleQuery:
    """What the sample table shows: filters, sort and page."""

    status: str | None = None
    agent: str | None = None
    metric: str | None = None
    """A metric column's key: the status filter applies to it (else to the item's verdict)."""
    text: str | None = None
    sort: str = "position"
    desc: bool = False
    page: int = 1
    per: int = 50

    def params(self, **changes: object) -> dict[str, object]:
        """The query as URL parameters, with ``changes``."""
        values: dict[str, object] = {
            "status": self.status,
            "agent": self.agent,
            "metric": self.metric,
            "q": self.text,
            "sort": None if self.sort == "position" else self.sort,
            "desc": "1" if self.desc else None,
            "page": None if self.page == 1 else self.page,
            "per": None if self.per == 50 else self.per,
        }
        values.update(changes)
        return values


COLUMNS = {
    "item": ("item_id", "item"),
    "row": ("row", "row"),
    "repetition": ("repetition", "rep"),
    "agent": ("agent", "agent"),
    "verdict": ("_rank", "verdict"),
    "query": ("query", "query"),
    "response": ("response", "response"),
    "latency": ("latency_s", "latency s"),
    "tokens": ("tokens", "tokens"),
    "judge_tokens": ("judge_tokens", "judge tokens"),
    "judge_latency": ("judge_latency_s", "judge s"),
}
"""The sample table's columns in order (the metric columns come after ``response``), by their URL
name: the index column a sort on it orders by, and its header. A metric's key sorts on its score;
``position``, the default, on ``_pos``."""

_TEXT_COLUMNS = ["query", "response"]

_METRICS_SQL = """
CREATE TABLE metric_columns AS
SELECT provider, metric, row_number() OVER (ORDER BY provider_index, first) - 1 AS k
FROM (SELECT provider_index, provider, metric, min(_spos) AS first FROM score_rows
      WHERE metric IS NOT NULL GROUP BY ALL)
ORDER BY k
"""
"""Each (provider, metric) of the run, in provider order, then in order of first appearance."""

_INDEX_SQL = """
CREATE TABLE idx AS
SELECT i._pos, i.agent, i.item_id, i.row, i.repetition, i.latency_s, i.tokens,
       per.* EXCLUDE (_pos)
FROM item_rows i LEFT JOIN (
    SELECT _pos,
           max({rank}) AS _rank,
           CAST(sum(total_tokens) AS BIGINT) AS judge_tokens,
           sum(latency_s) AS judge_latency_s{metrics}
    FROM score_rows LEFT JOIN metric_columns USING (provider, metric) GROUP BY _pos
) per USING (_pos)
"""
"""One row per item: its verdict (``_rank``, its rows' worst item status), judge tokens and
seconds summed, and per metric column ``k`` the status and score of its first row."""

_METRIC_COLUMN_SQL = """,
           arg_min_null(CASE WHEN status IN ('pass', 'fail', 'error', 'not_applicable')
                             THEN status END, _spos) FILTER (WHERE k = {k}) AS m{k}_status,
           arg_min_null(CAST(score AS DOUBLE), _spos) FILTER (WHERE k = {k}) AS m{k}"""

_ITEM_ROWS_SQL = f"""
CREATE TABLE item_rows AS
SELECT _pos, agent, item_id AS _id, coalesce(item_id, '') AS item_id, row, repetition,
       latency_s, total_tokens AS tokens
FROM ({ITEM_ROWS_SQL})
"""
"""items.parquet's small columns, with each item's dataset row and position (``_pos``)."""

_SCORE_ROWS_SQL = """
CREATE TABLE score_rows AS
SELECT s._pos AS _spos, i._pos, s.provider_index, s.score_index, s.provider, s.metric, s.status,
       s.item_status, s.score, s.total_tokens, s.latency_s, s.agent, s.item_id
FROM scores s JOIN item_rows i ON s.agent = i.agent AND s.item_id = i._id
"""
"""scores.parquet's rows of an item of items.parquet (on agent and item id), with their position
in the file (``_spos``) and their item's (``_pos``)."""

_INDEX_COLUMNS = {
    "items": [
        "agent",
        "item_id",
        "row_id",
        "query_index",
        "repetition",
        "latency_s",
        "total_tokens",
    ],
    "scores": [
        "provider",
        "provider_index",
        "score_index",
        "agent",
        "item_id",
        "item_status",
        "metric",
        "status",
        "score",
        "total_tokens",
        "latency_s",
    ],
}


class SampleIndex:
    """A run's items with their verdict, each metric's status and score, latency and tokens (the
    target's and the judges'), and where each item's rows are in items.parquet and
    scores.parquet, as DuckDB tables (no text column) built once; the sample table is a query
    over them, and only a page's texts are read from the files (``read_rows``)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._lock = threading.Lock()
        con = run_tables(location, _INDEX_COLUMNS)
        self._con = con
        con.execute(_ITEM_ROWS_SQL)
        con.execute(_SCORE_ROWS_SQL)
        con.execute("DROP VIEW items; DROP VIEW scores")
        con.execute(_METRICS_SQL)
        self.metrics: list[MetricColumn] = [
            MetricColumn(f"m{k}", provider, metric, metric if alone else f"{metric} ({provider})")
            for provider, metric, k, alone in con.execute(
                "SELECT *, count(*) OVER (PARTITION BY metric) = 1 FROM metric_columns ORDER BY k"
            ).fetchall()
        ]
        columns = "".join(_METRIC_COLUMN_SQL.format(k=k) for k in range(len(self.metrics)))
        con.execute(_INDEX_SQL.format(rank=VERDICT_RANK_SQL, metrics=columns))
        self.agents: list[str] = [
            a
            for (a,) in con.execute(
                "SELECT agent FROM idx GROUP BY agent ORDER BY min(_pos)"
            ).fetchall()
        ]
        [(self._items,)] = con.execute("SELECT count(*) FROM idx").fetchall()

    def __len__(self) -> int:
        return int(self._items)

    @property
    def table(self) -> Any:
        """The index as an Arrow table, in items.parquet's order."""
        with self._lock:
            return self._con.sql("SELECT * FROM idx ORDER BY _pos").to_arrow_table()

    def _rows(self, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
        with self._lock:
            return records(self._con, sql, list(params))

    def metric(self, key: str | None) -> MetricColumn | None:
        return next((m for m in self.metrics if m.key == key), None)

    def _texts(self) -> None:
        """items.parquet's query and response columns as the table ``texts`` (read once, on the
        first search or sort by them)."""
        with self._lock:
            if not self._has_texts:
                attach_tables(self._con, self.location, {"items": _TEXT_COLUMNS})
                self._con.execute("CREATE TABLE texts AS SELECT * FROM items")
                self._con.execute("DROP VIEW items")
                self._has_texts = True

    _has_texts = False

    def query(self, q: SampleQuery) -> tuple[list[dict[str, Any]], int, int]:
        """The page of items ``q`` asks for, how many items match and the number of pages.

        A page's row (agent × item) holds the index's columns (``agent``, ``item_id``, ``row``,
        ``repetition``, ``latency_s``, ``tokens``, ``judge_tokens``, ``judge_latency_s``, ...) with
        ``query`` and ``response``, ``verdict``, ``metrics`` (per metric column: status and score;
        None, None: not scored on it) and ``reasons`` (per metric that failed or errored, only the
        filtered metric's when the table is filtered on one: its label, status and reason).

        Raises:
            NotFound: for a page past the last one.
        """
        where: list[str] = []
        params: list[object] = []
        if q.agent:
            where.append("agent = ?")
            params.append(q.agent)
        metric = self.metric(q.metric)
        if metric is not None:
            if q.status:
                where.append(f"{metric.key}_status = ?")
                params.append(q.status)
            else:
                where.append(f"{metric.key}_status IS NOT NULL")
        elif q.status:
            where.append("_rank = ?")
            params.append(STATUSES.index(q.status))  # the index's _rank: VERDICT_RANK_SQL
        texts = bool(q.text) or q.sort in _TEXT_COLUMNS
        if texts:
            self._texts()
        if q.text:
            found = " OR ".join(
                f"coalesce(strpos(lower({c}), lower(?)) > 0, false)"
                for c in ("query", "response", "item_id", "row", "agent")
            )
            where.append(f"({found})")
            params.extend([q.text] * 5)
        source = "idx JOIN texts USING (_pos)" if texts else "idx"
        condition = f"WHERE {' AND '.join(where)}" if where else ""
        column = (
            COLUMNS[q.sort][0] if q.sort in COLUMNS else q.sort if self.metric(q.sort) else "_pos"
        )
        order = "DESC" if q.desc else "ASC"
        by = f"_pos {order}" if column == "_pos" else f"{column} {order} NULLS LAST, _pos ASC"
        # one scan: the page's rows carry the count of every match (a page past the last has
        # no row, and the count is asked for on its own)
        data = self._rows(
            f"SELECT *, count(*) OVER () AS _total FROM {source} {condition} "
            f"ORDER BY {by} LIMIT ? OFFSET ?",
            [*params, q.per, (q.page - 1) * q.per],
        )
        if data:
            total = int(data[0]["_total"])
        else:
            [row] = self._rows(f"SELECT count(*) AS n FROM {source} {condition}", params)
            total = int(row["n"])
        pages = max(1, -(-total // q.per))
        if q.page > pages:
            raise NotFound(f"page {q.page} of {pages}")
        positions = [r["_pos"] for r in data]
        shown = (
            data if texts else read_rows(self.location, "items", positions, columns=_TEXT_COLUMNS)
        )
        reasons = self._reasons(positions, metric)
        for r, text in zip(data, shown, strict=True):
            r.update(
                query=text["query"],
                response=text["response"],
                verdict=None if r["_rank"] is None else STATUSES[r["_rank"]],
                metrics=[(r[f"{m.key}_status"], r[m.key]) for m in self.metrics],
                reasons=reasons.get(r["_pos"], []),
            )
        return data, total, pages

    def _reasons(
        self, positions: Sequence[int], metric: MetricColumn | None
    ) -> dict[int, list[tuple[str, str, str]]]:
        """Per item position of a page: the label, status and reason of each metric that failed
        or errored on it (only ``metric``'s, when given), read from the row groups holding them."""
        if not positions:
            return {}
        sql = (
            "SELECT _spos, _pos, provider, metric, status FROM score_rows "
            "WHERE list_contains(?, _pos) AND status IN ('fail', 'error')"
        )
        params: list[object] = [list(positions)]
        if metric is not None:
            sql += " AND provider = ? AND metric = ?"
            params += [metric.provider, metric.metric]
        hits = self._rows(sql + " ORDER BY _spos", params)
        if not hits:
            return {}
        labels = {(m.provider, m.metric): m.label for m in self.metrics}
        texts = read_rows(
            self.location,
            "scores",
            [h["_spos"] for h in hits],
            columns=["reason", "error_message", "item_error_message"],
        )
        out: dict[int, list[tuple[str, str, str]]] = {}
        for hit, text in zip(hits, texts, strict=True):
            why = text["reason"] or text["error_message"] or text["item_error_message"] or ""
            label = labels.get((hit["provider"], hit["metric"]), hit["metric"] or "item")
            out.setdefault(hit["_pos"], []).append((label, hit["status"], why))
        return out

    def find_row(self, agent: str, row: str, repetition: int) -> str | None:
        """The item id of an agent's item on a dataset row and repetition, or None."""
        hit = self._rows(
            "SELECT item_id FROM idx WHERE agent = ? AND row = ? AND repetition = ? "
            "ORDER BY _pos LIMIT 1",
            [agent, row, repetition],
        )
        return None if not hit else str(hit[0]["item_id"])

    def detail(self, agent: str, item_id: str) -> tuple[ItemDetail, list[tuple[Any, Any]]]:
        """The item as the report's drill-down shows it, and each score's judge cost (tokens,
        seconds); reads only the row groups holding the item's rows.

        Raises:
            NotFound: when the run has no such item.
        """
        hit = self._rows(
            "SELECT _pos, row, repetition, _rank FROM idx WHERE agent = ? AND item_id = ? "
            "ORDER BY _pos LIMIT 1",
            [agent, item_id],
        )
        if not hit:
            raise NotFound(f"no item {item_id!r} of agent {agent!r}")
        index = hit[0]
        [item] = read_rows(self.location, "items", [index["_pos"]])
        positions = [
            r["_spos"]
            for r in self._rows(
                "SELECT _spos FROM score_rows WHERE agent = ? AND item_id = ? "
                "ORDER BY provider_index, coalesce(score_index, -1), _spos",
                [agent, item_id],
            )
        ]
        scores = read_rows(self.location, "scores", positions)
        verdict = "pass" if index["_rank"] is None else STATUSES[index["_rank"]]
        detail = item_detail(
            {**index, "agent": agent, "item_id": item_id, "verdict": verdict},
            item,
            scores,
            whole=True,
        )
        return detail, [(r["total_tokens"], r["latency_s"]) for r in scores]


_COST_SQL = """
SELECT provider, count(*) AS scores,
       CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
       CAST(sum(output_tokens) AS BIGINT) AS output_tokens,
       CAST(sum(total_tokens) AS BIGINT) AS total_tokens,
       sum(latency_s) AS latency_s
FROM scores WHERE metric IS NOT NULL
GROUP BY provider_index, provider
ORDER BY provider_index
"""
"""What each evaluator provider's metric rows spent on the run (judge cost): its scores, their
tokens and the seconds spent computing them, summed."""


def _cost(location: str) -> list[dict[str, Any]]:
    columns = ["provider", "provider_index", "metric", "input_tokens", "output_tokens"]
    con = run_tables(location, {"scores": [*columns, "total_tokens", "latency_s"]})
    try:
        return records(con, _COST_SQL)
    finally:
        con.close()


@dataclass(frozen=True, slots=True)
class TrendPoint:
    x: float
    y: float
    label: str
    """The run's name and the point's value."""
    started_at: datetime | None = None
    """When the point's run started (UTC): the x axis's date labels."""


@dataclass(slots=True)
class TrendChart:
    """One series of a suite over its runs, as an inline SVG line chart draws it."""

    provider: str
    agent: str
    metric: str
    """The metric, or ``items`` for the agent's item pass rate."""
    measure: str
    """``pass rate`` or ``mean score``."""
    low: float
    high: float
    points: list[TrendPoint] = field(default_factory=list)
    baseline_x: float | None = None
    width: int = 360
    height: int = 150
    pad: int = 34

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)

    @property
    def ticks(self) -> list[tuple[float, str]]:
        """The x axis's labels: up to four points, evenly spread (first and last always), each
        with its run's start (UTC, ``MM-DD HH:MM``)."""
        dated = [p for p in self.points if p.started_at is not None]
        shown = min(len(dated), 4)
        if shown <= 1:
            picks = dated
        else:
            picks = [dated[round(k * (len(dated) - 1) / (shown - 1))] for k in range(shown)]
        return [(p.x, p.started_at.strftime("%m-%d %H:%M")) for p in picks if p.started_at]


def _x(chart: TrendChart, i: int, runs: int) -> float:
    """Where run ``i`` of ``runs`` (oldest first) is on a chart's x axis."""
    span = chart.width - 2 * chart.pad
    return chart.pad + (i * span / (runs - 1) if runs > 1 else span / 2)


def trend_charts(entries: Sequence[RunInfo]) -> list[TrendChart]:
    """Per provider, agent and metric (and per agent's items): its pass rate and its mean score
    over ``entries`` (one suite's runs), oldest first, with the baseline's position."""
    runs = sorted(entries, key=lambda e: (e.started_at is None, e.started_at, e.run_name))
    series: dict[tuple[str, str, str, str], list[tuple[int, float]]] = {}
    for i, entry in enumerate(runs):
        for row in entry.rows:
            name = "items" if row.kind == "result" else str(row.metric)
            mean = row.score_mean if row.kind == "metric" else None
            for measure, value in (("pass rate", row.pass_rate), ("mean score", mean)):
                if value is not None:
                    series.setdefault((row.provider, row.agent, name, measure), []).append(
                        (i, value)
                    )
    baseline = next((i for i, e in enumerate(runs) if e.baseline), None)
    charts = []
    for (provider, agent, metric, measure), values in series.items():
        ys = [v for _, v in values]
        rate = measure == "pass rate"
        low, high = (0.0, 1.0) if rate else (min(0.0, *ys), max(1.0, *ys))
        chart = TrendChart(provider, agent, metric, measure, low, high)
        span_y = chart.height - 2 * chart.pad + 10
        for i, v in values:
            y = chart.pad - 10 + span_y * (1 - (v - low) / ((high - low) or 1.0))
            label = f"{runs[i].run_name}: {v:.1%}" if rate else f"{runs[i].run_name}: {v:.3g}"
            chart.points.append(TrendPoint(_x(chart, i, len(runs)), y, label, runs[i].started_at))
        if baseline is not None:
            chart.baseline_x = _x(chart, baseline, len(runs))
        charts.append(chart)
    return charts


class Catalog:
    """The finished runs under one directory (a path or a filesystem URI), and what the view
    computes from them, cached: a finished run is read again only when its manifest changes."""

    def __init__(self, root: str, *, cache_size: int = 4) -> None:
        self.root = root
        self._reports: _Lru[tuple[str, str], RunReport] = _Lru(cache_size)
        self._samples: _Lru[tuple[str, str], SampleIndex] = _Lru(cache_size)
        self._costs: _Lru[tuple[str, str], list[dict[str, Any]]] = _Lru(cache_size * 4)
        self._comparisons: _Lru[tuple[str, str, str, str], Comparison] = _Lru(cache_size)
        self._listing: tuple[float, list[RunInfo], list[DamagedRun]] | None = None
        self._listing_lock = threading.Lock()

    def runs(self, *, suite: str | None = None, tag: str | None = None) -> list[RunInfo]:
        """Every finished run, newest first; ``suite`` / ``tag`` keep those of a suite / tag.

        The listing is read again at most every ``LISTING_TTL_S`` seconds: a run that finishes
        shows within that time, and a page's several look-ups read the directory once."""
        entries = list(self._list()[0])
        if suite:
            entries = [e for e in entries if e.suite == suite]
        if tag:
            entries = [e for e in entries if tag in e.tags]
        return entries

    def damaged(self) -> list[DamagedRun]:
        """The runs whose files cannot be read (listed as damaged, naming the file)."""
        return list(self._list()[1])

    def _list(self) -> tuple[list[RunInfo], list[DamagedRun]]:
        """Every readable finished run and every damaged one (a damaged run hides no other)."""
        with self._listing_lock:
            now = time.monotonic()
            if self._listing is None or now - self._listing[0] > LISTING_TTL_S:
                damaged: list[DamagedRun] = []
                entries = find_runs(self.root, damaged=damaged)
                self._listing = (now, entries, damaged)
            return self._listing[1], self._listing[2]

    def run(self, suite: str, run_name: str) -> RunInfo:
        """The run of ``suite`` named ``run_name``.

        Raises:
            NotFound: when the served directory has no such finished run.
            ArtifactError: when it is a damaged run (naming the file that cannot be read).
        """
        for entry in self.runs():
            if entry.suite == suite and entry.run_name == run_name:
                return entry
        for damaged in self.damaged():
            if damaged.suite == suite and damaged.run_name == run_name:
                raise ArtifactError(damaged.problem)
        raise NotFound(f"no finished run {run_name!r} of suite {suite!r}")

    def by_key(self, key: str) -> RunInfo:
        """The run a ``suite/run_name`` key names (see :attr:`RunInfo.key`)."""
        suite, _, run_name = key.partition("/")
        return self.run(suite, run_name)

    def default_a(self, b: RunInfo) -> RunInfo | None:
        """What B is compared with when no A is named: its suite's blessed baseline, else the run
        of its suite before it (None: B is its suite's only run)."""
        runs = [e for e in self.runs() if e.suite == b.suite]  # newest first
        baseline = next((e for e in runs if e.baseline and e.location != b.location), None)
        position = next((i for i, e in enumerate(runs) if e.location == b.location), -1)
        return baseline or next(iter(runs[position + 1 :]), None)

    def report(self, entry: RunInfo) -> RunReport:
        """The report's content for the run (its items are paged by :meth:`samples`)."""
        return self._reports.get(
            (entry.location, entry.stamp), lambda: load_report_data(entry.location, max_items=0)
        )

    def samples(self, entry: RunInfo) -> SampleIndex:
        return self._samples.get((entry.location, entry.stamp), lambda: SampleIndex(entry.location))

    def costs(self, entry: RunInfo) -> list[dict[str, Any]]:
        return self._costs.get((entry.location, entry.stamp), lambda: _cost(entry.location))

    def compare(self, a: RunInfo, b: RunInfo) -> Comparison:
        """Run B against run A, as ``evalpipe compare`` computes it."""
        return self._comparisons.get(
            (a.location, a.stamp, b.location, b.stamp),
            lambda: compare_runs(a.location, b.location),
        )
