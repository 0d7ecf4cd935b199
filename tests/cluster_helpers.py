"""A real Dask cluster for the tests and the benchmarks: a scheduler and two ``dask worker``
processes on 127.0.0.1, each worker in its own working directory as on separate machines."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def dask_cluster(
    root: Path,
    env: dict[str, str],
    *,
    nthreads: int = 1,
    workers: int = 2,
    preload: tuple[str, ...] = ("evalpipe.pipeline.dask_worker",),
) -> Iterator[tuple[str, list[int]]]:
    """The scheduler's address and the pids of the scheduler and workers, all started with
    ``env`` (so the workers import what its PYTHONPATH holds) and the workers with ``--preload``
    of each module in ``preload`` (by default evalpipe's, as docs/operations.md shows); waits at
    most 60 s for the scheduler and 120 s for the workers, and stops them all at the end."""
    from distributed import Client

    dask_cli = str(Path(sys.executable).with_name("dask"))
    scheduler_file = root / "scheduler.json"
    quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    started = [
        subprocess.Popen(
            [
                *(dask_cli, "scheduler", "--host", "127.0.0.1", "--port", "0"),
                *("--no-dashboard", "--scheduler-file", str(scheduler_file)),
            ],
            cwd=root,
            **quiet,  # type: ignore[call-overload]
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists():
            if time.monotonic() > deadline or started[0].poll() is not None:
                raise RuntimeError("the Dask scheduler did not start within 60 s")
            time.sleep(0.1)
        for i in range(workers):
            own = root / f"worker-{i}"
            own.mkdir()
            started.append(
                subprocess.Popen(
                    [
                        *(dask_cli, "worker", "--scheduler-file", str(scheduler_file)),
                        *("--nthreads", str(nthreads), "--host", "127.0.0.1", "--no-dashboard"),
                        *("--local-directory", str(own), "--name", f"worker-{i}"),
                        *(arg for module in preload for arg in ("--preload", module)),
                    ],
                    cwd=own,
                    **quiet,  # type: ignore[call-overload]
                )
            )
        with Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(workers, timeout=120)
            address = str(client.scheduler.address)
        yield address, [p.pid for p in started]
    finally:
        for process in reversed(started):
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)
