"""What the warehouse already holds of a night's objects: the reads behind discovery (against
the published file) and the writer's second look under its lock (``still_new``).

- ``published``: the listed paths the warehouse holds (size, kind, parser version, object
  version), the run ids, the contents whose records files are damaged, and the latest run's
  contents by sha256, as staged summaries (no parse needed), in one reader;
- ``up_to_date``: whether an object was loaded from this very write by the current parser;
- ``store_damaged``: a records file the published warehouse lists is missing or unreadable;
- ``still_new``: of the staged outcomes, those the warehouse the writer holds does not have yet.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from flows.ingest import staging
from flows.ingest.staging import Outcome
from flows.warehouse import records
from flows.warehouse.migrations import has_records_store
from flows.warehouse.reads import latest_run_id, registered, strings
from flows.warehouse.store import connect_readonly
from transforms.layout import BucketObject
from transforms.parsers.formats import parser_version
from transforms.records import DumpKind


class Published(NamedTuple):
    """What the published warehouse holds of a night's listing (``published``)."""
    known: dict[str, tuple]  # listed path -> (size, kind, parser version, object version) of its dump
    runs: set[str]  # every run id
    damaged: set[str]  # contents whose records files are damaged
    held: dict[str, dict]  # the latest run's contents by sha256, as staged summaries


def published(warehouse: Path, paths: list[str]) -> Published:
    """What the published warehouse holds of these paths, in one reader (an open costs ~40 ms:
    ``flows.warehouse.readonly``):

    - ``known``: dumps by path (size, kind, parser version, the object version read), only the
      listed paths (a year of history is half a million rows); the paths of contents whose
      records files are damaged (``records.damaged``) are left out, so they are staged again and
      the writer, which heals the store, loads their records anew;
    - ``runs`` and ``damaged``;
    - ``held``: the latest run's contents (whose records the warehouse keeps) by sha256, as staged
      summaries: most of a night's dumps are byte-identical to the night before's, under new
      paths, and need no parse (``staging.stage_object``)."""
    if not Path(warehouse).exists():
        return Published({}, set(), set(), {})
    with connect_readonly(warehouse) as con:
        with registered(con, _listed=strings("path", paths)):
            rows = con.execute("SELECT path, size_bytes, kind, parser_version, source_version, dump_id FROM dumps "
                               "WHERE path IN (SELECT path FROM _listed)").fetchall()
        runs = {r for (r,) in con.execute("SELECT run_id FROM runs").fetchall()}
        damaged = set(records.damaged_contents(con, records.damaged(con))) if has_records_store(con) else set()
        latest = latest_run_id(con)
        # A partial XLA side file may be partial at that path only (its siblings there told it:
        # flows.warehouse.siblings): parsed again, it is judged by tonight's siblings (such files are rare and small).
        held = con.execute("""SELECT dump_id, kind, stage, program, status, error, parser_version, path FROM dumps
                              WHERE run_id = ? AND dump_id IS NOT NULL AND status <> 'failed'
                                AND NOT (status = 'partial' AND kind IN ('xla_buffer_assignment', 'xla_memory_usage_report'))
                              QUALIFY row_number() OVER (PARTITION BY dump_id ORDER BY path) = 1""", [latest]).fetchall()
    return Published({p: rest for p, *rest, d in rows if d not in damaged}, runs, damaged,
                     {sha: staging.held_summary(*rest) for sha, *rest in held if sha not in damaged})


def up_to_date(loaded: tuple | None, obj: BucketObject) -> bool:
    """Loaded from this very write of the object (same size and store version) by the
    current parser. A rewrite in place, even of the same size, changes the version: its
    bytes are read and hashed again (and reloaded only when the hash changed)."""
    if loaded is None:
        return False
    size_then, kind, version, source_version = loaded
    current = parser_version(DumpKind(kind)) if kind else None
    return size_then == obj.size and version == current and (not obj.version or source_version == obj.version)


def store_damaged(warehouse: Path) -> bool:
    """Whether a records file the published warehouse lists is missing or unreadable: the
    writer then heals the store (``Warehouse._heal``) even on a night with nothing new, whose
    damaged contents' dumps are gone from the bucket (else discovery stages them again)."""
    if not Path(warehouse).exists():
        return False
    with connect_readonly(warehouse) as con:
        return has_records_store(con) and bool(records.damaged(con))


def still_new(con, staged: list[Outcome], healed: set[str] = frozenset()) -> list[Outcome]:
    """The outcomes whose path does not already hold the same content, parsed by the same
    parser version, in the warehouse ``con`` writes (the writer's decision, under its lock);
    and those parsed again for a content whose records the writer ``healed``."""
    if not staged:
        return []
    with registered(con, _candidates=strings("path", [o.obj.path for o in staged])):
        held = {p: (d, v) for p, d, v in con.execute(
            "SELECT path, dump_id, parser_version FROM dumps JOIN _candidates USING (path)").fetchall()}
    fresh = [o for o in staged if held.get(o.obj.path) != (o.staged.sha256, o.staged.summary["parser_version"])
             or (o.staged.sha256 in healed and not o.staged.summary.get("held"))]
    # Same bytes under a new store version (touched, or rewritten identically): note the
    # version, so that the next night does not read them again; nothing else changes.
    taken = {id(o) for o in fresh}
    touched = [(o.obj.version, o.obj.path) for o in staged if id(o) not in taken and o.obj.version]
    if touched:
        con.executemany("UPDATE dumps SET source_version = ? WHERE path = ?", touched)
    return fresh
