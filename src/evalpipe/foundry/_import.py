"""``evalpipe import foundry-threads``: Foundry Agent Service runs written as an evalpipe dataset.

Each finished run becomes one JSON line (``ThreadRunRecord.to_row``: ``id``, ``conversation``,
``tools``, ``recorded_agents`` for connected-agent runs, ``tags``), so a scheduled flow can score
yesterday's production traffic like any dataset. The lead wires ``add_import_foundry_parser`` under
the ``import`` command of ``evalpipe.cli``.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from evalpipe.foundry._evals import ENDPOINT_ENV
from evalpipe.foundry._threads import FoundryThreads, ThreadRunRecord

__all__ = ["add_import_foundry_parser", "handler"]


def _timestamp(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an ISO 8601 time (e.g. 2026-11-29T00:00:00Z)"
        ) from None


def add_import_foundry_parser(import_subparsers: Any) -> argparse.ArgumentParser:
    """Add ``foundry-threads`` to the ``import`` command's subparsers; returns its parser.

    Its handler is ``args.handler`` (as ``evalpipe import otel``'s).
    """
    parser: argparse.ArgumentParser = import_subparsers.add_parser(
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
        "--endpoint",
        default=None,
        help=f"the Foundry project endpoint (default ${ENDPOINT_ENV})",
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
    parser.set_defaults(handler=handler)
    return parser


def _usage_error(args: argparse.Namespace) -> str | None:
    if args.run_id is not None and len(args.thread_ids or []) != 1:
        return "--run-id needs exactly one --thread-id."
    if args.agent_id is None and (
        args.since is not None or args.until is not None or args.lookback_hours is not None
    ):
        return "--since, --until and --lookback-hours select an agent's threads: use them with --agent-id."
    if args.lookback_hours is not None and args.lookback_hours <= 0:
        return f"--lookback-hours must be > 0, got {args.lookback_hours:g}."
    if args.output.suffix.lower() != ".jsonl":
        return f"{args.output}: the dataset is written as JSON Lines; name it *.jsonl."
    if not 1 <= args.page_size <= 100:
        return f"--page-size must be between 1 and 100, got {args.page_size}."
    if not (args.endpoint or os.environ.get(ENDPOINT_ENV)):
        return f"no project endpoint: pass --endpoint URL or set {ENDPOINT_ENV}."
    return None


def handler(
    args: argparse.Namespace,
    *,
    credential: Any = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``evalpipe import foundry-threads``; returns the exit code.

    The summary goes to ``stdout``, warnings (diagnostics, skipped runs) and errors to ``stderr``.
    0: rows written (and checked to load as a dataset); 1: no finished run to write (nothing is
    written); 2: bad arguments, the service refused, or the rows do not load. ``credential`` defaults to ``DefaultAzureCredential``.
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    problem = _usage_error(args)
    if problem is not None:
        print(f"error: {problem}", file=err)
        return 2
    endpoint = args.endpoint or os.environ[ENDPOINT_ENV]
    from azure.core.exceptions import AzureError

    try:
        with FoundryThreads(
            endpoint=endpoint, credential=credential, page_size=args.page_size
        ) as reader:
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
    except (AzureError, ValueError) as exc:
        print(f"error: {endpoint}: {exc}", file=err)
        return 2
    for diag in diagnostics:
        print(f"warning: {diag}", file=err)
    kept = [r for r in records if args.include_failed or r.error_code is None]
    skipped = len(records) - len(kept)
    if skipped:
        print(
            f"skipped {skipped} run(s) that did not complete (--include-failed keeps them)",
            file=err,
        )
    if not kept:
        print("error: no finished run to write; nothing written", file=err)
        return 1
    from evalpipe.datasets import DatasetError, write_jsonl

    try:
        # checked to load as `evalpipe run` will read it: fail here, not on the schedule
        write_jsonl((record.to_row() for record in kept), args.output)
    except DatasetError as exc:
        print(f"error: the written dataset does not load: {exc}", file=err)
        return 2
    threads = len({r.thread_id for r in kept})
    multi = sum(1 for r in kept if r.is_multi_agent)
    print(
        f"wrote {len(kept)} row(s) from {threads} thread(s) to {args.output}"
        + (f" ({multi} multi-agent)" if multi else "")
        + (f"; {len(diagnostics)} warning(s)" if diagnostics else ""),
        file=out,
    )
    return 0
