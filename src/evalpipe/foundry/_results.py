"""Foundry output items as evalpipe results: scores, composites, and the flat view (counting and
merging are the tally's)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe.foundry._evaluators import EvaluatorSpec
from evalpipe.items import EvalItem
from evalpipe.results import EvalItemResult, EvalResults, EvalScoreResult, RubricScore
from evalpipe.tally import (
    ERROR,
    NOT_APPLICABLE,
    ItemStatus,
    item_status,
    normalize_status,
    score_status,
)

__all__ = [
    "PROVIDER",
    "error_of",
    "errored_item",
    "flat_rows",
    "flat_view",
    "item_result",
]

PROVIDER = "Microsoft Foundry"
"""MAF's provider name for FoundryEvals results."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _usage(raw: Any) -> dict[str, int] | None:
    """OpenAI usage (prompt/completion tokens) as evalpipe's input/output/total tokens."""
    if not isinstance(raw, Mapping):
        return None
    prompt = int(raw.get("prompt_tokens") or raw.get("input_tokens") or 0)
    completion = int(raw.get("completion_tokens") or raw.get("output_tokens") or 0)
    total = int(raw.get("total_tokens") or 0) or prompt + completion
    if not total:
        return None
    usage = {"input_tokens": prompt, "output_tokens": completion, "total_tokens": total}
    cached = int(raw.get("cached_tokens") or 0)
    if cached:
        usage["cached_tokens"] = cached
    return usage


def error_of(raw: Any) -> tuple[str | None, str | None]:
    """``(code, message)`` of an error object or text."""
    if isinstance(raw, str):
        return None, raw or None
    if isinstance(raw, Mapping):
        code, message = raw.get("code"), raw.get("message")
        return (str(code) if code else None, str(message) if message else None)
    return None, None


def _dimensions(raw: Any) -> list[RubricScore] | None:
    if not isinstance(raw, Mapping):
        return None
    dims = raw.get("dimension_scores") or raw.get("rubric_scores")
    if not isinstance(dims, list):
        return None
    out = []
    for d in dims:
        if isinstance(d, Mapping):
            score = _number(d.get("score"))
            out.append(
                RubricScore(
                    id=str(d.get("id", "")),
                    score=int(score) if score is not None else None,
                    applicable=bool(d.get("applicable", True)),
                    weight=int(d.get("weight") or 1),
                    reason=str(d.get("reason") or ""),
                )
            )
    return out or None


def _score(raw: Mapping[str, Any], specs: Mapping[str, EvaluatorSpec]) -> EvalScoreResult:
    name = str(raw.get("name") or raw.get("metric") or "unknown")
    metric = raw.get("metric")
    evaluator: str | None = None
    spec = specs.get(name)
    if (
        spec is not None
        and spec.components
        and isinstance(metric, str)
        and metric not in (name, spec.short)
    ):
        # A component result of a composite: reported under its own metric name.
        evaluator = name
        name = metric
    sample = raw.get("sample") if isinstance(raw.get("sample"), Mapping) else None
    label = raw.get("label")
    label = str(label) if label is not None else None
    passed = raw.get("passed")
    passed = bool(passed) if isinstance(passed, bool | int) else None
    if passed is None and label in ("pass", "fail"):
        passed = label == "pass"
    if label is None and passed is not None:
        label = "pass" if passed else "fail"
    code, message = error_of(raw.get("error"))
    if code is None and message is None and sample is not None:
        code, message = error_of(sample.get("error"))
    reason = raw.get("reason")
    return EvalScoreResult(
        name=name,
        score=_number(raw.get("score")),
        passed=passed,
        sample=dict(sample) if sample is not None else None,
        dimensions=_dimensions(raw.get("properties")),
        reason=str(reason) if reason is not None else None,
        threshold=_number(raw.get("threshold")),
        label=label,
        error_message=message,
        error_code=code or ("EvaluatorError" if message else None),
        evaluator=evaluator,
        token_usage=_usage(sample.get("usage")) if sample is not None else None,
    )


def _is_errored(score: EvalScoreResult) -> bool:
    return score_status(score) == ERROR


def _composite_parent(spec: EvaluatorSpec, components: list[EvalScoreResult]) -> EvalScoreResult:
    """The parent verdict of a composite: passes when every applicable component passes.

    A component without a verdict (not applicable) is skipped; when all are skipped the parent is
    not_applicable. An errored component makes the parent errored.
    """
    errored = [c.name for c in components if _is_errored(c)]
    applicable = [c for c in components if c.passed is not None]
    if errored:
        return EvalScoreResult(
            spec.name,
            None,
            None,
            error_message=f"component(s) errored: {', '.join(errored)}",
            error_code="ComponentError",
        )
    if not applicable:
        return EvalScoreResult(
            spec.name, None, None, label=NOT_APPLICABLE, reason="no component was applicable"
        )
    failing = [c.name for c in applicable if not c.passed]
    return EvalScoreResult(
        spec.name,
        0.0 if failing else 1.0,
        not failing,
        label="fail" if failing else "pass",
        reason=f"failed component(s): {', '.join(failing)}"
        if failing
        else "every applicable component passed",
    )


def item_result(
    output_item: Mapping[str, Any],
    item: EvalItem,
    item_id: str,
    specs: Sequence[EvaluatorSpec],
) -> EvalItemResult:
    """One output item as an EvalItemResult for ``item``."""
    by_name = {s.name: s for s in specs}
    raw_results = output_item.get("results") or []
    scores = [_score(r, by_name) for r in raw_results if isinstance(r, Mapping)]
    for spec in specs:
        if not spec.components:
            continue
        components = [s for s in scores if s.evaluator == spec.name]
        parent = next((s for s in scores if s.name == spec.name and s.evaluator is None), None)
        if components and (parent is None or (parent.passed is None and not _is_errored(parent))):
            derived = _composite_parent(spec, components)
            if parent is None:
                scores.insert(scores.index(components[0]), derived)
            else:
                scores[scores.index(parent)] = derived
    sample = output_item.get("sample")
    sample = sample if isinstance(sample, Mapping) else {}
    code, message = error_of(sample.get("error"))
    usage = _usage(sample.get("usage"))
    if usage is None:  # the item's usage: its scores' summed
        total: Counter[str] = Counter()
        for score in scores:
            total.update(score.token_usage or {})
        usage = dict(total) or None
    top = [s for s in scores if s.evaluator is None]
    raw_status = output_item.get("status")
    status: ItemStatus
    if raw_status in ("pass", "fail", "error", "errored"):
        status = normalize_status(str(raw_status))
    else:
        status = item_status(scores, errored=bool(code or message), empty=ERROR)
    if status == "error" and not (code or message):
        first = next((s for s in top if _is_errored(s)), None)
        code = (first.error_code if first else None) or "EvaluatorError"
        message = (first.error_message if first else None) or "the evaluator reported no result"
    datasource = output_item.get("datasource_item")
    response_id = None
    if isinstance(datasource, Mapping):
        rid = datasource.get("resp_id") or datasource.get("response_id")
        response_id = str(rid) if rid else None
    query, response = item.query_and_response()
    return EvalItemResult(
        item_id=item_id,
        status=status,
        scores=scores,
        error_code=code,
        error_message=message,
        response_id=response_id,
        input_text=query,
        output_text=response,
        token_usage=usage,
        metadata=item.result_metadata(),
    )


def errored_item(item: EvalItem, item_id: str, code: str, message: str) -> EvalItemResult:
    """An item that has no evaluation: the run never produced it (timeout, failure, ...)."""
    query, response = item.query_and_response()
    return EvalItemResult(
        item_id=item_id,
        status="error",
        error_code=code,
        error_message=message,
        input_text=query,
        output_text=response,
        metadata=item.result_metadata(),
    )


def flat_view(result: EvalItemResult) -> dict[str, Any]:
    """One item's scores in azure-ai-evaluation's flat form.

    ``{metric}`` (the score), ``{metric}_result`` (pass, fail or not_applicable),
    ``{metric}_threshold`` and ``{metric}_reason``; ``{metric}_label`` when the label is not a
    pass/fail word (a severity, for example), and ``{metric}_error`` for an errored metric.
    """
    flat: dict[str, Any] = {}
    for s in result.scores:
        key = s.name
        flat[key] = s.score
        if s.passed is not None:
            flat[f"{key}_result"] = "pass" if s.passed else "fail"
        elif s.label == NOT_APPLICABLE:
            flat[f"{key}_result"] = NOT_APPLICABLE
        else:
            flat[f"{key}_result"] = None
        flat[f"{key}_threshold"] = s.threshold
        flat[f"{key}_reason"] = s.reason
        if s.label is not None and s.label not in ("pass", "fail", NOT_APPLICABLE):
            flat[f"{key}_label"] = s.label
        if s.error_message or s.error_code:
            flat[f"{key}_error"] = s.error_message or s.error_code
    return flat


def flat_rows(results: EvalResults) -> list[dict[str, Any]]:
    """Every item (and sub-result item) as ``{"item_id", "status", **flat_view(item)}``."""
    return [
        {"item_id": item.item_id, "status": item.status, **flat_view(item)}
        for r in results.iter_results()
        for item in r.items
    ]
