"""Torch jobs: ``torch.compile`` (Inductor, CPU) forward+backward, and the dynamo ONNX export.

``run_inductor`` runs in a process started with ``TORCH_COMPILE_DEBUG=1``,
``TORCH_COMPILE_DEBUG_DIR`` and ``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``. Inductor
compiles the forward graph on the first call and the backward graph lazily, on
``backward()``: each phase compiles one graph (three with ``graph_break``: a ``print`` in
``forward`` splits it into ``model__0`` and ``model__1``, and the loss resumes in ``model__2``), so ``torch._inductor.metrics``
is reset before each phase and read after it. The scheduler nodes Inductor prints to
``ir_pre_fusion.txt`` / ``ir_post_fusion.txt`` are counted from the scheduler's own
node objects, by wrapping the two functions that print them.

``run_onnx`` calls ``torch.onnx.export(..., dynamo=True, report=True, verify=True, artifacts_dir=DIR)``
(DIR may hold earlier exports' reports) and reads the saved model back with ``onnx.load``.

Time stamps and process ids in the names the compilers choose (Inductor's
``run_<time>-pid_<pid>`` folder, ONNX's ``onnx_export_<time>_<outcome>.md``) are
replaced by the night's fixed ones, so that reruns write the same names.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

D_IN, D_OUT = 32, 10
_INDUCTOR_RUN = re.compile(r"^run_\d{4}(?:_\d\d){5}_\d{6}-pid_\d+$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ONNX_STAMP = re.compile(r"onnx_export_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d-\d{6}")


def _net(cfg: dict):
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, width: int):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.fc = nn.Linear(width, width)

        def forward(self, h):
            return h + torch.nn.functional.gelu(self.fc(self.norm(h)))

    class Net(nn.Module):
        def __init__(self, width: int, layers: int, center: str | None, graph_break: bool = False):
            super().__init__()
            self.inp = nn.Linear(D_IN, width)
            self.blocks = nn.ModuleList(Block(width) for _ in range(layers))
            self.head = nn.Linear(width, D_OUT)
            self.center = center
            self.graph_break = graph_break

        def forward(self, x):
            h = self.inp(x)
            if self.graph_break:  # Dynamo cannot trace print: two graphs, model__0 and model__1
                print("dumpscope: input layer done")
            for block in self.blocks:
                h = block(h)
            if self.center == "median":  # no Inductor lowering, no ONNX translation
                h = h - h.median(dim=-1, keepdim=True).values
            elif self.center == "mean":
                h = h - h.mean(dim=-1, keepdim=True)
            return torch.log_softmax(self.head(h), dim=-1)

    torch.manual_seed(cfg["seed"])
    return Net(cfg["width"], cfg["layers"], cfg.get("center"), cfg.get("graph_break", False))


def _inputs(cfg: dict):
    import torch

    gen = torch.Generator().manual_seed(cfg["seed"] + 1)
    x = torch.randn(cfg["batch"], D_IN, generator=gen)
    y = torch.randint(0, D_OUT, (cfg["batch"],), generator=gen)
    return x, y


def _stamp(cfg: dict) -> datetime:
    return datetime.fromisoformat(cfg["stamp"])


def _scheduler_nodes(nodes) -> dict:
    from torch._inductor.scheduler import ExternKernelSchedulerNode, FusedSchedulerNode

    by_class: dict[str, int] = {}
    fallbacks: dict[str, int] = {}
    fused_members = 0
    for n in nodes:
        cls = type(n).__name__
        by_class[cls] = by_class.get(cls, 0) + 1
        if isinstance(n, FusedSchedulerNode):
            fused_members += len(n.snodes)
        if isinstance(n, ExternKernelSchedulerNode) and type(n.node).__name__ == "FallbackKernel":
            op = str(getattr(n.node, "op_overload", None) or n.node.python_kernel_name)
            fallbacks[op] = fallbacks.get(op, 0) + 1
    return {
        "nodes": len(nodes),
        "nodes_by_class": dict(sorted(by_class.items())),
        "fused_groups": sum(isinstance(n, FusedSchedulerNode) for n in nodes),
        "fused_members": fused_members,
        "fallback_kernels": dict(sorted(fallbacks.items())),
    }


def _metrics_snapshot() -> dict:
    from torch._inductor import metrics

    out = {}
    for name in sorted(vars(metrics)):
        value = getattr(metrics, name)
        if name.startswith("_") or name.isupper() or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[name] = value
        elif name == "cpp_outer_loop_fused_inner_counts":
            out[name] = [[c.inner_kernel_number, c.local_buffer_number] for c in value]
    return out


def run_inductor(cfg: dict, dump_dir: Path) -> dict:
    import torch
    import torch._inductor.debug as inductor_debug
    from torch._inductor import metrics
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.virtualized import V

    seen: list[dict] = []  # one entry per compiled graph, in compile order
    phase = ["forward"]

    def hook(stage, original):
        def wrapped(nodes):
            if stage == "pre_fusion":
                seen.append({"debug_dir": str(V.debug._path), "phase": phase[0]})
            seen[-1][stage] = _scheduler_nodes(nodes)
            return original(nodes)

        return wrapped

    inductor_debug.log_ir_pre_fusion = hook("pre_fusion", inductor_debug.log_ir_pre_fusion)
    inductor_debug.log_ir_post_fusion = hook("post_fusion", inductor_debug.log_ir_post_fusion)
    define_kernel = PythonWrapperCodegen.define_kernel

    def defining(self, kernel_name, *args, **kwargs):  # each kernel definition output_code.py gets
        seen[-1].setdefault("defined", []).append(kernel_name)
        return define_kernel(self, kernel_name, *args, **kwargs)

    PythonWrapperCodegen.define_kernel = defining

    net = _net(cfg)
    x, y = _inputs(cfg)

    def loss_fn(x, y):
        return torch.nn.functional.nll_loss(net(x), y)

    compiled = torch.compile(loss_fn)
    snapshots = {}
    metrics.reset()
    loss = compiled(x, y)
    snapshots["forward"] = _metrics_snapshot()
    metrics.reset()
    phase[0] = "backward"
    loss.backward()
    snapshots["backward"] = _metrics_snapshot()
    per_phase = [sum(g["phase"] == p for g in seen) for p in snapshots]
    # One graph per phase; with the graph break three (the backward ones in reverse order): the input layer,
    # the rest of forward, and the loss (the caller's frame, resumed after the break inside the call).
    assert per_phase == ([3, 3] if cfg.get("graph_break") else [1, 1]), f"graphs per phase {per_phase}: {seen}"

    run_dirs = [d for d in (dump_dir / "torch_compile_debug").iterdir() if _INDUCTOR_RUN.match(d.name)]
    assert len(run_dirs) == 1, run_dirs
    fixed = dump_dir / "torch_compile_debug" / (
        f"run_{_stamp(cfg).strftime('%Y_%m_%d_%H_%M_%S_%f')}-pid_{cfg['pid']}"
    )
    run_dirs[0].rename(fixed)
    graphs = []
    for graph in seen:
        rel = Path(graph["debug_dir"]).relative_to(run_dirs[0])
        folder = (fixed / rel).relative_to(dump_dir)
        names = ("ir_pre_fusion.txt", "ir_post_fusion.txt", "output_code.py")
        graphs.append(
            {
                "phase": graph["phase"],
                "graph": folder.name,
                "files": {n.split(".")[0]: str(folder / n) for n in names},
                "metrics": snapshots[graph["phase"]],  # the phase's: both graphs of a phase with a graph break
                "scheduler_pre_fusion": graph["pre_fusion"],
                "scheduler_post_fusion": graph["post_fusion"],
                "defined_kernels": graph.get("defined", []),
            }
        )
    return {
        "graphs": graphs,
        "loss": round(float(loss), 6),
        "model_parameters": sum(p.numel() for p in net.parameters()),
    }


def run_onnx(cfg: dict, dump_dir: Path, model_path: Path) -> dict:
    import onnx
    import torch

    net = _net(cfg).eval()
    x, _ = _inputs(cfg)
    out: dict = {"model_parameters": sum(p.numel() for p in net.parameters())}
    earlier = set(dump_dir.iterdir())  # reports of exports before this one into the same folder
    try:
        program = torch.onnx.export(
            net, (x,), dynamo=True, report=True, verify=True, artifacts_dir=str(dump_dir)
        )
    except Exception as exc:  # a failing export is a sample too: its report says which step failed
        out["outcome"] = "exception"
        out["exception"] = f"{type(exc).__name__}: {_ANSI.sub('', str(exc).splitlines()[0])}"
        program = None
    fixed = f"onnx_export_{_stamp(cfg).strftime('%Y-%m-%d_%H-%M-%S-%f')}"
    reports = []
    for f in sorted(set(dump_dir.iterdir()) - earlier):
        new = dump_dir / _ONNX_STAMP.sub(fixed, f.name)
        f.rename(new)
        if new.suffix == ".md":
            reports.append(new.name)
    assert len(reports) == 1, reports
    out["files"] = {"report": reports[0]}
    out["report_outcome"] = reports[0].rsplit("_", 1)[1].removesuffix(".md")
    if program is None:
        return out
    out["outcome"] = "exported"
    out["fx_nodes"] = len(program.exported_program.graph.nodes)
    program.save(str(model_path))
    model = onnx.load(str(model_path))
    elements = 0
    for init in model.graph.initializer:
        n = 1
        for d in init.dims:
            n *= d
        elements += n
    out["onnx"] = {
        "graph_nodes": len(model.graph.node),
        "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "opset_imports": {o.domain or "": o.version for o in model.opset_import},
        "ir_version": model.ir_version,
        "producer_name": model.producer_name,
        "producer_version": model.producer_version,
        "initializers": len(model.graph.initializer),
        "initializer_elements": elements,
        "functions": len(model.functions),
        "op_types": _count(n.op_type for n in model.graph.node),
    }
    return out


def _count(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return dict(sorted(out.items()))
