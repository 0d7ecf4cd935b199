"""@evaluator function checks, result coercion (spec §5) and LocalEvaluator (spec §6)."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import pytest

from evalpipe import (
    CheckResult,
    ConversationSplit,
    EvalItem,
    EvalResults,
    Evaluator,
    ExpectedToolCall,
    LocalEvaluator,
    Message,
    ToolDefinition,
    evaluator,
    keyword_check,
    tool_called_check,
)
from evalpipe.evaluators.local import coerce_result

SUPPORTED = (
    "['context', 'conversation', 'expected_output', 'expected_tool_calls', 'query', "
    "'response', 'tools']"
)


def item(response: str = "It is sunny in Paris.", query: str = "Weather?", **kw: Any) -> EvalItem:
    return EvalItem([Message("user", [query]), Message("assistant", [response])], **kw)


async def run_check(check: Any, it: EvalItem) -> CheckResult:
    out = check(it)
    if inspect.isawaitable(out):
        out = await out
    assert isinstance(out, CheckResult)
    return out


# --------------------------------------------------------------------------------------------
# @evaluator forms and names


async def test_bare_decorator_uses_function_name() -> None:
    """@evaluator names the check after the function and its result carries that name."""

    @evaluator
    def mentions_sun(response: str) -> bool:
        return "sun" in response

    assert mentions_sun.__name__ == "mentions_sun"
    r = await run_check(mentions_sun, item())
    assert r == CheckResult(True, "passed: mentions_sun(response)", "mentions_sun", 1.0)


async def test_decorator_with_name() -> None:
    """@evaluator(name="x") names the check x."""

    @evaluator(name="length_ok")
    def short(response: str) -> bool:
        return len(response) < 5

    assert short.__name__ == "length_ok"
    r = await run_check(short, item())
    assert (r.passed, r.reason, r.check_name) == (False, "failed: short(response)", "length_ok")


@pytest.mark.parametrize(("name", "expected"), [(None, "scorer"), ("custom", "custom")])
async def test_direct_call_form(name: str | None, expected: str) -> None:
    """evaluator(fn, name=...) wraps directly; without a name the function name is used."""

    def scorer(response: str) -> float:
        return 0.9

    check = evaluator(scorer, name=name)
    assert check.__name__ == expected
    assert (await run_check(check, item())).check_name == expected


async def test_calling_the_check_returns_a_coroutine_for_sync_and_async() -> None:
    """The wrapped check is async: calling it gives an awaitable for sync and async functions."""

    @evaluator
    def sync_fn(response: str) -> bool:
        return True

    @evaluator
    async def async_fn(response: str) -> bool:
        await asyncio.sleep(0)
        return False

    for check, expected in ((sync_fn, True), (async_fn, False)):
        pending = check(item())
        assert inspect.iscoroutine(pending)
        assert (await pending).passed is expected


async def test_evaluator_keeps_docstring() -> None:
    """The wrapped check keeps the function's docstring."""

    @evaluator
    def documented(response: str) -> bool:
        """Checks things."""
        return True

    assert documented.__doc__ == "Checks things."


# --------------------------------------------------------------------------------------------
# Parameter injection


async def test_injects_every_supported_parameter() -> None:
    """Each supported parameter name receives the matching item value."""
    seen: dict[str, Any] = {}
    conv = [
        Message("user", ["Q1"]),
        Message("assistant", ["A1"]),
        Message("user", ["Q2"]),
        Message("assistant", ["A2"]),
    ]
    tools = [ToolDefinition("get_weather")]
    expected_calls = [ExpectedToolCall("get_weather", {"city": "Paris"})]
    it = EvalItem(conv, tools, "ctx", "ref", expected_calls, ConversationSplit.FULL)

    @evaluator
    def spy(
        query: str,
        response: str,
        expected_output: str,
        expected_tool_calls: list[ExpectedToolCall],
        conversation: list[Message],
        tools: list[ToolDefinition] | None,
        context: str | None,
    ) -> bool:
        seen.update(
            query=query,
            response=response,
            expected_output=expected_output,
            expected_tool_calls=expected_tool_calls,
            conversation=conversation,
            tools=tools,
            context=context,
        )
        return True

    await run_check(spy, it)
    assert seen == {
        "query": "Q1",
        "response": "A1 A2",
        "expected_output": "ref",
        "expected_tool_calls": expected_calls,
        "conversation": conv,
        "tools": tools,
        "context": "ctx",
    }


async def test_injection_defaults_for_unset_fields() -> None:
    """Unset fields inject "" (expected_output), [] (expected_tool_calls), None (tools, context)."""
    seen: dict[str, Any] = {}

    @evaluator
    def spy(
        expected_output: str,
        expected_tool_calls: list[ExpectedToolCall],
        tools: Any,
        context: Any,
        query: str,
        response: str,
    ) -> bool:
        seen.update(
            expected_output=expected_output,
            expected_tool_calls=expected_tool_calls,
            tools=tools,
            context=context,
            query=query,
            response=response,
        )
        return True

    await run_check(spy, EvalItem([Message("system", ["s"])]))
    assert seen == {
        "expected_output": "",
        "expected_tool_calls": [],
        "tools": None,
        "context": None,
        "query": "",
        "response": "",
    }


async def test_unknown_parameter_with_default_keeps_default() -> None:
    """An unknown parameter that has a default is left to its default."""

    @evaluator
    def scored(response: str, threshold: float = 0.25, *, label: str = "x") -> dict[str, Any]:
        return {"score": 0.3, "threshold": threshold, "reason": label}

    r = await run_check(scored, item())
    assert (r.passed, r.reason) == (True, "x")


async def test_function_without_parameters() -> None:
    """A function that takes no parameters is allowed."""

    @evaluator
    def always() -> bool:
        return True

    assert (await run_check(always, item())).passed is True


@pytest.mark.parametrize(
    ("source", "unknown"),
    [
        ("def bad(score_hint, *args, **kwargs): return True", "['args', 'kwargs', 'score_hint']"),
        ("def bad(response, answer): return True", "['answer']"),
        ("def bad(*args): return True", "['args']"),
        ("def bad(query, *, strict): return True", "['strict']"),
    ],
)
def test_unknown_required_parameter_raises_at_decoration(source: str, unknown: str) -> None:
    """Unknown required parameters (incl. *args/**kwargs) raise TypeError with the two-space text."""
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    with pytest.raises(TypeError) as info:
        evaluator(namespace["bad"])
    assert str(info.value) == (
        f"Function evaluator 'bad' has unknown required parameter(s) {unknown}.  "
        f"Supported: {SUPPORTED}"
    )


def test_unknown_parameter_error_raised_by_decorator_factory_too() -> None:
    """@evaluator(name=...) also raises at decoration time, naming the function."""
    with pytest.raises(TypeError, match=r"^Function evaluator 'bad' has unknown required"):

        @evaluator(name="renamed")
        def bad(score_hint: int) -> bool:
            return True


# --------------------------------------------------------------------------------------------
# Return coercion


@pytest.mark.parametrize(
    ("value", "passed", "reason", "score"),
    [
        (True, True, "passed", 1.0),
        (False, False, "failed", 0.0),
        (1, True, "score=1.000", 1.0),
        (0, False, "score=0.000", 0.0),
        (0.5, True, "score=0.500", 0.5),
        (0.4999, False, "score=0.500", 0.4999),
        (0.73, True, "score=0.730", 0.73),
        (2.5, True, "score=2.500", 2.5),
        (-1, False, "score=-1.000", -1.0),
        ({"score": 0.75}, True, "score=0.750", 0.75),
        ({"score": 0.25}, False, "score=0.250", 0.25),
        ({"score": "0.75"}, True, "score=0.750", 0.75),
        ({"score": 1}, True, "score=1.000", 1.0),
        ({"score": True}, True, "score=1.000", 1.0),
        ({"score": 0.3, "threshold": 0.2}, True, "score=0.300", 0.3),
        ({"score": 0.6, "threshold": 0.7}, False, "score=0.600", 0.6),
        ({"score": 0.6, "threshold": "0.6"}, True, "score=0.600", 0.6),
        ({"score": 0.1, "passed": True}, True, "score=0.100", 0.1),
        ({"score": 0.9, "passed": 0}, False, "score=0.900", 0.9),
        ({"score": 0.9, "passed": "yes"}, True, "score=0.900", 0.9),
        ({"score": 0.9, "reason": "good"}, True, "good", 0.9),
        ({"score": 0.9, "reason": 42}, True, "42", 0.9),
        ({"passed": True}, True, "passed", 1.0),
        ({"passed": False}, False, "failed", 0.0),
        ({"passed": 1}, True, "passed", 1.0),
        ({"passed": 0}, False, "failed", 0.0),
        ({"passed": False, "reason": "nope"}, False, "nope", 0.0),
        ({"passed": True, "reason": 7}, True, "7", 1.0),
    ],
)
def test_coercion_table(value: Any, passed: bool, reason: str, score: float) -> None:
    """coerce_result follows the spec's table: bool before int, numbers at >= 0.5, dict rules."""
    r = coerce_result(value, "my_eval")
    assert r == CheckResult(passed, reason, "my_eval", score)


def test_check_result_returned_as_is_keeping_its_name() -> None:
    """A CheckResult is returned unchanged, keeping its own check_name."""
    original = CheckResult(False, "custom reason", "other_name")
    assert coerce_result(original, "my_eval") is original


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"score": "high"},
            "Function evaluator 'my_eval' returned dict with non-numeric 'score' value: 'high'",
        ),
        (
            {"score": None},
            "Function evaluator 'my_eval' returned dict with non-numeric 'score' value: None",
        ),
        (
            {"score": [1]},
            "Function evaluator 'my_eval' returned dict with non-numeric 'score' value: [1]",
        ),
        (
            {"passed": "yes"},
            "Function evaluator 'my_eval' returned dict with non-boolean 'passed' value: 'yes'",
        ),
        (
            {"passed": None},
            "Function evaluator 'my_eval' returned dict with non-boolean 'passed' value: None",
        ),
        (
            "ok",
            "Function evaluator 'my_eval' returned unsupported type str. "
            "Expected bool, float, dict, or CheckResult.",
        ),
        (
            None,
            "Function evaluator 'my_eval' returned unsupported type NoneType. "
            "Expected bool, float, dict, or CheckResult.",
        ),
        (
            {"label": "good"},
            "Function evaluator 'my_eval' returned unsupported type dict. "
            "Expected bool, float, dict, or CheckResult.",
        ),
        (
            {},
            "Function evaluator 'my_eval' returned unsupported type dict. "
            "Expected bool, float, dict, or CheckResult.",
        ),
        (
            [True],
            "Function evaluator 'my_eval' returned unsupported type list. "
            "Expected bool, float, dict, or CheckResult.",
        ),
    ],
)
def test_coercion_type_errors(value: Any, message: str) -> None:
    """Uncoercible return values raise TypeError with MAF's exact wording."""
    with pytest.raises(TypeError) as info:
        coerce_result(value, "my_eval")
    assert str(info.value) == message


async def test_calling_check_directly_raises_coercion_error() -> None:
    """Awaiting an @evaluator check directly propagates the coercion TypeError (sync and async)."""

    @evaluator
    def my_eval(response: str) -> Any:
        return "ok"

    @evaluator(name="my_eval")
    async def async_eval(response: str) -> Any:
        return None

    with pytest.raises(TypeError, match="returned unsupported type str"):
        await my_eval(item())
    with pytest.raises(TypeError, match="'my_eval' returned unsupported type NoneType"):
        await async_eval(item())


async def test_exception_inside_function_propagates_when_called_directly() -> None:
    """An exception raised by the function propagates out of the check call."""

    @evaluator
    def boom(response: str) -> bool:
        raise ValueError("kaput")

    with pytest.raises(ValueError, match="kaput"):
        await boom(item())


# --------------------------------------------------------------------------------------------
# LocalEvaluator


def test_local_evaluator_is_an_evaluator() -> None:
    """LocalEvaluator is named "Local" and satisfies the Evaluator protocol."""
    local = LocalEvaluator(keyword_check("x"))
    assert local.name == "Local"
    assert isinstance(local, Evaluator)


def test_local_evaluator_rejects_non_callable_checks() -> None:
    """Non-callable checks are rejected at construction."""
    with pytest.raises(TypeError, match="checks must be callable"):
        LocalEvaluator("keyword_check")  # type: ignore[arg-type]


async def test_local_result_shape() -> None:
    """EvalResults has provider/eval_id/run_id/status/counts/per_evaluator/items as the spec lists."""
    items = [item("It is sunny."), item("Rainy.")]
    res = await LocalEvaluator(keyword_check("sunny")).evaluate(items)
    assert (res.provider, res.eval_id, res.run_id, res.status) == (
        "Local",
        "local",
        "Local Eval",
        "completed",
    )
    assert res.result_counts == {"passed": 1, "failed": 1, "errored": 0}
    assert res.per_evaluator == {"keyword_check": {"passed": 1, "failed": 1, "errored": 0}}
    assert [(i.item_id, i.status) for i in res.items] == [("0", "pass"), ("1", "fail")]
    first = res.items[0]
    assert (first.input_text, first.output_text) == ("Weather?", "It is sunny.")
    assert len(first.scores) == 1
    score = first.scores[0]
    assert (score.name, score.score, score.passed, score.sample) == (
        "keyword_check",
        1.0,
        True,
        {"reason": "All keywords found"},
    )
    assert res.items[1].scores[0].score == 0.0
    assert res.error == "keyword_check: Missing keywords: ['sunny']"


async def test_eval_name_becomes_run_id() -> None:
    """The eval_name argument is the run_id."""
    res = await LocalEvaluator(keyword_check()).evaluate([item()], eval_name="Eval: bot")
    assert res.run_id == "Eval: bot"


async def test_item_id_defaults_to_index_and_respects_item_id() -> None:
    """item_id is str(index) unless the item carries its own item_id."""
    items = [item(), item(item_id="custom"), item()]
    res = await LocalEvaluator(keyword_check()).evaluate(items)
    assert [i.item_id for i in res.items] == ["0", "custom", "2"]


async def test_zero_checks_every_item_fails() -> None:
    """With no checks every item fails."""
    res = await LocalEvaluator().evaluate([item(), item()])
    assert res.result_counts == {"passed": 0, "failed": 2, "errored": 0}
    assert [i.status for i in res.items] == ["fail", "fail"]
    assert res.per_evaluator == {}
    assert res.all_passed is False


async def test_empty_items() -> None:
    """No items gives zero counts and an empty run that is not all_passed."""
    res = await LocalEvaluator(keyword_check()).evaluate([])
    assert res.result_counts == {"passed": 0, "failed": 0, "errored": 0}
    assert res.items == []
    assert res.error is None
    assert res.all_passed is False


async def test_item_passes_only_when_all_checks_pass() -> None:
    """An item passes iff every check passed; all_passed reflects it."""
    local = LocalEvaluator(keyword_check("sunny"), keyword_check("paris"))
    res = await local.evaluate([item("sunny in Paris"), item("sunny in Rome")])
    assert [i.status for i in res.items] == ["pass", "fail"]
    assert res.all_passed is False
    ok = await local.evaluate([item("sunny in Paris")])
    assert ok.all_passed is True


async def test_per_evaluator_buckets_shared_by_check_name() -> None:
    """Checks sharing a check_name share one per_evaluator bucket."""
    local = LocalEvaluator(keyword_check("sunny"), keyword_check("snow"), tool_called_check())
    res = await local.evaluate([item("sunny"), item("snow")])
    assert res.per_evaluator == {
        "keyword_check": {"passed": 2, "failed": 2, "errored": 0},
        "tool_called": {"passed": 2, "failed": 0, "errored": 0},
    }
    assert [s.name for s in res.items[0].scores] == [
        "keyword_check",
        "keyword_check",
        "tool_called",
    ]


async def test_bucket_uses_returned_check_name() -> None:
    """A CheckResult's own check_name decides its bucket and score name."""

    @evaluator(name="wrapper")
    def returns_named(response: str) -> CheckResult:
        return CheckResult(True, "ok", "inner_name")

    res = await LocalEvaluator(returns_named).evaluate([item()])
    assert res.per_evaluator == {"inner_name": {"passed": 1, "failed": 0, "errored": 0}}
    assert res.items[0].scores[0].name == "inner_name"


async def test_error_string_joins_every_failed_check_of_every_item() -> None:
    """error joins "check_name: reason" for each failed check, in item then check order."""
    local = LocalEvaluator(keyword_check("sunny"), tool_called_check("get_weather"))
    res = await local.evaluate([item("rain"), item("sunny"), item("hail")])
    assert res.error == (
        "keyword_check: Missing keywords: ['sunny']; "
        "tool_called: Expected tools not called: ['get_weather'] (called: []); "
        "tool_called: Expected tools not called: ['get_weather'] (called: []); "
        "keyword_check: Missing keywords: ['sunny']; "
        "tool_called: Expected tools not called: ['get_weather'] (called: [])"
    )


async def test_error_string_keeps_item_order_when_async_items_finish_last() -> None:
    """Items whose checks wait are finished after the synchronous ones, yet error, the items and
    their statuses keep input order, each item's failed checks in check order."""

    @evaluator
    async def slow_no(response: str) -> bool:
        """Slow"""
        await asyncio.sleep(0)
        return "wait" not in response

    def quick(it: EvalItem) -> CheckResult | Any:
        if "wait" in it.response:
            return slow_no(it)
        return CheckResult("sunny" in it.response, f"quick on {it.response}", "quick")

    local = LocalEvaluator(quick, keyword_check("sunny"))
    res = await local.evaluate([item("wait"), item("rain"), item("sunny"), item("wait sunny")])
    assert res.error == (
        "slow_no: failed: Slow; keyword_check: Missing keywords: ['sunny']; "
        "quick: quick on rain; keyword_check: Missing keywords: ['sunny']; "
        "slow_no: failed: Slow"
    )
    assert [r.output_text for r in res.items] == ["wait", "rain", "sunny", "wait sunny"]
    assert [r.status for r in res.items] == ["fail", "fail", "pass", "fail"]
    assert [[s.name for s in r.scores] for r in res.items] == [
        ["slow_no", "keyword_check"],
        ["quick", "keyword_check"],
        ["quick", "keyword_check"],
        ["slow_no", "keyword_check"],
    ]


async def test_checks_answering_before_an_async_one_are_reported_once_in_order() -> None:
    """An item whose first checks fail or raise synchronously and whose last one waits reports
    each check once, in check order: its failures in error once, its raise as its error."""

    def no(it: EvalItem) -> CheckResult:
        return CheckResult(False, f"no on {it.response}", "no")

    def boom(it: EvalItem) -> CheckResult:
        raise ValueError(it.response)

    async def later(it: EvalItem) -> CheckResult:
        await asyncio.sleep(0)
        return CheckResult(False, "later", "later")

    local = LocalEvaluator(no, boom, later, keyword_check("sunny"))
    res = await local.evaluate([item("a"), item("sunny")])
    assert res.error == (
        "no: no on a; later: later; keyword_check: Missing keywords: ['sunny']; "
        "no: no on sunny; later: later"
    )
    assert [r.status for r in res.items] == ["error", "error"]
    assert [r.error_message for r in res.items] == [
        "boom: ValueError: a",
        "boom: ValueError: sunny",
    ]
    assert [[(s.name, s.passed, s.score) for s in r.scores] for r in res.items] == [
        [
            ("no", False, 0.0),
            ("boom", None, None),
            ("later", False, 0.0),
            ("keyword_check", False, 0.0),
        ],
        [
            ("no", False, 0.0),
            ("boom", None, None),
            ("later", False, 0.0),
            ("keyword_check", True, 1.0),
        ],
    ]
    assert res.per_evaluator["no"] == {"passed": 0, "failed": 2, "errored": 0}
    assert res.per_evaluator["boom"] == {"passed": 0, "failed": 0, "errored": 2}


async def test_error_is_none_when_nothing_failed() -> None:
    """error is None when no check failed."""
    res = await LocalEvaluator(keyword_check("sunny")).evaluate([item()])
    assert res.error is None


async def test_sample_none_for_empty_reason() -> None:
    """sample is {"reason": ...} for a non-empty reason and None for an empty one."""

    def silent(it: EvalItem) -> CheckResult:
        return CheckResult(True, "", "silent")

    res = await LocalEvaluator(silent, keyword_check()).evaluate([item()])
    assert res.items[0].scores[0].sample is None
    assert res.items[0].scores[1].sample == {"reason": "All keywords found"}


async def test_plain_sync_and_async_check_functions() -> None:
    """Plain sync and async callables returning CheckResult both work as checks."""

    def sync_check(it: EvalItem) -> CheckResult:
        return CheckResult("sunny" in it.response, "s", "sync_check")

    async def async_check(it: EvalItem) -> CheckResult:
        await asyncio.sleep(0)
        return CheckResult("Paris" in it.response, "a", "async_check")

    res = await LocalEvaluator(sync_check, async_check).evaluate([item(), item("sunny")])
    assert [i.status for i in res.items] == ["pass", "fail"]
    assert res.per_evaluator == {
        "sync_check": {"passed": 2, "failed": 0, "errored": 0},
        "async_check": {"passed": 1, "failed": 1, "errored": 0},
    }


async def test_float_score_kept_and_threshold() -> None:
    """An @evaluator float is kept as the score (0.73 stays 0.73) and passes at >= 0.5."""

    def make(value: float) -> Any:
        @evaluator(name="quality")
        def quality(response: str) -> float:
            return value

        return quality

    for value, status in ((0.73, "pass"), (0.5, "pass"), (0.49, "fail")):
        res = await LocalEvaluator(make(value)).evaluate([item()])
        score = res.items[0].scores[0]
        assert score.score == value
        assert score.passed is (status == "pass")
        assert score.sample == {"reason": f"score={value:.3f}"}
        assert res.items[0].status == status


async def test_dict_score_kept() -> None:
    """A dict score is kept as the item score with its custom threshold decision."""

    @evaluator
    def judged(response: str) -> dict[str, Any]:
        return {"score": 3.0, "threshold": 4, "reason": "meh"}

    res = await LocalEvaluator(judged).evaluate([item()])
    s = res.items[0].scores[0]
    assert (s.score, s.passed, s.sample) == (3.0, False, {"reason": "meh"})


async def test_raising_check_makes_item_errored_and_keeps_others() -> None:
    """A raising check gives that item status "error" / CheckError; other items and checks are kept."""

    def fragile(it: EvalItem) -> CheckResult:
        if "boom" in it.response:
            raise ValueError("kaput")
        return CheckResult(True, "fine", "fragile")

    local = LocalEvaluator(fragile, keyword_check("sunny"))
    res = await local.evaluate([item("sunny"), item("boom sunny"), item("rain")])
    assert [i.status for i in res.items] == ["pass", "error", "fail"]
    assert res.result_counts == {"passed": 1, "failed": 1, "errored": 1}
    assert (res.passed, res.failed, res.errored, res.total) == (1, 1, 1, 2)
    errored = res.items[1]
    assert errored.error_code == "CheckError"
    assert errored.error_message == "fragile: ValueError: kaput"
    assert errored.is_error
    assert not errored.is_failed
    assert [s.name for s in errored.scores] == ["fragile", "keyword_check"]
    assert errored.scores[0].score is None
    assert errored.scores[1].passed is True
    assert res.per_evaluator["fragile"] == {"passed": 2, "failed": 0, "errored": 1}
    assert res.per_evaluator["keyword_check"] == {"passed": 2, "failed": 1, "errored": 0}
    assert res.all_passed is False


async def test_raising_async_check_makes_item_errored() -> None:
    """An async check that raises errors only its item."""

    async def flaky(it: EvalItem) -> CheckResult:
        await asyncio.sleep(0)
        if it.response == "bad":
            raise RuntimeError("lost connection")
        return CheckResult(True, "ok", "flaky")

    res = await LocalEvaluator(flaky).evaluate([item("bad"), item("good")])
    assert [i.status for i in res.items] == ["error", "pass"]
    assert res.items[0].error_message == "flaky: RuntimeError: lost connection"
    assert res.per_evaluator == {"flaky": {"passed": 1, "failed": 0, "errored": 1}}


async def test_coercion_error_inside_local_evaluator_becomes_errored_item() -> None:
    """A coercion TypeError while LocalEvaluator runs errors the item and keeps MAF's text."""

    @evaluator
    def my_eval(response: str) -> Any:
        return "ok" if response == "bad" else True

    @evaluator(name="async_eval")
    async def other(response: str) -> Any:
        return {"score": "high"} if response == "bad" else 1.0

    res = await LocalEvaluator(my_eval, other).evaluate([item("bad"), item("good")])
    assert [i.status for i in res.items] == ["error", "pass"]
    msg = res.items[0].error_message
    assert msg is not None
    assert (
        "Function evaluator 'my_eval' returned unsupported type str. "
        "Expected bool, float, dict, or CheckResult."
    ) in msg
    assert (
        "Function evaluator 'async_eval' returned dict with non-numeric 'score' value: 'high'"
        in msg
    )
    assert res.result_counts == {"passed": 1, "failed": 0, "errored": 1}


async def test_check_returning_wrong_type_is_errored() -> None:
    """A plain check that returns something other than a CheckResult errors its item."""

    def sloppy(it: EvalItem) -> Any:
        return True

    res = await LocalEvaluator(sloppy).evaluate([item()])
    assert res.items[0].status == "error"
    assert res.items[0].error_message == (
        "sloppy: TypeError: check 'sloppy' returned bool, expected CheckResult"
    )


async def test_item_with_target_error_is_errored_without_running_checks() -> None:
    """An item whose target call failed is reported errored with its own error code; checks do not run."""
    calls: list[str] = []

    def spy(it: EvalItem) -> CheckResult:
        calls.append(it.response)
        return CheckResult(True, "ok", "spy")

    broken = item("partial", error_code="AgentError", error_message="timeout")
    res = await LocalEvaluator(spy).evaluate([broken, item("fine")])
    assert calls == ["fine"]
    assert [i.status for i in res.items] == ["error", "pass"]
    assert (res.items[0].error_code, res.items[0].error_message) == ("AgentError", "timeout")
    assert res.per_evaluator == {"spy": {"passed": 1, "failed": 0, "errored": 1}}


async def test_async_checks_of_many_items_run_concurrently() -> None:
    """20 items x an async check sleeping 0.05 s finish well under 1 s (items run concurrently)."""
    active = 0
    peak = 0

    @evaluator
    async def slow(response: str) -> bool:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1
        return True

    start = time.perf_counter()
    res = await LocalEvaluator(slow).evaluate([item() for _ in range(20)])
    elapsed = time.perf_counter() - start
    assert res.result_counts == {"passed": 20, "failed": 0, "errored": 0}
    assert elapsed < 0.5
    assert peak > 1


async def test_checks_of_one_item_run_concurrently() -> None:
    """Several async checks of one item run at the same time."""

    async def sleeper(it: EvalItem) -> CheckResult:
        await asyncio.sleep(0.1)
        return CheckResult(True, "ok", "sleeper")

    start = time.perf_counter()
    res = await LocalEvaluator(*[sleeper] * 5).evaluate([item()])
    assert time.perf_counter() - start < 0.4
    assert res.per_evaluator == {"sleeper": {"passed": 5, "failed": 0, "errored": 0}}


async def test_results_keep_input_order_with_uneven_async_durations() -> None:
    """Items are reported in input order even when later items finish first."""

    @evaluator
    async def delayed(response: str) -> bool:
        await asyncio.sleep(0.01 * (5 - int(response)))
        return response != "3"

    res = await LocalEvaluator(delayed).evaluate([item(str(i)) for i in range(5)])
    assert [(i.item_id, i.output_text, i.status) for i in res.items] == [
        ("0", "0", "pass"),
        ("1", "1", "pass"),
        ("2", "2", "pass"),
        ("3", "3", "fail"),
        ("4", "4", "pass"),
    ]


async def test_local_results_are_eval_results() -> None:
    """LocalEvaluator returns an EvalResults whose raise_for_status reports the failures."""
    res = await LocalEvaluator(keyword_check("sunny")).evaluate([item("rain")], eval_name="e1")
    assert isinstance(res, EvalResults)
    with pytest.raises(Exception, match=r"^Eval run e1 completed: 0 passed, 1 failed\. Error: "):
        res.raise_for_status()


def test_max_concurrency_must_be_positive() -> None:
    """A LocalEvaluator bound below 1 is rejected at construction (it would wait forever)."""
    with pytest.raises(ValueError, match=r"max_concurrency must be >= 1, got 0\."):
        LocalEvaluator(keyword_check("x"), max_concurrency=0)


async def test_a_bare_verdict_says_what_the_check_looked_for() -> None:
    """Regression: `mentions_expected: failed` told nothing. A bool (or {"passed": ...} without a
    reason) from an @evaluator gets the docstring's first line as what it looked for; a reason the
    function gives is kept; a score keeps MAF's score reason."""

    @evaluator
    def mentions_paris(response: str) -> bool:
        """The answer names Paris.

        More detail that is not shown."""
        return "Paris" in response

    @evaluator
    def flagged(response: str) -> dict[str, object]:
        return {"passed": False}

    @evaluator
    def explained(response: str) -> dict[str, object]:
        return {"passed": False, "reason": "no city at all"}

    r = await run_check(mentions_paris, item("It is sunny."))
    assert (r.passed, r.reason) == (False, "failed: The answer names Paris")
    assert (await run_check(flagged, item())).reason == "failed: flagged(response)"
    assert (await run_check(explained, item())).reason == "no city at all"
