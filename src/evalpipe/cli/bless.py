"""``evalpipe bless RUN_DIR``: make a finished run its suite's baseline."""

from __future__ import annotations

import argparse
from typing import Any

from evalpipe.artifacts import ArtifactError, bless, read_manifest
from evalpipe.cli._common import EXIT_OK, consoles, exits_on, say

__all__ = ["register"]


def _bless(args: argparse.Namespace) -> int:
    message = "{}; bless a run directory `evalpipe run` finished"
    with exits_on(ArtifactError, ValueError, message=message):
        manifest = read_manifest(args.run_dir)
        written = bless(args.run_dir)
    suite = manifest.get("suite")
    name = suite.get("name") if isinstance(suite, dict) else None
    say(
        consoles()[0],
        f"{args.run_dir} is the baseline of {name or 'its suite'} (in {written}); "
        f"`evalpipe compare --baseline RUN` and `compare_with: baseline` compare with it",
    )
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``bless`` to the command line."""
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
