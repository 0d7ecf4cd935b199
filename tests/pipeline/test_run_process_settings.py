"""The collector and Arrow's allocator are set only where `evalpipe run` runs its flow (its
process entry), and put back afterwards; evalpipe's library calls leave the caller's alone."""

from __future__ import annotations

import gc
import json
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from evalpipe import evaluate_agent
from evalpipe._internal.collector import MAKING, RECEIVING
from evalpipe.checks import keyword_check
from evalpipe.cli import main
from evalpipe.cli.run import _flow_running

pytestmark = pytest.mark.usefixtures("prefect_api")

AGENT = '''
"""Answers, and records its process's collector thresholds, frozen count and Arrow pool."""
import gc
import json
import os
import pyarrow
from evalpipe import AgentResponse, Message


class GcAgent:
    name = "gc"

    async def run(self, messages, **kwargs):
        with open(os.environ["EVALPIPE_TEST_GC_FILE"], "a") as fh:
            pool = pyarrow.default_memory_pool().backend_name
            fh.write(json.dumps([gc.get_threshold(), gc.get_freeze_count(), pool]) + "\\n")
        return AgentResponse(messages=[Message("assistant", ["answer"])])


agent = GcAgent()
'''


def _seen(log: Path) -> set[tuple[tuple[int, ...], bool, str]]:
    """(thresholds, anything frozen, Arrow's pool) as the agent saw them, call by call."""
    lines = log.read_text(encoding="utf-8").splitlines()
    return {
        (tuple(threshold), frozen > 0, pool) for threshold, frozen, pool in map(json.loads, lines)
    }


def _now() -> tuple[tuple[int, int, int], int, str]:
    """This process's thresholds, frozen count and Arrow pool."""
    return gc.get_threshold(), gc.get_freeze_count(), pa.default_memory_pool().backend_name


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EVALPIPE_TEST_GC_FILE", str(tmp_path / "gc.log"))
    sys.modules.pop("gc_agent", None)
    (tmp_path / "gc_agent.py").write_text(textwrap.dedent(AGENT), encoding="utf-8")
    with (tmp_path / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(4):
            fh.write(json.dumps({"id": f"q{i}", "query": f"question {i}"}) + "\n")
    suite = {
        "name": "gc",
        "target": "gc_agent:agent",
        "dataset": "queries.jsonl",
        "evaluators": [{"keyword_check": ["answer"]}],
        "output_dir": str(tmp_path / "runs"),
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    return tmp_path


def test_evalpipe_run_sets_its_process_while_its_flow_runs_and_puts_it_back(
    project: Path,
) -> None:
    """`evalpipe run` (threads: the calls run in its process) runs its flow with what was alive
    frozen, the collector's thresholds of the process that makes the shards' objects (MAKING) and
    Arrow on the system allocator, and restores all three when it ends."""
    before = _now()
    assert before[0] != MAKING
    assert before[2] != "system"
    assert main(["run", "suite.yaml", "--no-progress"]) == 0
    assert _seen(project / "gc.log") == {(MAKING, True, "system")}
    assert _now() == before


def test_with_workers_the_flows_process_walks_every_generation_and_puts_it_back() -> None:
    """When a task runner's workers run the shards, `evalpipe run`'s process collects with
    RECEIVING (every generation: the runner's futures hold shards' rows in cycles), and puts the
    collector back afterwards."""
    before = _now()
    with _flow_running(True):
        assert gc.get_threshold() == RECEIVING
        assert gc.get_freeze_count() > 0
    with _flow_running(False):
        assert gc.get_threshold() == MAKING
    assert _now() == before


async def test_evaluate_agent_leaves_the_callers_process_settings_alone(project: Path) -> None:
    """A library call (MAF's evaluate_agent) runs with the caller's collector and Arrow pool as
    they were."""
    from gc_agent import agent

    before = _now()
    (result,) = await evaluate_agent(
        agent=agent, queries=["q1", "q2"], evaluators=[keyword_check("answer")]
    )
    assert result.all_passed
    assert _seen(project / "gc.log") == {(before[0], before[1] > 0, before[2])}
    assert _now() == before


def test_evalpipe_runs_process_pool_workers_collect_as_it_does(project: Path) -> None:
    """The workers of a process pool `evalpipe run` starts get its collector for their life (their
    initializer), not its Arrow pool (a worker writes no Parquet)."""
    suite = yaml.safe_load((project / "suite.yaml").read_text(encoding="utf-8"))
    suite["task_runner"] = {"processes": 1}
    (project / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    assert main(["run", "suite.yaml", "--no-progress"]) == 0
    ((threshold, frozen, pool),) = _seen(project / "gc.log")
    assert (threshold, frozen) == (MAKING, True)
    assert pool != "system"


def test_evalpipe_runs_dask_local_cluster_workers_collect_as_its_pool_workers(
    project: Path,
) -> None:
    """A Dask LocalCluster `evalpipe run` starts preloads evalpipe.pipeline.dask_worker: its
    workers collect as the command's pool workers do."""
    suite = yaml.safe_load((project / "suite.yaml").read_text(encoding="utf-8"))
    suite["task_runner"] = {"dask": {"n_workers": 1, "threads_per_worker": 1}}
    (project / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    assert main(["run", "suite.yaml", "--no-progress"]) == 0
    ((threshold, frozen, _),) = _seen(project / "gc.log")
    assert (threshold, frozen) == (MAKING, True)


def test_a_library_runs_process_pool_workers_keep_pythons_collector(project: Path) -> None:
    """run_suite (a library call, as a deployment's flow run makes) starts its process pool's
    workers with Python's own collector: only `evalpipe run`'s entry hands them its setting."""
    from evalpipe.pipeline.run import run_suite
    from evalpipe.suite import load_suite

    suite = yaml.safe_load((project / "suite.yaml").read_text(encoding="utf-8"))
    suite["task_runner"] = {"processes": 1}
    (project / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    outcome = run_suite(load_suite(project / "suite.yaml"))
    assert outcome.state == "Completed", outcome.message
    ((threshold, frozen, _),) = _seen(project / "gc.log")
    assert threshold not in (MAKING, RECEIVING)
    assert frozen is False
