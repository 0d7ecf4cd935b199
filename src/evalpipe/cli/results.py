"""``evalpipe results RUN_DIR``: print a finished run's summary again."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]
from rich.console import Console

from evalpipe._internal.adaptive import limit_notes
from evalpipe.artifacts import ArtifactError, read_manifest, read_not_passed, read_summary
from evalpipe.artifacts.history import join
from evalpipe.artifacts.writer import resolve_filesystem
from evalpipe.cli._common import (
    EXIT_OK,
    Failure,
    consoles,
    exits_on,
    item_label,
    print_summary,
    require_run_dir,
    say,
)
from evalpipe.escape import plain
from evalpipe.spend import spend_text

__all__ = ["print_run", "register"]


MAX_FAILURES = 5
"""Items listed per result that did not pass; the rest are counted and where they are is said."""


def print_run(run_dir: Path | str, console: Console) -> None:
    """A finished run's summary from its summary.parquet and manifest (items are not loaded);
    ``run_dir`` is a directory or a filesystem URI."""
    run_dir = str(run_dir)
    manifest = read_manifest(run_dir)
    rows = read_summary(run_dir)
    not_passed = read_not_passed(run_dir, limit=MAX_FAILURES)
    failures = [
        Failure(
            level,
            item_label(item["item_id"], item["item_metadata"]),
            item["item_status"],
            item["input_text"],
            item["why"],
            item["output_text"],
        )
        for level, items in not_passed.items()
        for item in items
    ]
    calls = manifest.get("calls") if isinstance(manifest.get("calls"), dict) else None
    fs, path = resolve_filesystem(run_dir)
    has_report = fs.get_file_info(f"{path}/report.html").type == pafs.FileType.File
    report = join(run_dir, "report.html") if has_report else None
    where = [f"every item is in {join(run_dir, 'scores.parquet')}"]
    if report:
        where.append(f"and {report}")
    name_of_dir = run_dir.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]
    suite = manifest.get("suite")
    name = suite.get("name") if isinstance(suite, dict) else None
    print_summary(
        rows,
        failures,
        console,
        calls=calls,
        max_failures=MAX_FAILURES,
        rest=" ".join(where),
        heading=f"evalpipe summary: {name or name_of_dir} ({manifest.get('run_name') or name_of_dir})",
    )
    gate = manifest.get("gate")
    if gate:
        verdict = "[green]passed[/]" if gate.get("passed") else "[red]FAILED[/]"
        console.print(f"gate {verdict}")
        for clause in gate.get("clauses", []):
            mark = "ok" if clause.get("passed") else "FAIL"
            say(console, f"  {plain(clause.get('clause'))}  {mark}  {plain(clause.get('message'))}")
    spend = manifest.get("spend")
    if isinstance(spend, dict):
        say(console, f"spent: {spend_text(spend)}", soft_wrap=True)
    for note in limit_notes(manifest.get("concurrency")):
        say(console, f"concurrency: {plain(note)}", soft_wrap=True)
    say(console, f"run directory: {run_dir}")
    if report:
        say(console, f"report: {report}")


def _results(args: argparse.Namespace) -> int:
    require_run_dir(args.run_dir)
    with exits_on(ArtifactError):
        print_run(args.run_dir, consoles()[0])
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``results`` to the command line."""
    parser = sub.add_parser(
        "results",
        help="print a finished run's summary again",
        description="Print a finished run's summary table, failures, calls and gate verdict.",
    )
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help="a run directory written by `evalpipe run` (or its filesystem URI)",
    )
    parser.set_defaults(handler=_results)
