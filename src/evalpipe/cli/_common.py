"""What every command shares: the consoles, error messages, and printing a run's summary.

Every number printed comes from the tally (``evalpipe.tally``): a finished run's from its
summary.parquet and manifest, an in-process evaluation's from its results.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from evalpipe.escape import plain, terminal
from evalpipe.results import EvalResults
from evalpipe.tally import CallTally, SummaryRow

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_GATE_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_OK",
    "Failure",
    "check_run_dir",
    "consoles",
    "fail",
    "failures_of",
    "print_summary",
]

EXIT_OK = 0
"""Passed (or done)."""
EXIT_GATE_FAILED = 1
"""A gate failed (``run``), a regression (``compare --fail-on-regression``), not all passed
(``eval --strict``)."""
EXIT_BAD_INPUT = 2
"""Bad input, found before any call; the message says what to fix."""
EXIT_INCOMPLETE = 3
"""The run could not complete."""


def _width(stream: Any) -> int | None:
    """A terminal's own width, else ``COLUMNS`` when set, else 120."""
    return None if stream.isatty() or os.environ.get("COLUMNS", "").isdigit() else 120


def consoles() -> tuple[Console, Console]:
    """stdout and stderr consoles."""
    return Console(width=_width(sys.stdout)), Console(stderr=True, width=_width(sys.stderr))


def fail(err: Console, message: str, code: int = EXIT_BAD_INPUT) -> int:
    """Print ``error: message`` (as text, never markup) and return ``code``."""
    err.print(
        f"error: {plain(message)}", style="red", markup=False, highlight=False, soft_wrap=True
    )
    return code


def check_run_dir(path: Path) -> str | None:
    """Why ``path`` is not a finished run directory, or None."""
    if not path.exists():
        return f"{path}: no such directory; pass a run directory written by `evalpipe run`"
    if not path.is_dir():
        return f"{path}: not a directory; pass a run directory written by `evalpipe run`"
    if not (path / "manifest.json").is_file():
        return (
            f"{path}: not a finished run directory (no manifest.json); pass a directory that "
            "`evalpipe run` completed"
        )
    return None


@dataclass(frozen=True, slots=True)
class Failure:
    """One item that did not pass, as the failures list shows it."""

    level: str
    """The result it belongs to (its eval name)."""
    label: str
    """The item: its dataset row and repetition, or its id."""
    status: str
    query: str | None
    why: str


def _why(item: Any) -> str:
    return item.error_message or "; ".join(
        f"{s.name}: {(s.reason or 'failed').splitlines()[0]}"
        for s in item.scores
        if s.passed is False
    )


def failures_of(results: Sequence[EvalResults]) -> list[Failure]:
    """The items of in-memory results that did not pass, every level, in order."""
    out = []
    for res in results:
        for level in res.iter_results():
            for item in level.items:
                if item.is_passed:
                    continue
                meta = item.metadata or {}
                label = item.item_id
                if "row_id" in meta:
                    label = f"{meta['row_id']} (rep {meta.get('repetition', 0)})"
                out.append(Failure(level.run_id, label, item.status, item.input_text, _why(item)))
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_summary(
    rows: Sequence[SummaryRow],
    failures: Sequence[Failure],
    console: Console,
    *,
    calls: Mapping[str, Any] | None = None,
    max_failures: int = 10,
) -> None:
    """The per-metric table, the items that did not pass, each result's counts and the calls.

    Every name and text is printed as text (rich markup in an agent's name is not markup).
    """
    table = Table(title="evalpipe summary")
    table.add_column("provider", no_wrap=True)
    table.add_column("agent")
    table.add_column("metric", no_wrap=True)
    for column in ("n", "passed", "failed", "errored", "n/a", "pass rate", "mean score"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in rows:
        if row.kind != "metric":
            continue
        table.add_row(
            terminal(row.provider),
            terminal(row.agent),
            terminal(row.metric or ""),
            str(row.n),
            str(row.passed),
            str(row.failed),
            str(row.errored),
            str(row.not_applicable),
            row.rate_text,
            _fmt(row.score_mean, ".3f"),
        )
    console.print(table)
    by_level: dict[str, list[Failure]] = {}
    for failure in failures:
        by_level.setdefault(failure.level, []).append(failure)
    results = [r for r in rows if r.kind == "result"]
    for row in results:
        level = row.eval_run_id or ""
        bad = by_level.get(level, [])
        if bad:
            console.print(
                f"{plain(level)}: items not passed ({row.n - row.passed} of {row.n}):",
                markup=False,
                highlight=False,
                style="bold",
            )
        for failure in bad[:max_failures]:
            console.print(
                f"  {plain(failure.label)} [{failure.status}] {plain(repr(failure.query), 300)}: "
                f"{plain(failure.why, 500)}",
                markup=False,
                highlight=False,
            )
        if row.n - row.passed > max_failures:
            console.print(f"  ... and {row.n - row.passed - max_failures} more", highlight=False)
    for row in results:
        verdict = (
            "all passed"
            if row.failed == 0 and row.errored == 0 and row.passed > 0
            else "not all passed"
        )
        console.print(
            f"{plain(row.eval_run_id)}: {row.passed} passed, {row.failed} failed, {row.errored} errored "
            f"of {row.n} items — pass rate {row.rate_text} — {verdict}",
            markup=False,
            highlight=False,
        )
    if calls:
        stats = (
            f", latency p50 {_fmt(calls.get('latency_p50_s'), '.3f')} s, p95 "
            f"{_fmt(calls.get('latency_p95_s'), '.3f')} s, tokens "
            f"{calls.get('total_tokens') if calls.get('total_tokens') is not None else '-'}"
            if calls.get("made")
            else ""
        )
        console.print(CallTally.text(calls) + stats, markup=False, highlight=False)
