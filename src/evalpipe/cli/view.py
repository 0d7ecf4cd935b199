"""``evalpipe view [OUTPUT_DIR_OR_URI]``: a read-only web app over every run (docs/view.md)."""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any
from urllib.parse import urlsplit

from evalpipe.artifacts import ArtifactError, DamagedRun, find_runs
from evalpipe.cli._common import EXIT_OK, consoles, exits_on, say, warn
from evalpipe.view.urls import LOOPBACK_HOSTS, VIEW_URL_ENV, configured_view_url, is_loopback

__all__ = ["DEFAULT_PORT", "register"]

DEFAULT_PORT = 8765
"""The port ``evalpipe view`` listens on unless told otherwise."""


def _allowed_hosts(host: str, extra: list[str], configured: str | None) -> list[str] | None:
    """The Host header names the view answers: loopback names when bound to loopback, the bound
    name, the configured view URL's host and ``--allowed-host``; None (any) when bound to every
    interface with no ``--allowed-host``."""
    if host in ("0.0.0.0", "::", "") and not extra:
        return None
    names = {host.strip("[]").lower(), *(e.lower() for e in extra)}
    if is_loopback(host):
        names.update(LOOPBACK_HOSTS)
    if configured:
        names.add((urlsplit(configured).hostname or "").lower())
    return sorted(n for n in names if n)


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket (an IPv6 one takes IPv4 too, as the system's default socket did)."""
    v6 = ":" in host
    sock = socket.create_server(
        (host.strip("[]"), port),
        family=socket.AF_INET6 if v6 else socket.AF_INET,
        backlog=128,
        dualstack_ipv6=v6 and socket.has_dualstack_ipv6(),
    )
    sock.set_inheritable(True)
    return sock


def _view(args: argparse.Namespace) -> int:
    import uvicorn  # lazy: the web stack, only for this command

    from evalpipe.view.app import create_app  # lazy: the web stack

    out, err = consoles()
    damaged: list[DamagedRun] = []
    with exits_on(ArtifactError, ValueError):
        configured = configured_view_url()
        runs = find_runs(args.output_dir, damaged=damaged)
    for run in damaged:  # listed as damaged; every other run is served
        warn(err, f"damaged run {run.location}: {run.problem}")
    if not is_loopback(args.host):
        warn(
            err,
            f"serving on {args.host}, not on loopback: anyone who reaches this "
            f"machine's port {args.port} can read every run (queries, responses, transcripts). "
            "evalpipe view has no login; keep it on 127.0.0.1 behind your own proxy unless this "
            "network is trusted.",
        )
    with exits_on(OSError, message=f"cannot listen on {args.host}:{args.port}: {{}}"):
        sock = _bind(args.host, args.port)
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if ":" in args.host else args.host
    app = create_app(
        args.output_dir,
        allowed_hosts=_allowed_hosts(args.host, args.allowed_host, configured),
        warm=True,
    )
    say(
        out,
        f"evalpipe view: {len(runs)} run(s)"
        + (f" ({len(damaged)} damaged, listed as such)" if damaged else "")
        + f" in {args.output_dir} at http://{shown}:{port}/ (read-only; Ctrl-C stops)",
        soft_wrap=True,
    )
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    )
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    sys.stdout.flush()
    return EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "view",
        help="browse every run in a read-only web app (runs, samples, transcripts, compare, "
        "trends)",
        description=(
            "Serve a read-only web app over every finished run under OUTPUT_DIR: the runs "
            "(filter by suite and tag), a run's report with a sample table you can filter, sort "
            "and page, each item's transcript and reasons, two runs compared, and a suite's "
            "trends. Bound to 127.0.0.1 unless --host says otherwise. Set "
            f"{VIEW_URL_ENV} to its URL where flows run, and the Prefect UI's report and run "
            "artifacts link to the run's page here. See docs/view.md."
        ),
    )
    parser.add_argument(
        "output_dir",
        metavar="OUTPUT_DIR_OR_URI",
        nargs="?",
        default="runs",
        help="where runs are written (a suite's output_dir, default: runs), one suite's "
        "directory in it, or a filesystem URI (s3://bucket/evals)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the interface to listen on (default 127.0.0.1: this machine only); any other "
        "prints a warning, the view has no login",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free port, printed)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name the view answers to besides the one it listens on (repeatable; e.g. "
        "the name of a proxy in front of it); requests for other names are refused",
    )
    parser.set_defaults(handler=_view)
