"""``dumpscope check DIR``: what a change would do to the warehouse's figures, before it lands.

``DIR`` holds one night's jobs as a pull request's CI job wrote them (``DIR/<job>/**``,
like one run directory of the bucket, with an optional ``DIR/run.json``). Each file is
parsed in memory by the nightly's driver (``transforms.parse.iter_dump``; records are
dropped as they come, only the summaries are kept) and named by the nightly's series
rules (``transforms.trends.series``, with DIR's run.json ``"series"`` mapping and the
settings' ``[series]`` table).

The candidate is then treated as one more run after the reference run (the warehouse's
latest, or ``against``): the history of the candidate's jobs up to the reference run is
read from the published warehouse through a read-only connection, and the nightly's
incident rules (``transforms.trends.incidents.compute``, with ``flows.aggregate``'s
``program_health``, settings and floors) run in memory over history + candidate. What
the candidate run would open is the answer; incidents it would close as fixed are
listed too. Nothing is written: not the warehouse, not beside it, not in DIR.

Also listed:

- new programs: series of the candidate that the reference run's history of their
  job never had (a job absent from the warehouse: all of its programs). They have no
  baseline, so they open nothing;
- damaged dumps: every file of DIR that did not parse ``ok`` (``partial``, ``failed``,
  or unreadable), each with its error naming the file. A damaged dump of a known series
  is a ``failure`` incident, as in the nightly; one of a new program (or whose program
  is unknown) becomes a ``failure`` entry of its own, so that a change that breaks a
  dump never passes a check.

``check_dir`` raises ``CheckError`` (one line for people) when the warehouse does not
exist or is no DuckDB file, or DIR is not a directory; ``NoSuchRun`` (a ``CheckError``)
when ``against`` names no run. Names in the output come from
dumps and paths: Markdown goes through ``transforms.escape``, terminal text has its
control characters made visible.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import duckdb
import polars as pl
from fsspec.implementations.local import LocalFileSystem

from flows import history as history_mod
from flows.aggregate import frame_of, load_settings, program_health
from flows.bucket import BucketReadError, open_object, read_runs
from flows.parse_files import json_value, number
from flows.resources import MemoryBudget, parse_memory
from flows.warehouse.store import connect_readonly
from transforms.escape import code, md_text
from transforms.layout import BucketObject, Role, escape_name, locate
from transforms.parse import DEFAULT_LIMITS, ParseLimits, iter_dump
from transforms.records import DumpSummary
from transforms.trends import incidents as incident_mod
from transforms.trends import metric_trends as trends
from transforms.trends.rules import Settings
from transforms.trends.series import SERIES_SCHEMA, assign_series, compile_overrides
from transforms.units import human_delta, human_value

FORMATS = ("text", "markdown", "json")
CANDIDATE_RUN = "candidate"  # the run id DIR gets (another one if the warehouse has a run of that name)
# The columns of the warehouse's dumps table that series and health need.
_DUMP_COLUMNS = ("path", "run_id", "job", "kind", "stage", "program", "status", "error")


class CheckError(Exception):
    """No warehouse (or not a DuckDB file), no such directory: one line for people."""


class NoSuchRun(CheckError):
    """``against`` names no run of the warehouse (a bad argument)."""


@dataclass
class CheckResult:
    against: str  # the reference run
    against_commit: str | None
    candidate_commit: str | None
    dumps: int = 0  # dump files read in DIR (run.json and unknown files included)
    opened: list[dict] = field(default_factory=list)  # incidents the candidate would open (and damaged new dumps)
    fixed: list[dict] = field(default_factory=list)  # open incidents it would close as fixed
    worsened: list[dict] = field(default_factory=list)  # open incidents whose figures it would move further the worse way
    new_programs: list[dict] = field(default_factory=list)  # job, program, series
    damaged: list[dict] = field(default_factory=list)  # path, kind, status, error
    run_errors: list[str] = field(default_factory=list)  # what was wrong with DIR/run.json

    @property
    def failing(self) -> list[dict]:
        """What ``--fail-on new`` fails on: the regressions and failures it would open."""
        return [r for r in self.opened if r["kind"] in ("regression", "failure")]


def check_dir(directory: Path, warehouse: Path, *, against: str | None = None, settings: Settings | None = None,
              limits: ParseLimits = DEFAULT_LIMITS, budget: MemoryBudget | None = None) -> CheckResult:
    """Compare the dumps under ``directory`` with the warehouse's run ``against`` (default: the
    latest). The history is read a group of the candidate's jobs at a time, each group of at
    most ``budget.incidents_batch_rows`` stored figures (an incident is one program's, and a
    program one job's): memory follows the group, not the history."""
    settings = settings if settings is not None else load_settings(None)
    budget = budget or MemoryBudget(parse_memory(settings.memory_limit))
    if not directory.is_dir():
        raise CheckError(f"{directory} is not a directory")
    try:
        con = connect_readonly(warehouse, budget=budget)
    except (FileNotFoundError, duckdb.Error) as exc:
        raise CheckError(str(exc)) from None
    try:
        history_order, accepts = _history_runs(con, against)
        run_id = _fresh_run_id(history_order)
        objects = _list_dir(directory, run_id)
        info = read_runs(LocalFileSystem(), objects).get(run_id)
        candidate, metrics, damaged = _parse(objects, limits)
        ref = history_order.row(-1, named=True)
        order = pl.concat([history_order, pl.DataFrame(
            {"run_seq": [ref["run_seq"] + 1], "run_id": [run_id], "started_at": [ref["started_at"] + timedelta(seconds=1)],
             "commit": [info.commit if info else None]}, schema=history_order.schema)])
        overrides = (info.extra or {}).get("series") if info else None
        fresh = assign_series(candidate, {run_id: {str(k): str(v) for k, v in overrides.items()}}
                              if isinstance(overrides, dict) else {}, compile_overrides(settings.series_patterns))
        result = CheckResult(against=ref["run_id"], against_commit=ref["commit"],
                             candidate_commit=info.commit if info else None, dumps=len(objects), damaged=damaged,
                             run_errors=list(info.meta_errors) if info else [])
        parts = []
        for group in history_mod.job_groups(con, sorted(candidate.get_column("job").unique().to_list()), budget.incidents_batch_rows):
            in_group = pl.col("job").is_in(pl.Series(group, dtype=pl.String).implode())
            history = _history_dumps(con, history_order, group)
            stored_series = _stored_series(con, history)
            history_metrics = _metrics_of(con, history.filter(pl.col("status") == "ok").get_column("path"))
            group_fresh, group_candidate = fresh.filter(in_group), candidate.filter(in_group)
            result.new_programs += _new_programs(group_fresh, stored_series)
            parts.append(_incidents(pl.concat([stored_series, group_fresh]), pl.concat([history, group_candidate]),
                                    pl.concat([history_metrics, metrics.join(group_candidate.select("path"), on="path",
                                                                             how="semi")]),
                                    order, accepts, settings))
            del history, stored_series, history_metrics
    finally:
        con.close()
    incidents, steps = incident_mod.in_order(pl.concat([p[0] for p in parts]), pl.concat([p[1] for p in parts]))
    result.opened = _described(incidents.filter(pl.col("opened_run") == run_id), steps, opened=True)
    result.fixed = _described(incidents.filter((pl.col("closed_run") == run_id) & (pl.col("closed_how") == "fixed")),
                              steps, opened=False)
    result.opened += _damaged_new(damaged, fresh, result.opened)
    result.worsened = _worsened(incidents, steps, run_id)
    return result


def _history_runs(con, against: str | None) -> tuple[pl.DataFrame, list[dict]]:
    """The warehouse's runs up to the reference run, in run order, and the accept log."""
    order = trends.run_order(frame_of(con, 'SELECT run_id, started_at, "commit" FROM runs'))
    if order.is_empty():
        raise CheckError("the warehouse holds no run yet (run `dumpscope run` first)")
    if against is not None:
        at = order.filter(pl.col("run_id") == against)
        if at.is_empty():
            raise NoSuchRun(f"no run {against!r} in the warehouse (latest: {order.get_column('run_id')[-1]})")
        order = order.filter(pl.col("run_seq") <= at.get_column("run_seq")[0])
    accepts = frame_of(con, "SELECT series, run_id, metric, accepted_at, accepted_by, note, incident_id FROM accepts")
    return order, accepts.to_dicts()


def _fresh_run_id(order: pl.DataFrame) -> str:
    taken = set(order.get_column("run_id").to_list())
    run_id = CANDIDATE_RUN
    while run_id in taken:
        run_id += "'"
    return run_id


def _list_dir(directory: Path, run_id: str) -> list[BucketObject]:
    """Every file under ``directory`` as an object of run ``run_id``, located as the nightly
    locates a run directory's files (``transforms.layout.locate``). ``path`` is the path a
    person opens (``directory`` joined with the file's relative path, escaped as the
    nightly escapes names); symbolic links to directories are not followed."""
    root = str(directory).rstrip("/") or "/"
    out = []
    for parent, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(parent, name)
            rel = escape_name(os.path.relpath(full, root).replace(os.sep, "/"))
            where = locate(f"{run_id}/{rel}")
            if where is None:
                continue
            try:
                stat = os.stat(full)
            except OSError:
                continue  # vanished, or a dangling link: nothing to read
            out.append(BucketObject(escape_name(full), full, stat.st_size, stat.st_mtime, run_id, where.job, where.role))
    return out


def _parse(objects: list[BucketObject], limits: ParseLimits) -> tuple[pl.DataFrame, pl.DataFrame, list[dict]]:
    """(dumps rows, metrics rows of the dumps that parsed ok, damaged dumps) of the candidate."""
    fs = LocalFileSystem()
    rows, metric_rows, damaged = [], [], []
    for obj in objects:
        if obj.role is not Role.DUMP:
            continue
        try:
            with open_object(fs, obj) as raw:
                summary = _summary(raw, obj.path, limits)
        except (BucketReadError, OSError) as exc:
            damaged.append({"path": obj.path, "job": obj.job or "", "kind": None, "program": None,
                            "status": "unreadable", "error": str(exc)})
            continue
        status = str(summary.status)
        rows.append({"path": obj.path, "run_id": obj.run_id, "job": obj.job or "", "kind": str(summary.kind),
                     "stage": summary.stage, "program": summary.program, "status": status,
                     "error": "\n".join(summary.errors) or None})
        if status == "ok":
            metric_rows += [(obj.path, k, json_value(float(v))) for k, v in sorted(summary.metrics.items())]
        elif str(summary.kind) != "unknown":
            damaged.append({"path": obj.path, "job": obj.job or "", "kind": str(summary.kind),
                            "program": summary.program, "status": status, "error": "\n".join(summary.errors)})
    dumps = pl.DataFrame(rows, schema={c: pl.String for c in _DUMP_COLUMNS})
    metrics = pl.DataFrame(metric_rows, schema={"path": pl.String, "metric": pl.String, "value": pl.Float64}, orient="row")
    return dumps, metrics, damaged


def _summary(raw, name: str, limits: ParseLimits) -> DumpSummary:
    """The dump's summary; its records are dropped as they come."""
    summary = None
    for item in iter_dump(raw, name, limits=limits):
        if isinstance(item, DumpSummary):
            summary = item
    assert summary is not None
    return summary


def _history_dumps(con, order: pl.DataFrame, jobs: list[str]) -> pl.DataFrame:
    """The dumps of these jobs in the runs of ``order``."""
    return history_mod.read_with(
        con, {"_check_runs": order.select("run_id"), "_check_jobs": pl.DataFrame({"job": jobs}, schema={"job": pl.String})},
        f"SELECT {', '.join(_DUMP_COLUMNS)} FROM dumps WHERE run_id IN (SELECT run_id FROM _check_runs) "
        "AND job IN (SELECT job FROM _check_jobs)").cast({c: pl.String for c in _DUMP_COLUMNS})


def _stored_series(con, dumps: pl.DataFrame) -> pl.DataFrame:
    """The series the nightly gave these dumps (a series depends on its run alone)."""
    return history_mod.read_with(con, {"_check_paths": dumps.select("path")},
                                 f"SELECT {', '.join(SERIES_SCHEMA.names())} FROM dump_series "
                                 "WHERE path IN (SELECT path FROM _check_paths)").cast(dict(SERIES_SCHEMA))


def _metrics_of(con, paths: pl.Series) -> pl.DataFrame:
    return history_mod.read_with(con, {"_check_paths": pl.DataFrame({"path": paths})},
                                 "SELECT path, metric, value FROM metrics WHERE path IN (SELECT path FROM _check_paths)")


def _incidents(series: pl.DataFrame, dumps: pl.DataFrame, metrics: pl.DataFrame, order: pl.DataFrame,
               accepts: list[dict], settings: Settings) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The nightly's incidents (``flows.aggregate``) over history + candidate: figures of ok dumps only."""
    health = program_health(series, dumps, order)
    usable = series.join(dumps.filter(pl.col("status") == "ok").select("path"), on="path", how="semi")
    observations = usable.join(metrics, on="path").select(
        "run_id", "series", "job", "kind", "stage", pl.col("series_program").alias("program"), "metric", "value")
    ok = health.filter(pl.col("status") == "ok").select("series", "run_id")
    floors = incident_mod.Floors(bytes=settings.floor_bytes, count=settings.floor_count)
    return incident_mod.compute(observations, health, order, accepts, settings, floors, ok=ok)


def _described(incidents: pl.DataFrame, steps: pl.DataFrame, *, opened: bool) -> list[dict]:
    """Incidents as plain objects, each with its steps (metric, before, after)."""
    out = []
    for inc in incidents.sort("impact", "incident_id", descending=[True, False]).iter_rows(named=True):
        own = steps.filter(pl.col("incident_id") == inc["incident_id"]).sort("impact", "metric", "series",
                                                                            descending=[True, False, False])
        out.append({
            # An opened incident's id would name the candidate's run, which no night will have: none.
            "incident_id": None if opened else inc["incident_id"], "change": "opens" if opened else "fixes", "job": inc["job"],
            "program": inc["program"], "kind": inc["kind"], "headline": inc["headline"], "metrics": inc["metrics"],
            "last_good_run": inc["last_good_run"], "impact": inc["impact"],
            "steps": [_step(s, s["baseline"], s["value"] if opened else s["latest_value"], s["change"])
                      for s in own.iter_rows(named=True)],
        })
    return out


def _step(s: dict, before: float | None, after: float | None, change: float | None) -> dict:
    """One ``incident_steps`` row as the output lists it, with the figures this entry shows."""
    return {"series": s["series"], "dump_kind": s["dump_kind"], "stage": s["stage"], "metric": s["metric"],
            "step": s["step"], "before": _num(before), "after": _num(after), "change": _num(change), "detail": s["detail"]}


def _worsened(incidents: pl.DataFrame, steps: pl.DataFrame, run_id: str) -> list[dict]:
    """Open incidents whose figures the candidate moves further the worse way (nothing new
    opens; the nightly says "worse again"), each with those moves (metric, before, after)."""
    moved = steps.filter(pl.col("worse_runs").list.contains(run_id))
    out = []
    ids = set(moved.get_column("incident_id").to_list())
    for inc in incidents.filter(pl.col("incident_id").is_in(list(ids))).sort(
            "impact", "incident_id", descending=[True, False]).iter_rows(named=True):
        own = moved.filter(pl.col("incident_id") == inc["incident_id"]).sort("impact", "metric", "series",
                                                                            descending=[True, False, False])
        rows = []
        for s in own.iter_rows(named=True):
            k = s["worse_runs"].index(run_id)
            before, after = s["worse_from"][k], s["worse_to"][k]
            rows.append(_step(s, before, after, after - before))
        out.append({"incident_id": inc["incident_id"], "change": "worsens", "job": inc["job"], "program": inc["program"],
                    "kind": inc["kind"], "headline": inc["headline"], "metrics": inc["metrics"],
                    "last_good_run": inc["last_good_run"], "impact": inc["impact"], "steps": rows})
    return out


def _num(value: float | None) -> float | int | None:
    return None if value is None else json_value(number(value))


def _new_programs(fresh: pl.DataFrame, stored: pl.DataFrame) -> list[dict]:
    """Programs of the candidate (job + series program) the history of their job never had."""
    known = stored.select("job", "series_program").unique()
    new = fresh.join(known, on=["job", "series_program"], how="anti")
    return [{"job": job, "program": program, "series": sorted(set(group.get_column("series").to_list()))}
            for (job, program), group in new.sort("job", "series_program").group_by("job", "series_program", maintain_order=True)]


def _damaged_new(damaged: list[dict], fresh: pl.DataFrame, opened: list[dict]) -> list[dict]:
    """A ``failure`` entry for each damaged dump that no failure incident names (its program
    is new, or it has none): a check never passes a dump the parsers could not read."""
    named = [s["detail"] for r in opened for s in r["steps"] if s["detail"]]
    by_path = {p: (series, program) for p, series, program in fresh.select("path", "series", "series_program").iter_rows()}
    out = []
    for d in damaged:
        if any(detail.startswith(f"{d['path']}: ") for detail in named):
            continue
        series, program = by_path.get(d["path"], (None, d["program"] or ""))
        what = f"{d['kind']} dump does not parse" if d["kind"] else "dump cannot be read"
        out.append({
            "incident_id": None, "change": "opens", "job": d["job"], "program": program, "kind": "failure",
            "headline": f"{d['job']} / {program}: {what}", "metrics": ["dump.status"], "last_good_run": None,
            "impact": incident_mod.impact("dump.status", "failure", None, None, 0.0),
            "steps": [{"series": series, "dump_kind": d["kind"], "stage": None, "metric": "dump.status",
                       "step": "failure", "before": None, "after": None, "change": None,
                       "detail": f"{d['path']}: {d['error']}"}],  # as the nightly's failure steps say it
        })
    return out


# ---------------------------------------------------------------- output


def render(result: CheckResult, directory: Path, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result.opened + result.worsened + result.fixed + [
            {"incident_id": None, "change": "new_program", "job": p["job"], "program": p["program"], "kind": "new_program",
             "headline": f"{p['job']} / {p['program']}: new program, not in the warehouse", "metrics": [],
             "series": p["series"], "steps": []} for p in result.new_programs], ensure_ascii=False, default=str)
    return _markdown(result, directory) if fmt == "markdown" else _text(result, directory)


def counts(result: CheckResult) -> tuple[str, str]:
    """("2 new incident(s)", "1 regression(s), 1 failure(s), 0 improvement(s); 0 made worse, 0 fixed, ...")."""
    kinds = [r["kind"] for r in result.opened]
    return (f"{len(result.opened)} new incident(s)",
            f"{kinds.count('regression')} regression(s), {kinds.count('failure')} failure(s), "
            f"{kinds.count('improvement')} improvement(s); {len(result.worsened)} made worse, {len(result.fixed)} fixed, "
            f"{len(result.new_programs)} new program(s), {len(result.damaged)} damaged dump(s)")


def _step_lines(s: dict, damaged: list[dict]) -> list[str]:
    """One step as a person reads it: a figure's move, or what happened to the dump."""
    if s["metric"] == "dump.vanished":
        return [f"{s['dump_kind']} dump vanished (the reference run has it)"]
    if s["metric"].startswith("dump.") or s["before"] is None or s["after"] is None:
        detail = s["detail"] or s["metric"]
        # The nightly's detail is "<path>: <error>", and each error names the path again.
        errors = next((d["error"] for d in damaged if detail.startswith(f"{d['path']}: ")), detail)
        return ["the dump does not parse:", *errors.split("\n")]
    return [f"{s['metric']} {human_value(s['metric'], s['before'])} → {human_value(s['metric'], s['after'])}"
            f" ({human_delta(s['metric'], s['change'])})"]


def _where(s: dict) -> str:
    return " ".join(p for p in (s["dump_kind"], s["stage"]) if p)


# Terminal text: names come from dumps and paths; control characters (an escape sequence
# would move the cursor or recolour the terminal) become visible Control Pictures.
_TERMINAL = str.maketrans({i: chr(0x2400 + i) for i in range(0x20) if i != 0x0A} | {0x7F: "\u2421"}
                          | {i: "\ufffd" for i in range(0x80, 0xA0)})
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _plain(value: object) -> str:
    return _SURROGATE.sub("\ufffd", str(value)).translate(_TERMINAL).replace("\n", " ")


def _text(result: CheckResult, directory: Path) -> str:
    new, rest = counts(result)
    lines = [_plain(f"dumpscope check {directory} against run {result.against}"
                    f" (commit {result.against_commit or '?'}): {new} ({rest})")]
    for title, rows in (("Would open", result.opened), ("Would make worse", result.worsened), ("Would fix", result.fixed)):
        if rows:
            lines += ["", f"{title}:"]
        for r in rows:
            lines.append(_plain(f"  {r['kind']:<11} {r['job']} / {r['program']}"
                                + (f" ({r['incident_id']})" if r["incident_id"] else "")))
            for s in r["steps"]:
                first, *more = _step_lines(s, result.damaged)
                lines.append(_plain(f"      {first}" + (f"  [{_where(s)}]" if _where(s) else "")))
                lines += [_plain(f"        {m}") for m in more]
    if result.new_programs:
        lines += ["", "New programs (not in the warehouse, no baseline):"]
        lines += [_plain(f"  {p['job']} / {p['program']}: {', '.join(p['series'])}") for p in result.new_programs]
    if result.damaged:
        lines += ["", "Damaged dumps:"]
        lines += [_plain(f"  {d['status']:<11} {e}") for d in result.damaged for e in d["error"].split("\n")]
    if result.run_errors:
        lines += ["", "run.json errors (the valid fields were kept):"] + [_plain(f"  {e}") for e in result.run_errors]
    return "\n".join(lines)


def _markdown(result: CheckResult, directory: Path) -> str:
    """A pull-request comment: every name through ``transforms.escape``."""
    new, rest = counts(result)
    lines = [f"### Dumpscope check against run {code(result.against)}"
             f" (commit {code(result.against_commit) if result.against_commit else '?'})", "",
             f"**{md_text(new)}**: {md_text(rest)}"]
    for title, rows in (("Would open", result.opened), ("Would make worse", result.worsened), ("Would fix", result.fixed)):
        if not rows:
            continue
        lines += ["", f"#### {title}", ""]
        for r in rows:
            lines.append(f"- **{md_text(r['kind'])}** {md_text(r['job'])} / {md_text(r['program'])}"
                         + (f" ({code(r['incident_id'])})" if r["incident_id"] else ""))
            for s in r["steps"]:
                first, *more = _step_lines(s, result.damaged)
                lines.append(f"    - {md_text(first)}" + (f" ({md_text(_where(s))})" if _where(s) else ""))
                lines += [f"        - {md_text(m)}" for m in more]
    if result.new_programs:
        lines += ["", "#### New programs", "", "Not in the warehouse: no baseline, nothing to compare.", ""]
        lines += [f"- {md_text(p['job'])} / {md_text(p['program'])}: " + ", ".join(code(s) for s in p["series"])
                  for p in result.new_programs]
    if result.damaged:
        lines += ["", "#### Damaged dumps", ""]
        lines += [f"- {md_text(d['status'])}: {md_text(e)}" for d in result.damaged for e in d["error"].split("\n")]
    if result.run_errors:
        lines += ["", "#### run.json errors", ""] + [f"- {md_text(e)}" for e in result.run_errors]
    return "\n".join(lines)
