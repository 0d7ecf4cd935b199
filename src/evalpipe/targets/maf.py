"""Microsoft Agent Framework (MAF) workflows as evalpipe workflows, read from their event stream.

``MAFWorkflow`` runs a MAF ``Workflow`` (built with ``WorkflowBuilder``, or with the builders of
agent-framework-orchestrations such as ``SequentialBuilder``, whose bookkeeping executors are skipped
as MAF's own evaluate_workflow skips them) and turns its events into a ``WorkflowRun``:
``executor_invoked`` opens an executor's turn with what it received, ``executor_completed`` closes
it with the agent's response, ``executor_failed`` marks it failed, and the last ``output`` is the
workflow's output. ``workflow_run_from_events`` does the same
for a ``WorkflowRunResult`` you already have. ``agent_framework`` is imported only when a MAF object
is actually converted, so evalpipe imports without the ``maf`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from evalpipe._internal.calls import is_call_failure
from evalpipe._internal.maf import is_maf_instance
from evalpipe.messages import Message
from evalpipe.targets.base import (
    agent_tools,
    is_maf_workflow,
    response_messages,
    response_usage,
)
from evalpipe.transcripts import ExecutorRun, WorkflowRun, sum_usage

__all__ = [
    "MAFWorkflow",
    "workflow_run_from_events",
]

_INTERNAL_EXECUTORS = frozenset({"input-conversation", "end-conversation", "end"})
"""Bookkeeping executors MAF's orchestrations add."""


def _skipped(executor_id: str) -> bool:
    """Whether an executor is skipped, as MAF's evaluate_workflow skips it: a bookkeeping one, or
    one whose id starts with "_"."""
    return executor_id.startswith("_") or executor_id in _INTERNAL_EXECUTORS


_EXECUTOR_EVENTS = ("executor_invoked", "executor_completed", "executor_failed")


def _is_executor_response(value: Any) -> bool:
    return hasattr(value, "agent_response") and hasattr(value, "full_conversation")


def _as_messages(value: Any, *, role: str) -> list[Message]:
    """What an executor was given or yielded, as messages (a bare string gets ``role``)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [Message(role, [value])]
    if _is_executor_response(value):
        return [Message.coerce(m) for m in value.full_conversation]
    if hasattr(value, "role") and hasattr(value, "contents"):
        return [Message.coerce(value)]
    if hasattr(value, "messages"):  # AgentExecutorRequest, AgentResponse
        return response_messages(value)
    if isinstance(value, Sequence):
        return [m for v in value for m in _as_messages(v, role=role)]
    return [Message(role, [str(value)])]


def _error_text(details: Any, fallback: BaseException | None) -> str:
    error_type = getattr(details, "error_type", None) or "Error"
    message = getattr(details, "message", None) or ""
    if fallback is not None and type(fallback).__name__ == error_type:
        # MAF hides the message unless sensitive data is enabled; the raised exception has it.
        return f"{error_type}: {fallback}"
    return f"{error_type}: {message}" if message and message != error_type else error_type


def workflow_run_from_events(
    events: Iterable[Any],
    *,
    workflow: Any = None,
    query: str | None = None,
    error: BaseException | None = None,
    timings: dict[int, float] | None = None,
) -> WorkflowRun:
    """A WorkflowRun from MAF workflow events (a ``WorkflowRunResult`` or streamed events).

    Args:
        events: The events, in order.
        workflow: The MAF workflow, for the agents' tool definitions (optional).
        query: The user query; default: the first ``executor_invoked`` input, as text.
        error: The exception the run raised, if it did.
        timings: ``id(event) -> perf_counter()`` at arrival, to time each executor's turn.
    """
    executors_by_id = getattr(workflow, "executors", None) or {}
    turns: list[ExecutorRun] = []
    open_turns: dict[str, ExecutorRun] = {}
    opened_at: dict[str, float] = {}
    last_output: tuple[str | None, Any] | None = None
    first_input: Any = None
    failed: str | None = None
    for event in events:
        kind = getattr(event, "type", None)
        executor_id = getattr(event, "executor_id", None)
        if kind == "output":
            last_output = (executor_id, event.data)
            continue
        if kind == "failed" and failed is None:
            failed = _error_text(getattr(event, "details", None), error)
            continue
        if executor_id is None or kind not in _EXECUTOR_EVENTS:
            continue
        if kind == "executor_invoked" and first_input is None:
            first_input = event.data
        if _skipped(executor_id):
            continue
        if kind == "executor_invoked":
            agent = getattr(executors_by_id.get(executor_id), "agent", None)
            opened = ExecutorRun(
                executor_id=executor_id,
                agent=executor_id if agent is not None else None,
                received=_as_messages(event.data, role="user"),
                tools=(agent_tools(agent) or None) if agent is not None else None,
            )
            turns.append(opened)
            open_turns[executor_id] = opened
            if timings is not None and id(event) in timings:
                opened_at[executor_id] = timings[id(event)]
            continue
        turn = open_turns.pop(executor_id, None)
        if turn is None:
            turn = ExecutorRun(executor_id=executor_id)
            turns.append(turn)
        if timings is not None and executor_id in opened_at and id(event) in timings:
            turn.usage.latency_seconds = timings[id(event)] - opened_at.pop(executor_id)
        if kind == "executor_failed":
            turn.error_code = "ExecutorError"
            turn.error_message = _error_text(getattr(event, "details", None), error)
            continue
        sent = event.data if isinstance(event.data, list) else [event.data]
        responses = [s for s in sent if _is_executor_response(s)]
        if responses:
            if executor_id not in executors_by_id:
                # Without the workflow at hand, an executor that answered like an agent is one.
                turn.agent = turn.agent or executor_id
            turn.produced = [m for r in responses for m in response_messages(r.agent_response)]
            usages = [response_usage(r.agent_response) for r in responses]
            turn.usage = sum_usage(usages, turn.usage.latency_seconds)
        else:
            turn.produced = _as_messages(sent, role="assistant")
    for turn in open_turns.values():
        if turn.ok and (error is not None or failed is not None):
            turn.error_code = "Interrupted"
            turn.error_message = "did not complete: the workflow stopped"
    output: list[Message] = []
    if last_output is not None:
        last_id, last = last_output
        if hasattr(last, "contents") and not hasattr(last, "messages"):
            # Streaming yields updates; the executor's completed response holds the whole turn.
            done = [t for t in turns if t.executor_id == last_id and t.ok]
            output = list(done[-1].produced) if done else _as_messages(last, role="assistant")
        else:
            output = _as_messages(last, role="assistant")
    if query is None:
        query = " ".join(m.text for m in _as_messages(first_input, role="user") if m.role == "user")
    error_code = error_message = None
    bad = next((t for t in turns if t.error_code == "ExecutorError"), None)
    if bad is not None:
        error_code, error_message = "ExecutorError", f"executor {bad.executor_id!r} failed: "
        error_message += bad.error_message or ""
    elif error is not None or failed is not None:
        error_code = "WorkflowError"
        error_message = f"{type(error).__name__}: {error}" if error is not None else failed
    return WorkflowRun(
        query=query,
        workflow=type(workflow).__name__ if workflow is not None else None,
        executors=turns,
        output=output if error_code is None else [],
        usage=sum_usage([t.usage for t in turns]),
        error_code=error_code,
        error_message=error_message,
    )


class MAFWorkflow:
    """A MAF ``Workflow`` as an evalpipe workflow (``name`` + ``async run(query) -> WorkflowRun``).

    Pass a zero-argument factory that builds the workflow to give every run a fresh workflow: runs
    are then concurrent and isolated. A workflow instance is run one query at a time (MAF refuses
    concurrent runs on one instance), and its agents keep their sessions between queries, as in
    MAF's own ``evaluate_workflow``.

    By default a MAF ``Workflow`` runs in streaming mode, so the turns that finished before a
    failing executor are kept; the agents' chat clients must support streaming (MAF's all do).
    With ``stream=False`` (the default for an object of MAF's shape that is not a MAF
    ``Workflow``, such as a test double, which is called as MAF calls it: ``await run(query)``) a
    run that raises is recorded as "WorkflowError" without executor turns. Whatever ``run``
    returns is read: a stream of events, an awaitable, or a ``WorkflowRunResult``.

    Args:
        workflow: A MAF ``Workflow``, or a zero-argument callable returning a fresh one.
        name: The workflow's display name (default: the class name, ``"Workflow"``, as MAF's).
        stream: Run with ``stream=True`` and convert the events as they arrive (default: for a
            MAF ``Workflow``).
        first: A workflow the factory already built (used for ``agent_names``, never run).

    Raises:
        TypeError: when ``workflow`` is neither a MAF workflow nor a callable.
    """

    def __init__(
        self,
        workflow: Any,
        *,
        name: str | None = None,
        stream: bool | None = None,
        first: Any = None,
    ) -> None:
        self._factory: Callable[[], Any] | None = None
        if is_maf_workflow(workflow):
            self._workflow: Any = workflow  # run under the lock
        elif callable(workflow):
            self._workflow, self._factory = first, workflow  # a sample, for agent_names
        else:
            raise TypeError(
                f"MAFWorkflow needs a MAF Workflow or a factory returning one, got "
                f"{type(workflow).__name__}"
            )
        self._lock = asyncio.Lock()
        self._stream = stream
        self.name = name or "Workflow"

    def _build(self) -> Any:
        assert self._factory is not None
        built = self._factory()
        if not is_maf_workflow(built):
            raise TypeError(
                f"the workflow factory returned {type(built).__name__}, expected a MAF Workflow"
            )
        return built

    @property
    def agent_names(self) -> list[str]:
        """The ids of the workflow's agent executors (MAF keys per-agent results by them)."""
        if self._workflow is None:
            self._workflow = self._build()
        return [
            executor_id
            for executor_id, executor in self._workflow.executors.items()
            if getattr(executor, "agent", None) is not None and not _skipped(executor_id)
        ]

    async def run(self, query: str) -> WorkflowRun:
        """Run the workflow on ``query`` (a fresh one from the factory) and convert its events."""
        async with self._lock if self._factory is None else contextlib.nullcontext():
            workflow = self._workflow if self._factory is None else self._build()
            started = time.perf_counter()
            events: list[Any] = []
            timings: dict[int, float] = {}
            error: BaseException | None = None
            stream = (
                self._stream if self._stream is not None else is_maf_instance(workflow, "Workflow")
            )
            try:
                answer = workflow.run(query, stream=True) if stream else workflow.run(query)
                if not hasattr(answer, "__aiter__") and inspect.isawaitable(answer):
                    answer = await answer
                if hasattr(answer, "__aiter__"):
                    async for event in answer:
                        timings[id(event)] = time.perf_counter()
                        events.append(event)
                else:
                    # a WorkflowRunResult (a list of events), also from a run(stream=True) that
                    # does not stream
                    events = list(answer)
            except BaseException as exc:
                if not is_call_failure(exc):
                    raise
                error = exc
            run = workflow_run_from_events(
                events, workflow=workflow, query=query, error=error, timings=timings
            )
            usage = run.usage.model_copy(update={"latency_seconds": time.perf_counter() - started})
            return run.model_copy(update={"workflow": self.name, "usage": usage})
