"""Structural diffs of each series between consecutive runs (and between any two runs).

``transforms.trends.diff_items`` reduces a dump to items keyed on stable identities and
compares two item sets; this module pairs the runs:

- ``content_items`` holds items once per content: ``items_keys`` names each dump's
  items by its content and parser version (a buffer assignment also by its HLO dump's,
  which gives its op metadata), ``items_of_contents`` computes them for a batch of keys;
- ``consecutive_diffs``: for every series, each run against the series' previous
  run (failed dumps skipped), when the contents differ — the ``diffs`` table;
- ``diff_pairs``: the same for arbitrary (before path, after path) pairs, which
  ``dumpscope diff RUN_A RUN_B`` uses.
"""

from __future__ import annotations

import polars as pl

from transforms.trends.diff_items import DIFF_DOCS as ITEM_DIFF_DOCS
from transforms.trends.diff_items import DIFF_SCHEMA as ITEM_DIFF_SCHEMA
from transforms.trends.diff_items import ITEM_DOCS, ITEM_SCHEMA, describe_change, diff_dump_items, dump_items


NO_ITEMS = "none"  # category of the marker row of a dump that has no structural items
# Bump when dump_items computes other items from the same records: every content's
# items get a new key, so they are computed again (for contents whose records are kept).
ITEMS_VERSION = 1

CONTENT_ITEM_SCHEMA = pl.Schema({"items_key": pl.String} | {c: t for c, t in ITEM_SCHEMA.items() if c != "path"})
CONTENT_ITEM_DOCS = {c: d for c, d in ITEM_DOCS.items() if c != "path"} | {
    "": "Structural items of each dump content (fusions, collectives, allocations, fused groups, ONNX steps...), one row per (items_key, category, key); computed once per content and kept for ever. The view dump_items gives them per dump path.",
    "items_key": "Which content the items are of: i<items version>:<dump_id>:<parser version>, and for a buffer assignment '+' the same of the after-optimizations HLO dump of its run, job and program (its op metadata). dump_series.items_key names it for each path.",
}
# Records tables each dump kind's items are computed from.
ITEM_TABLES = {
    "xla_hlo": ("hlo_instructions",),
    "xla_buffer_assignment": ("buffer_allocations", "buffer_values", "buffer_peak_values"),
    "inductor_ir": ("inductor_nodes", "inductor_buffers"),
    "inductor_output_code": ("inductor_kernels", "inductor_extern_calls"),
    "onnx_report": ("onnx_steps", "onnx_op_counts", "onnx_verification"),
}

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


def items_keys(dumps: pl.DataFrame) -> pl.DataFrame:
    """path, items_key for ``dumps`` (path, run_id, job, kind, stage, program, dump_id,
    parser_version, status); the key is null for failed dumps (a kind without items
    gets a key too: its one 'none' row says it was looked at)."""
    own = pl.concat_str(pl.lit(f"i{ITEMS_VERSION}:"), pl.col("dump_id"), pl.lit(":"), pl.col("parser_version").cast(pl.String))
    keyed = dumps.with_columns(own.alias("_own"))
    hlo = (keyed.filter((pl.col("kind") == "xla_hlo") & (pl.col("stage") == "after_optimizations") & (pl.col("status") != "failed"))
           .group_by("run_id", "job", "program")
           .agg(pl.concat_str(pl.col("dump_id"), pl.lit(":"), pl.col("parser_version").cast(pl.String)).unique().sort()
                .str.join("+").alias("_hlo")))
    keyed = keyed.join(hlo, on=["run_id", "job", "program"], how="left", nulls_equal=True)
    key = (pl.when(pl.col("status").is_null() | (pl.col("status") == "failed")).then(None)
           .when((pl.col("kind") == "xla_buffer_assignment") & pl.col("_hlo").is_not_null())
           .then(pl.concat_str(pl.col("_own"), pl.lit("+"), pl.col("_hlo")))
           .otherwise(pl.col("_own")))
    return keyed.select("path", key.alias("items_key"))


def key_contents(keys: list[str]) -> pl.DataFrame:
    """items_key, dump_id, role ('own' or 'hlo') of each content a key's items come from."""
    rows = []
    for key in keys:
        own, *hlo = key.split("+")
        rows.append((key, own.split(":")[1], "own"))
        rows += [(key, part.split(":")[0], "hlo") for part in hlo]
    return pl.DataFrame(rows, schema={"items_key": pl.String, "dump_id": pl.String, "role": pl.String}, orient="row")


def items_of_contents(keys: pl.DataFrame, records: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Items of each key in ``keys`` (items_key, kind, stage, dump_id: one row per key),
    from ``records`` (the records tables of their contents, and of the HLO dumps the
    buffer assignment keys name), in ``CONTENT_ITEM_SCHEMA``."""
    if keys.is_empty():
        return pl.DataFrame(schema=CONTENT_ITEM_SCHEMA)
    # Each key stands as its own dump, in a run of its own; a buffer assignment's HLO
    # dump joins it there (same run, job and program), under a path of its own.
    own = keys.select(pl.col("items_key").alias("path"), pl.col("items_key").alias("run_id"), pl.lit("").alias("job"),
                      "kind", "stage", pl.lit("").alias("program"), "dump_id")
    contents = key_contents(keys.filter(pl.col("kind") == "xla_buffer_assignment").get_column("items_key").to_list())
    hlo = contents.filter(pl.col("role") == "hlo").select(
        (pl.col("items_key") + "#hlo:" + pl.col("dump_id")).alias("path"), pl.col("items_key").alias("run_id"),
        pl.lit("").alias("job"), pl.lit("xla_hlo").alias("kind"), pl.lit("after_optimizations").alias("stage"),
        pl.lit("").alias("program"), "dump_id")
    items = dump_items(pl.concat([own, hlo]), {t: f for t, f in records.items() if f.width})
    items = items.join(keys.select(pl.col("items_key").alias("path")), on="path", how="semi").rename({"path": "items_key"})
    empty = keys.join(items.select("items_key").unique(), on="items_key", how="anti").select(
        "items_key", pl.lit(NO_ITEMS).alias("category"), pl.lit("").alias("key"))
    return pl.concat([items.select(CONTENT_ITEM_SCHEMA.names()).cast(dict(CONTENT_ITEM_SCHEMA)), empty],
                     how="diagonal").select(CONTENT_ITEM_SCHEMA.names()).cast(dict(CONTENT_ITEM_SCHEMA))


def item_batches(todo: pl.DataFrame, max_rows: int) -> list[pl.DataFrame]:
    """``todo`` (items_key, kind, stage, dump_id, rows: records rows the key's items are
    computed from) cut into batches of at most ``max_rows`` rows (a key larger than that
    is a batch of its own), in key order."""
    out, batch, size = [], [], 0
    for row in todo.sort("items_key").iter_rows(named=True):
        if batch and size + row["rows"] > max_rows:
            out.append(pl.DataFrame(batch, schema=todo.schema, orient="row"))
            batch, size = [], 0
        batch.append(row)
        size += row["rows"]
    if batch:
        out.append(pl.DataFrame(batch, schema=todo.schema, orient="row"))
    return out


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
