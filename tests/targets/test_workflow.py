"""Workflow targets: WorkflowRun records, sequential and router workflows, call_workflow, the demo."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from examples.travel.workflow import travel_workflow

from evalpipe import AgentResponse, Message
from evalpipe.items import RunUsage
from evalpipe.targets.demo import get_weather, search_hotels
from evalpipe.targets.workflow import (
    RouterWorkflow,
    SequentialWorkflow,
    WorkflowRun,
    as_workflow,
    call_workflow,
    handoff_target,
    is_workflow,
    workflow_identity,
)


class Echo:
    """A user agent that answers with a fixed text, tagged with what it last saw."""

    def __init__(self, name: str, text: str, tokens: int = 5) -> None:
        self.name = name
        self.text = text
        self.tokens = tokens

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        return AgentResponse(
            messages=[Message("assistant", [self.text])],
            usage=RunUsage(input_tokens=self.tokens, output_tokens=1, total_tokens=self.tokens + 1),
        )


class Broken:
    """A user agent whose model call fails."""

    name = "broken"

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        raise ConnectionError("model endpoint unreachable")


async def test_sequential_records_each_turn_in_order_with_upstream_output() -> None:
    """Each executor's turn holds what it received (user + upstream output) and what it produced."""
    run = await travel_workflow().run("Plan a trip to Paris")
    assert run.ok
    assert [e.executor_id for e in run.executors] == ["planner", "researcher", "writer"]
    planner, researcher, writer = run.executors
    assert [m.role for m in planner.received] == ["user"]
    assert researcher.received == [*planner.received, *planner.produced]
    assert writer.received == [*researcher.received, *researcher.produced]
    calls = [c for m in researcher.produced for c in m.function_calls]
    assert [(c.name, c.arguments) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("search_hotels", {"city": "Paris"}),
    ]
    results = [r.result for m in researcher.produced for r in m.function_results]
    assert results == [get_weather("Paris"), search_hotels("Paris")]
    assert [t.name for t in researcher.tools or []] == ["get_weather", "search_hotels"]
    assert planner.tools is None
    assert run.output == writer.produced
    assert run.output[-1].text == (
        "Your trip to Paris: expect sunny weather. We suggest staying at Hotel Lumiere. Enjoy!"
    )


async def test_usage_is_summed_over_turns_and_the_run_is_timed() -> None:
    """Run usage adds up the executors' tokens; every turn and the run have a latency."""
    run = await SequentialWorkflow([Echo("a", "x", 3), Echo("b", "y", 4)]).run("q")
    assert (run.usage.input_tokens, run.usage.total_tokens) == (7, 9)
    assert all(e.usage.latency_seconds is not None for e in run.executors)
    assert run.usage.latency_seconds is not None


async def test_workflow_run_round_trips_through_json() -> None:
    """A WorkflowRun (tool calls, results, usage, errors) survives model_dump_json/model_validate_json."""
    run = await travel_workflow().run("I'm planning a trip to Oslo")
    failed = await SequentialWorkflow([Echo("a", "x"), Broken()]).run("q")
    for original in (run, failed):
        assert WorkflowRun.model_validate_json(original.model_dump_json()) == original


async def test_failing_executor_is_recorded_and_later_agents_are_marked_not_run() -> None:
    """A raising agent gives ExecutorError on its turn, UpstreamError after it; earlier turns stay."""
    run = await SequentialWorkflow([Echo("first", "ok"), Broken(), Echo("last", "never")]).run("q")
    assert run.error_code == "ExecutorError"
    assert run.error_message == (
        "executor 'broken' failed: ConnectionError: model endpoint unreachable"
    )
    first, broken, last = run.executors
    assert first.ok
    assert first.produced[0].text == "ok"
    assert (broken.error_code, broken.produced) == ("ExecutorError", [])
    assert [m.text for m in broken.received] == ["q", "ok"]
    assert last.error_code == "UpstreamError"
    assert run.output == []


class Router:
    """Hands off to the agent named in the query, or answers itself."""

    name = "router"

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        query = messages[0].text
        if messages[-1].role == "assistant":
            return AgentResponse(messages=[Message("assistant", ["Done."])])
        target = query.split()[-1]
        return AgentResponse(messages=[Message("assistant", [f"HANDOFF: {target}"])])


async def test_router_hands_off_and_the_specialist_answers() -> None:
    """The router's "HANDOFF: name" sends the turn to that agent; its answer is the output."""
    wf = RouterWorkflow(Router(), [Echo("weather", "Sunny."), Echo("hotels", "Lumiere.")])
    run = await wf.run("route to hotels")
    assert run.ok
    assert [e.executor_id for e in run.executors] == ["router", "hotels"]
    assert [m.text for m in run.executors[1].received] == ["route to hotels", "HANDOFF: hotels"]
    assert [m.text for m in run.output] == ["Lumiere."]
    assert wf.agent_names == ["router", "weather", "hotels"]


async def test_router_to_an_unknown_agent_is_a_routing_error() -> None:
    """A handoff to an agent the workflow does not have ends the run with RoutingError."""
    run = await RouterWorkflow(Router(), [Echo("weather", "Sunny.")]).run("route to flights")
    assert run.error_code == "RoutingError"
    assert "unknown agent 'flights'" in (run.error_message or "")
    assert run.executors[0].ok


async def test_handoff_loops_stop_at_max_hops() -> None:
    """Agents handing off to each other forever stop after max_hops with MaxHopsExceeded."""
    ping = Echo("ping", "HANDOFF: pong")
    pong = Echo("pong", "HANDOFF: ping")
    run = await RouterWorkflow(ping, [pong], max_hops=3).run("go")
    assert run.error_code == "MaxHopsExceeded"
    assert [e.executor_id for e in run.executors] == ["ping", "pong", "ping", "pong"]


def test_handoff_target_reads_the_last_assistant_text() -> None:
    """handoff_target finds "HANDOFF: name" / "route to: name" in the last assistant text only."""
    assert handoff_target([Message("assistant", ["Sure. HANDOFF: writer."])]) == "writer"
    assert handoff_target([Message("assistant", ["Route to: hotel desk"])]) == "hotel desk"
    assert (
        handoff_target([Message("assistant", ["HANDOFF: a"]), Message("assistant", ["done"])])
        is None
    )


def test_invalid_compositions_are_rejected_with_the_reason() -> None:
    """Duplicate agent names, no agents, attempts or max_hops < 1 and non-workflows raise naming
    the problem."""
    with pytest.raises(ValueError, match="two agents are named 'a'"):
        SequentialWorkflow([Echo("a", "x"), Echo("a", "y")])
    with pytest.raises(ValueError, match="at least one agent"):
        SequentialWorkflow([])
    with pytest.raises(ValueError, match="attempts must be >= 1, got 0"):
        SequentialWorkflow([Echo("a", "x")], attempts=0)
    with pytest.raises(ValueError, match="max_hops must be >= 1"):
        RouterWorkflow(Echo("r", "x"), [], max_hops=0)
    with pytest.raises(TypeError, match="cannot run str as a workflow"):
        as_workflow("not a workflow")


class Exploding:
    """A workflow whose own code raises before any agent runs."""

    name = "exploding"

    async def run(self, query: str) -> WorkflowRun:
        raise RuntimeError("bad graph")


async def test_call_workflow_stamps_the_run_and_keeps_a_raising_workflow_as_an_error() -> None:
    """call_workflow sets query index and repetition; a workflow that raises gives WorkflowError."""
    ok = await call_workflow(
        travel_workflow(), "Find me a hotel in Tokyo", query_index=3, repetition=1
    )
    assert (ok.query_index, ok.repetition, ok.query) == (3, 1, "Find me a hotel in Tokyo")
    bad = await call_workflow(Exploding(), "q", query_index=0, repetition=2)
    assert (bad.error_code, bad.error_message) == ("WorkflowError", "RuntimeError: bad graph")
    assert (bad.repetition, bad.workflow) == (2, "exploding")


async def test_semaphore_bounds_concurrent_workflow_runs() -> None:
    """A shared semaphore lets at most its value of workflow runs proceed at once."""
    active = peak = 0

    class Slow:
        name = "slow"

        async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.01)
            active -= 1
            return AgentResponse(messages=[Message("assistant", ["ok"])])

    wf = SequentialWorkflow([Slow()])
    semaphore = asyncio.Semaphore(2)
    await asyncio.gather(
        *(
            call_workflow(wf, "q", query_index=i, repetition=0, semaphore=semaphore)
            for i in range(6)
        )
    )
    assert peak == 2


def test_workflow_identity_names_the_workflow_and_its_agents() -> None:
    """workflow_identity is a stable string of the workflow name and its agents in order."""
    assert (
        workflow_identity(travel_workflow()) == "workflow:travel-planner(planner,researcher,writer)"
    )
    assert workflow_identity(travel_workflow()) == workflow_identity(travel_workflow())


async def test_demo_writer_drops_the_temperature_the_researcher_found() -> None:
    """The scripted demo writer's deliberate weakness: "°C" is in the research, not in the answer."""
    run = await travel_workflow().run("Should I pack an umbrella for London?")
    researcher = run.for_agent("researcher")[0]
    assert "14°C" in researcher.produced[-1].text
    assert "°C" not in run.output[-1].text
    assert "Pack an umbrella." in run.output[-1].text


def test_is_workflow_tells_workflows_from_agents() -> None:
    """Built-in workflows and objects whose run returns WorkflowRun are workflows; agents are not."""
    assert is_workflow(travel_workflow())
    assert is_workflow(RouterWorkflow(Router(), [Echo("a", "x")]))
    assert is_workflow(Exploding())
    assert not is_workflow(Echo("a", "x"))
    assert not is_workflow("travel")


class Throttled:
    """A user agent whose first ``failures`` calls time out, like a throttled endpoint."""

    def __init__(self, failures: int) -> None:
        self.name = "researcher"
        self.failures = failures
        self.calls = 0

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        self.calls += 1
        if self.calls <= self.failures:
            raise TimeoutError("upstream timed out")
        return AgentResponse(messages=[Message("assistant", ["Sunny."])])


async def test_transient_agent_errors_are_retried_without_rerunning_earlier_agents() -> None:
    """attempts=3 retries a timing-out agent in place; the agent before it runs once."""
    first = Echo("planner", "Plan.")
    flaky = Throttled(failures=2)
    wf = SequentialWorkflow([first, flaky], attempts=3, retry_wait=0.001)
    run = await wf.run("q")
    assert run.ok
    assert flaky.calls == 3
    assert [e.attempts for e in run.executors] == [1, 3]


async def test_retries_stop_at_attempts_and_say_so() -> None:
    """When every attempt fails the turn is ExecutorError naming how many attempts were made."""
    run = await RouterWorkflow(Throttled(failures=5), [], attempts=2, retry_wait=0.001).run("q")
    assert run.executors[0].error_message == "TimeoutError: upstream timed out (after 2 attempts)"
    assert run.executors[0].attempts == 2
    single = await SequentialWorkflow([Throttled(failures=1)]).run("q")
    assert single.executors[0].attempts == 1
    assert single.error_code == "ExecutorError"
