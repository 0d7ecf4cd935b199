"""EvalItem: one conversation to evaluate, how it splits into query and response, and what was expected.

Split rules and the query/response strings mirror MAF exactly (shared spec §3): LAST_TURN splits at the
last user message, FULL at the first; ``query`` joins the user texts of the query side and
``response`` the assistant texts of the response side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalpipe.messages import DataContent, FunctionCallContent, Message, ToolDefinition, UriContent
from evalpipe.transcripts import RunUsage

__all__ = [
    "AgentExpectation",
    "ConversationSplit",
    "ConversationSplitter",
    "EvalItem",
    "ExpectedToolCall",
    "split_full",
    "split_last_turn",
]

Split = tuple[list[Message], list[Message]]


@runtime_checkable
class ConversationSplitter(Protocol):
    """Any callable ``conversation -> (query_messages, response_messages)``."""

    def __call__(self, conversation: list[Message]) -> Split: ...


def _last_user(conversation: Sequence[Message]) -> int:
    for i in range(len(conversation) - 1, -1, -1):
        if conversation[i].role == "user":
            return i
    return -1


def _first_user(conversation: Sequence[Message]) -> int:
    for i, message in enumerate(conversation):
        if message.role == "user":
            return i
    return -1


def split_last_turn(conversation: Sequence[Message]) -> Split:
    """Split at the last user message: it and everything before is the query side."""
    conv = list(conversation)
    cut = _last_user(conv) + 1
    return conv[:cut], conv[cut:]


def split_full(conversation: Sequence[Message]) -> Split:
    """Split at the first user message: the whole rest of the conversation is the response."""
    conv = list(conversation)
    cut = _first_user(conv) + 1
    return conv[:cut], conv[cut:]


class ConversationSplit(str, Enum):  # noqa: UP042 - str() and repr() as MAF's
    """The built-in split strategies; each member is itself a splitter (callable)."""

    LAST_TURN = "last_turn"
    """Evaluate the answer to the latest user turn; earlier turns are context."""
    FULL = "full"
    """Evaluate the whole trajectory after the first user message."""

    def __call__(self, conversation: list[Message]) -> Split:
        if self is ConversationSplit.FULL:
            return split_full(conversation)
        return split_last_turn(conversation)


_LAST_TURN = ConversationSplit.LAST_TURN
_FULL = ConversationSplit.FULL


def _joined(texts: list[str]) -> str:
    if len(texts) == 1:
        return texts[0].strip()
    return " ".join(texts).strip()


def _text_of(m: Message) -> str:
    """``m.text``, with a plain Message's common case (one content) read directly: the
    property's call costs more than the text itself, once per message of every item checked.
    A subclass keeps its own ``text``."""
    if type(m) is Message:
        contents = m.contents
        if len(contents) == 1:
            only = contents[0]
            return only.text if only.type == "text" else ""
    return m.text


def _texts(messages: Sequence[Message], role: str) -> str:
    """The texts of ``role``'s messages, joined with spaces (the query or the response string)."""
    return _joined([text for m in messages if m.role == role and (text := _text_of(m))])


def _split_texts(conv: Sequence[Message], cut: int) -> tuple[str, str]:
    """``(query, response)`` of a conversation cut at ``cut``."""
    return _texts(conv[:cut], "user"), _texts(conv[cut:], "assistant")


def _last_turn_response(conv: Sequence[Message]) -> tuple[int, str]:
    """``(cut, response)`` of a conversation split at its last user message, in one pass from the
    end: the assistant texts after the cut are read on the way to it."""
    response: list[str] = []
    cut = len(conv)
    while cut:
        m = conv[cut - 1]
        role = m.role
        if role == "user":
            break
        cut -= 1
        if role == "assistant" and (text := _text_of(m)):
            response.append(text)
    response.reverse()
    return cut, _joined(response)


class ExpectedToolCall(BaseModel):
    """A tool call the agent is expected to make; ``arguments=None`` means "don't check arguments"."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """The tool's name."""
    arguments: dict[str, Any] | None = None
    """Expected arguments (a top-level subset match), or None to check the name only."""

    def __init__(
        self, name: str | None = None, arguments: dict[str, Any] | None = None, /, **data: Any
    ) -> None:
        if name is not None:
            data["name"] = name
        if arguments is not None:
            data["arguments"] = arguments
        super().__init__(**data)


class AgentExpectation(BaseModel):
    """What one agent of a workflow is expected to produce for one query (dataset row)."""

    model_config = ConfigDict(extra="forbid")

    expected_output: str | None = None
    """The agent's reference answer."""
    expected_tool_calls: list[ExpectedToolCall] | None = None
    """Tool calls the agent should make."""


_POSITIONAL = (
    "conversation",
    "tools",
    "context",
    "expected_output",
    "expected_tool_calls",
    "split_strategy",
)
"""EvalItem's positional parameters, in MAF's order."""
_MESSAGES = frozenset({Message})
_TOOLS = frozenset({ToolDefinition})
_EXPECTED = frozenset({ExpectedToolCall})


def _all_of(kind: frozenset[type], value: Any) -> bool:
    """``value`` is a list of instances of exactly the one type in ``kind``: what validation
    makes of it already (the common case, without a Python call per element)."""
    return type(value) is list and kind.issuperset(map(type, value))


class EvalItem(BaseModel):
    """One conversation to evaluate, with what was expected of it.

    ``query`` and ``response`` are derived from the conversation through the split strategy, on
    every access (as MAF).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    conversation: list[Message] = Field(default_factory=list)
    """The full conversation: user input, assistant turns, tool calls and results."""
    tools: list[ToolDefinition] | None = None
    """Schema-only snapshots of the tools the agent could call (None: unknown / not captured)."""
    context: str | None = None
    """Grounding context for evaluators that need it."""
    expected_output: str | None = None
    """The reference answer."""
    expected_tool_calls: list[ExpectedToolCall] | None = None
    """The tool calls the agent should make."""
    split_strategy: Any = Field(default=None, exclude=True)
    """The item's own splitter (a ConversationSplit member or a callable); None means LAST_TURN."""

    item_id: str | None = None
    """Stable identifier, used for the item's results."""
    query_index: int | None = None
    """Index of the query (dataset row) this item came from."""
    repetition: int | None = None
    """Which repetition of the query produced this item (0-based)."""
    agent: str | None = None
    """The agent whose behaviour this item holds (a workflow executor), or None for a single agent."""
    usage: RunUsage | None = None
    """Tokens and latency of the target call that produced the conversation."""
    error_code: str | None = None
    """Set when the target call failed (e.g. "AgentError"); evaluators then report the item errored."""
    error_message: str | None = None
    """What went wrong in the target call."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form extra data (dataset tags, ids) carried into the results."""

    def __init__(
        self,
        conversation: Sequence[Any] | None = None,
        tools: Sequence[Any] | None = None,
        context: str | None = None,
        expected_output: str | None = None,
        expected_tool_calls: Sequence[Any] | None = None,
        split_strategy: Any = None,
        /,
        **data: Any,
    ) -> None:
        given = (conversation, tools, context, expected_output, expected_tool_calls, split_strategy)
        for key, value in zip(_POSITIONAL, given, strict=True):
            if value is not None:
                data[key] = value
        super().__init__(**data)

    @field_validator("conversation", mode="before")
    @classmethod
    def _coerce_conversation(cls, value: Any) -> Any:
        if _all_of(_MESSAGES, value):
            return value
        if value is None:
            return []
        return [Message.coerce(m) for m in value]

    @field_validator("tools", mode="before")
    @classmethod
    def _snapshot_tools(cls, value: Any) -> Any:
        if value is None or _all_of(_TOOLS, value):
            return value
        return [ToolDefinition.coerce(t) for t in value]

    @field_validator("expected_tool_calls", mode="before")
    @classmethod
    def _coerce_expected(cls, value: Any) -> Any:
        if value is None or _all_of(_EXPECTED, value):
            return value
        return [
            v
            if isinstance(v, ExpectedToolCall)
            else ExpectedToolCall.model_validate(dict(v))
            if isinstance(v, Mapping)
            else ExpectedToolCall(v)
            if isinstance(v, str)
            else v
            for v in value
        ]

    @field_validator("split_strategy")
    @classmethod
    def _check_splitter(cls, value: Any) -> Any:
        if value is not None and not callable(value):
            raise ValueError(
                "split_strategy must be a ConversationSplit member or a callable "
                f"conversation -> (query_messages, response_messages), got {value!r}"
            )
        return value

    def _resolve(self, split: Callable[..., Split] | None) -> tuple[Split | int, str, str]:
        """(the split, query, response) for ``split`` or the item's strategy.

        The split is the cut index for the built-in strategies (the message lists are made only
        when asked for) and the splitter's own lists for a custom one.
        """
        splitter = split or self.split_strategy or _LAST_TURN
        conv = self.conversation
        if splitter is _LAST_TURN:
            cut, response = _last_turn_response(conv)
            return cut, _texts(conv[:cut], "user"), response
        if splitter is _FULL:
            cut = _first_user(conv) + 1
            return (cut, *_split_texts(conv, cut))
        query_msgs, response_msgs = splitter(conv)
        result = (list(query_msgs), list(response_msgs))
        return (result, *_split_texts([*result[0], *result[1]], len(result[0])))

    def result_metadata(self) -> dict[str, Any] | None:
        """What every provider's result for this item carries from it: query index, repetition,
        agent, and the item's own metadata (dataset row id, tags, ...); None when there is none."""
        if (
            self.query_index is None
            and self.repetition is None
            and self.agent is None
            and not self.metadata
        ):
            return None  # the common case of a bare item, without building a dict
        fields = {
            "query_index": self.query_index,
            "repetition": self.repetition,
            "agent": self.agent,
        }
        meta = {key: value for key, value in fields.items() if value is not None}
        return {**meta, **self.metadata} or None

    def query_and_response(self) -> tuple[str, str]:
        """``(query, response)`` under the item's own split, computed once."""
        _, query, response = self._resolve(None)
        return query, response

    def split_messages(self, split: Callable[..., Split] | None = None) -> Split:
        """Split the conversation: ``split`` if given, else the item's strategy, else LAST_TURN."""
        result, _, _ = self._resolve(split)
        if isinstance(result, int):
            conv = self.conversation
            return conv[:result], conv[result:]
        return list(result[0]), list(result[1])

    @property
    def query(self) -> str:
        """The user texts on the query side, joined with spaces."""
        return self._resolve(None)[1]

    @property
    def response(self) -> str:
        """The assistant texts on the response side, joined with spaces."""
        if (self.split_strategy or _LAST_TURN) is _LAST_TURN:
            return _last_turn_response(self.conversation)[1]  # the query side is not read
        return self._resolve(None)[2]

    @property
    def has_image_content(self) -> bool:
        """Whether any message carries an image (data or uri content with an image media type)."""
        return any(
            (c.media_type or "").startswith("image/") or c.uri.startswith("data:image/")
            for m in self.conversation
            for c in m.contents
            if isinstance(c, DataContent | UriContent)
        )

    @property
    def function_calls(self) -> list[FunctionCallContent]:
        """Every tool call in the whole conversation, in order."""
        return [c for m in self.conversation for c in m.contents if c.type == "function_call"]

    @staticmethod
    def _split_last_turn_static(conversation: list[Message]) -> Split:
        """LAST_TURN, for custom splitters that fall back to it (MAF's name)."""
        return split_last_turn(conversation)

    @staticmethod
    def per_turn_items(
        conversation: Sequence[Any],
        *,
        tools: Sequence[Any] | None = None,
        context: str | None = None,
    ) -> list[EvalItem]:
        """One item per user message, each holding the conversation up to the next user message."""
        conv = [Message.coerce(m) for m in conversation]
        users = [i for i, m in enumerate(conv) if m.role == "user"]
        ends = [*users[1:], len(conv)] if users else []
        return [
            EvalItem(
                conv[:end], None if tools is None else list(tools), context, metadata={"turn": k}
            )
            for k, end in enumerate(ends)
        ]
