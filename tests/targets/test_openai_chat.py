"""OpenAIChatAgent against a loopback OpenAI-compatible server with scripted tool-calling replies."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken

from evalpipe import (
    Agent,
    ExpectedToolCall,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    evaluate_agent,
    keyword_check,
    tool_call_args_match,
)
from evalpipe.cache import ResponseCache
from evalpipe.evaluators.judge import JudgeEvaluator
from evalpipe.llm import ChatEndpoint, ChatHTTPError
from evalpipe.targets.openai_chat import OpenAIChatAgent
from fakes.openai_server import (
    CapturedRequest,
    FakeOpenAIServer,
    Reply,
    chat,
    closed_port,
    refusal,
    status,
    tool_calls,
    verdict,
)


def get_weather(city: str, unit: str = "C") -> dict[str, Any]:
    """Get the current weather for a city."""
    return {"city": city, "condition": "sunny", "temperature": f"21°{unit}"}


async def get_time(city: str) -> str:
    """Get the local time in a city."""
    return f"12:00 in {city}"


def broken_tool(city: str) -> str:
    """A tool whose backend is down."""
    raise ConnectionError(f"weather service unreachable for {city}")


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def agent(server: FakeOpenAIServer, **kwargs: Any) -> OpenAIChatAgent:
    kwargs.setdefault("tools", [get_weather, get_time, broken_tool])
    kwargs.setdefault("instructions", "You are a weather assistant.")
    return OpenAIChatAgent(server.base_url, "agent-model", **kwargs)


def parts(messages: list[Message]) -> list[tuple[str, str]]:
    return [(m.role, c.type) for m in messages for c in m.contents]


async def test_tool_loop_records_calls_results_final_text_usage_and_tools(
    server: FakeOpenAIServer,
) -> None:
    """The agent executes the requested tool, sends its result back and returns the whole transcript."""
    server.script(
        tool_calls(("get_weather", {"city": "Paris"})),
        chat("It is sunny and 21°C in Paris."),
    )
    bot = agent(server)
    response = await bot.run([Message("user", ["Weather in Paris?"])])
    assert parts(response.messages) == [
        ("assistant", "function_call"),
        ("tool", "function_result"),
        ("assistant", "text"),
    ]
    call = response.messages[0].contents[0]
    assert isinstance(call, FunctionCallContent)
    assert (call.name, call.parsed_arguments(), call.call_id) == (
        "get_weather",
        {"city": "Paris"},
        "call_0",
    )
    result = response.messages[1].contents[0]
    assert isinstance(result, FunctionResultContent)
    assert result.call_id == "call_0"
    assert result.result == {"city": "Paris", "condition": "sunny", "temperature": "21°C"}
    assert response.text == "It is sunny and 21°C in Paris."
    assert response.messages[2].author_name == "agent-model"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (20, 10)
    assert response.usage.total_tokens == 30
    assert [t.name for t in response.tools or []] == ["get_weather", "get_time", "broken_tool"]
    assert response.tools is not None
    assert response.tools[0].parameters["required"] == ["city"]

    first, second = server.requests
    assert first.messages == [
        {"role": "system", "content": "You are a weather assistant."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert first.body["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in first.body["tools"]] == [
        "get_weather",
        "get_time",
        "broken_tool",
    ]
    assert (first.body["temperature"], first.body["seed"]) == (0.0, 42)
    assert second.messages[2]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    # a tool-call turn goes back with content "" (llama-cpp-python's server refuses null)
    assert second.messages[2]["content"] == ""
    assert second.messages[3] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "content": json.dumps({"city": "Paris", "condition": "sunny", "temperature": "21°C"}),
    }


async def test_parallel_calls_sync_and_async_tools(server: FakeOpenAIServer) -> None:
    """Two calls in one turn (a sync and an async tool) both run and answer in call order."""
    server.script(
        tool_calls(("get_weather", {"city": "Rome", "unit": "F"}), ("get_time", {"city": "Rome"})),
        chat("Sunny, noon."),
    )
    response = await agent(server).run("Weather and time in Rome?")
    [tool_message] = [m for m in response.messages if m.role == "tool"]
    assert [(r.call_id, r.result) for r in tool_message.function_results] == [
        ("call_0", {"city": "Rome", "condition": "sunny", "temperature": "21°F"}),
        ("call_1", "12:00 in Rome"),
    ]
    assert [m["role"] for m in server.requests[1].messages][-3:] == ["assistant", "tool", "tool"]


async def test_malformed_tool_arguments_are_recorded_and_the_loop_continues(
    server: FakeOpenAIServer,
) -> None:
    """A call with broken argument JSON keeps its raw arguments, gets an error result, and the run goes on."""
    server.script(
        tool_calls(("get_weather", '{"city": "Par')),
        tool_calls(("get_weather", '["Paris"]')),
        chat("Sorry, I could not get the weather."),
    )
    response = await agent(server).run("Weather in Paris?")
    calls = [c for m in response.messages for c in m.function_calls]
    assert [c.arguments for c in calls] == ['{"city": "Par', '["Paris"]']
    results = [r.result for m in response.messages for r in m.function_results]
    assert all("are not a JSON object" in r for r in results)
    assert response.text == "Sorry, I could not get the weather."
    assert len(server.requests) == 3
    assert (
        server.requests[1].messages[-1]["content"].startswith("Error: the arguments of get_weather")
    )


async def test_raising_and_unknown_tools_become_error_results(server: FakeOpenAIServer) -> None:
    """A tool that raises, and a call to a tool the agent does not have, become error tool results."""
    server.script(
        tool_calls(("broken_tool", {"city": "Oslo"}), ("launch_rocket", {})),
        chat("The weather service is down."),
    )
    response = await agent(server).run("Weather in Oslo?")
    results = [r.result for m in response.messages for r in m.function_results]
    assert results == [
        "Error: ConnectionError: weather service unreachable for Oslo",
        "Error: unknown tool 'launch_rocket' (available: get_weather, get_time, broken_tool)",
    ]
    assert response.text == "The weather service is down."


async def test_loop_is_bounded_by_max_steps(server: FakeOpenAIServer) -> None:
    """A model that keeps calling tools gets max_steps calls; the last asks for text with tool_choice none."""
    server.responder = lambda _r: tool_calls(("get_weather", {"city": "Paris"}))
    response = await agent(server, max_steps=3).run("Weather?")
    assert len(server.requests) == 3
    assert [r.body["tool_choice"] for r in server.requests] == ["auto", "auto", "none"]
    assert parts(response.messages) == [
        ("assistant", "function_call"),
        ("tool", "function_result"),
        ("assistant", "function_call"),
        ("tool", "function_result"),
        ("assistant", "function_call"),
    ]
    # Regression: the run ended on an unanswered tool call and was scored as an empty answer.
    assert response.error_code == "MaxStepsExceeded"
    assert "max_steps=3" in (response.error_message or "")


async def test_a_run_that_ends_without_an_answer_is_an_errored_item(
    server: FakeOpenAIServer,
) -> None:
    """Through evaluate_agent, the unanswered run is errored (not failed or passed), its
    transcript kept."""
    from evalpipe import evaluate_agent, keyword_check

    server.responder = lambda _r: tool_calls(("get_weather", {"city": "Paris"}))
    [result] = await evaluate_agent(
        agent=agent(server, max_steps=2), queries=["Weather?"], evaluators=keyword_check("Paris")
    )
    [item] = result.items
    assert (item.status, item.error_code) == ("error", "MaxStepsExceeded")
    assert result.input_items[0].function_calls


async def test_429_and_5xx_are_retried_inside_the_loop(server: FakeOpenAIServer) -> None:
    """A 429 with Retry-After before the first step and a 5xx burst before the second are retried."""
    server.script(
        status(429, headers={"retry-after-ms": "50"}),
        tool_calls(("get_time", {"city": "Lima"})),
        status(502),
        status(500),
        chat("It is noon in Lima."),
    )
    bot = OpenAIChatAgent(
        endpoint=ChatEndpoint(base_url=server.base_url, model="agent-model", retry_backoff=0.01),
        tools=[get_time],
    )
    response = await bot.run("Time in Lima?")
    assert response.text == "It is noon in Lima."
    assert len(server.requests) == 5


async def test_endpoint_failure_raises_for_evaluate_agent_to_record(
    server: FakeOpenAIServer,
) -> None:
    """When the endpoint fails past its retries, run raises ChatHTTPError (evaluate_agent makes it an errored item)."""
    server.responder = lambda _r: status(400, message="model not found")
    with pytest.raises(ChatHTTPError, match="model not found"):
        await agent(server).run("hi")


async def test_refusal_is_kept_as_the_assistant_text(server: FakeOpenAIServer) -> None:
    """A refusal (content null, refusal set) becomes the assistant's text in the transcript."""
    server.script(refusal("I can't help with that."))
    response = await agent(server, tools=[]).run("Something forbidden")
    assert response.text == "I can't help with that."
    assert "tools" not in server.requests[0].body


async def test_azure_endpoint_and_api_key_header(server: FakeOpenAIServer) -> None:
    """With an Azure endpoint the agent posts to the deployment URL with the api-key header."""
    endpoint = ChatEndpoint(
        base_url=server.origin,
        model="gpt-4o",
        api_type="azure",
        azure_deployment="chat-dep",
        api_key="azure-key",
    )
    bot = OpenAIChatAgent(endpoint=endpoint, instructions="Be brief.")
    await bot.run("hi")
    [req] = server.requests
    assert req.path == "/openai/deployments/chat-dep/chat/completions"
    assert req.headers["api-key"] == "azure-key"
    assert "azure-key" not in repr(bot)


def route(request: CapturedRequest) -> Reply:
    """One server for agent and judge: the judge model scores, the agent model calls a tool once."""
    if request.body["model"] == "judge-model":
        return verdict(5 if "sunny" in request.text else 2)
    if request.messages[-1]["role"] == "tool":
        return chat("It is sunny in Paris.")
    return tool_calls(("get_weather", {"city": "Paris"}))


async def test_evaluate_agent_runs_the_agent_and_judges_it(server: FakeOpenAIServer) -> None:
    """evaluate_agent runs OpenAIChatAgent for each repetition and both local checks and the judge score it."""
    server.responder = route
    async with agent(server) as bot:
        assert isinstance(bot, Agent)
        local, judged = await evaluate_agent(
            agent=bot,
            queries=["What's the weather in Paris?"],
            expected_tool_calls=[ExpectedToolCall("get_weather", {"city": "Paris"})],
            evaluators=[
                keyword_check("sunny"),
                tool_call_args_match,
                JudgeEvaluator(
                    {"base_url": server.base_url, "model": "judge-model"},
                    metrics=["relevance", "tool_call_accuracy"],
                ),
            ],
            num_repetitions=2,
        )
    assert local.result_counts == {"passed": 2, "failed": 0, "errored": 0}
    assert judged.result_counts == {"passed": 2, "failed": 0, "errored": 0}
    item = local.input_items[0]
    assert [m.role for m in item.conversation] == ["user", "assistant", "tool", "assistant"]
    assert item.usage is not None
    assert item.usage.total_tokens == 30
    assert [t.name for t in item.tools or []] == ["get_weather", "get_time", "broken_tool"]


async def test_runs_replay_from_the_cache_per_repetition(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Two runs of one query record two entries; replayed offline they come back in the same order."""
    server.script(chat("first answer"), chat("second answer"))
    recorder = agent(server, cache=ResponseCache(tmp_path))
    recorded = [(await recorder.run("Hello?")).text for _ in range(2)]
    assert recorded == ["first answer", "second answer"]
    offline = OpenAIChatAgent(
        f"http://127.0.0.1:{closed_port()}/v1",
        "agent-model",
        "You are a weather assistant.",
        [get_weather, get_time, broken_tool],
        cache=ResponseCache(tmp_path, mode="replay"),
    )
    replayed = [(await offline.run("Hello?")).text for _ in range(2)]
    assert replayed == recorded
    assert len(server.requests) == 2


def test_constructor_errors_are_clear() -> None:
    """Missing model, endpoint plus base_url, max_steps < 1 and duplicate tool names are ValueErrors."""
    with pytest.raises(ValueError, match="needs base_url and model"):
        OpenAIChatAgent("http://127.0.0.1:1/v1")
    endpoint = ChatEndpoint(base_url="http://127.0.0.1:1/v1", model="m")
    with pytest.raises(ValueError, match="not both"):
        OpenAIChatAgent("http://127.0.0.1:1/v1", endpoint=endpoint)
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        OpenAIChatAgent(endpoint=endpoint, max_steps=0)
    with pytest.raises(ValueError, match="two tools are named 'get_weather'"):
        OpenAIChatAgent(endpoint=endpoint, tools=[get_weather, get_weather])


async def test_endpoint_options_and_cache_mapping_as_a_suite_passes_them(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """ChatEndpoint fields and a cache mapping can be given as keywords, as a suite's {openai: {...}} does."""
    server.script(chat("hello"))
    bot = OpenAIChatAgent(
        server.base_url,
        "agent-model",
        api_type="azure",
        api_key="k",
        max_retries=0,
        cache={"directory": str(tmp_path), "mode": "record"},
    )
    assert (await bot.run("hi")).text == "hello"
    assert server.requests[0].headers["api-key"] == "k"
    assert bot.cache is not None
    assert len(bot.cache.entries()) == 1
    with pytest.raises(ValueError, match="max_retires"):
        OpenAIChatAgent(server.base_url, "m", max_retires=3)
    with pytest.raises(ValueError, match="mode"):
        OpenAIChatAgent(server.base_url, "m", cache={"directory": "x", "mode": "sometimes"})


class AsyncCountingCredential:
    """An async azure-identity style credential that counts its token requests."""

    def __init__(self) -> None:
        self.calls = 0

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.calls += 1
        return AccessToken(f"token-{self.calls}", int(time.time()) + 3600)


async def test_entra_token_is_fetched_once_for_all_runs(server: FakeOpenAIServer) -> None:
    """An async credential's token is fetched once and reused by every run of the agent."""
    credential = AsyncCountingCredential()
    bot = OpenAIChatAgent(server.base_url, "agent-model", api_type="azure", credential=credential)
    await bot.run("one")
    await bot.run("two")
    assert credential.calls == 1
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer token-1"] * 2
