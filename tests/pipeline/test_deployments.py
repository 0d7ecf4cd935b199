"""Deployments end to end: a real `prefect server` (SQLite in a temporary PREFECT_HOME) on 127.0.0.1,
`evalpipe deploy` of deployments/prefect.yaml, a process worker, runs triggered from the CLI and from
Python, artifacts read back through the API, gate events read back from the events API, the Prefect
UI in headless Chromium, and `evalpipe serve`."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from evalpipe.pipeline import dask_worker
from live_prefect import Server, prefect_server, start, stop, wait_for

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
SCREENSHOT = ROOT / "docs" / "images" / "prefect-ui-flow-run.png"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`prefect server start` on a free loopback port, its own PREFECT_HOME and SQLite database."""
    with prefect_server(
        tmp_path_factory.mktemp("prefect-home"), tmp_path_factory.mktemp("runs")
    ) as running:
        yield running


@pytest.fixture(scope="module")
def worker(server: Server) -> Iterator[subprocess.Popen[bytes]]:
    """`evalpipe deploy` (checks suites, creates the pool, runs prefect deploy), then one worker."""
    deployed = subprocess.run(
        [str(BIN / "evalpipe"), "deploy"],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    proc = start(
        [str(BIN / "prefect"), "worker", "start", "--pool", "evalpipe-process", "--name", "w1"],
        server.env,
        server.home / "worker.log",
    )
    try:
        yield proc
    finally:
        stop(proc)


def _api(server: Server, method: str, path: str, body: Any = None) -> Any:
    """One API request; a 503 (the SQLite server busy on a loaded machine) is retried, 5 times."""
    for attempt in range(6):
        response = httpx.request(method, f"{server.api}{path}", json=body, timeout=30)
        if response.status_code != 503 or attempt == 5:
            break
        time.sleep(1 + attempt)
    response.raise_for_status()
    return response.json()


def _wait_final(server: Server, flow_run_id: str, timeout: float = 240) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        run = _api(server, "GET", f"/flow_runs/{flow_run_id}")
        return run if run["state"] and run["state"]["type"] in FINAL else None

    run: dict[str, Any] = wait_for(final, timeout, f"flow run {flow_run_id} to finish", step=1)
    return run


def _outputs(server: Server, name: str) -> Path:
    path = server.output / name
    path.mkdir(exist_ok=True)
    return path


def _gate_events(server: Server, flow_run_id: str) -> list[dict[str, Any]]:
    page = _api(
        server,
        "POST",
        "/events/filter",
        {"filter": {"event": {"prefix": ["evalpipe.gate."]}}, "limit": 50},
    )
    return [
        e
        for e in page["events"]
        if any(r["prefect.resource.id"] == f"prefect.flow-run.{flow_run_id}" for r in e["related"])
    ]


@pytest.fixture(scope="module")
def smoke_run(server: Server, worker: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The hourly smoke deployment triggered from the CLI with repetitions=2 and an output dir."""
    output = _outputs(server, "smoke")
    started = subprocess.run(
        [
            str(BIN / "prefect"),
            "deployment",
            "run",
            "evalpipe-eval/travel-smoke-hourly",
            "--param",
            "repetitions=2",
            "--param",
            "params=" + json.dumps({"output_dir": str(output)}),
        ],
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    match = re.search(r"UUID:\s*([0-9a-f-]{36})", started.stdout)
    assert match, started.stdout
    run = _wait_final(server, match.group(1))
    run["output"] = output
    return run


def test_deployed_run_completes_with_the_overridden_parameters(
    server: Server, smoke_run: dict[str, Any]
) -> None:
    """A CLI-triggered deployment run completes, named from the template, with its overrides applied."""
    log = (server.home / "worker.log").read_text(errors="replace")[-3000:]
    assert smoke_run["state"]["type"] == "COMPLETED", smoke_run["state"]["message"] + log
    assert re.fullmatch(r"travel-agent-x2-\d{8}-\d{6}", smoke_run["name"])
    assert smoke_run["parameters"]["repetitions"] == 2
    assert {"evalpipe", "smoke", "demo"} <= set(smoke_run["tags"])  # deployment + suite tags


def test_deployed_run_artifacts_exist_in_the_api_and_on_disk(
    server: Server, smoke_run: dict[str, Any]
) -> None:
    """The run's Prefect artifacts are readable through the API and its Parquet files are on disk."""
    artifacts = _api(
        server,
        "POST",
        "/artifacts/filter",
        {"artifacts": {"flow_run_id": {"any_": [smoke_run["id"]]}}},
    )
    by_key = {a["key"]: a for a in artifacts}
    assert {"travel-agent-summary", "travel-agent-failures", "travel-agent-run-dir"} <= set(by_key)
    assert by_key["travel-agent-summary"]["type"] == "table"
    run_dirs = [p for p in (smoke_run["output"] / "travel-agent").iterdir() if p.is_dir()]
    assert len(run_dirs) == 1
    runs = pq.read_table(run_dirs[0] / "runs.parquet")
    rows = len((ROOT / "examples/travel/queries.jsonl").read_text().splitlines())
    assert runs.num_rows == rows * 2  # repetitions=2 reached the flow
    assert set(runs.column("repetition").to_pylist()) == {0, 1}
    for name in ("items.parquet", "scores.parquet", "summary.parquet", "manifest.json"):
        assert (run_dirs[0] / name).is_file()


def test_passing_run_emits_the_gate_passed_event(server: Server, smoke_run: dict[str, Any]) -> None:
    """A run whose gate holds emits evalpipe.gate.passed about its suite, with its numbers."""
    events = wait_for(lambda: _gate_events(server, smoke_run["id"]), 30, "the gate event")
    assert [e["event"] for e in events] == ["evalpipe.gate.passed"]
    event = events[0]
    assert event["resource"]["prefect.resource.id"] == "evalpipe.suite.travel-agent"
    assert event["payload"]["gates"] == 3
    assert event["payload"]["violated"] == []
    assert event["payload"]["calls"]["total"] == smoke_run_calls(smoke_run)
    assert event["payload"]["calls"]["made"] == smoke_run_calls(smoke_run)


def smoke_run_calls(run: dict[str, Any]) -> int:
    rows = len((ROOT / "examples/travel/queries.jsonl").read_text().splitlines())
    return rows * int(run["parameters"]["repetitions"])


OPERATIONS = ROOT / "docs" / "operations.md"

RUN_BY_FIXTURES = {
    "export PREFECT_HOME=$PWD/.prefect-server": "server: its own PREFECT_HOME",
    "prefect server start --host 127.0.0.1 --port 4200 &": "server: the same, on a free port",
    "export PREFECT_API_URL=http://127.0.0.1:4200/api": "server: PREFECT_API_URL in its env",
    "evalpipe deploy": "worker: runs it and checks its exit code",
    "prefect worker start --pool evalpipe-process": "worker: the same, with --name w1",
}
"""Commands of docs/operations.md the module's fixtures run (on a free port, not 4200)."""


def _doc_commands() -> list[str]:
    """Every command in docs/operations.md: the lines of its bash blocks (continuations joined,
    comments dropped) and the inline `prefect gcl create ...` commands."""
    text = OPERATIONS.read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line:
                commands.append(re.sub(r"\s+", " ", line))
    commands += re.findall(r"`(prefect gcl create [^`]+)`", text)
    return commands


def _verbatim(
    command: str,
    env: dict[str, str],
    timeout: float = 300,
    *,
    cwd: Path = ROOT,
    stdin: str | None = None,
) -> str:
    """A documented command as written, by bash, with the project's tools on PATH."""
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={**env, "PATH": f"{BIN}:{env.get('PATH', '')}"},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_every_command_in_operations_md_is_run_by_a_test() -> None:
    """Each command docs/operations.md shows is run as written by this module (or, for the server,
    the deploy and the worker, by its fixtures), so a broken example fails a test."""
    commands = _doc_commands()
    triggers = [c for c in commands if c.startswith("prefect deployment run ")]
    assert len(triggers) == 4  # §4's two, and the budgets' two
    assert len(_budget_commands(commands)) == 2
    served = [c for c in commands if c.startswith("evalpipe serve ")]
    limits = [c for c in commands if c.startswith("prefect gcl create ")]
    secrets = _secret_commands(commands)
    # §12's commands are run as written by tests/view/test_view.py
    viewed = [c for c in commands if c.startswith(("evalpipe view ", "export EVALPIPE_VIEW_URL="))]
    # §7's event-triggered deployment is run as written by tests/docs/test_docs_commands.py
    on_event = [c for c in commands if "on-release.yaml" in c or c.startswith("prefect event emit")]
    assert len(served) == 1
    assert len(limits) == 2
    assert len(secrets) == 5
    assert len(viewed) == 2
    assert len(on_event) == 2
    # §9's Dask preload: the test cluster of tests/pipeline/test_task_runner.py starts its workers
    # with this module (tests/cluster_helpers.py), and a test checks what it set in them
    preloaded = [c for c in commands if c.startswith("dask worker ")]
    assert [c.split("--preload ")[-1] for c in preloaded] == [dask_worker.__name__]
    rest = [
        c
        for c in commands
        if c not in triggers + served + limits + secrets + viewed + on_event + preloaded
    ]
    # §10 starts the worker as §3 does: the same command, run by the worker fixture
    assert sorted(dict.fromkeys(rest)) == sorted(RUN_BY_FIXTURES)


def _budget_commands(commands: list[str]) -> list[str]:
    """§4's budget examples: a deployment run with a budget as a parameter."""
    return [c for c in commands if c.startswith("prefect deployment run ") and '"budget.' in c]


def test_the_budget_commands_run_as_written(
    server: Server, worker: subprocess.Popen[bytes]
) -> None:
    """§4's budget examples, as written: a deployment run with a token budget and one with a cost
    budget (the Python target priced under `target`) complete, and each has its spend artifact
    with the budget it was given."""
    for command, budget in zip(
        _budget_commands(_doc_commands()), ["2,000,000 tokens", "$5"], strict=True
    ):
        started = _verbatim(command, server.env)
        match = re.search(r"UUID:\s*([0-9a-f-]{36})", started)
        assert match, started
        run = _wait_final(server, match.group(1), timeout=300)
        assert run["state"]["type"] == "COMPLETED", run["state"]["message"]
        artifacts = _api(
            server,
            "POST",
            "/artifacts/filter",
            {
                "artifacts": {
                    "flow_run_id": {"any_": [run["id"]]},
                    "key": {"any_": ["travel-demo-spend"]},
                }
            },
        )
        [spend] = artifacts
        assert f"**Budget**: {budget}" in spend["data"]


def _secret_commands(commands: list[str]) -> list[str]:
    """§10's commands: the worker's environment, the Secret block and the pool's template."""
    starts = ("export OPENAI_API_KEY=", "python -c ", "prefect work-pool ")
    return [c for c in commands if c.startswith(starts)]


async def test_the_secret_commands_run_as_written(
    server: Server, worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    """§10's commands as written: the Secret block is saved, the pool's base job template stores
    a reference to it (never the value), and Prefect's job configuration for a run (what the
    worker builds each time it starts one) resolves the reference to the value."""
    value = f"sk-doc-{os.urandom(8).hex()}"
    for command in _secret_commands(_doc_commands()):
        _verbatim(command, server.env, cwd=tmp_path, stdin=value + "\n")
    pool = _api(server, "GET", "/work_pools/evalpipe-process")
    stored = json.dumps(pool["base_job_template"])
    assert "{{ prefect.blocks.secret.openai-api-key }}" in stored
    assert value not in stored
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.workers.process import ProcessJobConfiguration

    with temporary_settings(updates={PREFECT_API_URL: server.api}):
        async with get_client() as client:
            config = await ProcessJobConfiguration.from_template_and_values(
                pool["base_job_template"], {}, client=client
            )
    assert (config.env or {})["OPENAI_API_KEY"] == value


def test_the_trigger_commands_run_as_written(
    server: Server, worker: subprocess.Popen[bytes]
) -> None:
    """Both `prefect deployment run` examples of docs/operations.md §4, as written: their flow
    runs complete (the second, with its evaluator override and gates, named with version v2),
    and the run_deployment() example schedules a run."""
    first, second = [
        c
        for c in _doc_commands()
        if c.startswith("prefect deployment run ") and c not in _budget_commands(_doc_commands())
    ]
    started = _verbatim(first, server.env)
    match = re.search(r"UUID:\s*([0-9a-f-]{36})", started)
    assert match, started
    run = _wait_final(server, match.group(1), timeout=300)
    assert run["state"]["type"] == "COMPLETED", run["state"]["message"]
    assert run["parameters"]["repetitions"] == 5
    watched = _verbatim(second, server.env, timeout=400)
    match = re.search(r"UUID:\s*([0-9a-f-]{36})", watched)
    assert match, watched
    run = _api(server, "GET", f"/flow_runs/{match.group(1)}")
    assert run["state"]["type"] == "COMPLETED", run["state"]["message"]
    assert re.fullmatch(r"travel-demo-v2-x3-\d{8}-\d{6}", run["name"]), run["name"]

    text = OPERATIONS.read_text(encoding="utf-8")
    [block] = [
        b
        for b in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
        if "run_deployment" in b and "travel-nightly" in b
    ]
    from prefect.settings import PREFECT_API_URL, temporary_settings

    printed = io.StringIO()
    with (
        temporary_settings(updates={PREFECT_API_URL: server.api}),
        contextlib.redirect_stdout(printed),
    ):
        exec(compile(block, "docs/operations.md[run_deployment]", "exec"), {"__name__": "__main__"})
    flow_run_id, name = printed.getvalue().split(maxsplit=1)
    assert name.strip()  # Prefect's placeholder: the flow names the run when it starts
    assert _api(server, "GET", f"/flow_runs/{flow_run_id}")["parameters"]["repetitions"] == 5
    # scheduled is what the example shows; running it too would only load the shared server
    _api(
        server,
        "POST",
        f"/flow_runs/{flow_run_id}/set_state",
        {"state": {"type": "CANCELLED", "name": "Cancelled"}, "force": True},
    )


def test_the_concurrency_limit_commands_run_as_written(server: Server) -> None:
    """The `prefect gcl create` commands of docs/operations.md §8 create the limits they name."""
    for command in [c for c in _doc_commands() if c.startswith("prefect gcl create ")]:
        _verbatim(command, server.env, timeout=60)
    limits = {
        g["name"]: g["limit"] for g in _api(server, "POST", "/v2/concurrency_limits/filter", {})
    }
    assert limits["foundry"] == 4
    assert limits["judge:api.openai.com:gpt-4o-mini"] == 32


def test_the_serve_command_registers_its_deployment_as_written(server: Server) -> None:
    """`evalpipe serve` as docs/operations.md §5 writes it registers evalpipe-eval/travel-demo with
    the cron schedule and the target_version override."""
    [command] = [c for c in _doc_commands() if c.startswith("evalpipe serve ")]
    env = {**server.env, "PATH": f"{BIN}:{server.env.get('PATH', '')}"}
    proc = start(["bash", "-c", f"exec {command}"], env, server.home / "serve-doc.log")
    try:

        def deployment() -> dict[str, Any] | None:
            if proc.poll() is not None:
                raise AssertionError((server.home / "serve-doc.log").read_text(errors="replace"))
            response = httpx.get(
                f"{server.api}/deployments/name/evalpipe-eval/travel-demo", timeout=10
            )
            return response.json() if response.status_code == 200 else None

        dep = wait_for(deployment, 120, "the served deployment", step=1)
        assert dep["parameters"]["params"] == {"target_version": "v2"}
        assert [s["schedule"].get("cron") for s in dep["schedules"]] == ["0 2 * * *"]
    finally:
        stop(proc)


def test_run_without_api_url_uses_the_server_on_its_prefect_home(server: Server) -> None:
    """Regression: with the server's PREFECT_HOME but no PREFECT_API_URL, `evalpipe run` started an
    embedded server on the same SQLite file ("database is locked"). A server at the configured
    port (PREFECT_SERVER_API_PORT; 4200 by default, as operations §1 starts it) is the one it runs
    on now, and it says so."""
    env = {k: v for k, v in server.env.items() if k != "PREFECT_API_URL"}
    env["PREFECT_SERVER_API_PORT"] = server.api.rsplit(":", 1)[1].split("/", 1)[0]
    output = _outputs(server, "same-home")
    done = subprocess.run(
        [
            str(BIN / "evalpipe"),
            *("run", "examples/travel/agent_suite.yaml", "--no-progress"),
            *("--param", "repetitions=1", "--output", str(output)),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"note: using the Prefect server at {server.api}" in done.stderr
    [manifest] = list(output.glob("travel-agent/*/manifest.json"))
    flow_run_id = json.loads(manifest.read_text())["flow_run_id"]
    assert _api(server, "GET", f"/flow_runs/{flow_run_id}")["state"]["type"] == "COMPLETED"
    # no embedded server beside it: its errors would be on the run's stderr (the server's own
    # log may show SQLite contention of its own under this module's load: not checked)
    assert "database is locked" not in done.stderr
    assert "Starting temporary server" not in done.stderr


@pytest.fixture(scope="module")
def canary_run(server: Server, worker: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The canary deployment triggered from Python with run_deployment(timeout=0)."""
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    output = _outputs(server, "canary")

    async def trigger() -> str:
        with temporary_settings(updates={PREFECT_API_URL: server.api}):
            await _pause_nightly_on_gate_failure()
            flow_run = await run_deployment(
                "evalpipe-eval/travel-canary",
                parameters={"params": {"output_dir": str(output)}},
                timeout=0,
            )
        return str(flow_run.id)

    return _wait_final(server, asyncio.run(trigger()))


async def _pause_nightly_on_gate_failure() -> None:
    """The automation docs/operations.md §7 shows, as written: a failed canary gate pauses the
    nightly run."""
    text = OPERATIONS.read_text(encoding="utf-8")
    [block] = [
        b for b in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL) if "Automation(" in b
    ]
    # the block ends with asyncio.run(main()); here a loop runs already: define, then await main
    namespace: dict[str, Any] = {"__name__": "docs"}
    exec(
        compile(block.replace("asyncio.run(main())", ""), "docs/operations.md[automation]", "exec"),
        namespace,
    )
    await namespace["main"]()


def test_failed_gate_fails_the_deployed_run_naming_the_clauses(canary_run: dict[str, Any]) -> None:
    """A failing gate ends the flow run Failed, and its state message names the violated clauses."""
    assert canary_run["state"]["type"] == "FAILED"
    message = canary_run["state"]["message"]
    assert "gate failed for suite travel-canary" in message
    assert "researcher: all_pass(tool_call_args_match)" in message
    assert "researcher: pass_rate(mentions_expected) >= 0.8" in message


def test_failed_gate_emits_the_gate_failed_event(
    server: Server, canary_run: dict[str, Any]
) -> None:
    """The failed run's evalpipe.gate.failed event reaches the server's events API with its clauses."""
    events = wait_for(lambda: _gate_events(server, canary_run["id"]), 30, "the gate event")
    assert [e["event"] for e in events] == ["evalpipe.gate.failed"]
    payload = events[0]["payload"]
    assert payload["suite"] == "travel-canary"
    assert payload["target_version"] == "canary-v1"
    assert any(
        v.startswith("researcher: all_pass(tool_call_args_match)") for v in payload["violated"]
    )
    assert {"provider", "passed", "failed", "errored", "pass_rate"} <= set(payload["results"][0])
    roles = {r.get("prefect.resource.role") for r in events[0]["related"]}
    assert {"flow-run", "deployment"} <= roles


def test_prefect_ui_shows_the_flow_run_and_its_artifacts(
    server: Server, smoke_run: dict[str, Any], browser: Any
) -> None:
    """The server's UI, in headless Chromium, shows the deployed flow run, its state and artifacts."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"{server.url}/runs/flow-run/{smoke_run['id']}")
        page.get_by_text(smoke_run["name"]).first.wait_for(timeout=30_000)
        page.get_by_text("Completed").first.wait_for(timeout=30_000)
        page.get_by_text("Artifacts", exact=True).first.click()
        page.get_by_text("travel-agent-summary").first.wait_for(timeout=30_000)
        body = page.inner_text("body")
        assert "travel-agent-run-dir" in body
        assert "travel-agent-failures" in body
        shot = server.output / "ui.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
        if os.environ.get("EVALPIPE_UPDATE_SCREENSHOTS"):
            SCREENSHOT.parent.mkdir(exist_ok=True)
            SCREENSHOT.write_bytes(shot.read_bytes())
    finally:
        page.close()


def test_serve_registers_a_deployment_and_runs_it(server: Server) -> None:
    """`evalpipe serve` registers evalpipe-eval/<name> and runs a triggered run in its own process."""
    output = _outputs(server, "served")
    proc = start(
        [
            str(BIN / "evalpipe"),
            "serve",
            "examples/travel/agent_suite.yaml",
            "--name",
            "served-smoke",
            "--repetitions",
            "1",
            "--param",
            f"output_dir={output}",
        ],
        server.env,
        server.home / "serve.log",
    )
    try:

        def deployment() -> dict[str, Any] | None:
            if proc.poll() is not None:
                raise AssertionError((server.home / "serve.log").read_text(errors="replace"))
            response = httpx.get(
                f"{server.api}/deployments/name/evalpipe-eval/served-smoke", timeout=10
            )
            return response.json() if response.status_code == 200 else None

        dep = wait_for(deployment, 90, "the served deployment", step=1)
        assert dep["parameters"]["repetitions"] == 1
        created = _api(server, "POST", f"/deployments/{dep['id']}/create_flow_run", {})
        run = _wait_final(server, created["id"], timeout=120)
        assert run["state"]["type"] == "COMPLETED", (server.home / "serve.log").read_text()[-3000:]
        assert list((output / "travel-agent").glob("*/manifest.json"))
    finally:
        stop(proc)


def test_an_automation_on_the_gate_failed_event_pauses_a_deployment(
    server: Server, canary_run: dict[str, Any]
) -> None:
    """The automation on evalpipe.gate.failed (docs/operations.md) fires: the nightly is paused."""

    def paused() -> bool:
        dep = _api(server, "GET", "/deployments/name/evalpipe-eval/travel-nightly")
        return bool(dep["paused"])

    wait_for(paused, 60, "the automation to pause travel-nightly", step=1)
    smoke = _api(server, "GET", "/deployments/name/evalpipe-eval/travel-smoke-hourly")
    assert smoke["paused"] is False  # only the selected deployment
