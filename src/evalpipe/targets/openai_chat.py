"""OpenAIChatAgent: an agent over any OpenAI-compatible chat-completions endpoint, with local tools.

The agent sends the conversation, executes the tool calls the model asks for with your Python
functions, sends the results back, and repeats until the model answers in text or ``max_steps``
model calls were made (the last call asks for a text answer with ``tool_choice="none"``). It returns
the whole transcript (assistant tool calls, tool results, the final text), the summed token usage
and schema snapshots of its tools. Requests go through evalpipe.llm, so retries, the response cache
and the per-endpoint concurrency bound apply.

A tool call whose arguments are not a JSON object, a call to an unknown tool, and a tool that raises
are recorded as a tool result carrying the error (the model sees it and can recover); the run goes
on.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import SecretStr

from evalpipe.cache import CacheConfig, ResponseCache
from evalpipe.llm import ChatClient, ChatEndpoint, token_source_for
from evalpipe.messages import (
    FunctionCallContent,
    FunctionResultContent,
    Message,
    ToolDefinition,
    messages_from_openai,
    messages_to_openai,
)
from evalpipe.targets.base import AgentResponse, awaited, response_usage
from evalpipe.transcripts import RunUsage, sum_usage

__all__ = ["OpenAIChatAgent"]


def _tool_result_text(value: Any) -> Any:
    """A tool's return value as stored in the transcript: JSON data as is, anything else as str."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


class OpenAIChatAgent:
    """An evalpipe Agent over an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        base_url: the OpenAI-style base URL (e.g. ``http://localhost:11434/v1``).
        model: the model id (for Azure v1, the deployment name).
        instructions: the system message sent first, when given.
        tools: Python functions (sync or async) the model may call; their names, docstrings and
            annotated parameters become the tool schemas.
        api_key: the API key (prefer ``endpoint=ChatEndpoint(api_key_env=...)``).
        name: the agent's name in results (default: the model id).
        endpoint: a full ChatEndpoint instead of ``base_url``/``model``/``api_key`` (Azure,
            Entra, timeouts, retries, concurrency).
        cache: a response cache, a mapping of CacheConfig fields, or None.
        credential: an azure-identity credential for Entra authentication.
        max_steps: model calls per run, at most (>= 1).
        max_tokens: the token budget of each answer (None: the server's default).
        **endpoint_options: any other ChatEndpoint field (``api_key_env``, ``api_type``,
            ``azure_deployment``, ``timeout``, ``max_retries``, ``max_concurrency``, ...), so a
            suite's ``{openai: {...}}`` target can set them.

    Raises:
        ValueError: for a missing base_url/model, both an endpoint and base_url, duplicate tool
            names, ``max_steps < 1`` or a bad endpoint option (a pydantic ValidationError naming
            the field).
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        instructions: str | None = None,
        tools: Sequence[Callable[..., Any]] = (),
        api_key: str | SecretStr | None = None,
        *,
        name: str | None = None,
        endpoint: ChatEndpoint | None = None,
        cache: ResponseCache | Mapping[str, Any] | None = None,
        credential: Any = None,
        max_steps: int = 8,
        max_tokens: int | None = None,
        **endpoint_options: Any,
    ) -> None:
        if endpoint is None:
            if base_url is None or model is None:
                raise ValueError("OpenAIChatAgent needs base_url and model, or endpoint=")
            endpoint = ChatEndpoint(
                base_url=base_url, model=model, api_key=api_key, **endpoint_options
            )
        elif base_url is not None or model is not None or api_key is not None or endpoint_options:
            raise ValueError("give endpoint= or base_url/model/api_key/endpoint options, not both")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}.")
        self.endpoint = endpoint
        self.name: str | None = name or endpoint.model
        self.instructions = instructions
        self.cache = CacheConfig.coerce(cache)
        self.credential = token_source_for(endpoint, credential)  # one token for every run
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.tools = [ToolDefinition.from_function(fn) for fn in tools]
        """Schema snapshots of the tools, in the order given."""
        self._functions = {t.name: fn for t, fn in zip(self.tools, tools, strict=True)}
        for name, count in Counter(t.name for t in self.tools).items():
            if count > 1:
                raise ValueError(f"two tools are named {name!r}; tool names must be unique")
        self._wire_tools = [{"type": "function", "function": t.model_dump()} for t in self.tools]
        self._client: ChatClient | None = None
        self._occurrences: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"OpenAIChatAgent(name={self.name!r}, base_url={self.endpoint.base_url!r}, "
            f"model={self.endpoint.model!r}, tools={[t.name for t in self.tools]!r})"
        )

    async def __aenter__(self) -> OpenAIChatAgent:
        """Keep one connection pool open for every run inside the ``async with`` block."""
        if self._client is None:
            self._client = ChatClient(self.endpoint, cache=self.cache, credential=self.credential)
            await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool opened by ``async with``."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _repetition(self, wire: list[dict[str, Any]]) -> int:
        """How many runs of this very conversation came before (the cache key's repetition).

        Repeated runs of one query record one cache entry each, in the order they start;
        concurrent repetitions of the same query are interchangeable, so which run gets which
        index does not change the replayed results.
        """
        digest = hashlib.sha256(
            json.dumps(wire, sort_keys=True, ensure_ascii=False).encode("utf-8")
        ).hexdigest()
        with self._lock:
            index = self._occurrences.get(digest, 0)
            self._occurrences[digest] = index + 1
        return index

    async def run(
        self, messages: str | Sequence[Any], *, repetition: int | None = None, **kwargs: Any
    ) -> AgentResponse:
        """Answer the conversation, calling tools as the model asks.

        Args:
            messages: a user query string, or a list of messages (evalpipe, dict or MAF).
            repetition: the cache key's repetition index (default: counted per conversation).

        Raises:
            evalpipe.llm.ChatError: when the endpoint fails after its retries (evaluate_agent
                records it as an errored item).
            evalpipe.cache.CacheMissError: in replay mode, when a request has no stored answer.
        """
        conversation = (
            [Message("user", [messages])]
            if isinstance(messages, str)
            else [Message.coerce(m) for m in messages]
        )
        wire: list[dict[str, Any]] = []
        if self.instructions:
            wire.append({"role": "system", "content": self.instructions})
        wire.extend(messages_to_openai(conversation))
        rep = self._repetition(wire) if repetition is None else repetition
        if self._client is not None:
            return await self._loop(self._client, wire, rep)
        async with ChatClient(
            self.endpoint, cache=self.cache, credential=self.credential
        ) as client:
            return await self._loop(client, wire, rep)

    async def _loop(
        self, client: ChatClient, wire: list[dict[str, Any]], repetition: int
    ) -> AgentResponse:
        produced: list[Message] = []
        usages: list[RunUsage] = []
        for step in range(self.max_steps):
            last = step == self.max_steps - 1
            completion = await client.complete(
                wire,
                tools=self._wire_tools or None,
                tool_choice=("none" if last else "auto") if self._wire_tools else None,
                max_tokens=self.max_tokens,
                repetition=repetition,
            )
            usages.append(response_usage(completion))
            raw = {**completion.message, "role": "assistant"}
            if raw.get("content") is None:  # a refusal is the turn's text
                raw["content"] = completion.refusal
            [assistant] = messages_from_openai([raw])
            [sent] = assistant.to_openai()
            if sent.get("tool_calls") and sent["content"] is None:
                # OpenAI takes "" as it takes null; llama-cpp-python's server validates content as
                # a string and its function-calling template reads it.
                sent["content"] = ""
            wire.append(sent)
            assistant.author_name = self.name  # after the wire copy: not every server takes "name"
            produced.append(assistant)
            calls = assistant.function_calls
            if not calls or last:
                break
            results = [await self._call_tool(call) for call in calls]
            tool_message = Message("tool", results)
            produced.append(tool_message)
            wire.extend(tool_message.to_openai())
        error_message = None
        if produced and produced[-1].function_calls and not produced[-1].text:
            # Ended on an unanswered tool call: there is no answer to score as the agent's.
            error_message = (
                f"the model still asked for tools after max_steps={self.max_steps} model "
                "calls and gave no final answer"
            )
        return AgentResponse(
            messages=produced,
            usage=sum_usage(usages),
            tools=list(self.tools),
            error_code="MaxStepsExceeded" if error_message else None,
            error_message=error_message,
        )

    async def _call_tool(self, call: FunctionCallContent) -> FunctionResultContent:
        fn = self._functions.get(call.name)
        arguments = call.parsed_arguments()
        result: Any
        if fn is None:
            known = ", ".join(self._functions) or "none"
            result = f"Error: unknown tool {call.name!r} (available: {known})"
        elif arguments is None:
            result = (
                f"Error: the arguments of {call.name} are not a JSON object: "
                f"{str(call.arguments)[:200]!r}"
            )
        else:
            try:
                result = _tool_result_text(await awaited(fn, **arguments))
            except Exception as exc:
                result = f"Error: {type(exc).__name__}: {exc}"
        return FunctionResultContent(call_id=call.call_id, result=result)
