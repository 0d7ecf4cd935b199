"""Built-in local checks, with MAF's names, rules and reason strings (shared spec §4).

A check is any callable ``EvalItem -> CheckResult`` (or an awaitable of one). The built-ins are
synchronous so a batch of items is checked without an event-loop round trip per item. Their
reasons repeat across items (``All expected tools called: [...]``) and a run keeps every item's
scores until its summary: they are interned, one string per distinct reason. Where a verdict
depends only on tool names (``tool_called_check``, ``tool_calls_present``), it is remembered per
names seen (up to ``_MEMO_LIMIT`` of them), not formatted again for every item.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from operator import attrgetter
from sys import intern
from typing import Any, Literal

from evalpipe.items import EvalItem

__all__ = [
    "CheckResult",
    "EvalCheck",
    "keyword_check",
    "tool_call_args_match",
    "tool_called_check",
    "tool_calls_present",
]


@dataclass(slots=True)
class CheckResult:
    """A local check's verdict.

    ``score`` is an evalpipe addition: the number an ``@evaluator`` returned (MAF keeps only 1.0/0.0).
    ``details`` is one too: further numbers a check reports (precision and recall beside an F1
    score, the threshold), copied into the metric's ``EvalScoreResult.sample``.
    """

    passed: bool
    reason: str
    check_name: str
    score: float | None = None
    details: dict[str, Any] | None = None


_MEMO_LIMIT = 4096
"""How many distinct verdicts a built-in check remembers (beyond, it formats each one again)."""

EvalCheck = Callable[[EvalItem], "CheckResult | Awaitable[CheckResult]"]
"""A local check: takes an item, returns (or awaits to) a CheckResult."""


def _named(fn: Callable[[EvalItem], CheckResult], name: str) -> Callable[[EvalItem], CheckResult]:
    fn.__name__ = name
    fn.__qualname__ = name
    return fn


def keyword_check(*keywords: str, case_sensitive: bool = False) -> EvalCheck:
    """The response must contain every keyword (a substring test on ``item.response``).

    Only the response side of the split counts: text in tool results, the query or (under
    LAST_TURN) an earlier turn does not.
    """
    wanted = list(keywords)
    needles = wanted if case_sensitive else [k.lower() for k in wanted]

    def check(item: EvalItem) -> CheckResult:
        text = item.response if case_sensitive else item.response.lower()
        for needle in needles:
            if needle not in text:
                missing = [k for k, n in zip(wanted, needles, strict=True) if n not in text]
                return CheckResult(False, f"Missing keywords: {missing}", "keyword_check")
        return CheckResult(True, "All keywords found", "keyword_check")

    return _named(check, "keyword_check")


def tool_called_check(*tool_names: str, mode: Literal["all", "any"] = "all") -> EvalCheck:
    """The agent must have called the named tools (``mode="all"``) or one of them (``"any"``).

    Scans every message of the conversation, whatever the split; names are case-sensitive. As in
    MAF, a pass reports the tools seen up to the call that satisfied the condition.
    """
    if mode not in ("all", "any"):
        raise ValueError(f"tool_called_check mode must be 'all' or 'any', got {mode!r}")
    names = list(tool_names)
    name_set = set(names)

    want_all = mode == "all"

    passed_reasons: dict[frozenset[str], str] = {}
    """The pass reason per set of tools seen (it depends on nothing else): one string each."""

    def passing(called: set[str]) -> CheckResult:
        # only plain names are remembered: a str subclass equal to one may print otherwise
        plain = _STR_ONLY.issuperset(map(type, called))
        seen = frozenset(called) if plain else None
        reason = passed_reasons.get(seen) if seen is not None else None
        if reason is None:
            if want_all:
                reason = f"All expected tools called: {sorted(called)}"
            else:
                reason = f"Expected tool found: {sorted(name_set & called)}"
            if seen is not None and len(passed_reasons) < _MEMO_LIMIT:
                passed_reasons[seen] = reason = intern(reason)
        return CheckResult(True, reason, "tool_called")

    passed_one: dict[str, str] = {}
    """The pass reason when the one tool seen satisfied the condition (the common case), by name."""

    def check(item: EvalItem) -> CheckResult:
        called: set[str] = set()
        for message in item.conversation:
            for content in message.contents:
                if content.type == "function_call":
                    name = content.name
                    called.add(name)
                    # Return as soon as the condition holds, reporting the calls seen so far (MAF).
                    if (name_set <= called) if want_all else (name in name_set):
                        if len(called) == 1 and type(name) is str:
                            reason = passed_one.get(name)
                            if reason is not None:
                                return CheckResult(True, reason, "tool_called")
                            result = passing(called)
                            if len(passed_one) < _MEMO_LIMIT:
                                passed_one[name] = result.reason
                            return result
                        return passing(called)
        if want_all and name_set <= called:  # no names and no calls at all
            return passing(called)
        if want_all:
            missing = [n for n in names if n not in called]
            reason = f"Expected tools not called: {missing} (called: {sorted(called)})"
        else:
            reason = f"None of expected tools called: {names} (called: {sorted(called)})"
        return CheckResult(False, reason, "tool_called")

    return _named(check, "tool_called")


def _calls_present(names: list[str], called: set[str]) -> tuple[bool, str]:
    missing = [n for n in names if n not in called]
    called_list = sorted(called)
    if missing:
        return False, intern(f"Missing tool calls: {missing} (called: {called_list})")
    return True, intern(f"All expected tools called: {names} (called: {called_list})")


_PRESENT: dict[tuple[str | None, ...], tuple[bool, str]] = {}
"""tool_calls_present's verdict per (expected names, None, called names): it depends on nothing
else."""
_KEY_TYPES = frozenset({str, type(None)})
_name = attrgetter("name")
_STR_ONLY = frozenset({str})


def tool_calls_present(item: EvalItem) -> CheckResult:
    """Every expected tool name appears among the calls (names only; order and extras ignored)."""
    expected = item.expected_tool_calls
    if not expected:
        return CheckResult(True, "No expected tool calls specified.", "tool_calls_present")
    key = (*map(_name, expected), None, *map(_name, item.function_calls))
    n = len(expected)
    if not _KEY_TYPES.issuperset(map(type, key)):  # a str subclass may print otherwise
        return CheckResult(*_calls_present(list(key[:n]), set(key[n + 1 :])), "tool_calls_present")
    verdict = _PRESENT.get(key)
    if verdict is None:
        verdict = _calls_present(list(key[:n]), set(key[n + 1 :]))
        if len(_PRESENT) < _MEMO_LIMIT:
            _PRESENT[key] = verdict
    return CheckResult(*verdict, "tool_calls_present")


def tool_call_args_match(item: EvalItem) -> CheckResult:
    """Each expected call matches a same-name call whose arguments contain the expected ones.

    The match is a top-level subset: extra actual keys are fine, nested values compare with ``==``.
    ``arguments=None`` on the expectation checks the name only. Unparseable actual arguments
    never match.
    """
    expected = item.expected_tool_calls
    if not expected:
        return CheckResult(True, "No expected tool calls specified.", "tool_call_args_match")
    actual: dict[str, list[dict[str, Any] | None]] = {}
    for call in item.function_calls:
        args = call.arguments
        # parsed_arguments() copies a dict: only read here, a plain dict is taken as it is
        parsed = args if type(args) is dict else call.parsed_arguments()
        found = actual.get(call.name)
        if found is None:
            actual[call.name] = [parsed]
        else:
            found.append(parsed)
    matched = 0
    details: list[str] = []
    for exp in expected:
        calls = actual.get(exp.name)
        if not calls:
            details.append(f"  {exp.name}: not called")
            continue
        if exp.arguments is None:
            matched += 1
            details.append(f"  {exp.name}: called (args not checked)")
            continue
        want = exp.arguments.items()
        # any(all(...)) over the calls, as loops: the first matching call ends the search, the
        # first differing key ends a call's test (the same comparisons, without two generators)
        for args in calls:
            if args is None:
                continue
            for k, v in want:
                if k not in args or not (args[k] == v):  # noqa: SIM201 - ==, as all() did
                    break
            else:
                break
        else:
            args = None
        if args is not None:
            matched += 1
            details.append(f"  {exp.name}: args match")
        else:
            details.append(f"  {exp.name}: args mismatch (actual: {calls})")
    reason = intern(f"Tool call args match: {matched}/{len(expected)}\n" + "\n".join(details))
    return CheckResult(matched == len(expected), reason, "tool_call_args_match")
