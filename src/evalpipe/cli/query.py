"""``evalpipe query "SQL" DIR``: SQL (DuckDB) over the run tables of every finished run under DIR,
read-only."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from evalpipe.artifacts.columns import TABLES
from evalpipe.artifacts.schema import MANIFEST_FILE
from evalpipe.cli._common import EXIT_INCOMPLETE, EXIT_OK, CommandError, consoles, exits_on, say
from evalpipe.escape import plain, terminal

if TYPE_CHECKING:
    import duckdb

__all__ = ["connect", "register"]

_EXAMPLES = """\
examples:
  evalpipe query "SELECT suite, run_name, metric, avg(score) FROM scores GROUP BY ALL" runs
  evalpipe query "SELECT run_name, row_id, repetition, metric, status FROM scores
                  WHERE status = 'error'" runs/travel-demo
  evalpipe query "SELECT run_name, agent, metric, pass_rate, pass_rate_denominator
                  FROM summary WHERE kind = 'metric' ORDER BY run_started_at" runs --format csv

The tables are runs, items, scores and summary (docs/artifacts.md lists their columns); each row
names its suite, run_name and target_version, so runs stack without a join."""


def _run_dirs(root: Path) -> list[Path]:
    """The finished runs at or under ``root`` (a directory with manifest.json), in path order."""
    if (root / MANIFEST_FILE).is_file():
        return [root]
    return sorted(path.parent for path in root.rglob(MANIFEST_FILE))


def _list(texts: list[str]) -> str:
    """A SQL list of string literals (DDL and SET take no prepared parameters)."""
    return "[" + ", ".join("'" + t.replace("'", "''") + "'" for t in texts) + "]"


def connect(root: Path) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection with a view per table over every finished run under
    ``root``: files outside ``root`` cannot be read, the configuration cannot be changed.

    Raises:
        FileNotFoundError: naming ``root`` when it holds no finished run.
    """
    import duckdb  # lazy: every command's module loads with the CLI (~28 MiB in `evalpipe run`)

    runs = _run_dirs(root)
    if not runs:
        raise FileNotFoundError(
            f"{root}: no finished run (a directory with {MANIFEST_FILE}) at or under it; pass a "
            "run directory or an output directory such as runs"
        )
    con = duckdb.connect(":memory:")
    for name, table in TABLES.items():
        files = [str(run / table.file) for run in runs if (run / table.file).is_file()]
        # union_by_name: a run of an older schema version reads with the newer columns null
        con.execute(
            f"CREATE VIEW {name} AS SELECT * FROM read_parquet({_list(files)}, union_by_name = true)"
            if files
            else f"CREATE VIEW {name} AS SELECT NULL AS run_name WHERE false"
        )
    con.execute(f"SET allowed_directories = {_list([str(root.resolve()) + '/'])}")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def _check_read_only(sql: str) -> None:
    """End the command (exit 2) unless ``sql`` is one or more SELECT statements."""
    import duckdb  # lazy: see connect

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise CommandError(f"evalpipe query: the SQL does not parse: {exc}") from exc
    if not statements:
        raise CommandError("evalpipe query: no SQL statement given")
    for index, statement in enumerate(statements, 1):
        if statement.type != duckdb.StatementType.SELECT:
            raise CommandError(
                f"evalpipe query: statement {index} is a {statement.type.name}: evalpipe query is "
                "read-only, write a SELECT (or WITH ... SELECT)"
            )


def _print(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    # To a terminal, the tables' text (untrusted) cannot move the cursor or reorder a line: JSON
    # escapes every non-ASCII character, CSV shows control and bidi characters as ``\u202e``. To
    # a file or a pipe both are written as they are.
    to_terminal = sys.stdout.isatty()
    if fmt == "json":
        records = [dict(zip(columns, row, strict=True)) for row in rows]
        text = json.dumps(records, indent=2, default=str, ensure_ascii=to_terminal)
        sys.stdout.write(text + "\n")
        return
    if fmt == "csv":
        if to_terminal:
            rows = [tuple(plain(v) if isinstance(v, str) else v for v in row) for row in rows]
        csv.writer(sys.stdout).writerows([columns, *rows])
        return
    out, _ = consoles()
    table = Table(*(terminal(c) for c in columns), show_lines=False)
    for row in rows:
        table.add_row(*("" if v is None else terminal(str(v)) for v in row))
    say(out, table)
    say(out, f"{len(rows)} row(s)")


def _query(args: argparse.Namespace) -> int:
    import duckdb  # lazy: see connect

    _check_read_only(args.sql)
    root = Path(args.dir)
    if not root.is_dir():
        raise CommandError(f"{root}: not a directory; pass a run directory or an output directory")
    with exits_on(FileNotFoundError):
        con = connect(root)
    try:
        cursor = con.execute(args.sql)
        columns = [d[0] for d in cursor.description or ()]
        rows = cursor.fetchmany(args.limit) if args.limit else cursor.fetchall()
    except (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException) as exc:
        raise CommandError(f"evalpipe query: {exc} (the tables: {', '.join(TABLES)})") from exc
    except duckdb.PermissionException as exc:
        raise CommandError(f"evalpipe query: {exc} (only the files under {root} are read)") from exc
    except duckdb.Error as exc:
        raise CommandError(f"evalpipe query: could not complete: {exc}", EXIT_INCOMPLETE) from exc
    finally:
        con.close()
    _print(columns, rows, args.format)
    return EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "query",
        help="SQL (DuckDB) over the run tables under a directory, read-only",
        description=(
            "Run SQL (DuckDB's dialect) over the Parquet tables of every finished run at or "
            "under DIR (a run directory, a suite's directory or an output directory): the "
            "views runs, items, scores and summary stack every run's table. Read-only: only "
            "SELECT statements, only files under DIR."
        ),
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sql", metavar="SQL", help="one or more SELECT statements")
    parser.add_argument("dir", metavar="DIR", help="a run directory or an output directory")
    parser.add_argument(
        "--format",
        choices=["table", "csv", "json"],
        default="table",
        help="table (default, for people), csv or json (a list of objects)",
    )
    parser.add_argument(
        "--limit", type=int, default=0, metavar="N", help="print at most N rows (default: all)"
    )
    parser.set_defaults(handler=_query)
