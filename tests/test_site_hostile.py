"""The report site from a bucket whose every name is hostile: built, opened in Chromium, inert.

One small bucket (two runs of real sample dumps) carries script, Markdown and Jinja payloads
in each place a name comes from: the run directory, the job directory (one not even UTF-8),
dump file names, the HLO module name, op_name and source_file metadata, ONNX operator names
and error text, a TORCH_TRACE log's function and file names, graph and guard texts and
graph-break reason (its compile view), and run.json (commit, tags, free fields, a series override with line breaks
and ``../``); the accept log then gets a pattern, a series and an incident noted with
payloads. The nightly flow ingests it once and the site is built once (module-scoped);
every page is then opened in headless Chromium.
"""

from __future__ import annotations

import gzip
import html as html_module
import inspect
import json
import os
import re
from pathlib import Path

import pytest

from tests.browser import check_links, open_page, serve_directory
from tests.test_site_compile import _rewritten

SAMPLES = Path(__file__).parents[1] / "data" / "sample_bucket"
IMG = "<img src=x onerror=alert(13)>"
SCRIPT = "<script>alert(1)</script>"
JS_LINK = "[x](javascript:alert(1))"
ATTR = '{: onclick="alert(1)"}'
SQL = "'; DROP TABLE dumps; --"
RUN_OLD = f"2026-11-19 {IMG}"
RUN_NEW = f"2026-11-20 {{%x%}} {{{{7*7}}}} {SQL}"
JOB_JAX = f"jax-jit{IMG}"
JOB_ONNX = f"torch-onnx{JS_LINK} a|b"
# A bidi override, lookalikes, long. (A job name with a line break or a tab is refused at the
# listing, never a job: tests/test_hostile_reads.py; SERIES carries the line breaks here.)
JOB_PMAP = "jax-pmap\u202e＜img＞ {{7*7}} " + "L" * 150
JOB_BYTES = os.fsdecode(b"jax-bytes-\xff\xfe<b>\xe9")  # not UTF-8: the listing names it with \xNN escapes
JOB_BYTES_SHOWN = "jax-bytes-\\xff\\xfe<b>\\xe9"
PROGRAM = "{%x%}{{7*7}}" + IMG  # in the XLA dump file names
# The HloModule header: no whitespace, ':' or '//' there (XLA's lexer ends the name at the first two,
# the third starts a comment), so its link is relative; pages are titled by it.
MODULE = "</title>" + SCRIPT + "[x](evil.html)"
SOURCE = f"/src/{IMG}|a*b_{JS_LINK}.py"  # source_file metadata (pages show its base name)
SOURCE_NAME = SOURCE.rsplit("/", 1)[1]
OP_NAME = f"jit(train_step{SCRIPT})"
ONNX_OPS = (IMG, f"{{%x%}}|a*b_{JS_LINK}")
ERROR = f"{SCRIPT} {IMG} {ATTR} </code></pre></details>```"
COMMIT = IMG + ATTR
SERIES = "../../{%x%}\n" + SCRIPT + "\r\n```\n" + IMG  # run.json's series override for jit__fun
BUILTIN = "<built-in function getitem>"
ACCEPTED = f"{JOB_JAX}/{PROGRAM}/xla_buffer_assignment/buffer_assignment"  # a series accepted by name
# A TORCH_TRACE log (the real graph_break one) whose compiled function, source file, graph and guard texts and
# graph-break reason carry payloads: backticks, pipes, Jinja, a script, a javascript link; the function's name a
# line break too (its records are JSON: the payload lines cannot hold one).
TRACE_SRC = Path(__file__).parent / "fixtures" / "torch_trace" / "graph_break" / "dedicated_log_torch_trace_p9d42glu.log.gz"
JOB_TRACE = "torch-trace"
TRACE_PAYLOAD = f"`{{{{7*7}}}}`|{{%x%}}{SCRIPT}{JS_LINK}"
CO_NAME = f"fwd{TRACE_PAYLOAD}\nline2"
TRACE_FILE = f"m{TRACE_PAYLOAD}.py"  # the model's file name, wherever the log names it
TRACE_REASON = f"Data-dependent {TRACE_PAYLOAD} branching"

# Finds what the payloads would have made, had any reached the page as HTML or Markdown.
_PROBE = """() => ({
  injected: Array.from(document.querySelectorAll(
      'img[src="x"], script:not([src]):not([type="application/json"]), [onclick], [onerror]'))
    .map((e) => e.outerHTML.slice(0, 120)),
  handlers: Array.from(document.querySelectorAll('*')).flatMap((e) =>
    Array.from(e.attributes).filter((a) => a.name.startsWith('on')).map((a) => `${e.tagName} ${a.name}`)),
  js_links: Array.from(document.querySelectorAll('a[href], [src], [action]')).map((e) => e.href || e.src || e.action)
    .filter((u) => /^\\s*javascript:/i.test(u)),
  text: document.body.innerText,
  title: document.title,
  head: Array.from(document.head.children).map((e) => e.tagName)
    .filter((t) => !['META', 'TITLE', 'LINK', 'SCRIPT', 'STYLE'].includes(t)),
})"""
_SEARCH = """async () => {
  const input = document.querySelector('input.md-search__input');
  input.focus();
  input.value = 'onerror';
  input.dispatchEvent(new KeyboardEvent('keyup', {key: 'r'}));
  for (let i = 0; i < 50 && !document.querySelector('.md-search-result__item'); i++)
    await new Promise((r) => setTimeout(r, 100));
  const list = document.querySelector('.md-search-result__list');
  return {results: list ? list.children.length : 0, text: list ? list.innerText : '',
          injected: document.querySelectorAll('img[src="x"], [onerror], [onclick]').length};
}"""

# Points at the first symbols of the page's charts one by one; what the tooltip showed.
_TOOLTIPS = """async () => {
  const tips = [];
  for (const mark of Array.from(document.querySelectorAll('.ds-chart g.mark-symbol path')).slice(0, 12)) {
    const r = mark.getBoundingClientRect();
    const at = {bubbles: true, clientX: r.x + r.width / 2, clientY: r.y + r.height / 2};
    for (const type of ['pointerover', 'pointermove', 'mouseover', 'mousemove'])
      mark.dispatchEvent(new (type.startsWith('pointer') ? PointerEvent : MouseEvent)(type, at));
    await new Promise((r) => setTimeout(r, 30));
    const tip = document.getElementById('vg-tooltip-element');
    if (tip && tip.innerText) tips.push(tip.innerText);
  }
  return {tips, injected: document.querySelectorAll('img[src="x"], [onerror], [onclick]').length};
}"""


def _edit(text: str, name: str) -> str:
    text = text.replace("HloModule jit_train_step", f"HloModule {MODULE}")
    text = text.replace("/work/main/data/samples/jax_jobs.py", SOURCE)
    text = text.replace('op_name="jit(train_step)/', f'op_name="{OP_NAME}/')
    if name.startswith("onnx_export"):
        ops = "".join(f"\n- `{op}`: {n}" for n, op in enumerate(ONNX_OPS, start=2))
        text = text.replace(f"- `{BUILTIN}`: 1", f"- `{BUILTIN}`: 1{ops}")
        text = text.replace("Failure message: ", f"Failure message: {ERROR} ")
    return text


def write_hostile_bucket(root: Path) -> Path:
    """Two runs of real sample dumps (jax-jit's train step, jax-pmap's buffer assignment, an
    ONNX report) under hostile names, with hostile contents where names come from."""
    # The older run gets the sample's successful ONNX report, the newer the failed one
    # (it names `<built-in function getitem>`): the ONNX page shows the latest run.
    for run, jax_src, onnx_src in ((RUN_OLD, "2026-11-19", "2026-11-20"), (RUN_NEW, "2026-11-20", "2026-11-19")):
        d = root / run
        copies = [(f, JOB_JAX, f.name.replace("jit_train_step", PROGRAM))
                  for f in sorted((SAMPLES / jax_src / "jax-jit").glob("module_0000.jit_train_step.*.gz"))]
        copies += [(f, JOB_PMAP, f.name)
                   for f in sorted((SAMPLES / jax_src / "jax-pmap").glob("module_0000.jit__fun.cpu_after_optimizations*.gz"))]
        copies += [(f, JOB_ONNX, f.name) for f in (SAMPLES / onnx_src / "torch-onnx").glob("onnx_export_*.md.gz")]
        copies += [(f, JOB_BYTES, f.name)
                   for f in (SAMPLES / jax_src / "jax-jit").glob("module_0002.*.cpu_after_optimizations-memory-usage-report.txt.gz")]
        for src, job, name in copies:
            name = name.removesuffix(".gz")
            (d / job).mkdir(parents=True, exist_ok=True)
            (d / job / name).write_text(_edit(gzip.decompress(src.read_bytes()).decode(), name), encoding="utf-8")
        # The graph_break log with its function, file, code and reason rewritten, each payload's MD5 recomputed.
        _rewritten(TRACE_SRC, d / JOB_TRACE, {"dumpscope_model.py": TRACE_FILE, "Data-dependent branching": TRACE_REASON,
                                             "torch.relu(": f"torch.relu({TRACE_PAYLOAD}, "},
                   records={'"forward"': json.dumps(CO_NAME), "dumpscope_model.py": json.dumps(TRACE_FILE)[1:-1]})
        meta = json.loads((SAMPLES / jax_src / "run.json").read_text())
        meta.update(commit=COMMIT, tags=[SCRIPT, JS_LINK, SQL], note=IMG, series={"jit__fun": SERIES})
        (d / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def hostile_warehouse(tmp_path_factory) -> Path:
    from flows.nightly import night_in_process

    out = tmp_path_factory.mktemp("hostile")
    bucket = write_hostile_bucket(out / "bucket")
    warehouse = out / "warehouse.duckdb"
    night_in_process(bucket=str(bucket), warehouse=warehouse, workers=2, report_path=out / "report.md")
    _accept_hostile_changes(warehouse)
    return warehouse


def _accept_hostile_changes(warehouse: Path) -> None:
    """The accept log gets a pattern, a series (its page links back) and an incident, noted with payloads."""
    from flows.commands.accept import accept
    from flows.warehouse.store import Warehouse
    from transforms.trends.rules import Settings

    with Warehouse(warehouse) as con:
        accept(con, Settings(), f"{JOB_PMAP}/*", RUN_NEW, note=f"{IMG} {JS_LINK}")
        accept(con, Settings(), ACCEPTED, RUN_NEW, metric="memory.temp_bytes", note=ATTR)
        incidents = con.execute("SELECT incident_id FROM incidents ORDER BY incident_id").fetchall()
        assert incidents  # the newer run regressed
        accept(con, Settings(), incidents[0][0], note=SCRIPT)


@pytest.fixture(scope="module")
def hostile_site(hostile_warehouse, tmp_path_factory):
    from flows.publish.site import build_site

    return build_site(hostile_warehouse, tmp_path_factory.mktemp("hostile-site") / "site")


@pytest.fixture(scope="module")
def visited(hostile_site, browser) -> dict[str, object]:
    """Every page of the site, opened once: relative path -> PageReport (probe: _PROBE)."""
    out = hostile_site.out
    with serve_directory(out) as base:
        pages = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html"))
        reports: dict[str, object] = {page: open_page(base + page, browser=browser, probe=_PROBE) for page in pages}
        reports["<links>"] = check_links(base, ["index.html"], crawl=True)
        reports["<search>"] = open_page(base + "index.html", browser=browser, probe=_SEARCH)
        reports["<tooltips>"] = open_page(base + "memory.html", browser=browser, probe=_TOOLTIPS)
    return reports


def _flat(text: str) -> str:
    """Text as a browser lays it out on one line (whitespace runs collapse)."""
    return " ".join(text.split())


def _shows(report, *values: str) -> None:
    text = _flat(report.probe["text"])
    for value in values:
        assert _flat(value) in text, (report.url, value)


def _series(warehouse: Path) -> list[str]:
    from flows.warehouse.store import connect_readonly

    con = connect_readonly(warehouse)
    try:
        return [r[0] for r in con.sql("SELECT DISTINCT series FROM metric_trends ORDER BY series").fetchall()]
    finally:
        con.close()


def test_every_name_gets_its_own_page_under_a_safe_file_name(hostile_site, hostile_warehouse):
    from transforms.site.data import run_file, series_file

    built = {p.relative_to(hostile_site.out).as_posix() for p in hostile_site.out.rglob("*.html")}
    series = _series(hostile_warehouse)
    assert len(series) >= 8 and any(SERIES in s for s in series) and any(JOB_PMAP in s for s in series)
    pages = {series_file(s).replace(".md", ".html") for s in series} | {run_file(r).replace(".md", ".html")
                                                                         for r in (RUN_OLD, RUN_NEW)}
    assert len(pages) == len(series) + 2  # no two names share a page
    assert pages <= built
    for page in built:
        assert re.fullmatch(r"(?:(?:runs|series|search|incidents|compiles)/)?[a-z0-9][a-z0-9.-]*\.html|404\.html", page), page
        assert len(Path(page).name) <= 90


def test_the_markdown_sources_carry_no_live_markup(hostile_site):
    docs = hostile_site.out.with_name(hostile_site.out.name + ".src") / "docs"
    for source in docs.rglob("*.md"):
        # The page's own chart loader (flows.publish.site.chart_file: a name the site made) is the one script.
        text = re.sub(r'<script src="[a-z0-9][a-z0-9.-]*\.charts\.js"></script>', "", source.read_text())
        for live in ("<img", "<script", "](javascript", "{:", "{%", "{{", "|a|b"):
            assert live not in text, (source.name, live)


@pytest.mark.parametrize("filter_", ["safe", "tojson", "urlize", "xmlattr"])
def test_templates_have_no_filter_that_skips_escaping(filter_):
    import jinja2

    from flows.publish.site import _environment

    with pytest.raises(jinja2.TemplateAssertionError):
        _environment().from_string(f"{{{{ x|{filter_} }}}}")


def test_every_expression_of_a_template_is_escaped_and_no_value_is_a_template():
    import flows.publish.site
    from flows.publish.site import _environment

    env = _environment()
    payloads = [IMG, JS_LINK, ATTR, "{{7*7}}", "{%x%}", "a|b"]
    for source in ("{{ x }}", "{{ x|e }}", "{{ x|escape }}", "{{ x|forceescape }}", "{{ [x, x]|join(x) }}",
                   "{{ x|truncate(300) }}", "{{ x|replace('a', 'b') }}", "{{ x|upper }}", "{{ x ~ '' }}",
                   "{% macro m(v) %}{{ v }}{% endmacro %}{{ m(x) }}", "{% set y = x %}{{ y }}"):
        for payload in payloads:
            out = env.from_string(source).render(x=payload)
            assert not re.search(r"[<>\[\]{}|*`\"']", re.sub(r"&#\d+;", "", out)), (source, payload, out)
            if payload == "{{7*7}}":
                assert "49" not in out and "&#123;&#123;7&#42;7&#125;&#125;" in out, (source, out)
    # Pages come only from the files in site_templates/, loaded by name.
    assert "from_string" not in inspect.getsource(flows.publish.site) and "Template(" not in inspect.getsource(flows.publish.site)


def test_no_page_runs_a_payload_or_grows_an_element_from_one(visited):
    pages = {k: v for k, v in visited.items() if not k.startswith("<")}
    assert len(pages) >= 25
    for page, report in pages.items():
        assert report.dialogs == [], (page, report.dialogs)
        assert report.console_errors == [], (page, report.console_errors)
        assert report.csp_violations == [], (page, report.csp_violations)
        assert report.probe["injected"] == [] and report.probe["handlers"] == [], (page, report.probe)
        assert report.probe["js_links"] == [] and report.probe["head"] == [], (page, report.probe)
        assert report.undrawn_charts == 0 and all(n > 0 for n in report.chart_marks), (page, report.chart_marks)
    assert visited["<links>"] == []


def test_the_payloads_read_as_text(visited, hostile_site):
    from transforms.site.data import run_file, series_file

    html = lambda md: md.replace(".md", ".html")  # noqa: E731
    _shows(visited["index.html"], RUN_NEW, RUN_OLD, COMMIT, JOB_JAX, JOB_ONNX, f"{JOB_JAX} / {MODULE}", f"{JOB_JAX} / {PROGRAM}")
    _shows(visited[html(run_file(RUN_NEW))], f"Run {RUN_NEW}", COMMIT, JOB_JAX, JOB_PMAP,
           f"run_id = '{RUN_NEW.replace(chr(39), chr(39) * 2)}'")
    _shows(visited[html(run_file(RUN_OLD))], f"Run {RUN_OLD}", COMMIT)
    _shows(visited["runs/index.html"], RUN_NEW, RUN_OLD, COMMIT)
    _shows(visited["series/index.html"], JOB_BYTES_SHOWN)
    _shows(visited["diff.html"], RUN_NEW, RUN_OLD, SOURCE_NAME, OP_NAME, MODULE)
    _shows(visited["onnx.html"], BUILTIN, *ONNX_OPS, JOB_ONNX)
    _shows(visited["accepts.html"], f"{JOB_PMAP}/*", ACCEPTED, f"{IMG} {JS_LINK}", ATTR, RUN_NEW, "incident I-", SCRIPT)
    _shows(visited[html(series_file(ACCEPTED))], "Accepted changes", ATTR)
    _shows(visited["memory.html"], SOURCE_NAME, PROGRAM)
    _shows(visited["series/index.html"], SERIES, JOB_PMAP)
    series_page = visited[html(series_file(f"{JOB_JAX}/{MODULE}/xla_hlo/after_optimizations"))]
    _shows(series_page, MODULE, JOB_JAX)
    assert series_page.probe["title"].startswith(f"{JOB_JAX} / {MODULE} · xla_hlo")  # the <title> did not end early
    pmap = [p for p in visited if p.startswith("series/jax-pmap")]
    assert pmap and all(SERIES.split("\n")[-1] in visited[p].probe["text"] for p in pmap)
    # status.js found each page's entry in series-data.js (by its page's slug, whatever its name) and wrote it as text.
    assert all(re.search(r", seen in \d+ runs?\.\s+Its dump in the latest run, ", visited[p].probe["text"]) for p in pmap)
    # The error text (in collapsed <details>, so not in innerText) stays inside its code block.
    onnx = (hostile_site.out / "onnx.html").read_text()
    blocks = re.findall(r'<pre><code class="language-text">(.*?)</code></pre>', onnx, re.S)
    assert any(ERROR in html_module.unescape(b) for b in blocks)
    # The TORCH_TRACE log's compile views: its function's name as text (its line break a space), its graph,
    # guard and graph-break texts inside their code blocks, whole.
    views = sorted(p for p in visited if p.startswith("compiles/"))
    assert views
    _shows(visited[views[0]], f"Compiles of {JOB_TRACE}/{CO_NAME.replace(chr(10), ' ')}")
    texts = [html_module.unescape(b) for v in views
             for b in re.findall(r"<pre><code>(.*?)</code></pre>", (hostile_site.out / v).read_text(), re.S)]
    assert any(TRACE_REASON in t for t in texts) and any(f"torch.relu({TRACE_PAYLOAD}, " in t for t in texts)
    assert any(TRACE_FILE in t for t in texts)


def test_search_results_show_payloads_as_text(visited):
    search = visited["<search>"]
    assert search.probe["results"] > 0 and "onerror=alert(13)" in search.probe["text"], search.probe
    assert search.probe["injected"] == 0 and search.dialogs == [] and search.csp_violations == []


def test_chart_tooltips_show_names_as_text(visited):
    tooltips = visited["<tooltips>"]
    assert any(JOB_JAX in tip for tip in tooltips.probe["tips"]), tooltips.probe
    assert any(COMMIT in tip for tip in tooltips.probe["tips"])
    assert tooltips.probe["injected"] == 0 and tooltips.dialogs == [] and tooltips.csp_violations == []
