"""JAX jobs: an MLP train step under ``jax.jit`` and under ``jax.pmap`` (8 host devices).

Runs in a process whose ``XLA_FLAGS`` already hold ``--xla_dump_to``: XLA reads them
once, when the backend starts. Inputs are numpy arrays, so the only programs XLA
compiles (and dumps) are the ones below. Figures come from the compiled executable:
its optimized ``HloModule`` objects (computations, instructions, opcodes) and
``memory_analysis()``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

D_IN, D_OUT, LR, DEVICES = 32, 8, 0.05, 8

_FUSION_KIND = re.compile(r"\bkind=(k\w+)")
_CC_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def _opcode_text(opcode) -> str:
    """``HloOpcode.kAllReduce`` -> ``all-reduce`` (the spelling of HLO text)."""
    return re.sub(r"(?<!^)([A-Z])", r"-\1", opcode.name[1:]).lower()


def _init(width: int, layers: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.RandomState(seed)
    dims = [D_IN] + [width] * layers + [D_OUT]
    return [
        {"w": (rng.randn(a, b) / np.sqrt(a)).astype(np.float32), "b": np.zeros(b, np.float32)}
        for a, b in zip(dims[:-1], dims[1:])
    ]


def _batch(batch: int, seed: int, lead: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed + 1)
    x = rng.randn(*lead, batch, D_IN).astype(np.float32)
    y = np.eye(D_OUT, dtype=np.float32)[rng.randint(0, D_OUT, size=(*lead, batch))]
    return x, y


def _model():
    import jax
    import jax.numpy as jnp

    def loss(params, x, y):
        h = x
        for layer in params[:-1]:
            h = jnp.tanh(h @ layer["w"] + layer["b"])
        logits = h @ params[-1]["w"] + params[-1]["b"]
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits), axis=-1)), logits

    def train_step(params, x, y):
        (l, _), grads = jax.value_and_grad(loss, has_aux=True)(params, x, y)
        return jax.tree.map(lambda p, g: p - LR * g, params, grads), l

    def eval_metrics(params, x, y):
        l, logits = loss(params, x, y)
        return l, jnp.mean(jnp.argmax(logits, -1) == jnp.argmax(y, -1))

    return loss, train_step, eval_metrics


def _module_figures(compiled, dump_dir: Path) -> dict:
    """What XLA says about one compiled program, and the dump files it wrote for it."""
    modules = compiled.runtime_executable().hlo_modules()
    assert len(modules) == 1, [m.name for m in modules]
    module = modules[0]
    n_comp = n_instr = 0
    fusions: dict[str, int] = {}
    targets: dict[str, int] = {}
    opcodes: dict[str, int] = {}
    for comp in module.computations():
        n_comp += 1
        for instr in comp.instructions():
            n_instr += 1
            op = _opcode_text(instr.opcode)
            opcodes[op] = opcodes.get(op, 0) + 1
            if op == "fusion":
                kind = _FUSION_KIND.search(instr.to_string())[1]
                fusions[kind] = fusions.get(kind, 0) + 1
            elif op == "custom-call":
                target = _CC_TARGET.search(instr.to_string())[1]
                targets[target] = targets.get(target, 0) + 1
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis() or {}
    return {
        "module": module.name,
        "files": _dump_files(dump_dir, module.name),
        "hlo": {
            "computations": n_comp,
            "instructions": n_instr,
            "fusions": sum(fusions.values()),
            "fusions_by_kind": dict(sorted(fusions.items())),
            "custom_call_targets": dict(sorted(targets.items())),
            "collectives": {c: opcodes.get(c, 0) + opcodes.get(f"{c}-start", 0) for c in _COLLECTIVES},
            "opcodes": dict(sorted(opcodes.items())),
        },
        "memory_analysis": {
            f: int(getattr(mem, f))
            for f in (
                "argument_size_in_bytes",
                "output_size_in_bytes",
                "alias_size_in_bytes",
                "temp_size_in_bytes",
                "generated_code_size_in_bytes",
                "peak_memory_in_bytes",
                "host_argument_size_in_bytes",
                "host_output_size_in_bytes",
                "host_alias_size_in_bytes",
                "host_temp_size_in_bytes",
            )
        },
        # Informational: XLA's cost model, no dump file states these.
        "cost_analysis": {k: float(cost[k]) for k in ("flops", "transcendentals", "bytes accessed") if k in cost},
    }


def _dump_files(dump_dir: Path, module_name: str) -> dict[str, str]:
    """The text dumps XLA wrote for ``module_name`` (one compilation each), by role."""
    roles = {
        "hlo_before_optimizations": "before_optimizations.txt",
        "hlo_after_optimizations": "cpu_after_optimizations.txt",
        "buffer_assignment": "cpu_after_optimizations-buffer-assignment.txt",
        "buffer_assignment_values": "cpu_after_optimizations-buffer-assignment-values.txt",
        "live_range": "cpu_after_optimizations-live-range.txt",
        "memory_usage_report": "cpu_after_optimizations-memory-usage-report.txt",
    }
    files = {}
    for role, suffix in roles.items():
        found = sorted(dump_dir.glob(f"module_*.{module_name}.{suffix}"))
        assert len(found) == 1, (role, module_name, found)
        files[role] = found[0].name
    return files


def run_jit(cfg: dict, dump_dir: Path) -> dict:
    import jax

    _, train_step, eval_metrics = _model()
    params = _init(cfg["width"], cfg["layers"], cfg["seed"])
    x, y = _batch(cfg["batch"], cfg["seed"])
    programs = []
    for fn, donate in ((train_step, (0,)), (eval_metrics, ())):
        compiled = jax.jit(fn, donate_argnums=donate).lower(params, x, y).compile()
        programs.append(_module_figures(compiled, dump_dir))
    return {"programs": programs, "devices": jax.device_count()}


def run_pmap(cfg: dict, dump_dir: Path) -> dict:
    import jax
    from jax import lax

    loss, _, _ = _model()
    assert jax.device_count() == DEVICES, jax.devices()

    def train_step(params, x, y):
        (l, _), grads = jax.value_and_grad(loss, has_aux=True)(params, x, y)
        grads = lax.psum(grads, "devices")  # one all-reduce after XLA combines them
        new = jax.tree.map(lambda p, g: p - LR / DEVICES * g, params, grads)
        return new, lax.pmean(l, "devices")

    params = _init(cfg["width"], cfg["layers"], cfg["seed"])
    stacked = [{k: np.broadcast_to(v, (DEVICES, *v.shape)).copy() for k, v in p.items()} for p in params]
    x, y = _batch(max(cfg["batch"] // DEVICES, 1), cfg["seed"], lead=(DEVICES,))
    step = jax.pmap(train_step, axis_name="devices", donate_argnums=(0,))
    compiled = step.lower(stacked, x, y).compile()
    return {"programs": [_module_figures(compiled, dump_dir)], "devices": jax.device_count()}
