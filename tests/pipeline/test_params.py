"""Flow parameters: suites by path or inline, overrides, run labels, and secret masking."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalpipe.pipeline.params import resolve_suite, suite_label
from evalpipe.secrets import MASK, mask
from evalpipe.suite import EvalSuite, SuiteError, load_suite

ROOT = Path(__file__).resolve().parents[2]
AGENT_SUITE = ROOT / "examples/travel/agent_suite.yaml"


def test_a_path_loads_the_suite_file() -> None:
    """A string parameter is a suite YAML path, loaded with its dataset resolved beside it."""
    suite = resolve_suite(str(AGENT_SUITE))
    assert suite == load_suite(AGENT_SUITE)


def test_a_mapping_is_validated_as_a_suite() -> None:
    """A mapping (as a deployment stores an inline suite) validates into the same EvalSuite."""
    suite = load_suite(AGENT_SUITE)
    assert resolve_suite(suite.model_dump(mode="json")) == suite


def test_overrides_replace_repetitions_evaluators_and_dotted_fields() -> None:
    """repetitions, evaluators and params overrides all land in the resolved suite."""
    suite = resolve_suite(
        str(AGENT_SUITE),
        repetitions=5,
        evaluators=["tool_calls_present"],
        params={"target_version": "v2", "concurrency": 32, "gates": ["no_errors()"]},
    )
    assert suite.repetitions == 5
    assert suite.evaluators == ["tool_calls_present"]
    assert suite.target_version == "v2"
    assert suite.concurrency == 32
    assert suite.gates == ["no_errors()"]


def test_an_invalid_override_names_the_field() -> None:
    """An override that breaks validation is a SuiteError naming the field."""
    with pytest.raises(SuiteError, match=r"flow parameters: repetitions: .*greater than or equal"):
        resolve_suite(str(AGENT_SUITE), repetitions=0)


def test_a_missing_suite_file_is_named() -> None:
    """A suite path that does not exist is a SuiteError naming it."""
    with pytest.raises(SuiteError, match=r"nope\.yaml: no such suite file"):
        resolve_suite("nope.yaml")


def test_an_invalid_inline_suite_names_the_parameter() -> None:
    """An inline suite missing a field names the 'suite' parameter and the field."""
    with pytest.raises(SuiteError, match=r"parameter 'suite': .*dataset"):
        resolve_suite({"name": "x", "target": "a:b", "evaluators": ["tool_calls_present"]})


def test_suite_label_reads_name_and_version_without_validating() -> None:
    """The run-name label comes from a path, a mapping or a suite, and never raises."""
    suite = load_suite(ROOT / "examples/travel/canary.yaml")
    assert suite_label(suite) == ("travel-canary", "canary-v1")
    assert suite_label(str(ROOT / "examples/travel/canary.yaml")) == ("travel-canary", "canary-v1")
    assert suite_label({"name": "n"}) == ("n", "")
    assert suite_label("missing/dir/s.yaml") == ("s", "")
    assert suite_label(None) == ("suite", "")


def test_mask_masks_secret_keys_at_any_depth_and_keeps_env_names() -> None:
    """api_key/token/password values are masked anywhere; *_env variable names and others stay."""
    data = {
        "target": {"openai": {"api_key": "sk-123", "api_key_env": "OPENAI_KEY", "model": "m"}},
        "evaluators": [{"judge": {"endpoint": {"Authorization": "Bearer x", "token": ""}}}],
        "password": "hunter2",
    }
    out = mask(data)
    assert out["target"]["openai"] == {
        "api_key": MASK,
        "api_key_env": "OPENAI_KEY",
        "model": "m",
    }
    assert out["evaluators"][0]["judge"]["endpoint"] == {"Authorization": MASK, "token": ""}
    assert out["password"] == MASK
    assert data["password"] == "hunter2"  # a copy


def test_resolved_suite_is_an_evalsuite() -> None:
    """An EvalSuite passes through unchanged when there is nothing to override."""
    suite = load_suite(AGENT_SUITE)
    assert resolve_suite(suite) is suite
    assert isinstance(resolve_suite(suite, repetitions=2), EvalSuite)


@pytest.mark.usefixtures("prefect_api")
async def test_the_flow_run_is_named_with_an_overridden_target_version(tmp_path: Path) -> None:
    """Regression: a deployment's params target_version (or --param target_version=...) did not
    reach the flow run's name when the suite file has a version of its own."""
    from prefect.client.orchestration import get_client

    from evalpipe.pipeline.flow import eval_flow

    state = await eval_flow(
        str(ROOT / "examples/travel/canary.yaml"),
        params={"target_version": "v2", "output_dir": str(tmp_path)},
        return_state=True,
    )
    async with get_client() as client:
        run = await client.read_flow_run(state.state_details.flow_run_id)
    assert re.fullmatch(r"travel-canary-v2-\d{8}-\d{6}", run.name), run.name
