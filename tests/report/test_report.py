"""The HTML report of crafted runs: numbers with their denominators, repetitions, judge-vs-check
disagreement, the capped drill-down, escaping (also in headless Chromium) and self-containment."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from report_builders import write_run

from evalpipe.artifacts import ArtifactError
from evalpipe.report import load_report_data, render_report, write_report

XSS = "<script>alert(1)</script>"

# 3 rows × 3 repetitions. "kw" (check): row a passes 3/3, row b 1/3 (flaky), row c errors once.
CHECKS = {
    "kw": {
        ("a", 0): (True, 1.0),
        ("a", 1): (True, 1.0),
        ("a", 2): (True, 1.0),
        ("b", 0): (True, 1.0),
        ("b", 1): (False, 0.0),
        ("b", 2): (False, 0.0),
        ("c", 0): (False, 0.0),
        ("c", 1): ("error", None),
        ("c", 2): (None, 0.5),
    },
}
# judge: 1-5 scores, pass at >= 3; disagrees with kw on a#1 (kw pass, judge fail) and c#0
# (kw fail, judge pass).
JUDGES = {
    "relevance": {
        ("a", 0): (True, 5.0),
        ("a", 1): (False, 2.0),
        ("a", 2): (True, 4.0),
        ("b", 0): (True, 3.0),
        ("b", 1): (False, 1.0),
        ("b", 2): (False, 2.0),
        ("c", 0): (True, 4.0),
        ("c", 1): (True, 5.0),
        ("c", 2): (True, 3.0),
    },
}


@pytest.fixture
def crafted(tmp_path: Path) -> Path:
    return write_run(
        tmp_path / "run",
        CHECKS,
        JUDGES,
        suite=f"suite {XSS}",
        responses={("b", 1): f"I think {XSS} is fine"},
    )


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_metric_rows_have_explicit_denominators_and_intervals(crafted: Path) -> None:
    """kw: 4 passed, 3 failed, 1 errored, 1 not applicable -> 4/7 with Wilson [25.0%, 84.2%];
    relevance is classified as a judge (it has ratings), kw as a check."""
    report = load_report_data(crafted)
    rows = {m.metric: m for m in report.metrics}
    kw, rel = rows["kw"], rows["relevance"]
    assert (kw.passed, kw.failed, kw.errored, kw.not_applicable, kw.denominator) == (4, 3, 1, 1, 7)
    assert (kw.kind, rel.kind) == ("check", "judge")
    assert kw.pass_rate is not None
    assert (round(kw.pass_rate.low, 3), round(kw.pass_rate.high, 3)) == (0.250, 0.842)
    assert rel.score is not None
    assert rel.score.estimate == pytest.approx(29 / 9)
    assert rel.score.n == 9
    assert [b.count for b in rel.histogram] == [1, 2, 2, 2, 2]  # one bin per score 1..5
    text = _text(render_report(report))
    assert "4 / 7" in text
    assert "57.1% [25.0%, 84.2%]" in text


def test_histogram_leaves_out_nan_scores(tmp_path: Path) -> None:
    """A NaN score (an @evaluator may return one) is not binned: the bins stay finite and count
    the numbers only, as the tally's mean leaves NaN out."""
    nan = float("nan")
    keys = [("a", 0), ("b", 0), ("c", 0)]
    run = write_run(
        tmp_path / "run",
        {"kw": dict.fromkeys(keys, (True, 1.0))},
        {"rel": dict(zip(keys, [(True, 4.0), (False, nan), (False, 2.0)], strict=True))},
    )
    rel = next(m for m in load_report_data(run).metrics if m.metric == "rel")
    assert [(b.low, b.high, b.count) for b in rel.histogram] == [
        (1.5, 2.5, 1),
        (2.5, 3.5, 0),
        (3.5, 4.5, 1),
    ]


def test_repetitions_give_pass_at_k_and_flaky_rows(crafted: Path) -> None:
    """kw over 3 repetitions: a 3/3, b 1/3, c 0/1 (one error, one n/a): pass@1 = (1 + 1/3 + 0)/3;
    pass@3 over rows with 3 verdicts (a, b): (1 + 1)/2; pass^3: (1 + 0)/2; b is flaky."""
    report = load_report_data(crafted)
    kw = next(v for v in report.variability if v.metric == "kw")
    assert (kw.rows, kw.k, kw.rows_at_k) == (3, 3, 2)
    assert kw.pass_at_1 == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert kw.pass_at_k == pytest.approx(1.0)
    assert kw.pass_hat_k == pytest.approx(0.5)
    assert (kw.at_least_1, kw.all_k, kw.flaky) == (2, 1, 1)
    flaky = {(f.metric, f.row): f.stats for f in report.flaky}
    assert flaky[("kw", "b")].c == 1
    assert flaky[("kw", "b")].n == 3
    # relevance: a 2/3, b 1/3 are flaky; c 3/3 is not
    assert {row for metric, row in flaky if metric == "relevance"} == {"a", "b"}
    assert report.flaky_total == 3
    html = render_report(report)
    assert 'id="flaky-table"' in html
    assert "Flaky rows (3)" in html


def test_judge_vs_check_disagreement_both_ways(crafted: Path) -> None:
    """kw vs relevance over the 7 items with both verdicts: a#1 check pass/judge fail, c#0 check
    fail/judge pass; each listed with the judge's reason."""
    report = load_report_data(crafted)
    [d] = report.disagreements
    assert (d.agent, d.check, d.judge) == ("overall", "kw", "relevance")
    assert (d.pairs, d.check_pass_judge_fail, d.check_fail_judge_pass) == (7, 1, 1)
    assert d.agreement == pytest.approx(5 / 7)
    listed = {(e.item_id, e.check_passed, e.judge_passed) for e in d.examples}
    assert listed == {("a#1", True, False), ("c#0", False, True)}
    assert {e.judge_reason for e in d.examples} == {
        "relevance reason: not ok",
        "relevance reason: ok",
    }
    assert "check pass, judge fail" in render_report(report)


def test_no_disagreement_section_rows_without_a_judge(tmp_path: Path) -> None:
    """A run of checks only has nothing to disagree with, and says so."""
    run = write_run(tmp_path / "run", CHECKS)
    report = load_report_data(run)
    assert report.disagreements == []
    assert "No item has both a local check verdict and a judge verdict" in render_report(report)


def test_drill_down_puts_failures_first_and_says_what_is_omitted(crafted: Path) -> None:
    """max_items=2: the two shown are not-passed items; the note counts the 7 omitted."""
    # not passed by both providers: a#1, b#1, b#2, c#0 (a judge or check fail), c#1 (errored)
    report = load_report_data(crafted, max_items=2)
    assert report.items_total == 9
    assert report.items_not_passed == 5
    assert [i.item_id for i in report.items] == ["a#1", "b#1"]
    assert [i.verdict for i in report.items] == ["fail", "fail"]
    assert report.items_omitted == 7
    html = render_report(report)
    assert "7 items omitted from this report" in html
    assert html.count('<details class="item ') == 2


def test_item_detail_has_transcript_tool_calls_and_every_metric(crafted: Path) -> None:
    """An item's drill-down shows query, response, the tool call and its result, and each
    provider's metric with reason, rating and diagnostics."""
    report = load_report_data(crafted)
    item = next(i for i in report.items if i.item_id == "a#1")
    kinds = [p.kind for m in item.messages for p in m.parts]
    assert kinds == ["text", "call", "result", "text"]
    call = item.messages[1].parts[0]
    assert call.title == "lookup (call c1)"
    assert '"row": "a"' in call.body
    scores = {s.metric: s for s in item.scores}
    assert scores["relevance"].rating == "poor"
    assert scores["relevance"].diagnostics == [("informational", "relevance thought about it")]
    errored = next(i for i in report.items if i.item_id == "c#1")
    assert {s.metric: s.error_code for s in errored.scores}["kw"] == "CheckError"
    html = render_report(report)
    assert "relevance thought about it" in html
    assert "tool call" in html


def test_agent_text_is_escaped_in_the_html(crafted: Path) -> None:
    """A response and a suite name holding <script> appear as text, never as markup."""
    html = render_report(load_report_data(crafted))
    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_the_report_is_self_contained(crafted: Path, tmp_path: Path) -> None:
    """No script, stylesheet link, external image, font or import: it opens offline."""
    path = write_report(crafted, tmp_path / "out" / "r.html")
    html = path.read_text(encoding="utf-8")
    assert path.name == "r.html"
    for needle in ("<script", "<link", "@import", "url(", "<img", "<iframe", 'src="http'):
        assert needle not in html
    assert "<svg" in html
    assert write_report(crafted) == crafted / "report.html"


def test_report_of_a_directory_that_is_not_a_run_is_a_clear_error(tmp_path: Path) -> None:
    """No manifest: ArtifactError naming the directory."""
    with pytest.raises(ArtifactError, match=re.escape(str(tmp_path))):
        write_report(tmp_path)


def test_chromium_shows_agent_script_as_text_and_runs_nothing(crafted: Path, browser: Any) -> None:
    """Opened in headless Chromium: no dialog fires, the script shows as text, the sections and
    SVG plots are there, and <details> opens without JavaScript."""
    path = write_report(crafted, crafted / "report.html")
    page = browser.new_page(java_script_enabled=False)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(path.as_uri())
    assert page.title() == f"evalpipe report: suite {XSS}"
    assert page.locator("#suite-name").inner_text() == f"suite {XSS}"
    item = page.locator('details.item[data-item="b#1"]')
    item.locator("> summary").click()
    assert XSS in item.locator("pre.response").inner_text()
    assert page.locator("#metrics svg, #plots svg").count() >= 3
    assert page.locator("script").count() == 0
    page.close()
    # the same page with JavaScript on: still no dialog, since no script element exists
    page = browser.new_page()
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(path.as_uri())
    page.wait_for_timeout(200)
    assert page.evaluate("document.scripts.length") == 0
    page.close()
    assert dialogs == []


def test_large_run_drill_down_is_capped_with_failures_first(tmp_path: Path) -> None:
    """1,200 items with 171 failing (i % 7 == 3), max_items=40 (the many-items path): the 40 shown are
    failures in item order, the counts cover all items, and the file stays small."""
    keys = [(f"row{i:04d}", 0) for i in range(1200)]
    run = write_run(tmp_path / "big", {"kw": {k: (i % 7 != 3, 1.0) for i, k in enumerate(keys)}})
    report = load_report_data(run, max_items=40)
    assert (report.items_total, report.items_not_passed) == (1200, 171)
    assert [i.item_id for i in report.items] == [f"row{i:04d}#0" for i in range(3, 3 + 7 * 40, 7)]
    assert {i.verdict for i in report.items} == {"fail"}
    path = write_report(run, tmp_path / "big.html", max_items=40)
    html = path.read_text(encoding="utf-8")
    assert "1160 items omitted" in html
    assert html.count('<details class="item ') == 40
    assert path.stat().st_size < 300_000


def test_a_failed_target_call_is_errored_outside_every_denominator(tmp_path: Path) -> None:
    """Row b's call failed: its item has no metrics; it counts as errored on kw (left out of
    2 / 2), the totals say 1 errored call of 3, and the drill-down shows the call's error first."""
    keys = [("a", 0), ("b", 0), ("c", 0)]
    run = write_run(
        tmp_path / "run",
        {"kw": {k: (True, 1.0) for k in keys}},
        failed_calls=frozenset({("b", 0)}),
    )
    report = load_report_data(run)
    [kw] = report.metrics
    assert (kw.passed, kw.failed, kw.errored, kw.denominator) == (2, 0, 1, 2)
    assert kw.pass_rate is not None
    assert kw.pass_rate.estimate == 1.0
    assert (report.calls, report.calls_errored) == (3, 1)
    first = report.items[0]
    assert (first.item_id, first.verdict, first.error_code) == ("b#0", "error", "AgentError")
    assert [(s.metric, s.error_code) for s in first.scores] == [(None, "AgentError")]
    html = render_report(report)
    assert "1 errored of 3" in html
    assert "RuntimeError: call b#0 &lt;failed&gt;" in html
    assert "2 / 2 (1 errored of 3 left out)" in html


def test_scores_of_items_missing_from_items_parquet_are_named_by_their_id(tmp_path: Path) -> None:
    """Both providers fail "ghost", an item they were not given: its rows are named by its id,
    the metrics keep their kinds, the report's disagreements are those of the scored rows, and
    it is counted (and listed first: it is not passed)."""
    from evalpipe.artifacts.reader import records
    from evalpipe.report.data import metric_kinds, query_disagreements, scored_connection

    run = write_run(tmp_path / "run", CHECKS, JUDGES, ghosts=["ghost"])
    con = scored_connection(run)
    try:
        rows = [
            (r["provider"], r["metric"], r["row"], r["repetition"], r["status"])
            for r in records(con, "SELECT * FROM scored ORDER BY _pos")
        ]
        counted = [
            (d.agent, d.check, d.judge, d.pairs, d.check_pass_judge_fail, d.check_fail_judge_pass)
            for d in query_disagreements(con, metric_kinds(con), 20)
        ]
    finally:
        con.close()
    assert ("Judge", "relevance", "ghost", 0, "fail") in rows
    assert ("Local", "kw", "ghost", 0, "fail") in rows
    report = load_report_data(run)
    assert {m.metric: m.kind for m in report.metrics} == {"kw": "check", "relevance": "judge"}
    assert counted
    assert [
        (d.agent, d.check, d.judge, d.pairs, d.check_pass_judge_fail, d.check_fail_judge_pass)
        for d in report.disagreements
    ] == counted
    assert (report.items_total, report.items_not_passed) == (10, 6)
    assert report.items[0].item_id == "ghost"
    assert report.items[0].row == "ghost"


def test_the_runs_spend_and_limit_history_are_shown_escaped(tmp_path: Path) -> None:
    """manifest.json's spend (totals, by model, budget) and its endpoints' limit changes are in
    the report (and so on evalpipe view's run page), as text; a malformed part is left out."""
    spend = {
        "tokens": 1500,
        "cost_usd": 0.0021,
        "calls": 12,
        "by_model": [
            {"kind": "judge", "model": XSS, "calls": 4, "unreported": 0, "input_tokens": 160,
             "output_tokens": 40, "tokens": 200, "cost_usd": 0.0005},
            {"kind": "target", "model": "agent", "calls": 8, "unreported": 0,
             "input_tokens": 1040, "output_tokens": 260, "tokens": 1300, "cost_usd": 0.0016},
        ],
        "budget": {"tokens": 5000, "cost_usd": None},
        "earlier": {"tokens": 0, "cost_usd": 0, "calls": 0, "by_model": []},
    }  # fmt: skip
    change = {"at": "2026-01-01T00:00:00.000+00:00", "endpoint": "http://j/v1/chat/completions",
              "model": "judge", "before": 20, "limit": 16, "reason": "rate limited",
              "in_flight": 20}  # fmt: skip
    run = write_run(
        tmp_path / "run",
        CHECKS,
        manifest={"spend": spend, "concurrency": {"limit": 32, "adaptive": True,
                                                  "changes": [change, {"at": 1}]}},
    )  # fmt: skip
    report = load_report_data(run)
    assert report.spend_text == (
        "1,500 tokens (target 1,300, judges 200), $0.0021 of a budget of 5,000 tokens"
    )
    assert report.limit_changes == [change]
    html = render_report(report)
    assert XSS not in html
    assert "&lt;script&gt;" in html
    assert 'id="spend"' in html
    assert "http://j/v1/chat/completions (model judge) answered 429" in html
    broken = write_run(tmp_path / "broken", CHECKS, manifest={"spend": {"by_model": [{}]}})
    assert load_report_data(broken).spend is None
