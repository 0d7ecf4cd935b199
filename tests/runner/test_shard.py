"""The runner's shard: where each transcript comes from, what the journal keeps, and scoped
providers; every path (evaluate_agent, the flow, Dask) runs through it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from examples.travel.workflow import travel_workflow

from evalpipe import (
    AgentResponse,
    FunctionCallContent,
    FunctionResultContent,
    LocalEvaluator,
    Message,
    RunUsage,
    ToolDefinition,
    keyword_check,
)
from evalpipe.evaluators.base import AgentScoped, BatchedEvaluator
from evalpipe.itemize import WorkflowItems
from evalpipe.items import EvalItem
from evalpipe.journal import Journal
from evalpipe.results import EvalResults
from evalpipe.runner import RunPlan, RunState, in_process_plan, resolve_target, run_shard
from evalpipe.runner.shard import (
    build_items,
    evaluate_items,
    evaluate_prebuilt,
    run_calls,
)
from evalpipe.runner.state import StorageError
from evalpipe.secrets import Scrubber
from evalpipe.tally import make_results
from evalpipe.transcripts import TargetRun


class Counting:
    name = "counting"

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        query = messages[-1].text
        self.queries.append(query)
        if "fail" in query:
            raise RuntimeError("down")
        return AgentResponse(messages=[Message("assistant", [f"answer {len(self.queries)}"])])


def _plan(agent: Any, queries: list[str], **kw: Any) -> RunPlan:
    return in_process_plan(
        name="t",
        target=resolve_target(agent),
        kind="agent",
        queries=queries,
        providers=[LocalEvaluator(keyword_check("answer"))],
        **kw,
    )


async def test_same_queries_are_separate_calls_in_process() -> None:
    """Every (row, repetition) is its own call, whatever the rows hold."""
    agent = Counting()
    plan = _plan(agent, ["roll", "roll", "roll"], repetitions=2)
    shard = await run_shard(plan, RunState(), plan.calls, semaphore=None, workers=4)
    assert len(agent.queries) == 6
    assert [o.source for o in shard.outcomes] == ["made"] * 6
    assert len({o.call.key for o in shard.outcomes}) == 6
    assert shard.items == 6
    assert shard.results[0].passed == 6


async def test_finished_calls_are_journaled_and_reused_errored_ones_are_made_again(
    tmp_path: Path,
) -> None:
    """A finished call is journaled before the next stage sees it and reused by a later shard;
    an errored call is not journaled, so it is made again."""
    agent = Counting()
    plan = _plan(agent, ["ok", "fail"])
    state = RunState(journal=Journal(tmp_path, plan.identity))
    first = await run_calls(plan, state, plan.calls, semaphore=None, workers=1)
    assert [o.source for o in first] == ["made", "made"]
    assert first[0].call.key in state.journal  # type: ignore[operator]
    assert first[1].call.key not in state.journal  # type: ignore[operator]
    again = await run_calls(plan, state, plan.calls, semaphore=None, workers=1)
    assert [o.source for o in again] == ["reused", "made"]
    assert again[0].run == first[0].run
    assert agent.queries == ["ok", "fail", "fail"]


async def test_recorded_rows_are_not_calls() -> None:
    """A recorded row's transcript is used as is (each repetition its own copy); nothing is called
    and nothing is journaled."""
    agent = Counting()
    recorded = TargetRun(
        query_index=0, repetition=0, query="q", messages=[Message("assistant", ["answer"])]
    )
    plan = _plan(agent, ["q"], repetitions=2, recorded=[recorded])
    shard = await run_shard(plan, RunState(), plan.calls, semaphore=None, workers=2)
    assert agent.queries == []
    assert [(o.source, o.run.repetition) for o in shard.outcomes] == [
        ("recorded", 0),
        ("recorded", 1),
    ]


async def test_a_scoped_provider_sees_only_its_agents() -> None:
    """`agents: [writer]` evaluates the writer's items and nothing else; a scope with none of its
    agents in a shard gives an empty result, not an error."""
    workflow = resolve_target(travel_workflow())
    plan = in_process_plan(
        name="wf",
        target=workflow,
        kind="workflow",
        queries=["Plan a trip to Paris"],
        providers=[AgentScoped(LocalEvaluator(keyword_check("Paris")), ["writer"])],
    )
    shard = await run_shard(plan, RunState(), plan.calls, semaphore=None, workers=1)
    [result] = shard.results
    assert result.provider == "Local (writer)"
    assert set(result.sub_results) == {"writer"}
    assert result.run_id == "aggregate"
    empty = await evaluate_items(plan, RunState(), 0, plan.providers[0], WorkflowItems())
    assert (empty.passed, empty.failed, empty.errored) == (0, 0, 0)


class Sleepy:
    """Sleeps ``delay`` seconds per call (0: answers without yielding) and notes, at each call's
    start, how many calls the journal holds."""

    name = "sleepy"

    def __init__(self, journal: Journal, delay: float) -> None:
        self.journal = journal
        self.delay = delay
        self.journaled_at_start: list[int] = []
        self.queries: list[str] = []

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        self.journaled_at_start.append(len(self.journal))
        self.queries.append(messages[-1].text)
        if self.delay:
            await asyncio.sleep(self.delay)
        return AgentResponse(messages=[Message("assistant", ["answer"])])


class FillingJournal(Journal):
    """A journal whose disk fills after ``room`` lines."""

    def __init__(self, directory: Path, identity: str, room: int) -> None:
        super().__init__(directory, identity)
        self.room = room

    def record_many(self, entries: Iterable[tuple[str, str]]) -> None:
        for entry in entries:
            if len(self) >= self.room:
                raise OSError(28, "No space left on device")
            super().record_many([entry])


@pytest.mark.parametrize("delay", [0.0, 0.002])
async def test_every_call_is_journaled_before_progress_and_before_run_calls_returns(
    tmp_path: Path, delay: float
) -> None:
    """Each finished call is journaled before on_call hears of it and before run_calls returns;
    outcomes come back in call order; a call starts at most two rounds of `workers` calls ahead of
    the journal (those in flight and those finished, not yet journaled), whether the agent yields
    or not."""
    journal = Journal(tmp_path, "sleepy")
    agent = Sleepy(journal, delay)
    plan = _plan(agent, [f"q{i}" for i in range(40)])
    state = RunState(journal=journal)
    heard: list[bool] = []
    outcomes = await run_calls(
        plan,
        state,
        plan.calls,
        semaphore=asyncio.Semaphore(4),
        workers=4,
        on_call=lambda o: heard.append(o.call.key in journal),
    )
    assert [o.call for o in outcomes] == list(plan.calls)
    assert heard == [True] * 40
    assert all(o.call.key in journal for o in outcomes)
    assert all(k - n < 2 * 4 for k, n in enumerate(agent.journaled_at_start))


async def test_a_call_that_cannot_be_journaled_stops_every_shard_of_the_run(
    tmp_path: Path,
) -> None:
    """When the journal cannot be written, run_calls raises StorageError naming the file, the run
    is stopped, and no shard of it starts more than one more round of calls (those waiting for a
    slot when it stopped are refused it)."""
    journal = FillingJournal(tmp_path, "sleepy", room=5)
    agent = Sleepy(journal, 0.002)
    plan = _plan(agent, [f"q{i}" for i in range(60)])
    state = RunState(journal=journal)
    shared = asyncio.Semaphore(2)
    first, second = plan.calls[:30], plan.calls[30:]
    done = await asyncio.gather(
        run_calls(plan, state, first, semaphore=shared, workers=2),
        run_calls(plan, state, second, semaphore=shared, workers=2),
        return_exceptions=True,
    )
    assert all(isinstance(d, StorageError) for d in done)
    assert str(journal.path) in str(done[0])
    assert state.failure is done[0]
    assert len(journal) == 5
    # the calls in flight and those finished but not yet journaled: at most two rounds of 2
    assert len(agent.journaled_at_start) - len(journal) <= 4


class Keeping:
    """A provider that keeps the items it is given, by eval name."""

    name = "Keeping"

    def __init__(self) -> None:
        self.seen: dict[str, list[EvalItem]] = {}

    async def evaluate(self, items: Sequence[EvalItem], *, eval_name: str) -> EvalResults:
        self.seen[eval_name] = list(items)
        return EvalResults(provider=self.name, run_id=eval_name, result_counts={"passed": 0})


class LastFirst:
    """Answers the later queries sooner, so calls finish in the reverse of their order."""

    name = "last-first"

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        index = int(messages[-1].text.removeprefix("q"))
        await asyncio.sleep(0.001 * (8 - index))
        return AgentResponse(messages=[Message("assistant", [f"answer {index}"])])


@pytest.mark.parametrize("kind", ["agent", "workflow"])
async def test_a_shards_items_are_its_outcomes_items_in_call_order(kind: str) -> None:
    """Items are built as calls finish, yet providers get exactly build_items over the outcomes,
    in call order, for agents and for workflows (overall and per agent)."""
    keeping = Keeping()
    target = LastFirst() if kind == "agent" else travel_workflow(latency=0.001)
    plan = in_process_plan(
        name="t",
        target=resolve_target(target),
        kind=kind,  # type: ignore[arg-type]
        queries=[f"q{i}" for i in range(8)],
        providers=[keeping],
    )
    shard = await run_shard(plan, RunState(), plan.calls, semaphore=asyncio.Semaphore(8), workers=8)
    expected = build_items(plan, shard.outcomes)
    groups = {"overall": expected.overall, **expected.per_agent}
    seen = {
        name.split(" — ")[-1] if " — " in name else "overall": v for name, v in keeping.seen.items()
    }
    assert {k: [i.model_dump() for i in v] for k, v in seen.items()} == {
        k: [i.model_dump() for i in v] for k, v in groups.items() if v
    }
    assert [i.item_id for i in seen["overall"]] == [str(i) for i in range(8)]
    assert shard.items == expected.count


class Conflicting:
    """Calls one tool; on the queries "bad<n>" the response carries two schemas of tool "t<n>"."""

    name = "conflicting"

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        query = messages[-1].text
        await asyncio.sleep(0.001 if query == "bad1" else 0.003)
        name = f"t{query.removeprefix('bad')}" if query.startswith("bad") else "t"
        tools = [ToolDefinition(name, "", {"type": "object", "properties": {}})]
        if query.startswith("bad"):
            tools.append(ToolDefinition(name, "", {"type": "object", "properties": {"x": {}}}))
        call = Message("assistant", [FunctionCallContent(name=name, arguments={}, call_id="c")])
        return AgentResponse(messages=[call], tools=tools)


async def test_strict_tools_raises_the_first_conflict_in_call_order_after_every_call(
    tmp_path: Path,
) -> None:
    """Under strict_tools the shard raises the ValueError of its first conflicting call in call
    order (not the first to finish), once every call is made and journaled."""
    plan = _plan(Conflicting(), ["ok", "bad0", "ok2", "bad1", "ok3"], strict_tools=True)
    state = RunState(journal=Journal(tmp_path, plan.identity))
    with pytest.raises(ValueError, match="two different input schemas") as raised:
        await run_shard(plan, state, plan.calls, semaphore=asyncio.Semaphore(5), workers=5)
    assert "Tool 't0'" in str(raised.value)
    assert len(state.journal) == 5  # type: ignore[arg-type]


class Finishing:
    """Sleeps a little per call and notes each query it answered, as it answers."""

    name = "finishing"

    def __init__(self) -> None:
        self.answered: list[str] = []

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        query = messages[-1].text
        await asyncio.sleep(0.001 * (1 + int(query.removeprefix("q")) % 3))
        self.answered.append(query)
        return AgentResponse(messages=[Message("assistant", ["answer"])])


async def test_calls_that_finished_are_journaled_when_the_shard_is_cancelled(
    tmp_path: Path,
) -> None:
    """Cancelled mid-shard (a run timeout), every call the target answered is in the journal,
    settled or not: a resumed run does not make it again."""
    agent = Finishing()
    plan = _plan(agent, [f"q{i}" for i in range(400)])
    journal = Journal(tmp_path, plan.identity)
    state = RunState(journal=journal)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await run_calls(plan, state, plan.calls, semaphore=asyncio.Semaphore(8), workers=8)
    assert 0 < len(agent.answered) < 400
    keys = {c.key for c in plan.calls if plan.rows[c.row_index].query in agent.answered}
    assert keys == set(journal.keys())


class Tracing:
    """Sleeps a millisecond per call and notes each call's start and end, and the most at once."""

    name = "tracing"

    def __init__(self) -> None:
        self.events: list[str] = []
        self.active = 0
        self.most = 0

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        query = messages[-1].text
        self.active += 1
        self.most = max(self.most, self.active)
        self.events.append(query)
        await asyncio.sleep(0.001)
        self.active -= 1
        return AgentResponse(messages=[Message("assistant", ["answer"])])


class _Varied:
    """Answers each query with a differently shaped response: unicode, tool calls and results,
    reported usage, an answer marked as an error, a value JSON cannot hold, or an exception."""

    name = "varied"

    async def run(self, messages: list[Message], **kwargs: Any) -> Any:
        query = messages[-1].text
        shape = int(query.split()[0]) % 6
        if shape == 0:
            return AgentResponse(messages=[Message("assistant", [f'é\U0001f600 "{query}"\n\\'])])
        if shape == 1:
            return AgentResponse(
                messages=[
                    Message(
                        "assistant",
                        [FunctionCallContent(name="f", arguments={"x": [1, None]}, call_id="c")],
                        author_name="ä",
                    ),
                    Message("tool", [FunctionResultContent(call_id="c", result={"ok": 1.5})]),
                    Message("assistant", ["done", "twice"]),
                ],
                tools=[ToolDefinition("f", "d", {"type": "object"})],
            )
        if shape == 2:
            return AgentResponse(
                messages=[Message("assistant", ["counted"])],
                usage=RunUsage(input_tokens=3, output_tokens=None, total_tokens=7),
            )
        if shape == 3:
            return AgentResponse(error_code="MaxStepsExceeded", error_message=None)
        if shape == 4:
            result = FunctionResultContent(call_id="c", result={"when": object()})
            return AgentResponse(messages=[Message("tool", [result])])
        raise ValueError(f"broken on {query}")


async def test_journal_lines_hold_the_transcripts_as_pydantic_writes_them(tmp_path: Path) -> None:
    """Each journaled line is the key, a time and the transcript exactly as
    ``model_dump_json(fallback=str)`` writes the outcome's run (whatever its shape), the
    messages JSON found in it is theirs, and only calls without error are journaled."""
    plan = _plan(_Varied(), [f"{i} q\u00e9" for i in range(24)])
    journal = Journal(tmp_path, plan.identity)
    state = RunState(journal=journal)
    outcomes = await run_calls(plan, state, plan.calls, semaphore=asyncio.Semaphore(4), workers=4)
    journal.close()
    lines = journal.path.read_bytes().decode("utf-8").splitlines()
    by_key = {o.call.key: o for o in outcomes}
    kept = [o for o in outcomes if o.run.error_code is None]
    assert len(lines) == len(kept) == 16
    for line in lines:
        key = line[len('{"key":"') : line.index('"', len('{"key":"'))]
        outcome = by_key[key]
        run_json = outcome.run.model_dump_json(fallback=str)
        finished = line[line.index('"finished_at":') + 14 : line.index(',"run":')]
        assert line == f'{{"key":"{key}","finished_at":{float(finished)!r},"run":{run_json}}}'
        assert outcome.json == run_json
        run = outcome.run
        assert isinstance(run, TargetRun)
    assert {o.run.error_code for o in outcomes} == {None, "MaxStepsExceeded", "AgentError"}


class _Echoing:
    name = "echoing"

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        return AgentResponse(messages=[Message("assistant", [f"said {messages[-1].text}"])])


async def test_a_secret_a_call_echoes_is_masked_before_it_is_journaled(tmp_path: Path) -> None:
    """A made transcript holding one of the run's secrets is masked in the outcome the next
    stage sees and in its journal line; the others are journaled as they are."""
    plan = _plan(_Echoing(), ["key sk-secret-123", "plain"])
    journal = Journal(tmp_path, plan.identity)
    state = RunState(journal=journal, scrubber=Scrubber(["sk-secret-123"]))
    outcomes = await run_calls(plan, state, plan.calls, semaphore=None, workers=2)
    journal.close()
    text = journal.path.read_text(encoding="utf-8")
    assert "sk-secret-123" not in text
    assert [o.run.messages[0].text for o in outcomes] == ["said key ***", "said plain"]  # type: ignore[union-attr]
    assert [journal.get(o.call.key) for o in outcomes] == [o.json for o in outcomes]


class _Hanging:
    """Hangs on queries that say so; answers the others after a few turns of the loop."""

    name = "hanging"

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        query = messages[-1].text
        if "hang" in query:
            await asyncio.sleep(60)
        for _ in range(3):
            await asyncio.sleep(0)
        return AgentResponse(messages=[Message("assistant", [f"answer to {query}"])])


async def test_hanging_calls_time_out_each_at_its_own_deadline_and_the_others_finish(
    tmp_path: Path,
) -> None:
    """Calls of a shard past the call timeout are errored items (TargetTimeout, not journaled),
    whenever they started; the other calls answer and are journaled."""
    queries = ["hang 0", "a", "b", "hang 1", "c", "hang 2", "d", "e"]
    plan = _plan(_Hanging(), queries, call_timeout=0.05)
    journal = Journal(tmp_path, plan.identity)
    state = RunState(journal=journal)
    outcomes = await run_calls(plan, state, plan.calls, semaphore=asyncio.Semaphore(2), workers=2)
    codes = [o.run.error_code for o in outcomes]
    assert codes == ["TargetTimeout" if "hang" in q else None for q in queries]
    timed_out = [o.run.error_message or "" for o in outcomes if o.run.error_code]
    assert len(timed_out) == 3
    assert all("call timeout of 0.05 s" in message for message in timed_out)
    assert [o.call.key in journal for o in outcomes] == [c is None for c in codes]
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


class _Batches(BatchedEvaluator):
    """A server-side provider that records the batch numbers it is given."""

    name = "batches"
    batch_size = 2
    max_concurrent_runs = 1

    def __init__(self) -> None:
        self.numbers: list[int] = []

    async def evaluate(self, items: Sequence[EvalItem], *, eval_name: str) -> EvalResults:
        raise AssertionError("a batched provider is run in batches")

    async def create_eval(
        self, items: Sequence[EvalItem], *, eval_name: str, key: str | None = None
    ) -> str:
        return "eval"

    async def run_batch(
        self, eval_id: str, items: Sequence[EvalItem], *, eval_name: str, batch_index: int = 0
    ) -> EvalResults:
        self.numbers.append(batch_index)
        return make_results(self.name, [])


async def test_server_runs_are_numbered_by_batch_not_by_item_position() -> None:
    """Items evaluated in one go are batches 0, 1, 2 (Foundry numbers the items without an id from
    ``batch_index * batch_size`` and names the run after it), not the positions of their first
    items (0, 2, 4)."""
    provider = _Batches()
    items = WorkflowItems()
    conversation = [Message("user", ["q"]), Message("assistant", ["a"])]
    items.overall.extend(EvalItem(conversation) for _ in range(5))
    await evaluate_prebuilt([provider], items, "t", kind="agent")
    assert sorted(provider.numbers) == [0, 1, 2]
