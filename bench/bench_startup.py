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
machine it moves less than the wall time. For fresh homes, the new server's own CPU time by the
end of the run is given too (its start, and its part of the run). Servers this script starts are stopped at its end.
Python writes bytecode as a user's would (PYTHONDONTWRITEBYTECODE is dropped), and the load
average is printed: on a shared machine, read the numbers with it.

One more run per tree goes through bench/_startup_probe.py on the warm home, and ``--phase-runs``
(1) on fresh homes, for the phases of a run (medians): before the API, finding the server (on a
fresh home, the wait for its start), the flow, after the flow.

Usage: python bench/bench_startup.py [--repeat 3] [--baseline /tmp/base20] [--no-template]
       [--phase-runs 1]
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
    included; not the kept server's, :func:`_server_cpu`), and its notes."""
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
    """One more run on ``home`` through bench/_startup_probe.py: seconds from the process's start
    to the API (imports, suite, plan), to the server found (on a fresh home: waiting for the
    server's start), through the flow (on a fresh home, its first requests to the new server), and
    after it to the exit (the summary; the probe's own exit is the interpreter's usual one)."""
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


def _server_cpu(home: Path) -> float | None:
    """CPU seconds (user and system) the kept server of ``home`` has used so far (its start, and
    its part of the runs), from /proc; None when it cannot be read."""
    try:
        pid = json.loads((home / "evalpipe-server" / "server.json").read_text())["pid"]
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    trees: dict[str, Path], repeat: int, work: Path, extra: dict[str, str], phase_runs: int = 1
) -> dict[str, dict[str, Any]]:
    """Warm and fresh runs of each tree (label -> its ``src``), the trees' runs alternating (one
    of each in turn), so that a change of the machine's load falls on all of them alike; then
    ``phase_runs`` fresh runs of each through the probe (:func:`_phases`, medians)."""
    results: dict[str, dict[str, Any]] = {}
    kept = {}
    for label, src in trees.items():
        # a tree keeps its server between runs: keeper.py before issue 31, server.py's
        # server.json (beside Prefect's own pid file) since
        pipeline = src / "evalpipe" / "pipeline"
        kept[label] = (pipeline / "keeper.py").exists() or (
            "server.json" in (pipeline / "server.py").read_text(errors="replace")
        )
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
    server_cpu: dict[str, list[float | None]] = {label: [] for label in trees}
    for i in range(repeat):
        for label, src in trees.items():
            home = work / f"{label}-fresh-{i}"
            try:
                fresh[label].append(_run(src, home, work / "out", **extra))
                if kept[label]:
                    server_cpu[label].append(_server_cpu(home))
            finally:
                if kept[label]:
                    _stop(src, home)
    probed: dict[str, list[dict[str, float]]] = {label: [] for label in trees}
    for i in range(phase_runs):
        for label, src in trees.items():
            if kept[label]:
                home = work / f"{label}-fresh-probe-{i}"
                try:
                    probed[label].append(_phases(src, home, work, extra))
                finally:
                    _stop(src, home)
    for label, runs in probed.items():
        if runs:
            results[label]["fresh_phases"] = {
                k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]
            }
            results[label]["fresh_phases_runs"] = runs
    for label in trees:
        used = [c for c in server_cpu[label] if c is not None]
        if used:
            results[label]["fresh_server_cpu"] = [round(c, 2) for c in used]
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


def _server_text(cpu: list[float]) -> str:
    runs = ", ".join(f"{c:.2f}" for c in cpu)
    return f"the new server's CPU by the run's end {statistics.median(cpu):.2f} s (median; {runs})"


def _phase_text(phases: dict[str, float]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v:.2f} s" for k, v in phases.items())


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
    parser.add_argument(
        "--phase-runs", type=int, default=1, help="fresh runs through the probe (phase medians)"
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
        measured = measure(trees, args.repeat, work, extra, args.phase_runs)
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
        if "fresh_server_cpu" in ours:
            print(f"               {_server_text(ours['fresh_server_cpu'])}")
        if "fresh_phases" in ours:
            print(
                f"               fresh runs through the probe: {_phase_text(ours['fresh_phases'])}"
            )
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
            if "fresh_server_cpu" in base:
                print(f"               {_server_text(base['fresh_server_cpu'])}")
            if "fresh_phases" in base:
                print(
                    f"               fresh runs through the probe: {_phase_text(base['fresh_phases'])}"
                )
            for what in ("warm", "fresh"):
                was, now = statistics.median(base[what]), statistics.median(ours[what])
                cpu_was = statistics.median(base[f"{what}_cpu"])
                cpu_now = statistics.median(ours[f"{what}_cpu"])
                print(
                    f"  {what:<12} this tree {now:.2f} s against the baseline's {was:.2f} s "
                    f"({now - was:+.2f} s, {100 * (now - was) / was:+.0f}%); CPU {cpu_now:.2f} s "
                    f"against {cpu_was:.2f} s ({cpu_now / cpu_was:.3f}x)"
                )
            if "fresh_server_cpu" in base and "fresh_server_cpu" in ours:
                was = statistics.median(base["fresh_server_cpu"])
                now = statistics.median(ours["fresh_server_cpu"])
                print(
                    f"  {'server':<12} the fresh server's CPU {now:.2f} s against the baseline's "
                    f"{was:.2f} s ({now / was:.3f}x)"
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
