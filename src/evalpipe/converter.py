"""``AgentEvalConverter``: MAF's deprecated conversion helpers, kept so MAF code that uses them runs.

MAF (agent-framework-core 1.23.0) deprecates the class but still exports it: every method warns
(``DeprecationWarning``) and does what it did. evalpipe's does the same with evalpipe's pieces:
the wire messages are ``evalpipe.foundry.to_foundry_messages``'s (MAF's legacy Foundry format),
the tools are snapshots of what the agent declares, and ``to_eval_item`` builds an evalpipe
``EvalItem`` (its tools are ``ToolDefinition`` snapshots, docs/maf-compatibility.md §4).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from evalpipe.foundry._convert import to_foundry_messages, tool_definitions_to_foundry
from evalpipe.items import EvalItem
from evalpipe.messages import Message, ToolDefinition
from evalpipe.targets.base import agent_tools, response_messages

__all__ = ["AgentEvalConverter"]

DEPRECATION_MESSAGE = (
    "`AgentEvalConverter` is deprecated and will be removed in a future version. Construct "
    "`EvalItem` directly or use `evaluate_agent()` / `evaluate_workflow()`; for Foundry's wire "
    "format use `evalpipe.foundry.to_foundry_messages()`."
)
"""What every use of AgentEvalConverter warns: the replacements, as MAF's warning names them."""


def _warn() -> None:
    # stacklevel 3: the warning points at the code that called the converter's method (as MAF's).
    warnings.warn(DEPRECATION_MESSAGE, DeprecationWarning, stacklevel=3)


class AgentEvalConverter:
    """Deprecated, as in MAF: every method emits a ``DeprecationWarning`` naming the replacements
    (:data:`DEPRECATION_MESSAGE`)."""

    @staticmethod
    def convert_message(message: Any) -> list[dict[str, Any]]:
        """One message (evalpipe's, MAF's or its dict form) in MAF's legacy Foundry wire format."""
        _warn()
        return to_foundry_messages([message])

    @staticmethod
    def convert_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
        """Messages in MAF's legacy Foundry wire format (a message with tool results becomes one
        tool message per result)."""
        _warn()
        return to_foundry_messages(messages)

    @staticmethod
    def extract_tools(agent: Any) -> list[dict[str, Any]]:
        """The agent's tools as ``{"name", "description", "parameters"}`` dicts (MAF's
        ``default_options["tools"]`` and MCP tools' functions, deduplicated by name)."""
        _warn()
        return tool_definitions_to_foundry(agent_tools(agent))

    @staticmethod
    def to_eval_item(
        *,
        query: str | Sequence[Any],
        response: Any,
        agent: Any | None = None,
        tools: Any | Callable[..., Any] | Sequence[Any] | None = None,
        context: str | None = None,
    ) -> EvalItem:
        """An EvalItem of one interaction: the query (a str becomes a user message) followed by
        the response's messages; tools from ``tools`` (tool objects or functions), else the
        agent's; None when there are none."""
        _warn()
        query_messages = (
            [Message("user", [query])]
            if isinstance(query, str)
            else [Message.coerce(m) for m in query]
        )
        if tools:
            listed = [tools] if callable(tools) or not isinstance(tools, Sequence) else tools
            snapshots = [ToolDefinition.coerce(t) for t in listed]
        else:
            snapshots = agent_tools(agent) if agent else []
        return EvalItem(
            [*query_messages, *response_messages(response)],
            snapshots or None,
            context=context,
        )
