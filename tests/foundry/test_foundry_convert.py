"""to_foundry_messages and the inline run items (shared spec foundry-evals.md §5, maf-semantics §11)."""

from __future__ import annotations

from evalpipe import (
    ConversationSplit,
    DataContent,
    EvalItem,
    ExpectedToolCall,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    TextContent,
    ToolDefinition,
    UriContent,
)
from evalpipe.foundry import item_to_foundry, to_foundry_messages


def _weather_conversation() -> list[Message]:
    return [
        Message("system", ["You are a weather bot."]),
        Message("user", ["What's the weather in Paris?"]),
        Message(
            "assistant",
            [FunctionCallContent(name="get_weather", arguments='{"city": "Paris"}', call_id="c1")],
        ),
        Message("tool", [FunctionResultContent(call_id="c1", result='{"temp_c": 18}')]),
        Message("assistant", ["It is 18C in Paris."]),
    ]


def test_messages_convert_to_the_agent_schema_as_maf_sends_them() -> None:
    """Text parts, a tool_call with parsed arguments, a tool message whose JSON result is parsed."""
    assert to_foundry_messages(_weather_conversation()) == [
        {"role": "system", "content": [{"type": "text", "text": "You are a weather bot."}]},
        {"role": "user", "content": [{"type": "text", "text": "What's the weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_call",
                    "tool_call_id": "c1",
                    "name": "get_weather",
                    "arguments": {"city": "Paris"},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [{"type": "tool_result", "tool_result": {"temp_c": 18}}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "It is 18C in Paris."}]},
    ]


def test_unparseable_empty_and_missing_arguments() -> None:
    """A non-JSON or empty string gives the _raw_arguments marker, None gives {}, a JSON array passes."""
    calls = [
        FunctionCallContent(name="a", arguments="{not json", call_id="1"),
        FunctionCallContent(name="b", arguments="", call_id="2"),
        FunctionCallContent(name="c", arguments=None, call_id="3"),
        FunctionCallContent(name="d", arguments="[1, 2]", call_id="4"),
    ]
    [wire] = to_foundry_messages([Message("assistant", calls)])
    assert [p["arguments"] for p in wire["content"]] == [
        {"_raw_arguments": "[unparseable]"},
        {"_raw_arguments": "[unparseable]"},
        {},
        [1, 2],
    ]


def test_tool_results_become_one_tool_message_each_and_drop_other_parts() -> None:
    """Two results in one message give two tool messages; a non-JSON string result stays a string."""
    message = Message(
        "tool",
        [
            TextContent(text="ignored"),
            FunctionResultContent(call_id="a", result="plain text"),
            FunctionResultContent(call_id="b", result={"ok": True}),
        ],
    )
    assert to_foundry_messages([message]) == [
        {
            "role": "tool",
            "tool_call_id": "a",
            "content": [{"type": "tool_result", "tool_result": "plain text"}],
        },
        {
            "role": "tool",
            "tool_call_id": "b",
            "content": [{"type": "tool_result", "tool_result": {"ok": True}}],
        },
    ]


def test_images_and_empty_messages() -> None:
    """Data/uri contents become input_image (detail only with a media type); an empty message gets an empty text."""
    image = DataContent(uri="data:image/png;base64,AAAA", media_type="image/png")
    link = UriContent(uri="https://example.com/cat.jpg")
    wire = to_foundry_messages([Message("user", [image, link]), Message("assistant", [])])
    assert wire == [
        {
            "role": "user",
            "content": [
                {
                    "type": "input_image",
                    "image_url": "data:image/png;base64,AAAA",
                    "detail": "auto",
                },
                {"type": "input_image", "image_url": "https://example.com/cat.jpg"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": ""}]},
    ]


def test_dict_messages_are_accepted() -> None:
    """Messages in their dict form convert as Message objects do."""
    assert to_foundry_messages(
        [{"role": "user", "contents": [{"type": "text", "text": "hi"}]}]
    ) == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_item_carries_strings_messages_tools_context_and_ground_truth() -> None:
    """The run item has query/response strings, both message arrays and the optional fields."""
    tool = ToolDefinition(
        "get_weather",
        "Weather for a city",
        {"type": "object", "properties": {"city": {"type": "string"}}},
    )
    item = EvalItem(_weather_conversation(), [tool], "Paris: 18C", "18C")
    data = item_to_foundry(item)
    assert data["query"] == "What's the weather in Paris?"
    assert data["response"] == "It is 18C in Paris."
    assert [m["role"] for m in data["query_messages"]] == ["system", "user"]
    assert [m["role"] for m in data["response_messages"]] == ["assistant", "tool", "assistant"]
    assert data["tool_definitions"] == [
        {"name": "get_weather", "description": "Weather for a city", "parameters": tool.parameters}
    ]
    assert (data["context"], data["ground_truth"]) == ("Paris: 18C", "18C")
    assert "actions" not in data


def test_item_without_optional_fields_leaves_them_out() -> None:
    """No tools, context or expected output: those keys are absent (not null), as MAF."""
    data = item_to_foundry(EvalItem([Message("user", ["hi"]), Message("assistant", ["hello"])]))
    assert set(data) == {"query", "response", "query_messages", "response_messages"}


def test_split_is_the_items_own_else_the_providers_default() -> None:
    """FULL puts every turn after the first user message in the response; the item's strategy wins."""
    conv = [
        Message("user", ["Q1"]),
        Message("assistant", ["A1"]),
        Message("user", ["Q2"]),
        Message("assistant", ["A2"]),
    ]
    full = item_to_foundry(EvalItem(conv), split=ConversationSplit.FULL)
    assert (full["query"], full["response"]) == ("Q1", "A1 A2")
    own = item_to_foundry(
        EvalItem(conv, split_strategy=ConversationSplit.LAST_TURN), split=ConversationSplit.FULL
    )
    assert (own["query"], own["response"]) == ("Q1 Q2", "A2")


def test_navigation_actions_come_from_response_tool_calls_and_expected_calls() -> None:
    """actions: one assistant message per tool call; expected_actions: names, with arguments when pinned."""
    item = EvalItem(_weather_conversation(), expected_tool_calls=[ExpectedToolCall("get_weather")])
    data = item_to_foundry(item, with_actions=True)
    assert data["actions"] == [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_call",
                    "tool_call_id": "c1",
                    "name": "get_weather",
                    "arguments": {"city": "Paris"},
                }
            ],
        }
    ]
    assert data["expected_actions"] == ["get_weather"]
    pinned = EvalItem(
        _weather_conversation(),
        expected_tool_calls=[ExpectedToolCall("get_weather", {"city": "Paris"})],
    )
    assert item_to_foundry(pinned, with_actions=True)["expected_actions"] == [
        ["get_weather"],
        {"get_weather": {"city": "Paris"}},
    ]
