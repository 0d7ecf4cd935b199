"""``evaluate_agent``: run an agent over queries (or take its recorded responses), build items, evaluate.

The stages are separate functions (``run_agent`` → ``build_agent_items`` → ``run_evaluators``) so the
Prefect pipeline calls the same code as tasks. Validation messages and the eval-name rules are MAF's
(shared spec §8); agent runs are concurrent and failures are errored items (docs/maf-compatibility.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from evalpipe.evaluators.base import Evaluator
from evalpipe.evaluators.local import LocalEvaluator
from evalpipe.items import EvalItem, ExpectedToolCall
from evalpipe.messages import Message, ToolDefinition
from evalpipe.results import EvalItemResult, EvalResults
from evalpipe.targets.base import (
    TargetRun,
    agent_name,
    agent_tools,
    call_agent,
    merge_tool_snapshots,
    response_messages,
    response_tools,
    response_usage,
)

__all__ = [
    "build_agent_items",
    "evaluate_agent",
    "resolve_evaluators",
    "run_agent",
    "run_evaluators",
]

DEFAULT_MAX_CONCURRENCY = 8


def resolve_evaluators(evaluators: Any) -> list[Evaluator]:
    """Providers from what the user passed: adjacent bare callables are grouped into one LocalEvaluator.

    Raises:
        TypeError: for anything that is neither an Evaluator nor a callable.
    """
    if isinstance(evaluators, Evaluator) or callable(evaluators):
        evaluators = [evaluators]
    resolved: list[Evaluator] = []
    checks: list[Any] = []
    for ev in evaluators:
        if isinstance(ev, Evaluator):
            if checks:
                resolved.append(LocalEvaluator(*checks))
                checks = []
            resolved.append(ev)
        elif callable(ev):
            checks.append(ev)
        else:
            raise TypeError(f"Expected an Evaluator or callable, got {type(ev).__name__}")
    if checks:
        resolved.append(LocalEvaluator(*checks))
    return resolved


def _errored_results(
    provider: str, items: Sequence[EvalItem], eval_name: str, error: str
) -> EvalResults:
    return EvalResults(
        provider=provider,
        eval_id="",
        run_id=eval_name,
        status="failed",
        result_counts={"passed": 0, "failed": 0, "errored": len(items)},
        error=error,
        items=[
            EvalItemResult(
                item_id=item.item_id if item.item_id is not None else str(i),
                status="error",
                error_code="EvaluatorError",
                error_message=error,
            )
            for i, item in enumerate(items)
        ],
        input_items=list(items),
    )


async def run_evaluators(
    evaluators: Sequence[Evaluator], items: Sequence[EvalItem], eval_name: str
) -> list[EvalResults]:
    """Run every provider concurrently; one EvalResults each, in provider order.

    A provider that raises gives a "failed" EvalResults whose items are errored ("EvaluatorError"),
    so the other providers' results are kept.
    """
    suffix = len(evaluators) > 1

    async def one(ev: Evaluator) -> EvalResults:
        name = f"{eval_name} ({ev.name})" if suffix else eval_name
        try:
            return await ev.evaluate(items, eval_name=name)
        except Exception as exc:
            return _errored_results(ev.name, items, name, f"{type(exc).__name__}: {exc}")

    return list(await asyncio.gather(*(one(ev) for ev in evaluators)))


async def run_agent(
    agent: Any,
    queries: Sequence[str],
    *,
    num_repetitions: int = 1,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    semaphore: asyncio.Semaphore | None = None,
    on_run: Callable[[TargetRun], None] | None = None,
) -> list[TargetRun]:
    """Call the agent on every query, ``num_repetitions`` times, at most ``max_concurrency`` at once.

    Runs are returned in repetition-major order (rep 0: Q1..Qn, rep 1: Q1..Qn, ...) whatever order
    they finish in. A run that raises is returned with error_code "AgentError". ``semaphore`` adds a
    bound shared with other callers; ``on_run`` is called as each run finishes.
    """
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}.")
    n = len(queries)
    total = n * num_repetitions
    runs: list[TargetRun | None] = [None] * total
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < total:
            index = next_index
            next_index += 1
            rep, qi = divmod(index, n)
            run = await call_agent(
                agent, queries[qi], query_index=qi, repetition=rep, semaphore=semaphore
            )
            runs[index] = run
            if on_run is not None:
                on_run(run)

    await asyncio.gather(*(worker() for _ in range(min(max_concurrency, total))))
    return [r for r in runs if r is not None]


def _normalize_expected_tool_calls(value: Any) -> list[list[ExpectedToolCall]] | None:
    if value is None:
        return None
    value = list(value)
    if value and isinstance(value[0], ExpectedToolCall):
        return [list(value)]
    return [list(v) for v in value]


def build_agent_items(
    runs: Sequence[TargetRun],
    *,
    declared_tools: Sequence[ToolDefinition] = (),
    tools: Sequence[Any] | None = None,
    expected_output: Sequence[str | None] | None = None,
    expected_tool_calls: Sequence[Sequence[ExpectedToolCall]] | None = None,
    context: str | Sequence[str | None] | None = None,
    conversation_split: Any = None,
    strict_tools: bool = False,
) -> list[EvalItem]:
    """One EvalItem per run: the user query followed by the response messages.

    Expectations are stamped by query index; tool definitions come from ``tools`` (an override,
    ``[]`` for none), else the snapshots the response carried, else the agent's declared tools.
    A tool called with two different schemas raises ValueError when ``strict_tools`` and otherwise
    makes that item errored ("ToolSchemaConflict").
    """
    override = [ToolDefinition.coerce(t) for t in tools] if tools is not None else None
    items: list[EvalItem] = []
    for index, run in enumerate(runs):
        qi = run.query_index
        conversation = [Message("user", [run.query]), *run.messages]
        error_code, error_message = run.error_code, run.error_message
        item_tools: list[ToolDefinition] | None
        if override is not None:
            item_tools = override
        else:
            snapshots = run.tools if run.tools is not None else list(declared_tools)
            calls = [c for m in run.messages for c in m.function_calls]
            try:
                item_tools = merge_tool_snapshots(snapshots, calls) or None
            except ValueError as exc:
                if strict_tools:
                    raise
                item_tools = None
                error_code = error_code or "ToolSchemaConflict"
                error_message = error_message or str(exc)
        if isinstance(context, str) or context is None:
            item_context = context
        else:
            item_context = context[qi % len(context)]
        items.append(
            EvalItem(
                conversation,
                item_tools,
                item_context,
                expected_output[qi % len(expected_output)] if expected_output else None,
                list(expected_tool_calls[qi % len(expected_tool_calls)])
                if expected_tool_calls
                else None,
                conversation_split,
                item_id=str(index),
                query_index=qi,
                repetition=run.repetition,
                usage=run.usage,
                error_code=error_code,
                error_message=error_message,
            )
        )
    return items


async def evaluate_agent(
    *,
    agent: Any = None,
    queries: str | Sequence[str] | None = None,
    expected_output: str | Sequence[str | None] | None = None,
    expected_tool_calls: Sequence[ExpectedToolCall]
    | Sequence[Sequence[ExpectedToolCall]]
    | None = None,
    responses: Any = None,
    evaluators: Any,
    eval_name: str | None = None,
    context: str | Sequence[str | None] | None = None,
    conversation_split: Any = None,
    num_repetitions: int = 1,
    tools: Sequence[Any] | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
) -> list[EvalResults]:
    """Evaluate an agent over queries, or its pre-existing responses; one EvalResults per provider.

    Args:
        agent: Any object with ``name`` and ``async run(messages)`` (a MAF agent works).
        queries: The user queries (a str is one query).
        expected_output: Reference answers, one per query (stamped by query index).
        expected_tool_calls: Expected calls per query (a flat list is one query's worth).
        responses: Pre-existing responses (objects with ``.messages``), one per query; the agent is
            then not run and ``num_repetitions`` is ignored.
        evaluators: Evaluators and/or bare checks; adjacent checks share one LocalEvaluator.
        eval_name: Defaults to ``"Eval: {agent name}"``; with several providers each gets
            ``" ({provider})"`` appended.
        context: Grounding context for every item, or one per query (an evalpipe addition).
        conversation_split: A split strategy stamped on every item.
        num_repetitions: How many times each query runs.
        tools: Tool definitions for evaluation only, overriding captured ones; ``[]`` for none.
        max_concurrency: At most this many agent runs at once (MAF runs them one at a time).

    Raises:
        ValueError: for inconsistent arguments (MAF's messages), or conflicting tool schemas in
            pre-existing responses.
        TypeError: for an evaluator that is neither an Evaluator nor a callable.
    """
    query_list = (
        [queries] if isinstance(queries, str) else list(queries) if queries is not None else None
    )
    expected_list = (
        [expected_output]
        if isinstance(expected_output, str)
        else list(expected_output)
        if expected_output is not None
        else None
    )
    etc = _normalize_expected_tool_calls(expected_tool_calls)
    response_list: list[Any] | None = None
    if responses is not None:
        response_list = list(responses) if isinstance(responses, list | tuple) else [responses]

    if num_repetitions < 1:
        raise ValueError(f"num_repetitions must be >= 1, got {num_repetitions}.")
    n = len(query_list) if query_list is not None else 0
    if query_list is not None and expected_list is not None and len(expected_list) != n:
        raise ValueError(f"Got {n} queries but {len(expected_list)} expected_output values.")
    if query_list is not None and etc is not None and len(etc) != n:
        raise ValueError(f"Got {n} queries but {len(etc)} expected_tool_calls lists.")
    if query_list is not None and response_list is not None and len(response_list) != n:
        raise ValueError(f"Got {n} queries but {len(response_list)} responses.")
    if response_list is not None and query_list is None:
        raise ValueError(
            "Provide 'queries' alongside 'responses' so the conversation can be constructed for "
            "evaluation. For Responses API evaluation by response ID, use "
            "evaluate_traces(response_ids=...) from the azure-ai package."
        )
    if query_list is not None and response_list is None and agent is None:
        raise ValueError(
            "Provide 'agent' when using 'queries' to run the agent. To evaluate pre-existing "
            "responses without an agent, use 'responses=' instead."
        )
    if query_list is None:
        raise ValueError("Provide either 'queries' (with 'agent') or 'responses' (or both).")
    if context is not None and not isinstance(context, str) and len(context) != n:
        raise ValueError(f"Got {n} queries but {len(context)} context values.")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}.")

    providers = resolve_evaluators(evaluators)
    declared = agent_tools(agent) if agent is not None else []
    if response_list is not None:
        runs = []
        for i, (query, response) in enumerate(zip(query_list, response_list, strict=True)):
            try:
                messages = response_messages(response)
            except TypeError as exc:
                raise TypeError(f"responses[{i}]: {exc}") from exc
            runs.append(
                TargetRun(
                    query_index=i,
                    repetition=0,
                    query=query,
                    messages=messages,
                    tools=response_tools(response),
                    usage=response_usage(response),
                )
            )
    else:
        runs = await run_agent(
            agent, query_list, num_repetitions=num_repetitions, max_concurrency=max_concurrency
        )
    items = build_agent_items(
        runs,
        declared_tools=declared,
        tools=tools,
        expected_output=expected_list,
        expected_tool_calls=etc,
        context=context,
        conversation_split=conversation_split,
        strict_tools=response_list is not None,
    )
    name = eval_name or f"Eval: {agent_name(agent) if agent is not None else 'agent'}"
    return await run_evaluators(providers, items, name)
