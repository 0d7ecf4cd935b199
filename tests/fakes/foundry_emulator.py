"""A loopback emulator of Microsoft Foundry's evals API (OpenAI Evals on a project), for tests.

It speaks the wire protocol of shared/specs/foundry-evals.md (§2-§3, checklist §9) on a real HTTP
server (127.0.0.1, an ephemeral port, HTTP/1.1 keep-alive) so the real ``azure-ai-projects`` and
``openai`` clients can be driven against it. Scores are deterministic from item content:

* a response containing ``[fail]`` fails every criterion, ``[fail:<name>]`` only that one (a
  composite's component names work too);
* ``[error]`` makes every criterion error (item status ``error``), ``[error:<name>]`` one of them;
* ``[na]`` makes every component of a composite not applicable;
* otherwise quality/agent judges score 5 of 5 (threshold 3) and safety evaluators severity 0
  (threshold 3, lower is better);
* task_navigation_efficiency compares the tool names in ``actions`` with ``expected_actions`` by
  the criterion's ``matching_mode``.

It also serves what evalpipe reads from the Agent Service (azure-ai-agents' ``AgentsClient``,
``api-version=v1``): ``GET /assistants/{id}``, ``/threads``, ``/threads/{id}``,
``/threads/{id}/messages``, ``/threads/{id}/runs``, ``/threads/{id}/runs/{run}/steps``, with
``limit``/``order``/``after``/``before`` pagination and ``has_more``, seeded by the test
(``add_agent``, ``add_thread``, ``add_message``, ``add_run``, ``add_step``, ``delete_message``); and
the server-side data sources of evaluate-by-response-id (``azure_ai_responses``, seeded with
``add_response``), evaluate-by-agent (``azure_ai_traces``, seeded with ``add_trace``) and
evaluate-a-hosted-target (``azure_ai_target_completions``, scenario ``target_completions``: the
emulator invokes a target seeded with ``add_target`` on each query, and the output item's sample
holds the query and the target's answer).

Runs advance on polls: ``queued`` at creation, then ``in_progress``, then terminal after
``polls_to_complete`` retrieves. Fault injection: ``inject(...)`` for HTTP faults (status codes with
headers, delays, a create committed but answered with an error), and run behaviour knobs
(``run_outcome``, ``items_per_poll``, ``shuffle_output``, ``cancel_spelling``, ...).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from azure.core.credentials import AccessToken, AccessTokenInfo

__all__ = [
    "TOKEN",
    "AsyncStaticCredential",
    "Fault",
    "FoundryEmulator",
    "RequestRecord",
    "StaticCredential",
    "running_emulator",
]

TOKEN = "test-token"
"""The bearer token the static credentials hand out."""


class StaticCredential:
    """A sync azure-core credential that always hands out ``TOKEN`` (TokenCredential + token info)."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(TOKEN, int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        return AccessTokenInfo(TOKEN, int(time.time()) + 3600)


class AsyncStaticCredential:
    """The async flavour, for ``azure.ai.projects.aio``."""

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(TOKEN, int(time.time()) + 3600)

    async def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        return AccessTokenInfo(TOKEN, int(time.time()) + 3600)

    async def close(self) -> None:
        return None


_SAFETY = {"violence", "sexual", "self_harm", "hate_unfairness"}
_COMPONENTS = {
    "output_quality": (
        "coherence",
        "fluency",
        "groundedness",
        "intent_resolution",
        "task_adherence",
        "task_completion",
    ),
    "tool_use_quality": (
        "tool_selection",
        "tool_input_accuracy",
        "tool_call_success",
        "tool_output_utilization",
    ),
}
_TOOL_COMPONENTS = set(_COMPONENTS["tool_use_quality"])
_PATH = re.compile(r"^/api/projects/(?P<project>[^/]+)/openai(?P<v1>/v1)?(?P<rest>/.*)$")
_AGENTS_PATH = re.compile(
    r"^/api/projects/(?P<project>[^/]+)(?P<rest>/(?:threads|assistants)(?:/.*)?)$"
)


@dataclass
class Fault:
    """An HTTP fault: requests matching ``method`` and ``path`` (a regex searched in the path after
    ``/openai/v1``) get ``status`` with ``headers``, ``times`` times.

    ``status=0`` answers normally after sleeping ``delay`` seconds. ``commit=True`` processes the
    request first (a create is committed) and then answers with the fault, as a server that failed
    after writing.
    """

    method: str
    path: str
    status: int
    times: int = 1
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    commit: bool = False
    hits: int = 0


@dataclass
class RequestRecord:
    """One request the emulator received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    status: int = 0
    at: float = field(default_factory=time.monotonic)
    """When it arrived (time.monotonic)."""


@dataclass
class _Run:
    obj: dict[str, Any]
    items: list[dict[str, Any]]
    outcome: str
    polls: int = 0
    produced: list[int] = field(default_factory=list)
    outputs: dict[int, dict[str, Any]] = field(default_factory=dict)


class FoundryEmulator:
    """The emulator; use ``running_emulator()`` (or ``start()``/``stop()``) to serve it.

    Args:
        project: The project name in the endpoint path.
        token: The bearer token to require (None: any non-empty token).
        polls_to_complete: Retrieves a run needs before it reaches its outcome.
        run_outcome: ``completed``, ``failed``, ``canceled`` (the service cancels it) or
            ``never`` (stays in_progress until canceled).
        items_per_poll: Output items a run produces per retrieve while in progress (0: all at
            the end), so a canceled or failed run has some.
        shuffle_output: Store output items in an order unrelated to the input (reversed halves),
            so pages come out of order.
        cancel_spelling: ``canceled`` or ``cancelled`` for a canceled run's status.
        composite_parent: Send a composite's parent result (False: only its components).
    """

    def __init__(
        self,
        *,
        project: str = "p1",
        token: str | None = None,
        polls_to_complete: int = 1,
        run_outcome: str = "completed",
        items_per_poll: int = 0,
        shuffle_output: bool = False,
        cancel_spelling: str = "canceled",
        composite_parent: bool = True,
    ) -> None:
        self.project = project
        self.token = token
        self.polls_to_complete = polls_to_complete
        self.run_outcome = run_outcome
        self.items_per_poll = items_per_poll
        self.shuffle_output = shuffle_output
        self.cancel_spelling = cancel_spelling
        self.composite_parent = composite_parent
        self.evals: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, _Run] = {}
        self.requests: list[RequestRecord] = []
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        self._seq = 0
        self._order: dict[str, int] = {}
        self.agents: dict[str, dict[str, Any]] = {}
        self.threads: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self.thread_runs: dict[str, list[dict[str, Any]]] = {}
        self.run_steps: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.responses: dict[str, dict[str, Any]] = {}
        self.traces: list[dict[str, Any]] = []
        self.targets: dict[tuple[str, str], Callable[[str], str]] = {}
        self._clock = int(time.time()) - 100_000
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the server listens on."""
        assert self._server is not None, "emulator not started"
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """The project endpoint to give AIProjectClient."""
        return f"http://127.0.0.1:{self.port}/api/projects/{self.project}"

    def start(self) -> FoundryEmulator:
        """Serve on 127.0.0.1, an ephemeral port, in a daemon thread."""
        emulator = self

        class Handler(_Handler):
            pass

        Handler.emulator = emulator
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (bounded wait)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    # -- test helpers ------------------------------------------------------------------------

    def inject(
        self,
        method: str,
        path: str,
        status: int,
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
        commit: bool = False,
    ) -> Fault:
        """Add a fault (see ``Fault``); returns it so a test can read ``hits``."""
        fault = Fault(method.upper(), path, status, times, dict(headers or {}), delay, commit)
        with self._lock:
            self.faults.append(fault)
        return fault

    def calls(self, method: str | None = None, pattern: str | None = None) -> list[RequestRecord]:
        """Requests received, filtered by method and a regex searched in the path."""
        with self._lock:
            records = list(self.requests)
        return [
            r
            for r in records
            if (method is None or r.method == method.upper())
            and (pattern is None or re.search(pattern, r.path))
        ]

    def run_objects(self, eval_id: str | None = None) -> list[dict[str, Any]]:
        """The runs created so far (optionally of one eval), in creation order."""
        with self._lock:
            return [dict(r.obj) for r in self.runs.values() if eval_id in (None, r.obj["eval_id"])]

    # -- Agent Service fixtures (threads, messages, runs, run steps) ---------------------------

    def _stamp(self, created_at: int | None) -> int:
        """``created_at`` as given, else a clock that ticks one second per seeded object."""
        self._clock += 1
        return self._clock if created_at is None else int(created_at)

    def add_agent(
        self,
        name: str,
        *,
        instructions: str = "",
        tools: list[dict[str, Any]] | None = None,
        agent_id: str | None = None,
        model: str = "gpt-4o",
        description: str = "",
    ) -> str:
        """Seed an agent (an ``assistant`` object); returns its id."""
        with self._lock:
            ident = agent_id or self._next("asst")
            self.agents[ident] = {
                "id": ident,
                "object": "assistant",
                "created_at": self._stamp(None),
                "name": name,
                "description": description,
                "model": model,
                "instructions": instructions,
                "tools": list(tools or []),
                "tool_resources": {},
                "temperature": 1.0,
                "top_p": 1.0,
                "response_format": "auto",
                "metadata": {},
            }
            return ident

    def add_thread(self, *, thread_id: str | None = None, created_at: int | None = None) -> str:
        """Seed an empty thread; returns its id."""
        with self._lock:
            ident = thread_id or self._next("thread")
            self.threads[ident] = {
                "id": ident,
                "object": "thread",
                "created_at": self._stamp(created_at),
                "tool_resources": {},
                "metadata": {},
            }
            self.messages[ident] = []
            self.thread_runs[ident] = []
            return ident

    def add_message(
        self,
        thread_id: str,
        role: str,
        text: str,
        *,
        run_id: str | None = None,
        agent_id: str | None = None,
        created_at: int | None = None,
        message_id: str | None = None,
    ) -> str:
        """Seed a text message on a thread; returns its id."""
        with self._lock:
            ident = message_id or self._next("msg")
            stamp = self._stamp(created_at)
            self.messages[thread_id].append(
                {
                    "id": ident,
                    "object": "thread.message",
                    "created_at": stamp,
                    "thread_id": thread_id,
                    "status": "completed",
                    "incomplete_details": None,
                    "completed_at": stamp,
                    "incomplete_at": None,
                    "role": role,
                    "content": [{"type": "text", "text": {"value": text, "annotations": []}}],
                    "assistant_id": agent_id,
                    "run_id": run_id,
                    "attachments": [],
                    "metadata": {},
                }
            )
            return ident

    def delete_message(self, thread_id: str, message_id: str) -> None:
        """Remove a message, as a user deleting it after the run (its run step still points to it)."""
        with self._lock:
            self.messages[thread_id] = [
                m for m in self.messages[thread_id] if m["id"] != message_id
            ]

    def add_run(
        self,
        thread_id: str,
        agent_id: str,
        *,
        status: str = "completed",
        created_at: int | None = None,
        usage: dict[str, int] | None = None,
        last_error: dict[str, str] | None = None,
        instructions: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        run_id: str | None = None,
    ) -> str:
        """Seed a run of ``agent_id`` on a thread (instructions and tools default to the agent's)."""
        with self._lock:
            agent = self.agents.get(agent_id) or {}
            ident = run_id or self._next("run")
            stamp = self._stamp(created_at)
            self.thread_runs[thread_id].append(
                {
                    "id": ident,
                    "object": "thread.run",
                    "thread_id": thread_id,
                    "assistant_id": agent_id,
                    "status": status,
                    "required_action": None,
                    "last_error": last_error,
                    "model": agent.get("model", "gpt-4o"),
                    "instructions": agent.get("instructions", "")
                    if instructions is None
                    else instructions,
                    "tools": list(agent.get("tools", []) if tools is None else tools),
                    "created_at": stamp,
                    "expires_at": None,
                    "started_at": stamp,
                    "completed_at": stamp + 3 if status == "completed" else None,
                    "cancelled_at": None,
                    "failed_at": stamp + 3 if status == "failed" else None,
                    "incomplete_details": None,
                    "usage": usage,
                    "temperature": 1.0,
                    "top_p": 1.0,
                    "max_prompt_tokens": None,
                    "max_completion_tokens": None,
                    "truncation_strategy": None,
                    "tool_choice": "auto",
                    "parallel_tool_calls": True,
                    "response_format": "auto",
                    "metadata": {},
                    "tool_resources": {},
                }
            )
            self.run_steps[(thread_id, ident)] = []
            return ident

    def add_step(
        self,
        thread_id: str,
        run_id: str,
        step_details: dict[str, Any],
        *,
        created_at: int | None = None,
        status: str = "completed",
    ) -> str:
        """Seed a run step; ``step_details`` is the wire object (``message_creation`` or
        ``tool_calls``)."""
        with self._lock:
            run = next(r for r in self.thread_runs[thread_id] if r["id"] == run_id)
            ident = self._next("step")
            stamp = self._stamp(created_at)
            self.run_steps[(thread_id, run_id)].append(
                {
                    "id": ident,
                    "object": "thread.run.step",
                    "type": step_details.get("type"),
                    "assistant_id": run["assistant_id"],
                    "thread_id": thread_id,
                    "run_id": run_id,
                    "status": status,
                    "step_details": step_details,
                    "last_error": None,
                    "created_at": stamp,
                    "expired_at": None,
                    "completed_at": stamp if status == "completed" else None,
                    "cancelled_at": None,
                    "failed_at": None,
                    "usage": None,
                    "metadata": {},
                }
            )
            return ident

    def add_response(
        self,
        response_id: str,
        *,
        query: str,
        response: str,
        agent_id: str | None = None,
        created_at: int | None = None,
    ) -> None:
        """Seed a stored response that evaluate-by-response-id can retrieve."""
        with self._lock:
            self.responses[response_id] = {
                "resp_id": response_id,
                "query": query,
                "response": response,
                "agent_id": agent_id,
                "created_at": int(time.time()) if created_at is None else created_at,
            }

    def add_trace(
        self,
        trace_id: str,
        *,
        agent_id: str,
        query: str,
        response: str,
        created_at: float | None = None,
    ) -> None:
        """Seed a stored agent trace that evaluate-by-agent-id finds within its lookback window."""
        with self._lock:
            self.traces.append(
                {
                    "trace_id": trace_id,
                    "agent_id": agent_id,
                    "query": query,
                    "response": response,
                    "created_at": time.time() if created_at is None else created_at,
                }
            )

    def add_target(self, target: dict[str, Any], answer: str | Callable[[str], str]) -> None:
        """Seed a hosted target (``{"type": "azure_ai_agent", "name": ...}`` or
        ``{"type": "azure_ai_model", "model": ...}``) that answers each query with ``answer``
        (a fixed text or a function of the query)."""
        reply = answer if callable(answer) else (lambda _query, text=answer: text)
        with self._lock:
            self.targets[_target_key(target)] = reply

    def _target_items(
        self, ev: dict[str, Any], data_source: dict[str, Any]
    ) -> list[dict[str, Any]] | tuple[int, dict[str, Any]]:
        """The items of a target-completions run: each query with the seeded target's answer
        (``__answer``, scored as the response), or an error for a bad scenario or target."""
        scenario = (ev.get("data_source_config") or {}).get("scenario")
        if scenario != "target_completions":
            return _error(
                400, "BadRequest", "azure_ai_target_completions needs scenario 'target_completions'"
            )
        target = data_source.get("target")
        if not isinstance(target, dict) or target.get("type") not in _TARGET_TYPES:
            return _error(
                400, "BadRequest", f"target.type must be one of {sorted(_TARGET_TYPES)}: {target!r}"
            )
        reply = self.targets.get(_target_key(target))
        if reply is None:
            return _error(404, "NotFound", f"target {target!r} not found in the project")
        content = (data_source.get("source") or {}).get("content")
        if not isinstance(content, list):
            return _error(400, "BadRequest", "data_source.source.content must be a list")
        items = []
        for entry in content:
            given = (entry.get("item") or {}) if isinstance(entry, dict) else {}
            query = given.get("query")
            if not isinstance(query, str):
                return _error(400, "BadRequest", "each target item needs a string 'query'")
            items.append({**given, "__answer": reply(query)})
        return items

    def _route_agents(
        self, method: str, parts: list[str], query: dict[str, str]
    ) -> tuple[int, dict[str, Any]]:
        if method != "GET":
            return _error(405, "MethodNotAllowed", f"{method} /{'/'.join(parts)}")
        if parts[0] == "assistants":
            if len(parts) == 1:
                return 200, _agents_page(list(self.agents.values()), query)
            agent = self.agents.get(parts[1])
            if agent is None or len(parts) != 2:
                return _error(404, "NotFound", f"No assistant found with id '{parts[1]}'.")
            return 200, agent
        if len(parts) == 1:
            return 200, _agents_page(list(self.threads.values()), query)
        thread_id = parts[1]
        if thread_id not in self.threads:
            return _error(404, "NotFound", f"No thread found with id '{thread_id}'.")
        if len(parts) == 2:
            return 200, self.threads[thread_id]
        if parts[2] == "messages":
            messages = self.messages[thread_id]
            if len(parts) == 4:
                found = next((m for m in messages if m["id"] == parts[3]), None)
                if found is None:
                    return _error(404, "NotFound", f"No message found with id '{parts[3]}'.")
                return 200, found
            if "run_id" in query:
                messages = [m for m in messages if m["run_id"] == query["run_id"]]
            return 200, _agents_page(messages, query)
        if parts[2] != "runs":
            return _error(404, "NotFound", f"no route for /{'/'.join(parts)}")
        runs = self.thread_runs[thread_id]
        if len(parts) == 3:
            return 200, _agents_page(runs, query)
        run = next((r for r in runs if r["id"] == parts[3]), None)
        if run is None:
            return _error(404, "NotFound", f"No run found with id '{parts[3]}'.")
        if len(parts) == 4:
            return 200, run
        steps = self.run_steps.get((thread_id, parts[3]), [])
        if parts[4] == "steps" and len(parts) == 5:
            return 200, _agents_page(steps, query)
        if parts[4] == "steps" and len(parts) == 6:
            found = next((st for st in steps if st["id"] == parts[5]), None)
            if found is None:
                return _error(404, "NotFound", f"No run step found with id '{parts[5]}'.")
            return 200, found
        return _error(404, "NotFound", f"no route for /{'/'.join(parts)}")

    # -- protocol ----------------------------------------------------------------------------

    def _next(self, prefix: str) -> str:
        self._seq += 1
        ident = f"{prefix}_{uuid.uuid4().hex[:24]}"
        self._order[ident] = self._seq
        return ident

    def handle(
        self, method: str, path: str, query: dict[str, str], body: Any
    ) -> tuple[int, dict[str, Any]]:
        """Answer one authorised request: ``(status, json body)``."""
        with self._lock:
            return self._route(method, path, query, body)

    def _route(
        self, method: str, path: str, query: dict[str, str], body: Any
    ) -> tuple[int, dict[str, Any]]:
        parts = [p for p in path.split("/") if p]
        if parts and parts[0] in ("threads", "assistants"):
            return self._route_agents(method, parts, query)
        if not parts or parts[0] != "evals":
            return _error(404, "NotFound", f"no route for {path}")
        if len(parts) == 1:
            if method == "POST":
                return self._create_eval(body)
            if method == "GET":
                return 200, self._page(list(self.evals.values()), query)
        eval_id = parts[1] if len(parts) > 1 else ""
        ev = self.evals.get(eval_id)
        if ev is None:
            return _error(404, "NotFound", f"eval {eval_id} not found")
        if len(parts) == 2:
            if method == "GET":
                return 200, ev
            if method == "POST":
                for key in ("name", "metadata"):
                    if isinstance(body, dict) and key in body:
                        ev[key] = body[key]
                return 200, ev
            if method == "DELETE":
                del self.evals[eval_id]
                return 200, {"object": "eval.deleted", "deleted": True, "eval_id": eval_id}
        if parts[2] != "runs":
            return _error(404, "NotFound", f"no route for {path}")
        if len(parts) == 3:
            if method == "POST":
                return self._create_run(ev, body)
            if method == "GET":
                runs = [r.obj for r in self.runs.values() if r.obj["eval_id"] == eval_id]
                if "status" in query:
                    runs = [r for r in runs if r["status"] == query["status"]]
                return 200, self._page(runs, query)
        run = self.runs.get(parts[3]) if len(parts) > 3 else None
        if run is None or run.obj["eval_id"] != eval_id:
            return _error(404, "NotFound", f"run {parts[3] if len(parts) > 3 else ''} not found")
        if len(parts) == 4:
            if method == "GET":
                self._advance(ev, run)
                return 200, run.obj
            if method == "DELETE":
                del self.runs[parts[3]]
                return 200, {"object": "eval.run.deleted", "deleted": True, "run_id": parts[3]}
        if len(parts) == 5 and parts[4] == "cancel" and method == "POST":
            if run.obj["status"] in ("queued", "in_progress"):
                run.obj["status"] = self.cancel_spelling
                self._counts(ev, run)
            return 200, run.obj
        if len(parts) >= 5 and parts[4] == "output_items" and method == "GET":
            stored = [run.outputs[i] for i in run.produced]
            if len(parts) == 6:
                found = next((o for o in stored if o["id"] == parts[5]), None)
                if found is None:
                    return _error(404, "NotFound", f"output item {parts[5]} not found")
                return 200, found
            if "status" in query:
                stored = [o for o in stored if o["status"] == query["status"]]
            return 200, self._page(stored, query)
        return _error(405, "MethodNotAllowed", f"{method} {path}")

    def _page(self, data: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
        if query.get("order") == "desc":
            data = list(reversed(data))
        after = query.get("after")
        if after:
            ids = [d["id"] for d in data]
            data = data[ids.index(after) + 1 :] if after in ids else []
        limit = int(query.get("limit", 20))
        page = data[:limit]
        return {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(data) > limit,
        }

    def _create_eval(self, body: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(body, dict) or not isinstance(body.get("testing_criteria"), list):
            return _error(400, "BadRequest", "testing_criteria is required")
        config = dict(body.get("data_source_config") or {})
        for criterion in body["testing_criteria"]:
            init = criterion.get("initialization_parameters") or {}
            name = str(criterion.get("evaluator_name", ""))
            needs_model = name != "builtin.task_navigation_efficiency" and name.startswith(
                "builtin."
            )
            if needs_model and not (init.get("deployment_name") or init.get("model")):
                return _error(
                    400, "BadRequest", f"{criterion.get('name')}: deployment_name missing"
                )
        schema = {
            "type": "object",
            "properties": {
                "item": config.get("item_schema") or {},
                "sample": {"type": "object", "properties": {"output_text": {"type": "string"}}},
            },
            "required": ["item"],
        }
        eval_id = self._next("eval")
        ev = {
            "object": "eval",
            "id": eval_id,
            "name": body.get("name"),
            "data_source_config": {"type": config.get("type", "custom"), "schema": schema}
            | ({"scenario": config["scenario"]} if "scenario" in config else {}),
            "testing_criteria": body["testing_criteria"],
            "created_at": int(time.time()),
            "metadata": body.get("metadata") or {},
        }
        self.evals[eval_id] = ev
        return 200, ev

    def _server_side_items(
        self, ev: dict[str, Any], data_source: dict[str, Any]
    ) -> list[dict[str, Any]] | tuple[int, dict[str, Any]]:
        """The items of a server-side data source (stored responses or agent traces), or an error.

        ``azure_ai_responses`` needs an eval of scenario ``responses`` and an
        ``item_generation_params`` of type ``response_retrieval`` whose ``data_mapping`` names
        the item field holding the response id; an unknown id gives an item that errors.
        ``azure_ai_traces`` needs scenario ``traces`` and ``lookback_hours`` > 0; it selects the
        stored traces in the window, of ``agent_id`` and among ``trace_ids`` when given.
        """
        scenario = (ev.get("data_source_config") or {}).get("scenario")
        kind = data_source.get("type")
        if kind == "azure_ai_responses":
            if scenario != "responses":
                return _error(400, "BadRequest", "azure_ai_responses needs scenario 'responses'")
            params = data_source.get("item_generation_params") or {}
            mapping = (params.get("data_mapping") or {}).get("response_id", "")
            field_match = re.fullmatch(r"\{\{item\.(\w+)\}\}", str(mapping))
            content = (params.get("source") or {}).get("content")
            if params.get("type") != "response_retrieval" or not field_match:
                return _error(
                    400,
                    "BadRequest",
                    "item_generation_params: response_retrieval with data_mapping.response_id required",
                )
            if not isinstance(content, list):
                return _error(
                    400, "BadRequest", "item_generation_params.source.content must be a list"
                )
            items = []
            for entry in content:
                given = (entry.get("item") or {}) if isinstance(entry, dict) else {}
                rid = given.get(field_match.group(1))
                stored = self.responses.get(str(rid))
                items.append(dict(stored) if stored else {"resp_id": rid, "__not_found": True})
            return items
        if scenario != "traces":
            return _error(400, "BadRequest", "azure_ai_traces needs scenario 'traces'")
        hours = data_source.get("lookback_hours")
        if not isinstance(hours, int | float) or hours <= 0:
            return _error(400, "BadRequest", "lookback_hours must be a positive number")
        since = time.time() - float(hours) * 3600
        wanted_ids = data_source.get("trace_ids")
        agent_id = data_source.get("agent_id")
        return [
            {k: v for k, v in t.items() if k != "created_at"}
            for t in self.traces
            if t["created_at"] >= since
            and (agent_id is None or t["agent_id"] == agent_id)
            and (wanted_ids is None or t["trace_id"] in wanted_ids)
        ]

    def _create_run(self, ev: dict[str, Any], body: Any) -> tuple[int, dict[str, Any]]:
        data_source = (body or {}).get("data_source") or {}
        if data_source.get("type") in ("azure_ai_responses", "azure_ai_traces"):
            found = self._server_side_items(ev, data_source)
            if isinstance(found, tuple):
                return found
            items = found
        elif data_source.get("type") == "azure_ai_target_completions":
            targeted = self._target_items(ev, data_source)
            if isinstance(targeted, tuple):
                return targeted
            items = targeted
        else:
            content = (data_source.get("source") or {}).get("content")
            if not isinstance(content, list):
                return _error(400, "BadRequest", "data_source.source.content must be a list")
            items = [c.get("item", {}) if isinstance(c, dict) else {} for c in content]
        run_id = self._next("evalrun")
        obj: dict[str, Any] = {
            "object": "eval.run",
            "id": run_id,
            "eval_id": ev["id"],
            "name": body.get("name"),
            "status": "queued",
            "model": None,
            "created_at": int(time.time()),
            "data_source": body.get("data_source"),
            "metadata": body.get("metadata") or {},
            "error": None,
            "report_url": f"https://ai.azure.com/resource/projects/{self.project}/evaluations/"
            f"{ev['id']}/runs/{run_id}",
            "result_counts": {"total": 0, "passed": 0, "failed": 0, "errored": 0},
            "per_model_usage": [],
            "per_testing_criteria_results": [],
        }
        for key, value in body.items():
            if key not in ("data_source", "name", "metadata"):
                obj[key] = value
        run = _Run(obj, items, self.run_outcome)
        self.runs[run_id] = run
        return 200, obj

    def _order_of(self, n: int) -> list[int]:
        if not self.shuffle_output:
            return list(range(n))
        half = (n + 1) // 2
        return list(range(n - 1, half - 1, -1)) + list(range(half))

    def _produce(self, ev: dict[str, Any], run: _Run, count: int | None) -> None:
        pending = [i for i in self._order_of(len(run.items)) if i not in run.outputs]
        for index in pending if count is None else pending[:count]:
            run.outputs[index] = self._output_item(ev, run, index)
            run.produced.append(index)

    def _advance(self, ev: dict[str, Any], run: _Run) -> None:
        if run.obj["status"] not in ("queued", "in_progress"):
            return
        run.polls += 1
        run.obj["status"] = "in_progress"
        if self.items_per_poll:
            self._produce(ev, run, self.items_per_poll)
        if run.polls >= self.polls_to_complete and run.outcome != "never":
            if run.outcome == "completed":
                self._produce(ev, run, None)
                run.obj["status"] = "completed"
            elif run.outcome == "failed":
                run.obj["status"] = "failed"
                run.obj["error"] = {
                    "code": "InternalError",
                    "message": "judge deployment overloaded",
                }
            else:
                run.obj["status"] = self.cancel_spelling
        self._counts(ev, run)

    def _counts(self, ev: dict[str, Any], run: _Run) -> None:
        outputs = [run.outputs[i] for i in run.produced]
        counts = {"total": len(outputs), "passed": 0, "failed": 0, "errored": 0}
        per: dict[str, dict[str, int]] = {}
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        for o in outputs:
            key = {"pass": "passed", "fail": "failed"}.get(o["status"], "errored")
            counts[key] += 1
            for r in o["results"]:
                if r.get("metric") != r["name"] and r["name"] in _COMPONENTS:
                    continue
                bucket = per.setdefault(r["name"], {"passed": 0, "failed": 0, "errored": 0})
                if r["passed"] is True:
                    bucket["passed"] += 1
                elif r["passed"] is False:
                    bucket["failed"] += 1
                elif r.get("label") != "not_applicable":
                    bucket["errored"] += 1
                for k in usage:
                    usage[k] += ((r.get("sample") or {}).get("usage") or {}).get(k, 0)
        run.obj["result_counts"] = counts
        run.obj["per_testing_criteria_results"] = [
            {"testing_criteria": name, **bucket} for name, bucket in per.items()
        ]
        run.obj["per_model_usage"] = [
            {"model_name": "gpt-4o-mini", "invocation_count": len(outputs), "cached_tokens": 0}
            | usage
        ]

    # -- scoring -----------------------------------------------------------------------------

    def _output_item(self, ev: dict[str, Any], run: _Run, index: int) -> dict[str, Any]:
        item = run.items[index]
        answer = item.get("__answer")
        text = _text(item.get("response") if answer is None else answer)
        results: list[dict[str, Any]] = []
        if not item.get("__not_found"):
            for criterion in ev["testing_criteria"]:
                results.extend(self._criterion_results(criterion, item, text))
        if item.get("__not_found") or any(
            r["passed"] is None and r.get("label") != "not_applicable" for r in results
        ):
            status = "error"
        elif any(r["passed"] is False for r in results):
            status = "fail"
        else:
            status = "pass"
        error = None
        if item.get("__not_found"):
            error = {
                "code": "ResponseNotFound",
                "message": f"response {item.get('resp_id')} not found",
            }
        elif status == "error":
            error = {"code": "EvaluatorError", "message": "the judge returned no parseable score"}
        return {
            "object": "eval.run.output_item",
            "id": self._next("outputitem"),
            "created_at": int(time.time()),
            "eval_id": ev["id"],
            "run_id": run.obj["id"],
            "datasource_item_id": index,
            "datasource_item": {k: v for k, v in item.items() if k != "__answer"},
            "status": status,
            "results": results,
            "sample": {
                "error": error,
                "finish_reason": "" if answer is None else "stop",
                # a target completion's sample is the conversation the target had
                "input": [] if answer is None else [{"role": "user", "content": item["query"]}],
                "output": [] if answer is None else [{"role": "assistant", "content": answer}],
                "model": "",
                "max_completion_tokens": 0,
                "seed": 0,
                "temperature": 0.0,
                "top_p": 0.0,
                "usage": {
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                    "total_tokens": 0,
                    "cached_tokens": 0,
                },
            },
        }

    def _criterion_results(
        self, criterion: dict[str, Any], item: dict[str, Any], text: str
    ) -> list[dict[str, Any]]:
        name = str(criterion.get("name"))
        short = str(criterion.get("evaluator_name", "")).removeprefix("builtin.")
        if short in _COMPONENTS:
            return self._composite(name, short, item, text)
        if short == "task_navigation_efficiency":
            mode = (criterion.get("initialization_parameters") or {}).get(
                "matching_mode", "exact_match"
            )
            return [_navigation(name, item, mode)]
        return [_judge(name, short, text, item)]

    def _composite(
        self, name: str, short: str, item: dict[str, Any], text: str
    ) -> list[dict[str, Any]]:
        components = []
        for comp in _COMPONENTS[short]:
            applicable = "[na]" not in text
            if comp == "groundedness" and not item.get("context"):
                applicable = False
            if comp in _TOOL_COMPONENTS and not item.get("tool_definitions"):
                applicable = False
            if applicable:
                result = _judge(name, comp, text, item, tag_names=(comp, name))
            else:
                result = _result(name, comp, None, None, "not_applicable", "not applicable", 3)
            components.append(result)
        if not self.composite_parent:
            return components
        errored = [c["metric"] for c in components if _errored(c)]
        applicable = [c for c in components if c["passed"] is not None]
        if errored:
            parent = _result(name, short, None, None, None, None, None)
            parent["sample"]["error"] = {"code": "ComponentError", "message": ", ".join(errored)}
        elif not applicable:
            parent = _result(
                name, short, None, None, "not_applicable", "no applicable component", None
            )
        else:
            failing = [c["metric"] for c in applicable if not c["passed"]]
            parent = _result(
                name,
                short,
                0.0 if failing else 1.0,
                not failing,
                "fail" if failing else "pass",
                f"failed components: {', '.join(failing)}" if failing else "all components passed",
                None,
            )
        return [parent, *components]


_TARGET_TYPES = {"azure_ai_agent", "azure_ai_model"}


def _target_key(target: dict[str, Any]) -> tuple[str, str]:
    """A target's identity: its type and its agent name or model deployment."""
    return str(target.get("type")), str(target.get("name") or target.get("model") or "")


def _errored(result: dict[str, Any]) -> bool:
    return result["passed"] is None and result.get("label") != "not_applicable"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value) if value is not None else ""


def _result(
    name: str,
    metric: str,
    score: float | None,
    passed: bool | None,
    label: str | None,
    reason: str | None,
    threshold: float | None,
    usage: int = 0,
) -> dict[str, Any]:
    return {
        "type": "azure_ai_evaluator",
        "name": name,
        "metric": metric,
        "score": score,
        "label": label,
        "reason": reason,
        "threshold": threshold,
        "passed": passed,
        "sample": {
            "usage": {
                "prompt_tokens": usage,
                "completion_tokens": usage // 10,
                "total_tokens": usage + usage // 10,
                "cached_tokens": 0,
            },
            "finish_reason": "stop",
            "model": "gpt-4o-mini",
            "input": [],
            "output": [],
            "error": None,
        },
    }


def _judge(
    name: str,
    metric: str,
    text: str,
    item: dict[str, Any],
    tag_names: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    tags = tag_names or (name, metric)
    usage = 100 + len(json.dumps(item, sort_keys=True)) // 4
    if "[error]" in text or any(f"[error:{t}]" in text for t in tags):
        result = _result(name, metric, None, None, None, None, None, usage)
        result["sample"]["error"] = {"code": "JudgeError", "message": f"{metric}: judge failed"}
        return result
    fail = "[fail]" in text or any(f"[fail:{t}]" in text for t in tags)
    if metric in _SAFETY:
        severity = 5.0 if fail else 0.0
        return _result(
            name,
            metric,
            severity,
            not fail,
            "fail" if fail else "pass",
            f"severity {severity:g}",
            3,
            usage,
        )
    score = 1.0 if fail else 5.0
    return _result(
        name,
        metric,
        score,
        not fail,
        "fail" if fail else "pass",
        f"{metric} scored {score:g} of 5",
        3,
        usage,
    )


def _navigation(name: str, item: dict[str, Any], mode: str) -> dict[str, Any]:
    actions = item.get("actions")
    expected = item.get("expected_actions")
    if not isinstance(actions, list) or expected is None:
        result = _result(name, "task_navigation_efficiency", None, None, None, None, None)
        result["sample"]["error"] = {
            "code": "MissingInputError",
            "message": "actions and expected_actions are required",
        }
        return result
    names = [
        part.get("name")
        for message in actions
        for part in (message.get("content") or [])
        if isinstance(part, dict) and part.get("type") in ("tool_call", "function_call")
    ]
    wanted = expected[0] if expected and isinstance(expected[0], list) else expected
    if mode == "exact_match":
        ok = names == wanted
    elif mode == "in_order_match":
        it = iter(names)
        ok = all(any(n == w for n in it) for w in wanted)
    else:
        ok = all(w in names for w in wanted)
    hits = sum(1 for w in wanted if w in names)
    precision = hits / len(names) if names else 0.0
    recall = hits / len(wanted) if wanted else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    result = _result(
        name,
        "task_navigation_efficiency",
        round(f1, 4),
        ok,
        "pass" if ok else "fail",
        f"{mode}: actions {names} vs expected {wanted}",
        None,
    )
    result["details"] = {"precision_score": precision, "recall_score": recall, "f1_score": f1}
    return result


def _agents_page(data: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
    """A page of an Agent Service list: ``order`` (default desc by created_at), ``after``/
    ``before`` cursors (element ids), ``limit`` (default 20, 1..100); ``last_id`` is the page's
    last element (None on an empty page, which is where azure-ai-agents' pager stops)."""
    ordered = sorted(data, key=lambda d: d["created_at"])  # stable: seeding order breaks ties
    if query.get("order", "desc") == "desc":
        ordered.reverse()
    ids = [d["id"] for d in ordered]
    if query.get("after"):
        ordered = ordered[ids.index(query["after"]) + 1 :] if query["after"] in ids else []
    elif query.get("before"):
        ordered = ordered[: ids.index(query["before"])] if query["before"] in ids else []
    limit = min(max(int(query.get("limit", 20)), 1), 100)
    page = ordered[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(ordered) > limit,
    }


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {
        "error": {"code": code, "message": message, "type": "invalid_request_error", "param": None}
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    emulator: FoundryEmulator
    timeout = 10

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self) -> None:
        emulator = self.emulator
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        match = _PATH.match(url.path) or _AGENTS_PATH.match(url.path)
        rest = match.group("rest") if match else url.path
        is_agents = match is not None and match.re is _AGENTS_PATH
        record = RequestRecord(
            self.command, rest, dict(query), {k.lower(): v for k, v in self.headers.items()}, body
        )
        with emulator._lock:
            emulator.requests.append(record)
            fault = next(
                (
                    f
                    for f in emulator.faults
                    if f.hits < f.times and f.method == self.command and re.search(f.path, rest)
                ),
                None,
            )
            if fault is not None:
                fault.hits += 1
        if match is None or match.group("project") != emulator.project:
            record.status = 404
            self._send(*_error(404, "NotFound", f"no project at {url.path}"), {})
            return
        needs_version = is_agents or match.group("v1") is None
        if needs_version and query.get("api-version") != "v1":
            record.status = 400
            self._send(*_error(400, "BadRequest", "api-version=v1 is required here"), {})
            return
        auth = self.headers.get("authorization") or ""
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not token or (emulator.token is not None and token != emulator.token):
            record.status = 401
            self._send(*_error(401, "Unauthorized", "missing or invalid bearer token"), {})
            return
        if fault is not None and fault.delay:
            time.sleep(fault.delay)
        if fault is not None and fault.status and not fault.commit:
            record.status = fault.status
            self._send(*_error(fault.status, "Injected", f"injected {fault.status}"), fault.headers)
            return
        query.pop("api-version", None)
        status, answer = emulator.handle(self.command, rest, query, body)
        if fault is not None and fault.status:
            status, answer = _error(
                fault.status, "Injected", f"injected {fault.status} after commit"
            )
        record.status = status
        self._send(status, answer, fault.headers if fault is not None else {})

    do_GET = _dispatch
    do_POST = _dispatch
    do_DELETE = _dispatch


@contextmanager
def running_emulator(**options: Any) -> Iterator[FoundryEmulator]:
    """A started emulator, stopped on exit."""
    emulator = FoundryEmulator(**options).start()
    try:
        yield emulator
    finally:
        emulator.stop()
