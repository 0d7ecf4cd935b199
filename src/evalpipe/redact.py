"""Masking what a run writes about its configuration (manifest, run marker, Prefect logs)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REDACTED", "redact"]

_SECRET_KEY = re.compile(
    r"(?i)^(api[_-]?key|apikey|password|passwd|secret|client[_-]?secret|token|access[_-]?token"
    r"|auth(orization)?|connection[_-]?string|sas[_-]?token|account[_-]?key)$"
)
REDACTED = "***"


def redact(value: Any) -> Any:
    """A copy of ``value`` with every secret-looking mapping entry (api_key, token, ...) masked.

    Used for everything evalpipe logs or writes about a suite (manifest, run marker, Prefect
    logs and artifacts); ``api_key_env`` and other ``*_env`` names stay, they name a variable.
    """
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and _SECRET_KEY.match(k) and v else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value
