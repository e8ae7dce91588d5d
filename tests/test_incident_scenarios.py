"""The verdict on real multi-night buckets with designed changes (tests/incident_buckets,
made by data/generate_incident_buckets.py with JAX 0.10.2 and torch 2.13.0): the nightly
opens exactly the incidents its MANIFEST.json expects (each a step of one program: its
kind, opening and closing runs, the incident it stacks on, every step's baseline and
value), and each incident's status at every run is the expected word (``dumpscope check`` on
the same nights: tests/test_check_equals_nightly.py). tests/test_incident_buckets.py checks the
same expectations against an independent reference implementation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.warehouse import store as wh
from transforms.trends.series import normalize_program

BUCKETS = Path(__file__).parent / "incident_buckets"
MANIFEST = json.loads((BUCKETS / "MANIFEST.json").read_text())
SCENARIOS = sorted(MANIFEST["scenarios"])
GATED = "forward at generate_incident_buckets.py:791"  # first_night_failures' model whose capture failed


class _Built(dict):
    """Scenario -> its warehouse after every night, built the first time a test asks for it."""

    def __init__(self, tmp_path_factory):
        super().__init__()
        self.tmp = tmp_path_factory

    def __missing__(self, name: str) -> Path:
        from flows.nightly import night_in_process

        where = self.tmp.mktemp(name)
        night_in_process(bucket=str(BUCKETS / name), warehouse=where / "wh.duckdb", workers=2,
                         report_path=where / "report.md")
        self[name] = where / "wh.duckdb"
        return self[name]


@pytest.fixture(scope="module")
def warehouses(tmp_path_factory) -> dict[str, Path]:
    return _Built(tmp_path_factory)


def _rows(warehouse: Path, sql: str, params=None) -> list[tuple]:
    with wh.connect_readonly(warehouse) as con:
        return con.execute(sql, params or []).fetchall()


def _expected(name: str) -> list[dict]:
    return MANIFEST["scenarios"][name]["expected_incidents"]


def _ids(warehouse: Path, name: str) -> dict[str, str]:
    """Expected incident name -> the incident id the nightly gave it."""
    got = {(j, p, o, k == "improvement"): i for i, j, p, o, k in _rows(
        warehouse, "SELECT incident_id, job, program, opened_run, kind FROM incidents")}
    return {e["name"]: got.get((e["job"], normalize_program(e["program"]), e["opened"], e["kind"] == "improvement"))
            for e in _expected(name)}


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_designed_change_opens_its_incidents_and_nothing_else(warehouses, name):
    got = set(_rows(warehouses[name], "SELECT job, program, kind, opened_run, closed_run, closed_how FROM incidents"))
    assert got == {(e["job"], normalize_program(e["program"]), e["kind"], e["opened"], e["closed"], e["closed_as"])
                   for e in _expected(name)}


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_step_and_what_it_stacks_on(warehouses, name):
    ids = _ids(warehouses[name], name)
    for e in _expected(name):
        iid = ids[e["name"]]
        steps = _rows(warehouses[name], "SELECT series, metric, baseline, value FROM incident_steps "
                                        "WHERE incident_id = ? AND reopened_run IS NULL", [iid])  # each step's first life
        assert sorted(steps) == sorted((s["series"], s["metric"], s["before"], s["after"]) for s in e["steps"]), e["name"]
        [(stacked,)] = _rows(warehouse := warehouses[name], "SELECT stacked_on FROM incidents WHERE incident_id = ?", [iid])
        assert stacked == ([ids[e["stacked_on"]]] if e["stacked_on"] else []), (e["name"], warehouse)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_status_of_each_incident_at_every_run(warehouses, name):
    ids = _ids(warehouses[name], name)
    for e in _expected(name):
        for run_id, state in e["lifecycle"].items():
            status = _rows(warehouses[name], "SELECT status, kind FROM incidents_at(?) WHERE incident_id = ?",
                           [run_id, ids[e["name"]]])
            assert status == [(state, e["kind"])], (e["name"], run_id)


def test_a_stable_night_with_float_noise_opens_nothing(warehouses):
    assert _rows(warehouses["stable"], "SELECT count(*) FROM incidents") == [(0,)]
    noise = _rows(warehouses["stable"], "SELECT count(DISTINCT value) FROM metrics WHERE metric = 'onnx.max_abs_diff'")
    assert noise[0][0] >= 2  # the figure did jitter, and the noise band absorbed it


def test_a_blowup_on_a_program_with_an_open_incident_is_news_and_its_revert_leaves_the_older_one_open(warehouses):
    """stacked_blowup: the wider model (A) is open when the batch size multiplies temp memory (B): B is
    new (counted by --fail-on new, in the summary's first line), stacked on A; the revert fixes B, A stays open."""
    w = warehouses["stacked_blowup"]
    ids = _ids(w, "stacked_blowup")
    night3 = {i: s for s, i in _rows(w, "SELECT status, incident_id FROM incidents_at('2026-10-03')")}
    assert night3[ids["B-jit"]] == "new" and night3[ids["A-jit"]] == "open"
    night4 = {i: s for s, i in _rows(w, "SELECT status, incident_id FROM incidents_at('2026-10-04')")}
    assert night4[ids["B-jit"]] == "fixed" and night4[ids["A-jit"]] == "open" and night4[ids["C-jit"]] == "lost"
    assert _rows(w, "SELECT new, open, fixed, lost FROM run_verdicts WHERE run_id = '2026-10-03'") == [(2, 2, 0, 0)]
    [(temp,)] = _rows(w, "SELECT value / baseline FROM incident_steps WHERE incident_id = ? AND metric = 'memory.temp_bytes' "
                         "AND stage = 'buffer_assignment'", [ids["B-jit"]])
    assert temp > 10  # ~10x the temp memory of the wider model


def test_the_revert_closes_the_blowup_as_fixed_and_opens_nothing_new(warehouses):
    w = warehouses["blowup_revert"]
    assert sorted(_rows(w, "SELECT status, kind FROM incidents_at('2026-10-04')")) == [
        ("fixed", "regression"), ("lost", "improvement")]
    [(steps,)] = _rows(w, "SELECT list(DISTINCT metric ORDER BY metric) FROM incident_steps WHERE step = 'regression'")
    assert "memory.temp_bytes" in steps


def test_an_overshoot_fixes_the_regression_and_opens_an_improvement_from_its_baseline(warehouses):
    w = warehouses["overshoot"]
    assert sorted(_rows(w, "SELECT status, kind FROM incidents_at('2026-10-04')")) == [
        ("fixed", "regression"), ("new", "improvement")]
    base = _rows(w, """SELECT step, baseline FROM incident_steps WHERE metric = 'memory.temp_bytes'
                       AND stage = 'buffer_assignment' ORDER BY opened_run""")
    assert base[0][1] == base[1][1] and [s for s, _ in base] == ["regression", "improvement"]


def test_a_dip_to_the_baseline_and_back_is_fixed_then_a_new_incident(warehouses):
    w = warehouses["dip_and_back"]
    rows = _rows(w, "SELECT opened_run, closed_run FROM incidents WHERE job = 'jax-jit' AND kind = 'regression' ORDER BY 1")
    assert rows == [("2026-10-03", "2026-10-04"), ("2026-10-05", None)]


def test_a_lost_improvement_is_lost_not_fixed(warehouses):
    w = warehouses["lost_improvement"]
    assert _rows(w, "SELECT kind, closed_how FROM incidents") == [("improvement", "lost")]
    assert _rows(w, "SELECT lost, fixed FROM run_verdicts WHERE run_id = '2026-10-04'") == [(1, 0)]


def test_a_regression_and_an_improvement_of_one_program_in_one_run_are_two_incidents(warehouses):
    w = warehouses["mixed_run"]
    assert sorted(_rows(w, "SELECT kind, opened_run, closed_run FROM incidents")) == [
        ("improvement", "2026-10-03", None), ("regression", "2026-10-03", None)]


def test_the_kept_collective_stays_open_until_accepted(warehouses, tmp_path):
    w = tmp_path / "wh.duckdb"
    shutil.copyfile(warehouses["collective_kept"], w)
    [(iid, cause, metrics)] = _rows(w, "SELECT incident_id, cause, metrics FROM incidents WHERE kind = 'regression'")
    assert "kernel.collectives" in metrics and cause.splitlines()[0].startswith("all-reduce")
    res = CliRunner().invoke(app, ["accept", iid, "--note", "the second psum is intended", "--warehouse", str(w)])
    assert res.exit_code == 0, res.output
    assert _rows(w, "SELECT closed_run, closed_how FROM incidents WHERE incident_id = ?", [iid]) == [("2026-10-06", "accepted")]


def test_a_truncated_dump_opens_a_failure_and_no_metric_regression(warehouses):
    w = warehouses["truncated"]
    assert {m for (m,) in _rows(w, "SELECT DISTINCT metric FROM incident_steps")} == {"dump.status"}
    [(detail,)] = _rows(w, "SELECT list(detail ORDER BY detail) FROM incident_steps")
    assert any("cpu_after_optimizations.txt.gz" in d for d in detail)  # the cut file, by name
    [(cause,)] = _rows(w, "SELECT cause FROM incidents")
    assert cause.splitlines()[0].startswith("xla_")  # the error leads; a cut file's missing structure is no cause


def test_a_model_change_is_one_regression_and_one_improvement_per_program(warehouses):
    rows = _rows(warehouses["model_change"], "SELECT job, program, kind, len(metrics) FROM incidents ORDER BY ALL")
    assert [(j, p, k) for j, p, k, _ in rows] == [
        ("jax-jit", "jit_train_step", "improvement"), ("jax-jit", "jit_train_step", "regression"),
        ("torch-inductor", "model__0_backward", "improvement"), ("torch-inductor", "model__0_backward", "regression"),
        ("torch-inductor", "model__0_forward", "improvement"), ("torch-inductor", "model__0_forward", "regression")]
    assert rows[1][3] > 10  # many metrics of many files (HLO, buffer assignment, memory report): one incident


def test_onnx_models_are_told_apart_by_what_their_reports_say(warehouses):
    """Two models in two folders, then three in one folder exported in another order each night:
    each is its own program, named from its exported graph, the one that grew keeps its name."""
    w = warehouses["two_onnx_models"]
    programs = _rows(w, "SELECT program, count(DISTINCT run_id) FROM dump_series WHERE job = 'torch-onnx' GROUP BY ALL ORDER BY ALL")
    assert programs == [("features+head(x)", 5), ("inp+blocks+head(x)", 5)]
    three = warehouses["onnx_three_models"]
    programs = _rows(three, "SELECT program, count(DISTINCT run_id), count(*) FROM dump_series GROUP BY ALL ORDER BY ALL")
    assert programs == [("embed+attn+head(tokens)", 5, 5), ("features+head(x)", 5, 5), ("inp+blocks+head(x)", 5, 5)]
    assert _rows(three, "SELECT count(*) FROM series_events WHERE event = 'same_name'") == [(0,)]
    assert _rows(three, "SELECT program, kind, opened_run, closed_run FROM incidents") == [
        ("features+head(x)", "failure", "2026-10-02", "2026-10-04")]
    [(cause,)] = _rows(three, "SELECT cause FROM incidents")
    assert cause.splitlines()[0].startswith("ONNX step translate ✅→❌: DispatchError: No ONNX function found for")
    assert cause.splitlines()[1] == "then not run: accuracy, onnx_checker, onnx_runtime"


def test_a_failing_export_names_the_step_that_failed_first_with_its_error(warehouses):
    [(cause,)] = _rows(warehouses["failing_export"], "SELECT cause FROM incidents")
    assert cause.splitlines()[0].startswith("ONNX step translate ✅→❌: DispatchError: ")


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_runs_take_their_time_from_run_json(warehouses, name):
    nights = MANIFEST["scenarios"][name]["nights"]
    runs = _rows(warehouses[name], "SELECT run_id, strftime(started_at, '%Y-%m-%dT%H:%M:%S'), meta_errors FROM runs ORDER BY run_id")
    assert runs == [(n["run_id"], n["started_at"][:19], []) for n in nights]


def test_a_revert_after_an_overshoot_reopens_what_the_overshoot_fixed_and_opens_nothing(warehouses, tmp_path):
    """overshoot_revert: A (launches 8 -> 10, night 2) is fixed the night the empty eval batch folds the step
    (10 -> 2, night 3, opening B, launches 8 -> 2 from A's baseline); night 4 reverts night 3: B is lost and
    C (fusions 8 -> 0) fixed, both by a revert, and A reopens with its own first run and commit range. Main
    opened a new "8 -> 10 (+2)" regression there, with the revert's commits (issue 44, item 2)."""
    w = warehouses["overshoot_revert"]
    ids = _ids(w, "overshoot_revert")
    assert _rows(w, "SELECT count(*) FROM incidents WHERE opened_run >= '2026-10-04'") == [(0,)]
    assert _rows(w, "SELECT new, open, fixed, improvements, lost FROM run_verdicts WHERE run_id = '2026-10-04'") == [
        (0, 1, 1, 0, 1)]
    night4 = dict(_rows(w, "SELECT incident_id, status FROM incidents_at('2026-10-04')"))
    assert (night4[ids["A"]], night4[ids["B"]], night4[ids["C"]]) == ("open", "lost", "fixed")
    [(opened, good, good_commit, bad_commit, reopened, after)] = _rows(
        w, "SELECT opened_run, last_good_run, last_good_commit, first_bad_commit, reopened_runs, reopened_after "
           "FROM incidents WHERE incident_id = ?", [ids["A"]])
    commits = {n["run_id"]: n["commit"] for n in MANIFEST["scenarios"]["overshoot_revert"]["nights"]}
    assert (opened, good, good_commit, bad_commit) == ("2026-10-02", "2026-10-01", commits["2026-10-01"], commits["2026-10-02"])
    assert (reopened, after) == (["2026-10-04"], ["2026-10-03"])
    assert _rows(w, "SELECT incident_id, reverted FROM incidents WHERE closed_run = '2026-10-04' ORDER BY 1") == sorted(
        [(ids["B"], True), (ids["C"], True)])
    # A's launches step lives again from night 4: the figure's state there is A's regression from 8.
    assert _rows(w, """SELECT incident_id, step, baseline FROM figure_status WHERE run_id = '2026-10-04'
                       AND metric = 'kernel.launches' AND stage = 'after_optimizations'""") == [(ids["A"], "regression", 8.0)]
    # The summary, the CLI and check say so.
    report = CliRunner().invoke(app, ["incidents", ids["A"], "--warehouse", str(w)])
    assert "reopened in 2026-10-04: a revert undid the change that fixed it in 2026-10-03" in report.output
    from flows.publish.report import night_report
    text, _ = night_report(w, "2026-10-04")
    assert f"<code>{ids['A']}</code> regression: jax-jit / jit_eval_step: kernel.launches 8 → 10 (+2) — open since 2026-10-02 (2 runs), " \
           "reopened in this run: the change that fixed it in 2026-10-03 was reverted" in text
    assert "lost in this run: reverted" in text and "fixed in this run: reverted" in text
    night4_copy = Path(shutil.copytree(BUCKETS / "overshoot_revert" / "2026-10-04", tmp_path / "night4"))
    out = CliRunner().invoke(app, ["check", str(night4_copy), "--warehouse", str(w), "--against", "2026-10-03",
                                   "--fail-on", "new", "--format", "json"])
    assert out.exit_code == 0, out.output
    got = {(e["change"], e["incident_id"]) for e in json.loads(out.stdout)}
    assert got == {("reopens", ids["A"]), ("loses", ids["B"]), ("fixes", ids["C"])}


def test_a_failing_export_is_a_failure_the_first_night_it_is_seen(warehouses, tmp_path):
    """first_night_failures: three models new on night 2 fail (strategies rescued by draft export, an accuracy
    check in train mode, a capture that fails without draft export): each is a failure that night, in the
    nightly and in check (--fail-on new exits 4), and none is listed as a new series under "Not regressions".
    Main opened nothing for a program with no history (issue 44, item 1). The gated model's capture failed: its
    error report names no model, so the parser names it by its forward's frame in the report's tracebacks."""
    w = warehouses["first_night_failures"]
    assert sorted(_rows(w, "SELECT job, program, kind, opened_run, closed_run FROM incidents WHERE kind = 'failure'")) == [
        ("torch-onnx", "embed+classify(x)", "failure", "2026-10-02", "2026-10-04"),
        ("torch-onnx", "encoder+decoder(x)", "failure", "2026-10-02", None),
        ("torch-onnx-nodraft", GATED, "failure", "2026-10-02", None)]
    assert _rows(w, "SELECT new FROM run_verdicts WHERE run_id = '2026-10-02'") == [(3,)]
    steps = _rows(w, """SELECT program, metric, baseline, value, last_good_run FROM incident_steps
                        WHERE step = 'failure' ORDER BY ALL""")
    assert steps == [("embed+classify(x)", "onnx.step.accuracy", 1.0, 0.0, None),
                     ("encoder+decoder(x)", "onnx.errors", 0.0, 3.0, None),
                     ("encoder+decoder(x)", "onnx.step.torch_export_nonstrict", 1.0, 0.0, None),
                     ("encoder+decoder(x)", "onnx.step.torch_export_strict", 1.0, 0.0, None),
                     (GATED, "onnx.errors", 0.0, 2.0, None),
                     (GATED, "onnx.step.torch_export_nonstrict", 1.0, 0.0, None),
                     (GATED, "onnx.step.torch_export_strict", 1.0, 0.0, None)]
    # The morning of night 2: its overview lists no failing model as "new series" under "Not regressions".
    from flows.nightly import night_in_process
    from flows.publish.site import read_site_data
    from transforms.site.pages import overview_page

    bucket = tmp_path / "bucket"
    for run_id in ("2026-10-01", "2026-10-02"):
        shutil.copytree(BUCKETS / "first_night_failures" / run_id, bucket / run_id)
    night_in_process(bucket=str(bucket), warehouse=tmp_path / "wh.duckdb", workers=1, report_path=tmp_path / "r.md")
    page = overview_page(read_site_data(tmp_path / "wh.duckdb"))
    assert page["run"] == "2026-10-02" and not [p for p in page["problems"] if p["event"] == "new_series"], page["problems"]
    assert [p["event"] for p in page["problems"]] == []
    night2 = Path(shutil.copytree(BUCKETS / "first_night_failures" / "2026-10-02", tmp_path / "night2"))
    out = CliRunner().invoke(app, ["check", str(night2), "--warehouse", str(w), "--against", "2026-10-01",
                                   "--fail-on", "new", "--format", "json"])
    assert out.exit_code == 4, out.output
    opened = sorted((e["job"], e["program"], e["kind"]) for e in json.loads(out.stdout) if e["change"] == "opens")
    assert opened == [("torch-onnx", "embed+classify(x)", "failure"), ("torch-onnx", "encoder+decoder(x)", "failure"),
                      ("torch-onnx-nodraft", GATED, "failure")]


@pytest.mark.parametrize("name", ["overshoot_revert", "first_night_failures"])
def test_night_by_night_gives_what_all_nights_at_once_give(warehouses, name, tmp_path):
    """The nightly walks a night's touched incidents only (``incidents.compute(since=...)``): a revert that
    reopens an incident closed on an earlier night, and a failure the first night, come out the same."""
    from flows.nightly import night_in_process

    bucket, w = tmp_path / "bucket", tmp_path / "wh.duckdb"
    for night in MANIFEST["scenarios"][name]["nights"]:
        shutil.copytree(BUCKETS / name / night["run_id"], bucket / night["run_id"])
        night_in_process(bucket=str(bucket), warehouse=w, workers=1, report_path=tmp_path / "report.md")
    query = """SELECT incident_id, kind, opened_run, closed_run, closed_how, reopened_runs, reopened_after, reverted, headline
               FROM incidents ORDER BY incident_id"""
    assert _rows(w, query) == _rows(warehouses[name], query)
    steps = "SELECT * FROM incident_steps ORDER BY ALL"
    assert _rows(w, steps) == _rows(warehouses[name], steps)
    status = "SELECT run_id, incident_id, status FROM incident_status ORDER BY ALL"
    assert _rows(w, status) == _rows(warehouses[name], status)
