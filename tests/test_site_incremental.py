"""The nightly site built at the speed of its change (flows/publish/site_mkdocs.py).

Three nights of the sample bucket (2026-11-17 to 19) make a warehouse and its site, with a
window of three runs; the fourth night (2026-11-20) is ingested into the same warehouse and
the site rebuilt over the published one. That incremental build must equal a full build of
the same warehouse from scratch, file for file, while building only the pages whose Markdown
changed; the first run has left the window (its page gone, its archive row there, every link
resolving). A rebuild of an unchanged warehouse builds no page and never writes a file of the
published site in place. The status line, which changes every night, is one script the pages
load, not part of their HTML.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.sample_build import SAMPLE_BUCKET
from tests.site_links import broken_links, ids_of
from transforms.site.data import run_anchor
from transforms.trends.rules import parse_settings

slow = pytest.mark.slow  # builds nights and sites (seconds each); the browser test is in the browser tier

SETTINGS = "[site]\nhistory_runs = 3\n"
NIGHTS = ("2026-11-17", "2026-11-18", "2026-11-19")
FOURTH = "2026-11-20"
ALWAYS_NEW = {"assets/status-data.js"}  # bytes of the build's time: differ between any two builds


def _files(site: Path) -> dict[str, Path]:
    return {p.relative_to(site).as_posix(): p for p in sorted(site.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """(warehouse, the site after three nights and its result, the incremental build's result,
    a full build's result of the four-night warehouse)."""
    from flows.nightly import night_in_process
    from flows.publish.site import build_site

    base = tmp_path_factory.mktemp("incremental")
    bucket, warehouse, settings = base / "bucket", base / "w.duckdb", parse_settings(SETTINGS)
    for night in NIGHTS:
        shutil.copytree(SAMPLE_BUCKET / night, bucket / night)
    night_in_process(bucket=str(bucket), warehouse=warehouse)
    site = base / "site"
    first = build_site(warehouse, site, settings)
    before = {name: path.read_bytes() for name, path in _files(site).items()}
    shutil.copytree(SAMPLE_BUCKET / FOURTH, bucket / FOURTH)
    night_in_process(bucket=str(bucket), warehouse=warehouse)
    incremental = build_site(warehouse, site, settings)
    full = build_site(warehouse, base / "full" / "site", settings)
    return warehouse, first, before, incremental, full


@slow
def test_an_incremental_build_equals_a_full_build(nights):
    _, first, before, incremental, full = nights
    assert first.full and first.full_reason == "no previous site" and first.pages_built == first.pages
    assert full.full and full.pages_built == full.pages == incremental.pages
    # Built again: the pages the fourth night changed (the overview, the new run's, the indexes...),
    # not the pages it did not touch.
    assert not incremental.full and 0 < incremental.pages_built < incremental.pages
    inc, ful = _files(incremental.out), _files(full.out)
    assert list(inc) == list(ful)
    for name in inc:
        if name == "search/search_index.json":
            a, b = (json.loads(p.read_text()) for p in (inc[name], ful[name]))
            assert a["config"] == b["config"]
            assert {json.dumps(e, sort_keys=True) for e in a["docs"]} == {json.dumps(e, sort_keys=True) for e in b["docs"]}
            assert a == b  # and in a full build's order
        elif name not in ALWAYS_NEW and not name.endswith(".gz"):  # the sitemap's gzip header holds the build time
            assert inc[name].read_bytes() == ful[name].read_bytes(), name
    # What the incremental build carried over is what the first site had, unchanged.
    carried = [n for n in inc if n.endswith(".html") and n != "404.html" and n in before and before[n] == inc[n].read_bytes()]
    assert len(carried) == incremental.pages - incremental.pages_built


@slow
def test_a_run_leaving_the_window_leaves_an_anchor_and_no_page(nights):
    _, _, before, incremental, _ = nights
    site = incremental.out
    assert "runs/2026-11-17.html" in before and not (site / "runs" / "2026-11-17.html").exists()
    assert run_anchor("2026-11-17") in ids_of(site / "archive" / "2026-11.html")
    moved = json.loads((site / "archive" / "moved.json").read_text())
    assert moved["runs/2026-11-17.html"] == f"archive/2026-11.html#{run_anchor('2026-11-17')}"
    assert broken_links(site) == []


@slow
def test_an_unchanged_rebuild_builds_no_page_and_writes_no_published_file(nights, tmp_path):
    """Readers may hold the published site while the next one is built: every file of it keeps
    its bytes (hard links from the old site are never written through); pages are carried over
    as the same files, what changes (status data, search index, sitemap) is a new file."""
    from flows.publish.site import build_site

    warehouse, _, _, incremental, _ = nights
    site = tmp_path / "site"
    shutil.copytree(incremental.out, site, copy_function=shutil.copy2)
    held = tmp_path / "held"  # a reader's hold on the published files: their inodes
    published = _files(site)
    snapshot = {name: path.read_bytes() for name, path in published.items()}
    inodes = {}
    for name, path in published.items():
        (held / name).parent.mkdir(parents=True, exist_ok=True)
        os.link(path, held / name)
        inodes[name] = path.stat().st_ino

    again = build_site(warehouse, site, parse_settings(SETTINGS))
    assert not again.full and again.pages_built == 0
    assert {name: path.read_bytes() for name, path in _files(held).items()} == snapshot  # none written in place
    rebuilt = _files(site)
    assert list(rebuilt) == list(published)
    pages = [n for n in rebuilt if n.endswith(".html") and n != "404.html"]
    assert len(pages) == again.pages
    assert all(rebuilt[n].stat().st_ino == inodes[n] for n in pages)  # carried over: the same files
    assert rebuilt["assets/status-data.js"].stat().st_ino != inodes["assets/status-data.js"]


def _copy_night(bucket: Path, day: str) -> None:
    """The fourth night's files again as run ``day`` (the same contents, another start)."""
    night = bucket / day
    shutil.copytree(SAMPLE_BUCKET / FOURTH, night)
    run = json.loads((night / "run.json").read_text())
    (night / "run.json").write_text(json.dumps({**run, "started_at": f"{day}T02:00:00+00:00"}))


@pytest.fixture(scope="module")
def unchanged_night(tmp_path_factory):
    """The four nights, then the fourth's files again as 2026-11-21 and -22, and the site with a
    window of two runs (both unchanged nights); then once more as -23, the site built over the
    published one: the window moved by one run, no figure moved. (The site before, its files'
    inodes, the incremental result, a full build's.)"""
    from flows.nightly import night_in_process
    from flows.publish.site import build_site

    base = tmp_path_factory.mktemp("unchanged")
    bucket, warehouse, settings = base / "bucket", base / "w.duckdb", parse_settings("[site]\nhistory_runs = 2\n")
    for night in (*NIGHTS, FOURTH):
        shutil.copytree(SAMPLE_BUCKET / night, bucket / night)
    for day in ("2026-11-21", "2026-11-22"):
        _copy_night(bucket, day)
    night_in_process(bucket=str(bucket), warehouse=warehouse)
    first = build_site(warehouse, base / "site", settings)
    inodes = {name: path.stat().st_ino for name, path in _files(first.out).items()}
    _copy_night(bucket, "2026-11-23")
    night_in_process(bucket=str(bucket), warehouse=warehouse)
    again = build_site(warehouse, base / "site", settings)
    full = build_site(warehouse, base / "full" / "site", settings)
    return first, inodes, again, full


@slow
def test_a_night_that_moved_no_figure_builds_no_series_page(unchanged_night):
    """A series page says nothing that moves with the window alone (its chart's ends, the latest
    run, how many runs saw it and its dump there come from the nightly data scripts), so a night
    that changed no content builds none of them again, and the site equals a full build."""
    first, inodes, again, full = unchanged_night
    rebuilt = _files(again.out)
    series = [n for n in rebuilt if n.startswith("series/") and n.endswith(".html") and n != "series/index.html"]
    assert series and all(n in inodes for n in series)  # no new series page
    assert [n for n in series if rebuilt[n].stat().st_ino != inodes[n]] == []  # each carried, not built
    # Built again: what speaks of the runs (the overview, the new run's page, the runs index, the
    # month's archive page the run leaving the window went to, the incidents index), the latest run's
    # diff, ONNX steps (a cell a run), compile reasons (a table a run) and the memory page's values live
    # at the peak (each with its dump in the latest run), and the query page (which runs the records
    # hold): 10 of 65, however many series. Not the fusion and kernels pages, whose charts' rows are in
    # their chart files and whose cells for the latest run are filled in the browser, nor the series index,
    # nor the ranks page (it names no run: the same ranks are the same page), nor the compile view of the log
    # whose content did not change (it names the log below its run's folder).
    built = sorted(n for n in rebuilt if n.endswith(".html") and n != "404.html"
                   and (n not in inodes or rebuilt[n].stat().st_ino != inodes[n]))
    assert built == ["archive/2026-11.html", "compile.html", "diff.html", "incidents/index.html", "index.html",
                     "memory.html", "onnx.html", "query.html", "runs/2026-11-23.html", "runs/index.html"], built
    assert not again.full and (again.pages, again.pages_built) == (65, len(built)) and len(series) == 23
    assert any(n.startswith("compiles/") for n in rebuilt)
    ful = _files(full.out)
    assert list(rebuilt) == list(ful)
    for name in rebuilt:
        if name not in {*ALWAYS_NEW, "search/search_index.json"} and not name.endswith(".gz"):
            assert rebuilt[name].read_bytes() == ful[name].read_bytes(), name
    data = rebuilt["assets/series-data.js"].read_text()
    assert '"runs":7' in data and "2026-11-23/jax-pmap/" in data  # seen in seven runs, its dump in the last


@slow
def test_the_status_line_is_data_every_page_loads(nights):
    """Every page has the status line's place and loads its data, then the script that writes it
    (classic scripts, in that order); the data names the latest run and the build time; no page's
    HTML holds either (or a night would change every page)."""
    _, _, _, incremental, _ = nights
    site = incremental.out
    data = (site / "assets" / "status-data.js").read_text()
    status = json.loads(re.fullmatch(r"(?s)//[^\n]*\nwindow\.dumpscopeStatus = (\{.*\});\n", data).group(1))
    assert status["run"] == FOURTH and status["run_href"] == f"runs/{FOURTH}.html" and status["commit"] == "1a8e6b4"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", status["built_at"])
    pages = [p for p in site.rglob("*.html")]
    assert len(pages) > 50
    for page in pages:
        html = page.read_text()
        assert '<p class="ds-status"></p>' in html, page
        data_at, script_at = html.index("assets/status-data.js"), html.index("assets/status.js")
        assert data_at < script_at and 'type="module" src="' not in html[data_at - 40:script_at], page
        assert status["built"] not in html and status["built_at"] not in html, page


@slow
def test_a_damaged_or_foreign_previous_site_means_a_full_build(nights, tmp_path):
    from flows.publish.site import build_site
    from flows.publish.site_mkdocs import MANIFEST

    warehouse, _, _, incremental, _ = nights
    site = tmp_path / "site"
    shutil.copytree(incremental.out, site)
    manifest = json.loads((site / MANIFEST).read_text())
    (site / MANIFEST).write_text(json.dumps(manifest | {"key": "another"}))
    result = build_site(warehouse, site, parse_settings(SETTINGS))
    assert result.full and result.pages_built == result.pages and result.full_reason == "templates, theme or settings changed"
    (site / MANIFEST).write_text("{not json")
    result = build_site(warehouse, site, parse_settings(SETTINGS))
    assert result.full and result.pages_built == result.pages and result.full_reason.startswith("no usable manifest")


def test_the_status_line_is_written_from_file_urls_too(nights, browser):
    """Opened from the disk (file://, where a module script does not load), a page that was
    carried over from an earlier night still says the latest run and this build's time."""
    _, _, before, incremental, _ = nights
    site = incremental.out
    carried = next(n for n in ("accepts.html", "runs/2026-11-18.html") if (site / n).read_bytes() == before[n])
    status = json.loads((site / "assets" / "status-data.js").read_text().split(" = ", 1)[1].rstrip(";\n"))
    context = browser._browser.new_context()
    try:
        page = context.new_page()
        page.goto((site / carried).as_uri())
        page.wait_for_selector(".ds-status time", timeout=10_000)
        text = " ".join(page.inner_text(".ds-status").split())
        href = page.get_attribute(".ds-status a", "href")
    finally:
        context.close()
    assert re.fullmatch(rf"Latest run {FOURTH}, started {FOURTH} 02:00 UTC \(\d+ days ago\), commit 1a8e6b4 · "
                        rf"site built {status['built']} \((just now|\d+ min ago)\)", text), text
    assert href == (site / "runs" / f"{FOURTH}.html").as_uri()


# ------------------------------------------------------------------ the build on a small mkdocs project (fast)

_PROJECT = """site_name: t
docs_dir: docs
strict: true
use_directory_urls: false
theme: {name: material, font: false}
plugins: [search]
validation: {links: {not_found: warn, anchors: warn, unrecognized_links: warn}}
nav: [{Home: index.md}]
"""


def _project(root: Path, pages: dict[str, str]) -> Path:
    docs = root / "docs"
    shutil.rmtree(docs, ignore_errors=True)
    docs.mkdir(parents=True)
    for name, text in pages.items():
        (docs / name).write_text(text)
    (root / "mkdocs.yml").write_text(_PROJECT)
    return root / "mkdocs.yml"


def test_strict_still_aborts_an_incremental_build_on_any_other_warning(tmp_path):
    """Only mkdocs' own warning about dirty builds is filtered: a broken link on a page built
    again still aborts the build, and the published site stays as it was."""
    from mkdocs.exceptions import Abort

    from flows.publish.site_mkdocs import build

    out = tmp_path / "site"
    pages = {"index.md": "# Home\n\n[a](a.md)\n", "a.md": "# A\n\ntext\n", "b.md": "# B\n"}
    assert build(_project(tmp_path / "src", pages), out, []).full
    again = build(_project(tmp_path / "src", pages), out, [])
    assert not again.full and again.pages_built == 0 and again.pages_carried == 3
    published = {name: p.read_bytes() for name, p in _files(out).items()}
    with pytest.raises(Abort):
        build(_project(tmp_path / "src", pages | {"a.md": "# A\n\n[gone](missing.md)\n"}), out, [])
    assert {name: p.read_bytes() for name, p in _files(out).items()} == published
    # A page that changed is built, one that left is gone, the rest carried over.
    changed = build(_project(tmp_path / "src", {"index.md": pages["index.md"], "a.md": "# A\n\nnew text\n"}), out, [])
    assert not changed.full and changed.pages_built == 1 and changed.pages_carried == 1
    assert not (out / "b.html").exists() and "new text" in (out / "a.html").read_text()
    index = json.loads((out / "search" / "search_index.json").read_text())
    assert sorted({e["location"].split("#")[0] for e in index["docs"]}) == ["a.html", "index.html"]
    assert any("new text" in e["text"] for e in index["docs"])


def test_a_page_that_says_index_lead_is_one_search_entry_of_what_heads_it(tmp_path):
    """The search plugin parses none of such a page (an incident's, a run's, a series' tables);
    its one entry, what it says before its first section, is boosted, and a night that carries
    the page carries its entry."""
    from flows.publish.site_mkdocs import LEAD_BOOST, build

    lead = ("---\nsearch:\n  exclude: true\nindex_lead: true\n---\n# Incident I-1a2b3c4d\n\nlead text\n\n"
            "## Steps\n\n| a | b |\n| --- | --- |\n| table text | 1 |\n")
    pages = {"index.md": "# Home\n\n[a](a.md)\n", "a.md": lead}
    out = tmp_path / "site"
    for night in range(2):
        result = build(_project(tmp_path / "src", pages | {"index.md": f"# Home {night}\n\n[a](a.md)\n"}), out, [])
        assert (result.full, result.pages_built) == ((True, 2) if night == 0 else (False, 1))
        entries = [e for e in json.loads((out / "search" / "search_index.json").read_text())["docs"]
                   if e["location"].startswith("a.html")]
        assert entries == [{"location": "a.html", "title": "Incident I-1a2b3c4d", "text": "<p>lead text</p>",
                            "boost": LEAD_BOOST}], entries


def test_the_status_data_is_inert_text_for_any_run_id():
    """Run ids and commits are data: in assets/status-data.js they are JSON strings that no
    ``<``, ``&`` or line separator can end or turn into markup (status.js writes them as text)."""
    from flows.publish.site import status_script

    hostile = {"run": "</script><img src=x onerror=alert(1)>", "commit": "a\u2028b & 'c\"", "built_at": "x"}
    script = status_script(hostile)
    prefix = "window.dumpscopeStatus = "
    body = script.splitlines()[1]
    assert body.startswith(prefix) and body.endswith(";") and script.count("\n") == 2
    assert not any(c in body for c in "<>&\u2028\u2029")
    assert json.loads(body[len(prefix):-1]) == hostile


def test_the_vega_bundle_is_made_once_per_version(tmp_path, monkeypatch):
    import vl_convert

    from flows.publish import site

    made = []
    monkeypatch.setattr(vl_convert, "javascript_bundle", lambda vl_version: made.append(vl_version) or f"// {vl_version}")
    cache = tmp_path / "cache"
    for night in range(2):
        docs = tmp_path / f"night{night}" / "docs"
        (docs / "assets").mkdir(parents=True)
        site._write_assets(docs, cache)
        assert (docs / site.VEGA_BUNDLE).read_text() == f"// {made[0]}"
    assert len(made) == 1
    monkeypatch.setattr(site, "vl_convert_version", lambda: "another")
    docs = tmp_path / "night2" / "docs"
    (docs / "assets").mkdir(parents=True)
    site._write_assets(docs, cache)
    assert len(made) == 2 and [p.name for p in cache.iterdir()] == [f"vega-bundle-another-{made[1]}.js"]


def test_compiled_templates_are_kept_for_the_next_build_and_a_changed_template_is_compiled_again(tmp_path):
    import jinja2

    from flows.publish.site_mkdocs import CompiledTemplates

    (tmp_path / "templates").mkdir()
    template = tmp_path / "templates" / "page.md.j2"
    template.write_text("one {{ x }}")

    def render() -> str:  # a new environment, as each build makes
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(tmp_path / "templates"),
                                 bytecode_cache=CompiledTemplates(tmp_path / "cache"))
        return env.get_template("page.md.j2").render(x=1)

    assert render() == "one 1"
    assert [p.suffix for p in (tmp_path / "cache").iterdir()] == [".cache"]  # on disk, for the next night's process
    template.write_text("two {{ x }}")
    assert render() == "two 1"
