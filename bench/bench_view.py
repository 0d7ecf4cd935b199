"""Benchmark (not a test): `evalpipe view`'s pages on a 100,000-item run, target < 1 s each.

The run is bench/bench_artifacts.py's workload (100,000 target calls of a scripted agent, each with
a tool call, checked by a LocalEvaluator with three real checks, written by RunWriter in batches
as the pipeline writes them; every 50th call failed), under ``{tmp}/runs/bench/``; pass ``--run``
to reuse a run directory made before (``bench_artifacts.py --out DIR --keep``).

The view's app (``evalpipe.view.app.create_app``, no warm-up) is served by uvicorn on a free
loopback port in this process, and each page is fetched over HTTP with httpx: once cold (the
first visit reads the run: the sample index, the report's aggregates, the comparison) and then
``--repeat`` times warm (what every later visit costs). Each fetch's CPU time is this process's
(the server's threads and the client), measured beside its wall time: the machine may be shared. Compare pairs the run with itself (the
statistics over 294,000 paired scores are computed all the same).

Usage: python bench/bench_view.py [--items 100000] [--run RUN_DIR] [--repeat 5]
Writes bench/results/view.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_artifacts import stream  # noqa: E402

from evalpipe.view.app import create_app  # noqa: E402
from evalpipe.view.urls import (  # noqa: E402
    compare_item_path,
    compare_path,
    item_path,
    run_path,
    samples_path,
    trends_path,
)

TARGET_S = 1.0


def _serve(root: str) -> tuple[str, uvicorn.Server, threading.Thread]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(root), log_level="warning", access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/", timeout=5).status_code == 200:
                return url, server, thread
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit("the view did not start within 60 s")


def _pages(suite: str, run: str) -> list[tuple[str, str]]:
    key = f"{suite}/{run}"
    return [
        ("runs list", "/"),
        ("run (report, judge cost)", run_path(suite, run)),
        ("samples, page 1", samples_path(suite, run)),
        ("samples, errored items", samples_path(suite, run, status="error")),
        ("samples, metric failed", samples_path(suite, run, metric="m0", status="fail")),
        ("samples, sorted by latency, last page", samples_path(suite, run, sort="latency", desc=1, page=1000)),
        ("samples, text 'tokyo' sorted by response", samples_path(suite, run, q="tokyo", sort="response")),
        ("item (transcript, reasons)", item_path(suite, run, "overall", "49999")),
        ("compare", compare_path(a=key, b=key)),
        ("compare, one item side by side", compare_item_path(a=key, b=key, agent="overall", row="row5", rep=42)),
        ("trends", trends_path(suite)),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--run", type=Path, default=None, help="an existing run directory")
    parser.add_argument("--repeat", type=int, default=5, help="warm fetches of each page")
    args = parser.parse_args()

    tmp = None
    if args.run is None:
        tmp = Path(tempfile.mkdtemp(prefix="evalpipe-bench-view-"))
        run_dir = tmp / "runs" / "bench" / "bench-100k"
        t0 = time.perf_counter()
        asyncio.run(stream(run_dir, args.items, 2_000))
        print(f"run of {args.items:,} items written in {time.perf_counter() - t0:.0f} s")
    else:
        run_dir = args.run.resolve()
    root = str(run_dir.parent.parent)
    url, server, thread = _serve(root)
    results: list[dict[str, Any]] = []
    try:
        with httpx.Client(timeout=120) as client:
            for name, path in _pages(run_dir.parent.name, run_dir.name):
                t0, c0 = time.perf_counter(), time.process_time()
                response = client.get(url + path)
                cold, cold_cpu = time.perf_counter() - t0, time.process_time() - c0
                if response.status_code != 200:
                    raise SystemExit(f"{name}: {path} answered {response.status_code}")
                warm, warm_cpu = [], []
                for _ in range(args.repeat):
                    t0, c0 = time.perf_counter(), time.process_time()
                    client.get(url + path).raise_for_status()
                    warm.append(time.perf_counter() - t0)
                    warm_cpu.append(time.process_time() - c0)
                results.append(
                    {
                        "page": name,
                        "path": path,
                        "cold_s": round(cold, 3),
                        "cold_cpu_s": round(cold_cpu, 3),
                        "warm_median_s": round(statistics.median(warm), 3),
                        "warm_median_cpu_s": round(statistics.median(warm_cpu), 3),
                        "warm_max_s": round(max(warm), 3),
                        "bytes": len(response.content),
                    }
                )
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    report = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "items": args.items if args.run is None else None,
        "run": str(run_dir),
        "target_s": TARGET_S,
        "pages": results,
    }
    HERE.joinpath("results").mkdir(exist_ok=True)
    HERE.joinpath("results", "view.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"load average {os.getloadavg()[0]:.2f}; CPU: this process's (server and client)")
    print(f"{'page':<44} {'cold s':>7} {'CPU':>6} {'warm s':>7} {'CPU':>6} {'max s':>7} {'KiB':>6}")
    for r in results:
        flag = "" if r["warm_max_s"] < TARGET_S else "  over target"
        print(
            f"{r['page']:<44} {r['cold_s']:>7.3f} {r['cold_cpu_s']:>6.3f} "
            f"{r['warm_median_s']:>7.3f} {r['warm_median_cpu_s']:>6.3f} "
            f"{r['warm_max_s']:>7.3f} {r['bytes'] / 1024:>6.0f}{flag}"
        )


if __name__ == "__main__":
    main()
