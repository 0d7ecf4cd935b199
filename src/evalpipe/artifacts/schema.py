"""The Parquet schemas of a run directory and their version, derived from the one declaration of
every column (``evalpipe.artifacts.columns``).

Each column's meaning is its field's metadata, so the writer, the readers and docs/artifacts.md
agree on one definition. Bump ``SCHEMA_VERSION`` whenever a column is added, removed or changes
meaning; readers refuse files written with a newer version.
"""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from evalpipe.artifacts.columns import (
    RUN_NAME,
    SCHEMA_VERSION,
    TABLES,
    RunRecord,
    RunStatus,
    Table,
)

__all__ = [
    "FILES",
    "ITEMS_SCHEMA",
    "MANIFEST_FILE",
    "RUNS_SCHEMA",
    "RUN_NAME",
    "SCHEMAS",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_KEY",
    "SCORES_SCHEMA",
    "SUMMARY_SCHEMA",
    "ArtifactError",
    "RunRecord",
    "RunStatus",
    "SchemaVersionError",
    "arrow_schema",
    "schema_of",
]

SCHEMA_VERSION_KEY = b"evalpipe.schema_version"
"""Key of the schema version in each Parquet file's key-value metadata."""

MANIFEST_FILE = "manifest.json"
"""The manifest's file name; it is written last, so its presence marks a finished run."""


class ArtifactError(Exception):
    """A run directory or one of its files cannot be read (missing, not a run, wrong columns)."""


class SchemaVersionError(ArtifactError):
    """A run directory was written with a schema version this evalpipe does not know."""


_TYPES: dict[str, Any] = {
    "string": pa.string(),
    "int64": pa.int64(),
    "double": pa.float64(),
    "bool": pa.bool_(),
    "timestamp[us, tz=UTC]": pa.timestamp("us", tz="UTC"),
}


@functools.cache
def arrow_schema(table: Table) -> Any:
    """The Arrow schema of a table's declaration: its columns, their descriptions and the
    schema version."""
    return pa.schema(
        [
            pa.field(
                c.name,
                _TYPES[c.kind],
                nullable=c.nullable,
                metadata={b"description": c.doc.encode()},
            )
            for c in table.columns
        ],
        metadata={SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()},
    )


def schema_of(name: str) -> Any:
    """The Arrow schema of table ``name`` as declared now (``TABLES``)."""
    return arrow_schema(TABLES[name])


RUNS_SCHEMA = schema_of("runs")
ITEMS_SCHEMA = schema_of("items")
SCORES_SCHEMA = schema_of("scores")
SUMMARY_SCHEMA = schema_of("summary")

SCHEMAS: dict[str, Any] = {name: schema_of(name) for name in TABLES}
"""Each table's schema by name; the file is ``{name}.parquet``."""

FILES: dict[str, str] = {name: table.file for name, table in TABLES.items()}
"""Each table's file name."""
