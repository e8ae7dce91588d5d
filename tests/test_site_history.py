"""The site shows a window of the history ([site] history_runs), not all of it.

A synthetic warehouse of 150 nightly runs (benchmarks/bench_site_year.py's generator at a
small size: 4 jobs, 70 series, steps, regressions, incidents; one series in 50 vanishes at
run 61) is built with history_runs = 30: only the window's runs get pages and chart
points, every older run and every series is still listed and reachable, and the build is
as strict as ever (mkdocs --strict checks every link and anchor).
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

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


def test_only_the_window_has_run_pages_and_older_runs_are_listed(site, data):
    runs = _run_ids(data)
    built = {p.name for p in (site.out / "runs").glob("*.html")} - {"index.html"}
    assert built == {Path(run_file(r)).with_suffix(".html").name for r in runs[-WINDOW:]}
    index = (site.out / "runs" / "index.html").read_text()
    for r in runs[:-WINDOW]:
        assert f'id="{run_anchor(r)}"' in index and f"incidents_at(&#39;{r}&#39;)" in index.replace("&#x27;", "&#39;")
    assert "Older runs" in index


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
    assert data.run_link(old, "incidents") == f"../runs/index.md#{run_anchor(old)}"
    assert data.run_link(_run_ids(data)[-1], "") == run_file(_run_ids(data)[-1])


def _chart_points(page: Path) -> list[list[dict]]:
    specs = re.findall(r'<script type="application/json" class="ds-spec"[^>]*>(.*?)</script>', page.read_text(), re.S)
    return [list(csv.DictReader(io.StringIO(json.loads(s)["data"]["values"]))) for s in specs]


def test_charts_hold_the_window_only(site, data):
    first = data.window.get_column("started_at")[0].strftime("%Y-%m-%dT%H:%M")
    pages = [site.out / p for p in ("index.html", "memory.html", "fusion.html", "kernels.html", "onnx.html")]
    pages += sorted((site.out / "series").glob("*.html"))[:20]
    counted = 0
    for page in pages:
        for points in _chart_points(page):
            if points and "t" in points[0]:
                counted += 1
                assert min(p["t"] for p in points) >= first, page
                lines = {(p.get("p"), p["k"]) for p in points}  # a line per panel (program) and key
                assert len(points) <= WINDOW * len(lines), page
    assert counted >= 20
    incidents = {p.name for p in (site.out / "incidents").glob("i-*.html")}
    assert len(incidents) == data.incidents.height
    assert f"{data.older_incidents} older incident" in (site.out / "incidents" / "index.html").read_text()


def test_every_run_everywhere_is_the_whole_history(year, tmp_path):
    """history_runs = 0: every run has its page, as before the setting existed."""
    from flows.publish.site import read_site_data

    d = read_site_data(year, parse_settings("[site]\nhistory_runs = 0\n"))
    assert len(d.run_pages) == RUNS and d.older_incidents == 0 and len(d.incidents_at) == RUNS
    assert d.series_pages == frozenset(d.series_catalog.get_column("series").to_list())  # each first seen in the window
