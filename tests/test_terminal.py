"""What evalpipe prints, at 80, 100 and 160 columns: every table (run/results, eval, compare, cache
stats) keeps every agent, metric and count on screen, and no line is wider than the console."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from evalpipe.artifacts import RunRecord, RunWriter, read_summary
from evalpipe.cli import main
from evalpipe.runner import run_in_process
from evalpipe.runner.prepare import prepare_suite
from evalpipe.suite import load_suite
from evalpipe.tally import CallTally

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (80, 100, 160)


def write_suite_run(suite_file: Path, run_dir: Path) -> Path:
    """A finished run of a suite's workflow, made in this process by the runner and written by
    the real RunWriter (what `evalpipe run` writes, without Prefect)."""
    suite = load_suite(suite_file)
    suite.output_dir = str(run_dir.parent)
    plan = prepare_suite(suite, None)
    shard = asyncio.run(run_in_process(plan, max_concurrency=8))
    calls = CallTally()
    with RunWriter(run_dir) as writer:
        writer.add_runs(
            RunRecord.from_target_run(
                o.run, run_id=o.call.key, row_id=plan.rows[o.call.row_index].id
            )
            for o in shard.outcomes
        )
        for o in shard.outcomes:
            calls.add(o.source, o.run)
        writer.add_results(shard.results)
        writer.finish({"suite": suite.model_dump(mode="json"), "calls": calls.as_dict()})
    return run_dir


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The demo workflow suite (two providers, four agents) and the canary suite (known-bad)."""
    base = tmp_path_factory.mktemp("runs")
    demo = write_suite_run(ROOT / "examples/travel/suite.yaml", base / "demo")
    canary = write_suite_run(ROOT / "examples/travel/canary.yaml", base / "canary")
    return demo, canary


def _render(
    argv: list[str], width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    main(argv)
    out = capsys.readouterr().out
    too_wide = [line for line in out.splitlines() if len(line) > width]
    assert not too_wide, f"wider than {width} columns: {too_wide}"
    return out


def _in_order(text: str, patterns: list[str]) -> None:
    """Each pattern matches a line, in this order (a line after the previous pattern's line)."""
    lines = text.splitlines()
    at = 0
    for pattern in patterns:
        for index in range(at, len(lines)):
            if re.search(pattern, lines[index]):
                at = index + 1
                break
        else:
            raise AssertionError(f"no line matches {pattern!r} after line {at}:\n{text}")


def _summary_lines(run_dir: Path) -> list[str]:
    """A pattern per summary row: the agent line with its item counts, then each metric line."""
    patterns = []
    for row in read_summary(run_dir):
        counts = rf"\s+{row.n}\s+{row.passed}\s+{row.failed}\s+{row.errored}"
        if row.kind == "result":
            patterns.append(rf"^{re.escape(row.agent)}{counts}\s+{re.escape(row.rate_text)}")
        else:
            value = "-" if row.score_mean is None else f"{row.score_mean:.3f}"
            patterns.append(
                rf"^  {re.escape(row.metric or '')}{counts}\s+{row.not_applicable}\s+"
                rf"{re.escape(row.rate_text)}\s+{re.escape(value)}$"
            )
    return patterns


@pytest.mark.parametrize("width", WIDTHS)
def test_results_shows_every_agent_metric_and_count(
    width: int,
    demo_runs: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`evalpipe results` (what `evalpipe run` prints) of the demo workflow: a table per provider,
    each agent's line and each metric's line with every count, in order, within the width."""
    demo, _ = demo_runs
    out = _render(["results", str(demo)], width, monkeypatch, capsys)
    rows = read_summary(demo)
    assert {r.agent for r in rows} == {"overall", "planner", "researcher", "writer"}
    _in_order(out, ["^Local", *_summary_lines(demo)[:16]])
    _in_order(out, [r"^Local \(researcher, overall\)", *_summary_lines(demo)[16:]])
    assert "task_navigation_efficiency" in out


@pytest.mark.parametrize("width", WIDTHS)
def test_failures_show_query_response_and_where_the_rest_is(
    width: int,
    demo_runs: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The items that did not pass come with why (whole, wrapped), their query and their response
    on one line each, and a capped list says how many more and where they are."""
    _, canary = demo_runs
    out = _render(["results", str(canary)], width, monkeypatch, capsys)
    _in_order(
        out,
        [
            r"^travel-canary — researcher \(Local\): 4 of 5 items did not pass:",
            r"^  trip-paris \(rep 0\) \[fail\]$",
            r"^      why:      tool_call_args_match: ",
            r"^      query:    Plan a trip to Paris$",
            r"^      response: ",
        ],
    )
    assert "more not shown" not in out  # 5 or fewer per result: all listed
    demo, _ = demo_runs
    out = _render(["results", str(demo)], width, monkeypatch, capsys)
    _in_order(
        out,
        [
            r"^travel-demo — writer \(Local\): 9 of 15 items did not pass; the first 5:",
            r"^  \.\.\. and 4 more not shown: every item is in ",
        ],
    )
    # the reason says what was missing, whatever the width (what the check looked for is last)
    flat = " ".join(out.split())
    assert "mentions_expected: the response does not mention '22°C'" in flat
    assert str(demo / "scores.parquet") in out.replace("\n", "")


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_shows_every_agent_metric_and_count(
    width: int,
    demo_runs: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`evalpipe compare` of the demo against the canary: per provider a verdicts table and a
    scores table, with each agent and each metric's pairs, pass rates and flips."""
    from evalpipe.report import compare_runs

    demo, canary = demo_runs
    out = _render(["compare", str(demo), str(canary)], width, monkeypatch, capsys)
    comparison = compare_runs(demo, canary)
    assert comparison.regressions > 0
    patterns = []
    agent = None
    for m in comparison.metrics:
        if m.provider == "Local" and m.agent != agent:
            agent = m.agent
            patterns.append(rf"^{re.escape(m.agent)}\s*$")
        if m.provider == "Local":
            patterns.append(
                rf"^  {m.metric}\s+{m.pairs}\s+\S+ \({m.a_passed}/{m.a_denominator}\)\s+"
                rf"\S+ \({m.b_passed}/{m.b_denominator}\)\s+{m.regressions}\s+{m.improvements}"
                rf"\s+{m.newly_errored}$"
            )
    _in_order(out, ["^Local: verdicts, B against A", *patterns])
    _in_order(out, [r"^Local \(researcher, overall\): verdicts", r"^  task_navigation_efficiency"])
    assert f"{comparison.regressions} regression(s)" in out


@pytest.mark.parametrize("width", WIDTHS)
def test_eval_shows_every_metric_and_count(
    width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evalpipe eval` of the demo agent: the agent's line and each check's line with its counts."""
    monkeypatch.chdir(ROOT)
    argv = [
        "eval",
        "--agent",
        "evalpipe.targets.demo:travel_agent",
        "--queries",
        "examples/travel/queries.jsonl",
        "--check",
        "tool_calls_present",
        "--check",
        "examples.travel.checks:mentions_expected",
    ]
    out = _render(argv, width, monkeypatch, capsys)
    _in_order(
        out,
        [
            r"^Local",
            r"^overall\s+8\s+7\s+1\s+0\s+87\.5% \(7 of 8\)",
            r"^  tool_calls_present\s+8\s+7\s+1\s+0\s+0\s+87\.5% \(7 of 8\)\s+0\.875$",
            r"^  mentions_expected\s+8\s+7\s+1\s+0\s+0\s+87\.5% \(7 of 8\)\s+0\.875$",
            r"1 of 8 items did not pass:",
            r"^      query:    Is it warm in Tokyo today\?$",
        ],
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_cache_stats_is_a_table_of_counts(
    width: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evalpipe cache stats` names the directory (wrapped when the terminal is narrower than the
    path) and lines up each count."""
    from datetime import timedelta

    from evalpipe.cache import ResponseCache

    ResponseCache(tmp_path, ttl=timedelta(days=1)).put({"model": "m"}, {"choices": []})
    out = _render(["cache", "stats", str(tmp_path)], width, monkeypatch, capsys)
    title = out.split("\nentries", 1)[0]
    assert re.sub(r"\s+", "", title) == f"responsecache{tmp_path}"  # the path has no spaces
    _in_order(
        out,
        [
            r"^response cache",
            r"^entries\s+1\s*$",
            r"^expired\s+0\s*$",
            r"^unreadable\s+0\s*$",
            r"^bytes\s+[\d,]+ bytes\s*$",
            r"^oldest\s+\d{4}-",
        ],
    )


def test_output_that_is_not_a_terminal_honours_columns_else_120(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Consoles of output that is not a terminal take COLUMNS, and 120 columns without it."""
    from evalpipe.cli._common import consoles

    monkeypatch.setenv("COLUMNS", "93")
    out, err = consoles()
    assert (out.width, err.width) == (93, 93)
    monkeypatch.delenv("COLUMNS")
    out, err = consoles()
    assert (out.width, err.width) == (120, 120)


def test_each_call_has_its_utc_start_and_end_in_runs_parquet(demo_runs: tuple[Path, Path]) -> None:
    """runs.parquet: every call made has started_at <= ended_at (UTC), ended - started = latency."""
    import pyarrow.parquet as pq

    demo, _ = demo_runs
    runs = pq.read_table(demo / "runs.parquet").to_pylist()
    assert len(runs) == 15
    for call in runs:
        assert call["started_at"].utcoffset().total_seconds() == 0
        assert call["started_at"] <= call["ended_at"]
        span = (call["ended_at"] - call["started_at"]).total_seconds()
        assert abs(span - call["latency_s"]) < 1e-3
