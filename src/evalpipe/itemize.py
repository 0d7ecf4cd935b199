"""The items stage: transcripts in, finished EvalItems out.

Pure functions, no I/O: a transcript (one target call), what its dataset row expects, the item's
id and metadata and, for a recorded conversation, its recorded query side go in; the items come out
whole, so no later stage patches them.

An agent call gives one item: the user query followed by the response messages. A workflow call
gives an overall item (the query, every upstream agent's tool activity, the final output) and one
item per agent turn (what the agent received, then what it produced). Naming and splitting rules
are MAF's (shared spec §3, §8); docs/maf-compatibility.md lists where evalpipe differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evalpipe.items import AgentExpectation, EvalItem, ExpectedToolCall
from evalpipe.messages import (
    Message,
    ToolDefinition,
    user_message,
)
from evalpipe.transcripts import ExecutorRun, TargetRun, WorkflowRun

__all__ = [
    "NO_EXPECTATIONS",
    "AgentExpectations",
    "Expectations",
    "PerAgentExpectations",
    "RunItems",
    "SplitAt",
    "UpstreamContext",
    "WorkflowItems",
    "agent_expectations",
    "agent_item",
    "build_workflow_items",
    "merge_tool_snapshots",
    "per_query_expectations",
    "workflow_items",
]

UpstreamContext = Literal["received", "user_only"]
"""What a per-agent item's query side holds: ``"received"`` (default) everything the agent was given,
including upstream agents' output; ``"user_only"`` only the user messages of it (MAF's behaviour)."""


@dataclass(frozen=True, slots=True)
class SplitAt:
    """A splitter that cuts the conversation at a fixed index: what the agent received is the query
    side, what it produced the response side (the per-agent split under ``upstream_context="received"``).
    """

    index: int

    def __call__(self, conversation: list[Message]) -> tuple[list[Message], list[Message]]:
        return list(conversation[: self.index]), list(conversation[self.index :])


@dataclass(frozen=True, slots=True)
class Expectations:
    """What one query (dataset row) expects; stamped on every item its calls become."""

    expected_output: str | None = None
    """The reference answer (of the agent, or of the whole workflow)."""
    expected_tool_calls: Sequence[ExpectedToolCall] | None = None
    """The tool calls the agent (the workflow as a whole) should make."""
    context: str | None = None
    """Grounding context for the evaluators."""
    agents: Mapping[str, AgentExpectation] = field(default_factory=dict)
    """Workflows: per-agent expectations, by agent name."""


NO_EXPECTATIONS = Expectations()
_TOOL_KINDS = ("function_call", "function_result")


def merge_tool_snapshots(
    snapshots: Iterable[ToolDefinition], messages: Sequence[Message] = ()
) -> list[ToolDefinition]:
    """One definition per tool name, first seen wins.

    Raises:
        ValueError: when a tool called in ``messages`` appears with two different input schemas.
    """
    by_name: dict[str, ToolDefinition] = {}
    for tool in snapshots:
        first = by_name.setdefault(tool.name, tool)
        if (
            first is not tool
            and first.parameters != tool.parameters
            and any(c.name == tool.name for m in messages for c in m.function_calls)
        ):
            raise ValueError(
                f"Tool '{tool.name}' was called in a conversation where it had two different input "
                "schemas, so its definition is ambiguous. Use distinct tool names, evaluate the "
                "segments separately, or pass explicit definitions with tools=."
            )
    return list(by_name.values())


def agent_item(
    run: TargetRun,
    *,
    item_id: str,
    expect: Expectations = NO_EXPECTATIONS,
    recorded_head: Sequence[Message] | None = None,
    declared_tools: Sequence[ToolDefinition] = (),
    tools: Sequence[ToolDefinition] | None = None,
    split: Any = None,
    strict_tools: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> EvalItem:
    """The item of one agent call: the user query (or the recorded query side) and the response.

    Tool definitions come from ``tools`` (an override, ``[]`` for none), else the snapshots the
    response carried, else the agent's declared tools. A tool called with two different schemas
    raises ValueError when ``strict_tools`` and otherwise makes the item errored
    ("ToolSchemaConflict").
    """
    conversation = (
        [*recorded_head, *run.messages]
        if recorded_head is not None and run.ok
        else [user_message(run.query), *run.messages]
    )
    error_code, error_message = run.error_code, run.error_message
    item_tools: Sequence[ToolDefinition] | None
    if tools is not None:
        item_tools = tools  # copied by the item
    else:
        snapshots = run.tools if run.tools is not None else declared_tools
        try:
            item_tools = merge_tool_snapshots(snapshots, run.messages) or None
        except ValueError as exc:
            if strict_tools:
                raise
            item_tools = None
            error_code = error_code or "ToolSchemaConflict"
            error_message = error_message or str(exc)
    return EvalItem(
        conversation,
        item_tools,
        expect.context,
        expect.expected_output,
        expect.expected_tool_calls,
        split,
        item_id=item_id,
        query_index=run.query_index,
        repetition=run.repetition,
        usage=run.usage,
        error_code=error_code,
        error_message=error_message,
        metadata=metadata or {},
    )


@dataclass(slots=True)
class RunItems:
    """The items of one workflow call: its overall item and one item per agent turn."""

    overall: EvalItem | None
    per_agent: list[EvalItem]


def workflow_items(
    run: WorkflowRun,
    *,
    item_id: str,
    expect: Expectations = NO_EXPECTATIONS,
    split: Any = None,
    upstream_context: UpstreamContext = "received",
    include_overall: bool = True,
    include_per_agent: bool = True,
    metadata: Mapping[str, Any] | None = None,
    turn_metadata: Callable[[ExecutorRun], Mapping[str, Any]] | None = None,
) -> RunItems:
    """The items of one workflow call.

    Overall item (id ``item_id``, ``agent`` None): the user query, the tool calls and results of
    every agent whose messages are not the output (their texts left out), then the final output;
    the tools of all agents; the workflow-level expectations; the run's usage and error.

    Per-agent item (id ``"{item_id}/{agent}"``, and ``"{item_id}/{agent}/{k}"`` for the agent's k-th
    further turn): what the agent received (all of it, or only its user messages under
    ``upstream_context="user_only"``) followed by what it produced, split between the two unless
    ``split`` is given; the agent's tools, usage, error and own expectations; ``metadata`` plus
    ``turn_metadata(turn)`` and the executor id.

    Raises:
        ValueError: for an unknown ``upstream_context``.
    """
    if upstream_context not in ("received", "user_only"):
        raise ValueError(
            f"upstream_context must be 'received' or 'user_only', got {upstream_context!r}."
        )
    base = dict(metadata or {})
    user = Message("user", [run.query])
    overall = None
    if include_overall:
        upstream = [  # the other agents' tool calls and results, their texts dropped
            Message(m.role, tool_parts)
            for turn in run.executors
            if turn.produced != run.output
            for m in turn.produced
            if (tool_parts := [c for c in m.contents if c.type in _TOOL_KINDS])
        ]
        turn_tools = [turn.tools for turn in run.executors if turn.tools is not None]
        overall = EvalItem(
            [user, *upstream, *run.output],
            merge_tool_snapshots(t for tools in turn_tools for t in tools) if turn_tools else None,
            expect.context,
            expect.expected_output,
            expect.expected_tool_calls,
            split,
            item_id=item_id,
            query_index=run.query_index,
            repetition=run.repetition,
            usage=run.usage,
            error_code=run.error_code,
            error_message=run.error_message,
            metadata=dict(base),
        )
    per_agent: list[EvalItem] = []
    if include_per_agent:
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
            item_split = split
            meta: dict[str, Any] = {**base, "executor_id": turn.executor_id}
            if turn_metadata is not None:
                meta.update(turn_metadata(turn))
            if item_split is None and upstream_context == "received":
                item_split = SplitAt(len(received))
                meta["split_at"] = len(received)
            wanted = expect.agents.get(agent)
            per_agent.append(
                EvalItem(
                    [*received, *turn.produced],
                    turn.tools,
                    None,
                    wanted.expected_output if wanted is not None else None,
                    wanted.expected_tool_calls if wanted is not None else None,
                    item_split,
                    item_id=f"{item_id}/{agent}" + (f"/{visit}" if visit else ""),
                    query_index=run.query_index,
                    repetition=run.repetition,
                    agent=agent,
                    usage=turn.usage,
                    error_code=turn.error_code,
                    error_message=turn.error_message,
                    metadata=meta,
                )
            )
    return RunItems(overall, per_agent)


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

    @property
    def count(self) -> int:
        """How many items there are, overall and per agent."""
        return len(self.overall) + sum(len(v) for v in self.per_agent.values())

    def add(self, items: RunItems) -> None:
        """Append one call's items."""
        if items.overall is not None:
            self.overall.append(items.overall)
        for item in items.per_agent:
            self.per_agent.setdefault(str(item.agent), []).append(item)


# -- per-agent expectations in MAF's shapes ----------------------------------------------------


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
    specs = [rows.get(qi) or {} for qi in range(max(rows, default=-1) + 1)]
    out: dict[str, AgentExpectations] = {}
    for agent in dict.fromkeys(a for row in specs for a in row):
        columns = {
            name: [_field(row.get(agent), name) for row in specs]
            for name in ("expected_output", "expected_tool_calls")
        }
        given = {k: v for k, v in columns.items() if any(x is not None for x in v)}
        if given:
            out[agent] = AgentExpectations.model_validate(given)
    return out


def _pick(values: Sequence[Any] | None, qi: int) -> Any:
    return values[qi % len(values)] if values else None


def per_query_expectations(
    n: int,
    *,
    expected_output: Sequence[str | None] | None = None,
    expected_tool_calls: Sequence[Sequence[ExpectedToolCall] | None] | None = None,
    context: str | Sequence[str | None] | None = None,
    per_agent: PerAgentExpectations | None = None,
) -> list[Expectations]:
    """MAF's per-query argument lists as one Expectations per query (a str context is every
    query's)."""
    agents = agent_expectations(per_agent)
    out = []
    for qi in range(n):
        wanted = {}
        for name, spec in agents.items():
            output = _pick(spec.expected_output, qi)
            calls = _pick(spec.expected_tool_calls, qi)
            if output is not None or calls is not None:
                wanted[name] = AgentExpectation(
                    expected_output=output, expected_tool_calls=list(calls) if calls else calls
                )
        out.append(
            Expectations(
                expected_output=_pick(expected_output, qi),
                expected_tool_calls=_pick(expected_tool_calls, qi),
                context=context if isinstance(context, str) or context is None else context[qi],
                agents=wanted,
            )
        )
    return out


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
    item_ids: Sequence[str] | None = None,
    metadata: Sequence[Mapping[str, Any]] | None = None,
    turn_metadata: Callable[[int, ExecutorRun], Mapping[str, Any]] | None = None,
) -> WorkflowItems:
    """The items of many workflow runs (see :func:`workflow_items`); expectations are MAF's
    per-query lists, stamped by each run's ``query_index``.

    ``item_ids`` and ``metadata`` are per run (default: the run's position, no metadata);
    ``turn_metadata(i, turn)`` adds to the per-agent items of run ``i``.
    """
    size = max((r.query_index for r in runs), default=-1) + 1
    expectations = per_query_expectations(
        size,
        expected_output=expected_output,
        expected_tool_calls=expected_tool_calls,
        per_agent=per_agent_expectations,
    )
    items = WorkflowItems()
    for index, run in enumerate(runs):
        items.add(
            workflow_items(
                run,
                item_id=item_ids[index] if item_ids is not None else str(index),
                expect=expectations[run.query_index] if expectations else NO_EXPECTATIONS,
                split=conversation_split,
                upstream_context=upstream_context,
                include_overall=include_overall,
                include_per_agent=include_per_agent,
                metadata=metadata[index] if metadata is not None else None,
                turn_metadata=None if turn_metadata is None else partial(turn_metadata, index),
            )
        )
    return items
