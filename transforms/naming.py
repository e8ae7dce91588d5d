"""Program names for dumps whose text does not name the program.

XLA's side files (buffer assignment, memory usage report) and Inductor's IR files
carry no module or graph name; the compilers put it in the path instead:

- XLA: ``module_0007.jit_train_step.cpu_after_optimizations-buffer-assignment.txt``
  → ``jit_train_step`` (the module name, as the HLO text of the same dump prints it).
- Inductor: ``.../torchinductor/model__0_forward_1.0/ir_post_fusion.txt``
  → ``model__0_forward_1.0`` (the graph's debug directory).
- ONNX export reports: ``<artifacts dir>/onnx_export_<timestamp>_<outcome>.md``
  → the artifacts directory, or ``onnx_export`` for a report with no directory (its own name
  changes every run): only for a report that names no model, which the parser names by its
  exported program or, when capture failed, by the model's frame in its tracebacks.
- torch.compile structured traces (``TORCH_TRACE``): ``dedicated_log_torch_trace_[rank_<n>_]<random>.log``
  → ``torch_trace``. The name is random per process and one log holds every function the
  process compiled; the parser names the program when the log has only one, and gives each
  program's figures apart (``DumpSummary.programs``). Ranks differ by stage (``rank_<n>``):
  the rank the name holds, else the one the log's records carry; never the random part.
- Anything else: the file name without its extensions.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from transforms.reading import strip_gz

# module_<id>.<name>.<what>: <what> is a stage (before_optimizations,
# cpu_after_optimizations, sm_8.0_gpu_after_optimizations...), or a numbered pass dump.
_XLA_DUMP_NAME = re.compile(
    r"^module_\d+\.(?P<program>.+?)\.(?:\d{4}\.|[\w.]*?(?:before|after)_optimizations)"
)
_ONNX_REPORT_NAME = re.compile(r"^onnx_export_[\d_-]+_\w+\.md$")
_TORCH_TRACE_NAME = re.compile(r"^dedicated_log_torch_trace_[\w.-]*\.log$")
_INDUCTOR_FILES = frozenset({"ir_pre_fusion.txt", "ir_post_fusion.txt", "output_code.py"})


def program_from_path(path: str) -> str:
    parts = PurePosixPath(path.replace("\\", "/"))
    name = strip_gz(parts.name)
    if (m := _XLA_DUMP_NAME.match(name)) is not None:
        return m["program"]
    if name in _INDUCTOR_FILES and parts.parent.name:
        return parts.parent.name
    if _TORCH_TRACE_NAME.match(name):
        return "torch_trace"
    if _ONNX_REPORT_NAME.match(name):
        return parts.parent.name or "onnx_export"
    return name.split(".", 1)[0] or name
