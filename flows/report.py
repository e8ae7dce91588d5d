"""The regression summary of the latest run: read from the warehouse, written to a file."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from flows.aggregate import frame_of
from flows.warehouse.store import connect_readonly
from transforms.trends.night_report import latest_run, regression_markdown


def default_report_path(warehouse: Path) -> Path:
    return Path(warehouse).with_suffix(".report.md")


def regression_report(warehouse: Path, run_id: str | None = None) -> tuple[str, int]:
    """(Markdown, regressions in that run) for ``run_id`` (default: the latest run)."""
    con = connect_readonly(warehouse)
    try:
        frames = {t: frame_of(con, f"SELECT * FROM {t}") for t in ("regressions", "diffs", "series_events", "run_rollups")}
        runs = frame_of(con, 'SELECT run_id, started_at, "commit" FROM runs')
    finally:
        con.close()
    run_id = run_id or latest_run(frames["run_rollups"])
    text = regression_markdown(run_id, frames["regressions"], frames["diffs"], frames["series_events"],
                               frames["run_rollups"], runs)
    count = frames["regressions"].filter(pl.col("run_id") == run_id).height if run_id else 0
    return text, count


def write_regression_report(warehouse: Path, report_path: Path | None = None) -> tuple[str, int]:
    text, count = regression_report(warehouse)
    path = Path(report_path) if report_path else default_report_path(warehouse)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return text, count
