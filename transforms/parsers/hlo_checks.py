"""What XLA's parser refuses in HLO text that otherwise reads, checked where a dump reader can afford it.

``xla_hlo`` reads a module as XLA prints it. XLA's own parser (xla/hlo/parser/hlo_parser.cc) also refuses
text that reads well enough: a literal whose values do not fit its type or whose nesting does not fit its
shape, an element type or layout it does not know, a module attribute it cannot read, an async chain whose
parts do not belong together, an attribute an opcode does not take or a value it cannot have. Each function
here returns what is wrong (the reason of an error line) or None, and looks only at what XLA's printer writes
rarely or once, so that a printed line pays nothing: a distinct shape (``shape_problem``), a constant's
literal (``literal_problem``; the caller caches it), the ``HloModule`` statement (``module_problem``), one
instruction of an opcode in ``CHECKED`` (``instruction_problem``), an async op and the op its first operand
names (``chain_problem``). A hand-written module's rows (xla_hlo's ``written``: also a module with signatures
whose text XLA's printer cannot have written) are also asked what XLA cannot print, as it aborts making it: an
iota sharding of more or fewer devices than its tiles (``sharding_problem``), a reshape that changes the element
count (``reshape_problem``); and, there only, their operands' names and written shapes. In a module XLA printed
that would cost every line a look-up: docs/metrics.md says what is not checked.

Guarantees: nothing here raises; text these functions cannot read gives None (no error), never a guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import lru_cache

from transforms.parsers.xla_shapes import tuple_elements

# XLA's element type names (xla_data.proto PrimitiveType, lower case): newer float formats keep the pattern.
_DTYPE_NAME = re.compile(r"pred|token|opaque|[su]\d+|bf16|f\d+(?:e\d+m\d+[a-z0-9]*)?|c\d+")
_TYPE_WORD = re.compile(r"([A-Za-z_]\w*)\[")  # an element type, as a word before "["
_TYPES_SEEN: set[str] = set()  # element type names found good (a few; bounded against hostile text)
_LEAF = re.compile(r"([A-Za-z_][\w]*)\[([^\]]*)\](\{[^{}]*(?:\([^)]*\)[^{}]*)*\})?")
_DIM_LEVEL = re.compile(r"D\(([^)]*)\)")
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](?:\{.*\})?")
_COMMENT = re.compile(r"/\*.*?\*/")
_LAYOUT = re.compile(r"\{[^{}]*\}")


def same_shape(said: str, shape: str) -> bool:
    """Whether a computation header's shape text ``said`` is ``shape`` (a row's, without layouts), comments,
    layouts and spaces aside (linear: a while body's header can give a tuple of hundreds of elements)."""
    if "/*" in said:
        said = _COMMENT.sub("", said)
    return _LAYOUT.sub("", said).replace(" ", "") == shape.replace(" ", "")


def shape_problem(text: str) -> str | None:
    """An element type XLA does not know (``g32``), an empty layout (``f32[]{}``, ``f32[2]{}``: XLA's parser
    wants the opcode there; ``u32[]{:T(128)}`` it takes), a dimension level type other than D, C, S, H, or a
    physical shape in a dense array's layout."""
    if "/*" in text:
        text = _COMMENT.sub("", text)
    for dtype in _TYPE_WORD.findall(text):  # a TPU dump holds thousands of distinct shapes, of a few types
        if dtype not in _TYPES_SEEN:
            if not _DTYPE_NAME.fullmatch(dtype):
                return f"unknown element type {dtype} in shape {text[:80]}"
            if len(_TYPES_SEEN) < 64:
                _TYPES_SEEN.add(dtype)
    if "{}" not in text and "D(" not in text and "P(" not in text:
        return None
    for m in _LEAF.finditer(text):
        dtype, dims, layout = m.groups()
        if layout is None:
            continue
        if not layout[1:-1].strip():
            return f"an empty layout ({m[0]}): XLA's parser wants the opcode there"
        levels = _DIM_LEVEL.search(layout)
        for level in levels[1].split(",") if levels else ():
            if not re.fullmatch(r"\s*[DCSH][+~]*\s*", level):
                return f"dimension level type {level.strip()!r} in layout {layout} (D, C, S or H)"
        if "P(" in layout and not (levels and re.search(r"[CSH]", levels[1])):
            return f"a physical shape in the layout of a dense array: {layout}"
    return None


# -- literals ---------------------------------------------------------------------------------

_LITERAL_TOKEN = re.compile(r"[{}(),]|[-+]?nan\([^)]*\)|[^\s{}(),]+")
_INT = re.compile(r"[-+]?\d+")
MAX_LITERAL = 256
# (mantissa bits, largest exponent): a value at least half a unit past the largest finite one rounds to infinity
_FLOATS = {"f16": (10, 15), "bf16": (7, 127), "f32": (23, 127), "f64": (52, 1023)}
_PARTS = {"c64": "f32", "c128": "f64"}


def _largest(kind: str) -> tuple[float, float]:
    mantissa, emax = _FLOATS[kind]
    top = (2 - 2.0 ** -mantissa) * 2.0 ** emax
    return top, top + 2.0 ** (emax - mantissa - 1)


def _value_problem(dtype: str, token: str) -> str | None:
    if dtype[0] in "su" and dtype[1:].isdigit() and len(dtype) <= 3:
        if not _INT.fullmatch(token) or len(token) > 40 or int(dtype[1:]) >= 64:
            return None  # true/false, a float written for an integer; 64 bits: XLA reads -1 as u64's largest
        bits, value = int(dtype[1:]), int(token)
        low, high = (-(1 << bits - 1), (1 << bits - 1) - 1) if dtype[0] == "s" else (0, (1 << bits) - 1)
        return None if low <= value <= high else f"value {token} is out of range for {dtype} [{low}, {high}]"
    kind = _PARTS.get(dtype, dtype)
    word = token.lower().lstrip("+-")
    if word.startswith("nan("):
        payload = word[4:-1]
        value = int(payload, 16) if re.fullmatch(r"0x[0-9a-f]+", payload) else None
        if kind in _FLOATS:
            most = (1 << _FLOATS[kind][0]) - 1
            return None if value is None or value <= most else \
                f"NaN payload {payload} does not fit {dtype} ({hex(most)})"
        if dtype.startswith("f") and dtype.endswith(("fn", "fnuz", "fnu")):
            return f"{dtype} has no NaN payloads (nan({payload}))"
        return None
    if kind not in _FLOATS or word in ("inf", "nan"):
        return None
    try:
        value = float(token)
    except ValueError:
        return None
    top, rounds_to_inf = _largest(kind)
    if math.isinf(value) or abs(value) >= rounds_to_inf:
        return f"value {token} is out of range for {dtype} (largest {top:g})"
    return None


def literal_problem(shape: str, text: str) -> str | None:
    """The literal of ``shape constant(text``, ``text`` running on past the literal's ")": its nesting against
    the shape's rank, the element count at each level against the dimension (bounded dynamic ones not), each
    integer against its type's range, each float against its type's largest finite value, NaN payloads. A
    text longer than ``MAX_LITERAL`` is not looked at: XLA prints a literal of more than a few elements only
    with --xla_dump_large_constants (older XLA, as torch_xla's dumps show, printed them whole), and reading
    its values here costs far more than parsing its line."""
    m = _ARRAY.fullmatch(shape)
    if m is None or "..." in text or len(text) > MAX_LITERAL:  # a tuple constant; an elided or a large literal
        return None
    if "/*" in text:  # /*i0=0*/ index comments of a printed literal
        text = _COMMENT.sub(" ", text)
    dtype = m[1]
    sizes = [_number(d) for d in m[2].split(",")] if m[2].strip() else []
    rank = len(sizes)
    counts: list[int] = []  # elements seen at each open level
    pair: list[str] | None = None  # the parts of a complex value "(re, im)"
    for tok in _LITERAL_TOKEN.finditer(text):
        t = tok[0]
        if t == ",":
            continue
        if t == "(":
            if pair is not None:
                return None
            pair = []
            continue
        if t == ")":
            if pair is None:  # the ")" of constant(...): the literal ends
                break
            values, pair = pair, None
        elif t == "{":
            if rank == 0:
                return None  # left to XLA
            if len(counts) >= rank:
                return f"literal nested deeper than the rank of {shape} ({rank})"
            if counts:
                counts[-1] += 1
            counts.append(0)
            continue
        elif t == "}":
            if not counts:
                return f"literal of {shape}: unexpected '}}'"
            level, n = len(counts) - 1, counts.pop()
            if sizes[level] is not None and n != sizes[level]:
                return f"literal of {shape}: {n} elements where dimension {level} is {sizes[level]}"
            continue
        elif pair is not None:
            pair.append(t)
            continue
        else:
            values = [t]
        if rank and len(counts) != rank:
            return f"literal of {shape}: a value at nesting {len(counts)}, rank {rank}"
        if counts:
            counts[-1] += 1
        for value in values:
            if why := _value_problem(dtype, value):
                return why
    return None


# -- the HloModule statement -------------------------------------------------------------------

_INDEX = r"\{\s*(?:\d+(?:\s*,\s*\d+)*)?\s*\}"
_ALIAS = re.compile(rf"\{{\s*(?:{_INDEX}\s*:\s*\(\s*\d+\s*,\s*{_INDEX}\s*(?:,\s*(?:may|must)-alias\s*)?\)"
                    rf"(?:\s*,\s*{_INDEX}\s*:\s*\(\s*\d+\s*,\s*{_INDEX}\s*(?:,\s*(?:may|must)-alias\s*)?\))*)?\s*\}}")
_DONOR = re.compile(rf"\{{\s*(?:\(\s*\d+\s*,\s*{_INDEX}\s*\)(?:\s*,\s*\(\s*\d+\s*,\s*{_INDEX}\s*\))*)?\s*\}}")
_LOG_MODES = frozenset({"default", "fusion_debugger"})
_BRACE_OR_STRING = re.compile(r'[{}]|"(?:[^"\\]|\\.)*"?')


def _braced(text: str, start: int) -> str | None:
    """The ``{...}`` that opens at ``text[start]`` (strings skipped), None if it does not."""
    if text[start : start + 1] != "{":
        return None
    end = text.find("}", start)
    if end > 0 and text.find("{", start + 1, end) < 0 and text.find('"', start, end) < 0:
        return text[start : end + 1]  # nothing nested: most values ({0}, {1,0})
    depth = 0
    for m in _BRACE_OR_STRING.finditer(text, start):
        if m[0] == "{":
            depth += 1
        elif m[0] == "}":
            depth -= 1
            if not depth:
                return text[start : m.end()]
    return None


def module_problem(statement: str) -> str | None:
    """``input_output_alias={ {index}: (parameter, {index}[, may-alias|must-alias]), ... }``,
    ``buffer_donor={ (parameter, {index}), ... }`` and the ``log_mode`` of ``debug_attributes``, as XLA's parser
    reads them (indices are integers)."""
    for key, form, what in (("input_output_alias=", _ALIAS, "{output index}: (parameter, {index})"),
                            ("buffer_donor=", _DONOR, "(parameter, {index})")):
        if (i := statement.find(key)) >= 0:  # the form matched up to the next attribute (a regex: C speed)
            m = form.match(statement, i + len(key))
            if m is None or statement[m.end() :].lstrip()[:1] not in ("", ","):
                value = _braced(statement, i + len(key)) or statement[i + len(key) :]
                return f"{key[:-1]} is not a list of {what}: {value[:80]}"
    if (i := statement.find("debug_attributes=")) >= 0:
        for mode in re.findall(r"\blog_mode\s*=\s*(\w+)", statement[i:]):
            if mode not in _LOG_MODES:
                return f"debug_attributes: unknown log_mode {mode} ({', '.join(sorted(_LOG_MODES))})"
    return None


# -- one instruction --------------------------------------------------------------------------

_TRANSCENDENTAL = frozenset("""cbrt cosine erf exponential exponential-minus-one log log-plus-one logistic rsqrt sine
sqrt tan tanh""".split())  # noqa: SIM905  (the opcodes that take result_accuracy)
_NEED_OPERANDS = frozenset({"conditional", "dynamic-reshape", "reduce-window", "rng-bit-generator"})
_ONE_DIMENSION = frozenset({"all-gather", "all-gather-start", "reduce-scatter", "get-dimension-size",
                            "set-dimension-size"})
# XLA's CustomCallApiVersion names. API_VERSION_UNSPECIFIED, which XLA's parser refuses, is what the older XLA of
# torch_xla printed on every custom-call (data/corpus/torch_xla_llama2_*): a real dump, read as before.
_API_VERSIONS = frozenset({"API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING",
                           "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI", "API_VERSION_UNSPECIFIED"})
# The attributes XLA's parser takes on send (its error message lists them).
_SEND_ATTRIBUTES = frozenset({"backend_config", "channel_id", "control-predecessors", "frontend_attributes",
                              "is_host_transfer", "metadata", "origin", "parameter_replication", "sharding",
                              "statistics"})
# Opcodes whose rows ``instruction_problem`` (``literal_problem``: constant) looks at. LIGHT ones are common
# in dumps: the caller asks about a constant's literal once per distinct text, and about the others only when
# their text holds result_accuracy= or control-predecessors= (all there is to check).
LIGHT = frozenset({"bitcast-convert", "constant", "convolution", *_TRANSCENDENTAL})
# Element types of an array shape that need no more than a look at its text for "{}", "D(", "P(" (the others,
# tuples included, go through shape_problem).
PLAIN_TYPES = frozenset({"pred", "s4", "s8", "s16", "s32", "s64", "u4", "u8", "u16", "u32", "u64", "f16", "bf16", "f32",
                         "f64", "c64", "c128", "token"})
CHECKED = frozenset({"all-reduce", "all-reduce-start", "conditional", "convolution", "custom-call", "infeed", "recv",
                     "scan", "send", *_NEED_OPERANDS, *_ONE_DIMENSION, *LIGHT})
_PUNCTUATION = re.compile(r"[()\[\]{},]")
_VALUE = re.compile(r'"(?:[^"\\]|\\.)*"|[^,\s]*')


def operand_list(head: str) -> tuple[list[tuple[str | None, str]], str]:
    """The operands of ``head`` (the text after "opcode("), each (shape written before it or None, name), and
    the text after the operand list."""
    if "/*" in head:
        head = _COMMENT.sub("", head)
    depth, start, out = 0, 0, []
    for m in _PUNCTUATION.finditer(head):
        c, i = m[0], m.start()
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if not depth:
                piece = head[start:i].strip()
                if piece or out:
                    out.append(piece)
                return [_operand(p) for p in out], head[i + 1 :]
            depth -= 1
        elif not depth:
            out.append(head[start:i].strip())
            start = i + 1
    return [_operand(p) for p in out], ""


def _operand(piece: str) -> tuple[str | None, str]:
    """"f32[2]{0} %p" -> ("f32[2]{0}", "p"); "%p" -> (None, "p")."""
    shape, _, name = piece.rpartition(" ")
    return shape.strip() or None, name.lstrip("%")


def attribute(tail: str, key: str) -> str | None:
    """The value of attribute ``key`` in the text after an operand list (braced values whole)."""
    i = tail.find(f"{key}=")
    while i > 0 and tail[i - 1] not in ", ":
        i = tail.find(f"{key}=", i + 1)
    if i < 0:
        return None
    j = i + len(key) + 1
    if tail[j : j + 1] == "{":
        return _braced(tail, j)
    return _VALUE.match(tail, j)[0]


def _top_level_names(tail: str) -> list[str]:
    """The attribute names in the text after an operand list (nested braces skipped)."""
    names, depth = [], 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[{}()\[\]]|,\s*([\w-]+)\s*=', tail):
        t = m[0]
        if t in "{([":
            depth += 1
        elif t in "})]":
            depth -= 1
        elif m[1] and not depth:
            names.append(m[1])
    return names


def _dims(shape: str | None) -> tuple[str, list[str]] | None:
    m = _ARRAY.fullmatch(shape.strip()) if shape else None
    return (m[1], [d.strip() for d in m[2].split(",")] if m[2].strip() else []) if m else None


def _same_array(a: str, b: str) -> bool:
    """Same element type and dimensions (layouts aside), or either unreadable."""
    da, db = _dims(a), _dims(b)
    return da is None or db is None or da == db


def _number(text: str) -> int | None:
    """A dimension or index as written; None for anything else (``<=8``, ``?``, a number past 18 digits)."""
    text = text.strip()
    return int(text) if text.isdigit() and len(text) <= 18 else None


def _elements(dims: list[str]) -> int | None:
    n = 1
    for d in dims:
        if (size := _number(d.removeprefix("<="))) is None:
            return None
        n *= size
    return n


def instruction_problem(op: str, shape: str | None, head: str, shape_of: Callable[[str], str | None],
                        defined: Callable[[str], bool | None]) -> str | None:
    """What XLA's parser refuses in one instruction of an opcode in ``CHECKED`` but ``constant`` (``head``: the
    text after "opcode(", metadata cut off; ``shape_of``: an operand's shape by name, None if unknown;
    ``defined``: whether an instruction of that name comes before it in its computation, None if unknown).
    Attributes are looked for with str.find in the whole text (no operand name holds "="), each only on the
    opcodes it is checked for: a collective's text runs to kilobytes (replica groups, backend config) and
    dumps hold thousands. The operand list is read only for the few opcodes whose operands are checked."""
    if op in COLLECTIVES_CHECKED:
        if op in _ONE_DIMENSION and (dims := attribute(head, "dimensions")) is not None and not dims.strip("{} "):
            return f"{op} takes one dimension; dimensions={{}} names none"
        if op in ("all-reduce", "all-reduce-start") and (i := head.find("mesh[")) >= 0:
            return _mesh_problem(head[i:])
        return None
    if op not in ("custom-call", "convolution"):  # what the text of a rarer opcode can hold wrong anywhere
        if "control-predecessors=" in head:
            for name in re.findall(r"[^\s,{}]+", attribute(head, "control-predecessors") or ""):
                if defined(name.lstrip("%")) is False:
                    return f"control predecessor {name} is not defined before it"
        if "result_accuracy=" in head and (why := _accuracy_problem(op, attribute(head, "result_accuracy"))):
            return why
    if op in _TRANSCENDENTAL or op == "bitcast-convert":
        return None
    if op in _NEED_OPERANDS and head.lstrip()[:1] == ")":
        return f"{op} takes operands; it has none"
    operands, tail = operand_list(head) if op in _READ_OPERANDS else ([], head)

    def operand_shape(k: int) -> str | None:
        written, name = operands[k]
        return written or shape_of(name)

    if op in ("get-dimension-size", "set-dimension-size"):
        dims = attribute(tail, "dimensions")
        if dims is not None and not dims.strip("{} "):
            return f"{op} takes one dimension; dimensions={{}} names none"
    elif op == "scan":
        dims = attribute(tail, "dimensions") or ""
        if re.search(r"-\d", dims):
            return f"a negative dimension in dimensions={dims}"
    elif op in ("infeed", "recv"):
        if not (shape and shape.startswith("(") and shape.replace(" ", "") != "()"):
            parts = "data, token" if op == "infeed" else "data, context, token"
            return f"{op} has a tuple shape ({parts}), not {shape}"
    elif op == "send":
        if extra := [a for a in _top_level_names(tail) if a not in _SEND_ATTRIBUTES]:
            return f"send takes no attribute {extra[0]}"
    elif op == "conditional":
        index = _dims(operand_shape(0))
        if index is not None:
            if index[1]:
                return f"the first operand (branch index or predicate) {operands[0][1]} is not a scalar"
            if index[0] not in ("pred", "s32"):
                return f"the first operand (branch index or predicate) is {index[0]}, not pred or s32"
            if index[0] == "pred" and attribute(tail, "branch_computations") is not None:
                return "a conditional on a pred takes true_computation and false_computation, not branch_computations"
    elif op == "dynamic-reshape":
        out = _dims(shape)
        if out is not None and len(operands) != 1 + len(out[1]):
            return f"dynamic-reshape to rank {len(out[1])} takes {1 + len(out[1])} operands, not {len(operands)}"
        return reshape_problem(op, shape, operand_shape(0))
    elif op == "custom-call":
        version = attribute(tail, "api_version")
        if version is not None and version not in _API_VERSIONS:
            return f"unknown api_version {version}"
        constraints = attribute(tail, "operand_layout_constraints")
        if constraints is not None:
            names = head[: head.find(")")]
            if "[" not in names and "(" not in constraints:  # as printed: names only, array constraints
                given, wanted = names.count(",") + 1 if names.strip() else 0, constraints.count("]")  # C counts
                return None if given == wanted else f"{wanted} operand layout constraints for {given} operands"
            operands = operand_list(head)[0]  # operands with their shapes written (older syntax)
            shapes = tuple_elements(f"({constraints[1:-1]})") or []  # the list's top-level elements
            if len(shapes) != len(operands):
                return f"{len(shapes)} operand layout constraints for {len(operands)} operands"
            for k, constraint in enumerate(shapes):  # against the shape written with the operand (older syntax);
                # looked up by name it would cost a custom-call of hundreds of operands an index of its computation
                if (given := operands[k][0]) is not None and not _same_array(constraint, given):
                    return f"operand layout constraint {constraint} does not fit operand {k} ({given})"
    elif op == "convolution":
        return convolution_problem(tail)
    return None


def reshape_problem(op: str, shape: str | None, operand: str | None) -> str | None:
    """A reshape (or dynamic-reshape) of ``operand`` to ``shape`` whose element counts differ (a bounded dynamic
    dimension counts at its bound, as XLA's StaticExtentProduct; an unbounded one, ``?``, is not looked at)."""
    out, data = _dims(shape), _dims(operand)
    if out is None or data is None or None in (n := (_elements(out[1]), _elements(data[1]))) or n[0] == n[1]:
        return None
    return f"{op} of {n[1]} elements to {n[0]}"


_IOTA_TILES = re.compile(r"devices=\[([\d,\s]*)\]\s*<=\[([\d,\s]*)\]")


def sharding_problem(head: str) -> str | None:
    """An iota tile assignment (``sharding={devices=[2,2]<=[16]}``, each element of a tuple sharding) whose
    tiles do not hold as many devices as its iota: XLA's parser aborts on it (HloSharding checks it)."""
    sharding = attribute(head, "sharding")
    return None if sharding is None else _iota_problem(sharding)


@lru_cache(maxsize=256)  # a module repeats a few shardings on thousands of lines
def _iota_problem(sharding: str) -> str | None:
    for m in _IOTA_TILES.finditer(sharding):
        tiles, iota = _elements(m[1].split(",")), _elements(m[2].split(","))
        if tiles is not None and iota is not None and tiles != iota:
            return f"sharding {m[0]} tiles {tiles} devices, its iota has {iota}"
    return None


def convolution_problem(text: str) -> str | None:
    """A convolution's dim_labels and window in ``text`` (its line from the opcode on): two str.find and a
    cached verdict, as a convnet's dump holds thousands of convolutions of a few labels and windows."""
    labels = window = None
    if (i := text.find("dim_labels=")) >= 0:
        labels = text[i + 11 : (j if (j := text.find(",", i)) >= 0 else len(text))].strip()
    if (i := text.find("window={")) >= 0:
        window = text[i + 7 : text.find("}", i) + 1]
    return _convolution_problem(labels, window)


@lru_cache(maxsize=1024)  # a dump's convolutions repeat a few labels and windows
def _convolution_problem(labels: str | None, window: str | None) -> str | None:
    if labels and (m := _DIM_LABELS.fullmatch(labels)):
        spatial = [sum(c.isdigit() for c in part) for part in m.groups()]
        if len(set(spatial)) > 1:
            counts = ", ".join(map(str, spatial))
            return f"dim_labels {labels} give {counts} spatial dimensions (input, kernel, output)"
    if window and (pad := _PAD.search(window)) and not all(_LOW_HIGH.fullmatch(p) for p in pad[1].split("x")):
        return f"window pad {pad[1]} is not low_high per dimension"
    return None


_READ_OPERANDS = frozenset({"conditional", "dynamic-reshape", "send"})
_DIM_LABELS = re.compile(r"([^_]*)_([^-]*)->(.*)")
_PAD = re.compile(r"\bpad=(\S+?)(?=\s|\}|$)")
_LOW_HIGH = re.compile(r"-?\d+_-?\d+")
COLLECTIVES_CHECKED = frozenset({"all-gather", "all-gather-start", "all-reduce", "all-reduce-start", "reduce-scatter"})


def _accuracy_problem(op: str, accuracy: str | None) -> str | None:
    """``result_accuracy={mode=default|highest}`` or ``{tolerance={rtol=, atol=, ulps=}}``, on a transcendental op."""
    if accuracy is None:
        return None
    if op not in _TRANSCENDENTAL:
        return f"{op} takes no result_accuracy (only transcendental opcodes do)"
    m = re.fullmatch(r"\{\s*(?:mode\s*=\s*(\w+)|tolerance\s*=\s*\{([^{}]*)\})\s*\}", accuracy)
    if m is None:
        return f"result_accuracy is neither {{mode=...}} nor {{tolerance={{...}}}}: {accuracy[:60]}"
    if m[1] is not None and m[1] not in ("default", "highest"):
        return f"result_accuracy: unknown mode {m[1]} (default, highest)"
    if m[2] is not None and any(k not in ("rtol", "atol", "ulps") for k in re.findall(r"(\w+)\s*=", m[2])):
        return f"result_accuracy: tolerance takes rtol, atol, ulps: {m[2][:60]}"
    return None


def _mesh_problem(text: str) -> str | None:
    """``mesh['a'=2,'b'=2] {'a'}``: axes as quoted names with sizes; the group names axes or their indices."""
    m = re.match(r"mesh\[([^\]]*)\]\s*\{([^}]*)\}", text)
    if m is None:
        return f"replica_groups: unreadable mesh {text[:60]!r}"
    axes = []
    for item in tuple_elements(f"({m[1]})") or []:
        if not (a := re.fullmatch(r"'([^']*)'\s*=\s*\d+", item)):
            return f"replica_groups: mesh axis {item!r} is not 'name'=size"
        axes.append(a[1])
    for name in re.findall(r"'([^']*)'", m[2]):
        if name not in axes and not ((index := _number(name)) is not None and index < len(axes)):
            return f"replica_groups: {name!r} is no axis of mesh[{m[1]}]"
    return None


# -- async chains ------------------------------------------------------------------------------

# opcodes whose -start/-update/-done are not XLA's async syntax sugar (hlo_opcode.h has them, or XLA does not wrap)
_NOT_SUGAR = frozenset({"all-gather", "all-reduce", "collective-permute", "copy", "recv", "send"})


def chain_link(op: str) -> tuple[str, str | None] | None:
    """("start" | "update" | "done", the opcode wrapped or None for async-*) of an op of an async chain XLA's
    parser links (async-start/-update/-done and ``<op>-start/-update/-done`` syntax sugar), else None."""
    base, _, kind = op.rpartition("-")
    if kind not in ("start", "update", "done") or not base or base in _NOT_SUGAR:
        return None
    return kind, None if base == "async" else base


@lru_cache(maxsize=256)  # a module's async ops repeat a few shapes, each a long tuple
def _async_shape(shape: str | None) -> bool:
    elements = tuple_elements(shape)
    return elements is not None and len(elements) >= 2 and elements[0].startswith("(")


def chain_problem(op: str, link: tuple[str, str | None], shape: str | None, operands: list,
                  before: tuple | None, attrs: tuple[str | None, str | None]) -> str | None:
    """An async op against the chain it continues: ``before`` is (kind, wrapped opcode, calls, thread) of the
    op its first operand names when that is one of a chain, else None (a tuple, a get-tuple-element: XLA's
    newer parser follows those); ``attrs`` its own (calls, async_execution_thread) when written."""
    kind, wrapped = link
    if kind != "done" and not _async_shape(shape):
        return f"{op} has shape {shape}, not ((operands), outputs, state)"
    if kind == "start":
        return None
    if not operands:
        return f"{op} takes the op before it in its async chain as operand; it has none"
    if before is None:
        return None
    prior_kind, prior_wrapped, prior_calls, prior_thread = before
    calls, thread = attrs
    if prior_kind == "done":
        return f"the operand of {op}, {operands[0][1]}, ended its async chain (an async-done)"
    if wrapped is not None and prior_wrapped is not None and wrapped != prior_wrapped:
        return f"{op} continues an async chain of {prior_wrapped}, not {wrapped}"
    if calls is not None and prior_calls is not None and calls != prior_calls:
        return f"{op} calls {calls}, its async chain calls {prior_calls}"
    if thread is not None and thread != (prior_thread or "main"):
        return f"{op} runs on async_execution_thread {thread}, its async chain on {prior_thread or 'main'}"
    return None
