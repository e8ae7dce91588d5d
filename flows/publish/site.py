"""The report site: warehouse → jinja2 templates (``site_templates/``) → mkdocs-material.

``build_site(warehouse, out)`` reads the derived tables, renders every page into a
scratch mkdocs project (``<out>.src/``: pages, the metric docs, the assets: the
vega/vega-lite/vega-embed bundle from vl-convert, cached by version in ``<out>.src/cache/``; the
compiled templates in ``<out>.src/templates-cache/``, ``site_mkdocs.CompiledTemplates``; the
chart loader, the stylesheet; the theme override), and builds it with mkdocs ``--strict`` into
``out``, replaced atomically: only the pages whose Markdown changed are built again, the others
carried over from the published site (``flows.publish.site_mkdocs``). What changes every night
on every page, the status line's build time and latest run, is one small script,
``assets/status-data.js``, that ``assets/status.js`` writes into each page; what changes every
night on a series page (the latest run, its chart's ends, how many runs saw it, its dump
there) comes from it and ``assets/series-data.js`` (``transforms.site.pages.series_pages``), so a
night that moved no figure builds the pages that speak of last night and no other. Charts are
Vega-Lite specs with aggregated data in each page's chart file (``<page>.charts.js``, beside it:
``chart_file``), which moves with the window while the page does not; nothing is fetched from
the internet (no CDN, no Google Fonts).

Every value from the warehouse is data: the Jinja environment escapes each ``{{ value }}``
for Markdown (``transforms.escape``, through ``finalize``) unless a helper of that module
already made it ``Markup``, and templates are only ever loaded from ``site_templates/``,
never built from data. Each page carries a Content-Security-Policy (the theme override in
``site_templates/overrides/``): scripts only from the site itself, no inline script or
event handler; the charts' specs are JSON in each page's chart file, a classic script that
sets ``window.dumpscopeCharts``, which ``assets/charts.js`` reads.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import polars as pl

from flows.errors import CommandError
from flows.locks import exclusive
from flows.publish import site_mkdocs
from flows.verdict import incident_reader
from flows.warehouse import records
from flows.warehouse.reads import frame_of
from flows.warehouse.store import connect_readonly
from transforms import escape
from transforms.escape import Markup
from transforms.site import data as site_data
from transforms.site import archive, compile_view, pages, ranks, sections

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "site_templates"
DOCS = ROOT / "docs"
HOOKS = Path(__file__).with_name("site_hooks.py")  # mkdocs hooks: HTML tables Markdown skips
VEGA_BUNDLE = "assets/vega-bundle.js"
# The chart loader, the stylesheet, the status line's ages, and the theme's inline scripts as files (the CSP
# forbids inline scripts).
ASSETS = ("charts.js", "dumpscope.css", "status.js", "tables.js", "moved.js", "material-base.js", "material-palette.js",
          "material-content.js")
STATUS_DATA = "assets/status-data.js"  # what the pages' status line says (site_status), written each night
CHARTS_SUFFIX = ".charts.js"  # a page's chart file, beside it (chart_file)
SERIES_DATA = "assets/series-data.js"  # what the series pages say of the latest run (pages.series_data), likewise
# What every page's HTML depends on besides its Markdown (with mkdocs.yml): a change builds the whole site.
BUILD_INPUTS = [TEMPLATES, HOOKS, Path(site_mkdocs.__file__)]
MOVED = "archive/moved.json"  # the pages of archived runs and incidents -> their rows (the 404 page's script reads it)


class SiteBusy(CommandError, exit_code=3):
    """Another process is building (or publishing) this site."""


def one_builder(out: Path, *, wait: bool):
    """Held while a process builds the site at ``out`` and publishes it (``<out>.lock``): two
    runs at once build one after the other, or the second exits 3 (``SiteBusy``) without ``wait``."""
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = out.with_name(out.name + ".lock")
    return exclusive(lock, wait=wait, busy=lambda holder: SiteBusy(
        f"site {out} is being built by another process (pid {holder}, lock {lock}); try again later, or --wait"))


@dataclass
class SiteResult:
    out: Path
    pages: int = 0
    charts: int = 0
    pages_built: int = 0  # pages mkdocs built (the others' HTML carried over from the published site)
    full: bool = True  # every page built (no usable previous site: full_reason says why)
    full_reason: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)


READER_MEMORY = "256MB"  # DuckDB's memory while the site reads (its default: 80 % of the machine)
# Columns of metric_trends the pages use (charts, tables, incidents).
TREND_COLUMNS = ("run_id", "started_at", "commit", "series", "job", "kind", "stage", "program", "metric", "value",
                 "delta", "rule", "changed")
# Metrics whose pages need every run of the window, not only the change points.
DENSE = ("(metric LIKE 'onnx.step.%' AND kind = 'onnx_report' AND list_contains(?, run_id))"
         " OR (metric = 'fusion.fused_nodes' AND stage = 'post_fusion') OR (metric = 'inductor.nodes' AND stage = 'pre_fusion')")
# The TORCH_TRACE logs of the window's runs, and whether the records tables still hold their rows.
TRACE_DUMPS = """SELECT run_id, path, status, dump_id IN (SELECT dump_id FROM records_files) AS held
                 FROM dumps WHERE kind = 'torch_trace' AND run_id IN (SELECT unnest(?::VARCHAR[]))"""
# Each rank log's collective schedules of each of its programs in the latest run (the ranks page): the
# rank_profile item of the series' own program (a log's items stand beside each of its series).
RANK_SCHEDULES = """SELECT DISTINCT s.series, s.program, i.key, i.detail FROM dump_items i JOIN dump_series s USING (path)
                    WHERE s.run_id = ? AND s.kind = 'torch_trace' AND starts_with(s.stage, 'rank_')
                      AND i.category = 'rank_profile' AND ends_with(i.key, ' | collective schedules')"""
# Graph breaks, recompiles and failed compiles of those logs (the records tables: the last
# keep_records_runs runs), each with its run, dump, program (its series) and user frame.
COMPILE_REASONS = """
    WITH traced AS (SELECT run_id, path, dump_id FROM dumps
                    WHERE kind = 'torch_trace' AND run_id IN (SELECT unnest(?::VARCHAR[]))),
    found AS (
        SELECT dump_id, program, CAST(kind AS VARCHAR) AS what, coalesce(reason, CAST(kind AS VARCHAR)) AS reason,
               explanation AS detail, user_filename AS frame_file, user_lineno AS frame_line,
               user_function AS frame_function, lineno, end_lineno
        FROM torch_trace_graph_breaks
        UNION ALL
        SELECT dump_id, program, 'recompile', recompile_reason, NULL, co_filename, co_firstlineno, co_name, lineno, lineno
        FROM torch_trace_compiles WHERE recompile_reason IS NOT NULL
        UNION ALL
        SELECT dump_id, program, 'failure', fail_type, fail_reason, fail_user_frame_filename, fail_user_frame_lineno,
               co_name, lineno, lineno
        FROM torch_trace_compiles WHERE fail_type IS NOT NULL)
    SELECT t.run_id, t.path, s.series, coalesce(s.series_program, f.program) AS program, f.what, f.reason, f.detail,
           f.frame_file, f.frame_line, f.frame_function, f.lineno, f.end_lineno
    FROM found f JOIN traced t USING (dump_id) LEFT JOIN dump_series s ON s.path = t.path AND s.program = f.program"""

# The latest run's compiles, artifacts and guards (records tables) for the compile views
# (transforms.site.compile_view), each with its dump's path, and the compiles with their series.
LATEST_TRACES = "SELECT dump_id, path, stage FROM dumps WHERE kind = 'torch_trace' AND run_id = ?"
COMPILE_ROWS = f"""
    WITH traced AS ({LATEST_TRACES}),
    kernels AS (SELECT dump_id, compile_id, phase, sum(kernels) AS kernels FROM torch_trace_output_code
                WHERE dump_id IN (SELECT dump_id FROM traced) GROUP BY ALL)
    SELECT t.path, t.stage, s.series, s.job, coalesce(s.series_program, c.program) AS program, c.compile_id,
           c.tlparse_id, c.attempt, CAST(c.phase AS VARCHAR) AS phase, c.entire_frame_compile_time_s,
           c.backend_compile_time_s, c.code_gen_time_s, c.backward_compile_time_s, c.guard_count,
           c.shape_env_guard_count, c.output_codes, c.fail_type, c.fail_reason, c.restart_reasons, c.recompile_reason,
           c.fx_cache_hits, c.fx_cache_misses, c.aotautograd_cache_hits, c.aotautograd_cache_misses, c.lineno, k.kernels
    FROM torch_trace_compiles c JOIN traced t USING (dump_id)
    LEFT JOIN kernels k ON k.dump_id = c.dump_id AND k.compile_id = c.compile_id AND k.phase = c.phase
    LEFT JOIN dump_series s ON s.path = t.path AND s.program = c.program
    WHERE c.phase IN ('forward', 'backward') ORDER BY t.path, c.lineno"""
# Of the compiles with a view only (parameters: the latest run, then each compile's path and compile id).
_VIEWED = "JOIN (SELECT unnest(?::VARCHAR[]) AS v_path, unnest(?::VARCHAR[]) AS v_compile) v ON t.path = v.v_path"
COMPILE_ARTIFACTS = f"""
    SELECT t.path, a.compile_id, a.tlparse_id, a.attempt, a.kind, a.lineno, a.end_lineno, a.payload_bytes,
           a.payload_lines, a.complete, a.text, a.text_lines, a.text_cut
    FROM torch_trace_artifacts a JOIN ({LATEST_TRACES}) t USING (dump_id) {_VIEWED} AND a.compile_id = v.v_compile
    ORDER BY t.path, a.lineno"""
COMPILE_GUARDS = f"""
    SELECT t.path, g.compile_id, g.tlparse_id, CAST(g.source AS VARCHAR) AS source, g.guard_type, g.guard, g.guarded,
           g.reason, g.user_code, g.user_filename, g.user_lineno, g.user_function, g.lineno
    FROM torch_trace_guards g JOIN ({LATEST_TRACES}) t USING (dump_id) {_VIEWED} AND g.compile_id = v.v_compile
    ORDER BY t.path, g.lineno"""


def read_site_data(warehouse: Path, settings=None) -> site_data.SiteData:
    """The frames the pages need, read for the last ``settings.site_history_runs`` runs only
    (``[site] history_runs``; 0: every run): the window is a filter in DuckDB, and of
    metric_trends only the change points come back (``site_data.SiteData.trends``). Frames a
    page lists rows of, cut to its first N, are read in a fixed order: a page's bytes change
    only when what it shows does (only changed pages are built again)."""
    history = getattr(settings, "site_history_runs", site_data.DEFAULT_HISTORY_RUNS)
    con = connect_readonly(warehouse, memory_limit=READER_MEMORY)  # a cache, mostly: the window's queries stream
    try:
        incident_reader.check_schema(con)
        q = lambda sql, params=None: frame_of(con, sql, params)  # noqa: E731
        runs = q('SELECT run_id, started_at, "commit", tags FROM runs ORDER BY started_at, run_id').with_row_index("run_seq")
        window = runs.tail(history) if history else runs
        shown = window.get_column("run_id").to_list()
        latest = shown[-1] if shown else ""
        in_window = "run_id IN (SELECT unnest(?::VARCHAR[]))"  # parameters: [shown]
        latest_dumps = "SELECT path FROM dumps WHERE run_id = ?"  # parameters: [latest]
        with_series = "JOIN dump_series s USING (path)"
        cols = ", ".join(f't."{c}"' for c in TREND_COLUMNS)
        by_line = "ORDER BY t.series, t.metric, t.started_at, t.run_id"
        # Incidents that matter in the window: open at its end, or opened or closed in it.
        shown_incident = ("closed_run IS NULL OR opened_run IN (SELECT unnest(?::VARCHAR[])) "
                          "OR closed_run IN (SELECT unnest(?::VARCHAR[]))")  # parameters: [shown, shown]
        incidents = q(f"SELECT * FROM incidents WHERE {shown_incident} ORDER BY opened_at, impact DESC, incident_id",
                      [shown, shown])
        data = site_data.SiteData(
            runs=runs,
            history_runs=history,
            max_series_pages=getattr(settings, "site_max_series_pages", site_data.DEFAULT_MAX_SERIES_PAGES),
            # The change points of each series and metric in the window: its first and last
            # run there and every run where it moved (what charts.change_points keeps; an incident
            # opens only where a figure moved).
            # Which rows, on narrow columns; then their columns, by rowid (joining the wide rows of
            # the whole window took a GiB for a year of big nights; this ~250 MiB).
            trends=q(f"""WITH ends AS (SELECT series, metric, min((started_at, run_id)) AS first, max((started_at, run_id)) AS last
                                       FROM metric_trends WHERE {in_window} GROUP BY series, metric),
                         keep AS (SELECT t.rowid AS row FROM metric_trends t JOIN ends USING (series, metric)
                                  WHERE t.{in_window} AND (t.changed OR (t.started_at, t.run_id) IN (ends.first, ends.last)))
                         SELECT {cols} FROM metric_trends t WHERE rowid IN (SELECT row FROM keep) {by_line}""",
                     [shown, shown]),
            dense=q(f"SELECT {cols} FROM metric_trends t WHERE {in_window} AND ({DENSE}) {by_line}",
                    [shown, shown[-site_data.ONNX_RUNS:]]),
            series_catalog=q("""SELECT series, any_value(job) AS job, any_value(series_program) AS program,
                                       any_value(kind) AS kind, any_value(stage) AS stage, count(DISTINCT run_id) AS runs,
                                       arg_min(run_id, (r.started_at, run_id)) AS first_run,
                                       arg_max(run_id, (r.started_at, run_id)) AS last_run
                                FROM dump_series JOIN runs r USING (run_id) GROUP BY series ORDER BY series"""),
            events=q(f"SELECT * FROM series_events WHERE {in_window} ORDER BY ALL",
                     [shown]).with_columns(pl.col("event").cast(pl.String)),
            rollups=q(f"SELECT * FROM run_rollups WHERE {in_window} ORDER BY ALL", [shown]),
            run_totals=q("""SELECT run_id, sum(dumps) AS dumps, sum(failed) AS failed, sum(partial) AS partial,
                                   sum(changed_series) AS changed_series
                            FROM run_rollups GROUP BY run_id ORDER BY run_id"""),
            run_verdicts=incident_reader.run_verdicts(con),
            totals=q("SELECT * FROM job_totals WHERE run_id = ? ORDER BY ALL", [latest]),
            diffs=q(f"SELECT * FROM diffs WHERE {in_window} ORDER BY ALL", [shown]),
            accepts=q("SELECT * FROM accepts ORDER BY accepted_at"),
            items=q(f"SELECT i.*, s.series, s.job, s.series_program AS program FROM dump_items i {with_series} "
                    f"WHERE i.path IN ({latest_dumps}) AND i.category IN (SELECT unnest(?::VARCHAR[])) "
                    "ORDER BY i.path, i.category, i.key", [latest, list(site_data.ITEM_CATEGORIES)]),
            allocations=q(f"""SELECT s.series, s.job, s.series_program AS program, a.kind, a.size_bytes
                FROM buffer_allocations a JOIN dumps d USING (dump_id) {with_series}
                WHERE d.path IN ({latest_dumps}) AND d.stage = 'buffer_assignment' ORDER BY ALL""", [latest]),
            onnx_errors=q(f"""SELECT DISTINCT s.series_program AS program, e.section, e.exception_type, e.message
                FROM onnx_errors e JOIN dumps d USING (dump_id) {with_series} WHERE d.path IN ({latest_dumps})
                ORDER BY ALL""", [latest]),
            onnx_ops=q(f"""SELECT s.series_program AS program, o.source, o.op, o.count FROM onnx_op_counts o
                JOIN dumps d USING (dump_id) {with_series} WHERE d.path IN ({latest_dumps}) ORDER BY ALL""", [latest]),
            trace_dumps=q(TRACE_DUMPS, [shown]),
            compile_reasons=q(COMPILE_REASONS, [shown]),
            rank_schedules=q(RANK_SCHEDULES, [latest]),
            compile_rows=q(COMPILE_ROWS, [latest]),
            tables=q("""SELECT table_name AS name, 'table' AS type, comment FROM duckdb_tables() WHERE schema_name = 'main'
                        UNION ALL SELECT view_name, 'view', comment FROM duckdb_views() WHERE schema_name = 'main' AND NOT internal
                        ORDER BY name"""),
            columns=q("""SELECT table_name AS name, column_name AS column, data_type, comment FROM duckdb_columns()
                         WHERE schema_name = 'main' ORDER BY table_name, column_index"""),
            warehouse_path=str(Path(warehouse).resolve()),
            incidents=incidents,
            incident_steps=q("SELECT * FROM incident_steps WHERE incident_id IN (SELECT unnest(?::VARCHAR[])) "
                             "ORDER BY opened_run, incident_id, impact DESC, metric, series",
                             [incidents.get_column("incident_id").to_list()]),
            # The rest closed before the window: a row each on the archive pages (the columns they show).
            archived_incidents=q(f"""SELECT incident_id, job, program, kind, opened_run, opened_at, closed_run, closed_how,
                                            headline, metrics, series, accepted_by, accepted_note, stacked_on
                                     FROM incidents WHERE NOT ({shown_incident}) ORDER BY opened_at, incident_id""",
                                 [shown, shown]),
            # The one definition of new / open / fixed at a run (flows.verdict.incident_reader, the summary, the
            # CLI), asked for the runs the site shows.
            incidents_at=_incidents_at(q, shown),
            commit_url=getattr(settings, "commit_url", None), compare_url=getattr(settings, "compare_url", None),
            bucket_url=getattr(settings, "site_bucket_url", None),
            dump_paths=q(f"SELECT DISTINCT run_id, series, path FROM dump_series WHERE {in_window} ORDER BY ALL", [shown]),
            undelivered=q(f"""SELECT n.run_id, n.target, n.new_incidents, n.attempts, n.sent_at, n.error
                              FROM notifications n JOIN runs r USING (run_id)
                              WHERE NOT coalesce(n.delivered, false) AND n.{in_window}
                              ORDER BY r.started_at, n.run_id, n.target""", [shown]),
            # Parsed again: a dump of the content was loaded after the repair (its records may
            # since have been compacted as superseded, as an undamaged night's would be).
            store_repairs=q("""SELECT file, reason, repaired_at, EXISTS (SELECT 1 FROM dumps d WHERE d.dump_id = r.dump_id
                                                                        AND d.ingested_at >= r.repaired_at) AS parsed_again
                               FROM store_repairs r
                               WHERE repaired_at >= (SELECT max(ingested_at) FROM dumps) - INTERVAL 7 DAY
                               ORDER BY repaired_at DESC, file"""),
        )
        # Every run of the window for the lines the section charts draw (a point a night);
        # the pages need only the change points of everything else.
        pairs = sections.charted_pairs(data)
        held = records.held_runs(con)
        data.records_runs = {"whole": list(held.whole), "partial": list(held.partial), "without": held.without}
        data.chart_rows = q(f"""SELECT {cols} FROM metric_trends t
                                JOIN (SELECT unnest(?::VARCHAR[]) AS p_series, unnest(?::VARCHAR[]) AS p_metric) p
                                  ON t.series = p.p_series AND t.metric = p.p_metric
                                WHERE t.{in_window} {by_line}""",
                            [pairs.get_column("series").to_list(), pairs.get_column("metric").to_list(), shown])
        # The artifacts (texts included) and guards of the compiles that have a view (at most [site]
        # max_series_pages programs: a log of 20,000 functions holds ten times more).
        viewed = (data.compile_rows.filter(pl.col("series").is_in(compile_view.viewed_series(data)))
                  .select("path", "compile_id").unique().sort("path", "compile_id"))
        ids = [latest, viewed.get_column("path").to_list(), viewed.get_column("compile_id").to_list()]
        data.compile_artifacts, data.compile_guards = q(COMPILE_ARTIFACTS, ids), q(COMPILE_GUARDS, ids)
        return data
    finally:
        con.close()


def _incidents_at(q, runs: list[str]) -> dict[str, pl.DataFrame]:
    """run_id -> ``incidents_at(run)`` (the macro: incident_status at that run with each
    incident's columns, in its order) for each of ``runs``, in one query: the macro once a
    run evaluated incident_status over the whole history each time (90 runs of a 730-run
    warehouse: 35 CPU seconds, against 0.3 here)."""
    rows = q("""SELECT s.status, s.age_runs, i.*, s.run_id AS _at_run FROM incident_status s JOIN incidents i USING (incident_id)
                WHERE s.run_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY impact DESC, incident_id""", [runs])
    parts = rows.partition_by("_at_run", as_dict=True, maintain_order=True)
    empty = rows.clear().drop("_at_run")
    return {r: parts[(r,)].drop("_at_run") if (r,) in parts else empty for r in runs}


# Jinja filters that would hand back text escaped for HTML only (Markup that ``finalize``
# trusts) or unescaped: the site has no use for them, so a template cannot reach for them.
_UNSAFE_FILTERS = ("safe", "tojson", "urlize", "xmlattr")


def _join(items, separator: str = "") -> escape.Markup:
    return escape.finalize(separator).join(escape.finalize(item) for item in items)


def _environment(data: site_data.SiteData | None = None) -> jinja2.Environment:
    """The site's Jinja environment: every ``{{ value }}`` is escaped for Markdown unless it
    is ``Markup`` made by ``transforms.escape`` (or a macro's output). ``series_link`` and
    ``run_link`` lead to a page, or to the index row of a series or run without one."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             autoescape=True, finalize=escape.finalize,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    counter = {"n": 0, "specs": {}, "file": ""}  # the page being rendered: its charts and their file's name

    def chart(spec: dict | None, caption: str = "") -> escape.Markup:
        """A chart container (charts.js draws it); raw HTML, so it must start a line. Its spec
        goes into the page's chart file (``chart_file``, written by ``_render_pages``), which the
        page's first chart loads: the spec holds a window of runs' rows, which move every night,
        and a page whose figures did not move keeps its HTML (only changed pages are built again)."""
        if not spec:
            return escape.Markup("")
        counter["n"] += 1  # per page: an id says nothing about other pages (_render_pages resets it)
        n = counter["n"]
        counter["specs"][f"chart-{n}"] = spec
        loader = "" if n > 1 else '<!--ds-raw-->\n<script src="{src}"></script>\n<!--/ds-raw-->\n'
        return escape.Markup(
            '<div class="ds-chart vega-embed" id="chart-{n}" role="img" aria-label="{label}"></div>\n' + loader
        ).format(n=n, label=escape.html_attr(caption), src=escape.html_attr(counter["file"]))

    for name in _UNSAFE_FILTERS:
        env.filters.pop(name, None)
    env.filters.update(e=escape.md_text, escape=escape.md_text, forceescape=escape.md_text, join=_join)
    env.globals.update(chart=chart, code=escape.code, pre=escape.pre, sql=escape.sql_literal, shell=escape.shell_word,
                       breakable=escape.breakable, breakable_code=escape.breakable_code,
                       series_link=data.series_link if data else site_data.series_link,
                       run_link=data.run_link if data else site_data.run_link)
    env.globals["_chart_counter"] = counter
    return env


def build_site(warehouse: Path, out: Path, settings=None) -> SiteResult:
    """Render the whole site and build what changed into ``out`` (``settings``: commit and
    compare URL templates, ``transforms.trends.rules.Settings``)."""
    out = Path(out).resolve()
    result = SiteResult(out=out)
    with _stage(result, "read"):
        data = read_site_data(warehouse, settings)
    src = out.with_name(out.name + ".src")
    docs = src / "docs"
    with _stage(result, "render"):
        for part in (docs, src / "overrides"):  # written anew; src/cache (the Vega bundle) and the compiled templates stay
            shutil.rmtree(part, ignore_errors=True)
        (docs / "assets").mkdir(parents=True)
        env = _environment(data)
        env.bytecode_cache = site_mkdocs.template_cache(src / "mkdocs.yml")
        written, result.charts = _render_pages(env, data, docs)
        result.pages = len(written)
    with _stage(result, "assets"):
        _write_assets(docs, src / "cache")
        (src / "mkdocs.yml").write_text(env.get_template("mkdocs.yml.j2").render(
            has_runs=data.runs.height > 0, hooks=Markup(json.dumps(str(HOOKS)))), encoding="utf-8")
        (docs / STATUS_DATA).write_text(status_script(site_status(data, datetime.now(timezone.utc))), encoding="utf-8")
        (docs / SERIES_DATA).write_text(series_script(pages.series_data(data)), encoding="utf-8")
    with _stage(result, "mkdocs"):
        outcome = site_mkdocs.build(src / "mkdocs.yml", out, BUILD_INPUTS)
    result.pages_built, result.full, result.full_reason = outcome.pages_built, outcome.full, outcome.reason
    return result


@contextmanager
def _stage(result: SiteResult, name: str):
    """Wall seconds into ``result.seconds[name]``, CPU seconds of the process (DuckDB's threads
    too) into ``result.cpu_seconds[name]``."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    yield
    result.seconds[name], result.cpu_seconds[name] = time.perf_counter() - t0, time.process_time() - cpu0


def site_status(d: site_data.SiteData, built_at: datetime) -> dict:
    """What every page's status line says: when the site was built, and the latest run
    (its id, start, commit and page, relative to the site's root); and the runs at the
    window's ends (``window_ends``: "s" its first, "n" the latest), where the series pages'
    charts begin and end."""
    status = {"built_at": built_at.strftime("%Y-%m-%dT%H:%M:%SZ"), "built": built_at.strftime("%Y-%m-%d %H:%M UTC")}
    if d.latest is not None:
        run = d.runs.row(-1, named=True)
        status |= {"run": run["run_id"], "run_at": run["started_at"].strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "run_started": run["started_at"].strftime("%Y-%m-%d %H:%M UTC"), "commit": run["commit"] or "",
                   "run_href": site_data.html_href(site_data.run_link(run["run_id"]))}
        # The window's first run and the latest, where the series pages' charts end (assets/charts.js).
        status["window_ends"] = {end: {"run": r["run_id"], "t": r["started_at"].strftime("%Y-%m-%dT%H:%M"),
                                       "commit": r["commit"] or "", "href": site_data.html_href(site_data.run_link(r["run_id"]))}
                                 for end, r in (("s", d.window.row(0, named=True)), ("n", run))}
    return status


def status_script(status: dict) -> str:
    """``assets/status-data.js``: ``status`` as a global that ``assets/status.js`` writes into the
    page's status line as text (a classic script: it loads from ``file://`` too). JSON escaped
    like a page's chart data; the only file whose bytes change on a night that changed nothing."""
    return ("// Generated by flows/publish/site.py each night: what every page's status line says.\n"
            f"window.dumpscopeStatus = {escape.json_script(status)};\n")


def series_script(series: dict) -> str:
    """``assets/series-data.js``: ``pages.series_data`` as a global that ``assets/status.js``
    writes into the series pages as text, escaped as ``status_script``."""
    return ("// Generated by flows/publish/site.py each night: what the series pages say of the latest run.\n"
            f"window.dumpscopeSeries = {escape.json_script(series)};\n")


def chart_file(page: str) -> str:
    """The chart file of the page ``page`` (``kernels.md`` -> ``kernels.charts.js``), beside it."""
    return page.removesuffix(".md") + CHARTS_SUFFIX


def charts_script(page: str, specs: dict[str, dict]) -> str:
    """A page's chart file: its charts' Vega-Lite specs by container id, as a global that
    ``assets/charts.js`` draws (a classic script: it loads from ``file://`` too), JSON escaped as
    ``status_script``. The second line is the assignment, whole (``tests/site_links.py`` reads it)."""
    return (f"// Generated by flows/publish/site.py each night: the charts of {json.dumps(page)}.\n"
            f"window.dumpscopeCharts = {escape.json_script(specs)};\n")


def _render_pages(env: jinja2.Environment, d: site_data.SiteData, docs: Path) -> tuple[list[Path], int]:
    """The pages written, and how many charts they hold."""
    written: list[Path] = []
    seen: set[Path] = set()
    counter = env.globals["_chart_counter"]
    charts = 0

    def page(template: str, path: str, **context) -> None:
        nonlocal charts
        target = docs / path
        if target in seen:  # two names with one slug: sha256 prefixes that collide
            raise ValueError(f"two pages would be written to {path}")
        target.parent.mkdir(parents=True, exist_ok=True)
        counter.update(n=0, specs={}, file=chart_file(path).rsplit("/", 1)[-1])
        target.write_text(env.get_template(template).render(**context), encoding="utf-8")
        if counter["specs"]:
            (docs / chart_file(path)).write_text(charts_script(path, counter["specs"]), encoding="utf-8")
        charts += counter["n"]
        written.append(target)
        seen.add(target)

    page("overview.md.j2", "index.md", **pages.overview_page(d))
    page("memory.md.j2", "memory.md", **sections.memory_page(d))
    page("fusion.md.j2", "fusion.md", **sections.fusion_page(d))
    page("kernels.md.j2", "kernels.md", **sections.kernels_page(d))
    page("compile.md.j2", "compile.md", **sections.compile_page(d))
    page("ranks.md.j2", "ranks.md", **ranks.ranks_page(d))
    page("onnx.md.j2", "onnx.md", **sections.onnx_page(d))
    page("diff.md.j2", "diff.md", **pages.diff_page(d))
    page("accepts.md.j2", "accepts.md", **pages.accepts_page(d))
    page("query.md.j2", "query.md", **pages.query_page(d))
    run_rows = pages.run_rows(d)
    page("runs.md.j2", "runs/index.md", **pages.runs_index(d, run_rows))
    for month, context in archive.archive_pages(d, run_rows):
        page("archive.md.j2", site_data.archive_file(month), **context)
    # What the 404 page reads: an archived run's or incident's old page -> its row (assets/moved.js).
    (docs / MOVED).parent.mkdir(parents=True, exist_ok=True)
    (docs / MOVED).write_text(json.dumps(archive.moved(d), sort_keys=True), encoding="utf-8")
    for run_id, context in pages.run_pages(d):
        page("run.md.j2", site_data.run_file(run_id), **context)
    for incident_id, context in pages.incident_pages(d):
        page("incident.md.j2", site_data.incident_file(incident_id), **context)
    page("incidents.md.j2", "incidents/index.md", **pages.incidents_index(d))
    for series, context in pages.series_pages(d):
        page("series.md.j2", site_data.series_file(series), **context)
    page("series_index.md.j2", "series/index.md", **pages.series_index(d))
    for series, context in compile_view.compile_views(d):
        page("compile_view.md.j2", compile_view.view_file(series), **context)
    for doc in ("metrics.md", "trends.md", "site.md"):
        shutil.copyfile(DOCS / doc, docs / doc)
        written.append(docs / doc)
    return written, charts


def _write_assets(docs: Path, cache: Path) -> None:
    """The assets and the theme override into the mkdocs project; the Vega bundle from
    ``cache`` when vl-convert made it for this Vega-Lite version before (it takes seconds)."""
    import altair as alt

    # The bundle matching Altair's Vega-Lite (v6.4.1 -> "v6.4"); it sets window.vegaEmbed.
    vl_version = alt.SCHEMA_VERSION.rsplit(".", 1)[0]
    cached = cache / f"vega-bundle-{vl_convert_version()}-{vl_version}.js"
    if not cached.is_file():
        import vl_convert

        shutil.rmtree(cache, ignore_errors=True)  # older versions' bundles
        cache.mkdir(parents=True)
        partial = cached.with_suffix(".part")
        partial.write_text(vl_convert.javascript_bundle(vl_version=vl_version), encoding="utf-8")
        partial.rename(cached)
    shutil.copyfile(cached, docs / VEGA_BUNDLE)
    for name in ASSETS:
        shutil.copyfile(TEMPLATES / "assets" / name, docs / "assets" / name)
    shutil.copytree(TEMPLATES / "overrides", docs.parent / "overrides")


def vl_convert_version() -> str:
    from importlib import metadata

    return metadata.version("vl-convert-python")
