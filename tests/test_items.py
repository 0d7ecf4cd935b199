"""EvalItem: split rules (spec §3), query/response strings, per_turn_items and round trips."""

from __future__ import annotations

import pickle
import random
from collections import deque
from typing import Any

import pytest

from evalpipe import (
    ConversationSplit,
    ConversationSplitter,
    EvalItem,
    ExpectedToolCall,
    FunctionCallContent,
    Message,
    ToolDefinition,
)
from evalpipe.items import split_full, split_last_turn
from evalpipe.transcripts import RunUsage


def sys(text: str = "You are helpful.") -> Message:
    return Message("system", [text])


def user(text: str) -> Message:
    return Message("user", [text])


def asst(text: str) -> Message:
    return Message("assistant", [text])


def call(name: str = "get_weather", args: Any = None, call_id: str = "c1") -> Message:
    return Message(
        "assistant",
        [{"type": "function_call", "call_id": call_id, "name": name, "arguments": args}],
    )


def tool(result: Any = "sunny", call_id: str = "c1") -> Message:
    return Message("tool", [{"type": "function_result", "call_id": call_id, "result": result}])


# (id, conversation, LAST_TURN query idx, LAST_TURN response idx, LT query, LT response,
#  FULL query idx, FULL response idx, FULL query, FULL response) — spec §3 edge-case table.
EDGE_CASES: list[
    tuple[str, list[Message], list[int], list[int], str, str, list[int], list[int], str, str]
] = [
    (
        "multi_turn_with_tools",
        [sys(), user("Q1"), asst("A1"), user("Q2"), call(), tool("A-tool"), asst("A2")],
        [0, 1, 2, 3],
        [4, 5, 6],
        "Q1 Q2",
        "A2",
        [0, 1],
        [2, 3, 4, 5, 6],
        "Q1",
        "A1 A2",
    ),
    (
        "no_user",
        [sys(), asst("Hello there.")],
        [],
        [0, 1],
        "",
        "Hello there.",
        [],
        [0, 1],
        "",
        "Hello there.",
    ),
    (
        "trailing_user",
        [user("Q1"), asst("A1"), user("Q2")],
        [0, 1, 2],
        [],
        "Q1 Q2",
        "",
        [0],
        [1, 2],
        "Q1",
        "A1",
    ),
    (
        "system_then_user",
        [sys(), user("Only a question")],
        [0, 1],
        [],
        "Only a question",
        "",
        [0, 1],
        [],
        "Only a question",
        "",
    ),
    ("empty", [], [], [], "", "", [], [], "", ""),
    (
        "tool_call_without_final_text",
        [user("Weather?"), call(), tool("22C")],
        [0],
        [1, 2],
        "Weather?",
        "",
        [0],
        [1, 2],
        "Weather?",
        "",
    ),
    (
        "consecutive_users",
        [user("First part."), user("Second part."), asst("Answer.")],
        [0, 1],
        [2],
        "First part. Second part.",
        "Answer.",
        [0],
        [1, 2],
        "First part.",
        "Answer.",
    ),
    (
        "assistant_greeting_first",
        [asst("Hi, how can I help?"), user("Help me"), asst("Sure.")],
        [0, 1],
        [2],
        "Help me",
        "Sure.",
        [0, 1],
        [2],
        "Help me",
        "Sure.",
    ),
    (
        "capitalised_user_role",
        [Message("User", ["hello?"]), asst("reply")],
        [],
        [0, 1],
        "",
        "reply",
        [],
        [0, 1],
        "",
        "reply",
    ),
    (
        "developer_message",
        [Message("developer", ["Be terse."]), user("hey"), asst("yo")],
        [0, 1],
        [2],
        "hey",
        "yo",
        [0, 1],
        [2],
        "hey",
        "yo",
    ),
]
EDGE_IDS = [row[0] for row in EDGE_CASES]


def _indices(conv: list[Message], part: list[Message]) -> list[int]:
    return [next(i for i, m in enumerate(conv) if m is p) for p in part]


@pytest.mark.parametrize(
    ("conv", "q_idx", "r_idx", "query", "response"),
    [(r[1], r[2], r[3], r[4], r[5]) for r in EDGE_CASES],
    ids=EDGE_IDS,
)
def test_last_turn_edge_cases(
    conv: list[Message], q_idx: list[int], r_idx: list[int], query: str, response: str
) -> None:
    """LAST_TURN splits after the last user message and derives the spec's query/response strings."""
    item = EvalItem(conv)
    q_msgs, r_msgs = item.split_messages()
    assert (_indices(conv, q_msgs), _indices(conv, r_msgs)) == (q_idx, r_idx)
    assert item.split_messages(ConversationSplit.LAST_TURN) == (q_msgs, r_msgs)
    assert (item.query, item.response) == (query, response)


@pytest.mark.parametrize(
    ("conv", "q_idx", "r_idx", "query", "response"),
    [(r[1], r[6], r[7], r[8], r[9]) for r in EDGE_CASES],
    ids=EDGE_IDS,
)
def test_full_edge_cases(
    conv: list[Message], q_idx: list[int], r_idx: list[int], query: str, response: str
) -> None:
    """FULL splits after the first user message and derives the spec's query/response strings."""
    item = EvalItem(conv, split_strategy=ConversationSplit.FULL)
    q_msgs, r_msgs = item.split_messages()
    assert (_indices(conv, q_msgs), _indices(conv, r_msgs)) == (q_idx, r_idx)
    assert (item.query, item.response) == (query, response)


@pytest.mark.parametrize(
    ("conv", "q_idx", "r_idx"),
    [(r[1], r[2], r[3]) for r in EDGE_CASES],
    ids=EDGE_IDS,
)
def test_enum_member_and_function_splitters_agree(
    conv: list[Message], q_idx: list[int], r_idx: list[int]
) -> None:
    """ConversationSplit.LAST_TURN, split_last_turn and _split_last_turn_static give the same split."""
    expected = ([conv[i] for i in q_idx], [conv[i] for i in r_idx])
    assert ConversationSplit.LAST_TURN(conv) == expected
    assert split_last_turn(conv) == expected
    assert EvalItem._split_last_turn_static(conv) == expected


def test_split_full_function_matches_member() -> None:
    """split_full and ConversationSplit.FULL split at the first user message."""
    conv = [sys(), user("Q1"), asst("A1"), user("Q2")]
    assert split_full(conv) == ConversationSplit.FULL(conv) == (conv[:2], conv[2:])


def test_conversation_split_members_are_splitters_and_strings() -> None:
    """ConversationSplit members are str-valued and satisfy the ConversationSplitter protocol."""
    assert ConversationSplit.LAST_TURN == "last_turn"
    assert ConversationSplit.FULL == "full"
    assert isinstance(ConversationSplit.LAST_TURN, ConversationSplitter)
    assert isinstance(ConversationSplit.FULL, ConversationSplitter)


def test_inner_whitespace_kept_outer_stripped() -> None:
    """query/response keep inner whitespace and strip only the outer ends."""
    item = EvalItem([user("  ask "), Message("assistant", ["alpha ", " beta"])])
    assert item.query == "ask"
    assert item.response == "alpha   beta"
    two = EvalItem([user("q"), Message("assistant", ["alpha ", " beta"]), asst(" end  ")])
    assert two.response == "alpha   beta  end"


def test_assistant_text_on_query_side_and_tool_results_never_counted() -> None:
    """Assistant text on the query side and tool/system text never enter query or response."""
    conv = [sys("SYSTEM"), asst("EARLY"), user("Q"), tool("TOOLTEXT"), asst("A")]
    item = EvalItem(conv)
    assert item.query == "Q"
    assert item.response == "A"


def test_empty_text_messages_skipped_in_join() -> None:
    """Messages with no text do not add extra separators to the joined strings."""
    conv = [user("Q1"), Message("user", []), user("Q2"), call(), asst("A")]
    assert EvalItem(conv).query == "Q1 Q2"


CUSTOM_CONV = [
    sys(),
    user("Hi there."),
    asst("Great to meet you."),
    user("What's the weather?"),
    call(),
    tool("sunny"),
    asst("It is sunny."),
]


def split_at_two(conversation: list[Message]) -> tuple[list[Message], list[Message]]:
    return conversation[:2], conversation[2:]


def test_custom_splitter_spec_example() -> None:
    """A custom splitter at index 2 gives the spec example's query and response strings."""
    item = EvalItem(CUSTOM_CONV, split_strategy=split_at_two)
    assert isinstance(split_at_two, ConversationSplitter)
    assert item.query == "Hi there."
    assert item.response == "Great to meet you. It is sunny."
    assert item.split_messages() == (CUSTOM_CONV[:2], CUSTOM_CONV[2:])


def test_custom_splitter_may_return_tuples() -> None:
    """A splitter returning sequences other than lists still works; split_messages gives lists."""
    item = EvalItem(CUSTOM_CONV, split_strategy=lambda c: (tuple(c[:4]), tuple(c[4:])))
    q, r = item.split_messages()
    assert isinstance(q, list)
    assert isinstance(r, list)
    assert item.query == "Hi there. What's the weather?"
    assert item.response == "It is sunny."


def test_split_strategy_must_be_callable() -> None:
    """A non-callable split_strategy is rejected."""
    with pytest.raises(ValueError, match="split_strategy must be"):
        EvalItem(CUSTOM_CONV, split_strategy="full")


def test_split_precedence_explicit_over_item_over_default() -> None:
    """split_messages: an explicit split wins over item.split_strategy, which wins over LAST_TURN."""
    conv = [user("Q1"), asst("A1"), user("Q2"), asst("A2")]
    default_item = EvalItem(conv)
    assert default_item.split_messages() == (conv[:3], conv[3:])
    full_item = EvalItem(conv, split_strategy=ConversationSplit.FULL)
    assert full_item.split_messages() == (conv[:1], conv[1:])
    assert full_item.split_messages(ConversationSplit.LAST_TURN) == (conv[:3], conv[3:])
    assert full_item.split_messages(split_at_two) == (conv[:2], conv[2:])
    # an explicit split does not change the item's own strings
    assert (full_item.query, full_item.response) == ("Q1", "A1 A2")


def test_assigning_split_strategy_changes_strings() -> None:
    """Setting item.split_strategy after construction re-derives query/response."""
    conv = [user("Q1"), asst("A1"), user("Q2"), asst("A2")]
    item = EvalItem(conv)
    assert item.response == "A2"
    item.split_strategy = ConversationSplit.FULL
    assert item.response == "A1 A2"
    item.split_strategy = None
    assert item.response == "A2"


def test_reassigning_conversation_invalidates_split() -> None:
    """Assigning a new conversation re-derives query and response."""
    item = EvalItem([user("Q1"), asst("A1")])
    assert (item.query, item.response) == ("Q1", "A1")
    item.conversation = [user("Z1"), asst("Z2")]
    assert (item.query, item.response) == ("Z1", "Z2")


def test_appending_to_conversation_invalidates_split() -> None:
    """Appending a message in place re-derives query and response."""
    item = EvalItem([user("Q1"), asst("A1")])
    assert item.response == "A1"
    item.conversation.append(asst("A2"))
    assert item.response == "A1 A2"


def test_replacing_a_message_in_place_invalidates_split() -> None:
    """Replacing one message in place (same length) re-derives query and response."""
    item = EvalItem([user("Q1"), asst("A1")])
    assert item.response == "A1"
    item.conversation[1] = asst("changed")
    assert item.response == "changed"
    item.conversation[0] = user("Q-new")
    assert item.query == "Q-new"


def test_split_messages_returns_fresh_lists() -> None:
    """Mutating the lists split_messages returns does not affect later splits."""
    conv = [user("Q"), asst("A")]
    item = EvalItem(conv)
    q, _ = item.split_messages()
    q.clear()
    assert item.split_messages()[0] == conv[:1]


# --------------------------------------------------------------------------------------------
# per_turn_items


def test_per_turn_items_cumulative_prefixes() -> None:
    """per_turn_items makes one item per user message holding the conversation up to the next user."""
    conv = [sys(), user("Q1"), asst("A1"), user("Q2"), call(), tool(), asst("A2")]
    items = EvalItem.per_turn_items(conv)
    assert len(items) == 2
    assert items[0].conversation == conv[:3]
    assert items[1].conversation == conv
    assert [(i.query, i.response) for i in items] == [("Q1", "A1"), ("Q1 Q2", "A2")]


def test_per_turn_items_default_split_and_no_expectations() -> None:
    """per_turn_items leaves split_strategy (LAST_TURN) and expected_* unset."""
    items = EvalItem.per_turn_items([user("Q1"), asst("A1"), user("Q2"), asst("A2")])
    for item in items:
        assert item.split_strategy is None
        assert item.expected_output is None
        assert item.expected_tool_calls is None


def test_per_turn_items_copies_tools_and_context() -> None:
    """tools and context are copied onto every per-turn item."""
    tools = [ToolDefinition("get_weather")]
    items = EvalItem.per_turn_items(
        [user("Q1"), asst("A1"), user("Q2"), asst("A2")], tools=tools, context="ctx"
    )
    assert [i.tools for i in items] == [tools, tools]
    assert [i.context for i in items] == ["ctx", "ctx"]


def test_per_turn_items_consecutive_users() -> None:
    """Consecutive users give two items, the first with an empty response."""
    conv = [user("P1"), user("P2"), asst("A")]
    items = EvalItem.per_turn_items(conv)
    assert [i.conversation for i in items] == [conv[:1], conv]
    assert [(i.query, i.response) for i in items] == [("P1", ""), ("P1 P2", "A")]


def test_per_turn_items_trailing_user() -> None:
    """A trailing user message gives a last item with an empty response."""
    conv = [user("Q1"), asst("A1"), user("Q2")]
    items = EvalItem.per_turn_items(conv)
    assert [(i.query, i.response) for i in items] == [("Q1", "A1"), ("Q1 Q2", "")]


@pytest.mark.parametrize(
    "conv",
    [[], [sys(), asst("Hello")], [Message("User", ["not a user"]), asst("x")]],
    ids=["empty", "no_user", "capitalised_role"],
)
def test_per_turn_items_without_user_is_empty(conv: list[Message]) -> None:
    """per_turn_items returns [] when there is no user-role message."""
    assert EvalItem.per_turn_items(conv) == []


# --------------------------------------------------------------------------------------------
# has_image_content, ExpectedToolCall, construction and round trips


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"type": "data", "uri": "data:image/png;base64,AA", "media_type": "image/png"}, True),
        ({"type": "data", "uri": "data:image/png;base64,AA"}, True),
        ({"type": "uri", "uri": "https://x/cat.jpg", "media_type": "image/jpeg"}, True),
        ({"type": "uri", "uri": "https://x/doc.pdf", "media_type": "application/pdf"}, False),
        ({"type": "data", "uri": "data:audio/wav;base64,AA"}, False),
        ({"type": "text", "text": "data:image/png;base64,AA"}, False),
    ],
)
def test_has_image_content(content: dict[str, Any], expected: bool) -> None:
    """has_image_content is True only for data/uri content with an image media type or data:image URI."""
    item = EvalItem([Message("user", ["look", content]), asst("ok")])
    assert item.has_image_content is expected


def test_expected_tool_call_positional_and_defaults() -> None:
    """ExpectedToolCall(name, arguments) works positionally; arguments defaults to None."""
    etc = ExpectedToolCall("search", {"q": "paris"})
    assert (etc.name, etc.arguments) == ("search", {"q": "paris"})
    assert ExpectedToolCall("search").arguments is None
    assert ExpectedToolCall(name="s", arguments={}).arguments == {}
    assert ExpectedToolCall("s", {}).arguments == {}


def test_eval_item_positional_constructor() -> None:
    """EvalItem(conversation, tools, context, expected_output, expected_tool_calls, split_strategy)."""
    conv = [user("Q1"), asst("A1"), user("Q2"), asst("A2")]
    item = EvalItem(
        conv,
        [ToolDefinition("t")],
        "ctx",
        "A2",
        [ExpectedToolCall("t")],
        ConversationSplit.FULL,
    )
    assert item.conversation == conv
    assert item.tools == [ToolDefinition("t")]
    assert item.context == "ctx"
    assert item.expected_output == "A2"
    assert item.expected_tool_calls == [ExpectedToolCall("t")]
    assert item.split_strategy is ConversationSplit.FULL
    assert item.response == "A1 A2"


def test_eval_item_defaults() -> None:
    """An EvalItem with only a conversation has tools/context/expectations None."""
    item = EvalItem([user("Q")])
    assert item.tools is None
    assert item.context is None
    assert item.expected_output is None
    assert item.expected_tool_calls is None
    assert item.split_strategy is None


def test_eval_item_coerces_messages_tools_and_expectations() -> None:
    """Dict messages, callables as tools and dict/str expectations are coerced on construction."""

    def lookup(q: str) -> str:
        """Look up."""
        return q

    item = EvalItem(
        [{"role": "user", "contents": [{"type": "text", "text": "Q"}]}],
        [lookup],
        expected_tool_calls=[{"name": "lookup", "arguments": {"q": "x"}}, "other"],
    )
    assert item.conversation == [user("Q")]
    assert item.tools is not None
    assert item.tools[0].name == "lookup"
    assert item.expected_tool_calls == [
        ExpectedToolCall("lookup", {"q": "x"}),
        ExpectedToolCall("other"),
    ]


def _rich_item() -> EvalItem:
    def get_weather(city: str) -> str:
        """Weather."""
        return city

    return EvalItem(
        [user("Weather?"), call(args={"city": "Paris"}), tool({"temp": 20}), asst("Sunny.")],
        [get_weather, {"type": "function", "function": {"name": "book", "parameters": {}}}],
        "ctx",
        "Sunny.",
        [ExpectedToolCall("get_weather", {"city": "Paris"})],
        item_id="it-1",
        metadata={"tag": "a"},
    )


def test_eval_item_json_round_trip_keeps_tool_snapshots() -> None:
    """EvalItem -> JSON -> EvalItem keeps conversation, tool schemas, expectations and derived strings."""
    item = _rich_item()
    back = EvalItem.model_validate_json(item.model_dump_json())
    assert back.tools == item.tools
    assert back.tools is not None
    assert back.tools[0].parameters["properties"]["city"] == {"title": "City", "type": "string"}
    assert back.conversation == item.conversation
    assert back.expected_tool_calls == item.expected_tool_calls
    assert (back.context, back.expected_output, back.item_id, back.metadata) == (
        "ctx",
        "Sunny.",
        "it-1",
        {"tag": "a"},
    )
    assert (back.query, back.response) == ("Weather?", "Sunny.")


def test_eval_item_pickle_round_trip_keeps_tool_snapshots() -> None:
    """EvalItem survives pickling with its tool snapshots and split strategy."""
    item = _rich_item()
    item.split_strategy = ConversationSplit.FULL
    _ = item.response  # read before pickling
    back = pickle.loads(pickle.dumps(item))
    assert back.tools == item.tools
    assert back.conversation == item.conversation
    assert back.split_strategy is ConversationSplit.FULL
    assert (back.query, back.response) == (item.query, item.response)
    back.conversation.append(asst("More."))
    assert back.response == "Sunny. More."


def test_equality_after_reading_the_split() -> None:
    """Two items with the same fields stay equal after one of them computed its query/response."""
    conv = [Message("user", ["Q"]), Message("assistant", ["A"])]
    a, b = EvalItem(list(conv)), EvalItem(list(conv))
    assert a.response == "A"
    assert a == b
    assert a != EvalItem([Message("user", ["other"])])


_CALL = FunctionCallContent(name="f", arguments={}, call_id="c")


class _Shouting(Message):
    """A message whose text is its own: the split reads it, not Message's."""

    @property
    def text(self) -> str:
        return super().text.upper()


@pytest.mark.parametrize("strategy", [ConversationSplit.LAST_TURN, ConversationSplit.FULL])
def test_fast_split_path_matches_the_reference_splitters(strategy: ConversationSplit) -> None:
    """The index-based built-in split gives what the plain splitter functions give (seeded fuzz)."""
    rng = random.Random(20261130)
    reference = split_last_turn if strategy is ConversationSplit.LAST_TURN else split_full
    roles = ["user", "assistant", "tool", "system", "developer", "User"]
    for _ in range(500):
        conv = []
        for _ in range(rng.randint(0, 8)):
            role = rng.choice(roles)
            texts: list[Any] = [
                rng.choice(["", " a ", "b", "c d", _CALL]) for _ in range(rng.randint(0, 2))
            ]
            kind = _Shouting if rng.random() < 0.1 else Message
            conv.append(kind(role, texts))
        fast = EvalItem(conv, split_strategy=strategy)
        slow = EvalItem(conv, split_strategy=lambda c, ref=reference: ref(c))
        assert (fast.query, fast.response) == (slow.query, slow.response)
        assert fast.split_messages() == slow.split_messages()


def _validated(data: dict[str, Any]) -> EvalItem:
    """The item pydantic's validation makes of ``data`` (model_validate skips the fast path)."""
    return EvalItem.model_validate(data)


def _same(fast: EvalItem, slow: EvalItem) -> None:
    assert fast == slow
    assert fast.__dict__ == slow.__dict__
    assert list(fast.__dict__) == list(slow.__dict__)
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.__pydantic_private__ == slow.__pydantic_private__
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__
    for name in ("conversation", "tools", "expected_tool_calls", "metadata"):
        value = getattr(fast, name)
        if value is not None:  # fresh containers, shared elements, as validation makes them
            assert value is not getattr(slow, name)
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_dump_json() == slow.model_dump_json()
    assert (fast.query, fast.response) == (slow.query, slow.response)


@pytest.mark.parametrize(
    "data",
    [
        {"conversation": [{"role": "user", "contents": ["Q"]}]},
        {"conversation": ({"role": "user", "contents": ["Q"]},)},
        {"tools": [{"name": "t"}]},
        {"expected_tool_calls": ["get_weather"]},
        {"expected_tool_calls": [{"name": "get_weather"}]},
        {"usage": {"input_tokens": 3}},
        {"metadata": {"a": 1, "b": {"c": [1]}}},
    ],
)
def test_constructor_coerces_what_is_not_validated_yet(data: dict[str, Any]) -> None:
    """Values validation would change (dicts, str expectations, tuples) still go through it."""
    _same(EvalItem(**data), _validated(data))


@pytest.mark.parametrize(
    "data",
    [
        {"metadata": None},
        {"metadata": {1: "x"}},
        {"query_index": "x"},
        {"item_id": 3},
        {"split_strategy": "last_turn"},
        {"unknown": 1},
        {"conversation": [object()]},
    ],
)
def test_constructor_still_rejects_bad_values(data: dict[str, Any]) -> None:
    """A value the fast path does not take is validated, and rejected as before."""
    with pytest.raises((ValueError, TypeError)):
        EvalItem(**data)


def _full_fields() -> dict[str, Any]:
    return {
        "conversation": [user("Weather?"), asst("Sunny.")],
        "tools": [ToolDefinition("get_weather", "Weather.")],
        "context": "ctx",
        "expected_output": "sunny",
        "expected_tool_calls": [ExpectedToolCall("get_weather", {"city": "Paris"})],
        "split_strategy": ConversationSplit.FULL,
        "item_id": "q1#0",
        "query_index": 1,
        "repetition": 0,
        "agent": "writer",
        "usage": RunUsage(input_tokens=3),
        "error_code": "AgentError",
        "error_message": "E: no",
        "metadata": {"row_id": "q1"},
    }


def test_constructor_equals_validation() -> None:
    """EvalItem(...) of already-valid values (the items stage's call, taken without a Python call
    per element) makes the item validation makes: values, field order, the fields set, fresh
    containers and dumps; tuples of valid elements become the lists validation makes of them."""
    data = _full_fields()
    _same(EvalItem(**data), _validated(data))
    for dropped in data:
        rest = {k: v for k, v in data.items() if k != dropped}
        _same(EvalItem(**rest), _validated(rest))
    as_tuples = {
        **data,
        **{k: tuple(data[k]) for k in ("conversation", "tools", "expected_tool_calls")},
    }
    _same(EvalItem(**as_tuples), _validated(as_tuples))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("conversation", [{"role": "user", "contents": ["Q"]}]),
        ("conversation", deque([user("Q")])),
        ("tools", [{"name": "t"}]),
        ("context", 3),
        ("expected_tool_calls", ["get_weather"]),
        ("expected_tool_calls", [{"name": "get_weather"}]),
        ("item_id", 3),
        ("query_index", "1"),
        ("query_index", True),
        ("agent", b"writer"),
        ("usage", {"input_tokens": 3}),
        ("metadata", {"a": 1, "b": {"c": [1]}, 2: "two"}),
        ("metadata", None),
        ("split_strategy", "last_turn"),
    ],
)
def test_constructor_validates_what_is_not_valid_yet(name: str, value: Any) -> None:
    """A value validation would change or reject is validated by EvalItem(...): the same item as
    model_validate, or the same error."""
    data = {**_full_fields(), name: value}
    expected: EvalItem | str
    try:
        expected = _validated(data)
    except ValueError as exc:
        expected = str(exc)
    if isinstance(expected, str):
        with pytest.raises(ValueError) as raised:
            EvalItem(**data)
        assert str(raised.value) == expected
    else:
        _same(EvalItem(**data), expected)


def test_validation_from_a_dict_equals_the_positional_form() -> None:
    """EvalItem and ExpectedToolCall validate dicts (a dataset row's expected calls,
    model_validate) into what their positional form (MAF's) makes."""
    from evalpipe.items import ExpectedToolCall

    item = EvalItem.model_validate({"conversation": [{"role": "user", "contents": ["Q"]}]})
    assert item.conversation == [user("Q")]
    assert item == EvalItem([user("Q")])
    assert ExpectedToolCall("f", {"a": 1}) == ExpectedToolCall.model_validate(
        {"name": "f", "arguments": {"a": 1}}
    )


def test_function_calls_follow_the_conversation() -> None:
    """The tool calls the built-in checks read are the conversation's, as it is now: a message
    appended or replaced, or the conversation reassigned."""
    item = EvalItem([user("Q"), call("a"), tool(), asst("A")])
    assert [c.name for c in item.function_calls] == ["a"]
    item.conversation.append(call("b", call_id="c2"))
    assert [c.name for c in item.function_calls] == ["a", "b"]
    item.conversation[1] = call("c")
    assert [c.name for c in item.function_calls] == ["c", "b"]
    item.conversation = [user("Q"), asst("A")]
    assert item.function_calls == []
