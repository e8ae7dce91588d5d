"""The sample bucket against the compilers' own figures.

``data/generate_samples.py`` compiled each sample with the real compilers and wrote,
next to the dumps of each job, ``compiler_figures.json``: what the compilers' APIs
said (XLA's optimized ``HloModule`` and ``memory_analysis()``, Inductor's
``torch._inductor.metrics`` and scheduler nodes, ``onnx.load`` of the exported model).
Each test case parses one dump file with the project's driver and asserts one
metric equals the compiler's figure exactly. Only figures defined identically on
both sides are compared; the rest of the JSON is informational.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from transforms.parse import parse_dump
from transforms.records import DumpKind, DumpSummary, Status

ROOT = Path(__file__).resolve().parents[1]
BUCKET = ROOT / "data" / "sample_bucket"
FIGURES = sorted(BUCKET.glob("*/*/compiler_figures.json"))
JOBS = {"jax-jit", "jax-pmap", "torch-inductor", "torch-onnx", "torch-trace"}

# role of a referenced file -> (kind, stage the driver must report, or None)
ROLES = {
    "hlo_before_optimizations": (DumpKind.XLA_HLO, "before_optimizations"),
    "hlo_after_optimizations": (DumpKind.XLA_HLO, "after_optimizations"),
    "buffer_assignment": (DumpKind.XLA_BUFFER_ASSIGNMENT, None),
    "buffer_assignment_values": (DumpKind.XLA_BUFFER_ASSIGNMENT, None),
    "live_range": (DumpKind.XLA_BUFFER_ASSIGNMENT, None),
    "memory_usage_report": (DumpKind.XLA_MEMORY_USAGE_REPORT, None),
    "ir_pre_fusion": (DumpKind.INDUCTOR_IR, "pre_fusion"),
    "ir_post_fusion": (DumpKind.INDUCTOR_IR, "post_fusion"),
    "output_code": (DumpKind.INDUCTOR_OUTPUT_CODE, None),
    "report": (DumpKind.ONNX_REPORT, None),
    "torch_trace": (DumpKind.TORCH_TRACE, "trace"),
}
ZERO_OR_ABSENT = object()  # a count the compiler says is 0: the parser may omit it or say 0


def _jax_cases(job_dir: Path, doc: dict):
    for prog in doc["programs"]:
        hlo, mem, files = prog["hlo"], prog["memory_analysis"], prog["files"]
        after = job_dir / files["hlo_after_optimizations"]
        yield after, "hlo.computations", hlo["computations"]
        yield after, "hlo.instructions", hlo["instructions"]
        yield after, "fusion.count", hlo["fusions"]
        for kind, n in hlo["fusions_by_kind"].items():
            yield after, f"fusion.count.{kind}", n
        for target, n in hlo["custom_call_targets"].items():
            yield after, f"kernel.custom_call.{target}", n
        for opcode, n in hlo["collectives"].items():
            yield after, f"kernel.collective.{opcode}", n or ZERO_OR_ABSENT
        yield after, "memory.entry_parameter_bytes", mem["argument_size_in_bytes"]
        yield after, "memory.entry_output_bytes", mem["output_size_in_bytes"]
        # XLA's CompiledMemoryStats::PopulateBufferStatsFromAllocations sums the
        # allocations by the same flags the buffer assignment prints.
        ba = job_dir / files["buffer_assignment"]
        yield ba, "memory.parameter_bytes", mem["argument_size_in_bytes"]
        yield ba, "memory.live_out_bytes", mem["output_size_in_bytes"]
        yield ba, "memory.alias_bytes", mem["alias_size_in_bytes"]
        yield ba, "memory.temp_bytes", mem["temp_size_in_bytes"]


def _inductor_cases(job_dir: Path, doc: dict):
    for graph in doc["graphs"]:
        files, metrics = graph["files"], graph["metrics"]
        code = job_dir / files["output_code"]
        # generated_kernel_count equals the kernels written only on the Triton backend
        # (tests/test_inductor_code.py pairs them on a Triton graph); the C++ backend
        # bumps it once per kernel proxy it builds (e.g. 26 for 4 written kernels).
        if not any(k.startswith("cpp_") for k in graph["defined_kernels"]):
            yield code, "kernel.generated", metrics["generated_kernel_count"]
        yield code, "kernel.generated#defined", len(graph["defined_kernels"])
        yield code, "kernel.generated.cpp", sum(k.startswith("cpp_fused_") for k in graph["defined_kernels"])
        pre = job_dir / files["ir_pre_fusion"]
        yield pre, "inductor.nodes", metrics["ir_nodes_pre_fusion"]
        yield pre, "inductor.nodes#scheduler", graph["scheduler_pre_fusion"]["nodes"]
        for cls, n in graph["scheduler_pre_fusion"]["nodes_by_class"].items():
            yield pre, f"inductor.nodes.{cls}", n
        post = job_dir / files["ir_post_fusion"]
        sched = graph["scheduler_post_fusion"]
        yield post, "inductor.nodes", sched["nodes"]
        for cls, n in sched["nodes_by_class"].items():
            yield post, f"inductor.nodes.{cls}", n
        yield post, "fusion.count", sched["fused_groups"] or ZERO_OR_ABSENT
        yield post, "fusion.fused_nodes", sched["fused_members"] or ZERO_OR_ABSENT
        yield post, "kernel.fallback", sum(sched["fallback_kernels"].values()) or ZERO_OR_ABSENT
        for op, n in sched["fallback_kernels"].items():
            yield post, f"kernel.fallback.{op}", n


def _onnx_cases(job_dir: Path, doc: dict):
    report = job_dir / doc["files"]["report"]
    yield report, "onnx.parameters", doc["model_parameters"]
    if doc["outcome"] == "exported":
        yield report, "onnx.graph_nodes", doc["onnx"]["graph_nodes"]
        yield report, "onnx.opset", doc["onnx"]["opset"]
        yield report, "onnx.fx_nodes", doc["fx_nodes"]
        # The report prints the same model the exporter saves.
        yield report, "onnx.ir_version", doc["onnx"]["ir_version"]
        yield report, "onnx.initializers", doc["onnx"]["initializers"]
        yield report, "onnx.functions", doc["onnx"]["functions"] or ZERO_OR_ABSENT
    else:  # the export failed before an ONNX model existed: the report cannot tell
        yield report, "onnx.graph_nodes", None


def _torch_trace_cases(job_dir: Path, doc: dict):
    from tests.test_torch_trace import torch_expected

    log = job_dir / doc["files"]["torch_trace"]
    for metric, expected in torch_expected(doc["torch"]).items():
        yield log, metric, expected


def _cases():
    for fig in FIGURES:
        doc = json.loads(fig.read_text())
        make = {"jax-jit": _jax_cases, "jax-pmap": _jax_cases, "torch-inductor": _inductor_cases,
                "torch-onnx": _onnx_cases, "torch-trace": _torch_trace_cases}[doc["job"]]
        for path, metric, expected in make(fig.parent, doc):
            rel = path.relative_to(BUCKET)
            case_id = f"{rel.parts[0]}/{rel.parts[1]}/{_short(rel)}:{metric}"
            yield pytest.param(path, metric, expected, id=case_id)


def _short(rel: Path) -> str:
    """A readable id: the program part of the name (module or graph folder and file)."""
    return "/".join(rel.parts[-2:]) if rel.parent.name.startswith("model_") else rel.name.removesuffix(".gz")


def _file_refs():
    for fig in FIGURES:
        doc = json.loads(fig.read_text())
        units = doc.get("programs") or doc.get("graphs") or [doc]
        for unit in units:
            program = unit.get("module") or unit.get("graph")
            for role, ref in unit["files"].items():
                path = fig.parent / ref
                yield pytest.param(path, role, program, id=str(path.relative_to(BUCKET)))


@cache
def parsed(path: Path) -> DumpSummary:
    with open(path, "rb") as f:
        return parse_dump(f, str(path.relative_to(BUCKET))).summary


def test_bucket_layout():
    runs = sorted(p for p in BUCKET.iterdir() if p.is_dir())
    assert len(runs) >= 4
    for run in runs:
        meta = json.loads((run / "run.json").read_text())
        assert set(meta) == {"started_at", "commit", "tags"}
        assert meta["started_at"].startswith(run.name)
        assert {p.name for p in run.iterdir() if p.is_dir()} == JOBS
        for job in JOBS:
            assert (run / job / "compiler_figures.json").is_file()
    for path in BUCKET.rglob("*"):
        if path.is_file():
            assert path.suffix == ".gz" or path.name in ("run.json", "compiler_figures.json"), path


@pytest.mark.parametrize(("path", "role", "program"), list(_file_refs()))
def test_dump_parses(path: Path, role: str, program: str | None):
    s = parsed(path)
    kind, stage = ROLES[role]
    assert (s.kind, s.status) == (kind, Status.OK), s.errors
    if stage:
        assert s.stage == stage
    if program:
        assert s.program == program


@pytest.mark.parametrize(("path", "metric", "expected"), list(_cases()))
def test_compiler_figure(path: Path, metric: str, expected):
    metrics = parsed(path).metrics
    name = metric.split("#")[0]  # "#..." tells apart two compiler figures for one metric
    if expected is None:
        assert name not in metrics
    elif expected is ZERO_OR_ABSENT:
        assert metrics.get(name, 0) == 0
    else:
        assert metrics.get(name) == expected


def _family_cases():
    """Per dump file and metric family, the exact set of names the compiler's figures give."""
    for fig in FIGURES:
        doc = json.loads(fig.read_text())
        for prog in doc.get("programs", []):
            after = fig.parent / prog["files"]["hlo_after_optimizations"]
            yield after, "fusion.count.", {f"fusion.count.{k}" for k in prog["hlo"]["fusions_by_kind"]}
            yield after, "kernel.custom_call.", {f"kernel.custom_call.{t}" for t in prog["hlo"]["custom_call_targets"]}
        for graph in doc.get("graphs", []):
            for stage in ("pre_fusion", "post_fusion"):
                path, sched = fig.parent / graph["files"][f"ir_{stage}"], graph[f"scheduler_{stage}"]
                yield path, "inductor.nodes.", {f"inductor.nodes.{c}" for c in sched["nodes_by_class"]}
                yield path, "kernel.fallback.", {f"kernel.fallback.{op}" for op in sched["fallback_kernels"]}


@pytest.mark.parametrize(
    ("path", "family", "names"),
    [pytest.param(*c, id=f"{c[0].relative_to(BUCKET)}:{c[1]}*") for c in _family_cases()],
)
def test_metric_family_names(path: Path, family: str, names: set[str]):
    """By-kind counts: the parser finds exactly the kinds, targets and classes the compiler has."""
    assert {k for k in parsed(path).metrics if k.startswith(family)} == names
