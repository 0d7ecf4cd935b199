"""The report's HTML pinned byte for byte: crafted runs rendered by the current code against
golden files written by the code before the report read its tables as dictionary codes (the
run directory, the finish time, the git revision and the version masked). Regenerate only for an
intended change of the page: ``python tests/report/test_report_golden.py`` writes
tests/report/golden/.

One change since: in wide-capped.html the errored item row005#1 is labelled "error", as the same
run's uncapped page always labelled it (the capped drill-down had a second ranking of its own that
called every item not passed "fail"); its numbers and rows are unchanged."""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from report_builders import Outcome, write_run
from test_report import CHECKS, JUDGES, XSS

from evalpipe.report import load_report_data, render_report

GOLDEN = Path(__file__).resolve().parent / "golden"


def _crafted(run: Path) -> Path:
    return write_run(
        run, CHECKS, JUDGES, suite=f"suite {XSS}", responses={("b", 1): f"I think {XSS} is fine"}
    )


def _failed_call(run: Path) -> Path:
    keys = [("a", 0), ("b", 0), ("c", 0)]
    return write_run(
        run, {"kw": {k: (True, 1.0) for k in keys}}, failed_calls=frozenset({("b", 0)})
    )


def _wide(run: Path) -> Path:
    """60 rows x 2 repetitions, two checks and a judge: >64 distinct scores (the resampling
    bootstrap), >20 disagreements per pair (the examples' order), flaky rows, errors, n/a."""
    keys = [(f"row{i:03d}", rep) for i in range(60) for rep in range(2)]

    def kw(i: int, rep: int) -> Outcome:
        if i % 17 == 5 and rep:
            return ("error", None)
        return (i % 3 != rep, (i * 7 + rep) % 101 / 100)

    def length(i: int, rep: int) -> Outcome:
        return (None, 0.5) if i % 11 == 0 else (i % 4 != 1, float(i % 5))

    def judge(i: int, rep: int) -> Outcome:
        score = float(1 + (i * 3 + rep) % 5)
        return (score >= 3, score)

    n = {key: int(key[0][3:]) for key in keys}
    checks = {
        "kw": {k: kw(n[k], k[1]) for k in keys},
        "length": {k: length(n[k], k[1]) for k in keys},
    }
    return write_run(run, checks, {"relevance": {k: judge(n[k], k[1]) for k in keys}})


CASES: dict[str, tuple[Callable[[Path], Path], int]] = {
    "crafted": (_crafted, 200),
    "crafted-capped": (_crafted, 2),
    "crafted-counts-only": (_crafted, 0),
    "failed-call": (_failed_call, 200),
    "wide-capped": (_wide, 12),
}
"""name: (the run's builder, max_items); max_items 2 and 12 take the many-items path of the
drill-down (more than 4 x max_items items), 0 the counts-only one the view uses."""


def _render(name: str, root: Path) -> str:
    build, max_items = CASES[name]
    run = build(root / name)
    html = render_report(load_report_data(run, max_items=max_items))
    html = html.replace(str(run), "RUN")
    html = re.sub(r"<dt>finished</dt><dd>[^<]*</dd>", "<dt>finished</dt><dd>T</dd>", html)
    html = re.sub(r"<dt>git</dt><dd>[^<]*</dd>", "<dt>git</dt><dd>G</dd>", html)
    return re.sub(r"evalpipe \d[^\s\"<]*", "evalpipe V", html)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_report_html_is_the_golden_one(name: str, tmp_path: Path) -> None:
    """The rendered page of each crafted run equals its golden file, byte for byte."""
    expected = (GOLDEN / f"{name}.html").read_text(encoding="utf-8")
    assert _render(name, tmp_path) == expected


if __name__ == "__main__":  # pragma: no cover - regenerates the golden files
    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in sorted(CASES):
            (GOLDEN / f"{case}.html").write_text(_render(case, Path(tmp)), encoding="utf-8")
            print(case, file=sys.stderr)
