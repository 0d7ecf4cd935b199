"""Equal kept scores as one object: what is shared, what is not, and that gates and the failures
artifact read the shared results exactly as the originals."""

from __future__ import annotations

import copy
import itertools

from evalpipe import Diagnostic, EvalItemResult, EvalResults, EvalScoreResult
from evalpipe._internal.shared_scores import ScoreTable, share_scores
from evalpipe.gates import evaluate_gates
from evalpipe.pipeline.prefect_artifacts import failures_markdown

GATES = [
    "mean(rel) >= 0.5",
    "mean(rel, max_errors=5) >= 0.5",
    "pass_rate(rel, max_error_rate=0.5) > 0.4",
    "at_most(2, rel, below=0.5, max_errors=9)",
    "at_most(0, rel, below=1, min_n=50)",
    "all_pass(kw, max_errors=3)",
    "all_pass(kw)",
    "no_errors()",
    "no_errors(rel)",
    "error_rate() <= 0.2",
    "error_rate(kw) < 0.5",
    "writer: mean(rel) >= 0.2",
    "writer: all_pass(kw)",
    "critic: no_errors()",
]


def _score(i: int, name: str) -> EvalScoreResult:
    """Scores cycling through the values a reader could tell apart."""
    kinds: list[EvalScoreResult] = [
        EvalScoreResult(name, 1.0, True, reason="ok"),
        EvalScoreResult(name, 1.0, True, reason="ok"),
        EvalScoreResult(name, 0.0, False, reason="missing\nsecond line"),
        EvalScoreResult(name, -0.0, False, reason="missing\nsecond line"),
        EvalScoreResult(name, 1, True, reason="ok"),
        EvalScoreResult(name, True, True, reason="ok"),  # type: ignore[arg-type]
        EvalScoreResult(name, 0.5, None, reason="no verdict", threshold=0.5),
        EvalScoreResult(name, None, None, error_message="boom", error_code="CheckError"),
        EvalScoreResult(name, 0.25, False, label="not_applicable"),
        EvalScoreResult(name, 0.75, True, sample={"reason": "kept"}),
        EvalScoreResult(
            name, 0.3, False, diagnostics=[Diagnostic("error", "parse")], error_code="ParseError"
        ),
        EvalScoreResult(name, 0.9, True, latency_s=-0.0),
    ]
    return copy.copy(kinds[(i * 7 + len(name)) % len(kinds)])


def _items(prefix: str, n: int) -> list[EvalItemResult]:
    items = []
    for i in range(n):
        if i % 11 == 5:
            items.append(
                EvalItemResult(
                    f"{prefix}{i}", "error", [], error_code="AgentError", error_message="x"
                )
            )
            continue
        scores = [_score(i, "rel"), _score(i // 3, "kw")]
        status = "pass" if all(s.passed for s in scores) else "fail"
        items.append(
            EvalItemResult(f"{prefix}{i}", status, scores, input_text=f"q{i}", output_text=f"r{i}")
        )
    return items


def _results() -> list[EvalResults]:
    writer = EvalResults(provider="local", run_id="r1", items=_items("w", 40))
    critic = EvalResults(provider="local", run_id="r1", status="failed", items=_items("c", 9))
    top = EvalResults(
        provider="local",
        run_id="r1",
        items=_items("", 60),
        per_evaluator={"rel": {"passed": 1}},
        sub_results={"writer": writer, "critic": critic},
    )
    other = EvalResults(provider="judge", run_id="r2", items=_items("j", 25))
    return [top, other]


def _scores(results: list[EvalResults]) -> list[EvalScoreResult]:
    return [s for r in results for level in r.iter_results() for i in level.items for s in i.scores]


def test_gates_and_failures_read_shared_results_as_the_originals() -> None:
    """Every clause's verdict and message and the failures artifact are identical after sharing."""
    original = _results()
    shared = copy.deepcopy(original)
    table = ScoreTable()
    for r in shared:
        share_scores(r, table)
    assert len({id(s) for s in _scores(shared)}) < len({id(s) for s in _scores(original)})
    before = evaluate_gates(GATES, original).model_dump(mode="json")
    after = evaluate_gates(GATES, shared).model_dump(mode="json")
    assert after == before
    assert failures_markdown(shared, 7, rest="x") == failures_markdown(original, 7, rest="x")
    assert [repr(s) for s in _scores(shared)] == [repr(s) for s in _scores(original)]


def test_only_scores_of_the_same_values_and_types_are_one_object() -> None:
    """1.0, 1 and True, 0.0 and -0.0 stay apart; scores with a sample or diagnostics are not shared."""
    items = [
        EvalItemResult(str(i), "pass", [copy.copy(s)])
        for i, s in enumerate(
            itertools.chain.from_iterable(
                [
                    EvalScoreResult("m", 1.0, True),
                    EvalScoreResult("m", 1, True),
                    EvalScoreResult("m", True, True),  # type: ignore[arg-type]
                    EvalScoreResult("m", 0.0, True),
                    EvalScoreResult("m", -0.0, True),
                    EvalScoreResult("m", 1.0, True, sample={"a": 1}),
                    EvalScoreResult("m", 1.0, True, diagnostics=[Diagnostic("warning", "w")]),
                ]
                for _ in range(2)
            )
        )
    ]
    result = EvalResults(provider="p", items=items)
    share_scores(result, ScoreTable())
    first, second = result.items[:7], result.items[7:]
    same = [a.scores[0] is b.scores[0] for a, b in zip(first, second, strict=True)]
    assert same == [True, True, True, True, False, False, False]
    assert first[0].scores is second[0].scores  # the lists too
    assert len({id(i.scores[0]) for i in first}) == 7


def test_a_full_table_shares_what_it_has_and_keeps_the_rest() -> None:
    """Past its limit the table adds nothing, still shares what it holds, and changes no value."""
    items = [
        EvalItemResult(str(i), "pass", [EvalScoreResult("m", float(i % 5), True)])
        for i in range(20)
    ]
    result = EvalResults(provider="p", items=items)
    values = [repr(i.scores) for i in items]
    table = ScoreTable(limit=2)
    share_scores(result, table)
    assert len(table.scores) == 2
    assert len(table.lists) == 2
    assert [repr(i.scores) for i in result.items] == values
    assert result.items[0].scores is result.items[5].scores
    assert result.items[2].scores is not result.items[7].scores
