"""What changed in each compile since the night before, and a job's rank logs side by side (issue 46).

Real logs only: the torch 2.13 fixtures (tests/fixtures/torch_trace: graph_break and graph_break_removed,
plain and recompile, ranked) and tlparse's multi_rank_schedule ranks (data/corpus/torch_trace: rank 0,
and rank 1, whose first compile issues no reduce_scatter; tlparse ships rank 2 as rank 0's bytes).
Pure transforms on the parser's frames: ``dump_items``, ``diff_dump_items``, ``rank_divergence.compare``.
"""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import polars as pl

from transforms.parse import parse_dump
from transforms.trends import rank_divergence
from transforms.trends.diff_items import describe_change, diff_dump_items, dump_items

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "torch_trace"
CORPUS = ROOT / "data" / "corpus" / "torch_trace"
RANK_0 = CORPUS / "dedicated_log_torch_trace_rank_0_6u3fubwl.log.gz"
RANK_1 = CORPUS / "dedicated_log_torch_trace_rank_1_n8zycf07.log.gz"
COMPILE_CATEGORIES = ("compile_graph", "compile_kernels", "compile_code", "compile_guard", "collective_schedule")


def _log(case: str) -> Path:
    return next((FIXTURES / case).glob("*.log.gz"))


def _parsed(files: dict[str, Path]) -> tuple[pl.DataFrame, dict[str, pl.DataFrame], pl.DataFrame]:
    """(dumps, records, logs) of ``files`` (path ``<run>/<job>/<name>`` -> a gzipped log), as the
    warehouse holds them; ``logs``: one row per (path, program), as their metrics rows name them."""
    rows, tables, programs = [], {}, []
    for path, source in files.items():
        p = parse_dump(io.BytesIO(gzip.decompress(source.read_bytes())), path, dump_id=path)
        s = p.summary
        rows.append((path, *path.split("/")[:2], str(s.kind), s.stage, s.program, path))
        programs += [(path, *path.split("/")[:2], s.stage, program) for program in s.programs]
        for table, frame in p.tables.items():
            tables.setdefault(table, []).append(frame)
    dumps = pl.DataFrame(rows, schema=["path", "run_id", "job", "kind", "stage", "program", "dump_id"], orient="row")
    logs = pl.DataFrame(programs, schema=["path", "run_id", "job", "stage", "program"], orient="row")
    return dumps, {t: pl.concat(f) for t, f in tables.items()}, logs


def _changes(before: Path, after: Path) -> list[str]:
    """The compile items that changed from ``before``'s log to ``after``'s, one line each."""
    dumps, records, _ = _parsed({"n1/job/before.log": before, "n2/job/after.log": after})
    items = dump_items(dumps, records).filter(pl.col("category").is_in(COMPILE_CATEGORIES))
    changed = diff_dump_items(items.filter(pl.col("path") == "n1/job/before.log"),
                              items.filter(pl.col("path") == "n2/job/after.log"))
    return sorted(describe_change(r) for r in changed.iter_rows(named=True))


def test_a_compile_is_matched_by_its_function_compile_index_and_attempt_not_its_frame_id():
    """graph_break -> graph_break_removed (the break rewritten as torch.where): forward's compile restarted
    after the break ([0/0_1], forward/0_1) and its two resume functions ([1/0], [2/0]) are gone; forward/0,
    one graph, is new. Each compile is one line: its guards, kernels and code lines are not listed again."""
    assert _changes(_log("graph_break"), _log("graph_break_removed")) == [
        "compile forward/0 appeared (7 graph ops)",
        "compile forward/0_1 vanished (was 2 graph ops)",
        "compile torch_dynamo_resume_in_forward_at_21/0 vanished (was 2 graph ops)",
        "compile torch_dynamo_resume_in_forward_at_22/0 vanished (was 2 graph ops)"]


def test_what_changed_in_a_compile_guards_added_and_removed_ops_kernels_and_code():
    """plain (train: forward and backward) -> recompile (inference under no_grad on batch 4, then 6): the
    same compile forward/0 of the same program: its graph (4 ops) is the same, its code has no backward
    kernels and its global-state guard says grad mode is off (the two guards are shown where they differ,
    not by the start they share); forward/1 (batch 6) is new."""
    state = ('…alse,"deterministic_algorithms_warn_only":false,"grad_mode":{},"num_threads":1,"torch_function":true,'
             '"torch_function_all_disabled":false}}')
    assert _changes(_log("plain"), _log("recompile")) == [
        "compile forward/0: kernels 3 → 1",
        "compile forward/0: lines of output code 311 → 122",
        "compile forward/1 appeared (4 graph ops)",
        "guard added to compile forward/0: " + state.format("false"),
        "guard removed from compile forward/0: " + state.format("true")]


def test_the_same_logs_written_by_another_process_change_nothing():
    """ranked's two ranks are two processes running the same job: their compile items are equal."""
    rank_0, rank_1 = sorted((FIXTURES / "ranked").glob("*.log.gz"))
    assert _changes(rank_0, rank_1) == []
    dumps, records, _ = _parsed({"n1/job/a.log": rank_0})
    counts = dict(dump_items(dumps, records).group_by("category").agg(pl.len()).sort("category").iter_rows())
    # One compile: its graph, kernels, code lines and 53 guards (the tree's leaves; docs/metrics.md), no collective.
    assert {c: counts.get(c) for c in COMPILE_CATEGORIES} == {
        "compile_graph": 1, "compile_kernels": 1, "compile_code": 1, "compile_guard": 53, "collective_schedule": None}


def test_a_rank_whose_collective_schedule_differs_is_flagged_with_what_differs():
    """tlparse's multi_rank_schedule: ranks 0 and 2 (the same bytes) agree, rank 1's graph_one issues no
    reduce_scatter (its schedule's MD5 does not match: tlparse's authors took it out by hand to make the
    divergence their report flags; the log is partial and loses no figure): 1 rank differs from the
    majority in graph_one, none in graph_two."""
    files = {"n1/ranks/dedicated_log_torch_trace_rank_0_6u3fubwl.log": RANK_0,
             "n1/ranks/dedicated_log_torch_trace_rank_1_n8zycf07.log": RANK_1,
             "n1/ranks/dedicated_log_torch_trace_rank_2.log": RANK_0}
    dumps, records, logs = _parsed(files)
    assert dumps["stage"].to_list() == ["rank_0", "rank_1", "rank_2"]
    profiles = dump_items(dumps, records).filter(pl.col("category") == "rank_profile")
    figures, divergences = rank_divergence.compare(logs, profiles)
    one, two = (f"{f} at /Users/skarjala/Desktop/tlparse/src/test2.py:{line}" for f, line in (("graph_one", 28),
                                                                                              ("graph_two", 52)))
    assert sorted(figures.select(pl.col("path").str.extract(r"rank_(\d)"), "program", "value").rows()) == [
        ("0", one, 1.0), ("0", two, 0.0), ("1", one, 1.0), ("1", two, 0.0), ("2", one, 1.0), ("2", two, 0.0)]
    assert divergences.select("rank", "dimension", "description", "majority_ranks").rows() == [
        (1, "collective schedules", "rank 1 differs from ranks 0, 2 in its collective schedules: [0/0] all_reduce_, "
         "wait_tensor, all_gather_into_tensor, wait_tensor (ranks 0, 2: [0/0] all_reduce_, wait_tensor, "
         "all_gather_into_tensor, reduce_scatter_tensor, wait_tensor, wait_tensor)", [0, 2])]


def test_ranks_that_compiled_the_same_give_zero_and_one_rank_gives_nothing():
    rank_0, rank_1 = sorted((FIXTURES / "ranked").glob("*.log.gz"))
    dumps, records, logs = _parsed({"n1/ranks/" + rank_0.name: rank_0, "n1/ranks/" + rank_1.name: rank_1})
    figures, divergences = rank_divergence.compare(logs, dump_items(dumps, records).filter(
        pl.col("category") == "rank_profile"))
    assert figures["value"].to_list() == [0.0, 0.0] and divergences.is_empty()
    alone, _ = rank_divergence.compare(logs.head(1), dump_items(dumps, records))
    assert alone.is_empty()


# --- the verdict: a night whose rank 1 diverges, as the nightly and `check` see it, and the ranks page ---

HOSTILE_JOB = "ranks<img src=x onerror=alert(31)>|[x](javascript:alert(1))"


def _rank_night(bucket: Path, run_id: str, rank_1: Path) -> Path:
    """One night of a job of three ranks: ranks 0 and 2 write tlparse's rank 0 log, rank 1 ``rank_1``."""
    import json
    import shutil

    job = bucket / run_id / HOSTILE_JOB
    job.mkdir(parents=True)
    for name, source in (("dedicated_log_torch_trace_rank_0_6u3fubwl.log.gz", RANK_0),
                         ("dedicated_log_torch_trace_rank_1_n8zycf07.log.gz", rank_1),
                         ("dedicated_log_torch_trace_rank_2.log.gz", RANK_0)):
        shutil.copy(source, job / name)
    (bucket / run_id / "run.json").write_text(json.dumps({"started_at": f"{run_id}T02:00:00+00:00",
                                                          "commit": f"c{run_id[-1]}"}))
    return bucket / run_id


def test_a_divergence_that_appears_in_a_night_is_an_incident_naming_the_rank_as_check_says(tmp_path):
    """Night 1 every rank writes rank 0's log; night 2 rank 1 writes its own. The nightly opens a
    regression (dynamo.rank_divergence 0 -> 1 on graph_one's three rank series, graph_two's stays 0)
    whose cause names rank 1 and its schedule; `check` of night 2 against night 1's warehouse opens the
    same; the ranks page shows the three ranks, rank 1 flagged, the hostile job name as text."""
    import json
    import shutil

    import duckdb
    from typer.testing import CliRunner

    from flows.cli import app
    from flows.nightly import night_in_process
    from flows.publish.site import _environment, read_site_data
    from transforms.site.ranks import ranks_page

    bucket, warehouse = tmp_path / "bucket", tmp_path / "w.duckdb"
    _rank_night(bucket, "2026-10-01", RANK_0)
    night_in_process(bucket=str(bucket), warehouse=warehouse, workers=1, report_path=tmp_path / "r.md")
    shutil.copyfile(warehouse, tmp_path / "morning.duckdb")
    night = _rank_night(tmp_path / "pr", "2026-10-02", RANK_1)
    checked = CliRunner().invoke(app, ["check", str(night), "--warehouse", str(tmp_path / "morning.duckdb"),
                                       "--format", "json"])
    shutil.copytree(night, bucket / "2026-10-02")
    night_in_process(bucket=str(bucket), warehouse=warehouse, workers=1, report_path=tmp_path / "r.md")
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        figures = con.execute("""SELECT run_id, stage, program, value FROM metrics WHERE metric = 'dynamo.rank_divergence'
                                 ORDER BY ALL""").fetchall()
        incidents = con.execute("SELECT program, kind, headline, metrics, cause FROM incidents").fetchall()
    finally:
        con.close()
    one, two = (f"{f} at /Users/skarjala/Desktop/tlparse/src/test2.py:{line}" for f, line in (("graph_one", 28),
                                                                                              ("graph_two", 52)))
    assert figures == [(run, f"rank_{r}", p, 1.0 if run == "2026-10-02" and p == one else 0.0)
                       for run in ("2026-10-01", "2026-10-02") for r in range(3) for p in (one, two)]
    differs = ("rank 1 differs from ranks 0, 2 in its collective schedules: [0/0] all_reduce_, wait_tensor, "
               "all_gather_into_tensor, wait_tensor (ranks 0, 2: [0/0] all_reduce_, wait_tensor, all_gather_into_tensor, "
               "reduce_scatter_tensor, wait_tensor, wait_tensor)")
    # The rank first; then what changed in rank 1's log since the night before (its series' own diff).
    schedule = "collective schedule of compile graph_one/0: all_reduce_, wait_tensor, all_gather_into_tensor, "
    assert incidents == [("graph_one at test2.py:28", "regression",
                          f"{HOSTILE_JOB} / graph_one at test2.py:28: dynamo.rank_divergence 0 → 1 (+1)",
                          ["dynamo.rank_divergence"],
                          f"{differs}\n{schedule}reduce_scatter_tensor, wait_tensor, wait_tensor vanished (was ×1)\n"
                          f"{schedule}wait_tensor appeared (×1)")]
    opened = [(r["program"], r["kind"], r["headline"], r["metrics"], r["cause"]) for r in json.loads(checked.stdout)
              if r["change"] == "opens"]
    assert opened == [(p, k, h, m, c.splitlines()) for p, k, h, m, c in incidents]
    data = read_site_data(warehouse)
    page = _environment(data).get_template("ranks.md.j2").render(**ranks_page(data))
    assert "<img" not in page and "[x](javascript" not in page
    rows = [line for line in page.splitlines() if line.startswith("| [")]
    assert [re.sub(r"\(series/[^)]*\)|\(incidents/[^)]*\)", "()", r) for r in rows] == [
        "| [0]() | 1 | 0 | 0 | <code>&#91;0/0&#93; all_reduce&#95;, wait_tensor, all_gather_into_tensor, "
        "reduce_scatter_tensor, wait_tensor, wait_tensor</code> |  |",
        "| [1]() | 1 | 0 | 0 | <code>&#91;0/0&#93; all_reduce&#95;, wait_tensor, all_gather_into_tensor, wait_tensor</code> "
        "| **yes** ([incident]()) |",
        "| [2]() | 1 | 0 | 0 | <code>&#91;0/0&#93; all_reduce&#95;, wait_tensor, all_gather_into_tensor, "
        "reduce_scatter_tensor, wait_tensor, wait_tensor</code> |  |",
        *[f"| [{r}]() | 1 | 0 | 0 | <code>&#91;1/0&#93; all_reduce&#95;, wait_tensor</code> |  |" for r in range(3)]]
    assert "**1 rank differs from the others.**" in page and "Every rank compiled it the same." in page


def test_a_compiles_items_stand_on_their_log_lines():
    """plain's compile forward/0: its graph on its compilation_metrics record (line 3745), its kernels and
    code on its first output code (the record at line 1835 and its payload, cut to 40 lines)."""
    from transforms.trends import diffs

    dumps, records, _ = _parsed({"n1/job/a.log": _log("plain")})
    keys = pl.DataFrame({"items_key": ["k"], "kind": ["torch_trace"], "stage": ["trace"], "dump_id": ["n1/job/a.log"]})
    items = diffs.items_of_contents(keys, records).filter(pl.col("category").is_in(COMPILE_CATEGORIES[:3]))
    assert items.select("category", "count", "excerpt_lines").sort("category").rows() == [
        ("compile_code", 311, "1835-1874"), ("compile_graph", 4, "3745"), ("compile_kernels", 3, "1835-1874")]


def test_a_program_the_night_renames_keeps_its_ranks_schedules_on_the_ranks_page(tmp_path):
    """run.json names graph_one "step": its series are renamed, but the log's items keep the name the log gives
    the program; the ranks page still shows each rank's collective schedule of it (main: an empty cell)."""
    import json

    from flows.nightly import night_in_process
    from flows.publish.site import _environment, read_site_data
    from transforms.site.ranks import ranks_page

    bucket, warehouse = tmp_path / "bucket", tmp_path / "w.duckdb"
    night = _rank_night(bucket, "2026-10-01", RANK_0)
    run = json.loads((night / "run.json").read_text())
    (night / "run.json").write_text(json.dumps(
        run | {"series": {"graph_one at /Users/skarjala/Desktop/tlparse/src/test2.py:28": "step"}}))
    night_in_process(bucket=str(bucket), warehouse=warehouse, workers=1, report_path=tmp_path / "r.md")
    data = read_site_data(warehouse)
    page = _environment(data).get_template("ranks.md.j2").render(**ranks_page(data))
    rows = [re.sub(r"\(series/[^)]*\)", "()", line) for line in page.splitlines() if line.startswith("| [")]
    schedule = ("<code>&#91;0/0&#93; all_reduce&#95;, wait_tensor, all_gather_into_tensor, reduce_scatter_tensor, "
                "wait_tensor, wait_tensor</code>")
    assert "step" in page and rows == [
        *[f"| [{r}]() | 1 | 0 | 0 | <code>&#91;1/0&#93; all_reduce&#95;, wait_tensor</code> |  |" for r in range(3)],
        *[f"| [{r}]() | 1 | 0 | 0 | {schedule} |  |" for r in range(3)]]


def test_ranks_that_differ_the_first_night_a_job_is_seen_open_a_regression_that_night_as_check_says(tmp_path):
    """Rank 1 writes its own log from the job's first night: the nightly opens the regression that night (from
    ranks that agree: 0 -> 1, no last good run), and `check` of that night against a warehouse without the
    job says the same (main: nothing, as no earlier 0 was seen)."""
    import json
    import shutil

    import duckdb
    from typer.testing import CliRunner

    from flows.cli import app
    from flows.nightly import night_in_process

    bucket, warehouse, empty = tmp_path / "bucket", tmp_path / "w.duckdb", tmp_path / "empty"
    night = _rank_night(tmp_path / "pr", "2026-10-01", RANK_1)
    (empty / "2026-09-30" / "other").mkdir(parents=True)  # a warehouse of another job's night
    shutil.copy(CORPUS / "dedicated_log_torch_trace_rank_0_6u3fubwl.log.gz", empty / "2026-09-30" / "other")
    night_in_process(bucket=str(empty), warehouse=tmp_path / "morning.duckdb", workers=1, report_path=tmp_path / "m.md")
    checked = CliRunner().invoke(app, ["check", str(night), "--warehouse", str(tmp_path / "morning.duckdb"),
                                       "--format", "json", "--fail-on", "new"])
    shutil.copytree(night, bucket / "2026-10-01")
    night_in_process(bucket=str(bucket), warehouse=warehouse, workers=1, report_path=tmp_path / "r.md")
    with duckdb.connect(str(warehouse), read_only=True) as con:
        incidents = con.execute("SELECT program, kind, opened_run, last_good_run, headline FROM incidents").fetchall()
    assert incidents == [("graph_one at test2.py:28", "regression", "2026-10-01", None,
                          f"{HOSTILE_JOB} / graph_one at test2.py:28: dynamo.rank_divergence 0 → 1 (+1)")]
    opened = [(r["program"], r["kind"], r["headline"]) for r in json.loads(checked.stdout) if r["change"] == "opens"]
    assert checked.exit_code == 4 and opened == [(p, k, h) for p, k, _, _, h in incidents]
