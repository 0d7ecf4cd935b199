"""Real MAF objects for the MAF-parity tests: agents over MAF's own chat-client base with a scripted
fake model, a tool, and a view of EvalResults that both MAF's and evalpipe's results answer.

Import only after ``pytest.importorskip("agent_framework")``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import agent_framework as af

__all__ = ["ScriptedModel", "get_weather", "results_view", "retrieve_memory", "weather_agent"]


@af.tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return json.dumps({"city": city, "condition": "sunny"})


@af.tool
def retrieve_memory(topic: str) -> str:
    """Look something up in the user's memory."""
    return f"The user likes {topic}."


class ScriptedModel(af.FunctionInvocationLayer, af.BaseChatClient):  # type: ignore[misc]
    """A fake model. With tools it first calls the first tool (``{"city": "Paris"}`` for
    get_weather, ``{"topic": "trains"}`` otherwise), then answers ``answer`` once the tool result
    is in; without tools it answers at once. Streams when asked to."""

    def __init__(self, answer: str = "It is sunny in Paris.", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answer = answer

    def _reply(self, messages: Sequence[Any], options: Mapping[str, Any]) -> Any:
        tools = options.get("tools") or []
        if messages[-1].role == "tool" or not tools:
            return af.ChatResponse(
                messages=[af.Message(role="assistant", contents=[self.answer])],
                usage_details={
                    "input_token_count": 12,
                    "output_token_count": 6,
                    "total_token_count": 18,
                },
            )
        name = tools[0].name
        args = {"city": "Paris"} if name == "get_weather" else {"topic": "trains"}
        call = af.Content.from_function_call("c1", name, arguments=args)
        return af.ChatResponse(messages=[af.Message(role="assistant", contents=[call])])

    def _inner_get_response(
        self, *, messages: Sequence[Any], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> Any:
        if stream:

            async def updates() -> AsyncIterator[Any]:
                for message in self._reply(messages, options).messages:
                    yield af.ChatResponseUpdate(role=message.role, contents=list(message.contents))

            return self._build_response_stream(updates())

        async def respond() -> Any:
            return self._reply(messages, options)

        return respond()


def weather_agent(cls: type = af.Agent, **kwargs: Any) -> Any:
    """A MAF agent (``cls``: Agent or a subclass) with get_weather over the scripted model."""
    return cls(client=ScriptedModel(), name="weather", tools=[get_weather], **kwargs)


def results_view(result: Any) -> dict[str, Any]:
    """What MAF's EvalResults and evalpipe's share, as plain data: names, status, counts, the error
    text, and per item its status and each score's name, verdict, score and reason (sub-results
    by key). Item ids are left out (evalpipe's are unique across a workflow's tree)."""
    return {
        "provider": result.provider,
        "run_id": result.run_id,
        "status": result.status,
        "result_counts": result.result_counts,
        "per_evaluator": result.per_evaluator,
        "error": result.error,
        "all_passed": result.all_passed,
        "items": [
            {
                "status": item.status,
                "scores": [
                    (s.name, s.passed, s.score, (s.sample or {}).get("reason")) for s in item.scores
                ],
                "input_text": item.input_text,
                "output_text": item.output_text,
            }
            for item in result.items
        ],
        "sub_results": {k: results_view(v) for k, v in (result.sub_results or {}).items()},
    }
