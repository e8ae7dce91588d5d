"""TORCH_TRACE logs in the verdict: each program's figures in the warehouse (against torch's own
``CompilationMetrics``), the rules for the dynamo.*/inductor.* figures (compile seconds judged on a
median of runs), the cause of a graph-break incident, and the sample bucket's torch-trace nights.

Every log is real (torch 2.13.0 on CPU: tests/fixtures/torch_trace/ORIGIN.md, data/README.md);
nights are built without Prefect (``night_in_process``)."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest

from flows.warehouse import store as wh
from tests.test_torch_trace import FIX, rounded
from transforms.parsers import torch_trace as P
from transforms.parse import parse_dump
from transforms.trends.incident_walk import Floors, compute
from transforms.trends.rules import Settings, parse_settings

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_bucket"
SRC = "/tmp/dumpscope-torch-trace/src/dumpscope_model.py"
FORWARD = f"forward at {SRC}:19"


def _log(case_dir: Path) -> Path:
    (log,) = sorted(case_dir.glob("dedicated_log_torch_trace_*.log.gz"))
    return log


def _program_of(m: dict, firsts: dict[tuple[str, str], list[int]]) -> str:
    """The program of a torch CompilationMetrics object: a resume function's is its parent's."""
    name, line = m["co_name"], None
    while name.startswith("torch_dynamo_resume_in_"):
        name, _, at = name[len("torch_dynamo_resume_in_"):].rpartition("_at_")
        line = int(at)
    if line is None:
        return f"{name} at {m['co_filename']}:{m['co_firstlineno']}"
    return f"{name} at {m['co_filename']}:{max(f for f in firsts[name, m['co_filename']] if f <= line)}"


def torch_per_program(fig: dict) -> dict[str, dict[str, float]]:
    """Each program's figures from torch's own CompilationMetrics objects (never from the log);
    a lazily compiled backward (is_forward False) counts with its forward's compile id."""
    cms = [m for m in fig["compilation_metrics"] if not m["is_runtime"]]
    fwd = [m for m in cms if m["is_forward"] is not False]
    firsts = defaultdict(list)
    for m in fwd:
        if not m["co_name"].startswith("torch_dynamo_resume_in_"):
            firsts[m["co_name"], m["co_filename"]].append(m["co_firstlineno"])
    program_of = {m["compile_id"]: _program_of(m, firsts) for m in fwd}
    out: dict[str, dict[str, float]] = {}
    for m in cms:
        p = program_of[m["compile_id"]]
        f = out.setdefault(p, dict.fromkeys(P.BASE_METRICS, 0))
        f["inductor.compile_seconds"] += m["inductor_compile_time_s"] or 0
        f["inductor.cache_hits"] += sum(m[f"inductor_fx_{w}_cache_hit_count"] or 0 for w in ("local", "remote"))
        f["inductor.cache_misses"] += sum(m[f"inductor_fx_{w}_cache_miss_count"] or 0 for w in ("local", "remote"))
        if m["is_forward"] is not False:
            f["dynamo.compiles"] += 1
            f["dynamo.compile_seconds"] += m["entire_frame_compile_time_s"] or 0
            f["dynamo.failures"] += 1 if m["fail_type"] else 0
            f["dynamo.recompiles"] += 1 if m["recompile_reason"] is not None else 0
            f["dynamo.guards"] += m["guard_count"] or 0
    return {p: rounded(f) for p, f in out.items()}


def _bucket(root: Path, nights: dict[str, dict[str, Path]]) -> Path:
    """``root``: one run per night (2026-10-01, ...), each job's log copied into ``<run>/<job>/``."""
    for i, (run, jobs) in enumerate(nights.items()):
        (root / run).mkdir(parents=True)
        (root / run / "run.json").write_text(json.dumps({"started_at": f"{run}T02:00:00+00:00", "commit": f"c{i}"}))
        for job, log in jobs.items():
            (root / run / job).mkdir()
            shutil.copy(log, root / run / job / log.name)
    return root


def _night(tmp_path: Path, nights: dict[str, dict[str, Path]]) -> duckdb.DuckDBPyConnection:
    from flows.nightly import night_in_process

    bucket = _bucket(tmp_path / "bucket", nights)
    night_in_process(bucket=str(bucket), warehouse=tmp_path / "wh.duckdb", report_path=tmp_path / "report.md")
    return duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)


# --- each program's figures in the warehouse ---


def test_metric_rows_are_each_programs_figures_equal_to_torchs(tmp_path):
    failure, breaks = _log(FIX / "compile_failure"), _log(FIX / "graph_break")
    # The next night ships the same log again: its rows are copied from the first path, programs kept.
    con = _night(tmp_path, {"2026-10-01": {"failure": failure, "breaks": breaks}, "2026-10-02": {"failure": failure}})
    rows = con.execute("SELECT job, program, metric, value FROM metrics WHERE kind = 'torch_trace' "
                       "AND run_id = '2026-10-01'").fetchall()
    again = con.execute("SELECT job, program, metric, value FROM metrics WHERE kind = 'torch_trace' "
                        "AND run_id = '2026-10-02'").fetchall()
    assert sorted(again) == sorted(r for r in rows if r[0] == "failure")
    got: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for job, program, metric, value in rows:
        got[job, program][metric] = value
    for job, log in (("failure", failure), ("breaks", breaks)):
        fig = json.loads((log.parent / "torch_figures.json").read_text())[log.name]
        want = torch_per_program(fig)
        if job == "breaks":  # one program: every graph break of the log is its (counters hold no program)
            c = fig["counters"]
            want[FORWARD]["dynamo.graph_breaks"] = sum(c["graph_break"].values()) + sum(
                v for k, v in c["unimplemented"].items() if k.startswith("Data-dependent branching"))
        assert {p: rounded({k: m[k] for k in P.BASE_METRICS}) for (j, p), m in got.items() if j == job} == want
    assert set(got) == {("failure", f"scale_shift at {SRC}:9"), ("failure", FORWARD), ("breaks", FORWARD)}
    # One series per program, named without the file's directories.
    series = sorted(r[0] for r in con.execute("SELECT series FROM dump_series WHERE kind = 'torch_trace' "
                                              "AND run_id = '2026-10-01'").fetchall())
    assert series == ["breaks/forward at dumpscope_model.py:19/torch_trace/trace",
                      "failure/forward at dumpscope_model.py:19/torch_trace/trace",
                      "failure/scale_shift at dumpscope_model.py:9/torch_trace/trace"]


# --- each program's series diffs its own compiles ---


def test_each_programs_diff_holds_its_own_compiles_in_the_nightly_check_and_diff(tmp_path):
    """Real logs of one job compiling two functions, scale_shift then forward (tests/fixtures/torch_trace:
    two_programs, then two_programs_changed: forward's body rewritten with torch.where and called on a second
    batch size, a recompile; scale_shift untouched). Main gave each of the log's series the whole log's
    changes: scale_shift's diff listed forward's four compile changes; dumpscope diff each item twice (once a
    program) and each series every program's figures. Then scale_shift's diff still held forward's recompile
    (a recompile, graph break or failed compile was keyed without its program): now it holds nothing."""
    from flows.commands.diff import diff_runs
    from tests.test_check_equals_nightly import _check, _night_by_night, _nightly, _said

    before, after = _log(FIX / "two_programs"), _log(FIX / "two_programs_changed")
    nights = ["2026-10-01", "2026-10-02"]
    source = _bucket(tmp_path / "source", {nights[0]: {"two": before}, nights[1]: {"two": after}})
    mornings = _night_by_night(source, tmp_path / "built")
    fwd, shift = "forward at dumpscope_model.py:19", "scale_shift at dumpscope_model.py:9"
    ops = {log: {m["compile_id"]: m["graph_op_count"] for m in json.loads((log.parent / "torch_figures.json")
                                                                          .read_text())[log.name]["compilation_metrics"]}
           for log in (before, after)}
    assert (ops[before], ops[after]) == ({"0/0": 3, "1/0": 4}, {"0/0": 3, "1/0": 7, "1/1": 7})  # torch's own
    reason = "tensor 'x' size mismatch at index 0. expected 4, actual 6"
    where = "___check_obj_id(G['torch'].where, <id>), type=<class 'builtin_function_or_method'>"
    with wh.connect_readonly(mornings[nights[1]]) as con:
        rows = con.execute("SELECT program, category, key, change, count_before, count_after FROM diffs "
                           "ORDER BY program, category, key").fetchall()
        ranked = con.execute("SELECT description FROM diffs WHERE program = ? ORDER BY rank", [fwd]).fetchall()
        listed = diff_runs(con, *nights)
    assert rows == [
        (fwd, "compile_code", f"{fwd} | forward/0", "grew", 122, 150),
        (fwd, "compile_graph", f"{fwd} | forward/0", "grew", ops[before]["1/0"], ops[after]["1/0"]),
        (fwd, "compile_graph", f"{fwd} | forward/1", "appeared", None, ops[after]["1/1"]),  # its kernels, code, guards in it
        (fwd, "compile_guard", f"{fwd} | forward/0 | {where}", "appeared", None, 1),
        (fwd, "recompile", f"{fwd} | {reason}", "appeared", None, 1),  # forward's frame recompiled: forward's
    ]  # scale_shift's program is unchanged: its diff has no row (main: the log's recompile, keyed by its reason alone)
    # dumpscope diff: the nightly's changes, then the metrics of the series' own program, each once.
    lines = {s: rows.get_column("description").to_list() for (s,), rows in listed.group_by("series")}
    assert lines[f"two/{shift}/torch_trace/trace"] == [
        "dynamo.compile_seconds 8.73 → 8.7 (-0.0297, -0.3 %)",
        "inductor.compile_seconds 8.06 → 8.03 (-0.0388, -0.5 %)"]
    forward = lines[f"two/{fwd}/torch_trace/trace"]
    assert forward[:5] == [d for (d,) in ranked]
    assert f"recompile of forward: {reason} appeared (×1)" in forward[:5]
    assert forward[5:] == [
        "dynamo.compile_seconds 0.933 → 1.81 (+0.879, +94.2 %)", "dynamo.compiles 1 → 2 (+1, +100.0 %)",
        "dynamo.guards 45 → 92 (+47, +104.4 %)", "dynamo.recompiles 0 → 1 (+1)", "inductor.cache_misses 1 → 2 (+1, +100.0 %)",
        "inductor.compile_seconds 0.8 → 1.54 (+0.744, +93.1 %)", "kernel.extern_calls 2 → 4 (+2, +100.0 %)",
        "kernel.extern_calls.addmm 2 → 4 (+2, +100.0 %)", "kernel.generated 1 → 2 (+1, +100.0 %)",
        "kernel.generated.cpp 1 → 2 (+1, +100.0 %)"]
    # check of night 2 against night 1 opens what the nightly opened, with the same cause and evidence.
    copy = shutil.copytree(source / nights[1], tmp_path / nights[1])
    out = _check(copy, mornings[nights[0]])
    assert out.exit_code == 0, out.output
    checked = json.loads(out.stdout.replace(json.dumps(f"{tmp_path}/")[1:-1], ""))
    assert [(r["program"], r["kind"]) for r in checked] == [(fwd, "regression")]
    assert "scale_shift" not in out.stdout
    assert sorted(_said(r) for r in checked) == _nightly(mornings[nights[1]], nights[1])


# --- compile seconds: a median of runs ---


def _walk(values: list[float], repeats: tuple[str, ...] = ()) -> list[tuple]:
    runs = [f"r{i}" for i in range(len(values))]
    order = pl.DataFrame({"run_id": runs, "run_seq": list(range(len(runs))),
                          "started_at": [datetime(2026, 1, 1) + timedelta(days=i) for i in range(len(runs))],
                          "commit": runs})
    obs = pl.DataFrame({"series": "s", "job": "j", "program": "p", "kind": "torch_trace", "stage": "trace",
                        "metric": "dynamo.compile_seconds", "run_id": runs, "value": values})
    health = pl.DataFrame({"series": "s", "job": "j", "program": "p", "run_id": runs, "status": "ok",
                           "detail": pl.Series([None] * len(runs), dtype=pl.String)})
    repeated = pl.DataFrame({"series": "s", "run_id": list(repeats)}, schema={"series": pl.String, "run_id": pl.String})
    _, steps, _ = compute(obs, health, order, [], Settings(), Floors(), repeats=repeated)
    return steps.select("step", "opened_run", "last_good_run", "baseline", "value", "closed_run").rows()


def test_one_slow_run_opens_nothing_a_lasting_level_opens_where_it_began():
    assert _walk([13.6, 275.6, 13.6, 12.0, 15.3]) == []
    assert _walk([13.6, 13.6, 13.6, 275.6]) == []  # the last run alone: not yet a level
    # Slow from r3 on: the median of 3 runs passes +50 % at r4, whose step names r2 as last good.
    assert _walk([13.6, 12.0, 13.6, 275.6, 270.1, 13.0, 12.5]) == [
        ("regression", "r4", "r2", 13.6, 270.1, "r6")]
    # Equal values still count in the median (the walk reads every run of these metrics).
    assert _walk([13.6, 13.6, 40.0, 40.0, 40.0]) == [("regression", "r3", "r1", 13.6, 40.0, None)]


def test_a_dump_whose_bytes_an_earlier_run_held_is_not_a_second_sample():
    # r2's log is r1's again (a night copied into the bucket, a job that wrote its log again):
    # one slow run, measured once, not two slow runs of three.
    assert _walk([13.6, 275.6, 275.6]) == [("regression", "r2", "r0", 13.6, 275.6, None)]
    assert _walk([13.6, 275.6, 275.6], repeats=("r2",)) == []
    # A lasting level still opens when its runs are new measurements; repeats between them change nothing.
    assert _walk([13.6, 13.6, 40.0, 40.0, 41.0], repeats=("r1", "r3")) == [("regression", "r4", "r1", 13.6, 40.0, None)]


def test_window_is_a_setting():
    rule = parse_settings('[[rule]]\nmetric = "*.compile_seconds"\nrel = 1.0\nnoise = 5\nwindow = 5\n').rule_for(
        "s", "dynamo.compile_seconds")
    assert (rule.direction, rule.rel, rule.noise, rule.window) == (1, 1.0, 5.0, 5)
    with pytest.raises(ValueError, match="window must be an integer from 1 to 30"):
        parse_settings('[[rule]]\nmetric = "x"\nwindow = 0\n')


def test_a_lasting_compile_time_step_opens_one_spike_does_not(tmp_path):
    """Real logs of one program: warm (a warm cache), plain and cold (a cold one: two jobs a line
    apart) and busy (cold, a runner kept busy). Job 'lasting' is warm two nights (the second log a
    copy of the first: one measurement), cold from the third on; job 'spike' is slow one night and
    then writes the first night's log again (copies: not new samples)."""
    warm, plain = _log(FIX / "plain_warm"), _log(SAMPLE / "2026-11-17" / "torch-trace")
    busy, cold = _log(SAMPLE / "2026-11-18" / "torch-trace"), _log(FIX / "graph_break_removed")
    runs = ["2026-10-01", "2026-10-02", "2026-10-03", "2026-10-04"]
    lasting, spike = [warm, warm, plain, cold], [plain, busy, plain, plain]
    con = _night(tmp_path, {r: {"lasting": a, "spike": b} for r, a, b in zip(runs, lasting, spike)})
    figures = {log: parse_dump(gzip.open(log), log.name).summary.metrics for log in (warm, plain, busy, cold)}
    steps = con.execute("SELECT job, metric, step, opened_run, last_good_run, baseline, value, closed_run "
                        "FROM incident_steps ORDER BY job, metric").fetchall()
    # The median of the three measurements (warm, plain, cold) is cold's, from r4 on.
    assert steps == [("lasting", m, "regression", "2026-10-04", "2026-10-02", figures[warm][m], figures[cold][m], None)
                     for m in ("dynamo.compile_seconds", "inductor.compile_seconds")]
    assert figures[busy]["dynamo.compile_seconds"] > 10 * figures[plain]["dynamo.compile_seconds"]  # the spike is real


# --- the sample bucket's torch-trace nights ---


def test_sample_graph_break_opens_with_its_reason_and_frame_and_the_fix_closes_it(sample_warehouse):
    con = duckdb.connect(str(sample_warehouse), read_only=True)
    incidents = con.execute("SELECT program, kind, opened_run, last_good_run, closed_run, closed_how, metrics, cause "
                            "FROM incidents WHERE job = 'torch-trace'").fetchall()
    assert len(incidents) == 1
    program, kind, opened, good, closed, how, metrics, cause = incidents[0]
    assert (program, kind, opened, good, closed, how) == (
        "forward at dumpscope_model.py:19", "regression", "2026-11-19", "2026-11-18", "2026-11-20", "fixed")
    # The one-night compile-time spike of 2026-11-18 (275 s against 13.6 s) is no step.
    assert metrics == ["dynamo.compiles", "dynamo.graph_breaks", "dynamo.guards"]
    lines = cause.split("\n")
    assert "graph break 'Data-dependent branching' at dumpscope_model.py:22 in forward appeared (×1)" in lines
    assert any(line.startswith("graph break ") and "dumpscope_model.py:21 in forward appeared" in line for line in lines)
    # Evidence: the break's record line in the log.
    lines_after = con.execute("SELECT lines_after, excerpt_after FROM diffs WHERE category = 'graph_break' "
                              "AND label LIKE '%Data-dependent%' AND change = 'appeared'").fetchall()
    assert len(lines_after) == 1 and lines_after[0][0] and "dynamo_graph_break_reason" in lines_after[0][1]


def test_a_recompile_and_a_failed_compile_open_incidents_named_by_their_reason(tmp_path):
    """Real logs: job 'shapes' goes from one input shape to two (a recompile), job 'backend' from a
    good compile of forward to one whose backend raises (BackendCompilerFailed)."""
    plain, recompile, failure = (_log(FIX / c) for c in ("plain", "recompile", "compile_failure"))
    con = _night(tmp_path, {"2026-10-01": {"shapes": plain, "backend": plain},
                            "2026-10-02": {"shapes": recompile, "backend": failure}})
    got = {(job, kind): (metrics, cause.split("\n")) for job, kind, metrics, cause in con.execute(
        "SELECT job, kind, metrics, cause FROM incidents WHERE opened_run = '2026-10-02'").fetchall()}
    figures = {log: json.loads((log.parent / "torch_figures.json").read_text())[log.name]["compilation_metrics"]
               for log in (recompile, failure)}
    (reason,) = [m["recompile_reason"] for m in figures[recompile] if m["recompile_reason"]]
    (failed,) = [m for m in figures[failure] if m["fail_type"]]
    metrics, cause = got["shapes", "regression"]
    assert {"dynamo.recompiles", "dynamo.compiles", "dynamo.guards"} <= set(metrics)
    assert cause[0] == f"recompile of forward: {reason.split(': ', 1)[1]} appeared (×1)"
    metrics, cause = got["backend", "failure"]
    assert "dynamo.failures" in metrics
    assert cause[0].startswith(f"compile of forward failed: {failed['fail_type']}: {failed['fail_reason'].splitlines()[0][:300]}")


def test_a_log_staged_by_parser_version_1_is_parsed_again_with_each_programs_figures(tmp_path):
    """Version 1 staged only the totals: its staged result must not be loaded as if it had programs."""
    from fsspec.implementations.local import LocalFileSystem

    from flows.ingest.bucket import list_objects
    from flows.ingest.staging import stage_object

    log = _log(FIX / "compile_failure")
    bucket = _bucket(tmp_path / "bucket", {"2026-10-01": {"job": log}})
    (obj,) = [o for o in list_objects(str(bucket)) if o.path.endswith(".log.gz")]
    first = stage_object(LocalFileSystem(), obj, tmp_path / "staging")
    assert first.parsed and set(first.summary["programs"]) == {f"scale_shift at {SRC}:9", FORWARD}
    old = first.dir.with_name("torch_trace-v1")  # what version 1 left: the same summary without programs
    first.dir.rename(old)
    (old / "summary.json").write_text(json.dumps({k: v for k, v in first.summary.items() if k != "programs"}
                                                 | {"parser_version": 1}))
    again = stage_object(LocalFileSystem(), obj, tmp_path / "staging")
    assert (again.parsed, again.summary["parser_version"], again.summary["programs"]) == (
        True, P.PARSER_VERSION, first.summary["programs"])


# --- damage spoils only what it touches (issue 44, item 4) ---

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus" / "torch_trace"
INNER = "inner at /home/skarjala/pytorch/torch/_dynamo/external_utils.py:66"


def _named(tmp_path: Path, corpus_file: str, name: str) -> Path:
    """A corpus log (one of tlparse's test inputs) under the name PyTorch gives a rank's log."""
    (tmp_path / "logs").mkdir(exist_ok=True)
    return Path(shutil.copy(CORPUS / corpus_file, tmp_path / "logs" / name))


def test_a_payload_no_figure_reads_spoils_nothing_and_the_nights_real_step_is_judged(tmp_path):
    """Rank 0 of one job on three nights, from tlparse's own test inputs: whole (one recompile); recompiled
    three times with four inductor_runtime_and_tensor_meta payloads whose MD5 does not match (read by no
    figure); then the same with two output-code payloads damaged too (their kernel.* figures lost). Main made
    night 2 a failure headed by the checksum message, its figures dropped from trends and totals, the real
    step (recompiles 1 -> 3) hidden."""
    nights = {"2026-10-01": {"torch-trace": _named(tmp_path, "multi_rank_runtime_rank_0.first.log.gz",
                                                   "dedicated_log_torch_trace_rank_0_k3j9x2ab.log.gz")},
              "2026-10-02": {"torch-trace": _named(tmp_path, "multi_rank_runtime_rank_0.log.gz",
                                                   "dedicated_log_torch_trace_rank_0_p0q7rt1z.log.gz")},
              "2026-10-03": {"torch-trace": _named(tmp_path, "collectives_parity_rank_0.log.gz",
                                                   "dedicated_log_torch_trace_rank_0_w2e8c5dn.log.gz")}}
    con = _night(tmp_path, nights)
    assert con.execute("SELECT run_id, status, lost_metrics FROM dumps ORDER BY run_id").fetchall() == [
        ("2026-10-01", "ok", None), ("2026-10-02", "partial", []), ("2026-10-03", "partial", ["kernel.*"])]
    # Night 2: the recompiles are a regression of their own, not a failure of the log.
    [(iid, kind, metrics, headline)] = con.execute(
        "SELECT incident_id, kind, metrics, headline FROM incidents WHERE opened_run = '2026-10-02'").fetchall()
    assert (kind, metrics) == ("regression", ["dynamo.compiles", "dynamo.guards", "dynamo.recompiles"])
    assert "dynamo.recompiles 1 → 3 (+2)" in headline
    steps = con.execute("SELECT metric, baseline, value FROM incident_steps WHERE incident_id = ? ORDER BY metric",
                        [iid]).fetchall()
    assert steps == [("dynamo.compiles", 2, 4), ("dynamo.guards", 127, 275), ("dynamo.recompiles", 1, 3)]
    # Its figures are charted and summed: compile seconds 4.03 -> 6.66 s, not dropped (main: -100 %).
    trend = con.execute("""SELECT run_id, value FROM metric_trends WHERE metric = 'dynamo.compile_seconds'
                           ORDER BY run_id""").fetchall()
    assert trend == [("2026-10-01", 4.025805), ("2026-10-02", 6.660633), ("2026-10-03", 6.660633)]
    assert con.execute("SELECT run_id, value FROM job_totals WHERE metric = 'dynamo.compile_seconds' ORDER BY run_id"
                       ).fetchall() == trend
    # The damage is shown in ingest health and as the run's events, with the checksum message.
    assert con.execute("SELECT run_id, partial FROM run_rollups ORDER BY run_id").fetchall() == [
        ("2026-10-01", 0), ("2026-10-02", 1), ("2026-10-03", 1)]
    [(detail,)] = con.execute("SELECT detail FROM series_events WHERE run_id = '2026-10-02' AND event = 'partial_dump'"
                              ).fetchall()
    assert "line 1686: the payload of artifact inductor_runtime_and_tensor_meta (lines 1687-1784) does not match" in detail
    # Night 3 loses the kernel.* figures the verdict reads (fallbacks): a failure about the log, its other
    # figures still judged: the compile seconds' level lasted two nights of three (4.03 -> 6.66 s, Inductor's
    # 1.92 -> 4.03 s), a step in the same incident, from night 1.
    [(kind, metrics, headline, good)] = con.execute(
        "SELECT kind, metrics, headline, last_good_run FROM incidents WHERE opened_run = '2026-10-03'").fetchall()
    assert (kind, metrics, good) == ("failure", ["dump.lost", "dynamo.compile_seconds", "inductor.compile_seconds"],
                                     "2026-10-01")
    assert headline.startswith(f"torch-trace / {INNER.replace('/home/skarjala/pytorch/torch/_dynamo/', '')}: "
                               "torch_trace damaged, kernel.* not read: line 1340: the payload of inductor_output_code")
    assert con.execute("SELECT count(*) FROM metrics WHERE run_id = '2026-10-03' AND metric LIKE 'kernel.%'"
                       ).fetchall() == [(0,)]
    assert con.execute("SELECT value FROM metric_trends WHERE run_id = '2026-10-03' AND metric = 'dynamo.recompiles'"
                       ).fetchall() == [(3,)]
    # check of night 2's log against night 1 says what the nightly said: the regression, no failure.
    from typer.testing import CliRunner

    from flows.cli import app

    con.close()
    pr = tmp_path / "pr" / "torch-trace"
    pr.mkdir(parents=True)
    shutil.copy(nights["2026-10-02"]["torch-trace"], pr)
    out = CliRunner().invoke(app, ["check", str(pr.parent), "--warehouse", str(tmp_path / "wh.duckdb"), "--against",
                                   "2026-10-01", "--format", "json", "--fail-on", "new"])
    assert out.exit_code == 4, out.output
    assert [(e["change"], e["kind"], e["metrics"]) for e in json.loads(out.stdout)] == [
        ("opens", "regression", ["dynamo.compiles", "dynamo.guards", "dynamo.recompiles"])]
