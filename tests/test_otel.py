"""OpenTelemetry GenAI traces (fixtures emitted by real MAF agents) rebuilt per agent and evaluated."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalpipe import LocalEvaluator, keyword_check, tool_called_check
from evalpipe.cli import build_parser
from evalpipe.cli._common import consoles, handle_errors
from evalpipe.datasets import load_jsonl
from evalpipe.otel import (
    OtelError,
    genai_messages,
    read_otel_traces,
    read_spans,
    trace_items,
    trace_rows,
)
from evalpipe.runner import evaluate_prebuilt

FIXTURES = Path(__file__).parent / "fixtures" / "otel"
ROOT = Path(__file__).parent.parent


def test_single_agent_traces_rebuild_the_transcript() -> None:
    """Each MAF agent run is one trace: the system instructions, the user query, the tool call with
    its arguments and result, the answer, tool definitions and token usage."""
    read = read_otel_traces(FIXTURES / "single_agent.json")
    assert read.diagnostics == []
    assert [t.query for t in read.traces] == [
        "What's the weather in Paris?",
        "Is it warm in Paris today?",
    ]
    (turn,) = read.traces[0].turns
    assert turn.agent == "weather"
    assert [m.role for m in turn.received] == ["system", "user"]
    assert turn.received[0].text.startswith("Weather: answer weather questions")
    assert [m.role for m in turn.produced] == ["assistant", "tool", "assistant"]
    call = turn.produced[0].function_calls[0]
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    result = turn.produced[1].function_results[0]
    assert result.call_id == call.call_id
    assert json.loads(result.result)["temp_c"] == 18
    assert [t.name for t in turn.tools or []] == ["get_weather"]
    assert (turn.tools or [])[0].parameters["required"] == ["city"]
    assert turn.usage.input_tokens == 40
    assert turn.usage.output_tokens == 16
    assert turn.tool_runs[0]["arguments"] == {"city": "Paris"}
    assert read.traces[0].output[0].text == "It is 18C and sunny in Paris."


def test_agent_as_tool_nesting_gives_parent_and_child_turns() -> None:
    """An agent called as another agent's tool is its own turn, nested under its caller."""
    read = read_otel_traces(FIXTURES / "agent_as_tool.json")
    (trace,) = read.traces
    coordinator, researcher = trace.turns
    assert coordinator.parent_agent_span is None
    assert researcher.parent_agent_span == coordinator.span_id
    assert researcher.path == "coordinator/researcher"
    assert researcher.received[-1].text == "Find hotels in Paris"
    assert researcher.produced[0].function_calls[0].name == "search_hotels"
    assert coordinator.produced[0].function_calls[0].arguments == {"task": "Find hotels in Paris"}
    assert trace.output[0].text.startswith("Plan: stay at Hotel Lumiere")


async def test_traces_give_per_agent_items_and_an_overall_item() -> None:
    """A MAF workflow trace gives one item per agent (what it received / produced) and an overall
    item, evaluated with per-agent sub-results."""
    read = read_otel_traces(FIXTURES / "sequential.json")
    items = trace_items(read.traces)
    assert list(items.per_agent) == ["planner", "writer"]
    writer = items.per_agent["writer"][0]
    assert writer.query == "A day trip to Rome?"
    assert writer.response == "Rome: 24C and sunny; pack sunglasses."
    assert writer.metadata["trace_id"] == read.traces[0].trace_id
    assert writer.metadata["span_id"] == read.traces[0].turns[1].span_id
    (overall,) = items.overall
    assert [c.name for c in overall.function_calls] == ["get_weather"]
    [result] = await evaluate_prebuilt(
        [LocalEvaluator(keyword_check("sunny"), tool_called_check("get_weather"))], items, "prod"
    )
    assert result.passed == 1
    assert result.sub_results["writer"].passed == 1
    assert result.sub_results["planner"].failed == 1


def test_partial_attributes_warn_with_span_ids_and_never_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Missing agent name, output messages, tool result and broken tool definitions become
    diagnostics naming trace and span (and log warnings); the transcript is rebuilt from chat and
    execute_tool spans."""
    with caplog.at_level(logging.WARNING, logger="evalpipe.otel"):
        read = read_otel_traces(FIXTURES / "partial.json")
    (trace,) = read.traces
    (turn,) = trace.turns
    messages = [d.message for d in read.diagnostics]
    assert any("no gen_ai.agent.name" in m for m in messages)
    assert any("rebuilt from 2 chat and 1 execute_tool spans" in m for m in messages)
    assert any("gen_ai.tool.definitions is not valid JSON" in m for m in messages)
    assert any("has no gen_ai.tool.call.result" in m for m in messages)
    assert all(d.trace_id == trace.trace_id and d.span_id for d in read.diagnostics)
    assert {d.span_id for d in read.diagnostics} >= {turn.span_id, turn.tool_runs[0]["span_id"]}
    assert turn.tools is None
    assert [m.role for m in turn.produced] == ["assistant", "tool", "assistant"]
    assert trace.output[0].text == "It is 18C and sunny in Paris."
    assert len(caplog.records) == len(read.diagnostics)


def _request(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def test_hand_built_broken_spans_are_diagnosed() -> None:
    """Hand-built edge cases: base64 ids (protobuf JSON), a chat-only trace, spans without ids,
    invalid JSON lines and a non-OTLP document are reported, not raised."""
    good = {
        "traceId": "AAECAwQFBgcICQoLDA0ODw==",  # base64 of 16 bytes
        "spanId": "AAECAwQFBgc=",
        "name": "invoke_agent bot",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2000000001",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}},
            {
                "key": "gen_ai.input.messages",
                "value": {
                    "stringValue": '[{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]'
                },
            },
            {
                "key": "gen_ai.output.messages",
                "value": {
                    "stringValue": '[{"role": "assistant", "parts": [{"type": "reasoning", "content": "..."}, {"type": "audio"}, {"type": "text", "content": "hello"}]}]'
                },
            },
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "5"}},
        ],
    }
    chat_only = {"traceId": "ff" * 16, "spanId": "ee" * 8, "name": "chat m", "attributes": []}
    no_ids = {"name": "invoke_agent x"}
    lines = "\n".join(
        [json.dumps(_request([good, chat_only, no_ids])), "{broken", json.dumps({"x": 1})]
    )
    path = Path(__file__).parent / "_otel_edge.jsonl"
    try:
        path.write_text(lines, encoding="utf-8")
        read = read_otel_traces(path, log=False)
    finally:
        path.unlink()
    (trace,) = read.traces
    assert trace.trace_id == bytes(range(16)).hex()
    assert trace.turns[0].span_id == bytes(range(8)).hex()
    assert trace.turns[0].agent == "bot"
    assert trace.output[0].text == "hello"
    assert trace.usage.input_tokens == 5
    text = "\n".join(str(d) for d in read.diagnostics)
    assert "no gen_ai.agent.name; named it 'bot'" in text
    assert "left out a part of type 'audio'" in text
    assert "'reasoning'" not in text
    assert f"trace {'ff' * 16}: has chat/execute_tool spans but no invoke_agent span" in text
    assert "has no traceId/spanId" in text
    assert "_otel_edge.jsonl:2: invalid JSON" in text
    assert "_otel_edge.jsonl:3: not an OTLP traces export" in text


def test_missing_path_is_an_error() -> None:
    """A path that does not exist is refused with its name."""
    with pytest.raises(OtelError, match="no such file or directory"):
        read_spans(FIXTURES / "nope.json")


def test_genai_message_parts_convert() -> None:
    """GenAI convention parts map to evalpipe contents (text, tool_call, tool_call_response, uri)."""
    messages, skipped = genai_messages(
        [
            {
                "role": "user",
                "parts": [{"type": "uri", "uri": "https://x/y.png", "mime_type": "image/png"}],
            },
            {
                "role": "assistant",
                "parts": [{"type": "tool_call", "id": "1", "name": "f", "arguments": {"a": 1}}],
            },
            {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": "1", "response": {"ok": True}}],
            },
            {"parts": []},
        ]
    )
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[0].contents[0].type == "uri"
    assert messages[1].function_calls[0].arguments == {"a": 1}
    assert messages[2].function_results[0].result == {"ok": True}
    assert skipped == ["message without a role"]


def test_directory_export_merges_a_trace_split_over_files(tmp_path: Path) -> None:
    """A directory is read recursively; a trace split over two files is one trace, and a span
    exported twice is read once (with a diagnostic)."""
    data = json.loads((FIXTURES / "sequential.json").read_text(encoding="utf-8"))
    spans = [s for r in data["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]
    half = len(spans) // 2
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.json").write_text(json.dumps(_request(spans[:half])), encoding="utf-8")
    (tmp_path / "two.jsonl").write_text(
        json.dumps(_request(spans[half:])) + "\n" + json.dumps(_request(spans[:1])) + "\n",
        encoding="utf-8",
    )
    read = read_otel_traces(tmp_path, log=False)
    (trace,) = read.traces
    assert [t.agent for t in trace.turns] == ["planner", "writer"]
    assert [d.message for d in read.diagnostics] == [
        "exported more than once; the first copy is kept"
    ]


def _import(argv: list[str]) -> tuple[int, str, str]:
    args = build_parser().parse_args(["import", "otel", *argv])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = handle_errors(consoles()[1], lambda: args.handler(args))
    return code, out.getvalue(), err.getvalue()


def test_import_otel_writes_a_dataset_evalpipe_run_loads(tmp_path: Path) -> None:
    """`evalpipe import otel DIR -o x.jsonl` writes one recorded row per trace (per-agent turns for
    multi-agent traces), which load_jsonl reads back; warnings go to stderr; --strict exits 1."""
    target = tmp_path / "prod.jsonl"
    code, out, err = _import([str(FIXTURES), "-o", str(target)])
    assert code == 0
    assert "5 traces (34 spans" in out
    assert err.count("warning:") == 4
    rows = load_jsonl(target)
    assert len(rows) == 5
    assert all(r.recorded_agents for r in rows)
    nested = next(r for r in rows if r.query == "Plan a weekend in Paris.")
    assert [a.agent for a in nested.recorded_agents or []] == ["coordinator", "researcher"]
    assert [t.name for t in nested.tools or []] == ["researcher"]
    code, _, _ = _import([str(FIXTURES / "partial.json"), "-o", str(target), "--strict"])
    assert code == 1
    code, _, err = _import([str(FIXTURES / "single_agent.json"), "-o", str(target)])
    assert code == 0
    assert not any(r.recorded_agents for r in load_jsonl(target))
    code, _, err = _import([str(FIXTURES / "single_agent.json"), "-o", str(tmp_path / "x.csv")])
    assert code == 2
    assert "JSON Lines" in err


def test_import_otel_prints_untrusted_names_as_text(tmp_path: Path) -> None:
    """An agent name from the traces with a terminal escape or a bidi override is printed with
    them shown (``\\u001b``), never sent to the terminal."""
    text = (FIXTURES / "single_agent.json").read_text(encoding="utf-8")
    export = tmp_path / "hostile.json"
    export.write_text(text.replace('"weather"', '"weather\\u001b[2J\\u202e"'), encoding="utf-8")
    code, out, err = _import([str(export), "-o", str(tmp_path / "x.jsonl")])
    assert code == 0, err
    assert "agents: weather\\u001b[2J\\u202e" in out
    assert "\x1b" not in out + err
    assert "\u202e" not in out + err


def test_trace_rows_per_agent_modes() -> None:
    """trace_rows writes recorded_agents always, never, or (auto) when a trace has several turns."""
    read = read_otel_traces(FIXTURES / "single_agent.json")
    assert "recorded_agents" not in trace_rows(read.traces)[0]
    assert (
        trace_rows(read.traces, per_agent="always")[0]["recorded_agents"][0]["agent"] == "weather"
    )
    nested = read_otel_traces(FIXTURES / "agent_as_tool.json")
    assert "recorded_agents" not in trace_rows(nested.traces, per_agent="never")[0]


def _structure(path: Path) -> list[Any]:
    """A fixture's shape without ids, times or generated agent ids: span names, parents, keys."""
    data = json.loads(path.read_text(encoding="utf-8"))
    spans = [s for r in data["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]
    names = {s["spanId"]: s["name"] for s in spans}
    return sorted(
        (
            s["name"],
            names.get(s.get("parentSpanId", ""), ""),
            tuple(sorted(a["key"] for a in s.get("attributes", []))),
        )
        for s in spans
    )


@pytest.mark.filterwarnings("ignore::Warning")
def test_regenerated_fixtures_have_the_committed_structure(tmp_path: Path) -> None:
    """Running the generator (real MAF agents + MAF's OpenTelemetry instrumentation) again gives
    fixtures with the committed structure, and the same rebuilt transcripts."""
    pytest.importorskip("opentelemetry.sdk")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.common")
    out = tmp_path / "otel"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_otel_fixtures.py"), str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    for name in ("single_agent.json", "agent_as_tool.json", "sequential.json", "partial.json"):
        assert _structure(out / name) == _structure(FIXTURES / name), name
        fresh = read_otel_traces(out / name, log=False)
        committed = read_otel_traces(FIXTURES / name, log=False)

        def shape(read: Any, keep_names: bool = name != "partial.json") -> list[Any]:
            # partial.json's agent is named by MAF's random agent id: compare its nesting only
            return [
                (
                    t.query,
                    [
                        (x.path if keep_names else x.parent_agent_span, len(x.produced))
                        for x in t.turns
                    ],
                )
                for t in read.traces
            ]

        assert shape(fresh) == shape(committed), name
    shutil.rmtree(out)
