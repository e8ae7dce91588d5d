"""``dumpscope accept``: record that a change was intended, then re-aggregate.

Two ways to name it: an incident id (``I-1a2b3c4d``, from ``dumpscope incidents`` or the
site), which closes that incident as accepted in the latest run; or a series id or shell
pattern (``jax-pmap/*``), whose baselines restart at the given run (default: the latest),
closing every step of the matching series open there. Both are checked, logged to
``accepts`` and re-aggregated by the one writer that holds the lock.

An accept must change the verdict, or it is refused (exit 2) before anything is logged:
by id, the incident must be open at the run; by pattern, an incident open at the run must
have a step there on a matching series (of ``--metric``, when given). A pattern accept that
would close nothing is refused even though it would restart the matching baselines: a
figure with no open step is at its level already, so the restart changes no verdict, and
logging it again would only say twice that it was intended (the repeated ``accept
'jax-jit/*'`` of issue 29). After the aggregation, the incidents it closed are read from the
incidents it computed (``incident_status``: open at the run before, ``accepted`` there
after; the same source as the incident pages) and written into its ``accepts`` row.
"""

from __future__ import annotations

import difflib
import fnmatch
import getpass
import re
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import duckdb

import typer

from flows.commands import preflight
from flows.errors import CommandError
from flows.resources import MemoryBudget
from flows.verdict import changes
from flows.verdict.aggregate import aggregate
from flows.warehouse.reads import NoSuchRun, run_named, runs_latest_first
from transforms.trends.rules import Settings

INCIDENT_ID = re.compile(r"I-[0-9a-f]{8}")


class AcceptRefused(CommandError, ValueError, exit_code=2):
    """The accept names nothing it can apply to; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Accepted:
    what: str
    run_id: str
    closed: list[str]  # incident ids closed by this accept
    regressions_left: int  # figures with a regression or failure still open there (of the accepted series, for a pattern)


def accept(con: duckdb.DuckDBPyConnection, settings: Settings, target: str, run_id: str | None = None,
           metric: str | None = None, note: str | None = None, budget: MemoryBudget | None = None) -> Accepted:
    """Log the accept and re-aggregate (within ``budget``), inside the caller's writer. Raises
    ``AcceptRefused`` or ``NoSuchRun`` (exit 2), which discard the accept with the writer."""
    runs = runs_latest_first(con)
    if not runs:
        raise AcceptRefused("the warehouse has no runs yet")
    run_id = run_named(con, run_id) if run_id is not None else None
    if run_id is not None and run_id not in runs:
        raise NoSuchRun(run_id, runs[:5])
    run_id = run_id or runs[0]
    by_id = INCIDENT_ID.fullmatch(target) is not None
    if by_id:
        _check_incident(con, target, run_id, runs)
    else:
        _check_series(con, target, run_id)
    if metric is not None:
        _check_metric(con, target, by_id, run_id, metric)
    if not by_id:
        _check_closes_something(con, target, run_id, runs, metric)
    before, accepted_before = changes.open_incident_ids(con, run_id), changes.accepted_steps(con, run_id)
    accepted_at = _now()
    changes.log_accept(con, series=None if by_id else target, run_id=run_id, metric=metric, note=note,
                       accepted_by=getpass.getuser(), accepted_at=accepted_at, incident_id=target if by_id else None)
    aggregate(con, settings, budget=budget)
    # The one verdict: what closed is what the aggregation now says of the run.
    closed = sorted(before & changes.accepted_incident_ids(con, run_id))
    newly = changes.accepted_steps(con, run_id) - accepted_before
    if by_id:
        newly = {step for step in newly if step[0] == target}
    if not newly:
        # Not expected after the checks above; raised inside the writer: the accept is discarded, not logged as done.
        if by_id:
            job, program = changes.incident_program(con, target)
            raise AcceptRefused(f"accepting incident {target} at run {run_id!r} closes nothing; accept its program's "
                                f"series there instead: dumpscope accept {shlex.quote(f'{job}/{program}/*')} {shlex.quote(run_id)}")
        raise AcceptRefused(f"accepting {target!r} at run {run_id!r} closes nothing: the aggregation accepted no step there")
    changes.record_closed(con, accepted_at, closed)
    flagged = changes.flagged_series(con, run_id)
    left = len(flagged) if by_id else sum(fnmatch.fnmatchcase(s, target) for s in flagged)
    return Accepted(target, run_id, closed, left)


def main(*, target: str, run_id: str | None, note: str | None, metric: str | None, warehouse: Path,
         settings: Path | None, wait: bool, memory_limit: str | None) -> None:
    """Accept as the warehouse's one writer, and say what it closed."""
    if note is None or not note.strip():
        raise AcceptRefused("--note is required: say why the change is intended, e.g. --note 'bigger tiles, intended'")
    conf, budget = preflight.settings_and_budget(settings, memory_limit)
    with preflight.writer(warehouse, wait, budget) as con:
        done = accept(con, conf, target, run_id, metric, note, budget=budget)
    closed = ", ".join(done.closed) or "none"
    typer.echo(f"accepted {target} at {done.run_id}" + (f" ({metric})" if metric else "")
               + f"; incidents closed: {closed}; regressions left there: {done.regressions_left}. "
               "The site shows it from its next build (`dumpscope site`, or the next nightly).")


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _check_incident(con, incident: str, run_id: str, runs: list[str]) -> None:
    state = changes.incident_state(con, incident)
    if state is None:
        raise AcceptRefused(f"no incident {incident!r}; list them with `dumpscope incidents --status all`")
    closed_run, closed_how, opened_run = state
    if closed_run is not None:
        raise AcceptRefused(f"incident {incident} is already closed ({closed_how} in run {closed_run})")
    if runs.index(run_id) > runs.index(opened_run):  # runs: latest first
        raise AcceptRefused(f"incident {incident} opened in run {opened_run!r}, after run {run_id!r}: "
                            f"accept it at {opened_run} or a later run")


def _check_metric(con, target: str, by_id: bool, run_id: str, metric: str) -> None:
    """``--metric`` names a figure of what is accepted: a metric of the incident, or one the
    matching series have in the run (else the accept would be logged and change nothing)."""
    if by_id:
        names = changes.incident_metrics(con, target)
        where = f"incident {target}"
    else:
        names = sorted({m for s, m in changes.series_metrics(con, run_id) if fnmatch.fnmatchcase(s, target)})
        where = f"the series matching {target!r} in run {run_id!r}"
    if metric not in names:
        close = difflib.get_close_matches(metric, names, n=5, cutoff=0)
        raise AcceptRefused(f"no metric {metric!r} in {where}; closest: {', '.join(close) or 'none'}")


def _check_closes_something(con, pattern: str, run_id: str, runs: list[str], metric: str | None) -> None:
    """Refuse a pattern accept that would accept no step: none of the incidents open at
    ``run_id`` has a step still open there on a matching series (of ``metric``)."""
    position = {r: i for i, r in enumerate(runs)}  # latest first: a smaller index is later
    open_there = [(incident, series, step_metric) for incident, series, step_metric, closed_run in changes.open_steps(con, run_id)
                  if closed_run is None or position.get(closed_run, -1) < position[run_id]]
    if any(fnmatch.fnmatchcase(series, pattern) and (metric is None or step_metric in (None, metric))
           for _, series, step_metric in open_there):
        return
    what = f"{pattern!r}" + (f" ({metric})" if metric else "")
    done = changes.earlier_accepts(con, pattern, run_id)
    why = (f"it was accepted there already (by {done[-1][0]} at {done[-1][1]:%Y-%m-%d %H:%M} UTC)" if done
           else "no incident open there has a step on a matching series" + (" and metric" if metric else ""))
    # Each open incident once, by its series closest to the pattern; the closest three.
    distance = {series: -difflib.SequenceMatcher(None, pattern, series).ratio() for _, series, _ in open_there}
    nearest: dict[str, str] = {}
    for incident, series, _ in open_there:
        if incident not in nearest or (distance[series], series) < (distance[nearest[incident]], nearest[incident]):
            nearest[incident] = series
    ranked = sorted(nearest.items(), key=lambda kv: (distance[kv[1]], kv[0]))[:3]
    instead = ", ".join(f"{incident} ({series})" for incident, series in ranked) or "none"
    raise AcceptRefused(f"accepting {what} at run {run_id!r} closes nothing: {why}; open there: {instead}")


def _check_series(con, pattern: str, run_id: str) -> None:
    if any(fnmatch.fnmatchcase(s, pattern) for s in changes.series_in_run(con, run_id)):
        return
    close = changes.closest_series(con, pattern)
    hint = " (an incident id is I- and 8 hex digits: `dumpscope incidents`)" if pattern.startswith("I-") else ""
    raise AcceptRefused(f"no series matching {pattern!r} has dumps in run {run_id!r}{hint}; closest series: {', '.join(close)}")
