"""Scripted demo agents: deterministic, offline, with real tool functions.

These are NOT language models. A demo agent picks its tool calls with simple rules, really runs the
Python tool functions, and writes its answer from a template. They exist so ``make demo`` and the tests
show real transcripts (tool calls, tool results, answers) with no model and no network.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from evalpipe.messages import (
    FunctionCallContent,
    FunctionResultContent,
    Message,
    ToolDefinition,
)
from evalpipe.targets.base import AgentResponse
from evalpipe.transcripts import RunUsage

__all__ = [
    "CITIES",
    "ScriptedAgent",
    "get_weather",
    "last_assistant_text",
    "last_user_text",
    "search_hotels",
    "travel_agent",
]

CITIES: dict[str, dict[str, Any]] = {
    city.lower(): {"city": city, "condition": condition, "temp_c": temp_c, "hotels": hotels}
    for city, condition, temp_c, hotels in [
        ("Paris", "sunny", 22, ["Hotel Lumiere", "Le Petit Nid"]),
        ("London", "rainy", 14, ["The Thames Inn"]),
        ("Tokyo", "cloudy", 18, ["Sakura Stay", "Shinjuku Tower"]),
        ("New York", "sunny", 25, ["Hudson Rooms"]),
        ("Oslo", "snowy", -3, ["Fjord Lodge"]),
    ]
}
"""The demo's world, keyed by the lower-case city name."""


def get_weather(city: str) -> dict[str, Any]:
    """Get the current weather for a city."""
    data = CITIES.get(city.strip().lower())
    if data is None:
        raise LookupError(f"no weather data for {city!r}")
    return {"city": data["city"], "condition": data["condition"], "temp_c": data["temp_c"]}


def search_hotels(city: str, max_results: int = 3) -> list[str]:
    """Search hotels with free rooms in a city."""
    data = CITIES.get(city.strip().lower())
    if data is None:
        raise LookupError(f"no hotels known in {city!r}")
    return list(data["hotels"][:max_results])


Plan = Callable[[str], list[tuple[str, dict[str, Any]]]]
Compose = Callable[[str, list[tuple[str, dict[str, Any], Any, bool]]], str]
Read = Callable[[list[Message]], str]
"""Picks the text a scripted agent works from out of the messages it received."""


def last_user_text(messages: list[Message]) -> str:
    """The text of the last user message (what a single agent answers)."""
    return next((m.text for m in reversed(messages) if m.role == "user"), "")


def last_assistant_text(messages: list[Message]) -> str:
    """The text of the last assistant message with text (what an upstream agent said), else the
    last user text."""
    for message in reversed(messages):
        if message.role == "assistant" and message.text:
            return message.text
    return last_user_text(messages)


class ScriptedAgent:
    """An agent whose tool calls are chosen by a rule (``plan``) and whose answer is a template.

    The tools really run; a tool that raises is recorded as an error result, as a real agent loop
    would send it back to the model. ``latency`` adds an ``asyncio.sleep`` per run to stand in for
    model time. ``read`` picks the text the agent works from (default: the last user message; in a
    workflow, ``last_assistant_text`` reads what the agent before it said).
    """

    def __init__(
        self,
        name: str,
        *,
        instructions: str,
        tools: Sequence[Callable[..., Any]],
        plan: Plan,
        compose: Compose,
        latency: float = 0.0,
        read: Read | None = None,
    ) -> None:
        self.name = name
        self.instructions = instructions
        self._functions = {fn.__name__: fn for fn in tools}
        self.tools = [ToolDefinition.from_function(fn) for fn in tools]
        self._plan = plan
        self._compose = compose
        self.latency = latency
        self._read: Read = read or last_user_text

    async def run(self, messages: Sequence[Message] | str, **kwargs: Any) -> AgentResponse:
        """Answer the text ``read`` picks (by default the last user message)."""
        if isinstance(messages, str):
            query = messages
        else:
            query = self._read([Message.coerce(m) for m in messages])
        if self.latency:
            await asyncio.sleep(self.latency)
        out: list[Message] = []
        results: list[tuple[str, dict[str, Any], Any, bool]] = []
        for step, (tool, args) in enumerate(self._plan(query)):
            call_id = f"call_{step + 1}"
            out.append(
                Message(
                    "assistant", [FunctionCallContent(name=tool, arguments=args, call_id=call_id)]
                )
            )
            try:
                value: Any = self._functions[tool](**args)
                ok = True
            except Exception as exc:
                value, ok = {"error": f"{type(exc).__name__}: {exc}"}, False
            results.append((tool, args, value, ok))
            out.append(Message("tool", [FunctionResultContent(call_id=call_id, result=value)]))
        answer = self._compose(query, results)
        out.append(Message("assistant", [answer], author_name=self.name))
        words = len(query.split()) + len(self.instructions.split())
        produced = len(answer.split()) + sum(
            len(json.dumps(r[2], default=str).split()) for r in results
        )
        return AgentResponse(
            messages=out,
            usage=RunUsage(
                input_tokens=words, output_tokens=produced, total_tokens=words + produced
            ),
            tools=list(self.tools),
        )


def find_city(text: str) -> str | None:
    """The first known city named in the text, or a capitalised word after "in"/"for"."""
    lowered = text.lower()
    for key, data in CITIES.items():
        if key in lowered:
            return str(data["city"])
    match = re.search(r"\b(?:in|for|to)\s+([A-Z][a-zA-Z]+)", text)
    return match.group(1) if match else None


def _travel_plan(query: str) -> list[tuple[str, dict[str, Any]]]:
    city = find_city(query)
    if city is None:
        return []
    lowered = query.lower()
    calls: list[tuple[str, dict[str, Any]]] = []
    if any(w in lowered for w in ("weather", "umbrella", "pack", "temperature", "trip")):
        calls.append(("get_weather", {"city": city}))
    if any(w in lowered for w in ("hotel", "stay", "room", "trip")):
        calls.append(("search_hotels", {"city": city}))
    return calls


def _travel_compose(query: str, results: list[tuple[str, dict[str, Any], Any, bool]]) -> str:
    if not results:
        return (
            "I can help with the weather and hotels for a city. Which city are you interested in?"
        )
    parts: list[str] = []
    for tool, args, value, ok in results:
        if not ok:
            parts.append(
                f"Sorry, I could not find {tool.split('_', 1)[1]} information for {args['city']}."
            )
        elif tool == "get_weather":
            parts.append(f"It is {value['condition']} and {value['temp_c']}°C in {value['city']}.")
            if value["condition"] == "rainy":
                parts.append("Pack an umbrella.")
        elif tool == "search_hotels":
            parts.append(f"Hotels with free rooms in {args['city']}: {', '.join(value)}.")
    return " ".join(parts)


def travel_agent(latency: float = 0.0) -> ScriptedAgent:
    """A scripted weather-and-hotels assistant (the ``make demo`` agent)."""
    return ScriptedAgent(
        "travel-assistant",
        instructions="You help travellers with the weather and hotels. Use the tools; never guess.",
        tools=[get_weather, search_hotels],
        plan=_travel_plan,
        compose=_travel_compose,
        latency=latency,
    )
