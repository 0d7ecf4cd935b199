"""Runs an operator can leave alone, tried with real processes and signals: bounded calls, one
run per directory, exit codes that mean one thing, and no orphaned server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalpipe.artifacts import read_manifest, read_summary
from evalpipe.journal import Journal
from evalpipe.pipeline import arun_suite, prepare_run
from evalpipe.runner.prepare import prepare_suite
from evalpipe.runner.state import RunLockedError
from evalpipe.suite import load_suite
from live_prefect import alive as _alive
from live_prefect import prefect_server

pytestmark = pytest.mark.usefixtures("prefect_api")

ROOT = Path(__file__).resolve().parents[2]

AGENTS = '''
"""Agents an operator meets: slow, hanging, raising anything."""
import asyncio, os, sys, time

from evalpipe import AgentResponse, Message

COUNT = os.environ.get("EVALPIPE_TEST_COUNT_FILE", "calls.log")
DELAY = float(os.environ.get("EVALPIPE_TEST_DELAY", "0"))
HANG = os.environ.get("EVALPIPE_TEST_HANG", "hang")
HOLD = os.environ.get("EVALPIPE_TEST_HOLD", "")  # a file: calls wait while it exists (10 min at most)


class Agent:
    name = "ops"

    async def run(self, messages, **kwargs):
        query = messages[-1].text
        with open(COUNT, "a") as fh:
            fh.write(query + "\\n")
        held_until = time.monotonic() + 600
        while HOLD and os.path.exists(HOLD) and time.monotonic() < held_until:
            await asyncio.sleep(0.05)
        if DELAY:
            await asyncio.sleep(DELAY)
        if HANG and HANG in query:
            await asyncio.sleep(3600)
        if "cancel" in query:
            raise asyncio.CancelledError("the agent's own cancellation")
        if "exit" in query:
            raise SystemExit(3)
        if "interrupt" in query:
            raise KeyboardInterrupt("the agent's own interrupt")
        return AgentResponse(messages=[Message("assistant", [f"answer: {query}"])])


class SyncHang:
    name = "sync"

    def run(self, messages, **kwargs):
        query = messages[-1].text
        with open(COUNT, "a") as fh:
            fh.write(query + "\\n")
        if "hang" in query:
            time.sleep(3600)
        if "interrupt" in query:
            raise KeyboardInterrupt("the agent's own interrupt")
        return AgentResponse(messages=[Message("assistant", [f"answer: {query}"])])


agent = Agent()
sync_agent = SyncHang()
'''


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVALPIPE_TEST_COUNT_FILE", str(tmp_path / "calls.log"))
    sys.modules.pop("ops_agents", None)
    (tmp_path / "ops_agents.py").write_text(textwrap.dedent(AGENTS), encoding="utf-8")
    return tmp_path


def _suite(project: Path, queries: list[str], **fields: Any) -> Path:
    with (project / "rows.jsonl").open("w", encoding="utf-8") as fh:
        for i, q in enumerate(queries):
            fh.write(json.dumps({"id": f"r{i}", "query": q}) + "\n")
    data: dict[str, Any] = {
        "name": "ops",
        "target": "ops_agents:agent",
        "dataset": "rows.jsonl",
        "evaluators": [{"keyword_check": ["answer"]}],
        "output_dir": str(project / "runs"),
        "call_attempts": 1,
        **fields,
    }
    path = project / "suite.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _calls(project: Path) -> list[str]:
    log = project / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def _cli(project: Path, prefect_api: str | None, **env: str) -> tuple[list[str], dict[str, str]]:
    base = {
        **os.environ,
        "EVALPIPE_TEST_COUNT_FILE": str(project / "calls.log"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "COLUMNS": "250",
        **env,
    }
    if prefect_api is not None:
        base["PREFECT_API_URL"] = prefect_api
    else:
        base.pop("PREFECT_API_URL", None)
    return [
        sys.executable,
        "-m",
        "evalpipe.cli",
        "run",
        str(project / "suite.yaml"),
        "--no-progress",
    ], base


def _holds_open(pid: int, path: Path) -> bool:
    """Process ``pid`` has ``path`` open now and still half a second later (waiting on it, not
    passing by)."""

    def is_open() -> bool:
        try:
            return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
        except OSError:  # the process or one of its files closed meanwhile
            return False

    if not is_open():
        return False
    time.sleep(0.5)
    return is_open()


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# -- bounded calls --------------------------------------------------------------------------


async def test_a_hanging_call_times_out_and_the_run_goes_on(project: Path) -> None:
    """Regression: a hanging agent call hung the run forever. Past call_timeout it is an errored
    item (TargetTimeout), its slot is freed and the other calls finish."""
    path = _suite(project, ["one", "please hang", "two", "three"], call_timeout=0.5, concurrency=1)
    started = time.monotonic()
    outcome = await arun_suite(load_suite(path))
    assert time.monotonic() - started < 60
    assert outcome.state == "Completed", outcome.message
    manifest = read_manifest(outcome.run_dir)
    assert (manifest["calls"]["made"], manifest["calls"]["errored"]) == (4, 1)
    [row] = [r for r in read_summary(outcome.run_dir) if r.kind == "result"]
    assert (row.passed, row.errored) == (3, 1)
    import pyarrow.parquet as pq

    runs = pq.read_table(outcome.run_dir / "runs.parquet").to_pylist()
    [hung] = [r for r in runs if r["status"] == "error"]
    assert hung["error_code"] == "TargetTimeout"
    assert "call timeout of 0.5 s" in hung["error_message"]


def test_a_hung_sync_agent_does_not_keep_the_process_alive(project: Path, prefect_api: str) -> None:
    """A synchronous agent that never returns runs in a daemon thread: after its timeout the run
    finishes and the process exits (a thread-pool worker would have kept it alive)."""
    _suite(project, ["please hang", "fine"], target="ops_agents:sync_agent", call_timeout=0.5)
    cmd, env = _cli(project, prefect_api)
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - started < 90
    assert "target calls: 2 made; 1 errored" in done.stdout


def test_sigterm_stops_a_hung_run_promptly_and_it_resumes(project: Path, prefect_api: str) -> None:
    """Regression: after SIGTERM a run with a hung call took 77 s to exit. It now stops at once
    (exit 3, the journal kept) and a second run makes only the calls still missing."""
    queries = [f"q{i}" for i in range(6)] + ["please hang"]
    _suite(project, queries, call_timeout=None, concurrency=2)
    cmd, env = _cli(project, prefect_api)
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _wait_for(lambda: "please hang" in _calls(project), 90, "the hanging call to start")
    time.sleep(0.5)
    stopped_at = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - stopped_at < 15
    assert proc.returncode == 3, err.decode()[-2000:]
    assert "interrupted" in err.decode()
    made_before = len(_calls(project))
    env["EVALPIPE_TEST_HANG"] = ""
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = 7 - (len(_calls(project)) - made_before)
    assert resumed >= 6  # every call that had finished was journaled and reused
    assert f"target calls: {7 - resumed} made, {resumed} reused" in done.stdout


def test_any_exception_from_one_call_is_one_errored_item(project: Path, prefect_api: str) -> None:
    """Regression: CancelledError raised by an agent crashed the flow and SystemExit(3) made the
    CLI exit 3. Each is one errored item; the run completes."""
    _suite(project, ["fine", "please cancel", "please exit"])
    cmd, env = _cli(project, prefect_api)
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "target calls: 3 made; 2 errored" in done.stdout
    (run_dir,) = (project / "runs" / "ops").iterdir()
    import pyarrow.parquet as pq

    errors = {
        r["error_message"].split(":")[0]
        for r in pq.read_table(run_dir / "runs.parquet").to_pylist()
        if r["error_message"]
    }
    assert errors == {"CancelledError", "SystemExit"}


@pytest.mark.parametrize("target", ["ops_agents:agent", "ops_agents:sync_agent"])
def test_an_agents_keyboard_interrupt_is_one_errored_item_and_a_resume_goes_past_it(
    project: Path, prefect_api: str, target: str
) -> None:
    """Regression (issue 34): a KeyboardInterrupt raised by the agent (async, or sync in its
    thread) stopped the run, and every resume stopped on the same row. It is one errored item:
    a resumed run makes that call again and completes."""
    # one call at a time: "b" starts only after the interrupt, and the calls' order is the rows'
    path = _suite(project, ["a", "please interrupt", "b"], target=target, concurrency=1)
    plan = prepare_suite(load_suite(path))
    assert plan.run_dir is not None
    from evalpipe import Message
    from evalpipe.transcripts import TargetRun

    with Journal(plan.run_dir / "journal", plan.identity) as journal:  # "a" finished before
        answer = Message("assistant", ["answer: a"])
        run = TargetRun(query_index=0, repetition=0, query="a", messages=[answer])
        journal.record(plan.calls[0].key, run.model_dump_json())
    (plan.run_dir / "run.json").write_text(json.dumps({"identity": plan.identity}), "utf-8")
    cmd, env = _cli(project, prefect_api)
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "target calls: 2 made, 1 reused (not called again); 1 errored" in done.stdout
    assert _calls(project) == ["please interrupt", "b"]
    import pyarrow.parquet as pq

    [errored] = [
        r for r in pq.read_table(plan.run_dir / "runs.parquet").to_pylist() if r["error_message"]
    ]
    assert errored["error_message"] == "KeyboardInterrupt: the agent's own interrupt"


def test_the_operators_ctrl_c_still_stops_the_run(project: Path, prefect_api: str) -> None:
    """The operator's Ctrl-C (SIGINT) is not an agent's KeyboardInterrupt: the run stops at once
    with exit 3, its finished calls journaled, instead of going on with the call errored."""
    _suite(project, [f"q{i}" for i in range(40)], concurrency=2)
    cmd, env = _cli(project, prefect_api, EVALPIPE_TEST_DELAY="1")
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _wait_for(lambda: len(_calls(project)) >= 4, 90, "the run to start calling")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err.decode()[-2000:]
    assert "interrupted" in err.decode()
    assert len(_calls(project)) < 40


# -- one run per directory ------------------------------------------------------------------


def test_a_second_run_of_a_live_run_is_refused_or_waits(project: Path, prefect_api: str) -> None:
    """Regression: two runs of one suite joined the same live directory and both made the missing
    calls. A second run is refused naming the live run, waits with --wait, or starts afresh with
    --new-run. Regression (issue 34): the run that waited then rewrote the run that finished
    meanwhile (manifest calls.made 8 -> 0, its flow run replaced); that run is now its result,
    read and not rewritten."""
    _suite(project, [f"q{i}" for i in range(8)], concurrency=2)
    hold = project / "hold"  # the first run's calls wait while it exists: it is live until freed
    hold.touch()
    cmd, env = _cli(project, prefect_api, EVALPIPE_TEST_HOLD=str(hold))
    first = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    started: list[subprocess.Popen[Any]] = [first]
    try:
        _wait_for(lambda: len(_calls(project)) >= 2, 120, "the first run to start calling")
        second = subprocess.run(
            cmd, cwd=project, env=env, capture_output=True, text=True, timeout=180
        )
        assert first.poll() is None, "the first run must still be running"
        assert second.returncode == 2, second.stdout[-2000:]
        assert f"pid {first.pid}" in second.stderr
        assert "--wait" in second.stderr
        assert "--new-run" in second.stderr
        assert first.poll() is None, "the first run must still be running"
        (lock,) = (project / "runs" / "ops").glob("*/run.lock")
        waited = subprocess.Popen(
            [*cmd, "--wait", "300"],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(waited)
        _wait_for(lambda: _holds_open(waited.pid, lock), 120, "the third run to wait for the lock")
        assert first.poll() is None, "the first run must still be running"
        hold.unlink()  # the first run finishes while the third waits for it
        out, _ = first.communicate(timeout=180)
        waited_out, waited_err = waited.communicate(timeout=180)
    finally:
        hold.unlink(missing_ok=True)
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    assert first.returncode == 0
    assert waited.returncode == 0, waited_err[-2000:]
    assert len(_calls(project)) == 8, (
        waited_out[-3000:],
        waited_err[-3000:],
        sorted(p.name for p in (project / "runs" / "ops").iterdir()),
    )  # nothing was called twice
    (run_dir,) = (project / "runs" / "ops").iterdir()
    manifest = read_manifest(run_dir)
    assert (manifest["calls"]["made"], manifest["calls"]["reused"]) == (8, 0)
    assert f"flow-run/{manifest['flow_run_id']}" in out.decode()  # the first run's, kept
    assert "the run this one waited for finished" in waited_err
    assert "target calls: 8 made; 0 errored" in waited_out  # the finished run's summary
    fresh = subprocess.run(
        [*cmd, "--new-run"],
        cwd=project,
        env={**env, "EVALPIPE_TEST_DELAY": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert len(_calls(project)) == 16
    assert len(list((project / "runs" / "ops").iterdir())) == 2


async def test_two_runs_started_together_never_both_run(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 34): two runs of one suite started less than a second apart both ran, in
    two directories (every call paid twice): the second chose its directory after the first had
    taken one but before the first had marked it. A run now chooses and takes its directory,
    marker written, under the suite's placing lock: the second finds the first's, held, and is
    refused."""
    monkeypatch.setenv("EVALPIPE_TEST_DELAY", "0.5")
    suite = load_suite(_suite(project, [f"q{i}" for i in range(8)], concurrency=2))
    first = asyncio.create_task(arun_suite(suite))
    deadline = time.monotonic() + 60
    while not (project / "runs" / "ops").is_dir() or not any((project / "runs" / "ops").iterdir()):
        assert time.monotonic() < deadline, "the first run did not take a directory"
        await asyncio.sleep(0.002)
    second = prepare_run(suite)  # the moment the first has taken its directory
    with pytest.raises(RunLockedError, match="a live run holds this run"):
        await arun_suite(suite, plan=second)
    outcome = await first
    assert outcome.state == "Completed", outcome.message
    assert len(_calls(project)) == 8
    assert [p.name for p in (project / "runs" / "ops").iterdir()] == [outcome.run_dir.name]


def test_kill_9_between_the_manifest_and_the_report_is_finished_not_paid_again(
    project: Path, prefect_api: str
) -> None:
    """Regression (issue 34): a run killed (kill -9) after writing manifest.json but before its
    report.html made the rerun start a new run and pay for every call again. The rerun finishes
    that run (its report, artifacts and verdict) from its files: no call, no new directory, no
    file it wrote rewritten."""
    _suite(project, [f"q{i}" for i in range(12)], concurrency=4)
    cmd, env = _cli(project, prefect_api)
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while not list((project / "runs").glob("ops/*/manifest.json")):
        assert proc.poll() is None, "the run ended before the kill"
        assert time.monotonic() < deadline, "no manifest was written"
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    (run_dir,) = (project / "runs" / "ops").iterdir()
    assert not (run_dir / "report.html").exists(), "the kill must land before the report"
    written = {
        p.name: p.read_bytes() for p in run_dir.iterdir() if p.suffix in (".json", ".parquet")
    }
    assert len(_calls(project)) == 12
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(_calls(project)) == 12  # nothing was called again
    assert [p.name for p in (project / "runs" / "ops").iterdir()] == [run_dir.name]
    assert (run_dir / "report.html").is_file()
    assert "this run finishes them (nothing is called again)" in done.stderr
    assert "target calls: 12 made; 0 errored" in done.stdout
    kept = {n: (run_dir / n).read_bytes() for n in written if n != "run.json"}
    assert kept == {n: b for n, b in written.items() if n != "run.json"}


def test_a_stale_lock_is_taken_over_with_a_message(project: Path, prefect_api: str) -> None:
    """A run killed with SIGKILL leaves its lock; the next run takes it over, says so, and
    resumes the finished calls."""
    _suite(project, [f"q{i}" for i in range(10)], concurrency=2)
    cmd, env = _cli(project, prefect_api, EVALPIPE_TEST_DELAY="0.3")
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _wait_for(
        lambda: any(j.stat().st_size for j in (project / "runs").glob("ops/*/journal/*.jsonl")),
        90,
        "a journaled call",
    )
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    done = subprocess.run(
        cmd,
        cwd=project,
        env={**env, "EVALPIPE_TEST_DELAY": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"took over the lock of pid {proc.pid}" in done.stderr
    assert "reused" in done.stdout


async def test_a_finished_run_is_never_rewritten(project: Path) -> None:
    """Regression: --run-dir pointing at a finished run of another suite overwrote it. It is
    refused before any call, and the finished run's files are untouched."""
    path = _suite(project, ["a", "b"])
    first = await arun_suite(load_suite(path))
    assert first.state == "Completed", first.message
    before = {p.name: p.read_bytes() for p in first.run_dir.iterdir() if p.is_file()}
    other_file = project / "other.yaml"
    other_file.write_text(path.read_text().replace("name: ops", "name: other"), encoding="utf-8")
    other = other_file
    from evalpipe.suite import SuiteError

    with pytest.raises(SuiteError, match="a finished run; finished runs are never rewritten"):
        await arun_suite(load_suite(other), run_dir=first.run_dir)
    with pytest.raises(SuiteError, match="re-scoring writes a new directory"):
        await arun_suite(load_suite(path), run_dir=first.run_dir.parent, rescore=first.run_dir)
    assert {p.name: p.read_bytes() for p in first.run_dir.iterdir() if p.is_file()} == before
    assert _calls(project) == ["a", "b"]


async def test_changing_gates_or_evaluators_keeps_the_finished_calls(project: Path) -> None:
    """Resuming matches finished calls by target and row, not by the whole suite: an unfinished
    run resumed with other evaluators or gates makes no call twice."""
    path = _suite(project, ["a", "b"])
    plan = prepare_suite(load_suite(path))
    assert plan.run_dir is not None
    journal = Journal(plan.run_dir / "journal", plan.identity)
    from evalpipe import Message
    from evalpipe.transcripts import TargetRun

    first = plan.calls[0]
    journal.record(
        first.key,
        TargetRun(
            query_index=0, repetition=0, query="a", messages=[Message("assistant", ["answer: a"])]
        ).model_dump_json(),
    )
    journal.close()
    (plan.run_dir / "run.json").write_text(
        json.dumps({"identity": plan.identity}), encoding="utf-8"
    )
    changed = _suite(project, ["a", "b"], evaluators=["tool_calls_present"], gates=["no_errors()"])
    outcome = await arun_suite(load_suite(changed))
    assert outcome.state == "Completed", outcome.message
    assert outcome.run_dir == plan.run_dir.resolve()
    assert outcome.calls["reused"] == 1
    assert _calls(project) == ["b"]


# -- files that cannot be written ------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a real, tiny filesystem (tmpfs, 160 KiB) that fills up."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def test_a_full_disk_stops_the_calls_and_says_where(
    project: Path, prefect_api: str, full_disk: Path
) -> None:
    """Regression: with the disk full, 36 calls were made and 16 journaled, and the error named no
    path. When a finished call cannot be journaled the run stops making calls, names the file,
    exits 3; after space is freed the run resumes."""
    big = "x" * 20_000  # each transcript ~20 KB: the tmpfs fills after a few calls
    _suite(
        project,
        [f"q{i} {big}" for i in range(40)],
        output_dir=str(full_disk),
        concurrency=2,
        shard_size=4,
    )
    cmd, env = _cli(project, prefect_api)
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 3, (done.stdout[-1000:], done.stderr[-2000:])
    assert "No space left on device" in done.stderr
    assert str(full_disk) in done.stderr
    (run_dir,) = (full_disk / "ops").iterdir()
    journaled = sum(len(j.read_bytes().splitlines()) for j in (run_dir / "journal").glob("*.jsonl"))
    made = len(_calls(project))
    assert made < 40
    assert made - journaled <= 2  # at most the calls in flight when the disk filled
    assert not list(run_dir.glob(".*.tmp"))


def test_a_full_disk_while_writing_the_tables_names_the_file(
    project: Path, prefect_api: str, full_disk: Path
) -> None:
    """Regression (issue 34): a disk that filled while the Parquet tables were written ended the
    run with exit 3 naming no file. The message now names the file that could not be written;
    once space is freed, the run finishes from its journal without calling again."""
    queries = [f"q{i} {os.urandom(1000).hex()}" for i in range(4)]  # random: no compression
    path = _suite(project, queries, output_dir=str(full_disk))
    plan = prepare_suite(load_suite(path))
    assert plan.run_dir is not None
    from evalpipe import Message
    from evalpipe.transcripts import TargetRun

    with Journal(plan.run_dir / "journal", plan.identity) as journal:  # every call finished
        for call in plan.calls:
            query = queries[call.row_index]
            answer = Message("assistant", [f"answer: {query}"])
            run = TargetRun(
                query_index=call.row_index, repetition=0, query=query, messages=[answer]
            )
            journal.record(call.key, run.model_dump_json())
    (plan.run_dir / "run.json").write_text(json.dumps({"identity": plan.identity}), "utf-8")
    free = os.statvfs(full_disk)
    filler = full_disk / "filler"
    filler.write_bytes(b"\0" * (free.f_bavail * free.f_frsize - 12 * 1024))
    cmd, env = _cli(project, prefect_api)
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 3, (done.stdout[-1000:], done.stderr[-2000:])
    named = rf"cannot write {re.escape(str(plan.run_dir))}/(runs|items|scores|summary)\.parquet"
    assert re.search(named + ": No space left on device", done.stderr), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not (plan.run_dir / "manifest.json").exists()
    filler.unlink()
    again = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, (again.stdout[-2000:], again.stderr[-2000:])
    assert "target calls: 4 reused (not called again)" in again.stdout
    assert _calls(project) == []


def test_an_atomic_write_that_fails_leaves_no_temporary_file(tmp_path: Path) -> None:
    """Regression: a report write that failed on a full disk left `.report.html.tmp` behind."""
    from evalpipe._internal.files import atomic_path

    target = tmp_path / "report.html"

    def write() -> None:
        with atomic_path(target) as tmp:
            tmp.write_text("partial", encoding="utf-8")
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write()
    assert list(tmp_path.iterdir()) == []


# -- the embedded Prefect server ---------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def test_kill_9_does_not_orphan_the_embedded_server(project: Path) -> None:
    """Regression: `kill -9` of `evalpipe run` left its ephemeral Prefect server running (alive
    32 minutes later). With EVALPIPE_SERVER_IDLE_TIMEOUT=0 the embedded server ends with the last
    run using it, killed or not (the default timeout: tests/pipeline/test_server.py)."""
    _suite(project, [f"q{i}" for i in range(30)], concurrency=1)
    cmd, env = _cli(
        project,
        None,
        EVALPIPE_TEST_DELAY="0.5",
        PREFECT_HOME=str(project / "ph"),
        EVALPIPE_SERVER_IDLE_TIMEOUT="0",
        EVALPIPE_SERVER_DB_TEMPLATES=str(project / "templates"),
        # a fresh home migrates its database first: past 60 s (the default) on a loaded machine
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="300",
    )
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        _wait_for(
            lambda: _calls(project) or proc.poll() is not None, 400, "the run to start calling"
        )
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]  # ended, no call
        servers = _children(proc.pid)
        assert servers, "the embedded server runs as a child of the command"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        # its watcher stops it at once: SIGTERM, then SIGKILL after 10 s
        _wait_for(
            lambda: not any(_alive(p) for p in servers), 60, "the server to end with its parent"
        )
    finally:
        if proc.poll() is None:
            proc.kill()


# -- exit codes and messages ------------------------------------------------------------------


def test_a_dead_prefect_api_is_exit_3_and_leaves_no_run_directory(project: Path) -> None:
    """PREFECT_API_URL pointing at a dead server: exit 3 with the fix, no empty run directory."""
    _suite(project, ["a"])
    cmd, env = _cli(project, "http://127.0.0.1:9/api")
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    assert "does not answer" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (project / "runs").exists() or not any((project / "runs").rglob("*"))


def test_the_prefect_server_killed_mid_run_is_exit_3_naming_the_journal(
    project: Path, prefect_api: str, tmp_path: Path
) -> None:
    """Regression (issue 34): with its Prefect server killed mid-run, a run retried for ~145 s,
    printed 5 tracebacks and exited 1 (the gate-failed code). It stops within a bound: exit 3,
    one message naming the API and the journal of its finished calls, no traceback; the rerun
    (on a server that answers) makes only the calls still missing."""
    _suite(project, [f"q{i}" for i in range(40)], concurrency=2)
    (tmp_path / "prefect-home").mkdir()
    with prefect_server(tmp_path / "prefect-home", tmp_path) as server:
        cmd, env = _cli(project, server.api, EVALPIPE_TEST_DELAY="2")
        proc = subprocess.Popen(
            cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        _wait_for(lambda: len(_calls(project)) >= 6, 120, "the run to start calling")
        os.killpg(server.pid, signal.SIGKILL)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=180)
    took = time.monotonic() - killed
    said = err.decode()
    assert proc.returncode == 3, (out.decode()[-2000:], said[-3000:])
    assert took < 60, took
    assert "Traceback" not in said
    assert said.count("error:") == 1
    (run_dir,) = (project / "runs" / "ops").iterdir()
    journaled = sum(len(j.read_bytes().splitlines()) for j in (run_dir / "journal").glob("*.jsonl"))
    assert f"the Prefect API at {server.api} stopped answering mid-run" in said
    assert f"{journaled} of 40 calls are finished and journaled in {run_dir / 'journal'}" in said
    assert not (run_dir / "manifest.json").exists()
    made = len(_calls(project))
    assert journaled < 40, "the run must stop before its last call"
    cmd, env = _cli(project, prefect_api, EVALPIPE_TEST_DELAY="0")
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(_calls(project)) - made == 40 - journaled  # only the missing calls


@pytest.mark.parametrize(
    ("module", "target", "fragment"),
    [
        (
            "broken_syntax.py",
            "broken_syntax:agent",
            "broken_syntax.py:2: the module has a syntax error",
        ),
        (
            "raises_at_import.py",
            "raises_at_import:agent",
            "importing module 'raises_at_import' raised RuntimeError: no config",
        ),
        (
            "raising_factory.py",
            "raising_factory:make",
            "building the target raised RuntimeError: quota gone",
        ),
    ],
)
def test_a_broken_target_is_exit_2_naming_the_place(
    project: Path, prefect_api: str, module: str, target: str, fragment: str
) -> None:
    """A target module with a SyntaxError, one that raises at import, a factory that raises:
    exit 2 with a message naming the place, never a traceback."""
    (project / "broken_syntax.py").write_text("x = 1\ndef agent(:\n", encoding="utf-8")
    (project / "raises_at_import.py").write_text(
        "raise RuntimeError('no config')\n", encoding="utf-8"
    )
    (project / "raising_factory.py").write_text(
        "def make():\n    raise RuntimeError('quota gone')\n", encoding="utf-8"
    )
    _suite(project, ["a"], target=target)
    cmd, env = _cli(project, prefect_api)
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert fragment in done.stderr.replace("\n", "")
    assert "Traceback" not in done.stderr
    assert _calls(project) == []


@pytest.mark.parametrize("where", ["file", "readonly"])
def test_an_unwritable_output_directory_is_exit_2(
    project: Path, prefect_api: str, where: str
) -> None:
    """output_dir that is an existing file, or a directory that cannot be created: exit 2 naming
    it, before any call."""
    if where == "file":
        (project / "out").write_text("not a directory", encoding="utf-8")
        output, fragment = str(project / "out"), "is a file, not a directory"
    else:
        output, fragment = "/sys/evalpipe-cannot-write", "cannot create the run directory"
    _suite(project, ["a"], output_dir=output)
    cmd, env = _cli(project, prefect_api)
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert fragment in done.stderr.replace("\n", " ")
    assert _calls(project) == []


def test_a_failed_gate_prints_its_verdict_not_a_traceback(project: Path, prefect_api: str) -> None:
    """A failed gate exits 1 and prints each clause with its numbers; Prefect's exception
    traceback is not printed."""
    _suite(project, ["a", "please cancel"], gates=["pass_rate(keyword_check) >= 0.9"])
    cmd, env = _cli(project, prefect_api)
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    assert "pass_rate(keyword_check) >= 0.9  FAIL  pass rate 1 (1 of n=1 passed)" in done.stdout
    assert "1 errored > max_errors=0" in done.stdout
    assert "gate failed for suite ops" in done.stderr


# -- reports of runs where little went right ------------------------------------------------------


@pytest.mark.parametrize(
    ("queries", "evaluators", "target"),
    [
        (["please cancel", "please exit"], [{"keyword_check": ["answer"]}], "ops_agents:agent"),
        (["a", "b"], ["tool_call_args_match"], "ops_agents:agent"),
        (["only one"], [{"keyword_check": ["answer"]}], "ops_agents:agent"),
        (
            ["Plan a trip to Paris"],
            [{"keyword_check": ["x"], "agents": ["writer"]}],
            "examples.travel.workflow:workflow",
        ),
    ],
    ids=["all-errored", "no-expected-calls", "one-item", "scoped-agent"],
)
async def test_every_sink_works_when_little_went_right(
    project: Path,
    capsys: pytest.CaptureFixture[str],
    queries: list[str],
    evaluators: list[Any],
    target: str,
) -> None:
    """Regression: a run whose every call errored had no report (ArrowInvalid on a null join
    key) and `evalpipe report` exited 2. The report, summary, CLI and gate work on an all-errored
    run, one item, and agents with no rows for a provider."""
    sys.path.insert(0, str(ROOT))
    path = _suite(project, queries, evaluators=evaluators, target=target, gates=["no_errors()"])
    outcome = await arun_suite(load_suite(path))
    assert outcome.verdict in ("passed", "gate_failed"), outcome.message
    assert (outcome.run_dir / "report.html").is_file()
    rows = read_summary(outcome.run_dir)
    assert rows
    from evalpipe.cli import main

    capsys.readouterr()
    assert main(["report", str(outcome.run_dir)]) == 0
    assert main(["results", str(outcome.run_dir)]) == 0
    printed = capsys.readouterr().out
    assert "pass rate" in printed


async def test_a_huge_query_does_not_make_a_huge_report(project: Path) -> None:
    """Regression: a 20 MB query made an 80 MB report.html. Long texts are cut, with their full
    length shown and where the rest is."""
    huge = "q" * 20_000_000
    outcome = await arun_suite(load_suite(_suite(project, [huge])))
    assert outcome.state == "Completed", outcome.message
    report = outcome.run_dir / "report.html"
    assert report.stat().st_size < 2_000_000
    text = report.read_text(encoding="utf-8")
    assert "20,000,000 characters" in text
    assert "items.parquet" in text
