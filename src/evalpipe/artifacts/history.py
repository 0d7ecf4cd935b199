"""Runs over time: the finished runs under an output directory, newest first, and a suite's blessed
baseline.

A pipeline run lives at ``{output_dir}/{suite}/{run_name}/``; a suite's baseline is named by
``{output_dir}/{suite}/baseline.json`` (``{"run_name", "blessed_at"}``), written by :func:`bless`.
Finished runs are never rewritten, so blessing one writes beside it, not in it. Everything here
reads a local directory and a filesystem URI (``s3://``, ``memory://``, ...) the same way, through
the readers' ``resolve_filesystem``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]

from evalpipe.artifacts.reader import manifest_part, read_manifest, read_summary
from evalpipe.artifacts.schema import MANIFEST_FILE, ArtifactError
from evalpipe.artifacts.writer import resolve_filesystem
from evalpipe.tally import SummaryRow

__all__ = [
    "BASELINE_FILE",
    "DamagedRun",
    "RunInfo",
    "baseline_of",
    "bless",
    "find_runs",
    "join",
    "parent_of",
]

BASELINE_FILE = "baseline.json"
"""The file in a suite's directory that names its blessed run."""


def join(base: str, *parts: str) -> str:
    """A path or URI with ``parts`` appended, ``/``-separated (local paths stay local)."""
    if "://" in base:
        return "/".join([base.rstrip("/"), *parts])
    return os.path.join(base, *parts)


def parent_of(location: str) -> str:
    """The directory holding a run directory (its suite's directory), path or URI."""
    if "://" in location:
        return location.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(location))


def _name(location: str) -> str:
    return (
        location.rstrip("/").rsplit("/", 1)[-1]
        if "://" in location
        else os.path.basename(os.path.abspath(location))
    )


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One finished run, as ``evalpipe history`` lists it (read from its manifest and summary)."""

    suite: str
    """The suite's name (the manifest's, else the directory's)."""
    run_name: str
    """The run directory's name."""
    location: str
    """The run directory: a path or a URI."""
    started_at: datetime | None
    """When the run started (UTC); None when its manifest does not say."""
    target_version: str
    """The suite's ``target_version`` for the run."""
    calls: dict[str, Any]
    """The manifest's ``calls`` (total, made, reused, recorded, errored, ...)."""
    gate: bool | None
    """The gate held (True), failed (False), or the suite has none (None)."""
    baseline: bool = False
    """This run is its suite's blessed baseline."""
    rows: list[SummaryRow] = field(default_factory=list)
    """summary.parquet's rows: pass rates per provider, agent and metric."""
    manifest: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The run's manifest.json."""

    def as_dict(self) -> dict[str, Any]:
        """The run as JSON-ready data (``evalpipe history --format json``)."""
        return {
            "suite": self.suite,
            "run_name": self.run_name,
            "location": self.location,
            "started_at": None if self.started_at is None else self.started_at.isoformat(),
            "target_version": self.target_version,
            "calls": self.calls,
            "gate": None if self.gate is None else ("passed" if self.gate else "failed"),
            "baseline": self.baseline,
            "pass_rates": [{k: getattr(r, k) for k in _PASS_RATE_KEYS} for r in self.rows],
        }

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(str(t) for t in manifest_part(self.manifest, "suite").get("tags") or ())

    @property
    def stamp(self) -> str:
        """What changes when the run directory is written again (its manifest's end time)."""
        finished = manifest_part(self.manifest, "timings").get("finished_at")
        return str(self.manifest.get("ended_at") or finished)

    @property
    def flow_run_id(self) -> str | None:
        """The Prefect flow run that made the run (the manifest's ``flow_run_id``), if recorded."""
        found = self.manifest.get("flow_run_id")
        return str(found) if found else None

    @property
    def evaluators(self) -> str:
        """The run's evaluator set: its manifest's evaluator specs as canonical JSON (runs with
        the same set are comparable on a trend)."""
        return json.dumps(self.manifest.get("evaluator_specs"), sort_keys=True)

    @property
    def key(self) -> str:
        """``suite/run_name``: how the view's compare page names a run."""
        return f"{self.suite}/{self.run_name}"

    @property
    def results(self) -> list[SummaryRow]:
        """summary.parquet's result rows (one per provider and agent)."""
        return [r for r in self.rows if r.kind == "result"]


_PASS_RATE_KEYS = (
    "provider",
    "agent",
    "metric",
    "n",
    "passed",
    "failed",
    "errored",
    "not_applicable",
    "pass_rate",
    "pass_rate_denominator",
)
"""What ``evalpipe history --format json`` shows of each summary row."""


@dataclass(frozen=True, slots=True)
class DamagedRun:
    """A run directory under an output directory whose files cannot be read (a manifest.json
    that is not a JSON object of UTF-8 text, a truncated summary.parquet): listed as damaged,
    never shown as a run."""

    suite: str
    """The suite's directory name."""
    run_name: str
    """The run directory's name (``baseline.json`` for a suite's unreadable baseline file)."""
    location: str
    """The run directory: a path or a URI."""
    problem: str
    """What could not be read, naming the file (the reader's error)."""


def _started(manifest: dict[str, Any]) -> datetime | None:
    text = manifest.get("started_at") or manifest_part(manifest, "timings").get("writer_opened_at")
    if not isinstance(text, str):
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _dirs(fs: Any, path: str) -> list[str]:
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    except (FileNotFoundError, OSError):
        return []
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)


def _is_file(fs: Any, path: str) -> bool:
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


def baseline_of(suite_dir: str, *, filesystem: Any = None) -> str | None:
    """The run name a suite directory's ``baseline.json`` names, or None (nothing blessed).

    Raises:
        ArtifactError: when the file is there but not a baseline.json evalpipe wrote.
    """
    fs, path = resolve_filesystem(suite_dir, filesystem)
    file = f"{path}/{BASELINE_FILE}"
    if not _is_file(fs, file):
        return None
    with fs.open_input_stream(file) as stream:
        text = stream.read().decode()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("run_name"), str):
        raise ArtifactError(
            f"{join(suite_dir, BASELINE_FILE)}: not a baseline file (expected "
            '{"run_name": ..., "blessed_at": ...}); bless a run again with `evalpipe bless RUN_DIR`'
        )
    return str(data["run_name"])


def bless(run_dir: str, *, filesystem: Any = None) -> str:
    """Make a finished run its suite's baseline: ``baseline.json`` beside it names it (a blessed
    run before it is replaced). Returns the baseline file's path or URI.

    Raises:
        ArtifactError: when ``run_dir`` is not a finished run directory.
    """
    read_manifest(run_dir, filesystem=filesystem)
    suite_dir = parent_of(run_dir)
    fs, path = resolve_filesystem(suite_dir, filesystem)
    data = {"run_name": _name(run_dir), "blessed_at": datetime.now(UTC).isoformat()}
    with fs.open_output_stream(f"{path}/{BASELINE_FILE}") as out:
        out.write((json.dumps(data, indent=2) + "\n").encode())
    return join(suite_dir, BASELINE_FILE)


def _suite_runs(
    location: str, fs: Any, path: str, baseline: str | None, damaged: list[DamagedRun] | None
) -> list[RunInfo]:
    runs = []
    for name in _dirs(fs, path):
        if not _is_file(fs, f"{path}/{name}/{MANIFEST_FILE}"):
            continue  # unfinished, or not a run
        where = join(location, name)
        try:
            manifest = read_manifest(f"{path}/{name}", filesystem=fs)
            rows = read_summary(f"{path}/{name}", filesystem=fs)
        except ArtifactError as exc:
            if damaged is None:
                raise
            damaged.append(DamagedRun(_name(location), name, where, str(exc)))
            continue
        suite = manifest_part(manifest, "suite")
        gate = manifest.get("gate")
        runs.append(
            RunInfo(
                suite=str(suite.get("name") or _name(location)),
                run_name=str(manifest.get("run_name") or name),
                location=where,
                started_at=_started(manifest),
                target_version=str(suite.get("target_version") or ""),
                calls=dict(manifest_part(manifest, "calls")),
                gate=bool(gate.get("passed")) if isinstance(gate, dict) else None,
                baseline=name == baseline,
                rows=rows,
                manifest=manifest,
            )
        )
    return runs


def find_runs(
    output_dir: str,
    *,
    suite: str | None = None,
    filesystem: Any = None,
    damaged: list[DamagedRun] | None = None,
) -> list[RunInfo]:
    """The finished runs under ``output_dir``, newest first.

    ``output_dir`` is a suite run's output directory (``{output_dir}/{suite}/{run}/``) or one
    suite's directory (``{output_dir}/{suite}``); ``suite`` keeps that suite's runs only.
    ``damaged``: a list that gets each run whose manifest.json or summary.parquet cannot be read
    (and a suite's unreadable baseline.json), instead of the error being raised: one damaged run
    does not hide the others.

    Raises:
        ArtifactError: when ``output_dir`` does not exist, or (without ``damaged``) a run's files
            cannot be read.
    """
    fs, path = resolve_filesystem(output_dir, filesystem)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        raise ArtifactError(
            f"{output_dir}: no such directory; pass the output directory runs are written to "
            "(a suite's output_dir, `runs` by default)"
        )
    runs: list[RunInfo] = []
    suite_dirs = [(output_dir, path)] + [
        (join(output_dir, name), f"{path}/{name}") for name in _dirs(fs, path)
    ]
    found: list[DamagedRun] = []
    for location, suite_path in suite_dirs:
        try:
            baseline = baseline_of(suite_path, filesystem=fs)
        except ArtifactError as exc:
            if damaged is None:
                raise
            found.append(DamagedRun(_name(location), BASELINE_FILE, location, str(exc)))
            baseline = None
        runs.extend(
            _suite_runs(location, fs, suite_path, baseline, None if damaged is None else found)
        )
    if suite is not None:
        runs = [r for r in runs if r.suite == suite]
        found = [d for d in found if d.suite == suite]
    if damaged is not None:
        damaged.extend(found)
    oldest = datetime.min.replace(tzinfo=UTC)
    return sorted(runs, key=lambda r: (r.started_at or oldest, r.run_name), reverse=True)
