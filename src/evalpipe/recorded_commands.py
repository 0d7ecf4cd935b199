"""``evalpipe import otel PATH -o dataset.jsonl``: OpenTelemetry GenAI traces as a recorded dataset.

The command reads an OTLP/JSON export (a file or a directory), rebuilds each trace's agent turns
(``evalpipe.otel``) and writes one dataset row per trace: the conversation, the tools and, for
multi-agent traces, every agent's turn (``recorded_agents``). ``evalpipe run`` evaluates that file
with a suite that has no target, on a schedule like any other suite.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

__all__ = ["add_import_otel_parser", "import_otel"]

MAX_SHOWN_WARNINGS = 20


def add_import_otel_parser(import_subparsers: Any) -> argparse.ArgumentParser:
    """Add ``otel`` to the ``evalpipe import`` subcommands; its handler is ``args.handler``."""
    parser: argparse.ArgumentParser = import_subparsers.add_parser(
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
    return parser


def import_otel(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run ``evalpipe import otel``; returns the exit code.

    0: written; 1: written, but ``--strict`` and some spans had warnings; 2: nothing usable (no
    such path, no trace with an ``invoke_agent`` span, or an output path that is not ``.jsonl``).
    """
    from evalpipe.datasets import DatasetError, write_jsonl
    from evalpipe.otel import OtelError, read_otel_traces, trace_rows

    out = out or sys.stdout
    err = err or sys.stderr
    if args.output.suffix.lower() != ".jsonl":
        print(
            f"error: {args.output}: the dataset is written as JSON Lines; name it *.jsonl", file=err
        )
        return 2
    try:
        read = read_otel_traces(args.path, log=False)
    except OtelError as exc:
        print(f"error: {exc}", file=err)
        return 2
    for diagnostic in read.diagnostics[:MAX_SHOWN_WARNINGS]:
        print(f"warning: {diagnostic}", file=err)
    if len(read.diagnostics) > MAX_SHOWN_WARNINGS:
        print(f"warning: ... and {len(read.diagnostics) - MAX_SHOWN_WARNINGS} more", file=err)
    if not read.traces:
        print(
            f"error: {args.path}: {read.spans} spans but no trace with an invoke_agent span; "
            "export GenAI spans with message content (e.g. MAF's enable_sensitive_data=True)",
            file=err,
        )
        return 2
    try:
        # checked to load as `evalpipe run` will read it: fail here, not on the schedule
        count = len(write_jsonl(trace_rows(read.traces, per_agent=args.per_agent), args.output))
    except DatasetError as exc:
        print(f"error: the written dataset does not load: {exc}", file=err)
        return 2
    agents = sorted({t.agent for trace in read.traces for t in trace.turns})
    print(
        f"{count} trace{'s' if count != 1 else ''} ({read.spans} spans, agents: "
        f"{', '.join(agents)}) -> {args.output}; {len(read.diagnostics)} warning"
        f"{'s' if len(read.diagnostics) != 1 else ''}",
        file=out,
    )
    return 1 if args.strict and read.diagnostics else 0
