"""Crafted run directories for the report tests, written with the real RunWriter.

An outcome is ``True`` (pass), ``False`` (fail), ``None`` (not applicable: a score without a
verdict) or ``"error"``; each comes with a score. Metrics of the "Local" provider are checks;
metrics of the "Judge" provider carry a rating, as JudgeEvaluator's do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe import (
    Diagnostic,
    EvalItem,
    EvalItemResult,
    EvalResults,
    EvalScoreResult,
    FunctionCallContent,
    FunctionResultContent,
    Message,
)
from evalpipe.artifacts import RunRecord, RunWriter

Outcome = tuple[bool | str | None, float | None]
Table = Mapping[str, Mapping[tuple[str, int], Outcome]]


def _score(name: str, outcome: Outcome, judge: bool) -> EvalScoreResult:
    verdict, score = outcome
    if verdict == "error":
        return EvalScoreResult(
            name,
            None,
            None,
            error_message=f"{name} could not be computed",
            error_code="CheckError",
            rating="inconclusive" if judge else None,
        )
    assert verdict is None or isinstance(verdict, bool)
    return EvalScoreResult(
        name,
        score,
        verdict,
        reason=f"{name} reason: {'ok' if verdict else 'not ok'}",
        threshold=3.0 if judge else None,
        rating=("good" if verdict else "poor") if judge else None,
        diagnostics=[Diagnostic("informational", f"{name} thought about it")] if judge else None,
    )


def _item(row: str, rep: int, index: int, response: str, failed: bool = False) -> EvalItem:
    conversation = [
        Message("user", [f"question about {row}"]),
        Message(
            "assistant",
            [FunctionCallContent(name="lookup", arguments={"row": row}, call_id="c1")],
        ),
        Message("tool", [FunctionResultContent(call_id="c1", result={"row": row, "rep": rep})]),
        Message("assistant", [response]),
    ]
    return EvalItem(
        conversation,
        item_id=f"{row}#{rep}",
        query_index=index,
        repetition=rep,
        error_code="AgentError" if failed else None,
        error_message=f"RuntimeError: call {row}#{rep} <failed>" if failed else None,
        metadata={"row_id": row, "run_id": f"call-{row}-{rep}"},
    )


def _provider(
    name: str, table: Table, items: list[EvalItem], judge: bool, ghosts: Sequence[str] = ()
) -> EvalResults:
    results = [
        EvalItemResult(ghost, "fail", [_score(metric, (False, 0.0), judge) for metric in table])
        for ghost in ghosts
    ]
    for item in items:
        if item.error_code:  # the target call failed: no metrics, as every provider reports it
            results.append(
                EvalItemResult(
                    item.item_id or "",
                    "error",
                    [],
                    item.error_code,
                    item.error_message,
                    input_text=item.query,
                    metadata=dict(item.metadata),
                )
            )
            continue
        key = (item.metadata["row_id"], item.repetition or 0)
        scores = [_score(metric, outcomes[key], judge) for metric, outcomes in table.items()]
        if any(s.error_code for s in scores):
            status = "error"
        elif all(s.passed is not False for s in scores):
            status = "pass"
        else:
            status = "fail"
        results.append(
            EvalItemResult(
                item.item_id or "",
                status,
                scores,
                input_text=item.query,
                output_text=item.response,
                metadata=dict(item.metadata),
            )
        )
    return EvalResults(
        provider=name,
        run_id=f"crafted ({name})",
        result_counts={
            "passed": sum(r.status == "pass" for r in results),
            "failed": sum(r.status == "fail" for r in results),
            "errored": sum(r.status == "error" for r in results),
        },
        items=results,
        input_items=items,
    )


def write_run(
    run_dir: Path,
    checks: Table,
    judges: Table | None = None,
    *,
    suite: str = "crafted",
    responses: Mapping[tuple[str, int], str] | None = None,
    repetitions: int | None = None,
    manifest: Mapping[str, Any] | None = None,
    failed_calls: frozenset[tuple[str, int]] = frozenset(),
    ghosts: Sequence[str] = (),
) -> Path:
    """Write a finished run: one item per (row, repetition) key of the first check's table;
    the keys in ``failed_calls`` are target calls that failed (items without metrics); every
    provider also fails the items ``ghosts`` names, which it was not given (not in items.parquet)."""
    first = next(iter(checks.values()))
    keys = list(first)
    rows = list(dict.fromkeys(row for row, _ in keys))
    items = [
        _item(
            row,
            rep,
            rows.index(row),
            (responses or {}).get((row, rep), f"answer for {row}"),
            (row, rep) in failed_calls,
        )
        for row, rep in keys
    ]
    providers = [_provider("Local", checks, items, judge=False, ghosts=ghosts)]
    if judges:
        providers.append(_provider("Judge", judges, items, judge=True, ghosts=ghosts))
    with RunWriter(run_dir) as writer:
        writer.add_runs(
            RunRecord(
                run_id=f"call-{row}-{rep}",
                row_id=row,
                query_index=rows.index(row),
                repetition=rep,
                target="crafted-target",
                status="error" if (row, rep) in failed_calls else "ok",
                error_code="AgentError" if (row, rep) in failed_calls else None,
                latency_s=0.5 + i / 10,
                total_tokens=10,
            )
            for i, (row, rep) in enumerate(keys)
        )
        writer.add_results(providers)
        writer.finish(
            {
                "suite": {
                    "name": suite,
                    "target": "crafted-target",
                    "repetitions": repetitions or (max(rep for _, rep in keys) + 1),
                },
                "target": "crafted-target",
                **(manifest or {}),
            }
        )
    return run_dir
