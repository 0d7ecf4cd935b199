"""``evalpipe report`` and ``evalpipe compare``: registered on the CLI's subparsers by
:func:`add_report_commands`; each command's handler returns the exit code.

Exit codes: 0 done, 1 a regression with ``--fail-on-regression``, 2 bad input (the message names
the directory and what to do).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

__all__ = ["add_report_commands", "compare_command", "report_command"]


def _consoles() -> tuple[Console, Console]:
    out = Console(width=None if sys.stdout.isatty() else 120)
    err = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    return out, err


def _fail(err: Console, message: str) -> int:
    err.print(f"error: {message}", style="red", markup=False, highlight=False, soft_wrap=True)
    return 2


def _check_run_dir(path: Path) -> str | None:
    if not path.exists():
        return f"{path}: no such directory; pass a run directory written by `evalpipe run`"
    if not path.is_dir():
        return f"{path}: not a directory; pass a run directory written by `evalpipe run`"
    if not (path / "manifest.json").is_file():
        return (
            f"{path}: not a finished run directory (no manifest.json); pass a directory that "
            "`evalpipe run` completed"
        )
    return None


def report_command(args: argparse.Namespace) -> int:
    """``evalpipe report RUN_DIR [-o report.html] [--max-items N]``."""
    from evalpipe.artifacts import ArtifactError, SchemaVersionError
    from evalpipe.report.html import write_report

    out, err = _consoles()
    problem = _check_run_dir(args.run_dir)
    if problem:
        return _fail(err, problem)
    if args.max_items < 0:
        return _fail(err, f"--max-items must be >= 0, got {args.max_items}")
    try:
        path = write_report(args.run_dir, args.output, max_items=args.max_items)
    except (ArtifactError, SchemaVersionError) as exc:
        return _fail(err, str(exc))
    except OSError as exc:
        return _fail(err, f"cannot write the report: {exc}")
    out.print(f"report written to {path}", highlight=False)
    return 0


def compare_command(args: argparse.Namespace) -> int:
    """``evalpipe compare RUN_A RUN_B [--html out.html] [--markdown out.md]
    [--fail-on-regression]``."""
    from evalpipe.artifacts import ArtifactError, SchemaVersionError
    from evalpipe.report.compare import (
        compare_runs,
        render_markdown,
        render_terminal,
        write_compare_html,
    )

    out, err = _consoles()
    for run_dir in (args.run_a, args.run_b):
        problem = _check_run_dir(run_dir)
        if problem:
            return _fail(err, problem)
    try:
        comparison = compare_runs(args.run_a, args.run_b)
    except (ArtifactError, SchemaVersionError) as exc:
        return _fail(err, str(exc))
    render_terminal(comparison, out)
    try:
        if args.html is not None:
            out.print(f"HTML written to {write_compare_html(comparison, args.html)}")
        if args.markdown is not None:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(render_markdown(comparison), encoding="utf-8")
            out.print(f"markdown written to {args.markdown}")
    except OSError as exc:
        return _fail(err, f"cannot write the comparison: {exc}")
    if args.fail_on_regression and comparison.has_regressions:
        err.print(
            f"{comparison.regressions} regression(s): failing as --fail-on-regression asks",
            style="red",
            highlight=False,
        )
        return 1
    return 0


def add_report_commands(subparsers: Any) -> None:
    """Register ``report`` and ``compare`` on an argparse subparsers object; each sets
    ``handler`` (``handler(args) -> int``, the exit code)."""
    report = subparsers.add_parser("report", help="write a run's self-contained HTML report")
    report.add_argument("run_dir", type=Path, help="a run directory written by `evalpipe run`")
    report.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="the HTML file (default: RUN_DIR/report.html)",
    )
    report.add_argument(
        "--max-items",
        type=int,
        default=200,
        help="items in the drill-down, those not passed first (default 200)",
    )
    report.set_defaults(handler=report_command)
    compare = subparsers.add_parser(
        "compare", help="compare two runs: flips, paired tests, judge-vs-check disagreement"
    )
    compare.add_argument("run_a", type=Path, help="the baseline run directory")
    compare.add_argument("run_b", type=Path, help="the run compared with it")
    compare.add_argument(
        "--html", type=Path, default=None, help="also write the comparison as HTML"
    )
    compare.add_argument(
        "--markdown", type=Path, default=None, help="also write the comparison as markdown"
    )
    compare.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when a verdict went from pass in RUN_A to fail in RUN_B",
    )
    compare.set_defaults(handler=compare_command)
