"""Untrusted input end to end, against a real `prefect server` (SQLite in a temporary PREFECT_HOME):
a distinct secret in every place a user can put one is found nowhere the run wrote (files, Parquet
column by column, cache, journal, stdout/stderr, every text column of every table of the Prefect
database), and hostile agent names, row ids, queries and reasons stay text in the terminal, the
Parquet files, report.html and the Prefect UI's artifact pages (headless Chromium)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from fakes.openai_server import CapturedRequest, FakeOpenAIServer, Reply, chat, verdict
from live_prefect import ROOT, Server, prefect_server

BIN = Path(sys.executable).parent

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`prefect server start` (with its UI) for this module."""
    with prefect_server(
        tmp_path_factory.mktemp("prefect-home"), tmp_path_factory.mktemp("runs")
    ) as running:
        yield running


def _evalpipe(
    server: Server, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "evalpipe"), *args],
        cwd=cwd,
        env={**server.env, "COLUMNS": "100", **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _texts(value: Any) -> Iterator[str]:
    """Every string inside a decoded value (Parquet cell, JSON)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode("utf-8", errors="replace")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _texts(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _texts(v)
    elif value is not None:
        yield str(value)


def _written(paths: list[Path]) -> Iterator[tuple[str, str]]:
    """(where, text) for every file under ``paths``: Parquet decoded column by column, every other
    file as bytes decoded."""
    for root in paths:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            if path.suffix == ".parquet":
                table = pq.read_table(path)
                for name in table.column_names:
                    for value in table.column(name).to_pylist():
                        for text in _texts(value):
                            yield f"{path}:{name}", text
            yield str(path), path.read_bytes().decode("utf-8", errors="replace")


def _database(path: Path) -> Iterator[tuple[str, str]]:
    """(table.column, text) for every text or blob cell of every table of a SQLite database."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for column, value in zip(columns, row, strict=True):
                    if isinstance(value, str | bytes):
                        yield f"{table}.{column}", next(_texts(value))


def _echo_target(request: CapturedRequest) -> Reply:
    """The target endpoint: a 401 that quotes every credential it got (as real ones quote the key),
    an answer that leaks the key, or a plain answer."""
    text = request.text
    got = " ".join(
        request.headers.get(h, "")
        for h in ("authorization", "x-api-key", "ocp-apim-subscription-key")
    )
    if "echo" in text:
        return Reply(
            status=401,
            body={"error": {"message": f"Incorrect API key provided: {got}", "type": "auth"}},
        )
    if "leak" in text:
        return chat(f"Sure, my credentials are {got}.")
    return chat("It is sunny in Paris.")


def _echo_judge(request: CapturedRequest) -> Reply:
    """The judge endpoint: a 401 quoting its credentials for one item, verdicts for the others."""
    if "sunny in Paris" in request.text:
        got = " ".join(
            request.headers.get(h, "") for h in ("authorization", "x-api-key", "x-judge-token")
        )
        return Reply(status=401, body={"error": {"message": f"bad credentials {got}"}})
    return verdict(4, reason="relevant enough")


def test_no_secret_reaches_anything_the_run_wrote(server: Server, tmp_path: Path) -> None:
    """Secrets inline in the target, the judge, every header, --param and a deployment's
    parameters, and echoed back by endpoints, are found nowhere: 0 hits."""
    secrets = {
        name: f"sk-hunt-{name}-{uuid.uuid4().hex[:12]}"
        for name in (
            "target-key",
            "target-header",
            "param-header",
            "judge-key",
            "judge-header",
            "judge-token",
            "deploy-param",
        )
    }
    (tmp_path / "queries.jsonl").write_text(
        "".join(
            json.dumps({"id": row, "query": query}) + "\n"
            for row, query in (
                ("ok", "Weather in Paris?"),
                ("echo", "please echo my key"),
                ("leak", "please leak my key"),
            )
        ),
        encoding="utf-8",
    )
    with (
        FakeOpenAIServer(responder=_echo_target) as target,
        FakeOpenAIServer(responder=_echo_judge) as judge,
    ):
        suite = {
            "name": "secret-hunt",
            "dataset": "queries.jsonl",
            "target": {
                "openai": {
                    "base_url": target.base_url,
                    "model": "m",
                    "api_key": secrets["target-key"],
                    "headers": {"X-Api-Key": secrets["target-header"]},
                    "max_retries": 0,
                }
            },
            "evaluators": [
                {
                    "judge": {
                        "base_url": judge.base_url,
                        "model": "j",
                        "api_key": secrets["judge-key"],
                        "headers": {
                            "X-Api-Key": secrets["judge-header"],
                            "X-Judge-Token": secrets["judge-token"],
                        },
                        "metrics": ["relevance"],
                        "max_retries": 0,
                        "cache": {"directory": str(tmp_path / "cache"), "mode": "record"},
                    }
                }
            ],
            "gates": ["pass_rate(relevance) >= 0.5"],
            "output_dir": str(tmp_path / "runs"),
        }
        (tmp_path / "suite.yaml").write_text(json.dumps(suite), encoding="utf-8")
        run = _evalpipe(
            server,
            tmp_path,
            "run",
            "suite.yaml",
            "--no-progress",
            "--param",
            f"target.openai.headers.Ocp-Apim-Subscription-Key={secrets['param-header']}",
        )
    # the secrets did reach the endpoints (the hunt below can find something) ...
    sent = [r.headers for r in target.requests]
    assert {"authorization": f"Bearer {secrets['target-key']}"}.items() <= sent[0].items()
    assert all(h["x-api-key"] == secrets["target-header"] for h in sent)
    assert all(h["ocp-apim-subscription-key"] == secrets["param-header"] for h in sent)
    assert any(r.headers.get("x-judge-token") == secrets["judge-token"] for r in judge.requests)
    # ... and came back in errors and in an answer, which were stored masked
    assert run.returncode == 1, run.stdout + run.stderr  # errored items fail the gate
    (run_dir,) = [p.parent for p in (tmp_path / "runs").rglob("manifest.json")]
    items = pq.read_table(run_dir / "items.parquet").to_pylist()
    scores = pq.read_table(run_dir / "scores.parquet").to_pylist()
    assert any(
        "Incorrect API key provided: Bearer *** *** ***" in str(i["error_message"]) for i in items
    )
    assert any("my credentials are Bearer *** *** ***" in str(i["response"]) for i in items)
    assert any(
        "bad credentials Bearer *** *** ***" in f"{s['error_message']} {s['item_error_message']}"
        for s in scores
    )

    # a deployment whose parameters hold a secret is refused before anything is registered
    (tmp_path / "prefect.yaml").write_text(
        textwrap.dedent(
            f"""\
            name: hunt
            deployments:
              - name: hunt
                entrypoint: {ROOT}/flows/eval_suite.py:eval_flow
                parameters:
                  suite: {tmp_path / "suite.yaml"}
                  params: {{"target.openai.api_key": "{secrets["deploy-param"]}"}}
                work_pool: {{name: hunt-pool}}
            """
        ),
        encoding="utf-8",
    )
    deploy = _evalpipe(server, tmp_path, "deploy", "--prefect-file", "prefect.yaml")
    assert deploy.returncode == 2, deploy.stdout + deploy.stderr
    assert "parameters.params.target.openai.api_key" in deploy.stderr
    assert "api_key_env" in deploy.stderr
    deployments = httpx.post(f"{server.api}/deployments/filter", json={}, timeout=30).json()
    assert [d["name"] for d in deployments] == []

    hits = [
        f"{name} in {where}"
        for where, text in [
            *_written([run_dir, tmp_path / "cache"]),
            ("stdout", run.stdout),
            ("stderr", run.stderr),
            ("deploy stdout", deploy.stdout),
            ("deploy stderr", deploy.stderr),
            *_database(server.database),
        ]
        for name, secret in secrets.items()
        if secret in text
    ]
    assert hits == []
    # the hunt read what it had to: the run's parameters and logs are in the database
    columns = {where for where, _ in _database(server.database)}
    assert {"flow_run.parameters", "log.message"} <= columns


# --- hostile text ---------------------------------------------------------------------------

EVIL = "evil.example"
AGENTS = ["[x](javascript:alert(7))", "<img src=x onerror=alert(1)>"]
# the terminal's hostile texts first: the failures list shows the first 5 items of each result
HOSTILE = [
    "[bold red]rich[/] [link=https://evil.example/r]rich link[/link]",
    "\x1b[31mred\x1b[0m \x1b]8;;https://evil.example/osc\x07osc link\x1b]8;;\x07 \x1b[2J",
    "bidi \u202egnp.exe\u202c and zero\u200bwidth",
    "x` [click](javascript:alert(4)) `y",
    '<a href="https://evil.example/login">Sign in again</a>',
    "![pixel](https://evil.example/pixel.png)",
    "<script>alert(2)</script><b id=evalpipe-hostile>bold</b>",
    "cell | pipe | break",
    'it\'s "quoted" & <ok>',
    "<https://evil.example/autolink> javascript:alert(5)",
    "long " + "y" * 6000,
]

HOSTILE_MODULE = '''
"""A two-agent workflow whose agent names, answers and check reasons are hostile text."""
import json
import os

from evalpipe import CheckResult, EvalItem
from evalpipe.targets.demo import ScriptedAgent, last_assistant_text
from evalpipe.targets.workflow import SequentialWorkflow

AGENTS = json.loads({agents!r})


def _echo(text, _results):
    return text


workflow = SequentialWorkflow(
    [
        ScriptedAgent(AGENTS[0], instructions="echo", tools=[], plan=lambda t: [], compose=_echo),
        ScriptedAgent(
            AGENTS[1], instructions="echo", tools=[], plan=lambda t: [], compose=_echo,
            read=last_assistant_text,
        ),
    ],
    name="hostile",
)


def echo_check(item: EvalItem) -> CheckResult:
    """Fails with the answer as its reason (in the second run it passes the first rows)."""
    flip = os.environ.get("HOSTILE_FLIP") == "1" and item.query.startswith(("x`", "<a"))
    return CheckResult(flip, "reason: " + item.response, "echo_check")
'''


def _visit(browser: Any, url: str, wait_text: str) -> dict[str, Any]:
    """Open ``url``; what in the page came from data: live links, images and elements, dialogs."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        for attempt in range(3):  # a UI request can meet a 503 from a busy SQLite server
            page.goto(url)
            try:
                page.get_by_text(wait_text).first.wait_for(timeout=40_000)
                break
            except Exception as exc:
                if attempt == 2:
                    shown = page.inner_text("body")[-2000:]
                    raise AssertionError(f"{url}: {wait_text!r} not shown: {shown}") from exc
        page.wait_for_timeout(500)
        live = page.evaluate(
            """(evil) => {
                const found = [];
                for (const a of document.querySelectorAll('a[href], area[href]')) {
                    const h = a.getAttribute('href') || '';
                    if (h.includes(evil) || /^\\s*javascript:/i.test(h)) found.push('link ' + h);
                }
                for (const e of document.querySelectorAll('img, iframe, object, embed, video, audio, source')) {
                    const s = e.getAttribute('src') || e.getAttribute('data') || '';
                    if (s.includes(evil) || s === 'x') found.push(e.tagName + ' ' + s);
                }
                for (const e of document.querySelectorAll('#evalpipe-hostile, [onerror], [onload], [onclick]'))
                    found.push('element ' + e.outerHTML.slice(0, 80));
                for (const s of document.querySelectorAll('script'))
                    if ((s.textContent || '').includes('alert(')) found.push('script ' + s.textContent);
                return found;
            }""",
            EVIL,
        )
        return {"live": live, "dialogs": dialogs, "text": page.inner_text("body")}
    finally:
        page.close()


def hostile_project(work: Path, output: Path, name: str, **fields: Any) -> Path:
    """Write the hostile workflow module, its dataset (every HOSTILE text as id and query) and a
    suite ``name`` in ``work`` whose gate the echo check fails; returns the suite file."""
    (work / "hostile_target.py").write_text(
        HOSTILE_MODULE.format(agents=json.dumps(AGENTS)), encoding="utf-8"
    )
    (work / "queries.jsonl").write_text(
        "".join(json.dumps({"id": text[:200], "query": text}) + "\n" for text in HOSTILE),
        encoding="utf-8",
    )
    suite = {
        "name": "hostile",
        "dataset": "queries.jsonl",
        "target": "hostile_target:workflow",
        "evaluators": ["hostile_target:echo_check"],
        "gates": ["pass_rate(echo_check) >= 0.9"],
        "output_dir": str(output),
        **fields,
    }
    (work / name).write_text(json.dumps(suite), encoding="utf-8")
    return work / name


def test_hostile_text_stays_text_in_every_sink(
    server: Server, tmp_path: Path, browser: Any
) -> None:
    """Hostile agent names, row ids, queries and reasons: exact in Parquet, text in the terminal,
    report.html and every Prefect artifact page (no link, image, element or dialog from data)."""
    hostile_project(tmp_path, tmp_path / "runs", "suite.yaml")
    first = _evalpipe(server, tmp_path, "run", "suite.yaml", "--no-progress")
    assert first.returncode == 1, first.stdout + first.stderr  # the gate fails, nothing crashed
    (base_dir,) = [p.parent for p in (tmp_path / "runs").rglob("manifest.json")]
    second = _evalpipe(
        server,
        tmp_path,
        "run",
        "suite.yaml",
        "--new-run",
        "--param",
        f"compare_with={base_dir}",
        env={"HOSTILE_FLIP": "1", "FORCE_COLOR": "1", "TERM": "xterm-256color"},
    )
    assert second.returncode == 1, second.stdout + second.stderr

    # the terminal: data's escape sequences and rich markup are shown, never sent or styled
    for out in (first.stdout + first.stderr, second.stdout + second.stderr):
        assert "\x1b]8;;https://evil" not in out
        assert "\x1b[2J" not in out
        assert "\x1b[31mred" not in out
        assert "\u202e" not in out
    assert "\x1b" not in first.stdout + first.stderr  # not a terminal: no escape at all
    assert "\\u001b[31mred" in first.stdout
    assert "[bold red]rich[/]" in first.stdout

    # Parquet holds the data exactly as it came
    items = pq.read_table(base_dir / "items.parquet").to_pylist()
    assert {i["agent"] for i in items} >= set(AGENTS)
    assert {i["row_id"] for i in items} == {t[:200] for t in HOSTILE}

    # report.html
    report = _visit(browser, (base_dir / "report.html").as_uri(), "echo_check")
    assert report["live"] == []
    assert report["dialogs"] == []
    assert AGENTS[0] in report["text"]

    # every artifact of both flow runs, in the Prefect UI
    runs = httpx.post(
        f"{server.api}/flow_runs/filter",
        json={"flow_runs": {"tags": {"all_": []}}, "sort": "START_TIME_DESC"},
        timeout=30,
    ).json()
    hostile_runs = [r for r in runs if r["name"].startswith("hostile-")]  # not the hunt's run
    assert len(hostile_runs) == 2, [r["name"] for r in runs]
    artifacts = httpx.post(
        f"{server.api}/artifacts/filter",
        json={"artifacts": {"flow_run_id": {"any_": [r["id"] for r in hostile_runs]}}},
        timeout=30,
    ).json()
    kinds = {(a["key"] or "").rsplit("-", 1)[-1] for a in artifacts}
    assert {"summary", "failures", "comparison"} <= kinds, kinds
    pages = []
    shows = {"summary": "echo_check", "failures": "Items that did not pass", "comparison": "Flips"}
    for artifact in artifacts:
        if artifact["type"] not in ("markdown", "table"):
            continue
        key = artifact["key"] or ""
        url = f"{server.url}/artifacts/artifact/{artifact['id']}"
        pages.append((key, _visit(browser, url, shows.get(key.rsplit("-", 1)[-1], key))))
    for run in hostile_runs[:1]:
        pages.append(
            ("flow run", _visit(browser, f"{server.url}/runs/flow-run/{run['id']}", "hostile"))
        )
    for key, seen in pages:
        assert seen["live"] == [], key
        assert seen["dialogs"] == [], key
    texts = {key: seen["text"] for key, seen in pages}
    summary = next(t for k, t in texts.items() if k and k.endswith("-summary"))
    failures = next(t for k, t in texts.items() if k and k.endswith("-failures"))
    assert AGENTS[0] in summary  # shown as the text it is, not as markup ...
    assert AGENTS[1] in summary
    assert "<script>alert(2)</script><b id=evalpipe-hostile>bold</b>" in failures
    assert f"hostile — {AGENTS[1]}" in failures
    assert 'it\'s "quoted" & <ok>' in failures  # ... and not escaped twice
    assert "&#x27;" not in failures
    comparison = next(t for k, t in texts.items() if k and k.endswith("-comparison"))
    assert "x` [click](javascript:alert(4)) `y" in comparison  # a flipped row, as text
    assert "&amp;" not in failures
