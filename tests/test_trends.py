"""Trends (facts: deltas against the previous run) and the settings' rules, on hand-built runs with known answers."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest

from transforms.trends.rules import DOWN, UP, Rule, Settings, parse_settings
from transforms.trends.metric_trends import metric_trends

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


def trend(observations, n_runs, settings=Settings()) -> pl.DataFrame:
    return metric_trends(observations, runs(n_runs), settings)


def column(frame: pl.DataFrame, name: str) -> list:
    return frame.get_column(name).to_list()


def test_exact_deltas_and_what_moved():
    t = trend(obs(S, "memory.temp_bytes", [100, 100, 103, 103, 101]), 5)
    assert column(t, "previous_value") == [None, 100, 100, 103, 103]
    assert column(t, "delta") == [None, 0, 3, 0, -2]
    assert column(t, "ratio")[2] == pytest.approx(1.03)
    assert column(t, "changed") == [True, False, True, False, True]
    assert column(t, "direction") == [1] * 5 and column(t, "rule")[0] == "> 2% increase"


def test_trends_say_no_verdict():
    """Whether a figure regressed is the incidents' to say (one verdict): no trend column judges."""
    t = trend(obs(S, "memory.temp_bytes", [100, 200]), 2)
    assert not {"verdict", "baseline", "regressed_since", "change"} & set(t.columns)


def test_first_fallback_kernel_is_a_move_from_zero_though_the_metric_was_absent():
    ir = "torch-inductor/model__0_forward/inductor_ir/post_fusion"
    o = pl.concat([obs(ir, "inductor.nodes", [10, 10, 11]),
                   obs(ir, "kernel.fallback.aten.convolution_backward.default", [None, None, 1], start=1)])
    t = trend(o, 3).filter(pl.col("metric") == "kernel.fallback.aten.convolution_backward.default")
    # Read as 0 in the runs before (a step from 0), but no row there: a night cannot write one.
    assert column(t, "value") == [1] and column(t, "previous_value") == [0] and column(t, "previous_run_id") == ["r2"]


def test_vanishing_fusion_kind_is_a_drop_to_zero():
    hlo = "jax-jit/jit_step/xla_hlo/after_optimizations"
    o = pl.concat([obs(hlo, "hlo.instructions", [100, 100]), obs(hlo, "fusion.count.kInput", [3])])
    t = trend(o, 2).filter(pl.col("metric") == "fusion.count.kInput")
    assert column(t, "value") == [3, 0] and column(t, "delta") == [None, -3]


def test_onnx_jitter_is_no_change():
    s = "torch-onnx/mlp/onnx_report/export"
    t = trend(obs(s, "onnx.max_abs_diff", [2.1e-7, 3.0e-7, 1.9e-7, 0.02]), 4)
    assert column(t, "changed") == [True, False, False, True]


def test_gaps_compare_with_the_last_run_that_had_the_series():
    t = trend(obs(S, "memory.temp_bytes", [100, None, 100]), 3)
    assert column(t, "run_id") == ["r1", "r3"] and column(t, "previous_run_id") == [None, "r1"]
    assert column(t, "changed") == [True, False]


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
    assert settings.rule_for(S, "memory.temp_bytes") == Rule("memory.temp_bytes", UP, rel=0.5, series="jax-jit/*")
    assert settings.rule_for("jax-pmap/f/xla_hlo", "memory.temp_bytes").rel == 0.02  # the default elsewhere
    assert settings.rule_for(S, "fusion.count").direction == DOWN
    assert "baseline_runs" not in repr(settings)  # a settings file that still has it keeps working; it changes nothing


@pytest.mark.parametrize("text, message", [
    ("baseline_runs = 0", "baseline_runs must be a positive integer"),
    ("[[rule]]\nrel = 1", "needs metric"),
    ("[[rule]]\nmetric = 'x'\ndirection = 'sideways'", "direction must be up, down or none"),
    ("[[rule]]\nmetric = 'x'\nrel = -1", "rel must be a number >= 0"),
    ("thresholds = 1", "unknown setting(s) thresholds"),
    ("baseline_runs = ", "dumpscope.toml: "),
    ("[site]\nurl = 'ftp://x'", "[site] url must be an http(s) URL"),
])
def test_bad_settings_name_the_file_and_the_entry(text, message):
    with pytest.raises(ValueError, match="dumpscope.toml") as err:
        parse_settings(text)
    assert message in str(err.value)


def test_a_night_gives_the_rows_of_the_whole_history():
    """The nightly computes only the last runs, from each pair's last row before them: the
    same rows as over every run, gaps included."""
    n = 14
    values = {
        "memory.temp_bytes": [100, 100, 110, 121, 133, 146, 146, 100, 100, 130, 143, 157, 157, 150],
        "memory.peak_live_bytes": [50, None, 60, 66, None, 73, 80, 88, 88, 97, 107, None, 118, 130],
        "fusion.count": [9, 9, 8, 8, 8, 9, 7, 7, None, 7, 6, 6, 6, 9],
        "onnx.max_rel_diff": [0.1, 0.2, 0.2, 0.3, 0.3, 0.3, 0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 0.2, 0.2],
    }
    observations = pl.concat([obs(S, m, v) for m, v in values.items()])
    full = metric_trends(observations, runs(n), Settings())
    for from_seq in range(1, n):
        night = metric_trends(observations, runs(n), Settings(), from_seq=from_seq)
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
