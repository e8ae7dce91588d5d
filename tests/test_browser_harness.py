"""The browser harness (tests/browser.py) passes a good page and catches bad ones.

Pages are built here, offline: vega, vega-lite and vega-embed come from vl-convert's bundle,
saved as a local file and loaded as an ES module, the way the report site ships it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import altair as alt
import pytest
import vl_convert as vlc

from tests import browser as harness
from tests.browser import check_links, serve_directory

ARTIFACTS = Path(__file__).parent / "artifacts"
# The Vega-Lite that Altair writes specs for (its schema "v6.4.1" -> "v6.4"), not vl-convert's latest.
VL_VERSION = alt.SCHEMA_VERSION.rsplit(".", 1)[0]

BARS = alt.Chart(alt.Data(values=[{"op": "fusion", "n": 3}, {"op": "dot", "n": 5}, {"op": "copy", "n": 2}]))
GOOD_SPEC = BARS.mark_bar().encode(x="op:N", y="n:Q").to_dict()
EMPTY_SPEC = alt.Chart(alt.Data(values=[])).mark_point().encode(x="a:Q", y="b:Q").to_dict()
# Valid JSON, but Vega-Lite cannot compile it: vegaEmbed rejects and draws nothing.
BAD_SPEC = {"$schema": GOOD_SPEC["$schema"], "mark": "nosuchmark", "data": {"values": [{"a": 1}]}}


def chart_html(div_id: str, spec: dict, *, catch: bool = True) -> str:
    # The container carries the class vegaEmbed would add, so a chart that fails still counts.
    tail = ".catch(console.error)" if catch else ""
    return (
        f'<div class="vega-embed" id="{div_id}"></div>\n'
        f'<script type="module">vegaEmbed("#{div_id}", {json.dumps(spec)}){tail};</script>'
    )


def page(title: str, body: str, head: str = "") -> str:
    return (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{title}</title>'
        f'<script type="module" src="assets/vega.js"></script>{head}</head>\n<body>\n{body}\n</body></html>\n'
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("site")
    (root / "assets").mkdir()
    (root / "assets" / "vega.js").write_text(vlc.javascript_bundle(vl_version=VL_VERSION))
    good = json.dumps(GOOD_SPEC)
    pages = {
        "index.html": page(
            "Good chart",
            "<h1>Ops</h1>\n" + chart_html("ops", GOOD_SPEC)
            + '\n<a href="other.html">other</a> <a href="other.html#top">top</a> <a href="#ops">here</a>'
            + ' <a href="https://example.invalid/x">external</a> <a href="mailto:a@example.invalid">mail</a>',
            # An external stylesheet (like Google Fonts) that cannot load here: not the site's error.
            head='<link rel="stylesheet" href="https://fonts.example.invalid/css?family=Roboto">',
        ),
        "other.html": page("Other", '<p id="top">no chart</p><a href="index.html">home</a><a href="gone/">gone</a>'),
        "broken_links.html": page("Links", '<a href="index.html">ok</a> <a href="missing.html">missing</a>'),
        "js_error.html": page(
            "JS error",
            chart_html("ops", GOOD_SPEC) + '\n<script>undefinedFunction();</script>\n<script src="assets/missing.js"></script>',
        ),
        "bad_spec.html": page("Bad spec", chart_html("bad", BAD_SPEC)),
        "bad_spec_uncaught.html": page("Bad spec, no catch", chart_html("bad", BAD_SPEC, catch=False)),
        "empty.html": page("Empty chart", chart_html("empty", EMPTY_SPEC)),
        "canvas.html": page(
            "Canvas",
            f'<div id="c"></div><script type="module">vegaEmbed("#c", {good}, {{renderer: "canvas"}});</script>',
        ),
        # Drawn well after `load`: the harness must wait for it.
        "late.html": page(
            "Late chart",
            '<div class="vega-embed" id="c"></div><script type="module">'
            f'setTimeout(() => vegaEmbed("#c", {good}), 400);</script>',
        ),
    }
    for name, html in pages.items():
        (root / name).write_text(html)
    return root


@pytest.fixture(scope="module")
def base_url(site) -> str:
    with serve_directory(site) as url:
        yield url


def test_chart_renders_offline_without_errors(browser, base_url):
    shot = ARTIFACTS / "harness_chart.png"
    shot.unlink(missing_ok=True)
    report = browser.open_page(base_url + "index.html", screenshot=shot)
    assert report.console_errors == []
    assert report.title == "Good chart"
    assert (report.charts, report.chart_marks, report.svg_marks, report.undrawn_charts) == (1, [3], 3, 0)
    assert base_url + "other.html" in report.links and "https://example.invalid/x" in report.links
    assert shot.stat().st_size > 5_000  # a picture with a chart in it, not an empty page


def test_module_function_uses_the_shared_browser(browser, base_url):
    report = harness.open_page(base_url + "empty.html")
    assert harness.get_browser() is browser
    # Axes draw, but there is no data mark: the harness sees a chart that shows nothing, and Vega's
    # warning of the empty data's infinite extent is a finding (the site never draws such a layer).
    assert (report.charts, report.chart_marks, report.undrawn_charts) == (1, [0], 0)
    assert report.console_errors and all("console warning: WARN Infinite extent" in e for e in report.console_errors)


def test_waits_for_late_charts_and_sees_canvas_charts(browser, base_url):
    late = browser.open_page(base_url + "late.html")
    assert (late.chart_marks, late.console_errors) == ([3], []) and late.seconds >= 0.4
    canvas = browser.open_page(base_url + "canvas.html", isolated=True)
    # Canvas marks are pixels, not elements: counted as a non-blank canvas, not as marks.
    assert (canvas.charts, canvas.canvas_nonblank, canvas.chart_marks, canvas.console_errors) == (1, 1, [0], [])


def test_js_errors_and_missing_local_files_are_reported(browser, base_url):
    report = browser.open_page(base_url + "js_error.html")
    errors = "\n".join(report.console_errors)
    assert len(report.console_errors) == 2, errors
    assert "page error: undefinedFunction is not defined" in errors
    assert f"HTTP 404: GET {base_url}assets/missing.js" in errors
    assert report.chart_marks == [3]  # the error elsewhere did not stop the chart


@pytest.mark.parametrize("name", ["bad_spec.html", "bad_spec_uncaught.html"])
def test_a_spec_that_fails_draws_nothing_and_reports_an_error(browser, base_url, name):
    report = browser.open_page(base_url + name, timeout=8)
    assert (report.charts, report.chart_marks, report.undrawn_charts) == (1, [0], 1)
    assert report.console_errors and "filled" in report.console_errors[0], report.console_errors
    assert report.seconds < 4  # an error ends the wait; it does not sit out the timeout


def test_check_links_reports_broken_same_origin_links(browser, base_url):
    assert check_links(base_url, ["index.html", "other.html"]) == [f"{base_url}other.html -> gone/: HTTP 404"]
    assert check_links(base_url, ["broken_links.html"]) == [f"{base_url}broken_links.html -> missing.html: HTTP 404"]
    assert check_links(base_url, ["no_such_page.html"]) == [f"{base_url}no_such_page.html: HTTP 404"]
    # From what the browser saw, and following links from page to page.
    report = browser.open_page(base_url + "index.html")
    assert check_links(base_url, [report]) == []
    assert check_links(base_url, [report], crawl=True) == [f"{base_url}other.html -> gone/: HTTP 404"]


def test_serve_directory_is_quiet_and_stops(tmp_path, capfd):
    (tmp_path / "a.txt").write_text("hello")
    with serve_directory(tmp_path) as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        assert urllib.request.urlopen(url + "a.txt", timeout=5).read() == b"hello"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "nope", timeout=5)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "a.txt", timeout=5)


def test_missing_chromium_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(harness, "find_chromium", lambda: None)
    with pytest.raises(RuntimeError, match="make browser"):
        harness.Browser()

