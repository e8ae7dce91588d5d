"""What each page of the report site shows: contexts for the jinja2 templates (pure).

``SiteData`` holds the warehouse frames the site needs (read by ``flows.site``);
each ``*_page`` function returns the context of one template: tables as lists of
dicts with display strings, charts as Vega-Lite specs (``transforms.site.charts``).
Values stay plain data (the templates escape them, ``transforms.escape``); links,
anchors and the few cells holding HTML are ``Markup`` built with that module.

The site shows a window: the last ``history_runs`` runs (``[site] history_runs``, 0: all).
Charts and run pages cover the window; incidents open at its end or opened or closed in
it get pages; a series gets a page when it changed in the window (or is in one of those
incidents). Everything older or unchanged is still listed, on the runs, incidents and
series indexes, and every link to a run or series without a page (``SiteData.run_link``,
``SiteData.series_link``) leads to its row there. So the pages, their size and the time
to build them follow the setting and the size of a night, not the length of the history.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from functools import cached_property

import polars as pl

from transforms.escape import Markup, breakable_code, code, md_text, slug, url_path
from transforms.trends.incidents import worse_again_line
from transforms.trends.night_report import counts, counts_line, ordered
from transforms.trends.diffs import change_entries
from transforms.site import charts
from transforms.units import human_bytes, human_delta, human_ratio, human_value

# An ONNX step's outcome: the symbol, the word beside it (no emoji font shows an empty box) and its colour class.
STEP_CELL = {1.0: ("✅", "passed", "ds-good"), 0.0: ("❌", "failed", "ds-bad"), None: ("⚪", "skipped", "ds-skip")}
MAX_LINES = 12  # lines drawn in one trend chart
MAX_RUN_ROWS = 60  # regressions and structural changes listed on a run's page
DEFAULT_HISTORY_RUNS = 90  # [site] history_runs (transforms.trends.rules.Settings.site_history_runs)
ONNX_RUNS = 14  # runs in the ONNX step matrix
HEADLINE = {  # metric -> column title of the overview's headline figures
    "memory.total_bytes": "memory (total)", "memory.peak_live_bytes": "peak live", "memory.temp_bytes": "temp",
    "memory.buffer_bytes": "Inductor buffers", "kernel.launches": "kernel launches", "fusion.count": "fusions",
    "kernel.generated": "generated kernels", "kernel.fallback": "fallbacks", "onnx.graph_nodes": "ONNX nodes",
}


@dataclass
class SiteData:
    """The frames of the window (the last ``history_runs`` runs) unless said otherwise."""
    runs: pl.DataFrame  # every run: run_id, started_at, commit, run_seq
    trends: pl.DataFrame  # metric_trends change points: each (series, metric)'s first and last run and every change
    regressions: pl.DataFrame
    events: pl.DataFrame  # series_events
    rollups: pl.DataFrame  # run_rollups
    totals: pl.DataFrame  # job_totals of the latest run
    diffs: pl.DataFrame
    accepts: pl.DataFrame
    items: pl.DataFrame  # dump_items of the latest run's dumps, with series
    allocations: pl.DataFrame  # latest run: series, kind, size_bytes
    onnx_errors: pl.DataFrame  # latest run: series, exception_type, message
    onnx_ops: pl.DataFrame  # latest run: series, source, op, count
    tables: pl.DataFrame  # warehouse catalog: name, type, comment
    columns: pl.DataFrame  # name, column, data_type, comment
    warehouse_path: str
    incidents: pl.DataFrame | None = None  # open at the window's end, or opened or closed in it
    incident_steps: pl.DataFrame | None = None  # of those incidents
    incidents_at: dict[str, pl.DataFrame] | None = None  # run_id -> incidents_at(run): status there (window runs)
    commit_url: str | None = None  # settings: "{commit}" -> a commit's page
    compare_url: str | None = None  # settings: "{base}", "{head}" -> a compare page
    history_runs: int = DEFAULT_HISTORY_RUNS  # the window: the last N runs (0: every run)
    dense: pl.DataFrame | None = None  # every run of the window: ONNX steps (last ONNX_RUNS runs), fused-ratio inputs
    series_catalog: pl.DataFrame | None = None  # every series ever seen: series, job, program, kind, stage, runs, last_run
    run_totals: pl.DataFrame | None = None  # every run: dumps, failed, partial, regressions, changed_series
    older_incidents: int = 0  # incidents closed before the window (not shown)
    chart_rows: pl.DataFrame | None = None  # every run of the window for the (series, metric) pairs charted_pairs() names
    dump_paths: pl.DataFrame | None = None  # run_id, series, path of each dump of the window
    bucket_url: str | None = None  # settings: "{path}" -> a dump's page in the bucket's console

    @cached_property
    def opened_incidents(self) -> dict[tuple[str, str, str], str]:
        """(series, metric, opened run) -> the incident shown that opened with that step."""
        if self.incident_steps is None:
            return {}
        return {(s, m, r): i for s, m, r, i in self.incident_steps.group_by("series", "metric", "opened_run")
                .agg(pl.col("incident_id").min()).iter_rows()}

    @property
    def latest(self) -> str | None:
        return self.runs.get_column("run_id")[-1] if self.runs.height else None

    @property
    def previous(self) -> str | None:
        return self.runs.get_column("run_id")[-2] if self.runs.height > 1 else None

    @cached_property
    def window(self) -> pl.DataFrame:
        """The runs the site shows: the last ``history_runs`` (every run when 0)."""
        return self.runs.tail(self.history_runs) if self.history_runs else self.runs

    @cached_property
    def known_runs(self) -> frozenset[str]:
        return frozenset(self.runs.get_column("run_id").to_list())

    @cached_property
    def run_pages(self) -> frozenset[str]:
        return frozenset(self.window.get_column("run_id").to_list())

    @cached_property
    def series_pages(self) -> frozenset[str]:
        """Series with a page: a value changed (or first seen) in the window, or in an incident shown."""
        changed = self.trends.filter(pl.col("verdict") != "unchanged").get_column("series").unique().to_list()
        stepped = [] if self.incident_steps is None else self.incident_steps.get_column("series").drop_nulls().to_list()
        listed = [] if self.incidents is None else self.incidents.get_column("series").explode().drop_nulls().to_list()
        return (frozenset(changed) | frozenset(stepped) | frozenset(listed)) & self._with_trends

    @cached_property
    def _with_trends(self) -> frozenset[str]:
        return frozenset(self.trends.get_column("series").unique().to_list())

    def series_link(self, series: str, here: str = "") -> Markup:
        """Its page, or its row on the series index."""
        if series in self.series_pages:
            return series_link(series, here)
        return _link("series", "index.md", here, fragment=series_anchor(series))

    def run_link(self, run_id: str, here: str = "") -> Markup:
        """Its page, or its row on the runs index (runs before the window)."""
        if run_id in self.run_pages:
            return run_link(run_id, here)
        return _link("runs", "index.md", here, fragment=run_anchor(run_id))


def series_file(series: str) -> str:
    """Where a series' page is written, below the docs directory."""
    return f"series/{slug(series)}.md"


def run_file(run_id: str) -> str:
    return f"runs/{slug(run_id)}.md"


def series_anchor(series: str) -> str:
    """The id of a series' row on the series index (series without a page)."""
    return slug("series", series)


def run_anchor(run_id: str) -> str:
    """The id of a run's row on the runs index (runs before the window)."""
    return slug("run", run_id)


def _link(directory: str, name: str, here: str, fragment: str | None = None) -> Markup:
    """A relative link to ``directory/name`` from a page in directory ``here`` ("" = top)."""
    if here == directory:
        return url_path(name, fragment=fragment)
    return url_path(*([".."] if here else []), directory, name, fragment=fragment)


def series_link(series: str, here: str = "") -> Markup:
    return _link("series", f"{slug(series)}.md", here)


def run_link(run_id: str, here: str = "") -> Markup:
    return _link("runs", f"{slug(run_id)}.md", here)


def program_anchor(job: str, program: str) -> str:
    """The id of a program's section on the diff page."""
    return slug(job, program)


def _line(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(pl.format("{}/{}", "job", "program").alias("line"))


def _table(frame: pl.DataFrame) -> list[dict]:
    return frame.to_dicts()


def _value_cell(metric: str, value, delta, previous) -> Markup:
    change = human_delta(metric, delta) if delta else ""
    ratio = f" ({human_ratio(delta / previous)})" if delta and previous else ""
    small = Markup("<br><small>{}</small>").format(md_text(change + ratio)) if change else ""
    return md_text(human_value(metric, value)) + small


def _commit(d: SiteData, commit: str | None) -> Markup:
    """A commit as code, a link to its page when the settings give ``commit_url``."""
    if not commit:
        return md_text("?")
    if not d.commit_url:
        return code(commit)
    return Markup("[{}]({})").format(code(commit), Markup(d.commit_url.format(commit=url_path(commit))))


def dump_link(d: SiteData, path: str | None) -> Markup:
    """A dump's bucket path as code (wrapping at its slashes), a link to it when the settings
    give ``[site] bucket_url`` (``{path}``: the path, each segment percent-encoded)."""
    if not path:
        return Markup("")
    if not d.bucket_url:
        return breakable_code(path)
    # An HTML link (it also stands in the raw HTML tables); Markup.format escapes the URL for the attribute.
    return Markup('<a class="ds-dump" href="{}">{}</a>').format(
        d.bucket_url.format(path=url_path(*path.split("/"))), breakable_code(path))


def _paths_by(d: SiteData, run_id: str | None = None) -> dict[tuple[str, str], str]:
    """(run_id, series) -> the dump's bucket path (the first by name when a series has several)."""
    if d.dump_paths is None:
        return {}
    frame = d.dump_paths if run_id is None else d.dump_paths.filter(pl.col("run_id") == run_id)
    return {(r, s): p for r, s, p in frame.group_by("run_id", "series").agg(pl.col("path").min()).iter_rows()}


def _run_info(d: SiteData, run: dict) -> dict:
    """What the run's page and the overview say of a run besides its figures: its commit
    (a link when the settings say where) and its run.json tags."""
    tags = [t for t in (run.get("tags") or []) if t is not None]
    return {"commit_link": _commit(d, run.get("commit")) if run.get("commit") else None, "tags": tags}


def _run_href(d: SiteData, here: str) -> pl.Expr:
    """The page of each row's run as an HTML href from a page in directory ``here``
    (charts link by URL: mkdocs rewrites Markdown links to .html, not a chart's)."""
    hrefs = {r: str(d.run_link(r, here)).replace(".md", ".html", 1) for r in d.window.get_column("run_id").to_list()}
    return pl.col("run_id").replace_strict(hrefs, default=None, return_dtype=pl.String)


def _opened_marks(d: SiteData, rows: pl.DataFrame, here: str) -> pl.DataFrame:
    """``rows`` (metric_trends rows) with what a chart needs besides the figures: ``href``
    (the run's page), ``last`` (the latest run's row), ``mark`` (an incident opened on this
    series and metric here, else a regression that started here) and ``mark_href``."""
    rows = rows.with_columns(_run_href(d, here).alias("href"), (pl.col("run_id") == (d.latest or "")).alias("last"))
    if d.opened_incidents and "series" in rows.columns:
        opened = pl.DataFrame([(s, m, r, str(incident_link(i, here)).replace(".md", ".html", 1))
                               for (s, m, r), i in d.opened_incidents.items()],
                              schema=["series", "metric", "run_id", "_incident"], orient="row")
        rows = rows.join(opened, on=["series", "metric", "run_id"], how="left", maintain_order="left")
    else:
        rows = rows.with_columns(pl.lit(None, pl.String).alias("_incident"))
    started = (pl.col("verdict") == "regressed") & (pl.col("regressed_since") == pl.col("run_id")) \
        if "regressed_since" in rows.columns else pl.lit(False)
    return rows.with_columns(
        pl.when(pl.col("_incident").is_not_null()).then(pl.lit("incident")).when(started).then(pl.lit("regression"))
        .otherwise(None).alias("mark"),
        pl.coalesce("_incident", "href").alias("mark_href")).drop("_incident")


# ------------------------------------------------------------------ overview

def overview_page(d: SiteData) -> dict:
    run = d.latest
    info = d.runs.filter(pl.col("run_id") == run).to_dicts()[0] if run else {}
    reg = d.regressions.filter(pl.col("run_id") == run)
    programs = []
    for (job, program), rows in reg.group_by("job", "program", maintain_order=True):
        worst = rows.sort("change_ratio", descending=True, nulls_last=True).row(0, named=True)
        why = d.diffs.filter((pl.col("run_id") == run) & (pl.col("job") == job) & (pl.col("program") == program))
        programs.append({
            "job": job, "program": program, "count": rows.height,
            "diff": url_path("diff.md", fragment=program_anchor(job, program)),
            "worst_metric": worst["metric"], "worst_change": human_ratio(worst["change_ratio"]),
            "worst_value": f"{human_value(worst['metric'], worst['baseline'])} → {human_value(worst['metric'], worst['value'])}",
            "why": why.get_column("description").unique(maintain_order=True).head(2).to_list(),
            "series": d.series_link(worst["series"]),
        })
    headline = []
    totals = d.totals.filter((pl.col("run_id") == run) & pl.col("metric").is_in(list(HEADLINE)))
    for job in totals.get_column("job").unique().sort():
        cells = {}
        for r in totals.filter(pl.col("job") == job).iter_rows(named=True):
            if r["metric"] not in cells or r["stage"] in ("after_optimizations", "buffer_assignment", "post_fusion"):
                cells[r["metric"]] = _value_cell(r["metric"], r["value"], r["delta"], r["previous_value"])
        headline.append({"job": job, "cells": cells})
    metrics_shown = [m for m in HEADLINE if any(m in h["cells"] for h in headline)]
    health = _table(d.rollups.filter(pl.col("run_id") == run).select(
        "job", "dumps", "parsed", "partial", "failed", "unknown", "series", "new_series", "vanished_series",
        "changed_series", "regressions"))
    problems = [{**p, "dump": dump_link(d, p["path"])} for p in d.events.filter(
        (pl.col("run_id") == run) & (pl.col("event") != "first_run")).select("job", "series", "event", "path", "detail").to_dicts()]
    history = d.rollups.group_by("run_id", "started_at").agg(pl.col("regressions").sum(), pl.col("changed_series").sum(),
                                                            pl.col("failed").sum()).sort("started_at")
    chart = None
    rows = history.with_columns(pl.lit("regressions").alias("metric"), pl.col("regressions").cast(pl.Float64).alias("value"),
                                pl.lit("changed").alias("verdict"), pl.col("regressions").diff().cast(pl.Float64).alias("delta"),
                                pl.lit("all jobs").alias("line")).join(d.runs.select("run_id", "commit"), on="run_id")
    if history.height > 1 and not charts.is_empty(rows):  # no regression in any run: the counts line says so
        chart = charts.trend_chart(_opened_marks(d, rows, ""), title="Figures worse than their baseline, per run",
                                   metric_label="figures regressed", height=140)
    verdict = _verdict(d, run, here="")
    return {"run": run, "info": info, **_run_info(d, info), "regressions": reg.height, "programs": programs,
            "headline": headline, **verdict,
            "headline_metrics": metrics_shown, "headline_labels": HEADLINE, "health": health, "problems": problems, "previous": d.previous,
            "history_chart": chart, "accepts": d.accepts.height}


# ------------------------------------------------------------------ sections

# The trend sections of each page: (metric, title, which rows). charted_pairs() and the pages read the same.
MEMORY_SECTIONS = (
    ("memory.total_bytes", "Total bytes (buffer assignment)", pl.col("stage") == "buffer_assignment"),
    ("memory.peak_live_bytes", "Peak live bytes", None),
    ("memory.temp_bytes", "Temp bytes", pl.col("stage") == "buffer_assignment"),
    ("memory.buffer_bytes", "Inductor buffer bytes", pl.col("stage") == "post_fusion"),
)
FUSION_SECTIONS = (("fusion.count", "Inductor fused groups", pl.col("kind") == "inductor_ir"),)
KERNEL_SECTIONS = (
    ("kernel.launches", "Kernel launches (XLA, after optimizations)", pl.col("stage") == "after_optimizations"),
    ("kernel.custom_calls", "Custom calls", pl.col("stage") == "after_optimizations"),
    ("kernel.collectives", "Collectives (before optimizations)", pl.col("stage") == "before_optimizations"),
    ("kernel.generated", "Inductor generated kernels", pl.col("kind") == "inductor_output_code"),
    ("kernel.extern", "Inductor extern kernels", pl.col("kind") == "inductor_ir"),
    ("kernel.user_triton", "User Triton kernels", pl.col("kind") == "inductor_ir"),
    ("kernel.fallback", "Inductor fallback kernels", pl.col("kind") == "inductor_ir"),
)
ONNX_SECTIONS = (
    ("onnx.graph_nodes", "ONNX graph nodes", None),
    ("onnx.max_abs_diff", "Accuracy: max absolute difference (ONNX Runtime vs PyTorch)", None),
)
SECTIONS = MEMORY_SECTIONS + FUSION_SECTIONS + KERNEL_SECTIONS + ONNX_SECTIONS


def _section_lines(d: SiteData, metric: str, where: pl.Expr | None) -> pl.DataFrame:
    """The change points of a section's metric, each with its ``line`` (job/program, and the
    stage when a program has several)."""
    rows = d.trends.filter(pl.col("metric") == metric)
    if where is not None:
        rows = rows.filter(where)
    if rows.is_empty():
        return rows.with_columns(pl.lit(None, pl.String).alias("line"))
    return _line(rows).with_columns(pl.format("{}/{}", "line", "stage").alias("line")) if rows.select(
        pl.struct("job", "program").n_unique()).item() < rows.select(pl.struct("job", "program", "stage").n_unique()).item() else _line(rows)


def _fusion_kind_lines(d: SiteData) -> pl.DataFrame:
    """XLA fusions by kind after optimizations: a line per program and fusion.count.* metric."""
    kinds = d.trends.filter(pl.col("metric").str.starts_with("fusion.count") & (pl.col("kind") == "xla_hlo")
                            & (pl.col("stage") == "after_optimizations"))
    return _line(kinds).with_columns(pl.format("{} {}", "line", "metric").alias("line"))


def charted_pairs(d: SiteData) -> pl.DataFrame:
    """(series, metric) of every line the section charts draw: the site reads every run of
    the window for these (``SiteData.chart_rows``), and only the change points of the rest."""
    parts = []
    for metric, title, where in SECTIONS:
        rows = _section_lines(d, metric, where)
        if rows.height and not charts.is_empty(rows):
            shown, _ = _top_lines(_last_of_lines(rows), title)
            parts.append(rows.filter(pl.col("line").is_in(shown.implode())).select("series", "metric"))
    kinds = _fusion_kind_lines(d)
    if kinds.height:
        shown = _top_programs(kinds)
        parts.append(kinds.filter(pl.col("line").is_in(shown.implode())).select("series", "metric"))
    empty = pl.DataFrame(schema={"series": pl.String, "metric": pl.String})
    return pl.concat([empty, *parts]).unique().sort("series", "metric")


def _last_of_lines(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.sort("started_at", "run_id").group_by("line").agg(pl.all().last()).sort("line")


def _every_run(d: SiteData, rows: pl.DataFrame) -> tuple[pl.DataFrame, bool]:
    """The rows of every run of the window for the lines of ``rows`` (change points), each
    named as there; (rows, False) when the site did not read them (then drawn as steps)."""
    if d.chart_rows is None:
        return rows, False
    names = rows.select("series", "metric", "line").unique(subset=["series", "metric"])
    return d.chart_rows.join(names, on=["series", "metric"]), True


def _trend_section(d: SiteData, metric: str, title: str, where: pl.Expr | None = None, here: str = "") -> dict | None:
    rows = _section_lines(d, metric, where)
    if rows.is_empty():
        return None
    latest = _last_of_lines(rows)
    table = [{"line": r["line"], "series": d.series_link(r["series"], here), "run": r["run_id"],
              "value": human_value(metric, r["value"]), "change": human_delta(metric, r["delta"]) if r["delta"] else "",
              "verdict": r["verdict"]} for r in latest.iter_rows(named=True)]
    if charts.is_empty(rows):  # a flat line at 0 says nothing: the sentence says why there is no chart
        return {"title": title, "metric": metric, "chart": None, "table": table,
                "empty": f"Every program shows 0 for {metric} in the runs shown: nothing to draw."}
    shown, chart_title = _top_lines(latest, title)
    drawn, every_run = _every_run(d, rows.filter(pl.col("line").is_in(shown.implode())))
    chart = charts.trend_chart(_opened_marks(d, drawn, here), title=chart_title, steps=not every_run)
    return {"title": title, "metric": metric, "chart": chart, "table": table, "empty": None}


def _top_programs(kinds: pl.DataFrame, most: int = 9) -> pl.Series:
    """The lines of the fusion-kind panels: every kind of the programs regressed in the latest
    run, then of the largest (by their total fusions), ``most`` programs at most."""
    last = _last_of_lines(kinds)
    programs = (last.group_by("job", "program").agg((pl.col("verdict") == "regressed").any().alias("_reg"),
                                                    pl.col("value").abs().sum().alias("_size"))
                .sort("_reg", "_size", "job", "program", descending=[True, True, False, False]).head(most))
    return last.join(programs.select("job", "program"), on=["job", "program"]).get_column("line")


def _top_lines(latest: pl.DataFrame, title: str) -> tuple[pl.Series, str]:
    """A chart of a hundred lines reads as noise: it draws the lines regressed in the latest
    run, then the largest (``latest``: the last row of each line); tables list them all."""
    shown = (latest.sort(pl.col("verdict") == "regressed", pl.col("value").abs(), descending=True, nulls_last=True)
             .head(MAX_LINES).get_column("line"))
    return shown, title if shown.len() == latest.height else f"{title} ({shown.len()} of {latest.height}: regressed, then largest)"


def _diff_rows(d: SiteData, categories: tuple[str, ...], changes: tuple[str, ...] | None = None) -> list[dict]:
    rows = d.diffs.filter((pl.col("run_id") == d.latest) & pl.col("category").is_in(categories))
    if changes:
        rows = rows.filter(pl.col("change").is_in(changes))
    paths = _paths_by(d, d.latest)
    return [{**r, "diff": url_path("diff.md", fragment=program_anchor(r["job"], r["program"])),
             "dump": dump_link(d, paths.get((d.latest, r["series"])))}
            for r in rows.select("job", "program", "series", "kind", "category", "change", "description").iter_rows(named=True)]


def _sections(d: SiteData, specs: tuple) -> list[dict]:
    return [s for s in (_trend_section(d, metric, title, where) for metric, title, where in specs) if s]


def memory_page(d: SiteData) -> dict:
    sections = _sections(d, MEMORY_SECTIONS)
    alloc = d.allocations.group_by("program", "kind").agg(pl.col("size_bytes").sum()).sort("program", "size_bytes", descending=[False, True])
    breakdown = charts.bar_chart(alloc.with_columns(pl.format("{} · {}", "program", "kind").alias("allocation")),
                                 x="size_bytes", y="allocation", color="kind", title=f"Allocations by kind, run {d.latest}",
                                 bytes_axis=True) if alloc.height else None
    peak = d.items.filter(pl.col("category") == "peak_value").sort("bytes", descending=True, nulls_last=True).head(20)
    top = [{"program": r["program"], "value": r["label"], "bytes": human_bytes(r["bytes"]), "source": r["detail"] or "",
            "dump": dump_link(d, r.get("path"))} for r in peak.iter_rows(named=True)]
    return {"sections": sections, "breakdown": breakdown, "allocation_table": [
                {"program": p, "kind": k, "bytes": human_bytes(b)} for p, k, b in alloc.iter_rows()],
            "top_at_peak": top, "grew": _diff_rows(d, ("allocation", "peak_value"), ("grew", "appeared")), "run": d.latest}


def fusion_page(d: SiteData) -> dict:
    kinds = _fusion_kind_lines(d)
    kinds_chart = None
    if kinds.height and not charts.is_empty(kinds):
        shown = _top_programs(kinds)
        programs = kinds.select(pl.struct("job", "program").n_unique()).item()
        drawn, _ = _every_run(d, kinds.filter(pl.col("line").is_in(shown.implode())))
        title = "XLA fusions by kind (after optimizations), one panel per program" + (
            "" if shown.len() == _last_of_lines(kinds).height else f" ({drawn.select(pl.struct('job', 'program').n_unique()).item()} of {programs}: regressed, then largest)")
        kinds_chart = charts.faceted_trend_chart(
            _line(_opened_marks(d, drawn, "")).with_columns(
                pl.when(pl.col("metric") == "fusion.count").then(pl.lit("all fusions"))
                .otherwise(pl.col("metric").str.strip_prefix("fusion.count.")).alias("fusion kind")),
            title=title, facet="line", color="fusion kind", metric_label="fusions")
    ratio = _fused_ratio(d)
    groups = d.items.filter(pl.col("category") == "fused_group").sort("count", descending=True).head(20)
    return {"kinds_chart": kinds_chart, "sections": _sections(d, FUSION_SECTIONS),
            "ratio_chart": ratio, "groups": [{"program": r["program"], "group": r["label"], "count": r["count"],
                                             "bytes": human_bytes(r["bytes"]) if r["bytes"] is not None else ""}
                                            for r in groups.iter_rows(named=True)],
            "changes": _diff_rows(d, ("fusion", "fused_group")), "run": d.latest}


def _fused_ratio(d: SiteData) -> dict | None:
    """Inductor: members of fused groups / nodes before fusion, per graph and run."""
    dense = d.trends if d.dense is None else d.dense  # every run of the window: the two sides meet on run_id
    post = dense.filter((pl.col("metric") == "fusion.fused_nodes") & (pl.col("stage") == "post_fusion"))
    pre = dense.filter((pl.col("metric") == "inductor.nodes") & (pl.col("stage") == "pre_fusion"))
    if post.is_empty() or pre.is_empty():
        return None
    both = post.join(pre.select("run_id", "job", "program", pl.col("value").alias("_nodes")), on=["run_id", "job", "program"])
    ratio = (pl.col("value") / pl.col("_nodes"))
    moved = ratio != ratio.shift(1).over("job", "program")  # a step of the line (its first run: null)
    both = _line(both.sort("started_at", "run_id").with_columns(
        ratio.alias("value"), pl.lit("fusion.fused_node_ratio").alias("metric"), pl.lit(None, pl.Float64).alias("delta"),
        pl.when(moved.fill_null(True)).then(pl.lit("changed")).otherwise(pl.lit("unchanged")).alias("verdict")))
    shown, title = _top_lines(both.group_by("line").agg(pl.all().last()),
                              "Fused-node ratio (Inductor: fused members / nodes before fusion)")
    return charts.trend_chart(_opened_marks(d, both.filter(pl.col("line").is_in(shown.implode())), ""), title=title,
                              metric_label="ratio")


def kernels_page(d: SiteData) -> dict:
    sections = _sections(d, KERNEL_SECTIONS)
    latest = d.trends.filter(pl.col("run_id") == d.latest)
    fallbacks = latest.filter(pl.col("metric").str.starts_with("kernel.fallback.") & (pl.col("value") > 0))
    targets = latest.filter(pl.col("metric").str.starts_with("kernel.custom_call.") & (pl.col("stage") == "after_optimizations"))
    collectives = latest.filter(pl.col("metric").str.starts_with("kernel.collective.") & (pl.col("value") > 0))
    pick = lambda f, prefix: [{"program": r["program"], "stage": r["stage"], "name": r["metric"].removeprefix(prefix),  # noqa: E731
                               "count": human_value("n", r["value"]), "change": human_delta("n", r["delta"]) if r["delta"] else ""}
                              for r in f.sort("value", descending=True).iter_rows(named=True)]
    return {"sections": sections, "fallbacks": pick(fallbacks, "kernel.fallback."),
            "targets": pick(targets, "kernel.custom_call."), "collectives": pick(collectives, "kernel.collective."),
            "changes": _diff_rows(d, ("custom_call", "collective", "fallback_kernel", "kernel_category", "extern_kernel")),
            "run": d.latest}


def onnx_page(d: SiteData, last_runs: int = ONNX_RUNS) -> dict:
    dense = d.trends if d.dense is None else d.dense  # a cell for every run
    steps = dense.filter(pl.col("metric").str.starts_with("onnx.step.") & (pl.col("kind") == "onnx_report"))
    runs = d.window.tail(last_runs).get_column("run_id").to_list()
    matrices = []
    for (program,), rows in steps.group_by("program", maintain_order=True):
        cells = {(r["metric"].removeprefix("onnx.step."), r["run_id"]): r["value"] for r in rows.iter_rows(named=True)}
        names = sorted({s for s, _ in cells})
        matrices.append({"program": program, "runs": runs, "rows": [
            {"step": s, "cells": [STEP_CELL.get(cells.get((s, r)), STEP_CELL[None]) for r in runs]} for s in names]})
    sections = _sections(d, ONNX_SECTIONS)
    ops = d.onnx_ops.sort("count", descending=True).head(25)
    errors = [{"program": r["program"], "title": f"{r['exception_type'] or 'error'} ({r['section']})",
               "message": (r["message"] or "").strip()} for r in d.onnx_errors.iter_rows(named=True)]
    return {"matrices": matrices, "sections": sections, "ops": _table(ops.select("program", "source", "op", "count")),
            "errors": errors, "changes": _diff_rows(d, ("onnx_step", "onnx_op", "accuracy")), "run": d.latest}


# ------------------------------------------------------------------ runs, series, diff

def commit_range(d: SiteData, good: str | None, bad: str | None) -> Markup:
    """``a1b2c3 → d4e5f6``, commits as links and a compare link when the settings give templates."""
    text = _commit(d, good) + Markup(" → ") + _commit(d, bad)
    if d.compare_url and good and bad:
        text += Markup(" ([compare]({}))").format(Markup(d.compare_url.format(base=url_path(good), head=url_path(bad))))
    return text


def incident_file(incident_id: str) -> str:
    return f"incidents/{slug(incident_id)}.md"


def incident_link(incident_id: str, here: str = "") -> Markup:
    return _link("incidents", f"{slug(incident_id)}.md", here)


def _incident_diff(d: SiteData, incident: dict, here: str) -> Markup | None:
    """The incident's section on the diff page, which shows the latest run only: a link
    when the incident opened there and its program has a section (else None)."""
    if incident["opened_run"] != d.latest or (incident["job"], incident["program"]) not in _diff_programs(d):
        return None
    return url_path(*([".."] if here else []), "diff.md", fragment=program_anchor(incident["job"], incident["program"]))


def _diff_programs(d: SiteData) -> set[tuple[str, str]]:
    """(job, program) of each section of the diff page: regressed or changed in the latest run."""
    latest = pl.col("run_id") == d.latest
    return set(pl.concat([d.regressions.filter(latest).select("job", "program"),
                          d.diffs.filter(latest).select("job", "program")]).iter_rows())


def _verdict(d: SiteData, run: str | None, here: str) -> dict:
    """What a run's page and the overview say of its incidents; the counts come from
    ``incidents_at`` through ``night_report.counts``, as in the summary and the CLI."""
    at = (d.incidents_at or {}).get(run) if run else None
    if at is None or at.is_empty():
        return {"counts": Markup(counts_line(counts(pl.DataFrame(schema={"status": pl.String})))), "incident_groups": {}}
    rows = ordered(at)
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["status"], []).append({
            **r, "link": incident_link(r["incident_id"], here),
            "diff": _incident_diff(d, r, here),
            "cause_lines": (r["cause"] or "").splitlines()[:3],
            "series_link": d.series_link(r["series"][0], here) if r["series"] else None,
            "range": commit_range(d, r["last_good_commit"], r["first_bad_commit"]),
            "again": worse_again_line(r["worse_again"]) if r.get("worse_again") else None,
        })
    # Markup: the line holds only numbers and fixed words (its ** is Markdown to keep).
    return {"counts": Markup(counts_line(counts(at))), "incident_groups": groups}


def incident_pages(d: SiteData):
    """(incident_id, context) of every incident page."""
    if d.incidents is None:
        return
    steps = d.incident_steps.partition_by("incident_id", as_dict=True) if d.incident_steps is not None else {}
    for r in d.incidents.iter_rows(named=True):
        rows = steps.get((r["incident_id"],))
        table = [] if rows is None else [{
            "series": s["series"], "link": d.series_link(s["series"], "incidents"), "metric": s["metric"],
            "step": s["step"], "baseline": human_value(s["metric"], s["baseline"]),
            "value": human_value(s["metric"], s["value"]), "latest": human_value(s["metric"], s["latest_value"]),
            "change": human_delta(s["metric"], s["change"]) if s["change"] is not None else "",
            "again": ", ".join(s.get("worse_runs") or ()),  # runs where the stepped figure moved further the worse way
            "closed": s["closed_run"] or "", "detail": s["detail"] or ""} for s in rows.iter_rows(named=True)]
        yield r["incident_id"], {
            "i": r, "steps": table,
            "range": commit_range(d, r["last_good_commit"], r["first_bad_commit"]),
            "opened_link": _known_run(d, r["opened_run"], "incidents"),
            "good_link": _known_run(d, r["last_good_run"], "incidents"),
            "closed_link": _known_run(d, r["closed_run"], "incidents"),
            "diff": _incident_diff(d, r, "incidents"),
            "evidence": (evidence := _evidence(d.diffs.filter(
                (pl.col("run_id") == r["opened_run"]) & (pl.col("job") == r["job"]) & (pl.col("program") == r["program"])))),
            "causes": _cause_links((r["cause"] or "").splitlines(), evidence),
        }


def _known_run(d: SiteData, run_id: str | None, here: str) -> Markup | None:
    """A run's page or index row; None for no run or one the warehouse does not have."""
    return d.run_link(run_id, here) if run_id is not None and run_id in d.known_runs else None


def incidents_index(d: SiteData) -> dict:
    rows = [] if d.incidents is None else [
        {**r, "link": incident_link(r["incident_id"], "incidents"), "status": r["closed_how"] or "open"}
        for r in d.incidents.sort("opened_at", "impact", descending=[True, True]).iter_rows(named=True)]
    first = d.window.get_column("run_id")[0] if d.window.height else None
    return {"incidents": rows, "older": d.older_incidents, "first_run": first, "history_runs": d.history_runs}


def run_pages(d: SiteData):
    """(run_id, context) of the page of each run of the window, newest first."""
    names = ("regressions", "rollups", "events", "diffs") + (("dump_paths",) if d.dump_paths is not None else ())
    parts = {name: getattr(d, name).partition_by("run_id", as_dict=True) for name in names}
    empty = {name: getattr(d, name).clear() for name in parts}
    for run in d.window.sort("started_at", "run_id", descending=True).iter_rows(named=True):
        part = {name: parts[name].get((run["run_id"],), empty[name]) for name in parts}
        reg = part["regressions"]
        paths = dict(part["dump_paths"].group_by("series").agg(pl.col("path").min()).iter_rows()) if "dump_paths" in part else {}
        yield run["run_id"], {
            "run": run, **_run_info(d, run),
            "rollups": _table(part["rollups"].drop("run_id", "started_at")),
            "regressions": [_regression_row(d, r, "runs") for r in reg.head(MAX_RUN_ROWS).iter_rows(named=True)],
            "regression_count": reg.height,
            "events": _table(part["events"].filter(pl.col("event") != "first_run").select("job", "series", "event", "detail")),
            "diffs": [{**r, "dump": dump_link(d, paths.get(r["series"]))} for r in part["diffs"].select(
                "job", "program", "series", "kind", "stage", "description").head(MAX_RUN_ROWS).iter_rows(named=True)],
            "diff_count": part["diffs"].height,
            **_verdict(d, run["run_id"], here="runs"),
        }


def _regression_row(d: SiteData, r: dict, here: str) -> dict:
    return {"series": r["series"], "link": d.series_link(r["series"], here), "metric": r["metric"],
            "baseline": human_value(r["metric"], r["baseline"]), "value": human_value(r["metric"], r["value"]),
            "change": f"{human_delta(r['metric'], r['change'])} ({human_ratio(r['change_ratio'])})",
            "rule": r["rule"], "since": r["regressed_since"], "incident": _incident_of(d, r, here)}


def _incident_of(d: SiteData, r: dict, here: str) -> Markup | None:
    """The page of the incident a regression row belongs to: the one that opened on its
    series and metric in the run the regression started (None when none has a page)."""
    incident = d.opened_incidents.get((r["series"], r["metric"], r["regressed_since"]))
    return incident_link(incident, here) if incident else None


def accepts_page(d: SiteData) -> dict:
    """The accept log. An accept names a series, a shell pattern of series (``jax-pmap/*``)
    or an incident (series NULL); only a series and a run that have pages are links."""
    catalog = set() if d.series_catalog is None else set(d.series_catalog.get_column("series").to_list())
    rows = []
    for a in d.accepts.iter_rows(named=True):
        series, incident = a.get("series"), a.get("incident_id")
        rows.append({**a, "what": series if series is not None else f"incident {incident or '?'}",
                     "series_link": d.series_link(series) if series in catalog else None,
                     "run_link": _known_run(d, a["run_id"], "")})
    return {"accepts": rows}


def series_pages(d: SiteData):
    """(series, context) of each series page (``SiteData.series_pages``), in name order:
    every metric over the window, the latest value of each."""
    rows = d.trends.filter(pl.col("series").is_in(list(d.series_pages)))
    latest = rows.sort("started_at", "run_id").group_by("series", "metric").agg(pl.all().last()).sort("series", "metric")
    specs = charts.small_multiples_by(_opened_marks(d, rows, "series"), "series")
    last_dump = {} if d.dump_paths is None else dict(
        d.dump_paths.join(latest.sort("started_at").group_by("series").agg(pl.col("run_id").last()), on=["series", "run_id"])
        .group_by("series").agg(pl.col("path").min()).iter_rows())
    seen = {} if d.series_catalog is None else dict(d.series_catalog.select("series", "runs").iter_rows())
    patterns = [a for a in d.accepts.iter_rows(named=True) if a.get("series") is not None]
    for (series,), part in sorted(latest.partition_by("series", as_dict=True).items()):
        first = part.row(0, named=True)
        yield series, {
            "series": series, "job": first["job"], "program": first["program"], "kind": first["kind"], "stage": first["stage"],
            "table": [{"metric": r["metric"], "value": human_value(r["metric"], r["value"]), "run": r["run_id"],
                       "change": human_delta(r["metric"], r["delta"]) if r["delta"] else "",
                       "baseline": human_value(r["metric"], r["baseline"]), "verdict": r["verdict"], "rule": r["rule"]}
                      for r in part.iter_rows(named=True)],
            "metrics_chart": specs[series], "runs": seen.get(series, 0), "history_runs": d.history_runs,
            "dump": dump_link(d, last_dump.get(series)), "last_run": part.sort("started_at").get_column("run_id")[-1],
            "window_runs": d.window.height,
            "accepts": [a for a in patterns if fnmatch.fnmatchcase(series, a["series"])],  # its own and its patterns'
        }


def series_index(d: SiteData) -> dict:
    """Every series ever seen: those with a page (regressed now first), then the others
    (unchanged in the window, or not seen in it), each with an anchor links lead to."""
    catalog = d.series_catalog if d.series_catalog is not None else d.trends.group_by("series").agg(
        pl.col("job", "program", "kind", "stage").first(), pl.col("run_id").n_unique().alias("runs"),
        pl.col("run_id").last().alias("last_run"))
    regressed = (d.trends.sort("started_at", "run_id").group_by("series", "metric").agg(pl.col("verdict").last())
                 .group_by("series").agg((pl.col("verdict") == "regressed").sum().alias("regressed")))
    rows = catalog.join(regressed, on="series", how="left").with_columns(pl.col("regressed").fill_null(0))
    paged, unchanged, older = [], [], []
    for r in rows.sort("series").iter_rows(named=True):
        row = {**r, "stage": r["stage"] or ""}
        if r["series"] in d.series_pages:
            paged.append({**row, "link": series_link(r["series"], "series")})
        else:
            row["anchor"] = series_anchor(r["series"])
            (unchanged if r["last_run"] in d.run_pages else older).append(row)
    paged.sort(key=lambda r: -r["regressed"])
    return {"paged": paged, "unchanged": unchanged, "older": older, "history_runs": d.history_runs,
            "window_runs": d.window.height}


def runs_index(d: SiteData) -> dict:
    """Every run, newest first: those of the window link their page; older ones are rows with an anchor."""
    totals = d.run_totals if d.run_totals is not None else d.rollups.group_by("run_id").agg(
        pl.col("dumps", "failed", "partial", "regressions", "changed_series").sum())
    runs = d.runs.sort("started_at", "run_id", descending=True).join(totals, on="run_id", how="left", maintain_order="left")
    shown, older = [], []
    for r in runs.iter_rows(named=True):
        commit = _commit(d, r["commit"]) if r["commit"] else ""  # a link to its page when commit_url is set
        if r["run_id"] in d.run_pages:
            shown.append({**r, "commit": commit, "link": run_link(r["run_id"], "runs")})
        else:
            older.append({**r, "commit": commit, "anchor": run_anchor(r["run_id"])})
    return {"runs": shown, "older": older, "history_runs": d.history_runs}


def diff_page(d: SiteData) -> dict:
    run, prev = d.latest, d.previous
    reg = d.regressions.filter(pl.col("run_id") == run)
    diffs = d.diffs.filter(pl.col("run_id") == run)
    keys = pl.concat([reg.select("job", "program"), diffs.select("job", "program")]).unique(maintain_order=True)
    groups = []
    for job, program in keys.sort("job", "program").iter_rows():
        r = reg.filter((pl.col("job") == job) & (pl.col("program") == program))
        x = diffs.filter((pl.col("job") == job) & (pl.col("program") == program))
        groups.append({"job": job, "program": program, "anchor": program_anchor(job, program),
                       "regressions": [_regression_row(d, row, "") for row in r.iter_rows(named=True)],
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
    (the cause lines are those changes' descriptions); a line no block shows (the "… and N
    more" tail) leads to the evidence section; without evidence (no diff stored) none links."""
    anchors: dict[str, str] = {}
    for changes in evidence:
        for e in changes["entries"]:
            anchors.setdefault(e["line"], e["anchor"])
            for c in e["changes"]:
                anchors.setdefault(c["description"], e["anchor"])
    # Markup: the anchors are made here from numbers, and "#" must reach Markdown as it is.
    return [{"text": line, "href": Markup(f"#{anchors.get(line, 'evidence')}") if evidence else None} for line in cause_lines]
