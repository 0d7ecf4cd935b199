"""Run the ``evalpipe`` command line with phase marks (used by bench_startup.py; not a test).

``python bench/_startup_probe.py MARKS.json ARGS...`` runs ``evalpipe ARGS...`` and, at exit,
writes the wall-clock times (``time.time()``) at which the run asked for the Prefect API, got it,
started its flow, ended its flow and returned from ``run_suite``. It patches nothing in advance:
when ``evalpipe.pipeline.run`` is first imported (lazily, as the command line does), its
``prefect_api`` and ``_flow`` are wrapped, so the import order, and any start-up that overlaps it,
are the command's own.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.abc
import importlib.machinery
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

MARKS: dict[str, float] = {}


def _patch(module: Any) -> None:
    api = module.prefect_api
    flow = module._flow
    run_suite = module.run_suite

    @contextlib.asynccontextmanager
    async def prefect_api(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        MARKS.setdefault("api_asked", time.time())
        async with api(*args, **kwargs) as url:
            MARKS.setdefault("api_ready", time.time())
            yield url

    @functools.wraps(flow)
    async def _flow(*args: Any, **kwargs: Any) -> Any:
        MARKS.setdefault("flow_start", time.time())
        try:
            return await flow(*args, **kwargs)
        finally:
            MARKS.setdefault("flow_end", time.time())

    @functools.wraps(run_suite)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return run_suite(*args, **kwargs)
        finally:
            MARKS.setdefault("run_end", time.time())

    module.prefect_api = prefect_api
    module._flow = _flow
    module.run_suite = run


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "evalpipe.pipeline.run":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def patched(module: Any) -> None:
            exec_module(module)
            _patch(module)

        loader.exec_module = patched  # type: ignore[method-assign]
        return spec


def _write(path: str) -> None:
    MARKS["exit"] = time.time()
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(MARKS, fh)


def main() -> int:
    path, *argv = sys.argv[1:]
    MARKS["probe_start"] = time.time()
    atexit.register(_write, path)
    sys.meta_path.insert(0, _Finder())
    from evalpipe.cli import main as cli

    return cli(argv)


if __name__ == "__main__":
    sys.exit(main())
