"""Row builders for ``transforms.trends.diff_items``: one function per dump family.

Each builder takes the dumps frame and the records mapping and returns lazy frames of
*instance* rows in ``ROW_SCHEMA`` (one row per fusion, allocation, node...): none when
its tables are absent or empty. ``diff_items.dump_items`` folds instances into items.
Pure: no I/O; nothing here raises on odd rows (nulls travel as nulls).

Keys never contain names the compilers renumber (``fusion.12``, ``op7``, ``buf3``):
they are built from opcodes, shapes, dtypes, kinds, targets and op metadata.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import polars as pl

from transforms.records import COLLECTIVES
from transforms.trends.series import normalize_program
from transforms.volatile import normalised

ROW_SCHEMA = pl.Schema({
    "path": pl.String, "category": pl.String, "key": pl.String, "label": pl.String, "count": pl.Int64,
    "bytes": pl.Int64, "value": pl.Float64, "detail": pl.String, "order": pl.Int64,
})  # fmt: skip

# Opcodes left out of a fusion's label: they wire data, the label should say what it computes.
_PLUMBING = ["parameter", "constant", "tuple", "get-tuple-element", "bitcast", "broadcast"]
_LABEL_OPS = 4
_STEP_VALUE = {"ok": 1.0, "failed": 0.0}  # skipped / unknown: null
STEP_SYMBOL = {1.0: "✅", 0.0: "❌", None: "⚪"}
_OP_SOURCE = {"onnx_main_graph": "ONNX op", "fx_target": "FX target", "fx_node_op": "FX node"}
_IDS = ["path", "run_id", "job", "program"]


def rows_of(dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame], table: str, kinds: tuple[str, ...],
            stage: str | None = None) -> pl.LazyFrame | None:  # fmt: skip
    """The rows of ``table`` with the identity of each dump path holding them (a dump_id
    shared by two paths, identical bytes in two runs, gives rows for both)."""
    frame = records.get(table)
    if frame is None or frame.is_empty():
        return None
    which = pl.col("kind").is_in(kinds) & (pl.col("stage") == stage if stage else pl.lit(True))
    paths = dumps.lazy().filter(which).select("dump_id", *_IDS)
    return frame.lazy().join(paths, on="dump_id")


def _rows(frame: pl.LazyFrame, category: str, key: pl.Expr, label: pl.Expr, *, count: pl.Expr | None = None,
          nbytes: pl.Expr | None = None, value: pl.Expr | None = None, detail: pl.Expr | None = None,
          order: pl.Expr | None = None) -> pl.LazyFrame:  # fmt: skip
    def col(e: pl.Expr | None, default: object = None) -> pl.Expr:
        return pl.lit(default) if e is None else e

    return frame.select(
        "path", pl.lit(category).alias("category"), key.alias("key"), label.alias("label"),
        col(count, 1).alias("count"), col(nbytes).alias("bytes"), col(value).alias("value"),
        col(detail).alias("detail"), col(order, 0).alias("order"),
    ).cast(ROW_SCHEMA)  # fmt: skip


def _canonical(shape: pl.Expr) -> pl.Expr:
    """Shape text without layouts and ``/*index=N*/`` comments, as ``xla_shapes.shape_info`` prints it."""
    return shape.str.replace_all(r"/\*.*?\*/", "").str.replace_all(r"\{[^{}]*\}", "")


def _unnumbered(name: pl.Expr) -> pl.Expr:
    """``fusion.12`` -> ``fusion``: what an instruction name says once XLA's numbering is gone."""
    return name.str.replace_all(r"\.\d+", "")


def _where(op: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(detail ``file.py:42 (op_name)``, label suffix ``(op_name at file.py:42)``) from HLO metadata."""
    loc = pl.concat_str(pl.col("source_file").str.replace(r"^.*/", ""), pl.lit(":"), pl.col("source_line"))
    detail = (pl.when(loc.is_not_null() & pl.col("op_name").is_not_null())
              .then(pl.concat_str(loc, pl.lit(" ("), pl.col("op_name"), pl.lit(")")))
              .otherwise(pl.coalesce(loc, pl.col("op_name"))))  # fmt: skip
    suffix = pl.concat_str(pl.lit("("), op, pl.concat_str(pl.lit(" at "), loc).fill_null(""), pl.lit(")"))
    return detail, suffix


def digest(text: str) -> str:
    # Stable across processes and polars versions (Expr.hash is neither): keys outlive a run.
    return digester(text).hexdigest()


def digester(text: str = ""):
    """The hash ``digest`` finishes: fed a body in parts, it gives the digest of the whole."""
    return hashlib.blake2b(text.encode(), digest_size=8)


# -- XLA HLO ------------------------------------------------------------------------------


COMPUTATION = ["dump_id", "module_index", "computation"]
# The columns of hlo_instructions the fingerprints read.
FINGERPRINT_COLUMNS = [*COMPUTATION, "lineno", "opcode", "shape", "called_computations"]


def _token() -> pl.Expr:
    return pl.concat_str(pl.col("opcode"), pl.lit(" "), pl.col("shape").fill_null("?"))


def flat_bodies(ins: pl.LazyFrame) -> pl.LazyFrame:
    """One row per computation of ``ins`` (rows in line order within each computation):
    ``body``, the opcode and shape of each instruction joined by ``;``, and ``tokens``,
    how many it joined. Its digest is the computation's ``flat`` digest."""
    return ins.group_by(COMPUTATION).agg(body=_token().str.join(";"), tokens=_token().count())


def fingerprint_bodies(ins: pl.LazyFrame, flat: pl.LazyFrame) -> pl.LazyFrame:
    """One row per computation of ``ins`` (rows in line order within each computation):
    ``body`` (each instruction's token with the ``flat`` digests of the computations it
    calls, ``flat``: dump_id, module_index, computation, flat), ``tokens``, and ``ops`` and
    ``all_ops`` (its opcodes, plumbing and parameters left out, in order) for labels."""
    callees = (
        ins.select(*COMPUTATION, "lineno", pl.col("called_computations").alias("callee")).explode("callee")
        .drop_nulls("callee")
        .join(flat.select("dump_id", "module_index", pl.col("computation").alias("callee"), "flat"),
              on=["dump_id", "module_index", "callee"], how="left", maintain_order="left")
        .group_by([*COMPUTATION, "lineno"]).agg(pl.col("flat").fill_null("?").str.join(","))
    )  # fmt: skip
    opcode = pl.col("opcode")
    token = pl.concat_str(_token(), pl.lit(" ["), pl.col("flat").fill_null(""), pl.lit("]"))
    return (
        ins.join(callees, on=[*COMPUTATION, "lineno"], how="left", maintain_order="left")
        .group_by(COMPUTATION).agg(
            token.str.join(";").alias("body"), token.count().alias("tokens"),
            opcode.filter(~opcode.is_in(_PLUMBING)).unique(maintain_order=True).alias("ops"),
            opcode.filter(opcode != "parameter").unique(maintain_order=True).alias("all_ops"),
        )
    )  # fmt: skip


def fingerprints_of(bodies: pl.LazyFrame) -> pl.LazyFrame:
    """``fingerprint_bodies`` -> dump_id, module_index, computation, ``fp`` (the body's
    digest) and ``ops`` (the label's opcodes: all but parameters when all are plumbing)."""
    return bodies.with_columns(
        pl.col("body").map_elements(digest, return_dtype=pl.String).alias("fp"),
        pl.when(pl.col("ops").list.len() > 0).then("ops").otherwise("all_ops").alias("ops"),
    ).select(*COMPUTATION, "fp", "ops")


def _fingerprints(ins: pl.LazyFrame) -> pl.LazyFrame:
    """One row per computation: ``fp``, a digest of its body (opcode and shape of each
    instruction in order, names left out; a called computation enters by its own flat
    digest, so a changed reducer changes its caller), and ``ops`` for labels."""
    ins = ins.sort("dump_id", "lineno")  # group_by keeps the row order within each group
    flat = flat_bodies(ins).with_columns(pl.col("body").map_elements(digest, return_dtype=pl.String).alias("flat"))
    return fingerprints_of(fingerprint_bodies(ins, flat))


HLO_ROW_COLUMNS = ["dump_id", "module_index", "computation", "lineno", "opcode", "shape", "bytes", "fusion_kind",
                   "called_computations", "custom_call_target", "op_name", "source_file", "source_line"]


def hlo_rows(dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame],
             fingerprints: pl.DataFrame | None = None) -> list[pl.LazyFrame]:
    """fusion, custom_call and collective rows of every ``xla_hlo`` dump; ``fingerprints``
    (``fingerprints_of``: every computation's, when ``records`` hold only some of a dump's
    instructions) else computed here from the instructions."""
    frame = records.get("hlo_instructions")
    if frame is None or frame.is_empty():
        return []
    ids = dumps.lazy().filter(pl.col("kind") == "xla_hlo").select("dump_id").unique()
    ins = frame.lazy().join(ids, on="dump_id", how="semi").select(HLO_ROW_COLUMNS)
    fps = _fingerprints(ins) if fingerprints is None else fingerprints.lazy()
    paths = dumps.lazy().filter(pl.col("kind") == "xla_hlo").select("dump_id", "path")
    detail, _ = _where(pl.col("op_name"))

    fusions = (
        ins.filter(pl.col("opcode") == "fusion")
        .with_columns(pl.col("called_computations").list.first().alias("body_of"))
        .join(fps.rename({"computation": "body_of"}), on=["dump_id", "module_index", "body_of"], how="left")
        .join(paths, on="dump_id")
    )
    kind = pl.col("fusion_kind").fill_null("?")
    ops = pl.col("ops").list.head(_LABEL_OPS).list.join(",") + pl.when(
        pl.col("ops").list.len() > _LABEL_OPS).then(pl.lit(",…")).otherwise(pl.lit(""))  # fmt: skip
    out = [_rows(fusions, "fusion", pl.concat_str(kind, pl.lit(":"), pl.col("fp").fill_null("?")),
                 pl.concat_str(pl.lit("fusion "), kind, pl.lit(" "), ops.fill_null("?"), pl.lit("→"), pl.col("shape")),
                 nbytes=pl.col("bytes"), detail=detail, order=pl.col("lineno"))]  # fmt: skip

    on_paths = ins.join(paths, on="dump_id")
    target = pl.col("custom_call_target").fill_null("?")
    out.append(_rows(on_paths.filter(pl.col("opcode") == "custom-call"), "custom_call", target,
                     pl.concat_str(pl.lit("custom-call "), target), detail=detail, order=pl.col("lineno")))  # fmt: skip
    what = pl.concat_str(pl.col("opcode"), pl.lit(" "), pl.col("shape"))
    out.append(_rows(on_paths.filter(pl.col("opcode").is_in(sorted(COLLECTIVES))), "collective", what, what,
                     nbytes=pl.col("bytes"), detail=detail, order=pl.col("lineno")))  # fmt: skip
    return out


# -- XLA buffer assignment ---------------------------------------------------------------


def _hlo_metadata(dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame]) -> pl.LazyFrame:
    """op metadata and shape of each instruction of the after-optimizations HLO, by (run, job, program, name)."""
    key = ["run_id", "job", "program", "instruction"]
    hlo = rows_of(dumps, records, "hlo_instructions", ("xla_hlo",), "after_optimizations")
    if hlo is None:
        schema = dict.fromkeys([*key, "op_name", "source_file", "hlo_shape"], pl.String) | {"source_line": pl.Int32}
        return pl.LazyFrame(schema=schema)
    return (hlo.sort("path", "lineno")
            .select(*key[:3], pl.col("name").alias("instruction"), "op_name", "source_file", "source_line",
                    pl.col("shape").alias("hlo_shape"))
            .unique(subset=key, keep="first", maintain_order=True))  # fmt: skip


def buffer_rows(dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame]) -> list[pl.LazyFrame]:
    """allocation and peak_value rows of every ``xla_buffer_assignment`` dump."""
    kinds = ("xla_buffer_assignment",)
    allocs = rows_of(dumps, records, "buffer_allocations", kinds)
    peaks = rows_of(dumps, records, "buffer_peak_values", kinds)
    if allocs is None and peaks is None:
        return []
    meta = _hlo_metadata(dumps, records)
    out = []
    if allocs is not None:
        values = records.get("buffer_values")
        values = pl.LazyFrame(schema={"dump_id": pl.String, "allocation_index": pl.Int32, "value_id": pl.Int64,
                                      "instruction": pl.String, "size_bytes": pl.Int64, "shape": pl.String}) \
            if values is None else values.lazy()  # fmt: skip
        # The value that defines an allocation: its largest (an allocation is sized for it);
        # the lowest value id breaks ties, which puts an entry parameter before later reuses.
        largest = [pl.col("size_bytes"), pl.col("value_id")]
        defining = values.group_by("dump_id", "allocation_index").agg(
            pl.col("instruction").sort_by(largest, descending=[True, False]).first(),
            _canonical(pl.col("shape")).n_unique().alias("n_shapes"),
            _canonical(pl.col("shape")).first().alias("one_shape"))  # fmt: skip
        a = (allocs.join(defining, on=["dump_id", "allocation_index"], how="left")
             .join(meta, on=["run_id", "job", "program", "instruction"], how="left"))  # fmt: skip
        # A shared temp buffer holds values of many shapes: it has none of its own.
        shape = pl.coalesce(_canonical(pl.col("parameter_shape")), _canonical(pl.col("output_shape")),
                            pl.when(pl.col("n_shapes") == 1).then("one_shape"))  # fmt: skip
        op = pl.coalesce(pl.col("op_name"), _unnumbered(pl.col("instruction")))
        detail, where = _where(op)
        out.append(_rows(
            a, "allocation", pl.concat_str(pl.col("kind"), shape.fill_null(""), op.fill_null(""), separator=" | "),
            pl.concat_str(pl.lit("allocation "), pl.col("kind"), pl.concat_str(pl.lit(" "), shape).fill_null(""),
                          pl.concat_str(pl.lit(" "), where).fill_null("")),
            nbytes=pl.col("size_bytes"), detail=detail, order=pl.col("allocation_index")))  # fmt: skip
    if peaks is not None:
        p = peaks.join(meta, on=["run_id", "job", "program", "instruction"], how="left")
        shape = _canonical(pl.coalesce(pl.col("shape"), pl.when(pl.col("shape_index") == "{}").then("hlo_shape")))
        op = pl.coalesce(pl.col("op_name"), _unnumbered(pl.col("instruction")))
        index = pl.when(pl.col("shape_index") != "{}").then(pl.concat_str(pl.lit(" at "), pl.col("shape_index")))
        detail, where = _where(op)
        out.append(_rows(
            p, "peak_value", pl.concat_str(op.fill_null(""), pl.col("shape_index").fill_null(""), shape.fill_null(""),
                                           separator=" | "),
            pl.concat_str(pl.lit("peak value "), shape.fill_null("?"), index.fill_null(""),
                          pl.concat_str(pl.lit(" "), where).fill_null("")),
            nbytes=pl.col("size_bytes"), detail=detail, order=pl.col("lineno")))  # fmt: skip
    return out


# -- TorchInductor -----------------------------------------------------------------------


def inductor_rows(dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame]) -> list[pl.LazyFrame]:
    """fused_group, fallback_kernel, extern_kernel (IR) and kernel_category, fallback_call (output code)."""
    out = []
    if (nodes := rows_of(dumps, records, "inductor_nodes", ("inductor_ir",))) is not None:
        out += _inductor_ir_rows(nodes, rows_of(dumps, records, "inductor_buffers", ("inductor_ir",)))
    if (kernels := rows_of(dumps, records, "inductor_kernels", ("inductor_output_code",))) is not None:
        category = pl.col("category").fill_null("?")
        out.append(_rows(kernels, "kernel_category", category, pl.concat_str(category, pl.lit(" kernels")),
                         order=pl.col("lineno")))  # fmt: skip
    if (calls := rows_of(dumps, records, "inductor_extern_calls", ("inductor_output_code",))) is not None:
        calls = calls.filter(pl.col("kind") == "aten_fallback")
        out.append(_rows(calls, "fallback_call", pl.col("callee"),
                         pl.concat_str(pl.lit("fallback call "), pl.col("callee")), order=pl.col("lineno")))  # fmt: skip
    return out


def _inductor_ir_rows(nodes: pl.LazyFrame, buffers: pl.LazyFrame | None) -> list[pl.LazyFrame]:
    group = ["dump_id", "path"]
    # A fused group is known by what its members are (class and IR type, in order) and
    # what it writes (dtype and rank of each output buffer): sizes and names stay out,
    # so a wider model keeps the key and only the bytes grow.
    members = (nodes.filter(pl.col("parent").is_not_null())
               .group_by(*group, pl.col("parent").alias("name")).agg(
                   pl.concat_str("node_class", pl.lit("/"), pl.col("sub_type").fill_null("?"))
                   .sort_by("member_index").rle().alias("members"))
               .with_columns(_runs("members")))  # fmt: skip
    if buffers is None:
        outputs = pl.LazyFrame(schema={"dump_id": pl.String, "path": pl.String, "name": pl.String,
                                       "writes": pl.String, "sizes": pl.List(pl.String), "bytes": pl.Int64})  # fmt: skip
    else:
        rank = (pl.when(pl.col("size_text") == "[]").then(0)
                .otherwise(pl.col("size_text").str.count_matches(",") + 1)).cast(pl.String)  # fmt: skip
        dtype = pl.col("dtype").fill_null("?")
        outputs = buffers.group_by(*group, pl.col("node").alias("name")).agg(
            pl.concat_str(dtype, pl.lit(":"), rank.fill_null("?")).sort_by("lineno").rle().alias("writes"),
            pl.concat_str(dtype, pl.col("size_text").fill_null("[?]")).sort_by("lineno").alias("sizes"),
            pl.when(pl.col("bytes").is_null().all()).then(None).otherwise(pl.col("bytes").sum()).alias("bytes"),
        ).with_columns(_runs("writes"))
    fused = (nodes.filter(pl.col("fused_members").is_not_null() & pl.col("parent").is_null())
             .join(members, on=[*group, "name"], how="left").join(outputs, on=[*group, "name"], how="left"))
    n = pl.col("fused_members").list.len().cast(pl.String)
    sizes = pl.col("sizes").list.head(3).list.join(", ") + pl.when(pl.col("sizes").list.len() > 3).then(
        pl.lit(", …")).otherwise(pl.lit(""))  # fmt: skip
    out = [_rows(fused, "fused_group",
                 pl.concat_str("node_class", pl.lit("["), pl.col("members").fill_null(""), pl.lit("] → "),
                               pl.col("writes").fill_null("")),
                 pl.concat_str("node_class", pl.lit(" of "), n, pl.lit(" nodes → "), sizes.fill_null("?")),
                 nbytes=pl.col("bytes"), detail=pl.col("name"), order=pl.col("lineno"))]  # fmt: skip

    extern = nodes.filter(pl.col("node_class") == "ExternKernelSchedulerNode")
    op = pl.col("kernel").fill_null("unknown").str.strip_prefix("torch.ops.")  # as the kernel.fallback.<op> metric
    out.append(_rows(extern.filter(pl.col("sub_type") == "FallbackKernel"), "fallback_kernel", op,
                     pl.concat_str(pl.lit("fallback kernel "), op), detail=pl.col("name"), order=pl.col("lineno")))
    kernel = pl.coalesce("kernel", "sub_type").fill_null("?")
    others = extern.filter(~pl.col("sub_type").fill_null("").is_in(["FallbackKernel", "MultiOutput"]))
    out.append(_rows(others, "extern_kernel", kernel, pl.concat_str(pl.lit("extern kernel "), kernel),
                     detail=pl.col("name"), order=pl.col("lineno")))  # fmt: skip
    return out


def _runs(column: str) -> pl.Expr:
    """A list of ``rle()`` runs as text: ``a×3,b`` (fused groups repeat one member type)."""
    run = pl.element().struct
    times = pl.when(run.field("len") > 1).then(pl.concat_str(pl.lit("×"), run.field("len"))).otherwise(pl.lit(""))
    return pl.col(column).list.eval(pl.concat_str(run.field("value"), times)).list.join(",").alias(column)


# -- ONNX export report --------------------------------------------------------------------


def onnx_rows(dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame]) -> list[pl.LazyFrame]:
    """onnx_step, onnx_op and accuracy rows of every ``onnx_report`` dump."""
    out, kinds = [], ("onnx_report",)
    if (steps := rows_of(dumps, records, "onnx_steps", kinds)) is not None:
        status = pl.col("status").cast(pl.String)
        value = status.replace_strict(_STEP_VALUE, default=None, return_dtype=pl.Float64)
        symbol = status.replace_strict({s: STEP_SYMBOL[v] for s, v in _STEP_VALUE.items()}, default=STEP_SYMBOL[None],
                                       return_dtype=pl.String)  # fmt: skip
        out.append(_rows(steps, "onnx_step", pl.col("step"),
                         pl.concat_str(pl.lit("ONNX step "), pl.col("step"), pl.lit(" "), symbol),
                         value=value, order=pl.col("lineno")))  # fmt: skip
    if (ops := rows_of(dumps, records, "onnx_op_counts", kinds)) is not None:
        source = pl.col("source").cast(pl.String)
        out.append(_rows(ops, "onnx_op", pl.concat_str(source, pl.lit(":"), pl.col("op")),
                         pl.concat_str(source.replace(_OP_SOURCE), pl.lit(" "), pl.col("op")),
                         count=pl.col("count"), order=pl.col("lineno")))  # fmt: skip
    if (checks := rows_of(dumps, records, "onnx_verification", kinds)) is not None:
        out.append(_rows(checks, "accuracy", pl.col("name"), pl.concat_str(pl.lit("ONNX accuracy "), pl.col("name")),
                         value=pl.col("max_abs_diff"), order=pl.col("lineno")))  # fmt: skip
    return out


def torch_trace_rows(dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame]) -> list[pl.LazyFrame]:
    """graph_break, recompile and compile_failure of TORCH_TRACE logs: what a torch.compile user
    asks first when a count steps; then each compile's items (``compile_rows``). Each is keyed by the
    program of its compile first (``<program> | ...``, ``series_program``; the parser writes it on the
    compile and graph-break rows), so each of a log's series diffs its own; the label leaves the program
    out, as the series that shows it names it. Keys leave out compile ids (renumbered), directories and
    what changes from process to process (``transforms.volatile``: ids, addresses, temporary folders,
    path prefixes), so the same program's logs written by two processes give the same items."""
    out = []
    if (breaks := rows_of(dumps, records, "torch_trace_graph_breaks", ("torch_trace",))) is not None:
        reason = normalised(pl.col("reason").fill_null(pl.col("kind").cast(pl.String)))
        where = pl.concat_str(_file_name(pl.col("user_filename")).fill_null("?"), pl.lit(":"),
                              pl.col("user_lineno").cast(pl.String).fill_null("?"))
        function = pl.col("user_function").fill_null("?")
        out.append(_rows(breaks, "graph_break", _of_its_program(reason, where, function),
                         pl.concat_str(pl.lit("graph break '"), reason, pl.lit("' at "), where, pl.lit(" in "), function),
                         detail=normalised(pl.concat_str(pl.col("user_filename"), pl.lit(":"),
                                                         pl.col("user_lineno").cast(pl.String))),
                         order=pl.col("lineno")))  # fmt: skip
    if (compiles := rows_of(dumps, records, "torch_trace_compiles", ("torch_trace",))) is not None:
        # "0/0: tensor 'x' size mismatch at index 0. expected 4, actual 6": the compile id goes.
        reason = normalised(pl.col("recompile_reason").str.replace(r"^[!\d/]+: ", "")).str.slice(0, 300)
        out.append(_rows(compiles.filter(pl.col("recompile_reason").is_not_null()), "recompile", _of_its_program(reason),
                         pl.concat_str(pl.lit("recompile of "), pl.col("co_name").fill_null("?"), pl.lit(": "), reason),
                         detail=normalised(pl.col("program")), order=pl.col("lineno")))  # fmt: skip
        failed = compiles.filter(pl.col("fail_type").is_not_null())
        why = normalised(pl.concat_str("fail_type", pl.lit(": "), pl.col("fail_reason").fill_null("").str.split("\n")
                                       .list.first())).str.slice(0, 300)
        at = pl.concat_str(pl.lit(" at "), _file_name(pl.col("fail_user_frame_filename")), pl.lit(":"),
                           pl.col("fail_user_frame_lineno").cast(pl.String)).fill_null("")
        out.append(_rows(failed, "compile_failure", _of_its_program(pl.col("co_name").fill_null("?"), why),
                         pl.concat_str(pl.lit("compile of "), pl.col("co_name").fill_null("?"), pl.lit(" failed: "), why, at),
                         detail=normalised(pl.col("program")), order=pl.col("lineno")))  # fmt: skip
    return out + compile_rows(dumps, records)


def _of_its_program(*parts: pl.Expr) -> pl.Expr:
    """``<program> | <part> | ...``: a key of a row of ``torch_trace_compiles`` or ``_graph_breaks`` that
    starts with its program (``PROGRAM_KEYED``)."""
    return pl.concat_str(series_program(pl.col("program")), *parts, separator=" | ")


# -- each compile of a TORCH_TRACE log, and what its ranks are compared on ----------------------


def compile_ref() -> pl.Expr:
    """A compile as it is matched across nights: ``<co_name>/<frame compile index>[_<attempt>]``
    (``forward/0``, ``forward/0_1`` after a restart, ``torch_dynamo_resume_in_forward_at_22/0``),
    with ``!<id>/`` in front under compiled autograd. Not the frame id: Dynamo numbers frames in the
    order it first compiles them, so a graph break added above a resume function renumbers it
    (tests/fixtures/torch_trace: ``graph_break``'s resume at line 22 is frame 2, the same function
    after a break removed would be frame 1), while its name (the function and the line it resumes
    at) and its compile index within its frame stay. Of ``torch_trace_compiles`` rows."""
    autograd = pl.col("compile_id").str.extract(r"^(![^/]*/)", 1).fill_null("")
    attempt = pl.when(pl.col("attempt").fill_null(0) > 0).then(
        pl.concat_str(pl.lit("_"), pl.col("attempt").cast(pl.String))).otherwise(pl.lit(""))
    return pl.concat_str(autograd, pl.col("co_name").fill_null("?"), pl.lit("/"),
                         pl.col("frame_compile_id").cast(pl.String).fill_null("-"), attempt)


def _forward_compiles(dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame]) -> pl.LazyFrame | None:
    """One row per forward compile of every TORCH_TRACE log: dump_id, path, compile_id, ``prog``
    (its program as its series names it, ``series_program``), ``ref`` (``compile_ref``), tlparse_id,
    graph_op_count, lineno, recompile_reason."""
    compiles = rows_of(dumps, records, "torch_trace_compiles", ("torch_trace",))
    if compiles is None:
        return None
    return compiles.filter((pl.col("phase") == "forward") & pl.col("compile_id").is_not_null()).select(
        "dump_id", "path", "compile_id", series_program(pl.col("program")).alias("prog"),
        compile_ref().alias("ref"), "tlparse_id", "graph_op_count", "lineno", "recompile_reason")


def _of_compiles(records: Mapping[str, pl.DataFrame], table: str, compiles: pl.LazyFrame) -> pl.LazyFrame | None:
    """The rows of ``table`` that belong to a forward compile of ``compiles``, with its path, prog and ref."""
    frame = records.get(table)
    if frame is None or frame.is_empty():
        return None
    return frame.lazy().drop("path", strict=False).join(
        compiles.select("dump_id", "compile_id", "path", "prog", "ref", pl.col("tlparse_id").alias("compile_tlparse_id")),
        on=["dump_id", "compile_id"])


NO_PROGRAM = "?"  # the program of a compile the log ends before naming it


def series_program(program: pl.Expr) -> pl.Expr:
    """A TORCH_TRACE program as its series names it (``series.normalize_program``: ``forward at
    model.py:19``, no folders: a checkout's and a temporary folder's paths name nothing); ``?`` for none."""
    return program.map_elements(normalize_program, return_dtype=pl.String).fill_null(NO_PROGRAM)


# Categories whose key starts with the program the item is of, ``<program> | ...`` (``series_program``,
# ``NO_PROGRAM`` when the log never names it): every item of a TORCH_TRACE log. A graph break is its compile's
# program's, not its user frame function's (where the break is, often a function the program calls); a recompile
# and a failed compile are their frame's program's (a resume function's is its parent's: the parser's module doc).
PROGRAM_KEYED = ("graph_break", "recompile", "compile_failure", "compile_graph", "compile_kernels", "compile_code",
                 "compile_guard", "collective_schedule", "rank_profile")


def of_program(program: pl.Expr) -> pl.Expr:
    """Whether an item (``category``, ``key``) is of ``program`` (as ``series_program`` names it): an item
    of a category whose key names no program (every dump's but a TORCH_TRACE log's) is the whole dump's, a
    ``PROGRAM_KEYED`` one is its program's (or, keyed ``?``, the whole log's)."""
    return (~pl.col("category").is_in(PROGRAM_KEYED) | pl.col("key").str.starts_with(program + " | ")
            | pl.col("key").str.starts_with(f"{NO_PROGRAM} | "))


def _short_op(op: pl.Expr) -> pl.Expr:
    """``torch.ops._c10d_functional.all_reduce_.default`` -> ``all_reduce_``."""
    return op.str.replace(r"^torch\.ops\.", "").str.replace(r"^_c10d_functional\.", "").str.replace(r"\.default$", "")


def compile_rows(dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame]) -> list[pl.LazyFrame]:
    """What each compile of a TORCH_TRACE log is, matched across nights by program and ``compile_ref``
    (keys ``<program> | <ref>``, the program normalised): ``compile_graph`` (count: the FX graph's ops),
    ``compile_kernels`` (count: kernels of its output codes), ``compile_code`` (count: lines of its
    output codes: lines, not bytes, as a kernel's path comment is longer in a longer cache folder),
    ``compile_guard`` (one per normalised guard text of ``torch_trace_guards``: key ``<program> | <ref>
    | <guard>``, detail ``<program> | <ref>``, its compile) and ``collective_schedule`` (its collective ops in order, key ``<program> | <ref> |
    <ops>``); and ``rank_profile``, what ranks are compared on (``transforms.trends.rank_divergence``)."""
    compiles = _forward_compiles(dumps, records)
    if compiles is None:
        return []
    who = pl.concat_str("prog", pl.lit(" | "), "ref")
    out = [_rows(compiles, "compile_graph", who, pl.concat_str(pl.lit("compile "), "ref"),
                 count=pl.col("graph_op_count").fill_null(0), detail=pl.col("tlparse_id"), order=pl.col("lineno"))]
    if (codes := _of_compiles(records, "torch_trace_output_code", compiles)) is not None:
        per = codes.group_by("path", "prog", "ref").agg(
            pl.col("compile_tlparse_id").first(), pl.col("kernels").fill_null(0).sum().alias("kernels"),
            (pl.col("end_lineno") - pl.col("lineno")).sum().alias("lines"), pl.col("lineno").min())
        for category, count in (("compile_kernels", "kernels"), ("compile_code", "lines")):
            out.append(_rows(per, category, who, pl.concat_str(pl.lit("compile "), "ref"), count=pl.col(count),
                             detail=pl.col("compile_tlparse_id"), order=pl.col("lineno")))  # fmt: skip
    if (guards := _of_compiles(records, "torch_trace_guards", compiles)) is not None:
        guards = guards.filter(pl.col("guard").is_not_null())
        out.append(_rows(guards, "compile_guard", pl.concat_str(who, pl.lit(" | "), "guard"),
                         pl.concat_str(pl.lit("guard of compile "), "ref", pl.lit(": "), pl.col("guard").str.slice(0, 300)),
                         detail=who, order=pl.col("lineno")))  # fmt: skip
    schedules = _schedules(records, compiles)
    if schedules is not None:
        out.append(_rows(schedules, "collective_schedule", pl.concat_str(who, pl.lit(" | "), "ops"),
                         pl.concat_str(pl.lit("collective schedule of compile "), "ref", pl.lit(": "), "ops"),
                         detail=pl.col("compile_tlparse_id"), order=pl.col("lineno")))  # fmt: skip
    out += _rank_profiles(dumps, records, compiles, schedules)
    return out


def _schedules(records: Mapping[str, pl.DataFrame], compiles: pl.LazyFrame) -> pl.LazyFrame | None:
    """Each compile's collective ops in the order its schedules list them (``ops``: ``all_reduce_,
    wait_tensor``), with the line of its first."""
    ops = _of_compiles(records, "torch_trace_collectives", compiles)
    if ops is None:
        return None
    return ops.group_by("dump_id", "path", "prog", "ref").agg(
        pl.col("compile_tlparse_id").first(), _short_op(pl.col("op")).sort_by("lineno").str.join(", ").alias("ops"),
        pl.col("lineno").min())


# What ranks are compared on (as tlparse's multi-rank report): each dimension one text per program.
RANK_DIMENSIONS = ("compile ids", "graph breaks", "recompiles", "collective schedules")
_PROFILE_TEXT = 2000  # of a dimension's text kept; past it, a digest of the whole stands for the rest


def _rank_profiles(dumps: pl.DataFrame, records: Mapping[str, pl.DataFrame], compiles: pl.LazyFrame,
                   schedules: pl.LazyFrame | None) -> list[pl.LazyFrame]:
    """``rank_profile`` items: per program of a log and dimension (``RANK_DIMENSIONS``), key ``<program> |
    <dimension>``, detail the dimension's text in log order (compile ids as tlparse writes them, graph
    breaks and recompile reasons normalised, each compile's collective schedule), count its entries,
    order its first line. Never a change between nights (``diff_items``: the other items say it)."""
    ordered = [pl.col("entry").sort_by("lineno").str.join("; ").alias("text"), pl.col("entry").count().alias("n"),
               pl.col("lineno").min()]
    parts = [("compile ids", compiles.select("path", "prog", pl.col("tlparse_id").fill_null("?").alias("entry"), "lineno"))]
    if (breaks := rows_of(dumps, records, "torch_trace_graph_breaks", ("torch_trace",))) is not None:
        reason = normalised(pl.col("reason").fill_null(pl.col("kind").cast(pl.String)))
        where = pl.concat_str(_file_name(pl.col("user_filename")).fill_null("?"), pl.lit(":"),
                              pl.col("user_lineno").cast(pl.String).fill_null("?"))
        parts.append(("graph breaks", breaks.select(
            "path", series_program(pl.col("program")).alias("prog"),
            pl.concat_str(pl.lit("'"), reason, pl.lit("' at "), where).alias("entry"), "lineno")))
    recompiles = compiles.filter(pl.col("recompile_reason").is_not_null()).select(
        "path", "prog", normalised(pl.col("recompile_reason").str.replace(r"^[!\d/]+: ", "")).str.slice(0, 300)
        .alias("entry"), "lineno")
    parts.append(("recompiles", recompiles))
    if schedules is not None:
        parts.append(("collective schedules", schedules.select(
            "path", "prog", pl.concat_str(pl.col("compile_tlparse_id").fill_null("?"), pl.lit(" "), "ops").alias("entry"),
            "lineno")))
    out = []
    for dimension, frame in parts:
        texts = frame.group_by("path", "prog").agg(*ordered)
        digest_of = pl.col("text").map_elements(digest, return_dtype=pl.String)
        text = pl.when(pl.col("text").str.len_chars() > _PROFILE_TEXT).then(pl.concat_str(
            pl.col("text").str.slice(0, _PROFILE_TEXT), pl.lit(" … (digest "), digest_of, pl.lit(")"))).otherwise("text")
        out.append(_rows(texts, "rank_profile", pl.concat_str("prog", pl.lit(f" | {dimension}")),
                         pl.concat_str(pl.lit(f"{dimension} of "), "prog"), count=pl.col("n"), detail=text,
                         order=pl.col("lineno")))  # fmt: skip
    return out


def _file_name(path: pl.Expr) -> pl.Expr:
    """The file's name without its directories (POSIX or Windows)."""
    return path.str.extract(r"([^/\\]+)$", 1)
