"""Foundry Agent Service threads and runs as evalpipe EvalItems and dataset rows.

Read through ``azure.ai.agents.AgentsClient`` (the threads API, which azure-ai-projects 2.x does
not carry). One finished run is one ``ThreadRunRecord``; a run that calls connected agents also
carries a ``WorkflowRun`` with one executor per agent; what cannot be read is a diagnostic, never
an exception. The rules are in docs/foundry.md#agent-threads.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from azure.core.exceptions import HttpResponseError
from pydantic import BaseModel, ConfigDict, Field

from evalpipe.evaluators.local import resolve_evaluators
from evalpipe.foundry._client import plain
from evalpipe.foundry._convert import json_or_text
from evalpipe.foundry._results import error_of
from evalpipe.itemize import WorkflowItems, build_workflow_items
from evalpipe.items import EvalItem
from evalpipe.messages import (
    Content,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    TextContent,
    ToolDefinition,
    UriContent,
)
from evalpipe.recorded import final_answer
from evalpipe.results import EvalResults
from evalpipe.runner import evaluate_prebuilt
from evalpipe.transcripts import ExecutorRun, RunUsage, WorkflowRun

__all__ = [
    "FoundryThreads",
    "ThreadDiagnostic",
    "ThreadRunRecord",
    "evaluate_threads",
    "threads_to_items",
]

logger = logging.getLogger("evalpipe.foundry")

_ERROR_CODES = {
    "failed": "RunFailed",
    "cancelled": "RunCanceled",
    "canceled": "RunCanceled",
    "expired": "RunExpired",
    "incomplete": "RunIncomplete",
}
_FINISHED = frozenset({"completed", *_ERROR_CODES})
# Tool call types whose run step carries the tool's output: a missing one is worth a diagnostic.
_OUTPUT_EXPECTED = frozenset({"function", "connected_agent", "openapi"})
_MAX_DEPTH = 3


@dataclass(frozen=True)
class ThreadDiagnostic:
    """Something that could not be read or made sense of; the conversion went on without it."""

    thread_id: str
    run_id: str | None
    message: str

    def __str__(self) -> str:
        where = self.thread_id + (f"/{self.run_id}" if self.run_id else "")
        return f"{where}: {self.message}"


class ThreadRunRecord(BaseModel):
    """One finished run of a Foundry agent on a thread, as evalpipe reads it."""

    model_config = ConfigDict(extra="forbid")

    thread_id: str
    run_id: str
    agent_id: str | None = None
    agent: str
    """The agent's name (its id when the agent could not be read)."""
    status: str
    """The run's status: ``completed``, ``failed``, ``cancelled``, ``expired``, ``incomplete``."""
    created_at: int | None = None
    """When the run was created (Unix seconds)."""
    conversation: list[Message] = Field(default_factory=list)
    """System (instructions), the thread's messages before the run, then what the run did."""
    split_at: int = 0
    """Where the run's own output starts in ``conversation``."""
    tools: list[ToolDefinition] | None = None
    """The run's tool definitions (connected agents appear as tools named after them)."""
    usage: RunUsage = Field(default_factory=RunUsage)
    error_code: str | None = None
    error_message: str | None = None
    workflow: WorkflowRun | None = None
    """Set for a multi-agent run (connected agents): one executor per agent turn."""
    diagnostics: list[str] = Field(default_factory=list)

    @property
    def item_id(self) -> str:
        """``thread_id/run_id``."""
        return f"{self.thread_id}/{self.run_id}"

    @property
    def is_multi_agent(self) -> bool:
        """The run called connected agents."""
        return self.workflow is not None

    def to_item(self, *, conversation_split: Any = None) -> EvalItem:
        """The whole exchange as one EvalItem (split at the last user turn unless told otherwise)."""
        return EvalItem(
            self.conversation,
            self.tools,
            split_strategy=conversation_split,
            item_id=self.item_id,
            agent=self.agent,
            usage=self.usage,
            error_code=self.error_code,
            error_message=self.error_message,
            metadata={
                "thread_id": self.thread_id,
                "run_id": self.run_id,
                "agent_id": self.agent_id,
            },
        )

    def to_row(self) -> dict[str, Any]:
        """A dataset row (one JSON line): id, conversation, tools, recorded_agents, tags."""
        row: dict[str, Any] = {
            "id": self.item_id,
            "conversation": [_message_dict(m) for m in self.conversation],
            "tools": [t.model_dump(mode="json") for t in self.tools or []],
        }
        if self.workflow is not None:
            row["recorded_agents"] = [
                {
                    "agent": turn.agent or turn.executor_id,
                    "received": [_message_dict(m) for m in turn.received],
                    "produced": [_message_dict(m) for m in turn.produced],
                    "tools": [t.model_dump(mode="json") for t in turn.tools or []],
                }
                for turn in self.workflow.executors
            ]
        row["tags"] = ["foundry", self.agent]
        return row


def _message_dict(message: Message) -> dict[str, Any]:
    return message.model_dump(mode="json", exclude_none=True)


_INPUT_SCHEMA = {"type": "object", "properties": {"input": {"type": "string"}}}


def _tools(*sources: Any) -> list[ToolDefinition] | None:
    """The tool definitions of the first source that has a list (a run's, else its agent's):
    function tools as they are, connected agents as a tool named after the agent, built-in tools
    (code interpreter, file search, ...) by type."""
    found = next((s for s in sources if s is not None), None)
    if found is None:
        return None
    out: list[ToolDefinition] = []
    for raw in found:
        tool = plain(raw)
        if not isinstance(tool, Mapping):
            continue
        kind = str(tool.get("type") or "")
        spec = tool.get(kind)
        spec = spec if isinstance(spec, Mapping) else {}
        if kind == "function" and spec.get("name"):
            out.append(ToolDefinition.coerce(tool))
        elif kind in ("connected_agent", "openapi") and spec.get("name"):
            schema = _INPUT_SCHEMA if kind == "connected_agent" else None
            out.append(
                ToolDefinition(str(spec["name"]), str(spec.get("description") or ""), schema)
            )
        elif kind:
            out.append(ToolDefinition(name=kind, description=f"Foundry built-in tool: {kind}"))
    return out


def _message_contents(
    message: Mapping[str, Any], note: Callable[[str], None] | None = None
) -> list[Any]:
    contents: list[Any] = []
    for part in message.get("content") or []:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            value = text.get("value") if isinstance(text, Mapping) else text
            contents.append(TextContent(text=value if isinstance(value, str) else ""))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else None
            if url:
                contents.append(UriContent(uri=str(url)))
        elif note is not None:
            note(f"message {message.get('id')}: content of type {kind!r} left out")
    return contents


@dataclass
class _Call:
    call_id: str
    kind: str
    name: str
    arguments: dict[str, Any] | str | None
    output: Any
    has_output: bool
    sub: Mapping[str, Any] | None


def _tool_call(raw: Mapping[str, Any]) -> _Call:
    kind = str(raw.get("type") or "unknown")
    spec = raw.get(kind)
    spec = dict(spec) if isinstance(spec, Mapping) else {}
    if kind in ("function", "connected_agent") or "arguments" in spec:
        name = str(spec.get("name") or kind)
        arguments = spec.get("arguments")
    else:
        name = kind
        arguments = {k: v for k, v in spec.items() if k not in ("output", "outputs")}
    output = next((spec[k] for k in ("output", "outputs") if spec.get(k) is not None), None)
    sub = spec if kind == "connected_agent" else None
    if arguments is not None and not isinstance(arguments, str):
        arguments = dict(arguments) if isinstance(arguments, Mapping) else json.dumps(arguments)
    has = output is not None
    return _Call(str(raw.get("id") or ""), kind, name, arguments, json_or_text(output), has, sub)


def _arguments_query(arguments: Any) -> str:
    """The text a connected agent was asked: its arguments' only string, else the raw JSON."""
    parsed = json_or_text(arguments)
    if isinstance(parsed, Mapping):
        strings = [v for v in parsed.values() if isinstance(v, str)]
        if len(strings) == 1:
            return strings[0]
    if isinstance(parsed, str):
        return parsed
    return json.dumps(parsed) if parsed is not None else ""


def _usage(run: Mapping[str, Any]) -> RunUsage:
    raw = run.get("usage")
    raw = raw if isinstance(raw, Mapping) else {}
    started = run.get("started_at") or run.get("created_at")
    ended = run.get("completed_at") or run.get("failed_at") or run.get("cancelled_at")
    latency = (
        float(ended) - float(started)
        if isinstance(started, int | float) and isinstance(ended, int | float)
        else None
    )
    return RunUsage(
        input_tokens=raw.get("prompt_tokens"),
        output_tokens=raw.get("completion_tokens"),
        total_tokens=raw.get("total_tokens"),
        latency_seconds=latency,
    )


def _executor(
    name: str,
    conversation: list[Message],
    split_at: int,
    tools: list[ToolDefinition] | None,
    usage: RunUsage | None = None,
    error: str | None = None,
) -> ExecutorRun:
    """One agent's turn: what it received (up to ``split_at``), what it produced; an ``error``
    makes it failed."""
    return ExecutorRun(
        executor_id=name,
        agent=name,
        received=conversation[:split_at],
        produced=conversation[split_at:],
        tools=tools,
        usage=usage or RunUsage(),
        error_code="ExecutorError" if error else None,
        error_message=error,
    )


def _workflow_run(name: str, executors: list[ExecutorRun], usage: RunUsage) -> WorkflowRun:
    """A run as a workflow: the first (orchestrating) agent's last user text and last answer."""
    first = executors[0]
    user_texts = [m.text for m in first.received if m.role == "user" and m.text]
    return WorkflowRun(
        query=user_texts[-1] if user_texts else "",
        workflow=name,
        executors=executors,
        output=final_answer(first.produced),
        usage=usage,
    )


class FoundryThreads(AbstractContextManager["FoundryThreads"]):
    """Reads Foundry Agent Service threads and runs and converts them for evaluation.

    Args:
        agents_client: An ``azure.ai.agents.AgentsClient`` (sync). None: one is built from
            ``endpoint`` and ``credential``.
        endpoint: The project endpoint (``https://<resource>.services.ai.azure.com/api/projects/<p>``).
        credential: A sync azure-core credential (default ``DefaultAzureCredential``).
        page_size: ``limit`` of every list call (1..100).
        follow_connected: Read each connected agent's own thread and run (its tool calls) when the
            run step names them; otherwise a connected agent's turn is its input and output only.

    Plain ``http://`` is accepted for loopback endpoints only (local emulators).
    """

    def __init__(
        self,
        agents_client: Any = None,
        *,
        endpoint: str | None = None,
        credential: Any = None,
        page_size: int = 100,
        follow_connected: bool = True,
    ) -> None:
        if not 1 <= page_size <= 100:
            raise ValueError(f"page_size must be between 1 and 100, got {page_size}.")
        self._owned = agents_client is None
        if agents_client is None:
            if not endpoint:
                raise ValueError(
                    "Pass agents_client= (an azure.ai.agents AgentsClient) or endpoint= (the "
                    "project endpoint, https://<resource>.services.ai.azure.com/api/projects/<p>)."
                )
            from azure.ai.agents import AgentsClient

            if credential is None:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential()
            agents_client = AgentsClient(endpoint=endpoint, credential=credential)
        elif inspect.iscoroutinefunction(getattr(agents_client, "get_agent", None)):
            raise TypeError(
                "FoundryThreads needs the sync azure.ai.agents.AgentsClient (its async methods "
                "are run in worker threads by the a* methods); got the aio client."
            )
        elif not hasattr(agents_client, "threads") or not hasattr(agents_client, "run_steps"):
            raise TypeError(
                "agents_client must be an azure.ai.agents AgentsClient, got "
                f"{type(agents_client).__name__}"
            )
        self.client = agents_client
        self.page_size = page_size
        self.follow_connected = follow_connected
        # azure-core's per-call options: its https-only check is off, and the hook lets a request
        # through only over https or to loopback (it runs after the token is set, before sending).
        self._call_kw = {"enforce_https": False, "raw_request_hook": _https_or_loopback}
        self._agents: dict[str, dict[str, Any] | None] = {}
        self.diagnostics: list[ThreadDiagnostic] = []

    def close(self) -> None:
        """Close the client when this object built it."""
        if self._owned:
            self.client.close()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------------

    def _list(self, fn: Any, *args: Any, order: str = "asc") -> Iterator[dict[str, Any]]:
        """Every element of a list, page by page. The SDK's pager asks for the page after
        ``last_id`` until one comes back empty; a page shorter than ``limit`` is the last one, so
        that extra request is not sent."""
        pager = fn(*args, limit=self.page_size, order=order, **self._call_kw)
        for page in pager.by_page():
            count = 0
            for element in page:
                count += 1
                yield plain(element)
            if count < self.page_size:
                return

    def _agent(self, agent_id: str | None, thread_id: str, run_id: str | None) -> dict[str, Any]:
        if not agent_id:
            return {}
        if agent_id not in self._agents:
            try:
                self._agents[agent_id] = plain(self.client.get_agent(agent_id, **self._call_kw))
            except HttpResponseError as exc:
                self._agents[agent_id] = None
                self._note(thread_id, run_id, f"agent {agent_id} could not be read: {exc.message}")
        return self._agents[agent_id] or {}

    def _note(
        self, thread_id: str, run_id: str | None, message: str, into: list[str] | None = None
    ) -> None:
        diag = ThreadDiagnostic(thread_id, run_id, message)
        self.diagnostics.append(diag)
        logger.warning("Foundry thread %s", diag)
        if into is not None:
            into.append(str(diag))

    def read(self, thread_id: str, run_id: str | None = None) -> list[ThreadRunRecord]:
        """The finished runs of one thread (or only ``run_id``), oldest first.

        A thread that cannot be read gives no record and a diagnostic; runs still in progress are
        skipped with a diagnostic.
        """
        return self._read(thread_id, run_id, None)

    def _read(
        self, thread_id: str, run_id: str | None, runs: list[dict[str, Any]] | None
    ) -> list[ThreadRunRecord]:
        try:
            messages = list(self._list(self.client.messages.list, thread_id))
            if runs is None:
                runs = list(self._list(self.client.runs.list, thread_id))
        except HttpResponseError as exc:
            self._note(thread_id, None, f"thread could not be read: {exc.message}")
            return []
        if run_id is not None and all(r.get("id") != run_id for r in runs):
            self._note(thread_id, run_id, "no such run on this thread")
            return []
        records: list[ThreadRunRecord] = []
        for record, connected in self._thread_records(thread_id, messages, runs):
            if run_id is not None and record.run_id != run_id:
                continue
            if record.status not in _FINISHED:
                status = record.status or "of unknown status"
                self._note(thread_id, record.run_id, f"run is {status}: skipped")
                continue
            if connected:
                executors = self._executors(record, record.agent, connected, depth=1)
                record.workflow = _workflow_run(record.agent, executors, record.usage)
            records.append(record)
        return records

    def read_many(self, thread_ids: Sequence[str]) -> list[ThreadRunRecord]:
        """Every finished run of each thread, in the order given."""
        return [record for tid in thread_ids for record in self.read(tid)]

    def agent_thread_ids(
        self,
        agent_id: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        lookback_hours: float | None = None,
    ) -> list[str]:
        """The threads created in the window that have a run of ``agent_id``, newest first.

        The window is ``[since, until)``; ``lookback_hours`` sets ``since`` to that long before
        ``until`` (default: now). Threads are listed newest first and listing stops at the first
        thread older than the window, so only the pages that matter are read.
        """
        window = _window(since, until, lookback_hours)
        return [tid for tid, _ in self._agent_threads(agent_id, *window)]

    def _agent_threads(
        self, agent_id: str, low: float, high: float
    ) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """(thread id, its runs) of the threads created in [low, high) with a run of ``agent_id``."""
        for thread in self._list(self.client.threads.list, order="desc"):
            created = thread.get("created_at")
            if isinstance(created, str):
                created = datetime.fromisoformat(created).timestamp()
            if not isinstance(created, int | float):
                continue
            if created < low:
                break
            if created >= high:
                continue
            tid = str(thread["id"])
            try:
                runs = list(self._list(self.client.runs.list, tid))
            except HttpResponseError as exc:
                self._note(tid, None, f"runs could not be listed: {exc.message}")
                continue
            if any(r.get("assistant_id") == agent_id for r in runs):
                yield tid, runs

    def read_agent(
        self,
        agent_id: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        lookback_hours: float | None = None,
    ) -> list[ThreadRunRecord]:
        """Every finished run of ``agent_id`` on the threads created in the window (see
        ``agent_thread_ids``), threads newest first, runs oldest first within a thread."""
        records: list[ThreadRunRecord] = []
        for tid, runs in self._agent_threads(agent_id, *_window(since, until, lookback_hours)):
            records.extend(r for r in self._read(tid, None, runs) if r.agent_id == agent_id)
        return records

    async def aread(self, thread_id: str, run_id: str | None = None) -> list[ThreadRunRecord]:
        """``read`` in a worker thread."""
        return await asyncio.to_thread(self.read, thread_id, run_id)

    async def aread_many(self, thread_ids: Sequence[str]) -> list[ThreadRunRecord]:
        """``read_many`` in a worker thread."""
        return await asyncio.to_thread(self.read_many, thread_ids)

    async def aread_agent(self, agent_id: str, **window: Any) -> list[ThreadRunRecord]:
        """``read_agent`` in a worker thread."""
        return await asyncio.to_thread(self.read_agent, agent_id, **window)

    # -- conversion --------------------------------------------------------------------------

    def _thread_records(
        self, thread_id: str, messages: list[dict[str, Any]], runs: list[dict[str, Any]]
    ) -> list[tuple[ThreadRunRecord, list[_Call]]]:
        """Each run of the thread (oldest first) with its conversation (history, then its output)
        and the connected-agent calls it made."""
        by_id = {str(m.get("id")): m for m in messages}
        run_ids = {str(r.get("id")) for r in runs}
        # The timeline: messages not written by a run, and runs, by creation time (a message
        # created at the same second as a run comes first: it is the run's input).
        events: list[tuple[float, int, int, Any]] = []
        for i, m in enumerate(messages):
            if str(m.get("run_id") or "") not in run_ids:
                events.append((float(m.get("created_at") or 0), 0, i, m))
        for i, r in enumerate(runs):
            events.append((float(r.get("created_at") or 0), 1, i, r))
        events.sort(key=lambda e: e[:3])
        history: list[Message] = []
        out: list[tuple[ThreadRunRecord, list[_Call]]] = []
        for _, is_run, _, obj in events:
            if not is_run:
                contents = _message_contents(obj, lambda t: self._note(thread_id, None, t))
                history.append(Message(str(obj.get("role") or "user"), contents))
                continue
            run = obj
            diag: list[str] = []
            agent = self._agent(run.get("assistant_id"), thread_id, run.get("id"))
            name = str(agent.get("name") or run.get("assistant_id") or "agent")
            instructions = run.get("instructions") or agent.get("instructions")
            system = [Message("system", [str(instructions)])] if instructions else []
            produced, connected = self._run_output(thread_id, run, by_id, name, diag)
            status = str(run.get("status") or "")
            error_code = _ERROR_CODES.get(status)
            code, message = error_of(run.get("last_error"))
            created = run.get("created_at")
            record = ThreadRunRecord(
                thread_id=thread_id,
                run_id=str(run.get("id")),
                agent_id=run.get("assistant_id"),
                agent=name,
                status=status,
                created_at=created if isinstance(created, int) else None,
                conversation=[*system, *history, *produced],
                split_at=len(system) + len(history),
                tools=_tools(run.get("tools"), agent.get("tools")),
                usage=_usage(run),
                error_code=error_code,
                error_message=(message or code or f"the run ended {status}")
                if error_code
                else None,
                diagnostics=diag,
            )
            out.append((record, connected))
            history.extend(produced)
        return out

    def _run_output(
        self,
        thread_id: str,
        run: dict[str, Any],
        by_id: Mapping[str, dict[str, Any]],
        agent: str,
        diag: list[str],
    ) -> tuple[list[Message], list[_Call]]:
        """What the run did, in step order (tool calls with their results, created messages), and
        the connected agents it called."""
        run_id = str(run.get("id"))

        def note(text: str) -> None:
            self._note(thread_id, run_id, text, diag)

        try:
            steps = list(self._list(self.client.run_steps.list, thread_id, run_id))
        except HttpResponseError as exc:
            note(f"run steps could not be read: {exc.message}")
            steps = []
        produced: list[Message] = []
        connected: list[_Call] = []
        used: set[str] = set()
        for step in steps:
            details = step.get("step_details")
            details = details if isinstance(details, Mapping) else {}
            kind = details.get("type") or step.get("type")
            step_id = step.get("id")
            if kind == "message_creation":
                ref = details.get("message_creation")
                mid = str(ref.get("message_id")) if isinstance(ref, Mapping) else ""
                message = by_id.get(mid)
                if message is None:
                    note(f"step {step_id}: message {mid or '?'} not found (deleted?); left out")
                    continue
                used.add(mid)
                contents = _message_contents(message, note)
                produced.append(Message("assistant", contents, author_name=agent))
            elif kind == "tool_calls":
                raw_calls = details.get("tool_calls") or []
                step_calls = [_tool_call(tc) for tc in raw_calls if isinstance(tc, Mapping)]
                if not step_calls:
                    note(f"step {step_id}: tool_calls step with no calls")
                    continue
                call_parts: list[Content] = [
                    FunctionCallContent(name=c.name, arguments=c.arguments, call_id=c.call_id)
                    for c in step_calls
                ]
                produced.append(Message("assistant", call_parts, author_name=agent))
                results: list[Content] = []
                for c in step_calls:
                    if c.has_output:
                        results.append(FunctionResultContent(call_id=c.call_id, result=c.output))
                    elif c.kind in _OUTPUT_EXPECTED:
                        note(f"step {step_id}: tool call {c.call_id} ({c.name}) has no output")
                if results:
                    produced.append(Message("tool", results))
                connected.extend(c for c in step_calls if c.kind == "connected_agent")
            else:
                note(f"step {step_id}: unknown step type {kind!r}")
        # Messages the run wrote that no step points to (steps missing or not listed).
        for mid, message in by_id.items():
            if message.get("run_id") == run_id and mid not in used:
                produced.append(Message("assistant", _message_contents(message), author_name=agent))
                if not steps:
                    note(f"message {mid} kept without its run step")
        return produced, connected

    def _executors(
        self,
        record: ThreadRunRecord,
        name: str,
        connected: list[_Call],
        *,
        depth: int,
        error: str | None = None,
    ) -> list[ExecutorRun]:
        """A run's own executor turn, then (nested) those of the connected agents it called."""
        conversation, split_at = record.conversation, record.split_at
        turns = [_executor(name, conversation, split_at, record.tools, record.usage, error)]
        for call in connected:
            turns += self._connected_turns(record, call, depth=depth)
        return turns

    def _connected_turns(
        self, caller: ThreadRunRecord, call: _Call, *, depth: int
    ) -> list[ExecutorRun]:
        """The executor turns of one connected-agent call: the agent's own run when it can be
        read (and, nested, the agents it called), else its input and output only."""
        thread_id, run_id, diag = caller.thread_id, caller.run_id, caller.diagnostics
        sub = call.sub or {}
        sub_agent = self._agent(sub.get("agent_id"), thread_id, run_id)
        name = str(sub_agent.get("name") or call.name)
        sub_thread, sub_run = sub.get("thread_id"), sub.get("run_id")

        def fall_back(why: str) -> None:
            text = f"connected agent {name}: {why}; using the call's input and output"
            self._note(thread_id, run_id, text, diag)

        if self.follow_connected and sub_thread and sub_run and depth <= _MAX_DEPTH:
            try:
                messages = list(self._list(self.client.messages.list, sub_thread))
                runs = list(self._list(self.client.runs.list, sub_thread))
            except HttpResponseError as exc:
                fall_back(f"thread {sub_thread} could not be read ({exc.message})")
            else:
                for record, calls in self._thread_records(sub_thread, messages, runs):
                    if record.run_id != sub_run:
                        continue
                    diag.extend(record.diagnostics)
                    record.diagnostics = diag
                    ended = f"the connected agent's run ended {record.status}"
                    error = ended if record.error_code else None
                    return self._executors(record, name, calls, depth=depth + 1, error=error)
                fall_back(f"run {sub_run} not found on thread {sub_thread}")
        instructions = sub_agent.get("instructions")
        received = [Message("system", [str(instructions)])] if instructions else []
        received.append(Message("user", [_arguments_query(call.arguments)]))
        produced = []
        if call.has_output:
            out = call.output
            text = out if isinstance(out, str) else json.dumps(out)
            produced.append(Message("assistant", [text], author_name=name))
        no_output = None if call.has_output else "the connected agent returned no output"
        tools = _tools(sub_agent.get("tools"))
        return [_executor(name, [*received, *produced], len(received), tools, error=no_output)]


def _https_or_loopback(request: Any) -> None:
    """Refuse to send the bearer token over plain http except to loopback (local emulators).

    A ValueError, not an azure-core error: the SDK's retry would re-send without this hook.
    """
    url = urlsplit(request.http_request.url)
    if url.scheme != "https" and url.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(
            f"{url.scheme}://{url.hostname}: bearer token authentication needs https "
            "(plain http:// is accepted for loopback endpoints only)"
        )


def _window(
    since: datetime | None, until: datetime | None, lookback_hours: float | None
) -> tuple[float, float]:
    """The window ``[since, until)`` as Unix timestamps (checked)."""
    if since is not None and lookback_hours is not None:
        raise ValueError("Pass since= or lookback_hours=, not both.")
    until = until or datetime.now(UTC)
    if until.tzinfo is None:
        until = until.replace(tzinfo=UTC)
    if since is None:
        hours = 24.0 if lookback_hours is None else float(lookback_hours)
        if hours <= 0:
            raise ValueError(f"lookback_hours must be > 0, got {lookback_hours}.")
        since = until - timedelta(hours=hours)
    elif since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    if since >= until:
        raise ValueError(
            f"the window is empty: since {since.isoformat()} is not before until {until.isoformat()}."
        )
    return since.timestamp(), until.timestamp()


def threads_to_items(
    records: Sequence[ThreadRunRecord], *, conversation_split: Any = None
) -> WorkflowItems:
    """Overall items (one per run, the whole exchange) and, when any run is multi-agent, per-agent
    items of every run (agents keyed by name; a single-agent run is its agent's only turn)."""
    items = WorkflowItems(
        overall=[r.to_item(conversation_split=conversation_split) for r in records]
    )
    if not any(r.is_multi_agent for r in records):
        return items

    def as_run(r: ThreadRunRecord) -> WorkflowRun:
        if r.workflow is not None:
            return r.workflow
        error = (r.error_message or r.error_code) if r.error_code else None
        turn = _executor(r.agent, r.conversation, r.split_at, r.tools, r.usage, error)
        return _workflow_run(r.agent, [turn], r.usage)

    items.per_agent = build_workflow_items(
        [as_run(r) for r in records],
        conversation_split=conversation_split,
        include_overall=False,
        item_ids=[r.item_id for r in records],
        metadata=[{"thread_id": r.thread_id, "run_id": r.run_id} for r in records],
    ).per_agent
    return items


async def evaluate_threads(
    records: Sequence[ThreadRunRecord],
    *,
    evaluators: Any,
    eval_name: str = "Foundry threads",
    conversation_split: Any = None,
) -> list[EvalResults]:
    """Evaluate converted runs with every provider; one EvalResults per provider.

    The top level scores each run's whole exchange; when any run called connected agents,
    ``sub_results`` holds one result per agent (keyed by agent name), as for workflows.

    Raises:
        ValueError: when there are no records.
    """
    if not records:
        raise ValueError("No Foundry runs to evaluate: the threads had no finished runs.")
    providers = resolve_evaluators(evaluators)
    items = threads_to_items(records, conversation_split=conversation_split)
    return await evaluate_prebuilt(providers, items, eval_name)
