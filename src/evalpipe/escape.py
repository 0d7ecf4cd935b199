"""Untrusted text as text, one function per output language.

Agent names, row ids, queries, responses and reasons come from production traffic (recorded
datasets, OpenTelemetry traces, Foundry threads) and from models. Every sink writes them through
the function of its language, so none of them can become markup:

- :func:`markdown` for Prefect markdown artifacts (the failures list, the comparison): markdown
  and HTML specials are backslash-escaped, so ``[x](javascript:...)`` is a bracket and text, a
  backtick cannot open or close a code span, and ``<img>`` is shown, not fetched.
- :func:`table_cell` for Prefect table artifacts (the summary table): the UI renders each cell as
  markdown (measured on Prefect 3.9's UI: a cell ``[x](javascript:...)`` became a link), so a cell
  is escaped as markdown and kept on one line.
- :func:`terminal` for rich output: rich markup escaped (print it with ``markup=False`` or embed
  it in markup you write).
- HTML reports use jinja2's autoescape (``evalpipe.report``); :func:`plain` is their filter for
  control characters.

All of them first apply :func:`plain`: control characters and bidirectional overrides (which can
make text read differently than it is) are shown as ``\\uXXXX``, and a text is cut at ``limit``
characters with how long it was.
"""

from __future__ import annotations

import re

from rich.markup import escape as _rich_escape

__all__ = ["markdown", "plain", "table_cell", "terminal"]

_INVISIBLE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]"
)
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~&\"':=])")


def plain(text: object, limit: int | None = None, *, newlines: bool = True) -> str:
    """``text`` as a string with control and bidi characters made visible (``\\u202e``), cut at
    ``limit`` characters (``… (12,345 characters)``); with ``newlines=False`` line breaks become
    spaces."""
    value = "" if text is None else str(text)
    if limit is not None and len(value) > limit:
        value = f"{value[:limit]}… ({len(value):,} characters)"
    if not newlines:
        value = value.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", value)


def markdown(text: object, limit: int | None = 500) -> str:
    """``text`` for a markdown document, on one line: every markdown and HTML special escaped."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", plain(text, limit, newlines=False))


table_cell = markdown
"""``text`` for a Prefect table artifact cell, which the UI renders as markdown."""


def terminal(text: object, limit: int | None = None) -> str:
    """``text`` for rich markup: its own square brackets cannot open a style."""
    return _rich_escape(plain(text, limit))
