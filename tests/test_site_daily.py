"""The site as a daily tool, in headless Chromium at 1400 px, at 420 px and in dark mode.

One site is built from the sample warehouse (module-scoped), with a commit URL, a compare
URL and a bucket URL template set. A page of every kind is opened once in each of three
browser contexts (a wide screen, a phone, a wide screen whose system prefers dark) through
the harness (tests/browser.py), with a probe that opens every closed block and reads back
what a reader sees: the labels of last night's points, the marks where incidents opened,
where each table's first column sits against the viewport and its scroll box, whether a
table fits its box or became cards, how wide the page's content and its charts are, the
ONNX step words, the colour scheme. The tests then assert on those reports. Screenshots of the overview, an incident,
a series and a run page at both widths go to tests/artifacts/ (daily_<page>_<width>.png);
``DUMPSCOPE_UPDATE_README_SHOT=1`` also refreshes the README's picture of the overview
(tests/artifacts/readme_overview.png, the one artifact in git).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.browser import serve_directory
from transforms.site.data import series_file

ARTIFACTS = Path(__file__).parent / "artifacts"
README_SHOT = ARTIFACTS / "readme_overview.png"
SERIES = series_file("jax-pmap/jit__fun/xla_buffer_assignment/buffer_assignment").replace(".md", ".html")
RUN = "runs/2026-11-20.html"
MODES = {"wide": (1400, "light"), "phone": (420, "light"), "dark": (1400, "dark")}
INCIDENT = "incident"  # stands for the page of incident I-f515e5b1 (its file name ends in a hash)
EVERY_KIND = ("index.html", INCIDENT, SERIES, RUN, "memory.html", "fusion.html", "kernels.html", "compile.html",
              "onnx.html", "series/index.html", "incidents/index.html", "runs/index.html", "diff.html", "accepts.html",
              "query.html", "metrics.html")
PAGES = {  # mode -> pages opened in it (on a phone, every kind but those whose tables another page's repeat:
    # fusion's sections are memory's, the accept log's rows the incidents index's, the reference pages alike)
    "wide": EVERY_KIND,
    "phone": tuple(p for p in EVERY_KIND if p not in ("fusion.html", "accepts.html", "metrics.html")),
    "dark": ("index.html", "kernels.html", "onnx.html"),
}
# Pages that hide the table of contents: their content spans the width (the section and reference pages keep it).
NO_TOC = ("index.html", INCIDENT, SERIES, RUN, "series/index.html", "incidents/index.html", "runs/index.html",
          "accepts.html", "query.html")
SHOTS = {"index.html": "overview", INCIDENT: "incident", SERIES: "series", RUN: "run"}
BUCKET_URL = "https://bucket.example/browse/{path}"

# What the reader sees: read in the page once its charts drew, every closed block opened (not the
# charts' action menus), two frames later (assets/tables.js measures a block's tables when it opens);
# then closed again, so the screenshot shows the page as it opens (every excerpt open made the
# incident's and the run's pictures 4 MB and seconds each).
_PROBE = """async () => {
  const height = document.documentElement.scrollHeight;  // as the page opens: its blocks closed
  const opened = Array.from(document.querySelectorAll('article details:not([open])')).filter((b) => !b.closest('.vega-embed'));
  for (const block of opened) block.open = true;
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const inside = (box, outer) => box.left >= outer.left - 1 && box.right <= outer.right + 1;
  const viewport = {left: 0, right: window.innerWidth};
  const charts = Array.from(document.querySelectorAll('.ds-chart')).map((el) => {
    const svg = el.querySelector('svg.marks');
    const axes = (kind) => svg ? Array.from(svg.querySelectorAll('g.role-axis'))
      .filter((g) => (g.getAttribute('aria-label') || '').startsWith(kind)).length : 0;
    // Marks drawn where they apply: a point sized 0 elsewhere has no area (charts.py draws rings
    // and triangles on every row, never on filtered data, which Vega warns about).
    const count = (cls) => Array.from(el.querySelectorAll(`svg g.${cls} path`)).filter((p) => p.getBBox().width > 0).length;
    const axis = el.querySelector('svg .role-axis-label text');
    return {
      label: el.getAttribute('aria-label'),
      last: count('ds_last_marks'),
      labels: Array.from(el.querySelectorAll('svg g.ds_label_marks text')).map((t) => t.textContent).filter((t) => t !== ''),
      opened: count('ds_opened_marks'),
      open: count('ds_open_marks'),
      axis_fill: axis ? getComputedStyle(axis).fill : null,
      width: svg ? svg.getBoundingClientRect().width : 0,
      box: el.clientWidth,
      x_axes: axes('X-axis'),
      y_axes: axes('Y-axis'),
    };
  });
  const tables = Array.from(document.querySelectorAll('article table')).map((table) => {
    const box = table.closest('.md-typeset__scrollwrap, .ds-scroll') || table.parentElement;
    const outer = box.getBoundingClientRect();
    const bounds = {left: Math.max(outer.left, 0), right: Math.min(outer.right, window.innerWidth)};
    const shown = (cells) => cells.filter((c) => c.getClientRects().length > 0);  // cards hide the header row
    const first = shown(Array.from(table.querySelectorAll('tr > :first-child')));
    const last = shown(Array.from(table.querySelectorAll('tr > :last-child')));
    return {
      head: Array.from(table.querySelector('tr').children, (c) => c.textContent.trim()).join('\t').slice(0, 60),
      first_inside: first.every((c) => inside(c.getBoundingClientRect(), bounds)),
      first_width: Math.min(...first.map((c) => c.getBoundingClientRect().width)),
      last_inside: last.every((c) => inside(c.getBoundingClientRect(), bounds)),
      scrolls: box.scrollWidth > box.clientWidth + 1,
      cards: table.classList.contains('ds-cards'),
      right: table.getBoundingClientRect().right,
    };
  });
  const body = getComputedStyle(document.body);
  const seen = {
    charts, tables,
    scheme: document.body.getAttribute('data-md-color-scheme'),
    background: body.backgroundColor,
    toggle: document.querySelectorAll('form[data-md-component="palette"] input').length,
    page_overflow: document.documentElement.scrollWidth - window.innerWidth,
    cause_top: (document.querySelector('article h2') || {getBoundingClientRect: () => ({top: -1})}).getBoundingClientRect().top + window.scrollY,
    height,
    article: document.querySelector('article').getBoundingClientRect().width,
    toc: !!document.querySelector('.md-sidebar--secondary:not([hidden])') &&
         getComputedStyle(document.querySelector('.md-sidebar--secondary')).display !== 'none',
    status: (document.querySelector('.ds-status') || {}).innerText || '',
    dumps: Array.from(document.querySelectorAll('article a.ds-dump')).map((a) => a.getAttribute('href')),
    onnx: Array.from(document.querySelectorAll('table.ds-matrix td[class]')).map((td) => td.textContent),
    text: document.body.innerText,
  };
  for (const block of opened) block.open = false;
  return seen;
}"""


@pytest.fixture(scope="module")
def daily_site(sample_warehouse, tmp_path_factory):
    """The sample site, with commits and dumps linked (flows.publish.site reads these settings)."""
    from flows.publish.site import build_site

    from transforms.trends.rules import parse_settings

    settings = parse_settings('commit_url = "https://git.example/c/{commit}"\n'
                              'compare_url = "https://git.example/compare/{base}...{head}"\n'
                              f'[site]\nbucket_url = "{BUCKET_URL}"\n')
    return build_site(sample_warehouse, tmp_path_factory.mktemp("daily") / "site", settings)


@contextlib.contextmanager
def _context(browser, width: int, scheme: str):
    """The harness's shared tab swapped, for the block, for one of a context with this
    viewport and colour scheme (Playwright's ``color_scheme``: what the system prefers)."""
    from tests.browser import _CSP_INIT_JS

    context = browser._browser.new_context(viewport={"width": width, "height": 1000}, color_scheme=scheme)
    context.add_init_script(_CSP_INIT_JS)
    shared, browser._page = browser._page, context.new_page()
    try:
        yield browser._page
    finally:
        browser._page = shared
        context.close()


@pytest.fixture(scope="module")
def reports(daily_site, browser):
    """(mode, page) -> the harness's PageReport (probe included), each page opened once."""
    ARTIFACTS.mkdir(exist_ok=True)
    incident = next((daily_site.out / "incidents").glob("i-f515e5b1-*.html")).relative_to(daily_site.out).as_posix()
    out = {}
    with serve_directory(daily_site.out) as base:
        for mode, (width, scheme) in MODES.items():
            with _context(browser, width, scheme) as tab:
                for page in PAGES[mode]:
                    path = incident if page == INCIDENT else page
                    shot = ARTIFACTS / f"daily_{SHOTS[page]}_{width}.png" if page in SHOTS and mode != "dark" else None
                    out[mode, page] = browser.open_page(base + path, probe=_PROBE, screenshot=shot)
                if mode == "wide":
                    out["click"] = _click(tab, base + "kernels.html", "ds_point", r".*/runs/.*\.html$")
                    out["click_open"] = _click(tab, base + "kernels.html", "ds_open", r".*/incidents/.*\.html$")
    if os.environ.get("DUMPSCOPE_UPDATE_README_SHOT"):
        shutil.copyfile(ARTIFACTS / "daily_overview_1400.png", README_SHOT)
    return out


def _click(tab, url: str, mark: str, lands: str) -> str:
    """Where a click on the first drawn ``mark`` of the first chart of ``url`` leads."""
    tab.goto(url)
    point = tab.locator(f".ds-chart svg g.{mark}_marks path").filter(visible=True).first
    point.wait_for()
    point.click(force=True)
    tab.wait_for_url(re.compile(lands), timeout=5000)
    href = tab.url
    tab.goto("about:blank")
    return href


def test_pages_open_without_errors_and_every_chart_draws(reports):
    for key, report in reports.items():
        if key in ("click", "click_open"):
            continue
        assert report.console_errors == [] and report.csp_violations == [], (key, report.console_errors)
        assert report.undrawn_charts == 0 and all(n > 0 for n in report.chart_marks), (key, report.chart_marks)


def test_every_trend_chart_rings_and_labels_last_night(reports):
    for (mode, page), report in ((k, r) for k, r in reports.items() if k not in ("click", "click_open")):
        for chart in report.probe["charts"]:
            if chart["label"] in ("Allocations by kind", "Compile seconds by phase"):  # bars of the latest run, not trends
                continue
            assert chart["last"] > 0 and len(chart["labels"]) == chart["last"], (mode, page, chart)
    kernels = {c["label"]: c for c in reports["wide", "kernels.html"].probe["charts"]}
    # kernel.launches of the three XLA programs in run 2026-11-20: jit_eval_metrics, jit_train_step, jit__fun.
    assert sorted(kernels["Kernel launches (XLA, after optimizations)"]["labels"], key=int) == ["12", "39", "46"]
    memory = {c["label"]: c for c in reports["wide", "memory.html"].probe["charts"]}
    # memory.temp_bytes in 2026-11-20: 131,584, 306,440 and 32,976 bytes (jit_train_step, jit__fun, jit_eval_metrics).
    assert sorted(memory["Temp bytes (buffer assignment)"]["labels"]) == ["128.5 KiB", "299.3 KiB", "32.2 KiB"]
    series = reports["wide", SERIES].probe["charts"]
    assert len(series) == 1 and {"449.6 KiB", "299.3 KiB"} <= set(series[0]["labels"])  # jit__fun's total and temp bytes


def test_incidents_are_marked_where_they_opened_and_a_point_opens_its_run(reports):
    kernels = {c["label"]: c for c in reports["wide", "kernels.html"].probe["charts"]}
    # Incidents I-f61c3b88 and I-84ab3494 opened with kernel.launches steps in 2026-11-19 (jit_train_step,
    # jit_eval_metrics), I-f515e5b1 with jit__fun's, and I-c2dd8bab on top of I-f61c3b88 in 2026-11-20
    # (jit_train_step again): one triangle each, none on the runs between.
    launches = kernels["Kernel launches (XLA, after optimizations)"]
    assert launches["opened"] == 4
    # All three programs' launches have an incident open at the last run: a ring each, to its incident.
    assert launches["open"] == 3
    assert reports["click"].endswith("/runs/2026-11-17.html")  # a point: its run (the first panel's first run)
    assert "/incidents/i-" in reports["click_open"]  # a ring: the incident open on the figure


def test_a_chart_with_nothing_to_show_is_not_drawn(daily_site, reports):
    kernels = reports["wide", "kernels.html"].probe
    assert "Custom calls" not in {c["label"] for c in kernels["charts"]}
    assert "Every program shows 0 for kernel.custom_calls in the runs shown: nothing to draw." in kernels["text"]
    fusion = {c["label"] for c in reports["wide", "fusion.html"].probe["charts"]}
    assert "XLA fusions by kind" in fusion  # the small multiples: one panel per program


def _pages(reports):
    return ((k, r) for k, r in reports.items() if k not in ("click", "click_open"))


def test_no_table_is_cut_at_either_width(reports):
    """Issue 47: at 1400 px the incident's steps and the runs index scrolled sideways in their boxes
    beside an empty column, and on a phone nearly every table did. Now, every block open, every
    table of every kind of page fits its box: at 1400 px as a table, at 420 px as a table or as
    cards (a row a block, assets/tables.js); its first column in view, the page never wider than
    the screen."""
    for (mode, page), report in _pages(reports):
        width = MODES[mode][0]
        for table in report.probe["tables"]:
            assert not table["scrolls"] and table["right"] <= width + 1, (mode, page, table)
            assert table["first_inside"], (mode, page, table)
            assert table["first_width"] > (40 if mode == "phone" else 80), (mode, page, table)  # no letter-per-line column
            assert mode == "phone" or not table["cards"], (mode, page, table)
        assert report.probe["page_overflow"] <= 0, (mode, page, report.probe["page_overflow"])
    # The steps of I-f515e5b1 and the runs index, whole tables at 1400 px; on a phone, a run's figures as cards.
    for page, head in ((INCIDENT, "series\tmetric\tstep"), ("runs/index.html", "run\tstarted"), (RUN, "series\tmetric")):
        assert [t["cards"] for t in reports["wide", page].probe["tables"] if t["head"].startswith(head)] == [False], page
        assert [t["cards"] for t in reports["phone", page].probe["tables"] if t["head"].startswith(head)] == [True], page


def test_pages_use_the_width_at_1400_px_and_read_on_a_phone(reports):
    """At 1400 px a page without sections to jump to hides the table of contents and its content
    spans the screen (the runs index was 1118 px wide beside an empty column); a chart takes the
    width of its box at both widths (the compile page drew 260 px of 1100) and never overflows
    it; its panels each have their own x axis (no axis under an empty cell). On a phone the query
    page is its sections and a line a table (it was 90,522 px tall), and an incident's page shows
    its facts and the start of its cause on the first screen."""
    for page in NO_TOC:
        probe = reports["wide", page].probe
        assert not probe["toc"] and probe["article"] >= 1300, (page, probe["article"])
    for (mode, page), report in _pages(reports):
        for chart in report.probe["charts"]:
            assert chart["width"] <= chart["box"] + 1, (mode, page, chart)
            assert mode == "phone" or chart["width"] >= 0.8 * chart["box"], (mode, page, chart)
            assert chart["x_axes"] == chart["y_axes"], (mode, page, chart)
    assert reports["phone", "query.html"].probe["height"] < 10_000
    assert reports["phone", INCIDENT].probe["cause_top"] < 1000


def test_onnx_steps_say_passed_or_failed_in_words(reports):
    for mode in MODES:
        cells = reports[mode, "onnx.html"].probe["onnx"]
        words = {c.split(" ", 1)[1] for c in cells}
        assert words == {"passed", "failed", "skipped"}, (mode, words)
        assert cells.count("❌ failed") == 1 and cells.count("✅ passed") > 0


def test_the_site_follows_the_system_colour_scheme(reports):
    def luminance(css: str) -> float:
        r, g, b = (int(v) for v in re.findall(r"\d+", css)[:3])
        return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255

    for page in PAGES["dark"]:
        dark, light = reports["dark", page].probe, reports["wide", page].probe
        assert (dark["scheme"], light["scheme"]) == ("slate", "default"), page
        assert luminance(dark["background"]) < 0.3 < 0.9 < luminance(light["background"]), page
        assert dark["toggle"] == 2 == light["toggle"]  # the toggle stays
        for chart in dark["charts"]:  # the charts are drawn in the dark theme: light axis labels
            assert chart["axis_fill"] is None or luminance(chart["axis_fill"]) > 0.6, (page, chart)


def test_every_page_says_how_old_it_is(reports, daily_site):
    for (mode, page), report in ((k, r) for k, r in reports.items() if k not in ("click", "click_open")):
        status = report.probe["status"]
        assert re.fullmatch(r"Latest run 2026-11-20, started 2026-11-20 02:00 UTC \(\d+ days ago\), commit 1a8e6b4 · "
                            r"site built \d{4}-\d\d-\d\d \d\d:\d\d UTC \((just now|\d+ min ago)\)", status), (page, status)


def test_run_pages_and_the_overview_show_tags_commits_and_dump_links(daily_site, reports):
    overview = reports["wide", "index.html"].probe["text"]
    assert "Tags: nightly cpu mlp-3x128 mean-centering" in " ".join(overview.split())
    html = (daily_site.out / "index.html").read_text()
    assert '<a href="https://git.example/c/1a8e6b4"><code>1a8e6b4</code></a>' in html
    run = (daily_site.out / "runs" / "2026-11-19.html").read_text()
    assert '<a href="https://git.example/c/c71f0d2"><code>c71f0d2</code></a>' in run
    assert "mlp-3x96" in run and "median-centering" in run
    runs = (daily_site.out / "runs" / "index.html").read_text()  # every run's commit links too
    assert all(f'<a href="https://git.example/c/{c}"><code>{c}</code></a>' in runs for c in ("1a8e6b4", "c71f0d2"))
    # The run's structural changes each name their dump by bucket path, linked through the template.
    path = "2026-11-19/jax-jit/module_0002.jit_eval_metrics.cpu_after_optimizations-buffer-assignment.txt.gz"
    assert f'href="{BUCKET_URL.format(path=path)}"' in run
    # A series seen in the latest run names its dump there from assets/series-data.js (its page stays
    # as it was on a night that moved none of its figures), written into the page by status.js.
    dump = "2026-11-20/jax-pmap/module_0000.jit__fun.cpu_after_optimizations-buffer-assignment.txt.gz"
    assert reports["wide", SERIES].probe["dumps"] == [BUCKET_URL.format(path=dump)]
    assert f"Its dump in the latest run, 2026-11-20: {dump}." in reports["wide", SERIES].probe["text"]
    assert dump not in (daily_site.out / SERIES).read_text()


def test_a_dump_link_escapes_every_segment_of_the_path():
    from transforms.site.data import dump_link

    hostile = '2026-11-20 <img src=x onerror=alert(1)>/job"a&b/../x?y#z.txt'
    link = dump_link(SimpleNamespace(bucket_url=BUCKET_URL), hostile)
    assert link == ('<a class="ds-dump" href="https://bucket.example/browse/2026-11-20%20%3Cimg%20src%3Dx%20onerror%3Dalert'
                    '%281%29%3E/job%22a%26b/../x%3Fy%23z.txt"><code>2026-11-20 &#60;img src=x onerror=alert(1)&#62;/<wbr>'
                    'job&#34;a&#38;b/<wbr>.<wbr>.<wbr>/<wbr>x?y&#35;z.<wbr>txt</code></a>')
    assert dump_link(SimpleNamespace(bucket_url=None), "a/b.txt") == "<code>a/<wbr>b.<wbr>txt</code>"


def test_screenshots_are_written(reports):
    for name in SHOTS.values():
        for width in (1400, 420):
            assert (ARTIFACTS / f"daily_{name}_{width}.png").stat().st_size > 20_000, (name, width)


_EVIDENCE_PROBE = """() => {
  const block = (el) => el && el.tagName === 'DETAILS'
    ? {excerpt: el.querySelectorAll('pre').length, said: el.innerText.includes('lines') || el.innerText.includes('rescaled')}
    : null;
  const cause = document.getElementById('cause');
  const items = [];
  for (let el = cause && cause.nextElementSibling; el && !/^H[23]$/.test(el.tagName); el = el.nextElementSibling) {
    el.querySelectorAll('li').forEach((li) => {
      const a = li.querySelector('a[href^="#"]');
      const id = a ? a.getAttribute('href').slice(1) : null;
      items.push({text: li.innerText, id, target: id !== null && document.getElementById(id) !== null,
                  block: block(id && document.getElementById(id))});
    });
  }
  const blocks = Array.from(document.querySelectorAll('details.ds-evidence')).map(block);
  return {items, blocks};
}"""


def test_every_incident_and_diff_item_leads_to_its_excerpt_on_the_page(daily_site, browser):
    """Each line of an incident's cause links to the block of its change on the same page (the
    "... and N more" tail to the evidence section), and every change block on incident and diff
    pages holds the dump lines it comes from (or says which lines, when the dump could not be read)."""
    pages = sorted(p.relative_to(daily_site.out).as_posix() for p in (daily_site.out / "incidents").glob("i-*.html"))
    excerpts = 0
    with serve_directory(daily_site.out) as base:
        for page in pages + ["diff.html"]:
            found = browser.open_page(base + page, probe=_EVIDENCE_PROBE).probe
            for item in found["items"]:
                assert item["target"], (page, item)
                assert item["block"] is not None or item["id"] == "evidence", (page, item)
                assert item["id"] != "evidence" or item["text"].startswith("…"), (page, item)
            assert all(b["excerpt"] or b["said"] for b in found["blocks"]), page
            excerpts += sum(b["excerpt"] > 0 for b in found["blocks"])
            if page != "diff.html":
                assert found["items"], page  # every incident of the sample has a cause
    assert len(pages) == 24 and excerpts > 100


_SEARCH_JS = """async (queries) => {
  const input = document.querySelector('input[data-md-component="search-query"]');
  document.querySelector('label[for="__search"]').click();
  input.focus();
  const hits = () => Array.from(document.querySelectorAll('.md-search-result__list > li > a'), (a) => a.getAttribute('href'));
  const type = (text) => {
    input.value = text;
    input.dispatchEvent(new Event('input', {bubbles: true}));
    input.dispatchEvent(new KeyboardEvent('keyup', {bubbles: true, key: 'Enter'}));
  };
  const until = async (done) => {  // the search worker loads the index once, then answers within a frame or two
    for (let i = 0; i < 100 && !done(); i++) await new Promise((r) => setTimeout(r, 100));
  };
  const found = {};
  for (const query of queries) {
    type('');  // an empty query empties the list: the next hits are the next query's
    await until(() => hits().length === 0);
    type(query);
    await until(() => hits().length > 0);
    found[query] = hits()[0] || null;
  }
  return found;
}"""


def test_the_search_finds_an_incident_a_run_and_a_series_by_what_a_terminal_prints(daily_site, browser):
    """Issue 47: an incident id pasted from the terminal found the overview, the incidents index and
    the kernels page, not the incident. Each of these queries now leads to its own page first."""
    from transforms.site.data import incident_file, run_file, series_file

    cases = {"I-f515e5b1": incident_file("I-f515e5b1"), "2026-11-19": run_file("2026-11-19"),
             "jax-pmap/jit__fun/xla_hlo/after_optimizations": series_file("jax-pmap/jit__fun/xla_hlo/after_optimizations"),
             "torch-inductor/model__0_forward/inductor_ir/post_fusion": series_file("torch-inductor/model__0_forward/inductor_ir/post_fusion")}
    with serve_directory(daily_site.out) as base:
        browser._page.goto(base + "index.html")
        hits = browser._page.evaluate(_SEARCH_JS, list(cases))
        browser._page.goto("about:blank")
    found = {query: hit and hit.split("?")[0].removeprefix(base) for query, hit in hits.items()}
    assert found == {q: page.replace(".md", ".html") for q, page in cases.items()}


_DRAW_JS = """async (spec) => {
  const el = document.createElement('div');
  el.style.width = '600px';
  document.querySelector('article').prepend(el);
  await window.vegaEmbed(el, spec, {renderer: 'svg', ast: true, actions: false});
  const middle = (p) => { const b = p.getBoundingClientRect(); return b.top + b.height / 2; };
  return {points: Array.from(el.querySelectorAll('g.ds_point_marks path'), middle),
          plot: el.querySelector('g.cell path.background, g.cell > path').getBoundingClientRect().height,
          off: Array.from(el.querySelectorAll('g.ds_off_marks text'), (t) => t.textContent).filter((t) => t)};
}"""


def test_a_spike_does_not_flatten_an_open_step_in_the_browser(daily_site, browser):
    """The chart of tests/test_site_reading.py's spike, drawn by the site's Vega: the open step
    (774 KiB to 1331 KiB) rises a third of its panel's plot (it was 7 px of 110 under the 7 MiB
    spike); the spike sits on the panel's top edge, its value written there."""
    import csv
    import io

    from tests.test_site_reading import spike_rows
    from transforms.site import charts

    spec = charts.small_multiples(spike_rows(), title="train")
    spec["data"] = {"values": list(csv.DictReader(io.StringIO(spec["data"]["values"]))),
                    "format": {"parse": spec["data"]["format"]["parse"]}}  # rows, as assets/charts.js gives them
    with serve_directory(daily_site.out) as base:
        browser._page.goto(base + "index.html")
        drawn = browser._page.evaluate(_DRAW_JS, spec)
        browser._page.goto("about:blank")
    baseline, spike, back, opened, latest = drawn["points"]  # the change points: runs 1, 4, 5, 7, 8
    assert baseline == back and opened == latest and spike < opened < baseline  # SVG: up is a smaller y
    assert (baseline - opened) / drawn["plot"] >= 0.2, drawn  # a third of the span, less the scale's padding
    assert drawn["off"] == ["↑ 7168 KiB"]
