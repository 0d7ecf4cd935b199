"""Plans from a suite: ``evalpipe run`` and the Prefect flow.

``prepare_suite`` loads the dataset and calls the target factory exactly once per run, builds the
evaluators, the split and the gates, and validates everything a user can get wrong before the
first call: nothing is called and nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.artifacts import read_runs
from evalpipe.datasets import DatasetError, QueryRow, load_dataset, row_hash
from evalpipe.evaluators.base import AgentScoped, Evaluator
from evalpipe.gates import parse_gates
from evalpipe.itemize import Expectations
from evalpipe.messages import Message
from evalpipe.recorded import recorded_run, split_recording
from evalpipe.runner.plan import Row, RunPlan, Target, make_calls, resolve_target
from evalpipe.runner.state import RUN_MARKER
from evalpipe.suite import EvalSuite, SuiteError, build_evaluators, build_split, build_target
from evalpipe.transcripts import TargetKind, Transcript, load_transcript

__all__ = ["prepare_suite", "rows_from_dataset"]


def rows_from_dataset(rows: Sequence[QueryRow], kind: TargetKind) -> tuple[Row, ...]:
    """Runner rows from dataset rows; a recorded row carries its transcript (and, for an agent,
    its recorded query side)."""
    out = []
    for index, row in enumerate(rows):
        recorded: Transcript | None = None
        head: tuple[Message, ...] | None = None
        if row.recorded:
            recorded = recorded_run(row, query_index=index, repetition=0, kind=kind)
            if kind == "agent" and row.conversation is not None:
                head = tuple(split_recording(row.conversation, row.query)[0])
        out.append(
            Row(
                index=index,
                query=row.query,
                key=row_hash(row),
                id=row.id,
                tags=tuple(row.tags),
                expect=Expectations(
                    expected_output=row.expected_output,
                    expected_tool_calls=row.expected_tool_calls,
                    context=row.context,
                    agents=dict(row.agents or {}),
                ),
                recorded=recorded,
                recorded_head=head,
            )
        )
    return tuple(out)


def prepare_suite(
    suite: EvalSuite, run_dir: str | Path | None = None, *, rescore: str | Path | None = None
) -> RunPlan:
    """The plan of a suite run; nothing is called and nothing is written.

    Raises:
        SuiteError: for a bad dataset, target, evaluator, split or gate (named, with the fix).
    """
    try:
        dataset = load_dataset(suite.dataset)
    except DatasetError as exc:
        raise SuiteError(f"dataset: {exc}") from None
    providers = build_evaluators(suite)
    splitter = build_split(suite)
    gates = _parse_gates(suite.gates)
    stored: dict[str, Transcript] | None = None
    target: Target | None = None
    if rescore is not None:
        kind, identity, stored = _read_stored(Path(rescore))
    elif suite.target is None:
        kind, identity = _recorded_kind(suite, dataset)
    else:
        try:
            target = resolve_target(build_target(suite))
        except TypeError as exc:
            raise SuiteError(f"target: {exc}") from None
        kind = target.kind
        identity = f"{target.identity}|{suite.target_identity()}"
    _check_recorded_rows(dataset, kind)
    _check_scopes(providers, kind, target)
    rows = rows_from_dataset(dataset, kind)
    calls = make_calls(identity, rows, suite.repetitions)
    if stored is not None:
        missing = [c for c in calls if c.key not in stored]
        if missing:
            row = rows[missing[0].row_index]
            raise SuiteError(
                f"--rescore {rescore}: no stored transcript for row {row.id!r} repetition "
                f"{missing[0].repetition} ({len(missing)} missing); re-score with the suite and "
                "dataset the run was made with, or lower repetitions"
            )
    path = Path(run_dir) if run_dir is not None else None
    return RunPlan(
        name=suite.name,
        kind=kind,
        target=target,
        identity=identity,
        rows=rows,
        repetitions=suite.repetitions,
        providers=tuple(providers),
        calls=calls,
        split=splitter,
        upstream_context=suite.upstream_context,
        include_overall=suite.include_overall,
        include_per_agent=suite.include_per_agent,
        call_attempts=suite.call_attempts,
        item_ids="row",
        stored=stored,
        eval_key=f"evalpipe:{path.name}" if path is not None else None,
        suite=suite,
        gates=tuple(gates),
        run_dir=path,
        rescored_from=Path(rescore) if rescore is not None else None,
    )


def _recorded_kind(suite: EvalSuite, rows: Sequence[QueryRow]) -> tuple[TargetKind, str]:
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


def _check_scopes(providers: Sequence[Evaluator], kind: str, target: Target | None) -> None:
    """``agents:`` scopes only make sense for workflows, and must name their agents."""
    scoped = [p for p in providers if isinstance(p, AgentScoped)]
    if not scoped:
        return
    if kind != "workflow":
        raise SuiteError(
            f"evaluators: {scoped[0].name!r} is scoped with 'agents:', which only applies to "
            "workflow targets; remove 'agents:' for a single agent"
        )
    if target is None or target.agent_names is None:
        return
    known = target.agent_names
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
    try:
        return list(parse_gates(list(specs), source="gates"))
    except ValueError as exc:
        raise SuiteError(str(exc)) from None


def _read_stored(run_dir: Path) -> tuple[TargetKind, str, dict[str, Transcript]]:
    """The transcripts of an earlier run, by call key, for re-scoring."""
    marker = run_dir / RUN_MARKER
    if not marker.is_file():
        raise SuiteError(
            f"--rescore {run_dir}: not a run directory (no {RUN_MARKER}); pass a directory "
            "that `evalpipe run` wrote"
        )
    identity = str(json.loads(marker.read_text(encoding="utf-8")).get("identity", ""))
    kind: TargetKind = "workflow" if identity.startswith("workflow:") else "agent"
    try:
        records = read_runs(run_dir)
    except Exception as exc:
        raise SuiteError(f"--rescore {run_dir}: cannot read runs.parquet ({exc})") from None
    stored = {
        record.run_id: load_transcript(kind, record.transcript)
        for record in records
        if record.transcript is not None
    }
    return kind, identity, stored
