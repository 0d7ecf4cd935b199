"""The cyclic garbage collector, held off while evalpipe builds many small acyclic objects.

Building a run's plan (100,000 dataset rows) or reading a run back (300,000 scores) makes objects
that reference counting frees on its own; the cyclic collector meanwhile re-scans the growing
heap again and again (measured: half of ``load_run``'s time, two thirds of a 100k plan's).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["no_cyclic_gc"]


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic collector off inside the block, and back as it was after (nested blocks too)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
