"""The scripted demo agent: real tool calls, recorded transcripts, deterministic answers."""

from __future__ import annotations

from evalpipe import AgentResponse, Message
from evalpipe.targets.demo import get_weather, travel_agent


async def test_weather_query_calls_the_tool_and_answers_from_its_result() -> None:
    """A weather question yields call → result → answer built from the tool's real output."""
    response = await travel_agent().run([Message("user", ["What's the weather in Paris?"])])
    assert isinstance(response, AgentResponse)
    assert [m.role for m in response.messages] == ["assistant", "tool", "assistant"]
    call = response.messages[0].function_calls[0]
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    assert response.messages[1].function_results[0].result == get_weather("Paris")
    assert response.text == "It is sunny and 22°C in Paris."
    assert response.usage is not None
    assert response.usage.total_tokens


async def test_failing_tool_is_recorded_not_raised() -> None:
    """An unknown city makes the tool raise; the error is the tool result and the agent apologises."""
    response = await travel_agent().run([Message("user", ["What's the weather in Atlantis?"])])
    result = response.messages[1].function_results[0].result
    assert result == {"error": "LookupError: no weather data for 'Atlantis'"}
    assert "could not find" in response.text


async def test_declared_tools_are_schema_snapshots() -> None:
    """The agent declares JSON-schema snapshots of its tool functions, also carried by responses."""
    agent = travel_agent()
    assert [t.name for t in agent.tools] == ["get_weather", "search_hotels"]
    assert agent.tools[0].parameters["required"] == ["city"]
    response = await agent.run("Find me a hotel in Tokyo")
    assert response.tools == agent.tools
    assert "Sakura Stay" in response.text


# --- transient retries in call_agent ------------------------------------------------------------


class _Flaky:
    """Fails with the given exceptions first, then answers."""

    name = "flaky"

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def run(self, messages: object, **kwargs: object) -> object:
        from evalpipe import AgentResponse, Message

        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return AgentResponse(messages=[Message("assistant", ["ok"])])


async def test_call_agent_retries_transient_errors_then_succeeds() -> None:
    """Timeouts, connection errors and 429/5xx statuses are retried up to `attempts`."""
    import httpx

    from evalpipe.targets.base import call_agent

    request = httpx.Request("POST", "http://127.0.0.1/x")
    throttled = httpx.HTTPStatusError(
        "429",
        request=request,
        response=httpx.Response(429, headers={"retry-after": "0"}, request=request),
    )
    agent = _Flaky(httpx.ConnectError("refused"), throttled, TimeoutError())
    run = await call_agent(agent, "q", query_index=0, repetition=0, attempts=4, retry_wait=0.001)
    assert run.ok
    assert run.attempts == 4
    assert agent.calls == 4


async def test_call_agent_does_not_retry_bugs_and_reports_attempts() -> None:
    """A non-transient error is not retried; exhausting attempts says how many were made."""
    from evalpipe.targets.base import call_agent

    bug = _Flaky(ValueError("bad input"))
    run = await call_agent(bug, "q", query_index=0, repetition=0, attempts=5, retry_wait=0.001)
    assert run.error_code == "AgentError"
    assert bug.calls == 1
    assert run.attempts == 1
    down = _Flaky(*(ConnectionError("down") for _ in range(3)))
    run = await call_agent(down, "q", query_index=0, repetition=0, attempts=3, retry_wait=0.001)
    assert run.error_code == "AgentError"
    assert down.calls == 3
    assert run.error_message == "ConnectionError: down (after 3 attempts)"
