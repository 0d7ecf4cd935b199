"""``evalpipe serve SUITE.yaml``: register a deployment of a suite and run its flow runs here."""

from __future__ import annotations

import argparse
from typing import Any

from evalpipe.cli._common import EXIT_OK, exits_on
from evalpipe.suite import SuiteError, apply_params

__all__ = ["register"]


def _serve(args: argparse.Namespace) -> int:
    from evalpipe.pipeline.deploy import DeployError, serve  # lazy: Prefect

    with exits_on(DeployError, SuiteError):
        params = apply_params({}, args.param) if args.param else None
        serve(
            args.suite,
            name=args.name,
            cron=args.cron,
            interval=args.interval,
            repetitions=args.repetitions,
            params=params,
            tags=args.tag,
        )
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``serve`` to the command line."""
    parser = sub.add_parser(
        "serve",
        help="register a deployment of a suite and run its flow runs in this process",
        description="Serve a suite as a Prefect deployment from this process (Ctrl-C stops).",
    )
    parser.add_argument("suite", help="the suite YAML file")
    parser.add_argument("--name", default=None, help="deployment name (default: the suite's name)")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--cron", default=None, help='a cron schedule, e.g. "0 2 * * *" (UTC)')
    when.add_argument("--interval", type=int, default=None, help="a schedule every N seconds")
    parser.add_argument("--repetitions", type=int, default=None, help="override repetitions")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a suite field for every run (repeatable; values are YAML)",
    )
    parser.add_argument("--tag", action="append", default=[], help="a deployment tag (repeatable)")
    parser.set_defaults(handler=_serve)
