"""XLA HLO text vocabulary for ``transforms.parsers.xla_hlo``: result shapes, opcode classes,
instruction and metadata syntax, and the declared tables the parser yields.

Pure helpers; nothing here raises on bad text (it returns None or nulls instead).

``shape_info`` turns XLA shape text into (shape, layout, dtype, elements, bytes, XLA
buffer bytes). Input: the shape of one HLO instruction as XLA prints it, in any XLA version's
syntax: ``f32[8,16]{1,0}``, ``bf16[]``, ``s4[5]{0:E(4)}``, ``f32[<=10,3]``,
``(f32[2]{0}, /*index=5*/s32[])``, ``token[]``, ``()``, TPU layouts with tiling and
memory space (``{1,0:T(8,128)S(1)}``).

Guarantees: never raises; text it cannot read gives ``dtype=None`` and null sizes.
``shape`` is the text without layouts and ``/*index=N*/`` comments, so the same
array prints the same before and after layout assignment. ``bytes`` sums the array
leaves (sub-byte types packed per array and rounded up, pred 1 byte, token 0);
``buffer_bytes`` adds XLA's 8-byte pointer per tuple element (the tuple index
table), which is how ``CompiledMemoryStats`` sizes arguments and outputs.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

import polars as pl

from transforms.parsers.hlo_lines import normalize_shape
from transforms.records import COLLECTIVE_OPS, COLLECTIVES  # defined once, with the rule of kernel.collectives

# Bits per element. Sub-byte types are packed (XLA's E(n) layouts say so explicitly
# after layout assignment; before it the packing is implied).
ELEMENT_BITS: dict[str, int] = {
    "pred": 8, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f4e2m1fn": 4, "f8e8m0fnu": 8, "token": 0, "opaque": 64,
}
POINTER_BYTES = 8

_LEAF = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](?:\{([^}]*)\})?")
_LAYOUT = re.compile(r"\{[^{}]*\}")
_COMMENT = re.compile(r"/\*.*?\*/")
_ELEMENT_SIZE = re.compile(r"E\((\d+)\)")
_FIRST_NUMBER = re.compile(r"\d+")


class ShapeInfo(NamedTuple):
    shape: str
    layout: str | None
    dtype: str | None
    elements: int | None
    bytes: int | None
    buffer_bytes: int | None


def element_bits(dtype: str) -> int | None:
    """Known widths; for a type from a newer XLA (``f8e3m4``, ``f6e2m3fn``) the first number in its name."""
    bits = ELEMENT_BITS.get(dtype)
    if bits is None and dtype.startswith(("s", "u", "f", "c", "bf")):
        m = _FIRST_NUMBER.search(dtype)
        bits = int(m[0]) if m else None
    return bits


@lru_cache(maxsize=4096)  # a tuple of hundreds of elements repeats a few array shapes
def _leaf(dtype: str, dims: str, layout: str | None) -> tuple[int | None, int | None]:
    elements = 1
    if dims:
        for d in dims.split(","):
            d = d.strip().removeprefix("<=")  # a bounded dynamic dim counts at its bound
            if not d.isdigit():
                return None, None  # "?" (unbounded dynamic) or unreadable
            elements *= int(d)
    if dtype == "token":
        return 0, 0
    bits = element_bits(dtype)
    if layout and (m := _ELEMENT_SIZE.search(layout)):
        bits = int(m[1])
    if bits is None:
        return elements, None
    return elements, -(-elements * bits // 8)


def shape_info(text: str) -> ShapeInfo:
    text = text.strip()
    if text[:2] == "b(" and text[-1:] == ")":  # a buffer shape (b(f32[2,4])): the array it holds
        inner = shape_info(text[2:-1])
        return inner._replace(shape=f"b({inner.shape})")
    if "/*" in text:
        text = _COMMENT.sub("", text)
    if " " in text or "\t" in text:  # tuple elements, or hand-written spacing (f32[8, 8]{1, 0})
        text = normalize_shape(text)
    canonical = _LAYOUT.sub("", text) if "{" in text else text
    leaves = _LEAF.findall(text)
    if not text.startswith("("):
        if len(leaves) != 1 or not text.startswith(leaves[0][0] + "["):
            return ShapeInfo(canonical, None, None, None, None, None)
        dtype, dims, layout = leaves[0]
        elements, nbytes = _leaf(dtype, dims, layout)
        return ShapeInfo(canonical, layout or None, dtype, elements, nbytes, nbytes)
    elements: int | None = 0
    nbytes: int | None = 0
    for dtype, dims, layout in leaves:
        e, b = _leaf(dtype, dims, layout)
        elements = None if e is None or elements is None else elements + e
        nbytes = None if b is None or nbytes is None else nbytes + b
    # Every tuple element is a leaf or a nested tuple; each takes one pointer slot.
    slots = len(leaves) + canonical.count("(") - 1
    buffer = None if nbytes is None else nbytes + POINTER_BYTES * slots
    return ShapeInfo(canonical, None, "tuple", elements, nbytes, buffer)


# -- the tables transforms.parsers.xla_hlo yields ------------------------------------------------------

_S, _I32, _I64, _B = pl.String, pl.Int32, pl.Int64, pl.Boolean
TABLES: dict[str, pl.Schema] = {
    "hlo_modules": pl.Schema({
        "module": _S, "module_index": _I32, "is_scheduled": _B, "entry_computation": _S,
        "computations": _I32, "instructions": _I32, "fusions": _I32, "kernel_launches": _I32,
        "entry_parameter_bytes": _I64, "entry_output_bytes": _I64, "complete": _B, "lineno": _I32}),
    "hlo_computations": pl.Schema({
        "module": _S, "module_index": _I32, "name": _S, "is_entry": _B, "role": _S,
        "instructions": _I32, "kernel_launches": _I32, "lineno": _I32}),
    "hlo_instructions": pl.Schema({
        "module": _S, "module_index": _I32, "computation": _S, "name": _S, "opcode": _S,
        "shape": _S, "layout": _S, "dtype": _S, "elements": _I64, "bytes": _I64, "is_root": _B,
        "fusion_kind": _S, "called_computations": pl.List(_S), "custom_call_target": _S,
        "op_type": _S, "op_name": _S, "source_file": _S, "source_line": _I32, "lineno": _I32}),
}
_MOD = {"module": "HloModule name exactly as printed (XLA's unique suffix kept, e.g. SyncTensorsGraph.2143).",
        "module_index": "0-based position of the module among the HloModule blocks of the file.",
        "lineno": "1-based line of the header in the dump file."}
TABLE_DOCS: dict[str, dict[str, str]] = {
    "hlo_modules": {
        "": "One row per HloModule header of an XLA HLO text dump.", **_MOD,
        "is_scheduled": "True when the header says is_scheduled=true (an optimized, scheduled module).",
        "entry_computation": "Name of the ENTRY computation (null if the dump was cut before it).",
        "computations": "Computations in the module (fusion bodies and reducers included).",
        "instructions": "Instructions in the module, all computations.",
        "fusions": "fusion instructions in the module.",
        "kernel_launches": "Static count of non-structural instructions in executed computations "
                           "(ENTRY and what it reaches through call/while/conditional).",
        "entry_parameter_bytes": "Bytes of the ENTRY parameters as XLA sizes buffers (tuple index tables included).",
        "entry_output_bytes": "Bytes of the ENTRY root as XLA sizes buffers (tuple index tables included).",
        "complete": "False when the module was cut (no closed ENTRY computation).",
        "lineno": "1-based line of the HloModule header."},
    "hlo_computations": {
        "": "One row per computation of each HloModule.", **_MOD, "name": "Computation name without the % prefix.",
        "is_entry": "True for the ENTRY computation.",
        "role": "How the module uses it: entry, fusion (calls= of fusion), reducer (to_apply of reduce, all-reduce, "
                "scatter, sort, ... and select/scatter of select-and-scatter), called (to_apply of call, custom-call "
                "called computations), while_body, while_condition, branch (conditional), async (calls= of async ops), "
                "other (not referenced in the module text seen).",
        "instructions": "Instructions in the computation.",
        "kernel_launches": "Non-structural instructions in it (counted into the module's launches only if executed).",
        "lineno": "1-based line of the computation header."},
    "hlo_instructions": {
        "": "One row per HLO instruction.", **_MOD, "computation": "Computation holding the instruction.",
        "name": "Instruction name without the % prefix.",
        "opcode": "HLO opcode as printed (unknown opcodes of newer XLA kept as-is).",
        "shape": "Result shape without layouts and /*index=N*/ comments, e.g. f32[8,16] or (f32[2], s32[]).",
        "layout": "Layout of an array result as printed inside {...} (tiling, E(n), S(n) kept); null for tuples/none.",
        "dtype": "Element type (f32, bf16, s4, pred, ...); 'tuple' for tuples, 'token' for tokens.",
        "elements": "Number of elements (summed over tuple leaves; bounded dynamic dims at their bound; null if unknown).",
        "bytes": "Result bytes: elements x element width over all array leaves, sub-byte types packed and "
                 "rounded up per array, pred 1, token 0; tuple index tables not included.",
        "is_root": "True for the ROOT instruction of its computation.",
        "fusion_kind": "kind= of a fusion instruction (kLoop, kInput, kOutput, kCustom, ...), else null.",
        "called_computations": "Computations named by calls=, to_apply=, condition=, body=, branch_computations=, "
                               "true/false_computation=, called_computations=, select=/scatter=; null if none.",
        "custom_call_target": "custom_call_target of a custom-call, else null.",
        "op_type": "metadata op_type (escapes kept as printed).", "op_name": "metadata op_name (escapes kept as printed).",
        "source_file": "metadata source_file, or the innermost frame of stack_frame_id resolved through the module's "
                       "FileNames/FileLocations/StackFrames tables.",
        "source_line": "metadata source_line (or the resolved stack frame's line).",
        "lineno": "1-based line of the instruction in the dump file."},
}


# -- opcodes ---------------------------------------------------------------------------

# Not kernels: bookkeeping that moves no data or only wires computations together.
STRUCTURAL = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "call", "while", "conditional",
    "after-all", "add-dependency", "opt-barrier", "domain", "partition-id", "replica-id"})
# Opcodes that never name a computation and carry nothing beyond the common columns; every
# other opcode (fusion, custom-call, callers, collectives, opcodes of a newer XLA) is looked at closely.
SIMPLE = frozenset("""
parameter constant get-tuple-element tuple bitcast after-all add-dependency opt-barrier domain partition-id
replica-id abs add and atan2 bitcast-convert broadcast cbrt ceil cholesky clamp clz compare complex concatenate
convert convolution copy copy-start copy-done cosine divide dot dynamic-reshape dynamic-slice dynamic-update-slice erf
exponential exponential-minus-one fft floor gather get-dimension-size imag iota is-finite log log-plus-one logistic
maximum minimum multiply negate not or pad popcnt power real reduce-precision remainder reshape reverse rng
rng-bit-generator rng-get-and-update-state round-nearest-afz round-nearest-even rsqrt select set-dimension-size
shift-left shift-right-arithmetic shift-right-logical sign sine slice sqrt stochastic-convert subtract tan tanh
transpose triangular-solve xor infeed outfeed send send-done recv recv-done all-reduce-done all-gather-done
collective-permute-done batch-norm-grad batch-norm-inference batch-norm-training""".split())  # noqa: SIM905
EXECUTES = frozenset({"call", "while", "conditional"})  # the callee runs as part of the caller's schedule
# Where each opcode names its computations, as XLA prints it (", attr=").
CALL_ATTRS: dict[str, tuple[tuple[str, str], ...]] = {
    op: tuple((f", {a}=", a) for a in attrs) for op, attrs in {
        "fusion": ("calls",), "call": ("to_apply",), "while": ("condition", "body"),
        "conditional": ("branch_computations", "true_computation", "false_computation"),
        "select-and-scatter": ("select", "scatter"), "custom-call": ("to_apply", "called_computations"),
        **dict.fromkeys(("all-reduce", "all-reduce-start", "reduce-scatter", "reduce", "reduce-window", "scatter",
                         "sort", "map"), ("to_apply",)),
        **dict.fromkeys(("all-gather", "all-gather-start", "all-to-all", "collective-permute",
                         "collective-permute-start", "ragged-all-to-all", "collective-broadcast",
                         "all-to-all-start", "all-to-all-done", "ragged-all-to-all-start",
                         "ragged-all-to-all-done", "collective-broadcast-start", "collective-broadcast-done"), ()),
        **dict.fromkeys(("reduce-scatter-start",), ("to_apply",)),
    }.items()}
_ROLE_BY_ATTR = {"condition": "while_condition", "body": "while_body", "branch_computations": "branch",
                 "true_computation": "branch", "false_computation": "branch", "called_computations": "called",
                 "select": "reducer", "scatter": "reducer"}


@lru_cache(maxsize=1024)  # asked once per edge; a module has thousands of edges and a few (op, attr) pairs
def role(op: str, attr: str) -> str:
    """What a computation is to the instruction naming it with ``attr`` (to an <op>-start of XLA's async
    syntax sugar, what it is to the op it wraps)."""
    op = wrapped_opcode(op) or op
    if r := _ROLE_BY_ATTR.get(attr):
        return r
    if op == "fusion":
        return "fusion"
    if op.startswith("async"):
        return "async"
    if attr == "calls" or op in ("call", "custom-call"):
        return "called"
    return "reducer"  # to_apply of reduce, all-reduce, scatter, sort, map, reduce-window, ...


# -- instruction and metadata syntax -------------------------------------------------------

# Shape: an array with an optional layout (layouts hold parens: T(8,128), E(4), S(1)) or a tuple up to
# the first ") opcode(" (a tuple shape never has a space-separated word before a paren).
_INS = re.compile(r"\s*(ROOT )?%?([^\s=]+) = ([^\s({]+(?:\{[^}\s]*\})?|\(.*?\)) ([\w.-]+)\(")
_INS_LOOSE = re.compile(r"\s*(ROOT\s+)?%?([^\s=]+)\s*=\s*([^\s({]+(?:\{[^}]*\})?|\(.*?\))\s+([\w.-]+)\s*\(")
OPCODE = re.compile(r"[\w.-]+")
_Q = r'"([^"\\]*(?:\\.[^"\\]*)*)"'  # a C-escaped string; unrolled, as per-character alternation is slow
# stack_frame_id (newer JAX) comes after the keys above; a block holding nothing else needs no search of the rest.
_METADATA = re.compile(rf"metadata=\{{\s*(?:op_type={_Q}\s*)?(?:op_name={_Q}\s*)?(?:source_file={_Q}\s*)?"
                       rf"(?:source_line=(\d+)\s*)?(?P<rest>(?:stack_frame_id=(\d+)\s*)?"
                       rf"(?P<tail>[^\"}}]*(?:\"[^\"\\]*(?:\\.[^\"\\]*)*\"[^\"}}]*)*))\}}")
_METADATA_KEY = {k: re.compile(rf"\b{k}={_Q}") for k in ("op_type", "op_name", "source_file")}
_METADATA_INT = re.compile(r"\b(source_line|stack_frame_id)=(\d+)")
QUOTED = re.compile(_Q)
_RECORD = re.compile(rf"(\d+)\s+(?:{_Q}|\{{(.*)\}})")
_FIELD = re.compile(r"(\w+)=(\d+)")


def is_instruction(line: str) -> bool:
    return bool(_INS.match(line) or _INS_LOOSE.match(line))


def split_instruction(line: str) -> tuple[bool, str, str, str, str] | None:
    """(is_root, name, shape, opcode, text after "opcode(") of any instruction line, None if it is not one."""
    i = line.find(" = ")
    name = line[:i].strip()
    root = name.startswith("ROOT ")
    name = name[5:].lstrip() if root else name
    name = name[1:] if name[:1] == "%" else name
    i += 3
    # A tuple shape ends at its first ") ": inside it ")" is followed by ",", ")", "}" or a layout letter.
    j = line.find(") ", i) + 1 if line[i : i + 1] == "(" else line.find(" ", i)
    k = line.find("(", j)
    op = line[j + 1 : k]
    if i >= 3 and j > i and k >= 0 and name and " " not in name and OPCODE.fullmatch(op) and \
            (line[i] == "(" or _DTYPE.match(line, i) or line.startswith("b(", i)):
        return root, name, line[i:j], op, line[k + 1 :]
    if m := _INS.match(line) or _INS_LOOSE.match(line):
        return bool(m[1]), m[2], m[3], m[4], line[m.end() :]
    return None


_DTYPE = re.compile(r"[a-z][a-z0-9]*\s*\[")
_NAME_EQ = re.compile(r"\s*(ROOT\s+)?%?([^\s=]+)\s*=\s*")
_OPCODE_PAREN = re.compile(r"\s*([\w.-]+)\s*\(")
_LAYOUT_OPEN = re.compile(r"\s*\{")


def _matching(text: str, i: int) -> int:
    """Index just past the bracket that closes the one at ``text[i]`` (-1 if it does not close)."""
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


def _shape_end(text: str, i: int) -> int:
    """Index just past the shape that starts at ``text[i]`` (-1 if none does)."""
    if text[i : i + 1] == "(":
        return _matching(text, i)
    if text.startswith("b(", i):  # a buffer shape
        return _matching(text, i + 1)
    if (d := _DTYPE.match(text, i)) is None:
        return -1
    j = _matching(text, d.end() - 1)
    if j > 0 and (lay := _LAYOUT_OPEN.match(text, j)):
        j = _matching(text, lay.end() - 1)
    return j


def split_statement(text: str) -> tuple[bool, str, str, str, str] | None:
    """``split_instruction`` for comment-free text that may have spaces anywhere XLA's lexer allows
    them (``f32[8, 8]{1, 0}``, ``( f32[], s32[] )``, ``name=f32[] op (x)``); None if not an instruction."""
    m = _NAME_EQ.match(text)
    if m is None:
        return None
    i = m.end()
    j = _shape_end(text, i)
    if j < 0 or not (op := _OPCODE_PAREN.match(text, j)):
        return None
    return bool(m[1]), m[2], text[i:j], op[1], text[op.end() :]


def is_name_and_shape(text: str) -> bool:
    """``name = shape`` and nothing more: the opcode is on the next line."""
    m = _NAME_EQ.match(text)
    j = _shape_end(text, m.end()) if m else -1
    return j > 0 and not text[j:].strip()


def read_metadata(text: str, pos: int = 0) -> tuple[str | None, str | None, str | None, int | None, int | None] | None:
    """(op_type, op_name, source_file, source_line, stack_frame_id) of the metadata={...} at ``pos``.

    Strings are unescaped (XLA prints them C-escaped: ``params[0][\\'w\\']``). XLA prints the
    keys in a fixed order; keys in another order or unknown keys are still found. None if
    the block does not close.
    """
    if not pos and text[:19] == 'metadata={op_name="' and "\\" not in text:  # what JAX prints, without a regex
        j = text.find('"', 19)
        if j > 19:
            tail = text[j + 1 : -1] if text[-1] == "}" else None
            if tail == "":
                return None, text[19:j], None, None, None
            if tail is not None and tail[:16] == " stack_frame_id=" and tail[16:].isdigit() and tail[16:].isascii():
                return None, text[19:j], None, None, int(tail[16:])
    m = _METADATA.match(text, pos)
    if m is None:
        return None
    op_type, op_name, source_file, source_line, rest, frame_id, tail = m.groups()
    frame = None
    if frame_id is not None and not tail:  # "stack_frame_id=N" alone after the keys: what JAX prints
        frame = int(frame_id)
        op_type, op_name, source_file = op_type or None, op_name or None, source_file or None  # as the search gives
    elif rest and "=" in rest:
        op_type = op_type or ((x := _METADATA_KEY["op_type"].search(rest)) and x[1])
        op_name = op_name or ((x := _METADATA_KEY["op_name"].search(rest)) and x[1])
        source_file = source_file or ((x := _METADATA_KEY["source_file"].search(rest)) and x[1])
        ints = dict(_METADATA_INT.findall(rest))
        source_line = source_line or ints.get("source_line")
        frame = int(ints["stack_frame_id"]) if "stack_frame_id" in ints else None
    if text.find("\\", m.start(), m.end()) >= 0:  # escapes to undo (rare)
        op_type, op_name, source_file = c_unescape(op_type), c_unescape(op_name), c_unescape(source_file)
    return op_type, op_name, source_file, int(source_line) if source_line else None, frame


def c_unescape(text: str | None) -> str | None:
    """A string as XLA's CEscape printed it, unescaped (non-ASCII comes as octal UTF-8 bytes)."""
    if not text or "\\" not in text:
        return text
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode("utf-8")
    except (UnicodeError, ValueError):
        return text  # not a C escape after all: keep it as printed


def read_record(line: str) -> tuple[int, str | dict[str, int]] | None:
    """A row of the FileNames/FunctionNames (id "text") or FileLocations/StackFrames (id {k=v ...}) tables."""
    if m := _RECORD.match(line):
        return int(m[1]), m[2] if m[2] is not None else {k: int(v) for k, v in _FIELD.findall(m[3])}
    return None


def record_value(raw: str) -> str | dict[str, int] | None:
    """The value of a table row from the text after its id (``read_record`` of "0 " + ``raw``)."""
    got = read_record("0 " + raw.strip())
    return got[1] if got else None


# -- what XLA's parser makes of hand-written text (xla/hlo/parser/hlo_parser.cc) ---------------------------

# <op>-start / -update / -done is XLA's syntax sugar for an async-start wrapping <op> (ParseOpcode), but for
# these opcodes, which are themselves opcodes of XLA (hlo_opcode.h) or which XLA does not wrap.
NATIVE_ASYNC = frozenset({"async-start", "all-reduce-start", "all-gather-start", "collective-permute-start",
                          "copy-start"})
_NOT_WRAPPED = frozenset({"all-gather", "all-reduce", "collective-permute", "copy", "recv", "send"})
# Operands an opcode takes whatever the text gives (HloOpcodeArity): XLA's wrapped computation has at least
# as many parameters.
_UNARY = frozenset("""abs cbrt ceil clz copy cosine erf exponential exponential-minus-one floor imag is-finite log
log-plus-one logistic negate not popcnt real reduce-precision round-nearest-afz round-nearest-even rsqrt sign sine
sqrt tan tanh bitcast-convert convert""".split())  # noqa: SIM905
_BINARY = frozenset("""add and atan2 complex divide maximum minimum multiply or power remainder shift-left
shift-right-arithmetic shift-right-logical subtract xor""".split())  # noqa: SIM905
ARITY = {**dict.fromkeys(_UNARY, 1), **dict.fromkeys(_BINARY, 2), "compare": 2, "dot": 2, "convolution": 2,
         "select": 3, "clamp": 3}
_INDEX = re.compile(r"\bindex=(\d+)")


def wrapped_opcode(op: str) -> str | None:
    """The opcode an ``<op>-start`` of XLA's async syntax sugar wraps; None for any other opcode."""
    if not op.endswith("-start") or op in NATIVE_ASYNC:
        return None
    wrapped = op[:-6]
    return None if wrapped in _NOT_WRAPPED or not wrapped else wrapped


# send-start, all-reduce-update, copy-update: what XLA's parser rejects as no opcode (an opcode it does not wrap,
# with a suffix of the async syntax sugar, that is not an opcode of its own).
NOT_ASYNC_FORMS = frozenset({f"{op}-{suffix}" for op in _NOT_WRAPPED for suffix in ("start", "update", "done")}) - {
    *NATIVE_ASYNC, "all-reduce-done", "all-gather-done", "collective-permute-done", "copy-done", "send-done",
    "recv-done"}


def tuple_elements(shape: str | None) -> list[str] | None:
    """The top-level elements of a tuple shape's text (None if ``shape`` is not a tuple)."""
    if not shape or shape[0] != "(" or shape.rstrip()[-1:] != ")":
        return None
    if "/*" in shape:
        shape = _COMMENT.sub("", shape)
    inner = shape.strip()[1:-1]
    out, depth, start = [], 0, 0
    for i, c in enumerate(inner):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(inner[start:i].strip())
            start = i + 1
    if inner.strip():
        out.append(inner[start:].strip())
    return out


def infer_shape(op: str, operands: list[str | None], attributes: str) -> str | None:
    """The shape XLA's shape inference gives an instruction written without one, for the opcodes whose result
    follows from their operands' shapes alone (elementwise, compare, select, tuple, get-tuple-element); None
    for any other (the row keeps no shape)."""
    first = operands[0] if operands else None
    if op == "tuple":
        return None if None in operands else "(" + ", ".join(operands) + ")"
    if op == "get-tuple-element":
        elements, m = tuple_elements(first), _INDEX.search(attributes)
        return elements[int(m[1])] if elements and m and int(m[1]) < len(elements) else None
    if op in ("select", "clamp"):
        return operands[1] if len(operands) == 3 else None
    if first is None or first[0] == "(":
        return None
    if op == "compare":
        return "pred" + first[first.index("[") :] if "[" in first else None
    if op in _UNARY and op not in ("bitcast-convert", "convert", "imag", "real", "is-finite") or \
            op in _BINARY and op != "complex":
        return first
    return None
