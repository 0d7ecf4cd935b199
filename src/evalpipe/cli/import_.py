"""``evalpipe import otel | foundry-threads``: production traffic written as a recorded dataset
(one row per trace, or per finished Foundry run; docs/production-traffic.md) that a suite with no
target evaluates; the rows are loaded back before the command reports success.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from evalpipe._internal.env import FOUNDRY_ENDPOINT_ENV
from evalpipe.cli._common import EXIT_INCOMPLETE, CommandError, consoles, exits_on, say, warn
from evalpipe.datasets import DatasetError, write_jsonl
from evalpipe.otel import OtelError, read_otel_traces, trace_rows

__all__ = ["import_foundry_threads", "import_otel", "register"]

MAX_SHOWN_WARNINGS = 20


def _write(rows: Iterable[dict[str, Any]], output: Path) -> list[Any]:
    """Write the dataset, checked to load as `evalpipe run` will read it: fail here, not on the
    schedule."""
    with exits_on(DatasetError, message="the written dataset does not load: {}"):
        return write_jsonl(rows, output)


def _check_jsonl(output: Path) -> None:
    if output.suffix.lower() != ".jsonl":
        raise CommandError(f"{output}: the dataset is written as JSON Lines; name it *.jsonl.")


def import_otel(args: argparse.Namespace) -> int:
    """Run ``evalpipe import otel``; returns the exit code.

    0: written; 1: written, but ``--strict`` and some spans had warnings; 2: nothing usable (no
    such path, no trace with an ``invoke_agent`` span, or an output path that is not ``.jsonl``).
    """
    out, err = consoles()
    _check_jsonl(args.output)
    with exits_on(OtelError):
        read = read_otel_traces(args.path, log=False)
    for diagnostic in read.diagnostics[:MAX_SHOWN_WARNINGS]:
        warn(err, str(diagnostic))
    if len(read.diagnostics) > MAX_SHOWN_WARNINGS:
        warn(err, f"... and {len(read.diagnostics) - MAX_SHOWN_WARNINGS} more")
    if not read.traces:
        raise CommandError(
            f"{args.path}: {read.spans} spans but no trace with an invoke_agent span; "
            "export GenAI spans with message content (e.g. MAF's enable_sensitive_data=True)"
        )
    count = len(_write(trace_rows(read.traces, per_agent=args.per_agent), args.output))
    agents = sorted({t.agent for trace in read.traces for t in trace.turns})
    say(
        out,
        f"{count} trace{'s' if count != 1 else ''} ({read.spans} spans, agents: "
        f"{', '.join(agents)}) -> {args.output}; {len(read.diagnostics)} warning"
        f"{'s' if len(read.diagnostics) != 1 else ''}",
        soft_wrap=True,
    )
    return 1 if args.strict and read.diagnostics else 0


def _timestamp(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an ISO 8601 time (e.g. 2026-11-29T00:00:00Z)"
        ) from None


def _check_usage(args: argparse.Namespace) -> None:
    if args.run_id is not None and len(args.thread_ids or []) != 1:
        raise CommandError("--run-id needs exactly one --thread-id.")
    if args.agent_id is None and (
        args.since is not None or args.until is not None or args.lookback_hours is not None
    ):
        raise CommandError(
            "--since, --until and --lookback-hours select an agent's threads: use them with --agent-id."
        )
    if args.lookback_hours is not None and args.lookback_hours <= 0:
        raise CommandError(f"--lookback-hours must be > 0, got {args.lookback_hours:g}.")
    _check_jsonl(args.output)
    if not 1 <= args.page_size <= 100:
        raise CommandError(f"--page-size must be between 1 and 100, got {args.page_size}.")
    if not (args.endpoint or os.environ.get(FOUNDRY_ENDPOINT_ENV)):
        raise CommandError(
            f"no project endpoint: pass --endpoint URL or set {FOUNDRY_ENDPOINT_ENV}."
        )


def import_foundry_threads(args: argparse.Namespace, *, credential: Any = None) -> int:
    """Run ``evalpipe import foundry-threads``; returns the exit code.

    0: rows written (and checked to load as a dataset); 2: bad arguments or rows that do not load;
    3: the service refused or did not answer, or no finished run to write (nothing is written).
    ``credential`` defaults to ``DefaultAzureCredential``.
    """
    _check_usage(args)
    out, err = consoles()
    endpoint = args.endpoint or os.environ[FOUNDRY_ENDPOINT_ENV]
    from azure.core.exceptions import AzureError  # lazy: azure, only for this command

    from evalpipe.foundry import FoundryThreads, ThreadRunRecord  # lazy: azure

    with (
        exits_on(ValueError, message=f"{endpoint}: {{}}"),
        # the service refused or did not answer: could not complete
        exits_on(AzureError, code=EXIT_INCOMPLETE, message=f"{endpoint}: {{}}"),
        FoundryThreads(
            endpoint=endpoint, credential=credential, page_size=args.page_size
        ) as reader,
    ):
        records: list[ThreadRunRecord]
        if args.agent_id is not None:
            records = reader.read_agent(
                args.agent_id,
                since=args.since,
                until=args.until,
                lookback_hours=args.lookback_hours,
            )
        elif args.run_id is not None:
            records = reader.read(args.thread_ids[0], run_id=args.run_id)
        else:
            records = reader.read_many(args.thread_ids)
        diagnostics = list(reader.diagnostics)
    for diag in diagnostics:
        warn(err, str(diag))
    kept = [r for r in records if args.include_failed or r.error_code is None]
    skipped = len(records) - len(kept)
    if skipped:
        say(err, f"skipped {skipped} run(s) that did not complete (--include-failed keeps them)")
    if not kept:
        raise CommandError("no finished run to write; nothing written", EXIT_INCOMPLETE)
    _write((record.to_row() for record in kept), args.output)
    threads = len({r.thread_id for r in kept})
    multi = sum(1 for r in kept if r.is_multi_agent)
    say(
        out,
        f"wrote {len(kept)} row(s) from {threads} thread(s) to {args.output}"
        + (f" ({multi} multi-agent)" if multi else "")
        + (f"; {len(diagnostics)} warning(s)" if diagnostics else ""),
        soft_wrap=True,
    )
    return 0


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "import",
        help="write a recorded dataset from production traffic (OTel traces, Foundry threads)",
        description="Write a recorded dataset (JSONL) from production traffic.",
    )
    commands = parser.add_subparsers(dest="import_command", required=True, metavar="SOURCE")
    parser = commands.add_parser(
        "otel",
        help="turn an OTLP/JSON export of GenAI traces into a recorded dataset (JSONL)",
        description=(
            "Read OpenTelemetry GenAI spans (invoke_agent, chat, execute_tool) from an OTLP/JSON "
            "export and write one recorded dataset row per trace."
        ),
    )
    parser.add_argument("path", type=Path, help="an OTLP/JSON file (.json/.jsonl) or a directory")
    parser.add_argument(
        "-o", "--output", type=Path, required=True, help="the dataset to write (.jsonl)"
    )
    parser.add_argument(
        "--per-agent",
        choices=["auto", "always", "never"],
        default="auto",
        help="write every agent's turn (recorded_agents) for per-agent results: auto (default) "
        "when any trace has more than one agent turn",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when any span had missing or unreadable attributes (the file is still written)",
    )
    parser.set_defaults(handler=import_otel)
    parser = commands.add_parser(
        "foundry-threads",
        help="Foundry Agent Service threads and runs -> a dataset JSONL",
        description=(
            "Read Foundry Agent Service threads (by id, or every thread of an agent created in a "
            "time window) and write one dataset row per finished run: the agent's instructions, "
            "the messages, tool calls with their outputs, and per-agent turns for connected agents."
        ),
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--thread-id",
        action="append",
        dest="thread_ids",
        metavar="ID",
        help="a thread to import (repeatable)",
    )
    source.add_argument("--agent-id", metavar="ID", help="import every thread of this agent")
    parser.add_argument("--run-id", metavar="ID", help="with one --thread-id: only this run")
    window = parser.add_mutually_exclusive_group()
    window.add_argument(
        "--since",
        type=_timestamp,
        metavar="TIME",
        help="with --agent-id: threads created at or after this ISO 8601 time (UTC if no zone)",
    )
    window.add_argument(
        "--lookback-hours",
        type=float,
        metavar="H",
        help="with --agent-id: threads created in the last H hours (default 24)",
    )
    parser.add_argument(
        "--until",
        type=_timestamp,
        metavar="TIME",
        help="with --agent-id: threads created before this time (default now)",
    )
    parser.add_argument(
        "--endpoint", help=f"the Foundry project endpoint (default ${FOUNDRY_ENDPOINT_ENV})"
    )
    parser.add_argument(
        "-o", "--output", type=Path, required=True, help="the dataset JSONL file to write"
    )
    parser.add_argument(
        "--include-failed",
        action="store_true",
        help="also write runs that failed, were cancelled or expired (skipped by default)",
    )
    parser.add_argument(
        "--page-size", type=int, default=100, help="items per list call, 1-100 (default 100)"
    )
    parser.set_defaults(handler=import_foundry_threads)
