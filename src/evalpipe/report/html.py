"""Render a run's report (and a comparison) as one self-contained HTML file.

jinja2 with autoescaping on for every template: agent, user and judge text is always escaped
(no template marks data ``|safe``), and every printed string first goes through
:func:`evalpipe.escape.plain` (control and bidi characters shown as ``\\uXXXX``). Plots are inline SVG drawn by the templates from numbers
computed here; the file has no script and loads nothing at view time.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup

from evalpipe._internal.files import atomic_path
from evalpipe.escape import plain
from evalpipe.report.data import RunReport, load_report_data
from evalpipe.report.stats import BOOTSTRAP_RESAMPLES

if TYPE_CHECKING:  # calibration reads run directories through report.data: no import back up
    from evalpipe.calibration import Calibration

__all__ = ["environment", "render_report", "report_context", "write_report"]


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}``: data strings with invisible characters made visible."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return plain(value)
    return value


@cache
def environment() -> jinja2.Environment:
    """The template environment: package templates, autoescape on, undefined names an error."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("evalpipe.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
    )


def package_version() -> str:
    """The installed evalpipe version (written into every page)."""
    try:
        return metadata.version("evalpipe")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def report_context(report: RunReport, calibration: Sequence[Calibration] = ()) -> dict[str, Any]:
    """What report.html.j2 renders from (``evalpipe view`` renders its run page from it too);
    ``calibration``: the judges' agreement with human labels (``evalpipe calibrate``'s file)."""
    bars: dict[str, list[tuple[str, Any]]] = {}
    for row in report.results:
        bars.setdefault(row.provider, []).append((row.agent, row.pass_rate))
    git = report.manifest.get("git")
    return {
        "r": report,
        "pass_bars": list(bars.items()),
        "git": git if isinstance(git, dict) else None,
        "resamples": BOOTSTRAP_RESAMPLES,
        "version": package_version(),
        "calibration": list(calibration),
    }


def render_report(report: RunReport, calibration: Sequence[Calibration] = ()) -> str:
    """The HTML of a run's report (with a judge-agreement panel when ``calibration`` is given)."""
    return (
        environment().get_template("report.html.j2").render(**report_context(report, calibration))
    )


def write_report(
    run_dir: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    *,
    max_items: int = 200,
    filesystem: Any = None,
    calibration: Sequence[Calibration] = (),
) -> Path:
    """Write the HTML report of a finished run directory; returns the file written.

    Args:
        run_dir: the run directory.
        output: the HTML file (default: ``report.html`` inside a local run directory).
        max_items: items in the drill-down, those not passed first; the report says how many
            were omitted.
        filesystem: a pyarrow or fsspec filesystem holding the run (the report is written locally).
        calibration: the judges' agreement with human labels, shown beside their pass rates
            (``read_calibration(path).calibrations``).

    Raises:
        ArtifactError: the directory is not a finished run.
        SchemaVersionError: the run was written by a newer evalpipe.
    """
    report = load_report_data(run_dir, max_items=max_items, filesystem=filesystem)
    path = Path(output) if output is not None else Path(run_dir) / "report.html"
    html = render_report(report, calibration)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(html, encoding="utf-8")
    return path
