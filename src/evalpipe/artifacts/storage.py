"""Publishing a finished run to any pyarrow / fsspec filesystem URI.

A run always works in a local directory: the journal is appended call by call (resume after a
crash), and Parquet row groups stream to disk. When the suite's ``output_dir`` is a remote URI
(``s3://bucket/evals``, ``abfs://container/evals``, ``gs://...``, ``memory://`` in tests), that
directory is a staging copy under ``EVALPIPE_STAGING_DIR`` (default ``.evalpipe-staging``), and the
finished files are published to ``{output_dir}/{suite}/{run}/``, ``manifest.json`` last, so a reader
that sees the manifest sees a complete run. ``file://`` URIs and plain paths are local (see
``evalpipe.runner.state.local_base``).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs  # type: ignore[import-untyped, unused-ignore]

from evalpipe.artifacts.schema import FILES, MANIFEST_FILE
from evalpipe.artifacts.writer import resolve_filesystem

__all__ = ["publish"]


def publish(run_dir: Path, output_dir: str, suite_name: str) -> str:
    """Copy a finished run's files to ``{output_dir}/{suite_name}/{run_dir.name}``; returns the URI.

    The journal and the run marker stay local (they are the staging copy's resume state); the
    Parquet files go first, then HTML reports, then ``manifest.json``.
    """
    destination = f"{output_dir.rstrip('/')}/{suite_name}/{run_dir.name}"
    fs, base = resolve_filesystem(destination)
    fs.create_dir(base, recursive=True)
    local = pafs.LocalFileSystem()
    reports = sorted(p.name for p in run_dir.glob("*.html") if p.is_file())
    for name in [*FILES.values(), *reports, MANIFEST_FILE]:
        source = run_dir / name
        if source.is_file():
            pafs.copy_files(
                str(source.resolve()),
                f"{base}/{name}",
                source_filesystem=local,
                destination_filesystem=fs,
            )
    return destination
