"""Preparing a suite's plan: everything a user can get wrong is found before the first call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalpipe.runner.prepare import prepare_suite
from evalpipe.suite import SuiteError, load_suite


def _suite(tmp_path: Path, rows: list[dict[str, Any]] | None = None, **fields: Any) -> Path:
    with (tmp_path / "rows.jsonl").open("w", encoding="utf-8") as fh:
        for row in rows or [{"id": "a", "query": "Plan a trip to Paris"}]:
            fh.write(json.dumps(row) + "\n")
    data = {
        "name": "s",
        "target": "examples.travel.workflow:workflow",
        "dataset": "rows.jsonl",
        "evaluators": [{"keyword_check": ["Paris"]}, "tool_calls_present"],
        "output_dir": str(tmp_path / "runs"),
        **fields,
    }
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        (
            "mean(relevance) >= 3",
            "no evaluator produces metric 'relevance'; the evaluators produce keyword_check, tool_calls_present",
        ),
        (
            "critic: all_pass(keyword_check)",
            "names agent 'critic', which the workflow does not have; its agents are planner, researcher, writer",
        ),
    ],
)
def test_gates_on_something_that_never_comes_back_are_refused(
    tmp_path: Path, gate: str, message: str
) -> None:
    """Regression: a gate naming a metric no evaluator produces, or an agent the target lacks,
    was found after every call was paid. It is refused while preparing."""
    with pytest.raises(SuiteError, match=message.replace("(", r"\(").replace(")", r"\)")):
        prepare_suite(load_suite(_suite(tmp_path, gates=[gate])))


def test_an_agent_gate_on_a_single_agent_is_refused(tmp_path: Path) -> None:
    """An agent prefix means nothing for a single agent target."""
    path = _suite(
        tmp_path,
        target="evalpipe.targets.demo:travel_agent",
        gates=["writer: all_pass(keyword_check)"],
    )
    with pytest.raises(SuiteError, match="the target is a single agent"):
        prepare_suite(load_suite(path))


def test_an_unset_api_key_variable_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a judge whose api_key_env names an unset variable failed every judge call."""
    monkeypatch.delenv("EVALPIPE_NO_SUCH_KEY", raising=False)
    judge = {
        "judge": {
            "base_url": "http://127.0.0.1:9/v1",
            "model": "m",
            "api_key_env": "EVALPIPE_NO_SUCH_KEY",
            "metrics": ["relevance"],
        }
    }
    path = _suite(tmp_path, evaluators=[judge])
    with pytest.raises(SuiteError, match=r"\$EVALPIPE_NO_SUCH_KEY, which is not set"):
        prepare_suite(load_suite(path))
    monkeypatch.setenv("EVALPIPE_NO_SUCH_KEY", "x")
    assert prepare_suite(load_suite(path)).providers


def test_compare_with_a_missing_run_is_refused(tmp_path: Path) -> None:
    """Regression: compare_with naming a directory that does not exist ran and exited 0."""
    path = _suite(tmp_path, compare_with=str(tmp_path / "nope"))
    with pytest.raises(SuiteError, match="is not a finished run directory"):
        prepare_suite(load_suite(path))


def test_expectations_for_an_agent_the_workflow_lacks_are_refused(tmp_path: Path) -> None:
    """Regression: a per-agent expectation under an unknown agent was ignored, and the check then
    passed vacuously. It is refused naming the row."""
    rows = [{"id": "a", "query": "Plan a trip", "agents": {"wirter": {"expected_output": "x"}}}]
    with pytest.raises(SuiteError, match="row 'a' \\(row 1\\) expects agent 'wirter'"):
        prepare_suite(load_suite(_suite(tmp_path, rows)))


def test_the_run_directory_rules(tmp_path: Path) -> None:
    """--run-dir: a file is refused; an unfinished run of another target is refused; a new or
    empty directory is taken."""
    suite = load_suite(_suite(tmp_path))
    a_file = tmp_path / "afile"
    a_file.write_text("x", encoding="utf-8")
    with pytest.raises(SuiteError, match="is a file, not a run directory"):
        prepare_suite(suite, a_file)
    other = tmp_path / "other"
    other.mkdir()
    (other / "run.json").write_text(
        json.dumps({"identity": "agent|something else"}), encoding="utf-8"
    )
    with pytest.raises(SuiteError, match="an unfinished run of another target"):
        prepare_suite(suite, other)
    assert prepare_suite(suite, tmp_path / "fresh").run_dir == tmp_path / "fresh"


def test_a_suite_run_names_its_results_with_the_provider_however_many_there_are() -> None:
    """Regression: eval_run_id changed with the number of providers ("travel-demo — writer" with
    one, "travel-demo — writer (Local)" with two). A suite run always names the provider; MAF's
    in-process API keeps naming it only when there are several."""
    from evalpipe import LocalEvaluator, tool_calls_present
    from evalpipe.runner import in_process_plan, resolve_target
    from evalpipe.targets.demo import travel_agent

    one = load_suite(
        Path(__file__).resolve().parents[2] / "examples/travel/suite.yaml",
        ["evaluators=[tool_call_args_match]", "gates=[]"],
    )
    plan = prepare_suite(one, None)
    assert [plan.eval_name(p) for p in plan.providers] == ["travel-demo (Local)"]
    assert plan.provider_tail(plan.providers[0]) == " (Local)"
    maf = in_process_plan(
        name="Eval: travel",
        target=resolve_target(travel_agent()),
        kind="agent",
        queries=["hi"],
        providers=[LocalEvaluator(tool_calls_present)],
    )
    assert maf.eval_name(maf.providers[0]) == "Eval: travel"


def test_rows_with_equal_expected_tool_calls_share_one_list() -> None:
    """The plan holds its rows for the whole run: rows expecting equal tool calls share one list
    (equal values only: 1 and 1.0, or another order of calls, are not shared); the values are
    the rows' own."""
    from evalpipe.datasets import QueryRow
    from evalpipe.runner.prepare import rows_from_dataset

    def row(i: int, calls: list[dict[str, Any]] | None) -> QueryRow:
        return QueryRow.model_validate({"id": str(i), "query": "q", "expected_tool_calls": calls})

    weather = [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    dataset = [
        row(0, weather),
        row(1, weather),
        row(2, [{"name": "get_weather", "arguments": {"city": "Rome"}}]),
        row(3, [{"name": "f", "arguments": {"n": 1}}]),
        row(4, [{"name": "f", "arguments": {"n": 1.0}}]),
        row(5, None),
        row(6, []),
    ]
    rows = rows_from_dataset(dataset, "agent")
    calls = [r.expect.expected_tool_calls for r in rows]
    assert calls[0] is calls[1]
    assert calls[2] is not calls[0]
    assert calls[3] is not calls[4]
    assert [c == d.expected_tool_calls for c, d in zip(calls, dataset, strict=True)] == [True] * 7
    assert calls[4][0].arguments == {"n": 1.0}  # type: ignore[index]
    assert isinstance(calls[4][0].arguments["n"], float)  # type: ignore[index]


def test_rows_that_expect_the_same_share_one_expectations() -> None:
    """Rows with the same expected output, context and (shared) tool calls share one immutable
    Expectations; a different value, NaN arguments (equal repr, unequal values) or per-agent
    expectations get their own, each equal to its row's."""
    from evalpipe.datasets import QueryRow
    from evalpipe.runner.prepare import rows_from_dataset

    weather = [{"name": "get_weather", "arguments": {"city": "Paris"}}]

    def nan() -> list[dict[str, Any]]:  # a NaN object of its own per row, as a file's rows have
        return [{"name": "f", "arguments": {"x": float("nan")}}]

    data: list[dict[str, Any]] = [
        {"expected_output": "sunny", "expected_tool_calls": weather},
        {"expected_output": "sunny", "expected_tool_calls": weather},
        {"expected_output": "rainy", "expected_tool_calls": weather},
        {"expected_output": "sunny", "expected_tool_calls": weather, "context": "c"},
        {"expected_output": "sunny", "expected_tool_calls": nan()},
        {"expected_output": "sunny", "expected_tool_calls": nan()},
        {"expected_output": "sunny", "agents": {"writer": {"expected_output": "w"}}},
        {"expected_output": "sunny", "agents": {"writer": {"expected_output": "w"}}},
        {},
        {},
    ]
    dataset = [
        QueryRow.model_validate({"id": str(i), "query": "q", **d}) for i, d in enumerate(data)
    ]
    rows = rows_from_dataset(dataset, "workflow")
    expect = [r.expect for r in rows]
    assert expect[0] is expect[1]
    assert len({id(e) for e in expect[2:4]} | {id(expect[0])}) == 3
    assert expect[4] is not expect[5]  # nan != nan: the calls are not shared, nor what holds them
    assert expect[6] is not expect[7]
    assert expect[6] == expect[7]
    assert expect[8] is expect[9]
    for got, row in zip(expect, dataset, strict=True):
        assert (got.expected_output, got.context) == (row.expected_output, row.context)
        assert got.agents == (row.agents or {})
        if row.expected_tool_calls is None or row is dataset[4] or row is dataset[5]:
            assert got.expected_tool_calls is row.expected_tool_calls
        else:
            assert got.expected_tool_calls == row.expected_tool_calls


def test_a_subclass_of_expected_tool_call_is_shared_by_model_equality() -> None:
    """Calls of an ExpectedToolCall subclass are shared only when equal as models (the class too)
    to the first list kept for the same names and arguments."""
    from evalpipe.datasets import QueryRow
    from evalpipe.items import ExpectedToolCall
    from evalpipe.runner.prepare import rows_from_dataset

    class Other(ExpectedToolCall):
        pass

    plain = ExpectedToolCall.model_validate({"name": "f", "arguments": {"a": 1}})
    other = Other.model_validate({"name": "f", "arguments": {"a": 1}})
    dataset = [
        QueryRow(id="0", query="q", expected_tool_calls=[plain]),
        QueryRow(id="1", query="q", expected_tool_calls=[other]),
        QueryRow(id="2", query="q", expected_tool_calls=[other.model_copy()]),
    ]
    calls = [r.expect.expected_tool_calls for r in rows_from_dataset(dataset, "agent")]
    assert calls[1] is not calls[0]  # another class: unequal models
    assert calls[2] is not calls[1]  # the list kept for these (name, arguments) is row 0's
    assert calls[1] == dataset[1].expected_tool_calls
    assert calls[2] == dataset[2].expected_tool_calls
    assert [type(c[0]) for c in calls if c] == [ExpectedToolCall, Other, Other]


def test_plain_rows_make_the_rows_and_call_keys_their_query_rows_make(tmp_path: Path) -> None:
    """prepare_suite reads plain rows without QueryRow models (datasets.load_rows): the runner
    rows (hash, expectations, tags, recordings) and the call keys a journal is keyed by are the
    ones the QueryRows give."""
    from evalpipe.datasets import PlainRow, load_dataset, load_rows
    from evalpipe.runner.plan import make_calls
    from evalpipe.runner.prepare import rows_from_dataset

    data: list[dict[str, Any]] = [
        {"id": "a", "query": "Plan a trip to Paris"},
        {"query": "b", "expected_output": "x", "context": "c", "tags": ["t"]},
        {"query": "c", "expected_tool_calls": [{"name": "f", "arguments": {"n": 1}}]},
        {"query": "d", "expected_tool_calls": [{"name": "f", "arguments": {"n": 1.0}}]},
        {"query": "e", "expected_tool_calls": [{"name": "f", "arguments": {"n": 1}}]},
        {"query": "f", "expected_tool_calls": [{"name": "f", "arguments": {"x": float("nan")}}]},
        {"query": "g", "agents": {"writer": {"expected_output": "w"}}},
        {
            "query": "h",
            "conversation": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "yo"},
            ],
        },
        {"query": "i", "expected_output": "x", "context": "c", "tags": ["t"]},
    ]
    suite = load_suite(_suite(tmp_path, data, repetitions=2))
    plan = prepare_suite(suite)
    assert sum(isinstance(r, PlainRow) for r in load_rows(tmp_path / "rows.jsonl")) == 7
    models = rows_from_dataset(load_dataset(tmp_path / "rows.jsonl"), plan.kind)
    assert len(plan.rows) == len(models) == len(data)
    for ours, theirs in zip(plan.rows, models, strict=True):
        assert (ours.index, ours.query, ours.key, ours.id, ours.tags) == (
            theirs.index,
            theirs.query,
            theirs.key,
            theirs.id,
            theirs.tags,
        )
        assert (ours.recorded, ours.recorded_head) == (theirs.recorded, theirs.recorded_head)
        got, want = ours.expect, theirs.expect
        assert (got.expected_output, got.context, got.agents) == (
            want.expected_output,
            want.context,
            want.agents,
        )
        assert [c.model_dump_json() for c in got.expected_tool_calls or ()] == [
            c.model_dump_json() for c in want.expected_tool_calls or ()
        ]
    assert plan.calls == make_calls(plan.identity, models, 2)
    assert plan.rows[2].expect.expected_tool_calls is plan.rows[4].expect.expected_tool_calls
    assert plan.rows[1].expect is plan.rows[8].expect
