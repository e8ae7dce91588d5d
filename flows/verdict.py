"""The verdict of a run, read from the warehouse: its incidents and their counts.

Every count of new, still-open and fixed incidents that Dumpscope shows (the summary,
``dumpscope incidents``, the exit status, the notifications, the site) comes from the
``incidents_at(run)`` table macro (``flows.warehouse.schema.MACROS``), through here.
"""

from __future__ import annotations

import duckdb
import polars as pl

from flows.aggregate import frame_of
from transforms.trends.night_report import counts

STATUSES = {"new": ("new",), "open": ("new", "open"), "fixed": ("fixed",), "accepted": ("accepted",),
            "improvements": ("improvement",)}


def latest_run(con: duckdb.DuckDBPyConnection) -> tuple[str, str | None] | None:
    """(run_id, commit) of the latest run, or None."""
    rows = con.execute('SELECT run_id, "commit" FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1').fetchall()
    return rows[0] if rows else None


def run_commit(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    rows = con.execute('SELECT "commit" FROM runs WHERE run_id = ?', [run_id]).fetchall()
    if not rows:
        raise ValueError(f"no run {run_id!r} in the warehouse")
    return rows[0][0]


def incidents_at(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """The incidents as they stand at ``run_id``, with their ``status`` there."""
    frame = frame_of(con, "SELECT * FROM incidents_at(?) ORDER BY impact DESC, incident_id", [run_id])
    if "worse_again" not in frame.columns:  # a warehouse no writer has opened since worse_again came
        frame = frame.with_columns(pl.lit(None).alias("worse_again"))
    return frame


def all_incidents(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    return frame_of(con, "SELECT * FROM incidents ORDER BY opened_at, impact DESC, incident_id")


def night_counts(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, int]:
    return counts(incidents_at(con, run_id))


def opened_in(con: duckdb.DuckDBPyConnection, runs: list[str]) -> int:
    """Regressions and failures opened in ``runs`` (what ``--fail-on new`` counts)."""
    if not runs:
        return 0
    return con.execute("SELECT count(*) FROM incidents WHERE kind <> 'improvement' AND list_contains(?, opened_run)",
                       [runs]).fetchall()[0][0]


def open_at(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Regressions and failures open at ``run_id``, new ones included (``--fail-on open``)."""
    return con.execute("SELECT count(*) FROM incidents_at(?) WHERE status IN ('new', 'open')", [run_id]).fetchall()[0][0]
