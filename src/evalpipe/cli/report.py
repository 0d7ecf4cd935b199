"""``evalpipe report RUN_DIR``: write a run's self-contained HTML report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evalpipe.artifacts import ArtifactError
from evalpipe.calibration import LabelsError, read_calibration
from evalpipe.cli._common import EXIT_OK, CommandError, consoles, exits_on, require_run_dir, say

__all__ = ["register"]


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
    """Add ``report`` to the command line."""
    parser = sub.add_parser(
        "report",
        help="write a run's self-contained HTML report",
        description="Write a finished run's HTML report: statistics, repetitions, drill-down.",
    )
    parser.add_argument("run_dir", type=Path, help="a run directory written by `evalpipe run`")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="the HTML file (default: RUN_DIR/report.html)",
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
        default=None,
        help="a calibration file (`evalpipe calibrate`): show each judge's kappa beside its "
        "pass rate",
    )
    parser.set_defaults(handler=_report)
