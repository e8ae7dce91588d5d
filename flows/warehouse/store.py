"""The DuckDB warehouse's one writer and its readers: one writer at a time, atomic publish.

- ``Warehouse(path)`` is the single writer: an exclusive ``flock`` on ``<path>.lock``
  (``wait=False`` raises ``WarehouseBusy`` naming the holder's pid). It works on a
  standby copy, and on success CHECKPOINTs it and swaps it in with ``os.replace``; then,
  still holding the lock, it replays the night's journal (``flows.warehouse.journal``)
  onto the old generation, so the next writer finds its standby level: the bytes a
  publish writes follow the night, not the history. On an exception (or a kill) the
  published file is untouched. Its schema is brought up to date on entry
  (``flows.warehouse.migrations``); what it loads, ``flows.warehouse.loading`` writes.
- Readers (``flows.warehouse.readonly.connect_readonly``) see the last published file and
  never block the writer (the swap replaces the directory entry; open readers keep theirs).
- Files are written with storage compatibility v1.5.0, so the DuckDB 1.5 shell
  (``duckdb-cli``) opens them (``storage_version_number`` <= ``MAX_STORAGE_VERSION_1_5``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import time
from pathlib import Path

import duckdb

from flows.errors import CommandError
from flows.locks import exclusive
from flows.resources import MemoryBudget
from flows.warehouse import journal, readers, records
from flows.warehouse.loading import table_counts
from flows.warehouse.migrations import migrate
from flows.warehouse.transactions import transaction
from flows.warehouse.readonly import connect_readonly  # the readers' side of opening a warehouse

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
        with transaction(self.recorder):
            self.healed_contents = records.heal(self.recorder, self.healed)

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
        def busy(holder: str) -> WarehouseBusy:
            return WarehouseBusy(f"warehouse {self.path} is being written by another process (pid {holder}, lock "
                                 f"{self.lock_path}); try again later")

        held = contextlib.ExitStack()
        held.enter_context(exclusive(self.lock_path, wait=self.wait, busy=busy))
        self._lock_file = held

    def _unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def _discard(self) -> None:
        """A failed night: the published file is untouched; the standby holds part of the
        night (marked dirty), so the next writer copies the published file instead. A writer
        that wrote nothing (a refused ``accept``: its checks read, then it gave up; the schema
check's transaction was empty) leaves the
        standby caught up with the published file, and says so in an empty journal naming
        both: the next writer replays nothing instead of copying the whole file."""
        try:
            counts = None
            if (self.con is not None and self.recorder is not None and self.recorder._pending is None
                    and not self.recorder.broken and all(step == {"tx": []} for step in self.recorder.steps)):
                try:
                    counts = table_counts(self.con, every=True)
                except duckdb.Error:  # the connection is in no state to say: the next writer copies
                    counts = None
            if self.con is not None:
                self.con.close()
                self.con = None
            shutil.rmtree(self.next_journal, ignore_errors=True)
            if counts is not None:
                with contextlib.suppress(OSError):  # the standby stays marked dirty: the next writer copies
                    with open(self.standby, "rb") as f:
                        os.fsync(f.fileno())
                    self.next_journal.mkdir(parents=True)
                    self._install_journal({"format": journal.FORMAT, "steps": [], "counts": counts})
                    _remove(self.dirty)
                    _fsync_dir(self.path.parent)
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
