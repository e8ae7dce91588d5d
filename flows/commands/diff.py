"""``dumpscope diff RUN_A RUN_B``: structure and metrics of every series in both runs."""

from __future__ import annotations

import difflib
import fnmatch
import json
import sys
from pathlib import Path

import duckdb
import polars as pl

from flows.warehouse.reads import frame_of
from flows.warehouse.store import connect_readonly
from transforms.trends.diffs import EVIDENCE_COLUMNS, PAIR_COLUMNS, diff_pairs, diff_text
from transforms.units import human_delta, human_ratio, human_value


class DiffRefused(ValueError):
    """The arguments name nothing to compare (a run that does not exist, a pattern that
    matches no series); the message says what is wrong and what exists."""


def diff_warehouse(warehouse: Path, run_a: str, run_b: str, pattern: str | None = None) -> pl.DataFrame:
    """``diff_runs`` on the published warehouse; every failure is a ValueError with one
    line for people (DiffRefused when the arguments are wrong)."""
    try:
        con = connect_readonly(warehouse)
    except (FileNotFoundError, duckdb.Error) as exc:
        raise ValueError(str(exc)) from None
    try:
        return diff_runs(con, run_a, run_b, pattern)
    except duckdb.Error as exc:
        raise ValueError(str(exc)) from None
    finally:
        con.close()


def diff_runs(con: duckdb.DuckDBPyConnection, run_a: str, run_b: str, pattern: str | None = None) -> pl.DataFrame:
    """One row per change: series, category, change, description; structural changes
    also rank, rescale, the two dump paths and their excerpts (``diffs.DIFF_SCHEMA``).

    Structural changes come from ``content_items`` (through each path's items_key), in
    ``diffs``' order of significance, metric changes from ``metrics``; series only one
    run has are reported as appeared or vanished.
    """
    known = {r[0] for r in con.execute("SELECT run_id FROM runs WHERE run_id IN (?, ?)", [run_a, run_b]).fetchall()}
    for run in (run_a, run_b):
        if run not in known:
            latest = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 5").fetchall()]
            raise DiffRefused(f"no run {run!r} in the warehouse; latest runs: {', '.join(latest)}")
    series = frame_of(con, """SELECT s.*, d.status FROM dump_series s JOIN dumps d USING (path)
                              WHERE s.run_id IN (?, ?) AND d.status IN ('ok', 'partial')""", [run_a, run_b])
    if pattern:
        every = series
        series = series.filter(pl.col("series").map_elements(lambda s: fnmatch.fnmatchcase(s, pattern), return_dtype=pl.Boolean))
        if series.is_empty():
            # Not "no differences": nothing was compared. Show what the pattern could have been.
            names = sorted(set(every.get_column("series").to_list()))
            some = difflib.get_close_matches(pattern, names, n=5, cutoff=0) or names[:5]
            raise DiffRefused(f"no series matching {pattern!r} has a parsed dump in run {run_a!r} or {run_b!r}; "
                              f"series there include: {', '.join(some) or 'none'}")
    a = series.filter(pl.col("run_id") == run_a)
    b = series.filter(pl.col("run_id") == run_b)
    both = b.join(a.select("series", pl.col("path").alias("before_path")), on="series")
    pairs = both.select(pl.lit(run_b).alias("run_id"), pl.lit(run_a).alias("previous_run_id"), "series", "job",
                        pl.col("series_program").alias("program"), "kind", "stage", "before_path",
                        pl.col("path").alias("after_path"))
    paths = pl.concat([pairs.get_column("before_path"), pairs.get_column("after_path")]).unique().to_list()
    con.register("_diff_paths", pl.DataFrame({"path": paths}, schema={"path": pl.String}).to_arrow())
    try:
        # content_items, not the dump_items view: the items with their evidence.
        items = frame_of(con, """SELECT s.path, c.* EXCLUDE (items_key) FROM dump_series s JOIN content_items c USING (items_key)
                                 WHERE s.path IN (SELECT path FROM _diff_paths)""")
        metrics = frame_of(con, "SELECT path, metric, value FROM metrics WHERE path IN (SELECT path FROM _diff_paths)")
    finally:
        con.unregister("_diff_paths")
    structural = diff_pairs(pairs.select(*PAIR_COLUMNS.names(), "before_path", "after_path"), items)
    evidence = ["rank", "rescale", *EVIDENCE_COLUMNS.names()]
    parts = [structural.select("series", "category", "change", "description", *evidence),
             _metric_changes(pairs, metrics), _presence(a, b, run_a, run_b)]
    return pl.concat(parts, how="diagonal_relaxed").sort("series", maintain_order=True)


def _metric_changes(pairs: pl.DataFrame, metrics: pl.DataFrame) -> pl.DataFrame:
    before = metrics.rename({"path": "before_path", "value": "before"})
    after = metrics.rename({"path": "after_path", "value": "after"})
    joined = (pairs.select("series", "before_path", "after_path")
              .join(before, on="before_path").join(after, on=["after_path", "metric"], how="full", coalesce=True))
    joined = joined.filter(pl.col("series").is_not_null() & (pl.col("before") != pl.col("after")).fill_null(True))
    text = [f"{m} {human_value(m, x)} → {human_value(m, y)} ({human_delta(m, None if x is None or y is None else y - x)}"
            + (f", {human_ratio((y - x) / abs(x))})" if x and y is not None else ")")
            for m, x, y in joined.select("metric", "before", "after").iter_rows()]
    return joined.select("series", pl.lit("metric").alias("category"), pl.lit("changed").alias("change"),
                         pl.Series("description", text, pl.String))


def _presence(a: pl.DataFrame, b: pl.DataFrame, run_a: str, run_b: str) -> pl.DataFrame:
    appeared = b.join(a, on="series", how="anti").select("series", pl.lit("series").alias("category"),
                                                          pl.lit("appeared").alias("change"),
                                                          pl.lit(f"series appeared (not in {run_a})").alias("description"))
    vanished = a.join(b, on="series", how="anti").select("series", pl.lit("series").alias("category"),
                                                          pl.lit("vanished").alias("change"),
                                                          pl.lit(f"series vanished (not in {run_b})").alias("description"))
    return pl.concat([appeared, vanished])


def print_diff(result: pl.DataFrame, run_a: str, run_b: str, *, as_json: bool) -> None:
    """The diff as text, or one JSON object per change."""
    if not as_json:
        sys.stdout.write(diff_text(result, run_a, run_b))
        return
    for row in result.to_dicts():
        json.dump(row, sys.stdout, default=str, ensure_ascii=False)
        sys.stdout.write("\n")
