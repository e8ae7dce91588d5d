"""Dump parsers: one module per format and ``formats``, which sniffs a file's kind and finds its
parser.

- XLA: ``xla_hlo`` (HLO module text; ``hlo_lines`` joins its statements, ``xla_shapes`` holds
  its vocabulary and tables, ``hlo_checks`` what XLA's parser refuses in text that reads), ``xla_buffers`` (buffer assignment and its side files;
  ``xla_live_ranges`` its ``HloLiveRange`` listing), ``xla_memory_report`` (memory usage report).
- TorchInductor: ``inductor_ir`` (scheduler IR), ``inductor_code`` (``output_code.py``);
  ``torch_trace`` (a torch.compile structured trace, TORCH_TRACE log).
- ONNX: ``onnx_report`` (export report; ``onnx_report_sections`` scans its hard sections).

Each format module is a pure streaming generator over lines that follows the contract in
``transforms.records``. May import: ``transforms.records`` and each other; never
``transforms.trends`` or ``transforms.site``.
"""
