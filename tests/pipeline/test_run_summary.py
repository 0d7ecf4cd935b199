"""`evalpipe run`'s summary comes from summary.parquet and the tally, never from the run's items:
checked on a real run (the flow on Prefect, its Parquet files, then the command's summary) through
the readers' own count of what they rebuild (``evalpipe.artifacts.reader.LOADED``)."""

from __future__ import annotations

import json
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import yaml

from evalpipe.artifacts import load_run
from evalpipe.artifacts.reader import LOADED
from evalpipe.cli import main

pytestmark = pytest.mark.usefixtures("prefect_api")

AGENT = """
from evalpipe import AgentResponse, Message


class HalfRight:
    name = "half"

    async def run(self, messages, **kwargs):
        n = int(messages[-1].text.split()[-1])
        return AgentResponse(messages=[Message("assistant", ["answer" if n % 2 == 0 else "no idea"])])


agent = HalfRight()
"""


def _project(root: Path) -> Path:
    (root / "half_agent.py").write_text(textwrap.dedent(AGENT), encoding="utf-8")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(15):
            fh.write(json.dumps({"id": f"q{i}", "query": f"question {i}"}) + "\n")
    suite = {
        "name": "half",
        "target": "half_agent:agent",
        "dataset": "queries.jsonl",
        "repetitions": 2,
        "evaluators": [{"keyword_check": ["answer"]}],
        "output_dir": str(root / "runs"),
    }
    path = root / "suite.yaml"
    path.write_text(yaml.safe_dump(suite), encoding="utf-8")
    return path


def test_the_summary_of_a_real_run_rebuilds_no_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evalpipe run` of 30 items (14 failing) prints every count and the first 5 failures while
    rebuilding no EvalItem and no EvalItemResult, reading in full only the listed rows: the
    failures artifact's 14 (up to FAILURES_LISTED) and the summary's 5."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("COLUMNS", "160")
    sys.modules.pop("half_agent", None)
    suite = _project(tmp_path)
    before = Counter(LOADED)

    assert main(["run", str(suite), "--no-progress"]) == 0

    during = Counter(LOADED)
    during.subtract(before)
    assert during["items"] == 0
    assert during["item_results"] == 0
    # one metric: one row per listed failure, the artifact's 14 then the summary's 5
    assert during["not_passed_rows"] == 14 + 5
    out = capsys.readouterr().out
    assert "16 passed, 14 failed, 0 errored of 30 items" in out
    assert "14 of 30 items did not pass; the first 5:" in out
    assert "... and 9 more not shown" in out
    assert out.count("keyword_check: Missing keywords: ['answer']") == 5

    # the same count sees load_run rebuilding them (so the zeros above are not a dead counter)
    (run_dir,) = (tmp_path / "runs" / "half").iterdir()
    (results,) = load_run(run_dir)
    assert Counter(LOADED)["item_results"] - before["item_results"] == 30
    assert Counter(LOADED)["items"] == before["items"]  # input_items: on first use only
    assert len(results.input_items) == 30
    assert Counter(LOADED)["items"] - before["items"] == 30


def test_the_not_passed_listing_of_a_run_does_not_load_duckdb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_not_passed (the run's failures artifact, in the run's own process) lists each result's
    first failures without importing DuckDB (~40 MiB in the process of every run)."""
    import subprocess

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("half_agent", None)
    assert main(["run", str(_project(tmp_path)), "--no-progress"]) == 0
    (run_dir,) = (tmp_path / "runs" / "half").iterdir()
    code = (
        "import json, sys\n"
        "from evalpipe.artifacts import read_not_passed\n"
        f"listed = read_not_passed({str(run_dir)!r}, limit=3)\n"
        "print(json.dumps({k: len(v) for k, v in listed.items()}), 'duckdb' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    counts, loaded = done.stdout.rsplit(" ", 1)
    assert list(json.loads(counts).values()) == [3]
    assert loaded.strip() == "False"
