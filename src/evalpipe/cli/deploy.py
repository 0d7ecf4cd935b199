"""``evalpipe deploy``: check every deployment's suite, create missing pools, ``prefect deploy``.
``evalpipe serve SUITE.yaml``: register a deployment of a suite and run its flow runs here."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evalpipe.cli._common import EXIT_OK, exits_on
from evalpipe.suite import SuiteError, apply_params

__all__ = ["register"]


def _deploy(args: argparse.Namespace) -> int:
    from evalpipe.pipeline.deploy import DeployError, deploy  # lazy: Prefect

    with exits_on(DeployError):
        return deploy(args.prefect_file, args.name, create_pools=not args.no_create_pool)


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
    parser = sub.add_parser(
        "deploy",
        help="check the suites, create the work pools, and `prefect deploy` a prefect.yaml",
        description=(
            "Validate every deployment's suite, create missing process work pools, then run "
            "`prefect deploy` on the deployments file."
        ),
    )
    parser.add_argument(
        "--prefect-file",
        type=Path,
        default=Path("deployments/prefect.yaml"),
        help="the deployments file (default deployments/prefect.yaml)",
    )
    parser.add_argument(
        "--name", action="append", default=[], help="deploy only this deployment (repeatable)"
    )
    parser.add_argument(
        "--no-create-pool", action="store_true", help="do not create missing process work pools"
    )
    parser.set_defaults(handler=_deploy)
    parser = sub.add_parser(
        "serve",
        help="register a deployment of a suite and run its flow runs in this process",
        description="Serve a suite as a Prefect deployment from this process (Ctrl-C stops).",
    )
    parser.add_argument("suite", help="the suite YAML file")
    parser.add_argument("--name", help="deployment name (default: the suite's name)")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--cron", help='a cron schedule, e.g. "0 2 * * *" (UTC)')
    when.add_argument("--interval", type=int, help="a schedule every N seconds")
    parser.add_argument("--repetitions", type=int, help="override repetitions")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a suite field for every run (repeatable; values are YAML)",
    )
    parser.add_argument("--tag", action="append", default=[], help="a deployment tag (repeatable)")
    parser.set_defaults(handler=_serve)
