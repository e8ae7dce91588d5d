"""Identity from what a dump says about itself, and values that change from process to process.

Real dumps only: the ``rank_logs`` incident bucket (two torch.distributed jobs of two ranks, gloo on
CPU, each rank its own process with ``TORCH_TRACE``, three nights: every log written by a new
process, its source in a new temporary folder), ``inductor_two_graphs`` (a graph break: model__0,
model__1 and model__2), and pytorch/tlparse's logs (data/corpus/torch_trace) under the names tlparse
ships them with (``dedicated_log_torch_trace_rank_<n>.log``, no random part).
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import polars as pl
import pytest

from transforms.parse import named_at, parse_dump
from transforms.records import DumpKind
from transforms.trends.diff_items import dump_items
from transforms.trends.series import assign_series
from transforms.volatile import normalise

ROOT = Path(__file__).resolve().parents[1]
RANKS = ROOT / "tests" / "incident_buckets" / "rank_logs"
GRAPHS = ROOT / "tests" / "incident_buckets" / "inductor_two_graphs"
CORPUS = ROOT / "data" / "corpus" / "torch_trace"
DUMP_COLUMNS = ["path", "run_id", "job", "kind", "stage", "program", "dump_id"]
NIGHTS = ["2026-10-01", "2026-10-02", "2026-10-03"]


def parsed(files: dict[str, bytes]) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    """(dumps, records) of files named ``<run_id>/<job>/...``, as the warehouse holds them."""
    rows, tables = [], {}
    for path, data in files.items():
        p = parse_dump(io.BytesIO(data), path, dump_id=path)
        rows.append((path, *path.split("/")[:2], str(p.summary.kind), p.summary.stage, p.summary.program, path))
        for table, frame in p.tables.items():
            tables.setdefault(table, []).append(frame)
    return pl.DataFrame(rows, schema=DUMP_COLUMNS, orient="row"), {t: pl.concat(f) for t, f in tables.items()}


def series_of(files: dict[str, bytes]) -> pl.DataFrame:
    """``assign_series`` of the files, a TORCH_TRACE log's programs each its own (as the warehouse's
    metric rows name them: ``flows.verdict.history.per_program_paths``)."""
    rows, programs = [], []
    for path, data in files.items():
        s = parse_dump(io.BytesIO(data), path).summary
        rows.append((path, *path.split("/")[:2], str(s.kind), s.stage, s.program))
        programs += [(path, p) for p in s.programs if p != s.program]
    return assign_series(pl.DataFrame(rows, schema=DUMP_COLUMNS[:-1], orient="row"),
                         programs=pl.DataFrame(programs, schema=["path", "program"], orient="row"))


def bucket_files(bucket: Path) -> dict[str, bytes]:
    return {str(p.relative_to(bucket)): p.read_bytes() for p in sorted(bucket.rglob("*.gz"))}


def figures(run_id: str, job: str) -> dict:
    return json.loads((RANKS / run_id / job / "compiler_figures.json").read_text())


def test_a_rank_log_is_its_rank_whatever_its_name_and_order():
    """Every night new random parts; in torch-ranks-early the names hold no rank (the log was opened
    before torch.distributed started) and the rank comes from the records. Main named the early
    job's logs by file order: stage trace, `step at rank_model.py:17` and `…#2`, swapping with the
    random parts."""
    dumps, _ = parsed(bucket_files(RANKS))
    names = {(r["run_id"], r["job"], r["path"].rsplit("/", 1)[1].removesuffix(".gz")): r["stage"]
             for r in dumps.iter_rows(named=True)}
    want = {(run, job, entry["log"]): f"rank_{entry['rank']}"
            for run in NIGHTS for job in ("torch-ranks", "torch-ranks-early")
            for entry in figures(run, job)["ranks"].values()}
    assert names == want and len(want) == 12
    assert not any("rank_" in log for (_, job, log) in want if job == "torch-ranks-early")
    assert len({log for (_, _, log) in want}) == 12  # a new random part every run
    series = series_of(bucket_files(RANKS))
    per_night = {run: sorted(series.filter(pl.col("run_id") == run).get_column("series")) for run in NIGHTS}
    assert per_night[NIGHTS[0]] == per_night[NIGHTS[1]] == per_night[NIGHTS[2]] == [
        "torch-ranks-early/step at rank_model.py:17/torch_trace/rank_0",
        "torch-ranks-early/step at rank_model.py:17/torch_trace/rank_1",
        "torch-ranks-early/warmup at rank_model.py:13/torch_trace/rank_0",
        "torch-ranks-early/warmup at rank_model.py:13/torch_trace/rank_1",
        "torch-ranks/step at rank_model.py:17/torch_trace/rank_0",
        "torch-ranks/step at rank_model.py:17/torch_trace/rank_1"]


def test_tlparse_rank_logs_without_a_random_part_keep_their_rank():
    """tlparse ships simple.log's bytes as multi_rank_messy_input/dedicated_log_torch_trace_rank_0.log
    and _rank_1.log (blob 69b998a3), and comp_failure.log's as multi_rank_logs/..._rank_2.log (blob
    27d67d8c): names without a random part, records without a rank. Main read them as stage trace, and
    two ranks of one job as `forward at test_torchinductor.py:11123` and `…#2`."""
    simple = gzip.decompress((CORPUS / "simple.log.gz").read_bytes())
    failure = gzip.decompress((CORPUS / "comp_failure.log.gz").read_bytes())
    files = {"n1/ranks/dedicated_log_torch_trace_rank_0.log": simple,
             "n1/ranks/dedicated_log_torch_trace_rank_1.log": simple,
             "n1/other/dedicated_log_torch_trace_rank_2.log": failure}
    dumps, _ = parsed(files)
    assert dumps.select("path", "stage").rows() == [(p, f"rank_{p[-5]}") for p in files]
    assert sorted(series_of(files).get_column("series")) == [
        "other/fn at test_misc.py:10755/torch_trace/rank_2",
        "ranks/forward at test_torchinductor.py:11123/torch_trace/rank_0",
        "ranks/forward at test_torchinductor.py:11123/torch_trace/rank_1"]
    # The same bytes met again under the other rank's name (the nightly parses a content once): the
    # copy's rank is its own name's, its program the text's.
    stage, program = dumps.row(0, named=True)["stage"], dumps.row(0, named=True)["program"]
    assert named_at(DumpKind.TORCH_TRACE, list(files)[1], list(files)[0], stage, program) == ("rank_1", program)


def test_a_copy_of_the_same_bytes_at_another_path_takes_that_paths_names():
    """An Inductor graph's IR names its program by its folder and an XLA side file by its file name:
    the same bytes under another folder are another program, not the first path's."""
    ir = "a/ind/run/model__1_forward_4.1/ir_post_fusion.txt"
    assert named_at(DumpKind.INDUCTOR_IR, "a/ind/run/model__2_forward_7.2/ir_post_fusion.txt", ir,
                    "post_fusion", "model__1_forward_4.1") == ("post_fusion", "model__2_forward_7.2")
    hlo = "a/jax/module_0001.jit_f.cpu_after_optimizations.txt"
    # An HLO module names itself in its text (HloModule jit_f): the text's name stays.
    assert named_at(DumpKind.XLA_HLO, "a/jax/module_0002.jit_g.cpu_after_optimizations.txt", hlo,
                    "after_optimizations", "jit_f.12") == ("after_optimizations", "jit_f.12")


def test_two_processes_logs_of_one_program_give_the_same_items():
    """Each rank's log, each night: 12 processes, with their own ids, checkouts and random names. Their
    items (recompile reasons, keys, labels, details) are one set: the same logs written by another
    process compare equal. Main keyed each recompile by its id and paths: 12 sets."""
    dumps, records = parsed(bucket_files(RANKS))
    items = dump_items(dumps, records).join(dumps.select("path", "job"), on="path")
    cols = ["category", "key", "label", "count", "bytes", "value", "detail"]
    per_log = {path: frame.select(cols).sort(cols).rows() for (path,), frame in items.partition_by("path", as_dict=True).items()}
    # Each compile's items too (issue 46): its graph, code, guards and what ranks are compared on. An early
    # log also holds its warm-up's: one set per job, six logs each.
    per_job = {job: {tuple(per_log[p]) for p in frame.get_column("path").unique()}
               for (job,), frame in items.partition_by("job", as_dict=True).items()}
    assert len(per_log) == 12 and {job: len(sets) for job, sets in per_job.items()} == {
        "torch-ranks": 1, "torch-ranks-early": 1}
    step = [r for r in next(iter(per_job["torch-ranks"])) if r[0] != "recompile"]
    # step/0, step/1, step/2 (backend aot_eager: no output code) and their 63 guards; its compile ids and
    # recompile reasons, what ranks are compared on.
    assert {c: sum(r[0] == c for r in step) for c in sorted({r[0] for r in step})} == {
        "compile_graph": 3, "compile_guard": 63, "rank_profile": 2}
    assert [(r[1], r[6][:5]) for r in step if r[0] in ("compile_graph", "rank_profile")] == [
        ("step at rank_model.py:17 | step/0", "[0/0]"), ("step at rank_model.py:17 | step/1", "[0/1]"),
        ("step at rank_model.py:17 | step/2", "[0/2]"), ("step at rank_model.py:17 | compile ids", "[0/0]"),
        ("step at rank_model.py:17 | recompiles", "___ch")]
    assert [r for r in next(iter(per_log.values())) if r[0] == "recompile"] == [
        ("recompile", "step at rank_model.py:17 | ___check_obj_id(act.__code__, <id>), type=<class 'code'>  # "
                      "h = act(x @ w)  # "
                      "rank_model.py:18 in step\nUser stack trace:\n  File \"rank_model.py\", line 18, in step\n    "
                      "h = act(x @ w)",
         "recompile of step: ___check_obj_id(act.__code__, <id>), type=<class 'code'>  # h = act(x @ w)  # "
         "rank_model.py:18 in step\nUser stack trace:\n  File \"rank_model.py\", line 18, in step\n    h = act(x @ w)",
         1, None, None, "step at rank_model.py:17"),
        ("recompile", "step at rank_model.py:17 | tensor 'x' size mismatch at index 0. expected 4, actual 6",
         "recompile of step: tensor 'x' size mismatch at index 0. expected 4, actual 6", 1, None, None,
         "step at rank_model.py:17")]
    # What torch itself wrote differs in every process: the ids, the checkout folders.
    reasons = {m["recompile_reason"] for run in NIGHTS for job in ("torch-ranks", "torch-ranks-early")
               for e in figures(run, job)["ranks"].values() for m in e["compilation_metrics"] if m["recompile_reason"]
               and "___check_obj_id" in m["recompile_reason"]}
    assert len(reasons) == 12 and len({normalise(r.split(": ", 1)[1]) for r in reasons}) == 1


def test_inductor_graphs_keep_their_index():
    """A graph break: model__0, model__1 and model__2, forward and backward, each its own series every
    night (main: model__forward, model__forward#2, model__forward#3 in folder order)."""
    series = series_of(bucket_files(GRAPHS))
    programs = series.group_by("run_id").agg(pl.col("series_program").unique().sort()).sort("run_id")
    assert programs.get_column("series_program").to_list() == [[
        "model__0_backward", "model__0_forward", "model__1_backward", "model__1_forward", "model__2_backward",
        "model__2_forward"]] * 3
    assert not series.get_column("series_program").str.contains("#").any()


@pytest.mark.parametrize("text, normalised", [
    ("___check_obj_id(L['fn'].__code__, 140021006110512)", "___check_obj_id(L['fn'].__code__, <id>)"),
    ("___check_type_id(L['x'], 94839223453440)", "___check_type_id(L['x'], <id>)"),
    ("<function sym_ite at 0x7f590a8d3430>", "<function sym_ite at 0x<addr>>"),
    ("___check_metadata_140401549376800_c0 __dtensor_spec_94839223453440", "___check_metadata_<id>_c0 __dtensor_spec_<id>"),
    ("_TorchCompileWrapper(inductor) (id=0x7f3a2b1c0d10)", "_TorchCompileWrapper(inductor) (id=<id>)"),
    ("inner at /home/skarjala/pytorch/torch/_dynamo/external_utils.py:66", "inner at torch/_dynamo/external_utils.py:66"),
    ('File "/usr/lib/python3/dist-packages/torch/_dynamo/eval_frame.py", line 3', 'File "torch/_dynamo/eval_frame.py", line 3'),
    ("# mp/ci-checkout-8tesylh3/rank_model.py:18 in step", "# rank_model.py:18 in step"),
    ("C:\\Users\\ci\\AppData\\Local\\Temp\\tmpab12cd34\\model.py:3", "model.py:3"),
    ("/tmp/tmpab12cd34.py", "tmp<tmp>.py"),
    ("run_2026_11_20_02_01_35_123456-pid_1234 pid=55 thread 140123456789 tid: 77",
     "run_2026_11_20_02_01_35_123456-pid_<pid> pid=<pid> thread <tid> tid: <tid>"),
    ("dedicated_log_torch_trace_rank_0_kpmv091y.log dedicated_log_torch_trace_rank_0.log",
     "dedicated_log_torch_trace_rank_0_<random>.log dedicated_log_torch_trace_rank_0.log"),
    # What is no process's: left alone.
    ("see https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0170.html", None),
    ("torch/_dynamo/external_utils.py:66 x/y.sum() f32[8,128]{1,0} 0x1f", None),
    ("tensor 'x' size mismatch at index 0. expected 4, actual 6", None),
])
def test_what_normalise_replaces(text, normalised):
    assert normalise(text) == (normalised or text)
    assert normalise(normalise(text)) == normalise(text)


@pytest.mark.slow
def test_a_night_written_again_by_other_processes_opens_nothing(tmp_path):
    """The nightly over the rank bucket: every night the same series, no event, no diff, no incident
    (main: 12 same_name events and 24 recompile diffs, every reason appearing and vanishing)."""
    import duckdb

    from tests.sample_build import build_sample_warehouse

    warehouse = build_sample_warehouse(tmp_path, RANKS)
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        count = lambda sql: con.execute(sql).fetchall()[0][0]  # noqa: E731
        assert count("SELECT count(DISTINCT series) FROM dump_series") == 6
        assert count("SELECT count(*) FROM series_events WHERE event <> 'first_run'") == 0
        assert count("SELECT count(*) FROM diffs") == 0
        assert count("SELECT count(*) FROM incidents") == 0
        # 2 recompiles a log, 12 logs: a log's items once, though an early log is two programs' series (its
        # warm-up's too; the view listed them once a series, 36, before 2026-11-29).
        assert count("SELECT count(*) FROM dump_items WHERE category = 'recompile'") == 24
    finally:
        con.close()


@pytest.mark.slow
def test_check_of_a_copy_of_a_rank_night_is_nothing_new(tmp_path):
    """`check` of the last night's logs copied byte for byte, against the warehouse of all three: nothing new."""
    import shutil

    from typer.testing import CliRunner

    from flows.cli import app
    from tests.sample_build import build_sample_warehouse

    warehouse = build_sample_warehouse(tmp_path / "wh", RANKS)
    pr = Path(shutil.copytree(RANKS / NIGHTS[-1], tmp_path / "pr"))
    res = CliRunner().invoke(app, ["check", str(pr), "--warehouse", str(warehouse), "--fail-on", "new"])
    assert res.exit_code == 0, res.output
    assert "0 new incidents" in res.output and "vanished" not in res.output


@pytest.mark.slow
def test_two_ranks_identical_bytes_keep_their_ranks_in_the_warehouse(tmp_path):
    """tlparse's multi_rank_messy_input: ranks 0 and 1 are the same bytes (simple.log's). The nightly
    parses a content once and copies its row to the other path: that path's name gives its own rank
    (before: both rank_0, one series for two logs; on main both trace, told apart by file order)."""
    import duckdb

    from tests.sample_build import build_sample_warehouse

    bucket = tmp_path / "bucket" / "2026-10-01" / "ranks"
    bucket.mkdir(parents=True)
    for rank in (0, 1):
        (bucket / f"dedicated_log_torch_trace_rank_{rank}.log.gz").write_bytes((CORPUS / "simple.log.gz").read_bytes())
    warehouse = build_sample_warehouse(tmp_path / "wh", tmp_path / "bucket")
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        assert con.execute("SELECT path, stage FROM dumps ORDER BY path").fetchall() == [
            ("2026-10-01/ranks/dedicated_log_torch_trace_rank_0.log.gz", "rank_0"),
            ("2026-10-01/ranks/dedicated_log_torch_trace_rank_1.log.gz", "rank_1")]
        assert [s for (s,) in con.execute("SELECT series FROM dump_series ORDER BY series").fetchall()] == [
            "ranks/forward at test_torchinductor.py:11123/torch_trace/rank_0",
            "ranks/forward at test_torchinductor.py:11123/torch_trace/rank_1"]
    finally:
        con.close()
