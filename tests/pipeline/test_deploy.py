"""`evalpipe deploy` checks: every deployment's suite loads before Prefect sees it."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalpipe.cli import main
from evalpipe.pipeline.deploy import DeployError, check_deployments

ROOT = Path(__file__).resolve().parents[2]
PREFECT_FILE = ROOT / "deployments/prefect.yaml"


def test_the_shipped_deployments_all_check() -> None:
    """deployments/prefect.yaml: every deployment has a suite that loads with its overrides."""
    names = [d["name"] for d in check_deployments(PREFECT_FILE, root=ROOT)]
    assert names == ["travel-nightly", "travel-smoke-hourly", "travel-canary"]


def test_a_name_selects_deployments_and_an_unknown_one_is_listed(tmp_path: Path) -> None:
    """--name picks deployments; an unknown name is an error listing the known ones."""
    assert [d["name"] for d in check_deployments(PREFECT_FILE, ["travel-canary"], root=ROOT)] == [
        "travel-canary"
    ]
    with pytest.raises(DeployError, match="no deployment named nightly; it has travel-nightly"):
        check_deployments(PREFECT_FILE, ["nightly"], root=ROOT)


def test_a_broken_suite_names_the_file_and_deployment(tmp_path: Path) -> None:
    """A deployment whose override breaks its suite fails, naming file, deployment and field."""
    bad = tmp_path / "prefect.yaml"
    bad.write_text(
        "deployments:\n"
        "  - name: broken\n"
        "    entrypoint: flows/eval_suite.py:eval_flow\n"
        "    parameters: {suite: examples/travel/suite.yaml, repetitions: 0}\n",
        encoding="utf-8",
    )
    with pytest.raises(DeployError, match=r"deployment 'broken': flow parameters: repetitions"):
        check_deployments(bad, root=ROOT)


def test_a_deployment_without_a_suite_is_refused(tmp_path: Path) -> None:
    """parameters.suite is required: without it the deployment could never run."""
    bad = tmp_path / "prefect.yaml"
    bad.write_text("deployments:\n  - name: x\n    parameters: {}\n", encoding="utf-8")
    with pytest.raises(DeployError, match=r"'x': parameters.suite is missing"):
        check_deployments(bad, root=ROOT)


def test_deploy_without_a_server_exits_2_with_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    """`evalpipe deploy` with no Prefect API URL configured says how to start and point at one."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: None}):
        assert main(["deploy"]) == 2
    assert "PREFECT_API_URL is not set" in capsys.readouterr().err


def test_a_secret_shaped_env_value_is_refused_whatever_its_name(tmp_path: Path) -> None:
    """Regression (issue 34): an env var `MY_LLM_CREDENTIAL: sk-...` (a name that does not look
    like a credential) was stored in clear in the Prefect database. Its value's shape is found:
    the deployment is refused, naming the path and never the value."""
    key = "sk-proj-Zq8mW3kT1vB6nR0pL4sX9yD2fH7jK5aQ"
    bad = tmp_path / "prefect.yaml"
    bad.write_text(
        "deployments:\n"
        "  - name: leaky\n"
        "    entrypoint: flows/eval_suite.py:eval_flow\n"
        "    parameters: {suite: examples/travel/suite.yaml, params: {description: "
        f"{key}}}}}\n"
        "    work_pool:\n"
        "      name: evalpipe-process\n"
        f"      job_variables: {{env: {{MY_LLM_CREDENTIAL: {key}, LOG_LEVEL: DEBUG}}}}\n",
        encoding="utf-8",
    )
    with pytest.raises(DeployError) as info:
        check_deployments(bad, root=ROOT)
    message = str(info.value)
    assert "work_pool.job_variables.env.MY_LLM_CREDENTIAL" in message
    assert "parameters.params.description" in message
    assert "LOG_LEVEL" not in message
    assert key not in message
