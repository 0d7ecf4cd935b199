"""The view's run page shows the judge-agreement panel from a calibration file found beside the
run under the runs root (evalpipe.calibration.calibrations_for), and no panel without one."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.testclient import TestClient

from evalpipe.calibration import calibrations_for, read_calibration
from evalpipe.cli import main
from evalpipe.view.app import create_app
from report.report_builders import write_run


def test_run_page_shows_the_calibration_found_beside_the_run(tmp_path: Path) -> None:
    """A calibration written to runs/<suite>/<run>.calibration.json appears on that run's page
    (κ, interval, n) and not on another run's; files that are not calibrations are ignored."""
    root = tmp_path / "runs"
    rows = [f"r{i}" for i in range(22)]
    judge = {(r, 0): (i % 3 != 0, 4.0 if i % 3 else 2.0) for i, r in enumerate(rows)}
    checks = {"fact": {k: (True, 1.0) for k in judge}}
    run = write_run(root / "crafted" / "run-a", checks, {"relevance": judge})
    other = write_run(root / "crafted" / "run-b", checks, {"relevance": judge})
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps(
                {"row_id": r, "metric": "relevance", "label": "fail" if i % 4 == 0 else "pass"}
            )
            + "\n"
            for i, r in enumerate(rows)
        )
    )
    written = root / "crafted" / "run-a.calibration.json"
    assert main(["calibrate", str(run), "--labels", str(labels), "-o", str(written)]) == 0
    (root / "crafted" / "broken.calibration.json").write_text("{not json")
    [c] = read_calibration(written).calibrations
    assert calibrations_for(root, "run-a") == [c]
    assert calibrations_for(root, "run-b") == []
    with TestClient(create_app(str(root))) as client:
        page = client.get("/runs/crafted/run-a")
        assert page.status_code == 200
        assert 'id="calibration"' in page.text
        assert c.kappa is not None
        assert c.kappa_low is not None
        assert f"{c.kappa:.3f} [{c.kappa_low:.3f}, {c.kappa_high:.3f}]" in page.text
        plain = client.get(f"/runs/crafted/{other.name}")
        assert plain.status_code == 200
        assert 'id="calibration"' not in plain.text
