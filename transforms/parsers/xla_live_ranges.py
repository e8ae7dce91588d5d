"""The ``HloLiveRange`` listing of an XLA buffer assignment, read line by line.

XLA prints it at the end of a combined ``*-buffer-assignment.txt`` (older XLA, e.g.
the GPU seed) or alone in ``*-live-range.txt`` (XLA:CPU in jaxlib 0.10)::

    HloLiveRange (max 13):
      InstructionSequence:
        0:x.1
      BufferLiveRange:
        x.1{}:0-13
      Live ranges at 8 (peak):
        w1.1{}: 32768 bytes (cumulative: 32768 bytes)     <- older XLA: "w1.1: 32768 bytes"
      Stack trace breakdown for peak usage: 68 104 bytes  <- newer XLA only, then a tree

``LiveRangeReader`` is fed the lines of that section by ``transforms.parsers.xla_buffers``
(the one public parser); it yields table batches and, at the end, says whether the
listing was cut. Guarantees: one row per listing line, from that line alone (so a cut
file gives a prefix of the rows); never raises. A cut is detected when the sequence
has fewer than ``max`` entries, the peak header is missing, or the peak lists fewer
values than the live ranges that cover the peak time (XLA lists exactly those).

Also the plumbing both XLA buffer parsers share: ``Lines`` (numbered lines, holding
back a last line cut mid-line).
"""

from __future__ import annotations

import re
from array import array
from typing import Callable, Iterable, Iterator

import polars as pl

from transforms.records import DumpSummary, ParseError, RowBuffer, TableBatch

_MAX = re.compile(r"^HloLiveRange \(max (\d{1,9})\):$")
_SEQ = re.compile(r"^ {4}(\d{1,9}):(\S+)$")
_RANGE = re.compile(r"^ {4}([^\s{}:]++)(\{[\d,]*\})?:(\d{1,9})-(\d{1,9})$")
_PEAK_HEAD = re.compile(r"^ {2}Live ranges at (\d{1,9}) \(peak\):$")
_PEAK = re.compile(r"^ {4}([^\s{}:]++)(\{[\d,]*\})?: (\d{1,18}) bytes(?: \(cumulative: (\d{1,18}) bytes\))?$")
_MAX_BYTES = (1 << 63) - 1  # the Int64 columns' range
_BREAKDOWN = re.compile(r"^ {2}Stack trace breakdown for peak usage: ([\d ]{1,40}) bytes$")

SCHEDULE = pl.Schema({"time": pl.Int32, "instruction": pl.String, "lineno": pl.Int32})
LIVE_RANGES = pl.Schema(
    {
        "value_name": pl.String,
        "instruction": pl.String,
        "shape_index": pl.String,
        "start": pl.Int32,
        "end": pl.Int32,
        "lineno": pl.Int32,
    }
)
PEAK_VALUES = pl.Schema(
    {
        "peak_time": pl.Int32,
        "value_name": pl.String,
        "instruction": pl.String,
        "shape_index": pl.String,
        "size_bytes": pl.Int64,
        "cumulative_bytes": pl.Int64,
        "shape": pl.String,
        "lineno": pl.Int32,
    }
)
TABLES = {"buffer_schedule": SCHEDULE, "buffer_live_ranges": LIVE_RANGES, "buffer_peak_values": PEAK_VALUES}

_LINENO = "Line of the dump file this row was read from (1-based)."
_INSTR = "HLO instruction that defines the value (join to hlo_instructions by name)."
TABLE_DOCS = {
    "buffer_schedule": {
        "": "HloLiveRange InstructionSequence: the logical time of each scheduled HLO instruction "
        "(all computations flattened, as XLA's live-range analysis orders them).",
        "time": "Logical time (0-based position in the flattened schedule).",
        "instruction": "HLO instruction name at that time.",
        "lineno": _LINENO,
    },
    "buffer_live_ranges": {
        "": "HloLiveRange BufferLiveRange: the logical time span during which each HLO value is live.",
        "value_name": "Value as the listing prints it: instruction name and shape index, e.g. 'x.1{}'.",
        "instruction": _INSTR,
        "shape_index": "Shape index of the value within the instruction's output, e.g. '{}' or '{0}'; "
        "null when the listing omits it.",
        "start": "First logical time the value is live (see buffer_schedule.time).",
        "end": "Last logical time the value is live (inclusive; 'max' for values live out of the program).",
        "lineno": _LINENO,
    },
    "buffer_peak_values": {
        "": "Values live at the peak of the live-range analysis ('Live ranges at T (peak)'); "
        "their sizes add up to memory.peak_live_bytes.",
        "peak_time": "Logical time T of the peak.",
        "value_name": "Value as the listing prints it (older XLA omits the shape index: 'p5.32.0').",
        "instruction": _INSTR,
        "shape_index": "Shape index as printed, e.g. '{}'; null when the listing omits it (older XLA).",
        "size_bytes": "Bytes of this value.",
        "cumulative_bytes": "Running total printed by newer XLA ('cumulative: N bytes'); null in older dumps.",
        "shape": "Shape with layout, taken from the same file's allocation listing when it has one "
        "(combined buffer-assignment files) and the sizes agree; null otherwise.",
        "lineno": _LINENO,
    },
}


class LiveRangeReader:
    """State for one ``HloLiveRange`` section. ``feed`` every line after the header."""

    def __init__(self, header: str, shapes: dict[tuple[str, str], tuple[str, int]]):
        m = _MAX.match(header)
        self.max_time = int(m[1]) if m else None
        self.shapes = shapes  # (instruction, shape index) -> (shape, size) from the allocation listing
        self.part = ""
        self.seq = RowBuffer("buffer_schedule", SCHEDULE)
        self.ranges = RowBuffer("buffer_live_ranges", LIVE_RANGES)
        self.peaks = RowBuffer("buffer_peak_values", PEAK_VALUES)
        self.n_seq = 0
        self.starts, self.ends = array("q"), array("q")
        self.peak_time: int | None = None
        self.peak_bytes = 0
        self.n_peak = 0
        self.cumulative = False  # peak lines print "(cumulative: N bytes)" (newer XLA)
        self.breakdown_bytes: int | None = None
        self.rejected = False  # a row was not read (its error says why): the counts no longer tell a cut

    def feed(self, lineno: int, line: str) -> TableBatch | None | bool | str:
        """Rows from one line: a batch when one is full, None, False if the line is not understood, or
        why a line of the listing's syntax holds figures XLA cannot print (the row is not read)."""
        if self.part == "tree":  # the stack-trace tree after the breakdown total: nothing to keep
            return None
        if line.startswith("    "):
            if self.part == "seq" and (m := _SEQ.match(line)):
                self.n_seq += 1
                return self.seq.add((int(m[1]), m[2], lineno))
            if self.part == "ranges" and (m := _RANGE.match(line)):
                start, end = int(m[3]), int(m[4])
                if start > end:
                    self.rejected = True
                    return f"live range {start}-{end} of {m[1][:80]} ends before it starts; not read"
                self.starts.append(start)
                self.ends.append(end)
                return self.ranges.add((m[1] + (m[2] or ""), m[1], m[2], start, end, lineno))
            if self.part == "peak" and (m := _PEAK.match(line)):
                return self._peak(lineno, m)
            return False
        if line == "  InstructionSequence:":
            self.part = "seq"
        elif line == "  BufferLiveRange:":
            self.part = "ranges"
        elif m := _PEAK_HEAD.match(line):
            self.part, self.peak_time = "peak", int(m[1])
        elif m := _BREAKDOWN.match(line):
            self.part, self.breakdown_bytes = "tree", int(m[1].replace(" ", ""))
        elif line.strip():
            return False
        return None

    def _peak(self, lineno: int, m: re.Match) -> TableBatch | None | str:
        size = int(m[3])
        if self.peak_bytes + size > _MAX_BYTES:
            self.rejected = True
            return f"peak value {m[1][:80]} not read: with its {size} bytes the peak would pass 2^63 bytes"
        self.n_peak += 1
        self.peak_bytes += size
        known = self.shapes.get((m[1], m[2] or "{}"))
        # Older listings print no shape index; only trust the lookup when the sizes agree.
        shape = known[0] if known is not None and known[1] == size else None
        cumulative = int(m[4]) if m[4] else None
        self.cumulative |= cumulative is not None
        return self.peaks.add((self.peak_time, m[1] + (m[2] or ""), m[1], m[2], size, cumulative, shape, lineno))

    def flush(self) -> list[TableBatch]:
        return [b for b in (self.seq.flush(), self.ranges.flush(), self.peaks.flush()) if b is not None]

    def last_line_complete(self, line: str) -> bool:
        """Whether a last line without newline is whole: only lines no cut can leave looking
        whole qualify (a peak line ends with "bytes)", or "bytes" in the older format; the
        stack-trace tree is not read)."""
        if self.part == "tree" or _BREAKDOWN.match(line):
            return True
        m = _PEAK.match(line) if self.part == "peak" else None
        # Newer XLA prints a shape index and a running total on every peak line, older XLA neither.
        return m is not None and (m[4] is not None or (m[2] is None and not self.cumulative))

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {"memory.live_ranges": len(self.starts)}
        if self.max_time is not None:
            out["memory.live_range_max_time"] = self.max_time
        if self.peak_time is not None:
            out["memory.peak_time"] = self.peak_time
            out["memory.peak_values"] = self.n_peak
            out["memory.peak_live_bytes"] = self.peak_bytes
        return out

    def problems(self) -> tuple[list[str], list[str]]:
        """(cuts, others): why the listing ended early (empty when it did not), and
        inconsistencies worth an error."""
        cuts, msgs = [], []
        if self.rejected:
            return cuts, msgs
        if self.max_time is not None and self.n_seq < self.max_time:
            cuts.append(f"the instruction sequence ends after {self.n_seq} of {self.max_time} entries")
        if self.peak_time is None:
            return cuts + ["the live-range listing ends before its 'Live ranges at T (peak)' section"], msgs
        t = self.peak_time
        covering = sum(1 for s, e in zip(self.starts, self.ends) if s <= t <= e)
        if self.n_peak < covering:
            cuts.append(f"the peak lists {self.n_peak} of the {covering} values live at time {t}")
        elif self.n_peak > covering:
            msgs.append(f"peak lists {self.n_peak} values but {covering} live ranges cover time {t}")
        if self.breakdown_bytes is not None and self.breakdown_bytes != self.peak_bytes:
            msgs.append(f"peak values add up to {self.peak_bytes} bytes, breakdown says {self.breakdown_bytes}")
        return cuts, msgs


def drive(state, reader: "Lines") -> Iterator[TableBatch | DumpSummary]:
    """The loop both XLA side-file parsers share: feed ``state.line`` each line the
    reader gives, then its ``finish`` batches and its summary (truncated if cut).
    ``state.last_line_complete(line)`` says whether a last line without newline is whole."""
    reader.whole = state.last_line_complete
    for lineno, line in reader:
        if (batch := state.line(lineno, line)) is not None:
            yield batch
    if reader.cut:
        state.summary.truncated = True
        state.error(reader.lineno, "last line cut mid-way (no newline); not read")
    yield from state.finish(reader.lineno)
    yield state.summary


class Lines:
    """The lines of a dump as (lineno, text without newline), read one line late so that a
    last line cut mid-line (no newline, while earlier lines had one) is held back: unless
    ``whole(line)`` says that line is complete, it sets ``cut`` instead of being read.
    Raises ParseError for empty input, or when the first non-blank line does not match
    ``start``."""

    def __init__(self, lines: Iterable[str], start: re.Pattern, what: str):
        self.lines, self.start, self.what = lines, start, what
        self.whole: Callable[[str], bool] = lambda line: False
        self.cut = False
        self.lineno = 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        prev: str | None = None
        started = newline = False
        lineno = 0
        for lineno, raw in enumerate(self.lines, start=1):
            if prev is not None:
                yield lineno - 1, prev.rstrip("\r\n")
            if not started:
                raw = raw.lstrip("\ufeff") if lineno == 1 else raw
                if raw.strip():
                    if not self.start.match(raw):
                        raise ParseError(f"not {self.what}", lineno)
                    started = True
            prev = raw
            newline = newline or raw.endswith("\n")
        self.lineno = lineno
        if not started:
            raise ParseError("empty input", max(lineno, 1))
        if prev is not None:
            if newline and not prev.endswith("\n") and not self.whole(prev.rstrip("\r")):
                self.cut = True
            else:
                yield lineno, prev.rstrip("\r\n")
