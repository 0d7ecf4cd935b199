"""Bounding one call of user code (an agent, a workflow, a check): its time (:func:`bounded`),
what it may raise (:func:`is_call_failure`), the thread a synchronous one runs in
(:func:`in_thread`), and the slots that bound calls (:class:`Slots`)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "CallTimeout",
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


Slots = AbstractAsyncContextManager[Any]
"""The slots a call holds one of while it runs (``asyncio.Semaphore`` is one)."""


async def bounded(awaitable: Awaitable[T], seconds: float | None) -> T:
    """``await awaitable`` within ``asyncio.timeout(seconds)`` (None: unbounded).

    Raises:
        CallTimeout: when the time passed (the call was cancelled), or the call raised a
            ``TimeoutError`` of its own (its own client's timeout is a timeout too).
    """
    if seconds is None:
        return await awaitable
    try:
        async with asyncio.timeout(seconds):
            return await awaitable
    except TimeoutError:
        raise CallTimeout(f"no answer within the call timeout of {seconds:g} s") from None


def is_call_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised out of a call, is the call's own failure (an errored item) rather
    than the run being stopped. Everything a call raises is its failure, ``SystemExit`` and a
    ``KeyboardInterrupt`` or ``CancelledError`` the user code raised itself included, except
    ``GeneratorExit`` and the run being stopped: the cancellation of the task running the call
    (evalpipe's own: a run-level timeout, SIGTERM, and the operator's Ctrl-C, which
    ``asyncio.run`` turns into the cancellation of the run), or a ``KeyboardInterrupt`` outside a
    task."""
    if isinstance(exc, GeneratorExit):
        return False
    if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError):
        # The operator's Ctrl-C cancels the run's tasks (asyncio.run's SIGINT handler): a
        # KeyboardInterrupt out of a call whose task is not being cancelled is the call's own.
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no event loop: a KeyboardInterrupt here is the operator's
            task = None
        if task is None:
            return isinstance(exc, asyncio.CancelledError)
        return task.cancelling() == 0
    return True


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # the awaiting call was cancelled (timeout, run stopped)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a new daemon thread (with this context's variables), so a call
    that never returns cannot keep the process alive after the run ends (``asyncio.to_thread``'s
    pool is joined at exit)."""
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
