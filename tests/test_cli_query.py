"""``evalpipe query``: SQL over every finished run's tables under a directory, read-only."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from artifacts.artifact_builders import workflow_batch
from evalpipe.artifacts import RunRecord, RunWriter
from evalpipe.cli import main


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Two finished runs of one suite and an unfinished one, in the pipeline's layout."""
    for name, count in (("r1", 3), ("r2", 5)):
        with RunWriter(tmp_path / "runs" / "nightly" / name, suite="nightly") as writer:
            writer.add_runs([RunRecord(run_id=f"{name}-c")])
            writer.add_results(workflow_batch(0, count))
    (tmp_path / "runs" / "nightly" / "r3").mkdir()  # no manifest: not read
    (tmp_path / "secret.csv").write_text("a\n1\n")
    return tmp_path / "runs"


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    assert main(["query", *args, "--format", "json"]) == 0
    out: list[dict[str, object]] = json.loads(capsys.readouterr().out)
    return out


def test_query_stacks_every_finished_run_and_groups_without_a_join(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The views stack every finished run's table; rows name their suite and run."""
    rows = _json(
        capsys,
        "SELECT suite, run_name, count(DISTINCT item_id) AS items FROM scores "
        "WHERE agent = 'overall' GROUP BY ALL ORDER BY run_name",
        str(runs),
    )
    assert rows == [
        {"suite": "nightly", "run_name": "r1", "items": 3},
        {"suite": "nightly", "run_name": "r2", "items": 5},
    ]
    one = _json(capsys, "SELECT DISTINCT run_name FROM summary", str(runs / "nightly" / "r2"))
    assert one == [{"run_name": "r2"}]


def test_query_is_read_only(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A statement other than SELECT is refused before it runs (exit 2, nothing written), and no
    file outside the directory can be read."""
    target = runs / "out.csv"
    code = main(["query", f"COPY (SELECT * FROM scores) TO '{target}'", str(runs)])
    assert code == 2
    assert not target.exists()
    assert "read-only, write a SELECT" in capsys.readouterr().err
    code = main(["query", f"SELECT * FROM read_csv('{tmp_path / 'secret.csv'}')", str(runs)])
    assert code == 2
    assert "only the files under" in capsys.readouterr().err
    assert main(["query", "SET enable_external_access = true; SELECT 1", str(runs)]) == 2


def test_query_bad_input_names_what_to_fix(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown table or column, or a directory without a finished run, exits 2 saying so."""
    assert main(["query", "SELECT * FROM score", str(runs)]) == 2
    assert "the tables: runs, items, scores, summary" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["query", "SELECT 1", str(empty)]) == 2
    assert "no finished run" in capsys.readouterr().err


def test_query_prints_a_table_and_csv(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default table and --format csv print the same rows."""
    sql = "SELECT run_name, count(*) AS calls FROM runs GROUP BY ALL ORDER BY ALL"
    assert main(["query", sql, str(runs)]) == 0
    table = capsys.readouterr().out
    assert "r1" in table
    assert "2 row(s)" in table
    assert main(["query", sql, str(runs), "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["run_name,calls", "r1,1", "r2,1"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_query_output_to_a_terminal_shows_control_characters_escaped(
    runs: Path, fmt: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Untrusted text in --format json/csv reaches a terminal with its bidi and control
    characters escaped (a file or a pipe gets it as it is)."""
    sql = "SELECT chr(8238) || 'evil' || chr(155) || '2J' AS x"
    assert main(["query", sql, str(runs), "--format", fmt]) == 0
    piped = capsys.readouterr().out
    assert "\u202e" in piped
    assert "\x9b" in piped
    screen = _Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    assert main(["query", sql, str(runs), "--format", fmt]) == 0
    shown = screen.getvalue()
    assert "\u202e" not in shown
    assert "\x9b" not in shown
    assert "\\u202e" in shown
