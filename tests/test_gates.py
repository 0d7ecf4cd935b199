"""Gates: clauses over a run's results (per agent, errored items), composition, report and parser.

Results come from real LocalEvaluator runs: a check named "relevance" reads its score from the
response text ("4" scores 4.0 and passes at >= 4; "boom" raises, so that item errors).
"""

from __future__ import annotations

import pytest
import yaml
from examples.travel.workflow import travel_workflow

from evalpipe import (
    Diagnostic,
    EvalItem,
    EvalItemResult,
    EvalResults,
    EvalScoreResult,
    LocalEvaluator,
    Message,
    evaluator,
)
from evalpipe.evaluate import evaluate_workflow
from evalpipe.evaluators.nlp import expected_fact_check
from evalpipe.gates import (
    ACCEPTED_FORMS,
    AllPass,
    AtMost,
    ClauseResult,
    ErrorRate,
    Gate,
    GateReport,
    GateSyntaxError,
    NoErrors,
    Threshold,
    all_pass,
    at_most,
    error_rate,
    evaluate_gates,
    mean,
    no_errors,
    parse_gates,
    pass_rate,
)

Score = float | str | None


@evaluator(name="relevance")
def relevance(response: str) -> dict[str, float]:
    return {"score": float(response), "threshold": 4}


@evaluator(name="expected_fact")
def expected_fact(response: str) -> bool:
    return "30 days" in response


async def run_local(responses: list[Score], *checks: object) -> EvalResults:
    """One LocalEvaluator run; None makes an item whose agent run failed (AgentError)."""
    items = [
        EvalItem(
            [Message("user", ["q"]), Message("assistant", [str(r)])],
            item_id=str(k),
            **({"error_code": "AgentError", "error_message": "boom"} if r is None else {}),
        )
        for k, r in enumerate(responses)
    ]
    return await LocalEvaluator(*(checks or (relevance,))).evaluate(items)  # type: ignore[arg-type]


async def workflow(
    overall: list[Score], researcher: list[Score], writer: list[Score]
) -> EvalResults:
    top = await run_local(overall)
    subs = {"researcher": await run_local(researcher), "writer": await run_local(writer)}
    return top.model_copy(update={"sub_results": subs})


# --------------------------------------------------------------------------------------------
# Clauses


async def test_mean_passes_with_its_numbers() -> None:
    """mean over [4, 4, 2, 5] is 15/4 = 3.75 >= 3.5; the result has observed, n and threshold."""
    outcome = (mean("relevance") >= 3.5).evaluate([await run_local([4, 4, 2, 5])])
    assert outcome == ClauseResult(
        clause="mean(relevance) >= 3.5",
        passed=True,
        metric="relevance",
        observed=3.75,
        threshold=3.5,
        n=4,
        message="mean 3.75 over n=4; holds >= 3.5",
    )


async def test_mean_fails_below_the_threshold() -> None:
    """mean over [4, 2, 3] is 9/3 = 3.0, which fails >= 3.5 and says so."""
    outcome = (mean("relevance") >= 3.5).evaluate([await run_local([4, 2, 3])])
    assert not outcome.passed
    assert outcome.observed == 3.0
    assert outcome.message == "mean 3 over n=3; needs >= 3.5"


async def test_every_comparison_operator() -> None:
    """>=, >, <=, < compare the aggregate with the bound (mean of [2, 4] = 3)."""
    results = [await run_local([2, 4])]
    assert (mean("relevance") >= 3).evaluate(results).passed
    assert not (mean("relevance") > 3).evaluate(results).passed
    assert (mean("relevance") <= 3).evaluate(results).passed
    assert not (mean("relevance") < 3).evaluate(results).passed


async def test_errored_items_are_left_out_of_the_mean_and_fail_the_clause_by_default() -> None:
    """Regression: a gate passed with most calls errored, because errored items were only left
    out. They are still never averaged, but a clause fails unless it allows them."""
    # scores 4, <error>, 5 and an agent failure: mean = (4 + 5) / 2 = 4.5 over n=2, 2 errored
    results = [await run_local([4, "boom", 5, None])]
    outcome = (mean("relevance") >= 4).evaluate(results)
    assert (outcome.passed, outcome.observed, outcome.n, outcome.errored) == (False, 4.5, 2, 2)
    assert outcome.message == (
        "mean 4.5 over n=2, 2 errored excluded; holds >= 4; FAILS: 2 errored > max_errors=0 "
        "(could not evaluate is not a pass)"
    )
    allowed = (mean("relevance") >= 4).allowing(max_errors=2).evaluate(results)
    assert (allowed.passed, allowed.message) == (
        True,
        "mean 4.5 over n=2, 2 errored excluded; holds >= 4",
    )
    assert not (mean("relevance") >= 4).allowing(max_errors=1).evaluate(results).passed
    by_share = (mean("relevance") >= 4).allowing(max_error_rate=0.5)
    assert by_share.evaluate(results).passed  # 2 of 4 covered items
    assert not (mean("relevance") >= 4).allowing(max_error_rate=0.4).evaluate(results).passed


async def test_a_clause_over_too_few_scores_fails_naming_n() -> None:
    """min_n (default 1) fails a clause over fewer scores, naming n."""
    results = [await run_local([5, 5])]
    assert (mean("relevance") >= 4).evaluate(results).passed
    outcome = (mean("relevance") >= 4).allowing(min_n=3).evaluate(results)
    assert not outcome.passed
    assert outcome.message.endswith("FAILS: n=2 < min_n=3")


def test_limits_round_trip_through_the_text_form() -> None:
    """max_errors, max_error_rate and min_n are read from clause text and written back."""
    [clause] = parse_gates(["writer: pass_rate(relevance, max_errors=2, min_n=10) >= 0.9"])
    assert clause.max_errors == 2  # type: ignore[attr-defined]
    assert str(clause) == "writer: pass_rate(relevance, max_errors=2, min_n=10) >= 0.9"
    [again] = parse_gates([str(clause)])
    assert again == clause
    [share] = parse_gates(["all_pass(tool_calls_present, max_error_rate=0.1)"])
    assert str(share) == "all_pass(tool_calls_present, max_error_rate=0.1)"
    with pytest.raises(GateSyntaxError, match="max_errors must be an integer >= 0"):
        parse_gates(["all_pass(x, max_errors=-1)"])


async def test_a_clause_without_scores_fails() -> None:
    """n == 0 (every item errored, or the metric is absent) fails with "no scores"."""
    errored = [await run_local(["boom", None])]
    outcome = (mean("relevance") >= 1).evaluate(errored)
    assert not outcome.passed
    assert outcome.message.startswith("no scores for relevance, 2 errored excluded")
    absent = at_most(0, "coherence", below=3).evaluate([await run_local([5])])
    assert (absent.passed, absent.message) == (False, "no scores for coherence")


async def test_at_most_counts_scores_strictly_below() -> None:
    """[4, 2, 1, 3, 5] has two scores below 3 (2 and 1; 3 is not below 3): at_most(1) fails."""
    results = [await run_local([4, 2, 1, 3, 5])]
    outcome = at_most(1, "relevance", below=3).evaluate(results)
    assert not outcome.passed
    assert (outcome.observed, outcome.n, outcome.items) == (2.0, 5, ["1", "2"])
    assert outcome.message == (
        "2 of n=5 relevance scores below 3 (items 1, 2); more than the 1 allowed"
    )
    assert at_most(2, "relevance", below=3).evaluate(results).passed


async def test_all_pass_lists_the_items_that_did_not() -> None:
    """all_pass reads each score's own verdict (here: pass at >= 4)."""
    results = [await run_local([4, 3, 5, 1])]
    outcome = all_pass("relevance").evaluate(results)
    assert not outcome.passed
    assert outcome.message == "2 of n=4 relevance did not pass (items 1, 3)"
    assert all_pass("relevance").evaluate([await run_local([4, 5])]).message == (
        "all n=2 relevance passed"
    )


async def test_pass_rate_is_the_share_of_passing_verdicts() -> None:
    """[4, 3, 5, 1] with pass at >= 4: 2 of 4 pass, rate 0.5."""
    results = [await run_local([4, 3, 5, 1])]
    outcome = (pass_rate("relevance") >= 0.5).evaluate(results)
    assert (outcome.passed, outcome.observed) == (True, 0.5)
    assert outcome.message == "pass rate 0.5 (2 of n=4 passed); holds >= 0.5"
    assert not (pass_rate("relevance") > 0.5).evaluate(results).passed


async def test_no_errors_names_errored_items_and_metrics() -> None:
    """no_errors fails on a check error and an agent error, naming the item and code."""
    results = [await run_local([4, "boom", None])]
    outcome = no_errors().evaluate(results)
    assert not outcome.passed
    assert (outcome.n, outcome.errored, outcome.items) == (3, 2, ["1", "2"])
    assert outcome.message == "2 errors in n=3 items: 1 CheckError, 2 AgentError"
    assert no_errors().evaluate([await run_local([4, 5])]).message == "no errors in n=2 items"


def test_no_errors_catches_error_diagnostics_and_unfinished_runs() -> None:
    """An error diagnostic on a scored metric and a provider run that did not complete count."""
    judged = EvalScoreResult(
        "relevance",
        3.0,
        False,
        error_code="JudgeParseError",
        diagnostics=[Diagnostic("error", "verdict was not JSON")],
    )
    results = EvalResults(
        provider="Judge",
        status="timeout",
        items=[EvalItemResult(item_id="a", status="fail", scores=[judged])],
    )
    outcome = no_errors().evaluate([results])
    assert outcome.message == "1 error in n=1 items: a relevance JudgeParseError; Judge run timeout"
    # The same metric is not averaged either.
    assert (
        (mean("relevance") >= 1)
        .evaluate([results])
        .message.startswith("no scores for relevance, 1 errored excluded")
    )


def test_no_errors_names_an_item_whose_label_has_a_space_whole() -> None:
    """no_errors lists the errored items by their whole label, spaces included."""
    failed = EvalScoreResult("relevance", None, None, error_code="JudgeParseError")
    results = EvalResults(
        provider="Judge", items=[EvalItemResult(item_id="row 7", status="fail", scores=[failed])]
    )
    outcome = no_errors().evaluate([results])
    assert outcome.items == ["row 7"]
    assert outcome.message == "1 error in n=1 items: row 7 relevance JudgeParseError"


def test_not_applicable_metrics_are_skipped_not_errors() -> None:
    """A not_applicable metric (a judge lacking its context) is neither scored nor an error."""
    na = EvalScoreResult("groundedness", None, None, label="not_applicable")
    scored = EvalScoreResult("groundedness", 4.0, True)
    results = EvalResults(
        provider="Judge",
        items=[
            EvalItemResult(item_id="a", status="pass", scores=[scored]),
            EvalItemResult(item_id="b", status="pass", scores=[na]),
        ],
    )
    outcome = (mean("groundedness") >= 4).evaluate([results])
    assert (outcome.passed, outcome.n, outcome.errored, outcome.not_applicable) == (True, 1, 0, 1)
    assert outcome.message == "mean 4 over n=1, 1 not applicable; holds >= 4"
    assert no_errors().evaluate([results]).passed
    only_na = EvalResults(provider="Judge", items=[EvalItemResult("b", "pass", [na])])
    assert all_pass("groundedness").evaluate([only_na]).message == (
        "no scores for groundedness, 1 not applicable"
    )


async def test_no_errors_for_one_metric_ignores_the_others() -> None:
    """no_errors("expected_fact") ignores a relevance error on an item whose fact scored."""
    results = [await run_local(["boom 30 days"], relevance, expected_fact)]
    assert no_errors("expected_fact").evaluate(results).passed
    assert not no_errors("relevance").evaluate(results).passed


async def test_error_rate_bounds_the_share_of_errored_items() -> None:
    """error_rate() counts errored items (check and agent errors) over the items in scope against its bound."""
    results = [await run_local([4, "boom", None, 5, 3])]
    loose = (error_rate() <= 0.4).evaluate(results)
    assert loose.passed
    assert (loose.observed, loose.n, loose.errored, loose.items) == (0.4, 5, 2, ["1", "2"])
    assert loose.message == "error rate 0.4: 2 of n=5 items errored (items 1, 2); holds <= 0.4"
    strict = (error_rate() < 0.4).evaluate(results)
    assert not strict.passed
    assert strict.message.endswith("needs < 0.4")


async def test_error_rate_of_one_metric_and_its_text_form() -> None:
    """error_rate(METRIC) reads only that metric's errors; the text form parses back to the same clause."""
    results = [await run_local(["boom 30 days", "x 30 days"], relevance, expected_fact)]
    assert (error_rate("expected_fact") <= 0).evaluate(results).passed
    assert not (error_rate("relevance") <= 0.4).evaluate(results).passed
    [parsed] = parse_gates(["writer: error_rate(relevance) <= 0.25"])
    assert parsed == ErrorRate("relevance", "<=", 0.25, "writer")
    assert str(parsed) == "writer: error_rate(relevance) <= 0.25"
    assert str(parse_gates(["error_rate() < 0.1"])[0]) == "error_rate() < 0.1"
    with pytest.raises(GateSyntaxError, match="upper bound"):
        parse_gates(["error_rate() >= 0.1"])
    with pytest.raises(GateSyntaxError, match=r"in \[0, 1\]"):
        parse_gates(["error_rate() <= 2"])


def test_error_rate_fails_on_an_unfinished_run() -> None:
    """A provider run that did not complete fails error_rate whatever the share."""
    results = EvalResults(
        provider="Judge",
        status="timeout",
        items=[
            EvalItemResult(item_id="a", status="pass", scores=[EvalScoreResult("r", 4.0, True)])
        ],
    )
    outcome = (error_rate() <= 1).evaluate([results])
    assert not outcome.passed
    assert outcome.message == "error rate 0: 0 of n=1 items errored; Judge run timeout"


def test_no_errors_without_items_fails() -> None:
    """A provider that returned no items at all (e.g. a timed-out remote run) is not a pass."""
    outcome = no_errors().evaluate([EvalResults(provider="Foundry", status="timeout")])
    assert (outcome.passed, outcome.message) == (False, "no items (Foundry run timeout)")


# --------------------------------------------------------------------------------------------
# Providers and agents


async def test_metrics_are_matched_by_name_across_providers() -> None:
    """Each clause finds its metric in whichever provider's results carry it."""
    judge = await run_local([4, 5])
    local = await run_local(["30 days", "60 days"], expected_fact)
    report = evaluate_gates([mean("relevance") >= 4.5, all_pass("expected_fact")], [judge, local])
    assert [(c.passed, c.n) for c in report.clauses] == [(True, 2), (False, 2)]


async def test_per_agent_clauses_read_that_agents_sub_results() -> None:
    """agent="writer" reads only the writer's items; None reads every level."""
    results = [await workflow(overall=[5, 5], researcher=[5, 4], writer=[2, 3])]
    writer = (mean("relevance", agent="writer") >= 3.5).evaluate(results)
    assert (writer.passed, writer.observed, writer.n, writer.agent) == (False, 2.5, 2, "writer")
    assert writer.clause == "writer: mean(relevance) >= 3.5"
    # every level: (5 + 5 + 5 + 4 + 2 + 3) / 6 = 4.0
    everything = (mean("relevance") >= 3.5).evaluate(results)
    assert (everything.observed, everything.n) == (4.0, 6)
    low = at_most(0, "relevance", below=3).evaluate(results)
    assert low.items == ["writer:0"]


async def test_unknown_agent_fails_and_lists_the_known_ones() -> None:
    """A clause for an agent the results do not have fails and names the agents there are."""
    results = [await workflow(overall=[5], researcher=[5], writer=[5])]
    outcome = all_pass("relevance", agent="critic").evaluate(results)
    assert not outcome.passed
    assert outcome.message == "no results for agent 'critic' (agents: researcher, writer)"


async def test_errors_inside_one_agent_are_caught_at_every_level() -> None:
    """no_errors() sees an errored writer item; the researcher alone is clean."""
    results = [await workflow(overall=[5], researcher=[5], writer=[None])]
    assert no_errors().evaluate(results).message == "1 error in n=3 items: writer:0 AgentError"
    assert no_errors(agent="researcher").evaluate(results).passed


# --------------------------------------------------------------------------------------------
# Composition and the report


async def test_a_failed_gate_names_every_violated_clause_with_its_numbers() -> None:
    """The report keeps every clause's verdict; summary() lists them all, violations marked FAIL."""
    results = [await workflow(overall=[5, 4], researcher=[5, "boom"], writer=[2, 1])]
    gate = (
        (mean("relevance") >= 3.5)
        & at_most(1, "relevance", below=3)
        & (mean("relevance", agent="writer") >= 3)
        & no_errors()
    )
    report = evaluate_gates(gate, results)
    assert not report.passed
    assert [c.clause for c in report.failures] == [
        "mean(relevance) >= 3.5",
        "at_most(1, relevance, below=3)",
        "writer: mean(relevance) >= 3",
        "no_errors()",
    ]
    # every level: (5 + 4 + 5 + 2 + 1) / 5 = 17/5 = 3.4
    assert report.summary() == (
        "Gate FAILED: 4 of 4 clauses violated\n"
        "  FAIL mean(relevance) >= 3.5: mean 3.4 over n=5, 1 errored excluded; needs >= 3.5; "
        "FAILS: 1 errored > max_errors=0 (could not evaluate is not a pass)\n"
        "  FAIL at_most(1, relevance, below=3): 2 of n=5 relevance scores below 3 "
        "(items writer:0, writer:1), 1 errored excluded; more than the 1 allowed; "
        "FAILS: 1 errored > max_errors=0 (could not evaluate is not a pass)\n"
        "  FAIL writer: mean(relevance) >= 3: mean 1.5 over n=2; needs >= 3\n"
        "  FAIL no_errors(): 1 error in n=6 items: researcher:1 CheckError"
    )


async def test_a_passing_gate_and_its_summary() -> None:
    """All clauses hold: passed, and the summary says so clause by clause."""
    report = evaluate_gates(
        (mean("relevance") >= 4) & all_pass("relevance"), [await run_local([4, 5])]
    )
    assert report.passed
    assert report.summary() == (
        "Gate passed: 2 of 2 clauses hold\n"
        "  ok   mean(relevance) >= 4: mean 4.5 over n=2; holds >= 4\n"
        "  ok   all_pass(relevance): all n=2 relevance passed"
    )


async def test_gates_compose_with_and_lists_and_text() -> None:
    """&, Gate([...]) and clause texts all flatten into one clause list, in order."""
    a, b, c = mean("relevance") >= 3, all_pass("relevance"), no_errors()
    assert (a & b & c).clauses == (a, b, c)
    assert Gate([a & b, c]).clauses == (a, b, c)
    assert Gate(["mean(relevance) >= 3", {"clause": "all_pass(relevance)"}, c]).clauses == (a, b, c)
    report = evaluate_gates(["mean(relevance) >= 3", b], await run_local([4]))
    assert report.passed


def test_an_empty_gate_does_not_pass() -> None:
    """A gate with no clauses is never a pass."""
    report = evaluate_gates(Gate([]), [])
    assert not report.passed
    assert report.summary() == "Gate FAILED: no clauses"


async def test_the_report_round_trips_as_json() -> None:
    """GateReport is a pydantic model: it serialises for artifacts and loads back equal."""
    report = evaluate_gates([at_most(0, "relevance", below=3)], [await run_local([2])])
    assert GateReport.model_validate_json(report.model_dump_json()) == report


async def test_and_or_instead_of_ampersand_is_an_error() -> None:
    """`a and b` would silently drop a; clauses and gates refuse to be truth-tested."""
    a, b = mean("relevance") >= 3, all_pass("relevance")
    with pytest.raises(TypeError, match="combine gate clauses with &"):
        _ = a and b
    with pytest.raises(TypeError, match="combine gates with &"):
        _ = (a & b) or a
    assert len(a & b) == 2


async def test_evaluate_gates_takes_one_clause_or_one_text() -> None:
    """A single clause or a single clause text is a one-clause gate (a string is not iterated)."""
    results = [await run_local([4])]
    assert evaluate_gates("mean(relevance) >= 4", results).passed
    assert evaluate_gates(all_pass("relevance"), results).passed
    with pytest.raises(TypeError, match="not a clause until it is compared"):
        evaluate_gates(mean("relevance"), results)  # type: ignore[arg-type]


def test_python_api_rejects_bad_clauses_at_once() -> None:
    """Bad counts, rates, bounds and an uncompared aggregate fail where they are written."""
    with pytest.raises(GateSyntaxError, match="count must be an integer >= 0"):
        at_most(-1, "relevance", below=3)
    with pytest.raises(GateSyntaxError, match=r"threshold must be in \[0, 1\]"):
        pass_rate("bleu") >= 90  # noqa: B015
    with pytest.raises(GateSyntaxError, match="threshold must be a number"):
        mean("relevance") >= "3.5"  # type: ignore[operator]  # noqa: B015
    with pytest.raises(GateSyntaxError, match="metric must be a non-empty name"):
        all_pass("")
    with pytest.raises(TypeError, match="is not a gate until it is compared"):
        bool(mean("relevance"))
    with pytest.raises(TypeError, match="not a clause until it is compared"):
        Gate([mean("relevance")])  # type: ignore[list-item]


# --------------------------------------------------------------------------------------------
# The text form


@pytest.mark.parametrize(
    ("text", "clause"),
    [
        ("mean(relevance) >= 3.5", Threshold("mean", "relevance", ">=", 3.5)),
        ("  mean( relevance )>=3.5  ", Threshold("mean", "relevance", ">=", 3.5)),
        ('mean("relevance") < 2', Threshold("mean", "relevance", "<", 2)),
        ("pass_rate(bleu) > 0.9", Threshold("pass_rate", "bleu", ">", 0.9)),
        ("pass_rate(bleu, agent=writer) <= 1", Threshold("pass_rate", "bleu", "<=", 1, "writer")),
        ("at_most(1, relevance, below=3)", AtMost(1, "relevance", 3)),
        ("at_most(0, 'Expected fact', below=0.5)", AtMost(0, "Expected fact", 0.5)),
        ("all_pass(expected_fact)", AllPass("expected_fact")),
        ("no_errors()", NoErrors()),
        ("no_errors(relevance)", NoErrors("relevance")),
        ("writer: mean(relevance) >= 3.5", Threshold("mean", "relevance", ">=", 3.5, "writer")),
        ('"the critic": all_pass(x)', AllPass("x", "the critic")),
        ("mean(relevance) >= 1e0", Threshold("mean", "relevance", ">=", 1.0)),
        ("mean(task.score-v2) >= -1", Threshold("mean", "task.score-v2", ">=", -1)),
    ],
)
def test_parser_reads_every_accepted_form(text: str, clause: object) -> None:
    """Each accepted clause text parses to the clause the Python API builds."""
    assert parse_gates([text]) == [clause]


@pytest.mark.parametrize(
    "text",
    [
        "mean(relevance) >= 3.5",
        "writer: at_most(1, relevance, below=3)",
        'all_pass("Expected fact")',
        '"my agent": no_errors()',
        "pass_rate(bleu) < 0.25",
    ],
)
def test_clause_text_round_trips(text: str) -> None:
    """str(clause) is the text it was parsed from, so a report can be pasted back into YAML."""
    [clause] = parse_gates([text])
    assert str(clause) == text
    assert parse_gates([str(clause)]) == [clause]


def test_parser_reads_the_mapping_form_and_yaml() -> None:
    """A suite's YAML list mixes strings and {clause, agent} mappings."""
    suite = yaml.safe_load(
        """
gates:
  - mean(relevance) >= 3.5
  - at_most(1, relevance, below=3)
  - "writer: all_pass(expected_fact)"
  - {clause: "mean(relevance) >= 4", agent: researcher}
  - no_errors()
"""
    )
    assert parse_gates(suite["gates"], source="suite.yaml: gates") == [
        mean("relevance") >= 3.5,
        at_most(1, "relevance", below=3),
        all_pass("expected_fact", agent="writer"),
        mean("relevance", agent="researcher") >= 4,
        no_errors(),
    ]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("mean(relevance)", "mean(...) must be compared with a number, e.g. >= 3.5"),
        ("mean(relevance) >= high", "mean(...) must be compared with a number"),
        ("mean(relevance) == 3", "e.g. >= 3.5 (got '= =')"),
        ("median(relevance) >= 3", "unknown clause 'median' (known: mean, pass_rate, at_most"),
        ("at_most(1, relevance)", "at_most() needs a count, a metric and below=NUMBER"),
        ("at_most(1.5, relevance, below=3)", "at_most count must be an integer >= 0"),
        ("at_most(1, relevance, above=3)", "at_most() has no argument 'above'"),
        ("all_pass(expected_fact) >= 1", "unexpected '>=' after the clause"),
        ("all_pass(a, b)", "all_pass() takes at most 1 positional arguments"),
        ("all_pass(agent=w, x)", "a positional argument after a keyword one"),
        ("all_pass(x", "missing ')'"),
        ("all_pass x", "expected '(' after all_pass"),
        ("pass_rate(bleu) >= 2", r"pass_rate(bleu) threshold must be in [0, 1]"),
        ("writer: mean(r, agent=critic) >= 3", "two agents: 'writer' and 'critic'"),
        ("__import__('os').system('true')", "unexpected \".system('true')\""),
        ("__import__(os)", "unknown clause '__import__'"),
        ("mean(relevance) >= 3; rm -rf /", "unexpected ';"),
        ("", "expected a clause name"),
        ({"clause": "all_pass(x)", "agnt": "w"}, "unknown keys: ['agnt']"),
        ({"agent": "w"}, "a mapping needs a 'clause' string"),
        ({"clause": "all_pass(x)", "agent": 3}, "agent must be a name, got 3"),
        ({"clause": "w: all_pass(x)", "agent": "v"}, "agent 'w' in the text and 'v' beside it"),
        (3.5, "expected a string or a mapping, got float"),
    ],
)
def test_parser_errors_name_the_clause_and_show_the_accepted_forms(
    spec: object, problem: str
) -> None:
    """Each syntax error names source[index] and the clause, says what is wrong, lists forms."""
    with pytest.raises(GateSyntaxError) as caught:
        parse_gates(["no_errors()", spec], source="suite.yaml: gates")  # type: ignore[list-item]
    message = str(caught.value)
    assert message.startswith("suite.yaml: gates[1]: cannot read gate clause ")
    assert problem in message
    for form in ACCEPTED_FORMS:
        assert form in message


async def test_per_agent_gate_on_a_real_workflow_run() -> None:
    """On evaluate_workflow's nested results, a clause per agent reads that agent's items only."""
    # The demo writer drops the temperature the researcher found (a scripted weakness).
    results = await evaluate_workflow(
        workflow=travel_workflow(),
        queries=["Plan a trip to Paris", "Plan a trip to Oslo"],
        evaluators=LocalEvaluator(expected_fact_check(r"-?\d+°C")),
    )
    report = evaluate_gates(
        ["researcher: all_pass(expected_fact)", "writer: all_pass(expected_fact)", "no_errors()"],
        results,
    )
    assert [(c.clause, c.passed, c.n) for c in report.clauses] == [
        ("researcher: all_pass(expected_fact)", True, 2),
        ("writer: all_pass(expected_fact)", False, 2),
        ("no_errors()", True, 8),
    ]
    # Item ids that already name the agent are not prefixed again.
    assert report.clauses[1].items == ["0/writer", "1/writer"]
