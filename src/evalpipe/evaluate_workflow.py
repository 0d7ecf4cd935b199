"""``evaluate_workflow``: run a multi-agent workflow, build per-agent and overall items, evaluate each.

The stages are separate functions (``run_workflow`` → ``build_workflow_items`` →
``evaluate_workflow_items``) so the Prefect pipeline calls the same code as tasks, as for agents.
Naming, counting and validation messages are MAF's (shared spec §10, §7); the deliberate differences
(what a downstream agent's item holds, per-agent expectations, failures as errored items, concurrent
runs) are in docs/maf-compatibility.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalpipe.evaluate import (
    DEFAULT_MAX_CONCURRENCY,
    _errored_results,
    _normalize_expected_tool_calls,
    resolve_evaluators,
)
from evalpipe.evaluators.base import Evaluator
from evalpipe.items import EvalItem, ExpectedToolCall
from evalpipe.messages import Message, ToolDefinition
from evalpipe.results import EvalResults
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
    "SplitAt",
    "UpstreamContext",
    "WorkflowItems",
    "build_workflow_items",
    "evaluate_workflow",
    "evaluate_workflow_items",
    "run_workflow",
]

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


class WorkflowItems(BaseModel):
    """The items of a workflow evaluation: overall items and per-agent items, in run order."""

    model_config = ConfigDict(extra="forbid")

    overall: list[EvalItem] = Field(default_factory=list)
    """One item per run: the user query, every agent's tool calls and results, the final output."""
    per_agent: dict[str, list[EvalItem]] = Field(default_factory=dict)
    """Agent name -> one item per turn the agent took, in run order (agents in first-seen order)."""


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
    n = len(queries)
    total = n * num_repetitions
    runs: list[WorkflowRun | None] = [None] * total
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < total:
            index = next_index
            next_index += 1
            rep, qi = divmod(index, n)
            run = await call_workflow(
                target, queries[qi], query_index=qi, repetition=rep, semaphore=semaphore
            )
            runs[index] = run
            if on_run is not None:
                on_run(run)

    await asyncio.gather(*(worker() for _ in range(min(max_concurrency, total))))
    return [r for r in runs if r is not None]


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
    per_agent_expectations: Mapping[str, AgentExpectations] | None = None,
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
    ``conversation_split`` is given; the agent's tools, usage and error; its own expectations.
    """
    if upstream_context not in ("received", "user_only"):
        raise ValueError(
            f"upstream_context must be 'received' or 'user_only', got {upstream_context!r}."
        )
    expectations = dict(per_agent_expectations or {})
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
            if split is None and upstream_context == "received":
                split = SplitAt(len(received))
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
                    metadata={"executor_id": turn.executor_id},
                )
            )
    return items


async def _evaluate_group(ev: Evaluator, items: Sequence[EvalItem], name: str) -> EvalResults:
    try:
        return await ev.evaluate(items, eval_name=name)
    except Exception as exc:
        return _errored_results(ev.name, items, name, f"{type(exc).__name__}: {exc}")


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
    value: Mapping[str, Any] | None, n: int | None, agents: Sequence[str] | None
) -> dict[str, AgentExpectations] | None:
    if value is None:
        return None
    if n is None:
        raise ValueError(
            "Provide 'queries' when using 'per_agent_expectations'; it is not supported with "
            "'workflow_result' only."
        )
    out: dict[str, AgentExpectations] = {}
    for agent, raw in value.items():
        if agents is not None and agent not in agents:
            raise ValueError(
                f"per_agent_expectations[{agent!r}]: the workflow has no agent {agent!r} "
                f"(agents: {', '.join(agents)})."
            )
        spec = raw if isinstance(raw, AgentExpectations) else AgentExpectations.model_validate(raw)
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
        out[agent] = spec
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
    per_agent_expectations: Mapping[str, AgentExpectations | Mapping[str, Any]] | None = None,
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
            ``expected_output`` / ``expected_tool_calls``, one entry per query).
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
    query_list = (
        [queries] if isinstance(queries, str) else list(queries) if queries is not None else None
    )
    expected_list = (
        [expected_output]
        if isinstance(expected_output, str)
        else list(expected_output)
        if expected_output is not None
        else None
    )
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
