"""A gate evaluated on a run folded shard by shard (``GateFold``, as the flow builds it) gives the
report it gives on the merged results, judge_agreement included (evalpipe.gates)."""

from __future__ import annotations

import json
from pathlib import Path

from evalpipe.artifacts import load_run
from evalpipe.gates import Gate, GateFold, evaluate_gates
from evalpipe.results import EvalItemResult, EvalResults, EvalScoreResult
from evalpipe.tally import count_results, merge_results
from report.report_builders import write_run


def _part(result: EvalResults, start: int, stop: int) -> EvalResults:
    """Items ``start:stop`` of ``result`` and of its sub-results, with their own counts."""
    items = result.items[start:stop]
    counts, per_metric = count_results(items)
    return EvalResults(
        provider=result.provider,
        run_id=result.run_id,
        status=result.status,
        result_counts=counts,
        per_evaluator=per_metric,
        items=items,
        sub_results={k: _part(s, start, stop) for k, s in result.sub_results.items()},
    )


def _shard(first: int, scores: list[float | None]) -> EvalResults:
    items = [
        EvalItemResult(
            f"r{first + i}",
            "error" if v is None else ("pass" if v >= 3 else "fail"),
            [EvalScoreResult("relevance", v, passed=None if v is None else v >= 3)]
            if v is not None
            else [EvalScoreResult("relevance", None, error_code="Timeout")],
        )
        for i, v in enumerate(scores)
    ]
    counts, per_metric = count_results(items)
    return EvalResults(
        provider="Local", run_id="run", result_counts=counts, per_evaluator=per_metric, items=items
    )


def test_a_gate_on_the_shards_fold_reports_what_it_reports_on_the_merged_results() -> None:
    """Every fold clause's verdict, numbers, offending items and message on a GateFold built shard
    by shard equal its verdict on merge_results of the shards."""
    shards = [_shard(0, [4, 2, None]), _shard(3, [5, 1]), _shard(5, [None, 3])]
    gate = Gate(
        [
            "mean(relevance) >= 3",
            "pass_rate(relevance, max_errors=2) >= 0.5",
            "at_most(1, relevance, below=3, max_errors=2)",
            "all_pass(relevance)",
            "no_errors()",
            "error_rate() <= 0.5",
        ]
    )
    fold = GateFold(gate)
    for shard in shards:
        fold.add([shard])
    assert fold.verdicts is None  # no judge_agreement clause: no verdicts kept
    on_fold = gate.evaluate(fold)
    assert on_fold == evaluate_gates(gate, [merge_results(shards)])
    assert [c.passed for c in on_fold.clauses] == [False, True, False, False, False, True]
    assert on_fold.clauses[2].items == ["r1", "r4"]


def test_judge_agreement_on_the_shards_fold_reads_the_verdicts_of_every_shard(
    tmp_path: Path,
) -> None:
    """judge_agreement on a GateFold of a run's results cut in three shards has the κ, n and
    message it has on the whole results."""
    human = ["fail" if i % 3 == 0 else "pass" for i in range(30)]
    judge = {(f"r{i}", 0): (h == "pass", 4.0 if h == "pass" else 2.0) for i, h in enumerate(human)}
    run = write_run(
        tmp_path / "run", {"fact": {k: (True, 1.0) for k in judge}}, {"relevance": judge}
    )
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps({"row_id": f"r{i}", "metric": "relevance", "label": h}) + "\n"
            for i, h in enumerate(human)
        )
    )
    results = load_run(run)
    gate = Gate([f"judge_agreement(relevance, labels={json.dumps(str(labels))}) >= 0.6"])
    fold = GateFold(gate)
    for start in (0, 10, 20):
        fold.add([_part(r, start, start + 10) for r in results])
    [whole] = evaluate_gates(gate, results).clauses
    [folded] = gate.evaluate(fold).clauses
    assert folded == whole
    assert (folded.passed, folded.n, folded.observed) == (True, 30, 1.0)
