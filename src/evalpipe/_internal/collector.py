"""The cyclic garbage collector of the processes `evalpipe run` runs a suite in: its own while the
flow runs, and its process pool's workers (their initializer). Only that command's entry sets it:
evalpipe's library calls leave the caller's collector alone (operations §9).

What is alive when the run starts (the plan, Prefect) is frozen out of every collection. Then one
of two thresholds, both measured at 100,000 instant calls x 3 checks:

- where shards run (the flow's process on threads, a pool's worker): a shard's objects live until
  it is written, few are in cycles, and a young collection walks every one still alive. It waits
  for MAKING more objects alive than freed (on threads: 6.0 s collecting at (50,000, 1, 1), 0.08 s
  so), and the older generations keep CPython's ratios;
- the flow's process when a task runner's workers run the shards (RECEIVING): few objects arrive,
  but a runner's future holds its shard's rows in a reference cycle, so each collection walks
  every generation, or the rows pile up (operations §9).
"""

from __future__ import annotations

import gc

__all__ = ["MAKING", "RECEIVING", "collect_less"]

MAKING = (500_000, 10, 10)
"""``gc.set_threshold`` where shards run (CPython's default: (700, 10, 10))."""

RECEIVING = (50_000, 1, 1)
"""``gc.set_threshold`` of the flow's process that receives shards from a task runner."""


def collect_less(*, receiving: bool = False) -> None:
    """Freeze what is alive now out of every collection and set the threshold above (``receiving``:
    this process receives the shards of a task runner's workers)."""
    gc.freeze()
    gc.set_threshold(*(RECEIVING if receiving else MAKING))
