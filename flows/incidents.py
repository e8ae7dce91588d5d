"""``dumpscope incidents``: the incidents of a run (``flows.verdict``), as a table or JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb
import polars as pl

from flows import verdict
from flows.query import print_table
from flows.warehouse.store import connect_readonly
from transforms.trends.incidents import worse_again_line

STATUSES = ("new", "open", "fixed", "accepted", "improvements", "all")
COLUMNS = ("incident_id", "status", "kind", "job", "program", "opened_run", "last_good_run", "last_good_commit",
           "first_bad_commit", "closed_run", "closed_how", "age_runs", "impact", "metrics", "headline", "cause",
           "worse_again")


class IncidentsError(Exception):
    """No warehouse, no such run: one line for people."""


class NoSuchRun(IncidentsError):
    """``--run`` names a run the warehouse does not have (a bad argument, not a failure)."""


def list_incidents(warehouse: Path, run_id: str | None, status: str) -> tuple[str | None, list[dict]]:
    try:
        con = connect_readonly(warehouse)
    except (FileNotFoundError, duckdb.Error) as exc:
        raise IncidentsError(str(exc)) from None
    try:
        if run_id is not None and not con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchall():
            latest = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 5").fetchall()]
            raise NoSuchRun(f"no run {run_id!r} in the warehouse; latest runs: {', '.join(latest) or 'none yet'}")
        if status == "all":
            frame = verdict.all_incidents(con).with_columns(pl.lit(None, pl.String).alias("status"),
                                                            pl.lit(None, pl.Int64).alias("age_runs"),
                                                            pl.lit(None).alias("worse_again"))
            return None, frame.select(COLUMNS).to_dicts()
        if run_id is None:
            latest = verdict.latest_run(con)
            if latest is None:
                return None, []
            run_id = latest[0]
        frame = verdict.incidents_at(con, run_id)
        return run_id, frame.filter(pl.col("status").is_in(verdict.STATUSES[status])).select(COLUMNS).to_dicts()
    finally:
        con.close()


def print_incidents(run_id: str | None, status: str, rows: list[dict], fmt: str) -> None:
    if fmt == "json":
        json.dump(rows, sys.stdout, default=str, ensure_ascii=False)
        sys.stdout.write("\n")
        return
    where = f"run {run_id}" if run_id else "every run"
    print_table(["id", "status", "kind", "program", "opened", "commits", "headline"],
                [(r["incident_id"], (r["status"] or (r["closed_how"] or "open")) + (", worse again" if r["worse_again"] else ""),
                  r["kind"], f"{r['job']} / {r['program']}", r["opened_run"],
                  f"{r['last_good_commit'] or '?'} → {r['first_bad_commit'] or '?'}",
                  r["headline"] + (f" — worse again in this run: {worse_again_line(r['worse_again'])}" if r["worse_again"] else ""))
                 for r in rows],
                title=f"{len(rows)} incident(s), {status}, {where}")
