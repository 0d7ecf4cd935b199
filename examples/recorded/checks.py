"""A local check for the recorded travel conversations."""

from __future__ import annotations

import re

from evalpipe import CheckResult, EvalItem


def answers_with_temperature(item: EvalItem) -> CheckResult:
    """Weather answers state a temperature in °C; other answers pass."""
    if not any(c.name == "get_weather" for c in item.function_calls):
        return CheckResult(True, "no weather question", "answers_with_temperature")
    found = re.search(r"-?\d+\s*°C", item.response) is not None
    reason = "states a temperature" if found else "no temperature in the answer"
    return CheckResult(found, reason, "answers_with_temperature")
