"""The shell blocks of README.md and docs/*.md run as written (issue 31), against the demo's runs.

A fenced ``bash`` / ``console`` block is preceded by a marker comment saying what the harness does
with it:

- ``<!-- docs-test -->``: executed in a work directory holding a copy of ``examples/`` and
  ``deployments/``, the demo's runs (``runs/``), ``.venv`` and a real Prefect server; the shell is
  the activated venv (``fresh``: a new shell, nothing activated). A ``bash`` block must exit 0; in a
  ``console`` block each ``$ `` line (with its ``\\`` continuations) is a command, the lines after
  it its expected output (stdout and stderr), ``<...>`` standing for any text (a whole line of it:
  any lines). ``exit=N``: the commands exit N.
- ``<!-- docs-test: setup -->``: executed once before the others (``evalpipe run`` of the demo).
- ``<!-- docs-test: dedicated -->``: executed by a test of its own that checks what it did.
- ``<!-- docs-test: skip: WHY -->``: not executed, for the reason given (installs, long-running
  servers, external services).

Every shell block carries a marker (docs/artifacts.md is its own engineer's, issue 35).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from live_prefect import ROOT, Server, prefect_server

BIN = Path(sys.executable).parent
VENV = BIN.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
UNOWNED = {ROOT / "docs" / "artifacts.md"}
"""Files the harness leaves alone (issue 35 rewrites artifacts.md's cross-run examples)."""
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"<!-- docs-test(?::\s*(.*?))?\s*-->\s*\Z")
_SHELL = {"bash", "console", "sh", "shell"}
_EXIT = "@@docs-test-exit"


@dataclass(frozen=True)
class Block:
    """One fenced shell block of a doc, and its marker."""

    file: Path
    line: int
    lang: str
    body: str
    marker: str | None
    """The marker's options (``""``: plain ``docs-test``), None when unmarked."""

    @property
    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"

    @property
    def options(self) -> list[str]:
        return [o.strip() for o in (self.marker or "").split(",") if o.strip()]

    @property
    def skipped(self) -> bool:
        return (self.marker or "").startswith("skip")

    @property
    def setup(self) -> bool:
        return "setup" in self.options

    @property
    def exit_code(self) -> int:
        for option in self.options:
            if option.startswith("exit="):
                return int(option.removeprefix("exit="))
        return 0


def blocks() -> list[Block]:
    """Every fenced shell block of README.md and docs/*.md (but the files of another owner)."""
    found = []
    for file in DOCS:
        if file in UNOWNED:
            continue
        text = file.read_text(encoding="utf-8")
        for fence in _FENCE.finditer(text):
            if fence.group(1) not in _SHELL:
                continue
            before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = _MARKER.search(before)
            found.append(
                Block(
                    file,
                    text[: fence.start()].count("\n") + 1,
                    fence.group(1),
                    fence.group(2),
                    None if marker is None else (marker.group(1) or ""),
                )
            )
    return found


def commands(block: Block) -> list[tuple[str, list[str]]]:
    """A console block's commands, each with its expected output lines."""
    out: list[tuple[str, list[str]]] = []
    continued = False
    for line in block.body.splitlines():
        if continued:
            command, expected = out[-1]
            out[-1] = (command + "\n" + line, expected)
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            out.append((line[2:], []))
            continued = line.endswith("\\")
        elif out:
            out[-1][1].append(line)
        else:
            raise AssertionError(f"{block.where}: a console block starts with a '$ ' command")
    return out


def _pattern(expected: list[str]) -> re.Pattern[str]:
    """Expected output as a regex: ``<...>`` is any text, on a line of its own any lines."""
    parts = []
    for line in expected:
        if line.strip() == "<...>":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            text = "".join(
                ".*?" if piece == "<...>" else re.escape(piece)
                for piece in re.split(r"(<\.\.\.>)", line.rstrip())
            )
            parts.append(text + r"\n")
    return re.compile("".join(parts), re.DOTALL)


@dataclass
class Workspace:
    """Where the blocks run: the work directory and its shell's environment."""

    cwd: Path
    env: dict[str, str]
    fresh_env: dict[str, str]
    server: Server


def _run(script: str, cwd: Path, env: dict[str, str], timeout: float = 120) -> tuple[int, str]:
    done = subprocess.run(
        ["bash", "-c", "exec 2>&1\n" + script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout


def execute(block: Block, work: Workspace) -> None:
    """Run the block as its marker says; fail naming the doc's line, the command and the output."""
    env = work.fresh_env if "fresh" in block.options else work.env
    if block.lang != "console":
        code, output = _run("set -e\n" + block.body, work.cwd, env)
        assert code == block.exit_code, f"{block.where}: exit {code}\n{output[-3000:]}"
        return
    steps = commands(block)
    script = "".join(f"{command}\necho {_EXIT} $?\n" for command, _ in steps)
    _, output = _run(script, work.cwd, env)
    pieces = re.split(rf"^{_EXIT} (\d+)\n", output, flags=re.MULTILINE)
    assert len(pieces) == 2 * len(steps) + 1, f"{block.where}: the block stopped\n{output}"
    for i, (command, expected) in enumerate(steps):
        shown, code = pieces[2 * i], int(pieces[2 * i + 1])
        assert code == block.exit_code, f"{block.where}: `{command}` exited {code}\n{shown}"
        actual = "".join(line.rstrip() + "\n" for line in shown.splitlines())
        if expected:
            assert _pattern(expected).fullmatch(actual), (
                f"{block.where}: `{command}` printed\n{actual}\nexpected\n" + "\n".join(expected)
            )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """A work directory with a copy of the examples and deployments and the project's venv, a
    real Prefect server (its own PREFECT_HOME), and the demo's run made by the setup blocks."""
    cwd = tmp_path_factory.mktemp("docs-work")
    for name in ("examples", "deployments", "flows"):
        shutil.copytree(ROOT / name, cwd / name, ignore=shutil.ignore_patterns("__pycache__"))
    (cwd / ".venv").symlink_to(VENV)
    home = tmp_path_factory.mktemp("docs-prefect-home")
    with prefect_server(home, cwd / "runs") as server:
        path = [p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != BIN]
        base = {
            **server.env,
            "PATH": os.pathsep.join(path),
            "COLUMNS": "120",
            "NO_COLOR": "1",
            "TERM": "dumb",
            "PYTHONUNBUFFERED": "1",
            "HOME": str(cwd),
        }
        activated = {
            **base,
            "VIRTUAL_ENV": str(VENV),
            "PATH": os.pathsep.join([str(cwd / ".venv" / "bin"), *path]),
        }
        work = Workspace(cwd, activated, base, server)
        for block in blocks():
            if block.setup:
                execute(block, work)
        try:
            yield work
        finally:
            shutil.rmtree("/tmp/evalpipe-beside", ignore_errors=True)  # pipeline.md's example


def test_every_shell_block_is_marked() -> None:
    """Each shell block a newcomer could copy says whether the harness runs it (and why not)."""
    unmarked = [b.where for b in blocks() if b.marker is None]
    assert unmarked == []
    reasons = [
        b.where for b in blocks() if b.skipped and not b.marker.removeprefix("skip").strip(": ")
    ]
    assert reasons == []  # a skipped block says why


def test_the_harness_tells_a_wrong_output_and_a_wrong_exit_code(workspace: Workspace) -> None:
    """The checks can fail: an output or exit code other than the one written is caught."""
    wrong_output = Block(ROOT / "README.md", 0, "console", "$ echo hello\nhullo\n", "")
    with pytest.raises(AssertionError, match="printed"):
        execute(wrong_output, workspace)
    wrong_exit = Block(ROOT / "README.md", 0, "console", "$ false\n", "")
    with pytest.raises(AssertionError, match="exited 1"):
        execute(wrong_exit, workspace)
    elided = Block(
        ROOT / "README.md", 0, "console", "$ printf 'a\\nb\\nc 1.5 s\\n'\na\n<...>\nc <...> s\n", ""
    )
    execute(elided, workspace)


EXECUTED = [
    b
    for b in blocks()
    if b.marker is not None and not b.skipped and not b.setup and "dedicated" not in b.options
]


@pytest.mark.parametrize("block", EXECUTED, ids=[b.where for b in EXECUTED])
def test_the_block_runs_as_written(block: Block, workspace: Workspace) -> None:
    """The doc's commands exit as documented and print what the doc shows."""
    execute(block, workspace)


def test_the_event_triggered_deployment_runs_on_its_event(workspace: Workspace) -> None:
    """operations.md's triggered deployment: deployed as written, it has its trigger, and the
    documented event makes Prefect create its flow run with the event's version as target_version."""
    import httpx

    [block] = [b for b in blocks() if "dedicated" in b.options and "on-release.yaml" in b.body]
    env = {**workspace.env, "EVALPIPE_ROOT": str(workspace.cwd)}
    execute(block, Workspace(workspace.cwd, env, env, workspace.server))
    api = workspace.server.api
    deployment = httpx.get(
        f"{api}/deployments/name/evalpipe-eval/travel-on-release", timeout=30
    ).json()
    automations = httpx.get(
        f"{api}/automations/related-to/prefect.deployment.{deployment['id']}", timeout=30
    ).json()
    [trigger] = [a["trigger"] for a in automations]
    assert trigger["expect"] == ["travel-planner.released"]
    assert trigger["match"] == {"prefect.resource.id": "travel-planner"}

    def started() -> list[dict[str, object]]:
        found = httpx.post(
            f"{api}/flow_runs/filter",
            json={"flow_runs": {"deployment_id": {"any_": [deployment["id"]]}}},
            timeout=30,
        ).json()
        return list(found)

    from live_prefect import wait_for

    [run] = wait_for(started, 60, "the trigger's flow run", step=1)
    assert run["parameters"]["params"] == {"target_version": "v2"}
    assert run["parameters"]["suite"] == "examples/travel/suite.yaml"


def test_operations_6_names_the_task_runs_a_run_has(workspace: Workspace) -> None:
    """operations.md §6's task-run names are those of the demo's flow run (its `shard-N` one per
    shard, the others with Prefect's 3-character suffix; `prepare` only in a deployment's run,
    `compare` only with compare_with: the demo, run by `evalpipe run`, has neither)."""
    import httpx

    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text[text.index("## 6. ") : text.index("## 7. ")]
    bullet = section[section.index("- **Task runs**") :].split("\n- ", 1)[0]
    bullet = bullet[
        : bullet.index("A\n  shard retries") if "A\n  shard retries" in bullet else None
    ]
    documented = set(re.findall(r"`([a-z-]+(?:-N)?)`", bullet)) - {"compare_with"}
    assert documented == {"prepare", "shard-N", "gate", "write-artifacts", "report", "compare"}
    api = workspace.server.api
    [flow_run] = httpx.post(
        f"{api}/flow_runs/filter",
        json={
            "flow_runs": {"name": {"like_": "travel-demo-"}},
            "sort": "START_TIME_ASC",
            "limit": 1,
        },
        timeout=30,
    ).json()
    tasks = httpx.post(
        f"{api}/task_runs/filter",
        json={"task_runs": {"flow_run_id": {"any_": [flow_run["id"]]}}},
        timeout=30,
    ).json()
    shards = {re.sub(r"^shard-\d+$", "shard-N", t["name"]) for t in tasks}
    names = {n if n == "shard-N" else re.sub(r"-[0-9a-f]{3}$", "", n) for n in shards}
    assert names == documented - {"compare", "prepare"}  # the demo: `evalpipe run`, no compare_with
