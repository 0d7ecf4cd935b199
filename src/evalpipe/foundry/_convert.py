"""Conversions to Foundry's agent message schema and to the inline JSONL items a run carries.

The message rules are MAF's (shared spec foundry-evals.md §5, maf-semantics.md §11): text parts,
``tool_call`` parts with parsed arguments, one ``tool`` message per tool result, ``input_image`` parts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from evalpipe.items import EvalItem
from evalpipe.messages import (
    DataContent,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    TextContent,
    ToolDefinition,
    UriContent,
)

__all__ = [
    "UNPARSEABLE_ARGUMENTS",
    "item_to_foundry",
    "json_or_text",
    "to_foundry_messages",
    "tool_definitions_to_foundry",
]

UNPARSEABLE_ARGUMENTS: dict[str, str] = {"_raw_arguments": "[unparseable]"}
"""What a tool call's arguments become when they are a string that is not JSON (as MAF)."""


def json_or_text(value: Any) -> Any:
    """A string's JSON value when it is JSON, else the value as it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _tool_call_part(call: FunctionCallContent) -> dict[str, Any]:
    args = call.arguments
    if isinstance(args, str):
        parsed = json_or_text(args)
        arguments = dict(UNPARSEABLE_ARGUMENTS) if parsed is args else parsed
    else:
        arguments = dict(args or {})
    return {
        "type": "tool_call",
        "tool_call_id": call.call_id,
        "name": call.name,
        "arguments": arguments,
    }


def _convert(message: Message) -> list[dict[str, Any]]:
    results = [c for c in message.contents if isinstance(c, FunctionResultContent)]
    if results:
        # A message holding tool results becomes only tool messages (other parts are dropped, as MAF).
        return [
            {
                "role": "tool",
                "tool_call_id": r.call_id,
                "content": [{"type": "tool_result", "tool_result": json_or_text(r.result)}],
            }
            for r in results
        ]
    parts: list[dict[str, Any]] = []
    for c in message.contents:
        if isinstance(c, TextContent):
            if c.text:
                parts.append({"type": "text", "text": c.text})
        elif isinstance(c, FunctionCallContent):
            parts.append(_tool_call_part(c))
        elif isinstance(c, DataContent | UriContent):
            image: dict[str, Any] = {"type": "input_image", "image_url": c.uri}
            if c.media_type:
                image["detail"] = "auto"
            parts.append(image)
    if not parts:
        parts.append({"type": "text", "text": ""})
    return [{"role": message.role, "content": parts}]


def to_foundry_messages(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """Messages (evalpipe's, their dict form, or MAF's) in the agent message schema Foundry's
    evaluators read: one wire message each, except that a message with tool results becomes one
    ``{"role": "tool", "tool_call_id", "content": [{"type": "tool_result", ...}]}`` per result."""
    out: list[dict[str, Any]] = []
    for message in messages:
        out.extend(_convert(Message.coerce(message)))
    return out


def tool_definitions_to_foundry(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    """Tool definitions as ``{"name", "description", "parameters"}`` dicts."""
    return [
        {"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools
    ]


def item_to_foundry(
    item: EvalItem, *, split: Any = None, with_actions: bool = False
) -> dict[str, Any]:
    """One item as the ``item`` object of a run's inline JSONL content, split by ``split`` when the
    item has no strategy of its own; ``with_actions`` adds ``actions`` and (when the item has
    expected tool calls) ``expected_actions`` for task_navigation_efficiency."""
    splitter = item.split_strategy or split
    query_messages, response_messages = item.split_messages(splitter)
    if splitter is None or splitter is item.split_strategy:
        query, response = item.query_and_response()
    else:
        query = " ".join(m.text for m in query_messages if m.role == "user" and m.text).strip()
        response = " ".join(
            m.text for m in response_messages if m.role == "assistant" and m.text
        ).strip()
    data: dict[str, Any] = {
        "query": query,
        "response": response,
        "query_messages": to_foundry_messages(query_messages),
        "response_messages": to_foundry_messages(response_messages),
    }
    if item.tools:
        data["tool_definitions"] = tool_definitions_to_foundry(item.tools)
    if item.context:
        data["context"] = item.context
    if item.expected_output is not None:
        data["ground_truth"] = item.expected_output
    if with_actions:  # the agent's steps: one assistant message per tool call
        data["actions"] = [
            {"role": "assistant", "content": [_tool_call_part(call)]}
            for message in response_messages
            for call in message.function_calls
        ]
        if item.expected_tool_calls is not None:
            # the expected tool names; [names, {name: arguments}] when any call pins arguments
            names = [e.name for e in item.expected_tool_calls]
            params = {
                e.name: e.arguments for e in item.expected_tool_calls if e.arguments is not None
            }
            data["expected_actions"] = [names, params] if params else names
    return data
