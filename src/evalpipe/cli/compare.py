"""``evalpipe bless RUN_DIR``: make a finished run its suite's baseline. ``evalpipe compare RUN_A
RUN_B`` (or ``--baseline RUN``): flips, paired tests and judge-vs-check disagreement."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evalpipe.artifacts import BASELINE_FILE, ArtifactError, baseline_of, bless, read_manifest
from evalpipe.artifacts.history import join, parent_of
from evalpipe.artifacts.reader import manifest_part
from evalpipe.cli._common import (
    EXIT_GATE_FAILED,
    EXIT_OK,
    CommandError,
    consoles,
    exits_on,
    require_run_dir,
    say,
)

__all__ = ["register"]


def _bless(args: argparse.Namespace) -> int:
    message = "{}; bless a run directory `evalpipe run` finished"
    with exits_on(ArtifactError, ValueError, message=message):
        manifest = read_manifest(args.run_dir)
        written = bless(args.run_dir)
    name = manifest_part(manifest, "suite").get("name")
    say(
        consoles()[0],
        f"{args.run_dir} is the baseline of {name or 'its suite'} (in {written}); "
        f"`evalpipe compare --baseline RUN` and `compare_with: baseline` compare with it",
    )
    return EXIT_OK


def _runs(args: argparse.Namespace) -> tuple[str, str]:
    """(A, B): the two runs given, or with --baseline the one given and its suite's baseline."""
    if not args.baseline:
        if args.run_b is None:
            raise CommandError(
                "compare needs two run directories (RUN_A, the baseline, and RUN_B), or "
                "--baseline RUN to compare RUN with its suite's blessed baseline"
            )
        return args.run_a, args.run_b
    if args.run_b is not None:
        raise CommandError(
            "with --baseline, give one run directory: it is compared with its suite's baseline"
        )
    suite_dir = parent_of(args.run_a)
    name = baseline_of(suite_dir)
    if name is None:
        raise CommandError(
            f"{suite_dir}: no baseline blessed for this suite ({BASELINE_FILE} not found); "
            "make one with `evalpipe bless RUN_DIR`"
        )
    return join(suite_dir, name), args.run_a


def _compare(args: argparse.Namespace) -> int:
    out, err = consoles()
    with exits_on(ValueError, ArtifactError):  # a URI's filesystem, the suite's baseline.json
        run_a, run_b = _runs(args)
    for run_dir in (run_a, run_b):
        require_run_dir(run_dir)
    from evalpipe.report.compare import (  # lazy: scipy, only for this command
        compare_runs,
        render_markdown,
        render_terminal,
        write_compare_html,
    )

    with exits_on(ArtifactError):  # SchemaVersionError included
        comparison = compare_runs(run_a, run_b)
    render_terminal(comparison, out)
    with exits_on(OSError, message="cannot write the comparison: {}"):
        if args.html is not None:
            written = write_compare_html(comparison, args.html)
            say(out, f"HTML written to {written}")
        if args.markdown is not None:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(render_markdown(comparison), encoding="utf-8")
            say(out, f"markdown written to {args.markdown}")
    if args.fail_on_regression and comparison.has_regressions:
        say(
            err,
            f"{comparison.regressions} regression(s): failing as --fail-on-regression asks",
            style="red",
        )
        return EXIT_GATE_FAILED
    return EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "bless",
        help="make a finished run its suite's baseline",
        description=(
            "Mark a finished run as its suite's baseline: baseline.json in the suite's "
            "directory (beside the run; the run itself is not changed) names it, replacing an "
            "earlier baseline. `evalpipe compare --baseline RUN` and a suite's "
            "`compare_with: baseline` compare with it; `evalpipe history` marks it. RUN_DIR "
            "may be a filesystem URI."
        ),
    )
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="a run directory `evalpipe run` finished (or its URI)"
    )
    parser.set_defaults(handler=_bless)
    parser = sub.add_parser(
        "compare",
        help="compare two runs, or a run with its baseline: flips, paired tests, disagreement",
        description=(
            "Compare two finished runs item by item (pairing each dataset row, repetition, "
            "agent and metric), with paired statistics: `compare RUN_A RUN_B`, or "
            "`compare --baseline RUN` against the run `evalpipe bless` made its suite's "
            "baseline. Run directories may be filesystem URIs."
        ),
    )
    parser.add_argument(
        "run_a",
        metavar="RUN_A",
        help="the baseline run directory (with --baseline: the run compared with the baseline)",
    )
    parser.add_argument("run_b", metavar="RUN_B", nargs="?", help="the run compared with RUN_A")
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="compare the one run given with its suite's blessed baseline (`evalpipe bless`)",
    )
    parser.add_argument("--html", type=Path, help="also write the comparison as HTML")
    parser.add_argument("--markdown", type=Path, help="also write the comparison as markdown")
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when a verdict went from pass in RUN_A to fail in RUN_B",
    )
    parser.set_defaults(handler=_compare)
