"""transforms.parsers.xla_hlo (+ xla_shapes): the two GPU seeds and real XLA:CPU dumps made with jax.

Figures are exact. Seed figures were worked out by hand from the dumps (see the report);
the CPU fixtures are held to what XLA's own API said about the same compilation
(``api_figures.json``, written by tests/fixtures/xla_hlo/make_fixtures.py).
"""

import gzip
import io
import json
import os
import re
import subprocess
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES, SEEDS
from tests.helpers import collect
from transforms.parsers import xla_hlo as hlo
from transforms.parsers import xla_shapes
from transforms.records import DumpKind, DumpSummary, ParseError
from transforms.parsers.xla_shapes import ShapeInfo, shape_info

SEED_NEW = SEEDS / "001_a0c5460ce1af2dbe.txt"  # torch_xla GPU, is_scheduled, newer syntax
SEED_OLD = SEEDS / "004_83a80cec1e7cc5e6.txt"  # JAX pmap GPU, older syntax
CPU = FIXTURES / "xla_hlo"
API = json.loads((CPU / "api_figures.json").read_text())["modules"]


def run(lines) -> tuple[dict[str, pl.DataFrame], DumpSummary]:
    return collect(hlo, lines)


def run_file(path: Path):
    with path.open() as fh:
        return run(fh)


def run_text(text: str):
    return run(io.StringIO(text))


def cpu_dump(module: str, stage: str = "cpu_after_optimizations") -> Path:
    (path,) = CPU.glob(f"module_*.{module}.{stage}.txt")
    return path


# --- the seeds --------------------------------------------------------------------


def test_seed_new_syntax_figures():
    t, s = run_file(SEED_NEW)
    assert s.kind is DumpKind.XLA_HLO and s.stage == "after_optimizations" and s.program == "SyncTensorsGraph.2143"
    assert not s.errors and not s.truncated
    assert s.metrics == {
        "hlo.modules": 1, "hlo.computations": 72, "hlo.instructions": 1886,
        "fusion.count": 69, "fusion.count.kLoop": 38, "fusion.count.kCustom": 30, "fusion.count.kInput": 1,
        "kernel.custom_calls": 55, "kernel.custom_call.__cublas$gemm": 55, "kernel.collectives": 0,
        "kernel.launches": 124,
        "memory.entry_parameter_bytes": 1230365444, "memory.entry_output_bytes": 277676064,
        # arrays only: the ROOT is a 4-tuple, whose index table is 4 x 8 bytes; no parameter is a tuple
        "memory.entry_parameter_array_bytes": 1230365444, "memory.entry_output_array_bytes": 277676064 - 4 * 8,
    }
    assert t["hlo_modules"].row(0, named=True) == {
        "module": "SyncTensorsGraph.2143", "module_index": 0, "is_scheduled": True,
        "entry_computation": "SyncTensorsGraph.2143", "computations": 72, "instructions": 1886, "fusions": 69,
        "kernel_launches": 124, "entry_parameter_bytes": 1230365444, "entry_output_bytes": 277676064,
        "complete": True, "lineno": 1}
    roles = dict(t["hlo_computations"].group_by("role").len().iter_rows())
    assert roles == {"fusion": 69, "reducer": 1, "called": 1, "entry": 1}
    comps = {r["name"]: r for r in t["hlo_computations"].iter_rows(named=True)}
    assert comps["command_buffer"]["role"] == "called" and comps["command_buffer"]["instructions"] == 299
    assert comps["command_buffer"]["kernel_launches"] == 124 and comps["AddComputation.100"]["role"] == "reducer"
    assert comps["SyncTensorsGraph.2143"] == {
        "module": "SyncTensorsGraph.2143", "module_index": 0, "name": "SyncTensorsGraph.2143", "is_entry": True,
        "role": "entry", "instructions": 124, "kernel_launches": 0, "lineno": 1978}
    ins = t["hlo_instructions"]
    assert ins.height == 1886 and ins["is_root"].sum() == 72
    gemm = ins.filter(pl.col("name") == "custom-call.55.0").row(0, named=True)
    assert gemm == {
        "module": "SyncTensorsGraph.2143", "module_index": 0, "computation": "command_buffer",
        "name": "custom-call.55.0", "opcode": "custom-call", "shape": "(bf16[64,6144], s8[4194304])", "layout": None,
        "dtype": "tuple", "elements": 64 * 6144 + 4194304, "bytes": 64 * 6144 * 2 + 4194304, "is_root": False,
        "fusion_kind": None, "called_computations": None, "custom_call_target": "__cublas$gemm",
        "op_type": "aten__mm", "op_name": "aten__mm", "source_file": "/usr/local/lib/python3.10/site-packages/torch/_ops.py",
        "source_line": 756, "lineno": gemm["lineno"]}
    gather = ins.filter(pl.col("name") == "loop_gather_fusion").row(0, named=True)
    assert (gather["fusion_kind"], gather["called_computations"], gather["shape"], gather["layout"], gather["bytes"]) == (
        "kLoop", ["fused_gather"], "bf16[64,1,1024]", "2,0,1", 64 * 1024 * 2)
    call = ins.filter(pl.col("name") == "call").row(0, named=True)
    assert call["called_computations"] == ["command_buffer"] and call["computation"] == "SyncTensorsGraph.2143"


def test_seed_old_syntax_figures():
    t, s = run_file(SEED_OLD)
    assert s.stage == "after_optimizations" and s.program == "pmap__multi_device_update_fn__2.16072"
    assert not s.errors and not s.truncated
    assert s.metrics == {
        "hlo.modules": 1, "hlo.computations": 512, "hlo.instructions": 8217,
        "fusion.count": 326, "fusion.count.kLoop": 257, "fusion.count.kInput": 69,
        "kernel.custom_calls": 56, "kernel.custom_call.__cublas$gemm": 48, "kernel.custom_call.cuda_threefry2x32": 8,
        "kernel.collectives": 12, "kernel.collective.all-reduce": 12, "kernel.launches": 647,
        "memory.entry_parameter_bytes": 452674604, "memory.entry_output_bytes": 452662916,
        # arrays only: the ROOT is a 79-tuple (79 x 8 bytes of index table); no parameter is a tuple
        "memory.entry_parameter_array_bytes": 452674604, "memory.entry_output_array_bytes": 452662916 - 79 * 8,
    }
    roles = dict(t["hlo_computations"].group_by("role").len().iter_rows())
    assert roles == {"fusion": 326, "reducer": 149, "while_body": 18, "while_condition": 18, "entry": 1}
    ins = t["hlo_instructions"]
    assert ins.filter(pl.col("opcode") == "while").height == 18
    threefry = ins.filter(pl.col("custom_call_target") == "cuda_threefry2x32").row(0, named=True)
    assert (threefry["shape"], threefry["bytes"], threefry["op_type"], threefry["source_line"]) == (
        "(u32[2], u32[2])", 16, "threefry2x32", 71)
    # op_name is unescaped: XLA printed psum[ axes=(\'batch\',)\n ...] (C escapes)
    assert ins.filter(pl.col("op_name").str.contains("\n", literal=True)).height > 0
    assert ins.filter(pl.col("op_name").str.contains("\\", literal=True)).height == 0
    assert ins.filter(pl.col("op_name").str.contains("axes=('batch',)", literal=True)).height > 0


# --- real XLA:CPU dumps, held to XLA's own API --------------------------------------------


@pytest.mark.parametrize("case", sorted(API))
def test_cpu_dump_matches_xla_api(case):
    api = API[case]
    t, s = run_file(cpu_dump(api["module"]))
    m = s.metrics
    assert not s.errors and not s.truncated and s.stage == "after_optimizations" and s.program == api["module"]
    assert (m["hlo.computations"], m["hlo.instructions"]) == (api["computations"], api["instructions"])
    assert {k.removeprefix("fusion.count."): v for k, v in m.items() if k.startswith("fusion.count.")} == api["fusion"]
    assert m["fusion.count"] == sum(api["fusion"].values())
    assert {k.removeprefix("kernel.custom_call."): v for k, v in m.items()
            if k.startswith("kernel.custom_call.")} == api["custom_call"]
    assert {k.removeprefix("kernel.collective."): v for k, v in m.items()
            if k.startswith("kernel.collective.")} == api["collective"]
    # CompiledMemoryStats sizes tuples with their 8-byte-per-element index table; so do these metrics.
    assert m["memory.entry_parameter_bytes"] == api["argument_size_in_bytes"]
    assert m["memory.entry_output_bytes"] == api["output_size_in_bytes"]
    fusions = t["hlo_instructions"].filter(pl.col("opcode") == "fusion")
    assert dict(fusions.group_by("fusion_kind").len().iter_rows()) == api["fusion"]


def test_cpu_loop_cond_structure():
    t, s = run_file(cpu_dump("jit_loop_cond"))
    comps = t["hlo_computations"]
    assert dict(comps.group_by("role").len().iter_rows()) == {
        "entry": 1, "fusion": 6, "while_body": 1, "while_condition": 1, "branch": 2}
    assert s.metrics["kernel.launches"] == 8
    cond = t["hlo_instructions"].filter(pl.col("opcode") == "conditional").row(0, named=True)
    assert cond["called_computations"] == ["region_1.3", "region_2.4"]
    # newer JAX prints stack_frame_id instead of source_file: resolved through the module's tables
    sin = t["hlo_instructions"].filter(pl.col("name") == "sin.0").row(0, named=True)
    assert sin["source_file"].endswith("tests/fixtures/xla_hlo/make_fixtures.py") and sin["source_line"] == 45
    assert sin["op_name"] == "jit(loop_cond)/while/body/cond/branch_0_fun/sin" and sin["op_type"] is None


def test_cpu_scan_reaches_while_through_call():
    t, s = run_file(cpu_dump("jit_scan_cumsum"))
    roles = dict(t["hlo_computations"].select("name", "role").iter_rows())
    assert roles["while.6_computation"] == "called" and roles["region_0.5"] == "while_body"
    assert s.metrics["kernel.launches"] == 8


def test_cpu_dtypes_bytes():
    t, _ = run_file(cpu_dump("jit_dtypes_mix"))
    params = t["hlo_instructions"].filter((pl.col("opcode") == "parameter") & (pl.col("computation").str.starts_with("main")))
    got = {r["name"]: (r["shape"], r["dtype"], r["elements"], r["bytes"]) for r in params.iter_rows(named=True)}
    assert got == {
        "a.1": ("bf16[7,3]", "bf16", 21, 42), "b.1": ("s4[5]", "s4", 5, 3), "c.1": ("f8e4m3fn[9]", "f8e4m3fn", 9, 9),
        "d.1": ("c64[3]", "c64", 3, 24), "e.1": ("pred[11]", "pred", 11, 11), "f.1": ("s8[13]", "s8", 13, 13)}


def test_cpu_callback_and_collectives():
    t, s = run_file(cpu_dump("jit_with_callback"))
    cb = t["hlo_instructions"].filter(pl.col("opcode") == "custom-call").row(0, named=True)
    assert (cb["shape"], cb["dtype"], cb["elements"], cb["bytes"], cb["op_type"]) == ("()", "tuple", 0, 0, "debug_print")
    t, s = run_file(cpu_dump("jit_collectives"))
    assert s.metrics["kernel.collectives"] == 6 and s.metrics["kernel.launches"] == 16


@pytest.mark.parametrize("path", sorted(CPU.glob("module_*.txt")), ids=lambda p: p.name[:60])
def test_every_cpu_dump_parses_cleanly(path):
    t, s = run_file(path)
    assert not s.errors and not s.truncated
    assert t["hlo_modules"]["complete"].all() and t["hlo_instructions"].height == s.metrics["hlo.instructions"]
    stage = hlo.stage_from_name(path.name)
    assert stage is not None and (s.stage == "after_optimizations") == (".before_optimizations." not in path.name)


def test_concatenated_modules_and_small_batches(monkeypatch):
    text = "".join(p.read_text() for p in (cpu_dump("jit_mlp", "before_optimizations"), cpu_dump("jit_loop_cond")))
    t, s = run_text(text)
    assert s.metrics["hlo.modules"] == 2 and s.program == "jit_mlp" and s.stage == "after_optimizations"
    assert t["hlo_modules"]["module"].to_list() == ["jit_mlp", "jit_loop_cond"]
    assert t["hlo_instructions"].group_by("module_index").len().sort("module_index")["len"].to_list() == [35, 65]
    monkeypatch.setattr(hlo, "BATCH_ROWS", 7)
    out = list(hlo.parse(io.StringIO(text)))
    assert max(b.frame.height for b in out[:-1] if b.table == "hlo_instructions") == 7
    small = pl.concat([b.frame for b in out[:-1] if b.table == "hlo_instructions"])
    assert small.equals(t["hlo_instructions"]) and out[-1].metrics == s.metrics


@pytest.mark.integration  # a subprocess in the samples environment
def test_seed_matches_xla_cpp_parser():
    """XLA's own text parser (jaxlib, samples environment) sees the same computations and instructions."""
    py = Path(__file__).resolve().parents[1] / ".venv-samples" / "bin" / "python"
    if not py.exists():
        pytest.skip("no .venv-samples with jaxlib")
    code = ("import sys, json; from jaxlib import _hlo\n"
            "for p in sys.argv[1:]:\n"
            "    m = _hlo.hlo_module_from_text(open(p).read())\n"
            "    print(json.dumps([m.name, [[c.name, i.name] for c in m.computations() for i in c.instructions()]]))")
    paths = [SEED_NEW, SEED_OLD, cpu_dump("jit_loop_cond")]
    out = subprocess.run([str(py), "-c", code, *map(str, paths)], capture_output=True, text=True, check=True,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    for path, line in zip(paths, out.stdout.splitlines()):
        name, pairs = json.loads(line)
        t, s = run_file(path)
        assert s.program == name
        ours = sorted(t["hlo_instructions"].select("computation", "name").iter_rows())
        assert ours == sorted(map(tuple, pairs))


@pytest.mark.parametrize("path", [SEED_NEW, SEED_OLD, cpu_dump("jit_scan_cumsum")], ids=lambda p: p.name[:30])
def test_linenos_point_at_the_instruction(path):
    lines = path.read_text().splitlines()
    t, _ = run_file(path)
    for name, lineno in t["hlo_instructions"].select("name", "lineno").iter_rows():
        assert f"{name} = " in lines[lineno - 1]
    for name, lineno in t["hlo_computations"].select("name", "lineno").iter_rows():
        assert name in lines[lineno - 1] and lines[lineno - 1].rstrip().endswith("{")


# --- syntax variants ----------------------------------------------------------------


VARIANTS = """\
HloModule hand_written, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

%fused (p: f32[4]) -> f32[4] {
\t%p = f32[4]{0:T(128)S(1)} parameter(0)
  ROOT %n = f32[4]{0:T(128)S(1)} negate(%p), metadata={op_name="a}b" op_type="neg" future_key=3}
}

ENTRY main {
  p0 = f32[4]{0} parameter(0)
  r = f32[] reduce(p0, c), dimensions={0}, to_apply=add, backend_config={"k":{"n":"}"},"s":"\\"q"}
  f = f32[4]{0} fusion(p0), kind=kLoop, calls=%fused, frontend_attributes={a="b"}
  d = f32[<=4] brand-new-op(f), calls=add, new_attr={1,2}, sharding={devices=[2]<=[2]}
  s = (f32[], token[], /*index=2*/(s4[3]{0:E(4)}, pred[])) tuple(r, t, u)
  garbage that is not an instruction
  ROOT c = f32[4]{0} conditional(q, f, f), branch_computations={%fused, add}
}
"""


def test_syntax_variants():
    t, s = run_text(VARIANTS)
    # f32[<=4] without layout: typed by hand (XLA prints one), so its rows are asked about their operands from there
    assert s.errors == ["line 19: s: operand t is not defined in computation main",
                        "line 20: not an HLO instruction: 'garbage that is not an instruction' (expected = but saw "
                        "'that')"]
    assert not s.truncated and s.program == "hand_written"
    ins = {r["name"]: r for r in t["hlo_instructions"].iter_rows(named=True)}
    assert ins["p"]["layout"] == "0:T(128)S(1)" and ins["p"]["shape"] == "f32[4]" and ins["p"]["bytes"] == 16
    assert (ins["n"]["op_name"], ins["n"]["op_type"], ins["n"]["is_root"]) == ("a}b", "neg", True)
    assert ins["r"]["called_computations"] == ["add"]
    assert ins["f"]["called_computations"] == ["fused"] and ins["f"]["fusion_kind"] == "kLoop"
    assert (ins["d"]["opcode"], ins["d"]["called_computations"], ins["d"]["elements"]) == ("brand-new-op", ["add"], 4)
    assert (ins["s"]["shape"], ins["s"]["dtype"], ins["s"]["elements"], ins["s"]["bytes"]) == (
        "(f32[], token[], (s4[3], pred[]))", "tuple", 5, 4 + 0 + 2 + 1)
    assert ins["c"]["called_computations"] == ["fused", "add"] and ins["c"]["is_root"]
    roles = dict(t["hlo_computations"].select("name", "role").iter_rows())
    assert roles == {"add": "reducer", "fused": "fusion", "main": "entry"}
    # executed: main and, through the conditional, both branches (a fusion body and a reducer)
    assert s.metrics["kernel.launches"] == 3 + 1 + 1
    assert s.metrics["memory.entry_output_bytes"] == 16 and s.metrics["memory.entry_parameter_bytes"] == 16


def test_metadata_with_braces_in_values_is_read_per_row():
    text = """HloModule m

ENTRY %e (x: f32[]) -> f32[] {
  %x = f32[] parameter(0), metadata={op_name="a}b" source_line=1}
  %y = f32[] negate(%x), metadata={op_name="a}c" source_line=2}
  ROOT %z = f32[] negate(%y), metadata={op_name="a}b" source_line=1}
}
"""
    t, s = run_text(text)
    got = t["hlo_instructions"].select("op_name", "source_line").rows()
    assert got == [("a}b", 1), ("a}c", 2), ("a}b", 1)] and not s.errors


# The metadata reading before stack_frame_id had a group of its own in the pattern: the keys past
# XLA's fixed order (op_type, op_name, source_file, source_line) were searched for in the rest.
_Q = r'"([^"\\]*(?:\\.[^"\\]*)*)"'
_SEARCHED = re.compile(rf"metadata=\{{\s*(?:op_type={_Q}\s*)?(?:op_name={_Q}\s*)?(?:source_file={_Q}\s*)?"
                       rf"(?:source_line=(\d+)\s*)?([^\"}}]*(?:\"[^\"\\\\]*(?:\\\\.[^\"\\\\]*)*\"[^\"}}]*)*)\}}")


def _searched(text: str):
    m = _SEARCHED.match(text)
    if m is None:
        return None
    op_type, op_name, source_file, source_line, rest = m.groups()
    frame = None
    if rest and "=" in rest:
        keys = xla_shapes._METADATA_KEY
        op_type = op_type or ((x := keys["op_type"].search(rest)) and x[1])
        op_name = op_name or ((x := keys["op_name"].search(rest)) and x[1])
        source_file = source_file or ((x := keys["source_file"].search(rest)) and x[1])
        ints = dict(xla_shapes._METADATA_INT.findall(rest))
        source_line = source_line or ints.get("source_line")
        frame = int(ints["stack_frame_id"]) if "stack_frame_id" in ints else None
    unescape = xla_shapes.c_unescape
    return unescape(op_type), unescape(op_name), unescape(source_file), int(source_line) if source_line else None, frame


def test_metadata_read_as_the_keyword_search_reads_it():
    """read_metadata takes "stack_frame_id=N" after the fixed keys without searching the rest; every
    metadata text of the corpus and the fixtures, and odd hand-written ones, read as the search read them."""
    texts = {'metadata={op_type="" op_name="" stack_frame_id=3}', 'metadata={op_name="a" stack_frame_id=1 stack_frame_id=2}',
             'metadata={op_name="a" stack_frame_id=1 op_type="t"}', 'metadata={stack_frame_id=7 source_line=3}',
             'metadata={op_name="p[\\\'w\\\']" stack_frame_id=12  }', 'metadata={op_name="a"\tstack_frame_id=4}',
             'metadata={op_type="x" op_name="y" source_file="f.py" source_line=9 stack_frame_id=2}',
             'metadata={op_name="a" stack_frame_id=}', 'metadata={op_name="a" stack_frame_id=5x}'}
    roots = [FIXTURES.parents[1] / "data" / "corpus", FIXTURES]
    for path in (p for r in roots for p in r.rglob("*") if p.is_file() and p.suffix in (".gz", ".txt", ".hlo")):
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8", "replace")
        texts.update(re.findall(r"metadata=\{[^}]*\}", text))
    assert len(texts) > 7_000  # the corpus holds thousands (TORAX alone ~6,000, most with stack_frame_id)
    for text in sorted(texts):
        assert xla_shapes.read_metadata(text) == _searched(text), text


def test_stack_frames_resolve_against_the_tables_as_they_stand():
    """meta() remembers what it read from the stack frame tables; a table row stored later (a frame or
    a file location redefined between computations) is what the next metadata text resolves through."""
    text = """HloModule m

FileNames
1 "a.py"
2 "b.py"

FileLocations
1 {file_name_id=1 line=10}

StackFrames
1 {file_location_id=1 parent_frame_id=0}

f {
  ROOT x = f32[] parameter(0), metadata={op_name="x" stack_frame_id=1}
}

1 {file_location_id=2 parent_frame_id=0}
FileLocations
2 {file_name_id=2 line=20}

g {
  ROOT y = f32[] parameter(0), metadata={op_name="y" stack_frame_id=1}
}

StackFrames
1 {file_location_id=1 parent_frame_id=0}
FileLocations
1 {file_name_id=2 line=30}

ENTRY e {
  ROOT z = f32[] parameter(0), metadata={op_name="z" stack_frame_id=1}
}
"""
    t, s = run_text(text)
    got = t["hlo_instructions"].select("name", "source_file", "source_line").rows()
    assert got == [("x", "a.py", 10), ("y", "b.py", 20), ("z", "b.py", 30)] and not s.errors


def test_damaged_stack_frame_tables_say_where_and_keep_the_rest():
    """A table is read in a loop of its own (read_rows) up to its first line that is not a row: a junk line
    or a blank line in it, the rows after it still count; a frame whose location or file is missing gives no
    file (and a missing location no line either)."""
    text = """HloModule m, entry_computation_layout={()->f32[]}

FileNames
1 "a.py"
2 "b.py"

FileLocations
1 {file_name_id=1 function_name_id=1 line=10}
junk row here
2 {file_name_id=2 function_name_id=1 line=20}
3 {file_name_id=9 function_name_id=1 line=30}
StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}

3 {file_location_id=3 parent_frame_id=1}
x4 {file_location_id=3}
5 {file_location_id=77}

ENTRY e () -> f32[] {
  a = f32[] constant(1), metadata={op_name="a" stack_frame_id=1}
  b = f32[] add(a, a), metadata={op_name="b" stack_frame_id=2}
  c = f32[] add(a, b), metadata={op_name="c" stack_frame_id=3}
  d = f32[] add(a, c), metadata={op_name="d" stack_frame_id=5}
  ROOT e = f32[] add(a, d), metadata={op_name="e" stack_frame_id=9}
}
"""
    t, s = run_text(text)
    assert t["hlo_instructions"].select("name", "source_file", "source_line", "lineno").rows() == [
        ("a", "a.py", 10, 21), ("b", "b.py", 20, 22), ("c", None, 30, 23), ("d", None, None, 24), ("e", None, None, 25)]
    assert s.errors == ["line 9: unrecognized line: 'junk row here'", "line 17: unrecognized line: 'x4 {file_location_id=3}'"]


def test_async_and_while_roles():
    text = """HloModule m, is_scheduled=true

%body (p: (s32[])) -> (s32[]) {
  ROOT %p = (s32[]) parameter(0)
}

%cond (p: (s32[])) -> pred[] {
  %p = (s32[]) parameter(0)
  ROOT %c = pred[] constant(false)
}

%async_wrapped (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  ROOT %ag = f32[8]{0} all-gather(%a), dimensions={0}
}

ENTRY %e (x: f32[8], i: (s32[])) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %i = (s32[]) parameter(1)
  %w = (s32[]) while(%i), condition=%cond, body=%body
  %start = ((f32[8]), f32[8], u32[]) async-start(%x), calls=%async_wrapped
  ROOT %done = f32[8]{0} async-done(%start)
}
"""
    t, s = run_text(text)
    roles = dict(t["hlo_computations"].select("name", "role").iter_rows())
    assert roles == {"body": "while_body", "cond": "while_condition", "async_wrapped": "async", "e": "entry"}
    assert s.metrics["kernel.launches"] == 2 and s.metrics["kernel.collective.all-gather"] == 1
    assert s.metrics["memory.entry_parameter_bytes"] == 32 + 4 + 8 and s.stage == "after_optimizations"


# --- shapes -------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("f32[8,16]{1,0}", ShapeInfo("f32[8,16]", "1,0", "f32", 128, 512, 512)),
    ("bf16[]", ShapeInfo("bf16[]", None, "bf16", 1, 2, 2)),
    ("s4[5]{0:E(4)}", ShapeInfo("s4[5]", "0:E(4)", "s4", 5, 3, 3)),
    ("u4[3]", ShapeInfo("u4[3]", None, "u4", 3, 2, 2)),
    ("f6e2m3fn[4]{0:E(6)}", ShapeInfo("f6e2m3fn[4]", "0:E(6)", "f6e2m3fn", 4, 3, 3)),
    ("f8e4m3fn[9]", ShapeInfo("f8e4m3fn[9]", None, "f8e4m3fn", 9, 9, 9)),
    ("c128[2]", ShapeInfo("c128[2]", None, "c128", 2, 32, 32)),
    ("pred[3]", ShapeInfo("pred[3]", None, "pred", 3, 3, 3)),
    ("token[]", ShapeInfo("token[]", None, "token", 0, 0, 0)),
    ("f32[<=10,3]", ShapeInfo("f32[<=10,3]", None, "f32", 30, 120, 120)),
    ("f32[?,3]", ShapeInfo("f32[?,3]", None, "f32", None, None, None)),
    ("bf16[2,256]{1,0:T(8,128)(2,1)S(1)}", ShapeInfo("bf16[2,256]", "1,0:T(8,128)(2,1)S(1)", "bf16", 512, 1024, 1024)),
    ("()", ShapeInfo("()", None, "tuple", 0, 0, 0)),
    ("(f32[2]{0}, /*index=5*/s32[])", ShapeInfo("(f32[2], s32[])", None, "tuple", 3, 12, 28)),
    ("((f32[], s32[]), f32[])", ShapeInfo("((f32[], s32[]), f32[])", None, "tuple", 3, 12, 44)),
    ("f9e9m9[4]", ShapeInfo("f9e9m9[4]", None, "f9e9m9", 4, 5, 5)),
    ("zzz[4]", ShapeInfo("zzz[4]", None, "zzz", 4, None, None)),
    ("nonsense", ShapeInfo("nonsense", None, None, None, None, None)),
])
def test_shape_info(text, expected):
    assert shape_info(text) == expected


# --- sniff, stage, errors -----------------------------------------------------------------


def test_sniff():
    for path in [SEED_NEW, SEED_OLD, *CPU.glob("module_*.txt")]:
        assert hlo.sniff(path.name, path.read_text()[:65536]), path
    for path in SEEDS.glob("00[023]_*.txt"):
        assert not hlo.sniff(path.name, path.read_text()[:65536]), path
    side_files = ["BufferAssignment:\nallocation 0: size 128, parameter 0", "Memory Space: default (color=0)\n",
                  "HloLiveRange (max 4):\n  InstructionSequence:\n", "Total bytes used: 240 (240B)\n", ""]
    assert not any(hlo.sniff("x.txt", head) for head in side_files)
    assert hlo.sniff("x.txt", "\n\nHloModule m\n")


@pytest.mark.parametrize("name,stage", [
    ("module_0000.jit_mlp.before_optimizations.txt", "before_optimizations"),
    ("module_0000.jit_mlp.cpu_after_optimizations.txt", "after_optimizations"),
    ("module_0042.SyncTensorsGraph.2143.sm_8.0_gpu_after_optimizations.txt", "after_optimizations"),
    ("module_0000.jit_tiny.0001.HLO_passes_after_layout_assignment.after_fusion.before_fusion-wrapper.txt",
     "pass:HLO_passes_after_layout_assignment/fusion"),
    ("module_0006.jit_f.0016.copy-insertion.after_adding_copies_to_resolve_interference.txt",
     "pass:copy-insertion/adding_copies_to_resolve_interference"),
    ("001_a0c5460ce1af2dbe.txt", None),
])
def test_stage_from_name(name, stage):
    assert hlo.stage_from_name(name) == stage


@pytest.mark.parametrize("text", ["", "\n\n", "BufferAssignment:\nallocation 0\n", "}\n"])
def test_unreadable_input_raises(text):
    with pytest.raises(ParseError):
        list(hlo.parse(io.StringIO(text)))


def test_huge_junk_line_is_an_error_not_a_crash():
    text = "HloModule m\n" + "x" * 5_000_000 + "\nENTRY %e {\n  ROOT %p = f32[] parameter(0), " + "y" * 1_000_000 + "\n}\n"
    t, s = run_text(text)
    assert len(s.errors) == 1 and s.errors[0].startswith("line 2: unrecognized line")
    assert t["hlo_instructions"]["name"].to_list() == ["p"] and not s.truncated


# --- truncation: any cut yields a prefix of the full parse, flagged ------------------------------


def _cut_case(path: Path):
    text = path.read_text()
    full, summary = run_text(text)
    assert not summary.truncated
    return text, full


CUT_CASES = {}


def _cases():
    if not CUT_CASES:
        CUT_CASES.update({p.name: _cut_case(p) for p in (SEED_NEW, SEED_OLD)})
    return CUT_CASES


def check_cut(name: str, cut_text: str) -> None:
    text, full = _cases()[name]
    try:
        t, s = run_text(cut_text)
    except ParseError:
        assert not cut_text.lstrip().startswith("HloModule ")
        return
    ins = t.get("hlo_instructions", pl.DataFrame(schema=hlo.TABLES["hlo_instructions"]))
    assert ins.equals(full["hlo_instructions"].head(ins.height))
    comps = t.get("hlo_computations")
    if comps is not None:
        assert comps.select("name", "lineno").equals(full["hlo_computations"].select("name", "lineno").head(comps.height))
    if len(cut_text) < len(text.rstrip()):
        assert s.truncated and not t["hlo_modules"]["complete"].any()


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from([SEED_NEW.name, SEED_OLD.name]), frac=st.floats(0, 1))
@pytest.mark.slow
def test_truncated_at_a_line(name, frac):
    text = _cases()[name][0]
    lines = text.splitlines(keepends=True)
    check_cut(name, "".join(lines[: int(frac * len(lines))]))


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from([SEED_NEW.name, SEED_OLD.name]), frac=st.floats(0, 1))
@pytest.mark.slow
def test_truncated_mid_line(name, frac):
    text = _cases()[name][0]
    check_cut(name, text[: int(frac * len(text))])
