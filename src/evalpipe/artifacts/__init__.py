"""Run artifacts on disk: Parquet tables and a manifest per run, written as results stream in.

A run directory holds ``runs.parquet`` (one row per target call), ``items.parquet`` (one row per
evaluated item and agent), ``scores.parquet`` (one row per item, provider and metric),
``summary.parquet`` (aggregates per provider, agent and metric) and ``manifest.json``. See
docs/artifacts.md for every column. ``find_runs`` lists the finished runs under an output directory,
newest first, and ``bless`` / ``baseline_of`` keep a suite's baseline.

The names are imported on first use (``__getattr__``): the package itself loads nothing, so a
worker process that imports only ``evalpipe.artifacts.encoder`` never loads pyarrow.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalpipe.artifacts.history import (
        BASELINE_FILE,
        DamagedRun,
        RunInfo,
        baseline_of,
        bless,
        find_runs,
    )
    from evalpipe.artifacts.reader import (
        iter_batches,
        iter_runs,
        load_run,
        local_file,
        read_manifest,
        read_not_passed,
        read_rows,
        read_runs,
        read_summary,
        read_table,
    )
    from evalpipe.artifacts.schema import (
        FILES,
        ITEMS_SCHEMA,
        MANIFEST_FILE,
        RUNS_SCHEMA,
        SCHEMA_VERSION,
        SCHEMAS,
        SCORES_SCHEMA,
        SUMMARY_SCHEMA,
        ArtifactError,
        RunRecord,
        RunStatus,
        SchemaVersionError,
    )
    from evalpipe.artifacts.writer import RunWriter

_MODULES = ("history", "reader", "schema", "writer")
"""Where the names of ``__all__`` live (each module's ``__all__`` says), imported on first use so
that importing a submodule that needs no pyarrow (``evalpipe.artifacts.encoder``, in a worker
process) does not load it."""


def __getattr__(name: str) -> Any:
    if name in __all__:
        for home in _MODULES:
            module = importlib.import_module(f"{__name__}.{home}")
            if name in module.__all__:
                value = getattr(module, name)
                globals()[name] = value
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "BASELINE_FILE",
    "FILES",
    "ITEMS_SCHEMA",
    "MANIFEST_FILE",
    "RUNS_SCHEMA",
    "SCHEMAS",
    "SCHEMA_VERSION",
    "SCORES_SCHEMA",
    "SUMMARY_SCHEMA",
    "ArtifactError",
    "DamagedRun",
    "RunInfo",
    "RunRecord",
    "RunStatus",
    "RunWriter",
    "SchemaVersionError",
    "baseline_of",
    "bless",
    "find_runs",
    "iter_batches",
    "iter_runs",
    "load_run",
    "local_file",
    "read_manifest",
    "read_not_passed",
    "read_rows",
    "read_runs",
    "read_summary",
    "read_table",
]
