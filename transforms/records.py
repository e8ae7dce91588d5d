"""The contract every dump parser follows.

A parser is a pure generator over the lines of one dump (strings as a text file
yields them, trailing newline kept or not). It yields ``TableBatch`` items (polars
frames whose schema is declared next to the parser, at most ``BATCH_ROWS`` rows
each, so memory stays flat however long the dump is) and, last, exactly one
``DumpSummary``: what the dump is, which program, its metrics, and what went wrong.

One dump is one program in every format but one: a torch.compile structured trace
(``torch_trace``) holds every function the process compiled. Such a parser also fills
``DumpSummary.programs`` (program name -> that program's metrics, under the same metric
names), puts the dump's totals in ``metrics``, and names ``program`` only when the dump
holds exactly one. For every other format ``programs`` stays empty.

Parsers never open files and never touch the warehouse. They raise ``ParseError``
only when nothing usable can be read; damage they can step over (a truncated tail,
a line they do not understand) goes into ``DumpSummary.errors`` and makes the
status ``partial``. ``dump_id`` and ``parser_version`` columns are added by the
caller (``transforms.parse``), not by each parser.

Damage spoils only what it touches, when the parser can tell what that is: a partial dump's
``DumpSummary.lost`` names the metrics (shell patterns: ``kernel.*``) its damage cost, and its
other figures stand: the driver keeps only those, and they are stored, charted and judged like
an ``ok`` dump's (a failure incident opens only when a lost figure is one the verdict reads).
``lost`` None, the default, is "every figure": a parser that cannot tell keeps the rule that a
partial dump's figures are not believed; a cut dump (``truncated``) is always so.

A figure is checked before it is stored (``transforms.figure_bounds``: docs/metrics.md, "What a figure
may be"): a parser checks each value where it knows what the value means and leaves a record
holding one no format can mean out of its figures, with an error naming the line; the driver
checks every metric once more. A record a parser cannot read (too deep, too big, an odd type)
costs that record only (``record_failure``).
"""

from __future__ import annotations

import enum
import fnmatch
from dataclasses import dataclass, field
from functools import cache
from typing import Callable, Iterable, Iterator, Protocol

import polars as pl
import pyarrow as pa

BATCH_ROWS = 65_536

# Vocabulary shared downstream (trends key diff items on it): XLA opcodes that are
# collectives, kept here so that trends never import a parser to learn them.
# kernel.collectives: one count per collective operation, on the instruction that starts it. The
# opcodes are XLA's (xla/hlo/ir/hlo_opcode.h); "<op>-start" of an op without an opcode of its own is
# the async syntax sugar XLA prints for async-start wrapping <op> (hlo_parser.cc ParseOpcode). Not
# counted: the -done/-update halves, and async-start/-update/-done themselves (the collective they
# wrap is printed in its own async computation and counted there, once).
COLLECTIVE_OPS = ("all-reduce", "all-gather", "all-to-all", "ragged-all-to-all", "reduce-scatter",
                  "collective-permute", "collective-broadcast")
COLLECTIVES = frozenset({
    *COLLECTIVE_OPS, "all-reduce-start", "all-gather-start", "collective-permute-start", "send", "recv",
    *(f"{op}-start" for op in ("all-to-all", "ragged-all-to-all", "reduce-scatter", "collective-broadcast"))})


class DumpKind(enum.StrEnum):
    XLA_HLO = "xla_hlo"
    XLA_BUFFER_ASSIGNMENT = "xla_buffer_assignment"
    XLA_MEMORY_USAGE_REPORT = "xla_memory_usage_report"
    INDUCTOR_IR = "inductor_ir"
    INDUCTOR_OUTPUT_CODE = "inductor_output_code"
    ONNX_REPORT = "onnx_report"
    TORCH_TRACE = "torch_trace"
    UNKNOWN = "unknown"


class Status(enum.StrEnum):
    OK = "ok"
    PARTIAL = "partial"  # some records, but the dump was damaged or not fully understood
    FAILED = "failed"  # nothing usable


class ParseError(ValueError):
    """A dump that cannot be read at all. Carries the line (1-based) when known.

    Parsers know no paths; the caller adds it with ``err.at(path)``.
    """

    def __init__(self, msg: str, lineno: int | None = None, path: str | None = None):
        self.msg, self.lineno, self.path = msg, lineno, path
        super().__init__(str(self))

    def __str__(self) -> str:
        # Same shape as the errors of DumpSummary: "<path>: line <n>: <msg>".
        line = f"line {self.lineno}" if self.lineno is not None else None
        return ": ".join(p for p in (self.path, line, self.msg) if p is not None)

    def at(self, path: str) -> "ParseError":
        return ParseError(self.msg, self.lineno, path)


# What one record of a dump can make a parser raise, however odd its bytes: nested too deep
# (RecursionError), too big (MemoryError), a number or type no code expects (TypeError,
# ValueError, OverflowError, ...). Not a ParseError (the dump is unreadable as a whole) nor the
# reader's limits (transforms.reading.ReadLimitError): those stop the dump.
RECORD_FAILURES = (RecursionError, MemoryError, TypeError, ValueError, ArithmeticError, LookupError)


def record_failure(exc: BaseException) -> str | None:
    """What a record whose reading raised ``exc`` says of itself ("unreadable (TypeError: ..., at
    torch_trace.py:496)": where it was raised, so that a parser's bug is found from the message),
    or None when ``exc`` is not one record's (a ParseError, a limit): the parse must stop.

    A line parser costs nothing per line for it: ``while True: try: for ... in <one iterator>:
    ...; break; except RECORD_FAILURES as exc: <raise when None, else report>`` goes on from the
    line after. A parser of records (several lines each) enters ``OneRecord`` around each."""
    if isinstance(exc, ParseError) or not isinstance(exc, RECORD_FAILURES):
        return None
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f", at {tb.tb_frame.f_code.co_filename.rpartition('/')[2]}:{tb.tb_lineno}" if tb is not None else ""
    return f"unreadable ({type(exc).__name__}: {str(exc)[:200]}{where})"


class OneRecord:
    """``with guard:`` around the handling of one record: when it raises one of
    ``RECORD_FAILURES``, ``report(record_failure(exc))`` says so (the parser names the record's
    line) and the parse goes on with the next record. One instance per parse."""

    __slots__ = ("report",)

    def __init__(self, report: Callable[[str], None]):
        self.report = report

    def __enter__(self) -> "OneRecord":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or (why := record_failure(exc)) is None:
            return False
        self.report(why)
        return True


def line_error(lineno: int, msg: str) -> str:
    """The one format of a non-fatal error in ``DumpSummary.errors``."""
    return f"line {lineno}: {msg}"


@dataclass(frozen=True, slots=True)
class TableBatch:
    table: str
    frame: pl.DataFrame


@dataclass(slots=True)
class DumpSummary:
    kind: DumpKind
    stage: str | None = None
    program: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # True when the parser saw the dump end before its structure closed (cut file).
    truncated: bool = False
    # Set by the driver (transforms.parse) on a ParseError or an unreadable file;
    # a parser that got to its summary has read something.
    failed: bool = False
    # Set by the driver when a limit stopped the parse: the ParseLimits field that did
    # ("max_line_bytes", "max_dump_bytes", "max_seconds"), so a larger limit can retry it.
    limit: str | None = None
    # Per-program metrics of a dump that holds several programs (torch_trace): program name ->
    # {metric: value}, the same metric names as ``metrics`` (which then holds the dump's totals).
    # Empty for formats with one program per dump.
    programs: dict[str, dict[str, float]] = field(default_factory=dict)
    # Of a damaged (partial) dump: the metrics its damage cost, as shell patterns, when the parser
    # can tell; its other figures stand. None: every figure is in doubt (a parser that cannot tell,
    # a cut dump). Meaningless for an ok dump.
    lost: tuple[str, ...] | None = None

    @property
    def figures_stand(self) -> bool:
        """Whether the dump's figures are believed: ok, or partial with what it lost known."""
        return self.status is Status.OK or (self.status is Status.PARTIAL and self.lost is not None
                                            and not self.truncated)

    @property
    def status(self) -> Status:
        if self.failed:
            return Status.FAILED
        return Status.PARTIAL if (self.errors or self.truncated) else Status.OK


def lost_match(metric: str, lost: Iterable[str]) -> bool:
    """Whether ``metric`` is one of the ``lost`` patterns (``DumpSummary.lost``)."""
    return any(fnmatch.fnmatchcase(metric, pattern) for pattern in lost)


ParserOutput = Iterator["TableBatch | DumpSummary"]


class Parser(Protocol):
    def __call__(self, lines: Iterable[str]) -> ParserOutput: ...


class RowBuffer:
    """Collects rows of one table and hands them out as frames of ``BATCH_ROWS``.

    ``add`` returns a full batch when one is ready, else None: the caller yields it.
    Rows are tuples in schema order; the frame is built once per batch (cheap),
    never per row. ``memory_pool``: where Arrow builds the columns (default: Arrow's,
    mimalloc, which keeps the pages of a freed batch for a while: a parser whose
    batches hold megabytes of text gives them back sooner with ``pa.system_memory_pool()``).
    """

    __slots__ = ("table", "schema", "rows", "batch_rows", "memory_pool")

    def __init__(self, table: str, schema: pl.Schema, batch_rows: int = BATCH_ROWS, *,
                 memory_pool: pa.MemoryPool | None = None):
        self.table, self.schema, self.batch_rows, self.memory_pool = table, schema, batch_rows, memory_pool
        self.rows: list[tuple] = []

    def add(self, row: tuple) -> TableBatch | None:
        self.rows.append(row)
        return self.flush() if len(self.rows) >= self.batch_rows else None

    def flush(self) -> TableBatch | None:
        if not self.rows:
            return None
        # Through Arrow, column by column: polars builds nested lists from Python
        # objects one Series per value (~3.5 s per 65k rows), Arrow ~30x faster,
        # and flat columns no slower than polars' own constructor.
        arrays = [pa.array(values, _arrow_type(dtype), memory_pool=self.memory_pool)
                  for dtype, values in zip(self.schema.dtypes(), zip(*self.rows))]
        frame = pl.from_arrow(pa.Table.from_arrays(arrays, names=self.schema.names()))
        assert isinstance(frame, pl.DataFrame)
        frame = frame.cast(self.schema)  # enums travel as strings; a no-op for the rest
        self.rows = []
        return TableBatch(self.table, frame)


@cache
def _arrow_type(dtype: pl.DataType) -> pa.DataType:
    if isinstance(dtype, (pl.Enum, pl.Categorical)):
        return pa.large_string()
    return pl.Series([], dtype=dtype).to_arrow().type
