"""A suite against the real server through the real Prefect flow (evalpipe.pipeline.run_suite): the
sampled answers differ between repetitions, the report lists them as flaky with pass@k above pass^k,
and the token usage in the Parquet files is what the server reported."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from evalpipe.artifacts import read_table
from evalpipe.cache import ResponseCache
from evalpipe.local_model import MODEL_ID, LocalModelServer
from evalpipe.pipeline import RunOutcome, run_suite
from evalpipe.report import load_report_data
from evalpipe.suite import EvalSuite

QUERIES = ["Describe the sea in one sentence.", "Describe a forest in one sentence."]
REPETITIONS = 6


@pytest.fixture(scope="module")
def flow_run(
    local_server: LocalModelServer, local_prefect_api: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[RunOutcome, Path]:
    """Two queries x six repetitions at temperature 1 with no seed, recorded into a cache."""
    root = tmp_path_factory.mktemp("flow")
    dataset = root / "queries.jsonl"
    dataset.write_text(
        "".join(json.dumps({"id": f"q{i}", "query": q}) + "\n" for i, q in enumerate(QUERIES)),
        encoding="utf-8",
    )
    cache = root / "cache"
    suite = EvalSuite.model_validate(
        {
            "name": "real-model-flow",
            "target": {
                "openai": {
                    "base_url": local_server.base_url,
                    "model": MODEL_ID,
                    "temperature": 1.0,
                    "seed": None,
                    "max_tokens": 24,
                    "timeout": 120,
                    "cache": {"directory": str(cache), "mode": "record"},
                }
            },
            "dataset": str(dataset),
            "repetitions": REPETITIONS,
            "concurrency": 2,
            "evaluators": ["local_model.flow_checks:even_length"],
            "output_dir": str(root / "runs"),
        }
    )
    outcome = run_suite(suite, resume=False)
    assert outcome.state == "Completed", outcome.message
    return outcome, cache


def test_sampled_repetitions_are_flaky_in_the_report_with_pass_at_k_above_pass_hat_k(
    flow_run: tuple[RunOutcome, Path],
) -> None:
    """At temperature 1 the answers differ between repetitions; rows whose verdicts differ are in the report's flaky listing, where pass@k > pass^k."""
    outcome, _ = flow_run
    runs = read_table(outcome.run_dir, "runs").to_pylist()
    assert len(runs) == len(QUERIES) * REPETITIONS
    assert all(r["status"] == "ok" for r in runs), [r["error_message"] for r in runs]
    answers: dict[str, set[str]] = defaultdict(set)
    for item in read_table(outcome.run_dir, "items", columns=["row_id", "response"]).to_pylist():
        answers[item["row_id"]].add(item["response"])
    assert all(len(texts) > 1 for texts in answers.values()), answers  # real sampling

    report = load_report_data(outcome.run_dir)
    [variability] = [v for v in report.variability if v.metric == "even_length"]
    assert variability.k == REPETITIONS
    assert report.flaky, "six sampled answers per row and no row flaky"
    assert report.flaky_total == variability.flaky == len(report.flaky)
    for flaky in report.flaky:
        assert 0 < flaky.stats.c < flaky.stats.n == REPETITIONS
        assert len(answers[flaky.row]) > 1
    assert variability.pass_at_k is not None
    assert variability.pass_hat_k is not None
    assert variability.pass_at_k > variability.pass_hat_k


def test_parquet_token_usage_equals_what_the_server_reported(
    flow_run: tuple[RunOutcome, Path],
) -> None:
    """runs.parquet and items.parquet hold, per call, the usage block the server sent (read back with pyarrow)."""
    outcome, cache = flow_run
    reported: Counter[tuple[int, int, int]] = Counter()
    for entry in ResponseCache(cache).entries():
        usage: dict[str, Any] = entry.response["usage"]
        reported[(usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"])] += 1
    assert sum(reported.values()) == len(QUERIES) * REPETITIONS  # one model call per run
    columns = ["input_tokens", "output_tokens", "total_tokens"]
    runs = pq.read_table(outcome.run_dir / "runs.parquet", columns=columns).to_pylist()
    stored = Counter((r["input_tokens"], r["output_tokens"], r["total_tokens"]) for r in runs)
    assert stored == reported
    items = read_table(outcome.run_dir, "items", columns=columns).to_pylist()
    assert Counter((i["input_tokens"], i["output_tokens"], i["total_tokens"]) for i in items) == (
        reported
    )
    assert all(prompt > 0 and completion > 0 for prompt, completion, _ in stored)
