"""Every column of a run directory's tables, declared once: its name, type, meaning, where its
value comes from, how it is computed, which field it is read back into, and since which schema
version it exists.

The Arrow schemas (``evalpipe.artifacts.schema``), the rows the encoder builds and the writer
appends, the reader's records and docs/artifacts.md all derive from :data:`TABLES`. A column is
declared by its row as docs/artifacts.md lists it (``| `name` | kind[, not null] | meaning |``)
and, when it is not its source's attribute of its name, how it is computed (``_columns``);
adding one is a row here, the same row in docs/artifacts.md (a test compares them) and a bump of
:data:`SCHEMA_VERSION`.

Nothing here imports pyarrow: a worker process encodes its shard's rows with this module alone.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any, Literal, cast, get_args

from pydantic import BaseModel, TypeAdapter
from pydantic_core import from_json, to_json

from evalpipe.itemize import SplitAt
from evalpipe.items import ConversationSplit, ExpectedToolCall
from evalpipe.messages import Message, ToolDefinition
from evalpipe.results import Diagnostic, RubricScore
from evalpipe.tally import score_statuses
from evalpipe.transcripts import TargetRun, Transcript

__all__ = [
    "ITEMS",
    "RUNS",
    "SCHEMA_VERSION",
    "SCORES",
    "SPLIT_AT_PREFIX",
    "SUMMARY",
    "TABLES",
    "Batch",
    "Column",
    "Kind",
    "RunRecord",
    "RunStatus",
    "Source",
    "Table",
]

SCHEMA_VERSION = 4
"""The version of the run-directory layout this evalpipe writes, and the newest it reads.

Version 2 added ``run_name`` to every table, the calls' ``started_at``/``ended_at`` and the run's
``run_started_at``/``run_ended_at``; version 3 added ``suite`` and ``target_version`` to every
table and ``row_id``/``repetition`` to scores.parquet; version 4 added the calls' ``cost_usd`` to
runs.parquet (each column's ``since``)."""

SPLIT_AT_PREFIX = "at:"
"""items.parquet's ``split`` of a workflow agent's item: ``at:N``, the conversation cut after its
first N messages (what the agent received | what it produced)."""

Kind = Literal["string", "int64", "double", "bool", "timestamp[us, tz=UTC]"]
"""A column's Arrow type, by its name (``str(pyarrow type)``)."""

Source = Literal["run", "call", "item", "counted", "level", "result", "score", "row"]
"""Where a column's value comes from:

- ``run``: one value for the whole run (its name, suite, times), given to the writer;
- ``call``: a ``RunRecord`` (runs.parquet);
- ``item``: an ``EvalItem`` (items.parquet) with its result level;
- ``counted``: a running index the writer counts over the run (``item_index``);
- ``level``: one provider and agent's ``EvalResults`` (scores.parquet: the same on its rows);
- ``result``: an ``EvalItemResult`` (scores.parquet: the same on the item's rows);
- ``score``: an ``EvalScoreResult`` (scores.parquet: one per row; null on an item without scores);
- ``row``: a ``SummaryRow`` (summary.parquet).
"""


@dataclass(slots=True)
class Batch:
    """The source objects of a batch of rows, and the values several columns share (computed
    once per batch: a token_usage split into four columns)."""

    objects: Sequence[Any]
    """One per row (for ``level``: the one ``Level``)."""
    extra: Any = None
    """What the source's columns need besides the objects (the items' agents, the scores'
    items)."""
    columns: Mapping[str, Any] | None = None
    """The objects' attributes as columns by name, instead of the objects (the calls of
    ``RowEncoder.target_runs``: RunRecord's fields, ``call_fields``)."""
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def attr(self, name: str) -> list[Any]:
        """Each object's attribute ``name`` (a C-level getter mapped over them)."""
        if self.columns is not None:
            return list(self.columns[name])
        return list(map(operator.attrgetter(name), self.objects))

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()``, once per batch and key."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]


Getter = Callable[[Batch], Any]
"""How a column is computed: its values for a batch (a list, one per object; for ``level`` and
``run`` columns, the one value)."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table."""

    name: str
    """The column's name."""
    kind: Kind
    """Its Arrow type."""
    doc: str
    """Its meaning (the field's description in the file, and docs/artifacts.md's)."""
    source: Source
    """Where its value comes from."""
    get: Getter | None = None
    """How it is computed from its source; None: each object's attribute named by ``field``, else
    by the column's name (``level``: the one Level's)."""
    field: str | None = None
    """The record field it is read back into (``RunRecord``, ``EvalItemResult``,
    ``EvalScoreResult``, ``SummaryRow``); None: not read back (derived, or read by hand)."""
    decode: Callable[[Any], Any] | None = None
    """How the stored value becomes the field's (JSON parsed, ...); None: as stored."""
    nullable: bool = True
    """Whether the column may hold nulls."""
    since: int = 1
    """The schema version that added it (older files read it as null, ``run_name`` as the
    directory's name)."""

    def values(self, batch: Batch) -> Any:
        """The column's values of ``batch``, exactly those of its Arrow array."""
        if self.source == "level":
            return self.get(batch) if self.get else getattr(batch.objects[0], self.name)
        raw = self.get(batch) if self.get else batch.attr(self.field or self.name)
        return _CONVERT[self.kind, self.nullable](raw)


@dataclass(frozen=True, slots=True)
class Table:
    """One table: its name (the file is ``{name}.parquet``) and its columns in file order."""

    name: str
    columns: tuple[Column, ...]

    @property
    def file(self) -> str:
        """The table's file name."""
        return f"{self.name}.parquet"

    @property
    def names(self) -> list[str]:
        """Its column names, in order."""
        return [c.name for c in self.columns]

    def of(self, *sources: Source) -> list[Column]:
        """Its columns from these sources, in order."""
        return [c for c in self.columns if c.source in sources]

    def values(self, source: Source, batch: Batch) -> dict[str, Any]:
        """The values of its columns from ``source`` of ``batch``, by name."""
        return {c.name: c.values(batch) for c in self.of(source)}


# -- value conversions ---------------------------------------------------------------------------

_TOKEN_KEYS = ("input_tokens", "output_tokens", "total_tokens")
_NONE = type(None)
_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
_TOOLS: TypeAdapter[list[ToolDefinition]] = TypeAdapter(list[ToolDefinition])
_EXPECTED: TypeAdapter[list[ExpectedToolCall]] = TypeAdapter(list[ExpectedToolCall])


def json_text(value: Any) -> str:
    """``value`` as JSON text (pydantic-core's serializer: several times faster than json.dumps
    on the small dicts of every row)."""
    return to_json(value, fallback=json_default).decode()


def json_default(value: Any) -> Any:
    """What JSON cannot hold, as something it can."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def _number(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A number's conversion: None for None, a bool or what ``convert`` refuses."""

    def converted(value: Any) -> Any:
        if value is None or isinstance(value, bool):
            return None
        try:
            return convert(value)
        except (TypeError, ValueError):
            return None

    return converted


def _or_none(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else convert(value)


def _converter(
    kept: frozenset[type], convert: Callable[[Any], Any]
) -> Callable[[list[Any]], list[Any]]:
    """A column's converter: the list itself when every value's type is in ``kept`` (the common
    case, no copy), else ``convert`` of every value."""

    def converted(values: list[Any]) -> list[Any]:
        if kept.issuperset(map(type, values)):
            return values
        return [convert(v) for v in values]

    return converted


def all_null(values: Sequence[Any]) -> bool:
    """Every value is None (looking at the first one before the whole list)."""
    n = len(values)
    return n == 0 or (values[0] is None and values.count(None) == n)


def utcs(values: list[dt.datetime | None]) -> list[dt.datetime | None]:
    """Every timestamp in UTC (a naive one is taken as UTC; one in UTC already is kept)."""
    if values and values.count(None) == 0:
        zones = map(operator.attrgetter("tzinfo"), values)
        if all(map(operator.is_, zones, itertools.repeat(dt.UTC))):
            return values  # every one in UTC already (a call's stamps): kept, without a loop
    return [
        v
        if v is None or v.tzinfo is dt.UTC
        else v.replace(tzinfo=dt.UTC)
        if v.tzinfo is None
        else v.astimezone(dt.UTC)
        for v in values
    ]


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def micros(values: list[Any]) -> list[Any]:
    """A timestamp column as Arrow's ``timestamp("us", tz="UTC")`` holds it: each UTC value as
    whole microseconds since the epoch (exact), None kept. Integers cost a fraction of datetimes
    to pickle (a worker sends them) and to convert; a column holding anything but plain
    datetimes and None is returned as ``utcs`` returns it (converted by pyarrow)."""
    utc = utcs(values)
    types = set(map(type, utc))
    if not types <= {dt.datetime, _NONE}:
        return utc
    return [None if v is None else (v - _EPOCH) // _MICROSECOND for v in utc]


_CONVERT: dict[tuple[str, bool], Callable[[list[Any]], list[Any]]] = {
    ("timestamp[us, tz=UTC]", True): micros,
    ("timestamp[us, tz=UTC]", False): micros,
}
"""Each kind's conversion of raw values to those of its Arrow array."""
for _kind, _type, _convert in (
    ("string", str, _or_none(str)),
    ("int64", int, _number(int)),
    ("double", float, _number(float)),
    ("bool", bool, _or_none(bool)),
):
    _CONVERT[_kind, True] = _converter(frozenset({_type, _NONE}), _convert)
    _CONVERT[_kind, False] = _converter(frozenset({_type}), _type)


# -- getters ------------------------------------------------------------------------------------


def _each(name: str, convert: Callable[[Any], Any]) -> Getter:
    """``convert`` of each object's attribute ``name`` (null kept; the attribute read once per
    batch)."""

    def get(batch: Batch) -> list[Any]:
        values: list[Any] = batch.memo(name, lambda: batch.attr(name))
        return values if all_null(values) else [None if v is None else convert(v) for v in values]

    return get


def _meta(key: str) -> Getter:
    """``metadata[key]`` of each object (null without metadata)."""
    return _each("metadata", lambda metadata: metadata.get(key))


def _usage(name: str) -> Getter:
    """A RunUsage field of each item's usage (null without usage)."""
    return _each("usage", operator.attrgetter(name))


def _notes(name: str) -> Getter:
    """The JSON list of each score's dataclass notes (diagnostics, dimensions)."""
    return _each(name, lambda notes: json_text([asdict(x) for x in notes]))


def split_tokens(
    usage: Mapping[str, Any] | None,
) -> tuple[int | None, int | None, int | None, str | None]:
    """A token_usage dict as (input, output, total, JSON of its other keys). The JSON is also
    written when there are no standard integer keys at all, so ``{}`` is told from None."""
    if usage is None:
        return None, None, None, None
    standard = {
        k: v for k in _TOKEN_KEYS if isinstance(v := usage.get(k), int) and not isinstance(v, bool)
    }
    other = {k: v for k, v in usage.items() if k not in standard}
    return (
        standard.get("input_tokens"),
        standard.get("output_tokens"),
        standard.get("total_tokens"),
        json_text(other) if other or not standard else None,
    )


def _tokens(part: int) -> Getter:
    """Part ``part`` of ``split_tokens`` of each object's token_usage (input, output, total,
    other), split once per batch."""

    def split(batch: Batch) -> list[list[Any]]:
        usages = batch.attr("token_usage")
        if all_null(usages):
            return [usages] * 4
        return [list(c) for c in zip(*map(split_tokens, usages), strict=True)]

    return lambda batch: batch.memo("tokens", lambda: split(batch))[part]


def _query_response(part: int) -> Getter:
    def get(batch: Batch) -> list[str]:
        pairs = batch.memo("qr", lambda: [i.query_and_response() for i in batch.objects])
        return list(map(operator.itemgetter(part), pairs))

    return get


def split_name(strategy: Any) -> str | None:
    """How an item's split strategy is stored: the member's value, ``at:N``, a custom splitter's
    ``module:name``, or None."""
    if strategy is None:
        return None
    if isinstance(strategy, ConversationSplit):
        return strategy.value
    if isinstance(strategy, SplitAt):
        return f"{SPLIT_AT_PREFIX}{strategy.index}"
    module = getattr(strategy, "__module__", None)
    name = getattr(strategy, "__qualname__", None) or type(strategy).__qualname__
    return f"{module}:{name}" if module else str(name)


def split_of(name: str | None) -> Any:
    """A stored split back: a ConversationSplit, a workflow agent's cut (``at:N``), else None (a
    custom splitter, a callable, is not imported back from a data file)."""
    if name is None:
        return None
    cut = name.removeprefix(SPLIT_AT_PREFIX)
    if cut != name and cut.isdigit():
        return SplitAt(int(cut))
    return next((split for split in ConversationSplit if split.value == name), None)


def _expected(batch: Batch) -> list[str | None]:
    """The JSON of each item's expected tool calls, once per distinct list of call objects (a
    row's repetitions share them); keyed by the objects' ids, which stay theirs while the items
    hold them (this call)."""
    out: list[str | None] = []
    done: dict[tuple[int, ...], str] = {}
    for calls in batch.attr("expected_tool_calls"):
        if calls is None:
            out.append(None)
            continue
        key = tuple(map(id, calls))
        text = done.get(key)
        if text is None:
            text = done[key] = _EXPECTED.dump_json(calls, fallback=str).decode()
        out.append(text)
    return out


@functools.lru_cache(maxsize=4096)
def _reason_json(reason: str) -> str:
    """``json_text({"reason": reason})``, once per reason: local checks repeat a few reasons on
    every item."""
    return json_text({"reason": reason})


def _sample_json(sample: Any) -> str:
    if type(sample) is dict and len(sample) == 1 and type(reason := sample.get("reason")) is str:
        return _reason_json(reason)
    return json_text(sample)


def json_object(text: str | None) -> Any:
    """A JSON object back (one per item: the hot parse of ``load_run``): pydantic-core's parser
    gives the values ``json.loads`` gives in about half the time; what it refuses, ``json.loads``
    reads or names."""
    if text is None:
        return None
    try:
        return from_json(text)
    except ValueError:
        return json.loads(text)


_SCALARS = (str, int, float, bool, type(None))
_PARSED: dict[str, dict[str, Any]] = {}
"""Flat JSON objects parsed before, by text: a local check's ``{"reason": ...}`` repeats."""


def _sample(text: str | None) -> Any:
    """A sample's JSON back, each distinct flat object parsed once (every row gets a copy)."""
    if text is None:
        return None
    flat = _PARSED.get(text)
    if flat is not None:
        return dict(flat)
    value = json.loads(text)
    if isinstance(value, dict) and all(isinstance(v, _SCALARS) for v in value.values()):
        if len(_PARSED) >= 4096:
            _PARSED.clear()
        _PARSED[text] = value
        return dict(value)
    return value


def _notes_of(cls: type) -> Callable[[str | None], list[Any] | None]:
    """A JSON list of dataclass notes back (``_notes``' inverse)."""
    return lambda text: None if text is None else [cls(**d) for d in json.loads(text)]


# -- the tables ----------------------------------------------------------------------------------

_ROW = re.compile(r"\| `(\w+)` \| (timestamp\[[^\]]*\]|\w+)(, not null)? \| (.*) \|")
"""A column's row, as docs/artifacts.md lists it: name, kind (``, not null``), meaning."""


_RECORDS: tuple[Source, ...] = ("call", "item", "result", "score", "row")
"""The sources that are records read back (RunRecord, EvalItem, EvalItemResult, EvalScoreResult,
SummaryRow)."""


def _columns(source: Source, rows: str, **specs: dict[str, Any]) -> list[Column]:
    """Columns from ``source`` (in order) declared by their rows as docs/artifacts.md lists them
    (``| `name` | kind[, not null] | meaning |``, a ``|`` in the meaning escaped as ``\\|``).

    A column's ``specs`` entry holds the rest of its ``Column`` fields (``get``, ``field``,
    ``decode``, ``source``, ``since``); without a ``get`` of its own, a column of a record
    (``_RECORDS``) is read back into the field of its name.

    Raises:
        ValueError: for a row that is not a column's or of an unknown kind, or a spec of no row.
    """
    columns = []
    for line in rows.strip().splitlines():
        match = _ROW.fullmatch(line.strip())
        if match is None:
            raise ValueError(f"not a column row: {line!r}")
        name, kind, required, doc = match.groups()
        if kind not in get_args(Kind):
            raise ValueError(f"unknown kind {kind!r} (known: {get_args(Kind)}) in {line!r}")
        spec = specs.pop(name, {})
        options: dict[str, Any] = {"source": source, "nullable": required is None} | spec
        if options["source"] in _RECORDS and "get" not in spec:
            options.setdefault("field", name)
        columns.append(Column(name, cast(Kind, kind), doc.replace("\\|", "|"), **options))
    if specs:
        raise ValueError(f"no row for the column(s) {sorted(specs)}")
    return columns


RUN_NAME = "run_name"
"""The column every table starts with: the run directory's name, the same on each of its rows."""

_RUN_COLUMNS = _columns(
    "run",
    """
| `run_name` | string, not null | The run: its run directory's name (unique per run; the same on every row and table of the run, and manifest.json's run_name). Stack runs on it. |
| `suite` | string | The suite the run ran (manifest.json's suite name); null for a run without a suite. |
| `target_version` | string | The suite's target_version (a model name, a git revision); null without a suite. |
""",
    run_name=dict(since=2),
    suite=dict(since=3),
    target_version=dict(since=3),
)

RUNS = Table(
    "runs",
    (
        *_RUN_COLUMNS,
        *_columns(
            "call",
            """
| `run_id` | string, not null | Stable id of the target call (the caller's content hash). |
| `row_id` | string | Id of the dataset row the call answered. |
| `query_index` | int64 | Position of the query in the query set. |
| `repetition` | int64 | Which repetition of the query (0-based). |
| `target` | string | Identity of the target that was called (agent or workflow). |
| `status` | string, not null | "ok" or "error". |
| `error_code` | string | Why the call failed (e.g. "AgentError"); null when ok. |
| `error_message` | string | The failure, as text; null when ok. |
| `latency_s` | double | Wall-clock seconds of the call. |
| `started_at` | timestamp[us, tz=UTC] | When the call started (UTC); null for a recorded row (nothing called). |
| `ended_at` | timestamp[us, tz=UTC] | When the call ended (UTC); null for a recorded row. |
| `input_tokens` | int64 | Prompt tokens, when reported. |
| `output_tokens` | int64 | Completion tokens, when reported. |
| `total_tokens` | int64 | Total tokens, when reported. |
| `cost_usd` | double | The call's cost in dollars at the suite's prices (its tokens by the target model's price); null without a price, for a recorded row or without reported tokens. |
| `transcript` | string | JSON of the call's transcript (a TargetRun or a WorkflowRun). |
| `cached` | bool, not null | The call was reused from the run journal, not made again. |
""",
            started_at=dict(since=2),
            ended_at=dict(since=2),
            cost_usd=dict(since=4),
        ),
    ),
)

ITEMS = Table(
    "items",
    (
        *_RUN_COLUMNS,
        *_columns(
            "item",
            r"""
| `agent` | string, not null | Result level: "overall" for the whole target, else the agent (executor) name. |
| `item_index` | int64, not null | Position of the item among this agent's items in the run. |
| `item_id` | string | EvalItem.item_id. |
| `item_agent` | string | EvalItem.agent as set on the item (null for a single agent's items). |
| `run_id` | string | The target call that produced the item (metadata["run_id"]). |
| `row_id` | string | The dataset row (metadata["row_id"]). |
| `query_index` | int64 | EvalItem.query_index. |
| `repetition` | int64 | EvalItem.repetition. |
| `query` | string | The query string under the item's split. |
| `response` | string | The response string under the item's split. |
| `split` | string | The item's split strategy: "last_turn", "full", "at:N" (a workflow agent's item: its conversation cut after the first N messages, what the agent received \| what it produced), a custom splitter's "module:name", or null for the default (last_turn). |
| `conversation` | string | JSON list of the conversation's messages. |
| `expected_output` | string | The reference answer. |
| `context` | string | Grounding context. |
| `expected_tool_calls` | string | JSON list of the expected tool calls (null: none given). |
| `tool_definitions` | string | JSON list of the tool definitions (null: not known). |
| `error_code` | string | Why the item cannot be evaluated (the target call failed). |
| `error_message` | string | What went wrong in the target call. |
| `has_usage` | bool, not null | EvalItem.usage was set (it can be set with every value null). |
| `input_tokens` | int64 | Prompt tokens of the target call. |
| `output_tokens` | int64 | Completion tokens of the target call. |
| `total_tokens` | int64 | Total tokens of the target call. |
| `latency_s` | double | Wall-clock seconds of the target call. |
| `metadata` | string, not null | JSON object of EvalItem.metadata. |
""",
            agent=dict(get=lambda batch: batch.extra),
            item_index=dict(source="counted"),
            item_agent=dict(field="agent"),
            run_id=dict(get=_meta("run_id")),
            row_id=dict(get=_meta("row_id")),
            query=dict(get=_query_response(0)),
            response=dict(get=_query_response(1)),
            split=dict(
                get=_each("split_strategy", split_name), field="split_strategy", decode=split_of
            ),
            conversation=dict(
                get=_each("conversation", lambda c: _MESSAGES.dump_json(c, fallback=str).decode()),
                field="conversation",
                decode=lambda text: _MESSAGES.validate_json(text) if text else [],
            ),
            expected_tool_calls=dict(
                get=_expected,
                field="expected_tool_calls",
                decode=_or_none(_EXPECTED.validate_json),
            ),
            tool_definitions=dict(
                get=_each("tools", lambda tools: _TOOLS.dump_json(tools).decode()),
                field="tools",
                decode=_or_none(_TOOLS.validate_json),
            ),
            has_usage=dict(
                get=lambda batch: [
                    u is not None for u in batch.memo("usage", lambda: batch.attr("usage"))
                ]
            ),
            input_tokens=dict(get=_usage("input_tokens")),
            output_tokens=dict(get=_usage("output_tokens")),
            total_tokens=dict(get=_usage("total_tokens")),
            latency_s=dict(get=_usage("latency_seconds")),
            metadata=dict(
                get=lambda batch: list(map(json_text, batch.attr("metadata"))),
                field="metadata",
                decode=json_object,
            ),
        ),
    ),
)

SCORES = Table(
    "scores",
    (
        *_RUN_COLUMNS,
        *_columns(
            "level",
            """
| `provider` | string, not null | The evaluator provider ("Local", "Microsoft Foundry", ...). |
| `provider_index` | int64, not null | Position of the provider in the run's provider list. |
| `eval_run_id` | string | EvalResults.run_id of this provider and agent (local providers: the eval name; in suite runs it always ends with " ({provider})", however many providers the suite has). |
| `agent` | string, not null | "overall" or the agent (executor) name. |
| `item_index` | int64, not null | Position of the item in this provider and agent's results. |
""",
            eval_run_id=dict(get=lambda batch: batch.objects[0].result.run_id),
            item_index=dict(source="counted"),
        ),
        *_columns(
            "result",
            """
| `item_id` | string, not null | EvalItemResult.item_id. |
| `row_id` | string | The dataset row the item answered (its metadata["row_id"]). |
| `repetition` | int64 | Which repetition of the row (0-based; its metadata["repetition"]). |
| `item_status` | string, not null | "pass", "fail", "error" or "errored": the item's verdict. |
| `item_error_code` | string | Why the item could not be evaluated. |
| `item_error_message` | string | What went wrong with the item. |
| `response_id` | string | The evaluated response's id, when the provider reports one. |
| `input_text` | string | The query text the provider saw. |
| `output_text` | string | The response text the provider saw. |
| `item_input_tokens` | int64 | Tokens the item's evaluation used (input). |
| `item_output_tokens` | int64 | Tokens the item's evaluation used (output). |
| `item_total_tokens` | int64 | Tokens the item's evaluation used (total). |
| `item_token_usage_other` | string | JSON of the item's other token_usage keys ({} for an empty dict). |
| `item_metadata` | string | JSON object of EvalItemResult.metadata. |
""",
            row_id=dict(get=_meta("row_id"), since=3),
            repetition=dict(get=_meta("repetition"), since=3),
            item_status=dict(field="status"),
            item_error_code=dict(field="error_code"),
            item_error_message=dict(field="error_message"),
            item_input_tokens=dict(get=_tokens(0)),
            item_output_tokens=dict(get=_tokens(1)),
            item_total_tokens=dict(get=_tokens(2)),
            item_token_usage_other=dict(get=_tokens(3)),
            item_metadata=dict(
                get=_each("metadata", json_text), field="metadata", decode=json_object
            ),
        ),
        *_columns(
            "score",
            """
| `score_index` | int64 | Position of the metric in the item's scores; null on the one row of an item with no metrics. |
| `metric` | string | The metric (check) name; null on the row of an item with no metrics. |
| `evaluator` | string | The evaluator that produced the metric, when it differs from the metric. |
| `score` | double | The score (null when the metric errored). |
| `passed` | bool | The metric's verdict, when it has one. |
| `label` | string | A categorical label. |
| `rating` | string | A judge's rating. |
| `reason` | string | Why the metric passed or failed. |
| `threshold` | double | The pass threshold that decided passed. |
| `status` | string | "pass", "fail", "error" or "not_applicable" (no verdict and no error). |
| `error_code` | string | Why the metric could not be computed. |
| `error_message` | string | The metric's error, as text. |
| `diagnostics` | string | JSON list of {severity, message} notes. |
| `dimensions` | string | JSON list of rubric dimensions. |
| `sample` | string | JSON object of provider-specific detail. |
| `input_tokens` | int64 | Tokens spent on the metric (input). |
| `output_tokens` | int64 | Tokens spent on the metric (output). |
| `total_tokens` | int64 | Tokens spent on the metric (total). |
| `token_usage_other` | string | JSON of the metric's other token_usage keys ({} for an empty dict). |
| `latency_s` | double | Seconds spent computing the metric. |
""",
            score_index=dict(
                get=lambda batch: [k for item in batch.extra for k in range(len(item.scores))]
            ),
            metric=dict(field="name"),
            status=dict(get=lambda batch: score_statuses(batch.objects)),
            diagnostics=dict(
                get=_notes("diagnostics"), field="diagnostics", decode=_notes_of(Diagnostic)
            ),
            dimensions=dict(
                get=_notes("dimensions"), field="dimensions", decode=_notes_of(RubricScore)
            ),
            sample=dict(get=_each("sample", _sample_json), field="sample", decode=_sample),
            input_tokens=dict(get=_tokens(0)),
            output_tokens=dict(get=_tokens(1)),
            total_tokens=dict(get=_tokens(2)),
            token_usage_other=dict(get=_tokens(3)),
        ),
    ),
)

SUMMARY = Table(
    "summary",
    (
        *_RUN_COLUMNS,
        *_columns(
            "row",
            """
| `kind` | string, not null | "result": one row per provider and agent (item counts and EvalResults fields); "metric": one per provider, agent and metric. |
| `provider` | string, not null | The evaluator provider. |
| `provider_index` | int64, not null | Position of the provider in the run's provider list. |
| `agent` | string, not null | "overall" or the agent name. |
| `agent_index` | int64, not null | 0 for overall, then the agents in sub_results order. |
| `metric` | string | The metric; null on result rows. |
| `n` | int64, not null | Result rows: items. Metric rows: items scored on the metric, plus items that could not be evaluated at all. |
| `passed` | int64, not null | How many passed. |
| `failed` | int64, not null | How many failed. |
| `errored` | int64, not null | How many could not be evaluated (metric rows: errored metrics plus items with no metrics because they errored). |
| `not_applicable` | int64, not null | Metric rows: scores with no verdict and no error (0 on result rows). |
| `pass_rate_denominator` | int64, not null | passed + failed: errored and not_applicable are left out. |
| `pass_rate` | double | passed / pass_rate_denominator; null when the denominator is 0. |
| `score_count` | int64, not null | Metric rows: non-null scores (0 on result rows). |
| `score_mean` | double | Mean of the non-null scores. |
| `score_min` | double | Smallest score. |
| `score_max` | double | Largest score. |
| `score_std` | double | Sample standard deviation (n-1) of the scores; null below two scores. |
| `status` | string | Result rows: EvalResults.status ("partial" when batches disagreed). |
| `eval_id` | string | Result rows: EvalResults.eval_id (of the first batch). |
| `eval_run_id` | string | Result rows: EvalResults.run_id (of the first batch). |
| `report_url` | string | Result rows: EvalResults.report_url (of the first batch). |
| `error` | string | Result rows: EvalResults.error, the batches' errors joined with "; ". |
| `result_counts` | string | Result rows: JSON of EvalResults.result_counts, summed over batches. |
| `per_evaluator` | string | Result rows: JSON of EvalResults.per_evaluator, summed over batches. |
""",
        ),
        *_columns(
            "run",
            """
| `run_started_at` | timestamp[us, tz=UTC] | When the run started (UTC; manifest.json's started_at), every row. |
| `run_ended_at` | timestamp[us, tz=UTC] | When the run's tables were written (UTC; manifest.json's ended_at). |
""",
            run_started_at=dict(since=2),
            run_ended_at=dict(since=2),
        ),
    ),
)

TABLES: dict[str, Table] = {t.name: t for t in (RUNS, ITEMS, SCORES, SUMMARY)}
"""Every table by name. The writer, the readers and the schemas look a table up here when they
use it, so a column added to a table here is in all of them."""


# -- runs.parquet's record ----------------------------------------------------------------------

RunStatus = Literal["ok", "error"]
"""``ok``: the target call returned a response; ``error``: it failed (see error_code)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """One target call, as a row of ``runs.parquet``: each field holds the column of its name
    (described in ``RUNS``)."""

    run_id: str
    query_index: int | None = None
    repetition: int | None = None
    row_id: str | None = None
    target: str | None = None
    status: RunStatus = "ok"
    error_code: str | None = None
    error_message: str | None = None
    latency_s: float | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None = None
    transcript: str | None = None
    cached: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ValueError(f"RunRecord.run_id must be a non-empty string, got {self.run_id!r}")
        if self.status not in ("ok", "error"):
            raise ValueError(
                f"RunRecord {self.run_id}: status must be 'ok' or 'error', got {self.status!r}"
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RunRecord:
        """A record from a dict with the column names as keys.

        Raises:
            ValueError: naming the unknown keys.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"RunRecord: unknown field(s) {unknown}; the fields are {sorted(known)}"
            )
        return cls(**dict(data))

    @classmethod
    def from_target_run(
        cls,
        run: Transcript,
        *,
        run_id: str,
        target: str | None = None,
        row_id: str | None = None,
        cached: bool = False,
        transcript: str | None = None,
        cost_usd: float | None = None,
    ) -> RunRecord:
        """The record of one call (a TargetRun or a WorkflowRun), its transcript being the run's
        JSON (``transcript``, when the caller serialized it already), and its cost."""
        text = transcript if transcript is not None else run.model_dump_json(fallback=str)
        fields = call_fields([run], [run_id], [row_id], [text], [cached], target, [cost_usd])
        return cls(**{name: values[0] for name, values in fields.items()})

    def target_run(self) -> TargetRun:
        """The transcript as a TargetRun (for records of agent calls).

        Raises:
            ValueError: when the record has no transcript or it is not a TargetRun's JSON.
        """
        if self.transcript is None:
            raise ValueError(f"run {self.run_id} has no transcript")
        return TargetRun.model_validate_json(self.transcript)


def call_fields(
    runs: Sequence[Transcript],
    run_ids: Sequence[str],
    row_ids: Sequence[str | None],
    transcripts: Sequence[str | None],
    cached: Sequence[bool],
    target: str | None = None,
    costs: Sequence[float | None] | None = None,
) -> dict[str, list[Any]]:
    """The RunRecord fields of target calls (TargetRuns or WorkflowRuns), one list per field.

    Raises:
        ValueError: for a run_id that is not a non-empty string, or sequences of different
            lengths.
    """
    n = len(runs)
    if not len(run_ids) == len(row_ids) == len(transcripts) == len(cached) == n:
        raise ValueError(
            f"add_target_runs: {n} runs but {len(run_ids)} run_ids, {len(row_ids)} row_ids, "
            f"{len(transcripts)} transcripts and {len(cached)} cached flags"
        )
    for run_id in run_ids:
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"RunRecord.run_id must be a non-empty string, got {run_id!r}")
    usages = [run.usage for run in runs]
    codes = [run.error_code for run in runs]
    return {
        "run_id": list(run_ids),
        "query_index": [run.query_index for run in runs],
        "repetition": [run.repetition for run in runs],
        "row_id": list(row_ids),
        "target": [target] * n,
        "status": ["ok" if code is None else "error" for code in codes],
        "error_code": codes,
        "error_message": [run.error_message for run in runs],
        "latency_s": [u.latency_seconds for u in usages],
        "started_at": [run.started_at for run in runs],
        "ended_at": [run.ended_at for run in runs],
        "input_tokens": [u.input_tokens for u in usages],
        "output_tokens": [u.output_tokens for u in usages],
        "total_tokens": [u.total_tokens for u in usages],
        "cost_usd": list(costs) if costs is not None else [None] * n,
        "transcript": list(transcripts),
        "cached": [bool(c) for c in cached],
    }
