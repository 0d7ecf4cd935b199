"""The evalpipe command line: the demo run, exit codes, and bad-input messages."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from evalpipe.cli import main
from evalpipe.evaluators.registry import parse_cli

ROOT = Path(__file__).resolve().parents[1]
QUERIES = ROOT / "examples" / "travel" / "queries.jsonl"


DEMO = ["eval", "--agent", "evalpipe.targets.demo:travel_agent", "--queries", str(QUERIES)]


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_demo_run_prints_summary_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo evaluation prints the per-metric table and the known failing row, and exits 0."""
    out = tmp_path / "results.json"
    code = main(
        [
            *DEMO,
            "--repetitions",
            "2",
            "--check",
            "tool_calls_present",
            "--check",
            "examples.travel.checks:mentions_expected",
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "tool_calls_present" in printed
    assert "mentions_expected" in printed
    assert "query:    Is it warm in Tokyo today?" in printed
    assert "14 passed, 2 failed, 0 errored of 16 items" in printed
    [data] = json.loads(out.read_text())
    assert data["provider"] == "Local"
    assert data["result_counts"] == {"passed": 14, "failed": 2, "errored": 0}
    failing = [i["metadata"] for i in data["items"] if i["status"] == "fail"]
    assert [(m["row_id"], m["repetition"]) for m in failing] == [
        ("warm-tokyo", 0),
        ("warm-tokyo", 1),
    ]
    assert failing[0]["tags"] == ["weather", "known-gap"]
    assert "warm-tokyo (rep 1) [fail]" in printed


def test_strict_exits_1_when_not_all_passed() -> None:
    """--strict turns a run with failing items into exit code 1."""
    code = main([*DEMO, "--strict"])
    assert code == 1


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--agent", "evalpipe.targets.demo:nope"], "has no attribute 'nope'"),
        (["--agent", "no_such_module:agent"], "cannot import module 'no_such_module'"),
        (["--agent", "evalpipe.targets.demo:CITIES"], "is neither an agent"),
        (
            ["--check", "keyword_chek:x"],
            "unknown evaluator 'keyword_chek' (did you mean 'keyword_check'?)",
        ),
        (["--check", "no_such_module:check"], "cannot import module 'no_such_module'"),
        (["--check", "bogus"], "unknown evaluator 'bogus'"),
        (["--check", "judge"], "judge is configured with a mapping of settings"),
        (["--queries", "missing.jsonl"], "missing.jsonl: no such dataset file"),
        (["--repetitions", "0"], "--repetitions must be >= 1"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad agents, checks, datasets and flags exit 2 with a message naming the problem."""
    base = {"--agent": "evalpipe.targets.demo:travel_agent", "--queries": str(QUERIES)}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = ["eval"]
    for flag, value in base.items():
        argv += [flag, value]
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err.replace("\n", "")


def test_parse_cli_builtin_forms() -> None:
    """Command-line check specs build the registry's checks with positional or keyword arguments."""
    assert parse_cli("keyword_check:a, b").__name__ == "keyword_check"
    assert parse_cli("tool_called_any:x,y").__name__ == "tool_called"
    assert parse_cli("tool_calls_present").__name__ == "tool_calls_present"
    assert parse_cli("bleu:threshold=0.25").__name__ == "bleu"


def test_agent_class_is_instantiated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--agent naming an agent class builds an instance instead of calling run on the class."""
    (tmp_path / "my_agents.py").write_text(
        "class Echo:\n"
        "    name = 'echo'\n"
        "    async def run(self, messages, **kwargs):\n"
        "        return 'echo ' + messages[-1].text\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    argv = ["eval", "--agent", "my_agents:Echo", "--queries", str(QUERIES), "--check"]
    assert main([*argv, "keyword_check:echo", "--strict"]) == 0


def test_cache_stats_and_clean_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`evalpipe cache stats DIR` counts entries; `evalpipe cache clean DIR` drops only expired ones."""
    from datetime import timedelta

    from evalpipe.cache import ResponseCache

    fresh = ResponseCache(tmp_path, ttl=timedelta(days=1))
    stale = ResponseCache(tmp_path, ttl=timedelta(0))
    fresh.put({"model": "m", "messages": [{"role": "user", "content": "a"}]}, {"choices": []})
    stale.put({"model": "m", "messages": [{"role": "user", "content": "b"}]}, {"choices": []})
    assert main(["cache", "stats", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^entries\s+2\s*$", out, flags=re.MULTILINE), out
    assert re.search(r"^expired\s+1\s*$", out, flags=re.MULTILINE), out
    assert main(["cache", "clean", str(tmp_path)]) == 0
    assert "removed 1 expired entry" in capsys.readouterr().out
    main(["cache", "stats", str(tmp_path)])
    assert re.search(r"^entries\s+1\s*$", capsys.readouterr().out, flags=re.MULTILINE)


def test_import_otel_is_wired_into_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evalpipe import otel TRACES -o rows.jsonl` writes a dataset the loader accepts."""
    from evalpipe.datasets import load_dataset

    out = tmp_path / "rows.jsonl"
    fixture = Path(__file__).parent / "fixtures" / "otel" / "sequential.json"
    assert main(["import", "otel", str(fixture), "-o", str(out)]) == 0
    rows = load_dataset(out)
    assert rows
    assert all(r.conversation or r.recorded_agents for r in rows)


def test_import_foundry_threads_without_ids_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`evalpipe import foundry-threads` needs thread ids or an agent id: exit 2, not a crash."""
    with pytest.raises(SystemExit) as exc:
        main(["import", "foundry-threads", "-o", "x.jsonl"])
    assert exc.value.code == 2


def test_markup_in_names_is_printed_as_text() -> None:
    """Regression: an agent named `[/oops]` crashed the summary after a finished run and `[x]`
    vanished. Names, ids and reasons are printed as text."""
    from rich.console import Console

    from evalpipe import EvalItemResult, EvalResults, EvalScoreResult
    from evalpipe.cli._common import failures_of, print_summary
    from evalpipe.tally import summary_rows

    bad = EvalItemResult(
        "[red]id[/red]",
        "fail",
        [EvalScoreResult("[x]", 0.0, False, reason="[/oops] no")],
        input_text="[bold]q",
    )
    result = EvalResults(
        provider="Local",
        run_id="run [/oops]",
        items=[bad],
        sub_results={"[/oops]": EvalResults(provider="Local", run_id="[x] sub", items=[bad])},
    )
    console = Console(record=True, width=200)
    print_summary(summary_rows([result]), failures_of([result]), console)
    text = console.export_text()
    for fragment in ("[/oops]", "[x]", "[red]id[/red]", "[bold]q", "run [/oops]"):
        assert fragment in text


def _parsers(parser: Any, path: str = "evalpipe") -> list[tuple[str, Any]]:
    import argparse

    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _parsers(child, f"{path} {name}")
    return found


def test_every_command_and_option_has_help() -> None:
    """Every subcommand has a description and a line in its parent's list; every option and
    argument says what it is for."""
    import argparse

    from evalpipe.cli import build_parser

    for path, parser in _parsers(build_parser()):
        assert parser.description, f"{path}: no description"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                listed = {a.dest: a.help for a in action._choices_actions}
                assert all(listed.get(n) for n in action.choices), f"{path}: {listed}"
                continue
            assert (action.help or "").strip(), f"{path} {action.option_strings or action.dest}"


def test_version_and_top_level_help(capsys: pytest.CaptureFixture[str]) -> None:
    """--version and -V print the version; --help says what evalpipe does, lists every command,
    shows an example and the exit codes."""
    from evalpipe import __version__

    for flag in ("--version", "-V"):
        with pytest.raises(SystemExit) as exc:
            main([flag])
        assert exc.value.code == 0
        assert capsys.readouterr().out.strip() == f"evalpipe {__version__}"
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "Evaluate AI agents and multi-agent workflows" in text
    for command in ("run", "eval", "results", "history", "bless", "compare", "report", "cache"):
        assert re.search(rf"^    {command}\s+\S", text, flags=re.MULTILINE), command
    assert "evalpipe run examples/travel/suite.yaml" in text
    for code in ("0  passed", "1  a gate failed", "2  bad input", "3  the run could not complete"):
        assert code in text
