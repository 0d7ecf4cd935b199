"""A real MAF Agent on an OpenAI-compatible endpoint (agent-framework-openai's chat-completions
client against the loopback OpenAI server) evaluated under both imports gives the same results:
the setup docs/maf-compatibility.md shows for a local model server (Ollama, vLLM, ...)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import evalpipe
from fakes.openai_server import CapturedRequest, FakeOpenAIServer, Reply, chat, tool_calls

af = pytest.importorskip("agent_framework")
maf_openai = pytest.importorskip("agent_framework.openai")
pytestmark = pytest.mark.filterwarnings("ignore::Warning")

from fakes.maf_models import get_weather, results_view  # noqa: E402


def _model(request: CapturedRequest) -> Reply:
    """A model that calls get_weather when it has tools, then answers from the tool result."""
    messages = request.messages
    if messages and messages[-1].get("role") == "tool":
        return chat(
            "It is sunny in Paris.",
            usage={"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37},
        )
    if (request.body or {}).get("tools"):
        return tool_calls(("get_weather", {"city": "Paris"}))
    return chat("I cannot check the weather.")


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    """The loopback OpenAI-compatible server with the scripted model."""
    with FakeOpenAIServer(_model) as running:
        yield running


def _agent(server: FakeOpenAIServer) -> Any:
    client = maf_openai.OpenAIChatCompletionClient(
        model="local-model", base_url=server.base_url, api_key="not-needed"
    )
    return af.Agent(client=client, name="weather", tools=[get_weather])


async def test_a_maf_agent_on_an_openai_compatible_endpoint_evaluates_as_in_maf(
    server: FakeOpenAIServer,
) -> None:
    """evaluate_agent over the agent-framework-openai client gives MAF's results; evalpipe also
    records the endpoint's token usage on the item."""
    views = []
    for module in (af, evalpipe):
        [result] = await module.evaluate_agent(
            agent=_agent(server),
            queries=["What's the weather in Paris?"],
            expected_tool_calls=[module.ExpectedToolCall("get_weather", {"city": "Paris"})],
            evaluators=[
                module.keyword_check("sunny"),
                module.tool_called_check("get_weather"),
                module.tool_call_args_match,
            ],
            num_repetitions=2,
        )
        views.append(results_view(result))
        if module is evalpipe:
            item = result.input_items[0]
            assert [m.role for m in item.conversation] == ["user", "assistant", "tool", "assistant"]
            assert item.usage is not None
            assert item.usage.total_tokens is not None
            assert item.usage.total_tokens >= 37
    assert views[1] == views[0]
    assert views[0]["result_counts"] == {"passed": 2, "failed": 0, "errored": 0}
    assert {r.path for r in server.requests} == {"/v1/chat/completions"}
    assert {r.body["model"] for r in server.requests} == {"local-model"}
