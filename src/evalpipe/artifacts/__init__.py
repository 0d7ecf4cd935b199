"""Run artifacts on disk: Parquet tables and a manifest per run, written as results stream in.

A run directory holds ``runs.parquet`` (one row per target call), ``items.parquet`` (one row per
evaluated item and agent), ``scores.parquet`` (one row per item, provider and metric),
``summary.parquet`` (aggregates per provider, agent and metric) and ``manifest.json``. See
docs/artifacts.md for every column.
"""

from evalpipe.artifacts.reader import (
    iter_batches,
    iter_runs,
    load_run,
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
    "FILES",
    "ITEMS_SCHEMA",
    "MANIFEST_FILE",
    "RUNS_SCHEMA",
    "SCHEMAS",
    "SCHEMA_VERSION",
    "SCORES_SCHEMA",
    "SUMMARY_SCHEMA",
    "ArtifactError",
    "RunRecord",
    "RunStatus",
    "RunWriter",
    "SchemaVersionError",
    "iter_batches",
    "iter_runs",
    "load_run",
    "read_manifest",
    "read_not_passed",
    "read_runs",
    "read_summary",
    "read_table",
]
