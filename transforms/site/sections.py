"""The figure pages of the report site: memory, fusion, kernels, compile and ONNX (pure).

Each page is a list of trend sections (``SECTIONS``: one metric at one stage per chart,
a panel per program whose figure moved in the window, so that one program's spike does not
flatten the others), then the latest run's breakdowns (at the stage its section charts) and
what changed in its structure. A section's table lists every program's latest value, its
change against the previous run and the incident open on it (``SiteData.with_states``: the
only place a figure is called worse or better); its bytes and its chart's are in one unit
(``transforms.units.byte_unit``). Contexts for the templates, as in ``transforms.site.pages``.
"""

from __future__ import annotations

import re

import polars as pl

from transforms.escape import url_path
from transforms.site import charts, compile_view
from transforms.site.data import (MAX_BREAKDOWN_ROWS, MAX_LINES, MAX_TABLE_ROWS, ONNX_RUNS, SiteData, dump_link, incident_link, marked,
                                  paths_by, program_anchor, state_text)
from transforms.units import byte_unit, delta_in, human_delta, human_value, table_unit, value_in
from transforms.volatile import normalise

# An ONNX step's outcome: the symbol, the word beside it (no emoji font shows an empty box) and its colour class.
STEP_CELL = {1.0: ("✅", "passed", "ds-good"), 0.0: ("❌", "failed", "ds-bad"), None: ("⚪", "skipped", "ds-skip")}

# The trend sections of each page: (metric, title, which rows: one stage). charted_pairs() and the pages read the same.
MEMORY_SECTIONS = (
    ("memory.total_bytes", "Total bytes (buffer assignment)", pl.col("stage") == "buffer_assignment"),
    ("memory.peak_live_bytes", "Peak live bytes (live ranges)", pl.col("stage") == "live_ranges"),
    ("memory.temp_bytes", "Temp bytes (buffer assignment)", pl.col("stage") == "buffer_assignment"),
    ("memory.buffer_bytes", "Inductor buffer bytes (after fusion)", pl.col("stage") == "post_fusion"),
)
FUSION_SECTIONS = (("fusion.count", "Inductor fused groups (after fusion)",
                    (pl.col("kind") == "inductor_ir") & (pl.col("stage") == "post_fusion")),)
KERNEL_SECTIONS = (
    ("kernel.launches", "Kernel launches (XLA, after optimizations)", pl.col("stage") == "after_optimizations"),
    ("kernel.custom_calls", "Custom calls (XLA, after optimizations)", pl.col("stage") == "after_optimizations"),
    # Collectives at both stages, each charted and tabled as what it is: XLA's combiners merge many
    # before its optimizations into few after (jit__fun: 9 all-reduces, then 1).
    ("kernel.collectives", "Collectives (XLA, after optimizations)", pl.col("stage") == "after_optimizations"),
    ("kernel.collectives", "Collectives (XLA, before optimizations)", pl.col("stage") == "before_optimizations"),
    ("kernel.generated", "Inductor generated kernels (output code)", pl.col("kind") == "inductor_output_code"),
    ("kernel.extern", "Inductor extern kernels (after fusion)", (pl.col("kind") == "inductor_ir") & (pl.col("stage") == "post_fusion")),
    ("kernel.user_triton", "User Triton kernels (after fusion)", (pl.col("kind") == "inductor_ir") & (pl.col("stage") == "post_fusion")),
    ("kernel.fallback", "Inductor fallback kernels (after fusion)", (pl.col("kind") == "inductor_ir") & (pl.col("stage") == "post_fusion")),
)
ONNX_SECTIONS = (
    ("onnx.graph_nodes", "ONNX graph nodes", pl.col("stage") == "export"),
    ("onnx.max_abs_diff", "Accuracy: max absolute difference (ONNX Runtime vs PyTorch)", pl.col("stage") == "export"),
)
_TRACED = pl.col("kind") == "torch_trace"
COMPILE_SECTIONS = (
    ("dynamo.compile_seconds", "Compile seconds (Dynamo's whole frame, Inductor included)", _TRACED),
    ("dynamo.graph_breaks", "Graph breaks", _TRACED),
    ("dynamo.recompiles", "Recompiles", _TRACED),
    ("dynamo.failures", "Failed compiles", _TRACED),
)
SECTIONS = MEMORY_SECTIONS + FUSION_SECTIONS + KERNEL_SECTIONS + ONNX_SECTIONS + COMPILE_SECTIONS
# The compile page's table of the latest run's programs: (metric, column title).
COMPILE_COLUMNS = (
    ("dynamo.compiles", "compiles"), ("dynamo.compile_seconds", "compile s"), ("inductor.compile_seconds", "Inductor s"),
    ("dynamo.graph_breaks", "graph breaks"), ("dynamo.recompiles", "recompiles"), ("dynamo.failures", "failures"),
    ("dynamo.guards", "guards"), ("inductor.cache_hits", "cache hits"), ("inductor.cache_misses", "cache misses"),
    ("kernel.generated", "kernels"),
)
PHASE_BARS = 20  # programs in the compile page's chart of seconds by phase (the slowest of the latest run)
# The reasons tables of the compile page: title -> the ``what`` of compile_reasons rows they list.
REASON_TABLES = {"graph_breaks": ("graph_break", "skip", "other"), "recompiles": ("recompile",), "failures": ("failure",)}
_COMPILE_ID = re.compile(r"^[!\d/]+: ")  # "0/1: tensor 'x' size mismatch...": compile ids are renumbered run to run
# What a graph-break row that is not a plain graph break says before its reason (torch_trace_graph_breaks.kind).
WHAT_NOTES = {"skip": "frame skipped", "other": "other"}
REASON_TEXT = 300  # characters of a reason or its detail shown (a recompile's guard message can run long)


def _line(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(pl.format("{}/{}", "job", "program").alias("line"))


def _section_lines(d: SiteData, metric: str, where: pl.Expr) -> pl.DataFrame:
    """The change points of a section's metric at its stage, each with its ``line`` (job/program)
    and its state (``SiteData.with_states``)."""
    rows = d.states.filter((pl.col("metric") == metric) & where)
    return _line(rows)


def _fusion_kind_lines(d: SiteData) -> pl.DataFrame:
    """XLA fusions by kind after optimizations: a line per program and fusion.count.* metric."""
    kinds = d.states.filter(pl.col("metric").str.starts_with("fusion.count") & (pl.col("kind") == "xla_hlo")
                            & (pl.col("stage") == "after_optimizations"))
    return _line(kinds).with_columns(pl.format("{} {}", "line", "metric").alias("line"))


def charted_pairs(d: SiteData) -> pl.DataFrame:
    """(series, metric) of every line the section charts draw: the site reads every run of
    the window for these (``SiteData.chart_rows``), and only the change points of the rest."""
    parts = []
    for metric, title, where in SECTIONS:
        rows = _moved(_section_lines(d, metric, where))
        if rows.height and not charts.is_empty(rows):
            shown, _ = _top_lines(_last_of_lines(rows), title, rows.get_column("line").n_unique())
            parts.append(rows.filter(pl.col("line").is_in(shown.implode())).select("series", "metric"))
    kinds = _fusion_kind_lines(d)
    if kinds.height:
        shown = _top_programs(kinds)
        parts.append(kinds.filter(pl.col("line").is_in(shown.implode())).select("series", "metric"))
    empty = pl.DataFrame(schema={"series": pl.String, "metric": pl.String})
    return pl.concat([empty, *parts]).unique().sort("series", "metric")


def _moved(rows: pl.DataFrame) -> pl.DataFrame:
    """The rows of the lines that moved in the window (``charts.moved_lines``): a panel each."""
    return rows.join(charts.moved_lines(rows, ["line"]), on="line", how="semi", maintain_order="left")


def _last_of_lines(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.sort("started_at", "run_id").group_by("line").agg(pl.all().last()).sort("line")


def _every_run(d: SiteData, rows: pl.DataFrame) -> tuple[pl.DataFrame, bool]:
    """The rows of every run of the window for the lines of ``rows`` (change points), each
    named as there, with their states; (rows, False) when the site did not read them."""
    if d.chart_rows is None:
        return rows, False
    names = rows.select("series", "metric", "line").unique(subset=["series", "metric"])
    # In chart_rows' order (flows.publish.site orders it): a page's bytes must not change from one
    # build to the next unless its figures did (only changed pages are built again).
    return d.with_states(d.chart_rows.join(names, on=["series", "metric"], maintain_order="left")), True


def _open_cell(d: SiteData, r: dict, here: str) -> dict | None:
    """The incident open on a figure (a table cell: its kind, its page)."""
    if not r.get("step"):
        return None
    return {"text": state_text(r["step"], r["incident_id"]), "link": incident_link(r["incident_id"], here),
            "bad": r["step"] != "improvement"}


def _trend_section(d: SiteData, metric: str, title: str, where: pl.Expr, here: str = "") -> dict | None:
    rows = _section_lines(d, metric, where)
    if rows.is_empty():
        return None
    latest = _last_of_lines(rows)
    listed, more = _most_telling(latest)
    # One unit for the table and its chart: the table's (its largest value or change), so that the page's
    # Markdown moves with its figures, not with the runs the window holds (a spike in the chart reads in it).
    unit = table_unit((metric, v) for v in latest.get_column("value").to_list() + latest.get_column("delta").to_list())
    # The latest run's cell is filled in the browser (None): the page's Markdown moves only with its figures.
    table = [{"line": r["line"], "series": d.series_link(r["series"], here),
              "run": None if r["run_id"] == d.latest else r["run_id"],
              "value": value_in(metric, r["value"], unit), "change": delta_in(metric, r["delta"], unit) if r["delta"] else "",
              "incident": _open_cell(d, r, here)} for r in listed.iter_rows(named=True)]
    rest = {"more": more, "query": _figures_query(metric, more)}
    if charts.is_empty(rows):  # a flat line at 0 says nothing: the sentence says why there is no chart
        return {"title": title, "metric": metric, "chart": None, "table": table, **rest,
                "empty": f"Every program shows 0 for {metric} in the runs shown: nothing to draw."}
    moved = _moved(rows)
    if moved.is_empty():  # flat lines say what the table says: no panel
        return {"title": title, "metric": metric, "chart": None, "table": table, **rest,
                "empty": f"No program's {metric} moved in the runs shown: the table lists their values."}
    shown, chart_title = _top_lines(_last_of_lines(moved), title, latest.height)
    drawn, every_run = _every_run(d, moved.filter(pl.col("line").is_in(shown.implode())))
    if every_run:
        chart = charts.panels(marked(d, drawn, here), title=chart_title, unit=unit)
    else:
        chart = charts.small_multiples_by(marked(d, drawn, here).with_columns(pl.lit(chart_title).alias("_chart")),
                                          "_chart", panel="line", unit=unit)[chart_title]
    return {"title": title, "metric": metric, "chart": chart, "table": table, **rest, "empty": None}


def _most_telling(latest: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Of the last row of each line, the ``MAX_TABLE_ROWS`` a table lists (with an incident open
    first, then the largest; in line order), and how many it leaves out."""
    if latest.height <= MAX_TABLE_ROWS:
        return latest, 0
    kept = (latest.sort(pl.col("step").is_not_null(), pl.col("value").abs(), descending=True, nulls_last=True,
                        maintain_order=True).head(MAX_TABLE_ROWS).sort("line"))
    return kept, latest.height - MAX_TABLE_ROWS


def _figures_query(metric: str, more: int) -> str | None:
    """The query that lists every program's latest value of ``metric`` (for a table that leaves some out)."""
    if not more:
        return None
    return ("dumpscope sql \"SELECT job, program, stage, value FROM latest_metrics WHERE metric = "
            f"'{metric}' ORDER BY value DESC\"")


def _top_programs(kinds: pl.DataFrame, most: int = 9) -> pl.Series:
    """The lines of the fusion-kind panels: every kind of the programs one of whose kinds moved
    in the window, those with an open regression in the latest run first, then the largest (by
    their total fusions), ``most`` programs at most."""
    moving = charts.moved_lines(kinds, ["job", "program"])
    last = _last_of_lines(kinds.join(moving, on=["job", "program"], how="semi"))
    programs = (last.group_by("job", "program").agg(pl.col("step").is_in(["regression", "failure"]).any().alias("_reg"),
                                                    pl.col("value").abs().sum().alias("_size"))
                .sort("_reg", "_size", "job", "program", descending=[True, True, False, False], maintain_order=True).head(most))
    return last.join(programs.select("job", "program"), on=["job", "program"]).get_column("line")


def _top_lines(latest: pl.DataFrame, title: str, programs: int) -> tuple[pl.Series, str]:
    """A chart of a hundred panels reads as noise: of the lines that moved (``latest``: the last
    row of each), it draws those with an incident open in the latest run, then the largest, and
    says so when it leaves any of the section's ``programs`` out; tables list them all."""
    shown = (latest.sort(pl.col("step").is_not_null(), pl.col("value").abs(), descending=True, nulls_last=True, maintain_order=True)
             .head(MAX_LINES).get_column("line"))
    if shown.len() == programs:
        return shown, title
    which = "that moved in the runs shown" + (": with an open incident, then largest" if shown.len() < latest.height else "")
    return shown, f"{title} ({shown.len()} of {programs}, those {which})"


def _diff_rows(d: SiteData, categories: tuple[str, ...], changes: tuple[str, ...] | None = None) -> list[dict]:
    rows = d.diffs.filter((pl.col("run_id") == d.latest) & pl.col("category").is_in(categories))
    if changes:
        rows = rows.filter(pl.col("change").is_in(changes))
    paths = paths_by(d, d.latest)
    return [{**r, "diff": url_path("diff.md", fragment=program_anchor(r["job"], r["program"])),
             "dump": dump_link(d, paths.get((d.latest, r["series"])))}
            for r in rows.select("job", "program", "series", "kind", "category", "change", "description").iter_rows(named=True)]


def _sections(d: SiteData, specs: tuple) -> list[dict]:
    return [s for s in (_trend_section(d, metric, title, where) for metric, title, where in specs) if s]


def memory_page(d: SiteData) -> dict:
    sections = _sections(d, MEMORY_SECTIONS)
    alloc = d.allocations.group_by("program", "kind").agg(pl.col("size_bytes").sum()).sort(
        "program", "size_bytes", "kind", descending=[False, True, False])
    shown_alloc = alloc.head(MAX_BREAKDOWN_ROWS)
    alloc_unit = byte_unit(shown_alloc.get_column("size_bytes").max())
    largest = (alloc.group_by("program").agg(pl.col("size_bytes").sum()).sort("size_bytes", "program", descending=[True, False])
               .head(MAX_LINES * 3))  # a bar per program and kind: the largest programs
    charted = alloc.join(largest.select("program"), on="program", how="semi")
    breakdown = charts.bar_chart(charted.with_columns(pl.format("{} · {}", "program", "kind").alias("allocation")),
                                 x="size_bytes", y="allocation", color="kind", title=f"Allocations by kind, run {d.latest}",
                                 unit=alloc_unit) if alloc.height else None
    peak = d.items.filter(pl.col("category") == "peak_value").sort("bytes", descending=True, nulls_last=True,
                                                                   maintain_order=True).head(20)
    peak_unit = table_unit(("bytes", b) for b in peak.get_column("bytes").to_list())
    top = [{"program": r["program"], "value": r["label"], "bytes": value_in("bytes", r["bytes"], peak_unit),
            "source": r["detail"] or "", "dump": dump_link(d, r.get("path"))} for r in peak.iter_rows(named=True)]
    return {"sections": sections, "breakdown": breakdown, "allocation_table": [
                {"program": p, "kind": k, "bytes": value_in("bytes", b, alloc_unit)} for p, k, b in shown_alloc.iter_rows()],
            "allocations_more": max(0, alloc.height - MAX_BREAKDOWN_ROWS),
            "top_at_peak": top, "grew": _diff_rows(d, ("allocation", "peak_value"), ("grew", "appeared")), "run": d.latest}


def fusion_page(d: SiteData) -> dict:
    kinds = _fusion_kind_lines(d)
    kinds_chart = None
    if kinds.height and not charts.is_empty(kinds):
        shown = _top_programs(kinds)
        programs = kinds.select(pl.struct("job", "program").n_unique()).item()
        drawn, _ = _every_run(d, kinds.filter(pl.col("line").is_in(shown.implode())))
        title = "XLA fusions by kind (after optimizations), one panel per program" + (
            "" if shown.len() == _last_of_lines(kinds).height else f" ({drawn.select(pl.struct('job', 'program').n_unique()).item()} of {programs}: with an open regression, then largest)")
        kinds_chart = charts.faceted_trend_chart(
            _line(marked(d, drawn, "")).with_columns(
                pl.when(pl.col("metric") == "fusion.count").then(pl.lit("all fusions"))
                .otherwise(pl.col("metric").str.strip_prefix("fusion.count.")).alias("fusion kind")),
            title=title, facet="line", color="fusion kind", metric_label="fusions")
    ratio = _fused_ratio(d)
    groups = d.items.filter(pl.col("category") == "fused_group").sort("count", descending=True, maintain_order=True).head(20)
    group_unit = table_unit(("bytes", b) for b in groups.get_column("bytes").to_list())
    return {"kinds_chart": kinds_chart, "sections": _sections(d, FUSION_SECTIONS),
            "ratio_chart": ratio, "groups": [{"program": r["program"], "group": r["label"], "count": r["count"],
                                             "bytes": value_in("bytes", r["bytes"], group_unit) if r["bytes"] is not None else ""}
                                            for r in groups.iter_rows(named=True)],
            "changes": _diff_rows(d, ("fusion", "fused_group")), "run": d.latest}


def _fused_ratio(d: SiteData) -> dict | None:
    """Inductor: members of fused groups / nodes before fusion, per graph and run (a ratio no
    incident judges: no marks)."""
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
        moved.fill_null(True).alias("changed")))
    both = _moved(both)
    if both.is_empty():
        return None
    shown = (both.group_by("line").agg(pl.col("value").last()).sort("value", "line", descending=[True, False])
             .head(MAX_LINES).get_column("line"))
    title = "Fused-node ratio (Inductor: fused members / nodes before fusion)"
    return charts.panels(marked(d, both.filter(pl.col("line").is_in(shown.implode())), ""), title=title)


def kernels_page(d: SiteData) -> dict:
    sections = _sections(d, KERNEL_SECTIONS)
    latest = d.trends.filter(pl.col("run_id") == d.latest)
    # Each breakdown at the stage its section charts (KERNEL_SECTIONS): the counts beside the chart's.
    fallbacks = latest.filter(pl.col("metric").str.starts_with("kernel.fallback.") & (pl.col("value") > 0)
                              & (pl.col("kind") == "inductor_ir") & (pl.col("stage") == "post_fusion"))
    targets = latest.filter(pl.col("metric").str.starts_with("kernel.custom_call.") & (pl.col("stage") == "after_optimizations"))
    collectives = latest.filter(pl.col("metric").str.starts_with("kernel.collective.") & (pl.col("value") > 0)
                                & pl.col("stage").is_in(["after_optimizations", "before_optimizations"]))
    def pick(f: pl.DataFrame, prefix: str) -> dict:
        # The stage a section charts first (after optimizations before before), then the largest.
        rows = [{"program": r["program"], "stage": r["stage"], "name": r["metric"].removeprefix(prefix),
                 "count": human_value("n", r["value"]), "change": human_delta("n", r["delta"]) if r["delta"] else ""}
                for r in f.sort(pl.col("stage") == "before_optimizations", pl.col("value"), descending=[False, True],
                                maintain_order=True).head(MAX_BREAKDOWN_ROWS).iter_rows(named=True)]
        return {"rows": rows, "more": max(0, f.height - MAX_BREAKDOWN_ROWS), "prefix": prefix}

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
    ops = d.onnx_ops.sort("count", descending=True, maintain_order=True).head(25)
    errors = [{"program": r["program"], "title": f"{r['exception_type'] or 'error'} ({r['section']})",
               "message": normalise((r["message"] or "").strip())} for r in d.onnx_errors.iter_rows(named=True)]
    return {"matrices": matrices, "sections": sections, "ops": ops.select("program", "source", "op", "count").to_dicts(),
            "errors": errors, "changes": _diff_rows(d, ("onnx_step", "onnx_op", "accuracy")), "run": d.latest}


# What the compile page lists as changed since the previous run: the reasons, and what changed in each compile
# (its graph's ops, kernels, code lines, guards added or removed, collective schedule: issue 46) and between ranks.
COMPILE_CHANGES = ("graph_break", "recompile", "compile_failure", "compile_graph", "compile_kernels", "compile_code",
                   "compile_guard", "collective_schedule", "rank_divergence")


def compile_page(d: SiteData) -> dict:
    """torch.compile, from TORCH_TRACE logs: compile seconds, graph breaks, recompiles and
    failures per program over the window, the latest run's programs, and the distinct graph-break,
    recompile and failure reasons of each run the records tables still hold."""
    dumps = d.trace_dumps if d.trace_dumps is not None else pl.DataFrame(schema={"run_id": pl.String, "held": pl.Boolean})
    traced = dumps.height > 0 or d.trends.filter(_TRACED).height > 0
    if not traced:
        return {"traced": False, "run": d.latest}
    order = {r: i for i, r in enumerate(d.runs.get_column("run_id").to_list())}
    runs = sorted(set(dumps.get_column("run_id").to_list()), key=lambda r: order.get(r, -1), reverse=True)
    held = [r for r in runs if dumps.filter((pl.col("run_id") == r) & pl.col("held")).height]
    programs = _compile_programs(d)
    every = d.trends.filter(_TRACED & (pl.col("run_id") == d.latest)).get_column("series").n_unique()
    return {"traced": True, "run": d.latest, "sections": _sections(d, COMPILE_SECTIONS), "columns": COMPILE_COLUMNS,
            "phase_chart": _phase_chart(d), "viewed": len(compile_view.viewed_series(d)),
            "programs": programs, "more_programs": every - len(programs), "held": held, "not_held": [r for r in runs if r not in held],
            **{name: _reasons(d, whats, held) for name, whats in REASON_TABLES.items()},
            **_capped_changes(d, COMPILE_CHANGES)}


def _capped_changes(d: SiteData, categories: tuple[str, ...]) -> dict:
    """``changes``: the first ``MAX_TABLE_ROWS`` of the latest run's diff rows of ``categories`` (a guard a row:
    a log of thousands of compiles changes thousands), ``more_changes``: how many more the diff page lists."""
    rows = _diff_rows(d, categories)
    return {"changes": rows[:MAX_TABLE_ROWS], "more_changes": max(0, len(rows) - MAX_TABLE_ROWS)}


def _compile_programs(d: SiteData) -> list[dict]:
    """The latest run's figures of each program of a TORCH_TRACE log, with its change against its previous run."""
    metrics = [m for m, _ in COMPILE_COLUMNS]
    rows = d.trends.filter(_TRACED & (pl.col("run_id") == d.latest) & pl.col("metric").is_in(metrics))
    # A log of many functions: the programs that changed, failed or broke first, then the slowest to compile.
    kept = compile_view.telling_order(rows).head(MAX_TABLE_ROWS)
    rows = rows.join(kept.select("series"), on="series", how="semi")
    views = compile_view.view_links(d)
    out = []
    for (series,), figures in rows.sort("job", "program", "series").group_by("series", maintain_order=True):
        first = figures.row(0, named=True)
        cells = {r["metric"]: human_value(r["metric"], r["value"])
                 + (f" ({human_delta(r['metric'], r['delta'])})" if r["delta"] else "") for r in figures.iter_rows(named=True)}
        rank = "" if first["stage"] == "trace" else f" ({first['stage']})"  # a rank's log: rank_<n>
        view, code = views.get(series, (None, None))
        out.append({"line": f"{first['job']}/{first['program']}{rank}", "link": d.series_link(series), "cells": cells,
                    "view": view, "code": code})
    return out


def _phase_chart(d: SiteData) -> dict | None:
    """The latest run's compile seconds of the slowest programs, stacked by phase (compile_view.PHASES:
    Dynamo, AOT/Inductor, code gen, lazy backward), from the records tables (None when they hold none)."""
    if d.compile_rows is None or d.compile_rows.is_empty():
        return None
    totals = compile_view.phase_rows(d, d.compile_rows.get_column("series").drop_nulls().unique().to_list())
    slowest = (totals.group_by("program").agg(pl.col("seconds").sum()).sort("seconds", "program", descending=[True, False])
               .head(PHASE_BARS).get_column("program"))
    shown = totals.filter(pl.col("program").is_in(slowest.implode()))
    if shown.is_empty() or shown.get_column("seconds").sum() <= 0:
        return None
    more = totals.get_column("program").n_unique() - slowest.len()
    title = f"Compile seconds by phase, run {d.latest}" + (f" (the {slowest.len()} slowest programs)" if more else "")
    return charts.bar_chart(shown.sort("program"), x="seconds", y="program", color="phase", title=title,
                            stack=list(compile_view.PHASES))


def _clip(text: str | None) -> str:
    """A reason on one line (a failure's message starts "backend='x' raised:", its error on the next), clipped."""
    text = " ".join((text or "").split())
    return text if len(text) <= REASON_TEXT else text[:REASON_TEXT] + "…"


def _reasons(d: SiteData, whats: tuple[str, ...], held: list[str]) -> dict:
    """The distinct reasons of each held run (latest run first; ``runs``) and the held runs with
    none (``none``): runs no longer held are in neither, so "none" never means "not kept"."""
    rows = None if d.compile_reasons is None else d.compile_reasons.filter(pl.col("what").is_in(whats))
    tables = []
    for run in held:
        found = [] if rows is None else rows.filter(pl.col("run_id") == run).sort("path", "lineno").to_dicts()
        if found:
            tables.append({"run": run, "latest": run == d.latest, "rows": _distinct(d, found)})
    with_rows = {t["run"] for t in tables}
    return {"runs": tables, "none": [r for r in held if r not in with_rows]}


def _distinct(d: SiteData, found: list[dict]) -> list[dict]:
    """One row per distinct reason of one run's compile_reasons rows (in log order), most frequent
    first: the reason (a recompile's without its compile id) and its detail, each on one line;
    its count; the user frames and programs it came from; the log lines of its first occurrence."""
    grouped: dict[tuple, dict] = {}
    for r in found:
        # One row per reason whatever process wrote it: ids, addresses and path prefixes normalised.
        reason = _clip(normalise(_COMPILE_ID.sub("", r["reason"] or "") if r["what"] == "recompile" else r["reason"] or ""))
        detail = _clip(normalise(r["detail"] or ""))
        first, last = r["lineno"], r["end_lineno"] or r["lineno"]
        g = grouped.setdefault((r["what"], reason, detail), {
            "note": WHAT_NOTES.get(r["what"]), "reason": reason, "detail": detail, "count": 0, "frames": {},
            "programs": {}, "log": dump_link(d, r["path"]), "lines": f"lines {first}–{last}" if last != first else f"line {first}"})
        g["count"] += 1
        frame = (r["frame_file"] and normalise(r["frame_file"]), r["frame_line"], r["frame_function"] or "?")  # a failure may have none
        g["frames"][frame] = g["frames"].get(frame, 0) + 1
        g["programs"].setdefault(r["program"], d.series_link(r["series"]) if r["series"] else None)
    for g in grouped.values():
        g["frames"] = [{"file": f, "line": "?" if line is None else line, "function": fn, "count": n}
                       for (f, line, fn), n in g["frames"].items()]
        g["programs"] = [{"name": p, "link": link} for p, link in g["programs"].items()]
    return sorted(grouped.values(), key=lambda g: (-g["count"], g["note"] or "", g["reason"], g["detail"]))
