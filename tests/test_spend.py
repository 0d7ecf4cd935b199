"""Spend and budgets: tokens and prices counted per call, the budget's stop, a runner shard that
stops at its budget with its calls in flight kept, and the judges' journaled answers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from evalpipe import AgentResponse, EvalItem, Message
from evalpipe.evaluators.judge import JudgeEvaluator
from evalpipe.journal import Journal
from evalpipe.llm import run_answers
from evalpipe.runner import RunState, in_process_plan, resolve_target
from evalpipe.runner.shard import run_shard
from evalpipe.runner.state import JournalAnswers
from evalpipe.secrets import Scrubber
from evalpipe.spend import Budget, BudgetReached, Ledger, Price, Spend, metering, spend_text
from evalpipe.transcripts import RunUsage
from fakes.openai_server import FakeOpenAIServer, verdict


def test_tokens_are_the_reported_total_else_input_plus_output() -> None:
    """A call's tokens: total_tokens when reported, else input + output; cost at the model's
    price; a model without a price makes the cost unknown, not zero."""
    spend = Spend()
    price = Price(input_per_1m=1.0, output_per_1m=4.0)
    spend.add("target", "a", RunUsage(input_tokens=100, output_tokens=50, total_tokens=160), price)
    spend.add("judge", "j", {"input_tokens": 30, "output_tokens": 10}, price)
    spend.add("judge", "j", None, price)
    assert (spend.tokens, spend.calls) == (200, 3)
    assert spend.cost_usd == pytest.approx((100 + 200 + 30 + 40) / 1e6)
    assert spend.as_dict()["by_model"][0]["unreported"] == 1
    spend.add("judge", "unpriced", {"total_tokens": 5}, None)
    assert spend.cost_usd is None
    assert Spend.from_dict(spend.as_dict()).as_dict() == spend.as_dict()


def test_a_budget_needs_tokens_or_dollars_and_is_reached_at_either() -> None:
    """{} is refused; the ledger refuses a new call once tokens or dollars reach the budget,
    whichever first, and counts the refusals."""
    with pytest.raises(ValueError, match="tokens, cost_usd or both"):
        Budget()
    ledger = Ledger(Budget(tokens=100, cost_usd=1.0), {"m": Price(input_per_1m=0, output_per_1m=0)})
    assert ledger.start()
    ledger.finish("target", "m", {"total_tokens": 99})
    assert ledger.start()
    ledger.finish("target", "m", {"total_tokens": 1})
    assert not ledger.start()
    assert (ledger.reached(), ledger.refused, ledger.in_flight) == (True, 1, 0)
    stop = ledger.stop()
    assert "the budget of 100 tokens or $1 is reached: 100 tokens" in str(stop)
    assert isinstance(stop.spent, dict)


def test_budget_reached_crosses_a_process_boundary_with_its_spend() -> None:
    """A worker's stop is pickled back to the flow with what the shard spent."""
    import pickle

    stop = pickle.loads(pickle.dumps(BudgetReached("spent", {"tokens": 3, "by_model": []})))
    assert (str(stop), stop.spent) == ("spent", {"tokens": 3, "by_model": []})


class _Counted:
    """An agent that reports 100 tokens a call, slowly, and counts its calls."""

    name = "counted"

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, messages: Any, **kwargs: Any) -> AgentResponse:
        self.calls += 1
        await asyncio.sleep(0.05)
        usage = RunUsage(input_tokens=80, output_tokens=20, total_tokens=100)
        return AgentResponse(messages=[Message("assistant", ["ok"])], usage=usage)


async def test_a_shard_stops_at_its_budget_and_keeps_the_calls_in_flight(tmp_path: Path) -> None:
    """No call starts once 450 tokens are spent; the calls in flight (at most 2) finish and are
    journaled; the shard raises BudgetReached; the journaled calls are reused, not paid again."""
    agent = _Counted()
    plan = in_process_plan(
        name="b",
        target=resolve_target(agent),
        kind="agent",
        queries=[f"q{i}" for i in range(20)],
        providers=[],
    )
    state = RunState(journal=Journal(tmp_path, "counted"))
    ledger = Ledger(Budget(tokens=450), {})
    with pytest.raises(BudgetReached):
        await run_shard(
            plan, state, plan.calls, semaphore=asyncio.Semaphore(2), workers=4, ledger=ledger
        )
    made = agent.calls
    assert 5 <= made <= 6  # 450 reached at the 5th answer, one more was in flight
    assert state.journal is not None
    assert (ledger.spent.tokens, len(state.journal)) == (100 * made, made)
    again = Ledger(None, {})
    await run_shard(
        plan, state, plan.calls, semaphore=asyncio.Semaphore(2), workers=4, ledger=again
    )
    assert agent.calls == 20
    assert (again.spent.tokens, again.earlier.tokens) == (100 * (20 - made), 100 * made)


def _items(n: int) -> list[EvalItem]:
    return [
        EvalItem([Message("user", [f"question {i}"]), Message("assistant", [f"answer {i}"])])
        for i in range(n)
    ]


async def test_judge_requests_stop_at_the_budget_and_their_answers_are_reused(
    tmp_path: Path,
) -> None:
    """A judge's requests are admitted by the run's ledger: once 120 tokens are spent none is
    sent and the evaluation raises BudgetReached; the answers it got are journaled, so judging
    again sends only the requests still missing (and counts the others as earlier spend)."""
    usage = {"prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50}
    with FakeOpenAIServer(lambda _r: verdict(5, usage=usage)) as server:
        judge = JudgeEvaluator(
            {"base_url": server.base_url, "model": "j", "max_concurrency": 1,
             "adaptive_concurrency": False},
            metrics=["relevance"],
        )  # fmt: skip
        store = JournalAnswers(Journal(tmp_path, "answers"), Scrubber())
        run_answers.set(store)
        metering.set(Ledger(Budget(tokens=120), {}))
        with pytest.raises(BudgetReached):
            await judge.evaluate(_items(6))
        assert len(server.requests) == 3  # 50 + 50 < 120 let the third start
        ledger = Ledger(None, {})
        metering.set(ledger)
        results = await judge.evaluate(_items(6))
        assert (results.passed, len(server.requests)) == (6, 6)
        assert (ledger.spent.tokens, ledger.earlier.tokens) == (150, 150)
    stored = store.journal.get(next(store.journal.keys()))
    assert stored is not None
    line = {"run": json.loads(stored)}
    assert line["run"]["usage"] == {"input_tokens": 40, "output_tokens": 10, "total_tokens": 50}


def test_spend_text_names_the_budget_and_what_earlier_attempts_spent() -> None:
    """The terminal's and the report's line: spend, budget, and the reused calls' earlier cost."""
    spend = Spend()
    spend.add("target", "a", {"total_tokens": 10}, None)
    record = {**spend.as_dict(), "budget": {"tokens": 100, "cost_usd": None},
              "earlier": spend.as_dict()}  # fmt: skip
    assert spend_text(record) == (
        "10 tokens (target 10, judges 0) of a budget of 100 tokens; 1 reused call(s) had cost "
        "10 tokens (target 10, judges 0)"
    )


async def test_a_checks_model_request_refused_by_the_budget_stops_the_evaluation() -> None:
    """An async check that calls a model through ChatClient is metered like a judge: refused by a
    spent budget, it raises BudgetReached out of the evaluation (not an errored check)."""
    from evalpipe.evaluators.local import LocalEvaluator, evaluator
    from evalpipe.llm import ChatClient, ChatEndpoint

    with FakeOpenAIServer() as server:

        @evaluator(name="asks_a_model")
        async def asks_a_model(response: str) -> bool:
            client = ChatClient(ChatEndpoint(base_url=server.base_url, model="m"))
            return (await client.complete([{"role": "user", "content": "ok?"}])).content is not None

        ledger = Ledger(Budget(tokens=10), {})
        ledger.spent.add("judge", "m", {"total_tokens": 10}, None)
        metering.set(ledger)
        with pytest.raises(BudgetReached):
            await LocalEvaluator(asks_a_model).evaluate(_items(2))
        assert server.requests == []
