"""The embedded Prefect server a run uses when no PREFECT_API_URL is set.

Prefect's own ephemeral server outlives a parent killed with ``kill -9`` (it was found listening
32 minutes later). evalpipe starts the same server (Prefect's app under uvicorn, the UI off) under
a guard that ends it when the parent process dies, and stops it when the run ends.

An embedded server uses PREFECT_HOME's SQLite database; when a server (``prefect server start``)
already runs on the same PREFECT_HOME, the run uses that server instead, or, when it does not
answer, is refused with the fix (two servers on one SQLite file fail with "database is locked").
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import prefect
from prefect.events.worker import EventsWorker
from prefect.logging.handlers import APILogWorker
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

__all__ = ["EmbeddedServer", "ServerOnThisHomeError", "prefect_api", "running_server"]

_GUARD = Path(__file__).resolve().parents[1] / "_internal" / "guard.py"


class EmbeddedServer(SubprocessASGIServer):
    """Prefect's ephemeral server, started under a guard that ends it with its parent."""

    _instances: ClassVar[dict[int | None, Any]] = {}  # type: ignore[misc]

    def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
        server_env = {
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
        }
        return subprocess.Popen(
            args=[
                sys.executable,
                str(_GUARD),
                str(os.getpid()),
                "uvicorn",
                "--app-dir",
                str(prefect.__module_path__.parent),
                "--factory",
                "prefect.server.api.server:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "error",
                "--lifespan",
                "on",
            ],
            env={
                **os.environ,
                **server_env,
                **get_current_settings().to_environment_variables(exclude_unset=True),
            },
        )


class ServerOnThisHomeError(RuntimeError):
    """A Prefect server runs on this PREFECT_HOME's database but does not answer: an embedded
    server beside it would share its SQLite file (``database is locked``)."""


@dataclass(frozen=True, slots=True)
class _Candidate:
    url: str
    """The server's root URL (``http://host:port``)."""
    pid: int | None = None
    """The process found running ``prefect server start`` on this PREFECT_HOME (None: the
    configured host and port, probed)."""


def _same(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError):
        return False


def _option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _servers_on(home: Path) -> list[_Candidate]:
    """``prefect server start`` processes (of this user: /proc, Linux) whose PREFECT_HOME is
    ``home``, with the URL their command line and environment give."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if not ("server" in args and "start" in args and any("prefect" in a for a in args)):
                continue
            env = dict(
                line.split("=", 1)
                for line in (entry / "environ").read_bytes().decode(errors="replace").split("\0")
                if "=" in line
            )
        except OSError:  # gone, or another user's
            continue
        if int(entry.name) == os.getpid():
            continue
        if not _same(env.get("PREFECT_HOME", "~/.prefect"), home):
            continue
        host = _option(args, "--host") or env.get("PREFECT_SERVER_API_HOST") or "127.0.0.1"
        port = _option(args, "--port") or env.get("PREFECT_SERVER_API_PORT") or "4200"
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        found.append(_Candidate(f"http://{host}:{port}", int(entry.name)))
    return found


def _home_of(url: str) -> str | None:
    """The PREFECT_HOME of the server at ``url`` (its settings), or None when it does not answer."""
    try:
        response = httpx.get(f"{url}/api/admin/settings", timeout=2.0)
        response.raise_for_status()
        home = response.json().get("home")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return str(home) if home else None


def running_server() -> str | None:
    """The API URL of a Prefect server already running on this PREFECT_HOME (so on its SQLite
    database), or None when there is none.

    Looked for at the configured server host and port (``PREFECT_SERVER_API_HOST``/``PORT``,
    127.0.0.1:4200 by default) and, on Linux, among this user's ``prefect server start``
    processes.

    Raises:
        ServerOnThisHomeError: when such a process runs but does not answer; the message says
            how to run on it or beside it.
    """
    settings = get_current_settings()
    home = Path(settings.home)
    configured = _Candidate(f"http://{settings.server.api.host}:{settings.server.api.port}")
    processes = _servers_on(home) if Path("/proc/self").exists() else []
    for candidate in dict.fromkeys([configured, *processes]):
        served = _home_of(candidate.url)
        if served is not None and _same(served, home):
            return f"{candidate.url}/api"
    if processes:
        pid = processes[0].pid
        raise ServerOnThisHomeError(
            f"a Prefect server (process {pid}) runs on PREFECT_HOME={home} and does not answer at "
            f"{processes[0].url}; an embedded server would share its database ({home}/prefect.db: "
            "'database is locked'). Set PREFECT_API_URL to that server's API (e.g. "
            f"PREFECT_API_URL={processes[0].url}/api) to run on it, or set PREFECT_HOME to another "
            "directory to run on an embedded server"
        )
    return None


@contextlib.asynccontextmanager
async def prefect_api(notes: list[str] | None = None) -> AsyncIterator[str | None]:
    """The Prefect API for a run: the configured one (yields None); else a server already running
    on this PREFECT_HOME (:func:`running_server`; yields its URL); else an embedded server started
    now and stopped when the block ends (yields its URL). Using a running server adds a line to
    ``notes``.

    Raises:
        ServerOnThisHomeError: see :func:`running_server`.
    """
    if PREFECT_API_URL.value():
        yield None
        return
    found = await asyncio.to_thread(running_server)
    if found is not None:
        if notes is not None:
            notes.append(
                f"using the Prefect server at {found}: it runs on this PREFECT_HOME "
                f"({get_current_settings().home}), whose database an embedded server would "
                "share; set PREFECT_API_URL to choose the server yourself"
            )
        with temporary_settings(updates={PREFECT_API_URL: found}):
            try:
                yield found
            finally:
                await _flush()
        return
    server = EmbeddedServer()
    server.start()
    try:
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            try:
                yield server.api_url
            finally:
                await _flush()
    finally:
        server.stop()


async def _flush() -> None:
    """Send the logs and events still queued (the flow run's last state line, the gate event)
    while the server is up: queued at exit, they failed with "Error logging to API"."""
    for service in (APILogWorker, EventsWorker):
        pending = service.drain_all(timeout=5)
        if inspect.isawaitable(pending):
            await pending
