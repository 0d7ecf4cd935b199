"""Evaluator names, defaults, tool filtering, testing criteria, and the FoundryConfig suite model."""

from __future__ import annotations

import pytest
from azure.ai.projects import AIProjectClient
from pydantic import ValidationError

from evalpipe.foundry import (
    BUILTIN_EVALUATORS,
    COMPOSITE_COMPONENTS,
    ENDPOINT_ENV,
    FoundryConfig,
    FoundryEvals,
    GeneratedEvaluatorRef,
)
from evalpipe.foundry._evaluators import build_criteria, resolve_evaluators, validate_evaluators
from fakes.foundry_emulator import StaticCredential

ENDPOINT = "http://127.0.0.1:9/api/projects/p1"


def test_all_nineteen_builtins_have_constants() -> None:
    """The 19 built-ins are class constants of FoundryEvals (MAF's names), plus the two composites."""
    assert len(BUILTIN_EVALUATORS) == 19
    for name in BUILTIN_EVALUATORS:
        assert getattr(FoundryEvals, name.upper()) == name
    assert FoundryEvals.OUTPUT_QUALITY == "output_quality"
    assert set(COMPOSITE_COMPONENTS) == {"output_quality", "tool_use_quality"}


def test_unknown_name_fails_at_construction_listing_valid_names() -> None:
    """A typo raises ValueError when FoundryEvals is built (MAF fails only at evaluate)."""
    with pytest.raises(
        ValueError, match=r"Unknown Foundry evaluator 'relevence'. Valid names: .*relevance"
    ):
        FoundryEvals(endpoint=ENDPOINT, model="gpt-4o-mini", evaluators=["relevence"])


def test_builtin_prefixed_names_and_newer_builtins_pass() -> None:
    """'builtin.relevance' is relevance; an unknown 'builtin.x' is sent as is (a newer service evaluator)."""
    specs = validate_evaluators(["builtin.relevance", "builtin.brand_new"])
    assert specs is not None
    assert [(s.name, s.evaluator_name) for s in specs] == [
        ("relevance", "builtin.relevance"),
        ("brand_new", "builtin.brand_new"),
    ]


def test_defaults_add_tool_call_accuracy_only_with_tools() -> None:
    """Defaults are relevance, coherence, task_adherence, plus tool_call_accuracy when an item has tools."""
    assert [s.name for s in resolve_evaluators(None, any_tools=False)] == [
        "relevance",
        "coherence",
        "task_adherence",
    ]
    assert [s.name for s in resolve_evaluators(None, any_tools=True)][-1] == "tool_call_accuracy"


def test_tool_only_evaluators_are_dropped_without_tools_and_none_left_is_maf_error() -> None:
    """Without tools, tool evaluators drop; if nothing is left, MAF's ValueError text."""
    specs = validate_evaluators(["relevance", "tool_selection"])
    assert [s.name for s in resolve_evaluators(specs, any_tools=False)] == ["relevance"]
    with pytest.raises(
        ValueError, match=r"All requested evaluators \['tool_selection'\] require tool definitions"
    ):
        resolve_evaluators(validate_evaluators(["tool_selection"]), any_tools=False)


def test_duplicate_and_empty_evaluator_lists_are_rejected() -> None:
    """A name listed twice, or an empty list, is a construction error."""
    with pytest.raises(ValueError, match="listed twice"):
        validate_evaluators(["relevance", "builtin.relevance"])
    with pytest.raises(ValueError, match="evaluators is empty"):
        validate_evaluators([])


def test_criteria_data_mapping_per_evaluator_kind() -> None:
    """Quality gets strings, agent evaluators messages (+tools), groundedness context, similarity ground truth."""
    specs = validate_evaluators(
        [
            "relevance",
            "fluency",
            "groundedness",
            "similarity",
            "task_adherence",
            "tool_call_success",
            "violence",
        ]
    )
    assert specs is not None
    criteria = {c["name"]: c for c in build_criteria(specs, model="judge", any_tools=True)}
    assert criteria["relevance"]["data_mapping"] == {
        "query": "{{item.query}}",
        "response": "{{item.response}}",
    }
    assert criteria["fluency"]["data_mapping"] == {"response": "{{item.response}}"}
    assert criteria["groundedness"]["data_mapping"] == {
        "context": "{{item.context}}",
        "query": "{{item.query}}",
        "response": "{{item.response}}",
        "tool_definitions": "{{item.tool_definitions}}",
    }
    assert criteria["similarity"]["data_mapping"]["ground_truth"] == "{{item.ground_truth}}"
    assert criteria["task_adherence"]["data_mapping"] == {
        "query": "{{item.query_messages}}",
        "response": "{{item.response_messages}}",
        "tool_definitions": "{{item.tool_definitions}}",
    }
    assert criteria["tool_call_success"]["data_mapping"] == {
        "response": "{{item.response_messages}}",
        "tool_definitions": "{{item.tool_definitions}}",
    }
    for c in criteria.values():
        assert c["type"] == "azure_ai_evaluator"
        assert c["initialization_parameters"] == {"deployment_name": "judge"}


def test_task_navigation_efficiency_gets_actions_and_matching_mode_without_a_judge() -> None:
    """task_navigation_efficiency maps actions/expected_actions and sends matching_mode, no deployment."""
    specs = validate_evaluators(["task_navigation_efficiency"])
    assert specs is not None
    [criterion] = build_criteria(
        specs, model="judge", any_tools=True, matching_mode="any_order_match"
    )
    assert criterion["initialization_parameters"] == {"matching_mode": "any_order_match"}
    assert criterion["data_mapping"] == {
        "actions": "{{item.actions}}",
        "expected_actions": "{{item.expected_actions}}",
    }


def test_generated_evaluator_ref_criterion() -> None:
    """A generated evaluator is sent under its display name, with its version and the message mapping."""
    ref = GeneratedEvaluatorRef("my-rubric", "3", display_name="rubric")
    specs = validate_evaluators([ref, GeneratedEvaluatorRef.latest("other")])
    assert specs is not None
    first, second = build_criteria(specs, model="judge", any_tools=False)
    assert (first["name"], first["evaluator_name"], first["evaluator_version"]) == (
        "rubric",
        "my-rubric",
        "3",
    )
    assert first["data_mapping"] == {
        "query": "{{item.query_messages}}",
        "response": "{{item.response_messages}}",
    }
    assert "evaluator_version" not in second


def test_bad_settings_name_the_setting() -> None:
    """Out-of-range settings and a missing endpoint raise ValueError naming what to fix."""
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        FoundryEvals(endpoint=ENDPOINT, model="m", batch_size=0)
    with pytest.raises(ValueError, match="matching_mode must be one of"):
        FoundryEvals(endpoint=ENDPOINT, model="m", matching_mode="fuzzy")  # type: ignore[arg-type]
    project = AIProjectClient(endpoint=ENDPOINT, credential=StaticCredential())
    with pytest.raises(ValueError, match=r"Model is required\. Pass model="):
        FoundryEvals(project, model="")


def test_missing_endpoint_names_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a client, endpoint, FOUNDRY_PROJECT_ENDPOINT or AZURE_AI_PROJECT_ENDPOINT the error
    starts as MAF's and says how to fix it."""
    monkeypatch.delenv(ENDPOINT_ENV, raising=False)
    monkeypatch.delenv("FOUNDRY_PROJECT_ENDPOINT", raising=False)
    with pytest.raises(
        ValueError,
        match=rf"^Either 'project_endpoint' or 'project_client' is required\..*{ENDPOINT_ENV}",
    ):
        FoundryEvals(model="gpt-4o-mini")


def test_config_rejects_a_misspelt_field_by_name() -> None:
    """extra="forbid": a typo in the suite's foundry block is a pydantic error naming the field."""
    with pytest.raises(ValidationError, match="poll_intervall"):
        FoundryConfig.model_validate({"model": "gpt-4o-mini", "poll_intervall": 1})


def test_config_rejects_unknown_evaluator_names_in_the_evaluators_field() -> None:
    """An unknown evaluator name is a validation error on the evaluators field."""
    with pytest.raises(
        ValidationError, match=r"evaluators\n.*Unknown Foundry evaluator 'coherense'"
    ):
        FoundryConfig.model_validate({"model": "m", "evaluators": ["coherense"]})


def test_config_reads_the_endpoint_from_the_environment_and_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The endpoint defaults to AZURE_AI_PROJECT_ENDPOINT; build() gives a configured FoundryEvals."""
    monkeypatch.setenv(ENDPOINT_ENV, ENDPOINT)
    config = FoundryConfig.model_validate(
        {
            "model": "gpt-4o-mini",
            "evaluators": ["relevance"],
            "batch_size": 50,
            "conversation_split": "full",
        }
    )
    assert config.endpoint == ENDPOINT
    built = config.build()
    assert isinstance(built, FoundryEvals)
    assert (built.batch_size, built.evaluators, built.model) == (50, ["relevance"], "gpt-4o-mini")


def test_config_without_any_endpoint_fails_at_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """No endpoint anywhere: build() says to set foundry.endpoint or the environment variable."""
    monkeypatch.delenv(ENDPOINT_ENV, raising=False)
    with pytest.raises(ValueError, match=r"foundry\.endpoint is not set"):
        FoundryConfig(model="m").build()
