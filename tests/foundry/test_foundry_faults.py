"""Every fault the emulator injects, through the real client: no result is lost, nothing is duplicated."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from azure.ai.projects.aio import AIProjectClient as AsyncAIProjectClient

from evalpipe import EvalItem, EvalNotPassedError, Message
from evalpipe.foundry import FoundryEvals
from fakes.foundry_emulator import FoundryEmulator

FAST: dict[str, Any] = {
    "poll_interval": 0.005,
    "max_poll_interval": 0.02,
    "retry_initial_delay": 0.005,
    "retry_max_delay": 0.02,
}
RUN = r"/runs/evalrun_[0-9a-f]+$"


def items(n: int) -> list[EvalItem]:
    """n passing one-turn items."""
    return [
        EvalItem([Message("user", [f"Q{i}"]), Message("assistant", [f"A{i}"])], query_index=i)
        for i in range(n)
    ]


def foundry(project: AsyncAIProjectClient, **kw: Any) -> FoundryEvals:
    """FoundryEvals with one evaluator and tiny waits."""
    return FoundryEvals(project, model="m", evaluators=["relevance"], **(FAST | kw))


async def test_429_with_retry_after_ms_is_honoured(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """A 429 with retry-after-ms: 200 on eval create waits that long, retries once, one eval made."""
    emulator.inject("POST", r"^/evals$", 429, headers={"retry-after-ms": "200"})
    results = await foundry(aio_project).evaluate(items(2), eval_name="rl")
    first, second = emulator.calls("POST", r"^/evals$")
    assert second.at - first.at >= 0.2
    assert results.status == "completed"
    assert len(emulator.evals) == 1


async def test_429_with_retry_after_seconds_on_a_poll(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """Retry-After: 1 (seconds) on a poll is waited for; the run still completes with all items."""
    fault = emulator.inject("GET", RUN, 429, headers={"Retry-After": "1"})
    results = await foundry(aio_project).evaluate(items(2), eval_name="rl")
    polls = emulator.calls("GET", RUN)
    assert fault.hits == 1
    assert polls[1].at - polls[0].at >= 1.0
    assert results.result_counts == {"passed": 2, "failed": 0, "errored": 0}


async def test_retry_after_beyond_the_cap_fails_the_batch_without_waiting(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """A server delay above max_retry_after is not waited for: the batch fails, its items are errored."""
    emulator.inject("POST", r"/runs$", 429, headers={"Retry-After": "30"})
    results = await foundry(aio_project, max_retry_after=1.0).evaluate(items(2), eval_name="cap")
    assert results.status == "failed"
    assert results.error is not None
    assert "RateLimitError" in results.error
    assert [i.error_code for i in results.items] == ["FoundryError", "FoundryError"]
    assert results.result_counts == {"passed": 0, "failed": 0, "errored": 2}
    assert len(emulator.calls("POST", r"/runs$")) == 1


async def test_burst_of_5xx_is_retried_with_our_policy(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """502/503/504 bursts on every operation are absorbed; each retry is ours (SDK retry count 0)."""
    for method, path in (("POST", r"^/evals$"), ("GET", RUN), ("GET", r"/output_items$")):
        emulator.inject(method, path, 503, times=3)
    emulator.inject("POST", r"/runs$", 502, times=2)
    results = await foundry(aio_project).evaluate(items(3), eval_name="burst")
    assert results.result_counts == {"passed": 3, "failed": 0, "errored": 0}
    assert len(emulator.calls("POST", r"^/evals$")) == 4
    assert {c.headers["x-stainless-retry-count"] for c in emulator.calls()} == {"0"}


async def test_output_items_failing_past_the_budget_give_a_partial_result(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """Reading output items keeps failing: status partial, items errored FoundryError, run id kept."""
    emulator.inject("GET", r"/output_items$", 500, times=10)
    results = await foundry(aio_project, max_retries=2).evaluate(items(2), eval_name="p")
    assert results.status == "partial"
    assert results.run_id.startswith("evalrun_")
    assert results.error is not None
    assert "could not read output items" in results.error
    assert {i.error_code for i in results.items} == {"FoundryError"}
    assert len(emulator.calls("GET", r"/output_items$")) == 3


async def test_a_committed_create_answered_with_500_is_not_duplicated(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """The server writes the eval and the run but answers 500: the retry finds them by their tags."""
    emulator.inject("POST", r"^/evals$", 500, commit=True)
    emulator.inject("POST", r"/runs$", 500, commit=True)
    results = await foundry(aio_project).evaluate(items(3), eval_name="dup")
    assert len(emulator.evals) == 1
    assert len(emulator.run_objects()) == 1
    assert len(emulator.calls("POST", r"/runs$")) == 1
    assert emulator.calls("GET", r"^/evals$")
    assert results.result_counts == {"passed": 3, "failed": 0, "errored": 0}


async def test_a_read_timeout_is_retried(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """A poll slower than request_timeout is a timeout error, retried; the run completes."""
    emulator.inject("GET", RUN, 0, delay=0.5)
    results = await foundry(aio_project, request_timeout=0.1).evaluate(items(1), eval_name="slow")
    assert results.status == "completed"
    assert len(emulator.calls("GET", RUN)) >= 2


async def test_slow_run_is_polled_with_backoff_until_done(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """A run that needs six polls: the gaps between polls double up to max_poll_interval."""
    emulator.polls_to_complete = 6
    evals = foundry(aio_project, poll_interval=0.02, max_poll_interval=0.08)
    results = await evals.evaluate(items(2), eval_name="slow")
    assert results.status == "completed"
    times = [c.at for c in emulator.calls("GET", RUN)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) == 6
    for gap, floor in zip(gaps, [0.04, 0.08, 0.08, 0.08], strict=False):
        assert gap >= floor * 0.9


async def test_never_finishing_run_is_canceled_and_keeps_what_exists(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """On timeout the run is canceled on the server; finished items are kept, the rest are Timeout."""
    emulator.run_outcome = "never"
    emulator.items_per_poll = 1
    # 1 s: room for polls (one item each) even on a loaded machine (0.4 s saw none once, in the
    # full suite), and still far from 100 items (the polls are at least 5 ms apart, 20 ms later).
    results = await foundry(aio_project, timeout=1.0).evaluate(items(100), eval_name="never")
    assert results.status == "timeout"
    [cancel] = emulator.calls("POST", r"/cancel$")
    assert cancel.body is None
    [run] = emulator.run_objects()
    assert run["status"] == "canceled"
    done = [i for i in results.items if not i.is_error]
    assert done
    assert all(i.status == "pass" for i in done)
    rest = [i for i in results.items if i.is_error]
    assert rest
    assert {i.error_code for i in rest} == {"Timeout"}
    assert results.result_counts == {"passed": len(done), "failed": 0, "errored": len(rest)}
    assert results.error is not None
    assert "canceled on the server" in results.error
    assert [i.item_id for i in results.items] == [str(i) for i in range(100)]


async def test_failed_run_keeps_its_output_items_and_reports_the_error(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """A failed run: status failed, its error text, produced items kept, the rest RunFailed."""
    emulator.run_outcome = "failed"
    emulator.polls_to_complete = 2
    emulator.items_per_poll = 1
    results = await foundry(aio_project).evaluate(items(4), eval_name="fail")
    assert results.status == "failed"
    assert results.error == "judge deployment overloaded"
    assert [i.status for i in results.items] == ["pass", "pass", "error", "error"]
    assert results.items[3].error_code == "RunFailed"
    with pytest.raises(EvalNotPassedError, match=r"Error: judge deployment overloaded"):
        results.raise_for_status()


@pytest.mark.parametrize("spelling", ["canceled", "cancelled"])
async def test_run_canceled_by_the_service_in_either_spelling(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient, spelling: str
) -> None:
    """canceled and cancelled both end polling with status canceled; missing items are RunCanceled."""
    emulator.run_outcome = "canceled"
    emulator.cancel_spelling = spelling
    results = await foundry(aio_project, timeout=5).evaluate(items(2), eval_name="c")
    assert results.status == "canceled"
    assert {i.error_code for i in results.items} == {"RunCanceled"}
    assert len(emulator.calls("GET", RUN)) == 1


async def test_output_items_out_of_order_across_pages_are_matched_by_datasource_item_id(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """250 items in shuffled order over three pages come back in input order, each with its own result."""
    emulator.shuffle_output = True
    results = await foundry(aio_project).evaluate(items(250), eval_name="order")
    pages = emulator.calls("GET", r"/output_items$")
    assert len(pages) == 3
    assert "after" in pages[1].query
    assert [r.input_text for r in results.items] == [f"Q{i}" for i in range(250)]
    assert [r.output_text for r in results.items] == [f"A{i}" for i in range(250)]
    assert results.result_counts == {"passed": 250, "failed": 0, "errored": 0}


async def test_wrong_token_is_not_retried_and_fails_every_item(emulator: FoundryEmulator) -> None:
    """A 401 is final: one attempt, a failed result naming AuthenticationError, all items errored."""
    from azure.core.credentials import AccessToken

    from evalpipe.foundry import async_transport

    class WrongCredential:
        async def get_token(self, *scopes: str, **kw: Any) -> AccessToken:
            return AccessToken("wrong", 2**31)

        async def close(self) -> None:
            return None

    async with AsyncAIProjectClient(
        endpoint=emulator.endpoint, credential=WrongCredential(), **async_transport()
    ) as project:
        results = await foundry(project).evaluate(items(2), eval_name="auth")
    assert results.status == "failed"
    assert results.error is not None
    assert "AuthenticationError" in results.error
    assert {i.error_code for i in results.items} == {"FoundryError"}
    assert len(emulator.calls()) == 1


async def test_bad_request_on_run_create_is_final(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """A 400 is not retried: that batch fails, the other batch of the eval completes, so the
    merged result is partial (the tally's one rule)."""
    emulator.inject("POST", r"/runs$", 400)
    evals = foundry(aio_project, batch_size=2, max_concurrent_runs=1)
    results = await evals.evaluate(items(4), eval_name="bad")
    assert results.status == "partial"
    assert [i.status for i in results.items].count("pass") == 2
    assert [i.error_code for i in results.items if i.is_error] == ["FoundryError", "FoundryError"]


async def test_polls_failing_until_the_deadline_give_timeout_and_cancel(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """Every poll answers 500: the run times out, the cancel is still sent, the last error is kept."""
    emulator.inject("GET", RUN, 500, times=10_000)
    results = await foundry(aio_project, timeout=0.2, max_retries=1).evaluate(
        items(1), eval_name="polls"
    )
    assert results.status == "timeout"
    assert emulator.calls("POST", r"/cancel$")
    assert {i.error_code for i in results.items} == {"Timeout"}


async def test_run_gone_while_polling_fails_the_batch(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """A 404 on a poll ends polling at once with status failed."""
    emulator.polls_to_complete = 5
    emulator.inject("GET", RUN, 404)
    results = await foundry(aio_project).evaluate(items(1), eval_name="gone")
    assert results.status == "failed"
    assert results.error is not None
    assert "NotFoundError" in results.error
    assert len(emulator.calls("GET", RUN)) == 1


async def test_cancel_that_keeps_failing_still_returns_the_timeout(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """If the cancel cannot be sent, the result still comes back (timeout, 'cancel failed')."""
    emulator.run_outcome = "never"
    emulator.inject("POST", r"/cancel$", 500, times=100)
    results = await foundry(aio_project, timeout=0.05, max_retries=1).evaluate(
        items(1), eval_name="nocancel"
    )
    assert results.status == "timeout"
    assert results.error is not None
    assert "cancel failed" in results.error
    assert len(emulator.calls("POST", r"/cancel$")) == 2


async def test_cancelling_the_caller_cancels_the_run_on_the_server(
    emulator: FoundryEmulator, aio_project: AsyncAIProjectClient
) -> None:
    """If the evaluate task is cancelled while polling, the run is canceled on the server first."""
    emulator.run_outcome = "never"
    task = asyncio.create_task(foundry(aio_project, timeout=30).evaluate(items(2), eval_name="x"))
    for _ in range(500):
        if emulator.calls("GET", RUN):
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert emulator.calls("POST", r"/cancel$")
    assert emulator.run_objects()[0]["status"] == "canceled"
