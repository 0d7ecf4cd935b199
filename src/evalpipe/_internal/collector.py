"""The cyclic garbage collector of the processes `evalpipe run` runs a suite in: its own while the
flow runs, and its process pool's workers (their initializer). Only that command's entry sets it:
evalpipe's library calls leave the caller's collector alone (operations §9)."""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "collect_less"]

YOUNG_THRESHOLD = 50_000
"""How many new container objects start a collection (CPython's default: 700)."""


def collect_less() -> None:
    """Freeze what is alive now out of every collection; a collection then waits for
    YOUNG_THRESHOLD new objects and walks every generation (they hold only what came since)."""
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 1, 1)
