"""From a first run to the Prefect UI: on a fresh PREFECT_HOME `evalpipe run` prints the flow run's
UI URL, which the kept server answers with Prefect's UI; the flow run's Logs tab has the run's
milestones and a `<suite>-gate` artifact states the verdict; the canary's gate task run is Failed
(and the run exits 1) while the demo's is Completed."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalpipe.pipeline.server import state_dir, stop_server

ROOT = Path(__file__).resolve().parents[2]
URL = re.compile(r"^UI: (http://\S+/runs/flow-run/([0-9a-f-]{36}))$", re.M)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The demo suite then the canary, through `evalpipe run` on one fresh PREFECT_HOME (one
    kept server between them)."""
    base = tmp_path_factory.mktemp("ui")
    home = base / "prefect-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(home),
        EVALPIPE_SERVER_DB_TEMPLATES=str(base / "templates"),
        EVALPIPE_SERVER_IDLE_TIMEOUT="120",
        COLUMNS="200",
    )
    done = {}
    try:
        for name, suite in (("demo", "suite.yaml"), ("canary", "canary.yaml")):
            done[name] = subprocess.run(
                [
                    *(sys.executable, "-m", "evalpipe.cli", "run", f"examples/travel/{suite}"),
                    *("--no-progress", "--output", str(base / "runs")),
                ],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
        api = (state_dir(home) / "server.json").read_text()
        yield {"done": done, "home": home, "env": env, "server": api}
    finally:
        stop_server(home, force=True)


def _api_url(home: Path) -> str:
    import json

    return str(json.loads((state_dir(home) / "server.json").read_text())["api_url"])


async def _flow_run(api_url: str, flow_run_id: str) -> dict[str, Any]:
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
    )

    async with PrefectClient(api_url) as client:
        run = await client.read_flow_run(flow_run_id)
        logs = await client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id]))
        )
        tasks = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id]))
        )
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
        )
    return {
        "state": run.state_name,
        "logs": [log.message for log in logs],
        "tasks": {t.name.rsplit("-", 1)[0]: t.state_name for t in tasks},
        "artifacts": {a.key: a.data for a in artifacts if a.key},
    }


def test_the_run_prints_its_flow_runs_ui_url_and_the_ui_answers(runs: dict[str, Any]) -> None:
    """The first line names the flow run's page; the end names it again with the view command;
    the page is Prefect's UI (HTML), served by the kept server."""
    demo = runs["done"]["demo"]
    assert demo.returncode == 0, demo.stderr[-3000:]
    first = URL.search(demo.stderr)
    assert first is not None, demo.stderr[:2000]
    assert demo.stderr.lstrip().startswith(f"UI: {first.group(1)}")
    assert f"UI: {first.group(1)}" in demo.stdout
    assert "view: evalpipe view " in demo.stdout
    request = urllib.request.Request(first.group(1), headers={"Accept": "text/html"})
    page = urllib.request.urlopen(request, timeout=30).read().decode()
    assert "<!DOCTYPE html>" in page
    assert first.group(1).startswith(_api_url(runs["home"]).removesuffix("/api"))


def test_the_flow_run_has_its_milestones_and_a_gate_artifact(runs: dict[str, Any]) -> None:
    """The Logs tab has the plan, the calls, each provider's totals, the gate verdict clause by
    clause and where the files are; the gate artifact lists every clause with its verdict."""
    demo = runs["done"]["demo"]
    match = URL.search(demo.stderr)
    assert match is not None
    seen = asyncio.run(_flow_run(_api_url(runs["home"]), match.group(2)))
    logs = "\n".join(seen["logs"])
    assert "suite travel-demo: 5 rows x 3 repetitions = 15 calls" in logs
    assert "target calls: 15 made" in logs
    assert "Local: 12 passed, 3 failed, 0 errored of 15 items" in logs
    assert "Gate passed: 5 of 5 clauses hold" in logs
    assert "run finished in" in logs
    assert "report.html" in logs
    gate = seen["artifacts"]["travel-demo-gate"]
    assert gate.startswith("# Gate passed: travel\\-demo")
    assert gate.count("| ok |") == 5
    assert "mean\\(concise\\) \\>\\= 0\\.8" in gate
    assert seen["tasks"]["gate"] == "Completed"


def test_the_canarys_gate_task_run_is_failed(runs: dict[str, Any]) -> None:
    """A failed gate: exit 1, the flow run and its gate task run Failed, the artifact says FAILED
    with each violated clause."""
    canary = runs["done"]["canary"]
    assert canary.returncode == 1, canary.stderr[-3000:]
    match = URL.search(canary.stderr)
    assert match is not None
    seen = asyncio.run(_flow_run(_api_url(runs["home"]), match.group(2)))
    assert seen["state"] == "Failed"
    assert seen["tasks"]["gate"] == "Failed"
    gate = seen["artifacts"]["travel-canary-gate"]
    assert gate.startswith("# Gate FAILED: travel\\-canary")
    assert gate.count("| **FAIL** |") == 3
    assert "Gate FAILED: 3 of 5 clauses violated" in "\n".join(seen["logs"])
