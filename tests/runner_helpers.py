"""Test helpers: transcripts made through the real runner (no evaluators)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from evalpipe.itemize import NO_EXPECTATIONS
from evalpipe.runner import CallOutcome, in_process_plan, resolve_target, run_in_process
from evalpipe.transcripts import TargetKind


async def transcripts(
    target: Any,
    queries: Sequence[str],
    *,
    repetitions: int = 1,
    max_concurrency: int = 8,
    kind: TargetKind | None = None,
    on_call: Callable[[CallOutcome], None] | None = None,
) -> list[Any]:
    """Every (query, repetition) of ``target`` called once, transcripts in repetition-major order."""
    resolved = resolve_target(target, kind=kind)
    plan = in_process_plan(
        name="calls",
        target=resolved,
        kind=resolved.kind,
        queries=queries,
        expectations=[NO_EXPECTATIONS] * len(queries),
        providers=[],
        repetitions=repetitions,
    )
    shard = await run_in_process(plan, max_concurrency=max_concurrency, on_call=on_call)
    return [o.run for o in shard.outcomes]
