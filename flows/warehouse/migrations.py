"""The warehouse's schema version and its migrations: ``migrate(con)`` brings a file up to
the schema ``flows.warehouse.schema`` declares, in one transaction (the writer runs it on
entry, ``flows.warehouse.store.Warehouse``); ``schema_version``, ``has_table`` and
``has_records_store`` say what a file holds before anyone reads it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb

from flows.warehouse import records
from flows.warehouse import schema as ws
from flows.warehouse.transactions import transaction
from transforms.parsers.formats import all_table_docs, all_tables


def has_records_store(con: duckdb.DuckDBPyConnection) -> bool:
    """The warehouse lists records files (schema 10 and later)."""
    return has_table(con, "records_files")


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """The file holds table ``name`` (in its main schema)."""
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?",
                            [name]).fetchall()[0][0])


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    if not has_table(con, "schema_info"):
        return 0
    row = con.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchall()
    return int(row[0][0]) if row else 0


def migrate(con: duckdb.DuckDBPyConnection, migrations: list[ws.Migration] | None = None, *,
            records_root: Path | None = None) -> int:
    """Bring the schema up to date in one transaction; returns the version reached.
    ``records_root``: the records store (``Warehouse`` passes its own; else the one the
    file names, or the one beside it)."""
    steps = ws.pending_migrations(schema_version(con), migrations)
    with transaction(con):
        version = schema_version(con)
        for step in steps:
            for sql in step.statements:
                sql(con) if callable(sql) else con.execute(sql)
            version = step.version
            con.execute(ws.set_version_sql(version))
        records.adopt(con, records_root or records.root_of(con))
        derived = {name: schema for name, (schema, _) in ws.derived_tables().items()}
        more = ws.derived_sync_sql(derived, _existing_columns(con))
        for sql in more:
            con.execute(sql)
        # Views and comments (hundreds of statements) only when they would change: every
        # writer runs this, and each statement is journaled and replayed.
        documents = (ws.records_views_sql(all_tables()) + ws.views_sql()
                     + ws.comments_sql(all_tables(), all_table_docs()))
        digest = hashlib.sha256("\n".join(documents).encode()).hexdigest()
        stored = con.execute("SELECT value FROM schema_info WHERE key = 'documented_with'").fetchall()
        views = {v for (v,) in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE schema_name = 'main' AND NOT internal").fetchall()}
        if steps or more or stored != [(digest,)] or not set(ws.VIEWS) | set(all_tables()) <= views:
            for sql in documents:
                con.execute(sql)
            con.execute("INSERT OR REPLACE INTO schema_info VALUES ('documented_with', ?)", [digest])
    return version


def _existing_columns(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for table, col, dtype in con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' AND NOT internal ORDER BY table_name, column_index"
    ).fetchall():
        out.setdefault(table, {})[col] = dtype
    return out
