"""The view's web app: a read-only Starlette application over one output directory.

Safe by construction:

- only GET and HEAD are answered (any other method: 405, on every path); nothing writes;
- a run is named by its suite and run name and looked up among the runs ``find_runs`` found
  under the served directory; no part of a URL becomes a path;
- every page is rendered by jinja2 with autoescape (the report's environment: data strings also go
  through :func:`evalpipe.escape.plain`), and no page has a script: filters are forms, sorting and
  paging are links;
- a Content-Security-Policy allows nothing but the pages' own two style sheets (by hash): no script,
  no image, frame or connection to anywhere;
- requests whose Host is not the view's (DNS rebinding against a loopback server) are refused.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evalpipe.artifacts import ArtifactError, RunInfo
from evalpipe.calibration import calibrations_for
from evalpipe.report.html import environment, package_version, report_context
from evalpipe.view.queries import (
    COLUMNS,
    PAGE_SIZES,
    STATUSES,
    BadRequest,
    Catalog,
    NotFound,
    SampleQuery,
    trend_charts,
)
from evalpipe.view.urls import (
    compare_item_path,
    compare_path,
    flow_run_url,
    item_path,
    run_path,
    samples_path,
    trends_path,
)

__all__ = ["create_app", "view_environment"]

logger = logging.getLogger("evalpipe.view")

_STYLES = ("_report.css", "_view.css")
"""The pages' style sheets, inline: the CSP allows exactly these (by their SHA-256)."""


def view_environment() -> jinja2.Environment:
    """The report's template environment (autoescape, ``plain`` on every value, strict
    undefined) with the view's templates in front."""
    base = environment()
    assert base.loader is not None
    return base.overlay(
        loader=jinja2.ChoiceLoader(
            [jinja2.PackageLoader("evalpipe.view", "templates"), base.loader]
        )
    )


def content_security_policy(env: jinja2.Environment) -> str:
    """No script, no image, frame, font or connection: the pages' own style sheets only."""
    hashes = " ".join(
        "'sha256-"
        + base64.b64encode(
            hashlib.sha256(env.get_template(name).render().encode()).digest()
        ).decode()
        + "'"
        for name in _STYLES
    )
    return (
        f"default-src 'none'; style-src {hashes}; form-action 'self'; base-uri 'none'; "
        "frame-ancestors 'none'"
    )


class _Guard:
    """Outermost layer: refuses every method but GET and HEAD and foreign Host headers, and adds
    the security headers to every response (errors included)."""

    def __init__(self, app: ASGIApp, csp: str, allowed_hosts: Sequence[str] | None) -> None:
        self.app = app
        self.allowed = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}
        self.headers = [
            (b"content-security-policy", csp.encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"),
            (b"x-frame-options", b"DENY"),
            (b"cache-control", b"no-store"),
            (b"cross-origin-resource-policy", b"same-origin"),
        ]

    def _host_ok(self, scope: Scope) -> bool:
        if self.allowed is None:
            return True
        host = Headers(scope=scope).get("host", "").lower()
        if host.startswith("["):
            host = host[1 : host.find("]")] if "]" in host else host
        else:
            host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        return host in self.allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.headers]
            await send(message)

        refused: Response | None = None
        if scope["method"] not in ("GET", "HEAD"):
            refused = Response(
                "evalpipe view is read-only: only GET and HEAD are answered\n",
                status_code=405,
                headers={"Allow": "GET, HEAD"},
                media_type="text/plain",
            )
        elif not self._host_ok(scope):
            refused = Response(
                "this Host is not the view's (start it with --allowed-host NAME)\n",
                status_code=400,
                media_type="text/plain",
            )
        await (refused or self.app)(scope, receive, with_headers)


def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name, "")
    if not text:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise BadRequest(f"{name}={text!r}: expected a whole number from {low} to {high}")
    return int(text)


class _Pages:
    """The page handlers, over one catalog of runs."""

    def __init__(self, catalog: Catalog, env: jinja2.Environment) -> None:
        self.catalog = catalog
        self.env = env
        env.globals.update(
            root=catalog.root,
            version=package_version(),
            run_path=run_path,
            samples_path=samples_path,
            item_path=item_path,
            compare_path=compare_path,
            trends_path=trends_path,
        )

    def render(self, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        page = self.env.get_template(template).render(context)
        return HTMLResponse(page, status_code=status_code)

    def error(self, status: int, title: str, message: str) -> HTMLResponse:
        return self.render(
            "error.html.j2", status_code=status, status=status, title=title, message=message
        )

    def failed(self, request: Request, exc: Exception) -> HTMLResponse:
        """A 404 for what the served directory does not hold, a 400 for a bad parameter, a 500
        naming the damaged run file."""
        if isinstance(exc, BadRequest):
            return self.error(400, "Bad request", str(exc))
        if isinstance(exc, ArtifactError):
            logger.warning("%s", exc)
            return self.error(500, "Cannot read this run", str(exc))
        message = str(exc) if isinstance(exc, NotFound) else f"nothing at {request.url.path}"
        return self.error(404, "Not found", message)

    def _run(self, request: Request) -> RunInfo:
        return self.catalog.run(request.path_params["suite"], request.path_params["run"])

    def runs(self, request: Request) -> HTMLResponse:
        suite = request.query_params.get("suite") or None
        tag = request.query_params.get("tag") or None
        every = self.catalog.runs()
        shown = self.catalog.runs(suite=suite, tag=tag)
        damaged = [d for d in self.catalog.damaged() if suite is None or d.suite == suite]
        return self.render(
            "runs.html.j2",
            runs=shown,
            damaged=damaged,
            suites=sorted({e.suite for e in every}),
            tags=sorted({t for e in every for t in e.tags}),
            suite=suite,
            tag=tag,
        )

    def run(self, request: Request) -> HTMLResponse:
        entry = self._run(request)
        return self.render(
            "run.html.j2",
            entry=entry,
            prefect_url=flow_run_url(entry.flow_run_id),
            costs=self.catalog.costs(entry),
            **report_context(
                self.catalog.report(entry), calibrations_for(self.catalog.root, entry.run_name)
            ),
        )

    def samples(self, request: Request) -> HTMLResponse:
        entry = self._run(request)
        index = self.catalog.samples(entry)
        params = request.query_params
        status = params.get("status") or None
        metric = index.metric(params.get("metric") or None)
        allowed = (*STATUSES, "not_applicable") if metric else STATUSES
        if status is not None and status not in allowed:
            raise BadRequest(f"status={status!r}: expected one of {', '.join(allowed)}")
        sort = params.get("sort") or "position"
        if sort != "position" and sort not in COLUMNS and index.metric(sort) is None:
            raise BadRequest(f"sort={sort!r}: not a column of the sample table")
        per = _int(params, "per", 50, min(PAGE_SIZES), max(PAGE_SIZES))
        q = SampleQuery(
            status=status,
            agent=params.get("agent") or None,
            metric=metric.key if metric else None,
            text=params.get("q") or None,
            sort=sort,
            desc=params.get("desc") == "1",
            page=_int(params, "page", 1, 1, 10**9),
            per=per if per in PAGE_SIZES else 50,
        )
        rows, total, pages = index.query(q)
        headers = [(key, label) for key, (_, label) in COLUMNS.items()]
        at = list(COLUMNS).index("response") + 1
        columns = [*headers[:at], *[(c.key, c.label) for c in index.metrics], *headers[at:]]

        def link(**changes: object) -> str:
            return samples_path(entry.suite, entry.run_name, **q.params(**changes))

        return self.render(
            "samples.html.j2",
            entry=entry,
            index=index,
            rows=rows,
            total=total,
            pages=pages,
            q=q,
            columns=columns,
            statuses=allowed,
            page_sizes=PAGE_SIZES,
            link=link,
        )

    def item(self, request: Request) -> HTMLResponse:
        entry = self._run(request)
        agent = request.query_params.get("agent", "")
        item_id = request.query_params.get("id", "")
        detail, costs = self.catalog.samples(entry).detail(agent, item_id)
        tokens = [t for t, _ in costs if t is not None]
        latency = [s for _, s in costs if s is not None]
        return self.render(
            "item.html.j2",
            entry=entry,
            it=detail,
            costs=costs,
            judge_tokens=sum(tokens) if tokens else None,
            judge_latency=sum(latency) if latency else None,
        )

    def _pair(self, request: Request) -> tuple[list[RunInfo], RunInfo | None, RunInfo | None]:
        """Every run, and the two the query names: ``b`` and ``a``; without ``a``, B's suite's
        baseline, else the run of B's suite before B."""
        runs = self.catalog.runs()
        a_key, b_key = request.query_params.get("a"), request.query_params.get("b")
        b = self.catalog.by_key(b_key) if b_key else None
        a = self.catalog.by_key(a_key) if a_key else None
        if a is None and b is not None:
            a = self.catalog.default_a(b)
        return runs, a, b

    def compare(self, request: Request) -> HTMLResponse:
        runs, a, b = self._pair(request)
        if a is None or b is None:
            return self.render("compare_pick.html.j2", runs=runs, a=a, b=b)
        comparison = self.catalog.compare(a, b)
        first, second = a, b

        def flip_url(flip: Any) -> str:
            return compare_item_path(
                a=first.key,
                b=second.key,
                provider=flip.provider,
                agent=flip.agent,
                metric=flip.metric,
                row=flip.row,
                rep=flip.repetition,
            )

        return self.render(
            "compare_view.html.j2", runs=runs, a=a, b=b, c=comparison, flip_url=flip_url
        )

    def compare_item(self, request: Request) -> HTMLResponse:
        _, a, b = self._pair(request)
        if a is None or b is None:
            raise BadRequest("compare/item needs two runs: a=SUITE/RUN and b=SUITE/RUN")
        params = request.query_params
        agent, row = params.get("agent", ""), params.get("row", "")
        repetition = _int(params, "rep", 0, 0, 10**9)
        sides = []
        for label, entry in (("A", a), ("B", b)):
            index = self.catalog.samples(entry)
            item_id = index.find_row(agent, row, repetition)
            detail = None if item_id is None else index.detail(agent, item_id)[0]
            sides.append((label, entry, detail))
        if all(detail is None for _, _, detail in sides):
            raise NotFound(f"neither run has an item of {agent!r} on row {row!r}")
        return self.render(
            "compare_item.html.j2",
            a=a,
            b=b,
            sides=sides,
            agent=agent,
            row=row,
            repetition=repetition,
            metric=params.get("metric"),
            provider=params.get("provider"),
        )

    def trends(self, request: Request) -> HTMLResponse:
        suite = request.path_params["suite"]
        runs = self.catalog.runs(suite=suite)
        if not runs:
            raise NotFound(f"no finished run of suite {suite!r}")
        # A trend compares like with like: one set of charts per evaluator set (the newest
        # set first), each over the runs scored with that set only.
        sets: dict[str, list[RunInfo]] = {}
        for entry in runs:
            sets.setdefault(entry.evaluators, []).append(entry)
        shown = []
        for number, members in enumerate(sets.values(), start=1):
            groups: dict[tuple[str, str], list[Any]] = {}
            for chart in trend_charts(members):
                groups.setdefault((chart.provider, chart.agent), []).append(chart)
            providers = sorted({r.provider for e in members for r in e.rows})
            shown.append(
                {
                    "number": number,
                    "runs": members,
                    "providers": providers,
                    "groups": list(groups.items()),
                    "baseline": next((e for e in members if e.baseline), None),
                }
            )
        return self.render("trends.html.j2", suite=suite, runs=runs, sets=shown)


def _warm(catalog: Catalog) -> None:
    """Read the newest run's index, report and comparison (with its baseline, else the run
    before it) ahead of the first visit: what a link from the Prefect UI opens."""
    try:
        runs = catalog.runs()
        if runs:
            catalog.samples(runs[0])
            catalog.report(runs[0])
            a = catalog.default_a(runs[0])
            if a is not None:
                catalog.compare(a, runs[0])
    except Exception:  # a damaged run is reported when its page is asked for
        logger.debug("warming the newest run failed", exc_info=True)


def create_app(
    root: str,
    *,
    allowed_hosts: Iterable[str] | None = None,
    warm: bool = False,
) -> ASGIApp:
    """The view over ``root`` (an output directory, a suite's directory, as a path or a URI).

    ``allowed_hosts``: the Host header names answered (None: any). ``warm``: read the newest run's
    index and report in the background at start.
    """
    env = view_environment()
    catalog = Catalog(root)
    pages = _Pages(catalog, env)

    routes = {
        "/": pages.runs,
        "/runs/{suite}/{run}": pages.run,
        "/runs/{suite}/{run}/samples": pages.samples,
        "/runs/{suite}/{run}/item": pages.item,
        "/compare": pages.compare,
        "/compare/item": pages.compare_item,
        "/trends/{suite}": pages.trends,
    }
    app = Starlette(  # the pages are sync: Starlette runs them, and their errors, in its threads
        routes=[Route(path, page, methods=["GET", "HEAD"]) for path, page in routes.items()],
        exception_handlers={e: pages.failed for e in (404, NotFound, BadRequest, ArtifactError)},
    )
    if warm:
        threading.Thread(target=_warm, args=(catalog,), daemon=True, name="view-warm").start()
    return _Guard(
        app, content_security_policy(env), None if allowed_hosts is None else list(allowed_hosts)
    )
