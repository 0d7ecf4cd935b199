"""What ``evalpipe run`` does before the command line's own imports (~1 s): Prefect's environment
defaults, and the start of the embedded Prefect server, so that the server (a process of its own,
5-7 s to start on a new PREFECT_HOME) starts while this process imports the runner, Prefect and
the suite. Imports nothing heavy: ``evalpipe.pipeline.server`` imports neither Prefect nor httpx
until it is used."""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["drop_early_server", "quiet_prefect", "start_server_early"]


def quiet_prefect() -> None:
    """Prefect's own console logs would tear the progress bar; keep warnings and errors only."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # The ephemeral server drops events still in flight when the process exits and logs each
    # drop as a traceback; the run's Parquet files are the record, so keep its console quiet.
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")


def start_server_early(argv: Sequence[str]) -> bool:
    """For ``evalpipe run SUITE`` (not ``--help``): :func:`quiet_prefect`, then the embedded server
    started now when the run is sure to use it (``evalpipe.pipeline.server.start_early`` decides:
    no PREFECT_API_URL or other Prefect setting but PREFECT_HOME, no server of this home running).
    Whether it started one. A run that then finds its suite invalid stops it
    (:func:`drop_early_server`)."""
    if not argv or argv[0] != "run" or any(a in ("-h", "--help") for a in argv[1:]):
        return False
    quiet_prefect()
    from evalpipe.pipeline.server import start_early  # lazy: only to run (no Prefect)

    return start_early()


def drop_early_server() -> None:
    """The run will not start after all (its suite is invalid): stop the server
    :func:`start_server_early` started, unless another run uses it already."""
    from evalpipe.pipeline.server import drop_early  # lazy: only to run (no Prefect)

    drop_early()
