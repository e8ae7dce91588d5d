"""Which parser module reads which dump kind, and how a file is classified.

Each format module exports ``PARSER_VERSION``, ``TABLES``, ``TABLE_DOCS``,
``sniff(name, head)``, ``stage_from_name(name)`` and ``parse(lines)``
(contract in ``transforms.records``). Sniffing asks the most specific formats
first; a file no format claims by its text is then claimed by its name
(``kind_from_name``: the names the compilers give their dumps), so that an empty,
binary or damaged dump is reported as that kind's failure. A file claimed neither
way is ``unknown``: recorded, never an error.
"""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType

import polars as pl

from transforms.records import DumpKind

_BINARY_PROBE = 8192

# Order matters: side files of XLA and Inductor are claimed before generic HLO text; a
# TORCH_TRACE log (glog-prefixed JSON lines) first, as its payloads quote the other formats.
_MODULES: dict[DumpKind, str] = {
    DumpKind.TORCH_TRACE: "transforms.parsers.torch_trace",
    DumpKind.XLA_BUFFER_ASSIGNMENT: "transforms.parsers.xla_buffers",
    DumpKind.XLA_MEMORY_USAGE_REPORT: "transforms.parsers.xla_memory_report",
    DumpKind.INDUCTOR_IR: "transforms.parsers.inductor_ir",
    DumpKind.INDUCTOR_OUTPUT_CODE: "transforms.parsers.inductor_code",
    DumpKind.ONNX_REPORT: "transforms.parsers.onnx_report",
    DumpKind.XLA_HLO: "transforms.parsers.xla_hlo",
}


@cache
def module_for(kind: DumpKind) -> ModuleType:
    return importlib.import_module(_MODULES[kind])


def known_kinds() -> list[DumpKind]:
    return list(_MODULES)


# What each kind is, for errors: "... is binary, not <this>".
_DESCRIPTIONS: dict[DumpKind, str] = {
    DumpKind.XLA_BUFFER_ASSIGNMENT: "an XLA buffer assignment, values or live-range listing",
    DumpKind.XLA_MEMORY_USAGE_REPORT: "an XLA memory usage report",
    DumpKind.INDUCTOR_IR: "an Inductor scheduler IR dump",
    DumpKind.INDUCTOR_OUTPUT_CODE: "an Inductor output_code.py",
    DumpKind.ONNX_REPORT: "a PyTorch ONNX export report",
    DumpKind.TORCH_TRACE: "a torch.compile structured trace (TORCH_TRACE log)",
    DumpKind.XLA_HLO: "XLA HLO module text",
}


def classify(name: str, head: str) -> DumpKind:
    """The kind of a dump from its base name (``.gz`` stripped) and decoded head."""
    # Binary: no text dump format starts with NUL bytes. Only the start counts, so a
    # text dump with a damaged stretch further in is still read (and reported).
    if is_binary(head):
        return DumpKind.UNKNOWN
    for kind in _MODULES:
        if module_for(kind).sniff(name, head):
            return kind
    return DumpKind.UNKNOWN


def kind_from_name(name: str) -> DumpKind | None:
    """The kind a base name (``.gz`` stripped) promises, whatever the file holds: a name
    some format gives a stage (``*.after_optimizations.txt``, ``*-buffer-assignment.txt``,
    ``ir_post_fusion.txt``, ``output_code.py``, ``onnx_export_*.md``,
    ``dedicated_log_torch_trace_*.log``...), else None."""
    for kind in _MODULES:
        if module_for(kind).stage_from_name(name) is not None:
            return kind
    return None


def is_binary(head: str) -> bool:
    return "\x00" in head[:_BINARY_PROBE]


def describe(kind: DumpKind) -> str:
    return _DESCRIPTIONS.get(kind, "a known dump format")


def parser_version(kind: DumpKind) -> int:
    return 0 if kind is DumpKind.UNKNOWN else module_for(kind).PARSER_VERSION


def all_tables() -> dict[str, pl.Schema]:
    """Every records table any parser yields, with its declared schema."""
    tables: dict[str, pl.Schema] = {}
    for kind in _MODULES:
        tables.update(module_for(kind).TABLES)
    return tables


def all_table_docs() -> dict[str, dict[str, str]]:
    docs: dict[str, dict[str, str]] = {}
    for kind in _MODULES:
        docs.update(module_for(kind).TABLE_DOCS)
    return docs
