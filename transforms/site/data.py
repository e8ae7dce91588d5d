"""What the report site reads, and the links and marks every page shares (pure).

``SiteData`` holds the warehouse frames the site needs (read by ``flows.publish.site``). The
site shows a window: the last ``history_runs`` runs (``[site] history_runs``, 0: all).
Charts and run pages cover the window; incidents open at its end or opened or closed in
it get pages; a series gets a page when it changed in the window (or is in one of those
incidents), at most ``max_series_pages`` of them (those of open incidents first, by impact,
then of the other incidents, then the latest changed). Runs before the window and the incidents closed before it have a row and an
anchor on a compact archive page, one a calendar month (``transforms.site.archive``); series
without a page have a row on the series index. Every link to a run, an incident or a series
without a page (``SiteData.run_link``, ``SiteData.incident_link``, ``SiteData.series_link``)
leads to that row.

One verdict: whether a figure is worse or better than its baseline is said only by the
incident steps open on it (``with_states``, ``transforms.trends.incident_rule.figure_states``),
and every count by ``incidents_at`` / ``run_verdicts``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import polars as pl

from transforms.escape import Markup, breakable_code, code, md_text, slug, url_path
from transforms.trends.incident_rule import figure_states

MAX_LINES = 12  # lines (or panels) drawn in one trend chart
MAX_RUN_ROWS = 60  # figures and structural changes listed on a run's page
# The structural items the pages list (the memory page's values at peak, the fusion page's fused
# groups): of a big night's ~50,000 items (fusions, collectives...), the few hundred a page shows.
ITEM_CATEGORIES = ("peak_value", "fused_group")
DEFAULT_HISTORY_RUNS = 90  # [site] history_runs (transforms.trends.rules.Settings.site_history_runs)
# [site] max_series_pages: series pages at most, whatever the number of programs in the input (a
# log of 20,000 compiled functions made 20,044 pages); the others are rows of the series index.
DEFAULT_MAX_SERIES_PAGES = 2000  # a big night (bench-scale) has ~1,400 series
# Rows of one program table on a figure page (a section's numbers, the compile page's programs, a
# breakdown) and of each part of the series index without a page: the rest is counted, with the
# query that lists it. A page's size follows what a reader reads, not how many programs there are.
MAX_TABLE_ROWS = 1000
MAX_INDEX_ROWS = 2000
MAX_BREAKDOWN_ROWS = 5000  # a big night's custom calls or collectives (a row per program and name)
ONNX_RUNS = 14  # runs in the ONNX step matrix
# What a figure's open step is called on the pages: one word per kind, as everywhere.
STATE_WORDS = {"regression": "regression", "failure": "failure", "improvement": "improvement"}


@dataclass
class SiteData:
    """The frames of the window (the last ``history_runs`` runs) unless said otherwise."""
    runs: pl.DataFrame  # every run: run_id, started_at, commit, run_seq
    trends: pl.DataFrame  # metric_trends change points: each (series, metric)'s first and last run and every change
    events: pl.DataFrame  # series_events
    rollups: pl.DataFrame  # run_rollups
    totals: pl.DataFrame  # job_totals of the latest run
    diffs: pl.DataFrame
    accepts: pl.DataFrame
    items: pl.DataFrame  # dump_items of the latest run's dumps in ITEM_CATEGORIES, with series
    allocations: pl.DataFrame  # latest run: series, kind, size_bytes
    onnx_errors: pl.DataFrame  # latest run: series, exception_type, message
    onnx_ops: pl.DataFrame  # latest run: series, source, op, count
    tables: pl.DataFrame  # warehouse catalog: name, type, comment
    columns: pl.DataFrame  # name, column, data_type, comment
    warehouse_path: str
    incidents: pl.DataFrame | None = None  # open at the window's end, or opened or closed in it
    incident_steps: pl.DataFrame | None = None  # of those incidents
    incidents_at: dict[str, pl.DataFrame] | None = None  # run_id -> incidents_at(run): status there (window runs)
    run_verdicts: pl.DataFrame | None = None  # every run: the view run_verdicts (its counts)
    commit_url: str | None = None  # settings: "{commit}" -> a commit's page
    compare_url: str | None = None  # settings: "{base}", "{head}" -> a compare page
    history_runs: int = DEFAULT_HISTORY_RUNS  # the window: the last N runs (0: every run)
    max_series_pages: int = DEFAULT_MAX_SERIES_PAGES  # series pages at most (the rest: rows of the series index)
    dense: pl.DataFrame | None = None  # every run of the window: ONNX steps (last ONNX_RUNS runs), fused-ratio inputs
    series_catalog: pl.DataFrame | None = None  # every series ever seen: series, job, program, kind, stage, runs, first_run, last_run
    run_totals: pl.DataFrame | None = None  # every run: dumps, failed, partial, changed_series
    # incidents closed before the window (no page: a row on their month's archive page), in opened order
    archived_incidents: pl.DataFrame | None = None
    chart_rows: pl.DataFrame | None = None  # every run of the window for the (series, metric) pairs the sections draw
    dump_paths: pl.DataFrame | None = None  # run_id, series, path of each dump of the window
    bucket_url: str | None = None  # settings: "{path}" -> a dump's page in the bucket's console
    # notifications of the window's runs not delivered (owed: retried by the next run): run_id, target, new_incidents,
    # attempts, sent_at, error
    undelivered: pl.DataFrame | None = None
    # records files the writer found damaged in the last 7 days: file, reason, repaired_at, parsed_again
    store_repairs: pl.DataFrame | None = None
    # the runs whose records rows the records tables hold, latest first (flows.warehouse.records.held_runs):
    # "whole" (no content compacted), "partial" (some compacted) and "without" (how many runs hold none)
    records_runs: dict[str, list[str] | int] | None = None
    # the window's TORCH_TRACE logs: run_id, path, status, held (the records tables hold their rows)
    trace_dumps: pl.DataFrame | None = None
    # their graph breaks, recompiles and failed compiles (records: the runs held): run_id, path, series, program,
    # what (graph_break, skip, other, recompile, failure), reason, detail, frame_file, frame_line, frame_function,
    # lineno, end_lineno
    compile_reasons: pl.DataFrame | None = None
    # the latest run's rank logs' collective schedules (the ranks page): series, detail (their rank_profile item)
    rank_schedules: pl.DataFrame | None = None
    # the latest run's TORCH_TRACE records for the compile views (transforms.site.compile_view), each row with its
    # dump's path: compile_rows (torch_trace_compiles, forward and backward, with stage, series, job, program and the
    # kernels of its output code), compile_artifacts (torch_trace_artifacts with their texts), compile_guards
    compile_rows: pl.DataFrame | None = None
    compile_artifacts: pl.DataFrame | None = None
    compile_guards: pl.DataFrame | None = None

    @cached_property
    def steps(self) -> pl.DataFrame:
        if self.incident_steps is not None:
            return self.incident_steps
        return pl.DataFrame(schema={"incident_id": pl.String, "series": pl.String, "metric": pl.String, "step": pl.String,
                                    "baseline": pl.Float64, "opened_run": pl.String, "closed_run": pl.String})

    def with_states(self, rows: pl.DataFrame) -> pl.DataFrame:
        """``rows`` (metric_trends rows) with the incident step open on each at its run
        (incident_id, step, baseline, opened_run; nulls where none is)."""
        return figure_states(rows, self.steps, self.runs)

    @cached_property
    def states(self) -> pl.DataFrame:
        """``trends`` with their states."""
        return self.with_states(self.trends)

    @cached_property
    def opened_incidents(self) -> dict[tuple[str, str, str], str]:
        """(series, metric, opened run) -> the incident shown that opened with that step."""
        return {(s, m, r): i for s, m, r, i in self.steps.group_by("series", "metric", "opened_run")
                .agg(pl.col("incident_id").min()).iter_rows()}

    @cached_property
    def diff_sections(self) -> frozenset[tuple[str, str, str]]:
        """(run_id, job, program) of every program's section of structural changes on a run page."""
        return frozenset(self.diffs.select("run_id", "job", "program").unique().iter_rows())

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
        """Series with a page: a value changed (or first seen) in the window, or in an incident
        shown; at most ``max_series_pages``, in this order: the series of open incidents (the
        greatest impact first), of the other incidents shown, then those changed latest."""
        return frozenset(self.series_with_pages_wanted[:self.max_series_pages])

    @cached_property
    def series_with_pages_wanted(self) -> list[str]:
        """Every series that would have a page without the cap, in the order the cap keeps them."""
        ranked: dict[str, int] = {}  # series -> rank (first wins)
        if self.incidents is not None:
            shown = self.incidents.sort(pl.col("closed_run").is_not_null(), pl.col("impact"), "incident_id",
                                        descending=[False, True, False], nulls_last=True)
            for (series,) in shown.select(pl.col("series").explode()).drop_nulls().iter_rows():
                ranked.setdefault(series, len(ranked))
        for (series,) in self.steps.sort(pl.col("closed_run").is_not_null(), "opened_run", descending=[False, True],
                                         nulls_last=True).select("series").drop_nulls().iter_rows():
            ranked.setdefault(series, len(ranked))
        changed = (self.trends.filter(pl.col("changed")).join(self.runs.select("run_id", "run_seq"), on="run_id")
                   .group_by("series").agg(pl.col("run_seq").max()).sort("run_seq", "series", descending=[True, False]))
        for series in changed.get_column("series").to_list():
            ranked.setdefault(series, len(ranked))
        return [s for s in ranked if s in self._with_trends]

    @cached_property
    def _with_trends(self) -> frozenset[str]:
        return frozenset(self.trends.get_column("series").unique().to_list())

    def series_link(self, series: str, here: str = "") -> Markup:
        """Its page, or its row on the series index (the index itself beyond its rows)."""
        if series in self.series_pages:
            return series_link(series, here)
        return _link("series", "index.md", here, fragment=series_anchor(series) if series in self.series_listed else None)

    @cached_property
    def series_listed(self) -> frozenset[str]:
        """Series without a page that have a row on the series index (``unpaged``)."""
        return frozenset(r["series"] for rows, _ in self.unpaged.values() for r in rows)

    @cached_property
    def unpaged(self) -> dict[str, tuple[list[dict], int]]:
        """The series index's parts without a page: ``capped`` (changed in the window, beyond
        ``max_series_pages``, in the order the cap keeps them), ``unchanged`` (in the window) and
        ``older`` (not seen in it), by name: each part's first ``MAX_INDEX_ROWS`` catalog rows,
        and how many more it has."""
        catalog = self.catalog
        paged, wanted = self.series_pages, self.series_with_pages_wanted
        rank = {s: i for i, s in enumerate(wanted)}
        rest = catalog.filter(~pl.col("series").is_in(list(paged)))
        capped = (rest.filter(pl.col("series").is_in(wanted))
                  .with_columns(pl.col("series").replace_strict(rank, default=None).alias("_rank")).sort("_rank").drop("_rank"))
        others = rest.filter(~pl.col("series").is_in(wanted)).sort("series")
        in_window = pl.col("last_run").is_in(list(self.run_pages))
        return {name: (part.head(MAX_INDEX_ROWS).to_dicts(), max(0, part.height - MAX_INDEX_ROWS))
                for name, part in (("capped", capped), ("unchanged", others.filter(in_window)),
                                   ("older", others.filter(~in_window)))}

    @cached_property
    def catalog(self) -> pl.DataFrame:
        """Every series ever seen: series, job, program, kind, stage, runs, first_run, last_run."""
        if self.series_catalog is not None:
            return self.series_catalog
        return self.trends.group_by("series").agg(
            pl.col("job", "program", "kind", "stage").first(), pl.col("run_id").n_unique().alias("runs"),
            pl.col("run_id").first().alias("first_run"), pl.col("run_id").last().alias("last_run"))

    def run_link(self, run_id: str, here: str = "") -> Markup:
        """Its page, or its row on its month's archive page (runs before the window)."""
        if run_id in self.run_pages or run_id not in self.archive_month_of:
            return run_link(run_id, here)
        return archive_link(self.archive_month_of[run_id], here, fragment=run_anchor(run_id))

    @cached_property
    def archive_month_of(self) -> dict[str, str]:
        """run_id -> the archive page (``YYYY-MM``, the month it started in) of each run before the window."""
        older = self.runs.join(self.window.select("run_id"), on="run_id", how="anti")
        return dict(older.select("run_id", pl.col("started_at").dt.strftime("%Y-%m")).iter_rows())

    @cached_property
    def archived_ids(self) -> dict[str, str]:
        """incident_id -> the run it opened in, of each archived incident (its row is on that run's archive page)."""
        if self.archived_incidents is None:
            return {}
        return dict(self.archived_incidents.select("incident_id", "opened_run").iter_rows())

    @property
    def older_incidents(self) -> int:
        """How many incidents were closed before the window (archived)."""
        return len(self.archived_ids)

    def incident_link(self, incident_id: str, here: str = "") -> Markup | None:
        """Its page, or its row on its archive page (closed before the window); None for an id
        the warehouse does not hold."""
        if incident_id in self.archived_ids:
            month = self.archive_month_of.get(self.archived_ids[incident_id])
            if month is not None:
                return archive_link(month, here, fragment=incident_anchor(incident_id))
        if incident_id in self.paged_ids:
            return incident_link(incident_id, here)
        return None

    @cached_property
    def paged_ids(self) -> frozenset[str]:
        return frozenset(paged_incidents(self))

    def known_run(self, run_id: str | None, here: str) -> Markup | None:
        """A run's page or index row; None for no run or one the warehouse does not have."""
        return self.run_link(run_id, here) if run_id is not None and run_id in self.known_runs else None


# ------------------------------------------------------------------ files, anchors, links

def series_file(series: str) -> str:
    """Where a series' page is written, below the docs directory."""
    return f"series/{slug(series)}.md"


def run_file(run_id: str) -> str:
    return f"runs/{slug(run_id)}.md"


def incident_file(incident_id: str) -> str:
    return f"incidents/{slug(incident_id)}.md"


def series_anchor(series: str) -> str:
    """The id of a series' row on the series index (series without a page)."""
    return slug("series", series)


def run_anchor(run_id: str) -> str:
    """The id of a run's row on its archive page (runs before the window)."""
    return slug("run", run_id)


def incident_anchor(incident_id: str) -> str:
    """The id of an incident's row on its archive page (incidents closed before the window)."""
    return slug("incident", incident_id)


def archive_file(month: str) -> str:
    """Where the archive page of a month (``YYYY-MM``) is written."""
    return f"archive/{slug(month)}.md"


def program_anchor(job: str, program: str) -> str:
    """The id of a program's section on the diff page and on run pages."""
    return slug(job, program)


def _link(directory: str, name: str, here: str, fragment: str | None = None) -> Markup:
    """A relative link to ``directory/name`` from a page in directory ``here`` ("" = top)."""
    if here == directory:
        return url_path(name, fragment=fragment)
    return url_path(*([".."] if here else []), directory, name, fragment=fragment)


def series_link(series: str, here: str = "") -> Markup:
    return _link("series", f"{slug(series)}.md", here)


def run_link(run_id: str, here: str = "", fragment: str | None = None) -> Markup:
    return _link("runs", f"{slug(run_id)}.md", here, fragment=fragment)


def incident_link(incident_id: str, here: str = "") -> Markup:
    return _link("incidents", f"{slug(incident_id)}.md", here)


def archive_link(month: str, here: str = "", fragment: str | None = None) -> Markup:
    return _link("archive", f"{slug(month)}.md", here, fragment=fragment)


def html_href(link: Markup) -> str:
    """A Markdown page link as the built site's HTML href (charts link by URL: mkdocs rewrites
    Markdown links to .html, not a chart's)."""
    path, sep, fragment = str(link).partition("#")
    return path.replace(".md", ".html", 1) + sep + fragment


def commit_link(d: SiteData, commit: str | None) -> Markup:
    """A commit as code, a link to its page when the settings give ``commit_url``."""
    if not commit:
        return md_text("?")
    if not d.commit_url:
        return code(commit)
    return Markup("[{}]({})").format(code(commit), Markup(d.commit_url.format(commit=url_path(commit))))


def commit_range(d: SiteData, good: str | None, bad: str | None) -> Markup:
    """``a1b2c3 → d4e5f6``, commits as links and a compare link when the settings give templates."""
    text = commit_link(d, good) + Markup(" → ") + commit_link(d, bad)
    if d.compare_url and good and bad:
        text += Markup(" ([compare]({}))").format(Markup(d.compare_url.format(base=url_path(good), head=url_path(bad))))
    return text


def dump_link(d: SiteData, path: str | None) -> Markup:
    """A dump's bucket path as code (wrapping at its slashes), a link to it when the settings
    give ``[site] bucket_url`` (``{path}``: the path, each segment percent-encoded)."""
    if not path:
        return Markup("")
    if not d.bucket_url:
        return breakable_code(path)
    # An HTML link (it also stands in the raw HTML tables); Markup.format escapes the URL for the attribute.
    return Markup('<a class="ds-dump" href="{}">{}</a>').format(dump_href(d, path), breakable_code(path))


def dump_href(d: SiteData, path: str) -> str | None:
    """The URL of a dump in the bucket (``[site] bucket_url``, each path segment percent-encoded), or None."""
    return d.bucket_url.format(path=url_path(*path.split("/"))) if d.bucket_url else None


def paths_by(d: SiteData, run_id: str | None = None) -> dict[tuple[str, str], str]:
    """(run_id, series) -> the dump's bucket path (the first by name when a series has several)."""
    if d.dump_paths is None:
        return {}
    frame = d.dump_paths if run_id is None else d.dump_paths.filter(pl.col("run_id") == run_id)
    return {(r, s): p for r, s, p in frame.group_by("run_id", "series").agg(pl.col("path").min()).iter_rows()}


def run_info(d: SiteData, run: dict) -> dict:
    """What the run's page and the overview say of a run besides its figures: its commit
    (a link when the settings say where) and its run.json tags."""
    tags = [t for t in (run.get("tags") or []) if t is not None]
    return {"commit_link": commit_link(d, run.get("commit")) if run.get("commit") else None, "tags": tags}


def state_text(step: str | None, incident_id: str | None) -> str:
    """A figure's state as the pages and tooltips say it: ``regression I-1a2b3c4d`` (empty when
    no step is open on it)."""
    return f"{STATE_WORDS.get(step, step)} {incident_id}" if step and incident_id else ""


def marked(d: SiteData, rows: pl.DataFrame, here: str) -> pl.DataFrame:
    """Trend rows (with ``with_states``' columns) with what a chart needs besides the figures:
    ``href`` (the run's page), ``last`` (the latest run's row), ``mark`` ("incident": one opened
    on this figure here), ``mark_href`` (its page), ``state`` (the open step's kind and
    incident) and ``open`` ("regression"/"failure"/"improvement" on a line's last point when
    an incident is open on it there: the chart marks it)."""
    hrefs = {r: html_href(d.run_link(r, here)) for r in d.window.get_column("run_id").to_list()}
    rows = rows.with_columns(pl.col("run_id").replace_strict(hrefs, default=None, return_dtype=pl.String).alias("href"),
                             (pl.col("run_id") == (d.latest or "")).alias("last"))
    links = {i: html_href(incident_link(i, here)) for i in set(d.opened_incidents.values())}
    if d.opened_incidents and "series" in rows.columns:
        opened = pl.DataFrame([(s, m, r, links[i]) for (s, m, r), i in d.opened_incidents.items()],
                              schema=["series", "metric", "run_id", "_incident"], orient="row")
        rows = rows.join(opened, on=["series", "metric", "run_id"], how="left", maintain_order="left")
    else:
        rows = rows.with_columns(pl.lit(None, pl.String).alias("_incident"))
    step = pl.col("step") if "step" in rows.columns else pl.lit(None, pl.String)
    incident = pl.col("incident_id") if "incident_id" in rows.columns else pl.lit(None, pl.String)
    pages = {i: html_href(incident_link(i, here)) for i in paged_incidents(d)}
    is_open = pl.col("last") & step.is_not_null()
    return rows.with_columns(
        pl.when(pl.col("_incident").is_not_null()).then(pl.lit("incident")).otherwise(None).alias("mark"),
        pl.coalesce("_incident", "href").alias("mark_href"),
        pl.when(step.is_not_null()).then(pl.concat_str(step, pl.lit(" "), incident)).otherwise(pl.lit("")).alias("state"),
        pl.when(is_open).then(step).otherwise(None).alias("open"),
        pl.when(is_open).then(incident.replace_strict(pages, default=None, return_dtype=pl.String)).alias("open_href"),
    ).drop("_incident")


def paged_incidents(d: SiteData) -> list[str]:
    """The incidents with a page (those ``SiteData.incidents`` holds)."""
    return [] if d.incidents is None else d.incidents.get_column("incident_id").to_list()
