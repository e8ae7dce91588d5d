"""Figures no format can mean (issue 43, items 3 and 4), on real dumps edited the way a damaged or
hostile one is: each is checked before it is stored, a bad record costs only itself, and a
warehouse that already holds such a figure still builds every page.

- A TORCH_TRACE compile time of 1e308 s (or NaN, negative, a text) is an error naming its line and
  its compile counts nowhere; a sum past its bound is dropped by the driver's last guard.
- A JSON nesting bomb on one TORCH_TRACE line, or a record of odd types, is skipped alone.
- Inductor IR layouts and ONNX report numbers past their columns are errors, not failed dumps; a
  line whose reading raises costs that line only.
- 1e308, NaN, -inf written straight into a sample warehouse's metrics build a site that shows them.
"""

from __future__ import annotations

import gzip
import html
import io
import json
import re
import shutil
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest

from transforms.parse import parse_dump
from transforms.site import charts
from transforms.units import human_bytes, human_delta, human_value

FIX = Path(__file__).parent / "fixtures"
SRC = "/tmp/dumpscope-torch-trace/src/dumpscope_model.py"
FORWARD = f"forward at {SRC}:19"


def log_lines(case: str) -> list[bytes]:
    [log] = (FIX / "torch_trace" / case).glob("dedicated_log_torch_trace_*.log.gz")
    return gzip.decompress(log.read_bytes()).splitlines(keepends=True)


def parsed(lines: list[bytes], name: str):
    return parse_dump(io.BytesIO(b"".join(lines)), name)


def torch_compiles(case: str) -> list[dict]:
    """torch's own get_compilation_metrics() of the fixture's run (never read from the log)."""
    [figures] = json.loads((FIX / "torch_trace" / case / "torch_figures.json").read_text()).values()
    return [m for m in figures["compilation_metrics"] if not m["is_runtime"]]


FIGURES = ("dynamo.compiles", "dynamo.compile_seconds", "dynamo.guards", "dynamo.graph_breaks", "inductor.compile_seconds")


def torch_figures(compiles: list[dict], graph_breaks: int) -> dict:
    """The figures docs/metrics.md gives these compiles (backwards included), from torch's own numbers."""
    forwards = [m for m in compiles if m["is_forward"]]
    return {"dynamo.compiles": len(forwards), "dynamo.guards": sum(m["guard_count"] for m in forwards),
            "dynamo.compile_seconds": round(sum(m["entire_frame_compile_time_s"] for m in forwards), 6),
            "dynamo.graph_breaks": graph_breaks,
            "inductor.compile_seconds": round(sum(m["inductor_compile_time_s"] for m in compiles), 6)}


# graph_break: compiles 0/0 (forward), 1/0 and 2/0 (its resume functions), one program. Line 7035 is
# 1/0's compilation_metrics record; the graph break at line 3855 and the output code at 5135 are 1/0's.
GRAPH_BREAK = "graph_break"
RESUME_METRICS_LINE = 7035
NAME = "night/torch-trace/dedicated_log_torch_trace_p9d42glu.log"


def with_field(lines: list[bytes], lineno: int, field: str, json_value: str) -> list[bytes]:
    line = lines[lineno - 1].decode()
    edited, n = re.subn(rf'"{field}": [^,]*,', f'"{field}": {json_value},', line)
    assert n == 1, field
    return [*lines[:lineno - 1], edited.encode(), *lines[lineno:]]


@pytest.mark.parametrize(("field", "value", "why"), [
    ("entire_frame_compile_time_s", "1e308", "is 1e+308, above a week (604,800 s)"),
    ("entire_frame_compile_time_s", "NaN", "is NaN, not a finite number"),
    ("entire_frame_compile_time_s", "-0.5", "is -0.5, negative"),
    ("entire_frame_compile_time_s", '"0.9"', "is the text '0.9', not a number"),
    ("inductor_compile_time_s", "Infinity", "is inf, not a finite number"),
    ("guard_count", "-8", "is -8, negative"),
    ("guard_count", "1099511627776", "is 1,099,511,627,776, above 2^31 - 1 (what a 32-bit count holds)"),
    ("guard_count", "8.5", "is 8.5, not a whole number"),
    ("guard_count", "true", "is a bool, not a number"),
], ids=lambda v: v if len(v) < 30 else v[:12])
def test_a_figure_no_compile_can_have_is_an_error_and_its_compile_counts_nowhere(field, value, why):
    """Issue 43 item 3: 1e308 s was summed into dynamo.compile_seconds (and crashed the site for every
    later night), NaN blanked the log's total, a negative guard count or a text were figures. Now the
    record's line is named, its row keeps the field null, and its compile counts nowhere, exactly as a
    compile the log ends inside (its record missing); the other compiles keep torch's own figures."""
    lines = log_lines(GRAPH_BREAK)
    got = parsed(with_field(lines, RESUME_METRICS_LINE, field, value), NAME)
    assert got.summary.errors == [
        f"{NAME}: line {RESUME_METRICS_LINE}: compilation_metrics of compile 1/0: {field} {why}: stored as null, "
        "and the compile's figures are not counted"]
    assert got.status.value == "partial"

    without = parsed([*lines[:RESUME_METRICS_LINE - 1], *lines[RESUME_METRICS_LINE:]], NAME).summary
    assert (got.summary.metrics, got.summary.programs) == (without.metrics, without.programs)
    others = [m for m in torch_compiles(GRAPH_BREAK) if m["compile_id"] != "1/0"]  # 0/0 and 2/0, with backwards
    assert {k: got.summary.metrics[k] for k in FIGURES} == torch_figures(others, graph_breaks=1)
    assert got.summary.metrics["dynamo.compiles"] == 2

    row = got.tables["torch_trace_compiles"].filter(pl.col("lineno") == RESUME_METRICS_LINE).row(0, named=True)
    assert row[field] is None and row["program"] == FORWARD
    assert row["guard_count" if field != "guard_count" else "entire_frame_compile_time_s"] is not None


def test_nothing_of_that_compile_counts_its_lazy_backward_included():
    """Compile 0/0 (line 3717) has a graph break, output codes and a backward compiled lazily (its
    bwd_compilation_metrics at line 15238, a whole record): none of them counts; the other two
    compiles keep torch's own figures, and resume functions keep their program."""
    lines = log_lines(GRAPH_BREAK)
    got = parsed(with_field(lines, 3717, "entire_frame_compile_time_s", "1e308"), NAME)
    assert got.summary.errors == [f"{NAME}: line 3717: compilation_metrics of compile 0/0: entire_frame_compile_time_s "
                                  "is 1e+308, above a week (604,800 s): stored as null, and the compile's figures are "
                                  "not counted"]
    others = [m for m in torch_compiles(GRAPH_BREAK) if m["compile_id"] != "0/0"]  # 1/0, 2/0 and 2/0's backward
    assert list(got.summary.programs) == [FORWARD]
    assert {k: got.summary.programs[FORWARD][k] for k in FIGURES} == torch_figures(others, graph_breaks=1)


def test_a_sum_past_its_bound_is_not_stored():
    """Two compiles of 400,000 s each: both within a week, their program's sum (with 0/0's 13.48 s) is not. The driver's
    guard (every format passes it) drops the figure, says so naming metric, program and dump, and
    keeps the rest."""
    lines = log_lines(GRAPH_BREAK)
    whole = parsed(lines, NAME).summary
    edited = with_field(with_field(lines, RESUME_METRICS_LINE, "entire_frame_compile_time_s", "400000"),
                        10437, "entire_frame_compile_time_s", "400000")  # 2/0's record
    got = parsed(edited, NAME)
    assert got.summary.errors == [f"{NAME}: metric dynamo.compile_seconds (program {FORWARD}) is 800013, above a "
                                  "week (604,800 s): not stored"]
    assert got.status.value == "partial"
    kept = {k: v for k, v in whole.metrics.items() if k != "dynamo.compile_seconds"}
    assert got.summary.metrics == kept and got.summary.programs == {FORWARD: kept}


# recompile: compile 0/0 closes at line 3554 (its compilation_metrics), 0/1 opens at 3619.
RECOMPILE_NAME = "night/torch-trace/dedicated_log_torch_trace_0_wskx8r.log"
PREFIX = b"V1127 10:54:19.740000 26398 torch/_dynamo/utils.py:2009] "


@pytest.mark.parametrize("bomb", [
    b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"a":' + b'{"a":' * 5_000 + b"1" + b"}" * 5_000 + b"}",
    b'{"dynamo_start": ' + b"[" * 40 + b"]" * 40 + b', "frame_id": 0, "frame_compile_id": 1, "attempt": 0}',
], ids=["lists", "objects", "just-past-the-bound"])
def test_a_nesting_bomb_costs_its_line_only(bomb):
    """Issue 43 item 4: a record nested thousands deep raised RecursionError past the record handler
    and the whole log failed, losing its good compiles. It is refused before json.loads (deeper than
    32 levels: torch's records nest 4 deep) and every compile before and after it keeps its figures."""
    lines = log_lines("recompile")
    whole = parsed(lines, RECOMPILE_NAME).summary
    got = parsed([*lines[:3554], PREFIX + bomb + b"\n", *lines[3554:]], RECOMPILE_NAME)
    assert got.summary.errors == [f"{RECOMPILE_NAME}: line 3555: record nests deeper than 32 levels (torch's nest "
                                  "4 deep); it and its payload are skipped"]
    assert (got.summary.metrics, got.summary.programs) == (whole.metrics, whole.programs)
    assert got.summary.metrics["dynamo.compiles"] == 2 and got.summary.metrics["dynamo.recompiles"] == 1
    assert got.tables["torch_trace_compiles"].height == 2


def test_a_bomb_whose_strings_hide_its_depth_costs_its_line_only():
    """Each level opens after a string holding "]", so the brackets seem to close as they open and
    the cheap pre-scan lets the record through: the decoder's RecursionError costs that record
    alone, as any failure of a record does."""
    lines = log_lines("recompile")
    whole = parsed(lines, RECOMPILE_NAME).summary
    bomb = b'{"a":' + b'["]",' * 5_000 + b"1" + b"]" * 5_000 + b"}"
    got = parsed([*lines[:3554], PREFIX + bomb + b"\n", *lines[3554:]], RECOMPILE_NAME)
    [error] = got.summary.errors
    assert re.fullmatch(rf"{re.escape(RECOMPILE_NAME)}: line 3555: record unreadable \(RecursionError: maximum "
                        r"recursion depth exceeded .*\); it and its payload are skipped", error), error
    assert (got.summary.metrics, got.summary.programs) == (whole.metrics, whole.programs)


def test_brackets_inside_a_string_are_no_nesting():
    """The depth bound counts structure, not text: a record whose string holds 100,000 brackets is read."""
    lines = log_lines("recompile")
    whole = parsed(lines, RECOMPILE_NAME).summary
    text = PREFIX + b'{"a_newer_record": {"text": "' + b"[{" * 100_000 + b'\\"]"}}\n'
    got = parsed([*lines[:3554], text, *lines[3554:]], RECOMPILE_NAME)
    assert (got.status.value, got.summary.metrics) == ("ok", whole.metrics)
    records = got.tables["torch_trace_records"]
    assert records.filter(pl.col("record") == "a_newer_record").select("records", "first_lineno").row(0) == (1, 3555)


def test_a_record_that_fails_costs_itself_and_its_payload_only():
    """A record whose compiled_autograd_id is a list made the compile key unhashable: TypeError, and
    the log failed. Any failure while one record is read skips that record and its payload."""
    lines = log_lines("recompile")
    whole = parsed(lines, RECOMPILE_NAME).summary
    odd = PREFIX + (b'{"inductor_output_code": {"filename": "x.py"}, "compiled_autograd_id": [1], "frame_id": 0, '
                    b'"frame_compile_id": 1, "attempt": 0, "has_payload": "0"}\n\tdef call(args):\n\t    pass\n')
    got = parsed([*lines[:3554], odd, *lines[3554:]], RECOMPILE_NAME)
    [error] = got.summary.errors
    assert re.fullmatch(rf"{re.escape(RECOMPILE_NAME)}: line 3555: record unreadable \(TypeError: unhashable type: "
                        r"'list', at torch_trace\.py:\d+\); it and its payload are skipped", error), error
    assert (got.summary.metrics, got.summary.programs) == (whole.metrics, whole.programs)


# --- Inductor IR and ONNX reports: numbers past their columns ---

IR = FIX / "inductor_ir" / "mlp" / "model__0_forward_1.0" / "ir_post_fusion.txt"
IR_NAME = "night/torch-inductor/model__0_forward_1.0/ir_post_fusion.txt"
BUF0 = "size=[8, 64], stride=[64, 1])"  # buf0's layout at line 12 (and buf3's at line 100): 2,048 bytes each


@pytest.mark.parametrize(("size", "why"), [
    ("size=[-8, 64], stride=[64, 1])", "size [-8, 64] holds a negative size or one past 64 bits"),
    ("size=[4294967296, 4294967296, 4294967296], stride=[64, 1])",
     "its byte size is 316,912,650,057,057,350,374,175,801,344, above 2^63 - 1 (what a signed 64-bit size holds)"),
    ("size=[9223372036854775808], stride=[1])", "size [9223372036854775808] holds a negative size or one past 64 bits"),
], ids=["negative", "bytes-past-64-bits", "size-past-64-bits"])
def test_an_impossible_buffer_layout_is_an_error_and_its_buffer_is_not_counted(size, why):
    """A negative size was summed into memory.buffer_bytes (588 instead of 4,684: the dump read ok); a
    size past 64 bits made the whole dump fail at the Int64 column. Now the layout's line is named."""
    text = IR.read_text()
    whole = parse_dump(io.BytesIO(text.encode()), IR_NAME)
    got = parse_dump(io.BytesIO(text.replace(BUF0, size, 1).encode()), IR_NAME)
    assert got.summary.errors == [f"{IR_NAME}: line 12: layout of buf0: {why}; its sizes, strides and bytes are "
                                  "stored as null and it is not counted"]
    assert got.summary.metrics == {**whole.summary.metrics,
                                   "memory.buffer_bytes": whole.summary.metrics["memory.buffer_bytes"] - 2048}
    buf0 = got.tables["inductor_buffers"].filter(pl.col("name") == "buf0").row(0, named=True)
    assert (buf0["size"], buf0["stride"], buf0["bytes"], buf0["layout_kind"]) == (None, None, None, "FixedLayout")


def test_buffer_bytes_summed_past_64_bits_are_not_stored():
    """Two buffers of 2^62 bytes each: each a size a column holds, their sum (memory.buffer_bytes) is not."""
    text = IR.read_text().replace(BUF0, "size=[1152921504606846976], stride=[1])")  # float32: 2^62 bytes
    got = parse_dump(io.BytesIO(text.encode()), IR_NAME)
    assert got.summary.errors == [f"{IR_NAME}: metric memory.buffer_bytes is 9,223,372,036,854,776,396, above "
                                  "2^63 - 1 (what a signed 64-bit size holds): not stored"]
    assert "memory.buffer_bytes" not in got.summary.metrics
    buffers = got.tables["inductor_buffers"].filter(pl.col("name").is_in(["buf0", "buf3"]))
    assert buffers["bytes"].to_list() == [2**62] * 2


[REPORT] = (FIX / "onnx_report" / "mlp").glob("onnx_export_*.md")
REPORT_NAME = f"night/torch-onnx/{REPORT.name}"


@pytest.mark.parametrize(("was", "now", "metric", "error"), [
    ("The model has 16986 parameters", "The model has 99999999999999999999 parameters", "onnx.parameters",
     "line 127: the model's parameters is 99,999,999,999,999,999,999, above 2^53 (the whole numbers a double holds "
     "exactly); stored as null"),
    ("The FX graph has 22 nodes", "The FX graph has 9999999999 nodes", "onnx.fx_nodes",
     "line 143: the FX graph's nodes is 9,999,999,999, above 2^31 - 1 (what a 32-bit count holds); stored as null"),
    ("ir_version=10,", "ir_version=9999999999,", "onnx.ir_version",
     "line 76: ir_version 9999999999 is no count a 32-bit column holds; stored as null"),
    ("opset_imports={'': 20}", "opset_imports={'': 99999999999}", "onnx.opset",
     "line 77: opset 99999999999 of domain '' is no count a 32-bit column holds; left out"),
    ("max_abs_diff=1.490116e-08", "max_abs_diff=-1.5", "onnx.max_abs_diff",
     "line 173: verification of softmax: max_abs_diff is -1.5, negative; stored as null and not counted"),
], ids=["parameters", "fx-nodes", "ir-version", "opset", "negative-difference"])
def test_an_onnx_number_no_report_can_hold_is_an_error_naming_its_line(was, now, metric, error):
    """Counts past their Int32/Int64 columns made the whole report fail (OverflowError at the batch); a
    negative difference was a figure. Now each is an error naming its line, and the rest is kept."""
    text = REPORT.read_text()
    whole = parse_dump(io.BytesIO(text.encode()), REPORT_NAME).summary
    got = parse_dump(io.BytesIO(text.replace(was, now, 1).encode()), REPORT_NAME)
    assert (got.status.value, got.summary.errors) == ("partial", [f"{REPORT_NAME}: {error}"])
    assert got.summary.metrics == {k: v for k, v in whole.metrics.items() if k != metric}


def test_a_nan_difference_is_kept_in_its_row_and_no_figure():
    """torch prints nan when an output does not compare: the row keeps it (it is what the report says);
    onnx.max_abs_diff, the largest difference, is then no number and is absent, not a NaN figure."""
    text = REPORT.read_text().replace("max_abs_diff=1.490116e-08", "max_abs_diff=nan", 1)
    got = parse_dump(io.BytesIO(text.encode()), REPORT_NAME)
    assert (got.status.value, got.summary.errors) == ("ok", [])
    assert "onnx.max_abs_diff" not in got.summary.metrics and got.summary.metrics["onnx.max_rel_diff"] == 1.668918e-07
    assert got.tables["onnx_verification"]["max_abs_diff"].is_nan().to_list() == [True]


# --- a line whose reading raises, in the line parsers ---

OUTPUT_CODE = FIX / "inductor_output_code" / "mlp" / "model__0_forward_1.0" / "output_code.py"


def _raising_once(real, when, exc: BaseException):
    """``real``, raising ``exc`` on the first call whose arguments ``when`` accepts: a parser's bug, or a
    stack or memory exhausted, while one line is read (no input of ours makes these parsers raise)."""
    raised = []

    def wrapper(*args):
        if not raised and when(*args):
            raised.append(exc)
            raise exc
        return real(*args)
    return wrapper


@pytest.mark.parametrize("parser", ["inductor_ir", "inductor_code", "onnx_report"])
def test_a_line_whose_reading_raises_costs_that_line_only(parser, monkeypatch):
    """The line parsers read on after a line whose handling raises (at no cost per line: the loop
    resumes on the same iterator): an error names the line and the exception, the rest is read.
    Before, the exception failed the dump and every figure was lost."""
    from transforms.parsers import inductor_code, inductor_ir, onnx_report

    path, name = {"inductor_ir": (IR, IR_NAME), "onnx_report": (REPORT, REPORT_NAME),
                  "inductor_code": (OUTPUT_CODE, "night/torch-inductor/output_code.py")}[parser]
    whole = parse_dump(io.BytesIO(path.read_bytes()), name).summary.metrics
    if parser == "inductor_ir":  # buf0's layout (line 12): buf0 is then a buffer without a layout
        monkeypatch.setattr(inductor_ir, "_layout", _raising_once(
            inductor_ir._layout, lambda text: "size=[8, 64]" in text, MemoryError("injected")))
        line, expected = 12, {**whole, "memory.buffer_bytes": whole["memory.buffer_bytes"] - 2048}
    elif parser == "inductor_code":  # the first kernel, when its source closes
        first = "cpp_fused_gelu_mean_pow_relu_sum_0"
        monkeypatch.setattr(inductor_code, "_category", _raising_once(
            inductor_code._category, lambda name, *_: name == first, RecursionError("injected")))
        line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if i > 33 and t.startswith("'''"))
        expected = {**whole, "kernel.generated": whole["kernel.generated"] - 1,
                    "kernel.generated.cpp": whole["kernel.generated.cpp"] - 1}
    else:  # the step line "✅ Decompose operators for ONNX compatibility"
        monkeypatch.setattr(onnx_report.sec, "slug", _raising_once(
            onnx_report.sec.slug, lambda text: text.startswith("Decompose"), TypeError("injected")))
        line, expected = 7, {k: v for k, v in whole.items() if k != "onnx.step.decompose"}
    got = parse_dump(io.BytesIO(path.read_bytes()), name)
    [error] = got.summary.errors
    assert re.fullmatch(rf"{re.escape(name)}: line {line}: line unreadable \((MemoryError|RecursionError|TypeError): "
                        r"injected, at test_hostile_figures\.py:\d+\); skipped", error), error
    assert got.summary.metrics == expected


# --- what reads a stored figure: units and charts ---


def test_a_value_no_figure_can_be_reads_as_what_it_is():
    """A warehouse written before figures were checked may hold these: they read as themselves (1e308
    was 309 digits with commas; NaN and infinities were a dash, the sign of an absent figure)."""
    nan, inf = float("nan"), float("inf")
    assert [human_value("dynamo.compile_seconds", v) for v in (1e308, nan, -inf, 11.975338, None)] == [
        "1e+308", "NaN", "-inf", "12", "–"]
    assert [human_value("fusion.count", v) for v in (-5.0, 1234567.0, 1e15)] == ["-5", "1,234,567", "1e+15"]
    assert [human_bytes(v) for v in (nan, inf, 1e20, 2.0**60 - 2**40)] == ["NaN", "inf B", "1e+20 B", "1024.0 PiB"]
    assert [human_delta("dynamo.compile_seconds", v) for v in (1e308, inf, nan)] == ["+1e+308", "+inf", "NaN"]


def test_a_chart_of_values_no_figure_can_be_is_drawn():
    """The polars cast of the last point's label (``strict_cast(Int64)``) failed on 1e308 and NaN: the
    site crashed for that night and every later one. The label now reads as polars prints the value."""
    at = [datetime(2026, 11, d, 2) for d in (18, 19, 20)]
    rows = pl.DataFrame({"started_at": at * 2, "run_id": [f"2026-11-{d}" for d in (18, 19, 20)] * 2, "commit": "c",
                         "metric": ["dynamo.compile_seconds"] * 3 + ["memory.temp_bytes"] * 3,
                         "value": [11.9, 13.6, 1e308, 1024.0, 2048.0, float("nan")],
                         "delta": [None, 1.7, 1e308, None, 1024.0, float("nan")], "changed": True,
                         "last": [False, False, True] * 2})
    spec = charts.small_multiples(rows, title="forward")
    last = [r.split(",") for r in spec["data"]["values"].splitlines() if r.startswith("2026-11-20")]
    # The label column (l) of each panel's last point; the bytes in the chart's one unit (2048 B: four digits).
    assert sorted(r[8] for r in last) == ["1e+308", "NaN B"]


# --- a warehouse that already holds them ---


def _cells(page: Path, first_cell: str) -> list[str]:
    """The text of the cells of the table row whose first cell reads ``first_cell``."""
    for row in re.findall(r"<tr>(.*?)</tr>", page.read_text(), re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
                 for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell} on {page}")


@pytest.mark.slow  # aggregates a warehouse and builds a site: seconds
def test_a_warehouse_holding_values_no_figure_can_be_builds_every_page(sample_warehouse, tmp_path):
    """Issue 43 item 3: a warehouse written before figures were checked may hold 1e308, NaN, -inf or a
    negative count; the first made ``dumpscope site`` fail for good (a polars cast in the charts). With
    those written straight into the sample warehouse's metrics and aggregated again, every page builds
    and shows each value as what it is."""
    from flows.publish.site import build_site
    from flows.verdict.aggregate import aggregate
    from flows.warehouse import store
    from transforms.site.data import series_file

    warehouse = tmp_path / "warehouse.duckdb"
    shutil.copyfile(sample_warehouse, warehouse)
    shutil.copytree(f"{sample_warehouse}.records", f"{warehouse}.records")
    hostile = [("torch-trace", "dynamo.compile_seconds", 1e308), ("jax-jit", "memory.temp_bytes", float("nan")),
               ("torch-trace", "inductor.compile_seconds", float("-inf")), ("torch-inductor", "fusion.count", -5.0)]
    with duckdb.connect(str(warehouse)) as con:
        for job, metric, value in hostile:
            con.execute("UPDATE metrics SET value = ? WHERE job = ? AND metric = ? AND run_id = '2026-11-20'",
                        [value, job, metric])
        con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")  # as after an upgrade: every run again
    with store.Warehouse(warehouse) as con:
        aggregate(con)

    site = build_site(warehouse, tmp_path / "site")
    built = {p.relative_to(site.out).as_posix() for p in site.out.rglob("*.html")}
    assert {"index.html", "compile.html", "memory.html", "fusion.html", "kernels.html", "onnx.html", "diff.html",
            "runs/2026-11-20.html", "series/index.html"} <= built
    assert site.pages >= 69  # the sample site's (tests/test_site.py), and an incident a step of these opened

    def page(series: str) -> Path:
        return site.out / series_file(series).replace(".md", ".html")

    trace = page("torch-trace/forward at dumpscope_model.py:19/torch_trace/trace")
    assert _cells(trace, "dynamo.compile_seconds")[2:4] == ["1e+308", "+1e+308"]  # value, change
    assert _cells(trace, "inductor.compile_seconds")[2] == "-inf"
    memory = page("jax-jit/jit_train_step/xla_buffer_assignment/buffer_assignment")
    assert _cells(memory, "memory.temp_bytes")[2] == "NaN"
    fusion = page("torch-inductor/model__0_forward/inductor_ir/post_fusion")
    assert _cells(fusion, "fusion.count")[2] == "-5"
    assert not re.search(r"\d{1,3}(,\d{3}){20}", "".join(p.read_text() for p in site.out.rglob("*.html")))


@pytest.mark.slow  # a night over the sample bucket and its site: seconds
def test_a_night_whose_log_says_a_compile_took_1e308_seconds_publishes_its_site(tmp_path):
    """Issue 43 item 3 as found: one TORCH_TRACE log whose compilation_metrics says 1e308 s made
    ``dumpscope site`` fail with a polars cast, that night and every later one. The night now stores
    the log as partial, names the line, stores no such figure, and the site builds."""
    from flows.publish.site import build_site
    from tests.sample_build import SAMPLE_BUCKET, build_sample_warehouse

    bucket = tmp_path / "bucket"
    shutil.copytree(SAMPLE_BUCKET, bucket)
    [log] = (bucket / "2026-11-20" / "torch-trace").glob("*.log.gz")
    text = gzip.decompress(log.read_bytes())
    field = b'"entire_frame_compile_time_s": '
    log.write_bytes(gzip.compress(text.replace(field + b"11.975338", field + b"1e308")))
    warehouse = build_sample_warehouse(tmp_path / "night", bucket)
    with duckdb.connect(str(warehouse), read_only=True) as con:
        assert con.execute("SELECT status, error FROM dumps WHERE path = ?",
                           [log.relative_to(bucket).as_posix()]).fetchall() == [(
            "partial", f"{log.relative_to(bucket).as_posix()}: line 3818: compilation_metrics of compile 0/0: "
            "entire_frame_compile_time_s is 1e+308, above a week (604,800 s): stored as null, and the compile's "
            "figures are not counted")]
        assert con.execute("SELECT count(*) FROM metrics WHERE metric LIKE '%compile_seconds' "
                           "AND NOT value BETWEEN 0 AND 604800").fetchall() == [(0,)]
    site = build_site(warehouse, tmp_path / "site")
    assert (site.out / "compile.html").exists()
