"""Which target errors are worth another attempt, and how long the server asked us to wait."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

__all__ = ["TRANSIENT_STATUS", "is_transient", "status_of"]

TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""HTTP statuses a retry may cure: timeouts, conflicts, throttling, server errors."""


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (httpx, openai, azure-core style), if any."""
    for attr in ("status_code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


def is_transient(exc: BaseException) -> bool:
    """Timeouts, connection failures and 408/409/425/429/5xx responses; not bugs or bad input."""
    if isinstance(
        exc, httpx.TransportError | TimeoutError | asyncio.TimeoutError | ConnectionError
    ):
        return True
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUS or status >= 500
    name = type(exc).__name__
    return name in ("APIConnectionError", "APITimeoutError", "ServiceRequestError")


def retry_after(exc: BaseException, cap: float = 60.0) -> float | None:
    """Seconds from a ``retry-after-ms`` or ``Retry-After`` (seconds) header, capped."""
    response: Any = getattr(exc, "response", None)
    headers: Any = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return min(float(ms) / 1000.0, cap)
        if (s := headers.get("retry-after")) is not None:
            return min(float(s), cap)
    except (TypeError, ValueError):
        return None
    return None
