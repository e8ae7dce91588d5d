"""What changed between two runs of one program: items keyed on stable identities.

Two steps, both pure polars (no I/O):

``dump_items(dumps, records)``: input, the dumps frame (path, run_id, job, kind, stage,
program, dump_id; one row per path) and the records tables of those dump_ids by name
(warehouse tables; any may be missing or empty: no items from it). Output, one row per
(path, category, key) in ``ITEM_SCHEMA``, sorted. A key never holds a name the compiler
renumbers, so the same fusion, allocation or node gets the same key in the next run even
when every name around it changed. Categories and keys (``" | "`` joins key parts):

- ``fusion``: ``<fusion kind>:<digest of the called computation's body>`` (opcodes and
  shapes in order, names left out, called computations folded in by their own digest);
  bytes = the fusions' output bytes.
- ``custom_call``: custom_call_target. ``collective``: ``<opcode> <shape>`` for all-reduce,
  all-gather, reduce-scatter, all-to-all, collective-permute (and -start forms); bytes.
- ``allocation``: ``kind | shape | op`` where op is the op_name of the defining
  instruction (the largest value of the allocation) from the after-optimizations HLO
  of the same (run_id, job, program), else its name without ``.N`` numbers; shape is the
  parameter or output shape, or the values' shape when they share one; bytes = size.
- ``peak_value``: ``op | shape_index | shape`` of the values live at the peak; bytes.
- ``fused_group``: ``<node class>[<member class/IR type>,...] → <dtype:rank>,...`` of an
  Inductor fused node (members in order, output buffers in order, repeats as ``×n``);
  bytes = its output buffers, so a wider model keeps the key and the bytes grow.
- ``fallback_kernel``: ATen op (``aten.median.dim``). ``extern_kernel``: kernel
  (``extern_kernels.mm``). ``kernel_category``: generated kernels by category.
  ``fallback_call``: ATen fallback call sites in output code, by callee.
- ``onnx_step``: step slug; value 1 passed, 0 failed, null skipped. ``onnx_op``:
  ``<source>:<op>`` with count. ``accuracy``: output name; value = max_abs_diff.
- TORCH_TRACE logs, every key starting with the program of its compile (``<program> | ...``,
  ``diff_item_rows.series_program``; ``?`` when the log ends before naming it): ``graph_break``:
  ``<program> | <reason> | <file name>:<line> | <function>`` of the break's user frame; ``recompile``:
  ``<program> | <the recompile reason without its compile id>``; ``compile_failure``: ``<program> |
  <co_name> | <fail_type>: <first line of the reason>``. The items are the log's, every program's; a
  log's series are its programs, and each diffs the items of its program and those keyed ``?``
  (``diffs.diff_pairs``, ``diff_item_rows.PROGRAM_KEYED``). Labels leave the program out: the series
  that shows a change names it.
  Each compile, keyed ``<program> | <compile>`` (``diff_item_rows.compile_ref``: ``forward/0``,
  ``forward/0_1`` after a restart; not the frame id, which renumbers): ``compile_graph`` (count: its
  FX graph's ops), ``compile_kernels`` (its output codes' kernels), ``compile_code`` (their lines),
  ``compile_guard`` (``<program> | <compile> | <guard>``, a guard's normalised text) and
  ``collective_schedule`` (``<program> | <compile> | <ops in order>``). ``rank_profile``: what the
  log's ranks are compared on (``<program> | <dimension>``, the text in ``detail``), never a change.

``diff_dump_items(before, after)``: items of the previous and the current dump(s) of
a series, in; only the changes out, in ``DIFF_SCHEMA``. ``describe_change(row)``: one
line of text per change. Raises ``ValueError`` only when the two sides carry different
grouping columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from transforms.trends import diff_item_rows as rows
from transforms.units import human_bytes

ITEM_SCHEMA = pl.Schema({
    "path": pl.String, "category": pl.String, "key": pl.String, "label": pl.String, "count": pl.Int64,
    "bytes": pl.Int64, "value": pl.Float64, "detail": pl.String,
})  # fmt: skip
ITEM_DOCS: dict[str, str] = {
    "": "Structural items of one dump (fusions, collectives, allocations, fused groups, ONNX steps...), one row per (path, category, key).",
    "path": "Dump path (as in dumps.path).",
    "category": "fusion, custom_call, collective, allocation, peak_value, fused_group, fallback_kernel, extern_kernel, kernel_category, fallback_call, onnx_step, onnx_op, accuracy, graph_break, recompile, compile_failure, compile_graph, compile_kernels, compile_code, compile_guard, collective_schedule or rank_profile.",
    "key": "Stable identity within the category, the join key across runs: built from opcodes, shapes, kinds, targets and op metadata, never from renumbered names.",
    "label": "What a human reads, e.g. 'all-reduce f32[8,128]' or 'fusion kLoop add,multiply→f32[8,128]' (from the first instance in the dump).",
    "count": "Instances with this key (for onnx_op, the operator count; compile_graph: the compile's graph ops, compile_kernels: its kernels, compile_code: its output code lines; rank_profile: the entries of its text).",
    "bytes": "Bytes of those instances summed (outputs, allocation or value sizes); null where the category has no size.",
    "value": "onnx_step: 1 passed, 0 failed, null skipped; accuracy: max_abs_diff; else null.",
    "detail": "Where it comes from: 'file.py:42 (op_name)' from HLO metadata, or the Inductor node name; a compile's tlparse id; rank_profile: the text ranks are compared on; may be null.",
}
CHANGES = ("appeared", "vanished", "grew", "shrank", "changed")
DIFF_SCHEMA = pl.Schema({
    "category": pl.String, "key": pl.String, "label": pl.String, "change": pl.String,
    "count_before": pl.Int64, "count_after": pl.Int64, "bytes_before": pl.Int64, "bytes_after": pl.Int64,
    "value_before": pl.Float64, "value_after": pl.Float64, "detail": pl.String,
})  # fmt: skip
DIFF_DOCS: dict[str, str] = {
    "": "Items that changed between two runs of one series; grouping columns (series, pair_id) first when given.",
    "change": "appeared, vanished, grew / shrank (bytes when both sides have them and they differ, else count), "
    "changed (value: ONNX step status, accuracy beyond the tolerance).",
    **{f"{c}_{side}": f"{c.capitalize()} of the item {side} (null where absent)."
       for c in ("count", "bytes", "value") for side in ("before", "after")},
    "label": "Label of the current run's item (the previous one's when it vanished).",
    "detail": "Detail of the current run's item (the previous one's when it vanished).",
}  # fmt: skip
GROUPING = ("series", "pair_id")
_VALUED = frozenset({"onnx_step", "accuracy"})
_LOCATED = frozenset({"fusion", "custom_call", "collective"})
# A compile's figures, by category: what its count counts.
COMPILE_FIGURES = {"compile_graph": "graph ops", "compile_kernels": "kernels", "compile_code": "lines of output code"}
NOT_A_CHANGE = "rank_profile"  # what ranks are compared on: the other items of the log say what changed


def dump_items(dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """Items of every dump in ``dumps`` (see the module docstring), in ``ITEM_SCHEMA``."""
    parts = [*rows.hlo_rows(dumps, records), *rows.buffer_rows(dumps, records),
             *rows.inductor_rows(dumps, records), *rows.onnx_rows(dumps, records),
             *rows.torch_trace_rows(dumps, records)]  # fmt: skip
    if not parts:
        return pl.DataFrame(schema=ITEM_SCHEMA)
    first = [pl.col(c).sort_by("order").drop_nulls().first() for c in ("label", "detail")]
    return (
        pl.concat(parts).group_by("path", "category", "key").agg(
            pl.col("count").sum(), _sum_or_null("bytes"), pl.col("value").max(), *first)
        .select(ITEM_SCHEMA.names()).cast(ITEM_SCHEMA).sort("path", "category", "key").collect()
    )  # fmt: skip


def diff_dump_items(before: pl.DataFrame, after: pl.DataFrame, *, abs_tol: float = 1e-6) -> pl.DataFrame:
    """Changed items only. Both sides are item frames (``path`` optional, ignored); items
    of several dumps on one side are summed per key. With grouping columns (``series``,
    ``pair_id``) on both sides, many pairs diff at once: joined on them plus category and key.
    Values (ONNX step status, accuracy) closer than ``abs_tol`` count as unchanged."""
    group = [c for c in GROUPING if c in before.columns]
    if group != [c for c in GROUPING if c in after.columns]:
        raise ValueError(f"before and after must carry the same grouping columns: {group} vs after {after.columns}")
    on = [*group, "category", "key"]

    def side(items: pl.DataFrame, name: str) -> pl.LazyFrame:
        typed = items.lazy().with_columns(  # hand-built frames may carry all-null (Null-typed) columns
            pl.col(c).cast(ITEM_SCHEMA[c]) for c in ("count", "bytes", "value", "label", "detail")
        ).filter(pl.col("category") != NOT_A_CHANGE)
        return typed.group_by(on).agg(
            pl.col("count").sum(), _sum_or_null("bytes"), pl.col("value").max(),
            pl.col("label").drop_nulls().first(), pl.col("detail").drop_nulls().first(), pl.lit(True).alias("seen"),
        ).rename({c: f"{c}_{name}" for c in ("count", "bytes", "value", "label", "detail", "seen")})  # fmt: skip

    both = side(before, "before").join(side(after, "after"), on=on, how="full", coalesce=True)
    vb, va, bb, ba = pl.col("value_before"), pl.col("value_after"), pl.col("bytes_before"), pl.col("bytes_after")
    count_delta = pl.col("count_after") - pl.col("count_before")
    value_changed = (vb.is_null() != va.is_null()) | ((va - vb).abs() > abs_tol).fill_null(False)
    change = (
        pl.when(pl.col("seen_before").is_null()).then(pl.lit("appeared"))
        .when(pl.col("seen_after").is_null()).then(pl.lit("vanished"))
        .when(value_changed).then(pl.lit("changed"))
        .when(ba > bb).then(pl.lit("grew")).when(ba < bb).then(pl.lit("shrank"))
        .when(count_delta > 0).then(pl.lit("grew")).when(count_delta < 0).then(pl.lit("shrank"))
    )  # fmt: skip
    changed = both.with_columns(change.alias("change"), pl.coalesce("label_after", "label_before").alias("label"),
                                pl.coalesce("detail_after", "detail_before").alias("detail")
                                ).filter(pl.col("change").is_not_null())
    return _guards_where_they_differ((
        _whole_compiles_once(changed, group)
        .select(*group, *DIFF_SCHEMA.names())
        .cast(dict(DIFF_SCHEMA))
        .sort(*group, "category", "change", "key")
        .collect()
    ), group)  # fmt: skip


GUARD_SHOWN = 300  # characters of a guard a change line shows
_GUARD_CONTEXT = 60  # of them before the first character where a guard and its partner differ


def _guards_where_they_differ(changes: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """A guard that vanished from a compile while one of the same start appeared (the same guard on
    another value: ``___check_global_state()``'s JSON with ``"grad_enabled":true`` then ``false``)
    labelled by where the two differ, not by a start they share: ``guard of compile forward/0: …
    ,"grad_enabled":false,…``. Each guard is paired with the one of the other side it shares the
    longest start with, from 40 characters on."""
    guards = changes.filter((pl.col("category") == "compile_guard") & pl.col("change").is_in(["appeared", "vanished"]))
    if guards.is_empty():
        return changes
    labels: dict[tuple, str] = {}
    for where, rows in guards.group_by(*group, "detail", maintain_order=True):
        texts = {(r["change"], r["key"]): r["key"][len(r["detail"] or "") + 3:] for r in rows.iter_rows(named=True)}
        for (change, key), text in texts.items():
            others = [t for (c, _), t in texts.items() if c != change]
            shared = max((_shared_start(text, t) for t in others), default=0)
            if shared >= 40 and len(text) > GUARD_SHOWN:
                start = shared - _GUARD_CONTEXT
                labels[(*where[:-1], change, key)] = ("…" + text[start:start + GUARD_SHOWN]
                                                      + ("…" if start + GUARD_SHOWN < len(text) else ""))
    if not labels:
        return changes
    label = [f"{row[-1].split(': ', 1)[0]}: {labels[row[:-1]]}" if row[:-1] in labels else row[-1]
             for row in changes.select(*group, "change", "key", "label").iter_rows()]
    return changes.with_columns(pl.Series("label", label, pl.String))


def _shared_start(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _whole_compiles_once(changed: pl.LazyFrame, group: list[str]) -> pl.LazyFrame:
    """Changes without the kernels, code lines and guards of a compile that appeared or vanished
    whole: its ``compile_graph`` line says so (a new compile's guards are all new)."""
    whole = (changed.filter((pl.col("category") == "compile_graph") & pl.col("change").is_in(["appeared", "vanished"]))
             .select(*group, pl.col("key").alias("_compile"), pl.lit(True).alias("_whole")))
    compile_of = (pl.when(pl.col("category") == "compile_guard").then("detail")
                  .when(pl.col("category").is_in(["compile_kernels", "compile_code"])).then("key"))
    return (changed.with_columns(compile_of.alias("_compile"))
            .join(whole, on=[*group, "_compile"], how="left", nulls_equal=False)
            .filter(pl.col("_whole").is_null()).drop("_compile", "_whole"))


def describe_change(row: Mapping[str, Any]) -> str:
    """One line for a ``diff_dump_items`` row, e.g. ``all-reduce f32[8,128] appeared (×2, 4.0 KiB)``."""
    category, change, label = row["category"], row["change"], row["label"]
    cb, ca, bb, ba, vb, va = (row[f"{c}_{s}"] for c in ("count", "bytes", "value") for s in ("before", "after"))
    if category in COMPILE_FIGURES:
        what = COMPILE_FIGURES[category]
        if change in ("appeared", "vanished"):
            return f"{label} {change} ({'was ' if change == 'vanished' else ''}{ca if change == 'appeared' else cb} {what})"
        return f"{label}: {what} {cb} → {ca}"
    if category == "compile_guard" and change in ("appeared", "vanished"):
        return label.replace("guard of compile ", "guard added to compile " if change == "appeared"
                             else "guard removed from compile ", 1)
    if category == "onnx_step" and change == "changed":
        return f"ONNX step {row['key']} {rows.STEP_SYMBOL.get(vb, '❔')}→{rows.STEP_SYMBOL.get(va, '❔')}"
    # Several HLO items can share a label (three dot fusions to f32[16,64]); their op
    # metadata tells them apart. Allocation and peak value labels carry it already.
    where = f" at {row['detail']}" if category in _LOCATED and row.get("detail") else ""
    if change in ("appeared", "vanished"):
        count, nbytes, value = (ca, ba, va) if change == "appeared" else (cb, bb, vb)
        parts = [] if category in _VALUED else [f"×{count}"]
        parts += [format_bytes(nbytes)] if nbytes is not None else []
        parts += [f"max abs diff {value:.3g}"] if category == "accuracy" and value is not None else []
        was = "was " if change == "vanished" else ""
        return f"{label} {change}" + (f" ({was}{', '.join(parts)})" if parts else "") + where
    if change == "changed":
        what = "max abs diff " if category == "accuracy" else ""
        return f"{label} {what}{_number(vb)} → {_number(va)}"
    steps = [f"×{cb} → ×{ca}"] if cb != ca else []
    steps += [f"{format_bytes(bb)} → {format_bytes(ba)}"] if bb is not None and ba is not None and bb != ba else []
    return f"{label} {change} {', '.join(steps)}{where}"


def format_bytes(n: int | None) -> str:
    """``512 B``, ``4.0 KiB``, ``8.0 MiB`` (binary units, as XLA prints them)."""
    return "?" if n is None else human_bytes(n)


def _number(v: float | None) -> str:
    return "none" if v is None else f"{v:.3g}"


def _sum_or_null(column: str) -> pl.Expr:
    # polars sums an all-null group to 0; a size nobody knows must stay unknown.
    c = pl.col(column)
    return pl.when(c.is_null().all()).then(None).otherwise(c.sum()).alias(column)


__all__ = ["DIFF_DOCS", "DIFF_SCHEMA", "ITEM_DOCS", "ITEM_SCHEMA", "describe_change", "diff_dump_items", "dump_items",
           "format_bytes"]
