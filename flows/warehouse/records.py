"""Records rows as Parquet files beside the warehouse: one file per content and table.

The records tables (``hlo_instructions``, ``buffer_*``, ``inductor_*``, ``onnx_*``: a
parsed dump, row by row) are most of a warehouse's bytes, and a night replaces a tenth of
them. Inside the DuckDB file a superseded content's rows are only marked deleted; DuckDB
gives their blocks back at a later checkpoint, when merging row groups saves one, so a
new warehouse grew by each night's new records (+19 to +36 MiB a big night) before it
levelled off. Here a content's rows are a file of their own, and compacting them is an
unlink: the store grows by what a night adds and shrinks by what it drops, at once.

Layout, under ``<warehouse>.records/`` (``root_for``):
``<table>/<dump_id>.v<parser_version>.<part>.parquet`` — a table name the code declares
and a sha256 the writer computed, never a name from the bucket. The store files are hard
links of the staged Parquet files (a copy across file systems), or frames written here.

- ``records_files`` (a core table) lists the files of each content; it is the truth.
- Each records table is a view reading exactly the files listed (``refresh_views``, by
  absolute path under ``schema_info.records_root``), so a reader of one generation of
  the warehouse sees that generation's records, never a night in progress. The view a
  reader queries (``main.<table>``, with its comments) selects from
  ``records_store.<table>``, which names the files: a night that lists other files
  replaces only that inner view (a statement per table, where a replaced commented view
  needed one per column, each journaled and replayed onto the standby).
- A file no listing names any more (a content re-parsed, dropped, or compacted) is
  unlinked by ``sweep``, which the writer runs once both generations of the file are
  level (no reader can still hold the old one's list).
- A warehouse file copied or moved without its store is *adopted* by its next writer
  (``adopt``): the files are linked over from the store it names, and contents whose
  files are gone are marked compacted (a dump bringing them back is parsed again).
- A listed file found missing or unreadable (deleted, truncated, overwritten between
  nights) is *healed* by the next writer (``damaged``, ``heal``): its content's files
  are unlisted and the content marked compacted, so every view reads again; the night
  that saw the damage at discovery stages that content's dumps again (``flows.nightly``),
  which brings its records back as for any compacted content.

May import: duckdb, polars, pyarrow, ``flows.warehouse.footers``, ``schema`` and ``reads``, ``transforms``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, NamedTuple

import polars as pl
import pyarrow.parquet as pq

from flows.warehouse import footers
from flows.warehouse import schema as ws
from flows.warehouse.reads import LATEST_RUN_FIRST, registered
from transforms.escape import sql_literal
from transforms.parsers.formats import all_tables

ROOT_KEY = "records_root"
STORE_SCHEMA = ws.RECORDS_STORE_SCHEMA  # the inner views, which name the files
INNER_VIEW_DOC = ("The store files records_files lists for {table}, read by absolute path; redefined when that"
                  " listing changes. Query {table} (its columns documented) instead.")
_CONTENT = re.compile(r"[0-9a-f]{64}\Z")
_STORE_FILE = re.compile(r"[0-9a-f]{64}\.v\d+\.\d+\.parquet\Z")


def root_for(warehouse: Path | str) -> Path:
    """The records store of the warehouse file at ``warehouse`` (an absolute path)."""
    path = Path(os.path.abspath(warehouse))
    return path.with_name(path.name + ".records")


def stored_root(con) -> Path | None:
    row = con.execute("SELECT value FROM schema_info WHERE key = ?", [ROOT_KEY]).fetchall()
    return Path(row[0][0]) if row and row[0][0] else None


def missing_root(con) -> Path | None:
    """The store this warehouse's views read when it lists files and the directory is not
    there (a warehouse file copied without its records directory), else None."""
    if not con.execute("SELECT count(*) FROM records_files").fetchall()[0][0]:
        return None
    root = root_of(con)
    return None if root.is_dir() else root


def root_of(con) -> Path:
    """The store this warehouse names, else the one beside its file."""
    root = stored_root(con)
    if root is not None:
        return root
    (path,) = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    if not path:
        raise ValueError("an in-memory warehouse has no records store")
    return root_for(path)


def store_name(table: str, dump_id: str, parser_version: int, part: int) -> str:
    """A file's name relative to the store; refuses what the writer did not make."""
    if table not in all_tables():
        raise ValueError(f"not a records table: {table!r}")
    if not _CONTENT.match(dump_id or ""):
        raise ValueError(f"not a content id (sha256 hex): {dump_id!r}")
    return f"{table}/{dump_id}.v{int(parser_version)}.{int(part)}.parquet"


def place(root: Path, table: str, dump_id: str, parser_version: int,
          sources: Iterable[Path | str | pl.DataFrame]) -> list[tuple[str, int]]:
    """Put one content's rows of one table into the store: (name, rows) per non-empty part.
    Staged files are hard-linked (never written again: staging only unlinks); frames are
    written. Each file lands under its final name by one rename."""
    out: list[tuple[str, int]] = []
    for source in sources:
        if isinstance(source, pl.DataFrame):
            rows = source.height
        else:
            rows = pq.read_metadata(source).num_rows
        if not rows:
            continue
        name = store_name(table, dump_id, parser_version, len(out))
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        if isinstance(source, pl.DataFrame):
            source.write_parquet(tmp)
        else:
            try:
                os.link(source, tmp)
            except OSError:  # another file system
                shutil.copyfile(source, tmp)
        os.replace(tmp, target)
        out.append((name, rows))
    return out


def list_files(con, files: list[tuple[str, str, str, int]]) -> None:
    """Add (dump_id, table, store name, rows) rows to ``records_files``."""
    if not files:
        return
    frame = pl.DataFrame(files, schema={"dump_id": pl.String, "table_name": pl.String, "file": pl.String,
                                        "rows": pl.Int64}, orient="row")
    with registered(con, _listed_files=frame):
        con.execute("INSERT INTO records_files SELECT dump_id, table_name, file, rows FROM _listed_files")


def add_rows(con, table: str, frame: pl.DataFrame) -> int:
    """``frame`` (rows of ``table`` with their ``dump_id`` and ``parser_version``) into the
    store, a file per content, listed and viewed: for tools that make records themselves
    (the benchmarks' synthetic histories). Returns the files written."""
    root = root_of(con)
    before = listed(con)
    listing = []
    for (dump_id, version), rows in frame.group_by("dump_id", "parser_version", maintain_order=True):
        for name, n in place(root, table, dump_id, version or 0, [rows]):
            listing.append((dump_id, table, name, n))
    list_files(con, listing)
    refresh_changed(con, before)
    return len(listing)


def listed(con, tables: Iterable[str] | None = None) -> dict[str, list[str]]:
    """table -> the store names its view reads, in order."""
    out: dict[str, list[str]] = {t: [] for t in (all_tables() if tables is None else tables)}
    for table, name in con.execute("SELECT table_name, file FROM records_files ORDER BY table_name, file").fetchall():
        if table in out:
            out[table].append(name)
    return out


class FileGroup(NamedTuple):
    """Store files of one table read together by a records view: ``files`` (absolute paths, in
    order), the columns they have (``present``: name -> DuckDB type), and whether they all have
    exactly those (``same``: their footers say so), so that DuckDB binds them from one footer."""
    files: list[str]
    present: dict[str, str]
    same: bool = False


def view_sql(table: str, columns: dict[str, str], groups: list[FileGroup]) -> str:
    """The inner view of ``table`` (``records_store.<table>``): its declared ``columns`` (name ->
    DuckDB type) read from ``groups`` (``rows_sql``)."""
    return (f"CREATE OR REPLACE VIEW {ws.quote_ident(STORE_SCHEMA)}.{ws.quote_ident(table)} AS "
            f"{rows_sql(columns, groups)}")


def rows_sql(columns: dict[str, str], groups: list[FileGroup]) -> str:
    """The SELECT a records view is: ``columns`` (name -> DuckDB type) read from each group of
    files, one group after the other, NULL where no file of a group has a column; no row
    without files. A group of the same columns is read by position (``union_by_name = false``),
    bound from its first file's footer; any other by name, every footer read to bind."""
    def select(present: dict[str, str]) -> str:
        return ", ".join(f"CAST({ws.quote_ident(c) if c in present else 'NULL'} AS {t}) AS {ws.quote_ident(c)}"
                         for c, t in columns.items())

    parts = [f"SELECT {select(g.present)} FROM {_reading(g.files, g.same)}" for g in groups if g.files]
    return " UNION ALL ".join(parts) if parts else f"SELECT {select({})} LIMIT 0"


def files_sql(con, table: str, names: list[str], root: Path | None = None) -> str:
    """The rows of ``table``'s view that the store files ``names`` (listed store names, in
    the listing's order) hold, as the view reads them (same columns, types and order),
    reading only those files: a reader of a few contents' records pays for their files,
    not for every file of the table. ``root``: the store (``root_of``), when known."""
    root = root_of(con) if root is None else root
    files = [str(root / n) for n in names]
    present: dict[str, str] = {}
    if files:
        present = {name: kind for name, kind, *_ in con.execute(f"DESCRIBE SELECT * FROM {_reading(files)}").fetchall()}
    return rows_sql(ws.records_columns(all_tables()[table]), [FileGroup(files, present)])


def _reading(files: list[str], same: bool = False) -> str:
    """The table function reading ``files`` (absolute paths, as SQL literals): by name, unless
    they all have the same columns (``same``)."""
    listed_files = "[" + ", ".join(sql_literal(f) for f in files) + "]"
    return f"read_parquet({listed_files}, union_by_name = {'false' if same else 'true'})"


def _by_columns(root: Path, names: list[str], known: footers.Footers) -> list[list[str]] | None:
    """The files ``names`` (absolute paths) in groups of the same columns, each in listing
    order, the groups in the order of their first file; None when a footer cannot be read."""
    groups: dict[str, list[str]] = {}
    for name in names:
        path = root / name
        try:
            _, key, _ = known.read(path, path.stat())
        except Exception:  # noqa: BLE001 - missing, unreadable, not Parquet: every footer by name
            return None
        groups.setdefault(key, []).append(str(path))
    return list(groups.values())


def refresh_views(con, tables: Iterable[str] | None = None) -> None:
    """(Re)define the inner views of ``tables`` (every records table: None) from
    ``records_files``. The commented views readers query select from them
    (``schema.records_views_sql``, made with the other views and comments by ``migrate``).
    A table's files are read in groups of the same columns (``_by_columns``: a parser version
    writes one schema, so at a year a group is every file), each bound from one footer: a
    view by name over 1,636 files read every footer at each bind (0.2 s a table, twice a
    night, and again on the standby)."""
    declared = all_tables()
    root = root_of(con)
    known = footers.Footers(root)
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {ws.quote_ident(STORE_SCHEMA)}")
    for table, names in listed(con, tables).items():
        columns = ws.records_columns(declared[table])
        by_columns = _by_columns(root, names, known)
        groups = [FileGroup(files, {}, same) for files, same in
                  ([(g, True) for g in by_columns] if by_columns is not None else [([str(root / n) for n in names], False)])]
        for g in groups:
            if g.files:
                g.present.update((name, kind) for name, kind, *_ in
                                 con.execute(f"DESCRIBE SELECT * FROM {_reading(g.files, g.same)}").fetchall())
        con.execute(view_sql(table, columns, groups))
        # Its own comment (a replaced view loses it); the columns' are on the view readers query.
        con.execute(f"COMMENT ON VIEW {ws.quote_ident(STORE_SCHEMA)}.{ws.quote_ident(table)} IS "
                    f"{ws.quote_literal(INNER_VIEW_DOC.format(table=table))}")


def refresh_changed(con, before: dict[str, list[str]]) -> None:
    """Redefine the views whose listing differs from ``before`` (a ``listed`` of earlier)."""
    after = listed(con)
    changed = [t for t, names in after.items() if names != before.get(t)]
    if changed:
        refresh_views(con, changed)


def drop_contents(con, contents_sql: str) -> int:
    """Unlist the files of the contents ``contents_sql`` (a query of dump_id) selects;
    returns their rows. The files go at the next ``sweep``."""
    rows = con.execute(f"SELECT coalesce(sum(rows), 0) FROM records_files WHERE dump_id IN ({contents_sql})").fetchall()[0][0]
    con.execute(f"DELETE FROM records_files WHERE dump_id IN ({contents_sql})")
    return int(rows)


def sweep(root: Path, keep: set[str]) -> int:
    """Unlink the store files ``keep`` (store names) does not hold, and leftover temp
    files. Only for the writer, once no generation of the warehouse lists other files."""
    removed = 0
    if not root.is_dir():
        return 0
    for table_dir in root.iterdir():  # the tables' directories, and the footers file beside them
        if footers.is_leftover(table_dir):  # not a directory: a killed process's footers file, half written
            table_dir.unlink(missing_ok=True)
            removed += 1
            continue
        if not table_dir.is_dir() or table_dir.is_symlink() or table_dir.name not in all_tables():
            continue
        with os.scandir(table_dir) as entries:  # names only: 5,740 files at a year, a stat each with Path
            for f in entries:
                stray_tmp = f.name.startswith(".") and f.name.endswith(".tmp")
                if (stray_tmp or _STORE_FILE.match(f.name)) and f"{table_dir.name}/{f.name}" not in keep:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f.path)
                    removed += 1
    return removed


def adopt(con, root: Path) -> None:
    """Make ``root`` this warehouse's store (``schema_info.records_root``): move records
    tables of an older schema out of the file, bring over the files of a store the
    warehouse named elsewhere (a copied or moved file), and define every view."""
    root.mkdir(parents=True, exist_ok=True)
    legacy = [t for (t,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY table_name").fetchall()
        if t in all_tables()]
    for table in legacy:
        _move_out(con, root, table)
    before = stored_root(con)
    if before is not None and before != root:
        _bring_over(con, before, root)
    if before != root:
        con.execute("INSERT OR REPLACE INTO schema_info VALUES (?, ?)", [ROOT_KEY, str(root)])
    inner = {v for (v,) in con.execute("SELECT view_name FROM duckdb_views() WHERE schema_name = ? AND NOT internal",
                                        [STORE_SCHEMA]).fetchall()}
    if legacy or before != root or not set(all_tables()) <= inner:
        refresh_views(con)


def _move_out(con, root: Path, table: str) -> None:
    """A records table of schema 9 or before, as store files (one per content), then dropped."""
    staging = root / ".legacy" / table
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    versions = dict(con.execute(
        f"SELECT dump_id, max(parser_version) FROM {ws.quote_ident(table)} WHERE dump_id IS NOT NULL GROUP BY dump_id").fetchall())
    if versions:
        # Not journaled (COPY is not a write to the file): the replay finds the files in place.
        con.execute(f"COPY (SELECT * FROM {ws.quote_ident(table)} WHERE dump_id IS NOT NULL) TO {sql_literal(str(staging))} "
                    "(FORMAT parquet, PARTITION_BY (dump_id), WRITE_PARTITION_COLUMNS true, OVERWRITE true)")
    rows: list[tuple[str, str, str, int]] = []
    for dump_id, version in sorted(versions.items()):
        if not _CONTENT.match(dump_id):
            continue  # not a content the writer hashed: nothing to name it by
        parts = sorted((staging / f"dump_id={dump_id}").glob("*.parquet"))
        for name, n in place(root, table, dump_id, version or 0, parts):
            rows.append((dump_id, table, name, n))
    shutil.rmtree(staging, ignore_errors=True)
    list_files(con, rows)
    con.execute(f"DROP TABLE {ws.quote_ident(table)}")


def _bring_over(con, before: Path, root: Path) -> None:
    missing: set[str] = set()
    for dump_id, name in con.execute("SELECT dump_id, file FROM records_files").fetchall():
        target, source = root / name, before / name
        if target.exists():
            continue
        if not source.exists():
            missing.add(dump_id)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
    if not missing:
        return
    # Their rows are gone with the other store: compacted, as if by age (parsed again if they come back).
    with registered(con, _records_missing=pl.DataFrame({"dump_id": sorted(missing)})):
        con.execute("DELETE FROM records_files WHERE dump_id IN (SELECT dump_id FROM _records_missing)")
        con.execute("""INSERT INTO compacted_contents SELECT dump_id FROM _records_missing
                       WHERE dump_id NOT IN (SELECT dump_id FROM compacted_contents)""")


REPAIR_HINT = ("repair with `dumpscope doctor --warehouse {warehouse} --repair --bucket B` "
               "(or the next `dumpscope run` heals it)")


def damaged(con, root: Path | None = None) -> dict[str, str]:
    """Listed store files that are missing, unreadable or not what the listing says: store name
    -> why. Cheap: a stat of each file and its Parquet footer's row count and content (the
    ``dump_id`` of its rows) against the listing; a footer is read once per file identity
    (``flows.warehouse.footers``: in this process and across nights), so a night pays for the
    files placed since the last check. ``root``: the store to check (default: the one the
    warehouse names)."""
    root = root_of(con) if root is None else root
    out: dict[str, str] = {}
    known = footers.Footers(root)
    for name, content, rows in con.execute("SELECT file, dump_id, rows FROM records_files ORDER BY file").fetchall():
        why = _file_damage(root / name, content, rows, known)
        if why:
            out[name] = why
    known.save()
    return out


_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EBADF)  # what ``Path.is_file`` takes for "no file"


def _file_damage(path: Path, content: str, rows: int, known: footers.Footers) -> str | None:
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            return "missing"
        if st.st_size == 0:
            return "empty (0 bytes)"
        found, _, holds = known.read(path, st)
    except OSError as exc:
        if exc.errno in _MISSING:
            return "missing"
        return f"unreadable ({exc.strerror or type(exc).__name__})"
    except Exception as exc:  # noqa: BLE001 - pyarrow's ArrowInvalid and kin: not a Parquet file any more
        return f"not a readable Parquet file ({' '.join(str(exc).split())[:120]})"
    if found != rows:
        return f"cut short ({found} rows, {rows} listed)"
    if rows and holds != content:
        return (f"another content's file (its rows are of {holds[:12] or 'several or no contents'}, "
                f"the listing's of {content[:12]})")
    return None


def damaged_contents(con, files: Iterable[str]) -> list[str]:
    """The contents (dump_id) the store files ``files`` belong to."""
    names = sorted(set(files))
    if not names:
        return []
    return [d for (d,) in con.execute("SELECT DISTINCT dump_id FROM records_files WHERE list_contains(?, file) ORDER BY 1",
                                      [names]).fetchall()]


def heal(con, files: dict[str, str]) -> list[str]:
    """The writer's repair of damaged store ``files`` (name -> why, ``damaged``): every file
    of their contents is unlisted (a content is whole or gone), the contents are marked
    compacted, the repair is recorded (``store_repairs``, shown on the overview) and the
    views they touched are defined again. Returns the contents healed; a dump bringing one
    back is parsed again (``flows.warehouse.loading.with_records``)."""
    contents = damaged_contents(con, files)
    if not contents:
        return []
    before = listed(con)
    with registered(con, _records_damaged=pl.DataFrame({"dump_id": contents}),
                    _files_damaged=pl.DataFrame({"file": list(files), "reason": list(files.values())})):
        # The time is a parameter, not now(): the journal replays this on the standby, later.
        at = datetime.now(timezone.utc).replace(tzinfo=None)
        con.execute("""INSERT INTO store_repairs SELECT r.file, d.reason, r.dump_id, ?::TIMESTAMP
                       FROM records_files r JOIN _files_damaged d USING (file) ORDER BY r.file""", [at])
        con.execute("DELETE FROM records_files WHERE dump_id IN (SELECT dump_id FROM _records_damaged)")
        con.execute("""INSERT INTO compacted_contents SELECT dump_id FROM _records_damaged
                       WHERE dump_id NOT IN (SELECT dump_id FROM compacted_contents)""")
    refresh_changed(con, before)
    return contents


@dataclass(frozen=True)
class HeldRuns:
    """Which runs the records tables hold, latest first: ``whole`` (none of the run's
    contents was compacted) and ``partial`` (some were: those later runs still have are
    listed); ``without``: how many runs hold none (compacted, or loaded before records
    were kept)."""
    whole: tuple[str, ...] = ()
    partial: tuple[str, ...] = ()
    without: int = 0

    def describe(self) -> str:
        """One sentence for people (plain text: a caller escapes the run ids for its context)."""
        def span(runs: tuple[str, ...]) -> str:
            return f"run {runs[0]}" if len(runs) == 1 else f"runs {runs[-1]} to {runs[0]} ({len(runs)} runs)"

        if not self.whole and not self.partial:
            return "the records tables hold no run's rows"
        held = f"the records tables hold every row of {span(self.whole)}" if self.whole else \
            "the records tables hold no whole run"
        if self.partial:
            held += f", and of {span(self.partial)} the contents later runs still have"
        if self.without:
            held += f"; {self.without} other run{'s' if self.without > 1 else ''} none"
        return held + " ([warehouse] keep_records_runs: the last N runs' contents are kept)"


def held_runs(con) -> HeldRuns:
    """The runs whose records rows the views read (``HeldRuns``)."""
    found = con.execute(f"""
        SELECT r.run_id,
               count(d.dump_id) FILTER (WHERE d.dump_id IN (SELECT dump_id FROM compacted_contents)) AS compacted,
               count(d.dump_id) FILTER (WHERE d.dump_id IN (SELECT dump_id FROM records_files)) AS held
        FROM runs r LEFT JOIN dumps d USING (run_id)
        GROUP BY r.run_id, r.started_at {LATEST_RUN_FIRST}""").fetchall()
    return HeldRuns(whole=tuple(r for r, compacted, held in found if held and not compacted),
                    partial=tuple(r for r, compacted, held in found if held and compacted),
                    without=sum(1 for _, _, held in found if not held))


def allowed_files(con) -> list[str]:
    """Absolute paths of every file the views read (what a locked-down reader may open): only
    names of the store's own shape (``<table>/<sha256>.v<N>.<part>.parquet``, a declared table),
    whatever ``records_files`` lists: the listing of a file someone else wrote is data too."""
    root, tables = root_of(con), all_tables()
    names = (n for (n,) in con.execute("SELECT file FROM records_files ORDER BY file").fetchall())
    return [str(root / n) for n in names if _is_store_name(n, tables)]


def _is_store_name(name: object, tables) -> bool:
    table, _, file = name.partition("/") if isinstance(name, str) else ("", "", "")
    return table in tables and _STORE_FILE.match(file) is not None


__all__ = ["HeldRuns", "REPAIR_HINT", "ROOT_KEY", "add_rows", "adopt", "allowed_files", "damaged", "damaged_contents", "heal", "held_runs", "missing_root", "drop_contents", "files_sql", "list_files", "listed", "place", "refresh_changed", "refresh_views", "root_for", "STORE_SCHEMA",
           "root_of", "rows_sql", "stored_root", "store_name", "sweep", "view_sql"]
