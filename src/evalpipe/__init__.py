"""evalpipe: evaluate AI agents and multi-agent workflows, with Microsoft Agent Framework's API.

Switch from MAF with one import::

    from evalpipe import evaluate_agent, LocalEvaluator, keyword_check, tool_called_check
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # every name loads on first use (below): `import evalpipe`, and so the command
    # line's start, imports none of them; sacrebleu and nltk add ~0.4 s, the deprecated converter
    # the Foundry package (openai), the rest ~1 s (the judge's HTTP client, the caches, traces)
    from evalpipe.cache import CacheConfig, ResponseCache, cache_clean, cache_stats
    from evalpipe.checks import (
        CheckResult,
        EvalCheck,
        keyword_check,
        tool_call_args_match,
        tool_called_check,
        tool_calls_present,
    )
    from evalpipe.converter import AgentEvalConverter
    from evalpipe.evaluate import evaluate_agent, evaluate_workflow
    from evalpipe.evaluators.base import Evaluator
    from evalpipe.evaluators.judge import JudgeConfig, JudgeEvaluator
    from evalpipe.evaluators.local import FunctionEvaluator, LocalEvaluator, evaluator
    from evalpipe.evaluators.nlp import (
        MissingReferenceError,
        bleu,
        expected_fact_check,
        gleu,
        task_navigation_efficiency,
        token_f1,
        tool_call_success,
    )
    from evalpipe.gates import GateReport, GateSyntaxError, evaluate_gates, parse_gates
    from evalpipe.itemize import AgentExpectations
    from evalpipe.items import (
        ConversationSplit,
        ConversationSplitter,
        EvalItem,
        ExpectedToolCall,
    )
    from evalpipe.llm import ChatClient, ChatEndpoint
    from evalpipe.messages import (
        Content,
        DataContent,
        FunctionCallContent,
        FunctionResultContent,
        Message,
        TextContent,
        ToolDefinition,
        UriContent,
        messages_from_openai,
        messages_to_openai,
    )
    from evalpipe.otel import OtelTraces, TraceDiagnostic, read_otel_traces, trace_items, trace_rows
    from evalpipe.recorded import RecordedFormatError, parse_conversation
    from evalpipe.results import (
        Diagnostic,
        EvalItemResult,
        EvalNotPassedError,
        EvalResults,
        EvalScoreResult,
        RubricScore,
    )
    from evalpipe.targets.base import Agent, AgentResponse
    from evalpipe.targets.maf import MAFWorkflow
    from evalpipe.targets.openai_chat import OpenAIChatAgent
    from evalpipe.targets.workflow import RouterWorkflow, SequentialWorkflow, Workflow
    from evalpipe.transcripts import ExecutorRun, RunUsage, TargetRun, WorkflowRun

_LAZY = {
    name: module
    for module, names in {
        "evalpipe.cache": "CacheConfig ResponseCache cache_clean cache_stats",
        "evalpipe.checks": (
            "CheckResult EvalCheck keyword_check tool_call_args_match "
            "tool_called_check tool_calls_present"
        ),
        "evalpipe.converter": "AgentEvalConverter",
        "evalpipe.evaluate": "evaluate_agent evaluate_workflow",
        "evalpipe.evaluators.base": "Evaluator",
        "evalpipe.evaluators.judge": "JudgeConfig JudgeEvaluator",
        "evalpipe.evaluators.local": "FunctionEvaluator LocalEvaluator evaluator",
        "evalpipe.evaluators.nlp": (
            "MissingReferenceError bleu expected_fact_check gleu "
            "task_navigation_efficiency token_f1 tool_call_success"
        ),
        "evalpipe.gates": "GateReport GateSyntaxError evaluate_gates parse_gates",
        "evalpipe.itemize": "AgentExpectations",
        "evalpipe.items": "ConversationSplit ConversationSplitter EvalItem ExpectedToolCall",
        "evalpipe.llm": "ChatClient ChatEndpoint",
        "evalpipe.messages": (
            "Content DataContent FunctionCallContent FunctionResultContent Message "
            "TextContent ToolDefinition UriContent messages_from_openai "
            "messages_to_openai"
        ),
        "evalpipe.otel": "OtelTraces TraceDiagnostic read_otel_traces trace_items trace_rows",
        "evalpipe.recorded": "RecordedFormatError parse_conversation",
        "evalpipe.results": (
            "Diagnostic EvalItemResult EvalNotPassedError EvalResults EvalScoreResult RubricScore"
        ),
        "evalpipe.targets.base": "Agent AgentResponse",
        "evalpipe.targets.maf": "MAFWorkflow",
        "evalpipe.targets.openai_chat": "OpenAIChatAgent",
        "evalpipe.targets.workflow": "RouterWorkflow SequentialWorkflow Workflow",
        "evalpipe.transcripts": "ExecutorRun RunUsage TargetRun WorkflowRun",
    }.items()
    for name in names.split()
}
"""Each public name and the module it loads from on first use."""


def __getattr__(name: str) -> Any:
    import importlib  # lazy: the names load on first use (see above)
    import importlib.util

    module = _LAZY.get(name)
    if module is None:
        # a submodule (``evalpipe.suite`` after ``import evalpipe``), as when every name above
        # was imported eagerly and imported the submodules with them
        if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module 'evalpipe' has no attribute {name!r}")
        return importlib.import_module(f"{__name__}.{name}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentEvalConverter",
    "AgentExpectations",
    "AgentResponse",
    "CacheConfig",
    "ChatClient",
    "ChatEndpoint",
    "CheckResult",
    "Content",
    "ConversationSplit",
    "ConversationSplitter",
    "DataContent",
    "Diagnostic",
    "EvalCheck",
    "EvalItem",
    "EvalItemResult",
    "EvalNotPassedError",
    "EvalResults",
    "EvalScoreResult",
    "Evaluator",
    "ExecutorRun",
    "ExpectedToolCall",
    "FunctionCallContent",
    "FunctionEvaluator",
    "FunctionResultContent",
    "GateReport",
    "GateSyntaxError",
    "JudgeConfig",
    "JudgeEvaluator",
    "LocalEvaluator",
    "MAFWorkflow",
    "Message",
    "MissingReferenceError",
    "OpenAIChatAgent",
    "OtelTraces",
    "RecordedFormatError",
    "ResponseCache",
    "RouterWorkflow",
    "RubricScore",
    "RunUsage",
    "SequentialWorkflow",
    "TargetRun",
    "TextContent",
    "ToolDefinition",
    "TraceDiagnostic",
    "UriContent",
    "Workflow",
    "WorkflowRun",
    "__version__",
    "bleu",
    "cache_clean",
    "cache_stats",
    "evaluate_agent",
    "evaluate_gates",
    "evaluate_workflow",
    "evaluator",
    "expected_fact_check",
    "gleu",
    "keyword_check",
    "messages_from_openai",
    "messages_to_openai",
    "parse_conversation",
    "parse_gates",
    "read_otel_traces",
    "task_navigation_efficiency",
    "token_f1",
    "tool_call_args_match",
    "tool_call_success",
    "tool_called_check",
    "tool_calls_present",
    "trace_items",
    "trace_rows",
]
