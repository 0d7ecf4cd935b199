"""Deterministic evaluators: checks that need no model, for use inside ``LocalEvaluator``.

Text overlap with one or more references (``bleu``, ``gleu``, ``token_f1``), a fact the response
must state (``expected_fact_check``), the tool-call trajectory against the expected calls
(``task_navigation_efficiency``) and tool results free of errors (``tool_call_success``). Each
gives a check (``EvalItem -> CheckResult``) with a float score. The text metrics are on a 0-1
scale and take ``threshold`` (pass at ``score >= threshold``; a ValueError outside [0, 1]),
``references_from`` (see ``ReferenceSource``; a ValueError for an unknown one), ``name`` (the
metric's) and, for BLEU and GLEU, ``lowercase``. A reference the item lacks is an error of that
item (``CheckError``, naming what to provide), never a silent 0. See docs/evaluators.md.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from evalpipe.checks import CheckResult, EvalCheck, _named
from evalpipe.items import EvalItem, ExpectedToolCall
from evalpipe.messages import FunctionCallContent, FunctionResultContent

# Only the evaluators (and their error and reference type) are listed: suites enumerate this list for
# their short forms. The helpers NavigationMode, references_of and tool_result_error are public too.
__all__ = [
    "MissingReferenceError",
    "ReferenceSource",
    "bleu",
    "expected_fact_check",
    "gleu",
    "task_navigation_efficiency",
    "token_f1",
    "tool_call_success",
]

ReferenceSource = str | Callable[[EvalItem], "str | Sequence[str] | None"]
"""Where a text metric finds an item's references: ``"default"`` (``expected_output`` and then
``metadata["references"]``), ``"expected_output"``, ``"metadata.<key>"``, or a callable
``item -> str | list[str] | None``."""

NavigationMode = Literal["exact_match", "in_order_match", "any_order_match"]
"""How ``task_navigation_efficiency`` decides pass: the same calls in the same order and nothing
else; every expected call in order, extra calls allowed; every expected call in any order, extra
calls allowed."""

_REFERENCES_KEY = "references"
_FACT_KEY = "expected_fact"


class MissingReferenceError(ValueError):
    """An item lacks what a deterministic evaluator compares against; the message says what to set.

    Raised inside a check, so ``LocalEvaluator`` reports that item as errored (``CheckError``).
    """


def _check_threshold(threshold: float, metric: str) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise TypeError(f"{metric} threshold must be a number in [0, 1], got {threshold!r}")
    if not 0.0 <= float(threshold) <= 1.0:
        raise ValueError(
            f"{metric} threshold must be in [0, 1] (scores are on a 0-1 scale), got {threshold}"
        )
    return float(threshold)


# --------------------------------------------------------------------------------------------
# References


def _reference_reader(source: ReferenceSource) -> tuple[Callable[[EvalItem], Any], str]:
    """Validate a reference source once, at construction: its reader, and what an item without
    references should set."""
    if callable(source):
        return source, f"a reference from references_from={getattr(source, '__name__', source)!r}"
    if source == "default":
        return _default_references, (
            "a reference: set the item's expected_output, or metadata['references'] to a list of "
            "strings"
        )
    if source == "expected_output":
        return lambda item: item.expected_output, "a reference: set the item's expected_output"
    if isinstance(source, str) and source.startswith("metadata.") and len(source) > 9:
        key = source[9:]
        return lambda item: item.metadata.get(key), (
            f"a reference: set the item's metadata[{key!r}] to a string or a list of strings"
        )
    raise ValueError(
        f"references_from must be 'default', 'expected_output', 'metadata.<key>' or a callable "
        f"item -> str | list[str], got {source!r}"
    )


def _default_references(item: EvalItem) -> list[Any]:
    found: list[Any] = [] if item.expected_output is None else [item.expected_output]
    extra = item.metadata.get(_REFERENCES_KEY)
    if extra is not None:
        found += [extra] if isinstance(extra, str) else _as_list(extra, "metadata['references']")
    return found


def _as_list(value: Any, where: str) -> list[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(f"{where} must be a string or a list of strings, got {type(value).__name__}")


def references_of(item: EvalItem, source: ReferenceSource = "default") -> list[str]:
    """The item's references, as a text metric reads them (blank ones dropped).

    Args:
        item: the item to read.
        source: where the references are; see ``ReferenceSource``.

    Raises:
        TypeError: when the source holds something other than strings.
        ValueError: for an unknown ``source`` string.
    """
    raw = _reference_reader(source)[0](item)
    values = [] if raw is None else [raw] if isinstance(raw, str) else _as_list(raw, "references")
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"every reference must be a string, got {type(value).__name__}")
    return [v for v in values if v.strip()]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _reference_check(
    metric: str,
    label: str,
    name: str,
    threshold: float,
    references_from: ReferenceSource,
    measure: Callable[[str, list[str]], tuple[float, str, dict[str, Any]]],
) -> EvalCheck:
    """A text metric's check: ``measure(response, references)`` gives the 0-1 score, the reason's
    tail and the details after ``threshold``; the item passes at ``score >= threshold``."""
    limit = _check_threshold(threshold, metric)
    read, needs = _reference_reader(references_from)

    def check(item: EvalItem) -> CheckResult:
        refs = references_of(item, read)
        if not refs:
            raise MissingReferenceError(f"{name} needs {needs}")
        score, tail, details = measure(item.response, refs)
        passed = score >= limit
        reason = f"{label} {score:.3f} {'>=' if passed else '<'} threshold {limit:g} {tail}"
        return CheckResult(passed, reason, name, score, {"threshold": limit, **details})

    return _named(check, name)


# --------------------------------------------------------------------------------------------
# BLEU, GLEU, token F1


def bleu(
    *,
    threshold: float = 0.5,
    references_from: ReferenceSource = "default",
    lowercase: bool = False,
    name: str = "bleu",
) -> EvalCheck:
    """Sentence BLEU of the response against the item's references (sacrebleu), on a 0-1 scale.

    sacrebleu reports 0-100; the score here is divided by 100 so every text metric, and the
    threshold, share one 0-1 scale (as azure-ai-evaluation's BleuScoreEvaluator). Defaults are
    sacrebleu's sentence BLEU: 13a tokenisation, exponential smoothing, effective order. Several
    references are scored jointly (clipped counts use the best reference; the brevity penalty the
    closest length), as BLEU defines.
    """
    from sacrebleu import sentence_bleu  # lazy: sacrebleu, ~0.3 s, only for suites that use BLEU

    def measure(response: str, refs: list[str]) -> tuple[float, str, dict[str, Any]]:
        result = sentence_bleu(response, refs, lowercase=lowercase)
        # Clamped: sacrebleu's identical-text score is 100.00000000000004.
        score = min(1.0, max(0.0, result.score / 100.0))
        details = {
            "references": len(refs),
            "precisions": [round(p / 100.0, 6) for p in result.precisions],
            "brevity_penalty": result.bp,
        }
        return score, f"against {_plural(len(refs), 'reference')}", details

    return _reference_check("bleu", "BLEU", name, threshold, references_from, measure)


def gleu(
    *,
    threshold: float = 0.5,
    references_from: ReferenceSource = "default",
    lowercase: bool = False,
    name: str = "gleu",
) -> EvalCheck:
    """Sentence GLEU of the response against the item's references (nltk), on a 0-1 scale.

    GLEU counts the 1- to 4-grams the response shares with a reference and divides by the larger of
    the two n-gram totals, so it punishes missing and extra words alike. With several references the
    best one counts (nltk's rule). Texts are tokenised with sacrebleu's 13a tokenizer, as BLEU here:
    nltk's own word tokenizer needs a data download.
    """
    from nltk.translate.gleu_score import sentence_gleu  # lazy: nltk loads scipy, ~1.5 s
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a  # lazy: only for GLEU suites

    tokenize = Tokenizer13a()  # type: ignore[no-untyped-call]

    def tokens(text: str) -> list[str]:
        tokenized: str = tokenize(text.lower() if lowercase else text)
        return tokenized.split()

    def measure(response: str, refs: list[str]) -> tuple[float, str, dict[str, Any]]:
        score = float(sentence_gleu([tokens(r) for r in refs], tokens(response)))
        return score, f"against {_plural(len(refs), 'reference')}", {"references": len(refs)}

    return _reference_check("gleu", "GLEU", name, threshold, references_from, measure)


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def _squad_tokens(text: str) -> list[str]:
    """SQuAD's answer normalisation: lower case, no ASCII punctuation or articles, split."""
    return _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split()


def _token_prf(prediction: list[str], reference: list[str]) -> tuple[float, float, float]:
    # Written by hand on purpose: SQuAD's token F1 is these few lines, and no maintained library
    # installed here exposes it per sentence (HF `evaluate` wraps it in a corpus-level metric and a
    # datasets download; azure-ai-evaluation's F1ScoreEvaluator carries the whole Azure SDK stack).
    if not prediction or not reference:
        # Both empty after normalisation (e.g. "The." vs "A"): equal, as SQuAD scores it.
        same = float(prediction == reference)
        return same, same, same
    common = sum((Counter(prediction) & Counter(reference)).values())
    if common == 0:
        return 0.0, 0.0, 0.0
    precision = common / len(prediction)
    recall = common / len(reference)
    return precision, recall, 2 * precision * recall / (precision + recall)


def token_f1(
    *,
    threshold: float = 0.5,
    references_from: ReferenceSource = "default",
    name: str = "token_f1",
) -> EvalCheck:
    """SQuAD-style token F1 of the response against the item's references, 0-1.

    Both texts are normalised (lower case, ASCII punctuation and the articles a/an/the removed,
    split on whitespace); precision is the share of response tokens found in the reference, recall
    the share of reference tokens found in the response, counting repeats. With several references
    the best F1 counts. Precision, recall and the reference used are in the metric's ``sample``.
    """

    def measure(response: str, refs: list[str]) -> tuple[float, str, dict[str, Any]]:
        prediction = _squad_tokens(response)
        best_index, best = 0, (-1.0, 0.0, 0.0)
        for index, ref in enumerate(refs):
            p, r, f = _token_prf(prediction, _squad_tokens(ref))
            if f > best[0]:
                best_index, best = index, (f, p, r)
        f1, precision, recall = best
        tail = f"(precision {precision:.3f}, recall {recall:.3f}"
        tail += f", best of {len(refs)} references)" if len(refs) > 1 else ")"
        details = {
            "precision": precision,
            "recall": recall,
            "references": len(refs),
            "reference_index": best_index,
        }
        return f1, tail, details

    return _reference_check("token_f1", "token F1", name, threshold, references_from, measure)


# --------------------------------------------------------------------------------------------
# Expected fact


def expected_fact_check(pattern: str | None = None, *, name: str = "expected_fact") -> EvalCheck:
    """The response must match a case-insensitive regular expression (``re.search``).

    Only the response text counts (as ``keyword_check``): not tool results, not the query. With
    ``pattern=None`` each item gives its own pattern in ``metadata["expected_fact"]``. Score 1.0
    when found, else 0.0.

    Args:
        pattern: the regular expression, or None to read it from each item.
        name: the check (metric) name.

    Raises:
        ValueError: when ``pattern`` is not a valid regular expression.
    """
    compiled = (
        _compile_fact(pattern, "expected_fact_check pattern") if pattern is not None else None
    )

    def check(item: EvalItem) -> CheckResult:
        regex = compiled
        if regex is None:
            raw = item.metadata.get(_FACT_KEY)
            if not isinstance(raw, str) or not raw:
                raise MissingReferenceError(
                    f"{name} needs a pattern: pass expected_fact_check(pattern) or set the item's "
                    f"metadata['{_FACT_KEY}'] to a regular expression"
                )
            regex = _compile_fact(raw, f"metadata['{_FACT_KEY}']")
        match = regex.search(item.response)
        if match is None:
            reason = f"Expected fact not found: /{regex.pattern}/i does not match the response"
        else:
            reason = f"Expected fact found: /{regex.pattern}/i matched {match.group(0)!r}"
        return CheckResult(match is not None, reason, name, float(match is not None))

    return _named(check, name)


def _compile_fact(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"{where} {pattern!r} is not a valid regular expression: {exc}") from None


# --------------------------------------------------------------------------------------------
# Tool-call trajectory


def _response_calls(item: EvalItem) -> list[FunctionCallContent]:
    _, response = item.split_messages()
    return [c for m in response for c in m.contents if isinstance(c, FunctionCallContent)]


def _call_matches(call: FunctionCallContent, expected: ExpectedToolCall) -> bool:
    """Same name and, if the expectation has arguments, a top-level subset of the call's."""
    if call.name != expected.name:
        return False
    if expected.arguments is None:
        return True
    actual = call.parsed_arguments()
    if actual is None:
        return False
    return all(k in actual and actual[k] == v for k, v in expected.arguments.items())


def _max_matching(
    calls: Sequence[FunctionCallContent], expected: Sequence[ExpectedToolCall]
) -> int:
    """Largest one-to-one pairing of calls with expectations they satisfy, order ignored (a
    maximum-weight assignment over 0/1 weights; greedy pairing can miss it)."""
    import numpy as np  # lazy, as scipy: only for this check
    from scipy.optimize import linear_sum_assignment  # type: ignore[import-untyped, unused-ignore]

    fits = np.array([[_call_matches(c, e) for c in calls] for e in expected], dtype=bool)
    fits = fits.reshape(len(expected), len(calls))
    rows, cols = linear_sum_assignment(fits, maximize=True)
    return int(fits[rows, cols].sum())


def _in_order(calls: Sequence[FunctionCallContent], expected: Sequence[ExpectedToolCall]) -> bool:
    # Taking the earliest fitting call for each expectation never loses a subsequence match.
    position = 0
    for call in calls:
        if position < len(expected) and _call_matches(call, expected[position]):
            position += 1
    return position == len(expected)


def _exact(calls: Sequence[FunctionCallContent], expected: Sequence[ExpectedToolCall]) -> bool:
    return len(calls) == len(expected) and all(
        _call_matches(c, e) for c, e in zip(calls, expected, strict=True)
    )


_MODES: dict[str, Callable[[Sequence[FunctionCallContent], Sequence[ExpectedToolCall]], bool]] = {
    "exact_match": _exact,
    "in_order_match": _in_order,
    "any_order_match": lambda calls, expected: _max_matching(calls, expected) == len(expected),
}


def task_navigation_efficiency(
    mode: NavigationMode = "exact_match", *, name: str = "task_navigation_efficiency"
) -> EvalCheck:
    """The response's tool calls against the item's ``expected_tool_calls``: precision, recall, F1.

    A call matches an expectation with the same name and, when the expectation has arguments, with
    those arguments among its own (equal values; extra arguments are fine). ``mode`` decides pass
    (see ``NavigationMode``). Precision, recall and F1 ignore order: matched = the largest
    one-to-one pairing, precision = matched / calls made (1.0 when none), recall = matched /
    calls expected (1.0 when none expected). The score is F1; precision, recall, matched and mode
    are in the metric's ``sample``.

    Args:
        mode: ``exact_match``, ``in_order_match`` or ``any_order_match``.
        name: the check (metric) name.

    Raises:
        ValueError: for an unknown mode.
    """
    if mode not in _MODES:
        raise ValueError(
            f"task_navigation_efficiency mode must be one of {list(_MODES)}, got {mode!r}"
        )
    decide = _MODES[mode]

    def check(item: EvalItem) -> CheckResult:
        expected = item.expected_tool_calls
        if expected is None:
            raise MissingReferenceError(
                f"{name} needs the item's expected_tool_calls (a list of ExpectedToolCall; "
                "[] means no tool should be called)"
            )
        calls = _response_calls(item)
        matched = _max_matching(calls, expected)
        precision = matched / len(calls) if calls else 1.0
        recall = matched / len(expected) if expected else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        passed = decide(calls, expected)
        reason = (
            f"{mode} {'passed' if passed else 'failed'}: precision {precision:.3f} "
            f"({matched}/{len(calls)} calls expected), recall {recall:.3f} "
            f"({matched}/{len(expected)} expected calls made), F1 {f1:.3f}; "
            f"called {[c.name for c in calls]}, expected {[e.name for e in expected]}"
        )
        details = {
            "mode": mode,
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "matched": matched,
            "calls": len(calls),
            "expected": len(expected),
        }
        return CheckResult(passed, reason, name, f1, details)

    return _named(check, name)


# --------------------------------------------------------------------------------------------
# Tool-call success

_ERROR_FLAGS = ("is_error", "isError")


def tool_result_error(content: FunctionResultContent) -> str | None:
    """The error a tool result carries, or None when it carries none.

    A result carries an error when any of these holds:

    - the content has a truthy ``exception`` attribute (MAF's ``FunctionResultContent.exception``);
    - its ``result`` is a mapping with a truthy ``"error"`` value, or ``"is_error"``/``"isError"``
      set to True (MCP's tool-result flag);
    - its ``result`` is a string that starts with ``"Error:"`` (any case; MAF's function loop
      writes ``"Error: Function failed."`` when a tool raises), or that is a JSON object meeting the
      mapping rule (a tool result that came through the OpenAI wire format).
    """
    exception = getattr(content, "exception", None)
    if exception:
        return str(exception)
    result = content.result
    if isinstance(result, str):
        text = result.strip()
        if text[:6].lower() == "error:":
            return text
        if text.startswith("{"):
            try:
                result = json.loads(text)
            except ValueError:
                return None
    if isinstance(result, Mapping):
        error = result.get("error")
        if error:
            return error if isinstance(error, str) else json.dumps(error, default=str)
        for flag in _ERROR_FLAGS:
            if result.get(flag) is True:
                detail = result.get("content") or result.get("message")
                return f"{flag}=true" + (f": {detail}" if detail else "")
    return None


def tool_call_success(item: EvalItem) -> CheckResult:
    """No tool result on the response side carries an error (see ``tool_result_error``).

    Score: the share of tool results without an error (1.0 when there are none). A check itself:
    pass it without calling, like ``tool_calls_present``.
    """
    _, response = item.split_messages()
    results = [c for m in response for c in m.contents if isinstance(c, FunctionResultContent)]
    if not results:
        return CheckResult(True, "No tool results in the response.", "tool_call_success", 1.0)
    names = {c.call_id: c.name for c in _response_calls(item)}
    failures = []
    for content in results:
        error = tool_result_error(content)
        if error is not None:
            tool = names.get(content.call_id, "?")
            failures.append(f"{tool} (call {content.call_id or '?'}): {error}")
    score = (len(results) - len(failures)) / len(results)
    details = {"results": len(results), "errors": len(failures)}
    if failures:
        reason = f"{len(failures)} of {len(results)} tool results carry an error: " + "; ".join(
            failures
        )
    else:
        reason = f"{_plural(len(results), 'tool result')} without an error"
    return CheckResult(not failures, reason, "tool_call_success", score, details)
