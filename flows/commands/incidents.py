"""``dumpscope incidents``: the incidents of a run, or one incident whole (``flows.verdict.incident_reader``).

A run's list is what that run's summary listed (``incidents_at(run)``: the same statuses,
the same counts); ``--status all`` is every incident ever, each with its status at the
last run it is listed in (the latest run while it is open, else the run it closed in). As
JSON each incident has its steps and its page too (``[site] url``'s, else its path in a site).
``I-xxxxxxxx`` shows one incident: its steps with their before, after and latest values,
its cause, the dump paths and lines its evidence comes from, and its page on the site.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl

from flows.commands.shared import open_to_read, print_table
from flows.errors import CommandError
from flows.verdict import incident_detail as detail
from flows.verdict import incident_reader
from flows.warehouse.reads import NoSuchRun, run_exists, run_named, runs_latest_first
from transforms.escape import plain_text, slug
from transforms.trends.headlines import IMPACT_TEXT, closing_text
from transforms.units import human_value

STATUS_CHOICES = (*incident_reader.SHOWN_BY_STATUS, "all")  # --status: every incident status, improvements, all
COLUMNS = ("incident_id", "status", "kind", "job", "program", "opened_run", "last_good_run", "last_good_commit",
           "first_bad_commit", "closed_run", "closed_how", "age_runs", "stacked_on", "impact", "metrics", "headline", "cause")
TABLE_WIDTH = 110  # the table's width when printed to a pipe (a terminal uses its own)

__all__ = ["IncidentsError", "NoSuchIncident", "NoSuchRun", "STATUS_CHOICES", "list_incidents", "one_incident",
           "main", "print_incidents", "print_one"]


class IncidentsError(CommandError):
    """No warehouse: one line for people (exit 1). An older warehouse is ``incident_reader.OlderWarehouse``
    (exit 1), a ``--run`` that names no run ``NoSuchRun`` (exit 2)."""


class NoSuchIncident(IncidentsError, exit_code=2):
    """An incident id names nothing the warehouse has, or nothing listed at ``--run`` (a bad
    argument, not a failure)."""


def list_incidents(warehouse: Path, run_id: str | None, status: str, *, whole: bool = False,
                   site_url: str | None = None) -> tuple[str | None, list[dict]]:
    """(the run, its incidents with ``status``); ``whole``: each with its steps and its page (on
    the site at ``site_url`` when given), as ``one_incident`` gives them."""
    con = open_to_read(warehouse, IncidentsError)
    try:
        run_id = run_named(con, run_id) if run_id is not None else None
        if run_id is not None and not run_exists(con, run_id):
            raise NoSuchRun(run_id, runs_latest_first(con, 5))
        if status == "all":
            rows = detail.every_incident(con).select(COLUMNS).to_dicts()
        else:
            if run_id is None:
                latest = incident_reader.latest_run(con)
                if latest is None:
                    return None, []
                run_id = latest[0]
            frame = incident_reader.incidents_at(con, run_id)
            improvement = pl.col("kind") == "improvement"
            wanted = pl.col("status").is_in(incident_reader.SHOWN_BY_STATUS[status]) & (
                improvement if status in incident_reader.KINDS_OF else ~improvement | pl.col("status").is_in(["accepted"]))
            rows = frame.filter(wanted).select(COLUMNS).to_dicts()
        if whole:
            steps = detail.steps_by_incident(con, [r["incident_id"] for r in rows])
            rows = [r | {"steps": steps[r["incident_id"]], "page": page_of(r["incident_id"], site_url)} for r in rows]
        return (None if status == "all" else run_id), rows
    finally:
        con.close()


def page_of(incident_id: str, site_url: str | None) -> str:
    """The incident's page: on the site at ``site_url`` (``[site] url``), else its path in a site."""
    page = f"incidents/{slug(incident_id)}.html"
    return f"{site_url.rstrip('/')}/{page}" if site_url else page


def one_incident(warehouse: Path, incident_id: str, run_id: str | None = None, site_url: str | None = None) -> dict:
    """An incident whole: its row, its status at ``run_id`` (default: the last run it is listed
    in), its steps, the evidence of its cause (dump paths and lines) and its site page."""
    con = open_to_read(warehouse, IncidentsError)
    try:
        every = detail.every_incident(con).filter(pl.col("incident_id") == incident_id)
        if every.is_empty():
            raise NoSuchIncident(f"no incident {incident_id!r} in the warehouse (`dumpscope incidents --status all` lists them)")
        row = every.row(0, named=True)
        if run_id is not None:
            run_id = run_named(con, run_id)
            at = detail.status_at(con, incident_id, run_id)
            if at.is_empty():
                raise NoSuchIncident(f"incident {incident_id} is not listed at run {run_id!r} (it opened {row['opened_run']}"
                                     + (f", closed {row['closed_run']})" if row["closed_run"] else ")"))
            row |= at.row(0, named=True)
        steps = detail.steps_of(con, incident_id)
        evidence = detail.evidence_of(con, incident_id)
    finally:
        con.close()
    return {**row, "steps": steps, "evidence": evidence, "page": page_of(incident_id, site_url), "impact_means": IMPACT_TEXT}


def main(*, incident: str | None, run_id: str | None, status: str, fmt: str, warehouse: Path,
         settings: Path | None) -> None:
    """A run's incidents with ``status`` (default run: the latest), or one ``incident`` whole."""
    from flows.commands.preflight import settings as load_settings

    site_url = load_settings(settings).site_url
    if incident is not None:
        print_one(one_incident(warehouse, incident, run_id, site_url), fmt)
        return
    run, rows = list_incidents(warehouse, run_id, status, whole=fmt == "json", site_url=site_url)
    print_incidents(run, status, rows, fmt)


def print_incidents(run_id: str | None, status: str, rows: list[dict], fmt: str) -> None:
    if fmt == "json":
        json.dump(rows, sys.stdout, default=str, ensure_ascii=False)
        sys.stdout.write("\n")
        return
    where = f"run {run_id}" if run_id else "every run"
    print_table(["id", "status", "kind", "program", "opened", "headline"],
                [(r["incident_id"], r["status"], r["kind"], f"{r['job']} / {r['program']}", r["opened_run"],
                  _headline_only(r)) for r in rows],
                title=f"{len(rows)} incident(s), {status}, {where}", width=TABLE_WIDTH,
                column_options={"id": {"no_wrap": True, "min_width": 10}, "status": {"no_wrap": True},
                                "kind": {"no_wrap": True}, "opened": {"no_wrap": True},
                                "program": {"max_width": 22}, "headline": {"ratio": 1}})


def _headline_only(r: dict) -> str:
    """The headline without its ``job / program: `` prefix (the program has its column)."""
    prefix = f"{r['job']} / {r['program']}: "
    text = r["headline"].removeprefix(prefix)
    return text + (f" (on top of {', '.join(r['stacked_on'])})" if r.get("stacked_on") else "")


def print_one(info: dict, fmt: str) -> None:
    """One incident as text for a person (or JSON)."""
    if fmt == "json":
        json.dump(info, sys.stdout, default=str, ensure_ascii=False)
        sys.stdout.write("\n")
        return
    closed = (f", {info['closed_how']} in {info['closed_run']}" + (" (reverted)" if info.get("reverted") else "")
              if info["closed_run"] else "")
    lines = [f"{info['incident_id']}  {info['kind']}, {info['status']}  {info['job']} / {info['program']}",
             f"opened in {info['opened_run']} (last good {info['last_good_run'] or 'none'}){closed}; "
             f"commits {info['last_good_commit'] or '?'} → {info['first_bad_commit'] or '?'}",
             info["headline"]]
    if info.get("stacked_on"):
        lines.append(f"on top of {', '.join(info['stacked_on'])} (the same figures stepped again while it was open)")
    for run, after in zip(info.get("reopened_runs") or [], info.get("reopened_after") or []):
        lines.append(f"reopened in {run}: a revert undid the change that "
                     f"{'lost' if info['kind'] == 'improvement' else 'fixed'} it in {after}")
    if info.get("accepted_by"):
        lines.append(f"accepted by {info['accepted_by']}" + (f": {info['accepted_note']}" if info["accepted_note"] else ""))
    print("\n".join(plain_text(line) for line in lines))
    print()
    print_table(["series", "metric", "step", "before", "after", "latest", "closed"],
                [(s["series"], s["metric"], s["step"], human_value(s["metric"], s["baseline"]),
                  human_value(s["metric"], s["value"]), human_value(s["metric"], s["latest_value"]),
                  closing_text(s)) for s in info["steps"]],
                title="steps (before: the level the figure stepped from; latest: while the step was open)",
                width=TABLE_WIDTH)
    for s in info["steps"]:
        if s["detail"]:
            print(plain_text(f"  {s['series']}: {s['detail']}"))
    if info["cause"]:
        print("\ncause:")
        print("\n".join(plain_text(f"  - {line}") for line in info["cause"].splitlines()))
    if info["evidence"]:
        print("\nevidence (dump lines of each change):")
        for e in info["evidence"][:20]:
            print(plain_text(f"  - {e['description']}: {_where(e)}"))
        if len(info["evidence"]) > 20:
            print(f"  … and {len(info['evidence']) - 20} more (--format json lists them all)")
    print(plain_text(f"\nsite: {info['page']}"))


def _where(e: dict) -> str:
    """The dump lines a change stands on: each side that has lines (else the later dump)."""
    sides = [f"{p}:{lines}" for p, lines in ((e["before_path"], e["lines_before"]), (e["after_path"], e["lines_after"]))
             if p and lines]
    return "; ".join(sides) or e["after_path"] or e["before_path"] or ""
