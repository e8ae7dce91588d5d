"""``dumpscope doctor``: check a warehouse and its records store, and repair what can be.

What is checked (``examine``), each finding one plain line:

- the file: a DuckDB file, its schema version against this code's;
- the writer's state beside it (``flows.warehouse.store.Warehouse``): the standby, a
  standby marked dirty (a crashed night: the next writer copies the published file), the
  journal and whether it still leads to the published file, a writer holding the lock;
- the records store (``flows.warehouse.records``): files listed and whether each is
  present and readable (its Parquet footer, its row count), files no listing names
  (orphans: the writer's sweep removes them), stray temporary files;
- leftovers of killed nights: ``.items-*`` work directories beside the warehouse and
  ``.tmp`` entries in staging.

``repair`` takes the writer lock: with a bucket it runs one night on it (the night heals
the store and parses damaged contents again from their dumps); without, the writer
unlists the damaged files and marks their contents compacted (dumps, metrics and derived
tables stay; their records rows come back when a dump of them is loaded again). Then
orphans and leftovers are removed. Exit status: 0 healthy or repaired, 1 problems left.
"""

from __future__ import annotations

import fcntl
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import typer

from flows.errors import CommandError
from flows.commands.signals import prefect_defaults
from flows.ingest import staging
from flows.ingest import housekeeping
from flows.verdict.compaction import leftover_work_dirs, sweep_work_dirs
from flows.warehouse import journal, records
from flows.warehouse import schema as ws
from flows.warehouse.inspect import check_warehouse
from flows.warehouse import migrations, store as wh
from transforms.escape import plain_text
from transforms.parse import ParseLimits
from transforms.parsers.formats import all_tables

_TEMP_STORE_FILE = ".tmp"


@dataclass
class Findings:
    notes: list[str] = field(default_factory=list)  # what is fine, for the record
    problems: list[str] = field(default_factory=list)  # what is wrong (repair acts on these)
    damaged: dict[str, str] = field(default_factory=dict)  # records file -> why
    orphans: list[Path] = field(default_factory=list)
    leftovers: list[Path] = field(default_factory=list)
    unusable_store: Path | None = None  # something not a directory where the records store goes

    def lines(self) -> list[str]:
        return [f"ok: {plain_text(n)}" for n in self.notes] + [f"problem: {plain_text(p)}" for p in self.problems]


def examine(warehouse: Path, staging_dir: Path | None = None) -> Findings:
    """What is right and wrong with ``warehouse`` and its store (reads only)."""
    warehouse = Path(warehouse)
    found = Findings()
    if not warehouse.exists():
        found.problems.append(f"no warehouse at {warehouse}")
        return found
    try:
        wh.storage_version_number(warehouse)
    except (OSError, ValueError) as exc:
        found.problems.append(str(exc))
        return found
    _writer_state(warehouse, found)
    try:
        con = wh.connect_readonly(warehouse)
    except duckdb.Error as exc:
        found.problems.append(f"cannot open {warehouse}: {' '.join(str(exc).split())}")
        return found
    try:
        version = migrations.schema_version(con)
        if version == ws.SCHEMA_VERSION:
            found.notes.append(f"schema version {version}")
        elif version < ws.SCHEMA_VERSION:
            found.notes.append(f"schema version {version}: the next writer migrates it to {ws.SCHEMA_VERSION}")
        else:
            found.problems.append(f"schema version {version} is newer than this code's ({ws.SCHEMA_VERSION}): upgrade dumpscope")
        if migrations.has_records_store(con):
            _records_state(con, warehouse, found)
    finally:
        con.close()
    _leftovers(warehouse, staging_dir or warehouse.with_suffix(".staging"), found)
    return found


def _writer_state(warehouse: Path, found: Findings) -> None:
    writer = wh.Warehouse(warehouse)
    if writer.lock_path.exists():
        with open(writer.lock_path, "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
            except BlockingIOError:
                found.notes.append("a writer holds the lock now (a night is running): findings may change under it")
    if writer.dirty.exists():
        found.notes.append("the standby is marked dirty (a night stopped in it): the next writer copies the published file")
    elif not writer.standby.exists():
        found.notes.append("no standby yet: the next writer copies the published file")
    else:
        body = journal.read(writer.journal_dir)
        if body is not None and wh._matches(body, writer.path, writer.standby):
            found.notes.append("journal leads from the standby to the published file: the next writer replays it")
        else:
            found.notes.append("the journal does not match the files: the next writer copies the published file")


def _records_state(con, warehouse: Path, found: Findings) -> None:
    """The store beside ``warehouse`` (the one its next writer keeps), whatever store the file
    names: a copied or restored file names its original's, which is not this warehouse's."""
    root = records.root_for(warehouse)
    named = records.stored_root(con)
    if named is not None and named != root:
        found.notes.append(f"the file names the records store {named} (it was copied or restored from there): "
                           f"checked the one beside it, {root}, which its next writer adopts")
    listed = {n for names in records.listed(con).values() for n in names}
    if root.exists() and not root.is_dir():
        found.problems.append(f"{root} is not a directory: the records store must be one (move it away; "
                              "doctor removes nothing it did not make)")
        found.unusable_store = root
        return
    if listed and not root.is_dir():
        found.problems.append(f"the records store {root} is missing ({len(listed)} files listed): its next writer "
                              "adopts the files of the store the file names, where they still are")
        return
    found.damaged = records.damaged(con, root) if listed else {}
    for name, why in found.damaged.items():
        found.problems.append(f"records file {root / name} is {why}")
    found.notes.append(f"{len(listed) - len(found.damaged)} of {len(listed)} listed records files present and readable")
    for table_dir in sorted(root.iterdir()) if root.is_dir() else ():
        if not table_dir.is_dir() or table_dir.is_symlink() or table_dir.name not in all_tables():
            continue
        for f in sorted(table_dir.iterdir()):
            stray = f.name.startswith(".") and f.name.endswith(_TEMP_STORE_FILE)
            if (stray or records._STORE_FILE.match(f.name)) and f"{table_dir.name}/{f.name}" not in listed:
                found.orphans.append(f)
    if found.orphans:
        # Normal for a while: the other generation may still list them (the sweep waits for it).
        found.notes.append(f"{len(found.orphans)} records files no listing names (the writer's sweep removes them)")


def _leftovers(warehouse: Path, staging_dir: Path, found: Findings) -> None:
    found.leftovers += leftover_work_dirs(warehouse.parent)
    tmp = staging_dir / ".tmp"
    cutoff = time.time() - _stopped_parse_seconds()
    if tmp.is_dir():
        found.leftovers += sorted(p for p in tmp.iterdir() if p.lstat().st_mtime < cutoff)
    for p in found.leftovers:
        found.problems.append(f"leftover of a stopped night: {p}")


def _stopped_parse_seconds() -> float:
    """Staging entries older than this are no running parse's (as the nightly sweeps them)."""
    return 2 * ParseLimits().max_seconds + 60


def repair(warehouse: Path, bucket: str | None = None, staging_dir: Path | None = None) -> list[str]:
    """Fix what ``examine`` finds; returns what was done, a line each. Takes the writer
    lock (waits for a running night). Nothing here deletes a listed, readable file."""
    warehouse = Path(warehouse)
    staging_dir = staging_dir or warehouse.with_suffix(".staging")
    done: list[str] = []
    found = examine(warehouse, staging_dir)
    if found.unusable_store is not None:
        raise CommandError(f"cannot repair: {found.unusable_store} is not a directory, and the records store goes "
                           "there: move it away first (doctor removes nothing it did not make)")
    if bucket is not None and found.damaged:
        from flows.nightly import run_nightly

        night = run_nightly(bucket=bucket, warehouse=warehouse, staging_dir=staging_dir, wait_for_lock=True)
        done.append(f"ran a night on {bucket}: {night.parsed} dumps parsed again or new, {night.rows_loaded} rows loaded")
    for _ in range(2):  # the second writer sweeps what the first unlisted, once both generations are level
        writer = wh.Warehouse(warehouse, wait=True)
        with writer:
            for name, why in writer.healed.items():
                done.append(f"records file {name} was {why}: unlisted, its content marked compacted")
            done += [f"removed {p}" for p in sweep_work_dirs(warehouse.parent)]
        if writer.swept:
            done.append(f"removed {writer.swept} records files no listing names")
    # Parses run outside the lock: only what is older than any parse still going on.
    if (removed := housekeeping.sweep_tmp(staging_dir, older_than_seconds=_stopped_parse_seconds())):
        done.append(f"removed {removed} leftovers in {staging_dir / '.tmp'}")
    return done


def main(*, warehouse: Path, bucket: str | None, repair_too: bool) -> int:
    """Print the findings (after repairing, with ``repair_too``); 1 when problems are left."""
    check_warehouse(warehouse)
    if repair_too:
        if bucket is not None:
            prefect_defaults()
        for line in repair(warehouse, bucket):  # BucketNotFound exits 2, WarehouseBusy 3
            typer.echo(f"repaired: {line}")
    found = examine(warehouse)
    for line in found.lines():
        typer.echo(line)
    if found.problems:
        if not repair_too:
            typer.echo(f"{len(found.problems)} problem(s): dumpscope doctor --warehouse {warehouse} --repair [--bucket B]")
        return 1
    return 0


__all__ = ["Findings", "examine", "main", "repair"]
