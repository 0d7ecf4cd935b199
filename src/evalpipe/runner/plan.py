"""The run plan: everything a run needs, validated and built once before the first target call.

A plan is immutable: the rows (samples), the calls (one per row and repetition, in
repetition-major order, each with its content address for the journal), the target, the
providers, how transcripts become items, and for a suite the gates and the run directory.
``evaluate_agent`` / ``evaluate_workflow`` build one from their arguments (:func:`in_process_plan`),
``evalpipe run`` and the Prefect flow from a suite (``runner.prepare.prepare_suite``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evalpipe._internal.maf import is_maf_instance
from evalpipe.evaluators.base import AgentScoped, BatchedEvaluator, Evaluator
from evalpipe.itemize import NO_EXPECTATIONS, Expectations, UpstreamContext
from evalpipe.journal import call_key, content_key
from evalpipe.messages import Message, ToolDefinition
from evalpipe.secrets import secrets_of
from evalpipe.spend import TARGET, Budget, Price
from evalpipe.targets.base import agent_name, agent_tools, is_maf_agent
from evalpipe.targets.maf import MAFWorkflow
from evalpipe.targets.workflow import (
    RouterWorkflow,
    SequentialWorkflow,
    agent_signs,
    as_workflow,
    is_workflow,
    workflow_agent_names,
    workflow_identity,
    workflow_name,
    workflow_signs,
)
from evalpipe.transcripts import TargetKind, Transcript

__all__ = [
    "Call",
    "ItemIds",
    "Placement",
    "Row",
    "RunPlan",
    "Target",
    "in_process_plan",
    "make_calls",
    "resolve_target",
]

ItemIds = Literal["position", "row"]
"""How items are named: ``position`` (MAF's: the call's place in the run, ``"0"``, ``"1"``, ...) or
``row`` (suites: ``"{row id}#{repetition}"``, stable across runs and resumes)."""

Placement = Literal["given", "resume", "new"]
"""How a suite run's directory was chosen (:attr:`RunPlan.placement`)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One sample source: a dataset row, or one query of ``evaluate_agent``."""

    index: int
    """Position in the query set."""
    query: str
    key: str
    """Content address of the row: its id and everything it holds."""
    id: str | None = None
    """The dataset row's id (None for in-process queries)."""
    tags: tuple[str, ...] = ()
    expect: Expectations = NO_EXPECTATIONS
    recorded: Transcript | None = None
    """A recorded row's transcript (repetition 0): no target is called for it."""
    recorded_head: tuple[Message, ...] | None = None
    """A recorded agent conversation's query side (system message, earlier turns)."""


@dataclass(frozen=True, slots=True)
class Call:
    """One target call of the run: which row, which repetition, and its content address."""

    position: int
    """Place in the run's repetition-major order."""
    row_index: int
    repetition: int
    key: str


def make_calls(identity: str, rows: Sequence[Row], repetitions: int) -> tuple[Call, ...]:
    """Every (row, repetition) as its own call, repetition-major (rep 0: rows 0..n-1, rep 1: ...)."""
    n = len(rows)
    return tuple(
        Call(rep * n + i, i, rep, call_key(identity, row.key, rep))
        for rep in range(repetitions)
        for i, row in enumerate(rows)
    )


@dataclass(frozen=True, slots=True)
class Target:
    """The target as the run calls it: one object for every call (see :func:`resolve_target`)."""

    kind: TargetKind
    obj: Any
    """An agent (``run(messages)``) or an evalpipe Workflow (``run(query) -> WorkflowRun``)."""
    name: str
    declared_tools: tuple[ToolDefinition, ...] = ()
    """An agent's declared tool snapshots (the fallback when a response carries none)."""
    agent_names: tuple[str, ...] | None = None
    """A workflow's agents, when it declares them up front."""
    identity: str = ""
    """What the journal keys calls by (with the suite's target spec and version)."""


def resolve_target(obj: Any, *, kind: TargetKind | None = None) -> Target:
    """The run's target from an agent, a workflow, or what a factory built.

    Which objects are shared by every call, and why: agents (evalpipe's, MAF's ``Agent``, any
    object with ``run(messages)``) are reused, since one call does not change what the next one
    sees (pass a factory that returns a fresh object if yours keeps state between calls); evalpipe
    workflows are reused for the same reason. A MAF ``Workflow`` instance refuses concurrent runs,
    so an instance runs one call at a time, and a ``MAFWorkflow(factory)`` builds a fresh workflow
    per call (that is what a suite target that is a factory of MAF workflows becomes).

    ``kind="workflow"`` takes any object with ``name`` and ``run`` as a workflow (as
    ``evaluate_workflow`` does) and ``kind="agent"`` any object with ``run`` as an agent (as
    ``evaluate_agent`` does, MAF's rule: what is passed as ``agent=`` is an agent, a ``MagicMock()``
    double included). Without a kind (suites), an object is a workflow when ``is_workflow`` says
    so; one that looks like both is refused rather than guessed.

    Raises:
        TypeError: for something that is neither an agent nor a workflow, a MAF workflow or an
            evalpipe workflow given as an agent, or (without a kind) an object that looks like both.
    """
    if kind is None:
        as_workflow_signs = workflow_signs(obj)
        as_agent_signs = agent_signs(obj)
        if as_workflow_signs and as_agent_signs and not is_maf_agent(obj):
            raise TypeError(
                f"cannot tell whether {type(obj).__name__} is an agent or a workflow: it has "
                f"{', '.join(as_workflow_signs)} like a workflow and {', '.join(as_agent_signs)} "
                "like an agent. Make the target one of them (a test double: MagicMock(spec=...) "
                "of one class), or evaluate it with evaluate_agent(agent=...) or "
                "evaluate_workflow(workflow=...), which take it as that."
            )
    if kind == "workflow" or (kind is None and is_workflow(obj)):
        workflow = as_workflow(obj)
        names = workflow_agent_names(workflow)
        return Target(
            kind="workflow",
            obj=workflow,
            name=workflow_name(obj),
            agent_names=tuple(names) if names is not None else None,
            identity=workflow_identity(workflow),
        )
    if kind == "agent" and (
        is_maf_instance(obj, "Workflow")
        or isinstance(obj, (SequentialWorkflow, RouterWorkflow, MAFWorkflow))
    ):
        raise TypeError(
            f"{type(obj).__name__} is a workflow, not an agent: evaluate it with "
            "evaluate_workflow(workflow=...)"
        )
    if not callable(getattr(obj, "run", None)):
        raise TypeError(
            f"cannot run {type(obj).__name__}: an agent has `name` and `async run(messages)`, a "
            "workflow `name` and `async run(query) -> WorkflowRun`"
        )
    return Target(
        kind="agent",
        obj=obj,
        name=agent_name(obj),
        declared_tools=tuple(agent_tools(obj)),
        identity="agent",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunPlan:
    """A validated run (see the module docstring)."""

    name: str
    """The evaluation's name: results are named after it (``"{name} ({provider})"`` with several
    providers, ``"{name} — {agent}"`` per agent of a workflow)."""
    kind: TargetKind
    target: Target | None
    """None when no target is called (every row recorded, or re-scoring)."""
    identity: str
    """What the journal keys calls by (the target's, with a suite's target spec and version)."""
    rows: tuple[Row, ...]
    repetitions: int
    providers: tuple[Evaluator, ...]
    calls: tuple[Call, ...]
    split: Any = None
    """The splitter stamped on items (None: each item's default)."""
    upstream_context: UpstreamContext = "received"
    include_overall: bool = True
    include_per_agent: bool = True
    tools_override: tuple[ToolDefinition, ...] | None = None
    """Agents: tool definitions for evaluation only (``evaluate_agent(tools=...)``)."""
    strict_tools: bool = False
    """Agents: a tool with two schemas raises (pre-existing responses) instead of erroring the item."""
    call_attempts: int = 1
    """Tries per call for transient errors."""
    call_timeout: float | None = None
    """Seconds one call may take (None: unbounded); past it the call is a ``TargetTimeout``."""
    concurrency: int = 1
    """The most target calls in flight for the whole run, whatever runs its shards (a suite's
    ``concurrency``, split by the flow across the shards that run at once)."""
    item_ids: ItemIds = "position"
    stored: Mapping[str, Transcript] | None = None
    """Re-scoring: the transcripts of an earlier run by call key (the target is not called)."""
    eval_key: str | None = None
    """A stable key for server-side evaluations (Foundry): a resumed or retried run reuses them."""
    suite_record: Mapping[str, Any] | None = None
    """For a suite run, what its directory's marker records of the suite (the suite with its
    secrets masked, and its fingerprint); the suite itself stops at preparation."""
    gates: tuple[Any, ...] = ()
    run_dir: Path | None = None
    placement: Placement = "given"
    """How ``run_dir`` was chosen: named by the caller (``given``: never moved), or by
    ``runner.prepare.place``, resuming the newest unfinished run of the target when there is one
    (``resume``) or always a new directory (``new``): chosen again when the run takes it
    (``runner.prepare.claim``), since another run may have started meanwhile."""
    rescored_from: Path | None = None
    secrets: frozenset[str] = frozenset()
    """Every secret value the run knows (inline keys, header values, the variables its ``*_env``
    fields name): scrubbed from whatever it stores, logs or prints (``evalpipe.secrets``)."""
    budget: Budget | None = None
    """What the run may spend (a suite's ``budget``); None: its spend is only counted."""
    prices: Mapping[str, Price] = field(default_factory=dict)
    """Dollars per million tokens by model (a suite's ``prices``)."""
    target_model: str = TARGET
    """The ``prices`` key of the target's calls: an ``openai`` target's model, else ``target``."""

    name_providers: bool = False
    """Append ``" ({provider})"`` to every result name even with one provider (suite runs: a
    result's name does not change when a provider is added); MAF's API names it only with several."""

    def provider_tail(self, provider: Evaluator) -> str:
        """What a provider's result names end with: ``" ({provider})"`` or nothing."""
        return f" ({provider.name})" if self.name_providers or len(self.providers) > 1 else ""

    def eval_name(self, provider: Evaluator) -> str:
        """The name a provider's results carry (see :meth:`provider_tail`)."""
        return f"{self.name}{self.provider_tail(provider)}"

    def item_id(self, call: Call) -> str:
        """The id of a call's (overall) item."""
        if self.item_ids == "row":
            return f"{self.rows[call.row_index].id}#{call.repetition}"
        return str(call.position)

    def metadata(self, call: Call) -> dict[str, Any]:
        """What each item of a call carries in its metadata: the dataset row's id and tags, and
        (suites) the call's content address."""
        row = self.rows[call.row_index]
        meta: dict[str, Any] = {}
        if row.id is not None:
            meta["row_id"] = row.id
            meta["tags"] = list(row.tags)
        if self.item_ids == "row":
            meta["run_id"] = call.key
        return meta

    def shards(self, size: int) -> list[tuple[Call, ...]]:
        """The calls cut into shards of ``size``, in repetition-major order."""
        return [self.calls[i : i + size] for i in range(0, len(self.calls), size)]

    def batched(self, provider: Evaluator) -> BatchedEvaluator | None:
        """The provider's batched (server-side) evaluator, seen through an ``agents:`` scope."""
        inner = provider.inner if isinstance(provider, AgentScoped) else provider
        return inner if isinstance(inner, BatchedEvaluator) else None


def in_process_plan(
    *,
    name: str,
    target: Target | None,
    kind: TargetKind,
    queries: Sequence[str],
    providers: Sequence[Evaluator],
    expectations: Sequence[Expectations] | None = None,
    repetitions: int = 1,
    recorded: Sequence[Transcript | None] | None = None,
    recorded_heads: Sequence[Sequence[Message] | None] | None = None,
    split: Any = None,
    upstream_context: UpstreamContext = "received",
    include_overall: bool = True,
    include_per_agent: bool = True,
    tools_override: Sequence[ToolDefinition] | None = None,
    strict_tools: bool = False,
    row_ids: Sequence[str] | None = None,
    tags: Sequence[Sequence[str]] | None = None,
    item_ids: ItemIds = "position",
    call_timeout: float | None = None,
) -> RunPlan:
    """The plan of an in-process evaluation (``evaluate_agent``, ``evaluate_workflow``, ``evalpipe
    eval``): one row per query, each with its expectations and, for pre-existing responses, its
    recorded transcript."""
    identity = target.identity if target is not None else kind
    rows = tuple(
        Row(
            index=i,
            query=query,
            key=content_key({"index": i, "query": query, "id": row_ids[i] if row_ids else None}),
            id=row_ids[i] if row_ids is not None else None,
            tags=tuple(tags[i]) if tags is not None else (),
            expect=expectations[i] if expectations is not None else NO_EXPECTATIONS,
            recorded=recorded[i] if recorded is not None else None,
            recorded_head=tuple(head)
            if recorded_heads is not None and (head := recorded_heads[i]) is not None
            else None,
        )
        for i, query in enumerate(queries)
    )
    return RunPlan(
        name=name,
        kind=kind,
        target=target,
        identity=identity,
        rows=rows,
        repetitions=repetitions,
        providers=tuple(providers),
        calls=make_calls(identity, rows, repetitions),
        split=split,
        upstream_context=upstream_context,
        include_overall=include_overall,
        include_per_agent=include_per_agent,
        tools_override=tuple(tools_override) if tools_override is not None else None,
        strict_tools=strict_tools,
        item_ids=item_ids,
        call_timeout=call_timeout,
        secrets=frozenset(secrets_of(target.obj if target is not None else None, *providers)),
    )
