"""``dumpscope accept``: record that a change was intended, then re-aggregate.

Two ways to name it: an incident id (``I-1a2b3c4d``, from ``dumpscope incidents`` or the
site), which closes that incident as accepted in the latest run; or a series id or shell
pattern (``jax-pmap/*``), whose baselines restart at the given run (default: the latest),
closing every incident of the matching series open there. Both are checked, logged to
``accepts`` and re-aggregated by the one writer that holds the lock.
"""

from __future__ import annotations

import difflib
import fnmatch
import getpass
import re
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone

import duckdb

from flows.verdict.aggregate import aggregate
from flows.resources import MemoryBudget
from transforms.trends.rules import Settings

INCIDENT_ID = re.compile(r"I-[0-9a-f]{8}")


class AcceptRefused(ValueError):
    """The accept names nothing it can apply to; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Accepted:
    what: str
    run_id: str
    closed: list[str]  # incident ids closed by this accept
    regressions_left: int  # figures with a regression or failure still open there (of the accepted series, for a pattern)


def accept(con: duckdb.DuckDBPyConnection, settings: Settings, target: str, run_id: str | None = None,
           metric: str | None = None, note: str | None = None, budget: MemoryBudget | None = None) -> Accepted:
    """Log the accept and re-aggregate (within ``budget``), inside the caller's writer."""
    runs = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY started_at DESC, run_id DESC").fetchall()]
    if not runs:
        raise AcceptRefused("the warehouse has no runs yet")
    if run_id is not None and run_id not in runs:
        raise AcceptRefused(f"no run {run_id!r} in the warehouse; latest runs: {', '.join(runs[:5])}")
    run_id = run_id or runs[0]
    by_id = INCIDENT_ID.fullmatch(target) is not None
    if by_id:
        _check_incident(con, target, run_id, runs)
    else:
        _check_series(con, target, run_id)
    if metric is not None:
        _check_metric(con, target, by_id, run_id, metric)
    before = _open_ids(con, run_id)
    row = [None if by_id else target, run_id, metric, note, getpass.getuser(), _now(), target if by_id else None]
    con.execute("INSERT INTO accepts (series, run_id, metric, note, accepted_by, accepted_at, incident_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)", row)
    aggregate(con, settings, budget=budget)
    closed = sorted(before - _open_ids(con, run_id))
    if by_id and target not in closed and not con.execute(
            "SELECT count(*) FROM incident_steps WHERE incident_id = ? AND closed_run = ? AND closed_how = 'accepted'"
            " AND metric = coalesce(?, metric)", [target, run_id, metric]).fetchone()[0]:
        # Raised inside the writer: the accept is discarded, not logged as done.
        job, program = con.execute("SELECT job, program FROM incidents WHERE incident_id = ?", [target]).fetchone()
        raise AcceptRefused(f"accepting incident {target} at run {run_id!r} closes nothing; accept its program's "
                            f"series there instead: dumpscope accept {shlex.quote(f'{job}/{program}/*')} {shlex.quote(run_id)}")
    flagged = [s for (s,) in con.execute("SELECT series FROM regressions WHERE run_id = ?", [run_id]).fetchall()]
    left = len(flagged) if by_id else sum(fnmatch.fnmatchcase(s, target) for s in flagged)
    return Accepted(target, run_id, closed, left)


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _open_ids(con, run_id: str) -> set[str]:
    """Incidents open at ``run_id`` (new there or still open: the view incident_status)."""
    return {i for (i,) in con.execute("SELECT incident_id FROM incident_status WHERE run_id = ? AND status IN ('new', 'open')",
                                      [run_id]).fetchall()}


def _check_incident(con, incident: str, run_id: str, runs: list[str]) -> None:
    row = con.execute("SELECT closed_run, closed_how, opened_run FROM incidents WHERE incident_id = ?", [incident]).fetchall()
    if not row:
        raise AcceptRefused(f"no incident {incident!r}; list them with `dumpscope incidents --status all`")
    closed_run, closed_how, opened_run = row[0]
    if closed_run is not None:
        raise AcceptRefused(f"incident {incident} is already closed ({closed_how} in run {closed_run})")
    if runs.index(run_id) > runs.index(opened_run):  # runs: latest first
        raise AcceptRefused(f"incident {incident} opened in run {opened_run!r}, after run {run_id!r}: "
                            f"accept it at {opened_run} or a later run")


def _check_metric(con, target: str, by_id: bool, run_id: str, metric: str) -> None:
    """``--metric`` names a figure of what is accepted: a metric of the incident, or one the
    matching series have in the run (else the accept would be logged and change nothing)."""
    if by_id:
        names = [m for (m,) in con.execute("SELECT DISTINCT metric FROM incident_steps WHERE incident_id = ? ORDER BY metric",
                                           [target]).fetchall()]
        where = f"incident {target}"
    else:
        rows = con.execute("SELECT DISTINCT s.series, m.metric FROM metrics m JOIN dump_series s USING (path) "
                           "WHERE s.run_id = ?", [run_id]).fetchall()
        names = sorted({m for s, m in rows if fnmatch.fnmatchcase(s, target)})
        where = f"the series matching {target!r} in run {run_id!r}"
    if metric not in names:
        close = difflib.get_close_matches(metric, names, n=5, cutoff=0)
        raise AcceptRefused(f"no metric {metric!r} in {where}; closest: {', '.join(close) or 'none'}")


def _check_series(con, pattern: str, run_id: str) -> None:
    names = [s for (s,) in con.execute("SELECT DISTINCT series FROM dump_series WHERE run_id = ?", [run_id]).fetchall()]
    if any(fnmatch.fnmatchcase(s, pattern) for s in names):
        return
    close = [r[0] for r in con.execute(
        "SELECT DISTINCT series FROM dump_series ORDER BY jaro_winkler_similarity(series, ?) DESC, series LIMIT 3",
        [pattern]).fetchall()]
    hint = " (an incident id is I- and 8 hex digits: `dumpscope incidents`)" if pattern.startswith("I-") else ""
    raise AcceptRefused(f"no series matching {pattern!r} has dumps in run {run_id!r}{hint}; closest series: {', '.join(close)}")
