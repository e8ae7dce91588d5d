"""Make Dumpscope's embedded sample bucket from real compilers, on CPU.

    .venv-samples/bin/python data/generate_samples.py --out data/sample_bucket

Needs the ``samples`` extra (jax, jaxlib, torch 2.13.0 CPU, onnx, onnxscript,
onnxruntime); imports nothing else but the standard library and numpy.

For each night in ``NIGHTS`` and each job in ``JOBS`` it starts this script again as a
worker (``--worker JOB``) with the job's dump flags in its environment (XLA and
Inductor read them once, at start-up), lets the compilers write their dumps into a
scratch directory, and asks their APIs for figures. Then it copies the text dumps
into ``<out>/<run_id>/<job>/`` under the names and folders the compilers chose, each
gzipped (``name.txt.gz``), drops the large files Dumpscope does not read (LLVM IR,
object files, protos, ``*.dot``, machine topology, compile options, Dynamo's
structured trace log), and writes ``compiler_figures.json`` beside them and
``run.json`` per night. ``--full-copy DIR`` also keeps one night's scratch
directory as the compilers left it (nothing dropped, nothing gzipped).

Deterministic: fixed seeds, fixed time stamps in the names the compilers pick,
gzip headers without time. Text inside dumps that the compilers stamp (none that
Dumpscope reads) may still differ between machines.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOBS = ("jax-jit", "jax-pmap", "torch-inductor", "torch-onnx", "torch-trace")

# torch-trace: one job shipping its TORCH_TRACE structured log (data/generate_torch_traces.py makes
# it, torch 2.13.0 on CPU, cold Inductor cache). Designed changes: on 2026-11-18 the job shares the
# runner with busy processes (plain_busy: the same program, a slower compile: a one-night spike that
# must open nothing); on 2026-11-19 a print and a data-dependent `if` go into forward (2 graph
# breaks); on 2026-11-20 the `if` is rewritten with torch.where and the print dropped (the fix).
TRACE_CASES = {"2026-11-17": "plain", "2026-11-18": "plain_busy", "2026-11-19": "graph_break",
               "2026-11-20": "graph_break_removed"}

# One entry per night. The model grows (trends); on 2026-11-19 a layer is added, the
# batch doubles, and a median-centering op goes in: Inductor has no lowering for it
# (FallbackKernel) and the ONNX exporter cannot translate it (the export fails). The
# next night replaces it with a mean (both compile again) and widens the model.
NIGHTS = (
    {"run_id": "2026-11-17", "started_at": "2026-11-17T02:00:00+00:00", "commit": "4e1d2a7",
     "tags": ["nightly", "cpu", "mlp-2x64"], "width": 64, "layers": 2, "batch": 16, "center": None},
    {"run_id": "2026-11-18", "started_at": "2026-11-18T02:00:00+00:00", "commit": "9b03c5e",
     "tags": ["nightly", "cpu", "mlp-2x96"], "width": 96, "layers": 2, "batch": 16, "center": None},
    {"run_id": "2026-11-19", "started_at": "2026-11-19T02:00:00+00:00", "commit": "c71f0d2",
     "tags": ["nightly", "cpu", "mlp-3x96", "median-centering"], "width": 96, "layers": 3, "batch": 32,
     "center": "median"},
    {"run_id": "2026-11-20", "started_at": "2026-11-20T02:00:00+00:00", "commit": "1a8e6b4",
     "tags": ["nightly", "cpu", "mlp-3x128", "mean-centering"], "width": 128, "layers": 3, "batch": 32,
     "center": "mean"},
)
SEED = 20261117
FULL_COPY_RUN = "2026-11-19"

# Files dropped from the bucket (kept in --full-copy): large, binary, or not about the program.
DROP_SUFFIXES = (".ll", ".o", ".pb", ".dot", ".pt2", ".onnx", ".svg", ".png", ".html")
DROP_NAMES = frozenset({"compile_options.textproto", "topology.textproto"})
# torch-inductor's own TORCH_COMPILE_DEBUG folder may hold Dynamo's structured trace too: the
# torch-trace job ships it (dedicated_log_torch_trace_*.log), this one does not, twice.
DROP_DIRS = frozenset({"tlparse"})
# Written into each compiler_figures.json: which figures tests/test_samples.py compares
# with the parsed dumps (defined identically on both sides), and which are for reading only.
_JAX_NOTE = {
    "compared": [
        "hlo.computations/instructions/fusions/fusions_by_kind/custom_call_targets/collectives"
        " = hlo.computations, hlo.instructions, fusion.count(.<kind>), kernel.custom_call.<target>,"
        " kernel.collective.<opcode> of hlo_after_optimizations",
        "memory_analysis.argument_size_in_bytes = memory.entry_parameter_bytes (HLO) = memory.parameter_bytes"
        " (buffer assignment)",
        "memory_analysis.output_size_in_bytes = memory.entry_output_bytes (HLO) = memory.live_out_bytes",
        "memory_analysis.alias_size_in_bytes = memory.alias_bytes; temp_size_in_bytes = memory.temp_bytes"
        " (XLA's CompiledMemoryStats::PopulateBufferStatsFromAllocations sums allocations by these flags)",
    ],
    "informational": [
        "hlo.opcodes", "cost_analysis",
        "memory_analysis.peak_memory_in_bytes (XLA:CPU's own peak estimate; not the live-range peak the"
        " dumps print)",
        "memory_analysis.generated_code_size_in_bytes (0 on XLA:CPU) and host_*",
    ],
}
NOTES = {
    "jax-jit": _JAX_NOTE,
    "jax-pmap": _JAX_NOTE,
    "torch-inductor": {
        "compared": [
            "metrics.generated_kernel_count = kernel.generated of output_code.py (on CPU the metric counts"
            " every C++ Kernel object Inductor builds, not the kernels it defines)",
            "len(defined_kernels) = kernel.generated and kernel.generated.cpp of output_code.py",
            "metrics.ir_nodes_pre_fusion and scheduler_pre_fusion = inductor.nodes(.<class>) of ir_pre_fusion",
            "scheduler_post_fusion = inductor.nodes(.<class>), fusion.count, fusion.fused_nodes,"
            " kernel.fallback(.<op>) of ir_post_fusion",
        ],
        "informational": ["the other metrics.*", "loss", "model_parameters"],
    },
    "torch-onnx": {
        "compared": [
            "model_parameters = onnx.parameters; onnx.graph_nodes and onnx.opset (onnx.load of the saved"
            " model) = onnx.graph_nodes, onnx.opset; fx_nodes = onnx.fx_nodes; no onnx.graph_nodes when the"
            " export failed",
            "onnx.ir_version, initializers, functions = onnx.ir_version, onnx.initializers, onnx.functions",
        ],
        "informational": [
            "onnx.initializer_elements (smaller than model_parameters: the exporter's optimizer merges equal"
            " initializers such as LayerNorm's ones and zeros)",
            "onnx.producer_*, op_types, opset_imports", "exception",
        ],
    },
}
NOTES["torch-trace"] = {
    "compared": [
        "torch: counters['frames']['total'] = dynamo.compiles, frames total - ok = dynamo.failures,"
        " CompilationMetrics with a recompile_reason = dynamo.recompiles, sums of guard_count,"
        " entire_frame_compile_time_s, inductor_compile_time_s = dynamo.guards, dynamo.compile_seconds,"
        " inductor.compile_seconds, counters['inductor']['fxgraph_cache_hit'/'_miss'] ="
        " inductor.cache_hits/misses, counters['graph_break'] = dynamo.graph_breaks (plus the"
        " 'Data-dependent branching' entries of counters['unimplemented'], tests/fixtures/torch_trace/ORIGIN.md)",
    ],
    "informational": ["the other counters", "inductor_metrics.generated_kernel_count (an upper bound on CPU)"],
}
VERSIONED = ("jax", "jaxlib", "torch", "onnx", "onnxscript", "onnxruntime", "numpy")


def job_env(job: str, dump_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "TORCH_", "TORCHINDUCTOR_"))}
    env.update({"JAX_PLATFORMS": "cpu", "PYTHONHASHSEED": "0", "TF_CPP_MIN_LOG_LEVEL": "1"})
    if job == "jax-jit":
        env["XLA_FLAGS"] = f"--xla_dump_to={dump_dir} --xla_dump_hlo_as_text"
    elif job == "jax-pmap":
        env["XLA_FLAGS"] = (
            f"--xla_dump_to={dump_dir} --xla_dump_hlo_as_text --xla_force_host_platform_device_count=8"
        )
    elif job == "torch-inductor":
        # With caches disabled Inductor still makes a fresh cache folder per graph
        # (named at random); keep it in the scratch directory, not in /tmp.
        env.update({"TORCH_COMPILE_DEBUG": "1", "TORCH_COMPILE_DEBUG_DIR": str(dump_dir),
                    "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
                    "TORCHINDUCTOR_CACHE_DIR": str(dump_dir.parent / f"{job}.inductor-cache")})
    return env


def job_config(night: dict, job: str) -> dict:
    """What the worker needs: model sizes, seed, and the fixed stamp for names it writes."""
    offset = {"jax-jit": 5, "jax-pmap": 20, "torch-inductor": 35, "torch-onnx": 95}[job]  # torch-trace: run_trace_job
    stamp = datetime.fromisoformat(night["started_at"]) + timedelta(seconds=offset, microseconds=123456)
    return {k: night[k] for k in ("width", "layers", "batch", "center")} | {
        "seed": SEED,
        "stamp": stamp.replace(tzinfo=None).isoformat(),
        "pid": 41000 + NIGHTS.index(night) * 7,
    }


def worker(job: str, cfg: dict, dump_dir: Path, figures: Path) -> None:
    sys.path.insert(0, str(HERE))
    if job.startswith("jax-"):
        from samples import jax_jobs

        result = (jax_jobs.run_jit if job == "jax-jit" else jax_jobs.run_pmap)(cfg, dump_dir)
    elif job == "torch-inductor":
        from samples import torch_jobs

        result = torch_jobs.run_inductor(cfg, dump_dir)
    else:
        from samples import torch_jobs

        result = torch_jobs.run_onnx(cfg, dump_dir, figures.with_suffix(".onnx"))
    figures.write_text(json.dumps(result, indent=1, sort_keys=True))


def versions() -> dict[str, str]:
    return {name: metadata.version(name) for name in VERSIONED} | {"python": sys.version.split()[0]}


def kept(rel: Path) -> bool:
    return not (
        rel.suffix in DROP_SUFFIXES or rel.name in DROP_NAMES or DROP_DIRS.intersection(rel.parts[:-1])
    )


def gzip_to(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "wb") as raw, gzip.GzipFile(src.name, "wb", 9, raw, mtime=0) as gz:
        gz.write(src.read_bytes())


def gz_names(node):
    """Every ``files`` mapping of a figures document, renamed to the gzipped copies."""
    if isinstance(node, dict):
        return {k: ({r: f"{p}.gz" for r, p in v.items()} if k == "files" else gz_names(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [gz_names(v) for v in node]
    return node


def run_job(night: dict, job: str, scratch: Path, out: Path, *, cfg: dict | None = None,
            script: Path = Path(__file__).resolve(), keep=kept, made_by: str = "data/generate_samples.py") -> float:
    dump_dir = scratch / night["run_id"] / job
    figures = scratch / night["run_id"] / f"{job}.figures.json"
    for stale in (dump_dir, dump_dir.parent / f"{job}.inductor-cache"):
        shutil.rmtree(stale, ignore_errors=True)
    dump_dir.mkdir(parents=True)
    cfg = cfg or job_config(night, job)
    t0 = time.perf_counter()
    cmd = [sys.executable, str(script), "--worker", job, "--config", json.dumps(cfg),
           "--dump-dir", str(dump_dir), "--figures", str(figures)]
    log = scratch / night["run_id"] / f"{job}.log"
    with open(log, "w") as f:
        proc = subprocess.run(cmd, env=job_env(job, dump_dir), stdout=f, stderr=subprocess.STDOUT, timeout=1200)
    if proc.returncode != 0:
        sys.exit(f"{night['run_id']}/{job}: worker failed (exit {proc.returncode}), see {log}")
    elapsed = time.perf_counter() - t0
    job_out = out / night["run_id"] / job
    shutil.rmtree(job_out, ignore_errors=True)
    dropped = 0
    for src in sorted(p for p in dump_dir.rglob("*") if p.is_file()):
        rel = src.relative_to(dump_dir)
        if keep(rel):
            gzip_to(src, job_out / f"{rel}.gz")
        else:
            dropped += src.stat().st_size
    doc = {
        "job": job,
        "run_id": night["run_id"],
        "config": cfg,
        "versions": versions(),
        "made_by": made_by,
        "notes": NOTES[job],
    } | gz_names(json.loads(figures.read_text()))
    for ref in _file_refs(doc):
        assert (job_out / ref).is_file(), f"{job_out / ref} is referenced but not kept"
    (job_out / "compiler_figures.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    shutil.copy(job_out / "compiler_figures.json", dump_dir.parent / f"{job}.compiler_figures.json")
    print(f"{night['run_id']}/{job}: {elapsed:.1f} s, dropped {dropped / 1e6:.2f} MB", flush=True)
    return elapsed


def run_trace_job(night: dict, scratch: Path, out: Path, cases_from: Path | None = None) -> float:
    """The torch-trace job of ``night``: its case (``TRACE_CASES``) by data/generate_torch_traces.py
    in this Python (torch 2.13.0), the gzipped log copied, torch's figures as compiler_figures.json.
    ``cases_from``: a directory that generate_torch_traces.py wrote before (``<case>/``): its log
    of the case is taken instead of compiling again."""
    case = TRACE_CASES[night["run_id"]]
    t0 = time.perf_counter()
    if cases_from is None:
        cases_from = scratch / night["run_id"] / "torch-trace"
        shutil.rmtree(cases_from, ignore_errors=True)
        subprocess.run([sys.executable, str(HERE / "generate_torch_traces.py"), "--out", str(cases_from), "--case", case,
                        "--caches", str(scratch / "torch-trace.inductor-cache")], check=True, timeout=3600)
    elapsed = time.perf_counter() - t0
    job_out = out / night["run_id"] / "torch-trace"
    shutil.rmtree(job_out, ignore_errors=True)
    job_out.mkdir(parents=True)
    figures = json.loads((cases_from / case / "torch_figures.json").read_text())
    (log,) = figures  # one log per case (no ranks here)
    shutil.copy(cases_from / case / log, job_out / log)
    doc = {"job": "torch-trace", "run_id": night["run_id"], "config": {"case": case}, "versions": {"torch": "2.13.0"},
           "made_by": "data/generate_torch_traces.py", "notes": NOTES["torch-trace"], "files": {"torch_trace": log},
           "torch": figures[log]}
    (job_out / "compiler_figures.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{night['run_id']}/torch-trace ({case}): {elapsed:.1f} s", flush=True)
    return elapsed


def _file_refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from (v.values() if k == "files" else _file_refs(v))
    elif isinstance(node, list):
        for v in node:
            yield from _file_refs(v)


def write_run(night: dict, out: Path) -> None:
    run = {k: night[k] for k in ("started_at", "commit", "tags")}
    (out / night["run_id"]).mkdir(parents=True, exist_ok=True)
    (out / night["run_id"] / "run.json").write_text(json.dumps(run, indent=1) + "\n")


def full_copy(night: dict, scratch: Path, dest: Path, out: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    src = scratch / night["run_id"]
    run_dest = dest / night["run_id"]
    for job in JOBS:
        if (src / job).is_dir():
            shutil.copytree(src / job, run_dest / job)
            shutil.copy(src / f"{job}.compiler_figures.json", run_dest / job / "compiler_figures.json")
    shutil.copy(out / night["run_id"] / "run.json", run_dest / "run.json")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "sample_bucket")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/dumpscope-samples"))
    ap.add_argument("--full-copy", type=Path, default=Path("/tmp/samples-full"),
                    help=f"where to keep night {FULL_COPY_RUN} as the compilers wrote it ('' to skip)")
    ap.add_argument("--nights", nargs="*", help="run ids to make (default: all)")
    ap.add_argument("--jobs", nargs="*", choices=JOBS, help="jobs to run (default: all)")
    ap.add_argument("--trace-cases-from", type=Path,
                    help="torch-trace: take each night's case from this generate_torch_traces.py --out directory")
    ap.add_argument("--worker", choices=JOBS, help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--dump-dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--figures", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, json.loads(args.config), args.dump_dir, args.figures)

    nights = [n for n in NIGHTS if not args.nights or n["run_id"] in args.nights]
    jobs = args.jobs or JOBS
    t0 = time.perf_counter()
    for night in nights:
        for job in jobs:
            if job == "torch-trace":
                run_trace_job(night, args.scratch, args.out, args.trace_cases_from)
            else:
                run_job(night, job, args.scratch, args.out)
        write_run(night, args.out)
        if str(args.full_copy) not in ("", ".") and night["run_id"] == FULL_COPY_RUN and set(jobs) == set(JOBS):
            full_copy(night, args.scratch, args.full_copy, args.out)
    print(f"done in {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
