"""The suite's task runner: shards on a Dask LocalCluster (prefect-dask) give the same run as threads."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from evalpipe.artifacts import load_run
from evalpipe.pipeline import arun_suite
from evalpipe.suite import EvalSuite, load_suite

pytestmark = pytest.mark.usefixtures("prefect_api")

AGENT = '''
"""Records which process answered each query."""
import os
from evalpipe import AgentResponse, Message


class PidAgent:
    name = "pid"

    async def run(self, messages, **kwargs):
        query = messages[-1].text
        with open(os.environ["EVALPIPE_TEST_PID_FILE"], "a") as fh:
            fh.write(f"{os.getpid()} {query}\\n")
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


async def test_dask_local_cluster_runs_the_shards_in_worker_processes(project: Path) -> None:
    """task_runner {dask: ...}: calls run in the cluster's worker processes, not the flow's, and
    the run (Parquet, nested results, gate) equals the threads run of the same suite."""
    dask = {"dask": {"n_workers": 2, "threads_per_worker": 1, "processes": True}}
    outcome = await arun_suite(load_suite(_suite(project, task_runner=dask)))
    assert outcome.state == "Completed", outcome.message
    assert outcome.gate_passed is True
    lines = (project / "pids.log").read_text().splitlines()
    assert len(lines) == 24
    pids = {int(line.split()[0]) for line in lines}
    assert os.getpid() not in pids
    assert 1 <= len(pids) <= 2

    threads_dir = project / "threads"
    threads = load_suite(_suite(project, output_dir=str(threads_dir)))
    baseline = await arun_suite(threads)
    assert baseline.state == "Completed", baseline.message
    dask_results, threads_results = load_run(outcome.run_dir), load_run(baseline.run_dir)
    for a, b in zip(dask_results, threads_results, strict=True):
        assert (a.provider, a.passed, a.failed, a.errored) == (
            b.provider,
            b.passed,
            b.failed,
            b.errored,
        )
        assert [i.item_id for i in a.items] == [i.item_id for i in b.items]
    runs = pq.read_table(outcome.run_dir / "runs.parquet")
    assert runs.num_rows == 24


async def test_dask_resume_takes_finished_calls_from_the_workers_journal(project: Path) -> None:
    """Calls the Dask workers journaled are not made again when the same run directory resumes."""
    dask = {"dask": {"n_workers": 1, "threads_per_worker": 2, "processes": True}}
    suite = load_suite(_suite(project, task_runner=dask))
    first = await arun_suite(suite)
    assert first.state == "Completed", first.message
    (first.run_dir / "manifest.json").unlink()  # as if the run had died before the end
    again = await arun_suite(suite, run_dir=first.run_dir)
    assert again.state == "Completed", again.message
    assert again.reusable_calls == 24
    assert len((project / "pids.log").read_text().splitlines()) == 24


def test_unknown_task_runners_and_options_are_refused() -> None:
    """Only 'threads' and {dask: {...}} with known options validate; the error names the fix."""
    base = {
        "name": "s",
        "target": "a:b",
        "dataset": "d.jsonl",
        "evaluators": ["tool_calls_present"],
    }
    assert EvalSuite.model_validate({**base, "task_runner": {"dask": None}}).task_runner == {
        "dask": {}
    }
    with pytest.raises(ValueError, match="Ray is not built in"):
        EvalSuite.model_validate({**base, "task_runner": {"ray": {}}})
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['workers'\]"):
        EvalSuite.model_validate({**base, "task_runner": {"dask": {"workers": 2}}})


async def test_an_unreachable_dask_scheduler_fails_the_run_once_and_fast(project: Path) -> None:
    """{dask: {address: ...}} with nothing listening fails the flow run with the connect error,
    once (not once per shard), and no call is made."""
    import time

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
