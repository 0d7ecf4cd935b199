"""The evals calls over the OpenAI client of an ``AIProjectClient`` (sync or aio), with our retries.

The SDK's own retries are off (``max_retries=0``): it re-sends POSTs without an idempotency key, so
a create the server committed but answered with a 5xx or a timeout would leave a duplicate eval or
run (shared spec foundry-evals.md §7). evalpipe retries with tenacity instead and, before re-sending
a create whose outcome is unknown, looks for what it tagged (metadata) on the server.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import math
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import openai
from pydantic import BaseModel
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from evalpipe._internal.retry import is_transient, retry_after, status_of

__all__ = ["EvalsApi", "RetryPolicy"]

logger = logging.getLogger("evalpipe.foundry")

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How each evals call is retried: exponential backoff (each wait 75-100% of its step), or the
    server's delay."""

    max_retries: int = 5
    """Retries after the first attempt (0: never retry)."""
    initial_delay: float = 0.5
    """The first backoff, in seconds; it doubles per retry."""
    max_delay: float = 30.0
    """The longest backoff between two attempts."""
    max_retry_after: float = 120.0
    """A server delay longer than this is not waited for: the call fails instead."""

    def wait(self, state: RetryCallState) -> float:
        """Seconds to sleep before the next attempt."""
        exc = state.outcome.exception() if state.outcome is not None else None
        requested = retry_after(exc, math.inf) if exc is not None else None
        if requested is not None:
            return requested
        backoff = min(self.initial_delay * 2.0 ** (state.attempt_number - 1), self.max_delay)
        return backoff * random.uniform(0.75, 1.0)

    def should_retry(self, exc: BaseException) -> bool:
        """Retryable, and any server-requested delay is within ``max_retry_after``."""
        requested = retry_after(exc, math.inf)
        return is_transient(exc) and (requested is None or requested <= self.max_retry_after)

    def retrying(self, what: str) -> AsyncRetrying:
        """A tenacity loop for one call; each retry is logged with what is retried."""

        def log(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            logger.info(
                "Foundry %s failed (attempt %d): %s; retrying in %.2fs",
                what,
                state.attempt_number,
                exc,
                state.upcoming_sleep,
            )

        return AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self.wait,
            retry=retry_if_exception(self.should_retry),
            before_sleep=log,
            reraise=True,
        )


_FIELDS = (
    # evals, runs, pages
    "id", "name", "status", "error", "code", "message", "metadata", "report_url",
    "result_counts", "per_testing_criteria_results", "testing_criteria", "evaluator_name",
    "data_source_config", "data", "has_more", "total", "passed", "failed", "errored",
    # output items and their results
    "datasource_item_id", "datasource_item", "results", "sample", "type", "metric", "score",
    "label", "reason", "threshold", "properties", "dimension_scores", "rubric_scores",
    "applicable", "weight", "usage", "prompt_tokens", "completion_tokens", "total_tokens",
    "cached_tokens", "input_tokens", "output_tokens", "input", "output", "role", "content",
    "query", "response", "trace_id", "agent_id", "resp_id", "response_id",
)  # fmt: skip
"""Every field evalpipe reads from an evals answer (read by attribute from objects that are neither
a mapping nor a pydantic model)."""

_MISSING = object()
_MAX_DEPTH = 32


def _attribute(obj: Any, name: str) -> Any:
    """``obj.name`` when it is the object's own: an instance attribute, a dataclass field or slot,
    or a property of its class; else ``_MISSING``. Attributes made up on access by ``__getattr__``
    (a ``MagicMock``'s children that nobody set) are not data."""
    own = getattr(obj, "__dict__", None)
    if isinstance(own, dict) and name in own:
        return own[name]
    if hasattr(type(obj), name):
        value = getattr(obj, name, _MISSING)
        return _MISSING if callable(value) else value
    return _MISSING


def plain(obj: Any, _depth: int = 0) -> Any:
    """An evals answer as plain dicts and lists, read the way MAF reads it: a mapping (an
    azure-ai-agents model too) is copied, an openai model is its ``to_dict()``, another pydantic
    model its ``model_dump()``; any other object (a dataclass, a user's ``MagicMock`` double) is
    read by attribute, each of the fields evalpipe uses that it has of its own (``_attribute``):
    a bare ``MagicMock()`` reads as ``{}``."""
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    if _depth > _MAX_DEPTH:
        return None
    if isinstance(obj, Mapping):
        return {str(k): plain(v, _depth + 1) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v, _depth + 1) for v in obj]
    if isinstance(obj, openai.BaseModel):
        # Foundry's criteria are not in openai's grader union: skip pydantic's warnings about it.
        return obj.to_dict(warnings=False)
    if isinstance(obj, BaseModel):
        return obj.model_dump(warnings=False)
    out: dict[str, Any] = {}
    for name in _FIELDS:
        value = _attribute(obj, name)
        if value is not _MISSING:
            out[name] = plain(value, _depth + 1)
    return out


def _as_dict(obj: Any, what: str = "answer") -> dict[str, Any]:
    """An evals answer that is one object (an eval, a run, an output item) as a dict."""
    value = plain(obj)
    if not isinstance(value, dict):
        raise TypeError(f"the {what} is not an object: {type(obj).__name__}")
    return value


async def _page_of(page: Any) -> tuple[list[Any], bool]:
    """The elements of a list answer and its ``has_more`` (not said: whether it has elements).

    A page (``.data`` / ``["data"]``) is read as it is; a plain list, or an iterator that pages by
    itself (the SDK's auto-paginating ``AsyncPaginator`` when not awaited, a user's async
    iterable double), is read to its end and has no more.
    """
    if isinstance(page, list | tuple):
        return list(page), False
    data = page.get("data") if isinstance(page, Mapping) else _attribute(page, "data")
    if isinstance(data, list | tuple):
        more = page.get("has_more") if isinstance(page, Mapping) else _attribute(page, "has_more")
        return list(data), more if isinstance(more, bool) else bool(data)
    if hasattr(page, "__aiter__"):
        return [x async for x in page], False
    if isinstance(page, Iterable) and not isinstance(page, str | bytes | Mapping):
        return list(page), False
    return [], False


class EvalsApi:
    """The OpenAI evals operations evalpipe uses, awaitable for a sync or an async client.

    Whatever a client method returns is awaited when it is awaitable, so the sync SDK, the aio SDK,
    MAF's ``FoundryChatClient``'s client and a user's ``MagicMock`` client with ``AsyncMock``
    methods all work. A sync method (the sync SDK's) runs in a worker thread; list calls read one
    page at a time so a failing page is retried alone. Answers are plain dicts (:func:`plain`).
    """

    def __init__(self, client: Any, policy: RetryPolicy) -> None:
        self.client = client
        self.policy = policy
        self.is_async = isinstance(client, openai.AsyncOpenAI)

    async def _call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        if self.is_async or inspect.iscoroutinefunction(fn):
            result = fn(*args, **kwargs)
        else:
            result = await asyncio.to_thread(fn, *args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _retry(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        async for attempt in self.policy.retrying(what):
            with attempt:
                return await call()
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    async def _object(
        self, what: str, fn: Callable[..., Any], /, *args: Any, **kw: Any
    ) -> dict[str, Any]:
        return _as_dict(await self._call(fn, *args, **kw), what)

    async def _get(
        self, what: str, fn: Callable[..., Any], /, *args: Any, **kw: Any
    ) -> dict[str, Any]:
        """One object, with retries."""
        return await self._retry(what, lambda: self._object(what, fn, *args, **kw))

    async def _create(
        self,
        kind: str,
        listing: Callable[..., Any],
        fn: Callable[..., Any],
        /,
        *args: Any,
        resume: bool,
        **body: Any,
    ) -> dict[str, Any]:
        """POST an eval or run (``kind``) at most once, with retries: after a failure whose
        outcome is unknown (and first, with ``resume``), the newest live one tagged with its
        ``evalpipe_key`` among the most recent thousand (``listing``) is taken instead.

        Raises:
            RuntimeError: when the answer has no id.
        """
        key = body["metadata"]["evalpipe_key"]
        what = f"{kind} create"
        unknown = resume

        async def find() -> dict[str, Any] | None:
            found = await self.list_all(
                f"{kind} list", listing, *args, limit=100, order="desc", max_pages=10
            )
            for element in found:
                tag = (element.get("metadata") or {}).get("evalpipe_key")
                if tag == key and element.get("status") not in ("failed", "canceled", "cancelled"):
                    return element
            return None

        async def once() -> dict[str, Any]:
            nonlocal unknown
            if unknown and (found := await find()) is not None:
                logger.info("Foundry %s: found the one already created", what)
                return found
            try:
                answer = await self._object(what, fn, *args, **body)
            except BaseException as exc:
                # the server may have committed it (a transient failure, but not a 429)
                unknown = unknown or (status_of(exc) != 429 and is_transient(exc))
                raise
            if answer.get("id") in (None, ""):
                raise RuntimeError(f"the {what} answer has no id: {answer!r}")
            return answer

        return await self._retry(what, once)

    async def create_eval(self, *, resume: bool, **body: Any) -> dict[str, Any]:
        """POST /evals at most once (see ``_create``)."""
        evals = self.client.evals
        return await self._create("eval", evals.list, evals.create, resume=resume, **body)

    async def create_run(self, eval_id: str, *, resume: bool, **body: Any) -> dict[str, Any]:
        """POST /evals/{eval_id}/runs at most once (see ``_create``)."""
        runs = self.client.evals.runs
        return await self._create(
            "run", runs.list, runs.create, eval_id, resume=resume, extra_body=None, **body
        )

    async def retrieve_run(self, eval_id: str, run_id: str) -> dict[str, Any]:
        return await self._get(
            "run retrieve", self.client.evals.runs.retrieve, run_id, eval_id=eval_id
        )

    async def retrieve_eval(self, eval_id: str) -> dict[str, Any]:
        return await self._get("eval retrieve", self.client.evals.retrieve, eval_id)

    async def cancel_run(self, eval_id: str, run_id: str) -> dict[str, Any]:
        """POST a run's cancel (idempotent: retried)."""
        return await self._get("run cancel", self.client.evals.runs.cancel, run_id, eval_id=eval_id)

    async def list_all(
        self,
        what: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        max_pages: int | None = None,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """Every element of a cursor-paginated list, following ``after`` = the last element's id."""
        out: list[dict[str, Any]] = []
        after: dict[str, str] = {}

        async def page() -> tuple[list[dict[str, Any]], bool]:
            elements, has_more = await _page_of(await self._call(fn, *args, **kwargs, **after))
            return [_as_dict(x, what) for x in elements], has_more

        for pages in itertools.count(1):
            data, has_more = await self._retry(what, page)
            out.extend(data)
            last = data[-1].get("id") if data else None
            if last is None or not has_more or (max_pages is not None and pages >= max_pages):
                break
            after = {"after": str(last)}
        return out

    async def list_output_items(self, eval_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every output item of a run (all pages)."""
        return await self.list_all(
            "output items list",
            self.client.evals.runs.output_items.list,
            run_id,
            eval_id=eval_id,
            limit=100,
        )
