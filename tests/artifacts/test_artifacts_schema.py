"""The artifact schemas, their version checks, RunRecord validation, and docs/artifacts.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from artifact_builders import workflow_batch

from evalpipe.artifacts import (
    FILES,
    MANIFEST_FILE,
    SCHEMA_VERSION,
    SCHEMAS,
    ArtifactError,
    RunRecord,
    RunWriter,
    SchemaVersionError,
    iter_batches,
    load_run,
    local_file,
    read_manifest,
    read_table,
)
from evalpipe.artifacts.columns import TABLES
from evalpipe.artifacts.schema import SCHEMA_VERSION_KEY
from evalpipe.artifacts.storage import publish

DOCS = Path(__file__).resolve().parents[2] / "docs" / "artifacts.md"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    with RunWriter(tmp_path) as writer:
        writer.add_results(workflow_batch(0, 3))
    return tmp_path


def test_every_schema_carries_the_version_and_describes_each_column() -> None:
    """Each table's schema has the version in its metadata and a description on every field."""
    for name, schema in SCHEMAS.items():
        assert schema.metadata[SCHEMA_VERSION_KEY] == str(SCHEMA_VERSION).encode(), name
        for field in schema:
            assert field.metadata[b"description"].strip(), f"{name}.{field.name}"


def test_written_files_carry_the_schema_version(run_dir: Path) -> None:
    """Each Parquet file of a run records the schema version it was written with."""
    for file in FILES.values():
        metadata = pq.read_schema(run_dir / file).metadata
        assert metadata[SCHEMA_VERSION_KEY] == str(SCHEMA_VERSION).encode()


def test_docs_list_every_column_with_its_type() -> None:
    """docs/artifacts.md has a table per file listing exactly the schema's columns and types, each
    row the column's declaration (its nullability and meaning too)."""
    text = DOCS.read_text()
    for name, schema in SCHEMAS.items():
        section = text.split(f"### {FILES[name]}\n\n", 1)[1].split("\n\n", 1)[0]
        documented = re.findall(
            r"^\| `(\w+)` \| (timestamp\[[^\]]*\]|\w+)", section, flags=re.MULTILINE
        )
        assert documented == [(f.name, str(f.type)) for f in schema], name
        rows = [line for line in section.splitlines() if line.startswith("| `")]
        assert rows == [
            f"| `{c.name}` | {c.kind}{'' if c.nullable else ', not null'} | "
            f"{c.doc.replace('|', chr(92) + '|')} |"
            for c in TABLES[name].columns
        ], name


def test_newer_manifest_version_is_refused_with_upgrade_advice(run_dir: Path) -> None:
    """A manifest from a newer schema version raises SchemaVersionError naming both versions."""
    manifest = run_dir / MANIFEST_FILE
    data = json.loads(manifest.read_text())
    data["schema_version"] = SCHEMA_VERSION + 1
    manifest.write_text(json.dumps(data))
    expected = (
        rf"written with artifact schema version {SCHEMA_VERSION + 1}, but this evalpipe reads "
        rf"versions 1 to {SCHEMA_VERSION}; upgrade evalpipe"
    )
    with pytest.raises(SchemaVersionError, match=expected):
        read_manifest(run_dir)
    with pytest.raises(SchemaVersionError):
        load_run(run_dir)


def test_unknown_manifest_version_is_refused(run_dir: Path) -> None:
    """A schema_version that is not an integer is an unknown version, not a crash."""
    manifest = run_dir / MANIFEST_FILE
    data = json.loads(manifest.read_text())
    data["schema_version"] = "1.0-beta"
    manifest.write_text(json.dumps(data))
    with pytest.raises(SchemaVersionError, match=r"unknown artifact schema version '1\.0-beta'"):
        read_manifest(run_dir)


def test_parquet_file_from_a_newer_version_is_refused(run_dir: Path) -> None:
    """A table whose file metadata says a newer version raises, naming the file."""
    path = run_dir / "scores.parquet"
    table = pq.read_table(path)
    newer = {SCHEMA_VERSION_KEY: str(SCHEMA_VERSION + 1).encode()}
    pq.write_table(table.replace_schema_metadata(newer), path)
    with pytest.raises(
        SchemaVersionError, match=r"scores\.parquet: written with artifact schema version"
    ):
        read_table(run_dir, "scores")


def test_unfinished_run_without_manifest_is_reported(tmp_path: Path) -> None:
    """A directory without manifest.json is an unfinished run for every reader."""
    with pytest.raises(ArtifactError, match=r"manifest\.json: not found; a finished run directory"):
        load_run(tmp_path)
    with pytest.raises(ArtifactError, match="not found"):
        iter_batches(tmp_path, "scores")


def test_table_missing_a_column_is_reported_by_name(run_dir: Path) -> None:
    """A table lacking a declared column raises ArtifactError naming the file and the column."""
    path = run_dir / "items.parquet"
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["conversation"]), path)
    with pytest.raises(
        ArtifactError, match=r"items\.parquet: missing column\(s\) \['conversation'\]"
    ):
        load_run(run_dir)


def test_foreign_parquet_file_is_reported(run_dir: Path) -> None:
    """A Parquet file that evalpipe did not write is refused, not misread."""
    pq.write_table(pa.table({"x": [1]}), run_dir / "runs.parquet")
    with pytest.raises(ArtifactError, match=r"runs\.parquet: no evalpipe\.schema_version metadata"):
        read_table(run_dir, "runs")


def test_unknown_table_name_lists_the_tables(run_dir: Path) -> None:
    """Asking for a table that does not exist names the ones that do."""
    with pytest.raises(
        ValueError,
        match=r"unknown run table 'score'; the tables are \['items', 'runs', 'scores', 'summary'\]",
    ):
        read_table(run_dir, "score")


def test_run_record_validates_id_and_status() -> None:
    """A RunRecord needs a non-empty run_id and an ok/error status; the error names the record."""
    with pytest.raises(ValueError, match="run_id must be a non-empty string"):
        RunRecord(run_id="")
    with pytest.raises(
        ValueError, match=r"RunRecord r1: status must be 'ok' or 'error', got 'failed'"
    ):
        RunRecord(run_id="r1", status="failed")  # type: ignore[arg-type]


def test_run_record_without_transcript_cannot_rebuild_a_target_run() -> None:
    """target_run() on a record with no transcript says which run lacks it."""
    with pytest.raises(ValueError, match="run r9 has no transcript"):
        RunRecord(run_id="r9").target_run()


def test_docs_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Python blocks of docs/artifacts.md run in order, in a fresh directory, and print results."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    for index, block in enumerate(blocks):
        exec(
            compile(block, f"docs/artifacts.md[python block {index}]", "exec"),
            {"__name__": "__main__"},
        )
    out = capsys.readouterr().out
    assert "Local 2 passed, 4 failed" in out
    assert "paris 0 ok 3 messages" in out
    # pandas with the pyarrow backend keeps the nullable integers and the UTC timestamps typed
    assert "int64[pyarrow] timestamp[us, tz=UTC][pyarrow]" in out
    # the cross-run examples read the pipeline's layout (runs/<suite>/<run>/) and group by suite,
    # run and row without a join: both runs, each row's two repetitions
    assert "[('travel-demo', 'demo', 'v1', 'atlantis', 2, 4, 2), " in out, out
    assert "('demo', datetime.datetime(" in out
    assert re.search(r"^\s+demo-2\s+atlantis\s+2\s+4\s+2$", out, flags=re.MULTILINE), out
    for run in ("demo", "demo-2"):
        assert re.search(rf"^{run}\s+6\s+\d{{4}}-\d\d-\d\d", out, flags=re.MULTILINE), out


def test_every_table_names_its_run_and_the_times_are_typed_utc(tmp_path: Path) -> None:
    """run_name (the directory's name) is on every row of every table; the run's start and end
    are UTC timestamps in summary.parquet and ISO strings in the manifest."""
    run = tmp_path / "20260101T000000-abc"
    with RunWriter(run) as writer:
        writer.add_runs([RunRecord(run_id="c1")])
        writer.add_results(workflow_batch(0, 3))
    for name in SCHEMAS:
        table = read_table(run, name)
        assert table.schema.names[0] == "run_name"
        assert set(table.column("run_name").to_pylist()) == {run.name}, name
    summary = pq.read_table(run / "summary.parquet")
    assert str(summary.schema.field("run_started_at").type) == "timestamp[us, tz=UTC]"
    started = summary.column("run_started_at")[0].as_py()
    ended = summary.column("run_ended_at")[0].as_py()
    assert started <= ended
    manifest = read_manifest(run)
    assert manifest["run_name"] == run.name
    assert manifest["ended_at"] == ended.isoformat()


def test_a_version_1_run_reads_with_the_new_columns_filled_in(run_dir: Path) -> None:
    """A run written before schema version 2 (no run_name, no timestamps) still reads: run_name
    is the directory's name and the timestamps are null."""
    for file in FILES.values():
        table = pq.read_table(run_dir / file)
        old = [
            c
            for c in table.schema.names
            if c not in ("run_name", "run_started_at", "run_ended_at", "started_at", "ended_at")
        ]
        pq.write_table(
            table.select(old).replace_schema_metadata({SCHEMA_VERSION_KEY: b"1"}), run_dir / file
        )
    manifest = json.loads((run_dir / MANIFEST_FILE).read_text())
    manifest["schema_version"] = 1
    (run_dir / MANIFEST_FILE).write_text(json.dumps(manifest))
    summary = read_table(run_dir, "summary")
    assert summary.schema.names == SCHEMAS["summary"].names
    assert set(summary.column("run_name").to_pylist()) == {run_dir.name}
    assert summary.column("run_started_at").null_count == len(summary)
    batches = list(iter_batches(run_dir, "scores", columns=["run_name", "metric"]))
    assert batches[0].schema.names == ["run_name", "metric"]
    assert load_run(run_dir)[0].provider  # the nested results come back too


def test_every_row_names_its_suite_and_target_version_and_scores_name_their_row(
    tmp_path: Path,
) -> None:
    """suite and target_version are on every row of every table; each scores row carries the
    row_id and repetition of its item (the same as items.parquet's for that item)."""
    run = tmp_path / "nightly" / "r1"
    with RunWriter(run, suite="nightly", target_version="gpt-x@3") as writer:
        writer.add_runs([RunRecord(run_id="c1")])
        writer.add_results(workflow_batch(0, 4))
    for name in SCHEMAS:
        table = read_table(run, name)
        assert table.schema.names[:3] == ["run_name", "suite", "target_version"], name
        assert set(table.column("suite").to_pylist()) == {"nightly"}, name
        assert set(table.column("target_version").to_pylist()) == {"gpt-x@3"}, name
    items = {
        (r["agent"], r["item_id"]): (r["row_id"], r["repetition"])
        for r in read_table(run, "items").to_pylist()
    }
    scores = read_table(run, "scores", columns=["agent", "item_id", "row_id", "repetition"])
    rows = scores.to_pylist()
    assert rows
    assert all(r["row_id"] is not None for r in rows)
    for r in rows:
        assert (r["row_id"], r["repetition"]) == items[(r["agent"], r["item_id"])]


def test_a_version_2_run_reads_with_suite_and_row_columns_null(run_dir: Path) -> None:
    """A run written with schema version 2 (no suite, target_version, scores row_id/repetition)
    reads: those columns come back null, everything else as written."""
    new = {"suite", "target_version", "row_id", "repetition"}
    dropped = {"scores.parquet": new, "summary.parquet": {"suite", "target_version"}}
    for file, gone in dropped.items():
        table = pq.read_table(run_dir / file)
        old = [c for c in table.schema.names if c not in gone]
        pq.write_table(
            table.select(old).replace_schema_metadata({SCHEMA_VERSION_KEY: b"2"}), run_dir / file
        )
    scores = read_table(run_dir, "scores")
    assert scores.schema.names == SCHEMAS["scores"].names
    for column in new:
        assert scores.column(column).null_count == len(scores), column
    assert load_run(run_dir)[0].items


def test_local_file_is_given_only_when_a_parquet_reader_can_take_the_columns_as_they_are(
    run_dir: Path,
) -> None:
    """local_file names a local table's file for a reader that opens it itself (DuckDB), and
    None when that reader could not read the asked columns as written: a version-2 scores file
    lacks row_id (read_table fills it in), a run on a filesystem URI is not on this machine."""
    assert local_file(run_dir, "scores", columns=["row_id", "metric"]) == str(
        run_dir.resolve() / "scores.parquet"
    )
    table = pq.read_table(run_dir / "scores.parquet")
    old = [c for c in table.schema.names if c not in ("suite", "target_version", "row_id")]
    pq.write_table(
        table.select(old).replace_schema_metadata({SCHEMA_VERSION_KEY: b"2"}),
        run_dir / "scores.parquet",
    )
    assert local_file(run_dir, "scores", columns=["metric"]) is not None
    assert local_file(run_dir, "scores", columns=["row_id", "metric"]) is None
    publish(run_dir, "memory://local-file-test/runs", "suite")
    remote = f"memory://local-file-test/runs/suite/{run_dir.name}"
    assert read_table(remote, "items", columns=["agent"]).num_rows
    assert local_file(remote, "items", columns=["agent"]) is None
