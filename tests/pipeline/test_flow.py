"""The eval flow end to end on a real Prefect test server: stages, artifacts, gates, resume, re-score."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pyarrow.parquet as pq
import pytest

from evalpipe.artifacts import load_run, read_manifest
from evalpipe.escape import markdown
from evalpipe.pipeline import arun_suite
from evalpipe.suite import SuiteError, load_suite

pytestmark = pytest.mark.usefixtures("prefect_api")

AGENT_MODULE = '''
"""Test agents: count calls in a file, answer deterministically."""
import asyncio, os
from evalpipe import AgentResponse, Message

COUNT_FILE = os.environ.get("EVALPIPE_TEST_COUNT_FILE", "calls.log")
DELAY = float(os.environ.get("EVALPIPE_TEST_DELAY", "0"))


class EchoAgent:
    name = "echo"

    async def run(self, messages, **kwargs):
        query = messages[-1].text
        with open(COUNT_FILE, "a") as fh:
            fh.write(query + "\\n")
        if DELAY:
            await asyncio.sleep(DELAY)
        if "explode" in query:
            raise RuntimeError("agent exploded")
        return AgentResponse(messages=[Message("assistant", [f"answer: {query}"])])


agent = EchoAgent()
'''


def _write_project(tmp_path: Path, rows: int = 6, **suite: object) -> Path:
    (tmp_path / "demo_agents.py").write_text(textwrap.dedent(AGENT_MODULE), encoding="utf-8")
    with (tmp_path / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(rows):
            fh.write(
                json.dumps({"id": f"q{i}", "query": f"question {i}", "expected_output": f"{i}"})
                + "\n"
            )
    data = {
        "name": "echo-suite",
        "target": "demo_agents:agent",
        "dataset": "queries.jsonl",
        "repetitions": 2,
        "evaluators": [{"keyword_check": ["answer"]}, "tool_calls_present"],
        "output_dir": str(tmp_path / "runs"),
        **suite,
    }
    path = tmp_path / "suite.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVALPIPE_TEST_COUNT_FILE", str(tmp_path / "calls.log"))
    sys.modules.pop("demo_agents", None)
    return tmp_path


def _calls(project: Path) -> int:
    log = project / "calls.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


async def test_flow_writes_parquet_artifacts_and_prefect_artifacts(project: Path) -> None:
    """A run makes rows x repetitions calls, writes every Parquet file, and publishes Prefect artifacts."""
    suite = load_suite(_write_project(project, rows=6))
    outcome = await arun_suite(suite)
    assert outcome.state == "Completed", outcome.message
    assert _calls(project) == 12
    for name in ("runs", "items", "scores", "summary"):
        assert (outcome.run_dir / f"{name}.parquet").is_file()
    assert pq.read_table(outcome.run_dir / "runs.parquet").num_rows == 12
    scores = pq.read_table(outcome.run_dir / "scores.parquet")
    assert scores.num_rows == 12 * 2
    # the rows say which suite, run, dataset row and repetition they are (schema version 3)
    assert set(scores.column("suite").to_pylist()) == {"echo-suite"}
    assert set(scores.column("run_name").to_pylist()) == {outcome.run_dir.name}
    pairs = zip(
        scores.column("row_id").to_pylist(), scores.column("repetition").to_pylist(), strict=True
    )
    assert sorted(set(pairs)) == [(f"q{i}", r) for i in range(6) for r in range(2)]
    (results,) = load_run(outcome.run_dir)
    assert (results.passed, results.failed, results.errored) == (12, 0, 0)
    # repetition-major order and row ids survive the shards
    assert [i.item_id for i in results.items][:7] == [f"q{i}#0" for i in range(6)] + ["q0#1"]
    manifest = read_manifest(outcome.run_dir)
    assert manifest["calls"]["total"] == manifest["calls"]["made"] == 12
    assert (manifest["calls"]["reused"], manifest["calls"]["errored"]) == (0, 0)
    assert manifest["suite"]["name"] == "echo-suite"

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async with get_client() as client:
        keys = {
            "echo-suite-summary",
            "echo-suite-failures",
            "echo-suite-run-dir",
            "echo-suite-progress",
        }
        found = await client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=sorted(keys)))
        )
    assert keys <= {a.key for a in found}
    progress = [a for a in found if a.key == "echo-suite-progress"]
    assert max(float(a.data) for a in progress) == 100.0


async def test_agent_error_is_an_errored_item_not_a_lost_run(project: Path) -> None:
    """One exploding query becomes errored items; every other result is kept."""
    path = _write_project(project, rows=3)
    with (project / "queries.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "bad", "query": "please explode"}) + "\n")
    outcome = await arun_suite(load_suite(path))
    assert outcome.state == "Completed"
    (results,) = load_run(outcome.run_dir)
    assert (results.passed, results.errored) == (6, 2)
    errored = [i for i in results.items if i.is_error]
    assert {i.error_code for i in errored} == {"AgentError"}
    runs = pq.read_table(outcome.run_dir / "runs.parquet").to_pylist()
    assert sorted(r["status"] for r in runs).count("error") == 2


async def test_failed_gate_fails_the_flow_run_naming_the_clause(project: Path) -> None:
    """A violated gate clause ends the flow run Failed with the clause and its numbers in the message."""
    path = _write_project(
        project,
        rows=2,
        gates=["all_pass(keyword_check)", "no_errors()"],
        evaluators=[{"keyword_check": ["never-said"]}, "tool_calls_present"],
    )
    outcome = await arun_suite(load_suite(path))
    assert outcome.state == "Failed"
    assert outcome.gate_passed is False
    assert "gate failed for suite echo-suite" in (outcome.message or "")
    assert "all_pass(keyword_check)" in (outcome.message or "")
    assert "no_errors" not in (outcome.message or "")
    # the artifacts are written before the gate decides
    assert (outcome.run_dir / "manifest.json").is_file()
    assert read_manifest(outcome.run_dir)["gate"]["passed"] is False


async def test_warn_only_gate_completes(project: Path) -> None:
    """warn_only reports the failed gate without failing the run."""
    path = _write_project(
        project,
        rows=2,
        gates=["all_pass(keyword_check)"],
        warn_only=True,
        evaluators=[{"keyword_check": ["never-said"]}],
    )
    outcome = await arun_suite(load_suite(path))
    assert outcome.state == "Completed"
    assert outcome.gate_passed is False


async def test_rescore_reevaluates_stored_transcripts_without_calling_the_target(
    project: Path,
) -> None:
    """--rescore reads runs.parquet and scores it with the suite's (new) evaluators; no target call."""
    path = _write_project(project, rows=3)
    first = await arun_suite(load_suite(path))
    assert _calls(project) == 6
    suite = load_suite(path, ["evaluators=[{keyword_check: [question]}]"])
    second = await arun_suite(suite, rescore=first.run_dir)
    assert second.state == "Completed", second.message
    assert _calls(project) == 6
    assert second.run_dir != first.run_dir
    (results,) = load_run(second.run_dir)
    assert {s.name for i in results.items for s in i.scores} == {"keyword_check"}
    assert results.passed == 6
    assert read_manifest(second.run_dir)["rescored_from"] == str(first.run_dir)


async def test_rescore_of_a_directory_that_is_not_a_run_is_a_clear_error(project: Path) -> None:
    """Re-scoring a random directory says what to pass instead."""
    suite = load_suite(_write_project(project, rows=1))
    with pytest.raises(SuiteError, match="not a run directory"):
        await arun_suite(suite, rescore=project)


def test_kill_9_mid_run_then_rerun_makes_only_the_missing_calls(
    project: Path, prefect_api: str
) -> None:
    """A run killed with SIGKILL resumes: finished calls come from the journal, only missing ones run."""
    path = _write_project(project, rows=20, repetitions=1, concurrency=2, shard_size=4)
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_api,
        "EVALPIPE_TEST_COUNT_FILE": str(project / "calls.log"),
        "EVALPIPE_TEST_DELAY": "0.25",
    }
    cmd = [sys.executable, "-m", "evalpipe.cli", "run", str(path), "--no-progress"]
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    journal_lines = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        journals = list((project / "runs").glob("echo-suite/*/journal/*.jsonl"))
        journal_lines = sum(len(j.read_bytes().splitlines()) for j in journals)
        if journal_lines >= 6:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert 6 <= journal_lines < 20, "the kill must land mid-run"
    (run_dir,) = (project / "runs" / "echo-suite").iterdir()
    assert not (run_dir / "manifest.json").exists()
    journaled = sum(len(j.read_bytes().splitlines()) for j in (run_dir / "journal").glob("*.jsonl"))
    before = _calls(project)

    env["EVALPIPE_TEST_DELAY"] = "0"
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"resumed: {journaled} call(s)" in done.stdout
    assert f"target calls: {20 - journaled} made, {journaled} reused" in done.stdout
    assert _calls(project) - before == 20 - journaled
    (results,) = load_run(run_dir)
    assert results.passed == 20
    calls = read_manifest(run_dir)["calls"]
    assert (calls["made"], calls["reused"]) == (20 - journaled, journaled)


def test_bad_suite_is_reported_before_any_call(project: Path) -> None:
    """An unknown evaluator fails validation with its place in the file; the target is never called."""
    path = _write_project(project, rows=2, evaluators=["tool_calls_presnt"])
    suite = load_suite(path)
    from evalpipe.runner.prepare import prepare_suite

    with pytest.raises(
        SuiteError,
        match=r"evaluators\[0\]: unknown evaluator 'tool_calls_presnt' \(did you mean 'tool_calls_present'\?\)",
    ):
        prepare_suite(suite, project / "runs" / "x")
    assert _calls(project) == 0


def test_cli_run_exit_codes(project: Path, prefect_api: str) -> None:
    """`evalpipe run` exits 0 on success, 1 on a failed gate, 2 on bad input."""
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_api,
        "EVALPIPE_TEST_COUNT_FILE": str(project / "calls.log"),
    }
    path = _write_project(project, rows=2)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "evalpipe.cli", *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    run = ("run", str(path), "--no-progress")
    ok = cli(*run)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "evalpipe summary" in ok.stdout
    # without the bar, the one line saying how the run ended is still there
    assert re.search(r"^echo-suite: 4/4 calls in \d+\.\d s", ok.stderr, flags=re.MULTILINE)
    gated = cli(
        *run,
        "--param",
        "gates=['all_pass(keyword_check)']",
        "--param",
        "evaluators=[{keyword_check: [nope]}]",
    )
    assert gated.returncode == 1
    assert "all_pass" in gated.stderr
    bad = cli(*run, "--param", "repetitons=2")
    assert bad.returncode == 2
    assert "unknown field 'repetitons' (did you mean 'repetitions'?)" in bad.stderr
    run_dir = next((project / "runs" / "echo-suite").iterdir())
    again = cli("results", str(run_dir))
    assert again.returncode == 0
    assert "evalpipe summary" in again.stdout


async def test_foundry_in_a_suite_one_eval_one_run_per_shard_under_the_foundry_limit(
    project: Path,
) -> None:
    """A suite's Foundry evaluator creates one eval per run and one run per shard, under the
    "foundry" global concurrency limit, beside the local checks; its scores land in Parquet; the
    run closes the Foundry clients it opened."""
    from fakes.foundry_emulator import TOKEN, FoundryEmulator

    emu = FoundryEmulator(token=TOKEN).start()
    try:
        foundry = {
            "endpoint": emu.endpoint,
            "model": "judge",
            "evaluators": ["relevance"],
            "poll_interval": 0.01,
            "credential": "fakes.foundry_emulator:StaticCredential",
        }
        path = _write_project(
            project,
            rows=10,
            repetitions=1,
            shard_size=4,
            evaluators=[{"keyword_check": ["answer"]}, {"foundry": foundry}],
        )
        outcome = await arun_suite(load_suite(path))
        assert outcome.state == "Completed", outcome.message
        local, cloud = load_run(outcome.run_dir)
        assert local.provider == "Local"
        assert cloud.provider == "Microsoft Foundry"
        assert (cloud.passed, cloud.errored) == (10, 0)
        assert len(emu.calls("POST", r"/evals$")) == 1
        assert len(emu.run_objects()) == 3
        assert [i.item_id for i in cloud.items] == [f"q{i}#0" for i in range(10)]
        # the run closed the clients its FoundryEvals opened: no connection to Foundry stays open
        port = urlsplit(emu.endpoint).port
        assert [
            c
            for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
        ] == []
    finally:
        emu.stop()

    from prefect.client.orchestration import get_client

    async with get_client() as client:
        limit = await client.read_global_concurrency_limit_by_name("foundry")
    assert limit.limit >= 1


ROOT = Path(__file__).resolve().parents[2]


async def test_demo_workflow_suite_gives_per_agent_sub_results(tmp_path: Path) -> None:
    """The demo suite runs the three-agent workflow: overall results with planner, researcher and
    writer sub-results in Parquet; the writer's scripted weakness shows only in its own results."""
    suite = load_suite(ROOT / "examples/travel/suite.yaml", ["repetitions=1"])
    suite.output_dir = str(tmp_path)
    outcome = await arun_suite(suite)
    assert outcome.state == "Completed", outcome.message
    assert outcome.gate_passed is True
    results, scoped = load_run(outcome.run_dir)
    assert list(results.sub_results) == ["planner", "researcher", "writer"]
    # task_navigation_efficiency is scoped to the researcher and the overall answer
    assert scoped.provider == "Local (researcher, overall)"
    assert list(scoped.sub_results) == ["researcher"]
    assert set(scoped.per_evaluator) == {"task_navigation_efficiency"}
    assert scoped.passed == 5
    writer = results.sub_results["writer"].per_evaluator["mentions_expected"]
    researcher = results.sub_results["researcher"].per_evaluator["mentions_expected"]
    assert researcher == {"passed": 5, "failed": 0, "errored": 0}
    assert writer["failed"] == 3
    ids = [i.item_id for i in results.sub_results["writer"].items]
    assert ids[0] == "trip-paris#0/writer"
    summary = pq.read_table(outcome.run_dir / "summary.parquet").to_pylist()
    assert {r["agent"] for r in summary} == {"overall", "planner", "researcher", "writer"}


async def test_canary_suite_gate_fails_on_known_bad_agents(tmp_path: Path) -> None:
    """The test of the test: known-bad agents (wrong city, off topic) fail the demo's own gate."""
    suite = load_suite(ROOT / "examples/travel/canary.yaml")
    suite.output_dir = str(tmp_path)
    outcome = await arun_suite(suite)
    assert outcome.state == "Failed"
    assert outcome.gate_passed is False
    assert "researcher: all_pass(tool_call_args_match)" in (outcome.message or "")
    assert "researcher: mean(task_navigation_efficiency) >= 0.9" in (outcome.message or "")
    results, _ = load_run(outcome.run_dir)
    assert results.passed == 0


async def test_foundry_on_a_workflow_one_eval_per_agent_group_one_run_per_shard(
    tmp_path: Path,
) -> None:
    """On a workflow, Foundry creates one eval per group (overall and each agent) for the whole
    run and one run per group per shard; sub-results come back per agent."""
    from fakes.foundry_emulator import TOKEN, FoundryEmulator

    emu = FoundryEmulator(token=TOKEN).start()
    try:
        foundry = {
            "endpoint": emu.endpoint,
            "model": "judge",
            "evaluators": ["relevance"],
            "poll_interval": 0.01,
            "credential": "fakes.foundry_emulator:StaticCredential",
        }
        suite = load_suite(
            ROOT / "examples/travel/suite.yaml",
            ["repetitions=2", "shard_size=5", "gates=[]"],
        )
        suite.evaluators = [{"foundry": foundry}]
        suite.output_dir = str(tmp_path)
        outcome = await arun_suite(suite)
        assert outcome.state == "Completed", outcome.message
        (results,) = load_run(outcome.run_dir)
        assert results.provider == "Microsoft Foundry"
        assert list(results.sub_results) == ["planner", "researcher", "writer"]
        assert results.errored == 0
        assert len(results.items) == 10
        assert len(emu.calls("POST", r"/evals$")) == 4
        assert len(emu.run_objects()) == 4 * 2
    finally:
        emu.stop()


async def test_a_judge_global_limit_bounds_requests_across_concurrent_runs(project: Path) -> None:
    """With GCL judge:<host>:<model> of size 2, two concurrent flow runs whose judge allows 4
    requests each never have more than 2 judge requests in flight (and do use both slots)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    from fakes.openai_server import FakeOpenAIServer, verdict

    with FakeOpenAIServer(lambda _req: verdict(5), default_delay=0.05) as server:
        judge = {
            "base_url": server.base_url,
            "model": "gcl-judge",
            "metrics": ["relevance"],
            "max_concurrency": 4,
        }
        path = _write_project(
            project, rows=8, repetitions=1, shard_size=4, evaluators=[{"judge": judge}]
        )
        first, second = load_suite(path), load_suite(path)
        second.output_dir = str(project / "runs-2")
        async with get_client() as client:
            await client.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name="judge:127.0.0.1:gcl-judge", limit=2)
            )
        outcomes = await asyncio.gather(arun_suite(first), arun_suite(second))
        assert [o.state for o in outcomes] == ["Completed", "Completed"]
        assert len(server.requests) == 16
        assert server.max_in_flight == 2


async def test_flow_writes_the_report_and_compares_with_the_last_run(project: Path) -> None:
    """Each run writes report.html beside its Parquet files (linked as an artifact); with
    compare_with: last, a later run's comparison artifact counts the verdict flips."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    # A relative output_dir (as in the demo suite): the report link is still an absolute URI.
    path = _write_project(project, rows=4, repetitions=1, compare_with="last", output_dir="runs")
    first = await arun_suite(load_suite(path), resume=False)
    assert first.state == "Completed", first.message
    report = (first.run_dir / "report.html").read_text(encoding="utf-8")
    assert "echo-suite" in report
    # The second run's check fails on every answer without a "2": three regressions.
    worse = load_suite(path, ["evaluators=[{keyword_check: [answer, '2']}]"])
    second = await arun_suite(worse, resume=False)
    assert second.state == "Completed", second.message
    assert (second.run_dir / "report.html").is_file()
    flow_run_id = read_manifest(second.run_dir)["flow_run_id"]
    async with get_client() as client:
        found = await client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["echo-suite-comparison", "echo-suite-report"])
            )
        )
    mine = {a.key: a for a in found if str(a.flow_run_id) == flow_run_id}
    assert set(mine) == {"echo-suite-comparison", "echo-suite-report"}
    assert "**3 regression(s)**" in str(mine["echo-suite-comparison"].data)
    link = (second.run_dir / "report.html").resolve().as_uri()
    assert str(mine["echo-suite-report"].data) == f"[report.html]({link})"


async def test_a_large_run_gets_its_report_from_a_child_process(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At REPORT_SUBPROCESS_CALLS calls or more with shards in the flow's process (threads),
    report.html comes from `python -m evalpipe.cli report` in a child process (the in-process
    writer is broken here and never called)."""
    import evalpipe.pipeline.flow as flow_module
    import evalpipe.report

    def broken(*args: object, **kwargs: object) -> None:
        raise AssertionError("the in-process report writer was called")

    monkeypatch.setattr(flow_module, "REPORT_SUBPROCESS_CALLS", 1)
    monkeypatch.setattr(evalpipe.report, "write_report", broken, raising=False)
    outcome = await arun_suite(load_suite(_write_project(project, rows=3, repetitions=1)))
    assert outcome.state == "Completed", outcome.message
    assert "echo-suite" in (outcome.run_dir / "report.html").read_text(encoding="utf-8")


async def test_the_failures_artifact_shows_query_and_response_and_where_the_rest_is(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failures artifact lists each item that did not pass with why, its query and its
    response, and when capped says how many more there are and where they all are."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from evalpipe.pipeline import flow

    monkeypatch.setattr(flow, "FAILURES_LISTED", 3)
    path = _write_project(project, rows=6, evaluators=[{"keyword_check": ["nope"]}])
    outcome = await arun_suite(load_suite(path))
    assert outcome.state == "Completed", outcome.message
    flow_run_id = read_manifest(outcome.run_dir)["flow_run_id"]
    async with get_client() as client:
        found = await client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["echo-suite-failures"]))
        )
    [artifact] = [a for a in found if str(a.flow_run_id) == flow_run_id]
    text = str(artifact.data)
    assert text.count("  - query: question ") == 3
    assert text.count("  - response: answer") == 3
    assert markdown("keyword_check: Missing keywords") in text  # text, escaped as markdown
    assert "Listed: the first 3 of 12; 9 more not listed; every item is in " in text
    assert markdown("scores.parquet") in text


def test_the_demo_piped_to_a_file_shows_every_agent(tmp_path: Path, prefect_api: str) -> None:
    """Regression: `make demo` piped to a file showed an empty agent column (output that is not a
    terminal was 120 columns and rich shrank `agent` to nothing). Every agent's line and every
    metric is in the piped output, at the default width and at COLUMNS=80."""
    root = Path(__file__).resolve().parents[2]
    for columns in (None, "80"):
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
        env["PREFECT_API_URL"] = prefect_api
        if columns:
            env["COLUMNS"] = columns
        out = tmp_path / f"demo-{columns}.txt"
        with out.open("w") as handle:
            done = subprocess.run(
                [
                    *(sys.executable, "-m", "evalpipe.cli", "run", "examples/travel/suite.yaml"),
                    *("--output", str(tmp_path / "runs"), "--new-run"),
                ],
                cwd=root,
                env=env,
                stdout=handle,
                stderr=subprocess.PIPE,
                text=True,
                timeout=240,
                check=False,
            )
        assert done.returncode == 0, done.stderr[-2000:]
        text = out.read_text()
        width = int(columns or 120)
        assert all(len(line) <= width for line in text.splitlines())
        for agent in ("overall", "planner", "researcher", "writer"):
            assert re.search(rf"^{agent}\s+15\s+\d+\s+\d+\s+0\s", text, flags=re.MULTILINE), agent
        for metric in (
            "tool_call_args_match",
            "mentions_expected",
            "concise",
            "task_navigation_efficiency",
        ):
            assert re.search(rf"^  {metric}\s+15\s", text, flags=re.MULTILINE), metric
        assert re.search(r"^Local \(researcher, overall\)", text, flags=re.MULTILINE)
