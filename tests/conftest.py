"""Fixtures shared by every test package: a headless Chromium for the HTML and Prefect UI checks, and
a clean slate of negotiated response formats for every test."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from evalpipe.llm import forget_response_formats

#: Flags this machine's closed network needs (otherwise Chromium keeps dialing out and logs refusals).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """Debian's chromium (installed by .ci/run), or None."""
    return os.environ.get("EVALPIPE_CHROMIUM") or shutil.which("chromium")


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium driven by Playwright, started for one test (~1 s).

    Not shared across tests: Playwright's sync API keeps an event loop running in this thread
    while it is open, and the async tests that follow could not start theirs.

    Skipped where Chromium is missing, unless EVALPIPE_REQUIRE_BROWSER is set (CI sets it), in which
    case a missing browser fails the test instead of hiding it.
    """
    path = chromium_path()
    if path is None:
        message = "Debian chromium not found: apt-get install chromium chromium-driver"
        if os.environ.get("EVALPIPE_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(autouse=True)
def _fresh_response_formats() -> Iterator[None]:
    """Each test negotiates response formats anew: loopback servers reuse ports, and what one
    test's server rejected must not carry over to the next server on that port."""
    forget_response_formats()
    yield
    forget_response_formats()
