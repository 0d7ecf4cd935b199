"""Agents against the real server: OpenAIChatAgent's tool loop (tool definitions accepted, calls parsed,
usage summed, transcript stored, replayed offline) and a real MAF Agent over MAF's own OpenAI client."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from evalpipe import (
    ExpectedToolCall,
    Message,
    evaluate_agent,
    tool_call_args_match,
    tool_calls_present,
)
from evalpipe.cache import ResponseCache
from evalpipe.local_model import TOOLS_MODEL_ID, LocalModelServer
from evalpipe.targets.openai_chat import OpenAIChatAgent
from fakes.openai_server import closed_port

WEATHER = {"paris": ("sunny", "21°C"), "oslo": ("snowy", "-3°C"), "tokyo": ("rainy", "18°C")}
INSTRUCTIONS = "You are a weather assistant. Use the get_weather tool, then answer in one sentence."


def get_weather(city: str) -> dict[str, str]:
    """Get the current weather for a city."""
    condition, temperature = WEATHER.get(city.strip().lower(), ("cloudy", "15°C"))
    return {"city": city, "condition": condition, "temperature": temperature}


def agent(base_url: str, cache: ResponseCache | None = None) -> OpenAIChatAgent:
    return OpenAIChatAgent(
        base_url,
        TOOLS_MODEL_ID,
        instructions=INSTRUCTIONS,
        tools=[get_weather],
        max_steps=2,
        max_tokens=48,
        cache=cache,
        timeout=120,
        max_retries=1,
    )


def transcript(messages: Sequence[Message]) -> str:
    return json.dumps([m.to_openai() for m in messages], ensure_ascii=False, sort_keys=True)


async def test_openai_chat_agent_tool_loop_on_the_real_server(
    local_server: LocalModelServer, tmp_path: Path
) -> None:
    """The server takes the tool definitions, the model's call is parsed and run, usage sums what the server reported per call, and the run replays offline identically."""
    cache = ResponseCache(tmp_path)
    response = await agent(local_server.base_url, cache).run("What's the weather in Paris?")
    roles = [m.role for m in response.messages]
    assert roles[:2] == ["assistant", "tool"], roles
    [call] = response.messages[0].function_calls
    assert call.name == "get_weather"
    arguments = call.parsed_arguments()
    assert arguments is not None
    assert arguments["city"].lower() == "paris"
    [result] = response.messages[1].function_results
    assert result.call_id == call.call_id
    assert result.result == {"city": arguments["city"], "condition": "sunny", "temperature": "21°C"}
    assert response.messages[-1].role == "assistant"
    assert [t.name for t in response.tools or []] == ["get_weather"]
    # usage: the sum of the usage blocks the server sent, one per model call of the loop
    entries = cache.entries()
    assert len(entries) == len([m for m in response.messages if m.role == "assistant"]) == 2
    assert response.usage is not None
    assert response.usage.input_tokens == sum(e.response["usage"]["prompt_tokens"] for e in entries)
    assert response.usage.output_tokens == sum(
        e.response["usage"]["completion_tokens"] for e in entries
    )
    assert response.usage.total_tokens == sum(e.response["usage"]["total_tokens"] for e in entries)
    # the tool definitions went to the server as OpenAI tools
    first = min(entries, key=lambda e: len(e.request["messages"]))
    assert first.request["tools"][0]["function"]["name"] == "get_weather"
    assert first.request["tools"][0]["function"]["parameters"]["required"] == ["city"]
    # record once, replay with nothing listening: the same transcript, byte for byte
    offline = agent(f"http://127.0.0.1:{closed_port()}/v1", ResponseCache(tmp_path, mode="replay"))
    replayed = await offline.run("What's the weather in Paris?")
    assert transcript(replayed.messages) == transcript(response.messages)
    assert replayed.usage == response.usage


async def test_openai_chat_agent_is_evaluated_with_its_tool_calls(
    local_server: LocalModelServer,
) -> None:
    """evaluate_agent over the real agent stores the transcript, the tool schemas and the usage on the item and scores the call."""
    [results] = await evaluate_agent(
        agent=agent(local_server.base_url),
        queries=["What is the weather in Oslo?"],
        expected_tool_calls=[[ExpectedToolCall("get_weather", {"city": "Oslo"})]],
        evaluators=[tool_calls_present, tool_call_args_match],
    )
    [item] = results.input_items
    assert [m.role for m in item.conversation][:3] == ["user", "assistant", "tool"]
    assert [t.name for t in item.tools or []] == ["get_weather"]
    assert item.usage is not None
    assert (item.usage.total_tokens or 0) > (item.usage.input_tokens or 0) > 100
    [scored] = results.items
    by_name = {s.name: s for s in scored.scores}
    assert by_name["tool_calls_present"].passed is True
    assert by_name["tool_call_args_match"].passed is True


def _content_for_tool_call_turns(
    message: Any, prepared: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """MAF's message_preparer hook: a tool-call turn goes out with content "" (llama-cpp-python's
    server refuses an assistant message without a string content)."""
    out = []
    for m in prepared:
        wire = dict(m)
        if wire.get("role") == "assistant" and wire.get("tool_calls") and not wire.get("content"):
            wire["content"] = ""
        out.append(wire)
    return out


async def test_maf_agent_over_mafs_openai_client_is_evaluated(
    local_server: LocalModelServer,
) -> None:
    """A real MAF Agent on agent-framework-openai's chat-completions client, on the same server, is evaluated through evalpipe: transcript, tool schemas, usage."""
    af = pytest.importorskip("agent_framework")
    maf_openai = pytest.importorskip("agent_framework.openai")

    @af.tool(name="get_weather")
    def maf_get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return json.dumps(get_weather(city))

    client = maf_openai.OpenAIChatCompletionClient(
        TOOLS_MODEL_ID,
        api_key="unused-by-a-local-server",
        base_url=local_server.base_url,
        message_preparer=_content_for_tool_call_turns,
        function_invocation_configuration={"max_function_calls": 1},
    )
    maf_agent = af.Agent(
        client=client,
        name="maf-weather",
        instructions=INSTRUCTIONS,
        tools=[maf_get_weather],
        default_options={"max_tokens": 48},
    )
    [results] = await evaluate_agent(
        agent=maf_agent,
        queries=["What's the weather in Paris?"],
        expected_tool_calls=[[ExpectedToolCall("get_weather", {"city": "Paris"})]],
        evaluators=[tool_calls_present, tool_call_args_match],
    )
    assert results.run_id == "Eval: maf-weather"
    [item] = results.input_items
    assert item.error_code is None, item.error_message
    assert [m.role for m in item.conversation] == ["user", "assistant", "tool", "assistant"]
    assert [t.name for t in item.tools or []] == ["get_weather"]
    assert item.usage is not None
    assert (item.usage.input_tokens or 0) > 100
    assert item.usage.total_tokens == (item.usage.input_tokens or 0) + (
        item.usage.output_tokens or 0
    )
    by_name = {s.name: s for s in results.items[0].scores}
    assert by_name["tool_calls_present"].passed is True
