"""The Parquet schemas of a run directory, their version, and the row type of ``runs.parquet``.

Every column is declared here, with its meaning as field metadata, so the writer, the readers and
docs/artifacts.md agree on one definition. Bump ``SCHEMA_VERSION`` whenever a column is added,
removed or changes meaning; readers refuse files written with a newer version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from evalpipe.transcripts import TargetRun, Transcript

__all__ = [
    "ADDED",
    "FILES",
    "ITEMS_SCHEMA",
    "MANIFEST_FILE",
    "RUNS_SCHEMA",
    "RUN_NAME",
    "SCHEMAS",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_KEY",
    "SCORES_SCHEMA",
    "SUMMARY_SCHEMA",
    "ArtifactError",
    "RunRecord",
    "RunStatus",
    "SchemaVersionError",
]

SCHEMA_VERSION = 2
"""The version of the run-directory layout this evalpipe writes, and the newest it reads.

Version 2 added ``run_name`` to every table, the calls' ``started_at``/``ended_at`` to runs.parquet
and the run's ``run_started_at``/``run_ended_at`` to summary.parquet (see :data:`ADDED`)."""

SCHEMA_VERSION_KEY = b"evalpipe.schema_version"
"""Key of the schema version in each Parquet file's key-value metadata."""

MANIFEST_FILE = "manifest.json"
"""The manifest's file name; it is written last, so its presence marks a finished run."""

RunStatus = Literal["ok", "error"]
"""``ok``: the target call returned a response; ``error``: it failed (see error_code)."""


class ArtifactError(Exception):
    """A run directory or one of its files cannot be read (missing, not a run, wrong columns)."""


class SchemaVersionError(ArtifactError):
    """A run directory was written with a schema version this evalpipe does not know."""


def _field(name: str, type_: Any, doc: str, *, nullable: bool = True) -> Any:
    return pa.field(name, type_, nullable=nullable, metadata={b"description": doc.encode()})


_S = pa.string()
_I = pa.int64()
_F = pa.float64()
_B = pa.bool_()
_T = pa.timestamp("us", tz="UTC")

RUN_NAME = "run_name"
"""The column every table starts with: the run directory's name, the same on each of its rows."""


def _schema(*columns: Any) -> Any:
    run_name = _field(
        RUN_NAME,
        _S,
        "The run: its run directory's name (unique per run; the same on every row and table of the "
        "run, and manifest.json's run_name). Stack runs on it.",
        nullable=False,
    )
    return pa.schema(
        [run_name, *columns], metadata={SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()}
    )


RUNS_SCHEMA = _schema(
    _field(
        "run_id", _S, "Stable id of the target call (the caller's content hash).", nullable=False
    ),
    _field("row_id", _S, "Id of the dataset row the call answered."),
    _field("query_index", _I, "Position of the query in the query set."),
    _field("repetition", _I, "Which repetition of the query (0-based)."),
    _field("target", _S, "Identity of the target that was called (agent or workflow)."),
    _field("status", _S, '"ok" or "error".', nullable=False),
    _field("error_code", _S, 'Why the call failed (e.g. "AgentError"); null when ok.'),
    _field("error_message", _S, "The failure, as text; null when ok."),
    _field("latency_s", _F, "Wall-clock seconds of the call."),
    _field(
        "started_at", _T, "When the call started (UTC); null for a recorded row (nothing called)."
    ),
    _field("ended_at", _T, "When the call ended (UTC); null for a recorded row."),
    _field("input_tokens", _I, "Prompt tokens, when reported."),
    _field("output_tokens", _I, "Completion tokens, when reported."),
    _field("total_tokens", _I, "Total tokens, when reported."),
    _field("transcript", _S, "JSON of the call's transcript (a TargetRun or a WorkflowRun)."),
    _field(
        "cached", _B, "The call was reused from the run journal, not made again.", nullable=False
    ),
)

ITEMS_SCHEMA = _schema(
    _field(
        "agent",
        _S,
        'Result level: "overall" for the whole target, else the agent (executor) name.',
        nullable=False,
    ),
    _field(
        "item_index",
        _I,
        "Position of the item among this agent's items in the run.",
        nullable=False,
    ),
    _field("item_id", _S, "EvalItem.item_id."),
    _field(
        "item_agent", _S, "EvalItem.agent as set on the item (null for a single agent's items)."
    ),
    _field("run_id", _S, 'The target call that produced the item (metadata["run_id"]).'),
    _field("row_id", _S, 'The dataset row (metadata["row_id"]).'),
    _field("query_index", _I, "EvalItem.query_index."),
    _field("repetition", _I, "EvalItem.repetition."),
    _field("query", _S, "The query string under the item's split."),
    _field("response", _S, "The response string under the item's split."),
    _field(
        "split",
        _S,
        'The item\'s split strategy: "last_turn", "full", "at:N" (a workflow agent\'s item: its conversation cut after the first N messages, what the agent received | what it produced), a custom splitter\'s "module:name", or null for the default (last_turn).',
    ),
    _field("conversation", _S, "JSON list of the conversation's messages."),
    _field("expected_output", _S, "The reference answer."),
    _field("context", _S, "Grounding context."),
    _field("expected_tool_calls", _S, "JSON list of the expected tool calls (null: none given)."),
    _field("tool_definitions", _S, "JSON list of the tool definitions (null: not known)."),
    _field("error_code", _S, "Why the item cannot be evaluated (the target call failed)."),
    _field("error_message", _S, "What went wrong in the target call."),
    _field(
        "has_usage",
        _B,
        "EvalItem.usage was set (it can be set with every value null).",
        nullable=False,
    ),
    _field("input_tokens", _I, "Prompt tokens of the target call."),
    _field("output_tokens", _I, "Completion tokens of the target call."),
    _field("total_tokens", _I, "Total tokens of the target call."),
    _field("latency_s", _F, "Wall-clock seconds of the target call."),
    _field("metadata", _S, "JSON object of EvalItem.metadata.", nullable=False),
)

SCORES_SCHEMA = _schema(
    _field(
        "provider",
        _S,
        'The evaluator provider ("Local", "Microsoft Foundry", ...).',
        nullable=False,
    ),
    _field(
        "provider_index", _I, "Position of the provider in the run's provider list.", nullable=False
    ),
    _field(
        "eval_run_id",
        _S,
        'EvalResults.run_id of this provider and agent (local providers: the eval name; in suite runs it always ends with " ({provider})", however many providers the suite has).',
    ),
    _field("agent", _S, '"overall" or the agent (executor) name.', nullable=False),
    _field(
        "item_index",
        _I,
        "Position of the item in this provider and agent's results.",
        nullable=False,
    ),
    _field("item_id", _S, "EvalItemResult.item_id.", nullable=False),
    _field(
        "item_status",
        _S,
        '"pass", "fail", "error" or "errored": the item\'s verdict.',
        nullable=False,
    ),
    _field("item_error_code", _S, "Why the item could not be evaluated."),
    _field("item_error_message", _S, "What went wrong with the item."),
    _field("response_id", _S, "The evaluated response's id, when the provider reports one."),
    _field("input_text", _S, "The query text the provider saw."),
    _field("output_text", _S, "The response text the provider saw."),
    _field("item_input_tokens", _I, "Tokens the item's evaluation used (input)."),
    _field("item_output_tokens", _I, "Tokens the item's evaluation used (output)."),
    _field("item_total_tokens", _I, "Tokens the item's evaluation used (total)."),
    _field(
        "item_token_usage_other",
        _S,
        "JSON of the item's other token_usage keys ({} for an empty dict).",
    ),
    _field("item_metadata", _S, "JSON object of EvalItemResult.metadata."),
    _field(
        "score_index",
        _I,
        "Position of the metric in the item's scores; null on the one row of an item with no metrics.",
    ),
    _field("metric", _S, "The metric (check) name; null on the row of an item with no metrics."),
    _field(
        "evaluator", _S, "The evaluator that produced the metric, when it differs from the metric."
    ),
    _field("score", _F, "The score (null when the metric errored)."),
    _field("passed", _B, "The metric's verdict, when it has one."),
    _field("label", _S, "A categorical label."),
    _field("rating", _S, "A judge's rating."),
    _field("reason", _S, "Why the metric passed or failed."),
    _field("threshold", _F, "The pass threshold that decided passed."),
    _field("status", _S, '"pass", "fail", "error" or "not_applicable" (no verdict and no error).'),
    _field("error_code", _S, "Why the metric could not be computed."),
    _field("error_message", _S, "The metric's error, as text."),
    _field("diagnostics", _S, "JSON list of {severity, message} notes."),
    _field("dimensions", _S, "JSON list of rubric dimensions."),
    _field("sample", _S, "JSON object of provider-specific detail."),
    _field("input_tokens", _I, "Tokens spent on the metric (input)."),
    _field("output_tokens", _I, "Tokens spent on the metric (output)."),
    _field("total_tokens", _I, "Tokens spent on the metric (total)."),
    _field(
        "token_usage_other",
        _S,
        "JSON of the metric's other token_usage keys ({} for an empty dict).",
    ),
    _field("latency_s", _F, "Seconds spent computing the metric."),
)

SUMMARY_SCHEMA = _schema(
    _field(
        "kind",
        _S,
        '"result": one row per provider and agent (item counts and EvalResults fields); "metric": one per provider, agent and metric.',
        nullable=False,
    ),
    _field("provider", _S, "The evaluator provider.", nullable=False),
    _field(
        "provider_index", _I, "Position of the provider in the run's provider list.", nullable=False
    ),
    _field("agent", _S, '"overall" or the agent name.', nullable=False),
    _field(
        "agent_index", _I, "0 for overall, then the agents in sub_results order.", nullable=False
    ),
    _field("metric", _S, "The metric; null on result rows."),
    _field(
        "n",
        _I,
        "Result rows: items. Metric rows: items scored on the metric, plus items that could not be evaluated at all.",
        nullable=False,
    ),
    _field("passed", _I, "How many passed.", nullable=False),
    _field("failed", _I, "How many failed.", nullable=False),
    _field(
        "errored",
        _I,
        "How many could not be evaluated (metric rows: errored metrics plus items with no metrics because they errored).",
        nullable=False,
    ),
    _field(
        "not_applicable",
        _I,
        "Metric rows: scores with no verdict and no error (0 on result rows).",
        nullable=False,
    ),
    _field(
        "pass_rate_denominator",
        _I,
        "passed + failed: errored and not_applicable are left out.",
        nullable=False,
    ),
    _field("pass_rate", _F, "passed / pass_rate_denominator; null when the denominator is 0."),
    _field("score_count", _I, "Metric rows: non-null scores (0 on result rows).", nullable=False),
    _field("score_mean", _F, "Mean of the non-null scores."),
    _field("score_min", _F, "Smallest score."),
    _field("score_max", _F, "Largest score."),
    _field(
        "score_std", _F, "Sample standard deviation (n-1) of the scores; null below two scores."
    ),
    _field("status", _S, 'Result rows: EvalResults.status ("partial" when batches disagreed).'),
    _field("eval_id", _S, "Result rows: EvalResults.eval_id (of the first batch)."),
    _field("eval_run_id", _S, "Result rows: EvalResults.run_id (of the first batch)."),
    _field("report_url", _S, "Result rows: EvalResults.report_url (of the first batch)."),
    _field("error", _S, 'Result rows: EvalResults.error, the batches\' errors joined with "; ".'),
    _field(
        "result_counts", _S, "Result rows: JSON of EvalResults.result_counts, summed over batches."
    ),
    _field(
        "per_evaluator", _S, "Result rows: JSON of EvalResults.per_evaluator, summed over batches."
    ),
    _field(
        "run_started_at", _T, "When the run started (UTC; manifest.json's started_at), every row."
    ),
    _field(
        "run_ended_at", _T, "When the run's tables were written (UTC; manifest.json's ended_at)."
    ),
)

SCHEMAS: dict[str, Any] = {
    "runs": RUNS_SCHEMA,
    "items": ITEMS_SCHEMA,
    "scores": SCORES_SCHEMA,
    "summary": SUMMARY_SCHEMA,
}
"""Each table's schema by name; the file is ``{name}.parquet``."""

FILES: dict[str, str] = {name: f"{name}.parquet" for name in SCHEMAS}
"""Each table's file name."""

ADDED: dict[str, dict[str, int]] = {
    "runs": {RUN_NAME: 2, "started_at": 2, "ended_at": 2},
    "items": {RUN_NAME: 2},
    "scores": {RUN_NAME: 2},
    "summary": {RUN_NAME: 2, "run_started_at": 2, "run_ended_at": 2},
}
"""Columns added after version 1, per table, with the version that added them: a reader fills them
in for older files (``run_name`` from the directory's name, the timestamps null)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """One target call, as a row of ``runs.parquet``."""

    run_id: str
    """Stable id of the call (the caller's content hash of target, dataset row and repetition)."""
    query_index: int | None = None
    """Position of the query in the query set."""
    repetition: int | None = None
    """Which repetition (0-based)."""
    row_id: str | None = None
    """Id of the dataset row."""
    target: str | None = None
    """Identity of the target (agent or workflow)."""
    status: RunStatus = "ok"
    """``ok`` or ``error``."""
    error_code: str | None = None
    """Why the call failed."""
    error_message: str | None = None
    """The failure, as text."""
    latency_s: float | None = None
    """Wall-clock seconds."""
    started_at: datetime | None = None
    """When the call started (UTC); None for a recording."""
    ended_at: datetime | None = None
    """When the call ended (UTC); None for a recording."""
    input_tokens: int | None = None
    """Prompt tokens."""
    output_tokens: int | None = None
    """Completion tokens."""
    total_tokens: int | None = None
    """Total tokens."""
    transcript: str | None = None
    """JSON of the transcript (a TargetRun or a WorkflowRun); opaque to the artifacts."""
    cached: bool = False
    """Reused from the run journal."""

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ValueError(f"RunRecord.run_id must be a non-empty string, got {self.run_id!r}")
        if self.status not in ("ok", "error"):
            raise ValueError(
                f"RunRecord {self.run_id}: status must be 'ok' or 'error', got {self.status!r}"
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RunRecord:
        """A record from a dict with the column names as keys.

        Raises:
            ValueError: naming the unknown keys.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"RunRecord: unknown field(s) {unknown}; the fields are {sorted(known)}"
            )
        return cls(**dict(data))

    @classmethod
    def from_target_run(
        cls,
        run: Transcript,
        *,
        run_id: str,
        target: str | None = None,
        row_id: str | None = None,
        cached: bool = False,
        transcript: str | None = None,
    ) -> RunRecord:
        """The record of one call (a TargetRun or a WorkflowRun), its transcript being the run's
        JSON (``transcript``, when the caller serialized it already)."""
        usage = run.usage
        return cls(
            run_id=run_id,
            row_id=row_id,
            query_index=run.query_index,
            repetition=run.repetition,
            target=target,
            status="ok" if run.error_code is None else "error",
            error_code=run.error_code,
            error_message=run.error_message,
            latency_s=usage.latency_seconds,
            started_at=run.started_at,
            ended_at=run.ended_at,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
            transcript=transcript if transcript is not None else run.model_dump_json(fallback=str),
            cached=cached,
        )

    def target_run(self) -> TargetRun:
        """The transcript as a TargetRun (for records of agent calls).

        Raises:
            ValueError: when the record has no transcript or it is not a TargetRun's JSON.
        """
        if self.transcript is None:
            raise ValueError(f"run {self.run_id} has no transcript")
        return TargetRun.model_validate_json(self.transcript)
