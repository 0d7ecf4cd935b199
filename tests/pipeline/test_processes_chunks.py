"""A worker process's shard in chunks (``ProcessPool(chunk=...)``): each chunk sent back as soon as
it is done, in order; the same files, kept results and tallies as a shard in one piece; a chunk
that raises ends its shard after the chunks before it; a shard with a written chunk is not
retried.

One pool of one worker, started once for the module (a worker process imports evalpipe: ~1 s).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalpipe.artifacts import RunWriter
from evalpipe.artifacts.encoder import EncodedBatch
from evalpipe.pipeline.flow import _write
from evalpipe.pipeline.processes import (
    ProcessPool,
    ShardDone,
    WorkerError,
    _InShardOrder,
    keep_listed,
)
from evalpipe.results import EvalResults
from evalpipe.runner import RunPlan
from evalpipe.tally import CallTally, Counts, merge_results
from parquet_helpers import parquet_table as _table
from parquet_helpers import travel_plan, write_whole_shards

REPO = Path(__file__).resolve().parents[2]
TRAVEL = REPO / "examples" / "travel"
SHARD, CHUNK, ROWS = 12, 5, 7
"""24 calls: shards of 12 calls, chunks of 5 (5+5+2), row groups of 7 rows: chunks end inside
shards and row groups."""


def _agent_plan(root: Path, name: str) -> RunPlan:
    """The demo agent suite (8 rows x 3 repetitions, 5 providers; a deliberate miss) in
    ``root``."""
    return travel_plan(
        root,
        name,
        "agent_suite.yaml",
        "queries.jsonl",
        concurrency=12,
        task_runner={"processes": 1},
    )


def _travel_plan(root: Path, name: str) -> RunPlan:
    """The demo workflow suite (3 agents, 4 providers) in ``root``."""
    return travel_plan(
        root, name, "suite.yaml", "workflow_queries.jsonl", task_runner={"processes": 1}
    )


@pytest.fixture(scope="module")
def chunked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ProcessPool]]:
    """The agent suite's plan in a temporary directory and a pool of one worker for it, whose
    shards run in chunks of CHUNK calls."""
    root = tmp_path_factory.mktemp("chunks")
    cwd = os.getcwd()
    os.chdir(REPO)  # the target is examples.travel.workflow:workflow
    try:
        plan = _agent_plan(root, "chunked")
        pool = ProcessPool(plan, 1, listed=50, chunk=CHUNK)
        asyncio.run(pool.__aenter__())
        try:
            yield root, pool
        finally:
            pool.close()
    finally:
        os.chdir(cwd)


def _kept_texts(kept: list[list[EvalResults]]) -> list[Any]:
    """Every kept result level's fields (items apart) and its items' ids, statuses, texts and
    scores, in order."""
    out: list[Any] = []
    for parts in kept:
        for result in parts:
            for level in result.iter_results():
                out.append(level.model_dump(exclude={"items"}))
                out.extend(
                    (i.item_id, i.status, i.input_text, i.output_text, i.scores)
                    for i in level.items
                )
    return out


def test_a_shard_in_chunks_writes_what_a_shard_in_one_piece_writes(
    chunked: tuple[Path, ProcessPool],
) -> None:
    """Shards of 12 calls in chunks of 5 from a worker: runs, items, scores and summary.parquet,
    row group for row group, the kept results and their kept failure texts, the call tally and
    the verdicts equal those of the same shards in one piece (the flow's threads path); the
    chunks come in order, each with its calls."""
    root, pool = chunked
    os.chdir(REPO)
    whole_plan = _agent_plan(root, "whole")
    kept_a, calls_a, verdicts_a = write_whole_shards(whole_plan, SHARD, ROWS, 12)

    async def run() -> tuple[list[list[EvalResults]], dict[str, Any], list[Any], list[Any]]:
        plan = pool.plan
        writer = RunWriter(plan.run_dir, row_group_size=ROWS)
        kept: list[list[EvalResults]] = [[] for _ in plan.providers]
        texts: dict[tuple[str, str], int] = {}
        calls = CallTally()
        verdicts: list[Any] = []
        order: list[Any] = []
        for index, shard_calls in enumerate(plan.shards(SHARD)):
            passed = failed = errored = 0  # the shard's verdicts: its chunks', summed
            for chunk in await pool.run(pool.job(index, shard_calls, {})):
                order.append((chunk.index, chunk.chunk, chunk.n_calls))
                calls.merge(chunk.calls)
                _write(writer, plan, chunk)
                passed += chunk.verdicts.passed
                failed += chunk.verdicts.failed
                errored += chunk.verdicts.errored
                for p, r in enumerate(chunk.results):
                    keep_listed(r, texts, 50)
                    kept[p].append(r)
            verdicts.append({"passed": passed, "failed": failed, "errored": errored})
        writer.finish({})
        return kept, calls.as_dict(), verdicts, order

    kept_b, calls_b, verdicts_b, order = asyncio.run(run())
    assert order == [(0, 0, 5), (0, 1, 5), (0, 2, 2), (1, 0, 5), (1, 1, 5), (1, 2, 2)]
    for name in ("runs", "items", "scores", "summary"):
        a = _table(whole_plan.run_dir / f"{name}.parquet")
        b = _table(pool.plan.run_dir / f"{name}.parquet")
        assert a == b, (name, str(whole_plan.run_dir), str(pool.plan.run_dir))
    assert _table(pool.plan.run_dir / "runs.parquet")[1] == [7, 7, 7, 3]
    assert len(_table(pool.plan.run_dir / "scores.parquet")[1]) > 4  # 5 providers' rows
    merged_a = [merge_results(parts) for parts in kept_a]
    merged_b = [merge_results(parts) for parts in kept_b]
    assert _kept_texts([[m] for m in merged_a]) == _kept_texts([[m] for m in merged_b])
    assert any(i.input_text for r in merged_b for lv in r.iter_results() for i in lv.items)
    for key in ("latency_p50_s", "latency_p95_s"):
        calls_a.pop(key)
        calls_b.pop(key)
    assert calls_a == calls_b
    assert calls_b["made"] == 24
    assert verdicts_a == verdicts_b


def _journaled(plan: RunPlan) -> set[str]:
    """The keys of the calls the run's journal holds."""
    return {
        json.loads(line)["key"]
        for path in (plan.run_dir / "journal").glob("*.jsonl")
        for line in path.read_text().splitlines()
    }


def test_a_chunk_that_raises_ends_its_shard_after_the_chunks_before_it(
    chunked: tuple[Path, ProcessPool],
) -> None:
    """A shard whose second chunk raises: its first chunk comes back first, then the exception,
    as itself; the first chunk's calls are journaled; the worker takes the next shard."""
    _, pool = chunked
    plan = pool.plan
    calls = plan.calls[:12]  # journaled by the test above, or made here
    bad = pool.job(0, calls, {})
    position, _, repetition, key = bad.calls[7]
    bad.calls[7] = (position, len(bad.rows), repetition, key)  # no such row: IndexError there
    got: list[ShardDone] = []

    async def take(chunks: AsyncGenerator[ShardDone, None]) -> None:
        async for chunk in chunks:
            got.append(chunk)

    async def run() -> list[ShardDone]:
        with pytest.raises(IndexError):
            await take(pool.chunks(bad))
        return await pool.run(pool.job(1, plan.calls[12:13], {}))

    after = asyncio.run(run())
    assert [(c.index, c.chunk, c.n_calls) for c in got] == [(0, 0, 5)]
    assert {c.key for c in calls[:5]} <= _journaled(plan)
    assert [(c.index, c.chunk, c.n_calls) for c in after] == [(1, 0, 1)]
    assert after[0].encoded.runs is not None


def test_workflow_runs_and_batched_providers_run_whole_shards(
    chunked: tuple[Path, ProcessPool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workflow run (items grouped by agent over a shard) and a run with a server-side
    (batched) provider are not cut into chunks: one chunk per shard (``chunk`` 0)."""
    root, pool = chunked
    plan = pool.plan
    assert pool.job(0, plan.calls[:7], {}).chunk == CHUNK
    os.chdir(REPO)
    workflow = ProcessPool(_travel_plan(root, "workflow"), 1, listed=50, chunk=CHUNK)
    assert workflow.job(0, workflow.plan.calls[:7], {}).chunk == 0
    monkeypatch.setattr(type(plan), "batched", lambda self, provider: provider)
    batched = ProcessPool(plan, 1, listed=50, chunk=CHUNK)
    assert batched.job(0, plan.calls[:7], {}).chunk == 0


class _FailingPool:
    """A pool whose shard sends ``sent`` chunks, then raises OSError."""

    def __init__(self, chunk: ShardDone, sent: int) -> None:
        self.chunk, self.sent = chunk, sent

    async def chunks(self, job: Any) -> AsyncGenerator[ShardDone, None]:
        for _ in range(self.sent):
            yield self.chunk
        raise OSError(28, "No space left on device")


def test_an_oserror_after_a_written_chunk_stops_the_run_instead_of_a_retry(
    chunked: tuple[Path, ProcessPool],
) -> None:
    """The shard task: an OSError before any chunk stays an OSError (the task is retried whole);
    after a chunk was delivered it becomes a WorkerError (a stop reason, not retried: the
    chunk would be written twice)."""
    from evalpipe.pipeline.flow import _stop_reason, process_shard_task

    _, pool = chunked
    [chunk] = asyncio.run(pool.run(pool.job(3, pool.plan.calls[13:14], {})))
    delivered: list[ShardDone] = []

    async def deliver(done: ShardDone) -> None:
        delivered.append(done)

    async def run(sent: int) -> None:
        fake: Any = _FailingPool(chunk, sent)
        await process_shard_task.fn(3, fake, None, deliver)

    with pytest.raises(OSError, match="No space"):
        asyncio.run(run(0))
    with pytest.raises(WorkerError, match="after 1 of its chunks") as caught:
        asyncio.run(run(1))
    assert delivered == [chunk]
    assert "run again to resume" in (_stop_reason(caught.value) or "")


def _chunk_of(*results: EvalResults) -> ShardDone:
    """A chunk's answer holding only ``results`` (no rows)."""
    return ShardDone(
        index=0,
        encoded=EncodedBatch(),
        results=list(results),
        calls=CallTally(),
        verdicts=Counts(),
        made=0,
        reused=0,
        items=0,
        n_calls=0,
    )


def test_a_provider_that_raised_in_every_chunk_has_its_error_once_per_shard() -> None:
    """A provider that raised over each chunk gives the shard its text once, as over the whole
    shard; failure texts of items repeat as the whole shard's join repeats them."""
    order = _InShardOrder()
    chunks = [
        _chunk_of(
            EvalResults(provider="judge", status="failed", error="could not reach the judge"),
            EvalResults(provider="Local", error="missing 'Paris'"),
        )
        for _ in range(3)
    ]
    for n, chunk in enumerate(chunks):
        order(chunk, last=n == len(chunks) - 1)
    assert [r.error for r in chunks[0].results] == [None, None]
    assert chunks[-1].results[0].error == "could not reach the judge"
    assert chunks[-1].results[1].error == "; ".join(["missing 'Paris'"] * 3)
