"""`evalpipe view` on runs the real flow made (tests/view/conftest.py), in headless Chromium: the
runs list, a run, the sample table filtered to one agent's failed items, an item's transcript,
compare with both transcripts side by side, trends; and what keeps it safe: no path outside the
served directory, hostile text stays text, a Content-Security-Policy, no write endpoint, loopback
by default and a foreign Host refused. The Prefect UI's report artifact opens the run's page."""

from __future__ import annotations

import html
import http.client
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pyarrow.compute as pc
import pytest

from evalpipe.artifacts import find_runs, read_manifest, read_table
from evalpipe.report.compare import compare_runs
from pipeline.test_untrusted import AGENTS
from view.conftest import Runs, served

BIN = Path(sys.executable).parent

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _page(browser: Any) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(30_000)
    return page


def _verdicts(run_dir: Path) -> dict[tuple[str, str], str]:
    """(agent, item_id) -> the item's verdict over every provider (its worst status)."""
    scores = read_table(run_dir, "scores", columns=["agent", "item_id", "item_status"])
    rank = {"pass": 0, "fail": 1, "error": 2, "errored": 3}
    out: dict[tuple[str, str], str] = {}
    for r in scores.to_pylist():
        key = (r["agent"], r["item_id"])
        if key not in out or rank[r["item_status"]] > rank[out[key]]:
            out[key] = r["item_status"]
    return out


def test_runs_list_is_newest_first_and_filters_by_suite_and_tag(runs: Runs, browser: Any) -> None:
    """The runs list shows every run newest first (as find_runs orders them), with its gate and
    baseline, and narrows to one suite and to one tag."""
    expected = [f"{r.suite}/{r.run_name}" for r in find_runs(str(runs.output))]
    assert len(expected) == 5
    page = _page(browser)
    page.goto(runs.view_url + "/")
    shown = page.locator("tr.run").evaluate_all("rows => rows.map(r => r.dataset.run)")
    assert shown == expected
    baseline_row = page.locator(f'tr.run[data-run="{runs.key("travel-v1")}"]')
    assert "baseline" in baseline_row.inner_text()
    page.select_option("select[name=suite]", "travel-demo")
    page.click("form.filters button")
    page.wait_for_url(re.compile(r"suite=travel-demo"))
    shown = page.locator("tr.run").evaluate_all("rows => rows.map(r => r.dataset.run)")
    assert shown == [runs.key("travel-v2"), runs.key("travel-v1")]
    page.goto(runs.view_url + "/?tag=nightly")
    shown = page.locator("tr.run").evaluate_all("rows => rows.map(r => r.dataset.run)")
    assert shown == [runs.key("agent")]
    page.close()


def test_run_page_shows_the_report_and_the_judge_cost(runs: Runs, browser: Any) -> None:
    """A run's page has the report's content (results, metrics per agent, plots, what the run
    spent) and the judge cost per provider, with links to its sample table, comparison and
    trends."""
    page = _page(browser)
    page.goto(runs.page("travel-v2"))
    assert page.title() == f"evalpipe view: travel-demo · {runs.dirs['travel-v2'].name}"
    results = page.locator("#results tbody tr").all_inner_texts()
    agents = {line.split("\t")[1] for line in results}
    assert agents == {"overall", "planner", "researcher", "writer"}
    summary = read_table(runs.dirs["travel-v2"], "summary", columns=["kind", "provider"])
    providers = set(summary.filter(pc.equal(summary["kind"], "result"))["provider"].to_pylist())
    costs = page.locator("#cost-table tbody tr").all_inner_texts()
    assert {line.split("\t")[0] for line in costs} == providers
    assert page.locator("table.metric-table").count() == 4  # one per agent
    assert page.locator("#plots svg").count() >= 2
    assert page.locator("#samples-link").inner_text() == "sample table (20 items)"
    spend = read_manifest(runs.dirs["travel-v2"])["spend"]
    assert page.locator("#spend").inner_text().startswith(f"{spend['tokens']:,} tokens (target")
    page.close()


def test_filter_to_one_agents_failed_items_then_open_a_transcript(runs: Runs, browser: Any) -> None:
    """Filtering the sample table to status fail and agent writer lists exactly the writer's
    failed items (as scores.parquet has them); one click opens an item's transcript and reasons."""
    run = runs.dirs["travel-v2"]
    expected = sorted(
        item for (agent, item), v in _verdicts(run).items() if agent == "writer" and v == "fail"
    )
    assert expected  # the v2 writer drops the hotel: some of its items fail
    page = _page(browser)
    page.goto(runs.page("travel-v2", "/samples"))
    assert page.locator("tr.sample").count() == 20
    page.select_option("select[name=status]", "fail")
    page.select_option("select[name=agent]", "writer")
    page.click("#apply")
    page.wait_for_url(re.compile(r"agent=writer"))
    rows = page.locator("tr.sample")
    assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.item)")) == expected
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.agent)")) == {"writer"}
    assert page.locator("#matching").inner_text().startswith(f"{len(expected)} of 20 items")
    first = rows.first.get_attribute("data-item")
    rows.first.locator("a.open").click()
    page.wait_for_url(re.compile(r"/item\?"))
    assert page.locator("#item-title").inner_text().endswith(f"writer · {first}")
    assert page.locator("details.transcript[open] .msg").count() >= 2  # the transcript, open
    reasons = page.locator("pre.reason").all_inner_texts()
    assert any("does not mention" in r for r in reasons), reasons
    page.close()


def test_sort_and_page_the_sample_table(runs: Runs, browser: Any) -> None:
    """Sorting by a column orders every row by it (descending on a second click), and pages
    split the rows without losing or repeating one."""
    index = read_table(runs.dirs["travel-v2"], "items", columns=["agent", "item_id"])
    everything = sorted(zip(index["agent"].to_pylist(), index["item_id"].to_pylist(), strict=True))
    page = _page(browser)
    page.goto(runs.page("travel-v2", "/samples?per=10"))
    seen: list[tuple[str, str]] = []
    for number in (1, 2):
        assert f"page {number} / 2" in page.locator(".pager").first.inner_text()
        cells = page.locator("tr.sample").evaluate_all(
            "rs => rs.map(r => [r.dataset.agent, r.dataset.item])"
        )
        seen += [tuple(c) for c in cells]
        if number == 1:
            page.locator("a.next").first.click()
            page.wait_for_url(re.compile(r"page=2"))
    assert sorted(seen) == everything
    page.goto(runs.page("travel-v2", "/samples"))
    page.locator("th a", has_text="agent").click()
    page.wait_for_url(re.compile(r"sort=agent"))
    agents = page.locator("tr.sample").evaluate_all("rs => rs.map(r => r.dataset.agent)")
    assert agents == sorted(agents)
    page.locator("th a", has_text="agent").click()
    page.wait_for_url(re.compile(r"desc=1"))
    agents = page.locator("tr.sample").evaluate_all("rs => rs.map(r => r.dataset.agent)")
    assert agents == sorted(agents, reverse=True)
    assert agents[0] != agents[-1]
    page.close()


def test_compare_shows_the_paired_statistics_and_both_transcripts_of_a_flip(
    runs: Runs, browser: Any
) -> None:
    """Compare (B: v2, A: the blessed v1, chosen by default) lists every metric's paired
    statistics and the flipped verdicts as compare_runs finds them; a flip opens both
    transcripts side by side."""
    comparison = compare_runs(runs.dirs["travel-v1"], runs.dirs["travel-v2"])
    assert comparison.regressions
    assert comparison.improvements
    page = _page(browser)
    page.goto(f"{runs.view_url}/compare?b={runs.key('travel-v2')}")
    assert page.locator("select[name=a]").input_value() == runs.key("travel-v1")
    assert page.locator("#metrics tbody tr").count() == len(comparison.metrics)
    verdict = page.locator("#verdict").inner_text()
    assert f"{comparison.regressions} regression(s)" in verdict
    assert f"{comparison.improvements} improvement(s)" in verdict
    flips = page.locator("#flip-table tbody tr")
    assert flips.count() == comparison.flips_total
    flip = comparison.flips[0]
    flips.first.locator("a.flip-link").click()
    page.wait_for_url(re.compile(r"/compare/item\?"))
    sides = page.locator("div.side")
    assert sides.count() == 2
    for side in ("#side-a", "#side-b"):
        assert page.locator(f"{side} details.transcript .msg").count() >= 2
        assert page.locator(f"{side} table.scores").count() == 1
    assert f"row {flip.row}" in page.locator("h1").inner_text()
    statuses = [
        page.locator(f"{side} table.scores tbody tr").evaluate_all(
            """(rows, [provider, metric]) => rows
                .map(r => [...r.cells].map(c => c.textContent.trim()))
                .filter(c => c[0] === provider && c[1] === metric)
                .map(c => c[2])""",
            [flip.provider, flip.metric],
        )
        for side in ("#side-a", "#side-b")
    ]
    expected = [["pass"], ["fail"]] if flip.kind == "regression" else [["fail"], ["pass"]]
    assert statuses == expected  # the flipped metric, in A and in B
    page.close()


def test_trends_draw_each_series_over_the_runs_with_the_baseline_marked(
    runs: Runs, browser: Any
) -> None:
    """A suite's trends draw per agent and metric its pass rate and mean score over its runs as
    inline SVG, a point per run, with a dashed line at the blessed run."""
    page = _page(browser)
    page.goto(f"{runs.view_url}/trends/travel-demo")
    figure = page.locator(
        'figure.trend[data-agent="writer"][data-metric="mentions_expected"]'
        '[data-measure="pass rate"]'
    )
    points = figure.locator("circle title").all_text_contents()
    rates = {}
    for run in ("travel-v1", "travel-v2"):
        summary = read_table(runs.dirs[run], "summary").to_pylist()
        [row] = [
            r for r in summary if r["agent"] == "writer" and r["metric"] == "mentions_expected"
        ]
        rates[run] = f"{runs.dirs[run].name}: {row['pass_rate']:.1%}"
    assert points == [rates["travel-v1"], rates["travel-v2"]]  # oldest first
    baseline = figure.locator("line.baseline")
    first = figure.locator("circle").first
    assert baseline.get_attribute("x1") == first.get_attribute("cx")
    assert page.locator("figure.trend svg polyline").count() >= 8
    page.goto(f"{runs.view_url}/trends/no-such-suite")
    assert "no finished run of suite 'no-such-suite'" in page.locator("#error-message").inner_text()
    page.close()


def _raw_get(url: str, path: str) -> tuple[int, str]:
    """GET ``path`` exactly as written (no client-side normalization of ``..`` or ``%2F``)."""
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def test_paths_outside_the_served_directory_are_refused(runs: Runs) -> None:
    """Traversal in every part of a URL (path segments, encoded slashes and dots, query values)
    finds nothing: 404 or 400, never a file of the machine or of a run."""
    run = runs.dirs["travel-v1"]
    suite, name = run.parent.name, run.name
    attempts = [
        "/runs/../../../../etc/passwd",
        "/runs/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
        "/runs/%2e%2e/%2e%2e/etc/passwd",
        f"/runs/{suite}/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
        f"/runs/{suite}/{name}/..%2Fmanifest.json",
        f"/runs/{suite}/{name}/manifest.json",
        f"/runs/{suite}/{name}/items.parquet",
        f"/runs/{suite}/{name}/item?agent=../../etc&id=passwd",
        "/trends/..%2F..%2F..%2Fetc",
        "/compare?a=../../../etc/passwd&b=..%2F..%2Fetc",
        f"/compare?a={suite}/../../../etc&b={suite}/{name}",
        "/static/../../etc/passwd",
        "//etc/passwd",
    ]
    for path in attempts:
        status, body = _raw_get(runs.view_url, path)
        assert status in (400, 404), (path, status)
        assert "root:x:0:0" not in body, path
        assert '"schema_version"' not in body, path  # no run file either
        assert "PAR1" not in body, path


def _hostile_pages(runs: Runs) -> list[str]:
    """Every kind of page, on the hostile runs: names, rows, queries and reasons are the corpus."""
    run = runs.dirs["hostile-2"]
    suite, name = run.parent.name, run.name
    items = read_table(run, "items", columns=["agent", "item_id"]).to_pylist()
    evil = next(i for i in items if i["agent"] == AGENTS[0])
    comparison = compare_runs(runs.dirs["hostile-1"], run)
    assert comparison.flips  # the second run flips two rows
    flip = comparison.flips[0]
    base = runs.view_url
    from evalpipe.view.urls import (
        compare_item_path,
        compare_path,
        item_path,
        samples_path,
        trends_path,
    )

    a, b = runs.key("hostile-1"), runs.key("hostile-2")
    return [
        f"{base}/",
        f"{base}/?suite=hostile",
        runs.page("hostile-2"),
        base + samples_path(suite, name),
        base + samples_path(suite, name, agent=AGENTS[1], q="<script>", sort="query"),
        base + samples_path(suite, name, status="fail", metric="m0", sort="response", desc=1),
        base + item_path(suite, name, evil["agent"], evil["item_id"]),
        base + compare_path(a=a, b=b),
        base
        + compare_item_path(
            a=a, b=b, agent=flip.agent, row=flip.row, rep=flip.repetition, metric=flip.metric
        ),
        base + trends_path(suite),
        base + samples_path(suite, name, agent="<img src=x onerror=alert(9)>"),
    ]


LIVE = """() => {
    const found = [];
    for (const a of document.querySelectorAll('a[href], area[href]')) {
        const h = a.getAttribute('href');
        // the run page's link to its Prefect flow run: the configured UI, a flow run's UUID
        if (a.id === 'prefect-link' && /^https?:\\/\\/[^\\/]+\\/runs\\/flow-run\\/[0-9a-f-]{36}$/.test(h))
            continue;
        // the view's own links only: a path on this origin (data may sit in their query string)
        if (!/^\\/(runs\\/|compare|trends\\/|\\?|$)/.test(h) || a.origin !== location.origin)
            found.push('link ' + h);
    }
    for (const e of document.querySelectorAll(
            'img, iframe, object, embed, video, audio, source, script, link, meta[http-equiv], base'))
        found.push(e.tagName + ' ' + e.outerHTML.slice(0, 80));
    for (const e of document.querySelectorAll('*'))
        for (const name of e.getAttributeNames())
            if (name.startsWith('on') || (name === 'style' && e.closest('svg') === null))
                found.push('attribute ' + name + ' on ' + e.tagName);
    if (document.getElementById('evalpipe-hostile')) found.push('element #evalpipe-hostile');
    return found;
}"""
"""What on a view page did not come from its templates: links off the view's own pages, any
image, frame, script or meta element, any event-handler or style attribute."""


def _visit_view(browser: Any, url: str) -> dict[str, Any]:
    """Open a view page; what in it is live (see LIVE), the dialogs that opened, its text."""
    page = _page(browser)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        page.goto(url)
        page.get_by_text("evalpipe view").first.wait_for()
        page.wait_for_timeout(300)  # a dialog fired from an onerror would have opened by now
        return {"live": page.evaluate(LIVE), "dialogs": dialogs, "text": page.inner_text("body")}
    finally:
        page.close()


def test_the_live_check_finds_what_data_could_make_live(runs: Runs, browser: Any) -> None:
    """The check above can fail: a link off the view, an image, an event handler and a script in
    a page are each found; the view's own links are not."""
    page = _page(browser)
    page.goto(runs.view_url + "/")
    page.set_content(
        '<a href="/runs/s/r/item?id=evil.example">own</a><a href="https://evil.example/x">off</a>'
        '<a href="javascript:alert(1)">js</a><img src="data:,"><b onclick="1">b</b>'
        '<a id="prefect-link" href="https://evil.example/runs/flow-run/x/../../login">ui</a>'
        "<script>1</script>"
    )
    found = page.evaluate(LIVE)
    page.close()
    assert found == [
        "link https://evil.example/x",
        "link javascript:alert(1)",
        "link https://evil.example/runs/flow-run/x/../../login",
        'IMG <img src="data:,">',
        "SCRIPT <script>1</script>",
        "attribute onclick on B",
    ]


def test_hostile_text_renders_no_live_element_and_no_dialog(runs: Runs, browser: Any) -> None:
    """The hostile corpus (agent names, row ids, queries, reasons) shows as text on every kind of
    page: no link off the view, no image, script or handler from data, no dialog."""
    texts = []
    for url in _hostile_pages(runs):
        seen = _visit_view(browser, url)
        assert seen["live"] == [], url
        assert seen["dialogs"] == [], url
        texts.append(seen["text"])
    assert any(AGENTS[0] in t for t in texts)
    assert any(AGENTS[1] in t for t in texts)
    assert any("<script>alert(2)</script><b id=evalpipe-hostile>bold</b>" in t for t in texts)


def test_every_page_has_a_content_security_policy_that_its_styles_satisfy(
    runs: Runs, browser: Any
) -> None:
    """Every page is sent with a CSP that allows no script at all and only its own two style
    sheets (by hash); Chromium reports no violation and applies both sheets."""
    pages = _hostile_pages(runs)
    for url in pages:
        response = httpx.get(url, timeout=30)
        policy = response.headers["content-security-policy"]
        assert "default-src 'none'" in policy
        assert "unsafe-inline" not in policy
        assert "script-src" not in policy  # default-src 'none' covers scripts
        assert len(re.findall(r"'sha256-[A-Za-z0-9+/=]+'", policy)) == 2
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
    page = _page(browser)
    messages: list[str] = []
    page.on("console", lambda m: messages.append(m.text))
    for url in pages[:4]:
        page.goto(url)
        style = page.evaluate(
            "() => [getComputedStyle(document.querySelector('nav.view')).display,"
            " getComputedStyle(document.body).fontFamily]"
        )
        assert style[0] == "flex"  # the view's sheet applied
        assert "system-ui" in style[1]  # the report's sheet applied
    page.close()
    assert [m for m in messages if "Content Security Policy" in m] == []


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_no_write_endpoint_answers(runs: Runs) -> None:
    """POST, PUT, PATCH and DELETE are refused (405, Allow: GET, HEAD) on every path, and the
    served directory is the same afterwards."""
    before = _snapshot(runs.output)
    run = runs.dirs["travel-v1"]
    paths = [
        "/",
        runs.page("travel-v1").removeprefix(runs.view_url),
        f"/runs/{run.parent.name}/{run.name}/samples",
        "/compare",
        "/no/such/path",
    ]
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        for path in paths:
            response = httpx.request(method, runs.view_url + path, content=b"x=1", timeout=30)
            assert response.status_code == 405, (method, path)
            assert response.headers["allow"] == "GET, HEAD"
    assert httpx.head(runs.view_url + "/", timeout=30).status_code == 200
    assert _snapshot(runs.output) == before


def test_loopback_by_default_another_host_warns_and_a_foreign_host_header_is_refused(
    runs: Runs, tmp_path: Path
) -> None:
    """The view listens on 127.0.0.1 unless told; --host elsewhere prints a warning; a request
    whose Host is not the view's (DNS rebinding) is refused."""
    log = (runs.server.home / "view.log").read_text()
    assert re.search(r"at http://127\.0\.0\.1:\d+/ \(read-only", log), log
    assert "warning" not in log
    port = urlsplit(runs.view_url).port
    assert httpx.get(f"http://localhost:{port}/", timeout=30).status_code == 200
    refused = httpx.get(runs.view_url + "/", headers={"Host": "evil.example"}, timeout=30)
    assert refused.status_code == 400
    # 192.0.2.1 (TEST-NET-1) is not this machine's: the warning is printed, then binding fails
    elsewhere = subprocess.run(
        [str(BIN / "evalpipe"), "view", str(runs.output), "--host", "192.0.2.1", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert elsewhere.returncode == 2, elsewhere.stdout + elsewhere.stderr
    err = " ".join(elsewhere.stderr.split())
    assert "warning: serving on 192.0.2.1, not on loopback" in err
    assert "cannot listen on 192.0.2.1" in err
    missing = subprocess.run(
        [str(BIN / "evalpipe"), "view", str(tmp_path / "nope"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert missing.returncode == 2
    assert "no such directory" in missing.stderr


def test_the_prefect_ui_report_artifact_opens_the_runs_page(runs: Runs, browser: Any) -> None:
    """With EVALPIPE_VIEW_URL set, the flow's report and run-directory artifacts link to the run's
    page in the view (not file://), and the link in the Prefect UI opens that page."""
    from evalpipe.artifacts import read_manifest

    run = runs.dirs["travel-v2"]
    expected = runs.page("travel-v2")
    flow_run_id = read_manifest(run)["flow_run_id"]
    artifacts = httpx.post(
        f"{runs.server.api}/artifacts/filter",
        json={"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}},
        timeout=30,
    ).json()
    wanted = ("travel-demo-report", "travel-demo-run-dir")
    links = {
        a["key"]: a for a in artifacts if a["key"] in wanted
    }  # Prefect stores them as markdown
    assert set(links) == {"travel-demo-report", "travel-demo-run-dir"}
    for artifact in links.values():
        assert f"({expected})" in artifact["data"], artifact["data"]
        assert "file://" not in artifact["data"]
    page = _page(browser)
    for attempt in range(3):  # the UI's first request can meet a busy SQLite server
        page.goto(f"{runs.server.url}/artifacts/artifact/{links['travel-demo-report']['id']}")
        link = page.locator(f'a[href="{expected}"]')
        try:
            link.first.wait_for(timeout=40_000)
            break
        except Exception:
            if attempt == 2:
                raise
    if link.first.get_attribute("target") == "_blank":
        with page.context.expect_page() as opened:
            link.first.click()
        target = opened.value
    else:
        link.first.click()
        target = page
    target.wait_for_url(expected)
    target.wait_for_load_state()
    assert target.title() == f"evalpipe view: travel-demo · {run.name}"
    page.context.close()


def test_the_view_reads_runs_published_to_a_filesystem_uri(runs: Runs) -> None:
    """Served from a filesystem URI (fsspec memory://, as the flow publishes to object stores),
    every page reads the runs the same way as from a local directory."""
    from starlette.testclient import TestClient

    from evalpipe.artifacts.storage import publish
    from evalpipe.view.app import create_app

    out = "memory://view-bucket/evals"
    for name in ("travel-v1", "travel-v2"):
        publish(runs.dirs[name], out, "travel-demo")
    run = runs.dirs["travel-v2"].name
    items = read_table(runs.dirs["travel-v2"], "items", columns=["agent", "item_id"]).to_pylist()
    with TestClient(create_app(out)) as client:
        listed = client.get("/")
        assert listed.status_code == 200
        assert listed.text.count('class="run"') == 2
        for path in (
            f"/runs/travel-demo/{run}",
            f"/runs/travel-demo/{run}/samples?status=fail&agent=writer",
            f"/runs/travel-demo/{run}/samples?q=a&sort=response",
            f"/runs/travel-demo/{run}/item",
            f"/compare?b=travel-demo/{run}",
            "/trends/travel-demo",
        ):
            params = (
                {"agent": items[0]["agent"], "id": items[0]["item_id"]}
                if path.endswith("/item")
                else None
            )
            response = client.get(path, params=params)
            assert response.status_code == 200, (path, response.text[-500:])
            assert "memory://view-bucket/evals" in response.text


def test_the_sample_index_holds_each_items_verdict_status_and_score(runs: Runs) -> None:
    """The sample index of a real run has one row per item, its verdict is the item's worst
    status, and each metric column holds scores.parquet's status and score of that item."""
    from evalpipe.view.queries import SampleIndex

    run = runs.dirs["travel-v2"]
    index = SampleIndex(str(run))
    table = index.table.to_pylist()
    assert len(table) == read_table(run, "items", columns=["agent"]).num_rows
    ranks = ("pass", "fail", "error", "errored")
    assert {(r["agent"], r["item_id"]): ranks[r["_rank"]] for r in table} == _verdicts(run)
    scores = read_table(
        run, "scores", columns=["provider", "metric", "agent", "item_id", "status", "score"]
    ).to_pylist()
    expected = {
        (s["provider"], s["metric"], s["agent"], s["item_id"]): (s["status"], s["score"])
        for s in scores
        if s["metric"] is not None
    }
    found = {
        (c.provider, c.metric, r["agent"], r["item_id"]): (r[f"{c.key}_status"], r[c.key])
        for c in index.metrics
        for r in table
        if r[f"{c.key}_status"] is not None
    }
    assert found == expected
    assert len(index.metrics) == len({(k[0], k[1]) for k in expected})


def test_the_operations_md_commands_run_as_written(runs: Runs) -> None:
    """docs/operations.md §12's commands, as written (on a free port, not 8765) in the directory
    holding `runs`: the view serves every run, and with the export the flow's link is its page."""
    from live_prefect import ROOT, free_port

    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text[text.index("## 12. ") :]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None
    commands = [re.sub(r"\s+#.*$", "", line).strip() for line in block.group(1).splitlines()]
    assert [c.split()[:2] for c in commands] == [["evalpipe", "view"], ["export", "EVALPIPE_VIEW_URL=http://127.0.0.1:8765"]]  # fmt: skip
    port = str(free_port())
    run = runs.dirs["travel-v2"]
    check = (
        "import httpx, os\n"
        "from evalpipe.pipeline.prefect_artifacts import view_page\n"
        f"link = view_page('travel-demo', '{run.name}')\n"
        "print('LINK=' + str(link))\n"
        "print(httpx.get(link, timeout=30).text)\n"
    )
    script = "\n".join(
        [
            *(c.replace("8765", port) for c in commands),
            "for i in $(seq 60); do",
            f"  {sys.executable} -c 'import httpx, os; httpx.get(os.environ[\"EVALPIPE_VIEW_URL\"]).raise_for_status()' 2>/dev/null && break",
            "  sleep 1",
            "done",
            f'{sys.executable} -c "$CHECK"',
            "status=$?",
            "kill $! && wait $!",
            "exit $status",
        ]
    )
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=runs.output.parent,
        env={**runs.server.env, "CHECK": check, "PATH": f"{BIN}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert f"LINK=http://127.0.0.1:{port}/runs/travel-demo/{run.name}" in lines
    assert f"<title>evalpipe view: travel-demo · {run.name}</title>" in done.stdout
    assert f"evalpipe view: 5 run(s) in runs at http://127.0.0.1:{port}/" in done.stdout


def test_bad_parameters_answer_400_and_what_is_not_there_404(runs: Runs) -> None:
    """A parameter the sample table cannot take is a 400 saying which and why; a page past the
    last, an item or run that is not there, a 404 page; neither is a server error."""
    samples = runs.page("travel-v1", "/samples")
    for query, status, says in [
        ("?page=abc", 400, "page='abc': expected a whole number"),
        ("?per=100000", 400, "per='100000': expected a whole number from 10 to 200"),
        ("?status=bogus", 400, "status='bogus': expected one of pass, fail, error, errored"),
        ("?sort=bogus", 400, "sort='bogus': not a column of the sample table"),
        ("?page=99", 404, "page 99 of 1"),
    ]:
        response = httpx.get(samples + query, timeout=30)
        assert response.status_code == status, query
        assert says in html.unescape(response.text), (query, response.text[-800:])
    missing = httpx.get(runs.page("travel-v1", "/item?agent=writer&id=nope"), timeout=30)
    assert missing.status_code == 404
    assert "no item 'nope' of agent 'writer'" in html.unescape(missing.text)
    assert httpx.get(f"{runs.view_url}/runs/travel-demo/nope", timeout=30).status_code == 404
    assert httpx.get(f"{runs.view_url}/compare/item?b=x/y", timeout=30).status_code == 404


_OVERFLOWS = """() => {
    const width = document.documentElement.clientWidth;
    const out = [];
    if (document.documentElement.scrollWidth > width) {
        out.push(`the page: ${document.documentElement.scrollWidth} > ${width}`);
    }
    for (const table of document.querySelectorAll("table")) {
        const right = table.getBoundingClientRect().right;
        if (right > width + 0.5) out.push(`table ${table.id || table.className} ends at ${right}`);
    }
    for (const cell of document.querySelectorAll("td, th, pre.reason, td.why .reason")) {
        if (cell.scrollWidth > cell.clientWidth + 1) {
            out.push(`${cell.tagName} ${cell.className}: ${cell.scrollWidth} > ${cell.clientWidth}`);
        }
    }
    for (const box of document.querySelectorAll("body *")) {
        const style = getComputedStyle(box);
        if (style.overflowX !== "visible" && box.scrollWidth > box.clientWidth + 1) {
            out.push(`${box.tagName} ${box.className} scrolls: ${box.scrollWidth} > ${box.clientWidth}`);
        }
    }
    for (const pre of document.querySelectorAll("pre.reason")) {
        if (pre.scrollHeight > pre.clientHeight + 1) {
            out.push(`pre.reason scrolls: ${pre.scrollHeight} > ${pre.clientHeight}`);
        }
    }
    return out;
}"""
"""What a page hides at its width: the page or a table wider than the window, a cell wider than
its box, anything scrolled sideways inside its box (a table made a scroll box, a pre), a reason
scrolled inside its box vertically."""


def _no_overflow(page: Any, url: str) -> Any:
    page.goto(url)
    assert page.evaluate(_OVERFLOWS) == [], url
    return page


def test_reasons_wrap_and_tables_fit_1400_px_on_the_flip_sample_and_compare_pages(
    runs: Runs, browser: Any
) -> None:
    """At 1400 px no page is wider than the window and no reason is clipped (issue 31): the
    comparisons and their side-by-side flip pages (at 1920 px too), the runs list, trends, run
    pages, the sample tables (every column; filtered to failures) and the item page of the hostile
    run's 6,000-character unbroken reason."""
    page = _page(browser)
    flips = []
    for a, b in (("travel-v1", "travel-v2"), ("hostile-1", "hostile-2")):
        compare = _no_overflow(page, f"{runs.view_url}/compare?a={runs.key(a)}&b={runs.key(b)}")
        assert compare.locator("#flip-table tbody tr").count() >= 1
        flips += compare.locator("a.flip-link").evaluate_all("links => links.map(a => a.href)")
    for url in flips:
        side = _no_overflow(page, url)
        assert side.locator("div.side pre.reason").count() >= 2, url
    _no_overflow(page, runs.view_url + "/")
    _no_overflow(page, runs.view_url + "/trends/travel-demo")
    _no_overflow(page, runs.page("travel-v2", "/samples?per=200"))  # every column, every item
    for name in ("travel-v2", "hostile-1", "hostile-2"):
        _no_overflow(page, runs.page(name))
        samples = _no_overflow(page, runs.page(name, "/samples?status=fail&per=200"))
        assert samples.locator("td.why .reason").count() >= 1, name
    long_reason = "reason: long " + "y" * 6000
    links = page.locator("tr.sample").evaluate_all(
        """(rows, text) => rows
            .filter(r => [...r.querySelectorAll("td.why .reason")].some(x => x.title === text))
            .map(r => r.querySelector("a.open").getAttribute("href"))""",
        long_reason,
    )
    assert links  # the long row (of each agent, and overall): its whole reason on hover
    item = _no_overflow(page, runs.view_url + links[0])
    texts = item.locator("pre.reason").all_inner_texts()  # wrapped (cut at the report's limit)
    assert any(t.startswith(long_reason[:2000]) for t in texts), [t[:80] for t in texts]
    page.set_viewport_size(
        {"width": 1920, "height": 1000}
    )  # the issue saw the flip clipped here too
    for url in flips:
        _no_overflow(page, url)
    page.close()


def _reasons(run_dir: Path) -> dict[tuple[str, str], list[tuple[str, str, str]]]:
    """(agent, item_id) -> (metric, status, reason) of each metric that failed or errored."""
    scores = read_table(
        run_dir, "scores", columns=["agent", "item_id", "metric", "status", "reason"]
    ).to_pylist()
    out: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for s in scores:
        if s["status"] in ("fail", "error"):
            out.setdefault((s["agent"], s["item_id"]), []).append(
                (s["metric"], s["status"], s["reason"] or "")
            )
    return out


def test_the_sample_table_says_why_an_item_failed(runs: Runs, browser: Any) -> None:
    """Filtered to failures, each row's "why" names every failed metric with its reason (as
    scores.parquet has it); filtered on one metric, only that metric's reason."""
    run = runs.dirs["travel-v2"]
    expected = _reasons(run)
    page = _page(browser)
    page.goto(runs.page("travel-v2", "/samples?status=fail&per=200"))
    rows = page.locator("tr.sample")
    assert rows.count() == len(expected) >= 1
    for i in range(rows.count()):
        row = rows.nth(i)
        key = (str(row.get_attribute("data-agent")), str(row.get_attribute("data-item")))
        why = row.locator("td.why .reason").all_inner_texts()
        assert len(why) == len(expected[key]), (key, why)
        for text, (metric, status, reason) in zip(why, expected[key], strict=True):
            assert text.startswith(f"{metric} {status}: "), text
            assert reason[:200] in text
    metric = next(m for (_, _), found in expected.items() for m, _, _ in found)
    key = page.locator("select[name=metric] option", has_text=metric).first.get_attribute("value")
    page.goto(runs.page("travel-v2", f"/samples?metric={key}&status=fail&per=200"))
    shown = page.locator("td.why .reason").all_inner_texts()
    assert shown
    assert all(t.startswith(f"{metric} fail: ") for t in shown)
    assert len(shown) == sum(m == metric for found in expected.values() for m, _, _ in found)
    page.close()


def test_a_run_page_links_to_its_prefect_flow_run(runs: Runs, browser: Any) -> None:
    """With the Prefect API URL known, a run's page links to <ui>/runs/flow-run/<id> of the flow
    run its manifest records; the Prefect UI answers there and the API knows that flow run."""
    from evalpipe.artifacts import read_manifest

    flow_run_id = read_manifest(runs.dirs["travel-v2"])["flow_run_id"]
    assert flow_run_id
    page = _page(browser)
    page.goto(runs.page("travel-v2"))
    href = page.locator("#prefect-link").get_attribute("href")
    assert href == f"{runs.server.url}/runs/flow-run/{flow_run_id}"
    api = httpx.get(f"{runs.server.api}/flow_runs/{flow_run_id}", timeout=30)
    assert api.status_code == 200
    assert api.json()["id"] == flow_run_id
    page.locator("#prefect-link").click()
    page.wait_for_url(href)
    for attempt in range(3):  # the UI's first request can meet a busy SQLite server
        try:
            page.get_by_text(api.json()["name"]).first.wait_for(timeout=40_000)
            break
        except Exception:
            if attempt == 2:
                raise
            page.reload()
    page.close()


def test_trends_are_per_evaluator_set_with_dated_x_axis_labels(
    runs: Runs, browser: Any, tmp_path: Path
) -> None:
    """Runs of one suite scored by another evaluator set get their own charts (not one line
    through both), and each chart's x axis is labelled with its runs' start dates."""
    import json
    import shutil
    from datetime import datetime

    suite_dir = tmp_path / "runs" / "travel-demo"
    for name in ("travel-v1", "travel-v2"):
        shutil.copytree(runs.dirs[name], suite_dir / runs.dirs[name].name)
    other = suite_dir / "other-evaluators"
    shutil.copytree(runs.dirs["travel-v2"], other)
    manifest = json.loads((other / "manifest.json").read_text(encoding="utf-8"))
    manifest["evaluator_specs"] = [*manifest["evaluator_specs"], "tool_calls_present"]
    manifest["started_at"] = "2031-05-06T07:08:09+00:00"
    (other / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with served(tmp_path / "runs", dict(os.environ), tmp_path / "view.log") as url:
        page = _page(browser)
        page.goto(f"{url}/trends/travel-demo")
        sets = page.locator("section.evaluator-set")
        assert sets.evaluate_all("s => s.map(x => x.dataset.runs)") == ["1", "2"]  # newest first
        newest, older = sets.nth(0), sets.nth(1)
        chart = 'figure.trend[data-agent="writer"][data-metric="mentions_expected"]'
        assert newest.locator(f"{chart} circle").count() == 2  # pass rate and mean score: 1 run
        assert newest.locator("text.x-tick").first.text_content() == "05-06 07:08"
        dates = [
            datetime.fromisoformat(
                json.loads((runs.dirs[n] / "manifest.json").read_text())["started_at"]
            ).strftime("%m-%d %H:%M")
            for n in ("travel-v1", "travel-v2")
        ]
        figure = older.locator(f'{chart}[data-measure="pass rate"]')
        assert figure.locator("circle").count() == 2
        assert figure.locator("text.x-tick").all_text_contents() == dates
        page.close()
