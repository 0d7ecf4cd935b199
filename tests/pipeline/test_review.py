"""The review flow against a real Prefect server: it pauses for input with the sampled items in the
form's description (hostile text escaped for markdown), the test resumes it through the Prefect API
with what the form would send, the labels file holds exactly those answers, and `evalpipe
calibrate` reads it (evalpipe.pipeline.review)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from evalpipe.calibration import read_labels, review_candidates, sample_for_review
from evalpipe.cli import main
from report.report_builders import write_run

HOSTILE = [
    "[x](javascript:alert(4)) `code`",
    "<script>alert(2)</script><b id=evalpipe-hostile>bold</b>",
    "![pixel](https://evil.example/pixel.png)",
    "cell | pipe | break",
    "bidi \u202egnp.exe\u202c",
    "# not a heading\n---\n* not a list",
]
ROWS = [f"row{i}" for i in range(len(HOSTILE))]


def _run(tmp_path: Path) -> Path:
    judge = {(r, 0): (i % 2 == 0, 4.0 if i % 2 == 0 else 2.0) for i, r in enumerate(ROWS)}
    check = {(r, 0): (i % 3 != 0, 1.0) for i, r in enumerate(ROWS)}  # row0 and row3 disagree
    responses = {(r, 0): HOSTILE[i] for i, r in enumerate(ROWS)}
    return write_run(tmp_path / "run", {"fact": check}, {"relevance": judge}, responses=responses)


def _paused(run_dir: Path, timeout: float = 120.0) -> Any:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            runs = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=None))
            )
            for run in runs:
                if (
                    run.parameters.get("run_dir") == str(run_dir)
                    and run.state
                    and run.state.is_paused()
                ):
                    return run
            time.sleep(0.5)
    raise AssertionError(f"no paused review flow run within {timeout}s")


def test_review_pauses_resumes_through_the_api_and_writes_the_answers(
    prefect_api: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The paused run's form has a verdict, score and note per item and its description shows
    the items' hostile text escaped; resumed via the API, the labels file holds exactly the
    answers given (skipped items left out) and `evalpipe calibrate` reads it."""
    from prefect import get_client
    from prefect.flow_runs import resume_flow_run

    from evalpipe.pipeline.review import review_flow

    run_dir = _run(tmp_path)
    output = tmp_path / "labels.jsonl"
    done: dict[str, Any] = {}

    def start() -> None:
        try:
            done["path"] = asyncio.run(
                review_flow(
                    str(run_dir),
                    "relevance",
                    str(output),
                    sample=6,
                    poll_interval_s=1,
                    timeout_s=300,
                )
            )
        except BaseException as exc:  # reported by the assertion below
            done["error"] = exc

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    run = _paused(run_dir)
    keyset = run.state.state_details.run_input_keyset
    with get_client(sync_client=True) as client:
        description = json.loads(client.read_flow_run_input(run.id, keyset["description"]))
        schema = json.loads(client.read_flow_run_input(run.id, keyset["schema"]))
    assert {"verdict_1", "score_1", "note_1", "verdict_6", "labeller"} <= set(schema["properties"])
    assert "<script>" not in description
    assert "\\<script\\>alert\\(2\\)\\</script\\>" in description
    assert "\\[x\\]\\(javascript\\:alert\\(4\\)\\)" in description
    assert "\\!\\[pixel\\]" in description
    assert "\\u202e" in description
    assert "**Judge:**" not in description  # hidden unless show_verdict
    chosen = sample_for_review(review_candidates(run_dir, "relevance"), 6)
    assert [x.disagrees for x in chosen[:2]] == [True, True]
    assert {x.judge_status for x in chosen} == {"pass", "fail"}
    answers = {
        "labeller": "ann",
        "verdict_1": "fail",
        "verdict_2": "pass",
        "score_2": 4,
        "note_2": "fine <b>really</b>",
        "verdict_3": "pass",
        "verdict_5": "fail",
        "verdict_6": "pass",
    }
    resume_flow_run(run.id, run_input=answers)
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert "error" not in done, done.get("error")
    assert done["path"] == str(output)
    labels = read_labels(output)
    expected = {1: "fail", 2: "pass", 3: "pass", 5: "fail", 6: "pass"}
    assert [(x.row_id, x.repetition, x.agent, x.metric, x.label) for x in labels] == [
        (chosen[n - 1].row_id, 0, "overall", "relevance", v) for n, v in expected.items()
    ]
    assert {x.labeller for x in labels} == {"ann"}
    assert labels[1].note == "score 4; fine <b>really</b>"
    assert main(["calibrate", str(run_dir), "--labels", str(output), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["n_labelled"], row["n"]) == (5, 5)


def test_review_command_bad_metric_is_exit_2_before_prefect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evalpipe review --metric` naming a metric without verdicts is exit 2 naming it; no flow
    run starts and no labels file is written."""
    run_dir = _run(tmp_path)
    assert main(["review", str(run_dir), "--metric", "nope", "-o", str(tmp_path / "l.jsonl")]) == 2
    assert "no item has a pass/fail verdict on metric 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "l.jsonl").exists()


def test_review_command_runs_the_flow_and_writes_the_labels(
    prefect_api: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`evalpipe review` pauses the flow against the configured API; resumed with two answers,
    it exits 0 and the labels file holds those two."""
    from prefect.flow_runs import resume_flow_run

    run_dir = _run(tmp_path)
    output = tmp_path / "cli-labels.jsonl"
    codes: list[int] = []
    args = ["review", str(run_dir), "--metric", "relevance", "--sample", "2", "-o", str(output)]
    thread = threading.Thread(target=lambda: codes.append(main(args)), daemon=True)
    thread.start()
    run = _paused(run_dir)
    resume_flow_run(run.id, run_input={"verdict_1": "pass", "verdict_2": "fail"})
    thread.join(timeout=120)
    assert codes == [0]
    assert [x.label for x in read_labels(output)] == ["pass", "fail"]


def test_review_flow_refuses_an_existing_labels_file_before_pausing(
    prefect_api: str, tmp_path: Path
) -> None:
    """An existing output file fails the flow before it pauses, and the file is left as it was."""
    from evalpipe.pipeline.review import review_flow

    run_dir = _run(tmp_path)
    output = tmp_path / "labels.jsonl"
    output.write_text("kept\n")
    with pytest.raises(FileExistsError, match="labels are never overwritten"):
        asyncio.run(review_flow(str(run_dir), "relevance", str(output), timeout_s=5))
    assert output.read_text() == "kept\n"
