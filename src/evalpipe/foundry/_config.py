"""FoundryConfig: the ``{foundry: {...}}`` short form of a suite, validated field by field."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalpipe._internal.imports import load_object
from evalpipe.foundry._evals import ENDPOINT_ENV, FoundryEvals
from evalpipe.foundry._evaluators import MatchingMode, validate_evaluators
from evalpipe.items import ConversationSplit

__all__ = ["FoundryConfig"]


class FoundryConfig(BaseModel):
    """Settings for a FoundryEvals provider, as a suite declares them; a misspelt field is an error."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str | None = Field(default_factory=lambda: os.environ.get(ENDPOINT_ENV))
    """The project endpoint (default: the AZURE_AI_PROJECT_ENDPOINT environment variable)."""
    model: str = Field(min_length=1)
    """The judge model's deployment name in the project."""
    evaluators: list[str] | None = None
    """Evaluator names; None for the defaults (relevance, coherence, task_adherence, ...)."""
    conversation_split: Literal["last_turn", "full"] | None = None
    """How items without their own split strategy are split (default last_turn)."""
    poll_interval: float = Field(default=1.0, gt=0)
    """First wait between polls of a run, in seconds (doubles per poll)."""
    max_poll_interval: float = Field(default=10.0, gt=0)
    """The longest wait between polls."""
    timeout: float = Field(default=600.0, gt=0)
    """Seconds a run may take before it is canceled."""
    batch_size: int = Field(default=500, ge=1)
    """Items per run."""
    max_concurrent_runs: int = Field(default=4, ge=1)
    """Runs of one evaluation in flight at once."""
    max_retries: int = Field(default=5, ge=0)
    """Retries per HTTP call."""
    request_timeout: float = Field(default=60.0, gt=0)
    """Seconds one HTTP request may take."""
    matching_mode: MatchingMode = "exact_match"
    """How task_navigation_efficiency compares tool calls."""
    credential: str | None = None
    """``module:attr`` of a credential (class, factory or instance), e.g.
    ``azure.identity:ManagedIdentityCredential``; default DefaultAzureCredential."""

    @field_validator("evaluators")
    @classmethod
    def _known_names(cls, value: list[str] | None) -> list[str] | None:
        validate_evaluators(value)
        return value

    def build(self) -> FoundryEvals:
        """The FoundryEvals these settings describe (DefaultAzureCredential for the endpoint).

        Raises:
            ValueError: when no endpoint is set here or in AZURE_AI_PROJECT_ENDPOINT.
        """
        if not self.endpoint:
            raise ValueError(
                f"foundry.endpoint is not set: add it to the suite or set {ENDPOINT_ENV}."
            )
        credential = None
        if self.credential is not None:
            obj = load_object(self.credential, what="foundry.credential")
            credential = obj() if isinstance(obj, type) or not hasattr(obj, "get_token") else obj
        split = self.conversation_split
        return FoundryEvals(
            **self.model_dump(exclude={"conversation_split", "credential"}),
            credential=credential,
            conversation_split=ConversationSplit(split) if split else None,
        )
