"""The flow's policies: the default shard size, in the flow's process and on a task runner's
workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpipe.pipeline.flow import MAX_SHARD_TASKS, WORKER_SHARD_CALLS, shard_size, share_of
from evalpipe.runner import RunPlan
from evalpipe.runner.prepare import prepare_suite
from evalpipe.suite import EvalSuite, load_suite


def _plan(tmp_path: Path, rows: int, **fields: object) -> tuple[RunPlan, EvalSuite]:
    (tmp_path / "rows.jsonl").write_text(
        "".join(
            json.dumps({"id": f"r{i}", "query": f"Weather in Paris? {i}"}) + "\n"
            for i in range(rows)
        ),
        encoding="utf-8",
    )
    suite = {
        "name": "s",
        "target": "evalpipe.targets.demo:travel_agent",
        "dataset": "rows.jsonl",
        "evaluators": [{"keyword_check": ["Paris"]}],
        "output_dir": str(tmp_path / "runs"),
        **fields,
    }
    (tmp_path / "suite.json").write_text(json.dumps(suite), encoding="utf-8")
    suite = load_suite(tmp_path / "suite.json")
    return prepare_suite(suite), suite


@pytest.mark.parametrize(
    ("rows", "fields", "size"),
    [
        (1000, {"concurrency": 64}, 256),  # four rounds of the concurrency, not 32 shards of 32
        (1000, {"concurrency": 4}, 32),  # at least MIN_SHARD_CALLS
        (15, {"concurrency": 64}, 256),  # a small suite: one shard
        (30_000, {"concurrency": 64}, 30_000 // MAX_SHARD_TASKS),  # at most MAX_SHARD_TASKS shards
        (1000, {"concurrency": 64, "shard_size": 10}, 10),  # the suite's own size wins
    ],
)
def test_default_shards_hold_several_rounds_of_the_concurrency(
    tmp_path: Path, rows: int, fields: dict[str, object], size: int
) -> None:
    """Shards hold at least 4 rounds of the suite's concurrency and MIN_SHARD_CALLS calls, and
    there are at most MAX_SHARD_TASKS of them, unless the suite sets shard_size."""
    plan, suite = _plan(tmp_path, rows, **fields)
    assert shard_size(plan, suite, None) == size


@pytest.mark.parametrize(
    ("rows", "slots", "size"),
    [
        (1000, 2, 128),  # four rounds of each worker's share (32 of the 64)
        (100_000, 2, WORKER_SHARD_CALLS),  # a worker never holds more than WORKER_SHARD_CALLS
        (1000, 64, 32),  # a share of 1: MIN_SHARD_CALLS
        (20_000, 2, WORKER_SHARD_CALLS),  # SHARDS_PER_SLOT a slot would be 2,500: 10 of 2,000
        (20_000, 1, WORKER_SHARD_CALLS),  # one slot: as many task runs (10), not 4 of 5,000
        (6_000, 2, 750),  # 4 shards a slot (8 task runs), not 50 of 120
        (20_000, 64, 313),  # at least one shard a slot, beyond MAX_SHARD_TASKS
    ],
)
def test_worker_shards_hold_rounds_of_their_share_and_stay_bounded(
    tmp_path: Path, rows: int, slots: int, size: int
) -> None:
    """On a task runner a shard holds SHARD_ROUNDS rounds of its share of the concurrency (the
    shares of the shards running at once sum to at most the concurrency), at most
    WORKER_SHARD_CALLS calls, and otherwise SHARDS_PER_SLOT shards a slot (every shard is a task
    run, which costs a worker more than the flow's process), at least one a slot."""
    plan, suite = _plan(tmp_path, rows, concurrency=64)
    assert shard_size(plan, suite, slots) == size
    assert share_of(64, slots) * slots <= 64
