"""One Prefect test server for the whole session (a fresh temporary database); flows run against it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    """Start prefect_test_harness once (~8 s on 2 cores; it took past 90 s on a loaded machine) and
    give its API URL to subprocesses."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        url = PREFECT_API_URL.value()
        assert url, "the test harness did not set an API URL"
        yield str(url)
