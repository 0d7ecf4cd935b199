"""The ``evalpipe`` command line.

``evalpipe run SUITE.yaml`` runs a suite's Prefect flow (ephemeral Prefect unless PREFECT_API_URL is
set) with a progress bar and a summary; ``evalpipe results RUN_DIR`` prints a run's summary again;
``evalpipe eval`` evaluates an agent over a JSONL query set in-process, without Prefect;
``evalpipe cache stats|clean`` inspects the judge/agent response cache; ``evalpipe report`` and
``evalpipe compare`` render a run's HTML report and compare two runs; ``evalpipe deploy`` and
``evalpipe serve`` put suites on a Prefect server; ``evalpipe import otel|foundry-threads`` turns
production traffic into a recorded dataset.
Exit codes: 0 done, 1 a gate failed (``run``) or not all passed (``eval --strict``), 2 bad input
(the message says what to fix).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from evalpipe._internal.imports import load_object
from evalpipe.checks import (
    keyword_check,
    tool_call_args_match,
    tool_called_check,
    tool_calls_present,
)
from evalpipe.datasets import DatasetError, load_jsonl
from evalpipe.evaluate import evaluate_agent
from evalpipe.items import ConversationSplit
from evalpipe.results import EvalResults
from evalpipe.summary import run_stats, summarize

__all__ = ["main", "parse_check"]

_BUILTIN_CHECKS: dict[str, Callable[[list[str]], Any]] = {
    "keyword_check": lambda args: keyword_check(*args),
    "tool_called_check": lambda args: tool_called_check(*args),
    "tool_called_any": lambda args: tool_called_check(*args, mode="any"),
    "tool_calls_present": lambda args: tool_calls_present,
    "tool_call_args_match": lambda args: tool_call_args_match,
}


def parse_check(spec: str) -> Any:
    """A check from its command-line form.

    ``keyword_check:sunny,paris``, ``tool_called_check:get_weather``, ``tool_called_any:a,b``,
    ``tool_calls_present``, ``tool_call_args_match``, or the import path of a check or evaluator
    (``package.module:name``).

    Raises:
        ValueError: for an unknown name or a path that does not import.
    """
    name, _, rest = spec.partition(":")
    if name in _BUILTIN_CHECKS:
        args = [a.strip() for a in rest.split(",") if a.strip()] if rest else []
        return _BUILTIN_CHECKS[name](args)
    close = difflib.get_close_matches(name, _BUILTIN_CHECKS, n=1)
    unknown = ValueError(
        f"unknown check {spec!r}"
        + (f" (did you mean {close[0]!r}?)" if close else "")
        + f"; use one of {sorted(_BUILTIN_CHECKS)} or an import path 'package.module:check'"
    )
    if not rest:
        raise unknown
    try:
        return load_object(spec, what="check")
    except ValueError:
        if close:  # more likely a misspelt built-in than a missing module
            raise unknown from None
        raise


def _load_agent(spec: str) -> Any:
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


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_summary(
    results: Sequence[EvalResults],
    console: Console,
    *,
    max_failures: int = 10,
    not_called: str | None = None,
) -> None:
    """Print the per-metric table, the items that did not pass, and the run statistics.

    ``not_called`` names where the transcripts came from when no target was called
    ("recorded transcripts", "re-scored transcripts"); then there is no latency to show."""
    table = Table(title="evalpipe summary")
    table.add_column("provider", no_wrap=True)
    table.add_column("agent")
    table.add_column("metric", no_wrap=True)
    for column in ("passed", "failed", "errored", "pass rate", "n", "mean score"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in summarize(results):
        rate = row.pass_rate
        table.add_row(
            row.provider,
            row.agent,
            row.metric,
            str(row.passed),
            str(row.failed),
            str(row.errored),
            _fmt(rate, ".1%"),
            str(row.passed + row.failed),
            _fmt(row.mean_score, ".3f"),
        )
    console.print(table)
    for res in results:
        for level in res.iter_results():
            bad = [i for i in level.items if not i.is_passed]
            if bad:
                console.print(
                    f"[bold]{level.run_id}: items not passed ({len(bad)} of {len(level.items)}):[/]"
                )
            for item in bad[:max_failures]:
                meta = item.metadata or {}
                label = item.item_id
                if "row_id" in meta:
                    label = f"{meta['row_id']} (rep {meta.get('repetition', 0)})"
                why = item.error_message or "; ".join(
                    f"{s.name}: {(s.reason or 'failed').splitlines()[0]}"
                    for s in item.scores
                    if s.passed is False
                )
                console.print(
                    f"  {label} [{item.status}] {item.input_text!r}: {why}",
                    markup=False,
                    highlight=False,
                )
            if len(bad) > max_failures:
                console.print(f"  ... and {len(bad) - max_failures} more")
    for res in results:
        for level in res.iter_results():
            verdict = "[green]all passed[/]" if level.all_passed else "[red]not all passed[/]"
            console.print(
                f"{level.run_id}: {level.passed} passed, {level.failed} failed, "
                f"{level.errored} errored of {level.passed + level.failed + level.errored} items "
                f"— {verdict}"
            )
    if results:
        stats = run_stats(results[0].input_items)
        if not_called:
            console.print(f"{not_called}: {stats.runs} (no target was called)")
            return
        console.print(
            f"target calls: {stats.runs} ({stats.errored} errored), latency p50 "
            f"{_fmt(stats.latency_p50, '.3f')} s, p95 {_fmt(stats.latency_p95, '.3f')} s, tokens "
            f"{stats.total_tokens if stats.total_tokens is not None else '-'}"
        )


async def _eval(args: argparse.Namespace) -> list[EvalResults]:
    rows = load_jsonl(args.queries)
    agent = _load_agent(args.agent)
    checks = [parse_check(c) for c in args.check] or [tool_calls_present, tool_call_args_match]
    has_expected = any(r.expected_output is not None for r in rows)
    has_tools = any(r.expected_tool_calls is not None for r in rows)
    has_context = any(r.context is not None for r in rows)
    results = await evaluate_agent(
        agent=agent,
        queries=[r.query for r in rows],
        expected_output=[r.expected_output for r in rows] if has_expected else None,
        expected_tool_calls=[r.expected_tool_calls or [] for r in rows] if has_tools else None,
        context=[r.context for r in rows] if has_context else None,
        evaluators=checks,
        eval_name=args.name,
        conversation_split=ConversationSplit(args.split),
        num_repetitions=args.repetitions,
        max_concurrency=args.max_concurrency,
    )
    # Carry each dataset row's id and tags into its results, so failures name the row.
    for res in results:
        for item in res.items:
            qi = (item.metadata or {}).get("query_index")
            if isinstance(qi, int):
                item.metadata = {
                    **(item.metadata or {}),
                    "row_id": rows[qi].id,
                    "tags": rows[qi].tags,
                }
    return results


def _quiet_prefect() -> None:
    """Prefect's own console logs would tear the progress bar; keep warnings and errors only."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # The ephemeral server drops events still in flight when the process exits and logs each
    # drop as a traceback; the run's Parquet files are the record, so keep its console quiet.
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")


def _run(args: argparse.Namespace, console: Console, err: Console) -> int:
    from evalpipe.suite import load_suite

    suite = load_suite(args.suite, args.param)
    if args.output is not None:
        suite.output_dir = str(args.output)
    _quiet_prefect()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from evalpipe.pipeline import run_suite

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=args.no_progress,
    ) as bar:
        tasks: dict[str, Any] = {}
        labels = {"calls": "target calls", "items": "shards evaluated"}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(labels.get(stage, stage), total=total)
            bar.update(tasks[stage], completed=done, total=total)

        outcome = run_suite(
            suite,
            run_dir=args.run_dir,
            rescore=args.rescore,
            resume=not args.no_resume,
            progress=progress,
        )
    if outcome.published_to:
        console.print(f"published to {outcome.published_to}")
    if outcome.resumed_calls:
        console.print(f"resumed: {outcome.resumed_calls} call(s) taken from the run's journal")
    if (outcome.run_dir / "manifest.json").exists():
        _print_run(outcome.run_dir, console)
    if outcome.state != "Completed":
        err.print(
            f"flow run {outcome.state}: {outcome.message}",
            style="red",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return 1
    if outcome.gate_passed is False:
        console.print("[yellow]gate failed (warn only)[/]")
    return 0


def _print_run(run_dir: Path, console: Console) -> None:
    from evalpipe.artifacts import load_run, read_manifest

    results = load_run(run_dir)
    manifest = read_manifest(run_dir)
    not_called = None
    if manifest.get("rescored_from"):
        not_called = "re-scored transcripts"
    elif (manifest.get("suite") or {}).get("target") is None:
        not_called = "recorded transcripts"
    print_summary(results, console, not_called=not_called)
    gate = manifest.get("gate")
    if gate:
        verdict = "[green]passed[/]" if gate.get("passed") else "[red]FAILED[/]"
        console.print(f"gate {verdict}")
        for clause in gate.get("clauses", []):
            mark = "ok  " if clause.get("passed") else "FAIL"
            console.print(f"  {mark} {clause.get('message') or clause.get('clause')}", markup=False)
    console.print(f"run directory: {run_dir}")
    if (run_dir / "report.html").is_file():
        console.print(f"report: {run_dir / 'report.html'}")


def _results(args: argparse.Namespace, console: Console) -> int:
    from evalpipe.artifacts import ArtifactError

    run_dir = Path(args.run_dir)
    if not (run_dir / "manifest.json").is_file():
        raise ValueError(
            f"{run_dir}: not a finished run directory (no manifest.json); pass a directory that "
            "`evalpipe run` completed"
        )
    try:
        _print_run(run_dir, console)
    except ArtifactError as exc:
        raise ValueError(str(exc)) from None
    return 0


def _deploy(args: argparse.Namespace, err: Console) -> int:
    from evalpipe.pipeline.deploy import DeployError, deploy

    try:
        return deploy(args.prefect_file, args.name, create_pools=not args.no_create_pool)
    except DeployError as exc:
        raise ValueError(str(exc)) from None


def _serve(args: argparse.Namespace, err: Console) -> int:
    from evalpipe.pipeline.deploy import DeployError, serve
    from evalpipe.suite import apply_params

    params = apply_params({}, args.param) if args.param else None
    try:
        serve(
            args.suite,
            name=args.name,
            cron=args.cron,
            interval=args.interval,
            repetitions=args.repetitions,
            params=params,
            tags=args.tag,
        )
    except DeployError as exc:
        raise ValueError(str(exc)) from None
    return 0


def _cache(args: argparse.Namespace, console: Console) -> int:
    from evalpipe.cache import cache_clean, cache_stats

    if args.cache_command == "clean":
        removed = cache_clean(args.dir)
        console.print(
            f"removed {removed} expired entr{'y' if removed == 1 else 'ies'} from {args.dir}"
        )
        return 0
    stats = cache_stats(args.dir)
    for key, value in stats.model_dump().items():
        console.print(f"{key}: {value}")
    return 0


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evalpipe", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a suite's flow on Prefect (ephemeral by default)")
    run.add_argument("suite", type=Path, help="the suite YAML file")
    run.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a suite field, e.g. --param repetitions=5 (repeatable; values are YAML)",
    )
    run.add_argument(
        "--output",
        default=None,
        help="output directory or filesystem URI, e.g. s3://bucket/evals (suite's output_dir)",
    )
    run.add_argument(
        "--run-dir", type=Path, default=None, help="write (or resume) this run directory"
    )
    run.add_argument(
        "--rescore",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="re-evaluate the transcripts stored in RUN_DIR instead of calling the target",
    )
    run.add_argument(
        "--no-resume",
        action="store_true",
        help="start a new run even if an unfinished run of the same suite exists",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    res = sub.add_parser("results", help="print a finished run's summary again")
    res.add_argument("run_dir", type=Path, help="a run directory written by `evalpipe run`")
    cache = sub.add_parser("cache", help="inspect or clean the response cache")
    cache.add_argument("cache_command", choices=["stats", "clean"])
    cache.add_argument("dir", type=Path, help="the cache directory")
    dep = sub.add_parser(
        "deploy",
        help="check the suites, create the work pools, and `prefect deploy` a prefect.yaml",
    )
    dep.add_argument(
        "--prefect-file",
        type=Path,
        default=Path("deployments/prefect.yaml"),
        help="the deployments file (default deployments/prefect.yaml)",
    )
    dep.add_argument(
        "--name", action="append", default=[], help="deploy only this deployment (repeatable)"
    )
    dep.add_argument(
        "--no-create-pool", action="store_true", help="do not create missing process work pools"
    )
    srv = sub.add_parser(
        "serve", help="register a deployment of a suite and run its flow runs in this process"
    )
    srv.add_argument("suite", help="the suite YAML file")
    srv.add_argument("--name", default=None, help="deployment name (default: the suite's name)")
    when = srv.add_mutually_exclusive_group()
    when.add_argument("--cron", default=None, help='a cron schedule, e.g. "0 2 * * *" (UTC)')
    when.add_argument("--interval", type=int, default=None, help="a schedule every N seconds")
    srv.add_argument("--repetitions", type=int, default=None, help="override repetitions")
    srv.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a suite field for every run (repeatable; values are YAML)",
    )
    srv.add_argument("--tag", action="append", default=[], help="a deployment tag (repeatable)")
    imp = sub.add_parser(
        "import", help="write a recorded dataset from production traffic (OTel traces, Foundry)"
    )
    import_sub = imp.add_subparsers(dest="import_command", required=True)
    from evalpipe.foundry._import import add_import_foundry_parser
    from evalpipe.recorded_commands import add_import_otel_parser

    add_import_otel_parser(import_sub)
    add_import_foundry_parser(import_sub)
    from evalpipe.report import add_report_commands

    add_report_commands(sub)
    ev = sub.add_parser("eval", help="evaluate an agent over a JSONL query set, in-process")
    ev.add_argument(
        "--agent",
        required=True,
        help="import path of an agent or agent factory, package.module:name",
    )
    ev.add_argument(
        "--queries", required=True, type=Path, help='JSONL file, one {"query": ...} per line'
    )
    ev.add_argument(
        "--check",
        action="append",
        default=[],
        metavar="SPEC",
        help="a check: keyword_check:a,b | tool_called_check:t | tool_called_any:a,b | tool_calls_present | tool_call_args_match | package.module:check (repeatable)",
    )
    ev.add_argument("--repetitions", type=int, default=1, help="runs per query (default 1)")
    ev.add_argument("--max-concurrency", type=int, default=8, help="agent runs at once (default 8)")
    ev.add_argument("--split", choices=[s.value for s in ConversationSplit], default="last_turn")
    ev.add_argument("--name", default=None, help="eval name (default 'Eval: <agent name>')")
    ev.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    ev.add_argument("--strict", action="store_true", help="exit 1 unless every item passed")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _build_parser().parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 120)
    err = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    try:
        if args.command == "run":
            return _run(args, console, err)
        if args.command == "results":
            return _results(args, console)
        if args.command == "cache":
            return _cache(args, console)
        if getattr(args, "handler", None) is not None:  # import otel | foundry-threads
            return int(args.handler(args))
        if args.command == "deploy":
            return _deploy(args, err)
        if args.command == "serve":
            return _serve(args, err)
        if args.repetitions < 1:
            raise ValueError(f"--repetitions must be >= 1, got {args.repetitions}")
        results = asyncio.run(_eval(args))
    except (DatasetError, ValueError, TypeError) as exc:
        err.print(f"error: {exc}", style="red", markup=False, highlight=False, soft_wrap=True)
        return 2
    print_summary(results, console)
    if args.json is not None:
        args.json.write_text(
            json.dumps([r.model_dump(mode="json") for r in results], indent=2), encoding="utf-8"
        )
        console.print(f"results written to {args.json}")
    if args.strict and not all(r.all_passed for r in results):
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
