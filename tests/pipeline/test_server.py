"""The shared embedded Prefect server (evalpipe.pipeline.server and its keeper), tried with real
servers on 127.0.0.1, real `evalpipe` processes and signals: found again by the next run, stopped by
`evalpipe server stop`, replaced when killed, one per PREFECT_HOME under concurrent runs, and never
orphaned (it ends after its idle timeout, when its home goes, or on stop)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalpipe.pipeline.server import (
    Lease,
    ServerBusyError,
    ServerError,
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
    log = (state_dir(home) / "server.log").read_text(encoding="utf-8", errors="replace")
    return [line for line in log.splitlines() if ": serving http" in line]


def test_the_next_run_reuses_the_server_and_stop_ends_it(
    project: Path, home: Path, templates: Path
) -> None:
    """The second run reuses the first run's server (both say so); `server stop` ends it."""
    env = _env(home, templates, project)
    first = _run(project, env)
    assert "started the embedded Prefect server" in first.stderr
    pid, first_url = _info(home)["pid"], _info(home)["api_url"]
    assert _alive(pid)
    second = _run(project, env)
    assert "started the embedded Prefect server" not in second.stderr
    assert f"reused the embedded Prefect server {first_url}" in second.stderr
    assert _info(home)["pid"] == pid
    assert len(_serving_lines(home)) == 1
    status = _server(env, "status")
    assert f"pid {pid}" in status.stdout
    assert "answers; idle" in status.stdout
    stopped = _server(env, "stop")
    assert f"(pid {pid})" in stopped.stdout
    assert not _alive(pid)
    assert not (state_dir(home) / "server.json").exists()
    assert _server(env, "status", check=False).returncode == 1


def test_a_run_replaces_a_killed_server(project: Path, home: Path, templates: Path) -> None:
    """A server killed with SIGKILL between runs is replaced by the next run, which completes."""
    env = _env(home, templates, project)
    _server(env, "start")
    old = _info(home)["pid"]
    os.kill(old, signal.SIGKILL)
    _wait_for(lambda: not _alive(old), 30, "the server to die")
    assert (state_dir(home) / "server.json").exists()
    done = _run(project, env)
    assert "started the embedded Prefect server" in done.stderr
    new = _info(home)["pid"]
    assert new != old
    assert _alive(new)


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
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "stopping: idle for 4 s" in (state_dir(home) / "server.log").read_text()
    assert not (state_dir(home) / "server.json").exists()


def test_removing_the_home_stops_the_server(home: Path, templates: Path) -> None:
    """Deleting PREFECT_HOME ends its server within seconds (no orphan)."""
    env = _env(home, templates)
    _server(env, "start")
    pid = _info(home)["pid"]
    subprocess.run(["rm", "-rf", str(home)], check=True)
    _wait_for(lambda: not _alive(pid), 30, "the server of a deleted home to stop")


def test_stop_refuses_a_server_in_use_unless_forced(home: Path, templates: Path) -> None:
    """`server stop` refuses (exit 3, naming --force) while a run holds a lease; --force stops."""
    env = _env(home, templates)
    _server(env, "start")
    pid = _info(home)["pid"]
    with Lease(state_dir(home)):
        with pytest.raises(ServerBusyError, match="in use by a run"):
            stop_server(home)
        refused = _server(env, "stop", check=False)
        assert refused.returncode == 3
        assert "--force" in refused.stderr
        assert _alive(pid)
        assert server_status(home).in_use
        _server(env, "stop", "--force")
    assert not _alive(pid)


def test_the_server_gets_none_of_the_secrets_of_the_run_that_started_it(
    home: Path, templates: Path
) -> None:
    """The kept server's environment holds none of the starting command's API keys."""
    env = _env(home, templates, OPENAI_API_KEY="sk-test-not-for-the-server")
    _server(env, "start")
    environ = Path(f"/proc/{_info(home)['pid']}/environ").read_bytes().split(b"\0")
    assert not any(b"sk-test-not-for-the-server" in entry for entry in environ)
    assert f"PREFECT_HOME={home}".encode() in environ


def test_a_fresh_home_starts_from_the_migrated_template(tmp_path: Path, templates: Path) -> None:
    """A new home's database is a copy of the migrated template, at the same migration."""
    own = tmp_path / "templates"
    first, second = tmp_path / "a", tmp_path / "b"
    try:
        _server(_env(first, own), "start")
        assert "created from the template" not in (state_dir(first) / "server.log").read_text()
        (template,) = own.glob("prefect-*.db")
        _server(_env(second, own), "start")
        assert "created from the template" in (state_dir(second) / "server.log").read_text()

        def revision(db: Path) -> Any:
            with sqlite3.connect(db) as conn:
                return conn.execute("select version_num from alembic_version").fetchall()

        assert (
            revision(second / "prefect.db") == revision(template) == revision(first / "prefect.db")
        )
        # The copy is complete (at the head of the migrations, the block types of the installed
        # collections registered): the second home's server skipped both at start-up.
        log = (state_dir(second) / "server.log").read_text()
        assert "skipped at start-up: migrations, block registration" in log

        def block_types(db: Path) -> Any:
            with sqlite3.connect(db) as conn:
                return conn.execute("select slug from block_type order by slug").fetchall()

        assert block_types(second / "prefect.db") == block_types(first / "prefect.db")
        assert block_types(first / "prefect.db")
    finally:
        for path in (first, second):
            stop_server(path, force=True)


def test_a_template_without_the_collections_key_is_brought_up_to_date(
    tmp_path: Path, templates: Path
) -> None:
    """A template saved without the record of the Prefect collections it holds (an earlier
    evalpipe's) is used with its migrations, but the blocks are registered, and the template is
    saved again with the record: the next home skips both."""
    own = tmp_path / "templates"
    own.mkdir()
    for made in templates.glob("prefect-*.db"):  # an earlier test's: spares a full migration
        shutil.copyfile(made, own / made.name)
    first, second, third = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    try:
        _server(_env(first, own), "start")
        (template,) = own.glob("prefect-*.db")
        conn = sqlite3.connect(template)
        conn.execute("PRAGMA user_version = 0")
        conn.close()
        _server(_env(second, own), "start")
        log = (state_dir(second) / "server.log").read_text()
        assert "skipped at start-up: migrations\n" in log
        assert "saved the migrated database as a template" in log
        _server(_env(third, own), "start")
        log = (state_dir(third) / "server.log").read_text()
        assert "skipped at start-up: migrations, block registration" in log
    finally:
        for path in (first, second, third):
            stop_server(path, force=True)


def test_a_server_of_another_prefect_version_is_replaced(
    project: Path, home: Path, templates: Path
) -> None:
    """A server of another Prefect version is stopped by the next run, which starts its own."""
    env = _env(home, templates, project)
    _server(env, "start")
    info = _info(home)
    path = state_dir(home) / "server.json"
    path.write_text(json.dumps({**info, "prefect": "0.0.1"}), encoding="utf-8")
    done = _run(project, env)
    assert "started the embedded Prefect server" in done.stderr
    assert not _alive(info["pid"])
    assert _info(home)["pid"] != info["pid"]


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
    assert "started the embedded Prefect server" in done.stderr
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
    assert "the embedded Prefect server for" in done.stderr
    assert "did not start" in done.stderr
    assert "server.log" in done.stderr
    assert not (project / "calls.log").exists()
    assert not server_status(home).info


def test_a_kept_server_is_not_taken_for_a_prefect_server_start(
    project: Path, home: Path, templates: Path
) -> None:
    """The kept server is not taken for a `prefect server start`: runs say they reused it."""
    from prefect.settings import PREFECT_HOME, temporary_settings

    from evalpipe.pipeline.server import running_server

    env = _env(home, templates, project)
    _server(env, "start")
    with temporary_settings(updates={PREFECT_HOME: str(home)}):
        assert running_server() is None
    done = _run(project, env)
    assert "reused the embedded Prefect server" in done.stderr
    assert "using the Prefect server at" not in done.stderr


def test_a_profile_api_url_starts_no_embedded_server(
    project: Path, home: Path, templates: Path, prefect_api: str
) -> None:
    """A profile's PREFECT_API_URL is used, and no embedded server starts, not even early."""
    home.mkdir(parents=True)
    (home / "profiles.toml").write_text(
        f'active = "shared"\n\n[profiles.shared]\nPREFECT_API_URL = "{prefect_api}"\n',
        encoding="utf-8",
    )
    done = _run(project, _env(home, templates, project))
    assert "embedded Prefect server" not in done.stderr
    assert not (state_dir(home) / "server.log").exists()
    assert not server_status(home).info
