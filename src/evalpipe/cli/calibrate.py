"""``evalpipe calibrate RUN_DIR --labels FILE``: how far the run's judges agree with human labels.

The results are written to ``--output`` (default: ``calibration.json`` beside the labels file),
never into the run directory; ``--gate`` clauses are evaluated with these labels (exit 1 when one
fails).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from evalpipe.artifacts import ArtifactError, SchemaVersionError, load_run, read_manifest
from evalpipe.calibration import (
    CALIBRATION_FILE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Calibration,
    LabelsError,
    calibrate,
    read_labels,
    verdicts_of_run,
    write_calibration,
)
from evalpipe.cli._common import (
    EXIT_GATE_FAILED,
    EXIT_OK,
    CommandError,
    consoles,
    exits_on,
    num,
    require_run_dir,
    say,
)
from evalpipe.escape import plain
from evalpipe.gates import Gate, GateSyntaxError, JudgeAgreement, parse_gates

__all__ = ["register"]


def _ci(value: float | None, low: float | None, high: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f} [{num(low)}, {num(high)}]" if low is not None else f"{value:.3f}"


def _lines(c: Calibration) -> list[str]:
    """One calibration for people: κ, agreement and F1 with their intervals, n, the matrix."""
    head = (
        f"{c.provider} / {c.agent} / {c.metric}: κ {_ci(c.kappa, c.kappa_low, c.kappa_high)} on "
        f"n={c.n} matched items ({c.n_labelled} labelled, {c.n_errored} errored, {c.n_tied} tied, "
        f"{c.n_not_applicable} not applicable); agreement "
        f"{_ci(c.agreement, c.agreement_low, c.agreement_high)}"
    )
    lines = [head]
    if c.confusion is not None:
        m = c.confusion
        lines.append(
            f"  F1 at catching fails {_ci(c.f1, c.f1_low, c.f1_high)}; confusion (positive = "
            f"fail): tp {m.tp} fp {m.fp} fn {m.fn} tn {m.tn}; judge pass rate "
            f"{num(c.judge_pass_rate)}, human pass rate {num(c.human_pass_rate)}"
        )
        if c.suggested_threshold is not None:
            lines.append(
                f"  suggested threshold: pass when score >= {c.suggested_threshold:g} "
                f"(κ {num(c.suggested_kappa)} on these labels)"
            )
    else:
        lines.append(f"  spearman {num(c.spearman)}, pearson {num(c.pearson)}, MAE {num(c.mae)}")
    if c.inter_annotator is not None:
        ia = c.inter_annotator
        pair = (
            f"; κ {num(ia.kappa)} between {' and '.join(ia.pair)} on {ia.pair_n}" if ia.pair else ""
        )
        lines.append(
            f"  labellers {', '.join(ia.labellers)}: all agree on {num(ia.agreement)} of "
            f"{ia.n} items labelled twice or more{pair}"
        )
    lines.extend(f"  warning: {w}" for w in c.warnings)
    return lines


def _calibrate(args: argparse.Namespace) -> int:
    out, err = consoles()
    require_run_dir(args.run_dir)
    if args.resamples < 100:
        raise CommandError(f"--resamples must be >= 100, got {args.resamples}")
    labels_path = str(args.labels)
    with exits_on(GateSyntaxError):
        gates = Gate(parse_gates(args.gate or [], source="--gate")) if args.gate else None
    with exits_on(LabelsError, ArtifactError, SchemaVersionError):
        labels = read_labels(args.labels)
        verdicts = verdicts_of_run(args.run_dir)
        found = calibrate(
            verdicts, labels, seed=args.seed, resamples=args.resamples, source=labels_path
        )
        manifest = read_manifest(str(args.run_dir))
    output = args.output or Path(args.labels).with_name(CALIBRATION_FILE)
    with exits_on(OSError, message=f"cannot write {output}: {{}}; pass another --output"):
        write_calibration(
            output, str(args.run_dir), labels_path, found, run_name=manifest.get("run_name")
        )
    if args.json:
        print(json.dumps([c.model_dump(mode="json") for c in found], indent=2))
    else:
        if not found:
            out.print("no labelled metric matched the run's scores", markup=False)
        for c in found:
            for line in _lines(c):
                say(out, plain(line), soft_wrap=True)
        say(out, f"seed {args.seed}, {args.resamples} resamples; written to {output}")
    if gates is None:
        return EXIT_OK
    clauses = [c.with_labels(labels_path) if isinstance(c, JudgeAgreement) else c for c in gates]
    report = Gate(clauses).evaluate(load_run(str(args.run_dir), input_items=False))
    say(err if args.json else out, report.summary())
    return EXIT_OK if report.passed else EXIT_GATE_FAILED


def register(sub: Any) -> None:
    """Add ``calibrate`` to the command line."""
    parser = sub.add_parser(
        "calibrate",
        help="how far a run's judges agree with human labels (kappa, agreement, F1)",
        description=(
            "Compare a finished run's judge verdicts with human labels (a JSONL or CSV file: "
            "row_id, repetition, agent, metric, label, labeller, note, labelled_at): agreement, "
            "Cohen's kappa, F1 at catching fails, the confusion matrix, Spearman/Pearson/MAE for "
            "numeric labels, each with a seeded 95%% bootstrap interval. Errored judge scores are "
            "counted apart. Exit 2 on a bad labels file (the message names the line), 1 when a "
            "--gate clause fails."
        ),
    )
    parser.add_argument("run_dir", type=Path, help="a run directory written by `evalpipe run`")
    parser.add_argument("--labels", type=Path, required=True, help="the labels file (.jsonl/.csv)")
    parser.add_argument("--json", action="store_true", help="print a JSON list, one per metric")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help=f"where to write the results (default: {CALIBRATION_FILE} beside the labels)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"bootstrap seed (default {DEFAULT_SEED})"
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=DEFAULT_RESAMPLES,
        help=f"bootstrap resamples (default {DEFAULT_RESAMPLES})",
    )
    parser.add_argument(
        "--gate",
        action="append",
        default=None,
        metavar="CLAUSE",
        help="a gate clause to evaluate with these labels, e.g. 'judge_agreement(relevance) >= "
        "0.6' (repeatable); exit 1 when one fails",
    )
    parser.set_defaults(handler=_calibrate)
