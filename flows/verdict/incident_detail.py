"""One incident whole, and every incident with its last status, read back for ``dumpscope
incidents`` (the statuses come from the view ``incident_status``, as everywhere:
``flows.verdict.incident_reader``).

Raises ``OlderWarehouse`` (``flows.verdict.incident_reader``) for a file that predates this
verdict. May import ``warehouse`` and ``transforms``.
"""

from __future__ import annotations

import duckdb
import polars as pl

from flows.verdict.incident_reader import check_schema
from flows.warehouse.reads import frame_of, read_with, strings


def every_incident(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Every incident with its status (and age) at the last run it is listed in."""
    check_schema(con)
    return frame_of(con, """
        SELECT s.status, s.age_runs, i.* FROM incidents i
        JOIN (SELECT incident_id, arg_max(status, (r.started_at, r.run_id)) AS status,
                     arg_max(age_runs, (r.started_at, r.run_id)) AS age_runs
              FROM incident_status JOIN runs r USING (run_id) GROUP BY incident_id) s USING (incident_id)
        ORDER BY i.opened_at, i.impact DESC, i.incident_id""")


def status_at(con: duckdb.DuckDBPyConnection, incident_id: str, run_id: str) -> pl.DataFrame:
    """(status, age_runs) of the incident at ``run_id``: no row when it is not listed there."""
    return frame_of(con, "SELECT status, age_runs FROM incidents_at(?) WHERE incident_id = ?", [run_id, incident_id])


def steps_of(con: duckdb.DuckDBPyConnection, incident_id: str) -> list[dict]:
    """The incident's steps, the largest impact first."""
    return frame_of(con, "SELECT * FROM incident_steps WHERE incident_id = ? "
                         "ORDER BY impact DESC, metric, series, reopened_run NULLS FIRST",
                    [incident_id]).to_dicts()


def steps_by_incident(con: duckdb.DuckDBPyConnection, incident_ids: list[str]) -> dict[str, list[dict]]:
    """The steps of each of ``incident_ids`` (``steps_of``'s rows and order), read at once."""
    frame = read_with(con, {"_wanted": strings("incident_id", incident_ids)}, """
        SELECT s.* FROM incident_steps s SEMI JOIN _wanted w ON s.incident_id = w.incident_id
        ORDER BY s.incident_id, s.impact DESC, s.metric, s.series""")
    steps: dict[str, list[dict]] = {i: [] for i in incident_ids}
    for row in frame.iter_rows(named=True):
        steps[row["incident_id"]].append(row)
    return steps


def evidence_of(con: duckdb.DuckDBPyConnection, incident_id: str) -> list[dict]:
    """The changes of the incident's series in the run it opened (its cause), each with the
    dump paths and lines it stands on."""
    return frame_of(con, """
        SELECT DISTINCT d.series, d.description, d.before_path, d.lines_before, d.after_path, d.lines_after, d.rank
        FROM diffs d JOIN (SELECT DISTINCT series, opened_run FROM incident_steps WHERE incident_id = ?) s
          ON d.series = s.series AND d.run_id = s.opened_run
        ORDER BY d.series, d.rank""", [incident_id]).to_dicts()
