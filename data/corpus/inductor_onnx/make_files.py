"""Make the generated files of data/corpus/inductor_onnx/ (see MANIFEST.json there).

    .venv-samples/bin/python data/corpus/inductor_onnx/make_files.py /tmp/inductor_onnx

Runs with torch 2.13.0+cpu (.venv-samples). Two files, each written by torch itself:

- torch_logs_ir_post_fusion.log: the stderr of a training step (forward + backward) of a
  small MLP under ``TORCH_LOGS=ir_post_fusion TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``, as a
  user captures it with ``2> file``: glog-style log prefixes on every line, one
  ``AFTER FUSION`` record per compiled graph, and the UserWarning torch prints first.
- onnx_export_<timestamp>_success.md: ``torch.onnx.export(model, args, dynamo=True,
  report=True, verify=True, artifacts_dir=OUT)`` of a small self-attention block.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys


def _mlp_step() -> None:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(32, 64), nn.Linear(64, 10)

        def forward(self, x):
            return F.log_softmax(self.l2(F.gelu(self.l1(x))), -1)

    model = torch.compile(MLP())
    loss = model(torch.randn(8, 32)).sum()
    loss.backward()


def _attention_report(out: pathlib.Path) -> None:
    import torch

    torch.manual_seed(0)

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.proj, self.norm = torch.nn.Linear(16, 48), torch.nn.Linear(16, 16), torch.nn.LayerNorm(16)

        def forward(self, x):
            q, k, v = self.qkv(self.norm(x)).chunk(3, -1)
            att = torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1)
            return x + self.proj(att @ v)

    torch.onnx.export(Attention().eval(), (torch.randn(2, 5, 16),), str(out / "model.onnx"), dynamo=True,
                      report=True, verify=True, artifacts_dir=str(out))


if __name__ == "__main__":
    if sys.argv[1] == "--mlp-step":
        _mlp_step()
        sys.exit(0)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TORCH_LOGS="ir_post_fusion", TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    with open(out / "torch_logs_ir_post_fusion.log", "wb") as err:
        subprocess.run([sys.executable, __file__, "--mlp-step"], env=env, stderr=err, check=True)
    _attention_report(out)
