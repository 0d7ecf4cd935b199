"""The demo workflow: a three-agent travel planner (planner → researcher with tools → writer).

These are scripted demo agents, not language models: each follows fixed rules and templates, and the
researcher really runs the Python tool functions ``get_weather`` and ``search_hotels``. They are
deterministic and offline, so ``make demo`` shows per-agent sub-results with no model and no network.

The writer has one deliberate, scripted weakness: it leaves the temperature out of its answer, so an
evaluation that expects "°C" passes the researcher and fails the writer (and the overall answer).

``workflow`` is the object the demo suite points at (``examples.travel.workflow:workflow``);
``travel_workflow()`` builds a new one.
"""

from __future__ import annotations

import re
from typing import Any

from evalpipe.targets.demo import (
    ScriptedAgent,
    find_city,
    get_weather,
    last_assistant_text,
    search_hotels,
)
from evalpipe.targets.workflow import SequentialWorkflow

__all__ = ["planner", "researcher", "travel_workflow", "workflow", "writer"]

Results = list[tuple[str, dict[str, Any], Any, bool]]

_WEATHER_WORDS = ("weather", "umbrella", "pack", "temperature", "trip", "visit", "plan")
_HOTEL_WORDS = ("hotel", "stay", "room", "trip", "visit", "plan")


def _no_tools(_text: str) -> list[tuple[str, dict[str, Any]]]:
    return []


def _plan_steps(query: str, _results: Results) -> str:
    city = find_city(query)
    if city is None:
        return "Plan: no destination given. Ask the traveller which city they mean."
    lowered = query.lower()
    steps = []
    if any(w in lowered for w in _WEATHER_WORDS):
        steps.append(f"check the weather in {city}")
    if any(w in lowered for w in _HOTEL_WORDS):
        steps.append(f"find hotels in {city}")
    if not steps:
        steps.append(f"check the weather in {city}")
    return f"Plan for {city}: " + "; ".join(steps) + "."


def planner(latency: float = 0.0) -> ScriptedAgent:
    """Turns the traveller's request into research steps (no tools)."""
    return ScriptedAgent(
        "planner",
        instructions="Break the traveller's request into research steps for the researcher.",
        tools=[],
        plan=_no_tools,
        compose=_plan_steps,
        latency=latency,
    )


def _research_calls(plan: str) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    for step in re.findall(r"(check the weather|find hotels) in ([A-Z][\w ]*?)(?=[;.])", plan):
        action, city = step
        tool = "get_weather" if action == "check the weather" else "search_hotels"
        calls.append((tool, {"city": city}))
    return calls


def _research_notes(plan: str, results: Results) -> str:
    if not results:
        return "No research needed: the plan has no destination."
    notes = []
    for tool, args, value, ok in results:
        if not ok:
            notes.append(f"No {tool.split('_', 1)[1]} data for {args['city']}.")
        elif tool == "get_weather":
            notes.append(f"Weather in {value['city']}: {value['condition']}, {value['temp_c']}°C.")
        else:
            notes.append(f"Hotels with free rooms in {args['city']}: {', '.join(value)}.")
    return " ".join(notes)


def researcher(latency: float = 0.0) -> ScriptedAgent:
    """Carries out the planner's steps with the real tools and reports the facts."""
    return ScriptedAgent(
        "researcher",
        instructions="Carry out the plan with the tools and report the facts. Never guess.",
        tools=[get_weather, search_hotels],
        plan=_research_calls,
        compose=_research_notes,
        latency=latency,
        read=last_assistant_text,
    )


def _write_answer(notes: str, _results: Results) -> str:
    weather = re.search(r"Weather in ([\w ]+): (\w+), (-?\d+)°C\.", notes)
    hotels = re.search(r"Hotels with free rooms in ([\w ]+): ([^.]+)\.", notes)
    if weather is None and hotels is None:
        return "Which city would you like to travel to? I can plan the weather and hotels."
    city = (weather or hotels).group(1)  # type: ignore[union-attr]
    parts = [f"Your trip to {city}:"]
    if weather is not None:
        # Scripted weakness: the temperature is dropped (see the module docstring).
        parts.append(f"expect {weather.group(2)} weather.")
        if weather.group(2) in ("rainy", "snowy"):
            parts.append("Pack an umbrella." if weather.group(2) == "rainy" else "Pack warm.")
    if hotels is not None:
        parts.append(f"We suggest staying at {hotels.group(2).split(', ')[0]}.")
    parts.append("Enjoy!")
    return " ".join(parts)


def writer(latency: float = 0.0) -> ScriptedAgent:
    """Writes the traveller's answer from the researcher's notes (no tools)."""
    return ScriptedAgent(
        "writer",
        instructions="Write a short, friendly answer for the traveller from the research notes.",
        tools=[],
        plan=_no_tools,
        compose=_write_answer,
        latency=latency,
        read=last_assistant_text,
    )


def travel_workflow(latency: float = 0.0) -> SequentialWorkflow:
    """A new planner → researcher → writer workflow; ``latency`` seconds of simulated model time
    per agent turn."""
    return SequentialWorkflow(
        [planner(latency), researcher(latency), writer(latency)], name="travel-planner"
    )


workflow = travel_workflow(latency=0.02)
"""The demo target (an object; the agents keep no state between runs, so runs can overlap)."""
