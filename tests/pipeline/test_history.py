"""History across runs, on runs the real flow made: `evalpipe history` (table, json, csv),
`evalpipe bless`, `evalpipe compare --baseline` and `compare_with: baseline`, in a local output
directory and on a filesystem URI the flow publishes to (fsspec's memory://)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from evalpipe.artifacts import baseline_of, find_runs, read_manifest
from evalpipe.cli import main
from evalpipe.escape import markdown
from evalpipe.pipeline import arun_suite
from evalpipe.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "examples/travel/agent_suite.yaml"

pytestmark = pytest.mark.usefixtures("prefect_api")


async def _run(output_dir: str, *params: str) -> str:
    suite = load_suite(SUITE, ["repetitions=1", *params])
    suite.output_dir = output_dir
    outcome = await arun_suite(suite, resume=False)
    assert outcome.state == "Completed", outcome.message
    return outcome.published_to or str(outcome.run_dir)


async def test_history_bless_and_compare_with_the_baseline_on_local_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three runs of a suite: history lists them newest first with version, calls, gate and each
    agent's and metric's pass rate; bless marks one; compare --baseline and compare_with: baseline
    compare with it."""
    monkeypatch.setenv("COLUMNS", "80")
    out = str(tmp_path / "runs")
    first = await _run(out, "target_version=v1")
    second = await _run(
        out, "target_version=v2", "evaluators=[tool_calls_present]", "gates=['no_errors()']"
    )
    assert main(["bless", first]) == 0
    assert "is the baseline of travel-agent" in capsys.readouterr().out
    assert baseline_of(str(Path(first).parent)) == Path(first).name
    third = await _run(out, "target_version=v3", "compare_with=baseline")

    assert main(["history", out]) == 0
    text = capsys.readouterr().out
    assert all(len(line) <= 80 for line in text.splitlines())
    stamp = r"^[ *] \d{4}-\d\d-\d\d \d\d:\d\d "
    lines = [line for line in text.splitlines() if re.match(stamp, line)]
    assert [line[19:].split()[0] for line in lines] == ["v3", "v2", "v1"]  # newest first
    assert all(re.search(r" 8 +0 passed ", line) for line in lines), lines  # calls, err, gate
    assert [line[0] for line in lines] == [" ", " ", "*"]  # the baseline
    assert "* the suite's baseline (evalpipe bless)" in text
    assert re.search(r"^Local · overall\s+\d+\.\d% \(\d+/8\)", text, flags=re.MULTILINE)
    for metric in ("tool_calls_present", "tool_call_args_match", "mentions_expected"):
        assert re.search(rf"^  {metric}\s+\d+\.\d%", text, flags=re.MULTILINE), metric

    assert main(["history", out, "--suite", "travel-agent", "--format", "json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["target_version"] for r in runs] == ["v3", "v2", "v1"]
    assert [r["baseline"] for r in runs] == [False, False, True]
    assert runs[0]["run_name"] == Path(third).name
    assert runs[0]["started_at"] == read_manifest(third)["started_at"]
    assert {"agent": "overall", "metric": "tool_calls_present"}.items() <= runs[1]["pass_rates"][
        1
    ].items()

    assert main(["history", out, "--format", "csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["run_name"] for r in table] == [Path(p).name for p in (third, second, first)]
    assert table[1]["Local/overall/tool_call_args_match pass_rate"] == ""  # not in that run
    assert float(table[2]["Local/overall/tool_calls_present pass_rate"]) == pytest.approx(7 / 8)

    assert main(["compare", "--baseline", second]) == 0
    text = capsys.readouterr().out
    assert f"A (baseline) {first}" in text.replace("\n", "")
    assert main(["history", out, "--suite", "no-such-suite"]) == 0
    assert "no finished run of suite 'no-such-suite'" in capsys.readouterr().err

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    flow_run_id = read_manifest(third)["flow_run_id"]
    async with get_client() as client:
        found = await client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["travel-agent-comparison"]))
        )
    [artifact] = [a for a in found if str(a.flow_run_id) == flow_run_id]
    # compared with the blessed run (its name as the artifact shows it: escaped markdown)
    assert markdown(Path(first).name) in str(artifact.data)


async def test_history_bless_and_compare_read_the_published_uri(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs published to memory://: history, bless and compare --baseline read them by URI."""
    monkeypatch.setenv("EVALPIPE_STAGING_DIR", str(tmp_path / "staging"))
    out = "memory://history-bucket/evals"
    first = await _run(out, "target_version=v1")
    second = await _run(out, "target_version=v2")
    assert first.startswith(out)
    assert second.startswith(out)
    assert [r.location for r in find_runs(out)] == [second, first]
    assert main(["bless", first]) == 0
    capsys.readouterr()
    assert main(["history", out]) == 0
    text = capsys.readouterr().out
    assert "travel-agent: 2 run(s) in memory://history-bucket/evals" in text
    assert "* the suite's baseline" in text
    assert main(["compare", "--baseline", second]) == 0
    assert "no regressions: 0 regression(s)" in capsys.readouterr().out
    assert main(["results", second]) == 0
    assert "evalpipe summary: travel-agent" in capsys.readouterr().out


def test_bless_and_compare_refuse_what_is_not_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """bless of a directory without manifest.json and compare --baseline without a baseline exit 2
    with what to do."""
    (tmp_path / "suite" / "half").mkdir(parents=True)
    assert main(["bless", str(tmp_path / "suite" / "half")]) == 2
    assert "manifest.json: not found" in capsys.readouterr().err
    assert main(["compare", "--baseline", str(tmp_path / "suite" / "half")]) == 2
    assert "no baseline blessed for this suite" in capsys.readouterr().err
    assert main(["compare", str(tmp_path)]) == 2
    assert "compare needs two run directories" in capsys.readouterr().err
    assert main(["history", str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err
