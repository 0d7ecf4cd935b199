"""evalpipe: evaluate AI agents and multi-agent workflows, with Microsoft Agent Framework's API.

Switch from MAF with one import::

    from evalpipe import evaluate_agent, LocalEvaluator, keyword_check, tool_called_check
"""

from evalpipe.checks import (
    CheckResult,
    EvalCheck,
    keyword_check,
    tool_call_args_match,
    tool_called_check,
    tool_calls_present,
)
from evalpipe.evaluate import evaluate_agent
from evalpipe.evaluators.base import Evaluator
from evalpipe.evaluators.local import FunctionEvaluator, LocalEvaluator, evaluator
from evalpipe.items import (
    ConversationSplit,
    ConversationSplitter,
    EvalItem,
    ExpectedToolCall,
    RunUsage,
)
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
from evalpipe.results import (
    Diagnostic,
    EvalItemResult,
    EvalNotPassedError,
    EvalResults,
    EvalScoreResult,
    RubricScore,
)
from evalpipe.targets.base import Agent, AgentResponse, TargetRun

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentResponse",
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
    "ExpectedToolCall",
    "FunctionCallContent",
    "FunctionEvaluator",
    "FunctionResultContent",
    "LocalEvaluator",
    "Message",
    "RubricScore",
    "RunUsage",
    "TargetRun",
    "TextContent",
    "ToolDefinition",
    "UriContent",
    "__version__",
    "evaluate_agent",
    "evaluator",
    "keyword_check",
    "messages_from_openai",
    "messages_to_openai",
    "tool_call_args_match",
    "tool_called_check",
    "tool_calls_present",
]
