"""Message, content kinds, OpenAI chat-completions conversion and ToolDefinition snapshots."""

from __future__ import annotations

import json
import pickle
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from evalpipe import (
    DataContent,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    TextContent,
    ToolDefinition,
    UriContent,
    messages_from_openai,
    messages_to_openai,
)
from evalpipe.messages import user_message

# --------------------------------------------------------------------------------------------
# Message construction


def test_positional_construction_with_str_contents() -> None:
    """Message("user", ["hi"]) builds a user message holding one text content."""
    m = Message("user", ["hi"])
    assert m.role == "user"
    assert m.contents == [TextContent(text="hi")]
    assert m.text == "hi"


def test_keyword_construction_matches_positional() -> None:
    """Keyword and positional construction give equal messages."""
    assert Message(role="assistant", contents=["yo"]) == Message("assistant", ["yo"])


def test_bare_string_contents_becomes_one_text_content() -> None:
    """A bare string as contents is wrapped as a single text content."""
    assert Message("user", "hello").contents == [TextContent(text="hello")]


def test_missing_contents_defaults_to_empty_list() -> None:
    """A message built with only a role has no contents and empty text."""
    m = Message("system")
    assert m.contents == []
    assert m.text == ""


@pytest.mark.parametrize("role", ["User", "ASSISTANT", "tool", "developer", "critic"])
def test_roles_are_not_normalised(role: str) -> None:
    """The role string is kept exactly as given (no lower-casing or validation)."""
    assert Message(role, ["x"]).role == role


def test_model_validate_json_shape_with_every_content_kind() -> None:
    """model_validate reads the MAF JSON shape: text, function_call, function_result, data and uri."""
    m = Message.model_validate(
        {
            "role": "assistant",
            "contents": [
                {"type": "text", "text": "Looking"},
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "get_weather",
                    "arguments": {"city": "Paris"},
                },
                {"type": "function_call", "call_id": "c2", "name": "raw", "arguments": '{"a": 1}'},
                {"type": "function_call", "call_id": "c3", "name": "noargs", "arguments": None},
                {"type": "function_result", "call_id": "c1", "result": {"temp": 20}},
                {"type": "data", "uri": "data:image/png;base64,AAAA", "media_type": "image/png"},
                {"type": "uri", "uri": "https://example.com/a.jpg", "media_type": "image/jpeg"},
            ],
        }
    )
    kinds = [type(c) for c in m.contents]
    assert kinds == [
        TextContent,
        FunctionCallContent,
        FunctionCallContent,
        FunctionCallContent,
        FunctionResultContent,
        DataContent,
        UriContent,
    ]
    calls = m.function_calls
    assert calls[0].arguments == {"city": "Paris"}
    assert calls[0].call_id == "c1"
    assert calls[1].arguments == '{"a": 1}'
    assert isinstance(calls[1].arguments, str)
    assert calls[2].arguments is None
    assert m.function_results[0].result == {"temp": 20}
    assert m.contents[5].uri == "data:image/png;base64,AAAA"
    assert m.contents[5].media_type == "image/png"
    assert m.contents[6].uri == "https://example.com/a.jpg"
    assert m.text == "Looking"


def test_dict_content_in_positional_constructor_is_validated() -> None:
    """A dict with a 'type' key in the contents list becomes the matching content model."""
    m = Message("assistant", [{"type": "function_call", "name": "f", "arguments": {"x": 1}}])
    assert isinstance(m.contents[0], FunctionCallContent)
    assert m.contents[0].name == "f"


def test_unknown_content_type_is_rejected() -> None:
    """A content dict with an unknown type fails validation."""
    with pytest.raises(ValidationError):
        Message.model_validate({"role": "user", "contents": [{"type": "video", "uri": "x"}]})


def test_unknown_message_field_is_rejected() -> None:
    """Extra fields on a message are forbidden."""
    with pytest.raises(ValidationError):
        Message.model_validate({"role": "user", "contents": [], "colour": "red"})


def test_unusable_content_object_is_rejected() -> None:
    """An object that is neither str, dict nor content-like cannot be message content."""
    with pytest.raises(ValidationError, match="cannot use int as message content"):
        Message("user", [42])


def test_text_joins_only_text_contents_with_one_space() -> None:
    """Message.text joins the text contents with a single space and skips other kinds."""
    m = Message(
        "assistant",
        ["First.", {"type": "function_call", "name": "f"}, "Second.", {"type": "uri", "uri": "u"}],
    )
    assert m.text == "First. Second."


def test_text_keeps_inner_whitespace() -> None:
    """Message.text does not strip the individual parts."""
    assert Message("assistant", ["alpha ", " beta"]).text == "alpha   beta"


def test_message_json_round_trip() -> None:
    """A message survives model_dump_json / model_validate_json unchanged."""
    m = Message(
        "assistant",
        [
            "hi",
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"a": 1}'},
            {"type": "function_result", "call_id": "c", "result": [1, 2]},
        ],
        author_name="bot",
    )
    assert Message.model_validate_json(m.model_dump_json()) == m


def test_message_pickle_round_trip() -> None:
    """A message survives pickling unchanged."""
    m = Message("user", ["hi", {"type": "data", "uri": "data:image/png;base64,AA"}])
    assert pickle.loads(pickle.dumps(m)) == m


def test_coerce_accepts_foreign_message_object() -> None:
    """Message.coerce turns an object with .role and .contents (MAF's shape) into a Message."""
    foreign = SimpleNamespace(
        role="assistant",
        contents=[
            SimpleNamespace(type="text", text="hello"),
            SimpleNamespace(type="function_call", name="f", arguments={"x": 1}, call_id="c9"),
        ],
        author_name="agent-a",
    )
    m = Message.coerce(foreign)
    assert m.role == "assistant"
    assert m.text == "hello"
    assert m.function_calls[0].arguments == {"x": 1}
    assert m.function_calls[0].call_id == "c9"
    assert m.author_name == "agent-a"


def test_coerce_passes_messages_through_and_reads_dicts() -> None:
    """Message.coerce returns a Message as is and validates a dict."""
    m = Message("user", ["x"])
    assert Message.coerce(m) is m
    assert Message.coerce({"role": "user", "contents": [{"type": "text", "text": "x"}]}) == m


def test_coerce_rejects_other_values() -> None:
    """Message.coerce raises TypeError naming the unusable type."""
    with pytest.raises(TypeError, match="cannot use int as a message"):
        Message.coerce(3)


# --------------------------------------------------------------------------------------------
# parsed_arguments


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (None, {}),
        ({"a": 1}, {"a": 1}),
        ("", {}),
        ("   ", {}),
        (' {"a": 1} ', {"a": 1}),
        ("{not json", None),
        ("[1, 2]", None),
        ('"text"', None),
        ("3", None),
    ],
)
def test_parsed_arguments_normalisation(arguments: Any, expected: dict[str, Any] | None) -> None:
    """parsed_arguments: None/"" -> {}, dict copied, JSON object parsed, bad or non-object JSON -> None."""
    assert FunctionCallContent(name="f", arguments=arguments).parsed_arguments() == expected


def test_parsed_arguments_returns_a_copy() -> None:
    """parsed_arguments of a dict is a copy, so mutating it leaves the call unchanged."""
    call = FunctionCallContent(name="f", arguments={"a": 1})
    parsed = call.parsed_arguments()
    assert parsed is not None
    parsed["a"] = 2
    assert call.arguments == {"a": 1}


# --------------------------------------------------------------------------------------------
# OpenAI chat-completions conversion

OPENAI_CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?", "name": "alice"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_time", "arguments": "{}"},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 20}'},
    {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
    {"role": "assistant", "content": "Sunny, 20C."},
]


def test_messages_from_openai_reads_roles_and_contents() -> None:
    """messages_from_openai maps text, assistant tool_calls and tool results to our contents."""
    msgs = messages_from_openai(OPENAI_CHAT)
    assert [m.role for m in msgs] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert msgs[1].text == "Weather in Paris?"
    assert msgs[1].author_name == "alice"
    calls = msgs[2].function_calls
    assert [(c.name, c.call_id, c.arguments) for c in calls] == [
        ("get_weather", "call_1", '{"city": "Paris"}'),
        ("get_time", "call_2", "{}"),
    ]
    assert msgs[2].text == ""
    result = msgs[3].function_results[0]
    assert (result.call_id, result.result) == ("call_1", '{"temp": 20}')
    assert msgs[5].text == "Sunny, 20C."


def test_openai_round_trip_is_lossless() -> None:
    """OpenAI messages -> Messages -> OpenAI messages gives back the same array."""
    assert messages_to_openai(messages_from_openai(OPENAI_CHAT)) == OPENAI_CHAT


def test_messages_to_openai_serialises_dict_arguments_and_results() -> None:
    """Dict arguments and non-str results are JSON-encoded; each function_result is its own tool message."""
    msgs = [
        Message("user", ["Go"]),
        Message(
            "assistant",
            [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": {"x": 1}}],
        ),
        Message(
            "tool",
            [
                {"type": "function_result", "call_id": "c1", "result": {"ok": True}},
                {"type": "function_result", "call_id": "c2", "result": None},
            ],
        ),
    ]
    wire = messages_to_openai(msgs)
    assert wire == [
        {"role": "user", "content": "Go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
        {"role": "tool", "tool_call_id": "c2", "content": ""},
    ]
    back = messages_from_openai(wire)
    assert back[1].function_calls[0].parsed_arguments() == {"x": 1}
    assert [r.call_id for m in back for r in m.function_results] == ["c1", "c2"]


def test_openai_image_parts_round_trip() -> None:
    """Image parts become data/uri contents and come back as image_url parts."""
    wire = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            ],
        }
    ]
    msgs = messages_from_openai(wire)
    data, uri = msgs[0].contents[1], msgs[0].contents[2]
    assert isinstance(data, DataContent)
    assert data.media_type == "image/png"
    assert isinstance(uri, UriContent)
    assert messages_to_openai(msgs) == wire


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"content": "no role"}, "no string 'role'"),
        ({"role": "user", "content": 5}, "'content' must be a string or a list"),
        ({"role": "user", "content": [{"type": "audio"}]}, "unsupported OpenAI content part"),
    ],
)
def test_bad_openai_message_error_names_index(bad: dict[str, Any], fragment: str) -> None:
    """A malformed OpenAI message raises ValueError that names its index in the array."""
    with pytest.raises(ValueError, match=r"^messages\[1\]: ") as info:
        messages_from_openai([{"role": "user", "content": "ok"}, bad])
    assert fragment in str(info.value)


def test_non_mapping_openai_message_error_names_index() -> None:
    """A non-dict entry in the OpenAI array is reported with its index as ValueError."""
    with pytest.raises(ValueError, match=r"^messages\[2\]: "):
        messages_from_openai([{"role": "user", "content": "a"}, {"role": "user"}, "oops"])


# --------------------------------------------------------------------------------------------
# ToolDefinition

WEATHER_SCHEMA = {
    "properties": {"city": {"title": "City", "type": "string"}},
    "required": ["city"],
    "title": "get_weather_input",
    "type": "object",
}


def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return f"sunny in {city}"


def test_tool_definition_positional_construction() -> None:
    """ToolDefinition(name, description, parameters) works positionally."""
    t = ToolDefinition("search", "Search the web", {"type": "object", "properties": {"q": {}}})
    assert t.name == "search"
    assert t.description == "Search the web"
    assert t.parameters == {"type": "object", "properties": {"q": {}}}


def test_tool_definition_defaults() -> None:
    """A ToolDefinition with only a name has an empty description and an empty object schema."""
    t = ToolDefinition("noop")
    assert t.description == ""
    assert t.parameters == {"type": "object", "properties": {}}


def test_tool_definition_is_frozen() -> None:
    """ToolDefinition is an immutable snapshot."""
    t = ToolDefinition("noop")
    with pytest.raises(ValidationError):
        t.name = "other"  # type: ignore[misc]


def test_from_function_builds_maf_json_schema() -> None:
    """from_function gives the function's name, docstring and the pydantic JSON schema MAF shows."""
    t = ToolDefinition.from_function(get_weather)
    assert t.name == "get_weather"
    assert t.description == "Get the weather for a city."
    assert t.parameters == WEATHER_SCHEMA


def test_from_function_with_name_override_and_default() -> None:
    """from_function(name=...) renames the tool; parameters with defaults are not required."""

    def find(query: str, limit: int = 5) -> list[str]:
        return []

    t = ToolDefinition.from_function(find, name="lookup")
    assert t.name == "lookup"
    assert t.description == ""
    assert t.parameters["title"] == "lookup_input"
    assert t.parameters["required"] == ["query"]
    assert t.parameters["properties"]["limit"] == {
        "default": 5,
        "title": "Limit",
        "type": "integer",
    }


def test_coerce_plain_dict() -> None:
    """coerce reads a plain dict with name/description/parameters."""
    t = ToolDefinition.coerce(
        {"name": "get_weather", "description": "d", "parameters": WEATHER_SCHEMA}
    )
    assert t == ToolDefinition("get_weather", "d", WEATHER_SCHEMA)


def test_coerce_openai_function_dict() -> None:
    """coerce unwraps an OpenAI {"type": "function", "function": {...}} tool."""
    t = ToolDefinition.coerce(
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "d", "parameters": WEATHER_SCHEMA},
        }
    )
    assert t == ToolDefinition("get_weather", "d", WEATHER_SCHEMA)


def test_coerce_dict_without_parameters_gets_empty_schema() -> None:
    """coerce of a dict without parameters gives the empty object schema."""
    assert ToolDefinition.coerce({"name": "x"}).parameters == {"type": "object", "properties": {}}


def test_coerce_object_with_parameters_method() -> None:
    """coerce snapshots an object with .name, .description and a .parameters() method (MAF FunctionTool)."""

    class FakeFunctionTool:
        name = "get_weather"
        description = "Weather lookup"

        def parameters(self) -> dict[str, Any]:
            return WEATHER_SCHEMA

    t = ToolDefinition.coerce(FakeFunctionTool())
    assert t == ToolDefinition("get_weather", "Weather lookup", WEATHER_SCHEMA)
    assert t.parameters is not WEATHER_SCHEMA


def test_coerce_object_with_parameters_attribute() -> None:
    """coerce also accepts .parameters as a plain dict attribute."""
    tool = SimpleNamespace(name="t", description=None, parameters={"type": "object"})
    assert ToolDefinition.coerce(tool) == ToolDefinition("t", "", {"type": "object"})


def test_coerce_function_and_identity() -> None:
    """coerce uses from_function for a plain function and returns a ToolDefinition unchanged."""
    assert ToolDefinition.coerce(get_weather).parameters == WEATHER_SCHEMA
    t = ToolDefinition("x")
    assert ToolDefinition.coerce(t) is t


def test_coerce_rejects_nameless_dict_and_other_values() -> None:
    """coerce raises ValueError for a dict without a name and TypeError for an unusable value."""
    with pytest.raises(ValueError, match="needs a 'name'"):
        ToolDefinition.coerce({"description": "no name"})
    with pytest.raises(TypeError, match="cannot snapshot int as a tool"):
        ToolDefinition.coerce(5)


def test_tool_definition_json_round_trip() -> None:
    """A ToolDefinition survives JSON serialisation unchanged."""
    t = ToolDefinition.from_function(get_weather)
    assert ToolDefinition.model_validate_json(t.model_dump_json()) == t
    assert json.loads(t.model_dump_json())["parameters"] == WEATHER_SCHEMA


def test_tool_definition_pickle_round_trip() -> None:
    """A ToolDefinition survives pickling unchanged."""
    t = ToolDefinition.from_function(get_weather)
    assert pickle.loads(pickle.dumps(t)) == t


def test_maf_to_dict_shape_validates() -> None:
    """A message dict as MAF's Message.to_dict() writes it loads; bookkeeping keys are dropped."""
    data = {
        "type": "message",
        "role": "assistant",
        "contents": [
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "f",
                "arguments": {"a": 1},
                "hosted": False,
                "additional_properties": {},
            },
            {"type": "text", "text": "hi", "additional_properties": {}},
            {"type": "usage", "usage_details": {"total_token_count": 3}},
        ],
        "author_name": "bot",
        "message_id": "m1",
        "additional_properties": {},
    }
    message = Message.model_validate(data)
    assert [c.type for c in message.contents] == ["function_call", "text"]
    assert message.text == "hi"
    assert message.author_name == "bot"


def test_unknown_keys_outside_maf_bookkeeping_are_still_rejected() -> None:
    """A misspelt key is an error, not silently dropped."""
    with pytest.raises(ValidationError, match="txt"):
        Message.model_validate(
            {"role": "user", "contents": [{"type": "text", "text": "a", "txt": "b"}]}
        )
    with pytest.raises(ValidationError, match="contnets"):
        Message.model_validate({"role": "user", "contnets": []})


def test_message_from_role_and_contents_equals_the_validated_message() -> None:
    """Message(role, [str, content, ...]) (built without running validation) has exactly the
    fields, dump, JSON and pickle of the same message validated from its dict form."""

    from evalpipe.messages import FunctionCallContent, FunctionResultContent

    built = Message(
        "assistant",
        [
            "hi",
            FunctionCallContent(call_id="c1", name="f", arguments={"x": 1}),
            FunctionResultContent(call_id="c1", result="ok"),
        ],
    )
    validated = Message.model_validate(
        {
            "role": "assistant",
            "contents": [
                {"type": "text", "text": "hi"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": {"x": 1}},
                {"type": "function_result", "call_id": "c1", "result": "ok"},
            ],
        }
    )
    assert built == validated
    assert built.model_dump() == validated.model_dump()
    assert built.model_dump_json() == validated.model_dump_json()
    assert built.model_fields_set == validated.model_fields_set
    assert pickle.loads(pickle.dumps(built)) == validated
    assert built.text == "hi"
    assert built.author_name is None


@pytest.mark.parametrize("text", ["What's the weather?", ""])
def test_user_message_is_the_validated_message(text: str) -> None:
    """user_message(t) is Message("user", [t]) validated: fields, fields set, JSON, text."""
    fast = user_message(text)
    slow = Message.model_validate({"role": "user", "contents": [text]})
    assert fast == slow
    assert fast.__dict__ == slow.__dict__
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.contents[0].model_fields_set == slow.contents[0].model_fields_set
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.text == text


def test_user_message_validates_a_non_str() -> None:
    """A query that is not a str goes through Message validation (a content dict is coerced)."""
    message = user_message({"type": "text", "text": "hi"})  # type: ignore[arg-type]
    assert message == Message("user", ["hi"])
