"""The archive of the report site: what is older than its window, one compact page a month (pure).

The site's window is the last ``[site] history_runs`` runs (``transforms.site.data``). The runs
before it and the incidents closed before it have no page of their own: each is a row of
the archive page of the calendar month its run started in (``archive/YYYY-MM.md``; an
incident goes with the run it opened in), with an anchor (``data.run_anchor``,
``data.incident_anchor``) that every link to it leads to (``SiteData.run_link``,
``SiteData.incident_link``). A run stays on the same month's page for good, so an archive
link never moves; a month gains its page when its first run leaves the window, and the
site grows by one such page a month, whatever the length of the history.

``moved`` maps the URL of each page a run or an incident had before it was archived to its
row, for the site's 404 page (``site_templates/overrides/404.html``, ``assets/moved.js``):
a link to an old incident page still lands on its row.
"""

from __future__ import annotations

import polars as pl

from transforms.site.data import (SiteData, archive_file, archive_link, commit_link, html_href, incident_anchor,
                                  incident_file, run_anchor, run_file)


def months(d: SiteData) -> list[dict]:
    """Each month with an archive page, newest first: its runs and its incidents (counts)
    and the link from the top of the site."""
    runs: dict[str, int] = {}
    for month in d.archive_month_of.values():
        runs[month] = runs.get(month, 0) + 1
    incidents: dict[str, int] = {}
    for run in d.archived_ids.values():
        month = d.archive_month_of.get(run)
        if month is not None:
            incidents[month] = incidents.get(month, 0) + 1
    return [{"month": m, "runs": runs[m], "incidents": incidents.get(m, 0), "file": archive_file(m)}
            for m in sorted(runs, reverse=True)]


def month_links(d: SiteData, here: str) -> list[dict]:
    """``months`` with a link to each page from a page in directory ``here``."""
    return [{**m, "link": archive_link(m["month"], here)} for m in months(d)]


def archive_pages(d: SiteData, run_rows: pl.DataFrame):
    """(month, context) of each archive page. ``run_rows``: every run with the runs index's
    columns (``pages.run_rows``): those before the window are this archive's runs."""
    by_month: dict[str, list[dict]] = {}
    for r in run_rows.iter_rows(named=True):
        month = d.archive_month_of.get(r["run_id"])
        if month is not None:
            by_month.setdefault(month, []).append(
                {**r, "commit": commit_link(d, r["commit"]) if r["commit"] else "", "anchor": run_anchor(r["run_id"])})
    incidents: dict[str, list[dict]] = {}
    if d.archived_incidents is not None:
        for i in d.archived_incidents.iter_rows(named=True):
            month = d.archive_month_of.get(i["opened_run"])
            if month is None:  # its run is gone from the warehouse: nothing to hang it on
                continue
            incidents.setdefault(month, []).append({
                **i, "anchor": incident_anchor(i["incident_id"]),
                "series_links": [{"name": s, "link": d.series_link(s, "archive")} for s in (i["series"] or [])],
                "metrics": ", ".join(i["metrics"] or []),
                "opened_link": d.known_run(i["opened_run"], "archive"),
                "closed_link": d.known_run(i["closed_run"], "archive") if i["closed_run"] else None,
                "on_top": [{"id": o, "link": d.incident_link(o, "archive")} for o in (i["stacked_on"] or [])],
            })
    for month in sorted(by_month, reverse=True):
        yield month, {"month": month, "runs": by_month[month], "incidents": incidents.get(month, []),
                      "history_runs": d.history_runs}


def moved(d: SiteData) -> dict[str, str]:
    """The URL (from the site's root) of the page each archived run and incident had in the
    window, mapped to its row on its archive page: what the 404 page reads."""
    rows = {html_href(run_file(r)): html_href(d.run_link(r)) for r in d.archive_month_of}
    rows |= {html_href(incident_file(i)): html_href(link) for i in d.archived_ids
             if (link := d.incident_link(i)) is not None}
    return rows
