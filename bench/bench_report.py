"""Benchmark (not a test): the HTML report of a finished run (``write_report``), target <= 2 s
for a 100,000-item run (issue 35).

Each trial is a fresh process (what the flow's report child and ``evalpipe report`` pay): the
imports, then ``write_report`` once (``cold``: the first read of the run's files in that
process) and ``--repeat`` times more (``warm``). Wall time, the process's CPU time and its peak
RSS are reported: the machine may be shared, so CPU time is the figure to compare. ``--src``
names other checkouts' ``src`` directories to measure in the same sitting, trial by trial in
turn (``--src /work/main/src`` for main).

Usage: python bench/bench_report.py RUN_DIR [--trials 3] [--repeat 2] [--src DIR ...]
(RUN_DIR: ``bench_scale.py --part cli --repeat 1 --keep-run DIR`` or ``bench_artifacts.py --out
DIR --keep``); ``--flow-env`` runs it as the flow's report child does. Writes
bench/results/report.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TARGET_S = 2.0

CHILD = """
import json, resource, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from evalpipe.report.html import write_report
imports = time.perf_counter() - t0
runs = []
for _ in range(1 + int(sys.argv[3])):
    t1, c1 = time.perf_counter(), time.process_time()
    write_report(sys.argv[1], sys.argv[2])
    runs.append((time.perf_counter() - t1, time.process_time() - c1))
    if len(runs) == 1:
        cold_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({
    "import_s": imports,
    "cold_s": runs[0][0], "cold_cpu_s": runs[0][1],
    "warm_s": min(r[0] for r in runs[1:]) if runs[1:] else None,
    "warm_cpu_s": min(r[1] for r in runs[1:]) if runs[1:] else None,
    "cold_peak_rss_mib": cold_peak,
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "bytes": len(open(sys.argv[2], "rb").read()),
}))
"""


FLOW_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_ARENA_MAX": "1"}
"""What the flow's report child runs with (``pipeline.flow._report_in_child``)."""


def _trial(run: Path, src: str | None, repeat: int, out: Path, flow_env: bool) -> dict[str, Any]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    if flow_env:
        env.update(FLOW_ENV)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(run), str(out), str(repeat)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["load"] = os.getloadavg()[0]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--trials", type=int, default=3, help="fresh processes per checkout")
    parser.add_argument("--repeat", type=int, default=2, help="warm reports in each process")
    parser.add_argument(
        "--src", action="append", default=[], help="another checkout's src (default: installed)"
    )
    parser.add_argument(
        "--flow-env",
        action="store_true",
        help="run as the flow's report child does (the system allocator for Arrow, one malloc "
        "arena), as `evalpipe run` writes the report of a run of 10,000 calls or more",
    )
    args = parser.parse_args()
    sources = args.src or [os.environ.get("PYTHONPATH") or ""]
    trials: dict[str, list[dict[str, Any]]] = {src: [] for src in sources}
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-report-") as tmp:
        for _ in range(args.trials):
            for number, src in enumerate(sources):
                out = Path(tmp) / f"report-{number}.html"
                trials[src].append(
                    _trial(args.run.resolve(), src or None, args.repeat, out, args.flow_env)
                )
    keys = (
        "import_s",
        "cold_s",
        "cold_cpu_s",
        "cold_peak_rss_mib",
        "warm_s",
        "warm_cpu_s",
        "peak_rss_mib",
        "load",
    )
    medians = {
        src: {k: statistics.median(t[k] for t in runs if t[k] is not None) for k in keys}
        for src, runs in trials.items()
    }
    HERE.joinpath("results").mkdir(exist_ok=True)
    HERE.joinpath("results", "report.json").write_text(
        json.dumps({"run": str(args.run), "trials": trials, "median": medians}, indent=2) + "\n"
    )
    print(
        f"write_report of {args.run}, median of {args.trials} fresh processes; target {TARGET_S} s"
    )
    print("peak MiB: the process's peak RSS after the first report, then after them all")
    print(
        f"{'src':<32} {'import s':>8} {'cold s':>7} {'CPU s':>6} {'peak MiB':>8} "
        f"{'warm s':>7} {'CPU s':>6} {'peak MiB':>8} {'load':>5}"
    )
    for src, m in medians.items():
        print(
            f"{(src or 'installed')[-32:]:<32} {m['import_s']:>8.2f} {m['cold_s']:>7.2f} "
            f"{m['cold_cpu_s']:>6.2f} {m['cold_peak_rss_mib']:>8.0f} {m['warm_s']:>7.2f} "
            f"{m['warm_cpu_s']:>6.2f} {m['peak_rss_mib']:>8.0f} {m['load']:>5.1f}"
        )


if __name__ == "__main__":
    main()
