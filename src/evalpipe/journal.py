"""The run journal: every finished target call, on disk as soon as it finishes, so a run resumes.

A call's key is content-addressed: a hash of the target's identity, the dataset row's content hash
(its id included: rows that differ only in id are separate samples) and the repetition index. Re-running the same suite against the same journal re-uses every call that
finished (the transcript is read back) and makes only the missing ones, so a run killed halfway (even
with ``kill -9``) loses at most the calls that were in flight.

The journal is one append-only JSON Lines file per target identity under the journal directory. Each
line is written with a single ``write`` on a file opened in append mode and flushed at once; a line
cut short by a crash is skipped when the journal is read back. Only calls that returned are
journaled: a call that errored is made again on the next run (its error may have been transient).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["Journal", "call_key", "content_key", "target_key"]


def target_key(identity: str) -> str:
    """A short, file-name-safe hash of a target's identity string."""
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:24]


def content_key(data: Any) -> str:
    """The content address of JSON-ready data (a dataset row: its id and everything it holds)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def call_key(identity: str, row_hash: str, repetition: int) -> str:
    """The content address of one target call: the target, the row and the repetition."""
    text = f"{identity}\x1f{row_hash}\x1f{repetition}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class Journal:
    """Finished target calls of one target, keyed by :func:`call_key`.

    Args:
        directory: Where journal files live (created when missing).
        identity: The target's identity string (the same target must give the same string).
    """

    def __init__(self, directory: str | Path, identity: str) -> None:
        self.directory = Path(directory)
        self.identity = identity
        self.path = self.directory / f"{target_key(identity)}.jsonl"
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[int, int]] = {}
        """key -> (offset, length) of its line: transcripts stay on disk, not in memory."""
        self.skipped_lines = 0
        """Lines that could not be read back (a write cut short by a crash)."""
        self._load()
        self._handle: Any = None

    def _load(self) -> None:
        if not self.path.is_file():
            return
        offset = 0
        with self.path.open("rb") as handle:
            for raw in handle:
                try:
                    entry = json.loads(raw)
                    key = entry["key"]
                    if not isinstance(entry["run"], str):
                        raise TypeError
                except (ValueError, KeyError, TypeError):
                    self.skipped_lines += 1
                else:
                    self._entries[key] = (offset, len(raw))
                offset += len(raw)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: str) -> str | None:
        """The journaled transcript JSON for ``key``, or None (read back from the file)."""
        where = self._entries.get(key)
        if where is None:
            return None
        offset, length = where
        with self.path.open("rb") as handle:
            handle.seek(offset)
            run: str = json.loads(handle.read(length))["run"]
        return run

    def keys(self) -> Iterator[str]:
        """Every journaled key."""
        return iter(self._entries)

    def record(self, key: str, run_json: str) -> None:
        """Persist one finished call (its transcript as JSON) before returning."""
        line = json.dumps(
            {"key": key, "finished_at": time.time(), "run": run_json},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        data = (line + "\n").encode("utf-8")
        with self._lock:
            if self._handle is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._handle = open(self.path, "ab", buffering=0)  # noqa: SIM115 - kept open
                if self._handle.tell() > 0:
                    self._terminate_partial_line()
            offset = self._handle.tell()
            self._handle.write(data)
            self._entries[key] = (offset, len(data))

    def _terminate_partial_line(self) -> None:
        """After a crash mid-write the file may end without a newline; start on a fresh line."""
        with self.path.open("rb") as reader:
            reader.seek(-1, os.SEEK_END)
            if reader.read(1) != b"\n":
                self._handle.write(b"\n")

    def close(self) -> None:
        """Close the file (records already written are on disk)."""
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
