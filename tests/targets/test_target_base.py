"""One call of an agent (call_agent) and reading its response: its usage read the same way on the
fast path and the general one, the run as validation makes it, the semaphore slot, cancellation."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace
from typing import Any

import pytest

from evalpipe import AgentResponse, Message
from evalpipe.targets.base import _is_async, call_agent, response_usage
from evalpipe.transcripts import RunUsage, TargetRun


def _old_way(response: Any, latency: float) -> RunUsage:
    """What call_agent did before: the usage, then the latency set on it."""
    usage = response_usage(response)
    usage.latency_seconds = latency
    return usage


class _WithDetails(AgentResponse):
    @property
    def usage_details(self) -> dict[str, int]:
        return {"input_token_count": 3, "output_token_count": 4, "total_token_count": 7}


def test_the_latency_is_the_one_given_on_a_new_usage_whatever_the_response() -> None:
    reported = RunUsage(input_tokens=1, output_tokens=2, total_tokens=3)
    responses: list[Any] = [
        AgentResponse(messages=[Message("assistant", ["hi"])]),
        AgentResponse(usage=reported),
        _WithDetails(),
        SimpleNamespace(messages=[], usage_details={"input_tokens": 5, "output_tokens": 6}),
        SimpleNamespace(
            messages=[], usage_details=SimpleNamespace(prompt_tokens=8, completion_tokens=9)
        ),
        SimpleNamespace(messages=[], usage={"total_tokens": 11}),
        SimpleNamespace(messages=[]),
    ]
    for response in responses:
        usage = response_usage(response, 0.25)
        assert usage == _old_way(response, 0.25)
        assert usage.model_fields_set == _old_way(response, 0.25).model_fields_set
        assert usage.latency_seconds == 0.25
    assert reported.latency_seconds is None  # copied, not changed
    assert response_usage(_WithDetails(), 0.5).total_tokens == 7
    assert response_usage(AgentResponse()) == RunUsage()


class _Scripted:
    """An agent that fails with the given errors in turn, then answers; it records whether the
    shared semaphore was held while it ran."""

    name = "scripted"

    def __init__(self, semaphore: asyncio.Semaphore | None, *failures: BaseException) -> None:
        self.semaphore = semaphore
        self.failures = list(failures)
        self.held: list[bool] = []

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        self.held.append(self.semaphore is not None and self.semaphore.locked())
        if self.failures:
            raise self.failures.pop(0)
        return AgentResponse(messages=[Message("assistant", ["ok"])])


_MADE = {"query_index", "repetition", "query", "messages", "tools", "usage", "error_code"}
_MADE |= {"error_message", "attempts", "started_at", "ended_at"}


async def test_a_made_call_is_the_validated_run_it_was() -> None:
    """call_agent's run equals the TargetRun validated from the same fields, with the fields set
    TargetRun(...) gives it (all passed, minus messages and tools for a failed call)."""
    for agent, fields in (
        (_Scripted(None), _MADE - {"started_at", "ended_at"}),
        (
            _Scripted(None, ValueError("no")),
            _MADE - {"started_at", "ended_at", "messages", "tools"},
        ),
    ):
        run = await call_agent(agent, "q", query_index=2, repetition=1)
        assert run.model_fields_set == fields
        assert run == TargetRun(**{name: getattr(run, name) for name in fields})
        assert (
            run.model_dump_json()
            == TargetRun.model_validate_json(run.model_dump_json()).model_dump_json()
        )


async def test_the_slot_is_held_during_each_attempt_and_freed_between_and_after() -> None:
    """One semaphore slot: held while the agent runs (first attempt and retries), free while
    waiting to retry and once the call returned, whether it succeeded or failed."""
    semaphore = asyncio.Semaphore(1)
    agent = _Scripted(semaphore, ConnectionError("down"))

    async def watch() -> list[bool]:
        seen = []
        for _ in range(20):
            seen.append(semaphore.locked())
            await asyncio.sleep(0.001)
        return seen

    run, seen = await asyncio.gather(
        call_agent(
            agent,
            "q",
            query_index=0,
            repetition=0,
            semaphore=semaphore,
            attempts=2,
            retry_wait=0.01,
        ),
        watch(),
    )
    assert run.ok
    assert run.attempts == 2
    assert agent.held == [True, True]
    assert False in seen  # freed while waiting for the retry
    assert not semaphore.locked()
    failed = await call_agent(
        _Scripted(semaphore, ValueError("bug")),
        "q",
        query_index=0,
        repetition=0,
        semaphore=semaphore,
    )
    assert failed.error_code == "AgentError"
    assert failed.attempts == 1
    assert not semaphore.locked()


class EchoingAgent:
    name = "echo"

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        return AgentResponse(messages=[Message("assistant", [messages[-1].text])])


async def test_a_cancelled_call_propagates_and_frees_its_slot() -> None:
    """Cancelling the task making the call (the run stopped) is not an errored call: it propagates,
    and the semaphore slot is released."""
    semaphore = asyncio.Semaphore(1)

    class _Slow:
        name = "slow"

        async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
            await asyncio.sleep(10)
            raise AssertionError("not reached")

    task = asyncio.ensure_future(
        call_agent(_Slow(), "q", query_index=0, repetition=0, semaphore=semaphore)
    )
    await asyncio.sleep(0.01)
    assert semaphore.locked()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not semaphore.locked()


class _Sync:
    name = "sync"

    def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        return AgentResponse(messages=[Message("assistant", [messages[0].text])])


class _Async:
    name = "async"

    async def run(self, messages: list[Message], **kwargs: Any) -> AgentResponse:
        return AgentResponse(messages=[Message("assistant", [messages[0].text])])


async def test_sync_and_async_runs_are_told_apart_on_every_call() -> None:
    """A synchronous run goes to a thread and an async one is awaited, call after call (the
    remembered answer is per function, so two agents' runs never share it)."""
    for _ in range(3):
        for agent in (_Sync(), _Async()):
            run = await call_agent(agent, "echo", query_index=0, repetition=0)
            assert run.ok
            assert run.messages[0].text == "echo"
    assert _is_async(_Async().run)
    assert not _is_async(_Sync().run)
    assert _is_async(_Async().run) is inspect.iscoroutinefunction(_Async().run)
