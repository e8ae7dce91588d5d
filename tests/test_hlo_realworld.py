"""XLA HLO text as people keep and paste it (data/corpus/hlo_text), parsed whole through the driver.

Every real file of the corpus is held to figures counted another way: XLA's own text parser
(its verdict recorded in MANIFEST.json, and re-run here when ``.venv-samples`` has jaxlib) and a
regex count over the text, explained where it is made. Tiny hand-written snippets below pin one
syntax rule each (XLA's lexer, xla/hlo/parser/hlo_lexer.cc), and say so.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
from pathlib import Path

import polars as pl
import pytest

from transforms.parse import kind_of, parse_dump
from transforms.parsers import hlo_lines
from transforms.parsers import xla_hlo as hlo
from transforms.parsers.xla_shapes import shape_info
from transforms.records import DumpKind, ParseError, Status

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "data" / "corpus" / "hlo_text"
MANIFEST = json.loads((CORPUS / "MANIFEST.json").read_text(encoding="utf-8"))
ENTRIES = {e["file"].removesuffix(".gz"): e for e in MANIFEST["files"]}
SAMPLES_PY = ROOT / ".venv-samples" / "bin" / "python"


def text_of(name: str) -> str:
    return gzip.decompress((CORPUS / f"{name}.gz").read_bytes()).decode()


def parsed(name: str):
    return parse_dump(io.BytesIO(text_of(name).encode()), name)


# The figures each real file gives: kind xla_hlo, status ok, and these.
EXPECTED = {
    "hlo_llama31_8b_bf16_1x8.hlo": dict(program="jit_train_step", modules=1, computations=2915, instructions=31855,
                                        collectives={"all-gather": 450, "all-reduce": 1197}),
    "hlo_mixtral_8x7b_bf16_1x8.hlo": dict(program="jit_train_step", modules=1, computations=3714, instructions=41881,
                                          collectives={"all-gather": 322, "all-reduce": 1261, "all-to-all": 192}),
    "hlo_torax_iterhybrid_predictor_corrector_f64.hlo": dict(program="jit___call", modules=1, computations=636,
                                                             instructions=30041, collectives={}),
    "gpu_hlo.hlo": dict(program="module", modules=1, computations=1, instructions=5, collectives={}),
    "import_async_collectives.hlo": dict(program="main", modules=6, computations=11, instructions=30, collectives={
        "all-gather-start": 1, "all-reduce-start": 1, "collective-permute-start": 1, "all-to-all": 1,
        "reduce-scatter": 1, "collective-broadcast": 1}),
    "emitters_scatter_add.hlo": dict(program="module_scatter", modules=1, computations=2, instructions=7, collectives={}),
    "emitters_reduce_row_mof_variadic_variadic.hlo": dict(program="module_fused_reduce", modules=1, computations=2,
                                                          instructions=15, collectives={}),
    # all-to-all-start: XLA's async syntax sugar, for which XLA's parser makes an async computation (issue 48)
    "hlo_control_flow_flattening_test.async_all_to_all.hlo": dict(program="module_main", modules=1, computations=2,
                                                                  instructions=5, collectives={"all-to-all-start": 1}),
    # XLA's own test files as its parser reads them (issue 31): a // CHECK header longer than the sniff window;
    # modules with no computation marked ENTRY, computations with no ROOT; modules split by // ----- lines
    "builder_math_polygamma.hlo": dict(program="main", modules=1, computations=1, instructions=3, collectives={}),
    "emitters_scatter_s8.hlo": dict(program="scatter", modules=1, computations=2, instructions=8, collectives={}),
    "multihost_single_gemm_fusion.hlo": dict(program="m", modules=1, computations=2, instructions=6, collectives={}),
    "gpu_sub_byte_collectives.hlo": dict(program="module_e", modules=5, computations=5, instructions=10, collectives={
        "all-gather": 2, "all-to-all": 1, "collective-broadcast": 1, "collective-permute": 1}),
    "gpu_vectorization.hlo": dict(program="m8", modules=1, computations=2, instructions=4, collectives={}),
    "gpu_pad_to_static.hlo": dict(program="PadToStatic", modules=1, computations=1, instructions=2, collectives={}),
}

# An <op>-start of XLA's async syntax sugar stands for an async computation the text does not print
# (a parameter and the op, in these files): XLA's parser counts 1 computation and 2 instructions more for each,
# and so does ours (issue 48); the regex counts below do not.
_SUGAR = re.compile(r"\s(?:all-to-all|ragged-all-to-all|reduce-scatter|collective-broadcast)-start\(")
# Independent counts over the text with // comments removed: an instruction starts a line with
# "[ROOT] name = shape" (a tuple "(" or "type["); attributes on continuation lines never do.
_INSTRUCTION = re.compile(r"(?m)^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?:\(|[a-z][a-z0-9]*\[)")
_COMPUTATION = re.compile(r"(?m)^\s*(?:ENTRY\s+)?%?[\w.\-]+\s*(?:\(.*\)\s*->.*)?\{\s*$")
_COLLECTIVE = re.compile(r"\s(all-reduce-start|all-gather-start|collective-permute-start|all-to-all-start|"
                         r"ragged-all-to-all-start|reduce-scatter-start|collective-broadcast-start|all-reduce|"
                         r"all-gather|all-to-all|ragged-all-to-all|reduce-scatter|collective-permute|"
                         r"collective-broadcast|send|recv)\(")


def _uncommented(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)  # no "//" inside a string in these files (checked below)


def test_manifest_lists_every_file_once_and_each_is_whole():
    assert sorted(ENTRIES) == sorted(p.name.removesuffix(".gz") for p in CORPUS.glob("*.gz")) == sorted(EXPECTED)
    for name, e in ENTRIES.items():
        assert re.fullmatch(r"[0-9a-f]{40}", e["commit"]) and e["licence"] == "Apache-2.0" and e["repo"] and e["what"]
        data = text_of(name).encode()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (e["bytes"], e["sha256"]), name
    assert sum(p.stat().st_size for p in CORPUS.glob("*.gz")) < 1_300_000  # the corpus stays small


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n[:40])
def test_real_file_figures(name):
    want = EXPECTED[name]
    p = parsed(name)
    s, m = p.summary, p.summary.metrics
    assert (s.kind, s.status, s.errors, s.program) == (DumpKind.XLA_HLO, Status.OK, [], want["program"])
    assert (m["hlo.modules"], m["hlo.computations"], m["hlo.instructions"]) == (
        want["modules"], want["computations"], want["instructions"])
    assert {k.removeprefix("kernel.collective."): v for k, v in m.items()
            if k.startswith("kernel.collective.")} == want["collectives"]
    assert m["kernel.collectives"] == sum(want["collectives"].values())
    assert p.tables["hlo_instructions"].height == want["instructions"]
    assert p.tables["hlo_computations"].height == want["computations"]

    # against a regex count of the text
    text = _uncommented(text_of(name))
    assert not any("//" in q for q in re.findall(r'"(?:[^"\\]|\\.)*"', text_of(name)))  # so _uncommented is right
    sugar = len(_SUGAR.findall(text))
    assert len(_INSTRUCTION.findall(text)) + 2 * sugar == want["instructions"]
    assert len(_COMPUTATION.findall(text)) + sugar == want["computations"]
    found: dict[str, int] = {}
    for op in _COLLECTIVE.findall(text):
        found[op] = found.get(op, 0) + 1
    assert found == want["collectives"]

    # against XLA's own parser, as recorded in the manifest (one module per // ----- split): the same modules and
    # entry computations (the one marked ENTRY, else the last), and, as its computation builder makes it, one
    # root in every computation (the instruction marked ROOT, else the last)
    xla = ENTRIES[name]["xla_parser"]
    assert len(xla) == want["modules"] and xla[0]["name"] == want["program"]
    assert sum(x["computations"] for x in xla) == want["computations"]
    assert sum(x["instructions"] for x in xla) == want["instructions"]
    modules = p.tables["hlo_modules"].sort("module_index")
    assert modules["module_index"].to_list() == list(range(want["modules"]))
    assert modules["module"].to_list() == [x["name"] for x in xla]
    assert modules["entry_computation"].to_list() == [x["entry"] for x in xla]
    assert modules["complete"].all()
    ins = p.tables["hlo_instructions"]
    roots = ins.group_by("module_index", "computation").agg(pl.col("is_root").sum())
    assert roots.height == want["computations"] and roots["is_root"].to_list() == [1] * roots.height


@pytest.mark.integration  # a subprocess in the samples environment
def test_xla_parser_still_says_so():
    """Re-run XLA's text parser (jaxlib, samples environment) on the corpus: the manifest's figures hold."""
    if not SAMPLES_PY.exists():
        pytest.skip("no .venv-samples with jaxlib")
    code = ("import sys, json, re\nfrom jaxlib import _hlo\nout = {}\n"
            "for path in sys.argv[1:]:\n"
            "    text = open(path).read()\n"
            "    mods = [_hlo.hlo_module_from_text(t) for t in re.split(r'(?m)^[ \\t]*// -----[ \\t]*$', text)]\n"
            "    out[path] = [{'name': m.name, 'computations': len(list(m.computations())),\n"
            "                  'instructions': sum(1 for c in m.computations() for i in c.instructions()),\n"
            "                  'entry': re.search(r'(?m)^ENTRY %?(\\S+)', m.to_string())[1],\n"
            "                  'roots': re.findall(r'(?m)^  ROOT %?(\\S+)', m.to_string())} for m in mods]\n"
            "print(json.dumps(out))")
    paths = []
    tmp = ROOT / "benchmarks" / "out" / "hlo_text"
    tmp.mkdir(parents=True, exist_ok=True)
    for name in sorted(ENTRIES):
        path = tmp / name
        path.write_text(text_of(name))
        paths.append(str(path))
    out = subprocess.run([str(SAMPLES_PY), "-c", code, *paths], capture_output=True, text=True, check=True,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    got = {Path(p).name: v for p, v in json.loads(out.stdout).items()}
    roots = {n: [m.pop("roots") for m in v] for n, v in got.items()}
    assert got == {n: e["xla_parser"] for n, e in ENTRIES.items()}
    # the instruction each computation returns: where the text marks no ROOT, XLA's builder takes the last one
    for name in ["multihost_single_gemm_fusion.hlo", "gpu_sub_byte_collectives.hlo", "gpu_vectorization.hlo"]:
        ins = parsed(name).tables["hlo_instructions"]
        ours = ins.filter(pl.col("is_root")).sort("module_index", "lineno")
        assert [ours.filter(pl.col("module_index") == i)["name"].to_list() for i in range(len(roots[name]))] == roots[name]


def test_kind_is_found_past_comments_blank_lines_and_missing_headers():
    for name in EXPECTED:
        assert kind_of(name, text_of(name)[:65536]) is DumpKind.XLA_HLO, name
    # What made these unknown before: the first line is a comment, a blank line, or a computation.
    firsts = {name: text_of(name).lstrip("\n")[:12] for name in EXPECTED}
    assert firsts["hlo_torax_iterhybrid_predictor_corrector_f64.hlo"].startswith("// TORAX")
    assert firsts["gpu_hlo.hlo"].startswith("// RUN:")
    assert firsts["emitters_scatter_add.hlo"].startswith("// RUN:")
    assert text_of("hlo_control_flow_flattening_test.async_all_to_all.hlo").startswith("\n\n  ENTRY main {")
    # ... or nothing but comments in the whole sniff window: 65,894 bytes of // CHECK lines quoting the module
    head = text_of("builder_math_polygamma.hlo")[:65536]
    assert not hlo_lines.first_statements(head) and "\n// CHECK-LABEL: HloModule main," in head
    # ... and text that only looks like it is not claimed
    for head in ["// a C++ comment\nint main() {\n  return 0;\n}\n", "config {\n  name: \"x\"\n}\n", "/* open",
                 "// only comments\n", "// CHECK-LABEL: HloModule main\n"]:
        assert not hlo.sniff("x.txt", head), head
    # comments filling the whole window: claimed when they quote an HloModule line or ENTRY computation
    filler = "// CHECK-NEXT: %[[x:.*]] = f32[] add(%[[a]], %[[b]])\n" * 2000
    assert hlo.sniff("x.hlo", ("// CHECK-LABEL: HloModule main\n" + filler)[:65536])
    assert hlo.sniff("x.hlo", ("// CHECK: ENTRY %main\n" + filler)[:65536])
    assert not hlo.sniff("x.hlo", ("// RUN: hlo-opt --list-passes\n" + filler)[:65536])
    assert not hlo.sniff("x.hlo", ("// CHECK-LABEL: HloModule main\n" + filler)[:30000])  # the whole file


def test_kind_is_found_in_a_file_opened_with_open(tmp_path):
    """A file object's own buffer (4-8 KiB from open()) does not shorten the head the kind is sniffed from:
    pad_to_static's HloModule line comes after 4,990 bytes of // RUN and // CHECK lines."""
    for name in ["gpu_pad_to_static.hlo", "builder_math_polygamma.hlo"]:
        path = tmp_path / name
        path.write_text(text_of(name))
        with path.open("rb") as raw:
            s = parse_dump(raw, name).summary
        assert (s.kind, s.status, s.program) == (DumpKind.XLA_HLO, Status.OK, EXPECTED[name]["program"])
        with path.open("rb") as raw:  # the caller's stream is read, never closed
            parse_dump(raw, name)
            assert not raw.closed


def test_rows_sit_on_their_lines():
    """lineno of every row is the line its statement starts on, statements over several lines too."""
    for name in ["emitters_scatter_add.hlo", "emitters_reduce_row_mof_variadic_variadic.hlo", "gpu_hlo.hlo",
                 "import_async_collectives.hlo", "hlo_control_flow_flattening_test.async_all_to_all.hlo"]:
        lines = text_of(name).splitlines()
        p = parsed(name)
        for row in p.tables["hlo_instructions"].select("name", "lineno", "computation").iter_rows():
            if row[2].startswith("async_wrapped"):  # made by XLA's parser of the <op>-start on that line
                assert re.search(r"\s[\w-]+-start\(", lines[row[1] - 1]), (name, row)
                continue
            assert re.match(rf"\s*(ROOT\s+)?%?{re.escape(row[0])}\s*=", lines[row[1] - 1]), (name, row)
        for row in p.tables["hlo_computations"].select("name", "lineno").iter_rows():
            if row[0].startswith("async_wrapped"):
                continue
            assert row[0] in lines[row[1] - 1] and lines[row[1] - 1].rstrip().endswith("{"), (name, row)
    scatter = parsed("emitters_scatter_add.hlo").tables["hlo_instructions"]
    root = scatter.filter(scatter["is_root"] & (scatter["computation"] == "scatter")).row(0, named=True)
    assert (root["name"], root["opcode"], root["shape"], root["lineno"], root["called_computations"]) == (
        "scatter", "scatter", "f32[10,5]", 15, ["add"])


def test_async_collectives_counted_once():
    """A -start/-done pair is one collective; an async-start/-done pair wrapping a collective computation
    is that one collective (counted on the op it wraps); the -done and async ops are not counted."""
    p = parsed("import_async_collectives.hlo")
    ins = p.tables["hlo_instructions"]
    ops = dict(ins.group_by("opcode").len().iter_rows())
    assert ops["async-start"] == ops["async-done"] == 3 and ops["all-gather-done"] == 1
    roles = dict(p.tables["hlo_computations"].select("name", "role").iter_rows())
    assert roles["region_0.2"] == "async" and roles["region_1.1"] == "reducer"
    # XLA's syntax sugar: the async computation XLA's parser makes holds the all-to-all, counted on the start
    p = parsed("hlo_control_flow_flattening_test.async_all_to_all.hlo")
    sugar = p.tables["hlo_instructions"]
    assert sugar.select("computation", "name", "opcode", "shape", "is_root", "lineno").rows() == [
        ("main", "param", "parameter", "f32[4,8,128]", False, 4),
        ("main", "all-to-all-start", "all-to-all-start", "((f32[4,8,128]), f32[4,8,128], u32[], u32[])", False, 5),
        ("main", "all-to-all-done", "all-to-all-done", "f32[4,8,128]", True, 6),
        ("async_wrapped", "async_param", "parameter", "f32[4,8,128]", False, 5),
        ("async_wrapped", "all-to-all", "all-to-all", "f32[4,8,128]", True, 5)]
    assert p.tables["hlo_computations"].select("name", "role", "instructions", "lineno").rows() == [
        ("main", "entry", 3, 3), ("async_wrapped", "async", 2, 5)]
    assert {k: v for k, v in p.summary.metrics.items() if k.startswith("kernel.collective")} == {
        "kernel.collectives": 1, "kernel.collective.all-to-all-start": 1}


def test_entry_bytes_with_and_without_tuple_index_tables():
    """llama 3.1 8B: ENTRY parameters are 881 arrays, its ROOT a tuple of 883. Both sums are checked against the
    entry_computation_layout of the HloModule line, read here on its own: arrays only, plus 8 bytes of
    index table per tuple element."""
    text = text_of("hlo_llama31_8b_bf16_1x8.hlo")
    layout = re.search(r"entry_computation_layout=\{\((.*?)\)->\((.*?)\)\}", text.splitlines()[0])
    sides = [re.findall(r"([a-z][a-z0-9]*)\[([\d,]*)\]", side) for side in layout.groups()]
    width = {"f32": 4, "s32": 4, "bf16": 2}

    def array_bytes(leaves):
        total = 0
        for dtype, dims in leaves:
            n = 1
            for d in filter(None, dims.split(",")):
                n *= int(d)
            total += n * width[dtype]
        return total

    params, outputs = sides
    assert (len(params), len(outputs)) == (881, 883)
    m = parsed("hlo_llama31_8b_bf16_1x8.hlo").summary.metrics
    assert m["memory.entry_parameter_array_bytes"] == m["memory.entry_parameter_bytes"] == array_bytes(params)
    assert m["memory.entry_output_array_bytes"] == array_bytes(outputs) == 12_048_187_432
    assert m["memory.entry_output_bytes"] == array_bytes(outputs) + 8 * len(outputs)


_JAX = r"""
import json, sys
import jax, jax.numpy as jnp
def f(a, b, c):
    return (a @ b, (jnp.tanh(a).sum(), c.astype(jnp.bfloat16)), b.T)
args = (jnp.ones((8, 16), jnp.float32), jnp.ones((16, 4), jnp.float32), jnp.ones((5,), jnp.int8))
compiled = jax.jit(f).lower(*args).compile()
stats = compiled.memory_analysis()
outs = jax.tree_util.tree_leaves(jax.eval_shape(f, *args))
print(json.dumps({"text": compiled.as_text(), "argument": stats.argument_size_in_bytes,
                  "output": stats.output_size_in_bytes,
                  "argument_arrays": sum(a.nbytes for a in args),
                  "output_arrays": sum(o.size * o.dtype.itemsize for o in outs)}))
"""


@pytest.mark.integration  # a subprocess in the samples environment
def test_entry_bytes_against_jax():
    """XLA:CPU's memory_analysis() sizes arguments and outputs with tuple index tables: the *_bytes
    metrics equal it; the *_array_bytes metrics equal the arrays' nbytes as JAX reports them."""
    if not SAMPLES_PY.exists():
        pytest.skip("no .venv-samples with jax")
    out = subprocess.run([str(SAMPLES_PY), "-c", _JAX], capture_output=True, text=True, check=True,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    got = json.loads(out.stdout)
    m = parse_dump(io.BytesIO(got["text"].encode()), "jit_f.txt").summary.metrics
    assert m["memory.entry_parameter_bytes"] == got["argument"]
    assert m["memory.entry_output_bytes"] == got["output"]
    assert m["memory.entry_parameter_array_bytes"] == got["argument_arrays"]
    assert m["memory.entry_output_array_bytes"] == got["output_arrays"]
    assert got["output"] > got["output_arrays"]  # the nested tuple's index tables are really there


# --- one syntax rule each (tiny hand-written snippets) -----------------------------------------------


def run_text(text: str):
    p = parse_dump(io.BytesIO(text.encode()), "snippet.txt")
    return p.tables.get("hlo_instructions"), p.summary


def test_block_comment_over_lines_before_the_header_and_a_header_over_lines():
    t, s = run_text("/* a block\n   comment */ HloModule m, entry_computation_layout={(f32[8]{0})\n"
                    "   ->f32[8]{0}}\n\nENTRY e {\n  ROOT p = f32[8] parameter(0)\n}\n")
    assert (s.status, s.program, t["name"].to_list(), t["lineno"].to_list()) == (Status.OK, "m", ["p"], [6])


def test_commented_and_indented_closing_braces_and_trailing_comments():
    t, s = run_text("HloModule m\n\nadd {\n  a = f32[] parameter(0)  // first\n  b = f32[] parameter(1)\n"
                    "  ROOT s = f32[] add(a, b) /* sum */\n  }\n\nENTRY e {\n  // whole-line comment\n"
                    "  x = f32[4]{0} parameter(0), metadata={op_name=\"x\"} // metadata={op_name=\"no\"}\n"
                    "  ROOT r = f32[] reduce(x, x), dimensions={0}, to_apply=add // , to_apply=nope\n} // e\n")
    assert (s.status, s.errors) == (Status.OK, [])
    assert t["name"].to_list() == ["a", "b", "s", "x", "r"] and t["lineno"].to_list() == [4, 5, 6, 11, 12]
    assert t["op_name"].to_list() == [None, None, None, "x", None]
    assert t["called_computations"].to_list()[-1] == ["add"]


def test_shapes_with_spaces():
    t, s = run_text("HloModule m\n\nENTRY e {\n  p = f32[8, 8]{1, 0} parameter(0)\n"
                    "  ROOT t = ( f32[8, 8], s32[ ] ) tuple(p, p)\n}\n")
    assert (s.status, t["shape"].to_list(), t["layout"].to_list()) == (Status.OK, ["f32[8,8]", "(f32[8,8], s32[])"],
                                                                       ["1,0", None])
    assert shape_info("( f32[2] ,s32[] )") == shape_info("(f32[2], s32[])")


def test_the_rest_of_an_instruction_on_the_next_lines():
    t, s = run_text("HloModule m\n\nENTRY e {\n  p = f32[8] parameter(0)\n  f = f32[8] fusion(p)\n"
                    "      , kind=kLoop, calls=c\n  ROOT r = f32[8]\n     negate(f)\n}\n")
    assert (s.status, s.errors, t["name"].to_list(), t["lineno"].to_list()) == (Status.OK, [], ["p", "f", "r"], [4, 5, 7])
    assert t["fusion_kind"].to_list() == [None, "kLoop", None]


def test_an_unclosed_bracket_costs_one_statement_and_names_its_line(monkeypatch):
    t, s = run_text("HloModule m\n\nENTRY e {\n  p = f32[8] parameter(\n  ROOT q = f32[8] negate(p)\n}\n")
    assert s.status is Status.PARTIAL and t["name"].to_list() == ["q"]
    assert s.errors == ["snippet.txt: line 4: statement not closed before line 5 (an unbalanced bracket?): "
                        "'p = f32[8] parameter('"]
    # a bracket never closed, followed by lines that start nothing: no buffer outgrows the cap (50 lines
    # here). Statements are cut off at lines 4, 55, ..., 4 + 51 k (50 lines, and the 51st that passed the
    # cap); the last (line 973) takes the closing brace with it, so the computation never closes.
    monkeypatch.setattr(hlo_lines, "MAX_STATEMENT_LINES", 50)
    text = "HloModule m\n\nENTRY e {\n  p = f32[8] parameter(0,\n" + "    1,\n" * 1000 + "}\n"
    t, s = run_text(text)
    cut = [f"snippet.txt: line {4 + 51 * k}: statement not closed within 50 lines or 16 MiB (an unbalanced "
           "bracket or comment?); skipped" for k in range(19)]
    assert (s.status, s.truncated, t) == (Status.PARTIAL, True, None)
    assert s.errors[:19] == cut and s.errors[19].startswith("snippet.txt: line 973: not an HLO instruction: '1, 1,")
    assert s.errors[20:] == ["snippet.txt: line 1005: input ended inside computation e"]


def test_headerless_module_named_after_its_entry():
    t, s = run_text("fused {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}\n\n"
                    "ENTRY main.7 {\n  a = f32[2] parameter(0)\n  ROOT f = f32[2] fusion(a), kind=kLoop, calls=fused\n}\n")
    assert (s.program, s.metrics["memory.entry_parameter_bytes"], s.metrics["kernel.launches"]) == ("module_main.7", 8, 1)
    with pytest.raises(ParseError):
        list(hlo.parse(io.StringIO("// nothing but\n// comments\n")))


def test_no_entry_takes_the_last_computation_unless_xla_printed_the_module():
    """XLA's parser takes the computation marked ENTRY, else the last one (HloParserImpl::ParseComputations).
    XLA's printer gives every computation header its signature and prints ENTRY last: a module so printed
    that ends without ENTRY was cut, and stays partial (issue 27)."""
    hand = ("HloModule m\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n"
            "main {\n  x = f32[4] parameter(0)\n  ROOT r = f32[] reduce(x, x), dimensions={0}, to_apply=add\n}\n")
    p = parse_dump(io.BytesIO(hand.encode()), "snippet.txt")
    s = p.summary
    assert (s.status, s.errors, s.metrics["memory.entry_parameter_bytes"], s.metrics["memory.entry_output_bytes"]) == (
        Status.OK, [], 16, 4)
    assert p.tables["hlo_modules"].select("entry_computation", "complete").rows() == [("main", True)]
    assert p.tables["hlo_computations"].select("name", "is_entry", "role").rows() == [
        ("add", False, "reducer"), ("main", True, "entry")]
    printed = hand.replace("add {", "add (a: f32[], b: f32[]) -> f32[] {").replace("main {", "main (x: f32[4]) -> f32[] {")
    p = parse_dump(io.BytesIO(printed.encode()), "snippet.txt")
    assert (p.summary.status, p.summary.errors) == (
        Status.PARTIAL, ["snippet.txt: line 12: input ended before module m had its ENTRY computation"])
    assert p.tables["hlo_modules"].select("entry_computation", "complete").rows() == [(None, False)]
    # ... and one of XLA's own modules cut right after a computation, before its ENTRY: partial each time
    text = text_of("hlo_torax_iterhybrid_predictor_corrector_f64.hlo")
    ends = [m.end() for m in re.finditer(r"\n}\n", text)]
    for cut in ends[: -1 : len(ends) // 8]:
        s = parse_dump(io.BytesIO(text[:cut].encode()), "torax.hlo").summary
        assert (s.status, s.errors) == (
            Status.PARTIAL, [f"torax.hlo: line {text[:cut].count(chr(10))}: input ended before module jit___call had "
                             "its ENTRY computation"]), cut


def test_no_root_takes_the_last_instruction(monkeypatch):
    """XLA's computation builder takes the last instruction when none is marked ROOT; rows of a computation
    that outlast a batch keep the ROOT they had."""
    import transforms.parsers.xla_hlo as parser

    text = ("HloModule m\n\nENTRY e {\n  p = f32[8] parameter(0)\n  n = f32[8] negate(p)\n  t = (f32[8], f32[8]) tuple(p, n)\n}"
            "\n\nc {\n  ROOT q = f32[8] parameter(0)\n  r = f32[8] negate(q)\n  u = f32[8] negate(r)\n}\n")
    for batch in (1_000, 2):
        monkeypatch.setattr(parser, "BATCH_ROWS", batch)
        t, s = run_text(text)
        assert (s.status, s.errors) == (Status.OK, [])
        assert t.select("computation", "name", "is_root").rows() == [
            ("e", "p", False), ("e", "n", False), ("e", "t", True), ("c", "q", True), ("c", "r", False), ("c", "u", False)]
        assert (s.metrics["memory.entry_output_array_bytes"], s.metrics["memory.entry_output_bytes"]) == (64, 80)


def test_split_lines_end_modules():
    """A line reading "// -----" ends a module (hlo-opt --split-input-file splits the text there): modules without
    HloModule line are modules apart; a longer rule of dashes is a comment. Between modules, what is not a module
    is an error, not the end of the parse."""
    text = ("// RUN: hlo-opt --split-input-file %s\n\ne {\n  a = f32[2] parameter(0)\n  b = f32[2] negate(a)\n}\n\n"
            "// -----\n// ---------------------\n\nf {\n  c = s32[] parameter(0)\n}\n\n// ---------------------\n"
            "g {\n  d = s32[] parameter(0)\n}\n// -----\n")
    p = parse_dump(io.BytesIO(text.encode()), "snippet.hlo")
    assert (p.summary.status, p.summary.errors, p.summary.program, p.summary.metrics["hlo.modules"]) == (
        Status.OK, [], "module_e", 2)
    assert p.tables["hlo_modules"].select("module", "module_index", "entry_computation", "computations").rows() == [
        ("module_e", 0, "e", 1), ("module_g", 1, "g", 2)]
    assert p.tables["hlo_instructions"].select("module", "name", "is_root").rows() == [
        ("module_e", "a", False), ("module_e", "b", True), ("module_g", "c", True), ("module_g", "d", True)]
    junk = ("HloModule a\n\nENTRY e {\n  p = f32[] parameter(0)\n// -----\nnot hlo at all\n// -----\n"
            "HloModule b\n\nENTRY e {\n  q = f32[] parameter(0)\n}\n")
    p = parse_dump(io.BytesIO(junk.encode()), "snippet.hlo")
    assert (p.summary.status, p.summary.errors) == (Status.PARTIAL, [
        "snippet.hlo: line 4: module ended inside computation e",
        "snippet.hlo: line 4: module a has no complete ENTRY computation",
        "snippet.hlo: line 6: unrecognized line: 'not hlo at all'"])
    assert p.tables["hlo_modules"].select("module", "complete").rows() == [("a", False), ("b", True)]


def test_partial_always_says_why():
    """Cut anywhere (at every line of the small files, at 50 points of a large one), a real file reads as ok,
    or partial with at least one error."""
    for name in ["emitters_scatter_add.hlo", "import_async_collectives.hlo", "gpu_hlo.hlo",
                 "hlo_torax_iterhybrid_predictor_corrector_f64.hlo", "emitters_scatter_s8.hlo",
                 "multihost_single_gemm_fusion.hlo", "gpu_sub_byte_collectives.hlo", "gpu_vectorization.hlo",
                 "gpu_pad_to_static.hlo", "builder_math_polygamma.hlo"]:
        data = text_of(name).encode()
        if len(data) > 10_000:
            cuts = [len(data) * i // 50 for i in range(1, 50)]
        else:
            cuts = [i + 1 for i, b in enumerate(data) if b == 0x0A] + [len(data) // 3]
        for cut in cuts:
            s = parse_dump(io.BytesIO(data[:cut]), name).summary
            assert s.status is Status.OK or s.errors, (name, cut, s.status)


def test_small_dictionaries_give_the_same_rows(monkeypatch):
    """The shape and metadata dictionaries are dropped between batches when they outgrow their
    cap (memory stays flat on a big module): rows made after a drop are the same rows."""
    import transforms.parsers.xla_hlo as parser

    text = gzip.decompress((CORPUS / "hlo_llama31_8b_bf16_1x8.hlo.gz").read_bytes())
    name = "hlo_llama31_8b_bf16_1x8.hlo"
    kept = parse_dump(io.BytesIO(text), name).tables["hlo_instructions"]
    monkeypatch.setattr(parser, "BATCH_ROWS", 4_096)
    monkeypatch.setattr(parser, "_MAX_META_CACHE", 10)
    monkeypatch.setattr(parser, "_MAX_CACHE", 10)
    dropped = parse_dump(io.BytesIO(text), name).tables["hlo_instructions"]
    assert kept.height == dropped.height == 31_855
    assert dropped.equals(kept)


# --- what XLA's parser makes of hand-written text that the text does not name (issue 48) -------------------


def rows_of(text: str, *columns: str):
    p = parse_dump(io.BytesIO(text.encode()), "snippet.txt")
    return p, p.tables["hlo_instructions"].select(*columns).rows()


def test_nested_instructions_and_compact_tuple_accesses_are_instructions():
    """add(f32[4] parameter(1), multiply(n, p#0)): XLA's parser adds parameter.anon and multiply.anon before add;
    p#0 is a get-tuple-element made once per computation (named p_0), p#1#1 one for each level."""
    p, rows = rows_of("HloModule m\n\nENTRY e {\n  p = (f32[4], (s32[], f32[2])) parameter(0)\n"
                      "  n = f32[4] negate(f32[4] %p#0)\n  x = f32[2] negate(p#1#1)\n"
                      "  ROOT r = add(f32[4] parameter(1),\n    multiply(n, %p#0)), metadata={op_name=\"r\"}\n}\n",
                      "name", "opcode", "shape", "is_root", "lineno", "op_name")
    assert (p.summary.status, p.summary.errors, p.summary.metrics["hlo.instructions"]) == (Status.OK, [], 9)
    assert rows == [
        ("p", "parameter", "(f32[4], (s32[], f32[2]))", False, 4, None),
        ("p_0", "get-tuple-element", "f32[4]", False, 5, None), ("n", "negate", "f32[4]", False, 5, None),
        ("p_1", "get-tuple-element", "(s32[], f32[2])", False, 6, None),
        ("p_1_1", "get-tuple-element", "f32[2]", False, 6, None), ("x", "negate", "f32[2]", False, 6, None),
        ("parameter.anon", "parameter", "f32[4]", False, 7, None),
        ("multiply.anon", "multiply", "f32[4]", False, 8, None),  # shape inferred from its operands, as XLA does
        ("r", "add", "f32[4]", True, 7, "r")]
    # the entry's parameters are the two written ones
    assert p.summary.metrics["memory.entry_parameter_array_bytes"] == 16 + 4 + 8 + 16
    # an access past a tuple, or into what is no tuple, is XLA's parse error
    p, _ = rows_of("HloModule m\n\nENTRY e {\n  p = (f32[4]) parameter(0)\n  ROOT n = f32[4] negate(p#3)\n}\n", "name")
    assert p.summary.errors == ["snippet.txt: line 5: p#3: p ((f32[4])) has no tuple element 3"]


def test_inline_computations_and_async_syntax_sugar_are_computations():
    """call-start(...), to_apply={...}: the inline computation is a computation "_"; call-start is XLA's syntax sugar
    for an async-start whose computation (async_wrapped) holds a parameter per operand shape and the call."""
    p, rows = rows_of("HloModule m\n\nENTRY e {\n  p0 = f32[] parameter(0)\n  p1 = s32[] parameter(1)\n"
                      "  cs = ((f32[], s32[]), (f32[], s32[]), s32[]) call-start(p0, p1), to_apply={\n"
                      "    a = f32[] parameter(0)\n    b = s32[] parameter(1)\n    ROOT t = tuple(a, b)\n"
                      "  }, async_execution_thread=\"x\"\n  ROOT cd = (f32[], s32[]) call-done(cs)\n"
                      "}, execution_thread=\"main\"",  # no newline at the end
                      "computation", "name", "opcode", "shape", "is_root", "lineno")
    assert (p.summary.status, p.summary.errors) == (Status.OK, [])
    assert rows == [
        ("e", "p0", "parameter", "f32[]", False, 4), ("e", "p1", "parameter", "s32[]", False, 5),
        ("e", "cs", "call-start", "((f32[], s32[]), (f32[], s32[]), s32[])", False, 6),
        ("e", "cd", "call-done", "(f32[], s32[])", True, 11),
        ("async_wrapped", "async_param", "parameter", "f32[]", False, 6),
        ("async_wrapped", "async_param.1", "parameter", "s32[]", False, 6),
        ("async_wrapped", "call", "call", "(f32[], s32[])", True, 6),
        ("_", "a", "parameter", "f32[]", False, 7), ("_", "b", "parameter", "s32[]", False, 8),
        ("_", "t", "tuple", "(f32[], s32[])", True, 9)]  # a tuple's shape inferred, as XLA does
    assert p.tables["hlo_computations"].select("name", "role", "instructions").rows() == [
        ("e", "entry", 4), ("async_wrapped", "async", 3), ("_", "called", 3)]


def test_module_header_over_lines_with_a_string_and_the_opcode_on_the_next_line():
    """origin_recovery_table={... "<a module's text>"}: a string over lines in the HloModule statement, holding
    lines that look like instructions and an HloModule line; then a shape whose opcode is on the next line."""
    p, rows = rows_of('HloModule m, origin_recovery_table={\n  {"c"} : {"c2"},\n  "\n    HloModule inner\n'
                      '    ENTRY x {\n      ROOT y = f32[] parameter(0)\n    }\n  "\n}\n\nENTRY e {\n'
                      "  a = (f32[2], f32[2])\n    parameter(0)\n  ROOT b = f32[2] get-tuple-element(a), index=1\n}\n",
                      "name", "shape", "lineno")
    assert (p.summary.status, p.summary.errors, p.summary.program, rows) == (
        Status.OK, [], "m", [("a", "(f32[2], f32[2])", 12), ("b", "f32[2]", 14)])


def test_thousands_of_nested_brackets_cost_their_statement_only():
    """Nesting past what a statement may hold (100 instructions or computations deep) is an error naming the line;
    brackets never closed are an error at the end; neither raises (no recursion) and the other rows stay."""
    deep = "negate(" * 5000 + "p" + ")" * 5000
    text = (f"HloModule m\n\nENTRY e {{\n  p = f32[] parameter(0)\n  n = f32[] negate({deep})\n"
            f"  t = (f32[]) tuple({'tuple(' * 3000}p{')' * 3000})\n  c = f32[] call(p), to_apply={'{ r = f32[] call(p), to_apply=' * 2000}"
            f"{'}' * 2000}\n  ROOT q = f32[] negate(p)\n}}\n")
    p, rows = rows_of(text, "name")
    assert rows == [("p",), ("q",)]
    assert [e.split(": ")[1] for e in p.summary.errors] == ["line 5", "line 6", "line 7"]
    assert "nested more than 100 deep" in p.summary.errors[0]
    p, rows = rows_of("HloModule m\n\nENTRY e {\n  p = f32[] parameter(0)\n  n = f32[] negate(" + "(" * 20000 + "\n}\n",
                      "name")
    assert rows == [("p",)] and p.summary.status is Status.PARTIAL
    assert p.summary.errors[0] == "snippet.txt: line 5: input ended inside the statement that starts here"


def test_what_xla_rejects_for_structure_is_an_error():
    """A second ENTRY or ROOT, a computation defined twice or without instruction, an async form XLA has no
    opcode for (hlo_parser.cc: "expects only one ENTRY", "one computation should have only one ROOT", ...)."""
    cases = {
        "ENTRY a {\n  ROOT p = f32[] parameter(0)\n}\nENTRY b {\n  ROOT q = f32[] parameter(0)\n}\n":
            "line 6: a second ENTRY computation (b) in module m",
        "c {\n  ROOT p = f32[] parameter(0)\n}\nc {\n  ROOT q = f32[] parameter(0)\n}\n":
            "line 6: computation c defined twice in module m",
        "ENTRY c {\n  ROOT p = f32[] parameter(0)\n  ROOT q = f32[] parameter(1)\n}\n":
            "line 3: computation c has more than one ROOT",
        "e {\n}\nENTRY c {\n  ROOT p = f32[] parameter(0)\n}\n": "line 3: computation e has no instruction",
        "ENTRY c {\n  t = token[] after-all()\n  ROOT s = (f32[], u32[], token[]) send-start(t), channel_id=1\n}\n":
            "line 5: no such opcode in XLA: send-start (send is not wrapped as async syntax sugar)",
    }
    for body, error in cases.items():
        s = parse_dump(io.BytesIO(f"HloModule m\n\n{body}".encode()), "snippet.txt").summary
        assert (s.status, s.errors) == (Status.PARTIAL, [f"snippet.txt: {error}"]), body


def test_a_buffer_shape_and_a_printed_module_ended_by_a_split_line():
    """b(f32[2,4]) is a shape (XLA's ParseShape: 'b(' shape ')'); a module XLA printed (signature headers) that a
    "// -----" line ends without ENTRY is whole, its last computation its entry, as XLA's parser takes it (the
    input ending there instead reads as cut: test_no_entry_takes_the_last_computation_unless_xla_printed_the_module).
    Both as in xla/hlo/translate/hlo_to_mhlo/tests (custom_call.hlo, import_async.hlo)."""
    text = ("HloModule a\n\n%c (p: f32[2]) -> b(f32[2,4]) {\n  %p = f32[2]{0} parameter(0)\n"
            "  ROOT %b = b(f32[2,4]) custom-call(%p), custom_call_target=\"CreateBuffer\"\n}\n\n// -----\n\n"
            "HloModule z\n\nENTRY %e () -> f32[] {\n  ROOT %k = f32[] constant(1)\n}\n")
    p = parse_dump(io.BytesIO(text.encode()), "snippet.hlo")
    assert (p.summary.status, p.summary.errors, p.summary.metrics["memory.entry_output_bytes"]) == (Status.OK, [], 36)
    assert p.tables["hlo_modules"].select("module", "entry_computation", "complete").rows() == [
        ("a", "c", True), ("z", "e", True)]
    assert p.tables["hlo_instructions"].select("name", "shape", "dtype", "bytes").rows() == [
        ("p", "f32[2]", "f32", 8), ("b", "b(f32[2,4])", "f32", 32), ("k", "f32[]", "f32", 4)]


def test_a_lone_instruction_is_a_module():
    """A text that is one instruction: XLA's parser makes a module and an entry computation "_" of it, with a
    parameter for each operand written with a shape and not defined (named as the operand, or _<n> for a shape
    alone); an inline computation is a computation of its own ("_.1"). Anything after the instruction is an error."""
    p, rows = rows_of("%fusion = f32[3,2] fusion(f32[3,2] %p0, f32[2]), kind=kLoop, calls=\n{\n"
                      "  a = f32[3,2] parameter(0)\n  b = f32[2] parameter(1)\n  ROOT c = f32[3,2] negate(a)\n}",
                      "computation", "name", "opcode", "shape", "is_root", "lineno")
    assert (p.summary.status, p.summary.errors, p.summary.program) == (Status.OK, [], "_")
    assert rows == [("_", "p0", "parameter", "f32[3,2]", False, 1), ("_", "_1", "parameter", "f32[2]", False, 1),
                    ("_", "fusion", "fusion", "f32[3,2]", True, 1), ("_.1", "a", "parameter", "f32[3,2]", False, 3),
                    ("_.1", "b", "parameter", "f32[2]", False, 4), ("_.1", "c", "negate", "f32[3,2]", True, 5)]
    assert p.tables["hlo_computations"].select("name", "is_entry", "role").rows() == [
        ("_", True, "entry"), ("_.1", False, "fusion")]
    assert (p.summary.metrics["fusion.count"], p.summary.metrics["kernel.launches"]) == (1, 1)
    s = parse_dump(io.BytesIO(b"f32[2] negate(f32[2] x)\nf32[2] negate(f32[2] y)\n"), "snippet.txt").summary
    assert (s.status, s.errors) == (Status.PARTIAL, [
        "snippet.txt: line 2: text after the instruction (XLA's parser reads one instruction, or modules): "
        "'f32[2] negate(f32[2] y)'"])


def test_hand_written_iota_shardings_are_checked_against_their_tiles():
    """A hand-written module's iota sharding holds as many devices as its tiles (XLA aborts otherwise): every
    distinct one of the real GPU dumps (4 in each), as XLA made them, reads ok on a hand-written line, and so do
    a transposed iota, a replicated last tile and a tuple sharding; with its iota doubled each reads partial."""
    real = {s for name in ("hlo_llama31_8b_bf16_1x8.hlo", "hlo_mixtral_8x7b_bf16_1x8.hlo")
            for s in re.findall(r"sharding=(\{devices=\[[\d,]*\]<=\[\d+\]\})", text_of(name))}
    assert sorted(real) == ["{devices=[1,1,8]<=[8]}", "{devices=[1,8]<=[8]}", "{devices=[8,1,1]<=[8]}",
                            "{devices=[8,1]<=[8]}"]
    more = ["{devices=[2,2]<=[2,2]T(1,0)}", "{devices=[2,1,4]<=[8] last_tile_dim_replicate}",
            "{{replicated}, {devices=[4,2]<=[8]}}"]
    for sharding in sorted(real) + more:
        line = f"  ROOT p = f32[8,8,8] parameter(0), sharding={sharding}\n"
        s = parse_dump(io.BytesIO(f"HloModule m\nENTRY e {{\n{line}}}\n".encode()), "m.hlo").summary
        assert (s.status, s.errors) == (Status.OK, []), sharding
        bad = re.sub(r"<=\[(\d+)", lambda m: f"<=[{2 * int(m[1])}", sharding)
        s = parse_dump(io.BytesIO(f"HloModule m\nENTRY e {{\n{line.replace(sharding, bad)}}}\n".encode()), "m.hlo").summary
        tiles = re.search(r"devices=\[([\d,]*)\]", sharding)[1]
        assert s.status is Status.PARTIAL and s.errors[0].startswith(f"m.hlo: line 3: p: sharding devices=[{tiles}]<="), bad


def test_operands_of_a_module_xla_printed_are_looked_up_only_where_its_text_shows_typing():
    """The names and written shapes of operands are checked in a module with signatures only where its text shows
    what XLA's printer never writes (a computation named without "%", an array shape without layout): the real
    TPU and torch_xla dumps (operand shapes written on every line, shardings) read as printed, and as ok with
    every operand checked once their headers lose the "%"; an operand's written shape changed is found only then."""
    def read(name: str, text: str):
        return parse_dump(io.BytesIO(text.encode()), name).summary

    for name, instructions in (("mlperf_dlrm_tpuv3_32.after_optimizations.txt", 2923),
                               ("torch_xla_llama2_tp8_pp4.before_optimizations.txt", 1590)):
        text = gzip.decompress((ROOT / "data" / "corpus" / f"{name}.gz").read_bytes()).decode()
        typed = re.sub(r"^(ENTRY )?%", r"\1", text, flags=re.M)  # only computation headers start a line with "%"
        for each in (text, typed):
            s = read(name, each)
            assert (s.status, s.errors, s.metrics["hlo.instructions"]) == (Status.OK, [], instructions), name
    tampered = text.replace("add(bf16[] %x.8,", "add(bf16[2] %x.8,", 1)
    assert read(name, tampered).status is Status.OK  # printed: a look-up per operand would cost every line
    s = read(name, re.sub(r"^(ENTRY )?%", r"\1", tampered, flags=re.M))
    assert (s.status, s.errors) == (Status.PARTIAL, [f"{name}: line 6: add.10: operand x.8 is written bf16[2], its "
                                                     "shape is bf16[]"])
