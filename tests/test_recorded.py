"""Recorded conversations: the three message formats, detection, errors, and evaluation as recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalpipe import (
    EvalItem,
    ExpectedToolCall,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    TextContent,
    evaluate_agent,
    keyword_check,
    tool_call_args_match,
)
from evalpipe.datasets import DatasetError, load_jsonl
from evalpipe.foundry._convert import to_foundry_messages
from evalpipe.recorded import (
    RecordedFormatError,
    check_messages,
    detect_format,
    parse_conversation,
    split_recording,
)

EXPECTED = [
    Message("system", ["You are a weather bot."]),
    Message("user", ["Weather in Paris?"]),
    Message(
        "assistant",
        [FunctionCallContent(name="get_weather", arguments={"city": "Paris"}, call_id="c1")],
    ),
    Message("tool", [FunctionResultContent(call_id="c1", result={"temp_c": 18})]),
    Message("assistant", ["It is 18C in Paris."]),
]

OPENAI = [
    {"role": "system", "content": "You are a weather bot."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 18}'},
    {"role": "assistant", "content": "It is 18C in Paris."},
]

FOUNDRY = to_foundry_messages(EXPECTED)


def _normalized(messages: list[Message]) -> list[Any]:
    """Messages with JSON-string arguments and results parsed, for comparing across formats."""
    out = []
    for m in messages:
        parts = []
        for c in m.contents:
            if isinstance(c, FunctionCallContent):
                parts.append(("call", c.name, c.parsed_arguments(), c.call_id))
            elif isinstance(c, FunctionResultContent):
                result = json.loads(c.result) if isinstance(c.result, str) else c.result
                parts.append(("result", c.call_id, result))
            elif isinstance(c, TextContent):
                parts.append(("text", c.text))
        out.append((m.role, parts))
    return out


@pytest.mark.parametrize(
    ("fmt", "wire"),
    [
        ("evalpipe", [m.model_dump(mode="json") for m in EXPECTED]),
        ("openai", OPENAI),
        ("foundry", FOUNDRY),
    ],
)
def test_each_format_is_detected_and_read(fmt: str, wire: list[dict[str, Any]]) -> None:
    """The same exchange in each of the three formats is detected as that format and reads back
    as the same conversation (tool call, result, system message included)."""
    assert detect_format([("row", [("conversation", wire)])]) == fmt
    assert _normalized(parse_conversation(wire)) == _normalized(EXPECTED)


def test_maf_to_dict_messages_are_read() -> None:
    """Real MAF ``Message.to_dict()`` output (bookkeeping keys and all) is the evalpipe format."""
    af = pytest.importorskip("agent_framework")
    messages = [
        af.Message(role="user", contents=["Weather in Paris?"]),
        af.Message(
            role="assistant",
            contents=[
                af.Content.from_function_call("c1", "get_weather", arguments={"city": "Paris"})
            ],
        ),
        af.Message(role="tool", contents=[af.Content.from_function_result("c1", result="18C")]),
        af.Message(role="assistant", contents=["18C."], author_name="weather"),
    ]
    wire = [m.to_dict() for m in messages]
    assert detect_format([("row", [("conversation", wire)])]) == "evalpipe"
    parsed = parse_conversation(wire)
    assert [m.role for m in parsed] == ["user", "assistant", "tool", "assistant"]
    assert parsed[1].function_calls[0].arguments == {"city": "Paris"}
    assert parsed[3].author_name == "weather"


def test_foundry_query_response_pair_is_one_conversation() -> None:
    """A Foundry ``{"query": [...], "response": [...]}`` pair reads as query followed by response."""
    pair = {"query": FOUNDRY[:2], "response": FOUNDRY[2:]}
    assert _normalized(parse_conversation(pair)) == _normalized(EXPECTED)


@pytest.mark.parametrize(
    ("wire", "closest", "path"),
    [
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_call", "tool_call_id": "c", "name": "f", "arguments": "{}"}
                    ],
                },
            ],
            "Foundry",
            "conversation[1].content[0].arguments",
        ),
        (
            [{"role": "user", "contents": [{"type": "txt", "text": "hi"}]}],
            "evalpipe",
            "conversation[0].contents[0].type",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": {"a": 1}}}],
                },
            ],
            "OpenAI",
            "conversation[1].tool_calls[0].function.arguments",
        ),
    ],
)
def test_a_recording_fitting_no_format_names_the_closest_mismatch(
    wire: list[dict[str, Any]], closest: str, path: str
) -> None:
    """A recording that fits no format is refused with the closest format and its first mismatch."""
    with pytest.raises(RecordedFormatError) as info:
        detect_format([("line 4", [("conversation", wire)])])
    text = str(info.value)
    assert text.startswith("line 4: the recording fits no message format")
    assert f"closest is {closest}" in text
    assert path in text


def test_check_messages_reports_the_first_mismatch_path() -> None:
    """check_messages gives the field path where a list stops fitting a format, None when it fits."""
    assert check_messages(OPENAI, "openai") is None
    bad = check_messages(OPENAI, "foundry")
    assert bad is not None
    assert bad.path == "conversation[2].tool_calls"
    bad = check_messages(FOUNDRY, "evalpipe")
    assert bad is not None
    assert bad.path == "conversation[0].contents"


def write_jsonl(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "recorded.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_dataset_rows_in_one_file_share_a_format(tmp_path: Path) -> None:
    """A file mixing formats is refused at the first row that leaves the file's format, by line."""
    path = write_jsonl(tmp_path, [{"conversation": OPENAI}, {"conversation": FOUNDRY}])
    with pytest.raises(DatasetError) as info:
        load_jsonl(path)
    text = str(info.value)
    assert text.startswith(f"{path}:2:")
    assert "Foundry agent messages" in text
    assert "OpenAI chat-completions" in text
    assert "(from line 1)" in text
    assert "conversation[2].content[0].type: 'tool_call' is not one of" in text


def test_dataset_row_fitting_no_format_names_file_line_and_path(tmp_path: Path) -> None:
    """A recorded row that fits no format is refused naming file:line and the mismatching field."""
    bad = [dict(m) for m in OPENAI]
    bad[3] = {"role": "tool", "content": "18"}  # tool message without tool_call_id
    path = write_jsonl(tmp_path, [{"query": "plain"}, {"conversation": bad}])
    with pytest.raises(DatasetError) as info:
        load_jsonl(path)
    text = str(info.value)
    assert text.startswith(f"{path}:2: the recording fits no message format")
    assert "conversation[3].tool_call_id" in text


def test_query_comes_from_the_last_user_message_before_the_response() -> None:
    """Without a query, a recording's query is its last user message; the response follows it."""
    conversation = [
        Message("user", ["first"]),
        Message("assistant", ["one"]),
        Message("user", ["second"]),
        Message("assistant", ["two"]),
    ]
    head, tail, query = split_recording(conversation, None)
    assert query == "second"
    assert [m.text for m in tail] == ["two"]
    assert [m.text for m in head] == ["first", "one", "second"]
    with pytest.raises(RecordedFormatError, match="add a 'query'"):
        split_recording([Message("assistant", ["hello"])], None)
    head, _, query = split_recording([Message("assistant", ["hello"])], "asked")
    assert [m.role for m in head] == ["user"]
    assert query == "asked"


async def test_evaluate_agent_scores_recorded_conversations_without_queries() -> None:
    """evaluate_agent(responses=[recorded conversations]) needs no agent or queries: the items are
    the recordings (system message kept), scored as they happened."""
    other = [
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": "No idea."},
    ]
    [result] = await evaluate_agent(
        responses=[OPENAI, other],
        expected_tool_calls=[[ExpectedToolCall("get_weather", {"city": "Paris"})], []],
        evaluators=[keyword_check("18C"), tool_call_args_match],
    )
    assert result.result_counts == {"passed": 1, "failed": 1, "errored": 0}
    first = result.input_items[0]
    assert [m.role for m in first.conversation] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert first.query == "Weather in Paris?"
    assert first.response == "It is 18C in Paris."
    assert result.input_items[1].query == "Weather in Rome?"


async def test_evaluate_agent_response_lists_without_user_message_follow_the_query() -> None:
    """A recorded list without a user message is a response (MAF's shape): the query comes first,
    and queries are then required."""
    response = [{"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]}]
    [result] = await evaluate_agent(
        queries=["Weather?"], responses=[response], evaluators=keyword_check("sunny")
    )
    item: EvalItem = result.input_items[0]
    assert [m.role for m in item.conversation] == ["user", "assistant"]
    assert result.passed == 1
    with pytest.raises(ValueError, match="Provide 'queries' alongside 'responses'"):
        await evaluate_agent(responses=[response], evaluators=keyword_check("sunny"))


async def test_evaluate_agent_refuses_a_response_in_no_format() -> None:
    """A response list that fits no message format is refused naming responses[i] and the field."""
    with pytest.raises(ValueError, match=r"responses\[0\].*responses\[0\]\[0\]\.role"):
        await evaluate_agent(
            queries=["q"], responses=[[{"content": "x"}]], evaluators=keyword_check("x")
        )


async def test_evaluate_agent_takes_recorded_message_objects_with_queries() -> None:
    """A recording given as Message objects with a user message is the whole conversation even when
    queries are passed (no duplicated user turn); mismatched lengths keep MAF's message."""
    [result] = await evaluate_agent(
        queries=["label"], responses=[EXPECTED], evaluators=keyword_check("18C")
    )
    item = result.input_items[0]
    assert [m.role for m in item.conversation] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert result.passed == 1
    with pytest.raises(ValueError, match=r"Got 2 queries but 1 responses\."):
        await evaluate_agent(
            queries=["a", "b"], responses=[EXPECTED], evaluators=keyword_check("x")
        )
