"""``evalpipe run SUITE.yaml``: run a suite's Prefect flow with a progress bar and a summary."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from evalpipe.cli._common import (
    EXIT_GATE_FAILED,
    EXIT_INCOMPLETE,
    EXIT_OK,
    consoles,
    fail,
)
from evalpipe.cli.results import print_run
from evalpipe.escape import plain
from evalpipe.runner.state import RunLockedError
from evalpipe.suite import SuiteError, load_suite

__all__ = ["register"]


def _quiet_prefect() -> None:
    """Prefect's own console logs would tear the progress bar; keep warnings and errors only."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # The ephemeral server drops events still in flight when the process exits and logs each
    # drop as a traceback; the run's Parquet files are the record, so keep its console quiet.
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")


def _run(args: argparse.Namespace) -> int:
    out, err = consoles()
    try:
        suite = load_suite(args.suite, args.param)
        if args.output is not None:
            suite.output_dir = str(args.output)
        _quiet_prefect()
        from evalpipe.pipeline import (  # lazy: Prefect, only to run
            PrefectUnavailableError,
            prepare_run,
            run_suite,
        )

        plan = prepare_run(
            suite, run_dir=args.run_dir, rescore=args.rescore, resume=not args.new_run
        )
    except SuiteError as exc:
        return fail(err, str(exc))
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=args.no_progress,
    ) as bar:
        tasks: dict[str, Any] = {}
        labels = {"calls": "target calls", "items": "shards evaluated"}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(labels.get(stage, stage), total=total)
            bar.update(tasks[stage], completed=done, total=total)

        try:
            outcome = run_suite(
                suite, rescore=args.rescore, progress=progress, plan=plan, wait=args.wait
            )
        except (RunLockedError, SuiteError) as exc:
            return fail(err, str(exc))
        except PrefectUnavailableError as exc:
            return fail(err, str(exc), EXIT_INCOMPLETE)
    for note in outcome.notes:
        err.print(f"note: {plain(note)}", markup=False, highlight=False)
    if outcome.published_to:
        out.print(f"published to {outcome.published_to}", markup=False, highlight=False)
    if outcome.reusable_calls:
        out.print(
            f"resumed: {outcome.reusable_calls} call(s) reused from the run's journal "
            "(not called again)"
        )
    if (outcome.run_dir / "manifest.json").exists():
        print_run(outcome.run_dir, out)
    if outcome.verdict == "gate_failed":
        err.print(
            plain(outcome.message), style="red", markup=False, highlight=False, soft_wrap=True
        )
        return EXIT_GATE_FAILED
    if outcome.verdict == "incomplete":
        err.print(
            f"the run could not complete (flow run {outcome.state}): {plain(outcome.message)}; "
            f"run directory {outcome.run_dir}",
            style="red",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return EXIT_INCOMPLETE
    if outcome.verdict == "warned":
        out.print("gate failed (warn only)", style="yellow", markup=False, highlight=False)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``run`` to the command line."""
    parser = sub.add_parser(
        "run",
        help="run a suite's flow on Prefect (ephemeral by default)",
        description=(
            "Run a suite: its target over the dataset with repetitions, every evaluator, the "
            "gate; Parquet files, a report and Prefect artifacts in a run directory."
        ),
    )
    parser.add_argument("suite", type=Path, help="the suite YAML file")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a suite field, e.g. --param repetitions=5 (repeatable; values are YAML)",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="output directory or filesystem URI, e.g. s3://bucket/evals (suite's output_dir)",
    )
    parser.add_argument(
        "--run-dir", type=Path, default=None, help="write (or resume) this run directory"
    )
    parser.add_argument(
        "--rescore",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="re-evaluate the transcripts stored in RUN_DIR instead of calling the target",
    )
    parser.add_argument(
        "--new-run",
        "--no-resume",
        dest="new_run",
        action="store_true",
        help="start a new run directory (calling everything again) even if an unfinished run "
        "of the same target exists",
    )
    parser.add_argument(
        "--wait",
        nargs="?",
        type=float,
        const=None,
        default=0.0,
        metavar="SECONDS",
        help="when a live run holds the run directory, wait for it (at most SECONDS; no value: "
        "as long as it takes), then reuse its finished calls; without --wait such a run is "
        "refused",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=_run)
