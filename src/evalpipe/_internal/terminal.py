"""The house style of evalpipe's terminal tables (rich): fit 80 columns, use the width there is.

Every command's tables are made here, so they look alike: no edges, one space between columns,
names that fold instead of vanishing, counts right-aligned and never wrapped.
"""

from __future__ import annotations

from rich import box
from rich.table import Table

__all__ = ["SHORT_TEXT", "count_column", "name_column", "plain_table", "shorten"]

SHORT_TEXT = 240
"""At most this many characters of a query, response or reason are printed (then ``…``); the
console cuts a line at its width besides."""


def shorten(text: str | None, limit: int = SHORT_TEXT) -> str:
    """``text`` on one line (whitespace runs as one space), at most ``limit`` characters; ``-``
    for nothing."""
    if not text:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def plain_table(title: str | None = None) -> Table:
    """A table that fits its console: no edges, one space between columns, a rule under the
    header, the title (markup: escape untrusted text in it) on the left."""
    return Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        # the box's column divider is a space: no padding, so columns are one space apart
        padding=(0, 0),
    )


def name_column(table: Table, header: str, *, min_width: int = 12) -> None:
    """A column of names: never narrower than ``min_width``, folded (not cut) when too long."""
    table.add_column(header, overflow="fold", min_width=min_width)


def count_column(table: Table, header: str) -> None:
    """A column of numbers: right-aligned, never wrapped."""
    table.add_column(header, justify="right", no_wrap=True)
