"""Run artifacts on disk: Parquet tables and a manifest per run, written as results stream in.

A run directory holds ``runs.parquet`` (one row per target call), ``items.parquet`` (one row per
evaluated item and agent), ``scores.parquet`` (one row per item, provider and metric),
``summary.parquet`` (aggregates per provider, agent and metric) and ``manifest.json``. See
docs/artifacts.md for every column. ``find_runs`` lists the finished runs under an output directory,
newest first, and ``bless`` / ``baseline_of`` keep a suite's baseline.
"""

from evalpipe.artifacts.history import (
    BASELINE_FILE,
    RunInfo,
    baseline_of,
    bless,
    find_runs,
)
from evalpipe.artifacts.reader import (
    iter_batches,
    iter_runs,
    load_run,
    read_item_rows,
    read_manifest,
    read_not_passed,
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
    "read_item_rows",
    "read_manifest",
    "read_not_passed",
    "read_runs",
    "read_summary",
    "read_table",
]
