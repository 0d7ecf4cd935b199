"""Reading an agent's response: its usage, read the same way on the fast path and the general one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from evalpipe import AgentResponse, Message
from evalpipe.targets.base import response_usage
from evalpipe.transcripts import RunUsage


def _old_way(response: Any, latency: float) -> RunUsage:
    """What call_agent did before: the usage, then the latency set on it."""
    usage = response_usage(response)
    usage.latency_seconds = latency
    return usage


class _WithDetails(AgentResponse):
    @property
    def usage_details(self) -> dict[str, int]:
        return {"input_token_count": 3, "output_token_count": 4, "total_token_count": 7}


def test_the_latency_is_the_one_given_on_a_new_usage_whatever_the_response() -> None:
    reported = RunUsage(input_tokens=1, output_tokens=2, total_tokens=3)
    responses: list[Any] = [
        AgentResponse(messages=[Message("assistant", ["hi"])]),
        AgentResponse(usage=reported),
        _WithDetails(),
        SimpleNamespace(messages=[], usage_details={"input_tokens": 5, "output_tokens": 6}),
        SimpleNamespace(
            messages=[], usage_details=SimpleNamespace(prompt_tokens=8, completion_tokens=9)
        ),
        SimpleNamespace(messages=[], usage={"total_tokens": 11}),
        SimpleNamespace(messages=[]),
    ]
    for response in responses:
        usage = response_usage(response, 0.25)
        assert usage == _old_way(response, 0.25)
        assert usage.model_fields_set == _old_way(response, 0.25).model_fields_set
        assert usage.latency_seconds == 0.25
    assert reported.latency_seconds is None  # copied, not changed
    assert response_usage(_WithDetails(), 0.5).total_tokens == 7
    assert response_usage(AgentResponse()) == RunUsage()
