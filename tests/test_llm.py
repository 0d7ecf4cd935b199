"""The OpenAI-compatible client against a loopback server: bodies, auth, retries, bound, cache."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken

from evalpipe._internal.retry import parse_retry_after
from evalpipe.cache import CacheMissError, ResponseCache
from evalpipe.llm import (
    ChatClient,
    ChatEndpoint,
    ChatHTTPError,
    ChatResponseError,
    ChatTransportError,
    is_format_rejection,
)
from evalpipe.suite import EvalSuite, SuiteError, build_evaluators, build_target
from fakes.openai_server import (
    FakeOpenAIServer,
    Reply,
    chat,
    closed_port,
    status,
)

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def endpoint(server: FakeOpenAIServer, **kwargs: Any) -> ChatEndpoint:
    options: dict[str, Any] = {"base_url": server.base_url, "model": "m", "retry_backoff": 0.01}
    options.update(kwargs)
    return ChatEndpoint(**options)


def gaps(server: FakeOpenAIServer) -> list[float]:
    times = [r.received_at for r in server.requests]
    return [b - a for a, b in itertools.pairwise(times)]


async def test_default_request_has_temperature_zero_seed_and_bearer_key(
    server: FakeOpenAIServer,
) -> None:
    """A call posts to /v1/chat/completions with temperature 0, a seed and the key as a Bearer token."""
    server.script(
        chat("hello", usage={"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9})
    )
    client = ChatClient(endpoint(server, api_key="sk-test"))
    result = await client.complete(HI, max_tokens=50)
    [req] = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.body == {
        "model": "m",
        "messages": HI,
        "temperature": 0.0,
        "seed": 42,
        "max_tokens": 50,
    }
    assert req.headers["authorization"] == "Bearer sk-test"
    assert "api-key" not in req.headers
    assert result.content == "hello"
    assert result.usage == {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9}
    assert result.latency_s > 0
    assert (result.cached, result.attempts, result.finish_reason) == (False, 1, "stop")


async def test_reasoning_model_sends_max_completion_tokens_and_no_temperature(
    server: FakeOpenAIServer,
) -> None:
    """is_reasoning_model drops temperature and sends max_completion_tokens instead of max_tokens."""
    client = ChatClient(endpoint(server, is_reasoning_model=True))
    await client.complete(HI, max_tokens=300)
    body = server.requests[0].body
    assert "temperature" not in body
    assert "max_tokens" not in body
    assert body["max_completion_tokens"] == 300
    assert body["seed"] == 42


async def test_azure_deployment_url_api_version_and_api_key_header(
    server: FakeOpenAIServer,
) -> None:
    """Azure's deployment form posts to /openai/deployments/<d>/chat/completions?api-version with api-key."""
    ep = ChatEndpoint(
        base_url=server.origin,
        model="gpt-4o",
        api_type="azure",
        azure_deployment="judge-dep",
        api_key="azure-secret",
    )
    await ChatClient(ep).complete(HI)
    [req] = server.requests
    assert req.path == "/openai/deployments/judge-dep/chat/completions"
    assert req.query == {"api-version": ["2024-10-21"]}
    assert req.headers["api-key"] == "azure-secret"
    assert "authorization" not in req.headers
    assert "model" not in req.body


class StaticCredential:
    """A synchronous azure-identity style credential handing out a fixed token."""

    def __init__(self) -> None:
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken("entra-token", int(time.time()) + 3600)


async def test_entra_credential_token_is_sent_as_bearer_and_fetched_once(
    server: FakeOpenAIServer,
) -> None:
    """An azure-identity credential's token goes in Authorization, asked once for the cognitive scope."""
    credential = StaticCredential()
    ep = endpoint(server, api_type="azure", api_key="ignored-when-credential")
    async with ChatClient(ep, credential=credential) as client:
        await client.complete(HI)
        await client.complete(HI)
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer entra-token"] * 2
    assert "api-key" not in server.requests[0].headers
    assert credential.scopes == [("https://cognitiveservices.azure.com/.default",)]


async def test_api_key_never_appears_in_repr_errors_or_logs(
    server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The key is absent from the endpoint's and client's repr, retry log lines and the final error."""
    server.burst(status(500, message="boom"), 2)
    ep = endpoint(server, api_key="sk-very-secret", max_retries=1)
    client = ChatClient(ep)
    with (
        caplog.at_level(logging.DEBUG, logger="evalpipe.llm"),
        pytest.raises(ChatHTTPError) as info,
    ):
        await client.complete(HI)
    texts = [repr(ep), str(ep), repr(client), str(info.value), caplog.text, ep.model_dump_json()]
    assert all("sk-very-secret" not in t for t in texts)
    assert "retry 1/1" in caplog.text


def test_api_key_env_is_read_and_a_missing_variable_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """api_key_env reads the variable when the client is made; an unset one is a ValueError naming it."""
    ep = ChatEndpoint(base_url="http://127.0.0.1:1/v1", model="m", api_key_env="EVALPIPE_TEST_KEY")
    monkeypatch.delenv("EVALPIPE_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match="EVALPIPE_TEST_KEY is not set"):
        ChatClient(ep)
    monkeypatch.setenv("EVALPIPE_TEST_KEY", "from-env")
    assert ep.resolve_api_key() == "from-env"


def test_endpoint_config_errors_name_the_field() -> None:
    """A base_url without a scheme, Azure fields on an OpenAI endpoint and unknown fields are rejected."""
    with pytest.raises(ValueError, match="base_url must start with http"):
        ChatEndpoint(base_url="localhost:11434/v1", model="m")
    with pytest.raises(ValueError, match="need api_type='azure'"):
        ChatEndpoint(base_url="http://x/v1", model="m", azure_deployment="d")
    with pytest.raises(ValueError, match="api_version is only used with azure_deployment"):
        ChatEndpoint(base_url="http://x/openai/v1", model="m", api_type="azure", api_version="v")
    with pytest.raises(ValueError, match="max_concurrency"):
        ChatEndpoint(base_url="http://x/v1", model="m", max_concurrency=0)
    with pytest.raises(ValueError, match="temprature"):
        ChatEndpoint.model_validate({"base_url": "http://x/v1", "model": "m", "temprature": 0})


async def test_429_retry_after_seconds_is_honoured(server: FakeOpenAIServer) -> None:
    """A 429 with Retry-After: 1 is retried after about one second, then succeeds."""
    server.script(status(429, headers={"Retry-After": "1"}), chat("ok"))
    result = await ChatClient(endpoint(server)).complete(HI)
    assert result.content == "ok"
    assert result.attempts == 2
    [gap] = gaps(server)
    assert 0.95 <= gap < 2.0


async def test_retry_after_ms_is_honoured(server: FakeOpenAIServer) -> None:
    """retry-after-ms (milliseconds) wins over the backoff: 150 ms between the attempts."""
    server.script(status(429, headers={"retry-after-ms": "150"}), chat("ok"))
    await ChatClient(endpoint(server, retry_backoff=5.0)).complete(HI)
    [gap] = gaps(server)
    assert 0.14 <= gap < 1.0


async def test_retry_after_is_capped(server: FakeOpenAIServer) -> None:
    """A Retry-After longer than max_retry_wait waits only max_retry_wait."""
    server.script(status(503, headers={"Retry-After": "120"}), chat("ok"))
    await ChatClient(endpoint(server, max_retry_wait=0.1)).complete(HI)
    [gap] = gaps(server)
    assert gap < 1.0


def test_parse_retry_after_forms() -> None:
    """Retry-After as seconds or an HTTP date, and retry-after-ms, become seconds; junk is None."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=3), usegmt=True)
    assert parse_retry_after({"Retry-After": later}, now=now) == pytest.approx(3.0)
    assert parse_retry_after({"Retry-After": format_datetime(now, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


async def test_5xx_burst_then_success(server: FakeOpenAIServer) -> None:
    """Three 5xx answers (500, 502, 503) are retried with backoff and the fourth attempt succeeds."""
    server.script(status(500), status(502), status(503), chat("finally"))
    result = await ChatClient(endpoint(server)).complete(HI)
    assert result.content == "finally"
    assert result.attempts == 4
    assert len(server.requests) == 4


async def test_retries_exhausted_raise_the_last_http_error(server: FakeOpenAIServer) -> None:
    """When every attempt fails, ChatHTTPError carries the status and the number of attempts."""
    server.burst(status(500, message="still broken"), 3)
    with pytest.raises(ChatHTTPError) as info:
        await ChatClient(endpoint(server, max_retries=2)).complete(HI)
    assert (info.value.status, info.value.attempts) == (500, 3)
    assert "still broken" in str(info.value)
    assert len(server.requests) == 3


@pytest.mark.parametrize("code", [408, 409, 425, 429, 503])
async def test_the_documented_transient_statuses_are_retried(
    server: FakeOpenAIServer, code: int
) -> None:
    """408, 409, 425, 429 and 5xx (docs/judges.md) are retried, as every other client retries
    them (evalpipe._internal.retry.TRANSIENT_STATUS)."""
    server.script(status(code, headers={"retry-after-ms": "10"}), chat("ok"))
    result = await ChatClient(endpoint(server)).complete(HI)
    assert (result.content, result.attempts) == ("ok", 2)


async def test_client_errors_are_not_retried(server: FakeOpenAIServer) -> None:
    """A 400 is raised at once; a 404 hints at the base_url."""
    server.script(status(400, message="bad request"), status(404))
    client = ChatClient(endpoint(server))
    with pytest.raises(ChatHTTPError, match="bad request") as info:
        await client.complete(HI)
    assert info.value.status == 400
    with pytest.raises(ChatHTTPError, match="should end in /v1"):
        await client.complete(HI)
    assert len(server.requests) == 2


async def test_a_500_request_validation_error_is_not_retried(server: FakeOpenAIServer) -> None:
    """llama-cpp-python's 500 "N validation errors" for a request it cannot take is raised at once, not retried."""
    server.script(
        status(500, message="2 validation errors:\n  {'type': 'literal_error', 'loc': ('body',)}"),
        status(500, message="boom"),
        chat("ok"),
    )
    client = ChatClient(endpoint(server))
    with pytest.raises(ChatHTTPError, match="validation errors") as info:
        await client.complete(HI)
    assert (info.value.status, info.value.attempts) == (500, 1)
    assert (await client.complete(HI)).content == "ok"  # a plain 500 is still retried
    assert len(server.requests) == 3


async def test_complete_structured_negotiates_and_returns_the_mode() -> None:
    """complete_structured sends the strict schema, steps down on a format rejection to the grammar schema, and says which mode answered."""
    strict = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    grammar = {**strict, "properties": {"a": {"type": "string", "maxLength": 5}}}
    with FakeOpenAIServer(reject_formats={"json_schema"}) as srv:
        srv.responder = lambda _r: chat('{"a": "x"}')
        client = ChatClient(endpoint(srv))
        completion, mode = await client.complete_structured(
            HI, schema=strict, grammar_schema=grammar, schema_name="thing"
        )
        assert (completion.content, mode) == ('{"a": "x"}', "json_object_schema")
        first, second = (r.body["response_format"] for r in srv.requests)
        assert first == {
            "type": "json_schema",
            "json_schema": {"name": "thing", "schema": strict, "strict": True},
        }
        assert second == {"type": "json_object", "schema": grammar}
        assert srv.requests[0].body["messages"] == HI
        with pytest.raises(ValueError, match="unknown response format mode"):
            await client.complete_structured(HI, schema=strict, modes=["xml"])  # type: ignore[list-item]


def test_is_format_rejection_reads_the_status_and_the_endpoints_words() -> None:
    """A 400/422 naming response_format and a 500 validation error naming it are rejections; a 429, a 503 or a 400 about the model are not."""
    named = "Invalid parameter: 'response_format' of type 'json_schema' is not supported"
    assert is_format_rejection(ChatHTTPError(400, "x", detail=named))
    assert is_format_rejection(ChatHTTPError(422, "x", detail="body.response_format.type: bad"))
    assert is_format_rejection(
        ChatHTTPError(500, "x", detail="1 validation error:\n ('body', 'response_format')")
    )
    assert not is_format_rejection(ChatHTTPError(500, "x", detail="response_format crashed us"))
    assert not is_format_rejection(ChatHTTPError(429, "x", detail="response_format: slow down"))
    assert not is_format_rejection(ChatHTTPError(400, "x", detail="model 'm' does not exist"))
    assert not is_format_rejection(ValueError("response_format"))


async def test_x_should_retry_false_wins_over_5xx(server: FakeOpenAIServer) -> None:
    """A 500 with x-should-retry: false is not retried."""
    server.script(status(500, headers={"x-should-retry": "false"}))
    with pytest.raises(ChatHTTPError):
        await ChatClient(endpoint(server)).complete(HI)
    assert len(server.requests) == 1


async def test_connection_refused_is_retried_then_a_transport_error() -> None:
    """A port nobody listens on is retried max_retries times, then ChatTransportError names the URL."""
    ep = ChatEndpoint(
        base_url=f"http://127.0.0.1:{closed_port()}/v1", model="m", max_retries=2, retry_backoff=0
    )
    with pytest.raises(ChatTransportError, match="after 3 attempt"):
        await ChatClient(ep).complete(HI)


async def test_read_timeout_is_a_transport_error(server: FakeOpenAIServer) -> None:
    """An answer slower than the timeout becomes ChatTransportError (ReadTimeout)."""
    server.script(Reply(body={}, delay=5.0))
    ep = endpoint(server, timeout=1.0, max_retries=0)  # a loopback connect is well within 1 s
    with pytest.raises(ChatTransportError, match="ReadTimeout"):
        await ChatClient(ep).complete(HI)


async def test_a_200_that_is_not_a_completion_is_a_response_error(server: FakeOpenAIServer) -> None:
    """A 200 without choices, or with a body that is not JSON, is a ChatResponseError."""
    server.script(Reply(body={"object": "list"}), Reply(body=b"<html>"))
    client = ChatClient(endpoint(server))
    with pytest.raises(ChatResponseError, match="no choices"):
        await client.complete(HI)
    with pytest.raises(ChatResponseError, match="not JSON"):
        await client.complete(HI)


async def test_a_200_that_is_not_a_completion_is_not_kept_for_a_resume(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """The run's journal keeps only answers that are completions: after a 200 without choices,
    a resumed run asks the endpoint again instead of replaying the broken answer."""
    from evalpipe.journal import Journal
    from evalpipe.llm import run_answers
    from evalpipe.runner.state import JournalAnswers
    from evalpipe.secrets import Scrubber

    server.script(Reply(body={"object": "list"}), chat("fine"))
    run_answers.set(JournalAnswers(Journal(tmp_path, "answers"), Scrubber()))
    client = ChatClient(endpoint(server))
    with pytest.raises(ChatResponseError, match="no choices"):
        await client.complete(HI)
    resumed = ChatClient(endpoint(server))
    assert (await resumed.complete(HI)).content == "fine"
    assert len(server.requests) == 2


async def test_concurrency_bound_is_shared_by_clients_of_one_endpoint(
    server: FakeOpenAIServer,
) -> None:
    """Two clients of the same endpoint with max_concurrency=2 never have more than 2 requests open."""
    server.default_delay = 0.1
    ep = endpoint(server, max_concurrency=2)
    async with ChatClient(ep) as a, ChatClient(ep) as b:
        await asyncio.gather(*(c.complete(HI) for c in [a, b] * 4))
    assert len(server.requests) == 8
    assert server.max_in_flight == 2


async def test_without_bound_pressure_requests_overlap(server: FakeOpenAIServer) -> None:
    """With max_concurrency=8, eight slow requests are all in flight at once (the bound is not serial)."""
    server.default_delay = 0.2
    ep = endpoint(server, max_concurrency=8)
    async with ChatClient(ep) as client:
        await asyncio.gather(*(client.complete(HI) for _ in range(8)))
    assert server.max_in_flight == 8


async def test_cache_record_then_replay_offline(server: FakeOpenAIServer, tmp_path: Path) -> None:
    """Recorded answers replay with the server stopped: same content, usage kept, latency 0, no request."""
    server.script(chat("recorded", usage={"prompt_tokens": 4, "completion_tokens": 1}))
    recorded = await ChatClient(endpoint(server), cache=ResponseCache(tmp_path)).complete(HI)
    assert recorded.key is not None
    assert not recorded.cached
    dead = ChatEndpoint(base_url=f"http://127.0.0.1:{closed_port()}/v1", model="m", max_retries=0)
    replayed = await ChatClient(dead, cache=ResponseCache(tmp_path, mode="replay")).complete(HI)
    assert replayed.content == "recorded"
    assert replayed.usage == {"input_tokens": 4, "output_tokens": 1, "total_tokens": 5}
    assert (replayed.cached, replayed.latency_s, replayed.attempts) == (True, 0.0, 0)
    assert replayed.key == recorded.key
    assert len(server.requests) == 1


async def test_cache_key_includes_repetition(server: FakeOpenAIServer, tmp_path: Path) -> None:
    """Each repetition records its own entry; replaying an unrecorded repetition is a CacheMissError."""
    server.script(chat("first"), chat("second"))
    client = ChatClient(endpoint(server), cache=ResponseCache(tmp_path))
    assert (await client.complete(HI, repetition=0)).content == "first"
    assert (await client.complete(HI, repetition=1)).content == "second"
    assert (await client.complete(HI, repetition=0)).content == "first"
    assert len(server.requests) == 2
    replay = ChatClient(endpoint(server), cache=ResponseCache(tmp_path, mode="replay"))
    with pytest.raises(CacheMissError, match="repetition is 2"):
        await replay.complete(HI, repetition=2)


@pytest.mark.parametrize(
    ("fields", "header", "source"),
    [
        ({"api_key": "sk-one"}, "Authorization", "api_key"),
        ({"api_key_env": "SOME_KEY"}, "authorization", "api_key_env"),
        ({"api_key": "k", "api_type": "azure"}, "api-key", "api_key"),
        ({"entra": True}, "Authorization", "entra"),
    ],
)
def test_an_explicit_auth_header_and_a_key_are_refused_not_replaced(
    fields: dict[str, Any], header: str, source: str
) -> None:
    """Regression (issue 34): a judge's explicit Authorization header was silently replaced by
    its api_key. Both at once is refused, naming the header and the key's field, never a value."""
    clash = rf"headers\.{header} and {source} .*would both set the"
    with pytest.raises(ValueError, match=clash) as info:
        ChatEndpoint(
            base_url="http://127.0.0.1:9/v1", model="m", headers={header: "Bearer sk-two"}, **fields
        )
    assert "sk-two" not in str(info.value)
    assert "sk-one" not in str(info.value)


async def test_an_explicit_auth_header_alone_is_sent_as_written(server: FakeOpenAIServer) -> None:
    """Without a key, a header given in `headers` is what the request carries (the documented
    way to use another scheme); with a credential object it is refused."""
    server.script(chat("hello"))
    ep = endpoint(server, headers={"Authorization": "Token abc123"})
    async with ChatClient(ep) as client:
        await client.complete(HI)
    assert server.requests[0].headers["authorization"] == "Token abc123"
    with pytest.raises(ValueError, match=r"headers\.Authorization and a credential"):
        ChatClient(ep, credential=StaticCredential())


@pytest.mark.parametrize(
    "url", ["http://user:hunter2secret@127.0.0.1:9/v1", "http://127.0.0.1:9/v1?api_key=sk-zzzz9999"]
)
def test_a_base_url_with_credentials_is_refused_saying_so(url: str) -> None:
    """Regression (issue 34): a base_url with credentials was refused as "Input should be a valid
    string" (a suite's credential URL is a SecretStr). It is refused saying it carries
    credentials, without echoing them, in Python and in a suite."""
    with pytest.raises(ValueError, match="base_url carries credentials") as info:
        ChatEndpoint(base_url=url, model="m")
    assert "hunter2secret" not in str(info.value)
    assert "sk-zzzz9999" not in str(info.value)
    suite = EvalSuite(
        name="s",
        target={"openai": {"base_url": url, "model": "m"}},
        dataset="d.jsonl",
        evaluators=[{"judge": {"base_url": url, "model": "m"}}],
    )
    with pytest.raises(SuiteError, match=r"target\.openai\.base_url: base_url carries credentials"):
        build_target(suite)
    with pytest.raises(SuiteError, match="judge: base_url: base_url carries credentials") as found:
        build_evaluators(suite)
    assert "hunter2secret" not in str(found.value)
