"""Dump parsers: one module per format (XLA HLO text, buffer assignment and its side files,
memory usage report, Inductor IR and output_code.py, ONNX export report) and ``formats``,
which sniffs a file's kind and finds its parser.

Each format module is a pure streaming generator over lines that follows the contract in
``transforms.records``. May import: ``transforms.records`` and each other; never
``transforms.trends`` or ``transforms.site``.
"""
