"""Plans from a suite: ``evalpipe run`` and the Prefect flow.

``prepare_suite`` loads the dataset and calls the target factory exactly once per run, builds the
evaluators, the split and the gates, and validates everything a user can get wrong before the
first call: nothing is called and nothing is written.
"""

from __future__ import annotations

import difflib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from evalpipe import artifacts  # its names load on first use: pyarrow only to re-score a run
from evalpipe.datasets import DatasetError, PlainRow, QueryRow, load_rows, row_hash
from evalpipe.evaluators.base import AgentScoped, Evaluator, metric_names
from evalpipe.gates import parse_gates
from evalpipe.itemize import NO_EXPECTATIONS, Expectations
from evalpipe.items import ExpectedToolCall
from evalpipe.llm import ChatEndpoint
from evalpipe.messages import Message
from evalpipe.recorded import recorded_run, split_recording
from evalpipe.runner.plan import Placement, Row, RunPlan, Target, make_calls, resolve_target
from evalpipe.runner.state import (
    MANIFEST,
    RUN_MARKER,
    RunDirError,
    RunLock,
    RunLockedError,
    check_run_dir,
    find_resumable,
    local_base,
    manifest_fingerprint,
    new_run_dir,
    placing,
    write_marker,
)
from evalpipe.secrets import mask, secret_values
from evalpipe.spend import TARGET
from evalpipe.suite import EvalSuite, SuiteError, build_evaluators, build_split, build_target
from evalpipe.tally import OVERALL
from evalpipe.transcripts import TargetKind, Transcript, load_transcript

__all__ = ["Claimed", "Taken", "claim", "place", "prepare_suite", "rows_from_dataset"]


def rows_from_dataset(rows: Sequence[QueryRow | PlainRow], kind: TargetKind) -> tuple[Row, ...]:
    """Runner rows from dataset rows; a recorded row carries its transcript (and, for an agent,
    its recorded query side)."""
    out = []
    shared: dict[str, list[ExpectedToolCall]] = {}
    expectations: dict[tuple[str | None, int, str | None], Expectations] = {}
    for index, row in enumerate(rows):
        recorded: Transcript | None = None
        head: tuple[Message, ...] | None = None
        if isinstance(row, PlainRow):
            calls = row.expected_tool_calls  # shared by the loader already
        else:
            if row.recorded:
                recorded = recorded_run(row, query_index=index, repetition=0, kind=kind)
                if kind == "agent" and row.conversation is not None:
                    head = tuple(split_recording(row.conversation, row.query)[0])
            calls = _shared(shared, row.expected_tool_calls)
        if row.agents:
            expect = Expectations(row.expected_output, calls, row.context, dict(row.agents))
        else:
            # rows that expect the same share one Expectations (immutable, never written), and
            # rows without per-agent expectations one empty mapping; ``calls`` is kept alive
            # by the Expectations it keys, so its id is not reused
            same = (row.expected_output, id(calls), row.context)
            found = expectations.get(same)
            if found is None:
                found = expectations[same] = Expectations(
                    row.expected_output, calls, row.context, NO_EXPECTATIONS.agents
                )
            expect = found
        out.append(
            Row(
                index=index,
                query=row.query,
                key=row_hash(row),
                id=row.id,
                tags=tuple(row.tags),
                expect=expect,
                recorded=recorded,
                recorded_head=head,
            )
        )
    return tuple(out)


def _shared(
    seen: dict[str, list[ExpectedToolCall]], calls: list[ExpectedToolCall] | None
) -> list[ExpectedToolCall] | None:
    """One list for every row that expects equal tool calls (the plan holds the rows for the
    whole run: ~0.7 kB a row of pydantic objects otherwise). Nothing writes to them; each item
    gets its own list of the calls."""
    if not calls:
        return calls
    kept = seen.setdefault(repr([(c.name, c.arguments) for c in calls]), calls)
    return kept if kept == calls else calls  # model equality: the class too


def prepare_suite(
    suite: EvalSuite,
    run_dir: str | Path | None = None,
    *,
    rescore: str | Path | None = None,
    resume: bool = True,
) -> RunPlan:
    """The plan of a suite run; nothing is called and nothing is written.

    The run directory is ``run_dir`` (it must be new, empty, or an unfinished run of the same
    target), else the newest unfinished run of the same target when ``resume`` (not when
    re-scoring), else a new directory under the suite's ``output_dir``.

    Raises:
        SuiteError: for a bad dataset, target, evaluator, split, gate or run directory (named,
            with the fix).
    """
    try:
        dataset = load_rows(suite.dataset)
    except DatasetError as exc:
        raise SuiteError(
            f"dataset: {exc} (a relative path in a suite file is relative to the suite file)"
        ) from None
    providers = build_evaluators(suite)
    splitter = build_split(suite)
    try:
        gates = parse_gates(suite.gates, source="gates")
    except ValueError as exc:
        raise SuiteError(str(exc)) from None
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
    _check_rows(dataset, suite, kind, target)
    _check_scopes(providers, kind, target)
    _check_gates(gates, providers, kind, target)
    target_model = _target_model(target)
    _check_endpoints(suite, providers, target, target_model)
    _check_compare_with(suite)
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
    plan = RunPlan(
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
        call_timeout=suite.call_timeout,
        concurrency=suite.concurrency,
        item_ids="row",
        name_providers=True,
        stored=stored,
        suite_record={
            "suite": mask(suite.model_dump(mode="json")),
            "fingerprint": suite.fingerprint(),
        },
        gates=tuple(gates),
        rescored_from=Path(rescore) if rescore is not None else None,
        secrets=frozenset(secret_values(suite.target) | secret_values(suite.evaluators)),
        budget=suite.budget,
        prices=dict(suite.prices),
        target_model=target_model,
    )
    return place(plan, suite, run_dir, resume=resume)


def place(
    plan: RunPlan, suite: EvalSuite, run_dir: str | Path | None = None, *, resume: bool = True
) -> RunPlan:
    """The plan with its run directory chosen (see :func:`prepare_suite`); nothing is written.

    Raises:
        RunDirError: for a directory this run must not write.
    """
    placement: Placement = "given"
    resume = resume and plan.stored is None  # a re-scored run is never resumed
    fingerprint = (plan.suite_record or {}).get("fingerprint")
    if run_dir is not None:
        path = Path(run_dir)
        check_run_dir(path, plan.identity, rescore=plan.stored is not None)
    elif resume and (found := find_resumable(suite, plan.identity, fingerprint=fingerprint)):
        path, placement = found, "resume"
    else:
        placement = "resume" if resume else "new"
        base = local_base(str(suite.output_dir))
        for parent in (base, *base.parents):
            if parent.exists() and not parent.is_dir():
                raise RunDirError(
                    f"output_dir {suite.output_dir}: {parent} is a file, not a directory; "
                    "choose another output directory (output_dir in the suite, or --output)"
                )
        path = new_run_dir(suite)
    return replace(plan, run_dir=path, eval_key=f"evalpipe:{path.name}", placement=placement)


Taken = Literal["run", "finished", "interrupted"]
"""What :func:`claim` found in the directory it took: a run to make (or resume), a run finished
meanwhile by the live run this one waited for, or a run whose results are written but whose
process ended before its report, publication and artifacts (they are to be finished)."""


@dataclass
class Claimed:
    """A run directory taken: the plan placed in it, its lock (held), and what it holds."""

    plan: RunPlan
    lock: RunLock
    taken: Taken


def claim(plan: RunPlan, suite: EvalSuite, *, wait: float | None = 0.0) -> Claimed:
    """Take the plan's run directory: its lock held, its marker written.

    A directory the caller named is locked as it is. One chosen by :func:`place` is chosen again
    while the suite's placing lock is held, locked and marked before that lock is let go: a run
    that started since (even in the same second) is then found, resumed or waited for, never run
    beside this one in a directory of its own. ``wait``: how long to wait (seconds; None: as
    long as it takes) for a live run holding the directory, outside the placing lock.

    Raises:
        RunLockedError: when a live run holds the directory (after ``wait``).
        RunDirError: when the directory cannot be created.
    """
    assert plan.run_dir is not None
    started = time.time()
    if plan.placement == "given":
        lock = RunLock(plan.run_dir)
        lock.acquire(wait=wait)
    else:
        with placing(suite):
            plan = place(plan, suite, resume=plan.placement == "resume")
            assert plan.run_dir is not None
            lock = RunLock(plan.run_dir)
            try:
                lock.acquire(wait=0.0)
            except RunLockedError:
                if wait == 0.0:
                    raise
            else:
                write_marker(plan, started)
        if not lock.held:  # a live run holds it: waited for with the placing lock let go
            lock.acquire(wait=wait)
    assert plan.run_dir is not None
    taken: Taken = "run"
    if (plan.run_dir / MANIFEST).exists():
        taken = "interrupted" if lock.took_over else "finished"
        mine = (plan.suite_record or {}).get("fingerprint")
        theirs = manifest_fingerprint(plan.run_dir)
        if mine is not None and theirs != mine:
            lock.release()
            done = "finished" if taken == "finished" else "wrote the results of"
            raise RunDirError(
                f"{plan.run_dir}: the run this one waited for {done} it with another suite "
                f"(fingerprint {theirs}, this one's {mine}: other evaluators, gates or "
                f"repetitions); finished runs are never rewritten. Re-score its transcripts with "
                f"this suite: --rescore {plan.run_dir}, or run again for a new run directory "
                "(its calls are made again)"
            )
    return Claimed(plan, lock, taken)


def _recorded_kind(suite: EvalSuite, rows: Sequence[QueryRow | PlainRow]) -> tuple[TargetKind, str]:
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
    for provider in scoped:
        agents = [a for a in provider.agents if a != OVERALL]
        _check_agents(f"evaluators: {provider.name!r} names", agents, target, " (and 'overall')")


def _check_agents(where: str, agents: Sequence[str], target: Target | None, also: str = "") -> None:
    """The agents must be the workflow's, when it declares them up front."""
    known = target.agent_names if target is not None else None
    if unknown := [a for a in agents if known is not None and a not in known]:
        raise SuiteError(
            f"{where} agent {unknown[0]!r}, which the workflow does not have; its agents are "
            f"{', '.join(known or ())}{also}"
        )


def _check_rows(
    rows: Sequence[QueryRow | PlainRow], suite: EvalSuite, kind: str, target: Target | None
) -> None:
    """A single agent target takes neither multi-agent recordings (a workflow takes both kinds)
    nor per-agent expectations, and per-agent expectations must name agents the workflow has
    (else they are silently never checked, and a check on a missing expectation passes
    vacuously)."""
    for index, row in enumerate(rows):
        where = f"row {row.id!r} (row {index + 1})"
        if kind == "agent" and row.recorded_agents is not None:
            raise SuiteError(
                f"dataset: {where} has 'recorded_agents', a multi-agent recording, but the "
                "target is a single agent; use a workflow target, no target, or give the row a "
                "'conversation' only"
            )
        if not row.agents:
            continue
        if target is not None and target.kind == "agent":
            raise SuiteError(
                f"dataset {suite.dataset}: {where} has per-agent expectations ('agents'), but "
                "the target is a single agent; move them to expected_output / expected_tool_calls"
            )
        _check_agents(f"dataset {suite.dataset}: {where} expects", list(row.agents), target)


def _check_gates(
    gates: Sequence[Any], providers: Sequence[Evaluator], kind: str, target: Target | None
) -> None:
    """Gate clauses must read metrics some evaluator produces and agents the target has: a clause
    on something that never comes back would only be found after every call is paid."""
    declared = [metric_names(p) for p in providers]
    produced: set[str] | None = None
    if all(names is not None for names in declared):
        produced = {n for names in declared for n in names or ()}
    for index, clause in enumerate(gates):
        where = f"gates[{index}] {str(clause)!r}"
        metric = getattr(clause, "metric", None)
        if metric is not None and produced is not None and metric not in produced:
            raise SuiteError(
                f"{where}: no evaluator produces metric {metric!r}; the evaluators produce "
                f"{', '.join(sorted(produced)) or 'nothing'}"
            )
        agent = getattr(clause, "agent", None)
        if agent is None or agent == OVERALL:
            continue
        if kind == "agent":
            raise SuiteError(
                f"{where}: names agent {agent!r}, but the target is a single agent; remove the "
                "agent prefix"
            )
        _check_agents(f"{where}: names", [agent], target)


def _target_model(target: Target | None) -> str:
    """The ``prices`` key of the target's calls: an ``openai`` target's model, else ``target``."""
    endpoint = getattr(target.obj, "endpoint", None) if target is not None else None
    return endpoint.model if isinstance(endpoint, ChatEndpoint) else TARGET


def _check_endpoints(
    suite: EvalSuite, providers: Sequence[Evaluator], target: Target | None, target_model: str
) -> None:
    """A judge's ``api_key_env`` must name a variable that is set (else every judge call fails),
    and a ``cost_usd`` budget needs a price for every model the run calls (a cost is never
    guessed): each LLM judge's model and the target's (see :func:`_target_model`)."""
    needed: dict[str, str] = {}
    if target is not None:
        needed[target_model] = (
            f"the target ({target.name})"
            if target_model != TARGET
            else f"the target {target.name!r}, whose model evalpipe cannot see"
        )
    for provider in providers:
        inner = provider.inner if isinstance(provider, AgentScoped) else provider
        endpoint = getattr(inner, "endpoint", None)
        variable = getattr(endpoint, "api_key_env", None)
        if variable and not os.environ.get(variable):
            raise SuiteError(
                f"evaluators: {provider.name!r} reads its API key from ${variable}, which is not "
                f"set; export {variable}=... (or remove api_key_env for an endpoint without "
                "authentication)"
            )
        if isinstance(endpoint, ChatEndpoint):
            needed.setdefault(endpoint.model, f"the judge {provider.name!r}")
    if suite.budget is None or suite.budget.cost_usd is None:
        return
    for model, who in needed.items():
        if model in suite.prices:
            continue
        close = difflib.get_close_matches(model, list(suite.prices), n=1)
        hint = f" (prices names {close[0]!r}: a typo?)" if close else ""
        raise SuiteError(
            f"budget.cost_usd: no price for {model!r}, the model of {who}{hint}; add prices: "
            f"{{{model}: {{input_per_1m: ..., output_per_1m: ...}}}} (dollars per million tokens), "
            "or give the budget in tokens"
        )


def _check_compare_with(suite: EvalSuite) -> None:
    """``compare_with`` naming a run directory must name a finished run."""
    if suite.compare_with in (None, "last", "baseline"):
        return
    path = Path(str(suite.compare_with))
    if not (path / MANIFEST).is_file():
        raise SuiteError(
            f"compare_with: {path} is not a finished run directory (no manifest.json); name a "
            "run directory `evalpipe run` completed, or use compare_with: last or baseline"
        )


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
        records = artifacts.read_runs(run_dir)
    except Exception as exc:
        raise SuiteError(f"--rescore {run_dir}: cannot read runs.parquet ({exc})") from None
    stored = {
        record.run_id: load_transcript(kind, record.transcript)
        for record in records
        if record.transcript is not None
    }
    return kind, identity, stored
