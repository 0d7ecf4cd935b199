"""``evalpipe cache stats|clean DIR``: inspect or clean the judge and agent response cache."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any

from evalpipe._internal.terminal import name_column, plain_table
from evalpipe.cache import cache_clean, cache_stats
from evalpipe.cli._common import EXIT_OK, consoles, say

__all__ = ["register"]


def _cache(args: argparse.Namespace) -> int:
    out, _ = consoles()
    if args.cache_command == "clean":
        removed = cache_clean(args.dir)
        say(out, f"removed {removed} expired entr{'y' if removed == 1 else 'ies'} from {args.dir}")
        return EXIT_OK
    stats = cache_stats(args.dir)
    say(out, f"response cache {stats.directory}", style="bold")
    table = plain_table()
    name_column(table, "", min_width=10)
    table.add_column("", overflow="fold")
    table.show_header = False
    for key, value in stats.model_dump(exclude={"directory"}).items():
        if key == "bytes":
            value = f"{value:,} bytes"
        elif isinstance(value, datetime):
            value = value.isoformat(timespec="seconds")
        table.add_row(key, "-" if value is None else str(value))
    out.print(table)
    return EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "cache",
        help="inspect or clean the response cache",
        description="Inspect (stats) or clean (drop expired entries of) a response cache.",
    )
    parser.add_argument(
        "cache_command",
        choices=["stats", "clean"],
        help="stats: count the entries, the expired and unreadable ones, their bytes and the "
        "oldest and newest entry; clean: remove the expired entries (nothing else)",
    )
    parser.add_argument(
        "dir",
        type=Path,
        metavar="DIR",
        help="the cache directory (a judge's or target's `cache: {directory: ...}` in a suite)",
    )
    parser.set_defaults(handler=_cache)
