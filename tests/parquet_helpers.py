"""Test helpers: a run's Parquet files as comparable values (what may differ between two runs of
the same calls dropped), the demo suites' plans, and a plan's shards written as the flow's
threads path writes them."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from evalpipe.artifacts import RunWriter
from evalpipe.pipeline.flow import _strip, _write
from evalpipe.results import EvalResults
from evalpipe.runner import RunPlan, RunState, run_shard
from evalpipe.runner.prepare import prepare_suite
from evalpipe.suite import load_suite
from evalpipe.tally import CallTally, call_verdicts

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


def write_whole_shards(
    plan: RunPlan, size: int, rows: int, concurrency: int
) -> tuple[list[list[EvalResults]], dict[str, Any], list[Any]]:
    """The plan's shards of ``size`` calls in one piece each, written in order as the flow's
    threads path writes them (row groups of ``rows``): the kept results, the call tally and each
    shard's verdicts."""

    async def run() -> tuple[list[list[EvalResults]], dict[str, Any], list[Any]]:
        state = RunState.open(plan, lock=False)
        writer = RunWriter(plan.run_dir, row_group_size=rows)
        kept: list[list[EvalResults]] = [[] for _ in plan.providers]
        texts: dict[tuple[str, str], int] = {}
        calls = CallTally()
        verdicts = []
        for shard_calls in plan.shards(size):
            shard = await run_shard(
                plan,
                state,
                shard_calls,
                semaphore=asyncio.Semaphore(concurrency),
                workers=concurrency,
            )
            for o in shard.outcomes:
                calls.add(o.source, o.run)
            _write(writer, plan, shard)
            verdicts.append(call_verdicts(shard.results).as_dict())
            for p, r in enumerate(shard.results):
                _strip(r, texts)
                kept[p].append(r)
        writer.finish({})
        state.close()
        return kept, calls.as_dict(), verdicts

    return asyncio.run(run())


def travel_plan(root: Path, name: str, suite_file: str, data_file: str, **changes: Any) -> RunPlan:
    """The plan of one of examples/travel's suites (``suite_file``, reading ``data_file``),
    copied to ``root`` with ``changes`` to its fields and its runs under ``root / "runs"``."""
    travel = Path(__file__).resolve().parents[1] / "examples" / "travel"
    shutil.copy(travel / data_file, root / data_file)
    data = yaml.safe_load((travel / suite_file).read_text(encoding="utf-8"))
    data.update(output_dir=str(root / "runs"), **changes)
    path = root / f"{Path(suite_file).stem}.copy.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return prepare_suite(load_suite(path), root / "runs" / name)
