"""The LLM judge against a real OpenAI-compatible server with a real (weak) model: structured verdicts,
the negotiated mode, structured output off, token usage as reported, record and offline replay."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evalpipe import EvalItem, Message
from evalpipe.cache import ResponseCache
from evalpipe.evaluators.judge import JudgeEvaluator
from evalpipe.local_model import MODEL_ID, LocalModelServer
from evalpipe.results import EvalResults
from fakes.openai_server import closed_port

QA = [
    ("What's the weather in Paris?", "It is sunny and 21°C in Paris."),
    ("What's the weather in Oslo?", "It is snowy and -3°C in Oslo."),
    ("How long do I have to return a jacket?", "You can return unused items within 30 days."),
    ("What is the capital of Japan?", "Tokyo is the capital of Japan."),
    ("Find me a hotel in Tokyo.", "Our tents are made of ripstop nylon and weigh 2 kg."),
    ("What's 2 + 2?", "The answer is 4."),
]
ITEMS = [
    EvalItem([Message("user", [q]), Message("assistant", [a])], item_id=f"qa{i}")
    for i, (q, a) in enumerate(QA)
]
MAX_TOKENS = 128


def judge(server: LocalModelServer, **kwargs: Any) -> JudgeEvaluator:
    """One request at a time: the server answers one at a time, and a request queued behind the
    others spent its timeout waiting (six queued under load: the last timed out, unanswered).
    The timeout then bounds one answer; one took up to ~80 s on a loaded machine."""
    return JudgeEvaluator(
        {"base_url": server.base_url, "model": MODEL_ID, "timeout": 300, "max_retries": 1},
        metrics=["relevance"],
        max_concurrency=1,
        threshold=3,
        max_tokens=MAX_TOKENS,
        **kwargs,
    )


def scores(results: EvalResults) -> list[Any]:
    return [s for item in results.items for s in item.scores]


def canonical(results: EvalResults) -> bytes:
    """Everything a score says, as JSON bytes, leaving out what differs by design between a live
    call and a replay (latency, the cached flag)."""
    out = []
    for s in scores(results):
        sample = {k: v for k, v in (s.sample or {}).items() if k != "cached"}
        diagnostics = [(d.severity, d.message) for d in s.diagnostics]
        out.append([s.name, s.score, s.passed, s.label, s.rating, s.reason, s.error_code])
        out.append([sample, s.token_usage, diagnostics])
    return json.dumps(out, ensure_ascii=False, sort_keys=True).encode("utf-8")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("judge-cache")


@pytest.fixture(scope="module")
def structured(local_server: LocalModelServer, cache_dir: Path) -> EvalResults:
    """The six items judged with structured output on (the default negotiation), recorded."""
    return asyncio.run(judge(local_server, cache=ResponseCache(cache_dir)).evaluate(ITEMS))


@pytest.fixture(scope="module")
def unstructured(local_server: LocalModelServer) -> EvalResults:
    """The same items with structured output off: the prompt alone."""
    return asyncio.run(judge(local_server, structured_output=False).evaluate(ITEMS))


def parse_rate(results: EvalResults) -> float:
    judged = scores(results)
    return sum(1 for s in judged if s.score is not None) / len(judged)


def test_structured_verdicts_parse_on_at_least_95_percent(structured: EvalResults) -> None:
    """With structured output on, the real server's verdicts parse on >= 95% of (item, metric) pairs, in the json_object+schema mode it negotiated."""
    assert parse_rate(structured) >= 0.95, [s.error_message for s in scores(structured)]
    modes = {(s.sample or {}).get("structured_output") for s in scores(structured)}
    assert modes == {"json_object_schema"}  # llama-cpp-python refuses json_schema
    for s in scores(structured):
        if s.score is not None:
            assert s.score in {1.0, 2.0, 3.0, 4.0, 5.0}
            assert s.reason
    counts = structured.result_counts
    assert counts["errored"] <= len(ITEMS) * 0.05
    assert counts["passed"] + counts["failed"] + counts["errored"] == len(ITEMS)


def test_structured_output_off_is_counted_as_errored_not_failed(
    structured: EvalResults, unstructured: EvalResults
) -> None:
    """With structured output off, the same items' unusable verdicts are errors (JudgeParseError, no score), never fails."""
    off = scores(unstructured)
    assert {(s.sample or {}).get("structured_output") for s in off} == {"prompt"}
    unusable = [s for s in off if s.score is None]
    assert len(unusable) >= len(off) - 1  # measured: none parses; allow one lucky answer
    assert all(s.error_code == "JudgeParseError" and s.label == "error" for s in unusable)
    assert unstructured.result_counts["errored"] == len(unusable)
    assert unstructured.result_counts["failed"] == sum(1 for s in off if s.passed is False)
    assert unstructured.per_evaluator["relevance"]["errored"] == len(unusable)
    assert parse_rate(unstructured) < parse_rate(structured)


def test_token_usage_is_what_the_server_reported(structured: EvalResults, cache_dir: Path) -> None:
    """Each verdict's token usage is the usage in the server's own response body (as recorded), and each item sums its metrics."""
    reported = Counter(
        (u["prompt_tokens"], u["completion_tokens"], u["total_tokens"])
        for u in (e.response["usage"] for e in ResponseCache(cache_dir).entries())
    )
    used = Counter(
        (u["input_tokens"], u["output_tokens"], u["total_tokens"])
        for u in (s.token_usage or {} for s in scores(structured))
    )
    assert used == reported
    assert sum(reported.values()) == len(ITEMS)
    assert all(prompt > 200 for prompt, _, _ in used)  # the judge prompt, by the real tokenizer
    for item in structured.items:
        assert item.token_usage == item.scores[0].token_usage


async def test_recorded_verdicts_replay_offline_byte_identical(
    structured: EvalResults, cache_dir: Path
) -> None:
    """The recorded run replays from the cache with no server (a closed port) to byte-identical verdicts."""
    offline = JudgeEvaluator(
        {"base_url": f"http://127.0.0.1:{closed_port()}/v1", "model": MODEL_ID, "max_retries": 0},
        metrics=["relevance"],
        threshold=3,
        max_tokens=MAX_TOKENS,
        cache=ResponseCache(cache_dir, mode="replay"),
    )
    replayed = await offline.evaluate(ITEMS)
    assert canonical(replayed) == canonical(structured)
    assert all((s.sample or {}).get("cached") is True for s in scores(replayed))
    assert all(s.latency_s == 0.0 for s in scores(replayed))
    assert not any(s.error_code for s in scores(replayed))  # a request would have been refused
