"""Compare two finished runs: verdict flips per item and metric, paired tests per metric, and
judge-vs-check disagreement in each run.

Pairing key: (provider, agent, dataset row, repetition, metric). The dataset row is items.parquet's
``row_id`` (``"query N"`` when a row has no id), so the same question asked in both runs pairs up
whatever item ids, query order or shard layout each run had; the repetition pairs repetition r of
run A with repetition r of run B. A key present in one run only is counted, not paired.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial
from itertools import groupby
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal

import duckdb
from rich.console import Console
from rich.text import Text

from evalpipe._internal.terminal import count_column, name_column, plain_table
from evalpipe.artifacts import read_manifest
from evalpipe.artifacts.reader import manifest_part, records
from evalpipe.escape import markdown, plain, terminal
from evalpipe.report.data import Disagreement, attach_scored, metric_kinds, query_disagreements
from evalpipe.report.html import environment, package_version
from evalpipe.report.stats import MIN_PAIRS, PairedTest, mcnemar_counts, wilcoxon_differences

__all__ = [
    "PAIRING_KEY",
    "Comparison",
    "Flip",
    "MetricComparison",
    "compare_runs",
    "render_compare_html",
    "render_markdown",
    "render_terminal",
    "write_compare_html",
]

PAIRING_KEY = ("provider", "agent", "row", "repetition", "metric")
"""What pairs a score of run A with a score of run B."""


@dataclass(slots=True)
class Flip:
    """A verdict that changed between the runs."""

    kind: Literal["regression", "improvement"]
    """regression: passed in A, failed in B; improvement: the reverse."""
    provider: str
    agent: str
    row: str
    repetition: int
    metric: str
    a_score: float | None
    b_score: float | None


@dataclass(slots=True)
class MetricComparison:
    """One provider × agent × metric in both runs."""

    provider: str
    agent: str
    metric: str
    pairs: int
    """Keys present in both runs."""
    only_a: int
    """Keys in run A only (not paired)."""
    only_b: int
    """Keys in run B only (not paired)."""
    a_passed: int
    a_denominator: int
    """Paired keys with a verdict in A."""
    b_passed: int
    b_denominator: int
    """Paired keys with a verdict in B."""
    regressions: int
    improvements: int
    newly_errored: int
    """A verdict in A, an error in B."""
    mcnemar: PairedTest
    """Over pairs with a verdict in both runs."""
    wilcoxon: PairedTest
    """Over pairs with a score in both runs."""
    a_mean: float | None
    """Mean score in A over the Wilcoxon pairs."""
    b_mean: float | None
    a_pass_rate: float | None
    """a_passed / a_denominator (None when no pair has a verdict in A)."""
    b_pass_rate: float | None


@dataclass(slots=True)
class Comparison:
    """Run B against run A (A is the baseline)."""

    run_a: str
    run_b: str
    suite_a: str
    suite_b: str
    metrics: list[MetricComparison]
    flips: list[Flip]
    """Regressions first, then improvements; at most ``max_flips`` listed."""
    flips_total: int
    disagreements_a: list[Disagreement] = field(default_factory=list)
    disagreements_b: list[Disagreement] = field(default_factory=list)
    duplicates: int = 0
    """Scores dropped because their pairing key repeated within a run (the first is kept)."""

    @property
    def regressions(self) -> int:
        """Verdicts that went from pass in A to fail in B."""
        return sum(m.regressions for m in self.metrics)

    @property
    def improvements(self) -> int:
        """Verdicts that went from fail in A to pass in B."""
        return sum(m.improvements for m in self.metrics)

    @property
    def has_regressions(self) -> bool:
        """At least one verdict went from pass to fail."""
        return self.regressions > 0


def _suite_name(run_dir: Any, filesystem: Any) -> str:
    name = manifest_part(read_manifest(run_dir, filesystem=filesystem), "suite").get("name")
    return str(name) if name else os.path.basename(str(run_dir).rstrip("/"))


_KEY = ", ".join(PAIRING_KEY)

_FIRST_SQL = f"""
SELECT {_KEY}, arg_min(status, _pos) AS status, arg_min(score, _pos) AS score, count(*) AS n,
       true AS present
FROM {{}} GROUP BY ALL
"""

_PAIRED_SQL = f"""
WITH a AS ({_FIRST_SQL.format("scored_a")}), b AS ({_FIRST_SQL.format("scored_b")})
SELECT {_KEY},
       a.status AS a_status, a.score AS a_score, b.status AS b_status, b.score AS b_score,
       coalesce(a.present, false) AS in_a, coalesce(b.present, false) AS in_b,
       coalesce(a.n, 0) AS n_a, coalesce(b.n, 0) AS n_b
FROM a FULL OUTER JOIN b USING ({_KEY})
"""
"""Run A's and run B's scores, one per pairing key (its first status and score, as written), side
by side: a key of one run only has the other side null."""

_METRICS_SQL = """
WITH j AS (
    SELECT *, in_a AND in_b AS both_runs,
           in_a AND in_b AND a_status IN ('pass', 'fail') AS a_verdict,
           in_a AND in_b AND b_status IN ('pass', 'fail') AS b_verdict,
           in_a AND in_b AND a_score IS NOT NULL AND NOT isnan(a_score)
               AND b_score IS NOT NULL AND NOT isnan(b_score) AS scored_both
    FROM paired
)
SELECT provider, agent, metric,
       count(*) FILTER (both_runs) AS pairs,
       count(*) FILTER (in_a AND NOT in_b) AS only_a,
       count(*) FILTER (in_b AND NOT in_a) AS only_b,
       count(*) FILTER (a_verdict AND a_status = 'pass') AS a_passed,
       count(*) FILTER (a_verdict) AS a_denominator,
       count(*) FILTER (b_verdict AND b_status = 'pass') AS b_passed,
       count(*) FILTER (b_verdict) AS b_denominator,
       a_passed / nullif(a_denominator, 0) AS a_pass_rate,
       b_passed / nullif(b_denominator, 0) AS b_pass_rate,
       count(*) FILTER (a_verdict AND b_verdict AND a_status = 'pass' AND b_status <> 'pass')
           AS regressions,
       count(*) FILTER (a_verdict AND b_verdict AND a_status <> 'pass' AND b_status = 'pass')
           AS improvements,
       count(*) FILTER (a_verdict AND b_status = 'error') AS newly_errored,
       count(*) FILTER (a_verdict AND b_verdict) AS verdict_pairs,
       list(b_score - a_score) FILTER (scored_both) AS differences,
       avg(a_score) FILTER (scored_both) AS a_mean,
       avg(b_score) FILTER (scored_both) AS b_mean,
       sum(n_a + n_b) - count(*) FILTER (in_a) - count(*) FILTER (in_b) AS duplicates
FROM j GROUP BY ALL ORDER BY provider, agent, metric
"""
"""Per provider, agent and metric: the paired counts, the paired verdicts and scores the tests
read, and the scores left out because their key repeated in a run."""

_FLIPS_SQL = f"""
SELECT CASE WHEN a_status = 'pass' THEN 'regression' ELSE 'improvement' END AS kind,
       provider, agent, row, repetition, metric, a_score, b_score
FROM paired
WHERE (a_status = 'pass' AND b_status = 'fail') OR (a_status = 'fail' AND b_status = 'pass')
ORDER BY a_status DESC, {_KEY}
LIMIT $room
"""
"""The flips, regressions first, each kind in key order."""


def compare_runs(
    run_a: str | os.PathLike[str],
    run_b: str | os.PathLike[str],
    *,
    max_flips: int = 500,
    filesystem: Any = None,
) -> Comparison:
    """Compare run B with run A (the baseline), pairing scores by :data:`PAIRING_KEY`.

    Raises:
        ArtifactError: either directory is not a finished run.
        SchemaVersionError: either run was written by a newer evalpipe.
    """
    suite_a, suite_b = _suite_name(run_a, filesystem), _suite_name(run_b, filesystem)
    con = duckdb.connect(":memory:")
    try:
        attach_scored(con, run_a, "scored_a", filesystem=filesystem)
        attach_scored(con, run_b, "scored_b", filesystem=filesystem)
        con.execute(f"CREATE TEMP TABLE paired AS {_PAIRED_SQL}")
        rows = records(con, _METRICS_SQL)
        flips = [Flip(**r) for r in records(con, _FLIPS_SQL, {"room": max(max_flips, 0)})]
        found = {
            side: query_disagreements(con, metric_kinds(con, side), 20, scored=side)
            for side in ("scored_a", "scored_b")
        }
    finally:
        con.close()
    duplicates = sum(int(r.pop("duplicates")) for r in rows)
    metrics = [
        MetricComparison(
            **{k: r[k] for k in r if k not in ("verdict_pairs", "differences")},
            mcnemar=mcnemar_counts(r["verdict_pairs"], r["regressions"], r["improvements"]),
            wilcoxon=wilcoxon_differences(r["differences"] or []),
        )
        for r in rows
    ]
    total = sum(m.regressions + m.improvements for m in metrics)
    return Comparison(
        run_a=str(run_a),
        run_b=str(run_b),
        suite_a=suite_a,
        suite_b=suite_b,
        metrics=metrics,
        flips=flips,
        flips_total=total,
        disagreements_a=found["scored_a"],
        disagreements_b=found["scored_b"],
        duplicates=duplicates,
    )


# -- renderers ------------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _p(test: PairedTest) -> str:
    """A paired test's p-value and its pairs, short: ``0.0312 (n=15)``, ``- (n=3)`` (too few)."""
    return f"{'-' if test.p_value is None else format(test.p_value, '.3g')} (n={test.pairs})"


def _tables(c: Comparison) -> list[Any]:
    """Per provider: the verdicts (pairs, pass rates, flips) and the scores with paired tests, a
    line per metric under a line per agent."""
    out: list[Any] = []
    for provider, metrics in groupby(c.metrics, key=attrgetter("provider")):  # ordered by provider
        verdicts = plain_table(f"{terminal(provider)}: verdicts, B against A")
        name_column(verdicts, "agent / metric")
        for column in ("pairs", "A pass", "B pass", "regr", "impr", "new err"):
            count_column(verdicts, column)
        scores = plain_table(f"{terminal(provider)}: scores and paired tests")
        name_column(scores, "agent / metric")
        for column in ("mean A", "mean B", "McNemar p", "Wilcoxon p"):
            count_column(scores, column)
        agent = None
        for m in metrics:
            if m.agent != agent:
                agent = m.agent
                verdicts.add_row(Text(plain(m.agent), style="bold"))
                scores.add_row(Text(plain(m.agent), style="bold"))
            verdicts.add_row(
                Text("  " + plain(m.metric)),
                str(m.pairs),
                f"{_pct(m.a_pass_rate)} ({m.a_passed}/{m.a_denominator})",
                f"{_pct(m.b_pass_rate)} ({m.b_passed}/{m.b_denominator})",
                str(m.regressions),
                str(m.improvements),
                str(m.newly_errored),
            )
            scores.add_row(
                Text("  " + plain(m.metric)),
                _num(m.a_mean),
                _num(m.b_mean),
                _p(m.mcnemar),
                _p(m.wilcoxon),
            )
        out += [verdicts, scores]
    return out


def render_terminal(comparison: Comparison, console: Console, *, max_flips: int = 20) -> None:
    """Print the comparison: per provider a table of verdicts and one of scores and paired tests
    (a line per agent, and under it a line per metric), the flips, disagreement, and the verdict.
    Every name is printed as text."""
    c = comparison
    console.print(
        f"[bold]A[/] (baseline) {terminal(c.run_a)} ({terminal(c.suite_a)})", highlight=False
    )
    console.print(f"[bold]B[/] {terminal(c.run_b)} ({terminal(c.suite_b)})", highlight=False)
    console.print()
    for table in _tables(c):
        console.print(table)
        console.print()
    say = partial(console.print, markup=False, highlight=False)
    if any(m.mcnemar.p_value is None or m.wilcoxon.p_value is None for m in c.metrics):
        say(f"p: - when there are fewer than {MIN_PAIRS} pairs (no test is made)")
    for m in c.metrics:
        if m.only_a or m.only_b:
            say(
                f"not paired: {plain(m.agent)} · {plain(m.metric)} ({plain(m.provider)}): "
                f"{m.only_a} in A only, {m.only_b} in B only"
            )
    shown = c.flips[:max_flips]
    if shown:
        say("flips (A → B):", style="bold")
    for flip in shown:
        say(
            f"  {flip.kind:<11} {plain(flip.agent)} · {plain(flip.metric)} · row {plain(flip.row)}"
            f" rep {flip.repetition} ({plain(flip.provider)}): {_num(flip.a_score)} →"
            f" {_num(flip.b_score)}"
        )
    if c.flips_total > len(shown):
        say(
            f"  ... and {c.flips_total - len(shown)} more flips (all of them: --markdown or --html)"
        )
    for label, found in (("A", c.disagreements_a), ("B", c.disagreements_b)):
        for d in found:
            say(
                f"judge vs check in {label}: {plain(d.agent)} {plain(d.check)} vs "
                f"{plain(d.judge)}: {d.check_pass_judge_fail} check-pass/judge-fail, "
                f"{d.check_fail_judge_pass} check-fail/judge-pass of {d.pairs}"
            )
    verdict = "[red]regressions[/]" if c.has_regressions else "[green]no regressions[/]"
    console.print(f"{verdict}: {c.regressions} regression(s), {c.improvements} improvement(s)")


def _md(text: object) -> str:
    """Untrusted text inside a markdown table cell (:func:`evalpipe.escape.markdown`)."""
    return markdown(text, 200)


def render_markdown(comparison: Comparison, *, max_flips: int = 50) -> str:
    """The comparison as markdown (a Prefect markdown artifact)."""
    c = comparison
    lines = [
        f"# Comparison: {_md(c.suite_b)} against {_md(c.suite_a)}",
        "",
        f"- A (baseline): {_md(c.run_a)}",
        f"- B: {_md(c.run_b)}",
        f"- **{c.regressions} regression(s)** (pass → fail), {c.improvements} improvement(s)"
        " (fail → pass)",
        "",
        "| provider | agent | metric | pairs | A pass | B pass | regressions | improvements |"
        " McNemar | mean A → B | Wilcoxon |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for m in c.metrics:
        lines.append(
            f"| {_md(m.provider)} | {_md(m.agent)} | {_md(m.metric)} | {m.pairs} | "
            f"{_pct(m.a_pass_rate)} ({m.a_passed}/{m.a_denominator}) | "
            f"{_pct(m.b_pass_rate)} ({m.b_passed}/{m.b_denominator}) | {m.regressions} | "
            f"{m.improvements} | {m.mcnemar.describe()} | {_num(m.a_mean)} → {_num(m.b_mean)} | "
            f"{m.wilcoxon.describe()} |"
        )
    if c.flips:
        lines += [
            "",
            "## Flips",
            "",
            "| | agent | metric | row | rep | A → B |",
            "|---|---|---|---|---:|---|",
        ]
        for f in c.flips[:max_flips]:
            lines.append(
                f"| {f.kind} | {_md(f.agent)} | {_md(f.metric)} | {_md(f.row)} | {f.repetition} | "
                f"{_num(f.a_score)} → {_num(f.b_score)} |"
            )
        if c.flips_total > min(len(c.flips), max_flips):
            lines.append(f"\n{c.flips_total - min(len(c.flips), max_flips)} more flips not listed.")
    for label, found in (("A", c.disagreements_a), ("B", c.disagreements_b)):
        if found:
            lines += [
                "",
                f"## Judge vs check in {label}",
                "",
                "| agent | check | judge | pairs | check pass, judge fail | check fail, judge pass |",
                "|---|---|---|---:|---:|---:|",
            ]
            lines += [
                f"| {_md(d.agent)} | {_md(d.check)} | {_md(d.judge)} | {d.pairs} | "
                f"{d.check_pass_judge_fail} | {d.check_fail_judge_pass} |"
                for d in found
            ]
    return "\n".join(lines) + "\n"


def render_compare_html(comparison: Comparison) -> str:
    """The comparison as one self-contained HTML page (the report's style)."""

    return (
        environment()
        .get_template("compare.html.j2")
        .render(c=comparison, version=package_version())
    )


def write_compare_html(comparison: Comparison, output: str | os.PathLike[str]) -> Path:
    """Write :func:`render_compare_html` to a file; returns its path."""
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_compare_html(comparison), encoding="utf-8")
    return path
