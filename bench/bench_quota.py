"""Benchmark (not a test): a suite's judge against an endpoint with a quota of requests in flight.

The endpoint is tests/fakes/openai_server.py on loopback, taking ``--quota`` requests at once and
answering any request past them 429 at once (with ``Retry-After: --retry-after``); an accepted
request is answered after ``--latency`` seconds. The judge is built from a suite with
``concurrency: --concurrency`` (``evalpipe.suite.build_evaluators``, as a run builds it) and judges
``--items`` items on three metrics (240 requests by default), as one shard's evaluation does.

Reported per run: the requests the endpoint received, how many it answered 429 (and their share),
errored scores, the wall time from the first request's arrival to the last answer, the quota's
floor (``ceil(requests / quota) * latency``: the endpoint cannot answer faster) and the CPU time of
the process. ``--src DIR`` measures another checkout's ``src`` (e.g. /work/main/src) in a child
process with the same fake server; ``--repeat`` runs each that many times.

``--flow`` runs the same judging through ``evalpipe run`` instead: a suite of ``--items`` rows
against an instant local agent, judged on three metrics, on the Prefect server of ``PREFECT_HOME``
(set it; ``evalpipe server stop`` afterwards). The wall time is still the endpoint's: from its first
request to its last answer.

Usage: python bench/bench_quota.py [--items 80] [--quota 6] [--latency 0.2] [--retry-after 1]
                                   [--concurrency 32] [--repeat 3] [--src DIR] [--flow]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = """
import asyncio, json, resource, sys, time
sys.path.insert(0, {tests!r})
from fakes.openai_server import FakeOpenAIServer, verdict
from evalpipe import EvalItem, Message
from evalpipe.suite import EvalSuite, build_evaluators


def main():
    with FakeOpenAIServer(
        lambda request: verdict(4),
        default_delay={latency},
        quota={quota},
        quota_retry_after={retry_after!r},
        quota_delay={quota_delay},
    ) as server:
        suite = EvalSuite(
            name="quota",
            dataset="unused.jsonl",
            concurrency={concurrency},
            evaluators=[{{"judge": {{"base_url": server.base_url, "model": "judge",
                          "metrics": ["relevance", "coherence", "fluency"]}}}}],
        )
        [judge] = build_evaluators(suite)
        items = [
            EvalItem([Message("user", [f"question {{i}}"]), Message("assistant", [f"answer {{i}}"])])
            for i in range({items})
        ]
        cpu = time.process_time()
        results = asyncio.run(judge.evaluate(items, eval_name="quota"))
        cpu = time.process_time() - cpu
        first = min(r.received_at for r in server.requests)
        errored = sum(
            1 for item in results.items for s in item.scores if s.error_code is not None
        )
        print(json.dumps({{
            "requests": len(server.requests),
            "rejected": server.rejected,
            "errored_scores": errored,
            "max_in_flight": server.max_in_flight,
            "wall_s": server.last_answer_at - first,
            "cpu_s": cpu,
        }}))


main()
"""


def run_once(src: Path, args: argparse.Namespace) -> dict[str, float]:
    code = CHILD.format(
        tests=str(ROOT / "tests"),
        latency=args.latency,
        quota=args.quota,
        retry_after=args.retry_after,
        quota_delay=args.latency if args.slow_429 else 0.0,
        concurrency=args.concurrency,
        items=args.items,
    )
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


AGENT = """
from evalpipe import AgentResponse, Message


class Echo:
    name = "echo"

    async def run(self, messages, **kwargs):
        return AgentResponse(messages=[Message("assistant", ["ok: " + messages[-1].text])])


agent = Echo()
"""


def run_flow(src: Path, args: argparse.Namespace) -> dict[str, float]:
    """The judging of a suite run through ``evalpipe run`` (see the module docstring)."""
    import tempfile

    import yaml

    sys.path.insert(0, str(ROOT / "tests"))
    from fakes.openai_server import FakeOpenAIServer, verdict

    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeOpenAIServer(
            lambda _r: verdict(4),
            default_delay=args.latency,
            quota=args.quota,
            quota_retry_after=args.retry_after,
            quota_delay=args.latency if args.slow_429 else 0.0,
        ) as server,
    ):
        root = Path(tmp)
        (root / "agents.py").write_text(AGENT, encoding="utf-8")
        with (root / "rows.jsonl").open("w", encoding="utf-8") as fh:
            for i in range(args.items):
                fh.write(json.dumps({"id": f"r{i}", "query": f"question {i}"}) + "\n")
        judge = {"base_url": server.base_url, "model": "judge",
                 "metrics": ["relevance", "coherence", "fluency"]}  # fmt: skip
        suite = {"name": "quota", "target": "agents:agent", "dataset": "rows.jsonl",
                 "concurrency": args.concurrency, "evaluators": [{"judge": judge}],
                 "output_dir": str(root / "runs")}  # fmt: skip
        (root / "suite.yaml").write_text(yaml.safe_dump(suite), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(src)}
        done = subprocess.run(
            [sys.executable, "-m", "evalpipe.cli", "run", "suite.yaml", "--no-progress"],
            cwd=root, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        first = min(r.received_at for r in server.requests)
        import pyarrow.parquet as pq

        [run_dir] = (root / "runs" / "quota").iterdir()
        statuses = pq.read_table(run_dir / "scores.parquet", columns=["status"]).column("status")
        return {
            "requests": len(server.requests),
            "rejected": server.rejected,
            "errored_scores": statuses.to_pylist().count("error"),
            "max_in_flight": server.max_in_flight,
            "wall_s": (server.last_answer_at or first) - first,
            "cpu_s": float("nan"),
            "exit": done.returncode,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=80)
    parser.add_argument("--quota", type=int, default=6)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--retry-after", default="1")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--slow-429", action="store_true", help="answer a 429 after --latency too (not at once)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    parser.add_argument("--flow", action="store_true", help="through evalpipe run (see above)")
    args = parser.parse_args()
    calls = args.items * 3
    floor = math.ceil(calls / args.quota) * args.latency
    print(
        f"{calls} judge calls, quota {args.quota} in flight, latency {args.latency:g} s, "
        f"Retry-After {args.retry_after} s, suite concurrency {args.concurrency}: floor {floor:.1f} s"
    )
    for _ in range(args.repeat):
        r = run_flow(args.src, args) if args.flow else run_once(args.src, args)
        print(
            f"  {args.src}: {r['requests']:.0f} requests, {r['rejected']:.0f} answered 429 "
            f"({100 * r['rejected'] / r['requests']:.1f}%), {r['errored_scores']:.0f} errored "
            f"scores, at most {r['max_in_flight']:.0f} taken at once, wall {r['wall_s']:.2f} s "
            f"({r['wall_s'] / floor:.2f}x the floor), CPU {r['cpu_s']:.2f} s"
        )


if __name__ == "__main__":
    main()
