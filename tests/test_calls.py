"""Bounding one call: its timeout, and which cancellations are the call's own."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from evalpipe._internal.calls import (
    _CURRENT_TASKS,
    CallTimeout,
    HeldSlot,
    _Deadlines,
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


async def test_bounded_matches_asyncio_timeout_over_the_same_calls() -> None:
    """The same outcomes as the ``asyncio.timeout`` it replaces, call by call."""

    async def reference(coro: object, seconds: float) -> object:
        try:
            async with asyncio.timeout(seconds):
                return await coro  # type: ignore[misc]
        except TimeoutError:
            return "timeout"

    async def ours(coro: object, seconds: float) -> object:
        try:
            return await bounded(coro, seconds)  # type: ignore[arg-type]
        except CallTimeout:
            return "timeout"

    for delay, seconds in ((0.0, 1.0), (0.001, 1.0), (0.2, 0.01)):
        assert await ours(_answer(7, delay), seconds) == await reference(_answer(7, delay), seconds)


async def test_a_held_slot_is_given_back_a_turn_after_its_last_release_unless_taken_again() -> None:
    """Released and taken again in one turn, the slot stays the worker's; released and not
    taken again, it goes back to the semaphore in the next turn, as often as that happens."""
    semaphore = asyncio.Semaphore(1)
    slot = HeldSlot(semaphore)
    assert await slot.acquire()
    for _ in range(3):  # a worker's instant calls: released and taken again in the same turn
        slot.release()
        assert semaphore.locked()
        assert await slot.acquire()
    await asyncio.sleep(0)
    assert semaphore.locked()  # held: the last release was taken back
    slot.release()
    assert semaphore.locked()
    await asyncio.sleep(0)
    assert not semaphore.locked()
    async with slot:  # from the semaphore again, then given back a turn later
        assert semaphore.locked()
    assert semaphore.locked()
    await asyncio.sleep(0)
    assert not semaphore.locked()


async def test_a_slot_given_back_goes_to_the_semaphore_s_waiter() -> None:
    """A worker that does not take its slot again lets the task waiting for the semaphore run."""
    semaphore = asyncio.Semaphore(1)
    slot = HeldSlot(semaphore)
    await slot.acquire()
    waiter = asyncio.create_task(semaphore.acquire())
    await asyncio.sleep(0)
    assert not waiter.done()
    slot.release()
    assert await asyncio.wait_for(waiter, 1.0)
    assert semaphore.locked()  # the waiter's now
    semaphore.release()
    assert not semaphore.locked()


async def test_calls_sharing_a_timeout_each_time_out_or_return_as_alone() -> None:
    """Concurrent calls of one timeout (one timer between them): the ones that hang time out,
    the others return their values, and neither timer nor cancellation is left behind."""

    async def one(index: int) -> object:
        try:
            return await bounded(_answer(index, 60.0 if index % 3 == 0 else index / 1000), 0.05)
        except CallTimeout:
            return "timeout"

    done = await asyncio.gather(*(one(i) for i in range(12)))
    assert done == ["timeout" if i % 3 == 0 else i for i in range(12)]
    loop = asyncio.get_running_loop()
    assert all(handle.cancelled() for handle in loop._scheduled)  # type: ignore[attr-defined]
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


class _Timer:
    def __init__(self, when: float, callback: Any) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Clock:
    """What _Deadlines uses of an event loop, with a clock set by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.soon: list[Any] = []
        self.timers: list[_Timer] = []

    def time(self) -> float:
        return self.now

    def call_soon(self, callback: Any) -> None:
        self.soon.append(callback)

    def call_at(self, when: float, callback: Any) -> _Timer:
        self.timers.append(_Timer(when, callback))
        return self.timers[-1]

    def turn(self) -> None:
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()

    def armed(self) -> list[float]:
        return [t.when for t in self.timers if not t.cancelled and t.callback is not None]

    def run_timers(self, until: float) -> None:
        self.now = until
        for timer in self.timers:
            if not timer.cancelled and timer.callback is not None and timer.when <= until:
                callback, timer.callback = timer.callback, None
                callback()


class _Task:
    def __init__(self) -> None:
        self.cancels = 0

    def cancel(self) -> None:
        self.cancels += 1


def test_shared_deadlines_cancel_each_call_at_its_own_deadline_with_one_timer() -> None:
    """The one timer is set at the end of the turn for the first pending deadline, runs on to
    the next, cancels only the calls whose own deadlines passed, and is gone once none is
    pending; calls that return within their turn set no timer at all."""
    clock = _Clock()
    deadlines = _Deadlines(clock, 10.0)  # type: ignore[arg-type]
    first, second = _Task(), _Task()
    d1 = deadlines.add(first)  # type: ignore[arg-type]
    assert clock.armed() == []
    clock.turn()
    assert clock.armed() == [10.0]
    clock.now = 3.0
    d2 = deadlines.add(second)  # type: ignore[arg-type]
    clock.turn()
    assert clock.armed() == [10.0]  # one timer, for the first pending deadline
    deadlines.done(d1)  # the first call returned
    clock.run_timers(10.0)
    assert (first.cancels, second.cancels, d1.fired, d2.fired) == (0, 0, False, False)
    assert clock.armed() == [13.0]
    clock.run_timers(13.0)
    assert (first.cancels, second.cancels, d2.fired) == (0, 1, True)
    assert clock.armed() == []
    deadlines.done(d2)  # the cancelled call ended
    clock.now = 20.0
    for _ in range(5):  # instant calls: each returns in the turn it started
        deadlines.done(deadlines.add(_Task()))  # type: ignore[arg-type]
    clock.turn()
    assert clock.armed() == []
    hung = _Task()
    kept = deadlines.add(hung)  # type: ignore[arg-type]
    clock.turn()
    assert clock.armed() == [30.0]
    for _ in range(200):  # behind a hung call: the returned ones are dropped as they pile up
        deadlines.done(deadlines.add(_Task()))  # type: ignore[arg-type]
    assert len(deadlines.pending) <= 130
    clock.run_timers(30.0)
    assert (hung.cancels, kept.fired) == (1, True)
    deadlines.done(kept)
    assert clock.armed() == []
    assert not deadlines.pending


def test_the_running_task_bounded_reads_is_asyncio_s_current_task() -> None:
    """Where Python's current_task is a lookup in a dict (3.11), bounded reads the same dict:
    the same task, in this thread's loop and in another thread's."""

    async def both() -> tuple[object, object]:
        tasks = _CURRENT_TASKS
        mine = tasks.get(asyncio.get_running_loop()) if tasks is not None else None
        return mine, asyncio.current_task()

    seen = [asyncio.run(both())]
    thread = threading.Thread(target=lambda: seen.append(asyncio.run(both())))
    thread.start()
    thread.join()
    for mine, current in seen:
        assert current is not None
        assert mine is current or _CURRENT_TASKS is None
