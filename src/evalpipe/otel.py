"""OpenTelemetry GenAI traces: what agents did in production, rebuilt per agent and evaluated.

Reads an OTLP/JSON export (one file, or a directory of ``.json`` / ``.jsonl`` files) of spans that
follow the OpenTelemetry GenAI semantic conventions (``invoke_agent``, ``chat`` and ``execute_tool``
spans, as Microsoft Agent Framework and other frameworks emit them). Each trace becomes a
:class:`TraceTranscript`: one :class:`AgentTurn` per ``invoke_agent`` span in start order, the user
query and the whole conversation. :func:`trace_items` gives per-agent and overall items,
:func:`trace_rows` dataset rows (``recorded_agents``) that ``evalpipe run`` evaluates. A missing or
partial attribute never raises: it is a :class:`TraceDiagnostic` naming the trace and span. The
attributes read and the fallbacks: docs/production-traffic.md#opentelemetry-genai-traces.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evalpipe.itemize import WorkflowItems, build_workflow_items, merge_tool_snapshots
from evalpipe.messages import (
    DataContent,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    TextContent,
    ToolDefinition,
    UriContent,
)
from evalpipe.recorded import final_answer
from evalpipe.transcripts import ExecutorRun, RunUsage, WorkflowRun, sum_usage

__all__ = [
    "AgentTurn",
    "OtelError",
    "OtelTraces",
    "Span",
    "TraceDiagnostic",
    "TraceTranscript",
    "genai_messages",
    "read_otel_traces",
    "read_spans",
    "trace_items",
    "trace_rows",
    "trace_workflow_runs",
]

logger = logging.getLogger("evalpipe.otel")


class OtelError(ValueError):
    """An export that cannot be read at all (not JSON, not OTLP); the message names the file."""


@dataclass(frozen=True, slots=True)
class TraceDiagnostic:
    """Something missing or unreadable in a trace, and what was done about it."""

    message: str
    trace_id: str = ""
    span_id: str = ""
    source: str = ""
    """The file (and line, for JSON Lines) the span came from."""

    @classmethod
    def at(cls, span: Span, message: str) -> TraceDiagnostic:
        """A diagnostic about ``span``."""
        return cls(message, span.trace_id, span.span_id, span.source)

    def __str__(self) -> str:
        ids = ((k, v) for k, v in (("trace", self.trace_id), ("span", self.span_id)) if v)
        where = " ".join(f"{k} {v}" for k, v in ids)
        return "".join(f"{part}: " for part in (self.source, where) if part) + self.message


@dataclass(slots=True)
class Span:
    """One span of the export, with its attributes decoded to Python values."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start: int
    end: int
    attributes: dict[str, Any]
    source: str
    status_code: int = 0
    status_message: str = ""

    @property
    def operation(self) -> str:
        """``gen_ai.operation.name``, else the span name's first word."""
        op = self.attributes.get("gen_ai.operation.name")
        return op if isinstance(op, str) and op else self.name.split(" ", 1)[0]


@dataclass(slots=True)
class AgentTurn:
    """One ``invoke_agent`` span: an agent's turn, as recorded."""

    agent: str
    span_id: str
    parent_agent_span: str | None
    """The span id of the agent turn this one ran under (None: a top-level turn)."""
    path: str
    """Agent names from the top-level turn down to this one, joined with ``/``."""
    received: list[Message] = field(default_factory=list)
    """System instructions (as a system message) and the input messages."""
    produced: list[Message] = field(default_factory=list)
    """Output messages: tool calls, tool results, the answer."""
    tools: list[ToolDefinition] | None = None
    usage: RunUsage = field(default_factory=RunUsage)
    error: str | None = None
    """The span's error status message, when it ended in error."""
    tool_runs: list[dict[str, Any]] = field(default_factory=list)
    """The turn's ``execute_tool`` spans: ``{"name", "call_id", "arguments", "result", "span_id"}``."""


@dataclass(slots=True)
class TraceTranscript:
    """One trace: its agents' turns in start order, the user query and the whole conversation."""

    trace_id: str
    turns: list[AgentTurn]
    query: str
    conversation: list[Message]
    """The first top-level agent's input, then every top-level agent's output, in order."""
    output: list[Message]
    """The final answer: the last top-level agent's last assistant message with text."""
    usage: RunUsage
    source: str


@dataclass(slots=True)
class OtelTraces:
    """What an export held: the rebuilt traces and every diagnostic met on the way."""

    traces: list[TraceTranscript]
    diagnostics: list[TraceDiagnostic]
    spans: int = 0
    """How many spans were read."""


# ---------------------------------------------------------------------------------------------
# reading OTLP/JSON


def _any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value."""
    if not isinstance(value, Mapping):
        return value
    kind = next((k for k in _ANY_VALUES if k in value), None)
    return _ANY_VALUES[kind](value[kind]) if kind is not None else None


_ANY_VALUES: dict[str, Callable[[Any], Any]] = {
    "stringValue": lambda v: v,
    "boolValue": bool,
    "intValue": lambda v: _int(v, v),
    "doubleValue": float,
    "arrayValue": lambda v: [_any_value(x) for x in (v or {}).get("values", [])],
    "kvlistValue": lambda v: _attributes((v or {}).get("values", [])),
    "bytesValue": lambda v: v,
}


def _attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        if isinstance(item, Mapping) and isinstance(item.get("key"), str):
            out[item["key"]] = _any_value(item.get("value"))
    return out


def _span_id(value: Any, size: int) -> str:
    """An id as lower-case hex: OTLP/JSON writes hex; protobuf's generic JSON writes base64."""
    if not isinstance(value, str) or not value:
        return ""
    text = value.strip()
    if len(text) == size * 2 and all(c in "0123456789abcdefABCDEF" for c in text):
        return text.lower()
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return text
    return raw.hex() if len(raw) == size else text


def _int(value: Any, default: Any = 0) -> Any:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _spans_of(request: Any, source: str, diagnostics: list[TraceDiagnostic]) -> Iterator[Span]:
    if not isinstance(request, Mapping) or "resourceSpans" not in request:
        diagnostics.append(
            TraceDiagnostic("not an OTLP traces export (no resourceSpans); skipped", source=source)
        )
        return
    for resource in request.get("resourceSpans") or []:
        for scope in (resource or {}).get("scopeSpans") or []:
            for raw in (scope or {}).get("spans") or []:
                if not isinstance(raw, Mapping):
                    continue
                status = raw.get("status") or {}
                code = status.get("code", 0)
                if isinstance(code, str):
                    code = 2 if code.endswith("ERROR") else 1 if code.endswith("OK") else 0
                yield Span(
                    trace_id=_span_id(raw.get("traceId"), 16),
                    span_id=_span_id(raw.get("spanId"), 8),
                    parent_id=_span_id(raw.get("parentSpanId"), 8),
                    name=str(raw.get("name") or ""),
                    start=_int(raw.get("startTimeUnixNano")),
                    end=_int(raw.get("endTimeUnixNano")),
                    attributes=_attributes(raw.get("attributes")),
                    source=source,
                    status_code=_int(code),
                    status_message=str(status.get("message") or ""),
                )


def read_spans(path: str | Path) -> tuple[list[Span], list[TraceDiagnostic]]:
    """Every span of an OTLP/JSON export: a ``.json`` file holding one export request, a ``.jsonl``
    file with one request per line (the OpenTelemetry Collector's file exporter), or a directory
    of such files (read recursively, in name order).

    Raises:
        OtelError: for a path that does not exist, or a directory without export files.
    """
    root = Path(path)
    if not root.exists():
        raise OtelError(f"{root}: no such file or directory; pass an OTLP/JSON export")
    files = [root]
    if root.is_dir():
        files = sorted(
            p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in (".json", ".jsonl")
        )
    if not files:
        raise OtelError(f"{root}: no .json or .jsonl files in this directory")
    spans: list[Span] = []
    diagnostics: list[TraceDiagnostic] = []
    for file in files:
        text = file.read_text(encoding="utf-8")
        try:
            documents = [(str(file), json.loads(text))]
        except json.JSONDecodeError:
            documents = []
            for lineno, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    documents.append((f"{file}:{lineno}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    diagnostics.append(
                        TraceDiagnostic(
                            f"invalid JSON ({exc.msg}); line skipped", source=f"{file}:{lineno}"
                        )
                    )
        for source, document in documents:
            spans.extend(_spans_of(document, source, diagnostics))
    return spans, diagnostics


# ---------------------------------------------------------------------------------------------
# GenAI messages


def _json_attribute(span: Span, key: str, diagnostics: list[TraceDiagnostic]) -> Any:
    """A JSON-encoded attribute, parsed; None (with a diagnostic) when it does not parse."""
    value = span.attributes.get(key)
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        diagnostics.append(TraceDiagnostic.at(span, f"{key} is not valid JSON; ignored"))
        return None


def _part(part: Mapping[str, Any]) -> Any:
    kind = part.get("type")
    if kind == "text":
        return TextContent(text=str(part.get("content") or ""))
    if kind == "tool_call":
        args = part.get("arguments")
        return FunctionCallContent(
            name=str(part.get("name") or ""),
            arguments=args if isinstance(args, dict | str) or args is None else json.dumps(args),
            call_id=str(part.get("id") or ""),
        )
    if kind == "tool_call_response":
        return FunctionResultContent(call_id=str(part.get("id") or ""), result=part.get("response"))
    if kind == "uri":
        return UriContent(uri=str(part.get("uri") or ""), media_type=part.get("mime_type"))
    if kind == "blob":
        mime = str(part.get("mime_type") or "application/octet-stream")
        return DataContent(uri=f"data:{mime};base64,{part.get('content') or ''}", media_type=mime)
    return None


def genai_messages(value: Any) -> tuple[list[Message], list[str]]:
    """GenAI semantic-convention messages (``{"role", "parts": [...]}``) as Messages.

    Returns:
        The messages, and the part types that were left out (``reasoning`` and unknown kinds).
    """
    messages: list[Message] = []
    skipped: list[str] = []
    for raw in value if isinstance(value, list) else []:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("role"), str):
            skipped.append("message without a role")
            continue
        contents = []
        for part in raw.get("parts") or []:
            content = _part(part) if isinstance(part, Mapping) else None
            if content is None:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                if kind != "reasoning":
                    skipped.append(str(kind))
                continue
            contents.append(content)
        name = raw.get("name")
        messages.append(
            Message(raw["role"], contents, author_name=name if isinstance(name, str) else None)
        )
    return messages, skipped


def _instructions(span: Span, diagnostics: list[TraceDiagnostic]) -> list[Message]:
    value = _json_attribute(span, "gen_ai.system_instructions", diagnostics)
    if isinstance(value, list):
        parts = [p for p in value if isinstance(p, Mapping) and p.get("type") == "text"]
        value = "\n".join(t for p in parts if (t := str(p.get("content") or "")))
    return [Message("system", [value])] if isinstance(value, str) and value else []


def _messages(span: Span, key: str, diagnostics: list[TraceDiagnostic]) -> list[Message] | None:
    if key not in span.attributes:
        return None
    value = _json_attribute(span, key, diagnostics)
    if value is None:
        return None
    messages, skipped = genai_messages(value)
    for kind in dict.fromkeys(skipped):
        diagnostics.append(TraceDiagnostic.at(span, f"{key}: left out a part of type {kind!r}"))
    return messages


def _tool_definitions(
    span: Span, diagnostics: list[TraceDiagnostic]
) -> list[ToolDefinition] | None:
    value = _json_attribute(span, "gen_ai.tool.definitions", diagnostics)
    if value is None:
        return None
    tools = []
    for raw in value if isinstance(value, list) else []:
        if isinstance(raw, Mapping) and "function" not in raw and "name" in raw:
            # the GenAI conventions' flat shape: {"type": "function", "name", "description", ...}
            raw = {k: v for k, v in raw.items() if k in ("name", "description", "parameters")}
        try:
            tools.append(ToolDefinition.coerce(raw))
        except (TypeError, ValueError) as exc:
            diagnostics.append(TraceDiagnostic.at(span, f"a tool definition was left out ({exc})"))
    return tools


def _usage(span: Span) -> RunUsage:
    def number(key: str) -> int | None:
        value = span.attributes.get(key)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

    inp, out = number("gen_ai.usage.input_tokens"), number("gen_ai.usage.output_tokens")
    latency = (span.end - span.start) / 1e9 if span.end > span.start else None
    return RunUsage(
        input_tokens=inp,
        output_tokens=out,
        total_tokens=inp + out if inp is not None and out is not None else None,
        latency_seconds=latency,
    )


# ---------------------------------------------------------------------------------------------
# traces -> agent turns


def _nearest_agent(span: Span, by_id: Mapping[str, Span], agents: set[str]) -> str | None:
    seen: set[str] = set()
    parent = span.parent_id
    while parent and parent in by_id and parent not in seen:
        if parent in agents:
            return parent
        seen.add(parent)
        parent = by_id[parent].parent_id
    return None


def _tool_run(span: Span) -> dict[str, Any]:
    a = span.attributes
    arguments = a.get("gen_ai.tool.call.arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments)
    return {
        "name": a.get("gen_ai.tool.name") or span.name.removeprefix("execute_tool ").strip(),
        "call_id": str(a.get("gen_ai.tool.call.id") or ""),
        "arguments": arguments,
        "result": a.get("gen_ai.tool.call.result"),
        "span_id": span.span_id,
    }


def _rebuild_produced(
    spans: Sequence[Span], runs: Mapping[str, dict[str, Any]], diagnostics: list[TraceDiagnostic]
) -> list[Message]:
    """An agent's output from its model calls and tool runs (``runs``, by span id), in order."""
    out: list[Message] = []
    for span in spans:
        if (run := runs.get(span.span_id)) is not None:
            result = FunctionResultContent(call_id=run["call_id"], result=run["result"])
            out.append(Message("tool", [result]))
        else:
            out.extend(_messages(span, "gen_ai.output.messages", diagnostics) or [])
    return out


def _turn(
    span: Span,
    children: Mapping[str, list[Span]],
    names: Mapping[str, str],
    parent: str | None,
    diagnostics: list[TraceDiagnostic],
) -> AgentTurn:
    def note(message: str, at: Span = span) -> None:
        diagnostics.append(TraceDiagnostic.at(at, message))

    mine = sorted(children.get(span.span_id, []), key=lambda c: c.start)
    chats = [c for c in mine if c.operation == "chat"]
    runs = {c.span_id: _tool_run(c) for c in mine if c.operation == "execute_tool"}
    received = _messages(span, "gen_ai.input.messages", diagnostics)
    if received is None:
        received = _messages(chats[0], "gen_ai.input.messages", diagnostics) if chats else None
        found = (
            "took the first chat span's input" if received is not None else "its input is unknown"
        )
        note(f"invoke_agent has no gen_ai.input.messages; {found}")
    produced = _messages(span, "gen_ai.output.messages", diagnostics)
    if produced is None:
        produced = _rebuild_produced(mine, runs, diagnostics)
        note(
            f"invoke_agent has no gen_ai.output.messages; rebuilt from {len(chats)} chat and "
            f"{len(runs)} execute_tool spans"
        )
    instructions = _instructions(span, diagnostics)
    if not instructions and chats:
        instructions = _instructions(chats[0], diagnostics)
    tools = _tool_definitions(span, diagnostics)
    for tool_span in (c for c in mine if c.span_id in runs):
        run = runs[tool_span.span_id]
        missing = [k for k in ("call_id", "arguments", "result") if run[k] in (None, "")]
        if missing:
            note(
                f"execute_tool {run['name']!r} has no "
                + ", ".join(f"gen_ai.tool.call.{'id' if k == 'call_id' else k}" for k in missing),
                tool_span,
            )
    return AgentTurn(
        agent=names[span.span_id],
        span_id=span.span_id,
        parent_agent_span=parent,
        path=names[span.span_id],
        received=[*instructions, *(received or [])],
        produced=produced,
        tools=tools,
        usage=_usage(span),
        error=span.status_message or "error" if span.status_code == 2 else None,
        tool_runs=list(runs.values()),
    )


def _agent_name(span: Span, diagnostics: list[TraceDiagnostic]) -> str:
    a = span.attributes
    name = a.get("gen_ai.agent.name")
    if isinstance(name, str) and name:
        return name
    fallback = a.get("gen_ai.agent.id")
    if not (isinstance(fallback, str) and fallback):
        fallback = span.name.partition(" ")[2].strip() or "agent"
    diagnostics.append(
        TraceDiagnostic.at(span, f"invoke_agent has no gen_ai.agent.name; named it {fallback!r}")
    )
    return str(fallback)


def _transcript(spans: list[Span], diagnostics: list[TraceDiagnostic]) -> TraceTranscript | None:
    trace_id = spans[0].trace_id
    by_id = {s.span_id: s for s in spans}
    agent_spans = sorted((s for s in spans if s.operation == "invoke_agent"), key=lambda s: s.start)
    if not agent_spans:
        if any(s.operation in ("chat", "execute_tool") for s in spans):
            diagnostics.append(
                TraceDiagnostic(
                    "has chat/execute_tool spans but no invoke_agent span; skipped",
                    trace_id,
                    source=spans[0].source,
                )
            )
        return None
    agent_ids = {s.span_id for s in agent_spans}
    owner: dict[str, list[Span]] = {}
    for span in spans:
        if span.operation in ("chat", "execute_tool"):
            agent = _nearest_agent(span, by_id, agent_ids)
            if agent is not None:
                owner.setdefault(agent, []).append(span)
    names = {s.span_id: _agent_name(s, diagnostics) for s in agent_spans}
    by_span: dict[str, AgentTurn] = {}
    for span in agent_spans:
        parent = _nearest_agent(span, by_id, agent_ids)
        turn = by_span[span.span_id] = _turn(span, owner, names, parent, diagnostics)
        if parent is not None and parent in by_span:
            turn.path = f"{by_span[parent].path}/{turn.agent}"
    turns = list(by_span.values())

    def note(turn: AgentTurn, message: str) -> None:
        diagnostics.append(TraceDiagnostic(message, trace_id, turn.span_id, spans[0].source))

    top = [t for t in turns if t.parent_agent_span is None]
    first = top[0]
    conversation = [*first.received, *(m for t in top for m in t.produced)]
    users = [m for m in first.received if m.role == "user" and m.text]
    query = users[-1].text if users else ""
    if not query:
        note(first, "the first agent received no user message with text; the query is empty")
    output = final_answer(top[-1].produced) or final_answer(conversation)
    if not output:
        note(top[-1], "no assistant answer with text; the output is empty")
    latency = (max(s.end for s in spans) - min(s.start for s in spans)) / 1e9 or None
    usage = sum_usage([t.usage for t in top], latency)
    return TraceTranscript(
        trace_id=trace_id,
        turns=turns,
        query=query,
        conversation=conversation,
        output=output,
        usage=usage,
        source=spans[0].source,
    )


def read_otel_traces(path: str | Path, *, log: bool = True) -> OtelTraces:
    """Read an OTLP/JSON export and rebuild every trace that has ``invoke_agent`` spans.

    A trace's spans may be spread over several files (an exporter's batches); a span exported twice
    is read once. Traces come in the order of their first span's start time. Missing or partial
    attributes never raise: each gap is a :class:`TraceDiagnostic`, also logged as a warning on the
    ``evalpipe.otel`` logger unless ``log`` is False.

    Raises:
        OtelError: for a path that does not exist or holds no export files.
    """
    spans, diagnostics = read_spans(path)
    by_trace: dict[str, dict[str, Span]] = {}
    for span in spans:
        if not span.trace_id or not span.span_id:
            no_ids = f"span {span.name!r} has no traceId/spanId; skipped"
            diagnostics.append(TraceDiagnostic(no_ids, source=span.source))
            continue
        group = by_trace.setdefault(span.trace_id, {})
        if span.span_id in group:
            twice = "exported more than once; the first copy is kept"
            diagnostics.append(TraceDiagnostic.at(span, twice))
        else:
            group[span.span_id] = span
    traces = []
    for group in sorted(by_trace.values(), key=lambda g: min(s.start for s in g.values())):
        transcript = _transcript(list(group.values()), diagnostics)
        if transcript is not None:
            traces.append(transcript)
    if log:
        for diagnostic in diagnostics:
            logger.warning("%s", diagnostic)
    return OtelTraces(traces=traces, diagnostics=diagnostics, spans=len(spans))


# ---------------------------------------------------------------------------------------------
# traces -> evaluation


def trace_workflow_runs(traces: Sequence[TraceTranscript]) -> list[WorkflowRun]:
    """One ``WorkflowRun`` per trace: an executor turn per agent turn (``executor_id`` is the turn's
    agent path, e.g. ``coordinator/researcher``), the final answer as output, ``query_index`` the
    trace's position."""
    return [
        WorkflowRun(
            query_index=index,
            repetition=0,
            query=trace.query,
            workflow=f"trace {trace.trace_id}",
            executors=[
                ExecutorRun(
                    executor_id=turn.path,
                    agent=turn.agent,
                    received=turn.received,
                    produced=turn.produced,
                    tools=turn.tools,
                    usage=turn.usage,
                    error_code="ExecutorError" if turn.error else None,
                    error_message=turn.error,
                )
                for turn in trace.turns
            ],
            output=trace.output,
            usage=trace.usage,
        )
        for index, trace in enumerate(traces)
    ]


def trace_items(traces: Sequence[TraceTranscript], **options: Any) -> WorkflowItems:
    """Per-agent items and an overall item per trace.

    ``options`` go to ``itemize.build_workflow_items`` (``upstream_context``, ``include_overall``,
    ``include_per_agent``, ``conversation_split``, expectations). Each item's metadata holds the
    trace id and, for per-agent items, the agent's span id.
    """

    def span(index: int, turn: ExecutorRun) -> dict[str, Any]:
        found = next((t.span_id for t in traces[index].turns if t.path == turn.executor_id), None)
        return {"span_id": found}

    return build_workflow_items(
        trace_workflow_runs(traces),
        metadata=[{"trace_id": t.trace_id} for t in traces],
        turn_metadata=span,
        **options,
    )


def trace_rows(
    traces: Sequence[TraceTranscript], per_agent: Literal["auto", "always", "never"] = "auto"
) -> list[dict[str, Any]]:
    """Dataset rows (JSON-ready dicts) for ``evalpipe run``: ``id`` (the trace id), ``query``,
    ``conversation`` (evalpipe message dicts), ``tools``, and ``recorded_agents`` (every agent's
    turn: ``agent``, ``received``, ``produced``, ``tools``).

    Args:
        traces: The rebuilt traces.
        per_agent: ``"always"``: every row gets ``recorded_agents`` (a workflow evaluation with
            per-agent results); ``"never"``: none does (one item per trace); ``"auto"`` (default):
            every row does when any trace has more than one agent turn.
    """
    if per_agent == "auto":
        per_agent = "always" if any(len(t.turns) > 1 for t in traces) else "never"

    def dump(messages: Sequence[Message]) -> list[dict[str, Any]]:
        return [m.model_dump(mode="json", exclude_none=True) for m in messages]

    rows = []
    for trace in traces:
        top = (turn for turn in trace.turns if turn.parent_agent_span is None)
        tools = merge_tool_snapshots(tool for turn in top for tool in turn.tools or [])
        row: dict[str, Any] = {"id": trace.trace_id}
        if trace.query:
            row["query"] = trace.query
        row["conversation"] = dump(trace.conversation)
        if tools:
            row["tools"] = [t.model_dump(mode="json") for t in tools]
        if per_agent == "always":
            row["recorded_agents"] = [
                {
                    "agent": turn.agent,
                    "received": dump(turn.received),
                    "produced": dump(turn.produced),
                    **(
                        {"tools": [t.model_dump(mode="json") for t in turn.tools]}
                        if turn.tools is not None
                        else {}
                    ),
                }
                for turn in trace.turns
            ]
        rows.append(row)
    return rows
