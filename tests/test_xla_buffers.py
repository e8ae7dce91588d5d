"""transforms.parsers.xla_buffers (+ xla_live_ranges): the GPU seed and real XLA:CPU dumps.

Figures are exact. The CPU fixtures are checked against the figures jax itself gave
for the same compilation (``compiled.memory_analysis()``, recorded in each
``memory_analysis.json``); see tests/fixtures/xla_buffer_assignment/ORIGIN.md.
"""

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES, SEEDS
from tests.helpers import collect
from transforms.parsers import xla_buffers as xb
from transforms.records import DumpKind, DumpSummary, ParseError

SEED = SEEDS / "002_5960cad812240b69.txt"
CPU = FIXTURES / "xla_buffer_assignment"
CASES = ["mlp", "donate", "while_loop", "pmap_psum", "deep_grad"]
SIDE = {"buffer_assignment": "-buffer-assignment.txt", "values": "-buffer-assignment-values.txt", "live_ranges": "-live-range.txt"}


def cpu_file(case: str, stage: str) -> Path:
    (path,) = CPU.glob(f"{case}/module_*{SIDE[stage]}")
    return path


def run(lines) -> tuple[dict[str, pl.DataFrame], DumpSummary]:
    return collect(xb, lines)


def run_file(path: Path):
    with path.open() as fh:
        return run(fh)


# --- the GPU seed (older combined format: allocations, total, used values, live ranges) ---


def test_seed_figures():
    tables, s = run_file(SEED)
    assert s.kind is DumpKind.XLA_BUFFER_ASSIGNMENT and s.stage == "buffer_assignment"
    assert not s.errors and not s.truncated and s.program is None
    assert s.metrics == {
        "memory.allocations": 54,
        "memory.parameter_allocations": 45,
        "memory.values": 135,
        "memory.total_bytes": 1093622736,
        "memory.parameter_bytes": 815092228,
        "memory.live_out_bytes": 277544992,
        "memory.alias_bytes": 0,
        "memory.temp_bytes": 985504,
        "memory.constant_bytes": 0,
        "memory.thread_local_bytes": 12,
        "memory.used_values": 135,
        "memory.live_ranges": 132,
        "memory.live_range_max_time": 166,
        "memory.peak_time": 158,
        "memory.peak_values": 50,
        "memory.peak_live_bytes": 1092637220,
    }
    assert {t: len(f) for t, f in tables.items()} == {
        "buffer_allocations": 54,
        "buffer_values": 135,
        "buffer_used_values": 135,
        "buffer_schedule": 166,
        "buffer_live_ranges": 132,
        "buffer_peak_values": 50,
    }
    allocs = tables["buffer_allocations"]
    assert allocs["size_bytes"].sum() == 1093622736  # the "Total bytes used" line is this sum
    assert dict(allocs["kind"].value_counts().iter_rows()) == {"parameter": 45, "live_out": 5, "thread_local": 3, "temp": 1}
    assert tables["buffer_peak_values"]["size_bytes"].sum() == 1092637220
    assert tables["buffer_peak_values"]["shape"].null_count() == 0  # every peak value found in the allocations


def test_seed_golden_rows():
    tables, _ = run_file(SEED)
    allocs = tables["buffer_allocations"]
    a0 = allocs.row(0, named=True)
    assert a0 == {
        "allocation_index": 0, "size_bytes": 311164928, "kind": "parameter", "is_parameter": True,
        "is_entry_computation_parameter": True, "parameter_number": 5, "parameter_shape": "bf16[151936,1024]",
        "shape_index": "{}", "output_shape": None, "is_maybe_live_out": False, "is_thread_local": False,
        "is_preallocated_temp": False, "is_constant": False, "is_tuple": False, "color": 0,
        "flags": ["parameter"], "lineno": 2,
    }  # fmt: skip
    a48 = allocs.filter(pl.col("allocation_index") == 48).row(0, named=True)
    assert a48["output_shape"].startswith("(bf16[32,8,128], ") and a48["is_tuple"] and a48["kind"] == "live_out"
    assert a48["flags"] == ["output", "maybe-live-out"]
    a53 = allocs.row(-1, named=True)
    assert (a53["allocation_index"], a53["size_bytes"], a53["kind"], a53["lineno"]) == (53, 985504, "temp", 138)
    v = tables["buffer_values"].filter(pl.col("value_id") == 580).row(0, named=True)
    assert v == {
        "allocation_index": 53, "value_id": 580, "value_name": "custom-call.19.0{0}", "instruction": "custom-call.19.0",
        "shape_index": "{0}", "is_phi": False, "color": 0, "offset": 2176, "size_bytes": 393216,
        "shape": "bf16[32,6144]{1,0}", "lineno": 140,
    }  # fmt: skip
    u = tables["buffer_used_values"].filter(pl.col("value_id") == 580).row(0, named=True)
    assert u["positions"] == ["custom-call.19.0 {0}", "get-tuple-element.19"]
    assert u["uses"] == ["loop_convert_fusion, operand 0"] and u["lineno"] == 257
    assert tables["buffer_used_values"].filter(pl.col("value_id") == 581)["uses"].to_list() == [[]]
    assert tables["buffer_schedule"].row(158) == (158, "tuple", 1333)
    r = tables["buffer_live_ranges"].row(0)
    assert r == ("wrapped_concatenate{}", "wrapped_concatenate", "{}", 91, 92, 1342)
    p = tables["buffer_peak_values"].row(0, named=True)
    assert p == {
        "peak_time": 158, "value_name": "input_concatenate_fusion", "instruction": "input_concatenate_fusion",
        "shape_index": None, "size_bytes": 65536, "cumulative_bytes": None, "shape": "bf16[32,8,128]{2,1,0}",
        "lineno": 1475,
    }  # fmt: skip


# --- real XLA:CPU dumps (jaxlib 0.10: three side files) ---

EXPECTED = {  # case -> stage -> exact metrics
    "mlp": {
        "buffer_assignment": dict(allocations=16, parameter_allocations=4, values=19, total_bytes=68276, parameter_bytes=49664,
                                  live_out_bytes=148, alias_bytes=0, temp_bytes=18432, constant_bytes=8, thread_local_bytes=24),
        "values": dict(total_bytes=68276, used_values=19),
        "live_ranges": dict(live_ranges=13, live_range_max_time=13, peak_time=8, peak_values=8, peak_live_bytes=68104),
    },
    "donate": {
        "buffer_assignment": dict(allocations=15, parameter_allocations=5, values=19, total_bytes=3228, parameter_bytes=2084,
                                  live_out_bytes=1068, alias_bytes=1040, temp_bytes=1088, constant_bytes=4, thread_local_bytes=24),
        "values": dict(total_bytes=3228, used_values=19),
        "live_ranges": dict(live_ranges=13, live_range_max_time=13, peak_time=9, peak_values=8, peak_live_bytes=3176),
    },
    "while_loop": {
        "buffer_assignment": dict(allocations=7, parameter_allocations=2, values=24, total_bytes=1108, parameter_bytes=260,
                                  live_out_bytes=256, alias_bytes=0, temp_bytes=580, constant_bytes=12, thread_local_bytes=0),
        "values": dict(total_bytes=1108, used_values=24),
        "live_ranges": dict(live_ranges=24, live_range_max_time=24, peak_time=20, peak_values=5, peak_live_bytes=776),
    },
    "pmap_psum": {
        "buffer_assignment": dict(allocations=6, parameter_allocations=1, values=7, total_bytes=780, parameter_bytes=256,
                                  live_out_bytes=256, alias_bytes=0, temp_bytes=256, constant_bytes=0, thread_local_bytes=12),
        "values": dict(total_bytes=780, used_values=7),
        "live_ranges": dict(live_ranges=4, live_range_max_time=4, peak_time=3, peak_values=3, peak_live_bytes=768),
    },
    "deep_grad": {
        "buffer_assignment": dict(allocations=132, parameter_allocations=17, values=350, total_bytes=2906628,
                                  parameter_bytes=1064960, live_out_bytes=1048704, alias_bytes=0, temp_bytes=792576,
                                  constant_bytes=4, thread_local_bytes=384),
        "values": dict(total_bytes=2906628, used_values=350),
        "live_ranges": dict(live_ranges=254, live_range_max_time=254, peak_time=252, peak_values=34, peak_live_bytes=2129920),
    },
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("stage", list(SIDE))
def test_cpu_side_file_figures(case, stage):
    path = cpu_file(case, stage)
    _, s = run_file(path)
    assert xb.stage_from_name(path.name) == stage == s.stage
    assert not s.errors and not s.truncated
    assert s.metrics == {f"memory.{k}": v for k, v in EXPECTED[case][stage].items()}


@pytest.mark.parametrize("case", CASES)
def test_cpu_figures_match_memory_analysis(case):
    """Which of our metrics are which of jax's ``compiled.memory_analysis()`` figures."""
    api = json.loads((CPU / case / "memory_analysis.json").read_text())
    _, s = run_file(cpu_file(case, "buffer_assignment"))
    m = {k.removeprefix("memory."): v for k, v in s.metrics.items()}
    assert m["parameter_bytes"] == api["argument_size_in_bytes"]
    assert m["live_out_bytes"] == api["output_size_in_bytes"]
    assert m["alias_bytes"] == api["alias_size_in_bytes"]
    assert m["temp_bytes"] == api["temp_size_in_bytes"]
    # Allocations are parameters, outputs, constants, thread-locals or temps; donated ones are both of the first two.
    assert m["total_bytes"] == (
        api["argument_size_in_bytes"] + api["output_size_in_bytes"] - api["alias_size_in_bytes"]
        + api["temp_size_in_bytes"] + m["constant_bytes"] + m["thread_local_bytes"]
    )  # fmt: skip
    # Observed on jaxlib 0.10 CPU (not documented by jax): its "peak" leaves temps out.
    assert api["peak_memory_in_bytes"] == m["parameter_bytes"] + m["live_out_bytes"] - m["alias_bytes"] + m["constant_bytes"]
    _, values = run_file(cpu_file(case, "values"))
    assert values.metrics["memory.total_bytes"] == m["total_bytes"]  # "Total bytes used" = sum of allocations
    assert values.metrics["memory.used_values"] == m["values"]


@pytest.mark.parametrize("case", CASES)
def test_cpu_tables_join(case):
    ba, _ = run_file(cpu_file(case, "buffer_assignment"))
    used, _ = run_file(cpu_file(case, "values"))
    lr, _ = run_file(cpu_file(case, "live_ranges"))
    key = ["value_id", "value_name", "instruction", "shape_index", "is_phi", "color"]
    assert ba["buffer_values"].select(key).sort("value_id").equals(used["buffer_used_values"].select(key).sort("value_id"))
    assert set(ba["buffer_values"]["allocation_index"]) <= set(ba["buffer_allocations"]["allocation_index"])
    # Every live range and peak value is an allocated value, found by (instruction, shape_index).
    values = ba["buffer_values"].select("instruction", "shape_index", "size_bytes")
    for table in ("buffer_live_ranges", "buffer_peak_values"):
        assert lr[table].join(values, on=["instruction", "shape_index"], how="anti").is_empty()
    peak = lr["buffer_peak_values"].join(values, on=["instruction", "shape_index"])
    assert (peak["size_bytes"] == peak["size_bytes_right"]).all()
    assert lr["buffer_schedule"]["time"].to_list() == list(range(len(lr["buffer_schedule"])))


def test_cpu_flag_variants():
    donate, _ = run_file(cpu_file("donate", "buffer_assignment"))
    donated = donate["buffer_allocations"].filter(pl.col("is_parameter") & pl.col("is_maybe_live_out"))
    assert donated["allocation_index"].to_list() == [0, 3] and set(donated["kind"]) == {"parameter"}
    assert donated["flags"].to_list() == [["parameter", "maybe-live-out"]] * 2
    loop, _ = run_file(cpu_file("while_loop", "buffer_assignment"))
    assert loop["buffer_values"]["is_phi"].sum() == 9
    assert dict(loop["buffer_allocations"]["kind"].value_counts().iter_rows()) == {
        "live_out": 1, "parameter": 2, "constant": 3, "temp": 1,
    }  # fmt: skip
    mlp, _ = run_file(cpu_file("mlp", "buffer_assignment"))
    out = mlp["buffer_allocations"].filter(pl.col("output_shape").is_not_null()).row(0, named=True)
    assert (out["allocation_index"], out["output_shape"], out["is_tuple"]) == (5, "(f32[32], f32[])", True)
    live, _ = run_file(cpu_file("mlp", "live_ranges"))
    assert live["buffer_peak_values"]["cumulative_bytes"].to_list()[-1] == 68104
    assert live["buffer_peak_values"]["shape"].null_count() == 8  # a side file has no allocations to take shapes from


def test_unknown_and_valued_flags_survive():
    lines = [
        "BufferAssignment:\n",
        "allocation 0: size 64, color 5, parameter 0, shape |(f32[4], f32[12])| at ShapeIndex {1}, maybe-live-out:\n",
        " value: <3 p.1{1} @5> (size=64,offset=0): f32[12]{0}\n",
        "allocation 1: size 8, shiny-new-flag:\n",
        " value: <4 x.2 (phi) @0> (size=8,offset=0): f32[2]{0}\n",
        "allocation 2: size 8, output shape is |f32[2]|, maybe-live-out:\n",  # a listing of this XLA has one
        " value: <5 r.3 @0> (size=8,offset=0): f32[2]{0}\n",
    ]
    tables, s = run(lines)
    a = tables["buffer_allocations"].rows(named=True)
    assert (a[0]["color"], a[0]["parameter_shape"], a[0]["shape_index"], a[0]["kind"]) == (5, "(f32[4], f32[12])", "{1}", "parameter")
    assert a[0]["flags"] == ["color", "parameter", "maybe-live-out"]
    assert (a[1]["kind"], a[1]["flags"]) == ("other", ["shiny-new-flag"])
    assert s.errors == ["line 4: unknown allocation flags ['shiny-new-flag']"]
    v = tables["buffer_values"].rows(named=True)
    assert (v[0]["value_name"], v[0]["shape_index"], v[0]["color"]) == ("p.1{1}", "{1}", 5)
    assert (v[1]["value_name"], v[1]["is_phi"], v[1]["shape_index"]) == ("x.2", True, "{}")


# Each historic header and value syntax of BufferAllocation::ToString, one line each. Hand-made
# from the format strings quoted in xla_buffers (the real files with them are in
# data/corpus/xla_buffers, tests/test_buffers_realworld.py); each pins one rule.
HISTORIC = [
    ("allocation 0: 0x55d5c8c4c0a0, size 16, parameter 1, thread-local:",  # 2017: %p, no shape
     dict(allocation_index=0, size_bytes=16, kind="parameter", parameter_number=1, is_thread_local=True, shape_index=None)),
    ("allocation 1: (nil), size 8, color 2, parameter 0 at ShapeIndex {1}, maybe-live-out:",  # 2018: glibc's %p of 0
     dict(allocation_index=1, size_bytes=8, color=2, parameter_number=0, shape_index="{1}", is_maybe_live_out=True)),
    ("allocation 2: size 64, parameter 3, shape (f32[4], f32[12]) at ShapeIndex {0}:",  # 2020: bare tuple shape
     dict(parameter_number=3, parameter_shape="(f32[4], f32[12])", shape_index="{0}", flags=["parameter"])),
    ("allocation 3: size 16, output shape is (f32[2], s32[2]), maybe-live-out:",  # 2020: bare output shape
     dict(output_shape="(f32[2], s32[2])", is_tuple=True, kind="live_out", flags=["output", "maybe-live-out"])),
    ("allocation 4: 0x1f, size 4, constant, tuple, preallocated-temp:",
     dict(kind="constant", is_constant=True, is_tuple=True, is_preallocated_temp=True)),
]


@pytest.mark.parametrize(("header", "expected"), HISTORIC, ids=[h[:24] for h, _ in HISTORIC])
def test_historic_allocation_headers(header, expected):
    index = int(header.split()[1].rstrip(":"))
    output = [f"allocation {index + 1}: size 4, output shape is f32[]:\n", " value: <9 r.9 @0> (size=4,offset=0): f32[]\n"]
    # A listing that prints parameter shapes ends after its output's allocation: a whole file has one.
    tables, s = run(["BufferAssignment:\n", header + "\n", f" value: <{index} v.{index} @0> (size=4,offset=0): f32[]\n",
                     *output])
    assert s.errors == [] and not s.truncated
    row = tables["buffer_allocations"].row(0, named=True)
    assert {k: row[k] for k in expected} == expected


def test_historic_value_lines():
    lines = [
        "BufferAssignment:\n",
        "allocation 0: 0x55d5c8c4c0a0, size 12, preallocated-temp:\n",
        "  add.1[](#3 @0) [0,4]: f32[]\n",  # 2017-2019: LogicalBuffer name[index](#id @color) [offset,size]
        "  tuple.2[1](#7) [4,8]: f32[2]{0}\n",
        "allocation 1: 0x55d5c8c4c150, size 4, parameter 0:\n",
        "  entry::p.0[](#0) : f32[]\n",  # early 2017: computation::buffer, no slice
    ]
    tables, s = run(lines)
    assert s.errors == [] and not s.truncated and s.metrics["memory.values"] == 3
    cols = ["allocation_index", "value_id", "value_name", "instruction", "shape_index", "color", "offset", "size_bytes", "shape"]
    assert tables["buffer_values"].select(cols).rows() == [
        (0, 3, "add.1", "add.1", "{}", 0, 0, 4, "f32[]"),
        (0, 7, "tuple.2{1}", "tuple.2", "{1}", None, 4, 8, "f32[2]{0}"),
        (1, 0, "p.0", "p.0", "{}", None, None, None, "f32[]"),
    ]


def test_a_listing_ends_after_what_its_output_needs():
    """The output's allocation, a live-out one for each array of a tuple output (not for a token or
    an empty array: they hold no bytes), and the last allocation's values reaching its size."""
    lines = [
        "BufferAssignment:\n",
        "allocation 0: size 64, parameter 0, shape |f32[16]| at ShapeIndex {}:\n",
        " value: <0 p.0 @0> (size=64,offset=0): f32[16]{0}\n",
        "allocation 1: size 24, output shape is |(f32[4], token[], f32[0], /*index=3*/s32[2])|:\n",
        " value: <9 tuple{} @0> (size=24,offset=0): (f32[4]{0}, token[], f32[0]{0}, s32[2]{0})\n",
        "allocation 2: size 16, maybe-live-out:\n",
        " value: <3 add.1 @0> (size=16,offset=0): f32[4]{0}\n",
        "allocation 3: size 8, maybe-live-out:\n",
        " value: <4 iota.2 @0> (size=8,offset=0): s32[2]{0}\n",
        "allocation 4: size 96, preallocated-temp:\n",
        " value: <1 a.3 @0> (size=64,offset=0): f32[16]{0}\n",
        " value: <2 b.4 @0> (size=32,offset=64): f32[8]{0}\n",
    ]
    assert run(lines)[1].errors == []
    for cut, error in [
        (3, "line 3: input ended before the allocation of the program's output (the one XLA prints 'output shape "
            "is' on); the listing stops after allocation 0"),
        (7, "line 7: input ended before the live-out allocations of the output's s32[2] (every array of the output "
            "tuple has one); the listing stops after allocation 2"),
        (11, "line 11: input ended inside allocation 4's values: they reach byte 64 of its 96 (XLA sizes it by its "
             "values)"),
    ]:
        _, s = run(lines[:cut])
        assert (s.truncated, s.errors) == (True, [error]), cut
    _, s = run(lines[:9])  # after all the output needs: a smaller whole listing, for all the text shows
    assert (s.truncated, s.errors, s.metrics["memory.allocations"]) == (False, [], 4)


def test_used_values_name_their_users():
    head = ["\n", "Total bytes used: 8 (8B)\n", "\n", "Used values:\n"]
    a = ["<0 p.0 @0>\n", " positions:\n", "  p.0\n", " uses:\n", "  t.2, operand 0\n",
         " from instruction: %p.0 = f32[] parameter(0)\n"]
    t = ["<2 t.2{} @0>\n", " positions:\n", "  t.2 {}\n", " uses:\n", "  (none)\n",
         " from instruction: %t.2 = (f32[]) tuple(%p.0)\n"]
    assert run(head + a + t)[1].errors == []
    _, s = run(head + a)
    assert (s.truncated, s.errors) == (True, ["line 10: input ended after 1 used values: 1 instruction(s) they list as "
                                              "users have no value listed at their output (e.g. t.2)"])
    # "t.2 {0}" is where t.2 passes p.0 on, not its own output: still a cut.
    _, s = run(head + a[:3] + ["  t.2 {0}\n"] + a[3:])
    assert s.truncated


def test_unclosed_and_unknown_headers_are_errors_naming_the_line():
    lines = [
        "BufferAssignment:\n",
        "allocation 0: size 8, parameter 0, shape f32[2] at\n",  # a paste wrapped at 80 columns
        "ShapeIndex {}:\n",
        " value: <0 p.0 @0> (size=8,offset=0): f32[2]{0}\n",
        "allocation 1: size 4, entry computation parameter:\n",  # the profiler's words: never printed by XLA
        " value: <1 c.1 @0> (size=4,offset=0): f32[]\n",
    ]
    tables, s = run(lines)
    assert s.errors == [
        "line 2: allocation 0 header has no closing ':' (line wrapped or cut short); allocation not read",
        "line 3: unrecognized line",
        "line 5: unknown allocation flags ['entry computation parameter']",
    ]
    assert tables["buffer_allocations"]["allocation_index"].to_list() == [1] and len(tables["buffer_values"]) == 1


# --- sniff, stage, bad input ---


def _head(path: Path) -> str:
    return path.read_bytes()[:65536].decode("utf-8", "replace")


def test_sniff_claims_only_buffer_files():
    mine = [SEED, *(cpu_file(c, st) for c in CASES for st in SIDE)]
    for path in mine:
        assert xb.sniff(path.name, _head(path)), path.name
    others = [p for p in SEEDS.glob("*.txt") if p != SEED]
    others += list((FIXTURES / "xla_memory_usage_report").glob("*/*.txt"))
    for path in others:
        assert not xb.sniff(path.name, _head(path)), path.name
    assert not xb.sniff("m.txt", "HloModule jit_f, is_scheduled=true\n\nBufferAssignment:\n")
    assert not xb.sniff("m.txt", "Total bytes used: 12 (12B)\n\nAllocations sorted by size:\n")  # old memory report


def test_stage_from_name():
    assert xb.stage_from_name("module_0010.jit_f.cpu_after_optimizations-buffer-assignment.txt") == "buffer_assignment"
    assert xb.stage_from_name("module_0010.jit_f.cpu_after_optimizations-buffer-assignment-values.txt") == "values"
    assert xb.stage_from_name("module_0010.jit_f.cpu_after_optimizations-live-range.txt") == "live_ranges"
    assert xb.stage_from_name("module_0010.jit_f.cpu_after_optimizations-memory-usage-report.txt") is None
    assert xb.stage_from_name("002_5960cad812240b69.txt") is None


@pytest.mark.parametrize("lines", [[], ["\n", "  \n"], ["HloModule m\n", "BufferAssignment:\n"], ["garbage\n"]])
def test_nothing_usable_raises(lines):
    with pytest.raises(ParseError):
        list(xb.parse(lines))


def test_junk_and_huge_lines_are_errors_not_crashes():
    lines = SEED.read_text().splitlines(keepends=True)
    damaged = lines[:20] + ["x" * 5_000_000 + "\n", "allocation 9: size |" + "|" * 100_000 + "\n"] + lines[20:]
    tables, s = run(damaged)
    assert len(tables["buffer_allocations"]) == 54 and s.errors and not s.truncated
    tables, s = run([line.rstrip("\n") for line in lines])  # lines given without newlines: all read
    assert len(tables["buffer_peak_values"]) == 50 and not s.errors and not s.truncated


# --- a bad record costs only itself ---

MAX_BYTES = (1 << 63) - 1


def _mlp_with(stage: str, at: int, extra: list[str]):
    """The mlp fixture's file of this stage with ``extra`` lines inserted after its line ``at``, parsed."""
    lines = cpu_file("mlp", stage).read_text().splitlines(keepends=True)
    return run([*lines[:at], *extra, *lines[at:]])


def _same_rows(tables, whole_tables) -> bool:
    """Every table as the whole file's, but for the line numbers (lines were inserted)."""
    return sorted(tables) == sorted(whole_tables) and all(
        tables[t].drop("lineno").equals(whole_tables[t].drop("lineno")) for t in whole_tables)


@pytest.mark.parametrize("size", ["99999999999999999999", "-4", "four", "4.5", "4e3"])
def test_an_unreadable_allocation_header_costs_only_itself(size):
    """A header whose size is not a whole number of at most 18 digits is an error naming its line, and it
    and its values are skipped; the rest reads as the whole file. (A longer number was read as its first
    18 digits, a fraction or exponent as its integer part; the values of any other header went to the
    allocation before.)"""
    whole_tables, whole = run_file(cpu_file("mlp", "buffer_assignment"))
    tables, s = _mlp_with("buffer_assignment", 5, [f"allocation 90: size {size}, thread-local:\n",
                                                   " value: <90 junk @0> (size=4,offset=0): f32[]\n"])
    assert s.errors == ["line 6: allocation header not read: its index or size is not a number XLA prints "
                        "(at most 9 and 18 digits)"]
    assert (s.truncated, s.metrics) == (False, whole.metrics) and _same_rows(tables, whole_tables)


def test_a_value_outside_its_allocation_costs_only_itself():
    """XLA checks that every value's slice lies inside its allocation: one that does not is an error
    naming its line, and only that row is skipped."""
    whole_tables, whole = run_file(cpu_file("mlp", "buffer_assignment"))
    tables, s = _mlp_with("buffer_assignment", 9, [" value: <91 junk @0> (size=512,offset=512): f32[128]{0}\n"])
    assert s.errors == ["line 10: value not read: its slice (offset 512, size 512) lies outside allocation 3 "
                        "(512 bytes)"]
    assert (s.truncated, s.metrics) == (False, whole.metrics) and _same_rows(tables, whole_tables)
    # The LogicalBuffer lines of 2017-2019 print their slice as [offset,size].
    tables, s = run(["BufferAssignment:\n", "allocation 0: 0x55d5c8c4c0a0, size 12, preallocated-temp:\n",
                     "  add.1[](#3 @0) [0,4]: f32[]\n", "  add.2[](#4 @0) [8,8]: f32[2]{0}\n"])
    assert s.errors == ["line 4: value not read: its slice (offset 8, size 8) lies outside allocation 0 (12 bytes)"]
    assert tables["buffer_values"]["value_name"].to_list() == ["add.1"]


def test_allocations_past_2_63_bytes_are_not_summed():
    """The allocation that would take the listing past 2^63 bytes (the Int64 range) is an error naming its
    line and is skipped with its values; the figures stay in range."""
    huge = 999_999_999_999_999_999
    extra = [line for i in range(16, 26) for line in (f"allocation {i}: size {huge}, thread-local:\n",
                                                       f" value: <{i + 90} junk.{i} @0> (size={huge},offset=0): f32[]\n")]
    tables, s = _mlp_with("buffer_assignment", 36, extra)
    assert s.errors == [f"line 55: allocation 25 not read: with its {huge} bytes the allocations would hold more "
                        "than 2^63 bytes"]
    assert s.metrics["memory.total_bytes"] == 68276 + 9 * huge <= MAX_BYTES
    assert (s.metrics["memory.allocations"], s.metrics["memory.values"], len(tables["buffer_values"])) == (25, 19 + 9, 19 + 9)


def test_bad_live_range_rows_cost_only_themselves():
    """A live range that ends before it starts, a peak value that would take the peak past 2^63 bytes:
    errors naming their lines, those rows skipped, the rest read."""
    whole_tables, whole = run_file(cpu_file("mlp", "live_ranges"))
    tables, s = _mlp_with("live_ranges", 29, ["    junk{}:9-3\n"])
    assert s.errors == ["line 30: live range 9-3 of junk ends before it starts; not read"]
    assert (s.truncated, s.metrics) == (False, whole.metrics) and _same_rows(tables, whole_tables)
    huge = 999_999_999_999_999_999
    _, s = _mlp_with("live_ranges", 38, [f"    junk.{i}{{}}: {huge} bytes (cumulative: 1 bytes)\n" for i in range(10)])
    assert s.errors == [f"line 48: peak value junk.9 not read: with its {huge} bytes the peak would pass 2^63 bytes"]
    assert s.metrics["memory.peak_live_bytes"] == 68104 + 9 * huge <= MAX_BYTES


def test_lines_of_unclosed_marks_cost_one_pass():
    """Shape text of unclosed comments or brackets (a live-out value's shape, the output's shape) is
    read in one pass: each pattern stops at the next opening mark (it rescanned the rest of the line
    from every one: a 120 KB line took a minute, these lines hours)."""
    whole_tables, whole = run_file(cpu_file("mlp", "buffer_assignment"))
    lines = cpu_file("mlp", "buffer_assignment").read_text().splitlines(keepends=True)
    assert lines[14] == " value: <35 ynn_fusion @0> (size=4,offset=0): f32[]\n"  # live-out, as the next line
    lines[14] = lines[14].rstrip("\n") + "/*a" * 300_000 + "\n"
    lines[11] = lines[11].replace("f32[])|", "f32[]" + "a[" * 300_000 + ")|")
    tables, s = run(lines)
    assert (s.errors, s.truncated, s.metrics) == ([], False, whole.metrics)


def test_header_only_is_truncated():
    for first in ("BufferAssignment:\n", "\n", "HloLiveRange (max 3):\n"):
        lines = [first] if first != "\n" else ["\n", "Total bytes used: 4 (4B)\n", "\n", "Used values:\n"]
        _, s = run(lines)
        assert s.truncated


# --- truncation property: a cut never invents rows, and is flagged when it loses structure ---

SEED_LINES = SEED.read_text().splitlines(keepends=True)
LAST_FROM = max(i for i, line in enumerate(SEED_LINES) if line.startswith(" from instruction: "))
CPU_FILES = {st: cpu_file("mlp", st).read_text() for st in SIDE}


def _boundary(kept: list[str], exempt_from: bool) -> bool:
    """A cut that leaves a smaller but well-formed file: after a value line, or after a used-value block."""
    tail = [line for line in kept if line.strip()]
    last = tail[-1] if tail else ""
    return last.startswith(" value: ") or (exempt_from and last.startswith(" from instruction:"))


def _check_cut(kept: list[str], full: tuple, exempt_from: bool, lines: list[str]) -> None:
    try:
        tables, s = run(kept)
    except ParseError:
        return
    full_tables, full_s = full
    for name, frame in tables.items():
        assert frame.equals(full_tables[name].head(len(frame))), name  # a prefix: nothing invented
    lost = s.metrics != full_s.metrics or any(len(tables.get(n, [])) < len(f) for n, f in full_tables.items())
    # A last line without its newline is whole when it is the full line (a file that only lacks its
    # final newline), or the 'from instruction' line that closes a used value (its rest is not read).
    last = kept[-1] if kept else "\n"
    whole_last = (last.endswith("\n") or last + "\n" == lines[len(kept) - 1]
                  or (exempt_from and last.startswith(" from instruction:")))  # as the parser tells it, cut at its colon too
    complete_lines = whole_last and all(line.endswith("\n") for line in kept[:-1])
    if lost and not (complete_lines and _boundary(kept, exempt_from)) and len(kept) > 1:
        assert s.truncated and s.errors
    if s.truncated:
        assert s.errors


SEED_FULL = run(SEED_LINES)
CPU_FULL = {st: run(text.splitlines(keepends=True)) for st, text in CPU_FILES.items()}
SEED_TEXT = SEED.read_text()


@settings(max_examples=150, deadline=None)
@given(cut=st.integers(0, len(SEED_LINES)))
def test_seed_line_cuts(cut):
    kept = SEED_LINES[:cut]
    _check_cut(kept, SEED_FULL, exempt_from=cut > LAST_FROM, lines=SEED_LINES)


@settings(max_examples=150, deadline=None)
@given(cut=st.integers(0, len(SEED_TEXT)))
@pytest.mark.slow
def test_seed_byte_cuts(cut):
    kept = SEED_TEXT[:cut].splitlines(keepends=True)
    _check_cut(kept, SEED_FULL, exempt_from=len(kept) > LAST_FROM, lines=SEED_LINES)


@settings(max_examples=150, deadline=None)
@given(stage=st.sampled_from(list(SIDE)), frac=st.floats(0, 1), by_line=st.booleans())
def test_cpu_cuts(stage, frac, by_line):
    text = CPU_FILES[stage]
    lines = text.splitlines(keepends=True)
    if by_line:
        kept = lines[: round(frac * len(lines))]
    else:
        kept = text[: round(frac * len(text))].splitlines(keepends=True)
    _check_cut(kept, CPU_FULL[stage], exempt_from=stage == "values", lines=lines)
