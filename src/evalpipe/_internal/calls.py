"""Bounding one call of user code (an agent, a workflow, a check): its time, what it may raise,
and the thread a synchronous one runs in.

- ``bounded(awaitable, timeout)``: the call, or :class:`CallTimeout` once ``timeout`` seconds pass
  (the call is cancelled and its slot freed).
- ``is_call_failure(exc)``: whether what the call raised is the call's own failure (an errored
  item) rather than the run being stopped. Everything a call raises is its failure, ``SystemExit``
  and a ``CancelledError`` the user code raised itself included, except the operator's Ctrl-C
  (``KeyboardInterrupt``), ``GeneratorExit``, and the cancellation of the task running the call
  (evalpipe's own: a run-level timeout, SIGTERM).
- ``in_thread(fn, ...)``: a synchronous call in a daemon thread, so one that never returns cannot
  keep the process alive after the run ends (``asyncio.to_thread``'s pool is joined at exit).
- ``Slots``: what bounds calls (an ``asyncio.Semaphore``, a worker's :class:`HeldSlot` of one).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "CallTimeout",
    "HeldSlot",
    "Slots",
    "bounded",
    "in_thread",
    "is_call_failure",
]

DEFAULT_CALL_TIMEOUT = 600.0
"""Seconds one target call may take before it is an errored item (``TargetTimeout``)."""

T = TypeVar("T")


class CallTimeout(Exception):
    """A call that did not finish within its timeout."""


class Slots(Protocol):
    """The slots a call takes one of while it runs (``asyncio.Semaphore`` is one)."""

    async def acquire(self) -> bool: ...

    def release(self) -> None: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any: ...


class HeldSlot:
    """One worker's slot of a shared semaphore, kept from one of its calls to the next.

    ``release`` gives the slot back when the event loop next runs its callbacks (one turn later
    at the latest), unless the worker takes it again first (``acquire`` in the same turn: its next
    call, started as the last one ends): the next call then starts at once, instead of the slot
    going to the semaphore's first waiter, whose turn comes only after every other call that ended
    in the same turn has been handled. A slot not taken again (a retry's backoff, the worker done
    or cancelled) is released then, so the semaphore still bounds the calls in flight; it is never
    held by a worker waiting for anything but the event loop's next turn.

    One callback is queued for all of a turn's releases (a worker making instant calls releases
    and takes its slot again twice a call): a released slot is marked so, and the callback gives
    it back only if it is still marked when it runs.
    """

    __slots__ = ("_queued", "_released", "_semaphore")

    def __init__(self, semaphore: Slots) -> None:
        self._semaphore = semaphore
        self._released = False
        """Released and not yet given back to the semaphore."""
        self._queued = False
        """The callback that gives the slot back is queued."""

    async def acquire(self) -> bool:
        if self._released:
            self._released = False
            return True
        return await self._semaphore.acquire()

    def release(self) -> None:
        if self._released:  # pragma: no cover - a release follows an acquire
            raise RuntimeError("HeldSlot released twice")
        self._released = True
        if not self._queued:
            self._queued = True
            asyncio.get_running_loop().call_soon(self._give_back)

    def _give_back(self) -> None:
        self._queued = False
        if self._released:
            self._released = False
            self._semaphore.release()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.release()


class _Deadline:
    """The deadline of one bounded call: cancels the call's task when it passes, unless the call
    returned first (``task`` None)."""

    __slots__ = ("fired", "task", "when")

    def __init__(self, task: asyncio.Task[Any], when: float) -> None:
        self.task: asyncio.Task[Any] | None = task
        self.when = when
        self.fired = False

    def __call__(self) -> None:
        task = self.task
        if task is not None:
            self.fired = True
            task.cancel()


_CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution
"""How early the event loop runs a timer (its ``_clock_resolution``: a timer due within it runs)."""


class _Deadlines:
    """The deadlines of the bounded calls of one timeout on one event loop, behind one timer.

    A timer per call (``loop.call_at``, cancelled as the call returns) costs a handle, a push on
    the loop's heap and a cancellation, for calls that mostly return long before their deadline
    (an instant agent's return at once). Here a call's deadline is appended to a queue (in the
    order they pass: one timeout, and the loop's clock only goes forward) and dropped when the call
    returns. The loop's one timer is set (at the end of the turn, for the first deadline still
    pending) only while a call is pending; when it fires it cancels the calls whose deadlines
    passed, as their own timers would have, and is set again for the next one. It is cancelled
    when no call is pending any more, so no timer outlives the calls. (A deadline that passes
    before the end of the turn its call started in, shorter than what is left of that turn, is
    enforced a turn later than a timer of its own would be.)
    """

    __slots__ = ("arming", "live", "loop", "pending", "seconds", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.loop = loop
        self.seconds = seconds
        self.pending: collections.deque[_Deadline] = collections.deque()
        """Deadlines in the order they pass; the returned calls' are dropped from the front."""
        self.live = 0
        """How many calls have not returned."""
        self.timer: asyncio.TimerHandle | None = None
        self.arming = False
        """The callback that sets the timer is queued."""

    def add(self, task: asyncio.Task[Any]) -> _Deadline:
        """The deadline of a call ``task`` makes now."""
        pending = self.pending
        if len(pending) > 64 and len(pending) > 2 * self.live:
            # calls behind a pending one returned: dropped, as the loop drops cancelled timers
            pending = self.pending = collections.deque(d for d in pending if d.task is not None)
        deadline = _Deadline(task, self.loop.time() + self.seconds)
        pending.append(deadline)
        self.live += 1
        if self.timer is None and not self.arming:
            self.arming = True
            self.loop.call_soon(self._arm)
        return deadline

    def done(self, deadline: _Deadline) -> None:
        """The call returned (or raised) before its deadline fired, or after."""
        deadline.task = None
        self.live -= 1
        if not self.live:
            self.pending.clear()
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None

    def _arm(self) -> None:
        self.arming = False
        if self.timer is None:
            self._next()

    def _next(self) -> None:
        """The timer set for the first pending deadline (none once no call is pending)."""
        pending = self.pending
        while pending and pending[0].task is None:
            pending.popleft()
        if pending:
            self.timer = self.loop.call_at(pending[0].when, self._fire)

    def _fire(self) -> None:
        self.timer = None
        pending = self.pending
        due = self.loop.time() + _CLOCK_RESOLUTION
        while pending and pending[0].when <= due:
            pending.popleft()()
        self._next()


_CURRENT_TASKS: dict[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None
"""Python 3.11's running tasks by loop, which its ``asyncio.current_task`` (a Python function,
C from 3.12 on) looks the loop up in: read here directly, one function call less a call."""
if (
    inspect.isfunction(asyncio.current_task)
    and type(vars(asyncio.tasks).get("_current_tasks")) is dict
):
    _CURRENT_TASKS = vars(asyncio.tasks)["_current_tasks"]


_LOCAL = threading.local()
"""This thread's deadlines (one event loop runs in a thread at a time)."""


def _deadlines(loop: asyncio.AbstractEventLoop, seconds: float) -> _Deadlines:
    """The deadlines of ``seconds``-bounded calls on ``loop`` (the thread's current ones, or new)."""
    shared: _Deadlines | None = getattr(_LOCAL, "deadlines", None)
    if shared is None or shared.loop is not loop or shared.seconds != seconds:
        shared = _LOCAL.deadlines = _Deadlines(loop, seconds)
    return shared


async def bounded(awaitable: Awaitable[T], seconds: float | None) -> T:
    """``await awaitable``, cancelled after ``seconds`` (None: unbounded).

    What ``asyncio.timeout`` does (the task cancelled when the time passed; the cancellation it
    caused becomes the timeout, any other one propagates), without its context manager and state
    machine, which cost more than the timer itself on a call that returns at once (measured:
    ~10 -> ~4 µs), and without a timer per call (:class:`_Deadlines`).

    Raises:
        CallTimeout: when the time passed (the call was cancelled).
        RuntimeError: when not awaited inside a task.
    """
    if seconds is None:
        return await awaitable
    tasks = _CURRENT_TASKS
    task = tasks.get(asyncio.get_running_loop()) if tasks is not None else asyncio.current_task()
    if task is None:
        raise RuntimeError("a bounded call must run inside a task")
    deadlines = _deadlines(task.get_loop(), seconds)
    deadline = deadlines.add(task)
    cancelling = task.cancelling()
    try:
        result = await awaitable
    except BaseException as exc:
        deadlines.done(deadline)
        if (
            deadline.fired and task.uncancel() <= cancelling and type(exc) is asyncio.CancelledError
        ) or isinstance(exc, TimeoutError):
            # as with asyncio.timeout, a TimeoutError the call raised is a timeout too
            raise CallTimeout(f"no answer within the call timeout of {seconds:g} s") from None
        raise
    deadlines.done(deadline)
    if deadline.fired:  # the call swallowed its cancellation and returned
        task.uncancel()
    return result


def is_call_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised out of a call, is the call's failure (see the module docstring)."""
    if isinstance(exc, KeyboardInterrupt | GeneratorExit):
        return False
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        return task is None or task.cancelling() == 0
    return True


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # the awaiting call was cancelled (timeout, run stopped)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a new daemon thread (with this context's variables)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def run() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = context.run(fn, *args, **kwargs)
        except BaseException as exc:  # handed to the awaiting call, whatever it is
            error = exc
        # RuntimeError: the loop is closed, nobody waits for this call any more
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, future, value, error)

    threading.Thread(target=run, name="evalpipe-call", daemon=True).start()
    return await future
