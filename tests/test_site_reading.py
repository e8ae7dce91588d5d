"""What a reader finds on the site (issue 47, items 5 to 8): charts that show steps, search that
finds every incident, run and series, and pages that say what they mean first.

The charts are checked on their Vega-Lite specs (``transforms.site.charts``: the data each
chart draws, where each point is drawn) and the pages on the sample site (``sample_site``); what
Chromium draws of them is in ``tests/test_site_daily.py``.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from datetime import datetime

import polars as pl
import pytest

from transforms.site import charts

KiB, MiB = 1 << 10, 1 << 20
SERIES = "jax-pmap/jit__fun/xla_buffer_assignment/buffer_assignment"


def spike_rows() -> pl.DataFrame:
    """Issue 47's chart: temp bytes at 774 KiB, one night at 7 MiB, back, then an open regression
    to 1331 KiB (opened in run 7 with its baseline 774 KiB), as ``transforms.site.data.marked``
    gives them to a series page."""
    values = [774 * KiB] * 3 + [7 * MiB] + [774 * KiB] * 2 + [1331 * KiB] * 2
    n = len(values)
    return pl.DataFrame({
        "started_at": [datetime(2026, 11, d, 2) for d in range(1, n + 1)],
        "run_id": [f"2026-11-{d:02d}" for d in range(1, n + 1)], "commit": "c0ffee1",
        "series": "jax-jit/train/xla_buffer_assignment/buffer_assignment", "metric": "memory.temp_bytes",
        "value": [float(v) for v in values], "delta": [None] + [float(values[i] - values[i - 1]) for i in range(1, n)],
        "changed": [True] + [values[i] != values[i - 1] for i in range(1, n)], "last": [False] * (n - 1) + [True],
        "state": [""] * 6 + ["regression I-1a2b3c4d"] * 2, "baseline": [None] * 6 + [float(774 * KiB)] * 2,
        "open": [None] * (n - 1) + ["regression"], "mark": [None] * 6 + ["incident", None]})


def points(spec: dict) -> list[dict]:
    """The rows a chart draws (its inline CSV), each with ``at``: where its point is drawn (``z``
    when a zoom put it on its panel's edge, else its value ``y``: ``charts.DRAWN``)."""
    rows = list(csv.DictReader(io.StringIO(spec["data"]["values"])))
    return [{**r, "at": float(r.get("z") or r["y"])} for r in rows]


def test_a_spike_never_flattens_an_open_step():
    """The 774 KiB -> 1331 KiB regression was 8 % of its panel's height under the 7 MiB spike
    (the y axis spans what is drawn). Zoomed to the open step, the step takes a third of it;
    the spike is drawn on the edge and says its value; its tooltip keeps the value."""
    spec = charts.small_multiples(spike_rows(), title="train")
    drawn = points(spec)
    at = [r["at"] for r in drawn]
    value = {r["r"]: float(r["y"]) for r in drawn}
    step = value["2026-11-08"] - value["2026-11-05"]  # in the chart's unit
    assert step / (max(at) - min(at)) >= 1 / 3 - 1e-9, (step, at)
    [spike] = [r for r in drawn if r["r"] == "2026-11-04"]
    assert (float(spike["y"]), spike["at"], spike["x"]) == (7168.0, 774 + 3 * 557, "↑ 7168 KiB")
    assert [r["x"] for r in drawn if r["r"] != "2026-11-04"] == ["", "", "", ""]
    assert spec["transform"] == [{"calculate": charts.DRAWN, "as": "z"}]
    # Closed (no incident open on the last point), the same line is drawn as it is: the spike shows.
    closed = points(charts.small_multiples(spike_rows().with_columns(pl.lit(None, pl.String).alias("open")), title="t"))
    assert max(r["at"] for r in closed) == 7168.0 and all(r.get("x", "") == "" for r in closed)


def test_a_series_chart_draws_only_what_moved_and_says_so_when_nothing_did():
    rows = spike_rows()
    flat = rows.with_columns(pl.lit("hlo.modules").alias("metric"), pl.lit(1.0).alias("value"), pl.lit(None, pl.Float64).alias("delta"),
                             pl.lit(False).alias("changed"), pl.lit("").alias("state"), pl.lit(None, pl.String).alias("open"),
                             pl.lit(None, pl.String).alias("mark"))
    spec = charts.small_multiples(pl.concat([rows, flat]), title="train")
    assert {r["k"] for r in points(spec)} == {"memory.temp_bytes (KiB)"}  # no panel for the figure that held
    # Each panel its own x axis: a row the panels do not fill draws no axis under its empty cells.
    assert spec["resolve"] == {"axis": {"x": "independent"}, "scale": {"y": "independent"}}
    note = charts.small_multiples(flat, title="held")
    assert note["title"] == "held" and note["mark"]["type"] == "text" and note["name"] == charts.NOTE_NAME
    assert points_text(note) == ["None of its figures moved in the runs shown: the table lists their values."]


def points_text(spec: dict) -> list[str]:
    return [r["k"] for r in csv.DictReader(io.StringIO(spec["data"]["values"]))]


def _chart_specs(site, page: str) -> dict:
    text = (site.out / page.replace(".html", ".charts.js")).read_text().splitlines()[1]
    return json.loads(text.removeprefix("window.dumpscopeCharts = ").removesuffix(";"))


def _series_page(site, series: str) -> str:
    from transforms.site.data import series_file

    return series_file(series).replace(".md", ".html")


def test_a_series_page_charts_and_tables_its_bytes_in_one_unit(sample_site):
    """jit__fun's entry bytes before optimizations reach 1.17 MiB while its other byte figures are
    KiB: the panels said "1.168 MiB" above a table of KiB and MiB. One unit now, the chart's and
    the table's (the largest in four digits: 1196 KiB)."""
    page = _series_page(sample_site, "jax-pmap/jit__fun/xla_hlo/before_optimizations")
    [spec] = _chart_specs(sample_site, page).values()
    drawn = points(spec)
    units = {m for r in drawn for m in re.findall(r"\((B|KiB|MiB|GiB)\)$", r["k"])}
    units |= {r["l"].split()[-1] for r in drawn if r["l"].endswith("B")}
    cells = re.findall(r'<td class="ds-num">([^<]*)</td>', (sample_site.out / page).read_text())
    units |= {c.split()[-1] for c in cells if c.endswith("B")}
    assert units == {"KiB"}
    assert sorted({r["l"] for r in drawn if r["l"].endswith("KiB")}) == ["1196 KiB", "1201 KiB"]
    # A series page draws the figures that moved: jit__fun after optimizations held one module, one
    # all-reduce and no custom call in every run (no panel), and stepped its fusions and launches.
    page = _series_page(sample_site, "jax-pmap/jit__fun/xla_hlo/after_optimizations")
    [spec] = _chart_specs(sample_site, page).values()
    panels: dict[str, set] = {}
    for r in points(spec):
        panels.setdefault(r["k"], set()).add(r["y"])
    assert all(len(values) > 1 for values in panels.values()), panels
    assert "hlo.modules" not in panels and "kernel.collectives" not in panels and "kernel.launches" in panels


def test_collectives_are_charted_and_tabled_at_the_same_stage(sample_site):
    """The kernels page charted collectives before XLA's optimizations (jit__fun: 9) while the
    overview's table says after (1). Each stage is now a section of its own, its chart (or the
    sentence saying nothing moved) and its table of that stage."""
    page = html.unescape((sample_site.out / "kernels.html").read_text())
    after = page[page.index('id="collectives-xla-after-optimizations"'):page.index('id="collectives-xla-before-optimizations"')]
    before = page[page.index('id="collectives-xla-before-optimizations"'):]
    before = before[:before.index("<h3")]
    assert "No program's kernel.collectives moved in the runs shown" in after
    row = re.search(r"jax-pmap/<wbr>jit__fun</a></td>\s*<td[^>]*>.*?</td>\s*<td[^>]*>(\d+)</td>", after, re.S)
    assert row and row.group(1) == "1"
    specs = _chart_specs(sample_site, "kernels.html")
    [chart_id] = re.findall(r'id="(chart-\d+)"', before)
    assert specs[chart_id]["title"].startswith("Collectives (XLA, before optimizations)")
    assert [r["l"] for r in points(specs[chart_id]) if r["l"]] == ["9"]


def test_search_finds_every_incident_run_and_series_by_its_id_and_name(sample_site):
    """Incident, run and series pages were left out of the search index, and 57 of its 149
    documents were the query page's (a table each). Each of those pages is now one document that
    names it, its later sections left out (``data-search-exclude``) and boosted above the pages
    that mention it; the query page is a document a section."""
    from transforms.site.data import incident_file, run_file

    index = json.loads((sample_site.out / "search" / "search_index.json").read_text())
    docs: dict[str, list[dict]] = {}
    for d in index["docs"]:
        docs.setdefault(d["location"].split("#")[0], []).append(d)
    incidents = sorted(p.name for p in (sample_site.out / "incidents").glob("i-*.html"))
    assert len(incidents) == 24
    for name in incidents:
        [doc] = docs[f"incidents/{name}"]
        incident_id = "I-" + name.split("-")[1]
        assert doc["title"] == f"Incident {incident_id}" and doc["boost"] == 4, doc
        assert incident_file(incident_id).replace(".md", ".html") == f"incidents/{name}"
    for run in ("2026-11-17", "2026-11-18", "2026-11-19", "2026-11-20"):
        [doc] = docs[run_file(run).replace(".md", ".html")]
        assert doc["title"] == f"Run {run}" and "This run:" in doc["text"]
    pages = sorted(p for p in (sample_site.out / "series").glob("*.html") if p.name != "index.html")
    assert len(pages) == 26
    for page in pages:
        [doc] = docs[f"series/{page.name}"]
        series = re.search(r"Series <code>([^<]+)</code>", doc["text"]).group(1)
        job, program = series.split("/")[:2]
        assert doc["title"].startswith(f"{job} / {program} · "), doc
    [doc] = docs[_series_page(sample_site, SERIES)]
    assert SERIES in doc["text"] and "Latest values" not in doc["text"]
    assert [d["title"] for d in docs["query.html"]] == [
        "Query the warehouse", "What the records tables hold", "Examples", "Tables and columns"]
    assert "buffer_allocations" in docs["query.html"][-1]["text"]  # a table's name still finds its section
    assert index["config"]["separator"] == r"[\s\-/]+"


def test_the_query_page_publishes_no_path_of_the_machine_and_an_example_it_holds(sample_site, sample_warehouse):
    """It named the warehouse by its absolute path on the machine that built the site, and its
    example followed 'jax-jit/jit_train_step/xla_buffer_assignment/%' in any warehouse."""
    import duckdb

    page = html.unescape((sample_site.out / "query.html").read_text())
    assert str(sample_warehouse.parent) not in page and "<code>warehouse.duckdb</code>" in page
    series, metric = re.search(r"WHERE series = '([^']+)' AND metric = '([^']+)'", page).groups()
    assert (series, metric) == ("jax-pmap/jit__fun/xla_buffer_assignment/buffer_assignment", "memory.temp_bytes")
    with duckdb.connect(str(sample_warehouse), read_only=True) as con:
        found = con.execute("SELECT count(*) FROM figure_status WHERE series = ? AND metric = ?", [series, metric]).fetchall()
    assert found == [(4,)]


def _lead(page: str) -> str:
    """What an incident page says before its first section."""
    article = page[page.index("<article"):]
    return article[:article.index("<h2")]


def test_an_incident_page_starts_with_what_it_is_in_short_lines(sample_site):
    """Its facts were a table whose header row was empty, and its impact's 57-word explanation
    came second on a phone's first screen. Now a line a fact, the explanation at the page's end."""
    for path in sorted((sample_site.out / "incidents").glob("i-*.html")):
        page = path.read_text()
        assert "<th></th>" not in page, path.name
        lead = _lead(page)
        blocks = [re.sub(r"<[^>]+>", " ", b) for b in re.findall(r"<(?:p|li|td)\b[^>]*>(.*?)</(?:p|li|td)>", lead, re.S)]
        assert max(len(b.split()) for b in blocks) <= 40, (path.name, max(blocks, key=lambda b: len(b.split())))
        assert 'id="impact"' in page and "<li><strong>impact</strong>" in lead, path.name


def test_a_still_open_incident_leads_with_what_is_still_open(sample_site):
    """I-e672331c opened with fallback kernels (0 -> 1) and Inductor buffer bytes; the fallbacks were
    fixed in 2026-11-20, the buffer bytes not. Its headline led with the fallbacks on the overview,
    the incidents index and its page."""
    want = ("torch-inductor / model__0_forward: memory.buffer_bytes 37.3 KiB → 123.5 KiB (+86.2 KiB); "
            "6 steps fixed since it opened")
    page = next((sample_site.out / "incidents").glob("i-e672331c-*.html"))
    for path in (page, sample_site.out / "index.html", sample_site.out / "incidents" / "index.html"):
        text = html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))
        assert want in text, path.name
    assert "kernel.fallback 0 → 1" not in html.unescape(_lead(page.read_text()))
    # A closed incident keeps the headline it opened with.
    fixed = html.unescape(next((sample_site.out / "incidents").glob("i-662b25a4-*.html")).read_text())
    assert "dynamo.graph_breaks 0 → 2 (+2); dynamo.compiles 1 → 3 (+2); +1 more" in fixed


@pytest.mark.parametrize("largest, unit", [(0, "B"), (9999, "B"), (10_000, "KiB"), (7 * MiB, "KiB"), (300 * MiB, "MiB"),
                                           (float("nan"), "B")])
def test_a_table_or_chart_takes_the_unit_its_largest_figure_reads_in_four_digits(largest, unit):
    from transforms.units import byte_unit, value_in

    assert byte_unit(largest)[0] == unit
    assert value_in("memory.temp_bytes", 546 * KiB, byte_unit(7 * MiB)) == "546 KiB"
    assert value_in("memory.temp_bytes", 30 * KiB, byte_unit(300 * MiB)) == "0.0293 MiB"
    assert value_in("kernel.launches", 1234, byte_unit(300 * MiB)) == "1,234"


def test_a_step_a_revert_reopened_is_open_again_and_fixed_between():
    """A step's row is one life of it: a revert reopens a fixed step in a row of its own
    (``reopened_run``). temp_bytes was fixed in run 3 and reopened by a revert in run 5, live_out
    stayed open: run 4's pages lead with live_out, one step fixed; from run 5 both are open again
    and the incident keeps the headline it opened with (the second life is not one more open step,
    nor the first one a fixed one)."""
    from types import SimpleNamespace

    from transforms.site.pages import _Headlines
    from transforms.trends.incident_walk import STEP_SCHEMA

    def step(metric: str, baseline: float, value: float, **life) -> dict:
        return {"incident_id": "I-1a2b3c4d", "job": "jax-jit", "program": "train", "series": SERIES, "dump_kind": "xla_buffer_assignment",
                "stage": "buffer_assignment", "metric": metric, "step": "regression", "opened_run": "r1", "last_good_run": "r0",
                "baseline": baseline, "value": value, "change": value - baseline, "impact": 1.0, **life}

    steps = pl.DataFrame([step("memory.temp_bytes", 100 * KiB, 300 * KiB, closed_run="r3", closed_how="fixed", reverted=True),
                          step("memory.temp_bytes", 100 * KiB, 300 * KiB, reopened_run="r5"),
                          step("memory.live_out_bytes", 80 * KiB, 150 * KiB)], schema=STEP_SCHEMA)
    runs = pl.DataFrame({"run_id": [f"r{n}" for n in range(7)], "run_seq": list(range(7))})
    incident = {"incident_id": "I-1a2b3c4d", "job": "jax-jit", "program": "train", "headline": "as it opened"}
    headlines = _Headlines(SimpleNamespace(steps=steps, runs=runs))
    fixed_one = "jax-jit / train: memory.live_out_bytes 80.0 KiB → 150.0 KiB (+70.0 KiB); 1 step fixed since it opened"
    assert [headlines.at(incident, "open", f"r{n}") for n in range(1, 7)] == [
        "as it opened", "as it opened", fixed_one, fixed_one, "as it opened", "as it opened"]
