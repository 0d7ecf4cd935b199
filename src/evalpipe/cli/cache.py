"""``evalpipe cache stats|clean DIR``: inspect or clean the judge and agent response cache."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evalpipe.cache import cache_clean, cache_stats
from evalpipe.cli._common import EXIT_OK, consoles

__all__ = ["register"]


def _cache(args: argparse.Namespace) -> int:
    out, _ = consoles()
    if args.cache_command == "clean":
        removed = cache_clean(args.dir)
        out.print(
            f"removed {removed} expired entr{'y' if removed == 1 else 'ies'} from {args.dir}",
            markup=False,
            highlight=False,
        )
        return EXIT_OK
    for key, value in cache_stats(args.dir).model_dump().items():
        out.print(f"{key}: {value}", markup=False, highlight=False)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``cache`` to the command line."""
    parser = sub.add_parser(
        "cache",
        help="inspect or clean the response cache",
        description="Inspect (stats) or clean (drop expired entries of) a response cache.",
    )
    parser.add_argument(
        "cache_command",
        choices=["stats", "clean"],
        help="stats: count entries, expired ones and bytes; clean: remove expired entries",
    )
    parser.add_argument("dir", type=Path, help="the cache directory")
    parser.set_defaults(handler=_cache)
