"""The items stage: transcripts, expectations, ids and metadata in; finished items out."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from evalpipe import ExpectedToolCall, Message, ToolDefinition
from evalpipe.itemize import (
    Expectations,
    SplitAt,
    WorkflowItems,
    agent_item,
    build_workflow_items,
    workflow_items,
)
from evalpipe.items import AgentExpectation, ConversationSplit, EvalItem
from evalpipe.messages import FunctionCallContent
from evalpipe.transcripts import ExecutorRun, TargetRun, WorkflowRun


def _run(**kw: object) -> TargetRun:
    data: dict[str, object] = {
        "query_index": 3,
        "repetition": 1,
        "query": "Weather in Paris?",
        "messages": [Message("assistant", ["Sunny."])],
    }
    data.update(kw)
    return TargetRun.model_validate(data)


def test_an_agent_item_carries_everything_it_was_given() -> None:
    """Expectations, id, metadata, usage and the call's position are stamped by the stage itself."""
    expect = Expectations(
        expected_output="Sunny",
        expected_tool_calls=[ExpectedToolCall("get_weather", {"city": "Paris"})],
        context="Paris is sunny today.",
    )
    item = agent_item(_run(), item_id="paris#1", expect=expect, metadata={"row_id": "paris"})
    assert (item.item_id, item.query_index, item.repetition) == ("paris#1", 3, 1)
    assert (item.query, item.response) == ("Weather in Paris?", "Sunny.")
    assert item.expected_output == "Sunny"
    assert item.expected_tool_calls == [ExpectedToolCall("get_weather", {"city": "Paris"})]
    assert item.context == "Paris is sunny today."
    assert item.metadata == {"row_id": "paris"}


def test_a_recorded_query_side_replaces_the_bare_query_only_for_a_finished_call() -> None:
    """A recorded conversation keeps its system message and earlier turns; an errored call does
    not pretend to have them."""
    head = [Message("system", ["Be brief."]), Message("user", ["Weather in Paris?"])]
    item = agent_item(_run(), item_id="0", recorded_head=head)
    assert [m.role for m in item.conversation] == ["system", "user", "assistant"]
    failed = agent_item(_run(messages=[], error_code="AgentError"), item_id="0", recorded_head=head)
    assert [m.role for m in failed.conversation] == ["user"]
    assert failed.error_code == "AgentError"


def test_conflicting_tool_schemas_error_the_item_or_raise_when_strict() -> None:
    """A tool called with two schemas makes the item errored, or raises under strict_tools."""
    a = ToolDefinition(name="t", parameters={"type": "object", "properties": {}})
    b = ToolDefinition(name="t", parameters={"type": "object", "properties": {"x": {}}})
    call = Message("assistant", [FunctionCallContent(call_id="c", name="t", arguments={})])
    run = _run(messages=[call], tools=[a, b])
    item = agent_item(run, item_id="0")
    assert item.error_code == "ToolSchemaConflict"
    with pytest.raises(ValueError, match="two different input schemas"):
        agent_item(run, item_id="0", strict_tools=True)
    assert agent_item(run, item_id="0", tools=[a]).tools == [a]


def _workflow() -> WorkflowRun:
    user = Message("user", ["Trip to Paris?"])
    research = [Message("assistant", ["Paris: sunny."])]
    write = [Message("assistant", ["Pack sunglasses."])]
    return WorkflowRun(
        query_index=2,
        repetition=0,
        query="Trip to Paris?",
        executors=[
            ExecutorRun(executor_id="r", agent="researcher", received=[user], produced=research),
            ExecutorRun(
                executor_id="w", agent="writer", received=[user, *research], produced=write
            ),
            ExecutorRun(executor_id="w2", agent="writer", received=[user], produced=write),
        ],
        output=write,
    )


def test_workflow_items_name_agents_and_visits_and_stamp_each_agents_expectations() -> None:
    """Per-agent ids are "{id}/{agent}[/{visit}]"; each agent gets its own expectations, the
    overall item the workflow's and the row's context."""
    expect = Expectations(
        expected_output="Pack sunglasses.",
        context="ctx",
        agents={"writer": AgentExpectation(expected_output="sunglasses")},
    )
    items = workflow_items(
        _workflow(),
        item_id="paris#0",
        expect=expect,
        metadata={"row_id": "paris"},
        turn_metadata=lambda turn: {"seen": turn.executor_id},
    )
    assert items.overall is not None
    assert (items.overall.item_id, items.overall.expected_output) == ("paris#0", "Pack sunglasses.")
    assert items.overall.context == "ctx"
    assert [i.item_id for i in items.per_agent] == [
        "paris#0/researcher",
        "paris#0/writer",
        "paris#0/writer/1",
    ]
    researcher, writer, again = items.per_agent
    assert researcher.expected_output is None
    assert writer.expected_output == again.expected_output == "sunglasses"
    assert writer.split_strategy == SplitAt(2)
    assert writer.metadata == {"row_id": "paris", "executor_id": "w", "seen": "w", "split_at": 2}


def test_build_workflow_items_takes_ids_and_metadata_per_run() -> None:
    """Callers that name their runs (traces, threads) pass ids and metadata in; nothing patches."""
    built = build_workflow_items(
        [_workflow()], item_ids=["thread-1"], metadata=[{"thread_id": "t1"}]
    )
    assert isinstance(built, WorkflowItems)
    assert [i.item_id for i in built.overall] == ["thread-1"]
    assert built.per_agent["writer"][0].metadata["thread_id"] == "t1"
    assert built.count == 4


def _validated(item: EvalItem) -> EvalItem:
    """The same item's fields through pydantic validation (EvalItem(**fields) of what was set)."""
    fields = {name: getattr(item, name) for name in item.model_fields_set}
    fields["conversation"] = [m.model_dump() for m in item.conversation]
    return EvalItem.model_validate(fields)


def _same_item(fast: EvalItem, slow: EvalItem) -> None:
    assert type(fast) is type(slow) is EvalItem
    assert fast == slow
    assert list(fast.__dict__) == list(slow.__dict__) == list(EvalItem.model_fields)
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.__pydantic_private__ == slow.__pydantic_private__
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__
    assert fast.model_dump_json() == slow.model_dump_json()
    assert (fast.query, fast.response) == (slow.query, slow.response)


_CALLS = [ExpectedToolCall("get_weather", {"city": "Paris"})]
_TOOL = ToolDefinition("get_weather", "weather", {"type": "object", "properties": {}})


@pytest.mark.parametrize(
    ("run", "extra"),
    [
        (_run(), {}),
        (
            _run(tools=[_TOOL], usage={"latency_seconds": 0.5}),
            {
                "expect": Expectations(
                    expected_output="sunny", expected_tool_calls=_CALLS, context="c"
                ),
                "metadata": {"row_id": "q0", "tags": ["a"]},
                "split": SplitAt(1),
            },
        ),
        (_run(), {"tools": [_TOOL], "recorded_head": [Message("system", ["be brief"])]}),
        (_run(error_code="AgentError", error_message="E: no"), {"declared_tools": [_TOOL]}),
        (_run(), {"expect": Expectations(expected_tool_calls=tuple(_CALLS))}),
        (_run(), {"tools": (_TOOL,), "split": ConversationSplit.FULL}),
        (_run(), {"tools": []}),
    ],
)
def test_an_agent_item_is_the_item_validation_makes(run: TargetRun, extra: dict[str, Any]) -> None:
    """agent_item's item equals EvalItem validated from the same fields: values, field order,
    fields set, JSON, query and response."""
    item = agent_item(run, item_id="q0#1", **extra)
    _same_item(item, _validated(item))
    assert item.conversation[-len(run.messages) :] == run.messages


def test_an_agent_item_owns_its_lists_and_metadata() -> None:
    """The item's conversation, tools, expected calls and metadata are its own, not the caller's."""
    meta = {"row_id": "q0"}
    tools = [_TOOL]
    run = _run()
    item = agent_item(
        run,
        item_id="x",
        tools=tools,
        metadata=meta,
        expect=Expectations(expected_tool_calls=_CALLS),
    )
    assert item.metadata == meta
    assert item.metadata is not meta
    assert item.tools is not tools
    assert item.expected_tool_calls is not _CALLS
    assert item.conversation is not run.messages


def test_an_agent_item_of_unvalidated_values_is_validated() -> None:
    """A value that is not what validation makes (a dict tool, a read-only metadata mapping) takes
    the validated path and comes out coerced, as before."""
    item = agent_item(
        _run(),
        item_id="x",
        tools=[{"name": "f"}],  # type: ignore[list-item]
        metadata=MappingProxyType({"row_id": "q0"}),
    )
    assert item.tools == [ToolDefinition("f")]
    assert type(item.metadata) is dict
    assert item.metadata == {"row_id": "q0"}
    assert item.model_fields_set >= {"tools", "metadata", "conversation"}
