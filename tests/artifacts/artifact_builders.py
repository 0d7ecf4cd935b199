"""Builders of workflow-shaped EvalResults for the artifact tests: every field set somewhere."""

from __future__ import annotations

from evalpipe import (
    ConversationSplit,
    Diagnostic,
    EvalItem,
    EvalItemResult,
    EvalResults,
    EvalScoreResult,
    ExpectedToolCall,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    RubricScore,
    RunUsage,
    ToolDefinition,
)

AGENTS = ("researcher", "writer")
WEATHER = ToolDefinition(
    "get_weather",
    "Weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def make_item(index: int, agent: str | None) -> EvalItem:
    """The item of one call: a tool call and its result, then an answer; every third call failed."""
    failed = index % 3 == 2
    conversation = [
        Message("system", ["Be brief."]),
        Message("user", [f"Weather in city {index}?"]),
    ]
    if not failed:
        conversation += [
            Message(
                "assistant",
                [
                    FunctionCallContent(
                        name="get_weather", arguments={"city": f"c{index}"}, call_id="k1"
                    )
                ],
                author_name=agent,
            ),
            Message(
                "tool", [FunctionResultContent(call_id="k1", result={"temp_c": index, "ok": True})]
            ),
            Message("assistant", [f"It is sunny in c{index} ({agent or 'overall'})."]),
        ]
    return EvalItem(
        conversation,
        [WEATHER] if agent != "writer" else None,
        "weather data" if index % 2 else None,
        f"sunny {index}",
        [ExpectedToolCall("get_weather", {"city": f"c{index}"})] if index % 2 == 0 else None,
        ConversationSplit.FULL if agent == "writer" else ConversationSplit.LAST_TURN,
        item_id=f"{agent or 'wf'}-{index}",
        query_index=index % 4,
        repetition=index // 4,
        agent=agent,
        usage=RunUsage(
            input_tokens=10 + index, output_tokens=5, total_tokens=15 + index, latency_seconds=0.25
        )
        if index % 4 != 3
        else (RunUsage() if index % 8 == 3 else None),
        error_code="AgentError" if failed else None,
        error_message="RuntimeError: boom" if failed else None,
        metadata={
            "run_id": f"run-{index}",
            "row_id": f"row-{index % 4}",
            "tags": ["t1"],
            "n": index,
        },
    )


def make_item_result(item: EvalItem, provider: int) -> EvalItemResult:
    """Provider 0 is local-like (plain scores); provider 1 is judge-like (every score field set)."""
    assert item.item_id is not None
    index = int(item.item_id.rsplit("-", 1)[1])
    metadata = {"query_index": item.query_index, "repetition": item.repetition, **item.metadata}
    if item.error_code:
        return EvalItemResult(
            item.item_id,
            "error",
            [],
            item.error_code,
            item.error_message,
            input_text=item.query,
            output_text=item.response,
            metadata=metadata,
        )
    if provider == 0:
        ok = index % 4 != 1
        scores = [
            EvalScoreResult(
                "keyword_check", 1.0 if ok else 0.0, ok, {"reason": "r"} if ok else None, None, "r"
            ),
            EvalScoreResult("tool_calls_present", 0.5 + index / 100, True),
        ]
        return EvalItemResult(
            item.item_id,
            "pass" if ok else "fail",
            scores,
            input_text=item.query,
            output_text=item.response,
            metadata=metadata,
        )
    scores = [
        EvalScoreResult(
            "relevance",
            float(index % 5 + 1),
            index % 5 >= 2,
            {"raw": {"score": index % 5 + 1}, "list": [1, 2]},
            [
                RubricScore("clarity", index % 5, True, 2, "clear"),
                RubricScore("tone", None, False, 1, ""),
            ],
            "judge reasoning",
            3.0,
            "good" if index % 5 >= 2 else "poor",
            None,
            "good",
            [Diagnostic("informational", "thought about it"), Diagnostic("warning", "long answer")],
            None,
            "judge",
            {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120, "cached_tokens": 7},
            0.75,
        ),
        EvalScoreResult(
            "groundedness",
            None,
            None,
            error_message="JudgeParseError: no JSON",
            diagnostics=[Diagnostic("error", "could not parse")],
            error_code="JudgeParseError",
            token_usage={},
            latency_s=0.0,
        ),
        EvalScoreResult("verbosity", 2.5, None, label="long", token_usage={"output_tokens": 3}),
    ]
    return EvalItemResult(
        item.item_id,
        "pass" if index % 5 >= 2 else "fail",
        scores,
        response_id=f"resp-{index}",
        input_text=item.query,
        output_text=item.response,
        token_usage={"input_tokens": 100, "output_tokens": 20, "total_tokens": 120},
        metadata=metadata,
    )


def make_result(provider: int, agent: str, items: list[EvalItem]) -> EvalResults:
    """One provider's result for one agent level, with counts as the provider would report them."""
    results = [make_item_result(item, provider) for item in items]
    counts = {
        "passed": sum(r.status == "pass" for r in results),
        "failed": sum(r.status == "fail" for r in results),
        "errored": sum(r.is_error for r in results),
    }
    per_evaluator: dict[str, dict[str, int]] = {}
    for r in results:
        for s in r.scores:
            bucket = per_evaluator.setdefault(s.name, {"passed": 0, "failed": 0, "errored": 0})
            key = "errored" if s.error_message else "passed" if s.passed else "failed"
            bucket[key] += 1
    name = "Local" if provider == 0 else "Judge"
    return EvalResults(
        provider=name,
        eval_id="local" if provider == 0 else f"eval_{agent}",
        run_id=f"Workflow Eval — {agent}",
        status="completed",
        result_counts=counts,
        report_url=None if provider == 0 else f"https://portal.example/{agent}",
        error=f"{counts['failed']} failed in {agent}" if counts["failed"] else None,
        per_evaluator=per_evaluator,
        items=results,
        input_items=items,
    )


def workflow_batch(start: int, count: int) -> list[EvalResults]:
    """One batch of a 2-agent workflow run, for two providers: overall on top, sub_results per agent."""
    overall = [make_item(i, None) for i in range(start, start + count)]
    per_agent = {a: [make_item(i, a) for i in range(start, start + count)] for a in AGENTS}
    out = []
    for provider in (0, 1):
        top = make_result(provider, "overall", overall)
        top.sub_results = {a: make_result(provider, a, per_agent[a]) for a in AGENTS}
        out.append(top)
    return out
