"""``dumpscope aggregate``: recompute trends, regressions, events and diffs (after editing the
settings), as the warehouse's one writer, within the memory limit."""

from __future__ import annotations

from pathlib import Path

import typer

from flows.commands import preflight
from flows.verdict import aggregate as verdict_aggregate


def main(*, warehouse: Path, settings: Path | None, wait: bool, memory_limit: str | None) -> None:
    conf, budget = preflight.settings_and_budget(settings, memory_limit)
    with preflight.writer(warehouse, wait, budget) as con:
        result = verdict_aggregate.aggregate(con, conf, budget=budget)
    if result.from_run is None:
        typer.echo("derived tables are up to date")
    for table, n in result.rows.items():
        typer.echo(f"{table}: {n} rows")
    typer.echo("seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in result.seconds.items()))
