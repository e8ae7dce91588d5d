"""Shared by the parser tests: run one parser over lines and collect what it yields."""

from __future__ import annotations

from types import ModuleType
from typing import Iterable

import polars as pl

from transforms.records import DumpSummary, TableBatch


def collect(parser: ModuleType, lines: Iterable[str], *, all_tables: bool = False) -> tuple[dict[str, pl.DataFrame], DumpSummary]:
    """(tables, summary) of ``parser.parse(lines)``, checking the output contract on the way:
    batches first, each with its table's declared schema, then exactly one summary.
    ``all_tables`` adds an empty frame for each declared table that got no rows."""
    out = list(parser.parse(lines))
    summary = out[-1]
    assert isinstance(summary, DumpSummary) and all(isinstance(b, TableBatch) for b in out[:-1])
    frames: dict[str, list[pl.DataFrame]] = {}
    for b in out[:-1]:
        assert b.frame.schema == parser.TABLES[b.table]
        frames.setdefault(b.table, []).append(b.frame)
    tables = {t: pl.concat(f) for t, f in frames.items()}
    if all_tables:
        tables = {t: tables.get(t, pl.DataFrame(schema=s)) for t, s in parser.TABLES.items()}
    return tables, summary
