"""A suite's judge_agreement gate in the real flow (a Prefect test server, a loopback judge): with
labels the judge agrees with the run's gate passes; with labels it contradicts, the flow run fails
and its state message and the manifest's gate name κ, its interval and n."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalpipe.artifacts import read_manifest
from evalpipe.pipeline import arun_suite
from evalpipe.suite import load_suite
from fakes.openai_server import FakeOpenAIServer, verdict

pytestmark = pytest.mark.usefixtures("prefect_api")

ROWS = 24
AGENT = """
from evalpipe import AgentResponse, Message


class EchoAgent:
    name = "echo"

    async def run(self, messages, **kwargs):
        return AgentResponse(messages=[Message("assistant", [f"answer: {messages[-1].text}"])])


agent = EchoAgent()
"""


def _score(request: Any) -> Any:
    """5 (pass) for an even question, 1 (fail) for an odd one."""
    number = int(re.findall(r"question (\d+)", request.text)[-1])
    return verdict(5 if number % 2 == 0 else 1)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("agreement_agents", None)
    (tmp_path / "agreement_agents.py").write_text(AGENT, encoding="utf-8")
    (tmp_path / "queries.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "query": f"question {i}"}) + "\n" for i in range(ROWS))
    )
    return tmp_path


def _labels(path: Path, agree: bool) -> None:
    lines = []
    for i in range(ROWS):
        passes = (i % 2 == 0) if agree else (i % 4 < 2)
        lines.append(
            {"row_id": f"q{i}", "metric": "relevance", "label": "pass" if passes else "fail"}
        )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _suite(project: Path, base_url: str) -> Path:
    data = {
        "name": "agreement-suite",
        "target": "agreement_agents:agent",
        "dataset": "queries.jsonl",
        "repetitions": 1,
        "evaluators": [
            {"judge": {"base_url": base_url, "model": "judge", "metrics": ["relevance"]}}
        ],
        "gates": ['judge_agreement(relevance, labels="labels.jsonl") >= 0.6'],
        "output_dir": str(project / "runs"),
    }
    path = project / "suite.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


async def test_a_suite_gate_on_judge_agreement_passes_and_fails_with_its_labels(
    project: Path,
) -> None:
    """Agreeing labels (κ 1 on n=24): the run completes with the gate passed. Contradicting
    labels (κ 0): the flow run fails on the gate, and its message says κ, its interval and n=24."""
    with FakeOpenAIServer(_score) as server:
        suite_path = _suite(project, server.base_url)
        _labels(project / "labels.jsonl", agree=True)
        good = await arun_suite(load_suite(suite_path), resume=False)
        assert good.state == "Completed", good.message
        assert good.gate_passed is True
        [clause] = read_manifest(good.run_dir)["gate"]["clauses"]
        assert clause["observed"] == 1.0
        assert clause["n"] == ROWS
        _labels(project / "labels.jsonl", agree=False)
        bad = await arun_suite(load_suite(suite_path), resume=False)
    assert bad.gate_passed is False
    assert bad.verdict == "gate_failed"
    [clause] = read_manifest(bad.run_dir)["gate"]["clauses"]
    assert clause["passed"] is False
    assert clause["observed"] == pytest.approx(0.0, abs=1e-12)
    assert "n=24 matched items" in clause["message"]
    assert re.search(r"κ 0\.000 \[-?\d\.\d{3}, \d\.\d{3}\]", clause["message"])
    assert "judge_agreement" in (bad.message or "")
