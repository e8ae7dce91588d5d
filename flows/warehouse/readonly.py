"""A reader's connection to a warehouse file: whatever the file holds, it reaches nothing else.

Every command that reads a warehouse it does not write (``sql``, ``site``, ``check``, ``doctor``,
``incidents``, ``diff``, the notifications, a night's discovery) opens it with ``connect_readonly``.
A DuckDB file is data, but views and macros inside it are statements that run when read: a file
someone else wrote (a published snapshot fetched by ``check --warehouse URL``, a copy handed
over) could define ``runs`` as a view over ``read_text('/proc/self/environ')``. So a reader:

- runs with DuckDB's external access off and its configuration locked (``LOCKED_DOWN``): no
  statement reaches a file, a directory, the network or an extension, and no ``SET`` turns that
  back on. The one exception is a warehouse's own records store: its views may read exactly the
  files it lists, and only names of the store's own shape (``<table>/<sha256>.v<N>.<part>.parquet``
  under the store; ``flows.warehouse.records.allowed_files``), so a listing cannot name a key file;
- refuses a file where a table Dumpscope writes is a view or a macro (``NotAWarehouse``, one
  line): the tables are read by name and must be tables;
- with ``foreign=True`` (a snapshot fetched from a URL) allows no file at all, from the moment
  the file is opened: a snapshot holds its records inside it;
- writes nothing beside the file but a reader's lease (``flows.warehouse.readers``), and that
  only where a records store lies beside it for the lease to protect; DuckDB's temporary files go
  to a directory of the connection's own under the system's temporary directory (none for a
  person's SQL: it could be written there), removed with the connection.

May import: duckdb, ``flows.errors``, ``flows.resources``, ``flows.warehouse.records``, ``readers``,
``schema``, ``migrations``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from pathlib import Path

import duckdb

from flows.errors import CommandError
from flows.resources import MemoryBudget
from flows.warehouse import readers, records
from flows.warehouse import schema as ws
from flows.warehouse.migrations import has_table

# DuckDB's own guards, not a statement filter. With external access off no statement reaches a
# file, an extension, another database or the network (COPY TO, ATTACH, EXPORT, read_text,
# glob...); the locked configuration keeps SET/RESET/PRAGMA from turning that back on.
LOCKED_DOWN = {"enable_external_access": False, "autoinstall_known_extensions": False,
               "autoload_known_extensions": False, "lock_configuration": True}
# Set when the file is opened: nothing in it may load an extension while it is read.
_NO_EXTENSIONS = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
_OPEN_ATTEMPTS = 5


class NotAWarehouse(CommandError):
    """The file is not a warehouse Dumpscope wrote: a table it writes is something else (exit 1)."""


def connect_readonly(path: Path | str, *, budget: MemoryBudget | None = None, memory_limit: str | None = None,
                     foreign: bool = False, spill: bool = True) -> duckdb.DuckDBPyConnection:
    """A locked-down reader of the warehouse file at ``path`` (module docstring).

    ``budget``: DuckDB's share of the memory limit (``memory_limit``: DuckDB's setting itself,
    e.g. "256MB"); ``foreign``: a file from elsewhere (no records store, no file access at all);
    ``spill``: whether DuckDB may spill to a temporary directory of its own (off for a person's
    SQL, which could write there). The configuration cannot change once the file is open."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no warehouse at {path} (run `dumpscope run` first)")
    # A foreign file is closed to the outside from its open (DuckDB applies the options in order,
    # and refuses a temporary directory set after external access went off). The settings of
    # our own file are set once it is open: another reader in this process shares its database,
    # which DuckDB refuses to a connection asking for other options.
    config = ({"enable_external_access": False} if foreign else {}) | _NO_EXTENSIONS
    config |= budget.duckdb_config() if budget else {}
    own = {"temp_directory": _temp_directory() if spill else ""}
    if memory_limit is not None:
        own["memory_limit"] = memory_limit
    if foreign:
        config |= own
    # Taken before the open: the writer's sweep spares the files of the generation this reader
    # sees for as long as the connection lives. Only a store beside the file needs it.
    lease = readers.take(path) if not foreign and records.root_for(path).is_dir() else None
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            con = duckdb.connect(str(path), read_only=True, config=config)
        except duckdb.IOException as exc:
            # Opened the generation a publish had just replaced, as the writer took it to level
            # it: the path names the new file now.
            if "lock" not in str(exc).lower() or attempt == _OPEN_ATTEMPTS - 1:
                readers.drop(lease)
                raise
            time.sleep(0.05 * (attempt + 1))
            continue
        except BaseException:
            readers.drop(lease)
            raise
        try:
            _lock_down(con, own, foreign=foreign)
            refuse_impostors(con, path)
        except BaseException:
            con.close()
            readers.drop(lease)
            raise
        readers.hold(con, lease)
        return con
    raise AssertionError("unreachable")


def _temp_directory() -> str:
    """This process's directory for DuckDB's temporary files (one for all its readers: their
    connections share a database), removed when the process exits."""
    path = os.path.join(tempfile.gettempdir(), f"dumpscope-reader-{os.getpid()}")
    if path not in _temps:  # a forked process has a pid, and a directory, of its own
        _temps.add(path)
        atexit.register(shutil.rmtree, path, True)
    return path


_temps: set[str] = set()


def _lock_down(con: duckdb.DuckDBPyConnection, settings: dict[str, str], *, foreign: bool) -> None:
    locked, external = con.execute("SELECT current_setting('lock_configuration'), "
                                   "current_setting('enable_external_access')").fetchall()[0]
    if locked:
        # A second connection in this process to a file one is still open on shares its
        # database (and its settings): locked down by the first.
        if external:
            raise NotAWarehouse("a connection in this process left this warehouse's file access on: refused")
        return
    if not foreign:
        for name, value in settings.items():
            con.execute(f"SET {name} = ?", [value])  # names: the constant ones above
        files = records.allowed_files(con) if has_table(con, "records_files") else []
        if files:  # DuckDB checks allowed_paths by the whole path, for reads and writes
            con.execute("SET allowed_paths = ?", [files])
    for name, value in LOCKED_DOWN.items():
        con.execute(f"SET {name} = {'true' if value else 'false'}")  # names and values: the constant above


def refuse_impostors(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Raise ``NotAWarehouse`` when a table Dumpscope writes is, in this file, a view, a macro
    or anything but a table (the records tables are views over the store, or tables in a snapshot)."""
    kinds: dict[str, str] = {}
    for name, kind in con.execute(
            "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_catalog = current_database()").fetchall():
        kinds[name] = kind
    ours = (*ws.CORE_TABLES, *ws.derived_tables())
    # A macro matters only under a name no table or view holds; duckdb_functions() lists every
    # built-in function too (~15 ms an open), so it is asked only then.
    if any(name not in kinds for name in ours):
        for name, in con.execute(
                "SELECT function_name FROM duckdb_functions() WHERE database_name = current_database() "
                "AND schema_name = 'main' AND function_type IN ('macro', 'table_macro')").fetchall():
            kinds.setdefault(name, "MACRO")
    for name in ours:
        kind = kinds.get(name)
        if kind is not None and kind != "BASE TABLE":
            raise NotAWarehouse(f"{path}: {name!r} is a {kind.lower()} where Dumpscope writes a table: "
                                "not a warehouse it wrote (refused; nothing in it was read)")


__all__ = ["LOCKED_DOWN", "NotAWarehouse", "connect_readonly", "refuse_impostors"]
