"""compare_runs on two crafted runs with known flips: pairing, counts, paired tests, disagreement
in each run, and the terminal, markdown and HTML renderings."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_builders import write_run
from rich.console import Console

from evalpipe.report import (
    PAIRING_KEY,
    compare_runs,
    render_compare_html,
    render_markdown,
    render_terminal,
)

ODD = "r1|<b>"
ROWS = ["r0", ODD, "r2", "r3", "r4", "r5", "r6", "r7"]
# run B's relevance minus run A's: one negative difference of rank 7 among 8 distinct magnitudes
DIFFS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, -0.7, 0.8]


def _run_a(path: Path) -> Path:
    kw = {(row, 0): (i < 6, 1.0 if i < 6 else 0.0) for i, row in enumerate(ROWS)}
    rel = {(row, 0): (True, 3.0) for row in ROWS}
    return write_run(path, {"kw": kw}, {"relevance": rel}, suite="baseline")


def _run_b(path: Path) -> Path:
    """r0 and r1 regress on kw, r6 improves, r2 errors; r8 is new; rows in another order."""
    kw: dict[tuple[str, int], tuple[bool | str | None, float | None]] = {("r8", 0): (True, 1.0)}
    rel = {("r8", 0): (True, 4.0)}
    for i, row in reversed(list(enumerate(ROWS))):
        if i in (0, 1):
            kw[(row, 0)] = (False, 0.0)
        elif i == 2:
            kw[(row, 0)] = ("error", None)
        elif i == 6:
            kw[(row, 0)] = (True, 1.0)
        else:
            kw[(row, 0)] = (i < 6, 1.0 if i < 6 else 0.0)
        rel[(row, 0)] = (True, 3.0 + DIFFS[i])
    return write_run(path, {"kw": kw}, {"relevance": rel}, suite="candidate")


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    return _run_a(tmp_path / "a"), _run_b(tmp_path / "b")


def test_flips_pair_by_row_and_repetition(runs: tuple[Path, Path]) -> None:
    """kw: 8 paired keys (r8 only in B), 7 with a verdict in both; regressions r0 and r1,
    improvement r6, r2 newly errored; McNemar over 7 pairs with discordant 2 vs 1: p = 1."""
    a, b = runs
    comparison = compare_runs(a, b)
    assert PAIRING_KEY == ("provider", "agent", "row", "repetition", "metric")
    kw = next(m for m in comparison.metrics if m.metric == "kw")
    assert (kw.pairs, kw.only_a, kw.only_b) == (8, 0, 1)
    assert (kw.a_passed, kw.a_denominator, kw.b_passed, kw.b_denominator) == (6, 8, 4, 7)
    assert (kw.regressions, kw.improvements, kw.newly_errored) == (2, 1, 1)
    assert (kw.mcnemar.pairs, kw.mcnemar.a_only, kw.mcnemar.b_only) == (7, 2, 1)
    assert kw.mcnemar.p_value == pytest.approx(1.0)
    flips = [(f.kind, f.row, f.metric) for f in comparison.flips]
    assert flips == [
        ("regression", "r0", "kw"),
        ("regression", ODD, "kw"),
        ("improvement", "r6", "kw"),
    ]
    assert comparison.has_regressions is True
    assert (comparison.regressions, comparison.improvements, comparison.flips_total) == (2, 1, 3)
    assert (comparison.suite_a, comparison.suite_b) == ("baseline", "candidate")


def test_wilcoxon_on_paired_scores_by_hand(runs: tuple[Path, Path]) -> None:
    """relevance differences +.1..+.6, -.7, +.8: W- = 7 (the rank of -.7); subsets of 1..8 with
    sum <= 7 number 19, so the exact two-sided p = 2·19/256."""
    comparison = compare_runs(*runs)
    rel = next(m for m in comparison.metrics if m.metric == "relevance")
    assert rel.wilcoxon.pairs == 8
    assert rel.wilcoxon.statistic == 7.0
    assert rel.wilcoxon.p_value == pytest.approx(38 / 256)
    assert rel.a_mean == pytest.approx(3.0)
    assert rel.b_mean == pytest.approx(3.0 + sum(DIFFS) / 8)
    assert (rel.regressions, rel.improvements) == (0, 0)


def test_judge_vs_check_disagreement_in_each_run(runs: tuple[Path, Path]) -> None:
    """A: kw fails r6, r7 where the judge passes; B: kw fails r0, r1, r7 (r2 errored, left out)."""
    comparison = compare_runs(*runs)
    [da] = comparison.disagreements_a
    [db] = comparison.disagreements_b
    assert (da.pairs, da.check_pass_judge_fail, da.check_fail_judge_pass) == (8, 0, 2)
    assert (db.pairs, db.check_pass_judge_fail, db.check_fail_judge_pass) == (8, 0, 3)


def test_a_run_against_itself_has_no_flips(runs: tuple[Path, Path]) -> None:
    """Comparing a run with itself: every key pairs, nothing flips, McNemar and Wilcoxon p = 1."""
    a, _ = runs
    comparison = compare_runs(a, a)
    assert comparison.has_regressions is False
    assert comparison.flips == []
    for m in comparison.metrics:
        assert (m.only_a, m.only_b) == (0, 0)
        assert m.mcnemar.p_value == 1.0
        assert m.wilcoxon.p_value == 1.0


def test_fewer_than_six_pairs_is_insufficient(tmp_path: Path) -> None:
    """Five rows in each run: both tests say "insufficient pairs" and give no p-value."""
    rows = [f"q{i}" for i in range(5)]
    a = write_run(tmp_path / "a", {"kw": {(r, 0): (True, 1.0) for r in rows}})
    b = write_run(tmp_path / "b", {"kw": {(r, 0): (False, 0.0) for r in rows}})
    [kw] = compare_runs(a, b).metrics
    assert kw.regressions == 5
    assert kw.mcnemar.p_value is None
    assert kw.wilcoxon.p_value is None
    assert kw.mcnemar.describe() == "insufficient pairs (n=5)"


def test_flip_list_is_capped_but_counted(runs: tuple[Path, Path]) -> None:
    """max_flips=1 lists the first regression; flips_total still counts all three."""
    comparison = compare_runs(*runs, max_flips=1)
    assert [f.kind for f in comparison.flips] == ["regression"]
    assert comparison.flips_total == 3
    assert "2 more flips not listed" in render_compare_html(comparison)


def test_renderers_show_the_flips_and_escape_text(runs: tuple[Path, Path]) -> None:
    """Terminal, markdown and HTML name the regressions; a row id with | and <b> and a suite name
    with rich markup stay text."""
    comparison = compare_runs(*runs)
    comparison.suite_a = "[red]base[/red]"  # rich markup in a suite name stays text
    console = Console(record=True, width=200)
    render_terminal(comparison, console)
    text = console.export_text()
    assert "regression  overall · kw · row r1|<b> rep 0" in text
    assert "([red]base[/red])" in text
    assert "2 regression(s), 1 improvement(s)" in text
    markdown = render_markdown(comparison)
    assert "**2 regression(s)**" in markdown
    assert "| regression | overall | kw | r1\\|\\<b\\> | 0 |" in markdown
    assert "<b>" not in markdown
    html = render_compare_html(comparison)
    assert "r1|&lt;b&gt;" in html
    assert "<b>" not in html
    assert "<script" not in html
    assert "2 regression(s)" in html
