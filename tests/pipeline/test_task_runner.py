"""The suite's task runner: shards on Prefect's process pool, a Dask LocalCluster and a Dask cluster
of separate worker processes (each in its own directory) give the same run as threads, row for
row, within the run's one concurrency."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from cluster_helpers import dask_cluster as start_dask_cluster
from evalpipe.pipeline import RunOutcome, arun_suite
from evalpipe.suite import EvalSuite, load_suite
from parquet_helpers import run_tables

pytestmark = pytest.mark.usefixtures("prefect_api")

AGENT = '''
"""Records which process answered each query, when the call started and ended, the Prefect API
its process reports to and whether that process has loaded pyarrow."""
import asyncio
import os
import sys
import time
from prefect.settings import get_current_settings
from evalpipe import AgentResponse, Message


class PidAgent:
    name = "pid"

    async def run(self, messages, **kwargs):
        query = messages[-1].text
        started = time.time()
        await asyncio.sleep(0.03)
        with open(os.environ["EVALPIPE_TEST_PID_FILE"], "a") as fh:
            api = get_current_settings().api.url
            arrow = "pyarrow" in sys.modules
            fh.write(f"{os.getpid()} {started} {time.time()} {api} {arrow} {query}\\n")
        return AgentResponse(messages=[Message("assistant", [f"answer: {query}"])])


agent = PidAgent()
'''


def _suite(tmp_path: Path, **extra: object) -> Path:
    (tmp_path / "pid_agents.py").write_text(textwrap.dedent(AGENT), encoding="utf-8")
    with (tmp_path / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(12):
            fh.write(f'{{"id": "q{i}", "query": "question {i}"}}\n')
    data = {
        "name": "pid-suite",
        "target": "pid_agents:agent",
        "dataset": "queries.jsonl",
        "repetitions": 2,
        "shard_size": 4,
        "evaluators": [{"keyword_check": ["answer"]}, "tool_calls_present"],
        "output_dir": str(tmp_path / "runs"),
        "gates": ["pass_rate(keyword_check) >= 1"],
        **extra,
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # Dask's worker processes inherit the environment: the agent module and the pid file.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    monkeypatch.setenv("EVALPIPE_TEST_PID_FILE", str(tmp_path / "pids.log"))
    sys.modules.pop("pid_agents", None)
    return tmp_path


def _calls(log: Path) -> list[tuple[int, float, float]]:
    """The agent's log: (pid, started, ended) per call."""
    calls = []
    for line in log.read_text(encoding="utf-8").splitlines():
        pid, started, ended, _ = line.split(" ", 3)
        calls.append((int(pid), float(started), float(ended)))
    return calls


def _apis(log: Path) -> set[str]:
    """The Prefect API URLs the processes that made the calls reported to."""
    return {line.split(" ", 4)[3] for line in log.read_text(encoding="utf-8").splitlines()}


def _with_arrow(log: Path) -> set[str]:
    """Whether the processes that made the calls had loaded pyarrow ("True", "False")."""
    return {line.split(" ", 5)[4] for line in log.read_text(encoding="utf-8").splitlines()}


def _most_in_flight(calls: list[tuple[int, float, float]]) -> int:
    """The most calls that were in flight at once, across every process."""
    edges = sorted([(s, 1) for _, s, _ in calls] + [(e, -1) for _, _, e in calls])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


async def _threads_run(project: Path, **extra: object) -> RunOutcome:
    """The same suite on threads (the default), in its own output directory."""
    baseline = await arun_suite(
        load_suite(_suite(project, output_dir=str(project / "threads"), **extra))
    )
    assert baseline.state == "Completed", baseline.message
    return baseline


async def test_processes_run_equals_threads_and_reports_to_the_runs_api(
    project: Path, prefect_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """task_runner {processes: 2}: Prefect's process pool runs the calls in its workers (one shard
    waiting per worker besides the one it runs, never more calls in flight than the concurrency),
    the Parquet files equal a threads run's row for row, the workers report to the flow's API
    (none starts a temporary server of its own) and never load pyarrow (the flow's module, which
    Prefect sends them with the flow, loads it only where the flow writes: ~50 MiB a worker); a
    large run's report is written in the flow's process, never by a child (that is for threads)."""
    import evalpipe.pipeline.flow as flow_module

    async def no_child(run_dir: str) -> str:
        raise AssertionError("the report was written by a child process")

    suite = _suite(project, task_runner={"processes": 2}, concurrency=3, shard_size=2)
    with monkeypatch.context() as patch:
        patch.setattr(flow_module, "REPORT_SUBPROCESS_CALLS", 1)
        patch.setattr(flow_module, "_report_in_child", no_child)
        outcome = await arun_suite(load_suite(suite))
    assert outcome.state == "Completed", outcome.message
    assert (outcome.run_dir / "report.html").is_file()
    assert outcome.gate_passed is True
    calls = _calls(project / "pids.log")
    assert len(calls) == 24
    assert os.getpid() not in {pid for pid, _, _ in calls}
    assert _most_in_flight(calls) <= 3
    assert _apis(project / "pids.log") == {prefect_api}
    assert _with_arrow(project / "pids.log") == {"False"}
    baseline = await _threads_run(project, concurrency=3, shard_size=2)
    assert run_tables(outcome.run_dir) == run_tables(baseline.run_dir)


CHILD_RUN = """
import asyncio, json, sys
import psutil
from prefect.settings import PREFECT_API_URL, temporary_settings
from evalpipe.pipeline import arun_suite
from evalpipe.suite import load_suite

with temporary_settings(updates={PREFECT_API_URL: sys.argv[2]}):
    outcome = asyncio.run(arun_suite(load_suite(sys.argv[1])))
servers = [
    " ".join(p.cmdline())
    for p in psutil.Process().children(recursive=True)
    if "prefect.server" in " ".join(p.cmdline())
]
print(json.dumps({"state": outcome.state, "message": outcome.message, "servers": servers}))
"""


def test_a_process_pools_workers_report_through_the_runs_api_only(
    project: Path, prefect_api: str
) -> None:
    """task_runner {processes: 2} in a process whose Prefect API is set in Prefect's settings
    context only (as the kept server's is): the workers' events and logs, which Prefect forwards
    from a thread of its own, go to the run's API; before, that thread (which does not see the
    context) started a temporary Prefect server of its own (~220 MiB, seconds of CPU) and the
    shards' events went there."""
    suite = _suite(project, task_runner={"processes": 2})
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD_RUN, str(suite), prefect_api],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["state"] == "Completed", answer["message"]
    assert answer["servers"] == []
    assert _apis(project / "pids.log") == {prefect_api}


async def test_dask_local_cluster_runs_the_shards_in_worker_processes(project: Path) -> None:
    """task_runner {dask: ...}: calls run in the cluster's worker processes, not the flow's, and
    the run's Parquet files (rows, nested results, gate) equal the threads run of the suite."""
    dask = {"dask": {"n_workers": 2, "threads_per_worker": 1, "processes": True}}
    outcome = await arun_suite(load_suite(_suite(project, task_runner=dask)))
    assert outcome.state == "Completed", outcome.message
    assert outcome.gate_passed is True
    pids = {pid for pid, _, _ in _calls(project / "pids.log")}
    assert os.getpid() not in pids
    assert 1 <= len(pids) <= 2
    baseline = await _threads_run(project)
    assert run_tables(outcome.run_dir) == run_tables(baseline.run_dir)
    assert pq.read_table(outcome.run_dir / "runs.parquet").num_rows == 24


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A Dask scheduler and two ``dask worker`` processes (2 threads each) on 127.0.0.1, each
    worker in its own working directory, sharing only the filesystem the tests write absolute
    paths to: the scheduler's address and the log the workers' agent writes."""
    root = tmp_path_factory.mktemp("dask")
    (root / "pid_agents.py").write_text(textwrap.dedent(AGENT), encoding="utf-8")
    log = root / "calls.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), *sys.path]),
        "EVALPIPE_TEST_PID_FILE": str(log),
    }
    with start_dask_cluster(root, env, nthreads=2) as (address, _):
        yield address, log


async def test_a_dask_cluster_of_two_workers_equals_threads_within_the_concurrency(
    project: Path, dask_cluster: tuple[str, Path]
) -> None:
    """{dask: {address: ...}} on two separate worker processes: both answer calls, never more
    than the suite's concurrency at once across them, and the Parquet files equal a threads run's
    row for row."""
    address, log = dask_cluster
    log.write_text("", encoding="utf-8")
    suite = _suite(project, task_runner={"dask": {"address": address}}, concurrency=3)
    outcome = await arun_suite(load_suite(suite))
    assert outcome.state == "Completed", outcome.message
    calls = _calls(log)
    assert len(calls) == 24
    assert os.getpid() not in {pid for pid, _, _ in calls}
    assert _most_in_flight(calls) <= 3
    baseline = await _threads_run(project, concurrency=3)
    assert run_tables(outcome.run_dir) == run_tables(baseline.run_dir)


def test_dask_workers_started_with_evalpipes_preload_collect_as_a_pools_workers(
    dask_cluster: tuple[str, Path],
) -> None:
    """`dask worker --preload evalpipe.pipeline.dask_worker` (docs/operations.md) gives each
    worker the collector of `evalpipe run`'s pool workers: what it imported frozen, MAKING."""
    import gc

    from distributed import Client

    from evalpipe._internal.collector import MAKING

    def collector() -> tuple[tuple[int, int, int], int]:
        return gc.get_threshold(), gc.get_freeze_count()

    address, _ = dask_cluster
    with Client(address, timeout=30) as client:
        seen = client.run(collector)
    assert len(seen) == 2
    assert all(tuple(t) == MAKING and frozen > 0 for t, frozen in seen.values())


async def test_dask_workers_journal_where_a_resume_finds_their_calls(
    project: Path, dask_cluster: tuple[str, Path]
) -> None:
    """Calls the cluster's workers journaled are not made again when the run directory resumes."""
    address, log = dask_cluster
    log.write_text("", encoding="utf-8")
    suite = load_suite(_suite(project, task_runner={"dask": {"address": address}}))
    first = await arun_suite(suite)
    assert first.state == "Completed", first.message
    (first.run_dir / "manifest.json").unlink()  # as if the run had died before the end
    again = await arun_suite(suite, run_dir=first.run_dir)
    assert again.state == "Completed", again.message
    assert again.reusable_calls == 24
    assert len(_calls(log)) == 24


async def test_workers_that_cannot_see_the_run_directory_stop_the_run_clearly(
    project: Path, dask_cluster: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remote output_dir stages the run in this machine's .evalpipe-staging, which the workers
    (in their own directories, as on other machines) do not see: the run stops before any call
    with an error naming the run directory and what to do, not with calls journaled where nobody
    reads them."""
    address, log = dask_cluster
    log.write_text("", encoding="utf-8")
    monkeypatch.delenv("EVALPIPE_STAGING_DIR", raising=False)
    suite = load_suite(
        _suite(
            project,
            task_runner={"dask": {"address": address}},
            output_dir="memory://evals-bucket/cluster",
        )
    )
    outcome = await arun_suite(suite)
    assert outcome.state != "Completed"
    message = outcome.message or ""
    assert "cannot see the run directory" in message, message
    assert "output_dir" in message
    assert _calls(log) == []


async def test_a_local_ray_runs_the_shards_and_equals_threads(project: Path) -> None:
    """{ray: {...}} (prefect-ray, the ray extra): a local Ray started by the run answers every call
    outside the flow's process, and the Parquet files equal a threads run's row for row."""
    ray = {"ray": {"init_kwargs": {"num_cpus": 2, "include_dashboard": False}}}
    outcome = await arun_suite(load_suite(_suite(project, task_runner=ray)))
    assert outcome.state == "Completed", outcome.message
    calls = _calls(project / "pids.log")
    assert len(calls) == 24
    assert os.getpid() not in {pid for pid, _, _ in calls}
    baseline = await _threads_run(project)
    assert run_tables(outcome.run_dir) == run_tables(baseline.run_dir)


def test_task_runner_forms_validate_and_unknown_ones_name_the_fix() -> None:
    """threads, processes, {processes: N}, {dask: {...}} with known options and {ray: {...}}
    validate; anything else is refused with the forms it could be."""
    base = {
        "name": "s",
        "target": "a:b",
        "dataset": "d.jsonl",
        "evaluators": ["tool_calls_present"],
    }
    assert EvalSuite.model_validate({**base, "task_runner": {"dask": None}}).task_runner == {
        "dask": {}
    }
    ray = {"ray": {"address": "ray://127.0.0.1:10001"}}
    assert EvalSuite.model_validate({**base, "task_runner": ray}).task_runner == ray
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['workers'\]"):
        EvalSuite.model_validate({**base, "task_runner": {"dask": {"workers": 2}}})
    with pytest.raises(ValueError, match=r"\{ray: \{\.\.\.\}\}; got \['spark'\]"):
        EvalSuite.model_validate({**base, "task_runner": {"spark": {}}})


async def test_an_unreachable_dask_scheduler_fails_the_run_once_and_fast(project: Path) -> None:
    """{dask: {address: ...}} with nothing listening fails the flow run with the connect error,
    once (not once per shard), and no call is made."""
    import dask

    runner = {"dask": {"address": "tcp://127.0.0.1:9"}}
    suite = load_suite(_suite(project, task_runner=runner, shard_size=1))  # 24 shards
    started = time.monotonic()
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        outcome = await arun_suite(suite)
    assert outcome.state == "Failed"
    assert "tcp://127.0.0.1:9" in (outcome.message or "")
    assert time.monotonic() - started < 30  # one 2 s attempt per shard would take 48 s
    assert not (project / "pids.log").exists()
