"""Bounding one call: its timeout, and which cancellations are the call's own."""

from __future__ import annotations

import asyncio

import pytest

from evalpipe._internal.calls import (
    CallTimeout,
    bounded,
    is_call_failure,
)


async def _answer(value: int, delay: float = 0.0) -> int:
    if delay:
        await asyncio.sleep(delay)
    return value


async def test_a_call_within_its_time_returns_its_value_and_leaves_no_timer() -> None:
    """The value comes back whether the call suspends or not; the timer is gone after."""
    loop = asyncio.get_running_loop()
    assert await bounded(_answer(1), 5.0) == 1
    assert await bounded(_answer(2, 0.001), 5.0) == 2
    assert await bounded(_answer(3), None) == 3
    assert all(handle.cancelled() for handle in loop._scheduled)  # type: ignore[attr-defined]
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_call_past_its_time_is_cancelled_and_is_a_call_timeout() -> None:
    """The call is cancelled at its deadline; the caller sees CallTimeout, a call failure, and
    its task is not left cancelling."""
    cancelled = asyncio.Event()

    async def hang() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(CallTimeout, match=r"call timeout of 0\.05 s") as caught:
        await bounded(hang(), 0.05)
    assert cancelled.is_set()
    assert is_call_failure(caught.value)
    assert caught.value.__suppress_context__
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    assert await bounded(_answer(4, 0.001), 5.0) == 4  # the task runs on normally


async def test_a_time_error_the_call_raises_is_a_call_timeout_as_with_asyncio_timeout() -> None:
    async def own_timeout() -> None:
        raise TimeoutError("the agent's own wait_for")

    with pytest.raises(CallTimeout):
        await bounded(own_timeout(), 5.0)
    with pytest.raises(TimeoutError):  # unbounded: as it was raised
        await bounded(own_timeout(), None)


async def test_what_the_call_raises_passes_through() -> None:
    async def broken() -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        await bounded(broken(), 5.0)


async def test_the_cancellation_of_the_task_running_the_call_propagates() -> None:
    """Cancelled from outside (the run stopped) before the deadline: CancelledError, not a
    timeout, and not a call failure."""
    started = asyncio.Event()

    async def hang() -> None:
        started.set()
        await asyncio.sleep(60)

    async def caller() -> None:
        try:
            await bounded(hang(), 30.0)
        except asyncio.CancelledError:
            assert not is_call_failure(asyncio.CancelledError())
            raise

    task = asyncio.create_task(caller())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_outer_cancellation_at_the_deadline_is_not_swallowed() -> None:
    """The deadline fired and the run was cancelled too: the cancellation propagates."""

    async def hang() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            asyncio.current_task().cancel()  # type: ignore[union-attr] - the run stops as well
            raise

    async def caller() -> None:
        await bounded(hang(), 0.01)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(caller())


async def test_a_call_that_swallows_its_cancellation_returns_and_the_task_is_not_left_cancelling() -> (
    None
):
    async def stubborn() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "kept going"
        return "never"

    assert await bounded(stubborn(), 0.01) == "kept going"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
