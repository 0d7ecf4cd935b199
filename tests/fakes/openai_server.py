"""A loopback OpenAI-compatible ``/v1/chat/completions`` server with scripted replies.

It listens on 127.0.0.1 (port 0), serves from a background thread and records every request
(path, query, headers, JSON body) for assertions. Replies come from a queue (``server.script(...)``)
or, when the queue is empty, from ``server.responder(request)``; each reply can delay itself, so
``server.max_in_flight`` measures how many requests a client had open at once.

Usage::

    with FakeOpenAIServer() as server:
        server.script(status(429, headers={"Retry-After": "1"}), verdict(5))
        client = ChatClient(ChatEndpoint(base_url=server.base_url, model="judge"))

Reply builders cover what the tests need: judge verdicts (valid, garbage, empty, truncated JSON,
refusals), tool calls (including malformed argument JSON), HTTP errors with Retry-After, and bursts.

``FakeOpenAIServer(quota=6)`` plays an endpoint with a quota of requests in flight: a request that
arrives while 6 are open is answered 429 at once (with ``Retry-After``, as Azure OpenAI and OpenAI
answer past their limits), before the script is consulted; ``server.rejected`` counts them.

``FakeOpenAIServer(reject_formats={"json_schema"})`` plays a server that does not support some
``response_format`` forms: such a request is answered with the rejection a real server sends before
the script is consulted, so scripted replies go to accepted requests. ``reject_status`` picks
which: 500 (the default) as llama-cpp-python 0.3.36 really answers, a pydantic "1 validation
error" wrapped as an internal_server_error; 422 as a FastAPI server's request validation; 400 as
OpenAI's ``invalid_request_error``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "CapturedRequest",
    "FakeOpenAIServer",
    "Reply",
    "chat",
    "closed_port",
    "completion",
    "empty",
    "format_mode",
    "garbage",
    "refusal",
    "status",
    "tool_calls",
    "truncated",
    "verdict",
]

MAX_BODY = 4 * 1024 * 1024
"""Requests larger than this are refused (413): the server stays bounded."""


@dataclass
class CapturedRequest:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any
    """The parsed JSON body (None when it was not JSON)."""
    received_at: float
    """time.monotonic() at arrival."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's chat messages."""
        return list((self.body or {}).get("messages") or [])

    @property
    def text(self) -> str:
        """Every message content joined (string contents only)."""
        return "\n".join(m["content"] for m in self.messages if isinstance(m.get("content"), str))


@dataclass
class Reply:
    """What the server answers to one request."""

    status: int = 200
    body: Any = None
    """A JSON-able value, or bytes sent as they are."""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering (bounded by the client's timeout)."""


def completion(
    message: Mapping[str, Any],
    *,
    finish_reason: str = "stop",
    usage: Mapping[str, int] | None = None,
    model: str = "fake-model",
    delay: float = 0.0,
) -> Reply:
    """A 200 chat.completion with one choice holding ``message``."""
    return Reply(
        body={
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": dict(message), "finish_reason": finish_reason}],
            "usage": dict(usage)
            if usage is not None
            else {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        },
        delay=delay,
    )


def chat(content: str | None, **kwargs: Any) -> Reply:
    """An assistant text answer."""
    return completion({"role": "assistant", "content": content}, **kwargs)


def verdict(
    score: Any,
    reason: str = "scripted reason",
    reasoning: str = "scripted reasoning",
    **kwargs: Any,
) -> Reply:
    """A judge answer: one JSON object with score, reason and reasoning."""
    payload = {"reasoning": reasoning, "score": score, "reason": reason}
    return chat(json.dumps(payload), **kwargs)


def garbage(**kwargs: Any) -> Reply:
    """A judge answer with no JSON in it."""
    return chat("The answer seems fine, I would say it deserves a high mark.", **kwargs)


def empty(**kwargs: Any) -> Reply:
    """A judge answer with empty content."""
    return chat("", **kwargs)


def truncated(**kwargs: Any) -> Reply:
    """A judge answer cut off mid-JSON (finish_reason "length")."""
    return chat('{"reasoning": "The response addresses the', finish_reason="length", **kwargs)


def refusal(text: str = "I'm sorry, but I can't help with that.", **kwargs: Any) -> Reply:
    """A refusal as OpenAI reports it: content null and the ``refusal`` field set."""
    return completion({"role": "assistant", "content": None, "refusal": text}, **kwargs)


def tool_calls(*calls: tuple[str, str | Mapping[str, Any]], **kwargs: Any) -> Reply:
    """An assistant turn calling tools; a str argument is sent as it is (malformed JSON too)."""
    wire = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {
                "name": name,
                "arguments": args if isinstance(args, str) else json.dumps(dict(args)),
            },
        }
        for i, (name, args) in enumerate(calls)
    ]
    return completion(
        {"role": "assistant", "content": None, "tool_calls": wire},
        finish_reason="tool_calls",
        **kwargs,
    )


def status(
    code: int, *, headers: Mapping[str, str] | None = None, message: str = "scripted error"
) -> Reply:
    """An HTTP error with an OpenAI-style error body."""
    return Reply(
        status=code,
        body={"error": {"message": message, "type": "scripted", "code": str(code)}},
        headers=dict(headers or {}),
    )


def format_mode(body: Any) -> str:
    """The response-format mode of a request body: ``json_schema``, ``json_object_schema``,
    ``json_object``, ``prompt`` (none sent) or the ``type`` as sent."""
    fmt = body.get("response_format") if isinstance(body, Mapping) else None
    if not isinstance(fmt, Mapping):
        return "prompt"
    kind = str(fmt.get("type"))
    if kind == "json_object" and "schema" in fmt:
        return "json_object_schema"
    return kind


def format_rejection(mode: str, status_code: int) -> Reply:
    """How a real server rejects a response format it does not support."""
    if status_code == 500:  # llama-cpp-python 0.3.36: its route handler wraps the validation error
        detail = (
            "{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': "
            f"\"Input should be 'text' or 'json_object'\", 'input': '{mode}'}}"
        )
        return Reply(
            status=500,
            body={
                "error": {
                    "message": f"1 validation error:\n  {detail}",
                    "type": "internal_server_error",
                    "param": None,
                    "code": None,
                }
            },
        )
    if status_code == 422:  # a FastAPI server's own request validation
        return Reply(
            status=422,
            body={
                "detail": [
                    {
                        "type": "literal_error",
                        "loc": ["body", "response_format", "type"],
                        "msg": "Input should be 'text' or 'json_object'",
                        "input": mode,
                    }
                ]
            },
        )
    return Reply(  # OpenAI's invalid_request_error
        status=status_code,
        body={
            "error": {
                "message": f"Invalid parameter: 'response_format' of type '{mode}' is not "
                "supported with this model.",
                "type": "invalid_request_error",
                "param": "response_format",
                "code": None,
            }
        },
    )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default backlog (5) would delay bursts of concurrent clients


class FakeOpenAIServer:
    """The server. Use as a context manager; it stops and joins its thread on exit.

    Args:
        responder: answers requests when the script queue is empty (default: a fixed text reply).
        default_delay: seconds every reply waits unless it sets its own delay.
        reject_formats: response-format modes (see ``format_mode``) answered with a rejection.
        reject_status: the rejection's form: 500 (llama-cpp-python), 422 (FastAPI) or 400 (OpenAI).
        quota: requests in flight the server takes; one more is answered 429 at once (None: any).
        quota_retry_after: the ``Retry-After`` header of those 429 answers (None: none sent).
        quota_delay: seconds before such a 429 is sent (0: at once).
    """

    def __init__(
        self,
        responder: Callable[[CapturedRequest], Reply] | None = None,
        *,
        default_delay: float = 0.0,
        reject_formats: Iterable[str] = (),
        reject_status: int = 500,
        quota: int | None = None,
        quota_retry_after: str | None = "1",
        quota_delay: float = 0.0,
    ) -> None:
        self.responder: Callable[[CapturedRequest], Reply] = responder or (
            lambda _req: chat("scripted default answer")
        )
        self.default_delay = default_delay
        self.reject_formats = set(reject_formats)
        self.reject_status = reject_status
        self.quota = quota
        self.quota_retry_after = quota_retry_after
        self.quota_delay = quota_delay
        self.rejected = 0
        """Requests answered 429 because the quota of requests in flight was full."""
        self.last_answer_at: float | None = None
        """time.monotonic() when the last answer that was not a quota 429 was sent."""
        self.requests: list[CapturedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting ---------------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies, served in order before the responder is used."""
        with self._lock:
            self._queue.extend(replies)

    def burst(self, reply: Reply, times: int) -> None:
        """Queue the same reply ``times`` times (e.g. a 5xx burst)."""
        self.script(*([reply] * times))

    @property
    def pending(self) -> int:
        """Scripted replies not served yet."""
        with self._lock:
            return len(self._queue)

    def _next_reply(self, request: CapturedRequest) -> Reply:
        mode = format_mode(request.body)
        if mode in self.reject_formats:
            return format_rejection(mode, self.reject_status)
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.responder(request)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the server listens on."""
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``.../v1``)."""
        return f"{self.origin}/v1"

    def start(self) -> FakeOpenAIServer:
        """Bind 127.0.0.1:0 and serve in a daemon thread."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # a stuck client cannot hold a handler thread for long

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                server._handle(self)

            def do_GET(self) -> None:
                server._handle(self)

        httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- request handling --------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._send(handler, status(413, message="request too large"))
            return
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        parts = urlsplit(handler.path)
        request = CapturedRequest(
            method=handler.command,
            path=parts.path,
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
            received_at=time.monotonic(),
        )
        with self._lock:
            self.requests.append(request)
            over_quota = self.quota is not None and self.in_flight >= self.quota
            if over_quota:
                self.rejected += 1
            else:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if over_quota:
            if self.quota_delay:
                time.sleep(self.quota_delay)
            headers = {"Retry-After": self.quota_retry_after} if self.quota_retry_after else {}
            self._send(handler, status(429, headers=headers, message="over the quota"))
            return
        try:
            reply = self._next_reply(request)
            delay = reply.delay or self.default_delay
            if delay:
                time.sleep(min(delay, 5.0))
        finally:
            # Counted out before the answer is written: a client can only start its next request
            # after reading this answer, so max_in_flight never overshoots the client's bound.
            with self._lock:
                self.in_flight -= 1
                self.last_answer_at = time.monotonic()
        self._send(handler, reply)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        data = (
            reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode("utf-8")
        )
        try:
            handler.send_response(reply.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            for key, value in reply.headers.items():
                handler.send_header(key, value)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test); nothing to answer


@contextmanager
def serve(
    *replies: Reply, responder: Callable[[CapturedRequest], Reply] | None = None
) -> Iterator[FakeOpenAIServer]:
    """Start a server with ``replies`` queued; stop it on exit."""
    with FakeOpenAIServer(responder) as server:
        server.script(*replies)
        yield server


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def requests_to(server: FakeOpenAIServer, path: str) -> Iterable[CapturedRequest]:
    """The captured requests to ``path``."""
    return [r for r in server.requests if r.path == path]
