"""What a run holds while it runs, in one process: its journal and its server-side evaluations.

A plan is immutable and can be shipped to a worker; a ``RunState`` belongs to the process running
shards of it. ``RunState.open`` creates the run directory, its marker (``run.json``) and the
journal: the target's finished calls, and the judges' answers (:class:`JournalAnswers`), so a
resumed run makes neither again; a state without a run directory (``evaluate_agent``) journals
nothing.

Run directories live under ``{output_dir}/{suite}/``: ``new_run_dir`` makes a fresh name,
``find_resumable`` finds the newest unfinished run of the same suite. A run chooses its directory
while it holds the suite's placing lock (``placing``) and takes the directory's own lock
(``RunLock``) and writes its marker before it lets go, so two runs started together see each
other: the second finds the first's directory, held. A run always works in a local
directory; for a remote ``output_dir`` (``s3://...``) that is a staging copy under
``EVALPIPE_STAGING_DIR`` (default ``.evalpipe-staging``), published when the run finishes
(``evalpipe.artifacts.storage.publish``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from evalpipe.cache import request_key
from evalpipe.journal import Journal
from evalpipe.runner.plan import RunPlan
from evalpipe.secrets import Scrubber
from evalpipe.suite import SuiteError

__all__ = [
    "MANIFEST",
    "RUN_MARKER",
    "JournalAnswers",
    "RunDirError",
    "RunLock",
    "RunLockedError",
    "RunState",
    "StorageError",
    "check_run_dir",
    "find_resumable",
    "is_remote",
    "local_base",
    "manifest_fingerprint",
    "new_run_dir",
    "placing",
    "write_marker",
]

logger = logging.getLogger("evalpipe.runner")

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


def new_run_dir(suite: Any) -> Path:
    """A fresh run directory: ``{output_dir}/{suite}/{UTC timestamp}-{fingerprint}``."""
    base = local_base(suite.output_dir) / suite.name
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    fingerprint = str(suite.fingerprint())
    path: Path = base / f"{stamp}-{fingerprint}"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{stamp}-{fingerprint}-{n}"
    return path


class RunDirError(SuiteError):
    """A run directory that this run must not write (a finished run, another target's run, a
    file); the message names it and says what to do instead."""


class RunLockedError(RuntimeError):
    """A live run holds the run directory; the message names it (pid, host, directory)."""


class StorageError(RuntimeError):
    """A run's files (its journal, its tables) could not be written: the run stops making calls
    (paid calls would otherwise be lost); the message names the file and the cause."""


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file's content; None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def find_resumable(suite: Any, identity: str, *, fingerprint: str | None = None) -> Path | None:
    """The newest unfinished run of this suite against the same target (its identity: the target
    and its version), whatever else changed (evaluators, gates, repetitions): its finished calls
    are reused by target and row, not by the whole suite. With ``fingerprint``, a run of this very
    suite whose results are written but whose process ended before it finished (its report,
    publication, artifacts: :func:`_interrupted_after_manifest`) is one too: it is finished, not
    made again."""
    base = local_base(suite.output_dir) / suite.name
    if not base.is_dir():
        return None
    candidates: list[tuple[float, Path]] = []
    for path in base.iterdir():
        data = _read_json(path / RUN_MARKER)
        if data is None or data.get("identity") != identity:
            continue
        if (path / MANIFEST).exists() and not (
            fingerprint is not None
            and _interrupted_after_manifest(path)
            and manifest_fingerprint(path) == fingerprint
        ):
            continue
        candidates.append(((path / RUN_MARKER).stat().st_mtime, path))
    return max(candidates)[1] if candidates else None


MANIFEST = "manifest.json"


def _interrupted_after_manifest(path: Path) -> bool:
    """A run directory whose results are written (``manifest.json``) but whose run did not let go
    of its lock: its process ended (``kill -9``) before its report, publication and artifacts,
    or it is finishing them now (its lock is then held)."""
    if not (path / MANIFEST).is_file():
        return False
    holder = RunLock(path).holder()
    return holder is not None and bool(holder.get("pid")) and not holder.get("released")


def manifest_fingerprint(path: Path) -> str | None:
    """The fingerprint of the suite a finished run was made with (its manifest's), if readable."""
    value = (_read_json(path / MANIFEST) or {}).get("suite_fingerprint")
    return value if isinstance(value, str) else None


def _flock(handle: Any, wait: float | None, pause: float) -> bool:
    """Take an exclusive advisory ``flock`` on an open file (released by the kernel when the
    process dies), trying every ``pause`` seconds for ``wait`` seconds at most (None: as long as
    it takes); False when the time passed."""
    import fcntl  # optional: POSIX only

    deadline = None if wait is None else time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(pause)


@contextlib.contextmanager
def placing(suite: Any, *, wait: float = 60.0) -> Iterator[None]:
    """Hold the suite's placing lock (``{output_dir}/.{suite}.placing.lock``, beside the suite's
    directory, not in it: that holds run directories only): one run at a time chooses a directory
    under ``{output_dir}/{suite}/``, takes its lock and writes its marker, so the next run finds
    it. Held for milliseconds; ``wait`` bounds the wait for it.

    Raises:
        RunDirError: when the suite's directory cannot be created.
        RunLockedError: when another run held it for ``wait`` seconds.
    """
    path = local_base(suite.output_dir) / f".{suite.name}.placing.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+b")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise RunDirError(
            f"cannot create the run directory under {path.parent}: {exc.strerror or exc}; "
            "choose a writable output directory (output_dir in the suite, or --output / --run-dir)"
        ) from None
    try:
        if not _flock(handle, wait, 0.05):
            raise RunLockedError(
                f"{path}: another run has been choosing its run directory for {wait:g} s; try "
                "again, or name a directory with --run-dir"
            )
        yield
    finally:
        handle.close()  # closing the file lets go of the lock


def write_marker(plan: RunPlan, started_at: float) -> None:
    """The run directory's marker (``run.json``: the suite, its fingerprint, the target's identity
    and when the run started), unless it has one: a run directory is found by it."""
    assert plan.run_dir is not None
    path = plan.run_dir / RUN_MARKER
    if path.exists():
        return
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    record = plan.suite_record or {}
    marker = {
        "suite": record.get("suite"),
        "fingerprint": record.get("fingerprint"),
        "identity": plan.identity,
        "started_at": started_at,
    }
    path.write_text(json.dumps(marker, indent=2), encoding="utf-8")


def check_run_dir(path: Path, identity: str, *, rescore: bool = False) -> None:
    """That ``path`` may be written by a run of ``identity``: absent or empty, or an unfinished
    run of the same target (resumed). A finished run is never rewritten.

    Raises:
        RunDirError: naming the directory and what to do instead.
    """
    if path.exists() and not path.is_dir():
        raise RunDirError(
            f"{path}: is a file, not a run directory; pass a directory (it is created) or leave "
            "--run-dir out for a new one under the suite's output_dir"
        )
    if not path.is_dir() or not any(path.iterdir()):
        return
    data = _read_json(path / RUN_MARKER)
    if (path / MANIFEST).exists() and not (
        _interrupted_after_manifest(path) and (data or {}).get("identity") == identity
    ):
        raise RunDirError(
            f"{path}: a finished run; finished runs are never rewritten. Re-score it with "
            f"--rescore {path} (that writes a new directory), or leave --run-dir out"
        )
    if rescore:
        raise RunDirError(
            f"{path}: not empty; re-scoring writes a new directory: leave --run-dir out or name "
            "a new one"
        )
    if data is None:
        raise RunDirError(
            f"{path}: not empty and not a run directory (no {RUN_MARKER}); name an empty or new "
            "directory"
        )
    if data.get("identity") != identity:
        raise RunDirError(
            f"{path}: an unfinished run of another target ({data.get('identity')!r}, this run's "
            f"is {identity!r}); resuming is for unfinished runs of the same target: name another "
            "directory"
        )


class RunLock:
    """The lock a live run holds on its directory (``run.lock``: an advisory ``flock`` that the
    kernel releases when the process dies, even by ``kill -9``, and the holder's pid and host).

    Args:
        run_dir: The run directory (created when missing).
    """

    FILE = "run.lock"

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / self.FILE
        self._handle: Any = None
        self._created_dir = False
        self.took_over: str | None = None
        """Set when the lock was left by a process that is gone: what it said."""

    def holder(self) -> dict[str, Any] | None:
        """Who holds (or last held) the lock: ``{"pid", "host", "started_at"}``."""
        return _read_json(self.path)

    def acquire(self, *, wait: float | None = 0.0) -> None:
        """Take the lock; ``wait`` seconds at most (None: as long as it takes, 0: not at all).

        Raises:
            RunLockedError: when a live run holds it, naming that run and how to wait.
        """
        try:
            if not self.run_dir.exists():
                self.run_dir.mkdir(parents=True)
                self._created_dir = True
            handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release
        except OSError as exc:
            raise RunDirError(
                f"cannot create the run directory {self.run_dir}: {exc.strerror or exc}; choose "
                "a writable output directory (output_dir in the suite, or --output / --run-dir)"
            ) from None
        if not _flock(handle, wait, 0.2):
            who = self.holder() or {}
            handle.close()
            raise RunLockedError(
                f"a live run holds this run: pid {who.get('pid', '?')} on host "
                f"{who.get('host', '?')} (started {who.get('started_at', '?')}) is writing "
                f"{self.run_dir}. Wait for it with --wait (its finished calls are then reused), or "
                "start a fresh directory that calls everything again with --new-run"
            )
        previous = self.holder()
        if previous and previous.get("pid") and not previous.get("released"):
            self.took_over = (
                f"took over the lock of pid {previous.get('pid')} on host {previous.get('host')}, "
                f"which is no longer running"
            )
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        _rewrite(
            handle, {"pid": os.getpid(), "host": socket.gethostname(), "started_at": started_at}
        )
        self._handle = handle

    @property
    def held(self) -> bool:
        """This process holds the lock."""
        return self._handle is not None

    def release(self) -> None:
        """Let go; a directory the lock created and nothing else was written to is removed."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        # Marked released (not unlinked: a run waiting on this file must not lock a stale one).
        with contextlib.suppress(OSError):
            _rewrite(handle, {**(self.holder() or {}), "released": True})
        handle.close()
        leftover = [p for p in self.run_dir.iterdir() if p.name not in (self.FILE, RUN_MARKER)]
        if not leftover and self._created_dir:
            # nothing happened in a directory this lock created (its marker at most, written when
            # the directory was taken): leave nothing behind
            with contextlib.suppress(OSError):
                (self.run_dir / RUN_MARKER).unlink(missing_ok=True)
                self.path.unlink()
                self.run_dir.rmdir()


def _rewrite(handle: Any, data: dict[str, Any]) -> None:
    """Replace what an open lock file holds with ``data`` as JSON."""
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(data))
    handle.flush()


_ANSWERS = "evaluator answers"
"""The identity of the journal file that keeps the judges' answers (beside the target's calls)."""


class JournalAnswers:
    """The answers a run's judges got (``evalpipe.llm.AnswerStore``), journaled as they come: a
    resumed run (after a budget stop, a crash, a timeout) reads them instead of paying for the
    same request again. Keyed by the request's cache key (``evalpipe.cache.request_key``); the
    run's secrets are masked before an answer is written.

    Args:
        journal: the run's journal of answers.
        scrub: masks the run's secrets.
    """

    def __init__(self, journal: Journal, scrub: Scrubber) -> None:
        self.journal = journal
        self.scrub = scrub

    def get(self, request: Any) -> tuple[dict[str, Any], dict[str, int] | None] | None:
        """The stored answer of ``request`` (its body and usage), or None."""
        text = self.journal.get(request_key(request))
        if text is None:
            return None
        try:
            data = json.loads(text)
            response, usage = data["response"], data.get("usage")
        except (ValueError, KeyError, TypeError):
            return None  # a line this module did not write: asked again
        if not isinstance(response, dict) or not (usage is None or isinstance(usage, dict)):
            return None
        return response, usage

    def put(self, request: Any, response: Any, usage: Any) -> None:
        """Journal the answer of ``request``; one that cannot be written is only logged (the
        answer is used all the same; a resumed run would ask for it again)."""
        text = json.dumps({"response": response, "usage": usage}, separators=(",", ":"))
        if self.scrub and self.scrub.found(text):
            text = self.scrub(text)
        try:
            self.journal.record(request_key(request), text)
        except OSError as exc:
            logger.warning(
                "cannot journal a judge's answer in %s: %s; a resumed run asks for it again",
                self.journal.path,
                exc.strerror or exc,
            )


@dataclass
class RunState:
    """A run's journal and server-side evaluations in this process."""

    journal: Journal | None = None
    """Finished calls on disk (None: nothing is journaled)."""
    answers: JournalAnswers | None = None
    """The judges' answers on disk (None: not kept)."""
    lock: RunLock | None = None
    """The run directory's lock, when this process holds it."""
    failure: BaseException | None = None
    """Set when the run must stop making calls (the journal cannot be written)."""
    scrubber: Scrubber = field(default_factory=Scrubber)
    """Masks the run's secrets in what it stores (transcripts, results)."""
    started_at: float = field(default_factory=time.time)
    _eval_ids: dict[str, str] = field(default_factory=dict, repr=False)
    _eval_locks: dict[str, asyncio.Lock] = field(default_factory=dict, repr=False)
    _run_slots: dict[int, asyncio.Semaphore] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, plan: RunPlan, *, marker: bool = True, lock: RunLock | bool = True) -> RunState:
        """The state of a suite run: its directory, marker and journal (an existing journal is
        resumed). Without a run directory, a state that journals nothing.

        ``lock``: take the directory's lock (True), use one the caller holds, or none (False: a
        worker writing a run another process holds).

        Raises:
            RunLockedError: when a live run holds the directory.
        """
        state = cls(scrubber=Scrubber(plan.secrets))
        if plan.run_dir is None:
            return state
        if lock is True:
            lock = RunLock(plan.run_dir)
            lock.acquire()
        state.lock = lock or None
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        if marker:
            write_marker(plan, state.started_at)
        if plan.stored is None:
            state.journal = Journal(plan.run_dir / "journal", plan.identity)
        state.answers = JournalAnswers(Journal(plan.run_dir / "journal", _ANSWERS), state.scrubber)
        return state

    def reusable(self, plan: RunPlan) -> int:
        """Calls of the plan whose transcripts the journal (or the re-scored run) already holds."""
        held = plan.stored if plan.stored is not None else self.journal
        return 0 if held is None else sum(1 for c in plan.calls if c.key in held)

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
        return self._run_slots.setdefault(provider_index, asyncio.Semaphore(max(1, size)))

    def stop(self, failure: BaseException) -> None:
        """Stop the run's calls: no call starts after this (the first failure is kept)."""
        if self.failure is None:
            self.failure = failure

    def close(self) -> None:
        """Close the journal (what it holds is on disk already) and release the lock."""
        if self.journal is not None:
            self.journal.close()
        if self.answers is not None:
            self.answers.journal.close()
        if self.lock is not None:
            self.lock.release()
            self.lock = None
