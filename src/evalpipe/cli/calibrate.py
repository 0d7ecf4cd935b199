"""``evalpipe calibrate RUN_DIR --labels FILE``: how far the run's judges agree with human labels,
written to ``--output`` (never into the run directory); ``--gate`` clauses use these labels.

``evalpipe review RUN_DIR --metric M``: collect human labels for a judge in the Prefect UI (the
review flow, ``evalpipe.pipeline.review``, on the Prefect API ``evalpipe run`` would use); the
run directory is only read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from evalpipe.artifacts import ArtifactError, load_run, read_manifest
from evalpipe.calibration import (
    CALIBRATION_FILE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Calibration,
    LabelsError,
    calibrate,
    read_labels,
    review_candidates,
    verdicts_of_run,
    write_calibration,
)
from evalpipe.cli._common import (
    EXIT_GATE_FAILED,
    EXIT_INCOMPLETE,
    EXIT_OK,
    CommandError,
    consoles,
    exits_on,
    num,
    require_run_dir,
    say,
)
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
        clauses = parse_gates(args.gate or [], source="--gate")
    with exits_on(LabelsError, ArtifactError):  # SchemaVersionError included
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
            say(out, "no labelled metric matched the run's scores")
        for c in found:
            for line in _lines(c):
                say(out, line, soft_wrap=True)
        say(out, f"seed {args.seed}, {args.resamples} resamples; written to {output}")
    if not clauses:
        return EXIT_OK
    gate = Gate(c.with_labels(labels_path) if isinstance(c, JudgeAgreement) else c for c in clauses)
    report = gate.evaluate(load_run(str(args.run_dir), input_items=False))
    say(err if args.json else out, report.summary())
    return EXIT_OK if report.passed else EXIT_GATE_FAILED


async def _review(args: argparse.Namespace, output: Path) -> str:
    from evalpipe.pipeline.review import review_flow  # lazy: prefect, only for this command
    from evalpipe.pipeline.run import check_api  # lazy: prefect, only for this command
    from evalpipe.pipeline.server import prefect_api  # lazy: prefect, only for this command

    await check_api()
    async with prefect_api([]):
        return await review_flow(
            str(args.run_dir),
            args.metric,
            str(output),
            sample=args.sample,
            show_verdict=args.show_verdict,
            seed=args.seed,
        )


def _review_command(args: argparse.Namespace) -> int:
    require_run_dir(args.run_dir)
    if args.sample < 1:
        raise CommandError(f"--sample must be >= 1, got {args.sample}")
    with exits_on(ArtifactError):  # SchemaVersionError included
        candidates = review_candidates(args.run_dir, args.metric)
    if not candidates:
        raise CommandError(
            f"{args.run_dir}: no item has a pass/fail verdict on metric {args.metric!r}; pass "
            "--metric with a metric of scores.parquet that has verdicts"
        )
    output = args.output or Path(f"{Path(args.run_dir).name}-{args.metric}-labels.jsonl")
    if output.exists():
        raise CommandError(
            f"{output}: exists; pass another --output (labels are never overwritten)"
        )
    out = consoles()[0]
    say(
        out,
        f"review of {min(args.sample, len(candidates))} items on {args.metric}: open the paused "
        "flow run 'evalpipe-review' in the Prefect UI, answer the form and resume it",
        soft_wrap=True,
    )
    # the flow failed (a pause timeout, the API went away)
    with exits_on(Exception, code=EXIT_INCOMPLETE, message="the review did not complete: {}"):
        path = asyncio.run(_review(args, output))
    say(out, f"labels written to {path}")
    return EXIT_OK


def register(sub: Any) -> None:
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
        metavar="CLAUSE",
        help="a gate clause to evaluate with these labels, e.g. 'judge_agreement(relevance) >= "
        "0.6' (repeatable); exit 1 when one fails",
    )
    parser.set_defaults(handler=_calibrate)
    parser = sub.add_parser(
        "review",
        help="label a run's items for a judge metric in the Prefect UI",
        description=(
            "Start a Prefect flow run that pauses for a reviewer's labels: it samples items of "
            "the run (balanced between the judge's passes and fails, judge-vs-check "
            "disagreements first), shows them in the form's description and writes the answers "
            "as a labels file for `evalpipe calibrate`."
        ),
    )
    parser.add_argument("run_dir", type=Path, help="a run directory written by `evalpipe run`")
    parser.add_argument("--metric", required=True, help="the judge metric to label")
    parser.add_argument("--sample", type=int, default=20, help="items to label (default 20)")
    parser.add_argument(
        "--show-verdict",
        action="store_true",
        help="show the judge's verdict and reason beside each item (default: hidden)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help="the labels file to write (default: RUNNAME-METRIC-labels.jsonl here)",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="sampling seed")
    parser.set_defaults(handler=_review_command)
