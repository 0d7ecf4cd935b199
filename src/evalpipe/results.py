"""Results: per-score, per-item and per-run, nested per agent; the pass rules and assertion helpers.

The counting and pass rules, and the text of ``raise_for_status``, mirror MAF (shared spec §7):
``total = passed + failed`` (errored is counted apart, never as failed), an empty run is never
"all passed", and a workflow result passes only when every sub-result passes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from evalpipe.items import EvalItem

__all__ = [
    "Diagnostic",
    "EvalItemResult",
    "EvalNotPassedError",
    "EvalResults",
    "EvalScoreResult",
    "RubricScore",
]


class EvalNotPassedError(Exception):
    """Raised by ``raise_for_status`` and the ``assert_*`` helpers when a run did not pass."""


def _raise_unless_empty(bad: list[str], msg: str | None, what: str, shown: int = 5) -> None:
    """Raise ``msg`` (default: how many ``bad`` entries there are, ``what`` they are, and the first
    ``shown`` of them) when there are any."""
    if bad:
        more = f" (+{len(bad) - shown} more)" if len(bad) > shown else ""
        text = f"{len(bad)} {what}: {', '.join(bad[:shown])}{more}"
        raise EvalNotPassedError(text if msg is None else msg)


@dataclass(frozen=True)
class RubricScore:
    """One dimension of a rubric-based score."""

    id: str
    score: int | None
    applicable: bool
    weight: int
    reason: str


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A note an evaluator attached to a metric: its reasoning, a warning, or why it could not score."""

    severity: Literal["informational", "warning", "error"]
    message: str


@dataclass(slots=True)
class EvalScoreResult:
    """One metric's result for one item.

    A dataclass, as MAF's, so a local check costs well under a microsecond to record.
    """

    name: str
    score: float | None
    """The score. Local checks keep an @evaluator's float; None only when the metric errored."""
    passed: bool | None = None
    sample: dict[str, Any] | None = None
    """Provider-specific detail (MAF puts ``{"reason": ...}`` here for local checks)."""
    dimensions: list[RubricScore] | None = None
    reason: str | None = None
    threshold: float | None = None
    """The pass threshold that decided ``passed``, when there is one."""
    label: str | None = None
    """A categorical label (for example "pass" or a rating)."""
    error_message: str | None = None
    """Set when this metric could not be computed."""
    rating: str | None = None
    """A judge's rating: unknown, inconclusive, unacceptable, poor, average, good, exceptional."""
    diagnostics: list[Diagnostic] | None = None
    """Notes from the evaluator (a judge's reasoning is informational; a parse failure is an error)."""
    error_code: str | None = None
    """Machine-readable reason this metric could not be computed (e.g. JudgeParseError)."""
    evaluator: str | None = None
    """The evaluator that produced this metric, when it differs from ``name`` (composites)."""
    token_usage: dict[str, int] | None = None
    """Tokens spent computing this metric (judge calls): input_tokens, output_tokens, total_tokens."""
    latency_s: float | None = None
    """Seconds spent computing this metric (0 for a replayed judge answer)."""


@dataclass(slots=True)
class EvalItemResult:
    """One item's results from one provider."""

    item_id: str
    status: str
    """``pass``, ``fail``, or ``error``/``errored`` (see ``evalpipe.tally.ItemStatus``)."""
    scores: list[EvalScoreResult] = field(default_factory=list)
    error_code: str | None = None
    """Machine-readable error kind, e.g. AgentError, CheckError, Timeout."""
    error_message: str | None = None
    response_id: str | None = None
    input_text: str | None = None
    """The query text the provider saw."""
    output_text: str | None = None
    """The response text the provider saw."""
    token_usage: dict[str, int] | None = None
    """Tokens the evaluation itself used (judges), when reported."""
    metadata: dict[str, Any] | None = None
    """Extra data carried from the item (query index, repetition, agent, tags)."""

    @property
    def is_error(self) -> bool:
        """The item could not be evaluated."""
        return self.status in ("error", "errored")

    @property
    def is_passed(self) -> bool:
        return self.status == "pass"

    @property
    def is_failed(self) -> bool:
        """The item failed (an errored item is not failed)."""
        return self.status == "fail"


class EvalResults(BaseModel):
    """The results of one evaluation run by one provider, with sub-results per agent for workflows."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    provider: str
    """The evaluator provider's name ("Local", "Microsoft Foundry", ...)."""
    eval_id: str = ""
    run_id: str = ""
    """The provider's run id (the eval name for local runs)."""
    status: str = "completed"
    """``completed``, ``failed``, ``canceled``, ``timeout`` or ``partial``."""
    result_counts: dict[str, int] | None = None
    report_url: str | None = None
    """Where the provider shows this run, when it has a portal."""
    error: str | None = None
    """Run-level error text (for local runs, the failed checks' reasons)."""
    per_evaluator: dict[str, dict[str, int]] = Field(default_factory=dict)
    """Counts (passed, failed, errored) per check or evaluator."""
    items: list[EvalItemResult] = Field(default_factory=list)
    """One result per evaluated item, in the input order."""
    input_items: list[EvalItem] = Field(default_factory=list, exclude=True)
    """The evaluated items themselves (not serialized with the results)."""
    sub_results: dict[str, EvalResults] = Field(default_factory=dict)
    """Per-agent results of a workflow evaluation, keyed by agent name."""

    _input_loader: Callable[[], list[EvalItem]] | None = PrivateAttr(default=None)
    """Where ``input_items`` come from when they are loaded on first use (``load_run``)."""

    def __init__(self, **data: Any) -> None:
        for key in ("per_evaluator", "items", "input_items", "sub_results"):
            if key in data and data[key] is None:
                del data[key]
        super().__init__(**data)

    def defer_input_items(self, loader: Callable[[], list[EvalItem]]) -> None:
        """Load ``input_items`` with ``loader()`` the first time they are read, not now (a run
        read back from its files: the evaluated items are the costly part)."""
        self.__dict__.pop("input_items", None)
        self._input_loader = loader

    if not TYPE_CHECKING:
        # Only reached when normal lookup fails: input_items deferred by defer_input_items.
        def __getattr__(self, name: str) -> Any:
            if name == "input_items":
                loader = getattr(self, "_input_loader", None)
                if loader is not None:
                    items = loader()
                    self.__dict__["input_items"] = items
                    self._input_loader = None
                    return items
            return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "input_items" and getattr(self, "_input_loader", None) is not None:
            self._input_loader = None
        super().__setattr__(name, value)

    def _load_deferred(self) -> None:
        for result in self.iter_results():
            if getattr(result, "_input_loader", None) is not None:
                result.input_items  # noqa: B018 - loads them

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EvalResults):
            self._load_deferred()
            other._load_deferred()
        return super().__eq__(other)

    def __getstate__(self) -> dict[Any, Any]:
        self._load_deferred()
        return super().__getstate__()

    def __repr__(self) -> str:
        # The counts, not every item: a run may hold 100k of them, and on Python 3.11
        # ``asyncio.run(evaluate_agent(...))`` formats its result twice (signal.getsignal's error
        # text holds the main task's repr): ~85 µs an item with pydantic's full repr.
        subs = f", sub_results={list(self.sub_results)!r}" if self.sub_results else ""
        return (
            f"EvalResults(provider={self.provider!r}, status={self.status!r}, "
            f"result_counts={self.result_counts!r}, items=<{len(self.items)} results>{subs})"
        )

    @property
    def passed(self) -> int:
        return (self.result_counts or {}).get("passed", 0)

    @property
    def failed(self) -> int:
        return (self.result_counts or {}).get("failed", 0)

    @property
    def errored(self) -> int:
        """Items that could not be evaluated."""
        return (self.result_counts or {}).get("errored", 0)

    @property
    def total(self) -> int:
        """``passed + failed``: errored items are not in the denominator (as MAF)."""
        return self.passed + self.failed

    @property
    def all_passed(self) -> bool:
        """Completed, nothing failed or errored, at least one item, and every sub-result passed."""
        own_ok = self.failed == 0 and self.errored == 0 and self.total > 0
        if self.status != "completed" or not self.sub_results:
            return self.status == "completed" and own_ok
        # A workflow's own counts may be absent: then its agents decide.
        agents_ok = all(s.all_passed for s in self.sub_results.values())
        return (own_ok or self.result_counts is None) and agents_ok

    def iter_results(self) -> Iterator[EvalResults]:
        """This result, then every sub-result, depth first."""
        yield self
        for sub in self.sub_results.values():
            yield from sub.iter_results()

    def raise_for_status(self, msg: str | None = None) -> None:
        """Raise EvalNotPassedError unless ``all_passed``; the message says what went wrong."""
        if self.all_passed:
            return
        text = (
            msg
            or f"Eval run {self.run_id} {self.status}: {self.passed} passed, {self.failed} failed."
        )
        if self.errored:
            text += f" {self.errored} errored."
        if self.report_url:
            text += f" See {self.report_url} for details."
        if self.error:
            text += f" Error: {self.error}"
        failed_subs = [name for name, sub in self.sub_results.items() if not sub.all_passed]
        if failed_subs:
            text += f" Failed: {', '.join(failed_subs)}."
        errored_items = [i for i in self.items if i.is_error]
        if errored_items:
            listed = ", ".join(f"{i.item_id}: {i.error_code or 'unknown'}" for i in errored_items)
            text += f" Errored items: {listed}."
        raise EvalNotPassedError(text)

    def assert_score_at_least(
        self, min_score: float, *, evaluator: str | None = None, msg: str | None = None
    ) -> None:
        """Raise unless every score (of ``evaluator``, if given) is at least ``min_score``.

        Walks items and sub-results; an errored metric (score None) counts as below, a metric
        labelled ``not_applicable`` (a judge with no input for it) is skipped.
        """
        low = [
            f"{item.item_id}/{score.name}={(score.score if score.score is not None else 0.0):.3f}"
            for result in self.iter_results()
            for item in result.items
            for score in item.scores
            if evaluator in (None, score.name)
            and score.label != "not_applicable"
            and (score.score is None or score.score < min_score)
        ]
        where = f" for {evaluator}" if evaluator else ""
        _raise_unless_empty(low, msg, f"score(s) below threshold {min_score}{where}")

    def assert_dimension_score_at_least(
        self,
        dimension_id: str,
        min_score: float,
        *,
        evaluator: str | None = None,
        require_applicable: bool = False,
        msg: str | None = None,
    ) -> None:
        """Raise unless every applicable rubric dimension ``dimension_id`` scores at least ``min_score``.

        With ``require_applicable``, an item none of whose scores has the dimension applicable
        also fails.
        """
        low: list[str] = []
        for result in self.iter_results():
            for item in result.items:
                # Applicability is per item: any of its (selected) scores may carry the dimension.
                found_applicable = False
                for score in item.scores:
                    if evaluator is not None and score.name != evaluator:
                        continue
                    for d in score.dimensions or []:
                        if d.id != dimension_id or not d.applicable:
                            continue
                        found_applicable = True
                        if d.score is None or d.score < min_score:
                            low.append(f"{item.item_id}/{score.name}/{d.id}={d.score}")
                if require_applicable and not found_applicable:
                    low.append(f"{item.item_id}: not applicable")
        what = f"dimension score(s) below threshold {min_score} for {dimension_id}"
        _raise_unless_empty(low, msg, what)

    def assert_no_failed_items(self, msg: str | None = None) -> None:
        """Raise if any item (here or in a sub-result) failed or errored."""
        bad = [
            f"{item.item_id}:{item.status}"
            for result in self.iter_results()
            for item in result.items
            if not item.is_passed
        ]
        _raise_unless_empty(bad, msg, "item(s) did not pass", shown=10)
