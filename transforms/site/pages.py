"""What each page of the report site shows: contexts for the jinja2 templates (pure).

The verdict pages: the overview, incidents, runs, series, the accept log and the diff
(the figure pages are ``transforms.site.sections``). Each ``*_page`` function returns the
context of one template: tables as lists of dicts with display strings, charts as
Vega-Lite specs (``transforms.site.charts``). Values stay plain data (the templates escape
them, ``transforms.escape``); links, anchors and the few cells holding HTML are
``Markup`` built with that module.

One verdict everywhere: an incident's status at a run is its ``incidents_at`` row (the
same word on every page, in the CLI and the summary, with its kind beside it), every count
comes from ``night_report.counts`` over those rows or from the view ``run_verdicts``, and a
figure is worse or better than its baseline only through the incident step open on it
(``SiteData.with_states``).
"""

from __future__ import annotations

import fnmatch

import polars as pl

from transforms.escape import Markup
from transforms.site import archive, charts
from transforms.site.data import (MAX_RUN_ROWS, SiteData, commit_link, commit_range, dump_href, dump_link, html_href,
                                  incident_link, marked, program_anchor, run_info, run_link, series_anchor, series_file,
                                  series_link, state_text)
from transforms.trends.diffs import change_entries
from transforms.trends.headlines import IMPACT_TEXT, closing_text, headline
from transforms.trends.incident_rule import NOT_RUN
from transforms.trends.night_report import SECTIONS, counts, counts_line, ordered, section_of
from transforms.trends.rollups import not_regressions
from transforms.units import delta_in, human_ratio, table_unit, value_in

HEADLINE = {  # metric -> column title of the overview's headline figures
    "memory.peak_live_bytes": "peak live", "memory.temp_bytes": "temp", "memory.total_bytes": "memory (total)",
    "memory.buffer_bytes": "Inductor buffers", "kernel.collectives": "collectives", "kernel.launches": "kernel launches",
    "kernel.fallback": "fallbacks", "fusion.count": "fusions", "kernel.generated": "generated kernels",
    "onnx.graph_nodes": "ONNX nodes", "dynamo.compile_seconds": "compile s",
}
# The stage each headline figure is read at (a job sums its programs there).
_HEADLINE_STAGES = ("after_optimizations", "buffer_assignment", "live_ranges", "post_fusion", "export", "output_code")


def _value_cell(metric: str, value, delta, previous, unit: tuple[str, int]) -> Markup:
    change = delta_in(metric, delta, unit) if delta else ""
    ratio = f" ({human_ratio(delta / previous)})" if delta and previous else ""
    small = Markup("<br><small>{}</small>").format(change + ratio) if change else ""
    return Markup("{}").format(value_in(metric, value, unit)) + small


def _run_diff(d: SiteData, run_id: str | None, job: str, program: str, here: str) -> Markup | None:
    """The program's section of the structural changes on a run's page (runs with a page, where
    the program's structure changed)."""
    if run_id is None or run_id not in d.run_pages or (run_id, job, program) not in d.diff_sections:
        return None
    return run_link(run_id, here, fragment=program_anchor(job, program))


# ------------------------------------------------------------------ overview

def overview_page(d: SiteData) -> dict:
    run = d.latest
    info = d.runs.filter(pl.col("run_id") == run).to_dicts()[0] if run else {}
    headline = []
    totals = _slowest_rank(d.totals.filter((pl.col("run_id") == run) & pl.col("metric").is_in(list(HEADLINE)) & (
        pl.col("stage").is_in(_HEADLINE_STAGES) | (pl.col("metric") == "dynamo.compile_seconds"))))
    unit = table_unit(totals.select("metric", "value").iter_rows())  # one unit for the table's bytes
    for job in totals.get_column("job").unique().sort():
        cells = {r["metric"]: _value_cell(r["metric"], r["value"], r["delta"], r["previous_value"], unit)
                 for r in totals.filter(pl.col("job") == job).sort("stage").iter_rows(named=True)}
        headline.append({"job": job, "cells": cells})
    metrics_shown = [m for m in HEADLINE if any(m in h["cells"] for h in headline)]
    health = d.rollups.filter(pl.col("run_id") == run).select(
        "job", "dumps", "parsed", "partial", "failed", "unknown", "series", "new_series", "vanished_series",
        "changed_series").to_dicts()
    problems = [{**p, "dump": dump_link(d, p["path"])} for p in not_regressions(d.events, d.steps, run).select(
        "job", "series", "event", "path", "detail").to_dicts()]
    return {"run": run, "info": info, **run_info(d, info), "headline": headline, **_verdict(d, run, here=""),
            "headline_metrics": metrics_shown, "headline_labels": HEADLINE, "health": health, "problems": problems,
            "previous": d.previous, "history_chart": _incidents_chart(d), "accepts": d.accepts.height,
            "undelivered": _undelivered(d), "store_repairs": _store_repairs(d)}


def _slowest_rank(totals: pl.DataFrame) -> pl.DataFrame:
    """A job's compile seconds from its TORCH_TRACE logs: those of its slowest stage (``trace``, or a
    ``rank_<n>`` log each: ranks compile side by side, and the job waits for the slowest)."""
    seconds = pl.col("metric") == "dynamo.compile_seconds"
    slowest = totals.filter(seconds).sort("value", "stage", descending=[True, False]).unique("job", keep="first")
    return pl.concat([totals.filter(~seconds), slowest])


def _undelivered(d: SiteData) -> list[dict]:
    """The notifications of the window's runs that were not delivered (the next run retries
    them): the run, the target's digest, the tries and the last one's reason."""
    if d.undelivered is None:
        return []
    return [{**n, "run_link": d.run_link(n["run_id"]),
             "tried": f"{n['sent_at']:%Y-%m-%d %H:%M} UTC" if n["sent_at"] else "not yet",
             "error": n["error"] or "not tried yet"} for n in d.undelivered.to_dicts()]


def _store_repairs(d: SiteData) -> list[dict]:
    """The records files found damaged in the last 7 days, and what became of their content:
    parsed again from the bucket, or (its dump gone) its instruction rows lost."""
    if d.store_repairs is None:
        return []
    return [{**r, "at": f"{r['repaired_at']:%Y-%m-%d %H:%M} UTC",
             "outcome": ("parsed again from the bucket" if r["parsed_again"] else
                         "no dump of it in the bucket: its instruction rows are gone (figures, items and diffs kept)")}
            for r in d.store_repairs.to_dicts()]


def _incidents_chart(d: SiteData) -> dict | None:
    """Regressions and failures open at each run of the window (new ones apart), from run_verdicts."""
    if d.run_verdicts is None:
        return None
    counted = d.run_verdicts.join(d.window.select("run_id", "commit"), on="run_id")
    if counted.height < 2 or counted.select((pl.col("new") + pl.col("open")).sum()).item() == 0:
        return None  # nothing open in any run: the counts line says so
    hrefs = {r: html_href(d.run_link(r)) for r in counted.get_column("run_id").to_list()}
    rows = pl.concat([counted.select("run_id", "started_at", "commit", pl.lit(label).alias("line"),
                                     value.cast(pl.Float64).alias("value"))
                      for label, value in (("open (new and still open)", pl.col("new") + pl.col("open")),
                                           ("new", pl.col("new")))])
    rows = rows.sort("line", "started_at").with_columns(
        pl.lit("incidents").alias("metric"), pl.col("value").diff().over("line").alias("delta"),
        pl.col("run_id").replace_strict(hrefs, default=None, return_dtype=pl.String).alias("href"),
        (pl.col("run_id") == d.latest).alias("last"))
    return charts.trend_chart(rows, title="Regressions and failures open at each run", metric_label="incidents",
                              height=150)


# ------------------------------------------------------------------ the verdict of a run

class _Headlines:
    """What a page says an incident is (``at``): the headline it opened with, unless it is still
    open at the page's run and some of its steps closed by then: its steps still open lead, and
    how many were fixed follows (a figure fixed since is not what is wrong). A step's row is one
    life of it (a revert reopens a fixed step in a row of its own, ``reopened_run``): a step is
    open at a run when one of its lives is, fixed when it lived before and none is."""

    def __init__(self, d: SiteData):
        self.steps = {i: rows.to_dicts() for (i,), rows in d.steps.partition_by("incident_id", as_dict=True).items()}
        self.seq = dict(d.runs.select("run_id", "run_seq").iter_rows())

    def at(self, r: dict, status: str, run_id: str | None) -> str:
        if status not in ("new", "open") or run_id not in self.seq:
            return r["headline"]
        now, later = self.seq[run_id], float("inf")  # later: after every run (a life not closed)
        began = [s for s in self.steps.get(r["incident_id"], [])
                 if self.seq.get(s.get("reopened_run") or s["opened_run"], later) <= now]
        still = [s for s in began if self.seq.get(s["closed_run"], later) > now]
        fixed = len({(s["series"], s["metric"]) for s in began} - {(s["series"], s["metric"]) for s in still})
        if not fixed or not still:
            return r["headline"]
        return headline(r["job"], r["program"], still) + f"; {fixed} step{'s' if fixed != 1 else ''} fixed since it opened"


def _verdict(d: SiteData, run: str | None, here: str, headlines: _Headlines | None = None) -> dict:
    """What a run's page and the overview say of its incidents: the lists of the summary
    (``night_report.SECTIONS``), each incident with its kind; the counts line from
    ``night_report.counts``, as in the summary and the CLI."""
    at = (d.incidents_at or {}).get(run) if run else None
    if at is None or at.is_empty():
        return {"counts": Markup(counts_line(counts(None))), "incident_groups": {}, "section_titles": dict(SECTIONS)}
    groups: dict[str, list[dict]] = {}
    headlines = headlines or _Headlines(d)
    for r in ordered(at):
        key = section_of(r)
        if key is None:
            continue
        groups.setdefault(key, []).append({
            **r, "link": incident_link(r["incident_id"], here), "headline": headlines.at(r, r["status"], run),
            "diff": _run_diff(d, r["opened_run"], r["job"], r["program"], here),
            "cause_lines": (r["cause"] or "").splitlines()[:3],
            "series_link": d.series_link(r["series"][0], here) if r["series"] else None,
            "range": commit_range(d, r["last_good_commit"], r["first_bad_commit"]),
            "on_top": [{"id": i, "link": d.incident_link(i, here)} for i in (r["stacked_on"] or [])],
        })
    # Markup: the line holds only numbers and fixed words (its ** is Markdown to keep).
    return {"counts": Markup(counts_line(counts(at))), "incident_groups": groups, "section_titles": dict(SECTIONS)}


# ------------------------------------------------------------------ incidents

def _status_at_latest(d: SiteData) -> dict[str, str]:
    """Each shown incident's status at the latest run, or how it closed (closed earlier)."""
    at = (d.incidents_at or {}).get(d.latest) if d.latest else None
    listed = {} if at is None else dict(at.select("incident_id", "status").iter_rows())
    if d.incidents is None:
        return listed
    return {i: listed.get(i) or how or "open" for i, how in d.incidents.select("incident_id", "closed_how").iter_rows()}


def incident_pages(d: SiteData):
    """(incident_id, context) of every incident page."""
    if d.incidents is None:
        return
    steps = d.steps.partition_by("incident_id", as_dict=True)
    status = _status_at_latest(d)
    headlines = _Headlines(d)
    for r in d.incidents.iter_rows(named=True):
        rows = steps.get((r["incident_id"],))
        unit = _steps_unit(rows, ("baseline", "value", "latest_value"))
        table = [] if rows is None else [{
            "series": s["series"], "link": d.series_link(s["series"], "incidents"), "metric": s["metric"],
            "step": s["step"], "baseline": value_in(s["metric"], s["baseline"], unit),
            "value": value_in(s["metric"], s["value"], unit), "latest": value_in(s["metric"], s["latest_value"], unit),
            "change": delta_in(s["metric"], s["change"], unit) if s["change"] is not None else "",
            "on_top": {"id": s["stacked_on"], "link": d.incident_link(s["stacked_on"], "incidents")} if s["stacked_on"] else None,
            "closed": closing_text(s), "detail": s["detail"] or ""}
            for s in rows.iter_rows(named=True)]
        evidence = _evidence(d.diffs.filter((pl.col("run_id") == r["opened_run"]) & (pl.col("job") == r["job"])
                                            & (pl.col("program") == r["program"])))
        yield r["incident_id"], {
            "i": r, "steps": table, "status": status.get(r["incident_id"], "open"),
            "headline": headlines.at(r, status.get(r["incident_id"], "open"), d.latest),
            "range": commit_range(d, r["last_good_commit"], r["first_bad_commit"]),
            "opened_link": d.known_run(r["opened_run"], "incidents"),
            "good_link": d.known_run(r["last_good_run"], "incidents"),
            "closed_link": d.known_run(r["closed_run"], "incidents"),
            "diff": _run_diff(d, r["opened_run"], r["job"], r["program"], "incidents"),
            "on_top": [{"id": i, "link": d.incident_link(i, "incidents")} for i in (r["stacked_on"] or [])],
            "evidence": evidence, "causes": _cause_links((r["cause"] or "").splitlines(), evidence),
            "impact_means": IMPACT_TEXT,
            "reopened": [{"run": run, "link": d.known_run(run, "incidents"), "closed": closed,
                          "closed_link": d.known_run(closed, "incidents"),
                          "how": "lost" if r["kind"] == "improvement" else "fixed"}
                         for run, closed in zip(r.get("reopened_runs") or [], r.get("reopened_after") or [])],
        }


def _steps_unit(rows: pl.DataFrame | None, columns: tuple[str, ...]) -> tuple[str, int]:
    """The byte unit of a table of steps (incident_steps rows): that of its largest byte figure in ``columns``."""
    if rows is None:
        return table_unit(())
    return table_unit((m, v) for column in columns for m, v in rows.select("metric", column).iter_rows())


def incidents_index(d: SiteData) -> dict:
    status = _status_at_latest(d)
    headlines = _Headlines(d)
    rows = [] if d.incidents is None else [
        {**r, "link": incident_link(r["incident_id"], "incidents"), "status": status.get(r["incident_id"], "open"),
         "headline": headlines.at(r, status.get(r["incident_id"], "open"), d.latest),
         "on_top": [{"id": i, "link": d.incident_link(i, "incidents")} for i in (r["stacked_on"] or [])]}
        for r in d.incidents.sort("opened_at", "impact", descending=[True, True]).iter_rows(named=True)]
    first = d.window.get_column("run_id")[0] if d.window.height else None
    return {"incidents": rows, "older": d.older_incidents, "first_run": first, "history_runs": d.history_runs,
            "months": [m for m in archive.month_links(d, "incidents") if m["incidents"]]}


# ------------------------------------------------------------------ runs

def _figure_rows(d: SiteData, run_id: str, here: str) -> list[dict]:
    """Every figure of the incidents listed at a run (new, open, fixed, accepted, lost): its
    step's baseline, the value it opened at and its value at this run."""
    at = (d.incidents_at or {}).get(run_id)
    if at is None or at.is_empty():
        return []
    status = dict(at.select("incident_id", "status").iter_rows())
    steps = d.steps.filter(pl.col("incident_id").is_in(list(status)))
    now = (d.trends.filter(pl.col("run_id") == run_id).select("series", "metric", pl.col("value").alias("_now"))
           if "value" in d.trends.columns else None)
    rows = steps.join(now, on=["series", "metric"], how="left") if now is not None else steps.with_columns(pl.lit(None).alias("_now"))
    rows = rows.sort(pl.col("step") == "improvement", pl.col("impact"), descending=[False, True])
    unit = _steps_unit(rows.head(MAX_RUN_ROWS), ("baseline", "value", "_now"))  # the rows the page lists
    return [{"series": s["series"], "link": d.series_link(s["series"], here), "metric": s["metric"],
             "incident": {"id": s["incident_id"], "link": incident_link(s["incident_id"], here)},
             "status": status[s["incident_id"]], "step": s["step"], "baseline": value_in(s["metric"], s["baseline"], unit),
             "value": value_in(s["metric"], s["value"], unit),
             "now": value_in(s["metric"], s["_now"], unit) if s["_now"] is not None else "",
             "bad": s["step"] != "improvement"} for s in rows.iter_rows(named=True)]


def run_pages(d: SiteData):
    """(run_id, context) of the page of each run of the window, newest first."""
    names = ("rollups", "events", "diffs") + (("dump_paths",) if d.dump_paths is not None else ())
    parts = {name: getattr(d, name).partition_by("run_id", as_dict=True) for name in names}
    empty = {name: getattr(d, name).clear() for name in parts}
    headlines = _Headlines(d)
    for run in d.window.sort("started_at", "run_id", descending=True).iter_rows(named=True):
        part = {name: parts[name].get((run["run_id"],), empty[name]) for name in parts}
        paths = dict(part["dump_paths"].group_by("series").agg(pl.col("path").min()).iter_rows()) if "dump_paths" in part else {}
        figures = _figure_rows(d, run["run_id"], "runs")
        at = (d.incidents_at or {}).get(run["run_id"])
        per_job = {} if at is None else {job: counts(rows) for (job,), rows in at.partition_by("job", as_dict=True).items()}
        jobs = [{**r, "new": per_job.get(r["job"], {}).get("new", 0), "open": per_job.get(r["job"], {}).get("open", 0)}
                for r in part["rollups"].drop("run_id", "started_at").to_dicts()]
        changes = part["diffs"].select("job", "program", "series", "kind", "stage", "description")
        programs = [{"job": job, "program": program, "anchor": program_anchor(job, program),
                     "rows": [{**r, "dump": dump_link(d, paths.get(r["series"]))} for r in rows.head(MAX_RUN_ROWS).to_dicts()],
                     "more": max(0, rows.height - MAX_RUN_ROWS)}
                    for (job, program), rows in sorted(changes.partition_by("job", "program", as_dict=True).items())]
        yield run["run_id"], {
            "run": run, **run_info(d, run), "jobs": jobs,
            "figures": figures[:MAX_RUN_ROWS], "figure_count": len(figures),
            "events": part["events"].filter(pl.col("event") != "first_run").select("job", "series", "event", "detail").to_dicts(),
            "programs": programs, "diff_count": changes.height,
            **_verdict(d, run["run_id"], here="runs", headlines=headlines),
        }


def run_rows(d: SiteData) -> pl.DataFrame:
    """Every run, newest first, with its totals and its verdict's counts (run_verdicts)."""
    totals = d.run_totals if d.run_totals is not None else d.rollups.group_by("run_id").agg(
        pl.col("dumps", "failed", "partial", "changed_series").sum())
    runs = d.runs.sort("started_at", "run_id", descending=True).join(totals, on="run_id", how="left", maintain_order="left")
    if d.run_verdicts is not None:
        runs = runs.join(d.run_verdicts.drop("started_at"), on="run_id", how="left", maintain_order="left")
    return runs


def runs_index(d: SiteData, rows: pl.DataFrame | None = None) -> dict:
    """The runs of the window, newest first, each with its verdict's counts and a link to its
    page; the older ones by month, each month a link to its archive page."""
    shown = [{**r, "commit": commit_link(d, r["commit"]) if r["commit"] else "",  # a link to its page when commit_url is set
              "link": run_link(r["run_id"], "runs")}
             for r in (run_rows(d) if rows is None else rows).iter_rows(named=True) if r["run_id"] in d.run_pages]
    return {"runs": shown, "months": archive.month_links(d, "runs"), "history_runs": d.history_runs}


# ------------------------------------------------------------------ series

def accepts_page(d: SiteData) -> dict:
    """The accept log. An accept names a series, a shell pattern of series (``jax-pmap/*``)
    or an incident (series NULL): a series, a run and an incident the warehouse holds are
    links (to a page, or to their row on an index or archive page). Each lists the incidents
    it closed (``accepts.closed_incidents``, written from the incidents its aggregation
    computed); ``closed`` is None for an accept logged before that was recorded."""
    catalog = set() if d.series_catalog is None else set(d.series_catalog.get_column("series").to_list())
    rows = []
    for a in d.accepts.iter_rows(named=True):
        series, incident, closed = a.get("series"), a.get("incident_id"), a.get("closed_incidents")
        rows.append({**a, "what": series if series is not None else f"incident {incident or '?'}",
                     "what_link": (d.series_link(series) if series in catalog else None) if series is not None
                     else (d.incident_link(incident) if incident else None),
                     "run_link": d.known_run(a["run_id"], ""),
                     "closed": None if closed is None else [
                         {"id": i, "link": d.incident_link(i)} for i in closed]})
    return {"accepts": rows}


def series_pages(d: SiteData):
    """(series, context) of each series page (``SiteData.series_pages``), in name order:
    every metric over the window, the latest value of each with the incident open on it,
    and the incidents of the series.

    A page says nothing that moves with the window alone, so that a night that moved none of
    its figures leaves it as it was (``flows/publish/site_mkdocs.py`` then does not build it):
    its chart's ends are drawn by ``assets/charts.js`` (``charts.WindowEnds``), and for a
    series seen in the latest run, that run, how many runs it was seen in and its dump there
    are written by ``assets/status.js`` from ``series_data`` (``assets/series-data.js``)."""
    rows = d.states.filter(pl.col("series").is_in(list(d.series_pages)))
    latest = rows.sort("started_at", "run_id").group_by("series", "metric").agg(pl.all().last()).sort("series", "metric")
    ends = charts.WindowEnds(first=d.window.get_column("run_id")[0] if d.window.height else None, latest=d.latest,
                             root="../")
    # Each page's table and chart in one unit: the table's (its latest values, changes and baselines), so
    # that the page moves with its figures, not with the runs the window holds.
    units = {series: table_unit((m, v) for m, *values in part.select("metric", "value", "delta", "baseline").iter_rows()
                                for v in values)
             for (series,), part in latest.partition_by("series", as_dict=True).items()}
    specs = charts.small_multiples_by(marked(d, rows, "series"), "series", ends=ends, unit=units)
    last_dump = _last_dumps(d, latest)  # named in the page for a series the latest run did not see
    catalog = _catalog(d)
    patterns = [a for a in d.accepts.iter_rows(named=True) if a.get("series") is not None]
    status = _status_at_latest(d)
    headlines = _Headlines(d)
    incidents = {} if d.incidents is None else {
        r["incident_id"]: {**r, "headline": headlines.at(r, status.get(r["incident_id"], "open"), d.latest)}
        for r in d.incidents.iter_rows(named=True)}
    by_series = {s: sorted(set(ids)) for s, ids in d.steps.group_by("series").agg(pl.col("incident_id")).iter_rows()}
    archived: dict[str, list[dict]] = {}  # series -> its incidents closed before the window, newest first
    for r in ([] if d.archived_incidents is None else reversed(d.archived_incidents.to_dicts())):
        for s in r["series"] or []:
            archived.setdefault(s, []).append({**r, "link": d.incident_link(r["incident_id"], "series")})
    for (series,), part in sorted(latest.partition_by("series", as_dict=True).items()):
        first = part.row(0, named=True)
        last_run = part.sort("started_at").get_column("run_id")[-1]
        seen = catalog.get(series, {})
        current = last_run == d.latest  # seen in the latest run: that run's facts come from series-data.js
        unit = units.get(series, ("B", 1))
        yield series, {
            "series": series, "job": first["job"], "program": first["program"], "kind": first["kind"], "stage": first["stage"],
            "table": [{"metric": r["metric"], "value": value_in(r["metric"], r["value"], unit),
                       "run": None if r["run_id"] == d.latest else r["run_id"],
                       "change": delta_in(r["metric"], r["delta"], unit) if r["delta"] else "",
                       "baseline": value_in(r["metric"], r["baseline"], unit) if r["step"] else "",
                       "incident": {"text": state_text(r["step"], r["incident_id"]),
                                    "link": incident_link(r["incident_id"], "series"), "bad": r["step"] != "improvement"}
                       if r["step"] else None, "rule": r["rule"]}
                      for r in part.iter_rows(named=True)],
            "incidents": [{**incidents[i], "link": incident_link(i, "series"), "status": status.get(i, "open")}
                          for i in by_series.get(series, []) if i in incidents],
            "archived": [a for a in archived.get(series, []) if a["link"] is not None],
            "metrics_chart": specs.get(series), "history_runs": d.history_runs, "window_runs": d.window.height,
            "first_run": seen.get("first_run"), "current": current, "key": series_key(series),
            "runs": None if current else seen.get("runs", 0),
            "last_run": None if current else last_run, "dump": None if current else dump_link(d, last_dump.get(series)),
            "accepts": [a for a in patterns if fnmatch.fnmatchcase(series, a["series"])],  # its own and its patterns'
        }


def series_data(d: SiteData) -> dict[str, dict]:
    """``assets/series-data.js``: for each series with a page that the latest run saw (by
    ``series_key``), what its page says of that run and changes with every night: how many
    runs it was seen in, and its dump there (its bucket path, and the link to it when
    ``[site] bucket_url`` says where). ``assets/status.js`` writes them into the page as text."""
    catalog = _catalog(d)
    names = sorted(s for s, r in catalog.items() if s in d.series_pages and r["last_run"] == d.latest)
    if not names:
        return {}
    latest = d.states.filter(pl.col("series").is_in(names) & (pl.col("run_id") == d.latest))
    paths = _last_dumps(d, latest)
    return {series_key(s): {"runs": catalog[s]["runs"], "dump": paths.get(s),
                            "dump_href": dump_href(d, paths[s]) if s in paths else None} for s in names}


def series_key(series: str) -> str:
    """The key of a series in ``series_data`` and on its page: its page's file name (a slug), not
    its name, which a page can only hold escaped."""
    return series_file(series).removeprefix("series/").removesuffix(".md")


def _catalog(d: SiteData) -> dict[str, dict]:
    """series -> its catalog row (runs seen, first and last run)."""
    if d.series_catalog is None:
        return {}
    return {r["series"]: r for r in d.series_catalog.select("series", "runs", "first_run", "last_run").iter_rows(named=True)}


def _last_dumps(d: SiteData, latest: pl.DataFrame) -> dict[str, str]:
    """series -> its dump's bucket path (the first by name) in the last run of ``latest``'s rows."""
    if d.dump_paths is None:
        return {}
    last = latest.sort("started_at").group_by("series").agg(pl.col("run_id").last())
    return dict(d.dump_paths.join(last, on=["series", "run_id"]).group_by("series").agg(pl.col("path").min()).iter_rows())


def series_index(d: SiteData) -> dict:
    """Every series ever seen: those with a page (with an incident open now first), then the
    others (changed beyond the pages shown, unchanged in the window, or not seen in it: each
    part's first ``MAX_INDEX_ROWS``, ``SiteData.unpaged``), each with an anchor links lead to."""
    open_now = (d.steps.filter(pl.col("closed_run").is_null()).group_by("series")
                .agg(pl.col("incident_id").n_unique().alias("open_incidents")))
    paged_rows = d.catalog.filter(pl.col("series").is_in(list(d.series_pages)))
    rows = paged_rows.join(open_now, on="series", how="left").with_columns(pl.col("open_incidents").fill_null(0))

    def shown(r: dict) -> dict:
        # The latest run is None: its cell is filled in the browser, so that a night leaves the page as it
        # was unless a series came, went, or changed its incidents (the count of runs is on its page).
        return {**r, "stage": r["stage"] or "", "last_run": None if r["last_run"] == d.latest else r["last_run"]}

    paged = [{**shown(r), "link": series_link(r["series"], "series")} for r in rows.sort("series").iter_rows(named=True)]
    paged.sort(key=lambda r: -r["open_incidents"])
    parts = {name: [{**shown(r), "anchor": series_anchor(r["series"])} for r in rows] for name, (rows, _) in d.unpaged.items()}
    return {"paged": paged, **parts, "more": {name: more for name, (_, more) in d.unpaged.items()},
            "history_runs": d.history_runs, "window_runs": d.window.height, "max_series_pages": d.max_series_pages}


# ------------------------------------------------------------------ the diff of the latest run

def diff_page(d: SiteData) -> dict:
    run, prev = d.latest, d.previous
    diffs = d.diffs.filter(pl.col("run_id") == run)
    opened = d.steps.filter(pl.col("opened_run") == (run or ""))
    keys = pl.concat([opened.select("job", "program"), diffs.select("job", "program")]).unique(maintain_order=True)
    groups = []
    for job, program in keys.sort("job", "program").iter_rows():
        mine = opened.filter((pl.col("job") == job) & (pl.col("program") == program))
        x = diffs.filter((pl.col("job") == job) & (pl.col("program") == program))
        groups.append({"job": job, "program": program, "anchor": program_anchor(job, program),
                       "opened": [{"id": i, "link": incident_link(i, "")}
                                  for i in mine.get_column("incident_id").unique().sort().to_list()],
                       "changes": _evidence(x)})
    return {"run": run, "previous": prev, "groups": groups}


_NO_EXCERPT = {  # why a side of a change shows no excerpt
    "lines": "no line of the dump is known for this item",
    "read": "not read: the dump was not in the bucket (or no bucket was given) when its items were computed",
}


def _evidence(diffs: pl.DataFrame) -> list[dict]:
    """Per series of ``diffs`` (rows of the diffs table), its changes as shown
    (``diffs.change_entries``: significance order, a rescale as one entry), each with
    the dump path, lines and excerpt of both sides."""
    def side(c: dict, name: str) -> dict | None:
        if c.get(f"{name}_path") is None or c["change"] == ("vanished" if name == "after" else "appeared"):
            return None
        lines, excerpt = c.get(f"lines_{name}"), c.get(f"excerpt_{name}")
        return {"name": name, "path": c[f"{name}_path"], "lines": (lines or "").replace("-", "–").replace(",", ", "),
                "excerpt": excerpt, "note": None if excerpt else _NO_EXCERPT["read" if lines else "lines"]}

    return [{"series": s, "entries": [
        {**e, "anchor": f"change-{i}-{k}",
         "sides": [x for x in (side(e["changes"][0], "before"), side(e["changes"][0], "after")) if x]}
        for k, e in enumerate(change_entries(rows))]}
        for i, ((s,), rows) in enumerate(diffs.group_by("series", maintain_order=True))]


def _cause_links(cause_lines: list[str], evidence: list[dict]) -> list[dict]:
    """Each line of an incident's cause with the anchor of its change's block on the page
    (the cause lines are those changes' descriptions); a line no block shows (an error, the
    "… and N more" tail) leads to the evidence section; without evidence (no diff stored) none links."""
    anchors: dict[str, str] = {}
    for changes in evidence:
        for e in changes["entries"]:
            anchors.setdefault(e["line"], e["anchor"])
            for c in e["changes"]:
                anchors.setdefault(c["description"], e["anchor"])
    # Markup: the anchors are made here from numbers, and "#" must reach Markdown as it is.
    return [{"text": line, "href": Markup(f"#{_anchor_of(line, anchors)}") if evidence else None} for line in cause_lines]


def _anchor_of(line: str, anchors: dict[str, str]) -> str:
    """A failed ONNX step's cause line carries its error after the description; the steps that
    then did not run are one line, which leads to the first of them."""
    if line.startswith(NOT_RUN):
        first = line.removeprefix(NOT_RUN).split(", ")[0]
        return next((a for text, a in anchors.items() if text.startswith(f"ONNX step {first} ")), "evidence")
    return anchors.get(line) or next((a for text, a in anchors.items() if line.startswith(text + ": ")), "evidence")



# ------------------------------------------------------------------ the query page

_EXAMPLE_METRIC = "memory.temp_bytes"  # the figure the example follows over the runs, where the warehouse has it


def query_page(d: SiteData) -> dict:
    """The query page: the warehouse by its file's name (the path it has on the machine that
    built the site is no reader's business, and a published site carries the file at its root),
    its tables and columns, and examples whose series is one this warehouse holds (the program
    with the most temp bytes in the latest run, else any series), or a placeholder when none."""
    latest = d.states.filter(pl.col("run_id") == (d.latest or ""))
    example = (latest.filter(pl.col("metric") == _EXAMPLE_METRIC).sort("value", "series", descending=[True, False],
                                                                        nulls_last=True).head(1).select("series", "metric"))
    if example.is_empty():
        example = latest.sort("series", "metric").head(1).select("series", "metric")
    series, metric = example.row(0) if example.height else ("JOB/PROGRAM/KIND/STAGE", _EXAMPLE_METRIC)
    return {"warehouse": d.warehouse_path.replace("\\", "/").rsplit("/", 1)[-1], "latest": d.latest,
            "example_series": series, "example_metric": metric, "tables": d.tables.to_dicts(),
            "columns": {name: rows.to_dicts() for (name,), rows in d.columns.group_by("name", maintain_order=True)},
            "records_runs": d.records_runs or {"whole": [], "partial": [], "without": 0}}
