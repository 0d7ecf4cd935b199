"""The ``evalpipe`` command line: one module per command, each with ``register(subparsers)``.

Exit codes: 0 passed (or done), 1 a gate failed (``run``), a regression
(``compare --fail-on-regression``) or not all passed (``eval --strict``), 2 bad input (the message
says what to fix), 3 the run could not complete.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from evalpipe.cli import cache, compare, deploy, eval_, import_, report, results, run, serve

__all__ = ["main"]

_COMMANDS = (run, eval_, results, report, compare, import_, deploy, serve, cache)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog="evalpipe",
        description="Evaluate AI agents and multi-agent workflows, orchestrated on Prefect.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in _COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
