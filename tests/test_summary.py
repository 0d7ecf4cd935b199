"""Summary rows and run statistics computed from EvalResults."""

from __future__ import annotations

from evalpipe import EvalItem, EvalResults, Message, RunUsage, evaluate_agent, keyword_check
from evalpipe.results import EvalItemResult, EvalScoreResult
from evalpipe.summary import run_stats, summarize


def test_summarize_counts_and_means_per_metric() -> None:
    """One row per provider × agent × metric, with counts and the mean of existing scores."""
    results = EvalResults(
        provider="Local",
        result_counts={"passed": 1, "failed": 1, "errored": 1},
        per_evaluator={"m": {"passed": 1, "failed": 1, "errored": 1}},
        items=[
            EvalItemResult("0", "pass", [EvalScoreResult("m", 0.9, True)]),
            EvalItemResult("1", "fail", [EvalScoreResult("m", 0.2, False)]),
            EvalItemResult("2", "error", [EvalScoreResult("m", None)]),
        ],
        sub_results={
            "writer": EvalResults(
                provider="Local", per_evaluator={"m": {"passed": 0, "failed": 2, "errored": 0}}
            )
        },
    )
    rows = summarize([results])
    assert [(r.agent, r.metric, r.passed, r.failed, r.errored) for r in rows] == [
        ("overall", "m", 1, 1, 1),
        ("writer", "m", 0, 2, 0),
    ]
    assert rows[0].mean_score is not None
    assert abs(rows[0].mean_score - 0.55) < 1e-9
    assert rows[0].pass_rate == 0.5
    assert rows[1].mean_score is None


def test_run_stats_nearest_rank_quantiles() -> None:
    """Latency p50/p95 use the nearest rank; tokens sum over items that report them."""
    items = [
        EvalItem(
            [Message("user", ["q"])], usage=RunUsage(latency_seconds=float(i), total_tokens=10)
        )
        for i in range(1, 21)
    ]
    items.append(EvalItem([Message("user", ["q"])], error_code="AgentError"))
    stats = run_stats(items)
    assert (stats.runs, stats.errored) == (21, 1)
    assert stats.latency_p50 == 10.0
    assert stats.latency_p95 == 19.0
    assert stats.total_tokens == 200


async def test_summary_of_a_real_evaluation() -> None:
    """Summaries of evaluate_agent output count the same items the results do."""
    [res] = await evaluate_agent(
        queries=["a", "b"],
        responses=[[Message("assistant", ["yes"])], [Message("assistant", ["no"])]],
        evaluators=keyword_check("yes"),
    )
    [row] = summarize([res])
    assert (row.passed, row.failed) == (1, 1)
