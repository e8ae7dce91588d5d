"""Where each structural item comes from in its dump, and the excerpt of those lines.

Two pure steps (no I/O: the caller opens the dump and hands its lines over):

``item_lines(items, dumps, records)``: the line ranges of each item's first instance
(the instance its label and detail come from), from the records' ``lineno`` columns:

- ``fusion``: the fusion instruction's line and the fused computation's body (its
  header to the line before the next computation's header; the last one to its last
  instruction and the closing brace);
- ``custom_call``, ``collective``: the instruction's line;
- ``allocation``: the ``allocation N:`` line and its value lines; ``peak_value``: its line;
- ``fused_group``, ``fallback_kernel``, ``extern_kernel``: the scheduler node's block
  (to the line before the next top-level node, the last one to its last known line);
- ``onnx_step``: the step's line and, when it failed, each exception line of the
  report's error messages;
- ``graph_break`` (TORCH_TRACE): the artifact record and its payload (Dynamo's message, the
  user code traceback); any other category: the line of its first instance.

Ranges are merged and cut to ``MAX_ITEM_LINES`` lines; ``excerpt_lines`` prints them
``"57,212-230"``.

``read_excerpts(lines, wanted)``: one pass over a dump's lines collecting the wanted
ranges. Bounded whatever the dump: at most ``MAX_DUMP_LINES`` wanted lines per dump
(items past it, in the order given, get none), each line cut to ``MAX_LINE_CHARS``
characters with a marker, each excerpt to ``MAX_ITEM_CHARS``; reading stops after the
last wanted line. Never raises on odd input (a range past the end is shown as far as
the dump goes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import polars as pl

MAX_ITEM_LINES = 40
MAX_ITEM_CHARS = 4096
MAX_LINE_CHARS = 400
MAX_DUMP_LINES = 20_000  # ~8 MB of cut lines held at most while one dump is read
GAP = "⋮"  # the line between two ranges of one excerpt
_CUT = " … [{} more characters]"
_SPAN = pl.Struct({"first": pl.Int64, "last": pl.Int64})
_ITEM = ["path", "category", "key"]


def item_lines(items: pl.DataFrame, dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """path, category, key, excerpt_lines for ``items`` (path, category, key, ``first``: the
    order of the item's first instance, as ``diff_item_rows`` sets it) of ``dumps`` (path,
    dump_id); items without a known line are left out."""
    firsts = items.lazy().join(dumps.lazy().select("path", "dump_id"), on="path").select(*_ITEM, "dump_id", "first")
    spans = [_single(firsts), *_hlo_spans(firsts, records), *_buffer_spans(firsts, records),
             *_inductor_spans(firsts, records), *_onnx_spans(firsts, records), *_torch_trace_spans(firsts, records)]
    frame = pl.concat([s.select(*_ITEM, pl.col("first").cast(pl.Int64), pl.col("last").cast(pl.Int64)) for s in spans])
    spans_of = frame.drop_nulls(["first", "last"]).filter(pl.col("last") >= pl.col("first")).group_by(_ITEM).agg(
        pl.struct("first", "last").sort_by("first").alias("spans")).collect()
    text = [format_lines(cap_spans(merge_spans([(s["first"], s["last"]) for s in spans])))
            for spans in spans_of.get_column("spans").to_list()]
    return spans_of.select(*_ITEM).with_columns(pl.Series("excerpt_lines", text, pl.String))


def _single(firsts: pl.LazyFrame) -> pl.LazyFrame:
    # Every category whose order is a line number: that line. Allocations order by index.
    lined = firsts.filter(pl.col("category") != "allocation")
    return lined.select(*_ITEM, "first", pl.col("first").alias("last"))


def _records(records: Mapping[str, pl.DataFrame], table: str) -> pl.LazyFrame | None:
    frame = records.get(table)
    return None if frame is None or frame.is_empty() else frame.lazy()


def _next_header(frame: pl.LazyFrame, group: str = "dump_id") -> pl.LazyFrame:
    """``frame`` (with ``lineno``) plus ``next``: the next row's line in the same dump."""
    return frame.sort(group, "lineno").with_columns(pl.col("lineno").shift(-1).over(group).alias("next"))


def _hlo_spans(firsts: pl.LazyFrame, records: Mapping[str, pl.DataFrame]) -> list[pl.LazyFrame]:
    ins, comps = _records(records, "hlo_instructions"), _records(records, "hlo_computations")
    if ins is None or comps is None:
        return []
    fusions = firsts.filter(pl.col("category") == "fusion").join(
        ins.select("dump_id", pl.col("lineno").alias("first"), "module_index",
                   pl.col("called_computations").list.first().alias("name")), on=["dump_id", "first"])
    last_instruction = ins.group_by("dump_id", "module_index", pl.col("computation").alias("name")).agg(
        pl.col("lineno").max().alias("last_instruction"))
    bodies = (_next_header(comps.select("dump_id", "module_index", "name", "lineno"))
              .join(last_instruction, on=["dump_id", "module_index", "name"], how="left")
              .with_columns(pl.coalesce(pl.col("next") - 1, pl.col("last_instruction") + 1).alias("end")))
    return [fusions.join(bodies, on=["dump_id", "module_index", "name"]).select(
        *_ITEM, pl.col("lineno").alias("first"), pl.col("end").alias("last"))]


def _buffer_spans(firsts: pl.LazyFrame, records: Mapping[str, pl.DataFrame]) -> list[pl.LazyFrame]:
    allocs = _records(records, "buffer_allocations")
    if allocs is None:
        return []
    values = _records(records, "buffer_values")
    blocks = allocs.select("dump_id", pl.col("allocation_index").cast(pl.Int64).alias("first"), "lineno")
    if values is not None:
        last_value = values.group_by("dump_id", pl.col("allocation_index").cast(pl.Int64).alias("first")).agg(
            pl.col("lineno").max().alias("last_value"))
        blocks = blocks.join(last_value, on=["dump_id", "first"], how="left")
    else:
        blocks = blocks.with_columns(pl.lit(None, pl.Int32).alias("last_value"))
    return [firsts.filter(pl.col("category") == "allocation").join(blocks, on=["dump_id", "first"]).select(
        *_ITEM, pl.col("lineno").alias("first"), pl.max_horizontal("lineno", "last_value").alias("last"))]


def _inductor_spans(firsts: pl.LazyFrame, records: Mapping[str, pl.DataFrame]) -> list[pl.LazyFrame]:
    nodes = _records(records, "inductor_nodes")
    if nodes is None:
        return []
    top = _next_header(nodes.filter(pl.col("parent").is_null()).select("dump_id", "name", "lineno"))
    known = [nodes.filter(pl.col("parent").is_not_null()).select("dump_id", pl.col("parent").alias("name"), "lineno")]
    if (buffers := _records(records, "inductor_buffers")) is not None:
        known.append(buffers.select("dump_id", pl.col("node").alias("name"), "lineno"))
    last_known = pl.concat(known).group_by("dump_id", "name").agg(pl.col("lineno").max().alias("last_known"))
    blocks = top.join(last_known, on=["dump_id", "name"], how="left").with_columns(
        pl.coalesce(pl.col("next") - 1, pl.max_horizontal("lineno", "last_known")).alias("end"))
    nodes_of = firsts.filter(pl.col("category").is_in(["fused_group", "fallback_kernel", "extern_kernel"]))
    return [nodes_of.join(blocks.select("dump_id", pl.col("lineno").alias("first"), "end"), on=["dump_id", "first"])
            .select(*_ITEM, "first", pl.col("end").alias("last"))]


def _onnx_spans(firsts: pl.LazyFrame, records: Mapping[str, pl.DataFrame]) -> list[pl.LazyFrame]:
    steps, errors = _records(records, "onnx_steps"), _records(records, "onnx_errors")
    if steps is None or errors is None:
        return []
    failed = steps.filter(pl.col("status").cast(pl.String) == "failed").select("dump_id", pl.col("lineno").alias("first"))
    raised = errors.filter(pl.col("section") == "errors").select("dump_id", "lineno")
    return [firsts.filter(pl.col("category") == "onnx_step").join(failed, on=["dump_id", "first"])
            .join(raised, on="dump_id").select(*_ITEM, pl.col("lineno").alias("first"), pl.col("lineno").alias("last"))]


def merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, overlapping and adjacent ranges joined."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def cap_spans(spans: list[tuple[int, int]], max_lines: int = MAX_ITEM_LINES) -> list[tuple[int, int]]:
    """The first ``max_lines`` lines of ``spans``."""
    out, left = [], max_lines
    for first, last in spans:
        if left <= 0:
            break
        out.append((first, min(last, first + left - 1)))
        left -= out[-1][1] - first + 1
    return out


def format_lines(spans: list[tuple[int, int]]) -> str:
    """``[(57, 57), (212, 230)]`` -> ``"57,212-230"``."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def parse_lines(text: str | None) -> list[tuple[int, int]]:
    """The inverse of ``format_lines``; ``[]`` for None or ``""``."""
    out = []
    for part in (text or "").split(","):
        if part:
            a, _, b = part.partition("-")
            out.append((int(a), int(b or a)))
    return out


def cut_line(line: str) -> str:
    """A dump line without its line break, cut to ``MAX_LINE_CHARS`` with a marker."""
    line = line.rstrip("\n")
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + _CUT.format(len(line) - MAX_LINE_CHARS)


def read_excerpts(lines: Iterable[str], wanted: list[str | None]) -> list[tuple[str | None, str | None]]:
    """(excerpt, the lines it shows as ``format_lines``) for each ``excerpt_lines`` in
    ``wanted`` (None: (None, None)), from one pass over ``lines`` (a dump's lines, first
    line 1). Empty lines at the end of a range are left out."""
    spans = [parse_lines(w) for w in wanted]
    take: set[int] = set()
    served = []
    for item_spans in spans:  # the per-dump bound: items in the order given
        need = {n for a, b in item_spans for n in range(a, b + 1)}
        ok = bool(item_spans) and len(take | need) <= MAX_DUMP_LINES
        served.append(ok)
        take |= need if ok else set()
    got: dict[int, str] = {}
    last = max(take, default=0)
    for lineno, line in enumerate(lines, start=1):
        if lineno in take:
            got[lineno] = cut_line(line)
        if lineno >= last:
            break
    return [_assemble(s, got) if ok else (None, None) for s, ok in zip(spans, served, strict=True)]


def _assemble(spans: list[tuple[int, int]], got: dict[int, str]) -> tuple[str | None, str | None]:
    parts: list[str] = []
    shown: list[tuple[int, int]] = []
    size, full = 0, False
    for first, last in spans:
        while last >= first and not got.get(last, "").strip():  # past the end, or trailing blank lines
            last -= 1
        block = []
        for n in range(first, last + 1):
            full = size + len(got[n]) + 1 > MAX_ITEM_CHARS
            if full:
                break
            block.append(got[n])
            size += len(got[n]) + 1
        if block:
            parts.append("\n".join(block))
            shown.append((first, first + len(block) - 1))
        if full:
            break
    if not parts:
        return None, None
    return f"\n{GAP}\n".join(parts), format_lines(shown)


__all__ = ["GAP", "MAX_DUMP_LINES", "MAX_ITEM_CHARS", "MAX_ITEM_LINES", "MAX_LINE_CHARS", "cap_spans", "cut_line",
           "format_lines", "item_lines", "merge_spans", "parse_lines", "read_excerpts"]


def _torch_trace_spans(firsts: pl.LazyFrame, records: Mapping[str, pl.DataFrame]) -> list[pl.LazyFrame]:
    """A graph break: its record and payload (Dynamo's message, the user traceback); a compile's
    kernels and code lines: its first output code, record and payload."""
    out = []
    for table, categories in (("torch_trace_graph_breaks", ["graph_break"]),
                              ("torch_trace_output_code", ["compile_kernels", "compile_code"])):
        rows = _records(records, table)
        if rows is None or "end_lineno" not in rows.collect_schema().names():
            continue
        ends = rows.select("dump_id", pl.col("lineno").cast(pl.Int64).alias("first"), pl.col("end_lineno").cast(pl.Int64))
        out.append(firsts.filter(pl.col("category").is_in(categories)).join(ends, on=["dump_id", "first"])
                   .select(*_ITEM, "first", pl.col("end_lineno").alias("last")))
    return out
