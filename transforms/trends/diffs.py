"""Structural diffs of each series between consecutive runs (and between any two runs).

``transforms.trends.diff_items`` reduces a dump to items keyed on stable identities and
compares two item sets; this module pairs the runs:

- ``content_items`` holds items once per content: ``items_keys`` names each dump's
  items by its content and parser version (a buffer assignment also by its HLO dump's,
  which gives its op metadata), ``items_of_contents`` computes them for a batch of keys;
- ``consecutive_diffs``: for every series, each run against the series' previous
  run (failed dumps skipped), when the contents differ — the ``diffs`` table;
- ``diff_pairs``: the same for arbitrary (before path, after path) pairs, which
  ``dumpscope diff RUN_A RUN_B`` uses. A pair is of one program: a TORCH_TRACE log's items
  are every program's, and each series (one per program) keeps its own program's (its compiles,
  graph breaks, recompiles and failed compiles: ``diff_item_rows.PROGRAM_KEYED``) and those of no
  program the log names (``? | ...``).

Each content item carries its evidence: the line ranges of its first instance in the
dump (``transforms.trends.evidence``) and, once ``flows.verdict.items`` has read them from the
bucket, the excerpt; each diff row carries both sides' excerpts and dump paths.

Order of the changes of a pair (``SIGNIFICANCE``, the one definition, used by the
``diffs`` table's ``rank``, ``dumpscope diff`` and the pages): first a collective, custom
call or ATen fallback that appeared or vanished, or an ONNX step whose status changed;
then a pure rescale, as one line; then the rest; within each, by bytes moved (largest
first), then by instances moved, then category and key.

A pure rescale (``rescales``): every item that vanished has a partner that appeared,
of the same category, count and label but for its dimensions, and every dimension that
differs changed by one common factor (a partner with equal dimensions, a fusion whose
inner shapes changed, is allowed). Those items, and the items whose bytes changed by
exactly that factor, are marked with ``rescale`` ("64 → 1024", the most common
dimension change) and shown as one line, "batch 64 → 1024: 37 allocations and 12
fusions rescaled", when they are at least ``RESCALE_MIN_ITEMS``. Other byte changes
(a temp arena packed differently) stay lines of their own.
"""

from __future__ import annotations

import re
from collections import Counter
from fractions import Fraction

import polars as pl

from transforms.trends import diff_item_rows as item_rows
from transforms.trends import evidence
from transforms.trends.diff_items import DIFF_DOCS as ITEM_DIFF_DOCS
from transforms.trends.diff_items import DIFF_SCHEMA as ITEM_DIFF_SCHEMA
from transforms.trends.diff_items import ITEM_DOCS, ITEM_SCHEMA, describe_change, diff_dump_items


NO_ITEMS = "none"  # category of the marker row of a dump that has no structural items
# Bump when dump_items computes other items from the same records: every content's
# items get a new key, so they are computed again (for contents whose records are kept).
ITEMS_VERSION = 5  # 2: items of TORCH_TRACE logs (graph_break, recompile, compile_failure); 3: their keys, labels
# and details without what changes from process to process (transforms.volatile: ids, addresses, paths); 4: each
# compile of a TORCH_TRACE log (compile_graph, compile_kernels, compile_code, compile_guard, collective_schedule)
# and what its ranks are compared on (rank_profile); 5: a TORCH_TRACE log's graph_break, recompile and compile_failure
# keyed by their program first, as its compiles are (diff_item_rows.PROGRAM_KEYED)

EVIDENCE_SCHEMA = pl.Schema({"excerpt_lines": pl.String, "excerpt": pl.String, "excerpt_from": pl.String})
CONTENT_ITEM_SCHEMA = pl.Schema({"items_key": pl.String} | {c: t for c, t in ITEM_SCHEMA.items() if c != "path"}
                                | EVIDENCE_SCHEMA)
CONTENT_ITEM_DOCS = {c: d for c, d in ITEM_DOCS.items() if c != "path"} | {
    "": "Structural items of each dump content (fusions, collectives, allocations, fused groups, ONNX steps...), one row per (items_key, category, key); computed once per content and kept for ever. The view dump_items gives them per dump path.",
    "items_key": "Which content the items are of: i<items version>:<dump_id>:<parser version>, and for a buffer assignment '+' the same of the after-optimizations HLO dump of its run, job and program (its op metadata). dump_series.items_key names it for each path.",
    "excerpt_lines": "Lines of the dump the item's first instance stands on, e.g. '57,212-230' (a fusion: its instruction and its fused computation; an allocation: its header and value lines; an Inductor node: its block; a failed ONNX step: its line and the exception lines); the lines the excerpt shows once read. NULL when no line is known.",
    "excerpt": f"Those lines of the dump, read from the bucket when the items were computed: at most {evidence.MAX_ITEM_LINES} lines and {evidence.MAX_ITEM_CHARS} characters, lines past {evidence.MAX_LINE_CHARS} characters cut with a marker, ranges separated by a '{evidence.GAP}' line. Dump text, not trusted. NULL when the dump could not be read (gone from the bucket, no bucket given, items computed before excerpts were kept) or past the per-dump cap of {evidence.MAX_DUMP_LINES} lines.",
    "excerpt_from": "Bucket path of the dump the excerpt was read from (any path holding the content); NULL without excerpt.",
}
# How content items are stored: the excerpt text once in excerpt_texts (the versions of a
# program share most of their fusion bodies and allocations: one text, many items), each
# item naming it by excerpt_id; the view content_items joins them back (CONTENT_ITEM_SCHEMA).
STORED_ITEM_SCHEMA = pl.Schema({c: t for c, t in CONTENT_ITEM_SCHEMA.items() if c != "excerpt"} | {"excerpt_id": pl.String})
STORED_ITEM_DOCS = {c: d for c, d in CONTENT_ITEM_DOCS.items() if c != "excerpt"} | {
    "": "Structural items of each dump content as stored, one row per (items_key, category, key), their excerpt text by id (excerpt_texts); read them through the view content_items.",
    "excerpt_id": "The excerpt's text in excerpt_texts (sha256 of the text); NULL when no excerpt was read.",
}
EXCERPT_TEXT_SCHEMA = pl.Schema({"excerpt_id": pl.String, "excerpt": pl.String})
EXCERPT_TEXT_DOCS = {
    "": "Excerpt texts of content items, each once (many versions of a program show the same fusion body or allocation).",
    "excerpt_id": "sha256 of the text, hex.",
    "excerpt": CONTENT_ITEM_DOCS["excerpt"],
}

# Records tables each dump kind's items are computed from.
ITEM_TABLES = {
    "xla_hlo": ("hlo_instructions", "hlo_computations"),
    "xla_buffer_assignment": ("buffer_allocations", "buffer_values", "buffer_peak_values"),
    "inductor_ir": ("inductor_nodes", "inductor_buffers"),
    "inductor_output_code": ("inductor_kernels", "inductor_extern_calls"),
    "onnx_report": ("onnx_steps", "onnx_op_counts", "onnx_verification", "onnx_errors"),
    "torch_trace": ("torch_trace_graph_breaks", "torch_trace_compiles", "torch_trace_guards", "torch_trace_output_code",
                    "torch_trace_collectives"),
}

PAIR_COLUMNS = pl.Schema({
    "run_id": pl.String, "previous_run_id": pl.String, "series": pl.String, "job": pl.String,
    "program": pl.String, "kind": pl.String, "stage": pl.String,
})
# What a pair compares besides its PAIR_COLUMNS: each side's dump, and the program the series shows
# of it as the dump names it (dump_series.program: a TORCH_TRACE log holds several).
PAIR_SIDES = pl.Schema({"before_path": pl.String, "after_path": pl.String, "before_dump_program": pl.String,
                        "after_dump_program": pl.String})
EVIDENCE_COLUMNS = pl.Schema({
    "before_path": pl.String, "after_path": pl.String, "lines_before": pl.String, "lines_after": pl.String,
    "excerpt_before": pl.String, "excerpt_after": pl.String,
})
DIFF_SCHEMA = PAIR_COLUMNS | ITEM_DIFF_SCHEMA | {"description": pl.String, "rank": pl.Int32, "rescale": pl.String} \
    | EVIDENCE_COLUMNS
DIFF_DOCS = {
    "": "What changed in the structure of a series between a run and the series' previous run (only runs whose dump content differs): fusions, custom calls, collectives, allocations, values live at the peak, Inductor fused groups and kernels, ONNX steps, ops and accuracy.",
    "run_id": "The later run.",
    "previous_run_id": "The series' previous run with a usable dump (the earlier side).",
    "series": "Series id.",
    "job": "Job.",
    "program": "Program name normalized across runs.",
    "kind": "Dump format.",
    "stage": "Compiler stage (NULL when none).",
    "category": ITEM_DOCS["category"].removesuffix(".") + "; or rank_divergence: a rank of the run's job that "
    "compiled the program differently from the others (key 'rank_<n> | <dimension>', the majority's log before, the "
    "rank's after; previous_run_id NULL: it compares ranks of one run).",
    "key": ITEM_DOCS["key"],
    **{c: ITEM_DIFF_DOCS[c] for c in ITEM_DIFF_SCHEMA.names() if c in ITEM_DIFF_DOCS},
    "description": "The change in one line, e.g. 'all-reduce f32[8,128] appeared (×2, 4.0 KiB)'.",
    "rank": "Place of the change among the changes of its series in that run, 1 first (docs/trends.md, 'Order of the changes'): new or removed collectives, custom calls and ATen fallbacks and changed ONNX steps, then a pure rescale, then the rest, by bytes moved, then instances moved.",
    "rescale": "Set when the change is part of a pure rescale of the series (every shape change one common factor on a dimension): the most common dimension change, e.g. '64 → 1024'. Such changes are shown as one line.",
    "before_path": "Bucket path of the earlier dump (relative to the bucket root).",
    "after_path": "Bucket path of the later dump.",
    "lines_before": "Lines of the earlier dump the item stands on (content_items.excerpt_lines); NULL when the item is new or no line is known.",
    "lines_after": "Lines of the later dump the item stands on; NULL when it vanished or no line is known.",
    "excerpt_before": "Excerpt of the earlier dump at lines_before (content_items.excerpt; dump text, not trusted); NULL when not read.",
    "excerpt_after": "Excerpt of the later dump at lines_after; NULL when not read.",
}


def items_keys(dumps: pl.DataFrame) -> pl.DataFrame:
    """path, items_key for ``dumps`` (path, run_id, job, kind, stage, program, dump_id,
    parser_version, status; a path may come once per series); one row per path; the key is null for failed dumps (a kind without items
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
    # One key per path: a TORCH_TRACE log's series (one per program) share its items (each diffs its own: diff_pairs).
    return keyed.select("path", key.alias("items_key")).unique("path", maintain_order=True)


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
    buffer assignment keys name), in ``CONTENT_ITEM_SCHEMA``. One frame holds them all:
    a content too large for that goes through ``transforms.trends.item_chunks``."""
    if keys.is_empty():
        return pl.DataFrame(schema=CONTENT_ITEM_SCHEMA)
    dumps = key_dumps(keys)
    records = {t: f for t, f in records.items() if f.width}
    return content_items(keys, _items_with_first(dumps, records), dumps, records)


def key_dumps(keys: pl.DataFrame) -> pl.DataFrame:
    """The dumps frame the item builders take for ``keys``: each key stands as its own dump,
    in a run of its own; a buffer assignment's HLO dump joins it there (same run, job and
    program), under a path of its own."""
    own = keys.select(pl.col("items_key").alias("path"), pl.col("items_key").alias("run_id"), pl.lit("").alias("job"),
                      "kind", "stage", pl.lit("").alias("program"), "dump_id")
    contents = key_contents(keys.filter(pl.col("kind") == "xla_buffer_assignment").get_column("items_key").to_list())
    hlo = contents.filter(pl.col("role") == "hlo").select(
        (pl.col("items_key") + "#hlo:" + pl.col("dump_id")).alias("path"), pl.col("items_key").alias("run_id"),
        pl.lit("").alias("job"), pl.lit("xla_hlo").alias("kind"), pl.lit("after_optimizations").alias("stage"),
        pl.lit("").alias("program"), "dump_id")
    return pl.concat([own, hlo])


def content_items(keys: pl.DataFrame, items: pl.DataFrame, dumps: pl.DataFrame,
                  records: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """``items`` (``_items_with_first``: of ``dumps``, ``key_dumps(keys)``) as content items:
    those of the keys' own paths, with their evidence lines (``evidence.item_lines`` reads
    ``records``), and a 'none' row for a key without items."""
    items = items.join(keys.select(pl.col("items_key").alias("path")), on="path", how="semi")
    lines = evidence.item_lines(items, dumps, records)
    items = items.join(lines, on=["path", "category", "key"], how="left").rename({"path": "items_key"}).with_columns(
        pl.lit(None, pl.String).alias("excerpt"), pl.lit(None, pl.String).alias("excerpt_from"))  # read by flows.verdict.items
    empty = keys.join(items.select("items_key").unique(), on="items_key", how="anti").select(
        "items_key", pl.lit(NO_ITEMS).alias("category"), pl.lit("").alias("key"))
    return pl.concat([items.select(CONTENT_ITEM_SCHEMA.names()).cast(dict(CONTENT_ITEM_SCHEMA)), empty],
                     how="diagonal").select(CONTENT_ITEM_SCHEMA.names()).cast(dict(CONTENT_ITEM_SCHEMA))


def _items_with_first(dumps: pl.DataFrame, records: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """``diff_items.dump_items``'s items plus ``first``, the order of each item's first
    instance (where its evidence is): the instance rows are folded here, once."""
    parts = [*item_rows.hlo_rows(dumps, records), *item_rows.buffer_rows(dumps, records),
             *item_rows.inductor_rows(dumps, records), *item_rows.onnx_rows(dumps, records),
             *item_rows.torch_trace_rows(dumps, records)]
    if not parts:
        return pl.DataFrame(schema=ITEM_SCHEMA | {"first": pl.Int64})
    by_order = [pl.col(c).sort_by("order").drop_nulls().first() for c in ("label", "detail")]
    unknown = pl.col("bytes").is_null().all()  # a size nobody knows stays unknown (polars would sum it to 0)
    return pl.concat(parts).group_by("path", "category", "key").agg(
        pl.col("count").sum(), pl.when(unknown).then(None).otherwise(pl.col("bytes").sum()).alias("bytes"),
        pl.col("value").max(), *by_order, pl.col("order").min().alias("first"),
    ).select(*ITEM_SCHEMA.names(), "first").cast(ITEM_SCHEMA).sort("path", "category", "key").collect()


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
    """``pairs``: PAIR_COLUMNS plus PAIR_SIDES. Changed items per pair, with both sides' evidence
    (when ``items`` carries ``EVIDENCE_SCHEMA``), ranked. A dump's items are its content's, every
    program's: each side keeps those of the pair's program (``diff_item_rows.of_program``), so a
    TORCH_TRACE log's series (one per program) each diff their own compiles, graph breaks, recompiles
    and failed compiles."""
    if pairs.is_empty():
        return pl.DataFrame(schema=DIFF_SCHEMA)
    # The program as the items' keys name it, normalised once a pair (not once an item).
    pairs = pairs.with_row_index("pair_id").with_columns(
        item_rows.series_program(pl.col(f"{name}_dump_program")).alias(f"_{name}_program") for name in ("before", "after"))
    item_cols = [c for c in ITEM_SCHEMA.names() if c != "path"]
    items = items.filter(pl.col("category") != NO_ITEMS)
    items = items.with_columns(pl.lit(None, pl.String).alias(c) for c in EVIDENCE_SCHEMA if c not in items.columns)

    def side(name: str, cols: list[str]) -> pl.DataFrame:
        mine = pairs.select("pair_id", pl.col(f"{name}_path").alias("path"), pl.col(f"_{name}_program").alias("_program"))
        return (mine.join(items.select("path", *cols), on="path").filter(item_rows.of_program(pl.col("_program")))
                .drop("path", "_program"))

    changed = diff_dump_items(side("before", item_cols), side("after", item_cols))
    if changed.is_empty():
        return pl.DataFrame(schema=DIFF_SCHEMA)
    out = changed.join(pairs.select("pair_id", *PAIR_COLUMNS.names(), "before_path", "after_path"), on="pair_id")
    for name in ("before", "after"):
        shown = side(name, ["category", "key", "excerpt_lines", "excerpt"]).unique(["pair_id", "category", "key"])
        out = out.join(shown.rename({"excerpt_lines": f"lines_{name}", "excerpt": f"excerpt_{name}"}),
                       on=["pair_id", "category", "key"], how="left")
    text = [describe_change(r) for r in out.select(ITEM_DIFF_SCHEMA.names()).iter_rows(named=True)]
    out = out.with_columns(pl.Series("description", text, pl.String))
    marked = pl.concat([rescales(rows) for rows in out.partition_by("pair_id")])
    return rank_changes(marked, ["run_id", "series"]).select(DIFF_SCHEMA.names()).cast(dict(DIFF_SCHEMA))


def divergence_rows(divergences: pl.DataFrame, series: pl.DataFrame) -> pl.DataFrame:
    """``diffs`` rows (category ``rank_divergence``, rank 0: before every change) of each series of the
    rank logs of a program whose ranks differ (``rank_divergence.compare``'s divergences), one per
    differing rank and dimension: what an incident of ``dynamo.rank_divergence`` gives as its cause,
    the differing rank's log lines after, the majority's before. ``series``: dump_series rows."""
    if divergences.is_empty():
        return pl.DataFrame(schema=DIFF_SCHEMA)
    logs = (series.filter((pl.col("kind") == "torch_trace") & pl.col("stage").str.starts_with("rank_"))
            .with_columns(item_rows.series_program(pl.col("program")).alias("_prog"))
            .select("run_id", "job", "_prog", "series", pl.col("series_program").alias("series_program"), "kind", "stage")
            .unique())
    return (divergences.rename({"program": "_prog"}).join(logs, on=["run_id", "job", "_prog"])
            .select(
                "run_id", pl.lit(None, pl.String).alias("previous_run_id"), "series", "job",
                pl.col("series_program").alias("program"), "kind", "stage", pl.lit("rank_divergence").alias("category"),
                pl.concat_str(pl.lit("rank_"), pl.col("rank").cast(pl.String), pl.lit(" | "), "dimension").alias("key"),
                pl.col("description").alias("label"), pl.lit("changed").alias("change"),
                *(pl.lit(None, DIFF_SCHEMA[c]).alias(c) for c in ("count_before", "count_after", "bytes_before",
                                                                  "bytes_after", "value_before", "value_after")),
                pl.lit(None, pl.String).alias("detail"), "description", pl.lit(0, pl.Int32).alias("rank"),
                pl.lit(None, pl.String).alias("rescale"), pl.col("majority_path").alias("before_path"),
                pl.col("path").alias("after_path"), pl.col("majority_lines").alias("lines_before"),
                pl.col("lines").alias("lines_after"), pl.col("majority_excerpt").alias("excerpt_before"),
                pl.col("excerpt").alias("excerpt_after"))
            .cast(dict(DIFF_SCHEMA)).sort("run_id", "series", "key"))


# -- order of the changes -----------------------------------------------------------------

FIRST_CATEGORIES = ("collective", "custom_call", "fallback_kernel", "fallback_call", "graph_break", "recompile",
                    "compile_failure", "collective_schedule")
SIGNIFICANCE = {  # tier -> what it holds (docs/trends.md repeats it)
    0: "a collective, custom call or ATen fallback that appeared or vanished; an ONNX step whose status changed; "
       "a graph break, recompile, failed compile or collective schedule of a TORCH_TRACE log that appeared or vanished",
    1: "a pure rescale (one line for all its changes)",
    2: "every other change",
}


def significance_tier() -> pl.Expr:
    """The tier (``SIGNIFICANCE``) of each change row."""
    appeared_or_vanished = pl.col("change").is_in(["appeared", "vanished"])
    return (pl.when(pl.col("category").is_in(FIRST_CATEGORIES) & appeared_or_vanished).then(0)
            .when((pl.col("category") == "onnx_step") & (pl.col("change") == "changed")).then(0)
            .when(pl.col("rescale").is_not_null()).then(1)
            .otherwise(2))


def rank_changes(changes: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """``changes`` (change rows with ``rescale``) sorted by ``group`` then significance,
    with ``rank`` (1 first) within each group."""
    moved = lambda c: (pl.col(f"{c}_after").fill_null(0) - pl.col(f"{c}_before").fill_null(0)).abs()  # noqa: E731
    ordered = changes.with_columns(significance_tier().alias("_tier"), moved("bytes").alias("_bytes"),
                                   moved("count").alias("_count")).sort(
        *group, "_tier", "_bytes", "_count", "category", "key", "change",
        descending=[False] * len(group) + [False, True, True, False, False, False])
    return ordered.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over(group).alias("rank")).drop(
        "_tier", "_bytes", "_count")


# -- pure rescales --------------------------------------------------------------------------

RESCALE_MIN_ITEMS = 3
_SHAPE = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9, ]*)\]")


def _shape_template(label: str | None) -> tuple[str, tuple[int, ...]]:
    """The label with its dimensions taken out, and the dimensions in order."""
    dims: list[int] = []

    def keep(m: re.Match[str]) -> str:
        found = [int(d) for d in m[2].replace(" ", "").split(",") if d]
        dims.extend(found)
        return f"{m[1]}[{len(found)}]"

    return _SHAPE.sub(keep, label or ""), tuple(dims)


def rescales(rows: pl.DataFrame) -> pl.DataFrame:
    """The changes of one pair with ``rescale`` set on those of a pure rescale (module
    docstring): every item that appeared or vanished has a partner of the same category,
    count and label but for its dimensions, and all the dimensions that differ changed by
    one factor."""
    rows = rows.with_row_index("_row")
    rescale = [None] * rows.height
    by_template: dict[tuple, dict[str, list]] = {}
    for r in rows.iter_rows(named=True):
        if r["change"] in ("appeared", "vanished"):
            template, dims = _shape_template(r["label"])
            count = r["count_after"] if r["change"] == "appeared" else r["count_before"]
            by_template.setdefault((r["category"], template, count), {"appeared": [], "vanished": []})[r["change"]].append(
                (dims, r["_row"]))
    pairs, factors, moves = [], set(), Counter()
    for sides in by_template.values():
        if len(sides["appeared"]) != len(sides["vanished"]):
            return _no_rescale(rows)  # an item appeared or vanished for good: not a pure rescale
        for (old, old_row), (new, new_row) in zip(sorted(sides["vanished"]), sorted(sides["appeared"]), strict=True):
            # Equal dimensions: the same label over a body whose inner shapes changed.
            changed = [(a, b) for a, b in zip(old, new, strict=True) if a != b] if len(old) == len(new) else None
            if changed is None:
                return _no_rescale(rows)
            factors |= {Fraction(b, a) if a else None for a, b in changed}
            moves.update(changed)
            pairs.append((old_row, new_row))
    if len(factors) != 1 or None in factors:
        return _no_rescale(rows)
    (factor,) = factors
    marked = {row for pair in pairs for row in pair}
    for r in rows.iter_rows(named=True):  # same key, bytes scaled by the factor: rescaled too
        bb, ba = r["bytes_before"], r["bytes_after"]
        if r["change"] in ("grew", "shrank") and bb and ba and Fraction(ba, bb) == factor \
                and r["count_before"] == r["count_after"]:
            marked.add(r["_row"])
    if len(marked) - len(pairs) < RESCALE_MIN_ITEMS:
        return _no_rescale(rows)
    (a, b), _ = max(moves.items(), key=lambda kv: (kv[1], -kv[0][0]))
    for row in marked:
        rescale[row] = f"{a} → {b}"
    return rows.drop("_row").with_columns(pl.Series("rescale", rescale, pl.String))


def _no_rescale(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.drop("_row").with_columns(pl.lit(None, pl.String).alias("rescale"))


def _plural(category: str, n: int) -> str:
    word = category.replace("_", " ")
    return f"{n} {word}" + ("" if n == 1 else "s")


def rescale_line(rows: pl.DataFrame) -> str:
    """One line for the changes of a rescale: 'batch 64 → 1024: 37 allocations and 12 fusions rescaled'
    (an item counts once: its appeared side, or its row when it grew or shrank)."""
    items = rows.filter(pl.col("change") != "vanished").group_by("category").len().sort("len", "category",
                                                                                        descending=[True, False])
    parts = [_plural(c, n) for c, n in items.iter_rows()]
    listed = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)
    return f"batch {rows.get_column('rescale')[0]}: {listed} rescaled"


def change_entries(rows: pl.DataFrame) -> list[dict]:
    """The changes of one series in one run, as shown (``dumpscope diff`` and the pages):
    in rank order, each {line, changes: [its rows]}; the changes of a rescale are one
    entry, at the place of its first change, holding them all."""
    out: list[dict] = []
    rescaled: dict | None = None
    has_rank = "rank" in rows.columns
    for r in (rows.sort("rank") if has_rank else rows).iter_rows(named=True):
        if r.get("rescale") is None:
            out.append({"line": r["description"], "changes": [r], "rescale": False})
        elif rescaled is None:
            rescaled = {"line": "", "changes": [r], "rescale": True}
            out.append(rescaled)
        else:
            rescaled["changes"].append(r)
    if rescaled is not None:
        rescaled["line"] = rescale_line(pl.DataFrame(rescaled["changes"], infer_schema_length=None))
    return out


def consecutive_pairs(series: pl.DataFrame, order: pl.DataFrame, from_seq: int = 0) -> pl.DataFrame:
    """``series``: dump_series rows with dump_id and status. Each usable dump of a series
    (runs from ``from_seq`` on) against the series' previous usable dump, when the
    contents differ: PAIR_COLUMNS plus PAIR_SIDES."""
    usable = (series.filter(pl.col("status").is_in(["ok", "partial"])).join(order.select("run_id", "run_seq"), on="run_id")
              .with_columns(pl.col("program").alias("after_dump_program"), pl.col("series_program").alias("program")))
    usable = usable.sort("series", "run_seq").with_columns(
        pl.col("run_id").shift(1).over("series").alias("previous_run_id"),
        pl.col("path").shift(1).over("series").alias("before_path"),
        pl.col("after_dump_program").shift(1).over("series").alias("before_dump_program"),
        pl.col("dump_id").shift(1).over("series").alias("_before_id"),
    )
    pairs = usable.filter(pl.col("before_path").is_not_null() & (pl.col("dump_id") != pl.col("_before_id"))
                          & (pl.col("run_seq") >= from_seq))
    return pairs.select(*PAIR_COLUMNS.names(), "before_path", pl.col("path").alias("after_path"), "before_dump_program",
                        "after_dump_program")


def diff_text(result: pl.DataFrame, run_a: str, run_b: str) -> str:
    """``dumpscope diff`` output: per series, the structural changes (in rank order, a rescale
    as one line), then the metrics."""
    if result.is_empty():
        return f"No differences between {run_a} and {run_b}.\n"
    lines = [f"{run_a} → {run_b}", ""]
    for (series,), rows in result.group_by("series", maintain_order=True):
        lines.append(series)
        lines += [f"  {e['line']}" for e in change_entries(rows.drop("rank", strict=False))]
        lines.append("")
    return "\n".join(lines)
