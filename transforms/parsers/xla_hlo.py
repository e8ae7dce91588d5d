"""Streaming parser for XLA HLO module text (``--xla_dump_hlo_as_text`` dumps).

Input: the lines of one text file holding one or more ``HloModule`` blocks, as any
XLA version prints them: with or without ``%`` prefixes, operand shapes in operand
lists (older syntax), layouts with tiling / memory space, ``/*index=N*/`` comments,
JSON or proto ``backend_config``, the FileNames/StackFrames tables of newer JAX. And
as people keep and paste it, which XLA's own parser takes too: ``//`` and ``/* */``
comments anywhere (a licence or ``// RUN:`` header), blank lines and indentation, a
statement (instruction, computation header, ``HloModule`` line) over several lines,
shapes written with spaces, closing braces indented or commented, and computations
without an ``HloModule`` line (one module, named ``module_<entry computation>`` as XLA
names it). A hand-written module without a computation marked ENTRY takes its last one, a
computation without ROOT its last instruction, and a ``// -----`` line ends a module (XLA's
FileCheck tests, read by ``hlo-opt --split-input-file``). Those lines leave the fast path for
``hlo_lines`` (comment-free statements; a bounded buffer). The rows are what XLA's parser makes
of the text (docs/metrics.md): an instruction nested in an operand list, a compact tuple access
(``p#1``) and an instruction without shape are rows, a computation written inline and the async
computation of ``<op>-start`` syntax sugar are computations, and a text that is one instruction
is a module ``_``; ``hlo_lines.read_instruction`` reads such a statement whole.

Output: ``hlo_instructions`` batches as the lines stream by, ``hlo_computations`` and
``hlo_modules`` rows when each module ends, then one ``DumpSummary`` (metrics summed
over the modules of the file). Memory stays flat: per-file state is one small record
per computation plus dictionaries of distinct shape and metadata texts (capped).

Guarantees: unknown opcodes, attributes and metadata keys are recorded as printed;
a line that is not understood becomes an entry in ``errors``, and so does what XLA's parser refuses in a
line that reads (``hlo_checks``: each error names the line and the reason; the row stays); a cut file yields a
prefix of the full file's instruction rows (a last line cut mid-way is dropped) and
``truncated=True``; a ``partial`` result always has an error saying why. Raises
``ParseError`` only when the first statement past comments and blank lines is neither an
``HloModule`` header nor a computation header (or there is none).

Speed: per-row Python operations are what costs, so the common instruction line is
split with str methods, each distinct shape or metadata text is parsed once (rows keep
dictionary ids, gathered per batch in polars), and only rows that name computations
or carry a fusion kind / custom-call target are looked at further. Newer JAX modules
hold thousands of distinct metadata texts naming a few thousand stack frames: what a
frame and a file location resolve to is remembered per module until a table row is
stored. What is left is ~0.7 us of Python per instruction line and ~2 us per
computation (docs/speed.md says where it goes).
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterable, Iterator

import polars as pl

from transforms.parsers import xla_shapes as hlo_text
from transforms.parsers import hlo_checks
from transforms.parsers import hlo_lines
from transforms.parsers.hlo_lines import (
    HEADER,
    STARTS_INSTRUCTION,
    Statement,
    looks_like_hlo,
    strip_comments,
)
from transforms.records import (
    BATCH_ROWS,
    DumpKind,
    DumpSummary,
    ParseError,
    ParserOutput,
    TableBatch,
    line_error,
)

# 2: metadata strings unescaped; 3: a cut between computations is an error; 4: text as XLA's own parser
# takes it (comments, statements over several lines, spaced shapes, modules without HloModule line),
# all-to-all-start/send/recv and the other async forms in kernel.collectives, entry *_array_bytes metrics;
# 5: as XLA's parser, a hand-written module without ENTRY takes its last computation, a computation without
# ROOT its last instruction (is_root), and a "// -----" line ends a module (hlo-opt --split-input-file);
# 6: the instructions and computations XLA's parser makes of hand-written text (issue 48): nested instructions,
# inline computations, compact tuple accesses (p#1), the async computation of <op>-start syntax sugar;
# 7: what XLA's parser refuses in text that reads otherwise is an error (hlo_checks: literals, element types and
# layouts, module attributes, async chains, the opcodes it looks at, a header's shape against its root's)
# 8: also a hand-written module's iota shardings and reshapes, and operands' names and written shapes in text XLA's
# printer cannot have written (a computation named without %, an array shape without layout): stored texts with
# those faults read partial when parsed again
PARSER_VERSION = 8
PROGRAM_FROM_TEXT = True  # the program is what the dump's text names (transforms.parse.named_at)
TABLES, TABLE_DOCS = hlo_text.TABLES, hlo_text.TABLE_DOCS
__all__ = ["PARSER_VERSION", "TABLES", "TABLE_DOCS", "parse", "sniff", "stage_from_name"]

_S, _I32, _I64, _B = pl.String, pl.Int32, pl.Int64, pl.Boolean

_CALLS = re.compile(r"(?<![\w-])(to_apply|calls|condition|body|true_computation|false_computation|"
                    r"branch_computations|called_computations|select|scatter)=(\{[^}]*\}|[^\s,{}]+)")
_CALL_VALUE = re.compile(r"\{[^}]*\}|[^\s,{}]+")
_WORD = re.compile(r"\w+")
_MODULE = re.compile(r"HloModule\s+([^\s,:]+)")  # "HloModule name:" is the name (XLA's lexer: a kName)
_PASS_NAME = re.compile(r"\.\d{4}\.([^.]+)\.after_([^.]+)(?:\.before_[^.]+)?\.txt$")
_SECTIONS = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})
_NO_META = (None, None, None, None)
_FALSE, _NULL_STRING = pl.Series([False], dtype=pl.Boolean), pl.Series([None], dtype=pl.String)  # columns of one value
_CONTINUES = frozenset(",([{=")  # a line ending in one of these goes on (XLA never prints such a line)
_MAX_ERRORS, _MAX_CACHE = 100, 200_000
_SPLIT = "// -----"  # between modules of one file, as hlo-opt --split-input-file and FileCheck tests write it
_MAX_META_CACHE = 20_000  # ~10 MiB of metadata texts and tuples kept from one batch to the next
_FIELDS = {k: re.compile(rf"\b{k}=(\d+)") for k in ("file_location_id", "file_name_id", "line")}
# A computation's closing brace with its attribute after it ("}, execution_thread=\"main_thread\"").
_CLOSES_WITH_ATTRIBUTES = re.compile(r'\}\s*,\s*execution_thread\s*=\s*"[^"]*"\s*$')
_NO_SHAPE = hlo_text.ShapeInfo(None, None, None, None, None, None)  # an instruction whose shape XLA infers
_NESTED = re.compile(r"[(,\s][a-z][\w.-]*\(")  # an opcode and its "(" in an operand list (layouts: T(8,128), E(4))
# Opcodes the fast path takes as they are; the others go through special() (hlo_checks.CHECKED: looked at there)
_SIMPLE = hlo_text.SIMPLE - hlo_checks.CHECKED
_MAX_LITERALS = 4096  # constants' literals found good, remembered
_MAX_WHY = 300
# What special() asks of an opcode (hlo_checks), decided once per opcode: nothing, check its rows (only that:
# an opcode the fast path takes otherwise), a collective's or a custom-call's when its text may be wrong, or
# follow its async chain.
_NOTHING, _ONLY_CHECKED, _CHECKED, _COLLECTIVE, _CUSTOM_CALL, _CHAINED = range(6)
_ROUTES: dict[str, int] = {}


def _route(op: str) -> int:
    if op in hlo_checks.CHECKED:
        route = _ONLY_CHECKED if op in hlo_text.SIMPLE else _COLLECTIVE if op in hlo_checks.COLLECTIVES_CHECKED \
            else _CUSTOM_CALL if op == "custom-call" else _CHECKED
    else:
        route = _CHAINED if hlo_checks.chain_link(op) is not None else _NOTHING
    if len(_ROUTES) < 4096:  # opcodes are few; a hostile text's made-up ones are not kept
        _ROUTES[op] = route
    return route


def _goes_on(prev: str, text: str) -> bool:
    """Whether ``text`` can be the rest of the instruction written ``prev``: that one is still open,
    or ``text`` starts with what can only continue a statement (", attr=...", a closing bracket, "->")."""
    if text[0] in ",)]}{" or text.startswith("->"):
        return True
    st = Statement()
    st.feed(prev)
    return not st.complete


def _capped(why: str) -> str:
    """A reason quoting the text, at most _MAX_WHY characters of it (a hostile name or shape can be megabytes)."""
    return why if len(why) <= _MAX_WHY else why[: _MAX_WHY - 3] + "..."


def _row(table: dict, key: int | None) -> object:
    """A row of a stack frame table, read from its text the first time it is asked for (a module lists
    thousands; metadata refer to a few)."""
    value = table.get(key)
    if type(value) is tuple:  # (text after the id,) as the line gave it
        value = table[key] = hlo_text.record_value(value[0])
    return value


def _field(table: dict, key: int | None, name: str) -> int | None:
    """One number of a {k=v ...} row (FileLocations, StackFrames), without reading the whole row."""
    value = table.get(key)
    if type(value) is tuple:
        return int(m[1]) if (m := _FIELDS[name].search(value[0])) else None
    return value.get(name) if isinstance(value, dict) else None


def _run_of_each_row(lengths: list[int], n: int) -> pl.Series:
    """The index of each of ``n`` rows' run, the runs ``lengths`` rows long: in Python for a small batch (a
    polars query costs ~0.3 ms whatever its size), in polars for a big one."""
    if n <= 8192:
        index: list[int] = []
        for k, length in enumerate(lengths):
            index += [k] * length
        return pl.Series(index, dtype=pl.UInt32)
    return pl.select(pl.int_range(len(lengths), dtype=pl.UInt32).repeat_by(pl.Series(lengths, dtype=pl.UInt32))
                     .explode()).to_series()


def _shape_alone(ins: hlo_lines.Instruction, lone: bool = False) -> bool:
    """An operand written as a shape with no name in ``ins`` or what it nests, but where a lone instruction may
    have one (``lone``: ``ins`` is that instruction; its operands and nested instructions, not its computations)."""
    return any(o == "" and not lone or isinstance(o, hlo_lines.Instruction) and _shape_alone(o, lone)
               for o in ins.operands) or any(_shape_alone(i) for _, body in ins.bodies for i in body)


def _ends_statement(st: Statement, last: str) -> bool:
    """Whether ``last``, the input's last line (without newline), closes the statement ``st`` holds so far: closing
    brackets only (a line cut mid-way could be the start of a longer one, whose row is not this one)."""
    if last.strip().strip(")}]"):
        return False
    rest = Statement(st.in_comment, st.strings)
    rest.depth, rest.in_string = st.depth, st.in_string
    rest.feed(last)
    return rest.complete


def sniff(name: str, head: str) -> bool:
    """The first statement past comments and blank lines is an HloModule header, or a computation
    header followed by an instruction (a module without header, which XLA's parser takes too)."""
    return looks_like_hlo(head)


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
    __slots__ = ("closed", "edges", "header", "is_entry", "last", "lineno", "n", "name", "param_array_bytes",
                 "param_bytes", "root", "rooted", "structural")

    def __init__(self, name: str, is_entry: bool, lineno: int, header: str | None = None):
        self.name, self.is_entry, self.lineno, self.closed = name, is_entry, lineno, False
        self.header = header  # "... -> shape {": a header with its signature, whose shape the root must have
        self.rooted = False  # a ROOT row of it went out in an earlier batch
        self.n = self.structural = self.param_bytes = self.param_array_bytes = 0
        self.edges: list[tuple[str, str, str]] = []  # (opcode, attribute, callee)
        self.root: hlo_text.ShapeInfo | None = None
        self.last: hlo_text.ShapeInfo | None = None


class _Module:
    __slots__ = ("comp_names", "comps", "entry", "entry_marked", "frame_sources", "fusions", "headerless", "index", "is_scheduled",
                 "lineno", "loc_sources", "made", "name", "names_used", "printed", "section", "tables")

    def __init__(self, name: str, index: int, lineno: int, is_scheduled: bool):
        self.name, self.index, self.lineno, self.is_scheduled = name, index, lineno, is_scheduled
        self.comps: list[_Comp] = []
        self.comp_names: set[str] = set()
        self.entry: _Comp | None = None
        self.fusions = 0
        self.headerless = False  # no HloModule line: named after its entry computation
        self.entry_marked = False  # a computation marked ENTRY was seen
        # Printed by XLA: an HloModule line and computation headers with their signature "(params) -> shape",
        # as HloComputation::ToString writes every one. XLA prints the ENTRY computation last: such a
        # module without it was cut. A hand-written one ("name {") without ENTRY takes the last one.
        self.printed = False
        self.names_used: set[str] = set()  # names its rows were written out under (batches before its end)
        self.made: dict[str, int] = {}  # names XLA's parser gives what the text does not name, and how often given
        self.section: str | None = None
        self.tables: dict[str, dict[int, object]] = {s: {} for s in _SECTIONS}  # stack frame tables by id
        # What meta() read from the tables, (file, line) by stack frame and by file location (thousands of
        # distinct metadata texts share them); emptied whenever a table row is stored, so it never outlives one.
        self.frame_sources: dict[int, tuple[object, int | None]] = {}
        self.loc_sources: dict[int, tuple[object, int | None]] = {}

    def unique(self, name: str) -> str:
        """``name``, then ``name.1``, ``name.2``, ... as XLA's NameUniquer gives names to what the text does not name."""
        k = self.made.get(name, 0)
        self.made[name] = k + 1
        return f"{name}.{k}" if k else name

    def table_row(self, key: int, value: object) -> None:
        self.tables[self.section][key] = value
        if self.frame_sources:
            self.forget_frames()

    def forget_frames(self) -> None:
        self.frame_sources.clear()
        self.loc_sources.clear()


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
        if len(self.frame) < len(self.values):  # column by column: polars reads row tuples far slower
            new = pl.DataFrame(list(zip(*self.values[len(self.frame) :])), schema=self.schema, orient="col")
            self.frame = self.frame.vstack(new).rechunk()
        return {s.name: s for s in self.frame.gather(pl.Series(ids, dtype=pl.UInt32)).get_columns()}


class _Parser:
    def __init__(self) -> None:
        self.module: _Module | None = None
        self.comp: _Comp | None = None
        self.modules: list[_Module] = []
        self.lines: Iterator[str] = iter(())  # the input, for the slow paths that read a statement on
        self.shift = 0  # lines the slow paths read past the hot loop's count
        self.gather_end = 0  # last line of the statement the last gather read
        self.pending: tuple[str, int] | None = None  # a line a failed gather read ahead, and its number
        self.prev_text: str | None = None  # text of the row a slow path just added
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
        self.why = ""  # why the last statement() was no instruction
        self.lone: tuple[_Comp, list[int]] | None = None  # a lone instruction's computation, and parameters made
        self.gathered: list[tuple[int, int]] = []  # (offset in its text, line number) of the statement gather() read
        self.n_errors = 0
        self.truncated = False
        self.out: list[TableBatch] = []  # module-level batches waiting to be yielded
        # Computations XLA's parser makes of an instruction (an inline computation, the async computation of
        # <op>-start syntax sugar), made when the computation holding it closes: (row, name, lineno, what).
        self.deferred: list[tuple[int, str, int, object]] = []
        self.accessed: dict[str, tuple[str, str | None]] = {}  # compact tuple accesses (p#1) made in this computation
        self.chains: dict[str, tuple] = {}  # ops of async chains in this computation (Parser.chain)
        self.numbers: set[str] = set()  # parameter numbers of this computation (hand-written modules)
        self.comp_errors = 0  # errors before this computation began
        self.said_ok: dict[str, str] = {}  # header shapes not printed as their root's, found the same
        self.literals: dict[int, tuple[str, ...]] = {}  # literals found good (by hash), and for which shapes
        self.checking = True  # off for the rows of syntax sugar's async computations (made, not written)
        self.refused: tuple[int, int, int] = (-1, 0, 0)  # (row, n_errors, len(errors)) before its first refusal
        self.lookup: tuple = (None, None, 0, {})  # shape_of()'s rows by name: (computation, batch, rows seen, rows)
        # The text shows what XLA's printer never writes (a computation named without "%" or an array shape without
        # layout, in a module with signatures): its rows are asked what a hand-written module's are (written()).
        self.typed = False

    def new_batch(self, next_lineno: int = 0) -> None:
        # Column buffers of hlo_instructions. Module, computation and lineno come from runs: rows on
        # consecutive lines of one computation (any line that gives no row starts a new run).
        if self.comp is not None:  # the open computation goes on in the new batch: had it its ROOT?
            self.comp.rooted |= bool(self.roots) and self.roots[-1] >= self.comp_first
        self.names: list[str] = []
        self.ops: list[str] = []
        self.sids: list[int] = []
        self.mids: list[int] = []
        self.roots: list[int] = []
        self.runs: list[tuple[int, int, _Module, str]] = []  # (first row, its lineno, module, computation)
        self.kinds: dict[int, str | None] = {}
        self.targets: dict[int, str | None] = {}
        self.called: dict[int, str] = {}  # row -> callee names joined by "," (HLO names never hold one)
        self.edge_mark = (-1, 0)  # (row, len(comp.edges) before it): the last special() row, to undo
        self.ranges: list[tuple[_Comp, _Module, int, int]] = []  # rows of computations not yet counted
        self.settled = 0  # rows before this one are counted
        self.comp_start = self.comp_first = 0  # comp_first: its first row in this batch (settle moves comp_start)
        if self.comp is not None:
            self.runs.append((0, next_lineno, self.module, self.comp.name))

    def anchor(self, row: int, lineno: int) -> None:
        """Rows from ``row`` on sit on consecutive lines from ``lineno``."""
        run = (row, lineno, self.module, self.comp.name)
        if self.runs and self.runs[-1][0] == row:
            self.runs[-1] = run
        else:
            self.runs.append(run)

    def skipped(self, lineno: int) -> None:
        self.anchor(len(self.names), lineno + 1)

    def error(self, lineno: int, msg: str) -> None:
        self.n_errors += 1
        if self.n_errors <= _MAX_ERRORS:
            self.errors.append(line_error(lineno, msg))

    def refuse(self, lineno: int, name: str, why: str) -> None:
        """What XLA's parser refuses in the instruction ``name`` (hlo_checks), as an error of its line; taken
        back with its row if that is read again (rejoin)."""
        if self.refused[0] != len(self.names):
            self.refused = (len(self.names), self.n_errors, len(self.errors))
        self.error(lineno, _capped(f"{name[1:] if name[:1] == '%' else name}: {why}"))

    def line_of(self, row: int) -> int:
        """The line of ``row`` of this batch, the last row added or being added."""
        run = self.runs[-1]
        return run[1] + row - run[0]

    def bump(self, key: str, n: int = 1) -> None:
        self.metrics[key] = self.metrics.get(key, 0) + n

    # -- the hot loop -----------------------------------------------------------------
    def run(self, lines: Iterable[str]) -> ParserOutput:
        """Each line as XLA prints it, on the fast path; anything else (comments, statements over
        several lines, odd spacing, tuple shapes) through ``careful``/``structure``, which may read
        further lines from ``self.lines`` (``self.shift`` counts them, so a line's number is its
        index from ``enumerate`` plus ``self.shift``)."""
        self.lines = it = iter(lines)
        shape_ids, meta_ids, simple, batch_rows = self.shapes.ids, self.metas.ids, _SIMPLE, BATCH_ROWS
        light, literals, plain = hlo_checks.LIGHT, self.literals, hlo_checks.PLAIN_TYPES
        add_name, add_op, add_sid, add_mid = self.names.append, self.ops.append, self.sids.append, self.mids.append
        add_root = self.roots.append
        continues = _CONTINUES
        indent = "\0"  # " " inside a computation: a line starting with a space is an instruction
        printed = False  # the module is printed by XLA (HloComputation::ToString), which nests no instruction
        ask = True  # its rows go through written(): not printed, or typed (self.typed)
        end = None
        last = -1  # index of a line's last character before its newline
        k = n = 0
        prev = None  # the text that gave the last row, while no other line came after it
        for k, line in enumerate(it, 1):
            if line[:1] != indent:
                # The lines between instructions as XLA prints them, inline; the rest in structure().
                if indent == " ":
                    if line == "}\n":
                        self.close_comp()
                        indent, n = "\0", len(self.names)  # it may add rows (async_wrapped computations)
                        continue
                elif line == "\n":
                    continue
                elif "0" <= line[:1] <= "9" and (mod := self.module) is not None and mod.section and \
                        (raw := line.partition(" "))[0].isdigit() and raw[2][:1] in ('"', "{"):
                    mod.table_row(int(raw[0]), (raw[2],))  # a table's row after one read_rows() did not take
                    continue
                elif line[-2:] == "{\n" and line[:9] != "HloModule" and self.module is not None and \
                        ("/" not in line or "//" not in line and line.rfind("/*") <= line.rfind("*/")):
                    self.open_comp(line.strip(), k + self.shift)
                    indent = " "
                    printed = self.module.printed
                    ask = not printed or self.typed
                    continue
                is_ins = self.structure(line, k + self.shift)
                printed = self.module is not None and self.module.printed
                ask = not printed or self.typed
                if self.pending is not None:
                    self.resume()
                prev, n = self.prev_text, len(self.names)
                if n >= batch_rows:
                    yield self.flush(k + self.shift + 1)
                    shape_ids, meta_ids, n = self.shapes.ids, self.metas.ids, 0
                    add_name, add_op, add_sid, add_mid = self.names.append, self.ops.append, self.sids.append, self.mids.append
                    add_root = self.roots.append
                end = self.end
                last = -2 if end else -1
                if self.comp is None:  # between computations no row can follow before a header
                    indent = "\0"
                    if self.out:
                        yield from self.take()
                    continue
                indent = " "
                if not is_ins:
                    self.skipped(self.gather_end)
                    continue
            if line[-1] != end and end is not None and line.strip() != "}" and \
                    not _CLOSES_WITH_ATTRIBUTES.match(line.strip()):  # only the last line can lack it: cut mid-way
                self.truncated = True
                self.error(k + self.shift, "last line cut mid-way; dropped")
                self.skipped(k + self.shift)
                continue
            try:  # "  [ROOT ]%name = shape opcode(..." with an array shape; anything else raises
                name, eq, shape, rest = line.split(None, 3)
                if eq != "=":
                    if name != "ROOT" or shape != "=":
                        raise ValueError
                    add_root(n)
                    name = eq
                    shape, rest = rest.split(None, 1)
                if line[last] in continues:  # a statement that goes on
                    raise ValueError
                if shape[0] == "(":  # a tuple shape: to its first ") " (inside, ")" comes before ",", ")" or "}")
                    j = line.find(") ", line.find(" = ") + 3) + 1
                    if not printed or j <= 0 or "//" in line or line.rfind("/*") > line.rfind("*/"):
                        raise ValueError  # hand-written, or a comment: careful() (its /*index=5*/ comments stay)
                    shape, rest = line[line.find(" = ") + 3 : j], line[j + 1 :]
                    if "#" in rest:
                        raise ValueError
                i = rest.find("(")  # the operands start at i + 1 (not copied out: most rows never look at them)
                op = rest[:i] if i >= 0 else rest
                special = op not in simple
                if special and op not in light and not (i >= 0 and hlo_text.OPCODE.fullmatch(op)):
                    raise ValueError
                p = rest.find("metadata={", i + 1) if i >= 0 else -1
                # What XLA's parser makes more instructions of (read whole by careful): an instruction nested
                # in the operands of hand-written text (a "(" before the first ")", not a layout's T(8,128)), a
                # compact tuple access (p#1); special() raises at a computation written inline (to_apply={ a = }).
                if not printed and rest.find("(", i + 1, rest.find(")", i)) >= 0 and \
                        _NESTED.search(rest, i, p if p >= 0 else len(rest)) or \
                        "#" in rest and rest.find("#", i + 1, rest.find(")", i)) >= 0:
                    raise ValueError
                sid = shape_ids.get(shape)
                if sid is None:
                    if shape[-1] not in "]})" or shape[0] != "(" and not shape[: shape.find("[")].isalnum():
                        raise ValueError  # no shape ("add(f32[2] p, ..."): the text leaves it to XLA to infer
                    sid = self.shapes.add(info := hlo_text.shape_info(shape), shape)
                    if not ask and shape[-1] == "]" and shape[-2] != "[":  # an array without layout: typed
                        self.typed = ask = True
                    if (info.dtype not in plain or "{}" in shape or "D(" in shape or "P(" in shape) and \
                            (why := hlo_checks.shape_problem(shape)) is not None:  # once per distinct shape
                        self.refuse(k + self.shift, name, why)
                if p < 0:
                    mid = 0
                else:
                    key = rest[p : rest.find("}", p) + 1]
                    mid = meta_ids.get(key)
                    if mid is None or rest.find("//", i + 1, p) >= 0:  # new, or a comment before it
                        mid = self.meta(key, rest, p)
                if special:
                    if op not in light:
                        self.special(op, rest[i + 1 :] if p < 0 else rest[i + 1 : p], n, shape, name)
                    elif op == "constant":  # its literal looked at once per distinct text and shape
                        if shape not in literals.get(hash(rest[i + 1 : rest.find(")", i)]), ()):  # "0", "{1, 2}"
                            self.constant(shape, rest[i + 1 :] if p < 0 else rest[i + 1 : p], name, n, k + self.shift)
                    elif op == "convolution":  # its dim_labels and window, each pair looked at once
                        if (why := hlo_checks.convolution_problem(rest)) is not None:
                            self.refuse(k + self.shift, name, why)
                    elif "result_accuracy=" in rest or "control-predecessors=" in rest:  # all they are asked
                        self.special(op, rest[i + 1 :] if p < 0 else rest[i + 1 : p], n, shape, name)
            except ValueError:
                self.careful(line, k + self.shift, prev)
                if self.pending is not None:
                    self.resume()
                prev, n = self.prev_text, len(self.names)
                if self.comp is None:
                    indent = "\0"
                    if self.out:
                        yield from self.take()
                elif n >= batch_rows:
                    yield self.flush(k + self.shift + 1)
                    shape_ids, meta_ids, n = self.shapes.ids, self.metas.ids, 0
                    add_name, add_op, add_sid, add_mid = self.names.append, self.ops.append, self.sids.append, self.mids.append
                    add_root = self.roots.append
                continue
            if ask:  # hand-written: what XLA's parser refuses there and a printed line is not asked
                self.written(name, op, shape, rest[i + 1 :], k + self.shift)
            add_name(name)
            add_op(op)
            add_sid(sid)
            add_mid(mid)
            prev = line
            n += 1
            if n >= batch_rows:
                yield self.flush(k + self.shift + 1)
                shape_ids, meta_ids, n = self.shapes.ids, self.metas.ids, 0
                add_name, add_op, add_sid, add_mid = self.names.append, self.ops.append, self.sids.append, self.mids.append
                add_root = self.roots.append
        lineno = k + self.shift
        if self.module is not None or not self.modules:  # not when the input ends with a // ----- split
            self.finish_module(lineno, eof=True)
        if self.names:
            yield self.flush(lineno + 1)
        yield from self.take()
        yield self.summary()

    # -- lines the fast path does not take ------------------------------------------------------
    def careful(self, line: str, lineno: int, prev: str | None) -> None:
        """An indented line inside a computation that is not an instruction as XLA prints it: a tuple
        shape, a comment, a closing brace, a statement over several lines, the rest of the instruction
        before it (``prev``, the text of the last row), odd spacing, or junk. Adds its row, if any."""
        row = len(self.names)
        self.prev_text = None
        if self.roots[-1:] == [row]:  # the fast path may have noted the ROOT before giving up
            self.roots.pop()
        if "//" not in line and line.rfind("/*") <= line.rfind("*/") and line.rstrip()[-1:] not in _CONTINUES:
            if (parts := hlo_text.split_instruction(line)) is not None:  # tuple shapes end here
                if not self.statement(line, row, lineno, None, parts):
                    self.error(lineno, f"not an HLO instruction: {line.strip()[:80]!r}{self.why}")
                    self.skipped(lineno)
                return
            if line.strip() == "}":
                self.close_comp()
                return
        text = self.gather([line], lineno)
        if text and hlo_text.is_name_and_shape(text):  # "name = shape" and the opcode on the next line
            text = self.gather([text], lineno, more=True, last=self.gather_end)
        if not text:  # None: an error says why; "": a comment
            self.skipped(self.gather_end)
        elif text == "}" or _CLOSES_WITH_ATTRIBUTES.match(text):
            self.close_comp()
        elif self.statement(text, row, lineno, self.gather_end):
            pass
        elif prev is not None and row and _goes_on(prev, text):
            self.rejoin(prev, text, lineno)
        else:
            self.error(lineno, f"not an HLO instruction: {text[:80]!r}{self.why}")
            self.skipped(self.gather_end)

    def gather(self, first: list[str], lineno: int, header: bool = False, more: bool = False,
               last: int | None = None, strings: bool = False) -> str | None:
        """The comment-free text of the statement whose first lines are ``first`` (from ``lineno``),
        reading more lines while it is open; ``gather_end`` is the number of its last line. None (with
        an error) if it cannot be completed: the input ends, it outgrows the cap, or a line that starts
        an instruction comes first (that line is left in ``pending``, to be read next). ``header``: a
        computation header may end it (its "{" stays open). ``more``: read one line more in any case;
        ``last``: the line ``first`` ends on, when it was gathered already; ``strings``: a string may span lines
        (an ``HloModule`` statement). Lines that start an instruction belong to it while a computation written
        inline is open in it (a "{" ending a line after "=", "{" or ","; ``to_apply={`` and its instructions)."""
        st = Statement(strings=strings)
        inline = 0  # the depth of the inline computation open, 0 if none
        for line in first:
            st.feed(line)
        self.gather_end = lineno + len(first) - 1 if last is None else last
        while more or not (st.complete or header and st.opens_body):
            more = False
            if st.overflowed:
                self.error(lineno, f"statement not closed within {hlo_lines.MAX_STATEMENT_LINES:,} lines or "
                                   f"{hlo_lines.MAX_STATEMENT_CHARS >> 20} MiB (an unbalanced bracket or comment?); "
                                   "skipped")
                return None
            nxt = next(self.lines, None)
            if nxt is None or (self.end and nxt[-1:] != self.end and not _ends_statement(st, nxt)):
                self.truncated = True  # the input ends (cut mid-line, unless its last line ends the statement)
                self.error(lineno, "input ended inside the statement that starts here")
                return None
            self.shift += 1
            self.gather_end += 1
            if inline > st.depth:
                inline = 0
            if not inline and hlo_lines.OPENS_INLINE.search(st.text):
                inline = st.depth
            if not (st.in_comment or st.in_string or inline) and (
                    STARTS_INSTRUCTION.match(nxt) or nxt.lstrip().startswith("HloModule ")):
                self.error(lineno, f"statement not closed before line {self.gather_end} (an unbalanced "
                                   f"bracket?): {st.text[:80]!r}")
                self.pending = (nxt, self.gather_end)
                self.gather_end -= 1
                return None
            st.feed(nxt)
        if last is None:  # the k-th line fed is line lineno + k
            self.gathered = [(offset, lineno + k) for offset, k in st.line_starts()]
        else:  # first: one text gathered before (its lines as then), then lines from last + 1
            prior = self.gathered if self.gathered and self.gathered[0][1] == lineno else [(0, lineno)]
            self.gathered = prior + [(offset, last + k) for offset, k in st.line_starts() if k]
        return st.text

    def resume(self) -> None:
        """Read the line where a failed ``gather`` stopped, as the next statement."""
        while self.pending is not None:
            (line, lineno), self.pending = self.pending, None
            if self.comp is not None and line[:1] == " ":
                self.careful(line, lineno, None)
            elif self.structure(line, lineno):
                self.careful(line, lineno, None)

    def statement(self, text: str, row: int, lineno: int, last_lineno: int | None = None,
                  parts: tuple | None = None, read: bool = False) -> bool:
        """The rows of the instruction statement ``text`` (comment-free) that the fast path did not take:
        one row as printed (``parts``, from ``split_instruction``/``split_statement``), or, when it nests
        instructions or computations, accesses tuple elements compactly (``p#1``) or has no shape, every
        instruction XLA's parser makes of it (``hlo_lines.read_instruction``). False, with ``why`` set,
        if it is no instruction."""
        self.why = ""
        if parts is None:
            parts = hlo_text.split_statement(text)
        if parts is not None and not read and (  # XLA's printer nests nothing; a compact tuple access holds a "#"
                self.module.printed and "#" not in parts[4] or not hlo_lines.needs_reading(parts[4])):
            if not self.module.printed or self.typed:
                self.written(parts[1], parts[3], parts[2], parts[4], lineno)
            self.add_row(parts, text, row, last_lineno)
            return True
        try:
            ins = hlo_lines.read_instruction(strip_comments(text) if "/*" in text else text,
                                             lambda: self.module.unique("_"))
        except hlo_lines.NotAnInstruction as e:
            self.why = f" ({e})"
            return False
        if _shape_alone(ins, self.lone is not None and self.lone[0] is self.comp):
            self.why = " (an operand with a shape and no name)"
            return False
        lines = self.gathered if last_lineno is not None and self.gathered and self.gathered[0][1] == lineno else \
            [(0, lineno)]
        self.visit(ins, lines)
        self.prev_text = text if len(self.names) == row + 1 else None  # rejoin() takes back one row only
        self.anchor(len(self.names), (lineno if last_lineno is None else last_lineno) + 1)
        return True

    def visit(self, ins: hlo_lines.Instruction, lines: list[tuple[int, int]]) -> tuple[str, str | None]:
        """The rows of ``ins`` as XLA's parser adds them: its nested instructions and tuple accesses first; its
        inline computations once the computation holding it closes; each on the line its text starts on
        (``lines``: (offset in the statement, line number) where each of its lines starts). Its name and shape
        (inferred when the text gives none, None when not inferred)."""
        lineno = lines[bisect.bisect_right(lines, (ins.start, float("inf"))) - 1][1]
        names, shapes = [], []
        for k, operand in enumerate(ins.operands):
            if isinstance(operand, hlo_lines.Instruction):
                name, shape = self.visit(operand, lines)
            elif ins.opcode in ("parameter", "constant"):  # a number or a literal, not an operand
                name, shape = operand, None
            elif "#" in operand:
                name, shape = self.tuple_access(operand, lineno)
            elif (row := self.row_named(operand) if operand else None) is not None:
                name, shape = operand, self.shapes.values[self.sids[row]].shape
            elif self.lone is not None and self.lone[0] is self.comp and (written := ins.operand_shapes[k]):
                name, shape = self.lone_parameter(operand, written, lineno), written
            else:
                name, shape = operand, None
                if not self.comp.n and not self.comp.rooted:  # every row of the computation is at hand: none is it
                    self.error(lineno, f"{ins.name or ins.opcode}: operand {operand} is not defined in computation "
                                       f"{self.comp.name}")
            names.append(name)
            shapes.append(shape)
        shape = ins.shape if ins.shape is not None else hlo_text.infer_shape(ins.opcode, shapes, ins.attributes)
        if ins.opcode == "broadcast" and "dimensions=" not in ins.attributes and shapes and shapes[0] and \
                not shapes[0].endswith("[]"):  # XLA's parser: only a scalar's broadcast may leave them out
            self.error(lineno, _capped(f"{ins.name or 'broadcast'}: a broadcast of {shapes[0]} needs dimensions="))
        name = ins.name or self.module.unique(f"{ins.opcode}.anon")
        row = len(self.names)
        self.anchor(row, lineno)
        self.add_row((ins.is_root, name, shape, ins.opcode, ", ".join(names) + ")" + ins.attributes), "", row)
        for body, instructions in ins.bodies:
            self.deferred.append((row, body, lineno, (instructions, lines)))
        return name, shape

    def tuple_access(self, operand: str, lineno: int) -> tuple[str, str | None]:
        """``p#1#0``: a get-tuple-element for each access (``p#1``, then ``p#1#0``) not made before in this
        computation, named as XLA names it (``#`` made ``_``); the name and shape of the last."""
        base, *indices = operand.split("#")
        key, name, shape = base, base, self.shape_of(base)
        for index in indices:
            key = f"{key}#{index}"
            if key not in self.accessed:
                elements = hlo_text.tuple_elements(shape)
                element = elements[int(index)] if elements and index.isdigit() and int(index) < len(elements) else None
                if element is None and shape is not None:  # XLA's parser: not a tuple, or no such element
                    self.error(lineno, f"{operand}: {name} ({shape}) has no tuple element {index}")
                row = len(self.names)
                self.anchor(row, lineno)
                gte = key.replace("#", "_")
                self.add_row((False, gte, element, "get-tuple-element", f"{name}), index={index}"), "", row)
                self.accessed[key] = (gte, element)
            name, shape = self.accessed[key]
        return name, shape

    def lone_parameter(self, name: str, shape: str, lineno: int) -> str:
        """The parameter XLA's parser makes for an operand of a lone instruction: named as the operand, or
        ``_<n>`` (n: parameters made before) when only its shape is written."""
        made = self.lone[1]
        name = name or f"_{made[0]}"
        self.anchor(len(self.names), lineno)
        self.add_row((False, name, shape, "parameter", f"{made[0]})"), "", len(self.names))
        made[0] += 1
        return name

    def shape_of(self, name: str) -> str | None:
        """The shape of the instruction ``name`` of the open computation, if its row is in this batch."""
        row = self.row_named(name)
        return None if row is None else self.shapes.values[self.sids[row]].shape

    def row_named(self, name: str) -> int | None:
        """The row of the instruction ``name`` of the open computation, if it is in this batch."""
        comp, names, seen, rows = self.lookup
        if comp is not self.comp or names is not self.names or seen < self.comp_first:  # another computation or batch
            comp, names, seen, rows = self.comp, self.names, self.comp_first, {}
        for row in range(seen, len(names)):  # the rows added since the last look-up
            rows[names[row].removeprefix("%")] = row
        self.lookup = (comp, names, len(names), rows)
        return rows.get(name)

    def emit_deferred(self) -> None:
        """The computations XLA's parser made of instructions of the computation just closed, each with its
        rows, after it (the deferred ones of those after them in turn)."""
        while self.deferred:
            _, name, lineno, what = self.deferred.pop(0)
            comp = _Comp(name, False, lineno)
            self.module.comps.append(comp)
            self.comp, self.accessed, self.chains, self.numbers = comp, {}, {}, set()
            self.comp_start = self.comp_first = len(self.names)
            if len(what) == 2:  # an inline computation
                instructions, lines = what
                for ins in instructions:
                    self.visit(ins, lines)
            else:  # the async computation of <op>-start syntax sugar: a parameter per operand, and the op
                op, params, shape, head = what
                names = []
                self.checking = False  # made by XLA's parser, not written: checked as the <op>-start
                for param_shape in params:
                    names.append(self.module.unique("async_param"))
                    self.anchor(len(self.names), lineno)
                    self.add_row((False, names[-1], param_shape, "parameter", f"{len(names) - 1})"), "",
                                 len(self.names))
                self.anchor(len(self.names), lineno)
                self.add_row((False, op, shape, op, head), "", len(self.names))
                self.checking = True
                if op in hlo_text.COLLECTIVES:  # counted once, on the <op>-start as printed
                    counts = self.counts["kernel.collective"]
                    counts[op] = counts.get(op, 0) - 1
            self.close_comp(emit=False)

    def add_row(self, parts: tuple, text: str, row: int, last_lineno: int | None = None) -> None:
        """Append the row of an instruction the fast path did not take; ``last_lineno``: the last line
        of its statement when that was gathered (the next row comes after it). A shape of None: none known."""
        is_root, name, shape, op, rest = parts
        if is_root:
            self.roots.append(row)
        key = "?" if shape is None else shape
        sid = self.shapes.ids.get(key)
        if sid is None:
            sid = self.shapes.add(_NO_SHAPE if shape is None else hlo_text.shape_info(shape), key)
            if shape is not None and (why := hlo_checks.shape_problem(shape)) is not None:
                self.refuse(self.line_of(row), name, why)
        p = rest.find("metadata={")
        mid = 0
        if p >= 0:
            key = rest[p : rest.find("}", p) + 1]
            mid = self.metas.ids.get(key)
            if mid is None or rest.find("//", 0, p) >= 0:
                mid = self.meta(key, rest, p)
        if op not in _SIMPLE:
            try:
                self.special(op, rest if p < 0 else rest[:p], row, shape, name)
            except ValueError:  # a computation written inline that the statement reader was not asked to read
                self.error(self.runs[-1][1] + row - self.runs[-1][0], f"{name}: a computation written inline "
                                                                      "where none is read")
        self.names.append(name[1:] if name[:1] == "%" else name)
        self.ops.append(op)
        self.sids.append(sid)
        self.mids.append(mid)
        self.prev_text = text
        if last_lineno is not None:
            self.anchor(row + 1, last_lineno + 1)

    def rejoin(self, prev: str, text: str, lineno: int) -> None:
        """``text`` goes on with the instruction before it (whose text was ``prev``): read them as one."""
        row = len(self.names) - 1
        self.names.pop(), self.ops.pop(), self.sids.pop(), self.mids.pop()
        if self.roots[-1:] == [row]:
            self.roots.pop()
        for values in (self.kinds, self.targets, self.called):
            values.pop(row, None)
        if self.refused[0] == row:  # what the checks said of the part read first
            self.n_errors, errors = self.refused[1], self.refused[2]
            del self.errors[errors:]
            self.refused = (-1, 0, 0)
        if self.edge_mark[0] == row:
            del self.comp.edges[self.edge_mark[1] :]
        while self.runs and self.runs[-1][0] > row:
            self.runs.pop()
        st = Statement()
        st.feed(prev)
        st.feed(text)
        self.deferred = [d for d in self.deferred if d[0] != row]
        if not (st.complete and self.statement(st.text, row, lineno, self.gather_end)):
            self.error(lineno, f"not an HLO instruction: {text[:80]!r}{self.why}")
            self.skipped(self.gather_end)

    # -- everything that is not an indented instruction line ------------------------------
    def structure(self, line: str, lineno: int) -> bool:
        """A line outside a computation, or one inside it not indented with a space: a header, a
        closing brace, the stack frame tables, a comment, an ``HloModule`` line (any of them over
        several lines). True if it is an instruction as printed, for the caller to read (tabs)."""
        self.prev_text = None
        self.gather_end = lineno  # the last line this statement takes
        comp = self.comp
        if line[:1] == "}" and comp is not None and line.rstrip() == "}":
            self.close_comp()
            return False
        s = line.strip()
        if not s:
            return False
        if s == _SPLIT:
            self.split(lineno)
            return False
        gathered = "//" in s or s.rfind("/*") > s.rfind("*/") or s[-1] in ",([="
        if not gathered:
            if s.startswith("HloModule"):
                gathered = s.count("{") != s.count("}") or s.count("(") != s.count(")")
            elif comp is not None:
                if not s.endswith("{") or hlo_text.is_instruction(line):
                    return True  # an instruction not indented with spaces (tabs, hand-written)
            elif not s.endswith("{") and not (self.module and (s in _SECTIONS or s[0].isdigit())):
                gathered = True  # a computation header over several lines?
        if gathered:
            module_line = s.startswith("HloModule")
            text = self.gather([line], lineno, header=comp is None and not module_line, strings=module_line)
            if text is None and s.startswith("HloModule "):
                text = s  # cut short: it still names the module
            if not text:
                return False
            s = text
        if s.startswith("HloModule") and s[9:10] in (" ", ""):
            self.end = self.end if self.modules else "\n" if line[-1] == "\n" else None
            self.start_module(s, lineno)
            return False
        if comp is not None:
            if s == "}":
                self.close_comp()
                return False
            if _CLOSES_WITH_ATTRIBUTES.match(s):
                self.close_comp()
                return False
            if not s.endswith("{") or hlo_text.is_instruction(s):
                if not self.statement(s, len(self.names), lineno, self.gather_end if gathered else None):
                    self.error(lineno, f"not an HLO instruction: {s[:80]!r}{self.why}")
                return False
            self.error(lineno, f"computation {comp.name} not closed before the next one")
            self.close_comp()
        m = HEADER.match(s)
        if self.module is None:
            if m is None and not self.modules and hlo_lines.LONE_INSTRUCTION.match(s):
                self.end = "\n" if line[-1] == "\n" else None
                self.lone_instruction(s, lineno)
                return False
            if m is None:
                if self.modules:  # after a // ----- split
                    self.error(lineno, f"unrecognized line: {s[:80]!r}")
                    return False
                raise ParseError(f"not an XLA HLO module: {s[:80]!r}", lineno)
            self.end = "\n" if line[-1] == "\n" else None
            self.start_module(None, lineno)  # a module without header, as XLA's parser takes it
        mod = self.module
        if mod.name == "_" and self.lone is not None:
            self.error(lineno, f"text after the instruction (XLA's parser reads one instruction, or modules): {s[:80]!r}")
        elif s == "}":
            self.error(lineno, "'}' outside a computation")
        elif m is not None:
            self.open_comp(s, lineno, m)
        elif s in _SECTIONS:
            mod.section = s
            self.read_rows(lineno)
        elif s[0].isdigit() and mod.section and (record := hlo_text.read_record(s)):
            mod.table_row(record[0], record[1])
        else:
            self.error(lineno, f"unrecognized line: {s[:80]!r}")
        return False

    def read_rows(self, lineno: int) -> None:
        """The rows of the stack frame table named on line ``lineno``, in a loop of their own (a module lists
        thousands, each kept as its text until asked for: ``_row``); the first other line is left in
        ``pending``, for the statement reader (as a row the run loop does not take)."""
        table = self.module.tables[self.module.section]
        if self.module.frame_sources:
            self.module.forget_frames()
        for line in self.lines:
            self.shift += 1
            lineno += 1
            if "0" <= line[:1] <= "9" and (raw := line.partition(" "))[0].isdigit() and raw[2][:1] in ('"', "{"):
                table[int(raw[0])] = (raw[2],)
            else:
                self.pending = (line, lineno)
                return

    def lone_instruction(self, s: str, lineno: int) -> None:
        """A text that is one instruction (``s`` its first line or lines): XLA's parser makes a module and an entry
        computation named ``_`` of it, with a parameter for each operand it names with a shape and does not
        define (ParseSingleInstruction), named as the operand or ``_<n>``."""
        text = s
        st = Statement()
        st.feed(s)
        if not st.complete:
            text = self.gather([s], lineno, last=self.gather_end)
        self.start_module(None, lineno)
        mod = self.module
        mod.headerless, mod.name = False, "_"
        comp = self.comp = _Comp(mod.unique("_"), True, lineno)
        mod.comps.append(comp)
        mod.comp_names.add("_")
        mod.entry, mod.entry_marked = comp, True
        self.comp_start = self.comp_first = len(self.names)
        self.anchor(self.comp_start, lineno)
        self.lone = (comp, [0])
        if text is None or not self.statement(text, len(self.names), lineno, self.gather_end if text is not s else None,
                                              read=True):
            if text is not None:
                self.error(lineno, f"not an HLO instruction: {text[:80]!r}{self.why}")
        self.close_comp()

    def split(self, lineno: int) -> None:
        """A ``// -----`` line: the module so far ends (hlo-opt --split-input-file reads each part as a module)."""
        if self.module is not None:
            self.finish_module(lineno - 1, eof=False)
            self.module = None

    def start_module(self, s: str | None, lineno: int) -> None:
        """``s``: the HloModule statement; None for a module without one (named when its computations
        are seen: ``module_<entry computation>``, as XLA's parser names it)."""
        if self.module is not None:
            self.finish_module(lineno - 1, eof=False)
        if s and (why := hlo_checks.module_problem(s)) is not None:
            self.error(lineno, _capped(why))
        self.said_ok.clear()  # a module's headers repeat within it
        m = _MODULE.match(s) if s else None
        self.module = _Module(m[1] if m else "", len(self.modules), lineno, s is not None and "is_scheduled=true" in s)
        self.module.headerless = s is None
        self.modules.append(self.module)
        for key in self.frame_keys:  # stack_frame_id means something else in the next module
            self.metas.ids.pop(key, None)
        self.frame_keys.clear()

    def open_comp(self, s: str, lineno: int, m: re.Match | None = None) -> None:
        """A computation header (``s`` stripped): "[ENTRY ]%name (params) -> shape {" or "name {"."""
        if m is None:
            name, _, rest = s.partition(" ")
            is_entry = name == "ENTRY"
            if is_entry:
                name = rest.partition(" ")[0]
            if "(" in name or "{" in name:  # no space before the parameters or the brace
                m = HEADER.match(s)
            elif name[:2] == "/*":  # "ENTRY /*comment*/ c1 {"
                m = HEADER.match(strip_comments(s))
        if m is not None:
            name, is_entry = m[2], bool(m[1])
        mod = self.module
        if name[:1] == "%":
            name = name[1:]
        elif "->" in s and not mod.headerless:  # XLA prints a signature after "%name" only
            self.typed = True
        comp = _Comp(name, is_entry, lineno)
        self.comp = comp
        if name in mod.comp_names:  # XLA's parser: "computation already exists"
            self.error(lineno, f"computation {name} defined twice in module {mod.name}")
        if is_entry and mod.entry_marked:  # "expects only one ENTRY"
            self.error(lineno, f"a second ENTRY computation ({name}) in module {mod.name}")
        mod.comp_names.add(name)
        mod.comps.append(comp)
        if not mod.printed and not mod.headerless and "->" in s:  # the first header with a signature
            mod.printed = True
        if mod.printed:  # its signature's shape is its root's (close_comp)
            comp.header = s
        if not mod.entry_marked:
            # XLA's parser (HloParserImpl::ParseComputations, xla/hlo/parser/hlo_parser.cc): the computation
            # marked ENTRY, else the last one. Until an ENTRY shows, the computation seen last is taken for
            # it (its parameters and root counted as the entry's; a printed module ending with the input
            # without one was cut: finish_module).
            if mod.entry is not None:
                mod.entry.is_entry = False
            comp.is_entry = True
            mod.entry = comp
            mod.entry_marked = is_entry
            if mod.headerless:
                mod.name = f"module_{name}"  # named after its entry computation
        elif is_entry:
            mod.entry = comp
            mod.entry_marked = True
        self.comp_start = self.comp_first = len(self.names)
        self.accessed, self.comp_errors = {}, self.n_errors
        if self.chains or self.numbers:  # rarely anything to forget
            self.chains, self.numbers = {}, set()
        self.anchor(self.comp_start, lineno + 1)

    def close_comp(self, emit: bool = True) -> None:
        comp, roots, first, end = self.comp, self.roots, self.comp_first, len(self.names)
        if not roots or roots[-1] < first:
            if not comp.rooted and end > first:
                # No ROOT: XLA's HloComputation::Builder::Build takes the last instruction (hlo_parser.cc,
                # ParseInstructionList). Not marked when a batch ended right after that instruction.
                roots.append(end - 1)
            elif end == first and not comp.n:  # XLA's parser: an instruction list holds one at least
                self.error(comp.lineno, f"computation {comp.name} has no instruction")
        elif comp.rooted or len(roots) > 1 and roots[-2] >= first:  # "one computation should have only one ROOT"
            self.error(comp.lineno, f"computation {comp.name} has more than one ROOT")
        if comp.header is not None and roots and roots[-1] >= first:
            root = self.shapes.values[self.sids[roots[-1]]].shape
            if root is not None and not comp.header.endswith(root, 0, -2):  # as printed ("... -> root {")
                self.root_shape(comp, root, roots[-1])
        comp.header = None  # the module keeps its computations to its end: not their headers
        self.ranges.append((comp, self.module, self.comp_start, end))
        comp.closed = True
        self.comp = None
        if emit and self.deferred:
            self.emit_deferred()

    def root_shape(self, comp: _Comp, root: str, row: int) -> None:
        """XLA's parser: the shape a computation's header gives is its root's (layouts aside)."""
        if (arrow := comp.header.rfind("->")) < 0:  # a header without signature in a printed module
            return
        said = comp.header[arrow + 2 :].rstrip().removesuffix("{").strip()
        if said in self.said_ok and root == self.said_ok[said]:  # a while body's tuple, printed with /*index=N*/
            return
        if said and not hlo_checks.same_shape(said, root):
            why = f"computation {comp.name} gives shape {said}, its root {self.names[row].lstrip('%')} has {root}"
            self.error(comp.lineno, _capped(why))
        elif len(self.said_ok) < _MAX_LITERALS:
            self.said_ok[said] = root

    def settle(self) -> None:
        """Fold the rows of closed computations (``ranges``) into their counts: per batch, not per
        computation, as a module holds thousands of computations of a few instructions."""
        if self.comp is not None:  # the rows so far of the open one
            self.ranges.append((self.comp, self.module, self.comp_start, len(self.names)))
            self.comp_start = len(self.names)
        ranges, self.ranges = self.ranges, []
        first = self.settled
        ops = self.ops[first:]
        self.settled = len(self.names)
        if not ops:
            return
        # one flag byte a row: counting a computation's structural rows is then bytes.count (C), not Python
        structural = bytes(map(hlo_text.STRUCTURAL.__contains__, ops))
        one_module = not ranges or ranges[0][1] is self.module  # modules only follow one another
        fusions = None if one_module else bytes(map("fusion".__eq__, ops))
        if one_module:
            self.module.fusions += ops.count("fusion")
        if not hlo_text.COLLECTIVES.isdisjoint(ops):  # one pass (C), not one list.count per collective opcode
            counts = self.counts["kernel.collective"]
            for op, k in Counter(filter(hlo_text.COLLECTIVES.__contains__, ops)).items():
                counts[op] = counts.get(op, 0) + k
        infos, sids = self.shapes.values, self.sids
        for comp, mod, start, end in ranges:
            if start == end:
                continue
            a, b = start - first, end - first
            comp.n += end - start
            comp.structural += structural.count(1, a, b)
            if fusions is not None:
                mod.fusions += fusions.count(1, a, b)
            if comp.is_entry:
                comp.last = infos[sids[end - 1]]
                for op, sid in zip(ops[a:b], sids[start:end]):
                    if op == "parameter":
                        comp.param_bytes += infos[sid].buffer_bytes or 0
                        comp.param_array_bytes += infos[sid].bytes or 0
                for row in self.roots:
                    if start <= row < end:
                        comp.root = infos[sids[row]]

    # -- rows that name computations or carry a fusion kind / custom-call target ---------------
    def special(self, op: str, head: str, row: int, shape: str | None, name: str) -> None:
        """Fusion kind, custom-call target, computations named, what XLA's parser refuses in an opcode it
        checks (hlo_checks); raises ValueError, before it changes anything, at a computation written inline
        (to_apply={ a = ... }): the fast path leaves it to ``careful``."""
        if "//" in head:  # a comment after the instruction (only a hand-written line has one)
            head = strip_comments(head)
        if (route := _ROUTES.get(op)) is None:
            route = _route(op)
        if route == _ONLY_CHECKED:
            self.check(op, head, row, shape, name)
            return
        needles = hlo_text.CALL_ATTRS.get(op)
        if needles is None:  # an unknown or rare opcode: look for every attribute that names computations
            found = _CALLS.findall(head)
            if any(v[0] == "{" and hlo_lines.BODY.match(v) for _, v in found):
                raise ValueError(head)
        else:  # str.find is far cheaper than a regex over long operand lists
            found = []
            for needle, attr in needles:
                if (i := head.find(needle)) >= 0 and (v := _CALL_VALUE.match(head, i + len(needle))):
                    if v[0][0] == "{" and hlo_lines.BODY.match(v[0]):
                        raise ValueError(head)
                    found.append((attr, v[0]))
        self.edge_mark = (row, len(self.comp.edges))
        if not route:  # fusion, reduce, call, ...: nothing to check
            pass
        elif route == _CHECKED or route == _COLLECTIVE and ("mesh[" in head or "={}" in head) or \
                route == _CUSTOM_CALL and ("api_version=" in head or "operand_layout_constraints=" in head):
            self.check(op, head, row, shape, name)  # a collective or custom-call (thousands) when it may be wrong
        elif route == _CHAINED and self.checking:
            self.chain(op, hlo_checks.chain_link(op), head, row, shape, name)
        if op[-6:] == "-start" and (wrapped := hlo_text.wrapped_opcode(op)):
            self.sugar(wrapped, head, row, shape)
        elif op in hlo_text.NOT_ASYNC_FORMS:
            self.error(self.runs[-1][1] + row - self.runs[-1][0], f"no such opcode in XLA: {op} ({op.rpartition('-')[0]} "
                                                                  "is not wrapped as async syntax sugar)")
        if op == "fusion":
            i = head.find(", kind=")
            self.kinds[row] = m[0] if i >= 0 and (m := _WORD.match(head, i + 7)) else None
        elif op == "custom-call":
            i = head.find("custom_call_target=")
            self.targets[row] = m[1] if i >= 0 and (m := hlo_text.QUOTED.match(head, i + 19)) else None
        if not found:  # most collectives name no computation
            return
        called, edges = [], self.comp.edges
        for attr, value in found:
            for callee in value[1:-1].split(",") if value[0] == "{" else (value,):
                if callee := callee.strip().lstrip("%"):
                    called.append(callee)
                    edges.append((op, attr, callee))
        if called:
            self.called[row] = ",".join(called)

    def check(self, op: str, head: str, row: int, shape: str | None, name: str) -> None:
        """What XLA's parser refuses in an instruction of an opcode in hlo_checks.CHECKED; a constant's literal
        is looked at once per distinct text (a module repeats its scalars)."""
        if not self.checking:
            return
        if op == "constant":
            if shape is not None:
                self.constant(shape, head, name, row, self.line_of(row))
        elif (why := hlo_checks.instruction_problem(op, shape, head, self.shape_of, self.defined)) is not None:
            self.refuse(self.line_of(row), name, why)

    def constant(self, shape: str, literal: str, name: str, row: int, lineno: int) -> None:
        """A constant's shape and text after "constant(": what XLA's parser refuses in its literal; a text found
        good is remembered with its shape (up to a length: a module repeats its scalars, a big literal is rare)."""
        why = hlo_checks.literal_problem(shape, literal)
        if why is not None:
            self.refuse(lineno, name, why)
        elif "(" not in (key := literal[: literal.find(")")]):  # the literal whole (no "(": no complex, no NaN payload)
            if len(self.literals) >= _MAX_LITERALS:
                self.literals.clear()
            key = hash(key)  # by hash: a literal of kilobytes is not kept (a collision could only hide an error)
            self.literals[key] = (*self.literals.get(key, ())[-7:], shape)  # the shapes it is good for

    def chain(self, op: str, link: tuple, head: str, row: int, shape: str | None, name: str) -> None:
        """An op of an async chain (hlo_checks.chain_link) against the op its first operand names, and
        remembered for the op after it."""
        operands = [] if link[0] == "start" else hlo_checks.operand_list(head)[0]  # a start needs none looked at
        calls = hlo_checks.attribute(head, "calls")
        calls = None if calls is None or calls[:1] == "{" else calls.lstrip("%")
        thread = hlo_checks.attribute(head, "async_execution_thread")
        thread = thread.strip('"') if thread is not None else None
        before = self.chains.get(operands[0][1]) if operands else None
        if (why := hlo_checks.chain_problem(op, link, shape, operands, before, (calls, thread))) is not None:
            self.refuse(self.line_of(row), name, why)
        if before is not None:
            calls, thread = calls or before[2], thread or before[3]
        self.chains[name[1:] if name[:1] == "%" else name] = (link[0], (before and before[1]) or link[1], calls, thread)

    def written(self, name: str, op: str, shape: str, head: str, lineno: int) -> None:
        """A row of a module XLA did not print (without signatures, or ``typed``; ``head``: the text after
        "opcode("): an iota sharding of more or fewer devices than its tiles, a parameter number taken twice in its
        computation, an operand no instruction before it defines or whose shape is not the one written with it, a
        reshape that changes the element count. A printed module is not asked: a look-up per operand would cost
        every line of a dump, and XLA cannot print the sharding or the reshape (it aborts making them;
        docs/metrics.md)."""
        if "<=[" in head and (why := hlo_checks.sharding_problem(head)) is not None:
            self.refuse(lineno, name, why)
            return
        if self.lone is not None and self.lone[0] is self.comp:
            return
        if op == "parameter":
            number = head.partition(")")[0].strip()
            if number in self.numbers:
                self.refuse(lineno, name, f"parameter number {number} taken twice in computation {self.comp.name}")
            self.numbers.add(number)
            return
        if op == "constant" or "#" in head or self.n_errors > self.comp_errors:  # a row dropped may define it
            return
        whole = not (self.comp.n or self.comp.rooted)  # every row before this one is at hand (not in a batch gone)
        shapes = []
        for given, operand in hlo_checks.operand_list(head)[0]:
            row = None if not operand or "(" in operand or ")" in operand else self.row_named(operand)  # ")": nested
            if row is None:
                if whole and operand and ")" not in operand:
                    self.refuse(lineno, name, f"operand {operand} is not defined in computation {self.comp.name}")
                    return
                shapes.append(given)
                continue
            known = self.shapes.values[self.sids[row]].shape
            if given is not None and known is not None and not hlo_checks.same_shape(given, known):
                self.refuse(lineno, name, f"operand {operand} is written {given}, its shape is {known}")
                return
            shapes.append(known or given)
        if op == "reshape" and shapes and (why := hlo_checks.reshape_problem(op, shape, shapes[0])) is not None:
            self.refuse(lineno, name, why)

    def defined(self, name: str) -> bool | None:
        """Whether an instruction ``name`` comes before this row in the open computation; None when rows of it
        went out in an earlier batch (unknown)."""
        if self.comp.n or self.comp.rooted:
            return None
        return self.row_named(name) is not None

    def sugar(self, op: str, head: str, row: int, shape: str | None) -> None:
        """``<op>-start`` of XLA's async syntax sugar: XLA's parser makes an async computation of a parameter
        for each element of the first element of its shape ((operands), output, state), at least as many as
        ``op`` takes, and the op (CreateAsyncWrappedComputation), named ``async_wrapped``."""
        elements = hlo_text.tuple_elements(shape) or []
        params = hlo_text.tuple_elements(elements[0]) if elements else None
        params = list(params or [])
        params += ["f32[1]"] * (hlo_text.ARITY.get(op, 0) - len(params))  # XLA's stand-in for a missing one
        name = self.module.unique("async_wrapped")
        run = self.runs[-1]
        self.deferred.append((row, name, run[1] + row - run[0], (op, params, elements[1] if len(elements) > 1 else None,
                                                                  head)))
        self.comp.edges.append(("async-start", "calls", name))

    def meta(self, key: str, text: str, p: int) -> int:
        """Id of a metadata block; ``key`` ends at its first "}", cached unless a quoted "}" cut it short."""
        got = hlo_text.read_metadata(key)
        cache = got is not None
        got = got or hlo_text.read_metadata(text, p)
        if got is None:
            return 0
        op_type, op_name, source_file, source_line, frame = got
        if source_file is None and frame is not None:  # newer JAX: resolve the innermost stack frame
            where = self.module.frame_sources.get(frame)
            if where is None:
                where = self.frame_source(frame)
            if where[0] is not False:
                source_file = where[0]
                source_line = source_line or where[1]
            self.frame_keys.add(key)
        return self.metas.add((op_type, op_name, source_file, source_line), key if cache else None)

    def frame_source(self, frame: int) -> tuple[object, int | None]:
        """(file, line) of stack frame ``frame``'s innermost location; (False, None) when it names no location.
        Thousands of frames a module: one pass each, its location's file looked up once per location."""
        mod = self.module
        tables = mod.tables
        loc = _field(tables["StackFrames"], frame, "file_location_id")
        where = mod.loc_sources.get(loc)
        if where is None:
            locations = tables["FileLocations"]
            where = (_row(tables["FileNames"], _field(locations, loc, "file_name_id")),
                     _field(locations, loc, "line")) if loc in locations else (False, None)
            mod.loc_sources[loc] = where
        mod.frame_sources[frame] = where
        return where

    # -- output ---------------------------------------------------------------------
    def flush(self, next_lineno: int) -> TableBatch:
        self.settle()
        n = len(self.names)
        runs = [r for r, nxt in zip(self.runs, self.runs[1:] + [(n,)]) if nxt[0] > r[0]]
        starts = [r[0] for r in runs]
        lengths = [stop - start for start, stop in zip(starts, starts[1:] + [n])]
        for _, _, m, _ in runs:
            if m.headerless:
                m.names_used.add(m.name)
        # column by column: polars builds a frame from row tuples far slower (a run per computation)
        run = pl.DataFrame({"module": [m.name for _, _, m, _ in runs], "module_index": [m.index for _, _, m, _ in runs],
                            "computation": [c for _, _, _, c in runs], "lineno": [line - start for start, line, _, _ in runs]},
                           schema={"module": _S, "module_index": _I32, "computation": _S, "lineno": _I64})
        run = run.gather(_run_of_each_row(lengths, n))
        for metric, values in (("fusion.count", self.kinds), ("kernel.custom_call", self.targets)):
            counts = self.counts[metric]
            for key, k in Counter(values.values()).items():
                counts[key] = counts.get(key, 0) + k
        is_root = _FALSE.new_from_index(0, n).alias("is_root")  # (pl.repeat costs ~0.2 ms a call, whatever n)
        if self.roots:
            is_root.scatter(self.roots, True)
        sparse = {}
        for col, values in (("fusion_kind", self.kinds), ("custom_call_target", self.targets), ("called", self.called)):
            sparse[col] = full = _NULL_STRING.new_from_index(0, n).alias(col)
            if values:
                full.scatter(list(values), list(values.values()))
        shape, meta = self.shapes.gather(self.sids), self.metas.gather(self.mids)
        frame = pl.DataFrame([
            run["module"], run["module_index"], run["computation"],
            pl.Series("name", self.names, dtype=_S).str.strip_prefix("%"),  # names as printed, "%" dropped here
            pl.Series("opcode", self.ops, dtype=_S), shape["shape"], shape["layout"], shape["dtype"],
            shape["elements"], shape["bytes"], is_root, sparse["fusion_kind"],
            sparse["called"].str.split(",").alias("called_computations"), sparse["custom_call_target"],
            meta["op_type"], meta["op_name"], meta["source_file"], meta["source_line"],
            (run["lineno"] + pl.int_range(n, eager=True)).cast(_I32).alias("lineno")])
        # The dictionaries live across batches (a module repeats its shapes and metadata), bounded:
        # distinct metadata texts grow with a big module (~0.5 KiB each with their key), shapes hardly.
        for store, most in ((self.shapes, _MAX_CACHE), (self.metas, _MAX_META_CACHE)):
            if len(store.values) > most:
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
            self.settle()
            self.comp = None
        self.settle()
        entry = mod.entry
        if entry is not None and eof and mod.printed and not mod.entry_marked:
            entry.is_entry = False  # XLA prints ENTRY last: a printed module the input ends before it was cut
            entry = mod.entry = None
        if mod.headerless and mod.names_used - {mod.name}:
            self.error(mod.lineno, f"rows of module {mod.name} written before its end carry the name "
                                   f"{sorted(mod.names_used - {mod.name})[0]} (a module without HloModule line is "
                                   "named after its entry computation, known only at its end)")
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
        out_array_bytes = out.bytes if out else None
        n_ins = sum(c.n for c in mod.comps)
        self.bump("hlo.modules")
        self.bump("hlo.computations", len(mod.comps))
        self.bump("hlo.instructions", n_ins)
        self.bump("kernel.launches", launches)
        self.bump("memory.entry_parameter_bytes", entry.param_bytes if entry else 0)
        self.bump("memory.entry_output_bytes", out_bytes or 0)
        self.bump("memory.entry_parameter_array_bytes", entry.param_array_bytes if entry else 0)
        self.bump("memory.entry_output_array_bytes", out_array_bytes or 0)
        self.optimized |= mod.is_scheduled or mod.fusions > 0
        self.out.append(TableBatch("hlo_modules", pl.DataFrame([(
            mod.name, mod.index, mod.is_scheduled, entry.name if entry else None, len(mod.comps), n_ins, mod.fusions,
            launches, entry.param_bytes if entry else None, out_bytes, complete, mod.lineno)],
            schema=TABLES["hlo_modules"], orient="row")))
        comps = mod.comps
        for i in range(0, len(comps), BATCH_ROWS):
            part = comps[i : i + BATCH_ROWS]
            self.out.append(TableBatch("hlo_computations", pl.DataFrame({
                "module": [mod.name] * len(part), "module_index": [mod.index] * len(part), "name": [c.name for c in part],
                "is_entry": [c.is_entry for c in part], "role": [roles.get(c.name, "other") for c in part],
                "instructions": [c.n for c in part], "kernel_launches": [c.n - c.structural for c in part],
                "lineno": [c.lineno for c in part]}, schema=TABLES["hlo_computations"])))

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
                if n:  # 0: an op in an async computation of syntax sugar, counted on its <op>-start
                    metrics[f"{prefix}.{key or 'unknown'}"] = n
        errors = self.errors + ([f"... {self.n_errors - _MAX_ERRORS} more errors"] if self.n_errors > _MAX_ERRORS else [])
        return DumpSummary(kind=DumpKind.XLA_HLO, stage="after_optimizations" if self.optimized else
                           "before_optimizations", program=self.modules[0].name if self.modules else None,
                           metrics=metrics, errors=errors, truncated=self.truncated)


def parse(lines: Iterable[str]) -> ParserOutput:
    return _Parser().run(lines)
