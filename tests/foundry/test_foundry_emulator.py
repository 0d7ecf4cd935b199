"""The emulator itself, driven by the real openai client from AIProjectClient (spec §9 checklist)."""

from __future__ import annotations

import httpx
import openai
import pytest
from azure.ai.projects import AIProjectClient

from fakes.foundry_emulator import FoundryEmulator, running_emulator

CRITERIA = [
    {
        "type": "azure_ai_evaluator",
        "name": "relevance",
        "evaluator_name": "builtin.relevance",
        "initialization_parameters": {"model": "gpt-4o-mini"},
        "data_mapping": {"query": "{{item.query}}", "response": "{{item.response}}"},
    }
]
CONFIG = {
    "type": "custom",
    "item_schema": {"type": "object", "properties": {}, "required": ["query", "response"]},
    "include_sample_schema": True,
}


def _source(n: int) -> dict[str, object]:
    content = [{"item": {"query": f"q{i}", "response": "ok"}} for i in range(n)]
    return {"type": "jsonl", "source": {"type": "file_content", "content": content}}


def test_full_protocol_round_trip_with_pagination(
    emulator: FoundryEmulator, sync_project: AIProjectClient
) -> None:
    """create eval → run → poll → auto-paginated output items; update, list, delete, cancel shapes."""
    client = sync_project.get_openai_client(max_retries=0)
    ev = client.evals.create(
        name="e",
        data_source_config=CONFIG,
        testing_criteria=CRITERIA,
        metadata={"k": "v"},  # type: ignore[arg-type, list-item]
    )
    run = client.evals.runs.create(
        ev.id,
        name="r",
        data_source=_source(5),
        extra_body={"evaluation_level": "turn"},  # type: ignore[arg-type]
    )
    assert run.status == "queued"
    assert client.evals.runs.retrieve(run.id, eval_id=ev.id).status == "completed"
    items = list(client.evals.runs.output_items.list(run.id, eval_id=ev.id, limit=2))
    assert [i.datasource_item_id for i in items] == [0, 1, 2, 3, 4]
    assert len(emulator.calls("GET", r"/output_items$")) == 3
    done = client.evals.runs.retrieve(run.id, eval_id=ev.id)
    assert done.result_counts.model_dump() == {"total": 5, "passed": 5, "failed": 0, "errored": 0}
    assert done.to_dict()["evaluation_level"] == "turn"
    assert client.evals.runs.cancel(run.id, eval_id=ev.id).status == "completed"
    assert client.evals.update(ev.id, name="renamed").name == "renamed"
    assert [e.id for e in client.evals.list(order="desc")] == [ev.id]
    assert client.evals.runs.delete(run.id, eval_id=ev.id).deleted is True
    assert client.evals.delete(ev.id).deleted is True


def test_api_version_path_form_is_served(
    emulator: FoundryEmulator, sync_project: AIProjectClient
) -> None:
    """/openai/evals?api-version=v1 (Microsoft's REST docs form) works like /openai/v1/evals."""
    client = sync_project.get_openai_client(
        base_url=emulator.endpoint + "/openai", default_query={"api-version": "v1"}, max_retries=0
    )
    ev = client.evals.create(data_source_config=CONFIG, testing_criteria=CRITERIA)  # type: ignore[arg-type, list-item]
    assert client.evals.retrieve(ev.id).id == ev.id
    assert emulator.calls()[0].query == {"api-version": "v1"}


def test_missing_bearer_token_is_401_and_unknown_eval_is_404() -> None:
    """No Authorization header: AuthenticationError; an unknown id: NotFoundError with the message."""
    with running_emulator() as emu:
        bare = httpx.get(emu.endpoint + "/openai/v1/evals/eval_x", timeout=5)
        assert bare.status_code == 401
        assert bare.json()["error"]["code"] == "Unauthorized"
        ok = openai.OpenAI(api_key="any", base_url=emu.endpoint + "/openai/v1", max_retries=0)
        with pytest.raises(openai.NotFoundError, match="eval eval_missing not found"):
            ok.evals.retrieve("eval_missing")


def test_a_criterion_without_a_judge_deployment_is_rejected(sync_project: AIProjectClient) -> None:
    """A built-in LLM judge needs deployment_name (or model): 400 BadRequest."""
    client = sync_project.get_openai_client(max_retries=0)
    bad = [dict(CRITERIA[0], initialization_parameters={})]
    with pytest.raises(openai.BadRequestError, match="deployment_name missing"):
        client.evals.create(data_source_config=CONFIG, testing_criteria=bad)  # type: ignore[arg-type]


def test_target_completions_invoke_the_seeded_target(
    emulator: FoundryEmulator, sync_project: AIProjectClient
) -> None:
    """A target-completions run answers each query with the seeded target (the output item's
    sample holds the conversation); a wrong scenario is 400 and an unknown target 404."""
    emulator.add_target({"type": "azure_ai_model", "model": "m1"}, lambda q: f"echo {q}")
    client = sync_project.get_openai_client(max_retries=0)
    criteria = [{k: v for k, v in CRITERIA[0].items() if k != "data_mapping"}]
    ev = client.evals.create(
        name="t",
        data_source_config={"type": "azure_ai_source", "scenario": "target_completions"},  # type: ignore[arg-type, misc]
        testing_criteria=criteria,  # type: ignore[arg-type]
    )

    def source(target: dict[str, str]) -> dict[str, object]:
        content = [{"item": {"query": "q0"}}, {"item": {"query": "q1"}}]
        return {
            "type": "azure_ai_target_completions",
            "target": target,
            "source": {"type": "file_content", "content": content},
        }

    run = client.evals.runs.create(
        ev.id,
        name="r",
        data_source=source({"type": "azure_ai_model", "model": "m1"}),  # type: ignore[arg-type]
    )
    assert client.evals.runs.retrieve(run.id, eval_id=ev.id).status == "completed"
    items = list(client.evals.runs.output_items.list(run.id, eval_id=ev.id))
    assert [i.datasource_item for i in items] == [{"query": "q0"}, {"query": "q1"}]
    assert [i.sample.output[0].content for i in items] == ["echo q0", "echo q1"]
    assert [i.sample.input[0].content for i in items] == ["q0", "q1"]
    with pytest.raises(openai.NotFoundError):
        client.evals.runs.create(
            ev.id,
            data_source=source({"type": "azure_ai_model", "model": "nope"}),  # type: ignore[arg-type]
        )
    other = client.evals.create(name="o", data_source_config=CONFIG, testing_criteria=CRITERIA)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="target_completions"):
        client.evals.runs.create(
            other.id,
            data_source=source({"type": "azure_ai_model", "model": "m1"}),  # type: ignore[arg-type]
        )
