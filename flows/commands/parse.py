"""``dumpscope parse``: parse dump files on the spot and print what each holds.

A directory stands for every file under it, as the nightly lists a bucket's (``dump_files``):
in path order, never through a symbolic link below it; a link, a FIFO or a device is listed
and reported failed, not read (``flows.ingest.local_open``); ``run.json`` files are a run's
metadata, not dumps. Imports neither Prefect nor DuckDB, so the command answers in a fraction of a second.
Holds no dump whole: records are dropped as they are parsed, or, for ``--table``,
spooled to disk a batch at a time and printed from there (peak RSS flat in the file's
size; ``benchmarks/bench_real.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

from dataclasses import dataclass

import polars as pl

from flows.commands.shared import json_value
from flows.errors import CommandError
from flows.ingest.local_open import Refused, Unopened, open_regular_below
from transforms.layout import RUN_META, escape_name
from transforms.parse import DEFAULT_LIMITS, ParseLimits, iter_dump
from transforms.parsers.formats import all_tables
from transforms.records import DumpKind, DumpSummary, Status


_JSON_ROWS = 2048  # rows turned into Python objects at a time by --json --table
_SHOWN_ROWS = 256  # rows of --table in one printed table (without --json)


def number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


@dataclass(frozen=True, slots=True)
class DumpFile:
    """A file to parse: ``path`` as given or found; ``root`` and ``rel`` when it was found under
    the directory ``root`` (opened by ``open_regular_below``: a regular file below it, or none)."""
    path: Path
    root: Path | None = None
    rel: str | None = None

    def open(self):
        return self.path.open("rb") if self.root is None else open_regular_below(str(self.root), self.rel)


def dump_files(paths: list[Path]) -> list[DumpFile]:
    """``paths``, each directory replaced by every file under it as the nightly lists a bucket's:
    in path order, symbolic links (to files or directories), FIFOs and devices listed (to be
    refused when opened), never followed; ``run.json`` (a run's metadata) left out. Raises
    ``CommandError`` (exit 2) for a directory that holds no file."""
    out = []
    for path in paths:
        if not path.is_dir():
            out.append(DumpFile(path))
            continue
        found = []
        for parent, dirs, names in os.walk(path):
            links = [d for d in dirs if os.path.islink(os.path.join(parent, d))]  # os.walk lists them, never enters
            found += [os.path.relpath(os.path.join(parent, n), path) for n in names + links if n != RUN_META]
        if not found:
            raise CommandError(f"{path} holds no file to parse", exit_code=2)
        # Shown by the name the nightly gives it (bytes that are not UTF-8 written \\xNN), opened by its own.
        out += [DumpFile(Path(escape_name(str(path / rel))), path, rel) for rel in sorted(found)]
    return out


def print_parsed(paths: list[Path], *, as_json: bool, table: str | None, limit: int, summary: bool,
                 limits: ParseLimits = DEFAULT_LIMITS) -> int:
    """Parse and print each file (every file under a directory: ``dump_files``); returns how many
    failed. Raises ValueError for an unknown table. ``limits`` bound each parse (a file past one
    is failed, the others are still read).

    Streams: the batches of a dump are dropped as they come, and those of ``table`` are
    spooled to disk (``TableSpool``), so memory stays flat however big the file is."""
    if table is not None and table not in all_tables():
        raise ValueError(f"unknown table {table!r}; known: {', '.join(sorted(all_tables()))}")
    dumps = dump_files(paths)
    files = [d.path for d in dumps]
    overview = _overview_table(files) if summary and not as_json else None
    shared = Path(os.path.commonpath([f.parent for f in files])) if overview is not None else None
    failed = 0
    for dump in dumps:
        file = dump.path
        with contextlib.ExitStack() as stack:
            spool = TableSpool(Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dumpscope-parse-"))),
                               table, limit) if table else None
            try:
                with dump.open() as raw:
                    s = parse_streaming(raw, str(file), spool, limits)
            except (Refused, Unopened) as exc:  # as the nightly: failed, not read
                s = DumpSummary(DumpKind.UNKNOWN, failed=True, errors=[f"{file}: not read ({exc.reason})"])
            failed += s.status is Status.FAILED
            if as_json:
                _print_json(file, s, spool)
            elif overview is not None:
                overview.add_row(str(file.relative_to(shared)), s.kind.value, s.stage or "", s.program or "", s.status.value,
                                 str(len(s.metrics)), "; ".join(s.errors)[:120])
            else:
                _print_detail(file, s, spool)
    if overview is not None:
        from rich.console import Console

        Console(width=220).print(overview)
    return failed


class TableSpool:
    """The first ``limit`` rows (0: all) of one table of a dump, as they are parsed: one
    Arrow IPC file per batch in ``dir``, read back one batch at a time. The rows of a dump
    that fails are never read back (``iter_dump``: its batches are discarded)."""

    def __init__(self, dir: Path, table: str, limit: int = 0):
        self.dir, self.table, self.limit = dir, table, limit
        self.rows = 0
        self.files: list[Path] = []

    def add(self, frame: pl.DataFrame) -> None:
        if self.limit:
            frame = frame.head(self.limit - self.rows)
        if frame.height:
            path = self.dir / f"{len(self.files):06d}.arrow"
            frame.write_ipc(path)
            self.files.append(path)
            self.rows += frame.height

    def frames(self) -> Iterator[pl.DataFrame]:
        for path in self.files:
            yield pl.read_ipc(path)

    def discard(self) -> None:
        for path in self.files:
            path.unlink()
        self.files, self.rows = [], 0


def parse_streaming(raw: BinaryIO, name: str, spool: TableSpool | None, limits: ParseLimits = DEFAULT_LIMITS) -> DumpSummary:
    """Parse one dump holding none of its records: the batches of ``spool``'s table go to it,
    the others are dropped. Returns the summary."""
    summary = None
    for item in iter_dump(raw, name, limits=limits):
        if isinstance(item, DumpSummary):
            summary = item
        elif spool is not None and item.table == spool.table:
            spool.add(item.frame)
    assert summary is not None
    if summary.failed and spool is not None:
        spool.discard()
    return summary


def _overview_table(files: list[Path]):
    from rich.table import Table

    title = f"{len(files)} dumps under {os.path.commonpath([f.parent for f in files])}"
    return Table("path", "kind", "stage", "program", "status", "metrics", "errors", title=title, title_justify="left")


def _print_json(file: Path, s: DumpSummary, spool: TableSpool | None) -> None:
    out: dict[str, object] = {
        "path": str(file),
        "kind": s.kind.value,
        "stage": s.stage,
        "program": s.program,
        "status": s.status.value,
        "errors": s.errors,
        "metrics": {k: json_value(number(v)) for k, v in sorted(s.metrics.items())},
    }
    line = json.dumps(out, default=str, ensure_ascii=False)
    if spool is None:
        sys.stdout.write(line + "\n")
        return
    # The same text as json.dumps(out | {"table": {"name": ..., "rows": [...]}}), written a batch at a time.
    sys.stdout.write(f'{line[:-1]}, "table": {{"name": {json.dumps(spool.table, ensure_ascii=False)}, "rows": [')
    sep = ""
    for frame in spool.frames():
        for rows in frame.iter_slices(_JSON_ROWS):  # a batch as Python dicts would cost ~100x its Arrow size
            sys.stdout.write(sep + json.dumps(rows.to_dicts(), default=str, ensure_ascii=False)[1:-1])
            sep = ", "
    sys.stdout.write("]}}\n")


def _print_detail(file: Path, s: DumpSummary, spool: TableSpool | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{file}[/]")
    console.print(f"kind [cyan]{s.kind.value}[/]  stage [cyan]{s.stage}[/]  program [cyan]{s.program}[/]  status [bold]{s.status.value}[/]")
    for err in s.errors:
        console.print(f"error: {err}", style="red", markup=False, highlight=False)
    metrics = Table("metric", "value", title="metrics", title_justify="left")
    for k, v in sorted(s.metrics.items()):
        n = number(v)
        metrics.add_row(k, f"{n:,}" if isinstance(n, int) else f"{n:.6g}")
    console.print(metrics)
    if spool is None:
        return
    if not spool.rows:
        console.print(f"table {spool.table}: no rows in this dump")
        return
    # One table when it is short (the default --limit 20); else slices of _SHOWN_ROWS rows, one batch
    # read back at a time: rich's cost grows with the square of one table's rows (1,886 rows: 3 s).
    frames = spool.frames() if spool.rows > _SHOWN_ROWS else iter([pl.concat(list(spool.frames()))])
    pieces = (piece for frame in frames for piece in frame.iter_slices(_SHOWN_ROWS))
    first = 0
    with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
        for frame in pieces:
            if spool.rows > _SHOWN_ROWS:
                console.print(f"rows {first + 1:,}-{first + frame.height:,} of {spool.rows:,}", highlight=False)
            console.print(str(frame), markup=False, highlight=False)
            first += frame.height
