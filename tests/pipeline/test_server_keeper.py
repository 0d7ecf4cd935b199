"""The end of the keeper's start-up (evalpipe.pipeline.keeper): server.json first, then the one
request that builds the API's routes, then the collector on again. No Prefect server is started: a
stub HTTP server answers in its place."""

from __future__ import annotations

import argparse
import gc
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evalpipe.pipeline import keeper


@dataclass
class _Stub:
    """What the stub was asked (each path, and whether server.json existed then)."""

    info: Path
    status: int = 404
    asked: list[tuple[str, bool]] = field(default_factory=list)
    port: int = 0


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[_Stub]:
    """A local HTTP server: 200 for /api/health, ``stub.status`` for every other path."""
    state = _Stub(info=tmp_path / "server.json")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.asked.append((self.path, state.info.exists()))
            code = 200 if self.path == "/api/health" else state.status
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = int(httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_warm_up_asks_a_path_of_the_api_that_no_route_has(stub: _Stub) -> None:
    """The warm-up is one GET under /api/ that the API answers with 404, and that is a success."""
    assert keeper.WARM_UP_PATH.startswith("/api/")
    assert keeper._warm_up(stub.port) is True
    assert stub.asked == [(keeper.WARM_UP_PATH, False)]


def test_a_warm_up_not_answered_404_is_not_taken_for_one(stub: _Stub) -> None:
    """A 200 (a route that matched), or no answer at all, is not the warm-up's 404."""
    stub.status = 200
    assert keeper._warm_up(stub.port) is False
    unused = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = int(unused.server_address[1])
    unused.server_close()  # nothing listens there now
    assert keeper._warm_up(port) is False


class _Server:
    started = True
    should_exit = False


class _NoTimer:
    """In place of the keeper's hard-exit timer, which would end the test process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.daemon = False

    def start(self) -> None:
        pass


def test_the_watch_announces_then_warms_up_then_turns_the_collector_on(
    stub: _Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the API answers, server.json is written before the warm-up request is sent (a waiting
    run goes on meanwhile), and the collector, off since the start, is on again afterwards."""
    monkeypatch.setattr(keeper.threading, "Timer", _NoTimer)
    args = argparse.Namespace(
        state_dir=str(tmp_path), idle=0.0, startup_timeout=10.0, database="", template="", meta=""
    )
    server = _Server()
    watch = keeper.Keeper(args, server, stub.port, save_template=None)
    was_enabled = gc.isenabled()
    gc.disable()  # as main() has it while the server starts
    try:
        watch.watch()  # no run holds a lease and idle is 0: it stops right after the start
        assert gc.isenabled()
    finally:
        if was_enabled:
            gc.enable()
    assert stub.asked == [("/api/health", False), (keeper.WARM_UP_PATH, True)]
    assert watch.announced
    assert server.should_exit
    assert not stub.info.exists()  # removed when it stopped, idle
