"""`evalpipe view` beside a damaged run: the run is listed as damaged, naming the file it cannot
read, and every other run and page keeps working (issue 34)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from evalpipe.view.app import create_app
from report.report_builders import write_run
from view.conftest import served

DAMAGE = {
    "bad-json": ("manifest.json", b"{not json", "manifest.json: not valid JSON"),
    "not-utf8": ("manifest.json", b'{"a": "\xff\xfe"}', "manifest.json: not UTF-8 text"),
    "a-list": ("manifest.json", b"[1, 2]", "manifest.json: expected a JSON object, got list"),
    "truncated": ("summary.parquet", None, "summary.parquet: not a readable Parquet file"),
}


@pytest.fixture
def output(tmp_path: Path) -> Path:
    """One good finished run of suite `crafted` and four copies of it, each damaged one way."""
    root = tmp_path / "runs"
    good = write_run(
        root / "crafted" / "good",
        {"check": {("r0", 0): (True, 1.0), ("r1", 0): (False, 0.0)}},
    )
    for name, (file, content, _) in DAMAGE.items():
        copy = shutil.copytree(good, root / "crafted" / name)
        target = copy / file
        data = target.read_bytes()
        target.write_bytes(data[: len(data) // 2] if content is None else content)
    return root


def test_a_damaged_run_is_listed_as_damaged_and_every_other_page_works(output: Path) -> None:
    """Regression: a malformed, non-UTF-8 or list-valued manifest.json, or a truncated
    summary.parquet, made every page answer 500. The runs page lists each damaged run naming the
    file; the good run's pages answer 200; a damaged run's page says what cannot be read."""
    with TestClient(create_app(str(output))) as client:
        listed = client.get("/")
        assert listed.status_code == 200, listed.text[-1000:]
        assert listed.text.count('class="run"') == 1
        assert listed.text.count('class="damaged"') == len(DAMAGE)
        for name, (_, _, problem) in DAMAGE.items():
            assert f"{output}/crafted/{name}/{problem}" in listed.text
        for path in (
            "/runs/crafted/good",
            "/runs/crafted/good/samples",
            "/compare?b=crafted/good",
            "/trends/crafted",
        ):
            page = client.get(path)
            assert page.status_code == 200, (path, page.text[-1000:])
        broken = client.get("/runs/crafted/a-list")
        assert broken.status_code == 500
        assert "Cannot read this run" in broken.text
        assert "manifest.json: expected a JSON object, got list" in broken.text


def test_evalpipe_view_starts_beside_a_damaged_run(output: Path, tmp_path: Path) -> None:
    """Regression: `evalpipe view` refused to start (exit 2) when one run was damaged. It starts,
    warns naming each damaged file, and serves the runs page."""
    log = tmp_path / "view.log"
    with served(output, dict(os.environ), log) as url:
        assert httpx.get(url + "/", timeout=10).text.count('class="damaged"') == len(DAMAGE)
    said = log.read_text(errors="replace")
    assert "1 run(s) (4 damaged, listed as such)" in said
    for name, (_, _, problem) in DAMAGE.items():
        assert f"warning: damaged run {output}/crafted/{name}: " in said
        assert problem in said
    assert "Traceback" not in said


def test_stopping_evalpipe_view_speaks_of_the_view_not_of_a_run(tmp_path: Path) -> None:
    """SIGTERM (or Ctrl-C) ends `evalpipe view` with 'interrupted: view stopped', not the run's
    hint about journaled calls to resume: only `evalpipe run` has those."""
    output = tmp_path / "runs"
    output.mkdir()
    log = tmp_path / "view.log"
    with served(output, dict(os.environ), log):
        pass  # up and answering; leaving the block sends it SIGTERM
    said = log.read_text(errors="replace")
    assert "interrupted: view stopped" in said, said
    assert "journaled" not in said
