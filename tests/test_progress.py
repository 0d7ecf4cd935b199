"""What `evalpipe run` shows while it runs: the stage from the start, then a bar of the calls with
done/total, rate, ETA, the calls' verdicts and the time since the command started; one line stays."""

from __future__ import annotations

import re
import time

from rich.console import Console

from evalpipe.cli.run import _Display
from evalpipe.results import EvalItemResult, EvalResults
from evalpipe.tally import call_verdicts


def _line(display: _Display, console: Console) -> str:
    console.print(display.make_tasks_table(display.tasks))
    return console.export_text(clear=True).strip()


def test_the_display_shows_the_stage_then_calls_rate_eta_verdicts_and_time_since_start() -> None:
    """Before any call the stage and the time since the command started; then done/total, a
    rate, an ETA and the pass/fail/err counts, within 80 columns; the final line sums it up."""
    console = Console(width=80, force_terminal=True, color_system=None, record=True)
    display = _Display(console, time.monotonic() - 7, disabled=True)
    display.stage("starting Prefect")
    assert re.search(r"starting Prefect .* 0:07$", _line(display, console))
    display.hook("calls", 1, 15)
    time.sleep(0.2)
    display.hook("calls", 9, 15)
    display.hook("passed", 6, 15)
    display.hook("failed", 2, 15)
    line = _line(display, console)
    assert len(line) <= 80
    assert re.search(r"calls .* 9/15 \d+\.\d/s ETA 0:0\d pass 6 fail 2 err 0 0:07$", line), line
    display.hook("calls", 15, 15)
    display.hook("passed", 12, 15)
    display.hook("failed", 3, 15)
    assert re.fullmatch(
        r"demo: 15/15 calls in 7\.\d s \(2\.\d/s\); 12 passed every check, 3 failed one or more, 0 errored",
        display.final("demo"),
    )


def test_a_call_s_verdict_is_the_worst_of_its_items_over_providers_and_agents() -> None:
    """call_verdicts: a call errored if any of its items errored, failed if any failed."""

    def item(key: str, status: str) -> EvalItemResult:
        return EvalItemResult(key + status, status, [], metadata={"run_id": key})

    local = EvalResults(
        provider="Local",
        items=[item("a", "pass"), item("b", "pass"), item("c", "fail")],
        sub_results={
            "writer": EvalResults(provider="Local", items=[item("a", "pass"), item("b", "fail")])
        },
    )
    judge = EvalResults(provider="Judge", items=[item("a", "pass"), item("c", "error")])
    counts = call_verdicts([local, judge])
    assert (counts.passed, counts.failed, counts.errored) == (1, 1, 1)
