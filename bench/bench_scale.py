"""Benchmark (not a test): ``evalpipe run`` at scale, and reading the run back.

The workload is bench/bench_flow.py's scale part (an instant agent that returns a tool call, a tool
result and an answer; 3 local checks: keyword_check, tool_calls_present, tool_call_args_match), run
through the command line as a user runs it: ``evalpipe run suite.json --no-progress``, against the
embedded Prefect server, in a PREFECT_HOME whose database exists already (warmed by one small run
first; a fresh PREFECT_HOME adds its migrations, which are start-up, not scale).

Parts:
1. ``cli``: ITEMS items x 3 checks: total wall time, its phases (before the flow, the flow, after
   the flow: from the flow's last log line to the process's exit, where the CLI prints the summary),
   and the process tree's peak RSS (the CLI, the Prefect server, the report's child process;
   sampled every 20 ms as the sum of the tree's resident sets).
2. ``load``: ``evalpipe.artifacts.load_run`` of that run in a fresh process: time and peak RSS until
   items are asked for, then the time to walk every item.
3. ``scaling``: 1k / 10k / 100k / 1M items through ``evalpipe run`` (time and tree peak RSS).

Each figure is the median of ``--repeat`` runs, printed against its target (issue 20) and against
main's (dfdb061) number, with the machine's load average. ``--src DIR`` runs another checkout's
evalpipe (``--src /tmp/base20b/src`` for main) through the same script.

Usage: python bench/bench_scale.py [--items 100000] [--repeat 3] [--part cli|load|scaling|all]
                                   [--sizes 1000,10000,100000,1000000] [--src DIR] [--out FILE]
                                   [--task-runner threads|processes] [--shard-size N]
                                   [--keep-run DIR]
Writes bench/results/scale.json (or --out) and prints the numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_flow import _project  # noqa: E402 - the same workload as bench_flow --part scale

TARGETS = {
    "cli_total_s": 30.0,
    "cli_peak_rss_mib": 1024.0,
    "cli_after_flow_s": 2.0,
    "load_run_s": 3.0,
    "load_run_rss_mib": 500.0,
}
"""Issue 20's targets for 100,000 items x 3 checks."""

MAIN: dict[str, tuple[float, float] | None] = {
    "cli_total_s": (91.0, 97.0),
    "cli_flow_s": (48.0, 51.0),
    "cli_after_flow_s": (27.0, 29.0),
    "cli_peak_rss_mib": (2150.0, 2150.0),
    "load_run_s": (25.5, 27.5),
    "load_run_rss_mib": None,
    "load_items_s": None,
}
"""main before this work (dfdb061), 100,000 items x 3 checks, median of 3 at low load (issue 20):
``load_run`` then rebuilt every item (25.5-27.5 s, +1.47 GiB; 5 s and +0.64 GiB without them).
``--src /tmp/base20b/src`` measures that checkout through this script instead."""

LOAD_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from evalpipe.artifacts import load_run
t_import = time.perf_counter() - t0
t1 = time.perf_counter()
c1 = time.process_time()
results = load_run(sys.argv[1])
counts = [(r.provider, r.passed, r.failed, r.errored) for r in results]
t_load = time.perf_counter() - t1
cpu_load = time.process_time() - c1
rss_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t2 = time.perf_counter()
n = 0
for r in results:
    for level in r.iter_results():
        for item in level.input_items:
            n += len(item.conversation)
t_items = time.perf_counter() - t2
print(json.dumps({"import_s": t_import, "load_s": t_load, "load_cpu_s": cpu_load, "rss_mib": rss_load,
                  "items_s": t_items, "messages": n, "counts": counts,
                  "rss_items_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _env(src: str | None, home: Path) -> dict[str, str]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env["PREFECT_HOME"] = str(home)
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    env["PREFECT_SERVER_LOGGING_LEVEL"] = "CRITICAL"
    env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "160"
    return env


def _kept_server(home: Path | None) -> psutil.Process | None:
    """The PREFECT_HOME's kept Prefect server (evalpipe.pipeline.server), when one runs: the run
    uses it, so its memory is the run's too, though it is not a child of the CLI."""
    if home is None:
        return None
    try:
        info = json.loads((home / "evalpipe-server" / "server.json").read_text(encoding="utf-8"))
        return psutil.Process(int(info["pid"]))
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return None


class TreeSampler:
    """The peak of the summed RSS of a process and all its descendants, sampled; and the same with
    the PREFECT_HOME's kept server (and its children) added."""

    def __init__(
        self,
        pid: int,
        interval: float = 0.02,
        home: Path | None = None,
        extra: list[int] | None = None,
    ) -> None:
        self.root = psutil.Process(pid)
        self.extra = [psutil.Process(p) for p in extra or []]
        """Other processes the run uses (a Dask cluster's scheduler and workers), counted in."""
        self.home = home
        self.interval = interval
        self.peak = 0
        self.peak_parts: dict[str, int] = {}
        self.peak_with_server = 0
        self.server_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
                for other in self.extra:
                    procs += [other, *other.children(recursive=True)]
            except psutil.Error:
                break
            total = 0
            parts: dict[str, int] = {}
            cmdlines: dict[int, list[str]] = {}
            for p in procs:
                try:
                    cmdlines[p.pid] = p.cmdline()
                except psutil.Error:
                    continue
            for p in procs:
                try:
                    cmdline = cmdlines[p.pid]
                    if cmdline == cmdlines.get(p.ppid()):
                        # forked, not yet exec'd (the report's child being started): its
                        # resident set is the parent's pages, counted there already
                        continue
                    rss = p.memory_info().rss
                    name = " ".join(cmdline[1:4])[:60]
                except (psutil.Error, KeyError):
                    continue
                total += rss
                parts[name] = parts.get(name, 0) + rss
            if total > self.peak:
                self.peak, self.peak_parts = total, parts
            server = _kept_server(self.home)
            served = 0
            if server is not None:
                try:
                    served = sum(
                        p.memory_info().rss for p in (server, *server.children(recursive=True))
                    )
                except psutil.Error:
                    served = 0
            self.server_peak = max(self.server_peak, served)
            self.peak_with_server = max(self.peak_with_server, total + served)
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _cli_run(
    root: Path, suite: Path, env: dict[str, str], extra: list[int] | None = None
) -> dict[str, Any]:
    """One ``evalpipe run``: its wall time, phases and the process tree's peak RSS (with the
    ``extra`` processes' trees)."""
    evalpipe = Path(sys.executable).parent / "evalpipe"
    home = Path(env["PREFECT_HOME"])
    others_before = _cpu_of(_kept_server(home), extra)
    started = time.perf_counter()
    wall_start = time.time()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(
        [str(evalpipe), "run", str(suite), "--no-progress"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sampler = TreeSampler(proc.pid, home=Path(env["PREFECT_HOME"]), extra=extra)
    lines: list[tuple[float, str]] = []

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.perf_counter() - started, line.rstrip()))

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait()
    total = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the CLI and every descendant it waited for (worker processes, the report's child): not the
    # kept server, which is not its child
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # the kept server (running before this run, or started by it) and the extra processes
    others_after = _cpu_of(_kept_server(home), extra)
    server_cpu = others_after["server"] - others_before.get("server", 0.0)
    extra_cpu = others_after["extra"] - others_before["extra"]
    reader.join()
    sampler.stop()
    if proc.returncode not in (0, 1):
        tail = "\n".join(text for _, text in lines[-40:])
        raise SystemExit(f"evalpipe run failed ({proc.returncode}):\n{tail}\n{out[-2000:]}")
    run_dir = next(
        (
            Path(line.split(":", 1)[1].strip())
            for line in out.splitlines()
            if line.startswith("run directory:")
        ),
        None,
    )
    manifest = json.loads((run_dir / "manifest.json").read_text()) if run_dir else {}
    # Phases from the run directory's files: run.json is written as the flow starts, report.html
    # as it ends (its last steps are a few artifact API calls).
    flow_start = flow_end = None
    if run_dir is not None:
        flow_start = (run_dir / "run.json").stat().st_mtime - wall_start
        last = run_dir / "report.html"
        flow_end = (
            last if last.exists() else run_dir / "manifest.json"
        ).stat().st_mtime - wall_start
    ended = [t for t, text in lines if " calls in " in text and "/" in text]
    return {
        "total_s": total,
        "cpu_s": cpu,
        "server_cpu_s": server_cpu,
        "extra_cpu_s": extra_cpu,
        "tree_cpu_s": cpu + server_cpu + extra_cpu,
        "summary_s": (total - ended[-1]) if ended else None,
        "before_flow_s": flow_start,
        "flow_s": (flow_end - flow_start) if flow_end and flow_start else None,
        "after_flow_s": (total - flow_end) if flow_end else None,
        "flow_calls_and_evaluation_s": manifest.get("timings", {}).get("calls_and_evaluation_s"),
        "peak_rss_mib": sampler.peak / 2**20,
        "peak_parts_mib": {k: round(v / 2**20) for k, v in sampler.peak_parts.items()},
        "peak_rss_with_server_mib": sampler.peak_with_server / 2**20,
        "server_peak_rss_mib": sampler.server_peak / 2**20,
        "calls": manifest.get("calls", {}).get("total"),
        "shards": manifest.get("shards"),
        "run_dir": str(run_dir) if run_dir else None,
        "exit": proc.returncode,
        "stderr": [f"{t:8.2f} {text[:200]}" for t, text in lines],
        "load": os.getloadavg()[0],
    }


def _cpu_of(server: psutil.Process | None, extra: list[int] | None) -> dict[str, float]:
    """CPU seconds (user + system) so far of the kept server with its children, and of the
    ``extra`` processes (a Dask cluster) with theirs."""

    def tree(p: psutil.Process) -> float:
        total = 0.0
        for q in (p, *p.children(recursive=True)):
            try:
                t = q.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system
        return total

    out = {"extra": 0.0, "server": 0.0}
    if server is not None:
        with contextlib.suppress(psutil.Error):
            out["server"] = tree(server)
    for pid in extra or []:
        try:
            out["extra"] += tree(psutil.Process(pid))
        except psutil.Error:
            continue
    return out


def _warm(home: Path, src: str | None) -> None:
    """A small run, so the PREFECT_HOME's database exists before anything is measured."""
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-warm-") as tmp:
        root = Path(tmp)
        suite = _project(root, 10, 1, 0.0, 64)
        _cli_run(root, suite, _env(src, home))


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _fmt(value: float | None, unit: str, spec: str = ".1f") -> str:
    return "-" if value is None else f"{value:{spec}} {unit}"


def _line(label: str, key: str, value: float | None, unit: str, spec: str = ".1f") -> str:
    parts = [f"{label}: {_fmt(value, unit, spec)}"]
    if key in TARGETS:
        limit = TARGETS[key]
        strict = "rss" in key
        ok = value is not None and (value < limit if strict else value <= limit)
        parts.append(
            f"target {'<' if strict else '<='} {limit:g} {unit} ({'ok' if ok else 'MISSED'})"
        )
    main = MAIN.get(key)
    if main is not None:
        low, high = main
        shown = _fmt(low, unit, spec) if low == high else f"{low:{spec}}-{_fmt(high, unit, spec)}"
        parts.append(f"main {shown}")
    return "; ".join(parts)


def _cli_part(
    items: int,
    repeat: int,
    src: str | None,
    home: Path,
    keep: Path,
    task_runner: Any = "threads",
    shard_size: int | None = None,
) -> dict[str, Any]:
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="evalpipe-bench-scale-") as tmp:
            root = Path(tmp)
            suite = _project(root, items, 1, 0.0, 64, task_runner, shard_size)
            r = _cli_run(root, suite, _env(src, home))
            if r["run_dir"] and not (keep / "manifest.json").exists():
                shutil.rmtree(keep, ignore_errors=True)
                shutil.copytree(r["run_dir"], keep)
            runs.append(r)
            print(
                f"  run: total {r['total_s']:.1f} s, CPU {r['cpu_s']:.1f} s (before {_fmt(r['before_flow_s'], 's')}, flow "
                f"{_fmt(r['flow_s'], 's')}, after {_fmt(r['after_flow_s'], 's', '.2f')}; summary "
                f"{_fmt(r['summary_s'], 's', '.2f')}), peak RSS "
                f"{r['peak_rss_mib']:.0f} MiB {r['peak_parts_mib']}, with the kept server "
                f"{r['peak_rss_with_server_mib']:.0f} MiB (server {r['server_peak_rss_mib']:.0f}), "
                f"{r['shards']} shards, "
                f"load {r['load']:.2f}",
                flush=True,
            )
    summary = {
        k: _median(runs, k)
        for k in (
            "total_s",
            "cpu_s",
            "before_flow_s",
            "flow_s",
            "after_flow_s",
            "summary_s",
            "peak_rss_mib",
            "peak_rss_with_server_mib",
            "server_peak_rss_mib",
        )
    }
    return {"runs": runs, "median": summary}


def _load_part(run_dir: Path, repeat: int, src: str | None) -> dict[str, Any]:
    runs = []
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", LOAD_CHILD, str(run_dir)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        r["load"] = os.getloadavg()[0]
        runs.append(r)
        print(
            f"  load_run: {r['load_s']:.2f} s ({r['load_cpu_s']:.2f} s CPU), peak RSS {r['rss_mib']:.0f} MiB (imports "
            f"{r['import_s']:.2f} s); every item: +{r['items_s']:.2f} s, peak "
            f"{r['rss_items_mib']:.0f} MiB; load {r['load']:.2f}",
            flush=True,
        )
    return {
        "runs": runs,
        "median": {
            k: _median(runs, k)
            for k in ("load_s", "load_cpu_s", "rss_mib", "items_s", "rss_items_mib")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--part", choices=["cli", "load", "scaling", "all"], default="all")
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--src", default=None, help="run this checkout's evalpipe (PYTHONPATH)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "scale.json")
    parser.add_argument(
        "--task-runner",
        choices=["threads", "processes"],
        default="threads",
        help="the suite's task_runner (processes: one worker process per CPU)",
    )
    parser.add_argument(
        "--shard-size", type=int, default=None, help="the suite's shard_size (default: the flow's)"
    )
    parser.add_argument(
        "--keep-run",
        type=Path,
        default=None,
        help="copy the first ITEMS-item run directory here and keep it (bench_view.py --run, "
        "bench_engines.py and bench_report.py read it)",
    )
    args = parser.parse_args()

    report: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "src": args.src or "installed",
        "task_runner": args.task_runner,
        "shard_size": args.shard_size,
    }
    work = Path(tempfile.mkdtemp(prefix="evalpipe-bench-scale-home-"))
    home = work / "prefect-home"
    keep = work / "run-100k"
    try:
        _warm(home, args.src)
        if args.part in ("cli", "load", "all"):
            print(
                f"cli: evalpipe run, {args.items} items x 3 checks, task_runner "
                f"{args.task_runner} (median of {args.repeat})"
            )
            cli = _cli_part(
                args.items, args.repeat, args.src, home, keep, args.task_runner, args.shard_size
            )
            report["cli"] = cli
            m = cli["median"]
            print(_line("  total", "cli_total_s", m["total_s"], "s"))
            print(_line("  CPU of the CLI and its children", "cli_cpu_s", m["cpu_s"], "s"))
            print(_line("  flow", "cli_flow_s", m["flow_s"], "s"))
            print(_line("  after the flow", "cli_after_flow_s", m["after_flow_s"], "s", ".2f"))
            print(_line("  of which the summary", "cli_summary_s", m["summary_s"], "s", ".2f"))
            print(
                _line(
                    "  process tree peak RSS, the kept server included",
                    "cli_peak_rss_mib",
                    m["peak_rss_with_server_mib"],
                    "MiB",
                    ".0f",
                )
            )
            print(
                f"  (the CLI and its children alone: {_fmt(m['peak_rss_mib'], 'MiB', '.0f')}; the "
                f"kept server: {_fmt(m['server_peak_rss_mib'], 'MiB', '.0f')})"
            )
        if args.part in ("load", "all"):
            print(f"load: load_run of the {args.items}-item run (median of {args.repeat})")
            load = _load_part(keep, args.repeat, args.src)
            report["load"] = load
            m = load["median"]
            print(_line("  load_run", "load_run_s", m["load_s"], "s", ".2f"))
            print(_line("  load_run peak RSS", "load_run_rss_mib", m["rss_mib"], "MiB", ".0f"))
            print(_line("  every item", "load_items_s", m["items_s"], "s", ".2f"))
        if args.part in ("scaling", "all"):
            sizes = [int(s) for s in args.sizes.split(",") if s]
            print(f"scaling: evalpipe run at {sizes} items x 3 checks")
            table = []
            for n in sizes:
                reps = args.repeat if n <= 100_000 else 1
                if n == args.items and "cli" in report:  # measured above
                    m = report["cli"]["median"]
                else:
                    r = _cli_part(
                        n,
                        reps,
                        args.src,
                        home,
                        work / f"run-{n}",
                        args.task_runner,
                        args.shard_size,
                    )
                    shutil.rmtree(work / f"run-{n}", ignore_errors=True)
                    m = r["median"]
                table.append({"items": n, **m, "repeat": reps})
                print(
                    f"  {n:>9,} items: total {m['total_s']:.1f} s, flow {_fmt(m['flow_s'], 's')} "
                    f"({n / m['flow_s']:,.0f} items/s), peak RSS {m['peak_rss_with_server_mib']:.0f} MiB "
                    f"with the kept server ({m['peak_rss_mib']:.0f} MiB without)"
                    if m["flow_s"]
                    else f"  {n} items: {m}",
                    flush=True,
                )
            report["scaling"] = table
    finally:
        if args.keep_run is not None and (keep / "manifest.json").exists():
            shutil.rmtree(args.keep_run, ignore_errors=True)
            shutil.copytree(keep, args.keep_run)
            print(f"kept the {args.items}-item run at {args.keep_run}")
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
