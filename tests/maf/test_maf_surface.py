"""Every public evaluation name of MAF (agent-framework-core's ``_evaluation`` exports and
agent-framework-foundry's evaluation exports, read from the installed packages) exists in evalpipe
(``evalpipe`` / ``evalpipe.foundry``) and accepts every parameter MAF's does, by name."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pydantic
import pytest

import evalpipe
import evalpipe.foundry

af = pytest.importorskip("agent_framework")
maf_foundry_pkg = pytest.importorskip("agent_framework_foundry")
pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def _core_names() -> list[str]:
    import agent_framework as package

    exports: dict[str, tuple[str, ...]] = package._LAZY_MODULE_EXPORTS
    return list(exports["._evaluation"])


FOUNDRY_NAMES = [n for n in maf_foundry_pkg.__all__ if "Eval" in n or n.startswith("evaluate")]


def _parameters(obj: Any) -> dict[str, inspect.Parameter.kind] | None:
    """Parameter name -> kind of a function or of a class's constructor (dataclass and pydantic
    fields are keyword parameters); None for a protocol or enum, which take no arguments."""
    if inspect.isclass(obj):
        if issubclass(obj, pydantic.BaseModel):
            # positional parameters of evalpipe's __init__ that are also fields go either way
            params = dict(inspect.signature(obj.__init__).parameters)
            out = dict.fromkeys(obj.model_fields, inspect.Parameter.KEYWORD_ONLY)
            for n, p in params.items():
                if n != "self" and p.kind != p.VAR_KEYWORD:
                    out[n] = p.POSITIONAL_OR_KEYWORD if n in out else p.kind
            return out
        if dataclasses.is_dataclass(obj):
            return {
                f.name: inspect.Parameter.POSITIONAL_OR_KEYWORD for f in dataclasses.fields(obj)
            }
        if (
            getattr(obj, "_is_protocol", False)
            or issubclass(obj, BaseException)
            or hasattr(obj, "__members__")
        ):
            return None
        obj = obj.__init__
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return None
    return {n: p.kind for n, p in params.items() if n != "self"}


@pytest.mark.parametrize(
    ("namespace", "name"),
    [("core", n) for n in _core_names()] + [("foundry", n) for n in FOUNDRY_NAMES],
)
def test_each_maf_name_and_parameter_exists_in_evalpipe(namespace: str, name: str) -> None:
    """MAF's name is exported by evalpipe (evalpipe.foundry for Foundry's) and every parameter of
    MAF's is a parameter of evalpipe's, passable the way MAF code passes it (keyword-only
    parameters as keywords, positional ones positionally or by name)."""
    maf = getattr(af if namespace == "core" else maf_foundry_pkg, name)
    ours = getattr(evalpipe if namespace == "core" else evalpipe.foundry, name)
    assert name in (evalpipe.__all__ if namespace == "core" else evalpipe.foundry.__all__)
    maf_params, our_params = _parameters(maf), _parameters(ours)
    if maf_params is None:
        return
    assert our_params is not None
    variadic = {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    for param, kind in maf_params.items():
        if kind in variadic:
            assert kind in our_params.values(), (name, param)
            continue
        assert param in our_params, (name, param)
        if kind is not inspect.Parameter.KEYWORD_ONLY:
            assert our_params[param] is not inspect.Parameter.KEYWORD_ONLY, (name, param)


def test_maf_class_attributes_exist_in_evalpipe() -> None:
    """The public class attributes and methods of MAF's evaluation classes (FoundryEvals' constants,
    EvalResults' assertions, EvalItem's splits, the converter's methods) exist on evalpipe's."""
    missing = []
    for namespace, names in (("core", _core_names()), ("foundry", FOUNDRY_NAMES)):
        for name in names:
            maf = getattr(af if namespace == "core" else maf_foundry_pkg, name)
            ours = getattr(evalpipe if namespace == "core" else evalpipe.foundry, name)
            if not inspect.isclass(maf):
                continue
            fields = (
                set(getattr(ours, "model_fields", {})) | {f.name for f in dataclasses.fields(ours)}
                if dataclasses.is_dataclass(ours)
                else set(getattr(ours, "model_fields", {}))
            )
            for attr in vars(maf):
                if attr.startswith("_") and attr != "_split_last_turn_static":
                    continue
                if not hasattr(ours, attr) and attr not in fields:
                    missing.append(f"{name}.{attr}")
    assert missing == []


def test_maf_methods_take_mafs_parameters_in_evalpipe() -> None:
    """Each public method of MAF's evaluation classes (EvalResults' assertions, EvalItem's splits,
    the converter's, FoundryEvals.evaluate, GeneratedEvaluatorRef.latest) takes every parameter
    MAF's does on evalpipe's class."""
    missing = []
    for namespace, names in (("core", _core_names()), ("foundry", FOUNDRY_NAMES)):
        for name in names:
            maf = getattr(af if namespace == "core" else maf_foundry_pkg, name)
            ours = getattr(evalpipe if namespace == "core" else evalpipe.foundry, name)
            if not inspect.isclass(maf):
                continue
            for attr, raw in vars(maf).items():
                if attr.startswith("_") and attr != "_split_last_turn_static":
                    continue
                method = getattr(maf, attr)
                if isinstance(raw, property) or not callable(method) or inspect.isclass(method):
                    continue
                try:
                    wanted = inspect.signature(method).parameters
                except (TypeError, ValueError):
                    continue
                have = inspect.signature(getattr(ours, attr)).parameters
                missing += [
                    f"{name}.{attr}({p})" for p in wanted if p not in ("self", "cls", *have)
                ]
    assert missing == []
