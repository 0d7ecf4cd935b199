"""The HTML report of a real demo run (the travel workflow suite on the Prefect test server),
opened in headless Chromium."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from evalpipe.pipeline.run import run_suite
from evalpipe.report import write_report
from evalpipe.suite import load_suite

pytestmark = pytest.mark.usefixtures("prefect_api")

ROOT = Path(__file__).resolve().parents[2]


def test_demo_run_report_in_chromium(tmp_path: Path, browser: Any) -> None:
    """The demo run's report shows the suite, the gate, a metric table per agent with the
    writer's scripted weakness (mentions_expected 6 of 15), plots, repetitions and every item's
    transcript with its tool calls; nothing runs a script."""
    suite = load_suite(ROOT / "examples/travel/suite.yaml")
    suite.output_dir = str(tmp_path)
    # the sync Playwright browser keeps an event loop running in this thread; run_suite starts
    # its own, so it runs in a worker thread
    with ThreadPoolExecutor(max_workers=1) as pool:
        outcome = pool.submit(run_suite, suite).result(timeout=300)
    assert outcome.state == "Completed", outcome.message
    path = write_report(outcome.run_dir)
    assert path == outcome.run_dir / "report.html"

    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(path.as_uri())
    assert page.title() == "evalpipe report: travel-demo"
    assert page.locator("#gate").inner_text() == "pass"
    assert "examples.travel.workflow:workflow" in page.locator("#target").inner_text()
    agents = page.locator("table.metric-table").evaluate_all(
        "tables => tables.map(t => t.dataset.agent)"
    )
    assert agents == ["overall", "planner", "researcher", "writer"]
    writer = page.locator(
        'table.metric-table[data-agent="writer"] tr', has_text="mentions_expected"
    )
    assert "6 / 15" in writer.inner_text()
    assert "40.0%" in writer.inner_text()
    # one pass-rate chart per provider, one histogram per provider × agent × metric
    assert page.locator("figure.bars svg").count() == 2
    assert page.locator("figure.hist svg").count() == 14
    variability = page.locator("#variability-table tbody tr")
    assert variability.count() == 14
    assert "Flaky rows (0)" in page.locator("#flaky").inner_text()
    # every item is listed (60 < the cap), the not-passed first
    items = page.locator("details.item")
    assert items.count() == 60
    assert "fail" in (items.first.get_attribute("class") or "")
    researcher = page.locator('details.item[data-agent="researcher"]').first
    researcher.locator("> summary").click()
    researcher.locator("details.transcript > summary").click()
    transcript = researcher.locator("details.transcript").inner_text()
    assert "tool call: get_weather" in transcript
    assert "tool result" in transcript
    assert page.evaluate("document.scripts.length") == 0
    page.close()
    assert dialogs == []
