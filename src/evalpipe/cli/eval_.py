"""``evalpipe eval --agent PATH --queries FILE``: evaluate an agent in-process, without Prefect.

The same runner as ``evalpipe run`` (one in-process shard); checks are named as in a suite
(``evalpipe.evaluators.registry``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from evalpipe._internal.imports import load_object
from evalpipe.cli._common import (
    EXIT_GATE_FAILED,
    EXIT_OK,
    CommandError,
    consoles,
    exits_on,
    failures_of,
    print_summary,
    say,
)
from evalpipe.datasets import DatasetError, QueryRow, load_jsonl
from evalpipe.evaluators import registry
from evalpipe.evaluators.local import resolve_evaluators
from evalpipe.itemize import Expectations
from evalpipe.items import ConversationSplit
from evalpipe.results import EvalResults
from evalpipe.runner import in_process_plan, resolve_target, run_in_process
from evalpipe.tally import CallTally, summary_rows

__all__ = ["load_agent", "register"]


def load_agent(spec: str) -> Any:
    """The agent an import path names: an agent, or a factory or class that builds one.

    Raises:
        ValueError: naming the path and what is wrong with it.
    """
    obj = load_object(spec, what="agent")
    if hasattr(obj, "run") and not isinstance(obj, type):
        return obj
    if callable(obj):  # a factory function or an agent class
        agent = obj()
        if hasattr(agent, "run"):
            return agent
    raise ValueError(
        f"agent {spec!r} is neither an agent (an object with async run(messages)) nor a factory "
        "returning one"
    )


async def _evaluate(
    args: argparse.Namespace, rows: list[QueryRow]
) -> tuple[list[EvalResults], dict[str, Any]]:
    agent = load_agent(args.agent)
    checks = [registry.parse_cli(c) for c in args.check] or [
        registry.build("tool_calls_present"),
        registry.build("tool_call_args_match"),
    ]
    target = resolve_target(agent, kind="agent")
    plan = in_process_plan(
        name=args.name or f"Eval: {target.name}",
        target=target,
        kind="agent",
        queries=[r.query for r in rows],
        expectations=[
            Expectations(r.expected_output, r.expected_tool_calls, r.context) for r in rows
        ],
        providers=resolve_evaluators(checks),
        repetitions=args.repetitions,
        split=ConversationSplit(args.split),
        row_ids=[str(r.id) for r in rows],
        tags=[r.tags for r in rows],
    )
    shard = await run_in_process(plan, max_concurrency=args.max_concurrency)
    tally = CallTally()
    for outcome in shard.outcomes:
        tally.add(outcome.source, outcome.run)
    return shard.results, tally.as_dict()


def _eval(args: argparse.Namespace) -> int:
    for flag in ("repetitions", "max_concurrency"):
        if (value := getattr(args, flag)) < 1:
            raise CommandError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    with exits_on(DatasetError, ValueError, TypeError):
        rows = load_jsonl(args.queries)
        results, calls = asyncio.run(_evaluate(args, rows))
    out = consoles()[0]
    rest = (
        f"every item is in {args.json}"
        if args.json is not None
        else "run again with --json FILE to keep every item"
    )
    print_summary(summary_rows(results), failures_of(results), out, calls=calls, rest=rest)
    if args.json is not None:
        args.json.write_text(
            json.dumps([r.model_dump(mode="json") for r in results], indent=2), encoding="utf-8"
        )
        say(out, f"results written to {args.json}")
    if args.strict and not all(r.all_passed for r in results):
        return EXIT_GATE_FAILED
    return EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "eval",
        help="evaluate an agent over a JSONL query set, in-process (no Prefect)",
        description="Evaluate an agent over a JSONL query set in this process, without Prefect.",
    )
    parser.add_argument(
        "--agent",
        required=True,
        help="import path of an agent or agent factory, package.module:name",
    )
    parser.add_argument(
        "--queries", required=True, type=Path, help='JSONL file, one {"query": ...} per line'
    )
    parser.add_argument(
        "--check",
        action="append",
        default=[],
        metavar="SPEC",
        help="a check, as in a suite: NAME, NAME:arg1,arg2 or NAME:key=value,... for "
        f"{', '.join(n for n in registry.names() if registry.ENTRIES[n].kind != 'provider')}, "
        "or package.module:check (repeatable; default tool_calls_present and "
        "tool_call_args_match)",
    )
    parser.add_argument("--repetitions", type=int, default=1, help="runs per query (default 1)")
    parser.add_argument(
        "--max-concurrency", type=int, default=8, help="agent runs at once (default 8)"
    )
    parser.add_argument(
        "--split",
        choices=[s.value for s in ConversationSplit],
        default="last_turn",
        help="how each transcript splits into the query and the response the checks see: "
        "last_turn (default) the answer to the latest user message, earlier turns being the "
        "query's context; full the whole trajectory after the first user message (tool calls "
        "and all)",
    )
    parser.add_argument("--name", help="eval name (default 'Eval: <agent name>')")
    parser.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="also write the results (every item and score) as JSON to FILE",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 unless every item passed")
    parser.set_defaults(handler=_eval)
