"""The site shows a window of the history ([site] history_runs), not all of it.

A synthetic warehouse of 150 nightly runs (benchmarks/bench_site_year.py's generator at a
small size: 4 jobs, 70 series, steps, regressions, incidents; one series in 50 vanishes at
run 61) is built with history_runs = 30: only the window's runs get pages and chart
points, every older run and every series is still listed and reachable, and the build is
as strict as ever (mkdocs --strict checks every link and anchor).
"""

from __future__ import annotations

import csv
import functools
import http.server
import io
import json
import threading
from pathlib import Path

import duckdb
import polars as pl
import pytest

from tests.site_links import broken_links, chart_specs, ids_of, links_of, unlinked_incidents
from transforms.escape import slug
from transforms.site.data import run_anchor, run_file, series_anchor, series_file
from transforms.trends.rules import parse_settings

RUNS, WINDOW = 150, 30


@pytest.fixture(scope="module")
def year(tmp_path_factory) -> Path:
    from benchmarks.bench_site_year import build

    warehouse = tmp_path_factory.mktemp("history") / "w.duckdb"
    build(warehouse, runs=RUNS, jobs=4, per_job=35)
    return warehouse


@pytest.fixture(scope="module")
def data(year):
    from flows.publish.site import read_site_data

    return read_site_data(year, parse_settings(f"[site]\nhistory_runs = {WINDOW}\n"))


@pytest.fixture(scope="module")
def site(year, tmp_path_factory):
    from flows.publish.site import build_site

    return build_site(year, tmp_path_factory.mktemp("site") / "site", parse_settings(f"[site]\nhistory_runs = {WINDOW}\n"))


def _run_ids(data) -> list[str]:
    return data.runs.get_column("run_id").to_list()


def test_the_setting_is_parsed_and_checked():
    assert parse_settings("").site_history_runs == 90
    assert parse_settings("[site]\nhistory_runs = 0\n").site_history_runs == 0
    for bad in ("[site]\nhistory_runs = -1\n", "[site]\nhistory_runs = 'all'\n", "[site]\nhistory_runs = true\n",
                "[site]\nrecent = 3\n", "site = 3\n"):
        with pytest.raises(ValueError, match=r"\[site\] takes history_runs"):
            parse_settings(bad)
    # Not an input of the figures: changing it does not re-aggregate the warehouse.
    assert repr(parse_settings("[site]\nhistory_runs = 5\n")) == repr(parse_settings(""))


def test_only_the_window_is_read(data):
    runs = _run_ids(data)
    window = set(runs[-WINDOW:])
    assert len(runs) == RUNS and data.run_pages == window
    for name in ("trends", "dense", "events", "rollups", "diffs"):
        frame = getattr(data, name)
        assert frame.height and set(frame.get_column("run_id").unique().to_list()) <= window, name
    assert set(data.totals.get_column("run_id").unique().to_list()) == {runs[-1]}
    assert set(data.incidents_at) == window  # incidents_at(run) for the runs shown only
    # Change points only: a series and metric has its first and last run, and its changes.
    per_line = data.trends.group_by("series", "metric").len().get_column("len")
    assert per_line.min() >= 1 and per_line.max() <= WINDOW
    assert data.trends.height < 0.3 * data.series_pages.__len__() * WINDOW * 20
    # Incidents: open at the end, or opened or closed in the window; the rest only counted.
    inc = data.incidents
    assert inc.height and data.older_incidents > 0
    assert all(r["closed_run"] is None or r["closed_run"] in window or r["opened_run"] in window
               for r in inc.iter_rows(named=True))
    assert data.series_catalog.height == 140 and data.run_totals.height == RUNS


def _month(data, run_id: str) -> str:
    return data.runs.filter(pl.col("run_id") == run_id).get_column("started_at")[0].strftime("%Y-%m")


def test_only_the_window_has_run_pages_and_older_runs_are_archived(site, data):
    """A run before the window is a row of its month's archive page (its anchor, its query);
    the runs index lists the window's runs and links each month of the archive."""
    runs = _run_ids(data)
    built = {p.name for p in (site.out / "runs").glob("*.html")} - {"index.html"}
    assert built == {Path(run_file(r)).with_suffix(".html").name for r in runs[-WINDOW:]}
    older = runs[:-WINDOW]
    months = sorted({_month(data, r) for r in older})
    assert months == ["2025-01", "2025-02", "2025-03", "2025-04"]  # 150 daily runs from 2025-01-01, the last 30 shown
    assert sorted(p.name for p in (site.out / "archive").glob("*.html")) == [f"{m}.html" for m in months]
    for r in older:
        page = (site.out / "archive" / f"{_month(data, r)}.html").read_text()
        assert f'id="{run_anchor(r)}"' in page and f"incidents_at(&#39;{r}&#39;)" in page.replace("&#x27;", "&#39;")
    index = (site.out / "runs" / "index.html").read_text()
    assert "Older runs" in index and not any(f'id="{run_anchor(r)}"' in index for r in older)
    assert [m for m in months if f'href="../archive/{m}.html"' in index] == months


def test_every_series_has_a_page_or_a_row_links_lead_to(site, data):
    pages = {p.name for p in (site.out / "series").glob("*.html")} - {"index.html"}
    assert pages == {Path(series_file(s)).with_suffix(".html").name for s in data.series_pages}
    index = (site.out / "series" / "index.html").read_text()
    catalog = data.series_catalog.get_column("series").to_list()
    without = [s for s in catalog if s not in data.series_pages]
    assert without, "some series have no page (vanished before the window)"
    for s in without:
        assert f'id="{series_anchor(s)}"' in index
    assert "Not seen in the last 30 runs" in index
    # A link to a series or run without a page goes to its row (mkdocs --strict checked the anchor).
    assert data.series_link(without[0], "incidents") == f"../series/index.md#{series_anchor(without[0])}"
    old = _run_ids(data)[0]
    assert data.run_link(old, "incidents") == f"../archive/2025-01.md#{run_anchor(old)}"
    assert data.run_link(_run_ids(data)[-1], "") == run_file(_run_ids(data)[-1])


def _chart_points(page: Path) -> list[list[dict]]:
    return [list(csv.DictReader(io.StringIO(s["data"]["values"]))) for s in chart_specs(page).values()]


def test_charts_hold_the_window_only(site, data):
    first = data.window.get_column("started_at")[0].strftime("%Y-%m-%dT%H:%M")
    pages = [site.out / p for p in ("index.html", "memory.html", "fusion.html", "kernels.html", "onnx.html")]
    pages += sorted((site.out / "series").glob("*.html"))[:20]
    counted = 0
    for page in pages:
        for points in _chart_points(page):
            if points and "t" in points[0]:
                counted += 1
                # A series chart's ends (b: "s", "n") take their runs from the status data (charts.js).
                assert min(p["t"] for p in points if not p.get("b")) >= first, page
                lines = {(p.get("p"), p["k"]) for p in points}  # a line per panel (program) and key
                assert len(points) <= WINDOW * len(lines), page
    assert counted >= 20
    incidents = {p.name for p in (site.out / "incidents").glob("i-*.html")}
    assert len(incidents) == data.incidents.height
    assert f"{data.older_incidents} incidents opened and closed before run" in (site.out / "incidents" / "index.html").read_text()


def test_every_run_everywhere_is_the_whole_history(year, tmp_path):
    """history_runs = 0: every run has its page, as before the setting existed."""
    from flows.publish.site import read_site_data

    d = read_site_data(year, parse_settings("[site]\nhistory_runs = 0\n"))
    assert len(d.run_pages) == RUNS and d.older_incidents == 0 and len(d.incidents_at) == RUNS
    assert d.series_pages == frozenset(d.series_catalog.get_column("series").to_list())  # each first seen in the window


# ------------------------------------------------------------------ the archive: nothing is lost, every link resolves

def incident_anchor(incident_id: str) -> str:
    """The id of an archived incident's row (as docs/site.md says it)."""
    return slug("incident", incident_id)


def _incidents(year: Path) -> list[dict]:
    """Every incident the warehouse holds, with the month its opened run started in (read here,
    not through the site's code)."""
    with duckdb.connect(str(year), read_only=True) as con:
        rows = con.execute("""SELECT i.incident_id, i.opened_run, i.closed_run, i.closed_how, i.series,
                                     strftime(r.started_at, '%Y-%m') AS month
                              FROM incidents i JOIN runs r ON r.run_id = i.opened_run ORDER BY i.incident_id""").fetchall()
    return [dict(zip(("incident_id", "opened_run", "closed_run", "closed_how", "series", "month"), r)) for r in rows]


def test_every_incident_keeps_a_page_or_an_anchor(site, data, year):
    """Nothing closed before the window is lost: each incident of the warehouse has a page
    (open, or opened or closed in the window) or a row with its anchor on the archive page of
    the month its run opened in, never both."""
    window = set(_run_ids(data)[-WINDOW:])
    incidents = _incidents(year)
    archived = [i for i in incidents if i["closed_run"] is not None and i["opened_run"] not in window
                and i["closed_run"] not in window]
    assert len(archived) == 29 and data.older_incidents == 29  # of the 43 the synthesis makes
    anchors = {m: ids_of(site.out / "archive" / f"{m}.html") for m in {i["month"] for i in archived}}
    archived_ids = {i["incident_id"] for i in archived}
    for i in incidents:
        page = site.out / "incidents" / f"{slug(i['incident_id'])}.html"
        if i["incident_id"] in archived_ids:
            assert not page.exists() and incident_anchor(i["incident_id"]) in anchors[i["month"]], i
        else:
            assert page.exists(), i
    archive = (site.out / "archive" / f"{archived[0]['month']}.html").read_text()
    assert archived[0]["closed_how"] in archive and archived[0]["incident_id"] in archive


def test_pages_that_name_an_archived_incident_link_to_its_anchor(site, data, year):
    """Its series page (when the series has one) and the accept log lead to the row."""
    window = set(_run_ids(data)[-WINDOW:])
    archived = {i["incident_id"]: i for i in _incidents(year) if i["closed_run"] is not None
                and i["opened_run"] not in window and i["closed_run"] not in window}

    def href(i: dict, here: str) -> str:
        return f"{here}archive/{i['month']}.html#{incident_anchor(i['incident_id'])}"

    on_paged = [i for i in archived.values() if i["series"][0] in data.series_pages]
    assert on_paged
    for i in on_paged:
        assert href(i, "../") in links_of(site.out / series_file(i["series"][0]).replace(".md", ".html")), i
    accepted = [i for i in archived.values() if i["closed_how"] == "accepted"]
    assert accepted
    accepts = links_of(site.out / "accepts.html")
    assert [i["incident_id"] for i in accepted if href(i, "") in accepts] == [i["incident_id"] for i in accepted]
    index = links_of(site.out / "incidents" / "index.html")
    assert {m for m in {i["month"] for i in archived.values()} if f"../archive/{m}.html" in index} == \
        {i["month"] for i in archived.values()}


def test_the_old_page_of_an_archived_run_or_incident_leads_to_its_row(site, data, year):
    """archive/moved.json (what the 404 page's script reads) maps the page each archived run and
    incident had to its row; a 404 page is built and loads the script."""
    moved = json.loads((site.out / "archive" / "moved.json").read_text())
    older = _run_ids(data)[:-WINDOW]
    window = set(_run_ids(data)[-WINDOW:])
    archived = [i["incident_id"] for i in _incidents(year) if i["closed_run"] is not None
                and i["opened_run"] not in window and i["closed_run"] not in window]
    assert len(archived) == 29 and set(moved) == ({f"runs/{slug(r)}.html" for r in older}
                                                  | {f"incidents/{slug(i)}.html" for i in archived})
    for old, row in moved.items():
        path, _, anchor = row.partition("#")
        assert path.startswith("archive/") and anchor in ids_of(site.out / path), old
        assert not (site.out / old).exists()
    page = (site.out / "404.html").read_text()
    assert 'id="ds-moved"' in page and "assets/moved.js" in page


def test_every_internal_link_and_anchor_resolves(site, year):
    """Every link of every page (theme, raw HTML tables, charts' data included) names a file of
    the site and, with a fragment, an id on it; every page that names an incident (not its
    own page or row) links to its page or its row."""
    assert broken_links(site.out) == []
    ids = {i["incident_id"] for i in _incidents(year)}
    assert unlinked_incidents(site.out, ids, lambda i: f"incidents/{slug(i)}.html", incident_anchor) == []
    pages = list(site.out.rglob("*.html"))  # what was checked: archive pages too
    assert len(pages) > 100 and (site.out / "archive" / "2025-01.html") in pages


class _WithNotFoundPage(http.server.SimpleHTTPRequestHandler):
    """A static server as sites are hosted (GitHub Pages, nginx ``error_page``): a missing page
    answers 404 with the site's ``404.html``."""

    def log_message(self, format, *args) -> None:
        pass

    def send_error(self, code, message=None, explain=None):
        if code != 404:
            return super().send_error(code, message, explain)
        body = (Path(self.directory) / "404.html").read_bytes()
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def test_a_link_to_an_archived_incidents_old_page_lands_on_its_row(site, data, year, browser):
    """In Chromium: the 404 page's script (assets/moved.js) takes the reader from an archived
    incident's or run's old page to its row on the archive page."""
    window = set(_run_ids(data)[-WINDOW:])
    incident = next(i for i in _incidents(year) if i["closed_run"] is not None and i["opened_run"] not in window
                    and i["closed_run"] not in window)
    run = _run_ids(data)[0]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_WithNotFoundPage, directory=str(site.out)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    context = browser._new_context()  # a tab of its own: the page navigates away by itself
    try:
        page = context.new_page()
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        for old, row in ((f"incidents/{slug(incident['incident_id'])}.html",
                          f"archive/{incident['month']}.html#{incident_anchor(incident['incident_id'])}"),
                         (f"runs/{slug(run)}.html", f"archive/2025-01.html#{run_anchor(run)}")):
            page.goto(base + old)
            page.wait_for_url(base + row, timeout=10_000)
            assert page.locator(f"#{row.partition('#')[2]}").count() == 1
        page.goto(base + "incidents/i-00000000-0000000000000000.html")  # never was: the 404 page stays
        page.wait_for_timeout(500)
        assert page.url == base + "incidents/i-00000000-0000000000000000.html" and page.locator("#ds-moved").count() == 1
    finally:
        context.close()
        server.shutdown()
        server.server_close()


def test_the_windows_incidents_at_are_the_macros(data, year):
    """The site reads incidents_at for every run of its window in one query: the same frames,
    row for row, as the incidents_at(run) macro gives run by run (flows.verdict.incident_reader)."""
    from polars.testing import assert_frame_equal

    from flows.verdict.incident_reader import incidents_at

    with duckdb.connect(str(year), read_only=True) as con:
        for run in _run_ids(data)[-WINDOW:]:
            assert_frame_equal(data.incidents_at[run], incidents_at(con, run))
    assert sum(f.height for f in data.incidents_at.values()) > WINDOW
