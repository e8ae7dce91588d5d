"""Reads (and the one write) behind ``dumpscope diff`` and ``dumpscope accept``: what two runs
hold to compare, and what an accept names and changes.

Values from outside (run ids, incident ids, series patterns) are bound as parameters, never
formatted into SQL. ``log_accept`` and ``record_closed`` are the only writes: the caller holds the warehouse's
one writer (``flows.warehouse.store.Warehouse``) and re-aggregates between them.
May import ``warehouse`` and ``transforms``.
"""

from __future__ import annotations

from datetime import datetime

import duckdb
import polars as pl

from flows.warehouse.reads import frame_of, registered, strings


# --- diff ---------------------------------------------------------------------------------

def runs_of(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> list[str]:
    """Those of ``run_ids`` that are runs of the warehouse."""
    return [r for (r,) in con.execute("SELECT run_id FROM runs WHERE list_contains(?, run_id)", [run_ids]).fetchall()]

def parsed_series(con: duckdb.DuckDBPyConnection, run_a: str, run_b: str) -> pl.DataFrame:
    """The ``dump_series`` rows (with their status) of the dumps of both runs that parsed
    (ok or partial)."""
    return frame_of(con, """SELECT s.*, d.status FROM dump_series s JOIN dumps d USING (path)
                            WHERE s.run_id IN (?, ?) AND d.status IN ('ok', 'partial')""", [run_a, run_b])


def items_and_metrics(con: duckdb.DuckDBPyConnection, paths: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(items with their evidence, metrics: path, program, metric, value) of the dumps at ``paths``; a
    path's items once, though a TORCH_TRACE log is a series per program (a dump_series row each)."""
    with registered(con, _diff_paths=strings("path", paths)):
        # content_items, not the dump_items view: the items with their evidence.
        items = frame_of(con, """SELECT s.path, c.* EXCLUDE (items_key)
                                 FROM (SELECT DISTINCT path, items_key FROM dump_series
                                       WHERE path IN (SELECT path FROM _diff_paths)) s
                                 JOIN content_items c USING (items_key)""")
        metrics = frame_of(con, "SELECT path, program, metric, value FROM metrics WHERE path IN (SELECT path FROM _diff_paths)")
    return items, metrics


# --- accept -------------------------------------------------------------------------------

def incident_state(con: duckdb.DuckDBPyConnection, incident: str) -> tuple[str | None, str | None, str] | None:
    """(closed_run, closed_how, opened_run) of ``incident``, or None when there is none."""
    rows = con.execute("SELECT closed_run, closed_how, opened_run FROM incidents WHERE incident_id = ?", [incident]).fetchall()
    return rows[0] if rows else None


def incident_program(con: duckdb.DuckDBPyConnection, incident: str) -> tuple[str, str]:
    """(job, program) of ``incident``."""
    return con.execute("SELECT job, program FROM incidents WHERE incident_id = ?", [incident]).fetchone()


def incident_metrics(con: duckdb.DuckDBPyConnection, incident: str) -> list[str]:
    return [m for (m,) in con.execute("SELECT DISTINCT metric FROM incident_steps WHERE incident_id = ? ORDER BY metric",
                                      [incident]).fetchall()]


def series_metrics(con: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple[str, str]]:
    """(series, metric) of every figure of ``run_id``."""
    return con.execute("SELECT DISTINCT s.series, m.metric FROM metrics m JOIN dump_series s USING (path) "
                       "WHERE s.run_id = ?", [run_id]).fetchall()


def series_in_run(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    return [s for (s,) in con.execute("SELECT DISTINCT series FROM dump_series WHERE run_id = ?", [run_id]).fetchall()]


def closest_series(con: duckdb.DuckDBPyConnection, pattern: str, n: int = 3) -> list[str]:
    """The ``n`` series of any run whose names are closest to ``pattern`` (Jaro-Winkler)."""
    return [r[0] for r in con.execute(
        "SELECT DISTINCT series FROM dump_series ORDER BY jaro_winkler_similarity(series, ?) DESC, series LIMIT ?",
        [pattern, n]).fetchall()]


def open_incident_ids(con: duckdb.DuckDBPyConnection, run_id: str) -> set[str]:
    """Incidents open at ``run_id`` (new there or still open: the view incident_status)."""
    return {i for (i,) in con.execute("SELECT incident_id FROM incident_status WHERE run_id = ? AND status IN ('new', 'open')",
                                      [run_id]).fetchall()}


def flagged_series(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The series of each figure with a regression or failure open at ``run_id``."""
    return [s for (s,) in con.execute("SELECT series FROM regressions WHERE run_id = ?", [run_id]).fetchall()]


def open_steps(con: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple[str, str, str | None, str | None]]:
    """(incident_id, series, metric, closed_run) of every step of the incidents open at
    ``run_id`` (incident_status): what an accept there could close. A step whose
    ``closed_run`` is not after ``run_id`` is no longer open there; the caller orders runs."""
    return con.execute("""SELECT s.incident_id, s.series, s.metric, s.closed_run FROM incident_steps s
                          JOIN incident_status i ON i.incident_id = s.incident_id AND i.run_id = ?
                          WHERE i.status IN ('new', 'open') ORDER BY s.incident_id, s.series, s.metric""",
                       [run_id]).fetchall()


def accepted_steps(con: duckdb.DuckDBPyConnection, run_id: str) -> set[tuple[str, str, str | None]]:
    """(incident_id, series, metric) of every step closed as accepted at ``run_id``."""
    return set(con.execute("SELECT incident_id, series, metric FROM incident_steps "
                           "WHERE closed_run = ? AND closed_how = 'accepted'", [run_id]).fetchall())


def accepted_incident_ids(con: duckdb.DuckDBPyConnection, run_id: str) -> set[str]:
    """Incidents whose status at ``run_id`` is accepted (the view incident_status)."""
    return {i for (i,) in con.execute("SELECT incident_id FROM incident_status WHERE run_id = ? AND status = 'accepted'",
                                      [run_id]).fetchall()}


def earlier_accepts(con: duckdb.DuckDBPyConnection, target: str, run_id: str) -> list[tuple[str, datetime]]:
    """(accepted_by, accepted_at) of the accepts logged before naming ``target`` (a pattern or
    an incident id) at ``run_id``."""
    return con.execute("SELECT accepted_by, accepted_at FROM accepts WHERE run_id = ? AND (series = ? OR incident_id = ?) "
                       "ORDER BY accepted_at", [run_id, target, target]).fetchall()


def log_accept(con: duckdb.DuckDBPyConnection, *, series: str | None, run_id: str, metric: str | None, note: str | None,
               accepted_by: str, accepted_at: datetime, incident_id: str | None) -> None:
    """One row of the accept log (inside the caller's writer); ``record_closed`` fills its
    ``closed_incidents`` once the aggregation has run."""
    con.execute("INSERT INTO accepts (series, run_id, metric, note, accepted_by, accepted_at, incident_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)", [series, run_id, metric, note, accepted_by, accepted_at, incident_id])


def record_closed(con: duckdb.DuckDBPyConnection, accepted_at: datetime, closed: list[str]) -> None:
    """Write the incidents the accept logged at ``accepted_at`` closed into its row."""
    con.execute("UPDATE accepts SET closed_incidents = ? WHERE accepted_at = ? AND closed_incidents IS NULL",
                [closed, accepted_at])
