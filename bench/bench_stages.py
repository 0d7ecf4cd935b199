"""Benchmark (not a test): the per-item cost of each in-process stage of a suite run.

The workload is bench/bench_flow.py's scale part (an instant agent that returns a tool call, a tool
result and an answer; 3 local checks: keyword_check, tool_calls_present, tool_call_args_match).
The stages run as the flow runs them, without Prefect: ``prepare_suite``, then per shard (50 shards,
as the flow cuts 100,000 calls) ``run_calls`` (the calls and the journal), ``build_items``,
``evaluate_items`` per provider, the runs.parquet rows (``flow._record``; for an older checkout,
records then ``RunWriter.add_runs``), ``add_results``, the flow's ``_strip``; ``finish`` at the
end. pyarrow's first ``pa.array`` imports pandas (once per process, ~0.3 s): it is timed apart
(``arrow_import``), before the stages.

``--gc relaxed`` runs the shards as the flow does (``gc.freeze()`` and a young-generation threshold
of 20,000, ``pipeline.flow._young_gc_relaxed``); ``--gc default`` with the interpreter's collector.
Each figure is the process's CPU time (``time.process_time``: the machine may be shared, and every
stage but the calls is CPU-bound) per item. Each configuration runs in a fresh process,
``--repeat`` times; medians are printed in µs per item.
``--against DIR`` runs another checkout's ``src`` (main's: ``--against /work/main/src``) through the
same script, and prints both.

Usage: python bench/bench_stages.py [--items 30000] [--repeat 3] [--gc relaxed|default|both]
                                    [--against DIR] [--out FILE]
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
SRC = HERE.parent / "src"

CHILD = r"""
import asyncio, gc, json, os, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from bench_flow import _project
n, root, relaxed = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "relaxed"
suite_path = _project(root, n, 1, 0.0, 64)
os.chdir(root)
sys.path.insert(0, str(root))
from evalpipe.suite import load_suite
from evalpipe.runner.prepare import prepare_suite
from evalpipe.runner import RunState
from evalpipe.runner.shard import run_calls, build_items, evaluate_items
from evalpipe.artifacts import RunWriter
from evalpipe.pipeline.flow import _record, _strip
import inspect
COLUMNAR = "writer" in inspect.signature(_record).parameters

T: dict[str, float] = {}
def tick(name, t0):
    now = time.process_time()
    T[name] = T.get(name, 0.0) + now - t0
    return time.process_time()

suite = load_suite(suite_path)
t = time.process_time()
import pyarrow as pa
pa.array([0])  # the first pa.array imports pandas (once per process): not any stage's cost
t = tick("arrow_import", t)
plan = prepare_suite(suite)
t = tick("prepare", t)
state = RunState.open(plan)
writer = RunWriter(plan.run_dir)
size = max(1, -(-len(plan.calls) // 50))
if relaxed:
    gc.freeze()
    gc.set_threshold(20000, 10, 10)

async def main():
    sem = asyncio.Semaphore(64)
    for shard in plan.shards(size):
        t = time.process_time()
        outs = await run_calls(plan, state, shard, semaphore=sem, workers=64)
        t = tick("calls", t)
        items = build_items(plan, outs)
        t = tick("build_items", t)
        res = [
            await evaluate_items(plan, state, i, p, items, shard[0].position)
            for i, p in enumerate(plan.providers)
        ]
        t = tick("evaluate", t)
        if COLUMNAR:  # _record(writer, plan, outcomes) writes the rows itself: no records
            t = tick("records", t)
            _record(writer, plan, outs)
            t = tick("add_runs", t)
        else:  # an older checkout: _record(plan, outcome) -> RunRecord, then add_runs
            recs = [_record(plan, o) for o in outs]
            t = tick("records", t)
            writer.add_runs(recs)
            t = tick("add_runs", t)
            del recs
        writer.add_results(res)
        t = tick("add_results", t)
        kept = {}
        for r in res:
            _strip(r, kept)
        t = tick("strip", t)
        del outs, items, res

asyncio.run(main())
t = time.process_time()
writer.finish({})
t = tick("finish", t)
state.close()
out = {k: 1e6 * v / n for k, v in T.items()}
out["runs_rows"] = out["records"] + out["add_runs"]
out["write_path"] = out["runs_rows"] + out["add_results"]
out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""

MINE = ("prepare", "build_items", "evaluate", "records", "add_runs", "add_results", "finish")
"""The stages this benchmark is about (``calls`` is the targets' and the journal's)."""
SUMS = ("runs_rows", "write_path")
"""``records`` + ``add_runs`` (a checkout whose ``_record`` writes the rows itself has no
separate records stage), and that plus ``add_results``: the writer's share of an item."""


def _once(src: Path, items: int, gc_mode: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-stages-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(src)}
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(items), tmp, gc_mode, str(HERE)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"stages child failed:\n{done.stderr[-4000:]}")
        result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
        return result


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gc", choices=["relaxed", "default", "both"], default="both")
    parser.add_argument("--against", help="another checkout's src directory (main's)")
    parser.add_argument("--out", help="write the medians as JSON here")
    args = parser.parse_args()
    modes = ["relaxed", "default"] if args.gc == "both" else [args.gc]
    trees = {"this": SRC}
    if args.against:
        trees["against"] = Path(args.against)
    report: dict[str, Any] = {"items": args.items, "repeat": args.repeat, "load": os.getloadavg()}
    for mode in modes:
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(args.repeat):  # interleaved, so both trees see the same machine load
            for name, src in trees.items():
                runs[name].append(_once(src, args.items, mode))
        medians = {name: _medians(r) for name, r in runs.items()}
        report[mode] = medians
        head = f"{'stage (us/item)':16s}" + "".join(f"{n:>10s}" for n in trees)
        print(f"\n{args.items} items, gc {mode}, median of {args.repeat}\n{head}")
        for stage in ("arrow_import", "calls", *MINE, "strip", *SUMS, "peak_rss_mib"):
            cells = "".join(f"{medians[n].get(stage, float('nan')):10.1f}" for n in trees)
            print(f"{stage:16s}{cells}")
    print(f"\nload average {report['load']}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
