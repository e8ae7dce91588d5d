"""A self-contained, read-only copy of the published warehouse: one DuckDB file to hand out.

The warehouse keeps its records rows in Parquet files beside it (``flows.warehouse.records``),
read through views that name those files by absolute path: the ``.duckdb`` file alone, copied
to a laptop or a CI job, has no records. A snapshot is one file that has them: every table,
view, macro and comment of the published generation (DuckDB's ``COPY FROM DATABASE``), with
each records view replaced by a table of the rows it reads, and ``records_files`` emptied
(the snapshot lists no store files and names no store directory; its records are inside it).
``schema_info`` says when it was taken (``snapshot_of``) and, when the publishing night's
settings have ``[site] url``, where its site is read (``site_url``): a pull request's ``check``
against the snapshot links to those pages with no settings of its own (``site_url_of``, which
takes the value as a foreign file's data: only a plain http(s) URL, rebuilt from its parts).
Read it; a writer does not open it.

Taken as a reader takes the published file (``flows.warehouse.readers``): its lease keeps the
generation's records files from the writer's sweep while they are copied, and a night that
publishes meanwhile changes nothing the copy reads (the file is attached read-only, from an
in-memory connection: a read-only connection cannot attach a file to write).
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import unquote, urlsplit

import duckdb

from flows.warehouse import readers, records
from flows.warehouse.schema import quote_ident, quote_literal, records_comments_sql
from transforms.escape import sql_literal, url_path
from transforms.parsers.formats import all_table_docs, all_tables

SNAPSHOT_KEY = "snapshot_of"
SITE_URL_KEY = "site_url"
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*|[0-9a-f:.]+")  # a DNS name, an IP
_MAX_URL_CHARS = 2000


def write_snapshot(warehouse: Path, out: Path, site_url: str | None = None) -> int:
    """``out``: the snapshot of the published ``warehouse`` (replaced atomically), carrying
    ``site_url`` (``[site] url``: where the published site is read) when given. Returns its size in bytes."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    partial.unlink(missing_ok=True)
    if not warehouse.exists():
        raise FileNotFoundError(f"no warehouse at {warehouse} (run `dumpscope run` first)")
    source = "published"
    lease = readers.take(warehouse)
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH {sql_literal(str(warehouse))} AS {source} (READ_ONLY)")
        con.execute(f"ATTACH {sql_literal(str(partial))} AS snapshot")
        try:
            con.execute(f"COPY FROM DATABASE {quote_ident(source)} TO snapshot")
            views = {v for (v,) in con.execute(
                "SELECT view_name FROM duckdb_views() WHERE database_name = 'snapshot' AND schema_name = 'main' "
                "AND NOT internal").fetchall()}
            docs = all_table_docs()
            con.execute("USE snapshot")
            for table, schema in all_tables().items():
                if table not in views:
                    continue
                # A table of the rows the view reads, in the view's columns and order.
                con.execute(f"DROP VIEW {quote_ident(table)}")
                con.execute(f"CREATE TABLE {quote_ident(table)} AS SELECT * FROM {quote_ident(source)}.main.{quote_ident(table)}")
                for statement in records_comments_sql(table, schema, docs.get(table, {})):
                    con.execute(statement.replace("COMMENT ON VIEW", "COMMENT ON TABLE", 1))
            # The inner views name the store's files by absolute path: the snapshot's records are its tables.
            con.execute(f"DROP SCHEMA IF EXISTS {quote_ident(records.STORE_SCHEMA)} CASCADE")
            con.execute("DELETE FROM records_files")
            con.execute("DELETE FROM schema_info WHERE key = ?", [records.ROOT_KEY])  # it has no store
            taken = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            con.execute(f"INSERT OR REPLACE INTO schema_info VALUES ({quote_literal(SNAPSHOT_KEY)}, ?)", [taken])
            con.execute("DELETE FROM schema_info WHERE key = ?", [SITE_URL_KEY])
            if site_url:
                con.execute("INSERT INTO schema_info VALUES (?, ?)", [SITE_URL_KEY, site_url])
            con.execute("USE memory")
        finally:
            con.execute("DETACH snapshot")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        con.close()
        readers.drop(lease)
    os.replace(partial, out)
    return out.stat().st_size


def site_url_of(con: duckdb.DuckDBPyConnection) -> str | None:
    """The site URL a snapshot carries (``SITE_URL_KEY``), as the base of links a Markdown comment
    or a page may hold, or None when it carries none or none that is a plain http(s) URL. The
    file may come from anywhere: the value is rebuilt from its parts (``link_base``), never
    passed on as it is."""
    try:
        rows = con.execute("SELECT value FROM schema_info WHERE key = ?", [SITE_URL_KEY]).fetchall()
    except duckdb.Error:  # no schema_info: no URL (the warehouse's own checks say what else is wrong)
        return None
    return link_base(rows[0][0]) if rows else None


def link_base(value: object) -> str | None:
    """``value`` as the base of page links (ending in ``/``) when it is an http(s) URL with a
    host and no user, query or fragment: the scheme, the host (letters, digits, dots and
    hyphens, or an IP address), the port, and each path segment percent-encoded by
    ``transforms.escape.url_path``, so no character Markdown or HTML reads (``( ) [ ] < > "``,
    a space, a line break) survives. Anything else: None."""
    if not isinstance(value, str) or len(value) > _MAX_URL_CHARS:
        return None
    try:
        parts = urlsplit(value)
        port = parts.port
        host = (parts.hostname or "").encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        return None
    if (parts.scheme not in ("http", "https") or not _HOST.fullmatch(host) or parts.username is not None
            or parts.password is not None or parts.query or parts.fragment):
        return None
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    path = url_path(*(unquote(segment) for segment in parts.path.rstrip("/").split("/")))
    return f"{parts.scheme}://{netloc}{path}/"
