"""Calibration: how far to trust a judge, measured against human labels (docs/judges.md).

:func:`read_labels` reads a labels file (JSONL, or CSV with a header; a bad line is a
:class:`LabelsError` naming the file, the line and the field); :func:`calibrate` compares every
(provider, agent, metric) that has labels with the judge's verdicts on the same items: agreement,
Cohen's κ, F1 at catching fails and the confusion matrix for pass/fail labels, Spearman, Pearson
and MAE for numeric ones, each rate with a seeded percentile bootstrap interval. Labels for what the
run does not have are refused, never dropped; items the judge could not evaluate, and items whose
labellers tie, are counted apart, never as agreement or disagreement.

Nothing here imports Prefect; the review flow that collects labels is ``evalpipe.pipeline.review``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations, zip_longest
from pathlib import Path
from statistics import multimode
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evalpipe.results import EvalResults
from evalpipe.tally import ERROR, FAIL, OVERALL, PASS, score_status

__all__ = [
    "CALIBRATION_FILE",
    "DEFAULT_MIN_N",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "Calibration",
    "CalibrationFile",
    "Confusion",
    "InterAnnotator",
    "Label",
    "LabelsError",
    "Matrix",
    "ReviewItem",
    "Verdict",
    "calibrate",
    "calibrations_for",
    "check_labels",
    "cohen_kappa",
    "read_calibration",
    "read_labels",
    "review_candidates",
    "sample_for_review",
    "verdicts_of_results",
    "verdicts_of_run",
    "write_calibration",
    "write_labels",
]

DEFAULT_SEED = 20261204
"""The bootstrap's seed unless one is given (stated in every result)."""
DEFAULT_RESAMPLES = 2000
"""Bootstrap resamples unless told otherwise."""
DEFAULT_MIN_N = 20
"""Matched items below which a result warns and ``judge_agreement`` fails (LangSmith's anchor:
at least 20 balanced labels)."""
CALIBRATION_FILE = "calibration.json"
"""The name ``evalpipe calibrate`` writes beside the labels file when no ``--output`` is given."""

LabelValue = Literal["pass", "fail"] | Annotated[float, Field(allow_inf_nan=False)]
"""A human label: a verdict, or a finite number on the metric's scale (a number written as text
is read as one)."""

_FIELDS = ("row_id", "repetition", "agent", "metric", "label", "labeller", "note", "labelled_at")


class LabelsError(ValueError):
    """A labels file that cannot be used; the message names the file, line and field, and the fix."""


class Label(BaseModel):
    """One person's label on one item's metric."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    row_id: str = Field(min_length=1)
    """The dataset row (items.parquet's row_id, or ``query N`` for a row without one)."""
    repetition: int = Field(default=0, ge=0)
    """Which repetition of the row (0-based)."""
    agent: str = Field(default=OVERALL, min_length=1)
    """``overall`` for the whole target, else the workflow agent's name."""
    metric: str = Field(min_length=1)
    """The metric the label grades (scores.parquet's ``metric``)."""
    label: LabelValue
    """``pass``/``fail``, or a number on the metric's scale."""
    labeller: str | None = None
    """Who labelled it; labels of several labellers on one item are all kept."""
    note: str | None = None
    """Why, in the labeller's words."""
    labelled_at: str | None = None
    """When (ISO 8601), as the labeller's tool wrote it."""
    line: int = Field(default=0, exclude=True)
    """The line of the labels file it was read from (0: built in code); not written back."""

    @field_validator("label", mode="before")
    @classmethod
    def _label(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return PASS if value else FAIL
        return value.strip().lower() if isinstance(value, str) else value

    @property
    def key(self) -> tuple[str, str, int]:
        """The item it labels: (agent, row_id, repetition)."""
        return (self.agent, self.row_id, self.repetition)

    @property
    def numeric(self) -> bool:
        """The label is a number, not a verdict."""
        return not isinstance(self.label, str)


def _parse_rows(path: Path, text: str) -> Iterable[tuple[int, dict[str, Any]]]:
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        for row in reader:
            values = {k: v for k, v in row.items() if k is not None and v not in (None, "")}
            if None in row:
                raise LabelsError(
                    f"{path}:{reader.line_num}: more values than the header has columns; quote "
                    "values that contain commas"
                )
            if values:
                yield reader.line_num, values
        return
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise LabelsError(
                f"{path}:{number}: not valid JSON ({exc}); write one JSON object a line"
            ) from None
        if not isinstance(value, dict):
            raise LabelsError(
                f"{path}:{number}: expected a JSON object, got {type(value).__name__}; write one "
                'object a line: {"row_id": ..., "metric": ..., "label": "pass"}'
            )
        yield number, value


def read_labels(path: str | os.PathLike[str]) -> list[Label]:
    """The labels of a JSONL or CSV (``.csv``) labels file, in file order.

    Raises:
        LabelsError: the file is missing or empty, or a line has a bad or unknown field; the
            message names ``file:line``, the field and what to write instead.
    """
    where = Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LabelsError(
            f"{where}: no such labels file; pass the path to a JSONL or CSV file"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LabelsError(f"{where}: cannot read the labels file ({exc})") from None
    labels: list[Label] = []
    for line, row in _parse_rows(where, text):
        unknown = sorted(set(row) - set(_FIELDS))
        if unknown:
            raise LabelsError(
                f"{where}:{line}: unknown field {unknown[0]!r}; a label has the fields "
                f"{', '.join(_FIELDS)}"
            )
        try:
            labels.append(Label.model_validate({**row, "line": line}))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"][:1]) or "?"
            raise LabelsError(
                f"{where}:{line}: field {field!r}: {first['msg']} (got {row.get(field)!r}); "
                "row_id and metric are required, label is 'pass', 'fail' or a finite number"
            ) from None
    if not labels:
        raise LabelsError(f"{where}: no labels in the file; write one label a line")
    return labels


def write_labels(path: str | os.PathLike[str], labels: Iterable[Label]) -> Path:
    """Write labels as JSONL (what :func:`read_labels` reads back); returns the path."""
    where = Path(path)
    where.parent.mkdir(parents=True, exist_ok=True)
    lines = [label.model_dump_json(exclude_none=True) for label in labels]
    where.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return where


# --------------------------------------------------------------------------------------------
# The judge's side


@dataclass(frozen=True, slots=True)
class Verdict:
    """One provider's score of one metric on one item, as calibration reads it."""

    provider: str
    agent: str
    metric: str
    row_id: str
    repetition: int
    status: str
    """``pass``, ``fail``, ``error`` or ``not_applicable`` (the tally's score status)."""
    score: float | None
    item_id: str = ""

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.agent, self.row_id, self.repetition)


_VERDICTS_SQL = """
SELECT provider, agent, metric, row AS row_id, repetition, coalesce(status, 'error') AS status,
       score, item_id
FROM scored ORDER BY _pos
"""


def verdicts_of_run(run_dir: str | os.PathLike[str], *, filesystem: Any = None) -> list[Verdict]:
    """Every metric score of a finished run directory (scores.parquet joined with items.parquet
    for the dataset row and repetition)."""
    from evalpipe.artifacts.reader import records  # lazy: duckdb, only to read a run directory
    from evalpipe.report.data import scored_connection  # lazy: as above

    with scored_connection(str(run_dir), filesystem=filesystem) as con:
        return [Verdict(**r) for r in records(con, _VERDICTS_SQL)]


_SUITE_ITEM = re.compile(r"(?P<row>.+)#(?P<rep>\d+)")


def _suite_item_key(item_id: str, agent: str) -> tuple[str, int] | None:
    """The (row id, repetition) of a suite run's item id, for results whose metadata the flow
    dropped before the gate (``pipeline.shards.strip_results``): ``{row}#{rep}`` overall and
    ``{row}#{rep}/{agent}`` or ``{row}#{rep}/{agent}/{k}`` per agent (``RunPlan.item_id``,
    ``itemize.workflow_items``); None for any other id."""
    base = item_id
    if agent != OVERALL:
        head, found, tail = base.rpartition(f"/{agent}")
        if not found or not (not tail or (tail.startswith("/") and tail[1:].isdigit())):
            return None
        base = head
    match = _SUITE_ITEM.fullmatch(base)
    return (match["row"], int(match["rep"])) if match else None


def verdicts_of_results(results: Sequence[EvalResults]) -> list[Verdict]:
    """Every metric score of in-memory results (one EvalResults per provider), keyed by the
    item's ``row_id`` and ``repetition`` metadata (its item id when it has no row id)."""
    out: list[Verdict] = []

    def walk(agent: str, provider: str, result: EvalResults) -> None:
        # the dataset row and repetition come from the evaluated EvalItems (what items.parquet
        # records), else from the item result's own metadata
        given = {x.item_id: x for x in result.input_items if x.item_id is not None}
        for item in result.items:
            meta = dict(item.metadata or {})
            source = given.get(item.item_id)
            if source is not None:
                meta |= {k: v for k, v in (source.metadata or {}).items() if v is not None}
                if source.repetition is not None:
                    meta["repetition"] = source.repetition
                if source.query_index is not None:
                    meta.setdefault("query_index", source.query_index)
            row = meta.get("row_id")
            parsed = None if row is not None else _suite_item_key(item.item_id, agent)
            if parsed is not None:
                row, meta["repetition"] = parsed
            elif row is None:
                index = meta.get("query_index")
                row = f"query {index}" if index is not None else item.item_id
            repetition = int(meta.get("repetition") or 0)
            for score in item.scores:
                out.append(
                    Verdict(
                        provider=provider,
                        agent=agent,
                        metric=score.name,
                        row_id=str(row),
                        repetition=repetition,
                        status=score_status(score),
                        score=score.score,
                        item_id=item.item_id,
                    )
                )
        for key, sub in result.sub_results.items():
            walk(key, provider, sub)

    for result in results:
        walk(OVERALL, result.provider, result)
    return out


def check_labels(labels: Sequence[Label], verdicts: Sequence[Verdict], source: str) -> None:
    """Refuse labels for agents, metrics or items the run does not have.

    Raises:
        LabelsError: naming ``source:line``, what is unknown, and what the run has.
    """
    agents = {v.agent for v in verdicts}
    metrics: dict[str, set[str]] = defaultdict(set)
    for v in verdicts:
        metrics[v.agent].add(v.metric)
    items = {v.key for v in verdicts}
    for label in labels:
        where = f"{source}:{label.line}" if label.line else source
        if label.agent not in agents:
            raise LabelsError(
                f"{where}: field 'agent': the run has no agent {label.agent!r} (agents: "
                f"{', '.join(sorted(agents)) or 'none'})"
            )
        if label.metric not in metrics[label.agent]:
            raise LabelsError(
                f"{where}: field 'metric': the run has no metric {label.metric!r} for agent "
                f"{label.agent!r} (metrics: {', '.join(sorted(metrics[label.agent]))})"
            )
        if label.key not in items:
            raise LabelsError(
                f"{where}: field 'row_id': the run has no item for row {label.row_id!r}, "
                f"repetition {label.repetition}, agent {label.agent!r}; label the run's rows "
                "(items.parquet's row_id and repetition)"
            )


# --------------------------------------------------------------------------------------------
# Statistics


def cohen_kappa(a: Sequence[Any], b: Sequence[Any]) -> float | None:
    """Cohen's κ of two raters over the same items: (p_o - p_e) / (1 - p_e), categories the union
    of both; None when it is undefined (no items, or both raters used one and the same class)."""
    n = len(a)
    if n == 0 or n != len(b):
        return None
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[k] * cb[k] for k in ca) / (n * n)
    if expected >= 1.0:
        return None
    return (sum(1 for x, y in zip(a, b, strict=True) if x == y) / n - expected) / (1.0 - expected)


def _agreement(a: Sequence[Any], b: Sequence[Any]) -> float | None:
    return sum(1 for x, y in zip(a, b, strict=True) if x == y) / len(a) if len(a) else None


def _confusion(judge: Sequence[Any], human: Sequence[Any]) -> Confusion:
    pairs = Counter(zip(judge, human, strict=True))
    return Confusion(
        tp=pairs[FAIL, FAIL], fp=pairs[FAIL, PASS], fn=pairs[PASS, FAIL], tn=pairs[PASS, PASS]
    )


def _f1(judge: Sequence[Any], human: Sequence[Any]) -> float | None:
    c = _confusion(judge, human)
    return 2 * c.tp / (2 * c.tp + c.fp + c.fn) if (2 * c.tp + c.fp + c.fn) else None


def _bootstrap(
    statistic: Callable[[Sequence[Any], Sequence[Any]], float | None],
    judge: Sequence[Any],
    human: Sequence[Any],
    *,
    seed: int,
    resamples: int,
    confidence: float,
) -> tuple[float | None, float | None, int]:
    """The percentile bootstrap interval of ``statistic`` over the paired items, and how many
    resamples it was undefined on (κ of a resample of one class; F1 of one without a fail): those
    are left out of the percentiles. (None, None, 0) when it is undefined on the data itself."""
    if len(judge) < 2 or statistic(judge, human) is None:
        return None, None, 0
    from scipy import stats as _sp  # type: ignore[import-untyped, unused-ignore]  # lazy: scipy.stats, 1.2 s, only to calibrate

    def stat(items: np.ndarray) -> float:  # a resample of the pairs, by position
        value = statistic([judge[i] for i in items], [human[i] for i in items])
        return math.nan if value is None else float(value)

    with warnings.catch_warnings():
        # a resample where the statistic is undefined (nan) makes scipy's own interval nan and
        # warn; the percentiles are taken below over the defined resamples instead
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", _sp.DegenerateDataWarning)
        result = _sp.bootstrap(
            (np.arange(len(judge)),),  # what paired=True resamples
            stat,
            vectorized=False,
            n_resamples=resamples,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    dist = np.asarray(result.bootstrap_distribution, dtype=float)
    defined = dist[~np.isnan(dist)]
    undefined = int(dist.size - defined.size)
    if defined.size == 0:
        return None, None, undefined
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(defined, [100 * alpha, 100 * (1 - alpha)])
    return float(low), float(high), undefined


class Confusion(BaseModel):
    """The 2×2 confusion matrix of a pass/fail judge; *positive* is ``fail`` (what a gate exists
    to catch): tp the judge failed what people failed, fp it failed what they passed, fn it passed
    what they failed, tn both passed."""

    model_config = ConfigDict(extra="forbid")

    tp: int
    fp: int
    fn: int
    tn: int


class Matrix(BaseModel):
    """An N×M confusion matrix: ``counts[i][j]`` items the judge gave ``judge[i]`` and people
    ``human[j]``."""

    model_config = ConfigDict(extra="forbid")

    judge: list[float | str]
    human: list[float | str]
    counts: list[list[int]]


class InterAnnotator(BaseModel):
    """How the labellers agree with each other, on the items at least two of them labelled."""

    model_config = ConfigDict(extra="forbid")

    labellers: list[str]
    """Every labeller seen (``(unnamed)`` for labels without one)."""
    n: int
    """Items labelled by at least two labellers."""
    agreement: float | None
    """Share of those items on which every label agrees."""
    pair: list[str] | None = None
    """The two labellers with the most items in common, whose κ is ``kappa``."""
    pair_n: int = 0
    """Items those two both labelled."""
    kappa: float | None = None
    """Cohen's κ between the two."""


class Calibration(BaseModel):
    """How far one provider's metric agrees with people, on one agent's labelled items."""

    model_config = ConfigDict(extra="forbid")

    provider: str
    agent: str
    metric: str
    kind: Literal["pass_fail", "numeric"]
    """``pass_fail`` labels (verdicts) or ``numeric`` labels (numbers on the metric's scale)."""
    n_labels: int
    """Label lines read for this metric and agent (several labellers: several lines an item)."""
    n_labelled: int
    """Distinct items labelled."""
    n: int
    """Matched items: labelled, with a judge verdict (the denominator of every rate here)."""
    n_errored: int
    """Labelled items the judge could not evaluate: neither agreement nor disagreement."""
    n_not_applicable: int = 0
    """Labelled items the judge marked not applicable (no verdict), left out."""
    n_tied: int = 0
    """Labelled items whose labellers tie, left out (no human verdict)."""
    agreement: float | None
    """Share of matched items where the judge's verdict (or value) equals the human label."""
    agreement_low: float | None = None
    agreement_high: float | None = None
    kappa: float | None
    """Cohen's κ (unweighted); None when undefined (one class on both sides)."""
    kappa_low: float | None = None
    kappa_high: float | None = None
    f1: float | None = None
    """F1 of the judge at catching human fails (pass/fail); None when there is no fail."""
    f1_low: float | None = None
    f1_high: float | None = None
    precision: float | None = None
    """Of the judge's fails, the share people failed too."""
    recall: float | None = None
    """Of the human fails, the share the judge failed."""
    confusion: Confusion | None = None
    """The 2×2 matrix (pass/fail labels)."""
    matrix: Matrix | None = None
    """The N×M matrix (numeric labels)."""
    spearman: float | None = None
    pearson: float | None = None
    mae: float | None = None
    """Numeric labels: Spearman's ρ, Pearson's r, mean absolute error of judge vs human."""
    suggested_threshold: float | None = None
    """For a judge with numeric scores and pass/fail labels: pass when score >= this maximises κ."""
    suggested_kappa: float | None = None
    """κ at the suggested threshold."""
    judge_pass_rate: float | None = None
    """The judge's pass rate on the matched items (for reading κ beside it)."""
    human_pass_rate: float | None = None
    """People's pass rate on the matched items."""
    inter_annotator: InterAnnotator | None = None
    """When at least two labellers labelled this metric."""
    seed: int
    resamples: int
    confidence: float
    interval_method: str = "percentile bootstrap over matched items (scipy.stats.bootstrap)"
    kappa_undefined_resamples: int = 0
    """Resamples on which κ was undefined (one class), left out of its interval."""
    warnings: list[str] = Field(default_factory=list)


def _human_value(labels: Sequence[Label]) -> LabelValue | None:
    """The item's human label: the majority verdict (None on a tie), or the median number."""
    if labels[0].numeric:
        return float(np.median([float(x.label) for x in labels]))
    modes = multimode(str(x.label) for x in labels)
    return modes[0] if len(modes) == 1 else None  # type: ignore[return-value]


def _inter_annotator(by_item: Mapping[Any, Sequence[Label]]) -> InterAnnotator | None:
    # each item's label by labeller (a labeller's last label of the item)
    named = [{x.labeller or "(unnamed)": x.label for x in labels} for labels in by_item.values()]
    names = sorted({name for item in named for name in item})
    if len(names) < 2:
        return None
    multi = [labels for labels in by_item.values() if len(labels) >= 2]
    agree = sum(1 for labels in multi if len({x.label for x in labels}) == 1)
    shared = Counter(pair for item in named for pair in combinations(sorted(item), 2))
    out = InterAnnotator(
        labellers=names, n=len(multi), agreement=agree / len(multi) if multi else None
    )
    if shared:
        (a, b), count = min(shared.items(), key=lambda kv: (-kv[1], kv[0]))
        both = [item for item in named if a in item and b in item]
        xs, ys = [item[a] for item in both], [item[b] for item in both]
        out.pair, out.pair_n, out.kappa = [a, b], count, cohen_kappa(xs, ys)
    return out


def _suggest(scores: Sequence[float], human: Sequence[str]) -> tuple[float | None, float | None]:
    """The threshold t (among the judge's scores) for which "pass when score >= t" maximises κ
    against the human verdicts; the lowest such t on a tie."""
    best: tuple[float | None, float | None] = (None, None)
    for t in sorted(set(scores)):
        judged = [PASS if s >= t else FAIL for s in scores]
        k = cohen_kappa(judged, human)
        if k is not None and (best[1] is None or k > best[1] + 1e-12):
            best = (t, k)
    return best


def _one(
    provider: str,
    agent: str,
    metric: str,
    labels: Sequence[Label],
    verdicts: Mapping[tuple[str, str, int], Verdict],
    *,
    seed: int,
    resamples: int,
    confidence: float,
) -> Calibration:
    by_item: dict[tuple[str, str, int], list[Label]] = defaultdict(list)
    for label in labels:
        by_item[label.key].append(label)
    numeric = labels[0].numeric
    judge: list[Any] = []
    human: list[Any] = []
    scores: list[float | None] = []
    errored = not_applicable = tied = 0
    for key, item_labels in by_item.items():
        verdict = verdicts[key]
        if verdict.status == ERROR:
            errored += 1
            continue
        value = _human_value(item_labels)
        if value is None:
            tied += 1
            continue
        if numeric:
            said: float | str | None = None if verdict.score is None else float(verdict.score)
        else:
            said = verdict.status if verdict.status in (PASS, FAIL) else None
        if said is None:
            not_applicable += 1
            continue
        judge.append(said)
        scores.append(verdict.score)
        human.append(value)

    # each rate with its interval, and the resamples it was undefined on
    rates: dict[str, Any] = {}
    undefined: dict[str, int] = {}
    statistics = {"agreement": _agreement, "kappa": cohen_kappa, **({} if numeric else {"f1": _f1})}
    for name, statistic in statistics.items():
        low, high, undefined[name] = _bootstrap(
            statistic, judge, human, seed=seed, resamples=resamples, confidence=confidence
        )
        rates |= {name: statistic(judge, human), f"{name}_low": low, f"{name}_high": high}
    out = Calibration(
        provider=provider,
        agent=agent,
        metric=metric,
        kind="numeric" if numeric else "pass_fail",
        n_labels=len(labels),
        n_labelled=len(by_item),
        n=len(judge),
        n_errored=errored,
        n_not_applicable=not_applicable,
        n_tied=tied,
        **rates,
        seed=seed,
        resamples=resamples,
        confidence=confidence,
        kappa_undefined_resamples=undefined["kappa"],
        inter_annotator=_inter_annotator(by_item),
    )
    if numeric and judge:
        from scipy import stats as _sp  # type: ignore[import-untyped, unused-ignore]  # lazy: scipy.stats, 1.2 s, only to calibrate

        x, y = np.asarray(judge, dtype=float), np.asarray(human, dtype=float)
        if np.ptp(x) > 0 and np.ptp(y) > 0:  # Spearman and Pearson need variation on both sides
            out.spearman = float(_sp.spearmanr(x, y).statistic)
            out.pearson = float(_sp.pearsonr(x, y).statistic)
        out.mae = float(np.mean(np.abs(x - y)))
        (values_j, values_h), counts = _sp.contingency.crosstab(x, y)
        out.matrix = Matrix(
            judge=values_j.tolist(), human=values_h.tolist(), counts=counts.tolist()
        )
    elif not numeric:
        out.confusion = c = _confusion(judge, human)
        out.precision = c.tp / (c.tp + c.fp) if c.tp + c.fp else None
        out.recall = c.tp / (c.tp + c.fn) if c.tp + c.fn else None
        if judge:
            out.judge_pass_rate = (c.tn + c.fn) / len(judge)
            out.human_pass_rate = (c.fp + c.tn) / len(judge)
        numbers = [s for s in scores if s is not None]
        if len(numbers) == len(scores) and len(set(numbers)) > 2:
            out.suggested_threshold, out.suggested_kappa = _suggest(numbers, human)
    if out.n < DEFAULT_MIN_N:
        out.warnings.append(
            f"only {out.n} matched items (fewer than {DEFAULT_MIN_N}): the interval is too wide "
            "to trust; label more (50-100 is the usual advice)"
        )
    if human and len(set(human)) == 1:
        out.warnings.append(
            f"the human labels are all one class ({human[0]}): κ cannot tell agreement from "
            "chance; label items of both classes"
        )
    if undefined["kappa"]:
        out.warnings.append(
            f"κ was undefined on {undefined['kappa']} of {resamples} bootstrap resamples (one class), "
            "left out of its interval: too few labels of one class"
        )
    if errored:
        out.warnings.append(f"{errored} labelled items errored in the judge and were left out")
    return out


def calibrate(
    verdicts: Sequence[Verdict],
    labels: Sequence[Label],
    *,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    source: str = "labels",
) -> list[Calibration]:
    """Agreement of every (provider, agent, metric) that has labels with those labels.

    Args:
        verdicts: the run's scores (:func:`verdicts_of_run` or :func:`verdicts_of_results`).
        labels: the human labels (:func:`read_labels`).
        seed: the bootstrap's seed (each statistic resamples with a generator of this seed).
        resamples: bootstrap resamples.
        confidence: the intervals' confidence level.
        source: the labels' file, for error messages.

    Raises:
        LabelsError: a label names an agent, metric or item the run does not have, or one metric
            of one agent has both pass/fail and numeric labels.
    """
    check_labels(labels, verdicts, source)
    grouped: dict[tuple[str, str], list[Label]] = defaultdict(list)
    for label in labels:
        grouped[(label.agent, label.metric)].append(label)
    for (agent, metric), group in grouped.items():
        if odd := next((x for x in group if x.numeric != group[0].numeric), None):
            raise LabelsError(
                f"{source}:{odd.line}: field 'label': metric {metric!r} of agent {agent!r} has "
                "both pass/fail and numeric labels; label one metric one way"
            )
    by_provider: dict[tuple[str, str, str], dict[tuple[str, str, int], Verdict]] = defaultdict(dict)
    for v in verdicts:
        by_provider[(v.provider, v.agent, v.metric)].setdefault(v.key, v)
    return [
        _one(*key, mine, found, seed=seed, resamples=resamples, confidence=confidence)
        for key, found in sorted(by_provider.items())
        if (mine := [x for x in grouped.get(key[1:], []) if x.key in found])
    ]


# --------------------------------------------------------------------------------------------
# The result file


class CalibrationFile(BaseModel):
    """What ``evalpipe calibrate`` writes: the run, the labels, and one result per metric."""

    model_config = ConfigDict(extra="forbid")

    run_dir: str
    run_name: str | None = None
    labels: str
    calibrations: list[Calibration]


def write_calibration(
    path: str | os.PathLike[str],
    run_dir: str,
    labels: str,
    calibrations: Sequence[Calibration],
    run_name: str | None = None,
) -> Path:
    """Write a calibration result file (JSON) that :func:`read_calibration` reads back."""
    where = Path(path)
    where.parent.mkdir(parents=True, exist_ok=True)
    data = CalibrationFile(
        run_dir=run_dir, run_name=run_name, labels=labels, calibrations=list(calibrations)
    )
    where.write_text(data.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return where


def read_calibration(path: str | os.PathLike[str]) -> CalibrationFile:
    """A calibration result file, as the report and the view read it.

    Raises:
        LabelsError: the file is missing or not a calibration result.
    """
    where = Path(path)
    try:
        return CalibrationFile.model_validate_json(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LabelsError(
            f"{where}: no such calibration file; write it with `evalpipe calibrate`"
        ) from None
    except ValidationError as exc:
        raise LabelsError(f"{where}: not a calibration result ({exc.errors()[0]['msg']})") from None


# --------------------------------------------------------------------------------------------
# Choosing items for a reviewer (the review flow, evalpipe.pipeline.review, shows them)


@dataclass(frozen=True, slots=True)
class ReviewItem:
    """One item a reviewer is asked to label, with what the judge said of it."""

    row_id: str
    repetition: int
    agent: str
    provider: str
    item_id: str
    query: str | None
    response: str | None
    judge_status: str
    """The judge's verdict on the metric: ``pass`` or ``fail``."""
    judge_score: float | None
    judge_reason: str | None
    disagrees: bool
    """A local check on the same item gave the other verdict."""


_REVIEWED_SQL = """
SELECT row AS row_id, repetition, agent, provider, item_id, status AS judge_status,
       score AS judge_score, _pos
FROM scored WHERE metric = ? AND status IN ('pass', 'fail') ORDER BY _pos
"""
"""A metric's verdicts, in file order."""


def review_candidates(
    run_dir: str | os.PathLike[str], metric: str, *, filesystem: Any = None
) -> list[ReviewItem]:
    """The items of a finished run whose ``metric`` has a verdict (errored and not-applicable
    scores cannot be compared with a label, so they are not offered), in item order."""
    from evalpipe.artifacts import read_rows  # lazy: pyarrow, only to read a run directory
    from evalpipe.artifacts.reader import records  # lazy: duckdb, only to read a run directory
    from evalpipe.report.data import (  # lazy: as above
        metric_kinds,
        query_disagreements,
        scored_connection,
    )

    with scored_connection(str(run_dir), filesystem=filesystem) as con:
        [(every,)] = con.execute("SELECT count(*) FROM scored").fetchall()
        flagged = {
            (x.agent, x.item_id)
            for d in query_disagreements(con, metric_kinds(con), every)
            if d.judge == metric
            for x in d.examples
        }
        mine = records(con, _REVIEWED_SQL, [metric])
    texts = read_rows(
        str(run_dir),
        "scores",
        [r.pop("_pos") for r in mine],
        columns=["input_text", "output_text", "reason"],
        filesystem=filesystem,
    )
    return [
        ReviewItem(
            **r,
            query=text["input_text"],
            response=text["output_text"],
            judge_reason=text["reason"],
            disagrees=(r["agent"], r["item_id"]) in flagged,
        )
        for r, text in zip(mine, texts, strict=True)
    ]


def sample_for_review(
    items: Sequence[ReviewItem], n: int, *, seed: int = DEFAULT_SEED
) -> list[ReviewItem]:
    """At most ``n`` items, balanced between the judge's passes and fails (as the anchors advise:
    a judge is calibrated on both classes), judge-vs-check disagreements first within each;
    the rest drawn at random (seeded). One item per (agent, row, repetition)."""
    rng = np.random.default_rng(seed)
    first: dict[tuple[str, str, int], ReviewItem] = {}
    for item in items:
        first.setdefault((item.agent, item.row_id, item.repetition), item)
    ordered: dict[str, list[ReviewItem]] = {}
    for status in (PASS, FAIL):
        group = [x for x in first.values() if x.judge_status == status]
        shuffled = [group[i] for i in rng.permutation(len(group))]
        ordered[status] = sorted(shuffled, key=lambda x: not x.disagrees)
    half = n // 2
    take_fail = min(len(ordered[FAIL]), max(half, n - len(ordered[PASS])))
    take_pass = min(len(ordered[PASS]), n - take_fail)
    fails, passes = ordered[FAIL][:take_fail], ordered[PASS][:take_pass]
    interleaved = [x for pair in zip_longest(fails, passes) for x in pair if x is not None]
    return sorted(interleaved, key=lambda x: not x.disagrees)  # stable: disagreements first


CALIBRATION_DEPTH = 3
"""How deep under a runs root :func:`calibrations_for` looks for calibration files."""


def calibrations_for(root: str | os.PathLike[str], run_name: str) -> list[Calibration]:
    """The calibration results for the run ``run_name`` found under a local runs ``root``: files
    named ``*calibration*.json`` at most :data:`CALIBRATION_DEPTH` levels below it (beside a run
    directory, say ``runs/<suite>/<run>.calibration.json``) whose ``run_name`` is the run's.
    The newest file wins per (provider, agent, metric); files that are not calibration results
    are ignored; a root that is a URI has none."""
    if "://" in str(root):
        return []
    base = Path(root)
    found: list[tuple[float, CalibrationFile]] = []
    for level in range(CALIBRATION_DEPTH + 1):
        for path in base.glob("/".join(["*"] * level + ["*calibration*.json"])):
            try:
                data = CalibrationFile.model_validate_json(path.read_text(encoding="utf-8"))
                stamp = path.stat().st_mtime
            except (OSError, ValueError):
                continue
            if data.run_name == run_name:
                found.append((stamp, data))
    newest: dict[tuple[str, str, str], Calibration] = {}
    for _, data in sorted(found, key=lambda x: x[0]):
        for c in data.calibrations:
            newest[(c.provider, c.agent, c.metric)] = c
    return [newest[k] for k in sorted(newest)]
