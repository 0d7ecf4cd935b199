"""Flow parameters: a suite given inline or by path, with the overrides a deployment run may set.

A deployment's parameters are what an operator types in the Prefect UI's Run form or passes as
``prefect deployment run ... --param repetitions=5``; they are resolved here into one validated
:class:`~evalpipe.suite.EvalSuite` before anything runs, and every mistake is a
:class:`~evalpipe.suite.SuiteError` that names the parameter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from evalpipe.suite import EvalSuite, SuiteError, apply_params, load_suite

__all__ = ["resolve_suite", "suite_label"]


def resolve_suite(
    suite: EvalSuite | str | dict[str, Any],
    *,
    repetitions: int | None = None,
    evaluators: list[str | dict[str, Any]] | None = None,
    params: dict[str, Any] | None = None,
) -> EvalSuite:
    """The suite a flow run evaluates: loaded (a path), validated (a mapping), then overridden.

    Args:
        suite: An EvalSuite, its mapping (as a deployment stores it), or the path of a suite YAML
            file (relative to the working directory of the run: the project root for the
            deployments in deployments/prefect.yaml).
        repetitions: Replaces the suite's repetitions.
        evaluators: Replaces the suite's evaluator set (same short forms as the YAML).
        params: Dotted-key overrides, as ``--param`` on the command line (``{"concurrency": 32,
            "target_version": "v2"}``).

    Raises:
        SuiteError: naming the parameter, the file and the field.
    """
    if isinstance(suite, str):
        base = load_suite(suite)
    elif isinstance(suite, EvalSuite):
        base = suite
    else:
        try:
            base = EvalSuite.model_validate(suite)
        except ValidationError as exc:
            raise SuiteError(f"parameter 'suite': {_first_error(exc)}") from None
    overrides: dict[str, Any] = dict(params or {})
    if repetitions is not None:
        overrides["repetitions"] = repetitions
    if evaluators is not None:
        overrides["evaluators"] = evaluators
    if not overrides:
        return base
    data = base.model_dump(mode="json")
    scalar = {k: v for k, v in overrides.items() if k not in ("evaluators", "gates", "tags")}
    data = apply_params(data, [f"{k}={json.dumps(v)}" for k, v in scalar.items()])
    for key in ("evaluators", "gates", "tags"):
        if key in overrides:
            data[key] = overrides[key]
    try:
        return EvalSuite.model_validate(data)
    except ValidationError as exc:
        raise SuiteError(f"flow parameters: {_first_error(exc)}") from None


def suite_label(suite: Any) -> tuple[str, str]:
    """(name, target_version) of a suite parameter without validating it (for the run name).

    A path is read as YAML; anything unreadable gives ("suite", "").
    """
    data: Any = suite
    if isinstance(suite, EvalSuite):
        return suite.name, suite.target_version
    if isinstance(suite, str):
        try:
            data = yaml.safe_load(Path(suite).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            return Path(suite).stem or "suite", ""
    if not isinstance(data, dict):
        return "suite", ""
    return str(data.get("name") or "suite"), str(data.get("target_version") or "")


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "suite"
    return f"{where}: {err['msg']}"
