"""Structural diff between two runs: items keyed on stable identities, then what changed.

Exact behaviour on small dumps (hand-written HLO text through the real parser, hand-built
records for the other formats), then the real data: the seed dumps and two nights of the
sample bucket, parsed here with the project's driver (no warehouse needed).
"""

from __future__ import annotations

import io
import re
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import SEEDS
from transforms.trends.diff_items import (
    DIFF_SCHEMA,
    ITEM_DOCS,
    ITEM_SCHEMA,
    describe_change,
    diff_dump_items,
    dump_items,
    format_bytes,
)
from transforms.parsers.formats import all_tables
from transforms.parse import parse_dump

BUCKET = Path(__file__).resolve().parents[1] / "data" / "sample_bucket"
DUMP_COLUMNS = ["path", "run_id", "job", "kind", "stage", "program", "dump_id"]


# -- helpers -------------------------------------------------------------------------------


def parse_files(files: dict[str, bytes]) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    """(dumps, records) as the warehouse holds them, for files named ``<run_id>/<job>/...``."""
    rows, tables = [], {}
    for path, data in files.items():
        parsed = parse_dump(io.BytesIO(data), path, dump_id=path)
        s = parsed.summary
        rows.append((path, *path.split("/")[:2], str(s.kind), s.stage, s.program, path))
        for table, frame in parsed.tables.items():
            tables.setdefault(table, []).append(frame)
    return pl.DataFrame(rows, schema=DUMP_COLUMNS, orient="row"), {t: pl.concat(f) for t, f in tables.items()}


def table(name: str, rows: list[dict]) -> pl.DataFrame:
    """A records table with its declared schema from partial rows (missing columns null)."""
    schema = pl.Schema({"dump_id": pl.String, **all_tables()[name]})
    return pl.DataFrame([{c: r.get(c) for c in schema} for r in rows], schema=schema)


def dumps_frame(*rows: tuple) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema=DUMP_COLUMNS, orient="row")


def items_of(dumps: pl.DataFrame, records: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """``dump_items`` plus the run and the series (job/kind/stage/program) of each path."""
    series = pl.concat_str("job", "kind", pl.col("stage").fill_null("-"), "program", separator="/")
    return dump_items(dumps, records).join(dumps.select("path", "run_id", series.alias("series")), on="path")


def diff(items: pl.DataFrame, before_run: str, after_run: str, *, tol: float = 1e-6) -> pl.DataFrame:
    """Changes of every series between two runs, all series at once."""
    side = [items.filter(pl.col("run_id") == r).select("series", *ITEM_SCHEMA.names()) for r in (before_run, after_run)]
    return diff_dump_items(*side, abs_tol=tol)


def lines(changes: pl.DataFrame) -> list[str]:
    return [describe_change(r) for r in changes.iter_rows(named=True)]


# -- XLA HLO: fusions keyed by body, collectives, custom calls --------------------------------


def hlo(n: int = 0, width: int = 128, reducer: str = "add", collective: bool = False) -> str:
    """A small optimized HLO module; ``n`` shifts every instruction and computation number."""
    ar = (f"  ROOT %all-reduce.{n + 4} = f32[8,{width}]{{1,0}} all-reduce(%fusion.{n + 3}), replica_groups={{}}, "
          f'to_apply=%region_0.{n + 1}, metadata={{op_name="jit(step)/psum" source_file="/src/train.py" source_line=50}}\n'
          if collective else "")  # fmt: skip
    return f"""HloModule jit_step, is_scheduled=true

%region_0.{n + 1} (a.{n}: f32[], b.{n}: f32[]) -> f32[] {{
  %a.{n} = f32[] parameter(0)
  %b.{n} = f32[] parameter(1)
  ROOT %r.{n} = f32[] {reducer}(%a.{n}, %b.{n})
}}

%fused_computation.{n} (param_0.{n}: f32[8,{width}], param_1.{n}: f32[8,{width}]) -> f32[8,{width}] {{
  %param_0.{n} = f32[8,{width}]{{1,0}} parameter(0)
  %param_1.{n} = f32[8,{width}]{{1,0}} parameter(1)
  %add.{n} = f32[8,{width}]{{1,0}} add(%param_0.{n}, %param_1.{n})
  ROOT %multiply.{n} = f32[8,{width}]{{1,0}} multiply(%add.{n}, %param_1.{n})
}}

%fused_computation.{n + 1} (param_0.{n + 1}: f32[8,{width}]) -> f32[8] {{
  %param_0.{n + 1} = f32[8,{width}]{{1,0}} parameter(0)
  %constant.{n} = f32[] constant(0)
  ROOT %reduce.{n} = f32[8]{{0}} reduce(%param_0.{n + 1}, %constant.{n}), dimensions={{1}}, to_apply=%region_0.{n + 1}
}}

ENTRY %main.{n + 9} (x.{n}: f32[8,{width}], y.{n}: f32[8,{width}]) -> f32[8,{width}] {{
  %x.{n} = f32[8,{width}]{{1,0}} parameter(0), metadata={{op_name="x"}}
  %y.{n} = f32[8,{width}]{{1,0}} parameter(1), metadata={{op_name="y"}}
  %fusion.{n + 3} = f32[8,{width}]{{1,0}} fusion(%x.{n}, %y.{n}), kind=kLoop, calls=%fused_computation.{n}, metadata={{op_name="jit(step)/mul" source_file="/src/train.py" source_line=42}}
  %fusion.{n + 5} = f32[8]{{0}} fusion(%fusion.{n + 3}), kind=kInput, calls=%fused_computation.{n + 1}, metadata={{op_name="jit(step)/reduce_sum" source_file="/src/train.py" source_line=43}}
  {"" if collective else "ROOT "}%custom-call.{n} = f32[8,{width}]{{1,0}} custom-call(%fusion.{n + 3}), custom_call_target="my_kernel"
{ar}}}
"""


def hlo_items(before: str, after: str) -> pl.DataFrame:
    name = "module_0000.jit_step.cpu_after_optimizations.txt"
    dumps, records = parse_files({f"r1/jax/{name}": before.encode(), f"r2/jax/{name}": after.encode()})
    return items_of(dumps, records)


def test_hlo_items_keys_labels_and_details():
    name = "module_0000.jit_step.cpu_after_optimizations.txt"
    items = dump_items(*parse_files({f"r1/jax/{name}": hlo().encode()}))
    assert items.schema == ITEM_SCHEMA and set(ITEM_DOCS) == {"", *ITEM_SCHEMA.names()}
    rows = {r["category"] + " " + r["label"]: r for r in items.iter_rows(named=True)}
    assert sorted(rows) == [
        "custom_call custom-call my_kernel",
        "fusion fusion kInput reduce→f32[8]",
        "fusion fusion kLoop add,multiply→f32[8,128]",
    ]
    loop = rows["fusion fusion kLoop add,multiply→f32[8,128]"]
    assert re.fullmatch(r"kLoop:[0-9a-f]{16}", loop["key"])
    assert (loop["count"], loop["bytes"], loop["detail"]) == (1, 4096, "train.py:42 (jit(step)/mul)")
    assert rows["custom_call custom-call my_kernel"]["key"] == "my_kernel"


def test_renamed_fusion_keeps_its_key_and_makes_no_diff():
    items = hlo_items(hlo(n=0), hlo(n=40))  # every instruction and computation renamed
    by_run = [items.filter(pl.col("run_id") == r).select(ITEM_SCHEMA.names()).drop("path") for r in ("r1", "r2")]
    assert by_run[0].equals(by_run[1])
    assert diff(items, "r1", "r2").is_empty()


def test_fusion_whose_body_changed_shape_vanishes_and_appears():
    items = hlo_items(hlo(width=128), hlo(width=256))
    changes = diff(items, "r1", "r2").filter(pl.col("category") == "fusion")
    assert changes.select("change", "label", "count_before", "count_after", "bytes_before", "bytes_after").rows() == [
        ("appeared", "fusion kInput reduce→f32[8]", None, 1, None, 32),
        ("appeared", "fusion kLoop add,multiply→f32[8,256]", None, 1, None, 8192),
        ("vanished", "fusion kInput reduce→f32[8]", 1, None, 32, None),
        ("vanished", "fusion kLoop add,multiply→f32[8,128]", 1, None, 4096, None),
    ]  # the reduce fusion's output kept its shape, but its parameter did not: another body
    assert lines(changes)[1] == "fusion kLoop add,multiply→f32[8,256] appeared (×1, 8.0 KiB) at train.py:42 (jit(step)/mul)"


def test_a_changed_reducer_changes_the_fusion_that_calls_it():
    changes = diff(hlo_items(hlo(reducer="add"), hlo(n=7, reducer="maximum")), "r1", "r2")
    assert changes.select("category", "change", "label").rows() == [
        ("fusion", "appeared", "fusion kInput reduce→f32[8]"),
        ("fusion", "vanished", "fusion kInput reduce→f32[8]"),
    ]


def test_collective_that_appeared():
    changes = diff(hlo_items(hlo(), hlo(n=3, collective=True)), "r1", "r2")
    assert changes.select("category", "key", "change", "count_after", "bytes_after").rows() == [
        ("collective", "all-reduce f32[8,128]", "appeared", 1, 4096),
    ]
    assert lines(changes) == ["all-reduce f32[8,128] appeared (×1, 4.0 KiB) at train.py:50 (jit(step)/psum)"]


# -- XLA buffer assignment: allocations and peak values with their source ----------------------


def buffer_case(alloc_bytes: dict[str, int], *, with_hlo: bool = True) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    """Per run, one temp allocation holding 1 or 2 f32[1024,1024] dot outputs (renumbered
    between runs) and a parameter; the after-optimizations HLO of the same run/job/program
    names their op and line."""
    dumps, allocs, values, peaks, hlo_rows = [], [], [], [], []
    for i, (run, size) in enumerate(alloc_bytes.items()):
        ba, lr, ho = f"{run}/ba", f"{run}/lr", f"{run}/hlo"
        dumps += [(ba, run, "jax", "xla_buffer_assignment", "buffer_assignment", "jit_step", ba),
                  (lr, run, "jax", "xla_buffer_assignment", "live_ranges", "jit_step", lr)]  # fmt: skip
        dots = [f"dot.{5 + 10 * i + k}" for k in range(size // (4 << 20))]
        allocs += [{"dump_id": ba, "allocation_index": 0, "size_bytes": 4096, "kind": "parameter",
                    "parameter_shape": "f32[32,32]{1,0}"},
                   {"dump_id": ba, "allocation_index": 1, "size_bytes": size, "kind": "temp"}]  # fmt: skip
        values += [{"dump_id": ba, "allocation_index": 0, "value_id": 0, "instruction": f"w.{i}", "size_bytes": 4096,
                    "shape": "f32[32,32]{1,0}"}]  # fmt: skip
        values += [{"dump_id": ba, "allocation_index": 1, "value_id": 1 + k, "instruction": d, "size_bytes": 4 << 20,
                    "shape": "f32[1024,1024]{1,0}"} for k, d in enumerate(dots)]  # fmt: skip
        peaks += [{"dump_id": lr, "value_name": f"{d}{{}}", "instruction": d, "shape_index": "{}",
                   "size_bytes": 4 << 20, "lineno": 9 + k} for k, d in enumerate(dots)]  # fmt: skip
        if with_hlo:
            dumps.append((ho, run, "jax", "xla_hlo", "after_optimizations", "jit_step", ho))
            hlo_rows += [{"dump_id": ho, "module_index": 0, "computation": "main", "name": d, "opcode": "dot",
                          "shape": "f32[1024,1024]", "op_name": "jit(step)/dot_general",
                          "source_file": "/src/model.py", "source_line": 42, "lineno": 3 + k}
                         for k, d in enumerate(dots)]  # fmt: skip
            hlo_rows.append({"dump_id": ho, "module_index": 0, "computation": "main", "name": f"w.{i}",
                             "opcode": "parameter", "shape": "f32[32,32]", "op_name": "params['w']", "lineno": 2})
    records = {"buffer_allocations": table("buffer_allocations", allocs), "buffer_values": table("buffer_values", values),
               "buffer_peak_values": table("buffer_peak_values", peaks), "hlo_instructions": table("hlo_instructions", hlo_rows)}  # fmt: skip
    return dumps_frame(*dumps), records


def test_allocation_that_grew_is_reported_with_its_source_line():
    items = items_of(*buffer_case({"r1": 4 << 20, "r2": 8 << 20}))
    allocs = items.filter(pl.col("category") == "allocation", pl.col("path") == "r2/ba")
    assert allocs.select("key", "label", "count", "bytes", "detail").rows() == [
        ("parameter | f32[32,32] | params['w']", "allocation parameter f32[32,32] (params['w'])", 1, 4096, "params['w']"),
        ("temp | f32[1024,1024] | jit(step)/dot_general",
         "allocation temp f32[1024,1024] (jit(step)/dot_general at model.py:42)", 1, 8 << 20,
         "model.py:42 (jit(step)/dot_general)"),
    ]  # fmt: skip
    changes = diff(items, "r1", "r2")
    assert changes.select("category", "change", "count_before", "count_after", "bytes_before", "bytes_after").rows() == [
        ("allocation", "grew", 1, 1, 4 << 20, 8 << 20),
        ("peak_value", "grew", 1, 2, 4 << 20, 8 << 20),
    ]
    assert lines(changes) == [
        "allocation temp f32[1024,1024] (jit(step)/dot_general at model.py:42) grew 4.0 MiB → 8.0 MiB",
        "peak value f32[1024,1024] (jit(step)/dot_general at model.py:42) grew ×1 → ×2, 4.0 MiB → 8.0 MiB",
    ]
    assert changes["detail"].to_list() == ["model.py:42 (jit(step)/dot_general)"] * 2


def test_without_the_hlo_dump_allocations_are_keyed_by_unnumbered_names():
    items = items_of(*buffer_case({"r1": 4 << 20}, with_hlo=False))
    assert items.select("category", "key", "label", "detail").rows() == [
        ("allocation", "parameter | f32[32,32] | w", "allocation parameter f32[32,32] (w)", None),
        ("allocation", "temp | f32[1024,1024] | dot", "allocation temp f32[1024,1024] (dot)", None),
        ("peak_value", "dot | {} | ", "peak value ? (dot)", None),  # no shape printed, none from the HLO either
    ]


# -- TorchInductor ------------------------------------------------------------------------------


def inductor_case(run: str, base: int, fallback: bool) -> tuple[list[tuple], dict[str, list[dict]]]:
    ir, code = f"{run}/ir", f"{run}/code"
    g = f"op{base + 1}_op{base + 2}"  # node names are renumbered between runs
    nodes = [
        {"name": f"op{base}", "node_class": "ExternKernelSchedulerNode", "sub_type": "ExternKernelOut",
         "kernel": "extern_kernels.mm", "lineno": 1},
        {"name": g, "node_class": "FusedSchedulerNode", "sub_type": "SchedulerNode,SchedulerNode",
         "fused_members": [f"op{base + 1}", f"op{base + 2}"], "lineno": 10},
        *({"name": f"op{base + k}", "node_class": "SchedulerNode", "sub_type": "ComputedBuffer", "parent": g,
           "member_index": k - 1, "lineno": 10 + k} for k in (1, 2)),
    ]  # fmt: skip
    if fallback:
        nodes += [{"name": f"op{base + 3}", "node_class": "ExternKernelSchedulerNode", "sub_type": "FallbackKernel",
                   "kernel": "torch.ops.aten.median.dim", "lineno": 20},
                  {"name": f"op{base + 4}", "node_class": "ExternKernelSchedulerNode", "sub_type": "MultiOutput",
                   "lineno": 30}]  # fmt: skip
    buffers = [{"node": g, "name": f"buf{base + k}", "dtype": "float32", "size_text": "[16, 64]", "bytes": 4096,
                "lineno": 11 + k} for k in (1, 2)]  # fmt: skip
    calls = [{"callee": "extern_kernels.mm", "kind": "extern_kernels", "lineno": 5}]
    calls += [{"callee": "aten.median.dim", "kind": "aten_fallback", "lineno": 6}] if fallback else []
    kernels = [{"name": f"cpp_fused_{k}", "category": "cpp", "lineno": k} for k in range(2)]
    for rows, dump in ((nodes, ir), (buffers, ir), (calls, code), (kernels, code)):
        for r in rows:
            r["dump_id"] = dump
    dumps = [(ir, run, "torch", "inductor_ir", "post_fusion", "fwd", ir),
             (code, run, "torch", "inductor_output_code", "output_code", "fwd", code)]  # fmt: skip
    return dumps, {"inductor_nodes": nodes, "inductor_buffers": buffers, "inductor_extern_calls": calls,
                   "inductor_kernels": kernels}  # fmt: skip


def test_inductor_fallback_kernel_appearing():
    (d1, r1), (d2, r2) = inductor_case("r1", 0, fallback=False), inductor_case("r2", 10, fallback=True)
    records = {t: table(t, r1[t] + r2[t]) for t in r1}
    items = items_of(dumps_frame(*d1, *d2), records)
    assert items.filter(pl.col("path") == "r2/ir").select("category", "key", "label", "count", "bytes", "detail").rows() == [
        ("extern_kernel", "extern_kernels.mm", "extern kernel extern_kernels.mm", 1, None, "op10"),
        ("fallback_kernel", "aten.median.dim", "fallback kernel aten.median.dim", 1, None, "op13"),
        ("fused_group", "FusedSchedulerNode[SchedulerNode/ComputedBuffer×2] → float32:2×2",
         "FusedSchedulerNode of 2 nodes → float32[16, 64], float32[16, 64]", 1, 8192, "op11_op12"),
    ]  # fmt: skip
    changes = diff(items, "r1", "r2")
    assert changes.select("series", "category", "key", "change").rows() == [
        ("torch/inductor_ir/post_fusion/fwd", "fallback_kernel", "aten.median.dim", "appeared"),
        ("torch/inductor_output_code/output_code/fwd", "fallback_call", "aten.median.dim", "appeared"),
    ]  # the renumbered fused group and the extern kernel did not change
    assert lines(changes) == ["fallback kernel aten.median.dim appeared (×1)", "fallback call aten.median.dim appeared (×1)"]


# -- ONNX export report ---------------------------------------------------------------------------


def onnx_items(runs: dict[str, tuple[dict[str, str], dict[str, float]]]) -> pl.DataFrame:
    dumps, steps, checks = [], [], []
    for run, (status, diffs) in runs.items():
        dumps.append((run, run, "onnx", "onnx_report", "export", "model", run))
        steps += [{"dump_id": run, "step": s, "status": v, "lineno": i} for i, (s, v) in enumerate(status.items())]
        checks += [{"dump_id": run, "name": n, "max_abs_diff": v, "lineno": 90 + i} for i, (n, v) in enumerate(diffs.items())]
    records = {"onnx_steps": table("onnx_steps", steps), "onnx_verification": table("onnx_verification", checks),
               "onnx_op_counts": table("onnx_op_counts", [{"dump_id": r, "source": "onnx_main_graph", "op": "Gemm",
                                                           "count": 4} for r in runs])}  # fmt: skip
    return items_of(dumps_frame(*dumps), records)


def test_onnx_step_that_failed_is_a_change_and_accuracy_jitter_is_not():
    items = onnx_items({
        "r1": ({"translate": "ok", "accuracy": "ok", "draft_export": "skipped"}, {"out": 4.7684e-7, "aux": 1e-6}),
        "r2": ({"translate": "ok", "accuracy": "failed", "draft_export": "skipped"}, {"out": 5.7684e-7, "aux": 2.5e-3}),
    })  # fmt: skip
    assert items.filter(pl.col("category") == "onnx_step", pl.col("path") == "r2").select("key", "label", "value").rows() == [
        ("accuracy", "ONNX step accuracy ❌", 0.0), ("draft_export", "ONNX step draft_export ⚪", None),
        ("translate", "ONNX step translate ✅", 1.0),
    ]  # fmt: skip
    changes = diff(items, "r1", "r2")
    assert changes.schema == pl.Schema({"series": pl.String, **DIFF_SCHEMA})
    assert changes.select("category", "key", "change", "value_before", "value_after").rows() == [
        ("accuracy", "aux", "changed", 1e-6, 2.5e-3),
        ("onnx_step", "accuracy", "changed", 1.0, 0.0),
    ]  # out moved by 1e-7: float jitter, not reported
    assert lines(changes) == ["ONNX accuracy aux max abs diff 1e-06 → 0.0025", "ONNX step accuracy ✅→❌"]
    assert diff(items, "r1", "r2", tol=1e-8)["key"].to_list() == ["aux", "out", "accuracy"]


# -- the diff itself ------------------------------------------------------------------------------


def item(key: str, count: int = 1, nbytes: int | None = None, category: str = "collective", **extra) -> dict:
    return {"path": "p", "category": category, "key": key, "label": key, "count": count, "bytes": nbytes,
            "value": None, "detail": None, **extra}  # fmt: skip


def test_change_kinds_and_many_pairs_at_once():
    before = pl.DataFrame([
        item("a", 2, 100, pair_id=1), item("b", 1, 100, pair_id=1), item("c", 3, None, pair_id=1),
        item("d", 1, 50, pair_id=1), item("a", 2, 100, pair_id=2),
    ])  # fmt: skip
    after = pl.DataFrame([
        item("a", 1, 200, pair_id=1), item("b", 1, 100, pair_id=1), item("c", 2, None, pair_id=1),
        item("e", 2, None, pair_id=1), item("a", 2, 100, pair_id=2), item("a", 1, 10, pair_id=3),
    ])  # fmt: skip
    changes = diff_dump_items(before, after)
    assert changes.columns == ["pair_id", *DIFF_SCHEMA.names()]
    assert changes.select("pair_id", "key", "change").rows() == [
        (1, "e", "appeared"), (1, "a", "grew"), (1, "c", "shrank"), (1, "d", "vanished"), (3, "a", "appeared"),
    ]  # bytes decide over counts (a: fewer but larger); pair 2 is unchanged
    assert lines(changes) == ["e appeared (×2)", "a grew ×2 → ×1, 100 B → 200 B",
                              "c shrank ×3 → ×2", "d vanished (was ×1, 50 B)", "a appeared (×1, 10 B)"]  # fmt: skip
    # Two dumps of one side of a series add up.
    twice = pl.concat([before.filter(pl.col("pair_id") == 2)] * 2)
    assert diff_dump_items(twice, after.filter(pl.col("pair_id") == 2)).select("key", "change", "count_before").rows() == [
        ("a", "shrank", 4),
    ]


def test_grouping_columns_must_match_and_empty_inputs_give_empty_frames():
    empty = pl.DataFrame(schema=ITEM_SCHEMA)
    assert dump_items(dumps_frame(), {}).schema == ITEM_SCHEMA
    assert diff_dump_items(empty, empty).schema == DIFF_SCHEMA
    with pytest.raises(ValueError, match="grouping columns"):
        diff_dump_items(empty.with_columns(series=pl.lit("s")), empty)


def test_format_bytes():
    assert [format_bytes(n) for n in (None, 0, 512, 1024, 4 << 20, 1536 << 30)] == [
        "?", "0 B", "512 B", "1.0 KiB", "4.0 MiB", "1.5 TiB"]  # fmt: skip


# -- real dumps --------------------------------------------------------------------------------------


@cache
def seed_items() -> tuple[pl.DataFrame, dict[str, dict[str, float]]]:
    files = {f"seed/seed/{p.name}": p.read_bytes() for p in sorted(SEEDS.glob("*.txt"))}
    dumps, records = parse_files(files)
    metrics = {p: parse_dump(io.BytesIO(b), p).summary.metrics for p, b in files.items()}
    return items_of(dumps, records), metrics


def test_seed_items_exact_counts_agree_with_the_parsers_metrics():
    items, metrics = seed_items()
    got = items.group_by("path", "category").agg(pl.len(), pl.col("count").sum()).sort("path", "category")
    assert [(p.split("/")[-1][:3], c, n, k) for p, c, n, k in got.rows()] == [
        ("000", "accuracy", 2, 2), ("000", "onnx_op", 96, 7183), ("000", "onnx_step", 7, 7),
        ("001", "custom_call", 1, 55), ("001", "fusion", 20, 69),
        ("002", "allocation", 54, 54), ("002", "peak_value", 50, 50),
        ("003", "extern_kernel", 2, 264), ("003", "fallback_kernel", 1, 105), ("003", "fused_group", 9, 95),
        ("004", "collective", 4, 12), ("004", "custom_call", 2, 56), ("004", "fusion", 112, 326),
    ]  # fmt: skip

    def total(path: str, category: str, key: str | None = None) -> int:
        sel = items.filter(pl.col("path") == f"seed/seed/{path}", pl.col("category") == category)
        return sel.filter(pl.col("key") == key)["count"].sum() if key else sel["count"].sum()

    m1, m3, m4 = (metrics[f"seed/seed/{n}"] for n in ("001_a0c5460ce1af2dbe.txt", "003_f2a980d458b1ffe8.txt",
                                                       "004_83a80cec1e7cc5e6.txt"))  # fmt: skip
    assert total("001_a0c5460ce1af2dbe.txt", "fusion") == m1["fusion.count"]
    assert total("004_83a80cec1e7cc5e6.txt", "fusion") == m4["fusion.count"]
    assert total("004_83a80cec1e7cc5e6.txt", "custom_call", "cuda_threefry2x32") == m4["kernel.custom_call.cuda_threefry2x32"]
    assert total("004_83a80cec1e7cc5e6.txt", "collective") == m4["kernel.collective.all-reduce"]
    assert total("003_f2a980d458b1ffe8.txt", "fused_group") == m3["fusion.count"]
    assert total("003_f2a980d458b1ffe8.txt", "fallback_kernel", "aten.convolution_backward.default") == m3["kernel.fallback"]
    extern = total("003_f2a980d458b1ffe8.txt", "extern_kernel") + total("003_f2a980d458b1ffe8.txt", "fallback_kernel")
    assert extern == m3["kernel.extern"]
    assert items.filter(pl.col("category") == "accuracy").select("key", "value").rows() == [
        ("add_76", 2.128993), ("add_77", 0.01667315)]  # fmt: skip


@cache
def bucket_items(*runs: str) -> pl.DataFrame:
    files = {p.relative_to(BUCKET).as_posix(): p.read_bytes()
             for run in runs for p in sorted((BUCKET / run).glob("*/**/*")) if p.is_file()}  # fmt: skip
    return items_of(*parse_files(files))


def test_sample_bucket_night_to_night_diff():
    items = bucket_items("2026-11-18", "2026-11-19")
    per_run = items.with_columns(pl.col("path").str.slice(0, 10).alias("run")).group_by("run", "category").agg(
        pl.len(), pl.col("count").sum()).sort("run", "category")  # fmt: skip
    assert per_run.rows() == [
        ("2026-11-18", "accuracy", 1, 1), ("2026-11-18", "allocation", 62, 118), ("2026-11-18", "collective", 7, 8),
        # The torch-trace log's compile (issue 46): 311 lines of output code, 4 graph ops, 53 guards, 3 kernels.
        ("2026-11-18", "compile_code", 1, 311), ("2026-11-18", "compile_graph", 1, 4), ("2026-11-18", "compile_guard", 53, 53),
        ("2026-11-18", "compile_kernels", 1, 3),
        ("2026-11-18", "custom_call", 3, 9), ("2026-11-18", "extern_kernel", 4, 22), ("2026-11-18", "fused_group", 8, 9),
        ("2026-11-18", "fusion", 48, 58), ("2026-11-18", "kernel_category", 2, 9), ("2026-11-18", "onnx_op", 13, 47),
        ("2026-11-18", "onnx_step", 8, 8), ("2026-11-18", "peak_value", 45, 46), ("2026-11-18", "rank_profile", 1, 1),
        ("2026-11-19", "allocation", 68, 130), ("2026-11-19", "collective", 7, 10),
        # Its graph breaks: forward restarted (forward/0_1) and two resume functions, each with its code and guards.
        ("2026-11-19", "compile_code", 3, 630), ("2026-11-19", "compile_graph", 3, 6), ("2026-11-19", "compile_guard", 85, 85),
        ("2026-11-19", "compile_kernels", 3, 6), ("2026-11-19", "custom_call", 3, 11),
        ("2026-11-19", "extern_kernel", 4, 28), ("2026-11-19", "fallback_call", 1, 1),
        ("2026-11-19", "fallback_kernel", 2, 2), ("2026-11-19", "fused_group", 10, 13), ("2026-11-19", "fusion", 48, 73),
        ("2026-11-19", "graph_break", 2, 2), ("2026-11-19", "kernel_category", 2, 12), ("2026-11-19", "onnx_op", 11, 54), ("2026-11-19", "onnx_step", 8, 8),
        ("2026-11-19", "peak_value", 53, 57), ("2026-11-19", "rank_profile", 2, 5),
    ]  # fmt: skip
    changes = diff(items, "2026-11-18", "2026-11-19")
    assert changes.group_by("change").len().sort("change").rows() == [
        ("appeared", 95), ("changed", 4), ("grew", 37), ("vanished", 75)]  # fmt: skip
    text = set(zip(changes["series"], lines(changes), strict=True))
    for expected in [
        ("torch-inductor/inductor_ir/post_fusion/model__0_forward_1.0", "fallback kernel aten.median.dim appeared (×1)"),
        ("torch-inductor/inductor_output_code/output_code/model__0_forward_1.0", "fallback call aten.median.dim appeared (×1)"),
        ("torch-onnx/onnx_report/export/inp+blocks+head(x)", "ONNX step translate ✅→❌"),
        # A compile that appeared or vanished is one line (its guards, kernels and code are not listed again).
        ("torch-trace/torch_trace/trace/forward at /tmp/dumpscope-torch-trace/src/dumpscope_model.py:19",
         "compile forward/0 vanished (was 4 graph ops)"),
        ("torch-trace/torch_trace/trace/forward at /tmp/dumpscope-torch-trace/src/dumpscope_model.py:19",
         "compile torch_dynamo_resume_in_forward_at_22/0 appeared (2 graph ops)"),
        ("torch-onnx/onnx_report/export/inp+blocks+head(x)", "ONNX accuracy log_softmax vanished (was max abs diff 4.77e-07)"),
        ("jax-pmap/xla_hlo/before_optimizations/jit__fun",
         "all-reduce f32[96,96] grew ×1 → ×2, 36.0 KiB → 72.0 KiB at jax_jobs.py:162 (psum)"),
        ("jax-jit/xla_buffer_assignment/buffer_assignment/jit_train_step",
         r"allocation thread_local f32[] (jit(train_step)/transpose(jvp())/reduce_sum at jax_jobs.py:52) grew ×3 → ×4, 12 B → 16 B"),
        ("jax-jit/xla_buffer_assignment/buffer_assignment/jit_train_step", "allocation temp (copy) grew 54.0 KiB → 84.0 KiB"),
    ]:  # fmt: skip
        assert expected in text
    assert diff(items, "2026-11-18", "2026-11-18").is_empty()


@pytest.mark.parametrize("dump", ["2026-11-17/jax-jit/module_0000.jit_train_step.cpu_after_optimizations.txt.gz",
                                  "2026-11-17/jax-pmap/module_0000.jit__fun.cpu_after_optimizations.txt.gz"])
def test_real_hlo_with_every_name_changed_gives_the_same_items(dump):
    import gzip

    text = gzip.decompress((BUCKET / dump).read_bytes()).decode()
    # Rename every instruction and computation and shift every number in the names.
    renamed = re.sub(r"%([\w.-]+?)(?:\.(\d+))?(?![\w.-])",
                     lambda m: f"%x_{m[1]}.{int(m[2] or 0) + 17}", text)  # fmt: skip
    assert renamed != text and "%x_" in renamed
    name = dump.split("/", 2)[2].removesuffix(".gz")
    items = items_of(*parse_files({f"a/job/{name}": text.encode(), f"b/job/{name}": renamed.encode()}))
    a, b = (items.filter(pl.col("run_id") == r).select(ITEM_SCHEMA.names()).drop("path") for r in "ab")
    assert a.height > 10 and a.equals(b)
    assert diff(items, "a", "b").is_empty()


def test_each_series_of_a_log_diffs_its_own_programs_compiles_whatever_the_series_is_named():
    """``diffs.diff_pairs`` on the real logs of a job compiling scale_shift and forward (tests/fixtures/torch_trace:
    two_programs, then two_programs_changed: forward rewritten and recompiled). Each side keeps the compiles of the
    program its dump names (dump_series.program, normalised as the keys are), not of the series' name: a run.json
    override ("fwd") or a collision's "#2" names no key. Main gave both series all five of the log's changes;
    then scale_shift's still the log's recompile, forward's (a recompile was keyed by its reason alone)."""
    import gzip

    from transforms.trends.diffs import diff_pairs

    logs = {case: next((Path(__file__).parent / "fixtures" / "torch_trace" / case).glob("*.log.gz"))
            for case in ("two_programs", "two_programs_changed")}
    dumps, records = parse_files({f"{run}/two/{log.name.removesuffix('.gz')}": gzip.decompress(log.read_bytes())
                                  for run, log in zip("ab", logs.values(), strict=True)})
    items = dump_items(dumps, records)
    (before, after), src = dumps.get_column("path").to_list(), "/tmp/dumpscope-torch-trace/src/dumpscope_model.py"
    pairs = pl.DataFrame([(f"two/{name}", name, f"{program} at {src}:{line}") for name, program, line in
                          (("fwd", "forward", 19), ("scale_shift at dumpscope_model.py:9#2", "scale_shift", 9))],
                         schema=["series", "program", "dump_program"], orient="row").select(
        pl.lit("b").alias("run_id"), pl.lit("a").alias("previous_run_id"), "series", pl.lit("two").alias("job"), "program",
        pl.lit("torch_trace").alias("kind"), pl.lit("trace").alias("stage"), pl.lit(before).alias("before_path"),
        pl.lit(after).alias("after_path"), pl.col("dump_program").alias("before_dump_program"),
        pl.col("dump_program").alias("after_dump_program"))
    changes = diff_pairs(pairs, items)
    recompile = "recompile of forward: tensor 'x' size mismatch at index 0. expected 4, actual 6 appeared (×1)"
    assert changes.filter(pl.col("series") == "two/fwd").sort("rank").get_column("description").to_list() == [
        recompile, "compile forward/0: lines of output code 122 → 150", "compile forward/1 appeared (7 graph ops)",
        "compile forward/0: graph ops 4 → 7",
        "guard added to compile forward/0: ___check_obj_id(G['torch'].where, <id>), type=<class 'builtin_function_or_method'>"]
    assert changes.filter(pl.col("series") != "two/fwd").get_column("description").to_list() == []


def test_a_logs_graph_breaks_and_failed_compiles_are_its_programs_and_diff_in_its_series_only():
    """The real graph_break, graph_break_removed and compile_failure logs (tests/fixtures/torch_trace): each
    graph break and failed compile is keyed by the program of its compile, as its compiles are, while its label
    leaves the program out (the series that shows it names it). Paired for a series of another program of the
    same log (scale_shift, as two_programs' logs hold), the break removed is not that series' change. Main keyed
    both without their program and gave every series of the log the two breaks and the failure."""
    import gzip

    from transforms.trends.diffs import diff_pairs

    logs = {case: next((Path(__file__).parent / "fixtures" / "torch_trace" / case).glob("*.log.gz"))
            for case in ("graph_break", "graph_break_removed", "compile_failure")}
    run_of = {"graph_break": "a", "graph_break_removed": "b", "compile_failure": "a"}
    dumps, records = parse_files({f"{run_of[case]}/{case}/{log.name.removesuffix('.gz')}": gzip.decompress(log.read_bytes())
                                  for case, log in logs.items()})
    items = dump_items(dumps, records)
    fwd = "forward at dumpscope_model.py:19"
    assert items.filter(pl.col("category").is_in(["graph_break", "compile_failure"])).select(
        "category", "key", "label").rows() == [
        ("compile_failure", f"{fwd} | forward | BackendCompilerFailed: backend='always_fails' raised:",
         "compile of forward failed: BackendCompilerFailed: backend='always_fails' raised:"),
        ("graph_break", f"{fwd} | Data-dependent branching | dumpscope_model.py:22 | forward",
         "graph break 'Data-dependent branching' at dumpscope_model.py:22 in forward"),
        ("graph_break", f"{fwd} | Failed to trace builtin operator | dumpscope_model.py:21 | forward",
         "graph break 'Failed to trace builtin operator' at dumpscope_model.py:21 in forward")]
    paths = dict(dumps.select("job", "path").iter_rows())
    src = "/tmp/dumpscope-torch-trace/src/dumpscope_model.py"
    pairs = pl.DataFrame([(f"gb/{name}", name, f"{name} at {src}:{line}") for name, line in
                          (("forward", 19), ("scale_shift", 9))], schema=["series", "program", "dump_program"],
                         orient="row").select(
        pl.lit("b").alias("run_id"), pl.lit("a").alias("previous_run_id"), "series", pl.lit("gb").alias("job"),
        "program", pl.lit("torch_trace").alias("kind"), pl.lit("trace").alias("stage"),
        pl.lit(paths["graph_break"]).alias("before_path"), pl.lit(paths["graph_break_removed"]).alias("after_path"),
        pl.col("dump_program").alias("before_dump_program"), pl.col("dump_program").alias("after_dump_program"))
    changes = diff_pairs(pairs, items).filter(pl.col("category") == "graph_break")
    assert changes.select("series", "description").sort("description").rows() == [
        ("gb/forward", "graph break 'Data-dependent branching' at dumpscope_model.py:22 in forward vanished (was ×1)"),
        ("gb/forward", "graph break 'Failed to trace builtin operator' at dumpscope_model.py:21 in forward vanished (was ×1)")]
