"""Calibration against human labels: the labels file, exact κ / agreement / F1 / confusion checked
by hand and by an independent formula (numpy over scipy.stats.contingency.crosstab; sklearn is not
installed), Spearman/Pearson/MAE, the seeded bootstrap, errored scores counted apart, and
``evalpipe calibrate``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from scipy.stats import contingency, rankdata

from evalpipe.calibration import (
    Label,
    LabelsError,
    calibrate,
    cohen_kappa,
    read_calibration,
    read_labels,
    verdicts_of_run,
    write_labels,
)
from evalpipe.cli import main
from report.report_builders import write_run

# (judge verdict, human label) per row: tp=3, fp=1, fn=2, tn=4, one errored judge score, one
# item whose two labellers tie. Positive = fail.
PAIRS: list[tuple[Any, str]] = (
    [(False, "fail")] * 3 + [(False, "pass")] + [(True, "fail")] * 2 + [(True, "pass")] * 4
)
SCORES = [1.0, 2.0, 2.0, 2.0, 3.0, 4.0, 3.0, 4.0, 5.0, 5.0]


def _judged_run(tmp_path: Path) -> Path:
    judge: dict[tuple[str, int], tuple[Any, float | None]] = {}
    check: dict[tuple[str, int], tuple[Any, float | None]] = {}
    for i, ((verdict, _), score) in enumerate(zip(PAIRS, SCORES, strict=True)):
        judge[(f"r{i}", 0)] = (verdict, score)
        check[(f"r{i}", 0)] = (True, 1.0)
    judge[("r10", 0)] = ("error", None)
    check[("r10", 0)] = (True, 1.0)
    judge[("r11", 0)] = (True, 4.0)
    check[("r11", 0)] = (True, 1.0)
    return write_run(tmp_path / "run", {"fact": check}, {"relevance": judge})


def _labels(tmp_path: Path) -> Path:
    lines = [
        {"row_id": f"r{i}", "metric": "relevance", "label": human, "labeller": "ann"}
        for i, (_, human) in enumerate(PAIRS)
    ]
    lines.append({"row_id": "r10", "metric": "relevance", "label": "fail", "labeller": "ann"})
    lines.append({"row_id": "r11", "metric": "relevance", "label": "pass", "labeller": "ann"})
    lines.append({"row_id": "r11", "metric": "relevance", "label": "fail", "labeller": "bob"})
    lines.append({"row_id": "r0", "metric": "relevance", "label": "fail", "labeller": "bob"})
    lines.append({"row_id": "r9", "metric": "relevance", "label": "fail", "labeller": "bob"})
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _by_hand_from_parquet(run: Path, labels: Path) -> tuple[float, float, dict[str, int]]:
    """What a user computes from scores.parquet, items.parquet and the labels file, with pyarrow
    and numpy only: the majority label per item (ties and errored scores left out)."""
    scores = pq.read_table(run / "scores.parquet")
    scores = scores.filter(pc.equal(scores["metric"], "relevance"))
    items = pq.read_table(run / "items.parquet").select(["agent", "item_id", "row_id"])
    joined = scores.join(items, keys=["agent", "item_id"]).to_pylist()
    judge = {r["row_id"]: r["status"] for r in joined}
    votes: dict[str, list[str]] = {}
    for line in labels.read_text().splitlines():
        x = json.loads(line)
        votes.setdefault(x["row_id"], []).append(x["label"])
    j, h = [], []
    for row, vs in votes.items():
        if judge[row] == "error" or vs.count("pass") == vs.count("fail"):
            continue
        j.append(judge[row])
        h.append("pass" if vs.count("pass") > vs.count("fail") else "fail")
    table = contingency.crosstab(np.array(j), np.array(h))
    counts = table.count.astype(float)
    n = counts.sum()
    p_o = np.trace(counts) / n
    p_e = float((counts.sum(axis=1) * counts.sum(axis=0)).sum()) / n**2
    cells = {
        f"{a}/{b}": int(table.count[i, k])
        for i, a in enumerate(table.elements[0])
        for k, b in enumerate(table.elements[1])
    }
    confusion = {
        "tp": cells.get("fail/fail", 0),
        "fp": cells.get("fail/pass", 0),
        "fn": cells.get("pass/fail", 0),
        "tn": cells.get("pass/pass", 0),
    }
    return float(p_o), (p_o - p_e) / (1 - p_e), confusion


def test_pass_fail_statistics_match_hand_and_parquet_computation_to_1e9(tmp_path: Path) -> None:
    """κ, agreement, F1 and the confusion matrix equal the hand computation (agreement 6/9,
    κ 14/41, F1 2/3) and a pyarrow+numpy computation from the Parquet files, to 1e-9; the errored item
    and the tied item are counted apart."""
    run, labels = _judged_run(tmp_path), _labels(tmp_path)
    [c] = [
        c for c in calibrate(verdicts_of_run(run), read_labels(labels)) if c.metric == "relevance"
    ]
    # majority per item: r0 fail+fail -> fail; r9 pass+fail -> tie (left out); r11 tie
    # so the 2x2 loses r9 (a tn): tp 3, fp 1, fn 2, tn 3 on n = 9
    assert (c.confusion.tp, c.confusion.fp, c.confusion.fn, c.confusion.tn) == (3, 1, 2, 3)  # type: ignore[union-attr]
    assert (c.n_labelled, c.n, c.n_errored, c.n_tied, c.n_labels) == (12, 9, 1, 2, 15)
    p_o = 6 / 9
    p_e = (4 * 5 + 5 * 4) / 81  # judge 4 fail 5 pass; people 5 fail 4 pass
    assert c.agreement == pytest.approx(p_o, abs=1e-9)
    assert c.kappa == pytest.approx((p_o - p_e) / (1 - p_e), abs=1e-9)
    assert c.kappa == pytest.approx(14 / 41, abs=1e-9)
    assert c.f1 == pytest.approx(2 * 3 / (2 * 3 + 1 + 2), abs=1e-9)
    assert c.precision == pytest.approx(3 / 4)
    assert c.recall == pytest.approx(3 / 5)
    agreement, kappa, confusion = _by_hand_from_parquet(run, labels)
    assert abs(c.agreement - agreement) < 1e-9  # type: ignore[operator]
    assert abs(c.kappa - kappa) < 1e-9  # type: ignore[operator]
    assert c.confusion.model_dump() == confusion  # type: ignore[union-attr]
    assert c.kappa_low is not None
    assert c.kappa_high is not None
    assert c.kappa_low <= c.kappa <= c.kappa_high
    assert any("fewer than 20" in w for w in c.warnings)
    assert any("1 labelled items errored" in w for w in c.warnings)
    ia = c.inter_annotator
    assert ia is not None
    assert ia.labellers == ["ann", "bob"]
    assert ia.n == 3
    assert ia.agreement == pytest.approx(1 / 3)
    assert ia.pair == ["ann", "bob"]
    assert ia.pair_n == 3


def test_kappa_without_the_errored_item_is_not_an_agreement_or_a_disagreement(
    tmp_path: Path,
) -> None:
    """Relabelling the errored item either way leaves every statistic unchanged."""
    run = _judged_run(tmp_path)
    base = read_labels(_labels(tmp_path))
    results = []
    for label in ("pass", "fail"):
        changed = [x.model_copy(update={"label": label}) if x.row_id == "r10" else x for x in base]
        [c] = [c for c in calibrate(verdicts_of_run(run), changed) if c.metric == "relevance"]
        results.append((c.n, c.n_errored, c.agreement, c.kappa, c.f1, c.kappa_low, c.kappa_high))
    assert results[0] == results[1]


def test_suggested_threshold_maximises_kappa(tmp_path: Path) -> None:
    """For a numeric judge and pass/fail labels the suggested threshold is the score bound with
    the highest κ, checked by trying every bound by hand."""
    run, labels = _judged_run(tmp_path), _labels(tmp_path)
    [c] = [
        c for c in calibrate(verdicts_of_run(run), read_labels(labels)) if c.metric == "relevance"
    ]
    kept = [i for i in range(10) if i != 9]  # r9 tied
    scores = [SCORES[i] for i in kept]
    human = ["fail" if i == 0 else PAIRS[i][1] for i in kept]
    best = max(
        (
            (t, cohen_kappa(["pass" if s >= t else "fail" for s in scores], human))
            for t in sorted(set(scores))
        ),
        key=lambda tk: -math.inf if tk[1] is None else tk[1],
    )
    assert c.suggested_threshold == best[0]
    assert c.suggested_kappa == pytest.approx(best[1])


def test_numeric_labels_spearman_pearson_mae_and_matrix(tmp_path: Path) -> None:
    """Numeric labels: Spearman (ties: Pearson of average ranks), Pearson, MAE, exact agreement,
    κ and the N×M matrix equal a computation by hand from scores.parquet (numpy), to 1e-9."""
    judge_scores = [1.0, 2.0, 2.0, 3.0, 4.0, 5.0, 5.0, 3.0]
    human_scores = [1.0, 1.0, 2.0, 3.0, 5.0, 5.0, 4.0, 4.0]
    judge = {(f"r{i}", 0): (s >= 3, s) for i, s in enumerate(judge_scores)}
    run = write_run(
        tmp_path / "run", {"fact": {k: (True, 1.0) for k in judge}}, {"relevance": judge}
    )
    labels = [
        Label(row_id=f"r{i}", metric="relevance", label=h) for i, h in enumerate(human_scores)
    ]
    [c] = [c for c in calibrate(verdicts_of_run(run), labels) if c.metric == "relevance"]
    x, y = np.array(judge_scores), np.array(human_scores)
    assert c.kind == "numeric"
    assert c.n == 8
    assert c.pearson == pytest.approx(float(np.corrcoef(x, y)[0, 1]), abs=1e-9)
    assert c.spearman == pytest.approx(float(np.corrcoef(rankdata(x), rankdata(y))[0, 1]), abs=1e-9)
    assert c.mae == pytest.approx(float(np.mean(np.abs(x - y))), abs=1e-9)
    assert c.agreement == pytest.approx(4 / 8)
    assert c.matrix is not None
    assert sum(map(sum, c.matrix.counts)) == 8
    assert c.matrix.counts[c.matrix.judge.index(5.0)][c.matrix.human.index(4.0)] == 1
    # by hand from scores.parquet + items.parquet: κ over the N×M table (numpy), agreement, matrix
    scores = pq.read_table(run / "scores.parquet")
    scores = scores.filter(pc.equal(scores["metric"], "relevance"))
    items = pq.read_table(run / "items.parquet").select(["agent", "item_id", "row_id"])
    judged = {
        r["row_id"]: r["score"] for r in scores.join(items, keys=["agent", "item_id"]).to_pylist()
    }
    j = np.array([judged[f"r{i}"] for i in range(8)])
    table = contingency.crosstab(j, y)
    counts = table.count.astype(float)
    values = sorted(set(j) | set(y))
    full = np.zeros((len(values), len(values)))
    for a, va in enumerate(table.elements[0]):
        for b, vb in enumerate(table.elements[1]):
            full[values.index(va), values.index(vb)] = counts[a, b]
    p_o = np.trace(full) / full.sum()
    p_e = float((full.sum(axis=1) * full.sum(axis=0)).sum()) / full.sum() ** 2
    assert abs(c.kappa - (p_o - p_e) / (1 - p_e)) < 1e-9  # type: ignore[operator]
    assert abs(c.agreement - p_o) < 1e-9  # type: ignore[operator]
    assert c.matrix.counts == table.count.tolist()
    assert c.matrix.judge == list(table.elements[0])
    assert c.matrix.human == list(table.elements[1])


def test_one_class_labels_warn_and_kappa_is_undefined_when_both_sides_are_one_class(
    tmp_path: Path,
) -> None:
    """All-pass labels against an all-pass judge: agreement 1, κ undefined (None, no interval),
    and a plain warning."""
    judge = {(f"r{i}", 0): (True, 5.0) for i in range(25)}
    run = write_run(
        tmp_path / "run", {"fact": {k: (True, 1.0) for k in judge}}, {"relevance": judge}
    )
    labels = [Label(row_id=f"r{i}", metric="relevance", label="pass") for i in range(25)]
    [c] = [c for c in calibrate(verdicts_of_run(run), labels) if c.metric == "relevance"]
    assert c.agreement == 1.0
    assert c.kappa is None
    assert c.kappa_low is None
    assert any("all one class" in w for w in c.warnings)
    assert not any("fewer than" in w for w in c.warnings)


def test_bootstrap_is_seeded_and_agrees_with_the_wilson_interval_at_n_400() -> None:
    """The same seed gives the same intervals, another seed others; at n=400 the agreement's
    bootstrap interval is within 0.01 of the Wilson interval (scipy.stats.binomtest)."""
    from scipy.stats import binomtest

    from evalpipe.calibration import Verdict

    rng = np.random.default_rng(7)
    human = rng.choice(["pass", "fail"], size=400)
    flip = rng.random(400) < 0.2
    judge = np.where(flip, np.where(human == "pass", "fail", "pass"), human)
    verdicts = [Verdict("J", "overall", "m", f"r{i}", 0, str(j), None) for i, j in enumerate(judge)]
    labels = [Label(row_id=f"r{i}", metric="m", label=str(h)) for i, h in enumerate(human)]
    [a] = calibrate(verdicts, labels, seed=1)
    [b] = calibrate(verdicts, labels, seed=1)
    [other] = calibrate(verdicts, labels, seed=2)
    assert (a.kappa_low, a.kappa_high) == (b.kappa_low, b.kappa_high)
    assert (a.kappa_low, a.kappa_high) != (other.kappa_low, other.kappa_high)
    agree = int((judge == human).sum())
    wilson = binomtest(agree, 400).proportion_ci(0.95, method="wilson")
    assert abs(a.agreement_low - wilson.low) < 0.01  # type: ignore[operator]
    assert abs(a.agreement_high - wilson.high) < 0.01  # type: ignore[operator]
    assert a.seed == 1
    assert a.resamples == 2000
    assert a.confidence == 0.95


def test_labels_file_errors_name_the_line_and_field(tmp_path: Path) -> None:
    """A bad label value, an unknown field, a missing metric and invalid JSON each name file:line."""
    path = tmp_path / "l.jsonl"
    cases = {
        '{"row_id": "r0", "metric": "m", "label": "maybe"}': ":2: field 'label'",
        '{"row_id": "r0", "metric": "m", "label": "pass", "colour": 1}': ":2: unknown field 'colour'",
        '{"row_id": "r0", "label": "pass"}': ":2: field 'metric'",
        "{not json": ":2: not valid JSON",
    }
    for line, expected in cases.items():
        path.write_text('{"row_id": "r0", "metric": "m", "label": "fail"}\n' + line + "\n")
        with pytest.raises(LabelsError, match=expected.replace("(", r"\(")):
            read_labels(path)


def test_csv_labels_read_like_jsonl_and_write_labels_round_trips(tmp_path: Path) -> None:
    """A CSV labels file gives the same labels as JSONL (repetition and agent defaulted), and
    write_labels writes what read_labels reads back."""
    csv_path = tmp_path / "l.csv"
    csv_path.write_text(
        'row_id,metric,label,labeller,note\nr0,relevance,pass,ann,"fine, really"\nr1,relevance,2.5,,\n'
    )
    labels = read_labels(csv_path)
    assert [(x.row_id, x.repetition, x.agent, x.label, x.note, x.line) for x in labels] == [
        ("r0", 0, "overall", "pass", "fine, really", 2),
        ("r1", 0, "overall", 2.5, None, 3),
    ]
    again = read_labels(write_labels(tmp_path / "l.jsonl", labels))
    assert [x.model_dump() for x in again] == [x.model_dump() for x in labels]


def test_unknown_rows_metrics_and_agents_are_errors_naming_the_line(tmp_path: Path) -> None:
    """A label for a row, metric or agent the run lacks is an error naming the line, never dropped."""
    run = _judged_run(tmp_path)
    verdicts = verdicts_of_run(run)
    good = '{"row_id": "r0", "metric": "relevance", "label": "fail"}\n'
    for bad, expected in [
        ('{"row_id": "nope", "metric": "relevance", "label": "fail"}', "l.jsonl:2: field 'row_id'"),
        ('{"row_id": "r0", "metric": "nope", "label": "fail"}', "l.jsonl:2: field 'metric'"),
        (
            '{"row_id": "r0", "agent": "w", "metric": "relevance", "label": "fail"}',
            "l.jsonl:2: field 'agent'",
        ),
        (
            '{"row_id": "r0", "repetition": 3, "metric": "relevance", "label": "fail"}',
            "l.jsonl:2: field 'row_id'",
        ),
        ('{"row_id": "r1", "metric": "relevance", "label": 3}', "l.jsonl:2: field 'label'"),
    ]:
        path = tmp_path / "l.jsonl"
        path.write_text(good + bad + "\n")
        with pytest.raises(LabelsError, match=expected):
            calibrate(verdicts, read_labels(path), source=str(path))


def test_cli_json_writes_beside_the_labels_and_leaves_the_run_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`evalpipe calibrate --json` prints the promised keys, writes calibration.json beside the
    labels (read back by read_calibration), and rewrites nothing in the run directory."""
    run, labels = _judged_run(tmp_path), _labels(tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    assert main(["calibrate", str(run), "--labels", str(labels), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    [row] = [r for r in rows if r["metric"] == "relevance"]
    assert {
        "provider",
        "agent",
        "metric",
        "n",
        "agreement",
        "kappa",
        "kappa_low",
        "kappa_high",
        "confusion",
    } <= set(row)
    assert row["confusion"] == {"tp": 3, "fp": 1, "fn": 2, "tn": 3}
    assert row["n"] == 9
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before
    saved = read_calibration(tmp_path / "calibration.json")
    assert saved.calibrations[0].model_dump(mode="json") in rows
    assert (
        main(["calibrate", str(run), "--labels", str(labels), "-o", str(tmp_path / "x.json")]) == 0
    )
    out = capsys.readouterr().out
    assert "tp 3 fp 1 fn 2 tn 3" in out
    assert "fewer than 20" in out


def test_cli_bad_labels_exit_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown row in the labels is exit 2 with file:line and the field."""
    run = _judged_run(tmp_path)
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"row_id": "r0", "metric": "relevance", "label": "fail"}\n{"row_id": "zz", "metric": "relevance", "label": "pass"}\n'
    )
    assert main(["calibrate", str(run), "--labels", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: field 'row_id'" in " ".join(err.split())
    assert not (tmp_path / "calibration.json").exists()


def test_results_without_metadata_are_keyed_by_the_suite_item_ids() -> None:
    """Results the flow stripped of metadata (as the gate sees them) are keyed by the suite's item
    ids: ``row#rep`` overall, ``row#rep/agent[/k]`` per agent; other ids stay as they are."""
    from evalpipe.calibration import verdicts_of_results
    from evalpipe.results import EvalItemResult, EvalResults, EvalScoreResult

    def scored(item_id: str) -> EvalItemResult:
        return EvalItemResult(item_id, "pass", [EvalScoreResult("m", 5.0, True)])

    writer = EvalResults(provider="J", items=[scored("a#b#3/writer"), scored("r1#0/writer/2")])
    top = EvalResults(
        provider="J",
        items=[scored("r1#2"), scored("plain")],
        sub_results={"writer": writer},
    )
    keys = [(v.agent, v.row_id, v.repetition) for v in verdicts_of_results([top])]
    assert keys == [
        ("overall", "r1", 2),
        ("overall", "plain", 0),
        ("writer", "a#b", 3),
        ("writer", "r1", 0),
    ]


def test_review_sample_is_balanced_with_disagreements_first() -> None:
    """With 10 judge passes and 3 fails, a sample of 8 takes every fail and 5 passes, puts the
    disagreeing items first, is the same for the same seed, and never repeats an item."""
    from evalpipe.calibration import ReviewItem, sample_for_review

    def item(i: int, status: str, disagrees: bool = False) -> ReviewItem:
        return ReviewItem(
            f"r{i}", 0, "overall", "J", f"r{i}#0", "q", "a", status, None, None, disagrees
        )

    items = [item(i, "pass", disagrees=i == 7) for i in range(10)]
    items += [item(10 + i, "fail", disagrees=i == 2) for i in range(3)]
    items.append(item(0, "pass"))  # the same item again (another provider)
    chosen = sample_for_review(items, 8, seed=3)
    assert len(chosen) == 8
    assert sum(x.judge_status == "fail" for x in chosen) == 3
    assert {x.row_id for x in chosen[:2]} == {"r7", "r12"}
    assert len({x.row_id for x in chosen}) == 8
    assert sample_for_review(items, 8, seed=3) == chosen
    even = sample_for_review(items, 6, seed=3)
    assert sum(x.judge_status == "fail" for x in even) == 3
