"""What every command shares: the consoles, error messages, and printing a run's summary.

Every number printed comes from the tally (``evalpipe.tally``): a finished run's from its
summary.parquet and manifest, an in-process evaluation's from its results.
"""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from evalpipe._internal.terminal import count_column, name_column, plain_table, shorten
from evalpipe.artifacts import ArtifactError, read_manifest
from evalpipe.escape import plain, terminal
from evalpipe.results import EvalResults
from evalpipe.tally import CallTally, SummaryRow

__all__ = [
    "API_GONE",
    "DEFAULT_WIDTH",
    "EXIT_BAD_INPUT",
    "EXIT_GATE_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_OK",
    "MAX_FAILURES",
    "CommandError",
    "Failure",
    "consoles",
    "exits_on",
    "failures_of",
    "handle_errors",
    "item_label",
    "num",
    "print_summary",
    "quiet_prefect",
    "require_run_dir",
    "say",
    "warn",
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


MAX_FAILURES = 5
"""Items listed per result that did not pass; the rest are counted and where they are is said."""

DEFAULT_WIDTH = 120
"""Columns for output that is not a terminal when ``COLUMNS`` is not set (a CI log, a file)."""


def _width(stream: Any) -> int | None:
    """None (rich's own choice: ``COLUMNS``, else a terminal's width) or :data:`DEFAULT_WIDTH`."""
    return None if stream.isatty() or os.environ.get("COLUMNS", "").isdigit() else DEFAULT_WIDTH


def quiet_prefect() -> None:
    """Prefect's own console logs would tear the progress bar; keep warnings and errors only."""
    # The console only: the flow run's own log lines (its milestones) still go to the Prefect API,
    # where its Logs tab shows them.
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")


API_GONE = threading.Event()
"""Set when the Prefect API went away: the program ends as soon as the command has (``main``),
without the wait at exit for what Prefect's workers queued for that API (events, logs: each is
retried against it for seconds, over a minute for a run's last ones, and then lost anyway)."""


def consoles() -> tuple[Console, Console]:
    """stdout and stderr consoles: a terminal's width, else ``COLUMNS``, else 120 columns."""
    return Console(width=_width(sys.stdout)), Console(stderr=True, width=_width(sys.stderr))


class CommandError(Exception):
    """Ends a command: ``main`` prints ``error: message`` (red, as text), exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


@contextlib.contextmanager
def exits_on(
    *errors: type[Exception], code: int = EXIT_BAD_INPUT, message: str = "{}"
) -> Iterator[None]:
    """Any of ``errors`` raised inside ends the command with ``code``: ``message`` with ``{}``
    replaced by the exception's text."""
    try:
        yield
    except errors as exc:
        raise CommandError(message.replace("{}", str(exc)), code) from exc


def handle_errors(err: Console, command: Callable[[], int]) -> int:
    """``command()``'s exit code; a :class:`CommandError` it raises is printed on ``err`` as
    ``error: message`` (red, as text) and its code returned."""
    try:
        return command()
    except CommandError as exc:
        say(err, f"error: {exc}", style="red", soft_wrap=True)
        return exc.code


_PASS_A_RUN = "; pass a run directory written by `evalpipe run`"


def require_run_dir(path: Path | str) -> None:
    """End the command (exit 2) unless ``path`` (a directory or a filesystem URI) is a finished
    run directory."""
    if "://" in str(path):
        with exits_on(ArtifactError, ValueError, OSError, message="{}" + _PASS_A_RUN):
            read_manifest(str(path))
        return
    path = Path(path)
    if not path.exists():
        raise CommandError(f"{path}: no such directory{_PASS_A_RUN}")
    if not path.is_dir():
        raise CommandError(f"{path}: not a directory{_PASS_A_RUN}")
    if not (path / "manifest.json").is_file():
        raise CommandError(
            f"{path}: not a finished run directory (no manifest.json); pass a directory that "
            "`evalpipe run` completed"
        )


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
    response: str | None = None
    """The response the evaluators saw."""


def _why(item: Any) -> str:
    return item.error_message or "; ".join(
        f"{s.name}: {(s.reason or 'failed').splitlines()[0]}"
        for s in item.scores
        if s.passed is False
    )


def item_label(item_id: str, metadata: Mapping[str, Any]) -> str:
    """An item as the failures list names it: its dataset row and repetition, or its id."""
    if "row_id" in metadata:
        return f"{metadata['row_id']} (rep {metadata.get('repetition', 0)})"
    return item_id


def failures_of(results: Sequence[EvalResults]) -> list[Failure]:
    """The items of in-memory results that did not pass, every level, in order."""
    return [
        Failure(
            level.run_id,
            item_label(item.item_id, item.metadata or {}),
            item.status,
            item.input_text,
            _why(item),
            item.output_text,
        )
        for res in results
        for level in res.iter_results()
        for item in level.items
        if not item.is_passed
    ]


def num(value: float | None) -> str:
    """A number with three decimals, ``-`` for none."""
    return "-" if value is None else f"{value:.3f}"


def _summary_tables(rows: Sequence[SummaryRow]) -> list[Table]:
    """One table per provider: a line per agent (its items) and, under it, a line per metric.

    Every name goes in as text (``evalpipe.escape``); counts are right-aligned, the mean score
    has three decimals and the pass rate one, with its denominator (``rate_text``).
    """
    tables: list[Table] = []
    current: tuple[int, str] | None = None
    table = plain_table()
    for row in rows:
        key = (row.provider_index, row.provider)
        if key != current:
            current = key
            table = plain_table(terminal(row.provider))
            name_column(table, "agent / metric")
            for column in ("n", "pass", "fail", "err", "n/a"):
                count_column(table, column)
            table.add_column("pass rate", justify="right", overflow="fold", min_width=6)
            count_column(table, "mean")
            tables.append(table)
        result = row.kind == "result"  # an agent's line: its items, no n/a and no mean
        table.add_row(
            Text(plain(row.agent), style="bold")
            if result
            else Text("  " + plain(row.metric or "")),
            *map(str, (row.n, row.passed, row.failed, row.errored)),
            "" if result else str(row.not_applicable),
            row.rate_text,
            "" if result else num(row.score_mean),
        )
    return tables


def say(console: Console, text: Any, **options: Any) -> None:
    """Print ``text`` as text: never markup, nothing highlighted, and a string's control and bidi
    characters shown (``plain``)."""
    console.print(
        plain(text) if isinstance(text, str) else text, markup=False, highlight=False, **options
    )


def warn(console: Console, text: str) -> None:
    """Print ``warning: text`` in yellow, as text."""
    say(console, f"warning: {text}", style="yellow", soft_wrap=True)


def _print_failures(
    rows: Sequence[SummaryRow],
    failures: Sequence[Failure],
    console: Console,
    *,
    rest: str | None = None,
) -> None:
    """Per result, the items that did not pass (at most ``MAX_FAILURES``, each with why in full
    (wrapped), its query and its response shortened to a line), and when capped how many more
    there are and where (``rest``)."""
    by_level: dict[str, list[Failure]] = {}
    for failure in failures:
        by_level.setdefault(failure.level, []).append(failure)
    for row in rows:
        if row.kind != "result":
            continue
        level = row.eval_run_id or ""
        bad = by_level.get(level, [])
        not_passed = row.n - row.passed
        if not bad or not not_passed:
            continue
        shown = bad[:MAX_FAILURES]
        capped = not_passed > len(shown)
        head = f"{level}: {not_passed} of {row.n} items did not pass"
        say(console, head + (f"; the first {len(shown)}:" if capped else ":"), style="bold")
        for failure in shown:
            say(console, f"  {failure.label} [{failure.status}]", no_wrap=True, overflow="ellipsis")
            # why is what the reader needs whole: wrapped under its label, never cut at the width
            why = textwrap.wrap(
                shorten(plain(failure.why)),
                width=max(40, console.width),
                initial_indent=f"      {'why:':<9} ",
                subsequent_indent=" " * 16,
                break_long_words=True,
            )
            for line in why:
                say(console, line, no_wrap=True, overflow="fold")
            for label, text in (("query", failure.query), ("response", failure.response)):
                say(
                    console,
                    f"      {label + ':':<9} {shorten(text)}",
                    no_wrap=True,
                    overflow="ellipsis",
                )
        if capped:
            where = f": {rest}" if rest else ""
            say(console, f"  ... and {not_passed - len(shown)} more not shown{where}")


def print_summary(
    rows: Sequence[SummaryRow],
    failures: Sequence[Failure],
    console: Console,
    *,
    calls: Mapping[str, Any] | None = None,
    rest: str | None = None,
    heading: str = "evalpipe summary",
) -> None:
    """A heading, the tables (one per provider), the items that did not pass, each result's counts
    and the calls. ``rest`` says where the items not listed are (a file, a command).

    Every name and text is printed as text (rich markup in an agent's name is not markup).
    """
    say(console, heading, style="bold")
    console.print()
    for table in _summary_tables(rows):
        console.print(table)
        console.print()
    _print_failures(rows, failures, console, rest=rest)
    for row in rows:
        if row.kind != "result":
            continue
        verdict = (
            "all passed"
            if row.failed == 0 and row.errored == 0 and row.passed > 0
            else "not all passed"
        )
        say(
            console,
            f"{row.eval_run_id}: {row.passed} passed, {row.failed} failed, {row.errored} errored "
            f"of {row.n} items — pass rate {row.rate_text} — {verdict}",
        )
    if calls:
        stats = (
            f", latency p50 {num(calls.get('latency_p50_s'))} s, p95 "
            f"{num(calls.get('latency_p95_s'))} s, tokens "
            f"{calls.get('total_tokens') if calls.get('total_tokens') is not None else '-'}"
            if calls.get("made")
            else ""
        )
        say(console, CallTally.text(calls) + stats)
