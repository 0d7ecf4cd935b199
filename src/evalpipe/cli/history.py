"""``evalpipe history OUTPUT_DIR``: every finished run, newest first, with its pass rates."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from evalpipe._internal.terminal import count_column, name_column, plain_table
from evalpipe.artifacts import ArtifactError, DamagedRun, RunInfo, find_runs
from evalpipe.cli._common import EXIT_OK, consoles, exits_on, say, warn
from evalpipe.escape import plain, terminal
from evalpipe.tally import SummaryRow

__all__ = ["register"]

ITEMS = "items"
"""The column of an agent's item pass rate (beside its metrics')."""


def _when(run: RunInfo, form: str = "%Y-%m-%d %H:%M") -> str:
    return "-" if run.started_at is None else run.started_at.strftime(form)


def _gate(run: RunInfo) -> str:
    return "-" if run.gate is None else ("passed" if run.gate else "FAILED")


def _rate(passed: int, failed: int) -> str:
    d = passed + failed
    return f"{passed / d:.1%} ({passed}/{d})" if d else f"- (0/{d})"


def _key(row: SummaryRow) -> tuple[str, str, str]:
    """(provider, agent, column): ``items`` for an agent's items, else the metric."""
    return row.provider, row.agent, ITEMS if row.kind == "result" else str(row.metric)


def _keys(runs: Sequence[RunInfo]) -> list[tuple[str, str, str]]:
    """Every (provider, agent, column) of the runs, first-seen order: ``items`` then the metrics."""
    series: dict[tuple[str, str], list[str]] = {}
    for run in runs:
        for row in run.rows:
            columns = series.setdefault((row.provider, row.agent), [ITEMS])
            if row.kind == "metric" and row.metric not in columns:
                columns.append(str(row.metric))
    return [(p, a, c) for (p, a), columns in series.items() for c in columns]


def _print(runs: Sequence[RunInfo], console: Console, where: str) -> None:
    """Per suite: one line per run (newest first: when, version, calls, errored calls, gate, run
    name), then the pass rates of every agent and metric with a column per run, as many of the
    newest runs as the width holds."""
    for suite in dict.fromkeys(r.suite for r in runs):
        mine = [r for r in runs if r.suite == suite]
        say(console, f"{suite}: {len(mine)} run(s) in {where}, newest first", style="bold")
        table = plain_table()
        table.add_column("", no_wrap=True, width=1)
        count_column(table, "started (UTC)")
        name_column(table, "version", min_width=7)
        count_column(table, "calls")
        count_column(table, "err")
        table.add_column("gate", no_wrap=True)
        name_column(table, "run", min_width=15)
        for run in mine:
            table.add_row(
                "*" if run.baseline else "",
                _when(run),
                terminal(run.target_version or "-"),
                str(run.calls.get("total", "-")),
                str(run.calls.get("errored", "-")),
                _gate(run),
                terminal(run.run_name),
            )
        console.print(table)
        if any(r.baseline for r in mine):
            console.print("* the suite's baseline (evalpipe bless)", highlight=False)
        console.print()
        _print_rates(mine, console)


def _print_rates(runs: Sequence[RunInfo], console: Console) -> None:
    keys = _keys(runs)
    labels = [f"{p} · {a}" if c == ITEMS else f"  {c}" for p, a, c in keys]
    name_width = min(32, max(len(label) for label in labels))
    cells = [{_key(row): _rate(row.passed, row.failed) for row in r.rows} for r in runs]
    cell_width = max([len(c) for found in cells for c in found.values()] + [11])
    fits = max(1, (console.width - name_width) // (cell_width + 1))
    shown = list(zip(runs, cells, strict=True))[:fits]
    title = "pass rates by agent and metric, newest run first"
    if len(runs) > len(shown):
        title += f" (the {len(shown)} newest of {len(runs)}: --format csv has them all)"
    block = plain_table(title)
    name_column(block, "provider · agent / metric")
    for run, _ in shown:
        count_column(block, _when(run, "%m-%d %H:%M"))
    for key, label in zip(keys, labels, strict=True):
        name = Text(plain(label), style="bold" if key[2] == ITEMS else "")
        block.add_row(name, *(found.get(key, "") for _, found in shown))
    console.print(block)
    console.print()


def _csv(runs: Sequence[RunInfo]) -> None:
    """Print one line per run: its fields, then a pass rate per provider/agent/metric (``items``: the
    agent's items) and its denominator."""
    keys = _keys(runs)
    head = ["suite", "run_name", "started_at", "target_version", "calls", "errored", "gate"]
    head += ["baseline", "location"]
    for p, a, c in keys:
        head += [f"{p}/{a}/{c} pass_rate", f"{p}/{a}/{c} denominator"]
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(head)
    for run in runs:
        by_key = {_key(r): r for r in run.rows}
        line: list[Any] = [
            run.suite,
            run.run_name,
            "" if run.started_at is None else run.started_at.isoformat(),
            run.target_version,
            run.calls.get("total", ""),
            run.calls.get("errored", ""),
            _gate(run).lower() if run.gate is not None else "",
            "yes" if run.baseline else "",
            run.location,
        ]
        for key in keys:
            row = by_key.get(key)
            rate = None if row is None else row.pass_rate
            line += ["" if rate is None else rate, "" if row is None else row.pass_rate_denominator]
        writer.writerow(line)


def _history(args: argparse.Namespace) -> int:
    out, err = consoles()
    damaged: list[DamagedRun] = []
    with exits_on(ArtifactError, ValueError):
        runs = find_runs(args.output_dir, suite=args.suite, damaged=damaged)
    for run in damaged:  # one damaged run hides no other
        warn(err, f"damaged run {run.location} left out: {run.problem}")
    if args.format == "json":
        sys.stdout.write(json.dumps([r.as_dict() for r in runs], indent=2) + "\n")
    elif args.format == "csv":
        _csv(runs)
    elif runs:
        _print(runs, out, args.output_dir)
    else:
        which = f" of suite {args.suite!r}" if args.suite else ""
        say(
            err, f"no finished run{which} in {args.output_dir} (a finished run has a manifest.json)"
        )
    return EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "history",
        help="list the finished runs in an output directory, newest first, with pass rates",
        description=(
            "List every finished run under OUTPUT_DIR ({output_dir}/{suite}/{run}), newest "
            "first: when it started, the target version, its calls, the gate, and the pass "
            "rate of every agent and metric (a table per provider and agent). A suite's "
            "baseline (`evalpipe bless`) is marked. OUTPUT_DIR may be a filesystem URI."
        ),
    )
    parser.add_argument(
        "output_dir",
        metavar="OUTPUT_DIR",
        help="where runs are written (a suite's output_dir, e.g. runs or s3://bucket/evals), or "
        "one suite's directory in it",
    )
    parser.add_argument("--suite", metavar="NAME", help="only the runs of this suite")
    parser.add_argument(
        "--format",
        choices=["table", "json", "csv"],
        default="table",
        help="table (default: for people, readable at 80 columns); json (a list of runs, "
        "each with every pass rate and its counts); csv (one line per run, a pass rate and "
        "denominator column per provider/agent/metric)",
    )
    parser.set_defaults(handler=_history)
