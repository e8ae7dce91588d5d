"""``dumpscope diff RUN_A RUN_B``: structure and metrics of every series in both runs.

The runs' series, items and metrics are read by ``flows.verdict.changes``; the structural
diff is ``transforms.trends.diffs``'. A run is an id, ``latest`` or ``previous``
(``flows.warehouse.reads.run_named``); a run that does not exist is ``NoSuchRun`` and a pattern
that matches nothing ``DiffRefused`` (both exit 2); a warehouse that cannot be read is
``DiffFailed`` (exit 1).
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import sys
from pathlib import Path

import duckdb
import polars as pl

from flows.commands.shared import open_to_read
from flows.errors import CommandError
from flows.verdict import changes
from flows.warehouse.reads import NoSuchRun, run_named, runs_latest_first
from transforms.trends.diffs import EVIDENCE_COLUMNS, PAIR_COLUMNS, PAIR_SIDES, diff_pairs, diff_text
from transforms.units import human_delta, human_ratio, human_value


class DiffRefused(CommandError, ValueError, exit_code=2):
    """The arguments name nothing to compare (a pattern that matches no series); the message
    says what is wrong and what exists."""


class DiffFailed(CommandError, ValueError):
    """The warehouse could not be opened or read: one line for people."""


def diff_warehouse(warehouse: Path, run_a: str, run_b: str, pattern: str | None = None) -> tuple[pl.DataFrame, str, str]:
    """``diff_runs`` on the published warehouse, and the two run ids (``latest`` and ``previous``
    name runs: ``run_named``); every failure is a ``CommandError`` with one line for people
    (``DiffFailed``, or ``NoSuchRun``/``DiffRefused`` when the arguments are wrong)."""
    con = open_to_read(warehouse, DiffFailed)
    try:
        run_a, run_b = run_named(con, run_a), run_named(con, run_b)
        return diff_runs(con, run_a, run_b, pattern), run_a, run_b
    except duckdb.Error as exc:
        raise DiffFailed(str(exc)) from None
    finally:
        con.close()


def diff_runs(con: duckdb.DuckDBPyConnection, run_a: str, run_b: str, pattern: str | None = None) -> pl.DataFrame:
    """One row per change: series, category, change, description; structural changes
    also rank, rescale, the two dump paths and their excerpts (``diffs.DIFF_SCHEMA``).

    Structural changes come from ``content_items`` (through each path's items_key), in
    ``diffs``' order of significance, metric changes from ``metrics``; series only one
    run has are reported as appeared or vanished.
    """
    known = set(changes.runs_of(con, [run_a, run_b]))
    for run in (run_a, run_b):
        if run not in known:
            raise NoSuchRun(run, runs_latest_first(con, 5))
    series = changes.parsed_series(con, run_a, run_b)
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
    both = b.join(a.select("series", pl.col("path").alias("before_path"), pl.col("program").alias("before_dump_program")),
                  on="series")
    pairs = both.select(pl.lit(run_b).alias("run_id"), pl.lit(run_a).alias("previous_run_id"), "series", "job",
                        pl.col("series_program").alias("program"), "kind", "stage", "before_path",
                        pl.col("path").alias("after_path"), "before_dump_program",
                        pl.col("program").alias("after_dump_program"))
    paths = pl.concat([pairs.get_column("before_path"), pairs.get_column("after_path")]).unique().to_list()
    items, metrics = changes.items_and_metrics(con, paths)
    structural = diff_pairs(pairs.select(*PAIR_COLUMNS.names(), *PAIR_SIDES.names()), items)
    evidence = ["rank", "rescale", *EVIDENCE_COLUMNS.names()]
    parts = [structural.select("series", "category", "change", "description", *evidence),
             _metric_changes(pairs, metrics), _presence(a, b, run_a, run_b)]
    return pl.concat(parts, how="diagonal_relaxed").sort("series", maintain_order=True)


def _metric_changes(pairs: pl.DataFrame, metrics: pl.DataFrame) -> pl.DataFrame:
    """A series' metrics that changed: of its program in each dump (a TORCH_TRACE log has each program's)."""
    before = metrics.rename({"path": "before_path", "program": "before_dump_program", "value": "before"})
    after = metrics.rename({"path": "after_path", "program": "after_dump_program", "value": "after"})
    joined = (pairs.select("series", *PAIR_SIDES.names())
              .join(before, on=["before_path", "before_dump_program"], nulls_equal=True)
              .join(after, on=["after_path", "after_dump_program", "metric"], how="full", coalesce=True, nulls_equal=True))
    joined = joined.filter(pl.col("series").is_not_null() & (pl.col("before") != pl.col("after")).fill_null(True)
                           ).sort("series", "metric")
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


def main(*, run_a: str, run_b: str, series: str | None, warehouse: Path, as_json: bool) -> None:
    try:
        result, run_a, run_b = diff_warehouse(warehouse, run_a, run_b, series)
    except ValueError as exc:  # one line for people, whatever refused the comparison
        if isinstance(exc, CommandError):
            raise
        raise DiffFailed(str(exc)) from None
    print_diff(result, run_a, run_b, as_json=as_json)


def print_diff(result: pl.DataFrame, run_a: str, run_b: str, *, as_json: bool) -> None:
    """The diff as text, or one JSON object per change."""
    if not as_json:
        sys.stdout.write(diff_text(result, run_a, run_b))
        return
    for row in result.to_dicts():
        json.dump(row, sys.stdout, default=str, ensure_ascii=False)
        sys.stdout.write("\n")
