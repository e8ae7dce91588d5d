"""The site's compile page (TORCH_TRACE logs) and compile seconds in the overview's headline figures.

The sample site (``sample_site``: the sample bucket's torch-trace job, data/README.md: 2 graph breaks
on 2026-11-19, fixed on 2026-11-20), a night of real logs with a recompile and a failed compile
(tests/fixtures/torch_trace, figures from torch's own ``CompilationMetrics``), and a real log whose
graph-break reason and user frame were rewritten into payloads (its MD5 recomputed, so the parser
reads it as torch wrote it).
"""

from __future__ import annotations

import gzip
import hashlib
import html
import json
import re
import shutil
from pathlib import Path

import polars as pl

from tests.test_torch_trace import FIX

SERIES = "series/torch-trace-forward-at-dumpscope-model-py-19-torch-trace-tra-e13a9e8c38b9e9c9.html"
VIEW = SERIES.replace("series/", "compiles/")  # its compile view
SRC = "/tmp/dumpscope-torch-trace/src/dumpscope_model.py"
LOG_19 = "2026-11-19/torch-trace/dedicated_log_torch_trace_p9d42glu.log.gz"
IMG = "<img src=x onerror=alert(31)>"
JS_LINK = "[x](javascript:alert(1))"


def _text(fragment: str) -> str:
    """What a reader sees of an HTML fragment: line breaks and blocks as spaces, inline tags gone."""
    spaced = re.sub(r"<(?:br|/?(?:p|div|td|th|tr|li|h\d)\b)[^>]*>", " ", fragment)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", spaced)).split())


def _tables(page: str) -> dict[str, list[list[str]]]:
    """Each table of a built page under its section's heading (h2/h3 text), rows as cell texts
    (header row first)."""
    out: dict[str, list[list[str]]] = {}
    for part in re.split(r"(?=<h[23] )", page):
        heading = re.match(r"<h[23][^>]*>(.*?)</h[23]>", part, re.S)
        for table in re.findall(r"<table>(.*?)</table>", part, re.S):
            rows = [[_text(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
                    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]
            out.setdefault(_text(heading.group(1)).rstrip("¶ ") if heading else "", []).extend(rows)
    return out


def _section(page: str, heading: str) -> str:
    """The text of a built page's h2 section (up to the next h2)."""
    part = page.split(f'<h2 id="{heading}">', 1)[1].split("<h2 ", 1)[0]
    return _text(part)


def test_the_compile_page_lists_the_latest_runs_programs_with_their_figures(sample_site):
    page = (sample_site.out / "compile.html").read_text()
    tables = _tables(page)
    # 2026-11-20 (graph_break_removed, data/README.md): one compile of 12.0 s (Inductor 12.3 s), 46 guards,
    # 2 FX cache misses; against 2026-11-19: 3 compiles, 15.3 s, 16.2 s, 2 breaks, 73 guards, 5 misses.
    assert tables["Programs, run 2026-11-20"] == [
        ["program", "compile view", "compiles", "compile s", "Inductor s", "graph breaks", "recompiles", "failures",
         "guards", "cache hits", "cache misses", "kernels"],
        ["torch-trace/forward at dumpscope_model.py:19", "view", "1 (-2)", "12 (-3.34)", "12.3 (-3.93)", "0 (-2)", "0", "0",
         "46 (-27)", "0", "2 (-3)", "3 (-3)"]]
    programs = page.split('id="programs-run-2026-11-20"', 1)[1]
    assert f'href="{SERIES}"' in programs and f'href="{VIEW}"' in programs
    # The kernels lead to the compile that generated them, on the view.
    assert re.search(rf'<a href="{re.escape(VIEW)}#compile-[a-z0-9-]+">3 \(-3\)</a>', programs)
    # Compile seconds and graph breaks over the runs are drawn; recompiles and failures (0 in every run) say so.
    charts = re.findall(r'class="ds-chart vega-embed" id="chart-\d+" role="img" aria-label="([^"]*)"', page)
    assert [html.unescape(c) for c in charts] == ["Compile seconds (Dynamo's whole frame, Inductor included)",
                                                  "Compile seconds by phase", "Graph breaks"]
    assert "Every program shows 0 for dynamo.recompiles in the runs shown: nothing to draw." in _text(page)
    assert "Every program shows 0 for dynamo.failures in the runs shown: nothing to draw." in _text(page)
    nav = (sample_site.out / "index.html").read_text()
    assert nav.index('href="kernels.html"') < nav.index('href="compile.html"') < nav.index('href="onnx.html"')


def test_the_latest_runs_program_has_a_compile_view_of_its_compiles_and_their_artifacts(sample_site):
    """2026-11-20's log (graph_break_removed): its one compile [0/0] with its phases, its artifacts' texts
    one click away (closed blocks, escaped into <pre>), its guards and the stack that led to it; one search
    entry; and the phase chart beside the compile seconds on the compile page."""
    view = (sample_site.out / VIEW).read_text()
    tables = _tables(view)
    assert tables["Compiles"][0] == ["id", "status", "why", "compile s", "Dynamo", "AOT/Inductor", "code gen",
                                     "lazy backward", "guards (shape env)", "kernels", "cache", "line"]
    assert [row[:2] + row[3:] for row in tables["Compiles"][1:]] == [
        ["[0/0]", "ok", "11.975", "0.167", "0.813", "10.995", "0.974", "46 (0)", "3", "FX 0/1, AOT 0/1", "3818"]]
    summaries = [_text(s) for s in re.findall(r'<details class="ds-artifact"><summary>(.*?)</summary>', view, re.S)]
    assert summaries[:3] == ["The stack that led to it (dynamo_start)", "dynamo_output_graph · 1,790 bytes · lines 117–139",
                             "aot_joint_graph · 5,282 bytes · lines 426–491"]
    assert summaries[-1] == "Guards: 54 rows (guard_count 46, shape env 0)"
    blocks = [html.unescape(b) for b in re.findall(r"<pre><code>(.*?)</code></pre>", view, re.S)]
    assert any(b.startswith("class GraphModule(torch.nn.Module):") for b in blocks)
    assert any('File "dumpscope_model.py", line 19, in forward' in b for b in blocks)
    page = (sample_site.out / "compile.html").read_text()
    charts = re.findall(r'class="ds-chart vega-embed" id="chart-\d+" role="img" aria-label="([^"]*)"', page)
    assert html.unescape(charts[1]) == "Compile seconds by phase"
    search = json.loads((sample_site.out / "search" / "search_index.json").read_text())["docs"]
    assert [d["title"] for d in search if d["location"].startswith("compiles/")] == [
        "Compiles of torch-trace/forward at dumpscope_model.py:19"]


def test_the_graph_break_reasons_of_the_night_that_has_them_are_counted_with_their_user_frames(sample_site):
    page = (sample_site.out / "compile.html").read_text()
    assert _tables(page)["Graph-break reasons"] == [
        ["run", "reason", "count", "user frames", "program", "first in the log"],
        ["2026-11-19", "Data-dependent branching Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`). "
         "Dynamo does not support tracing dynamic control flow.", "1", "dumpscope_model.py:22 in forward",
         "forward at dumpscope_model.py:19", f"{LOG_19} lines 3855–3899"],
        ["2026-11-19", "Failed to trace builtin operator Dynamo does not know how to trace builtin operator `print` "
         "with argument types ['str'] (has_kwargs False)", "1", "dumpscope_model.py:21 in forward",
         "forward at dumpscope_model.py:19", f"{LOG_19} lines 71–143"]]
    breaks = _section(page, "graph-break-reasons")
    assert breaks.endswith("No graph break in runs 2026-11-20 (latest), 2026-11-18, 2026-11-17.")
    assert "No recompile in runs 2026-11-20 (latest), 2026-11-19, 2026-11-18, 2026-11-17." in _section(page, "recompile-reasons")
    assert "No failed compile in runs 2026-11-20 (latest)" in _section(page, "compile-failures")
    # The fix's vanished breaks, as the diff page says them.
    changes = _section(page, "what-changed-since-the-previous-run")
    assert "graph break 'Data-dependent branching' at dumpscope_model.py:22 in forward vanished (was ×1)" in changes


def test_the_overview_shows_each_jobs_compile_seconds(sample_site):
    (head, *rows) = _tables((sample_site.out / "index.html").read_text())["Headline figures"]
    assert head[-1] == "compile s"
    got = {row[0]: row[-1] for row in rows}
    # 11.975 s on 2026-11-20 against 15.315 s on 2026-11-19; the other jobs ship no TORCH_TRACE log.
    assert got == {"jax-jit": "", "jax-pmap": "", "torch-inductor": "", "torch-onnx": "",
                   "torch-trace": "12 -3.34 (-21.8 %)"}


def test_a_ranked_jobs_compile_seconds_are_its_slowest_ranks():
    from transforms.site.pages import _slowest_rank

    totals = pl.DataFrame({"job": ["a", "a", "a", "b"], "stage": ["rank_0", "rank_1", "rank_1", "trace"],
                           "metric": ["dynamo.compile_seconds", "dynamo.compile_seconds", "dynamo.guards",
                                      "dynamo.compile_seconds"], "value": [3.0, 7.5, 40.0, 2.0]})
    got = _slowest_rank(totals).sort("job", "metric").rows()
    assert got == [("a", "rank_1", "dynamo.compile_seconds", 7.5), ("a", "rank_1", "dynamo.guards", 40.0),
                   ("b", "trace", "dynamo.compile_seconds", 2.0)]


# --- reasons, counted, from logs with a recompile and a failure; hostile reasons ---


def _night(root: Path, jobs: dict[str, Path]) -> Path:
    """A warehouse of one night (2026-10-01) of ``jobs`` (job -> log), built without Prefect."""
    from flows.nightly import night_in_process

    run = root / "bucket" / "2026-10-01"
    for job, log in jobs.items():
        (run / job).mkdir(parents=True)
        shutil.copy(log, run / job / log.name)
    (run / "run.json").write_text(json.dumps({"started_at": "2026-10-01T02:00:00+00:00", "commit": "c1"}))
    night_in_process(bucket=str(root / "bucket"), warehouse=root / "wh.duckdb", report_path=root / "report.md")
    return root / "wh.duckdb"


def _compile_markdown(warehouse: Path) -> str:
    """The compile page's Markdown as the site renders it (its reads, its context, its environment)."""
    from flows.publish.site import _environment, read_site_data
    from transforms.site.sections import compile_page

    data = read_site_data(warehouse)
    return _environment(data).get_template("compile.md.j2").render(**compile_page(data))


def _log(case: str) -> Path:
    (log,) = sorted((FIX / case).glob("dedicated_log_torch_trace_*.log.gz"))
    return log


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells as a reader sees them (links as their text, tags dropped, references
    read: a `[`, `]` or `|` of a value is a reference, so these are the page's own)."""
    return [_text(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", c)) for c in row.strip().strip("|").split("|")]


def _md_row(markdown: str, starts: str) -> list[str]:
    (row,) = [line for line in markdown.splitlines() if line.startswith(starts)]
    return _cells(row)


def test_recompile_and_failure_reasons_are_torchs_own(tmp_path):
    recompile, failure = _log("recompile"), _log("compile_failure")
    markdown = _compile_markdown(_night(tmp_path, {"shapes": recompile, "backend": failure}))
    figures = {log: json.loads((log.parent / "torch_figures.json").read_text())[log.name]["compilation_metrics"]
               for log in (recompile, failure)}
    (recompiled,) = [m for m in figures[recompile] if m["recompile_reason"]]
    (failed,) = [m for m in figures[failure] if m["fail_type"]]
    row = _md_row(markdown.split("## Recompile reasons", 1)[1].split("## Compile failures")[0], "| [2026-10-01]")
    assert row[1:4] == [recompiled["recompile_reason"].split(": ", 1)[1], "1",
                        # the user frame by its file's name: its folder is the process's (docs/trends.md)
                        f"{Path(recompiled['co_filename']).name}:{recompiled['co_firstlineno']} in {recompiled['co_name']}"]
    row = _md_row(markdown.split("## Compile failures", 1)[1], "| [2026-10-01]")
    # torch's whole message on one line (it is short: the page clips at 300 characters); torch names no user
    # frame for it: the function.
    message = " ".join(failed["fail_reason"].split())
    assert len(message) < 300 and failed["fail_user_frame_filename"] is None
    assert row[1:4] == [f"{failed['fail_type']} {message}", "1", "forward"]


def _rewritten(log: Path, out: Path, lines: dict[str, str], records: dict[str, str] | None = None) -> Path:
    """``log`` with payload lines replaced (old -> new text), record lines too (``records``: their JSON's
    text), and each changed payload's MD5 recomputed."""
    text = gzip.decompress(log.read_bytes()).decode().split("\n")
    record = None
    payload: list[int] = []

    def seal() -> None:
        if record is not None and payload:
            digest = hashlib.md5("\n".join(text[i][1:] for i in payload).encode()).hexdigest()
            text[record] = re.sub(r'"has_payload": "[0-9a-f]+"', f'"has_payload": "{digest}"', text[record])

    for i, line in enumerate(text):
        if line.startswith("\t"):
            payload.append(i)
            for old, new in lines.items():
                text[i] = text[i].replace(old, new)
        else:
            seal()
            record, payload = (i if '"has_payload"' in line else None), []
            for old, new in (records or {}).items():
                text[i] = text[i].replace(old, new)
    seal()
    out.mkdir(parents=True, exist_ok=True)
    target = out / log.name
    target.write_bytes(gzip.compress("\n".join(text).encode()))
    return target


def test_a_hostile_reason_and_frame_are_escaped_for_each_context(tmp_path):
    hostile_reason = f"Failed {IMG} a|b {JS_LINK} {{{{7*7}}}}"
    hostile_file = f"/tmp/{IMG}|{JS_LINK}/m.py"
    log = _rewritten(_log("graph_break"), tmp_path / "logs", {
        "Failed to trace builtin operator": hostile_reason, f"{SRC}:21": f"{hostile_file}:21"})
    warehouse = _night(tmp_path, {"hostile": log})
    markdown = _compile_markdown(warehouse)
    row = [line for line in markdown.splitlines() if "alert(31)" in line]
    assert len(row) == 1  # the one break of the rewritten payload, in its table's row
    assert "<img" not in row[0] and "](javascript:" not in row[0] and "{{" not in row[0]
    assert row[0].count("|") == 7  # six cells: the reason's and the path's bars are character references
    cells = _cells(row[0])
    assert cells[1].startswith(hostile_reason) and cells[3] == f"{hostile_file}:21 in forward"
    # Built by mkdocs: the payloads are text in their cells, no element or link grew from them.
    from flows.publish.site import build_site

    page = (build_site(warehouse, tmp_path / "site").out / "compile.html").read_text()
    (table,) = [rows for heading, rows in _tables(page).items() if heading == "Graph-break reasons"]
    assert [r[1].startswith(hostile_reason) for r in table[1:]] == [False, True]  # {{7*7}} too, as written
    assert [r[3] for r in table[1:]] == ["dumpscope_model.py:22 in forward", f"{hostile_file}:21 in forward"]
    assert "<img src=x" not in page and 'href="javascript:' not in page


def test_one_reason_from_two_frames_is_one_row_counted_with_each_frame(tmp_path):
    """The log's `print` break rewritten into the same reason and explanation as its data-dependent
    branch: one reason, counted twice, from lines 21 and 22, first at the `print` break's lines."""
    log = _rewritten(_log("graph_break"), tmp_path / "logs", {
        "Failed to trace builtin operator": "Data-dependent branching",
        "Explanation: Dynamo does not know how to trace builtin operator `print` with argument types ['str'] "
        "(has_kwargs False)": "Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`). "
        "Dynamo does not support tracing dynamic control flow."})
    markdown = _compile_markdown(_night(tmp_path, {"twice": log}))
    breaks = markdown.split("## Graph-break reasons", 1)[1].split("## Recompile reasons")[0]
    assert _md_row(breaks, "| [2026-10-01]") == [
        "2026-10-01 (latest)", "Data-dependent branching Detected data-dependent branching (e.g. `if my_tensor.sum() > "
        "0:`). Dynamo does not support tracing dynamic control flow.", "2",
        "dumpscope_model.py:21 in forward (×1) dumpscope_model.py:22 in forward (×1)", "forward at dumpscope_model.py:19",
        f"2026-10-01/twice/{log.name} lines 71–143"]


def _render(data) -> str:
    from flows.publish.site import _environment
    from transforms.site.sections import compile_page

    return _environment(data).get_template("compile.md.j2").render(**compile_page(data))


def test_without_torch_trace_logs_the_page_says_so_in_one_line(sample_warehouse):
    from flows.publish.site import read_site_data

    data = read_site_data(sample_warehouse)
    data.trends = data.trends.filter(pl.col("kind") != "torch_trace")
    data.trace_dumps = data.trace_dumps.clear()
    body = [line for line in _render(data).split("# Compile\n", 1)[1].splitlines() if line.strip()]
    assert body == ["No TORCH_TRACE log in the runs shown: this page reads `torch.compile`'s structured traces "
                    "(`TORCH_TRACE=<dir>`)."]


def test_reasons_of_logs_whose_records_are_gone_are_not_called_none(sample_warehouse):
    from flows.publish.site import read_site_data

    data = read_site_data(sample_warehouse)
    data.trace_dumps = data.trace_dumps.with_columns(pl.lit(False).alias("held"))
    markdown = _render(data)
    gone = "The records tables no longer hold the rows of any TORCH_TRACE log shown (`[warehouse] keep_records_runs`)."
    assert markdown.count(gone) == 3 and "No graph break in" not in markdown
    assert "| run | reason |" not in markdown and "## Programs, run 2026-11-20" in markdown  # figures stay


def test_what_changed_lists_each_compiles_changes_since_the_previous_run(sample_site):
    """Issue 46: the compile page says what changed in each compile since the night before, not only its
    reasons: 2026-11-20 rewrote the graph break of 2026-11-19 (graph_break_removed): its restarted compile
    (forward/0_1: 2 graph ops before the break) and the two resume functions' compiles vanished, one compile of
    the whole forward (7 ops) appeared; a compile that appears or vanishes is one line, not its guards."""
    page = (sample_site.out / "compile.html").read_text()
    rows = _tables(page)["What changed since the previous run"]
    assert rows[0] == ["job", "program", "dump", "change"]
    assert [r[3] for r in rows[1:]] == [
        "compile forward/0 appeared (7 graph ops)", "compile forward/0_1 vanished (was 2 graph ops)",
        "compile torch_dynamo_resume_in_forward_at_21/0 vanished (was 2 graph ops)",
        "compile torch_dynamo_resume_in_forward_at_22/0 vanished (was 2 graph ops)",
        "graph break 'Data-dependent branching' at dumpscope_model.py:22 in forward vanished (was ×1)",
        "graph break 'Failed to trace builtin operator' at dumpscope_model.py:21 in forward vanished (was ×1)"]
