"""What a run holds while it runs, in one process: its journal and its server-side evaluations.

A plan is immutable and can be shipped to a worker; a ``RunState`` belongs to the process running
shards of it. ``RunState.open`` creates the run directory, its marker (``run.json``) and the
journal; a state without a run directory (``evaluate_agent``) journals nothing.

Run directories live under ``{output_dir}/{suite}/``: ``new_run_dir`` makes a fresh name,
``find_resumable`` finds the newest unfinished run of the same suite. A run always works in a local
directory; for a remote ``output_dir`` (``s3://...``) that is a staging copy under
``EVALPIPE_STAGING_DIR`` (default ``.evalpipe-staging``), published when the run finishes
(``evalpipe.artifacts.storage.publish``).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from evalpipe.journal import Journal
from evalpipe.redact import redact
from evalpipe.runner.plan import RunPlan

__all__ = ["RUN_MARKER", "RunState", "find_resumable", "is_remote", "local_base", "new_run_dir"]

RUN_MARKER = "run.json"
"""Written when a run starts (suite + fingerprint); ``manifest.json`` appears when it completes."""


def is_remote(output_dir: str) -> bool:
    """A URI whose scheme is not ``file``."""
    scheme = urlsplit(output_dir).scheme if "://" in output_dir else ""
    return bool(scheme) and scheme != "file"


def local_base(output_dir: str) -> Path:
    """The local directory runs are written in: the path itself, a ``file://`` URI's path, or the
    staging directory for a remote URI."""
    if is_remote(output_dir):
        return Path(os.environ.get("EVALPIPE_STAGING_DIR", ".evalpipe-staging"))
    if output_dir.startswith("file://"):
        return Path(unquote(urlsplit(output_dir).path))
    return Path(output_dir)


def new_run_dir(suite: Any, output_dir: str | Path | None = None) -> Path:
    """A fresh run directory: ``{output_dir}/{suite}/{UTC timestamp}-{fingerprint}``."""
    base = local_base(str(output_dir or suite.output_dir)) / suite.name
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    fingerprint = str(suite.fingerprint())
    path: Path = base / f"{stamp}-{fingerprint}"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{stamp}-{fingerprint}-{n}"
    return path


def find_resumable(suite: Any, output_dir: str | Path | None = None) -> Path | None:
    """The newest unfinished run of this exact suite (same fingerprint, no manifest yet)."""
    base = local_base(str(output_dir or suite.output_dir)) / suite.name
    if not base.is_dir():
        return None
    candidates: list[tuple[float, Path]] = []
    for path in base.iterdir():
        marker = path / RUN_MARKER
        if not marker.is_file() or (path / "manifest.json").exists():
            continue
        try:
            data = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if data.get("fingerprint") == suite.fingerprint():
            candidates.append((marker.stat().st_mtime, path))
    return max(candidates)[1] if candidates else None


@dataclass
class RunState:
    """A run's journal and server-side evaluations in this process."""

    journal: Journal | None = None
    """Finished calls on disk (None: nothing is journaled)."""
    started_at: float = field(default_factory=time.time)
    _eval_ids: dict[str, str] = field(default_factory=dict, repr=False)
    _eval_locks: dict[str, asyncio.Lock] = field(default_factory=dict, repr=False)
    _run_slots: dict[int, asyncio.Semaphore] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, plan: RunPlan, *, marker: bool = True) -> RunState:
        """The state of a suite run: its directory, marker and journal (an existing journal is
        resumed). Without a run directory, a state that journals nothing."""
        state = cls()
        if plan.run_dir is None:
            return state
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        path = plan.run_dir / RUN_MARKER
        if marker and not path.exists():
            path.write_text(
                json.dumps(
                    {
                        "suite": redact(plan.suite.model_dump(mode="json"))
                        if plan.suite is not None
                        else None,
                        "fingerprint": plan.suite.fingerprint() if plan.suite is not None else None,
                        "identity": plan.identity,
                        "started_at": state.started_at,
                    },
                    indent=2,
                ),
                encoding="utf-8",
            )
        if plan.stored is None:
            state.journal = Journal(plan.run_dir / "journal", plan.identity)
        return state

    def reusable(self, plan: RunPlan) -> int:
        """Calls of the plan whose transcripts the journal (or the re-scored run) already holds."""
        if plan.stored is not None:
            return sum(1 for c in plan.calls if c.key in plan.stored)
        if self.journal is None:
            return 0
        return sum(1 for c in plan.calls if c.key in self.journal)

    @staticmethod
    def peek(plan: RunPlan) -> int:
        """:meth:`reusable` without opening the run (nothing is created or written)."""
        if plan.stored is not None or plan.run_dir is None:
            return RunState().reusable(plan)
        return RunState(journal=Journal(plan.run_dir / "journal", plan.identity)).reusable(plan)

    async def eval_id(self, name: str, create: Any) -> str:
        """The run's one server-side evaluation named ``name``, created by the first caller
        (``await create()``) and shared by every later shard in this process."""
        lock = self._eval_locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self._eval_ids:
                self._eval_ids[name] = await create()
            return self._eval_ids[name]

    def run_slots(self, provider_index: int, size: int) -> asyncio.Semaphore:
        """The bound on one batched provider's server runs in flight in this process."""
        slots = self._run_slots.get(provider_index)
        if slots is None:
            slots = self._run_slots[provider_index] = asyncio.Semaphore(max(1, size))
        return slots

    def close(self) -> None:
        """Close the journal (what it holds is on disk already)."""
        if self.journal is not None:
            self.journal.close()
