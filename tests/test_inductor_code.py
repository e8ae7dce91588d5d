"""Tests for transforms.parsers.inductor_code on real output_code.py files made with torch 2.13.0
(C++ and Triton backends, tests/fixtures/inductor_output_code/ORIGIN.md)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import collect
from transforms.parsers import inductor_code as P
from transforms.parsers import inductor_ir
from transforms.records import DumpKind, DumpSummary, ParseError

FIX = Path(__file__).parent / "fixtures"
CODE = FIX / "inductor_output_code"
IR = FIX / "inductor_ir"
API = json.loads((IR / "api_metrics.json").read_text())


def run(lines) -> tuple[dict[str, pl.DataFrame], DumpSummary]:
    return collect(P, lines, all_tables=True)


def run_text(text: str):
    return run(text.splitlines(keepends=True))


TRITON = CODE / "triton_mixed/model__0_inference_0.0/output_code.py"
TRITON_TEXT = TRITON.read_text()
TRITON_TABLES, TRITON_SUMMARY = run_text(TRITON_TEXT)
CPP = CODE / "convnet/model__0_backward_3.1/output_code.py"
CPP_TEXT = CPP.read_text()
CPP_TABLES, CPP_SUMMARY = run_text(CPP_TEXT)

FIGURES = {
    "convnet/model__0_backward_3.1": {"kernel.extern_calls": 2, "kernel.extern_calls.mm": 2, "kernel.fallback_calls": 4, "kernel.fallback_calls.aten.convolution_backward.default": 2, "kernel.fallback_calls.aten.scatter_reduce_.two": 2, "kernel.generated": 5, "kernel.generated.cpp": 5},
    "convnet/model__0_forward_1.0": {"kernel.extern_calls": 3, "kernel.extern_calls.addmm": 1, "kernel.extern_calls.convolution": 2, "kernel.generated": 4, "kernel.generated.cpp": 4},
    "fallback/model__0_backward_3.1": {"kernel.extern_calls": 1, "kernel.extern_calls.mm": 1, "kernel.fallback_calls": 1, "kernel.fallback_calls.aten.scatter_reduce_.two": 1, "kernel.generated": 3, "kernel.generated.cpp": 3},
    "fallback/model__0_forward_1.0": {"kernel.extern_calls": 1, "kernel.extern_calls.addmm": 1, "kernel.fallback_calls": 1, "kernel.fallback_calls.aten.cummax.default": 1, "kernel.generated": 1, "kernel.generated.cpp": 1},
    "mlp/model__0_backward_3.1": {"kernel.extern_calls": 4, "kernel.extern_calls.addmm": 1, "kernel.extern_calls.mm": 3, "kernel.generated": 3, "kernel.generated.cpp": 3},
    "mlp/model__0_forward_1.0": {"kernel.extern_calls": 2, "kernel.extern_calls.addmm": 2, "kernel.generated": 2, "kernel.generated.cpp": 2},
    "mlp_dynamic/model__0_backward_2.1": {"kernel.extern_calls": 4, "kernel.extern_calls.addmm": 1, "kernel.extern_calls.mm": 3, "kernel.generated": 3, "kernel.generated.cpp": 3},
    "mlp_dynamic/model__0_forward_1.0": {"kernel.extern_calls": 2, "kernel.extern_calls.addmm": 2, "kernel.generated": 2, "kernel.generated.cpp": 2},
    "norms/model__0_backward_3.1": {"kernel.extern_calls": 6, "kernel.extern_calls.bmm": 4, "kernel.extern_calls.mm": 2, "kernel.generated": 4, "kernel.generated.cpp": 4},
    "norms/model__0_forward_1.0": {"kernel.extern_calls": 3, "kernel.extern_calls.addmm": 1, "kernel.extern_calls.bmm": 2, "kernel.generated": 3, "kernel.generated.cpp": 3},
    "triton_mixed/model__0_inference_0.0": {"kernel.extern_calls": 1, "kernel.extern_calls.mm": 1, "kernel.generated": 8, "kernel.generated.foreach": 1, "kernel.generated.persistent_reduction": 3, "kernel.generated.pointwise": 2, "kernel.generated.reduction": 2},
}


@pytest.mark.parametrize("graph", sorted(FIGURES))
def test_figures(graph):
    path = CODE / graph / "output_code.py"
    with path.open() as f:
        tables, s = run(f)
    assert s.kind == DumpKind.INDUCTOR_OUTPUT_CODE and s.stage == "output_code" and s.program is None
    assert s.metrics == FIGURES[graph] and s.errors == [] and not s.truncated
    # the same kernels and calls, counted independently: definitions and call sites outside strings
    text = path.read_text()
    assert tables["inductor_kernels"].height == text.count(" = async_compile.")
    assert s.metrics["kernel.extern_calls"] == sum(
        line.count("extern_kernels.") for line in text.splitlines() if "extern_kernels." in line
        and not line.lstrip().startswith(("#", "from ")))
    # against the scheduler IR of the same graph: extern nodes = extern calls + fallback calls
    with (IR / graph / "ir_post_fusion.txt").open() as f:
        ir = list(inductor_ir.parse(f))[-1].metrics
    assert ir["kernel.extern"] == s.metrics["kernel.extern_calls"] + s.metrics.get("kernel.fallback_calls", 0)
    assert ir.get("kernel.fallback", 0) == s.metrics.get("kernel.fallback_calls", 0)
    # C++ groups consecutive loop nests into one function; Triton makes one kernel per node
    if graph.startswith("triton"):
        assert s.metrics["kernel.generated"] == ir["kernel.generated"]
    else:
        assert s.metrics["kernel.generated"] <= ir["kernel.generated"]


def test_triton_matches_inductor_metrics_api():
    assert TRITON_SUMMARY.metrics["kernel.generated"] == API["triton_mixed"]["model__0_inference_0.0"]["generated_kernel_count"] == 8


def test_triton_rows():
    k = TRITON_TABLES["inductor_kernels"]
    assert k.select("name", "category", "heuristic").rows() == [
        ("triton_per_fused_cummax_0", "persistent_reduction", "persistent_reduction"),
        ("triton_for_fused_1", "foreach", "foreach"),
        ("triton_poi_fused_add_mul_relu_sigmoid_2", "pointwise", "pointwise"),
        ("triton_poi_fused_mul_3", "pointwise", "pointwise"),
        ("triton_per_fused__softmax_4", "persistent_reduction", "persistent_reduction"),
        ("triton_red_fused_sum_5", "reduction", "reduction"),
        ("triton_per_fused_sum_6", "persistent_reduction", "persistent_reduction"),
        ("triton_red_fused_amax_7", "reduction", "reduction"),
    ]
    assert set(k["backend"]) == {"triton"}
    first = k.row(0, named=True)
    assert (first["aten_ops"], first["source_lines"], first["lineno"]) == (["aten.cummax"], 58, 48)
    assert k.row(1, named=True)["aten_ops"] == []
    assert TRITON_TABLES["inductor_extern_calls"].rows() == [("extern_kernels.mm", "extern_kernels", 532)]


def test_cpp_rows():
    k = CPP_TABLES["inductor_kernels"]
    assert k["name"].to_list()[:2] == ["cpp_fused_expand_mm_sum_t_0", "cpp_fused_max_pool2d_with_indices_max_pool2d_with_indices_backward_view_1"]
    assert set(k["backend"]) == {"cpp"} and set(k["category"]) == {"cpp"} and k["heuristic"].null_count() == 5
    calls = CPP_TABLES["inductor_extern_calls"]
    assert calls.rows() == [
        ("extern_kernels.mm", "extern_kernels", 566), ("aten.scatter_reduce_.two", "aten_fallback", 575),
        ("extern_kernels.mm", "extern_kernels", 582), ("aten.convolution_backward.default", "aten_fallback", 595),
        ("aten.scatter_reduce_.two", "aten_fallback", 618), ("aten.convolution_backward.default", "aten_fallback", 644)]


# SYNTHETIC, not a real dump: the shape of a Triton template kernel and of a user-defined
# Triton kernel (no GPU here to make real ones), written after the real definitions in
# triton_mixed/.../output_code.py; the names and bodies are made up.
SYNTHETIC = '''# AOT ID: ['0_inference']
from torch._inductor.select_algorithm import extern_kernels
async_compile = AsyncCompile()
triton_tem_fused_mm_0 = async_compile.triton('triton_tem_fused_mm_0', \'\'\'
@triton_heuristics.template(
    num_stages=2,
)
@triton.jit
def triton_tem_fused_mm_0(arg_A, arg_B, out_ptr0):
    pass
\'\'\', device_str='cuda')
my_add_kernel_0 = async_compile.triton('my_add_kernel', \'\'\'
@triton_heuristics.user_autotune(
    configs=[],
)
@triton.jit
def my_add_kernel(x_ptr, y_ptr, n):
    pass
\'\'\', device_str='cuda')
async_compile.wait(globals())
def call(args):
    # extern_kernels.mm(comment, not a call)
    buf0 = extern_kernels.bmm(a, b, out=c); extern_kernels.mm(d, e, out=f)
    buf1 = torch.ops.aten.nonzero.default(buf0)
if __name__ == "__main__":
    pass
'''


def test_synthetic_template_and_user_kernel():
    tables, s = run_text(SYNTHETIC)
    assert tables["inductor_kernels"].select("name", "category", "heuristic").rows() == [
        ("triton_tem_fused_mm_0", "template", "template"), ("my_add_kernel_0", "other", "user_autotune")]
    assert s.metrics == {"kernel.generated": 2, "kernel.generated.template": 1, "kernel.generated.other": 1,
                         "kernel.extern_calls": 2, "kernel.extern_calls.bmm": 1, "kernel.extern_calls.mm": 1,
                         "kernel.fallback_calls": 1, "kernel.fallback_calls.aten.nonzero.default": 1}
    assert not s.truncated and s.errors == []


def test_sniff_and_stage():
    assert P.sniff("output_code.py", "")
    assert P.sniff("c2xyz.py", TRITON_TEXT[:65536]) and P.sniff("x.py", CPP_TEXT[:65536])
    for seed in sorted((FIX / "seeds").glob("*.txt")):
        assert not P.sniff(seed.name, seed.read_text(errors="replace")[:65536]), seed.name
    for other in ("ir_post_fusion.txt", "ir_pre_fusion.txt"):
        assert not P.sniff(other, (IR / "mlp/model__0_forward_1.0" / other).read_text())
    assert not P.sniff("fx_graph_runnable.py", "import torch\nimport torch._inductor.config\n")
    assert P.stage_from_name("output_code.py") == "output_code" and P.stage_from_name("x.py") is None


def test_lines_without_newlines_parse_the_same():
    tables, s = run(TRITON_TEXT.splitlines())
    assert s.metrics == TRITON_SUMMARY.metrics and not s.truncated
    for t in P.TABLES:
        assert tables[t].equals(TRITON_TABLES[t])


def test_bad_input():
    with pytest.raises(ParseError):
        list(P.parse([]))
    with pytest.raises(ParseError):
        list(P.parse([f"x = {i}\n" for i in range(300)]))
    with pytest.raises(ParseError):
        list(P.parse((IR / "mlp/model__0_forward_1.0/ir_post_fusion.txt").open()))
    huge = "# " + "z" * 50_000_000 + "\n"
    tables, s = run([huge] + CPP_TEXT.splitlines(keepends=True) + ["extern_kernels." * 1000 + "\n"])
    assert s.metrics == CPP_SUMMARY.metrics


def _check_cut(text: str, full: dict[str, pl.DataFrame], cut: int) -> None:
    try:
        tables, s = run_text(text[:cut])
    except ParseError:
        return
    for t in P.TABLES:
        got = tables[t]
        assert got.equals(full[t].head(got.height)), t
    main = text.index('if __name__ == "__main__":\n') + len('if __name__ == "__main__":\n')
    if cut < main:
        assert s.truncated


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_truncation_triton(data):
    _check_cut(TRITON_TEXT, TRITON_TABLES, data.draw(st.integers(1, len(TRITON_TEXT))))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_truncation_cpp(data):
    _check_cut(CPP_TEXT, CPP_TABLES, data.draw(st.integers(1, len(CPP_TEXT))))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_truncation_at_line_ends(data):
    lines = TRITON_TEXT.splitlines(keepends=True)
    _check_cut(TRITON_TEXT, TRITON_TABLES, sum(map(len, lines[: data.draw(st.integers(1, len(lines)))])))
