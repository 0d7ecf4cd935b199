"""The evaluator registry: every short name a suite or the command line may use, in one table.

Each entry names its object by import path (loaded on first use, so naming ``keyword_check`` does
not import sacrebleu and nltk) and says what kind of thing it is:

- ``check``: a check used as is (``tool_calls_present``); it takes no arguments.
- ``factory``: a function that takes configuration and returns a check (``keyword_check: [sunny]``,
  ``bleu: {threshold: 0.3}``; a plain name calls it without arguments).
- ``provider``: a provider configured by a mapping (``judge: {...}``, ``foundry: {...}``).

Anything else is an import path ``package.module:name`` of a check, a check factory or class, or an
Evaluator. Suites (``evaluators:`` entries) and ``evalpipe eval --check`` resolve names here, so the
two accept the same names with the same arguments.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from evalpipe._internal.imports import load_object
from evalpipe.checks import tool_called_check
from evalpipe.evaluators.base import Evaluator
from evalpipe.secrets import reveal

__all__ = [
    "ENTRIES",
    "Entry",
    "RegistryError",
    "build",
    "names",
    "parse_cli",
    "tool_called_any",
]


class RegistryError(ValueError):
    """A name or arguments that do not make an evaluator; the message says what to write."""


def tool_called_any(*tool_names: str) -> Any:
    """``tool_called_check(*tool_names, mode="any")``: one of the tools must have been called."""
    return tool_called_check(*tool_names, mode="any")


EntryKind = Literal["check", "factory", "provider"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One registered name."""

    name: str
    """The short name."""
    target: str
    """``module:attr`` of the check, factory, or provider config model."""
    kind: EntryKind
    """How the entry's arguments are applied (see the module docstring)."""

    def load(self) -> Any:
        """The registered object (its module is imported now)."""
        return load_object(self.target, what="evaluator")


def _entries(module: str, kind: EntryKind, *names: str) -> list[Entry]:
    return [Entry(name, f"{module}:{name}", kind) for name in names]


ENTRIES: dict[str, Entry] = {
    e.name: e
    for e in (
        *_entries("evalpipe.checks", "factory", "keyword_check", "tool_called_check"),
        *_entries("evalpipe.evaluators.registry", "factory", "tool_called_any"),
        *_entries("evalpipe.checks", "check", "tool_calls_present", "tool_call_args_match"),
        *_entries(
            "evalpipe.evaluators.nlp",
            "factory",
            "bleu",
            "gleu",
            "token_f1",
            "expected_fact_check",
            "task_navigation_efficiency",
        ),
        *_entries("evalpipe.evaluators.nlp", "check", "tool_call_success"),
        Entry("judge", "evalpipe.evaluators.judge:JudgeConfig", "provider"),
        Entry("foundry", "evalpipe.foundry:FoundryConfig", "provider"),
    )
}
"""Every registered name."""


def names() -> list[str]:
    """Every registered name, sorted."""
    return sorted(ENTRIES)


def _unknown(name: str, where: str) -> RegistryError:
    close = difflib.get_close_matches(name, list(ENTRIES), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return RegistryError(
        f"{where}: unknown evaluator {name!r}{hint}; use one of {', '.join(names())}, or an "
        "import path 'package.module:name'"
    )


def _call(factory: Callable[..., Any], value: Any, where: str) -> Any:
    try:
        if value is None:
            return factory()
        if isinstance(value, list):
            return factory(*value)
        if isinstance(value, dict):
            return factory(**value)
        return factory(value)
    except TypeError as exc:
        raise RegistryError(f"{where}: {exc}; check the arguments") from None


def _provider(entry: Entry, config: Any, where: str) -> Evaluator:
    if not isinstance(config, dict):
        raise RegistryError(f"{where}: {entry.name} takes a mapping of settings, got {config!r}")
    model = entry.load()
    try:
        built: Evaluator = model.model_validate(config).build()
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or entry.name}: "
            + e["msg"].removeprefix("Value error, ")
            for e in exc.errors()
        )
        raise RegistryError(f"{where}.{entry.name}: {details}") from None
    except ValueError as exc:
        raise RegistryError(f"{where}.{entry.name}: {exc}") from None
    return built


def build(name: str, value: Any = None, *, where: str = "evaluator") -> Any:
    """A check (a callable) or an Evaluator from a name and its arguments.

    ``value`` is what follows the name in a suite: None (a plain name), a list (positional
    arguments), a mapping (keyword arguments, or a provider's settings) or a scalar (one argument).

    Raises:
        RegistryError: naming ``where`` for an unknown name, a bad import path or bad arguments.
    """
    entry = ENTRIES.get(name)
    if entry is not None:
        if entry.kind == "provider":
            return _provider(entry, value, where)
        obj = entry.load()
        if entry.kind == "factory":
            return _call(obj, value, where)
        if value is not None:
            raise RegistryError(f"{where}: {name!r} takes no arguments; write it as a plain name")
        return obj
    if ":" not in name:
        raise _unknown(name, where)
    try:
        obj = load_object(name, what="evaluator")
    except ValueError as exc:
        raise RegistryError(f"{where}: {exc}") from None
    if isinstance(obj, type) or value is not None:
        # user code takes plain values: its settings' secrets are revealed to it, not stored
        obj = _call(obj, reveal(value), where)
    if not (isinstance(obj, Evaluator) or callable(obj)):
        raise RegistryError(
            f"{where}: {name!r} is a {type(obj).__name__}, not a check or an Evaluator"
        )
    return obj


def shared_object(name: str, value: Any = None) -> Any | None:
    """The object :func:`build` returns as it is, not made for the caller (an import path to an
    instance, without arguments), or None. Such an object may serve other runs in the process, so
    a run does not close it."""
    if name in ENTRIES or ":" not in name or value is not None:
        return None
    try:
        obj = load_object(name, what="evaluator")
    except ValueError:
        return None
    return None if isinstance(obj, type) else obj


def _cli_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_cli(spec: str) -> Any:
    """A check or Evaluator from its command-line form: ``name``, ``name:a,b`` (positional
    arguments), ``name:key=value,...`` (keyword arguments, values read as YAML), or an import path
    ``package.module:name``.

    Raises:
        RegistryError: as :func:`build`, naming ``--check SPEC``.
    """
    where = f"--check {spec!r}"
    name, sep, rest = spec.partition(":")
    if name not in ENTRIES:
        try:
            return build(spec, where=where)  # an import path, or an unknown name
        except RegistryError:
            # more likely a misspelt built-in than a missing module
            if sep and difflib.get_close_matches(name, list(ENTRIES), n=1):
                raise _unknown(name, where) from None
            raise
    entry = ENTRIES[name]
    if entry.kind == "provider":
        raise RegistryError(
            f"{where}: {name} is configured with a mapping of settings; use it in a suite file "
            "(evaluators: [{" + name + ": {...}}]) with `evalpipe run`"
        )
    if not rest:
        return build(name, where=where)
    parts = [p.strip() for p in rest.split(",") if p.strip()]
    if parts and all("=" in p for p in parts):
        kwargs = {k.strip(): _cli_value(v.strip()) for k, v in (p.split("=", 1) for p in parts)}
        return build(name, kwargs, where=where)
    return build(name, parts, where=where)  # a check refuses them there
