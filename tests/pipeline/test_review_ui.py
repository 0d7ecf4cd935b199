"""The review form in the Prefect UI (headless Chromium against a real `prefect server start`):
`evalpipe review` pauses, the flow run's page offers the form with its fields and each item's text
rendered as text (the hostile corpus included: no live link, image, element or script), and the
run, resumed, writes the labels."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_untrusted import EVIL, HOSTILE

from evalpipe.calibration import read_labels
from live_prefect import Server, prefect_server, start, stop, wait_for
from report.report_builders import write_run

SHOWN = HOSTILE[:-1]  # the corpus but its 6,000-character text (cut in the form, tested elsewhere)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`prefect server start` with the UI, its own PREFECT_HOME and SQLite database."""
    with prefect_server(
        tmp_path_factory.mktemp("review-home"), tmp_path_factory.mktemp("review-out")
    ) as running:
        yield running


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    """POST, again (at most 5 times) while a busy SQLite server answers 503."""
    for _ in range(5):
        response = httpx.post(url, json=body, timeout=30)
        if response.status_code != 503:
            break
        time.sleep(1)
    return response


def _paused(server: Server, run_dir: Path) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        response = httpx.post(f"{server.api}/flow_runs/filter", json={"limit": 50}, timeout=10)
        for run in response.json():
            if (run.get("parameters") or {}).get("run_dir") == str(run_dir) and (
                run.get("state") or {}
            ).get("type") == "PAUSED":
                return dict(run)
        return None

    return dict(wait_for(find, 120, "a paused review flow run"))


def test_the_paused_review_shows_its_form_and_items_as_text_in_the_prefect_ui(
    server: Server, tmp_path: Path, browser: Any
) -> None:
    """The paused flow run's page in the Prefect UI opens the resume form: the description shows
    every hostile response as text, the fields are there, nothing from the data is live; resumed
    through the API, `evalpipe review` exits 0 with the labels written."""
    rows = [f"row{i}" for i in range(len(SHOWN))]
    judge = {(r, 0): (i % 2 == 0, 4.0 if i % 2 == 0 else 2.0) for i, r in enumerate(rows)}
    run_dir = write_run(
        tmp_path / "run",
        {"fact": {k: (True, 1.0) for k in judge}},
        {"relevance": judge},
        responses={(r, 0): SHOWN[i] for i, r in enumerate(rows)},
    )
    output = tmp_path / "labels.jsonl"
    cmd = [sys.executable, "-m", "evalpipe.cli", "review", str(run_dir), "--metric", "relevance"]
    cmd += ["--sample", str(len(rows)), "-o", str(output)]
    proc = start(cmd, server.env, tmp_path / "review.log")
    try:
        run = _paused(server, run_dir)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{server.url}/runs/flow-run/{run['id']}")
        page.get_by_role("button", name="Resume").first.click(timeout=60_000)
        page.get_by_text("Item 1: pass or fail").first.wait_for(timeout=60_000)
        page.get_by_text(f"Label {len(rows)} items on relevance").first.wait_for(timeout=60_000)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(server.output / "review-form.png"), full_page=True)
        body = page.inner_text("body")
        for number in range(1, len(rows) + 1):
            assert f"Item {number}: pass or fail" in body
        assert "Your name (labeller)" in body
        assert body.count("skip") >= len(rows)  # each verdict: a choice of skip / pass / fail
        assert "The judge's verdicts are hidden" in body
        for text in SHOWN:
            shown = text.replace("\u202e", "\\u202e").replace("\u202c", "\\u202c")
            shown = (
                shown.replace("\u200b", "\\u200b")
                .replace("\x1b", "\\u001b")
                .replace("\x07", "\\u0007")
            )
            assert " ".join(shown.split()) in " ".join(body.split()), text
        live = page.evaluate(
            """(evil) => {
                const found = [];
                for (const a of document.querySelectorAll('a[href]')) {
                    const h = a.getAttribute('href') || '';
                    if (h.includes(evil) || /^\\s*javascript:/i.test(h)) found.push('link ' + h);
                }
                for (const e of document.querySelectorAll('img, iframe, object, embed'))
                    if ((e.getAttribute('src') || '').includes(evil)) found.push(e.tagName);
                for (const e of document.querySelectorAll('#evalpipe-hostile, [onerror]'))
                    found.push(e.outerHTML.slice(0, 80));
                return found;
            }""",
            EVIL,
        )
        assert live == []
        assert dialogs == []
        page.close()
        answers = {"labeller": "ui", "verdict_1": "fail", "verdict_2": "pass"}
        response = _post(f"{server.api}/flow_runs/{run['id']}/resume", {"run_input": answers})
        assert response.status_code in (200, 201), response.text
        assert proc.wait(timeout=120) == 0, (tmp_path / "review.log").read_text()
    finally:
        stop(proc)
    assert [x.label for x in read_labels(output)] == ["fail", "pass"]
    assert json.loads(output.read_text().splitlines()[0])["labeller"] == "ui"


SERVE = (
    "from evalpipe.pipeline.review import review_flow\n"
    "review_flow.serve(name='review', limit=1, print_starting_message=False)\n"
)


def test_the_review_flow_runs_from_a_deployment(server: Server, tmp_path: Path) -> None:
    """Served as a deployment (`review_flow.serve()`), a run created through the API (what a
    reviewer's link starts) pauses for the form; resumed through the API it completes and writes
    the labels."""
    rows = [f"row{i}" for i in range(4)]
    judge = {(r, 0): (i % 2 == 0, 4.0 if i % 2 == 0 else 2.0) for i, r in enumerate(rows)}
    run_dir = write_run(
        tmp_path / "run", {"fact": {k: (True, 1.0) for k in judge}}, {"relevance": judge}
    )
    output = tmp_path / "deployed-labels.jsonl"
    proc = start([sys.executable, "-c", SERVE], server.env, tmp_path / "serve.log")
    try:

        def deployment() -> str | None:
            response = httpx.get(
                f"{server.api}/deployments/name/evalpipe-review/review", timeout=10
            )
            return str(response.json()["id"]) if response.status_code == 200 else None

        deployment_id = wait_for(deployment, 120, "the served review deployment")
        created = _post(
            f"{server.api}/deployments/{deployment_id}/create_flow_run",
            {
                "parameters": {
                    "run_dir": str(run_dir),
                    "metric": "relevance",
                    "output": str(output),
                    "sample": 4,
                    "poll_interval_s": 1,
                }
            },
        )
        assert created.status_code in (200, 201), created.text
        run = _paused(server, run_dir)
        assert run["id"] == created.json()["id"]
        response = _post(
            f"{server.api}/flow_runs/{run['id']}/resume",
            {"run_input": {"verdict_1": "pass", "verdict_3": "fail"}},
        )
        assert response.status_code in (200, 201), response.text

        def finished() -> str | None:
            state = httpx.get(f"{server.api}/flow_runs/{run['id']}", timeout=10).json()["state"]
            return state["type"] if state["type"] in ("COMPLETED", "FAILED", "CRASHED") else None

        assert wait_for(finished, 120, "the review run to finish") == "COMPLETED", (
            tmp_path / "serve.log"
        ).read_text()[-3000:]
    finally:
        stop(proc)
    assert [x.label for x in read_labels(output)] == ["pass", "fail"]
