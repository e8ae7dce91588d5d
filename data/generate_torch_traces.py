"""Make real TORCH_TRACE structured logs with torch.compile on CPU, and torch's own figures beside them.

    python3 -m venv .venv-trace && .venv-trace/bin/pip install torch==2.13.0
    .venv-trace/bin/python data/generate_torch_traces.py --out /tmp/torch_traces [--case plain ...]

Each case runs in a fresh process (``--job CASE``) with ``TORCH_TRACE=<out>/<case>`` and its own
Inductor cache directory, so each log is what one job of a nightly would ship. The worker writes
the model's source to ``--src`` (one path for every case, so the compiled function is the same
program, ``forward`` at ``<src>/dumpscope_model.py:<line>``, whatever the case changes inside it),
runs the case, and records torch's own figures: ``torch._dynamo.utils.counters`` as a dict and
``get_compilation_metrics()`` (the ``CompilationMetrics`` objects, without their four config
strings, which are large and not figures) and ``torch._inductor.metrics.generated_kernel_count``
(kernels Inductor generated in the process; 0 when every graph came from a cache). The parent then writes ``<out>/<case>/torch_figures.json``
(``{log file name: {"counters": ..., "compilation_metrics": [...]}}``) and gzips each log
(``--gzip``: ``name.log.gz``, no time stamp in the gzip header).

Cases (``CASES``):

- ``plain``: an MLP (Linear-ReLU-Linear), forward and backward, one input shape, cold cache.
- ``plain_warm``: the same job again on ``plain``'s Inductor cache: FX graph cache hits.
- ``plain_busy``: the ``plain`` job, cold cache, while ``BUSY_SIBLINGS`` sibling processes keep every
  core busy (a nightly runner shared with another job): the same program and figures, a slower
  compile (the sample bucket's one-night compile-time spike).
- ``graph_break``: the MLP with a ``print`` and a data-dependent ``if`` on a tensor in ``forward``
  (two graph breaks: resume functions ``torch_dynamo_resume_in_forward_at_<line>``).
- ``graph_break_removed``: the same model with the break rewritten without Python control flow
  (``torch.where``): one graph again.
- ``recompile``: ``dynamic=False``, inference on two batch sizes: a recompile (compile id 0/1).
- ``compile_failure``: two compiled functions in one process: one with Inductor, one with a backend
  that raises (``BackendCompilerFailed``, caught): a failed compile next to a good one.
- ``ranked``: two ranks (gloo, CPU, ``torch.distributed`` initialised), each compiling the MLP:
  ``dedicated_log_torch_trace_rank_<n>_*.log`` per rank.
- ``two_programs``: two compiled functions with Inductor in one process, ``scale_shift`` then the
  MLP's ``forward`` (inference): a log with two programs, a series each.
- ``two_programs_changed``: the same job with ``forward``'s body rewritten as ``graph_break_removed``'s
  (``torch.where``) and the compiled ``forward`` called again on batch 6 (``dynamic=False``): ``forward``'s
  first compile changes (its graph, code, a guard on ``torch.where``) and it recompiles (compile 1/1);
  ``scale_shift``'s compile does not change.
- ``dynamic``: ``dynamic=True``, inference on batch 4, ``forward`` guarding on the batch size
  (``if x.shape[0] > 2``) then viewing ``h`` as ``(4, 32)``: ``guard_added_fast`` records and a
  ``symbolic_shape_specialization`` (the batch size fixed to 4).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

CASES = ("plain", "plain_warm", "plain_busy", "graph_break", "graph_break_removed", "recompile", "compile_failure",
         "ranked", "dynamic", "two_programs", "two_programs_changed")
SEED = 20261127
DROP_FIELDS = ("dynamo_config", "inductor_config", "compiler_config", "functorch_config")

# The model module. `forward` starts on the same line in every case (the program's identity);
# BODY is what a case puts inside it.
MODEL_SOURCE = '''\
"""Model compiled by data/generate_torch_traces.py (case {case})."""
import torch


def always_fails(gm, example_inputs):
    raise RuntimeError("dumpscope: this backend always fails")


def scale_shift(x):
    return torch.sin(x) * 2 + 1


class Net(torch.nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.l1 = torch.nn.Linear(16, width)
        self.l2 = torch.nn.Linear(width, 8)

    def forward(self, x):
        h = torch.relu(self.l1(x))
{body}
        return self.l2(h)
'''
BODIES = {
    "plain": "        h = h * 2",
    "graph_break": (
        '        print("dumpscope: a print in forward")  # graph break: Dynamo cannot trace print\n'
        "        if h.sum() > 0:  # graph break: data-dependent branching on a tensor\n"
        "            h = h * 2"
    ),
    "graph_break_removed": "        h = torch.where(h.sum() > 0, h * 2, h)",
    "two_programs_changed": "        h = torch.where(h.sum() > 0, h * 2, h)",
    "dynamic": (
        "        if x.shape[0] > 2:  # a guard on the symbolic batch size\n"
        "            h = h * 2\n"
        "        h = h.view(4, 32)  # a fixed size: the batch size specialises to 4"
    ),
}


def _body(case: str) -> str:
    return BODIES.get(case, BODIES["plain"])


# --- worker: one case in this process (TORCH_TRACE is read at import time) ---


def _run_case(case: str, src: Path, rank: int | None) -> None:
    import torch

    sys.path.insert(0, str(src))
    import dumpscope_model as mm  # written by the parent for this case

    torch.manual_seed(SEED)
    if case == "ranked":
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    model = mm.Net()
    if case in ("plain", "plain_warm", "plain_busy", "graph_break", "graph_break_removed", "ranked"):
        compiled = torch.compile(model, dynamic=False)
        y = compiled(torch.randn(4, 16))
        y.sum().backward()
    elif case == "recompile":
        compiled = torch.compile(model, dynamic=False)
        with torch.no_grad():
            compiled(torch.randn(4, 16))
            compiled(torch.randn(6, 16))  # a new static shape: recompile
    elif case == "dynamic":
        compiled = torch.compile(model, dynamic=True)
        with torch.no_grad():
            compiled(torch.randn(4, 16))  # symbolic batch size, guarded (> 2) then specialised (view(4, 32))
    elif case == "compile_failure":
        with torch.no_grad():
            torch.compile(mm.scale_shift)(torch.randn(8))
            try:
                torch.compile(mm.Net().forward, backend=mm.always_fails)(torch.randn(4, 16))
            except Exception as exc:  # BackendCompilerFailed: what the case is for
                print(f"dumpscope: compile failed as planned: {type(exc).__name__}")
    elif case in ("two_programs", "two_programs_changed"):
        with torch.no_grad():
            torch.compile(mm.scale_shift)(torch.randn(8))
            compiled = torch.compile(model, dynamic=False)
            compiled(torch.randn(4, 16))
            if case == "two_programs_changed":
                compiled(torch.randn(6, 16))  # a new static shape: forward recompiles
    else:
        raise SystemExit(f"unknown case {case}")
    if case == "ranked":
        torch.distributed.destroy_process_group()


def _figures() -> dict:
    from torch._dynamo.utils import counters, get_compilation_metrics
    from torch._inductor import metrics as inductor_metrics

    def jsonable(v):
        if isinstance(v, (set, frozenset)):
            return sorted(str(x) for x in v)
        return v

    metrics = []
    for m in get_compilation_metrics():
        d = {k: jsonable(v) for k, v in dataclasses.asdict(m).items() if k not in DROP_FIELDS}
        metrics.append(d)
    return {"counters": {k: dict(v) for k, v in counters.items()}, "compilation_metrics": metrics,
            "inductor_metrics": {"generated_kernel_count": inductor_metrics.generated_kernel_count}}


def worker(case: str, src: Path, figures_out: Path, rank: int | None) -> None:
    from torch._dynamo.utils import set_compilation_metrics_limit

    set_compilation_metrics_limit(10_000)
    _run_case(case, src, rank)
    figures_out.write_text(json.dumps(_figures(), indent=1, sort_keys=True, default=str) + "\n")


# --- parent: one fresh process per job ---


BUSY_SIBLINGS = 2 * (os.cpu_count() or 1)  # spinning processes beside plain_busy's worker


def _busy_siblings(n: int) -> list[subprocess.Popen]:
    """Processes that keep the CPU busy (pure Python loops) until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(case: str, out: Path, src: Path, caches: Path, gz: bool) -> None:
    trace_dir = out / case
    shutil.rmtree(trace_dir, ignore_errors=True)
    trace_dir.mkdir(parents=True)
    src.mkdir(parents=True, exist_ok=True)
    (src / "dumpscope_model.py").write_text(MODEL_SOURCE.format(case=case, body=_body(case)))
    cache = caches / ("plain" if case in ("plain", "plain_warm") else case)
    if case != "plain_warm":
        shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "TORCH_TRACE": str(trace_dir), "TORCHINDUCTOR_CACHE_DIR": str(cache),
           "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    ranks = [0, 1] if case == "ranked" else [None]
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": str(len(ranks))})
    scratch = out / f".{case}.figures"
    scratch.mkdir(exist_ok=True)
    siblings = _busy_siblings(BUSY_SIBLINGS) if case == "plain_busy" else []
    procs = []
    for rank in ranks:
        cmd = [sys.executable, __file__, "--job", case, "--src", str(src),
               "--figures", str(scratch / f"{rank}.json")] + ([] if rank is None else ["--rank", str(rank)])
        procs.append(subprocess.Popen(cmd, env={**env, "RANK": str(rank or 0)}))
    failed = any([p.wait() for p in procs])
    for p in siblings:
        p.kill()
        p.wait()
    if failed:
        raise SystemExit(f"case {case}: a worker failed")
    figures = {}
    for rank in ranks:
        logs = sorted(trace_dir.glob("dedicated_log_torch_trace_*.log"))
        if rank is not None:
            logs = [p for p in logs if p.name.startswith(f"dedicated_log_torch_trace_rank_{rank}_")]
        if len(logs) != 1:
            raise SystemExit(f"case {case}: expected one log for rank {rank}, found {[p.name for p in logs]}")
        figures[logs[0].name + (".gz" if gz else "")] = json.loads((scratch / f"{rank}.json").read_text())
    shutil.rmtree(scratch)
    (trace_dir / "torch_figures.json").write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    if gz:
        for log in trace_dir.glob("*.log"):
            with open(log, "rb") as f, open(f"{log}.gz", "wb") as raw:
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as g:
                    shutil.copyfileobj(f, g)
            log.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="directory for <case>/ folders")
    ap.add_argument("--case", action="append", choices=CASES, help="cases to run (default: all)")
    ap.add_argument("--src", type=Path, default=Path("/tmp/dumpscope-torch-trace/src"),
                    help="where the model module is written (its path is in the logs)")
    ap.add_argument("--caches", type=Path, default=Path("/tmp/dumpscope-torch-trace/inductor-cache"))
    ap.add_argument("--no-gzip", dest="gzip", action="store_false")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--figures", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        worker(args.job, args.src, args.figures, args.rank)
        return
    if args.out is None:
        ap.error("--out is required")
    cases = [c for c in CASES if c in (args.case or CASES)]
    if "plain_warm" in cases and "plain" not in cases:
        ap.error("plain_warm reads the cache plain fills: run them together")
    for case in cases:
        t0 = time.perf_counter()
        run(case, args.out, args.src, args.caches, args.gzip)
        print(f"{case}: {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
