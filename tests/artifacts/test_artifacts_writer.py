"""RunWriter: atomic commit, aggregation across batches, deduplication, manifest, filesystems, memory."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import tracemalloc
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from artifact_builders import workflow_batch

import evalpipe.artifacts.encoder as encoder_module
import evalpipe.artifacts.writer as writer_module
from evalpipe import (
    EvalItem,
    EvalItemResult,
    EvalResults,
    EvalScoreResult,
    FunctionCallContent,
    FunctionResultContent,
    LocalEvaluator,
    Message,
    RunUsage,
    keyword_check,
    tool_called_check,
    tool_calls_present,
)
from evalpipe.artifacts import (
    FILES,
    MANIFEST_FILE,
    SCHEMA_VERSION,
    SCHEMAS,
    RunRecord,
    RunWriter,
    load_run,
    read_manifest,
    read_runs,
    read_table,
)
from evalpipe.artifacts.columns import TABLES
from evalpipe.transcripts import TargetRun, WorkflowRun

ALL_FILES = {*FILES.values(), MANIFEST_FILE}


def listing(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def records(n: int) -> list[RunRecord]:
    return [
        RunRecord(run_id=f"r{i}", query_index=i, repetition=0, transcript="x" * 50)
        for i in range(n)
    ]


def test_clean_exit_commits_every_file_and_leaves_no_temp(tmp_path: Path) -> None:
    """Leaving the block normally writes the four tables and manifest.json, nothing else."""
    with RunWriter(tmp_path / "run") as writer:
        writer.add_runs(records(3))
        writer.add_results(workflow_batch(0, 3))
    assert listing(tmp_path / "run") == ALL_FILES


def test_empty_run_writes_empty_tables_with_their_schema(tmp_path: Path) -> None:
    """A run with no rows still has every table, with the declared schema and zero rows."""
    with RunWriter(tmp_path) as writer:
        manifest = writer.finish({})
    for name, schema in SCHEMAS.items():
        table = pq.read_table(tmp_path / FILES[name])
        assert table.num_rows == 0
        assert table.schema.equals(schema, check_metadata=False)
    assert manifest["files"]["runs.parquet"]["rows"] == 0
    assert load_run(tmp_path) == []


def crash_midway(run: Path, batch_start: int, seen: list[set[str]]) -> None:
    """Stream rows into a writer (past several row groups), note the directory, then raise."""
    with RunWriter(run, row_group_size=100) as writer:
        writer.add_runs(records(250))
        writer.add_results(workflow_batch(batch_start, 40))
        seen.append(listing(run))
        raise RuntimeError("crash")


def test_writer_that_raises_midway_leaves_no_final_file(tmp_path: Path) -> None:
    """Rows already streamed to disk sit in hidden temp files; an exception deletes them and no file
    appears under a final name."""
    run = tmp_path / "run"
    seen: list[set[str]] = []
    with pytest.raises(RuntimeError, match="crash"):
        crash_midway(run, 0, seen)
    assert seen[0], "rows were streamed to disk before the crash"
    assert all(name.startswith(".") and name.endswith(".tmp") for name in seen[0])
    assert listing(run) == set()


def test_aborted_rerun_keeps_the_previous_finished_run(tmp_path: Path) -> None:
    """A second writer that fails in the same directory leaves the earlier run's files readable."""
    with RunWriter(tmp_path) as writer:
        writer.add_results(workflow_batch(0, 3))
    before = load_run(tmp_path)
    with pytest.raises(RuntimeError, match="crash"):
        crash_midway(tmp_path, 3, [])
    assert listing(tmp_path) == ALL_FILES
    assert [r.model_dump() for r in load_run(tmp_path)] == [r.model_dump() for r in before]


def test_finished_rerun_replaces_the_previous_run(tmp_path: Path) -> None:
    """A second finished run in the same directory replaces every file, manifest included."""
    with RunWriter(tmp_path) as writer:
        writer.add_results(workflow_batch(0, 3))
    with RunWriter(tmp_path) as writer:
        writer.add_results(workflow_batch(10, 2))
        writer.finish({"second": True})
    assert read_manifest(tmp_path)["second"] is True
    assert [i.item_id for i in load_run(tmp_path)[0].items] == ["wf-10", "wf-11"]


def test_writer_refuses_rows_after_finish(tmp_path: Path) -> None:
    """Adding rows to a finished writer is a programming error, reported as such."""
    writer = RunWriter(tmp_path)
    writer.finish({})
    with pytest.raises(RuntimeError, match="already finished"):
        writer.add_runs(records(1))


def score(
    name: str, value: float | None, passed: bool | None, error: str | None = None
) -> EvalScoreResult:
    return EvalScoreResult(name, value, passed, error_message=error)


def provider_result(
    items: list[EvalItemResult], counts: dict[str, int], status: str, error: str | None
) -> EvalResults:
    per_evaluator = {
        "m1": {"passed": counts["passed"], "failed": 0, "errored": 0},
    }
    return EvalResults(
        provider="P",
        eval_id=f"e-{status}",
        run_id=f"run-{status}",
        status=status,
        result_counts=counts,
        error=error,
        per_evaluator=per_evaluator,
        items=items,
    )


def test_summary_merges_batches_against_hand_computed_numbers(tmp_path: Path) -> None:
    """Counts add across batches, pass rates use passed + failed as denominator, and mean / min /
    max / sample std come from all scores; an item with no metrics counts as errored on each."""
    batch1 = provider_result(
        [
            EvalItemResult("a", "pass", [score("m1", 1.0, True), score("m2", 0.2, False)]),
            EvalItemResult("b", "fail", [score("m1", 0.0, False), score("m2", None, None, "x")]),
        ],
        {"passed": 1, "failed": 1, "errored": 0},
        "completed",
        "e1",
    )
    batch2 = provider_result(
        [
            EvalItemResult("c", "pass", [score("m1", 0.5, True), score("m2", 0.8, True)]),
            EvalItemResult("d", "error", [], "AgentError", "boom"),
            EvalItemResult("e", "pass", [score("m1", 2.0, None), score("m2", 0.6, True)]),
        ],
        {"passed": 2, "failed": 0, "errored": 1},
        "failed",
        "e2",
    )
    with RunWriter(tmp_path) as writer:
        writer.add_results([batch1])
        writer.add_results([batch2])
    rows = {r["metric"]: r for r in read_table(tmp_path, "summary").to_pylist()}

    result = rows[None]
    assert (result["kind"], result["n"], result["passed"], result["failed"], result["errored"]) == (
        "result",
        5,
        3,
        1,
        1,
    )
    assert (result["pass_rate_denominator"], result["pass_rate"]) == (4, 0.75)
    assert result["status"] == "partial"  # the batches disagreed: completed, failed
    assert (result["eval_id"], result["eval_run_id"]) == ("e-completed", "run-completed")
    assert result["error"] == "e1; e2"
    assert json.loads(result["result_counts"]) == {"passed": 3, "failed": 1, "errored": 1}
    assert json.loads(result["per_evaluator"]) == {"m1": {"passed": 3, "failed": 0, "errored": 0}}

    # m1: 1.0 pass, 0.0 fail, 0.5 pass, 2.0 no verdict; item d has no metrics (errored).
    m1 = rows["m1"]
    assert (m1["n"], m1["passed"], m1["failed"], m1["errored"], m1["not_applicable"]) == (
        5,
        2,
        1,
        1,
        1,
    )
    assert (m1["pass_rate_denominator"], m1["pass_rate"]) == (3, pytest.approx(2 / 3))
    assert (m1["score_count"], m1["score_min"], m1["score_max"]) == (4, 0.0, 2.0)
    assert m1["score_mean"] == pytest.approx(0.875)
    # deviations 0.125, -0.875, -0.375, 1.125: squares sum to 2.1875; / (4 - 1)
    assert m1["score_std"] == pytest.approx((2.1875 / 3) ** 0.5)

    # m2: 0.2 fail, error, 0.8 pass, 0.6 pass; plus item d.
    m2 = rows["m2"]
    assert (m2["n"], m2["passed"], m2["failed"], m2["errored"], m2["not_applicable"]) == (
        5,
        2,
        1,
        2,
        0,
    )
    assert (m2["score_count"], m2["score_min"], m2["score_max"]) == (3, 0.2, 0.8)
    assert m2["score_mean"] == pytest.approx(1.6 / 3)
    assert m2["score_std"] == pytest.approx(
        ((0.2 - 1.6 / 3) ** 2 + (0.8 - 1.6 / 3) ** 2 + (0.6 - 1.6 / 3) ** 2) ** 0.5 / 2**0.5
    )


async def test_summary_errored_matches_local_per_evaluator(tmp_path: Path) -> None:
    """For LocalEvaluator results, each metric row's counts equal the provider's per_evaluator."""
    items = [
        EvalItem([Message("user", ["weather?"]), Message("assistant", ["sunny"])], item_id="1"),
        EvalItem([Message("user", ["weather?"])], item_id="2", error_code="AgentError"),
        EvalItem(
            [
                Message("user", ["x"]),
                Message("assistant", [FunctionCallContent(name="get_weather")]),
            ],
            item_id="3",
        ),
    ]
    result = await LocalEvaluator(keyword_check("sunny"), tool_calls_present).evaluate(items)
    with RunWriter(tmp_path) as writer:
        writer.add_results([result])
    rows = [r for r in read_table(tmp_path, "summary").to_pylist() if r["kind"] == "metric"]
    assert {
        r["metric"]: {k: r[k] for k in ("passed", "failed", "errored")} for r in rows
    } == result.per_evaluator


def test_items_are_written_once_per_agent_and_item(tmp_path: Path) -> None:
    """Providers share their items: items.parquet has one row per (agent, item_id), in order."""
    with RunWriter(tmp_path) as writer:
        writer.add_results(workflow_batch(0, 4))
        writer.add_results(workflow_batch(4, 2))
    items = read_table(
        tmp_path, "items", columns=["agent", "item_index", "item_id", "run_id"]
    ).to_pylist()
    assert len(items) == 3 * 6
    researcher = [r for r in items if r["agent"] == "researcher"]
    assert [r["item_id"] for r in researcher] == [f"researcher-{i}" for i in range(6)]
    assert [r["item_index"] for r in researcher] == list(range(6))
    assert researcher[5]["run_id"] == "run-5"


def test_an_item_an_earlier_batch_wrote_is_not_written_again(tmp_path: Path) -> None:
    """An item id an earlier batch wrote (same agent) gets no second items.parquet row, whether
    the whole batch repeats it or one item of it does; the index counts on without gaps."""

    def batch(ids: list[str]) -> list[EvalResults]:
        items = [EvalItem([Message("user", [f"q {i}"])], item_id=i) for i in ids]
        return [
            EvalResults(
                provider="A",
                items=[EvalItemResult(i, "pass") for i in ids],
                input_items=items,
            )
        ]

    with RunWriter(tmp_path, row_group_size=2) as writer:
        writer.add_results(batch(["a", "b"]))
        writer.add_results(batch(["a", "b"]))  # every id seen: nothing new
        writer.add_results(batch(["b", "c", "d"]))  # one seen
    items = read_table(tmp_path, "items", columns=["item_id", "item_index", "query"]).to_pylist()
    assert [(r["item_id"], r["item_index"], r["query"]) for r in items] == [
        ("a", 0, "q a"),
        ("b", 1, "q b"),
        ("c", 2, "q c"),
        ("d", 3, "q d"),
    ]
    scores = read_table(tmp_path, "scores", columns=["item_id", "item_index"]).to_pylist()
    assert [(r["item_id"], r["item_index"]) for r in scores] == [
        ("a", 0),
        ("b", 1),
        ("a", 2),
        ("b", 3),
        ("b", 4),
        ("c", 5),
        ("d", 6),
    ]


def test_items_without_ids_are_kept_per_batch_position(tmp_path: Path) -> None:
    """Items with no item_id are deduplicated across providers by position, never across batches."""

    def batch() -> list[EvalResults]:
        items = [EvalItem([Message("user", [f"q{i}"])]) for i in range(2)]
        return [
            EvalResults(
                provider=p,
                items=[EvalItemResult(str(i), "pass") for i in range(2)],
                input_items=items,
            )
            for p in ("A", "B")
        ]

    with RunWriter(tmp_path) as writer:
        writer.add_results(batch())
        writer.add_results(batch())
    assert read_table(tmp_path, "items").num_rows == 4
    assert [i.item_id for i in load_run(tmp_path)[0].input_items] == [None] * 4


def test_provider_order_change_is_rejected_before_writing(tmp_path: Path) -> None:
    """A batch whose providers come in another order raises, naming both, and writes nothing."""
    with RunWriter(tmp_path) as writer:
        first = workflow_batch(0, 2)
        writer.add_results(first)
        with pytest.raises(
            ValueError, match=r"results\[0\]: provider 'Judge', but earlier batches had 'Local'"
        ):
            writer.add_results(workflow_batch(2, 2)[::-1])
    assert [i.item_id for i in load_run(tmp_path)[1].items] == ["wf-0", "wf-1"]


def test_unsupported_nesting_is_rejected_with_the_agent_named(tmp_path: Path) -> None:
    """sub_results two levels deep, or an agent called "overall", raise ValueError naming the key."""
    inner = EvalResults(provider="P", sub_results={"deep": EvalResults(provider="P")})
    with RunWriter(tmp_path) as writer:
        with pytest.raises(ValueError, match=r"sub_results\['planner'\] has sub_results"):
            writer.add_results([EvalResults(provider="P", sub_results={"planner": inner})])
        with pytest.raises(ValueError, match="'overall' is reserved"):
            writer.add_results(
                [EvalResults(provider="P", sub_results={"overall": EvalResults(provider="P")})]
            )


def test_add_runs_accepts_dicts_and_names_unknown_keys(tmp_path: Path) -> None:
    """Run rows may be dicts of the column names; a misspelt key is an error that names it."""
    with RunWriter(tmp_path) as writer:
        writer.add_runs(
            [{"run_id": "a", "status": "error", "error_code": "Timeout", "cached": True}]
        )
        with pytest.raises(ValueError, match=r"unknown field\(s\) \['latency'\]"):
            writer.add_runs([{"run_id": "b", "latency": 1.0}])
    assert read_runs(tmp_path) == [
        RunRecord(run_id="a", status="error", error_code="Timeout", cached=True)
    ]


def _target_runs() -> list[TargetRun | WorkflowRun]:
    """Calls covering every runs.parquet column: tokens, latency, aware and naive timestamps, an
    errored call, a recording (no timestamps) and a workflow run."""
    aware = dt.datetime(2024, 6, 1, 12, 0, 0, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    naive = dt.datetime(2024, 6, 1, 12, 0, 1)
    return [
        TargetRun(
            query_index=0,
            repetition=1,
            query="q0",
            messages=[Message("assistant", ["a0"])],
            usage=RunUsage(input_tokens=3, output_tokens=4, total_tokens=7, latency_seconds=0.5),
            started_at=aware,
            ended_at=naive,
        ),
        TargetRun(
            query_index=1,
            repetition=0,
            query="q1",
            error_code="AgentError",
            error_message="boom",
            attempts=3,
            started_at=naive,
            ended_at=naive,
        ),
        TargetRun(
            query_index=2, repetition=0, query="recorded", messages=[Message("assistant", ["r"])]
        ),
        WorkflowRun(
            query_index=3,
            repetition=2,
            query="wf",
            workflow="w",
            output=[Message("assistant", ["done"])],
            usage=RunUsage(total_tokens=11),
            error_code="ExecutorError",
            error_message="an executor raised",
            started_at=aware,
            ended_at=aware,
        ),
    ]


def test_add_target_runs_writes_the_bytes_of_add_runs_of_records(tmp_path: Path) -> None:
    """add_target_runs writes the runs.parquet, byte for byte, that add_runs of the calls'
    RunRecord.from_target_run writes (row groups cut at the same rows)."""
    runs = _target_runs() * 3
    run_ids = [f"k{i}" for i in range(len(runs))]
    row_ids = [None if i % 4 == 0 else f"row{i}" for i in range(len(runs))]
    transcripts = [r.model_dump_json(fallback=str) for r in runs]
    cached = [i % 3 == 0 for i in range(len(runs))]
    started = dt.datetime(2024, 6, 1, tzinfo=dt.UTC)
    by_records, by_columns = tmp_path / "records" / "run", tmp_path / "columns" / "run"
    with RunWriter(by_records, row_group_size=5, started_at=started) as writer:
        for first in (0, 7):
            writer.add_runs(
                RunRecord.from_target_run(
                    runs[i],
                    run_id=run_ids[i],
                    target="agent:x",
                    row_id=row_ids[i],
                    cached=cached[i],
                    transcript=transcripts[i],
                )
                for i in range(first, first + 7 if first == 0 else len(runs))
            )
    with RunWriter(by_columns, row_group_size=5, started_at=started) as writer:
        for part in (slice(0, 7), slice(7, None)):
            added = writer.add_target_runs(
                runs[part],
                run_ids=run_ids[part],
                row_ids=row_ids[part],
                transcripts=transcripts[part],
                cached=cached[part],
                target="agent:x",
            )
            assert added == len(runs[part])
    runs_file = FILES["runs"]
    assert pq.ParquetFile(by_columns / runs_file).metadata.num_row_groups == 3
    assert (by_columns / runs_file).read_bytes() == (by_records / runs_file).read_bytes()
    assert [r.status for r in read_runs(by_columns)] == ["ok", "error", "ok", "error"] * 3


def test_add_target_runs_refuses_a_bad_run_id_or_uneven_columns(tmp_path: Path) -> None:
    """An empty run_id, or fewer ids than runs, is refused before anything is written."""
    runs = _target_runs()[:2]
    with RunWriter(tmp_path) as writer:
        with pytest.raises(ValueError, match="non-empty string"):
            writer.add_target_runs(
                runs,
                run_ids=["a", ""],
                row_ids=[None, None],
                transcripts=["{}", "{}"],
                cached=[False, False],
            )
        with pytest.raises(ValueError, match="2 runs but 1 run_ids"):
            writer.add_target_runs(
                runs,
                run_ids=["a"],
                row_ids=[None, None],
                transcripts=["{}", "{}"],
                cached=[False, False],
            )
    assert read_runs(tmp_path) == []


def _answered(index: int, query: str) -> TargetRun:
    """An agent call with a tool call, its result and an answer; its texts hold JSON's specials."""
    return TargetRun(
        query_index=index,
        repetition=0,
        query=query,
        messages=[
            Message(
                "assistant",
                [FunctionCallContent(name="f", arguments={"q": '"],[', "n": [index]}, call_id="c")],
            ),
            Message("tool", [FunctionResultContent(call_id="c", result={"tools": None})]),
            Message("assistant", [f'It is "sunny" \u00e9\U0001f600 ({index})\n']),
        ],
    )


def test_manifest_keeps_the_callers_data_and_adds_versions_and_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """manifest.json: the caller's keys, schema version, file row counts, package versions, timings;
    no git revision outside a repository."""
    monkeypatch.chdir(tmp_path)
    with RunWriter(tmp_path / "run") as writer:
        writer.add_runs(records(2))
        writer.add_results(workflow_batch(0, 3))
        writer.finish({"suite": {"name": "demo"}, "timings": {"flow_s": 1.5}})
    manifest = read_manifest(tmp_path / "run")
    assert manifest["suite"] == {"name": "demo"}
    assert manifest["schema_version"] == SCHEMA_VERSION
    assert manifest["files"]["runs.parquet"]["rows"] == 2
    assert manifest["files"]["items.parquet"]["rows"] == 9
    assert (
        manifest["files"]["scores.parquet"]["bytes"]
        == (tmp_path / "run" / "scores.parquet").stat().st_size
    )
    assert manifest["versions"]["pyarrow"] == pa.__version__
    assert set(manifest["versions"]) == {
        "evalpipe",
        "prefect",
        "pyarrow",
        "pydantic",
        "azure-ai-projects",
    }
    assert manifest["git"] is None
    assert manifest["timings"]["flow_s"] == 1.5
    assert "finished_at" in manifest["timings"]
    assert manifest["providers"] == ["Local", "Judge"]


def test_manifest_records_the_git_revision_of_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a git repository the manifest holds HEAD's commit."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True
        ).stdout

    git("init", "-q")
    (tmp_path / "f.txt").write_text("x")
    git("add", "f.txt")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "init")
    monkeypatch.chdir(tmp_path)
    with RunWriter(tmp_path / "run") as writer:
        manifest = writer.finish({})
    assert manifest["git"] == {"revision": git("rev-parse", "HEAD").strip(), "dirty": False}


def test_object_store_filesystem_writes_under_final_names(tmp_path: Path) -> None:
    """On a filesystem without rename (pyarrow's in-memory mock stands in for S3) the files are
    written directly, and every reader works through the same filesystem."""
    fs = pafs._MockFileSystem()
    with RunWriter("bucket/run", filesystem=fs) as writer:
        writer.add_runs(records(2))
        writer.add_results(workflow_batch(0, 3))
    names = {info.base_name for info in fs.get_file_info(pafs.FileSelector("bucket/run"))}
    assert names == ALL_FILES
    assert len(read_runs("bucket/run", filesystem=fs)) == 2
    assert [r.model_dump() for r in load_run("bucket/run", filesystem=fs)] == [
        r.model_dump() for r in workflow_batch(0, 3)
    ]


def test_run_dir_may_be_a_file_uri(tmp_path: Path) -> None:
    """A file:// URI is resolved through pyarrow.fs.FileSystem.from_uri."""
    uri = (tmp_path / "run").as_uri()
    with RunWriter(uri) as writer:
        writer.add_results(workflow_batch(0, 2))
    assert listing(tmp_path / "run") == ALL_FILES
    assert len(load_run(uri)[0].items) == 2


def test_custom_split_is_stored_by_name_and_not_imported_back(tmp_path: Path) -> None:
    """A custom splitter's import path is recorded in items.split; load_run leaves it unset."""

    def first_two(conversation: list[Message]) -> tuple[list[Message], list[Message]]:
        return conversation[:1], conversation[1:2]

    item = EvalItem(
        [Message("user", ["q"]), Message("assistant", ["a"])], split_strategy=first_two, item_id="1"
    )
    with RunWriter(tmp_path) as writer:
        writer.add_results(
            [EvalResults(provider="P", items=[EvalItemResult("1", "pass")], input_items=[item])]
        )
    row = read_table(tmp_path, "items").to_pylist()[0]
    assert row["split"].endswith(
        ":test_custom_split_is_stored_by_name_and_not_imported_back.<locals>.first_two"
    )
    assert (row["query"], row["response"]) == ("q", "a")
    assert load_run(tmp_path)[0].input_items[0].split_strategy is None


async def checked_batches(count: int, batch: int) -> list[EvalResults]:
    """``count`` items × 3 real checks, evaluated in batches of ``batch`` (one EvalResults each)."""
    evaluator = LocalEvaluator(
        keyword_check("sunny"), tool_called_check("get_weather"), tool_calls_present
    )
    # The messages are shared between items (as a replayed transcript's would be): building 20,000
    # distinct conversations would dominate the test's time without changing what is measured.
    answer = [
        Message("assistant", [FunctionCallContent(name="get_weather", arguments={"city": "Oslo"})]),
        Message("assistant", ["It is sunny in Oslo."]),
    ]
    out = []
    for start in range(0, count, batch):
        items = [
            EvalItem(
                [Message("user", [f"Weather in city {i}?"]), *answer],
                item_id=str(i),
                metadata={"run_id": f"r{i}"},
            )
            for i in range(start, start + batch)
        ]
        out.append(await evaluator.evaluate(items))
    return out


async def test_writer_memory_is_bounded_by_the_row_group_not_the_run(tmp_path: Path) -> None:
    """Writing 20,000 items × 3 checks allocates at peak a few MiB (traced), far less than the
    ~30 MiB of rows the whole tables would take in memory: rows go to disk as they come."""
    batches = await checked_batches(20_000, 1_000)
    tracemalloc.start()  # only the writer's own allocations are traced: the results exist already
    try:
        with RunWriter(tmp_path, row_group_size=1_000) as writer:
            for results in batches:
                writer.add_results([results])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak
    scores = pq.ParquetFile(tmp_path / "scores.parquet")
    assert scores.metadata.num_rows == 60_000
    assert scores.num_row_groups == 60


def test_extend_cuts_row_groups_where_appending_row_by_row_does(tmp_path: Path) -> None:
    """_Sink.extend of many rows flushes at the same rows (max_rows or the text budget, reached
    on the row that crosses it) as appending them one by one; the files hold the same groups."""
    sizes = [(i * 37) % 11 for i in range(500)]
    values = [f"v{i}" for i in range(500)]
    groups: list[list[int]] = []
    for name, one_by_one in (("bulk", False), ("rows", True)):
        sink = writer_module._Sink(
            pafs.LocalFileSystem(),
            str(tmp_path),
            "runs",
            atomic=False,
            max_rows=64,
            constants={"run_name": name},
        )
        sink.max_bytes = 100
        varying = [c.name for c in TABLES["runs"].columns if c.source != "run"]
        for start in range(0, 500, 170):  # uneven pieces, so a piece ends mid-group
            rows = range(start, min(500, start + 170))
            columns: dict[str, Any] = {
                f: [values[i] for i in rows] if f == "run_id" else [None] * len(rows)
                for f in varying
            }
            columns["status"] = ["ok"] * len(rows)
            columns["cached"] = [False] * len(rows)
            if one_by_one:
                for k, i in enumerate(rows):
                    sink.extend({f: [c[k]] for f, c in columns.items()}, [sizes[i]])
            else:
                sink.extend(columns, [sizes[i] for i in rows])
        sink.close()
        file = pq.ParquetFile(sink.path)
        groups.append([file.metadata.row_group(g).num_rows for g in range(file.num_row_groups)])
        assert file.read().column("run_id").to_pylist() == values
        (tmp_path / "runs.parquet").rename(tmp_path / f"{name}.parquet")
    assert groups[0] == groups[1]
    assert len(groups[0]) > 500 // 64 + 1  # the text budget cut groups too, not only max_rows


def test_encoded_scores_statuses_follow_score_status_on_every_row() -> None:
    """RowEncoder's scores status column is score_status of each score, whether every score is a
    plain verdict (the fast path) or some are not (errors, labels, diagnostics, no verdict)."""
    from evalpipe.results import Diagnostic
    from evalpipe.tally import score_status

    def result(scores: list[EvalScoreResult]) -> EvalResults:
        return EvalResults(
            provider="P",
            items=[
                EvalItemResult(item_id=f"i{k}", status="pass", scores=[s])
                for k, s in enumerate(scores)
            ],
        )

    plain = [EvalScoreResult("m", 1.0, passed=k % 3 != 0) for k in range(6)]
    mixed = [
        *plain,
        EvalScoreResult("m", None, passed=True, error_code="E"),
        EvalScoreResult("m", 0.5, passed=None),
        EvalScoreResult("m", None, passed=None),
        EvalScoreResult("m", 1.0, passed=True, label="not_applicable"),
        EvalScoreResult("m", 1.0, passed=True, diagnostics=[Diagnostic("error", "x")]),
        EvalScoreResult("m", 1.0, passed=False, diagnostics=[]),
    ]
    for scores in (plain, mixed, [EvalScoreResult("m", 1.0, passed=True)] * 4):
        res = result(scores)
        encoded = encoder_module.RowEncoder()._scores(encoder_module.Level("P", 0, "overall", res))
        assert encoded is not None
        assert encoded.columns["status"] == [score_status(s) for s in scores]
