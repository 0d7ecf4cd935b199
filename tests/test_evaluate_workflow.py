"""evaluate_workflow and its stages: per-agent items and sub_results, names, order, upstream context,
per-agent expectations, failing executors, validation."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from examples.travel.workflow import planner, researcher, travel_workflow, writer

from evalpipe import (
    AgentResponse,
    EvalItem,
    EvalNotPassedError,
    EvalResults,
    ExpectedToolCall,
    LocalEvaluator,
    Message,
    keyword_check,
    tool_call_args_match,
    tool_called_check,
)
from evalpipe.evaluate import evaluate_workflow
from evalpipe.itemize import AgentExpectations, SplitAt, WorkflowItems, build_workflow_items
from evalpipe.runner import evaluate_prebuilt
from evalpipe.targets.workflow import SequentialWorkflow
from evalpipe.transcripts import WorkflowRun
from runner_helpers import transcripts

QUERIES = ["Plan a trip to Paris", "Should I pack an umbrella for London?"]


class Broken:
    """A user agent whose model call fails on queries mentioning London."""

    name = "researcher"

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        if "London" in messages[0].text:
            raise TimeoutError("model timed out")
        return await researcher().run(messages)


async def test_overall_on_top_with_one_sub_result_per_agent_and_maf_names() -> None:
    """The top result is the overall one; sub_results are keyed by agent in workflow order."""
    [result] = await evaluate_workflow(
        workflow=travel_workflow(), queries=QUERIES, evaluators=keyword_check("°C")
    )
    assert result.run_id == "Workflow Eval: travel-planner — overall"
    assert list(result.sub_results) == ["planner", "researcher", "writer"]
    assert {k: s.run_id for k, s in result.sub_results.items()} == {
        "planner": "Workflow Eval: travel-planner — planner",
        "researcher": "Workflow Eval: travel-planner — researcher",
        "writer": "Workflow Eval: travel-planner — writer",
    }
    counts = {k: (s.passed, s.failed) for k, s in result.sub_results.items()}
    assert counts == {"planner": (0, 2), "researcher": (2, 0), "writer": (0, 2)}
    assert (result.passed, result.failed) == (0, 2)
    with pytest.raises(EvalNotPassedError, match=r"Failed: planner, writer\.$"):
        result.raise_for_status()


async def test_several_providers_get_the_provider_suffix_on_every_name() -> None:
    """With two providers each returns its own tree and every run_id ends in " (provider)"."""
    results = await evaluate_workflow(
        workflow=travel_workflow(),
        queries=QUERIES[:1],
        evaluators=[LocalEvaluator(keyword_check("Paris")), LocalEvaluator(keyword_check("°C"))],
        eval_name="trip",
    )
    assert [r.run_id for r in results] == ["trip — overall (Local)", "trip — overall (Local)"]
    assert results[0].sub_results["writer"].run_id == "trip — writer (Local)"
    assert [r.sub_results["writer"].passed for r in results] == [1, 0]


async def test_items_are_repetition_major_with_query_index_repetition_and_agent() -> None:
    """2 queries × 2 reps: every group lists Q0, Q1, Q0, Q1 with ids "i" and "i/agent"."""
    [result] = await evaluate_workflow(
        workflow=travel_workflow(),
        queries=QUERIES,
        evaluators=keyword_check(""),
        num_repetitions=2,
    )
    for group in [result, *result.sub_results.values()]:
        assert [(i.query_index, i.repetition) for i in group.input_items] == [
            (0, 0),
            (1, 0),
            (0, 1),
            (1, 1),
        ]
    assert [i.item_id for i in result.items] == ["0", "1", "2", "3"]
    writer_items = result.sub_results["writer"]
    assert [i.item_id for i in writer_items.items] == [
        "0/writer",
        "1/writer",
        "2/writer",
        "3/writer",
    ]
    assert writer_items.items[1].metadata == {
        "query_index": 1,
        "repetition": 0,
        "agent": "writer",
        "executor_id": "writer",
        "split_at": 5,  # user, planner, researcher's call, result and notes
    }
    assert {i.agent for i in result.input_items} == {None}


async def test_received_context_puts_upstream_output_on_the_query_side() -> None:
    """upstream_context="received": the writer's item holds what it got; its response is its own."""
    [result] = await evaluate_workflow(
        workflow=travel_workflow(), queries=QUERIES[:1], evaluators=keyword_check("")
    )
    item = result.sub_results["writer"].input_items[0]
    roles = [m.role for m in item.conversation]
    assert roles == [
        "user",
        "assistant",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "assistant",
    ]
    assert item.conversation[1].text.startswith("Plan for Paris")
    assert isinstance(item.split_strategy, SplitAt)
    assert item.query == "Plan a trip to Paris"
    assert item.response == (
        "Your trip to Paris: expect sunny weather. We suggest staying at Hotel Lumiere. Enjoy!"
    )


async def test_user_only_context_is_mafs_user_messages_plus_the_agents_turn() -> None:
    """upstream_context="user_only": the item is the user's messages and the agent's own turn only."""
    [result] = await evaluate_workflow(
        workflow=travel_workflow(),
        queries=QUERIES[:1],
        evaluators=keyword_check(""),
        upstream_context="user_only",
    )
    item = result.sub_results["writer"].input_items[0]
    assert [m.role for m in item.conversation] == ["user", "assistant"]
    assert item.split_strategy is None
    assert "split_at" not in item.metadata
    assert item.response.startswith("Your trip to Paris")


async def test_overall_item_holds_every_tool_call_but_only_the_final_answer_text() -> None:
    """The overall item has the researcher's tool calls and results and the writer's answer."""
    [result] = await evaluate_workflow(
        workflow=travel_workflow(),
        queries=QUERIES[:1],
        expected_tool_calls=[[ExpectedToolCall("get_weather", {"city": "Paris"})]],
        evaluators=[tool_call_args_match, tool_called_check("search_hotels")],
    )
    item = result.input_items[0]
    assert [m.role for m in item.conversation] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert item.response.startswith("Your trip to Paris")
    assert [t.name for t in item.tools or []] == ["get_weather", "search_hotels"]
    assert result.passed == 1
    assert result.sub_results["researcher"].input_items[0].expected_tool_calls is None


async def test_per_agent_expectations_are_stamped_on_that_agents_items_only() -> None:
    """Expected outputs/tool calls given per agent reach that agent's items, by query index."""
    [result] = await evaluate_workflow(
        workflow=travel_workflow(),
        queries=QUERIES,
        expected_output=["Paris", "umbrella"],
        per_agent_expectations={
            "researcher": {
                "expected_tool_calls": [
                    [ExpectedToolCall("get_weather", {"city": "Paris"})],
                    [ExpectedToolCall("get_weather", {"city": "Berlin"})],
                ]
            },
            "writer": AgentExpectations(expected_output=["Hotel Lumiere", None]),
        },
        evaluators=tool_call_args_match,
        num_repetitions=2,
    )
    researcher_items = result.sub_results["researcher"]
    assert [i.status for i in researcher_items.items] == ["pass", "fail", "pass", "fail"]
    writer_items = result.sub_results["writer"].input_items
    assert [i.expected_output for i in writer_items] == ["Hotel Lumiere", None] * 2
    assert [i.expected_output for i in result.input_items] == ["Paris", "umbrella"] * 2
    assert all(i.expected_output is None for i in result.sub_results["planner"].input_items)


async def test_per_agent_expectations_are_validated_before_running() -> None:
    """A wrong length or an agent the workflow lacks raises naming the agent, before any run."""
    with pytest.raises(
        ValueError, match=r"per_agent_expectations\['writer'\]: got 2 queries but 1"
    ):
        await evaluate_workflow(
            workflow=travel_workflow(),
            queries=QUERIES,
            per_agent_expectations={"writer": {"expected_output": ["x"]}},
            evaluators=keyword_check(""),
        )
    with pytest.raises(ValueError, match=r"has no agent 'editor' \(agents: planner, researcher"):
        await evaluate_workflow(
            workflow=travel_workflow(),
            queries=QUERIES,
            per_agent_expectations={"editor": {"expected_output": ["x", "y"]}},
            evaluators=keyword_check(""),
        )


async def test_failing_executor_errors_its_items_and_the_overall_and_keeps_the_rest() -> None:
    """One executor failing on one query: its item, downstream items and the overall item are
    errored; every other item keeps its verdict."""
    wf = SequentialWorkflow([planner(), Broken(), writer()], name="trip")
    [result] = await evaluate_workflow(
        workflow=wf, queries=QUERIES, evaluators=keyword_check("Paris")
    )
    assert [i.status for i in result.items] == ["pass", "error"]
    assert result.items[1].error_code == "ExecutorError"
    assert result.items[1].error_message == (
        "executor 'researcher' failed: TimeoutError: model timed out"
    )
    subs = result.sub_results
    assert [i.status for i in subs["planner"].items] == ["pass", "fail"]
    assert [(i.status, i.error_code) for i in subs["researcher"].items] == [
        ("pass", None),
        ("error", "ExecutorError"),
    ]
    assert [(i.status, i.error_code) for i in subs["writer"].items] == [
        ("pass", None),
        ("error", "UpstreamError"),
    ]
    assert (subs["researcher"].passed, subs["researcher"].errored) == (1, 1)
    with pytest.raises(EvalNotPassedError, match=r"Errored items: 1: ExecutorError\."):
        result.raise_for_status()


class Exploding:
    """A provider whose evaluate raises."""

    name = "Exploding"

    async def evaluate(self, items: Sequence[EvalItem], *, eval_name: str) -> EvalResults:
        raise RuntimeError("judge offline")


async def test_a_raising_provider_fails_its_tree_and_keeps_the_other_providers() -> None:
    """A provider that raises gives failed results with errored items; the other one is intact."""
    local, broken = await evaluate_workflow(
        workflow=travel_workflow(),
        queries=QUERIES[:1],
        evaluators=[LocalEvaluator(keyword_check("Paris")), Exploding()],
    )
    assert local.all_passed
    assert broken.status == "failed"
    assert broken.sub_results["writer"].items[0].error_code == "EvaluatorError"
    assert broken.error == "RuntimeError: judge offline"


async def test_without_overall_the_top_level_is_mafs_aggregate() -> None:
    """include_overall=False gives run_id "aggregate" with counts summed over the agents."""
    [result] = await evaluate_workflow(
        workflow=travel_workflow(),
        queries=QUERIES,
        evaluators=keyword_check("°C"),
        include_overall=False,
    )
    assert (result.eval_id, result.run_id, result.status) == ("aggregate", "aggregate", "completed")
    assert result.result_counts == {"passed": 2, "failed": 4, "errored": 0}
    assert result.items == []
    assert not result.all_passed


async def test_without_per_agent_there_are_no_sub_results_and_with_neither_mafs_error() -> None:
    """include_per_agent=False keeps only the overall; both off raises MAF's no-data message."""
    [result] = await evaluate_workflow(
        workflow=travel_workflow(),
        queries=QUERIES,
        evaluators=keyword_check("Enjoy"),
        include_per_agent=False,
    )
    assert result.sub_results == {}
    assert result.all_passed
    with pytest.raises(ValueError, match=r"^No agent executor data found in the workflow result"):
        await evaluate_workflow(
            workflow=travel_workflow(),
            queries=QUERIES,
            evaluators=keyword_check(""),
            include_overall=False,
            include_per_agent=False,
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "Provide either 'workflow_result' or 'queries'."),
        (
            {"workflow_result": WorkflowRun(query="q"), "expected_output": "x"},
            "Provide 'queries' when using 'expected_output'; 'expected_output' is not supported "
            "with 'workflow_result' only.",
        ),
        (
            {"queries": ["a", "b"], "expected_output": ["x"]},
            "Got 2 queries but 1 expected_output values.",
        ),
        ({"queries": ["a"], "num_repetitions": 0}, "num_repetitions must be >= 1, got 0."),
        ({"queries": ["a"], "max_concurrency": 0}, "max_concurrency must be >= 1, got 0."),
        ({"queries": ["a"], "upstream_context": "all"}, "upstream_context must be 'received' or"),
    ],
)
async def test_validation_messages_are_mafs(kwargs: dict[str, Any], message: str) -> None:
    """Inconsistent arguments raise ValueError with MAF's text (and evalpipe's for its additions)."""
    with pytest.raises(ValueError) as info:
        await evaluate_workflow(workflow=travel_workflow(), evaluators=keyword_check(""), **kwargs)
    assert str(info.value).startswith(message)


async def test_recorded_runs_are_evaluated_without_running_the_workflow() -> None:
    """workflow_result= (WorkflowRuns, e.g. read back from a journal) is evaluated as it is."""
    runs = [await travel_workflow().run(q) for q in QUERIES]
    stored = [WorkflowRun.model_validate_json(r.model_dump_json()) for r in runs]
    [result] = await evaluate_workflow(
        workflow=travel_workflow(), workflow_result=stored, evaluators=keyword_check("°C")
    )
    assert result.sub_results["researcher"].passed == 2
    assert result.failed == 2


async def test_stages_compose_into_evaluate_workflow_and_runs_are_concurrent() -> None:
    """Runner calls → build_workflow_items → evaluate_prebuilt gives the same counts as
    evaluate_workflow; runs overlap up to max_concurrency and come back repetition-major."""
    finished: list[tuple[int, int]] = []
    wf = travel_workflow(latency=0.05)
    started = asyncio.get_running_loop().time()
    runs = await transcripts(
        wf,
        QUERIES,
        repetitions=3,
        max_concurrency=6,
        on_call=lambda o: finished.append((o.run.repetition, o.run.query_index)),
    )
    elapsed = asyncio.get_running_loop().time() - started
    assert elapsed < 0.45  # 6 runs x 3 turns x 50 ms = 0.9 s one at a time
    assert sorted(finished) == [(rep, qi) for rep in range(3) for qi in range(2)]
    assert [(r.repetition, r.query_index) for r in runs] == sorted(finished)
    items = build_workflow_items(runs)
    [staged] = await evaluate_prebuilt(
        [LocalEvaluator(keyword_check("°C"))], items, "Workflow Eval: travel-planner"
    )
    [direct] = await evaluate_workflow(
        workflow=wf, queries=QUERIES, evaluators=keyword_check("°C"), num_repetitions=3
    )
    assert staged.result_counts == direct.result_counts
    assert {k: s.result_counts for k, s in staged.sub_results.items()} == {
        k: s.result_counts for k, s in direct.sub_results.items()
    }


async def test_per_query_expectation_rows_are_accepted_as_well() -> None:
    """Per-agent expectations given per query (a dataset row's ``agents``) reach the same items."""
    runs = await transcripts(travel_workflow(), QUERIES)
    items = build_workflow_items(
        runs,
        per_agent_expectations={
            0: {"writer": {"expected_output": "Lumiere"}},
            1: {
                "researcher": {
                    "expected_tool_calls": [
                        {"name": "get_weather", "arguments": {"city": "London"}}
                    ]
                }
            },
        },
    )
    assert [i.expected_output for i in items.per_agent["writer"]] == ["Lumiere", None]
    researcher_calls = [i.expected_tool_calls for i in items.per_agent["researcher"]]
    assert researcher_calls == [None, [ExpectedToolCall("get_weather", {"city": "London"})]]


async def test_workflow_items_keep_the_per_agent_split_through_json() -> None:
    """WorkflowItems round-trip through JSON with each per-agent item's received/produced split."""
    items = build_workflow_items(await transcripts(travel_workflow(), QUERIES))
    restored = WorkflowItems.model_validate_json(items.model_dump_json())
    before, after = items.per_agent["writer"][0], restored.per_agent["writer"][0]
    assert after.split_strategy == before.split_strategy == SplitAt(7)
    assert after.response == before.response
    assert after.response.startswith("Your trip to Paris")
