"""Tests for evalpipe.transcripts: the constructors of a made call's run and usage."""

from __future__ import annotations

from typing import Any

import pytest

from evalpipe.messages import FunctionCallContent, Message, ToolDefinition
from evalpipe.transcripts import RunUsage, TargetRun, made_run, measured_usage


def _same(fast: Any, validated: Any) -> None:
    assert type(fast) is type(validated)
    assert fast == validated
    assert fast.__dict__ == validated.__dict__
    assert list(fast.__dict__) == list(validated.__dict__)
    assert fast.__pydantic_fields_set__ == validated.__pydantic_fields_set__
    assert fast.__pydantic_private__ == validated.__pydantic_private__
    assert fast.__pydantic_extra__ == validated.__pydantic_extra__
    assert fast.model_dump_json() == validated.model_dump_json()
    assert fast.model_dump(exclude_unset=True) == validated.model_dump(exclude_unset=True)


@pytest.mark.parametrize("latency", [0.25, None, 1e-9])
def test_measured_usage_is_the_validated_usage(latency: float | None) -> None:
    """measured_usage(x) is RunUsage(latency_seconds=x), down to the fields set."""
    _same(measured_usage(latency), RunUsage(latency_seconds=latency))


def test_measured_usage_validates_a_non_float() -> None:
    """A latency that is not a float is validated (an int becomes a float, a bad value raises)."""
    _same(measured_usage(2), RunUsage(latency_seconds=2))  # type: ignore[arg-type]
    assert type(measured_usage(2).latency_seconds) is float  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="latency_seconds"):
        measured_usage("soon")  # type: ignore[arg-type]


def _answer() -> list[Message]:
    return [
        Message("assistant", [FunctionCallContent(name="f", arguments={"a": 1}, call_id="c")]),
        Message("assistant", ["done"]),
    ]


def _fields(**changed: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "query_index": 4,
        "repetition": 1,
        "query": "q",
        "messages": _answer(),
        "tools": None,
        "usage": RunUsage(latency_seconds=1.5),
        "error_code": None,
        "error_message": None,
        "attempts": 1,
    }
    fields.update(changed)
    return fields


@pytest.mark.parametrize(
    "fields",
    [
        _fields(),
        _fields(
            tools=[ToolDefinition("f", "does f")],
            error_code="MaxStepsExceeded",
            error_message="too many steps",
            attempts=3,
        ),
        _fields(messages=[], tools=[]),
    ],
)
def test_made_run_is_the_validated_run(fields: dict[str, Any]) -> None:
    """made_run(...) equals TargetRun(...) of the same fields: values, order, fields set, JSON."""
    _same(made_run(**fields), TargetRun(**fields))


def test_a_failed_made_run_is_the_validated_run_without_messages_or_tools() -> None:
    """messages=None is a failed call: TargetRun(...) given neither messages nor tools."""
    fields = _fields(messages=None, error_code="AgentError", error_message="E: no", attempts=2)
    validated = TargetRun(**{k: v for k, v in fields.items() if k not in ("messages", "tools")})
    _same(made_run(**fields), validated)
    assert "tools" not in made_run(**fields).model_fields_set


@pytest.mark.parametrize(
    "fields",
    [
        {"messages": [{"role": "assistant", "contents": ["hi"]}]},
        {"messages": [Message("assistant", ["hi"])], "tools": [{"name": "f"}]},
        {"query_index": True},
        {"usage": {"latency_seconds": 1.0}},
    ],
)
def test_made_run_validates_what_is_not_already_valid(fields: dict[str, Any]) -> None:
    """A value of another type (a dict message or tool, a bool index, a dict usage) goes through
    validation and comes out as TargetRun(...) makes it."""
    data = _fields(**fields)
    _same(made_run(**data), TargetRun(**data))


def test_made_run_names_a_bad_field() -> None:
    """An invalid value is refused by validation, naming the field."""
    with pytest.raises(ValueError, match="repetition"):
        made_run(**_fields(repetition="x"))
