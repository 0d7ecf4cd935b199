"""The embedded Prefect server a run uses when no PREFECT_API_URL is set.

Prefect's own ephemeral server outlives a parent killed with ``kill -9`` (it was found listening
32 minutes later). evalpipe starts the same server (Prefect's app under uvicorn, the UI off) under
a guard that ends it when the parent process dies, and stops it when the run ends.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import prefect
from prefect.events.worker import EventsWorker
from prefect.logging.handlers import APILogWorker
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

__all__ = ["EmbeddedServer", "prefect_api"]

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


@contextlib.asynccontextmanager
async def prefect_api() -> AsyncIterator[str | None]:
    """The Prefect API for a run: the configured one, else an embedded server started now and
    stopped when the block ends (yields its URL; None when one was configured)."""
    if PREFECT_API_URL.value():
        yield None
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
