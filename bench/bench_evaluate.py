"""Benchmark (not a test): evaluate_agent against the concurrency floor, and local-check cost per item.

1. Agent runs: RUNS calls of an agent that sleeps LATENCY, at max_concurrency C. The floor is
   ceil(RUNS / C) * LATENCY, the best any scheduler can do; we report wall / floor.
2. Local checks: keyword_check + tool_called_check over prebuilt items (cold split caches), in µs per
   item, through LocalEvaluator.evaluate.
3. MAF (agent-framework-core, the maf extra; --maf-python picks another interpreter): the same two measurements
   through MAF's evaluate_agent (which runs agents one at a time) and its LocalEvaluator.

Usage: python bench/bench_evaluate.py [--runs 600] [--latency 0.05] [--concurrency 32]
                                      [--items 2000] [--trials 5] [--maf-python PATH|'']
Writes bench/results/evaluate.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from evalpipe import (
    AgentResponse,
    EvalItem,
    FunctionCallContent,
    FunctionResultContent,
    LocalEvaluator,
    Message,
    evaluate_agent,
    keyword_check,
    tool_called_check,
)

HERE = Path(__file__).resolve().parent


def transcript() -> list[Message]:
    """A realistic agent turn: a tool call, its result, and the answer."""
    return [
        Message(
            "assistant",
            [FunctionCallContent(name="get_weather", arguments={"city": "Paris"}, call_id="c1")],
        ),
        Message("tool", [FunctionResultContent(call_id="c1", result={"temp_c": 22})]),
        Message("assistant", ["It is sunny in Paris."]),
    ]


class SleepyAgent:
    """Stands in for a model call: sleeps, then answers with a fixed transcript."""

    name = "sleepy"

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        await asyncio.sleep(self.latency)
        return AgentResponse(messages=transcript())


def checks() -> LocalEvaluator:
    return LocalEvaluator(keyword_check("sunny", "paris"), tool_called_check("get_weather"))


async def bench_runs(runs: int, latency: float, concurrency: int, trials: int) -> dict[str, Any]:
    queries = [f"What's the weather in Paris? #{i}" for i in range(runs // 3)]
    n = len(queries) * 3
    floor = math.ceil(n / concurrency) * latency
    walls = []
    for _ in range(trials):
        started = time.perf_counter()
        [result] = await evaluate_agent(
            agent=SleepyAgent(latency),
            queries=queries,
            evaluators=checks(),
            num_repetitions=3,
            max_concurrency=concurrency,
        )
        walls.append(time.perf_counter() - started)
        assert result.passed == n, result.result_counts
    wall = statistics.median(walls)
    return {
        "runs": n,
        "latency_s": latency,
        "concurrency": concurrency,
        "floor_s": floor,
        "wall_s_median": wall,
        "wall_s_best": min(walls),
        "ratio_to_floor": wall / floor,
    }


async def bench_local(items: int, trials: int) -> dict[str, Any]:
    evaluator = checks()
    per_item = []
    kept = []  # keep every batch alive: freeing the previous one inside the timed window is not evaluation cost
    for _ in range(trials):
        batch = [
            EvalItem([Message("user", ["What's the weather in Paris?"]), *transcript()])
            for _ in range(items)
        ]
        started = time.perf_counter()
        kept.append(await evaluator.evaluate(batch, eval_name="bench"))
        per_item.append((time.perf_counter() - started) / items * 1e6)
        assert kept[-1].passed == items
    return {
        "items": items,
        "us_per_item_median": statistics.median(per_item),
        "us_per_item_best": min(per_item),
    }


def bench_maf(python: str, runs: int, latency: float, items: int, trials: int) -> dict[str, Any]:
    out = subprocess.run(
        [python, str(HERE / "_maf_side.py"), str(runs), str(latency), str(items), str(trials)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    data: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    data["floor_serial_s"] = data["runs"] * latency
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument(
        "--maf-python",
        default=sys.executable,
        help="interpreter with agent-framework-core (default: this one; '' skips MAF)",
    )
    args = parser.parse_args()

    runs = asyncio.run(bench_runs(args.runs, args.latency, args.concurrency, args.trials))
    local = asyncio.run(bench_local(args.items, args.trials))
    report: dict[str, Any] = {
        "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
        "evaluate_agent": runs,
        "local_checks": local,
    }
    print(
        f"evaluate_agent: {runs['runs']} runs x {runs['latency_s'] * 1000:.0f} ms at c={runs['concurrency']}: "
        f"wall {runs['wall_s_median']:.3f} s (best {runs['wall_s_best']:.3f}), floor {runs['floor_s']:.3f} s, "
        f"ratio {runs['ratio_to_floor']:.3f}x"
    )
    print(
        f"local checks (keyword_check + tool_called_check), {local['items']} prebuilt items: "
        f"{local['us_per_item_median']:.1f} µs/item median, {local['us_per_item_best']:.1f} best"
    )
    if args.maf_python:
        maf = bench_maf(args.maf_python, args.runs, args.latency, args.items, args.trials)
        report["maf"] = maf
        print(
            f"MAF evaluate_agent: {maf['runs']} runs: wall {maf['wall_s']:.2f} s "
            f"(serial floor {maf['floor_serial_s']:.2f} s); evalpipe is "
            f"{maf['wall_s'] / runs['wall_s_median']:.1f}x faster"
        )
        print(
            f"MAF LocalEvaluator: {maf['local_us_per_item_median']:.1f} µs/item median "
            f"({maf['local_us_per_item_median'] / local['us_per_item_median']:.2f}x evalpipe's)"
        )
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "evaluate.json").write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
