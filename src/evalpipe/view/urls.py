"""The view's addresses: where a run's page is, and the configured view URL the flow links to.

Kept free of the web stack (no starlette import), so the flow can link to the view without
loading it.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from urllib.parse import quote, urlencode

__all__ = [
    "LOOPBACK_HOSTS",
    "VIEW_URL_ENV",
    "compare_item_path",
    "compare_path",
    "configured_view_url",
    "flow_run_url",
    "is_loopback",
    "item_path",
    "run_path",
    "run_url",
    "samples_path",
    "trends_path",
]

VIEW_URL_ENV = "EVALPIPE_VIEW_URL"
"""Where ``evalpipe view`` is reachable (``http://evals.internal:8765``); when set, the flow's
report and run-directory artifacts link to the run's page there instead of to ``file://``."""


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""Names of this machine's loopback interface."""


def is_loopback(host: str) -> bool:
    """``host`` names the loopback interface (``127.0.0.1``, ``::1``, ``localhost``)."""
    name = host.strip("[]")
    try:
        return name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def configured_view_url(environ: Mapping[str, str] | None = None) -> str | None:
    """The view URL from :data:`VIEW_URL_ENV`, without a trailing slash, or None when unset.

    Raises:
        ValueError: when it is set but is not an http(s) URL.
    """
    value = (os.environ if environ is None else environ).get(VIEW_URL_ENV, "").strip()
    if not value:
        return None
    if not value.startswith(("http://", "https://")):
        raise ValueError(
            f"{VIEW_URL_ENV}={value!r}: expected the view's http(s) URL, e.g. http://127.0.0.1:8765"
        )
    return value.rstrip("/")


def flow_run_url(flow_run_id: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The Prefect UI's page of a flow run, ``<ui>/runs/flow-run/<id>``, or None when the run
    has no flow run id or no UI is known.

    ``<ui>`` is ``PREFECT_UI_URL``, else ``PREFECT_API_URL`` without its ``/api`` suffix (the
    server that serves the API serves the UI at its root); either must be an http(s) URL.
    """
    env = os.environ if environ is None else environ
    if not flow_run_id:
        return None
    ui = env.get("PREFECT_UI_URL", "").strip().rstrip("/")
    if not ui:
        api = env.get("PREFECT_API_URL", "").strip().rstrip("/")
        ui = api.removesuffix("/api") if api.endswith("/api") else ""
    if not ui.startswith(("http://", "https://")):
        return None
    return f"{ui}/runs/flow-run/{quote(flow_run_id, safe='')}"


def run_path(suite: str, run_name: str) -> str:
    """The run's page: ``/runs/{suite}/{run_name}`` (each part percent-encoded)."""
    return f"/runs/{quote(suite, safe='')}/{quote(run_name, safe='')}"


def run_url(view_url: str, suite: str, run_name: str) -> str:
    """The run's page in the view at ``view_url``."""
    return view_url.rstrip("/") + run_path(suite, run_name)


def _query(path: str, params: Mapping[str, object]) -> str:
    kept = {k: str(v) for k, v in params.items() if v is not None and v != ""}
    return f"{path}?{urlencode(kept)}" if kept else path


def samples_path(suite: str, run_name: str, **params: object) -> str:
    """The run's sample table, filtered, sorted and paged by ``params``."""
    return _query(run_path(suite, run_name) + "/samples", params)


def item_path(suite: str, run_name: str, agent: str, item_id: str) -> str:
    """One item of the run: its transcript and every metric's reason."""
    return _query(run_path(suite, run_name) + "/item", {"agent": agent, "id": item_id})


def compare_path(**params: object) -> str:
    """The comparison page (``a``, ``b``: run keys ``suite/run_name``)."""
    return _query("/compare", params)


def compare_item_path(**params: object) -> str:
    """One item in both runs, side by side (``a``, ``b``, ``agent``, ``row``, ``rep``)."""
    return _query("/compare/item", params)


def trends_path(suite: str) -> str:
    """A suite's trends over its runs."""
    return f"/trends/{quote(suite, safe='')}"
