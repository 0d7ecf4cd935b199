"""Tests written the way MAF's own tests (and a MAF user's) are written pass unchanged under
evalpipe: ``MagicMock()`` agents with an ``AsyncMock`` ``run``, ``MagicMock`` OpenAI clients whose
evals methods are ``AsyncMock``s and whose answers are read by attribute, and ``MagicMock``
workflows with ``executors`` (issue 33).

The doubles stand for the user's own objects; evalpipe and MAF objects are real.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from unittest.mock import AsyncMock, MagicMock, call

import openai
import pytest

from evalpipe import (
    EvalItem,
    ExpectedToolCall,
    LocalEvaluator,
    Message,
    evaluate_agent,
    evaluator,
    keyword_check,
)
from evalpipe.evaluate import evaluate_workflow
from evalpipe.foundry import FoundryEvals, evaluate_traces
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


async def test_a_double_specd_as_a_maf_agent_gets_the_query_as_maf_gives_it() -> None:
    """A ``MagicMock(spec=Agent)`` (a MAF agent to evalpipe) is called as MAF's evaluate_agent
    calls it, ``run([Message("user", [query])])`` with MAF's Message, so a ``run`` reading
    ``messages[-1].text`` works; it used to get the bare string and every item errored."""

    async def run(messages: Any, **kwargs: Any) -> Any:
        return af.AgentResponse(
            messages=[af.Message("assistant", [f"Sunny in {messages[-1].text}."])]
        )

    agent = MagicMock(spec=af.Agent)
    agent.name = "weather"
    agent.default_options = {}
    agent.run = AsyncMock(side_effect=run)
    [result] = await evaluate_agent(
        agent=agent,
        queries=["Paris", "Rome"],
        evaluators=LocalEvaluator(keyword_check("sunny")),
    )
    assert (result.passed, result.failed, result.errored) == (2, 0, 0)
    assert [i.response for i in result.input_items] == ["Sunny in Paris.", "Sunny in Rome."]
    given = [c.args[0] for c in agent.run.call_args_list]
    assert all(isinstance(m, list) and len(m) == 1 for m in given)
    assert sorted((m[0].role, m[0].text) for m in given) == [("user", "Paris"), ("user", "Rome")]
    assert all(isinstance(m[0], af.Message) for m in given)


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


# -- cause 2: Foundry clients read by attribute, their methods awaited when they are async -----


class _AsyncItems:
    """An async-iterable page of output items, as MAF's tests return from ``output_items.list``."""

    def __init__(self, items: list[Any]) -> None:
        self._items = list(items)

    def __aiter__(self) -> _AsyncItems:
        return self

    async def __anext__(self) -> Any:
        if not self._items:
            raise StopAsyncIteration
        return self._items.pop(0)


@dataclass
class _Counts:
    """A ``ResultCounts``-shaped object (attributes, no ``to_dict``)."""

    passed: int = 0
    failed: int = 0
    errored: int = 0


def _mock_client(*, status: str = "completed", output_items: list[Any] | None = None) -> MagicMock:
    """A user's OpenAI client double: ``MagicMock`` answers read by attribute, ``AsyncMock``
    methods, the create answers without a status."""
    client = MagicMock()
    created_eval = MagicMock()
    created_eval.id = "eval_1"
    client.evals.create = AsyncMock(return_value=created_eval)
    created_run = MagicMock()
    created_run.id = "run_1"
    client.evals.runs.create = AsyncMock(return_value=created_run)
    done = MagicMock()
    done.status = status
    done.result_counts = _Counts(passed=1)
    done.report_url = "https://ai.azure.com/eval/run_1"
    done.per_testing_criteria_results = None
    client.evals.runs.retrieve = AsyncMock(return_value=done)
    if output_items is not None:
        client.evals.runs.output_items.list = AsyncMock(return_value=_AsyncItems(output_items))
    return client


def _output_item(index: int, score: float, passed: bool) -> MagicMock:
    """An output item double for the data source item ``index``, one relevance result."""
    result = MagicMock(score=score, passed=passed, reason="because")
    result.name = "relevance"  # MagicMock(name=...) names the mock, not the attribute
    item = MagicMock(datasource_item_id=index, status="pass" if passed else "fail")
    item.id = f"oi_{index}"
    item.results = [result]
    item.sample = MagicMock(error=None, usage=None, input=[], output=[])
    return item


def _items(*pairs: tuple[str, str]) -> list[EvalItem]:
    return [EvalItem([Message("user", [q]), Message("assistant", [a])]) for q, a in pairs]


async def test_foundry_evals_reads_a_magicmock_clients_answers_by_attribute() -> None:
    """A MagicMock client with AsyncMock methods is awaited and its answers read by attribute: the
    eval and run are created once, the run retrieved, the output items scored by their index."""
    client = _mock_client(output_items=[_output_item(1, 2.0, False), _output_item(0, 5.0, True)])
    foundry = FoundryEvals(client=client, model="gpt-4o", evaluators=[FoundryEvals.RELEVANCE])
    result = await foundry.evaluate(_items(("Hello", "Hi there!"), ("Weather?", "Sunny.")))

    assert (result.status, result.eval_id, result.run_id) == ("completed", "eval_1", "run_1")
    assert result.report_url == "https://ai.azure.com/eval/run_1"
    assert [(i.status, i.scores[0].name, i.scores[0].score) for i in result.items] == [
        ("pass", "relevance", 5.0),
        ("fail", "relevance", 2.0),
    ]
    assert result.result_counts == {"passed": 1, "failed": 1, "errored": 0}
    client.evals.create.assert_awaited_once()
    client.evals.runs.create.assert_awaited_once()
    run_call = client.evals.runs.create.call_args
    content = run_call.kwargs["data_source"]["source"]["content"]
    assert [c["item"]["query"] for c in content] == ["Hello", "Weather?"]


async def test_a_doubles_create_answer_without_a_status_is_retrieved_at_once() -> None:
    """A create answer with no status is retrieved without waiting a poll interval first."""
    client = _mock_client(output_items=[_output_item(0, 4.0, True)])
    foundry = FoundryEvals(client=client, model="gpt-4o", poll_interval=60.0)
    result = await asyncio.wait_for(foundry.evaluate(_items(("Hi", "Hello"))), timeout=10)
    assert result.status == "completed"
    client.evals.runs.retrieve.assert_awaited_once()


async def test_with_options_is_called_on_real_openai_clients_only() -> None:
    """A double's ``with_options`` (another double, without the caller's methods) is never called;
    a real openai client's is, turning the SDK's own retries off."""
    client = _mock_client()
    foundry = FoundryEvals(client=client, model="gpt-4o")
    client.with_options.assert_not_called()
    assert foundry._client is client
    real = openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")
    assert FoundryEvals(client=real, model="gpt-4o")._client.max_retries == 0


async def test_sync_double_methods_and_attribute_objects_work_too() -> None:
    """Methods that return their answer at once (the sync SDK's way) and answers that are plain
    objects (dataclasses, namespaces) are read the same way."""
    client = MagicMock()
    client.evals.create = MagicMock(return_value=SimpleNamespace(id="eval_s"))
    client.evals.runs.create = MagicMock(return_value=SimpleNamespace(id="run_s", status="queued"))
    client.evals.runs.retrieve = MagicMock(
        return_value=SimpleNamespace(id="run_s", status="failed", error=_Error("E", "no model"))
    )
    foundry = FoundryEvals(client=client, model="gpt-4o", poll_interval=0.01)
    result = await foundry.evaluate(_items(("Hi", "Hello")))
    assert (result.eval_id, result.run_id, result.status) == ("eval_s", "run_s", "failed")
    assert result.error == "no model"
    assert [i.error_code for i in result.items] == ["RunFailed"]


@dataclass
class _Error:
    """An ``EvalAPIError``-shaped object."""

    code: str
    message: str


async def test_evaluate_agent_with_a_magicmock_agent_sends_its_tools_to_foundry() -> None:
    """Pre-existing responses of a double agent are sent with the tool definitions its
    ``default_options`` declare, through a double client."""
    client = _mock_client()
    agent = _mock_agent()
    agent.default_options = {"tools": [get_weather]}
    [result] = await evaluate_agent(
        agent=agent,
        responses=af.AgentResponse(messages=[af.Message("assistant", ["It's sunny."])]),
        queries=["What's the weather?"],
        evaluators=FoundryEvals(client=client, model="gpt-4o"),
    )
    assert result.status == "completed"
    [row] = client.evals.runs.create.call_args.kwargs["data_source"]["source"]["content"]
    assert [t["name"] for t in row["item"]["tool_definitions"]] == ["get_weather"]
    assert row["item"]["query"] == "What's the weather?"


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ({"response_ids": ["resp_a", "resp_b"]}, "azure_ai_responses"),
        ({"trace_ids": ["trace_1"]}, "azure_ai_traces"),
        ({"agent_id": "my-agent", "lookback_hours": 24}, "azure_ai_traces"),
    ],
)
async def test_evaluate_traces_runs_on_a_magicmock_client(
    source: dict[str, Any], kind: str
) -> None:
    """evaluate_traces by response ids, trace ids or agent id completes on a double client and
    sends MAF's data source."""
    client = _mock_client(output_items=[])
    result = await evaluate_traces(client=client, model="gpt-4o", **source)
    assert (result.status, result.eval_id, result.run_id) == ("completed", "eval_1", "run_1")
    data_source = client.evals.runs.create.call_args.kwargs["data_source"]
    assert data_source["type"] == kind
    if "agent_id" in source:
        assert (data_source["agent_id"], data_source["lookback_hours"]) == ("my-agent", 24)
    if "response_ids" in source:
        content = data_source["item_generation_params"]["source"]["content"]
        assert [c["item"]["resp_id"] for c in content] == ["resp_a", "resp_b"]


# -- cause 3: workflows of MAF's shape, and MAF workflows that do not stream ------------------


def _executor_response(executor_id: str, text: str, query: str) -> Any:
    """What a MAF agent executor sends when it completes: its response and its conversation."""
    response = af.AgentResponse(messages=[af.Message("assistant", [text])])
    return af.AgentExecutorResponse(
        executor_id=executor_id,
        agent_response=response,
        full_conversation=[af.Message("user", [query]), *response.messages],
    )


def _run_result(query: str, *turns: tuple[str, str], output: str | None = None) -> Any:
    """A real MAF WorkflowRunResult: ``turns`` as (executor id, answer), then the output."""
    events: list[Any] = []
    for executor_id, text in turns:
        events.append(af.WorkflowEvent.executor_invoked(executor_id, query))
        events.append(
            af.WorkflowEvent.executor_completed(
                executor_id, [_executor_response(executor_id, text, query)]
            )
        )
    if output is not None:
        data = [af.Message("assistant", [output])]
        events.append(af.WorkflowEvent("output", executor_id="end", data=data))
    return af.WorkflowRunResult(events, [])


def _mock_executor(*tools: Any) -> MagicMock:
    """A MAF agent executor double holding an agent double with ``tools``."""
    agent = MagicMock()
    agent.default_options = {"tools": list(tools)}
    executor = MagicMock(spec=af.AgentExecutor)
    executor.agent = agent
    return executor


async def test_a_magicmock_workflow_with_executors_is_run_as_maf_runs_it() -> None:
    """A ``MagicMock`` workflow with ``executors`` and an ``AsyncMock`` ``run`` returning a
    WorkflowRunResult is a MAF workflow: called as MAF calls it (``run(query)``, once per query
    and repetition), read per agent, named after its class."""
    workflow = MagicMock()
    workflow.executors = {}
    workflow.run = AsyncMock(return_value=_run_result("Q", ("agent", "Response"), output="Final"))
    client = _mock_client()
    [result] = await evaluate_workflow(
        workflow=workflow,
        queries=["Test query"],
        expected_output=["Final"],
        evaluators=FoundryEvals(client=client, model="gpt-4o"),
        num_repetitions=2,
    )
    assert result.status == "completed"
    assert list(result.sub_results) == ["agent"]
    assert workflow.run.await_args_list == [call("Test query"), call("Test query")]
    names = [c.kwargs["name"] for c in client.evals.create.call_args_list]
    assert sorted(names) == [
        "Workflow Eval: MagicMock — agent",
        "Workflow Eval: MagicMock — overall",
    ]
    overall = next(
        c for c in client.evals.runs.create.call_args_list if "overall" in c.kwargs["name"]
    )
    rows = overall.kwargs["data_source"]["source"]["content"]
    assert [r["item"]["ground_truth"] for r in rows] == ["Final", "Final"]


async def test_a_magicmock_workflows_executors_give_each_agent_its_own_tools() -> None:
    """With a finished run, the agents of a double's ``executors`` give their items their tools:
    only the agent that has tools gets tool_call_accuracy (MAF's filtering)."""
    workflow = MagicMock()
    workflow.executors = {"researcher": _mock_executor(get_weather), "planner": _mock_executor()}
    client = _mock_client()
    [result] = await evaluate_workflow(
        workflow=workflow,
        workflow_result=_run_result("Plan", ("researcher", "Sunny"), ("planner", "Go")),
        evaluators=FoundryEvals(
            client=client,
            model="gpt-4o",
            evaluators=[FoundryEvals.RELEVANCE, FoundryEvals.TOOL_CALL_ACCURACY],
        ),
        include_overall=False,
    )
    assert sorted(result.sub_results) == ["planner", "researcher"]
    criteria = {
        c.kwargs["name"]: sorted(t["evaluator_name"] for t in c.kwargs["testing_criteria"])
        for c in client.evals.create.call_args_list
    }
    assert criteria == {
        "Workflow Eval: MagicMock — planner": ["builtin.relevance"],
        "Workflow Eval: MagicMock — researcher": [
            "builtin.relevance",
            "builtin.tool_call_accuracy",
        ],
    }


class _NonStreamingWorkflow(af.Workflow):  # type: ignore[misc]
    """A user's MAF workflow whose ``run`` gives the finished WorkflowRunResult even when asked
    to stream."""

    async def run(self, message: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs.pop("stream", None)
        return await super().run(message, **kwargs)


async def test_a_maf_workflow_whose_streamed_run_returns_a_run_result_is_read() -> None:
    """A MAF Workflow whose ``run(stream=True)`` answers with a WorkflowRunResult instead of a
    stream is evaluated from that result (it used to fail iterating a coroutine)."""
    workflow = _maf_workflow()
    workflow.__class__ = _NonStreamingWorkflow  # the instance the subclass would build
    [result] = await evaluate_workflow(
        workflow=workflow,
        queries=["Plan a trip to Paris"],
        evaluators=keyword_check("sunny"),
        include_overall=False,
    )
    assert sorted(result.sub_results) == ["researcher", "writer"]
    assert result.sub_results["researcher"].items[0].status == "pass"
