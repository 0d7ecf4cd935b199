"""Counts that never lie, through the real flow: every (row, repetition) is its own call, the plan
is prepared once per run, a MAF workflow factory gives every call its own workflow, and the five
sinks (command line, summary.parquet, HTML report, Prefect table artifact, gates) show the tally's
numbers."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from evalpipe.artifacts import read_manifest, read_summary
from evalpipe.cli import main
from evalpipe.pipeline import arun_suite
from evalpipe.report.data import load_report_data
from evalpipe.suite import load_suite

pytestmark = pytest.mark.usefixtures("prefect_api")

AGENTS = '''
"""Counting agents and evaluators for the counts tests (user code, as a suite imports it)."""
import asyncio, os, random

from evalpipe import AgentResponse, EvalItemResult, EvalScoreResult, Message, evaluator
from evalpipe.tally import NOT_APPLICABLE, make_results


def _log(var, text):
    with open(os.environ[var], "a") as fh:
        fh.write(text + "\\n")


class Dice:
    name = "dice"

    async def run(self, messages, **kwargs):
        query = messages[-1].text
        _log("EVALPIPE_TEST_COUNT_FILE", query)
        await asyncio.sleep(0.01)
        if "explode" in query:
            raise RuntimeError("the agent exploded")
        return AgentResponse(messages=[Message("assistant", [f"rolled {random.randint(1, 10**9)} for {query}"])])


def make_dice():
    """A target factory: must be called once per run."""
    _log("EVALPIPE_TEST_FACTORY_FILE", "dice")
    return Dice()


@evaluator
def picky(response: str) -> bool:
    """Raises on one kind of answer (a CheckError), passes answers that rolled something."""
    if "boom" in response:
        raise ValueError("cannot check this answer")
    return "rolled" in response


class Relevance:
    """A provider that does not apply to some items (not_applicable), scores the rest."""

    name = "Relevance"

    async def evaluate(self, items, *, eval_name):
        results = []
        for i, item in enumerate(items):
            if item.error_code:
                results.append(EvalItemResult(item.item_id, "error", error_code=item.error_code))
                continue
            if "paris" in item.query:
                score = EvalScoreResult("relevance", None, None, label=NOT_APPLICABLE)
                status = "error"
            else:
                good = "rome" in item.query
                score = EvalScoreResult("relevance", 4.0 if good else 2.0, good)
                status = "pass" if good else "fail"
            results.append(EvalItemResult(item.item_id, status, [score], input_text=item.query))
        return make_results(self.name, results, metrics=["relevance"], input_items=items, run_id=eval_name)
'''


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVALPIPE_TEST_COUNT_FILE", str(tmp_path / "calls.log"))
    monkeypatch.setenv("EVALPIPE_TEST_FACTORY_FILE", str(tmp_path / "factory.log"))
    for name in ("counts_agents", "maf_flow"):
        sys.modules.pop(name, None)
    (tmp_path / "counts_agents.py").write_text(textwrap.dedent(AGENTS), encoding="utf-8")
    return tmp_path


def _suite(project: Path, rows: list[dict[str, Any]], **fields: Any) -> Path:
    with (project / "rows.jsonl").open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    data = {
        "name": "counts",
        "target": "counts_agents:make_dice",
        "dataset": "rows.jsonl",
        "evaluators": ["counts_agents:picky"],
        "output_dir": str(project / "runs"),
        **fields,
    }
    path = project / "suite.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


async def test_rows_that_differ_only_in_id_are_separate_samples(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: three rows with the same query x 2 repetitions shared 2 calls and printed 6.
    Now every (row, repetition) is its own call, and every sink says 6 were made."""
    rows = [{"id": i, "query": "Roll a die"} for i in ("a", "b", "c")]
    outcome = await arun_suite(load_suite(_suite(project, rows, repetitions=2)))
    assert outcome.state == "Completed", outcome.message
    assert len(_lines(project / "calls.log")) == 6
    runs = pq.read_table(outcome.run_dir / "runs.parquet").to_pylist()
    assert len({r["run_id"] for r in runs}) == 6
    assert not any(r["cached"] for r in runs)
    assert len({r["transcript"] for r in runs}) == 6
    calls = read_manifest(outcome.run_dir)["calls"]
    assert (calls["made"], calls["reused"], calls["errored"]) == (6, 0, 0)
    capsys.readouterr()
    assert main(["results", str(outcome.run_dir)]) == 0
    assert "target calls: 6 made; 0 errored" in capsys.readouterr().out
    report = load_report_data(outcome.run_dir)
    assert report.calls_text == "target calls: 6 made; 0 errored"


async def test_dataset_and_target_factory_are_loaded_once_per_run(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the plan was prepared twice (before the flow and in it), calling the target
    factory and loading the dataset twice. Both happen once per run now."""
    import evalpipe.runner.prepare as prepare

    loads: list[str] = []
    real = prepare.load_rows

    def counted(path: Any) -> Any:
        loads.append(str(path))
        return real(path)

    monkeypatch.setattr(prepare, "load_rows", counted)
    rows = [{"id": f"r{i}", "query": f"Roll {i}"} for i in range(4)]
    outcome = await arun_suite(load_suite(_suite(project, rows, repetitions=2)))
    assert outcome.state == "Completed", outcome.message
    assert len(loads) == 1
    assert _lines(project / "factory.log") == ["dice"]
    assert len(_lines(project / "calls.log")) == 8


MAF_FLOW = '''
"""A real MAF workflow (WorkflowBuilder) built by a factory: researcher -> writer."""
import asyncio, os
from collections.abc import AsyncIterator

import agent_framework as af


class Slow(af.BaseChatClient):
    def __init__(self, answer, **kwargs):
        super().__init__(**kwargs)
        self.answer = answer

    def _inner_get_response(self, *, messages, stream, options, **kwargs):
        async def reply():
            await asyncio.sleep(0.05)
            return af.ChatResponse(messages=[af.Message(role="assistant", contents=[self.answer])])

        if stream:
            async def updates() -> AsyncIterator[af.ChatResponseUpdate]:
                response = await reply()
                for message in response.messages:
                    yield af.ChatResponseUpdate(role=message.role, contents=list(message.contents))

            return self._build_response_stream(updates())
        return reply()


def build():
    with open(os.environ["EVALPIPE_TEST_FACTORY_FILE"], "a") as fh:
        fh.write("workflow\\n")
    researcher = af.Agent(client=Slow("Paris is sunny."), name="researcher")
    writer = af.Agent(client=Slow("Pack sunglasses for Paris."), name="writer")
    return af.WorkflowBuilder(start_executor=researcher).add_edge(researcher, writer).build()
'''


async def test_a_maf_workflow_factory_target_runs_concurrently(project: Path) -> None:
    """Regression: a MAF workflow factory as a suite target shared one instance across concurrent
    calls (5 of 6 failed "Workflow is already running"). Each call now gets a fresh workflow."""
    pytest.importorskip("agent_framework")
    (project / "maf_flow.py").write_text(textwrap.dedent(MAF_FLOW), encoding="utf-8")
    rows = [{"id": f"r{i}", "query": f"Trip {i}"} for i in range(8)]
    path = _suite(
        project,
        rows,
        target="maf_flow:build",
        concurrency=8,
        evaluators=[{"keyword_check": ["sunglasses"]}],
    )
    outcome = await arun_suite(load_suite(path))
    assert outcome.state == "Completed", outcome.message
    calls = read_manifest(outcome.run_dir)["calls"]
    assert (calls["made"], calls["errored"]) == (8, 0)
    # once to inspect the workflow (its agents), then once per call: a MAF workflow cannot be shared
    assert len(_lines(project / "factory.log")) == 1 + 8
    rows_out = read_summary(outcome.run_dir)
    overall = next(r for r in rows_out if r.kind == "result" and r.agent == "overall")
    assert (overall.passed, overall.errored) == (8, 0)
    assert {r.agent for r in rows_out} == {"overall", "researcher", "writer"}


def _cli_rows(text: str) -> dict[tuple[str, str], list[str]]:
    """(provider, metric) -> the counts of the command line's summary: a table per provider
    (titled with its name), each metric's line indented under its agent's."""
    out = {}
    provider = None
    for line in text.splitlines():
        if line.strip() in ("Local", "Relevance"):
            provider = line.strip()
        elif not line.strip():
            provider = None  # a table ends with an empty line
        elif provider and line.startswith("  ") and not line.startswith("   "):
            cells = line.split()
            out[(provider, cells[0])] = cells[1:6]
    return out


async def test_every_sink_shows_the_same_numbers(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Passes, failures, errored calls, errored checks and not-applicable metrics: the command
    line, summary.parquet, the HTML report, the Prefect table artifact and the gates agree on n,
    passed, failed, errored, not applicable and the pass rate's denominator."""
    rows = [
        {"id": "paris", "query": "roll for paris"},
        {"id": "rome", "query": "roll for rome"},
        {"id": "oslo", "query": "roll for oslo"},
        {"id": "bad", "query": "please explode"},
        {"id": "boom", "query": "boom in rome"},
    ]
    path = _suite(
        project,
        rows,
        repetitions=2,
        evaluators=[
            "counts_agents:picky",
            {"keyword_check": ["rome"]},
            "counts_agents:Relevance",
        ],
        gates=[  # errors allowed: the gates are a sink here, not the verdict under test
            "pass_rate(picky, max_error_rate=1) >= 0",
            "pass_rate(keyword_check, max_error_rate=1) >= 0",
            "pass_rate(relevance, max_error_rate=1) >= 0",
        ],
    )
    outcome = await arun_suite(load_suite(path))
    assert outcome.state == "Completed", outcome.message
    summary = {
        (r.provider, r.metric): r for r in read_summary(outcome.run_dir) if r.kind == "metric"
    }
    assert set(summary) == {
        ("Local", "picky"),
        ("Local", "keyword_check"),
        ("Relevance", "relevance"),
    }
    picky, keyword, relevance = (
        summary[("Local", "picky")],
        summary[("Local", "keyword_check")],
        summary[("Relevance", "relevance")],
    )
    # the suite was built to exercise every kind of count
    assert (picky.passed, picky.failed, picky.errored) == (6, 0, 4)
    assert (keyword.passed, keyword.failed, keyword.errored) == (4, 4, 2)
    assert (relevance.passed, relevance.failed, relevance.errored, relevance.not_applicable) == (
        4,
        2,
        2,
        2,
    )
    expected = {
        k: (r.n, r.passed, r.failed, r.errored, r.not_applicable) for k, r in summary.items()
    }

    # 1. the command line (the same printer `evalpipe run` uses)
    monkeypatch.setenv("COLUMNS", "220")
    capsys.readouterr()
    assert main(["results", str(outcome.run_dir)]) == 0
    printed = capsys.readouterr().out
    cli = _cli_rows(printed)
    assert {k: tuple(int(c) for c in v) for k, v in cli.items()} == expected
    for row in summary.values():
        assert row.rate_text in printed

    # 2. the HTML report
    report = load_report_data(outcome.run_dir)
    got = {
        (m.provider, m.metric): (m.n, m.passed, m.failed, m.errored, m.not_applicable)
        for m in report.metrics
    }
    assert got == expected
    html = (outcome.run_dir / "report.html").read_text(encoding="utf-8")
    for row in summary.values():
        assert f"{row.passed} / {row.pass_rate_denominator}" in html

    # 3. the Prefect table artifact
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async with get_client() as client:
        [artifact] = await client.read_latest_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["counts-summary"]))
        )
    table = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    shown = {  # cells are escaped markdown (evalpipe.escape.table_cell): compare the text shown
        (re.sub(r"\\(.)", r"\1", r["provider"]), re.sub(r"\\(.)", r"\1", r["metric"])): r
        for r in table
    }
    got = {k: (r["n"], r["passed"], r["failed"], r["errored"], r["n/a"]) for k, r in shown.items()}
    assert got == expected
    assert {r["pass rate"] for r in table} == {r.rate_text for r in summary.values()}

    # 4. the gates, as the manifest records them
    clauses = {c["metric"]: c for c in read_manifest(outcome.run_dir)["gate"]["clauses"]}
    for (_, metric), row in summary.items():
        clause = clauses[metric]
        assert clause["n"] == row.pass_rate_denominator
        assert clause["errored"] == row.errored
        assert clause["not_applicable"] == row.not_applicable
        assert clause["observed"] == row.pass_rate
