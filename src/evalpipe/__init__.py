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
    "Agent": "evalpipe.targets.base",
    "AgentExpectations": "evalpipe.itemize",
    "AgentResponse": "evalpipe.targets.base",
    "CacheConfig": "evalpipe.cache",
    "ChatClient": "evalpipe.llm",
    "ChatEndpoint": "evalpipe.llm",
    "CheckResult": "evalpipe.checks",
    "Content": "evalpipe.messages",
    "ConversationSplit": "evalpipe.items",
    "ConversationSplitter": "evalpipe.items",
    "DataContent": "evalpipe.messages",
    "Diagnostic": "evalpipe.results",
    "EvalCheck": "evalpipe.checks",
    "EvalItem": "evalpipe.items",
    "EvalItemResult": "evalpipe.results",
    "EvalNotPassedError": "evalpipe.results",
    "EvalResults": "evalpipe.results",
    "EvalScoreResult": "evalpipe.results",
    "Evaluator": "evalpipe.evaluators.base",
    "ExecutorRun": "evalpipe.transcripts",
    "ExpectedToolCall": "evalpipe.items",
    "FunctionCallContent": "evalpipe.messages",
    "FunctionEvaluator": "evalpipe.evaluators.local",
    "FunctionResultContent": "evalpipe.messages",
    "GateReport": "evalpipe.gates",
    "GateSyntaxError": "evalpipe.gates",
    "JudgeConfig": "evalpipe.evaluators.judge",
    "JudgeEvaluator": "evalpipe.evaluators.judge",
    "LocalEvaluator": "evalpipe.evaluators.local",
    "MAFWorkflow": "evalpipe.targets.maf",
    "Message": "evalpipe.messages",
    "OpenAIChatAgent": "evalpipe.targets.openai_chat",
    "OtelTraces": "evalpipe.otel",
    "RecordedFormatError": "evalpipe.recorded",
    "ResponseCache": "evalpipe.cache",
    "RouterWorkflow": "evalpipe.targets.workflow",
    "RubricScore": "evalpipe.results",
    "RunUsage": "evalpipe.transcripts",
    "SequentialWorkflow": "evalpipe.targets.workflow",
    "TargetRun": "evalpipe.transcripts",
    "TextContent": "evalpipe.messages",
    "ToolDefinition": "evalpipe.messages",
    "TraceDiagnostic": "evalpipe.otel",
    "UriContent": "evalpipe.messages",
    "Workflow": "evalpipe.targets.workflow",
    "WorkflowRun": "evalpipe.transcripts",
    "cache_clean": "evalpipe.cache",
    "cache_stats": "evalpipe.cache",
    "evaluate_agent": "evalpipe.evaluate",
    "evaluate_gates": "evalpipe.gates",
    "evaluate_workflow": "evalpipe.evaluate",
    "evaluator": "evalpipe.evaluators.local",
    "keyword_check": "evalpipe.checks",
    "messages_from_openai": "evalpipe.messages",
    "messages_to_openai": "evalpipe.messages",
    "parse_conversation": "evalpipe.recorded",
    "parse_gates": "evalpipe.gates",
    "read_otel_traces": "evalpipe.otel",
    "tool_call_args_match": "evalpipe.checks",
    "tool_called_check": "evalpipe.checks",
    "tool_calls_present": "evalpipe.checks",
    "trace_items": "evalpipe.otel",
    "trace_rows": "evalpipe.otel",
    "AgentEvalConverter": "evalpipe.converter",
    "MissingReferenceError": "evalpipe.evaluators.nlp",
    "bleu": "evalpipe.evaluators.nlp",
    "expected_fact_check": "evalpipe.evaluators.nlp",
    "gleu": "evalpipe.evaluators.nlp",
    "task_navigation_efficiency": "evalpipe.evaluators.nlp",
    "token_f1": "evalpipe.evaluators.nlp",
    "tool_call_success": "evalpipe.evaluators.nlp",
}


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
