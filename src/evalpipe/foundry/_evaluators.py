"""Foundry's built-in evaluators: names, which fields each reads, and the testing criteria sent.

Mappings follow Microsoft's samples (shared spec foundry-evals.md §6) rather than MAF where the two
differ: task_navigation_efficiency gets ``actions``/``expected_actions`` and ``matching_mode``, and
takes no judge deployment.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evalpipe.items import EvalItem

logger = logging.getLogger("evalpipe.foundry")

MatchingMode = Literal["exact_match", "in_order_match", "any_order_match"]
"""How task_navigation_efficiency compares the agent's tool calls with the expected ones."""

INTENT_RESOLUTION = "intent_resolution"
TASK_ADHERENCE = "task_adherence"
TASK_COMPLETION = "task_completion"
TASK_NAVIGATION_EFFICIENCY = "task_navigation_efficiency"
TOOL_CALL_ACCURACY = "tool_call_accuracy"
TOOL_SELECTION = "tool_selection"
TOOL_INPUT_ACCURACY = "tool_input_accuracy"
TOOL_OUTPUT_UTILIZATION = "tool_output_utilization"
TOOL_CALL_SUCCESS = "tool_call_success"
COHERENCE = "coherence"
FLUENCY = "fluency"
RELEVANCE = "relevance"
GROUNDEDNESS = "groundedness"
RESPONSE_COMPLETENESS = "response_completeness"
SIMILARITY = "similarity"
VIOLENCE = "violence"
SEXUAL = "sexual"
SELF_HARM = "self_harm"
HATE_UNFAIRNESS = "hate_unfairness"
OUTPUT_QUALITY = "output_quality"
TOOL_USE_QUALITY = "tool_use_quality"

_TOOL_BUILTINS = (
    TOOL_CALL_ACCURACY,
    TOOL_SELECTION,
    TOOL_INPUT_ACCURACY,
    TOOL_OUTPUT_UTILIZATION,
    TOOL_CALL_SUCCESS,
)
_AGENT_BUILTINS = (INTENT_RESOLUTION, TASK_ADHERENCE, TASK_COMPLETION, TASK_NAVIGATION_EFFICIENCY)
_QUALITY_BUILTINS = (COHERENCE, FLUENCY, RELEVANCE, GROUNDEDNESS, RESPONSE_COMPLETENESS, SIMILARITY)
_SAFETY_BUILTINS = (VIOLENCE, SEXUAL, SELF_HARM, HATE_UNFAIRNESS)
"""Content-safety evaluators: severity 0-7, lower is better."""

BUILTIN_EVALUATORS: tuple[str, ...] = (
    *_AGENT_BUILTINS,
    *_TOOL_BUILTINS,
    *_QUALITY_BUILTINS,
    *_SAFETY_BUILTINS,
)
"""The 19 built-in evaluators, by short name (each is ``builtin.<name>`` on the service)."""

COMPOSITE_COMPONENTS: dict[str, tuple[str, ...]] = {
    OUTPUT_QUALITY: (
        COHERENCE,
        FLUENCY,
        GROUNDEDNESS,
        INTENT_RESOLUTION,
        TASK_ADHERENCE,
        TASK_COMPLETION,
    ),
    TOOL_USE_QUALITY: (
        TOOL_SELECTION,
        TOOL_INPUT_ACCURACY,
        TOOL_CALL_SUCCESS,
        TOOL_OUTPUT_UTILIZATION,
    ),
}
"""Composite evaluators (preview) and the components one judge call scores for each."""

COMPOSITE_EVALUATORS: tuple[str, ...] = tuple(COMPOSITE_COMPONENTS)

TOOL_EVALUATORS = frozenset({*_TOOL_BUILTINS, TOOL_USE_QUALITY})
"""Evaluators that need tool definitions: dropped when no item has tools."""

DEFAULT_EVALUATORS: tuple[str, ...] = (RELEVANCE, COHERENCE, TASK_ADHERENCE)
"""The default set, as MAF (tool_call_accuracy is added when any item has tools)."""

_KNOWN = frozenset(BUILTIN_EVALUATORS) | frozenset(COMPOSITE_EVALUATORS)
_VALID_NAMES = ", ".join(sorted(_KNOWN))

# data_mapping keys of the evaluators that read strings, from Microsoft's turn-level samples (spec
# §6); the others (agent, tool, composite and generated evaluators) read message arrays.
_STRING_FIELDS: dict[str, tuple[str, ...]] = {
    RELEVANCE: ("query", "response"),
    COHERENCE: ("query", "response"),
    FLUENCY: ("response",),
    GROUNDEDNESS: ("context", "query", "response"),
    RESPONSE_COMPLETENESS: ("ground_truth", "response"),
    SIMILARITY: ("query", "response", "ground_truth"),
    VIOLENCE: ("query", "response"),
    SEXUAL: ("query", "response"),
    SELF_HARM: ("query", "response"),
    HATE_UNFAIRNESS: ("query", "response"),
}


@dataclass(frozen=True)
class GeneratedEvaluatorRef:
    """A custom (generated) evaluator registered in the Foundry project, by name and version.

    It is sent with the message mapping of the agent evaluators. An unpinned version means
    "latest", which can change between runs (a warning is logged).
    """

    name: str
    """The evaluator's registered name (sent as ``evaluator_name``)."""
    version: str | None = None
    """The version to use; None for the latest."""
    display_name: str | None = None
    """The criterion name results are reported under; defaults to ``name``."""

    @classmethod
    def latest(cls, name: str, display_name: str | None = None) -> GeneratedEvaluatorRef:
        """A reference to the latest version of ``name``."""
        return cls(name, None, display_name)


@dataclass(frozen=True)
class EvaluatorSpec:
    """One resolved evaluator: what to send and how results come back."""

    name: str
    """The criterion name (results carry it)."""
    evaluator_name: str
    """The service's evaluator id, e.g. ``builtin.relevance``."""
    short: str | None
    """The built-in short name, or None for a generated evaluator."""
    version: str | None = None
    """A pinned evaluator version."""

    @property
    def components(self) -> tuple[str, ...]:
        """The component metrics of a composite evaluator (empty for others)."""
        return COMPOSITE_COMPONENTS.get(self.short or "", ())


def _spec_for(entry: str | GeneratedEvaluatorRef) -> EvaluatorSpec:
    if isinstance(entry, GeneratedEvaluatorRef):
        if entry.version is None:
            logger.warning(
                "Generated evaluator %r has no pinned version; results may change when a new "
                "version is published.",
                entry.name,
            )
        return EvaluatorSpec(entry.display_name or entry.name, entry.name, None, entry.version)
    if not isinstance(entry, str):
        raise TypeError(
            f"evaluators entries must be names (str) or GeneratedEvaluatorRef, got {entry!r}"
        )
    short = entry.removeprefix("builtin.")
    if short in _KNOWN:
        return EvaluatorSpec(short, f"builtin.{short}", short)
    if entry.startswith("builtin."):
        # A newer built-in than this version knows: pass it through with the agent mapping.
        logger.warning("Unknown built-in evaluator %r sent as is.", entry)
        return EvaluatorSpec(short, entry, None)
    raise ValueError(f"Unknown Foundry evaluator {entry!r}. Valid names: {_VALID_NAMES}.")


def validate_evaluators(
    evaluators: Sequence[str | GeneratedEvaluatorRef] | None,
) -> list[EvaluatorSpec] | None:
    """Resolve names at construction so a typo fails early: a ValueError for an unknown name (its
    message lists the valid ones), a name listed twice, or an empty list."""
    if evaluators is None:
        return None
    if isinstance(evaluators, str | GeneratedEvaluatorRef):
        evaluators = [evaluators]
    specs = [_spec_for(e) for e in evaluators]
    if not specs:
        raise ValueError(
            f"evaluators is empty: pass None for the defaults or at least one of: {_VALID_NAMES}."
        )
    names = [s.name for s in specs]
    if twice := next((n for i, n in enumerate(names) if n in names[:i]), None):
        raise ValueError(f"Foundry evaluator {twice!r} is listed twice.")
    return specs


def resolve_evaluators(
    specs: Sequence[EvaluatorSpec] | None, *, any_tools: bool
) -> list[EvaluatorSpec]:
    """The evaluators for a batch: the defaults when None, tool-only ones dropped without tools (a
    ValueError, MAF's message, when that drops them all)."""
    if specs is None:
        names = list(DEFAULT_EVALUATORS) + ([TOOL_CALL_ACCURACY] if any_tools else [])
        specs = [_spec_for(n) for n in names]
    if any_tools:
        return list(specs)
    kept = [s for s in specs if s.short not in TOOL_EVALUATORS]
    dropped = [s.name for s in specs if s.short in TOOL_EVALUATORS]
    if dropped:
        logger.info(
            "Dropped evaluators that need tool definitions (no item has tools): %s", dropped
        )
    if not kept:
        raise ValueError(
            f"All requested evaluators {dropped} require tool definitions, but no items have "
            "tools. Either add tool definitions to your items or choose evaluators that do not "
            "require tools."
        )
    return kept


def _mapping(spec: EvaluatorSpec, any_tools: bool) -> dict[str, str]:
    short = spec.short
    if short == TASK_NAVIGATION_EFFICIENCY:
        return {"actions": "{{item.actions}}", "expected_actions": "{{item.expected_actions}}"}
    if short in _STRING_FIELDS:
        mapping = {f: f"{{{{item.{f}}}}}" for f in _STRING_FIELDS[short]}
    else:
        fields = ("response",) if short == TOOL_CALL_SUCCESS else ("query", "response")
        mapping = {f: f"{{{{item.{f}_messages}}}}" for f in fields}
    if any_tools and (short not in _STRING_FIELDS or short == GROUNDEDNESS):
        mapping["tool_definitions"] = "{{item.tool_definitions}}"
    return mapping


def build_criteria(
    specs: Sequence[EvaluatorSpec],
    *,
    model: str,
    any_tools: bool | None,
    matching_mode: MatchingMode = "exact_match",
) -> list[dict[str, Any]]:
    """The ``testing_criteria`` of an eval: one ``azure_ai_evaluator`` entry per evaluator
    (``any_tools=None``: without ``data_mapping``, for data the service supplies)."""
    criteria: list[dict[str, Any]] = []
    for spec in specs:
        init: dict[str, Any]
        if spec.short == TASK_NAVIGATION_EFFICIENCY:
            init = {"matching_mode": matching_mode}
        else:
            init = {"deployment_name": model}
            if spec.components:
                init["evaluation_level"] = "turn"
        criterion: dict[str, Any] = {
            "type": "azure_ai_evaluator",
            "name": spec.name,
            "evaluator_name": spec.evaluator_name,
        }
        if spec.version is not None:
            criterion["evaluator_version"] = spec.version
        criterion["initialization_parameters"] = init
        if any_tools is not None:
            criterion["data_mapping"] = _mapping(spec, any_tools)
        criteria.append(criterion)
    return criteria


def item_schema(specs: Sequence[EvaluatorSpec], items: Sequence[EvalItem]) -> dict[str, Any]:
    """The eval's ``item_schema``: query/response required, optional fields when any item has them."""
    navigation = any(s.short == TASK_NAVIGATION_EFFICIENCY for s in specs)
    fields = {
        "query": ("string", True),
        "response": ("string", True),
        "query_messages": ("array", True),
        "response_messages": ("array", True),
        "context": ("string", any(i.context for i in items)),
        "ground_truth": ("string", any(i.expected_output is not None for i in items)),
        "tool_definitions": ("array", any(i.tools for i in items)),
        "actions": ("array", navigation),
        "expected_actions": ("array", navigation),
    }
    properties = {name: {"type": kind} for name, (kind, used) in fields.items() if used}
    return {"type": "object", "properties": properties, "required": ["query", "response"]}
