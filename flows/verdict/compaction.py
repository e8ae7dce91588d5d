"""What an aggregation leaves behind, cleared away: the records rows of superseded contents
(``compact_records``, once their items are stored: the figures and diffs keep what they need)
and the items work directories, one per process computing items beside the warehouse
(``work_dir``), of which those of killed nights are found and removed
(``leftover_work_dirs``, ``sweep_work_dirs``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import duckdb
import psutil

from flows.warehouse import records
from flows.warehouse.reads import LATEST_RUN_FIRST, read_with, registered, strings


def compact_records(con: duckdb.DuckDBPyConnection, keep_runs: int, also_keep: list[str] | None = None) -> int:
    """Drop the records rows of contents that no dump of the latest ``keep_runs`` runs
    holds (nor ``also_keep``: a night's contents before they are loaded) and whose items
    are stored (0: keep all). What the figures and diffs need of them is kept for ever —
    metrics and content_items — so only the raw rows of superseded dumps go (the dumps
    stay in the bucket; a content that comes back is parsed again). Returns rows dropped."""
    if keep_runs <= 0:
        return 0
    # An integer, not a parameter: LIMIT takes no parameters in a subquery.
    recent = f"SELECT run_id FROM runs {LATEST_RUN_FIRST} LIMIT {int(keep_runs)}"
    kept = (f"SELECT dump_id FROM dumps WHERE run_id IN ({recent}) AND dump_id IS NOT NULL "
            "UNION SELECT dump_id FROM _also_keep")
    # The candidates are the contents with records files (a few runs' worth), not every
    # dump of the history: at a year, searching the dumps held ~230 MiB of DuckDB's
    # cache for the rest of the night.
    held = "SELECT DISTINCT dump_id FROM records_files"
    done = f"""SELECT d.dump_id FROM dumps d JOIN dump_series s USING (path)
               WHERE d.dump_id IN ({held}) AND s.items_key IN (SELECT DISTINCT items_key FROM content_item_rows)"""
    # Chosen here, written as a list: the journal replays the list, not the search.
    compacting = read_with(con, {"_also_keep": strings("dump_id", also_keep or [])},
                           f"SELECT DISTINCT dump_id FROM ({done}) WHERE dump_id NOT IN ({kept}) ORDER BY dump_id")
    if compacting.is_empty():
        return 0
    with registered(con, _compacting=compacting):
        listed = records.listed(con)
        con.execute("INSERT INTO compacted_contents SELECT dump_id FROM _compacting")
        gone = records.drop_contents(con, "SELECT dump_id FROM _compacting")  # their files go at the sweep
        records.refresh_changed(con, listed)
    return gone


WORK_PREFIX = ".items-"  # + the pid of the process computing them: a killed night's are known by it


def work_dir(con) -> Path:
    """A directory beside the warehouse for the items batches (Dask workers read it),
    named for this process (``sweep_work_dirs`` removes it if the process is killed)."""
    path = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()[0][0]
    base = Path(path).parent if path else Path(tempfile.gettempdir())
    return Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-", dir=base))


def leftover_work_dirs(base: Path) -> list[Path]:
    """The items work directories in ``base`` (beside a warehouse) that a killed night left:
    a directory whose process is alive is not one (a concurrent night's, another warehouse's
    in the same directory, this process's own). A name without a pid is an older version's:
    its night is over."""
    found = []
    for d in sorted(Path(base).glob(f"{WORK_PREFIX}*")):
        pid = d.name.removeprefix(WORK_PREFIX).partition("-")[0]
        if d.is_dir() and not d.is_symlink() and not (pid.isdigit() and psutil.pid_exists(int(pid))):
            found.append(d)
    return found


def sweep_work_dirs(base: Path) -> list[Path]:
    """Remove ``leftover_work_dirs(base)`` (a 2 GB module's were ~290 MB each); returns them.
    A night calls it as it starts, ``dumpscope doctor --repair`` too."""
    removed = leftover_work_dirs(base)
    for d in removed:
        shutil.rmtree(d, ignore_errors=True)
    return removed
