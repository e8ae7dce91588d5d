"""One verdict on every page: each incident's status and kind read the same in the site (overview,
run pages, the incidents index, incident and series pages), the night's summary, the CLI (table
and JSON) and SQL (incidents_at), for every run of the sample; and no page calls a figure with an
open regression "improved" (no page says "improved" at all: an improvement is an incident's kind)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.verdict import incident_reader
from flows.cli import app
from flows.warehouse.store import connect_readonly
from transforms.site.data import series_file
from transforms.trends.night_report import night_markdown

ID = r"I-[0-9a-f]{8}"


@pytest.fixture(scope="module")
def site(sample_site) -> Path:
    return sample_site.out


def _text(page: Path) -> str:
    """The page's text, as a reader sees it (a ``<wbr>`` is a place to wrap, not a space)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text().replace("<wbr>", ""))).split())


def _truth(warehouse: Path) -> tuple[list[str], dict[str, dict[str, tuple[str, str]]]]:
    """Runs, and per run: incident id -> (status, kind), from incidents_at."""
    with connect_readonly(warehouse) as con:
        runs = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY started_at, run_id").fetchall()]
        return runs, {r: {i: (s, k) for s, k, i in incident_reader.incidents_at(con, r).select("status", "kind", "incident_id").rows()}
                      for r in runs}


def _listed(text: str) -> dict[str, tuple[str, str]]:
    """Incident id -> (status, kind) as a page's incident lists print them: "I-… · kind · status"."""
    return {i: (s, k) for i, k, s in re.findall(rf"({ID}) · (regression|failure|improvement) · (new|open|fixed|accepted|lost)", text)}


@pytest.mark.slow  # builds a site or several warehouses: seconds
def test_every_page_the_summary_and_the_cli_say_the_same_status_and_kind(site, sample_warehouse):
    runs, truth = _truth(sample_warehouse)
    with connect_readonly(sample_warehouse) as con:
        commits = {r: incident_reader.run_commit(con, r) for r in runs}
        at = {r: incident_reader.incidents_at(con, r) for r in runs}
    for run in runs:
        shown = {i: sk for i, sk in truth[run].items() if not (sk[0] == "open" and sk[1] == "improvement")}
        # The run's page: every incident of its lists, with its status and kind.
        assert _listed(_text(site / "runs" / f"{run}.html")) == shown, run
        # The summary: each entry in the list of its status, its kind written out.
        summary = night_markdown(run, commits[run], at[run])
        sections = {"New": "new", "Fixed": "fixed", "Accepted": "accepted", "Still open": "open", "Improvements": "new",
                    "Improvements lost": "lost"}
        said, section = {}, None
        for line in summary.splitlines():
            if line.startswith("## "):
                section = sections[line[3:]]
            elif m := re.match(rf"### .* · (\w+) · <code>({ID})</code>", line):
                said[m[2]] = (section, m[1])
            elif m := re.match(rf"- <code>({ID})</code> (\w+): ", line):
                said[m[1]] = (section, m[2])
        assert said == shown, run
        # The CLI: the same statuses and kinds, by --status, as a table and as JSON.
        cli = {}
        for status in ("new", "open", "fixed", "accepted", "lost", "improvements"):
            out = CliRunner().invoke(app, ["incidents", "--run", run, "--status", status, "--format", "json",
                                           "--warehouse", str(sample_warehouse)])
            assert out.exit_code == 0, out.output
            cli |= {r["incident_id"]: (r["status"], r["kind"]) for r in json.loads(out.output)}
        assert cli == truth[run], run
        table = CliRunner().invoke(app, ["incidents", "--run", run, "--status", "open", "--warehouse", str(sample_warehouse)])
        rows = dict(re.findall(rf"│ ({ID}) │ (\w+)\s+│", table.output))
        assert rows == {i: s for i, (s, k) in truth[run].items() if s in ("new", "open") and k != "improvement"}, run
    latest = runs[-1]
    assert _listed(_text(site / "index.html")) == {
        i: sk for i, sk in truth[latest].items() if not (sk[0] == "open" and sk[1] == "improvement")}
    # Every incident ever: its last status (the latest run's, or how it closed), the same on its page,
    # the incidents index, the series pages of its steps, and in `incidents --status all`.
    every = CliRunner().invoke(app, ["incidents", "--status", "all", "--format", "json", "--warehouse", str(sample_warehouse)])
    last = {r["incident_id"]: (r["status"], r["kind"]) for r in json.loads(every.output)}
    assert all(s for s, _ in last.values())  # every status filled
    index = _text(site / "incidents" / "index.html")
    for iid, (status, kind) in last.items():
        page = next((site / "incidents").glob(f"{iid.lower()}-*.html"))
        assert f"· {kind} · {status}" in _text(page), iid
        assert re.search(rf"{iid} .*? {kind} \S+ {status}\b", index), iid
    with connect_readonly(sample_warehouse) as con:
        pairs = con.execute("SELECT DISTINCT incident_id, series FROM incident_steps").fetchall()
    for iid, series in pairs:
        text = _text(site / series_file(series).replace(".md", ".html"))
        status, kind = last[iid]
        assert re.search(rf"{iid} {kind} {status}\b", text), (iid, series)


def test_no_page_calls_a_figure_improved_and_open_regressions_read_as_such(site, sample_warehouse):
    for page in site.rglob("*.html"):
        if page.name in ("metrics.html", "trends.html", "site.html"):  # the documentation
            continue
        assert not re.search(r"\bimproved\b", _text(page)), page
    # The series pages' tables: each figure's open step, as figure_status says at the latest run.
    with connect_readonly(sample_warehouse) as con:
        rows = con.execute("""SELECT series, metric, step, incident_id FROM figure_status
                              WHERE run_id = (SELECT max(run_id) FROM runs) AND step IS NOT NULL""").fetchall()
    assert len(rows) > 20
    for series, metric, step, iid in rows:
        text = _text(site / series_file(series).replace(".md", ".html"))
        assert re.search(rf"{re.escape(metric)} \S+ .{{0,40}}?{step} {iid}", text), (series, metric)
