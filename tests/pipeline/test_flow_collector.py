"""The flow's garbage collector policy while shards run: off, one young collection between shards
once enough is allocated (cycles are still freed), and the collector restored afterwards."""

from __future__ import annotations

import gc
import weakref

from evalpipe.pipeline.flow import _ShardCollector


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
