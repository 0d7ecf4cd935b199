"""The review flow: human labels collected in the Prefect UI.

``review_flow(run_dir, metric)`` samples a finished run's items (balanced between the judge's
passes and fails, judge-vs-check disagreements first: ``evalpipe.calibration.sample_for_review``),
pauses for input (``pause_flow_run(wait_for_input=...)``) with the items in the form's markdown
description (every text escaped: ``evalpipe.escape.markdown``), and when the reviewer resumes it
writes their answers as a labels file that ``evalpipe calibrate`` reads. The form has, per item,
a verdict (pass/fail; skip, the default: not labelled), an optional score and an optional note.

It is a plain flow: ``evalpipe review`` runs it against the configured Prefect API, and it can be
deployed (``review_flow.serve()`` / ``.deploy()``) so a reviewer can be sent the flow run's link.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.flow_runs import apause_flow_run
from prefect.input import RunInput
from prefect.runtime import flow_run
from prefect.utilities.urls import url_for
from pydantic import Field, create_model

from evalpipe.calibration import (
    DEFAULT_SEED,
    Label,
    ReviewItem,
    review_candidates,
    sample_for_review,
    write_labels,
)
from evalpipe.escape import markdown
from evalpipe.tally import FAIL, PASS

__all__ = ["labels_from_answers", "review_flow", "review_form", "review_markdown"]

TEXT_LIMIT = 1500
"""Characters of a query or response shown per item (the rest is cut, with its length)."""


def review_form(items: Sequence[ReviewItem]) -> type[RunInput]:
    """The form the Prefect UI shows: ``verdict_N`` (skip/pass/fail), ``score_N`` and ``note_N`` per
    item (1-based, in the description's order), and ``labeller``. Titles hold only numbers: the
    items' text is in the description, escaped."""
    fields: dict[str, Any] = {
        "labeller": (str, Field(default="", title="Your name (labeller)")),
    }
    for number in range(1, len(items) + 1):
        fields[f"verdict_{number}"] = (
            Literal["skip", "pass", "fail"],
            Field(default="skip", title=f"Item {number}: pass or fail"),
        )
        fields[f"score_{number}"] = (
            float | None,
            Field(default=None, title=f"Item {number}: score (optional)"),
        )
        fields[f"note_{number}"] = (
            str,
            Field(default="", title=f"Item {number}: note (optional)"),
        )
    return create_model("ReviewInput", __base__=RunInput, **fields)


def review_markdown(items: Sequence[ReviewItem], metric: str, *, show_verdict: bool) -> str:
    """The form's description: what to judge, then each item's query and response (escaped),
    with the judge's verdict and reason when ``show_verdict``."""
    lines = [
        f"# Label {len(items)} items on {markdown(metric)}",
        "",
        "For each item, read the query and the response and answer **pass** or **fail** in "
        "the fields below (leave an item on skip to leave it unlabelled). A score and a note are optional.",
        "",
    ]
    if not show_verdict:
        lines += ["The judge's verdicts are hidden so they do not sway you.", ""]
    for number, item in enumerate(items, start=1):
        lines += [
            f"## Item {number}",
            "",
            f"row {markdown(item.row_id)}, repetition {item.repetition}, agent "
            f"{markdown(item.agent)}",
            "",
            f"**Query:** {markdown(item.query, TEXT_LIMIT)}",
            "",
            f"**Response:** {markdown(item.response, TEXT_LIMIT)}",
            "",
        ]
        if show_verdict:
            score = "" if item.judge_score is None else f" (score {item.judge_score:g})"
            lines += [
                f"**Judge:** {item.judge_status}{score}: {markdown(item.judge_reason, 500)}",
                "",
            ]
    return "\n".join(lines)


def labels_from_answers(
    items: Sequence[ReviewItem], answers: RunInput, metric: str, *, when: str | None = None
) -> list[Label]:
    """One label per answered item (a verdict given), in the form's order."""
    data = answers.model_dump()
    labeller = data.get("labeller") or None
    stamp = when or datetime.now(UTC).isoformat(timespec="seconds")
    out = []
    for number, item in enumerate(items, start=1):
        verdict = data.get(f"verdict_{number}")
        if verdict not in (PASS, FAIL):
            continue
        score = data.get(f"score_{number}")
        note = data.get(f"note_{number}") or None
        if score is not None:
            note = f"score {score:g}" + (f"; {note}" if note else "")
        out.append(
            Label(
                row_id=item.row_id,
                repetition=item.repetition,
                agent=item.agent,
                metric=metric,
                label=verdict,
                labeller=labeller,
                note=note,
                labelled_at=stamp,
            )
        )
    return out


def _summary(items: Sequence[ReviewItem], labels: Sequence[Label]) -> str:
    judged = {(i.agent, i.row_id, i.repetition): i.judge_status for i in items}
    same = sum(1 for x in labels if judged.get(x.key) == x.label)
    return (
        f"# Review finished\n\n{len(labels)} of {len(items)} items labelled; the judge agreed "
        f"on {same} of those {len(labels)}. Run `evalpipe calibrate` on the labels file for "
        "kappa and its interval."
    )


@flow(name="evalpipe-review", persist_result=False)
async def review_flow(
    run_dir: str,
    metric: str,
    output: str,
    sample: int = 20,
    show_verdict: bool = False,
    seed: int = DEFAULT_SEED,
    timeout_s: int = 7 * 24 * 3600,
    poll_interval_s: int = 5,
) -> str:
    """Pause for a reviewer's labels on ``sample`` items of ``run_dir``'s ``metric``; write them
    to ``output`` (JSONL) and return its path.

    Raises:
        FileExistsError: ``output`` exists (before the pause: labels are never overwritten).
        ValueError: the run has no item with a verdict on ``metric``.
    """
    logger = get_run_logger()
    if await asyncio.to_thread(os.path.exists, output):
        raise FileExistsError(
            f"{output}: exists; labels are never overwritten, name another output"
        )
    candidates = await asyncio.to_thread(review_candidates, run_dir, metric)
    chosen = sample_for_review(candidates, sample, seed=seed)
    if not chosen:
        raise ValueError(f"{run_dir}: no item has a pass/fail verdict on metric {metric!r}")
    run_id = flow_run.id
    link = url_for("flow-run", obj_id=run_id) if run_id else None
    logger.info(
        "Waiting for labels on %d items (%d judge-vs-check disagreements first): open %s in the "
        "Prefect UI, answer the form and resume the run",
        len(chosen),
        sum(1 for x in chosen if x.disagrees),
        link or f"flow run {run_id}",
    )
    form = review_form(chosen)
    answers = await apause_flow_run(
        wait_for_input=form.with_initial_data(
            description=review_markdown(chosen, metric, show_verdict=show_verdict)
        ),
        timeout=timeout_s,
        poll_interval=poll_interval_s,
    )
    labels = labels_from_answers(chosen, answers, metric)
    path = await asyncio.to_thread(write_labels, Path(output), labels)
    await acreate_markdown_artifact(
        key="evalpipe-review", markdown=_summary(chosen, labels), description="review labels"
    )
    logger.info("Wrote %d labels to %s", len(labels), os.fspath(path))
    return str(path)
