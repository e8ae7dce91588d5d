"""Tests for transforms.parsers.torch_trace on real TORCH_TRACE logs written by torch 2.13.0 on CPU
(tests/fixtures/torch_trace/ORIGIN.md), against torch's own figures recorded beside each log
(``torch._dynamo.utils.counters``, ``get_compilation_metrics()``, Inductor's kernel count)."""

from __future__ import annotations

import gzip
import io
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import collect
from transforms.naming import program_from_path
from transforms.parse import ParseLimits, kind_of, parse_dump
from transforms.parsers import inductor_code
from transforms.parsers import torch_trace as P
from transforms.records import DumpKind, ParseError, Status

FIX = Path(__file__).parent / "fixtures" / "torch_trace"
LOGS = sorted(FIX.glob("*/dedicated_log_torch_trace_*.log.gz"))
DATA = {log: gzip.decompress(log.read_bytes()) for log in LOGS}
SRC = "/tmp/dumpscope-torch-trace/src/dumpscope_model.py"
FORWARD = f"forward at {SRC}:19"


def _id(log: Path) -> str:
    return f"{log.parent.name}/{log.name.split('_')[-1 if 'rank' not in log.name else -2]}"


def figures_of(log: Path) -> dict:
    return json.loads((log.parent / "torch_figures.json").read_text())[log.name]


def name_of(log: Path) -> str:
    return f"night/{log.parent.name}/{log.name}"


def parse_bytes(data: bytes, name: str, **kw):
    return parse_dump(io.BytesIO(data), name, **kw)


PARSED = {log: parse_bytes(DATA[log], name_of(log)) for log in LOGS}


def rounded(metrics: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in metrics.items()}


def torch_expected(fig: dict) -> dict[str, float]:
    """The TORCH_TRACE metrics from torch's own objects, never from the log."""
    cms = [m for m in fig["compilation_metrics"] if not m["is_runtime"]]
    fwd = [m for m in cms if m["is_forward"] is not False]
    c = fig["counters"]
    # A data-dependent branch is a graph break in the trace (symbolic_convert.jump_graph_break logs it with
    # log_graph_break) that torch leaves under counters["unimplemented"]; every other one is in "graph_break".
    breaks = sum(c.get("graph_break", {}).values()) + sum(
        v for k, v in c.get("unimplemented", {}).items() if k.startswith("Data-dependent branching"))
    return rounded({
        "dynamo.compiles": len(fwd),
        "dynamo.compile_seconds": sum(m["entire_frame_compile_time_s"] or 0 for m in fwd),
        "dynamo.failures": sum(1 for m in fwd if m["fail_type"]),
        "dynamo.graph_breaks": breaks,
        "dynamo.recompiles": sum(1 for m in fwd if m["recompile_reason"] is not None),
        "dynamo.guards": sum(m["guard_count"] or 0 for m in fwd),
        "inductor.compile_seconds": sum(m["inductor_compile_time_s"] or 0 for m in cms),
        "inductor.cache_hits": c.get("inductor", {}).get("fxgraph_cache_hit", 0),
        "inductor.cache_misses": c.get("inductor", {}).get("fxgraph_cache_miss", 0),
    })


# --- real logs against torch's counters ---


@pytest.mark.parametrize("log", LOGS, ids=_id)
def test_figures_equal_torch_counters(log):
    s = PARSED[log].summary
    assert (s.kind, s.status, s.errors) == (DumpKind.TORCH_TRACE, Status.OK, [])
    assert rounded({k: s.metrics[k] for k in P.BASE_METRICS}) == torch_expected(figures_of(log))
    frames = figures_of(log)["counters"]["frames"]  # every frame Dynamo tried, and those it compiled
    assert (s.metrics["dynamo.compiles"], s.metrics["dynamo.failures"]) == (frames["total"], frames["total"] - frames["ok"])


@pytest.mark.parametrize("log", LOGS, ids=_id)
def test_kernel_figures_equal_inductor_counters(log):
    s, fig = PARSED[log].summary, figures_of(log)
    assert s.metrics["kernel.extern_calls"] == fig["counters"]["inductor"].get("extern_calls", 0)
    # Inductor's C++ backend counts kernel proxies, one or more per kernel it writes (docs/metrics.md,
    # inductor_output_code), and counts them again for a graph loaded from its cache: no equality there.
    assert 0 < s.metrics["kernel.generated"] <= fig["inductor_metrics"]["generated_kernel_count"]
    per_program = Counter()
    for m in s.programs.values():
        per_program.update({k: v for k, v in m.items()})
    assert rounded(dict(per_program)) == rounded(s.metrics)  # every figure belongs to a program here


EXPECTED_PROGRAMS = {  # case -> {program: (compiles, graph breaks, recompiles, failures)}
    "plain": {FORWARD: (1, 0, 0, 0)}, "plain_warm": {FORWARD: (1, 0, 0, 0)},
    "graph_break": {FORWARD: (3, 2, 0, 0)},  # forward and its two resume functions
    "graph_break_removed": {FORWARD: (1, 0, 0, 0)}, "recompile": {FORWARD: (2, 0, 1, 0)},
    "ranked": {FORWARD: (1, 0, 0, 0)}, "dynamic": {FORWARD: (1, 0, 0, 0)},
    "compile_failure": {f"scale_shift at {SRC}:9": (1, 0, 0, 0), FORWARD: (1, 0, 0, 1)},
    "two_programs": {f"scale_shift at {SRC}:9": (1, 0, 0, 0), FORWARD: (1, 0, 0, 0)},
    "two_programs_changed": {f"scale_shift at {SRC}:9": (1, 0, 0, 0), FORWARD: (2, 0, 1, 0)},
}


@pytest.mark.parametrize("log", LOGS, ids=_id)
def test_programs(log):
    parsed = PARSED[log]
    s = parsed.summary
    want = EXPECTED_PROGRAMS[log.parent.name]
    got = {p: tuple(int(m[k]) for k in ("dynamo.compiles", "dynamo.graph_breaks", "dynamo.recompiles",
                                         "dynamo.failures")) for p, m in s.programs.items()}
    assert got == want
    assert s.program == (next(iter(want)) if len(want) == 1 else "torch_trace")
    rank = re.search(r"_rank_(\d+)_", log.name)
    assert s.stage == (f"rank_{rank[1]}" if rank else "trace")
    compiles = parsed.tables["torch_trace_compiles"]
    assert set(compiles["program"]) == set(want)


@pytest.mark.parametrize("log", LOGS, ids=_id)
def test_compile_rows_are_torchs_compilation_metrics(log):
    rows = PARSED[log].tables["torch_trace_compiles"].to_dicts()
    cms = figures_of(log)["compilation_metrics"]
    assert len(rows) == len(cms)
    for row, m in zip(rows, cms):  # in the order torch recorded them
        assert row["phase"] == ("forward" if m["is_forward"] else "backward")
        assert row["compile_id"] == m["compile_id"]
        for col in ("co_name", "co_filename", "co_firstlineno", "entire_frame_compile_time_s", "backend_compile_time_s",
                    "inductor_compile_time_s", "code_gen_time_s", "guard_count", "shape_env_guard_count",
                    "graph_op_count", "graph_node_count", "graph_input_count", "fail_type", "fail_reason",
                    "fail_user_frame_filename", "fail_user_frame_lineno", "recompile_reason", "cache_size",
                    "has_guarded_code"):
            assert row[col] == m[col], col
        assert sorted(row["restart_reasons"] or []) == sorted(m["restart_reasons"] or [])
        assert row["fx_cache_hits"] == m["inductor_fx_local_cache_hit_count"] + m["inductor_fx_remote_cache_hit_count"]
        assert row["fx_cache_misses"] == m["inductor_fx_local_cache_miss_count"] + m["inductor_fx_remote_cache_miss_count"]


def test_graph_breaks_name_reason_and_user_frame():
    log = next(p for p in LOGS if p.parent.name == "graph_break")
    rows = PARSED[log].tables["torch_trace_graph_breaks"].to_dicts()
    c = figures_of(log)["counters"]
    torch_reasons = Counter()
    for k, v in [*c["graph_break"].items(), *c["unimplemented"].items()]:
        torch_reasons[k.split("\n")[0]] += v
    assert Counter(r["reason"] for r in rows) == torch_reasons
    got = [(r["compile_id"], r["kind"], r["reason"], r["gb_id"], r["user_filename"], r["user_lineno"],
            r["user_function"], r["program"]) for r in rows]
    assert got == [
        ("0/0", "graph_break", "Failed to trace builtin operator", "gb0059", SRC, 21, "forward", FORWARD),
        ("1/0", "graph_break", "Data-dependent branching", "gb0170", SRC, 22, "forward", FORWARD),
    ]
    assert rows[0]["explanation"].startswith("Dynamo does not know how to trace builtin operator `print`")


def test_recompile_and_failure_rows():
    rec = PARSED[next(p for p in LOGS if p.parent.name == "recompile")].tables["torch_trace_compiles"]
    assert rec.select("compile_id", "frame_compile_id", "cache_size").rows() == [("0/0", 0, 0), ("0/1", 1, 1)]
    assert rec["recompile_reason"][1] == "0/0: tensor 'x' size mismatch at index 0. expected 4, actual 6"
    fail = PARSED[next(p for p in LOGS if p.parent.name == "compile_failure")].tables["torch_trace_compiles"]
    row = fail.filter(pl.col("fail_type").is_not_null()).to_dicts()
    assert [(r["fail_type"], r["co_name"], r["guard_count"]) for r in row] == [("BackendCompilerFailed", "forward", None)]
    assert "dumpscope: this backend always fails" in row[0]["fail_reason"]


def _payloads(data: bytes, record: str) -> list[tuple[int, list[str]]]:
    """(line of the record, payload lines) of every record of that name: the naive way."""
    out, cur = [], None
    for i, line in enumerate(data.decode().split("\n"), 1):
        if line.startswith("\t"):
            if cur is not None:
                cur[1].append(line[1:] + "\n")
        else:
            cur = (i, []) if f'] {{"{record}": ' in line else None
            if cur is not None:
                out.append(cur)
    return out


@pytest.mark.parametrize("log", LOGS, ids=_id)
def test_output_code_reads_as_output_code_py(log):
    """Each traced module gives the rows and figures the output_code.py parser gives the same text."""
    tables = PARSED[log].tables
    kernels, calls = tables["torch_trace_kernels"], tables.get("torch_trace_extern_calls")
    codes = _payloads(DATA[log], "inductor_output_code")
    assert len(codes) == len(tables["torch_trace_output_code"]) > 0
    for at, lines in codes:
        want, summary = collect(inductor_code, lines, all_tables=True)
        assert summary.status is Status.OK
        got = kernels.filter(pl.col("output_code_lineno") == at).drop("dump_id", "parser_version", "compile_id",
                                                                        "output_code_lineno")
        assert got.with_columns(pl.col("lineno") - at).equals(want["inductor_kernels"])
        if calls is not None:
            got = calls.filter(pl.col("output_code_lineno") == at).select("callee", "kind", pl.col("lineno") - at)
            assert got.equals(want["inductor_extern_calls"])
    graphs = tables["torch_trace_output_code"]["graph"].to_list()
    assert all(re.fullmatch(r"\d+_(forward|backward|inference)", g) for g in graphs)


def test_sniff_stage_and_naming():
    head = DATA[LOGS[0]][:65536].decode()
    assert P.sniff("x.log", head) and not P.sniff("x.log", "I1123 13:38:05.026000 31456 torch/_inductor/debug.py:757] "
                                                         "[0/0] [__ir_post_fusion] AFTER FUSION\n")
    assert kind_of("r/j/renamed.txt", head) is DumpKind.TORCH_TRACE
    assert kind_of("r/j/dedicated_log_torch_trace_ab12_x.log.gz", "") is DumpKind.TORCH_TRACE
    assert P.stage_from_name("dedicated_log_torch_trace_rank_3_k2j_x9.log") == "rank_3"
    assert P.stage_from_name("dedicated_log_torch_trace__a4orm53.log") == "trace"
    assert P.stage_from_name("debug.log") is None
    assert program_from_path("2026-11-20/job/tlparse/dedicated_log_torch_trace__a4orm53.log.gz") == "torch_trace"


def test_program_rule_for_resume_functions():
    t = P._Trace()
    assert t._program("forward", "/m.py", 19) == "forward at /m.py:19"
    assert t._program("forward", "/m.py", 40) == "forward at /m.py:40"  # another class's forward, same file
    assert t._program("torch_dynamo_resume_in_forward_at_22", "/m.py", 22) == "forward at /m.py:19"
    assert t._program("torch_dynamo_resume_in_forward_at_45", "/m.py", 45) == "forward at /m.py:40"
    nested = "torch_dynamo_resume_in_torch_dynamo_resume_in_forward_at_21_at_23"
    assert t._program(nested, "/m.py", 23) == "forward at /m.py:19"
    # a parent the log never compiled: the resume function is a program of its own
    assert t._program("torch_dynamo_resume_in_step_at_7", "/m.py", 7) == "torch_dynamo_resume_in_step_at_7 at /m.py:7"
    assert t._program("torch_dynamo_resume_in_forward_at_5", "/other.py", 5).endswith(" at /other.py:5")


def test_records_table_counts_every_record():
    log = LOGS[0]
    recs = PARSED[log].tables["torch_trace_records"]
    envelopes = [line for line in DATA[log].decode().split("\n") if line and not line.startswith("\t")]
    assert recs["records"].sum() == len(envelopes)
    assert recs["payload_lines"].sum() == sum(1 for line in DATA[log].decode().split("\n") if line.startswith("\t"))
    assert recs["known"].all()


# --- bad input ---

GB = next(p for p in LOGS if p.parent.name == "graph_break")
GB_TEXT = DATA[GB].decode()
GB_LINES = GB_TEXT.split("\n")[:-1]
WHOLE = PARSED[GB].summary


def _text(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def _line_of(pred) -> int:
    return next(i for i, line in enumerate(GB_LINES) if pred(line))


def test_empty_and_junk():
    for data, what in ((b"", "the file is empty"), (b"hello\nworld\n", "not a TORCH_TRACE log")):
        parsed = parse_bytes(data, "n/j/dedicated_log_torch_trace_x1.log")
        assert (parsed.summary.kind, parsed.status, parsed.tables) == (DumpKind.TORCH_TRACE, Status.FAILED, {})
        assert what in parsed.summary.errors[0]
    with pytest.raises(ParseError, match="no readable"):
        list(P.parse(["\t payload only\n"]))


def test_corrupt_json_line_is_partial_and_named():
    i = _line_of(lambda line: '{"chromium_event"' in line)
    lines = list(GB_LINES)
    lines[i] = lines[i][:-20]  # the record loses its end; its payload lines follow
    parsed = parse_bytes(_text(lines), "n/j/dedicated_log_torch_trace_x1.log")
    s = parsed.summary
    assert s.status is Status.PARTIAL
    assert any(f": line {i + 1}: record is not valid JSON" in e for e in s.errors), s.errors
    assert s.metrics == WHOLE.metrics  # a chromium event carries no figure


def test_payload_without_its_record():
    i = _line_of(lambda line: "dynamo_graph_break_reason" in line)
    lines = GB_LINES[:i] + GB_LINES[i + 1:]
    s = parse_bytes(_text(lines), "n/j/dedicated_log_torch_trace_x1.log").summary
    assert s.status is Status.PARTIAL
    assert any(f": line {i + 1}: payload line without a record" in e for e in s.errors), s.errors
    assert s.metrics["dynamo.graph_breaks"] == WHOLE.metrics["dynamo.graph_breaks"] - 1
    # and a log that starts mid-payload
    s = parse_bytes(_text(GB_LINES[i + 1:]), "n/j/dedicated_log_torch_trace_x1.log").summary
    assert s.status is Status.PARTIAL and any(": line 1: payload line without a record" in e for e in s.errors)


def test_altered_payload_breaks_its_md5():
    i = _line_of(lambda line: '{"inductor_output_code"' in line)
    lines = list(GB_LINES)
    lines[i + 40] = lines[i + 40] + " # edited"
    s = parse_bytes(_text(lines), "n/j/dedicated_log_torch_trace_x1.log").summary
    assert s.status is Status.PARTIAL
    assert any(f": line {i + 1}: the payload of inductor_output_code" in e and "MD5" in e for e in s.errors), s.errors


def test_unknown_records_and_keys_from_newer_torch_change_nothing():
    lines = []
    for line in GB_LINES:
        if '{"compilation_metrics": {' in line:
            line = line.replace('{"compilation_metrics": {', '{"compilation_metrics": {"a_field_of_torch_3": [1, 2], ', 1)
        lines.append(line)
        if '{"dynamo_start"' in line:
            lines.append('V1127 10:00:00.000000 1 torch/_dynamo/new.py:1] {"dynamo_new_thing": {"x": 1}, "frame_id": 0, '
                         '"frame_compile_id": 0, "attempt": 0, "has_payload": "8d777f385d3dfec8815d20f7496026dc"}')
            lines.append("\tdata")
    parsed = parse_bytes(_text(lines), "n/j/dedicated_log_torch_trace_x1.log")
    assert (parsed.status, parsed.summary.metrics) == (Status.OK, WHOLE.metrics)
    recs = parsed.tables["torch_trace_records"].filter(~pl.col("known"))
    assert recs.select("record", "records", "payload_lines").rows() == [("dynamo_new_thing", 3, 3)]


def test_lines_without_newlines_read_the_same():
    tables, s = collect(P, GB_LINES)
    assert (s.status, s.metrics) == (Status.OK, WHOLE.metrics)


def test_a_long_line_past_the_cap_fails_the_dump():
    parsed = parse_bytes(DATA[GB], name_of(GB), limits=ParseLimits(max_line_bytes=10_000))
    assert (parsed.status, parsed.summary.limit) == (Status.FAILED, "max_line_bytes")


def test_cut_inside_a_compile_is_partial_and_counts_only_closed_compiles():
    end = _line_of(lambda line: '{"compilation_metrics": {"compile_id": "1/0"' in line)
    s = parse_bytes(_text(GB_LINES[:end]), "n/j/dedicated_log_torch_trace_x1.log").summary
    assert s.status is Status.PARTIAL and s.truncated
    assert any(f"line {end}: the log ends inside the compile 1/0" in e for e in s.errors), s.errors
    assert (s.metrics["dynamo.compiles"], s.metrics["dynamo.graph_breaks"]) == (1, 1)
    s = parse_bytes(_text(GB_LINES[:end + 1]), "n/j/dedicated_log_torch_trace_x1.log").summary
    assert s.status is Status.OK and (s.metrics["dynamo.compiles"], s.metrics["dynamo.graph_breaks"]) == (2, 2)
    # a lazily compiled backward: its output code read, its bwd_compilation_metrics cut off
    bwd = _line_of(lambda line: '{"bwd_compilation_metrics"' in line)
    s = parse_bytes(_text(GB_LINES[:bwd]), "n/j/dedicated_log_torch_trace_x1.log").summary
    assert s.status is Status.PARTIAL and any("lazy backward compile of 2/0" in e for e in s.errors), s.errors


# The figures of a log cut cleanly between records, computed the naive way: all records in
# memory; a compile counts when its metrics record is there, its graph breaks and output code
# with it (an output code after the forward metrics belongs to the backward's metrics).
_RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")


def reference(data: bytes) -> tuple[dict, dict]:
    records = []
    for line in data.decode().split("\n"):
        if line.startswith("\t"):
            records[-1][1].append(line[1:] + "\n")
        elif line:
            records.append((json.loads(line.split("] ", 1)[1]), []))
    totals, programs, functions, program_of = Counter(dict.fromkeys(P.BASE_METRICS, 0)), {}, defaultdict(set), {}
    pending = defaultdict(Counter)  # (key, phase) -> figures
    closed = set()

    def add(program, figures):
        totals.update(figures)
        if program is not None:
            programs.setdefault(program, Counter(dict.fromkeys(P.BASE_METRICS, 0))).update(figures)

    for rec, payload in records:
        name = next(iter(rec))
        key = (rec.get("compiled_autograd_id"), rec.get("frame_id"), rec.get("frame_compile_id"))
        phase = "backward" if key in closed else "forward"
        if name == "inductor_output_code":
            pending[key, phase].update(collect(inductor_code, payload)[1].metrics)
        elif name == "artifact" and rec["artifact"]["name"] == "dynamo_graph_break_reason":
            pending[key, phase]["dynamo.graph_breaks"] += 1
        elif name == "compilation_metrics":
            m = rec[name]
            co, line = m["co_name"], None
            while match := _RESUME.match(co):
                co, line = match[1], int(match[2])
            if line is None:
                functions[co, m["co_filename"]].add(m["co_firstlineno"])
                program = f"{co} at {m['co_filename']}:{m['co_firstlineno']}"
            else:
                first = max(f for f in functions[co, m["co_filename"]] if f <= line)
                program = f"{co} at {m['co_filename']}:{first}"
            program_of[key] = program
            closed.add(key)
            add(program, {"dynamo.compiles": 1, "dynamo.compile_seconds": m["entire_frame_compile_time_s"] or 0,
                          "dynamo.failures": int(bool(m["fail_type"])), "dynamo.recompiles": int(key[2] > 0),
                          "dynamo.guards": m["guard_count"] or 0, **_inductor(m), **pending.pop((key, "forward"), {})})
        elif name == "bwd_compilation_metrics":
            add(program_of.get(key), {**_inductor(rec[name]), **pending.pop((key, "backward"), {})})
    return rounded(dict(totals)), {p: rounded(dict(m)) for p, m in programs.items()}


def _inductor(m: dict) -> dict:
    return {"inductor.compile_seconds": m["inductor_compile_time_s"] or 0,
            "inductor.cache_hits": m["inductor_fx_local_cache_hit_count"] + m["inductor_fx_remote_cache_hit_count"],
            "inductor.cache_misses": m["inductor_fx_local_cache_miss_count"] + m["inductor_fx_remote_cache_miss_count"]}


@pytest.mark.parametrize("log", LOGS, ids=_id)
def test_reference_agrees_on_whole_logs(log):
    s = PARSED[log].summary
    assert reference(DATA[log]) == (rounded(s.metrics), {p: rounded(m) for p, m in s.programs.items()})


def _check_cut(log: Path, cut: int) -> Status:
    """Checks the log cut at byte ``cut``; returns the cut log's status."""
    data = DATA[log][:cut]
    name = name_of(log)
    parsed = parse_bytes(data, name)
    s = parsed.summary
    if s.status is Status.OK:  # a clean cut between records: what the records there say, nothing else
        assert reference(data) == (rounded(s.metrics), {p: rounded(m) for p, m in s.programs.items()}), cut
    else:
        assert s.errors and all(e.startswith(f"{name}: ") for e in s.errors), s.errors
        assert any(re.match(rf"^{re.escape(name)}: (line \d+|the file is)", e) for e in s.errors), s.errors
        if s.status is Status.PARTIAL:  # never more than the whole log says
            whole = PARSED[log].summary.metrics
            assert all(v <= whole.get(k, 0) + 1e-6 for k, v in s.metrics.items()), (cut, s.metrics)
    return s.status


@settings(max_examples=150, deadline=None)
@given(log=st.sampled_from(LOGS), fraction=st.floats(0, 1), at_line_end=st.booleans())
@pytest.mark.slow
def test_every_cut_is_partial_with_a_reason_or_the_figures_of_what_it_holds(log, fraction, at_line_end):
    data = DATA[log]
    cut = int(len(data) * fraction)
    if at_line_end:
        cut = data.rfind(b"\n", 0, cut) + 1
    _check_cut(log, cut)


@pytest.mark.slow
def test_cuts_at_every_record_boundary():
    log = next(p for p in LOGS if p.parent.name == "graph_break")
    data = DATA[log]
    starts = [m.start() for m in re.finditer(rb"(?m)^[VIWEC]\d{4} ", data)]
    ok = 0
    for cut in starts + [len(data)]:
        ok += _check_cut(log, cut) is Status.OK
    assert 0 < ok < len(starts)  # clean cuts between compiles exist, and most cuts are not clean
