"""`evalpipe import foundry-threads`: the handler against the emulator writes contract-shaped rows."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from evalpipe import Message, ToolDefinition
from evalpipe.cli import build_parser
from evalpipe.cli._common import consoles, handle_errors
from evalpipe.cli.import_ import import_foundry_threads
from fakes.foundry_emulator import FoundryEmulator, StaticCredential

TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look an order up",
        "parameters": {"type": "object", "properties": {"order": {"type": "string"}}},
    },
}


def parse(*argv: str) -> argparse.Namespace:
    """Parse ``evalpipe import <argv>`` with the import subparser this module adds."""
    return build_parser().parse_args(["import", *argv])


def run(args: argparse.Namespace) -> tuple[int, str, str]:
    """Call the handler with the emulator's static credential; (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = handle_errors(
            consoles()[1], lambda: args.handler(args, credential=StaticCredential())
        )
    return code, out.getvalue(), err.getvalue()


def seed(
    emu: FoundryEmulator,
    agent: str,
    order: str,
    *,
    created_at: int | None = None,
    status: str = "completed",
) -> str:
    """A support thread: the user asks about an order, the agent looks it up and answers."""
    thread = emu.add_thread(created_at=created_at)
    emu.add_message(thread, "user", f"Where is order {order}?")
    run_id = emu.add_run(thread, agent, status=status)
    emu.add_step(
        thread,
        run_id,
        {
            "type": "tool_calls",
            "tool_calls": [
                {
                    "id": f"call_{order}",
                    "type": "function",
                    "function": {
                        "name": "lookup",
                        "arguments": json.dumps({"order": order}),
                        "output": '"shipped"',
                    },
                }
            ],
        },
    )
    mid = emu.add_message(
        thread, "assistant", f"Order {order} has shipped.", run_id=run_id, agent_id=agent
    )
    emu.add_step(
        thread, run_id, {"type": "message_creation", "message_creation": {"message_id": mid}}
    )
    return thread


@pytest.fixture
def support(emulator: FoundryEmulator) -> str:
    """A seeded support agent with instructions and one function tool."""
    return emulator.add_agent("support", instructions="Help with orders.", tools=[TOOL])


def rows(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path``."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_thread_ids_write_one_row_per_run(
    emulator: FoundryEmulator, support: str, tmp_path: Path
) -> None:
    """--thread-id (repeatable) writes contract rows whose messages round-trip through Message."""
    threads = [seed(emulator, support, o) for o in ("A1", "B2")]
    out = tmp_path / "sub" / "prod.jsonl"
    code, stdout, stderr = run(
        parse(
            "foundry-threads",
            "--thread-id",
            threads[0],
            "--thread-id",
            threads[1],
            "--endpoint",
            emulator.endpoint,
            "-o",
            str(out),
        )
    )
    assert code == 0, stderr
    assert f"wrote 2 row(s) from 2 thread(s) to {out}" in stdout
    written = rows(out)
    assert [r["id"].split("/")[0] for r in written] == threads
    first = written[0]
    assert set(first) == {"id", "conversation", "tools", "tags"}
    assert first["tags"] == ["foundry", "support"]
    conversation = [Message.model_validate(m) for m in first["conversation"]]
    assert [m.role for m in conversation] == ["system", "user", "assistant", "tool", "assistant"]
    assert conversation[0].text == "Help with orders."
    assert conversation[2].function_calls[0].parsed_arguments() == {"order": "A1"}
    assert conversation[3].function_results[0].result == "shipped"
    assert conversation[-1].text == "Order A1 has shipped."
    assert [ToolDefinition.model_validate(t) for t in first["tools"]] == [
        ToolDefinition.coerce(TOOL)
    ]
    assert not out.with_name("prod.jsonl.tmp").exists()


def test_agent_id_with_lookback_writes_the_window(
    emulator: FoundryEmulator, support: str, tmp_path: Path
) -> None:
    """--agent-id --lookback-hours writes the agent's recent threads only, newest first."""
    now = int(time.time())
    recent = [seed(emulator, support, f"R{k}", created_at=now - 600 * k) for k in (1, 2, 3)]
    seed(emulator, support, "OLD", created_at=now - 3600 * 48)
    out = tmp_path / "agent.jsonl"
    code, stdout, _ = run(
        parse(
            "foundry-threads",
            "--agent-id",
            support,
            "--lookback-hours",
            "2",
            "--page-size",
            "2",
            "--endpoint",
            emulator.endpoint,
            "-o",
            str(out),
        )
    )
    assert code == 0
    assert "wrote 3 row(s) from 3 thread(s)" in stdout
    assert [r["id"].split("/")[0] for r in rows(out)] == recent
    assert len(emulator.calls("GET", r"^/threads$")) == 2  # stopped at the page holding the old one


def test_failed_runs_are_skipped_unless_asked(
    emulator: FoundryEmulator, support: str, tmp_path: Path
) -> None:
    """A failed run is left out (said on stderr); --include-failed writes it too."""
    ok = seed(emulator, support, "OK")
    bad = seed(emulator, support, "BAD", status="failed")
    out = tmp_path / "d.jsonl"
    argv = [
        "foundry-threads",
        "--thread-id",
        ok,
        "--thread-id",
        bad,
        "--endpoint",
        emulator.endpoint,
        "-o",
        str(out),
    ]
    code, _, stderr = run(parse(*argv))
    assert code == 0
    assert "skipped 1 run(s) that did not complete" in stderr
    assert len(rows(out)) == 1
    code, _, _ = run(parse(*argv, "--include-failed"))
    assert code == 0
    assert len(rows(out)) == 2


def test_nothing_to_write_is_exit_3_and_warnings_are_printed(
    emulator: FoundryEmulator, tmp_path: Path
) -> None:
    """An unknown thread gives a warning naming it and exit 3 (could not complete), with no file
    written."""
    out = tmp_path / "none.jsonl"
    code, _, stderr = run(
        parse(
            "foundry-threads",
            "--thread-id",
            "thread_nope",
            "--endpoint",
            emulator.endpoint,
            "-o",
            str(out),
        )
    )
    assert code == 3  # could not complete: nothing to write
    assert "warning: thread_nope: thread could not be read" in stderr
    assert "nothing written" in stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--thread-id", "t1", "--thread-id", "t2", "--run-id", "r"],
            "--run-id needs exactly one --thread-id",
        ),
        (["--thread-id", "t1", "--lookback-hours", "3"], "use them with --agent-id"),
        (["--agent-id", "a", "--lookback-hours", "0"], "--lookback-hours must be > 0"),
        (["--agent-id", "a", "--page-size", "0"], "--page-size must be between 1 and 100"),
        (["--agent-id", "a", "-o", "rows.csv"], "name it *.jsonl"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, tmp_path: Path, emulator: FoundryEmulator
) -> None:
    """Inconsistent options are refused with exit 2 and a message saying what to change."""
    code, _, stderr = run(
        parse(
            "foundry-threads",
            "--endpoint",
            emulator.endpoint,
            "-o",
            str(tmp_path / "x.jsonl"),
            *argv,
        )
    )
    assert code == 2
    assert message in stderr
    assert emulator.calls() == []


def test_endpoint_comes_from_the_environment(
    emulator: FoundryEmulator, support: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --endpoint the project endpoint is read from AZURE_AI_PROJECT_ENDPOINT (else exit 2)."""
    thread = seed(emulator, support, "E1")
    out = tmp_path / "env.jsonl"
    monkeypatch.delenv("AZURE_AI_PROJECT_ENDPOINT", raising=False)
    code, _, stderr = run(parse("foundry-threads", "--thread-id", thread, "-o", str(out)))
    assert code == 2
    assert "AZURE_AI_PROJECT_ENDPOINT" in stderr
    monkeypatch.setenv("AZURE_AI_PROJECT_ENDPOINT", emulator.endpoint)
    code, _, _ = run(parse("foundry-threads", "--thread-id", thread, "-o", str(out)))
    assert code == 0
    assert len(rows(out)) == 1


def test_parser_rejects_bad_input(tmp_path: Path) -> None:
    """Both sources, no source, or a malformed --since stop argparse (exit 2)."""
    out = str(tmp_path / "x.jsonl")
    for argv in (
        ["foundry-threads", "--thread-id", "t", "--agent-id", "a", "-o", out],
        ["foundry-threads", "-o", out],
        ["foundry-threads", "--agent-id", "a", "--since", "yesterday", "-o", out],
    ):
        with pytest.raises(SystemExit) as exc:
            parse(*argv)
        assert exc.value.code == 2
    assert (
        parse(
            "foundry-threads", "--agent-id", "a", "--since", "2026-11-29T00:00:00Z", "-o", out
        ).handler
        is import_foundry_threads
    )


def test_written_rows_load_as_a_recorded_dataset(
    emulator: FoundryEmulator, support: str, tmp_path: Path
) -> None:
    """The file loads with evalpipe's dataset loader: single- and multi-agent rows, query derived."""
    from evalpipe.datasets import load_dataset

    single = seed(emulator, support, "S1")
    boss = emulator.add_agent(
        "boss",
        instructions="Delegate.",
        tools=[
            {
                "type": "connected_agent",
                "connected_agent": {"id": support, "name": "support", "description": "Orders"},
            }
        ],
    )
    multi = emulator.add_thread()
    emulator.add_message(multi, "user", "Check order M1 for me.")
    run_id = emulator.add_run(multi, boss)
    emulator.add_step(
        multi,
        run_id,
        {
            "type": "tool_calls",
            "tool_calls": [
                {
                    "id": "call_s",
                    "type": "connected_agent",
                    "connected_agent": {
                        "name": "support",
                        "arguments": '{"input": "order M1"}',
                        "output": "M1 shipped.",
                        "agent_id": support,
                    },
                }
            ],
        },
    )
    mid = emulator.add_message(multi, "assistant", "M1 has shipped.", run_id=run_id, agent_id=boss)
    emulator.add_step(
        multi, run_id, {"type": "message_creation", "message_creation": {"message_id": mid}}
    )
    out = tmp_path / "mixed.jsonl"
    code, stdout, _ = run(
        parse(
            "foundry-threads",
            "--thread-id",
            single,
            "--thread-id",
            multi,
            "--endpoint",
            emulator.endpoint,
            "-o",
            str(out),
        )
    )
    assert code == 0
    assert "(1 multi-agent)" in stdout
    loaded = load_dataset(out)
    assert [r.query for r in loaded] == ["Where is order S1?", "Check order M1 for me."]
    assert loaded[0].recorded_agents is None
    assert loaded[0].tools == [ToolDefinition.coerce(TOOL)]
    agents = loaded[1].recorded_agents
    assert agents is not None
    assert [a.agent for a in agents] == ["boss", "support"]
    assert [m.text for m in agents[1].received] == ["Help with orders.", "order M1"]
    assert [m.text for m in agents[1].produced] == ["M1 shipped."]
    assert loaded[1].tags == ["foundry", "boss"]
