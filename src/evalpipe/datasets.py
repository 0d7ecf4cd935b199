"""Query sets: one row per query, with what is expected of the answer.

A JSONL file holds one JSON object per line with a ``query`` and, optionally, ``id``,
``expected_output``, ``expected_tool_calls`` (a list of ``{"name", "arguments"}``), ``context`` and
``tags``. Errors name the file and line and say what to change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalpipe.items import ExpectedToolCall

__all__ = ["DatasetError", "QueryRow", "load_jsonl"]


class DatasetError(ValueError):
    """A dataset that cannot be used as it is; the message names the file, line and field."""


class QueryRow(BaseModel):
    """One query of a query set."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1)
    """The user query sent to the target."""
    id: str | None = None
    """A stable id for the row (defaults to its line number)."""
    expected_output: str | None = None
    """The reference answer."""
    expected_tool_calls: list[ExpectedToolCall] | None = None
    """Tool calls the target should make."""
    context: str | None = None
    """Grounding context for the evaluators."""
    tags: list[str] = Field(default_factory=list)
    """Free-form labels for slicing results."""


def _describe(error: ValidationError) -> str:
    parts = []
    for e in error.errors():
        where = ".".join(str(p) for p in e["loc"]) or "row"
        if e["type"] == "extra_forbidden":
            parts.append(
                f"unknown column {where!r} (known: {', '.join(sorted(QueryRow.model_fields))})"
            )
        else:
            parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def load_jsonl(path: str | Path) -> list[QueryRow]:
    """Read a JSONL query set; blank lines and lines starting with ``#`` are skipped.

    Raises:
        DatasetError: for a missing file, invalid JSON, an unknown column or a bad value, naming
            ``file:line``; or for an empty file, or two rows sharing an id.
    """
    file = Path(path)
    if not file.is_file():
        raise DatasetError(
            f"{file}: no such dataset file; check the path (relative to {Path.cwd()})"
        )
    rows: list[QueryRow] = []
    seen: dict[str, int] = {}
    with file.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                data: Any = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"{file}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno}); each line "
                    "must be one JSON object"
                ) from None
            if not isinstance(data, dict):
                raise DatasetError(
                    f"{file}:{lineno}: expected a JSON object with a 'query', got "
                    f"{type(data).__name__}"
                )
            try:
                row = QueryRow.model_validate(data)
            except ValidationError as exc:
                raise DatasetError(f"{file}:{lineno}: {_describe(exc)}") from None
            if row.id is None:
                row.id = f"line-{lineno}"
            if row.id in seen:
                raise DatasetError(
                    f"{file}:{lineno}: id {row.id!r} already used on line {seen[row.id]}; ids must "
                    "be unique"
                )
            seen[row.id] = lineno
            rows.append(row)
    if not rows:
        raise DatasetError(f"{file}: the dataset has no rows; add one JSON object per line")
    return rows
