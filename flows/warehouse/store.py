"""The DuckDB warehouse: one writer at a time, atomic publish, idempotent loads.

- ``Warehouse(path)`` is the single writer: an exclusive ``flock`` on ``<path>.lock``
  (``wait=False`` raises ``WarehouseBusy`` naming the holder's pid). It works on a
  standby copy, and on success CHECKPOINTs it and swaps it in with ``os.replace``; then,
  still holding the lock, it replays the night's journal (``flows.warehouse.journal``)
  onto the old generation, so the next writer finds its standby level: the bytes a
  publish writes follow the night, not the history. On an exception (or a kill) the
  published file is untouched.
- ``connect_readonly(path)`` for readers: they see the last published file and never
  block the writer (the swap replaces the directory entry; open readers keep theirs).
- Files are written with storage compatibility v1.5.0, so the DuckDB 1.5 shell
  (``duckdb-cli``) opens them (``storage_version_number`` <= ``MAX_STORAGE_VERSION_1_5``).
- ``load_dumps(con, batch)``: one transaction per batch, keyed by ``dump_id``; the
  records rows go into the records store beside the file (``flows.warehouse.records``),
  which the writer sweeps once both generations are level. Loading the same batch again
  changes nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import struct
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import duckdb
import polars as pl
import pyarrow as pa

from flows.errors import CommandError
from flows.resources import MemoryBudget
from flows.warehouse import journal, readers, records
from flows.warehouse import schema as ws
from transforms.parsers.formats import all_table_docs, all_tables

STORAGE_COMPATIBILITY = "v1.5.0"
MAX_STORAGE_VERSION_1_5 = 68  # the DuckDB 1.5 shell reads storage versions 64..68
DEFAULT_PATH = Path("data/warehouse.duckdb")
# Blocks of a new file (an existing file keeps its own). A checkpoint writes a table's
# changed blocks anew and frees the old ones for the next: with DuckDB's 256 KiB blocks a
# night's few thousand rows in a dozen tables left ~4 MiB of freed blocks on a new
# warehouse's second night; 64 KiB leaves about half that. Not smaller: at 16 KiB DuckDB
# stops bit-packing integer columns, and a year's file was 363 MiB instead of 318. DuckDB
# reads other block sizes since 1.1, so the 1.5 shell still opens the file.
BLOCK_SIZE = 64 * 1024


class WarehouseBusy(CommandError, RuntimeError, exit_code=3):
    """Another writer holds the warehouse lock."""


@dataclass(slots=True)
class StagedDump:
    """One dump ready to load. ``tables`` None (and ``metrics`` None): the content was
    already parsed under another path (``needs_parse`` False); records are kept, the
    dumps row and metrics are copied from that content's existing rows."""

    path: str
    run_id: str
    job: str
    size_bytes: int
    dump_id: str
    kind: str | None = None
    stage: str | None = None
    program: str | None = None
    status: str | None = None
    error: str | None = None
    parser_version: int | None = None
    source_version: str | None = None
    metrics: dict[str, float] | None = None
    # table -> parquet files and/or polars frames (with dump_id, parser_version first)
    tables: dict[str, list[Path | pl.DataFrame]] | None = None

    @classmethod
    def from_parsed(cls, parsed, *, path: str, run_id: str, job: str, size_bytes: int, dump_id: str) -> "StagedDump":
        """From a ``transforms.parse.ParsedDump`` (frames parsed with this ``dump_id``)."""
        from transforms.parsers.formats import parser_version

        s = parsed.summary
        return cls(
            path=path, run_id=run_id, job=job, size_bytes=size_bytes, dump_id=dump_id,
            kind=s.kind.value, stage=s.stage, program=s.program, status=s.status.value,
            error="\n".join(s.errors) or None, parser_version=parser_version(s.kind),
            metrics=dict(s.metrics), tables={t: [f] for t, f in parsed.tables.items()},
        )


# ---------------------------------------------------------------- connections

# For SQL typed by people (``dumpscope sql``): DuckDB's own guards, not a statement filter.
# With external access off no statement reaches a file, an extension, another database or
# the network (COPY TO, ATTACH, EXPORT, read_text('/proc/self/environ'), glob...); the
# locked configuration keeps SET/RESET/PRAGMA from turning that back on.
LOCKED_DOWN = {"enable_external_access": False, "autoinstall_known_extensions": False,
               "autoload_known_extensions": False, "lock_configuration": True}


def connect_readonly(path: Path | str, *, locked: bool = False, budget: MemoryBudget | None = None) -> duckdb.DuckDBPyConnection:
    """A reader of the published file; ``locked``: also reach nothing but it (``LOCKED_DOWN``);
    ``budget``: DuckDB's share of the memory limit."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no warehouse at {path} (run `dumpscope run` first)")
    config = budget.duckdb_config() if budget else {}
    # Taken before the open: the writer's sweep spares the files of the generation this
    # reader sees for as long as the connection lives (``flows.warehouse.readers``).
    lease = readers.take(path)
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            con = duckdb.connect(str(path), read_only=True, config=config)
            con = _lock_down(con) if locked else con
            readers.hold(con, lease)
            return con
        except duckdb.IOException as exc:
            # Opened the generation a publish had just replaced, as the writer took it to
            # level it: the path names the new file now.
            if "lock" not in str(exc).lower() or attempt == _OPEN_ATTEMPTS - 1:
                readers.drop(lease)
                raise
            time.sleep(0.05 * (attempt + 1))
        except BaseException:
            readers.drop(lease)
            raise
    raise AssertionError("unreachable")


_OPEN_ATTEMPTS = 5


def _lock_down(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """``LOCKED_DOWN``, except that the records views may read their own files (exactly
    those: DuckDB checks ``allowed_paths`` by the whole path, for reads and writes)."""
    try:
        files = records.allowed_files(con) if _has_table(con, "records_files") else []
        if files:
            con.execute("SET allowed_paths = ?", [files])
        # DuckDB always lets a connection write into its temporary directory
        # (``<warehouse>.tmp/``), even with external access off: COPY TO could land there.
        # No temporary directory: a query too big for memory fails instead of spilling.
        con.execute("SET temp_directory = ''")
        for name, value in LOCKED_DOWN.items():
            con.execute(f"SET {name} = {'true' if value else 'false'}")  # names and values: the constant above
    except BaseException:
        con.close()
        raise
    return con


def has_records_store(con: duckdb.DuckDBPyConnection) -> bool:
    """The warehouse lists records files (schema 10 and later)."""
    return _has_table(con, "records_files")


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?",
                            [name]).fetchall()[0][0])


def storage_version_number(path: Path | str) -> int:
    """Storage version in the file's main header (uint64 after the 'DUCK' magic)."""
    with open(path, "rb") as f:
        head = f.read(20)
    if head[8:12] != b"DUCK":
        raise ValueError(f"{path} is not a DuckDB file")
    return struct.unpack_from("<Q", head, 12)[0]


class Warehouse:
    """``with Warehouse(path) as con:`` — the one writer; publishes on success.

    Files beside ``path`` (``warehouse.duckdb``):

    - ``.standby``: the generation before the published one, which the writer works on;
      ``.journal/``: the statements that made the published generation out of it.
    - ``.lock``: the writer's flock; ``.standby.dirty``: a night is (or was, if it
      crashed) being written into the standby: never trust it.

    Entering: replay the journal onto the standby (it is then equal to the published
    file), or — first night, a crash, a standby a reader still holds open, a journal that
    does not match — copy the published file whole. Leaving: CHECKPOINT, seal tonight's
    journal, and swap: the standby becomes the published file (``os.replace``: readers see
    the old file or the new one, never half) and the old published file becomes the
    standby, through a hard link. Then ``_level_standby`` replays tonight's journal onto
    that standby at once (its files go; an empty journal stays), so the next writer's
    catch-up costs nothing and a night's work follows its own changes, not the last
    night's; a reader still holding the old generation leaves it to the next writer.
    Bytes written per night: the night's changes twice and its journal; never the whole file.
    """

    def __init__(self, path: Path | str, *, wait: bool = True, budget: MemoryBudget | None = None):
        self.path = Path(path)
        self.standby = self.path.with_name(self.path.name + ".standby")
        self.dirty = self.path.with_name(self.path.name + ".standby.dirty")
        self.journal_dir = self.path.with_name(self.path.name + ".journal")
        self.next_journal = self.path.with_name(self.path.name + ".journal.next")
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.records_root = records.root_for(self.path)
        self.wait = wait
        self.budget = budget or MemoryBudget()
        self._lock_file = None
        self.con: duckdb.DuckDBPyConnection | None = None
        self.recorder: journal.Recorder | None = None
        self.caught_up = ""  # how the standby was brought level: "replay", "copy" or "new"
        self.leveled = ""  # after the publish: "replay" (the standby is level), else why not
        self.level_seconds = 0.0
        self.swept = 0  # records files unlinked after the publish
        self.healed: dict[str, str] = {}  # records files found damaged on entering: store name -> why
        self.healed_contents: list[str] = []  # their contents, unlisted and marked compacted

    def _heal(self) -> None:
        """Listed records files that are missing or unreadable (deleted, cut, overwritten
        since the last night) are unlisted, their contents marked compacted
        (``records.heal``): every view reads again, and a dump bringing a content back
        parses it again. The files go at the sweep."""
        assert self.recorder is not None
        self.healed = records.damaged(self.recorder)
        if not self.healed:
            return
        self.recorder.begin()
        try:
            self.healed_contents = records.heal(self.recorder, self.healed)
            self.recorder.commit()
        except BaseException:
            self.recorder.rollback()
            raise

    def __enter__(self) -> journal.Recorder:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            legacy = self.path.with_name(self.path.name + ".next")  # the full-copy writer's leftovers
            _remove(legacy, _wal(legacy))
            shutil.rmtree(self.path.with_name(self.path.name + ".journal.spent"), ignore_errors=True)
            self.con = self._catch_up()
            self.dirty.touch()
            shutil.rmtree(self.next_journal, ignore_errors=True)
            self.recorder = journal.Recorder(self.con, self.next_journal)
            migrate(self.recorder, records_root=self.records_root)
            self._heal()
        except BaseException:
            self._discard()
            raise
        return self.recorder

    def _connect(self, path: Path) -> duckdb.DuckDBPyConnection:
        config = ({"storage_compatibility_version": STORAGE_COMPATIBILITY, "default_block_size": str(BLOCK_SIZE)}
                  | self.budget.duckdb_config(writing=True))
        return duckdb.connect(str(path), config=config)

    def _catch_up(self) -> duckdb.DuckDBPyConnection:
        """The standby, open and equal to the published file."""
        if not self.path.exists():
            _remove(self.standby, _wal(self.standby), self.dirty)
            shutil.rmtree(self.journal_dir, ignore_errors=True)
            self.caught_up = "new"
            return self._connect(self.standby)
        body = journal.read(self.journal_dir)
        if body is not None and not self.dirty.exists() and _matches(body, self.path, self.standby):
            try:
                con = self._connect(self.standby)
            except duckdb.Error:  # a reader still holds this generation open
                con = None
            if con is not None:
                try:
                    journal.replay(con, self.journal_dir, body)
                    if table_counts(con, every=True) == body["counts"]:
                        self.caught_up = "replay"
                        return con
                except journal.JournalError:
                    pass
                con.close()
        # Unlink first: a reader holding the old standby keeps its inode, the copy is new.
        _remove(self.standby, _wal(self.standby), self.dirty)
        shutil.copyfile(self.path, self.standby)
        self.caught_up = "copy"
        return self._connect(self.standby)

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._discard()
            return
        try:
            assert self.con is not None and self.recorder is not None
            self.con.execute("CHECKPOINT")
            counts = table_counts(self.con, every=True)
            listed = {name for names in records.listed(self.con).values() for name in names}
            self.con.close()
            self.con = None
            with open(self.standby, "rb") as f:
                os.fsync(f.fileno())
            try:
                journal.write(self.recorder, {"counts": counts})
                sealed = True
            except (journal.JournalError, OSError):
                sealed = False  # tomorrow copies the file whole
            self._swap(sealed, counts)
        except BaseException:
            self._discard()
            raise
        try:
            started = time.perf_counter()
            try:
                self.leveled = self._level_standby() if sealed else "no journal"
            except Exception as exc:  # noqa: BLE001 - the night is published; the next writer copies
                self.dirty.touch()
                self.leveled = f"failed ({type(exc).__name__}: {exc})"
            # Both generations list the same files now: the others can go. Not after a
            # night that had to copy the file: that may be a reader still holding an older
            # generation (it held the standby), whose files it could still read.
            # Nor while a reader of an older generation holds a lease (``readers``).
            if self.leveled == "replay" and self.caught_up != "copy" and not readers.held(self.path):
                self.swept = records.sweep(self.records_root, listed)
            self.level_seconds = time.perf_counter() - started
        finally:
            self._unlock()

    def _level_standby(self) -> str:
        """Replay tonight's journal onto the standby (the old generation) now, under the
        lock, and leave an empty journal naming both files. Returns "replay", or why the
        next writer has to (a reader holds the old generation: DuckDB refuses the writer),
        or "failed" (the standby is marked dirty: the next writer copies)."""
        body = journal.read(self.journal_dir)
        if body is None:
            return "no journal"
        if not body.get("steps"):
            return "replay"
        try:
            con = self._connect(self.standby)
        except duckdb.Error:
            return "held by a reader"
        self.dirty.touch()
        try:
            journal.replay(con, self.journal_dir, body)
            level = table_counts(con, every=True) == body["counts"]
            con.execute("CHECKPOINT")
        except (journal.JournalError, duckdb.Error):
            level = False
        finally:
            con.close()
        if not level:
            return "failed"
        with open(self.standby, "rb") as f:
            os.fsync(f.fileno())
        shutil.rmtree(self.next_journal, ignore_errors=True)
        self.next_journal.mkdir(parents=True)
        self._install_journal({"format": journal.FORMAT, "steps": [], "counts": body["counts"]})
        _remove(self.dirty)
        _fsync_dir(self.path.parent)
        return "replay"

    def _install_journal(self, body: dict) -> None:
        """``body``, with the identities both files have now, as the journal beside the
        warehouse (written in ``.journal.next``, then put in place of the one there)."""
        journal.write_json(self.next_journal / "journal.json",
                           body | {"published": _identity(self.path), "standby": _identity(self.standby)})
        spent = self.path.with_name(self.path.name + ".journal.spent")
        shutil.rmtree(spent, ignore_errors=True)
        if self.journal_dir.exists():
            os.replace(self.journal_dir, spent)  # a crash between these two: no journal, the next writer copies
        os.replace(self.next_journal, self.journal_dir)
        shutil.rmtree(spent, ignore_errors=True)

    def _swap(self, sealed: bool, counts: dict[str, int]) -> None:
        old = self.path.with_name(self.path.name + ".old")
        _remove(old)
        if self.path.exists():
            os.link(self.path, old)
        os.replace(self.standby, self.path)  # the publish
        _fsync_dir(self.path.parent)
        if old.exists():
            os.replace(old, self.standby)
        else:  # the first publish: a new warehouse is small, its standby a plain copy
            shutil.copyfile(self.path, self.standby)
            shutil.rmtree(self.next_journal, ignore_errors=True)  # nothing to replay: not its files either
            self.next_journal.mkdir(parents=True)
            journal.write_json(self.next_journal / "journal.json", {"format": journal.FORMAT, "steps": [], "counts": counts})
        _remove(self.dirty)
        shutil.rmtree(self.journal_dir, ignore_errors=True)
        if sealed:
            self._install_journal(journal.read(self.next_journal) or {})
        else:
            shutil.rmtree(self.next_journal, ignore_errors=True)
        _fsync_dir(self.path.parent)

    def _lock(self) -> None:
        f = open(self.lock_path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise WarehouseBusy(f"warehouse {self.path} is being written by another process (pid {holder}, lock {self.lock_path}); try again later") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self._lock_file = f

    def _unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.truncate(0)
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def _discard(self) -> None:
        """A failed night: the published file is untouched; the standby holds part of the
        night (marked dirty), so the next writer copies the published file instead."""
        try:
            if self.con is not None:
                self.con.close()
                self.con = None
            shutil.rmtree(self.next_journal, ignore_errors=True)
        finally:
            self._unlock()


def _identity(path: Path) -> dict:
    st = path.stat()
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _matches(body: dict, published: Path, standby: Path) -> bool:
    """The journal leads from this standby to this published file (same inodes, and the
    standby untouched since): else something else wrote one of them."""
    try:
        return body.get("published") == _identity(published) and body.get("standby") == _identity(standby)
    except OSError:
        return False


def _wal(p: Path) -> Path:
    return p.with_name(p.name + ".wal")


def _remove(*paths: Path) -> None:
    for p in paths:
        p.unlink(missing_ok=True)


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- schema

def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    if not _has_table(con, "schema_info"):
        return 0
    row = con.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchall()
    return int(row[0][0]) if row else 0


def migrate(con: duckdb.DuckDBPyConnection, migrations: list[ws.Migration] | None = None, *,
            records_root: Path | None = None) -> int:
    """Bring the schema up to date in one transaction; returns the version reached.
    ``records_root``: the records store (``Warehouse`` passes its own; else the one the
    file names, or the one beside it)."""
    steps = ws.pending_migrations(schema_version(con), migrations)
    con.begin()
    try:
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
        documents = ws.views_sql() + ws.comments_sql(all_tables(), all_table_docs())
        digest = hashlib.sha256("\n".join(documents).encode()).hexdigest()
        stored = con.execute("SELECT value FROM schema_info WHERE key = 'documented_with'").fetchall()
        views = {v for (v,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        if steps or more or stored != [(digest,)] or not set(ws.VIEWS) <= views:
            for sql in documents:
                con.execute(sql)
            con.execute("INSERT OR REPLACE INTO schema_info VALUES ('documented_with', ?)", [digest])
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return version


def _existing_columns(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for table, col, dtype in con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' AND NOT internal ORDER BY table_name, column_index"
    ).fetchall():
        out.setdefault(table, {})[col] = dtype
    return out


# ---------------------------------------------------------------- loading

def needs_parse(con: duckdb.DuckDBPyConnection, dump_id: str, kind: str, parser_version: int) -> bool:
    """False when this content was already parsed as ``kind`` with this parser version
    (under any path): then only a dumps row and metrics rows are copied."""
    return (dump_id, str(kind), parser_version) not in parsed_contents(con, [dump_id])


def parsed_contents(con: duckdb.DuckDBPyConnection, contents: list[str]) -> set[tuple[str, str, int]]:
    """(dump_id, kind, parser_version) of these contents as the warehouse parsed them
    (``needs_parse`` for many at once)."""
    return {(d, k, v) for d, k, v in con.execute(
        "SELECT DISTINCT dump_id, kind, parser_version FROM dumps WHERE list_contains(?, dump_id)",
        [sorted(set(contents))]).fetchall()}


def with_records(con: duckdb.DuckDBPyConnection, contents: list[str]) -> set[str]:
    """Of these contents, those the warehouse holds the records rows of: all but those
    compacted away (``flows.verdict.aggregate.compact_records``), which a new dump bringing them
    back has parsed again."""
    gone = {d for (d,) in con.execute("SELECT dump_id FROM compacted_contents WHERE list_contains(?, dump_id)",
                                      [sorted(set(contents))]).fetchall()}
    return set(contents) - gone


def upsert_runs(con: duckdb.DuckDBPyConnection, runs: Iterable[dict]) -> None:
    """Insert or replace runs rows (dicts with run_id, started_at, commit, tags, extra, meta_errors)."""
    import json

    rows = list(runs)
    if not rows:
        return
    arrow = pa.table({
        "run_id": [r["run_id"] for r in rows],
        "started_at": pa.array([r.get("started_at") for r in rows], pa.timestamp("us")),
        "commit": pa.array([r.get("commit") for r in rows], pa.string()),
        "tags": pa.array([list(r.get("tags") or []) for r in rows], pa.list_(pa.string())),
        "extra": pa.array([json.dumps(r.get("extra") or {}, default=str) for r in rows], pa.string()),
        "meta_errors": pa.array([list(r.get("meta_errors") or []) for r in rows], pa.list_(pa.string())),
    })
    con.register("_runs_in", arrow)
    try:
        con.execute("""INSERT OR REPLACE INTO runs (run_id, started_at, "commit", tags, extra, meta_errors)
                       SELECT run_id, started_at, "commit", tags, extra::JSON, meta_errors FROM _runs_in""")
    finally:
        con.unregister("_runs_in")


def load_dumps(con: duckdb.DuckDBPyConnection, batch: list[StagedDump]) -> dict[str, int]:
    """Load one batch in one transaction; returns rows inserted per records table.

    Parsed dumps (``tables`` set) replace every records row of their ``dump_id``;
    dumps rows are upserted by path and metrics rows replaced per path. Records of a
    content no dumps row refers to any more (a path whose bytes changed) are dropped.
    """
    parsed = [d for d in batch if d.tables is not None]
    copies = [d for d in batch if d.tables is None]
    ids = sorted({d.dump_id for d in parsed})
    paths = [d.path for d in batch]
    inserted: dict[str, int] = {}
    con.begin()
    try:
        listed = records.listed(con)
        con.register("_paths", pa.table({"path": pa.array(paths, pa.string())}))
        old_ids = [r[0] for r in con.execute("SELECT DISTINCT dump_id FROM dumps JOIN _paths USING (path) WHERE dump_id IS NOT NULL").fetchall()]
        if ids:
            con.register("_ids", pa.table({"dump_id": pa.array(ids, pa.string())}))
            records.drop_contents(con, "SELECT dump_id FROM _ids")
            con.execute("DELETE FROM compacted_contents WHERE dump_id IN (SELECT dump_id FROM _ids)")  # records again
        inserted = _place_records(con, parsed)
        _upsert_dumps(con, parsed, copies)
        _replace_metrics(con, parsed, copies)
        if ids:  # other paths of re-parsed content now hold the new version's results
            _refresh_other_paths(con)
        _drop_orphans(con, old_ids)
        records.refresh_changed(con, listed)
        con.commit()
    except BaseException:
        con.rollback()
        raise
    finally:
        for name in ("_paths", "_ids"):
            try:
                con.unregister(name)
            except Exception:
                pass
    return inserted


def _place_records(con, parsed: list[StagedDump]) -> dict[str, int]:
    """The parsed contents' records into the store, listed in ``records_files``; rows per table."""
    root = records.root_of(con)
    tables = all_tables()
    rows: list[tuple[str, str, str, int]] = []
    done: set[str] = set()
    for d in parsed:
        if d.dump_id in done:  # the same bytes under two paths: one content, one set of files
            continue
        done.add(d.dump_id)
        for table in tables:
            for name, n in records.place(root, table, d.dump_id, d.parser_version or 0, (d.tables or {}).get(table, [])):
                rows.append((d.dump_id, table, name, n))
    records.list_files(con, rows)
    inserted: dict[str, int] = {}
    for _, table, _, n in rows:
        inserted[table] = inserted.get(table, 0) + n
    return inserted


def _upsert_dumps(con, parsed: list[StagedDump], copies: list[StagedDump]) -> None:
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    rows = parsed + copies
    if not rows:
        return
    cols = ["path", "run_id", "job", "kind", "stage", "program", "size_bytes", "dump_id", "parser_version", "status", "error",
            "source_version"]
    types = {"size_bytes": pa.int64(), "parser_version": pa.int16()}
    arrow = pa.table({c: pa.array([getattr(d, c) for d in rows], types.get(c, pa.string())) for c in cols})
    con.register("_dumps_in", arrow)
    try:
        # A copy takes the fields it does not know from the content's existing row; the
        # batch's paths then replace their rows (one row per path, kept by the writer: a
        # key index would be rewritten whole at every checkpoint).
        con.execute(
            """
            CREATE OR REPLACE TEMP TABLE _dumps_new AS
            SELECT i.path, i.run_id, i.job,
                   coalesce(i.kind, e.kind) AS kind, coalesce(i.stage, e.stage) AS stage,
                   coalesce(i.program, e.program) AS program, i.size_bytes, i.dump_id,
                   coalesce(i.parser_version, e.parser_version) AS parser_version,
                   coalesce(i.status, e.status) AS status, CASE WHEN i.status IS NULL THEN e.error ELSE i.error END AS error,
                   ?::TIMESTAMP AS ingested_at, i.source_version
            FROM _dumps_in i
            LEFT JOIN (SELECT * FROM dumps WHERE path NOT IN (SELECT path FROM _dumps_in)
                         AND dump_id IN (SELECT dump_id FROM _dumps_in)  -- the batch's contents, not the history
                       QUALIFY row_number() OVER (PARTITION BY dump_id ORDER BY parser_version DESC, path) = 1) e
              ON i.status IS NULL AND e.dump_id = i.dump_id
            """,
            [now],
        )
        con.execute("DELETE FROM dumps WHERE path IN (SELECT path FROM _dumps_in)")
        con.execute("INSERT INTO dumps BY NAME SELECT * FROM _dumps_new")
        con.execute("DROP TABLE _dumps_new")
    finally:
        con.unregister("_dumps_in")


def _replace_metrics(con, parsed: list[StagedDump], copies: list[StagedDump]) -> None:
    con.execute("DELETE FROM metrics WHERE path IN (SELECT path FROM _paths)")
    rows = [(d.path, k, v) for d in parsed for k, v in sorted((d.metrics or {}).items())]
    arrow = pa.table({
        "path": pa.array([r[0] for r in rows], pa.string()),
        "metric": pa.array([r[1] for r in rows], pa.string()),
        "value": pa.array([_finite(r[2]) for r in rows], pa.float64()),
    })
    con.register("_metrics_in", arrow)
    try:
        con.execute(
            """INSERT INTO metrics SELECT d.run_id, d.job, d.program, d.kind, d.stage, m.metric, m.value, d.dump_id, d.path
               FROM _metrics_in m JOIN dumps d USING (path)"""
        )
    finally:
        con.unregister("_metrics_in")
    if copies:
        con.register("_copies", pa.table({"path": pa.array([d.path for d in copies], pa.string())}))
        try:
            _copy_metrics_to(con, "SELECT path FROM _copies")
        finally:
            con.unregister("_copies")


def _copy_metrics_to(con, target_paths_sql: str) -> None:
    """Metrics for ``target_paths`` copied from another path holding the same content."""
    con.execute(
        f"""
        INSERT INTO metrics
        SELECT d.run_id, d.job, d.program, d.kind, d.stage, m.metric, m.value, d.dump_id, d.path
        FROM dumps d
        JOIN (SELECT dump_id, min(path) AS src FROM metrics
              WHERE path NOT IN ({target_paths_sql})
                AND dump_id IN (SELECT dump_id FROM dumps WHERE path IN ({target_paths_sql}))  -- only their contents
              GROUP BY dump_id) s USING (dump_id)
        JOIN metrics m ON m.path = s.src
        WHERE d.path IN ({target_paths_sql})
        """
    )


def _refresh_other_paths(con) -> None:
    """Paths outside the batch whose content was just re-parsed take the new results."""
    con.execute(
        """
        UPDATE dumps SET parser_version = n.parser_version, status = n.status, error = n.error
        FROM (SELECT * FROM dumps WHERE path IN (SELECT path FROM _paths) AND dump_id IN (SELECT dump_id FROM _ids)) n
        WHERE dumps.dump_id = n.dump_id AND dumps.path NOT IN (SELECT path FROM _paths)
        """
    )
    stale = "SELECT path FROM dumps WHERE dump_id IN (SELECT dump_id FROM _ids) AND path NOT IN (SELECT path FROM _paths)"
    con.execute(f"DELETE FROM metrics WHERE path IN ({stale})")
    _copy_metrics_to(con, stale)


def _drop_orphans(con, old_ids: list[str]) -> None:
    if not old_ids:
        return
    con.register("_old", pa.table({"dump_id": pa.array(old_ids, pa.string())}))
    try:
        records.drop_contents(con, "SELECT dump_id FROM _old WHERE dump_id NOT IN "
                                   "(SELECT dump_id FROM dumps WHERE dump_id IS NOT NULL)")
    finally:
        con.unregister("_old")


def _finite(v: float) -> float | None:
    v = float(v)
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def table_counts(con: duckdb.DuckDBPyConnection, *, every: bool = False) -> dict[str, int]:
    """Rows per table (core and records): for summaries and tests; ``every``: every table
    the file holds (whatever version of the code made it), to check a replay."""
    if every:
        names = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY table_name").fetchall()]
    else:
        names = list(ws.CORE_TABLES) + list(all_tables()) + list(ws.derived_tables())
    return {t: con.execute(f"SELECT count(*) FROM {ws.quote_ident(t)}").fetchall()[0][0] for t in names}


__all__ = [
    "StagedDump", "Warehouse", "WarehouseBusy", "connect_readonly", "has_records_store", "load_dumps", "migrate", "needs_parse", "parsed_contents",
    "schema_version", "storage_version_number", "table_counts", "upsert_runs",
]
