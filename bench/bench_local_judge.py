"""Benchmark (not a test): the LLM judge against a real model server, and the server's own floor.

SmolLM2-135M-Instruct on llama-cpp-python's OpenAI-compatible server (the `local` extra), started
here on 127.0.0.1 unless --base-url names a running one (started by evalpipe.local_model).

1. The judge (JudgeEvaluator, one metric) over ITEMS question/answer pairs, once per
   structured-output setting: the default negotiation (json_schema is refused, json_object_schema
   is used), json_object alone, and the prompt alone. For each: items/s, tokens/s (all tokens and
   output tokens) and the parse rate (verdicts with a score / judged pairs).
2. The floor: the very requests the negotiated judge sent (read back from its response cache), sent
   again one after another with plain httpx, no evalpipe in between. The server answers one request
   at a time, so this is the best any client can do; the judge's wall time over it is its overhead.
   Judge and floor alternate for --trials rounds (the machine's speed drifts by tens of percent
   between minutes); the medians and the median of the per-round ratios are reported.
3. Cache replay: the negotiated run again from its cache with no server (a closed port), and the
   speed-up over the live run.

Usage: python bench/bench_local_judge.py [--items 8] [--trials 3] [--max-tokens 128] [--base-url URL]
Writes bench/results/local_judge.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from evalpipe import EvalItem, Message
from evalpipe.cache import ResponseCache
from evalpipe.evaluators.judge import JudgeEvaluator
from evalpipe.local_model import MODEL_ID, LocalModelServer
from evalpipe.results import EvalResults

HERE = Path(__file__).resolve().parent

QA = [
    ("What's the weather in Paris?", "It is sunny and 21°C in Paris."),
    ("What's the weather in Oslo?", "It is snowy and -3°C in Oslo."),
    ("How long do I have to return a jacket?", "You can return unused items within 30 days."),
    ("What is the capital of Japan?", "Tokyo is the capital of Japan."),
    ("Find me a hotel in Tokyo.", "Our tents are made of ripstop nylon and weigh 2 kg."),
    ("What's 2 + 2?", "The answer is 4."),
    ("Who wrote Hamlet?", "Hamlet was written by William Shakespeare."),
    ("How do I boil an egg?", "Put the egg in boiling water for about nine minutes."),
    ("What's the tallest mountain?", "Mount Everest, at 8,849 metres."),
    ("Can I bring my dog to the hotel?", "The museum opens at nine on weekdays."),
    ("Translate 'thank you' to French.", "Merci."),
    ("What is photosynthesis?", "Plants turn light, water and CO2 into sugar and oxygen."),
]

SETTINGS: list[tuple[str, bool | list[str]]] = [
    ("negotiated", True),
    ("json_object", ["json_object"]),
    ("prompt", False),
]


def items(n: int) -> list[EvalItem]:
    pairs = [QA[i % len(QA)] for i in range(n)]
    return [
        EvalItem([Message("user", [q]), Message("assistant", [a])], item_id=f"qa{i}")
        for i, (q, a) in enumerate(pairs)
    ]


def judge(
    base_url: str, max_tokens: int, structured: bool | list[str], **kw: Any
) -> JudgeEvaluator:
    return JudgeEvaluator(
        {"base_url": base_url, "model": MODEL_ID, "timeout": 300, "max_retries": 1},
        metrics=["relevance"],
        threshold=3,
        max_tokens=max_tokens,
        structured_output=structured,
        **kw,
    )


def tally(results: EvalResults, wall: float) -> dict[str, Any]:
    scores = [s for item in results.items for s in item.scores]
    tokens = sum((s.token_usage or {}).get("total_tokens", 0) for s in scores)
    output = sum((s.token_usage or {}).get("output_tokens", 0) for s in scores)
    modes = sorted({str((s.sample or {}).get("structured_output")) for s in scores})
    return {
        "pairs": len(scores),
        "wall_s": round(wall, 3),
        "items_per_s": round(len(scores) / wall, 4),
        "tokens_per_s": round(tokens / wall, 1),
        "output_tokens_per_s": round(output / wall, 1),
        "parse_rate": round(sum(1 for s in scores if s.score is not None) / len(scores), 4),
        "errors": sorted({s.error_code for s in scores if s.error_code}),
        "modes": modes,
    }


async def floor(base_url: str, cache_dir: Path) -> dict[str, Any]:
    """The recorded requests again, sequentially, with plain httpx."""
    bodies = [
        {k: v for k, v in e.request.items() if k != "repetition"}
        for e in sorted(ResponseCache(cache_dir).entries(), key=lambda e: e.created)
    ]
    tokens = output = 0
    async with httpx.AsyncClient(timeout=300) as http:
        started = time.perf_counter()
        for body in bodies:
            response = await http.post(f"{base_url}/chat/completions", json=body)
            response.raise_for_status()
            usage = response.json()["usage"]
            tokens += usage["total_tokens"]
            output += usage["completion_tokens"]
        wall = time.perf_counter() - started
    return {
        "requests": len(bodies),
        "wall_s": round(wall, 3),
        "items_per_s": round(len(bodies) / wall, 4),
        "tokens_per_s": round(tokens / wall, 1),
        "output_tokens_per_s": round(output / wall, 1),
    }


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of the median wall time (the other fields of that same run)."""
    ordered = sorted(rows, key=lambda r: r["wall_s"])
    return {**ordered[len(ordered) // 2], "trials_wall_s": [r["wall_s"] for r in rows]}


async def bench(base_url: str, n: int, max_tokens: int, trials: int) -> dict[str, Any]:
    batch = items(n)
    # warm-up: load the model id once (the server loads one model id at a time)
    await judge(base_url, max_tokens, ["json_object_schema"]).evaluate(batch[:1])
    report: dict[str, Any] = {"modes": {}}
    with tempfile.TemporaryDirectory(prefix="bench-judge-cache-") as tmp:
        live: list[dict[str, Any]] = []
        floors: list[dict[str, Any]] = []
        for trial in range(trials):
            cache_dir = Path(tmp) / f"trial-{trial}"
            evaluator = judge(base_url, max_tokens, True, cache=ResponseCache(cache_dir))
            started = time.perf_counter()
            results = await evaluator.evaluate(batch)
            live.append(tally(results, time.perf_counter() - started))
            floors.append(await floor(base_url, cache_dir))
            print(f"  trial {trial}: judge {live[-1]}", file=sys.stderr, flush=True)
            print(f"  trial {trial}: floor {floors[-1]}", file=sys.stderr, flush=True)
        report["modes"]["negotiated"] = median_row(live)
        report["floor"] = median_row(floors)
        per_trial = sorted(j["wall_s"] / f["wall_s"] for j, f in zip(live, floors, strict=True))
        for label, setting in SETTINGS[1:]:
            evaluator = judge(base_url, max_tokens, setting)
            started = time.perf_counter()
            results = await evaluator.evaluate(batch)
            report["modes"][label] = tally(results, time.perf_counter() - started)
            print(f"  {label}: {report['modes'][label]}", file=sys.stderr, flush=True)
        offline = judge(
            f"http://127.0.0.1:{closed_port()}/v1",
            max_tokens,
            True,
            cache=ResponseCache(Path(tmp) / "trial-0", mode="replay"),
        )
        started = time.perf_counter()
        replayed = await offline.evaluate(batch)
        report["replay"] = tally(replayed, time.perf_counter() - started)
    median = report["modes"]["negotiated"]
    report["ratios"] = {
        "judge_wall_over_floor_median_of_trials": round(per_trial[len(per_trial) // 2], 3),
        "judge_wall_over_floor_per_trial": [round(r, 3) for r in per_trial],
        "judge_tokens_per_s_over_floor": round(
            median["tokens_per_s"] / report["floor"]["tokens_per_s"], 3
        ),
        "replay_speedup": round(live[0]["wall_s"] / max(report["replay"]["wall_s"], 1e-9), 1),
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=8, help="judged items per mode (8)")
    parser.add_argument("--trials", type=int, default=3, help="judge/floor rounds (3)")
    parser.add_argument("--max-tokens", type=int, default=128, help="judge answer budget (128)")
    parser.add_argument("--base-url", default=None, help="a running server (default: start one)")
    args = parser.parse_args()
    server: LocalModelServer | None = None
    base_url = args.base_url
    if base_url is None:
        server = LocalModelServer().start()
        base_url = server.base_url
    try:
        report = asyncio.run(bench(base_url, args.items, args.max_tokens, args.trials))
    finally:
        if server is not None:
            server.stop()
    report["setup"] = {
        "items": args.items,
        "trials": args.trials,
        "metric": "relevance",
        "max_tokens": args.max_tokens,
        "model": MODEL_ID,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print(f"{'mode':<14}{'items/s':>9}{'tokens/s':>10}{'out tok/s':>11}{'parse':>8}  used")
    for label, row in [*report["modes"].items(), ("floor", report["floor"])]:
        print(
            f"{label:<14}{row['items_per_s']:>9.3f}{row['tokens_per_s']:>10.1f}"
            f"{row['output_tokens_per_s']:>11.1f}{row.get('parse_rate', float('nan')):>8.2f}"
            f"  {', '.join(row.get('modes', ['(direct httpx)']))}"
        )
    replay = report["replay"]
    print(f"replay (no server): {replay['wall_s']:.3f}s, parse {replay['parse_rate']:.2f}")
    for key, value in report["ratios"].items():
        print(f"{key}: {value}")
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "local_judge.json").write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
