"""`evalpipe run` without PREFECT_API_URL while a Prefect server runs on the same PREFECT_HOME: an
embedded server would share its SQLite database, so the run uses that server, or is refused with
the fix when it does not answer. (Using a real running server: tests/pipeline/test_deployments.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.settings import PREFECT_HOME, temporary_settings

from evalpipe.pipeline.server import ServerOnThisHomeError, running_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def silent_server(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A process that looks like `prefect server start --port 1` on tmp_path and serves nothing."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PREFECT_HOME": str(home)}
    code = "import time; time.sleep(120)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "prefect", "server", "start", "--port", "1"], env=env
    )
    time.sleep(0.2)
    try:
        yield home, proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_silent_server_on_this_home_is_refused_with_the_fix(
    silent_server: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    """A `prefect server start` on this PREFECT_HOME that does not answer: refused, naming the
    process, the database and both fixes."""
    home, proc = silent_server
    with (
        temporary_settings(updates={PREFECT_HOME: str(home)}),
        pytest.raises(ServerOnThisHomeError) as exc,
    ):
        running_server()
    message = str(exc.value)
    assert f"process {proc.pid}" in message
    assert f"PREFECT_HOME={home}" in message
    assert "database is locked" in message
    assert "PREFECT_API_URL=http://127.0.0.1:1/api" in message


def test_a_server_on_another_home_does_not_matter(
    silent_server: tuple[Path, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """A server process on another PREFECT_HOME neither refuses nor redirects the run."""
    other = tmp_path / "other"
    other.mkdir()
    with temporary_settings(updates={PREFECT_HOME: str(other)}):
        assert running_server() is None


def test_the_cli_refuses_before_any_call_exit_3(
    silent_server: tuple[Path, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """`evalpipe run` on that PREFECT_HOME without PREFECT_API_URL exits 3 with the fix, no
    target call is made (no run directory is finished), and no embedded server was started on
    its database (not even early, while Prefect was imported)."""
    home, _ = silent_server
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(home)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "evalpipe.cli", "run", "examples/travel/agent_suite.yaml"),
            *("--no-progress", "--output", str(tmp_path / "out")),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert "runs on PREFECT_HOME=" in done.stderr
    assert "Set PREFECT_API_URL" in done.stderr.replace("\n", " ")
    assert not list((tmp_path / "out").glob("*/*/manifest.json"))
    assert not (home / "evalpipe-server" / "server.log").exists()
