"""Deterministic evaluators: hand-computed values, references, trajectories, tool errors.

Each expected number is worked out in the comment beside it, from the metric's definition, not from
the library that computes it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from agent_framework import Content
from agent_framework import Message as MafMessage

from evalpipe import (
    CheckResult,
    EvalItem,
    EvalResults,
    ExpectedToolCall,
    FunctionCallContent,
    FunctionResultContent,
    LocalEvaluator,
    Message,
    evaluate_agent,
)
from evalpipe.evaluators.nlp import (
    MissingReferenceError,
    bleu,
    expected_fact_check,
    gleu,
    references_of,
    task_navigation_efficiency,
    token_f1,
    tool_call_success,
    tool_result_error,
)
from evalpipe.gates import all_pass, evaluate_gates, mean, no_errors
from evalpipe.targets.demo import ScriptedAgent, get_weather, search_hotels, travel_agent

CAT = "the cat sat on the mat"
RED_CAT = "the cat sat on the red mat"


def answer(response: str, reference: str | None = None, **kw: Any) -> EvalItem:
    return EvalItem(
        [Message("user", ["Where did the cat sit?"]), Message("assistant", [response])],
        expected_output=reference,
        **kw,
    )


def run(check: Any, item: EvalItem) -> CheckResult:
    result = check(item)
    assert isinstance(result, CheckResult)
    return result


# --------------------------------------------------------------------------------------------
# BLEU


def test_bleu_identical_text_scores_one_and_passes() -> None:
    """A response equal to its reference scores 1.0 (sacrebleu's 100, rescaled and clamped)."""
    result = run(bleu(), answer(CAT, CAT))
    assert result.score == 1.0
    assert result.passed
    assert result.check_name == "bleu"
    assert result.reason == "BLEU 1.000 >= threshold 0.5 against 1 reference"


def test_bleu_matches_hand_computed_value() -> None:
    """BLEU of a 6-token response against a 7-token reference equals the textbook arithmetic."""
    # response  : the cat sat on the mat        (6 tokens)
    # reference : the cat sat on the red mat    (7 tokens)
    # clipped n-gram precisions: 1-grams 6/6, 2-grams 4/5 (all but "the mat"),
    #   3-grams 3/4 (all but "on the mat"), 4-grams 2/3 (all but "sat on the mat")
    # geometric mean = (1 * 4/5 * 3/4 * 2/3) ** (1/4) = 0.4 ** 0.25 = 0.795271
    # brevity penalty = exp(1 - 7/6) = exp(-1/6) = 0.846482
    # BLEU = 0.795271 * 0.846482 = 0.673182
    result = run(bleu(), answer(CAT, RED_CAT))
    assert result.score == pytest.approx(0.4**0.25 * math.exp(-1 / 6), abs=1e-9)
    assert result.score == pytest.approx(0.673182, abs=1e-6)
    assert result.details is not None
    assert result.details["precisions"] == pytest.approx([1.0, 0.8, 0.75, 2 / 3], abs=1e-6)
    assert result.details["brevity_penalty"] == pytest.approx(math.exp(-1 / 6))
    assert result.reason == "BLEU 0.673 >= threshold 0.5 against 1 reference"


def test_bleu_threshold_decides_pass_and_the_reason_says_the_numbers() -> None:
    """The same 0.673 fails a 0.7 threshold, and the reason shows score, sign and threshold."""
    result = run(bleu(threshold=0.7), answer(CAT, RED_CAT))
    assert not result.passed
    assert result.reason == "BLEU 0.673 < threshold 0.7 against 1 reference"


def test_bleu_scores_several_references_jointly() -> None:
    """metadata['references'] adds references; an exact one among them makes BLEU 1.0."""
    # With references [RED_CAT, CAT]: clipped counts take the best reference (all n-grams of the
    # response occur in CAT) and the brevity penalty uses the closest length (6), so BLEU = 1.
    item = answer(CAT, RED_CAT, metadata={"references": [CAT]})
    assert references_of(item) == [RED_CAT, CAT]
    result = run(bleu(), item)
    assert result.score == 1.0
    assert result.reason == "BLEU 1.000 >= threshold 0.5 against 2 references"


def test_bleu_is_case_sensitive_unless_lowercase() -> None:
    """sacrebleu's default is case-sensitive; lowercase=True ignores case."""
    item = answer(CAT.upper(), CAT)
    assert run(bleu(), item).score == 0.0
    assert run(bleu(lowercase=True), item).score == 1.0


def test_reference_sources_expected_output_metadata_key_and_callable() -> None:
    """references_from selects expected_output only, a metadata key, or a callable's answer."""
    item = answer(CAT, RED_CAT, metadata={"references": [CAT], "gold": CAT})
    assert run(bleu(references_from="expected_output"), item).score == pytest.approx(0.673182, 1e-6)
    assert run(bleu(references_from="metadata.gold"), item).score == 1.0
    assert run(bleu(references_from=lambda it: [CAT, RED_CAT]), item).score == 1.0


def test_bad_reference_source_or_threshold_fails_at_construction() -> None:
    """An unknown references_from string and a threshold outside [0, 1] are rejected at once."""
    with pytest.raises(ValueError, match="references_from must be 'default'"):
        bleu(references_from="expected")
    with pytest.raises(ValueError, match=r"threshold must be in \[0, 1\]"):
        gleu(threshold=50)
    with pytest.raises(TypeError, match="threshold must be a number"):
        token_f1(threshold=True)


def test_missing_reference_raises_a_clear_error() -> None:
    """No expected_output and no metadata references: an error saying what to set, not a 0."""
    with pytest.raises(MissingReferenceError, match="set the item's expected_output"):
        run(bleu(), answer(CAT))
    with pytest.raises(MissingReferenceError, match=r"metadata\['gold'\]"):
        run(token_f1(references_from="metadata.gold"), answer(CAT, CAT))
    with pytest.raises(MissingReferenceError, match="expected_output"):
        run(gleu(), answer(CAT, "   "))  # blank is missing


def test_non_string_references_are_a_type_error() -> None:
    """metadata['references'] holding a number is reported as such."""
    with pytest.raises(TypeError, match=r"metadata\['references'\] must be a string or a list"):
        run(bleu(), answer(CAT, CAT, metadata={"references": 3}))
    with pytest.raises(TypeError, match="every reference must be a string"):
        run(bleu(), answer(CAT, CAT, metadata={"references": [3]}))


async def test_missing_reference_becomes_an_errored_item_in_local_evaluator() -> None:
    """Inside LocalEvaluator the missing reference errors that item only (CheckError, named)."""
    results = await LocalEvaluator(bleu()).evaluate([answer(CAT, CAT), answer(CAT)])
    assert [i.status for i in results.items] == ["pass", "error"]
    bad = results.items[1]
    assert bad.error_code == "CheckError"
    assert bad.error_message is not None
    assert "MissingReferenceError: bleu needs a reference" in bad.error_message
    assert bad.scores[0].score is None


# --------------------------------------------------------------------------------------------
# GLEU


def test_gleu_matches_hand_computed_value() -> None:
    """GLEU = shared 1-4-grams / max(response n-grams, reference n-grams)."""
    # response n-grams: 6 + 5 + 4 + 3 = 18; reference n-grams: 7 + 6 + 5 + 4 = 22
    # shared: 1-grams 6 ("the" twice), 2-grams 4, 3-grams 3, 4-grams 2 = 15
    # GLEU = 15 / max(18, 22) = 15/22 = 0.681818
    result = run(gleu(), answer(CAT, RED_CAT))
    assert result.score == pytest.approx(15 / 22)
    assert result.passed
    assert result.reason == "GLEU 0.682 >= threshold 0.5 against 1 reference"


def test_gleu_takes_the_best_of_several_references() -> None:
    """With several references GLEU is that of the best one."""
    # response "the cat sat": 3 + 2 + 1 = 6 n-grams
    # vs CAT (18 n-grams): shared 3 + 2 + 1 = 6 -> 6/18 = 0.333
    # vs "a cat sat" (6 n-grams): shared "cat", "sat", "cat sat" = 3 -> 3/6 = 0.5
    item = answer("the cat sat", CAT, metadata={"references": ["a cat sat"]})
    assert run(gleu(), item).score == pytest.approx(0.5)
    assert run(gleu(references_from="expected_output"), item).score == pytest.approx(1 / 3)


def test_gleu_tokenizes_punctuation_apart() -> None:
    """A trailing period is its own token (13a): 'mat.' still matches 'mat'."""
    # response "the cat sat on the mat ." has 7 tokens = 7+6+5+4 = 22 n-grams, CAT has 18;
    # shared = the CAT n-grams (18) -> 18/22
    assert run(gleu(), answer(CAT + ".", CAT)).score == pytest.approx(18 / 22)


def test_gleu_of_an_empty_response_is_zero_and_fails() -> None:
    """Saying nothing scores 0.0 (a verdict, not an error)."""
    result = run(gleu(), answer("", CAT))
    assert result.score == 0.0
    assert not result.passed


# --------------------------------------------------------------------------------------------
# token F1


def test_token_f1_matches_hand_computed_value() -> None:
    """SQuAD normalisation then token precision/recall/F1."""
    # "The cat sat on the mat." -> [cat, sat, on, mat]  (lower, punctuation and articles removed)
    # "A cat sat on a red mat"  -> [cat, sat, on, red, mat]
    # common 4: precision 4/4 = 1, recall 4/5 = 0.8, F1 = 2*1*0.8 / 1.8 = 0.888889
    result = run(token_f1(), answer("The cat sat on the mat.", "A cat sat on a red mat"))
    assert result.score == pytest.approx(16 / 18)
    assert result.details is not None
    assert result.details["precision"] == 1.0
    assert result.details["recall"] == pytest.approx(0.8)
    assert result.reason == "token F1 0.889 >= threshold 0.5 (precision 1.000, recall 0.800)"


def test_token_f1_counts_repeated_tokens_once_per_occurrence() -> None:
    """A repeated word matches only as often as the reference has it."""
    # [paris, paris, paris] vs [paris, is, sunny]: common = min(3, 1) = 1
    # precision 1/3, recall 1/3, F1 1/3
    result = run(token_f1(), answer("Paris Paris Paris", "Paris is sunny"))
    assert result.score == pytest.approx(1 / 3)
    assert not result.passed


def test_token_f1_takes_the_best_reference_and_says_which() -> None:
    """With several references the best F1 counts; its index is in the details."""
    # vs "rainy in London": no common token -> 0; vs "sunny in Paris": all 3 common -> 1.0
    item = answer("Sunny in Paris!", "rainy in London", metadata={"references": ["sunny in Paris"]})
    result = run(token_f1(), item)
    assert result.score == 1.0
    assert result.details is not None
    assert result.details["reference_index"] == 1
    assert "best of 2 references" in result.reason


def test_token_f1_of_texts_empty_after_normalisation_is_one() -> None:
    """Both sides normalise to nothing ("The." vs "a"): equal, F1 1.0 (SQuAD's rule)."""
    assert run(token_f1(), answer("The.", "a")).score == 1.0
    assert run(token_f1(), answer("", "cat")).score == 0.0


# --------------------------------------------------------------------------------------------
# expected fact


def test_expected_fact_matches_case_insensitively() -> None:
    """The pattern is searched in the response, ignoring case; the reason quotes the match."""
    check = expected_fact_check(r"30 days")
    result = run(check, answer("You have 30 DAYS to return it."))
    assert result == CheckResult(
        True, "Expected fact found: /30 days/i matched '30 DAYS'", "expected_fact", 1.0
    )
    assert check.__name__ == "expected_fact"  # type: ignore[attr-defined]


def test_expected_fact_missing_fails_with_score_zero() -> None:
    """A wrong number fails: score 0.0 and the pattern in the reason."""
    result = run(expected_fact_check(r"\b30 days\b"), answer("You have 60 days to return it."))
    assert not result.passed
    assert result.score == 0.0
    assert result.reason == r"Expected fact not found: /\b30 days\b/i does not match the response"


def test_expected_fact_reads_only_the_response() -> None:
    """A fact present only in a tool result or the query does not count."""
    item = EvalItem(
        [
            Message("user", ["Is it 22°C in Paris?"]),
            Message("assistant", [FunctionCallContent(name="get_weather", call_id="c1")]),
            Message("tool", [FunctionResultContent(call_id="c1", result="22°C")]),
            Message("assistant", ["It is warm."]),
        ]
    )
    assert not run(expected_fact_check("22°C"), item).passed


def test_expected_fact_pattern_per_item_from_metadata() -> None:
    """With no pattern, each item's metadata['expected_fact'] is used; none is an error."""
    check = expected_fact_check()
    assert run(check, answer("It is sunny.", metadata={"expected_fact": "sunny|clear"})).passed
    with pytest.raises(MissingReferenceError, match=r"metadata\['expected_fact'\]"):
        run(check, answer("It is sunny."))
    with pytest.raises(ValueError, match="not a valid regular expression"):
        run(check, answer("x", metadata={"expected_fact": "("}))


def test_expected_fact_invalid_pattern_fails_at_construction() -> None:
    """A broken regular expression is reported when the check is made, naming the pattern."""
    with pytest.raises(ValueError, match=r"'\(30' is not a valid regular expression"):
        expected_fact_check("(30")


# --------------------------------------------------------------------------------------------
# task navigation efficiency


def trajectory(
    calls: Sequence[tuple[str, dict[str, Any] | str | None]],
    expected: Sequence[ExpectedToolCall] | None,
) -> EvalItem:
    conversation = [Message("user", ["Plan my trip"])]
    for k, (name, args) in enumerate(calls):
        conversation.append(
            Message("assistant", [FunctionCallContent(name=name, arguments=args, call_id=f"c{k}")])
        )
        conversation.append(Message("tool", [FunctionResultContent(call_id=f"c{k}", result="ok")]))
    conversation.append(Message("assistant", ["Done."]))
    return EvalItem(conversation, expected_tool_calls=expected)


A, B = ExpectedToolCall("search"), ExpectedToolCall("book")
MODES = ("exact_match", "in_order_match", "any_order_match")


def verdicts(item: EvalItem) -> dict[str, bool]:
    return {
        mode: run(task_navigation_efficiency(mode), item).passed  # type: ignore[arg-type]
        for mode in MODES
    }


def test_navigation_identical_trajectory_passes_every_mode() -> None:
    """The expected calls in the expected order and nothing else: every mode passes, F1 1."""
    item = trajectory([("search", None), ("book", None)], [A, B])
    assert verdicts(item) == dict.fromkeys(MODES, True)
    result = run(task_navigation_efficiency(), item)
    assert result.score == 1.0
    assert result.details == {
        "mode": "exact_match",
        "precision": 1.0,
        "recall": 1.0,
        "f1": 1.0,
        "matched": 2,
        "calls": 2,
        "expected": 2,
    }


def test_navigation_swapped_order_passes_only_any_order() -> None:
    """Right calls, wrong order: exact and in-order fail, any-order passes; P = R = F1 = 1."""
    item = trajectory([("book", None), ("search", None)], [A, B])
    assert verdicts(item) == {
        "exact_match": False,
        "in_order_match": False,
        "any_order_match": True,
    }
    assert run(task_navigation_efficiency("any_order_match"), item).score == 1.0


def test_navigation_extra_step_fails_exact_only() -> None:
    """An extra call in between: exact fails, in-order and any-order pass; precision drops."""
    # calls [search, weather, book], expected [search, book]: matched 2
    # precision 2/3, recall 2/2 = 1, F1 = 2 * (2/3) * 1 / (2/3 + 1) = 0.8
    item = trajectory([("search", None), ("weather", None), ("book", None)], [A, B])
    assert verdicts(item) == {
        "exact_match": False,
        "in_order_match": True,
        "any_order_match": True,
    }
    result = run(task_navigation_efficiency("in_order_match"), item)
    assert result.score == pytest.approx(0.8)
    assert result.reason == (
        "in_order_match passed: precision 0.667 (2/3 calls expected), recall 1.000 "
        "(2/2 expected calls made), F1 0.800; called ['search', 'weather', 'book'], "
        "expected ['search', 'book']"
    )


def test_navigation_missing_step_fails_every_mode() -> None:
    """A missing expected call fails all modes; precision 1, recall 1/2, F1 2/3."""
    item = trajectory([("search", None)], [A, B])
    assert verdicts(item) == dict.fromkeys(MODES, False)
    result = run(task_navigation_efficiency("any_order_match"), item)
    assert result.details is not None
    assert (result.details["precision"], result.details["recall"]) == (1.0, 0.5)
    assert result.score == pytest.approx(2 / 3)


def test_navigation_counts_repeated_calls() -> None:
    """Expecting a call twice needs two calls: one call gives recall 1/2."""
    item = trajectory([("search", None)], [A, A])
    result = run(task_navigation_efficiency("any_order_match"), item)
    assert not result.passed
    assert result.details is not None
    assert result.details["recall"] == 0.5


def test_navigation_checks_expected_arguments_as_a_subset() -> None:
    """An expectation with arguments needs those values (extra arguments are fine)."""
    expected = [ExpectedToolCall("get_weather", {"city": "Paris"})]
    right = trajectory([("get_weather", {"city": "Paris", "units": "C"})], expected)
    wrong = trajectory([("get_weather", {"city": "London"})], expected)
    as_json = trajectory([("get_weather", '{"city": "Paris"}')], expected)
    assert verdicts(right) == dict.fromkeys(MODES, True)
    assert verdicts(as_json) == dict.fromkeys(MODES, True)
    assert verdicts(wrong) == dict.fromkeys(MODES, False)
    assert run(task_navigation_efficiency(), wrong).score == 0.0


def test_navigation_pairs_calls_optimally() -> None:
    """A name-only expectation must not take the call an argument expectation needs."""
    # expected [search (any args), search(city=Paris)], calls [search(Paris), search(Rome)]:
    # greedy pairing of the first expectation with search(Paris) would leave search(city=Paris)
    # unmatched; the best pairing matches both (Paris -> 2nd, Rome -> 1st).
    expected = [ExpectedToolCall("search"), ExpectedToolCall("search", {"city": "Paris"})]
    item = trajectory([("search", {"city": "Paris"}), ("search", {"city": "Rome"})], expected)
    result = run(task_navigation_efficiency("any_order_match"), item)
    assert result.passed
    assert result.score == 1.0


def test_navigation_with_nothing_expected() -> None:
    """expected_tool_calls=[]: no call passes every mode; any call fails exact (F1 0, recall 1)."""
    assert verdicts(trajectory([], [])) == dict.fromkeys(MODES, True)
    assert run(task_navigation_efficiency(), trajectory([], [])).score == 1.0
    extra = trajectory([("search", None)], [])
    assert verdicts(extra) == {
        "exact_match": False,
        "in_order_match": True,
        "any_order_match": True,
    }
    result = run(task_navigation_efficiency(), extra)
    assert result.details is not None
    assert (result.details["precision"], result.details["recall"], result.score) == (0.0, 1.0, 0.0)


def test_navigation_no_calls_made() -> None:
    """No call when two were expected: precision 1 (nothing wrong called), recall 0, F1 0."""
    result = run(task_navigation_efficiency(), trajectory([], [A, B]))
    assert not result.passed
    assert result.details is not None
    assert (result.details["precision"], result.details["recall"], result.score) == (1.0, 0.0, 0.0)


def test_navigation_reads_only_the_response_side() -> None:
    """Under LAST_TURN a call made in an earlier turn is not part of this turn's trajectory."""
    conversation = [
        Message("user", ["Weather?"]),
        Message("assistant", [FunctionCallContent(name="get_weather", call_id="c1")]),
        Message("assistant", ["Sunny."]),
        Message("user", ["Hotels?"]),
        Message("assistant", [FunctionCallContent(name="search_hotels", call_id="c2")]),
        Message("assistant", ["Hotel Lumiere."]),
    ]
    item = EvalItem(conversation, expected_tool_calls=[ExpectedToolCall("search_hotels")])
    assert run(task_navigation_efficiency(), item).passed


def test_navigation_needs_expected_tool_calls_and_a_known_mode() -> None:
    """No expected_tool_calls is a per-item error; an unknown mode fails at construction."""
    with pytest.raises(MissingReferenceError, match="needs the item's expected_tool_calls"):
        run(task_navigation_efficiency(), trajectory([("search", None)], None))
    with pytest.raises(ValueError, match="mode must be one of"):
        task_navigation_efficiency("fuzzy")  # type: ignore[arg-type]


async def test_navigation_numbers_reach_the_result_sample() -> None:
    """Through LocalEvaluator, precision/recall/F1 land in EvalScoreResult.sample."""
    item = trajectory([("search", None), ("weather", None), ("book", None)], [A, B])
    results = await LocalEvaluator(task_navigation_efficiency("in_order_match")).evaluate([item])
    score = results.items[0].scores[0]
    assert score.name == "task_navigation_efficiency"
    assert score.score == pytest.approx(0.8)
    assert score.sample is not None
    assert score.sample["precision"] == pytest.approx(2 / 3)
    assert score.sample["recall"] == 1.0
    assert score.sample["reason"] == score.reason
    assert score.threshold is None


async def test_text_metric_threshold_reaches_the_result() -> None:
    """A text metric's threshold becomes EvalScoreResult.threshold."""
    results = await LocalEvaluator(bleu(threshold=0.25)).evaluate([answer(CAT, RED_CAT)])
    score = results.items[0].scores[0]
    assert score.threshold == 0.25
    assert score.passed is True


# --------------------------------------------------------------------------------------------
# tool call success


def with_results(*results: Any) -> EvalItem:
    conversation = [Message("user", ["Go"])]
    for k, value in enumerate(results):
        conversation.append(
            Message("assistant", [FunctionCallContent(name=f"tool{k}", call_id=f"c{k}")])
        )
        conversation.append(Message("tool", [FunctionResultContent(call_id=f"c{k}", result=value)]))
    conversation.append(Message("assistant", ["Done."]))
    return EvalItem(conversation)


def test_tool_call_success_without_tool_results_passes() -> None:
    """No tool was called: nothing failed, score 1.0."""
    assert run(tool_call_success, answer("Hi")) == CheckResult(
        True, "No tool results in the response.", "tool_call_success", 1.0
    )


def test_tool_call_success_scores_the_share_of_clean_results() -> None:
    """Two clean results and one error dict: fails, score 2/3, reason names the tool and error."""
    result = run(tool_call_success, with_results({"temp": 3}, "fine", {"error": "timeout"}))
    assert not result.passed
    assert result.score == pytest.approx(2 / 3)
    assert result.reason == "1 of 3 tool results carry an error: tool2 (call c2): timeout"
    assert result.details == {"results": 3, "errors": 1}


@pytest.mark.parametrize(
    ("result", "error"),
    [
        ({"error": "LookupError: x"}, "LookupError: x"),
        ({"error": {"code": 404}}, '{"code": 404}'),
        ({"isError": True, "content": "denied"}, "isError=true: denied"),
        ({"is_error": True}, "is_error=true"),
        ("Error: Function failed.", "Error: Function failed."),
        ("error: bad input", "error: bad input"),
        ('{"error": "boom"}', "boom"),
        ({"error": None, "value": 1}, None),
        ({"error": ""}, None),
        ({"isError": False}, None),
        ('{"error": null}', None),
        ("{not json", None),
        ("No errors found.", None),
        (None, None),
        ([{"error": "inside a list"}], None),
    ],
)
def test_what_carries_an_error(result: Any, error: str | None) -> None:
    """The documented rule: a truthy 'error', an isError flag, an 'Error:' string, JSON alike."""
    assert tool_result_error(FunctionResultContent(call_id="c", result=result)) == error


def test_tool_call_success_reads_maf_error_results() -> None:
    """A real MAF function result for a raised tool ("Error: Function failed.") is an error."""
    content = Content.from_function_result(
        call_id="c1", result="Error: Function failed.", exception="boom"
    )
    item = EvalItem(
        [
            Message("user", ["Go"]),
            MafMessage(role="assistant", contents=[Content.from_function_call("c1", "tool")]),
            MafMessage(role="tool", contents=[content]),
            Message("assistant", ["Sorry."]),
        ]
    )
    result = run(tool_call_success, item)
    assert not result.passed
    assert (
        result.reason
        == "1 of 1 tool results carry an error: tool (call c1): Error: Function failed."
    )


async def test_tool_call_success_on_the_demo_agent() -> None:
    """The demo agent's failing lookup (unknown city) fails the check; a known city passes it."""
    [results] = await evaluate_agent(
        agent=travel_agent(),
        queries=["What's the weather in Paris?", "What's the weather in Atlantis?"],
        evaluators=LocalEvaluator(tool_call_success),
    )
    assert [i.status for i in results.items] == ["pass", "fail"]
    assert results.items[1].scores[0].reason == (
        "1 of 1 tool results carry an error: get_weather (call call_1): "
        "LookupError: no weather data for 'Atlantis'"
    )


# --------------------------------------------------------------------------------------------
# The test of the test: wrong and off-topic answers must score lower and fail


QUERIES = ["What's the weather in Paris?", "Find me a hotel in Tokyo"]
EXPECTED = [
    "It is sunny and 22°C in Paris.",
    "Hotels with free rooms in Tokyo: Sakura Stay, Shinjuku Tower.",
]
EXPECTED_CALLS = [
    [ExpectedToolCall("get_weather", {"city": "Paris"})],
    [ExpectedToolCall("search_hotels", {"city": "Tokyo"})],
]
FACT = r"22°C|Sakura Stay"


def _wrong_city_plan(query: str) -> list[tuple[str, dict[str, Any]]]:
    tool = "search_hotels" if "hotel" in query.lower() else "get_weather"
    return [(tool, {"city": "London"})]


def _template(query: str, results: list[tuple[str, dict[str, Any], Any, bool]]) -> str:
    tool, args, value, _ = results[0]
    if tool == "get_weather":
        return f"It is {value['condition']} and {value['temp_c']}°C in {value['city']}."
    return f"Hotels with free rooms in {args['city']}: {', '.join(value)}."


def wrong_agent() -> ScriptedAgent:
    """Looks up the wrong city and answers fluently from it: a wrong answer in the right form."""
    return ScriptedAgent(
        "wrong-city",
        instructions="",
        tools=[get_weather, search_hotels],
        plan=_wrong_city_plan,
        compose=_template,
    )


def off_topic_agent() -> ScriptedAgent:
    """Calls nothing and talks about something else."""
    return ScriptedAgent(
        "off-topic",
        instructions="",
        tools=[get_weather, search_hotels],
        plan=lambda query: [],
        compose=lambda query, results: "Our tents are made of ripstop nylon and weigh 2 kg.",
    )


def checks() -> LocalEvaluator:
    return LocalEvaluator(
        bleu(threshold=0.4),
        gleu(threshold=0.4),
        token_f1(threshold=0.5),
        expected_fact_check(FACT),
        task_navigation_efficiency("in_order_match"),
        tool_call_success,
    )


async def evaluate(agent: Any) -> EvalResults:
    [results] = await evaluate_agent(
        agent=agent,
        queries=QUERIES,
        expected_output=EXPECTED,
        expected_tool_calls=EXPECTED_CALLS,
        evaluators=checks(),
    )
    return results


def mean_score(results: EvalResults, metric: str) -> float:
    values = [s.score for i in results.items for s in i.scores if s.name == metric]
    assert values
    assert all(v is not None for v in values)
    return sum(v for v in values if v is not None) / len(values)


async def test_good_answers_pass_every_check() -> None:
    """The demo agent's right answers pass every deterministic check."""
    good = await evaluate(travel_agent())
    assert good.passed == 2
    assert good.all_passed


TEXT_METRICS = ("bleu", "gleu", "token_f1", "expected_fact", "task_navigation_efficiency")


@pytest.mark.parametrize(
    ("bad_agent", "failing"),
    [
        # token F1 is not in the list: "It is rainy and 14°C in London." shares 4 of 7 normalised
        # tokens with "It is sunny and 22°C in Paris." (F1 0.571), above 0.5. Overlap measures
        # words, not truth; the fact check and the trajectory are what catch a wrong answer.
        (wrong_agent, ("bleu", "gleu", "expected_fact", "task_navigation_efficiency")),
        (off_topic_agent, TEXT_METRICS),
    ],
)
async def test_wrong_and_off_topic_answers_score_lower_and_fail(
    bad_agent: Any, failing: tuple[str, ...]
) -> None:
    """Wrong-city and off-topic answers score lower on every metric and fail the checks listed."""
    good = await evaluate(travel_agent())
    bad = await evaluate(bad_agent())
    for metric in TEXT_METRICS:
        assert mean_score(bad, metric) < mean_score(good, metric), metric
    for metric in failing:
        assert bad.per_evaluator[metric]["failed"] == 2, metric
    assert bad.failed == 2
    assert not bad.all_passed


async def test_token_f1_alone_passes_a_fluent_wrong_answer() -> None:
    """Pins the blind spot the docs warn of: a wrong city in the right template passes token F1."""
    # weather: [it is rainy and 14°c in london] vs [it is sunny and 22°c in paris]:
    #   common {it, is, and, in} = 4 of 7 each -> F1 4/7 = 0.571
    # hotels: [hotels with free rooms in london thames inn] (8) vs
    #   [hotels with free rooms in tokyo sakura stay shinjuku tower] (10): common 5,
    #   P 5/8, R 5/10, F1 = 2 * 0.625 * 0.5 / 1.125 = 5/9 = 0.556
    bad = await evaluate(wrong_agent())
    assert bad.per_evaluator["token_f1"] == {"passed": 2, "failed": 0, "errored": 0}
    assert mean_score(bad, "token_f1") == pytest.approx((4 / 7 + 5 / 9) / 2)


async def test_the_gate_fails_on_bad_answers_and_passes_on_good() -> None:
    """A gate over these metrics passes right answers and names every violated clause otherwise."""
    gate = (
        (mean("token_f1") >= 0.6)
        & all_pass("expected_fact")
        & all_pass("task_navigation_efficiency")
        & no_errors()
    )
    assert evaluate_gates(gate, [await evaluate(travel_agent())]).passed
    report = evaluate_gates(gate, [await evaluate(wrong_agent())])
    assert not report.passed
    assert [c.clause for c in report.failures] == [
        "mean(token_f1) >= 0.6",
        "all_pass(expected_fact)",
        "all_pass(task_navigation_efficiency)",
    ]
