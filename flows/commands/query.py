"""``dumpscope sql``: a read-only query on the warehouse, printed as a table, CSV or JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb

from flows.commands.parse import json_value
from flows.warehouse.store import connect_readonly
from transforms.escape import plain_text

FORMATS = ("table", "csv", "json")


class QueryError(Exception):
    """The warehouse could not be opened or the query was refused; the message is one line for people."""


def run_query(warehouse: Path, query: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows of ``query``; raises QueryError."""
    try:
        con = connect_readonly(warehouse, locked=True)
    except (FileNotFoundError, duckdb.Error) as exc:
        raise QueryError(_one_line(exc)) from None
    try:
        cur = con.execute(query)
        names = [d[0] for d in cur.description] if cur.description else []
        return names, (cur.fetchall() if names else [])
    except (duckdb.PermissionException, duckdb.InvalidInputException, duckdb.IOException) as exc:
        damage = store_damage(con, warehouse)
        if damage:
            raise QueryError(damage) from None
        if isinstance(exc, duckdb.IOException):
            raise QueryError(_one_line(exc)) from None
        raise QueryError(f"refused: {_one_line(exc)} (dumpscope sql only reads the warehouse; "
                         "see README, 'Operating it safely')") from None
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from None
    finally:
        con.close()


def damaged_store(warehouse: Path) -> str | None:
    """``store_damage`` of the published warehouse (for commands that read records views)."""
    try:
        con = connect_readonly(warehouse)
    except (FileNotFoundError, duckdb.Error):
        return None
    try:
        return store_damage(con, warehouse)
    finally:
        con.close()


def store_damage(con, warehouse: Path) -> str | None:
    """One line naming a damaged records file of the warehouse (and how to repair), or
    None: a view reading a file that is gone fails in DuckDB as refused or "No files
    found", which says nothing of the cause."""
    from flows.warehouse import records
    from flows.warehouse.migrations import has_records_store

    try:
        found = records.damaged(con) if has_records_store(con) else {}
        root = records.root_of(con)
    except (duckdb.Error, OSError, ValueError):
        return None
    if not found:
        return None
    name, why = next(iter(found.items()))
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return plain_text(f"records file {root / name} is {why}{more}: "
                      + records.REPAIR_HINT.format(warehouse=warehouse))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def print_rows(names: list[str], rows: list[tuple], fmt: str) -> None:
    if fmt == "json":
        json.dump([{n: json_value(v) for n, v in zip(names, r)} for r in rows], sys.stdout, default=str, ensure_ascii=False)
        sys.stdout.write("\n")
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(names)
        w.writerows(rows)
    else:
        print_table(names, rows)


def print_table(names: list[str], rows: list[tuple], title: str | None = None, width: int | None = None,
                column_options: dict[str, dict] | None = None) -> None:
    """Rows as a rich table, every header, cell and the title as plain text: ``Text``, never
    markup, since values come from dumps and paths (``float32[s0, 128]`` is data, and
    ``[/stage]`` in a column comment is not a closing tag), and control characters shown as
    symbols (``transforms.escape.plain_text``: an escape sequence would drive the terminal).
    ``width``: the table's width when printed to a pipe (else its natural width);
    ``column_options``: rich ``add_column`` options by column name (widths, ratios)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Table(title=None if title is None else Text(plain_text(title)), title_justify="left")
    for name in names:  # wrapped on a narrow screen, never cut with "…"
        out.add_column(Text(plain_text(name)), **({"overflow": "fold"} | (column_options or {}).get(name, {})))
    for r in rows:
        out.add_row(*(Text("" if v is None else plain_text(v)) for v in r))
    console = Console()
    if not console.is_terminal:
        # Piped or redirected there is no screen to fit: rows keep their natural width
        # rather than folding values over lines at 80 columns (or the width asked for).
        console = Console(width=width or max(80, Console(width=1 << 20).measure(out).maximum))
    console.print(out)
