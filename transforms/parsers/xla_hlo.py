"""Streaming parser for XLA HLO module text (``--xla_dump_hlo_as_text`` dumps).

Input: the lines of one text file holding one or more ``HloModule`` blocks, as any
XLA version prints them: with or without ``%`` prefixes, operand shapes in operand
lists (older syntax), layouts with tiling / memory space, ``/*index=N*/`` comments,
JSON or proto ``backend_config``, the FileNames/StackFrames tables of newer JAX.

Output: ``hlo_instructions`` batches as the lines stream by, ``hlo_computations`` and
``hlo_modules`` rows when each module ends, then one ``DumpSummary`` (metrics summed
over the modules of the file). Memory stays flat: per-file state is one small record
per computation plus dictionaries of distinct shape and metadata texts (capped).

Guarantees: unknown opcodes, attributes and metadata keys are recorded as printed;
a line that is not understood becomes an entry in ``errors``; a cut file yields a
prefix of the full file's instruction rows (a last line cut mid-way is dropped) and
``truncated=True``. Raises ``ParseError`` only when the first non-blank line is not an
``HloModule`` header (or there is none).

Speed: per-row Python operations are what costs, so the common instruction line is
split with str methods, each distinct shape or metadata text is parsed once (rows keep
dictionary ids, gathered per batch in polars), and only rows that name computations
or carry a fusion kind / custom-call target are looked at further.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import polars as pl

from transforms.parsers import xla_shapes as hlo_text
from transforms.records import (
    BATCH_ROWS,
    COLLECTIVES,
    DumpKind,
    DumpSummary,
    ParseError,
    ParserOutput,
    TableBatch,
    line_error,
)

PARSER_VERSION = 3  # 2: metadata strings unescaped; 3: a cut between computations is an error
TABLES, TABLE_DOCS = hlo_text.TABLES, hlo_text.TABLE_DOCS
__all__ = ["PARSER_VERSION", "TABLES", "TABLE_DOCS", "parse", "sniff", "stage_from_name"]

_S, _I32, _I64, _B = pl.String, pl.Int32, pl.Int64, pl.Boolean

_CALLS = re.compile(r"(?<![\w-])(to_apply|calls|condition|body|true_computation|false_computation|"
                    r"branch_computations|called_computations|select|scatter)=(\{[^}]*\}|[^\s,{}]+)")
_CALL_VALUE = re.compile(r"\{[^}]*\}|[^\s,{}]+")
_WORD = re.compile(r"\w+")
_HEADER = re.compile(r"(ENTRY\s+)?%?([^\s(]+)")
_MODULE = re.compile(r"HloModule\s+([^\s,]+)")
_PASS_NAME = re.compile(r"\.\d{4}\.([^.]+)\.after_([^.]+)(?:\.before_[^.]+)?\.txt$")
_SECTIONS = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})
_NO_META = (None, None, None, None)
_MAX_ERRORS, _MAX_CACHE = 100, 200_000


def sniff(name: str, head: str) -> bool:
    for line in head.splitlines():
        if line.strip():
            return line.startswith("HloModule ")
    return False


def stage_from_name(name: str) -> str | None:
    """XLA dump names: *.before_optimizations.txt, *[cpu_|gpu_|sm_X.Y_gpu_]after_optimizations.txt,
    per-pass dumps *.NNNN.<pipeline>.after_<pass>[.before_<next pass>].txt -> "pass:<pipeline>/<pass>"."""
    if name.endswith("before_optimizations.txt"):
        return "before_optimizations"
    if name.endswith("after_optimizations.txt"):
        return "after_optimizations"
    if m := _PASS_NAME.search(name):
        return f"pass:{m[1]}/{m[2]}"
    return None


class _Comp:
    __slots__ = ("closed", "edges", "is_entry", "last", "lineno", "n", "name", "param_bytes", "root", "structural")

    def __init__(self, name: str, is_entry: bool, lineno: int):
        self.name, self.is_entry, self.lineno, self.closed = name, is_entry, lineno, False
        self.n = self.structural = self.param_bytes = 0
        self.edges: list[tuple[str, str, str]] = []  # (opcode, attribute, callee)
        self.root: hlo_text.ShapeInfo | None = None
        self.last: hlo_text.ShapeInfo | None = None


class _Module:
    __slots__ = ("comps", "entry", "fusions", "index", "is_scheduled", "lineno", "name", "section", "tables")

    def __init__(self, name: str, index: int, lineno: int, is_scheduled: bool):
        self.name, self.index, self.lineno, self.is_scheduled = name, index, lineno, is_scheduled
        self.comps: list[_Comp] = []
        self.entry: _Comp | None = None
        self.fusions = 0
        self.section: str | None = None
        self.tables: dict[str, dict[int, object]] = {s: {} for s in _SECTIONS}  # stack frame tables by id


class _Dictionary:
    """Distinct values (shape infos, metadata tuples) by id: each text is parsed once, rows keep ids."""

    def __init__(self, schema: dict, first: tuple | None = None):
        self.schema, self.first = schema, first
        self.reset()

    def reset(self) -> None:
        self.ids: dict[str, int] = {}
        self.values: list[tuple] = [] if self.first is None else [self.first]
        self.frame = pl.DataFrame(schema=self.schema)

    def add(self, value: tuple, key: str | None = None) -> int:
        if key is not None:
            self.ids[key] = len(self.values)
        self.values.append(value)
        return len(self.values) - 1

    def gather(self, ids: list[int]) -> dict[str, pl.Series]:
        if len(self.frame) < len(self.values):
            new = pl.DataFrame(self.values[len(self.frame) :], schema=self.schema, orient="row")
            self.frame = self.frame.vstack(new).rechunk()
        return {s.name: s for s in self.frame.gather(pl.Series(ids, dtype=pl.UInt32)).get_columns()}


class _Parser:
    def __init__(self) -> None:
        self.module: _Module | None = None
        self.comp: _Comp | None = None
        self.modules: list[str] = []
        self.end: str | None = None  # "\n" when lines carry their newline
        self.optimized = False
        self.shapes = _Dictionary({"shape": _S, "layout": _S, "dtype": _S, "elements": _I64, "bytes": _I64,
                                   "buffer_bytes": _I64})
        self.metas = _Dictionary({"op_type": _S, "op_name": _S, "source_file": _S, "source_line": _I32}, _NO_META)
        self.frame_keys: set[str] = set()  # metadata texts resolved through this module's stack frames
        self.new_batch()
        self.metrics: dict[str, float] = {}
        self.counts: dict[str, dict] = {"fusion.count": {}, "kernel.custom_call": {}, "kernel.collective": {}}
        self.errors: list[str] = []
        self.n_errors = 0
        self.truncated = False
        self.out: list[TableBatch] = []  # module-level batches waiting to be yielded

    def new_batch(self, next_lineno: int = 0) -> None:
        # Column buffers of hlo_instructions. Module, computation and lineno come from runs: rows on
        # consecutive lines of one computation (any line that gives no row starts a new run).
        self.names: list[str] = []
        self.ops: list[str] = []
        self.sids: list[int] = []
        self.mids: list[int] = []
        self.roots: list[int] = []
        self.runs: list[tuple[int, int, _Module, str]] = []  # (first row, its lineno, module, computation)
        self.kinds: dict[int, str | None] = {}
        self.targets: dict[int, str | None] = {}
        self.called: dict[int, str] = {}  # row -> callee names joined by "," (HLO names never hold one)
        self.comp_start = 0
        if self.comp is not None:
            self.runs.append((0, next_lineno, self.module, self.comp.name))

    def skipped(self, lineno: int) -> None:
        row = len(self.names)
        run = (row, lineno + 1, self.module, self.comp.name)
        if self.runs and self.runs[-1][0] == row:
            self.runs[-1] = run
        else:
            self.runs.append(run)

    def error(self, lineno: int, msg: str) -> None:
        self.n_errors += 1
        if self.n_errors <= _MAX_ERRORS:
            self.errors.append(line_error(lineno, msg))

    def bump(self, key: str, n: int = 1) -> None:
        self.metrics[key] = self.metrics.get(key, 0) + n

    # -- the hot loop -----------------------------------------------------------------
    def run(self, lines: Iterable[str]) -> ParserOutput:
        shape_ids, meta_ids, simple, batch_rows = self.shapes.ids, self.metas.ids, hlo_text.SIMPLE, BATCH_ROWS
        add_name, add_op, add_sid, add_mid = self.names.append, self.ops.append, self.sids.append, self.mids.append
        add_root = self.roots.append
        indent = "\0"  # " " inside a computation: a line starting with a space is an instruction
        end = None
        lineno = n = 0
        for lineno, line in enumerate(lines, 1):
            if line[:1] != indent:
                is_ins = self.structure(line, lineno)
                if self.comp is None:  # between computations no row can follow before a header
                    indent, end = "\0", self.end
                    if self.out:
                        yield from self.take()
                    continue
                indent = " "
                if not is_ins:
                    self.skipped(lineno)
                    continue
            if line[-1] != end and end is not None:  # only the last line can lack it: cut mid-way
                self.truncated = True
                self.error(lineno, "last line cut mid-way; dropped")
                self.skipped(lineno)
                continue
            try:  # "  [ROOT ]%name = shape opcode(..." with an array shape; anything else raises
                name, eq, shape, rest = line.split(None, 3)
                if eq != "=":
                    if name != "ROOT" or shape != "=":
                        raise ValueError
                    add_root(n)
                    name = eq
                    shape, rest = rest.split(None, 1)
                if shape[0] == "(":
                    raise ValueError
                op, paren, rest = rest.partition("(")
                special = op not in simple
                if special and not (paren and hlo_text.OPCODE.fullmatch(op)):
                    raise ValueError
                if name[0] == "%":
                    name = name[1:]
            except ValueError:
                if not (parts := self.careful(line, lineno, n)):
                    continue
                name, shape, op, rest = parts
                special = op not in simple
            sid = shape_ids.get(shape)
            if sid is None:
                sid = self.shapes.add(hlo_text.shape_info(shape), shape)
            p = rest.find("metadata={")
            if p < 0:
                mid = 0
            else:
                key = rest[p : rest.find("}", p) + 1]
                mid = meta_ids.get(key)
                if mid is None:
                    mid = self.meta(key, rest, p)
            if special:
                self.special(op, rest if p < 0 else rest[:p], n)
            add_name(name)
            add_op(op)
            add_sid(sid)
            add_mid(mid)
            n += 1
            if n >= batch_rows:
                yield self.flush(lineno + 1)
                shape_ids, meta_ids, n = self.shapes.ids, self.metas.ids, 0
                add_name, add_op, add_sid, add_mid = self.names.append, self.ops.append, self.sids.append, self.mids.append
                add_root = self.roots.append
        self.finish_module(lineno, eof=True)
        if self.names:
            yield self.flush(lineno + 1)
        yield from self.take()
        yield self.summary()

    def careful(self, line: str, lineno: int, row: int) -> tuple[str, str, str, str] | None:
        """ROOT lines with tuple shapes, tuple shapes, odd spacing, junk."""
        if self.roots[-1:] == [row]:  # the fast path may have noted the ROOT before giving up
            self.roots.pop()
        if (parts := hlo_text.split_instruction(line)) is None:
            if line.strip():
                self.error(lineno, f"not an HLO instruction: {line.strip()[:80]!r}")
            self.skipped(lineno)
            return None
        if parts[0]:
            self.roots.append(row)
        return parts[1:]

    # -- everything that is not an indented instruction line ------------------------------
    def structure(self, line: str, lineno: int) -> bool:
        """Handle a header/closing/section line; True if it is an instruction line after all."""
        if line[:1] == "}" and self.comp is not None and line.rstrip() == "}":
            self.close_comp()
            return False
        s = line.strip()
        if not s:
            return False
        if s.startswith("HloModule"):
            self.end = self.end if self.module else "\n" if line[-1] == "\n" else None
            self.start_module(s, lineno)
            return False
        if self.module is None:
            raise ParseError(f"not an XLA HLO module: {s[:80]!r}", lineno)
        if s == "}":
            self.error(lineno, "'}' outside a computation")
            return False
        if self.comp is not None:
            if not s.endswith("{") or hlo_text.is_instruction(line):
                return True  # an instruction not indented with spaces (tabs, hand-written)
            self.error(lineno, f"computation {self.comp.name} not closed before the next one")
            self.close_comp()
        mod = self.module
        if s.endswith("{"):
            m = _HEADER.match(s)
            self.comp = _Comp(m[2], bool(m[1]), lineno)
            mod.comps.append(self.comp)
            mod.entry = self.comp if m[1] else mod.entry
            self.comp_start = len(self.names)
        elif s in _SECTIONS:
            mod.section = s
        elif s[0].isdigit() and mod.section and (record := hlo_text.read_record(s)):
            mod.tables[mod.section][record[0]] = record[1]
        else:
            self.error(lineno, f"unrecognized line: {s[:80]!r}")
        return False

    def start_module(self, s: str, lineno: int) -> None:
        if self.module is not None:
            self.finish_module(lineno - 1, eof=False)
        m = _MODULE.match(s)
        self.module = _Module(m[1] if m else "", len(self.modules), lineno, "is_scheduled=true" in s)
        self.modules.append(self.module.name)
        for key in self.frame_keys:  # stack_frame_id means something else in the next module
            self.metas.ids.pop(key, None)
        self.frame_keys.clear()

    def close_comp(self) -> None:
        self.account()
        self.comp.closed = True
        self.comp = None

    def account(self) -> None:
        """Fold the current computation's rows of this batch into its counts (at close or batch flush)."""
        comp, start, end = self.comp, self.comp_start, len(self.names)
        self.comp_start = end
        if start == end:
            return
        ops, infos = self.ops[start:], self.shapes.values
        comp.n += end - start
        comp.structural += sum(map(hlo_text.STRUCTURAL.__contains__, ops))
        self.module.fusions += ops.count("fusion")
        if not COLLECTIVES.isdisjoint(ops):
            counts = self.counts["kernel.collective"]
            for op in COLLECTIVES.intersection(ops):
                counts[op] = counts.get(op, 0) + ops.count(op)
        comp.last = infos[self.sids[-1]]
        if comp.is_entry:
            for op, sid in zip(ops, self.sids[start:]):
                if op == "parameter":
                    comp.param_bytes += infos[sid].buffer_bytes or 0
            for row in self.roots:
                if row >= start:
                    comp.root = infos[self.sids[row]]

    # -- rows that name computations or carry a fusion kind / custom-call target ---------------
    def special(self, op: str, head: str, row: int) -> None:
        if op == "fusion":
            i = head.find(", kind=")
            self.kinds[row] = m[0] if i >= 0 and (m := _WORD.match(head, i + 7)) else None
        elif op == "custom-call":
            i = head.find("custom_call_target=")
            self.targets[row] = m[1] if i >= 0 and (m := hlo_text.QUOTED.match(head, i + 19)) else None
        needles = hlo_text.CALL_ATTRS.get(op)
        if needles is None:  # an unknown or rare opcode: look for every attribute that names computations
            found = _CALLS.findall(head)
        else:  # str.find is far cheaper than a regex over long operand lists
            found = [(attr, v[0]) for needle, attr in needles
                     if (i := head.find(needle)) >= 0 and (v := _CALL_VALUE.match(head, i + len(needle)))]
        called, edges = [], self.comp.edges
        for attr, value in found:
            for callee in value[1:-1].split(",") if value[0] == "{" else (value,):
                if callee := callee.strip().lstrip("%"):
                    called.append(callee)
                    edges.append((op, attr, callee))
        if called:
            self.called[row] = ",".join(called)

    def meta(self, key: str, text: str, p: int) -> int:
        """Id of a metadata block; ``key`` ends at its first "}", cached unless a quoted "}" cut it short."""
        got = hlo_text.read_metadata(key)
        cache = got is not None
        got = got or hlo_text.read_metadata(text, p)
        if got is None:
            return 0
        op_type, op_name, source_file, source_line, frame = got
        if source_file is None and frame is not None:  # newer JAX: resolve the innermost stack frame
            tables = self.module.tables
            loc = tables["FileLocations"].get(tables["StackFrames"].get(frame, {}).get("file_location_id"))
            if loc:
                source_file = tables["FileNames"].get(loc.get("file_name_id"))
                source_line = source_line or loc.get("line")
            self.frame_keys.add(key)
        return self.metas.add((op_type, op_name, source_file, source_line), key if cache else None)

    # -- output ---------------------------------------------------------------------
    def flush(self, next_lineno: int) -> TableBatch:
        if self.comp is not None:
            self.account()
        n = len(self.names)
        runs = [r for r, nxt in zip(self.runs, self.runs[1:] + [(n,)]) if nxt[0] > r[0]]
        run_ids: list[int] = []
        for k, ((start, *_), (stop, *_)) in enumerate(zip(runs, runs[1:] + [(n,)])):
            run_ids += [k] * (stop - start)
        run = pl.DataFrame([(m.name, m.index, c, line - start) for start, line, m, c in runs], orient="row",
                           schema={"module": _S, "module_index": _I32, "computation": _S, "lineno": _I64})
        run = run.gather(pl.Series(run_ids, dtype=pl.UInt32))
        for metric, values in (("fusion.count", self.kinds), ("kernel.custom_call", self.targets)):
            counts = self.counts[metric]
            for key, k in Counter(values.values()).items():
                counts[key] = counts.get(key, 0) + k
        is_root = [False] * n
        for row in self.roots:
            is_root[row] = True
        sparse = {}
        for col, values in (("fusion_kind", self.kinds), ("custom_call_target", self.targets), ("called", self.called)):
            full = [None] * n
            for i, v in values.items():
                full[i] = v
            sparse[col] = pl.Series(col, full, dtype=_S)
        shape, meta = self.shapes.gather(self.sids), self.metas.gather(self.mids)
        frame = pl.DataFrame([
            run["module"], run["module_index"], run["computation"], pl.Series("name", self.names, dtype=_S),
            pl.Series("opcode", self.ops, dtype=_S), shape["shape"], shape["layout"], shape["dtype"],
            shape["elements"], shape["bytes"], pl.Series("is_root", is_root, dtype=_B), sparse["fusion_kind"],
            sparse["called"].str.split(",").alias("called_computations"), sparse["custom_call_target"],
            meta["op_type"], meta["op_name"], meta["source_file"], meta["source_line"],
            (run["lineno"] + pl.int_range(n, eager=True)).cast(_I32).alias("lineno")])
        for store in (self.shapes, self.metas):
            if len(store.values) > _MAX_CACHE:
                store.reset()
        self.new_batch(next_lineno)
        return TableBatch("hlo_instructions", frame)

    def finish_module(self, lineno: int, eof: bool) -> None:
        mod = self.module
        if mod is None:
            raise ParseError("no HloModule header", lineno or None)
        inside = self.comp is not None
        if inside:
            self.error(lineno, f"{'input' if eof else 'module'} ended inside computation {self.comp.name}")
            self.truncated |= eof
            self.account()
            self.comp = None
        entry = mod.entry
        complete = entry is not None and entry.closed
        if not complete:
            self.truncated |= eof
            if not eof:
                self.error(lineno, f"module {mod.name} has no complete ENTRY computation")
            elif not inside:  # a cut between computations: ENTRY, printed last, is missing
                self.error(lineno, f"input ended before module {mod.name} had its ENTRY computation")
        by_name = {c.name: c for c in mod.comps}
        roles = {entry.name: "entry"} if entry else {}
        for comp in mod.comps:
            for op, attr, callee in comp.edges:
                roles.setdefault(callee, hlo_text.role(op, attr))
        executed, todo = set(), [entry] if entry else []
        while todo:  # ENTRY and what it reaches through call / while / conditional
            comp = todo.pop()
            if comp.name not in executed:
                executed.add(comp.name)
                todo += [by_name[c] for op, _, c in comp.edges if op in hlo_text.EXECUTES and c in by_name]
        launches = sum(by_name[c].n - by_name[c].structural for c in executed)
        out = entry and (entry.root or entry.last)
        out_bytes = out.buffer_bytes if out else None
        n_ins = sum(c.n for c in mod.comps)
        self.bump("hlo.modules")
        self.bump("hlo.computations", len(mod.comps))
        self.bump("hlo.instructions", n_ins)
        self.bump("kernel.launches", launches)
        self.bump("memory.entry_parameter_bytes", entry.param_bytes if entry else 0)
        self.bump("memory.entry_output_bytes", out_bytes or 0)
        self.optimized |= mod.is_scheduled or mod.fusions > 0
        self.out.append(TableBatch("hlo_modules", pl.DataFrame([(
            mod.name, mod.index, mod.is_scheduled, entry.name if entry else None, len(mod.comps), n_ins, mod.fusions,
            launches, entry.param_bytes if entry else None, out_bytes, complete, mod.lineno)],
            schema=TABLES["hlo_modules"], orient="row")))
        rows = [(mod.name, mod.index, c.name, c.is_entry, roles.get(c.name, "other"), c.n, c.n - c.structural,
                 c.lineno) for c in mod.comps]
        for i in range(0, len(rows), BATCH_ROWS):
            self.out.append(TableBatch("hlo_computations", pl.DataFrame(
                rows[i : i + BATCH_ROWS], schema=TABLES["hlo_computations"], orient="row")))

    def take(self) -> list[TableBatch]:
        out, self.out = self.out, []
        return out

    def summary(self) -> DumpSummary:
        metrics = dict(self.metrics)
        for prefix, counts in self.counts.items():
            total = {"fusion.count": "fusion.count", "kernel.custom_call": "kernel.custom_calls",
                     "kernel.collective": "kernel.collectives"}[prefix]
            metrics[total] = sum(counts.values())
            for key, n in sorted(counts.items(), key=lambda kv: str(kv[0])):
                metrics[f"{prefix}.{key or 'unknown'}"] = n
        errors = self.errors + ([f"... {self.n_errors - _MAX_ERRORS} more errors"] if self.n_errors > _MAX_ERRORS else [])
        return DumpSummary(kind=DumpKind.XLA_HLO, stage="after_optimizations" if self.optimized else
                           "before_optimizations", program=self.modules[0] if self.modules else None,
                           metrics=metrics, errors=errors, truncated=self.truncated)


def parse(lines: Iterable[str]) -> ParserOutput:
    return _Parser().run(lines)
