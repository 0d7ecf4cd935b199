"""``evalpipe deploy``: check every deployment's suite, create missing pools, ``prefect deploy``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evalpipe.cli._common import exits_on

__all__ = ["register"]


def _deploy(args: argparse.Namespace) -> int:
    from evalpipe.pipeline.deploy import DeployError, deploy  # lazy: Prefect

    with exits_on(DeployError):
        return deploy(args.prefect_file, args.name, create_pools=not args.no_create_pool)


def register(sub: Any) -> None:
    """Add ``deploy`` to the command line."""
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
