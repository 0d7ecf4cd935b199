"""Benchmark (not a test): the per-call cost of making target calls (``runner.shard.run_calls``).

The workload is bench/bench_flow.py's scale agent (an instant agent that returns a tool call, a
tool result and an answer), CALLS rows x 1 repetition, run in-process through ``run_calls`` as a
shard of the flow runs them: 64 workers sharing a semaphore of 64, the run's journal on (one line
per call, written before the call counts as done). Reported per call, wall time and CPU time (the
CPU figure is steadier on a shared machine):

- ``agent``: the agent's own ``run`` called CALLS times in a loop (what a call cannot cost less than);
- ``calls``: ``run_calls`` over the plan's calls, so ``calls - agent`` is evalpipe's per-call cost.

Each figure is the median of ``--repeat`` runs, each in a fresh process, with the cyclic collector
as the flow and its worker processes run shards (``off``: ``gc.freeze()`` and ``gc.disable()``,
collected between shards), as they ran them before (``relaxed``: ``gc.freeze()`` and a young
threshold of 20,000) and as Python's defaults (``default``). With the collector on, most of the
figure is its scans of the transcripts the shard keeps (about half of it in ``relaxed``). ``--src DIR`` measures another checkout's evalpipe through the same
script (e.g. a copy of main's ``src``); ``--base DIR`` measures both, each run of one paired with a
run of the other, and prints before -> after.

Usage: python bench/bench_calls.py [--calls 20000] [--repeat 5] [--gc off,relaxed,default] [--src DIR]
                                   [--base DIR]
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

CHILD = """
import asyncio, gc, json, os, sys, time
from pathlib import Path
sys.path.insert(0, {bench!r})
from bench_flow import _project
root = Path({root!r})
suite_path = _project(root, {calls}, 1, 0.0, 64)
os.chdir(root)
sys.path.insert(0, str(root))
from evalpipe.runner import RunState
from evalpipe.runner.prepare import prepare_suite
from evalpipe.runner.shard import run_calls
from evalpipe.suite import load_suite
import bench_agent

plan = prepare_suite(load_suite(suite_path))
state = RunState.open(plan)


async def agent_only():
    for _ in range({calls}):
        await bench_agent.agent.run([])


async def calls():
    semaphore = asyncio.Semaphore(64)
    await run_calls(plan, state, plan.calls, semaphore=semaphore, workers=64)


if {gc_mode!r} == "relaxed":
    gc.freeze()
    gc.set_threshold(20000, 10, 10)
elif {gc_mode!r} == "off":
    gc.freeze()
    gc.disable()
out = {{}}
for name, fn in (("agent", agent_only), ("calls", calls)):
    w, c = time.perf_counter(), time.process_time()
    asyncio.run(fn())
    out[name] = (1e6 * (time.perf_counter() - w) / {calls}, 1e6 * (time.process_time() - c) / {calls})
state.close()
print(json.dumps(out))
"""


def _once(calls: int, gc_mode: str, src: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-calls-") as tmp:
        code = CHILD.format(bench=str(HERE), root=tmp, calls=calls, gc_mode=gc_mode)
        env = dict(os.environ)
        if src:
            env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        return result


def _figures(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {
        f"{name} {kind}": statistics.median(r[name][i] for r in runs)
        for name in ("agent", "calls")
        for i, kind in enumerate(("wall", "cpu"))
    }


def _line(label: str, mode: str, figures: dict[str, float]) -> str:
    ours_wall = figures["calls wall"] - figures["agent wall"]
    ours_cpu = figures["calls cpu"] - figures["agent cpu"]
    return (
        f"{label}gc {mode:8}: agent {figures['agent wall']:6.1f} us/call | run_calls "
        f"{figures['calls wall']:6.1f} us/call wall, {figures['calls cpu']:6.1f} cpu | "
        f"evalpipe's part {ours_wall:6.1f} wall, {ours_cpu:6.1f} cpu"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--gc", default="off,relaxed,default")
    parser.add_argument("--src", default=None, help="the evalpipe sources to measure")
    parser.add_argument(
        "--base",
        default=None,
        help="other evalpipe sources measured in the same sitting, each run paired with one of "
        "--src (alternately), for a before -> after on a noisy machine",
    )
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f}; {args.calls} calls; median of {args.repeat}")
    for mode in args.gc.split(","):
        runs: list[dict[str, Any]] = []
        base: list[dict[str, Any]] = []
        for _ in range(args.repeat):
            if args.base:
                base.append(_once(args.calls, mode, args.base))
            runs.append(_once(args.calls, mode, args.src))
        if base:
            before, after = _figures(base), _figures(runs)
            print(_line("before ", mode, before))
            print(_line("after  ", mode, after))
            ratios = [a["calls"][1] / b["calls"][1] for a, b in zip(runs, base, strict=True)]
            print(
                f"        run_calls cpu after/before, median of pairs: {statistics.median(ratios):.2f}"
            )
        else:
            print(_line("", mode, _figures(runs)))


if __name__ == "__main__":
    main()
