"""Multi-agent workflows: what one run of a workflow recorded (WorkflowRun), and built-in compositions.

A workflow target takes a query and returns a ``WorkflowRun``: the transcript of every executor in the
order they ran (what each agent received, what it produced, the tools it had, what it cost) and the
workflow's final output. ``SequentialWorkflow`` (a pipeline of agents) and ``RouterWorkflow`` (each
agent may hand off to another, with a bounded number of hops) are built in; MAF workflows are read
from their event stream by ``evalpipe.targets.maf.MAFWorkflow``.
"""

from __future__ import annotations

import functools
import itertools
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, get_type_hints, runtime_checkable

from evalpipe._internal.calls import Slots, is_call_failure
from evalpipe._internal.maf import is_maf_instance
from evalpipe.messages import Message
from evalpipe.targets.base import (
    agent_name,
    agent_tools,
    guarded_call,
    is_maf_agent,
    is_maf_workflow,
    response_messages,
    response_tools,
    response_usage,
    run_agent,
)
from evalpipe.targets.maf import MAFWorkflow
from evalpipe.transcripts import ExecutorRun, WorkflowRun, sum_usage

__all__ = [
    "RouterWorkflow",
    "SequentialWorkflow",
    "Workflow",
    "agent_signs",
    "as_workflow",
    "call_workflow",
    "handoff_target",
    "is_workflow",
    "target_from_factory",
    "workflow_agent_names",
    "workflow_identity",
    "workflow_name",
    "workflow_signs",
]


@runtime_checkable
class Workflow(Protocol):
    """Anything evalpipe can run as a workflow: a name and ``async run(query) -> WorkflowRun``."""

    name: str

    async def run(self, query: str) -> WorkflowRun: ...


_HANDOFF = re.compile(
    r"\b(?:handoff|hand off|route)\s*(?:to)?\s*:\s*([\w.\- ]+?)\s*(?:[.\n]|$)", re.I
)


def handoff_target(messages: Sequence[Message]) -> str | None:
    """The agent an agent's turn hands off to: ``"HANDOFF: <name>"`` (or ``"ROUTE: <name>"``) in its
    last assistant text; None ends the workflow."""
    for message in reversed(messages):
        if message.role == "assistant" and message.text:
            match = _HANDOFF.search(message.text)
            return match.group(1).strip() if match else None
    return None


Route = Callable[[str, list[Message]], str | None]
"""``(agent name, the messages its turn produced) -> next agent name, or None to stop``."""


class RouterWorkflow:
    """A router/handoff workflow: the router starts, and each agent's turn may pick who goes next.

    Every agent receives the user query followed by all turns so far. After each turn ``route``
    (default: ``handoff_target``, reading ``"HANDOFF: <name>"`` in the agent's answer) names the next
    agent, or None to stop; the last agent's messages are the output. A route to an unknown agent
    ends the run with "RoutingError"; more than ``max_hops`` handoffs end it with "MaxHopsExceeded".
    When an agent raises, the run stops with its turn recorded as "ExecutorError".

    Args:
        router: The agent that starts (it may be handed back to).
        agents: The agents it can hand off to.
        max_hops: The most handoffs one run may take (default 4).
        route: Picks the next agent from a finished turn.
        name: The workflow's name (default ``"router"``).
        attempts: Tries per agent call; transient errors are retried (default 1: no retry).
        retry_wait: The first backoff wait in seconds (a server's Retry-After wins).

    Raises:
        ValueError: for duplicate agent names, ``max_hops < 1`` or ``attempts < 1``.
    """

    def __init__(
        self,
        router: Any,
        agents: Sequence[Any],
        *,
        max_hops: int = 4,
        route: Route | None = None,
        name: str = "router",
        attempts: int = 1,
        retry_wait: float = 0.5,
    ) -> None:
        if max_hops < 1:
            raise ValueError(f"max_hops must be >= 1, got {max_hops}.")
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}.")
        self._agents: dict[str, Any] = {}
        for agent in [router, *agents]:
            key = agent_name(agent)
            if key in self._agents:
                raise ValueError(
                    f"{type(self).__name__}: two agents are named {key!r}; give each agent a "
                    "distinct name, since per-agent results are keyed by it"
                )
            self._agents[key] = agent
        self.name = name
        self.attempts = attempts
        self.retry_wait = retry_wait
        self.max_hops = max_hops
        self._route: Route = route or (lambda _name, produced: handoff_target(produced))

    @property
    def agent_names(self) -> list[str]:
        """The agents' names, in the order given (the router's first)."""
        return list(self._agents)

    async def _turn(self, name: str, received: list[Message]) -> ExecutorRun:
        """One agent's turn; what it raises becomes the turn's "ExecutorError". A transient error
        is retried as ``call_agent`` retries it, so one throttled call does not cost the turns
        before it. Latency is the last attempt's."""
        agent = self._agents[name]
        turn = functools.partial(ExecutorRun, executor_id=name, agent=name, received=received)

        def done(response: Any, tries: int, latency: float) -> ExecutorRun:
            return turn(
                produced=response_messages(response),
                tools=response_tools(response) or agent_tools(agent) or None,
                usage=response_usage(response, latency),
                attempts=tries,
            )

        return await guarded_call(
            lambda: run_agent(agent, list(received)),
            done,
            lambda **failure: turn(tools=agent_tools(agent) or None, **failure),
            code="ExecutorError",
            attempts=self.attempts,
            retry_wait=self.retry_wait,
        )

    async def run(self, query: str) -> WorkflowRun:
        """Run the router on ``query`` and follow the handoffs."""
        started = time.perf_counter()
        conversation = [Message("user", [query])]
        executors: list[ExecutorRun] = []
        error: tuple[str, str] | None = None
        current = next(iter(self._agents))
        for hops in itertools.count(1):  # a turn, then (when it hands off) a hop
            turn = await self._turn(current, conversation)
            executors.append(turn)
            if not turn.ok:
                error = ("ExecutorError", f"executor {current!r} failed: {turn.error_message}")
                break
            conversation = [*conversation, *turn.produced]
            try:
                nxt = self._route(current, list(turn.produced))
            except BaseException as exc:
                if not is_call_failure(exc):
                    raise
                error = (
                    "RoutingError",
                    f"route raised after {current!r}: {type(exc).__name__}: {exc}",
                )
                break
            if nxt is None:
                break
            if nxt not in self._agents:
                known = ", ".join(repr(n) for n in self._agents)
                error = (
                    "RoutingError",
                    f"{current!r} handed off to unknown agent {nxt!r} (known: {known})",
                )
                break
            if hops > self.max_hops:
                error = ("MaxHopsExceeded", f"more than max_hops={self.max_hops} handoffs")
                break
            current = nxt
        error_code, error_message = error or (None, None)
        return WorkflowRun(
            query=query,
            workflow=self.name,
            executors=executors,
            output=list(executors[-1].produced) if error is None else [],
            usage=sum_usage([e.usage for e in executors], time.perf_counter() - started),
            error_code=error_code,
            error_message=error_message,
        )


class SequentialWorkflow(RouterWorkflow):
    """A pipeline of agents: each one receives the conversation so far and adds its turn.

    The first agent gets the user query; every later agent gets the user query followed by everything
    the agents before it produced (MAF's ``SequentialBuilder`` / ``context_mode="full"``). The output
    is the last agent's messages. When an agent raises, the run stops: that turn is recorded with
    "ExecutorError" and every later agent with "UpstreamError" (not run).

    Args:
        agents: The agents, in order; any object with ``name`` and ``async run(messages)``.
        name: The workflow's name (default ``"sequential"``).
        attempts: Tries per agent call; transient errors are retried (default 1: no retry).
        retry_wait: The first backoff wait in seconds (a server's Retry-After wins).

    Raises:
        ValueError: for no agents, two agents with the same name, or ``attempts < 1``.
    """

    def __init__(
        self,
        agents: Sequence[Any],
        *,
        name: str = "sequential",
        attempts: int = 1,
        retry_wait: float = 0.5,
    ) -> None:
        if not agents:
            raise ValueError("SequentialWorkflow needs at least one agent")
        order = [agent_name(agent) for agent in agents]
        after = dict(itertools.pairwise(order))
        super().__init__(
            agents[0],
            agents[1:],
            max_hops=len(order),
            route=lambda current, _produced: after.get(current),
            name=name,
            attempts=attempts,
            retry_wait=retry_wait,
        )

    async def run(self, query: str) -> WorkflowRun:
        """Run every agent in turn on ``query``."""
        run = await super().run(query)
        failed = run.executors[-1].executor_id
        run.executors += [
            ExecutorRun(
                executor_id=name,
                agent=name,
                tools=agent_tools(agent) or None,
                error_code="UpstreamError",
                error_message=f"not run: upstream executor {failed!r} failed",
            )
            for name, agent in list(self._agents.items())[len(run.executors) :]
        ]
        return run


def as_workflow(workflow: Any) -> Workflow:
    """The evalpipe Workflow for what the user passed: a MAF workflow is wrapped in MAFWorkflow.

    Raises:
        TypeError: for an object that is neither.
    """
    if is_maf_workflow(workflow):
        return MAFWorkflow(workflow)
    if isinstance(workflow, Workflow):
        return workflow
    raise TypeError(
        f"cannot run {type(workflow).__name__} as a workflow: pass an evalpipe workflow "
        "(SequentialWorkflow, RouterWorkflow, or any object with `name` and "
        "`async run(query) -> WorkflowRun`), a MAF Workflow, or MAFWorkflow(factory)"
    )


def target_from_factory(factory: Callable[[], Any], built: Any) -> Any:
    """The target a factory stands for, given the object its first call ``built``: a MAF workflow
    factory becomes ``MAFWorkflow(factory)`` (a fresh workflow per call, since a MAF workflow
    refuses concurrent runs; the first one is reused for its agent names); anything else is
    ``built`` itself, shared by every call."""
    if is_maf_workflow(built):
        return MAFWorkflow(factory, first=built)
    return built


def is_workflow(target: Any) -> bool:
    """Whether ``target`` is a workflow (and not an agent): a MAF workflow (by type, or of MAF's
    shape: ``executors`` a mapping and a ``run``), or an object whose ``run`` takes a query and
    returns a WorkflowRun (built-in workflows and MAFWorkflow declare ``agent_names``; your own may
    instead annotate ``run`` with ``-> WorkflowRun``). A MAF agent never is."""
    return bool(workflow_signs(target)) and not is_maf_agent(target)


def workflow_signs(target: Any) -> list[str]:
    """What makes ``target`` look like a workflow, for people (empty: nothing does)."""
    if is_maf_workflow(target):
        return ["a MAF Workflow" if is_maf_instance(target, "Workflow") else "`executors`"]
    run = getattr(target, "run", None)
    if run is None:
        return []
    if hasattr(target, "agent_names"):
        return ["`agent_names`"]
    try:
        hints = get_type_hints(run)
    except Exception:
        return []
    return ["`run() -> WorkflowRun`"] if hints.get("return") is WorkflowRun else []


def agent_signs(target: Any) -> list[str]:
    """What makes ``target`` look like an agent, for people (empty: only ``name`` and ``run``)."""
    if is_maf_agent(target):
        return ["a MAF agent"]
    # what MAF agents declare and workflows do not (evalpipe reads an agent's tools from them)
    return [f"`{name}`" for name in ("default_options", "mcp_tools") if hasattr(target, name)]


def workflow_name(workflow: Any) -> str:
    """The workflow's display name (MAF workflows: the class name, as MAF's default eval name)."""
    if is_maf_workflow(workflow):
        return type(workflow).__name__
    return str(getattr(workflow, "name", None) or type(workflow).__name__)


def workflow_agent_names(workflow: Any) -> list[str] | None:
    """The names per-agent results will be keyed by, when the workflow declares them up front."""
    names = getattr(as_workflow(workflow), "agent_names", None)
    return list(names) if isinstance(names, list | tuple) else None


def workflow_identity(workflow: Any) -> str:
    """A stable string naming the workflow: ``"workflow:{name}({agent},{agent},...)"``."""
    names = workflow_agent_names(workflow)
    agents = ",".join(names) if names is not None else "?"
    return f"workflow:{workflow_name(workflow)}({agents})"


async def call_workflow(
    workflow: Any,
    query: str,
    *,
    query_index: int,
    repetition: int,
    semaphore: Slots | None = None,
    call_timeout: float | None = None,
) -> WorkflowRun:
    """Run the workflow on one query; whatever it raises becomes a WorkflowRun with
    "WorkflowError" ("TargetTimeout" past ``call_timeout`` seconds: the run is cancelled)."""
    target = as_workflow(workflow)

    def done(run: Any, tries: int, latency: float) -> WorkflowRun:
        if not isinstance(run, WorkflowRun):
            raise TypeError(f"workflow.run() returned {type(run).__name__}, expected WorkflowRun")
        update: dict[str, Any] = {
            "query_index": query_index,
            "repetition": repetition,
            "query": query,
        }
        if run.usage.latency_seconds is None:
            update["usage"] = run.usage.model_copy(update={"latency_seconds": latency})
        return run.model_copy(update=update)

    def failed(attempts: int, **failure: Any) -> WorkflowRun:  # a workflow call is not retried
        return WorkflowRun(
            query_index=query_index,
            repetition=repetition,
            query=query,
            workflow=workflow_name(workflow),
            **failure,
        )

    return await guarded_call(
        lambda: target.run(query),
        done,
        failed,
        code="WorkflowError",
        semaphore=semaphore,
        call_timeout=call_timeout,
    )
