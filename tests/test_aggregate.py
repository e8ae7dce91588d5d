"""Aggregation over the real sample bucket: trends, regressions, diffs, accept, the summary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from flows.warehouse import store as wh
from flows.verdict.aggregate import aggregate
from flows.warehouse.reads import frame_of
from flows.cli import app


def query(warehouse: Path, sql: str) -> pl.DataFrame:
    with wh.connect_readonly(warehouse) as con:
        return frame_of(con, sql)


def copy(warehouse: Path, tmp_path: Path) -> Path:
    target = tmp_path / "wh.duckdb"
    shutil.copyfile(warehouse, target)
    return target


def test_derived_tables_hold_the_known_answers(sample_warehouse):
    counts = dict(query(sample_warehouse, """
        SELECT 'series', count(DISTINCT series) FROM dump_series UNION ALL
        SELECT 'trends', count(*) FROM metric_trends UNION ALL
        SELECT 'regressions', count(*) FROM regressions UNION ALL
        SELECT 'latest', count(*) FROM regressions WHERE run_id = '2026-11-20' UNION ALL
        SELECT 'diffs', count(*) FROM diffs UNION ALL
        SELECT 'items', count(*) FROM dump_items""").rows())
    # regressions: the figures with a regression or failure step open on them, at each run (169 rows;
    # 56 in the latest run, where every model-widening step of the last two nights is still open; the
    # torch-trace graph breaks of 11-19 are fixed on 11-20). The torch-trace job: one series, 14
    # figures a run, its 2 graph breaks appearing and vanishing (4 diffs) with the compiles they split
    # (forward/0 vanishing, forward/0_1 and two resume functions appearing: 4 diffs each way), 270 item rows:
    # its compile (graph, kernels, code lines, 53 guards, its compile ids) 57 a night, 58 on 11-20 (a guard
    # more), 11-19's three compiles, 2 breaks and their compile ids and breaks to compare ranks on 98.
    assert counts == {"series": 26, "trends": 896, "regressions": 169, "latest": 56, "diffs": 581, "items": 1144}
    # First run: every row a first value (204 + the two array-only entry metrics of 6 HLO dumps, less
    # the 7 fallback-kernel counts that first appear later, + the torch-trace log's 14).
    first = query(sample_warehouse, "SELECT changed, count(*) n FROM metric_trends WHERE run_id = '2026-11-17' GROUP BY ALL")
    assert first.rows() == [(True, 223)]
    # Exact figures of one regression: the pmap program's temp bytes at 11-20, a step of its own (on
    # top of the 11-19 one) from 11-19's level: the baseline is the value before the step.
    row = query(sample_warehouse, """SELECT value, previous_value, baseline, change, rule, opened_run FROM regressions
        WHERE series = 'jax-pmap/jit__fun/xla_buffer_assignment/buffer_assignment' AND metric = 'memory.temp_bytes'
        AND run_id = '2026-11-20'""").row(0)
    assert row == (306440.0, 180744.0, 180744.0, 125696.0, "> 2% increase", "2026-11-20")


def test_the_onnx_step_that_failed_is_a_failure_and_its_recovery_fixes_it(sample_warehouse):
    steps = query(sample_warehouse, """SELECT run_id, value, step FROM figure_status
        WHERE series = 'torch-onnx/inp+blocks+head(x)/onnx_report/export' AND metric = 'onnx.step.translate' ORDER BY run_id""")
    assert steps.rows() == [("2026-11-17", 1.0, None), ("2026-11-18", 1.0, None),
                            ("2026-11-19", 0.0, "failure"), ("2026-11-20", 1.0, None)]
    assert query(sample_warehouse, """SELECT kind, opened_run, closed_run, closed_how FROM incidents
        WHERE program = 'inp+blocks+head(x)'""").rows() == [("failure", "2026-11-19", "2026-11-20", "fixed")]


def test_structural_diff_names_what_changed_with_source_lines(sample_warehouse):
    d = query(sample_warehouse, "SELECT run_id, series, category, change, description FROM diffs")
    lines = set(d.get_column("description"))
    assert "all-reduce f32[96,96] grew ×1 → ×2, 36.0 KiB → 72.0 KiB at jax_jobs.py:162 (psum)" in lines
    assert "fallback kernel aten.median.dim appeared (×1)" in lines
    assert "ONNX step translate ✅→❌" in lines
    peak = d.filter((pl.col("category") == "peak_value") & (pl.col("change") == "grew") & (pl.col("run_id") == "2026-11-20"))
    assert peak.height > 0 and all(":" in text and "jax_jobs.py:" in text for text in peak.get_column("description"))
    # A night whose content did not change has no diff.
    assert d.filter(pl.col("series").str.starts_with("torch-onnx") & (pl.col("run_id") == "2026-11-18")).is_empty()


def test_aggregating_again_changes_nothing(sample_warehouse, tmp_path):
    target = copy(sample_warehouse, tmp_path)
    tables = ["dump_series", "metric_trends", "regressions", "series_events", "run_rollups", "job_totals", "dump_items", "diffs",
              "incidents", "incident_steps"]
    before = {t: query(target, f"SELECT * FROM {t} ORDER BY ALL") for t in tables}
    with wh.Warehouse(target) as con:
        result = aggregate(con)
    assert result.items_computed == 0  # the item cache is kept
    for t in tables:
        assert query(target, f"SELECT * FROM {t} ORDER BY ALL").equals(before[t]), t


def test_accept_stops_the_flag_and_is_logged(sample_warehouse, tmp_path):
    target = copy(sample_warehouse, tmp_path)
    series = "jax-pmap/jit__fun/xla_buffer_assignment/buffer_assignment"
    runner = CliRunner()
    res = runner.invoke(app, ["accept", series, "2026-11-20", "--note", "bigger model", "--warehouse", str(target)])
    assert res.exit_code == 0, res.output
    assert "regressions left there: 0" in res.output
    assert query(target, f"SELECT count(*) FROM regressions WHERE series = '{series}' AND run_id = '2026-11-20'").item() == 0
    # Its steps closed, but their incidents stay open on their other series: it closed no incident.
    assert "incidents closed: none;" in res.output
    assert query(target, "SELECT series, run_id, metric, note, closed_incidents FROM accepts").rows() == [
        (series, "2026-11-20", None, "bigger model", [])]
    # Other series keep theirs; an unknown series is refused with the closest names.
    assert query(target, "SELECT count(*) FROM regressions WHERE run_id = '2026-11-20'").item() == 56 - 5  # the latest's 56 but the series'

    bad = runner.invoke(app, ["accept", "jax-pmap/jit__fun/xla_buffer_assignmnt", "2026-11-20", "--note", "typo",
                              "--warehouse", str(target)])
    assert bad.exit_code != 0 and series in bad.output


def test_diff_command(sample_warehouse):
    runner = CliRunner()
    res = runner.invoke(app, ["diff", "2026-11-18", "2026-11-20", "--series", "jax-pmap/*/xla_hlo/before_optimizations",
                              "--warehouse", str(sample_warehouse)])
    assert res.exit_code == 0, res.output
    assert "all-reduce f32[128,128] appeared (×2, 128.0 KiB) at jax_jobs.py:162 (psum)" in res.output
    assert "kernel.collectives 7 → 9 (+2, +28.6 %)" in res.output
    missing = runner.invoke(app, ["diff", "2026-11-19", "2099-01-01", "--warehouse", str(sample_warehouse)])
    assert missing.exit_code == 2 and "no run '2099-01-01'" in missing.output


def test_summary_markdown_and_exit_status(sample_warehouse, prefect, tmp_path):
    report = (sample_warehouse.parent / "report.md").read_text()
    assert report.startswith("# Dumpscope: run 2026-11-20 (commit <code>1a8e6b4</code>)")
    # The last sample night widens models whose steps are already open: each further step is news of its own.
    assert "Last night: **5 new**, 10 still open, 2 fixed, 2 improvements, 0 lost." in report
    assert report.index("## Fixed") < report.index("## Still open")
    target = copy(sample_warehouse, tmp_path)
    bucket = Path(__file__).parents[1] / "data" / "sample_bucket"
    args = ["run", "--bucket", str(bucket), "--warehouse", str(target), "--workers", "1", "--report", str(tmp_path / "r.md")]
    # A re-run with nothing new opens nothing: --fail-on new passes...
    res = CliRunner().invoke(app, [*args, "--fail-on", "new", "--site", str(tmp_path / "site")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r.md").read_text() == report
    assert (tmp_path / "site" / "index.html").exists()  # --site builds the report site
    # ...while --fail-on open fails on the fifteen open (the five new and the ten still open).
    res = CliRunner().invoke(app, [*args, "--fail-on", "open"])
    assert res.exit_code == 4 and "15 open incident(s)" in res.output


def test_incidents_of_the_sample_nights(sample_warehouse):
    res = CliRunner().invoke(app, ["incidents", "--run", "2026-11-19", "--status", "all", "--format", "json",
                                   "--warehouse", str(sample_warehouse)])
    assert res.exit_code == 0, res.output
    got = {(r["opened_run"], r["job"], r["program"], r["kind"]): (r["status"], r["closed_run"], r["stacked_on"])
           for r in json.loads(res.output)}
    onnx = "inp+blocks+head(x)"
    # Each night widens the models: a regression per program (memory, launches) on top of the one
    # before, and an improvement (more fusions: fewer is worse); 11-19's median fails the ONNX export
    # (fixed 11-20) and adds an Inductor fallback kernel.
    assert got == {
        ("2026-11-19", "torch-trace", "forward at dumpscope_model.py:19", "regression"): ("fixed", "2026-11-20", []),
        ("2026-11-18", "jax-jit", "jit_eval_metrics", "regression"): ("open", None, []),
        ("2026-11-18", "jax-jit", "jit_train_step", "regression"): ("open", None, []),
        ("2026-11-18", "jax-pmap", "jit__fun", "regression"): ("open", None, []),
        ("2026-11-18", "torch-inductor", "model__0_backward", "regression"): ("open", None, []),
        ("2026-11-18", "torch-inductor", "model__0_forward", "regression"): ("open", None, []),
        ("2026-11-19", "jax-jit", "jit_eval_metrics", "improvement"): ("open", None, []),
        ("2026-11-19", "jax-jit", "jit_eval_metrics", "regression"): ("open", None, ["I-bf94aa0d"]),
        ("2026-11-19", "jax-jit", "jit_train_step", "improvement"): ("open", None, []),
        ("2026-11-19", "jax-jit", "jit_train_step", "regression"): ("open", None, ["I-b86084d8"]),
        ("2026-11-19", "jax-pmap", "jit__fun", "improvement"): ("open", None, []),
        ("2026-11-19", "jax-pmap", "jit__fun", "regression"): ("open", None, ["I-48d7e96d"]),
        ("2026-11-19", "torch-inductor", "model__0_backward", "improvement"): ("open", None, []),
        ("2026-11-19", "torch-inductor", "model__0_backward", "regression"): ("open", None, ["I-515a2f3d"]),
        ("2026-11-19", "torch-inductor", "model__0_forward", "improvement"): ("open", None, []),
        ("2026-11-19", "torch-inductor", "model__0_forward", "regression"): ("open", None, ["I-ac0447ae"]),
        ("2026-11-19", "torch-onnx", onnx, "failure"): ("fixed", "2026-11-20", []),  # the export failed, then passed
        ("2026-11-20", "jax-jit", "jit_eval_metrics", "regression"): ("new", None, ["I-84ab3494"]),
        ("2026-11-20", "jax-jit", "jit_train_step", "improvement"): ("new", None, ["I-e61e74c6"]),
        ("2026-11-20", "jax-jit", "jit_train_step", "regression"): ("new", None, ["I-f61c3b88"]),
        ("2026-11-20", "jax-pmap", "jit__fun", "regression"): ("new", None, ["I-f515e5b1"]),
        ("2026-11-20", "torch-inductor", "model__0_backward", "regression"): ("new", None, ["I-3d901592"]),
        ("2026-11-20", "torch-inductor", "model__0_forward", "improvement"): ("new", None, ["I-459de995"]),
        ("2026-11-20", "torch-inductor", "model__0_forward", "regression"): ("new", None, ["I-e672331c"]),
    }
    new = CliRunner().invoke(app, ["incidents", "--run", "2026-11-19", "--status", "new", "--format", "json",
                                   "--warehouse", str(sample_warehouse)])
    rows = json.loads(new.output)
    assert len(rows) == 7 and all(r["status"] == "new" and r["kind"] != "improvement" for r in rows)
    pmap = next(r for r in rows if r["job"] == "jax-pmap")
    assert (pmap["last_good_run"], pmap["last_good_commit"], pmap["first_bad_commit"]) == ("2026-11-18", "9b03c5e", "c71f0d2")
    assert "kernel.collectives" in pmap["metrics"] and "all-reduce" in pmap["cause"].splitlines()[0]
    assert rows[0]["kind"] == "failure"  # ranked by impact: the failed export first
    table = CliRunner().invoke(app, ["incidents", "--warehouse", str(sample_warehouse)])
    assert table.exit_code == 0 and "15 incident(s), open, run 2026-11-20" in table.output


def test_accept_an_incident_by_id(sample_warehouse, tmp_path):
    target = copy(sample_warehouse, tmp_path)
    pmap = query(target, """SELECT incident_id FROM incidents WHERE job = 'jax-pmap' AND opened_run = '2026-11-19'
                            AND kind = 'regression'""").item()
    res = CliRunner().invoke(app, ["accept", pmap, "--note", "two more psums, intended", "--warehouse", str(target)])
    assert res.exit_code == 0, res.output
    assert f"incidents closed: {pmap}" in res.output
    assert query(target, f"SELECT closed_run, closed_how, accepted_note FROM incidents WHERE incident_id = '{pmap}'").rows() == [
        ("2026-11-20", "accepted", "two more psums, intended")]
    again = CliRunner().invoke(app, ["accept", pmap, "--note", "again", "--warehouse", str(target)])
    assert again.exit_code == 2 and "already closed (accepted in run 2026-11-20)" in again.output
    wrong = CliRunner().invoke(app, ["accept", "jax-pmap/*", "2099-01-01", "--note", "n", "--warehouse", str(target)])
    assert wrong.exit_code == 2 and "no run '2099-01-01'" in wrong.output


def test_a_bad_settings_file_stops_before_any_work(tmp_path, sample_warehouse):
    bad = tmp_path / "dumpscope.toml"
    bad.write_text("[[rule]]\nmetric = 'memory.*'\nrel = 'two'\n")
    res = CliRunner().invoke(app, ["aggregate", "--warehouse", str(sample_warehouse), "--settings", str(bad)])
    assert res.exit_code == 2 and "dumpscope.toml: [[rule]] #1: rel must be a number >= 0" in res.output


def test_a_night_added_later_gives_the_same_tables_as_a_full_aggregation(sample_warehouse, tmp_path):
    incremental = copy(sample_warehouse, tmp_path)
    tables = ["dump_series", "metric_trends", "series_events", "run_rollups", "job_totals", "diffs"]
    ordered = {t: "ORDER BY ALL" for t in tables}
    full = {t: query(sample_warehouse, f"SELECT * FROM {t} {ordered[t]}") for t in tables}
    # Pretend the last two nights arrived after the last aggregation, and their rows are stale.
    with wh.Warehouse(incremental) as con:
        con.execute("UPDATE dumps SET ingested_at = ingested_at + INTERVAL 1 HOUR WHERE run_id >= '2026-11-19'")
        con.execute("""UPDATE schema_info SET value = (SELECT max(ingested_at)::VARCHAR FROM dumps WHERE run_id < '2026-11-19')
                       WHERE key = 'aggregated_through'""")
        for t in tables:
            con.execute(f"UPDATE {t} SET run_id = run_id WHERE run_id >= '2026-11-19'")
        con.execute("DELETE FROM metric_trends WHERE run_id = '2026-11-20' AND metric LIKE 'memory.%'")
        result = aggregate(con)
    assert result.from_run == "2026-11-19"
    assert result.rows["metric_trends"] == full["metric_trends"].filter(pl.col("run_id") >= "2026-11-19").height
    for t in tables:
        assert query(incremental, f"SELECT * FROM {t} {ordered[t]}").equals(full[t]), t


_MAIN_INDUCTOR = __import__("re").compile(r"^(?P<name>.*?)__\d+_(?P<graph>forward|backward|inference)(?:_[\d.]+)?$")


def _main_naming(program: str, real=None) -> str:
    """The series rule of the warehouses written before AGGREGATE_VERSION 8: an Inductor graph without
    its AOT index (model__0_forward_1.0 -> model__forward)."""
    if (m := _MAIN_INDUCTOR.match(program)) is not None:
        return f"{m['name']}__{m['graph']}"
    return real(program)


def test_a_warehouse_named_by_the_old_rules_keeps_its_history(sample_warehouse, tmp_path, monkeypatch):
    """The sample warehouse as the code before identity-from-the-dump wrote it (Inductor graphs named
    model__forward, model__backward), with an accept by pattern and one by incident id on those names,
    aggregated again by today's code (the version bump rewrites every run): every incident is the same
    step with the same history, a renamed program's under its new name and id; the accepts name the
    new names, and what they accepted stays accepted. Without the accept log's rewrite both accepts
    named nothing any more: the two incidents they closed reopened."""
    from flows.verdict import settings as verdict_settings
    from transforms.trends import series as series_mod

    target = copy(sample_warehouse, tmp_path)
    real = series_mod.normalize_program
    monkeypatch.setattr(series_mod, "normalize_program", lambda p: _main_naming(p, real))
    stale = "v7 old naming"
    with wh.Warehouse(target) as con:
        con.execute("UPDATE schema_info SET value = ? WHERE key = 'aggregated_with'", [stale])
        aggregate(con)
    old_id = query(target, """SELECT incident_id FROM incidents WHERE program = 'model__backward'
                              AND opened_run = '2026-11-19' AND kind = 'regression'""").item()
    runner = CliRunner()
    for target_, run in (("torch-inductor/model__forward/*", "2026-11-20"), (old_id, None)):
        res = runner.invoke(app, ["accept", target_, *([run] if run else []), "--note", "intended",
                                  "--warehouse", str(target)])
        assert res.exit_code == 0, res.output
    cols = "incident_id, job, program, kind, opened_run, closed_run, closed_how, last_good_run, headline"
    before = query(target, f"SELECT {cols} FROM incidents ORDER BY ALL")
    accepted_before = query(target, "SELECT series, incident_id, closed_incidents FROM accepts ORDER BY accepted_at")
    assert before.filter(pl.col("closed_how") == "accepted").height == 6  # the pattern closed five, the id one

    monkeypatch.setattr(series_mod, "normalize_program", real)
    with wh.Warehouse(target) as con:  # what a warehouse of the old version meets: every run aggregated again
        con.execute("UPDATE schema_info SET value = ? WHERE key = 'aggregated_with'", [stale])
        aggregate(con)
    assert verdict_settings.AGGREGATE_VERSION >= 8
    after = query(target, f"SELECT {cols} FROM incidents ORDER BY ALL")
    renamed = {"model__forward": "model__0_forward", "model__backward": "model__0_backward"}
    from transforms.trends.incident_walk import incident_id
    ids = {r["incident_id"]: incident_id(r["job"], renamed.get(r["program"], r["program"]), r["opened_run"],
                                         r["kind"] == "improvement") for r in before.iter_rows(named=True)}
    expected = before.with_columns(pl.col("incident_id").replace_strict(ids),
                                   pl.col("program").replace(renamed),
                                   pl.col("headline").str.replace("/ model__(forward|backward):", "/ model__0_$1:"))
    assert after.sort("incident_id").equals(expected.sort("incident_id"))
    unchanged = before.filter(~pl.col("program").is_in(list(renamed)))
    assert unchanged.height == 15 and unchanged.join(after, on=before.columns, how="anti", nulls_equal=True).is_empty()
    assert query(target, "SELECT series, incident_id, closed_incidents FROM accepts ORDER BY accepted_at").rows() == [
        ("torch-inductor/model__0_forward/*", None, sorted(ids[i] for i in accepted_before.row(0)[2])),
        (None, ids[old_id], [ids[old_id]])]
    assert after.filter(pl.col("closed_how") == "accepted").height == 6
    assert query(target, "SELECT count(*) FROM series_events WHERE event IN ('new_series', 'vanished')").item() == 0
