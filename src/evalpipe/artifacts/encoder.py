"""RowEncoder: a batch's rows of runs.parquet, items.parquet and scores.parquet as plain Python
columns, exactly the values the writer turns into Arrow arrays and appends.

Nothing here imports pyarrow (nor numpy or pandas, which it brings): a worker process of
``task_runner: processes`` encodes its shards with this module alone (~100 MiB less per worker)
and sends the columns; the flow's ``RunWriter`` converts them (``RunWriter.add_encoded``), as it
converts the ones it encodes itself.
"""

from __future__ import annotations

import datetime as dt
import itertools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_json

from evalpipe.itemize import SplitAt
from evalpipe.items import ConversationSplit, EvalItem, ExpectedToolCall
from evalpipe.messages import Message, ToolDefinition
from evalpipe.results import EvalItemResult, EvalResults, EvalScoreResult
from evalpipe.tally import FAIL, PASS, score_status
from evalpipe.transcripts import Transcript

if TYPE_CHECKING:
    from evalpipe.artifacts.schema import RunRecord

__all__ = [
    "SPLIT_AT_PREFIX",
    "EncodedBatch",
    "EncodedItems",
    "EncodedRows",
    "EncodedScores",
    "RowEncoder",
]

SPLIT_AT_PREFIX = "at:"
"""items.parquet's ``split`` of a workflow agent's item: ``at:N``, the conversation cut after its
first N messages (what the agent received | what it produced)."""

_TOKEN_KEYS = ("input_tokens", "output_tokens", "total_tokens")

_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
_TOOLS: TypeAdapter[list[ToolDefinition]] = TypeAdapter(list[ToolDefinition])
_EXPECTED: TypeAdapter[list[ExpectedToolCall]] = TypeAdapter(list[ExpectedToolCall])


def _json(value: Any) -> str:
    # pydantic-core's serializer: several times faster than json.dumps on the small dicts of every row.
    return to_json(value, fallback=_json_default).decode()


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def _opt_json(value: Any) -> str | None:
    return None if value is None else _json(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _opt_int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _opt_float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _opt_bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _split_tokens(
    usage: Mapping[str, Any] | None,
) -> tuple[int | None, int | None, int | None, str | None]:
    """A token_usage dict as (input, output, total, JSON of its other keys).

    The JSON is also written when there are no standard integer keys at all, so that ``{}`` is
    told apart from None on the way back.
    """
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
        _json(other) if other or not standard else None,
    )


def _split_name(strategy: Any) -> str | None:
    """How an item's split strategy is stored: the member's value, a custom splitter's name, or None."""
    if strategy is None:
        return None
    if isinstance(strategy, ConversationSplit):
        return strategy.value
    if isinstance(strategy, SplitAt):
        return f"{SPLIT_AT_PREFIX}{strategy.index}"
    module = getattr(strategy, "__module__", None)
    name = getattr(strategy, "__qualname__", None) or type(strategy).__qualname__
    return f"{module}:{name}" if module else str(name)


def _column(
    kept: frozenset[type], convert: Callable[[Any], Any]
) -> Callable[[list[Any]], list[Any]]:
    """A column's converter: the list itself when every value's type is in ``kept`` (the common
    case, no copy), else ``convert`` of every value."""

    def converted(values: list[Any]) -> list[Any]:
        if kept.issuperset(map(type, values)):
            return values
        return [convert(v) for v in values]

    return converted


_NONE = type(None)
_strs = _column(frozenset({str, _NONE}), lambda v: None if v is None else str(v))
"""``_opt_str`` of every value."""
_texts = _column(frozenset({str}), str)
"""``str`` of every value (a non-null column)."""
_ints = _column(frozenset({int, _NONE}), _opt_int)
"""``_opt_int`` of every value."""
_floats = _column(frozenset({float, _NONE}), _opt_float)
"""``_opt_float`` of every value."""
_bools = _column(frozenset({bool, _NONE}), _opt_bool)
"""``_opt_bool`` of every value."""


def _jsons(values: list[Any]) -> list[str | None]:
    """``_opt_json`` of every value."""
    return [None if v is None else _json(v) for v in values]


def _token_columns(usages: list[Any]) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """``_split_tokens`` of every token_usage, as four columns."""
    n = len(usages)
    if usages.count(None) == n:
        nulls: list[Any] = [None] * n
        return nulls, nulls, nulls, nulls
    split = [_split_tokens(u) for u in usages]
    ins, outs, totals, others = (list(c) for c in zip(*split, strict=True))
    return ins, outs, totals, others


def _columns(getters: Sequence[Callable[[Any], Any]], objects: Sequence[Any]) -> list[list[Any]]:
    """``[[getter(o) for o in objects] for getter in getters]``, each column by a C-level getter
    mapped over the objects (no bytecode per value)."""
    return [list(map(getter, objects)) for getter in getters]


def _all_of(values: Sequence[Any], type_: type) -> bool:
    """Every value is exactly of ``type_`` (no subclass)."""
    return list(map(type, values)).count(type_) == len(values)


def _all_null(values: Sequence[Any]) -> bool:
    """Every value is None (``values.count(None) == len(values)``, looking at the first one
    before the whole list)."""
    n = len(values)
    return n == 0 or (values[0] is None and values.count(None) == n)


def _pairs(pairs: list[tuple[Any, Any]]) -> tuple[list[Any], list[Any]]:
    """A list of pairs as two lists."""
    return list(map(operator.itemgetter(0), pairs)), list(map(operator.itemgetter(1), pairs))


def _add3(a: int, b: int, c: int) -> int:
    return a + b + c


_ITEM_FIELDS = tuple(
    map(
        operator.attrgetter,
        (
            "item_id",
            "agent",
            "query_index",
            "repetition",
            "metadata",
            "usage",
            "split_strategy",
            "expected_tool_calls",
            "tools",
            "expected_output",
            "context",
            "error_code",
            "error_message",
        ),
    )
)
"""The attributes of an EvalItem that items.parquet's rows take."""
_item_id = operator.attrgetter("item_id")
_ITEM_RESULT_FIELDS = tuple(
    map(
        operator.attrgetter,
        (
            "item_id",
            "status",
            "error_code",
            "error_message",
            "response_id",
            "input_text",
            "output_text",
            "token_usage",
            "metadata",
            "scores",
        ),
    )
)
"""The attributes of an EvalItemResult that scores.parquet's rows take."""
_SCORE_FIELDS = tuple(
    map(
        operator.attrgetter,
        (
            "name",
            "evaluator",
            "score",
            "passed",
            "label",
            "rating",
            "reason",
            "threshold",
            "error_code",
            "error_message",
            "diagnostics",
            "dimensions",
            "sample",
            "token_usage",
            "latency_s",
        ),
    )
)
"""The attributes of an EvalScoreResult that scores.parquet's rows take."""
_RUN_FIELDS = tuple(
    map(
        operator.attrgetter,
        (
            "query_index",
            "repetition",
            "error_code",
            "error_message",
            "started_at",
            "ended_at",
            "usage",
        ),
    )
)
"""The attributes of a TargetRun (or WorkflowRun) that runs.parquet's rows take."""
_USAGE_FIELDS = tuple(
    map(
        operator.attrgetter,
        ("latency_seconds", "input_tokens", "output_tokens", "total_tokens"),
    )
)
"""The attributes of a RunUsage that runs.parquet's rows take."""


@dataclass(slots=True)
class EncodedRows:
    """Rows of one table as plain columns (one list of values per varying column, in schema
    order: exactly the values of its Arrow array; None for a column counted when appended) and
    each row's text size: what one ``_Sink.extend`` takes once converted."""

    columns: list[list[Any] | None]
    sizes: list[int]


@dataclass(slots=True)
class EncodedItems(EncodedRows):
    """items.parquet's rows of a batch, deduplicated within the batch; the ``index`` column is
    None (counted when appended) and the rows' agents and item ids say which rows an earlier
    batch wrote already."""

    agents: list[str]
    item_ids: list[str | None]


@dataclass(slots=True)
class EncodedScores:
    """scores.parquet's rows of one result level, ``items`` items: its first four columns are
    one value on every row (``provider``, ``provider_index``, ``run_id``, ``agent``);
    ``item_index`` is counted per provider and agent when appended; ``item_columns`` (the
    item's, from ``item_id`` to ``metadata``) hold one value per item, row ``r`` taking item
    ``where[r]`` (None: one row each); ``columns`` (``score_index`` onwards) one value per row."""

    provider: str
    provider_index: int
    run_id: str | None
    agent: str
    item_columns: list[list[Any]]
    columns: list[list[Any]]
    sizes: list[int]
    items: int
    where: list[int] | None


@dataclass(slots=True)
class EncodedBatch:
    """A batch's rows of runs, items and scores, built without files (``RowEncoder``), to be
    appended by ``RunWriter.add_encoded``: rows whose values depend on earlier batches (the
    running indexes, item ids already written) are completed there."""

    runs: EncodedRows | None = None
    items: EncodedItems | None = None
    scores: list[EncodedScores] = field(default_factory=list)


class RowEncoder:
    """Builds a batch's rows of runs.parquet, items.parquet and scores.parquet as plain columns,
    exactly the values ``RunWriter`` writes, without a file, a lock or pyarrow: a worker process
    encodes its shard, the writer of the run converts and appends it (``RunWriter.add_encoded``).
    ``RunWriter`` encodes every batch with one too."""

    def records(self, records: Iterable[RunRecord | Mapping[str, Any]]) -> EncodedRows | None:
        """runs.parquet's rows of RunRecords (or their dicts); None for none.

        Raises:
            ValueError: for a dict with unknown keys or a record with a bad status.
        """
        from evalpipe.artifacts.schema import RunRecord  # lazy: the schemas import pyarrow

        rs = [raw if isinstance(raw, RunRecord) else RunRecord.from_mapping(raw) for raw in records]
        if not rs:
            return None
        return self._runs(
            [r.run_id for r in rs],
            [r.row_id for r in rs],
            [r.query_index for r in rs],
            [r.repetition for r in rs],
            [r.target for r in rs],
            [r.status for r in rs],
            [r.error_code for r in rs],
            [r.error_message for r in rs],
            [r.latency_s for r in rs],
            [r.started_at for r in rs],
            [r.ended_at for r in rs],
            [r.input_tokens for r in rs],
            [r.output_tokens for r in rs],
            [r.total_tokens for r in rs],
            [r.transcript for r in rs],
            [bool(r.cached) for r in rs],
        )

    def target_runs(
        self,
        runs: Sequence[Transcript],
        *,
        run_ids: Sequence[str],
        row_ids: Sequence[str | None],
        transcripts: Sequence[str],
        cached: Sequence[bool],
        target: str | None = None,
    ) -> EncodedRows | None:
        """runs.parquet's rows of target calls (see ``RunWriter.add_target_runs``); None for none.

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
        if not (_all_of(run_ids, str) and "" not in run_ids):
            for run_id in run_ids:
                if not isinstance(run_id, str) or not run_id:
                    raise ValueError(f"RunRecord.run_id must be a non-empty string, got {run_id!r}")
        if not n:
            return None
        query_indexes, repetitions, error_codes, error_messages, started, ended, usages = _columns(
            _RUN_FIELDS, runs
        )
        latencies, input_tokens, output_tokens, total_tokens = _columns(_USAGE_FIELDS, usages)
        encoded = self._runs(
            list(run_ids),
            list(row_ids),
            query_indexes,
            repetitions,
            [target] * n,
            ["ok"] * n
            if _all_null(error_codes)
            else ["ok" if code is None else "error" for code in error_codes],
            error_codes,
            error_messages,
            latencies,
            started,
            ended,
            input_tokens,
            output_tokens,
            total_tokens,
            list(transcripts),
            list(cached) if _all_of(cached, bool) else [bool(c) for c in cached],
        )
        return encoded

    def _runs(
        self,
        run_ids: list[str],
        row_ids: list[Any],
        query_indexes: list[Any],
        repetitions: list[Any],
        targets: list[Any],
        statuses: list[str],
        error_codes: list[str | None],
        error_messages: list[str | None],
        latencies: list[Any],
        started: list[dt.datetime | None],
        ended: list[dt.datetime | None],
        input_tokens: list[Any],
        output_tokens: list[Any],
        total_tokens: list[Any],
        transcripts: list[str | None],
        cached: list[bool],
    ) -> EncodedRows:
        """runs.parquet's rows, one list per column."""
        columns: list[list[Any] | None] = [
            run_ids,
            _strs(row_ids),
            _ints(query_indexes),
            _ints(repetitions),
            _strs(targets),
            statuses,
            error_codes,
            error_messages,
            _floats(latencies),
            _micros(started),
            _micros(ended),
            _ints(input_tokens),
            _ints(output_tokens),
            _ints(total_tokens),
            transcripts,
            cached,
        ]
        return EncodedRows(columns, [len(t) if t else 0 for t in transcripts])

    def results(
        self, results: Sequence[EvalResults], levels: list[list[tuple[str, EvalResults]]]
    ) -> EncodedBatch:
        """The items' and scores' rows of one batch: the EvalResults of each provider, in
        provider order, and their levels (``SummaryTally.check``); see ``RunWriter.add_results``."""
        batch = EncodedBatch(items=self._items(levels))
        for index, (result, provider_levels) in enumerate(zip(results, levels, strict=True)):
            for agent, level in provider_levels:
                scores = self._scores(index, result.provider, agent, level)
                if scores is not None:
                    batch.scores.append(scores)
        return batch

    def _items(self, levels: list[list[tuple[str, EvalResults]]]) -> EncodedItems | None:
        batch_keys: set[tuple[str, int]] = set()
        seen: dict[str, set[str]] = {}
        agents: list[str] = []
        items: list[EvalItem] = []
        for provider_levels in levels:
            for agent, level in provider_levels:
                written = seen.setdefault(agent, set())
                inputs = level.input_items
                ids = list(map(_item_id, inputs))
                if ids.count(None) == 0 and written.isdisjoint(ids):
                    distinct = set(ids)
                    if len(distinct) == len(ids):
                        # every item named, none seen before: all of them, without a loop per item
                        written |= distinct
                        agents.extend([agent] * len(ids))
                        items.extend(inputs)
                        continue
                for position, item in enumerate(inputs):
                    if item.item_id is None:
                        # No id to deduplicate on: the providers' lists are parallel.
                        if (agent, position) in batch_keys:
                            continue
                        batch_keys.add((agent, position))
                    else:
                        if item.item_id in written:
                            continue
                        written.add(item.item_id)
                    agents.append(agent)
                    items.append(item)
        return self._item_rows(agents, items) if items else None

    def _item_rows(self, agents: list[str], items: list[EvalItem]) -> EncodedItems:
        """items.parquet's rows of ``items`` (``agents[i]`` is item i's result level)."""
        n = len(items)
        queries, responses = _pairs([item.query_and_response() for item in items])
        conversations = self._conversations(items)
        (
            ids,
            item_agents,
            query_indexes,
            repetitions,
            metadata,
            usages,
            splits,
            expected,
            tools,
            expected_outputs,
            contexts,
            error_codes,
            error_messages,
        ) = _columns(_ITEM_FIELDS, items)
        nulls: list[Any] = [None] * n
        if _all_null(usages):
            has_usage = [False] * n
            in_t = out_t = total_t = latency = nulls
        else:
            has_usage = [u is not None for u in usages]
            in_t = [u.input_tokens if u else None for u in usages]
            out_t = [u.output_tokens if u else None for u in usages]
            total_t = [u.total_tokens if u else None for u in usages]
            latency = [u.latency_seconds if u else None for u in usages]
        get_run_id, get_row_id = (
            operator.methodcaller("get", "run_id"),
            operator.methodcaller("get", "row_id"),
        )
        columns = [
            agents,
            None,  # the index: counted per agent over the run, when appended
            ids,
            item_agents,
            _strs(list(map(get_run_id, metadata))),
            _strs(list(map(get_row_id, metadata))),
            query_indexes,
            repetitions,
            queries,
            responses,
            nulls if _all_null(splits) else [_split_name(x) for x in splits],
            conversations,
            expected_outputs,
            contexts,
            _expected_json(expected),
            nulls
            if _all_null(tools)
            else [None if t is None else _TOOLS.dump_json(t).decode() for t in tools],
            error_codes,
            error_messages,
            has_usage,
            in_t,
            out_t,
            total_t,
            latency,
            list(map(_json, metadata)),
        ]
        return EncodedItems(
            columns,
            list(map(_add3, map(len, conversations), map(len, queries), map(len, responses))),
            agents,
            ids,
        )

    def _conversations(self, items: list[EvalItem]) -> list[str]:
        """items.parquet's ``conversation`` of each item: ``_MESSAGES.dump_json`` of it."""
        dump = _MESSAGES.dump_json
        return [dump(item.conversation, fallback=str).decode() for item in items]

    def _scores(
        self, provider_index: int, provider: str, agent: str, level: EvalResults
    ) -> EncodedScores | None:
        items = level.items
        if not items:
            return None
        # One row per score, one (scoreless) row for an item without scores: the item's columns
        # are built once per item, then repeated on its rows.
        (
            ids,
            statuses,
            error_codes,
            error_messages,
            response_ids,
            inputs,
            outputs,
            token_usages,
            metadata,
            score_lists,
        ) = _columns(_ITEM_RESULT_FIELDS, items)
        counts = list(map(len, score_lists))
        scores: list[EvalScoreResult | None]
        if 0 in counts:
            counts = [count or 1 for count in counts]
            scores = [score for listed in score_lists for score in (listed or _NO_SCORES)]
        else:
            scores = list(itertools.chain.from_iterable(score_lists))
        n = len(scores)
        repeat = n != len(items)
        sizes_by_item = [len(i or "") + len(o or "") for i, o in zip(inputs, outputs, strict=True)]
        if repeat:
            where = [i for i, count in enumerate(counts) for _ in range(count)]
            sizes = [
                size if k == 0 else 0
                for size, count in zip(sizes_by_item, counts, strict=True)
                for k in range(count)
            ]
        else:
            where = []
            sizes = sizes_by_item
        in_t, out_t, total_t, other_t = _token_columns(token_usages)
        item_columns = [
            _texts(ids),
            _texts(statuses),
            _strs(error_codes),
            _strs(error_messages),
            _strs(response_ids),
            _strs(inputs),
            _strs(outputs),
            in_t,
            out_t,
            total_t,
            other_t,
            _jsons(metadata),
        ]
        return EncodedScores(
            provider,
            provider_index,
            level.run_id,
            agent,
            item_columns,
            _score_columns(items, scores),
            sizes,
            len(items),
            where if repeat else None,
        )


_NO_SCORES: tuple[None] = (None,)
"""An item without scores has one row, its score columns null."""

_SAMPLE_JSON: dict[str, str] = {}
"""``_json({"reason": r})`` by reason: local checks repeat a few reasons on every item."""


def _sample_json(sample: Any) -> str | None:
    if sample is None:
        return None
    if type(sample) is dict and len(sample) == 1:
        reason = sample.get("reason")
        if type(reason) is str:
            text = _SAMPLE_JSON.get(reason)
            if text is None:
                if len(_SAMPLE_JSON) >= 4096:
                    _SAMPLE_JSON.clear()
                text = _SAMPLE_JSON[reason] = _json(sample)
            return text
    return _json(sample)


def _score_columns(
    items: Sequence[EvalItemResult], scores: list[EvalScoreResult | None]
) -> list[list[Any]]:
    """scores.parquet's metric columns (score_index onwards) of ``scores``, one per row (None: the
    row of an item without scores, its metric columns null)."""
    real = [s for s in scores if s is not None]
    columns = _metric_columns(items, real)
    if len(real) == len(scores):
        return columns
    out: list[list[Any]] = [[None] * len(scores) for _ in columns]
    rows = [row for row, score in enumerate(scores) if score is not None]
    for column, values in zip(out, columns, strict=True):
        for row, value in zip(rows, values, strict=True):
            column[row] = value
    return out


def _metric_columns(
    items: Sequence[EvalItemResult], scores: list[EvalScoreResult]
) -> list[list[Any]]:
    """The metric columns of the rows of ``scores`` (every score of ``items``, in order)."""
    (
        names,
        evaluators,
        values,
        passed,
        labels,
        ratings,
        reasons,
        thresholds,
        error_codes,
        error_messages,
        diagnostics,
        dimensions,
        samples,
        usages,
        latencies,
    ) = _columns(_SCORE_FIELDS, scores)
    in_t, out_t, total_t, other_t = _token_columns(usages)
    n = len(scores)
    nulls: list[Any] = [None] * n
    statuses: list[Any]
    if (
        _all_of(passed, bool)
        and _all_null(error_codes)
        and _all_null(error_messages)
        and _all_null(diagnostics)
        and _all_null(labels)
    ):
        # score_status's common case (a verdict, nothing else) on every row, without the call
        statuses = [PASS] * n if passed.count(True) == n else [PASS if p else FAIL for p in passed]
    else:
        statuses = [
            # score_status's common case (a verdict, nothing else) without the call
            (PASS if s.passed else FAIL)
            if s.passed is not None
            and s.error_code is None
            and s.error_message is None
            and not s.diagnostics
            and s.label is None
            else score_status(s)
            for s in scores
        ]
    return [
        [k for item in items for k in range(len(item.scores))],
        _texts(names),
        _strs(evaluators),
        _floats(values),
        _bools(passed),
        _strs(labels),
        _strs(ratings),
        _strs(reasons),
        _floats(thresholds),
        statuses,
        _strs(error_codes),
        _strs(error_messages),
        nulls
        if _all_null(diagnostics)
        else [None if d is None else _json([asdict(x) for x in d]) for d in diagnostics],
        nulls
        if _all_null(dimensions)
        else [None if d is None else _json([asdict(x) for x in d]) for d in dimensions],
        list(map(_sample_json, samples)),
        in_t,
        out_t,
        total_t,
        other_t,
        _floats(latencies),
    ]


def _expected_json(values: list[list[ExpectedToolCall] | None]) -> list[str | None]:
    """The JSON of each item's expected tool calls, once per distinct list of call objects: the
    items of a row's repetitions, and rows expecting equal calls (``rows_from_dataset``), share
    them. Keyed by the objects' ids, which stay theirs while the items hold them (this call)."""
    out: list[str | None] = []
    done: dict[tuple[int, ...], str] = {}
    for calls in values:
        if calls is None:
            out.append(None)
            continue
        key = tuple(map(id, calls))
        text = done.get(key)
        if text is None:
            text = done[key] = _EXPECTED.dump_json(calls, fallback=str).decode()
        out.append(text)
    return out


def _utcs(values: list[dt.datetime | None]) -> list[dt.datetime | None]:
    """``_utc`` of every value (one already in UTC is kept)."""
    if values and values.count(None) == 0:
        zones = list(map(_tzinfo, values))
        if all(map(operator.is_, zones, itertools.repeat(dt.UTC))):
            return values  # every one in UTC already (a call's stamps): kept, without a loop
    return [v if v is None or v.tzinfo is dt.UTC else _utc(v) for v in values]


_tzinfo = operator.attrgetter("tzinfo")

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def _micros(values: list[Any]) -> list[Any]:
    """A timestamp column as Arrow's ``timestamp("us", tz="UTC")`` holds it: each ``_utc`` value
    as whole microseconds since the epoch (exact: datetimes count microseconds), None kept.
    Integers cost a fraction of datetimes to pickle (a worker sends them) and to convert; a
    column holding anything but plain datetimes and None is returned as ``_utcs`` returns it
    (converted by pyarrow, as before)."""
    utc = _utcs(values)
    types = set(map(type, utc))
    if not types <= {dt.datetime, _NONE}:
        return utc
    if _NONE not in types:
        return list(map(operator.floordiv, map(operator.sub, utc, _EPOCHS), _MICROSECONDS))
    return [None if v is None else (v - _EPOCH) // _MICROSECOND for v in utc]


_EPOCHS = itertools.repeat(_EPOCH)
_MICROSECONDS = itertools.repeat(_MICROSECOND)


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    """A timestamp in UTC (a naive one is taken as UTC)."""
    if value is None:
        return None
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
