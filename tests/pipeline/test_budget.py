"""Budgets and adaptive concurrency through `evalpipe run`, against loopback OpenAI-compatible
endpoints that report usage (and one with a quota of requests in flight): a run stops at its
budget and resumes without repeating a call; a cost budget without prices is bad input; a run
against a quota-limited judge neither floods it nor crawls, and says so."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalpipe.artifacts import read_manifest, read_table
from fakes.openai_server import FakeOpenAIServer, chat, verdict

TARGET_USAGE = {"prompt_tokens": 160, "completion_tokens": 40, "total_tokens": 200}
JUDGE_USAGE = {"prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50}


@pytest.fixture
def target() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(
        lambda r: chat(f"answer to {r.messages[-1]['content']}", usage=TARGET_USAGE),
        default_delay=0.05,
    ) as server:
        yield server


@pytest.fixture
def judge() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(lambda _r: verdict(5, usage=JUDGE_USAGE), default_delay=0.05) as server:
        yield server


def _suite(tmp_path: Path, rows: int, **fields: Any) -> Path:
    with (tmp_path / "rows.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(rows):
            fh.write(json.dumps({"id": f"r{i}", "query": f"question {i}"}) + "\n")
    data: dict[str, Any] = {
        "name": "spend",
        "dataset": "rows.jsonl",
        "output_dir": str(tmp_path / "runs"),
        **fields,
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _run(tmp_path: Path, prefect_api: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    if prefect_api is not None:
        env["PREFECT_API_URL"] = prefect_api
    return subprocess.run(
        [sys.executable, "-m", "evalpipe.cli", "run", str(tmp_path / "suite.yaml"),
         "--no-progress", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _openai(server: FakeOpenAIServer, model: str) -> dict[str, Any]:
    return {"base_url": server.base_url, "model": model, "retry_backoff": 0.01}


def test_a_token_budget_stops_the_run_and_a_larger_one_finishes_it_without_repeating_a_call(
    tmp_path: Path, prefect_api: str, target: FakeOpenAIServer, judge: FakeOpenAIServer
) -> None:
    """Issue 34's done-when: a 5,000-token budget (40 target calls of 200 tokens, 40 judge
    requests of 50) stops the run: exit 3, the budget and the spend named, no new call after it,
    overshoot within the calls in flight; a second run with a larger budget makes only the
    missing calls (no target call and no judge request twice) and records what each run spent."""
    _suite(
        tmp_path,
        40,
        target={"openai": _openai(target, "agent-model")},
        evaluators=[{"judge": {**_openai(judge, "judge-model"), "metrics": ["relevance"]}}],
        concurrency=4,
    )
    first = _run(tmp_path, prefect_api, "--budget-tokens", "5000")
    assert first.returncode == 3, first.stdout + first.stderr[-3000:]
    assert "the run's budget of 5,000 tokens is spent" in first.stderr
    assert "target call(s) remain" in first.stderr
    spent = re.search(r"spent: ([\d,]+) tokens \(target ([\d,]+), judges ([\d,]+)\)", first.stderr)
    assert spent is not None, first.stderr[-2000:]
    total, by_target, by_judge = (int(g.replace(",", "")) for g in spent.groups())
    made_target, made_judge = len(target.requests), len(judge.requests)
    assert (by_target, by_judge) == (200 * made_target, 50 * made_judge)
    # no call starts once 5,000 are spent: over it by at most the calls in flight (4 each)
    assert 5000 <= total <= 5000 + 4 * 200 + 4 * 50
    assert made_target < 40
    [run_dir] = (tmp_path / "runs" / "spend").iterdir()
    assert not (run_dir / "manifest.json").exists()

    second = _run(tmp_path, prefect_api, "--budget-tokens", "100000")
    assert second.returncode == 0, second.stdout + second.stderr[-3000:]
    assert len(target.requests) == 40  # every target call made once over both runs
    assert len(judge.requests) == 40  # and every judge request
    sent = [r.text for r in target.requests]
    assert len(set(sent)) == 40
    manifest = read_manifest(run_dir)
    spend = manifest["spend"]
    assert spend["tokens"] == 200 * (40 - made_target) + 50 * (40 - made_judge)
    assert spend["earlier"]["tokens"] == total
    assert spend["budget"] == {"tokens": 100000, "cost_usd": None}
    assert f"spent: {spend['tokens']:,} tokens" in second.stdout
    assert manifest["concurrency"]["adaptive"] is True


def test_a_cost_budget_prices_the_calls_and_names_a_model_without_a_price(
    tmp_path: Path, prefect_api: str, target: FakeOpenAIServer, judge: FakeOpenAIServer
) -> None:
    """A cost budget with a model in use and no price is bad input (exit 2) named before any
    call; with prices the run's spend, each call's cost in runs.parquet and the budget agree."""
    fields: dict[str, Any] = {
        "target": {"openai": _openai(target, "agent-model")},
        "evaluators": [{"judge": {**_openai(judge, "judge-model"), "metrics": ["relevance"]}}],
        "prices": {"agent-model": {"input_per_1m": 1.0, "output_per_1m": 4.0}},
    }
    _suite(tmp_path, 4, **fields)
    refused = _run(tmp_path, None, "--budget-usd", "1")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "budget.cost_usd: no price for 'judge-model', the model of the judge 'Judge'" in (
        refused.stderr
    )
    assert (target.requests, judge.requests) == ([], [])

    fields["prices"]["judge-model"] = {"input_per_1m": 2.0, "output_per_1m": 10.0}
    _suite(tmp_path, 4, **fields)
    done = _run(tmp_path, prefect_api, "--budget-usd", "1")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    [run_dir] = (tmp_path / "runs" / "spend").iterdir()
    call_cost = (160 * 1.0 + 40 * 4.0) / 1e6
    judge_cost = (40 * 2.0 + 10 * 10.0) / 1e6
    spend = read_manifest(run_dir)["spend"]
    assert spend["cost_usd"] == pytest.approx(4 * call_cost + 4 * judge_cost)
    costs = read_table(run_dir, "runs", columns=["cost_usd"]).column("cost_usd").to_pylist()
    assert costs == pytest.approx([call_cost] * 4)


def test_workers_share_what_is_left_of_the_budget(
    tmp_path: Path, prefect_api: str, target: FakeOpenAIServer, judge: FakeOpenAIServer
) -> None:
    """On a process pool each shard gets a share of what is left as its own budget and the flow
    adds what they spent: the run stops within the budget plus the calls in flight, and a rerun
    makes only the missing calls."""
    _suite(
        tmp_path,
        48,
        target={"openai": _openai(target, "agent-model")},
        evaluators=[{"judge": {**_openai(judge, "judge-model"), "metrics": ["relevance"]}}],
        concurrency=4,
        shard_size=8,
        task_runner={"processes": 2},
    )
    first = _run(tmp_path, prefect_api, "--budget-tokens", "3000")
    assert first.returncode == 3, first.stdout + first.stderr[-3000:]
    made = 200 * len(target.requests) + 50 * len(judge.requests)
    # two shards at once, each over its share by at most its calls in flight (2 + 2 requests)
    assert 3000 <= made <= 3000 + 2 * (2 * 200 + 2 * 50)
    second = _run(tmp_path, prefect_api)
    assert second.returncode == 0, second.stdout + second.stderr[-3000:]
    assert (len(target.requests), len(judge.requests)) == (48, 48)


def test_a_quota_limited_judge_at_concurrency_32(tmp_path: Path, prefect_api: str) -> None:
    """Issue 34's done-when through a run: 240 judge requests (80 rows, 3 metrics) at concurrency
    32 against an endpoint that takes 6 in flight and answers 429 past them: 0 errored scores, at
    most 15% of the requests answered 429, the judging within twice the quota's floor, the limit's
    history in manifest.json and the terminal saying it was cut."""
    (tmp_path / "agents.py").write_text(
        "from evalpipe import AgentResponse, Message\n\n"
        "class Echo:\n    name = 'echo'\n\n"
        "    async def run(self, messages, **kwargs):\n"
        "        return AgentResponse(messages=[Message('assistant', ['ok: ' + messages[-1].text])])\n\n"
        "agent = Echo()\n",
        encoding="utf-8",
    )
    latency = 0.1
    with FakeOpenAIServer(lambda _r: verdict(4), default_delay=latency, quota=6) as server:
        metrics = ["relevance", "coherence", "fluency"]
        _suite(
            tmp_path,
            80,
            target="agents:agent",
            evaluators=[{"judge": {**_openai(server, "judge"), "metrics": metrics}}],
            concurrency=32,
        )
        done = _run(tmp_path, prefect_api)
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        first = min(r.received_at for r in server.requests)
        assert server.last_answer_at is not None
        wall = server.last_answer_at - first
    [run_dir] = (tmp_path / "runs" / "spend").iterdir()
    statuses = read_table(run_dir, "scores", columns=["status"]).column("status").to_pylist()
    assert (len(statuses), statuses.count("error")) == (240, 0)
    assert server.rejected <= 0.15 * len(server.requests), (server.rejected, len(server.requests))
    assert server.max_in_flight <= 6
    assert wall <= 2 * math.ceil(240 / 6) * latency, wall
    record = read_manifest(run_dir)["concurrency"]
    assert (record["limit"], record["adaptive"]) == (32, True)
    changes = record["changes"]
    assert changes[0]["before"] == 20
    assert {c["reason"] for c in changes} >= {"rate limited", "clean round"}
    assert "answered 429: its limit on requests in flight was cut" in done.stdout
