"""Make the incident test buckets: real compiler dumps, night after night, with designed changes.

    .venv-samples/bin/python data/generate_incident_buckets.py --out tests/incident_buckets

Needs the ``samples`` extra, like ``generate_samples.py``, whose machinery it reuses: each
job of each night runs in a worker process started with the job's dump flags
(``--xla_dump_to``, ``--xla_force_host_platform_device_count=8``, ``TORCH_COMPILE_DEBUG=1``,
``torch.onnx.export(..., dynamo=True, report=True)``), the models are the samples' (JAX MLP,
torch MLP) plus the few variants below, and the dumps are gzipped without time stamps.

One bucket per scenario in ``SCENARIOS``, ``<out>/<scenario>/<run_id>/<job>/...`` in the
sample bucket's layout, with ``run.json`` per night (fixed ``started_at``, a fake commit
per night, tags) and ``compiler_figures.json`` per job. Only the dumps Dumpscope reads
are kept (HLO text, buffer assignment and its side files, memory usage report, Inductor
IR and ``output_code.py``, ONNX reports); the rest (MLIR, ``debug_options``, FX graphs,
empty logs, everything ``generate_samples.kept`` drops) is left out to keep the fixtures
small. A night may damage some of its dumps on purpose (``damage``): cut deterministically
here, after the compilers wrote them whole.

``<out>/MANIFEST.json`` says, per scenario, the nights, each designed change (run, job,
program, kind, what the compilers' figures did) and the incidents it should give, with
their state at each run; plus the versions and this command. ``--scenarios`` remakes a
subset (the manifest keeps the other entries). Scenarios with ``incidents`` follow the
incident model (.briefs/incident_model.md): each expected incident's steps (baseline ->
value per series and metric) are read from the dumps with Dumpscope's own parser (the
``samples`` install has the project), and tests/incident_oracle.py checks them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from generate_samples import NOTES, gzip_to, run_job, versions, write_run  # noqa: E402
from generate_torch_traces import _figures as torch_figures, _free_port  # noqa: E402

# A second ONNX job of first_night_failures: the same exporter without draft export.
NOTES.setdefault("torch-onnx-nodraft", NOTES["torch-onnx"])

SEED = 20261201
FIRST_NIGHT = datetime.fromisoformat("2026-10-01T02:00:00+00:00")
COMMAND = ".venv-samples/bin/python data/generate_incident_buckets.py --out tests/incident_buckets"

# The only files kept: what Dumpscope parses (everything else in a dump folder parses as unknown).
AFTER = "cpu_after_optimizations.txt"
BUFFERS = "cpu_after_optimizations-buffer-assignment.txt"
_KEEP = re.compile(
    r"^(module_\d+\..+\.txt|ir_pre_fusion\.txt|ir_post_fusion\.txt|output_code\.py|onnx_export_.+\.md)$"
)

MLP = {"width": 64, "layers": 2, "batch": 16, "center": None}  # generate_samples' first night
BIGGER_MLP = {"width": 96, "layers": 3, "batch": 16, "center": None}
CONVNET = {"channels": 8, "convs": 2}
BIGGER_CONVNET = {"channels": 12, "convs": 3}
TAGGER = {"vocab": 50, "dim": 16}
# Byte metrics of a train step's XLA dumps (buffer assignment and side files, memory report, ENTRY
# shapes before and after optimizations): PARAMS move with the parameters (ENTRY_IN with the inputs
# too), TEMP with the activations and gradients.
ENTRY_IN = ["memory.entry_parameter_array_bytes", "memory.entry_parameter_bytes"]
ENTRY_OUT = ["memory.entry_output_array_bytes", "memory.entry_output_bytes"]
TEMP = ["memory.peak_live_bytes", "memory.report_total_bytes", "memory.temp_bytes", "memory.total_bytes"]
PARAMS = ["memory.alias_bytes", "memory.live_out_bytes", "memory.parameter_bytes", *ENTRY_IN, *ENTRY_OUT]


# The ONNX export's verification runs the model in ONNX Runtime and PyTorch on the example
# input: drawn per night (seed) and scaled, the same model's outputs differ by 1-4 float32
# ulps (max_abs_diff 2.4e-7 ... 9.5e-7) from night to night. Nothing else in the report moves.
INPUT_SCALES = (1.0, 3.0, 2.0, 3.0, 1.0, 2.5)


def _night_jobs_stable(i: int) -> dict:
    return {"jax-jit": {"task": "jit"} | MLP,
            "torch-onnx": {"task": "onnx_noise", "input_seed": SEED + 100 + i, "input_scale": INPUT_SCALES[i]} | MLP}


SCENARIOS: dict[str, dict] = {
    "stable": {
        "summary": "The same jit train step every night and an ONNX export whose verification max_abs_diff "
                   "moves by float noise only (each night verifies on its own example input): nothing really "
                   "changes.",
        "nights": 6,
        "jobs": _night_jobs_stable,
        "changes": [],
        "notes": ["torch-onnx exports the same model (same weights) every night; the exporter verifies it on "
                  "the night's own example input (seed SEED+100+night, scaled by INPUT_SCALES): max_abs_diff and "
                  "max_rel_diff differ from night to night by a few float32 ulps (< 1e-6; see each night's "
                  "figures); nothing else differs, and the JAX dumps are the same bytes every night"],
    },
    "collective_kept": {
        "summary": "A pmap train step over 8 host devices; from night 3 on, a second psum (of a per-device "
                   "activation statistic under the updated parameters) is added and kept.",
        "nights": 6,
        "jobs": lambda i: {"jax-pmap": {"task": "pmap", "extra_psum": i >= 2} | MLP},
        "changes": [{
            "id": "extra-all-reduce", "night": 3, "job": "jax-pmap", "program": "jit__fun", "kind": "regression",
            "what": "a second all-reduce: psum of sum(tanh(x @ w0' + b0')^2) over the devices, computed from the "
                    "parameters the first (combined) all-reduce updated, so XLA cannot combine the two",
            "evidence": [("all_reduce", "kernel.collective.all-reduce (= kernel.collectives)", AFTER),
                         ("output_size_in_bytes", "memory.live_out_bytes (the new scalar output)", BUFFERS)],
            "closed": None,
        }],
    },
    "blowup_revert": {
        "summary": "A jit train step; night 3 adds a pairwise term tanh(h_i * h_j) on the first hidden layer, "
                   "whose B x W x W values the backward pass keeps (temp memory x28); night 4 reverts to "
                   "exactly night 2's program.",
        "nights": 5,
        "jobs": lambda i: {"jax-jit": {"task": "jit", "pairwise": i == 2} | MLP},
        "changes": [{
            "id": "pairwise-blowup", "night": 3, "job": "jax-jit", "program": "jit_train_step", "kind": "regression",
            "what": "temp memory blows up: a materialised batch x width x width intermediate (tanh of an outer "
                    "product) kept for the backward pass",
            "evidence": [("temp_size_in_bytes", "memory.temp_bytes", BUFFERS),
                         ("fusions", "fusion.count", AFTER)],
            "closed": {"night": 4, "as": "fixed"},
        }],
    },
    "model_change": {
        "summary": "The samples' MLP in JAX (jit train step) and in torch (Inductor forward and backward "
                   "graphs); night 3 makes it wider and one layer deeper (64x2 -> 96x3) in both, and keeps it.",
        "nights": 5,
        "jobs": lambda i: {
            "jax-jit": {"task": "jit"} | (BIGGER_MLP if i >= 2 else MLP),
            "torch-inductor": {"task": "inductor"} | (BIGGER_MLP if i >= 2 else MLP),
        },
        "changes": [
            {"id": "bigger-model", "night": 3, "job": "jax-jit", "program": "jit_train_step", "kind": "regression",
             "what": "model 64x2 -> 96x3: more parameters, instructions, fusions, bytes in every XLA dump of the "
                     "program (HLO before/after, buffer assignment and side files, memory report)",
             "evidence": [("argument_size_in_bytes", "memory.parameter_bytes", BUFFERS),
                          ("temp_size_in_bytes", "memory.temp_bytes", BUFFERS),
                          ("hlo_instructions", "hlo.instructions", AFTER)],
             "closed": None},
            {"id": "bigger-model", "night": 3, "job": "torch-inductor", "program": "model__0_forward_1.0",
             "kind": "regression", "what": "model 64x2 -> 96x3: more scheduler nodes, kernels and buffer bytes "
                                           "in the forward graph's IR and output code",
             "evidence": [("post_fusion_nodes", "inductor.nodes", "ir_post_fusion.txt")], "closed": None},
            {"id": "bigger-model", "night": 3, "job": "torch-inductor", "program": "model__0_backward_3.1",
             "kind": "regression", "what": "model 64x2 -> 96x3: the same in the backward graph",
             "evidence": [("post_fusion_nodes", "inductor.nodes", "ir_post_fusion.txt")], "closed": None},
        ],
        "notes": ["a deliberate model change: a person would accept it (dumpscope accept); the bucket holds no "
                  "accept, so each incident stays open to the last night"],
    },
    "truncated": {
        "summary": "A jit train step, the same program every night; night 3's after-optimizations HLO is cut "
                   "mid-line (then gzipped whole) and its buffer assignment's .gz is cut (a gzip stream "
                   "without its end); the other files of night 3 are night 2's bytes; night 4 is whole again.",
        "nights": 5,
        "jobs": lambda i: {"jax-jit": {"task": "jit"} | MLP | (
            {"damage": {"hlo_after_optimizations": {"how": "text_cut", "at": 0.55},
                        "buffer_assignment": {"how": "gzip_cut", "at": 0.6}}} if i == 2 else {})},
        "changes": [{
            "id": "damaged-dumps", "night": 3, "job": "jax-jit", "program": "jit_train_step", "kind": "failure",
            "what": "two damaged dumps (partial parses), not a change of the program: no metric regression; "
                    "the figures the cut files still give are incomplete and must not count",
            "evidence": [("damaged", "status partial/failed of the cut files (others ok)", f"{AFTER}, {BUFFERS}"),
                         ("temp_size_in_bytes", "memory.temp_bytes: the compiler's figure did not move", BUFFERS)],
            "closed": {"night": 4, "as": "fixed"},
        }],
    },
    "failing_export": {
        "summary": "The samples' torch MLP exported to ONNX; from night 3 on it centres with a median "
                   "(aten.median.dim), which the exporter cannot translate: the export fails at "
                   "'Translate the graph into ONNX' every night after.",
        "nights": 5,
        "jobs": lambda i: {"torch-onnx": {"task": "onnx"} | MLP | {"center": "median" if i >= 2 else None}},
        "changes": [{
            "id": "export-fails", "night": 3, "job": "torch-onnx", "program": "torch-onnx", "kind": "failure",
            "what": "ONNX export fails at the translate step (report ..._conversion.md); the later steps are skipped",
            "evidence": [("report_outcome", "onnx.step.translate 1 -> 0; onnx.graph_nodes absent",
                          "onnx_export_*.md")],
            "closed": None,
        }],
    },
    "two_onnx_models": {
        "summary": "One torch-onnx job exports two models each night, each into its own artifacts folder "
                   "(mlp/, convnet/: two programs); night 4 makes only the conv net bigger (8 -> 12 "
                   "channels, 2 -> 3 convolutions); the MLP's report stays byte-identical.",
        "nights": 5,
        "jobs": lambda i: {"torch-onnx": {"task": "onnx_pair", "seed": SEED, "mlp": MLP,
                                          "convnet": BIGGER_CONVNET if i >= 3 else CONVNET}},
        "changes": [{
            "id": "bigger-convnet", "night": 4, "job": "torch-onnx", "program": "convnet", "kind": "change",
            "what": "conv net 8 channels x 2 convs -> 12 x 3: parameters, FX nodes, ONNX graph nodes and "
                    "initializers grow; the export still succeeds. No ONNX figure that moves has a worse "
                    "direction in docs/trends.md, so this is a change, neither regression nor failure",
            "evidence": [("model_parameters", "onnx.parameters", "convnet/onnx_export_*.md"),
                         ("onnx_graph_nodes", "onnx.graph_nodes", "convnet/onnx_export_*.md")],
            "closed": None,
        }],
    },
}


def _inc(name: str, job: str, program: str, kind: str, opened: int, closed: tuple[int, str] | None, *,
         base: int | None, metrics: list[str], change: str, stacked_on: str | None = None,
         reopened: tuple[tuple[int, int], ...] = (), reverted: bool = False, base_of: dict[str, int] | None = None) -> dict:
    """An expected incident under the incident model (.briefs/incident_model.md): nights are
    1-based; ``base`` is the night whose figures are its steps' baseline (the level they
    stepped from; None: a program seen first when it opened, its failures measured from a
    passing figure); ``metrics`` the exact set that steps (before -> after filled in from the
    dumps); ``reopened``: (night it closed, night a revert reopened it) before its last closing
    (``closed``); ``reverted``: its closing was a revert (its figures back where they stood
    before it opened); ``base_of``: metric -> the night of its baseline, where it is not ``base``'s (a
    step of a run that fixed another past its baseline steps from that one's baseline)."""
    return {"name": name, "job": job, "program": program, "kind": kind, "opened": opened, "closed": closed,
            "base": base, "metrics": sorted(metrics), "change": change, "stacked_on": stacked_on,
            "reopened": [list(r) for r in reopened], "reverted": reverted, "base_of": base_of or {}}


def _mlp(wide: bool, **more) -> dict:
    return MLP | ({"width": 96} if wide else {}) | more


FWD, BWD = "model__0_forward_1.0", "model__0_backward_3.1"
# The export order of onnx_three_models, per night: never the same twice.
ORDERS = (("mlp", "convnet", "tagger"), ("tagger", "convnet", "mlp"), ("convnet", "tagger", "mlp"),
          ("mlp", "tagger", "convnet"), ("tagger", "mlp", "convnet"))
# The scenarios made before the incident model, with its expectations: a program that grows
# also opens an improvement (more fusions: fewer is worse by the fusion rule).
_OLD_INCIDENTS = {
    "collective_kept": [
        _inc("R", "jax-pmap", "jit__fun", "regression", 3, None, base=2, change="extra-all-reduce",
             metrics=["kernel.collective.all-reduce", "kernel.collectives", "kernel.custom_call.xla.sdy.FuncResultSharding",
                      "kernel.custom_calls", "kernel.launches"]),
        _inc("I", "jax-pmap", "jit__fun", "improvement", 3, None, base=2, change="extra-all-reduce",
             metrics=["fusion.count", "fusion.count.kCustom", "fusion.count.kLoop"]),
    ],
    "blowup_revert": [
        _inc("R", "jax-jit", "jit_train_step", "regression", 3, (4, "fixed"), base=2, change="pairwise-blowup",
             metrics=["kernel.launches", *TEMP]),
        _inc("I", "jax-jit", "jit_train_step", "improvement", 3, (4, "lost"), base=2, change="pairwise-blowup",
             metrics=["fusion.count", "fusion.count.kCustom", "fusion.count.kLoop"]),
    ],
    "model_change": [
        _inc("R-jit", "jax-jit", "jit_train_step", "regression", 3, None, base=2, change="bigger-model",
             metrics=["kernel.launches", *PARAMS, *TEMP]),
        _inc("I-jit", "jax-jit", "jit_train_step", "improvement", 3, None, base=2, change="bigger-model",
             metrics=["fusion.count", "fusion.count.kCustom", "fusion.count.kLoop"]),
        *(inc for graph in ("model__0_forward_1.0", "model__0_backward_3.1") for inc in (
            _inc(f"R-{graph}", "torch-inductor", graph, "regression", 3, None, base=2, change="bigger-model",
                 metrics=["memory.buffer_bytes"]),
            _inc(f"I-{graph}", "torch-inductor", graph, "improvement", 3, None, base=2, change="bigger-model",
                 metrics=["fusion.count", "fusion.fused_nodes"]))),
    ],
    "truncated": [_inc("F", "jax-jit", "jit_train_step", "failure", 3, (4, "fixed"), base=2, change="damaged-dumps",
                       metrics=["dump.status"])],
    "failing_export": [_inc("F", "torch-onnx", "inp+blocks+head(x)", "failure", 3, None, base=2, change="export-fails",
                            metrics=["onnx.errors", "onnx.step.translate"])],
    "stable": [],
    "two_onnx_models": [],
}
for _name, _expected in _OLD_INCIDENTS.items():
    SCENARIOS[_name]["incidents"] = _expected

SCENARIOS |= {
    "stacked_blowup": {
        "summary": "A jit train step and a pmap train step (8 host devices). Night 2 widens the MLP (64 -> 96), "
                   "kept; night 3 also raises the batch (16 -> 448 under jit, 16 -> 16384 under pmap: 2 -> 2048 "
                   "per device), temp memory x10 / x23 on top of the wider model; night 4 is night 2's program "
                   "again (the same dump bytes).",
        "nights": 5,
        "jobs": lambda i: {
            "jax-jit": {"task": "jit"} | _mlp(i >= 1, **({"batch": 448} if i == 2 else {})),
            "jax-pmap": {"task": "pmap", "extra_psum": False} | _mlp(i >= 1, **({"batch": 16384} if i == 2 else {})),
        },
        "changes": [
            {"id": "wider-mlp", "night": 2, "job": "jax-jit", "program": "jit_train_step",
             "what": "hidden width 64 -> 96 (2 layers): parameters, their gradients and the activations grow; "
                     "the program's structure (fusions, launches) stays",
             "evidence": [("argument_size_in_bytes", "memory.parameter_bytes", BUFFERS),
                          ("temp_size_in_bytes", "memory.temp_bytes", BUFFERS)]},
            {"id": "wider-mlp", "night": 2, "job": "jax-pmap", "program": "jit__fun",
             "what": "the same widening in the pmap step",
             "evidence": [("argument_size_in_bytes", "memory.parameter_bytes", BUFFERS),
                          ("temp_size_in_bytes", "memory.temp_bytes", BUFFERS)]},
            {"id": "big-batch", "night": 3, "job": "jax-jit", "program": "jit_train_step",
             "what": "batch 16 -> 448 on top of the wider model: activations x28, temp memory x10; XLA also "
                     "splits the larger matmuls into more fusions (22 -> 27: kCustom 5 -> 7, kLoop 17 -> 20) and "
                     "launches (28 -> 33). Night 4 goes back to batch 16",
             "evidence": [("temp_size_in_bytes", "memory.temp_bytes", BUFFERS), ("fusions", "fusion.count", AFTER)]},
            {"id": "big-batch", "night": 3, "job": "jax-pmap", "program": "jit__fun",
             "what": "batch 16 -> 16384 (2048 per device; the per-device gradient buffers dominate pmap's temp "
                     "memory, so it takes a larger batch to multiply it): temp memory x23; fusions 26 -> 28 "
                     "(kCustom 5 -> 11, kLoop 21 -> 17), launches 36 -> 38. Night 4 goes back to batch 16",
             "evidence": [("temp_size_in_bytes", "memory.temp_bytes", BUFFERS), ("fusions", "fusion.count", AFTER)]},
        ],
        "incidents": [
            _inc("A-jit", "jax-jit", "jit_train_step", "regression", 2, None, base=1, metrics=PARAMS + TEMP,
                 change="wider-mlp"),
            _inc("A-pmap", "jax-pmap", "jit__fun", "regression", 2, None, base=1, metrics=PARAMS + TEMP,
                 change="wider-mlp"),
            _inc("B-jit", "jax-jit", "jit_train_step", "regression", 3, (4, "fixed"), base=2, stacked_on="A-jit",
                 metrics=["memory.parameter_bytes", *ENTRY_IN, *TEMP, "kernel.launches"], change="big-batch"),
            _inc("C-jit", "jax-jit", "jit_train_step", "improvement", 3, (4, "lost"), base=2,
                 metrics=["fusion.count", "fusion.count.kCustom", "fusion.count.kLoop"], change="big-batch"),
            _inc("B-pmap", "jax-pmap", "jit__fun", "regression", 3, (4, "fixed"), base=2, stacked_on="A-pmap",
                 metrics=["memory.parameter_bytes", *ENTRY_IN, *TEMP, "kernel.launches", "fusion.count.kLoop"],
                 change="big-batch"),
            _inc("C-pmap", "jax-pmap", "jit__fun", "improvement", 3, (4, "lost"), base=2,
                 metrics=["fusion.count", "fusion.count.kCustom"], change="big-batch"),
        ],
        "notes": ["B stacks on A: the same byte figures step further up the same way while A is open; the revert "
                  "(night 4) is back within the floor of B's baseline (A's level), so B is fixed and A stays "
                  "open, and C (more fusions at the large batch: better by the fusion rule) is lost",
                  "night 4's dumps are night 2's bytes (both jobs)"],
    },
    "overshoot": {
        "summary": "A jit train step; night 3 doubles the batch (16 -> 32), night 4 halves the original (16 -> 8) "
                   "and keeps it: memory goes up, then below where it started.",
        "nights": 5,
        "jobs": lambda i: {"jax-jit": {"task": "jit"} | MLP | {"batch": (16, 16, 32, 8, 8)[i]}},
        "changes": [
            {"id": "batch-32", "night": 3, "job": "jax-jit", "program": "jit_train_step",
             "what": "batch 16 -> 32: the input and the activations the backward pass keeps double (temp +43 %)",
             "evidence": [("temp_size_in_bytes", "memory.temp_bytes", BUFFERS),
                          ("argument_size_in_bytes", "memory.parameter_bytes", BUFFERS)]},
            {"id": "batch-8", "night": 4, "job": "jax-jit", "program": "jit_train_step",
             "what": "batch 32 -> 8, half of night 2's: every byte figure that rose is now below night 2's",
             "evidence": [("temp_size_in_bytes", "memory.temp_bytes", BUFFERS),
                          ("argument_size_in_bytes", "memory.parameter_bytes", BUFFERS)]},
        ],
        "incidents": [
            _inc("R", "jax-jit", "jit_train_step", "regression", 3, (4, "fixed"), base=2,
                 metrics=["memory.parameter_bytes", *ENTRY_IN, *TEMP], change="batch-32"),
            _inc("I", "jax-jit", "jit_train_step", "improvement", 4, None, base=2,
                 metrics=["memory.parameter_bytes", *ENTRY_IN, *TEMP], change="batch-8"),
        ],
        "notes": ["night 4 is past R's baseline the good way: R is fixed and the improvement I opens in the same "
                  "run, measured from R's baseline (night 2), not from night 3"],
    },
    "dip_and_back": {
        "summary": "The samples' MLP in JAX (jit) and torch (Inductor); night 3 widens it (64 -> 96), night 4 is "
                   "reverted to night 2's model, night 5 relands the wider one.",
        "nights": 5,
        "jobs": lambda i: {"jax-jit": {"task": "jit"} | _mlp(i in (2, 4)),
                           "torch-inductor": {"task": "inductor"} | _mlp(i in (2, 4))},
        "changes": [
            {"id": "wider", "night": 3, "job": "jax-jit", "program": "jit_train_step",
             "what": "hidden width 64 -> 96: byte figures of parameters, gradients and activations grow; night 4 "
                     "is night 2's program (same dumps), night 5 night 3's",
             "evidence": [("temp_size_in_bytes", "memory.temp_bytes", BUFFERS)]},
            {"id": "wider", "night": 3, "job": "torch-inductor", "program": FWD,
             "what": "the same in the Inductor forward graph: buffer bytes of its IR", "evidence": []},
            {"id": "wider", "night": 3, "job": "torch-inductor", "program": BWD,
             "what": "the same in the backward graph", "evidence": []},
        ],
        "incidents": [
            *(_inc(f"R{k}-{tag}", job, prog, "regression", night, (4, "fixed") if k == 1 else None, base=night - 1,
                   metrics=metrics, change="wider")
              for k, night in ((1, 3), (2, 5))
              for tag, job, prog, metrics in (("jit", "jax-jit", "jit_train_step", PARAMS + TEMP),
                                             ("fwd", "torch-inductor", FWD, ["memory.buffer_bytes"]),
                                             ("bwd", "torch-inductor", BWD, ["memory.buffer_bytes"]))),
        ],
        "notes": ["the revert fixes each night-3 incident; the reland (night 5) opens new ones, from night 4's level"],
    },
    "lost_improvement": {
        "summary": "A jit train step; night 3 prunes the hidden width 64 -> 48 (less memory everywhere), night 4 "
                   "restores 64 and keeps it.",
        "nights": 5,
        "jobs": lambda i: {"jax-jit": {"task": "jit"} | MLP | ({"width": 48} if i == 2 else {})},
        "changes": [
            {"id": "pruned", "night": 3, "job": "jax-jit", "program": "jit_train_step",
             "what": "hidden width 64 -> 48: smaller parameters, gradients and activations (temp -36 %); night 4 "
                     "is night 2's program again",
             "evidence": [("temp_size_in_bytes", "memory.temp_bytes", BUFFERS),
                          ("argument_size_in_bytes", "memory.parameter_bytes", BUFFERS)]},
        ],
        "incidents": [_inc("I", "jax-jit", "jit_train_step", "improvement", 3, (4, "lost"), base=2,
                           metrics=PARAMS + TEMP, change="pruned")],
    },
    "mixed_run": {
        "summary": "A jit train step on a batch of 256; from night 3 on it accumulates gradients over 4 "
                   "microbatches of 64 (lax.scan), kept: less memory, more launches, in one run.",
        "nights": 5,
        "jobs": lambda i: {"jax-jit": {"task": "jit"} | MLP | {"batch": 256} | ({"microbatches": 4} if i >= 2 else {})},
        "changes": [
            {"id": "grad-accumulation", "night": 3, "job": "jax-jit", "program": "jit_train_step",
             "what": "gradient accumulation over 4 microbatches (a while loop): only a quarter of the activations "
                     "live at a time (temp -55 %, peak -40 %), but the loop and the accumulation add kernels "
                     "(launches 33 -> 49 after optimizations, 94 -> 121 before) and fusions (27 -> 43)",
             "evidence": [("temp_size_in_bytes", "memory.temp_bytes", BUFFERS), ("fusions", "fusion.count", AFTER)]},
        ],
        "incidents": [
            _inc("R", "jax-jit", "jit_train_step", "regression", 3, None, base=2, metrics=["kernel.launches"],
                 change="grad-accumulation"),
            _inc("I", "jax-jit", "jit_train_step", "improvement", 3, None, base=2,
                 metrics=[*TEMP, "fusion.count", "fusion.count.kLoop"], change="grad-accumulation"),
        ],
        "notes": ["one run of one program opens a regression incident and an improvement incident",
                  "jax.checkpoint (remat) was tried first: on XLA:CPU it raises temp memory for this MLP (28672 -> "
                  "35360 per layer, 31264 for the whole stack), so it is no mixed change here"],
    },
    "onnx_three_models": {
        "summary": "One torch-onnx job exports three models into the job folder itself (one artifacts folder) "
                   "every night, in a different order each night: the samples' MLP (wider from night 3 on), a "
                   "conv net whose export fails at translate on nights 2-3 (a median) and passes again from "
                   "night 4 (a mean instead), and a small token tagger that never changes.",
        "nights": 5,
        "jobs": lambda i: {"torch-onnx": {
            "task": "onnx_three", "order": ORDERS[i], "mlp": _mlp(i >= 2), "tagger": TAGGER,
            "convnet": CONVNET | {"center": (None, "median", "median", "mean", "mean")[i]}}},
        "changes": [
            {"id": "convnet-median", "night": 2, "job": "torch-onnx", "program": "features+head(x)",
             "what": "the conv net centres its pooled features with a median (aten.median.dim), which the exporter "
                     "cannot translate: the report is ..._conversion.md; night 4 centres with a mean and exports",
             "evidence": [("report_outcome", "onnx.step.translate 1 -> 0 -> 1", "onnx_export_*.md")]},
            {"id": "mlp-wider", "night": 3, "job": "torch-onnx", "program": "inp+blocks+head(x)",
             "what": "the MLP 64 -> 96 wide: parameters and initializer sizes grow, the name stays (no shapes in "
                     "it); no ONNX figure that moves has a direction, so no incident",
             "evidence": [("model_parameters", "onnx.parameters", "onnx_export_*.md")]},
        ],
        "incidents": [_inc("F", "torch-onnx", "features+head(x)", "failure", 2, (4, "fixed"), base=1,
                           metrics=["onnx.errors", "onnx.step.translate"], change="convnet-median")],
        "notes": ["the three reports sit in one folder; the export order (so the file order, the time stamps "
                  "being the night's plus the place in that order) differs every night: only the reports' "
                  "content (the exported program's signature) tells the models apart",
                  "the tagger's report is the same text every night whatever its place in the order"],
    },
}

# The two ranks of a torch.distributed job (gloo on CPU, world size 2) compile the same function
# (backend aot_eager):
# a step called with two activations (a recompile on the callable's id) and two batch sizes (a
# recompile on the shape). Each rank is its own process with TORCH_TRACE=<job folder>; its source
# is written to a fresh temporary folder (as a runner's checkout), so file names, ids and paths
# differ between the ranks and between nights, as they do on real runners.
RANK_MODEL = '''"""Compiled by data/generate_incident_buckets.py, one process per rank."""
import torch


def relu_act(h):
    return torch.relu(h)


def tanh_act(h):
    return torch.tanh(h)


def warmup(x):
    return torch.cos(x) + 1


def step(w, x, act):
    h = act(x @ w)
    return (h * h).mean()
'''
SCENARIOS |= {
    "rank_logs": {
        "summary": "Two torch.distributed jobs of two ranks each (gloo on CPU, world size 2), every night the same "
                   "program written again by new processes: torch names each rank's log "
                   "dedicated_log_torch_trace_rank_<n>_<random>.log (a new random part every run) in torch-ranks; "
                   "in torch-ranks-early each rank compiles a warm-up function before torch.distributed starts, so "
                   "the log is opened before the rank is known: dedicated_log_torch_trace_<random>.log, the rank only "
                   "in its records. Nothing changes.",
        "nights": 3,
        "jobs": lambda i: {"torch-ranks": {"task": "ranks", "early": False},
                           "torch-ranks-early": {"task": "ranks", "early": True}},
        "changes": [],
        "incidents": [],
        "notes": ["each rank's step recompiles twice: on the activation (___check_obj_id of its code object: an id() "
                  "that differs in every process) and on the batch size",
                  "the model's source sits in a new temporary folder per process: co_filename, the guards' and "
                  "recompile reasons' paths differ between ranks and nights",
                  "a rank's log is told by the rank in its name, else by the rank its records carry; the random "
                  "part of the name changes every night and names nothing",
                  "three nights (the other scenarios have five): the identity is what is tested, each night new "
                  "processes"],
    },
    "rank_divergence": {
        "summary": "A torch.distributed job of two ranks (gloo on CPU), each the plain job (tests/fixtures/torch_trace/"
                   "ranked: real torch 2.13 logs, copied: no compiler run). On nights 3 and 4 rank 1 writes the log "
                   "of a run whose forward breaks twice (tests/fixtures/torch_trace/graph_break: print and a "
                   "data-dependent branch, the same program forward at dumpscope_model.py:19): its compile ids "
                   "([0/0_1], [1/0], [2/0]) and graph breaks differ from rank 0's, a divergence that opens on night "
                   "3 (with rank 1's own steps: breaks, compiles) and is fixed on night 5.",
        "nights": 5,
        "jobs": lambda i: {"torch-ranks-break": {"task": "corpus_ranks", "ranks": {
            "0": ["dedicated_log_torch_trace_rank_0_ppmobowu.log.gz", RANK_0_LOG],
            "1": (["dedicated_log_torch_trace_rank_1_p9d42glu.log.gz", BREAK_LOG] if i in (2, 3)
                  else ["dedicated_log_torch_trace_rank_1_jcbkis1b.log.gz", RANK_1_LOG])}}},
        "changes": [],
        "incidents": [_inc("D", "torch-ranks-break", "forward at /tmp/dumpscope-torch-trace/src/dumpscope_model.py:19",
                           "regression", 3, (5, "fixed"), base=2,
                           metrics=["dynamo.compiles", "dynamo.graph_breaks", "dynamo.guards", "dynamo.rank_divergence"],
                           change="rank-1-breaks")],
        "notes": ["rank 1's log on nights 3 and 4 is another run's (the graph_break fixture, written without "
                  "torch.distributed: its records carry no rank, its name here gives it rank 1): real logs of "
                  "different jobs side by side, as a rank whose code took another path",
                  "with two ranks the majority is rank 0's (a tie: the lowest rank's): rank 1 differs"],
    },
    "inductor_two_graphs": {
        "summary": "The samples' MLP under torch.compile (Inductor, TORCH_COMPILE_DEBUG=1) with a print between its "
                   "input layer and its blocks: a graph break, so Inductor compiles model__0 (the input layer), "
                   "model__1 (the blocks and the head) and model__2 (the loss, in the caller's frame resumed after "
                   "the break), forward and backward. Night 3 adds a block (2 -> 3 layers), kept: only model__1's "
                   "graphs grow.",
        "nights": 3,
        "jobs": lambda i: {"torch-inductor": {"task": "inductor", "graph_break": True} | MLP
                           | ({"layers": 3} if i >= 2 else {})},
        "changes": [
            {"id": "third-block", "night": 3, "job": "torch-inductor", "program": "model__1_forward_4.1",
             "what": "a third residual block after the graph break: model__1's forward and backward grow, model__0 "
                     "(before the break) is the same program",
             "evidence": []},
        ],
        "incidents": [
            _inc(f"{kind[0].upper()}-{phase}", "torch-inductor", graph, kind, 3, None, base=2, change="third-block",
                 metrics=["memory.buffer_bytes"] if kind == "regression" else ["fusion.count", "fusion.fused_nodes"])
            for phase, graph in (("fwd", "model__1_forward_4.1"), ("bwd", "model__1_backward_10.4"))
            for kind in ("regression", "improvement")],
        "notes": ["the graphs are told by Inductor's AOT graph index (model__<n>_<forward|backward>), not by their "
                  "folders' order",
                  "three nights (the other scenarios have five): the identity is what is tested, each night a new "
                  "process"],
    },
}


# The revert after an overshoot (issue 44, item 2): an eval step whose kernel launches go 8 -> 10
# (commit A: accuracy on the softmax) -> 2 (the eval batch becomes empty: XLA folds the step into
# two constant copies) -> 10 (the batch change reverted) -> 10.
EVAL = {"width": 64, "layers": 1, "batch": 16, "center": None}
SCENARIOS |= {
    "overshoot_revert": {
        "summary": "A jit eval step (the samples' loss, a one-layer MLP 64 wide, batch 16). Night 2 (commit A) "
                   "scores it by the probability of the true class (a softmax) instead of the argmax: kernel "
                   "launches 8 -> 10, kept. Night 3 empties the eval batch (16 -> 0 rows): XLA folds the whole "
                   "step into two constant copies (launches 10 -> 2, no fusion left). Night 4 reverts night 3: "
                   "night 2's program again; night 5 the same.",
        "nights": 5,
        "jobs": lambda i: {"jax-jit": {"task": "eval", "score": "argmax" if i == 0 else "softmax"}
                                     | EVAL | {"batch": 0 if i == 2 else 16}},
        "changes": [
            {"id": "softmax-score", "night": 2, "job": "jax-jit", "program": "jit_eval_step",
             "what": "accuracy scored on the softmax (mean probability of the true class) instead of the argmax: "
                     "two more kernels (launches 8 -> 10, fusions 8 -> 10)",
             "evidence": [("fusions", "fusion.count", AFTER), ("hlo_instructions", "hlo.instructions", AFTER)]},
            {"id": "empty-batch", "night": 3, "job": "jax-jit", "program": "jit_eval_step",
             "what": "the eval batch is empty (0 rows): XLA folds the step into two copies of NaN constants "
                     "(launches 10 -> 2, fusions 10 -> 0); night 4 reverts it (night 2's program, the same bytes)",
             "evidence": [("fusions", "fusion.count", AFTER), ("hlo_instructions", "hlo.instructions", AFTER)]},
        ],
        "notes": ["night 3 overshoots A's regression: A is fixed there and an improvement (launches 8 -> 2 from "
                  "A's baseline) opens; night 4 returns every figure to where it stood before night 3's change, "
                  "so it reverts night 3: night 3's incidents close (lost, fixed) and A reopens with its own "
                  "first run and commit range; nothing new opens",
                  "night 4's and night 5's dumps are night 2's bytes"],
    },
    "first_night_failures": {
        "summary": "A torch-onnx job (draft export enabled: TORCH_ONNX_ENABLE_DRAFT_EXPORT=1) exports the "
                   "samples' MLP every night, each model in its own folder. From night 2 on it also exports a "
                   "gated model (a data-dependent branch: torch.export's strict and non-strict strategies fail, "
                   "draft export rescues it) and a classifier left in train mode (its dropout makes the accuracy "
                   "check fail), and a new job torch-onnx-nodraft exports the gated model without draft export "
                   "(capture fails: TorchExportError, an error report, no model). Night 4 puts the classifier "
                   "in eval mode.",
        "nights": 5,
        "jobs": lambda i: {
            "torch-onnx": {"task": "onnx_models", "draft_export": True, "mlp": MLP,
                           "models": ["mlp"] + (["gated", "classifier"] if i >= 1 else []),
                           "classifier_train_mode": i in (1, 2)},
            **({"torch-onnx-nodraft": {"task": "onnx_models", "draft_export": False, "models": ["gated"]}}
               if i >= 1 else {}),
        },
        "changes": [
            {"id": "draft-rescued", "night": 2, "job": "torch-onnx", "program": "encoder+decoder(x)",
             "what": "a new model whose torch.export strategies both fail (data-dependent branch); draft export "
                     "rescues it: the report is ..._strategies.md, two capture steps ❌",
             "evidence": [("report_outcome", "onnx.step.torch_export_nonstrict 0", "gated/onnx_export_*.md")]},
            {"id": "train-mode", "night": 2, "job": "torch-onnx", "program": "embed+classify(x)",
             "what": "a new model left in train mode: its dropout differs between PyTorch and ONNX Runtime, the "
                     "accuracy check fails (..._accuracy.md); night 4 exports it in eval mode",
             "evidence": [("max_abs_diff", "onnx.max_abs_diff", "classifier/onnx_export_*.md")]},
            {"id": "eval-mode", "night": 4, "job": "torch-onnx", "program": "embed+classify(x)",
             "what": "the classifier exported in eval mode: the accuracy check passes (max_abs_diff 0.40 -> 2.4e-7)",
             "evidence": [("max_abs_diff", "onnx.max_abs_diff", "classifier/onnx_export_*.md")]},
            {"id": "capture-fails", "night": 2, "job": "torch-onnx-nodraft", "program": "gated",
             "what": "the gated model without draft export: capture fails (TorchExportError), an error report "
                     "(..._pt_export.md) and no model",
             "evidence": [("report_outcome", "onnx.step.torch_export_strict 0; no program", "gated/onnx_export_*.md")]},
        ],
        "notes": ["each failing model is new on night 2 (torch-onnx-nodraft is a new job): a failure the first night "
                  "it is seen, never a new series listed as not a regression",
                  "the MLP's report is the same text every night"],
    },
}
_NEW_FAILURES = ("onnx.errors", "onnx.step.torch_export_nonstrict", "onnx.step.torch_export_strict")
SCENARIOS["overshoot_revert"]["incidents"] = [
    _inc("A", "jax-jit", "jit_eval_step", "regression", 2, None, base=1, change="softmax-score", reopened=((3, 4),),
         metrics=["kernel.launches"]),
    _inc("A-improvement", "jax-jit", "jit_eval_step", "improvement", 2, None, base=1, change="softmax-score",
         metrics=["fusion.count", "fusion.count.kLoop", "memory.peak_live_bytes"]),
    # Night 3 fixes A past its baseline: its launches step from A's baseline (night 1), as its memory figures
    # (night 2 moved them by less than the floor); its peak steps further from A-improvement's (night 2).
    _inc("B", "jax-jit", "jit_eval_step", "improvement", 3, (4, "lost"), base=1, change="empty-batch",
         reverted=True, stacked_on="A-improvement", base_of={"memory.peak_live_bytes": 2},
         metrics=["kernel.launches", *ENTRY_IN, "memory.parameter_bytes", "memory.peak_live_bytes",
                  "memory.report_total_bytes", "memory.temp_bytes", "memory.total_bytes"]),
    _inc("C", "jax-jit", "jit_eval_step", "regression", 3, (4, "fixed"), base=1, change="empty-batch",
         reverted=True, metrics=["fusion.count", "fusion.count.kCustom", "fusion.count.kLoop"]),
]
SCENARIOS["first_night_failures"]["incidents"] = [
    _inc("F-draft", "torch-onnx", "encoder+decoder(x)", "failure", 2, None, base=None, change="draft-rescued",
         metrics=list(_NEW_FAILURES)),
    _inc("F-train", "torch-onnx", "embed+classify(x)", "failure", 2, (4, "fixed"), base=None, change="train-mode",
         metrics=["onnx.step.accuracy"]),
    # In eval mode its outputs agree again: max_abs_diff 0.40 -> 2.4e-7, better than its first value.
    _inc("I-train", "torch-onnx", "embed+classify(x)", "improvement", 4, None, base=3, change="eval-mode",
         metrics=["onnx.max_abs_diff"]),
    _inc("F-capture", "torch-onnx-nodraft", "gated", "failure", 2, None, base=None, change="capture-fails",
         metrics=list(_NEW_FAILURES)),
]


# ---------------------------------------------------------------- workers (compilers' processes)

def _jit(cfg: dict, dump_dir: Path) -> dict:
    """The samples' MLP train step under jax.jit; ``pairwise`` adds the memory blow-up."""
    import jax
    import jax.numpy as jnp
    from samples import jax_jobs

    loss, train_step, _ = jax_jobs._model()
    if cfg.get("pairwise"):
        def pairwise_loss(params, x, y):
            l, logits = loss(params, x, y)
            h = jnp.tanh(x @ params[0]["w"] + params[0]["b"])  # the first hidden layer (XLA shares it)
            return l + 1e-3 * jnp.mean(jnp.tanh(h[:, :, None] * h[:, None, :])), logits

        def train_step(params, x, y):
            (l, _), grads = jax.value_and_grad(pairwise_loss, has_aux=True)(params, x, y)
            return jax.tree.map(lambda p, g: p - jax_jobs.LR * g, params, grads), l

    if cfg.get("microbatches"):
        train_step = _accumulating(loss, cfg["microbatches"])
    params = jax_jobs._init(cfg["width"], cfg["layers"], cfg["seed"])
    x, y = jax_jobs._batch(cfg["batch"], cfg["seed"])
    compiled = jax.jit(train_step, donate_argnums=(0,)).lower(params, x, y).compile()
    return {"programs": [jax_jobs._module_figures(compiled, dump_dir)], "devices": jax.device_count()}


def _accumulating(loss, n: int):
    """The train step with gradient accumulation: a ``lax.scan`` over ``n`` microbatches."""
    import jax
    from samples import jax_jobs

    grad = jax.value_and_grad(loss, has_aux=True)

    def train_step(params, x, y):
        def body(acc, xy):
            (l, _), g = grad(params, *xy)
            return jax.tree.map(lambda a, b: a + b, acc, (l, g)), None

        xs, ys = x.reshape(n, -1, x.shape[-1]), y.reshape(n, -1, y.shape[-1])
        (l, g), _ = jax.lax.scan(body, jax.tree.map(lambda p: p * 0, (0.0, params)), (xs, ys))
        return jax.tree.map(lambda p, g_: p - jax_jobs.LR / n * g_, params, g), l / n

    return train_step


def _pmap(cfg: dict, dump_dir: Path) -> dict:
    """generate_samples' pmap train step; ``extra_psum`` adds an all-reduce XLA cannot combine."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from samples import jax_jobs

    loss, _, _ = jax_jobs._model()
    devices = jax_jobs.DEVICES
    assert jax.device_count() == devices, jax.devices()

    def train_step(params, x, y):
        (l, _), grads = jax.value_and_grad(loss, has_aux=True)(params, x, y)
        grads = lax.psum(grads, "devices")
        new = jax.tree.map(lambda p, g: p - jax_jobs.LR / devices * g, params, grads)
        if not cfg["extra_psum"]:
            return new, lax.pmean(l, "devices")
        act = lax.psum(jnp.sum(jnp.square(jnp.tanh(x @ new[0]["w"] + new[0]["b"]))), "devices")
        return new, lax.pmean(l, "devices"), act

    params = jax_jobs._init(cfg["width"], cfg["layers"], cfg["seed"])
    stacked = [{k: np.broadcast_to(v, (devices, *v.shape)).copy() for k, v in p.items()} for p in params]
    x, y = jax_jobs._batch(max(cfg["batch"] // devices, 1), cfg["seed"], lead=(devices,))
    compiled = jax.pmap(train_step, axis_name="devices", donate_argnums=(0,)).lower(stacked, x, y).compile()
    return {"programs": [jax_jobs._module_figures(compiled, dump_dir)], "devices": jax.device_count()}


def _convnet(cfg: dict):
    import torch
    from torch import nn

    class ConvNet(nn.Module):
        def __init__(self, channels: int, convs: int):
            super().__init__()
            layers, c = [], 1
            for _ in range(convs):
                layers += [nn.Conv2d(c, channels, 3, padding=1), nn.ReLU()]
                c = channels
            self.features = nn.Sequential(*layers)
            self.head = nn.Linear(channels, 10)

        def forward(self, x):
            f = self.features(x).mean(dim=(2, 3))
            if center == "median":  # no ONNX translation for aten.median.dim
                f = f - f.median(dim=-1, keepdim=True).values
            elif center == "mean":
                f = f - f.mean(dim=-1, keepdim=True)
            return torch.log_softmax(self.head(f), dim=-1)

    center = cfg["convnet"].get("center")
    torch.manual_seed(cfg["seed"])
    net = ConvNet(cfg["convnet"]["channels"], cfg["convnet"]["convs"])
    x = torch.randn(4, 1, 12, 12, generator=torch.Generator().manual_seed(cfg["seed"] + 1))
    return net, x


def _tagger(cfg: dict):
    """A third kind of model: token embeddings, one self-attention, a per-token head."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, dim: int):
            super().__init__()
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)

        def forward(self, h):
            q, k, v = self.qkv(h).chunk(3, dim=-1)
            weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
            return self.proj(weights @ v)

    class Tagger(nn.Module):
        def __init__(self, vocab: int, dim: int):
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.attn = Attention(dim)
            self.head = nn.Linear(dim, 5)

        def forward(self, tokens):
            h = self.embed(tokens)
            return torch.log_softmax(self.head(h + self.attn(h)), dim=-1)

    torch.manual_seed(cfg["seed"])
    net = Tagger(cfg["tagger"]["vocab"], cfg["tagger"]["dim"])
    tokens = torch.randint(0, cfg["tagger"]["vocab"], (2, 6), generator=torch.Generator().manual_seed(cfg["seed"] + 2))
    return net, tokens


def _export_name(net, x) -> str | None:
    """The model's name by the rule of Dumpscope's ONNX parser, from torch.export's own graph
    signature (the state's dotted targets, not the placeholder names the parser reads)."""
    import torch
    from torch.export.graph_signature import InputKind

    try:
        specs = torch.export.export(net, (x,)).graph_signature.input_specs
    except Exception:  # torch.export fails: the exporter's draft export may still make the program
        try:
            if os.environ.get("TORCH_ONNX_ENABLE_DRAFT_EXPORT") != "1":
                raise
            specs = torch.export.draft_export(net, (x,)).graph_signature.input_specs
        except Exception:  # no exported program: the report has none either (named after its folder)
            return None
    modules, inputs = {}, {}
    for spec in specs:
        if spec.kind == InputKind.USER_INPUT:
            inputs.setdefault(spec.arg.name)
        elif spec.kind != InputKind.TOKEN:
            top = spec.target.split(".")[0]
            modules.setdefault("[i]" if top.isdigit() else top)
    return "+".join(modules) + "(" + ",".join(inputs) + ")"


def _onnx(cfg: dict, dump_dir: Path, model_path: Path, net=None, x=None) -> dict:
    """``torch_jobs.run_onnx``, on the samples' MLP or on ``net`` with input ``x``, plus its verification."""
    from samples import torch_jobs

    # run_onnx builds its model and input with torch_jobs._net/_inputs: lend it ours.
    saved = torch_jobs._net, torch_jobs._inputs
    if net is not None:
        torch_jobs._net, torch_jobs._inputs = (lambda _cfg: net), (lambda _cfg: (x, None))
    try:
        result = torch_jobs.run_onnx(cfg, dump_dir, model_path)
    finally:
        torch_jobs._net, torch_jobs._inputs = saved
    if net is None:
        net, x = torch_jobs._net(cfg).eval(), torch_jobs._inputs(cfg)[0]
    return result | {"verification": _verification(dump_dir / result["files"]["report"]),
                     "program": _export_name(net.eval(), x)}


def _onnx_noise(cfg: dict, dump_dir: Path, model_path: Path) -> dict:
    """The samples' MLP (same weights every night) verified on the night's own input."""
    import torch
    from samples import torch_jobs

    x = torch.randn(cfg["batch"], torch_jobs.D_IN, generator=torch.Generator().manual_seed(cfg["input_seed"]))
    return _onnx(cfg, dump_dir, model_path, torch_jobs._net(cfg).eval(), x * cfg["input_scale"])


def _onnx_pair(cfg: dict, dump_dir: Path, figures: Path) -> dict:
    """Two exports in one job, each with its own artifacts folder (= its program name)."""
    models = []
    for name in ("mlp", "convnet"):
        (dump_dir / name).mkdir()
        model_path = figures.with_suffix(f".{name}.onnx")
        if name == "mlp":
            result = _onnx(cfg | cfg["mlp"], dump_dir / name, model_path)
        else:
            result = _onnx(cfg, dump_dir / name, model_path, *_convnet(cfg))
        result["files"] = {role: f"{name}/{rel}" for role, rel in result["files"].items()}
        models.append({"name": name} | result)
    return {"models": models}


def _onnx_three(cfg: dict, dump_dir: Path, figures: Path) -> dict:
    """Three exports into the job folder itself (one artifacts folder), in the night's order; each
    report's time stamp is the night's plus its place in that order, so file order = export order."""
    stamp = datetime.fromisoformat(cfg["stamp"])
    models = []
    for k, name in enumerate(cfg["order"]):
        at = cfg | {"stamp": (stamp + timedelta(seconds=k)).isoformat()}
        model_path = figures.with_suffix(f".{name}.onnx")
        if name == "mlp":
            result = _onnx(at | cfg["mlp"], dump_dir, model_path)
        else:
            result = _onnx(at, dump_dir, model_path, *(_convnet if name == "convnet" else _tagger)(cfg))
        models.append({"name": name, "export_position": k + 1} | result)
    return {"models": models}


def _rank(cfg: dict) -> dict:
    """One rank of a ``ranks`` job, in a process started with TORCH_TRACE, RANK, WORLD_SIZE and MASTER_*:
    the step compiled and run three times (two recompiles), its loss all-reduced; torch's own figures."""
    import torch
    import torch.distributed as dist
    from torch._dynamo.utils import set_compilation_metrics_limit
    from torch._logging._internal import trace_log

    set_compilation_metrics_limit(10_000)
    src = Path(tempfile.mkdtemp(prefix="ci-checkout-"))  # a new folder per process, as a runner's checkout
    (src / "rank_model.py").write_text(RANK_MODEL)
    sys.path.insert(0, str(src))
    import rank_model

    torch.manual_seed(cfg["seed"])
    # aot_eager: Dynamo and AOTAutograd as with Inductor, without its C++ build (a log of ~30 kB gzipped, not 180).
    if cfg["early"]:  # before torch.distributed: the log is opened now, its name without the rank
        torch.compile(rank_model.warmup, backend="aot_eager")(torch.randn(8))
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    compiled = torch.compile(rank_model.step, dynamic=False, backend="aot_eager")
    w = torch.randn(16, 8)
    for act, batch in ((rank_model.relu_act, 4), (rank_model.tanh_act, 4), (rank_model.relu_act, 6)):
        loss = compiled(w, torch.randn(batch, 16), act)
        dist.all_reduce(loss)
    dist.destroy_process_group()
    log = next(h._stream_path for h in trace_log.handlers if getattr(h, "_stream_path", None))
    figures = torch_figures()
    kept = ("compile_id", "co_name", "co_filename", "co_firstlineno", "recompile_reason", "guard_count", "fail_type")
    shutil.rmtree(src)  # the checkout goes with its process
    return {"rank": int(os.environ["RANK"]), "log": Path(log).name, "source": str(src / "rank_model.py"),
            "counters": figures["counters"],
            "compilation_metrics": [{k: m[k] for k in kept} for m in figures["compilation_metrics"]]}


# Real torch 2.13 logs (tests/fixtures/torch_trace/ORIGIN.md): the two ranks of the ranked job, and graph_break's log.
FIXTURE_TRACES = HERE.parent / "tests" / "fixtures" / "torch_trace"
RANK_0_LOG = "ranked/dedicated_log_torch_trace_rank_0_ppmobowu.log.gz"
RANK_1_LOG = "ranked/dedicated_log_torch_trace_rank_1_jcbkis1b.log.gz"
BREAK_LOG = "graph_break/dedicated_log_torch_trace_p9d42glu.log.gz"
_RECORD = re.compile(r"^[VIWEC]\d{4} [^\]]*\] (\{.*)$")


def copy_ranks_job(night: dict, job: str, cfg: dict, bucket: Path) -> None:
    """A ``corpus_ranks`` job of one night: real rank logs copied from tests/fixtures/torch_trace (gzipped
    there already: no compiler run), each under the name ``cfg["ranks"]`` gives its rank; torch's
    figures of each read from the log's own compilation_metrics records."""
    import gzip

    job_out = bucket / night["run_id"] / job
    shutil.rmtree(job_out, ignore_errors=True)
    job_out.mkdir(parents=True)
    logs = {}
    for rank, (name, source) in sorted(cfg["ranks"].items()):
        shutil.copyfile(FIXTURE_TRACES / source, job_out / name)
        metrics = [rec["compilation_metrics"] for line in gzip.decompress((FIXTURE_TRACES / source).read_bytes())
                   .decode().splitlines() if (m := _RECORD.match(line))
                   and "compilation_metrics" in (rec := json.loads(m[1]))]
        logs[f"rank_{rank}"] = {"files": {"torch_trace": name}, "log": name.removesuffix(".gz"), "rank": int(rank),
                                "source": f"tests/fixtures/torch_trace/{source}", "compilation_metrics": [
                                    {k: m.get(k) for k in ("co_name", "co_filename", "co_firstlineno",
                                                           "recompile_reason", "compile_id")} for m in metrics]}
    doc = {"job": job, "run_id": night["run_id"], "config": cfg, "versions": versions(),
           "made_by": "data/generate_incident_buckets.py", "notes": NOTES_RANKS, "ranks": logs}
    (job_out / "compiler_figures.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def run_ranks_job(night: dict, job: str, cfg: dict, scratch: Path, bucket: Path) -> None:
    """A ``ranks`` job of one night: two processes (ranks 0 and 1) writing their TORCH_TRACE logs into
    one folder, each log gzipped into the bucket, torch's figures per log in compiler_figures.json."""
    dump_dir = scratch / night["run_id"] / job
    shutil.rmtree(dump_dir, ignore_errors=True)
    dump_dir.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_", "TORCHINDUCTOR_"))}
    env |= {"TORCH_TRACE": str(dump_dir), "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
            "TORCHINDUCTOR_CACHE_DIR": str(dump_dir.parent / f"{job}.inductor-cache")}
    shutil.rmtree(env["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)
    t0 = time.perf_counter()
    procs = []
    for rank in (0, 1):
        figures = dump_dir.parent / f"{job}.rank{rank}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", job, "--config", json.dumps(cfg),
               "--dump-dir", str(dump_dir), "--figures", str(figures)]
        log = open(dump_dir.parent / f"{job}.rank{rank}.log", "w")
        procs.append((subprocess.Popen(cmd, env=env | {"RANK": str(rank)}, stdout=log, stderr=subprocess.STDOUT),
                      figures, log))
    for proc, _, log in procs:
        if proc.wait(timeout=1200) != 0:
            sys.exit(f"{night['run_id']}/{job}: a rank failed (exit {proc.returncode}), see {log.name}")
        log.close()
    job_out = bucket / night["run_id"] / job
    shutil.rmtree(job_out, ignore_errors=True)
    logs = {}
    for _, figures, _ in procs:
        doc = json.loads(figures.read_text())
        name = f"{doc['log']}.gz"
        gzip_to(dump_dir / doc["log"], job_out / name)
        logs[f"rank_{doc['rank']}"] = {"files": {"torch_trace": name}} | doc
    assert sorted(p.name for p in dump_dir.glob("*.log")) == sorted(d["log"] for d in logs.values())
    doc = {"job": job, "run_id": night["run_id"], "config": cfg, "versions": versions(),
           "made_by": "data/generate_incident_buckets.py", "notes": NOTES_RANKS, "ranks": logs}
    (job_out / "compiler_figures.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{night['run_id']}/{job}: {time.perf_counter() - t0:.1f} s", flush=True)


NOTES_RANKS = {
    "compared": ["per rank: the log's name (log) and its rank (rank: the RANK torch.distributed started with)",
                 "compilation_metrics (a few fields of torch's CompilationMetrics): one per compile (3 a rank, plus "
                 "the warm-up in torch-ranks-early), two with a recompile_reason"],
    "informational": ["counters", "source (the model's file: a new temporary folder per process)"],
}


_VERIFIED = re.compile(r"^`(?P<output>[^`]+)`: `max_abs_diff=(?P<abs>[^`]+)`, `max_rel_diff=(?P<rel>[^`]+)`")


def _verification(report: Path) -> dict:
    """The exporter's own verification figures, as its report prints them (per output)."""
    out = {}
    for line in report.read_text().splitlines():
        if m := _VERIFIED.match(line):
            out[m["output"]] = {"max_abs_diff": float(m["abs"]), "max_rel_diff": float(m["rel"])}
    return out


def _eval(cfg: dict, dump_dir: Path) -> dict:
    """The samples' loss as a jitted eval step (``jit_eval_step``), scored by the argmax or by the
    probability the softmax gives the true class."""
    import jax
    import jax.numpy as jnp
    from samples import jax_jobs

    loss, _, _ = jax_jobs._model()

    def eval_step(params, x, y):
        l, logits = loss(params, x, y)
        if cfg["score"] == "argmax":
            return l, jnp.mean(jnp.argmax(logits, -1) == jnp.argmax(y, -1))
        return l, jnp.mean(jnp.sum(jax.nn.softmax(logits) * y, -1))

    params = jax_jobs._init(cfg["width"], cfg["layers"], cfg["seed"])
    x, y = jax_jobs._batch(cfg["batch"], cfg["seed"])
    compiled = jax.jit(eval_step).lower(params, x, y).compile()
    return {"programs": [jax_jobs._module_figures(compiled, dump_dir)], "devices": jax.device_count()}


def _gated(cfg: dict):
    """Halves its hidden units when their mean is large: a branch on data, which torch.export
    cannot trace (strict and non-strict); draft export specialises it on the example input."""
    import torch
    from torch import nn
    from samples import torch_jobs

    class Gated(nn.Module):
        def __init__(self, width: int):
            super().__init__()
            self.encoder = nn.Linear(torch_jobs.D_IN, width)
            self.decoder = nn.Linear(width, torch_jobs.D_OUT)

        def forward(self, x):
            h = torch.relu(self.encoder(x))
            if h.mean() > 0.25:
                h = h * 0.5
            return self.decoder(h)

    torch.manual_seed(cfg["seed"])
    return Gated(cfg["mlp"]["width"] if "mlp" in cfg else 64), torch_jobs._inputs(cfg | {"batch": 16})[0]


def _classifier(cfg: dict):
    """A classifier with dropout, in train mode unless ``classifier_train_mode`` is false."""
    import torch
    from torch import nn
    from samples import torch_jobs

    class Classifier(nn.Module):
        def __init__(self, width: int):
            super().__init__()
            self.embed = nn.Linear(torch_jobs.D_IN, width)
            self.dropout = nn.Dropout(0.1)
            self.classify = nn.Linear(width, torch_jobs.D_OUT)

        def forward(self, x):
            return torch.log_softmax(self.classify(self.dropout(torch.relu(self.embed(x)))), dim=-1)

    torch.manual_seed(cfg["seed"])
    net = Classifier(64)
    net.train(cfg["classifier_train_mode"])
    return net, torch_jobs._inputs(cfg | {"batch": 16})[0]


def _onnx_models(cfg: dict, dump_dir: Path, figures: Path) -> dict:
    """Each model of ``cfg["models"]`` exported into its own folder (= its program name when the
    export makes no program). The models are exported as they are (a model in train mode stays
    so: ``_onnx`` calls ``eval()`` only on the samples' MLP)."""
    from samples import torch_jobs

    models = []
    for name in cfg["models"]:
        (dump_dir / name).mkdir()
        model_path = figures.with_suffix(f".{name}.onnx")
        if name == "mlp":
            result = _onnx(cfg | cfg["mlp"], dump_dir / name, model_path)
        else:
            net, x = (_gated if name == "gated" else _classifier)(cfg)
            saved = torch_jobs._net, torch_jobs._inputs
            torch_jobs._net, torch_jobs._inputs = (lambda _cfg: _AsIs(net)), (lambda _cfg: (x, None))
            try:
                result = torch_jobs.run_onnx(cfg, dump_dir / name, model_path)
            finally:
                torch_jobs._net, torch_jobs._inputs = saved
            result |= {"verification": _verification(dump_dir / name / result["files"]["report"]),
                       "program": _export_name(net, x) if result.get("outcome") == "exported" else None,
                       "train_mode": net.training}
        result["files"] = {role: f"{name}/{rel}" for role, rel in result["files"].items()}
        models.append({"name": name} | result)
    return {"models": models, "draft_export": cfg["draft_export"]}


class _AsIs:
    """A model ``run_onnx`` may call ``eval()`` on without changing its mode (a model left in
    train mode is the case exported)."""

    def __init__(self, net):
        self.net = net

    def eval(self):
        return self.net


def worker(job: str, cfg: dict, dump_dir: Path, figures: Path) -> None:
    task = cfg["task"]
    if cfg.get("draft_export"):  # read when torch.onnx is imported (torch/onnx/_flags.py)
        os.environ["TORCH_ONNX_ENABLE_DRAFT_EXPORT"] = "1"
    if task == "jit":
        result = _jit(cfg, dump_dir)
    elif task == "eval":
        result = _eval(cfg, dump_dir)
    elif task == "onnx_models":
        result = _onnx_models(cfg, dump_dir, figures)
    elif task == "pmap":
        result = _pmap(cfg, dump_dir)
    elif task == "inductor":
        from samples import torch_jobs

        result = torch_jobs.run_inductor(cfg, dump_dir)
    elif task == "onnx":
        result = _onnx(cfg, dump_dir, figures.with_suffix(".onnx"))
    elif task == "onnx_noise":
        result = _onnx_noise(cfg, dump_dir, figures.with_suffix(".onnx"))
    elif task == "onnx_three":
        result = _onnx_three(cfg, dump_dir, figures)
    elif task == "ranks":
        result = _rank(cfg)
    else:
        result = _onnx_pair(cfg, dump_dir, figures)
    figures.write_text(json.dumps(result, indent=1, sort_keys=True))


# ---------------------------------------------------------------- nights, damage, manifest

def nights(name: str) -> list[dict]:
    spec = SCENARIOS[name]
    out = []
    for i in range(spec["nights"]):
        start = FIRST_NIGHT + timedelta(days=i)
        run_id = start.date().isoformat()
        out.append({
            "run_id": run_id,
            "started_at": start.isoformat(),
            # A fake short sha, distinct per scenario and night, the same at every regeneration.
            "commit": hashlib.sha1(f"{name}/{run_id}".encode()).hexdigest()[:7],
            "tags": ["nightly", "cpu", f"incident-bucket:{name}", f"night-{i + 1}"],
            "jobs": spec["jobs"](i),
        })
    return out


def job_config(scenario: str, night_index: int, night: dict, job: str) -> dict:
    """What the worker needs (``task`` says what it compiles), with the fixed stamp for names it writes."""
    offset = {"jax-jit": 5, "jax-pmap": 20, "torch-inductor": 35, "torch-onnx": 95, "torch-ranks": 50,
              "torch-ranks-early": 65, "torch-onnx-nodraft": 125, "torch-ranks-break": 80}[job]
    stamp = datetime.fromisoformat(night["started_at"]) + timedelta(seconds=offset, microseconds=123456)
    return {"scenario": scenario, "seed": SEED} | night["jobs"][job] | {
        "stamp": stamp.replace(tzinfo=None).isoformat(),
        "pid": 42000 + night_index * 7,
    }


def _mid_line(text: bytes, frac: float) -> int:
    """A cut point in the middle of the line that holds ``frac`` of the text (never at a newline)."""
    pos = int(len(text) * frac)
    start = text.rfind(b"\n", 0, pos) + 1
    end = text.find(b"\n", pos)
    return (start + end) // 2


def damage(job_out: Path, dump_dir: Path, files: dict[str, str], plan: dict) -> dict:
    """Cut the planned dumps in ``job_out`` (``dump_dir`` holds the compiler's whole text); what was done."""
    done = {}
    for role, how in sorted(plan.items()):
        rel = files[role]  # the gzipped name
        src = dump_dir / rel.removesuffix(".gz")
        text = src.read_bytes()
        if how["how"] == "text_cut":  # the compiler's text cut mid-line, then gzipped whole
            cut = _mid_line(text, how["at"])
            tmp = dump_dir.parent / "damaged" / src.name
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(text[:cut])
            gzip_to(tmp, job_out / rel)
            done[role] = {"file": rel, "how": how["how"], "text_bytes": len(text), "kept_text_bytes": cut}
        else:  # "gzip_cut": the whole text gzipped, then the compressed bytes cut
            gz = (job_out / rel).read_bytes()
            cut = int(len(gz) * how["at"])
            (job_out / rel).write_bytes(gz[:cut])
            done[role] = {"file": rel, "how": how["how"], "text_bytes": len(text), "gz_bytes": len(gz),
                          "kept_gz_bytes": cut}
    return done


def _keep(rel: Path) -> bool:
    return bool(_KEEP.match(rel.name)) and "tlparse" not in rel.parts


def programs_of(job: str, doc: dict, job_out: Path | None = None) -> dict[str, dict]:
    """The programs of one job's figures, by the name Dumpscope's parser gives them, with key figures
    (``job_out``: the job's folder in the bucket, where a report that names no model is read)."""
    out = {}
    if job.startswith("jax-"):
        for p in doc["programs"]:
            mem, hlo = p["memory_analysis"], p["hlo"]
            out[p["module"]] = {
                "files": sorted(p["files"].values()),
                "temp_size_in_bytes": mem["temp_size_in_bytes"],
                "argument_size_in_bytes": mem["argument_size_in_bytes"],
                "output_size_in_bytes": mem["output_size_in_bytes"],
                "alias_size_in_bytes": mem["alias_size_in_bytes"],
                "hlo_instructions": hlo["instructions"],
                "fusions": hlo["fusions"],
                "all_reduce": hlo["collectives"]["all-reduce"],
            }
    elif "ranks" in doc:
        for entry in doc["ranks"].values():
            # The parser names a log's program when the log has one compiled function, else torch_trace.
            # (a resume function Dynamo makes at a graph break belongs to the function it resumes)
            names = {f"{m['co_name']} at {m['co_filename']}:{m['co_firstlineno']}" for m in entry["compilation_metrics"]
                     if not m["co_name"].startswith("torch_dynamo_resume_in_")}
            program = out.setdefault(names.pop() if len(names) == 1 else "torch_trace", {"files": [], "logs": {}})
            program["files"].append(entry["files"]["torch_trace"])
            program["logs"][entry["files"]["torch_trace"]] = {
                "rank": entry["rank"], "compiles": len(entry["compilation_metrics"]),
                "recompile_reasons": [m["recompile_reason"] for m in entry["compilation_metrics"] if m["recompile_reason"]],
            }
    elif job == "torch-inductor":
        for g in doc["graphs"]:
            out[g["graph"]] = {
                "files": sorted(g["files"].values()),
                "phase": g["phase"],
                "post_fusion_nodes": g["scheduler_post_fusion"]["nodes"],
                "fused_groups": g["scheduler_post_fusion"]["fused_groups"],
                "defined_kernels": len(g["defined_kernels"]),
            }
    else:
        for m in doc.get("models") or [doc]:
            report = m["files"]["report"]
            folder = str(PurePosixPath(report).parent) if "/" in report else job
            # The model as its exported program names it (parser rule, from torch.export's API); a report
            # without one (capture failed) as the parser names it, by the model's first frame in the
            # report's tracebacks (forward at <file>:<line>), else after its folder.
            program = m.get("program") or (job_out and _parsed_program(job_out / report)) or folder
            out[program] = {
                "files": [report],
                **({"folder": folder} if program != m.get("program") and program != folder else {}),
                "outcome": m["outcome"],
                "report_outcome": m["report_outcome"],
                "model_parameters": m["model_parameters"],
                "onnx_graph_nodes": m.get("onnx", {}).get("graph_nodes"),
                "max_abs_diff": max((v["max_abs_diff"] for v in m["verification"].values()), default=None),
            }
    return out


def _parsed_program(path: Path) -> str | None:
    """The program ``transforms.parse.parse_dump`` names a dump by."""
    from transforms.parse import parse_dump

    with open(path, "rb") as f:
        return parse_dump(f, path.name).summary.program


def run_scenario(name: str, scratch: Path, out: Path, *, compile: bool = True) -> dict:
    """Every night of one scenario into ``out/<name>``; its manifest entry (``compile`` False: of
    the nights already there, the compilers not run again)."""
    bucket = out / name
    if compile:
        shutil.rmtree(bucket, ignore_errors=True)
    entry_nights = []
    for i, night in enumerate(nights(name)):
        entry_jobs = {}
        for job in night["jobs"]:
            cfg = job_config(name, i, night, job)
            if compile and cfg["task"] == "ranks":
                run_ranks_job(night, job, cfg, scratch / name, bucket)
            elif compile and cfg["task"] == "corpus_ranks":
                copy_ranks_job(night, job, cfg, bucket)
            elif compile:
                run_job(night, job, scratch / name, bucket, cfg=cfg, script=Path(__file__).resolve(), keep=_keep,
                        made_by="data/generate_incident_buckets.py")
            job_out = bucket / night["run_id"] / job
            figures = job_out / "compiler_figures.json"
            doc = json.loads(figures.read_text())
            if "damage" in cfg and compile:
                dump_dir = scratch / name / night["run_id"] / job
                doc["damaged"] = damage(job_out, dump_dir, doc["programs"][0]["files"], cfg["damage"])
                figures.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            entry_jobs[job] = {"config": {k: v for k, v in cfg.items() if k not in ("stamp", "pid", "scenario")},
                               "programs": programs_of(job, doc, job_out)}
            if "damaged" in doc:
                entry_jobs[job]["damaged"] = doc["damaged"]
        if compile:
            write_run(night, bucket)
        entry_nights.append({k: night[k] for k in ("run_id", "started_at", "commit", "tags")} | {"jobs": entry_jobs})
    return _manifest_entry(name, entry_nights, bucket)


def _manifest_entry(name: str, entry_nights: list[dict], bucket: Path) -> dict:
    spec = SCENARIOS[name]
    run_ids = [n["run_id"] for n in entry_nights]
    # A model whose report names none (its capture failed) is named here by its folder, in the
    # manifest as the parser names it (``programs_of``: its first frame, forward at <file>:<line>).
    alias = {(job, figs["folder"]): program for n in entry_nights for job, e in n["jobs"].items()
             for program, figs in e["programs"].items() if "folder" in figs}

    def named(x: dict) -> dict:
        return x | {"program": alias.get((x["job"], x["program"]), x["program"])}

    changes, incidents = [], []
    for ch in map(named, spec["changes"]):
        opened = run_ids[ch["night"] - 1]
        closed = ch.get("closed")
        lifecycle = {}
        for k, run_id in enumerate(run_ids[ch["night"] - 1:], start=ch["night"]):
            if k == ch["night"]:
                lifecycle[run_id] = "opened"
            elif closed and k == closed["night"]:
                lifecycle[run_id] = closed["as"]
                break
            else:
                lifecycle[run_id] = "open"
        before, after = run_ids[ch["night"] - 2], opened
        figures = {run_id: entry_nights[run_ids.index(run_id)]["jobs"].get(ch["job"], {}).get("programs", {}).get(ch["program"])
                   for run_id in (before, after)}  # None: a program new at the change
        evidence = [{"compiler_figure": fig, "parsed_as": metric, "dump": dump,
                     "per_run": {n["run_id"]: _figure(n, ch, fig) for n in entry_nights}}
                    for fig, metric, dump in ch["evidence"]]
        changes.append({"id": ch["id"], "run": opened, "job": ch["job"], "program": ch["program"]}
                       | ({"kind": ch["kind"]} if "kind" in ch else {})
                       | {"what": ch["what"], "evidence": evidence, "compiler_figures_before_after": figures})
        if "incidents" in spec:
            continue  # the incident model's expectations: below
        incidents.append({"change": ch["id"], "job": ch["job"], "program": ch["program"], "kind": ch["kind"],
                          "opened": opened, "closed": (run_ids[closed["night"] - 1] if closed else None),
                          "closed_as": closed["as"] if closed else None, "lifecycle": lifecycle,
                          "state_at_last_run": lifecycle[run_ids[-1]] if run_ids[-1] in lifecycle else closed["as"]})
    if "incidents" in spec:
        incidents = _expected_incidents([named(inc) for inc in spec["incidents"]], run_ids, bucket)
    return {
        "summary": spec["summary"],
        "notes": spec.get("notes", []),
        "nights": entry_nights,
        "changes": changes,
        "expected_incidents": incidents,
    }


def _expected_incidents(expected: list[dict], run_ids: list[str], bucket: Path) -> list[dict]:
    """The designed incidents (``_inc``) with run ids, their status at each run from the opening
    one, and each step's baseline -> value as the project's parser reads the dumps (per series)."""
    from transforms.trends.rules import ZERO_WHEN_ABSENT

    from transforms.trends.incident_walk import healthy_value

    figures = _series_figures(bucket, run_ids)
    out = []
    for inc in expected:
        closed = inc["closed"]
        last = closed[0] if closed else len(run_ids)
        gaps = {c: r for c, r in inc.get("reopened", [])}
        how = "lost" if inc["kind"] == "improvement" else "fixed"
        lifecycle, k = {}, inc["opened"]
        while k <= last:
            if k in gaps:  # closed there, then reopened by a revert: not listed in between
                lifecycle[run_ids[k - 1]] = how
                k = gaps[k]
                lifecycle[run_ids[k - 1]] = "open"
            else:
                lifecycle[run_ids[k - 1]] = "new" if k == inc["opened"] else closed[1] if closed and k == last else "open"
            k += 1
        after = figures[run_ids[inc["opened"] - 1]].get((inc["job"], inc["program"]), {})
        if inc["base"] is None:  # first seen when it opened: its failures step from a passing figure
            before = {series: {m: healthy_value(m) for m in inc["metrics"] if healthy_value(m) is not None}
                      | {_STATUS: "ok"} for series in after}
        else:
            before = figures[run_ids[inc["base"] - 1]].get((inc["job"], inc["program"]), {})
        steps = []
        for series in sorted(before.keys() & after.keys()):
            if "dump.status" in inc["metrics"] and after[series][_STATUS] != "ok" == before[series][_STATUS]:
                steps.append({"series": series, "metric": "dump.status", "before": None, "after": None})
            for metric in inc["metrics"]:
                zero = 0 if re.search(ZERO_WHEN_ABSENT, metric) else None
                base = before if metric not in inc.get("base_of", {}) else \
                    figures[run_ids[inc["base_of"][metric] - 1]].get((inc["job"], inc["program"]), {})
                b, a = base.get(series, {}).get(metric, zero), after[series].get(metric, zero)
                if b is not None and a is not None and b != a:
                    steps.append({"series": series, "metric": metric, "before": b, "after": a})
        out.append({"name": inc["name"], "change": inc["change"], "job": inc["job"], "program": inc["program"],
                    "kind": inc["kind"], "opened": run_ids[inc["opened"] - 1],
                    "closed": run_ids[closed[0] - 1] if closed else None, "closed_as": closed[1] if closed else None,
                    "stacked_on": inc["stacked_on"], "lifecycle": lifecycle,
                    "state_at_last_run": lifecycle.get(run_ids[-1], closed and closed[1]),
                    "metrics": inc["metrics"], "steps": steps}
                   | ({"reopened": [[run_ids[c - 1], run_ids[r - 1]] for c, r in inc["reopened"]]}
                      if inc.get("reopened") else {})
                   | ({"reverted": True} if inc.get("reverted") else {}))
    return out


def _series_figures(bucket: Path, run_ids: list[str]) -> dict[str, dict[tuple[str, str], dict[str, dict]]]:
    """run_id -> (job, program) -> series -> metrics, as ``transforms.parse.parse_dump`` reads each dump
    (a TORCH_TRACE log of several compiled functions: each its own program and figures; the rank logs of
    a job: each program's dynamo.rank_divergence, as tests/incident_oracle.py computes it)."""
    sys.path.insert(0, str(HERE.parent))
    from tests.incident_oracle import divergence, rank_profiles
    from transforms.parse import parse_dump
    from transforms.trends.series import normalize_program

    def series_id(*parts: str | None) -> str:  # as assign_series joins them (no series_id function since fb2d05d)
        return "/".join(p for p in parts if p)

    out = {}
    for run_id in run_ids:
        per = out.setdefault(run_id, {})
        ranks: dict[str, dict[int, dict]] = {}
        for path in sorted((bucket / run_id).rglob("*.gz")):
            job = path.relative_to(bucket / run_id).parts[0]
            with open(path, "rb") as f:
                parsed = parse_dump(f, str(path.relative_to(bucket)))
            s = parsed.summary
            for program, metrics in (s.programs if len(s.programs) > 1 else {s.program: s.metrics}).items():
                sid = series_id(job, normalize_program(program), s.kind.value, s.stage)
                per.setdefault((job, program), {})[sid] = dict(metrics) | {_STATUS: s.status.value}
            if s.kind.value == "torch_trace" and (s.stage or "").startswith("rank_") and s.status.value == "ok":
                ranks.setdefault(job, {})[int(s.stage[5:])] = rank_profiles(parsed.tables)
        for job, logs in ranks.items():
            for program, differing in divergence(logs).items():
                for (j, named), figures in per.items():
                    if j == job and normalize_program(named) == program:
                        for sid in figures:
                            if "/torch_trace/rank_" in sid:
                                figures[sid]["dynamo.rank_divergence"] = differing
    return out


_STATUS = "__status__"  # the dump's parse status, beside its metrics (failure steps about dumps)


def _figure(night: dict, change: dict, key: str):
    """One key figure of the changed program in one night (``damaged``: the files cut that night)."""
    job = night["jobs"].get(change["job"], {})
    if key == "damaged":
        return sorted(d["file"] for d in job.get("damaged", {}).values())
    program = job.get("programs", {}).get(change["program"])
    return None if program is None else program.get(key)  # None: the program (or its job) not there that night


def write_manifest(out: Path, entries: dict[str, dict], *, every: bool = True) -> None:
    """The manifest with ``entries`` (``every``: all the scenarios were made now; else the others'
    entries and the versions they were made with stay, and ``entries`` say their own)."""
    path = out / "MANIFEST.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    if not every and old.get("versions") and old["versions"] != versions():
        entries = {name: entry | {"versions": versions()} for name, entry in entries.items()}
    scenarios = (old.get("scenarios") or {}) | entries
    doc = {
        "made_by": "data/generate_incident_buckets.py",
        "command": COMMAND,
        "versions": versions() if every or not old.get("versions") else old["versions"],
        "layout": "<scenario>/<run_id>/run.json and <scenario>/<run_id>/<job>/<dump>.gz (+ compiler_figures.json "
                  "per job: the compilers' own figures); the sample bucket's layout (data/README.md)",
        "conventions": {
            "program": "the program name transforms.parse.parse_dump gives the dumps (XLA module, Inductor graph "
                       "folder, the model an ONNX report's exported program names: inp+blocks+head(x)); the "
                       "series name strips counters (transforms.trends.series.normalize_program)",
            "kind": "regression (a figure got worse), improvement, failure (dumps damaged or a compile/export "
                    "failed), change (figures stepped with no worse direction; older entries only)",
            "lifecycle": "state of the incident at each run from the one that opened it. Entries with stacked_on "
                         "(the incident model of .briefs/incident_model.md): new, open, fixed, lost, accepted. "
                         "Older entries: opened, open, fixed, accepted",
            "stacked_on": "entries of the incident model: the name of the expected incident whose steps this one's "
                          "stepped further from when it opened (null: none)",
            "steps": "entries of the incident model: every step of the incident, per series and metric, its "
                     "baseline (before) and its value in the opening run (after), as the parser reads the dumps; "
                     "metrics: their set. tests/incident_oracle.py computes the same from the dumps",
            "evidence": "per change: the compiler figure that shows it, the Dumpscope metric that reads the same "
                        "figure in the named dump (tests/test_incident_buckets.py checks they agree), per run",
            "compiler_figures_before_after": "key figures from compiler_figures.json at the night before the "
                                             "change and at the change (XLA memory_analysis and HloModule, "
                                             "Inductor scheduler nodes, the ONNX exporter's outcome, onnx.load, "
                                             "and its report's verification)",
        },
        "scenarios": dict(sorted(scenarios.items())),
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE.parent / "tests" / "incident_buckets")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/dumpscope-incidents"))
    ap.add_argument("--scenarios", nargs="*", choices=sorted(SCENARIOS), help="scenarios to make (default: all)")
    ap.add_argument("--manifest-only", action="store_true",
                    help="write the scenarios' manifest entries from the nights already in --out (no compiler runs)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--dump-dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--figures", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, json.loads(args.config), args.dump_dir, args.figures)

    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    entries = {}
    for name in args.scenarios or SCENARIOS:
        t1 = time.perf_counter()
        print(f"== {name}", flush=True)
        entries[name] = run_scenario(name, args.scratch, args.out, compile=not args.manifest_only)
        print(f"{name}: {time.perf_counter() - t1:.0f} s", flush=True)
    write_manifest(args.out, entries, every=not args.scenarios)
    print(f"done in {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
