"""The night's summary (``transforms.trends.night_report``) of a run, read from the warehouse:
in Markdown, written next to it (``<warehouse>.report.md``), and in a few lines of plain text
for the person who ran ``dumpscope run`` (``terminal_summary``)."""

from __future__ import annotations

from pathlib import Path

from flows.verdict import incident_reader
from flows.warehouse.store import connect_readonly
from transforms.trends.night_report import night_brief, night_markdown
from transforms.trends.rules import Settings


def default_report_path(warehouse: Path) -> Path:
    return Path(warehouse).with_suffix(".report.md")


def _verdict(warehouse: Path, run_id: str | None) -> tuple[str | None, str | None, object]:
    """(run id, its commit, its ``incidents_at`` rows) of ``run_id`` (default: the latest run;
    (None, None, None) when there is none)."""
    con = connect_readonly(warehouse)
    try:
        if run_id is None:
            latest = incident_reader.latest_run(con)
            run_id, commit = latest if latest else (None, None)
        else:
            commit = incident_reader.run_commit(con, run_id)
        return run_id, commit, incident_reader.incidents_at(con, run_id) if run_id else None
    finally:
        con.close()


def night_report(warehouse: Path, run_id: str | None = None, settings: Settings | None = None) -> tuple[str, dict[str, int]]:
    """(Markdown, counts) of ``run_id`` (default: the latest run)."""
    settings = settings or Settings()
    run_id, commit, at = _verdict(warehouse, run_id)
    if run_id is None:
        return night_markdown(None, None, None), {}
    text = night_markdown(run_id, commit, at, commit_url=settings.commit_url, compare_url=settings.compare_url,
                          site_url=settings.site_url)
    return text, incident_reader.counts(at)


def terminal_summary(warehouse: Path, limit: int = 5, site_url: str | None = None) -> list[str]:
    """The latest run's verdict and its new incidents, as plain-text lines (``night_brief``), with
    their pages on the site at ``site_url`` (``[site] url``) when given."""
    return night_brief(*_verdict(warehouse, None), limit=limit, site_url=site_url)


def write_night_report(warehouse: Path, report_path: Path | None = None,
                       settings: Settings | None = None) -> tuple[str, dict[str, int]]:
    text, counts = night_report(warehouse, settings=settings)
    path = Path(report_path) if report_path else default_report_path(warehouse)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return text, counts
