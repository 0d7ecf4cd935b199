"""Transcripts: what one target call recorded, for an agent (TargetRun) or a workflow (WorkflowRun).

A transcript is the record every later stage reads: the items stage splits it into EvalItems, the
journal stores it as JSON so a run resumes, and runs.parquet keeps it so a run can be re-scored.
Targets, recorded datasets, OpenTelemetry traces and Foundry threads all produce these types; this
module depends on ``messages`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evalpipe.messages import Message, ToolDefinition

__all__ = [
    "ExecutorRun",
    "RunUsage",
    "TargetKind",
    "TargetRun",
    "Transcript",
    "WorkflowRun",
    "load_transcript",
    "sum_usage",
]

TargetKind = Literal["agent", "workflow"]
"""What a target is: one agent (a call gives a TargetRun) or a workflow (a WorkflowRun)."""


class RunUsage(BaseModel):
    """What one target call cost: tokens when the response reports them, and wall time."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int | None = None
    """Prompt tokens, when reported."""
    output_tokens: int | None = None
    """Completion tokens, when reported."""
    total_tokens: int | None = None
    """Total tokens, when reported."""
    latency_seconds: float | None = None
    """Wall-clock time of the call, measured by evalpipe."""


def sum_usage(usages: Sequence[RunUsage], latency_seconds: float | None = None) -> RunUsage:
    """Token counts added up (None when no part reported that count), with the given latency."""

    def total(field: str) -> int | None:
        values = [v for u in usages if (v := getattr(u, field)) is not None]
        return sum(values) if values else None

    counts = {field: total(field) for field in ("input_tokens", "output_tokens", "total_tokens")}
    return RunUsage(**counts, latency_seconds=latency_seconds)


class _Outcome(BaseModel):
    """What every call and turn records: its cost and, when it has no usable output, why."""

    model_config = ConfigDict(extra="forbid")

    usage: RunUsage = Field(default_factory=RunUsage)
    """Tokens reported and the wall time measured by evalpipe (a workflow run: the executors'
    tokens summed)."""
    error_code: str | None = None
    """Why there is no usable output: "AgentError" (an agent call raised); a turn's
    "ExecutorError" (it raised), "UpstreamError" (not run because an agent before it failed) or
    "Interrupted" (the workflow stopped while it ran); a workflow run's "ExecutorError",
    "WorkflowError", "RoutingError" or "MaxHopsExceeded"."""
    error_message: str | None = None
    """What went wrong, for people."""

    @property
    def ok(self) -> bool:
        """The call (turn, run) finished with a usable output."""
        return self.error_code is None


class _Call(_Outcome):
    """One call of a target on one query: which query and repetition, and when it ran."""

    query_index: int = 0
    """Position of the query (dataset row) in the query set."""
    repetition: int = 0
    """Which repetition (0-based)."""
    query: str
    """The user query sent to the target."""
    started_at: datetime | None = None
    """When the call (its last attempt) started, in UTC, as evalpipe measured it; None for a
    recording."""
    ended_at: datetime | None = None
    """When the call ended, in UTC; None for a recording."""


class TargetRun(_Call):
    """One call of an agent: which query and repetition, what came back, or how it failed."""

    messages: list[Message] = Field(default_factory=list)
    """The response messages (empty when the call failed)."""
    tools: list[ToolDefinition] | None = None
    """Tool snapshots the response carried (None when it carried none)."""
    attempts: int = 1
    """How many times the call was made (transient errors are retried)."""


class ExecutorRun(_Outcome):
    """One executor's turn inside a workflow run: what it received and what it produced."""

    executor_id: str
    """The executor's id in the workflow (for built-in workflows and MAF agents: the agent name)."""
    agent: str | None = None
    """The agent this executor runs, used to group per-agent results; None for a non-agent step."""
    received: list[Message] = Field(default_factory=list)
    """The messages the agent was given: the user query and, downstream, what upstream agents said."""
    produced: list[Message] = Field(default_factory=list)
    """The messages the agent produced (tool calls, tool results, answer); empty when it failed."""
    tools: list[ToolDefinition] | None = None
    """Schema snapshots of the tools the agent could call (None: unknown)."""
    attempts: int = 1
    """How many times the agent was called (transient errors are retried when configured)."""


class WorkflowRun(_Call):
    """One run of a workflow on one query: the ordered executor transcripts and the final output.

    Round-trips through ``model_dump_json()`` / ``model_validate_json()``.
    """

    workflow: str | None = None
    """The workflow's name."""
    executors: list[ExecutorRun] = Field(default_factory=list)
    """Every executor turn, in the order the turns started."""
    output: list[Message] = Field(default_factory=list)
    """The workflow's final output messages."""

    def for_agent(self, agent: str) -> list[ExecutorRun]:
        """The turns of one agent, in order."""
        return [e for e in self.executors if e.agent == agent]


Transcript = TargetRun | WorkflowRun
"""What one target call recorded."""


def load_transcript(kind: TargetKind, text: str) -> Transcript:
    """A transcript from its JSON (as the journal and runs.parquet store it).

    Raises:
        pydantic.ValidationError: when ``text`` is not a transcript of that kind.
    """
    return (WorkflowRun if kind == "workflow" else TargetRun).model_validate_json(text)
