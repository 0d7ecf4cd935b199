"""``evalpipe server status|start|stop``: the Prefect server (and UI) runs share on this
PREFECT_HOME (docs/operations.md, "The embedded server")."""

from __future__ import annotations

import argparse
import os
from typing import Any

from evalpipe.cli._common import EXIT_INCOMPLETE, EXIT_OK, consoles, exits_on, say

__all__ = ["register"]

EXIT_NOT_RUNNING = 1
"""``status``: no server runs for this PREFECT_HOME."""


def _say(text: str) -> None:
    say(consoles()[0], text, soft_wrap=True)


def _status(args: argparse.Namespace) -> int:
    from evalpipe.pipeline.server import server_status  # lazy: Prefect's settings

    status = server_status()
    if url := os.environ.get("PREFECT_API_URL"):
        _say(f"note: PREFECT_API_URL is set ({url}): runs use that API, not this server")
    if status.info is None:
        _say(f"no Prefect server of evalpipe runs for {status.home}")
        return EXIT_NOT_RUNNING
    info = status.info
    idle = "the last run" if info.idle_timeout == 0 else f"{info.idle_timeout:g} s without a run"
    _say(
        f"Prefect server for {status.home}: UI {info.ui_url}, API {info.api_url} (pid "
        f"{info.pid}, Prefect {info.prefect}, since {info.started_at}); "
        f"{'answers' if status.healthy else 'DOES NOT ANSWER'}; "
        f"{'in use by a run' if status.in_use else 'idle'}; stops after {idle}",
    )
    _say(f"log: {status.log}")
    return EXIT_OK if status.healthy else EXIT_INCOMPLETE


def _url(args: argparse.Namespace) -> int:
    from evalpipe.pipeline.server import server_status  # lazy: Prefect's settings

    status = server_status()
    if status.info is None:
        return EXIT_NOT_RUNNING
    _say(status.info.ui_url)
    return EXIT_OK


def _start(args: argparse.Namespace) -> int:
    from evalpipe.pipeline.server import ServerError, ensure_server  # lazy: Prefect's settings

    with exits_on(ServerError, code=EXIT_INCOMPLETE):
        acquired = ensure_server()
    info = acquired.info
    idle = "the next run ends" if info.idle_timeout == 0 else f"{info.idle_timeout:g} s idle"
    if acquired.replaced:
        _say(acquired.replaced)
    verb = "started" if acquired.started else "already running:"
    _say(f"{verb} the Prefect UI at {info.ui_url} (pid {info.pid}); it stops after {idle}")
    return EXIT_OK


def _stop(args: argparse.Namespace) -> int:
    from evalpipe.pipeline.server import ServerError, stop_server  # lazy: Prefect's settings

    with exits_on(ServerError, code=EXIT_INCOMPLETE):
        info = stop_server(force=args.force)
    if info is None:
        _say("no Prefect server of evalpipe was running on this PREFECT_HOME")
    else:
        _say(f"stopped the Prefect server {info.ui_url} (pid {info.pid})")
    return EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "server",
        help="the Prefect server (with its UI) runs share on this PREFECT_HOME: status, start, stop",
        description=(
            "Without PREFECT_API_URL, `evalpipe run` uses one Prefect server per PREFECT_HOME "
            "(`prefect server start`, UI included), started by the first run and reused by the "
            "next; it stops by itself after EVALPIPE_SERVER_IDLE_TIMEOUT seconds (default 600) "
            "without a run. `evalpipe server status` prints where its UI is."
        ),
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = actions.add_parser(
        "status",
        help="whether it runs, where, and whether a run uses it",
        description=(
            "Show the embedded server of this PREFECT_HOME: its URL, pid, Prefect version, start "
            "time, whether it answers and whether a run uses it, and where its log is. Exit 0: it "
            "answers; 1: none runs; 3: it runs but does not answer."
        ),
    )
    status.set_defaults(handler=_status)
    url = actions.add_parser(
        "url",
        help="print its Prefect UI's address (for scripts)",
        description="Print the Prefect UI address of this PREFECT_HOME's server. Exit 1: none runs.",
    )
    url.set_defaults(handler=_url)
    start = actions.add_parser(
        "start",
        help="start it now (the first run would start it anyway)",
        description=(
            "Start the embedded server of this PREFECT_HOME ahead of the first run (or say that "
            "one runs already); it stops after the idle timeout like one a run started. Exit 3 "
            "when it cannot start (the message ends with its log)."
        ),
    )
    start.set_defaults(handler=_start)
    stop = actions.add_parser(
        "stop",
        help="stop it now (refused while a run uses it)",
        description=(
            "Stop the embedded server of this PREFECT_HOME. Refused (exit 3) while a run uses it, "
            "unless --force: that run then fails and can be resumed."
        ),
    )
    stop.add_argument(
        "--force", action="store_true", help="stop it even while a run uses it (that run fails)"
    )
    stop.set_defaults(handler=_stop)
