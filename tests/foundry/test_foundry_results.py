"""Output items as results (service shapes MAF also reads), merging batches, the flat view, Retry-After parsing."""

from __future__ import annotations

import email.utils
import time

from evalpipe import EvalItem, EvalItemResult, EvalScoreResult, Message
from evalpipe._internal.retry import parse_retry_after
from evalpipe.foundry import flat_view
from evalpipe.foundry._evals import _target_item
from evalpipe.foundry._evaluators import validate_evaluators
from evalpipe.foundry._results import item_result

ITEM = EvalItem([Message("user", ["Q"]), Message("assistant", ["A"])], query_index=3)


def test_errored_status_rubric_dimensions_and_response_id_are_read() -> None:
    """Status "errored" reads as error; rubric dimension_scores and datasource resp_id are kept."""
    specs = validate_evaluators(["relevance"])
    assert specs is not None
    output = {
        "status": "errored",
        "datasource_item": {"resp_id": "resp_1"},
        "results": [
            {
                "name": "relevance",
                "score": None,
                "passed": None,
                "properties": {
                    "dimension_scores": [
                        {"id": "d1", "score": 4, "applicable": True, "weight": 2, "reason": "ok"}
                    ]
                },
            }
        ],
        "sample": {
            "error": {"code": "QueryExtractionError", "message": "no query"},
            "usage": {"total_tokens": 0},
        },
    }
    result = item_result(output, ITEM, "3", specs)
    assert (result.status, result.error_code, result.error_message) == (
        "error",
        "QueryExtractionError",
        "no query",
    )
    assert result.response_id == "resp_1"
    [score] = result.scores
    assert score.dimensions is not None
    assert (score.dimensions[0].id, score.dimensions[0].score, score.dimensions[0].weight) == (
        "d1",
        4,
        2,
    )
    assert result.metadata == {"query_index": 3}
    assert result.token_usage is None


def test_status_is_derived_when_the_service_sends_another_word() -> None:
    """A "completed" item status is replaced by the verdict of its scores (label decides passed)."""
    specs = validate_evaluators(["coherence"])
    assert specs is not None
    output = {
        "status": "completed",
        "results": [{"name": "coherence", "score": 2, "label": "fail", "threshold": 3}],
    }
    result = item_result(output, ITEM, "0", specs)
    assert result.status == "fail"
    assert result.scores[0].passed is False


def test_flat_view_adds_label_and_error_only_when_they_say_something() -> None:
    """A severity label adds {metric}_label; an errored metric adds {metric}_error and no result."""
    item = EvalItemResult(
        "0",
        "error",
        [
            EvalScoreResult("violence", 1.0, True, label="Very low", threshold=3),
            EvalScoreResult(
                "coherence", None, None, error_message="judge failed", error_code="JudgeError"
            ),
        ],
    )
    flat = flat_view(item)
    assert flat["violence_label"] == "Very low"
    assert flat["violence_result"] == "pass"
    assert (flat["coherence"], flat["coherence_result"], flat["coherence_error"]) == (
        None,
        None,
        "judge failed",
    )


def test_retry_after_forms() -> None:
    """retry-after-ms wins over Retry-After; seconds may be fractional; an HTTP date is a delay from now."""
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "1.5"}) == 1.5
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    delay = parse_retry_after({"Retry-After": date})
    assert delay is not None
    assert 25 <= delay <= 31
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


def test_a_target_sample_entry_that_is_not_a_message_is_left_out() -> None:
    """A target completion's sample.output entry that is not an object is skipped (it used to
    raise, erroring the item with OutputParseError although the service had scored it)."""
    output = {"sample": {"output": ["junk", {"role": "assistant", "content": "hi"}]}}
    item = _target_item(output, "q", 0)
    assert [(m.role, m.text) for m in item.conversation] == [("user", "q"), ("assistant", "hi")]
