"""Which target errors are worth another attempt, and how long the server asked us to wait."""

from __future__ import annotations

import asyncio
import email.utils
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

__all__ = ["TRANSIENT_STATUS", "is_transient", "parse_retry_after", "retry_after", "status_of"]

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


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: datetime | None = None
) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date).

    Returns None when neither header is present or parseable; a date in the past gives 0.
    """
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


def retry_after(exc: BaseException, cap: float = 60.0) -> float | None:
    """The delay an exception's response asked for (``parse_retry_after``), capped."""
    response: Any = getattr(exc, "response", None)
    headers: Any = getattr(response, "headers", None)
    try:
        delay = parse_retry_after(headers)
    except (AttributeError, TypeError):  # headers of an unexpected type
        return None
    return None if delay is None else min(delay, cap)
