"""Recorded conversations: what an agent already did, read back as evalpipe Messages.

Three message formats are understood, detected from the messages themselves:

- ``evalpipe``: evalpipe's and Microsoft Agent Framework's message dicts (``Message.to_dict()`` of
  either): ``{"role", "contents": [{"type": "text" | "function_call" | "function_result" | ...}]}``.
- ``openai``: OpenAI chat-completions messages: ``{"role", "content": str | [parts] | null}``, the
  assistant's ``tool_calls: [{"id", "type": "function", "function": {"name", "arguments": "<JSON>"}}]``
  and ``{"role": "tool", "tool_call_id", "content"}`` results.
- ``foundry``: Foundry's agent message schema (what its agent evaluators read, and what
  ``evalpipe.foundry`` sends): ``{"role", "content": str | [parts]}`` with ``text``, ``tool_call``
  (``tool_call_id``, ``name``, ``arguments`` as an object), ``tool_result`` (in a ``tool`` message
  with ``tool_call_id``) and ``input_image`` parts. A ``{"query": [...], "response": [...]}`` pair of
  such arrays is one conversation too (the response starts where ``query`` ends).

A dataset file holds one format: :func:`detect_format` picks the format every recording fits, and a
recording that fits none gets an error naming the closest format's first mismatch as a field path
(``conversation[2].content[0].type``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import ValidationError

from evalpipe.messages import (
    _CONTENT_BY_TYPE,  # the content kinds evalpipe models
    _FOREIGN_ONLY_KINDS,  # MAF kinds evalpipe leaves out
    FunctionCallContent,
    FunctionResultContent,
    Message,
    TextContent,
    _uri_content,  # an image URL as evalpipe reads OpenAI's
    messages_from_openai,
)
from evalpipe.transcripts import ExecutorRun, RunUsage, TargetRun, WorkflowRun

__all__ = [
    "FORMATS",
    "Mismatch",
    "RecordedFormat",
    "RecordedFormatError",
    "check_messages",
    "closest",
    "convert_messages",
    "detect_format",
    "final_answer",
    "parse_conversation",
    "recorded_run",
    "response_start",
    "split_recording",
]

RecordedFormat = Literal["evalpipe", "openai", "foundry"]
"""The message formats a recording may be written in."""

FORMATS: tuple[RecordedFormat, ...] = ("evalpipe", "openai", "foundry")
"""Every format, in the order detection prefers them when several fit."""

FORMAT_NAMES: dict[str, str] = {
    "evalpipe": "evalpipe/MAF message dicts",
    "openai": "OpenAI chat-completions messages",
    "foundry": "Foundry agent messages",
}


class RecordedFormatError(ValueError):
    """A recording that fits no message format, or not the format of the rest of its file."""


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Where a recording stops fitting a format: the field path and what is wrong there."""

    format: str
    path: str
    """Field path of the first mismatch, e.g. ``conversation[2].content[0].type``."""
    message: str
    progress: tuple[int, ...]
    """How far the recording fitted (messages, then depth): the largest is the closest format."""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# ---------------------------------------------------------------------------------------------
# per-format checks: None when the message fits, else the first mismatch


_KEYS = {
    "evalpipe": frozenset(
        {"role", "contents", "author_name", "type", "message_id", "additional_properties"}
    ),
    "openai": frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "refusal"}),
    "foundry": frozenset({"role", "content", "tool_call_id", "createdAt", "run_id", "name"}),
}
"""The fields a message of each format may have."""
_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_CONTENT_TAGS = frozenset(_CONTENT_BY_TYPE)
_PARTS: dict[str, dict[str, tuple[str, ...]]] = {
    "openai": {"text": ("text",), "image_url": ("image_url",)},
    "openai tool": {"text": ("text",)},
    "foundry": {
        "text": ("text",),
        "tool_call": ("tool_call_id", "name", "arguments"),
        "tool_result": ("tool_result",),
        "input_image": ("image_url",),
    },
}
"""The content parts of the chat formats (an OpenAI tool message's apart): kind -> needed keys."""
_CONTENT_SHAPE = {
    "openai": "must be a string, a list of parts or null",
    "openai tool": "a tool message's content is a string",
    "foundry": "must be a string or a list of parts",
}
_PART_ROLES = {"tool_call": "assistant", "tool_result": "tool"}
"""Foundry parts that belong to one role's messages."""


_Fail = tuple[str, str, tuple[int, ...]]
"""A mismatch in one message: field path, what is wrong, how deep (then the part's index)."""


def _check_evalpipe(msg: Mapping[str, Any], path: str, fmt: str) -> _Fail | None:
    if not isinstance(msg.get("contents"), list):
        return f"{path}.contents", "must be a list of content dicts", (2,)
    for j, part in enumerate(msg["contents"]):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if not isinstance(part, str) and kind not in _CONTENT_TAGS | _FOREIGN_ONLY_KINDS:
            return (
                f"{path}.contents[{j}].type",
                f"{kind!r} is not a content kind ({', '.join(sorted(_CONTENT_TAGS))})",
                (3, j),
            )
    try:
        Message.model_validate(dict(msg))
    except ValueError as exc:  # pydantic's ValidationError among them
        where, text = path, str(exc)
        if isinstance(exc, ValidationError) and exc.errors():
            first = exc.errors()[0]
            loc = [p for p in first["loc"] if not (isinstance(p, str) and p in _CONTENT_TAGS)]
            where = path + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
            text = first["msg"]
        return where, text, (3,)
    return None


def _check_parts(
    parts: list[Any], path: str, kinds: Mapping[str, tuple[str, ...]], role: str
) -> _Fail | None:
    """Each part a dict whose ``type`` is a key of ``kinds``, holding that kind's keys; a Foundry
    tool part in its role's messages, its arguments an object."""
    for j, part in enumerate(parts):
        where = f"{path}[{j}]"
        if not isinstance(part, Mapping):
            return where, f"a content part is an object, got {part!r:.40}", (3, j)
        kind = part.get("type")
        if not isinstance(kind, str) or kind not in kinds:
            return f"{where}.type", f"{kind!r} is not one of {', '.join(map(repr, kinds))}", (3, j)
        for key in kinds[kind]:
            if key not in part:
                return f"{where}.{key}", f"missing in a {kind!r} part", (4, j)
        if kind == "text" and not isinstance(part["text"], str):
            return f"{where}.text", "must be a string", (4, j)
        owner = _PART_ROLES.get(kind)
        if owner is not None and role != owner:
            return f"{where}.type", f"{kind} parts belong to {owner} messages", (5, j)
        if kind == "tool_call" and not isinstance(part["arguments"], Mapping):
            return f"{where}.arguments", "must be a JSON object", (5, j)
    return None


def _check_chat(msg: Mapping[str, Any], path: str, fmt: str) -> _Fail | None:
    """The OpenAI and Foundry formats: a chat role, a tool message's ``tool_call_id``, content as
    text or parts of the format's kinds, and OpenAI's ``tool_calls``."""
    role, content = msg.get("role"), msg.get("content")
    if role not in _CHAT_ROLES:
        return f"{path}.role", f"{role!r} is not one of {sorted(_CHAT_ROLES)}", (2,)
    if role == "tool" and not isinstance(msg.get("tool_call_id"), str):
        return f"{path}.tool_call_id", "a tool message needs a string", (2,)
    kinds = "openai tool" if fmt == "openai" and role == "tool" else fmt
    if isinstance(content, list):
        bad = _check_parts(content, f"{path}.content", _PARTS[kinds], role)
        if bad is not None:
            return bad
    elif not isinstance(content, str) and not (kinds == "openai" and content is None):
        return f"{path}.content", _CONTENT_SHAPE[kinds], (2,)
    calls = msg.get("tool_calls")
    if calls is None:
        return None
    if role != "assistant" or not isinstance(calls, list):
        return f"{path}.tool_calls", "a list, on assistant messages only", (2,)
    for j, call in enumerate(calls):
        where = f"{path}.tool_calls[{j}]"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            return f"{where}.function", "missing (an object)", (3, j)
        if not isinstance(function.get("name"), str):
            return f"{where}.function.name", "must be a string", (4, j)
        if not isinstance(function.get("arguments"), str):
            return (
                f"{where}.function.arguments",
                "must be a JSON string (chat-completions encodes arguments as text)",
                (4, j),
            )
    return None


def _message_list(value: Any, fmt: str, path: str) -> list[Any] | Mismatch:
    """The message list of a recording (a foundry query/response pair is joined)."""
    if isinstance(value, Mapping) and fmt == "foundry" and set(value) <= {"query", "response"}:
        query, response = value.get("query") or [], value.get("response") or []
        for key, part in (("query", query), ("response", response)):
            if not isinstance(part, list):
                return Mismatch(fmt, f"{path}.{key}", "must be a list of messages", (0, 0))
        return [*query, *response]
    if not isinstance(value, list):
        return Mismatch(fmt, path, f"must be a list of messages, got {type(value).__name__}", (0,))
    return value


def _check_message(msg: Any, fmt: str, where: str) -> _Fail | None:
    if not isinstance(msg, Mapping):
        return where, f"a message is an object, got {type(msg).__name__}", ()
    if not isinstance(msg.get("role"), str):
        return f"{where}.role", "missing (a string)", ()
    key, other = ("contents", "content") if fmt == "evalpipe" else ("content", "contents")
    if key not in msg and not (fmt == "openai" and "tool_calls" in msg):
        hint = f" (it has {other!r}: another format)" if other in msg else ""
        return f"{where}.{key}", f"missing{hint}", (1,)
    extra = sorted(set(msg) - _KEYS[fmt])
    if extra:
        return f"{where}.{extra[0]}", f"not a field of {FORMAT_NAMES[fmt]}", (2,)
    return (_check_evalpipe if fmt == "evalpipe" else _check_chat)(msg, where, fmt)


def check_messages(value: Any, fmt: str, path: str = "conversation") -> Mismatch | None:
    """The first place ``value`` (a list of messages) stops fitting ``fmt``; None when it fits."""
    messages = _message_list(value, fmt, path)
    if isinstance(messages, Mismatch):
        return messages
    for index, msg in enumerate(messages):
        fail = _check_message(msg, fmt, f"{path}[{index}]")
        if fail is not None:
            where, message, depth = fail
            return Mismatch(fmt, where, message, (index, *depth))
    return None


def closest(mismatches: Iterable[Mismatch]) -> Mismatch:
    """The mismatch of the format the recording fitted furthest (ties: the preferred format)."""
    return max(mismatches, key=lambda m: (m.progress, -FORMATS.index(m.format)))


def detect_format(
    recordings: Iterable[tuple[str, Sequence[tuple[str, Any]]]],
) -> RecordedFormat | None:
    """The one format every recording fits, checked in order.

    Args:
        recordings: ``(where, [(path, messages), ...])`` per recording (a dataset row: its
            conversation and each recorded agent's received/produced lists); ``where`` names the
            row in errors (``"line 3"``).

    Returns:
        The first of :data:`FORMATS` that every recording fits; None when there are none.

    Raises:
        RecordedFormatError: naming the recording that fits no format (with the closest format's
            first mismatch), or that fits only formats the recordings before it do not.
    """
    candidates: list[RecordedFormat] = list(FORMATS)
    first: str | None = None
    for where, lists in recordings:
        if not lists:
            continue
        mismatches: dict[RecordedFormat, Mismatch] = {}
        for fmt in FORMATS:
            for ordinal, (path, value) in enumerate(lists):
                bad = check_messages(value, fmt, path)
                if bad is not None:  # a later list got further than an earlier one
                    mismatches[fmt] = replace(bad, progress=(ordinal, *bad.progress))
                    break
        fits = [f for f in FORMATS if f not in mismatches]
        if not fits:
            near = closest(mismatches.values())
            raise RecordedFormatError(
                f"{where}: the recording fits no message format; closest is "
                f"{FORMAT_NAMES[near.format]}, which it leaves at {near}"
            )
        kept = [f for f in candidates if f in fits]
        if not kept:
            near = closest(mismatches[f] for f in candidates)
            raise RecordedFormatError(
                f"{where}: the recording is in {FORMAT_NAMES[fits[0]]} but the rows before it "
                f"(from {first}) are in {FORMAT_NAMES[near.format]}, which it leaves at {near}; "
                "write every row of a file in one format"
            )
        candidates = kept
        first = first or where
    return candidates[0] if first is not None else None


# ---------------------------------------------------------------------------------------------
# conversion


def _foundry_content(part: Mapping[str, Any], tool_call_id: str) -> Any:
    kind = part["type"]
    if kind == "text":
        return TextContent(text=part["text"])
    if kind == "tool_call":
        return FunctionCallContent(
            name=str(part["name"]),
            arguments=dict(part["arguments"]),
            call_id=str(part.get("tool_call_id") or ""),
        )
    if kind == "tool_result":
        return FunctionResultContent(call_id=tool_call_id, result=part["tool_result"])
    return _uri_content(str(part["image_url"]))


def _from_foundry(msg: Mapping[str, Any]) -> Message:
    role = str(msg["role"])
    call_id = str(msg.get("tool_call_id") or "")
    content = msg.get("content")
    if isinstance(content, str):
        if role == "tool":
            return Message(role, [FunctionResultContent(call_id=call_id, result=content)])
        return Message(role, [TextContent(text=content)] if content else [])
    return Message(role, [_foundry_content(part, call_id) for part in content or []])


def convert_messages(value: Any, fmt: RecordedFormat) -> list[Message]:
    """A recording in ``fmt`` (checked with :func:`check_messages` first) as Messages."""
    messages = _message_list(value, fmt, "conversation")
    if isinstance(messages, Mismatch):
        raise RecordedFormatError(str(messages))
    if fmt == "evalpipe":
        return [Message.model_validate(dict(m)) for m in messages]
    if fmt == "openai":
        return messages_from_openai(messages)
    return [_from_foundry(m) for m in messages]


def parse_conversation(
    value: Any, fmt: RecordedFormat | None = None, path: str = "conversation"
) -> list[Message]:
    """A recorded conversation as Messages, its format detected unless given.

    Messages already parsed (evalpipe ``Message`` or MAF message objects) are taken as they are.

    Raises:
        RecordedFormatError: naming the first mismatch of the given format, or of the closest one.
    """
    if isinstance(value, list) and value and all(not isinstance(m, Mapping) for m in value):
        try:
            return [Message.coerce(m) for m in value]
        except TypeError as exc:
            raise RecordedFormatError(f"{path}: {exc}") from None
    if fmt is None:
        fmt = detect_format([(path, [(path, value)])])  # raises naming the closest mismatch
    elif (bad := check_messages(value, fmt, path)) is not None:
        raise RecordedFormatError(f"not {FORMAT_NAMES[fmt]}: {bad}")
    return [] if fmt is None else convert_messages(value, fmt)


# ---------------------------------------------------------------------------------------------
# query side and response side


def response_start(conversation: Sequence[Message]) -> int:
    """Index of the first response message: after the last user message, or after the leading
    system/developer messages when there is no user message."""
    roles = [m.role for m in conversation]
    if "user" in roles:
        return len(roles) - roles[::-1].index("user")
    return next((i for i, r in enumerate(roles) if r not in ("system", "developer")), len(roles))


def split_recording(
    conversation: Sequence[Message], query: str | None, at: int | None = None
) -> tuple[list[Message], list[Message], str]:
    """``(query side, response side, query text)`` of a recorded conversation.

    The query side ends at ``at`` (default :func:`response_start`). The query text is ``query`` when
    given, else the text of the last user message on the query side. A query side without a user
    message gets ``Message("user", [query])`` at its end, so every item has its question.

    Raises:
        RecordedFormatError: when there is neither a ``query`` nor a user message with text.
    """
    cut = response_start(conversation) if at is None else at
    head, tail = list(conversation[:cut]), list(conversation[cut:])
    users = [m for m in head if m.role == "user"]
    text = query
    if text is None:
        text = next((m.text for m in reversed(users) if m.text), None)
    if not text:
        raise RecordedFormatError(
            "the conversation has no user message with text before its response; add a 'query'"
        )
    if not users:
        head.append(Message("user", [text]))
    return head, tail, text


def final_answer(messages: Sequence[Message]) -> list[Message]:
    """The last assistant message with text (``[]`` when there is none)."""
    for message in reversed(messages):
        if message.role == "assistant" and message.text:
            return [message]
    return []


# ---------------------------------------------------------------------------------------------
# transcripts from recorded dataset rows


def recorded_run(
    row: Any, *, query_index: int, repetition: int, kind: Literal["agent", "workflow"]
) -> TargetRun | WorkflowRun:
    """The transcript a recorded dataset row stands for, as if the target had just run.

    Args:
        row: A ``QueryRow`` with ``conversation`` and/or ``recorded_agents``.
        query_index: The row's position in the dataset.
        repetition: Which repetition the transcript is for.
        kind: ``"agent"``: a ``TargetRun`` whose messages are the conversation's response side;
            ``"workflow"``: a ``WorkflowRun`` with one executor turn per recorded agent (a row
            with only a ``conversation`` is one turn of the agent named by its assistant messages'
            ``author_name``, else ``"agent"``) and the final assistant message of the
            conversation (else of the last agent) as its output.

    Raises:
        RecordedFormatError: for an agent row with ``recorded_agents``.
    """
    if kind == "agent":
        if row.recorded_agents is not None or row.conversation is None:
            raise RecordedFormatError(
                f"row {row.id!r}: 'recorded_agents' is a multi-agent recording, but the target "
                "is a single agent; give the row a 'conversation' only"
            )
        _, tail, query = split_recording(row.conversation, row.query)
        return TargetRun(
            query_index=query_index,
            repetition=repetition,
            query=query,
            messages=tail,
            tools=row.tools,
            usage=RunUsage(),
        )
    if row.recorded_agents:
        recorded = [(e.agent, e.received, e.produced, e.tools) for e in row.recorded_agents]
    else:
        # a single-agent recording among multi-agent ones: one turn, named by its author
        head, tail, _ = split_recording(row.conversation or [], row.query)
        name = next((m.author_name for m in tail if m.role == "assistant" and m.author_name), None)
        recorded = [(name or "agent", head, tail, row.tools)]
    turns = [
        ExecutorRun(
            executor_id=agent, agent=agent, received=list(got), produced=list(made), tools=tools
        )
        for agent, got, made, tools in recorded
    ]
    output = final_answer(row.conversation or [])
    if not output:
        output = final_answer([m for turn in turns for m in turn.produced])
    return WorkflowRun(
        query_index=query_index,
        repetition=repetition,
        query=row.query,
        workflow="recorded",
        executors=turns,
        output=output,
    )
