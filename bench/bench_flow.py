"""Benchmark (not a test): the Prefect eval flow against the concurrency floor, and at scale.

1. Throughput: CALLS target calls of an agent that sleeps LATENCY, at a global concurrency C, through
   the whole flow (shards, items, local checks, Parquet, Prefect artifacts). The floor is
   ceil(CALLS / C) * LATENCY; we report the flow's own wall time (from its first task to its
   manifest) divided by the floor, and the fixed start-up (Prefect's ephemeral server, imports)
   separately. MAF's evaluate_agent runs agents one at a time: CALLS * LATENCY at best.
2. Scale: ITEMS calls of an instant agent x 3 local checks, end to end through the flow; peak RSS of
   the process (Parquet is streamed in record batches) and items per second.

Each part runs in its own process (so peak RSS is that part's), against the ephemeral Prefect API
in a temporary PREFECT_HOME unless PREFECT_API_URL is set.

3. Dask: the throughput workload with shards on a Dask LocalCluster (task_runner {dask: ...}); each
   running shard gets concurrency / workers calls at once, so the floor is the same as in 1.

Usage: python bench/bench_flow.py [--calls 3000] [--latency 0.05] [--concurrency 64]
                                  [--items 100000] [--part throughput|scale|dask|all]
                                  [--shard-size N]
Writes bench/results/flow.json and prints the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

AGENT = """
import asyncio
from evalpipe import AgentResponse, FunctionCallContent, FunctionResultContent, Message

LATENCY = {latency}


class BenchAgent:
    name = "bench"

    async def run(self, messages, **kwargs):
        if LATENCY:
            await asyncio.sleep(LATENCY)
        return AgentResponse(messages=[
            Message("assistant", [FunctionCallContent(name="get_weather", arguments={{"city": "Paris"}}, call_id="c1")]),
            Message("tool", [FunctionResultContent(call_id="c1", result={{"temp_c": 22}})]),
            Message("assistant", ["It is sunny in Paris."]),
        ])


agent = BenchAgent()
"""


def _project(
    root: Path,
    rows: int,
    reps: int,
    latency: float,
    concurrency: int,
    task_runner: Any = "threads",
    shard_size: int | None = None,
) -> Path:
    (root / "bench_agent.py").write_text(AGENT.format(latency=latency), encoding="utf-8")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(rows):
            fh.write(
                json.dumps(
                    {
                        "id": f"q{i}",
                        "query": f"What's the weather in Paris? ({i})",
                        "expected_output": "sunny",
                        "expected_tool_calls": [
                            {"name": "get_weather", "arguments": {"city": "Paris"}}
                        ],
                    }
                )
                + "\n"
            )
    suite = {
        "name": "bench",
        "target": "bench_agent:agent",
        "dataset": "queries.jsonl",
        "repetitions": reps,
        "concurrency": concurrency,
        "evaluators": [{"keyword_check": ["sunny"]}, "tool_calls_present", "tool_call_args_match"],
        "output_dir": str(root / "runs"),
        "task_runner": task_runner,
    }
    if shard_size is not None:
        suite["shard_size"] = shard_size
    path = root / "suite.json"
    path.write_text(json.dumps(suite), encoding="utf-8")
    return path


def _child(args: argparse.Namespace) -> dict[str, Any]:
    """Runs inside the measuring subprocess."""
    t0 = time.perf_counter()
    os.chdir(args.root)
    sys.path.insert(0, args.root)
    from evalpipe.pipeline import arun_suite
    from evalpipe.suite import EvalSuite

    suite = EvalSuite.model_validate(json.loads(Path(args.suite).read_text()))
    t_import = time.perf_counter() - t0
    outcome = asyncio.run(arun_suite(suite, resume=False))
    wall = time.perf_counter() - t0
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    timings = manifest["timings"]
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "state": outcome.state,
        "calls": manifest["calls"]["total"],
        "calls_made": manifest["calls"]["made"],
        "shards": manifest["shards"],
        "process_wall_s": wall,
        "import_s": t_import,
        "flow_total_s": timings["total_s"],
        "flow_calls_and_evaluation_s": timings["calls_and_evaluation_s"],
        "peak_rss_mib": rss_kib / 1024,
    }


def _run_part(
    rows: int,
    reps: int,
    latency: float,
    concurrency: int,
    task_runner: Any = "threads",
    shard_size: int | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-") as tmp:
        root = Path(tmp)
        suite = _project(root, rows, reps, latency, concurrency, task_runner, shard_size)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([tmp, env.get("PYTHONPATH", "")])  # Dask workers
        env.setdefault("PREFECT_HOME", str(root / "prefect-home"))
        env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        env.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
        env.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
        env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--root", tmp, "--suite", str(suite)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise SystemExit(f"bench child failed:\n{out.stderr[-4000:]}")
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--part", choices=["throughput", "scale", "dask", "all"], default="all")
    parser.add_argument(
        "--shard-size", type=int, default=None, help="the suite's shard_size (default: the flow's)"
    )
    parser.add_argument(
        "--dask-workers", type=int, default=2, help="LocalCluster processes for --part dask"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--suite", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args)))
        return

    report: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    if args.part in ("throughput", "all"):
        reps = 3
        rows = math.ceil(args.calls / reps)
        calls = rows * reps
        r = _run_part(rows, reps, args.latency, args.concurrency, shard_size=args.shard_size)
        floor = math.ceil(calls / args.concurrency) * args.latency
        r.update(
            {
                "latency_s": args.latency,
                "concurrency": args.concurrency,
                "floor_s": floor,
                "ratio_flow_work_to_floor": r["flow_calls_and_evaluation_s"] / floor,
                "ratio_flow_total_to_floor": r["flow_total_s"] / floor,
                "fixed_startup_s": r["process_wall_s"] - r["flow_total_s"],
                "maf_serial_floor_s": calls * args.latency,
            }
        )
        report["throughput"] = r
        print(
            f"throughput: {calls} calls x {args.latency * 1000:.0f} ms at c={args.concurrency}: "
            f"flow work {r['flow_calls_and_evaluation_s']:.2f} s, flow total {r['flow_total_s']:.2f} s"
            f" vs floor {floor:.2f} s -> {r['ratio_flow_work_to_floor']:.2f}x "
            f"(total {r['ratio_flow_total_to_floor']:.2f}x); fixed start-up "
            f"{r['fixed_startup_s']:.1f} s; {r['shards']} shards; MAF serial >= "
            f"{r['maf_serial_floor_s']:.0f} s"
        )
    if args.part in ("scale", "all"):
        r = _run_part(args.items, 1, 0.0, args.concurrency)
        r["items_per_s"] = r["calls"] / r["flow_total_s"]
        report["scale"] = r
        print(
            f"scale: {r['calls']} items x 3 checks: flow {r['flow_total_s']:.1f} s "
            f"({r['items_per_s']:.0f} items/s), peak RSS {r['peak_rss_mib']:.0f} MiB, "
            f"{r['shards']} shards"
        )
    if args.part in ("dask", "all"):
        reps = 3
        rows = math.ceil(args.calls / reps)
        calls = rows * reps
        workers = args.dask_workers
        runner = {"dask": {"n_workers": workers, "threads_per_worker": 1, "processes": True}}
        r = _run_part(rows, reps, args.latency, max(1, args.concurrency // workers), runner)
        floor = math.ceil(calls / args.concurrency) * args.latency
        r.update(
            {
                "workers": workers,
                "floor_s": floor,
                "ratio_flow_work_to_floor": r["flow_calls_and_evaluation_s"] / floor,
                "ratio_flow_total_to_floor": r["flow_total_s"] / floor,
            }
        )
        report["throughput_dask"] = r
        print(
            f"dask ({workers} workers): {calls} calls x {args.latency * 1000:.0f} ms at "
            f"c={args.concurrency}: flow work {r['flow_calls_and_evaluation_s']:.2f} s, total "
            f"{r['flow_total_s']:.2f} s (incl. cluster start) vs floor {floor:.2f} s -> "
            f"{r['ratio_flow_work_to_floor']:.2f}x"
        )
    out = HERE / "results" / "flow.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
