"""The verdict on real multi-night buckets with designed changes (tests/incident_buckets,
made by data/generate_incident_buckets.py with JAX 0.10.2 and torch 2.13.0): each designed
change opens exactly the incident its MANIFEST.json expects, in the run it expects, and
the incident's status at every later run is the expected one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.warehouse import store as wh
from transforms.trends.series import normalize_program

BUCKETS = Path(__file__).parent / "incident_buckets"
MANIFEST = json.loads((BUCKETS / "MANIFEST.json").read_text())
SCENARIOS = sorted(MANIFEST["scenarios"])
STATUS = {"opened": "new", "open": "open", "fixed": "fixed", "accepted": "accepted"}


@pytest.fixture(scope="module")
def warehouses(prefect, tmp_path_factory) -> dict[str, Path]:
    from flows.nightly import nightly

    out = {}
    for name in SCENARIOS:
        where = tmp_path_factory.mktemp(name)
        out[name] = where / "wh.duckdb"
        nightly(bucket=str(BUCKETS / name), warehouse=out[name], workers=2, report_path=where / "report.md")
    return out


def _rows(warehouse: Path, sql: str, params=None) -> list[tuple]:
    with wh.connect_readonly(warehouse) as con:
        return con.execute(sql, params or []).fetchall()


def _expected(name: str) -> set[tuple]:
    return {(e["job"], normalize_program(e["program"]), e["kind"], e["opened"], e["closed"], e["closed_as"])
            for e in MANIFEST["scenarios"][name]["expected_incidents"] if e["kind"] != "change"}


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_designed_change_opens_its_incident_and_nothing_else(warehouses, name):
    got = set(_rows(warehouses[name], "SELECT job, program, kind, opened_run, closed_run, closed_how FROM incidents"))
    assert got == _expected(name)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_status_of_each_incident_at_every_run(warehouses, name):
    for e in MANIFEST["scenarios"][name]["expected_incidents"]:
        if e["kind"] == "change":
            continue
        for run_id, state in e["lifecycle"].items():
            status = _rows(warehouses[name], "SELECT status FROM incidents_at(?) WHERE job = ? AND program = ?",
                           [run_id, e["job"], normalize_program(e["program"])])
            assert status == [(STATUS[state],)], (run_id, state)


def test_a_stable_night_with_float_noise_opens_nothing(warehouses):
    assert _rows(warehouses["stable"], "SELECT count(*) FROM incidents") == [(0,)]
    noise = _rows(warehouses["stable"], "SELECT count(DISTINCT value) FROM metrics WHERE metric = 'onnx.max_abs_diff'")
    assert noise[0][0] >= 2  # the figure did jitter, and the noise band absorbed it


def test_the_revert_closes_the_blowup_as_fixed_and_opens_nothing_new(warehouses):
    w = warehouses["blowup_revert"]
    assert _rows(w, "SELECT status FROM incidents_at('2026-10-04')") == [("fixed",)]
    [(steps,)] = _rows(w, "SELECT list(DISTINCT metric ORDER BY metric) FROM incident_steps")
    assert "memory.temp_bytes" in steps


def test_the_kept_collective_stays_open_until_accepted(warehouses, tmp_path):
    import shutil

    w = tmp_path / "wh.duckdb"
    shutil.copyfile(warehouses["collective_kept"], w)
    [(iid, cause, metrics)] = _rows(w, "SELECT incident_id, cause, metrics FROM incidents WHERE closed_run IS NULL")
    assert "kernel.collectives" in metrics and cause.splitlines()[0].startswith("all-reduce")
    res = CliRunner().invoke(app, ["accept", iid, "--note", "the second psum is intended", "--warehouse", str(w)])
    assert res.exit_code == 0, res.output
    assert _rows(w, "SELECT closed_run, closed_how FROM incidents") == [("2026-10-06", "accepted")]


def test_a_truncated_dump_opens_a_failure_and_no_metric_regression(warehouses):
    w = warehouses["truncated"]
    assert {m for (m,) in _rows(w, "SELECT DISTINCT metric FROM incident_steps")} == {"dump.status"}
    [(detail,)] = _rows(w, "SELECT list(detail ORDER BY detail) FROM incident_steps")
    assert any("cpu_after_optimizations.txt.gz" in d for d in detail)  # the cut file, by name


def test_a_model_change_is_one_incident_per_program(warehouses):
    rows = _rows(warehouses["model_change"], "SELECT job, program, len(metrics) FROM incidents ORDER BY ALL")
    assert [(j, p) for j, p, _ in rows] == [("jax-jit", "jit_train_step"), ("torch-inductor", "model__backward"),
                                             ("torch-inductor", "model__forward")]
    assert rows[0][2] > 10  # many metrics of many files (HLO, buffer assignment, memory report): one incident


def test_two_onnx_models_in_one_job_stay_two_programs(warehouses):
    """Their figures never alternate: each model is its own series, the MLP's never changes,
    and the conv net's only where it was made bigger. (Its figures have no worse direction:
    the change is reported in diffs and trends, not as an incident.)"""
    w = warehouses["two_onnx_models"]
    programs = _rows(w, "SELECT program, count(DISTINCT run_id) FROM dump_series WHERE job = 'torch-onnx' GROUP BY ALL ORDER BY ALL")
    assert programs == [("convnet", 5), ("mlp", 5)]
    changes = _rows(w, """SELECT program, run_id FROM metric_trends WHERE metric = 'onnx.graph_nodes' AND verdict = 'changed'
                          ORDER BY ALL""")
    assert changes == [("convnet", "2026-10-04")]
    same = CliRunner().invoke(app, ["diff", "2026-10-05", "2026-10-05", "--json", "--warehouse", str(w)])
    assert same.exit_code == 0 and same.output == ""  # a run against itself: no difference


def test_a_failing_export_names_the_step_that_failed_first(warehouses):
    [(cause,)] = _rows(warehouses["failing_export"], "SELECT cause FROM incidents")
    assert cause.splitlines()[0] == "ONNX step translate ✅→❌"


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_runs_take_their_time_from_run_json(warehouses, name):
    nights = MANIFEST["scenarios"][name]["nights"]
    runs = _rows(warehouses[name], "SELECT run_id, strftime(started_at, '%Y-%m-%dT%H:%M:%S'), meta_errors FROM runs ORDER BY run_id")
    assert runs == [(n["run_id"], n["started_at"][:19], []) for n in nights]
