"""Recorded datasets through the real eval flow: no target call, per-agent results, resume, rescore."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from evalpipe.artifacts import load_run, read_manifest
from evalpipe.datasets import write_jsonl
from evalpipe.otel import read_otel_traces, trace_rows
from evalpipe.pipeline import arun_suite
from evalpipe.suite import SuiteError, load_suite

pytestmark = pytest.mark.usefixtures("prefect_api")

FIXTURES = Path(__file__).parent.parent / "fixtures" / "otel"

SYSTEM = {"role": "system", "content": "You are a weather bot."}


def _openai_row(i: int, city: str, answer: str) -> dict[str, Any]:
    return {
        "id": f"r{i}",
        "conversation": [
            SYSTEM,
            {"role": "user", "content": f"Weather in {city}?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": json.dumps({"city": city}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": '{"temp_c": 18}'},
            {"role": "assistant", "content": answer},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
        "expected_tool_calls": [{"name": "get_weather", "arguments": {"city": city}}],
    }


def _suite(project: Path, rows: list[dict[str, Any]], **extra: Any) -> Path:
    with (project / "recorded.jsonl").open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    data = {
        "name": "recorded-suite",
        "dataset": "recorded.jsonl",
        "evaluators": [{"keyword_check": ["sunny"]}, "tool_call_args_match"],
        "output_dir": str(project / "runs"),
        **extra,
    }
    path = project / "suite.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVALPIPE_TEST_COUNT_FILE", str(tmp_path / "calls.log"))
    sys.modules.pop("recorded_agents_mod", None)
    return tmp_path


async def test_targetless_suite_scores_recorded_conversations(project: Path) -> None:
    """A suite without a target evaluates OpenAI-format recordings as they happened: the items hold
    the recorded system message and tool calls; the journal records them and rescore works."""
    rows = [
        _openai_row(0, "Paris", "18C and sunny in Paris."),
        _openai_row(1, "Rome", "Rainy in Rome."),
    ]
    path = _suite(project, rows)
    outcome = await arun_suite(load_suite(path))
    assert outcome.state == "Completed", outcome.message
    (results,) = load_run(outcome.run_dir)
    assert (results.passed, results.failed, results.errored) == (1, 1, 0)
    item = next(i for i in results.input_items if i.item_id == "r0#0")
    assert [m.role for m in item.conversation] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert item.query == "Weather in Paris?"
    assert [t.name for t in item.tools or []] == ["get_weather"]
    runs = pq.read_table(outcome.run_dir / "runs.parquet").to_pylist()
    assert len(runs) == 2
    # recorded rows are not calls: nothing to journal, and the manifest says so
    journal = list((outcome.run_dir / "journal").glob("*.jsonl"))
    assert sum(len(p.read_text().splitlines()) for p in journal) == 0
    calls = read_manifest(outcome.run_dir)["calls"]
    assert (calls["made"], calls["reused"], calls["recorded"]) == (0, 0, 2)

    rescored = await arun_suite(
        load_suite(path, ["evaluators=[{keyword_check: [Paris]}]"]), rescore=outcome.run_dir
    )
    assert rescored.state == "Completed", rescored.message
    (again,) = load_run(rescored.run_dir)
    assert again.passed == 1
    first = next(i for i in again.input_items if i.item_id == "r0#0")
    assert first.conversation[0].role == "system"


async def test_changed_recording_is_a_new_call_on_resume(project: Path) -> None:
    """Resuming the same run directory reads recorded rows from the dataset again: a row whose
    recording changed is evaluated as it is now (recorded rows are not journaled calls)."""
    rows = [_openai_row(0, "Paris", "18C and sunny in Paris.")]
    path = _suite(project, rows)
    suite = load_suite(path)
    run_dir = project / "runs" / "fixed"
    outcome = await arun_suite(suite, run_dir=run_dir)
    assert outcome.state == "Completed", outcome.message
    rows[0]["conversation"][-1]["content"] = "Now sunny and 20C in Paris."
    _suite(project, rows)
    (run_dir / "manifest.json").unlink()
    again = await arun_suite(load_suite(path), run_dir=run_dir)
    assert again.state == "Completed", again.message
    (results,) = load_run(again.run_dir)
    assert "20C" in results.input_items[0].response
    assert read_manifest(run_dir)["calls"]["recorded"] == 1


async def test_otel_import_evaluates_per_agent_without_a_target(project: Path) -> None:
    """Traces from real MAF agents, imported as a dataset, evaluate as a workflow: per-agent
    sub-results (nested agent-as-tool and workflow agents) and an overall result per trace."""
    read = read_otel_traces(FIXTURES, log=False)
    write_jsonl(trace_rows(read.traces), project / "prod.jsonl")
    data = {
        "name": "prod-traces",
        "dataset": "prod.jsonl",
        "evaluators": [{"keyword_check": ["sunny"]}],
        "output_dir": str(project / "runs"),
    }
    (project / "suite.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    outcome = await arun_suite(load_suite(project / "suite.yaml"))
    assert outcome.state == "Completed", outcome.message
    (results,) = load_run(outcome.run_dir)
    assert results.passed + results.failed == 5
    agents = set(results.sub_results)
    assert {"weather", "coordinator", "researcher", "planner", "writer"} <= agents
    researcher = results.sub_results["researcher"]
    assert researcher.failed == 1
    assert results.sub_results["writer"].passed == 1


async def test_recorded_rows_skip_the_target_beside_live_rows(project: Path) -> None:
    """With a target, recorded rows are not sent to it; the other rows are."""
    (project / "recorded_agents_mod.py").write_text(
        textwrap.dedent(
            """
            import os
            from evalpipe import AgentResponse, Message

            class Echo:
                name = "echo"

                async def run(self, messages, **kwargs):
                    with open(os.environ["EVALPIPE_TEST_COUNT_FILE"], "a") as fh:
                        fh.write(messages[-1].text + "\\n")
                    return AgentResponse(messages=[Message("assistant", ["sunny " + messages[-1].text])])

            agent = Echo()
            """
        ),
        encoding="utf-8",
    )
    rows = [
        _openai_row(0, "Paris", "18C and sunny in Paris."),
        {"id": "live", "query": "Weather in Oslo?"},
    ]
    path = _suite(project, rows, target="recorded_agents_mod:agent", repetitions=2)
    outcome = await arun_suite(load_suite(path))
    assert outcome.state == "Completed", outcome.message
    assert (project / "calls.log").read_text().splitlines() == ["Weather in Oslo?"] * 2
    (results,) = load_run(outcome.run_dir)
    assert len(results.items) == 4


async def test_targetless_suite_with_an_unrecorded_row_names_the_row(project: Path) -> None:
    """A suite without a target refuses a dataset row without a recording, naming it."""
    path = _suite(project, [_openai_row(0, "Paris", "sunny"), {"id": "plain", "query": "hi"}])
    with pytest.raises(SuiteError, match=r"row 'plain' \(row 2\) has no recording"):
        await arun_suite(load_suite(path))


async def test_single_and_multi_agent_recordings_in_one_file(project: Path) -> None:
    """A file mixing multi-agent rows (recorded_agents) and single-agent conversations (as the
    Foundry threads import writes) is one workflow evaluation: a single-agent row is one turn of
    the agent its assistant messages name."""
    nested = trace_rows(read_otel_traces(FIXTURES / "agent_as_tool.json", log=False).traces)
    single = trace_rows(read_otel_traces(FIXTURES / "single_agent.json", log=False).traces)[0]
    for message in single["conversation"]:
        if message["role"] == "assistant":
            message["author_name"] = "support"
    path = _suite(project, [*nested, single], evaluators=[{"keyword_check": ["Paris"]}])
    outcome = await arun_suite(load_suite(path))
    assert outcome.state == "Completed", outcome.message
    (results,) = load_run(outcome.run_dir)
    assert set(results.sub_results) == {"coordinator", "researcher", "support"}
    assert results.sub_results["support"].passed == 1
    support = results.sub_results["support"].input_items[0]
    assert [m.role for m in support.conversation][:2] == ["system", "user"]
    assert support.response == "It is 18C and sunny in Paris."


ROOT = Path(__file__).resolve().parents[2]


async def test_example_recorded_suites_run_without_a_target(tmp_path: Path) -> None:
    """examples/recorded: the conversations suite catches the wrong-city tool call and passes its
    gate; the traces suite gives per-agent results for the imported MAF traces."""
    suite = load_suite(ROOT / "examples/recorded/suite.yaml")
    suite.output_dir = str(tmp_path)
    outcome = await arun_suite(suite)
    assert outcome.state == "Completed", outcome.message
    assert outcome.gate_passed is True
    (results,) = load_run(outcome.run_dir)
    assert results.per_evaluator["tool_call_args_match"] == {"passed": 3, "failed": 1, "errored": 0}
    assert results.per_evaluator["answers_with_temperature"]["failed"] == 1
    wrong = next(i for i in results.items if i.item_id == "chat-0413#0")
    assert wrong.status == "fail"

    traces = load_suite(ROOT / "examples/recorded/traces_suite.yaml")
    traces.output_dir = str(tmp_path)
    outcome = await arun_suite(traces)
    assert outcome.state == "Completed", outcome.message
    results, scoped = load_run(outcome.run_dir)
    assert set(results.sub_results) == {"coordinator", "researcher", "planner", "writer"}
    assert set(scoped.sub_results) == {"coordinator", "researcher"}
    assert scoped.sub_results["researcher"].failed == 1


async def test_the_summary_of_a_recorded_run_says_no_target_was_called(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evalpipe results` on a target-less run counts recorded transcripts, with no latency line."""
    from evalpipe.cli import main

    rows = [_openai_row(0, "Paris", "Sunny, 18 C"), _openai_row(1, "Oslo", "Cold")]
    outcome = await arun_suite(load_suite(_suite(tmp_path, rows)))
    assert outcome.state == "Completed", outcome.message
    capsys.readouterr()
    assert main(["results", str(outcome.run_dir)]) == 0
    out = capsys.readouterr().out
    assert "transcripts: 2 recorded (no target called); 0 errored" in out
    assert "target calls:" not in out
