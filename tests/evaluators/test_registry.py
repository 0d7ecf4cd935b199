"""The evaluator registry: one table of names that suites and `evalpipe eval --check` share."""

from __future__ import annotations

import subprocess
import sys

import pytest

from evalpipe.evaluators import nlp, registry
from evalpipe.evaluators.local import LocalEvaluator
from evalpipe.suite import EvalSuite, SuiteError, build_evaluators


def _suite(evaluators: list[object]) -> EvalSuite:
    return EvalSuite.model_validate(
        {"name": "s", "target": "m:x", "dataset": "d.jsonl", "evaluators": evaluators}
    )


def test_every_deterministic_metric_is_registered() -> None:
    """Every evaluator nlp exports has a registry entry naming it (the suite's old source)."""
    exported = {
        n
        for n in nlp.__all__
        if callable(getattr(nlp, n)) and not isinstance(getattr(nlp, n), type)
    }
    assert exported <= set(registry.ENTRIES)
    for name in exported:
        assert registry.ENTRIES[name].target == f"evalpipe.evaluators.nlp:{name}"


@pytest.mark.parametrize(
    "name", [n for n in registry.names() if registry.ENTRIES[n].kind != "provider"]
)
def test_a_suite_and_the_command_line_accept_the_same_names(name: str) -> None:
    """Regression: `eval --check bleu` was refused while `- bleu` worked in a suite, and
    `tool_called_any` existed only on the command line. Every name now builds in both."""
    entry = registry.ENTRIES[name]
    args = ["get_weather"] if name in ("tool_called_check", "tool_called_any") else None
    if name == "keyword_check":
        args = ["sunny"]
    suite_form: object = name if args is None else {name: args}
    [provider] = build_evaluators(_suite([suite_form]))
    assert isinstance(provider, LocalEvaluator)
    [from_suite] = provider.checks
    cli_form = name if args is None else f"{name}:{','.join(args)}"
    from_cli = registry.parse_cli(cli_form)
    assert from_cli.__name__ == from_suite.__name__
    assert entry.kind in ("check", "factory")


def test_keyword_arguments_on_the_command_line() -> None:
    """`NAME:key=value` passes keyword arguments, values read as YAML."""
    check = registry.parse_cli("bleu:threshold=0.25")
    assert check.__name__ == "bleu"
    with pytest.raises(registry.RegistryError, match="takes no arguments"):
        registry.parse_cli("tool_calls_present:x")
    with pytest.raises(registry.RegistryError, match="check the arguments"):
        registry.parse_cli("bleu:nope=1")


def test_unknown_names_say_what_exists() -> None:
    """An unknown or misspelt name is refused with the closest name and the list."""
    with pytest.raises(
        SuiteError, match=r"evaluators\[0\]: unknown evaluator 'blue' \(did you mean 'bleu'\?\)"
    ):
        build_evaluators(_suite(["blue"]))
    with pytest.raises(registry.RegistryError, match="did you mean 'keyword_check'"):
        registry.parse_cli("keyword_chek:x")


def test_naming_the_registry_loads_no_metric_module() -> None:
    """Resolving `keyword_check` (or listing the names) does not import sacrebleu and nltk."""
    code = (
        "import sys; from evalpipe.evaluators import registry; registry.names(); "
        "registry.build('keyword_check', ['x']); "
        "print(sorted(m for m in ('evalpipe.evaluators.nlp', 'sacrebleu', 'nltk') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_each_entry_is_of_the_kind_it_declares() -> None:
    """A `check` takes the item itself; a `factory` takes configuration (keyword or positional)."""
    import inspect

    for entry in registry.ENTRIES.values():
        if entry.kind == "provider":
            continue
        params = list(inspect.signature(entry.load()).parameters)
        assert (params[:1] == ["item"]) == (entry.kind == "check"), entry.name
