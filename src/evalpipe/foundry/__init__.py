"""Microsoft Foundry cloud evaluators (LLM-as-judge and safety) as an evalpipe provider.

``FoundryEvals`` drives the real ``azure-ai-projects`` client: one eval per evaluator set, one run
per batch, retries, polling with backoff, cancel on timeout; ``evaluate_traces`` scores stored
responses or agent traces server-side, ``evaluate_foundry_target`` has Foundry run a hosted agent or
model and scores its answers. ``FoundryThreads`` reads Agent Service threads and runs
into EvalItems and dataset rows. See docs/foundry.md.
"""

from evalpipe.foundry._client import RetryPolicy
from evalpipe.foundry._convert import item_to_foundry, to_foundry_messages
from evalpipe.foundry._evals import (
    ENDPOINT_ENV,
    FoundryConfig,
    FoundryEvals,
    async_transport,
    evaluate_foundry_target,
    evaluate_traces,
)
from evalpipe.foundry._evaluators import (
    BUILTIN_EVALUATORS,
    COHERENCE,
    COMPOSITE_COMPONENTS,
    COMPOSITE_EVALUATORS,
    DEFAULT_EVALUATORS,
    FLUENCY,
    GROUNDEDNESS,
    HATE_UNFAIRNESS,
    INTENT_RESOLUTION,
    OUTPUT_QUALITY,
    RELEVANCE,
    RESPONSE_COMPLETENESS,
    SELF_HARM,
    SEXUAL,
    SIMILARITY,
    TASK_ADHERENCE,
    TASK_COMPLETION,
    TASK_NAVIGATION_EFFICIENCY,
    TOOL_CALL_ACCURACY,
    TOOL_CALL_SUCCESS,
    TOOL_INPUT_ACCURACY,
    TOOL_OUTPUT_UTILIZATION,
    TOOL_SELECTION,
    TOOL_USE_QUALITY,
    VIOLENCE,
    GeneratedEvaluatorRef,
    MatchingMode,
)
from evalpipe.foundry._results import flat_rows, flat_view
from evalpipe.foundry._threads import (
    FoundryThreads,
    ThreadDiagnostic,
    ThreadRunRecord,
    evaluate_threads,
    threads_to_items,
)

__all__ = [
    "BUILTIN_EVALUATORS",
    "COHERENCE",
    "COMPOSITE_COMPONENTS",
    "COMPOSITE_EVALUATORS",
    "DEFAULT_EVALUATORS",
    "ENDPOINT_ENV",
    "FLUENCY",
    "GROUNDEDNESS",
    "HATE_UNFAIRNESS",
    "INTENT_RESOLUTION",
    "OUTPUT_QUALITY",
    "RELEVANCE",
    "RESPONSE_COMPLETENESS",
    "SELF_HARM",
    "SEXUAL",
    "SIMILARITY",
    "TASK_ADHERENCE",
    "TASK_COMPLETION",
    "TASK_NAVIGATION_EFFICIENCY",
    "TOOL_CALL_ACCURACY",
    "TOOL_CALL_SUCCESS",
    "TOOL_INPUT_ACCURACY",
    "TOOL_OUTPUT_UTILIZATION",
    "TOOL_SELECTION",
    "TOOL_USE_QUALITY",
    "VIOLENCE",
    "FoundryConfig",
    "FoundryEvals",
    "FoundryThreads",
    "GeneratedEvaluatorRef",
    "MatchingMode",
    "RetryPolicy",
    "ThreadDiagnostic",
    "ThreadRunRecord",
    "async_transport",
    "evaluate_foundry_target",
    "evaluate_threads",
    "evaluate_traces",
    "flat_rows",
    "flat_view",
    "item_to_foundry",
    "threads_to_items",
    "to_foundry_messages",
]
