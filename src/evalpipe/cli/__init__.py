"""The ``evalpipe`` command line: one module per command, each with ``register(subparsers)``; the
exit codes are ``cli._common``'s ``EXIT_*`` (and the epilog below)."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from evalpipe import __version__

__all__ = ["build_parser", "main"]


_DESCRIPTION = """\
Evaluate AI agents and multi-agent workflows: run a suite (a target, a dataset, evaluators and a
gate) as a Prefect flow, score every call per agent and per metric, write Parquet tables and an
HTML report per run, and compare runs over time. The evaluation API mirrors Microsoft Agent
Framework's."""

_EPILOG = """\
example:
  evalpipe run examples/travel/suite.yaml      run the demo suite (on a kept Prefect server, UI included)
  evalpipe history runs                        every run so far, newest first
  evalpipe bless runs/travel-demo/<run>        make a run the baseline
  evalpipe compare --baseline runs/travel-demo/<run>
  evalpipe view runs                           browse every run at http://127.0.0.1:8765/
  evalpipe query "SELECT ... FROM scores" runs  SQL over every run's tables (read-only)

exit codes:
  0  passed (or done)
  1  a gate failed (run), a regression (compare --fail-on-regression), not all
     passed (eval --strict)
  2  bad input, found before any call; the message says what to fix
  3  the run could not complete (crashed, interrupted, timed out); run it again
     to resume

`evalpipe COMMAND --help` tells more about each command."""


_COMMANDS = "run eval_ results history query compare calibrate view import_ deploy cache server"
"""The command modules, in the order ``--help`` lists their commands; each adds its commands with
``register(subparsers)``."""


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog="evalpipe",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-V",
        "--version",
        action="version",
        version=f"evalpipe {__version__}",
        help="print evalpipe's version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    # The commands (rich, pyarrow, the runner: ~1 s) load here, not when evalpipe.cli is imported.
    for name in _COMMANDS.split():
        importlib.import_module(f"evalpipe.cli.{name}").register(sub)
    return parser


_exit_code: list[int] = []


def _leave() -> None:
    """Registered as the first exit handler (so it runs last): end the process with the exit code
    :func:`main` returned, after the other handlers ran and the output was flushed."""
    if _exit_code:  # else not returned from main (an uncaught exception): the usual exit
        logging.shutdown()
        _exit_now(_exit_code[0])


def _exit_now(code: int) -> None:
    """End the process with ``code`` now, its output flushed (no interpreter teardown)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code.

    SIGTERM stops a command as Ctrl-C does: what was journaled is kept (run again to resume), and
    the exit code is 3. Run as the program (``argv`` None), the process ends as soon as the
    command has: the exit handlers run and the output is flushed, but the interpreter's teardown
    of every loaded module (a second or more after a run) is skipped.
    """
    if argv is None:
        atexit.register(_leave)
    args = build_parser().parse_args(argv)
    from evalpipe.cli import _common  # lazy: loaded with the commands (build_parser)

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        code = _common.handle_errors(_common.consoles()[1], lambda: int(args.handler(args)))
    except KeyboardInterrupt:
        resume = (
            "; the calls it finished are journaled, run the same command again to resume"
            if args.command == "run"
            else ""
        )
        print(f"interrupted: {args.command} stopped{resume}", file=sys.stderr)
        code = _common.EXIT_INCOMPLETE
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if argv is None:
        _exit_code[:] = [code]
        if _common.API_GONE.is_set():  # nothing Prefect still holds can reach its API: end now
            _exit_now(code)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
