"""Query sets: one row per query, with what is expected of the answer.

A row has a ``query`` and, optionally, ``id``, ``expected_output``, ``expected_tool_calls`` (a list of
``{"name", "arguments"}``), ``context``, ``tags`` and ``agents`` (per-agent expectations for a
workflow: ``{"writer": {"expected_output": ..., "expected_tool_calls": [...]}}``).

A row may also carry a recording of what an agent already did, instead of (or beside) the query:
``conversation`` (the whole exchange, in evalpipe/MAF, OpenAI chat-completions or Foundry agent
message format, one format per file: see ``evalpipe.recorded``), ``tools`` (the tool definitions the
agent had) and ``recorded_agents`` (for a multi-agent recording, in turn order:
``{"agent", "received", "produced", "tools"}``). Without a ``query`` the row's query is the last user
message before the response. Recorded rows are evaluated without calling a target. Three file formats:
JSONL (one object per line), CSV (one row per line after the header; list and object cells hold JSON,
``tags`` may also be comma-separated) and Parquet (one row per record; nested columns or JSON
strings). Errors name the file and line (CSV/JSONL) or row (Parquet) and say what to change.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import from_json

from evalpipe._internal.files import atomic_path, decode_utf8, read_utf8
from evalpipe.items import AgentExpectation, ExpectedToolCall
from evalpipe.messages import Message, ToolDefinition
from evalpipe.recorded import (
    RecordedFormat,
    RecordedFormatError,
    check_messages,
    convert_messages,
    detect_format,
    split_recording,
)

__all__ = [
    "DatasetError",
    "PlainRow",
    "QueryRow",
    "RecordedAgent",
    "load_dataset",
    "load_jsonl",
    "load_rows",
    "row_hash",
    "write_jsonl",
]


class DatasetError(ValueError):
    """A dataset that cannot be used as it is; the message names the file, line and field."""


def _tool_definitions(value: Any) -> Any:
    if isinstance(value, list):
        return [ToolDefinition.coerce(t) if isinstance(t, dict) else t for t in value]
    return value


_Tools = Annotated[list[ToolDefinition] | None, BeforeValidator(_tool_definitions)]
"""Tool definitions, each a ToolDefinition or what ``ToolDefinition.coerce`` takes."""


class RecordedAgent(BaseModel):
    """One agent's turn in a recorded multi-agent exchange."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1)
    """The agent's name (per-agent results are keyed by it)."""
    received: list[Message] = Field(default_factory=list)
    """The messages the agent was given."""
    produced: list[Message] = Field(default_factory=list)
    """The messages it produced: tool calls, tool results, its answer."""
    tools: _Tools = None
    """The tool definitions it had (None: unknown)."""


def _recording_lists(data: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(path, messages)`` of every message list a raw row records (lists of Messages, already
    read, left out)."""
    lists = [("conversation", data.get("conversation"))]
    agents = data.get("recorded_agents")
    for i, entry in enumerate(agents if isinstance(agents, list) else []):
        if isinstance(entry, dict):
            lists += [
                (f"recorded_agents[{i}].{key}", entry.get(key)) for key in ("received", "produced")
            ]
    return [
        (path, value)
        for path, value in lists
        if value is not None
        and (path == "conversation" or isinstance(value, list))
        and not (isinstance(value, list) and value and all(isinstance(m, Message) for m in value))
    ]


def _convert_recording(data: dict[str, Any], fmt: RecordedFormat) -> dict[str, Any]:
    """The row with its recorded message lists converted from ``fmt`` to Messages.

    Raises:
        RecordedFormatError: naming the first place a list does not fit ``fmt``.
    """
    out = dict(data)
    for path, value in _recording_lists(data):
        bad = check_messages(value, fmt, path)
        if bad is not None:
            raise RecordedFormatError(str(bad))
        converted = convert_messages(value, fmt)
        if path == "conversation":
            out["conversation"] = converted
        else:
            index, key = path.removeprefix("recorded_agents[").split("].")
            agents = out["recorded_agents"] = list(out["recorded_agents"])
            agents[int(index)] = {**agents[int(index)], key: converted}
    return out


class QueryRow(BaseModel):
    """One query of a query set, or one recorded conversation to evaluate as it happened."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1)
    """The user query sent to the target. Recorded rows: the last user message's text when absent."""
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
    conversation: list[Message] | None = None
    """A recorded exchange (system, user, tool calls and results, answer): the target is not called."""
    tools: _Tools = None
    """The tool definitions the recorded agent had."""
    recorded_agents: list[RecordedAgent] | None = None
    """A recorded multi-agent exchange, one entry per agent turn in order."""

    @model_validator(mode="before")
    @classmethod
    def _read_recording(cls, data: Any) -> Any:
        # Rows built in code: detect the recording's format from this row alone (a file's loader
        # converts with the format detected over the whole file before this runs). Without a
        # query, the query is the last user message before the response.
        if not isinstance(data, dict):
            return data
        lists = _recording_lists(data)
        if lists and (fmt := detect_format([("this row", lists)])) is not None:
            data = _convert_recording(data, fmt)
        if data.get("query") is None:
            source = data.get("conversation")
            agents = data.get("recorded_agents")
            if source is None and isinstance(agents, list) and agents:
                first = agents[0]
                source = first.get("received") if isinstance(first, dict) else first.received
            if isinstance(source, list) and all(isinstance(m, Message) for m in source):
                data = {**data, "query": split_recording(source, None)[2]}
        return data

    @property
    def recorded(self) -> bool:
        """The row carries a recording: it is evaluated as recorded, without calling a target."""
        return self.conversation is not None or self.recorded_agents is not None


_ROWS: TypeAdapter[list[QueryRow]] = TypeAdapter(list[QueryRow])
"""A file's rows, validated as a list: QueryRow.model_validate's rows, in one call."""


@dataclass(slots=True)
class PlainRow:
    """A dataset row holding only a query and plain expectations (``query``, ``id``,
    ``expected_output``, ``expected_tool_calls``, ``context``, ``tags``), read for a run without a
    QueryRow model: what QueryRow would hold, and its :func:`row_hash`. :func:`load_rows` reads
    them; nothing writes to them (rows expecting the same calls share one list)."""

    query: str
    id: str
    expected_output: str | None
    expected_tool_calls: list[ExpectedToolCall] | None
    context: str | None
    tags: tuple[str, ...]
    key: str
    """The row's hash, as :func:`row_hash` gives it for the QueryRow of the same data."""

    agents: ClassVar[None] = None
    conversation: ClassVar[None] = None
    tools: ClassVar[None] = None
    recorded_agents: ClassVar[None] = None
    recorded: ClassVar[bool] = False


def row_hash(row: QueryRow | PlainRow) -> str:
    """A content hash of the row, its id included: a changed query or expectation is a new row,
    and two rows that differ only in id are two samples (each gets its own target calls)."""
    if type(row) is PlainRow:
        return row.key
    return _hash(cast(QueryRow, row).model_dump(mode="json", exclude_none=True))


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, check_circular=False
)
"""The encoder ``journal.content_key`` makes per call (``json.dumps`` with these options; a dump
of a model is never cyclic, so the cycle check, which changes no output, is left out), made once
for every row."""


def _hash(dump: dict[str, Any]) -> str:
    """The row hash of a row's JSON dump (its canonical JSON's digest)."""
    return hashlib.sha256(_CANONICAL.encode(dump).encode("utf-8")).hexdigest()[:32]


def _unknown_column(name: str) -> str:
    return f"unknown column {name!r} (known: {', '.join(sorted(QueryRow.model_fields))})"


def _describe(error: ValidationError) -> str:
    parts = []
    for e in error.errors():
        where = ".".join(str(p) for p in e["loc"]) or "row"
        if e["type"] == "extra_forbidden":
            parts.append(_unknown_column(where))
        else:
            parts.append(f"{where}: {e['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def _label(where: str) -> str:
    return where if where.startswith("row ") else f"line {where}"


def _read_recordings(file: Path, records: list[_Record]) -> list[_Record]:
    """Detect the file's recording format over every row and convert the rows' recordings."""
    try:
        fmt = detect_format(
            (_label(where), lists)
            for where, _, data in records
            if (lists := _recording_lists(data))
        )
    except RecordedFormatError as exc:  # "line 3: ..." named as "file:3: ..."
        raise DatasetError(f"{file}:{str(exc).removeprefix('line ')}") from None
    if fmt is None:
        return records
    # detect_format checked every list as _convert_recording checks it: this raises nothing
    return [
        (where, default_id, _convert_recording(data, fmt)) for where, default_id, data in records
    ]


def _unanswered(row: QueryRow) -> str | None:
    """Why a recorded row has no answer to evaluate (a response side without an assistant
    message would be scored as an empty answer, and could pass), or None."""
    if row.conversation is not None and row.recorded_agents is None:
        _, tail, _ = split_recording(row.conversation, row.query)
        if not any(m.role == "assistant" for m in tail):
            return (
                "the recorded conversation has no assistant message after its last user message, "
                "so there is no answer to evaluate; record the answer or drop the row"
            )
    if row.recorded_agents is not None and not any(
        m.role == "assistant" for turn in row.recorded_agents for m in turn.produced
    ):
        return (
            "no recorded agent produced an assistant message, so there is no answer to "
            "evaluate; record the agents' answers or drop the row"
        )
    return None


_Record = tuple[str, str, dict[str, Any]]
"""(where, default id, data) of one row of a file; ``where`` is a line or "row N"."""

_PLAIN_FIELDS = frozenset(
    ("query", "id", "expected_output", "expected_tool_calls", "context", "tags")
)
_STR_OR_NONE = frozenset({str, type(None)})
_STR = frozenset({str})
_CALLS: TypeAdapter[list[ExpectedToolCall]] = TypeAdapter(list[ExpectedToolCall])
_CallsSeen = dict[str, tuple[list[ExpectedToolCall], list[dict[str, Any]]] | None]
"""repr of a raw expected_tool_calls value -> (its calls, their JSON dumps), None if invalid."""


def _plain_row(data: dict[str, Any], default_id: str, seen: _CallsSeen) -> PlainRow | None:
    """The row ``data`` as a PlainRow when QueryRow would take every value as it is (a non-empty
    str query, str or absent id, expected_output and context, a list of str tags, expected tool
    calls that validate), with QueryRow's hash; None otherwise, and QueryRow validates it (and
    names what is wrong). Rows whose expected calls have the same repr share one list."""
    if not _PLAIN_FIELDS.issuperset(data):
        return None
    get = data.get
    query, row_id, output, context = get("query"), get("id"), get("expected_output"), get("context")
    if not (
        type(query) is str
        and query
        and type(row_id) in _STR_OR_NONE
        and type(output) in _STR_OR_NONE
        and type(context) in _STR_OR_NONE
    ):
        return None
    if row_id is None:
        row_id = default_id
    raw_tags = get("tags", ())
    if type(raw_tags) not in (list, tuple) or not _STR.issuperset(map(type, raw_tags)):
        return None
    tags = tuple(raw_tags)
    calls: list[ExpectedToolCall] | None = None
    raw_calls = get("expected_tool_calls")
    if raw_calls is not None:
        if type(raw_calls) is not list:
            return None
        shape = repr(raw_calls)
        if shape in seen:
            known = seen[shape]
        else:
            try:
                validated = _CALLS.validate_python(raw_calls)
            except ValidationError:
                known = None
            else:
                known = (
                    validated,
                    [c.model_dump(mode="json", exclude_none=True) for c in validated],
                )
            seen[shape] = known
        if known is None:
            return None
        calls, dumps = known
    # QueryRow's model_dump(mode="json", exclude_none=True) of the same row
    dump: dict[str, Any] = {"query": query, "id": row_id, "tags": list(tags)}
    if output is not None:
        dump["expected_output"] = output
    if calls is not None:
        dump["expected_tool_calls"] = dumps
    if context is not None:
        dump["context"] = context
    return PlainRow(query, row_id, output, calls, context, tags, _hash(dump))


def _collect_rows(
    file: Path, records: Iterable[_Record], *, plain: bool
) -> list[QueryRow | PlainRow]:
    """Validate (where, default id, data) records into rows, in file order: with ``plain``, the
    rows :func:`_plain_row` takes as PlainRows, the others (all of them without) as QueryRows."""
    records = list(records)
    seen: _CallsSeen = {}
    plains = [
        _plain_row(data, default_id, seen) if plain else None for _, default_id, data in records
    ]
    read = _read_recordings(file, [r for r, p in zip(records, plains, strict=True) if p is None])
    models = [
        data if data.get("id") is not None else {**data, "id": default_id}
        for _, default_id, data in read
    ]
    # every row in one call, the pydantic-core loop; for a file with a bad row, row by row as
    # below, so the first bad row is named as before
    bulk: list[QueryRow] | None
    try:
        bulk = _ROWS.validate_python(models)
    except ValidationError:
        bulk = None
    rows: list[QueryRow | PlainRow] = []
    seen_ids: dict[str, str] = {}
    position = 0  # in models
    for (where, _, _), found in zip(records, plains, strict=True):
        row: QueryRow | PlainRow
        if found is not None:
            row = found
        else:
            try:
                row = QueryRow.model_validate(models[position]) if bulk is None else bulk[position]
            except ValidationError as exc:
                raise DatasetError(f"{file}:{where}: {_describe(exc)}") from None
            position += 1
            problem = _unanswered(row)
            if problem is not None:
                raise DatasetError(f"{file}:{where}: {problem}")
        row_id = cast(str, row.id)
        if row_id in seen_ids:
            label = _label(seen_ids[row_id])
            raise DatasetError(
                f"{file}:{where}: id {row_id!r} already used on {label}; ids must be unique"
            )
        seen_ids[row_id] = where
        rows.append(row)
    if not rows:
        raise DatasetError(
            f"{file}: the dataset has no rows; add at least one row with a 'query' or a "
            "'conversation'"
        )
    return rows


def load_dataset(path: str | Path) -> list[QueryRow]:
    """Read a query set in the format its suffix names: .jsonl (see :func:`load_jsonl`), .csv
    (a header row; UTF-8, a BOM accepted) or .parquet (one record per row; nested columns or JSON
    strings).

    Raises:
        DatasetError: naming ``file:line`` (CSV: the header line for an unknown column; JSONL)
            or ``file:row N`` (Parquet, 1-based) for a bad cell or value; or for an unknown
            suffix, a missing or empty file, or two rows sharing an id.
    """
    return cast(list[QueryRow], _read(path, plain=False))


def load_rows(path: str | Path) -> list[QueryRow | PlainRow]:
    """:func:`load_dataset` for a run: the rows holding only a query and plain expectations come
    as PlainRows (no QueryRow model each: the common shape, read in bulk, with the same values and
    row hashes), every other row as its QueryRow; the same errors, naming the same file, line and
    field.

    Raises:
        DatasetError: as :func:`load_dataset`.
    """
    return _read(path, plain=True)


def load_jsonl(path: str | Path) -> list[QueryRow]:
    """Read a JSONL query set; blank lines and lines starting with ``#`` are skipped.

    Raises:
        DatasetError: for a missing file, invalid JSON, an unknown column or a bad value, naming
            ``file:line``; or for an empty file, or two rows sharing an id.
    """
    return cast(list[QueryRow], _read(path, plain=False, suffix=".jsonl"))


def _read(path: str | Path, *, plain: bool, suffix: str | None = None) -> list[QueryRow | PlainRow]:
    """The rows of the file at ``path`` in the format ``suffix`` names (default: its own)."""
    file = Path(path)
    if file.is_dir():
        raise DatasetError(
            f"{file}: is a directory, not a dataset file; name a file in it ({', '.join(_READERS)})"
        )
    suffix = suffix or file.suffix.lower()
    if suffix not in _READERS:
        raise DatasetError(
            f"{file}: unknown dataset format {suffix or '(no suffix)'!r}; use one of "
            f"{', '.join(_READERS)}"
        )
    if not file.is_file():
        where = "" if file.is_absolute() else f" (relative to {Path.cwd()})"
        raise DatasetError(f"{file}: no such dataset file; check the path{where}")
    return _collect_rows(file, _READERS[suffix](file), plain=plain)


_RECORDING_COLUMNS = ("conversation", "tools", "recorded_agents")
_JSON_COLUMNS = ("expected_tool_calls", "agents", "tags", *_RECORDING_COLUMNS)


def _without_nulls(value: Any) -> Any:
    """A native Parquet struct value without its null fields: a list of structs has the union of
    every element's fields, so a message gets ``tool_calls: null`` from its neighbours."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _cell(column: str, value: Any, where: str, file: Path) -> Any:
    """A CSV/Parquet cell as a row value: JSON for nested columns, empty cells absent."""
    if value is None:
        return None
    if column in _RECORDING_COLUMNS and isinstance(value, list | dict):
        return _without_nulls(value)
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


def _cells(record: Mapping[str, Any], where: str, file: Path) -> dict[str, Any]:
    """A CSV or Parquet record as a row's data (see :func:`_cell`)."""
    return {k: c for k, v in record.items() if (c := _cell(k, v, where, file)) is not None}


def _check_columns(columns: Iterable[str], where: str) -> None:
    """A table's columns must be QueryRow fields; the first unknown one is named with the list."""
    unknown = [c for c in columns if c not in QueryRow.model_fields]
    if unknown:
        raise DatasetError(f"{where}: {_unknown_column(unknown[0])}")


def _csv_records(file: Path) -> Iterator[_Record]:
    try:
        text = read_utf8(file).removeprefix("\ufeff")
    except ValueError as exc:
        raise DatasetError(str(exc)) from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None:
        raise DatasetError(f"{file}: the file is empty; the first line must be a header")
    _check_columns(reader.fieldnames, f"{file}:1")
    for record in reader:
        where = str(reader.line_num)
        if None in record:
            raise DatasetError(
                f"{file}:{where}: more cells than header columns; quote cells that contain commas"
            )
        if data := _cells(record, where, file):
            yield where, f"line-{where}", data


def _parquet_records(file: Path) -> Iterator[_Record]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(file)
    except Exception as exc:
        raise DatasetError(f"{file}: not a readable Parquet file ({exc})") from None
    _check_columns(table.column_names, str(file))
    for index, record in enumerate(table.to_pylist(), start=1):
        yield f"row {index}", f"row-{index}", _cells(record, f"row {index}", file)


def _jsonl_records(file: Path) -> Iterator[_Record]:
    """Blank and ``#`` lines skipped; in a file that is not all UTF-8, the lines before the first
    bad byte are read first (their errors come first), then that byte is named."""
    content = file.read_bytes()
    try:
        decoded, whole = content.decode("utf-8"), True
    except UnicodeDecodeError as exc:
        decoded, whole = content[: content.rfind(b"\n", 0, exc.start) + 1].decode("utf-8"), False
    for lineno, line in enumerate(decoded.split("\n"), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            # pydantic-core's parser: about twice as fast as json.loads on a row, and the same
            # values; what it refuses, json.loads parses or names (a lone surrogate escape, ...).
            data: Any = from_json(text)
        except ValueError:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"{file}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno}); each line "
                    "must be one JSON object"
                ) from None
        if not isinstance(data, dict):
            raise DatasetError(
                f"{file}:{lineno}: expected a JSON object with a 'query', got {type(data).__name__}"
            )
        yield str(lineno), f"line-{lineno}", data
    if not whole:
        try:
            decode_utf8(content, str(file))
        except ValueError as exc:
            raise DatasetError(str(exc)) from None


_READERS = {".jsonl": _jsonl_records, ".csv": _csv_records, ".parquet": _parquet_records}


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: str | Path) -> list[QueryRow]:
    """Write dataset rows as JSON Lines, checked: they must load as ``load_jsonl`` reads them.

    The rows go to a temporary file beside ``path``, which replaces ``path`` only once it loads,
    so a schedule never picks up a half-written or invalid dataset. Returns the loaded rows.

    Raises:
        DatasetError: for a ``path`` not named ``*.jsonl``, or rows that do not load (naming the
            row); ``path`` is left as it was.
    """
    target = Path(path)
    if target.suffix.lower() != ".jsonl":
        raise DatasetError(f"{target}: the dataset is written as JSON Lines; name it *.jsonl")
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        with tmp.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        try:
            loaded = load_jsonl(tmp)
        except DatasetError as exc:  # named as the file the user asked for
            raise DatasetError(str(exc).replace(str(tmp), str(target))) from None
    return loaded
