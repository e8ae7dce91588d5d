"""Names multiply nothing (issue 43, item 5): a TORCH_TRACE log of many compiled functions
(the first compilation_metrics record of a real log, once per function: ``bench_names``)
makes at most ``[site] max_series_pages`` series pages, tables of at most ``MAX_TABLE_ROWS``
programs and an index of at most ``MAX_INDEX_ROWS`` rows a part; every link still resolves.
One log of 20,000 functions made 20,044 pages (686 MB) in 294 s (benchmarks/bench_names.py
measures that night)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.bench_names import LOG_NAME, many_functions_log
from tests.site_links import broken_links
from transforms.site import data as site_data

FUNCTIONS = 300


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> Path:
    from flows.nightly import night_in_process

    where = tmp_path_factory.mktemp("names")
    job = where / "bucket" / "2026-11-29" / "torch-compile"
    job.mkdir(parents=True)
    many_functions_log(job / LOG_NAME, FUNCTIONS)
    summary = night_in_process(bucket=str(where / "bucket"), warehouse=where / "w.duckdb", workers=1)
    assert (summary.parsed, summary.failed) == (1, 0)
    return where / "w.duckdb"


def _site(warehouse: Path, out: Path, max_pages: int):
    from flows.publish.site import build_site
    from transforms.trends.rules import parse_settings

    return build_site(warehouse, out, parse_settings(f"[site]\nmax_series_pages = {max_pages}\n"))


def _series_pages(site: Path) -> list[Path]:
    return [p for p in (site / "series").glob("*.html") if p.name != "index.html"]


def test_series_pages_stop_at_the_cap_and_the_rest_are_rows_of_the_index(night, tmp_path, monkeypatch):
    from transforms.site import sections

    monkeypatch.setattr(sections, "MAX_TABLE_ROWS", 100)
    site = tmp_path / "site"
    _site(night, site, 20)
    assert len(_series_pages(site)) == 20
    index = (site / "series" / "index.html").read_text()
    assert f"{FUNCTIONS - 20} more series changed in the last 1 runs than the site gives a page" in index
    assert len(re.findall(r'<span id="series-', index)) == FUNCTIONS - 20  # a row and an anchor each
    compile_page = (site / "compile.html").read_text()
    assert f"{FUNCTIONS - 100} more programs are not listed" in compile_page
    assert compile_page.count("more programs are not listed") == 5  # the programs table and each section's
    assert broken_links(site) == []


def test_the_index_lists_at_most_its_rows_and_links_to_the_others_lead_to_it(night, tmp_path, monkeypatch):
    monkeypatch.setattr(site_data, "MAX_INDEX_ROWS", 50)
    site = tmp_path / "site"
    _site(night, site, 20)
    index = (site / "series" / "index.html").read_text()
    assert len(re.findall(r'<span id="series-', index)) == 50
    assert f"The first 50 are listed; {FUNCTIONS - 20 - 50} more are not" in index
    assert broken_links(site) == []


def test_without_many_names_nothing_is_capped(night, tmp_path):
    site = tmp_path / "site"
    _site(night, site, 1000)
    assert len(_series_pages(site)) == FUNCTIONS
    assert "more series changed" not in (site / "series" / "index.html").read_text()
