"""Built-in checks: names, rules and exact reason strings (spec §4)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from evalpipe import (
    CheckResult,
    ConversationSplit,
    EvalItem,
    ExpectedToolCall,
    Message,
    keyword_check,
    tool_call_args_match,
    tool_called_check,
    tool_calls_present,
)


def user(text: str) -> Message:
    return Message("user", [text])


def asst(text: str) -> Message:
    return Message("assistant", [text])


def calls(*pairs: tuple[str, Any]) -> Message:
    """One assistant message holding a function_call per (name, arguments) pair."""
    return Message(
        "assistant",
        [
            {"type": "function_call", "call_id": f"c{i}", "name": name, "arguments": args}
            for i, (name, args) in enumerate(pairs)
        ],
    )


def result(text: str) -> Message:
    return Message("tool", [{"type": "function_result", "call_id": "c0", "result": text}])


def run(check: Any, item: EvalItem) -> CheckResult:
    out = check(item)
    assert isinstance(out, CheckResult)
    return out


# --------------------------------------------------------------------------------------------
# keyword_check


def test_keyword_check_pass_reason_and_name() -> None:
    """All keywords present passes with "All keywords found" under check_name keyword_check."""
    item = EvalItem([user("Weather?"), asst("It is Sunny in Paris.")])
    r = run(keyword_check("sunny", "paris"), item)
    assert r == CheckResult(True, "All keywords found", "keyword_check")


def test_keyword_check_missing_list_in_argument_order_original_spelling() -> None:
    """The fail reason lists missing keywords in argument order with their original spelling."""
    item = EvalItem([user("q"), asst("beta gamma")])
    r = run(keyword_check("zeta", "beta", "Alpha"), item)
    assert r.passed is False
    assert r.reason == "Missing keywords: ['zeta', 'Alpha']"
    assert r.check_name == "keyword_check"


@pytest.mark.parametrize(
    ("keywords", "case_sensitive", "passed"),
    [
        (("PARIS",), False, True),
        (("paris",), False, True),
        (("PARIS",), True, False),
        (("Paris",), True, True),
        (("paris",), True, False),
    ],
)
def test_keyword_check_case_sensitivity(
    keywords: tuple[str, ...], case_sensitive: bool, passed: bool
) -> None:
    """Case-insensitive mode lowercases both sides; case-sensitive mode is an exact substring test."""
    item = EvalItem([user("q"), asst("Trip to Paris")])
    assert run(keyword_check(*keywords, case_sensitive=case_sensitive), item).passed is passed


def test_keyword_check_is_substring_test() -> None:
    """Keywords match as plain substrings, not whole words."""
    item = EvalItem([user("q"), asst("unsunny")])
    assert run(keyword_check("sun"), item).passed is True


@pytest.mark.parametrize(
    "conversation",
    [[], [user("only a question")], [user("q"), asst("anything")]],
    ids=["empty", "no_response", "with_response"],
)
def test_keyword_check_zero_keywords_always_pass(conversation: list[Message]) -> None:
    """keyword_check() with no keywords always passes."""
    r = run(keyword_check(), EvalItem(conversation))
    assert (r.passed, r.reason) == (True, "All keywords found")


@pytest.mark.parametrize(
    "conversation",
    [
        [user("q"), calls(("get_weather", None)), result("sunny"), asst("Done.")],
        [user("Is it sunny?"), asst("Let me check.")],
        [user("q1"), asst("It is sunny."), user("q2"), asst("Bye.")],
        [Message("system", ["sunny"]), user("q"), asst("Bye.")],
    ],
    ids=["tool_result", "query", "earlier_turn", "system"],
)
def test_keyword_check_only_searches_response(conversation: list[Message]) -> None:
    """Text only in tool results, the query, system text or an earlier turn (LAST_TURN) fails."""
    r = run(keyword_check("sunny"), EvalItem(conversation))
    assert (r.passed, r.reason) == (False, "Missing keywords: ['sunny']")


def test_keyword_check_full_split_counts_earlier_turns() -> None:
    """Under FULL, earlier assistant turns are part of the response, so their text counts."""
    conv = [user("q1"), asst("It is sunny."), user("q2"), asst("Bye.")]
    assert run(keyword_check("sunny"), EvalItem(conv)).passed is False
    full_item = EvalItem(conv, split_strategy=ConversationSplit.FULL)
    assert run(keyword_check("sunny", "bye"), full_item).passed is True


# --------------------------------------------------------------------------------------------
# tool_called_check

# calls in order: search (query side, before the last user), lookup, book
TOOL_CONV = [
    user("first"),
    calls(("search", {"q": "x"})),
    asst("Found."),
    user("book it"),
    calls(("lookup", None)),
    result("r"),
    calls(("book", None)),
    asst("Booked."),
]


@pytest.mark.parametrize(
    ("names", "mode", "passed", "reason"),
    [
        (
            ("book", "lookup", "search"),
            "all",
            True,
            "All expected tools called: ['book', 'lookup', 'search']",
        ),
        # early return: book was not seen yet when search+lookup were satisfied
        (("lookup", "search"), "all", True, "All expected tools called: ['lookup', 'search']"),
        (("search",), "all", True, "All expected tools called: ['search']"),
        (
            ("cancel", "search", "refund"),
            "all",
            False,
            "Expected tools not called: ['cancel', 'refund'] (called: ['book', 'lookup', 'search'])",
        ),
        (
            ("refund", "book", "cancel"),
            "all",
            False,
            "Expected tools not called: ['refund', 'cancel'] (called: ['book', 'lookup', 'search'])",
        ),
        (("lookup", "refund"), "any", True, "Expected tool found: ['lookup']"),
        # early return: the condition holds at lookup, before book is seen
        (("book", "lookup"), "any", True, "Expected tool found: ['lookup']"),
        (
            ("cancel", "refund"),
            "any",
            False,
            "None of expected tools called: ['cancel', 'refund'] (called: ['book', 'lookup', 'search'])",
        ),
        (
            ("Search",),
            "all",
            False,
            "Expected tools not called: ['Search'] (called: ['book', 'lookup', 'search'])",
        ),
        (
            ("BOOK",),
            "any",
            False,
            "None of expected tools called: ['BOOK'] (called: ['book', 'lookup', 'search'])",
        ),
    ],
)
def test_tool_called_check_reasons(
    names: tuple[str, ...], mode: Any, passed: bool, reason: str
) -> None:
    """tool_called_check reports exact MAF reasons, returning early with the tools seen so far."""
    r = run(tool_called_check(*names, mode=mode), EvalItem(TOOL_CONV))
    assert r == CheckResult(passed, reason, "tool_called")


def test_tool_called_check_default_mode_is_all() -> None:
    """Without mode, every named tool must have been called."""
    r = run(tool_called_check("search", "refund"), EvalItem(TOOL_CONV))
    assert r.passed is False
    assert r.reason.startswith("Expected tools not called: ['refund']")


def test_tool_called_check_ignores_split_and_roles() -> None:
    """Calls on the query side and in any role's message count, whatever the split."""
    conv = [
        Message("system", [{"type": "function_call", "name": "sys_tool"}]),
        calls(("early", None)),
        user("q"),
        asst("a"),
    ]
    item = EvalItem(conv)
    assert item.split_messages()[1] == [conv[3]]
    r = run(tool_called_check("sys_tool", "early"), item)
    assert r == CheckResult(True, "All expected tools called: ['early', 'sys_tool']", "tool_called")


def test_tool_called_check_no_names_all_passes_without_calls() -> None:
    """No names in "all" mode passes with an empty list when there are no calls at all."""
    r = run(tool_called_check(), EvalItem([user("q"), asst("a")]))
    assert r == CheckResult(True, "All expected tools called: []", "tool_called")


def test_tool_called_check_no_names_all_passes_with_calls() -> None:
    """No names in "all" mode passes at the first call seen."""
    r = run(tool_called_check(mode="all"), EvalItem(TOOL_CONV))
    assert r == CheckResult(True, "All expected tools called: ['search']", "tool_called")


@pytest.mark.parametrize(
    ("conversation", "called"),
    [([user("q"), asst("a")], "[]"), (TOOL_CONV, "['book', 'lookup', 'search']")],
    ids=["no_calls", "with_calls"],
)
def test_tool_called_check_no_names_any_always_fails(
    conversation: list[Message], called: str
) -> None:
    """No names in "any" mode always fails."""
    r = run(tool_called_check(mode="any"), EvalItem(conversation))
    assert r == CheckResult(
        False, f"None of expected tools called: [] (called: {called})", "tool_called"
    )


def test_tool_called_check_name_and_bad_mode() -> None:
    """The check function is named tool_called; an unknown mode is rejected up front."""
    assert tool_called_check("x").__name__ == "tool_called"
    assert keyword_check("x").__name__ == "keyword_check"
    with pytest.raises(ValueError, match="mode must be 'all' or 'any'"):
        tool_called_check("x", mode="some")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# tool_calls_present


@pytest.mark.parametrize("expected", [None, []], ids=["none", "empty"])
def test_tool_calls_present_without_expectations_passes(
    expected: list[ExpectedToolCall] | None,
) -> None:
    """No expected tool calls passes with "No expected tool calls specified."."""
    item = EvalItem([user("q"), asst("a")], expected_tool_calls=expected)
    r = tool_calls_present(item)
    assert r == CheckResult(True, "No expected tool calls specified.", "tool_calls_present")


def test_tool_calls_present_pass_reason() -> None:
    """Pass reason lists the expected names and the sorted called names."""
    item = EvalItem(TOOL_CONV, expected_tool_calls=[ExpectedToolCall("book")])
    r = tool_calls_present(item)
    assert r == CheckResult(
        True,
        "All expected tools called: ['book'] (called: ['book', 'lookup', 'search'])",
        "tool_calls_present",
    )


def test_tool_calls_present_fail_reason_in_expectation_order() -> None:
    """Fail reason lists the missing names in expectation order."""
    item = EvalItem(
        TOOL_CONV,
        expected_tool_calls=[
            ExpectedToolCall("refund"),
            ExpectedToolCall("book"),
            ExpectedToolCall("cancel"),
        ],
    )
    r = tool_calls_present(item)
    assert r == CheckResult(
        False,
        "Missing tool calls: ['refund', 'cancel'] (called: ['book', 'lookup', 'search'])",
        "tool_calls_present",
    )


def test_tool_calls_present_ignores_arguments_order_extras_and_duplicates() -> None:
    """Names only: wrong arguments, any order, extra calls and duplicate expectations still pass."""
    item = EvalItem(
        TOOL_CONV,
        expected_tool_calls=[
            ExpectedToolCall("book", {"never": "matches"}),
            ExpectedToolCall("search"),
            ExpectedToolCall("search"),
        ],
    )
    assert tool_calls_present(item).passed is True


def test_tool_calls_present_without_any_calls() -> None:
    """With no calls at all the called list is empty."""
    item = EvalItem([user("q"), asst("a")], expected_tool_calls=[ExpectedToolCall("x")])
    assert tool_calls_present(item).reason == "Missing tool calls: ['x'] (called: [])"


# --------------------------------------------------------------------------------------------
# tool_call_args_match


def args_item(actual: list[tuple[str, Any]], expected: list[ExpectedToolCall]) -> EvalItem:
    return EvalItem([user("q"), calls(*actual), asst("done")], expected_tool_calls=expected)


def test_tool_call_args_match_full_reason_text() -> None:
    """The reason is a matched/total header then one detail line per expectation."""
    item = args_item(
        [("a", {"x": 1}), ("b", {"y": 2})],
        [ExpectedToolCall("a", {"x": 1}), ExpectedToolCall("b", {"y": 3}), ExpectedToolCall("c")],
    )
    r = tool_call_args_match(item)
    assert r == CheckResult(
        False,
        "Tool call args match: 1/3\n"
        "  a: args match\n"
        "  b: args mismatch (actual: [{'y': 2}])\n"
        "  c: not called",
        "tool_call_args_match",
    )


def test_tool_call_args_match_all_matched_passes() -> None:
    """passed is True exactly when every expectation matched."""
    item = args_item(
        [("a", {"x": 1}), ("b", "{}")],
        [ExpectedToolCall("a", {"x": 1}), ExpectedToolCall("b")],
    )
    r = tool_call_args_match(item)
    assert r.passed is True
    assert r.reason == "Tool call args match: 2/2\n  a: args match\n  b: called (args not checked)"


def test_tool_call_args_match_mismatch_lists_all_same_name_args_with_none() -> None:
    """The mismatch detail lists every same-name call's args in order, None for unparseable."""
    item = args_item(
        [("b", {"y": 2}), ("other", {"y": 3}), ("b", "{broken"), ("b", None), ("b", "[1, 2]")],
        [ExpectedToolCall("b", {"y": 3})],
    )
    r = tool_call_args_match(item)
    assert r.passed is False
    assert r.reason == (
        "Tool call args match: 0/1\n  b: args mismatch (actual: [{'y': 2}, None, {}, None])"
    )


@pytest.mark.parametrize(
    ("actual_args", "expected_args", "matches"),
    [
        # normalisation of the actual arguments
        (None, {}, True),
        (None, {"a": 1}, False),
        ({"a": 1}, {"a": 1}, True),
        ("", {}, True),
        ("   ", {}, True),
        ('  {"a": 1}  ', {"a": 1}, True),
        ("{not json", {}, False),
        ("[1, 2]", {}, False),
        ('"str"', {}, False),
        # top-level subset: extra actual keys are fine
        ({"a": 1, "b": 2}, {"a": 1}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        # nested values compare with full ==, not a recursive subset
        ({"filter": {"city": "NYC", "max": 3}}, {"filter": {"city": "NYC"}}, False),
        ({"filter": {"city": "NYC"}}, {"filter": {"city": "NYC"}}, True),
        # Python == semantics
        ({"n": "5"}, {"n": 5}, False),
        ({"n": 5.0}, {"n": 5}, True),
        ({"n": 1}, {"n": True}, True),
        ({"l": [2, 1]}, {"l": [1, 2]}, False),
        ({"l": [1, 2]}, {"l": [1, 2]}, True),
        ('{"n": 5}', {"n": 5.0}, True),
        ({"k": None}, {"k": None}, True),
        ({}, {"k": None}, False),
    ],
)
def test_tool_call_args_match_rules(
    actual_args: Any, expected_args: dict[str, Any], matches: bool
) -> None:
    """Argument normalisation and top-level subset matching follow the spec's rules."""
    r = tool_call_args_match(
        args_item([("f", actual_args)], [ExpectedToolCall("f", expected_args)])
    )
    assert r.passed is matches
    assert r.reason.splitlines()[1].startswith(
        "  f: args match" if matches else "  f: args mismatch"
    )


def test_tool_call_args_match_args_none_matches_even_unparseable() -> None:
    """An expectation with arguments=None matches any same-name call, even unparseable args."""
    r = tool_call_args_match(args_item([("f", "{bad")], [ExpectedToolCall("f")]))
    assert r.passed is True
    assert r.reason == "Tool call args match: 1/1\n  f: called (args not checked)"


def test_tool_call_args_match_any_same_name_call_may_match() -> None:
    """An expectation matches if any same-name call with parsed args satisfies it."""
    item = args_item(
        [("f", "{bad"), ("f", {"a": 0}), ("f", {"a": 1, "z": 9})],
        [ExpectedToolCall("f", {"a": 1})],
    )
    assert tool_call_args_match(item).reason == "Tool call args match: 1/1\n  f: args match"


class _EqualsAnything:
    """A value equal to anything, whose != says otherwise: the match must ask ==."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


def test_tool_call_args_match_compares_values_with_eq() -> None:
    """An argument matches when its value == the expected one (not when != says it differs),
    and a later call is tried after an earlier one differed."""
    item = args_item(
        [("f", {"a": 0, "b": 2}), ("f", {"a": 1, "b": 2})],
        [ExpectedToolCall("f", {"a": 1, "b": _EqualsAnything()})],
    )
    assert tool_call_args_match(item).reason == "Tool call args match: 1/1\n  f: args match"


def test_tool_call_args_match_calls_are_not_consumed() -> None:
    """One actual call satisfies several identical expectations."""
    item = args_item(
        [("f", {"a": 1})], [ExpectedToolCall("f", {"a": 1}), ExpectedToolCall("f", {"a": 1})]
    )
    r = tool_call_args_match(item)
    assert r.passed is True
    assert r.reason == "Tool call args match: 2/2\n  f: args match\n  f: args match"


def test_tool_call_args_match_counts_calls_across_whole_conversation() -> None:
    """Calls on the query side (before the last user message) are collected too."""
    conv = [user("q1"), calls(("f", {"a": 1})), asst("a1"), user("q2"), asst("a2")]
    item = EvalItem(conv, expected_tool_calls=[ExpectedToolCall("f", {"a": 1})])
    assert tool_call_args_match(item).passed is True


@pytest.mark.parametrize("expected", [None, []], ids=["none", "empty"])
def test_tool_call_args_match_without_expectations_passes(
    expected: list[ExpectedToolCall] | None,
) -> None:
    """With no expected tool calls the check passes (nothing to match)."""
    r = tool_call_args_match(EvalItem([user("q"), asst("a")], expected_tool_calls=expected))
    assert r.passed is True
    assert r.check_name == "tool_call_args_match"


# --------------------------------------------------------------------------------------------
# remembered verdicts


def _reference_reasons(
    names: list[str], called_in_order: list[str]
) -> tuple[str | None, str, str | None]:
    """tool_called (all), tool_called (any) pass reasons and tool_calls_present's, from spec §4."""
    seen: list[str] = []
    all_reason = any_reason = None
    for name in called_in_order:
        seen.append(name)
        if all_reason is None and set(names) <= set(seen):
            all_reason = f"All expected tools called: {sorted(set(seen))}"
        if any_reason is None and name in names:
            any_reason = f"Expected tool found: {sorted(set(names) & set(seen))}"
    called = sorted(set(called_in_order))
    missing = [n for n in names if n not in called]
    present = (
        f"Missing tool calls: {missing} (called: {called})"
        if missing
        else f"All expected tools called: {names} (called: {called})"
    )
    return all_reason, present, any_reason


def test_remembered_reasons_equal_freshly_formatted_ones() -> None:
    """tool_called_check and tool_calls_present give the spec's reason on every item, whether the
    verdict was formatted for it or remembered from an earlier item (seeded fuzz, each item twice)."""
    rng = random.Random(20261201)
    pool = ["a", "b", "c", "get_weather"]
    for _ in range(300):
        names = rng.sample(pool, rng.randint(1, 3))
        called = [rng.choice(pool) for _ in range(rng.randint(0, 4))]
        all_reason, present, any_reason = _reference_reasons(names, called)
        check_all, check_any = tool_called_check(*names), tool_called_check(*names, mode="any")
        for _ in range(2):
            item = EvalItem(
                [user("q"), calls(*[(n, {}) for n in called]), asst("done")],
                expected_tool_calls=[ExpectedToolCall(n) for n in names],
            )
            r_all = run(check_all, item)
            if all_reason is not None:
                assert (r_all.passed, r_all.reason) == (True, all_reason)
            else:
                assert r_all.passed is False
            r_any = run(check_any, item)
            if any_reason is not None:
                assert (r_any.passed, r_any.reason) == (True, any_reason)
            else:
                assert r_any.passed is False
            r_present = tool_calls_present(item)
            assert r_present.reason == present
            assert r_present.passed is present.startswith("All")


class _Loud(str):
    """A tool name that prints itself otherwise than a plain str equal to it."""

    def __repr__(self) -> str:
        return f"LOUD({self!s})"


def test_a_str_subclass_name_is_not_served_a_plain_names_reason() -> None:
    """A verdict remembered for plain names is not reused for an equal name that prints otherwise."""
    check = tool_called_check("f")
    plain = EvalItem([user("q"), calls(("f", {}))], expected_tool_calls=[ExpectedToolCall("f")])
    assert run(check, plain).reason == "All expected tools called: ['f']"
    assert tool_calls_present(plain).reason == "All expected tools called: ['f'] (called: ['f'])"
    loud = EvalItem([user("q"), calls(("f", {}))], expected_tool_calls=[ExpectedToolCall("f")])
    [call] = loud.function_calls
    call.__dict__["name"] = _Loud("f")  # as a model built without validation could hold it
    assert run(check, loud).reason == "All expected tools called: [LOUD(f)]"
    assert tool_calls_present(loud).reason == "All expected tools called: ['f'] (called: [LOUD(f)])"


def test_tool_call_args_match_reads_dict_arguments_without_changing_them() -> None:
    """Dict arguments are compared as they are and shown in a mismatch; JSON strings still parse."""
    args = {"city": "Rome"}
    item = args_item(
        [("f", args), ("f", '{"city": "Oslo"}')], [ExpectedToolCall("f", {"city": "Paris"})]
    )
    r = tool_call_args_match(item)
    assert r.passed is False
    assert r.reason == (
        "Tool call args match: 0/1\n  f: args mismatch (actual: [{'city': 'Rome'}, {'city': 'Oslo'}])"
    )
    assert args == {"city": "Rome"}


def test_tool_checks_accept_an_item_like_object_without_the_call_cache() -> None:
    """An object with an EvalItem's attributes but not its cache is checked from function_calls."""

    class Like:
        def __init__(self, item: EvalItem) -> None:
            self.function_calls = item.function_calls
            self.expected_tool_calls = item.expected_tool_calls

    item = args_item([("f", {"a": 1})], [ExpectedToolCall("f", {"a": 1})])
    like: Any = Like(item)
    assert tool_calls_present(like) == tool_calls_present(item)
    assert tool_call_args_match(like) == tool_call_args_match(item)
