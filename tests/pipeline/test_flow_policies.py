"""The flow's policies: the garbage collector while shards run (off, one young collection between
shards once enough is allocated, cycles still freed, the collector restored afterwards), and the
default shard size."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path

import pytest

from evalpipe.pipeline.flow import MAX_SHARD_TASKS, _ShardCollector, shard_size
from evalpipe.runner.prepare import prepare_suite
from evalpipe.suite import load_suite


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


def test_shards_run_without_the_automatic_collector_and_restore_it() -> None:
    """Inside, the collector is off and the objects alive at the start are frozen; after, it is
    on again and nothing stays frozen."""
    assert gc.isenabled()
    frozen_before = gc.get_freeze_count()
    with _ShardCollector():
        assert not gc.isenabled()
        assert gc.get_freeze_count() > frozen_before
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen_before


def test_a_written_shard_collects_the_cycles_it_left_once_enough_is_allocated() -> None:
    """Below the limit nothing is collected; above it, cyclic garbage is freed and the survivors
    are frozen."""
    with _ShardCollector() as collector:
        collector.YOUNG_LIMIT = 1_000_000_000
        node = _Node()
        ref = weakref.ref(node)
        del node
        collector.shard_written()
        assert ref() is not None  # the cycle is still there: no collection yet
        collector.YOUNG_LIMIT = 0
        kept = [_Node() for _ in range(3)]
        collector.shard_written()
        assert ref() is None
        assert all(gc.is_tracked(k) for k in kept)
        assert not gc.isenabled()


def _plan(tmp_path: Path, rows: int, **fields: object) -> object:
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
    return prepare_suite(load_suite(tmp_path / "suite.json"))


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
    plan = _plan(tmp_path, rows, **fields)
    assert shard_size(plan) == size  # type: ignore[arg-type]
