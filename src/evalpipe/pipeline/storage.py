"""Where a run's files end up: a local directory, or any pyarrow / fsspec filesystem URI.

A run always works in a local directory: the journal is appended call by call (resume after a
crash), and Parquet row groups stream to disk. When the suite's ``output_dir`` is a remote URI
(``s3://bucket/evals``, ``abfs://container/evals``, ``gs://...``, ``memory://`` in tests), that
directory is a staging copy under ``EVALPIPE_STAGING_DIR`` (default ``.evalpipe-staging``), and the
finished files are published to ``{output_dir}/{suite}/{run}/``, ``manifest.json`` last, so a reader
that sees the manifest sees a complete run. ``file://`` URIs and plain paths are local.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["PUBLISHED_FILES", "is_remote", "local_base", "publish"]

PUBLISHED_FILES = ("runs.parquet", "items.parquet", "scores.parquet", "summary.parquet")
"""Published first, in this order; then any report, then manifest.json."""


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


def publish(run_dir: Path, output_dir: str, suite_name: str) -> str:
    """Copy a finished run's files to ``{output_dir}/{suite_name}/{run_dir.name}``; returns the URI.

    The journal and the run marker stay local (they are the staging copy's resume state); the
    Parquet files go first, then HTML reports, then ``manifest.json``.
    """
    import pyarrow.fs as pafs

    from evalpipe.artifacts.writer import resolve_filesystem

    destination = f"{output_dir.rstrip('/')}/{suite_name}/{run_dir.name}"
    fs, base = resolve_filesystem(destination)
    fs.create_dir(base, recursive=True)
    local = pafs.LocalFileSystem()
    reports = sorted(p.name for p in run_dir.glob("*.html") if p.is_file())
    for name in [*PUBLISHED_FILES, *reports, "manifest.json"]:
        source = run_dir / name
        if source.is_file():
            pafs.copy_files(
                str(source.resolve()),
                f"{base}/{name}",
                source_filesystem=local,
                destination_filesystem=fs,
            )
    return destination
