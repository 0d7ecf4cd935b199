"""MAF's Foundry entry points the MAF way, side by side with evalpipe's, against the emulator with
the real azure-ai-projects client and MAF's real FoundryChatClient: ``FoundryEvals(client=...)``,
``project_client=``, the environment, ``evaluate_foundry_target`` and ``evaluate_traces``'s
argument errors. Differences the comparison leaves out are the documented ones (evalpipe's metadata
tags, counts computed from the items, item ids and texts: docs/maf-compatibility.md §8)."""

from __future__ import annotations

from typing import Any

import pytest
from azure.ai.projects.aio import AIProjectClient as AsyncAIProjectClient

import evalpipe
from evalpipe.foundry import (
    FoundryEvals,
    GeneratedEvaluatorRef,
    evaluate_foundry_target,
    evaluate_traces,
)
from fakes.foundry_emulator import AsyncStaticCredential, FoundryEmulator, RequestRecord

af = pytest.importorskip("agent_framework")
maf_foundry = pytest.importorskip("agent_framework.foundry")
pytestmark = pytest.mark.filterwarnings("ignore::Warning")

from fakes.maf_models import results_view, weather_agent  # noqa: E402

FAST = {"poll_interval": 0.01}
TARGET = {"type": "azure_ai_agent", "name": "travel-agent"}


@pytest.fixture
def chat_client(aio_project: AsyncAIProjectClient) -> Any:
    """MAF's FoundryChatClient over the aio project client, with the judge deployment as model."""
    return maf_foundry.FoundryChatClient(project_client=aio_project, model="judge-dep")


def _wire(records: list[RequestRecord]) -> list[tuple[str, str, Any]]:
    """The requests as (method, path shape, body without evalpipe's metadata tag)."""
    out = []
    for r in records:
        body = {k: v for k, v in r.body.items() if k != "metadata"} if r.body else None
        path = "/".join(p.split("_")[0] if "_" in p else p for p in r.path.split("/"))
        out.append((r.method, path, body))
    return out


def _comparable(view: dict[str, Any]) -> dict[str, Any]:
    """A results view without what evalpipe computes differently on purpose (§8): the run's
    ``total``/``errored`` echo in the counts, the judge's prompt texts."""
    counts = view["result_counts"] or {}
    return {
        "provider": view["provider"],
        "status": view["status"],
        "counts": {k: counts.get(k, 0) for k in ("passed", "failed", "errored")},
        "per_evaluator": {
            name: {k: c.get(k, 0) for k in ("passed", "failed")}
            for name, c in view["per_evaluator"].items()
        },
        "items": [(i["status"], [s[:3] for s in i["scores"]]) for i in view["items"]],
    }


async def test_client_is_mafs_foundry_chat_client_and_gives_the_model(
    chat_client: Any, emulator: FoundryEmulator
) -> None:
    """FoundryEvals(client=FoundryChatClient(...)) without model= judges with the client's model
    and sends MAF's requests; evaluate_agent gives MAF's verdicts under both imports."""
    wires, views = [], []
    for module, provider in ((af, maf_foundry.FoundryEvals), (evalpipe, FoundryEvals)):
        before = len(emulator.requests)
        evals = provider(client=chat_client, **FAST)
        [result] = await module.evaluate_agent(
            agent=weather_agent(),
            queries=["What's the weather in Paris?", "[fail:coherence] And Rome?"],
            evaluators=evals,
        )
        wires.append([w for w in _wire(emulator.requests[before:]) if w[0] == "POST"])
        views.append(_comparable(results_view(result)))
    assert wires[1] == wires[0]
    criteria = wires[0][0][2]["testing_criteria"]
    assert {c["initialization_parameters"]["deployment_name"] for c in criteria} == {"judge-dep"}
    assert views[1] == views[0]
    assert views[0]["counts"] == {"passed": 2, "failed": 0, "errored": 0}


async def test_project_clients_openai_client_is_resolved_when_the_provider_is_built(
    aio_project: AsyncAIProjectClient, emulator: FoundryEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like MAF, FoundryEvals(project_client=...) calls get_openai_client() in its constructor
    (before any request), and a None from it is MAF's ValueError there, not at evaluate()."""
    calls: list[dict[str, Any]] = []
    original = aio_project.get_openai_client

    def counting(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(aio_project, "get_openai_client", counting)
    maf = maf_foundry.FoundryEvals(project_client=aio_project, model="m", **FAST)
    assert len(calls) == 1
    ours = FoundryEvals(project_client=aio_project, model="m", evaluators=["relevance"], **FAST)
    assert len(calls) == 2
    assert emulator.requests == []
    assert maf is not None
    item = evalpipe.EvalItem(
        [evalpipe.Message("user", ["Hi?"]), evalpipe.Message("assistant", ["Hello."])]
    )
    assert (await ours.evaluate([item])).passed == 1
    assert len(calls) == 2  # the client built in __init__ is the one used
    await ours.aclose()

    monkeypatch.setattr(aio_project, "get_openai_client", lambda **kwargs: None)
    errors = []
    for provider in (maf_foundry.FoundryEvals, FoundryEvals):
        with pytest.raises(ValueError) as caught:
            provider(project_client=aio_project, model="m")
        errors.append(str(caught.value))
    assert (
        errors[1]
        == errors[0]
        == ("project_client.get_openai_client() returned None. Check project configuration.")
    )


async def test_without_a_client_the_project_comes_from_mafs_environment_variables(
    emulator: FoundryEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With neither client= nor project_client=, both read FOUNDRY_PROJECT_ENDPOINT: unset, both
    raise MAF's ValueError; set, MAF still refuses (it passes no credential: documented), evalpipe
    builds the project client (DefaultAzureCredential by default; a test credential here) and
    judges with FOUNDRY_MODEL."""
    for name in ("FOUNDRY_PROJECT_ENDPOINT", "FOUNDRY_MODEL", "AZURE_AI_PROJECT_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    maf_text = "Either 'project_endpoint' or 'project_client' is required."
    with pytest.raises(ValueError, match=maf_text):
        maf_foundry.FoundryEvals()
    with pytest.raises(ValueError, match=maf_text):
        FoundryEvals()

    monkeypatch.setenv("FOUNDRY_PROJECT_ENDPOINT", emulator.endpoint)
    monkeypatch.setenv("FOUNDRY_MODEL", "env-judge")
    with pytest.raises(ValueError, match="Azure credential is required"):
        maf_foundry.FoundryEvals()
    evals = FoundryEvals(credential=AsyncStaticCredential(), evaluators=["coherence"], **FAST)
    assert evals.model == "env-judge"
    [result] = await evalpipe.evaluate_agent(
        agent=weather_agent(), queries=["Weather?"], evaluators=evals
    )
    await evals.aclose()
    assert result.passed == 1
    [create] = [r for r in emulator.requests if r.method == "POST" and r.path == "/evals"]
    assert create.body["testing_criteria"][0]["initialization_parameters"] == {
        "deployment_name": "env-judge"
    }


async def test_evaluate_foundry_target_as_maf(chat_client: Any, emulator: FoundryEmulator) -> None:
    """evaluate_foundry_target sends MAF's eval and run (scenario target_completions, the target
    and the queries as they are, criteria without data mapping) and gives MAF's verdicts; its
    items are the queries in order, each with the target's answer."""
    emulator.add_target(
        TARGET, lambda q: f"[fail:coherence] {q}" if "Rome" in q else f"Booked: {q}"
    )
    queries = ["Book Paris", "Book Rome"]
    wires, views = [], []
    for run in (maf_foundry.evaluate_foundry_target, evaluate_foundry_target):
        before = len(emulator.requests)
        result = await run(
            target=TARGET,
            test_queries=queries,
            client=chat_client,
            model="judge-dep",
            eval_name="Target Eval",
            **FAST,
        )
        wires.append([w for w in _wire(emulator.requests[before:]) if w[0] == "POST"])
        views.append(results_view(result))
    assert wires[1] == wires[0]
    [(_, _, eval_body), (_, _, run_body)] = wires[0]
    assert eval_body["data_source_config"] == {
        "type": "azure_ai_source",
        "scenario": "target_completions",
    }
    assert all("data_mapping" not in c for c in eval_body["testing_criteria"])
    assert run_body["data_source"]["target"] == TARGET
    maf, ours = views
    assert _comparable(ours) == _comparable(maf)
    assert [(i["input_text"], i["output_text"]) for i in ours["items"]] == [
        (i["input_text"], i["output_text"]) for i in maf["items"]
    ]
    assert [i["status"] for i in ours["items"]] == ["pass", "fail"]


async def test_evaluate_foundry_target_items_and_faults(
    aio_project: AsyncAIProjectClient, emulator: FoundryEmulator
) -> None:
    """evalpipe's target items are the conversations (query, answer) with the query's index as
    id; a target without a type is MAF's ValueError before any request; a target the project does
    not have gives a failed result with every query errored instead of an exception."""
    emulator.add_target(TARGET, "Done.")
    foundry = FoundryEvals(aio_project, model="judge-dep", **FAST)
    result = await foundry.evaluate_foundry_target(target=TARGET, test_queries=["A", "B"])
    assert [i.item_id for i in result.items] == ["0", "1"]
    assert [[m.text for m in i.conversation] for i in result.input_items] == [
        ["A", "Done."],
        ["B", "Done."],
    ]
    assert (result.input_items[1].query, result.input_items[1].response) == ("B", "Done.")
    requests = len(emulator.requests)
    message = "target dict must include a 'type' key (e.g., 'azure_ai_agent')."
    for run in (maf_foundry.evaluate_foundry_target, evaluate_foundry_target):
        with pytest.raises(ValueError) as caught:
            await run(
                target={"name": "x"}, test_queries=["q"], project_client=aio_project, model="m"
            )
        assert str(caught.value) == message
    assert len(emulator.requests) == requests
    missing = await foundry.evaluate_foundry_target(
        target={"type": "azure_ai_agent", "name": "nope"}, test_queries=["A"]
    )
    await foundry.aclose()
    assert missing.status == "failed"
    assert [(i.item_id, i.error_code) for i in missing.items] == [("0", "FoundryError")]


async def test_evaluate_traces_without_a_source_raises_mafs_error(chat_client: Any) -> None:
    """evaluate_traces(client=..., model=...) with no response_ids, trace_ids or agent_id raises
    the ValueError MAF raises, with MAF's text."""
    errors = []
    for run in (maf_foundry.evaluate_traces, evaluate_traces):
        with pytest.raises(ValueError) as caught:
            await run(client=chat_client, model="judge-dep")
        errors.append(str(caught.value))
    assert errors[1] == errors[0] == "Provide at least one of: response_ids, trace_ids, or agent_id"


async def test_generated_evaluator_refs_send_mafs_criteria(
    chat_client: Any, emulator: FoundryEmulator
) -> None:
    """A GeneratedEvaluatorRef (pinned or latest) beside a built-in becomes MAF's criterion
    (display name, evaluator name and version, the client's deployment, conversation mapping)."""
    wires = []
    for module, provider, ref in (
        (af, maf_foundry.FoundryEvals, maf_foundry.GeneratedEvaluatorRef),
        (evalpipe, FoundryEvals, GeneratedEvaluatorRef),
    ):
        before = len(emulator.requests)
        evals = provider(
            client=chat_client,
            evaluators=[
                ref("policy", version="3", display_name="Policy"),
                ref.latest("tone"),
                "relevance",
            ],
            **FAST,
        )
        await module.evaluate_agent(agent=weather_agent(), queries=["Weather?"], evaluators=evals)
        wires.append(next(w for w in _wire(emulator.requests[before:]) if w[0] == "POST"))
    assert wires[1] == wires[0]
    policy = wires[0][2]["testing_criteria"][0]
    assert (policy["name"], policy["evaluator_name"], policy["evaluator_version"]) == (
        "Policy",
        "policy",
        "3",
    )


async def test_a_raw_openai_client_needs_a_model_and_anything_else_is_refused(
    aio_project: AsyncAIProjectClient, emulator: FoundryEmulator
) -> None:
    """client= an openai AsyncOpenAI (as MAF passes through) works with model=; without one it is
    MAF's "Model is required" as a ValueError (MAF fails with AttributeError); an object that is
    no client is a TypeError naming client=."""
    openai_client = aio_project.get_openai_client()
    with pytest.raises(ValueError, match=r"^Model is required\."):
        FoundryEvals(client=openai_client)
    with pytest.raises(TypeError, match="client= must be MAF's FoundryChatClient"):
        FoundryEvals(client=object(), model="m")
    evals = FoundryEvals(client=openai_client, model="m", evaluators=["relevance"], **FAST)
    item = evalpipe.EvalItem(
        [evalpipe.Message("user", ["Hi?"]), evalpipe.Message("assistant", ["Hello."])]
    )
    assert (await evals.evaluate([item])).passed == 1
    await evals.aclose()
    assert not openai_client.is_closed()  # the caller's client is left open
    await openai_client.close()
