"""FoundryEvals.evaluate_traces: server-side data sources (stored responses, agent traces) on the emulator."""

from __future__ import annotations

import time
from typing import Any

import pytest
from azure.ai.projects import AIProjectClient
from azure.ai.projects.aio import AIProjectClient as AsyncAIProjectClient

from evalpipe.foundry import FoundryEvals, evaluate_traces
from fakes.foundry_emulator import TOKEN, FoundryEmulator

FAST: dict[str, Any] = {"poll_interval": 0.005, "max_poll_interval": 0.02}


async def test_by_response_ids_sends_the_responses_data_source(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """response_ids: scenario 'responses', an azure_ai_responses run, one item per id in order."""
    emulator.add_response("resp_a", query="Weather in Paris?", response="18C and sunny.")
    emulator.add_response("resp_b", query="Hotel in Rome?", response="Try Hotel X [fail:coherence]")
    foundry = FoundryEvals(
        aio_project, model="gpt-4o-mini", evaluators=["relevance", "coherence"], **FAST
    )
    result = await foundry.evaluate_traces(
        response_ids=["resp_b", "resp_a"], eval_name="prod responses"
    )
    await foundry.aclose()

    [create_eval] = emulator.calls("POST", r"^/evals$")
    assert create_eval.body["data_source_config"] == {
        "type": "azure_ai_source",
        "scenario": "responses",
    }
    assert create_eval.body["name"] == "prod responses"
    criteria = create_eval.body["testing_criteria"]
    assert [c["evaluator_name"] for c in criteria] == ["builtin.relevance", "builtin.coherence"]
    assert all("data_mapping" not in c for c in criteria)
    assert all(
        c["initialization_parameters"] == {"deployment_name": "gpt-4o-mini"} for c in criteria
    )
    [create_run] = emulator.calls("POST", r"^/evals/[^/]+/runs$")
    assert create_run.body["name"] == "prod responses Run"
    assert create_run.body["data_source"] == {
        "type": "azure_ai_responses",
        "item_generation_params": {
            "type": "response_retrieval",
            "data_mapping": {"response_id": "{{item.resp_id}}"},
            "source": {
                "type": "file_content",
                "content": [{"item": {"resp_id": "resp_b"}}, {"item": {"resp_id": "resp_a"}}],
            },
        },
    }
    assert create_run.headers["authorization"] == f"Bearer {TOKEN}"

    assert result.status == "completed"
    assert result.provider == "Microsoft Foundry"
    assert [i.item_id for i in result.items] == ["resp_b", "resp_a"]
    assert [i.status for i in result.items] == ["fail", "pass"]
    assert [i.response_id for i in result.items] == ["resp_b", "resp_a"]
    assert result.items[1].input_text == "Weather in Paris?"
    assert result.items[1].output_text == "18C and sunny."
    assert result.per_evaluator["coherence"] == {"passed": 1, "failed": 1, "errored": 0}
    assert (result.passed, result.failed, result.errored) == (1, 1, 0)
    assert result.run_id
    assert result.report_url


async def test_unknown_response_id_is_an_errored_item(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """A response id the service cannot retrieve errors its item; the others are scored."""
    emulator.add_response("resp_ok", query="Q?", response="A fine answer.")
    foundry = FoundryEvals(aio_project, model="gpt-4o-mini", **FAST)
    result = await foundry.evaluate_traces(response_ids=["resp_ok", "resp_gone"])
    await foundry.aclose()
    assert [i.status for i in result.items] == ["pass", "error"]
    assert result.items[1].error_code == "ResponseNotFound"
    assert not result.all_passed
    [create_eval] = emulator.calls("POST", r"^/evals$")
    names = [c["name"] for c in create_eval.body["testing_criteria"]]
    assert names == ["relevance", "coherence", "task_adherence"]  # the defaults, no tool evaluator


async def test_by_agent_id_and_lookback_sends_the_traces_data_source(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """agent_id + lookback_hours: scenario 'traces'; items are the agent's traces in the window."""
    now = time.time()
    emulator.add_trace(
        "tr_1", agent_id="asst_a", query="Q1?", response="Answer one.", created_at=now - 3600
    )
    emulator.add_trace(
        "tr_2", agent_id="asst_a", query="Q2?", response="Bad [fail]", created_at=now - 7200
    )
    emulator.add_trace(
        "tr_old", agent_id="asst_a", query="Q?", response="Old.", created_at=now - 3600 * 30
    )
    emulator.add_trace("tr_other", agent_id="asst_b", query="Q?", response="Other.", created_at=now)
    foundry = FoundryEvals(aio_project, model="gpt-4o-mini", evaluators=["task_adherence"], **FAST)
    result = await foundry.evaluate_traces(agent_id="asst_a", lookback_hours=4)
    await foundry.aclose()

    [create_eval] = emulator.calls("POST", r"^/evals$")
    assert create_eval.body["data_source_config"] == {
        "type": "azure_ai_source",
        "scenario": "traces",
    }
    [create_run] = emulator.calls("POST", r"^/evals/[^/]+/runs$")
    assert create_run.body["data_source"] == {
        "type": "azure_ai_traces",
        "lookback_hours": 4,
        "agent_id": "asst_a",
    }
    assert result.status == "completed"
    assert [i.item_id for i in result.items] == ["tr_1", "tr_2"]
    assert [i.status for i in result.items] == ["pass", "fail"]
    assert result.items[0].metadata == {"trace_id": "tr_1", "agent_id": "asst_a"}
    assert [i.item_id for i in result.input_items] == ["tr_1", "tr_2"]


def test_module_function_with_trace_ids_and_a_sync_client(
    emulator: FoundryEmulator, sync_project: AIProjectClient
) -> None:
    """MAF's module-level evaluate_traces(trace_ids=...) works with the sync client too."""
    import asyncio

    emulator.add_trace("tr_x", agent_id="asst_a", query="Q?", response="Fine.")
    emulator.add_trace("tr_y", agent_id="asst_a", query="Q?", response="Fine too.")
    result = asyncio.run(
        evaluate_traces(
            project_client=sync_project,
            model="gpt-4o-mini",
            trace_ids=["tr_y"],
            poll_interval=0.005,
        )
    )
    [create_run] = emulator.calls("POST", r"^/evals/[^/]+/runs$")
    assert create_run.body["data_source"] == {
        "type": "azure_ai_traces",
        "lookback_hours": 24,
        "trace_ids": ["tr_y"],
    }
    assert [i.item_id for i in result.items] == ["tr_y"]
    assert result.all_passed


async def test_failed_run_errors_every_response(
    aio_project: AsyncAIProjectClient, emulator: FoundryEmulator
) -> None:
    """A run the service fails gives status 'failed' with each response id errored, no raise."""
    emulator.run_outcome = "failed"
    emulator.add_response("resp_a", query="Q?", response="A.")
    foundry = FoundryEvals(aio_project, model="gpt-4o-mini", **FAST)
    result = await foundry.evaluate_traces(response_ids=["resp_a"])
    await foundry.aclose()
    assert result.status == "failed"
    assert result.error == "judge deployment overloaded"
    assert [(i.item_id, i.error_code) for i in result.items] == [("resp_a", "RunFailed")]


async def test_arguments_are_checked(aio_project: AsyncAIProjectClient) -> None:
    """No source or empty ids (MAF's message), both sources, or a non-positive lookback are
    refused before any call."""
    foundry = FoundryEvals(aio_project, model="gpt-4o-mini")
    with pytest.raises(ValueError, match="not both"):
        await foundry.evaluate_traces(response_ids=["r"], agent_id="a")
    no_source = "^Provide at least one of: response_ids, trace_ids, or agent_id$"
    with pytest.raises(ValueError, match=no_source):
        await foundry.evaluate_traces()
    with pytest.raises(ValueError, match=no_source):
        await foundry.evaluate_traces(response_ids=[])
    with pytest.raises(ValueError, match="lookback_hours"):
        await foundry.evaluate_traces(agent_id="a", lookback_hours=0)
