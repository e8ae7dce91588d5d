"""TorchInductor scheduler IR (``ir_pre_fusion.txt`` / ``ir_post_fusion.txt``) -> tables.

Input: the lines of one file written under ``TORCH_COMPILE_DEBUG=1`` into
``torch_compile_debug/run_<time>-pid_<pid>/torchinductor/<graph dir>/``. Each top-level
scheduler node is a block starting with ``op12: SchedulerNode(ComputedBuffer)`` (``buf12:``
in older torch), followed by ``op12.<attr> = ...`` lines, an ``op12.outputs = [ ... ]``
block of output buffers, and for fused nodes ``op3_op4.snodes[i] =`` + the member's block.
Blocks are separated by blank lines. Older torch (2.1-2.3) names nodes ``buf12``, prints
``buf12.users = [...]`` where newer torch prints the outputs block (so no layouts), and indents
the members of a fused node.

The same IR is also read as captured from logs: ``TORCH_LOGS=ir_post_fusion`` (or
``ir_pre_fusion``) prints it as one log record per graph whose first line is ``AFTER FUSION``
(``BEFORE FUSION``), each line behind a glog-style prefix such as ``I1123 13:38:05.026000 31456
torch/_inductor/debug.py:757] [0/0] [__ir_post_fusion] ``. When such a prefix comes before the
first node header, only the lines of ``ir_pre_fusion`` / ``ir_post_fusion`` records are read,
prefix cut, and everything else (other log records, warnings) is skipped; line numbers stay
those of the file. In any text, ``AFTER FUSION`` / ``BEFORE FUSION`` lines start a graph (they
give the stage) and ``#`` comment lines are skipped.

Guarantees: streaming (state is one top-level block plus a set of buffer names),
``TableBatch`` frames of ``inductor_nodes`` and ``inductor_buffers`` with the declared
schemas, then one ``DumpSummary``. Buffer rows come from the top-level node's outputs
block only (a fused node lists all its members' outputs again), so each buffer appears
once. A line cut mid-way at the end of the input is dropped; a cut inside a block sets
``truncated`` and keeps the nodes seen. A buffer layout no buffer can have (a negative size,
a size or stride past 64 bits, bytes past ``figure_bounds.BYTES``) is an error naming its line: its
sizes, strides and bytes are stored as null and it is counted in no figure. A line that cannot
be read (``records.record_failure``) is an error and skipped. Raises ``ParseError`` only for empty
input or when no node header appears in the first lines.
"""

from __future__ import annotations

import itertools
import re
from typing import Iterable, Iterator

import polars as pl

from transforms.figure_bounds import BYTES
from transforms.records import (RECORD_FAILURES, DumpKind, DumpSummary, ParseError, ParserOutput, RowBuffer,
                               line_error, record_failure)

PARSER_VERSION = 4  # 2: every cut is an error; a missing final blank line is not a cut
# 3: a last line without newline naming a whole extern kernel is read; TORCH_LOGS captures read (log prefixes cut, other records skipped), AFTER/BEFORE FUSION headers
# give the stage and reset buffer names per graph; older torch's layout-less IR leaves
# memory.buffer_bytes absent (was 0) and its last block, ended by a loop body or kernel line, is no cut
# 4: a layout no buffer can have (a negative size, bytes past 2^63 - 1) is an error and its buffer is not counted
# (was: counted, or the dump failed); a line that cannot be read is an error and skipped (was: the dump failed)

TABLES: dict[str, pl.Schema] = {
    "inductor_nodes": pl.Schema({
        "name": pl.String, "node_class": pl.String, "sub_type": pl.String, "parent": pl.String,
        "member_index": pl.Int32, "fused_members": pl.List(pl.String), "kernel": pl.String,
        "device": pl.String, "lineno": pl.Int32,
    }),
    "inductor_buffers": pl.Schema({
        "node": pl.String, "name": pl.String, "buffer_type": pl.String, "layout_kind": pl.String,
        "device": pl.String, "dtype": pl.String, "size": pl.List(pl.Int64), "size_text": pl.String,
        "stride": pl.List(pl.Int64), "bytes": pl.Int64, "users": pl.List(pl.String),
        "mutations": pl.List(pl.String), "lineno": pl.Int32,
    }),
}

TABLE_DOCS: dict[str, dict[str, str]] = {
    "inductor_nodes": {
        "": "Scheduler nodes of one Inductor IR dump: top-level nodes, and the members of fused nodes (rows with a parent).",
        "name": "Node name as printed (op12, op3_op4 for fused nodes; buf12 in older torch).",
        "node_class": "Scheduler node class as printed: SchedulerNode, FusedSchedulerNode, OuterLoopFusedSchedulerNode, ExternKernelSchedulerNode, NopKernelSchedulerNode, ForeachKernelSchedulerNode, ...",
        "sub_type": "Text in the header's parentheses: the IR node class (ComputedBuffer, FallbackKernel, MultiOutput, ExternKernelOut, UserDefinedTritonKernel...) or, for fused nodes, the member classes comma-separated.",
        "parent": "Fused node that contains this node (from `<parent>.snodes[i] =`); null for top-level nodes.",
        "member_index": "Index i of `<parent>.snodes[i]`; null for top-level nodes.",
        "fused_members": "Names of the direct members of a fused node, in order; null for other nodes.",
        "kernel": "`<node>.node.kernel` of extern nodes, e.g. extern_kernels.mm or torch.ops.aten.convolution_backward.default; null when absent or printed as None.",
        "device": "Device: `<node>.group.device` when printed, else the device of the node's first output buffer (cuda:0, cpu).",
        "lineno": "Line of the node header (1-based).",
    },
    "inductor_buffers": {
        "": "Output buffers listed in the `outputs = [...]` block of each top-level scheduler node (each buffer once).",
        "node": "Top-level node whose outputs list the buffer (the fused node for buffers of fused members).",
        "name": "Buffer name (buf12).",
        "buffer_type": "IR class of the buffer: ComputedBuffer, MutationOutput, ExternKernelOut, MultiOutput, ...",
        "layout_kind": "Layout class: FixedLayout, NoneLayout, MultiOutputLayout, FlexibleLayout, ...",
        "device": "Layout device (cuda:0, cpu).",
        "dtype": "Element type without the torch. prefix (bfloat16, float32, int8); null for NoneLayout/MultiOutputLayout.",
        "size": "Sizes when all are integers; null when any is symbolic (see size_text).",
        "size_text": "Sizes as printed, e.g. [s77, 64].",
        "stride": "Strides when all are integers, else null.",
        "bytes": "prod(size) * itemsize of dtype when both are known, else null (null too, with size and stride, when "
        "the layout is one no buffer can have: a negative size, bytes past 2^63 - 1; dumps.error names its line).",
        "users": "Names of the nodes using the buffer (OUTPUT for graph outputs).",
        "mutations": "Buffers this buffer mutates (`<buf>.mutations`), else empty.",
        "lineno": "Line of the `<buf>: <type>` line (1-based).",
    },
}

ITEMSIZE = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
    "int8": 1, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1, "complex64": 8,
    "complex128": 16, "complex32": 4, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
}
_HEADER = re.compile(r"^([A-Za-z_][\w]*): ([A-Za-z_]\w*)\(([^()]*)\)$")
_MEMBER = re.compile(r"^(\w+)\.snodes\[(\d+)\] =$")
_ATTR = re.compile(r"^(\w+)\.([\w.]+) =")
_FILLER = re.compile(r"^(?:\w+_layout = |class \w+:$)")
_BUF_HEAD = re.compile(r"^\s+(\w+): (\w+)$")
_BUF_ATTR = re.compile(r"^\s+(\w+)\.(\w+) = (.*)$")
_LAYOUT = re.compile(r"(\w+)\((.*)\)$")
_FIXED = re.compile(r"'([^']*)', torch\.(\w+), size=\[([^\]]*)\], stride=\[([^\]]*)\]")
_DEVICE_KW = re.compile(r"device=device\(type='(\w+)'(?:, index=(\d+))?\)")
_SIZE_KW = re.compile(r"size=\[([^\]]*)\]")
_USER = re.compile(r"NodeUser\(node=(?:\w+\(name='([^']*)'\)|(\w+))")
_QUOTED = re.compile(r"'([^']*)'")
# The prefix torch._logging (torch >= 2.2) puts on every line of a log record, e.g.
# "[rank0]:I1123 13:38:05.026000 31456 torch/_inductor/debug.py:757] [0/0] [__ir_post_fusion] ":
# rank, level, date, time, pid, file:line], then trace id and artifact tags (group 1).
_LOG_PREFIX = re.compile(r"(?:\[rank\d+\]:)?[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [^\]\n]*:\d+\]((?: \[[^\]\n]*\])*) ?")
_IR_ARTIFACTS = ("[__ir_post_fusion]", "[__ir_pre_fusion]")
STAGE_HEADERS = {"AFTER FUSION": "post_fusion", "BEFORE FUSION": "pre_fusion"}  # first line of each record
_HEAD_LINES = 200  # lines looked at before deciding the text is a log capture (or sniffing it)
MAX_ERRORS = 100
_NO_LAYOUT = (None,) * 7
_INT64 = 2**63  # the size and stride columns hold -2^63 .. 2^63 - 1
_MAX_INDEX = 2**31 - 1  # what member_index holds
GROUP_CLASSES = frozenset({"FusedSchedulerNode", "OuterLoopFusedSchedulerNode", "ForeachKernelSchedulerNode",
                           "FusedMixOrderReductions", "FusedNestedReductions",
                           "FusedExternTritonKernelSchedulerNode"})


def sniff(name: str, head: str) -> bool:
    """By name, by a log line of an IR record, or by the first line that is not blank, a comment
    or an AFTER/BEFORE FUSION header: a scheduler node header."""
    if name in ("ir_pre_fusion.txt", "ir_post_fusion.txt"):
        return True
    verdict = None
    for line in head.splitlines()[:_HEAD_LINES]:
        if (m := _LOG_PREFIX.match(line)) is not None:
            if _is_ir_record(m):
                return True
            continue
        text = line.strip()
        if verdict is None and text and text[0] != "#" and text not in STAGE_HEADERS:
            m = _HEADER.match(line.rstrip("\r"))
            verdict = bool(m) and (m[2].endswith("SchedulerNode") or m[2] in GROUP_CLASSES)
    return bool(verdict)


def _is_ir_record(prefix: re.Match) -> bool:
    tags = prefix[1]
    return _IR_ARTIFACTS[0] in tags or _IR_ARTIFACTS[1] in tags


def _numbered(lines: Iterable[str]) -> tuple[bool, Iterator[tuple[int, str]]]:
    """Whether ``lines`` are a log capture (a log prefix before the first node header), and
    (line number in the file, IR line) pairs: the file's lines, or the messages of the capture's
    IR records, prefix cut."""
    it = iter(lines)
    head: list[str] = []
    log = False
    for raw in it:
        head.append(raw)
        if _LOG_PREFIX.match(raw):
            log = True
            break
        if len(head) >= _HEAD_LINES or _HEADER.match(raw.rstrip("\r\n")):
            break
    numbered = enumerate(itertools.chain(head, it), 1)
    if not log:
        return False, numbered
    return True, ((n, raw[m.end():]) for n, raw in numbered
                  if (m := _LOG_PREFIX.match(raw)) is not None and _is_ir_record(m))


def stage_from_name(name: str) -> str | None:
    return {"ir_pre_fusion.txt": "pre_fusion", "ir_post_fusion.txt": "post_fusion"}.get(name)


def _ints(text: str) -> list[int] | None:
    text = text.strip()
    if not text:
        return []
    try:
        return [int(p) for p in text.split(",")]
    except ValueError:
        return None  # symbolic (s0, 64*s0, Max(1, s0))


def _layout(text: str) -> tuple:
    """(kind, device, dtype, size, size_text, stride, bytes) of a printed layout."""
    m = _LAYOUT.match(text)
    if not m:
        return (None, None, None, None, None, None, None)
    kind, body = m[1], m[2]
    if (f := _FIXED.match(body)):
        size, stride = _ints(f[3]), _ints(f[4])
        item = ITEMSIZE.get(f[2])
        nbytes = None
        if size is not None and item is not None:
            nbytes = item
            for s in size:
                nbytes *= s
        return (kind, f[1], f[2], size, f"[{f[3]}]", stride, nbytes)
    d = _DEVICE_KW.search(body)
    device = None if d is None else (d[1] if d[2] is None else f"{d[1]}:{d[2]}")
    s = _SIZE_KW.search(body)
    return (kind, device, None, _ints(s[1]) if s else None, f"[{s[1]}]" if s else None, None, None)


def _layout_problem(lay: tuple) -> str | None:
    """What no buffer's layout can say (None: nothing): a negative size, a size or stride past
    64 bits, bytes past ``figure_bounds.BYTES``."""
    size, size_text, stride, nbytes = lay[3], lay[4], lay[5], lay[6]
    if size is not None and any(n < 0 or n >= _INT64 for n in size):
        return f"size {size_text[:80]} holds a negative size or one past 64 bits"
    if stride is not None and any(not -_INT64 <= n < _INT64 for n in stride):
        return "a stride past 64 bits"
    if nbytes is not None and (why := BYTES.problem(nbytes)) is not None:
        return f"its byte size {why}"
    return None


# Values of `<node>.node.kernel` that no longer value starts with, so that a last line ending
# in one (text pasted or logged without its final newline) cannot be a cut: the extern kernels
# Inductor calls (torch/_inductor/select_algorithm.py, kernel/mm.py, ir.py) and None.
WHOLE_KERNELS = frozenset({"None"} | {f"extern_kernels.{k}" for k in (
    "mm", "addmm", "bmm", "baddbmm", "convolution", "_mm_plus_mm", "_int_mm", "_scaled_mm")})


def _whole_kernel_line(raw: str) -> bool:
    attr, sep, value = raw.rstrip("\r").partition(".node.kernel = ")
    return bool(sep) and value in WHOLE_KERNELS and attr.isidentifier()


def _users(text: str) -> list[str]:
    return [named or bare for named, bare in _USER.findall(text)]


def _is_group(cls: str, sub: str, members: list) -> bool:
    if members or cls in GROUP_CLASSES:
        return True
    parts = sub.split(",")
    return bool(sub) and all(p.endswith("SchedulerNode") or p.startswith("Fused") for p in parts)


class _Block:
    """One top-level node and its members while they are being read."""

    __slots__ = ("nodes", "by_name")

    def __init__(self) -> None:
        self.nodes: list[dict] = []
        self.by_name: dict[str, dict] = {}

    def add(self, node: dict) -> None:
        self.nodes.append(node)
        self.by_name[node["name"]] = node


def _block_complete(block: _Block) -> bool:
    """Whether the last block, not followed by a blank line, reached its last line: torch prints
    each node class's fields in one order, ending with the outputs block (no-op nodes), the
    kernel line (extern nodes) or the loop body's last ``return`` (computed nodes, and each
    member of a fused one). A cut just there cannot be told from a complete shorter file."""
    top = block.nodes[0]
    if not top["outputs_done"]:
        return False
    if top["cls"] == "NopKernelSchedulerNode":
        return True  # its outputs block is its last field
    if top["cls"] == "ExternKernelSchedulerNode":
        return top["kernel_seen"]
    members = block.nodes[1:]
    if _is_group(top["cls"], top["sub"], top["members"]):
        announced = len(top["sub"].split(",")) if top["sub"] else 0
        if not members:  # older torch indents the members: counted from their `.snodes[i] =` lines
            return top["indented_members"] >= announced and top["body"]
        return len(top["members"]) >= announced and all(n["body"] for n in members)
    return top["body"]


def parse(lines: Iterable[str]) -> ParserOutput:
    nodes_out = RowBuffer("inductor_nodes", TABLES["inductor_nodes"])
    bufs_out = RowBuffer("inductor_buffers", TABLES["inductor_buffers"])
    metrics: dict[str, float] = {}
    errors: list[str] = []
    n_errors = 0
    seen_bufs: set[str] = set()
    block: _Block | None = None
    cur: dict | None = None  # node whose attribute lines are being read
    pending_member: tuple[str, int] | None = None
    in_outputs = False
    out_top = False  # the outputs block being read belongs to the top-level node
    before_header = 0
    buf: dict | None = None  # top-level output buffer being read
    collecting: str | None = None  # buffer attribute continued over lines (users / mutations)
    any_newline = False
    last_blank = True
    cut = False  # the last line lost its newline (and, unless a loop-body line, was dropped)
    any_group = False
    any_outputs = False  # an outputs block was read: the dump prints layouts, so bytes can be summed
    stages: dict[str, int] = {}  # stage of each AFTER/BEFORE FUSION header -> its first line
    lineno = 0

    def bump(key: str, n: int = 1) -> None:
        metrics[key] = metrics.get(key, 0) + n

    def error(msg: str) -> None:
        nonlocal n_errors
        n_errors += 1
        if n_errors <= MAX_ERRORS:
            errors.append(line_error(lineno, msg))

    def finish_buf():
        nonlocal buf
        b, buf = buf, None
        if b is None or b["name"] in seen_bufs:
            return None
        seen_bufs.add(b["name"])
        lay = b.get("layout") or _NO_LAYOUT
        if b.get("impossible"):  # an error said so: counted neither in the bytes nor as symbolic
            pass
        elif lay[0] == "FixedLayout" and lay[6] is not None:
            bump("memory.buffer_bytes", lay[6])
        elif lay[0] == "FixedLayout":
            bump("memory.symbolic_buffers")  # so the byte sum is not mistaken for the total
        return bufs_out.add((b["node"], b["name"], b["type"], lay[0], lay[1], lay[2], lay[3], lay[4],
                             lay[5], lay[6], b["users"], b["mutations"], b["lineno"]))

    def flush_block():
        nonlocal block, any_group
        if block is None:
            return []
        out = []
        top = block.nodes[0]
        cls, sub = top["cls"], top["sub"]
        bump("inductor.nodes")
        bump(f"inductor.nodes.{cls}")
        for n in block.nodes:
            n["group"] = _is_group(n["cls"], n["sub"], n["members"])
        if top["group"]:
            any_group = True
            size = len(top["members"]) or len(sub.split(","))
            bump("fusion.count")
            bump("fusion.fused_nodes", size)
            bump(f"fusion.group_size.{size}")
            bump("kernel.generated")
        elif cls == "SchedulerNode":
            bump("kernel.generated")
        elif cls == "ExternKernelSchedulerNode" and sub != "MultiOutput":
            bump("kernel.extern")
            if "Fallback" in sub:
                bump("kernel.fallback")
                op = (top["kernel"] or "unknown").removeprefix("torch.ops.")
                bump(f"kernel.fallback.{op}")
            elif sub == "UserDefinedTritonKernel":
                bump("kernel.user_triton")
        for n in block.nodes:
            row = (n["name"], n["cls"], n["sub"], n["parent"], n["index"],
                   n["members"] if n["group"] else None, n["kernel"], n["device"], n["lineno"])
            if (b := nodes_out.add(row)) is not None:
                out.append(b)
        block = None
        return out

    log_capture, numbered = _numbered(lines)
    while True:  # a line that raises costs itself only: the loop goes on after it (no cost per line)
        try:
            for lineno, raw in numbered:
                c0 = raw[:1]
                if raw[-1:] == "\n":
                    any_newline = True
                elif (any_newline and not raw.isspace() and raw and not ((c0 == " " or c0 == "\t") and not in_outputs)
                      and not _whole_kernel_line(raw)):
                    # Only the last line of newline-terminated input can lack one: it was cut
                    # mid-way, and a partial line is not trusted (a loop-body line is not read; a blank
                    # one, e.g. the empty message a log record ends with, holds nothing to cut).
                    last_blank, cut = False, True
                    break
                if (c0 == " " or c0 == "\t") and not in_outputs:
                    last_blank = False
                    if cur is not None and cur["outputs_done"]:  # its loop body, which ends the node's block
                        text = raw.lstrip()
                        cur["body"] = text.startswith("return")
                        if ".snodes[" in text:  # older torch: an indented member of a fused node
                            cur["indented_members"] += 1
                    continue  # dependency continuations, loop bodies: most of the file
                line = raw.rstrip("\r\n")
                if not line or line.isspace():
                    last_blank = True
                    continue
                if c0 == "#":  # a comment of whoever pasted the IR; torch writes none
                    continue
                if line in STAGE_HEADERS:  # a log record's first line: a new graph starts
                    stages.setdefault(STAGE_HEADERS[line], lineno)
                    if in_outputs:
                        error(f"outputs block of {cur['name']} not closed before the next graph")
                        in_outputs = False
                        collecting = None
                        if (b := finish_buf()) is not None:
                            yield b
                    for b in flush_block():
                        yield b
                    seen_bufs.clear()  # buffer names restart at buf0 in each graph
                    cur, pending_member, last_blank = None, None, True
                    continue
                last_blank = False
                if in_outputs:
                    if line == "]":
                        in_outputs = False
                        collecting = None
                        cur["outputs_done"] = True
                        if (b := finish_buf()) is not None:
                            yield b
                        continue
                    if c0 == " " or c0 == "\t":
                        if not out_top:  # member outputs repeat the fused node's: only take a device
                            if cur["device"] is None and (m := _BUF_ATTR.match(line)) and m[2] == "layout":
                                cur["device"] = _layout(m[3])[1]
                            continue
                        if collecting is not None:
                            if buf is not None:
                                if collecting == "users":
                                    buf["users"].extend(_users(line))
                                else:
                                    buf[collecting].extend(_QUOTED.findall(line))
                            if line.rstrip().endswith("]"):
                                collecting = None
                                if buf is not None and (b := finish_buf()) is not None:
                                    yield b
                            continue
                        if (m := _BUF_HEAD.match(line)):
                            if (b := finish_buf()) is not None:
                                yield b
                            buf = {"node": cur["name"], "name": m[1], "type": m[2], "lineno": lineno,
                                   "users": [], "mutations": []}
                            continue
                        if (m := _BUF_ATTR.match(line)):
                            attr, val = m[2], m[3]
                            if attr == "layout":
                                lay = _layout(val)
                                if cur["device"] is None:
                                    cur["device"] = lay[1]
                                if buf is not None and (why := _layout_problem(lay)) is not None:
                                    error(f"layout of {buf['name']}: {why}; its sizes, strides and bytes are stored "
                                          "as null and it is not counted")
                                    lay, buf["impossible"] = (*lay[:3], None, lay[4], None, None), True
                                if buf is not None:
                                    buf["layout"] = lay
                            elif attr in ("users", "mutations"):
                                if buf is not None:
                                    buf[attr] = _users(val) if attr == "users" else _QUOTED.findall(val)
                                if not val.rstrip().endswith("]"):
                                    collecting = attr
                                elif attr == "users" and buf is not None and (b := finish_buf()) is not None:
                                    yield b
                        continue
                    if not (_HEADER.match(line) or _MEMBER.match(line) or _ATTR.match(line)):
                        error("unrecognised line inside an outputs block")
                        continue
                    error("outputs block not closed")  # the next node has begun: read it
                    in_outputs = False
                    collecting = None
                    if (b := finish_buf()) is not None:
                        yield b
                if c0 == " " or c0 == "\t":
                    continue
                if (m := _ATTR.match(line)):
                    target = block.by_name.get(m[1]) if block is not None else None
                    if target is None:
                        error(f"attribute of unknown node {m[1]!r}")
                        continue
                    cur = target
                    attr = m[2]
                    if attr == "outputs":
                        in_outputs = True
                        out_top = target is block.nodes[0]
                        any_outputs |= out_top
                    elif attr == "users" and target is block.nodes[0]:
                        # Older torch prints `users` where newer prints the outputs block: the fields
                        # after it (group, sizes, loop body or kernel) end the block the same way.
                        target["outputs_done"] = True
                    elif attr == "node.kernel":
                        k = line[m.end():].strip()
                        target["kernel"] = None if k in ("", "None") else k
                        target["kernel_seen"] = True
                    elif attr == "group.device":
                        target["device"] = line[m.end():].strip() or None
                    continue
                if (m := _HEADER.match(line)):
                    node = {"name": m[1], "cls": m[2], "sub": m[3], "parent": None, "index": None,
                            "members": [], "kernel": None, "device": None, "lineno": lineno,
                            "outputs_done": False, "body": False, "kernel_seen": False, "indented_members": 0}
                    if pending_member is not None and block is not None:
                        node["parent"], node["index"] = pending_member
                        if (p := block.by_name.get(pending_member[0])) is not None:
                            p["members"].append(node["name"])
                        block.add(node)
                    else:
                        if pending_member is not None:
                            error("member header without its fused node")
                        for b in flush_block():
                            yield b
                        block = _Block()
                        block.add(node)
                    pending_member = None
                    cur = node
                    continue
                if (m := _MEMBER.match(line)):
                    index = int(m[2]) if len(m[2]) <= 10 else None
                    if index is None or index > _MAX_INDEX:
                        error(f"member index {m[2][:20]} past 32 bits; stored as null")
                        index = None
                    pending_member = (m[1], index)
                    continue
                if _FILLER.match(line) or line == "]":
                    continue
                if block is None:
                    before_header += 1
                    if before_header > 50:
                        raise ParseError("not an Inductor scheduler IR dump: no node header in the first lines", lineno)
                    error("not a scheduler node line")
                    continue
                error("unrecognised line")
            break
        except RECORD_FAILURES as exc:
            if (why := record_failure(exc)) is None:
                raise
            error(f"line {why}; skipped")

    if block is None:
        if log_capture:
            raise ParseError("a log capture without a scheduler node in an ir_pre_fusion or ir_post_fusion record "
                             "(TORCH_LOGS=ir_post_fusion prints them)", 1)
        if not errors:
            raise ParseError("empty input: no scheduler node", max(lineno, 1))
        raise ParseError("not an Inductor scheduler IR dump: no node header found", 1)
    # A buffer still open here lost its users line: dropped rather than guessed.
    truncated = True
    if cut:
        error("last line cut mid-way (no newline); dropped")
    elif in_outputs:
        error(f"input ended inside the outputs block of {cur['name']}")
    elif pending_member is not None:
        error(f"input ended after '{pending_member[0]}.snodes[{pending_member[1]}] =', before that member")
    elif last_blank or _block_complete(block):  # a missing final blank line is no cut
        truncated = False
    else:
        top = block.nodes[0]
        error(f"input ended inside the block of {top['name']} (line {top['lineno']}) before its last field")
    for b in flush_block():
        yield b
    for rb in (nodes_out, bufs_out):
        if (b := rb.flush()) is not None:
            yield b
    if n_errors > MAX_ERRORS:
        errors.append(line_error(lineno, f"{n_errors - MAX_ERRORS} more errors not shown"))
    if any_outputs:  # older torch prints no layouts: the byte sum is then unknown, not 0
        metrics.setdefault("memory.buffer_bytes", 0)
    if len(stages) > 1:
        errors.append(line_error(stages["post_fusion"], "the text holds IR before fusion (from line "
                                 f"{stages['pre_fusion']}) and after fusion: its counts add both"))
    stage = next(iter(stages)) if len(stages) == 1 else ("post_fusion" if any_group else None)
    yield DumpSummary(kind=DumpKind.INDUCTOR_IR, stage=stage,
                      program=None, metrics=metrics, errors=errors, truncated=truncated)
