"""``evalpipe results RUN_DIR``: print a finished run's summary again; ``evalpipe report RUN_DIR``:
write its self-contained HTML report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]
from rich.console import Console

from evalpipe._internal.adaptive import limit_notes
from evalpipe.artifacts import ArtifactError, read_manifest, read_not_passed, read_summary
from evalpipe.artifacts.history import join
from evalpipe.artifacts.reader import manifest_part
from evalpipe.artifacts.writer import resolve_filesystem
from evalpipe.calibration import LabelsError, read_calibration
from evalpipe.cli._common import (
    EXIT_OK,
    MAX_FAILURES,
    CommandError,
    Failure,
    consoles,
    exits_on,
    item_label,
    print_summary,
    require_run_dir,
    say,
)
from evalpipe.escape import plain
from evalpipe.spend import spend_text

__all__ = ["print_run", "register"]


def print_run(run_dir: Path | str, console: Console) -> None:
    """A finished run's summary from its summary.parquet and manifest (items are not loaded);
    ``run_dir`` is a directory or a filesystem URI."""
    run_dir = str(run_dir)
    manifest = read_manifest(run_dir)
    rows = read_summary(run_dir)
    not_passed = read_not_passed(run_dir, limit=MAX_FAILURES)
    failures = [
        Failure(
            level,
            item_label(item["item_id"], item["item_metadata"]),
            item["item_status"],
            item["input_text"],
            item["why"],
            item["output_text"],
        )
        for level, items in not_passed.items()
        for item in items
    ]
    fs, path = resolve_filesystem(run_dir)
    has_report = fs.get_file_info(f"{path}/report.html").type == pafs.FileType.File
    report = join(run_dir, "report.html") if has_report else None
    rest = f"every item is in {join(run_dir, 'scores.parquet')}" + (
        f" and {report}" if report else ""
    )
    name_of_dir = run_dir.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]
    name = manifest_part(manifest, "suite").get("name")
    print_summary(
        rows,
        failures,
        console,
        calls=manifest_part(manifest, "calls"),
        rest=rest,
        heading=f"evalpipe summary: {name or name_of_dir} ({manifest.get('run_name') or name_of_dir})",
    )
    gate = manifest.get("gate")
    if gate:
        verdict = "[green]passed[/]" if gate.get("passed") else "[red]FAILED[/]"
        console.print(f"gate {verdict}")
        for clause in gate.get("clauses", []):
            mark = "ok" if clause.get("passed") else "FAIL"
            say(console, f"  {plain(clause.get('clause'))}  {mark}  {plain(clause.get('message'))}")
    spend = manifest.get("spend")
    if isinstance(spend, dict):
        say(console, f"spent: {spend_text(spend)}", soft_wrap=True)
    for note in limit_notes(manifest.get("concurrency")):
        say(console, f"concurrency: {note}", soft_wrap=True)
    say(console, f"run directory: {run_dir}")
    if report:
        say(console, f"report: {report}")


def _results(args: argparse.Namespace) -> int:
    require_run_dir(args.run_dir)
    with exits_on(ArtifactError):
        print_run(args.run_dir, consoles()[0])
    return EXIT_OK


def _report(args: argparse.Namespace) -> int:
    require_run_dir(args.run_dir)
    if args.max_items < 0:
        raise CommandError(f"--max-items must be >= 0, got {args.max_items}")
    from evalpipe.report.html import write_report  # lazy: scipy, only for this command

    calibration = []
    if args.calibration is not None:
        with exits_on(LabelsError):
            calibration = read_calibration(args.calibration).calibrations
    # ArtifactError (SchemaVersionError included): the run's; OSError: writing the report
    with exits_on(OSError, message="cannot write the report: {}"), exits_on(ArtifactError):
        path = write_report(
            args.run_dir, args.output, max_items=args.max_items, calibration=calibration
        )
    say(consoles()[0], f"report written to {path}")
    return EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "results",
        help="print a finished run's summary again",
        description="Print a finished run's summary table, failures, calls and gate verdict.",
    )
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help="a run directory written by `evalpipe run` (or its filesystem URI)",
    )
    parser.set_defaults(handler=_results)
    parser = sub.add_parser(
        "report",
        help="write a run's self-contained HTML report",
        description="Write a finished run's HTML report: statistics, repetitions, drill-down.",
    )
    parser.add_argument("run_dir", type=Path, help="a run directory written by `evalpipe run`")
    parser.add_argument(
        "-o", "--output", type=Path, help="the HTML file (default: RUN_DIR/report.html)"
    )
    parser.add_argument(
        "--max-items",
        type=int,
        default=200,
        help="items in the drill-down, those not passed first (default 200)",
    )
    parser.add_argument(
        "--calibration",
        type=Path,
        help="a calibration file (`evalpipe calibrate`): show each judge's kappa beside its "
        "pass rate",
    )
    parser.set_defaults(handler=_report)
