"""FoundryEvals (batches, retries, polling, cancel on timeout), its suite form FoundryConfig, and
MAF's ``evaluate_traces`` and ``evaluate_foundry_target``, which score data the service stores or
produces; see docs/foundry.md."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import json
import logging
import os
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Literal, get_args

import openai
from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalpipe._internal.env import FOUNDRY_ENDPOINT_ENV
from evalpipe._internal.imports import load_object
from evalpipe._internal.retry import is_transient
from evalpipe.evaluators.base import BatchedEvaluator
from evalpipe.foundry import _evaluators as ev
from evalpipe.foundry._client import EvalsApi, RetryPolicy
from evalpipe.foundry._convert import item_to_foundry
from evalpipe.foundry._evaluators import EvaluatorSpec, GeneratedEvaluatorRef, MatchingMode
from evalpipe.foundry._results import PROVIDER, error_of, errored_item, item_result
from evalpipe.items import ConversationSplit, EvalItem
from evalpipe.messages import Message
from evalpipe.results import EvalItemResult, EvalResults
from evalpipe.tally import make_results, merge_results

__all__ = [
    "ENDPOINT_ENV",
    "FoundryConfig",
    "FoundryEvals",
    "evaluate_foundry_target",
    "evaluate_traces",
]

logger = logging.getLogger("evalpipe.foundry")

ENDPOINT_ENV = FOUNDRY_ENDPOINT_ENV
"""The environment variable read for the project endpoint when none is passed (after MAF's)."""

_TERMINAL = frozenset({"completed", "failed", "canceled", "cancelled"})
_MISSING_CODES = {"timeout": "Timeout", "failed": "RunFailed", "canceled": "RunCanceled"}


def _item_id(item: EvalItem, index: int) -> str:
    return item.item_id if item.item_id is not None else str(index)


def _index(value: Any) -> int | None:
    """A datasource_item_id as an int (the service may send it as a string)."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class FoundryEvals(BatchedEvaluator):
    """Scores items with Microsoft Foundry's built-in (or your generated) evaluators.

    The OpenAI client the evals calls go through is resolved as MAF does (``client``, else
    ``project_client``, else ``endpoint``), with its own retries off: evalpipe retries (see
    docs/foundry.md).

    Args:
        project_client: An ``azure.ai.projects`` ``AIProjectClient``, sync or aio.
        client: MAF's ``FoundryChatClient`` (its ``.client`` is used, and its ``model`` when
            ``model`` is omitted), or an ``openai.AsyncOpenAI`` / ``OpenAI`` client pointed at
            the project. Wins over ``project_client`` when both are given, as in MAF. evalpipe
            never closes it.
        endpoint: The project endpoint, used when no client is given (default: the
            ``FOUNDRY_PROJECT_ENDPOINT`` environment variable, MAF's, then
            ``AZURE_AI_PROJECT_ENDPOINT``).
        credential: The credential for ``endpoint`` (default: ``DefaultAzureCredential``). An
            async credential gives the aio client, a sync one the sync client.
        model: The judge model's deployment name in the project (default: ``client``'s model;
            without a client, ``FOUNDRY_MODEL``, then ``"gpt-4o"`` as MAF).
        evaluators: Evaluator names (see the constants), ``builtin.<name>`` ids or
            ``GeneratedEvaluatorRef``s. None: relevance, coherence, task_adherence, plus
            tool_call_accuracy when any item has tools.
        conversation_split: Split used for items without their own strategy (default LAST_TURN).
        poll_interval: First wait between two polls of a run, in seconds; it doubles per poll.
        max_poll_interval: The longest wait between two polls.
        timeout: Seconds a run may take from its creation; then it is canceled on the server.
        batch_size: Items per run.
        max_concurrent_runs: Runs of one evaluation in flight at once.
        max_retries: Retries per HTTP call (408, 409, 425, 429, 5xx, connection errors).
        retry_initial_delay: First backoff between retries, in seconds (doubles, with jitter).
        retry_max_delay: The longest backoff between retries.
        max_retry_after: A server-requested delay longer than this fails the call instead.
        request_timeout: Seconds one HTTP request may take.
        matching_mode: How task_navigation_efficiency compares tool calls.

    Raises:
        ValueError: for an unknown evaluator name (listing the valid ones), a missing model or
            endpoint, or an out-of-range setting.
        TypeError: for a ``client`` or ``project_client`` that is not one.
    """

    name = PROVIDER

    INTENT_RESOLUTION: ClassVar[str] = ev.INTENT_RESOLUTION
    TASK_ADHERENCE: ClassVar[str] = ev.TASK_ADHERENCE
    TASK_COMPLETION: ClassVar[str] = ev.TASK_COMPLETION
    TASK_NAVIGATION_EFFICIENCY: ClassVar[str] = ev.TASK_NAVIGATION_EFFICIENCY
    TOOL_CALL_ACCURACY: ClassVar[str] = ev.TOOL_CALL_ACCURACY
    TOOL_SELECTION: ClassVar[str] = ev.TOOL_SELECTION
    TOOL_INPUT_ACCURACY: ClassVar[str] = ev.TOOL_INPUT_ACCURACY
    TOOL_OUTPUT_UTILIZATION: ClassVar[str] = ev.TOOL_OUTPUT_UTILIZATION
    TOOL_CALL_SUCCESS: ClassVar[str] = ev.TOOL_CALL_SUCCESS
    COHERENCE: ClassVar[str] = ev.COHERENCE
    FLUENCY: ClassVar[str] = ev.FLUENCY
    RELEVANCE: ClassVar[str] = ev.RELEVANCE
    GROUNDEDNESS: ClassVar[str] = ev.GROUNDEDNESS
    RESPONSE_COMPLETENESS: ClassVar[str] = ev.RESPONSE_COMPLETENESS
    SIMILARITY: ClassVar[str] = ev.SIMILARITY
    VIOLENCE: ClassVar[str] = ev.VIOLENCE
    SEXUAL: ClassVar[str] = ev.SEXUAL
    SELF_HARM: ClassVar[str] = ev.SELF_HARM
    HATE_UNFAIRNESS: ClassVar[str] = ev.HATE_UNFAIRNESS
    OUTPUT_QUALITY: ClassVar[str] = ev.OUTPUT_QUALITY
    TOOL_USE_QUALITY: ClassVar[str] = ev.TOOL_USE_QUALITY

    def __init__(
        self,
        project_client: Any = None,
        *,
        client: Any = None,
        endpoint: str | None = None,
        credential: Any = None,
        model: str | None = None,
        evaluators: Sequence[str | GeneratedEvaluatorRef] | None = None,
        conversation_split: Any = None,
        poll_interval: float = 1.0,
        max_poll_interval: float = 10.0,
        timeout: float = 600.0,
        batch_size: int = 500,
        max_concurrent_runs: int = 4,
        max_retries: int = 5,
        retry_initial_delay: float = 0.5,
        retry_max_delay: float = 30.0,
        max_retry_after: float = 120.0,
        request_timeout: float = 60.0,
        matching_mode: MatchingMode = "exact_match",
    ) -> None:
        split, modes = conversation_split, get_args(MatchingMode)
        for label, value, ok, rule in (
            ("poll_interval", poll_interval, poll_interval > 0, "> 0"),
            ("max_poll_interval", max_poll_interval, max_poll_interval > 0, "> 0"),
            ("timeout", timeout, timeout > 0, "> 0"),
            ("request_timeout", request_timeout, request_timeout > 0, "> 0"),
            ("batch_size", batch_size, batch_size >= 1, ">= 1"),
            ("max_concurrent_runs", max_concurrent_runs, max_concurrent_runs >= 1, ">= 1"),
            ("max_retries", max_retries, max_retries >= 0, ">= 0"),
            ("matching_mode", matching_mode, matching_mode in modes, f"one of {', '.join(modes)}"),
            (
                "conversation_split",
                split,
                split is None or callable(split),
                "a ConversationSplit member or a callable",
            ),
        ):
            if not ok:
                raise ValueError(f"{label} must be {rule}, got {value!r}.")
        self._specs = ev.validate_evaluators(evaluators)
        self.conversation_split = conversation_split
        self.poll_interval = poll_interval
        self.max_poll_interval = max(max_poll_interval, poll_interval)
        self.timeout = timeout
        self.batch_size = batch_size
        self.max_concurrent_runs = max_concurrent_runs
        self.request_timeout = request_timeout
        self.matching_mode: MatchingMode = matching_mode
        self.retry_policy = RetryPolicy(
            max_retries=max_retries,
            initial_delay=retry_initial_delay,
            max_delay=retry_max_delay,
            max_retry_after=max_retry_after,
        )
        self._owned_project: Any = None
        self._apis: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], EvalsApi]] = {}
        self._criteria: dict[str, list[EvaluatorSpec]] = {}
        if client is not None:
            openai_client, client_model = _from_client(client)
            self.project_client: Any = getattr(client, "project_client", None)
            # The caller's client: used on every event loop, never closed here. Only a real
            # openai client gets our options: with_options of a test double is another double,
            # without the methods the caller set up on this one.
            self._client: Any = (
                openai_client.with_options(max_retries=0, timeout=request_timeout)
                if issubclass(type(openai_client), openai.OpenAI | openai.AsyncOpenAI)
                else openai_client
            )
            self._client_owned = False
            model = model or client_model
        else:
            if project_client is None:
                endpoint = (
                    endpoint
                    or os.environ.get("FOUNDRY_PROJECT_ENDPOINT")  # MAF's, read first
                    or os.environ.get(ENDPOINT_ENV)
                )
                if not endpoint:
                    raise ValueError(
                        "Either 'project_endpoint' or 'project_client' is required. Pass "
                        "client= (a FoundryChatClient), project_client= (an azure.ai.projects "
                        "AIProjectClient) or endpoint=, or set FOUNDRY_PROJECT_ENDPOINT (or "
                        f"{ENDPOINT_ENV}) to the project endpoint "
                        "(https://<resource>.services.ai.azure.com/api/projects/<project>)."
                    )
                project_client = self._owned_project = _project_client(endpoint, credential)
                model = model or os.environ.get("FOUNDRY_MODEL") or "gpt-4o"  # as MAF
            elif not hasattr(project_client, "get_openai_client"):
                raise TypeError(
                    "project_client must be an azure.ai.projects AIProjectClient (sync or aio), "
                    f"got {type(project_client).__name__}"
                )
            self.project_client = project_client
            self._client = self._openai_from_project()
            self._client_owned = True
        if not model:
            raise ValueError(
                "Model is required. Pass model= (the judge model's deployment name in the project) "
                "explicitly or use a FoundryChatClient that has a model configured."
            )
        self.model: str = model
        self._client_claimed = False

    def _openai_from_project(self) -> Any:
        """A fresh OpenAI client from the project client (SDK retries off)."""
        found = self.project_client.get_openai_client(max_retries=0, timeout=self.request_timeout)
        if found is None:
            raise ValueError(
                "project_client.get_openai_client() returned None. Check project configuration."
            )
        return found

    def __repr__(self) -> str:
        return f"FoundryEvals(model={self.model!r}, evaluators={self.evaluators or 'default'})"

    @property
    def evaluators(self) -> list[str] | None:
        """The configured criterion names (None: the defaults, decided per evaluation)."""
        return [s.name for s in self._specs] if self._specs is not None else None

    @property
    def metric_names(self) -> list[str] | None:
        """The metrics results carry: each criterion and a composite's components (None with the
        default set, which depends on the items)."""
        if self._specs is None:
            return None
        return [n for s in self._specs for n in (s.name, *s.components)]

    def _api(self) -> EvalsApi:
        """The evals calls for the running event loop.

        The OpenAI client resolved at construction serves the first loop that uses it; a sync
        client, or one the caller passed, serves every loop. An async client's connections
        belong to one event loop, so any other loop gets a client of its own from the project
        client (held by a weak reference to its loop: a new loop never reuses a dead loop's).
        """
        loop = asyncio.get_running_loop()
        entry = self._apis.get(id(loop))
        if entry is not None and entry[0]() is loop:
            return entry[1]
        client = self._client
        per_loop = self._client_owned and (client is None or isinstance(client, openai.AsyncOpenAI))
        if per_loop:
            if client is None or self._client_claimed:
                client = self._openai_from_project()
            self._client_claimed = True
        api = EvalsApi(client, self.retry_policy)
        self._apis[id(loop)] = (weakref.ref(loop), api)
        return api

    async def aclose(self) -> None:
        """Close the OpenAI clients this object opened, and the project client it built itself
        (a ``client=`` the caller passed is left open). Used again, it opens new ones."""
        entries, self._apis = list(self._apis.values()), {}
        loop = asyncio.get_running_loop()
        closing: list[Any] = []
        if self._client_owned:
            # by id: a sync client serves every loop, and is closed once
            owned = {id(api.client): (ref(), api.client) for ref, api in entries}
            if not self._client_claimed and self._client is not None:
                owned[id(self._client)] = (loop, self._client)  # resolved but never used
            self._client, self._client_claimed = None, False
            # an async client opened on another (possibly closed) loop cannot be closed here
            closing = [
                client
                for client_loop, client in owned.values()
                if client_loop is loop or not isinstance(client, openai.AsyncOpenAI)
            ]
        if self._owned_project is not None:
            closing.append(self._owned_project)
        for obj in closing:
            closed = obj.close()
            if inspect.isawaitable(closed):
                await closed

    # -- batch-level entry points (the Prefect flow runs one batch per task) -----------------

    def criteria_for(self, items: Sequence[EvalItem]) -> list[EvaluatorSpec]:
        """The evaluators these items get (defaults and tool filtering applied)."""
        return ev.resolve_evaluators(self._specs, any_tools=any(i.tools for i in items))

    async def _new_eval(
        self,
        name: str,
        source_config: dict[str, Any],
        specs: list[EvaluatorSpec],
        any_tools: bool | None,
        kind: str,
        key: str | None = None,
    ) -> str:
        """Create the eval of ``specs`` (see ``create_eval``) and remember its criteria."""
        tag = key or uuid.uuid4().hex
        body = {
            "name": name,
            "data_source_config": source_config,
            "testing_criteria": ev.build_criteria(
                specs, model=self.model, any_tools=any_tools, matching_mode=self.matching_mode
            ),
            "metadata": {"evalpipe_key": tag, "evalpipe_kind": kind},
        }
        eval_id = str((await self._api().create_eval(resume=key is not None, **body))["id"])
        self._criteria[eval_id] = specs
        return eval_id

    async def create_eval(
        self, items: Sequence[EvalItem], *, eval_name: str, key: str | None = None
    ) -> str:
        """Create the eval for the evaluator set ``items`` need; returns its id.

        The eval is tagged with ``key`` in its metadata (a fresh one when None). A retry after a
        failure whose outcome is unknown first looks for the tagged eval; with an explicit
        ``key``, an eval already tagged with it is reused without creating anything.

        Raises:
            ValueError: when every requested evaluator needs tools and no item has any.
            openai.APIError: when the service refuses or keeps failing after the retries.
        """
        specs = self.criteria_for(items)
        schema = ev.item_schema(specs, items)
        config = {"type": "custom", "item_schema": schema, "include_sample_schema": True}
        any_tools = any(i.tools for i in items)
        return await self._new_eval(eval_name, config, specs, any_tools, "FoundryEvals", key)

    async def _specs_of(self, eval_id: str) -> list[EvaluatorSpec]:
        specs = self._criteria.get(eval_id)
        if specs is None:
            found = await self._api().retrieve_eval(eval_id)
            specs = [
                EvaluatorSpec(
                    str(c.get("name")),
                    str(c.get("evaluator_name") or c.get("name")),
                    str(c.get("evaluator_name") or "").removeprefix("builtin.") or None,
                )
                for c in found.get("testing_criteria") or []
                if isinstance(c, dict)
            ]
            self._criteria[eval_id] = specs
        return specs

    async def run_batch(
        self,
        eval_id: str,
        items: Sequence[EvalItem],
        *,
        eval_name: str,
        batch_index: int = 0,
        run_name: str | None = None,
    ) -> EvalResults:
        """Run one batch: create the run, poll it, collect its output items, cancel on timeout.

        Never raises for a run-level or item-level fault: the result's status is ``completed``,
        ``failed``, ``timeout``, ``canceled`` or ``partial``, and every item without an output is
        errored (``Timeout``, ``RunFailed``, ``RunCanceled``, ``MissingOutput``, ``FoundryError``).
        A run already created for the same eval, batch and content (tagged in its metadata) is
        resumed instead of created again.

        ``batch_index`` tags the run and numbers items without an id from ``batch_index *
        batch_size``; the run is named ``run_name``, default ``"{eval_name} Run"`` plus the batch
        number.
        """
        ids = [_item_id(item, batch_index * self.batch_size + i) for i, item in enumerate(items)]
        out: list[EvalItemResult | None] = [None] * len(items)
        try:
            specs = await self._specs_of(eval_id)
        except Exception as exc:
            reason = _error_text(exc)
            return _finish(items, ids, out, [], "failed", reason, "FoundryError", eval_id=eval_id)
        with_actions = any(s.short == ev.TASK_NAVIGATION_EFFICIENCY for s in specs)
        content: list[dict[str, Any]] = []
        sent: list[int] = []
        for i, item in enumerate(items):
            if item.error_code:
                out[i] = errored_item(
                    item, ids[i], item.error_code, item.error_message or item.error_code
                )
                continue
            try:
                data = item_to_foundry(
                    item, split=self.conversation_split, with_actions=with_actions
                )
            except Exception as exc:
                out[i] = errored_item(item, ids[i], "ConversionError", _error_text(exc))
                continue
            content.append({"item": data})
            sent.append(i)
        if not content:
            return _finish(
                items, ids, out, specs, "completed", None, "MissingOutput", eval_id=eval_id
            )
        body: dict[str, Any] = {
            "name": run_name
            or (f"{eval_name} Run" + (f" {batch_index + 1}" if batch_index else "")),
            "data_source": {
                "type": "jsonl",
                "source": {"type": "file_content", "content": content},
            },
            "metadata": {
                "evalpipe_key": _digest([eval_id, batch_index, content]),
                "evalpipe_batch": str(batch_index),
                "evalpipe_items": str(len(content)),
            },
        }
        status, error, missing, outputs, where = await self._execute(eval_id, body, resume=True)
        for index, oi in _matched(outputs, len(sent)):
            i = sent[index]
            try:
                out[i] = item_result(oi, items[i], ids[i], specs)
            except Exception as exc:
                out[i] = errored_item(items[i], ids[i], "OutputParseError", _error_text(exc))
        return _finish(items, ids, out, specs, status, error, missing, **where)

    async def _execute(
        self, eval_id: str, body: dict[str, Any], *, resume: bool
    ) -> tuple[str, str | None, str, list[dict[str, Any]], dict[str, Any]]:
        """Create a run (with ``resume``, first look for the one tagged with its key), poll it to
        its end and read its output items.

        Returns (status, error, the error code for items with no output, output items, the
        result's ``eval_id``/``run_id``/``report_url``). A run that times out is canceled on the
        server; a caller that gives up (a task timeout, Ctrl-C) cancels it too, so it stops
        costing money. Output items that cannot be read make a completed run ``partial``.
        """
        api = self._api()
        where: dict[str, Any] = {"eval_id": eval_id}
        started = asyncio.get_running_loop().time()
        try:
            run = await api.create_run(eval_id, resume=resume, **body)
        except Exception as exc:
            return "failed", _error_text(exc), "FoundryError", [], where
        run_id = where["run_id"] = str(run["id"])
        logger.info("Foundry run %s (eval %s): %s", run_id, eval_id, body["name"])
        try:
            status, error, last = await self._poll(api, eval_id, run, started)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(api.cancel_run(eval_id, run_id), timeout=10)
            raise
        if status == "timeout":
            error = f"run did not finish within {self.timeout:g}s; "
            try:
                await api.cancel_run(eval_id, run_id)
                error += "canceled on the server"
            except Exception as exc:
                error += f"cancel failed: {_error_text(exc)}"
        missing = _MISSING_CODES.get(status, "MissingOutput")
        try:
            outputs = await api.list_output_items(eval_id, run_id)
        except Exception as exc:
            outputs = []
            if status == "completed":
                status, missing = "partial", "FoundryError"
            text = f"could not read output items: {_error_text(exc)}"
            error = f"{error}; {text}" if error else text
        where["report_url"] = last.get("report_url") or run.get("report_url")
        return status, error, missing, outputs, where

    async def _poll(
        self, api: EvalsApi, eval_id: str, run: dict[str, Any], started: float
    ) -> tuple[str, str | None, dict[str, Any]]:
        """Poll until a terminal status or the timeout: ``(status, error text, the run as last
        read)``. A create answer without a status (a test double's) is retrieved at once."""
        loop = asyncio.get_running_loop()
        deadline = started + self.timeout
        interval = self.poll_interval
        last_error: str | None = None
        wait = bool(run.get("status"))
        while True:
            status = str(run.get("status") or "")
            if status in _TERMINAL:
                code, message = error_of(run.get("error"))
                error = (message or code or "the run failed") if status == "failed" else None
                return ("canceled" if status == "cancelled" else status), error, run
            remaining = deadline - loop.time()
            if remaining <= 0:
                return "timeout", last_error, run
            if wait:
                await asyncio.sleep(min(interval, remaining))
                interval = min(interval * 2, self.max_poll_interval)
            wait = True
            try:
                run = {"id": run["id"], **await api.retrieve_run(eval_id, str(run["id"]))}
            except Exception as exc:
                if not is_transient(exc) and isinstance(exc, openai.APIStatusError):
                    return "failed", f"polling the run failed: {_error_text(exc)}", run
                last_error = f"last poll failed: {_error_text(exc)}"

    merge = staticmethod(merge_results)
    """Combine the batch results of one eval (items in the given order, counts summed)."""

    # -- the Evaluator protocol -------------------------------------------------------------

    async def evaluate(
        self, items: Sequence[EvalItem], *, eval_name: str = "evalpipe Foundry Eval"
    ) -> EvalResults:
        """Evaluate ``items``: one eval, one run per ``batch_size`` items, runs concurrent.

        Items come back in input order. A service fault never raises: an eval that cannot be
        created gives a ``failed`` result with every item errored (``FoundryError``).

        Raises:
            ValueError: when every requested evaluator needs tools and no item has any.
        """
        items = list(items)
        if not items:
            return make_results(PROVIDER, [])
        try:
            eval_id = await self.create_eval(items, eval_name=eval_name)
        except ValueError:
            raise
        except Exception as exc:
            return _not_created(items, self.criteria_for(items), exc)
        batches = [items[i : i + self.batch_size] for i in range(0, len(items), self.batch_size)]
        semaphore = asyncio.Semaphore(self.max_concurrent_runs)

        async def one(index: int, batch: list[EvalItem]) -> EvalResults:
            run_name = f"{eval_name} Run" + (
                f" {index + 1}/{len(batches)}" if len(batches) > 1 else ""
            )
            async with semaphore:
                return await self.run_batch(
                    eval_id,
                    batch,
                    eval_name=eval_name,
                    batch_index=index,
                    run_name=run_name,
                )

        results = await asyncio.gather(*(one(k, b) for k, b in enumerate(batches)))
        return self.merge(results)

    # -- server-side data: stored responses, agent traces, hosted targets (MAF's functions) --

    async def evaluate_traces(
        self,
        *,
        response_ids: Sequence[str] | None = None,
        trace_ids: Sequence[str] | None = None,
        agent_id: str | None = None,
        lookback_hours: float = 24,
        eval_name: str = "evalpipe Trace Eval",
    ) -> EvalResults:
        """Score what Foundry already stored, without sending any conversation (the data sources
        sent are in docs/foundry.md).

        With ``response_ids``: one item per response id, in the order given (item id = the
        response id). With ``agent_id`` and/or ``trace_ids``: one item per trace the service
        selected in the last ``lookback_hours`` (item id = its trace id). The evaluators are the
        configured ones as they are (default relevance, coherence, task_adherence). Results have
        the shape and fault handling of ``evaluate``.

        Raises:
            ValueError: for no source (MAF's message), both sources, or ``lookback_hours <= 0``.
        """
        ids = [str(r) for r in response_ids] if response_ids else None
        if ids is not None and (trace_ids or agent_id):
            raise ValueError("Pass response_ids= or agent_id=/trace_ids=, not both.")
        if ids is None and not trace_ids and not agent_id:
            raise ValueError("Provide at least one of: response_ids, trace_ids, or agent_id")
        if not lookback_hours > 0:
            raise ValueError(f"lookback_hours must be > 0, got {lookback_hours}.")
        data_source: dict[str, Any]
        if ids is not None:
            data_source = {
                "type": "azure_ai_responses",
                "item_generation_params": {
                    "type": "response_retrieval",
                    "data_mapping": {"response_id": "{{item.resp_id}}"},
                    "source": {
                        "type": "file_content",
                        "content": [{"item": {"resp_id": rid}} for rid in ids],
                    },
                },
            }
            return await self._server_side(
                "responses",
                data_source,
                eval_name,
                len(ids),
                lambda oi, i: _server_item(
                    oi.get("datasource_item"), ids[i], {"response_id": ids[i]}
                ),
            )
        data_source = {"type": "azure_ai_traces", "lookback_hours": lookback_hours}
        if trace_ids:
            data_source["trace_ids"] = [str(t) for t in trace_ids]
        if agent_id:
            data_source["agent_id"] = agent_id

        def trace_item(oi: dict[str, Any], _: int) -> EvalItem:
            datasource = oi.get("datasource_item")
            trace = datasource.get("trace_id") if isinstance(datasource, dict) else None
            return _server_item(datasource, str(trace or oi.get("id")), {})

        return await self._server_side("traces", data_source, eval_name, None, trace_item)

    async def evaluate_foundry_target(
        self,
        *,
        target: Mapping[str, Any],
        test_queries: str | Sequence[str],
        eval_name: str = "evalpipe Target Eval",
    ) -> EvalResults:
        """Have Foundry run a hosted target on each query and score its answers (MAF's
        ``evaluate_foundry_target``; the data source sent is in docs/foundry.md).

        One item per query, in the order given (item id = the query's index): the query and the
        target's answer as the service reports it. Results have the shape and fault handling of
        ``evaluate``.

        Args:
            target: The Foundry target, e.g. ``{"type": "azure_ai_agent", "name": "my-agent"}``
                or ``{"type": "azure_ai_model", "model": "gpt-4o-mini"}``; sent as it is.
            test_queries: The queries Foundry sends to the target (a str is one query).
            eval_name: The eval's name (its run is ``"{eval_name} Run"``).

        Raises:
            ValueError: for a target without a ``type`` (MAF's message).
            TypeError: for a target that is not a dict, or a query that is not a str.
        """
        queries = _target_queries(target, test_queries)
        if not queries:
            return make_results(PROVIDER, [])
        data_source = {
            "type": "azure_ai_target_completions",
            "target": dict(target),
            "source": {
                "type": "file_content",
                "content": [{"item": {"query": q}} for q in queries],
            },
        }
        return await self._server_side(
            "target_completions",
            data_source,
            eval_name,
            len(queries),
            lambda oi, i: _target_item(oi, queries[i], i),
        )

    async def _server_side(
        self,
        scenario: str,
        data_source: dict[str, Any],
        eval_name: str,
        count: int | None,
        item: Callable[[dict[str, Any], int], EvalItem],
    ) -> EvalResults:
        """One eval of ``scenario`` and one run of ``data_source``, polled as ``evaluate`` polls.

        ``item(output_item, index)`` is the EvalItem of an output item, built from the service's
        data. With ``count`` (the inputs the run was given), output items are matched to the
        inputs by ``datasource_item_id``, and an input without one is errored (its item built
        from ``{}``). Without, the service chose the items (agent traces): one per output item.
        """
        # The configured evaluators as they are (the items are the service's: no tool filtering).
        specs = self._specs or ev.resolve_evaluators(None, any_tools=False)
        config = {"type": "azure_ai_source", "scenario": scenario}
        items = [item({}, i) for i in range(count or 0)]
        try:
            kind = f"FoundryEvals.{scenario}"
            eval_id = await self._new_eval(eval_name, config, specs, None, kind)
        except Exception as exc:
            return _not_created(items, specs, exc)
        run_body = {
            "name": f"{eval_name} Run",
            "data_source": data_source,
            "metadata": {"evalpipe_key": _digest([eval_id, data_source])},
        }
        status, error, missing, outputs, where = await self._execute(
            eval_id, run_body, resume=False
        )
        matched: Iterable[tuple[int, dict[str, Any]]]
        if count is None:
            outputs.sort(key=lambda o: _index(o.get("datasource_item_id")) or 0)
            items = [item(oi, i) for i, oi in enumerate(outputs)]
            matched = enumerate(outputs)
        else:
            matched = _matched(outputs, count)
        ids = [str(x.item_id) for x in items]
        out: list[EvalItemResult | None] = [None] * len(items)
        for index, oi in matched:
            try:
                items[index] = item(oi, index)
                out[index] = item_result(oi, items[index], ids[index], specs)
            except Exception as exc:
                reason = _error_text(exc)
                out[index] = errored_item(items[index], ids[index], "OutputParseError", reason)
        return _finish(items, ids, out, specs, status, error, missing, **where)


def _digest(value: Any) -> str:
    """A run's tag: its content's hash."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _matched(outputs: list[dict[str, Any]], count: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each output item with the position of the input it is for (``datasource_item_id``)."""
    for oi in outputs:
        index = _index(oi.get("datasource_item_id"))
        if index is None or not 0 <= index < count:
            logger.warning("Foundry output item %s has no matching input", oi.get("id"))
        else:
            yield index, oi


def _finish(
    items: Sequence[EvalItem],
    ids: Sequence[str],
    out: Sequence[EvalItemResult | None],
    specs: Sequence[EvaluatorSpec],
    status: str,
    error: str | None,
    missing_code: str,
    **where: Any,
) -> EvalResults:
    """The result of a run (``where``: its eval_id, run_id, report_url); every item without an
    output is errored with ``missing_code``."""
    reason = error or f"the run produced no output for this item ({status})"
    results = [
        r if r is not None else errored_item(items[i], ids[i], missing_code, reason)
        for i, r in enumerate(out)
    ]
    metrics = [s.name for s in specs]
    return make_results(
        PROVIDER, results, metrics=metrics, input_items=items, status=status, error=error, **where
    )


def _not_created(
    items: list[EvalItem], specs: Sequence[EvaluatorSpec], exc: Exception
) -> EvalResults:
    """Every item errored (``FoundryError``): the eval could not be created."""
    ids = [_item_id(item, i) for i, item in enumerate(items)]
    error = f"could not create the eval: {_error_text(exc)}"
    return _finish(items, ids, [None] * len(items), specs, "failed", error, "FoundryError")


def _server_item(datasource: Any, item_id: str, metadata: dict[str, Any]) -> EvalItem:
    """An EvalItem standing for a server-side data item (a stored response or an agent trace):
    the query and response the service reports for it, when it reports them."""
    conversation: list[Message] = []
    if isinstance(datasource, dict):
        query, response = datasource.get("query"), datasource.get("response")
        if isinstance(query, str) and query:
            conversation.append(Message("user", [query]))
        if isinstance(response, str) and response:
            conversation.append(Message("assistant", [response]))
        for key in ("trace_id", "agent_id", "resp_id", "response_id"):
            value = datasource.get(key)
            if isinstance(value, str) and value:
                metadata.setdefault("response_id" if key == "resp_id" else key, value)
    return EvalItem(conversation, item_id=item_id, metadata=metadata)


def _target_queries(target: Any, test_queries: Any) -> list[str]:
    """The checked queries of an evaluate_foundry_target call (MAF's target check first)."""
    if not isinstance(target, Mapping):
        raise TypeError(
            f"target must be a dict such as {{'type': 'azure_ai_agent', 'name': 'my-agent'}}, "
            f"got {type(target).__name__}"
        )
    if "type" not in target:
        raise ValueError("target dict must include a 'type' key (e.g., 'azure_ai_agent').")
    queries = [test_queries] if isinstance(test_queries, str) else list(test_queries)
    for i, query in enumerate(queries):
        if not isinstance(query, str):
            raise TypeError(f"test_queries[{i}] must be a str, got {type(query).__name__}")
    return queries


def _target_item(output_item: dict[str, Any], query: str, index: int) -> EvalItem:
    """The item for one target completion: the query, then the target's answer (the output
    item's ``sample.output`` assistant messages, else its datasource item's ``response``)."""
    sample = output_item.get("sample")
    answers: list[str] = []
    if isinstance(sample, dict):
        for message in sample.get("output") or []:
            if isinstance(message, dict) and message.get("role") == "assistant":
                content = message.get("content")
                if isinstance(content, str) and content:
                    answers.append(content)
    datasource = output_item.get("datasource_item")
    if not answers and isinstance(datasource, dict):
        response = datasource.get("response")
        if isinstance(response, str) and response:
            answers.append(response)
    conversation = [Message("user", [query]), *(Message("assistant", [a]) for a in answers)]
    return EvalItem(conversation, item_id=str(index), query_index=index)


class FoundryConfig(BaseModel):
    """Settings for a FoundryEvals provider, as a suite declares them; a misspelt field is an error.

    Each field is the ``FoundryEvals`` argument of the same name, except: ``endpoint`` defaults to
    the AZURE_AI_PROJECT_ENDPOINT environment variable, ``conversation_split`` is a name, and
    ``credential`` is the ``module:attr`` of a credential class, factory or instance (e.g.
    ``azure.identity:ManagedIdentityCredential``; default DefaultAzureCredential).
    """

    model_config = ConfigDict(extra="forbid")

    endpoint: str | None = Field(default_factory=lambda: os.environ.get(ENDPOINT_ENV))
    model: str = Field(min_length=1)
    evaluators: list[str] | None = None
    conversation_split: Literal["last_turn", "full"] | None = None
    poll_interval: float = Field(default=1.0, gt=0)
    max_poll_interval: float = Field(default=10.0, gt=0)
    timeout: float = Field(default=600.0, gt=0)
    batch_size: int = Field(default=500, ge=1)
    max_concurrent_runs: int = Field(default=4, ge=1)
    max_retries: int = Field(default=5, ge=0)
    request_timeout: float = Field(default=60.0, gt=0)
    matching_mode: MatchingMode = "exact_match"
    credential: str | None = None

    @field_validator("evaluators")
    @classmethod
    def _known_names(cls, value: list[str] | None) -> list[str] | None:
        ev.validate_evaluators(value)
        return value

    def build(self) -> FoundryEvals:
        """The FoundryEvals these settings describe (DefaultAzureCredential for the endpoint).

        Raises:
            ValueError: when no endpoint is set here or in AZURE_AI_PROJECT_ENDPOINT.
        """
        if not self.endpoint:
            raise ValueError(
                f"foundry.endpoint is not set: add it to the suite or set {ENDPOINT_ENV}."
            )
        credential = None
        if self.credential is not None:
            obj = load_object(self.credential, what="foundry.credential")
            credential = obj() if isinstance(obj, type) or not hasattr(obj, "get_token") else obj
        split = self.conversation_split
        return FoundryEvals(
            **self.model_dump(exclude={"conversation_split", "credential"}),
            credential=credential,
            conversation_split=ConversationSplit(split) if split else None,
        )


async def evaluate_traces(
    *,
    evaluators: Sequence[str | GeneratedEvaluatorRef] | None = None,
    client: Any = None,
    project_client: Any = None,
    model: str | None = None,
    endpoint: str | None = None,
    credential: Any = None,
    response_ids: Sequence[str] | None = None,
    trace_ids: Sequence[str] | None = None,
    agent_id: str | None = None,
    lookback_hours: float = 24,
    eval_name: str = "evalpipe Trace Eval",
    poll_interval: float = 1.0,
    timeout: float = 600.0,  # noqa: ASYNC109 - MAF's parameter name (the run's deadline)
) -> EvalResults:
    """MAF's ``evaluate_traces``: ``FoundryEvals.evaluate_traces`` on a ``FoundryEvals`` built for
    the call from ``client`` / ``project_client`` (or the environment) and closed after; it raises
    what they raise."""
    return await _one_off("evaluate_traces", locals())


async def evaluate_foundry_target(
    *,
    target: Mapping[str, Any],
    test_queries: str | Sequence[str],
    evaluators: Sequence[str | GeneratedEvaluatorRef] | None = None,
    client: Any = None,
    project_client: Any = None,
    model: str | None = None,
    endpoint: str | None = None,
    credential: Any = None,
    eval_name: str = "evalpipe Target Eval",
    poll_interval: float = 1.0,
    timeout: float = 600.0,  # noqa: ASYNC109 - MAF's parameter name (the run's deadline)
) -> EvalResults:
    """MAF's ``evaluate_foundry_target``: ``FoundryEvals.evaluate_foundry_target`` as
    ``evaluate_traces`` calls its method; the target is checked before any client is built (as
    MAF)."""
    _target_queries(target, test_queries)
    return await _one_off("evaluate_foundry_target", locals())


async def _one_off(method: str, arguments: dict[str, Any]) -> EvalResults:
    """A module function's call: a ``FoundryEvals`` built from the arguments it takes, ``method``
    called with the others, then closed."""
    settings = inspect.signature(FoundryEvals).parameters
    foundry = FoundryEvals(**{k: v for k, v in arguments.items() if k in settings})
    call = {k: v for k, v in arguments.items() if k not in settings}
    async with contextlib.aclosing(foundry):
        result: EvalResults = await getattr(foundry, method)(**call)
        return result


def _from_client(client: Any) -> tuple[Any, str | None]:
    """``(openai client, model)`` of what ``client=`` was given: an OpenAI client (it has
    ``.evals``), or a chat client holding one (MAF's FoundryChatClient: ``.client``, ``.model``).

    Raises:
        TypeError: for anything else, naming ``client=``.
    """
    if isinstance(client, openai.AsyncOpenAI | openai.OpenAI) or hasattr(client, "evals"):
        return client, None
    inner = getattr(client, "client", None)
    if isinstance(inner, openai.AsyncOpenAI | openai.OpenAI):
        model = getattr(client, "model", None)
        return inner, model if isinstance(model, str) else None
    raise TypeError(
        "client= must be MAF's FoundryChatClient (agent_framework.foundry) or an openai "
        f"AsyncOpenAI/OpenAI client pointed at the project, got {type(client).__name__}"
    )


def _project_client(endpoint: str, credential: Any) -> Any:
    """An AIProjectClient for ``endpoint``, sync or aio to match ``credential``.

    Without a credential: ``DefaultAzureCredential``, async when aiohttp is installed (the async
    identity and azure-core transports need it), else the sync one with the sync client (its
    calls run in worker threads).
    """
    if credential is None:
        aiohttp = importlib.util.find_spec("aiohttp") is not None
        identity = importlib.import_module("azure.identity.aio" if aiohttp else "azure.identity")
        credential = identity.DefaultAzureCredential()
    aio = inspect.iscoroutinefunction(getattr(credential, "get_token", None))
    projects = importlib.import_module("azure.ai.projects.aio" if aio else "azure.ai.projects")
    transport = async_transport() if aio else {}
    return projects.AIProjectClient(endpoint=endpoint, credential=credential, **transport)


def async_transport() -> dict[str, Any]:
    """``transport=`` for an aio AIProjectClient when aiohttp (azure-core's default) is missing.

    The evals calls go through the OpenAI client, not this transport; it only has to exist.
    """
    if importlib.util.find_spec("aiohttp") is not None:
        return {}
    from azure.core.pipeline.transport import AsyncioRequestsTransport

    return {"transport": AsyncioRequestsTransport()}
