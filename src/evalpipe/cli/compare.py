"""``evalpipe compare RUN_A RUN_B``: flips, paired tests and judge-vs-check disagreement."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evalpipe.artifacts import ArtifactError, SchemaVersionError
from evalpipe.cli._common import EXIT_GATE_FAILED, EXIT_OK, check_run_dir, consoles, fail

__all__ = ["register"]


def _compare(args: argparse.Namespace) -> int:
    out, err = consoles()
    for run_dir in (args.run_a, args.run_b):
        problem = check_run_dir(run_dir)
        if problem:
            return fail(err, problem)
    from evalpipe.report.compare import (  # lazy: scipy, only for this command
        compare_runs,
        render_markdown,
        render_terminal,
        write_compare_html,
    )

    try:
        comparison = compare_runs(args.run_a, args.run_b)
    except (ArtifactError, SchemaVersionError) as exc:
        return fail(err, str(exc))
    render_terminal(comparison, out)
    try:
        if args.html is not None:
            written = write_compare_html(comparison, args.html)
            out.print(f"HTML written to {written}", markup=False, highlight=False)
        if args.markdown is not None:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(render_markdown(comparison), encoding="utf-8")
            out.print(f"markdown written to {args.markdown}", markup=False, highlight=False)
    except OSError as exc:
        return fail(err, f"cannot write the comparison: {exc}")
    if args.fail_on_regression and comparison.has_regressions:
        err.print(
            f"{comparison.regressions} regression(s): failing as --fail-on-regression asks",
            style="red",
            highlight=False,
        )
        return EXIT_GATE_FAILED
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``compare`` to the command line."""
    parser = sub.add_parser(
        "compare",
        help="compare two runs: flips, paired tests, judge-vs-check disagreement",
        description="Compare two finished runs item by item, with paired statistics.",
    )
    parser.add_argument("run_a", type=Path, help="the baseline run directory")
    parser.add_argument("run_b", type=Path, help="the run compared with it")
    parser.add_argument("--html", type=Path, default=None, help="also write the comparison as HTML")
    parser.add_argument(
        "--markdown", type=Path, default=None, help="also write the comparison as markdown"
    )
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when a verdict went from pass in RUN_A to fail in RUN_B",
    )
    parser.set_defaults(handler=_compare)
