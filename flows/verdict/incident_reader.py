"""The verdict of a run, read from the warehouse: its incidents and their counts.

Every status and count Dumpscope shows (the summary, ``dumpscope incidents``, the exit
status, the notifications, the site) comes from the view ``incident_status``
(``flows.warehouse.schema.VERDICT_VIEWS``), through ``incidents_at(run)`` and
``run_verdicts``, read here.
"""

from __future__ import annotations

import duckdb
import polars as pl

from flows.errors import CommandError
from flows.warehouse.reads import frame_of, latest_run_id
from flows.warehouse import schema as ws
from transforms.trends.incident_walk import STATUSES
from transforms.trends.night_report import counts  # flows.publish.report reads the counts from here

# --status of ``dumpscope incidents``: the incident statuses (``STATUSES``, one vocabulary) each choice
# shows: its own, but open shows new ones too, and improvements those in effect (kinds: see ``KINDS_OF``).
SHOWN_BY_STATUS = {s: (s,) for s in STATUSES} | {"open": ("new", "open"), "improvements": ("new", "open")}
KINDS_OF = {"improvements": ("improvement",), "lost": ("improvement",)}


class OlderWarehouse(CommandError):
    """The warehouse's schema is older than this Dumpscope's: no writer has opened it since."""


def check_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Raise ``OlderWarehouse`` (one line for people) when the file predates this verdict."""
    row = con.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchall()
    version = int(row[0][0]) if row else 0
    if version < ws.SCHEMA_VERSION:
        raise OlderWarehouse(f"the warehouse is at schema version {version}, this Dumpscope reads {ws.SCHEMA_VERSION}: "
                             "run `dumpscope aggregate` (or the next night) to bring it up to date")


def latest_run(con: duckdb.DuckDBPyConnection) -> tuple[str, str | None] | None:
    """(run_id, commit) of the latest run (``flows.warehouse.reads.latest_run_id``), or None."""
    run_id = latest_run_id(con)
    return None if run_id is None else (run_id, run_commit(con, run_id))


def run_commit(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    rows = con.execute('SELECT "commit" FROM runs WHERE run_id = ?', [run_id]).fetchall()
    if not rows:
        raise ValueError(f"no run {run_id!r} in the warehouse")
    return rows[0][0]


def incidents_at(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """The incidents as they stand at ``run_id``, with their ``status`` there."""
    check_schema(con)
    return frame_of(con, "SELECT * FROM incidents_at(?) ORDER BY impact DESC, incident_id", [run_id])


def run_verdicts(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Every run's counts (the view run_verdicts: what ``transforms.trends.night_report.counts`` gives for each run)."""
    check_schema(con)
    return frame_of(con, "SELECT * FROM run_verdicts ORDER BY started_at, run_id")


def opened_in(con: duckdb.DuckDBPyConnection, runs: list[str]) -> int:
    """Regressions and failures new in ``runs`` (what ``--fail-on new`` counts)."""
    if not runs:
        return 0
    return con.execute("SELECT coalesce(sum(new), 0) FROM run_verdicts WHERE list_contains(?, run_id)", [runs]).fetchall()[0][0]
