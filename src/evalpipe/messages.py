"""Messages, their content kinds and tool definitions, with the OpenAI chat-completions conversions.

The shapes follow Microsoft Agent Framework's ``Message``/``Content`` model so MAF users' code and
JSON round-trip unchanged: ``Message("user", ["hi"])`` and
``Message.model_validate({"role": "user", "contents": [{"type": "text", "text": "hi"}]})`` both work.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    create_model,
    field_validator,
    model_validator,
)

__all__ = [
    "Content",
    "DataContent",
    "FunctionCallContent",
    "FunctionResultContent",
    "Message",
    "TextContent",
    "ToolDefinition",
    "UriContent",
    "messages_from_openai",
    "messages_to_openai",
]


# Every attribute of MAF's ``Content`` (agent-framework-core 1.23.0). MAF has one content class whose
# instances carry every kind's attributes, None where a kind has none, so code written for MAF
# reads any of them on any content: a splitter testing ``c.name`` on every content of a message.
_MAF_CONTENT_ATTRIBUTES: dict[str, Any] = dict.fromkeys(
    (
        "acknowledged_safety_checks",
        "actions",
        "annotations",
        "approved",
        "arguments",
        "call_id",
        "commands",
        "consent_link",
        "error_code",
        "error_details",
        "exception",
        "exit_code",
        "file_id",
        "function_call",
        "hosted",
        "id",
        "image_id",
        "inputs",
        "items",
        "max_output_length",
        "media_type",
        "merge_mode",
        "message",
        "name",
        "output",
        "outputs",
        "pending_safety_checks",
        "protected_data",
        "raw_representation",
        "result",
        "screenshot",
        "server_name",
        "status",
        "stderr",
        "stdout",
        "text",
        "timed_out",
        "timeout_ms",
        "tool_name",
        "uri",
        "usage_details",
        "user_input_request",
        "vector_store_id",
    )
) | {"informational_only": False}


class _WithExtras(BaseModel):
    """A model with MAF's ``additional_properties``: extra data carried with the object (a MAF
    object's are kept when it is converted), held in memory, never serialized."""

    model_config = ConfigDict(extra="forbid")

    @property
    def additional_properties(self) -> dict[str, Any]:
        """Extra data carried with the object (MAF's ``additional_properties``)."""
        props: dict[str, Any] = self.__dict__.setdefault("additional_properties", {})
        return props


class _ContentBase(_WithExtras):
    """What the content kinds share: MAF ``Content``'s attribute set and ``parse_arguments``.

    A kind's own fields are ordinary pydantic fields (read at full speed); any other attribute of
    MAF's ``Content`` answers MAF's value for that kind (None, ``informational_only`` False,
    ``additional_properties`` a dict kept with the content but never serialized). Other names
    are still an ``AttributeError``.
    """

    _MAF_DEFAULTS: ClassVar[dict[str, Any]] = _MAF_CONTENT_ATTRIBUTES

    if not TYPE_CHECKING:
        # Only reached when normal lookup fails, so fields cost nothing extra; hidden from type
        # checkers so evalpipe's own code keeps strict attribute checking.
        def __getattr__(self, name: str) -> Any:
            defaults = type(self)._MAF_DEFAULTS
            if name in defaults:
                return defaults[name]
            return super().__getattr__(name)

    def parse_arguments(self) -> dict[str, Any] | None:
        """MAF's ``Content.parse_arguments``: None without arguments, ``{}`` for empty ones, a
        JSON object as a dict, any other value as ``{"raw": value}``."""
        args = getattr(self, "arguments", None)
        if args is None:
            return None
        if not args:
            return {}
        if isinstance(args, str):
            try:
                loaded = json.loads(args)
            except ValueError:
                return {"raw": args}
            return loaded if isinstance(loaded, dict) else {"raw": loaded}
        return dict(args)


class TextContent(_ContentBase):
    """Plain text written by any role."""

    type: Literal["text"] = "text"
    text: str
    """The text itself."""


class FunctionCallContent(_ContentBase):
    """A tool call requested by the assistant."""

    _MAF_DEFAULTS: ClassVar[dict[str, Any]] = _MAF_CONTENT_ATTRIBUTES | {"hosted": False}

    type: Literal["function_call"] = "function_call"
    name: str
    """The tool's name (case-sensitive)."""
    arguments: dict[str, Any] | str | None = None
    """Arguments as a dict, the raw JSON string the model produced, or None."""
    call_id: str = ""
    """Identifier pairing this call with its function_result."""

    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments as a dict: None becomes {}, unparseable or non-object JSON becomes None."""
        args = self.arguments
        if args is None:
            return {}
        if isinstance(args, Mapping):
            return dict(args)
        text = args.strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


class FunctionResultContent(_ContentBase):
    """The result of a tool call, sent back to the model."""

    type: Literal["function_result"] = "function_result"
    call_id: str = ""
    """The call this result answers."""
    result: Any = None
    """The tool's output: any JSON-compatible value or a string."""


class DataContent(_ContentBase):
    """Inline binary data (for example an image) as a data: URI."""

    type: Literal["data"] = "data"
    uri: str
    """A ``data:`` URI holding the bytes."""
    media_type: str | None = None
    """MIME type such as ``image/png``."""


class UriContent(_ContentBase):
    """A reference to external content (for example an image URL)."""

    type: Literal["uri"] = "uri"
    uri: str
    """Where the content lives."""
    media_type: str | None = None
    """MIME type such as ``image/jpeg``."""


Content = Annotated[
    TextContent | FunctionCallContent | FunctionResultContent | DataContent | UriContent,
    Field(discriminator="type"),
]
"""One part of a message; the ``type`` field tells the kind."""

_CONTENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(Content)


def user_message(text: str) -> Message:
    """``Message("user", [text])``: a query as the target is given it."""
    return Message("user", [TextContent(text=text)] if type(text) is str else [text])


_CONTENT_TYPES = (TextContent, FunctionCallContent, FunctionResultContent, DataContent, UriContent)
_CONTENT_TYPE_SET = frozenset(_CONTENT_TYPES)
_PLAIN_CONTENTS = _CONTENT_TYPE_SET | {str}
"""What a message's contents list holds when each value is a content or its text (most often)."""
_CONTENT_BY_TYPE: dict[str, type[BaseModel]] = {
    model.model_fields["type"].default: model for model in _CONTENT_TYPES
}


# Keys MAF's ``to_dict()`` writes that carry nothing an evaluator reads; dropped on input so a
# conversation MAF serialised loads as it is, while any other unknown key is still an error.
_MAF_BOOKKEEPING = frozenset(
    {
        "additional_properties",
        "annotations",
        "raw_representation",
        "hosted",
        "items",
        "exception",
        "informational_only",
        "protected_data",
        "merge_mode",
    }
)
# MAF content kinds with no evalpipe counterpart (usage, reasoning, hosted tools, approvals, ...):
# not part of the conversation an evaluator reads, so they are left out.
_FOREIGN_ONLY_KINDS = frozenset(
    {
        "text_reasoning",
        "error",
        "usage",
        "hosted_file",
        "hosted_vector_store",
        "code_interpreter_tool_call",
        "code_interpreter_tool_result",
        "image_generation_tool_call",
        "image_generation_tool_result",
        "mcp_server_tool_call",
        "mcp_server_tool_result",
        "search_tool_call",
        "search_tool_result",
        "shell_tool_call",
        "shell_tool_result",
        "shell_command_output",
        "computer_tool_call",
        "computer_tool_result",
        "function_approval_request",
        "function_approval_response",
        "oauth_consent_request",
    }
)


def _keep_maf_extras(source: Any, target: BaseModel) -> None:
    """Carry a MAF object's ``additional_properties`` (and a message's ``message_id``) over to the
    evalpipe object converted from it, where the MAF-compatible properties read them."""
    props = getattr(source, "additional_properties", None)
    if isinstance(props, Mapping) and props:
        target.__dict__["additional_properties"] = dict(props)
    message_id = getattr(source, "message_id", None)
    if isinstance(message_id, str) and isinstance(target, Message):
        target.__dict__["message_id"] = message_id


def _coerce_content(value: Any) -> Any:
    """Turn a str, a dict, or a foreign content object (MAF's ``Content``) into our content model.

    Returns None for a foreign object of a kind evalpipe does not model (it is left out).
    """
    if isinstance(value, _CONTENT_TYPES):
        return value
    if isinstance(value, str):
        return TextContent(text=value)
    if isinstance(value, Mapping):
        raw = dict(value)
        raw_kind = raw.get("type")
        if raw_kind in _FOREIGN_ONLY_KINDS:
            return None
        if raw_kind in _CONTENT_BY_TYPE:
            for key in _MAF_BOOKKEEPING & raw.keys():
                del raw[key]
        return _CONTENT_ADAPTER.validate_python(raw)
    kind = getattr(value, "type", None)
    kind = getattr(kind, "value", kind)
    model = _CONTENT_BY_TYPE.get(kind) if isinstance(kind, str) else None
    if model is not None:
        data = {key: getattr(value, key, None) for key in model.model_fields}
        data = {key: v for key, v in data.items() if v is not None} | {"type": kind}
        content = model.model_validate(data)
        _keep_maf_extras(value, content)
        return content
    if isinstance(kind, str):
        # A foreign content kind with no evalpipe counterpart (MAF's usage, text_reasoning,
        # hosted_file, ...): not part of the conversation an evaluator reads.
        return None
    raise ValueError(
        f"cannot use {type(value).__name__} as message content: expected a str, a dict with a "
        "'type' key (text, function_call, function_result, data, uri) or a content object"
    )


class Message(_WithExtras):
    """One chat message: a role and an ordered list of contents.

    Roles are kept as given (``"User"`` is not ``"user"``), as in MAF.
    """

    role: str
    """``user``, ``assistant``, ``system``, ``developer`` or ``tool``."""
    contents: list[Content] = Field(default_factory=list)
    """The parts of the message in order."""
    author_name: str | None = None
    """The agent or participant that wrote this message, when known."""

    def __init__(
        self,
        role: str | None = None,
        contents: Sequence[Any] | str | None = None,
        /,
        **data: Any,
    ) -> None:
        if role is not None:
            data["role"] = role
        if contents is not None:
            data["contents"] = contents
        super().__init__(**data)

    @model_validator(mode="before")
    @classmethod
    def _from_maf(cls, value: Any) -> Any:
        # MAF's Message.to_dict() adds "type": "message", a message_id and additional_properties;
        # its older Role type wraps the string in `.value`.
        if type(value) is not dict and not isinstance(value, Mapping):
            return value
        if "type" in value and value["type"] == "message":
            value = {
                k: v
                for k, v in value.items()
                if k not in ("type", "message_id", "additional_properties", "raw_representation")
            }
        role = value.get("role")
        if role is not None and type(role) is not str:
            value = {**value, "role": getattr(role, "value", role)}
        return value

    @field_validator("contents", mode="before")
    @classmethod
    def _validate_contents(cls, value: Any) -> Any:
        if type(value) is list:
            if _CONTENT_TYPE_SET.issuperset(map(type, value)):
                return value
            if _PLAIN_CONTENTS.issuperset(map(type, value)):
                return [TextContent(text=c) if type(c) is str else c for c in value]
        if value is None:
            return []
        if isinstance(value, str | Mapping):
            value = [value]
        return [c for c in map(_coerce_content, value) if c is not None]

    @property
    def text(self) -> str:
        """The text contents joined with one space (MAF's ``Message.text``)."""
        contents = self.contents
        if len(contents) == 1:  # the common case, without a generator
            only = contents[0]
            return only.text if only.type == "text" else ""
        return " ".join(c.text for c in contents if c.type == "text")

    @property
    def message_id(self) -> str | None:
        """MAF's ``message_id``: the id a MAF message converted to this one had, else None."""
        value = self.__dict__.get("message_id")
        return value if isinstance(value, str) else None

    @property
    def raw_representation(self) -> Any:
        """MAF's ``raw_representation``: always None (the provider's raw object is not kept)."""
        return None

    @property
    def function_calls(self) -> list[FunctionCallContent]:
        """The tool calls this message carries."""
        return [c for c in self.contents if isinstance(c, FunctionCallContent)]

    @property
    def function_results(self) -> list[FunctionResultContent]:
        """The tool results this message carries."""
        return [c for c in self.contents if isinstance(c, FunctionResultContent)]

    @classmethod
    def coerce(cls, value: Any) -> Message:
        """Accept a Message, its JSON dict, or any object with ``role`` and ``contents`` (MAF's)."""
        if isinstance(value, Message):
            return value
        if isinstance(value, Mapping):
            return cls.model_validate(dict(value))
        role = getattr(value, "role", None)
        if role is not None and hasattr(value, "contents"):
            author = getattr(value, "author_name", None)
            message = cls(
                role,
                list(getattr(value, "contents", None) or []),
                author_name=author if isinstance(author, str) else None,
            )
            _keep_maf_extras(value, message)
            return message
        raise TypeError(
            f"cannot use {type(value).__name__} as a message: expected evalpipe.Message, a dict "
            "with 'role' and 'contents', or an object with .role and .contents"
        )

    def to_openai(self) -> list[dict[str, Any]]:
        """This message as OpenAI chat-completions messages (a tool result becomes a ``tool`` message)."""
        results = self.function_results
        if results:
            return [
                {"role": "tool", "tool_call_id": r.call_id, "content": _result_to_text(r.result)}
                for r in results
            ]
        out: dict[str, Any] = {"role": self.role}
        parts: list[dict[str, Any]] = []
        for c in self.contents:
            if isinstance(c, TextContent):
                parts.append({"type": "text", "text": c.text})
            elif isinstance(c, DataContent | UriContent):
                parts.append({"type": "image_url", "image_url": {"url": c.uri}})
        if parts and all(p["type"] == "text" for p in parts):
            out["content"] = " ".join(p["text"] for p in parts)
        elif parts:
            out["content"] = parts
        else:
            out["content"] = None if self.function_calls else ""
        calls = self.function_calls
        if calls:
            out["tool_calls"] = [
                {
                    "id": c.call_id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.arguments
                        if isinstance(c.arguments, str)
                        else json.dumps(c.arguments or {}),
                    },
                }
                for c in calls
            ]
        if self.author_name and self.role in ("user", "assistant", "system"):
            out["name"] = self.author_name
        return [out]

    @classmethod
    def from_openai(cls, message: Mapping[str, Any]) -> Message:
        """One OpenAI chat-completions message (dict) as a Message.

        Raises:
            ValueError: when the dict is not a chat-completions message; the text names the field.
        """
        role = message.get("role")
        if not isinstance(role, str):
            raise ValueError(f"OpenAI message has no string 'role': {dict(message)!r}")
        content = message.get("content")
        if role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            return cls(role, [FunctionResultContent(call_id=call_id, result=content)])
        contents: list[Any] = []
        if isinstance(content, str):
            if content:
                contents.append(TextContent(text=content))
        elif isinstance(content, list):
            for part in content:
                kind = part.get("type") if isinstance(part, Mapping) else None
                if kind == "text":
                    contents.append(TextContent(text=str(part.get("text", ""))))
                elif kind == "image_url":
                    image = part.get("image_url") or {}
                    url = image.get("url", "") if isinstance(image, Mapping) else str(image)
                    contents.append(_uri_content(url))
                else:
                    raise ValueError(f"unsupported OpenAI content part type {kind!r}")
        elif content is not None:
            raise ValueError(
                f"OpenAI message 'content' must be a string or a list, got {content!r}"
            )
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            contents.append(
                FunctionCallContent(
                    name=str(function.get("name", "")),
                    arguments=function.get("arguments"),
                    call_id=str(call.get("id") or ""),
                )
            )
        name = message.get("name")
        return cls(role, contents, author_name=name if isinstance(name, str) else None)


def _uri_content(url: str) -> DataContent | UriContent:
    if url.startswith("data:"):
        media_type = url[5:].split(";", 1)[0].split(",", 1)[0] or None
        return DataContent(uri=url, media_type=media_type)
    return UriContent(uri=url)


def _result_to_text(result: Any) -> str:
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    return json.dumps(result, default=str)


def messages_to_openai(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Messages as an OpenAI chat-completions ``messages`` array."""
    return [wire for m in messages for wire in m.to_openai()]


def messages_from_openai(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """An OpenAI chat-completions ``messages`` array as Messages.

    Raises:
        ValueError: naming the index of the first message that is not valid.
    """
    out: list[Message] = []
    for index, message in enumerate(messages):
        try:
            out.append(Message.from_openai(message))
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"messages[{index}]: {exc}") from exc
    return out


class ToolDefinition(BaseModel):
    """A schema-only snapshot of a tool: what an evaluator sees, never the callable itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """The tool's name as the model calls it."""
    description: str = ""
    """What the tool does, as shown to the model."""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON schema of the tool's input."""

    def __init__(
        self,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        /,
        **data: Any,
    ) -> None:
        if name is not None:
            data["name"] = name
        if description is not None:
            data["description"] = description
        if parameters is not None:
            data["parameters"] = dict(parameters)
        super().__init__(**data)

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, name: str | None = None) -> ToolDefinition:
        """Snapshot a Python function: its name, docstring and a JSON schema of its parameters."""
        sig = inspect.signature(fn)
        fields: dict[str, Any] = {}
        for pname, param in sig.parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            annotation = Any if param.annotation is param.empty else param.annotation
            default = ... if param.default is param.empty else param.default
            fields[pname] = (annotation, default)
        tool_name = name or getattr(fn, "__name__", "tool")
        model = create_model(f"{tool_name}_input", **fields)
        return cls(
            name=tool_name,
            description=inspect.getdoc(fn) or "",
            parameters=model.model_json_schema(),
        )

    @classmethod
    def coerce(cls, tool: Any) -> ToolDefinition:
        """Snapshot any tool: a ToolDefinition, a dict (plain or OpenAI ``{"type": "function"}``),
        an object with ``name``/``description``/``parameters`` (MAF's FunctionTool), or a function.
        """
        if isinstance(tool, ToolDefinition):
            return tool
        if isinstance(tool, Mapping):
            spec = tool.get("function") if tool.get("type") == "function" else tool
            if not isinstance(spec, Mapping) or "name" not in spec:
                raise ValueError(f"tool definition needs a 'name': {dict(tool)!r}")
            return cls(
                name=spec["name"],
                description=spec.get("description") or "",
                parameters=dict(spec.get("parameters") or {"type": "object", "properties": {}}),
            )
        name = getattr(tool, "name", None)
        if isinstance(name, str) and hasattr(tool, "parameters"):
            params = tool.parameters
            if callable(params):
                params = params()
            return cls(
                name=name,
                description=getattr(tool, "description", "") or "",
                parameters=json.loads(json.dumps(dict(params or {}))),
            )
        if callable(tool):
            return cls.from_function(tool)
        raise TypeError(
            f"cannot snapshot {type(tool).__name__} as a tool: expected a ToolDefinition, a dict "
            "with 'name', an object with .name and .parameters, or a Python function"
        )
