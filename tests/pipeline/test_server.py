"""The kept Prefect server (evalpipe.pipeline.server: Prefect's own `prefect server start`, UI
included, with evalpipe's reuse, version check and idle stop), tried with real servers on
127.0.0.1, real `evalpipe` processes and signals: found again by the next run, stopped by `evalpipe
server stop` and by `prefect server stop`, replaced when killed, one per PREFECT_HOME under
concurrent runs, and never orphaned (it ends after its idle timeout, when its home goes, or on
stop)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalpipe.pipeline.server import (
    ServerBusyError,
    ServerError,
    lease,
    server_status,
    state_dir,
    stop_server,
    unanswered_timeout,
)
from live_prefect import alive as _alive

ROOT = Path(__file__).resolve().parents[2]
BOUND = 240.0  # seconds: a server start on a loaded 2-core machine, with margin

AGENT = '''
"""An agent that answers at once, or after EVALPIPE_TEST_DELAY seconds; each call is logged."""
import asyncio, os

from evalpipe import AgentResponse, Message


class Agent:
    name = "echo"

    async def run(self, messages, **kwargs):
        with open(os.environ["EVALPIPE_TEST_COUNT_FILE"], "a") as fh:
            fh.write(messages[-1].text + "\\n")
        await asyncio.sleep(float(os.environ.get("EVALPIPE_TEST_DELAY", "0")))
        return AgentResponse(messages=[Message("assistant", ["answer: " + messages[-1].text])])


agent = Agent()
'''


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this module's servers keep the migrated database template (not ~/.cache)."""
    return tmp_path_factory.mktemp("templates")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A suite of three rows (keyword_check only) and its agent."""
    (tmp_path / "echo_agent.py").write_text(textwrap.dedent(AGENT), encoding="utf-8")
    with (tmp_path / "rows.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(3):
            fh.write(json.dumps({"id": f"r{i}", "query": f"q{i}"}) + "\n")
    suite = {
        "name": "echo",
        "target": "echo_agent:agent",
        "dataset": "rows.jsonl",
        "evaluators": [{"keyword_check": ["answer"]}],
        "output_dir": str(tmp_path / "runs"),
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    return tmp_path


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A PREFECT_HOME of its own; its server, if any is left, is stopped afterwards."""
    path = tmp_path / "prefect-home"
    yield path
    if path.exists():
        stop_server(path, force=True)


def _env(home: Path, templates: Path, project: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=str(home),
        EVALPIPE_SERVER_DB_TEMPLATES=str(templates),
        EVALPIPE_SERVER_IDLE_TIMEOUT="120",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=str(int(BOUND)),
        COLUMNS="250",
    )
    if project is not None:
        env["EVALPIPE_TEST_COUNT_FILE"] = str(project / "calls.log")
    env.update(extra)
    return env


def _evalpipe(*args: str) -> list[str]:
    return [sys.executable, "-m", "evalpipe.cli", *args]


def _run(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = _evalpipe("run", str(project / "suite.yaml"), "--no-progress", "--new-run")
    done = subprocess.run(
        cmd, cwd=project, env=env, capture_output=True, text=True, timeout=BOUND + 120
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def _server(
    env: dict[str, str], action: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        _evalpipe("server", action, *args),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND + 60,
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def _info(home: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((state_dir(home) / "server.json").read_text())
    return data


def _wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _serving_lines(home: Path) -> list[str]:
    """Prefect's welcome line, printed once by every server that started."""
    log = (state_dir(home) / "server.log").read_text(encoding="utf-8", errors="replace")
    return [line for line in log.splitlines() if "Check out the dashboard at" in line]


def test_the_next_run_reuses_the_server_and_stop_ends_it(
    project: Path, home: Path, templates: Path
) -> None:
    """The second run reuses the first run's server (both say so, naming its UI, which answers with
    Prefect's UI); the server has none of the first run's secrets and is not taken for a `prefect
    server start`; `server stop` refuses while a run holds a lease, then ends it."""
    env = _env(home, templates, project, OPENAI_API_KEY="sk-test-not-for-the-server")
    first = _run(project, env)
    assert "started a Prefect server for" in first.stderr
    pid, first_url = _info(home)["pid"], _info(home)["api_url"]
    ui = first_url.removesuffix("/api")
    assert f"(UI: {ui}, pid {pid})" in first.stderr
    assert _alive(pid)
    page = urllib.request.urlopen(ui, timeout=30).read().decode()
    assert "<title>Prefect" in page or "prefect" in page.lower()
    second = _run(project, env)
    assert "started a Prefect server" not in second.stderr
    assert f"reused the Prefect server of {home} (UI: {ui}, pid {pid})" in second.stderr
    assert _info(home)["pid"] == pid
    assert len(_serving_lines(home)) == 1
    status = _server(env, "status")
    assert f"UI {ui}" in status.stdout
    assert f"pid {pid}" in status.stdout
    assert "answers; idle" in status.stdout
    # The server outlives the run that started it: it has none of that run's secrets.
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert not any(b"sk-test-not-for-the-server" in entry for entry in environ)
    assert f"PREFECT_HOME={home}".encode() in environ
    # It is not taken for someone's `prefect server start` on this home.
    from prefect.settings import PREFECT_HOME, temporary_settings

    from evalpipe.pipeline.server import running_server

    with temporary_settings(updates={PREFECT_HOME: str(home)}):
        assert running_server() is None
    # `server stop` refuses (exit 3, naming --force) while a run holds a lease.
    with lease(state_dir(home)):
        with pytest.raises(ServerBusyError, match="in use by a run"):
            stop_server(home)
        refused = _server(env, "stop", check=False)
        assert refused.returncode == 3
        assert "--force" in refused.stderr
        assert _alive(pid)
        assert server_status(home).in_use
    stopped = _server(env, "stop")
    assert f"(pid {pid})" in stopped.stdout
    assert not _alive(pid)
    assert not (state_dir(home) / "server.json").exists()
    assert _server(env, "status", check=False).returncode == 1


def test_a_run_replaces_a_killed_server(project: Path, home: Path, templates: Path) -> None:
    """A server killed with SIGKILL between runs is replaced by the next run, which completes; so
    is one of another Prefect version."""
    env = _env(home, templates, project)
    _server(env, "start")
    old = _info(home)["pid"]
    os.kill(old, signal.SIGKILL)
    _wait_for(lambda: not _alive(old), 30, "the server to die")
    done = _run(project, env)
    assert "started a Prefect server" in done.stderr
    assert f"evalpipe: the server pid {old} exited" in (state_dir(home) / "server.log").read_text()
    new = _info(home)["pid"]
    assert new != old
    assert _alive(new)
    # A server of another Prefect version is stopped by the next run, which starts its own.
    info = _info(home)
    path = state_dir(home) / "server.json"
    path.write_text(json.dumps({**info, "prefect": "0.0.1"}), encoding="utf-8")
    done = _run(project, env)
    assert "ran Prefect 0.0.1 or another database and was stopped" in done.stderr
    assert "started a Prefect server" in done.stderr
    assert not _alive(info["pid"])
    assert _info(home)["pid"] != info["pid"]


def test_prefects_own_stop_command_stops_it(home: Path, templates: Path) -> None:
    """The pid is in Prefect's own pid file: `prefect server stop` stops the kept server too, and
    the next status says none runs."""
    env = _env(home, templates)
    _server(env, "start")
    pid = _info(home)["pid"]
    assert (home / "server.pid").read_text().strip() == str(pid)
    prefect = Path(sys.executable).with_name("prefect")
    subprocess.run([str(prefect), "server", "stop"], env=env, check=True, timeout=120)
    _wait_for(lambda: not _alive(pid), 30, "the server to stop")
    assert _server(env, "status", check=False).returncode == 1


def test_two_concurrent_runs_on_one_home_share_one_server(
    project: Path, home: Path, templates: Path
) -> None:
    """Two first runs started together on a new home complete on one server between them."""
    env = _env(home, templates, project)
    cmd = _evalpipe("run", str(project / "suite.yaml"), "--no-progress", "--new-run")
    procs = [
        subprocess.Popen(
            [*cmd, "--output", str(project / f"runs{i}")],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=BOUND + 120)
        assert proc.returncode == 0, out[-2000:] + err[-3000:]
    assert len(_serving_lines(home)) == 1
    assert server_status(home).healthy


def test_a_run_killed_with_sigkill_leaves_the_server_for_its_idle_timeout_only(
    project: Path, home: Path, templates: Path
) -> None:
    """`kill -9` of a run drops its lease: the server outlives it, then stops once idle."""
    env = _env(home, templates, project, EVALPIPE_SERVER_IDLE_TIMEOUT="4", EVALPIPE_TEST_DELAY="30")
    cmd = _evalpipe("run", str(project / "suite.yaml"), "--no-progress")
    proc = subprocess.Popen(cmd, cwd=project, env=env)
    try:
        _wait_for(lambda: (project / "calls.log").exists(), BOUND, "the run to call its agent")
        pid = _info(home)["pid"]
        assert server_status(home).in_use
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert _alive(pid)  # still there for the next run...
        _wait_for(lambda: not _alive(pid), 60, "the idle server to stop")  # ...but not for long
        _wait_for(lambda: not (state_dir(home) / "server.json").exists(), 10, "its state to go")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (
        f"stopping the server pid {pid}: idle for 4 s"
        in (state_dir(home) / "server.log").read_text()
    )
    assert not (state_dir(home) / "server.json").exists()


def test_removing_the_home_stops_the_server(home: Path, templates: Path) -> None:
    """Deleting PREFECT_HOME ends its server within seconds (no orphan)."""
    env = _env(home, templates)
    _server(env, "start")
    pid = _info(home)["pid"]
    subprocess.run(["rm", "-rf", str(home)], check=True)
    _wait_for(lambda: not _alive(pid), 30, "the server of a deleted home to stop")


def test_a_fresh_home_starts_from_the_migrated_template(tmp_path: Path, templates: Path) -> None:
    """The first server saves its migrated database as a template; a new home's database is a copy
    of it, at the same migration, with the same block types registered."""
    own = tmp_path / "templates"
    first, second = tmp_path / "a", tmp_path / "b"
    try:
        _server(_env(first, own), "start")
        log = (state_dir(first) / "server.log").read_text()
        assert "created from the template" not in log
        assert "saved the migrated database as the template" in log
        (template,) = own.glob("prefect-*.db")
        _server(_env(second, own), "start")
        assert "created from the template" in (state_dir(second) / "server.log").read_text()

        def revision(db: Path) -> Any:
            with sqlite3.connect(db) as conn:
                return conn.execute("select version_num from alembic_version").fetchall()

        assert (
            revision(second / "prefect.db") == revision(template) == revision(first / "prefect.db")
        )

        def block_types(db: Path) -> Any:
            with sqlite3.connect(db) as conn:
                return conn.execute("select slug from block_type order by slug").fetchall()

        assert block_types(second / "prefect.db") == block_types(first / "prefect.db")
        assert block_types(first / "prefect.db")
    finally:
        for path in (first, second):
            stop_server(path, force=True)


@pytest.mark.parametrize("raw", ["0", "-1", "soon"])
def test_an_unanswered_timeout_that_is_not_seconds_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    """EVALPIPE_SERVER_UNANSWERED_TIMEOUT must be seconds above 0; the default is 30."""
    monkeypatch.delenv("EVALPIPE_SERVER_UNANSWERED_TIMEOUT", raising=False)
    assert unanswered_timeout() == 30.0
    monkeypatch.setenv("EVALPIPE_SERVER_UNANSWERED_TIMEOUT", raw)
    with pytest.raises(ServerError, match=f"EVALPIPE_SERVER_UNANSWERED_TIMEOUT='{raw}'"):
        unanswered_timeout()


def test_a_server_that_does_not_answer_is_replaced_with_a_message(
    project: Path, home: Path, templates: Path
) -> None:
    """A live server that does not answer (SIGSTOP) is replaced by the next run, which says so
    (after EVALPIPE_SERVER_UNANSWERED_TIMEOUT seconds; 30 by default)."""
    env = _env(home, templates, project, EVALPIPE_SERVER_UNANSWERED_TIMEOUT="4")
    _server(env, "start")
    old = _info(home)["pid"]
    os.kill(old, signal.SIGSTOP)
    try:
        done = _run(project, env)
    finally:
        if _alive(old):
            os.kill(old, signal.SIGKILL)
    assert f"pid {old}" in done.stderr
    assert "did not answer for 4 s and was stopped" in done.stderr
    assert "started a Prefect server" in done.stderr
    new = _info(home)["pid"]
    assert new != old
    assert _alive(new)
    assert not _alive(old)


def test_a_server_that_cannot_start_fails_the_run_with_exit_3_and_its_log(
    project: Path, home: Path, tmp_path: Path
) -> None:
    """A server that cannot start: exit 3 with the end of its log, and no target call."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the database's directory should be", encoding="utf-8")
    env = _env(
        home,
        tmp_path / "templates",
        project,
        PREFECT_SERVER_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{blocker}/prefect.db",
    )
    cmd = _evalpipe("run", str(project / "suite.yaml"), "--no-progress", "--new-run")
    done = subprocess.run(
        cmd, cwd=project, env=env, capture_output=True, text=True, timeout=BOUND + 120
    )
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-3000:]
    assert "the Prefect server for" in done.stderr
    assert "exited before answering" in done.stderr
    assert "server.log" in done.stderr
    assert not (project / "calls.log").exists()
    assert not server_status(home).info


def test_a_prefect_server_start_on_this_home_is_used(
    project: Path, home: Path, templates: Path
) -> None:
    """Someone's `prefect server start` on this PREFECT_HOME at the configured port is the one the
    run uses (it has that home's database): no server of evalpipe starts beside it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = _env(home, templates, project, PREFECT_SERVER_API_PORT=str(port))
    home.mkdir(parents=True)
    prefect = Path(sys.executable).with_name("prefect")
    server = subprocess.Popen(
        [str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/api"

        def answers() -> bool:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=5).read()
            except OSError:
                return False
            return True

        _wait_for(answers, BOUND, "`prefect server start` to answer")
        done = _run(project, env)
        assert f"using the Prefect server at {url}" in done.stderr
        assert not (state_dir(home) / "server.json").exists()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def test_a_profile_api_url_starts_no_embedded_server(
    project: Path, home: Path, templates: Path, prefect_api: str
) -> None:
    """A profile's PREFECT_API_URL is used, and no server of evalpipe starts."""
    home.mkdir(parents=True)
    (home / "profiles.toml").write_text(
        f'active = "shared"\n\n[profiles.shared]\nPREFECT_API_URL = "{prefect_api}"\n',
        encoding="utf-8",
    )
    done = _run(project, _env(home, templates, project))
    assert "Prefect server for" not in done.stderr
    assert not (state_dir(home) / "server.log").exists()
    assert not server_status(home).info
