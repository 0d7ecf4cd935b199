"""A Dask worker preload: ``dask worker ADDRESS --preload evalpipe.pipeline.dask_worker`` gives a
cluster's worker the cyclic-collector setting of `evalpipe run`'s process pool workers (what it
has imported frozen, young collections rare: operations §9). A LocalCluster that `evalpipe run`
starts gets it without asking; a run of a library call or a deployment leaves workers as they are.

Imports neither Prefect nor Dask: Dask imports it in the worker before the worker starts.
"""

from __future__ import annotations

from typing import Any

from evalpipe._internal.collector import collect_less

__all__ = ["dask_setup"]


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, run once in the worker process as it starts."""
    collect_less()
