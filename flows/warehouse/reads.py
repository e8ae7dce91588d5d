"""Shared read helpers over a DuckDB connection: rows as polars frames, values from outside
registered as data (never formatted into SQL), the order of runs (``LATEST_RUN_FIRST``,
``runs_latest_first``, ``latest_run_id``), the run a command's argument names (``run_named``:
a run id, ``latest`` or ``previous``), and "no such run".

Every module that reads the warehouse uses these, so a query's parameters, a registered frame's
lifetime and the wording of a missing run are decided once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import duckdb
import polars as pl
import pyarrow as pa

from flows.errors import CommandError

# The latest run first: by start, a tie broken by run id (the verdict views and
# ``transforms.trends.metric_trends.run_order`` order runs the same way, oldest first).
LATEST_RUN_FIRST = "ORDER BY started_at DESC, run_id DESC"
# The dumps (a row of ``dumps``) whose figures are believed: ok, or partial with what the damage
# cost named (its other figures stored; ``transforms.trends.incident_rule.figures_stand`` in polars).
FIGURES_STAND = "(status = 'ok' OR (status = 'partial' AND lost_metrics IS NOT NULL))"


class NoSuchRun(CommandError, LookupError, exit_code=2):
    """A run id (``--run``, ``--against``, ``--from``/``--to``) that names no run of the warehouse:
    a bad argument (exit 2). With ``latest`` (``runs_latest_first``), the message lists them:
    "no run 'X' in the warehouse; latest runs: a, b" ("none yet" for a warehouse without runs);
    ``tail`` replaces that list with a text of the caller's."""

    def __init__(self, run_id: str, latest: list[str] | None = None, *, tail: str | None = None):
        if tail is None:
            tail = "" if latest is None else f"; latest runs: {', '.join(latest) or 'none yet'}"
        super().__init__(f"no run {run_id!r} in the warehouse{tail}")
        self.run_id, self.latest = run_id, latest


def run_exists(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    return bool(con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchall())


def frame_of(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> pl.DataFrame:
    """The rows of ``sql`` (its ``params`` bound, never formatted in) as a polars frame."""
    return con.sql(sql, params=params).pl() if params else con.sql(sql).pl()


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, **frames: pl.DataFrame | pa.Table) -> Iterator[None]:
    """``frames`` visible to SQL under their names (names start with an underscore) while the
    block runs, and unregistered after it, whatever happens."""
    for name, frame in frames.items():
        con.register(name, frame.to_arrow() if isinstance(frame, pl.DataFrame) else frame)
    try:
        yield
    finally:
        for name in frames:
            con.unregister(name)


def read_with(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame], sql: str,
              params: list | None = None) -> pl.DataFrame:
    """``sql`` over the warehouse with ``frames`` registered under their names."""
    with registered(con, **frames):
        return frame_of(con, sql, params)


def strings(name: str, values) -> pa.Table:
    """A one-column table of strings, to register as a set of ids or paths."""
    return pa.table({name: pa.array(list(values), pa.string())})


def runs_latest_first(con: duckdb.DuckDBPyConnection, limit: int | None = None) -> list[str]:
    """The run ids of the warehouse, the latest first (``LATEST_RUN_FIRST``); ``limit``: at most that many."""
    sql = f"SELECT run_id FROM runs {LATEST_RUN_FIRST}"
    rows = con.execute(sql + " LIMIT ?", [int(limit)]).fetchall() if limit is not None else con.execute(sql).fetchall()
    return [r for (r,) in rows]


def latest_run_id(con: duckdb.DuckDBPyConnection) -> str | None:
    """The latest run's id (``LATEST_RUN_FIRST``), or None when the warehouse holds no run."""
    found = runs_latest_first(con, 1)
    return found[0] if found else None


RUN_ALIASES = ("latest", "previous")  # the latest run and the one before it (LATEST_RUN_FIRST)


def run_named(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """The run id ``name`` names wherever a command takes a run: the id itself, or, when no run
    has that id, ``latest`` (the latest run) or ``previous`` (the one before it). Raises
    ``NoSuchRun`` (naming the latest runs) for an alias the warehouse has no run for; any
    other name is returned as it is, for the caller's own check."""
    if name not in RUN_ALIASES or run_exists(con, name):
        return name
    latest = runs_latest_first(con, 5)
    index = RUN_ALIASES.index(name)
    if len(latest) <= index:
        raise NoSuchRun(name, latest)
    return latest[index]
