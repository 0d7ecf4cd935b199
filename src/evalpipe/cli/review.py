"""``evalpipe review RUN_DIR --metric M``: collect human labels for a judge in the Prefect UI.

Starts the review flow (``evalpipe.pipeline.review``) against the configured Prefect API (or the
PREFECT_HOME's server, as ``evalpipe run`` does): it pauses with a form per sampled item; open the
flow run in the Prefect UI, answer, and resume it. The answers are written to ``--output`` (a
labels file for ``evalpipe calibrate``). The run directory is only read.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from evalpipe.artifacts import ArtifactError
from evalpipe.calibration import DEFAULT_SEED, review_candidates
from evalpipe.cli._common import (
    EXIT_INCOMPLETE,
    EXIT_OK,
    CommandError,
    consoles,
    exits_on,
    require_run_dir,
    say,
)

__all__ = ["register"]


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


def _command(args: argparse.Namespace) -> int:
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
    """Add ``review`` to the command line."""
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
        default=None,
        help="the labels file to write (default: RUNNAME-METRIC-labels.jsonl here)",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="sampling seed")
    parser.set_defaults(handler=_command)
