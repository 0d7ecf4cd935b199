"""Deploying the eval flow: ``evalpipe deploy`` (prefect.yaml + a process pool) and ``evalpipe serve``.

``deploy`` checks every deployment's suite before Prefect sees it (a typo in a suite path fails here,
not at 02:00), creates the process work pool when asked, then runs ``prefect deploy`` on the file
with ``EVALPIPE_ROOT`` set to the project root (the pull step of deployments/prefect.yaml changes
into it before each run). ``serve`` registers one deployment and runs its flow runs in this process:
no pool, no worker.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from evalpipe.pipeline.flow import eval_flow
from evalpipe.pipeline.params import resolve_suite
from evalpipe.secrets import (
    is_secret_key,
    looks_secret,
    protect,
    secret_paths,
    secret_shaped_paths,
)
from evalpipe.suite import SuiteError

__all__ = ["DeployError", "check_deployments", "deploy", "ensure_work_pool", "serve"]


class DeployError(Exception):
    """A deployment file or option that cannot work; the message says which and how to fix it."""


_USE = (
    "Prefect stores a deployment's parameters and job variables and shows them in its UI (and "
    "`prefect deploy` resolves a {{ prefect.blocks.secret.* }} reference in prefect.yaml into "
    "the stored value). Name an environment variable in the suite instead (api_key_env: "
    "OPENAI_API_KEY) and set it where the worker starts the run: in the worker's own environment "
    "(a process worker's runs inherit it), or in the work pool's base job template, where a "
    "{{ prefect.blocks.secret.<name> }} reference is resolved by the worker when the run starts; "
    "see docs/operations.md, section 10"
)


def _secret_env(dep: dict[str, Any]) -> list[str]:
    """``work_pool.job_variables.env`` entries that put a credential into the deployment."""
    pool = dep.get("work_pool")
    variables = pool.get("job_variables") if isinstance(pool, dict) else None
    env = variables.get("env") if isinstance(variables, dict) else None
    if not isinstance(env, dict):
        return []
    return [
        f"work_pool.job_variables.env.{name}"
        for name, value in env.items()
        if isinstance(value, str)
        and value
        and ("prefect.blocks.secret" in value or is_secret_key(str(name)) or looks_secret(value))
    ]


def check_deployments(
    prefect_file: Path, names: Sequence[str] = (), *, root: Path | None = None
) -> list[dict[str, Any]]:
    """The deployments of ``prefect_file`` (those in ``names``, or all) with valid suites.

    Each deployment's ``suite`` parameter (a path relative to ``root``) is loaded and every
    override parameter applied, so a broken suite fails before anything is registered.

    Raises:
        DeployError: naming the file, the deployment and what is wrong.
    """
    root = root or Path.cwd()
    try:
        data = yaml.safe_load(prefect_file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DeployError(f"{prefect_file}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise DeployError(f"{prefect_file}: invalid YAML ({exc})") from None
    deployments = (data or {}).get("deployments") if isinstance(data, dict) else None
    if not isinstance(deployments, list) or not deployments:
        raise DeployError(f"{prefect_file}: no 'deployments:' list")
    known = [str(d.get("name")) for d in deployments if isinstance(d, dict)]
    missing = [n for n in names if n not in known]
    if missing:
        raise DeployError(
            f"{prefect_file}: no deployment named {', '.join(missing)}; it has {', '.join(known)}"
        )
    chosen = [d for d in deployments if isinstance(d, dict) and (not names or d["name"] in names)]
    for dep in chosen:
        where = f"{prefect_file}: deployment {dep.get('name')!r}"
        params = dict(dep.get("parameters") or {})
        suite = params.get("suite")
        if suite is None:
            raise DeployError(f"{where}: parameters.suite is missing (a suite YAML path)")
        if isinstance(suite, str) and not Path(suite).is_absolute():
            suite = str(root / suite)
        try:
            resolved = resolve_suite(
                suite,
                repetitions=params.get("repetitions"),
                evaluators=params.get("evaluators"),
                params=params.get("params"),
            )
        except SuiteError as exc:
            raise DeployError(f"{where}: {exc}") from None
        # A deployment's parameters and job variables are stored in the Prefect database and
        # shown in its UI: an inline secret there (or in the suite they name) would be too.
        # Named like a credential, or shaped like one whatever it is called (sk-..., a bearer
        # token, a long random string).
        inline = [
            *secret_paths(protect(params), "parameters"),
            *secret_shaped_paths(params, "parameters"),
            *secret_paths(resolved.target, "suite target"),
            *secret_shaped_paths(resolved.target, "suite target"),
            *secret_paths(resolved.evaluators, "suite evaluators"),
            *secret_shaped_paths(resolved.evaluators, "suite evaluators"),
            *_secret_env(dep),
        ]
        inline = list(dict.fromkeys(inline))
        if inline:
            raise DeployError(f"{where}: holds an inline secret ({', '.join(inline)}); {_USE}")
    return chosen


async def ensure_work_pool(name: str, pool_type: str = "process") -> bool:
    """Create the work pool when it does not exist; True when it was created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    async with get_client() as client:
        try:
            await client.read_work_pool(name)
            return False
        except ObjectNotFound:
            try:
                await client.create_work_pool(WorkPoolCreate(name=name, type=pool_type))
            except ObjectAlreadyExists:  # created meanwhile by someone else
                return False
            return True


def deploy(
    prefect_file: Path,
    names: Sequence[str] = (),
    *,
    create_pools: bool = True,
    root: Path | None = None,
) -> int:
    """Check the suites, create missing process pools, then ``prefect deploy`` them.

    Returns ``prefect deploy``'s exit code.

    Raises:
        DeployError: for a broken deployment file or suite, or no Prefect server configured.
    """
    from prefect.settings import PREFECT_API_URL

    root = (root or Path.cwd()).resolve()
    api_url = PREFECT_API_URL.value()
    if not api_url:
        raise DeployError(
            "PREFECT_API_URL is not set: deployments live on a Prefect server. Start one "
            "(prefect server start) and export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    chosen = check_deployments(prefect_file, names, root=root)
    if create_pools:
        pools = {str(pool) for d in chosen if (pool := (d.get("work_pool") or {}).get("name"))}
        for pool in sorted(pools):
            asyncio.run(ensure_work_pool(pool))
    # the prefect command of this interpreter's environment
    command = [sys.executable, "-m", "prefect", "--no-prompt", "deploy"]
    command += ["--prefect-file", str(prefect_file)]
    command += [arg for name in names for arg in ("--name", name)] or ["--all"]
    env = {
        **os.environ,
        "PREFECT_API_URL": str(api_url),
        "EVALPIPE_ROOT": os.environ.get("EVALPIPE_ROOT", str(root)),
    }
    return subprocess.run(command, cwd=root, env=env, check=False).returncode


def serve(
    suite_path: str,
    *,
    name: str | None = None,
    cron: str | None = None,
    interval: int | None = None,
    repetitions: int | None = None,
    params: dict[str, Any] | None = None,
    tags: Sequence[str] = (),
) -> None:
    """Register deployment ``evalpipe-eval/<name>`` (default: the suite's name) and run its flow runs here until interrupted.

    Raises:
        DeployError: for a suite that does not load with the given overrides.
    """
    try:
        suite = resolve_suite(suite_path, repetitions=repetitions, params=params)
    except SuiteError as exc:
        raise DeployError(str(exc)) from None
    parameters: dict[str, Any] = {"suite": str(Path(suite_path).resolve())}
    if repetitions is not None:
        parameters["repetitions"] = repetitions
    if params:
        parameters["params"] = params
    eval_flow.serve(
        name=name or suite.name,
        cron=cron,
        interval=interval,
        parameters=parameters,
        tags=[*dict.fromkeys([*tags, *suite.tags])],
        description=suite.description or f"evalpipe suite {suite.name}",
    )
