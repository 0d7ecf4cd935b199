"""Benchmark (not a test): the same ``evalpipe run`` on every task runner.

Runners: ``threads`` (the default: shards in the flow's event loop), ``processes`` (Prefect's
``ProcessPoolTaskRunner``, one worker per CPU), ``dask1`` / ``dask2`` (a Dask LocalCluster of one or
two single-threaded worker processes, started by the run) and ``cluster`` (a Dask scheduler and two
``dask worker`` processes started here, each in its own directory as on separate machines; the
suite names its address). Workloads, through ``evalpipe run`` against the embedded Prefect server
(bench_scale's harness: wall time, the process tree's peak RSS with the kept server and, for
``cluster``, the scheduler and workers):

- ``instant``: ITEMS calls of an instant agent x 3 local checks (bench_scale's workload);
- ``cpu``: ITEMS calls of an agent that burns 2 ms of CPU each, 3 checks; its floor on a machine of
  C cores is ITEMS x 2 ms / C (the CPU floor), reported as a ratio beside the flow's time.

Each figure is the median of ``--repeat`` runs; runners alternate inside each repetition so load
drifts hit them alike.

Usage: python bench/bench_runners.py [--workload instant|cpu] [--items N] [--repeat 3]
                                     [--runners threads,processes,dask1,dask2,cluster]
                                     [--src DIR]

Each run also reports the CPU seconds of its whole tree (the CLI and every child it waited for,
the kept Prefect server, the cluster's scheduler and workers) and the resident set of each part at
the tree's peak: on a shared machine these move far less with the load than the wall times.
Writes bench/results/runners-<workload>.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_flow import AGENT, _project  # noqa: E402
from bench_scale import _cli_run, _env, _warm  # noqa: E402

from cluster_helpers import dask_cluster as start_dask_cluster  # noqa: E402

CPU_MS = 2.0
CPU_AGENT = f"""
import time
from evalpipe import AgentResponse, FunctionCallContent, FunctionResultContent, Message


class BurnAgent:
    name = "bench"

    async def run(self, messages, **kwargs):
        end = time.process_time() + {CPU_MS / 1000}
        while time.process_time() < end:
            pass
        return AgentResponse(messages=[
            Message("assistant", [FunctionCallContent(name="get_weather", arguments={{"city": "Paris"}}, call_id="c1")]),
            Message("tool", [FunctionResultContent(call_id="c1", result={{"temp_c": 22}})]),
            Message("assistant", ["It is sunny in Paris."]),
        ])


agent = BurnAgent()
"""

RUNNERS: dict[str, Any] = {
    "threads": "threads",
    "processes": "processes",
    "dask1": {"dask": {"n_workers": 1, "threads_per_worker": 1}},
    "dask2": {"dask": {"n_workers": 2, "threads_per_worker": 1}},
}


def _agent_source(workload: str) -> str:
    return CPU_AGENT if workload == "cpu" else AGENT.format(latency=0.0)


@contextmanager
def dask_cluster(work: Path, workload: str, env: dict[str, str]) -> Iterator[tuple[str, list[int]]]:
    """tests/cluster_helpers' cluster (a scheduler, two single-threaded workers in their own
    directories), its workers importing the bench agent from a directory of their own."""
    root = work / "cluster"
    root.mkdir()
    (root / "bench_agent.py").write_text(_agent_source(workload), encoding="utf-8")
    env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)}
    with start_dask_cluster(root, env, nthreads=1) as cluster:
        yield cluster


def _one(
    work: Path, workload: str, items: int, runner: Any, env: dict[str, str], extra: list[int] | None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-runners-", dir=work) as tmp:
        root = Path(tmp)
        suite = _project(root, items, 1, 0.0, 64, runner)
        (root / "bench_agent.py").write_text(_agent_source(workload), encoding="utf-8")
        run = _cli_run(root, suite, env, extra=extra)
        manifest = json.loads((Path(run["run_dir"]) / "manifest.json").read_text())
        run["calls_and_evaluation_s"] = manifest["timings"]["calls_and_evaluation_s"]
        run["summary"] = (Path(run["run_dir"]) / "summary.parquet").stat().st_size
        del run["stderr"]
        return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=["instant", "cpu"], default="instant")
    parser.add_argument("--items", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runners", default="threads,processes,dask2,cluster")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--src", default=None, help="run this checkout's evalpipe (PYTHONPATH)")
    args = parser.parse_args()
    items = args.items or (100_000 if args.workload == "instant" else 20_000)
    runners = [r for r in args.runners.split(",") if r]
    work = Path(tempfile.mkdtemp(prefix="evalpipe-bench-runners-"))
    home = work / "prefect-home"
    env = _env(args.src, home)
    _warm(home, args.src)
    results: dict[str, list[dict[str, Any]]] = {r: [] for r in runners}
    try:
        _measure(args, items, runners, work, env, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the kept server stops when its home goes
    _report(args, items, results)


def _measure(
    args: argparse.Namespace,
    items: int,
    runners: list[str],
    work: Path,
    env: dict[str, str],
    results: dict[str, list[dict[str, Any]]],
) -> None:
    with dask_cluster(work, args.workload, env) if "cluster" in runners else _nothing() as cluster:
        for i in range(args.repeat):
            for name in runners:
                if name == "cluster":
                    assert cluster is not None
                    runner, extra = {"dask": {"address": cluster[0]}}, cluster[1]
                else:
                    runner, extra = RUNNERS[name], None
                r = _one(work, args.workload, items, runner, env, extra)
                results[name].append(r)
                print(
                    f"[{i + 1}/{args.repeat}] {name:9} total {r['total_s']:6.1f} s, calls and "
                    f"evaluation {r['calls_and_evaluation_s']:6.1f} s, CPU {r['tree_cpu_s']:5.1f} s "
                    f"(CLI and children {r['cpu_s']:.1f}, server {r['server_cpu_s']:.1f}, cluster "
                    f"{r['extra_cpu_s']:.1f}), peak {r['peak_rss_with_server_mib']:5.0f} MiB "
                    f"{r['peak_parts_mib']}, load {r['load']:.2f}",
                    flush=True,
                )


def _report(args: argparse.Namespace, items: int, results: dict[str, list[dict[str, Any]]]) -> None:
    cores = os.cpu_count() or 1
    floor = items * CPU_MS / 1000 / cores if args.workload == "cpu" else None
    table = {}
    print(
        f"\n{args.workload}: {items:,} calls x 3 checks, medians of {args.repeat}"
        + (f"; CPU floor {floor:.1f} s on {cores} cores" if floor else "")
    )
    for name, runs in results.items():
        med = {
            k: statistics.median(r[k] for r in runs)
            for k in (
                "total_s",
                "calls_and_evaluation_s",
                "tree_cpu_s",
                "peak_rss_with_server_mib",
                "load",
            )
        }
        table[name] = {"median": med, "runs": runs}
        ratio = f", {med['calls_and_evaluation_s'] / floor:.2f}x the CPU floor" if floor else ""
        print(
            f"  {name:9} total {med['total_s']:6.1f} s, calls and evaluation "
            f"{med['calls_and_evaluation_s']:6.1f} s{ratio}, CPU {med['tree_cpu_s']:5.1f} s, peak "
            f"{med['peak_rss_with_server_mib']:5.0f} MiB (load {med['load']:.1f})"
        )
    out = args.out or HERE / "results" / f"runners-{args.workload}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "workload": args.workload,
                "items": items,
                "cores": cores,
                "cpu_floor_s": floor,
                "runners": table,
            },
            indent=2,
        )
    )
    print(f"written {out}")


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    main()
