"""``evalpipe run SUITE.yaml``: run a suite's Prefect flow with a progress bar and a summary."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
)
from rich.text import Text

from evalpipe._internal.collector import collect_less
from evalpipe._internal.malloc import give_back_large_blocks
from evalpipe.cli._common import (
    API_GONE,
    EXIT_GATE_FAILED,
    EXIT_INCOMPLETE,
    EXIT_OK,
    CommandError,
    consoles,
    exits_on,
    quiet_prefect,
    say,
)
from evalpipe.cli.results import print_run
from evalpipe.runner.state import RunLockedError
from evalpipe.suite import SuiteError, load_suite

__all__ = ["register"]


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class _Column(ProgressColumn):
    """A column of text: ``text(task)`` in ``style``."""

    def __init__(self, text: Callable[[Task], str], style: str = "") -> None:
        super().__init__()
        self.text, self.style = text, style

    def render(self, task: Task) -> Text:
        return Text(self.text(task), style=self.style)


def _rate(task: Task) -> str:
    """Calls a second, once there is a rate."""
    speed = task.finished_speed or task.speed
    return f"{speed:.1f}/s" if speed else ""


def _eta(task: Task) -> str:
    """Time left at the current rate."""
    left = task.time_remaining
    return "" if task.total is None or task.finished or left is None else f"ETA {_clock(left)}"


def _verdicts(task: Task) -> str:
    """The calls' verdicts so far (every item of a call passed / one failed / one errored)."""
    f = task.fields
    return "" if task.total is None else f"pass {f['passed']} fail {f['failed']} err {f['errored']}"


class _Display(Progress):
    """What `evalpipe run` shows on stderr while it runs: from the start a spinner and the stage
    (loading the suite, starting Prefect), then a bar of the target calls with done/total, rate,
    ETA and the calls' verdicts so far, and the time since the command started. The bar goes
    when the run ends; :meth:`final` is the one line that stays."""

    def __init__(self, console: Console, started: float, *, disabled: bool) -> None:
        super().__init__(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=12),
            MofNCompleteColumn(),
            _Column(_rate, "progress.data.speed"),
            _Column(_eta, "progress.remaining"),
            _Column(_verdicts),
            # the time since the command started, not since the bar appeared
            _Column(lambda task: _clock(time.monotonic() - started), "progress.elapsed"),
            console=console,
            transient=True,
            disable=disabled,
        )
        self.started = started
        self.task = self.add_task("loading the suite", total=None, passed=0, failed=0, errored=0)

    def stage(self, description: str) -> None:
        """Show what is happening before the calls start."""
        self.update(self.task, description=description)

    def hook(self, stage: str, done: int, total: int) -> None:
        """The flow's progress hook (``evalpipe.pipeline.flow.ProgressHook``)."""
        if stage == "calls":
            if self.tasks[0].total is None:
                self.reset(self.task, total=total, description="calls")
            self.update(self.task, completed=done, total=total)
        elif stage in ("passed", "failed", "errored"):
            count: dict[str, Any] = {stage: done}  # a task field (the verdicts column)
            self.update(self.task, **count)
        elif stage == "items" and done == total:
            self.update(self.task, description="writing")

    def final(self, name: str) -> str:
        """The run's end in one line: calls done, time, rate, and the calls' verdicts."""
        took = time.monotonic() - self.started
        task = self.tasks[0]
        if task.total is None:
            return f"{name}: no target call made, {took:.1f} s"
        done, f = int(task.completed), task.fields
        return (
            f"{name}: {done}/{int(task.total)} calls in {took:.1f} s "
            f"({done / took if took > 0 else 0:.1f}/s); {f['passed']} passed every "
            f"check, {f['failed']} failed one or more, {f['errored']} errored"
        )


@contextlib.contextmanager
def _flow_running(on_workers: bool) -> Iterator[None]:
    """`evalpipe run`'s process while the flow runs, all of it undone when the flow ends (the
    command may run inside another program: the tests call it); ``on_workers``: a task runner's
    workers run the shards.

    The cyclic garbage collector collects less (``collect_less``: what the run prepared is frozen
    out of collections, which come rarer): this process makes and drops millions of small
    objects, almost none in cycles. A process pool's workers get the same for their life (their
    initializer); with workers, this process walks every generation at each collection instead
    (a task runner's future holds its shard's rows in a cycle).

    Arrow allocates with the C library's allocator, not its default pool (mimalloc), which kept
    ~80 MiB of the shards' columns and Parquet pages (100,000 calls on a process pool: peak 531
    against 451 MiB); glibc gives large blocks back (``give_back_large_blocks``).
    """
    from evalpipe.pipeline.flow import process_worker_setup  # lazy: Prefect, only to run

    threshold = gc.get_threshold()
    frozen = gc.get_freeze_count()
    pool = pa.default_memory_pool()
    collect_less(receiving=on_workers)
    setting = process_worker_setup.set(collect_less)
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(pool)
        process_worker_setup.reset(setting)
        gc.set_threshold(*threshold)
        if not frozen:  # what a caller froze stays frozen (with ours: there is no telling apart)
            gc.unfreeze()


def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    give_back_large_blocks()  # this process is the flow's: it receives and writes every shard
    out, err = consoles()
    with _Display(err, started, disabled=args.no_progress) as display:
        with exits_on(SuiteError):
            suite = load_suite(args.suite, [*args.param, *args.budget])
            if args.output is not None:
                suite.output_dir = str(args.output)
            quiet_prefect()
            display.stage(
                "connecting to Prefect" if os.environ.get("PREFECT_API_URL") else "starting Prefect"
            )
            from evalpipe.pipeline import (  # lazy: Prefect, only to run
                PrefectUnavailableError,
                prepare_run,
                run_suite,
            )

            plan = prepare_run(
                suite, run_dir=args.run_dir, rescore=args.rescore, resume=not args.new_run
            )
        display.stage("starting the flow run")
        try:
            with (
                exits_on(RunLockedError, SuiteError),
                _flow_running(suite.task_runner != "threads"),
            ):
                outcome = run_suite(
                    suite,
                    rescore=args.rescore,
                    progress=display.hook,
                    plan=plan,
                    wait=args.wait,
                    # where to watch the flow run: printed above the bar, and kept
                    on_flow_run=lambda url: say(err, f"UI: {url}", soft_wrap=True),
                )
        except PrefectUnavailableError as exc:
            # What Prefect's workers would still log about the API that is gone would bury the
            # message below, the one that matters; nothing they queued can be sent.
            logging.getLogger("prefect").setLevel(logging.CRITICAL + 1)
            API_GONE.set()
            raise CommandError(str(exc), EXIT_INCOMPLETE) from exc
    say(err, display.final(suite.name))
    for note in outcome.notes:
        say(err, f"note: {note}")
    if outcome.published_to:
        say(out, f"published to {outcome.published_to}")
    if outcome.reusable_calls:
        say(
            out,
            f"resumed: {outcome.reusable_calls} call(s) reused from the run's journal "
            "(not called again)",
        )
    if (outcome.run_dir / "manifest.json").exists():
        print_run(outcome.run_dir, out)
        if outcome.ui_url:
            say(out, f"UI: {outcome.ui_url}")
        say(out, f"view: evalpipe view {shlex.quote(str(outcome.run_dir.parent.parent))}")
    if outcome.verdict == "gate_failed":
        say(err, outcome.message, style="red", soft_wrap=True)
        return EXIT_GATE_FAILED
    if outcome.verdict == "incomplete":
        say(
            err,
            f"the run could not complete (flow run {outcome.state}): {outcome.message}; "
            f"run directory {outcome.run_dir}",
            style="red",
            soft_wrap=True,
        )
        return EXIT_INCOMPLETE
    if outcome.verdict == "warned":
        say(out, "gate failed (warn only)", style="yellow")
    return EXIT_OK


def _budget(key: str, kind: type[int] | type[float]) -> Any:
    """An argparse type: a budget (a number more than 0) as the suite override ``key=value``."""

    def parse(text: str) -> str:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: a budget is more than 0")
        return f"{key}={value!r}"

    return parse


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "run",
        help="run a suite's flow on Prefect (ephemeral by default)",
        description=(
            "Run a suite: its target over the dataset with repetitions, every evaluator, the "
            "gate; Parquet files, a report and Prefect artifacts in a run directory."
        ),
    )
    parser.add_argument("suite", type=Path, help="the suite YAML file")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a suite field, e.g. --param repetitions=5 (repeatable; values are YAML)",
    )
    parser.add_argument(
        "--output",
        help="output directory or filesystem URI, e.g. s3://bucket/evals (suite's output_dir)",
    )
    parser.add_argument("--run-dir", type=Path, help="write (or resume) this run directory")
    parser.add_argument(
        "--rescore",
        type=Path,
        metavar="RUN_DIR",
        help="re-evaluate the transcripts stored in RUN_DIR instead of calling the target",
    )
    parser.add_argument(
        "--new-run",
        "--no-resume",
        action="store_true",
        help="start a new run directory (calling everything again) even if an unfinished run "
        "of the same target exists",
    )
    parser.add_argument(
        "--wait",
        nargs="?",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="when a live run holds the run directory, wait for it (at most SECONDS; no value: "
        "as long as it takes): a run it finished is the result (not rewritten), an unfinished "
        "one is resumed, reusing its finished calls; without --wait such a run is refused",
    )
    parser.add_argument(
        "--budget-tokens",
        type=_budget("budget.tokens", int),
        dest="budget",
        action="append",
        default=[],
        metavar="N",
        help="stop the run once its calls (target and judges) have spent N tokens: no new call "
        "starts, the calls in flight are kept, exit 3; run again to resume (the suite's "
        "budget.tokens)",
    )
    parser.add_argument(
        "--budget-usd",
        type=_budget("budget.cost_usd", float),
        dest="budget",
        action="append",
        default=[],
        metavar="DOLLARS",
        help="stop the run once its calls have cost this much at the suite's prices (which "
        "must price every model it calls); as --budget-tokens (the suite's budget.cost_usd)",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress display (the line saying how the run ended is still printed)",
    )
    parser.set_defaults(handler=_run)
