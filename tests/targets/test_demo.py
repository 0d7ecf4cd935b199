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
