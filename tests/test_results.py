"""EvalResults counting, all_passed, raise_for_status and the assert_* helpers (spec §7)."""

from __future__ import annotations

from typing import Any

import pytest

from evalpipe import (
    EvalItemResult,
    EvalNotPassedError,
    EvalResults,
    EvalScoreResult,
    RubricScore,
)


def counts(passed: int = 0, failed: int = 0, errored: int = 0) -> dict[str, int]:
    return {"passed": passed, "failed": failed, "errored": errored}


def ok_run(run_id: str = "sub") -> EvalResults:
    return EvalResults(provider="Local", run_id=run_id, result_counts=counts(passed=1))


def bad_run(run_id: str = "sub") -> EvalResults:
    return EvalResults(provider="Local", run_id=run_id, result_counts=counts(failed=1))


# --------------------------------------------------------------------------------------------
# Construction, counts


def test_eval_results_is_keyword_only() -> None:
    """EvalResults takes keyword arguments only."""
    with pytest.raises(TypeError):
        EvalResults("Local")  # type: ignore[misc]


def test_none_collections_default_to_empty() -> None:
    """None for per_evaluator/items/sub_results becomes {} / [] / {}; result_counts stays None."""
    r = EvalResults(provider="p", per_evaluator=None, items=None, sub_results=None)
    assert r.per_evaluator == {}
    assert r.items == []
    assert r.sub_results == {}
    assert r.result_counts is None
    assert (r.eval_id, r.run_id, r.status, r.report_url, r.error) == (
        "",
        "",
        "completed",
        None,
        None,
    )


def test_missing_collections_default_to_empty_and_are_independent() -> None:
    """Default collections are fresh per instance."""
    a, b = EvalResults(provider="p"), EvalResults(provider="p")
    a.items.append(EvalItemResult(item_id="0", status="pass"))
    assert b.items == []


@pytest.mark.parametrize(
    ("result_counts", "passed", "failed", "errored", "total"),
    [
        (None, 0, 0, 0, 0),
        ({}, 0, 0, 0, 0),
        ({"passed": 3, "failed": 2, "errored": 4}, 3, 2, 4, 5),
        ({"passed": 1, "failed": 1, "errored": 1, "total": 99}, 1, 1, 1, 2),
        ({"errored": 2}, 0, 0, 2, 0),
    ],
)
def test_counts_and_total(
    result_counts: dict[str, int] | None, passed: int, failed: int, errored: int, total: int
) -> None:
    """passed/failed/errored read result_counts (missing = 0); total = passed + failed only."""
    r = EvalResults(provider="p", result_counts=result_counts)
    assert (r.passed, r.failed, r.errored, r.total) == (passed, failed, errored, total)


def test_item_result_status_properties() -> None:
    """is_error covers "error" and "errored"; is_passed/is_failed match exact statuses."""
    table = {
        "pass": (False, True, False),
        "fail": (False, False, True),
        "error": (True, False, False),
        "errored": (True, False, False),
    }
    for status, expected in table.items():
        i = EvalItemResult(item_id="x", status=status)
        assert (i.is_error, i.is_passed, i.is_failed) == expected


def test_score_result_positional_construction() -> None:
    """EvalScoreResult(name, score, passed, sample, dimensions) works positionally."""
    dims = [RubricScore("clarity", 4, True, 1, "clear")]
    s = EvalScoreResult("relevance", 0.8, True, {"reason": "ok"}, dims)
    assert (s.name, s.score, s.passed, s.sample, s.dimensions) == (
        "relevance",
        0.8,
        True,
        {"reason": "ok"},
        dims,
    )
    assert EvalScoreResult("x", 0.0).passed is None


def test_rubric_score_is_frozen() -> None:
    """RubricScore is an immutable dataclass."""
    rs = RubricScore("clarity", 3, True, 2, "ok")
    with pytest.raises(AttributeError):
        rs.score = 5  # type: ignore[misc]


# --------------------------------------------------------------------------------------------
# all_passed


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"result_counts": counts(passed=2)}, True),
        ({"result_counts": counts(passed=2, failed=1)}, False),
        ({"result_counts": counts(passed=2, errored=1)}, False),
        ({"result_counts": counts()}, False),
        ({"result_counts": None}, False),
        ({"result_counts": counts(passed=2), "status": "failed"}, False),
        ({"result_counts": counts(passed=2), "status": "timeout"}, False),
        ({"result_counts": counts(passed=2), "status": "partial"}, False),
        ({"result_counts": {"passed": 1}}, True),
    ],
    ids=[
        "all_pass",
        "one_failed",
        "one_errored",
        "empty_run",
        "no_counts",
        "status_failed",
        "status_timeout",
        "status_partial",
        "no_errored_key",
    ],
)
def test_all_passed_without_sub_results(kwargs: dict[str, Any], expected: bool) -> None:
    """all_passed needs status completed, no failures or errors and at least one item."""
    assert EvalResults(provider="p", **kwargs).all_passed is expected


@pytest.mark.parametrize(
    ("own_counts", "subs", "status", "expected"),
    [
        (None, [ok_run(), ok_run()], "completed", True),
        (None, [ok_run(), bad_run()], "completed", False),
        (counts(passed=1), [ok_run()], "completed", True),
        (counts(passed=1, failed=1), [ok_run()], "completed", False),
        (counts(passed=1, errored=1), [ok_run()], "completed", False),
        (counts(), [ok_run()], "completed", False),
        (counts(passed=1), [bad_run()], "completed", False),
        (None, [ok_run()], "partial", False),
        (None, [EvalResults(provider="p", result_counts=counts())], "completed", False),
        (
            None,
            [EvalResults(provider="p", result_counts=counts(passed=1), status="timeout")],
            "completed",
            False,
        ),
    ],
    ids=[
        "no_own_counts_subs_pass",
        "no_own_counts_one_sub_fails",
        "own_pass_subs_pass",
        "own_failed",
        "own_errored",
        "own_empty",
        "own_pass_sub_fails",
        "not_completed",
        "sub_empty",
        "sub_timeout",
    ],
)
def test_all_passed_with_sub_results(
    own_counts: dict[str, int] | None, subs: list[EvalResults], status: str, expected: bool
) -> None:
    """With sub_results, own counts (if any) and every sub-result must pass."""
    r = EvalResults(
        provider="p",
        status=status,
        result_counts=own_counts,
        sub_results={f"agent{i}": s for i, s in enumerate(subs)},
    )
    assert r.all_passed is expected


def test_all_passed_nested_sub_results() -> None:
    """A failing grandchild makes the whole tree not all_passed."""
    inner = EvalResults(provider="p", result_counts=counts(passed=1), sub_results={"x": bad_run()})
    outer = EvalResults(provider="p", sub_results={"inner": inner})
    assert inner.all_passed is False
    assert outer.all_passed is False


# --------------------------------------------------------------------------------------------
# raise_for_status


def test_raise_for_status_passes_silently() -> None:
    """raise_for_status returns None when all_passed."""
    assert ok_run().raise_for_status() is None


def test_raise_for_status_errored_report_url_and_errored_items() -> None:
    """Spec example 1: errored count, report URL and errored items with 'unknown' fallback."""
    r = EvalResults(
        provider="Microsoft Foundry",
        run_id="r1",
        result_counts=counts(passed=2, errored=1),
        report_url="https://x/r1",
        items=[
            EvalItemResult(item_id="i1", status="pass"),
            EvalItemResult(item_id="i7", status="error", error_code="QueryExtractionError"),
            EvalItemResult(item_id="i8", status="errored"),
        ],
    )
    with pytest.raises(EvalNotPassedError) as info:
        r.raise_for_status()
    assert str(info.value) == (
        "Eval run r1 completed: 2 passed, 0 failed. 1 errored. See https://x/r1 for details. "
        "Errored items: i7: QueryExtractionError, i8: unknown."
    )


def test_raise_for_status_aggregate_failed_subs() -> None:
    """Spec example 2: an aggregate lists the sub-results that did not pass."""
    r = EvalResults(
        provider="Local",
        eval_id="aggregate",
        run_id="aggregate",
        result_counts={"passed": 1, "failed": 1},
        sub_results={"researcher": ok_run("r"), "writer": bad_run("w")},
    )
    with pytest.raises(EvalNotPassedError) as info:
        r.raise_for_status()
    assert str(info.value) == "Eval run aggregate completed: 1 passed, 1 failed. Failed: writer."


def test_raise_for_status_error_text_then_failed_subs() -> None:
    """Spec example 3: the error text is appended without a trailing period, then failed subs."""
    r = EvalResults(
        provider="Local",
        eval_id="local",
        run_id="Workflow Eval: Workflow — overall",
        result_counts=counts(failed=1),
        error="keyword_check: Missing keywords: ['sunny']",
        sub_results={"researcher": ok_run(), "writer": bad_run()},
    )
    with pytest.raises(EvalNotPassedError) as info:
        r.raise_for_status()
    assert str(info.value) == (
        "Eval run Workflow Eval: Workflow — overall completed: 0 passed, 1 failed. "
        "Error: keyword_check: Missing keywords: ['sunny'] Failed: writer."
    )


def test_raise_for_status_timeout() -> None:
    """Spec example 4: a timeout with no counts."""
    r = EvalResults(provider="Microsoft Foundry", eval_id="e", run_id="run_1", status="timeout")
    with pytest.raises(EvalNotPassedError) as info:
        r.raise_for_status()
    assert str(info.value) == "Eval run run_1 timeout: 0 passed, 0 failed."


def test_raise_for_status_empty_completed_run() -> None:
    """An empty completed run is not all_passed, so raise_for_status raises."""
    r = EvalResults(provider="Local", run_id="empty", result_counts=counts())
    with pytest.raises(
        EvalNotPassedError, match=r"^Eval run empty completed: 0 passed, 0 failed\.$"
    ):
        r.raise_for_status()


def test_raise_for_status_custom_message_keeps_clauses() -> None:
    """A custom msg replaces the headline but the extra clauses are still appended."""
    r = EvalResults(
        provider="p",
        run_id="r",
        status="failed",
        result_counts=counts(errored=2),
        report_url="https://x/r",
        error="boom",
        items=[EvalItemResult(item_id="a", status="error", error_code="Timeout")],
    )
    with pytest.raises(EvalNotPassedError) as info:
        r.raise_for_status("Quality gate failed.")
    assert str(info.value) == (
        "Quality gate failed. 2 errored. See https://x/r for details. Error: boom "
        "Errored items: a: Timeout."
    )


def test_eval_not_passed_error_is_exception() -> None:
    """EvalNotPassedError is a plain Exception subclass."""
    assert issubclass(EvalNotPassedError, Exception)
    assert not issubclass(EvalNotPassedError, AssertionError)


# --------------------------------------------------------------------------------------------
# assert_score_at_least


def scored_items(*values: tuple[str, str, float | None]) -> list[EvalItemResult]:
    by_item: dict[str, list[EvalScoreResult]] = {}
    for item_id, name, score in values:
        by_item.setdefault(item_id, []).append(EvalScoreResult(name, score))
    return [EvalItemResult(item_id=i, status="pass", scores=s) for i, s in by_item.items()]


def test_assert_score_at_least_passes_inclusive() -> None:
    """Scores equal to the threshold pass."""
    r = EvalResults(provider="p", items=scored_items(("0", "a", 0.5), ("1", "a", 0.9)))
    assert r.assert_score_at_least(0.5) is None


def test_assert_score_at_least_message_format() -> None:
    """The message is "N score(s) below threshold X: item/name=0.000, ..." with 3-decimal scores."""
    r = EvalResults(
        provider="p", items=scored_items(("0", "rel", 0.25), ("1", "rel", 0.9), ("2", "coh", 0.1))
    )
    with pytest.raises(EvalNotPassedError) as info:
        r.assert_score_at_least(0.5)
    assert str(info.value) == "2 score(s) below threshold 0.5: 0/rel=0.250, 2/coh=0.100"


def test_assert_score_at_least_lists_first_five_then_more() -> None:
    """Only the first 5 offenders are listed, followed by " (+k more)"."""
    r = EvalResults(provider="p", items=scored_items(*[(str(i), "s", 0.0) for i in range(8)]))
    with pytest.raises(EvalNotPassedError) as info:
        r.assert_score_at_least(0.75)
    assert str(info.value) == (
        "8 score(s) below threshold 0.75: 0/s=0.000, 1/s=0.000, 2/s=0.000, 3/s=0.000, "
        "4/s=0.000 (+3 more)"
    )


def test_assert_score_at_least_exactly_five_has_no_more_suffix() -> None:
    """With exactly 5 offenders there is no "(+k more)" suffix."""
    r = EvalResults(provider="p", items=scored_items(*[(str(i), "s", 0.1) for i in range(5)]))
    with pytest.raises(EvalNotPassedError) as info:
        r.assert_score_at_least(0.5)
    assert str(info.value).endswith("4/s=0.100")


def test_assert_score_at_least_filters_by_evaluator() -> None:
    """evaluator= only checks scores of that name and adds " for ev" to the message."""
    r = EvalResults(
        provider="p", items=scored_items(("0", "rel", 0.9), ("0", "coh", 0.1), ("1", "rel", 0.2))
    )
    with pytest.raises(EvalNotPassedError) as info:
        r.assert_score_at_least(0.5, evaluator="rel")
    assert str(info.value) == "1 score(s) below threshold 0.5 for rel: 1/rel=0.200"
    assert r.assert_score_at_least(0.05, evaluator="coh") is None


def test_assert_score_at_least_walks_sub_results() -> None:
    """Scores in sub_results are checked too, depth first after own items."""
    sub = EvalResults(provider="p", items=scored_items(("w0", "kw", 0.0)))
    r = EvalResults(
        provider="p", items=scored_items(("o0", "kw", 0.2)), sub_results={"writer": sub}
    )
    with pytest.raises(EvalNotPassedError) as info:
        r.assert_score_at_least(0.5)
    assert str(info.value) == "2 score(s) below threshold 0.5: o0/kw=0.200, w0/kw=0.000"


def test_assert_score_at_least_errored_score_counts_as_below() -> None:
    """A metric that errored (score None) counts as below, shown as 0.000."""
    r = EvalResults(provider="p", items=scored_items(("0", "judge", None)))
    with pytest.raises(
        EvalNotPassedError, match=r"^1 score\(s\) below threshold 0\.5: 0/judge=0\.000$"
    ):
        r.assert_score_at_least(0.5)


def test_assert_score_at_least_custom_message() -> None:
    """A custom msg replaces the generated text."""
    r = EvalResults(provider="p", items=scored_items(("0", "a", 0.0)))
    with pytest.raises(EvalNotPassedError, match=r"^too low$"):
        r.assert_score_at_least(0.5, msg="too low")


def test_assert_score_at_least_no_scores_passes() -> None:
    """With no scores at all there is nothing below the threshold."""
    assert EvalResults(provider="p").assert_score_at_least(1.0) is None


# --------------------------------------------------------------------------------------------
# assert_no_failed_items


def test_assert_no_failed_items_lists_item_status() -> None:
    """Failed and errored items (incl. sub-results) are listed as "item_id:status"."""
    sub = EvalResults(
        provider="p",
        items=[
            EvalItemResult(item_id="w1", status="errored"),
            EvalItemResult(item_id="w2", status="pass"),
        ],
    )
    r = EvalResults(
        provider="p",
        items=[
            EvalItemResult(item_id="0", status="pass"),
            EvalItemResult(item_id="1", status="fail"),
            EvalItemResult(item_id="2", status="error"),
        ],
        sub_results={"writer": sub},
    )
    with pytest.raises(EvalNotPassedError) as info:
        r.assert_no_failed_items()
    text = str(info.value)
    assert text.startswith("3 item(s)")
    assert "1:fail, 2:error, w1:errored" in text
    assert "0:pass" not in text
    assert "w2" not in text


def test_assert_no_failed_items_passes_and_custom_message() -> None:
    """All-pass items raise nothing; a custom msg replaces the generated text."""
    good = EvalResults(provider="p", items=[EvalItemResult(item_id="0", status="pass")])
    assert good.assert_no_failed_items() is None
    bad = EvalResults(provider="p", items=[EvalItemResult(item_id="0", status="fail")])
    with pytest.raises(EvalNotPassedError, match=r"^nope$"):
        bad.assert_no_failed_items("nope")


# --------------------------------------------------------------------------------------------
# assert_dimension_score_at_least


def rubric_item(item_id: str, name: str, *dims: RubricScore) -> EvalItemResult:
    return EvalItemResult(
        item_id=item_id, status="pass", scores=[EvalScoreResult(name, 1.0, dimensions=list(dims))]
    )


def test_assert_dimension_score_passes_at_threshold() -> None:
    """Applicable dimension scores at or above the threshold pass."""
    r = EvalResults(
        provider="p",
        items=[
            rubric_item("0", "rubric", RubricScore("clarity", 3, True, 1, "ok")),
            rubric_item("1", "rubric", RubricScore("clarity", 5, True, 1, "great")),
        ],
    )
    assert r.assert_dimension_score_at_least("clarity", 3) is None


def test_assert_dimension_score_reports_low_and_none_scores() -> None:
    """Low or missing (None) applicable dimension scores raise, naming item/score/dimension."""
    r = EvalResults(
        provider="p",
        items=[
            rubric_item("0", "rubric", RubricScore("clarity", 2, True, 1, "meh")),
            rubric_item("1", "rubric", RubricScore("clarity", None, True, 1, "?")),
            rubric_item("2", "rubric", RubricScore("accuracy", 1, True, 1, "other dim")),
        ],
    )
    with pytest.raises(EvalNotPassedError) as info:
        r.assert_dimension_score_at_least("clarity", 3)
    text = str(info.value)
    assert "0/rubric/clarity=2" in text
    assert "1/rubric/clarity=None" in text
    assert "accuracy" not in text


def test_assert_dimension_score_skips_non_applicable_by_default() -> None:
    """Non-applicable or absent dimensions are skipped unless require_applicable=True."""
    r = EvalResults(
        provider="p",
        items=[
            rubric_item("0", "rubric", RubricScore("clarity", None, False, 1, "n/a")),
            rubric_item("1", "rubric", RubricScore("accuracy", 5, True, 1, "")),
        ],
    )
    assert r.assert_dimension_score_at_least("clarity", 3) is None
    with pytest.raises(EvalNotPassedError) as info:
        r.assert_dimension_score_at_least("clarity", 3, require_applicable=True)
    text = str(info.value)
    assert "0" in text
    assert "1" in text
    assert "not applicable" in text


def test_assert_dimension_require_applicable_is_per_item() -> None:
    """require_applicable is satisfied by any score of the item carrying the applicable dimension."""
    item = EvalItemResult(
        item_id="0",
        status="pass",
        scores=[
            EvalScoreResult("relevance", 0.9),
            EvalScoreResult("rubric", 1.0, dimensions=[RubricScore("clarity", 4, True, 1, "")]),
        ],
    )
    r = EvalResults(provider="p", items=[item])
    assert r.assert_dimension_score_at_least("clarity", 3, require_applicable=True) is None


def test_assert_dimension_score_filters_by_evaluator_and_walks_subs() -> None:
    """evaluator= restricts which scores are read; sub_results are walked too."""
    sub = EvalResults(
        provider="p", items=[rubric_item("w0", "rubric", RubricScore("clarity", 1, True, 1, ""))]
    )
    r = EvalResults(
        provider="p",
        items=[rubric_item("0", "other", RubricScore("clarity", 1, True, 1, ""))],
        sub_results={"writer": sub},
    )
    with pytest.raises(EvalNotPassedError) as info:
        r.assert_dimension_score_at_least("clarity", 3, evaluator="rubric")
    assert "w0/rubric/clarity=1" in str(info.value)
    assert "0/other" not in str(info.value)
    with pytest.raises(EvalNotPassedError, match=r"^custom$"):
        r.assert_dimension_score_at_least("clarity", 3, msg="custom")


@pytest.mark.parametrize(("threshold", "shown"), [(1, "1"), (0.8, "0.8"), (0.75, "0.75")])
def test_assert_score_at_least_shows_threshold_as_given(threshold: float, shown: str) -> None:
    """The threshold appears in the message exactly as the caller passed it."""
    r = EvalResults(provider="p", items=scored_items(("0", "a", 0.5)))
    with pytest.raises(EvalNotPassedError) as info:
        r.assert_score_at_least(threshold)
    assert str(info.value) == f"1 score(s) below threshold {shown}: 0/a=0.500"


def test_assert_dimension_message_format() -> None:
    """The dimension message counts offenders and lists them after the threshold and dimension."""
    r = EvalResults(
        provider="p",
        items=[
            rubric_item("0", "rubric", RubricScore("clarity", 2, True, 1, "")),
            rubric_item("1", "rubric", RubricScore("clarity", None, False, 1, "")),
        ],
    )
    with pytest.raises(EvalNotPassedError) as info:
        r.assert_dimension_score_at_least("clarity", 3, require_applicable=True)
    assert str(info.value) == (
        "2 dimension score(s) below threshold 3 for clarity: 0/rubric/clarity=2, 1: not applicable"
    )


def test_the_repr_names_counts_not_items_so_asyncio_run_does_not_format_a_whole_run() -> None:
    """``asyncio.run(evaluate_agent(...))`` on Python 3.11 formats its result's repr (twice): the
    repr is the provider, status, counts, item count and agent names, whatever the run's size."""
    import asyncio

    from evalpipe import EvalItem, LocalEvaluator, Message, keyword_check

    many = [EvalItem([Message("user", ["q"]), Message("assistant", ["a"])])] * 2_000
    evaluator = LocalEvaluator(keyword_check("a"))
    small = asyncio.run(evaluator.evaluate(many[:1], eval_name="one"))
    text = repr(asyncio.run(evaluator.evaluate(many, eval_name="many")))
    assert text == (
        "EvalResults(provider='Local', status='completed', "
        "result_counts={'passed': 2000, 'failed': 0, 'errored': 0}, items=<2000 results>)"
    )
    assert len(repr(small)) == len(text) - 6  # "1" for "2000", twice
    workflow = EvalResults(provider="Local", sub_results={"writer": ok_run(), "critic": bad_run()})
    assert repr(workflow).endswith("items=<0 results>, sub_results=['writer', 'critic'])")
