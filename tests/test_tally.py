"""The tally: statuses, counts, pass rates with their denominators, merging and summary rows."""

from __future__ import annotations

import math

from evalpipe import EvalResults, Message, evaluate_agent, keyword_check
from evalpipe.results import Diagnostic, EvalItemResult, EvalScoreResult
from evalpipe.tally import (
    NOT_APPLICABLE,
    CallTally,
    Counts,
    LevelsFold,
    count_results,
    fold_levels,
    item_status,
    merge_results,
    rate_text,
    score_status,
    score_statuses,
    summary_rows,
)
from evalpipe.transcripts import RunUsage, TargetRun


def test_score_status_rules() -> None:
    """Errors (code, message or error diagnostic) and empty scores are errors; n/a is its label."""
    assert score_status(EvalScoreResult("m", 1.0, True)) == "pass"
    assert score_status(EvalScoreResult("m", 0.0, False)) == "fail"
    assert score_status(EvalScoreResult("m", None, None, error_code="JudgeParseError")) == "error"
    assert score_status(EvalScoreResult("m", None, None, error_message="boom")) == "error"
    flagged = EvalScoreResult("m", 3.0, True, diagnostics=[Diagnostic("error", "bad")])
    assert score_status(flagged) == "error"
    assert score_status(EvalScoreResult("m", None, None)) == "error"
    assert score_status(EvalScoreResult("m", None, None, label=NOT_APPLICABLE)) == NOT_APPLICABLE
    assert score_status(EvalScoreResult("m", 0.7, None)) == NOT_APPLICABLE


def test_item_status_rules() -> None:
    """Any error wins, then any fail; no metric fails (MAF's zero checks); all n/a is an error."""
    ok, bad = EvalScoreResult("a", 1.0, True), EvalScoreResult("b", 0.0, False)
    broken = EvalScoreResult("c", None, None, error_code="X")
    na = EvalScoreResult("d", None, None, label=NOT_APPLICABLE)
    assert item_status([ok, na]) == "pass"
    assert item_status([ok, bad]) == "fail"
    assert item_status([bad, broken]) == "error"
    assert item_status([]) == "fail"
    assert item_status([], empty="error") == "error"
    assert item_status([na, na]) == "error"
    assert item_status([ok], errored=True) == "error"
    component = EvalScoreResult("part", 0.0, False, evaluator="composite")
    assert item_status([ok, component]) == "pass"


def test_counts_name_their_denominator() -> None:
    """n counts everything; the pass rate divides by passed + failed only."""
    counts = Counts(passed=8, failed=2, errored=3, not_applicable=1)
    assert (counts.n, counts.denominator, counts.pass_rate) == (14, 10, 0.8)
    assert Counts().pass_rate is None
    assert rate_text(8, 2, 3, 1) == "80.0% (8 of 10; 3 errored, 1 n/a left out)"
    assert rate_text(0, 0, 5) == "- (0 of 0; 5 errored left out)"
    assert rate_text(1, 1) == "50.0% (1 of 2)"


def test_count_results_counts_unscored_errors_on_every_metric() -> None:
    """An item errored before any metric ran is errored on each named metric."""
    items = [
        EvalItemResult(
            "0", "pass", [EvalScoreResult("m", 1.0, True), EvalScoreResult("k", 1, True)]
        ),
        EvalItemResult(
            "1", "fail", [EvalScoreResult("m", 0.0, False), EvalScoreResult("k", 1, True)]
        ),
        EvalItemResult("2", "error", error_code="AgentError"),
        EvalItemResult("3", "errored", [EvalScoreResult("m", None, None, label=NOT_APPLICABLE)]),
    ]
    counts, per = count_results(items, ["m", "k"])
    assert counts == {"passed": 1, "failed": 1, "errored": 2}
    assert per["m"] == {"passed": 1, "failed": 1, "errored": 1, NOT_APPLICABLE: 1}
    assert per["k"] == {"passed": 2, "failed": 0, "errored": 1}


def _batch(status: str, passed: int, run_id: str, error: str | None = None) -> EvalResults:
    return EvalResults(
        provider="P",
        run_id=run_id,
        status=status,
        result_counts={"passed": passed, "failed": 0, "errored": 1},
        per_evaluator={"m": {"passed": passed, "failed": 0, "errored": 1}},
        items=[EvalItemResult(run_id, "pass")],
        error=error,
    )


def test_merge_has_one_status_rule() -> None:
    """One status: common, else partial when a batch completed, else the worst; counts add up."""
    merged = merge_results([_batch("completed", 2, "r1"), _batch("canceled", 1, "r2", "gone")])
    assert merged.status == "partial"
    assert merged.result_counts == {"passed": 3, "failed": 0, "errored": 2}
    assert merged.per_evaluator == {"m": {"passed": 3, "failed": 0, "errored": 2}}
    assert [i.item_id for i in merged.items] == ["r1", "r2"]
    assert merged.error == "gone"
    assert (
        merge_results([_batch("canceled", 1, "a"), _batch("timeout", 1, "b")]).status == "timeout"
    )
    assert merge_results([_batch("failed", 1, "a"), _batch("timeout", 1, "b")]).status == "failed"
    assert merge_results([_batch("completed", 1, "a"), _batch("completed", 1, "b")]).status == (
        "completed"
    )


def test_summary_rows_count_items_and_metrics_per_agent() -> None:
    """Result rows count items; metric rows count scores plus items errored before any metric."""
    results = EvalResults(
        provider="Local",
        run_id="s",
        items=[
            EvalItemResult("0", "pass", [EvalScoreResult("m", 0.9, True)]),
            EvalItemResult("1", "fail", [EvalScoreResult("m", 0.2, False)]),
            EvalItemResult("2", "error", error_code="AgentError"),
        ],
        sub_results={
            "writer": EvalResults(
                provider="Local",
                run_id="s — writer",
                items=[EvalItemResult("0/w", "fail", [EvalScoreResult("m", 0.0, False)])],
            )
        },
    )
    rows = summary_rows([results])
    got = [(r.kind, r.agent, r.metric, r.n, r.passed, r.failed, r.errored) for r in rows]
    assert got == [
        ("result", "overall", None, 3, 1, 1, 1),
        ("metric", "overall", "m", 3, 1, 1, 1),
        ("result", "writer", None, 1, 0, 1, 0),
        ("metric", "writer", "m", 1, 0, 1, 0),
    ]
    metric = rows[1]
    assert metric.pass_rate == 0.5
    assert metric.pass_rate_denominator == 2
    assert metric.score_mean is not None
    assert abs(metric.score_mean - 0.55) < 1e-9
    assert metric.rate_text == "50.0% (1 of 2; 1 errored left out)"


def test_call_tally_tells_made_from_reused_and_recorded() -> None:
    """Calls made, reused and recorded are counted apart; latency and tokens are of calls made."""
    tally = CallTally()
    for i in range(1, 21):
        run = TargetRun(
            query_index=i,
            repetition=0,
            query="q",
            usage=RunUsage(latency_seconds=float(i), total_tokens=10),
        )
        tally.add("made", run)
    tally.add(
        "reused", TargetRun(query_index=0, repetition=1, query="q", usage=RunUsage(total_tokens=99))
    )
    tally.add("recorded", TargetRun(query_index=0, repetition=0, query="q", error_code="X"))
    data = tally.as_dict()
    assert (data["total"], data["made"], data["reused"], data["recorded"], data["errored"]) == (
        22,
        20,
        1,
        1,
        1,
    )
    assert (data["latency_p50_s"], data["latency_p95_s"], data["total_tokens"]) == (10.0, 19.0, 200)
    assert CallTally.text(data) == (
        "target calls: 20 made, 1 reused (not called again), 1 recorded (no target called); "
        "1 errored"
    )


async def test_summary_of_a_real_evaluation() -> None:
    """Summary rows of evaluate_agent output count the same items the results do."""
    [res] = await evaluate_agent(
        queries=["a", "b"],
        responses=[[Message("assistant", ["yes"])], [Message("assistant", ["no"])]],
        evaluators=keyword_check("yes"),
    )
    metric = next(r for r in summary_rows([res]) if r.kind == "metric")
    assert (metric.passed, metric.failed) == (res.passed, res.failed) == (1, 1)


def test_summary_metric_counts_follow_score_status_for_every_kind_of_score() -> None:
    """SummaryTally counts each metric's scores by score_status (plain verdicts counted on the
    fast path, errors, labels, diagnostics and no-verdict scores by the rule) and items by status."""
    scores = [
        EvalScoreResult("m", 1.0, passed=True),
        EvalScoreResult("m", 0.0, passed=False),
        EvalScoreResult("m", 0.0, passed=False, diagnostics=[]),
        EvalScoreResult("m", None, passed=True, error_code="E"),
        EvalScoreResult("m", None, passed=False, error_message="boom"),
        EvalScoreResult("m", 0.5, passed=None),
        EvalScoreResult("m", None, passed=None),
        EvalScoreResult("m", 1.0, passed=True, label=NOT_APPLICABLE),
        EvalScoreResult("m", 1.0, passed=True, diagnostics=[Diagnostic("error", "x")]),
        EvalScoreResult("m", 1.0, passed=True, diagnostics=[Diagnostic("warning", "y")]),
    ]
    statuses = [
        "pass",
        "fail",
        "error",
        "errored",
        "weird",
        "pass",
        "fail",
        "pass",
        "error",
        "pass",
    ]
    items = [
        EvalItemResult(item_id=str(k), status=status, scores=[score])
        for k, (score, status) in enumerate(zip(scores, statuses, strict=True))
    ]
    items.append(EvalItemResult(item_id="none", status="error", scores=[]))
    rows = summary_rows([EvalResults(provider="P", items=items)])
    expected = Counts()
    expected.add_all(score_statuses(scores))
    result, metric = rows
    assert (result.passed, result.failed, result.errored) == (4, 2, 5)
    assert (metric.passed, metric.failed, metric.not_applicable) == (
        expected.passed,
        expected.failed,
        expected.not_applicable,
    )
    assert metric.errored == expected.errored + 1  # the item without scores that errored
    assert metric.score_count == 7


def test_summary_score_statistics_are_those_of_adding_scores_one_by_one() -> None:
    """A metric's count, mean, std, min and max over batches are bit for bit what adding its
    scores one at a time gives (Welford's update in item order; None and NaN scores skipped)."""
    from evalpipe.tally import SummaryTally, _MetricAgg

    values: list[float | None] = [0.1, 0.7, None, 0.3, float("nan"), 1e-9, 0.9, -0.0, 0.0, 0.25]
    batches = [values[:4], values[4:], values[:3]]
    tally = SummaryTally()
    reference = _MetricAgg()
    for batch in batches:
        items = [
            EvalItemResult(
                item_id=str(k), status="pass", scores=[EvalScoreResult("m", v, passed=True)]
            )
            for k, v in enumerate(batch)
        ]
        tally.add([EvalResults(provider="P", items=items)])
        for v in batch:
            reference.add_many(["pass"], [] if v is None or math.isnan(v) else [v])
    metric = tally.rows()[1]
    assert metric.score_count == reference.count == 10
    assert metric.score_mean == reference.mean
    assert metric.score_min == reference.low
    assert metric.score_max == reference.high
    assert metric.score_std == math.sqrt(reference.m2 / (reference.count - 1))
    assert metric.passed == 13


def test_the_gates_fold_classifies_each_item_once_by_the_tally_rules() -> None:
    """fold_levels keeps, per provider, agent and metric, the computed scores with their items'
    labels, the items errored on the metric (its scores errored, or the item could not be
    evaluated and lacks it), the skipped ones, and the items with errors in order."""
    items = [
        EvalItemResult("a", "pass", [EvalScoreResult("m", 4.0, passed=True)]),
        EvalItemResult("b", "error", [EvalScoreResult("m", None, error_code="Timeout")]),
        EvalItemResult("c", "error", [], error_code="AgentError"),
        EvalItemResult("d", "fail", [EvalScoreResult("m", None, label="not_applicable")]),
        EvalItemResult("e", "fail", [EvalScoreResult("m", 1.0, passed=False)]),
    ]
    sub = EvalResults(provider="P", items=[EvalItemResult("x", "pass", [])])
    top = EvalResults(provider="P", items=items, sub_results={"writer": sub})
    [level, writer] = fold_levels([top])
    assert (level.label, writer.label) == ("", "writer")
    fold = level.metrics["m"]
    assert fold.labels == ["a", "e"]
    assert fold.values == [4.0, 1.0]
    assert fold.statuses == ["pass", "fail"]
    assert fold.passed == [True, False]
    assert fold.not_applicable == 1
    assert level.errored_on("m") == 2  # b's score errored; c could not be evaluated, lacks m
    assert level.items == 5
    assert [(e.label, e.is_error, e.errored) for e in level.errors] == [
        ("b", True, (("m", "Timeout"),)),
        ("c", True, ()),
    ]
    assert writer.items == 1
    assert writer.metrics == {}


def _shard(first: int, statuses: list[str], *, agent: str | None, status: str) -> EvalResults:
    items = [
        EvalItemResult(
            f"r{first + i}",
            s,
            [EvalScoreResult("m", float(first + i), passed=s == "pass")]
            if s != "error"
            else [EvalScoreResult("m", None, error_code="Timeout")],
        )
        for i, s in enumerate(statuses)
    ]
    subs = {} if agent is None else {agent: EvalResults(provider="P", items=items[:1])}
    counts, per_metric = count_results(items)
    return EvalResults(
        provider="P",
        run_id="run",
        status=status,
        result_counts=counts,
        per_evaluator=per_metric,
        items=items,
        sub_results=subs,
    )


def test_the_gates_fold_merged_shard_by_shard_is_the_fold_of_the_merged_results() -> None:
    """LevelsFold.add per shard gives fold_levels(merge_results(shards)): the same levels in the
    same walk order (an agent first seen in a later shard included), merged statuses, values,
    labels and errors."""
    shards = [
        _shard(0, ["pass", "fail"], agent="writer", status="completed"),
        _shard(2, ["error", "pass"], agent="critic", status="failed"),
        _shard(4, ["fail"], agent="writer", status="completed"),
    ]
    expected = fold_levels([merge_results(shards)])
    fold = LevelsFold()
    for shard in shards:
        fold.add([shard])
    assert fold.levels == expected
    assert [level.label for level in fold.levels] == ["", "writer", "critic"]
    assert fold.levels[0].status == "partial"
    assert fold.levels[0].metrics["m"].values == [0.0, 1.0, 3.0, 4.0]
    assert fold.levels[0].errored_on("m") == 1


def test_a_summary_row_passes_as_its_results_do() -> None:
    """A result row's ``all_passed`` is ``EvalResults.all_passed`` read from the summary: no
    items, a failed or errored item, or a provider that did not complete is not a pass."""
    from evalpipe.tally import SummaryTally, make_results

    def row(*results: EvalResults) -> bool:
        tally = SummaryTally()
        tally.add(list(results))
        [result_row] = [r for r in tally.rows() if r.kind == "result"]
        assert result_row.all_passed == all(r.all_passed for r in results)
        return result_row.all_passed

    def item(status: str) -> EvalItemResult:
        passed = status == "pass"
        return EvalItemResult("1", status, [EvalScoreResult("m", float(passed), passed=passed)])

    assert row(make_results("P", items=[item("pass")]))
    assert not row(make_results("P", items=[]))
    assert not row(make_results("P", items=[item("pass"), item("fail")]))
    assert not row(make_results("P", items=[item("error")]))
    assert not row(make_results("P", status="failed", items=[item("pass")]))
