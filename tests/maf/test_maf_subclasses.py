"""Subclasses of MAF's Agent, Workflow, Message and AgentResponse are MAF objects to evalpipe: the
same evaluation under ``from agent_framework import ...`` and ``from evalpipe import ...`` gives
the same results (MAF objects are told by type, not by the module that defines them)."""

from __future__ import annotations

from typing import Any

import pytest

import evalpipe
from evalpipe.targets.base import is_maf_agent, is_maf_workflow

af = pytest.importorskip("agent_framework")
pytestmark = pytest.mark.filterwarnings("ignore::Warning")

from fakes.maf_models import ScriptedModel, get_weather, results_view, weather_agent  # noqa: E402


class MyAgent(af.Agent):  # type: ignore[misc]
    """A user's agent class, defined outside agent_framework."""


class MyWorkflow(af.Workflow):  # type: ignore[misc]
    """A user's workflow class, defined outside agent_framework."""


class MyMessage(af.Message):  # type: ignore[misc]
    """A user's message class."""


class MyResponse(af.AgentResponse):  # type: ignore[misc]
    """A user's response class."""


def _checks(module: Any) -> list[Any]:
    return [module.keyword_check("sunny"), module.tool_called_check("get_weather")]


async def test_an_agent_subclass_is_evaluated_as_maf_evaluates_it() -> None:
    """`class MyAgent(agent_framework.Agent)` runs under evalpipe's evaluate_agent and gives MAF's
    results (it used to get evalpipe messages and fail on `additional_properties`)."""
    assert is_maf_agent(weather_agent(MyAgent))
    views = []
    for module in (af, evalpipe):
        [result] = await module.evaluate_agent(
            agent=weather_agent(MyAgent),
            queries=["What's the weather in Paris?", "And tomorrow?"],
            evaluators=_checks(module),
            num_repetitions=2,
        )
        views.append(results_view(result))
    maf, ours = views
    assert ours == maf
    assert maf["result_counts"] == {"passed": 4, "failed": 0, "errored": 0}


def _workflow(cls: type | None = None) -> Any:
    researcher = af.Agent(client=ScriptedModel(), name="researcher", tools=[get_weather])
    writer = af.Agent(client=ScriptedModel(answer="Pack sunglasses."), name="writer")
    workflow = af.WorkflowBuilder(start_executor=researcher).add_edge(researcher, writer).build()
    if cls is not None:
        # WorkflowBuilder always builds a Workflow; this is the instance a subclass would give.
        workflow.__class__ = cls
    return workflow


async def test_a_workflow_subclass_is_evaluated_as_maf_evaluates_it() -> None:
    """A MAF Workflow subclass is run as a MAF workflow (not as an evalpipe one) and gives MAF's
    eval names, per-agent sub-results and counts (MAF's item contents: upstream_context="user_only")."""
    assert is_maf_workflow(_workflow(MyWorkflow))
    assert not is_maf_agent(_workflow(MyWorkflow))
    [maf] = await af.evaluate_workflow(
        workflow=_workflow(MyWorkflow),
        queries=["Plan a trip to Paris"],
        evaluators=af.keyword_check("sunny"),
    )
    [ours] = await evalpipe.evaluate_workflow(
        workflow=_workflow(MyWorkflow),
        queries=["Plan a trip to Paris"],
        evaluators=evalpipe.keyword_check("sunny"),
        upstream_context="user_only",
    )
    assert ours.run_id == maf.run_id == "Workflow Eval: MyWorkflow — overall"
    assert results_view(ours) == results_view(maf)
    assert list(ours.sub_results) == ["researcher", "writer"]


async def test_message_and_response_subclasses_are_read_as_maf_reads_them() -> None:
    """Pre-existing responses of AgentResponse and Message subclasses (with MAF contents) give the
    same items and results under both imports."""
    call = af.Content.from_function_call("c1", "get_weather", arguments={"city": "Paris"})
    result = af.Content.from_function_result("c1", result='{"condition": "sunny"}')

    def response() -> Any:
        return MyResponse(
            messages=[
                MyMessage(role="assistant", contents=[call]),
                MyMessage(role="tool", contents=[result]),
                MyMessage(role="assistant", contents=["Sunny in Paris."], author_name="weather"),
            ]
        )

    views = []
    for module in (af, evalpipe):
        [out] = await module.evaluate_agent(
            agent=weather_agent(),
            queries=["What's the weather in Paris?"],
            responses=[response()],
            evaluators=[*_checks(module), module.keyword_check("rain")],
        )
        views.append(results_view(out))
    assert views[1] == views[0]
    assert views[0]["items"][0]["status"] == "fail"
