"""Incidents on planted steps (transforms.trends.incident_walk): step baselines, lifecycle, grouping, impact."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transforms.trends.incident_walk import Floors, compute, incident_id
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
    return compute(obs, _health(series, statuses), ORDER, list(accepts), settings, Floors())[:2]


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


def _lifecycle(values, **kw):
    inc, steps = _incidents({("s", "memory.temp_bytes"): values}, **kw)
    return inc.select("incident_id", "kind", "opened_run", "closed_run", "closed_how", "stacked_on").rows(), steps


def test_a_further_step_on_an_open_incident_is_a_new_incident_stacked_on_it():
    """r2: A (1 → 2 MiB); r3: B (2 → 16 MiB), new, on top of A; r5: back to 2 MiB fixes B and
    leaves A open; r7: back to 1 MiB fixes A."""
    rows, steps = _lifecycle([MIB, MIB, 2 * MIB, 16 * MIB, 16 * MIB, 2 * MIB, 2 * MIB, MIB])
    a, b = incident_id("job", "prog", "r2"), incident_id("job", "prog", "r3")
    assert rows == [(a, "regression", "r2", "r7", "fixed", []), (b, "regression", "r3", "r5", "fixed", [a])]
    assert steps.select("incident_id", "baseline", "value", "last_good_run", "stacked_on").rows() == [
        (a, MIB, 2 * MIB, "r1", None), (b, 2 * MIB, 16 * MIB, "r2", a)]


def test_a_revert_to_an_older_level_fixes_every_step_stacked_above_it():
    rows, _ = _lifecycle([MIB, 2 * MIB, 4 * MIB, 8 * MIB, MIB, MIB, MIB, MIB])
    assert [(r[2], r[3], r[4]) for r in rows] == [("r1", "r4", "fixed"), ("r2", "r4", "fixed"), ("r3", "r4", "fixed")]
    assert [r[5] for r in rows] == [[], [rows[0][0]], [rows[1][0]]]


def test_a_partial_recovery_is_not_news_and_a_return_to_the_opened_value_neither():
    """r2 opens (1 → 4 MiB); r3 recovers part of the way (2 MiB): still open, latest 2 MiB, nothing
    new; r4 back at 4 MiB: not worse than the level it opened at, nothing new either."""
    rows, steps = _lifecycle([MIB, MIB, 4 * MIB, 2 * MIB, 4 * MIB, 4 * MIB, 4 * MIB, 4 * MIB])
    assert [(r[2], r[3]) for r in rows] == [("r2", None)]
    assert steps.get_column("latest_value").to_list() == [4 * MIB]
    _, steps = _lifecycle([MIB, MIB, 4 * MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB, 2 * MIB])
    assert steps.get_column("latest_value").to_list() == [2 * MIB]  # the partial recovery shows as the latest value


def test_a_dip_to_the_baseline_and_back_is_fixed_then_a_new_incident():
    rows, _ = _lifecycle([MIB, MIB, 4 * MIB, MIB, 4 * MIB, 4 * MIB, 4 * MIB, 4 * MIB])
    assert [(r[2], r[3], r[4], r[5]) for r in rows] == [("r2", "r3", "fixed", []), ("r4", None, None, [])]


def test_an_overshoot_the_good_way_fixes_the_regression_and_opens_an_improvement():
    """Fusions 7 → 0 → 10 (fewer is worse): the regression is fixed at r4, where an improvement
    7 → 10 opens (its baseline is the regression's)."""
    inc, steps = _incidents({("s", "fusion.count"): [7, 7, 7, 0, 10, 10, 10, 10]})
    assert inc.select("kind", "opened_run", "closed_run", "closed_how").rows() == [
        ("regression", "r3", "r4", "fixed"), ("improvement", "r4", None, None)]
    assert steps.select("step", "baseline", "value").rows() == [("regression", 7.0, 0.0), ("improvement", 7.0, 10.0)]
    assert inc.get_column("incident_id")[1] == incident_id("job", "prog", "r4", improvement=True)


def test_an_improvement_that_goes_back_is_lost_not_fixed():
    rows, _ = _lifecycle([4 * MIB, 4 * MIB, MIB, MIB, 4 * MIB, 4 * MIB, 4 * MIB, 4 * MIB])
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [("improvement", "r2", "r4", "lost")]
    # Going back past it the worse way: lost, and a regression from the level before it.
    rows, steps = _lifecycle([4 * MIB, 4 * MIB, MIB, MIB, 8 * MIB, 8 * MIB, 8 * MIB, 8 * MIB])
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [("improvement", "r2", "r4", "lost"), ("regression", "r4", None, None)]
    assert steps.get_column("baseline").to_list() == [4 * MIB, 4 * MIB]


def test_a_regression_and_an_improvement_of_one_program_in_one_run_are_two_incidents():
    inc, steps = _incidents({("p/hlo", "kernel.launches"): [10, 10, 14, 14, 14, 14, 14, 14],
                             ("p/ba", "memory.temp_bytes"): [4 * MIB, 4 * MIB, MIB, MIB, MIB, MIB, MIB, MIB]})
    assert sorted(inc.select("kind", "opened_run", "metrics", "incident_id").rows()) == [
        ("improvement", "r2", ["memory.temp_bytes"], incident_id("job", "prog", "r2", improvement=True)),
        ("regression", "r2", ["kernel.launches"], incident_id("job", "prog", "r2"))]
    # Closing follows its own steps: the improvement's loss does not touch the regression.
    inc, _ = _incidents({("p/hlo", "kernel.launches"): [10, 10, 14, 14, 14, 14, 14, 14],
                         ("p/ba", "memory.temp_bytes"): [4 * MIB, 4 * MIB, MIB, 4 * MIB, 4 * MIB, 4 * MIB, 4 * MIB, 4 * MIB]})
    assert sorted(inc.select("kind", "closed_run", "closed_how").rows(), key=str) == [
        ("improvement", "r3", "lost"), ("regression", None, None)]


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


def test_accepting_the_top_of_a_stack_keeps_the_step_below_it_open_and_its_value_the_level():
    """A (1 → 2 MiB) then B (2 → 16 MiB) on top; B accepted at r4: 16 MiB is the level, so r5 at
    16 MiB opens nothing; A stays open; a return to 2 MiB at r6 is an improvement against the
    accepted level, and to 1 MiB at r7 ... A's figure is no longer worse than its baseline: fixed."""
    values = [MIB, MIB, 2 * MIB, 16 * MIB, 16 * MIB, 16 * MIB, 16 * MIB, MIB]
    b = incident_id("job", "prog", "r3")
    rows, _ = _lifecycle(values, accepts=[{"run_id": "r4", "incident_id": b, "accepted_by": "bo", "note": "batch 256"}])
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [
        ("regression", "r2", "r7", "fixed"), ("regression", "r3", "r4", "accepted")]


def test_a_slow_creep_opens_where_it_passes_the_floor():
    creep = [100_000 * (1 + 0.008 * i) for i in range(8)]  # +0.8 % a night: under the 2 % rule each night
    inc, steps = _incidents({("s", "memory.temp_bytes"): creep})
    # r3 passes 2 % over the level it crept from (r0); r6 passes 2 % over r3's level: a step on top of it.
    assert inc.get_column("opened_run").to_list() == ["r3", "r6"]
    assert steps.get_column("baseline").to_list() == [100_000.0, creep[3]]


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


_LEVELS = st.sampled_from([MIB, MIB, 2 * MIB, 3 * MIB, MIB + 512, 16 * MIB])
_STATUS = st.sampled_from(["ok", "ok", "ok", "partial", "failed", "absent"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(temp=st.lists(_LEVELS, min_size=8, max_size=8), peak=st.lists(_LEVELS, min_size=8, max_size=8),
       launches=st.lists(st.sampled_from([10, 10, 12, 8, 30]), min_size=8, max_size=8),
       status=st.lists(_STATUS, min_size=8, max_size=8), accepts=st.lists(st.tuples(st.integers(1, 7), st.booleans()),
                                                                          max_size=2))
@pytest.mark.slow
def test_a_night_writes_the_incidents_it_touched_and_keeps_the_others_as_the_night_before_wrote_them(
        temp, peak, launches, status, accepts):
    """``compute(since=k)`` over runs 0..7 (what night k computes) returns the incidents touched
    from run k on, exactly as the whole walk has them, and the ids of all the others; each of
    those is, row for row, what the walk of runs 0..k-1 (the nights before, stored) wrote."""
    values = {("a", "memory.temp_bytes"): temp, ("a", "kernel.launches"): launches, ("b", "memory.peak_live_bytes"): peak}
    statuses = {"b": ["ok"] + status[1:]}
    obs = _obs(values).join(_health(["a", "b"], statuses).filter(pl.col("status") == "ok").select("series", "run_id"),
                            on=["series", "run_id"])
    health = _health(["a", "b"], statuses)
    full = compute(obs, health, ORDER, [], Settings(), Floors())
    # Accepts by id of incidents open at the run (the CLI's rule), or of series a.
    log = []
    for run, by_id in accepts:
        ids = full.steps.filter((pl.col("opened_run") <= RUNS[run]) & (pl.col("closed_run").is_null()
                                                                      | (pl.col("closed_run") > RUNS[run])))
        target = ids.get_column("incident_id")[0] if by_id and ids.height else None
        log.append({"run_id": RUNS[run], "incident_id": target, "series": None if target else "a",
                    "accepted_by": "bo", "note": None})
    full = compute(obs, health, ORDER, log, Settings(), Floors())
    every = set(full.incidents.get_column("incident_id"))
    for k in range(1, 8):
        night = compute(obs, health, ORDER, log, Settings(), Floors(), since=k)
        touched = set(night.incidents.get_column("incident_id"))
        assert touched | set(night.unchanged) == every and not touched & set(night.unchanged), k
        assert night.incidents.equals(full.incidents.filter(pl.col("incident_id").is_in(list(touched)))), k
        assert night.steps.equals(full.steps.filter(pl.col("incident_id").is_in(list(touched)))), k
        before = ORDER.filter(pl.col("run_seq") < k)
        stored = compute(obs.filter(pl.col("run_id").is_in(before["run_id"].implode())),
                         health.filter(pl.col("run_id").is_in(before["run_id"].implode())), before,
                         [a for a in log if a["run_id"] < RUNS[k]], Settings(), Floors())
        kept = pl.col("incident_id").is_in(night.unchanged)
        assert stored.incidents.filter(kept).equals(full.incidents.filter(kept)), k
        assert stored.steps.filter(kept).equals(full.steps.filter(kept)), k
