"""Benchmark (not a test): stream a large run through local checks into Parquet run artifacts.

N items (one target call each) are built, checked by a LocalEvaluator with three real checks and
written through ``evalpipe.artifacts.RunWriter`` in batches, the way the pipeline does: runs.parquet
gets one row per call with its transcript, items.parquet one row per item, scores.parquet one row per
item and check. Nothing holds the whole run: each batch is dropped once written.

Reported: items per second end to end (build + check + write) and for the writer alone, the peak
RSS of the process (resource.getrusage; the target is < 1 GiB for 100,000 items × 3 checks), file
sizes and row counts, and how long a streamed read of scores.parquet takes.

Usage: python bench/bench_artifacts.py [--items 100000] [--batch 2000] [--out DIR] [--keep]
Writes bench/results/artifacts.json and prints a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evalpipe import (
    EvalItem,
    FunctionCallContent,
    FunctionResultContent,
    LocalEvaluator,
    Message,
    RunUsage,
    TargetRun,
    keyword_check,
    tool_called_check,
    tool_calls_present,
)
from evalpipe.artifacts import RunRecord, RunWriter, iter_batches, read_manifest

HERE = Path(__file__).resolve().parent
CITIES = ("Paris", "London", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Perth")


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (ru_maxrss is KiB on Linux)."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def make_run(index: int) -> TargetRun:
    """One target call with a tool call, its result and an answer; every 50th call failed."""
    city = CITIES[index % len(CITIES)]
    if index % 50 == 49:
        return TargetRun(
            query_index=index % 1000,
            repetition=index // 1000,
            query=f"What's the weather in {city}? (#{index})",
            usage=RunUsage(latency_seconds=0.05),
            error_code="AgentError",
            error_message="TimeoutError: model did not answer",
        )
    return TargetRun(
        query_index=index % 1000,
        repetition=index // 1000,
        query=f"What's the weather in {city}? (#{index})",
        messages=[
            Message(
                "assistant",
                [FunctionCallContent(name="get_weather", arguments={"city": city}, call_id="c1")],
            ),
            Message(
                "tool",
                [
                    FunctionResultContent(
                        call_id="c1", result={"temp_c": index % 35, "sky": "clear"}
                    )
                ],
            ),
            Message("assistant", [f"It is sunny in {city}, {index % 35} °C."]),
        ],
        usage=RunUsage(
            input_tokens=120 + index % 17,
            output_tokens=40 + index % 7,
            total_tokens=160 + index % 24,
            latency_seconds=0.05,
        ),
    )


def make_item(index: int, run: TargetRun) -> EvalItem:
    return EvalItem(
        [Message("user", [run.query]), *run.messages],
        item_id=str(index),
        query_index=run.query_index,
        repetition=run.repetition,
        usage=run.usage,
        error_code=run.error_code,
        error_message=run.error_message,
        metadata={"run_id": f"r{index:08d}", "row_id": f"row{run.query_index}"},
    )


async def stream(out: Path, items: int, batch: int) -> dict[str, Any]:
    evaluator = LocalEvaluator(
        keyword_check("sunny"), tool_called_check("get_weather"), tool_calls_present
    )
    writer_s = 0.0
    started = time.perf_counter()
    with RunWriter(out) as writer:
        for start in range(0, items, batch):
            indices = range(start, min(start + batch, items))
            runs = [make_run(i) for i in indices]
            records = [
                RunRecord.from_target_run(r, run_id=f"r{i:08d}", target="bench:agent")
                for i, r in zip(indices, runs, strict=True)
            ]
            batch_items = [make_item(i, r) for i, r in zip(indices, runs, strict=True)]
            results = await evaluator.evaluate(batch_items, eval_name="bench")
            t0 = time.perf_counter()
            writer.add_runs(records)
            writer.add_results([results])
            writer_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        manifest = writer.finish({"bench": {"items": items, "batch": batch}})
        writer_s += time.perf_counter() - t0
    wall = time.perf_counter() - started
    return {"wall_s": wall, "writer_s": writer_s, "manifest": manifest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument(
        "--out", type=Path, default=None, help="run directory (default: a temp dir)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    args = parser.parse_args()

    out = args.out or Path(tempfile.mkdtemp(prefix="evalpipe-bench-")) / "run"
    baseline = peak_rss_mib()
    measured = asyncio.run(stream(out, args.items, args.batch))
    peak = peak_rss_mib()
    t0 = time.perf_counter()
    scanned = sum(b.num_rows for b in iter_batches(out, "scores", columns=["score", "status"]))
    read_s = time.perf_counter() - t0
    files = read_manifest(out)["files"]
    report = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "items": args.items,
        "checks": 3,
        "batch": args.batch,
        "wall_s": round(measured["wall_s"], 3),
        "items_per_s": round(args.items / measured["wall_s"]),
        "writer_s": round(measured["writer_s"], 3),
        "writer_items_per_s": round(args.items / measured["writer_s"]),
        "peak_rss_mib": round(peak, 1),
        "rss_before_mib": round(baseline, 1),
        "scores_scan_s": round(read_s, 3),
        "scores_rows_scanned": scanned,
        "files": files,
    }
    HERE.joinpath("results").mkdir(exist_ok=True)
    HERE.joinpath("results", "artifacts.json").write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{args.items:,} items × 3 checks in batches of {args.batch:,}: "
        f"{report['wall_s']:.1f} s end to end ({report['items_per_s']:,} items/s), "
        f"writer {report['writer_s']:.1f} s ({report['writer_items_per_s']:,} items/s)"
    )
    print(f"peak RSS {peak:.0f} MiB (after imports: {baseline:.0f} MiB); target < 1024 MiB")
    for name, info in files.items():
        print(f"  {name:<16} {info['rows']:>9,} rows {info['bytes'] / 2**20:>8.1f} MiB")
    print(f"streamed scan of scores.parquet: {read_s:.2f} s for {scanned:,} rows")
    if not args.keep and args.out is None:
        shutil.rmtree(out.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
