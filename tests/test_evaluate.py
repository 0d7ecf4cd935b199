"""evaluate_agent: validation, ordering, concurrency, error isolation, tools and usage."""

from __future__ import annotations

import asyncio
import pickle
import time
from collections.abc import Sequence
from typing import Any

import pytest

from evalpipe import (
    AgentResponse,
    CheckResult,
    ConversationSplit,
    EvalItem,
    EvalResults,
    ExpectedToolCall,
    FunctionCallContent,
    FunctionResultContent,
    LocalEvaluator,
    Message,
    RunUsage,
    ToolDefinition,
    evaluate_agent,
    evaluator,
    keyword_check,
    tool_called_check,
)
from evalpipe.evaluators.local import resolve_evaluators
from evalpipe.itemize import NO_EXPECTATIONS
from evalpipe.runner import in_process_plan, resolve_target
from evalpipe.runner.shard import run_calls
from evalpipe.runner.state import RunState
from runner_helpers import transcripts


class EchoAgent:
    """Answers "echo: <query>"; optionally sleeps, fails on chosen queries, and counts concurrency."""

    def __init__(
        self,
        name: str | None = "echo",
        *,
        delay: float = 0.0,
        fail_on: Sequence[str] = (),
        tools: list[Any] | None = None,
    ) -> None:
        self.name = name
        self.delay = delay
        self.fail_on = set(fail_on)
        self.tools = tools
        self.active = 0
        self.max_active = 0
        self.calls: list[str] = []

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        query = messages[-1].text
        self.calls.append(query)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if query in self.fail_on:
                raise RuntimeError(f"model unavailable for {query}")
            return AgentResponse(
                messages=[Message("assistant", [f"echo: {query}"])],
                usage=RunUsage(input_tokens=3, output_tokens=2, total_tokens=5),
            )
        finally:
            self.active -= 1


class SpyEvaluator:
    """A provider that records what it was given."""

    name = "Spy"

    def __init__(self, *, raises: bool = False) -> None:
        self.raises = raises
        self.seen: list[tuple[int, str]] = []

    async def evaluate(self, items: Sequence[EvalItem], *, eval_name: str) -> EvalResults:
        self.seen.append((len(items), eval_name))
        if self.raises:
            raise ConnectionError("judge endpoint down")
        return EvalResults(
            provider=self.name, run_id=eval_name, result_counts={"passed": len(items)}
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"agent": EchoAgent(), "queries": ["a"], "num_repetitions": 0},
            "num_repetitions must be >= 1, got 0.",
        ),
        (
            {"agent": EchoAgent(), "queries": ["a", "b"], "expected_output": ["x"]},
            "Got 2 queries but 1 expected_output values.",
        ),
        (
            {
                "agent": EchoAgent(),
                "queries": ["a", "b"],
                "expected_tool_calls": [[ExpectedToolCall("f")]],
            },
            "Got 2 queries but 1 expected_tool_calls lists.",
        ),
        (
            {"queries": ["a", "b"], "responses": [AgentResponse()]},
            "Got 2 queries but 1 responses.",
        ),
        (
            {"responses": [AgentResponse()]},
            "Provide 'queries' alongside 'responses' so the conversation can be constructed for "
            "evaluation. For Responses API evaluation by response ID, use "
            "evaluate_traces(response_ids=...) from the azure-ai package.",
        ),
        (
            {"queries": ["a"]},
            "Provide 'agent' when using 'queries' to run the agent. To evaluate pre-existing "
            "responses without an agent, use 'responses=' instead.",
        ),
        ({}, "Provide either 'queries' (with 'agent') or 'responses' (or both)."),
        (
            {"agent": EchoAgent(), "queries": ["a"], "max_concurrency": 0},
            "max_concurrency must be >= 1, got 0.",
        ),
        (
            {"agent": EchoAgent(), "queries": ["a", "b"], "context": ["only one"]},
            "Got 2 queries but 1 context values.",
        ),
    ],
)
async def test_validation_messages(kwargs: dict[str, Any], message: str) -> None:
    """Inconsistent arguments raise ValueError with MAF's exact wording (and evalpipe's own)."""
    with pytest.raises(ValueError) as info:
        await evaluate_agent(evaluators=keyword_check("x"), **kwargs)
    assert str(info.value) == message


async def test_concurrent_runs_keep_repetition_major_order() -> None:
    """200 queries x 3 reps of a 50 ms agent at c=32 run concurrently yet come back rep-major."""
    agent = EchoAgent(delay=0.05)
    queries = [f"q{i}" for i in range(200)]
    started = time.perf_counter()
    [result] = await evaluate_agent(
        agent=agent,
        queries=queries,
        evaluators=keyword_check("echo"),
        num_repetitions=3,
        max_concurrency=32,
    )
    elapsed = time.perf_counter() - started
    assert elapsed < 5.0, f"600 x 50 ms at c=32 took {elapsed:.2f} s (MAF: ~30 s serial)"
    assert agent.max_active == 32
    items = result.input_items
    assert [i.query for i in items] == queries * 3
    assert [(i.repetition, i.query_index) for i in items] == [
        (r, q) for r in range(3) for q in range(200)
    ]
    assert [r.item_id for r in result.items] == [str(i) for i in range(600)]
    assert result.passed == 600


async def test_max_concurrency_bounds_active_runs() -> None:
    """No more than max_concurrency agent runs are in flight at once."""
    agent = EchoAgent(delay=0.01)
    await evaluate_agent(
        agent=agent,
        queries=[f"q{i}" for i in range(20)],
        evaluators=keyword_check("echo"),
        max_concurrency=3,
    )
    assert agent.max_active == 3


async def test_failing_run_is_errored_and_the_rest_kept() -> None:
    """An agent exception makes that item errored (AgentError); other items are evaluated."""
    agent = EchoAgent(fail_on=["b"])
    [result] = await evaluate_agent(
        agent=agent, queries=["a", "b", "c"], evaluators=keyword_check("echo")
    )
    assert result.result_counts == {"passed": 2, "failed": 0, "errored": 1}
    assert result.total == 2
    bad = result.items[1]
    assert bad.status == "error"
    assert bad.error_code == "AgentError"
    assert bad.error_message == "RuntimeError: model unavailable for b"
    assert result.per_evaluator["keyword_check"] == {"passed": 2, "failed": 0, "errored": 1}
    assert not result.all_passed


async def test_raising_provider_fails_alone() -> None:
    """A provider that raises yields a failed EvalResults with errored items; others are kept."""
    spy = SpyEvaluator(raises=True)
    local, broken = await evaluate_agent(
        agent=EchoAgent(), queries=["a", "b"], evaluators=[keyword_check("echo"), spy]
    )
    assert local.provider == "Local"
    assert local.passed == 2
    assert broken.provider == "Spy"
    assert broken.status == "failed"
    assert broken.error == "ConnectionError: judge endpoint down"
    assert [i.error_code for i in broken.items] == ["EvaluatorError", "EvaluatorError"]
    assert broken.errored == 2


async def test_eval_names_and_provider_suffix() -> None:
    """The default name is "Eval: {agent}"; several providers each get " ({provider})"."""
    spy = SpyEvaluator()
    results = await evaluate_agent(
        agent=EchoAgent("weather"), queries=["a"], evaluators=[keyword_check("echo"), spy]
    )
    assert [r.run_id for r in results] == ["Eval: weather (Local)", "Eval: weather (Spy)"]
    [single] = await evaluate_agent(agent=EchoAgent(None), queries=["a"], evaluators=spy)
    assert single.run_id == "Eval: agent"
    [named] = await evaluate_agent(
        agent=EchoAgent(), queries=["a"], evaluators=spy, eval_name="nightly"
    )
    assert named.run_id == "nightly"


def test_adjacent_callables_are_grouped() -> None:
    """[kw_a, tc_b, Spy, kw_c] resolves to [Local(kw_a, tc_b), Spy, Local(kw_c)]."""
    kw_a, tc_b, kw_c = keyword_check("a"), tool_called_check("b"), keyword_check("c")
    spy = SpyEvaluator()
    resolved = resolve_evaluators([kw_a, tc_b, spy, kw_c])
    assert [type(r).__name__ for r in resolved] == [
        "LocalEvaluator",
        "SpyEvaluator",
        "LocalEvaluator",
    ]
    assert isinstance(resolved[0], LocalEvaluator)
    assert resolved[0].checks == [kw_a, tc_b]
    assert resolved[1] is spy
    assert isinstance(resolved[2], LocalEvaluator)
    assert resolved[2].checks == [kw_c]


def test_non_callable_evaluator_is_a_type_error() -> None:
    """Anything neither an Evaluator nor callable is rejected with MAF's message."""
    with pytest.raises(TypeError, match=r"^Expected an Evaluator or callable, got int$"):
        resolve_evaluators([keyword_check("a"), 3])


async def test_expectations_are_stamped_by_query_index() -> None:
    """expected_output and expected_tool_calls line up with query i % n across repetitions."""
    [result] = await evaluate_agent(
        agent=EchoAgent(),
        queries=["a", "b"],
        expected_output=["A", "B"],
        expected_tool_calls=[[ExpectedToolCall("fa")], [ExpectedToolCall("fb", {"x": 1})]],
        evaluators=keyword_check("echo"),
        num_repetitions=2,
    )
    items = result.input_items
    assert [i.expected_output for i in items] == ["A", "B", "A", "B"]
    assert [[e.name for e in i.expected_tool_calls or []] for i in items] == [
        ["fa"],
        ["fb"],
        ["fa"],
        ["fb"],
    ]


async def test_flat_expected_tool_calls_are_one_querys_worth() -> None:
    """A flat list of ExpectedToolCall is wrapped as the expectations of the single query."""
    [result] = await evaluate_agent(
        agent=EchoAgent(),
        queries="a",
        expected_tool_calls=[ExpectedToolCall("f"), ExpectedToolCall("g")],
        evaluators=keyword_check("echo"),
    )
    assert [e.name for e in result.input_items[0].expected_tool_calls or []] == ["f", "g"]


async def test_split_and_context_are_stamped() -> None:
    """conversation_split and context reach every item; context may be given per query."""
    [result] = await evaluate_agent(
        agent=EchoAgent(),
        queries=["a", "b"],
        context=["ctx a", "ctx b"],
        conversation_split=ConversationSplit.FULL,
        evaluators=keyword_check("echo"),
    )
    assert [i.context for i in result.input_items] == ["ctx a", "ctx b"]
    assert all(i.split_strategy is ConversationSplit.FULL for i in result.input_items)


async def test_responses_mode_does_not_run_the_agent() -> None:
    """With responses=, the agent only lends its tools; repetitions are ignored."""
    agent = EchoAgent(tools=[ToolDefinition("lookup", "Look up", {"type": "object"})])
    response = AgentResponse(messages=[Message("assistant", ["It is sunny."])])
    [result] = await evaluate_agent(
        agent=agent,
        queries="weather?",
        responses=response,
        evaluators=keyword_check("sunny"),
        num_repetitions=5,
    )
    assert agent.calls == []
    assert result.passed == 1
    item = result.input_items[0]
    assert [m.role for m in item.conversation] == ["user", "assistant"]
    assert [t.name for t in item.tools or []] == ["lookup"]


class MafLikeResponse:
    """Duck-typed like MAF's AgentResponse: .messages of foreign message objects, usage_details."""

    class _Content:
        def __init__(self, **fields: Any) -> None:
            self.__dict__.update(fields)

    class _Message:
        def __init__(self, role: str, contents: list[Any]) -> None:
            self.role = role
            self.contents = contents

    def __init__(self) -> None:
        c = self._Content
        self.messages = [
            self._Message(
                "assistant",
                [
                    c(
                        type="function_call",
                        name="get_weather",
                        arguments='{"city": "Paris"}',
                        call_id="c1",
                    )
                ],
            ),
            self._Message("tool", [c(type="function_result", call_id="c1", result='{"temp": 20}')]),
            self._Message("assistant", [c(type="text", text="Sunny, 20C.")]),
        ]
        self.usage_details = {
            "input_token_count": 11,
            "output_token_count": 7,
            "total_token_count": 18,
        }


async def test_foreign_response_objects_are_read() -> None:
    """Responses shaped like MAF's (foreign contents, usage_details) become items with usage."""
    [result] = await evaluate_agent(
        queries="Weather in Paris?",
        responses=[MafLikeResponse()],
        evaluators=[keyword_check("sunny"), tool_called_check("get_weather")],
    )
    assert result.passed == 1
    item = result.input_items[0]
    assert [m.role for m in item.conversation] == ["user", "assistant", "tool", "assistant"]
    assert item.usage == RunUsage(input_tokens=11, output_tokens=7, total_tokens=18)


async def test_usage_and_latency_are_kept_per_item() -> None:
    """Each item keeps its run's tokens and measured latency."""
    [result] = await evaluate_agent(
        agent=EchoAgent(delay=0.02), queries=["a"], evaluators=keyword_check("echo")
    )
    usage = result.input_items[0].usage
    assert usage is not None
    assert usage.total_tokens == 5
    assert usage.latency_seconds is not None
    assert 0.015 <= usage.latency_seconds < 1.0


def _weather_schema(kind: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"city": {"type": kind}}}


async def test_tools_override_and_empty_list() -> None:
    """tools= replaces captured definitions for evaluation; tools=[] evaluates without tools."""
    agent = EchoAgent(tools=[ToolDefinition("declared", "", {"type": "object"})])
    [over] = await evaluate_agent(
        agent=agent,
        queries=["a"],
        tools=[ToolDefinition("override", "", {"type": "object"})],
        evaluators=keyword_check("echo"),
    )
    assert [t.name for t in over.input_items[0].tools or []] == ["override"]
    [none] = await evaluate_agent(
        agent=agent, queries=["a"], tools=[], evaluators=keyword_check("echo")
    )
    assert none.input_items[0].tools == []
    [declared] = await evaluate_agent(agent=agent, queries=["a"], evaluators=keyword_check("echo"))
    assert [t.name for t in declared.input_items[0].tools or []] == ["declared"]


def _called_weather_response(*schemas: str) -> AgentResponse:
    return AgentResponse(
        messages=[
            Message(
                "assistant", [FunctionCallContent(name="get_weather", arguments={}, call_id="c")]
            ),
            Message("tool", [FunctionResultContent(call_id="c", result="sunny")]),
            Message("assistant", ["sunny"]),
        ],
        tools=[ToolDefinition("get_weather", "", _weather_schema(s)) for s in schemas],
    )


async def test_conflicting_schemas_raise_for_recorded_responses() -> None:
    """A called tool captured with two input schemas raises ValueError naming the tool."""
    with pytest.raises(ValueError, match="Tool 'get_weather' was called"):
        await evaluate_agent(
            queries="q",
            responses=_called_weather_response("string", "integer"),
            evaluators=keyword_check("sunny"),
        )
    [ok] = await evaluate_agent(
        queries="q",
        responses=_called_weather_response("string", "integer"),
        tools=[ToolDefinition("get_weather")],
        evaluators=keyword_check("sunny"),
    )
    assert ok.passed == 1


class SchemaDriftAgent:
    """Returns a response whose tool snapshots conflict on the second query only."""

    name = "drift"

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        if messages[-1].text == "drift":
            return _called_weather_response("string", "integer")
        return _called_weather_response("string", "string")


async def test_conflicting_schemas_error_one_item_in_a_run() -> None:
    """When the agent ran, a schema conflict errors that item only, so the run is not lost."""
    [result] = await evaluate_agent(
        agent=SchemaDriftAgent(), queries=["fine", "drift"], evaluators=keyword_check("sunny")
    )
    assert [i.status for i in result.items] == ["pass", "error"]
    assert result.items[1].error_code == "ToolSchemaConflict"


async def test_tool_snapshots_survive_json_and_pickle() -> None:
    """Items' tool snapshots round-trip through JSON and pickle unchanged."""
    [result] = await evaluate_agent(
        queries="q", responses=_called_weather_response("string"), evaluators=keyword_check("x")
    )
    item = result.input_items[0]
    assert EvalItem.model_validate_json(item.model_dump_json()).tools == item.tools
    assert pickle.loads(pickle.dumps(item)).tools == item.tools


async def test_sync_agent_run_is_supported() -> None:
    """An agent with a synchronous run() works (it is called in a worker thread)."""

    class SyncAgent:
        name = "sync"

        def run(self, messages: list[Message], **kwargs: Any) -> str:
            return f"sync {messages[-1].text}"

    [result] = await evaluate_agent(
        agent=SyncAgent(), queries=["a"], evaluators=keyword_check("sync a")
    )
    assert result.passed == 1


async def test_float_scores_from_function_evaluators_are_kept() -> None:
    """An @evaluator's float is the score (0.25 stays 0.25 and fails, 0.75 passes)."""

    @evaluator
    def length_score(response: str) -> float:
        return 0.75 if "long" in response else 0.25

    [result] = await evaluate_agent(
        agent=EchoAgent(), queries=["long one", "short"], evaluators=length_score
    )
    assert [(s.score, s.passed) for i in result.items for s in i.scores] == [
        (0.75, True),
        (0.25, False),
    ]


async def test_runner_reports_each_finished_call() -> None:
    """The runner calls on_call once per finished call and returns them rep-major."""
    seen: list[tuple[int, int]] = []
    runs = await transcripts(
        EchoAgent(),
        ["a", "b"],
        repetitions=2,
        on_call=lambda o: seen.append((o.run.repetition, o.run.query_index)),
    )
    assert sorted(seen) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [(r.repetition, r.query_index) for r in runs] == [(0, 0), (0, 1), (1, 0), (1, 1)]


async def test_checks_see_the_agent_transcript() -> None:
    """A custom check receives the item built from the query and the agent's messages."""
    seen: list[list[str]] = []

    def roles(item: EvalItem) -> CheckResult:
        seen.append([m.role for m in item.conversation])
        return CheckResult(True, "ok", "roles")

    await evaluate_agent(agent=EchoAgent(), queries=["a"], evaluators=roles)
    assert seen == [["user", "assistant"]]


async def test_shared_semaphore_bounds_runs_across_callers() -> None:
    """A semaphore shared by two shards' call fan-outs bounds their calls together."""
    agent = EchoAgent(delay=0.01)
    shared = asyncio.Semaphore(2)

    def plan(prefix: str) -> Any:
        return in_process_plan(
            name="x",
            target=resolve_target(agent),
            kind="agent",
            queries=[f"{prefix}{i}" for i in range(6)],
            expectations=[NO_EXPECTATIONS] * 6,
            providers=[],
        )

    a, b = plan("a"), plan("b")
    await asyncio.gather(
        run_calls(a, RunState(), a.calls, semaphore=shared, workers=4),
        run_calls(b, RunState(), b.calls, semaphore=shared, workers=4),
    )
    assert len(agent.calls) == 12
    assert agent.max_active == 2
