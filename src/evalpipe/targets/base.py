"""What a target is (the Agent protocol), one call to it (TargetRun), and reading its response.

An agent is any object with a ``name`` and ``async run(messages, **kwargs)`` returning an object with
``.messages``: MAF's ``Agent`` satisfies it, and so does evalpipe's own ``AgentResponse``-returning
agents. Responses are read duck-typed so MAF's ``AgentResponse`` (with ``usage_details``) works
unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import MethodType
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from evalpipe._internal.calls import CallTimeout, Slots, bounded, in_thread, is_call_failure
from evalpipe._internal.maf import is_maf_instance
from evalpipe._internal.retry import is_transient, retry_after
from evalpipe.messages import Message, ToolDefinition, user_message
from evalpipe.transcripts import RunUsage, TargetRun

__all__ = [
    "Agent",
    "AgentResponse",
    "agent_name",
    "agent_tools",
    "awaited",
    "call_agent",
    "guarded_call",
    "is_maf_agent",
    "is_maf_workflow",
    "response_messages",
    "response_tools",
    "response_usage",
    "run_agent",
    "to_maf_messages",
    "with_retries",
]

T = TypeVar("T")


@runtime_checkable
class Agent(Protocol):
    """Anything evalpipe can run: a name and an async ``run`` over a list of messages."""

    name: str | None

    async def run(self, messages: list[Message], **kwargs: Any) -> Any: ...


class AgentResponse(BaseModel):
    """What an evalpipe agent returns: the messages it produced, what it cost, the tools it had."""

    model_config = ConfigDict(extra="forbid")

    messages: list[Message] = Field(default_factory=list)
    """The messages the agent produced (assistant turns, tool calls, tool results)."""
    usage: RunUsage | None = None
    """Token counts, when the model reported them."""
    tools: list[ToolDefinition] | None = None
    """Schema snapshots of the tools exposed during the run, in the order they were exposed."""
    error_code: str | None = None
    """Set when the run produced no usable answer although it returned (e.g.
    "MaxStepsExceeded"): the call's item is then errored, its transcript kept."""
    error_message: str | None = None
    """What was wrong with the answer, for people."""

    @property
    def text(self) -> str:
        """The assistant texts joined with spaces."""
        return " ".join(t for m in self.messages if m.role == "assistant" and (t := m.text))


def is_maf_workflow(obj: Any) -> bool:
    """Whether ``obj`` is a MAF workflow: an instance of MAF's ``Workflow`` or of a subclass, or an
    object of its shape, an ``executors`` mapping and a ``run`` (how MAF's own tests and the
    tests written like them build a workflow: ``MagicMock()`` with ``executors = {...}``).
    Never imports MAF."""
    if is_maf_instance(obj, "Workflow"):
        return True
    return isinstance(getattr(obj, "executors", None), Mapping) and callable(
        getattr(obj, "run", None)
    )


def is_maf_agent(obj: Any) -> bool:
    """Whether ``obj`` is a MAF agent: an instance of MAF's ``BaseAgent`` (``Agent``, ``RawAgent``,
    ``WorkflowAgent``, Foundry's agents) or of a subclass (never imports MAF)."""
    return is_maf_instance(obj, "BaseAgent")


def agent_name(agent: Any) -> str:
    """The agent's display name: ``name``, else ``id``, else "agent" (MAF's fallback)."""
    return str(getattr(agent, "name", None) or getattr(agent, "id", None) or "agent")


def response_messages(response: Any) -> list[Message]:
    """The messages of a response: an object with ``.messages``, a list of messages, or a str."""
    if isinstance(response, str):
        return [Message("assistant", [response])]
    messages = getattr(response, "messages", None)
    if messages is None and isinstance(response, Sequence):
        messages = response
    if messages is None:
        raise TypeError(
            f"agent response {type(response).__name__} has no .messages; return an object with "
            "a .messages list (e.g. evalpipe.AgentResponse), a list of messages, or a str"
        )
    return [m if type(m) is Message else Message.coerce(m) for m in messages]


def response_usage(response: Any, latency_seconds: float | None = None) -> RunUsage:
    """Token counts from a response: evalpipe's ``usage`` or MAF's ``usage_details`` (a new
    RunUsage, with ``latency_seconds`` when given)."""
    if type(response) is AgentResponse:  # no usage_details: the common case, without looking
        usage: Any = response.usage
        details: Any = None
    else:
        usage = getattr(response, "usage", None)
        details = getattr(response, "usage_details", None)
    if isinstance(usage, RunUsage):
        update = None if latency_seconds is None else {"latency_seconds": latency_seconds}
        return usage.model_copy(update=update)
    if details is None and isinstance(usage, Mapping):
        details = usage
    if details is None:
        return RunUsage(latency_seconds=latency_seconds)

    def pick(*keys: str) -> int | None:
        for key in keys:
            value = (
                details.get(key) if isinstance(details, Mapping) else getattr(details, key, None)
            )
            if isinstance(value, int | float) and not isinstance(value, bool):
                return int(value)
        return None

    return RunUsage(
        input_tokens=pick("input_token_count", "input_tokens", "prompt_tokens"),
        output_tokens=pick("output_token_count", "output_tokens", "completion_tokens"),
        total_tokens=pick("total_token_count", "total_tokens"),
        latency_seconds=latency_seconds,
    )


def response_tools(response: Any) -> list[ToolDefinition] | None:
    """The tool snapshots a response carries, when it carries any."""
    tools = getattr(response, "tools", None)
    if tools is None or isinstance(tools, str):
        return None
    return [ToolDefinition.coerce(t) for t in tools]


def agent_tools(agent: Any) -> list[ToolDefinition]:
    """Snapshots of the tools an agent declares: ``agent.tools``, or MAF's
    ``default_options["tools"]`` plus its MCP tools' functions (deduplicated by name)."""
    options = getattr(agent, "default_options", None)
    lists = [
        getattr(agent, "tools", None),
        options.get("tools") if isinstance(options, Mapping) else None,
        *(getattr(mcp, "functions", None) for mcp in getattr(agent, "mcp_tools", None) or []),
    ]
    out: dict[str, ToolDefinition] = {}
    for tools in lists:
        if not isinstance(tools, Iterable) or isinstance(tools, str | Mapping):
            continue
        for tool in tools:
            try:
                snapshot = ToolDefinition.coerce(tool)
            except (TypeError, ValueError):
                continue  # hosted tools (code interpreter, file search) have no schema to snapshot
            out.setdefault(snapshot.name, snapshot)
    return list(out.values())


async def guarded_call(
    call: Callable[[], Awaitable[Any]],
    done: Callable[[Any, int, float], T],
    failed: Callable[..., T],
    *,
    code: str,
    semaphore: Slots | None = None,
    call_timeout: float | None = None,
    attempts: int = 1,
    retry_wait: float = 0.5,
) -> T:
    """``done(result, tries, latency)`` of ``call()``; latency is the last attempt's. What the
    call (or ``done``) raised is ``failed(usage=, error_code=, error_message=, attempts=)``: the
    error code ``code``, or "TargetTimeout" past ``call_timeout``.

    Each attempt holds a ``semaphore`` slot and is cancelled past ``call_timeout`` seconds. With
    ``attempts`` > 1, a transient error (timeout, connection error, 408/409/429/5xx) is retried
    with exponential backoff and jitter starting at ``retry_wait`` seconds, honouring the server's
    Retry-After; the slot is released while waiting. Only the run being stopped (Ctrl-C, the
    cancellation of this task) propagates (``_internal.calls.is_call_failure``).
    """
    started = time.perf_counter()
    tries = 0

    async def attempt() -> Any:
        nonlocal started, tries
        tries += 1
        async with semaphore if semaphore is not None else contextlib.nullcontext():
            started = time.perf_counter()
            return await bounded(call(), call_timeout)

    try:
        result = await with_retries(attempt, attempts=attempts, retry_wait=retry_wait)
        return done(result, tries, time.perf_counter() - started)
    except BaseException as exc:
        if not is_call_failure(exc):
            raise
        return failed(
            usage=RunUsage(latency_seconds=time.perf_counter() - started),
            error_code="TargetTimeout" if isinstance(exc, CallTimeout) else code,
            error_message=f"{type(exc).__name__}: {exc}"
            + (f" (after {tries} attempts)" if tries > 1 else ""),
            attempts=tries,
        )


async def call_agent(
    agent: Any,
    query: str,
    *,
    query_index: int,
    repetition: int,
    semaphore: Slots | None = None,
    attempts: int = 1,
    retry_wait: float = 0.5,
    call_timeout: float | None = None,
) -> TargetRun:
    """Run the agent on one query (see :func:`guarded_call`); whatever it raises becomes a
    TargetRun with error_code "AgentError" ("TargetTimeout" past ``call_timeout``)."""

    run = functools.partial(TargetRun, query_index=query_index, repetition=repetition, query=query)
    extra = {"repetition": repetition} if _takes_repetition(type(agent)) else {}

    def done(response: Any, tries: int, latency: float) -> TargetRun:
        code = getattr(response, "error_code", None)
        code = code if isinstance(code, str) else None
        return run(
            messages=response_messages(response),
            tools=response_tools(response),
            usage=response_usage(response, latency),
            error_code=code,
            error_message=None
            if code is None
            else str(getattr(response, "error_message", None) or code),
            attempts=tries,
        )

    return await guarded_call(
        lambda: run_agent(agent, [user_message(query)], **extra),
        done,
        run,
        code="AgentError",
        semaphore=semaphore,
        call_timeout=call_timeout,
        attempts=attempts,
        retry_wait=retry_wait,
    )


async def with_retries(
    attempt: Callable[[], Awaitable[Any]], *, attempts: int, retry_wait: float
) -> Any:
    """``attempt()``, retried on transient errors up to ``attempts`` times in all (tenacity).

    The first attempt runs outside tenacity: most calls succeed, and a retry loop per call costs
    ~0.2 ms of CPU. Only a transient failure enters the retry policy; anything else is raised.
    """
    try:
        return await attempt()
    except Exception as first:
        if attempts <= 1 or not is_transient(first):
            raise
        hinted = retry_after(first)
    await asyncio.sleep(hinted if hinted is not None else retry_wait)
    backoff = wait_exponential_jitter(
        multiplier=retry_wait, jitter=retry_wait, max=max(retry_wait * 40, 1.0)
    )

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        hinted = retry_after(exc) if exc is not None else None
        return hinted if hinted is not None else backoff(state)

    async for trial in AsyncRetrying(
        stop=stop_after_attempt(attempts - 1),
        retry=retry_if_exception(is_transient),
        wait=wait,
        reraise=True,
    ):
        with trial:
            return await attempt()
    raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover


_TAKES_REPETITION: dict[type, bool] = {}


def _takes_repetition(cls: type) -> bool:
    """The agent's ``run`` declares a ``repetition`` parameter (e.g. OpenAIChatAgent's cache key)."""
    known = _TAKES_REPETITION.get(cls)
    if known is None:
        try:
            known = "repetition" in inspect.signature(getattr(cls, "run")).parameters  # noqa: B009
        except (TypeError, ValueError, AttributeError):
            known = False
        _TAKES_REPETITION[cls] = known
    return known


_is_async_function = functools.cache(inspect.iscoroutinefunction)


def _is_async(fn: Any) -> bool:
    """``inspect.iscoroutinefunction(fn)``, remembered per function for a bound method (an
    agent's ``run``: the same answer for every call, at a cache lookup)."""
    if type(fn) is MethodType:
        try:
            return _is_async_function(fn.__func__)
        except TypeError:  # an unhashable callable bound as a method
            pass
    return inspect.iscoroutinefunction(fn)


async def run_agent(agent: Any, messages: list[Message], **kwargs: Any) -> Any:
    """``agent.run(messages, **kwargs)``. A MAF agent gets MAF ``Message`` objects, as MAF's
    ``evaluate_agent`` gives them (evalpipe's Message would fail on MAF's attributes)."""
    if is_maf_agent(agent):
        return await awaited(agent.run, to_maf_messages(messages), **kwargs)
    return await awaited(agent.run, messages, **kwargs)


def to_maf_messages(messages: Iterable[Message]) -> list[Any]:
    """evalpipe messages as MAF ``Message`` objects (text, tool calls, tool results, data, uris).

    Raises:
        ModuleNotFoundError: when agent-framework-core is not installed.
    """
    import agent_framework as af

    def content(c: Any) -> Any:
        if c.type == "function_result":  # MAF's constructor adds the result's text items
            return af.Content.from_function_result(c.call_id, result=c.result)
        return af.Content.from_dict(c.model_dump(exclude_none=True))

    return [
        af.Message(
            role=m.role, contents=[content(c) for c in m.contents], author_name=m.author_name
        )
        for m in messages
    ]


async def awaited(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, awaited: a synchronous ``fn`` (an agent's ``run``, a tool) runs in
    a worker thread (and an awaitable it returns is awaited)."""
    if _is_async(fn):
        return await fn(*args, **kwargs)
    result = await in_thread(fn, *args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result
