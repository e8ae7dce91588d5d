"""The report site: warehouse → jinja2 templates (``site_templates/``) → mkdocs-material.

``build_site(warehouse, out)`` reads the derived tables, renders every page into a
scratch mkdocs project (``<out>.src/``: pages, the metric docs, the assets: the
vega/vega-lite/vega-embed bundle from vl-convert, the chart loader, the stylesheet),
and runs ``mkdocs build --strict`` into ``out``, replaced atomically. Charts are
Vega-Lite specs with aggregated data in each page; nothing is fetched from the
internet (no CDN, no Google Fonts).
"""

from __future__ import annotations

import html
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import polars as pl

from flows.aggregate import frame_of
from flows.warehouse.store import connect_readonly
from transforms.site import pages

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "site_templates"
DOCS = ROOT / "docs"
VEGA_BUNDLE = "assets/vega-bundle.js"


@dataclass
class SiteResult:
    out: Path
    pages: int = 0
    charts: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def read_site_data(warehouse: Path) -> pages.SiteData:
    con = connect_readonly(warehouse)
    try:
        q = lambda sql: frame_of(con, sql)  # noqa: E731
        runs = q('SELECT run_id, started_at, "commit" FROM runs ORDER BY started_at, run_id').with_row_index("run_seq")
        latest = runs.get_column("run_id")[-1] if runs.height else ""
        latest_dumps = f"SELECT path FROM dumps WHERE run_id = '{latest.replace(chr(39), chr(39) * 2)}'"
        with_series = "JOIN dump_series s USING (path)"
        return pages.SiteData(
            runs=runs,
            trends=q("SELECT * FROM metric_trends").with_columns(pl.col("verdict").cast(pl.String)),
            regressions=q("SELECT * FROM regressions"),
            events=q("SELECT * FROM series_events").with_columns(pl.col("event").cast(pl.String)),
            rollups=q("SELECT * FROM run_rollups"),
            totals=q("SELECT * FROM job_totals"),
            diffs=q("SELECT * FROM diffs"),
            accepts=q("SELECT * FROM accepts ORDER BY accepted_at"),
            items=q(f"SELECT i.*, s.series, s.job, s.series_program AS program FROM dump_items i {with_series} "
                    f"WHERE i.path IN ({latest_dumps}) AND i.category <> 'none'"),
            allocations=q(f"""SELECT s.series, s.job, s.series_program AS program, a.kind, a.size_bytes
                FROM buffer_allocations a JOIN dumps d USING (dump_id) {with_series}
                WHERE d.path IN ({latest_dumps}) AND d.stage = 'buffer_assignment'"""),
            onnx_errors=q(f"""SELECT DISTINCT s.series_program AS program, e.section, e.exception_type, e.message
                FROM onnx_errors e JOIN dumps d USING (dump_id) {with_series} WHERE d.path IN ({latest_dumps})"""),
            onnx_ops=q(f"""SELECT s.series_program AS program, o.source, o.op, o.count FROM onnx_op_counts o
                JOIN dumps d USING (dump_id) {with_series} WHERE d.path IN ({latest_dumps})"""),
            tables=q("""SELECT table_name AS name, 'table' AS type, comment FROM duckdb_tables() WHERE schema_name = 'main'
                        UNION ALL SELECT view_name, 'view', comment FROM duckdb_views() WHERE schema_name = 'main' AND NOT internal
                        ORDER BY name"""),
            columns=q("""SELECT table_name AS name, column_name AS column, data_type, comment FROM duckdb_columns()
                         WHERE schema_name = 'main' ORDER BY table_name, column_index"""),
            warehouse_path=str(Path(warehouse).resolve()),
        )
    finally:
        con.close()


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    counter = {"n": 0}

    def chart(spec: dict | None, caption: str = "") -> str:
        """A chart container with its spec inline (charts.js draws it)."""
        if not spec:
            return ""
        counter["n"] += 1
        text = json.dumps(spec, separators=(",", ":"), default=str).replace("</", "<\\/")
        return (f'<div class="ds-chart vega-embed" id="chart-{counter["n"]}" role="img" aria-label="{html.escape(caption)}"></div>\n'
                f'<script type="application/json" class="ds-spec" data-for="chart-{counter["n"]}">{text}</script>\n')

    def cell(text: object) -> str:
        """A Markdown table cell: pipes and newlines escaped."""
        return "" if text is None else str(text).replace("|", "\\|").replace("\n", " ")

    env.globals.update(chart=chart, slug=pages.slug, series_link=pages.series_link)
    env.filters.update(cell=cell)
    env.globals["_chart_counter"] = counter
    return env


def build_site(warehouse: Path, out: Path) -> SiteResult:
    """Render and build the whole site into ``out``."""
    t0 = time.perf_counter()
    out = Path(out).resolve()
    result = SiteResult(out=out)
    data = read_site_data(warehouse)
    result.seconds["read"] = time.perf_counter() - t0

    src = out.with_name(out.name + ".src")
    shutil.rmtree(src, ignore_errors=True)
    docs = src / "docs"
    (docs / "assets").mkdir(parents=True)
    env = _environment()
    written = _render_pages(env, data, docs)
    result.pages = len(written)
    result.charts = env.globals["_chart_counter"]["n"]
    _write_assets(docs)
    (src / "mkdocs.yml").write_text(env.get_template("mkdocs.yml.j2").render(has_runs=data.runs.height > 0), encoding="utf-8")
    result.seconds["render"] = time.perf_counter() - t0 - result.seconds["read"]

    t1 = time.perf_counter()
    staging = out.with_name(out.name + ".next")
    shutil.rmtree(staging, ignore_errors=True)
    _mkdocs_build(src / "mkdocs.yml", staging)
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    result.seconds["mkdocs"] = time.perf_counter() - t1
    return result


def _render_pages(env: jinja2.Environment, d: pages.SiteData, docs: Path) -> list[Path]:
    written: list[Path] = []

    def page(template: str, path: str, **context) -> None:
        target = docs / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(env.get_template(template).render(**context), encoding="utf-8")
        written.append(target)

    page("overview.md.j2", "index.md", **pages.overview_page(d))
    page("memory.md.j2", "memory.md", **pages.memory_page(d))
    page("fusion.md.j2", "fusion.md", **pages.fusion_page(d))
    page("kernels.md.j2", "kernels.md", **pages.kernels_page(d))
    page("onnx.md.j2", "onnx.md", **pages.onnx_page(d))
    page("diff.md.j2", "diff.md", **pages.diff_page(d))
    page("accepts.md.j2", "accepts.md", accepts=d.accepts.to_dicts())
    page("query.md.j2", "query.md", warehouse=d.warehouse_path, tables=d.tables.to_dicts(),
         columns={name: rows.to_dicts() for (name,), rows in d.columns.group_by("name", maintain_order=True)},
         latest=d.latest)
    runs = d.runs.sort("started_at", "run_id", descending=True)
    page("runs.md.j2", "runs/index.md", runs=runs.join(d.rollups.group_by("run_id").agg(
        pl.col("dumps", "failed", "partial", "regressions", "changed_series").sum()), on="run_id", how="left").to_dicts())
    for run_id, context in pages.run_pages(d):
        page("run.md.j2", f"runs/{pages.slug(run_id)}.md", **context)
    index = []
    for (series,), rows in d.trends.group_by("series", maintain_order=True):
        ctx = pages.series_page(d, series, rows)
        page("series.md.j2", pages.series_link(series), **ctx)
        index.append({"series": series, "link": f"{pages.slug(series)}.md", "job": ctx["job"], "program": ctx["program"],
                      "kind": ctx["kind"], "stage": ctx["stage"] or "", "runs": ctx["runs"],
                      "regressed": sum(r["verdict"] == "regressed" for r in ctx["table"])})
    page("series_index.md.j2", "series/index.md", series=sorted(index, key=lambda r: (-r["regressed"], r["series"])))
    for doc in ("metrics.md", "trends.md"):
        shutil.copyfile(DOCS / doc, docs / doc)
        written.append(docs / doc)
    return written


def _write_assets(docs: Path) -> None:
    import altair as alt
    import vl_convert

    # The bundle matching Altair's Vega-Lite (v6.4.1 -> "v6.4"); it sets window.vegaEmbed.
    bundle = vl_convert.javascript_bundle(vl_version=alt.SCHEMA_VERSION.rsplit(".", 1)[0])
    (docs / VEGA_BUNDLE).write_text(bundle, encoding="utf-8")
    for name in ("charts.js", "dumpscope.css"):
        shutil.copyfile(TEMPLATES / "assets" / name, docs / "assets" / name)


def _mkdocs_build(config: Path, site_dir: Path) -> None:
    import logging

    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    log = logging.getLogger("mkdocs")
    log.setLevel(logging.WARNING)
    if not log.handlers:  # strict mode aborts on a warning: say which
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("mkdocs %(levelname)s: %(message)s"))
        log.addHandler(handler)
    cfg = load_config(str(config), site_dir=str(site_dir), strict=True)
    build(cfg)
