"""RowEncoder: a batch's rows of runs.parquet, items.parquet and scores.parquet as plain Python
columns by name, exactly the values the writer turns into Arrow arrays and appends.

Which columns there are and how each is computed is declared once, in
``evalpipe.artifacts.columns``; here is only how a batch is cut into rows (items deduplicated,
one scores row per metric). Nothing here imports pyarrow (nor numpy or pandas, which it brings):
a worker process of ``task_runner: processes`` encodes its shards with this module alone and
sends the columns; the flow's ``RunWriter`` converts them (``RunWriter.add_encoded``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalpipe.artifacts.columns import TABLES, Batch, RunRecord, call_fields
from evalpipe.items import EvalItem
from evalpipe.results import EvalResults, EvalScoreResult
from evalpipe.transcripts import Transcript

__all__ = ["EncodedBatch", "EncodedRows", "EncodedScores", "Level", "RowEncoder"]

Columns = dict[str, list[Any]]
"""A table's columns of a batch, by name: the values of each column's Arrow array."""


@dataclass(slots=True)
class EncodedRows:
    """Rows of one table as plain columns by name (every column but the run's constants and the
    counted ones) and each row's text size: what one ``_Sink.extend`` takes once converted."""

    columns: Columns
    sizes: list[int]


@dataclass(frozen=True, slots=True)
class Level:
    """One provider and agent's results: the source of scores.parquet's ``level`` columns."""

    provider: str
    provider_index: int
    agent: str
    result: EvalResults


@dataclass(slots=True)
class EncodedScores:
    """scores.parquet's rows of one result level of ``items`` items: ``level`` holds the value of
    each ``level`` column (the same on every row); ``results`` one value per item of each
    ``result`` column, row ``r`` taking item ``where[r]`` (None: one row each); ``columns`` one
    value per row of each ``score`` column; ``item_index`` is counted when appended."""

    level: dict[str, Any]
    results: Columns
    columns: Columns
    sizes: list[int]
    items: int
    where: list[int] | None


@dataclass(slots=True)
class EncodedBatch:
    """A batch's rows of runs, items and scores, built without files (``RowEncoder``), to be
    appended by ``RunWriter.add_encoded``: rows whose values depend on earlier batches (the
    running indexes, item ids already written) are completed there."""

    runs: EncodedRows | None = None
    items: EncodedRows | None = None
    """items.parquet's rows, deduplicated within the batch (their agent and item_id columns say
    which an earlier batch wrote already)."""
    scores: list[EncodedScores] = field(default_factory=list)


_NO_SCORES: tuple[None] = (None,)
"""An item without scores has one row, its score columns null."""


class RowEncoder:
    """Builds a batch's rows as plain columns (see the module); ``RunWriter`` encodes every batch
    with one too."""

    def records(self, records: Iterable[RunRecord | Mapping[str, Any]]) -> EncodedRows | None:
        """runs.parquet's rows of RunRecords (or their dicts); None for none.

        Raises:
            ValueError: for a dict with unknown keys or a record with a bad status.
        """
        rs = [raw if isinstance(raw, RunRecord) else RunRecord.from_mapping(raw) for raw in records]
        return _runs(Batch(rs), [r.transcript for r in rs])

    def target_runs(
        self,
        runs: Sequence[Transcript],
        *,
        run_ids: Sequence[str],
        row_ids: Sequence[str | None],
        transcripts: Sequence[str],
        cached: Sequence[bool],
        target: str | None = None,
        costs: Sequence[float | None] | None = None,
    ) -> EncodedRows | None:
        """runs.parquet's rows of target calls (see ``RunWriter.add_target_runs``), each with its
        cost (``costs``: None, none priced), built from their RunRecord fields as columns
        (``call_fields``), not a record per call; None for none.

        Raises:
            ValueError: for a run_id that is not a non-empty string, or sequences of different
                lengths.
        """
        fields = call_fields(runs, run_ids, row_ids, transcripts, cached, target, costs)
        return _runs(Batch((), columns=fields), fields["transcript"])

    def results(
        self, results: Sequence[EvalResults], levels: list[list[tuple[str, EvalResults]]]
    ) -> EncodedBatch:
        """The items' and scores' rows of one batch: the EvalResults of each provider, in
        provider order, and their levels (``SummaryTally.check``); see ``RunWriter.add_results``."""
        batch = EncodedBatch(items=self._items(levels))
        for index, (result, provider_levels) in enumerate(zip(results, levels, strict=True)):
            for agent, level in provider_levels:
                scores = self._scores(Level(result.provider, index, agent, level))
                if scores is not None:
                    batch.scores.append(scores)
        return batch

    def _items(self, levels: list[list[tuple[str, EvalResults]]]) -> EncodedRows | None:
        """Each agent's input items, once per item id (an item without one: per position, the
        providers' lists being parallel)."""
        seen: set[tuple[Any, ...]] = set()
        agents: list[str] = []
        items: list[EvalItem] = []
        for provider_levels in levels:
            for agent, level in provider_levels:
                for position, item in enumerate(level.input_items):
                    key = (agent, item.item_id, position if item.item_id is None else None)
                    if key not in seen:
                        seen.add(key)
                        agents.append(agent)
                        items.append(item)
        if not items:
            return None
        columns = TABLES["items"].values("item", Batch(items, agents))
        texts = zip(columns["conversation"], columns["query"], columns["response"], strict=True)
        sizes = [len(c) + len(q) + len(r) for c, q, r in texts]
        return EncodedRows(columns, sizes)

    def _scores(self, level: Level) -> EncodedScores | None:
        """One row per score, one (its score columns null) per item without scores: the items'
        columns are built once per item, then repeated on its rows."""
        items = level.result.items
        if not items:
            return None
        counts = [len(item.scores) for item in items]
        scores: list[EvalScoreResult | None] = [
            score for item in items for score in (item.scores or _NO_SCORES)
        ]
        results = TABLES["scores"].values("result", Batch(items))
        sizes = [
            len(i or "") + len(o or "")
            for i, o in zip(results["input_text"], results["output_text"], strict=True)
        ]
        where: list[int] | None = None
        if len(scores) != len(items):
            where = [i for i, count in enumerate(counts) for _ in range(count or 1)]
            sizes = [
                size if k == 0 else 0
                for size, c in zip(sizes, counts, strict=True)
                for k in range(c or 1)
            ]
        real = [s for s in scores if s is not None]
        columns = TABLES["scores"].values("score", Batch(real, items))
        if len(real) != len(scores):  # null on the rows of items without scores
            for name, values in columns.items():
                given = iter(values)
                columns[name] = [None if s is None else next(given) for s in scores]
        return EncodedScores(
            TABLES["scores"].values("level", Batch([level])),
            results,
            columns,
            sizes,
            len(items),
            where,
        )


def _runs(batch: Batch, transcripts: list[str | None]) -> EncodedRows | None:
    """runs.parquet's rows of a batch of calls; None for none."""
    if not transcripts:
        return None
    sizes = [len(t) if t else 0 for t in transcripts]
    return EncodedRows(TABLES["runs"].values("call", batch), sizes)
