"""Output directories as filesystem URIs: file:// is local; a remote URI stages locally and publishes."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest

from evalpipe.artifacts import load_run, read_manifest
from evalpipe.artifacts.storage import publish
from evalpipe.artifacts.writer import resolve_filesystem
from evalpipe.pipeline import arun_suite
from evalpipe.runner.state import is_remote, local_base
from evalpipe.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]


def test_remote_and_local_output_dirs_are_told_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain paths and file:// are local; any other scheme stages under EVALPIPE_STAGING_DIR."""
    monkeypatch.setenv("EVALPIPE_STAGING_DIR", str(tmp_path / "staging"))
    assert not is_remote("runs")
    assert not is_remote("file:///srv/evals")
    assert is_remote("s3://bucket/evals")
    assert is_remote("abfs://container@account.dfs.core.windows.net/evals")
    assert local_base("runs") == Path("runs")
    assert local_base("file:///srv/my%20evals") == Path("/srv/my evals")
    assert local_base("s3://bucket/evals") == tmp_path / "staging"


def test_an_unknown_scheme_names_the_package_to_install() -> None:
    """A scheme neither pyarrow nor fsspec can open is an error that says what to install."""
    with pytest.raises(ValueError, match=r"nosuch://x/y.*install the scheme's package"):
        resolve_filesystem("nosuch://x/y")


def test_publish_copies_the_run_manifest_last_and_keeps_the_journal_local(tmp_path: Path) -> None:
    """publish() copies Parquet files, reports and then manifest.json; journal and marker stay."""
    run = tmp_path / "20260101T000000-abc"
    (run / "journal").mkdir(parents=True)
    (run / "journal" / "calls.jsonl").write_text("{}\n")
    (run / "run.json").write_text("{}")
    for name in ("runs.parquet", "items.parquet", "scores.parquet", "summary.parquet"):
        (run / name).write_bytes(b"PAR1")
    (run / "report.html").write_text("<html></html>")
    (run / "manifest.json").write_text("{}")
    memory = fsspec.filesystem("memory")
    destination = publish(run, "memory://publish-test", "suite-a")
    assert destination == f"memory://publish-test/suite-a/{run.name}"
    names = sorted(
        p.rsplit("/", 1)[-1] for p in memory.ls(f"/publish-test/suite-a/{run.name}", detail=False)
    )
    assert names == [
        "items.parquet",
        "manifest.json",
        "report.html",
        "runs.parquet",
        "scores.parquet",
        "summary.parquet",
    ]


@pytest.mark.usefixtures("prefect_api")
async def test_a_remote_output_dir_publishes_the_finished_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """output_dir memory://...: the run stages locally (journal there) and the finished run is
    readable at {output_dir}/{suite}/{run} with load_run and pyarrow through that filesystem."""
    monkeypatch.setenv("EVALPIPE_STAGING_DIR", str(tmp_path / "staging"))
    suite = load_suite(ROOT / "examples/travel/agent_suite.yaml", ["repetitions=1"])
    suite.output_dir = "memory://evals-bucket/nightly"
    outcome = await arun_suite(suite)
    assert outcome.state == "Completed", outcome.message
    assert outcome.run_dir.is_relative_to(tmp_path / "staging")
    assert (outcome.run_dir / "journal").is_dir()
    expected = f"memory://evals-bucket/nightly/travel-agent/{outcome.run_dir.name}"
    assert outcome.published_to == expected
    memory = fsspec.filesystem("memory")
    remote_dir = expected.removeprefix("memory:/")
    manifest = read_manifest(expected)  # the URI itself: fsspec's memory filesystem
    assert manifest["published_to"] == expected
    assert [r.provider for r in load_run(remote_dir, filesystem=memory)] == [
        r.provider for r in load_run(outcome.run_dir)
    ]
    with memory.open(f"{remote_dir}/runs.parquet", "rb") as fh:
        assert pq.read_table(fh).num_rows == len(
            (ROOT / "examples/travel/queries.jsonl").read_text().splitlines()
        )
    assert not memory.exists(f"{remote_dir}/journal")


@pytest.mark.usefixtures("prefect_api")
async def test_a_file_uri_output_dir_is_written_in_place(tmp_path: Path) -> None:
    """output_dir file:///...: the run directory is created under that path, nothing is published."""
    suite = load_suite(ROOT / "examples/travel/agent_suite.yaml", ["repetitions=1"])
    suite.output_dir = (tmp_path / "evals").as_uri()
    outcome = await arun_suite(suite)
    assert outcome.state == "Completed", outcome.message
    assert outcome.published_to is None
    assert outcome.run_dir.parent == tmp_path / "evals" / "travel-agent"
    assert json.loads((outcome.run_dir / "manifest.json").read_text())["published_to"] is None
