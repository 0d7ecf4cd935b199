"""Real MAF workflows (agent-framework-core WorkflowBuilder over MAF agents with a scripted chat
client) are read from their event stream into WorkflowRuns and evaluated per agent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from evalpipe import ExpectedToolCall, keyword_check, tool_call_args_match
from evalpipe.evaluate import evaluate_workflow
from evalpipe.targets.base import is_maf_agent, is_maf_workflow
from evalpipe.targets.maf import MAFWorkflow, workflow_run_from_events
from evalpipe.targets.workflow import (
    SequentialWorkflow,
    WorkflowRun,
    is_workflow,
    workflow_identity,
)

af = pytest.importorskip("agent_framework")
pytestmark = pytest.mark.filterwarnings("ignore::Warning")


@af.tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return json.dumps({"city": city, "condition": "sunny"})


class ScriptedModel(af.FunctionInvocationLayer, af.BaseChatClient):  # type: ignore[misc]
    """A fake model. With tools it asks for get_weather, then answers from the result; without
    tools it writes a fixed answer. ``fail`` makes every call raise. Streams when asked to."""

    def __init__(self, answer: str = "Pack sunglasses.", fail: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answer = answer
        self.fail = fail

    def _reply(self, messages: Sequence[Any], options: Mapping[str, Any]) -> Any:
        if self.fail:
            raise RuntimeError("model down")
        if messages[-1].role == "tool":
            return af.ChatResponse(
                messages=[af.Message(role="assistant", contents=["It is sunny in Paris."])],
                usage_details={
                    "input_token_count": 12,
                    "output_token_count": 6,
                    "total_token_count": 18,
                },
            )
        if options.get("tools"):
            call = af.Content.from_function_call("c1", "get_weather", arguments={"city": "Paris"})
            return af.ChatResponse(messages=[af.Message(role="assistant", contents=[call])])
        return af.ChatResponse(messages=[af.Message(role="assistant", contents=[self.answer])])

    def _inner_get_response(
        self, *, messages: Sequence[Any], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> Any:
        if stream:

            async def updates() -> AsyncIterator[Any]:
                reply = self._reply(messages, options)
                for message in reply.messages:
                    yield af.ChatResponseUpdate(role=message.role, contents=list(message.contents))
                if reply.usage_details:  # streamed usage arrives as a usage content, as OpenAI's
                    usage = af.Content.from_usage(reply.usage_details)
                    yield af.ChatResponseUpdate(role="assistant", contents=[usage])

            return self._build_response_stream(updates())

        async def respond() -> Any:
            return self._reply(messages, options)

        return respond()


def build(writer_fails: bool = False) -> Any:
    """researcher (with get_weather) → writer, built with MAF's WorkflowBuilder."""
    researcher = af.Agent(
        client=ScriptedModel(), name="researcher", instructions="Research.", tools=[get_weather]
    )
    writer = af.Agent(client=ScriptedModel(fail=writer_fails), name="writer", instructions="Write.")
    return af.WorkflowBuilder(start_executor=researcher).add_edge(researcher, writer).build()


async def test_event_stream_becomes_ordered_executor_transcripts() -> None:
    """executor_invoked/completed give each agent's received and produced messages, tools, usage."""
    run = await MAFWorkflow(build).run("Plan a trip to Paris")
    assert run.ok
    assert [(e.executor_id, e.agent) for e in run.executors] == [
        ("researcher", "researcher"),
        ("writer", "writer"),
    ]
    researcher, writer = run.executors
    assert [m.role for m in researcher.received] == ["user"]
    assert [m.role for m in researcher.produced] == ["assistant", "tool", "assistant"]
    assert researcher.produced[0].function_calls[0].arguments == {"city": "Paris"}
    assert [t.name for t in researcher.tools or []] == ["get_weather"]
    assert researcher.tools is not None
    assert researcher.tools[0].parameters["required"] == ["city"]
    assert writer.received == [*researcher.received, *researcher.produced]
    assert [m.text for m in run.output] == ["Pack sunglasses."]
    assert all(e.usage.latency_seconds is not None for e in run.executors)
    assert WorkflowRun.model_validate_json(run.model_dump_json()) == run


async def test_maf_workflow_is_evaluated_per_agent_with_mafs_names() -> None:
    """A MAF workflow instance evaluates like MAF's evaluate_workflow: names, keys, counts."""
    [result] = await evaluate_workflow(
        workflow=build(),
        queries=["Plan a trip to Paris", "Plan a trip to Paris"],
        evaluators=keyword_check("sunny"),
        upstream_context="user_only",
    )
    assert result.run_id == "Workflow Eval: Workflow — overall"
    assert list(result.sub_results) == ["researcher", "writer"]
    assert result.sub_results["writer"].run_id == "Workflow Eval: Workflow — writer"
    assert (result.sub_results["researcher"].passed, result.sub_results["writer"].failed) == (2, 2)
    assert result.failed == 2


async def test_per_agent_tool_expectations_on_a_maf_workflow_built_per_run() -> None:
    """A factory gives each run a fresh workflow; researcher tool-call expectations are checked."""
    [result] = await evaluate_workflow(
        workflow=MAFWorkflow(build),
        queries=["Plan a trip to Paris"],
        per_agent_expectations={
            "researcher": {
                "expected_tool_calls": [ExpectedToolCall("get_weather", {"city": "Paris"})]
            }
        },
        evaluators=tool_call_args_match,
        num_repetitions=3,
    )
    researcher = result.sub_results["researcher"]
    assert researcher.result_counts == {"passed": 3, "failed": 0, "errored": 0}
    usage = researcher.input_items[0].usage
    assert usage is not None
    assert usage.total_tokens == 18


async def test_failing_maf_executor_keeps_the_upstream_agent() -> None:
    """A writer whose model raises: researcher kept, writer and overall errored with the reason."""
    [result] = await evaluate_workflow(
        workflow=MAFWorkflow(lambda: build(writer_fails=True)),
        queries=["Plan a trip to Paris"],
        evaluators=keyword_check("sunny"),
    )
    assert result.sub_results["researcher"].all_passed
    [writer] = result.sub_results["writer"].items
    assert (writer.status, writer.error_code) == ("error", "ExecutorError")
    assert writer.error_message == "RuntimeError: model down"
    [overall] = result.items
    assert overall.error_code == "ExecutorError"
    assert overall.error_message == "executor 'writer' failed: RuntimeError: model down"


async def test_a_finished_workflow_run_result_is_evaluated_post_hoc() -> None:
    """workflow_result= takes MAF's WorkflowRunResult (non-streaming run) without running again."""
    workflow = build()
    run_result = await workflow.run("Plan a trip to Paris")
    converted = workflow_run_from_events(run_result, workflow=workflow)
    assert converted.query == "Plan a trip to Paris"
    assert [e.usage.latency_seconds for e in converted.executors] == [None, None]
    [result] = await evaluate_workflow(
        workflow=workflow, workflow_result=run_result, evaluators=keyword_check("sunny")
    )
    assert result.sub_results["researcher"].passed == 1
    assert result.sub_results["writer"].failed == 1
    assert result.input_items[0].query == "Plan a trip to Paris"


async def test_non_streaming_mode_converts_the_run_result() -> None:
    """MAFWorkflow(stream=False) runs MAF's default mode and converts the WorkflowRunResult."""
    run = await MAFWorkflow(build, stream=False).run("Plan a trip to Paris")
    assert run.ok
    assert [m.text for m in run.output] == ["Pack sunglasses."]


async def test_maf_agents_run_inside_an_evalpipe_sequential_workflow() -> None:
    """evalpipe's SequentialWorkflow passes MAF agents MAF messages, upstream tool calls included."""
    researcher = af.Agent(client=ScriptedModel(), name="researcher", tools=[get_weather])
    writer = af.Agent(client=ScriptedModel(answer="Enjoy Paris."), name="writer")
    run = await SequentialWorkflow([researcher, writer]).run("Plan a trip to Paris")
    assert run.ok
    assert [m.role for m in run.executors[1].received] == ["user", "assistant", "tool", "assistant"]
    assert [m.text for m in run.output] == ["Enjoy Paris."]


@af.executor(id="_prep")
async def prep(text: str, ctx: af.WorkflowContext[str]) -> None:
    """A bookkeeping step (id starting with "_"), skipped like MAF skips it."""
    await ctx.send_message(text.strip())


@af.executor(id="shout")
async def shout(
    response: af.AgentExecutorResponse,
    ctx: af.WorkflowContext[af.AgentExecutorResponse, str],
) -> None:
    """A non-agent step between the agents."""
    await ctx.send_message(response.with_text(response.agent_response.text.upper()))


def build_mixed() -> Any:
    """_prep → researcher → shout → writer."""
    researcher = af.Agent(client=ScriptedModel(), name="researcher", tools=[get_weather])
    writer = af.Agent(client=ScriptedModel(), name="writer")
    return (
        af.WorkflowBuilder(start_executor=prep)
        .add_edge(prep, researcher)
        .add_edge(researcher, shout)
        .add_edge(shout, writer)
        .build()
    )


async def test_non_agent_executors_are_recorded_but_get_no_per_agent_items() -> None:
    """A function executor's turn is in the run (agent None) and feeds the next agent, but only
    agents get sub-results; "_"-prefixed executors are skipped entirely."""
    [result] = await evaluate_workflow(
        workflow=MAFWorkflow(build_mixed),
        queries=["  Plan a trip to Paris "],
        evaluators=keyword_check(""),
    )
    assert list(result.sub_results) == ["researcher", "writer"]
    run = await MAFWorkflow(build_mixed).run("Plan a trip to Paris")
    assert [(e.executor_id, e.agent) for e in run.executors] == [
        ("researcher", "researcher"),
        ("shout", None),
        ("writer", "writer"),
    ]
    assert [m.text for m in run.executors[1].produced] == ["IT IS SUNNY IN PARIS."]
    assert run.executors[2].received[-1].text == "IT IS SUNNY IN PARIS."


@af.executor(id="dispatch")
async def dispatch(text: str, ctx: af.WorkflowContext[str]) -> None:
    """Sends the query to every branch."""
    await ctx.send_message(text)


async def test_a_failing_parallel_branch_keeps_the_other_branch() -> None:
    """Fan-out to two agents, one of whose model raises: the other agent's turn is kept."""

    def build_fan_out() -> Any:
        alpha = af.Agent(client=ScriptedModel(answer="A"), name="alpha")
        beta = af.Agent(client=ScriptedModel(fail=True), name="beta")
        return (
            af.WorkflowBuilder(start_executor=dispatch)
            .add_fan_out_edges(dispatch, [alpha, beta])
            .build()
        )

    [result] = await evaluate_workflow(
        workflow=MAFWorkflow(build_fan_out), queries=["go"], evaluators=keyword_check("A")
    )
    assert [i.status for i in result.sub_results["alpha"].items] == ["pass"]
    assert [i.error_code for i in result.sub_results["beta"].items] == ["ExecutorError"]
    assert result.items[0].error_message == "executor 'beta' failed: RuntimeError: model down"


def test_maf_objects_are_detected_and_named() -> None:
    """MAF workflows and agents are recognised; identity lists the agent executors."""
    workflow = build()
    assert is_maf_workflow(workflow)
    assert not is_maf_agent(workflow)
    assert is_maf_agent(af.Agent(client=ScriptedModel(), name="a"))
    assert workflow_identity(workflow) == "workflow:Workflow(researcher,writer)"
    assert MAFWorkflow(build).agent_names == ["researcher", "writer"]
    assert MAFWorkflow(build_mixed).agent_names == ["researcher", "writer"]
    assert is_workflow(workflow)
    assert is_workflow(MAFWorkflow(build))
    with pytest.raises(TypeError, match="MAFWorkflow needs a MAF Workflow or a factory"):
        MAFWorkflow(42)
