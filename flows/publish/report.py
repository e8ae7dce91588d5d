"""The night's summary (``transforms.trends.night_report``) of a run, read from the warehouse
and written next to it: ``<warehouse>.report.md``."""

from __future__ import annotations

from pathlib import Path

from flows.verdict import incidents as verdict
from flows.warehouse.store import connect_readonly
from transforms.trends.night_report import night_markdown
from transforms.trends.rules import Settings


def default_report_path(warehouse: Path) -> Path:
    return Path(warehouse).with_suffix(".report.md")


def night_report(warehouse: Path, run_id: str | None = None, settings: Settings | None = None) -> tuple[str, dict[str, int]]:
    """(Markdown, counts) of ``run_id`` (default: the latest run)."""
    settings = settings or Settings()
    con = connect_readonly(warehouse)
    try:
        if run_id is None:
            latest = verdict.latest_run(con)
            run_id, commit = latest if latest else (None, None)
        else:
            commit = verdict.run_commit(con, run_id)
        at = verdict.incidents_at(con, run_id) if run_id else None
    finally:
        con.close()
    if run_id is None:
        return night_markdown(None, None, None), {}
    text = night_markdown(run_id, commit, at, commit_url=settings.commit_url, compare_url=settings.compare_url)
    return text, verdict.counts(at)


def write_night_report(warehouse: Path, report_path: Path | None = None,
                       settings: Settings | None = None) -> tuple[str, dict[str, int]]:
    text, counts = night_report(warehouse, settings=settings)
    path = Path(report_path) if report_path else default_report_path(warehouse)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return text, counts
