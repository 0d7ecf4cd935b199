"""Test helpers: a run's Parquet files as comparable values (what may differ between two runs of
the same calls dropped)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

VARYING = {
    "run_name",
    "started_at",
    "ended_at",
    "latency_s",
    "latency_seconds",
    "run_started_at",
    "run_ended_at",
}
"""Columns that legitimately differ between two runs of the same calls (times, run names)."""
STAMPS = {"started_at", "ended_at", "latency_seconds"}
"""A transcript's keys that differ between two runs of the same calls."""


def transcript_value(text: str) -> Any:
    """A transcript's JSON without its times."""

    def scrub(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items() if k not in STAMPS}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    return scrub(json.loads(text))


def parquet_table(path: Path) -> tuple[dict[str, list[Any]], list[int]]:
    """A Parquet file's columns (the varying ones dropped, transcripts without their times) and
    its row groups' sizes."""
    meta = pq.ParquetFile(path).metadata
    groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    table = pq.read_table(path)
    columns = {
        name: table.column(name).to_pylist() for name in table.column_names if name not in VARYING
    }
    if "transcript" in columns:
        columns["transcript"] = [transcript_value(t) for t in columns["transcript"]]
    return columns, groups


def run_tables(run_dir: Path) -> dict[str, dict[str, list[Any]]]:
    """Every Parquet file of a run directory as comparable columns (``parquet_table``), by name."""
    return {p.name: parquet_table(p)[0] for p in sorted(run_dir.glob("*.parquet"))}
