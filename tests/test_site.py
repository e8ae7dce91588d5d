"""The report site, built from the sample bucket's warehouse and checked in headless Chromium."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest

from tests.browser import check_links, open_page, serve_directory
from transforms.site.data import series_file

ARTIFACTS = Path(__file__).parent / "artifacts"
SERIES = series_file("jax-pmap/jit__fun/xla_buffer_assignment/buffer_assignment").replace(".md", ".html")
# The compile view of the torch-trace job's program (transforms/site/compile_view.py).
COMPILE_VIEW = "compiles/torch-trace-forward-at-dumpscope-model-py-19-torch-trace-tra-e13a9e8c38b9e9c9.html"
CSP = ('<meta http-equiv="Content-Security-Policy" content="default-src \'self\'; script-src \'self\'; '
       "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
       "worker-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'\">")
PAGES = {  # one page of each kind -> charts it must draw
    # kernels: no custom calls chart (all 0 on CPU), nor one of collectives after optimizations (jit__fun's one
    # all-reduce in every run: no panel moved); onnx: no accuracy chart (every max_abs_diff held its value)
    "index.html": 1, "memory.html": 5, "fusion.html": 3, "kernels.html": 5, "compile.html": 3, "onnx.html": 1, "diff.html": 0,
    "runs/index.html": 0, "runs/2026-11-19.html": 0, "series/index.html": 0, SERIES: 1, "accepts.html": 0,
    "query.html": 0, "metrics.html": 0, "trends.html": 0, COMPILE_VIEW: 0,
}


@pytest.fixture(scope="module")
def site(sample_site):
    return sample_site


def test_every_page_is_built(site):
    assert (site.pages, site.charts) == (71, 44)  # 44 + 24 incident pages and their index + docs/site.md, the ranks page (issue 46)
    built = {p.relative_to(site.out).as_posix() for p in site.out.rglob("*.html")}
    assert set(PAGES) <= built
    assert len([p for p in built if p.startswith("series/")]) == 27  # 26 series and their index
    assert len([p for p in built if p.startswith("runs/")]) == 5


def test_nothing_is_fetched_from_the_internet(site):
    for page in site.out.rglob("*.html"):
        html = page.read_text()
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html, page
        for src in re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', html):
            assert not src.startswith(("http:", "https:", "//")), (page, src)
    assert (site.out / "assets" / "vega-bundle.js").stat().st_size > 500_000


def test_every_page_has_the_csp_and_no_inline_script_or_handler(site):
    for page in site.out.rglob("*.html"):
        text = page.read_text()
        head = text[: text.index("<script")]
        assert CSP in head, page  # before the first script
        for tag in re.findall(r"<script\b[^>]*>", text):
            assert "src=" in tag or 'type="application/json"' in tag, (page, tag)
        assert not re.search(r"<[^>]+\son[a-z]+\s*=", text), page
        assert "javascript:" not in text, page


def test_pages_say_something_without_javascript(site):
    overview = html.unescape((site.out / "index.html").read_text())
    assert "New (5)" in overview and "Still open (10)" in overview and "Fixed (2)" in overview
    assert "jax-pmap / jit__fun" in overview and "449.6 KiB" in overview  # headline: pmap total bytes
    memory = html.unescape((site.out / "memory.html").read_text())
    assert "The numbers" in memory and "299.3 KiB" in memory  # pmap temp bytes, in the table under the chart
    assert "jax_jobs.py:" in memory  # a source line of a value live at the peak
    onnx = (site.out / "onnx.html").read_text()
    assert "❌" in onnx and "✅" in onnx
    query = (site.out / "query.html").read_text()
    for table in ("metric_trends", "regressions", "diffs", "accepts", "hlo_instructions", "latest_metrics"):
        assert f'id="{table}"' in query, table
    assert "The incident whose step is open on this figure at this run" in query  # a view's column comment, from the warehouse


def test_the_kernels_page_breaks_down_the_latest_runs_collectives(site):
    """Raw HTML that Markdown skips (a big night's custom calls and collectives are thousands of
    rows): cells escaped as text, numbers right-aligned. jit__fun's all-reduces in 2026-11-20:
    nine before XLA's optimizations, combined into one after; after first, as the charts."""
    page = (site.out / "kernels.html").read_text()
    section = page[page.index('id="collectives-in-the-latest-run"'):page.index('id="what-changed-since-the-previous-run"')]
    rows = [[html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", section)]
    assert rows == [["program", "stage", "name", "count", "change"],
                    ["jit__fun", "after_optimizations", "all-reduce", "1", ""],
                    ["jit__fun", "before_optimizations", "all-reduce", "9", ""]]
    assert '<td class="ds-num">9</td>' in section


def test_each_kind_of_page_renders_in_chromium(site, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    shots = {"index.html": "site_overview.png", SERIES: "site_series.png"}
    with serve_directory(site.out) as base:
        for page, charts in PAGES.items():
            shot = ARTIFACTS / shots[page] if page in shots else None
            report = open_page(f"{base}/{page}", screenshot=shot, browser=browser)
            assert report.console_errors == [], (page, report.console_errors)
            assert report.csp_violations == [] and report.dialogs == [], (page, report.csp_violations, report.dialogs)
            assert len(report.chart_marks) == charts, page
            assert all(n > 0 for n in report.chart_marks), (page, report.chart_marks)
            assert report.undrawn_charts == 0, page
        assert check_links(base, ["index.html"], crawl=True) == []
    assert (ARTIFACTS / "site_overview.png").stat().st_size > 10_000


@pytest.mark.slow
def test_an_empty_warehouse_still_builds_a_site_that_says_so(tmp_path):
    from flows.verdict.aggregate import aggregate
    from flows.publish.site import build_site
    from flows.warehouse.store import Warehouse

    with Warehouse(tmp_path / "w.duckdb") as con:
        aggregate(con)
    result = build_site(tmp_path / "w.duckdb", tmp_path / "site")
    assert (result.pages, result.charts) == (16, 0)  # the incidents index, the compile and ranks pages and docs/site.md too
    assert "The warehouse has no runs yet" in (tmp_path / "site" / "index.html").read_text()


def _text(page: Path) -> str:
    import html as html_module

    return " ".join(html_module.unescape(re.sub(r"<[^>]+>", "", page.read_text())).split())


def test_one_count_is_the_same_number_everywhere(site, sample_warehouse):
    """The night's counts come from incident_status: the summary, the overview, the run page,
    the runs index (run_verdicts), the incident pages and the CLI say the same."""
    import json

    from typer.testing import CliRunner

    from flows.cli import app

    report = (sample_warehouse.parent / "report.md").read_text()
    counts = re.search(r"Last night: (.*)\.\n", report).group(1).replace("**", "")
    assert counts == "5 new, 10 still open, 2 fixed, 2 improvements, 0 lost"
    assert f"Last night: {counts}." in _text(site.out / "index.html")
    assert f"This run: {counts}." in _text(site.out / "runs" / "2026-11-20.html")
    overview = _text(site.out / "index.html")
    assert "New (5)" in overview and "Still open (10)" in overview and "Fixed (2)" in overview and "Improvements (2)" in overview
    cli = CliRunner().invoke(app, ["incidents", "--status", "open", "--format", "json", "--warehouse", str(sample_warehouse)])
    assert len(json.loads(cli.output)) == 15  # new and still open
    new = CliRunner().invoke(app, ["incidents", "--status", "new", "--format", "json", "--warehouse", str(sample_warehouse)])
    assert len(json.loads(new.output)) == 5
    # The runs index: each run's counts, as its summary said them (the view run_verdicts).
    runs = _text(site.out / "runs" / "index.html")
    assert "2026-11-20 2026-11-20 02:00:00 1a8e6b4 46 0 0 25 5 10 2 2 0" in runs
    assert "2026-11-19 2026-11-19 02:00:00 c71f0d2 46 0 0 26 7 5 0 5 0" in runs
    listed = _text(site.out / "incidents" / "index.html")
    assert len(list((site.out / "incidents").glob("i-*.html"))) == 24 == (
        listed.count(" new ") + listed.count(" open ") + listed.count(" fixed ("))
    # The night before: seven new (a failed export and the torch-trace graph breaks among them), five improvements.
    assert "This run: 7 new, 5 still open, 0 fixed, 5 improvements, 0 lost." in _text(site.out / "runs" / "2026-11-19.html")


@pytest.mark.slow
def test_commits_link_to_their_pages_when_the_settings_say_where(sample_warehouse, tmp_path):
    from flows.publish.report import night_report
    from flows.publish.site import build_site
    from transforms.trends.rules import parse_settings

    settings = parse_settings('commit_url = "https://git.example/c/{commit}"\n'
                              'compare_url = "https://git.example/compare/{base}...{head}"\n')
    result = build_site(sample_warehouse, tmp_path / "site", settings)
    pmap = next(p for p in (result.out / "incidents").glob("i-f515e5b1-*.html"))
    html = pmap.read_text()
    assert 'href="https://git.example/c/9b03c5e"' in html and 'href="https://git.example/c/c71f0d2"' in html
    assert 'href="https://git.example/compare/9b03c5e...c71f0d2"' in html
    run_page = (result.out / "runs" / "2026-11-19.html").read_text()
    assert 'href="https://git.example/compare/9b03c5e...c71f0d2"' in run_page  # the new incidents' ranges
    text, _ = night_report(sample_warehouse, "2026-11-19", settings)
    assert "([compare](https://git.example/compare/9b03c5e...c71f0d2))" in text


def test_the_text_summary_says_what_the_markdown_says_without_markup(sample_warehouse):
    """What a text-only notification target gets: the Markdown summary's words, links written out."""
    from flows.verdict import incident_reader
    from flows.warehouse.store import connect_readonly
    from transforms.trends.night_report import night_markdown, night_text

    with connect_readonly(sample_warehouse) as con:
        at, commit = incident_reader.incidents_at(con, "2026-11-19"), incident_reader.run_commit(con, "2026-11-19")
    how = dict(commit_url="https://git.example/c/{commit}", compare_url="https://git.example/compare/{base}...{head}")
    md, text = night_markdown("2026-11-19", commit, at, **how), night_text("2026-11-19", commit, at, **how)
    assert text.splitlines()[:3] == ["Dumpscope: run 2026-11-19 (commit c71f0d2 (https://git.example/c/c71f0d2))", "",
                                     "Last night: 7 new, 5 still open, 0 fixed, 5 improvements, 0 lost."]
    assert "Commits 9b03c5e (https://git.example/c/9b03c5e) → c71f0d2 (https://git.example/c/c71f0d2) " \
           "(compare (https://git.example/compare/9b03c5e...c71f0d2))" in text
    assert not any(m in text for m in ("**", "<code>", "&#", "](", "# "))
    assert len(text.splitlines()) == len(md.splitlines())  # line for line the same story


@pytest.mark.slow
def test_a_warehouse_no_writer_has_opened_since_the_upgrade_says_what_to_do(sample_warehouse, tmp_path):
    """A warehouse at an older schema keeps its old views until a writer opens it: the CLI and
    the site say so in one line (and how to bring it up to date) instead of reading the old verdict."""
    from typer.testing import CliRunner

    from flows.cli import app
    from flows.warehouse import schema

    old = tmp_path / "old.duckdb"
    shutil.copy(sample_warehouse, old)
    shutil.copytree(sample_warehouse.with_name(sample_warehouse.name + ".records"), old.with_name("old.duckdb.records"))
    import duckdb

    with duckdb.connect(str(old)) as con:
        con.execute(schema.set_version_sql(schema.SCHEMA_VERSION - 1))
    line = (f"error: the warehouse is at schema version {schema.SCHEMA_VERSION - 1}, this Dumpscope reads "
            f"{schema.SCHEMA_VERSION}: run `dumpscope aggregate` (or the next night) to bring it up to date\n")
    for args in (["incidents"], ["site", "--out", str(tmp_path / "site")]):
        out = CliRunner().invoke(app, [*args, "--warehouse", str(old)])
        assert (out.exit_code, out.stderr) == (1, line), args
    fixed = CliRunner().invoke(app, ["aggregate", "--warehouse", str(old)])
    assert fixed.exit_code == 0, fixed.output
    now = CliRunner().invoke(app, ["incidents", "--warehouse", str(old)])
    assert now.exit_code == 0, now.output


@pytest.mark.slow  # builds a site or several warehouses: seconds
def test_the_accepts_page_links_the_incidents_each_accept_closed(sample_warehouse, tmp_path):
    """Issue 29: a pattern accept did not say which incidents it closed. The accepts page
    lists them, each a link to its incident page, from the accepts row the accept wrote."""
    from typer.testing import CliRunner

    from flows.cli import app
    from flows.publish.site import build_site
    from transforms.site.data import incident_file

    w = tmp_path / "wh.duckdb"
    shutil.copyfile(sample_warehouse, w)
    out = CliRunner().invoke(app, ["accept", "jax-pmap/*", "--note", "new sharding", "--warehouse", str(w)])
    assert out.exit_code == 0, out.output
    import duckdb

    with duckdb.connect(str(w), read_only=True) as con:
        [(closed,)] = con.execute("SELECT closed_incidents FROM accepts").fetchall()
    assert closed == ["I-01dc4499", "I-48d7e96d", "I-a4cd47e9", "I-f515e5b1"]
    page = (build_site(w, tmp_path / "site").out / "accepts.html").read_text()
    row = next(r for r in re.findall(r"<tr>.*?</tr>", page, re.S) if "new sharding" in r)
    links = re.findall(r'<a href="([^"]+)">(I-[0-9a-f]{8})</a>', row)
    assert links == [(incident_file(i).replace(".md", ".html"), i) for i in closed]


def test_the_cells_naming_the_latest_run_say_it_once_the_status_script_has_run(site, browser):
    """A figure's last run, when it is the latest run, is "latest" in the page's HTML (so that the
    page does not change with every night) and the run, linked to its page, once
    ``assets/status.js`` has read the status data: the numbers tables of the figure pages and
    the series index."""
    for name in ("kernels.html", "memory.html", "series/index.html"):
        assert (site.out / name).read_text().count('<span class="ds-latest-run">latest</span>') >= 3, name
    context = browser._browser.new_context()
    try:
        with serve_directory(site.out) as base:
            for name in ("kernels.html", "series/index.html"):
                page = context.new_page()
                page.goto(f"{base}/{name}")
                page.wait_for_selector(".ds-latest-run a", state="attached", timeout=10_000)
                cells = page.eval_on_selector_all(
                    ".ds-latest-run", "els => els.map((e) => [e.textContent, e.querySelector('a')?.href || ''])")
                assert len(cells) >= 3 and all(text == "2026-11-20" and href == f"{base}/runs/2026-11-20.html"
                                               for text, href in cells), (name, cells[:3])
    finally:
        context.close()
