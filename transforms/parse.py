"""One dump in, its records and summary out: the driver every caller goes through.

``iter_dump`` streams: it yields ``TableBatch`` frames, each with ``dump_id`` and
``parser_version`` prepended, then one ``DumpSummary`` whose kind, stage, program
and status are final. ``parse_dump`` collects the same into frames (CLI, tests).

Nothing raises for bad input. Unknown files are recorded as ``unknown`` with status
ok. A ``ParseError`` or an unexpected parser exception makes the dump ``failed``
(batches already yielded must then be discarded by the caller: ``parse_dump`` does);
a stream cut short makes it ``partial``. Every error names the file, and the line
where there is one.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import BinaryIO, Iterator

import polars as pl

from transforms.parsers.formats import classify, module_for, parser_version
from transforms.naming import program_from_path
from transforms.reading import LineReader, strip_gz
from transforms.records import DumpKind, DumpSummary, ParseError, Status, TableBatch

IDENTITY_COLUMNS = pl.Schema({"dump_id": pl.String, "parser_version": pl.Int16})


@dataclass(slots=True)
class ParsedDump:
    summary: DumpSummary
    tables: dict[str, pl.DataFrame]

    @property
    def status(self) -> Status:
        return self.summary.status


def iter_dump(raw: BinaryIO, name: str, *, dump_id: str = "") -> Iterator[TableBatch | DumpSummary]:
    """Parse the dump in ``raw``; ``name`` is its path (relative to the bucket is best)."""
    reader = LineReader(raw)
    base = strip_gz(PurePosixPath(name).name)
    kind = classify(base, reader.head)
    if kind is DumpKind.UNKNOWN:
        yield DumpSummary(kind, program=program_from_path(name), errors=_located(name, reader.error))
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

    if reader.error:  # the parser saw a clean end, but the bytes were cut short
        summary.errors.append(f"{name}: {reader.error}")
        summary.truncated = True
    summary.kind = kind
    summary.stage = fmt.stage_from_name(base) or summary.stage
    summary.program = summary.program or program_from_path(name)
    yield summary


def parse_dump(raw: BinaryIO, name: str, *, dump_id: str = "") -> ParsedDump:
    """``iter_dump`` collected: one frame per table (empty tables absent)."""
    batches: dict[str, list[pl.DataFrame]] = {}
    summary = None
    for item in iter_dump(raw, name, dump_id=dump_id):
        if isinstance(item, TableBatch):
            batches.setdefault(item.table, []).append(item.frame)
        else:
            summary = item
    assert summary is not None
    if summary.failed:
        batches.clear()
    return ParsedDump(summary, {t: pl.concat(fs) for t, fs in batches.items()})


def _located(name: str, error: str | None) -> list[str]:
    return [f"{name}: {error}"] if error else []


__all__ = ["ParsedDump", "iter_dump", "parse_dump", "parser_version"]
