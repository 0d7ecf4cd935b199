"""The run journal: every finished target call, on disk as soon as it finishes, so a run resumes.

A call's key is content-addressed: a hash of the target's identity, the dataset row's content hash
(its id included: rows that differ only in id are separate samples) and the repetition index. Re-running the same suite against the same journal re-uses every call that
finished (the transcript is read back) and makes only the missing ones, so a run killed halfway (even
with ``kill -9``) loses at most the calls that were in flight.

The journal is one append-only JSON Lines file per target identity under the journal directory. Each
line is written with a single ``write`` on a file opened in append mode and flushed at once; a line
cut short by a crash is skipped when the journal is read back. Only calls that returned are
journaled: a call that errored is made again on the next run (its error may have been transient).

A line is ``{"key": ..., "finished_at": ..., "run": {...}}``: the transcript's JSON object is written
into the line as it is (not re-encoded as a JSON string) and read back as the same text. Journals
written before that, whose ``run`` is the transcript's JSON as a string, are read as well.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any

from pydantic_core import from_json

__all__ = ["Journal", "call_key", "content_key"]


def content_key(data: Any) -> str:
    """The content address of JSON-ready data (a dataset row: its id and everything it holds)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def call_key(identity: str, row_hash: str, repetition: int) -> str:
    """The content address of one target call: the target, the row and the repetition."""
    text = f"{identity}\x1f{row_hash}\x1f{repetition}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


_RUN_FIELD = b',"run":'
"""What precedes the transcript in a line (the key and the time before it hold no such text)."""


class Journal:
    """Finished target calls of one target, keyed by :func:`call_key`.

    Args:
        directory: Where journal files live (created when missing).
        identity: The target's identity string (the same target must give the same string).
    """

    def __init__(self, directory: str | Path, identity: str) -> None:
        self.directory = Path(directory)
        self.identity = identity
        # one file per target, named by a short hash of its identity
        self.path = self.directory / f"{hashlib.sha256(identity.encode()).hexdigest()[:24]}.jsonl"
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[int, int, bool]] = {}
        """key -> (offset, length, run embedded as an object) of its line: transcripts stay on
        disk, not in memory."""
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
                    entry = from_json(raw)
                    key = entry["key"]
                    run = entry["run"]
                    embedded = isinstance(run, dict)
                    if not isinstance(key, str) or not (embedded or isinstance(run, str)):
                        raise TypeError
                    if embedded and not (raw.startswith(b'{"key":') and _RUN_FIELD in raw):
                        raise ValueError  # not a line this module wrote
                except (ValueError, KeyError, TypeError):
                    self.skipped_lines += 1
                else:
                    self._entries[key] = (offset, len(raw), embedded)
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
        offset, length, embedded = where
        with self.path.open("rb") as handle:
            handle.seek(offset)
            line = handle.read(length)
        if embedded:
            # the object after the line's first "run" field, without the line's closing brace
            start = line.find(_RUN_FIELD) + len(_RUN_FIELD)
            return line[start : line.rstrip(b"\r\n").rfind(b"}")].decode("utf-8")
        run: str = json.loads(line)["run"]
        return run

    def keys(self) -> Iterator[str]:
        """Every journaled key."""
        return iter(self._entries)

    def record(self, key: str, run_json: str) -> None:
        """Persist one finished call (its transcript as JSON, an object) before returning.

        The transcript's JSON is written into the line as it is (measured: 12 -> 2 µs a line
        against re-encoding it as a JSON string), so it must be the JSON text of an object (a
        model's ``model_dump_json()``): a line holding anything else cannot be read back, and the
        call is made again on resume. A text that does not look like one object on one line is
        stored as a JSON string instead.
        """
        self.record_many(((key, run_json),))

    def record_many(self, entries: Iterable[tuple[str, str]]) -> None:
        """Persist several finished calls, as :meth:`record` does each, in one write.

        Raises:
            OSError: when the lines cannot all be written (those written in full are kept).
        """
        lines: list[bytes] = []
        keys: list[tuple[str, bool]] = []
        # the lines of one write finish together: one time for them all (a float's repr costs
        # more than the rest of a line's text)
        finished = repr(time.time())
        quote = encode_basestring
        for key, run_json in entries:
            embedded = run_json.startswith("{") and run_json.endswith("}") and "\n" not in run_json
            run = run_json if embedded else quote(run_json)
            lines.append(f'{{"key":{quote(key)},"finished_at":{finished},"run":{run}}}\n'.encode())
            keys.append((key, embedded))
        if not lines:
            return
        data = lines[0] if len(lines) == 1 else b"".join(lines)
        with self._lock:
            if self._handle is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._handle = open(self.path, "ab", buffering=0)  # noqa: SIM115 - kept open
                if self._handle.tell() > 0:
                    self._terminate_partial_line()
            written = 0
            try:
                while written < len(data):  # a short write (a disk filling up) is retried
                    written += self._handle.write(memoryview(data)[written:])
            finally:
                # where the lines ended up, read after the write: with O_APPEND another process
                # (a Dask worker of the same run) may have appended since this one's last line
                offset = self._handle.tell() - written
                for (key, embedded), encoded in zip(keys, lines, strict=True):
                    if len(encoded) > written:
                        break
                    self._entries[key] = (offset, len(encoded), embedded)
                    offset += len(encoded)
                    written -= len(encoded)

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
