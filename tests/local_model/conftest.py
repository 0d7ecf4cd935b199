"""One real model server for the session: SmolLM2-135M-Instruct on llama-cpp-python (the `local`
extra), on 127.0.0.1 at a free port, started once, waited for (bounded) and stopped at the end.

Without the extra these tests skip, unless EVALPIPE_REQUIRE_LOCAL_MODEL=1 (CI sets it), in which case
a missing server fails them instead of hiding them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from evalpipe.local_model import LocalModelServer, LocalModelUnavailable, missing_reason

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")


def _unavailable(message: str) -> None:
    if os.environ.get("EVALPIPE_REQUIRE_LOCAL_MODEL") == "1":
        pytest.fail(f"EVALPIPE_REQUIRE_LOCAL_MODEL=1 but the local model cannot run: {message}")
    pytest.skip(message)


@pytest.fixture(scope="session")
def local_server() -> Iterator[LocalModelServer]:
    """The running server (base_url, model ids); ~2 s to start, stopped after the last test."""
    reason = missing_reason()
    if reason is not None:
        _unavailable(reason)
    # Two threads: on two cores this directory took 170 s against 193 s with one (idle machine);
    # under `make test` the other pytest worker shares the cores, so expect ~2x that.
    server = LocalModelServer(startup_timeout=120, n_threads=min(2, os.cpu_count() or 1))
    try:
        server.start()
    except LocalModelUnavailable as exc:
        _unavailable(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def local_prefect_api(local_server: LocalModelServer) -> Iterator[str]:
    """A Prefect test server for the flow runs here (a fresh temporary database), after the model."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        url = PREFECT_API_URL.value()
        assert url, "the test harness did not set an API URL"
        yield str(url)
