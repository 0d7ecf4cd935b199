"""Shards in local worker processes (``task_runner: processes``): the same files as threads, the
concurrency split, failures that stop the run, and no worker left behind.

These use the runner-level pieces (the pool, the writer) without a flow or a Prefect server; each
pool is started once per module (a worker process imports evalpipe: ~1 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq
import pytest
import yaml

from evalpipe.artifacts import RunWriter
from evalpipe.pipeline import processes
from evalpipe.pipeline.flow import _write
from evalpipe.pipeline.processes import (
    _BOOT,
    ProcessPool,
    ShardDone,
    WorkerDiedError,
    keep_listed,
    split_concurrency,
)
from evalpipe.results import EvalResults
from evalpipe.runner import RunPlan
from evalpipe.runner.prepare import prepare_suite
from evalpipe.suite import load_suite
from evalpipe.tally import CallTally
from parquet_helpers import parquet_table as _table
from parquet_helpers import travel_plan, write_whole_shards

REPO = Path(__file__).resolve().parents[2]
TRAVEL = REPO / "examples" / "travel"


def _travel_plan(root: Path, name: str) -> RunPlan:
    """The demo workflow suite (3 agents, 4 providers, one agent-scoped; failures) in ``root``."""
    return travel_plan(
        root,
        name,
        "suite.yaml",
        "workflow_queries.jsonl",
        concurrency=3,
        task_runner={"processes": 2},
    )


def _write_processes(
    pool: ProcessPool, plan: RunPlan, size: int, rows: int
) -> tuple[list[list[EvalResults]], Any]:
    """The processes path's: shards on the pool, appended in order, as the flow does it."""

    async def run() -> tuple[list[list[EvalResults]], Any]:
        writer = RunWriter(plan.run_dir, row_group_size=rows)
        kept: list[list[EvalResults]] = [[] for _ in plan.providers]
        texts: dict[tuple[str, str], int] = {}
        calls = CallTally()
        shards = plan.shards(size)
        answers = await asyncio.gather(
            *(pool.run(pool.job(i, c, {})) for i, c in enumerate(shards))
        )
        verdicts = []
        for d in (chunk for shard in answers for chunk in shard):
            calls.merge(d.calls)
            _write(writer, plan, d)
            verdicts.append(d.verdicts.as_dict())
            for p, r in enumerate(d.results):
                keep_listed(r, texts, 50)
                kept[p].append(r)
        writer.finish({})
        return kept, (calls.as_dict(), verdicts)

    return asyncio.run(run())


def _pool(plan: RunPlan, workers: int) -> ProcessPool:
    pool = ProcessPool(plan, workers, listed=50)
    asyncio.run(pool.__aenter__())
    return pool


@pytest.fixture(scope="module")
def travel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ProcessPool]]:
    """The travel suite's plan in a temporary directory and a pool of 2 workers for it."""
    root = tmp_path_factory.mktemp("travel")
    cwd = os.getcwd()
    os.chdir(REPO)  # the target is examples.travel.workflow:workflow
    try:
        plan = _travel_plan(root, "processes")
        pool = _pool(plan, 2)
        try:
            yield root, pool
        finally:
            pool.close()
    finally:
        os.chdir(cwd)


def test_process_shards_write_what_threads_write(travel: tuple[Path, ProcessPool]) -> None:
    """runs, items, scores and summary.parquet from worker processes equal the threads path's
    (times and run names apart), row group for row group, across shards that end mid-group; the
    kept results, their kept failure texts, the call tally and the verdicts are the same."""
    root, pool = travel
    os.chdir(REPO)
    threads_plan = _travel_plan(root, "threads")
    size, rows = 4, 5  # 15 calls: 4 shards; row groups of 5 cut across shards
    threads = write_whole_shards(threads_plan, size, rows, 3)
    processes = _write_processes(pool, pool.plan, size, rows)
    for name in ("runs", "items", "scores", "summary"):
        a = _table(threads_plan.run_dir / f"{name}.parquet")
        b = _table(pool.plan.run_dir / f"{name}.parquet")
        assert a == b, name
    assert sum(_table(pool.plan.run_dir / "items.parquet")[1]) > 15  # per-agent items
    kept_a, calls_a, verdicts_a = threads
    kept_b, (calls_b, verdicts_b) = processes
    for a_parts, b_parts in zip(kept_a, kept_b, strict=True):
        for ra, rb in zip(a_parts, b_parts, strict=True):
            for la, lb in zip(ra.iter_results(), rb.iter_results(), strict=True):
                assert la.model_dump(exclude={"items"}) == lb.model_dump(exclude={"items"})
                for ia, ib in zip(la.items, lb.items, strict=True):
                    assert (ia.item_id, ia.status, ia.input_text, ia.output_text) == (
                        ib.item_id,
                        ib.status,
                        ib.input_text,
                        ib.output_text,
                    )
                    assert ia.scores == ib.scores
    assert any(i.input_text for r in kept_b[0] for lv in r.iter_results() for i in lv.items)
    for key in ("latency_p50_s", "latency_p95_s"):
        calls_a.pop(key)
        calls_b.pop(key)
    assert calls_a == calls_b
    assert calls_b["made"] == 15
    assert verdicts_a == verdicts_b


def test_a_shard_that_raises_in_a_worker_raises_in_the_flow_and_the_worker_goes_on(
    travel: tuple[Path, ProcessPool],
) -> None:
    """An exception inside a worker's shard comes back as itself; that worker takes the next
    shard."""
    _, pool = travel
    plan = pool.plan
    bad = pool.job(0, plan.calls[:2], {})
    bad.calls = [(0, len(bad.rows), 0, plan.calls[0].key)]  # no such row: IndexError there

    async def run() -> list[ShardDone]:
        with pytest.raises(IndexError):
            await pool.run(bad)
        return await pool.run(pool.job(1, plan.calls[2:4], {}))

    [done] = asyncio.run(run())
    assert done.n_calls == 2
    assert done.encoded.runs is not None


AGENT = '''
"""Sleeps, and records when each call ran (CLOCK_MONOTONIC is one clock for every process)."""
import asyncio, os, time
from evalpipe import AgentResponse, Message


class SpanAgent:
    name = "span"

    async def run(self, messages, **kwargs):
        start = time.monotonic()
        await asyncio.sleep(0.03)
        with open(os.environ["EVALPIPE_TEST_SPANS"], "a") as fh:
            fh.write(f"{os.getpid()} {start} {time.monotonic()}\\n")
        return AgentResponse(messages=[Message("assistant", ["done"])])


agent = SpanAgent()
'''


@pytest.fixture(scope="module")
def spans(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ProcessPool]]:
    """A suite of 24 rows x 2 repetitions of sleeping calls at concurrency 3 and a pool of 2
    workers (shares 2 and 1)."""
    root = tmp_path_factory.mktemp("spans")
    (root / "span_agent.py").write_text(textwrap.dedent(AGENT), encoding="utf-8")
    with (root / "q.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(24):
            fh.write(json.dumps({"id": f"q{i}", "query": f"q {i}"}) + "\n")
    suite = {
        "name": "spans",
        "target": "span_agent:agent",
        "dataset": "q.jsonl",
        "concurrency": 3,
        "repetitions": 2,
        "evaluators": [{"keyword_check": ["done"]}],
        "output_dir": str(root / "runs"),
        "task_runner": {"processes": 2},
    }
    (root / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    os.environ["EVALPIPE_TEST_SPANS"] = str(root / "spans.log")
    sys.path.insert(0, str(root))
    try:
        plan = prepare_suite(load_suite(root / "suite.yaml"), root / "runs" / "r")
        pool = _pool(plan, 2)
        try:
            yield root, pool
        finally:
            pool.close()
    finally:
        sys.path.remove(str(root))
        os.environ.pop("EVALPIPE_TEST_SPANS", None)


def test_split_concurrency_shares_sum_to_the_suites() -> None:
    """Shares are as equal as can be, each at least one, and sum to the concurrency."""
    assert split_concurrency(64, 2) == [32, 32]
    assert split_concurrency(3, 2) == [2, 1]
    assert split_concurrency(1, 4) == [1]
    assert split_concurrency(10, 4) == [3, 3, 2, 2]
    with pytest.raises(ValueError, match="must be >= 1"):
        split_concurrency(0, 2)


def test_calls_in_flight_across_workers_never_exceed_the_concurrency(
    spans: tuple[Path, ProcessPool],
) -> None:
    """Every shard queued at once on 2 workers at concurrency 3: both workers make calls, and at
    no moment are more than 3 calls in flight over all of them."""
    root, pool = spans
    assert pool.shares == [2, 1]

    async def run() -> list[ShardDone]:
        calls = pool.plan.calls[:24]  # repetition 0
        shards = [calls[i : i + 4] for i in range(0, 24, 4)]
        answers = await asyncio.gather(
            *(pool.run(pool.job(i, c, {})) for i, c in enumerate(shards))
        )
        return [chunk for shard in answers for chunk in shard]

    done = asyncio.run(run())
    assert sum(d.n_calls for d in done) == 24
    lines = (root / "spans.log").read_text().split("\n")
    spans_ = [(float(s), float(e), int(p)) for p, s, e in (ln.split() for ln in lines if ln)]
    assert len(spans_) == 24
    assert len({p for _, _, p in spans_}) == 2
    events = sorted([(s, 1) for s, _, _ in spans_] + [(e, -1) for _, e, _ in spans_])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert 2 <= peak <= 3


def test_each_worker_holds_its_next_shard_and_answers_in_order(
    spans: tuple[Path, ProcessPool],
) -> None:
    """Four shards at once on 2 workers: each worker is given two (the one it runs and the one
    queued behind it), and every answer goes to the shard it belongs to."""
    _, pool = spans
    calls = pool.plan.calls[:16]

    async def run() -> list[ShardDone]:
        jobs = [pool.job(i, calls[4 * i : 4 * i + 4], {}) for i in range(4)]
        answers = await asyncio.gather(*(pool.run(job) for job in jobs))
        return [chunk for shard in answers for chunk in shard]

    done = asyncio.run(run())
    assert [d.index for d in done] == [0, 1, 2, 3]
    assert [d.n_calls for d in done] == [4, 4, 4, 4]
    by_worker: dict[int, list[int]] = {}
    for d in done:
        by_worker.setdefault(d.pid, []).append(d.index)
    assert sorted(by_worker) == sorted(pool.pids)
    assert sorted(by_worker.values()) == [[0, 2], [1, 3]]


def test_a_worker_that_dies_stops_the_run_and_no_worker_is_left(
    spans: tuple[Path, ProcessPool],
) -> None:
    """Workers killed while one holds a shard: that shard raises WorkerDiedError (a stop reason:
    the run is incomplete), the calls it finished are journaled; closing the pool leaves no
    worker process."""
    from evalpipe.pipeline.flow import _stop_reason

    root, pool = spans
    pids = list(pool.pids)
    log = root / "spans.log"
    calls = pool.plan.calls[24:]  # repetition 1: 24 calls of 30 ms, at most 2 at once
    journal = pool.plan.run_dir / "journal"

    def journaled() -> set[str]:
        return {
            json.loads(line)["key"]
            for path in journal.glob("*.jsonl")
            for line in path.read_text().splitlines()
        }

    before = journaled()

    async def run() -> BaseException:
        seen = log.stat().st_size
        task = asyncio.ensure_future(pool.run(pool.job(0, calls, {})))
        # a file, not an event: the calls run in other processes
        while log.stat().st_size == seen and not task.done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        for pid in pids:
            psutil.Process(pid).kill()
        with pytest.raises(WorkerDiedError) as caught:
            await task
        return caught.value

    failure = asyncio.run(run())
    assert "run again to resume" in (_stop_reason(failure) or "")
    after = journaled()
    assert after - before  # what the shard finished before the kill
    assert after - before <= {c.key for c in calls}
    pool.close()
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_worker_whose_parent_is_killed_exits_on_its_own(tmp_path: Path) -> None:
    """SIGKILL of the flow's process: its worker (its pipe still open elsewhere, so only the
    parent watch can end it) exits within seconds."""
    read, write = os.pipe()
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import json, os, subprocess, sys, time
                fd = int(sys.argv[1])
                boot = sys.argv[2]
                worker = subprocess.Popen(
                    [sys.executable, "-c", boot, json.dumps(sys.path), str(fd), str(os.getpid())],
                    pass_fds=(fd,),
                )
                print(worker.pid, flush=True)
                time.sleep(60)
                """
            ),
            str(read),
            _BOOT,
        ],
        pass_fds=(read,),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        worker = psutil.Process(int(parent.stdout.readline()))
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if worker.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        else:
            worker.kill()
            pytest.fail("the worker outlived its killed parent")
    finally:
        os.close(read)
        os.close(write)
        if parent.poll() is None:
            parent.kill()


PID_AGENT = '''
"""Records which process answered each query."""
import os
from evalpipe import AgentResponse, Message


class PidAgent:
    name = "pid"

    async def run(self, messages, **kwargs):
        with open(os.environ["EVALPIPE_TEST_PID_FILE"], "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        return AgentResponse(messages=[Message("assistant", ["answer"])])


agent = PidAgent()
'''


@pytest.mark.usefixtures("prefect_api")
async def test_the_flow_runs_its_shards_in_worker_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """task_runner {processes: 2} through the flow, shards of 4 calls in chunks of 3: the calls
    are made in two worker processes, not the flow's, every chunk is written in call order, the
    run completes with its gate and summary, and no worker is left."""
    from evalpipe.artifacts import load_run
    from evalpipe.pipeline import arun_suite

    (tmp_path / "pid_agent.py").write_text(textwrap.dedent(PID_AGENT), encoding="utf-8")
    with (tmp_path / "q.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(12):
            fh.write(json.dumps({"id": f"q{i}", "query": f"question {i}"}) + "\n")
    suite = {
        "name": "pids",
        "target": "pid_agent:agent",
        "dataset": "q.jsonl",
        "repetitions": 2,
        "shard_size": 4,
        "concurrency": 4,
        "evaluators": [{"keyword_check": ["answer"]}],
        "output_dir": str(tmp_path / "runs"),
        "gates": ["pass_rate(keyword_check) >= 1"],
        "task_runner": {"processes": 2},
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EVALPIPE_TEST_PID_FILE", str(tmp_path / "pids.log"))
    monkeypatch.setattr(processes, "CHUNK_CALLS", 3)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    outcome = await arun_suite(load_suite(tmp_path / "suite.yaml"))
    assert outcome.state == "Completed", outcome.message
    assert outcome.gate_passed is True
    pids = {int(line) for line in (tmp_path / "pids.log").read_text().split()}
    assert len(pids) == 2
    assert os.getpid() not in pids
    (result,) = load_run(outcome.run_dir)
    assert (result.passed, result.failed, result.errored) == (24, 0, 0)
    runs = pq.read_table(outcome.run_dir / "runs.parquet")
    plan = prepare_suite(load_suite(tmp_path / "suite.yaml"), tmp_path / "runs" / "order")
    assert runs.column("run_id").to_pylist() == [c.key for c in plan.calls]
    left = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not (left & pids)


def _workers() -> set[int]:
    """This process's worker processes still running (zombies are gone already)."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.status() != psutil.STATUS_ZOMBIE and "worker_main" in " ".join(
                child.cmdline()
            ):
                found.add(child.pid)
    return found


def test_workers_started_early_are_taken_by_the_run_and_the_unused_are_stopped(
    spans: tuple[Path, ProcessPool],
) -> None:
    """start_early's processes are the ones the run's pool takes (take_early: as many as it
    needs, the rest stopped); those no pool takes are stopped by stop_early."""
    _, pool = spans
    suite = pool.plan.suite
    assert suite is not None
    before = _workers()
    assert processes.start_early(suite) == 2
    early = _workers() - before
    assert len(early) == 2
    taken = processes.take_early(1)
    try:
        assert len(taken) == 1
        assert {p.process.pid for p in taken} < early
        assert _workers() - before == {p.process.pid for p in taken}
        assert processes.take_early(1) == []
    finally:
        processes.stop_processes(taken, 0.0)
    assert processes.start_early(suite) == 2
    unused = _workers() - before
    assert len(unused) == 2
    processes.stop_early()
    assert not (_workers() & (early | unused))


def test_bad_input_found_while_preparing_stops_the_early_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`evalpipe run` of a processes suite whose target raises at import: exit 2, and the worker
    processes it started before preparing are gone."""
    from evalpipe.cli import main

    (tmp_path / "raises_at_import.py").write_text("raise RuntimeError('no config')\n")
    (tmp_path / "q.jsonl").write_text(json.dumps({"id": "q0", "query": "q"}) + "\n")
    suite = {
        "name": "bad",
        "target": "raises_at_import:agent",
        "dataset": "q.jsonl",
        "evaluators": [{"keyword_check": ["done"]}],
        "output_dir": str(tmp_path / "runs"),
        "task_runner": {"processes": 2},
        "concurrency": 2,
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # a configured API: no embedded server is started (none is reached: preparing fails first)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    for name in ("PREFECT_LOGGING_LEVEL", "PREFECT_SERVER_LOGGING_LEVEL"):
        monkeypatch.setenv(name, os.environ.get(name, "WARNING"))
    started: list[int] = []
    start = processes.start_early

    def spy(s: Any) -> int:
        n = start(s)
        started.extend(p.process.pid for p in processes._early)
        return n

    monkeypatch.setattr(processes, "start_early", spy)
    before = _workers()
    assert main(["run", str(tmp_path / "suite.yaml"), "--no-progress"]) == 2
    assert len(started) == 2
    assert not (_workers() - before)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in started)


HANG_AGENT = '''
"""Never answers."""
import asyncio


class HangAgent:
    name = "hang"

    async def run(self, messages, **kwargs):
        await asyncio.sleep(3600)


agent = HangAgent()
'''


@pytest.mark.usefixtures("prefect_api")
async def test_the_runs_timeout_stops_a_processes_run_and_its_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A processes run whose calls never end, with a timeout of 1 s: the run is incomplete (the
    message says the timeout), and none of its worker processes is left."""
    from evalpipe.pipeline import arun_suite

    (tmp_path / "hang_agent.py").write_text(textwrap.dedent(HANG_AGENT), encoding="utf-8")
    (tmp_path / "q.jsonl").write_text(json.dumps({"id": "q0", "query": "q"}) + "\n")
    suite = {
        "name": "hang",
        "target": "hang_agent:agent",
        "dataset": "q.jsonl",
        "concurrency": 2,
        "timeout": 1,
        "evaluators": [{"keyword_check": ["done"]}],
        "output_dir": str(tmp_path / "runs"),
        "task_runner": {"processes": 2},
    }
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: set[int] = set()
    start = processes.start_early

    def spy(s: Any) -> int:
        n = start(s)
        seen.update(p.process.pid for p in processes._early)
        return n

    monkeypatch.setattr(processes, "start_early", spy)
    monkeypatch.setattr("evalpipe.pipeline.run.start_early", spy)
    before = _workers()
    outcome = await arun_suite(load_suite(tmp_path / "suite.yaml"))
    assert outcome.verdict == "incomplete"
    assert "timeout of 1 s" in (outcome.message or "")
    assert len(seen) == 2
    assert not (_workers() - before)


@pytest.mark.parametrize(
    ("calls", "fields", "size"),
    [
        (1_000_000, {"task_runner": {"processes": 2}}, 2_000),  # at most PROCESS_SHARD_CALLS
        (1_000_000, {"task_runner": "threads"}, 20_000),  # threads: MAX_SHARD_TASKS shards
        (100_000, {"task_runner": {"processes": 2}}, 2_000),  # MAX_SHARD_TASKS shards too
        (1_000, {"task_runner": {"processes": 2}}, 128),  # 4 rounds of a worker's share (32)
        (100_000, {"task_runner": {"processes": 2}, "shard_size": 3_000}, 3_000),  # the suite's
    ],
)
def test_default_process_shards_are_bounded(
    spans: tuple[Path, ProcessPool], calls: int, fields: dict[str, Any], size: int
) -> None:
    """A processes run's default shards hold at most PROCESS_SHARD_CALLS calls (still 4 rounds
    of a worker's share); threads keep their size, and the suite's shard_size wins."""
    from types import SimpleNamespace

    from evalpipe.pipeline.flow import shard_size

    _, pool = spans
    assert pool.plan.suite is not None
    suite = pool.plan.suite.model_copy(update={"concurrency": 64, **fields})
    plan = SimpleNamespace(suite=suite, calls=range(calls))
    assert shard_size(plan) == size  # type: ignore[arg-type]
