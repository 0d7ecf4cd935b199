"""The cyclic garbage collector of the processes `evalpipe run` starts a run in: its own (while
the flow runs) and its process pool's workers (for their life). Only the command's entry sets it
(``evalpipe.cli.run``): evalpipe's library calls leave the caller's collector alone."""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "collect_less"]

YOUNG_THRESHOLD = 50_000
"""How many new container objects start a collection (CPython's default: 700)."""


def collect_less() -> None:
    """Freeze what is alive now out of every collection, and make a collection wait for
    YOUNG_THRESHOLD new objects and walk every generation (after the freeze they hold only what
    the process made since).

    A process-pool worker's initializer (``task_runner: processes``): what it has imported by then
    (Prefect) is frozen, and its shards' objects (every call's transcript, items and rows, kept
    until the shard is sent back) no longer set off a walk of the whole heap every ~150,000 of
    them. Measured with 20,000 instant calls x 3 checks on two workers (loaded machine): a
    worker's CPU 6.9 s, 2.1 s of it collecting (15 full collections), against 4.7-4.9 s.
    """
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 1, 1)
