"""A real MAF Agent (agent-framework-core, over its own chat-client base) is an evalpipe target."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

import pytest

from evalpipe import ExpectedToolCall, evaluate_agent, keyword_check, tool_call_args_match

af = pytest.importorskip("agent_framework")
pytestmark = pytest.mark.filterwarnings("ignore::Warning")


@af.tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return json.dumps({"city": city, "condition": "sunny"})


class ScriptedModel(af.FunctionInvocationLayer, af.BaseChatClient):  # type: ignore[misc]
    """A fake model: first asks for get_weather, then answers from the tool result."""

    def _inner_get_response(
        self, *, messages: Sequence[Any], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> Awaitable[Any]:
        async def respond() -> Any:
            if messages[-1].role == "tool":
                return af.ChatResponse(
                    messages=[af.Message(role="assistant", contents=["It is sunny in Paris."])],
                    usage_details={
                        "input_token_count": 12,
                        "output_token_count": 6,
                        "total_token_count": 18,
                    },
                )
            call = af.Content.from_function_call("c1", "get_weather", arguments={"city": "Paris"})
            return af.ChatResponse(messages=[af.Message(role="assistant", contents=[call])])

        return respond()


async def test_maf_agent_runs_are_evaluated_with_tools_and_usage() -> None:
    """evaluate_agent runs a MAF Agent: its transcript, tool schemas and token usage reach the items."""
    agent = af.Agent(
        client=ScriptedModel(), name="weather", instructions="Help.", tools=[get_weather]
    )
    [result] = await evaluate_agent(
        agent=agent,
        queries=["What's the weather in Paris?"],
        expected_tool_calls=[ExpectedToolCall("get_weather", {"city": "Paris"})],
        evaluators=[keyword_check("sunny"), tool_call_args_match],
        num_repetitions=2,
    )
    assert result.run_id == "Eval: weather"
    assert result.result_counts == {"passed": 2, "failed": 0, "errored": 0}
    item = result.input_items[0]
    assert [m.role for m in item.conversation] == ["user", "assistant", "tool", "assistant"]
    assert [t.name for t in item.tools or []] == ["get_weather"]
    assert (item.tools or [])[0].parameters["required"] == ["city"]
    assert item.usage is not None
    assert item.usage.total_tokens == 18


async def test_maf_responses_are_evaluated_without_rerunning() -> None:
    """A MAF AgentResponse passed as responses= is read as it is (contents, usage_details)."""
    agent = af.Agent(client=ScriptedModel(), name="weather", tools=[get_weather])
    response = await agent.run("What's the weather in Paris?")
    [result] = await evaluate_agent(
        agent=agent,
        queries="What's the weather in Paris?",
        responses=response,
        evaluators=keyword_check("sunny"),
    )
    assert result.passed == 1
    assert result.input_items[0].response == "It is sunny in Paris."


def test_maf_serialised_messages_load() -> None:
    """Messages MAF serialised with to_dict() load as evalpipe Messages with the same contents."""
    from evalpipe import Message

    maf_messages = [
        af.Message(
            role="assistant",
            contents=[
                af.Content.from_function_call("c1", "get_weather", arguments={"city": "Paris"})
            ],
        ),
        af.Message(role="tool", contents=[af.Content.from_function_result("c1", result="sunny")]),
        af.Message(role="assistant", contents=["It is sunny."], author_name="weather"),
    ]
    loaded = [Message.model_validate(json.loads(json.dumps(m.to_dict()))) for m in maf_messages]
    assert [m.role for m in loaded] == ["assistant", "tool", "assistant"]
    assert loaded[0].function_calls[0].arguments == {"city": "Paris"}
    assert loaded[1].function_results[0].result == "sunny"
    assert (loaded[2].text, loaded[2].author_name) == ("It is sunny.", "weather")
