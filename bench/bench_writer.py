"""Benchmark (not a test): the cost of a worker's ``RowEncoder`` and of the flow's ``add_encoded``.

The workload is bench/bench_flow.py's scale part (an instant agent that returns a tool call, a tool
result and an answer; 3 local checks), cut into shards of 2,000 calls as ``task_runner:
processes`` cuts them. Its shards are made once (``run_shard`` without Prefect, with whichever
evalpipe comes first on the path) and stored as pickles, so every tree encodes the very same
shards. Then, per tree and trial, two fresh processes:

1. ``encode`` (a worker's share): each shard through ``processes.encode_shard``; CPU time
   (``time.process_time``) per item, ``target_runs`` and ``results`` apart. The shard is then
   stripped and pickled as a worker sends it (``ShardDone``): ``pickle``, its CPU per item, and
   ``sent_bytes``, its size per item; ``worker`` is encode plus pickle.
2. ``append`` (the flow's share): each ``ShardDone`` unpickled in one thread (as the flow
   receives it: ``unpickle``, that thread's CPU per item) and appended in another
   (``RunWriter.add_encoded``, as the flow's ``_write``); the append's CPU (``time.thread_time``
   of that thread) per item, ``flow`` the two together, ``finish`` apart, and the
   process's RSS sampled every 5 ms: its growth from after the first shard to the peak, the
   Arrow pool's bytes (``pyarrow.total_allocated_bytes``) at the end.

The trees alternate trial by trial. At the end the Parquet files both trees wrote are compared
(every table's rows and row groups; summary's ``run_ended_at`` aside).

Usage: python bench/bench_writer.py --against /tmp/base/src [--shards 50] [--size 2000]
                                    [--repeat 5] [--out FILE] [--made DIR]
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

MAKE = r"""
import asyncio, os, pickle, sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from bench_flow import _project
shards, size, root = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
suite_path = _project(root, shards * size, 1, 0.0, 64)
os.chdir(root)
sys.path.insert(0, str(root))
from evalpipe.suite import load_suite
from evalpipe.runner.prepare import prepare_suite
from evalpipe.runner import RunState
from evalpipe.runner.shard import run_shard
from evalpipe.pipeline.processes import call_columns
plan = prepare_suite(load_suite(suite_path))
state = RunState.open(plan, marker=False, lock=False)
out = root / "shards"
out.mkdir()

async def main():
    for index, calls in enumerate(plan.shards(size)):
        shard = await run_shard(plan, state, calls, semaphore=asyncio.Semaphore(64), workers=64)
        with (out / f"{index:04d}.pkl").open("wb") as fh:
            pickle.dump((call_columns(plan, shard.outcomes), shard.results, shard.items), fh)

asyncio.run(main())
state.close()
"""

ENCODE = r"""
import json, pickle, sys, time
from pathlib import Path
from evalpipe.artifacts.writer import RowEncoder
from evalpipe.pipeline.processes import ShardDone, strip_results
from evalpipe.tally import CallTally, Counts, SummaryTally
try:
    import pyarrow as pa
    pa.array([0])  # the first pa.array imports pandas: not the encoder's cost (a tree's that uses it)
except ImportError:
    pass
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
dst.mkdir(exist_ok=True)
encoder = RowEncoder()
T = {"target_runs": 0.0, "results": 0.0, "pickle": 0.0}
n = 0
sent = 0
for path in sorted(src.glob("*.pkl")):
    with path.open("rb") as fh:
        columns, results, items = pickle.load(fh)
    t0 = time.process_time()
    runs = encoder.target_runs(**columns)
    t1 = time.process_time()
    batch = encoder.results(results, SummaryTally().check(results))
    batch.runs = runs
    t2 = time.process_time()
    T["target_runs"] += t1 - t0
    T["results"] += t2 - t1
    n += items
    kept = {}
    for result in results:
        strip_results(result, kept, 20)
    done = ShardDone(index=int(path.stem), encoded=batch, results=results, calls=CallTally(),
                     verdicts=Counts(), made=0, reused=0, items=items, n_calls=items)
    t3 = time.process_time()
    data = pickle.dumps(done, protocol=pickle.HIGHEST_PROTOCOL)
    T["pickle"] += time.process_time() - t3
    sent += len(data)
    (dst / path.name).write_bytes(data)
out = {k: 1e6 * v / n for k, v in T.items()}
out["encode"] = out["target_runs"] + out["results"]
out["worker"] = out["encode"] + out["pickle"]
out["sent_bytes"] = sent / n
print(json.dumps(out))
"""

APPEND = r"""
import concurrent.futures, datetime as dt, gc, json, pickle, sys, threading, time
from pathlib import Path
import psutil
import pyarrow as pa
from evalpipe.artifacts.writer import RunWriter
pa.array([0])
src, run_dir = Path(sys.argv[1]), Path(sys.argv[2])
proc = psutil.Process()
samples = []
stop = threading.Event()

def sample():
    while not stop.is_set():
        samples.append(proc.memory_info().rss)
        time.sleep(0.005)

writer = RunWriter(run_dir, started_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
receiver = concurrent.futures.ThreadPoolExecutor(1)
appender = concurrent.futures.ThreadPoolExecutor(1)

def load(data):
    t0 = time.thread_time()
    done = pickle.loads(data)
    return done, time.thread_time() - t0

def append(done):
    t0 = time.thread_time()
    writer.add_encoded(done.encoded, done.results)
    return time.thread_time() - t0

gc.freeze()
gc.disable()  # as the flow's shards run (_ShardCollector): a young collection now and then
paths = sorted(src.glob("*.pkl"))
cpu = 0.0
unpickle = 0.0
n = 0
base = None
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
kept = []
for path in paths:
    data = path.read_bytes()
    done, took = receiver.submit(load, data).result()
    unpickle += took
    del data
    cpu += appender.submit(append, done).result()
    n += done.items
    kept.append(done.results)  # the flow keeps every shard's (stripped) results
    del done
    if gc.get_count()[0] >= 200_000:
        gc.collect(1)
        gc.freeze()
    if base is None:
        base = proc.memory_info().rss
t0 = time.process_time()
writer.finish({})
finish = time.process_time() - t0
stop.set()
sampler.join()
print(json.dumps({
    "unpickle": 1e6 * unpickle / n,
    "append": 1e6 * cpu / n,
    "flow": 1e6 * (cpu + unpickle) / n,
    "finish_ms": 1e3 * finish,
    "rss_after_first_mib": base / 2**20,
    "rss_peak_mib": max(samples) / 2**20,
    "rss_growth_mib": (max(samples) - base) / 2**20,
    "arrow_pool_mib": pa.total_allocated_bytes() / 2**20,
}))
"""

COMPARE = r"""
import sys
import pyarrow.parquet as pq
a, b = sys.argv[1], sys.argv[2]
for name in ("runs", "items", "scores", "summary"):
    fa, fb = pq.ParquetFile(f"{a}/{name}.parquet"), pq.ParquetFile(f"{b}/{name}.parquet")
    groups = [fa.metadata.row_group(i).num_rows for i in range(fa.num_row_groups)]
    assert groups == [fb.metadata.row_group(i).num_rows for i in range(fb.num_row_groups)], name
    ta, tb = fa.read(), fb.read()
    if name == "summary":
        ta, tb = ta.drop_columns(["run_ended_at"]), tb.drop_columns(["run_ended_at"])
    assert ta.schema.equals(tb.schema, check_metadata=True), name
    assert ta.equals(tb), name
    print(name, ta.num_rows, "rows,", len(groups), "row groups: identical")
"""


def _child(code: str, src: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"child failed:\n{done.stderr[-4000:]}")
    lines = done.stdout.strip().splitlines()
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="another checkout's src (main's)")
    parser.add_argument("--shards", type=int, default=50)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", help="write the medians as JSON here")
    parser.add_argument(
        "--made", help="a directory of shards an earlier run made (its make/shards): not made again"
    )
    args = parser.parse_args()
    trees = {"against": Path(args.against), "this": SRC}
    report: dict[str, Any] = {"shards": args.shards, "size": args.size, "load": [os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="bench-writer-") as tmp:
        root = Path(tmp)
        if args.made:
            shards = Path(args.made)
        else:
            (root / "make").mkdir()
            _child(
                MAKE,
                trees["against"],
                str(args.shards),
                str(args.size),
                str(root / "make"),
                str(HERE),
            )
            shards = root / "make" / "shards"
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for trial in range(args.repeat):  # interleaved: both trees see the same machine load
            for name, src in trees.items():
                sent = root / f"sent-{name}"
                run_dir = root / f"{name}-{trial}" / "run"
                result = _child(ENCODE, src, str(shards), str(sent))
                result.update(_child(APPEND, src, str(sent), str(run_dir)))
                runs[name].append(result)
                print(name, trial, json.dumps({k: round(v, 2) for k, v in result.items()}))
            report["load"].append(os.getloadavg())
        compared = subprocess.run(
            [
                sys.executable,
                "-c",
                COMPARE,
                str(root / "against-0" / "run"),
                str(root / "this-0" / "run"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        print(compared.stdout.strip() or compared.stderr[-2000:])
        report["identical"] = compared.returncode == 0
    medians = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in runs.items()}
    report["medians"] = medians
    report["runs"] = runs
    print(f"\n{args.shards} shards x {args.size} calls, median of {args.repeat}")
    print(f"{'':22s}{'against':>10s}{'this':>10s}{'ratio':>8s}")
    for key in medians["this"]:
        a, b = medians["against"][key], medians["this"][key]
        print(f"{key:22s}{a:10.1f}{b:10.1f}{b / a if a else float('nan'):8.2f}")
    print(f"load average {report['load']}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
