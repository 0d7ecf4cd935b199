"""One object for equal scores among the results a run keeps for its gate and its summary.

The flow's process keeps every shard's stripped results until the run ends (the gate, the
failures artifact and the outcome's counts read them). A shard's results arrive as new objects:
at 100,000 items x 3 local checks that was ~0.75 KiB an item, most of it three
``EvalScoreResult`` and a list per item, though a local check's score on most items is the same
value (name, score, verdict, reason) as on every other such item. Here equal scores are one
object, and equal lists of them one list: what stays per item is its ``EvalItemResult``.

Only what is read afterwards is shared, and only when it is equal for every reader: a score
whose every field is immutable and of the same type (``1`` is not ``1.0`` nor ``True``; ``-0.0``
is not ``0.0``), and the kept results are not changed after they are kept (``keep_listed`` and
``strip_results`` change items' texts, never their scores, and run before).
"""

from __future__ import annotations

import math
from typing import Any

from evalpipe.results import EvalResults, EvalScoreResult

__all__ = ["ScoreTable", "share_scores"]


def _number(value: Any) -> bool:
    """A value a key may hold as is: not a float zero with its sign bit set (-0.0 == 0.0)."""
    return not (type(value) is float and value == 0.0 and math.copysign(1.0, value) < 0.0)


class ScoreTable:
    """The distinct scores and score lists seen so far (at most ``limit`` of each: a judge's
    scores with a reason of their own each are not worth a table entry apiece)."""

    __slots__ = ("limit", "lists", "scores")

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        self.scores: dict[tuple[Any, ...], EvalScoreResult] = {}
        self.lists: dict[tuple[int, ...], list[EvalScoreResult]] = {}

    def score(self, s: EvalScoreResult) -> EvalScoreResult | None:
        """The table's object equal to ``s`` (``s`` itself if it is new and there is room), or
        None when ``s`` cannot be shared."""
        if (
            s.sample is not None
            or s.dimensions is not None
            or s.diagnostics is not None
            or s.token_usage is not None
        ):
            return None
        score, threshold, latency = s.score, s.threshold, s.latency_s
        if not (_number(score) and _number(threshold) and _number(latency)):
            return None
        key = (
            s.name,
            type(s.name),
            score,
            type(score),
            s.passed,
            type(s.passed),
            s.reason,
            type(s.reason),
            threshold,
            type(threshold),
            s.label,
            type(s.label),
            s.error_message,
            type(s.error_message),
            s.rating,
            type(s.rating),
            s.error_code,
            type(s.error_code),
            s.evaluator,
            type(s.evaluator),
            latency,
            type(latency),
        )
        found = self.scores.get(key)
        if found is None and len(self.scores) < self.limit:
            self.scores[key] = found = s
        return found


def share_scores(result: EvalResults, table: ScoreTable) -> None:
    """Give ``result``'s items (its sub-results' too) the table's objects for their scores and
    score lists, where they are equal to ones seen before."""
    scores, lists, limit = table.score, table.lists, table.limit
    for item in result.items:
        shared: list[EvalScoreResult] = []
        for s in item.scores:
            one = scores(s)
            if one is None:
                break
            shared.append(one)
        else:
            # the table holds every shared score: their ids stay theirs
            key = tuple(map(id, shared))
            found = lists.get(key)
            if found is None:
                if len(lists) >= limit:
                    continue
                found = lists[key] = shared
            item.scores = found
    for sub in result.sub_results.values():
        share_scores(sub, table)
