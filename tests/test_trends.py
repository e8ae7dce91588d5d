"""Trends, verdicts and regression rules on hand-built runs with known answers."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest

from transforms.trends.rules import DOWN, UP, Rule, Settings, parse_settings
from transforms.trends.metric_trends import metric_trends, regressions

S = "jax-jit/jit_step/xla_buffer_assignment/buffer_assignment"


def runs(n: int) -> pl.DataFrame:
    return pl.DataFrame({
        "run_id": [f"r{i}" for i in range(1, n + 1)],
        "started_at": [datetime(2026, 11, i) for i in range(1, n + 1)],
        "commit": [f"c{i}" for i in range(1, n + 1)],
    })


def obs(series: str, metric: str, values: list[float | None], *, start: int = 1) -> pl.DataFrame:
    job, program, kind, *stage = series.split("/")
    rows = [(f"r{start + i}", series, job, kind, stage[0] if stage else None, program, metric, v)
            for i, v in enumerate(values) if v is not None]
    return pl.DataFrame(rows, orient="row", schema={"run_id": pl.String, "series": pl.String, "job": pl.String,
                                                    "kind": pl.String, "stage": pl.String, "program": pl.String,
                                                    "metric": pl.String, "value": pl.Float64})


NO_ACCEPTS = pl.DataFrame(schema={"series": pl.String, "run_id": pl.String, "metric": pl.String})


def trend(observations, n_runs, accepts=NO_ACCEPTS, settings=Settings()) -> pl.DataFrame:
    return metric_trends(observations, runs(n_runs), accepts, settings)


def column(frame: pl.DataFrame, name: str) -> list:
    return frame.get_column(name).to_list()


def test_exact_deltas_baselines_and_flags():
    t = trend(obs(S, "memory.temp_bytes", [100, 100, 103, 103, 101]), 5)
    assert column(t, "verdict") == ["new", "unchanged", "regressed", "regressed", "improved"]
    assert column(t, "previous_value") == [None, 100, 100, 103, 103]
    assert column(t, "delta") == [None, 0, 3, 0, -2]
    assert column(t, "baseline") == [None, 100, 100, 100, 101.5]  # median of the previous 7
    assert column(t, "baseline_runs") == [0, 1, 2, 3, 4]
    assert column(t, "change") == [None, 0, 3, 3, -0.5]
    assert column(t, "change_ratio")[2] == pytest.approx(0.03)
    assert column(t, "regressed_since") == [None, None, "r3", "r3", None]
    assert column(t, "rule")[0] == "> 2% increase"
    reg = regressions(t)
    assert column(reg, "run_id") == ["r3", "r4"]
    assert column(reg, "baseline") == [100, 100] and column(reg, "change") == [3, 3]


def test_an_accepted_pattern_restarts_the_baselines_of_the_series_it_matches():
    """`dumpscope accept 'jax-jit/*'` logs the pattern: every series it matches restarts
    its baseline at the accepted run, the others keep theirs."""
    other = "jax-pmap/jit_step/xla_buffer_assignment/buffer_assignment"
    o = pl.concat([obs(S, "memory.temp_bytes", [100, 100, 150, 150]), obs(other, "memory.temp_bytes", [100, 100, 150, 150])])
    accepts = pl.DataFrame({"series": ["jax-jit/*"], "run_id": ["r3"], "metric": [None]}, schema=NO_ACCEPTS.schema)
    t = trend(o, 4, accepts)
    assert column(t.filter(pl.col("series") == S), "verdict") == ["new", "unchanged", "accepted", "unchanged"]
    assert column(t.filter(pl.col("series") == other), "verdict") == ["new", "unchanged", "regressed", "regressed"]


def test_under_threshold_is_a_change_not_a_regression():
    t = trend(obs(S, "memory.temp_bytes", [1000, 1015, 1015]), 3)
    assert column(t, "verdict") == ["new", "changed", "unchanged"]


def test_first_run_never_flags():
    t = trend(obs(S, "memory.temp_bytes", [5e9]), 1)
    assert column(t, "verdict") == ["new"] and regressions(t).is_empty()


def test_accepted_change_is_not_flagged_again():
    o = obs(S, "memory.temp_bytes", [100, 100, 150, 150, 150])
    before = trend(o, 5)
    assert column(before, "verdict") == ["new", "unchanged", "regressed", "regressed", "regressed"]
    accepts = pl.DataFrame({"series": [S], "run_id": ["r3"], "metric": [None]}, schema=NO_ACCEPTS.schema)
    after = trend(o, 5, accepts)
    assert column(after, "verdict") == ["new", "unchanged", "accepted", "unchanged", "unchanged"]
    assert column(after, "baseline") == [None, 100, None, 150, 150]
    # An accept of another metric leaves this one flagged.
    other = accepts.with_columns(pl.lit("memory.total_bytes").alias("metric"))
    assert column(trend(o, 5, other), "verdict")[2:] == ["regressed"] * 3


def test_fusion_drop_regresses_and_rise_improves():
    hlo = "jax-jit/jit_step/xla_hlo/after_optimizations"
    t = trend(obs(hlo, "fusion.count", [40, 39, 41]), 3)
    assert column(t, "verdict") == ["new", "regressed", "improved"]


def test_first_fallback_kernel_is_a_regression_even_though_the_metric_was_absent():
    ir = "torch-inductor/model__forward/inductor_ir/post_fusion"
    o = pl.concat([obs(ir, "inductor.nodes", [10, 10, 11]),
                   obs(ir, "kernel.fallback.aten.convolution_backward.default", [None, None, 1], start=1)])
    t = trend(o, 3).filter(pl.col("metric") == "kernel.fallback.aten.convolution_backward.default")
    # Read as 0 in the runs before (a step from 0), but no row there: a night cannot write one.
    assert column(t, "value") == [1] and column(t, "previous_value") == [0] and column(t, "baseline") == [0]
    assert column(t, "verdict") == ["regressed"] and column(t, "previous_run_id") == ["r2"]


def test_vanishing_fusion_kind_is_a_drop():
    hlo = "jax-jit/jit_step/xla_hlo/after_optimizations"
    o = pl.concat([obs(hlo, "hlo.instructions", [100, 100]), obs(hlo, "fusion.count.kInput", [3])])
    t = trend(o, 2).filter(pl.col("metric") == "fusion.count.kInput")
    assert column(t, "value") == [3, 0] and column(t, "verdict") == ["new", "regressed"]


def test_onnx_jitter_is_no_change_and_a_failing_step_regresses():
    s = "torch-onnx/mlp/onnx_report/export"
    o = pl.concat([obs(s, "onnx.max_abs_diff", [2.1e-7, 3.0e-7, 1.9e-7, 0.02]),
                   obs(s, "onnx.step.accuracy", [1, 1, 1, 0])])
    t = trend(o, 4)
    assert column(t.filter(pl.col("metric") == "onnx.max_abs_diff"), "verdict") == ["new", "unchanged", "unchanged", "regressed"]
    assert column(t.filter(pl.col("metric") == "onnx.step.accuracy"), "verdict") == ["new", "unchanged", "unchanged", "regressed"]


def test_noisy_metric_below_its_limit_is_only_a_change():
    s = "torch-onnx/mlp/onnx_report/export"
    t = trend(obs(s, "onnx.max_abs_diff", [1e-7, 5e-4]), 2)
    assert column(t, "verdict") == ["new", "changed"]


def test_neutral_metric_changes_never_regress():
    hlo = "jax-jit/jit_step/xla_hlo/after_optimizations"
    t = trend(obs(hlo, "hlo.instructions", [100, 200, 50]), 3)
    assert column(t, "verdict") == ["new", "changed", "changed"]


def test_gaps_compare_with_the_last_run_that_had_the_series():
    t = trend(obs(S, "memory.temp_bytes", [100, None, 100]), 3)
    assert column(t, "run_id") == ["r1", "r3"] and column(t, "previous_run_id") == [None, "r1"]
    assert column(t, "verdict") == ["new", "unchanged"]


def test_duplicate_figures_of_one_compile_are_one_regression():
    values = "jax-jit/jit_step/xla_buffer_assignment/values"
    t = trend(pl.concat([obs(S, "memory.total_bytes", [100, 200]), obs(values, "memory.total_bytes", [100, 200])]), 2)
    reg = regressions(t)
    assert reg.height == 1 and column(reg, "series") == [S] and column(reg, "also_in") == [[values]]


def test_settings_thresholds_per_metric_and_per_series():
    settings = parse_settings("""
baseline_runs = 2
[[rule]]
metric = "memory.temp_bytes"
series = "jax-jit/*"
rel = 0.5
[[rule]]
metric = "hlo.instructions"
direction = "up"
abs = 10
""")
    assert settings.baseline_runs == 2
    assert settings.rule_for(S, "memory.temp_bytes") == Rule("memory.temp_bytes", UP, rel=0.5, series="jax-jit/*")
    assert settings.rule_for("jax-pmap/f/xla_hlo", "memory.temp_bytes").rel == 0.02  # the default elsewhere
    assert settings.rule_for(S, "fusion.count").direction == DOWN
    t = trend(obs(S, "memory.temp_bytes", [100, 140, 160, 160]), 4, settings=settings)
    # baseline = median of the previous 2: 100 → 140 is +40 % (< 50 %), 160 vs median(100, 140) = 120 is +33 %.
    assert column(t, "baseline") == [None, 100, 120, 150]
    assert column(t, "verdict") == ["new", "changed", "changed", "unchanged"]
    hlo = "jax-jit/jit_step/xla_hlo/after_optimizations"
    assert column(trend(obs(hlo, "hlo.instructions", [100, 105, 120]), 3, settings=settings), "verdict") == ["new", "changed", "regressed"]


@pytest.mark.parametrize("text, message", [
    ("baseline_runs = 0", "baseline_runs must be a positive integer"),
    ("[[rule]]\nrel = 1", "needs metric"),
    ("[[rule]]\nmetric = 'x'\ndirection = 'sideways'", "direction must be up, down or none"),
    ("[[rule]]\nmetric = 'x'\nrel = -1", "rel must be a number >= 0"),
    ("thresholds = 1", "unknown setting(s) thresholds"),
    ("baseline_runs = ", "dumpscope.toml: "),
])
def test_bad_settings_name_the_file_and_the_entry(text, message):
    with pytest.raises(ValueError, match="dumpscope.toml") as err:
        parse_settings(text)
    assert message in str(err.value)


@pytest.mark.parametrize("baseline_runs", [1, 2, 3])
def test_a_night_from_the_stored_state_gives_the_rows_of_the_whole_history(baseline_runs):
    """The nightly computes only the last runs, from each pair's last baseline_runs rows
    and the stored verdict before them (``prior``): the same rows as over every run,
    streaks of regressions that began long before, accepts and gaps included."""
    n = 14
    values = {
        "memory.temp_bytes": [100, 100, 110, 121, 133, 146, 146, 100, 100, 130, 143, 157, 157, 150],
        "memory.peak_live_bytes": [50, None, 60, 66, None, 73, 80, 88, 88, 97, 107, None, 118, 130],
        "fusion.count": [9, 9, 8, 8, 8, 9, 7, 7, None, 7, 6, 6, 6, 9],
        "onnx.max_rel_diff": [0.1, 0.2, 0.2, 0.3, 0.3, 0.3, 0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 0.2, 0.2],
    }
    observations = pl.concat([obs(S, m, v) for m, v in values.items()])
    accepts = pl.DataFrame({"series": [S], "run_id": ["r9"], "metric": ["memory.temp_bytes"]})
    settings = Settings(baseline_runs=baseline_runs)
    full = metric_trends(observations, runs(n), accepts, settings)
    seq = lambda c: pl.col(c).str.slice(1).cast(pl.Int64)  # noqa: E731
    assert full.filter(seq("regressed_since") < seq("run_id")).height >= 3  # streaks that span nights
    for from_seq in range(1, n):
        before = full.filter(pl.col("run_id").str.slice(1).cast(pl.Int64) <= from_seq)
        prior = before.sort("started_at").group_by("series", "metric").agg(pl.all().last()).select(
            "series", "metric", "verdict", "regressed_since")
        night = metric_trends(observations, runs(n), accepts, settings, from_seq=from_seq, prior=prior)
        expected = full.filter(pl.col("run_id").str.slice(1).cast(pl.Int64) > from_seq)
        order = ["run_id", "metric"]
        assert night.sort(order).equals(expected.sort(order)), from_seq


@pytest.mark.parametrize("text", ['commit_url = "{commit.__class__}"', 'commit_url = "{commit!r}"', 'commit_url = "{"',
                                  'compare_url = "{base}...{tail}"', '[site]\nbucket_url = "https://b/{path:>9}"',
                                  '[site]\nbucket_url = "https://b/{0}"', '[site]\nbucket_url = 3'])
def test_link_templates_take_only_their_plain_fields(text):
    """str.format would evaluate attributes, indexes and specs: a template may name its fields, nothing else."""
    with pytest.raises(ValueError, match="using only"):
        parse_settings(text)


def test_bucket_url_is_a_site_setting():
    settings = parse_settings('[site]\nbucket_url = "https://console.example/b/{path}"\n')
    assert settings.site_bucket_url == "https://console.example/b/{path}"
    assert "console" not in repr(settings)  # not an input of the figures: the aggregation stamp ignores it
