"""What a flow run shows in the Prefect UI: the summary table, the failures list, links, and the
gate event automations react to. Every number comes from the tally (``evalpipe.tally``)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from prefect.events import emit_event
from prefect.runtime import deployment, flow_run

from evalpipe import artifacts  # its names load on first use: a shard worker needs no pyarrow
from evalpipe._internal.terminal import shorten
from evalpipe.escape import markdown, table_cell
from evalpipe.suite import EvalSuite
from evalpipe.tally import SummaryRow, rate_text
from evalpipe.view.urls import configured_view_url, run_url

__all__ = [
    "GATE_FAILED",
    "GATE_PASSED",
    "artifact_key",
    "emit_gate_event",
    "failures_markdown",
    "gate_markdown",
    "summary_table",
    "view_page",
]

GATE_PASSED = "evalpipe.gate.passed"
GATE_FAILED = "evalpipe.gate.failed"


def artifact_key(name: str) -> str:
    """A Prefect artifact key prefix from a suite name (keys allow only ``[a-z0-9-]``)."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "suite"


def summary_table(rows: Sequence[SummaryRow]) -> list[dict[str, Any]]:
    """One row per provider × agent × metric: the counts and the pass rate with its denominator,
    as summary.parquet and the command line have them."""
    return [
        {
            "provider": table_cell(row.provider),
            "agent": table_cell(row.agent),
            "metric": table_cell(row.metric),
            "n": row.n,
            "passed": row.passed,
            "failed": row.failed,
            "errored": row.errored,
            "n/a": row.not_applicable,
            "pass rate": row.rate_text,
            "mean score": None if row.score_mean is None else round(row.score_mean, 4),
        }
        for row in rows
        if row.kind == "metric"
    ]


def view_page(suite: str, run_name: str, logger: Any = None) -> str | None:
    """The run's page in ``evalpipe view`` when ``EVALPIPE_VIEW_URL`` is set where the flow runs
    (the report and run-directory artifacts link there instead of to ``file://``), else None.
    A value that is not an http(s) URL is logged and ignored."""
    try:
        base = configured_view_url()
    except ValueError as exc:
        if logger is not None:
            logger.warning("%s; the artifacts link to the files instead", exc)
        return None
    return None if base is None else run_url(base, suite, run_name)


FAILURES_LISTED = 50
"""Items the failures artifact lists (with their query and response); the rest are counted."""

SHORT = 200
"""Characters of a query or response the failures artifact shows (then ``…``)."""


def failures_markdown(
    run_dir: str | os.PathLike[str],
    rows: Sequence[SummaryRow],
    limit: int = FAILURES_LISTED,
    *,
    rest: str | None = None,
) -> str:
    """The items of a finished run directory that did not pass, with why, their query and their
    response shortened (at most ``limit``, read with ``read_not_passed``; then how many more, of
    the ``failed + errored`` items the tally counted in ``rows``, the run's summary rows, and
    ``rest``: where they all are).

    Ids, names, queries, responses and reasons are untrusted text: escaped with
    :func:`evalpipe.escape.markdown`, never put in a code span (a backtick in the text would close
    it)."""
    lines = ["# Items that did not pass", ""]
    results = [row for row in rows if row.kind == "result"]
    count = sum(row.failed + row.errored for row in results)
    provider = {row.eval_run_id or "": row.provider for row in results}
    listed = 0
    for level, items in artifacts.read_not_passed(run_dir, limit=limit).items():
        for item in items[: limit - listed]:
            listed += 1
            lines.append(
                f"- {markdown(item['item_id'], 200)} **{item['item_status']}** "
                f"({markdown(provider.get(level, ''))}, {markdown(level)}): "
                f"{markdown(item['why'])}"
            )
            lines.append(f"  - query: {markdown(shorten(item['input_text'], SHORT))}")
            lines.append(f"  - response: {markdown(shorten(item['output_text'], SHORT))}")
    if count == 0:
        lines.append("Every item passed.")
    elif count > limit:
        where = f"; {markdown(rest)}" if rest else " (see scores.parquet)"
        lines += [
            "",
            f"Listed: the first {limit} of {count}; {count - limit} more not listed{where}.",
        ]
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def gate_markdown(report: Any, suite: EvalSuite) -> str:
    """The gate's ``<suite>-gate`` artifact: the verdict, then one table row per clause with the
    value it measured, its bound, n (and errored items) and its verdict, then each clause's
    verdict in words. Clause texts and messages are untrusted (a suite or metric names them):
    escaped."""
    verdict = "passed" if report.passed else "FAILED"
    if not report.passed and suite.warn_only:
        verdict = "FAILED (warn only: the flow run is not failed)"
    held = sum(1 for c in report.clauses if c.passed)
    lines = [
        f"# Gate {verdict}: {markdown(suite.name)}",
        "",
        f"{held} of {len(report.clauses)} clauses hold.",
        "",
        "| clause | agent | value | bound | n | errored | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in report.clauses:
        lines.append(
            f"| {table_cell(c.clause)} | {table_cell(c.agent or 'overall')} | "
            f"{_number(c.observed)} | {_number(c.threshold)} | {c.n} | {c.errored} | "
            f"{'ok' if c.passed else '**FAIL**'} |"
        )
    lines += ["", "## Why", ""]
    lines += [
        f"- {'ok' if c.passed else '**FAIL**'} {markdown(c.clause)}: {markdown(c.message)}"
        for c in report.clauses
    ]
    return "\n".join(lines)


def emit_gate_event(
    suite: EvalSuite,
    rows: Sequence[SummaryRow],
    report: Any,
    failures: Sequence[str],
    outcome: Mapping[str, Any],
) -> None:
    """One event per run for automations: ``evalpipe.gate.failed`` or ``evalpipe.gate.passed``.

    The resource is the suite (``evalpipe.suite.<name>``); related resources are the flow run
    and, for a deployment run, the deployment. A suite without gates passes (``gates: 0``).
    """
    related = [
        {
            "prefect.resource.id": f"prefect.{role}.{run.id}",
            "prefect.resource.role": role,
            "prefect.resource.name": run.name or "",
        }
        for role, run in (("flow-run", flow_run), ("deployment", deployment))
        if run.id
    ]
    payload = {
        "suite": suite.name,
        "target_version": suite.target_version,
        "run_dir": outcome["run_dir"],
        "calls": outcome["calls"],
        "gates": len(suite.gates),
        "warn_only": suite.warn_only,
        "violated": list(failures),
        "results": [
            {
                "provider": r.provider,
                "agent": r.agent,
                "n": r.n,
                "passed": r.passed,
                "failed": r.failed,
                "errored": r.errored,
                "pass_rate": r.pass_rate,
                "pass_rate_denominator": r.pass_rate_denominator,
                "pass_rate_text": rate_text(r.passed, r.failed, r.errored),
            }
            for r in rows
            if r.kind == "result"
        ],
        "clauses": [] if report is None else report.model_dump(mode="json").get("clauses", []),
    }
    emit_event(
        event=GATE_FAILED if failures else GATE_PASSED,
        resource={
            "prefect.resource.id": f"evalpipe.suite.{suite.name}",
            "prefect.resource.name": suite.name,
        },
        related=related,
        payload=payload,
    )
