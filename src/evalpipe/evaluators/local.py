"""Local checks run in-process: ``@evaluator`` function checks and the ``LocalEvaluator`` provider.

Rules as MAF (shared spec §5-§6) with two deliberate differences (docs/maf-compatibility.md):
a check that raises makes its item errored instead of aborting the run, and the float an
``@evaluator`` returns is kept as the score instead of being collapsed to 1.0/0.0.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from itertools import groupby
from typing import Any, overload

from evalpipe._internal.calls import is_call_failure
from evalpipe.checks import CheckResult, EvalCheck
from evalpipe.evaluators.base import Evaluator
from evalpipe.items import EvalItem
from evalpipe.results import EvalItemResult, EvalResults, EvalScoreResult
from evalpipe.spend import BudgetReached
from evalpipe.tally import ERROR, item_status, make_results

__all__ = [
    "FunctionEvaluator",
    "LocalEvaluator",
    "check_name_of",
    "evaluator",
    "resolve_evaluators",
]

_SUPPORTED = (
    "context",
    "conversation",
    "expected_output",
    "expected_tool_calls",
    "query",
    "response",
    "tools",
)


def _inject(item: EvalItem, name: str) -> Any:
    value = getattr(item, name)
    if name == "expected_output":
        return value or ""
    if name == "expected_tool_calls":
        return value or []
    return value


def coerce_result(value: Any, check_name: str) -> CheckResult:
    """Turn what a function evaluator returned into a CheckResult (MAF's coercion table).

    bool → passed; int/float → passed at >= 0.5, kept as the score; dict with ``score`` (and
    optional ``passed``/``threshold``/``reason``) or with ``passed``; a CheckResult as is.

    Raises:
        TypeError: for any other value, with MAF's wording.
    """
    if isinstance(value, CheckResult):
        return value
    if isinstance(value, bool):
        return CheckResult(
            value, "passed" if value else "failed", check_name, 1.0 if value else 0.0
        )
    if isinstance(value, int | float):
        score = float(value)
        return CheckResult(score >= 0.5, f"score={score:.3f}", check_name, score)
    if isinstance(value, Mapping):
        if "score" in value:
            raw = value["score"]
            try:
                score = float(raw)
            except (TypeError, ValueError):
                raise TypeError(
                    f"Function evaluator '{check_name}' returned dict with non-numeric 'score' "
                    f"value: {raw!r}"
                ) from None
            if "passed" in value:
                passed = bool(value["passed"])
            else:
                passed = score >= float(value.get("threshold", 0.5))
            reason = str(value.get("reason", f"score={score:.3f}"))
            return CheckResult(passed, reason, check_name, score)
        if "passed" in value:
            flag = value["passed"]
            if not isinstance(flag, bool | int):
                raise TypeError(
                    f"Function evaluator '{check_name}' returned dict with non-boolean 'passed' "
                    f"value: {flag!r}"
                )
            ok = bool(flag)
            reason = str(value.get("reason", "passed" if ok else "failed"))
            return CheckResult(ok, reason, check_name, 1.0 if ok else 0.0)
    raise TypeError(
        f"Function evaluator '{check_name}' returned unsupported type {type(value).__name__}. "
        "Expected bool, float, dict, or CheckResult."
    )


class FunctionEvaluator:
    """A Python function wrapped as a local check; its parameters are filled from the item by name.

    Calling it (``await check(item)``) always gives a coroutine, as MAF's; ``run`` returns the
    CheckResult directly for a sync function, which LocalEvaluator uses to avoid one coroutine per
    item.
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.__name__: str = name or str(getattr(fn, "__name__", type(fn).__name__))
        self.__qualname__ = self.__name__
        self.__doc__ = getattr(fn, "__doc__", None)
        self.is_async = inspect.iscoroutinefunction(fn)
        signature = inspect.signature(fn)
        unknown = []
        self._params: list[str] = []
        for pname, param in signature.parameters.items():
            if pname in _SUPPORTED and param.kind not in (
                param.VAR_POSITIONAL,
                param.VAR_KEYWORD,
            ):
                self._params.append(pname)
            elif param.default is param.empty:
                unknown.append(pname)
        if unknown:
            # MAF names the function itself here, not the check name.
            fn_name = str(getattr(fn, "__name__", self.__name__))
            raise TypeError(
                f"Function evaluator '{fn_name}' has unknown required parameter(s) "
                f"{sorted(unknown)}.  Supported: {sorted(_SUPPORTED)}"
            )

        doc = (self.__doc__ or "").strip().splitlines()
        looked_for = doc[0].strip().rstrip(".") if doc else ""
        self.looked_for: str = looked_for or (
            f"{getattr(fn, '__name__', self.__name__)}({', '.join(self._params)})"
        )
        """What the check looks for, as its verdict's reason says it: the docstring's first line,
        else the function and what it is given."""

    def _kwargs(self, item: EvalItem) -> dict[str, Any]:
        return {p: _inject(item, p) for p in self._params}

    def _coerce(self, value: Any) -> CheckResult:
        """MAF's coercion; a bare verdict (a bool, or ``{"passed": ...}`` without a reason) gets a
        reason saying what was looked for, not just ``passed``/``failed``."""
        result = coerce_result(value, self.__name__)
        bare = isinstance(value, bool) or (
            isinstance(value, Mapping)
            and "passed" in value
            and "score" not in value
            and "reason" not in value
        )
        if not bare:
            return result
        verdict = "passed" if result.passed else "failed"
        return CheckResult(
            result.passed, f"{verdict}: {self.looked_for}", self.__name__, result.score
        )

    def run(self, item: EvalItem) -> CheckResult | Awaitable[CheckResult]:
        """Run the function on ``item``: a CheckResult for a sync function, an awaitable otherwise."""
        if self.is_async:
            return self._run_async(item)
        return self._coerce(self.fn(**self._kwargs(item)))

    async def _run_async(self, item: EvalItem) -> CheckResult:
        return self._coerce(await self.fn(**self._kwargs(item)))

    async def __call__(self, item: EvalItem) -> CheckResult:
        result = self.run(item)
        if isinstance(result, CheckResult):
            return result
        return await result

    def __repr__(self) -> str:
        return f"evaluator({self.__name__})"


@overload
def evaluator(fn: Callable[..., Any], *, name: str | None = None) -> FunctionEvaluator: ...
@overload
def evaluator(
    fn: None = None, *, name: str | None = None
) -> Callable[[Callable[..., Any]], FunctionEvaluator]: ...
def evaluator(
    fn: Callable[..., Any] | None = None, *, name: str | None = None
) -> FunctionEvaluator | Callable[[Callable[..., Any]], FunctionEvaluator]:
    """Wrap a function as a local check: ``@evaluator``, ``@evaluator(name=...)`` or ``evaluator(fn)``.

    Parameters named query, response, expected_output, expected_tool_calls, conversation, tools or
    context are injected from the item; any other parameter must have a default.

    Raises:
        TypeError: at decoration time, for an unknown parameter without a default.
    """
    if fn is None:
        return lambda f: FunctionEvaluator(f, name)
    return FunctionEvaluator(fn, name)


def check_name_of(check: Any) -> str:
    """The name a check reports under when it cannot report one itself (it raised)."""
    return str(getattr(check, "__name__", None) or type(check).__name__)


async def _await_check(pending: Any) -> Any:
    """Await one started check; an exception it raises becomes its outcome."""
    try:
        return await pending
    except BudgetReached:
        raise  # a check's model request refused by the run's budget: the run stops, not the check
    except BaseException as exc:
        if not is_call_failure(exc):
            raise
        return exc


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class LocalEvaluator:
    """Runs local checks on every item, in-process.

    An item passes when it has at least one check and every check passed (zero checks: every item
    fails, as MAF). A check that raises, or returns something that cannot be coerced, makes the
    item errored (error_code "CheckError"); the other items and checks are kept.
    """

    name = "Local"

    def __init__(self, *checks: EvalCheck, max_concurrency: int = 64) -> None:
        for check in checks:
            if not callable(check):
                raise TypeError(f"LocalEvaluator checks must be callable, got {check!r}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}.")
        self.checks: list[EvalCheck] = list(checks)
        self.max_concurrency = max_concurrency

    def __repr__(self) -> str:
        return f"LocalEvaluator({', '.join(check_name_of(c) for c in self.checks)})"

    @property
    def metric_names(self) -> list[str]:
        """The checks' names (each check reports under its own name)."""
        return list(dict.fromkeys(check_name_of(c) for c in self.checks))

    async def evaluate(
        self, items: Sequence[EvalItem], *, eval_name: str = "Local Eval"
    ) -> EvalResults:
        """Check every item; the result lists items in input order."""
        # A FunctionEvaluator over a sync function answers without a coroutine (see its `run`).
        runners = [c.run if isinstance(c, FunctionEvaluator) else c for c in self.checks]
        names = [check_name_of(c) for c in self.checks]
        results: list[EvalItemResult | None] = []
        waiting: list[tuple[int, list[EvalScoreResult | None], list[tuple[int, Any]]]] = []
        """Items with checks to await: their index, scores so far and (check index, awaitable)."""
        for index, item in enumerate(items):
            if item.error_code:
                results.append(_finish(index, item, None))
                continue
            scores: list[EvalScoreResult | None] = []
            later: list[tuple[int, Any]] | None = None
            # Every check starts before the next, as MAF's gather per item starts them.
            for k, run in enumerate(runners):
                out: Any
                try:
                    out = run(item)
                except BaseException as exc:
                    if not is_call_failure(exc):
                        raise
                    out = exc
                if isinstance(out, CheckResult) or not inspect.isawaitable(out):
                    scores.append(_score(out, names[k]))
                else:
                    scores.append(None)
                    later = later or []
                    later.append((k, out))
            if later is None:
                results.append(_finish(index, item, scores))  # type: ignore[arg-type]
            else:
                results.append(None)
                waiting.append((index, scores, later))
        if waiting:
            semaphore = asyncio.Semaphore(self.max_concurrency)

            async def settle(
                index: int, scores: list[EvalScoreResult | None], later: list[tuple[int, Any]]
            ) -> None:
                # The item's async checks run concurrently (as MAF's gather per item).
                async with semaphore:
                    settled = await asyncio.gather(*(_await_check(out) for _, out in later))
                for (k, _), out in zip(later, settled, strict=True):
                    scores[k] = _score(out, names[k])

            await asyncio.gather(*(settle(*one) for one in waiting))
            for index, scores, _ in waiting:
                results[index] = _finish(index, items[index], scores)  # type: ignore[arg-type]
        done: list[EvalItemResult] = results  # type: ignore[assignment]  # every slot filled
        failures = [
            f"{s.name}: {s.reason or ''}" for r in done for s in r.scores if s.passed is False
        ]
        return make_results(
            self.name,
            done,
            metrics=list(dict.fromkeys(names)),
            prefill=False,
            input_items=items,
            eval_id="local",
            run_id=eval_name,
            error="; ".join(failures) or None,
        )


def _score(out: Any, name: str) -> EvalScoreResult:
    """A check's outcome as its score: a CheckResult's verdict (no score: 1.0 if it passed, else
    0.0; its reason kept on the score); an exception, or anything else (a TypeError), makes the
    score errored."""
    if not isinstance(out, CheckResult):
        if not isinstance(out, BaseException):
            out = TypeError(f"check '{name}' returned {type(out).__name__}, expected CheckResult")
        return EvalScoreResult(name, None, None, error_message=_error_text(out))
    passed = out.passed
    if type(passed) is not bool:
        passed = bool(passed)
    reason = out.reason
    cname = out.check_name
    score = out.score
    if score is None:
        score = 1.0 if passed else 0.0
    if out.details:
        # Further numbers ride in ``sample`` beside MAF's reason; a numeric ``threshold`` among
        # them is the score's threshold.
        sample: dict[str, Any] = {**out.details, **({"reason": reason} if reason else {})}
        threshold = out.details.get("threshold")
        if not isinstance(threshold, int | float) or isinstance(threshold, bool):
            threshold = None
        return EvalScoreResult(cname, score, passed, sample, None, reason or None, threshold)
    if reason:
        return EvalScoreResult(cname, score, passed, {"reason": reason}, None, reason)
    return EvalScoreResult(cname, score, passed)


def _finish(index: int, item: EvalItem, scores: list[EvalScoreResult] | None) -> EvalItemResult:
    """An item's result from its scores, its status by the tally's item rule (``item_status``:
    any error, else all passed, else fail; zero checks fail, as MAF); the checks that raised
    are its error. ``scores`` None: its target call failed, so it is errored and no check ran."""
    query, response = item.query_and_response()
    if scores is None:
        status, scores, code, message = ERROR, [], item.error_code, item.error_message
    else:
        status, code, message = item_status(scores), None, None
        if status == ERROR:
            errors = "; ".join(f"{s.name}: {s.error_message}" for s in scores if s.error_message)
            code, message = ("CheckError", errors) if errors else (None, None)
    return EvalItemResult(
        str(index) if item.item_id is None else item.item_id,
        status,
        scores,
        code,
        message,
        None,
        query,
        response,
        None,
        item.result_metadata(),
    )


def resolve_evaluators(evaluators: Any) -> list[Evaluator]:
    """Providers from what the user passed: adjacent bare callables are grouped into one LocalEvaluator.

    Raises:
        TypeError: for anything that is neither an Evaluator nor a callable.
    """
    if isinstance(evaluators, Evaluator) or callable(evaluators):
        evaluators = [evaluators]
    resolved: list[Evaluator] = []
    for bare, group in groupby(evaluators, lambda ev: not isinstance(ev, Evaluator)):
        if not bare:
            resolved.extend(group)
            continue
        checks = list(group)
        for check in checks:
            if not callable(check):
                raise TypeError(f"Expected an Evaluator or callable, got {type(check).__name__}")
        resolved.append(LocalEvaluator(*checks))
    return resolved
