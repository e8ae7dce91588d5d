"""Structural diffs of each series between consecutive runs (and between any two runs).

``transforms.trends.diff_items`` reduces a dump to items keyed on stable identities and
compares two item sets; this module pairs the runs:

- ``dump_items`` is a cache table: items are computed once per (path, content,
  parser version) — ``paths_needing_items`` says which, ``merge_items`` keeps the rest;
- ``consecutive_diffs``: for every series, each run against the series' previous
  run (failed dumps skipped), when the contents differ — the ``diffs`` table;
- ``diff_pairs``: the same for arbitrary (before path, after path) pairs, which
  ``dumpscope diff RUN_A RUN_B`` uses.
"""

from __future__ import annotations

from typing import Callable

import polars as pl

from transforms.trends.diff_items import DIFF_DOCS as ITEM_DIFF_DOCS
from transforms.trends.diff_items import DIFF_SCHEMA as ITEM_DIFF_SCHEMA
from transforms.trends.diff_items import ITEM_DOCS, ITEM_SCHEMA, describe_change, diff_dump_items, dump_items

STORED_ITEM_SCHEMA = pl.Schema({"path": pl.String, "dump_id": pl.String, "parser_version": pl.Int16}
                               | {c: t for c, t in ITEM_SCHEMA.items() if c != "path"})
STORED_ITEM_DOCS = ITEM_DOCS | {
    "": ITEM_DOCS[""] + " A cache: computed once per path, content and parser version; a dump without items has one row of category 'none'.",
    "dump_id": "Content the items were computed from (dumps.dump_id).",
    "parser_version": "Parser version of the records they were computed from.",
}

NO_ITEMS = "none"  # category of the marker row of a dump that has no structural items

PAIR_COLUMNS = pl.Schema({
    "run_id": pl.String, "previous_run_id": pl.String, "series": pl.String, "job": pl.String,
    "program": pl.String, "kind": pl.String, "stage": pl.String,
})
DIFF_SCHEMA = PAIR_COLUMNS | ITEM_DIFF_SCHEMA | {"description": pl.String}
DIFF_DOCS = {
    "": "What changed in the structure of a series between a run and the series' previous run (only runs whose dump content differs): fusions, custom calls, collectives, allocations, values live at the peak, Inductor fused groups and kernels, ONNX steps, ops and accuracy.",
    "run_id": "The later run.",
    "previous_run_id": "The series' previous run with a usable dump (the earlier side).",
    "series": "Series id.",
    "job": "Job.",
    "program": "Program name normalized across runs.",
    "kind": "Dump format.",
    "stage": "Compiler stage (NULL when none).",
    "category": ITEM_DOCS["category"],
    "key": ITEM_DOCS["key"],
    **{c: ITEM_DIFF_DOCS[c] for c in ITEM_DIFF_SCHEMA.names() if c in ITEM_DIFF_DOCS},
    "description": "The change in one line, e.g. 'all-reduce f32[8,128] appeared (×2, 4.0 KiB)'.",
}


def paths_needing_items(dumps: pl.DataFrame, stored: pl.DataFrame) -> pl.DataFrame:
    """Rows of ``dumps`` (path, run_id, job, kind, stage, program, dump_id, parser_version)
    whose items are not cached, plus the buffer assignments whose HLO dump (the source of
    their op metadata) is among them."""
    if stored.is_empty():
        return dumps
    have = stored.select("path", "dump_id", "parser_version").unique()
    todo = dumps.join(have, on=["path", "dump_id", "parser_version"], how="anti", nulls_equal=True)
    hlo = todo.filter((pl.col("kind") == "xla_hlo") & (pl.col("stage") == "after_optimizations")).select("run_id", "job", "program")
    buffers = dumps.filter(pl.col("kind") == "xla_buffer_assignment").join(hlo.unique(), on=["run_id", "job", "program"])
    return pl.concat([todo, buffers]).unique("path", maintain_order=True)


def compute_items(todo: pl.DataFrame, all_dumps: pl.DataFrame,
                  fetch: Callable[[str, list[str]], pl.DataFrame]) -> pl.DataFrame:
    """Items of the ``todo`` dumps, in ``STORED_ITEM_SCHEMA``. ``fetch(table, dump_ids)``
    returns records rows. Buffer assignments take op metadata from the HLO dump of the
    same run, job and program, which comes along even when it is cached."""
    if todo.is_empty():
        return pl.DataFrame(schema=STORED_ITEM_SCHEMA)
    buffers = todo.filter(pl.col("kind") == "xla_buffer_assignment").select("run_id", "job", "program").unique()
    hlo = all_dumps.filter((pl.col("kind") == "xla_hlo") & (pl.col("stage") == "after_optimizations")).join(
        buffers, on=["run_id", "job", "program"])
    dumps = pl.concat([todo.select(hlo.columns), hlo], how="vertical_relaxed").unique("path")
    ids = dumps.get_column("dump_id").drop_nulls().unique().to_list()
    tables = ("hlo_instructions", "buffer_allocations", "buffer_values", "buffer_peak_values", "inductor_nodes",
              "inductor_kernels", "inductor_extern_calls", "inductor_buffers", "onnx_steps", "onnx_op_counts",
              "onnx_verification")
    records = {t: fetch(t, ids) for t in tables}
    records = {t: f for t, f in records.items() if f.width}
    items = dump_items(dumps.select("path", "run_id", "job", "kind", "stage", "program", "dump_id"), records)
    items = items.join(todo.select("path", "dump_id", "parser_version"), on="path")  # only what was asked
    # A dump with no items gets one NO_ITEMS row, so the cache knows it was done.
    empty = todo.join(items.select("path").unique(), on="path", how="anti").select(
        "path", "dump_id", "parser_version", pl.lit(NO_ITEMS).alias("category"), pl.lit("").alias("key"))
    return pl.concat([items.select(STORED_ITEM_SCHEMA.names()).cast(dict(STORED_ITEM_SCHEMA)),
                      empty.cast({"parser_version": pl.Int16})], how="diagonal").select(STORED_ITEM_SCHEMA.names())


def merge_items(stored: pl.DataFrame, new: pl.DataFrame, dumps: pl.DataFrame) -> pl.DataFrame:
    """The cache after this aggregation: stored items still current, plus the new ones."""
    current = dumps.select("path", "dump_id", "parser_version")
    kept = stored.join(current, on=["path", "dump_id", "parser_version"], how="semi", nulls_equal=True) if stored.height else stored
    kept = kept.join(new.select("path").unique(), on="path", how="anti") if kept.height else kept
    out = pl.concat([kept.select(STORED_ITEM_SCHEMA.names()).cast(dict(STORED_ITEM_SCHEMA)), new])
    return out.sort("path", "category", "key")


def diff_pairs(pairs: pl.DataFrame, items: pl.DataFrame) -> pl.DataFrame:
    """``pairs``: PAIR_COLUMNS plus before_path, after_path. Changed items per pair."""
    if pairs.is_empty():
        return pl.DataFrame(schema=DIFF_SCHEMA)
    pairs = pairs.with_row_index("pair_id")
    item_cols = [c for c in ITEM_SCHEMA.names() if c != "path"]
    items = items.filter(pl.col("category") != NO_ITEMS)
    side = lambda col: pairs.select("pair_id", pl.col(col).alias("path")).join(  # noqa: E731
        items.select("path", *item_cols), on="path").drop("path")
    changed = diff_dump_items(side("before_path"), side("after_path"))
    if changed.is_empty():
        return pl.DataFrame(schema=DIFF_SCHEMA)
    out = changed.join(pairs.select("pair_id", *PAIR_COLUMNS.names()), on="pair_id").drop("pair_id")
    text = [describe_change(r) for r in out.select(ITEM_DIFF_SCHEMA.names()).iter_rows(named=True)]
    out = out.with_columns(pl.Series("description", text, pl.String))
    # Biggest byte movements first: what explains a memory regression leads.
    moved = (pl.col("bytes_after").fill_null(0) - pl.col("bytes_before").fill_null(0)).abs()
    return (out.with_columns(moved.alias("_moved")).sort("run_id", "series", "_moved", "category", "key",
                                                         descending=[False, False, True, False, False])
            .select(DIFF_SCHEMA.names()).cast(dict(DIFF_SCHEMA)))


def consecutive_pairs(series: pl.DataFrame, order: pl.DataFrame, from_seq: int = 0) -> pl.DataFrame:
    """``series``: dump_series rows with dump_id and status. Each usable dump of a series
    (runs from ``from_seq`` on) against the series' previous usable dump, when the
    contents differ: PAIR_COLUMNS plus before_path and after_path."""
    usable = (series.filter(pl.col("status").is_in(["ok", "partial"])).join(order.select("run_id", "run_seq"), on="run_id")
              .with_columns(pl.col("series_program").alias("program")))
    usable = usable.sort("series", "run_seq").with_columns(
        pl.col("run_id").shift(1).over("series").alias("previous_run_id"),
        pl.col("path").shift(1).over("series").alias("before_path"),
        pl.col("dump_id").shift(1).over("series").alias("_before_id"),
    )
    pairs = usable.filter(pl.col("before_path").is_not_null() & (pl.col("dump_id") != pl.col("_before_id"))
                          & (pl.col("run_seq") >= from_seq))
    return pairs.select(*PAIR_COLUMNS.names(), "before_path", pl.col("path").alias("after_path"))


def diff_text(result: pl.DataFrame, run_a: str, run_b: str) -> str:
    """``dumpscope diff`` output: per series, the structural changes, then the metrics."""
    if result.is_empty():
        return f"No differences between {run_a} and {run_b}.\n"
    lines = [f"{run_a} → {run_b}", ""]
    for (series,), rows in result.group_by("series", maintain_order=True):
        lines.append(series)
        lines += [f"  {d}" for d in rows.get_column("description")]
        lines.append("")
    return "\n".join(lines)
