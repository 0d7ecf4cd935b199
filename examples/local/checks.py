"""Local checks for the real-model demo: deterministic, so they say plainly what the model did."""

from __future__ import annotations

from evalpipe import evaluator


@evaluator
def mentions_condition(response: str, expected_output: str) -> bool:
    """The final answer names the condition the tool returned (case-insensitive)."""
    return expected_output.lower() in response.lower()


@evaluator
def answered_in_text(response: str) -> bool:
    """The run ended with a text answer (a weak model may stop at a tool call or say nothing)."""
    return bool(response.strip())
