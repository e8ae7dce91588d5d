"""One dump in, its records and summary out: the driver every caller goes through.

``iter_dump`` streams: it yields ``TableBatch`` frames, each with ``dump_id`` and
``parser_version`` prepended, then one ``DumpSummary`` whose kind, stage, program
and status are final. ``parse_dump`` collects the same into frames (CLI, tests).

Nothing raises for bad input. A file no format claims, by its text or by its name,
is recorded as ``unknown`` with status ok. A file under a dump's name (e.g.
``*.after_optimizations.txt``, ``ir_post_fusion.txt``) that is empty, binary or not
that format is ``failed`` with the kind its name says. A ``ParseError``, a passed
``ParseLimits`` limit or an unexpected parser exception makes the dump ``failed``
(batches already yielded must then be discarded by the caller: ``parse_dump`` does);
a stream cut short makes it ``partial``. Status and errors agree: every ``partial``
and ``failed`` dump carries at least one error, each naming the file, and the line
where there is one; a dump cut short (``truncated``) always has one naming its last line.

The last guard of every format: a metric whose value is not a finite number within the bounds
its name declares (``transforms.figure_bounds.FIGURE_BOUNDS``) is left out of the summary (its
program's figures and the totals alike), with an error naming the metric and the dump: the
dump is ``partial`` and its other figures are kept. The parsers check the values they read
where they know their meaning (and name the line); this catches what any of them let through.
A partial dump whose parser names what its damage cost (``DumpSummary.lost``: such a dropped
metric is added to it) keeps only its other figures; a cut or failed one's are all in doubt.

Limits (``ParseLimits``) bound what one dump may cost, whatever its bytes: the
reader never holds a line longer than ``max_line_bytes`` nor reads more than
``max_dump_bytes`` of text, and stops after ``max_seconds``. The time limit is
cooperative (checked before each ~1 MiB chunk of text is read), which is enough
because the parsers only run per-line regexes and string methods on lines no longer
than the line cap, and keep per-dump state small: no step between two chunks can run
long. A hostile dump costs at most the cap, a chunk and the time limit.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import BinaryIO, Iterator

import polars as pl

from transforms.parsers.formats import classify, describe, is_binary, kind_from_name, module_for, parser_version
from transforms.naming import program_from_path
from transforms.reading import LineReader, ReadLimitError, strip_gz
from transforms.figure_bounds import figure_problem
from transforms.records import DumpKind, DumpSummary, ParseError, Status, TableBatch, lost_match

IDENTITY_COLUMNS = pl.Schema({"dump_id": pl.String, "parser_version": pl.Int16})


@dataclass(frozen=True, slots=True)
class ParseLimits:
    """What one parse may cost; a dump past a limit is ``failed``, the night goes on.

    - ``max_line_bytes``: the longest line read (bytes, newline excluded). A parse holds
      at most this plus ~1 MiB of buffers; a line just under it costs a few copies of it
      (bytes, text, the parser's pieces). The longest line of every real dump we have is
      90 KB (an ONNX report's exported program); HLO lines of the seeds and samples stay
      under 5 KB, as XLA prints constants of more than 10 elements as ``{...}``. Only
      ``--xla_dump_large_constants`` prints them whole: 64 MiB is ~700 times the longest
      real line and still reads a constant of several million elements.
    - ``max_dump_bytes``: text bytes per dump, after decompression. Real HLO dumps of
      large models reach ~1 GB; 4 GiB leaves room while stopping a gzip bomb.
    - ``max_seconds``: wall time per parse, checked between chunks of text. The parsers
      read 15-100 MB/s on one core, so a 1 GB dump takes well under the 600 s default.
    """

    max_line_bytes: int = 64 << 20
    max_dump_bytes: int = 4 << 30
    max_seconds: float = 600.0

    def __post_init__(self) -> None:
        for name in ("max_line_bytes", "max_dump_bytes", "max_seconds"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be a number >= 0, not {getattr(self, name)!r}")


DEFAULT_LIMITS = ParseLimits()


@dataclass(slots=True)
class ParsedDump:
    summary: DumpSummary
    tables: dict[str, pl.DataFrame]

    @property
    def status(self) -> Status:
        return self.summary.status


def iter_dump(raw: BinaryIO, name: str, *, dump_id: str = "",
              limits: ParseLimits = DEFAULT_LIMITS) -> Iterator[TableBatch | DumpSummary]:
    """Parse the dump in ``raw``; ``name`` is its path (relative to the bucket is best)."""
    reader = LineReader(raw, max_line_bytes=limits.max_line_bytes, max_bytes=limits.max_dump_bytes,
                        max_seconds=limits.max_seconds)
    base = strip_gz(PurePosixPath(name).name)
    kind = kind_of(name, reader.head)
    if kind is DumpKind.UNKNOWN:
        yield DumpSummary(kind, program=program_from_path(name), errors=_located(name, reader.error))
        return
    if (why := _unreadable(reader, kind)) is not None:
        yield DumpSummary(kind, stage=module_for(kind).stage_from_name(base), program=program_from_path(name),
                          failed=True, errors=[f"{name}: {why}"])
        return

    fmt = module_for(kind)
    identity = [pl.lit(dump_id, pl.String).alias("dump_id"), pl.lit(fmt.PARSER_VERSION, pl.Int16).alias("parser_version")]
    summary: DumpSummary | None = None
    try:
        for item in fmt.parse(reader):
            if isinstance(item, TableBatch):
                yield TableBatch(item.table, item.frame.select(*identity, pl.all()))
            else:
                summary = item
    except ReadLimitError as exc:
        summary = DumpSummary(kind, failed=True, errors=[f"{name}: {exc}"], limit=exc.limit)
    except ParseError as exc:
        summary = DumpSummary(kind, failed=True, errors=[str(exc.at(name))])
    except Exception as exc:  # a parser bug must not stop the night: report it as this file's failure
        where = traceback.extract_tb(exc.__traceback__)[-1]
        msg = f"internal parser error {type(exc).__name__}: {exc} (at {PurePosixPath(where.filename).name}:{where.lineno})"
        summary = DumpSummary(kind, failed=True, errors=[f"{name}: line {reader.lines_read}: {msg}"])
    if summary is None:
        summary = DumpSummary(kind, failed=True, errors=[f"{name}: parser ended without a summary"])
    elif not summary.failed:
        summary.errors = [f"{name}: {e}" for e in summary.errors]
    summary.errors += _impossible_figures(summary, name)

    if reader.error:  # the parser saw a clean end, but the bytes were cut short
        summary.errors.append(f"{name}: {reader.error}")
        summary.truncated = True
    _keep_what_stands(summary)
    last = reader.lines_read
    if summary.status is not Status.OK and not summary.errors or summary.truncated and not _names_line(
            summary.errors, last):
        # Every parser says why; this is the net under a parser that forgot to, or that named
        # only an earlier line: a cut dump always names the line it ends on.
        summary.errors.append(f"{name}: line {last}: the dump ends before its structure is complete (cut short?)")
    summary.kind = kind
    summary.stage = _stage(fmt.stage_from_name(base), summary.stage)
    summary.program = summary.program or program_from_path(name)
    yield summary


def _stage(named: str | None, from_text: str | None) -> str | None:
    """The name's stage, else the text's; a TORCH_TRACE log named without its rank (``trace``) keeps
    the rank its records carry."""
    return from_text if named == "trace" and from_text else named or from_text


def named_at(kind: DumpKind, path: str, first_path: str, stage: str | None, program: str | None
             ) -> tuple[str | None, str | None]:
    """(stage, program) of the bytes parsed at ``first_path`` (``stage``, ``program``) found again
    at ``path``: what the first path's name gave them (a rank, an XLA module, an Inductor graph
    folder), this path's name gives. Two ranks' logs of the same bytes keep their ranks."""
    if kind is DumpKind.UNKNOWN or path == first_path:
        return stage, program
    fmt = module_for(kind)
    first_named = fmt.stage_from_name(strip_gz(PurePosixPath(first_path).name))
    from_text = stage if first_named in (None, "trace") else None  # else the first name gave it: the text's is unknown
    stage = _stage(fmt.stage_from_name(strip_gz(PurePosixPath(path).name)), from_text) or stage
    # The path named it, not the dump's text (an XLA module's text names it: HloModule <name>).
    if not getattr(fmt, "PROGRAM_FROM_TEXT", False) and program == program_from_path(first_path):
        program = program_from_path(path)
    return stage, program


def parse_dump(raw: BinaryIO, name: str, *, dump_id: str = "", limits: ParseLimits = DEFAULT_LIMITS) -> ParsedDump:
    """``iter_dump`` collected: one frame per table (empty tables absent)."""
    batches: dict[str, list[pl.DataFrame]] = {}
    summary = None
    for item in iter_dump(raw, name, dump_id=dump_id, limits=limits):
        if isinstance(item, TableBatch):
            batches.setdefault(item.table, []).append(item.frame)
        else:
            summary = item
    assert summary is not None
    if summary.failed:
        batches.clear()
    return ParsedDump(summary, {t: pl.concat(fs) for t, fs in batches.items()})


def kind_of(name: str, head: str) -> DumpKind:
    """The kind ``iter_dump`` gives the dump at path ``name`` whose decoded text starts with
    ``head`` (``LineReader.head``): by its text, else by its file name, else unknown."""
    base = strip_gz(PurePosixPath(name).name)
    kind = classify(base, head)
    return kind if kind is not DumpKind.UNKNOWN else kind_from_name(base) or DumpKind.UNKNOWN


def _unreadable(reader: LineReader, kind: DumpKind) -> str | None:
    """Why a file under a dump's name holds nothing to parse (None: parse it)."""
    if reader.error and not reader.head:
        return reader.error
    if not reader.head:
        return f"the file is empty (0 bytes{' after decompression' if reader.compressed else ''}), not {describe(kind)}"
    if is_binary(reader.head):
        return f"line 1: the file is binary, not {describe(kind)} (NUL bytes at its start)"
    return None


_MAX_FIGURE_ERRORS = 20


def _impossible_figures(summary: DumpSummary, name: str) -> list[str]:
    """Drop every metric no figure can be (``figure_problem``) from ``summary``; the errors that say so
    (a program's; the totals' only for a metric no program's error names)."""
    errors: list[str] = []
    named: set[str] = set()
    for program, metrics in [*summary.programs.items(), (None, summary.metrics)]:
        for metric, value in list(metrics.items()):
            if (why := figure_problem(metric, value)) is None:
                continue
            del metrics[metric]
            if summary.lost is not None:  # a parser that tells what damage cost: this figure too
                summary.lost = (*summary.lost, metric)
            if program is not None or metric not in named:
                named.add(metric)
                of = f" (program {program})" if program is not None else ""
                errors.append(f"{name}: metric {metric}{of} {why}: not stored")
    if len(errors) > _MAX_FIGURE_ERRORS:
        errors[_MAX_FIGURE_ERRORS:] = [f"{name}: {len(errors) - _MAX_FIGURE_ERRORS} more metrics not stored"]
    return errors


def _keep_what_stands(summary: DumpSummary) -> None:
    """A damaged dump whose parser named what the damage cost (``DumpSummary.lost``) keeps its other
    figures, and only those; a cut or failed dump's figures are all in doubt (``lost`` None)."""
    if summary.truncated or summary.failed:
        summary.lost = None
    if summary.lost is None or summary.status is not Status.PARTIAL:
        return
    summary.lost = tuple(sorted(set(summary.lost)))
    for metrics in (summary.metrics, *summary.programs.values()):
        for metric in [m for m in metrics if lost_match(m, summary.lost)]:
            del metrics[metric]


def _names_line(errors: list[str], lineno: int) -> bool:
    """Whether an error is about line ``lineno`` ("<path>: line <n>: ..." or "... line <n> ...")."""
    return any(f"line {lineno}:" in e or f"line {lineno} " in e for e in errors)


def _located(name: str, error: str | None) -> list[str]:
    return [f"{name}: {error}"] if error else []


__all__ = ["DEFAULT_LIMITS", "ParseLimits", "ParsedDump", "iter_dump", "kind_of", "parse_dump", "parser_version"]
