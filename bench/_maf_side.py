"""The MAF side of bench_evaluate.py, run by an interpreter that has agent-framework-core installed.

Prints one JSON object: MAF's evaluate_agent wall time for RUNS x LATENCY, and LocalEvaluator's cost
per prebuilt item for the same two checks evalpipe is measured with.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import warnings

warnings.simplefilter("ignore")

from agent_framework import (  # noqa: E402
    Content,
    EvalItem,
    LocalEvaluator,
    Message,
    evaluate_agent,
    keyword_check,
    tool_called_check,
)


class Response:
    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages


def transcript() -> list[Message]:
    return [
        Message(
            "assistant",
            [Content.from_function_call("c1", "get_weather", arguments={"city": "Paris"})],
        ),
        Message("tool", [Content.from_function_result("c1", result={"temp_c": 22})]),
        Message("assistant", ["It is sunny in Paris."]),
    ]


class SleepyAgent:
    name = "sleepy"

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def run(self, messages: object, **kwargs: object) -> Response:
        await asyncio.sleep(self.latency)
        return Response(transcript())


async def main(runs: int, latency: float, items: int, trials: int) -> dict[str, float]:
    checks = LocalEvaluator(keyword_check("sunny", "paris"), tool_called_check("get_weather"))
    queries = [f"What's the weather in Paris? #{i}" for i in range(runs // 3)]
    started = time.perf_counter()
    await evaluate_agent(
        agent=SleepyAgent(latency), queries=queries, evaluators=checks, num_repetitions=3
    )
    wall = time.perf_counter() - started
    per_item = []
    kept = []  # same method as bench_evaluate.py: no frees inside the timed window
    for _ in range(trials):
        batch = [
            EvalItem([Message("user", ["What's the weather in Paris?"]), *transcript()])
            for _ in range(items)
        ]
        t0 = time.perf_counter()
        kept.append(await checks.evaluate(batch, eval_name="bench"))
        per_item.append((time.perf_counter() - t0) / items * 1e6)
    return {
        "runs": len(queries) * 3,
        "wall_s": wall,
        "local_us_per_item_median": statistics.median(per_item),
        "local_us_per_item_best": min(per_item),
    }


if __name__ == "__main__":
    runs, latency, items, trials = (
        int(sys.argv[1]),
        float(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    print(json.dumps(asyncio.run(main(runs, latency, items, trials))))
