"""Round trips through a run directory: load_run gives back the EvalResults that were written, and
the files are readable by pyarrow, pandas and duckdb."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from artifact_builders import AGENTS, workflow_batch

from evalpipe import (
    ConversationSplit,
    EvalItem,
    EvalResults,
    LocalEvaluator,
    evaluate_agent,
    evaluator,
    keyword_check,
    tool_call_args_match,
    tool_calls_present,
)
from evalpipe.artifacts import (
    RunRecord,
    RunWriter,
    columns,
    load_run,
    read_rows,
    read_runs,
    reader,
)
from evalpipe.artifacts.reader import LOADED
from evalpipe.targets.demo import travel_agent
from runner_helpers import transcripts


def assert_same(loaded: list[EvalResults], expected: list[EvalResults]) -> None:
    """Equal dumps (every result, item and score field) and equal input_items at every level."""
    assert [r.model_dump() for r in loaded] == [r.model_dump() for r in expected]
    for got, want in zip(loaded, expected, strict=True):
        assert list(got.sub_results) == list(want.sub_results)
        for got_level, want_level in zip(got.iter_results(), want.iter_results(), strict=True):
            assert got_level.input_items == want_level.input_items


def write(run_dir: Path, *batches: list[EvalResults]) -> None:
    with RunWriter(run_dir) as writer:
        for batch in batches:
            writer.add_results(batch)


def test_workflow_results_round_trip_field_for_field(tmp_path: Path) -> None:
    """A 2-provider, 2-agent workflow batch with every field set comes back equal, in order."""
    batch = workflow_batch(0, 9)
    write(tmp_path, batch)
    loaded = load_run(tmp_path)
    assert_same(loaded, batch)
    assert [r.provider for r in loaded] == ["Local", "Judge"]
    assert list(loaded[1].sub_results) == list(AGENTS)
    judge_score = loaded[1].items[0].scores[0]
    assert judge_score.diagnostics is not None
    assert judge_score.diagnostics[1].severity == "warning"
    assert judge_score.token_usage == {
        "input_tokens": 100,
        "output_tokens": 20,
        "total_tokens": 120,
        "cached_tokens": 7,
    }
    assert loaded[1].items[0].scores[1].token_usage == {}


def test_multi_batch_run_loads_as_one_concatenated_result(tmp_path: Path) -> None:
    """Items of several batches come back in arrival order; counts and per_evaluator are summed and
    run-level errors joined, as if the whole run had been evaluated at once."""
    first, second = workflow_batch(0, 5), workflow_batch(5, 4)
    write(tmp_path, first, second)

    def merged(a: EvalResults, b: EvalResults) -> EvalResults:
        per_evaluator: dict[str, dict[str, int]] = {}
        for source in (a.per_evaluator, b.per_evaluator):
            for name, bucket in source.items():
                mine = per_evaluator.setdefault(name, {})
                for key, value in bucket.items():
                    mine[key] = mine.get(key, 0) + value
        errors = [e for e in (a.error, b.error) if e is not None]
        return EvalResults(
            provider=a.provider,
            eval_id=a.eval_id,
            run_id=a.run_id,
            status=a.status,
            report_url=a.report_url,
            result_counts={
                k: (a.result_counts or {}).get(k, 0) + (b.result_counts or {}).get(k, 0)
                for k in ("passed", "failed", "errored")
            },
            error="; ".join(errors) or None,
            per_evaluator=per_evaluator,
            items=a.items + b.items,
            input_items=a.input_items + b.input_items,
            sub_results={k: merged(a.sub_results[k], b.sub_results[k]) for k in a.sub_results},
        )

    expected = [merged(a, b) for a, b in zip(first, second, strict=True)]
    assert_same(load_run(tmp_path), expected)


class FlakyTravelAgent:
    """The demo travel agent, except that it raises on queries mentioning Atlantis."""

    name = "flaky-travel"

    def __init__(self) -> None:
        self.inner = travel_agent()
        self.tools = self.inner.tools

    async def run(self, messages: Any, **kwargs: Any) -> Any:
        if "Atlantis" in messages[-1].text:
            raise RuntimeError("no such city")
        return await self.inner.run(messages, **kwargs)


@evaluator
def short_answer(response: str) -> float:
    """A float score: 1.0 for short answers, falling with length."""
    return min(1.0, 80 / max(len(response), 1))


@evaluator
def picky(query: str) -> bool:
    """Raises on the London query, so that item is errored by the check itself."""
    if "London" in query:
        raise ValueError("cannot judge London")
    return True


async def test_evaluate_agent_with_real_local_checks_round_trips(tmp_path: Path) -> None:
    """evaluate_agent over the demo agent (one query failing in the agent, one check raising), with
    two providers and FULL split, is written and loaded back equal."""
    results = await evaluate_agent(
        agent=FlakyTravelAgent(),
        queries=["Weather in Paris?", "Hotels in London?", "Weather in Atlantis?"],
        expected_output=["sunny", None, "?"],
        evaluators=[
            LocalEvaluator(keyword_check("°C"), tool_call_args_match, short_answer),
            LocalEvaluator(tool_calls_present, picky),
        ],
        conversation_split=ConversationSplit.FULL,
        num_repetitions=2,
    )
    statuses = {i.status for r in results for i in r.items}
    assert statuses >= {"error", "pass"}
    write(tmp_path, results)
    loaded = load_run(tmp_path)
    assert_same(loaded, results)
    assert loaded[0].items[0].scores[2].score == results[0].items[0].scores[2].score


async def test_read_runs_gives_back_transcripts_for_rescoring(tmp_path: Path) -> None:
    """runs.parquet rows come back as equal RunRecords whose transcripts rebuild the TargetRuns."""
    runs = await transcripts(
        travel_agent(), ["Weather in Paris?", "Hotels in Rome?"], repetitions=2
    )
    records = [
        RunRecord.from_target_run(
            run, run_id=f"call-{i}", target="demo:travel", row_id=str(i % 2), cached=i == 3
        )
        for i, run in enumerate(runs)
    ]
    with RunWriter(tmp_path) as writer:
        assert writer.add_runs(records) == 4
    loaded = read_runs(tmp_path)
    assert loaded == records
    assert [r.target_run() for r in loaded] == runs


@pytest.fixture
def written_run(tmp_path: Path) -> Path:
    """A finished run of two workflow batches, with its target calls."""
    with RunWriter(tmp_path) as writer:
        writer.add_runs(
            RunRecord(
                run_id=f"run-{i}",
                row_id=f"row-{i % 4}",
                query_index=i % 4,
                repetition=i // 4,
                target="demo:workflow",
                status="error" if i % 3 == 2 else "ok",
                error_code="AgentError" if i % 3 == 2 else None,
                latency_s=0.25,
                transcript="{}",
            )
            for i in range(8)
        )
        writer.add_results(workflow_batch(0, 5))
        writer.add_results(workflow_batch(5, 3))
    return tmp_path


def test_files_are_readable_by_pyarrow(written_run: Path) -> None:
    """pyarrow reads each file with the declared column types and row counts."""
    scores = pq.read_table(written_run / "scores.parquet")
    assert scores.schema.field("score").type == "double"
    # 8 items × 3 levels: errored items have one row, the others one per metric (2 local, 3 judge).
    errored = sum(1 for i in range(8) if i % 3 == 2)
    assert scores.num_rows == 3 * (errored * 2 + (8 - errored) * (2 + 3))
    assert pq.read_table(written_run / "items.parquet").num_rows == 3 * 8
    assert pq.read_table(written_run / "runs.parquet").num_rows == 8


def test_files_are_readable_by_pandas(written_run: Path) -> None:
    """pandas reads the summary; the Local keyword_check pass rate per agent is passed / (passed + failed)."""
    summary = pd.read_parquet(written_run / "summary.parquet")
    rows = summary[
        (summary.kind == "metric")
        & (summary.provider == "Local")
        & (summary.metric == "keyword_check")
    ]
    assert list(rows.agent) == ["overall", *AGENTS]
    # Items 0..7: 2 and 5 errored (no metrics); keyword_check fails when index % 4 == 1: only 1.
    assert (set(rows.passed), set(rows.failed), set(rows.errored)) == ({5}, {1}, {2})
    assert rows.pass_rate.tolist() == pytest.approx([5 / 6] * 3)


def test_files_are_readable_by_duckdb(written_run: Path) -> None:
    """duckdb joins scores to items to runs with plain SQL over the files."""
    con = duckdb.connect()
    rows = con.execute(
        f"""
        SELECT i.agent, count(*) AS n, sum(CASE WHEN s.passed THEN 1 ELSE 0 END) AS passed
        FROM '{written_run / "scores.parquet"}' s
        JOIN '{written_run / "items.parquet"}' i USING (agent, item_id)
        JOIN '{written_run / "runs.parquet"}' r ON r.run_id = i.run_id
        WHERE s.provider = 'Judge' AND s.metric = 'relevance' AND r.status = 'ok'
        GROUP BY i.agent ORDER BY i.agent
        """
    ).fetchall()
    # Calls 0..7 without 2 and 5: relevance passes when index % 5 >= 2 (3, 4, 7).
    assert rows == [("overall", 6, 3), ("researcher", 6, 3), ("writer", 6, 3)]
    con.close()


def test_loaded_items_answer_like_the_originals(tmp_path: Path) -> None:
    """Rebuilt EvalItems split the same way: query, response and tool calls as before."""
    batch = workflow_batch(0, 4)
    write(tmp_path, batch)
    original: list[EvalItem] = batch[0].sub_results["writer"].input_items
    loaded = load_run(tmp_path)[0].sub_results["writer"].input_items
    assert [(i.query, i.response, i.function_calls) for i in loaded] == [
        (i.query, i.response, i.function_calls) for i in original
    ]


def test_load_run_can_skip_rebuilding_input_items(tmp_path: Path) -> None:
    """input_items=False gives the same results with no EvalItems (the costly part of a large run)."""
    batch = workflow_batch(0, 4)
    write(tmp_path, batch)
    loaded = load_run(tmp_path, input_items=False)
    assert [r.model_dump() for r in loaded] == [r.model_dump() for r in batch]
    assert all(not level.input_items for r in loaded for level in r.iter_results())


@pytest.mark.parametrize("table", ["items", "scores"])
def test_read_rows_reads_only_the_rows_asked_for(tmp_path: Path, table: str) -> None:
    """read_rows gives exactly the rows at the asked positions, in the order asked, from a file of
    many row groups, and turns only those rows into Python objects; a position past the end is
    an IndexError."""
    batch = workflow_batch(0, 9)
    with RunWriter(tmp_path, row_group_size=4) as writer:
        writer.add_results(batch)
    everything = pq.read_table(tmp_path / f"{table}.parquet").to_pylist()
    assert pq.ParquetFile(tmp_path / f"{table}.parquet").num_row_groups > 3
    asked = [len(everything) - 1, 0, len(everything) // 2, 5]
    before = LOADED["item_rows"]
    got = read_rows(tmp_path, table, asked)
    assert got == [everything[p] for p in asked]
    assert LOADED["item_rows"] - before == len(asked)
    assert read_rows(tmp_path, table, [1], columns=["agent"]) == [{"agent": everything[1]["agent"]}]
    assert read_rows(tmp_path, table, []) == []
    with pytest.raises(IndexError, match=f"no row {len(everything)}"):
        read_rows(tmp_path, table, [len(everything)])


@pytest.mark.parametrize(
    "text",
    [
        '{"query_index": 3, "row_id": "q3", "tags": ["a", "b"], "run_id": "abc"}',
        '{"big": 1180591620717411303424, "f": 0.1, "e": 1e300, "neg": -0.0, "one": 1.0}',
        '{"u": "\\u00e9\\u2603 \\u2028", "raw": "é☃", "n": null, "nested": [1, {"x": [true]}]}',
        '{"lone": "\\ud800x"}',  # a lone surrogate escape: pydantic-core refuses it
        '{"dup": 1, "dup": 2}',
    ],
)
def test_item_metadata_is_read_as_json_loads_reads_it(text: str) -> None:
    """An item result's metadata text comes back as json.loads gives it: values and their types."""
    got = columns.json_object(text)
    assert got == json.loads(text)
    assert repr(got) == repr(json.loads(text))  # 1 and 1.0, -0.0 and 0.0 stay apart
    assert columns.json_object(None) is None


def test_row_positions_become_an_int64_array_of_the_same_values() -> None:
    """_indices gives the positions as they are, as int64, for take()."""
    positions = [0, 3, 5, 8_191, 2**40]
    array = reader._indices(positions)
    assert array.type == pa.int64()
    assert array.to_pylist() == positions
    assert array.null_count == 0
    assert reader._indices([]).to_pylist() == []
