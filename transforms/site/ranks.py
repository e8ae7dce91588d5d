"""The ranks page of the report site: a torch.distributed job's rank logs side by side (pure).

For the latest run, each program that rank logs (TORCH_TRACE, stage ``rank_<n>``) of one job
compiled: a row per rank with its compiles, graph breaks and recompiles (its figures in the
latest run), its collective schedules (its ``rank_profile`` item: each compile's collective ops
in order), whether it differs from the majority (``dynamo.rank_divergence``, the incident it
opened linked), and a line per rank and dimension that differs (the ``rank_divergence`` rows of
``diffs``), with both logs' lines. Texts from the logs stay data: the template escapes them.
"""

from __future__ import annotations

import polars as pl

from transforms.site.data import MAX_TABLE_ROWS, SiteData, dump_link
from transforms.trends.diff_item_rows import RANK_DIMENSIONS, series_program
from transforms.trends.rank_divergence import METRIC, rank_of

# (metric, column title) of each rank's row.
COLUMNS = (("dynamo.compiles", "compiles"), ("dynamo.graph_breaks", "graph breaks"), ("dynamo.recompiles", "recompiles"))
_RANKED = (pl.col("kind") == "torch_trace") & pl.col("stage").str.starts_with("rank_")


def ranks_page(d: SiteData) -> dict:
    """The page's context: ``programs`` (job, program, figure: the ranks that differ, ranks: a row
    each, divergences: a line each), ``more``: programs past ``MAX_TABLE_ROWS`` not listed."""
    latest = d.trends.filter(_RANKED & (pl.col("run_id") == d.latest))
    # A log's items are every program's, keyed by the program as its log names it (not as a run.json or the
    # settings may rename its series): each series takes its own program's.
    schedules = {} if d.rank_schedules is None else dict(d.rank_schedules.filter(
        pl.col("key") == series_program(pl.col("program")) + " | collective schedules").select("series", "detail").iter_rows())
    divergences = d.diffs.filter((pl.col("category") == "rank_divergence") & (pl.col("run_id") == d.latest))
    open_on = {r["series"]: r["incident_id"] for r in d.with_states(latest.filter(pl.col("metric") == METRIC))
               .drop_nulls("incident_id").iter_rows(named=True)}
    programs = []
    keys = latest.select("job", "program").unique().sort("job", "program")
    for job, program in keys.head(MAX_TABLE_ROWS).iter_rows():
        rows = latest.filter((pl.col("job") == job) & (pl.col("program") == program))
        ranks = []
        for (series,), figures in rows.sort("stage").group_by("series", maintain_order=True):
            values = dict(figures.select("metric", "value").iter_rows())
            stage = figures.get_column("stage")[0]
            ranks.append({"rank": rank_of(stage), "link": d.series_link(series),
                          "cells": {m: _count(values.get(m)) for m, _ in COLUMNS},
                          "schedules": schedules.get(series) or "",
                          "incident": d.incident_link(open_on[series]) if series in open_on else None,
                          "figure": values.get(METRIC)})
        ranks.sort(key=lambda r: (r["rank"] is None, r["rank"]))
        mine = divergences.filter((pl.col("job") == job) & (pl.col("program") == program)).unique(
            "key", maintain_order=True).sort("key")
        differing = {int(k.split(" | ")[0].removeprefix("rank_")) for k in mine.get_column("key").to_list()}
        for r in ranks:
            r["differs"] = r["rank"] in differing
        figure = next((r["figure"] for r in ranks if r["figure"] is not None), None)
        programs.append({"job": job, "program": program, "ranks": ranks, "figure": _count(figure),
                         "divergences": [{"line": r["description"], "rank_log": dump_link(d, r["after_path"]),
                                          "rank_lines": r["lines_after"], "majority_log": dump_link(d, r["before_path"]),
                                          "majority_lines": r["lines_before"]} for r in mine.iter_rows(named=True)]})
    return {"run": d.latest, "programs": programs, "more": max(0, keys.height - MAX_TABLE_ROWS),
            "columns": COLUMNS, "dimensions": RANK_DIMENSIONS}


def _count(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


__all__ = ["COLUMNS", "ranks_page"]
