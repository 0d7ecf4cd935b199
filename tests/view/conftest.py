"""Runs made by the real flow for the view's tests, a real ``prefect server`` (with its UI) they are
made against, and ``evalpipe view`` serving them on a free loopback port.

The output directory holds: the demo workflow suite twice (v1, blessed; v2, a writer that keeps
the temperature and drops the hotel: verdicts flip both ways), the single-agent suite tagged
``nightly``, and the hostile suite of tests/pipeline/test_untrusted.py twice (its second run flips
two rows). Every run is made with ``EVALPIPE_VIEW_URL`` pointing at the view.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from live_prefect import ROOT, Server, free_port, prefect_server, start, stop, wait_for
from pipeline.test_untrusted import hostile_project

BIN = Path(sys.executable).parent

TRAVEL_V2 = '''
"""The demo workflow with another writer: it keeps the temperature and drops the hotel."""
import re

from evalpipe.targets.demo import ScriptedAgent, last_assistant_text
from evalpipe.targets.workflow import SequentialWorkflow
from examples.travel.workflow import planner, researcher


def _answer(notes, _results):
    weather = re.search(r"Weather in ([\\w ]+): (\\w+), (-?\\d+)°C\\.", notes)
    if weather is None:
        return "Which city would you like to travel to?"
    city, sky, temp = weather.groups()
    return f"Your trip to {city}: expect {sky} weather, {temp}°C. Enjoy!"


workflow = SequentialWorkflow(
    [
        planner(),
        researcher(),
        ScriptedAgent(
            "writer", instructions="Write the answer.", tools=[], plan=lambda t: [],
            compose=_answer, read=last_assistant_text,
        ),
    ],
    name="travel-planner",
)
'''


@dataclass
class Runs:
    """The runs the view serves, and where."""

    output: Path
    view_url: str
    server: Server
    dirs: dict[str, Path] = field(default_factory=dict)
    """``travel-v1``, ``travel-v2``, ``agent``, ``hostile-1``, ``hostile-2``: run directories."""

    def key(self, name: str) -> str:
        """The run's ``suite/run_name`` key (as the compare page names it)."""
        run = self.dirs[name]
        return f"{run.parent.name}/{run.name}"

    def page(self, name: str, suffix: str = "") -> str:
        """The run's page URL in the view."""
        run = self.dirs[name]
        return f"{self.view_url}/runs/{run.parent.name}/{run.name}{suffix}"


def _evalpipe(server: Server, cwd: Path, env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [str(BIN / "evalpipe"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: a gate failed, a verdict


def _newest(suite_dir: Path, known: set[Path]) -> Path:
    (found,) = [p.parent for p in suite_dir.glob("*/manifest.json") if p.parent not in known]
    return found


@pytest.fixture(scope="session")
def view_prefect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``prefect server start`` with its UI, for the whole session of view tests."""
    with prefect_server(
        tmp_path_factory.mktemp("view-prefect-home"), tmp_path_factory.mktemp("view-runs")
    ) as running:
        yield running


@pytest.fixture(scope="session")
def view_url(view_prefect: Server) -> Iterator[str]:
    """``evalpipe view OUTPUT`` on a free 127.0.0.1 port (the default host), knowing the session's
    Prefect API URL, stopped at the end."""
    output = view_prefect.output / "runs"
    output.mkdir()
    env = {**os.environ, "PREFECT_API_URL": view_prefect.api}  # the run pages link to the UI
    with served(output, env, view_prefect.home / "view.log") as url:
        yield url


@contextlib.contextmanager
def served(output: Path, env: dict[str, str], log: Path) -> Iterator[str]:
    """``evalpipe view OUTPUT`` on a free loopback port while the block runs: its URL."""
    port = free_port()
    proc = start([str(BIN / "evalpipe"), "view", str(output), "--port", str(port)], env, log)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(log.read_text(errors="replace"))
        try:
            return httpx.get(url + "/", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 60, "evalpipe view")
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def runs(view_prefect: Server, view_url: str, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Five runs made by `evalpipe run` against the session's Prefect server."""
    work = tmp_path_factory.mktemp("view-work")
    output = view_prefect.output / "runs"
    (work / "view_travel_v2.py").write_text(TRAVEL_V2, encoding="utf-8")
    hostile_project(work, output, "hostile.yaml", tags=["hostile"])
    path = os.pathsep.join([str(work), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {
        **view_prefect.env,
        "PYTHONPATH": path,
        "COLUMNS": "100",
        "EVALPIPE_VIEW_URL": view_url,
    }
    made = Runs(output, view_url, view_prefect)
    demo = str(ROOT / "examples/travel/suite.yaml")
    common = ["--no-progress", "--new-run", "--param", f"output_dir={output}"]

    def travel() -> None:  # v1, blessed, then v2 (compared with v1)
        _evalpipe(view_prefect, ROOT, env, "run", demo, *common, "--param", "repetitions=1")
        made.dirs["travel-v1"] = _newest(output / "travel-demo", set())
        _evalpipe(view_prefect, ROOT, env, "bless", str(made.dirs["travel-v1"]))
        _evalpipe(
            view_prefect,
            ROOT,
            env,
            "run",
            demo,
            *common,
            "--param",
            "repetitions=1",
            "--param",
            "target=view_travel_v2:workflow",
            "--param",
            "target_version=v2",
        )
        made.dirs["travel-v2"] = _newest(output / "travel-demo", {made.dirs["travel-v1"]})

    def agent() -> None:
        suite = str(ROOT / "examples/travel/agent_suite.yaml")
        _evalpipe(
            view_prefect, ROOT, env, "run", suite, *common, "--param", "repetitions=2",
            "--param", "tags=[nightly]",
        )  # fmt: skip
        made.dirs["agent"] = _newest(output / "travel-agent", set())

    def hostile() -> None:  # a run, then one whose verdicts flip
        _evalpipe(view_prefect, work, env, "run", "hostile.yaml", "--no-progress", "--new-run")
        made.dirs["hostile-1"] = _newest(output / "hostile", set())
        _evalpipe(
            view_prefect, work, {**env, "HOSTILE_FLIP": "1"}, "run", "hostile.yaml",
            "--no-progress", "--new-run",
        )  # fmt: skip
        made.dirs["hostile-2"] = _newest(output / "hostile", {made.dirs["hostile-1"]})

    # The three suites' runs are independent: made side by side (each suite's in its order).
    with ThreadPoolExecutor(max_workers=3) as pool:
        for done in [pool.submit(group) for group in (travel, agent, hostile)]:
            done.result()
    return made
