"""Incidents on planted steps (transforms.trends.incidents): step baselines, lifecycle, grouping, impact."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from transforms.trends.incidents import Floors, compute, incident_id
from transforms.trends.rules import Settings

RUNS = [f"r{i}" for i in range(8)]
ORDER = pl.DataFrame({"run_id": RUNS, "run_seq": list(range(8)),
                      "started_at": [datetime(2026, 1, 1) + timedelta(days=i) for i in range(8)],
                      "commit": [f"c{i}" for i in range(8)]})


def _obs(series_values: dict[tuple[str, str], list[float | None]], job="job", program="prog", kind="xla_buffer_assignment"):
    rows = []
    for (series, metric), values in series_values.items():
        for run, v in zip(RUNS, values):
            if v is not None:
                rows.append({"series": series, "job": job, "program": program, "kind": kind, "stage": None,
                             "metric": metric, "run_id": run, "value": float(v)})
    return pl.DataFrame(rows, schema={"series": pl.String, "job": pl.String, "program": pl.String, "kind": pl.String,
                                      "stage": pl.String, "metric": pl.String, "run_id": pl.String, "value": pl.Float64})


def _health(series: list[str], statuses: dict[str, list[str]] | None = None, job="job", program="prog"):
    rows = []
    for s in series:
        for i, run in enumerate(RUNS):
            status = (statuses or {}).get(s, ["ok"] * 8)[i]
            rows.append({"series": s, "job": job, "program": program, "run_id": run, "status": status,
                         "detail": None if status == "ok" else f"{run}/job/x.txt: line 9: cut short"})
    return pl.DataFrame(rows, schema={"series": pl.String, "job": pl.String, "program": pl.String, "run_id": pl.String,
                                      "status": pl.String, "detail": pl.String})


def _incidents(values, statuses=None, accepts=(), settings=Settings()):
    obs = _obs(values)
    series = sorted({s for s, _ in values} | set(statuses or {}))
    return compute(obs, _health(series, statuses), ORDER, list(accepts), settings, Floors())


MIB = 2**20


def test_a_stable_program_opens_nothing():
    inc, steps = _incidents({("s", "memory.temp_bytes"): [MIB] * 8, ("s", "kernel.launches"): [10] * 8})
    assert inc.is_empty() and steps.is_empty()


def test_a_kept_collective_stays_open_until_accepted():
    values = {("s", "kernel.collectives"): [1, 1, 1, 2, 2, 2, 2, 2]}
    inc, _ = _incidents(values)
    assert inc.select("opened_run", "kind", "closed_run", "last_good_run", "last_good_commit", "first_bad_commit").rows() == [
        ("r3", "regression", None, "r2", "c2", "c3")]
    iid = inc.get_column("incident_id")[0]
    assert iid == incident_id("job", "prog", "r3")
    accepted, _ = _incidents(values, accepts=[{"run_id": "r6", "incident_id": iid, "accepted_by": "ana", "note": "intended"}])
    assert accepted.select("closed_run", "closed_how", "accepted_by", "accepted_note").rows() == [("r6", "accepted", "ana", "intended")]


def test_a_blowup_and_its_revert_close_as_fixed_and_open_nothing_new():
    inc, steps = _incidents({("s", "memory.temp_bytes"): [MIB, MIB, MIB, 8 * MIB, MIB, MIB, MIB, MIB]})
    assert inc.select("opened_run", "kind", "closed_run", "closed_how").rows() == [("r3", "regression", "r4", "fixed")]
    assert steps.select("baseline", "value", "latest_value").rows() == [(MIB, 8 * MIB, MIB)]


def test_a_further_step_in_the_same_direction_updates_the_open_incident():
    inc, steps = _incidents({("s", "memory.temp_bytes"): [MIB, MIB, 2 * MIB, 3 * MIB, 3 * MIB, 3 * MIB, 3 * MIB, 3 * MIB]})
    assert inc.height == 1 and steps.select("opened_run", "baseline", "latest_value").rows() == [("r2", MIB, 3 * MIB)]
    # ...and the run it moved in is kept: that night says "worse again", though nothing new opens.
    assert steps.select("worse_runs", "worse_from", "worse_to").rows() == [(["r3"], [2 * MIB], [3 * MIB])]


def test_only_moves_the_worse_way_past_the_floor_count_as_worse_again():
    # r2 opens; r3 +512 B (under the 1 KiB floor); r4 better (not worse); r5 worse again; r6 back: fixed.
    inc, steps = _incidents({("s", "memory.temp_bytes"): [MIB, MIB, 2 * MIB, 2 * MIB + 512, 1.5 * MIB, 4 * MIB, MIB, MIB]})
    assert inc.select("opened_run", "closed_run", "closed_how").rows() == [("r2", "r6", "fixed")]
    assert steps.select("worse_runs", "worse_from", "worse_to").rows() == [(["r5"], [1.5 * MIB], [4 * MIB])]
    # An improvement that slips back part of the way is not "worse again".
    _, better = _incidents({("s", "memory.temp_bytes"): [4 * MIB, 4 * MIB, MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB]})
    assert better.select("step", "worse_runs").rows() == [("improvement", [])]


def test_steps_of_one_program_in_one_run_are_one_incident_ranked_by_impact():
    inc, steps = _incidents({
        ("p/hlo", "kernel.collectives"): [1, 1, 2, 2, 2, 2, 2, 2],
        ("p/ba", "memory.temp_bytes"): [MIB, MIB, 1.5 * MIB, 1.5 * MIB, 1.5 * MIB, 1.5 * MIB, 1.5 * MIB, 1.5 * MIB],
        ("p/ba", "memory.thread_local_bytes"): [24, 24, 84, 84, 84, 84, 84, 84],  # +250 %, 60 bytes: under the floor
        ("p/ba", "memory.total_bytes"): [4 * MIB] * 8,
    })
    assert inc.height == 1
    assert inc.get_column("metrics")[0].to_list() == ["kernel.collectives", "memory.temp_bytes"]
    assert steps.get_column("metric").to_list() == ["kernel.collectives", "memory.temp_bytes"]  # collective first


def test_counts_have_whole_baselines_and_a_first_fallback_is_a_regression():
    inc, steps = _incidents({("s", "kernel.fallback.aten.median"): [None, None, 1, 1, 1, 1, 1, 1],
                             ("s", "kernel.launches"): [10] * 8})
    assert steps.select("metric", "baseline", "value", "opened_run").rows() == [("kernel.fallback.aten.median", 0.0, 1.0, "r2")]


def test_float_noise_opens_nothing_and_an_accuracy_regression_only_past_its_limit():
    jitter = [2.1e-7, 3e-7, 2.5e-7, 2.9e-7, 2.2e-7, 3e-7, 2.4e-7, 2.6e-7]
    inc, _ = _incidents({("s", "onnx.max_abs_diff"): jitter})
    assert inc.is_empty()
    inc, _ = _incidents({("s", "onnx.max_abs_diff"): jitter[:5] + [5e-3] * 3})
    assert inc.select("opened_run", "kind").rows() == [("r5", "regression")]


def test_a_truncated_dump_is_a_failure_not_a_metric_regression():
    # The figures of the partial dump are left out by the caller (only ok dumps are observed).
    values = {("s", "fusion.count"): [8, 8, 8, None, 8, 8, 8, 8]}
    statuses = {"s": ["ok", "ok", "ok", "partial", "ok", "ok", "ok", "ok"]}
    inc, steps = _incidents(values, statuses)
    assert inc.select("opened_run", "kind", "closed_run", "closed_how").rows() == [("r3", "failure", "r4", "fixed")]
    assert steps.get_column("metric").to_list() == ["dump.status"]
    assert "cut short" in steps.get_column("detail")[0]


def test_a_failing_onnx_step_is_a_failure():
    inc, _ = _incidents({("s", "onnx.step.translate"): [1, 1, 0, 0, 0, 0, 0, 0]})
    assert inc.select("opened_run", "kind", "closed_run").rows() == [("r2", "failure", None)]


def test_an_improvement_is_reported_as_such():
    inc, _ = _incidents({("s", "memory.temp_bytes"): [4 * MIB, 4 * MIB, MIB, MIB, MIB, MIB, MIB, MIB]})
    assert inc.select("opened_run", "kind", "closed_run").rows() == [("r2", "improvement", None)]


def test_a_slow_creep_opens_where_it_passes_the_floor():
    creep = [100_000 * (1 + 0.008 * i) for i in range(8)]  # +0.8 % a night: under the 2 % rule each night
    inc, steps = _incidents({("s", "memory.temp_bytes"): creep})
    assert inc.get_column("opened_run").to_list() == ["r3"] and steps.get_column("baseline").to_list() == [100_000.0]


def test_accept_by_series_pattern_restarts_the_baseline():
    values = {("jax/p/ba", "memory.temp_bytes"): [MIB, MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB, MIB, MIB]}
    inc, _ = _incidents(values, accepts=[{"run_id": "r3", "series": "jax/*", "accepted_by": "bo", "note": None}])
    # accepted at r3; the later return to 1 MiB is a step away from the new baseline: an improvement.
    assert inc.select("opened_run", "kind", "closed_run", "closed_how").rows() == [
        ("r2", "regression", "r3", "accepted"), ("r6", "improvement", None, None)]


def test_accept_by_id_in_the_run_it_opened_in_closes_it_there():
    """Last night's new incident, accepted by its id at last night: accepted at r2, its value the new
    baseline (the return to 1 MiB at r6 is then an improvement); a failure the same way."""
    values = {("jax/p/ba", "memory.temp_bytes"): [MIB, MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB, MIB, MIB]}
    first, _ = _incidents(values)
    opened = first.get_column("incident_id")[0]
    accept = {"run_id": "r2", "incident_id": opened, "accepted_by": "bo", "note": "intended"}
    inc, steps = _incidents(values, accepts=[accept])
    assert inc.select("opened_run", "kind", "closed_run", "closed_how").rows() == [
        ("r2", "regression", "r2", "accepted"), ("r6", "improvement", None, None)]
    assert inc.get_column("incident_id")[0] == opened
    assert steps.filter(pl.col("incident_id") == opened).get_column("closed_how").to_list() == ["accepted"]
    statuses = {"s": ["ok", "ok", "failed", "failed", "failed", "ok", "ok", "ok"]}
    failure, _ = _incidents({}, statuses)
    fid = failure.get_column("incident_id")[0]
    accepted, _ = _incidents({}, statuses, accepts=[{"run_id": "r2", "incident_id": fid, "accepted_by": "bo", "note": None}])
    assert accepted.select("opened_run", "closed_run", "closed_how").rows() == [("r2", "r2", "accepted")]
