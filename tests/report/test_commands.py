"""The report and compare commands through `evalpipe`'s own command line: exit codes 0 / 1
(regression with --fail-on-regression) / 2 (bad input, with the message)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from report_builders import write_run

from evalpipe.cli import main


def _run(argv: list[str]) -> int:
    return main(argv)


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    rows = [f"q{i}" for i in range(6)]
    a = write_run(tmp_path / "a", {"kw": {(r, 0): (True, 1.0) for r in rows}}, suite="base")
    b = write_run(
        tmp_path / "b",
        {"kw": {(r, 0): (r != "q3", 1.0 if r != "q3" else 0.0) for r in rows}},
        suite="cand",
    )
    return a, b


def test_report_writes_the_html(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    """`report RUN_DIR -o out.html` writes the file and exits 0; without -o it goes in the run."""
    a, _ = two_runs
    out = tmp_path / "out.html"
    assert _run(["report", str(a), "-o", str(out)]) == 0
    assert '<h1 id="suite-name">base</h1>' in out.read_text(encoding="utf-8")
    assert _run(["report", str(a), "--max-items", "1"]) == 0
    assert "5 items omitted" in (a / "report.html").read_text(encoding="utf-8")


def test_report_of_a_missing_or_unfinished_run_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing directory and one without manifest.json: exit 2, the message names it."""
    missing = tmp_path / "nope"
    assert _run(["report", str(missing)]) == 2
    assert f"{missing}: no such directory" in capsys.readouterr().err
    (tmp_path / "half").mkdir()
    assert _run(["report", str(tmp_path / "half")]) == 2
    assert "no manifest.json" in capsys.readouterr().err
    assert _run(["compare", str(tmp_path / "half"), str(missing)]) == 2


def test_compare_exit_codes_and_outputs(
    two_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A regression exits 0 by default, 1 with --fail-on-regression; --html and --markdown write
    their files; no regression with --fail-on-regression exits 0."""
    a, b = two_runs
    html, md = tmp_path / "c.html", tmp_path / "c.md"
    assert _run(["compare", str(a), str(b), "--html", str(html), "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    assert "1 regression(s), 0 improvement(s)" in out
    assert "regression(s)" in html.read_text(encoding="utf-8")
    assert "| regression | overall | kw | q3 | 0 |" in md.read_text(encoding="utf-8")
    assert _run(["compare", str(a), str(b), "--fail-on-regression"]) == 1
    assert "--fail-on-regression" in capsys.readouterr().err
    assert _run(["compare", str(b), str(a), "--fail-on-regression"]) == 0


def test_registering_the_commands_does_not_import_scipy() -> None:
    """Building the command line does not import scipy or the report modules: they load only
    when a report or comparison runs (each command imports them when it runs)."""
    code = (
        "import sys; from evalpipe.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('scipy', 'evalpipe.report.stats', 'evalpipe.report.data') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
