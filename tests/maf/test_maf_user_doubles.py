"""Tests written the way MAF's own tests (and a MAF user's) are written pass unchanged under
evalpipe: ``MagicMock()`` agents with an ``AsyncMock`` ``run``, ``MagicMock`` OpenAI clients whose
evals methods are ``AsyncMock``s and whose answers are read by attribute, and ``MagicMock``
workflows with ``executors`` (issue 33).

The doubles stand for the user's own objects; evalpipe and MAF objects are real.
"""

from __future__ import annotations

from typing import Any
from unittest.mock import AsyncMock, MagicMock

import pytest

from evalpipe import ExpectedToolCall, LocalEvaluator, evaluate_agent, evaluator, keyword_check
from evalpipe.runner import resolve_target
from evalpipe.targets.workflow import SequentialWorkflow

af = pytest.importorskip("agent_framework")
pytestmark = pytest.mark.filterwarnings("ignore::Warning")

from fakes.maf_models import ScriptedModel, get_weather, weather_agent  # noqa: E402


def _maf_workflow() -> Any:
    """A real MAF workflow of two agents over the scripted model."""
    researcher = af.Agent(client=ScriptedModel(), name="researcher", tools=[get_weather])
    writer = af.Agent(client=ScriptedModel(answer="Pack sunglasses."), name="writer")
    return af.WorkflowBuilder(start_executor=researcher).add_edge(researcher, writer).build()


def _mock_agent(*messages: Any) -> MagicMock:
    """A user's agent double, as MAF's tests build it."""
    agent = MagicMock()
    agent.name = "test"
    agent.default_options = {}
    agent.run = AsyncMock(
        return_value=af.AgentResponse(
            messages=list(messages) or [af.Message("assistant", ["reply"])]
        )
    )
    return agent


# -- cause 1: what is passed as agent= is an agent --------------------------------------------


async def test_a_magicmock_agent_runs_as_an_agent_once_per_query_and_repetition() -> None:
    """A ``MagicMock()`` agent (it has ``agent_names`` like every attribute) is run as an agent, as
    MAF runs it; it used to be taken for a workflow and fail with ``'WorkflowRun' object has no
    attribute 'messages'``."""
    agent = _mock_agent()
    [result] = await evaluate_agent(
        agent=agent,
        queries=["Q1", "Q2"],
        evaluators=LocalEvaluator(keyword_check("reply")),
        num_repetitions=2,
    )
    assert (result.total, result.passed) == (4, 4)
    assert agent.run.call_count == 4


async def test_a_magicmock_agent_gets_expected_outputs_by_query_across_repetitions() -> None:
    """expected_output and expected_tool_calls are stamped by query index on every repetition of
    a double's runs (MAF's modulo stamping)."""
    call = af.Content.from_function_call("c1", "get_weather", arguments={"city": "Paris"})
    agent = _mock_agent(
        af.Message("assistant", [call]),
        af.Message("tool", [af.Content.from_function_result("c1", result="Sunny")]),
        af.Message("assistant", ["It's sunny"]),
    )

    @evaluator
    def expected_is_known(expected_output: str) -> bool:
        return expected_output in ("A", "B")

    [result] = await evaluate_agent(
        agent=agent,
        queries=["Q1", "Q2"],
        expected_output=["A", "B"],
        expected_tool_calls=[[ExpectedToolCall("get_weather")], [ExpectedToolCall("get_weather")]],
        evaluators=LocalEvaluator(expected_is_known),
        num_repetitions=2,
    )
    assert (result.total, result.passed) == (4, 4)
    assert [i.expected_output for i in result.input_items] == ["A", "B", "A", "B"]


async def test_a_magicmock_agents_declared_tools_are_the_items_tools() -> None:
    """The tools in a double's ``default_options`` are its items' tools (MAF reads them there), and
    its auto-created attributes (``tools``, ``mcp_tools``) add none."""
    agent = _mock_agent()
    agent.default_options = {"tools": [get_weather]}
    [result] = await evaluate_agent(
        agent=agent,
        responses=af.AgentResponse(messages=[af.Message("assistant", ["Sunny."])]),
        queries=["Weather?"],
        evaluators=LocalEvaluator(keyword_check("sunny")),
    )
    assert [t.name for t in result.input_items[0].tools or []] == ["get_weather"]


async def test_a_maf_workflow_given_as_an_agent_is_refused_naming_evaluate_workflow() -> None:
    """A real MAF Workflow passed as ``agent=`` raises a TypeError pointing to evaluate_workflow
    instead of running it as an agent."""
    workflow = _maf_workflow()
    with pytest.raises(TypeError, match=r"is a workflow, not an agent: .*evaluate_workflow"):
        await evaluate_agent(agent=workflow, queries=["Hi"], evaluators=keyword_check("x"))


def test_without_a_kind_an_object_of_both_shapes_is_refused_naming_both() -> None:
    """A suite's target (no kind given) that looks like a workflow and like an agent, such as a
    ``MagicMock()``, raises a TypeError naming what points each way instead of guessing."""
    with pytest.raises(TypeError) as caught:
        resolve_target(_mock_agent())
    text = str(caught.value)
    assert "cannot tell whether MagicMock is an agent or a workflow" in text
    assert "`agent_names` like a workflow" in text
    assert "`default_options`" in text


def test_without_a_kind_agents_and_workflows_keep_their_detection() -> None:
    """Real MAF agents and workflows and evalpipe workflows still resolve by themselves."""
    assert resolve_target(weather_agent()).kind == "agent"
    assert resolve_target(_maf_workflow()).kind == "workflow"
    assert resolve_target(SequentialWorkflow([weather_agent()])).kind == "workflow"
