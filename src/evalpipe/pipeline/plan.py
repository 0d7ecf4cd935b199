"""A run plan: everything a flow run needs, validated before the first target call.

The plan holds the suite, the dataset rows, the target (or the stored transcripts when re-scoring),
the evaluators, the gates, the run directory and the journal, and knows how to make one call, turn
a shard's transcripts into items and evaluate a batch with one provider. The flow (``flow.py``) only
schedules these steps as Prefect tasks; this module itself does not need Prefect.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from evalpipe.datasets import DatasetError, QueryRow, load_dataset, row_hash
from evalpipe.evaluate import build_agent_items, errored_results, run_evaluators
from evalpipe.evaluators.base import Evaluator
from evalpipe.items import EvalItem
from evalpipe.journal import Journal, call_key
from evalpipe.pipeline.params import redact
from evalpipe.pipeline.storage import local_base
from evalpipe.results import EvalResults, merge_results
from evalpipe.suite import (
    AgentScoped,
    EvalSuite,
    SuiteError,
    build_evaluators,
    build_split,
    build_target,
)
from evalpipe.targets.base import TargetRun, agent_tools, call_agent

__all__ = [
    "MAX_SHARD_TASKS",
    "Call",
    "CallOutcome",
    "RunPlan",
    "ShardItems",
    "find_resumable",
    "new_run_dir",
]

MAX_SHARD_TASKS = 50
"""Default shard size aims for at most this many shard tasks per flow run (prefect-notes §2)."""

RUN_MARKER = "run.json"
"""Written when a run starts (suite + fingerprint); ``manifest.json`` appears when it completes."""

Transcript = Any  # TargetRun | WorkflowRun


@dataclass(frozen=True, slots=True)
class Call:
    """One target call of the run: which row, which repetition, and its content address."""

    position: int
    """Place in the run's repetition-major order."""
    row_index: int
    repetition: int
    key: str


@dataclass(slots=True)
class CallOutcome:
    """A finished call: its transcript and whether it came from the journal."""

    call: Call
    run: Transcript
    cached: bool
    transcript: str | None = None
    """The run as JSON, when it was serialized already (for the journal)."""


@dataclass(slots=True)
class ShardItems:
    """The items one shard's transcripts became: overall items, and per-agent items for workflows."""

    overall: list[EvalItem]
    per_agent: dict[str, list[EvalItem]] = field(default_factory=dict)
    workflow_items: Any = None
    """The workflow stage's own structure, handed back to its evaluation stage."""

    @property
    def count(self) -> int:
        return len(self.overall) + sum(len(v) for v in self.per_agent.values())


def new_run_dir(suite: EvalSuite, output_dir: str | Path | None = None) -> Path:
    """A fresh run directory: ``{output_dir}/{suite}/{UTC timestamp}-{fingerprint}``."""
    base = local_base(str(output_dir or suite.output_dir)) / suite.name
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    path = base / f"{stamp}-{suite.fingerprint()}"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{stamp}-{suite.fingerprint()}-{n}"
    return path


def find_resumable(suite: EvalSuite, output_dir: str | Path | None = None) -> Path | None:
    """The newest unfinished run of this exact suite (same fingerprint, no manifest yet)."""
    base = local_base(str(output_dir or suite.output_dir)) / suite.name
    if not base.is_dir():
        return None
    candidates = []
    for path in base.iterdir():
        marker = path / RUN_MARKER
        if not marker.is_file() or (path / "manifest.json").exists():
            continue
        try:
            data = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if data.get("fingerprint") == suite.fingerprint():
            candidates.append((marker.stat().st_mtime, path))
    return max(candidates)[1] if candidates else None


def _is_workflow(target: Any) -> bool:
    from evalpipe.targets.workflow import is_workflow

    return bool(is_workflow(target))


@dataclass
class RunPlan:
    """A validated run: suite, rows, target, providers, gates, run directory and journal."""

    suite: EvalSuite
    rows: list[QueryRow]
    row_hashes: list[str]
    providers: list[Evaluator]
    splitter: Any
    gates: list[Any]
    run_dir: Path
    kind: Literal["agent", "workflow"]
    identity: str
    target: Any = None
    declared_tools: list[Any] = field(default_factory=list)
    journal: Journal | None = None
    stored: dict[str, Transcript] | None = None
    """Re-scoring: transcripts by call key, read from an earlier run (the target is not called)."""
    rescored_from: Path | None = None
    started_at: float = field(default_factory=time.time)
    calls: list[Call] = field(default_factory=list)
    shard_outcomes: dict[int, list[CallOutcome]] = field(default_factory=dict, repr=False)
    """Finished shards' transcripts, until their items are written."""
    shard_items: dict[int, ShardItems] = field(default_factory=dict, repr=False)
    """Shards' items, until every provider has evaluated them."""
    _eval_ids: dict[str, str] = field(default_factory=dict, repr=False)
    _eval_locks: dict[str, asyncio.Lock] = field(default_factory=dict, repr=False)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def prepare(
        cls,
        suite: EvalSuite,
        run_dir: str | Path,
        *,
        rescore: str | Path | None = None,
    ) -> RunPlan:
        """Load and validate everything; nothing is called and nothing is written.

        Raises:
            SuiteError: for a bad dataset, target, evaluator, split or gate (named, with the fix).
        """
        try:
            rows = load_dataset(suite.dataset)
        except DatasetError as exc:
            raise SuiteError(f"dataset: {exc}") from None
        providers = build_evaluators(suite)
        splitter = build_split(suite)
        gates = _parse_gates(suite.gates)
        stored: dict[str, Transcript] | None = None
        target: Any = None
        if rescore is not None:
            kind, identity, stored = _read_stored(Path(rescore))
        elif suite.target is None:
            kind, identity = _recorded_kind(suite, rows)
        else:
            target = build_target(suite)
            kind = "workflow" if _is_workflow(target) else "agent"
            if kind == "workflow":
                from evalpipe.targets.workflow import workflow_identity

                identity = f"{workflow_identity(target)}|{suite.target_identity()}"
            else:
                identity = f"agent|{suite.target_identity()}"
        _check_recorded_rows(rows, kind)
        plan = cls(
            suite=suite,
            rows=rows,
            row_hashes=[row_hash(r) for r in rows],
            providers=providers,
            splitter=splitter,
            gates=gates,
            run_dir=Path(run_dir),
            kind=kind,
            identity=identity,
            target=target,
            declared_tools=agent_tools(target) if kind == "agent" and target is not None else [],
            stored=stored,
            rescored_from=Path(rescore) if rescore is not None else None,
        )
        _check_scopes(providers, kind, target)
        plan.calls = plan._make_calls()
        if stored is not None:
            missing = [c for c in plan.calls if c.key not in stored]
            if missing:
                row = rows[missing[0].row_index]
                raise SuiteError(
                    f"--rescore {rescore}: no stored transcript for row {row.id!r} repetition "
                    f"{missing[0].repetition} ({len(missing)} missing); re-score with the suite and "
                    "dataset the run was made with, or lower repetitions"
                )
        return plan

    def _make_calls(self) -> list[Call]:
        calls = []
        n = len(self.rows)
        for rep in range(self.suite.repetitions):
            for i in range(n):
                key = call_key(self.identity, self.row_hashes[i], rep)
                calls.append(Call(rep * n + i, i, rep, key))
        return calls

    def absolute_run_dir(self) -> Path:
        """The run directory as an absolute path."""
        return self.run_dir.resolve()

    def start(self) -> None:
        """Create the run directory, its marker and the journal (resuming one that exists)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        marker = self.run_dir / RUN_MARKER
        if not marker.exists():
            marker.write_text(
                json.dumps(
                    {
                        "suite": redact(self.suite.model_dump(mode="json")),
                        "fingerprint": self.suite.fingerprint(),
                        "identity": self.identity,
                        "started_at": self.started_at,
                    },
                    indent=2,
                ),
                encoding="utf-8",
            )
        if self.stored is None:
            self.journal = Journal(self.run_dir / "journal", self.identity)

    # -- shards ---------------------------------------------------------------------------------

    def shard_size(self) -> int:
        """Calls per shard task: the suite's, or sized for at most MAX_SHARD_TASKS shards."""
        if self.suite.shard_size is not None:
            return self.suite.shard_size
        return max(1, math.ceil(len(self.calls) / MAX_SHARD_TASKS))

    def shards(self) -> list[list[Call]]:
        """The calls cut into shards, in repetition-major order."""
        size = self.shard_size()
        return [self.calls[i : i + size] for i in range(0, len(self.calls), size)]

    def resumed_calls(self) -> int:
        """Calls the journal already holds."""
        if self.journal is None:
            return 0
        return sum(1 for c in self.calls if c.key in self.journal)

    # -- one call -------------------------------------------------------------------------------

    def _load(self, text: str) -> Transcript:
        if self.kind == "workflow":
            from evalpipe.targets.workflow import WorkflowRun

            return WorkflowRun.model_validate_json(text)
        return TargetRun.model_validate_json(text)

    async def call(self, call: Call, semaphore: asyncio.Semaphore) -> CallOutcome:
        """Make one call, or take it from the journal (or the stored run when re-scoring)."""
        if self.stored is not None:
            return CallOutcome(call, self.stored[call.key], True)
        assert self.journal is not None, "start() the plan before calling the target"
        if (text := self.journal.get(call.key)) is not None:
            return CallOutcome(call, self._load(text), True, text)
        row = self.rows[call.row_index]
        run: Any
        if row.recorded:
            from evalpipe.recorded import recorded_run

            # a recorded row is its own transcript: the target is not called
            run = recorded_run(
                row, query_index=call.row_index, repetition=call.repetition, kind=self.kind
            )
        elif self.kind == "workflow":
            from evalpipe.targets.workflow import call_workflow

            run = await call_workflow(
                self.target,
                row.query,
                query_index=call.row_index,
                repetition=call.repetition,
                semaphore=semaphore,
            )
        else:
            run = await call_agent(
                self.target,
                row.query,
                query_index=call.row_index,
                repetition=call.repetition,
                semaphore=semaphore,
                attempts=self.suite.call_attempts,
            )
        text = run.model_dump_json()
        if run.error_code is None:
            self.journal.record(call.key, text)
        return CallOutcome(call, run, False, text)

    # -- items ----------------------------------------------------------------------------------

    def _stamp(self, item: EvalItem, call: Call) -> None:
        row = self.rows[call.row_index]
        item.item_id = f"{row.id}#{call.repetition}"
        item.metadata = {
            **item.metadata,
            "row_id": row.id,
            "run_id": call.key,
            "tags": list(row.tags),
        }

    def build_items(self, outcomes: Sequence[CallOutcome]) -> ShardItems:
        """The items of one shard: one per call (agents), or overall + per agent (workflows)."""
        if self.kind == "workflow":
            return self._build_workflow_items(outcomes)
        rows = self.rows
        items = build_agent_items(
            [o.run for o in outcomes],
            declared_tools=self.declared_tools,
            expected_output=[r.expected_output for r in rows],
            context=[r.context for r in rows],
            conversation_split=self.splitter,
        )
        for item, outcome in zip(items, outcomes, strict=True):
            row = rows[outcome.call.row_index]
            item.expected_tool_calls = row.expected_tool_calls
            if row.conversation is not None and outcome.run.ok:
                from evalpipe.recorded import recorded_item_conversation

                # the recorded query side (system message, earlier turns) replaces the bare query
                item.conversation = recorded_item_conversation(row, outcome.run.messages)
            self._stamp(item, outcome.call)
        return ShardItems(overall=items)

    def _build_workflow_items(self, outcomes: Sequence[CallOutcome]) -> ShardItems:
        from evalpipe.evaluate import build_workflow_items

        rows = self.rows
        per_agent = {
            i: {name: exp.model_dump() for name, exp in (r.agents or {}).items()}
            for i, r in enumerate(rows)
        }
        built = build_workflow_items(
            [o.run for o in outcomes],
            expected_output=[r.expected_output for r in rows],
            expected_tool_calls=[r.expected_tool_calls for r in rows],
            per_agent_expectations=per_agent,
            conversation_split=self.splitter,
            upstream_context=self.suite.upstream_context,
            include_overall=self.suite.include_overall,
            include_per_agent=self.suite.include_per_agent,
        )
        by_position = {(o.run.query_index, o.run.repetition): o.call for o in outcomes}
        for item in [*built.overall, *(i for items in built.per_agent.values() for i in items)]:
            call = by_position.get((item.query_index, item.repetition))
            if call is not None:
                # build_workflow_items ids are "i" and "i/agent[/visit]": keep the agent part
                _, _, agent_part = (item.item_id or "").partition("/")
                self._stamp(item, call)
                if agent_part:
                    item.item_id = f"{item.item_id}/{agent_part}"
        return ShardItems(overall=built.overall, per_agent=built.per_agent, workflow_items=built)

    # -- evaluation -----------------------------------------------------------------------------

    def eval_name(self, provider: Evaluator) -> str:
        """The name a provider's results carry (the provider appended when there are several)."""
        if len(self.providers) > 1:
            return f"{self.suite.name} ({provider.name})"
        return self.suite.name

    def is_foundry(self, provider: Evaluator) -> bool:
        """A provider that evaluates in batches of one server-side evaluation (FoundryEvals)."""
        inner = provider.inner if isinstance(provider, AgentScoped) else provider
        return hasattr(inner, "create_eval") and hasattr(inner, "run_batch")

    async def _foundry_eval_id(self, provider: Any, items: Sequence[EvalItem], name: str) -> str:
        """The run's one server-side evaluation for this provider, created by the first shard.

        Tagged with the run directory's name, so a resumed run (or a retried task) reuses it.
        """
        lock = self._eval_locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self._eval_ids:
                self._eval_ids[name] = await provider.create_eval(
                    items, eval_name=name, key=f"evalpipe:{self.run_dir.name}:{name}"
                )
            return self._eval_ids[name]

    async def _evaluate_foundry(
        self, provider: Any, items: list[EvalItem], name: str, first_position: int
    ) -> EvalResults:
        try:
            eval_id = await self._foundry_eval_id(provider, items, name)
        except Exception as exc:
            return errored_results(provider.name, items, name, f"{type(exc).__name__}: {exc}")
        size = max(1, int(getattr(provider, "batch_size", len(items)) or len(items)))
        parts = await asyncio.gather(
            *(
                provider.run_batch(
                    eval_id, items[i : i + size], eval_name=name, batch_index=first_position + i
                )
                for i in range(0, len(items), size)
            )
        )
        return merge_results(list(parts))

    async def evaluate(
        self, provider: Evaluator, items: ShardItems, first_position: int = 0
    ) -> EvalResults:
        """One provider over one shard's items; a provider that raises gives errored items.

        FoundryEvals gets one evaluation per run (per agent group for workflows) and one server run
        per shard (split at its ``batch_size``), tagged so a retry or a resume does not pay twice.
        """
        name = self.eval_name(provider)
        if self.kind == "agent" and self.is_foundry(provider) and items.overall:
            return await self._evaluate_foundry(provider, items.overall, name, first_position)
        if self.kind == "workflow":
            from evalpipe.evaluate import WorkflowItems, evaluate_workflow_items

            workflow_items = items.workflow_items
            inner: Any = provider
            if isinstance(provider, AgentScoped):
                inner = provider.inner
                workflow_items = WorkflowItems(
                    overall=workflow_items.overall if "overall" in provider.agents else [],
                    per_agent={
                        a: v for a, v in workflow_items.per_agent.items() if a in provider.agents
                    },
                )
                if not workflow_items.overall and not any(workflow_items.per_agent.values()):
                    # none of its agents ran in this shard: an empty result, not an error
                    return EvalResults(
                        provider=provider.name,
                        run_id=name,
                        result_counts={"passed": 0, "failed": 0, "errored": 0},
                    )
            # Foundry: one evaluation per agent group for the whole run, a server run per shard.
            group_provider: Any = (
                _FoundryBatches(self, inner, first_position) if self.is_foundry(inner) else inner
            )
            (result,) = await evaluate_workflow_items(
                [group_provider], workflow_items, self.suite.name
            )
            result.provider = provider.name
            for sub in result.sub_results.values():
                sub.provider = provider.name
            if len(self.providers) > 1:  # MAF's naming: "{name} — {agent} ({provider})"
                for level in result.iter_results():
                    level.run_id = f"{level.run_id} ({provider.name})"
            return result
        (result,) = await run_evaluators([provider], items.overall, name)
        return result


class _FoundryBatches:
    """A Foundry provider seen through the run: ``evaluate`` on one group of a shard's items reuses
    the run's evaluation of that group (by eval name) and adds one server run for this shard."""

    def __init__(self, plan: RunPlan, provider: Any, first_position: int) -> None:
        self.name = provider.name
        self._plan = plan
        self._provider = provider
        self._first_position = first_position

    async def evaluate(self, items: Sequence[EvalItem], *, eval_name: str) -> EvalResults:
        return await self._plan._evaluate_foundry(
            self._provider, list(items), eval_name, self._first_position
        )


def _recorded_kind(
    suite: EvalSuite, rows: Sequence[QueryRow]
) -> tuple[Literal["agent", "workflow"], str]:
    """Kind and identity of a suite without a target: every row must be recorded."""
    for index, row in enumerate(rows):
        if not row.recorded:
            raise SuiteError(
                f"target: the suite has no target, but dataset row {row.id!r} (row {index + 1}) "
                "has no recording; give it a 'conversation' (or 'recorded_agents'), or add a target"
            )
    if any(row.recorded_agents is not None for row in rows):
        return "workflow", f"workflow:recorded|{suite.target_identity()}"
    return "agent", f"agent|{suite.target_identity()}"


def _check_recorded_rows(rows: Sequence[QueryRow], kind: str) -> None:
    """A single agent target cannot take multi-agent recordings (a workflow takes both kinds)."""
    for index, row in enumerate(rows):
        if kind == "agent" and row.recorded_agents is not None:
            raise SuiteError(
                f"dataset: row {row.id!r} (row {index + 1}) has 'recorded_agents', a multi-agent "
                "recording, but the target is a single agent; use a workflow target, no target, "
                "or give the row a 'conversation' only"
            )


def _check_scopes(providers: Sequence[Evaluator], kind: str, target: Any) -> None:
    """``agents:`` scopes only make sense for workflows, and must name their agents."""
    scoped = [p for p in providers if isinstance(p, AgentScoped)]
    if not scoped:
        return
    if kind != "workflow":
        raise SuiteError(
            f"evaluators: {scoped[0].name!r} is scoped with 'agents:', which only applies to "
            "workflow targets; remove 'agents:' for a single agent"
        )
    if target is None:
        return
    from evalpipe.targets.workflow import workflow_agent_names

    known = workflow_agent_names(target)
    if known is None:
        return
    for provider in scoped:
        unknown = [a for a in provider.agents if a != "overall" and a not in known]
        if unknown:
            raise SuiteError(
                f"evaluators: {provider.name!r} names agent {unknown[0]!r}, which the workflow "
                f"does not have; its agents are {', '.join(known)} (and 'overall')"
            )


def _parse_gates(specs: Sequence[str | dict[str, Any]]) -> list[Any]:
    if not specs:
        return []
    from evalpipe.gates import parse_gates

    try:
        return list(parse_gates(list(specs), source="gates"))
    except ValueError as exc:
        raise SuiteError(str(exc)) from None


def _read_stored(run_dir: Path) -> tuple[Literal["agent", "workflow"], str, dict[str, Any]]:
    """The transcripts of an earlier run, by call key, for re-scoring."""
    from evalpipe.artifacts import read_runs

    marker = run_dir / RUN_MARKER
    if not marker.is_file():
        raise SuiteError(
            f"--rescore {run_dir}: not a run directory (no {RUN_MARKER}); pass a directory "
            "that `evalpipe run` wrote"
        )
    identity = str(json.loads(marker.read_text(encoding="utf-8")).get("identity", ""))
    kind: Literal["agent", "workflow"] = "workflow" if identity.startswith("workflow:") else "agent"
    try:
        records = read_runs(run_dir)
    except Exception as exc:
        raise SuiteError(f"--rescore {run_dir}: cannot read runs.parquet ({exc})") from None
    stored: dict[str, Any] = {}
    for record in records:
        if record.transcript is None:
            continue
        if kind == "workflow":
            from evalpipe.targets.workflow import WorkflowRun

            run: Any = WorkflowRun.model_validate_json(record.transcript)
        else:
            run = TargetRun.model_validate_json(record.transcript)
        stored[record.run_id] = run
    return kind, identity, stored
