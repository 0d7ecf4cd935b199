"""Foundry agent threads and runs -> EvalItems: the real azure-ai-agents client against the emulator."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.ai.agents import AgentsClient
from azure.ai.agents.aio import AgentsClient as AsyncAgentsClient

from evalpipe import (
    LocalEvaluator,
    Message,
    ToolDefinition,
    keyword_check,
    tool_called_check,
)
from evalpipe.foundry import (
    FoundryEvals,
    FoundryThreads,
    ThreadRunRecord,
    async_transport,
    evaluate_threads,
)
from evalpipe.foundry._threads import threads_to_items
from fakes.foundry_emulator import TOKEN, AsyncStaticCredential, FoundryEmulator, StaticCredential

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def call_step(call_id: str, name: str, arguments: str, output: str | None) -> dict[str, Any]:
    """A tool_calls run step with one function call (output None: never submitted)."""
    function: dict[str, Any] = {"name": name, "arguments": arguments}
    if output is not None:
        function["output"] = output
    return {
        "type": "tool_calls",
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def answer(emu: FoundryEmulator, thread: str, run: str, agent: str, text: str) -> str:
    """The run writes ``text`` as an assistant message (and the message_creation step)."""
    mid = emu.add_message(thread, "assistant", text, run_id=run, agent_id=agent)
    emu.add_step(thread, run, {"type": "message_creation", "message_creation": {"message_id": mid}})
    return mid


def weather_thread(emu: FoundryEmulator, agent: str, city: str = "Paris", **kw: Any) -> str:
    """A thread: user asks, the run calls get_weather (with output), then answers."""
    thread = emu.add_thread(**kw)
    emu.add_message(thread, "user", f"Weather in {city}?")
    run = emu.add_run(
        thread, agent, usage={"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}
    )
    emu.add_step(
        thread,
        run,
        call_step("call_1", "get_weather", json.dumps({"city": city}), '{"temp_c": 18}'),
    )
    answer(emu, thread, run, agent, f"It is 18C in {city}.")
    return thread


@pytest.fixture
def agents(emulator: FoundryEmulator) -> Iterator[AgentsClient]:
    """The real sync AgentsClient pointed at the emulator, with the static test credential."""
    with AgentsClient(endpoint=emulator.endpoint, credential=StaticCredential()) as client:
        yield client


@pytest.fixture
def weather_agent(emulator: FoundryEmulator) -> str:
    """A seeded agent with instructions and the get_weather function tool."""
    return emulator.add_agent(
        "weather-bot", instructions="You answer weather questions.", tools=[WEATHER_TOOL]
    )


def test_one_run_with_tool_calls_becomes_one_item(
    emulator: FoundryEmulator, agents: AgentsClient, weather_agent: str
) -> None:
    """One run: instructions as system, the user message, the tool call with its output, the answer."""
    thread = weather_thread(emulator, weather_agent)
    records = FoundryThreads(agents).read(thread)
    assert len(records) == 1
    rec = records[0]
    assert rec.agent == "weather-bot"
    assert rec.agent_id == weather_agent
    assert [m.role for m in rec.conversation] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert rec.conversation[0].text == "You answer weather questions."
    call = rec.conversation[2].function_calls[0]
    assert (call.name, call.parsed_arguments(), call.call_id) == (
        "get_weather",
        {"city": "Paris"},
        "call_1",
    )
    assert rec.conversation[3].function_results[0].result == {"temp_c": 18}
    assert rec.split_at == 2
    assert rec.diagnostics == []
    assert rec.error_code is None
    assert rec.tools == [ToolDefinition.coerce(WEATHER_TOOL)]
    assert (rec.usage.input_tokens, rec.usage.output_tokens, rec.usage.total_tokens) == (40, 9, 49)
    item = rec.to_item()
    assert item.item_id == f"{thread}/{rec.run_id}"
    assert item.query == "Weather in Paris?"
    assert item.response == "It is 18C in Paris."
    assert item.metadata["thread_id"] == thread
    # every request carried the static credential's token, with the SDK's api-version
    calls = emulator.calls("GET", r"^/(threads|assistants)")
    assert calls
    assert all(c.headers["authorization"] == f"Bearer {TOKEN}" for c in calls)
    assert all(c.query["api-version"] == "v1" for c in calls)
    # a page shorter than the limit is the last one: no request for an empty page after it
    assert len(emulator.calls("GET", rf"^/threads/{thread}/messages$")) == 1
    assert len(emulator.calls("GET", rf"^/threads/{thread}/runs$")) == 1


def test_thread_with_two_runs_gives_one_record_per_run_with_history(
    emulator: FoundryEmulator, agents: AgentsClient, weather_agent: str
) -> None:
    """A second run's record carries the first exchange as history; run_id= selects one run."""
    thread = weather_thread(emulator, weather_agent)
    emulator.add_message(thread, "user", "And tomorrow?")
    run2 = emulator.add_run(thread, weather_agent)
    answer(emulator, thread, run2, weather_agent, "Rain tomorrow.")
    records = FoundryThreads(agents).read(thread)
    assert [r.run_id for r in records][1] == run2
    second = records[1]
    assert [m.text for m in second.conversation if m.role == "user"] == [
        "Weather in Paris?",
        "And tomorrow?",
    ]
    assert second.conversation[second.split_at :][0].text == "Rain tomorrow."
    assert second.to_item().response == "Rain tomorrow."
    assert second.to_item().query.endswith("And tomorrow?")
    only = FoundryThreads(agents).read(thread, run_id=run2)
    assert [r.run_id for r in only] == [run2]


def test_many_threads_in_the_order_given(
    emulator: FoundryEmulator, agents: AgentsClient, weather_agent: str
) -> None:
    """read_many(thread_ids) converts each thread, in the order given, paging small lists."""
    threads = [weather_thread(emulator, weather_agent, city) for city in ("Oslo", "Rome", "Lima")]
    reader = FoundryThreads(agents, page_size=1)
    records = reader.read_many(list(reversed(threads)))
    assert [r.thread_id for r in records] == list(reversed(threads))
    assert [r.to_item().response for r in records] == [
        "It is 18C in Lima.",
        "It is 18C in Rome.",
        "It is 18C in Oslo.",
    ]
    # page_size=1: the step list of each run was read page by page with the after= cursor
    step_pages = emulator.calls("GET", rf"^/threads/{threads[0]}/runs/[^/]+/steps$")
    assert len(step_pages) == 3
    assert step_pages[1].query["after"]


def test_agent_threads_in_a_window_across_pages(
    emulator: FoundryEmulator, agents: AgentsClient, weather_agent: str
) -> None:
    """Every thread of one agent created in the window, newest first; listing stops at older ones."""
    other = emulator.add_agent("other-bot", instructions="Other.")
    now = int(time.time())
    mine = [
        weather_thread(emulator, weather_agent, f"C{k}", created_at=now - 3600 * k)
        for k in range(1, 6)
    ]
    theirs = weather_thread(emulator, other, "X", created_at=now - 1800)
    old = [
        weather_thread(emulator, weather_agent, f"O{k}", created_at=now - 3600 * (30 + k))
        for k in range(4)
    ]
    reader = FoundryThreads(agents, page_size=2)
    found = reader.agent_thread_ids(weather_agent, lookback_hours=24)
    assert found == mine  # newest first; the other agent's thread and the old ones left out
    assert theirs not in found
    assert not set(old) & set(found)
    pages = emulator.calls("GET", r"^/threads$")
    assert [p.query.get("order") for p in pages] == ["desc"] * len(pages)
    assert all(p.query["limit"] == "2" for p in pages)
    assert pages[1].query["after"]
    assert len(pages) == 4  # 6 in-window threads + the first old one: pages 1-4 of 6, then stop
    records = reader.read_agent(weather_agent, since=datetime.fromtimestamp(now - 3600 * 2.5, UTC))
    assert [r.thread_id for r in records] == mine[:2]


def test_window_arguments_are_checked(agents: AgentsClient) -> None:
    """since and lookback_hours together, an empty window or a bad page size are refused."""
    reader = FoundryThreads(agents)
    now = datetime.now(UTC)
    with pytest.raises(ValueError, match="not both"):
        reader.agent_thread_ids("a", since=now, lookback_hours=1)
    with pytest.raises(ValueError, match="window is empty"):
        reader.agent_thread_ids("a", since=now, until=now - timedelta(hours=1))
    with pytest.raises(ValueError, match="lookback_hours must be > 0"):
        reader.agent_thread_ids("a", lookback_hours=0)
    with pytest.raises(ValueError, match="page_size"):
        FoundryThreads(agents, page_size=500)


def connected_thread(emu: FoundryEmulator) -> tuple[str, str, str, str]:
    """An orchestrator run calling two connected agents: 'researcher' (its own thread and run,
    with a tool call) and 'writer' (only the call's input and output known)."""
    researcher = emu.add_agent("researcher", instructions="Research facts.", tools=[WEATHER_TOOL])
    writer = emu.add_agent("writer", instructions="Write nicely.")
    boss = emu.add_agent(
        "orchestrator",
        instructions="Delegate.",
        tools=[
            {
                "type": "connected_agent",
                "connected_agent": {
                    "id": researcher,
                    "name": "research",
                    "description": "Finds facts",
                },
            },
            {
                "type": "connected_agent",
                "connected_agent": {"id": writer, "name": "write", "description": "Writes"},
            },
        ],
    )
    sub_thread = emu.add_thread()
    emu.add_message(sub_thread, "user", "Weather in Paris")
    sub_run = emu.add_run(sub_thread, researcher)
    emu.add_step(
        sub_thread, sub_run, call_step("c_r1", "get_weather", '{"city": "Paris"}', '{"temp_c": 18}')
    )
    answer(emu, sub_thread, sub_run, researcher, "Paris: 18C.")

    thread = emu.add_thread()
    emu.add_message(thread, "user", "Write me a weather note for Paris.")
    run = emu.add_run(thread, boss)
    emu.add_step(
        thread,
        run,
        {
            "type": "tool_calls",
            "tool_calls": [
                {
                    "id": "call_res",
                    "type": "connected_agent",
                    "connected_agent": {
                        "name": "research",
                        "arguments": '{"input": "Weather in Paris"}',
                        "output": "Paris: 18C.",
                        "agent_id": researcher,
                        "thread_id": sub_thread,
                        "run_id": sub_run,
                    },
                }
            ],
        },
    )
    emu.add_step(
        thread,
        run,
        {
            "type": "tool_calls",
            "tool_calls": [
                {
                    "id": "call_wr",
                    "type": "connected_agent",
                    "connected_agent": {
                        "name": "write",
                        "arguments": '{"input": "Note: Paris 18C"}',
                        "output": "A mild 18C day in Paris.",
                        "agent_id": writer,
                    },
                }
            ],
        },
    )
    answer(emu, thread, run, boss, "A mild 18C day in Paris.")
    return thread, run, sub_thread, sub_run


def test_connected_agents_split_per_agent(emulator: FoundryEmulator, agents: AgentsClient) -> None:
    """A run calling connected agents carries one executor per agent, the sub-agent's own run read."""
    thread, run, sub_thread, sub_run = connected_thread(emulator)
    [rec] = FoundryThreads(agents).read(thread)
    assert rec.is_multi_agent
    assert rec.agent == "orchestrator"
    assert rec.tools is not None
    assert [t.name for t in rec.tools] == ["research", "write"]
    calls = [c.name for m in rec.conversation for c in m.function_calls]
    assert calls == ["research", "write"]
    assert rec.workflow is not None
    turns = rec.workflow.executors
    assert [t.agent for t in turns] == ["orchestrator", "researcher", "writer"]
    researcher = turns[1]
    assert [m.role for m in researcher.received] == ["system", "user"]
    assert researcher.received[1].text == "Weather in Paris"
    assert [c.name for m in researcher.produced for c in m.function_calls] == ["get_weather"]
    assert researcher.produced[-1].text == "Paris: 18C."
    assert researcher.tools is not None
    assert researcher.tools[0].name == "get_weather"
    writer = turns[2]  # no thread named: its input and output only
    assert [m.text for m in writer.received] == ["Write nicely.", "Note: Paris 18C"]
    assert [m.text for m in writer.produced] == ["A mild 18C day in Paris."]
    assert rec.workflow.output[0].text == "A mild 18C day in Paris."
    assert emulator.calls("GET", rf"^/threads/{sub_thread}/runs/{sub_run}/steps$")

    items = threads_to_items([rec])
    assert list(items.per_agent) == ["orchestrator", "researcher", "writer"]
    assert items.per_agent["researcher"][0].item_id == f"{thread}/{run}/researcher"
    assert items.per_agent["researcher"][0].response == "Paris: 18C."


async def test_evaluate_threads_gives_sub_results_per_agent(
    emulator: FoundryEmulator, agents: AgentsClient, weather_agent: str
) -> None:
    """evaluate_threads: the top level scores each run, sub_results one per agent (multi-agent)."""
    thread, *_ = connected_thread(emulator)
    single = weather_thread(emulator, weather_agent)
    records = FoundryThreads(agents).read_many([thread, single])
    [result] = await evaluate_threads(
        records,
        evaluators=[LocalEvaluator(keyword_check("18C"), tool_called_check("get_weather"))],
        eval_name="prod",
    )
    assert len(result.items) == 2
    assert result.passed == 1
    assert set(result.sub_results) == {"orchestrator", "researcher", "writer", "weather-bot"}
    assert result.sub_results["researcher"].all_passed
    assert result.sub_results["writer"].failed == 1  # the writer called no tool
    assert result.sub_results["weather-bot"].items[0].item_id.startswith(single)


async def test_evaluate_threads_with_foundry_evals(
    emulator: FoundryEmulator, agents: AgentsClient, weather_agent: str
) -> None:
    """Converted runs go through FoundryEvals on the emulator like any items (tools included)."""
    threads = [weather_thread(emulator, weather_agent, c) for c in ("Oslo", "Rome")]
    records = FoundryThreads(agents).read_many(threads)
    from azure.ai.projects.aio import AIProjectClient

    async with AIProjectClient(
        endpoint=emulator.endpoint, credential=AsyncStaticCredential(), **async_transport()
    ) as project:
        foundry = FoundryEvals(project, model="gpt-4o-mini", poll_interval=0.01)
        [result] = await evaluate_threads(records, evaluators=[foundry])
        await foundry.aclose()
    assert result.status == "completed"
    assert result.passed == 2
    [create] = emulator.calls("POST", r"/evals/[^/]+/runs$")
    sent = [c["item"] for c in create.body["data_source"]["source"]["content"]]
    assert sent[0]["tool_definitions"][0]["name"] == "get_weather"
    assert sent[0]["query_messages"][0]["role"] == "system"


def test_missing_pieces_give_diagnostics_not_crashes(
    emulator: FoundryEmulator, agents: AgentsClient, weather_agent: str
) -> None:
    """A call without output, a deleted message, an unknown thread, a running run, a deleted agent."""
    thread = emulator.add_thread()
    emulator.add_message(thread, "user", "Weather?")
    run = emulator.add_run(thread, weather_agent)
    emulator.add_step(thread, run, call_step("call_x", "get_weather", '{"city": "Oslo"}', None))
    gone = answer(emulator, thread, run, weather_agent, "Deleted answer.")
    emulator.delete_message(thread, gone)
    busy = emulator.add_run(thread, weather_agent, status="in_progress")
    lost = emulator.add_thread()
    emulator.add_message(lost, "user", "Hi")
    emulator.add_run(lost, "asst_deleted")
    reader = FoundryThreads(agents)
    records = reader.read_many([thread, "thread_missing", lost])
    assert [r.thread_id for r in records] == [thread, lost]
    rec = records[0]
    assert [m.role for m in rec.conversation] == ["system", "user", "assistant"]
    assert rec.conversation[-1].function_calls[0].name == "get_weather"
    text = "\n".join(rec.diagnostics)
    assert "call_x (get_weather) has no output" in text
    assert f"message {gone} not found (deleted?)" in text
    every = [str(d) for d in reader.diagnostics]
    assert any(d.startswith("thread_missing:") and "could not be read" in d for d in every)
    assert any(busy in d and "in_progress" in d for d in every)
    assert any("asst_deleted could not be read" in d for d in every)
    assert records[1].agent == "asst_deleted"
    assert records[1].tools == []


def test_failed_run_is_kept_as_an_errored_item(
    emulator: FoundryEmulator, agents: AgentsClient, weather_agent: str
) -> None:
    """A failed run keeps its transcript and carries the service's error as the item's error."""
    thread = emulator.add_thread()
    emulator.add_message(thread, "user", "Weather?")
    emulator.add_run(
        thread,
        weather_agent,
        status="failed",
        last_error={"code": "rate_limit_exceeded", "message": "Rate limit"},
    )
    [rec] = FoundryThreads(agents).read(thread)
    item = rec.to_item()
    assert (item.error_code, item.error_message) == ("RunFailed", "Rate limit")


def test_row_follows_the_dataset_contract(emulator: FoundryEmulator, agents: AgentsClient) -> None:
    """to_row: id, conversation (Message dicts that round-trip), tools, recorded_agents, tags."""
    thread, run, *_ = connected_thread(emulator)
    [rec] = FoundryThreads(agents).read(thread)
    row = json.loads(json.dumps(rec.to_row()))
    assert list(row) == ["id", "conversation", "tools", "recorded_agents", "tags"]
    assert row["id"] == f"{thread}/{run}"
    assert row["tags"] == ["foundry", "orchestrator"]
    assert [Message.model_validate(m) for m in row["conversation"]] == rec.conversation
    assert [t["name"] for t in row["tools"]] == ["research", "write"]
    assert set(row["tools"][0]) == {"name", "description", "parameters"}
    assert [a["agent"] for a in row["recorded_agents"]] == ["orchestrator", "researcher", "writer"]
    first = row["recorded_agents"][1]
    assert set(first) == {"agent", "received", "produced", "tools"}
    assert [Message.model_validate(m) for m in first["produced"]] == rec.workflow.executors[
        1
    ].produced  # type: ignore[union-attr]
    assert ThreadRunRecord.model_validate_json(rec.model_dump_json()) == rec


def test_client_is_checked(emulator: FoundryEmulator) -> None:
    """The aio client, a wrong object or no endpoint are refused with what to pass instead."""
    with pytest.raises(TypeError, match=r"sync azure\.ai\.agents\.AgentsClient"):
        FoundryThreads(
            AsyncAgentsClient(
                endpoint=emulator.endpoint,
                credential=AsyncStaticCredential(),
                **async_transport(),
            )
        )
    with pytest.raises(TypeError, match="AgentsClient"):
        FoundryThreads(object())
    with pytest.raises(ValueError, match="endpoint="):
        FoundryThreads()
    with FoundryThreads(endpoint=emulator.endpoint, credential=StaticCredential()) as own:
        assert own.read("thread_nope") == []


def test_built_in_tools_and_unknown_content(
    emulator: FoundryEmulator, agents: AgentsClient
) -> None:
    """A code_interpreter call keeps its input and logs; an image_file part is left out, said so."""
    agent = emulator.add_agent(
        "coder", instructions="Compute.", tools=[{"type": "code_interpreter"}]
    )
    thread = emulator.add_thread()
    emulator.add_message(thread, "user", "What is 6*7?")
    emulator.messages[thread][-1]["content"].append(
        {"type": "image_file", "image_file": {"file_id": "file_1"}}
    )
    run = emulator.add_run(thread, agent)
    emulator.add_step(
        thread,
        run,
        {
            "type": "tool_calls",
            "tool_calls": [
                {
                    "id": "ci_1",
                    "type": "code_interpreter",
                    "code_interpreter": {
                        "input": "print(6*7)",
                        "outputs": [{"type": "logs", "logs": "42"}],
                    },
                }
            ],
        },
    )
    answer(emulator, thread, run, agent, "42")
    reader = FoundryThreads(agents)
    [rec] = reader.read(thread)
    assert rec.tools == [
        ToolDefinition(
            name="code_interpreter", description="Foundry built-in tool: code_interpreter"
        )
    ]
    call = rec.conversation[2].function_calls[0]
    assert (call.name, call.arguments) == ("code_interpreter", {"input": "print(6*7)"})
    assert rec.conversation[3].function_results[0].result == [{"type": "logs", "logs": "42"}]
    assert rec.conversation[1].text == "What is 6*7?"
    assert any("content of type 'image_file' left out" in str(d) for d in reader.diagnostics)


def test_transient_errors_are_retried_by_the_client_pipeline(
    emulator: FoundryEmulator, weather_agent: str
) -> None:
    """A 503 on a list page is retried by azure-core's retry policy; the conversion is complete."""
    thread = weather_thread(emulator, weather_agent)
    fault = emulator.inject("GET", rf"^/threads/{thread}/runs/[^/]+/steps$", 503, times=2)
    with AgentsClient(
        endpoint=emulator.endpoint, credential=StaticCredential(), retry_backoff_factor=0.01
    ) as client:
        [rec] = FoundryThreads(client).read(thread)
    assert fault.hits == 2
    assert [m.role for m in rec.conversation] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert rec.diagnostics == []
