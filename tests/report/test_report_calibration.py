"""The report's judge-agreement panel (`evalpipe report --calibration FILE`): κ with its interval,
n matched / labelled / errored beside the judge's pass rate on the run, hostile names escaped."""

from __future__ import annotations

import json
import re
from pathlib import Path

from report_builders import write_run

from evalpipe.calibration import read_calibration
from evalpipe.cli import main

HOSTILE_METRIC = "<img src=x onerror=alert(1)>"


def test_report_shows_kappa_interval_and_n_beside_the_pass_rate(tmp_path: Path) -> None:
    """The panel shows the calibration file's κ [low, high], n, labelled and errored for the
    judged metric, and the run's pass rate of that metric with its denominator; the metric name is
    escaped, never markup; without --calibration there is no panel."""
    rows = [f"r{i}" for i in range(24)]
    judge = {(r, 0): (i % 4 != 0, 4.0 if i % 4 else 2.0) for i, r in enumerate(rows)}
    judge[("r23", 0)] = ("error", None)
    run = write_run(
        tmp_path / "run", {"fact": {k: (True, 1.0) for k in judge}}, {HOSTILE_METRIC: judge}
    )
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps(
                {"row_id": r, "metric": HOSTILE_METRIC, "label": "fail" if i % 3 == 0 else "pass"}
            )
            + "\n"
            for i, r in enumerate(rows)
        )
    )
    assert main(["calibrate", str(run), "--labels", str(labels)]) == 0
    [c] = read_calibration(tmp_path / "calibration.json").calibrations
    out = tmp_path / "report.html"
    assert (
        main(
            [
                "report",
                str(run),
                "--calibration",
                str(tmp_path / "calibration.json"),
                "-o",
                str(out),
            ]
        )
        == 0
    )
    html = out.read_text()
    panel = html[
        html.index('<section id="calibration">') : html.index(
            "</section>", html.index('<section id="calibration">')
        )
    ]
    assert c.kappa is not None
    assert c.kappa_low is not None
    assert c.kappa_high is not None
    assert f"{c.kappa:.3f} [{c.kappa_low:.3f}, {c.kappa_high:.3f}]" in panel
    cells = re.findall(r"<td>(.*?)</td>", panel)
    assert cells[7:10] == ["23", "24", "1"]  # n matched, labelled, errored
    assert "0.739 (17 of 23)" in panel  # the run's pass rate: 17 passed of 23 verdicts
    assert "<img" not in panel
    assert "&lt;img src=x onerror=alert(1)&gt;" in panel
    plain_report = tmp_path / "plain.html"
    assert main(["report", str(run), "-o", str(plain_report)]) == 0
    assert 'id="calibration"' not in plain_report.read_text()
