"""XLA buffer assignment dumps and their side files, as table rows and memory metrics.

Input: the lines of one of these files, as XLA writes them with ``--xla_dump_to``:

- ``*-buffer-assignment.txt``: ``BufferAssignment:`` then ``allocation N: size S, flags:``
  headers, each followed by its `` value: <id name @color> (size=,offset=): shape`` lines.
  Every header syntax XLA has printed since 2017 is read (the object's address before the
  size, shapes with or without |...|, see ``_ALLOC``), and the LogicalBuffer value lines of
  2017-2019 (``_OLD_VALUE``); a header without its closing ':' (a wrapped or cut paste) is
  an error naming its line, and its values are skipped with it.
  Older XLA (the GPU seed) goes on in the same file with ``Total bytes used:``,
  ``Used values:`` and the ``HloLiveRange`` listing; XLA:CPU in jaxlib 0.10 stops after
  the allocations and writes the rest to the two side files below.
- ``*-buffer-assignment-values.txt``: ``Total bytes used:`` and ``Used values:``.
- ``*-live-range.txt``: ``HloLiveRange (max N):`` (read by ``transforms.parsers.xla_live_ranges``).

Output (``parse``): ``TableBatch`` items of the tables in ``TABLES`` and, last, one
``DumpSummary`` (program left None: these files do not name the module). Metrics,
each present only when the file has that section:

- allocations: ``memory.allocations``, ``.parameter_allocations``, ``.values`` (value
  lines), ``.total_bytes``, ``.parameter_bytes``, ``.live_out_bytes`` (maybe-live-out),
  ``.alias_bytes`` (parameter and maybe-live-out: donated), ``.temp_bytes``,
  ``.constant_bytes``, ``.thread_local_bytes``. Like XLA's own
  ``BufferAssignment::ComputeSummaryStats`` each sums the allocations carrying one flag,
  so they overlap; on XLA:CPU they equal jax's ``compiled.memory_analysis()``:
  argument_size = parameter_bytes, output_size = live_out_bytes, alias_size =
  alias_bytes, temp_size = temp_bytes. ``total_bytes`` is the ``Total bytes used`` line
  when present, else the sum of allocation sizes (XLA prints exactly that sum; a
  mismatch is recorded as an error).
- values listing: ``memory.total_bytes``, ``memory.used_values``.
- live ranges: ``memory.live_ranges``, ``.live_range_max_time`` (the ``max``),
  ``.peak_time``, ``.peak_values``, ``.peak_live_bytes`` (sum at the peak).

Guarantees: every row comes from one line, so a cut file yields a prefix of the rows
of the whole file; a last line without its newline (a byte cut) is not read and sets
``truncated``. A cut between lines is ``truncated`` too, with an error saying what is
missing, wherever the text shows it (``_Dump.finish``): an allocation without values, or
whose values do not reach its size (XLA sizes an allocation by its values: the first
one's size, or a temp heap's extent); a listing that ends before the allocation of the
program's output (XLA prints ``output shape is`` on it since it prints parameter
shapes), or before a maybe-live-out allocation for each array of a tuple output (since
it prints shapes between |...|); fewer used values than the listing's values; used
values that name a user whose output no listed value is at (XLA lists values by id, an
instruction's after those it uses); a combined file (allocations and used values,
shapes between |...|) that ends before its ``HloLiveRange``; a live-range listing short
of ``max`` entries, of its peak, or of the values live at the peak. Nothing in the file
tells a smaller whole file from a cut between allocations after those the output needs,
nor from a cut between used values whose users are all listed: XLA's
``BufferAssignment::ToString`` writes ``BufferAssignment:`` and the allocations, no count
and nothing after the last (thread-local and temp allocations come last, and a program may
have none), and ``ValuesToString`` writes the total first and the values by id (the
thread-local computations' values first). Only the side files tell (the values file's
``Total bytes used`` is the allocations' sum, its used values are the listing's values).
A bad record costs only itself: a header that is not XLA's (an index or size that is not a
number of at most 9 and 18 digits, allocations adding up past 2^63 bytes) is an error naming its
line and is skipped with its values; a value whose slice lies outside its allocation (XLA checks
that none does), a live range ending before it starts, a peak value taking the peak past 2^63
bytes are errors and skip that row; the rest of the file is read. Every figure stored fits its
column (bounded digit counts, sums checked).
Raises ``ParseError`` only for empty input or a first line that is none of the above.
"""

from __future__ import annotations

import re
from itertools import chain, repeat
from operator import itemgetter
from typing import Iterable

import polars as pl

from transforms.parsers import xla_live_ranges as live
from transforms.records import (
    BATCH_ROWS,
    DumpKind,
    DumpSummary,
    ParserOutput,
    RowBuffer,
    TableBatch,
    line_error,
)

PARSER_VERSION = 5  # 5: a bad record costs only itself: a header whose size has more than 18 digits (was read
# as its first 18), a negative or non-numeric size, or allocations past 2^63 bytes in sum are errors and skip that
# allocation with its values (they went to the allocation before); a value whose slice lies outside its allocation,
# a live range that ends before it starts, a peak past 2^63 bytes are errors and skip that row
# 4: a cut between lines is truncated where the text shows it (values short of their
# allocation's size, the output's allocations missing, a user with no value listed, a combined file without
# its HloLiveRange): such dumps read ok before, with smaller figures
# 3: every historic header syntax (address, bare shapes, "parameter N at ShapeIndex"),
# LogicalBuffer value lines, "from instruction:%" without a space (jaxlib 0.4); an unclosed header is an error
# 2: every cut is an error; a whole last line without newline is read

# The allocation header as XLA's BufferAllocation::ToString has written it over the years
# (tensorflow/compiler/xla/service/buffer_assignment.cc, then openxla/xla):
#   2017-2020  "allocation 0: 0x55d5c8c4c0a0, size 4, parameter 0, thread-local:"  (%p of the object)
#   2018-2020  "..., parameter 0 at ShapeIndex {}, constant, maybe-live-out, preallocated-temp:"
#   2020-2021  "allocation 0: size 32768, parameter 0, shape f32[256,32] at ShapeIndex {}:",
#              "allocation 5: size 4, output shape is f32[], thread-local:"
#   since      the shapes between |...| ("shape |f32[256,32]| at ShapeIndex {}", "output shape is |f32[]|")
# plus ", color N" after the size since 2017. The flag words never changed; none of these
# versions printed "tuple" or "entry computation parameter" (those are attributes of the
# profiler's memory viewer), but "tuple" is accepted as the allocation's is_tuple property.
# A header without its closing ':' (a paste wrapped or cut short) is an error, not a row.
_ALLOC = re.compile(r"^allocation (\d{1,9}): (?:(?:0x[0-9a-fA-F]{1,16}|\(nil\)), )?size (\d{1,18})(?=[,:])(.*)$")
_PARAM = re.compile(r"^parameter (\d{1,9})(?: at ShapeIndex (\{[\d,]*\}))?$")
_PARAM_SHAPE = re.compile(r"^shape (?:\|(.*)\||(.+)) at ShapeIndex (\{[\d,]*\})$")
_OUTPUT = re.compile(r"^output shape is (?:\|(.*)\||(.+))$")
_COLOR = re.compile(r"^color (\d{1,9})$")
_WORDS = {"maybe-live-out", "thread-local", "preallocated-temp", "constant", "tuple"}
_VALUE_REF = r"<(\d{1,18}) ([^\s{}<>]++)(\{[\d,]*\})?( \(phi\))?(?: @(\d{1,9}))?>"
_VALUE = re.compile(r"^ value: " + _VALUE_REF + r" \(size=(\d{1,18}),offset=(\d{1,18})\): (.*)$")
# Value lines before HloValue (2017-2019) print a LogicalBuffer, "name[index](#id @color)":
#   "  add.1[](#3 @0) [0,4]: f32[]"            ("  %s [offset,size]: shape", 2017-2019)
#   "  entry::add.1[](#3) : f32[]"              ("  computation::buffer : shape", early 2017: no slice)
_OLD_VALUE = re.compile(
    r"^  (?:([^\s:]++)::)?([^\s\[\]]++)\[([\d,]*)\]\(#(\d{1,18})(?: @(\d{1,9}))?\)"
    r"(?: \[(\d{1,18}),(\d{1,18})\]: | : )(.*)$"
)
_USED = re.compile(r"^" + _VALUE_REF + r"$")
_TOTAL = re.compile(r"^Total bytes used: (\d{1,18})\b")
_START = re.compile(r"^(?:BufferAssignment:|Total bytes used: \d|HloLiveRange \(max \d)")
# An output shape's arrays: "/*index=5*/" comments and layouts out, then each "type[dims]".
# Each alternative stops at the next opening mark, so a line of unclosed ones costs one pass, not a pass each.
_SHAPE_NOISE = re.compile(r"/\*[^*]*\*/|\{[^{}]*\}")
_ARRAY = re.compile(r"[a-z][a-z0-9]*\[[^\[\]]*\]")
_EMPTY = re.compile(r"[\[,]0[\],]")  # a dimension of size 0
_MAX_ERRORS = 50
_MAX_HEADER = 1 << 20
_MAX_BYTES = (1 << 63) - 1  # the Int64 columns' range: allocations past it in sum are junk, not figures
_MAX_ITEMS = 64
# Numbers are matched with bounded digit counts: longer ones (junk) fail the pattern
# instead of overflowing the Int32/Int64 columns. A header's size ends where XLA ends it
# (',' or ':'), so a longer or fractional number fails too instead of being read in part.

ALLOCATIONS = pl.Schema(
    {
        "allocation_index": pl.Int32,
        "size_bytes": pl.Int64,
        "kind": pl.String,
        "is_parameter": pl.Boolean,
        "is_entry_computation_parameter": pl.Boolean,
        "parameter_number": pl.Int32,
        "parameter_shape": pl.String,
        "shape_index": pl.String,
        "output_shape": pl.String,
        "is_maybe_live_out": pl.Boolean,
        "is_thread_local": pl.Boolean,
        "is_preallocated_temp": pl.Boolean,
        "is_constant": pl.Boolean,
        "is_tuple": pl.Boolean,
        "color": pl.Int32,
        "flags": pl.List(pl.String),
        "lineno": pl.Int32,
    }
)
_VALUE_COLS = {
    "value_id": pl.Int64,
    "value_name": pl.String,
    "instruction": pl.String,
    "shape_index": pl.String,
    "is_phi": pl.Boolean,
    "color": pl.Int32,
}
VALUES = pl.Schema(
    {"allocation_index": pl.Int32, **_VALUE_COLS, "offset": pl.Int64, "size_bytes": pl.Int64, "shape": pl.String}
    | {"lineno": pl.Int32}
)
USED_VALUES = pl.Schema({**_VALUE_COLS, "positions": pl.List(pl.String), "uses": pl.List(pl.String)} | {"lineno": pl.Int32})
TABLES: dict[str, pl.Schema] = {
    "buffer_allocations": ALLOCATIONS,
    "buffer_values": VALUES,
    "buffer_used_values": USED_VALUES,
    **live.TABLES,
}

_LINENO = live.TABLE_DOCS["buffer_schedule"]["lineno"]
_VALUE_DOCS = {
    "value_id": "XLA's HloValue id (unique within the module).",
    "value_name": "Value as printed: instruction name, then its shape index only when the "
    "instruction's shape is a tuple (e.g. 'custom-call.19.0{0}'); '(phi)' and '@color' are split off.",
    "instruction": "HLO instruction that defines the value (join to hlo_instructions by name).",
    "shape_index": "Shape index of the value within the instruction's output; '{}' when not printed "
    "(a non-tuple instruction has one value, at index {}). Join to buffer_live_ranges on (instruction, shape_index).",
    "is_phi": "True for a phi value (printed '(phi)': merges values at a while loop or conditional).",
    "color": "Memory space color printed after '@' (0 = default device memory); null when not printed.",
}
TABLE_DOCS: dict[str, dict[str, str]] = {
    "buffer_allocations": {
        "": "XLA buffer allocations: one row per 'allocation N: size S, flags:' line of a buffer assignment.",
        "allocation_index": "Allocation number N as printed (0-based, unique in the dump).",
        "size_bytes": "Size of the allocation in bytes.",
        "kind": "One word for charts, first that applies: parameter (entry parameter, even if donated), "
        "live_out (maybe-live-out), constant, thread_local, temp (preallocated-temp, or no role flag at all: "
        "XLA's definition of a preallocated temp buffer), other (only flags unknown to this parser).",
        "is_parameter": "Printed 'parameter N': the allocation holds an entry computation parameter.",
        "is_entry_computation_parameter": "Same as is_parameter: XLA prints 'parameter N' only for entry "
        "computation parameters.",
        "parameter_number": "N of 'parameter N'; null for non-parameters.",
        "parameter_shape": "The parameter's shape between |...| (no layout); null for non-parameters.",
        "shape_index": "'at ShapeIndex {...}' of a parameter: where in the parameter's shape this allocation sits.",
        "output_shape": "'output shape is |...|': the allocation holds the entry computation's root; null otherwise.",
        "is_maybe_live_out": "Printed 'maybe-live-out': may be part of the program's output.",
        "is_thread_local": "Printed 'thread-local' (allocated per call, e.g. reducer scalars).",
        "is_preallocated_temp": "Printed 'preallocated-temp': the temp arena that XLA packs intermediates into.",
        "is_constant": "Printed 'constant': holds a constant literal.",
        "is_tuple": "Printed 'tuple' (older XLA), or the printed output shape is a tuple.",
        "color": "Memory space color ('color N'; 0, the default, is not printed).",
        "flags": "Flag keywords in print order: 'parameter', 'output', 'color' for the valued items, other "
        "items verbatim (e.g. 'maybe-live-out'), so flags of newer XLA versions survive.",
        "lineno": _LINENO,
    },
    "buffer_values": {
        "": "HLO values assigned to each allocation (the ' value:' lines), with their slice of it.",
        "allocation_index": "Allocation the value lives in (buffer_allocations.allocation_index).",
        **_VALUE_DOCS,
        "offset": "Byte offset of the value inside its allocation.",
        "size_bytes": "Bytes of the value.",
        "shape": "Shape of the value with layout, as printed.",
        "lineno": _LINENO,
    },
    "buffer_used_values": {
        "": "The 'Used values:' listing: each value's positions and uses ('from instruction' lines are skipped; "
        "join to hlo_instructions by instruction).",
        **_VALUE_DOCS,
        "positions": "Where the value appears: 'instruction' or 'instruction {index}' (aliases, tuple elements).",
        "uses": "Its uses as printed, 'instruction, operand N [index]'; empty when XLA prints none.",
        "lineno": "Line of the value's '<id name @color>' header.",
    },
    **live.TABLE_DOCS,
}


def sniff(name: str, head: str) -> bool:
    first, _, rest = head.lstrip("\ufeff\r\n").partition("\n")
    first = first.rstrip("\r")
    if first == "BufferAssignment:" or live._MAX.match(first):
        return True
    # The values side file opens with a blank line, then the total, then "Used values:".
    # An older memory-usage report also opens with "Total bytes used:" (then "Allocations sorted by size").
    return bool(_TOTAL.match(first)) and rest.lstrip("\r\n").startswith("Used values:")


def stage_from_name(name: str) -> str | None:
    if name.endswith("-buffer-assignment.txt"):
        return "buffer_assignment"
    if name.endswith("-buffer-assignment-values.txt"):
        return "values"
    if name.endswith("-live-range.txt"):
        return "live_ranges"
    return None


def _items(rest: str) -> list[str]:
    """The ", "-separated items after the size. Shapes may hold ", " (tuples): between |...|
    since XLA printed the pipes, bare before; so split only outside |...| and brackets."""
    if "|" not in rest and "(" not in rest:  # the common case, and much faster
        return rest.split(", ", _MAX_ITEMS)
    items, start, depth, piped = [], 0, 0, False
    for i, c in enumerate(rest):
        if c == "|":
            piped = not piped
        elif piped:
            continue
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth <= 0 and rest.startswith(", ", i):
            items.append(rest[start:i])
            start = i + 2
            if len(items) >= _MAX_ITEMS:
                break
    items.append(rest[start:])
    return items


def _allocation_row(lineno: int, m: re.Match, rest: str) -> tuple[tuple, list[str]]:
    flags: list[str] = []
    unknown: list[str] = []
    number = pshape = index = output = None
    color = 0
    for item in _items(rest):
        item = item.strip()
        if (p := _PARAM.match(item)) is not None:
            number = int(p[1])
            index = p[2] or index  # "parameter N at ShapeIndex {..}" (2018-2020)
            flags.append("parameter")
        elif (p := _PARAM_SHAPE.match(item)) is not None:
            pshape, index = p[1] if p[1] is not None else p[2], p[3]
        elif (p := _OUTPUT.match(item)) is not None:
            output = p[1] if p[1] is not None else p[2]
            flags.append("output")
        elif (p := _COLOR.match(item)) is not None:
            color = int(p[1])
            flags.append("color")
        elif item:
            flags.append(item)
            if item not in _WORDS:
                unknown.append(item)
    has = set(flags)
    is_param = number is not None
    if is_param:
        kind = "parameter"
    elif "maybe-live-out" in has:
        kind = "live_out"
    elif "constant" in has:
        kind = "constant"
    elif "thread-local" in has:
        kind = "thread_local"
    elif "preallocated-temp" in has or not unknown:
        kind = "temp"
    else:
        kind = "other"
    is_tuple = "tuple" in has or (output is not None and output.startswith("("))
    row = (
        int(m[1]), int(m[2]), kind, is_param, is_param, number, pshape, index, output,
        "maybe-live-out" in has, "thread-local" in has, "preallocated-temp" in has, "constant" in has,
        is_tuple, color, flags, lineno,
    )  # fmt: skip
    return row, unknown


def _int(text: str | None) -> int | None:
    return int(text) if text is not None else None


def _whole_shape(text: str) -> bool:
    """Brackets balanced and closed the way a printed shape ends: a layout ``}``, a tuple
    ``)``, or a scalar's ``[]`` (an array's ``]`` alone is a shape cut before its layout)."""
    depth = 0
    for c in text:
        depth += (c in "([{") - (c in ")]}")
        if depth < 0:
            return False
    return depth == 0 and text.endswith(("}", ")", "[]"))


def _value_cols(m: re.Match) -> tuple:  # the columns a value reference <id name{index} (phi) @color> gives
    index = m[3] or ""
    return (int(m[1]), m[2] + index, m[2], index or "{}", bool(m[4]), int(m[5]) if m[5] else None)


class _Dump:
    """Per-file state: row buffers, running sums, what sections were seen."""

    def __init__(self) -> None:
        self.allocs = RowBuffer("buffer_allocations", ALLOCATIONS)
        self.values = RowBuffer("buffer_values", VALUES)
        self.used = RowBuffer("buffer_used_values", USED_VALUES)
        self.summary = DumpSummary(DumpKind.XLA_BUFFER_ASSIGNMENT)
        self.section = ""
        self.sums = dict.fromkeys(("parameter", "live_out", "alias", "temp", "constant", "thread_local"), 0)
        self.n_alloc = self.n_param = self.alloc_bytes = self.n_values = self.n_used = 0
        self.total: int | None = None
        self.alloc_idx: int | None = None
        self.alloc_values = 0
        # The open allocation's size and how far its values reach (offset + size; not known when a value
        # line prints no slice). XLA sizes an allocation by its values: the first value's size, or the
        # extent of a temp heap. Read off its rows (from row alloc_row0 of the buffer) when it closes, not
        # per line: the value lines are the hot path of big listings.
        self.alloc_size = self.alloc_extent = self.alloc_row0 = 0
        self.extent_known = True
        self.alloc_rejected = False  # a value line of the open allocation was not read (its error says why)
        self.block: list | None = None  # an open used-value block: [cols, lineno, positions, uses, part]
        self.live: live.LiveRangeReader | None = None
        self.shapes: dict[tuple[str, str], tuple[str, int]] = {}
        self.unknown_flags: set[str] = set()
        self.skip_values = False  # the value lines that follow belong to a header that was not read
        # What the allocation listing says about its own end (finish): the outputs printed ("output shape
        # is"), whether this XLA prints shapes in headers at all (and between |...|), the shapes of the
        # values in maybe-live-out allocations (layouts stripped).
        self.outputs: list[str] = []
        self.shapes_printed = self.piped = self.alloc_live_out = False
        self.live_out_shapes: set[str] = set()
        # The positions the used values are at and the instructions they are used by, read off the rows
        # at the end (``_read_used``): XLA lists values by id, so the users of the last values listed are
        # still to come when a listing is cut.
        self.positioned: set[str] = set()
        self.users: set[str] = set()

    def error(self, lineno: int, msg: str) -> None:
        errors = self.summary.errors
        if len(errors) < _MAX_ERRORS:
            errors.append(line_error(lineno, msg))
        elif len(errors) == _MAX_ERRORS:
            errors.append(line_error(lineno, "too many errors; later ones not recorded"))

    def line(self, lineno: int, line: str) -> TableBatch | None:
        if self.section == "live":
            got = self.live.feed(lineno, line)
            if got is False or isinstance(got, str):
                self.error(lineno, got or "unrecognized line in HloLiveRange listing")
                return None
            return got
        if self.section == "alloc" and line.startswith(" "):
            if self.skip_values:  # the values of a header not read: that header's error says why
                return None
            if line.startswith(" value: "):
                return self._value(lineno, line)
            if line.startswith("  "):
                return self._old_value(lineno, line)
        if self.section == "used" and line.startswith(" "):
            return self._used_line(lineno, line)
        if m := _ALLOC.match(line):
            if len(line) > _MAX_HEADER:  # junk: real headers are short, even with tuple parameter shapes
                return self._skip_allocation(lineno, f"allocation header of {len(line)} characters")
            if not line.endswith(":"):  # XLA ends every header with ':'; a wrapped or cut paste does not
                return self._skip_allocation(lineno, f"allocation {m[1]} header has no closing ':' "
                                                     "(line wrapped or cut short); allocation not read")
            return self._allocation(lineno, m)
        if self.section == "alloc" and line.startswith("allocation "):
            return self._skip_allocation(lineno, "allocation header not read: its index or size is not a number "
                                                 "XLA prints (at most 9 and 18 digits)")
        if m := _USED.match(line):
            return self._open_block(lineno, m)
        if not line.strip():
            return None
        if line == "BufferAssignment:":
            self.section = "alloc"
        elif m := _TOTAL.match(line):
            self._end_allocation(lineno, at_eof=False)
            self.total, self.section = int(m[1]), "total"
        elif line == "Used values:":
            self.section = "used"
        elif live._MAX.match(line):
            batch = self._close_block(lineno)
            self.live, self.section = live.LiveRangeReader(line, self.shapes), "live"
            return batch
        else:
            self.error(lineno, "unrecognized line")
        return None

    def _skip_allocation(self, lineno: int, msg: str) -> None:
        self._end_allocation(lineno, at_eof=False)
        if self.alloc_live_out:
            self._read_values()
        self.alloc_live_out = self.alloc_rejected = False
        self.error(lineno, msg)
        self.alloc_idx, self.section, self.skip_values = None, "alloc", True

    def _allocation(self, lineno: int, m: re.Match) -> TableBatch | None:
        self._end_allocation(lineno, at_eof=False)
        if self.alloc_live_out:
            self._read_values()
        if self.alloc_bytes + int(m[2]) > _MAX_BYTES:
            return self._skip_allocation(lineno, f"allocation {m[1]} not read: with its {m[2]} bytes the allocations "
                                                 "would hold more than 2^63 bytes")
        self.section, self.skip_values, self.alloc_rejected = "alloc", False, False
        row, unknown = _allocation_row(lineno, m, m[3][:-1])
        if new := [f for f in dict.fromkeys(unknown) if f not in self.unknown_flags]:  # said once per file
            self.unknown_flags.update(new)
            self.error(lineno, f"unknown allocation flags {[f[:80] for f in new[:5]]}")
        if self.alloc_idx is not None and row[0] != self.alloc_idx + 1:
            self.error(lineno, f"allocation {row[0]} follows allocation {self.alloc_idx}")
        self.alloc_idx, self.alloc_values = row[0], 0
        if row[6] is not None or row[8] is not None:  # "parameter N, shape ...", "output shape is ..."
            self.shapes_printed = True
            self.piped = self.piped or "|" in m[3]
            if row[8] is not None:
                self.outputs.append(row[8])
        self.alloc_live_out = row[9]
        self.alloc_size, self.alloc_extent, self.extent_known = row[1], 0, True
        self.alloc_row0 = len(self.values.rows)
        size = row[1]
        self.n_alloc += 1
        self.alloc_bytes += size
        if row[3]:
            self.n_param += 1
            self.sums["parameter"] += size
            self.sums["alias"] += size if row[9] else 0
        self.sums["live_out"] += size if row[9] else 0
        self.sums["thread_local"] += size if row[10] else 0
        self.sums["constant"] += size if row[12] else 0
        self.sums["temp"] += size if row[2] == "temp" else 0
        return self.allocs.add(row)

    def cut(self, lineno: int, msg: str) -> None:
        """The file ended before its structure did: ``truncated``, and why."""
        self.summary.truncated = True
        self.error(lineno, msg)

    def last_line_complete(self, line: str) -> bool:
        """Whether a last line without newline is whole (``xla_live_ranges.Lines``): a value
        line whose shape closes, the line that closes a used value, or the live-range listing's."""
        if self.section == "live":
            return self.live.last_line_complete(line)
        if self.section == "alloc" and (m := _VALUE.match(line) or _OLD_VALUE.match(line)) is not None:
            return _whole_shape(m[8])
        if self.section == "used" and line.startswith(" from instruction:"):
            return self.block is not None  # the row is complete; the rest of the line is not read
        return False  # anything else may be a longer line cut short (a lone space is one too)

    def _end_allocation(self, lineno: int, at_eof: bool) -> None:
        if self.alloc_idx is not None and self.alloc_values == 0 and not self.alloc_rejected and self.section == "alloc":
            if at_eof:
                self.cut(lineno, f"input ended before allocation {self.alloc_idx} listed its values")
            else:
                self.error(lineno, f"allocation {self.alloc_idx} lists no values")

    def _value_groups(self, lineno: int, pattern: re.Pattern, line: str) -> tuple | None:
        """The groups of a value line of the open allocation, or None and an error."""
        m = pattern.match(line)
        if m is None or self.alloc_idx is None:
            return self._reject_value(lineno, "unrecognized value line")
        return m.groups()

    def _outside(self, lineno: int, offset: int, size: int) -> None:
        """A value whose slice lies outside its allocation: XLA checks that none does, so the row is not read."""
        self._reject_value(lineno, f"value not read: its slice (offset {offset}, size {size}) lies outside "
                                   f"allocation {self.alloc_idx} ({self.alloc_size} bytes)")

    def _reject_value(self, lineno: int, msg: str) -> None:
        """A value line not read costs only itself: its error, and its allocation's extent is not known."""
        self.error(lineno, msg)
        self.alloc_rejected, self.extent_known = self.alloc_idx is not None, False

    def _value(self, lineno: int, line: str) -> TableBatch | None:
        if (groups := self._value_groups(lineno, _VALUE, line)) is None:
            return None
        vid, instr, index, phi, color, size, offset, shape = groups
        size, offset = int(size), int(offset)
        if offset + size > self.alloc_size:
            return self._outside(lineno, offset, size)
        self.alloc_values += 1
        self.n_values += 1
        shape_index = index or "{}"
        self.shapes[instr, shape_index] = (shape, size)
        rows = self.values.rows  # the hot path of big allocation listings: no per-row method calls
        rows.append((self.alloc_idx, int(vid), instr + (index or ""), instr, shape_index, phi is not None,
                     int(color) if color else None, offset, size, shape, lineno))  # fmt: skip
        if len(rows) < BATCH_ROWS:
            return None
        self._read_values()
        return self.values.flush()

    def _read_values(self) -> None:
        """Fold the open allocation's value rows not read yet into its extent and, for a live-out one,
        the live-out shapes; before the rows leave in a batch, and when the allocation closes."""
        rows = self.values.rows
        for row in rows[min(self.alloc_row0, len(rows)) :]:
            if row[7] is not None and row[8] is not None:  # old value lines may print no slice
                self.alloc_extent = max(self.alloc_extent, row[7] + row[8])
            if self.alloc_live_out:
                self.live_out_shapes.add(_SHAPE_NOISE.sub("", row[9]))
        self.alloc_row0 = 0 if len(rows) >= BATCH_ROWS else len(rows)

    def _old_value(self, lineno: int, line: str) -> TableBatch | None:
        """A value line of 2017-2019 (``_OLD_VALUE``): a LogicalBuffer, its slice when printed."""
        if (groups := self._value_groups(lineno, _OLD_VALUE, line)) is None:
            return None
        _, instr, index, vid, color, offset, size, shape = groups
        if size is not None and int(offset) + int(size) > self.alloc_size:
            return self._outside(lineno, int(offset), int(size))
        self.alloc_values += 1
        self.n_values += 1
        shape_index = "{" + index + "}"
        if size is not None:
            self.shapes[instr, shape_index] = (shape, int(size))
        else:  # early 2017: no slice printed, so no extent either
            self.extent_known = False
        # LogicalBuffer printed its index always ("[]"): the name takes it only when not empty.
        name = instr + (shape_index if index else "")
        rows = self.values.rows
        rows.append((self.alloc_idx, int(vid), name, instr, shape_index, False,
                     int(color) if color else None, _int(offset), _int(size), shape, lineno))  # fmt: skip
        if len(rows) < BATCH_ROWS:
            return None
        self._read_values()
        return self.values.flush()

    def _open_block(self, lineno: int, m: re.Match) -> TableBatch | None:
        batch = self._close_block(lineno)
        if self.section != "used":
            self.error(lineno, "value header outside 'Used values:'")
            return batch
        self.block = [_value_cols(m), lineno, [], [], ""]
        return batch

    def _used_line(self, lineno: int, line: str) -> TableBatch | None:
        block = self.block
        if block is None:
            self.error(lineno, "used-value line outside a value block")
        elif line.startswith(" from instruction:"):
            return self._close_block(lineno, complete=True)
        elif line in (" positions:", " uses:"):
            block[4] = line[1:-1]
        elif line.startswith("  ") and block[4]:
            item = line.strip()
            if item != "(none)":
                (block[2] if block[4] == "positions" else block[3]).append(item)
        else:
            self.error(lineno, "unrecognized line in used value")
        return None

    def _close_block(self, lineno: int, complete: bool = False) -> TableBatch | None:
        block, self.block = self.block, None
        if block is None:
            return None
        if not complete:  # XLA ends every block with its "from instruction:" line
            self.error(lineno, f"used value {block[0][0]} has no 'from instruction' line")
            return None
        self.n_used += 1
        rows = self.used.rows
        rows.append((*block[0], block[2], block[3], block[1]))
        if len(rows) < BATCH_ROWS:
            return None
        self._read_used(rows)
        return self.used.flush()

    def _read_used(self, rows: list[tuple]) -> None:
        """Fold used-value rows into the positions they are at and the instructions they are used by
        (at the end of the file, or before the rows leave in a batch); C-level loops, no per-item code."""
        self.positioned.update(chain.from_iterable(row[6] for row in rows))
        self.users.update(map(itemgetter(0), map(str.partition, chain.from_iterable(row[7] for row in rows),
                                                 repeat(","))))

    def _listing_end(self, lineno: int) -> None:
        """The file ends in the allocation listing: cut if the last allocation's values do not reach
        its size, or if the allocations the program's output needs are not all there. XLA prints
        "output shape is" on the allocation of the ENTRY root whenever it prints parameter shapes in
        headers; since it prints shapes between |...|, only there (not on other computations' roots),
        and each array of a tuple output then lives in a maybe-live-out allocation (its own or shared;
        the output allocation holds only the tuple)."""
        self._read_values()
        if self.alloc_idx is not None and self.alloc_values and self.extent_known \
                and self.alloc_extent < self.alloc_size:
            self.cut(lineno, f"input ended inside allocation {self.alloc_idx}'s values: they reach byte "
                             f"{self.alloc_extent} of its {self.alloc_size} (XLA sizes it by its values)")
            return
        if not self.n_alloc or not self.shapes_printed:
            return
        last = f"allocation {self.alloc_idx}" if self.alloc_idx is not None else "the last allocation read"
        if not self.outputs:
            self.cut(lineno, f"input ended before the allocation of the program's output (the one XLA "
                             f"prints 'output shape is' on); the listing stops after {last}")
        elif self.piped and len(self.outputs) == 1 and self.outputs[0].startswith("("):
            arrays = _ARRAY.findall(_SHAPE_NOISE.sub("", self.outputs[0]))
            # Tokens and empty arrays hold no bytes: XLA may give them no allocation.
            missing = sorted({a for a in arrays if a not in self.live_out_shapes and not a.startswith("token")
                              and not _EMPTY.search(a)})
            if missing:
                self.cut(lineno, f"input ended before the live-out allocations of the output's "
                                 f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} (every array of the "
                                 f"output tuple has one); the listing stops after {last}")

    def _used_end(self, lineno: int) -> None:
        """The file ends in ``Used values:``: cut if a listed value is used by an instruction whose
        top level no listed value is at. Every instruction that uses a value has an output there,
        a value of its own or one it passes on (XLA lists values by id, and an instruction's own
        values come after those it uses)."""
        self._read_used(self.used.rows)
        # A position prints "name", or "name {index}" in a tuple-shaped instruction ("name {}": its top
        # level, where its users find it); a use prints "name, operand N[ {index}]".
        if missing := {u for u in self.users if u not in self.positioned and f"{u} {{}}" not in self.positioned}:
            self.cut(lineno, f"input ended after {self.n_used} used values: {len(missing)} instruction(s) they "
                             f"list as users have no value listed at their output (e.g. {min(missing)[:80]})")
        elif self.n_alloc and self.piped:  # combined file of an XLA that prints |...|: it writes the live ranges too
            self.cut(lineno, "input ended after the used values, before the HloLiveRange listing XLA writes next")

    def finish(self, lineno: int) -> list[TableBatch]:
        s = self.summary
        self._end_allocation(lineno, at_eof=True)
        if self.section == "alloc" and not s.truncated:
            self._listing_end(lineno)
        if self.block is not None:
            self.cut(lineno, f"input ended inside used value {self.block[0][0]} (line {self.block[1]}), "
                             "before its 'from instruction' line")
            self.block = None
        if self.total is not None and self.n_alloc:
            if self.total != self.alloc_bytes:
                self.error(lineno, f"allocations add up to {self.alloc_bytes} bytes, 'Total bytes used' says {self.total}")
            if self.section in ("total", "used") and self.n_used < self.n_values:  # every value is listed again
                self.cut(lineno, f"input ended after {self.n_used} of the {self.n_values} used values")
        if self.section == "used" and self.n_used and not s.truncated:
            self._used_end(lineno)
        if self.total is not None and self.section == "total":
            self.cut(lineno, "input ended before 'Used values:' (it always follows the total)")
        if self.section == "alloc" and not self.n_alloc:  # a program always has an output allocation
            self.cut(lineno, "input ended before the first allocation")
        if self.section == "used" and not self.n_used:
            self.cut(lineno, "input ended before the first used value")
        m = s.metrics
        if self.n_alloc:
            s.stage = "buffer_assignment"
            m["memory.allocations"] = self.n_alloc
            m["memory.parameter_allocations"] = self.n_param
            m["memory.values"] = self.n_values
            m.update({f"memory.{k}_bytes": v for k, v in self.sums.items()})
        if self.total is not None or self.n_alloc:
            m["memory.total_bytes"] = self.total if self.total is not None else self.alloc_bytes
        if self.section == "used" or self.n_used:
            s.stage = s.stage or "values"
            m["memory.used_values"] = self.n_used
        batches = [b for b in (self.allocs.flush(), self.values.flush(), self.used.flush()) if b is not None]
        if self.live is not None:
            s.stage = s.stage or "live_ranges"
            m.update(self.live.metrics())
            cuts, msgs = self.live.problems()
            for msg in cuts:
                self.cut(lineno, f"input ended early: {msg}")
            for msg in msgs:
                self.error(lineno, msg)
            batches += self.live.flush()
        return batches


def parse(lines: Iterable[str]) -> ParserOutput:
    return live.drive(_Dump(), live.Lines(lines, _START, "an XLA buffer assignment, values or live-range listing"))
