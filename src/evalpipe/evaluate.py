"""``evaluate_agent`` and ``evaluate_workflow``: run the target, build items, evaluate them.

The stages are separate functions so the Prefect pipeline calls the same code as tasks: for agents
``run_agent`` → ``build_agent_items`` → ``run_evaluators``, for workflows ``run_workflow`` →
``build_workflow_items`` → ``evaluate_workflow_items``. Validation messages, naming and counting are
MAF's (shared spec §7, §8, §10); runs are concurrent and failures are errored items, and a downstream
workflow agent's item holds what it received (docs/maf-compatibility.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evalpipe.evaluators.base import Evaluator
from evalpipe.evaluators.local import LocalEvaluator
from evalpipe.items import EvalItem, ExpectedToolCall
from evalpipe.messages import Message, ToolDefinition
from evalpipe.results import EvalItemResult, EvalResults
from evalpipe.targets.base import (
    TargetRun,
    agent_name,
    agent_tools,
    call_agent,
    merge_tool_snapshots,
    response_messages,
    response_tools,
    response_usage,
)
from evalpipe.targets.maf import is_maf_workflow, workflow_run_from_events
from evalpipe.targets.workflow import (
    WorkflowRun,
    as_workflow,
    call_workflow,
    workflow_agent_names,
    workflow_name,
)

__all__ = [
    "AgentExpectations",
    "PerAgentExpectations",
    "SplitAt",
    "UpstreamContext",
    "WorkflowItems",
    "agent_expectations",
    "build_agent_items",
    "build_workflow_items",
    "errored_results",
    "evaluate_agent",
    "evaluate_workflow",
    "evaluate_workflow_items",
    "resolve_evaluators",
    "run_agent",
    "run_evaluators",
    "run_workflow",
]

DEFAULT_MAX_CONCURRENCY = 8


def resolve_evaluators(evaluators: Any) -> list[Evaluator]:
    """Providers from what the user passed: adjacent bare callables are grouped into one LocalEvaluator.

    Raises:
        TypeError: for anything that is neither an Evaluator nor a callable.
    """
    if isinstance(evaluators, Evaluator) or callable(evaluators):
        evaluators = [evaluators]
    resolved: list[Evaluator] = []
    checks: list[Any] = []
    for ev in evaluators:
        if isinstance(ev, Evaluator):
            if checks:
                resolved.append(LocalEvaluator(*checks))
                checks = []
            resolved.append(ev)
        elif callable(ev):
            checks.append(ev)
        else:
            raise TypeError(f"Expected an Evaluator or callable, got {type(ev).__name__}")
    if checks:
        resolved.append(LocalEvaluator(*checks))
    return resolved


def errored_results(
    provider: str, items: Sequence[EvalItem], eval_name: str, error: str
) -> EvalResults:
    """A provider's "failed" result: every item errored ("EvaluatorError") with ``error``."""
    return EvalResults(
        provider=provider,
        eval_id="",
        run_id=eval_name,
        status="failed",
        result_counts={"passed": 0, "failed": 0, "errored": len(items)},
        error=error,
        items=[
            EvalItemResult(
                item_id=item.item_id if item.item_id is not None else str(i),
                status="error",
                error_code="EvaluatorError",
                error_message=error,
            )
            for i, item in enumerate(items)
        ],
        input_items=list(items),
    )


async def run_evaluators(
    evaluators: Sequence[Evaluator], items: Sequence[EvalItem], eval_name: str
) -> list[EvalResults]:
    """Run every provider concurrently; one EvalResults each, in provider order.

    A provider that raises gives a "failed" EvalResults whose items are errored ("EvaluatorError"),
    so the other providers' results are kept.
    """
    suffix = len(evaluators) > 1

    async def one(ev: Evaluator) -> EvalResults:
        name = f"{eval_name} ({ev.name})" if suffix else eval_name
        try:
            return await ev.evaluate(items, eval_name=name)
        except Exception as exc:
            return errored_results(ev.name, items, name, f"{type(exc).__name__}: {exc}")

    return list(await asyncio.gather(*(one(ev) for ev in evaluators)))


async def run_agent(
    agent: Any,
    queries: Sequence[str],
    *,
    num_repetitions: int = 1,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    semaphore: asyncio.Semaphore | None = None,
    on_run: Callable[[TargetRun], None] | None = None,
) -> list[TargetRun]:
    """Call the agent on every query, ``num_repetitions`` times, at most ``max_concurrency`` at once.

    Runs are returned in repetition-major order (rep 0: Q1..Qn, rep 1: Q1..Qn, ...) whatever order
    they finish in. A run that raises is returned with error_code "AgentError". ``semaphore`` adds a
    bound shared with other callers; ``on_run`` is called as each run finishes.
    """
    return await _run_pool(
        lambda query, qi, rep: call_agent(
            agent, query, query_index=qi, repetition=rep, semaphore=semaphore
        ),
        queries,
        num_repetitions,
        max_concurrency,
        on_run,
    )


def _listify(value: str | Sequence[Any] | None) -> list[Any] | None:
    """A str is one value; a sequence is copied into a list; None stays None."""
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


RunT = TypeVar("RunT")


async def _run_pool(
    call: Callable[[str, int, int], Awaitable[RunT]],
    queries: Sequence[str],
    num_repetitions: int,
    max_concurrency: int,
    on_run: Callable[[RunT], None] | None,
) -> list[RunT]:
    """``call(query, query_index, repetition)`` for every query and repetition, at most
    ``max_concurrency`` at once; results in repetition-major order whatever order they finish in."""
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}.")
    n = len(queries)
    total = n * num_repetitions
    runs: list[RunT | None] = [None] * total
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < total:
            index = next_index
            next_index += 1
            rep, qi = divmod(index, n)
            run = await call(queries[qi], qi, rep)
            runs[index] = run
            if on_run is not None:
                on_run(run)

    await asyncio.gather(*(worker() for _ in range(min(max_concurrency, total))))
    return [r for r in runs if r is not None]


def _normalize_expected_tool_calls(value: Any) -> list[list[ExpectedToolCall]] | None:
    if value is None:
        return None
    value = list(value)
    if value and isinstance(value[0], ExpectedToolCall):
        return [list(value)]
    return [list(v) for v in value]


def build_agent_items(
    runs: Sequence[TargetRun],
    *,
    declared_tools: Sequence[ToolDefinition] = (),
    tools: Sequence[Any] | None = None,
    expected_output: Sequence[str | None] | None = None,
    expected_tool_calls: Sequence[Sequence[ExpectedToolCall]] | None = None,
    context: str | Sequence[str | None] | None = None,
    conversation_split: Any = None,
    strict_tools: bool = False,
) -> list[EvalItem]:
    """One EvalItem per run: the user query followed by the response messages.

    Expectations are stamped by query index; tool definitions come from ``tools`` (an override,
    ``[]`` for none), else the snapshots the response carried, else the agent's declared tools.
    A tool called with two different schemas raises ValueError when ``strict_tools`` and otherwise
    makes that item errored ("ToolSchemaConflict").
    """
    override = [ToolDefinition.coerce(t) for t in tools] if tools is not None else None
    items: list[EvalItem] = []
    for index, run in enumerate(runs):
        qi = run.query_index
        conversation = [Message("user", [run.query]), *run.messages]
        error_code, error_message = run.error_code, run.error_message
        item_tools: list[ToolDefinition] | None
        if override is not None:
            item_tools = override
        else:
            snapshots = run.tools if run.tools is not None else list(declared_tools)
            calls = [c for m in run.messages for c in m.function_calls]
            try:
                item_tools = merge_tool_snapshots(snapshots, calls) or None
            except ValueError as exc:
                if strict_tools:
                    raise
                item_tools = None
                error_code = error_code or "ToolSchemaConflict"
                error_message = error_message or str(exc)
        if isinstance(context, str) or context is None:
            item_context = context
        else:
            item_context = context[qi % len(context)]
        items.append(
            EvalItem(
                conversation,
                item_tools,
                item_context,
                expected_output[qi % len(expected_output)] if expected_output else None,
                list(expected_tool_calls[qi % len(expected_tool_calls)])
                if expected_tool_calls
                else None,
                conversation_split,
                item_id=str(index),
                query_index=qi,
                repetition=run.repetition,
                usage=run.usage,
                error_code=error_code,
                error_message=error_message,
            )
        )
    return items


async def evaluate_agent(
    *,
    agent: Any = None,
    queries: str | Sequence[str] | None = None,
    expected_output: str | Sequence[str | None] | None = None,
    expected_tool_calls: Sequence[ExpectedToolCall]
    | Sequence[Sequence[ExpectedToolCall]]
    | None = None,
    responses: Any = None,
    evaluators: Any,
    eval_name: str | None = None,
    context: str | Sequence[str | None] | None = None,
    conversation_split: Any = None,
    num_repetitions: int = 1,
    tools: Sequence[Any] | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
) -> list[EvalResults]:
    """Evaluate an agent over queries, or its pre-existing responses; one EvalResults per provider.

    Args:
        agent: Any object with ``name`` and ``async run(messages)`` (a MAF agent works).
        queries: The user queries (a str is one query).
        expected_output: Reference answers, one per query (stamped by query index).
        expected_tool_calls: Expected calls per query (a flat list is one query's worth).
        responses: Pre-existing responses (objects with ``.messages``), one per query; the agent is
            then not run and ``num_repetitions`` is ignored. A response may also be a recorded
            conversation: a list of messages in evalpipe/MAF, OpenAI chat-completions or Foundry
            agent format (``evalpipe.recorded``). One with a user message is the item's whole
            conversation (its system message and earlier turns kept), and when every response is
            one, ``queries`` may be left out (each query is its last user message).
        evaluators: Evaluators and/or bare checks; adjacent checks share one LocalEvaluator.
        eval_name: Defaults to ``"Eval: {agent name}"``; with several providers each gets
            ``" ({provider})"`` appended.
        context: Grounding context for every item, or one per query (an evalpipe addition).
        conversation_split: A split strategy stamped on every item.
        num_repetitions: How many times each query runs.
        tools: Tool definitions for evaluation only, overriding captured ones; ``[]`` for none.
        max_concurrency: At most this many agent runs at once (MAF runs them one at a time).

    Raises:
        ValueError: for inconsistent arguments (MAF's messages), or conflicting tool schemas in
            pre-existing responses.
        TypeError: for an evaluator that is neither an Evaluator nor a callable.
    """
    query_list = _listify(queries)
    expected_list = _listify(expected_output)
    etc = _normalize_expected_tool_calls(expected_tool_calls)
    response_list: list[Any] | None = None
    if responses is not None:
        response_list = list(responses) if isinstance(responses, list | tuple) else [responses]

    if num_repetitions < 1:
        raise ValueError(f"num_repetitions must be >= 1, got {num_repetitions}.")
    n = len(query_list) if query_list is not None else 0
    if query_list is not None and expected_list is not None and len(expected_list) != n:
        raise ValueError(f"Got {n} queries but {len(expected_list)} expected_output values.")
    if query_list is not None and etc is not None and len(etc) != n:
        raise ValueError(f"Got {n} queries but {len(etc)} expected_tool_calls lists.")
    if query_list is not None and response_list is not None and len(response_list) != n:
        raise ValueError(f"Got {n} queries but {len(response_list)} responses.")
    recorded = _recorded_responses(response_list) if response_list is not None else {}
    whole = {i for i, (head, _, _) in recorded.items() if head is not None}
    if response_list is not None and query_list is None and len(whole) == len(response_list):
        # every response is a whole recorded conversation: its query is its last user message
        query_list = [recorded[i][2] for i in range(len(response_list))]
        n = len(query_list)
        if expected_list is not None and len(expected_list) != n:
            raise ValueError(f"Got {n} responses but {len(expected_list)} expected_output values.")
        if etc is not None and len(etc) != n:
            raise ValueError(f"Got {n} responses but {len(etc)} expected_tool_calls lists.")
    if response_list is not None and query_list is None:
        raise ValueError(
            "Provide 'queries' alongside 'responses' so the conversation can be constructed for "
            "evaluation. For Responses API evaluation by response ID, use "
            "evaluate_traces(response_ids=...) from the azure-ai package."
        )
    if query_list is not None and response_list is None and agent is None:
        raise ValueError(
            "Provide 'agent' when using 'queries' to run the agent. To evaluate pre-existing "
            "responses without an agent, use 'responses=' instead."
        )
    if query_list is None:
        raise ValueError("Provide either 'queries' (with 'agent') or 'responses' (or both).")
    if context is not None and not isinstance(context, str) and len(context) != n:
        raise ValueError(f"Got {n} queries but {len(context)} context values.")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}.")

    providers = resolve_evaluators(evaluators)
    declared = agent_tools(agent) if agent is not None else []
    if response_list is not None:
        runs = []
        for i, (query, response) in enumerate(zip(query_list, response_list, strict=True)):
            if i in recorded:
                messages = recorded[i][1]
            else:
                try:
                    messages = response_messages(response)
                except TypeError as exc:
                    raise TypeError(f"responses[{i}]: {exc}") from exc
            runs.append(
                TargetRun(
                    query_index=i,
                    repetition=0,
                    query=query,
                    messages=messages,
                    tools=response_tools(response),
                    usage=response_usage(response),
                )
            )
    else:
        runs = await run_agent(
            agent, query_list, num_repetitions=num_repetitions, max_concurrency=max_concurrency
        )
    items = build_agent_items(
        runs,
        declared_tools=declared,
        tools=tools,
        expected_output=expected_list,
        expected_tool_calls=etc,
        context=context,
        conversation_split=conversation_split,
        strict_tools=response_list is not None,
    )
    for i, (head, _, _) in recorded.items():
        if head is not None:
            # a recorded conversation keeps its own query side (system message, earlier turns)
            items[i].conversation = [*head, *items[i].conversation[1:]]
    name = eval_name or f"Eval: {agent_name(agent) if agent is not None else 'agent'}"
    return await run_evaluators(providers, items, name)


def _recorded_responses(
    responses: Sequence[Any],
) -> dict[int, tuple[list[Message] | None, list[Message], str]]:
    """The responses given as message lists, by index: ``(query side, response side, query)``.

    A list of message dicts (evalpipe/MAF, OpenAI chat-completions or Foundry agent messages, one
    format for all) or of messages that holds a user message is a whole recorded conversation; a
    list of dicts without one is only the response (query side None, as MAF's responses).

    Raises:
        ValueError: naming ``responses[i]`` and the first mismatch for a list that fits no format.
    """
    from evalpipe.recorded import (
        RecordedFormatError,
        convert_messages,
        detect_format,
        split_recording,
    )

    raw = {
        i: r
        for i, r in enumerate(responses)
        if isinstance(r, list) and r and all(isinstance(m, Mapping) for m in r)
    }
    try:
        fmt = detect_format((f"responses[{i}]", [(f"responses[{i}]", r)]) for i, r in raw.items())
    except RecordedFormatError as exc:
        raise ValueError(str(exc)) from None
    out: dict[int, tuple[list[Message] | None, list[Message], str]] = {}
    for i, response in enumerate(responses):
        if i in raw and fmt is not None:
            messages = convert_messages(raw[i], fmt)
        elif isinstance(response, list) and response:
            try:
                messages = [Message.coerce(m) for m in response]
            except TypeError:
                continue
        else:
            continue
        if any(m.role == "user" for m in messages):
            out[i] = split_recording(messages, None)
        elif i in raw:
            out[i] = (None, messages, "")
    return out


# -- workflows ----------------------------------------------------------------------------------

UpstreamContext = Literal["received", "user_only"]
"""What a per-agent item's query side holds: ``"received"`` (default) everything the agent was given,
including upstream agents' output; ``"user_only"`` only the user messages of it (MAF's behaviour)."""

_NO_AGENT_DATA = (
    "No agent executor data found in the workflow result. Ensure the workflow uses "
    "AgentExecutor-based agents."
)


@dataclass(frozen=True, slots=True)
class SplitAt:
    """A splitter that cuts the conversation at a fixed index: what the agent received is the query
    side, what it produced the response side (the per-agent split under ``upstream_context="received"``).
    """

    index: int

    def __call__(self, conversation: list[Message]) -> tuple[list[Message], list[Message]]:
        return list(conversation[: self.index]), list(conversation[self.index :])


class AgentExpectations(BaseModel):
    """What one agent of a workflow is expected to do, one entry per query (None: no expectation)."""

    model_config = ConfigDict(extra="forbid")

    expected_output: list[str | None] | None = None
    """The agent's reference answer per query."""
    expected_tool_calls: list[list[ExpectedToolCall] | None] | None = None
    """The tool calls the agent should make, per query."""

    @field_validator("expected_output", mode="before")
    @classmethod
    def _one_query(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("expected_tool_calls", mode="before")
    @classmethod
    def _flat_list(cls, value: Any) -> Any:
        if value is None:
            return None
        value = list(value)
        if value and (isinstance(value[0], ExpectedToolCall | Mapping | str)):
            return [value]
        return value


PerAgentExpectations = (
    Mapping[str, Any] | Mapping[int, Mapping[str, Any]] | Sequence[Mapping[str, Any] | None]
)
"""Per-agent expectations in either shape: agent name -> ``AgentExpectations`` (or its dict), one
entry per query; or per query (a list, or a dict keyed by query index) -> agent name -> one query's
``{"expected_output": ..., "expected_tool_calls": [...]}`` (a dataset row's ``agents``)."""


def _field(spec: Any, name: str) -> Any:
    return spec.get(name) if isinstance(spec, Mapping) else getattr(spec, name, None)


def agent_expectations(value: PerAgentExpectations | None) -> dict[str, AgentExpectations]:
    """Per-agent expectations as agent name -> AgentExpectations, from either accepted shape.

    Raises:
        ValueError: for an entry that is not an expectation (pydantic's message names the field).
    """
    if value is None:
        return {}
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {
            str(agent): spec
            if isinstance(spec, AgentExpectations)
            else AgentExpectations.model_validate(spec)
            for agent, spec in value.items()
        }
    rows: dict[int, Any] = (
        {int(k): v for k, v in value.items()}
        if isinstance(value, Mapping)
        else dict(enumerate(value))
    )
    n = max(rows, default=-1) + 1
    outputs: dict[str, list[str | None]] = {}
    calls: dict[str, list[list[ExpectedToolCall] | None]] = {}
    for qi, row in rows.items():
        for agent, spec in (row or {}).items():
            output = _field(spec, "expected_output")
            if output is not None:
                outputs.setdefault(agent, [None] * n)[qi] = output
            expected = _field(spec, "expected_tool_calls")
            if expected is not None:
                calls.setdefault(agent, [None] * n)[qi] = [
                    c if isinstance(c, ExpectedToolCall) else ExpectedToolCall.model_validate(c)
                    for c in expected
                ]
    return {
        agent: AgentExpectations(
            expected_output=outputs.get(agent), expected_tool_calls=calls.get(agent)
        )
        for agent in [*outputs, *(a for a in calls if a not in outputs)]
    }


class WorkflowItems(BaseModel):
    """The items of a workflow evaluation: overall items and per-agent items, in run order."""

    model_config = ConfigDict(extra="forbid")

    overall: list[EvalItem] = Field(default_factory=list)
    """One item per run: the user query, every agent's tool calls and results, the final output."""
    per_agent: dict[str, list[EvalItem]] = Field(default_factory=dict)
    """Agent name -> one item per turn the agent took, in run order (agents in first-seen order)."""

    @model_validator(mode="after")
    def _restore_splits(self) -> WorkflowItems:
        # Splitters are not serialized; a per-agent item records its received/produced boundary in
        # metadata["split_at"], so the items keep their split through JSON.
        for items in self.per_agent.values():
            for item in items:
                cut = item.metadata.get("split_at")
                if item.split_strategy is None and isinstance(cut, int):
                    item.split_strategy = SplitAt(cut)
        return self


async def run_workflow(
    workflow: Any,
    queries: Sequence[str],
    *,
    num_repetitions: int = 1,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    semaphore: asyncio.Semaphore | None = None,
    on_run: Callable[[WorkflowRun], None] | None = None,
) -> list[WorkflowRun]:
    """Run the workflow on every query, ``num_repetitions`` times, at most ``max_concurrency`` at once.

    Runs come back repetition-major (rep 0: Q1..Qn, rep 1: Q1..Qn, ...) whatever order they finish
    in. A run that raises is kept with error_code "WorkflowError"; a failing executor is recorded
    inside its run. ``semaphore`` adds a bound shared with other callers; ``on_run`` is called as
    each run finishes.

    Raises:
        ValueError: for ``max_concurrency < 1``.
        TypeError: for something that is not a workflow.
    """
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}.")
    target = as_workflow(workflow)
    return await _run_pool(
        lambda query, qi, rep: call_workflow(
            target, query, query_index=qi, repetition=rep, semaphore=semaphore
        ),
        queries,
        num_repetitions,
        max_concurrency,
        on_run,
    )


def _tool_activity(messages: Sequence[Message]) -> list[Message]:
    """Only the tool calls and tool results of ``messages`` (texts dropped)."""
    out: list[Message] = []
    for message in messages:
        kept = [c for c in message.contents if c.type in ("function_call", "function_result")]
        if kept:
            out.append(Message(message.role, kept))
    return out


def _merged_tools(run: WorkflowRun) -> list[ToolDefinition] | None:
    by_name: dict[str, ToolDefinition] = {}
    seen = False
    for turn in run.executors:
        if turn.tools is not None:
            seen = True
            for tool in turn.tools:
                by_name.setdefault(tool.name, tool)
    return list(by_name.values()) if seen else None


def _pick(values: Sequence[Any] | None, qi: int) -> Any:
    return values[qi % len(values)] if values else None


def build_workflow_items(
    runs: Sequence[WorkflowRun],
    *,
    expected_output: Sequence[str | None] | None = None,
    expected_tool_calls: Sequence[Sequence[ExpectedToolCall] | None] | None = None,
    per_agent_expectations: PerAgentExpectations | None = None,
    conversation_split: Any = None,
    upstream_context: UpstreamContext = "received",
    include_overall: bool = True,
    include_per_agent: bool = True,
) -> WorkflowItems:
    """Overall and per-agent EvalItems from workflow runs; expectations are stamped by query index.

    Overall item of run *i* (``item_id`` ``"i"``, ``agent`` None): the user query, the tool calls and
    results of every agent whose messages are not the output (their texts left out), then the final
    output; the tools of all agents; the workflow-level expectations; the run's usage and error.

    Per-agent item (``item_id`` ``"i/agent"``, and ``"i/agent/k"`` for the agent's k-th further
    turn in that run): what the agent received (all of it, or only its user messages under
    ``upstream_context="user_only"``) followed by what it produced, split between the two unless
    ``conversation_split`` is given; the agent's tools, usage and error; its own expectations
    (``per_agent_expectations`` in either shape of ``PerAgentExpectations``).
    """
    if upstream_context not in ("received", "user_only"):
        raise ValueError(
            f"upstream_context must be 'received' or 'user_only', got {upstream_context!r}."
        )
    expectations = agent_expectations(per_agent_expectations)
    items = WorkflowItems()
    for index, run in enumerate(runs):
        qi = run.query_index
        user = Message("user", [run.query])
        if include_overall:
            upstream = [
                m
                for turn in run.executors
                if turn.produced != run.output
                for m in _tool_activity(turn.produced)
            ]
            etc = _pick(expected_tool_calls, qi)
            items.overall.append(
                EvalItem(
                    [user, *upstream, *run.output],
                    _merged_tools(run),
                    None,
                    _pick(expected_output, qi),
                    list(etc) if etc is not None else None,
                    conversation_split,
                    item_id=str(index),
                    query_index=qi,
                    repetition=run.repetition,
                    usage=run.usage,
                    error_code=run.error_code,
                    error_message=run.error_message,
                )
            )
        if not include_per_agent:
            continue
        visits: dict[str, int] = {}
        for turn in run.executors:
            if turn.agent is None:
                continue
            agent = turn.agent
            visit = visits.get(agent, 0)
            visits[agent] = visit + 1
            received = list(turn.received) or [user]
            if upstream_context == "user_only":
                received = [m for m in received if m.role == "user"] or received
            split = conversation_split
            metadata: dict[str, Any] = {"executor_id": turn.executor_id}
            if split is None and upstream_context == "received":
                split = SplitAt(len(received))
                metadata["split_at"] = len(received)
            wanted = expectations.get(agent)
            agent_etc = _pick(wanted.expected_tool_calls, qi) if wanted is not None else None
            items.per_agent.setdefault(agent, []).append(
                EvalItem(
                    [*received, *turn.produced],
                    turn.tools,
                    None,
                    _pick(wanted.expected_output, qi) if wanted is not None else None,
                    list(agent_etc) if agent_etc is not None else None,
                    split,
                    item_id=f"{index}/{agent}" + (f"/{visit}" if visit else ""),
                    query_index=qi,
                    repetition=run.repetition,
                    agent=agent,
                    usage=turn.usage,
                    error_code=turn.error_code,
                    error_message=turn.error_message,
                    metadata=metadata,
                )
            )
    return items


async def _evaluate_group(ev: Evaluator, items: Sequence[EvalItem], name: str) -> EvalResults:
    try:
        return await ev.evaluate(items, eval_name=name)
    except Exception as exc:
        return errored_results(ev.name, items, name, f"{type(exc).__name__}: {exc}")


async def evaluate_workflow_items(
    evaluators: Sequence[Evaluator], workflow_items: WorkflowItems, eval_name: str
) -> list[EvalResults]:
    """Evaluate each agent's items and the overall items with every provider; one result per provider.

    Each top-level result is the overall evaluation (``"{eval_name} — overall"``) with
    ``sub_results`` keyed by agent name (``"{eval_name} — {agent}"``); with several providers each
    name gets ``" ({provider})"`` appended. Without overall items the top level is MAF's synthetic
    aggregate (``run_id="aggregate"``, summed counts). A provider that raises on a group gives that
    group a "failed" result with errored items; everything else is kept.

    Raises:
        ValueError: when there are no items at all (MAF's message).
    """
    groups = {agent: items for agent, items in workflow_items.per_agent.items() if items}
    if not groups and not workflow_items.overall:
        raise ValueError(_NO_AGENT_DATA)
    suffix = len(evaluators) > 1

    async def one(ev: Evaluator) -> EvalResults:
        tail = f" ({ev.name})" if suffix else ""
        names = list(groups)
        subs = await asyncio.gather(
            *(_evaluate_group(ev, groups[a], f"{eval_name} — {a}{tail}") for a in names)
        )
        sub_results = dict(zip(names, subs, strict=True))
        if workflow_items.overall:
            top = await _evaluate_group(ev, workflow_items.overall, f"{eval_name} — overall{tail}")
            top.sub_results = sub_results
            return top
        return EvalResults(
            provider=ev.name,
            eval_id="aggregate",
            run_id="aggregate",
            status="completed" if all(s.status == "completed" for s in subs) else "partial",
            result_counts={
                "passed": sum(s.passed for s in subs),
                "failed": sum(s.failed for s in subs),
                "errored": sum(s.errored for s in subs),
            },
            sub_results=sub_results,
        )

    return list(await asyncio.gather(*(one(ev) for ev in evaluators)))


def _normalize_expectations(
    value: PerAgentExpectations | None, n: int | None, agents: Sequence[str] | None
) -> dict[str, AgentExpectations] | None:
    if value is None:
        return None
    if n is None:
        raise ValueError(
            "Provide 'queries' when using 'per_agent_expectations'; it is not supported with "
            "'workflow_result' only."
        )
    out = agent_expectations(value)
    for agent, spec in out.items():
        if agents is not None and agent not in agents:
            raise ValueError(
                f"per_agent_expectations[{agent!r}]: the workflow has no agent {agent!r} "
                f"(agents: {', '.join(agents)})."
            )
        if spec.expected_output is not None and len(spec.expected_output) != n:
            raise ValueError(
                f"per_agent_expectations[{agent!r}]: got {n} queries but "
                f"{len(spec.expected_output)} expected_output values."
            )
        if spec.expected_tool_calls is not None and len(spec.expected_tool_calls) != n:
            raise ValueError(
                f"per_agent_expectations[{agent!r}]: got {n} queries but "
                f"{len(spec.expected_tool_calls)} expected_tool_calls lists."
            )
    return out


def _runs_from_result(workflow: Any, workflow_result: Any) -> list[WorkflowRun]:
    if isinstance(workflow_result, WorkflowRun):
        return [workflow_result]
    if (
        isinstance(workflow_result, Sequence)
        and workflow_result
        and all(isinstance(r, WorkflowRun) for r in workflow_result)
    ):
        return list(workflow_result)
    if isinstance(workflow_result, Sequence):
        maf = workflow if is_maf_workflow(workflow) else getattr(workflow, "_instance", None)
        run = workflow_run_from_events(workflow_result, workflow=maf)
        return [run.model_copy(update={"workflow": workflow_name(workflow)})]
    raise TypeError(
        f"workflow_result must be a WorkflowRun, a list of them, or a MAF WorkflowRunResult; "
        f"got {type(workflow_result).__name__}"
    )


async def evaluate_workflow(
    *,
    workflow: Any,
    workflow_result: Any = None,
    queries: str | Sequence[str] | None = None,
    expected_output: str | Sequence[str | None] | None = None,
    expected_tool_calls: Sequence[ExpectedToolCall]
    | Sequence[Sequence[ExpectedToolCall]]
    | None = None,
    per_agent_expectations: PerAgentExpectations | None = None,
    evaluators: Any,
    eval_name: str | None = None,
    include_overall: bool = True,
    include_per_agent: bool = True,
    conversation_split: Any = None,
    upstream_context: UpstreamContext = "received",
    num_repetitions: int = 1,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
) -> list[EvalResults]:
    """Evaluate a multi-agent workflow per agent and overall; one EvalResults per provider.

    Args:
        workflow: An evalpipe workflow (``SequentialWorkflow``, ``RouterWorkflow``, any object with
            ``name`` and ``async run(query) -> WorkflowRun``), a MAF ``Workflow``, or a
            ``MAFWorkflow``.
        workflow_result: A finished run to evaluate without running the workflow: a WorkflowRun,
            a list of them, or a MAF ``WorkflowRunResult``. Ignored when ``queries`` is given.
        queries: The user queries (a str is one query).
        expected_output: The workflow's reference answer per query (stamped on overall items).
        expected_tool_calls: Tool calls the workflow as a whole should make, per query (overall
            items hold every agent's tool calls).
        per_agent_expectations: Agent name -> ``AgentExpectations`` (or a dict with
            ``expected_output`` / ``expected_tool_calls``, one entry per query), or one
            ``{agent: {...}}`` per query (see PerAgentExpectations).
        evaluators: Evaluators and/or bare checks; adjacent checks share one LocalEvaluator.
        eval_name: Defaults to ``"Workflow Eval: {workflow name}"`` (``"Workflow Eval: Workflow"``
            for a MAF workflow, as MAF).
        include_overall: Evaluate the final output of each run.
        include_per_agent: Evaluate each agent's turns.
        conversation_split: A split strategy stamped on every item.
        upstream_context: ``"received"`` (default) or ``"user_only"`` (MAF): see UpstreamContext.
        num_repetitions: How many times each query runs.
        max_concurrency: At most this many workflow runs at once (MAF runs them one at a time).

    Raises:
        ValueError: for inconsistent arguments (MAF's messages) or no items to evaluate.
        TypeError: for an evaluator that is neither an Evaluator nor a callable.
    """
    query_list = _listify(queries)
    expected_list = _listify(expected_output)
    etc = _normalize_expected_tool_calls(expected_tool_calls)
    if workflow_result is None and query_list is None:
        raise ValueError("Provide either 'workflow_result' or 'queries'.")
    if (expected_list is not None or etc is not None) and query_list is None:
        which = "expected_output" if expected_list is not None else "expected_tool_calls"
        raise ValueError(
            f"Provide 'queries' when using '{which}'; '{which}' is not supported with "
            "'workflow_result' only."
        )
    n = len(query_list) if query_list is not None else None
    if expected_list is not None and len(expected_list) != n:
        raise ValueError(f"Got {n} queries but {len(expected_list)} expected_output values.")
    if etc is not None and len(etc) != n:
        raise ValueError(f"Got {n} queries but {len(etc)} expected_tool_calls lists.")
    if num_repetitions < 1:
        raise ValueError(f"num_repetitions must be >= 1, got {num_repetitions}.")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}.")
    agents = workflow_agent_names(workflow) if per_agent_expectations else None
    expectations = _normalize_expectations(per_agent_expectations, n, agents)
    providers = resolve_evaluators(evaluators)

    if query_list is not None:
        runs = await run_workflow(
            workflow, query_list, num_repetitions=num_repetitions, max_concurrency=max_concurrency
        )
    else:
        runs = _runs_from_result(workflow, workflow_result)
    items = build_workflow_items(
        runs,
        expected_output=expected_list,
        expected_tool_calls=etc,
        per_agent_expectations=expectations,
        conversation_split=conversation_split,
        upstream_context=upstream_context,
        include_overall=include_overall,
        include_per_agent=include_per_agent,
    )
    name = eval_name or f"Workflow Eval: {workflow_name(workflow)}"
    return await evaluate_workflow_items(providers, items, name)
