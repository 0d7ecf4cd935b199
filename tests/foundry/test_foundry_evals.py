"""FoundryEvals end to end: the real azure-ai-projects clients (aio and sync) against the emulator."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from azure.ai.projects import AIProjectClient
from azure.ai.projects.aio import AIProjectClient as AsyncAIProjectClient

from evalpipe import (
    EvalItem,
    EvalNotPassedError,
    Evaluator,
    ExpectedToolCall,
    FunctionCallContent,
    FunctionResultContent,
    LocalEvaluator,
    Message,
    ToolDefinition,
    evaluate_agent,
    keyword_check,
)
from evalpipe.foundry import FoundryEvals, flat_rows, flat_view
from evalpipe.targets.demo import travel_agent
from fakes.foundry_emulator import AsyncStaticCredential, FoundryEmulator, StaticCredential

FAST: dict[str, Any] = {
    "poll_interval": 0.005,
    "max_poll_interval": 0.02,
    "retry_initial_delay": 0.005,
}
WEATHER = ToolDefinition(
    "get_weather",
    "Weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}},
)


def item(i: int, answer: str = "A fine answer.", **kw: Any) -> EvalItem:
    """A one-turn item whose response text steers the emulator's verdict ([fail], [error], ...)."""
    return EvalItem(
        [Message("user", [f"Question {i}?"]), Message("assistant", [answer])],
        item_id=kw.pop("item_id", None),
        query_index=i,
        repetition=0,
        **kw,
    )


def tool_item(i: int, answer: str = "It is 18C.", expected: list[str] | None = None) -> EvalItem:
    """An item whose agent called get_weather, with tool definitions and expected calls."""
    conv = [
        Message("user", [f"Weather {i}?"]),
        Message(
            "assistant",
            [FunctionCallContent(name="get_weather", arguments={"city": "Paris"}, call_id="c1")],
        ),
        Message("tool", [FunctionResultContent(call_id="c1", result={"temp_c": 18})]),
        Message("assistant", [answer]),
    ]
    return EvalItem(
        conv,
        [WEATHER],
        expected_tool_calls=[ExpectedToolCall(n) for n in expected]
        if expected is not None
        else None,
        query_index=i,
    )


def test_foundry_evals_is_an_evaluator_named_as_maf(aio_project: AsyncAIProjectClient) -> None:
    """isinstance(x, Evaluator) holds and the provider name is MAF's "Microsoft Foundry"."""
    evals = FoundryEvals(aio_project, model="gpt-4o-mini")
    assert isinstance(evals, Evaluator)
    assert evals.name == "Microsoft Foundry"


async def test_happy_path_aio_scores_every_item_in_input_order(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """Three items, one failing: counts, per-evaluator counts, scores and metadata, input order kept."""
    emulator.polls_to_complete = 3
    evals = FoundryEvals(aio_project, model="gpt-4o-mini", **FAST)
    items = [item(0), item(1, "Bad answer [fail]", metadata={"tag": "x"}), item(2)]
    results = await evals.evaluate(items, eval_name="happy")
    assert (results.status, results.provider) == ("completed", "Microsoft Foundry")
    assert results.result_counts == {"passed": 2, "failed": 1, "errored": 0}
    assert results.per_evaluator == {
        name: {"passed": 2, "failed": 1, "errored": 0}
        for name in ("relevance", "coherence", "task_adherence")
    }
    assert [r.item_id for r in results.items] == ["0", "1", "2"]
    assert [r.status for r in results.items] == ["pass", "fail", "pass"]
    assert results.items[1].metadata == {"query_index": 1, "repetition": 0, "tag": "x"}
    score = results.items[0].scores[0]
    assert (score.name, score.score, score.passed, score.label, score.threshold) == (
        "relevance",
        5.0,
        True,
        "pass",
        3.0,
    )
    assert score.reason == "relevance scored 5 of 5"
    assert score.token_usage is not None
    assert score.token_usage["total_tokens"] > 0
    usage = results.items[0].token_usage
    assert usage is not None
    assert usage["total_tokens"] == sum(
        s.token_usage["total_tokens"] for s in results.items[0].scores if s.token_usage
    )
    assert results.items[0].input_text == "Question 0?"
    assert results.eval_id.startswith("eval_")
    assert results.run_id.startswith("evalrun_")
    assert results.report_url
    assert results.run_id in results.report_url
    assert results.input_items == items
    await evals.aclose()


async def test_wire_calls_match_the_protocol(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """evals.create, runs.create with inline jsonl, polls, output_items; bearer token, no api-version, SDK retries off."""
    evals = FoundryEvals(aio_project, model="judge-deploy", **FAST)
    await evals.evaluate([item(0)], eval_name="wire")
    posts = emulator.calls("POST")
    assert [c.path.count("/") for c in posts] == [1, 3]
    eval_body = posts[0].body
    assert eval_body["name"] == "wire"
    assert eval_body["data_source_config"]["item_schema"]["required"] == ["query", "response"]
    assert eval_body["testing_criteria"][0]["initialization_parameters"] == {
        "deployment_name": "judge-deploy"
    }
    run_body = posts[1].body
    assert run_body["name"] == "wire Run"
    assert run_body["data_source"]["type"] == "jsonl"
    [entry] = run_body["data_source"]["source"]["content"]
    assert entry["item"]["query"] == "Question 0?"
    assert run_body["metadata"]["evalpipe_items"] == "1"
    for call in emulator.calls():
        assert call.headers["authorization"] == "Bearer test-token"
        assert "api-version" not in call.query
        assert call.headers["x-stainless-retry-count"] == "0"
        assert "AsyncOpenAI" in call.headers["user-agent"]
    assert emulator.calls("GET", r"/output_items$")


async def test_sync_client_works_through_worker_threads(
    emulator: FoundryEmulator, sync_project: AIProjectClient
) -> None:
    """A sync AIProjectClient (openai.OpenAI) gives the same results; MAF only accepts the aio one."""
    evals = FoundryEvals(sync_project, model="gpt-4o-mini", **FAST)
    results = await evals.evaluate([item(0), item(1, "[fail]")], eval_name="sync")
    assert [r.status for r in results.items] == ["pass", "fail"]
    assert "x-stainless-async" in emulator.calls()[0].headers
    assert emulator.calls()[0].headers["x-stainless-async"] == "false"
    await evals.aclose()


async def test_six_hundred_items_with_batch_size_500_make_two_runs(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """One eval, two runs (500 + 100 items), results merged in input order with summed counts."""
    evals = FoundryEvals(
        aio_project, model="gpt-4o-mini", evaluators=["relevance"], batch_size=500, **FAST
    )
    items = [item(i, "[fail]" if i % 100 == 7 else "ok") for i in range(600)]
    results = await evals.evaluate(items, eval_name="big")
    runs = emulator.run_objects()
    assert len(emulator.evals) == 1
    assert sorted(len(r["data_source"]["source"]["content"]) for r in runs) == [100, 500]
    assert sorted(r["name"] for r in runs) == ["big Run 1/2", "big Run 2/2"]
    assert len(results.items) == 600
    assert [r.item_id for r in results.items] == [str(i) for i in range(600)]
    assert results.result_counts == {"passed": 594, "failed": 6, "errored": 0}
    assert results.per_evaluator == {"relevance": {"passed": 594, "failed": 6, "errored": 0}}
    assert set(results.run_id.split(", ")) == {r["id"] for r in runs}
    assert results.status == "completed"


async def test_batches_run_concurrently_up_to_the_limit(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """Five batches with max_concurrent_runs=2: never more than two runs in flight, all five complete."""
    emulator.polls_to_complete = 3
    evals = FoundryEvals(
        aio_project,
        model="m",
        evaluators=["coherence"],
        batch_size=2,
        max_concurrent_runs=2,
        **FAST,
    )
    results = await evals.evaluate([item(i) for i in range(10)], eval_name="conc")
    assert results.result_counts == {"passed": 10, "failed": 0, "errored": 0}
    # Replay the request log: a run is in flight from its create until its output items are read.
    in_flight = peak = 0
    for call in emulator.calls():
        if call.method == "POST" and call.path.endswith("/runs"):
            in_flight += 1
            peak = max(peak, in_flight)
        elif call.path.endswith("/output_items"):
            in_flight -= 1
    assert peak == 2
    assert len(emulator.run_objects()) == 5


async def test_local_and_foundry_mixed_in_one_evaluate_agent_call(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """evaluate_agent with LocalEvaluator and FoundryEvals gives one EvalResults each, item-aligned."""
    foundry = FoundryEvals(
        aio_project, model="gpt-4o-mini", evaluators=["relevance", "tool_call_accuracy"], **FAST
    )
    local, cloud = await evaluate_agent(
        agent=travel_agent(),
        queries=["What's the weather in Paris?", "Find me a hotel in Tokyo"],
        evaluators=[LocalEvaluator(keyword_check("°C")), foundry],
        num_repetitions=2,
    )
    assert (local.provider, cloud.provider) == ("Local", "Microsoft Foundry")
    assert (
        [i.item_id for i in local.items] == [i.item_id for i in cloud.items] == ["0", "1", "2", "3"]
    )
    assert [i.metadata for i in cloud.items] == [i.metadata for i in local.items]
    assert cloud.result_counts == {"passed": 4, "failed": 0, "errored": 0}
    assert set(cloud.per_evaluator) == {"relevance", "tool_call_accuracy"}
    assert emulator.evals[cloud.eval_id]["name"] == "Eval: travel-assistant (Microsoft Foundry)"
    sent = emulator.run_objects()[0]["data_source"]["source"]["content"][0]["item"]
    assert sent["tool_definitions"][0]["name"] == "get_weather"


async def test_raise_for_status_reads_as_maf(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """A failed item: 'Eval run <id> completed: 1 passed, 1 failed. See <url> for details.'"""
    evals = FoundryEvals(aio_project, model="m", evaluators=["relevance"], **FAST)
    results = await evals.evaluate([item(0), item(1, "[fail]")], eval_name="gate")
    with pytest.raises(EvalNotPassedError) as info:
        results.raise_for_status()
    assert str(info.value) == (
        f"Eval run {results.run_id} completed: 1 passed, 1 failed. See {results.report_url} for details."
    )


async def test_errored_items_are_kept_with_their_error_code(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """An evaluator error makes that item errored (counted apart); the other items keep their scores."""
    evals = FoundryEvals(aio_project, model="m", evaluators=["relevance", "coherence"], **FAST)
    results = await evals.evaluate([item(0, "[error:coherence]"), item(1)], eval_name="err")
    bad, good = results.items
    assert (bad.status, bad.error_code) == ("error", "EvaluatorError")
    coherence = next(s for s in bad.scores if s.name == "coherence")
    assert (coherence.score, coherence.error_code, coherence.error_message) == (
        None,
        "JudgeError",
        "coherence: judge failed",
    )
    assert next(s for s in bad.scores if s.name == "relevance").passed is True
    assert good.status == "pass"
    assert results.result_counts == {"passed": 1, "failed": 0, "errored": 1}
    assert results.per_evaluator["coherence"] == {"passed": 1, "failed": 0, "errored": 1}
    with pytest.raises(
        EvalNotPassedError, match=r"1 errored\. .*Errored items: 0: EvaluatorError\."
    ):
        results.raise_for_status()


async def test_items_whose_agent_run_failed_are_not_sent(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """An item with an error_code (agent failed) is errored with that code and left out of the run."""
    evals = FoundryEvals(aio_project, model="m", evaluators=["relevance"], **FAST)
    broken = item(1, error_code="AgentError", error_message="boom")
    results = await evals.evaluate([item(0), broken], eval_name="skip")
    assert [(r.status, r.error_code) for r in results.items] == [
        ("pass", None),
        ("error", "AgentError"),
    ]
    assert len(emulator.run_objects()[0]["data_source"]["source"]["content"]) == 1


async def test_composites_pass_only_when_every_applicable_component_passes(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """output_quality: a failing component fails the parent; skipped components do not; all skipped is not_applicable."""
    evals = FoundryEvals(aio_project, model="m", evaluators=["output_quality"], **FAST)
    items = [item(0, "fine"), item(1, "weak [fail:fluency]"), item(2, "[na]")]
    results = await evals.evaluate(items, eval_name="composite")
    ok, failing, skipped = results.items
    parent = ok.scores[0]
    assert (parent.name, parent.passed, parent.evaluator) == ("output_quality", True, None)
    groundedness = next(s for s in ok.scores if s.name == "groundedness")
    assert (groundedness.evaluator, groundedness.label, groundedness.passed) == (
        "output_quality",
        "not_applicable",
        None,
    )
    assert (failing.status, failing.scores[0].passed) == ("fail", False)
    assert "fluency" in (failing.scores[0].reason or "")
    assert skipped.scores[0].label == "not_applicable"
    assert skipped.status == "pass"
    assert results.per_evaluator == {
        "output_quality": {"passed": 1, "failed": 1, "errored": 0, "not_applicable": 1}
    }
    assert flat_view(skipped)["output_quality_result"] == "not_applicable"


async def test_composite_parent_is_derived_when_the_service_sends_only_components(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """Without a parent result the client applies the same rule to the components."""
    emulator.composite_parent = False
    evals = FoundryEvals(aio_project, model="m", evaluators=["tool_use_quality"], **FAST)
    results = await evals.evaluate(
        [tool_item(0), tool_item(1, "[fail:tool_selection]")], eval_name="derive"
    )
    first, second = results.items
    assert (first.scores[0].name, first.scores[0].passed) == ("tool_use_quality", True)
    assert (second.scores[0].passed, second.scores[0].reason) == (
        False,
        "failed component(s): tool_selection",
    )
    assert results.per_evaluator["tool_use_quality"] == {"passed": 1, "failed": 1, "errored": 0}


@pytest.mark.parametrize(
    ("mode", "expected", "passed"),
    [
        ("exact_match", ["get_weather"], True),
        ("exact_match", ["get_weather", "search_hotels"], False),
        ("in_order_match", [], True),
        ("any_order_match", ["get_weather"], True),
        ("any_order_match", ["search_hotels"], False),
    ],
)
async def test_task_navigation_efficiency_compares_actions_by_matching_mode(
    emulator: FoundryEmulator,
    aio_project: AsyncAIProjectClient,
    mode: str,
    expected: list[str],
    passed: bool,
) -> None:
    """The item's tool calls are the actions, its expected tool calls the expected actions."""
    evals = FoundryEvals(
        aio_project,
        model="m",
        evaluators=["task_navigation_efficiency"],
        matching_mode=mode,
        **FAST,
    )  # type: ignore[arg-type]
    results = await evals.evaluate([tool_item(0, expected=expected)], eval_name="nav")
    [score] = results.items[0].scores
    assert (score.name, score.passed) == ("task_navigation_efficiency", passed)
    criterion = emulator.evals[results.eval_id]["testing_criteria"][0]
    assert criterion["initialization_parameters"] == {"matching_mode": mode}


async def test_batch_entry_points_compose_like_evaluate(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """create_eval + run_batch per batch + merge gives what evaluate gives (the Prefect flow's path)."""
    evals = FoundryEvals(aio_project, model="m", evaluators=["relevance"], batch_size=2, **FAST)
    items = [item(i, "[fail]" if i == 3 else "ok") for i in range(5)]
    eval_id = await evals.create_eval(items, eval_name="flow")
    parts = [
        await evals.run_batch(eval_id, items[k : k + 2], eval_name="flow", batch_index=k // 2)
        for k in range(0, 5, 2)
    ]
    merged = FoundryEvals.merge(parts)
    assert [r.item_id for r in merged.items] == ["0", "1", "2", "3", "4"]
    assert merged.result_counts == {"passed": 4, "failed": 1, "errored": 0}
    assert merged.eval_id == eval_id
    assert len(merged.run_id.split(", ")) == 3


async def test_run_batch_in_a_fresh_object_reads_the_criteria_from_the_eval(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """A run_batch in another task/process (new FoundryEvals) learns the criteria from evals.retrieve."""
    first = FoundryEvals(aio_project, model="m", evaluators=["output_quality"], **FAST)
    eval_id = await first.create_eval([item(0)], eval_name="x")
    second = FoundryEvals(aio_project, model="m", evaluators=["output_quality"], **FAST)
    result = await second.run_batch(eval_id, [item(0, "[fail:coherence]")], eval_name="x")
    assert result.per_evaluator == {"output_quality": {"passed": 0, "failed": 1, "errored": 0}}
    assert emulator.calls("GET", rf"/evals/{eval_id}$")


async def test_a_retried_run_batch_resumes_the_run_it_created(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """Calling run_batch again for the same eval, batch and items reuses the tagged run (no second charge)."""
    evals = FoundryEvals(aio_project, model="m", evaluators=["relevance"], **FAST)
    items = [item(0), item(1)]
    eval_id = await evals.create_eval(items, eval_name="resume")
    first = await evals.run_batch(eval_id, items, eval_name="resume")
    again = await evals.run_batch(eval_id, items, eval_name="resume")
    assert again.run_id == first.run_id
    assert len(emulator.run_objects()) == 1


async def test_create_eval_with_a_key_reuses_the_tagged_eval(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """An explicit key makes create_eval idempotent across calls (for task retries)."""
    evals = FoundryEvals(aio_project, model="m", **FAST)
    first = await evals.create_eval([item(0)], eval_name="k", key="flow-run-42")
    second = await evals.create_eval([item(0)], eval_name="k", key="flow-run-42")
    assert first == second
    assert len(emulator.evals) == 1


async def test_empty_items_make_no_calls(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """No items: a completed, empty result and no eval created (MAF creates an empty eval and run)."""
    results = await FoundryEvals(aio_project, model="m").evaluate([], eval_name="none")
    assert (results.status, results.items, results.all_passed) == ("completed", [], False)
    assert emulator.calls() == []


async def test_flat_view_has_metric_result_threshold_reason(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """The azure-ai-evaluation flat form per item: {metric}, {metric}_result, _threshold, _reason."""
    evals = FoundryEvals(aio_project, model="m", evaluators=["relevance", "violence"], **FAST)
    results = await evals.evaluate([item(0), item(1, "[fail:violence]")], eval_name="flat")
    rows = flat_rows(results)
    assert rows[0] == {
        "item_id": "0",
        "status": "pass",
        "relevance": 5.0,
        "relevance_result": "pass",
        "relevance_threshold": 3.0,
        "relevance_reason": "relevance scored 5 of 5",
        "violence": 0.0,
        "violence_result": "pass",
        "violence_threshold": 3.0,
        "violence_reason": "severity 0",
    }
    assert (rows[1]["violence"], rows[1]["violence_result"]) == (5.0, "fail")
    json.dumps(rows)


@pytest.mark.parametrize("flavour", ["sync", "aio"])
async def test_endpoint_and_credential_build_the_matching_client(
    emulator: FoundryEmulator, flavour: str
) -> None:
    """endpoint= with a sync credential gives the sync client, with an async one the aio client."""
    credential = StaticCredential() if flavour == "sync" else AsyncStaticCredential()
    evals = FoundryEvals(
        endpoint=emulator.endpoint,
        credential=credential,
        model="m",
        evaluators=["relevance"],
        **FAST,
    )
    expected = AIProjectClient if flavour == "sync" else AsyncAIProjectClient
    assert isinstance(evals.project_client, expected)
    results = await evals.evaluate([item(0)], eval_name="ep")
    assert results.result_counts == {"passed": 1, "failed": 0, "errored": 0}
    await evals.aclose()
    assert emulator.calls()[0].headers["x-stainless-async"] == (
        "false" if flavour == "sync" else "async:asyncio"
    )


async def test_endpoint_comes_from_the_environment(
    emulator: FoundryEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without project_client or endpoint, AZURE_AI_PROJECT_ENDPOINT is used (when MAF's
    FOUNDRY_PROJECT_ENDPOINT, read first, is not set)."""
    monkeypatch.delenv("FOUNDRY_PROJECT_ENDPOINT", raising=False)
    monkeypatch.setenv("AZURE_AI_PROJECT_ENDPOINT", emulator.endpoint)
    evals = FoundryEvals(credential=StaticCredential(), model="m", evaluators=["coherence"], **FAST)
    results = await evals.evaluate([item(0)], eval_name="env")
    assert results.status == "completed"
    await evals.aclose()


def test_an_aio_provider_serves_one_event_loop_after_another(emulator: FoundryEmulator) -> None:
    """The OpenAI client resolved at construction serves the first event loop and a later loop
    gets a client of its own, so one provider works across asyncio.run calls (a suite's
    evaluations) and closes from yet another loop."""
    evals = FoundryEvals(
        endpoint=emulator.endpoint,
        credential=AsyncStaticCredential(),
        model="m",
        evaluators=["relevance"],
        **FAST,
    )
    for _ in range(3):
        assert asyncio.run(evals.evaluate([item(0)], eval_name="loops")).passed == 1
    asyncio.run(evals.aclose())
    assert len(emulator.calls("POST", r"/evals$")) == 3
