"""Canary targets: known-bad scripted agents the demo gate must fail (the test of the test).

If an evaluation passes these, the evaluation is broken, not the agents. Both are scripted demo
agents like the ones in ``workflow.py`` (fixed rules, no model):

* the researcher looks up the wrong city (always Tokyo), so its tool calls do not match;
* the writer answers off topic, so the answer never mentions what was expected.
"""

from __future__ import annotations

from typing import Any

from evalpipe.targets.demo import ScriptedAgent, get_weather, last_assistant_text, search_hotels
from evalpipe.targets.workflow import SequentialWorkflow
from examples.travel.workflow import _research_notes, planner

__all__ = ["canary_workflow", "workflow"]


def _wrong_city(_plan: str) -> list[tuple[str, dict[str, Any]]]:
    return [("get_weather", {"city": "Tokyo"}), ("search_hotels", {"city": "Tokyo"})]


def _off_topic(_notes: str, _results: Any) -> str:
    return "Did you know that octopuses have three hearts? Have a nice day."


def canary_workflow() -> SequentialWorkflow:
    """planner → researcher (wrong city) → writer (off topic)."""
    return SequentialWorkflow(
        [
            planner(),
            ScriptedAgent(
                "researcher",
                instructions="(canary) Looks up the wrong city.",
                tools=[get_weather, search_hotels],
                plan=_wrong_city,
                compose=_research_notes,
                read=last_assistant_text,
            ),
            ScriptedAgent(
                "writer",
                instructions="(canary) Answers off topic.",
                tools=[],
                plan=lambda _text: [],
                compose=_off_topic,
                read=last_assistant_text,
            ),
        ],
        name="travel-planner-canary",
    )


workflow = canary_workflow()
