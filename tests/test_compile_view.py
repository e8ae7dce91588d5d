"""The compile view (issue 46): the texts the parser keeps of each compile's artifacts
(``torch_trace_artifacts.text``) and each program's view (``transforms/site/compile_view.py``),
from the real logs of tests/fixtures/torch_trace and data/corpus/torch_trace. The expected side
is read from the logs with json alone (``tests/test_torch_compiles._records``), never from the
parser; the views are built from the parser's frames as the site reads them (fast: no warehouse)."""

from __future__ import annotations

import gzip
import html
import io
import json
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_torch_compiles import LOGS, _id, _parsed, _records, _table
from transforms.parse import parse_dump
from transforms.volatile import normalise_text

_METRICS = ("compilation_metrics", "bwd_compilation_metrics", "compilation_metrics_runtime",
            "bwd_compilation_metrics_runtime")


def _log(case: str) -> Path:
    return next(p for p in LOGS if p.parent.name == case)


def _kept_kinds() -> frozenset[str]:
    from transforms.parsers import torch_trace

    return torch_trace.KEPT_TEXTS


def _payload_texts(text: str, artifact_bytes: int, log_bytes: int) -> dict[int, tuple[str | None, int, bool | None]]:
    """line -> (text, its lines, cut) of each artifact with a payload whose kind's text is kept, as the
    rule says: its first ``artifact_bytes`` (cut at a line's end), the log's first ``log_bytes``."""
    kept, left = {}, log_bytes
    for lineno, rec, payload, _ in _records(text):
        if not rec or not rec.get("has_payload"):
            continue
        name = next(iter(rec))
        kind = rec[name].get("name") if name == "artifact" else name
        if kind not in _kept_kinds():
            continue
        room = min(artifact_bytes, left)
        if room <= 0:
            kept[lineno] = (None, 0, True)
            continue
        body = "\n".join(payload).encode()
        cut = len(body) > room
        if cut:
            body = body[:room]
            body = body[:body.rfind(b"\n")] if body.rfind(b"\n") > 0 else body
        left = 0 if cut and room < artifact_bytes else left - len(body)
        words = body.decode("utf-8", "ignore")
        kept[lineno] = (normalise_text(words), words.count("\n") + 1 if cut else len(payload), cut)
    return kept


@pytest.mark.parametrize("path", LOGS, ids=_id)
def test_the_texts_of_a_logs_graphs_code_and_guards_are_its_payloads_normalised(path):
    from transforms.parsers.torch_trace import ARTIFACT_TEXT_BYTES, LOG_TEXT_BYTES

    text, tables = _parsed(path)
    arts = _table(tables, "torch_trace_artifacts").filter(pl.col("payload_lines") > 0)
    got = {r["lineno"]: (r["text"], r["text_lines"], r["text_cut"])
           for r in arts.iter_rows(named=True) if r["text"] is not None or r["text_cut"] is not None}
    assert got == _payload_texts(text, ARTIFACT_TEXT_BYTES, LOG_TEXT_BYTES)
    assert arts.filter(~pl.col("kind").is_in(list(_kept_kinds())))["text"].null_count() == arts.filter(
        ~pl.col("kind").is_in(list(_kept_kinds()))).height


# --- the views, from the parser's frames as the site reads them ---


def _site(*cases: str | Path, job: str = "job"):
    """SiteData of one run (r1) holding the logs of ``cases`` (a fixture's case, or a log), each at
    ``<case>/<log name>``: the latest run's compile rows, artifacts and guards as flows/publish/site.py
    reads them (a program's series ``<job>/<program>/torch_trace/<stage>``), and each program's figures."""
    from transforms.site.data import SiteData

    compiles, artifacts, guards, trends = [], [], [], []
    for case in cases:
        log = case if isinstance(case, Path) else _log(case)
        got = parse_dump(io.BytesIO(gzip.decompress(log.read_bytes())), log.name.removesuffix(".gz"))
        path, stage = f"{log.parent.name}/{log.name}", got.summary.stage
        t = got.tables
        kernels = (_table(t, "torch_trace_output_code").group_by("compile_id", "phase")
                   .agg(pl.col("kernels").sum()))
        rows = (_table(t, "torch_trace_compiles").filter(pl.col("phase").is_in(["forward", "backward"]))
                .join(kernels, on=["compile_id", "phase"], how="left"))
        series = pl.format("{}/{}/torch_trace/{}", pl.lit(job), "program", pl.lit(stage))
        compiles.append(rows.drop("dump_id", "parser_version").with_columns(
            pl.lit(path).alias("path"), pl.lit(stage).alias("stage"), series.alias("series"), pl.lit(job).alias("job"),
            pl.col("phase").cast(pl.String)))
        artifacts.append(_table(t, "torch_trace_artifacts").filter(pl.col("compile_id").is_not_null())
                         .drop("dump_id", "parser_version").with_columns(pl.lit(path).alias("path")))
        guards.append(_table(t, "torch_trace_guards").filter(pl.col("compile_id").is_not_null())
                      .drop("dump_id", "parser_version")
                      .with_columns(pl.lit(path).alias("path"), pl.col("source").cast(pl.String)))
        for program, figures in got.summary.programs.items():
            trends += [{"run_id": "r1", "series": f"{job}/{program}/torch_trace/{stage}", "job": job, "kind": "torch_trace",
                        "stage": stage, "program": program, "metric": m, "value": float(v), "delta": None,
                        "changed": True} for m, v in figures.items()]
    empty = pl.DataFrame()
    runs = pl.DataFrame({"run_id": ["r1"], "started_at": [None], "commit": ["c1"]},
                        schema={"run_id": pl.String, "started_at": pl.Datetime, "commit": pl.String}).with_row_index("run_seq")
    return SiteData(runs=runs, trends=pl.DataFrame(trends), events=empty, rollups=empty, totals=empty, diffs=empty,
                    accepts=empty, items=empty, allocations=empty, onnx_errors=empty, onnx_ops=empty, tables=empty,
                    columns=empty, warehouse_path="wh.duckdb", compile_rows=pl.concat(compiles, how="diagonal_relaxed"),
                    compile_artifacts=pl.concat(artifacts), compile_guards=pl.concat(guards))


def _views(*cases: str, **kw) -> dict[str, dict]:
    from transforms.site import compile_view

    return dict(compile_view.compile_views(_site(*cases, **kw)))


def _markdown(context: dict, data=None) -> str:
    from flows.publish.site import _environment

    return _environment(data).get_template("compile_view.md.j2").render(**context)


def test_the_plain_logs_compile_lists_its_artifacts_with_their_sizes_and_lines():
    """plain's one compile [0/0] (and its lazy backward): its figures, its 11 texts (graphs, output codes,
    guard tree, metrics), its 17 other artifacts and its 53 guards, each artifact with the log lines to read."""
    (view,) = _views("plain").values()
    [c] = view["compiles"]
    assert (c["id"], c["status"], c["seconds"], c["phases"], c["guards_count"], c["shape_guards"], c["kernels"],
            c["cache"], c["line"]) == (
        "[0/0]", "ok", "13.620", {"Dynamo": "0.188", "AOT/Inductor": "0.933", "code gen": "12.499", "lazy backward": "1.507"},
        "45", "0", "3", "FX 0/1, AOT 0/1", 3745)
    assert [(t["kind"], t["size"], t["lines"], t["note"]) for t in c["texts"]] == [
        ("dynamo_output_graph", "1,599 bytes", "lines 117–136", ""), ("aot_joint_graph", "4,315 bytes", "lines 417–474", ""),
        ("aot_forward_graph", "1,836 bytes", "lines 782–813", ""), ("aot_backward_graph", "2,516 bytes", "lines 814–850", ""),
        ("inductor_post_grad_graph", "1,417 bytes", "lines 1407–1425", ""),
        ("inductor_post_grad_graph", "2,103 bytes", "lines 4367–4390", ""),
        ("inductor_output_code", "5,664 bytes", "lines 1835–1963", ""),
        ("inductor_output_code", "8,658 bytes", "lines 4560–4743", ""),
        ("dynamo_cpp_guards_str", "17,200 bytes", "lines 3611–3695", ""),
        ("compilation_metrics", "its record", "line 3745", ""), ("bwd_compilation_metrics", "its record", "line 6252", "")]
    assert len(c["others"]) == 17 and ("fx_graph_cache_miss", "74,269 bytes", "lines 5549–5550") in [
        (o["kind"], o["size"], o["lines"]) for o in c["others"]]
    assert len(c["guards"]) == 53 and c["more_guards"] == 0
    # The texts are the log's: the Dynamo graph as torch printed it, its source line's folder dropped.
    graph = c["texts"][0]["text"]
    assert graph.startswith("class GraphModule(torch.nn.Module):\n    def forward(self, L_self_modules_l1_parameters_weight_")
    assert "# File: dumpscope_model.py:20 in forward, code: h = torch.relu(self.l1(x))" in graph
    metrics = c["texts"][9]["text"]
    assert '"co_name": "forward"' in metrics and '"guard_count": 45' in metrics and "inductor_config" not in metrics


def test_the_stack_that_led_to_a_compile_is_dynamo_starts_as_a_traceback():
    (view,) = _views("plain").values()
    assert view["compiles"][0]["stack"].split("\n")[-3:] == [
        'File "torch/_dynamo/eval_frame.py", line 1166, in compile_wrapper', "    result = fn(*args, **kwargs)",
        'File "dumpscope_model.py", line 19, in forward']
    assert view["compiles"][0]["stack"].startswith('File "generate_torch_traces.py", line 229, in <module>\n    main()\n')


def test_a_graph_breaks_restart_and_resume_compiles_are_the_programs_in_log_order():
    """graph_break: [0/0] restarted at the print (its reason), [0/0_1] its compile, the resume functions
    [1/0] (after line 21) and [2/0] (after line 22) in the same program; the stack trie branches where
    the resumes' stacks leave forward's."""
    (view,) = _views("graph_break").values()
    got = [(c["id"], c["status"], c["why"][:38], c["seconds"], c["guards_count"], c["kernels"]) for c in view["compiles"]]
    assert got == [("[0/0]", "restarted", "restarted: Failed to trace builtin ope", "", "", ""),
                   ("[0/0_1]", "ok", "", "13.478", "34", "3"), ("[1/0]", "ok", "", "0.902", "8", "1"),
                   ("[2/0]", "ok", "", "0.935", "31", "2")]
    assert view["compiles"][1]["restart_reasons"][0].startswith("Failed to trace builtin operator")

    def leaves(nodes, depth=0):
        return [x for n in nodes for x in ([(depth, n["frame"], [i["id"] for i in n["ids"]])] if n["ids"] else [])
                + leaves(n["children"], depth + 1)]

    assert leaves(view["trie"]) == [
        (8, 'File "dumpscope_model.py", line 19, in forward', ["[0/0]"]),
        (9, 'File "dumpscope_model.py", line 21, in torch_dynamo_resume_in_forward_at_21', ["[1/0]"]),
        (10, 'File "dumpscope_model.py", line 22, in torch_dynamo_resume_in_forward_at_22', ["[2/0]"])]


def test_a_recompile_says_the_guard_that_failed_and_a_failure_its_error():
    (view,) = _views("recompile").values()
    assert [(c["id"], c["status"], c["why"]) for c in view["compiles"]] == [
        ("[0/0]", "ok", ""), ("[0/1]", "ok", "recompiled: 0/0: tensor 'x' size mismatch at index 0. expected 4, actual 6")]
    views = _views("compile_failure")
    assert [(c["id"], c["status"], c["bad"], c["why"]) for v in views.values() for c in v["compiles"]] == [
        ("[1/0]", "failed", True, "BackendCompilerFailed: backend='always_fails' raised:\nRuntimeError: dumpscope: this "
                                  "backend always fails"),
        ("[0/0]", "ok", False, "")]


def test_the_dynamic_logs_guards_added_and_specialisations_with_their_user_lines():
    (view,) = _views("dynamic").values()
    [c] = view["compiles"]
    assert (c["guards_count"], c["shape_guards"]) == ("46", "3")
    shape = [(g["source"], g["guard"], g["guarded"], g["reason"], g["code"], g["where"]) for g in c["guards"]
             if g["source"] != "cpp_guard"]
    linear = ("return F.linear(input, self.weight, self.bias)", "torch/nn/modules/linear.py:134 in forward")
    view_line = ("h = h.view(4, 32)  # a fixed size: the batch size specialises to 4", "dumpscope_model.py:23 in forward")
    assert shape == [
        ("guard_added_fast", "Eq(s27, 16)", "", "", *linear),
        ("shape_specialization", "s27 = 16", "L['x'].size()[1]", "range_refined_to_singleton", *linear),
        ("guard_added_fast", "s77 > 2", "", "", "if x.shape[0] > 2:  # a guard on the symbolic batch size",
         "dumpscope_model.py:21 in forward"),
        ("guard_added_fast", "Eq(32*s77, 128)", "", "", *view_line),
        ("shape_specialization", "s77 = 4", "L['x'].size()[0]", "range_refined_to_singleton", *view_line)]


def test_the_phases_are_the_metrics_seconds_without_overlap():
    """Dynamo = whole frame - backend, AOT/Inductor = backend - code gen, code gen, lazy backward: from the
    log's own metrics records (read with json), summed over the program's compiles."""
    from transforms.site import compile_view

    text, _ = _parsed(_log("graph_break"))
    want = dict.fromkeys(compile_view.PHASES, 0.0)
    for _, rec, _, _ in _records(text):
        if rec and (m := rec.get("compilation_metrics")):
            whole, backend, gen = (m.get(k) or 0 for k in ("entire_frame_compile_time_s", "backend_compile_time_s",
                                                            "code_gen_time_s"))
            want["Dynamo"] += whole - backend
            want["AOT/Inductor"] += backend - gen
            want["code gen"] += gen
        elif rec and (m := rec.get("bwd_compilation_metrics")):
            want["lazy backward"] += m["backward_cumulative_compile_time_us"] / 1e6
    d = _site("graph_break")
    rows = compile_view.phase_rows(d, compile_view.viewed_series(d))
    assert rows.get_column("phase").to_list() == list(compile_view.PHASES)
    assert rows.get_column("seconds").to_list() == pytest.approx([want[p] for p in compile_view.PHASES], abs=1e-6)
    assert rows.get_column("seconds").sum() == pytest.approx(15.315 + 1.852, abs=1e-3)  # compile s, and the backwards


def test_views_are_bounded_by_max_series_pages_the_telling_programs_first():
    from transforms.site import compile_view

    d = _site("compile_failure")
    assert len(compile_view.viewed_series(d)) == 2
    d.max_series_pages = 1
    assert [s.split(" at ")[0] for s in compile_view.viewed_series(d)] == ["job/forward"]  # the failed one
    assert len(dict(compile_view.compile_views(d))) == 1


def _parsed_with(monkeypatch, case: str, **bounds) -> dict:
    from transforms.parsers import torch_trace

    for name, value in bounds.items():
        monkeypatch.setattr(torch_trace, name, value)
    log = _log(case)
    return parse_dump(io.BytesIO(gzip.decompress(log.read_bytes())), log.name.removesuffix(".gz")).tables


def test_a_text_past_its_bound_is_cut_at_a_lines_end_and_says_where_the_whole_is(monkeypatch):
    """plain with texts of 4,096 bytes at most: the 8,658-byte output code keeps its first whole lines."""
    text, _ = _parsed(_log("plain"))  # first: _parsed keeps what it parses for the module's other tests, unbounded
    tables = _parsed_with(monkeypatch, "plain", ARTIFACT_TEXT_BYTES=4096)
    arts = _table(tables, "torch_trace_artifacts").filter(pl.col("payload_lines") > 0)
    got = {r["lineno"]: (r["text"], r["text_lines"], r["text_cut"])
           for r in arts.iter_rows(named=True) if r["text"] is not None or r["text_cut"] is not None}
    assert got == _payload_texts(text, 4096, 4 * 1024 * 1024)
    code = arts.filter(pl.col("lineno") == 4560).row(0, named=True)
    assert (code["payload_bytes"], code["payload_lines"], code["text_lines"], code["text_cut"]) == (8658, 183, 85, True)
    assert len(code["text"].encode()) <= 4096 and text.split("\n")[4560 + 85].startswith("\t")  # the next line: cut off
    monkeypatch.undo()
    from transforms.site import compile_view

    note = compile_view._text(code, "2026-10-01/plain/x.log")["note"]  # named below its run's folder
    assert note == f"Cut at {len(code['text'].encode()):,} of 8,658 bytes (85 of 183 lines); the whole: lines 4560–4743 of plain/x.log."


def test_a_log_past_its_bound_keeps_its_first_texts_and_names_the_lines_of_the_others(monkeypatch):
    """plain with 20,000 bytes of text a log: the texts in log order until then (the stack and the metrics
    records' count too), then none, each such artifact saying so (text_cut, no text)."""
    tables = _parsed_with(monkeypatch, "plain", LOG_TEXT_BYTES=20_000)
    arts = _table(tables, "torch_trace_artifacts").filter(pl.col("kind").is_in(list(_kept_kinds()))).sort("lineno")
    kept = arts.filter(pl.col("text").is_not_null())
    assert sum(len(t.encode()) for t in kept["text"]) <= 20_000
    assert kept["lineno"].max() < arts.filter(pl.col("text").is_null())["lineno"].min()  # first come, first kept
    assert arts.filter(pl.col("text").is_null())["text_cut"].to_list() == [True] * arts.filter(pl.col("text").is_null()).height
    # 8 of plain's 12: the eighth (the guard tree, 17,200 bytes) cut where the log's bound ran out, the four
    # after it without a text.
    assert (kept.height, arts.height) == (8, 12)
    assert kept.select("kind", "text_cut").rows()[-1] == ("dynamo_cpp_guards_str", True)
    assert arts.filter(pl.col("text").is_null())["kind"].to_list() == [
        "compilation_metrics", "inductor_post_grad_graph", "inductor_output_code", "bwd_compilation_metrics"]


def test_a_hostile_log_makes_a_view_whose_markdown_carries_no_live_markup(tmp_path):
    """The graph_break log with its function (a line break in it), file, graph and guard texts and graph-break
    reason rewritten into payloads (as tests/test_site_hostile.py builds and opens it in Chromium): in the
    view's Markdown nothing is a tag, a link, a Jinja expression or a table cell of its own, and every text
    stays inside its <pre> block."""
    from tests.test_site_compile import _rewritten
    from tests.test_site_hostile import CO_NAME, TRACE_FILE, TRACE_PAYLOAD, TRACE_REASON

    log = _rewritten(_log("graph_break"), tmp_path / "hostile", {
        "dumpscope_model.py": TRACE_FILE, "Data-dependent branching": TRACE_REASON,
        "torch.relu(": f"torch.relu({TRACE_PAYLOAD}, "},
        records={'"forward"': json.dumps(CO_NAME), "dumpscope_model.py": json.dumps(TRACE_FILE)[1:-1]})
    views = _views(log)
    assert len(views) == 3  # the function, and its resume functions: the line break keeps them apart
    markdown = "\n".join(_markdown(v) for v in views.values())
    for live in ("<script", "](javascript", "{{", "{%", "`{", "|{"):
        assert live not in markdown, live
    for line in markdown.splitlines():
        if line.startswith("| [&#91;"):  # a compile's row: its 12 cells, whatever its reason holds
            assert line.count("|") == 13, line
    blocks = [html.unescape(b) for b in re.findall(r"<pre><code>(.*?)</code></pre>", markdown, re.S)]
    assert any(TRACE_REASON in b for b in blocks) and any(f"torch.relu({TRACE_PAYLOAD}, " in b for b in blocks)
    assert all("</code></pre>" not in b for b in blocks)
    from transforms.escape import md_text

    # The title: the function's name as text, its line break a space.
    assert sum(line.startswith(f"# Compiles of {md_text(f'job/fwd{TRACE_PAYLOAD} line2 at ')}")
               for line in markdown.splitlines()) == 1


def _normalised_plainly(text: str) -> str:
    """The rules as transforms/volatile.py states them: the path rule, then each rule, over the whole
    text, with no test of what a text holds first (what normalise_text's shortcuts must equal)."""
    from transforms.volatile import _PATH, _RULES, _short_path

    text = _PATH.sub(_short_path, text)
    for pattern, replacement, _, _ in _RULES:
        text = pattern.sub(replacement, text)
    return text


_TOKENS = ("/", "\\", ".", ":", "~", "+", "@", "-", "_", " ", "\n", "(", ")", ", ", "=", "#", "a", "Z", "0", "123456",
           "x.py", ".log", "site-packages", "torch", "C:", "https://", "tmp", "ab12cd34", "pid", "PİD", "thread", "Thread",
           "tıd", "_id", "id=", "0x", "7f3a2b1c9d", "___check_obj_id(", "__meta_", "dedicated_log_torch_trace_", "rank_0")


def test_a_long_text_is_normalised_as_a_name_is():
    """normalise_text and normalise (one path scan run over runs of path characters only, each rule's
    scan only over a text holding what its matches hold) equal the rules run plainly over the whole
    text: on every payload of every real log, and on paths at a line's ends, Windows' and a URL's."""
    from transforms.volatile import normalise

    payloads = ["\n".join(p) for log in LOGS for _, rec, p, _ in _records(_parsed(log)[0]) if p]
    payloads.append("/home/ci/site-packages/torch/x.py\nC:\\u\\m.py:3 https://host/a/b.html\n  tmpab12cd34 pid 42 ./y.py")
    payloads += ["__dtensor_spec_123456 tmp_abcdefg thread_id=7 PİD:9 id=0x7f tıd 3", "thread_id=7", "PİD:9", "tıd 3"]
    for p in payloads:
        assert normalise_text(p) == normalise.__wrapped__(p) == _normalised_plainly(p)
    assert normalise_text(payloads[-5]) == "torch/x.py\nm.py:3 https://host/a/b.html\n  tmp<tmp> pid <pid> y.py"
    assert normalise_text(payloads[-4]) == "__dtensor_spec_<id> tmp<tmp> thread_id=<tid> PİD:<pid> id=<id> tıd <tid>"


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join))
def test_any_text_is_normalised_as_the_rules_say(text):
    """Texts made of what the rules' matches and their shortcuts' tests are made of (separators, drive
    letters, URLs, ids, "İ" that IGNORECASE reads as an "i")."""
    assert normalise_text(text) == _normalised_plainly(text)


def test_an_artifacts_batch_goes_out_once_its_texts_reach_the_bound(monkeypatch):
    """plain, with batches bound to 5,000 characters of text (without, its 51,905 wait in one batch of
    1,024 rows): each artifacts batch but the last reached the bound with its last row only, and the
    rows are those of one batch."""
    from transforms.parse import iter_dump
    from transforms.parsers import torch_trace
    from transforms.records import TableBatch

    whole = _table(_parsed(_log("plain"))[1], "torch_trace_artifacts")
    monkeypatch.setattr(torch_trace, "_BATCH_TEXT", 5_000)
    log = _log("plain")
    batches = [b.frame for b in iter_dump(io.BytesIO(gzip.decompress(log.read_bytes())), log.name.removesuffix(".gz"))
               if isinstance(b, TableBatch) and b.table == "torch_trace_artifacts"]
    sizes = [f["text"].str.len_chars().fill_null(0).to_list() for f in batches]
    assert [len(s) for s in sizes] == [7, 7, 1, 8, 4, 1, 2]  # rows
    assert [sum(s) for s in sizes] == [6477, 5428, 5664, 16209, 6278, 8658, 3291]  # characters of text
    assert all(sum(s) >= 5_000 > sum(s[:-1]) for s in sizes[:-1]) and sum(sizes[-1]) < 5_000
    assert pl.concat(batches).equals(whole)
