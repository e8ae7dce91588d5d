"""Looking at a warehouse from outside its writer: whether a file is a warehouse at all, a
person's own read-only SQL, and whether its records store is damaged.

Used by the commands that read the published file (``sql``, ``site``, ``doctor``, the
writers' commands before they take the lock). May import the rest of ``warehouse``.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from flows.errors import CommandError
from flows.warehouse import records
from flows.warehouse.migrations import has_records_store
from flows.warehouse.store import connect_readonly, storage_version_number
from transforms.escape import plain_text


def check_warehouse(warehouse: Path) -> None:
    """Raise a ``CommandError`` (exit 1, one line) unless ``warehouse`` is a DuckDB file."""
    if not warehouse.exists():
        raise CommandError(f"no warehouse at {warehouse} (run `dumpscope run` first)")
    try:
        storage_version_number(warehouse)
    except (OSError, ValueError) as exc:
        raise CommandError(str(exc)) from None


def rows_of(con: duckdb.DuckDBPyConnection, query: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows of a person's own ``query`` (on a read-only connection: its
    statements are theirs, so it runs as written)."""
    cur = con.execute(query)
    names = [d[0] for d in cur.description] if cur.description else []
    return names, (cur.fetchall() if names else [])


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


def store_damage(con: duckdb.DuckDBPyConnection, warehouse: Path) -> str | None:
    """One line naming a damaged records file of the warehouse (and how to repair), or
    None: a view reading a file that is gone fails in DuckDB as refused or "No files
    found", which says nothing of the cause."""
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
