"""A real ``prefect server start`` for process-level tests: its own PREFECT_HOME and SQLite database,
a free port on 127.0.0.1, the UI served, stopped (process group) when the test module ends."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@dataclass
class Server:
    url: str
    api: str
    env: dict[str, str]
    """The environment that points a subprocess at this server."""
    home: Path
    output: Path
    pid: int = 0
    """The server's process (the leader of its process group)."""

    @property
    def database(self) -> Path:
        """The server's SQLite database."""
        return self.home / "prefect.db"


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.5) -> Any:
    """Poll ``predicate`` until it is truthy (its value is returned) or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL after 20 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``cmd`` in its own session from the project root, output to ``log``."""
    handle = log.open("wb")
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
    )


@contextmanager
def prefect_server(home: Path, output: Path) -> Iterator[Server]:
    """``prefect server start`` on a free loopback port with PREFECT_HOME ``home``."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "EVALPIPE_ROOT"
    }
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=f"{url}/api",
        PREFECT_SERVER_UI_API_URL=f"{url}/api",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_WORKER_QUERY_SECONDS="1",
        PREFECT_WORKER_PREFETCH_SECONDS="5",
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW="ignore",
    )
    proc = start(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env,
        home / "server.log",
    )

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError((home / "server.log").read_text(errors="replace")[-3000:])
        try:
            return httpx.get(f"{url}/api/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, 120, "prefect server health")
        yield Server(url, f"{url}/api", env, home, output, proc.pid)
    finally:
        stop(proc)
