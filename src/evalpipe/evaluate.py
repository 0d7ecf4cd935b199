"""``evaluate_agent`` and ``evaluate_workflow``: Microsoft Agent Framework's evaluation API.

Both check their arguments as MAF does (the same messages, shared spec §7, §8, §10), build an
in-process plan and run it through the runner (``evalpipe.runner``), the same path ``evalpipe run``
and the Prefect flow take: calls are concurrent, a failing call or provider is an errored item, and
a downstream workflow agent's item holds what it received (docs/maf-compatibility.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe.evaluators.local import resolve_evaluators
from evalpipe.itemize import (
    AgentExpectations,
    PerAgentExpectations,
    UpstreamContext,
    agent_expectations,
    per_query_expectations,
)
from evalpipe.items import ExpectedToolCall
from evalpipe.messages import Message, ToolDefinition
from evalpipe.recorded import convert_messages, detect_format, split_recording
from evalpipe.results import EvalResults
from evalpipe.runner.plan import Target, in_process_plan, resolve_target
from evalpipe.runner.shard import run_in_process
from evalpipe.targets.base import (
    is_maf_workflow,
    response_messages,
    response_tools,
    response_usage,
)
from evalpipe.targets.maf import workflow_run_from_events
from evalpipe.targets.workflow import workflow_agent_names, workflow_name
from evalpipe.transcripts import TargetRun, WorkflowRun

__all__ = ["DEFAULT_MAX_CONCURRENCY", "evaluate_agent", "evaluate_workflow"]

DEFAULT_MAX_CONCURRENCY = 8

ExpectedToolCalls = Sequence[ExpectedToolCall] | Sequence[Sequence[ExpectedToolCall]]
"""One query's expected tool calls (a flat list), or a list per query."""


def _listify(value: str | Sequence[Any] | None) -> list[Any] | None:
    """A str is one value; a sequence is copied into a list; None stays None."""
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def _check_lengths(n: int | None, what: str, expected: Any, calls: Any, head: str = "Got") -> None:
    """MAF's message when the expected outputs or tool call lists are not one per query."""
    for values, name in (
        (expected, "expected_output values"),
        (calls, "expected_tool_calls lists"),
    ):
        if values is not None and len(values) != n:
            raise ValueError(f"{head} {n} {what} but {len(values)} {name}.")


def _expected(output: Any, calls: Any) -> AgentExpectations:
    """MAF's ``expected_output`` (a str is one query's) and ``expected_tool_calls`` (a flat list is
    one query's) as per-query lists."""
    return AgentExpectations.model_validate(
        {"expected_output": output, "expected_tool_calls": calls}
    )


def _check_limits(num_repetitions: int, max_concurrency: int) -> None:
    if num_repetitions < 1:
        raise ValueError(f"num_repetitions must be >= 1, got {num_repetitions}.")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}.")


async def evaluate_agent(
    *,
    agent: Any = None,
    queries: str | Sequence[str] | None = None,
    expected_output: str | Sequence[str | None] | None = None,
    expected_tool_calls: ExpectedToolCalls | None = None,
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
            then not run and ``num_repetitions`` is ignored. A response may also be a recorded
            conversation: a list of messages in evalpipe/MAF, OpenAI chat-completions or Foundry
            agent format (``evalpipe.recorded``). One with a user message is the item's whole
            conversation (its system message and earlier turns kept), and when every response is
            one, ``queries`` may be left out (each query is its last user message).
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
    query_list = _listify(queries)
    wanted = _expected(expected_output, expected_tool_calls)
    expected_list, etc = wanted.expected_output, wanted.expected_tool_calls
    response_list: list[Any] | None = None
    if responses is not None:
        response_list = list(responses) if isinstance(responses, list | tuple) else [responses]
    _check_limits(num_repetitions, max_concurrency)
    n = len(query_list) if query_list is not None else 0
    if query_list is not None:
        _check_lengths(n, "queries", expected_list, etc)
    if query_list is not None and response_list is not None and len(response_list) != n:
        raise ValueError(f"Got {n} queries but {len(response_list)} responses.")
    recorded = _recorded_responses(response_list) if response_list is not None else {}
    whole = {i for i, (head, _, _) in recorded.items() if head is not None}
    if response_list is not None and query_list is None and len(whole) == len(response_list):
        # every response is a whole recorded conversation: its query is its last user message
        query_list = [recorded[i][2] for i in range(len(response_list))]
        n = len(query_list)
        _check_lengths(n, "responses", expected_list, etc)
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

    providers = resolve_evaluators(evaluators)
    # What is passed as agent= is an agent (MAF's rule), even one that also has workflow-like
    # attributes, such as a MagicMock() test double.
    target = resolve_target(agent, kind="agent") if agent is not None else None
    given: list[TargetRun | None] | None = None
    heads: list[list[Message] | None] | None = None
    if response_list is not None:
        given, heads = [], []
        for i, (query, response) in enumerate(zip(query_list, response_list, strict=True)):
            if i in recorded:
                head, messages, _ = recorded[i]
            else:
                head = None
                try:
                    messages = response_messages(response)
                except TypeError as exc:
                    raise TypeError(f"responses[{i}]: {exc}") from exc
            heads.append(head)
            given.append(
                TargetRun(
                    query_index=i,
                    repetition=0,
                    query=query,
                    messages=messages,
                    tools=response_tools(response),
                    usage=response_usage(response),
                )
            )
    plan = in_process_plan(
        name=eval_name or f"Eval: {target.name if target is not None else 'agent'}",
        target=target,
        kind="agent",
        queries=query_list,
        expectations=per_query_expectations(
            n, expected_output=expected_list, expected_tool_calls=etc, context=context
        ),
        providers=providers,
        # pre-existing responses are evaluated once each, whatever num_repetitions says (as MAF)
        repetitions=1 if given is not None else num_repetitions,
        recorded=given,
        recorded_heads=heads,
        split=conversation_split,
        tools_override=[ToolDefinition.coerce(t) for t in tools] if tools is not None else None,
        strict_tools=given is not None,
    )
    return (await run_in_process(plan, max_concurrency=max_concurrency)).results


def _recorded_responses(
    responses: Sequence[Any],
) -> dict[int, tuple[list[Message] | None, list[Message], str]]:
    """The responses given as message lists, by index: ``(query side, response side, query)``.

    A list of message dicts (evalpipe/MAF, OpenAI chat-completions or Foundry agent messages, one
    format for all) or of messages that holds a user message is a whole recorded conversation; a
    list of dicts without one is only the response (query side None, as MAF's responses).

    Raises:
        RecordedFormatError: (a ValueError) naming ``responses[i]`` and the first mismatch for a
            list that fits no format.
    """
    raw = {
        i: r
        for i, r in enumerate(responses)
        if isinstance(r, list) and r and all(isinstance(m, Mapping) for m in r)
    }
    fmt = detect_format((f"responses[{i}]", [(f"responses[{i}]", r)]) for i, r in raw.items())
    out: dict[int, tuple[list[Message] | None, list[Message], str]] = {}
    for i, response in enumerate(responses):
        if i in raw and fmt is not None:
            messages = convert_messages(raw[i], fmt)
        elif isinstance(response, list) and response:
            try:
                messages = [Message.coerce(m) for m in response]
            except TypeError:
                continue
        else:
            continue
        if any(m.role == "user" for m in messages):
            out[i] = split_recording(messages, None)
        elif i in raw:
            out[i] = (None, messages, "")
    return out


def _normalize_expectations(
    value: PerAgentExpectations | None, n: int | None, agents: Sequence[str] | None
) -> dict[str, AgentExpectations] | None:
    if value is None:
        return None
    if n is None:
        raise ValueError(
            "Provide 'queries' when using 'per_agent_expectations'; it is not supported with "
            "'workflow_result' only."
        )
    out = agent_expectations(value)
    for agent, spec in out.items():
        if agents is not None and agent not in agents:
            raise ValueError(
                f"per_agent_expectations[{agent!r}]: the workflow has no agent {agent!r} "
                f"(agents: {', '.join(agents)})."
            )
        head = f"per_agent_expectations[{agent!r}]: got"
        _check_lengths(n, "queries", spec.expected_output, spec.expected_tool_calls, head)
    return out


def _runs_from_result(workflow: Any, workflow_result: Any) -> list[WorkflowRun]:
    if isinstance(workflow_result, WorkflowRun):
        return [workflow_result]
    if (
        isinstance(workflow_result, Sequence)
        and workflow_result
        and all(isinstance(r, WorkflowRun) for r in workflow_result)
    ):
        return list(workflow_result)
    if isinstance(workflow_result, Sequence):
        maf = workflow if is_maf_workflow(workflow) else getattr(workflow, "_instance", None)
        run = workflow_run_from_events(workflow_result, workflow=maf)
        return [run.model_copy(update={"workflow": workflow_name(workflow)})]
    raise TypeError(
        f"workflow_result must be a WorkflowRun, a list of them, or a MAF WorkflowRunResult; "
        f"got {type(workflow_result).__name__}"
    )


async def evaluate_workflow(
    *,
    workflow: Any,
    workflow_result: Any = None,
    queries: str | Sequence[str] | None = None,
    expected_output: str | Sequence[str | None] | None = None,
    expected_tool_calls: ExpectedToolCalls | None = None,
    per_agent_expectations: PerAgentExpectations | None = None,
    evaluators: Any,
    eval_name: str | None = None,
    include_overall: bool = True,
    include_per_agent: bool = True,
    conversation_split: Any = None,
    upstream_context: UpstreamContext = "received",
    num_repetitions: int = 1,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
) -> list[EvalResults]:
    """Evaluate a multi-agent workflow per agent and overall; one EvalResults per provider.

    Args:
        workflow: An evalpipe workflow (``SequentialWorkflow``, ``RouterWorkflow``, any object with
            ``name`` and ``async run(query) -> WorkflowRun``), a MAF ``Workflow``, or a
            ``MAFWorkflow``.
        workflow_result: A finished run to evaluate without running the workflow: a WorkflowRun,
            a list of them, or a MAF ``WorkflowRunResult``. Ignored when ``queries`` is given.
        queries: The user queries (a str is one query).
        expected_output: The workflow's reference answer per query (stamped on overall items).
        expected_tool_calls: Tool calls the workflow as a whole should make, per query (overall
            items hold every agent's tool calls).
        per_agent_expectations: Agent name -> ``AgentExpectations`` (or a dict with
            ``expected_output`` / ``expected_tool_calls``, one entry per query), or one
            ``{agent: {...}}`` per query (see PerAgentExpectations).
        evaluators: Evaluators and/or bare checks; adjacent checks share one LocalEvaluator.
        eval_name: Defaults to ``"Workflow Eval: {workflow name}"`` (``"Workflow Eval: Workflow"``
            for a MAF workflow, as MAF).
        include_overall: Evaluate the final output of each run.
        include_per_agent: Evaluate each agent's turns.
        conversation_split: A split strategy stamped on every item.
        upstream_context: ``"received"`` (default) or ``"user_only"`` (MAF): see UpstreamContext.
        num_repetitions: How many times each query runs.
        max_concurrency: At most this many workflow runs at once (MAF runs them one at a time).

    Raises:
        ValueError: for inconsistent arguments (MAF's messages) or no items to evaluate.
        TypeError: for an evaluator that is neither an Evaluator nor a callable.
    """
    query_list = _listify(queries)
    wanted = _expected(expected_output, expected_tool_calls)
    expected_list, etc = wanted.expected_output, wanted.expected_tool_calls
    if workflow_result is None and query_list is None:
        raise ValueError("Provide either 'workflow_result' or 'queries'.")
    if (expected_list is not None or etc is not None) and query_list is None:
        which = "expected_output" if expected_list is not None else "expected_tool_calls"
        raise ValueError(
            f"Provide 'queries' when using '{which}'; '{which}' is not supported with "
            "'workflow_result' only."
        )
    n = len(query_list) if query_list is not None else None
    _check_lengths(n, "queries", expected_list, etc)
    _check_limits(num_repetitions, max_concurrency)
    if upstream_context not in ("received", "user_only"):
        raise ValueError(
            f"upstream_context must be 'received' or 'user_only', got {upstream_context!r}."
        )
    agents = workflow_agent_names(workflow) if per_agent_expectations else None
    expectations = _normalize_expectations(per_agent_expectations, n, agents)
    providers = resolve_evaluators(evaluators)

    given: list[WorkflowRun] | None = None
    target: Target | None = None
    if query_list is not None:
        target = resolve_target(workflow, kind="workflow")
    else:
        given = _runs_from_result(workflow, workflow_result)
        query_list = [r.query for r in given]
    plan = in_process_plan(
        name=eval_name or f"Workflow Eval: {workflow_name(workflow)}",
        target=target,
        kind="workflow",
        queries=query_list,
        expectations=per_query_expectations(
            len(query_list),
            expected_output=expected_list,
            expected_tool_calls=etc,
            per_agent=expectations,
        ),
        providers=providers,
        repetitions=num_repetitions if given is None else 1,
        recorded=given,
        split=conversation_split,
        upstream_context=upstream_context,
        include_overall=include_overall,
        include_per_agent=include_per_agent,
    )
    shard = await run_in_process(plan, max_concurrency=max_concurrency)
    if shard.items == 0:
        raise ValueError(
            "No agent executor data found in the workflow result. Ensure the workflow uses "
            "AgentExecutor-based agents."
        )
    return shard.results
