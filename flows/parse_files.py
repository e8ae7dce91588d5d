"""``dumpscope parse``: parse dump files on the spot and print what each holds.

Imports neither Prefect nor DuckDB, so the command answers in a fraction of a second.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

from transforms.parse import DEFAULT_LIMITS, ParseLimits, parse_dump
from transforms.parsers.formats import all_tables


def number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def json_value(value: object) -> object:
    """A value JSON can carry: non-finite floats become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def print_parsed(files: list[Path], *, as_json: bool, table: str | None, limit: int, summary: bool,
                 limits: ParseLimits = DEFAULT_LIMITS) -> int:
    """Parse and print each file; returns how many failed. Raises ValueError for an unknown table.
    ``limits`` bound each parse (a file past one is failed, the others are still read)."""
    if table is not None and table not in all_tables():
        raise ValueError(f"unknown table {table!r}; known: {', '.join(sorted(all_tables()))}")
    overview = _overview_table(files) if summary and not as_json else None
    shared = Path(os.path.commonpath([f.parent for f in files])) if overview is not None else None
    failed = 0
    for file in files:
        with file.open("rb") as raw:
            parsed = parse_dump(raw, str(file), limits=limits)
        failed += parsed.status == "failed"
        frame = parsed.tables.get(table) if table else None
        if frame is not None and limit:
            frame = frame.head(limit)
        if as_json:
            _print_json(file, parsed.summary, table, frame)
        elif overview is not None:
            s = parsed.summary
            overview.add_row(str(file.relative_to(shared)), s.kind.value, s.stage or "", s.program or "", s.status.value,
                             str(len(s.metrics)), "; ".join(s.errors)[:120])
        else:
            _print_detail(file, parsed.summary, table, frame, limit)
    if overview is not None:
        from rich.console import Console

        Console(width=220).print(overview)
    return failed


def _overview_table(files: list[Path]):
    from rich.table import Table

    title = f"{len(files)} dumps under {os.path.commonpath([f.parent for f in files])}"
    return Table("path", "kind", "stage", "program", "status", "metrics", "errors", title=title, title_justify="left")


def _print_json(file: Path, s, table: str | None, frame) -> None:
    out: dict[str, object] = {
        "path": str(file),
        "kind": s.kind.value,
        "stage": s.stage,
        "program": s.program,
        "status": s.status.value,
        "errors": s.errors,
        "metrics": {k: json_value(number(v)) for k, v in sorted(s.metrics.items())},
    }
    if table:
        out["table"] = {"name": table, "rows": frame.to_dicts() if frame is not None else []}
    json.dump(out, sys.stdout, default=str, ensure_ascii=False)
    sys.stdout.write("\n")


def _print_detail(file: Path, s, table: str | None, frame, limit: int) -> None:
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
    if table:
        if frame is None:
            console.print(f"table {table}: no rows in this dump")
        else:
            import polars as pl

            with pl.Config(tbl_rows=limit or -1, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
                console.print(str(frame), markup=False, highlight=False)
