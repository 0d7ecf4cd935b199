"""Gates: pass/fail rules written for a whole evaluation, not for each score.

A gate is a list of clauses, each an aggregate over the scores of one metric (matched by
``EvalScoreResult.name`` across every provider's results), optionally for one agent of a workflow::

    gate = (mean("relevance") >= 3.5) & at_most(1, "relevance", below=3) & all_pass("expected_fact")
    report = evaluate_gates(gate, results)  # results: list[EvalResults], one per provider
    print(report.summary())

Suites write the same clauses as text (``parse_gates``): ``"writer: mean(relevance) >= 3.5"``. The
parser is a small tokenizer and a table of known clauses; nothing is evaluated as Python. Every
clause but ``judge_agreement`` reads the tally's fold of the results (``tally.fold_levels``), never
the items. Could not evaluate is never a pass: see docs/gates.md for the rules.
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from evalpipe.results import EvalResults
from evalpipe.tally import Counts, LevelFold, LevelsFold, MetricFold

if TYPE_CHECKING:
    from evalpipe.calibration import Verdict

__all__ = [
    "ACCEPTED_FORMS",
    "Aggregate",
    "AllPass",
    "AtMost",
    "Clause",
    "ClauseResult",
    "Comparison",
    "ErrorRate",
    "Gate",
    "GateFold",
    "GateReport",
    "GateSyntaxError",
    "JudgeAgreement",
    "NoErrors",
    "Threshold",
    "all_pass",
    "at_most",
    "error_rate",
    "evaluate_gates",
    "judge_agreement",
    "mean",
    "no_errors",
    "parse_gates",
    "pass_rate",
]

Comparison = Literal[">=", ">", "<=", "<"]
"""How an aggregate is compared with its threshold."""

_SHOWN_ITEMS = 10
"""How many offending item ids a clause result lists."""


class GateSyntaxError(ValueError):
    """A gate clause that cannot be parsed or built; the message names it and lists the forms."""


# --------------------------------------------------------------------------------------------
# Results


class ClauseResult(BaseModel):
    """One clause's verdict on a set of results, with the numbers behind it."""

    model_config = ConfigDict(extra="forbid")

    clause: str
    """The clause as text (the form ``parse_gates`` reads back)."""
    passed: bool
    """Whether the clause holds."""
    metric: str | None = None
    """The metric the clause reads, matched by EvalScoreResult.name; None for ``no_errors()``."""
    agent: str | None = None
    """The agent whose sub-results were read; None: every level of every result."""
    observed: float | None = None
    """The aggregate that was compared (mean, rate, count); None when there was none."""
    threshold: float | None = None
    """The bound it was compared with."""
    n: int = 0
    """Scores (or, for ``no_errors``, items) the clause counted."""
    errored: int = 0
    """Errored scores or items left out of the aggregate."""
    not_applicable: int = 0
    """Scores labelled not applicable, left out of the aggregate (not errors)."""
    items: list[str] = Field(default_factory=list)
    """Offending item ids (first ten), as ``agent:item_id`` inside a workflow's sub-results."""
    message: str
    """The verdict in words, with its numbers."""


class GateReport(BaseModel):
    """A gate's verdict: passed only when every clause passed."""

    model_config = ConfigDict(extra="forbid")

    passed: bool
    """Every clause passed (and there was at least one)."""
    clauses: list[ClauseResult] = Field(default_factory=list)
    """One result per clause, in the gate's order."""

    def __repr__(self) -> str:  # short: Prefect logs the failed gate task's state with it
        held = sum(1 for c in self.clauses if c.passed)
        return f"GateReport(passed={self.passed}, {held} of {len(self.clauses)} clauses hold)"

    @property
    def failures(self) -> list[ClauseResult]:
        """The violated clauses."""
        return [c for c in self.clauses if not c.passed]

    def summary(self) -> str:
        """A few lines for people: the verdict, then every clause with its numbers."""
        if not self.clauses:
            return "Gate FAILED: no clauses"
        head = (
            f"Gate passed: {len(self.clauses)} of {len(self.clauses)} clauses hold"
            if self.passed
            else f"Gate FAILED: {len(self.failures)} of {len(self.clauses)} clauses violated"
        )
        lines = [
            f"  {'ok  ' if c.passed else 'FAIL'} {c.clause}: {c.message}" for c in self.clauses
        ]
        return "\n".join([head, *lines])


# --------------------------------------------------------------------------------------------
# Wording


def _num(value: float) -> str:
    """A number as the clause text shows it: 3 not 3.0, 3.5 as is."""
    if isinstance(value, int) or (math.isfinite(value) and value == int(value)):
        return str(int(value))
    return repr(float(value))


def _shown(value: float) -> str:
    return f"{value:.4g}"


def _name(text: str) -> str:
    """A metric or agent name as clause text: bare when the tokenizer reads it back as one name."""
    return text if _BARE_NAME.fullmatch(text) else json.dumps(text)


def _listed(labels: Sequence[str]) -> str:
    """The first ten of ``labels``, and how many more there are."""
    more = f" +{len(labels) - _SHOWN_ITEMS} more" if len(labels) > _SHOWN_ITEMS else ""
    return ", ".join(labels[:_SHOWN_ITEMS]) + more


def _items_note(labels: Sequence[str]) -> str:
    return f" (items {_listed(labels)})" if labels else ""


def _offenders(labels: list[str], passed: bool, message: str) -> dict[str, Any]:
    """The verdict of a clause that counts offending items (the first ten listed)."""
    items = labels[:_SHOWN_ITEMS]
    return {"passed": passed, "observed": float(len(labels)), "items": items, "message": message}


def _compared(what: str, observed: float, op: Comparison, bound: float) -> dict[str, Any]:
    """The verdict of ``observed op bound``, said after ``what``."""
    passed = bool(_COMPARE[op](observed, bound))
    verdict = "holds" if passed else "needs"
    return {
        "passed": passed,
        "observed": observed,
        "message": f"{what}; {verdict} {op} {_num(bound)}",
    }


# --------------------------------------------------------------------------------------------
# Clauses

_COMPARE = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


class Clause(ABC):
    """One rule over a set of results. Combine clauses with ``&`` or ``Gate([...])``.

    A clause reads one ``metric`` (``EvalScoreResult.name``, None for every metric where that is
    allowed) of one ``agent``'s sub-results (None: every level). Its text is written as its kind
    (``mean``, ``at_most``, ...) called with its ``positional`` fields, then its ``keywords`` that
    are not at their default, and, when it ``compares``, ``op threshold``.
    """

    kind: str
    agent: str | None
    positional: ClassVar[tuple[str, ...]] = ("metric",)
    keywords: ClassVar[tuple[str, ...]] = ("agent",)
    compares: ClassVar[bool] = False

    def __post_init__(self) -> None:
        """Check every field the clause has (GateSyntaxError naming the clause and the field)."""
        kind, values = self.kind, vars(self)
        metric, agent = values.get("metric"), self.agent
        if (metric is not None or kind not in ("no_errors", "error_rate")) and (
            not isinstance(metric, str) or not metric.strip()
        ):
            raise GateSyntaxError(f"{kind}: the metric must be a non-empty name, got {metric!r}")
        if agent is not None and (not isinstance(agent, str) or not agent.strip()):
            raise GateSyntaxError(f"{kind}: agent must be a non-empty name or None, got {agent!r}")
        for name in ("count", "max_errors", "min_n"):
            low = 0 if name != "min_n" else 2 if kind == "judge_agreement" else 1
            value = values.get(name, low)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise GateSyntaxError(f"{kind} {name} must be an integer >= {low}, got {value!r}")
        share = (0, 1, "")  # a threshold's range: a share, or a κ
        kappa = (-1, 1, "a kappa ")
        ranges = {"pass_rate": share, "error_rate": share, "judge_agreement": kappa}
        limits = {"threshold": ranges.get(kind), "below": None, "max_error_rate": share}
        for name, bounds in limits.items():
            if name not in values or (name == "max_error_rate" and values[name] is None):
                continue
            value = values[name]
            where = f"{kind}({metric or ''}) {name}"
            if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
                raise GateSyntaxError(f"{where} must be a number, got {value!r}")
            if bounds is not None and not bounds[0] <= value <= bounds[1]:
                low, high, noun = bounds
                raise GateSyntaxError(f"{where} must be {noun}in [{low}, {high}], got {value}")
        if "op" in values and values["op"] not in _COMPARE:
            raise GateSyntaxError(
                f"comparison must be one of {list(_COMPARE)}, got {values['op']!r}"
            )
        if kind == "error_rate" and values["op"] not in ("<=", "<"):
            raise GateSyntaxError(
                f"error_rate(...) is an upper bound: compare it with <= or <, got {values['op']!r}"
            )
        labels = values.get("labels")
        if labels is not None and (not isinstance(labels, str) or not labels):
            raise GateSyntaxError(f"{kind}: labels must be a file path, got {labels!r}")

    def evaluate(self, results: EvalResults | Sequence[EvalResults]) -> ClauseResult:
        """This clause's verdict on ``results`` (one EvalResults per provider)."""
        return Gate([self]).evaluate(results).clauses[0]

    @abstractmethod
    def read(self, fold: GateFold) -> ClauseResult:
        """This clause's verdict on a run's fold (``Gate.evaluate`` folds once for all)."""

    def text(self) -> str:
        """The clause without its agent, as ``parse_gates`` reads it."""
        values = vars(self)
        defaults = {f.name: f.default for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        args = [
            _name(value) if isinstance(value, str) else _num(value)
            for name in self.positional
            if (value := values[name]) is not None
        ]
        args += [
            f"{name}={json.dumps(value) if isinstance(value, str) else _num(value)}"
            for name in self.keywords
            if name != "agent" and (value := values[name]) != defaults[name]
        ]
        text = f"{self.kind}({', '.join(args)})"
        return f"{text} {values['op']} {_num(values['threshold'])}" if self.compares else text

    def __str__(self) -> str:
        body = self.text()
        return f"{_name(self.agent)}: {body}" if self.agent is not None else body

    def __and__(self, other: Clause | Gate) -> Gate:
        return Gate([self, other])

    def __bool__(self) -> bool:
        # `a and b` would silently keep only b: clauses combine with `&`.
        raise TypeError(f"combine gate clauses with & (not `and`/`or`): {self}")


class _Folded(Clause):
    """A clause that is a fold of the tally: it reads the levels of ``tally.LevelsFold``, never
    the items themselves."""

    metric: str | None

    def read(self, fold: GateFold) -> ClauseResult:
        """The verdict on the levels of its agent (at any depth), or on every level."""
        levels = fold.levels
        scope = [level for level in levels if self.agent is None or level.label == self.agent]
        fields = {"clause": str(self), "passed": False, "metric": self.metric, "agent": self.agent}
        if self.agent is not None and not scope:
            known = ", ".join(sorted({level.label for level in levels if level.label}))
            message = f"no results for agent {self.agent!r} (agents: {known or 'none'})"
            return ClauseResult(**fields, message=message)
        return self._read(scope, fields)

    @abstractmethod
    def _read(self, scope: Sequence[LevelFold], fields: dict[str, Any]) -> ClauseResult:
        """The verdict on the levels in scope (``fields``: the clause, agent and metric)."""


DEFAULT_MAX_ERRORS = 0
"""Errored items a metric clause allows by default: none. An item that could not be evaluated
(its call failed, the metric errored) is not a pass, so a clause over errored items fails unless
it allows them (``max_errors=N`` or ``max_error_rate=R``)."""
DEFAULT_MIN_N = 1
"""Scores a metric clause needs by default."""


class _Limited(_Folded):
    """A metric clause (mean, pass_rate, at_most, all_pass): it also fails on more than
    ``max_errors`` errored items (or, with ``max_error_rate``, a larger share of the items it
    covers), on fewer than ``min_n`` scores, and when it sees no score."""

    metric: str
    max_errors: int
    max_error_rate: float | None
    min_n: int
    keywords: ClassVar[tuple[str, ...]] = ("agent", "max_errors", "max_error_rate", "min_n")

    def allowing(
        self,
        *,
        max_errors: int | None = None,
        max_error_rate: float | None = None,
        min_n: int | None = None,
    ) -> Self:
        """This clause with other limits: ``(mean("relevance") >= 4).allowing(max_errors=2)``."""
        changes = {"max_errors": max_errors, "max_error_rate": max_error_rate, "min_n": min_n}
        kept = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, **kept)  # type: ignore[type-var]

    bound: ClassVar[str | None] = None
    """The field the clause reports as its ``ClauseResult.threshold``."""

    @abstractmethod
    def _verdict(self, values: MetricFold, note: str) -> dict[str, Any]:
        """The verdict on at least one score: the ``ClauseResult`` fields it sets."""

    def _read(self, scope: Sequence[LevelFold], fields: dict[str, Any]) -> ClauseResult:
        values, errored = MetricFold(), 0
        for level in scope:
            if self.metric not in level.owned:
                continue  # another provider's: its items that could not be evaluated are not ours
            errored += level.errored_on(self.metric)
            if (fold := level.metrics.get(self.metric)) is not None:
                for name in ("labels", "values", "statuses", "passed", "not_applicable"):
                    setattr(values, name, getattr(values, name) + getattr(fold, name))
        note = f", {errored} errored excluded" if errored else ""
        note += f", {values.not_applicable} not applicable" if values.not_applicable else ""
        fields |= {
            "threshold": None if self.bound is None else vars(self)[self.bound],
            "n": len(values.values),
            "errored": errored,
            "not_applicable": values.not_applicable,
            "message": f"no scores for {self.metric}{note}",
        }
        if values.values:
            fields.update(self._verdict(values, note))
        # The limits: a clause that does not meet them fails, saying why.
        problems = []
        n, covered = fields["n"], fields["n"] + errored
        if self.max_error_rate is not None:
            share = errored / covered if covered else 0.0
            if share > self.max_error_rate:
                problems.append(
                    f"{errored} of {covered} errored ({share:.1%}) > "
                    f"max_error_rate={_num(self.max_error_rate)}"
                )
        elif errored > self.max_errors:
            problems.append(
                f"{errored} errored > max_errors={self.max_errors} (could not evaluate is not a "
                "pass)"
            )
        if 0 < n < self.min_n:
            problems.append(f"n={n} < min_n={self.min_n}")
        if problems:
            fields |= {
                "passed": False,
                "message": f"{fields['message']}; FAILS: {'; '.join(problems)}",
            }
        return ClauseResult(**fields)


@dataclass(frozen=True)
class Threshold(_Limited):
    """An aggregate of a metric compared with a bound: ``mean("relevance") >= 3.5``."""

    kind: Literal["mean", "pass_rate"]
    """``mean``: the average score; ``pass_rate``: the share of scores whose verdict passed."""
    metric: str
    op: Comparison
    threshold: float
    agent: str | None = None
    max_errors: int = DEFAULT_MAX_ERRORS
    max_error_rate: float | None = None
    min_n: int = DEFAULT_MIN_N
    compares = True
    bound = "threshold"

    def _verdict(self, values: MetricFold, note: str) -> dict[str, Any]:
        n = len(values.values)
        if self.kind == "mean":
            observed = math.fsum(values.values) / n
            what = f"mean {_shown(observed)} over n={n}"
        else:
            # The tally's pass rate: verdicts only (a score without a verdict is not a pass).
            counts = Counts().add_all(values.statuses)
            if counts.pass_rate is None:
                return {"n": 0, "message": f"no verdicts for {self.metric}{note}"}
            observed, n = counts.pass_rate, counts.denominator
            what = f"pass rate {_shown(observed)} ({counts.passed} of n={n} passed)"
        return {"n": n, **_compared(what + note, observed, self.op, self.threshold)}


@dataclass(frozen=True)
class AtMost(_Limited):
    """At most ``count`` scores of a metric below a bound: ``at_most(1, "relevance", below=3)``."""

    count: int
    """How many low scores are allowed."""
    metric: str
    below: float
    """A score strictly below this is low."""
    agent: str | None = None
    max_errors: int = DEFAULT_MAX_ERRORS
    max_error_rate: float | None = None
    min_n: int = DEFAULT_MIN_N
    kind = "at_most"
    positional = ("count", "metric")
    keywords = ("below", *_Limited.keywords)
    bound = "count"

    def _verdict(self, values: MetricFold, note: str) -> dict[str, Any]:
        low = [
            label
            for label, value in zip(values.labels, values.values, strict=True)
            if value < self.below
        ]
        passed = len(low) <= self.count
        message = (
            f"{len(low)} of n={len(values.values)} {self.metric} scores below "
            f"{_num(self.below)}{_items_note(low)}{note}; "
            f"{'within' if passed else 'more than'} the {self.count} allowed"
        )
        return _offenders(low, passed, message)


@dataclass(frozen=True)
class AllPass(_Limited):
    """Every computed score of a metric passed its own verdict: ``all_pass("expected_fact")``."""

    metric: str
    agent: str | None = None
    max_errors: int = DEFAULT_MAX_ERRORS
    max_error_rate: float | None = None
    min_n: int = DEFAULT_MIN_N
    kind = "all_pass"

    def _verdict(self, values: MetricFold, note: str) -> dict[str, Any]:
        n = len(values.values)
        # A score with no verdict (passed None) is not a pass.
        bad = [
            label for label, ok in zip(values.labels, values.passed, strict=True) if ok is not True
        ]
        if bad:
            message = f"{len(bad)} of n={n} {self.metric} did not pass{_items_note(bad)}{note}"
        else:
            message = f"all n={n} {self.metric} passed{note}"
        return _offenders(bad, not bad, message)


class _Errors(_Folded):
    """``no_errors`` and ``error_rate``: the errors in scope (``LevelFold.errors_of``); a clause
    that sees no item fails."""

    @abstractmethod
    def _verdict(
        self, errors: list[str], items: list[str], runs: list[str], n: int
    ) -> dict[str, Any]:
        """The ``ClauseResult`` fields it sets: its errored count, items and threshold, and (on
        at least one item) its verdict. ``errors``: each error as text; ``items``: the items with
        one; ``runs``: the provider runs that did not complete; ``n``: the items in scope."""

    def _read(self, scope: Sequence[LevelFold], fields: dict[str, Any]) -> ClauseResult:
        errors: list[str] = []
        items: list[str] = []
        runs: list[str] = []
        n = 0
        for level in scope:
            if self.metric is not None and self.metric not in level.owned:
                continue  # another provider's items: its errors are not this metric's
            if level.status != "completed":
                where = f"{level.label} " if level.label else ""
                runs.append(f"{level.provider} {where}run {level.status}")
            n += level.items
            for label, texts in level.errors_of(self.metric):
                items.append(label)
                errors += texts
        fields |= {"n": n, **self._verdict(errors, items, runs, n)}
        if n == 0:
            note = f" ({'; '.join(runs)})" if runs else ""
            fields |= {"passed": False, "observed": None, "message": f"no items{note}"}
        return ClauseResult(**fields)


@dataclass(frozen=True)
class NoErrors(_Errors):
    """Nothing in scope errored: no errored item, no metric that could not be computed.

    Counted as errors: a provider run whose status is not ``completed``; an errored item; a score
    that is None or carries an error diagnostic. With ``metric``, only that metric's errors (and
    errored items that lack it) count.
    """

    metric: str | None = None
    agent: str | None = None
    kind = "no_errors"

    def _verdict(
        self, errors: list[str], items: list[str], runs: list[str], n: int
    ) -> dict[str, Any]:
        out = {"errored": len(errors), "items": items[:_SHOWN_ITEMS], "threshold": 0.0}
        if not errors and not runs:
            return out | {"passed": True, "observed": 0.0, "message": f"no errors in n={n} items"}
        parts = []
        if errors:
            word = "error" if len(errors) == 1 else "errors"
            parts.append(f"{len(errors)} {word} in n={n} items: {_listed(errors)}")
        parts.extend(runs)
        return out | {"observed": float(len(errors) + len(runs)), "message": "; ".join(parts)}


@dataclass(frozen=True)
class ErrorRate(_Errors):
    """The share of items with an error bounded: ``error_rate() <= 0.1``, ``error_rate(relevance)
    < 0.05``. It counts as ``no_errors`` does (errored items, metrics that could not be computed;
    with ``metric``, only that metric's), over the items in scope; a provider run that did not
    complete fails it."""

    metric: str | None
    op: Comparison
    """The comparison (``<=`` or ``<``)."""
    threshold: float
    """The bound, a share in [0, 1]."""
    agent: str | None = None
    kind = "error_rate"
    compares = True

    def _verdict(
        self, errors: list[str], items: list[str], runs: list[str], n: int
    ) -> dict[str, Any]:
        out = {"errored": len(items), "items": items[:_SHOWN_ITEMS], "threshold": self.threshold}
        observed = len(items) / n if n else 0.0
        what = f"error rate {_shown(observed)}: {len(items)} of n={n} items errored{_items_note(items)}"
        if runs:
            return out | {"observed": observed, "message": f"{what}; {'; '.join(runs)}"}
        return out | _compared(what, observed, self.op, self.threshold)


class Aggregate:
    """``mean(metric)``, ``pass_rate(metric)``, ``error_rate()`` or ``judge_agreement(metric)``
    before it is compared."""

    __slots__ = ("agent", "kind", "metric", "options")

    def __init__(
        self,
        kind: Literal["mean", "pass_rate", "error_rate", "judge_agreement"],
        metric: str | None,
        agent: str | None = None,
        **options: Any,
    ) -> None:
        self.kind, self.metric, self.agent, self.options = kind, metric, agent, options

    def _compare(self, op: Comparison, other: Any) -> Clause:
        build, preset = _KINDS[self.kind]
        clause = {"metric": self.metric, "agent": self.agent, "op": op, "threshold": other}
        return build(**preset | clause | self.options)

    def __ge__(self, other: object) -> Clause:
        return self._compare(">=", other)

    def __gt__(self, other: object) -> Clause:
        return self._compare(">", other)

    def __le__(self, other: object) -> Clause:
        return self._compare("<=", other)

    def __lt__(self, other: object) -> Clause:
        return self._compare("<", other)

    def __bool__(self) -> bool:
        raise TypeError(
            f"{self.kind}({self.metric!r}) is not a gate until it is compared: write "
            f"{self.kind}({self.metric!r}) >= 3.5"
        )

    def __repr__(self) -> str:
        return f"{self.kind}({self.metric!r}, agent={self.agent!r})"


def mean(metric: str, *, agent: str | None = None) -> Aggregate:
    """The mean score of ``metric``; compare it to make a clause: ``mean("relevance") >= 3.5``."""
    return Aggregate("mean", metric, agent)


def pass_rate(metric: str, *, agent: str | None = None) -> Aggregate:
    """The share of ``metric`` scores that passed; compare it: ``pass_rate("bleu") >= 0.9``."""
    return Aggregate("pass_rate", metric, agent)


def error_rate(metric: str | None = None, *, agent: str | None = None) -> Aggregate:
    """The share of items with an error (only ``metric``'s, if given); compare it with ``<=``:
    ``error_rate() <= 0.1``."""
    return Aggregate("error_rate", metric, agent)


def at_most(count: int, metric: str, *, below: float, agent: str | None = None) -> AtMost:
    """At most ``count`` scores of ``metric`` strictly below ``below``."""
    return AtMost(count, metric, below, agent)


def all_pass(metric: str, *, agent: str | None = None) -> AllPass:
    """Every computed score of ``metric`` passed."""
    return AllPass(metric, agent)


def no_errors(metric: str | None = None, *, agent: str | None = None) -> NoErrors:
    """No errored item or metric (only ``metric``'s, if given) and every provider run completed."""
    return NoErrors(metric, agent)


@dataclass(frozen=True)
class Gate:
    """Clauses that must all hold. ``Gate([...])`` takes clauses, gates and text specs."""

    clauses: tuple[Clause, ...]
    """The clauses, in order."""

    def __init__(self, clauses: Iterable[Clause | Gate | str | Mapping[str, Any]] = ()) -> None:
        object.__setattr__(self, "clauses", tuple(_flatten(clauses)))

    def __and__(self, other: Clause | Gate) -> Gate:
        return Gate([self, other])

    def __iter__(self) -> Iterator[Clause]:
        return iter(self.clauses)

    def __bool__(self) -> bool:
        raise TypeError("combine gates with & (not `and`/`or`); use len(gate) to count clauses")

    def __len__(self) -> int:
        return len(self.clauses)

    def __str__(self) -> str:
        return " & ".join(f"({c})" for c in self.clauses)

    def evaluate(self, results: EvalResults | Sequence[EvalResults] | GateFold) -> GateReport:
        """Every clause's verdict on ``results`` (or on a run folded shard by shard: a
        ``GateFold``); passed when all hold (and there is one)."""
        if isinstance(results, GateFold):
            fold = results
        else:
            fold = GateFold(self)
            fold.add([results] if isinstance(results, EvalResults) else list(results))
        outcomes = [clause.read(fold) for clause in self.clauses]
        return GateReport(
            passed=bool(outcomes) and all(o.passed for o in outcomes), clauses=outcomes
        )


class GateFold(LevelsFold):
    """What a gate reads of a run, folded batch by batch (a flow's shards) so the run keeps no
    item results: the tally's fold (its ``levels``) for the clauses that are folds of it, and the
    run's verdicts for ``judge_agreement`` (kept only when the gate has that clause)."""

    __slots__ = ("verdicts",)

    def __init__(self, gate: Gate) -> None:
        super().__init__()
        self.verdicts: list[Verdict] | None = (
            [] if any(isinstance(c, JudgeAgreement) for c in gate) else None
        )

    def add(self, results: Sequence[EvalResults]) -> None:
        super().add(results)
        if self.verdicts is not None:
            from evalpipe.calibration import verdicts_of_results  # lazy: scipy, judge_agreement

            self.verdicts += verdicts_of_results(results)


def _flatten(specs: Iterable[Any]) -> Iterator[Clause]:
    for index, spec in enumerate(specs):
        if isinstance(spec, Gate):
            yield from spec.clauses
        elif isinstance(spec, Clause):
            yield spec
        elif isinstance(spec, Aggregate):
            raise TypeError(f"{spec!r} is not a clause until it is compared (e.g. >= 3.5)")
        elif isinstance(spec, str | Mapping):
            yield _parse_spec(spec, f"gates[{index}]")
        else:
            raise TypeError(
                f"a gate holds clauses, gates or clause texts, got {type(spec).__name__}"
            )


def evaluate_gates(
    gates: Gate | Clause | Iterable[Clause | Gate | str | Mapping[str, Any]],
    results: EvalResults | Sequence[EvalResults] | GateFold,
) -> GateReport:
    """Evaluate a gate on a run's results (one EvalResults per provider, or a ``GateFold``).

    Args:
        gates: a Gate, a clause, or a list of clauses, gates and clause texts (as in YAML).
        results: what ``evaluate_agent`` returned (or one EvalResults), or the run folded
            shard by shard (``GateFold(gate)``, ``add`` each shard's results).

    Raises:
        GateSyntaxError: for a clause text that cannot be parsed.
    """
    if isinstance(gates, Gate | Clause | Aggregate | str | Mapping):
        gates = [gates]
    return Gate(gates).evaluate(results)


# --------------------------------------------------------------------------------------------
# judge_agreement: a gate on trust (the statistics live in evalpipe.calibration)


@dataclass(frozen=True)
class JudgeAgreement(Clause):
    """Cohen's κ of a judge's metric against human labels: ``judge_agreement("relevance",
    labels="labels.jsonl") >= 0.6``. Fails with no labels, with fewer than ``min_n`` matched
    items, when κ is undefined, and when κ misses the bound; the verdict names n and the
    interval. See docs/gates.md and docs/judges.md."""

    metric: str
    """The judge's metric (EvalScoreResult.name) the labels grade."""
    op: Comparison
    """The comparison."""
    threshold: float
    """The bound on κ."""
    agent: str | None = None
    """The agent whose labels and sub-results are read; None: every agent labelled."""
    labels: str | None = None
    """The labels file (a path, relative to the working directory); None: not calibrated."""
    min_n: int = 20
    """Matched items below which the interval is too wide to say: the clause fails."""
    kind = "judge_agreement"
    keywords = ("agent", "labels", "min_n")
    compares = True

    def with_labels(self, labels: str) -> JudgeAgreement:
        """This clause reading ``labels`` when it names none itself."""
        return self if self.labels is not None else dataclasses.replace(self, labels=labels)

    def read(self, fold: GateFold) -> ClauseResult:
        """Fails with no labels, labels that do not fit the run, fewer than ``min_n`` matched
        items, an undefined κ, or a κ (of any provider that produces the metric) off the bound."""
        from evalpipe.calibration import (  # lazy: scipy, only for this clause
            LabelsError,
            calibrate,
            read_labels,
        )

        fields: dict[str, Any] = {"clause": str(self), "passed": False, "metric": self.metric}
        fields |= {"agent": self.agent, "threshold": self.threshold}
        if self.labels is None:
            message = (
                "no labels: the judge is not calibrated; give the clause labels=FILE (or run "
                "`evalpipe calibrate RUN_DIR --labels FILE --gate ...`)"
            )
            return ClauseResult(**fields, message=message)
        try:
            found = calibrate(fold.verdicts or [], read_labels(self.labels), source=self.labels)
        except LabelsError as exc:
            return ClauseResult(**fields, message=f"labels unusable: {exc}")
        mine = [c for c in found if c.metric == self.metric and self.agent in (None, c.agent)]
        if not mine:
            message = f"no labels for metric {self.metric!r} in {self.labels}: not calibrated"
            return ClauseResult(**fields, message=message)
        worst = min(
            mine, key=lambda c: (c.n >= self.min_n, math.inf if c.kappa is None else c.kappa)
        )
        if worst.n < self.min_n:
            tail = f"needs at least {self.min_n} matched items to say (too few labels)"
        elif worst.kappa is None:
            tail = "κ is undefined (one class on both sides): label both classes"
        else:
            fields["passed"] = _COMPARE[self.op](worst.kappa, self.threshold)
            tail = f"{'holds' if fields['passed'] else 'needs'} κ {self.op} {self.threshold:g}"
        low, high = worst.kappa_low, worst.kappa_high
        interval = f" [{_kappa(low)}, {_kappa(high)}]" if low is not None else ""
        where = f" ({worst.provider}, {worst.agent})" if len(mine) > 1 else ""
        message = (
            f"κ {_kappa(worst.kappa)}{interval} on n={worst.n} matched items ({worst.n_labelled} "
            f"labelled, {worst.n_errored} errored), agreement {_kappa(worst.agreement)}{where}; "
            f"{tail}"
        )
        fields |= {"observed": worst.kappa, "n": worst.n, "errored": worst.n_errored}
        return ClauseResult(**fields, message=message)


def _kappa(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def judge_agreement(
    metric: str,
    *,
    labels: str | None = None,
    agent: str | None = None,
    min_n: int = 20,
) -> Aggregate:
    """Cohen's κ of ``metric`` against the human labels in ``labels``; compare it to make a
    clause: ``judge_agreement("relevance", labels="labels.jsonl") >= 0.6``."""
    return Aggregate("judge_agreement", metric, agent, labels=labels, min_n=min_n)


# --------------------------------------------------------------------------------------------
# Text form


ACCEPTED_FORMS = (
    "mean(METRIC) >= NUMBER",
    "pass_rate(METRIC) >= RATE",
    "at_most(COUNT, METRIC, below=NUMBER)",
    "all_pass(METRIC)",
    "no_errors()  or  no_errors(METRIC)",
    "error_rate() <= RATE  or  error_rate(METRIC) <= RATE",
    "judge_agreement(METRIC, labels=FILE) >= KAPPA  (min_n=N, default 20)",
    "any of the first four with max_errors=N (default 0), max_error_rate=RATE or min_n=N "
    "(default 1) among its arguments",
)
"""The clause texts ``parse_gates`` accepts (the comparison may be >=, >, <= or <)."""

_BARE_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<op>>=|<=|>|<)
      | (?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)
      | (?P<str>"(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"|'[^']*')
      | (?P<name>[A-Za-z_][\w.\-]*)
      | (?P<punct>[(),=:])
      | (?P<bad>\S)
    )""",
    re.VERBOSE,
)
_VALUE = ("num", "name", "str")

Token = tuple[str, Any]


def _help(source: str, text: str, problem: str) -> GateSyntaxError:
    forms = "\n".join(f"  {form}" for form in ACCEPTED_FORMS)
    return GateSyntaxError(
        f"{source}: cannot read gate clause {text!r}: {problem}.\nAccepted forms:\n{forms}\n"
        "The comparison is one of >=, >, <=, <. For one agent of a workflow, prefix it "
        "('writer: mean(relevance) >= 3.5') or write {clause: ..., agent: writer}. Quote a name "
        'with spaces: all_pass("Expected fact").'
    )


def _tokens(text: str) -> list[Token]:
    out: list[Token] = []
    for match in _TOKEN.finditer(text):
        kind = str(match.lastgroup)
        raw = match.group(kind)
        if kind == "bad":
            raise GateSyntaxError(f"unexpected {text[match.start(kind) :].strip()[:20]!r}")
        if kind == "num":
            value: Any = float(raw) if any(c in raw for c in ".eE") else int(raw)
        elif kind == "str":
            value = json.loads(raw, strict=False) if raw.startswith('"') else raw[1:-1]
        else:
            value = raw
        out.append((kind, value))
    return out


_KINDS: dict[str, tuple[type[Clause], dict[str, Any]]] = {
    "mean": (Threshold, {"kind": "mean"}),
    "pass_rate": (Threshold, {"kind": "pass_rate"}),
    "at_most": (AtMost, {}),
    "all_pass": (AllPass, {}),
    "no_errors": (NoErrors, {}),
    "error_rate": (ErrorRate, {"metric": None}),
    "judge_agreement": (JudgeAgreement, {}),
}
"""Every clause kind: its class (which says how its text is written) and what the kind sets."""
_NEEDS = {"at_most": ("count", "metric", "below"), "no_errors": (), "error_rate": ()}


def _parse_one(text: str, agent: str | None) -> Clause:
    """The clause ``text`` says (raises GateSyntaxError naming the problem alone)."""
    tokens = _tokens(text)
    # An agent prefix: NAME ":" or "quoted" ":".
    if len(tokens) >= 2 and tokens[0][0] in ("name", "str") and tokens[1] == ("punct", ":"):
        prefix = str(tokens[0][1])
        if agent is not None and agent != prefix:
            raise GateSyntaxError(f"agent {prefix!r} in the text and {agent!r} beside it")
        agent, tokens = prefix, tokens[2:]
    if not tokens or tokens[0][0] != "name":
        raise GateSyntaxError("expected a clause name")
    fname = str(tokens[0][1])
    if fname not in _KINDS:
        raise GateSyntaxError(f"unknown clause {fname!r} (known: {', '.join(_KINDS)})")
    build, preset = _KINDS[fname]
    if tokens[1:2] != [("punct", "(")]:
        raise GateSyntaxError(f"expected '(' after {fname}")
    if ("punct", ")") not in tokens:
        raise GateSyntaxError("missing ')'")
    close = tokens.index(("punct", ")"))
    groups: list[list[Token]] = [[]]  # the arguments, split at the commas
    for token in tokens[2:close]:
        if token == ("punct", ","):
            groups.append([])
        else:
            groups[-1].append(token)
    args: list[Any] = []
    params: dict[str, Any] = {}
    for group in groups[:-1] if not groups[-1] else groups:  # a trailing comma is allowed
        match group:
            case [(kind, value)] if kind in _VALUE:
                if params:
                    raise GateSyntaxError("a positional argument after a keyword one")
                args.append(value)
            case [("name", key), ("punct", "="), (kind, value)] if kind in _VALUE:
                if key not in build.keywords:
                    raise GateSyntaxError(f"{fname}() has no argument {key!r}")
                params[key] = value
            case _:
                shown = " ".join(str(value) for _, value in group) or ","
                raise GateSyntaxError(f"unexpected {shown!r} in the arguments")
    if len(args) > len(build.positional):
        raise GateSyntaxError(
            f"{fname}() takes at most {len(build.positional)} positional arguments"
        )
    params |= dict(zip(build.positional, args, strict=False))
    if not set(_NEEDS.get(fname, ("metric",))) <= params.keys():
        problem = "a count, a metric and below=NUMBER" if fname == "at_most" else "a metric"
        raise GateSyntaxError(f"{fname}() needs {problem}")
    if "agent" in params:
        inner = str(params.pop("agent"))
        if agent is not None and inner != agent:
            raise GateSyntaxError(f"two agents: {agent!r} and {inner!r}")
        agent = inner
    params = {k: str(v) if k in ("metric", "labels") else v for k, v in params.items()}
    rest = tokens[close + 1 :]
    if build.compares:
        if len(rest) < 2 or rest[0][0] != "op" or rest[1][0] != "num":
            got = " ".join(str(value) for _, value in rest[:2])
            raise GateSyntaxError(
                f"{fname}(...) must be compared with a number, e.g. >= 3.5"
                + (f" (got {got!r})" if got else "")
            )
        params |= {"op": rest[0][1], "threshold": rest[1][1]}
        rest = rest[2:]
    if rest:
        raise GateSyntaxError(f"unexpected {rest[0][1]!r} after the clause")
    return build(**preset | params | {"agent": agent})


def parse_gates(specs: Iterable[str | Mapping[str, Any]], *, source: str = "gates") -> list[Clause]:
    """Clauses from their text form, as a suite's YAML lists them.

    Each spec is a string (``"mean(relevance) >= 3.5"``, ``"writer: all_pass(expected_fact)"``) or
    a mapping ``{clause: <string>, agent: <name>}``. Names may be quoted; numbers are numbers. The
    text is tokenized and matched against the known clauses: nothing is evaluated as Python.

    Args:
        specs: the clause specs.
        source: where they came from, for error messages (e.g. ``"suite.yaml: gates"``).

    Raises:
        GateSyntaxError: naming ``source[index]`` and the clause, with the accepted forms.
    """
    if isinstance(specs, str | Mapping):
        specs = [specs]
    return [_parse_spec(spec, f"{source}[{index}]") for index, spec in enumerate(specs)]


def _parse_spec(spec: Any, where: str) -> Clause:
    agent: str | None = None
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - {"clause", "agent"})
        if unknown or not isinstance(spec.get("clause"), str):
            raise _help(
                where,
                str(dict(spec)),
                "a mapping needs a 'clause' string and may have an 'agent'"
                + (f" (unknown keys: {unknown})" if unknown else ""),
            )
        raw_agent = spec.get("agent")
        if raw_agent is not None and (not isinstance(raw_agent, str) or not raw_agent.strip()):
            raise _help(where, str(dict(spec)), f"agent must be a name, got {raw_agent!r}")
        agent = raw_agent
        text = spec["clause"]
    elif isinstance(spec, str):
        text = spec
    else:
        raise _help(where, repr(spec), f"expected a string or a mapping, got {type(spec).__name__}")
    try:
        return _parse_one(text, agent)
    except GateSyntaxError as exc:
        raise _help(where, text, str(exc)) from None
