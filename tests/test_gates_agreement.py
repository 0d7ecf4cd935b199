"""The ``judge_agreement(metric) >= κ`` gate clause: fails on a judge that disagrees with its
labels, passes on one that agrees, fails with no labels or too few, names n and the interval, and
reads back from its text (evalpipe.gates; the statistics are evalpipe.calibration's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpipe.artifacts import load_run
from evalpipe.calibration import cohen_kappa
from evalpipe.cli import main
from evalpipe.gates import (
    GateSyntaxError,
    JudgeAgreement,
    evaluate_gates,
    judge_agreement,
    parse_gates,
)
from report.report_builders import write_run

N = 30
HUMAN = ["fail" if i % 3 == 0 else "pass" for i in range(N)]  # 10 fail, 20 pass


def _run(tmp_path: Path, judge_verdicts: list[bool]) -> Path:
    judge = {(f"r{i}", 0): (v, 4.0 if v else 2.0) for i, v in enumerate(judge_verdicts)}
    check = {k: (True, 1.0) for k in judge}
    return write_run(tmp_path / "run", {"fact": check}, {"relevance": judge})


def _labels(tmp_path: Path, rows: range = range(N)) -> Path:
    path = tmp_path / "labels.jsonl"
    path.write_text(
        "".join(
            json.dumps({"row_id": f"r{i}", "metric": "relevance", "label": HUMAN[i]}) + "\n"
            for i in rows
        )
    )
    return path


AGREEING = [h == "pass" for h in HUMAN]
AGREEING[1] = False  # one miss: κ = (29/30 - p_e) / (1 - p_e)
DISAGREEING = [i % 2 == 0 for i in range(N)]  # unrelated to the labels


def test_passes_on_an_agreeing_judge_naming_n_and_the_interval(tmp_path: Path) -> None:
    """A judge that matches 29 of 30 labels passes κ >= 0.6; the verdict names n=30 and κ's
    interval, and κ is the hand value."""
    results = load_run(_run(tmp_path, AGREEING), input_items=False)
    clause = judge_agreement("relevance", labels=str(_labels(tmp_path))) >= 0.6
    report = evaluate_gates(clause, results)
    [verdict] = report.clauses
    expected = cohen_kappa(["pass" if v else "fail" for v in AGREEING], HUMAN)
    assert report.passed
    assert verdict.observed == pytest.approx(expected, abs=1e-12)
    assert verdict.n == N
    assert "n=30 matched items" in verdict.message
    assert "κ 0.9" in verdict.message
    assert "[" in verdict.message
    assert "holds κ >= 0.6" in verdict.message


def test_fails_on_a_disagreeing_judge(tmp_path: Path) -> None:
    """A judge whose verdicts are unrelated to the labels fails κ >= 0.6, with its κ."""
    results = load_run(_run(tmp_path, DISAGREEING), input_items=False)
    report = evaluate_gates(
        [f'judge_agreement(relevance, labels="{_labels(tmp_path)}") >= 0.6'], results
    )
    [verdict] = report.clauses
    expected = cohen_kappa(["pass" if v else "fail" for v in DISAGREEING], HUMAN)
    assert not report.passed
    assert verdict.observed == pytest.approx(expected, abs=1e-12)
    assert expected is not None
    assert expected < 0.6
    assert "needs κ >= 0.6" in verdict.message


def test_fails_without_labels_and_with_too_few(tmp_path: Path) -> None:
    """No labels file: fails as not calibrated; 10 labels (below min_n=20): fails however well
    the judge agrees; a labels file naming an unknown row: fails naming the line; a missing
    labels file: fails saying so."""
    results = load_run(_run(tmp_path, [h == "pass" for h in HUMAN]), input_items=False)
    [none] = evaluate_gates([judge_agreement("relevance") >= 0.6], results).clauses
    assert not none.passed
    assert "no labels" in none.message
    few = _labels(tmp_path, range(10))
    [small] = evaluate_gates(
        [judge_agreement("relevance", labels=str(few)) >= 0.6], results
    ).clauses
    assert not small.passed
    assert small.n == 10
    assert "needs at least 20 matched items" in small.message
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"row_id": "nope", "metric": "relevance", "label": "pass"}\n')
    [broken] = evaluate_gates(
        [judge_agreement("relevance", labels=str(bad)) >= 0.6], results
    ).clauses
    assert not broken.passed
    assert f"{bad}:1: field 'row_id'" in broken.message
    gone = str(tmp_path / "missing.jsonl")
    [missing] = evaluate_gates([judge_agreement("relevance", labels=gone) >= 0.6], results).clauses
    assert not missing.passed
    assert "no such labels file" in missing.message


def test_text_form_reads_back_and_rejects_bad_bounds() -> None:
    """The clause's text parses back to an equal clause; a κ bound outside [-1, 1] or a min_n
    below 2 is a GateSyntaxError naming the clause."""
    [clause] = parse_gates(
        ['writer: judge_agreement(relevance, labels="l.jsonl", min_n=30) >= 0.6']
    )
    assert isinstance(clause, JudgeAgreement)
    assert (clause.agent, clause.labels, clause.min_n, clause.threshold) == (
        "writer",
        "l.jsonl",
        30,
        0.6,
    )
    assert parse_gates([str(clause)]) == [clause]
    assert (
        str(parse_gates(["judge_agreement(relevance) >= 0.6"])[0])
        == "judge_agreement(relevance) >= 0.6"
    )
    with pytest.raises(GateSyntaxError, match=r"gates\[0\].*kappa in \[-1, 1\]"):
        parse_gates(["judge_agreement(relevance) >= 3.5"])
    with pytest.raises(GateSyntaxError, match="min_n must be an integer >= 2"):
        parse_gates(["judge_agreement(relevance, min_n=1) >= 0.5"])


def test_calibrate_gate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`evalpipe calibrate --gate` reads the clause's labels from --labels: exit 0 on the agreeing
    judge, 1 on the disagreeing one."""
    labels = _labels(tmp_path)
    good = _run(tmp_path / "a", AGREEING)
    bad = _run(tmp_path / "b", DISAGREEING)
    gate = "judge_agreement(relevance) >= 0.6"
    assert main(["calibrate", str(good), "--labels", str(labels), "--gate", gate]) == 0
    assert "Gate passed" in capsys.readouterr().out
    assert main(["calibrate", str(bad), "--labels", str(labels), "--gate", gate]) == 1
    assert "Gate FAILED" in capsys.readouterr().out
