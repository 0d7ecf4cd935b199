"""Query sets: one row per query, with what is expected of the answer.

A row has a ``query`` and, optionally, ``id``, ``expected_output``, ``expected_tool_calls`` (a list of
``{"name", "arguments"}``), ``context``, ``tags`` and ``agents`` (per-agent expectations for a
workflow: ``{"writer": {"expected_output": ..., "expected_tool_calls": [...]}}``). Three file formats:
JSONL (one object per line), CSV (one row per line after the header; list and object cells hold JSON,
``tags`` may also be comma-separated) and Parquet (one row per record; nested columns or JSON
strings). Errors name the file and line (CSV/JSONL) or row (Parquet) and say what to change.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalpipe.items import ExpectedToolCall

__all__ = [
    "AgentExpectation",
    "DatasetError",
    "QueryRow",
    "load_csv",
    "load_dataset",
    "load_jsonl",
    "load_parquet",
    "row_hash",
]

DATASET_SUFFIXES = (".jsonl", ".csv", ".parquet")


class DatasetError(ValueError):
    """A dataset that cannot be used as it is; the message names the file, line and field."""


class AgentExpectation(BaseModel):
    """What one agent of a workflow is expected to produce for a row."""

    model_config = ConfigDict(extra="forbid")

    expected_output: str | None = None
    """The agent's reference answer."""
    expected_tool_calls: list[ExpectedToolCall] | None = None
    """Tool calls the agent should make."""


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
    agents: dict[str, AgentExpectation] | None = None
    """Per-agent expectations for a workflow target, keyed by agent name."""


def row_hash(row: QueryRow) -> str:
    """A content hash of the row (its id excluded): a changed query or expectation is a new row."""
    data = row.model_dump(mode="json", exclude={"id"}, exclude_none=True)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


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


def _existing(path: str | Path) -> Path:
    file = Path(path)
    if not file.is_file():
        raise DatasetError(
            f"{file}: no such dataset file; check the path (relative to {Path.cwd()})"
        )
    return file


def _collect(file: Path, records: Iterable[tuple[str, str, dict[str, Any]]]) -> list[QueryRow]:
    """Validate (where, default id, data) records into rows; ``where`` is a line or "row N"."""
    rows: list[QueryRow] = []
    seen: dict[str, str] = {}
    for where, default_id, data in records:
        try:
            row = QueryRow.model_validate(data)
        except ValidationError as exc:
            raise DatasetError(f"{file}:{where}: {_describe(exc)}") from None
        if row.id is None:
            row.id = default_id
        if row.id in seen:
            earlier = seen[row.id]
            label = earlier if earlier.startswith("row ") else f"line {earlier}"
            raise DatasetError(
                f"{file}:{where}: id {row.id!r} already used on {label}; ids must be unique"
            )
        seen[row.id] = where
        rows.append(row)
    if not rows:
        raise DatasetError(f"{file}: the dataset has no rows; add at least one row with a 'query'")
    return rows


def load_dataset(path: str | Path) -> list[QueryRow]:
    """Read a query set in the format its suffix names (.jsonl, .csv or .parquet).

    Raises:
        DatasetError: as the format's loader, or for an unknown suffix.
    """
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix == ".jsonl":
        return load_jsonl(file)
    if suffix == ".csv":
        return load_csv(file)
    if suffix == ".parquet":
        return load_parquet(file)
    raise DatasetError(
        f"{file}: unknown dataset format {suffix or '(no suffix)'!r}; use one of "
        f"{', '.join(DATASET_SUFFIXES)}"
    )


_JSON_COLUMNS = ("expected_tool_calls", "agents", "tags")


def _cell(column: str, value: Any, where: str, file: Path) -> Any:
    """A CSV/Parquet cell as a row value: JSON for nested columns, empty cells absent."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text == "":
            return None
        if column in _JSON_COLUMNS:
            if text[0] in "[{":
                try:
                    return json.loads(text)
                except json.JSONDecodeError as exc:
                    raise DatasetError(
                        f"{file}:{where}: column {column!r} holds invalid JSON ({exc.msg} at "
                        f"column {exc.colno}); write it as a JSON list or object"
                    ) from None
            if column == "tags":
                return [t.strip() for t in text.split(",") if t.strip()]
            raise DatasetError(
                f"{file}:{where}: column {column!r} must hold a JSON "
                f"{'object' if column == 'agents' else 'list'}, got {text[:40]!r}"
            )
        return value
    return value


def load_csv(path: str | Path) -> list[QueryRow]:
    """Read a CSV query set with a header row (UTF-8; a BOM is accepted).

    Raises:
        DatasetError: naming ``file:line`` for an unknown column (header line), a bad cell or value.
    """
    file = _existing(path)
    with file.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames is None:
            raise DatasetError(f"{file}: the file is empty; the first line must be a header")
        unknown = [c for c in reader.fieldnames if c not in QueryRow.model_fields]
        if unknown:
            raise DatasetError(
                f"{file}:1: unknown column {unknown[0]!r} (known: "
                f"{', '.join(sorted(QueryRow.model_fields))})"
            )

        def records() -> Iterable[tuple[str, str, dict[str, Any]]]:
            for record in reader:
                where = str(reader.line_num)
                if None in record:
                    raise DatasetError(
                        f"{file}:{where}: more cells than header columns; quote cells that "
                        "contain commas"
                    )
                data = {
                    k: c for k, v in record.items() if (c := _cell(k, v, where, file)) is not None
                }
                if data:
                    yield where, f"line-{where}", data

        return _collect(file, records())


def load_parquet(path: str | Path) -> list[QueryRow]:
    """Read a Parquet query set (one record per row; nested columns or JSON strings).

    Raises:
        DatasetError: naming ``file:row N`` (1-based) for a bad value, or the unknown column.
    """
    import pyarrow.parquet as pq

    file = _existing(path)
    try:
        table = pq.read_table(file)
    except Exception as exc:
        raise DatasetError(f"{file}: not a readable Parquet file ({exc})") from None
    unknown = [c for c in table.column_names if c not in QueryRow.model_fields]
    if unknown:
        raise DatasetError(
            f"{file}: unknown column {unknown[0]!r} (known: "
            f"{', '.join(sorted(QueryRow.model_fields))})"
        )

    def records() -> Iterable[tuple[str, str, dict[str, Any]]]:
        for index, record in enumerate(table.to_pylist(), start=1):
            where = f"row {index}"
            data = {k: c for k, v in record.items() if (c := _cell(k, v, where, file)) is not None}
            yield where, f"row-{index}", data

    return _collect(file, records())


def load_jsonl(path: str | Path) -> list[QueryRow]:
    """Read a JSONL query set; blank lines and lines starting with ``#`` are skipped.

    Raises:
        DatasetError: for a missing file, invalid JSON, an unknown column or a bad value, naming
            ``file:line``; or for an empty file, or two rows sharing an id.
    """
    file = _existing(path)

    def records(handle: Iterable[str]) -> Iterable[tuple[str, str, dict[str, Any]]]:
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
            yield str(lineno), f"line-{lineno}", data

    with file.open(encoding="utf-8") as handle:
        return _collect(file, records(handle))
