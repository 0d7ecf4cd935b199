"""The rows docs/maf-compatibility.md marks "identical", each checked against the real MAF object:
the same inputs through MAF's and evalpipe's names give the same outputs (check names, verdicts and
reasons, splits and query/response strings, fields, defaults, protocol checks)."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any

import pytest

import evalpipe
from evalpipe.foundry import GeneratedEvaluatorRef

af = pytest.importorskip("agent_framework")
maf_foundry = pytest.importorskip("agent_framework.foundry")
pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def user(text: str) -> Any:
    return af.Message(role="user", contents=[text])


def assistant(*contents: Any) -> Any:
    return af.Message(role="assistant", contents=list(contents))


def call(name: str, arguments: Any, call_id: str = "c") -> Any:
    return af.Content.from_function_call(call_id, name, arguments=arguments)


def tool(result: str, call_id: str = "c") -> Any:
    return af.Message(
        role="tool", contents=[af.Content.from_function_result(call_id, result=result)]
    )


CONVERSATIONS: dict[str, list[Any]] = {
    "weather": [
        user("What's the weather in Paris?"),
        assistant(call("get_weather", {"city": "Paris", "unit": "c"})),
        tool('{"temp": 18}'),
        assistant("It is sunny in Paris, 18C."),
    ],
    "three tools": [
        af.Message(role="system", contents=["Be brief."]),
        user("Book it"),
        assistant(call("search", '{"q": "hotel", "filter": {"city": "NYC", "max": 3}}', "c1")),
        tool("found", "c1"),
        assistant(call("lookup", "{not json", "c2"), call("book", None, "c3")),
        tool("ok", "c3"),
        user("Thanks, and the price?"),
        assistant(call("lookup", "[1, 2]", "c4"), "Booked; ALPHA costs 5."),
    ],
    "no calls": [user("Hi"), assistant("Hello there, zeta.")],
    "multi turn": [
        af.Message(role="system", contents=["sys"]),
        user("Q1"),
        assistant("A1"),
        user("Q2"),
        assistant(call("f", {"n": 5})),
        tool("r"),
        assistant("A2 alpha"),
    ],
}

EXPECTED = [
    None,
    [],
    [("get_weather", {"city": "Paris"})],
    [("get_weather", {"city": "Rome"})],
    [("search", {"filter": {"city": "NYC"}}), ("book", None), ("refund", None)],
    [("lookup", {}), ("lookup", None), ("search", {"q": "hotel"})],
    [("f", {"n": 5.0}), ("f", {"n": "5"}), ("f", {"n": True})],
]


def _items(conversation: list[Any], expected: Any, split: Any = None) -> tuple[Any, Any]:
    """The same item in MAF's and in evalpipe's EvalItem."""
    maf = af.EvalItem(
        conversation=conversation,
        expected_tool_calls=None
        if expected is None
        else [af.ExpectedToolCall(n, a) for n, a in expected],
        split_strategy=split,
    )
    ours = evalpipe.EvalItem(
        conversation,
        expected_tool_calls=None
        if expected is None
        else [evalpipe.ExpectedToolCall(n, a) for n, a in expected],
        split_strategy=split,
    )
    return maf, ours


async def _verdict(check: Callable[[Any], Any], item: Any) -> tuple[bool, str, str]:
    result = check(item)
    if inspect.isawaitable(result):
        result = await result
    return result.passed, result.reason, result.check_name


CHECKS: list[Callable[[Any], Callable[[Any], Any]]] = [
    lambda m: m.keyword_check("sunny", "Paris"),
    lambda m: m.keyword_check("zeta", "Alpha"),
    lambda m: m.keyword_check("alpha", case_sensitive=True),
    lambda m: m.keyword_check(),
    lambda m: m.tool_called_check("get_weather"),
    lambda m: m.tool_called_check("search", "lookup", "book"),
    lambda m: m.tool_called_check("refund", "cancel", "search"),
    lambda m: m.tool_called_check("refund", "lookup", mode="any"),
    lambda m: m.tool_called_check("refund", mode="any"),
    lambda m: m.tool_called_check(),
    lambda m: m.tool_called_check(mode="any"),
    lambda m: m.tool_called_check("Get_Weather"),
    lambda m: m.tool_calls_present,
    lambda m: m.tool_call_args_match,
]


@pytest.mark.parametrize("split", [None, "full"])
@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
async def test_built_in_checks_give_mafs_verdicts_names_and_reasons(name: str, split: Any) -> None:
    """keyword_check, tool_called_check, tool_calls_present and tool_call_args_match: MAF's
    check_name, passed and reason text for every conversation, expectation and split."""
    for expected in EXPECTED:
        maf_item, our_item = _items(
            CONVERSATIONS[name],
            expected,
            af.ConversationSplit.FULL if split else None,
        )
        if split:
            our_item.split_strategy = evalpipe.ConversationSplit.FULL
        for make in CHECKS:
            maf = await _verdict(make(af), maf_item)
            ours = await _verdict(make(evalpipe), our_item)
            assert ours == maf, (name, expected, maf)


SPLIT_CASES: dict[str, list[Any]] = {
    **CONVERSATIONS,
    "no user": [af.Message(role="system", contents=["s"]), assistant("Hello there.")],
    "trailing user": [user("Q1"), assistant("A1"), user("Q2")],
    "only a question": [af.Message(role="system", contents=["s"]), user("Only a question")],
    "empty": [],
    "no final text": [user("Weather?"), assistant(call("w", {})), tool("x")],
    "two users": [user("First part."), user("Second part."), assistant("Answer.")],
    "greeting first": [assistant("Hi!"), user("Help me"), assistant("Sure.")],
    "capital role": [af.Message(role="User", contents=["x"]), assistant("reply")],
    "developer": [af.Message(role="developer", contents=["d"]), user("hey"), assistant("yo")],
    "inner spaces": [user(" q "), assistant("alpha ", " beta")],
}


@pytest.mark.parametrize("name", sorted(SPLIT_CASES))
def test_conversation_splits_and_strings_are_mafs(name: str) -> None:
    """ConversationSplit.LAST_TURN / FULL, EvalItem.split_messages, _split_last_turn_static,
    query/response strings and per_turn_items: MAF's split points and texts."""
    conversation = SPLIT_CASES[name]

    def shape(split: tuple[list[Any], list[Any]]) -> tuple[int, int]:
        return len(split[0]), len(split[1])

    for member in ("LAST_TURN", "FULL"):
        maf_split = getattr(af.ConversationSplit, member)
        our_split = getattr(evalpipe.ConversationSplit, member)
        assert shape(our_split(conversation)) == shape(maf_split(conversation))
        maf_item = af.EvalItem(conversation=conversation, split_strategy=maf_split)
        our_item = evalpipe.EvalItem(conversation, split_strategy=our_split)
        assert (our_item.query, our_item.response) == (maf_item.query, maf_item.response)
        assert shape(our_item.split_messages()) == shape(maf_item.split_messages())
    assert shape(evalpipe.EvalItem._split_last_turn_static(conversation)) == shape(
        af.EvalItem._split_last_turn_static(conversation)
    )
    maf_turns = af.EvalItem.per_turn_items(conversation, context="ctx")
    our_turns = evalpipe.EvalItem.per_turn_items(conversation, context="ctx")
    assert [(t.query, t.response, t.context) for t in our_turns] == [
        (t.query, t.response, t.context) for t in maf_turns
    ]


def test_conversation_split_members_and_the_splitter_protocol_are_mafs() -> None:
    """ConversationSplit's values, str/repr and callability; ConversationSplitter recognises the
    same objects (members, plain functions) and refuses the same ones."""
    for member in ("LAST_TURN", "FULL"):
        maf, ours = (
            getattr(af.ConversationSplit, member),
            getattr(evalpipe.ConversationSplit, member),
        )
        assert (ours.value, str(ours), repr(ours)) == (maf.value, str(maf), repr(maf))
        assert ours == maf.value
    candidates = [
        af.ConversationSplit.FULL,
        evalpipe.ConversationSplit.LAST_TURN,
        lambda conversation: (conversation, []),
        "last_turn",
        42,
    ]
    assert [isinstance(c, evalpipe.ConversationSplitter) for c in candidates] == [
        isinstance(c, af.ConversationSplitter) for c in candidates
    ]


def _fields(cls: type) -> list[tuple[str, Any]]:
    out = []
    for f in dataclasses.fields(cls):
        default = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append((f.name, "required" if default is dataclasses.MISSING else default))
    return out


def test_expected_tool_call_is_mafs() -> None:
    """ExpectedToolCall(name, arguments=None): the same fields, defaults, positional form and
    equality as MAF's dataclass."""
    assert [(n, d) for n, d in _fields(af.ExpectedToolCall)] == [
        ("name", "required"),
        ("arguments", None),
    ]
    ours = evalpipe.ExpectedToolCall("get_weather", {"city": "Paris"})
    maf = af.ExpectedToolCall("get_weather", {"city": "Paris"})
    assert (ours.name, ours.arguments) == (maf.name, maf.arguments)
    assert evalpipe.ExpectedToolCall("x").arguments is af.ExpectedToolCall("x").arguments is None
    assert (ours == evalpipe.ExpectedToolCall("get_weather", {"city": "Paris"})) is (
        maf == af.ExpectedToolCall("get_weather", {"city": "Paris"})
    )
    assert list(inspect.signature(evalpipe.ExpectedToolCall).parameters)[:2] == [
        "name",
        "arguments",
    ]


def test_eval_item_result_is_mafs() -> None:
    """EvalItemResult: MAF's fields in MAF's order with MAF's defaults, and the same is_error /
    is_passed / is_failed for every status."""
    assert _fields(evalpipe.EvalItemResult) == _fields(af.EvalItemResult)
    for status in ("pass", "fail", "error", "errored", "unknown"):
        maf = af.EvalItemResult(item_id="1", status=status)
        ours = evalpipe.EvalItemResult("1", status)
        assert (ours.is_error, ours.is_passed, ours.is_failed) == (
            maf.is_error,
            maf.is_passed,
            maf.is_failed,
        )


def test_eval_not_passed_error_and_rubric_score_are_mafs() -> None:
    """EvalNotPassedError is a plain Exception as MAF's; RubricScore has MAF's fields, all
    required, and is frozen."""
    assert evalpipe.EvalNotPassedError.__mro__[1:] == af.EvalNotPassedError.__mro__[1:]
    assert _fields(evalpipe.RubricScore) == _fields(af.RubricScore)
    score = evalpipe.RubricScore("clarity", 4, True, 2, "clear")
    with pytest.raises(dataclasses.FrozenInstanceError):
        score.score = 5  # type: ignore[misc]
    assert dataclasses.astuple(score) == dataclasses.astuple(
        af.RubricScore("clarity", 4, True, 2, "clear")
    )


class _Provider:
    name = "P"

    async def evaluate(self, items: Any, *, eval_name: str) -> Any:
        return None


class _NoEvaluate:
    name = "P"


def test_evaluator_protocol_accepts_what_mafs_accepts() -> None:
    """Evaluator is a runtime-checkable protocol on `name` and `evaluate`: each side's providers
    satisfy the other's protocol, and an object without evaluate satisfies neither."""
    candidates = [
        _Provider(),
        _NoEvaluate(),
        evalpipe.LocalEvaluator(evalpipe.keyword_check("x")),
        af.LocalEvaluator(af.keyword_check("x")),
        evalpipe.keyword_check("x"),
    ]
    assert [isinstance(c, evalpipe.Evaluator) for c in candidates] == [
        isinstance(c, af.Evaluator) for c in candidates
    ]
    assert isinstance(candidates[3], evalpipe.Evaluator)
    assert isinstance(candidates[2], af.Evaluator)


def test_eval_check_alias_has_mafs_shape() -> None:
    """EvalCheck is MAF's alias: a callable of one EvalItem returning a CheckResult or an
    awaitable of one."""
    from agent_framework._evaluation import EvalCheck as MafEvalCheck

    maf_args, maf_result = typing.get_args(MafEvalCheck)
    our_args, our_result = typing.get_args(evalpipe.EvalCheck)
    assert typing.get_origin(evalpipe.EvalCheck) is typing.get_origin(MafEvalCheck)
    assert [a.__name__ for a in our_args] == [a.__name__ for a in maf_args] == ["EvalItem"]
    our_text = our_result if isinstance(our_result, str) else str(our_result)
    assert our_text.replace(" ", "") == "CheckResult|Awaitable[CheckResult]"
    assert {
        getattr(a, "__name__", None) or typing.get_origin(a).__name__
        for a in typing.get_args(maf_result)
    } == {
        "CheckResult",
        "Awaitable",
    }


def test_generated_evaluator_ref_is_mafs() -> None:
    """GeneratedEvaluatorRef(name, version=None, display_name=None): MAF's fields, frozen, and
    latest(name, display_name=...) gives the same reference."""
    assert _fields(GeneratedEvaluatorRef) == _fields(maf_foundry.GeneratedEvaluatorRef)
    ours = GeneratedEvaluatorRef.latest("rubric", display_name="Rubric")
    maf = maf_foundry.GeneratedEvaluatorRef.latest("rubric", display_name="Rubric")
    assert dataclasses.astuple(ours) == dataclasses.astuple(maf) == ("rubric", None, "Rubric")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ours.version = "2"  # type: ignore[misc]
