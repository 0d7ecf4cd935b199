"""Benchmark (not a test): the fixed cost of `evalpipe run` on the demo suite (15 calls), end to end.

1. warm: the PREFECT_HOME's embedded server already runs (a first, unmeasured run started it).
2. fresh: a new, empty PREFECT_HOME per run (the migrated database template of this machine is
   used, as it is for a user's second home; ``--no-template`` measures the machine's first home,
   which migrates).
3. in-process: the same 15 calls through ``evaluate_workflow`` in a new Python process (no Prefect).

Each figure is the median of ``--repeat`` runs (3) of the real ``evalpipe`` command, timed from
before its process starts to after it ends, beside the targets (5 s / 10 s) and main's numbers
(5.38 s / 12.95 s / 2.1 s on a quiet machine, with the kept server; 15.0 s / 27.5 s before it,
issue 20). ``--baseline TREE`` also measures a checkout of main's code (``TREE/src`` on
PYTHONPATH; ``/work/main`` say) the same way, its runs alternating with this tree's, and prints
each figure of this tree against it. Each figure also gives the median CPU time of the command
(user and system, with the children it waited for; the kept server's is not counted): on a loaded
machine it moves less than the wall time. Servers this script starts are stopped at its end.
Python writes bytecode as a user's would (PYTHONDONTWRITEBYTECODE is dropped), and the load
average is printed: on a shared machine, read the numbers with it.

Usage: python bench/bench_startup.py [--repeat 3] [--baseline /tmp/base20] [--no-template]
Writes bench/results/startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUITE = ROOT / "examples" / "travel" / "suite.yaml"
TARGETS = {"warm": 5.0, "fresh": 10.0}
MAIN = {"warm": 5.38, "fresh": 12.95, "in_process": 2.1}
"""main's medians on a quiet machine (bench_startup.py, 3 runs each) before the start-up work of
issue 20's second pass; ``--baseline`` measures them again beside this tree's."""

IN_PROCESS = """
import asyncio, json, sys, time
t0 = time.perf_counter()
from evalpipe.evaluate import evaluate_workflow
from evalpipe.suite import build_evaluators, build_target, load_suite

suite = load_suite(sys.argv[1])
rows = [json.loads(line) for line in open(sys.argv[2], encoding="utf-8") if line.strip()]
t1 = time.perf_counter()
results = asyncio.run(evaluate_workflow(
    workflow=build_target(suite),
    queries=[r["query"] for r in rows],
    expected_output=[r.get("expected_output") for r in rows],
    expected_tool_calls=[r.get("expected_tool_calls") or [] for r in rows],
    per_agent_expectations=[r.get("agents") or {} for r in rows],
    evaluators=build_evaluators(suite),
    num_repetitions=suite.repetitions,
    max_concurrency=suite.concurrency,
))
t2 = time.perf_counter()
print(json.dumps({"imports_and_suite": t1 - t0, "calls_and_evaluation": t2 - t1,
                  "providers": len(results)}))
"""


def _env(src: Path, home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PREFECT_API_URL", "PYTHONDONTWRITEBYTECODE") and not k.startswith("PREFECT_")
    }
    env.update(PYTHONPATH=str(src), PREFECT_HOME=str(home), COLUMNS="400", **extra)
    return env


def _run(src: Path, home: Path, out: Path, **extra: str) -> tuple[float, float, str]:
    """Seconds the command took, CPU seconds it used (user and system, its waited-for children
    included; not the kept server's), and its notes."""
    root = src.parent  # the tree's own demo suite and examples
    suite = root / SUITE.relative_to(ROOT)
    cmd = [sys.executable, "-m", "evalpipe.cli", "run", str(suite), "--no-progress"]
    cmd += ["--output", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(
        cmd, cwd=root, env=_env(src, home, **extra), capture_output=True, text=True, check=False
    )
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):
        raise SystemExit(f"evalpipe run exited {done.returncode}:\n{done.stderr[-3000:]}")
    notes = [line for line in done.stderr.splitlines() if line.startswith("note:")]
    return took, cpu, " | ".join(notes)


def _phases(src: Path, home: Path, work: Path, extra: dict[str, str]) -> dict[str, float]:
    """One more warm run through bench/_startup_probe.py: seconds from the process's start to the
    API (imports, suite, plan), to the server found, through the flow, and after it to the exit
    (the summary; the probe's own exit is the interpreter's usual one)."""
    marks_path = work / "marks.json"
    cmd = [sys.executable, str(HERE / "_startup_probe.py"), str(marks_path), "run", str(SUITE)]
    cmd += ["--no-progress", "--output", str(work / "out")]
    began = time.time()
    subprocess.run(cmd, cwd=ROOT, env=_env(src, home, **extra), capture_output=True, check=False)
    m = json.loads(marks_path.read_text())
    return {
        "before_the_api": round(m["api_asked"] - began, 2),
        "finding_the_server": round(m["api_ready"] - m["api_asked"], 2),
        "flow": round(m["flow_end"] - m["flow_start"], 2),
        "after_the_flow": round(m["exit"] - m["run_end"], 2),
    }


def _stop(src: Path, home: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "evalpipe.cli", "server", "stop", "--force"],
        cwd=src.parent,
        env=_env(src, home),
        capture_output=True,
        check=False,
    )


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min) / {five:.2f} (5 min) on {os.cpu_count()} cores"


def measure(
    trees: dict[str, Path], repeat: int, work: Path, extra: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """Warm and fresh runs of each tree (label -> its ``src``), the trees' runs alternating (one
    of each in turn), so that a change of the machine's load falls on all of them alike."""
    results: dict[str, dict[str, Any]] = {}
    kept = {}
    for label, src in trees.items():
        kept[label] = (src / "evalpipe" / "pipeline" / "keeper.py").exists()
        results[label] = {"tree": str(src), "kept_server": kept[label]}
    warm: dict[str, list[tuple[float, float, str]]] = {label: [] for label in trees}
    try:
        for label, src in trees.items():  # starts the server, writes bytecode
            _run(src, work / f"{label}-warm", work / "out", **extra)
        for _ in range(repeat):
            for label, src in trees.items():
                warm[label].append(_run(src, work / f"{label}-warm", work / "out", **extra))
        for label, src in trees.items():
            if kept[label]:
                results[label]["warm_phases"] = _phases(src, work / f"{label}-warm", work, extra)
    finally:
        for label, src in trees.items():
            if kept[label]:
                _stop(src, work / f"{label}-warm")
    fresh: dict[str, list[tuple[float, float, str]]] = {label: [] for label in trees}
    for i in range(repeat):
        for label, src in trees.items():
            home = work / f"{label}-fresh-{i}"
            try:
                fresh[label].append(_run(src, home, work / "out", **extra))
            finally:
                if kept[label]:
                    _stop(src, home)
    for label in trees:
        for what, runs in (("warm", warm[label]), ("fresh", fresh[label])):
            results[label][what] = [round(t, 2) for t, _, _ in runs]
            results[label][f"{what}_cpu"] = [round(c, 2) for _, c, _ in runs]
            results[label][f"{what}_note"] = runs[-1][2]
    return results


def in_process(src: Path, repeat: int) -> dict[str, Any]:
    dataset = SUITE.parent / "workflow_queries.jsonl"
    runs = []
    for _ in range(repeat):
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", IN_PROCESS, str(SUITE), str(dataset)],
            cwd=ROOT,
            env=_env(src, Path(tempfile.gettempdir())),
            capture_output=True,
            text=True,
            check=True,
        )
        inner = json.loads(done.stdout.strip().splitlines()[-1])
        runs.append({"total": time.perf_counter() - began, **inner})
    return {
        "total": [round(r["total"], 2) for r in runs],
        "imports_and_suite": round(statistics.median(r["imports_and_suite"] for r in runs), 2),
        "calls_and_evaluation": round(
            statistics.median(r["calls_and_evaluation"] for r in runs), 2
        ),
    }


def _line(
    what: str, times: list[float], target: float | None, main: float, cpu: list[float] | None = None
) -> str:
    med = statistics.median(times)
    goal = f"target <= {target:g} s {'met' if med <= target else 'MISSED'}; " if target else ""
    runs = ", ".join(f"{t:.2f}" for t in times)
    used = f"; CPU {statistics.median(cpu):.2f} s (median)" if cpu else ""
    return f"  {what:<12} {med:6.2f} s  ({goal}main {main:g} s; runs {runs}{used})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--baseline", type=Path, help="a checkout of main to measure the same way")
    parser.add_argument(
        "--no-template", action="store_true", help="fresh homes without a migrated template"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    extra: dict[str, str] = {}
    if args.no_template:
        extra["EVALPIPE_SERVER_DB_TEMPLATES"] = "off"
    report: dict[str, Any] = {"load_before": _load()}
    try:
        print(f"evalpipe run {SUITE.relative_to(ROOT)} (15 calls), {_load()}")
        trees = {"ours": ROOT / "src"}
        if args.baseline is not None:
            trees["base"] = args.baseline / "src"
        measured = measure(trees, args.repeat, work, extra)
        ours = measured["ours"]
        report["this_tree"] = ours
        print(_line("warm", ours["warm"], TARGETS["warm"], MAIN["warm"], ours["warm_cpu"]))
        print(f"               {ours['warm_note']}")
        phases = ", ".join(
            f"{k.replace('_', ' ')} {v:.2f} s" for k, v in ours["warm_phases"].items()
        )
        print(f"               one more warm run: {phases}")
        print(_line("fresh", ours["fresh"], TARGETS["fresh"], MAIN["fresh"], ours["fresh_cpu"]))
        print(f"               {ours['fresh_note']}")
        inproc = in_process(ROOT / "src", args.repeat)
        report["in_process"] = inproc
        print(
            _line("in-process", inproc["total"], None, MAIN["in_process"])
            + f"; imports and suite {inproc['imports_and_suite']:.2f} s, calls and evaluation "
            f"{inproc['calls_and_evaluation']:.2f} s"
        )
        if args.baseline is not None:
            base = measured["base"]
            report["baseline"] = base
            kind = "kept server" if base["kept_server"] else "per-run ephemeral server"
            print(f"baseline {args.baseline} ({kind}), {_load()}")
            print(_line("warm", base["warm"], None, MAIN["warm"], base["warm_cpu"]))
            if "warm_phases" in base:
                phases = ", ".join(
                    f"{k.replace('_', ' ')} {v:.2f} s" for k, v in base["warm_phases"].items()
                )
                print(f"               one more warm run: {phases}")
            print(_line("fresh", base["fresh"], None, MAIN["fresh"], base["fresh_cpu"]))
            for what in ("warm", "fresh"):
                was, now = statistics.median(base[what]), statistics.median(ours[what])
                cpu_was = statistics.median(base[f"{what}_cpu"])
                cpu_now = statistics.median(ours[f"{what}_cpu"])
                print(
                    f"  {what:<12} this tree {now:.2f} s against the baseline's {was:.2f} s "
                    f"({now - was:+.2f} s, {100 * (now - was) / was:+.0f}%); CPU {cpu_now:.2f} s "
                    f"against {cpu_was:.2f} s ({cpu_now / cpu_was:.3f}x)"
                )
        report["load_after"] = _load()
        print(_load())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "startup.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
