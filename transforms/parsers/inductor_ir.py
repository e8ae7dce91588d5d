"""TorchInductor scheduler IR (``ir_pre_fusion.txt`` / ``ir_post_fusion.txt``) -> tables.

Input: the lines of one file written under ``TORCH_COMPILE_DEBUG=1`` into
``torch_compile_debug/run_<time>-pid_<pid>/torchinductor/<graph dir>/``. Each top-level
scheduler node is a block starting with ``op12: SchedulerNode(ComputedBuffer)`` (``buf12:``
in older torch), followed by ``op12.<attr> = ...`` lines, an ``op12.outputs = [ ... ]``
block of output buffers, and for fused nodes ``op3_op4.snodes[i] =`` + the member's block.
Blocks are separated by blank lines.

Guarantees: streaming (state is one top-level block plus a set of buffer names),
``TableBatch`` frames of ``inductor_nodes`` and ``inductor_buffers`` with the declared
schemas, then one ``DumpSummary``. Buffer rows come from the top-level node's outputs
block only (a fused node lists all its members' outputs again), so each buffer appears
once. A line cut mid-way at the end of the input is dropped; a cut inside a block sets
``truncated`` and keeps the nodes seen. Raises ``ParseError`` only for empty input or
when no node header appears in the first lines.
"""

from __future__ import annotations

import re
from typing import Iterable

import polars as pl

from transforms.records import DumpKind, DumpSummary, ParseError, ParserOutput, RowBuffer, line_error

PARSER_VERSION = 2  # 2: every cut is an error; a missing final blank line is not a cut

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
        "bytes": "prod(size) * itemsize of dtype when both are known, else null.",
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
MAX_ERRORS = 100
_NO_LAYOUT = (None,) * 7
GROUP_CLASSES = frozenset({"FusedSchedulerNode", "OuterLoopFusedSchedulerNode", "ForeachKernelSchedulerNode",
                           "FusedMixOrderReductions", "FusedNestedReductions",
                           "FusedExternTritonKernelSchedulerNode"})


def sniff(name: str, head: str) -> bool:
    if name in ("ir_pre_fusion.txt", "ir_post_fusion.txt"):
        return True
    for line in head.splitlines()[:5]:
        if line.strip():
            m = _HEADER.match(line.rstrip("\r"))
            return bool(m) and (m[2].endswith("SchedulerNode") or m[2] in GROUP_CLASSES)
    return False


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
        return bool(members) and len(top["members"]) >= announced and all(n["body"] for n in members)
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
        if lay[0] == "FixedLayout" and lay[6] is not None:
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

    for raw in lines:
        lineno += 1
        c0 = raw[:1]
        if raw[-1:] == "\n":
            any_newline = True
        elif any_newline and not ((c0 == " " or c0 == "\t") and not in_outputs):
            # Only the last line of newline-terminated input can lack one: it was cut
            # mid-way, and a partial line is not trusted (a loop-body line is not read).
            last_blank, cut = False, True
            break
        if (c0 == " " or c0 == "\t") and not in_outputs:
            last_blank = False
            if cur is not None and cur["outputs_done"]:  # its loop body, which ends the node's block
                cur["body"] = raw.lstrip().startswith("return")
            continue  # dependency continuations, loop bodies: most of the file
        line = raw.rstrip("\r\n")
        if not line or line.isspace():
            last_blank = True
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
                    "outputs_done": False, "body": False, "kernel_seen": False}
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
            pending_member = (m[1], int(m[2]))
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

    if block is None:
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
    metrics.setdefault("memory.buffer_bytes", 0)
    yield DumpSummary(kind=DumpKind.INDUCTOR_IR, stage="post_fusion" if any_group else None,
                      program=None, metrics=metrics, errors=errors, truncated=truncated)
