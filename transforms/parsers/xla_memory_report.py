"""XLA's ``*-memory-usage-report.txt``: the slots of each allocation, by memory space.

Input: the lines of the report XLA writes next to a buffer assignment with
``--xla_dump_to``. jaxlib 0.10 (XLA:CPU) writes, per memory space::

    Memory Space: default (color=0)
    Total bytes: 68276 (66.7KiB)
      cumulative_size;       size;       offset; used_by_n_values; shapes_list
      ------------------------------------------------------------
        16.0KiB( 89%);    16.0KiB;            0;                2; 2×f32[32,128]
        18.0KiB(100%);     2.0KiB;        16384;                1; f32[32,16]

with one block per allocation, largest allocation first (XLA sorts by size, then by
allocation index), and inside a block one row per offset ("slot") shared by
``used_by_n_values`` values, largest slot first. Older XLA opens with
``Total bytes used: N`` and names each allocation (``allocation N: size ...``) before
its tab-indented block; that variant is read too (allocation_index is then known).
Sizes other than offsets are printed human-readable (``16.0KiB``), so the ``*_approx``
columns are rounded (to 0.05 KiB, or 0.005 of larger units); exact below 1 KiB.

XLA may stop listing allocations before the last (jaxlib 0.10 listed 51 of 132, with no
marker) and may end a block with "The rest N values are less than 5% of the total size
and not shown." (N counts slots, not values).

Output: ``TableBatch`` items of ``TABLES``, then one ``DumpSummary`` with
``memory.report_total_bytes`` (the exact ``Total bytes`` lines, summed over spaces;
equal to the buffer assignment's ``memory.total_bytes``), ``memory.report_spaces``,
``memory.report_allocations`` (blocks listed), ``memory.report_slots`` (rows),
``memory.report_values`` (sum of used_by_n_values over the listed slots, plus one per
allocation the older format names without a slot table: XLA prints none for a single
value; so a cut right after such a name cannot be told from a one-value allocation) and
``memory.report_hidden_slots`` (the N of the "The rest N ..." lines).
Every row comes from one line, so a cut file yields a prefix of the rows. A cut is
detected (``truncated``, with an error saying what is missing) when the last line has
lost its newline (that line is not read), a memory space has no ``Total bytes`` line or
a total but no block, a block has a header but no rows, or the last block's cumulative
percentage stops short of 100% without a "The rest" line. In the older layout the
summary states the count: its lines plus "The rest N allocations" are the allocations
the second part names, so a cut anywhere there is detected too (but for a cut right
after the last allocation's name when that one has a slot table: XLA prints none for a
single value), as is a summary without that second part and a name followed by the
blank line that opens a slot table. In the newer layout nothing states how many blocks
follow, but XLA (``BufferAssignment::MemoryUsageReport``) ends every block with an empty
line and every memory space with one more, so a report that ends with exactly one empty line
is cut between two blocks (with none it may be the whole report pasted or captured with its
final empty lines trimmed, which reads as the whole); and it lists every allocation of a
space up to the 51st, stopping after that only once the rest is under 5% of ``Total bytes``,
so blocks whose printed sizes, rounded up, cannot hold the total (or 95% of it, once 51 are
listed) say by how much. That bound adds up the printed sizes rounded up (a block of one slot
is its allocation; XLA sizes an allocation by its values, so one of several slots ends where
its furthest slot ends): a cut right after a block's last row that drops less than that
rounding (a tail of 4-byte blocks after KiB-sized ones) or follows a block that hides slots
("The rest N values"), and a cut exactly between two memory spaces, read as a smaller report
(the buffer assignment of the same compile tells them: ``transforms.xla_siblings``). A bad
row costs only itself: a slot row with a size past 2^63 bytes or a percentage past 100 is an
error and is skipped (its block's completeness is then not judged). Raises ``ParseError``
only for empty input or a first line that is not a memory usage report.
"""

from __future__ import annotations

import re
from typing import Iterable

import polars as pl

from transforms.records import DumpKind, DumpSummary, ParserOutput, RowBuffer, TableBatch, line_error
from transforms.parsers.xla_live_ranges import Lines, drive

PARSER_VERSION = 7  # 7: an empty allocation's block ("0B(-nan%)", a zero-size array) is whole (was: unrecognized lines, partial)
# 6: a newer-layout report ending in the one empty line XLA closes a block with, not the second
# that closes its memory space, is cut (a cut between two blocks read ok with fewer blocks); a slot row with a size past 2^63
# bytes (failed the whole dump) or a percentage past 100 is an error and skips that row
# 5: a cut between lines is truncated where the text shows it (a space without its total
# or blocks, blocks that cannot hold its total; older layout: fewer allocations named than its summary lists, a
# slot table announced): such dumps read ok before, with smaller figures
# 4: an older-layout allocation line ending the file without newline is whole
# 3: older format: an allocation named without a slot table counts its one value
# 2: every cut is an error; a whole last line without newline is read

_SPACE = re.compile(r"^Memory Space: (.*) \(color=(\d{1,9})\)$")
_TOTAL = re.compile(r"^Total bytes(?: used)?: (\d{1,18})\b")
_HEADER = re.compile(r"^\s*cumulative_size;\s+size;\s+offset;\s+used_by_n_values;\s+shapes_list$")
_NUM = r"(\d{1,6}(?:\.\d{1,4})?)(B|KiB|MiB|GiB|TiB|PiB|EiB)"  # bounded: junk fails, not overflows
# XLA prints a block's cumulative share as size * 100 / the block's size: "-nan%" for an empty
# allocation (a zero-size array: f32[0,32]), whose one row is then the whole block.
_SLOT = re.compile(r"^\s*" + _NUM + r"\(\s*(\d{1,3}|-?nan)%\);\s+" + _NUM + r";\s+(\d{1,18});\s+(\d{1,9}); (.*)$")
_REST = re.compile(r"^\s*The rest (\d{1,9}) values are less than")
_ALLOC = re.compile(r"^allocation (\d{1,9}): size ")
# Lines of the older format's allocation summary, kept in the allocation table of the
# buffer assignment already: recognised so they are not reported as errors, and counted.
_OLD_SKIP = re.compile(r"^(?:cumulative_size; total_size|-{20,})")
_OLD_SUMMARY = "Allocations sorted by size"  # ":" opens the summary, " with their values:" the names
_OLD_NAMES = "Allocations sorted by size with their values:"
_OLD_LINE = re.compile(r"^\s*\S+\(\s*\d+%\); .*; allocation \d+:")
_OLD_REST = re.compile(r"^The rest (\d{1,9}) allocations")
_UNIT = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50, "EiB": 1 << 60}
# One shapes_list item; brackets may hold commas. Inner classes stop at an opening
# bracket too, so an unclosed one costs a scan to the next bracket, not to the line end.
_SPLIT = re.compile(r"(?:[^,()\[\]{}]|\([^()]*(?:\([^()]*\)[^()]*)*\)|\[[^\[\]]*\]|\{[^{}]*\})+")
_START = re.compile(r"^(?:Memory Space: |Total bytes(?: used)?: \d)")
_MAX_ERRORS = 50
_MAX_BYTES = (1 << 63) - 1  # the Int64 columns' range: a size past it is junk, not a figure

SPACES = pl.Schema({"memory_space": pl.String, "color": pl.Int32, "total_bytes": pl.Int64, "lineno": pl.Int32})
SLOTS = pl.Schema(
    {
        "memory_space": pl.String,
        "color": pl.Int32,
        "allocation_rank": pl.Int32,
        "allocation_index": pl.Int32,
        "slot_rank": pl.Int32,
        "cumulative_bytes_approx": pl.Int64,
        "cumulative_percent": pl.Int32,
        "size_bytes_approx": pl.Int64,
        "size_text": pl.String,
        "offset": pl.Int64,
        "used_by_n_values": pl.Int32,
        "shapes": pl.List(pl.String),
        "lineno": pl.Int32,
    }
)
TABLES: dict[str, pl.Schema] = {"memory_report_spaces": SPACES, "memory_report_slots": SLOTS}

_LINENO = "Line of the dump file this row was read from (1-based)."
_SPACE_DOC = "Memory space name as printed ('default'); null in the older format, which prints none."
_COLOR_DOC = "Memory space color (0 = default device memory); null in the older format."
TABLE_DOCS: dict[str, dict[str, str]] = {
    "memory_report_spaces": {
        "": "Memory spaces of an XLA memory usage report with their 'Total bytes' (sum of allocation sizes).",
        "memory_space": _SPACE_DOC,
        "color": _COLOR_DOC,
        "total_bytes": "Exact total bytes of the space's allocations ('Total bytes: N').",
        "lineno": _LINENO,
    },
    "memory_report_slots": {
        "": "Slots of each allocation in an XLA memory usage report: one row per offset that one or more "
        "values share over time. Sizes are time-multiplexed: do not add up shapes, add up slot sizes.",
        "memory_space": _SPACE_DOC,
        "color": _COLOR_DOC,
        "allocation_rank": "0-based position of the allocation in the report: XLA lists allocations by size, "
        "largest first, ties by allocation index, so rank r is the r-th of buffer_allocations sorted that way.",
        "allocation_index": "Allocation number when the report prints it (older format); null otherwise.",
        "slot_rank": "0-based position of the slot in its allocation (largest slot first).",
        "cumulative_bytes_approx": "Running total of slot sizes in this allocation, from the human-readable text.",
        "cumulative_percent": "Running total as a whole percentage of the allocation's slots.",
        "size_bytes_approx": "Slot size (the largest value at this offset), from the human-readable text.",
        "size_text": "Slot size exactly as printed, e.g. '16.0KiB'.",
        "offset": "Exact byte offset of the slot inside its allocation.",
        "used_by_n_values": "Number of values placed at this offset over the program's run.",
        "shapes": "shapes_list items as printed: 'f32[32,16]', or 'N×shape' for N values of one shape.",
        "lineno": _LINENO,
    },
}


def sniff(name: str, head: str) -> bool:
    first, _, rest = head.lstrip("\ufeff\r\n").partition("\n")
    first = first.rstrip("\r")
    if _SPACE.match(first):
        return rest.startswith("Total bytes: ")
    return first.startswith("Total bytes used: ") and "\nAllocations sorted by size" in head


def stage_from_name(name: str) -> str | None:
    return "memory_usage_report" if name.endswith("-memory-usage-report.txt") else None


def _shapes(text: str) -> list[str]:
    # XLA joins items with ", " and prints no space inside a shape, except between tuple
    # elements: only tuples need the bracket-aware split (and junk lines of brackets are
    # not worth it: past 1 MB they stay one item).
    if "(" not in text or len(text) > 1 << 20:
        return [s for s in text.split(", ") if s] if "(" not in text else [text]
    return [s.strip() for s in _SPLIT.findall(text) if s.strip()]


def _multiplier(shape: str) -> int:
    """How many values one shapes_list item stands for: ``2×f32[32]`` is 2."""
    count, times, _ = shape.partition("×")
    return int(count) if times and count.isdigit() and len(count) < 10 else 1  # XLA counts with an int64


def _bytes(number: str, unit: str) -> int:
    return round(float(number) * _UNIT[unit])


def _bad_slot(m: re.Match) -> str | None:
    """Why a slot row's figures cannot be XLA's (None: they can): a percentage past 100, a size past
    the Int64 columns (a number of EiB no memory holds)."""
    if m[3].endswith("nan"):
        return None if _bytes(m[1], m[2]) == 0 else f"cumulative percentage {m[3]}% of {m[1]}{m[2]}, not an empty block"
    if int(m[3]) > 100:
        return f"cumulative percentage {m[3]}% is past 100%"
    if max(_bytes(m[1], m[2]), _bytes(m[4], m[5])) > _MAX_BYTES:
        return f"size {m[4]}{m[5]} is past 2^63 bytes"
    return None


def _bytes_at_most(number: str, unit: str) -> int:
    """The most bytes a human-readable size can stand for. XLA (tsl HumanReadableNumBytes) prints
    bytes exactly below 1 KiB, else divides by 1024 (truncating) down to the last unit and rounds
    to the decimals shown: so up to half a last digit more, plus what the truncation dropped."""
    if unit == "B":
        return int(float(number)) + ("." in number)  # XLA prints whole bytes; a hand edit may not
    decimals = len(number.partition(".")[2])
    size = _UNIT[unit]
    return int((float(number) + 0.5 * 10.0**-decimals) * size) + size // 512 + 1


class _Report:
    def __init__(self) -> None:
        self.spaces = RowBuffer("memory_report_spaces", SPACES)
        self.slots = RowBuffer("memory_report_slots", SLOTS)
        self.summary = DumpSummary(DumpKind.XLA_MEMORY_USAGE_REPORT, stage="memory_usage_report")
        self.space: str | None = None
        self.color: int | None = None
        self.rank = -1  # allocation rank within the current memory space
        self.alloc_index: int | None = None
        self.named = False  # older format: an "allocation N:" line waits for its block (none if one value)
        self.block_open = False
        self.rows = 0  # slot rows of the open block
        self.percent = 0  # cumulative percentage of the open block's last row
        self.rest = False  # the open block ended with "The rest N values ... not shown"
        self.totals: list[int] = []
        self.n_allocs = self.n_slots = self.n_values = self.hidden = 0
        self.space_total = True  # the current memory space has its "Total bytes" line
        self.space_blocks = 0  # blocks since the last "Total bytes" line
        # Newer layout: the most bytes the space's listed allocations can hold (None: a block hides slots,
        # so its allocation is not bounded), and the open block's bound: a single slot is its allocation
        # (XLA sizes an allocation by its values), several end where the furthest one ends.
        self.space_bytes: int | None = 0
        self.block_bytes = 0
        self.unsure = False  # the open block lost a row to an error: its completeness is not known
        # XLA ends every block with an empty line and every memory space with one more: a report ending in
        # exactly one was cut between two blocks. (None: pasted or captured text whose final empty lines
        # were trimmed reads as the whole report, as every format's does; a cut after a block's last row
        # looks the same, and only the blocks' sizes against the total can tell it.)
        self.blanks = 0
        # Older layout: "summary" (allocations listed with a running total), then "names" (each one
        # named, with its slot table); the summary states how many the names part holds.
        self.old_part = ""
        self.old_listed = 0  # summary lines plus "The rest N allocations"
        self.table_announced = False  # a named allocation followed by the blank line before its table

    def error(self, lineno: int, msg: str) -> None:
        errors = self.summary.errors
        if len(errors) <= _MAX_ERRORS:
            errors.append(line_error(lineno, msg if len(errors) < _MAX_ERRORS else "too many errors; later ones not recorded"))

    def _close_block(self, lineno: int, at_eof: bool = False) -> None:
        if self.block_open and self.space_bytes is not None:
            self.space_bytes = None if self.rest or not self.rows else self.space_bytes + self.block_bytes
        if self.block_open and not self.unsure and (self.rows == 0 or (self.percent < 100 and not self.rest)):
            if at_eof:
                self.summary.truncated = True
                self.error(lineno, f"input ended inside allocation block {self.rank}: "
                                   + (f"its slots reach {self.percent}%" if self.rows else "no slot rows"))
            else:
                self.error(lineno, f"allocation block {self.rank} stops short of 100%")
        self.block_open = False

    def last_line_complete(self, line: str) -> bool:
        """Whether a last line without newline is whole (``xla_live_ranges.Lines``): a slot row
        whose shapes account for its used_by_n_values, an allocation's name line of the older
        layout (closed by its ':', brackets balanced), or XLA's "The rest ..." line."""
        if (m := _SLOT.match(line)) is not None:  # a cut leaves a bracket open, or too few values
            text = m[8]
            closed = text.count("[") == text.count("]") and text.count("(") == text.count(")") and text[-1:] in ("]", ")")
            return closed and sum(_multiplier(s) for s in _shapes(text)) == int(m[7])
        if _ALLOC.match(line) is not None:  # the older layout's name line ends with its ':'
            text = line.rstrip()
            return text.endswith(":") and text.count("[") == text.count("]") and text.count("{") == text.count("}")
        return bool(_REST.match(line)) and line.rstrip().endswith("not shown.")

    def _new_allocation(self, index: int | None) -> None:
        self.rank += 1
        self.n_allocs += 1
        self.alloc_index = index

    def line(self, lineno: int, line: str) -> TableBatch | None:
        self.blanks = 0 if line.strip() else self.blanks + 1
        if (m := _SLOT.match(line)) is not None:
            if not self.block_open:
                self.error(lineno, "slot row outside an allocation block")
                return None
            if (why := _bad_slot(m)) is not None:  # the row costs only itself; its block is no longer known whole
                self.error(lineno, f"slot row not read: {why}")
                self.unsure, self.space_bytes = True, None
                return None
            self.percent = 100 if m[3].endswith("nan") else int(m[3])
            self.block_bytes = max(self.block_bytes, int(m[6]) + _bytes_at_most(m[4], m[5]))
            self.n_slots += 1
            self.n_values += int(m[7])
            shapes = _shapes(m[8])
            row = (
                self.space, self.color, self.rank, self.alloc_index, self.rows, _bytes(m[1], m[2]), self.percent,
                _bytes(m[4], m[5]), m[4] + m[5], int(m[6]), int(m[7]), shapes, lineno,
            )  # fmt: skip
            self.rows += 1
            return self.slots.add(row)
        if not line.strip():
            self.table_announced = self.named  # XLA: "name\n" "\n" then the table of 2+ values
            return None
        if _HEADER.match(line):
            self._close_block(lineno)
            if not self.named:  # newer format: the header itself opens the next allocation
                self._new_allocation(None)
            self.space_blocks += 1
            self.named, self.block_open, self.rows, self.percent, self.rest = False, True, 0, 0, False
            self.block_bytes, self.unsure = 0, False
            self.table_announced = False
        elif (m := _ALLOC.match(line)) is not None:
            self._close_block(lineno)
            self._single_value()
            self._new_allocation(int(m[1]))
            self.named, self.table_announced = True, False
        elif (m := _SPACE.match(line)) is not None:
            self._close_block(lineno)
            self.space, self.color, self.rank, self.named = m[1], int(m[2]), -1, False
            self.space_total = False
        elif (m := _TOTAL.match(line)) is not None:
            self.totals.append(int(m[1]))
            self.space_total, self.space_blocks, self.space_bytes = True, 0, 0
            return self.spaces.add((self.space, self.color, int(m[1]), lineno))
        elif (m := _REST.match(line)) is not None:
            self.rest = True
            self.hidden += int(m[1])
        elif _OLD_LINE.match(line):
            self.old_listed += 1
        elif (m := _OLD_REST.match(line)) is not None:
            self.old_listed += int(m[1])
        elif line.startswith(_OLD_SUMMARY):
            self.old_part = "names" if line.startswith(_OLD_NAMES[:-1]) else "summary"
        elif not line.lstrip().startswith("----") and not _OLD_SKIP.match(line):
            self.error(lineno, "unrecognized line")
        return None

    def _single_value(self) -> None:
        """Older format: XLA names an allocation holding one value without a slot table
        (BufferAssignment::MemoryUsageReport prints the table only for two or more)."""
        if self.named:
            self.n_values += 1
            self.named = False

    def _space_end(self, lineno: int) -> None:
        """The file ends in a memory space of the newer layout: cut if its blocks cannot add up to
        what XLA would have listed. XLA lists the allocations by size, largest first, and stops after
        the 51st once the rest is under 5% of the total, so up to 50 blocks are all the space holds
        (their sizes add up to ``Total bytes``) and more stop only within 5% of it."""
        total, listed, n = self.totals[-1], self.space_bytes, self.space_blocks
        short = total - listed
        if short > 0 and (n <= 50 or short > total * 0.05 + 1):
            self._cut(lineno, f"input ended after {n} allocation blocks of memory space {self.space[:80]}: "
                              f"they hold at most {listed} of its {total} total bytes")

    def _cut(self, lineno: int, msg: str) -> None:
        self.summary.truncated = True
        self.error(lineno, msg)

    def finish(self, lineno: int) -> list[TableBatch]:
        self._close_block(lineno, at_eof=True)
        if self.named and self.table_announced and not self.summary.truncated:
            self._cut(lineno, f"input ended after allocation {self.alloc_index}'s name and the blank line "
                              "before its slot table")
        self._single_value()
        if not self.space_total:
            self._cut(lineno, f"input ended after the header of memory space {self.space[:80]}, before its "
                              "'Total bytes' line")
        elif self.old_part == "summary":
            self._cut(lineno, f"input ended in the allocation summary, before '{_OLD_NAMES}'")
        elif self.totals and self.n_allocs == 0:
            self._cut(lineno, "input ended before the first allocation block")
        elif self.totals and self.space_blocks == 0 and self.space is not None and self.old_part == "":
            self._cut(lineno, f"input ended before the first allocation block of memory space {self.space[:80]}")
        elif self.old_part == "names" and self.n_allocs < self.old_listed and not self.summary.truncated:
            self._cut(lineno, f"input ended after {self.n_allocs} of the {self.old_listed} allocations "
                              "its summary lists")
        elif self.space is not None and self.space_bytes is not None and not self.summary.truncated:
            self._space_end(lineno)
        if self.space is not None and self.n_allocs and self.blanks == 1 and not self.summary.truncated:
            self._cut(lineno, f"input ended after {self.space_blocks} allocation blocks of memory space "
                              f"{self.space[:80]} and the empty line that closes the last, before the empty line XLA "
                              "ends a memory space with: more blocks may follow")
        self.summary.metrics.update(
            {
                "memory.report_total_bytes": sum(self.totals),
                "memory.report_spaces": len(self.totals),
                "memory.report_allocations": self.n_allocs,
                "memory.report_slots": self.n_slots,
                "memory.report_values": self.n_values,
                "memory.report_hidden_slots": self.hidden,
            }
        )
        if self.summary.truncated and not self.summary.errors:  # a partial dump always says why
            self.error(lineno, "input ended before the report was complete")
        return [b for b in (self.spaces.flush(), self.slots.flush()) if b is not None]


def parse(lines: Iterable[str]) -> ParserOutput:
    return drive(_Report(), Lines(lines, _START, "an XLA memory usage report"))
