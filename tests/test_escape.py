"""One escaping function per output language: what each makes of hostile text."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.text import Text

from evalpipe.escape import markdown, plain, table_cell, terminal


def test_plain_shows_control_and_bidi_characters() -> None:
    """ESC, NUL, bidi overrides and zero-width characters become visible \\uXXXX."""
    assert plain("a\x1b[31mb\x00c") == "a\\u001b[31mb\\u0000c"
    assert plain("x\u202eevil\u2066") == "x\\u202eevil\\u2066"
    assert plain("tab\tline\nnext") == "tab\tline\nnext"
    assert plain("a\nb", newlines=False) == "a b"


def test_plain_cuts_long_text_and_says_how_long_it_was() -> None:
    """A limit cuts the text and appends its length."""
    assert plain("x" * 10, 4) == "xxxx… (10 characters)"
    assert plain(None) == ""


@pytest.mark.parametrize(
    "text",
    [
        "[x](javascript:alert(7))",
        "![p](https://evil.example/p.png)",
        "x` [click](javascript:alert(4)) `y",
        "<img src=x onerror=alert(1)>",
        "a | b",
        "# heading",
        "**bold** _it_ ~~s~~",
        "<https://evil.example>",
        "&lt;b&gt;",
    ],
)
def test_markdown_escapes_every_special(text: str) -> None:
    """No markdown or HTML special survives unescaped, and the text stays on one line."""
    out = markdown(text + "\nsecond line")
    specials = set("\\`*_{}[]()#+-.!|<>~&")
    for i, ch in enumerate(out):
        if ch in specials and (i == 0 or out[i - 1] != "\\"):
            # an unescaped special must itself be an escaping backslash
            assert ch == "\\"
            assert i + 1 < len(out)
            assert out[i + 1] in specials | {'"', "'", ":", "="}
    assert "\n" not in out


def test_markdown_does_not_double_escape_quotes() -> None:
    """Quotes are backslashed (shown as quotes), never turned into entities."""
    assert markdown('it\'s "q"') == 'it\\\'s \\"q\\"'
    assert "&#x27;" not in markdown("it's")


def test_table_cell_is_one_line_of_escaped_markdown() -> None:
    """A cell is markdown-escaped (the Prefect UI renders cells as markdown), on one line."""
    assert table_cell("<img src=x> & [a](b)\nx") == "\\<img src\\=x\\> \\& \\[a\\]\\(b\\) x"


def test_terminal_keeps_rich_markup_and_ansi_as_text() -> None:
    """Rich markup in data prints literally; an ANSI escape in data is shown, not sent."""
    console = Console(record=True, width=120, force_terminal=True)
    console.print(f"[bold]{terminal('[link=https://evil.example]x[/link] [red]r')}[/bold]")
    text = console.export_text()
    assert "[link=https://evil.example]x[/link] [red]r" in text
    assert "\x1b" not in terminal("\x1b[2J")
    assert Text.from_markup(terminal("[/]")).plain == "[/]"
