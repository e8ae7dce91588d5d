"""``dumpscope accept``: record that a series' change was intended, then re-aggregate."""

from __future__ import annotations

import getpass
from datetime import datetime, timezone

import duckdb

from flows.aggregate import aggregate
from transforms.trends.rules import Settings


class UnknownSeries(ValueError):
    """The series has no dumps in that run; the message names the closest series."""


def accept_series(con: duckdb.DuckDBPyConnection, settings: Settings, series: str, run_id: str,
                  metric: str | None, note: str | None) -> int:
    """Log the accept and re-aggregate, inside the caller's writer; returns the regressions left there."""
    # One writer for the check, the insert and the re-aggregation.
    seen = con.execute("SELECT count(*) FROM dump_series WHERE series = ? AND run_id = ?", [series, run_id]).fetchall()[0][0]
    if not seen:
        close = [r[0] for r in con.execute(
            "SELECT DISTINCT series FROM dump_series ORDER BY jaro_winkler_similarity(series, ?) DESC LIMIT 3", [series]).fetchall()]
        raise UnknownSeries(f"series {series!r} has no dumps in run {run_id!r}; closest series: {', '.join(close)}")
    con.execute("INSERT INTO accepts VALUES (?, ?, ?, ?, ?, ?)", [
        series, run_id, metric, note, getpass.getuser(), datetime.now(timezone.utc).replace(tzinfo=None)])
    aggregate(con, settings)
    return con.execute("SELECT count(*) FROM regressions WHERE series = ? AND run_id = ?", [series, run_id]).fetchall()[0][0]
