"""One async client for any OpenAI-compatible ``/chat/completions`` endpoint.

Ollama, vLLM, OpenAI and Azure OpenAI (api-key or an Entra token) all speak it. The client sends
temperature 0 and a seed unless told otherwise, retries 408/409/429/5xx answers and connection
errors with tenacity (honouring ``Retry-After`` in seconds or as an HTTP date, and
``retry-after-ms``, both capped), bounds the requests in flight per endpoint across every client of
that endpoint in the process (a bound that adapts to the endpoint's 429 answers:
evalpipe._internal.adaptive), reports token usage and latency per call, and goes through the
response cache (evalpipe.cache) when one is given. API keys are held as secrets: they never appear
in a repr, a log line or an error message.

``ChatClient.complete_structured`` asks for an answer constrained by a JSON schema in the strongest
response format the endpoint takes (``ResponseFormatMode``), remembered per endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import os
import random
import re
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from evalpipe._internal.adaptive import AdaptiveLimit
from evalpipe._internal.retry import TRANSIENT_STATUS, parse_retry_after
from evalpipe.cache import CacheMissError, ResponseCache
from evalpipe.secrets import is_secret_url
from evalpipe.spend import metering

__all__ = [
    "AZURE_DEFAULT_API_VERSION",
    "ENTRA_SCOPE",
    "RESPONSE_FORMAT_MODES",
    "AnswerStore",
    "ChatClient",
    "ChatCompletion",
    "ChatEndpoint",
    "ChatError",
    "ChatHTTPError",
    "ChatResponseError",
    "ChatTransportError",
    "ResponseFormatMode",
    "TokenSource",
    "forget_response_formats",
    "is_format_rejection",
    "run_answers",
    "token_source_for",
]

logger = logging.getLogger("evalpipe.llm")

AZURE_DEFAULT_API_VERSION = "2024-10-21"
"""The Azure OpenAI data-plane API version used with ``azure_deployment`` when none is given."""

ENTRA_SCOPE = "https://cognitiveservices.azure.com/.default"
"""The token scope Azure OpenAI accepts for Entra ID (azure-identity) authentication."""

ResponseFormatMode = Literal["json_schema", "json_object_schema", "json_object", "prompt"]
"""How a structured answer is asked for. ``json_schema``: OpenAI's ``{"type": "json_schema",
"json_schema": {"name", "schema", "strict": true}}`` (OpenAI, Azure OpenAI, vLLM, Ollama).
``json_object_schema``: ``{"type": "json_object", "schema": {...}}`` (llama-cpp-python's server,
which turns the schema into a grammar). ``json_object``: ``{"type": "json_object"}``, any JSON
object. ``prompt``: no ``response_format``; the prompt alone asks for the format."""

RESPONSE_FORMAT_MODES: tuple[ResponseFormatMode, ...] = get_args(ResponseFormatMode)
"""Every mode, strongest first: the order ``complete_structured`` negotiates in by default."""


class ChatEndpoint(BaseModel):
    """Where and how to call an OpenAI-compatible chat-completions endpoint.

    ``base_url`` is the OpenAI-style base URL: requests go to ``{base_url}/chat/completions``
    (Ollama: ``http://localhost:11434/v1``, vLLM: ``http://localhost:8000/v1``, Azure OpenAI v1:
    ``https://<resource>.openai.azure.com/openai/v1``). With ``api_type="azure"`` and
    ``azure_deployment``, ``base_url`` is the resource endpoint and requests go to
    ``/openai/deployments/<deployment>/chat/completions?api-version=...``.
    """

    # An invalid value is never echoed in a validation error: it may be a key.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    base_url: str
    """The endpoint's base URL (see the class docstring)."""
    model: str
    """The model id sent in the request (for Azure v1, the deployment name); part of the cache key."""
    api_key: SecretStr | None = None
    """An API key; prefer ``api_key_env`` so the key stays out of files."""
    api_key_env: str | None = None
    """The environment variable holding the API key (read when a client is made)."""
    api_type: Literal["openai", "azure"] = "openai"
    """``openai``: the key goes in ``Authorization: Bearer``. ``azure``: in the ``api-key`` header."""
    azure_deployment: str | None = None
    """Azure OpenAI deployment name, for the ``/openai/deployments/...`` URL form."""
    api_version: str | None = None
    """Azure ``api-version`` for the deployment URL form (default AZURE_DEFAULT_API_VERSION)."""
    entra: bool = False
    """Authenticate with an Entra ID token from azure-identity's DefaultAzureCredential (when the
    client is not given a credential of its own)."""
    entra_scope: str = ENTRA_SCOPE
    """The scope the Entra token is requested for."""
    timeout: float = Field(default=60.0, gt=0)
    """Seconds to wait for one HTTP attempt."""
    max_concurrency: int = Field(default=8, ge=1)
    """Requests in flight at once to this endpoint, shared by every client of it in the process (the
    smallest asked for wins); with ``adaptive_concurrency``, the most the adapting bound reaches."""
    adaptive_concurrency: bool = True
    """Adapt the requests in flight to the endpoint's 429 answers, between 1 and
    ``max_concurrency`` (starting at 20 or below; see evalpipe._internal.adaptive and
    docs/judges.md); False: ``max_concurrency``, fixed."""
    max_retries: int = Field(default=4, ge=0)
    """Retries after the first attempt on 408/409/429/5xx and connection errors."""
    retry_backoff: float = Field(default=0.5, ge=0)
    """First wait (seconds) when the server gives no Retry-After; it doubles on each retry."""
    max_retry_wait: float = Field(default=60.0, ge=0)
    """Cap on any single wait, Retry-After included."""
    temperature: float | None = 0.0
    """Sampling temperature (None: not sent). Never sent to a reasoning model."""
    seed: int | None = 42
    """Sampling seed (None: not sent). A seed is a provider's promise, so record a cache anyway."""
    is_reasoning_model: bool = False
    """o-series style models: no temperature, ``max_completion_tokens`` instead of ``max_tokens``."""
    headers: dict[str, SecretStr] = Field(default_factory=dict, repr=False)
    """Extra HTTP headers sent with every request (each value a secret: only the request sees
    it)."""

    @field_validator("base_url", mode="before")
    @classmethod
    def _check_url(cls, value: Any) -> Any:
        # A suite's URL with credentials arrives as a SecretStr (evalpipe.secrets.protect).
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if not isinstance(text, str):
            return text  # pydantic's own error
        if is_secret_url(text):
            raise ValueError(
                "base_url carries credentials (a user:password@ part or a key in its query "
                "string); give the URL without them and the key as api_key_env (or api_key, or "
                "a header)"
            )
        if not text.startswith(("http://", "https://")):
            raise ValueError(
                f"base_url must start with http:// or https://, got {text!r} "
                "(for example http://localhost:11434/v1 for Ollama)"
            )
        return text.rstrip("/")

    @model_validator(mode="after")
    def _check_azure(self) -> ChatEndpoint:
        if self.api_type != "azure" and (self.azure_deployment or self.api_version):
            raise ValueError("azure_deployment and api_version need api_type='azure'")
        if self.api_version and not self.azure_deployment:
            raise ValueError(
                "api_version is only used with azure_deployment (the deployment URL form); "
                "Azure's v1 API (base_url .../openai/v1) takes none"
            )
        if self.api_key is not None and self.api_key_env is not None:
            raise ValueError("give api_key or api_key_env, not both")
        _check_auth_header(self, credential=False)
        return self

    @property
    def chat_url(self) -> str:
        """The URL requests are posted to."""
        if self.api_type == "azure" and self.azure_deployment:
            return f"{self.base_url}/openai/deployments/{self.azure_deployment}/chat/completions"
        return f"{self.base_url}/chat/completions"

    @property
    def query_params(self) -> dict[str, str]:
        """URL query parameters (Azure's api-version for the deployment form)."""
        if self.api_type == "azure" and self.azure_deployment:
            return {"api-version": self.api_version or AZURE_DEFAULT_API_VERSION}
        return {}

    def resolve_api_key(self) -> str | None:
        """The API key from ``api_key`` or the ``api_key_env`` variable.

        Raises:
            ValueError: when ``api_key_env`` names a variable that is not set.
        """
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env is not None:
            value = os.environ.get(self.api_key_env)
            if not value:
                raise ValueError(
                    f"api_key_env: environment variable {self.api_key_env} is not set; export "
                    "it or remove api_key_env for an endpoint without authentication"
                )
            return value
        return None


def _check_auth_header(endpoint: ChatEndpoint, *, credential: bool) -> None:
    """A credential header given in ``headers`` and by the endpoint's key (or token) is refused:
    neither silently replaces the other (``credential``: a credential object is given too).

    Raises:
        ValueError: naming the header and both sources, never a value.
    """
    own = "Authorization"
    if credential or endpoint.entra:
        source = f"{'a credential' if credential else 'entra'} (its Entra ID token)"
    elif endpoint.api_key is not None or endpoint.api_key_env is not None:
        source = "api_key" if endpoint.api_key is not None else "api_key_env"
        own = "api-key" if endpoint.api_type == "azure" else "Authorization"
    else:
        return  # the endpoint sends no credential of its own
    clash = next((h for h in endpoint.headers if h.lower() == own.lower()), None)
    if clash is None:
        return
    raise ValueError(
        f"headers.{clash} and {source} would both set the {own} header; give the credential "
        f"once: {source} (sent as {'api-key: <key>' if own == 'api-key' else 'Authorization: Bearer ...'})"
        f" or headers.{clash} (sent exactly as written), not both"
    )


@dataclass
class ChatCompletion:
    """One chat-completions answer, with what it cost."""

    message: dict[str, Any]
    """The first choice's message as the endpoint sent it."""
    finish_reason: str | None
    """Why the model stopped (``stop``, ``length``, ``tool_calls``, ``content_filter``)."""
    usage: dict[str, int] | None
    """input_tokens, output_tokens, total_tokens (as the endpoint reported them)."""
    latency_s: float
    """Wall time of the call, retries included; 0 for a cached answer."""
    cached: bool = False
    """Served from the response cache."""
    key: str | None = None
    """The cache key of the request (None without a cache)."""
    attempts: int = 1
    """HTTP attempts made (0 for a cached answer)."""

    @property
    def content(self) -> str | None:
        """The message text (None when the model sent none)."""
        content = self.message.get("content")
        if isinstance(content, list):
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        return content if isinstance(content, str) else None

    @property
    def refusal(self) -> str | None:
        """The refusal text, when the model refused (OpenAI's ``refusal`` field)."""
        value = self.message.get("refusal")
        return value if isinstance(value, str) and value else None


class ChatError(Exception):
    """A chat-completions call failed."""


class ChatHTTPError(ChatError):
    """The endpoint answered with an HTTP error (after any retries).

    Attributes:
        status: the HTTP status code.
        attempts: attempts made.
        retry_after: seconds the server asked to wait, when it said.
        detail: the endpoint's own error text (from its error body).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        attempts: int = 1,
        retry_after: float | None = None,
        retryable: bool = False,
        detail: str | None = None,
    ) -> None:
        self.status = status
        self.detail = message if detail is None else detail
        self.attempts = attempts
        self.retry_after = retry_after
        self.retryable = retryable
        super().__init__(message)


class ChatTransportError(ChatError):
    """The endpoint could not be reached or the connection broke (after any retries)."""

    retryable = True
    retry_after: float | None = None


class ChatResponseError(ChatError):
    """The endpoint answered 200 with a body that is not a chat completion."""


# What belongs to one event loop (anyio's limiter, an asyncio.Lock), by loop and key: the loop is
# the process's unit of concurrency for async code.
_PER_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, ...], Any]] = (
    weakref.WeakKeyDictionary()
)


def _of_loop(key: tuple[str, ...], make: Callable[[], Any]) -> Any:
    per_loop = _PER_LOOP.setdefault(asyncio.get_running_loop(), {})
    if key not in per_loop:
        per_loop[key] = make()
    return per_loop[key]


class TokenSource:
    """Bearer tokens from an azure-identity credential (sync or async), reused until 5 minutes
    before they expire. One source can serve many clients, so a token is fetched once for all.

    Args:
        credential: an azure-identity credential; None means DefaultAzureCredential, made on the
            first token request.
        scope: the scope tokens are requested for.
    """

    def __init__(self, credential: Any = None, scope: str = ENTRA_SCOPE) -> None:
        self.credential = credential
        self.scope = scope
        self._token: str | None = None
        self._expires_on = 0.0

    def __repr__(self) -> str:
        return f"TokenSource({type(self.credential).__name__}, scope={self.scope!r})"

    async def token(self) -> str:
        """A valid token, fetched when there is none or it expires within 5 minutes."""
        if self._token is not None and self._expires_on - 300 > time.time():
            return self._token
        if self.credential is None:
            from azure.identity import DefaultAzureCredential

            self.credential = DefaultAzureCredential()
        get_token = self.credential.get_token
        if inspect.iscoroutinefunction(get_token):
            access = await get_token(self.scope)
        else:
            access = await asyncio.to_thread(get_token, self.scope)
            if inspect.isawaitable(access):
                access = await access
        self._token = str(access.token)
        self._expires_on = float(access.expires_on)
        return self._token


def token_source_for(endpoint: ChatEndpoint, credential: Any) -> TokenSource | None:
    """The TokenSource a client of ``endpoint`` should use (None: API key or no auth).

    ``credential`` may be an azure-identity credential or a TokenSource to share.
    """
    if isinstance(credential, TokenSource):
        return credential
    if credential is not None or endpoint.entra:
        return TokenSource(credential, endpoint.entra_scope)
    return None


_USAGE_KEYS = {
    "input_tokens": ("prompt_tokens", "input_tokens"),
    "output_tokens": ("completion_tokens", "output_tokens"),
    "total_tokens": ("total_tokens",),
}


def _usage(body: Mapping[str, Any]) -> dict[str, int] | None:
    """input, output and total tokens as the endpoint reported them (total: their sum if absent)."""
    usage = body.get("usage")
    if not isinstance(usage, Mapping):
        return None
    out = {  # type(...) is int: a bool is not a count
        name: found[0]
        for name, keys in _USAGE_KEYS.items()
        if (found := [v for k in keys if type(v := usage.get(k)) is int])
    }
    if out and "total_tokens" not in out:
        out["total_tokens"] = sum(out.values())
    return out or None


def _completion(
    body: Any,
    usage: dict[str, int] | None,
    *,
    attempts: int = 0,
    latency_s: float = 0.0,
    key: str | None = None,
) -> ChatCompletion:
    """The ChatCompletion of a response body (its first choice); ``attempts=0``: a stored answer.

    Raises:
        ChatResponseError: the body is not a chat completion.
    """
    if not isinstance(body, Mapping):
        raise ChatResponseError(f"response is not a JSON object: {str(body)[:200]!r}")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise ChatResponseError(f"response has no choices[0]: {str(dict(body))[:200]!r}")
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise ChatResponseError("response choices[0] has no 'message' object")
    reason = choices[0].get("finish_reason")
    return ChatCompletion(
        message=dict(message),
        finish_reason=reason if isinstance(reason, str) else None,
        usage=usage,
        latency_s=latency_s,
        cached=attempts == 0,
        key=key,
        attempts=attempts,
    )


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(error, Mapping):
        error = error.get("message")
    return (error if isinstance(error, str) else str(body))[:300]


_FORMAT_WORDS = re.compile(
    r"response_format|json_schema|json_object|\bschema\b|structured output|guided_json", re.I
)


_VALIDATION_ERROR = re.compile(r"\s*\d+ validation errors?\b", re.I)
"""The start of a pydantic request-validation message (what llama-cpp-python sends with a 500)."""


def is_format_rejection(exc: BaseException) -> bool:
    """Whether ``exc`` is an endpoint's rejection of the request's ``response_format``.

    That is an HTTP 400 or 422 (415 and 501 too) whose error text names response_format,
    json_schema, json_object or a schema, or a request-validation error naming them whatever its
    status (llama-cpp-python sends its validation errors as 500 ``N validation errors: ...``).
    Transient errors (429, other 5xx, timeouts) and other 4xx answers are not.
    """
    if not isinstance(exc, ChatHTTPError):
        return False
    text = exc.detail
    if _FORMAT_WORDS.search(text) is None:
        return False
    return exc.status in (400, 415, 422, 501) or _VALIDATION_ERROR.match(text) is not None


@dataclass
class _FormatMemory:
    """What one endpoint told about response formats: the modes it rejected, the one it took."""

    rejected: set[ResponseFormatMode] = field(default_factory=set)
    accepted: ResponseFormatMode | None = None


_FORMATS: defaultdict[tuple[str, ...], _FormatMemory] = defaultdict(_FormatMemory)
_FORMATS_LOCK = threading.Lock()


def forget_response_formats() -> None:
    """Forget every endpoint's negotiated response format (the next call negotiates again)."""
    with _FORMATS_LOCK:
        _FORMATS.clear()


class AnswerStore(Protocol):
    """Where a run keeps the answers its requests got, so a resumed run reads them instead of
    asking again (``evalpipe.runner.state.JournalAnswers``: the run directory's journal)."""

    def get(
        self, request: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, int] | None] | None:
        """The stored response body and usage of ``request``, or None."""
        ...

    def put(
        self,
        request: Mapping[str, Any],
        response: Mapping[str, Any],
        usage: Mapping[str, int] | None,
    ) -> None:
        """Keep the answer of ``request``."""
        ...


run_answers: contextvars.ContextVar[AnswerStore | None] = contextvars.ContextVar(
    "evalpipe_run_answers", default=None
)
"""The answers of the run being evaluated (set by the runner while a shard's items are evaluated):
a client without a response cache of its own reads a request's answer from it, and keeps the
answers it gets in it."""


class ChatClient:
    """An async chat-completions client over httpx for one endpoint.

    Use ``async with ChatClient(endpoint) as client`` to keep one connection pool for many calls;
    outside a ``with`` block each ``complete`` call opens and closes its own HTTP client.

    Args:
        endpoint: where to send requests.
        cache: the response cache to consult (None: no cache).
        credential: an azure-identity credential (sync or async) or a TokenSource, for Entra
            tokens; overrides the API key.
        transport: an httpx transport (advanced: proxies, custom TLS).

    Raises:
        ValueError: when ``api_key_env`` names a variable that is not set, or a credential is
            given with an ``Authorization`` header in the endpoint's ``headers``.
    """

    def __init__(
        self,
        endpoint: ChatEndpoint,
        *,
        cache: ResponseCache | None = None,
        credential: Any = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.cache = cache
        self._api_key = endpoint.resolve_api_key()
        self._tokens = token_source_for(endpoint, credential)
        if credential is not None:
            _check_auth_header(endpoint, credential=True)
        self._transport = transport
        self._http: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"ChatClient(base_url={self.endpoint.base_url!r}, model={self.endpoint.model!r})"

    def _new_http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=httpx.Timeout(self.endpoint.timeout),
            transport=self._transport,
            headers={"User-Agent": "evalpipe"},
        )

    async def __aenter__(self) -> ChatClient:
        if self._http is None:
            self._http = self._new_http()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool opened by ``async with``."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        response_format: Mapping[str, Any] | None = None,
        repetition: int = 0,
        extra: Mapping[str, Any] | None = None,
    ) -> ChatCompletion:
        """Send one chat-completions request (through the cache, the bound and the retries).

        In a run's evaluation (see :data:`run_answers` and ``evalpipe.spend.metering``) a client
        without a cache of its own reads the answer the run got earlier, and a request that goes
        out is admitted by the run's budget and counted in its spend.

        ``messages``, ``tools``, ``tool_choice`` and ``response_format`` are in OpenAI's form;
        ``max_tokens`` goes out as ``max_completion_tokens`` to a reasoning model; ``repetition``
        is part of the cache key (each repetition records its own answer); ``extra`` body fields
        are sent as given.

        Raises:
            ChatHTTPError: an HTTP error that is not retried, or the last one after the retries.
            ChatTransportError: the endpoint could not be reached after the retries.
            ChatResponseError: the endpoint's answer is not a chat completion.
            evalpipe.cache.CacheMissError: replay mode and no stored answer.
            evalpipe.spend.BudgetReached: the run's budget is spent (the request was not sent).
        """
        ep = self.endpoint
        optional = {
            "temperature": None if ep.is_reasoning_model else ep.temperature,
            "seed": ep.seed,
            "max_completion_tokens" if ep.is_reasoning_model else "max_tokens": max_tokens,
            "tools": [dict(t) for t in tools] if tools else None,
            "tool_choice": tool_choice,
            "response_format": None if response_format is None else dict(response_format),
        }
        body: dict[str, Any] = {"model": ep.model, "messages": [dict(m) for m in messages]}
        body.update({k: v for k, v in optional.items() if v is not None}, **(extra or {}))
        cache = self.cache if self.cache is not None and self.cache.enabled else None
        key_request = {**body, "repetition": repetition}
        meter = metering.get()
        store = run_answers.get() if cache is None else None
        if store is not None and (held := store.get(key_request)) is not None:
            response, stored_usage = held
            if meter is not None:  # paid by an earlier attempt of this run
                meter.reuse("judge", ep.model, stored_usage)
            return _completion(response, stored_usage)
        if cache is not None and (entry := cache.get(key_request)) is not None:
            usage = dict(entry.usage) if entry.usage is not None else _usage(entry.response)
            return _completion(entry.response, usage, key=entry.key)
        if ep.api_type == "azure" and ep.azure_deployment:
            body.pop("model", None)  # the deployment URL names the model
        admitted = False

        def admit() -> None:
            # once the request holds its slot: a request waiting for one when the budget is
            # spent is never sent (the budget is overshot by the requests in flight only)
            nonlocal admitted
            if meter is not None:
                if not meter.start():
                    raise meter.stop()
                admitted = True

        started = time.perf_counter()
        try:
            # outside ``async with``: one pool for this call and its retries
            pool = self._new_http() if self._http is None else contextlib.nullcontext(self._http)
            async with pool as http:
                raw, attempts = await self._post_with_retries(http, body, admit)
        except BaseException:
            if meter is not None and admitted:
                meter.finish("judge", ep.model, None, answered=False)
            raise
        latency = time.perf_counter() - started
        usage = _usage(raw)
        if meter is not None and admitted:
            meter.finish("judge", ep.model, usage)
        completion = _completion(raw, usage, attempts=attempts, latency_s=latency)
        if store is not None:  # only a completion: a resume asks again after a broken answer
            store.put(key_request, raw, usage)
        if cache is not None:
            stored = await asyncio.to_thread(
                cache.put, key_request, raw, usage=usage, latency_s=latency
            )
            completion.key = stored.key if stored is not None else None
        return completion

    async def complete_structured(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        schema: Mapping[str, Any],
        schema_name: str = "answer",
        grammar_schema: Mapping[str, Any] | None = None,
        modes: Sequence[ResponseFormatMode] = RESPONSE_FORMAT_MODES,
        max_tokens: int | None = None,
        repetition: int = 0,
        extra: Mapping[str, Any] | None = None,
    ) -> tuple[ChatCompletion, ResponseFormatMode]:
        """One request for an answer following ``schema``, in the strongest mode the endpoint takes.

        ``schema`` goes out in the strict ``json_schema`` mode, so it must keep to OpenAI's strict
        subset. ``grammar_schema`` (default: ``schema``) goes out in ``json_object_schema`` mode,
        where llama-cpp-python compiles it into a grammar: it may bound what strict mode cannot
        (``maxLength``), so a small model's answer ends within its token budget.

        Modes are tried in ``modes`` order. A mode the endpoint rejects (see
        ``is_format_rejection``) is remembered for this endpoint (its URL and model) in the
        process and the next mode is tried; the first mode answered is remembered too, and until
        one is, concurrent calls to the endpoint negotiate one at a time. Any other error is
        raised as it is: a 429 or a 5xx never lowers the mode. In replay mode the cache stands for
        the endpoint: a mode with no stored answer is passed over for the next, and only when no
        mode has one is the first mode's CacheMissError raised.

        Returns:
            The completion and the mode that produced it.

        Raises:
            ValueError: for no modes or an unknown one.
            ChatHTTPError: the last rejection when every mode was rejected, or any other HTTP error.
            ChatTransportError, ChatResponseError, evalpipe.cache.CacheMissError: as ``complete``.
        """
        ladder: list[ResponseFormatMode] = list(dict.fromkeys(modes))
        if not ladder:
            raise ValueError("complete_structured needs at least one response format mode")
        formats: dict[ResponseFormatMode, dict[str, Any] | None] = {
            "json_schema": {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": dict(schema), "strict": True},
            },
            "json_object_schema": {
                "type": "json_object",
                "schema": dict(schema if grammar_schema is None else grammar_schema),
            },
            "json_object": {"type": "json_object"},
            "prompt": None,
        }
        if unknown := [m for m in ladder if m not in formats]:  # before any request
            raise ValueError(
                f"unknown response format mode {unknown[0]!r}; use one of {RESPONSE_FORMAT_MODES}"
            )

        async def ask(mode: ResponseFormatMode) -> ChatCompletion:
            return await self.complete(
                messages,
                max_tokens=max_tokens,
                response_format=formats[mode],
                repetition=repetition,
                extra=extra,
            )

        if self.cache is not None and self.cache.mode == "replay":
            return await self._replay_structured(ladder, ask)
        key = (self.endpoint.chat_url, self.endpoint.model)
        with _FORMATS_LOCK:
            memory = _FORMATS[key]
        rejection: ChatHTTPError | None = None
        while True:
            with _FORMATS_LOCK:
                candidates = [m for m in ladder if m not in memory.rejected]
                mode = memory.accepted if memory.accepted in candidates else None
            if not candidates:
                raise rejection or ChatHTTPError(
                    400,
                    f"{self.endpoint.chat_url} rejected every response format asked for "
                    f"({', '.join(ladder)}) earlier in this process",
                )
            # Until the endpoint has taken a format, its callers negotiate one at a time: a
            # hundred concurrent judge calls cost one rejection, not a hundred.
            probe = _of_loop(("probe", *key), asyncio.Lock) if mode is None else None
            async with probe or contextlib.nullcontext():
                if mode is None:
                    with _FORMATS_LOCK:
                        if memory.accepted in candidates or candidates[0] in memory.rejected:
                            continue  # found out while this call waited
                    mode = candidates[0]
                try:
                    completion = await ask(mode)
                except ChatHTTPError as exc:
                    if mode == "prompt" or not is_format_rejection(exc):
                        raise
                    with _FORMATS_LOCK:
                        memory.rejected.add(mode)
                        if memory.accepted == mode:
                            memory.accepted = None
                    logger.info(
                        "%s (model %s) rejected response format %s; trying the next: %s",
                        self.endpoint.chat_url,
                        self.endpoint.model,
                        mode,
                        exc,
                    )
                    rejection = exc
                    continue
                if not completion.cached:  # a stored answer says nothing about today's endpoint
                    with _FORMATS_LOCK:
                        memory.accepted = mode
                return completion, mode

    async def _replay_structured(
        self,
        ladder: list[ResponseFormatMode],
        ask: Callable[[ResponseFormatMode], Awaitable[ChatCompletion]],
    ) -> tuple[ChatCompletion, ResponseFormatMode]:
        assert self.cache is not None
        key = ("replay", str(self.cache.directory), self.endpoint.chat_url, self.endpoint.model)
        with _FORMATS_LOCK:
            memory = _FORMATS[key]
            preferred = memory.accepted
        first_miss: CacheMissError | None = None
        for mode in sorted(ladder, key=lambda m: m != preferred):  # stable: the hit mode first
            try:
                completion = await ask(mode)
            except CacheMissError as exc:
                first_miss = first_miss or exc
                continue
            with _FORMATS_LOCK:
                memory.accepted = mode
            return completion, mode
        assert first_miss is not None
        raise first_miss

    def _wait(self, state: RetryCallState) -> float:
        ep = self.endpoint
        exc = state.outcome.exception() if state.outcome is not None else None
        hinted = getattr(exc, "retry_after", None)
        if isinstance(hinted, int | float):
            wait = min(float(hinted), ep.max_retry_wait)
        else:
            backoff = ep.retry_backoff * 2 ** (state.attempt_number - 1)
            wait = min(backoff + random.uniform(0, backoff * 0.1), ep.max_retry_wait)
        logger.info(
            "chat completion to %s failed (%s); retry %d/%d in %.2fs",
            ep.chat_url,
            exc,
            state.attempt_number,
            ep.max_retries,
            wait,
        )
        return wait

    async def _post_with_retries(
        self,
        http: httpx.AsyncClient,
        body: dict[str, Any],
        admit: Callable[[], None],
    ) -> tuple[dict[str, Any], int]:
        """POST ``body`` with retries, each attempt holding one of the endpoint's slots (one bound
        per endpoint in this loop, shared by its clients); ``admit`` is called when the first
        attempt has its slot (it may refuse by raising)."""
        ep = self.endpoint
        retrying = AsyncRetrying(
            stop=stop_after_attempt(ep.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(lambda exc: bool(getattr(exc, "retryable", False))),
            reraise=True,
        )
        key, adaptive = (ep.chat_url, ep.model), ep.adaptive_concurrency
        limit: AdaptiveLimit = _of_loop(
            ("limit", *key), lambda: AdaptiveLimit(*key, ep.max_concurrency, adaptive=adaptive)
        )
        limit.ask(ep.max_concurrency, adaptive=adaptive)
        attempts = 0
        async for attempt in retrying:
            with attempt:
                attempts = attempt.retry_state.attempt_number
                async with limit.slot() as permit:
                    if attempts == 1:
                        admit()
                    try:
                        raw = await self._post_once(http, body, attempts)
                    except ChatHTTPError as exc:
                        if exc.status == 429:
                            limit.rate_limited(permit, exc.retry_after)
                        raise
                    limit.answered(permit, first_attempt=attempts == 1)
        return raw, attempts

    async def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            **{k: v.get_secret_value() for k, v in self.endpoint.headers.items()},
        }
        if self._tokens is not None:
            headers["Authorization"] = f"Bearer {await self._tokens.token()}"
        elif self._api_key is not None:
            if self.endpoint.api_type == "azure":
                headers["api-key"] = self._api_key
            else:
                headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def _post_once(
        self, http: httpx.AsyncClient, body: dict[str, Any], attempt: int
    ) -> dict[str, Any]:
        ep = self.endpoint
        headers = await self._headers()
        try:
            response = await http.post(
                ep.chat_url, json=body, params=ep.query_params, headers=headers
            )
        except httpx.TransportError as exc:
            raise ChatTransportError(
                f"POST {ep.chat_url} failed after {attempt} attempt(s): "
                f"{type(exc).__name__}: {str(exc) or 'no detail'}"
            ) from None
        if response.status_code >= 400:
            status = response.status_code
            text = _error_text(response)
            forced = response.headers.get("x-should-retry")
            # llama-cpp-python answers a request its schema rejects with a 500 "N validation
            # errors: ..."; the same request fails the same way again, so it is not retried.
            retryable = (status in TRANSIENT_STATUS or status >= 500) and not (
                _VALIDATION_ERROR.match(text)
            )
            if forced in ("true", "false"):
                retryable = forced == "true"
            hint = ""
            if status == 404:
                hint = " (check base_url: it should end in /v1 for OpenAI-compatible servers)"
            elif status in (401, 403):
                hint = " (check the API key, api_type and credential)"
            raise ChatHTTPError(
                status,
                f"POST {ep.chat_url} answered HTTP {status} after {attempt} attempt(s): "
                f"{text}{hint}",
                attempts=attempt,
                retry_after=parse_retry_after(response.headers),
                retryable=retryable,
                detail=text,
            )
        try:
            data = response.json()
        except ValueError:
            raise ChatResponseError(
                f"POST {ep.chat_url} answered HTTP {response.status_code} with a body that is "
                f"not JSON: {response.text[:200]!r}"
            ) from None
        if not isinstance(data, dict):
            raise ChatResponseError(f"POST {ep.chat_url} answered JSON that is not an object")
        return data
