"""Series identity across renumbered programs, and the events that are not regressions."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest

from transforms.trends.rollups import run_rollups, series_events
from transforms.trends.series import assign_series, compile_overrides, normalize_program
from transforms.trends.metric_trends import run_order


@pytest.mark.parametrize("raw, normalized", [
    ("SyncTensorsGraph.2143", "SyncTensorsGraph"),
    ("SyncTensorsGraph.2210", "SyncTensorsGraph"),
    ("module_0007.jit_train_step", "jit_train_step"),
    ("jit_train_step", "jit_train_step"),
    ("model__0_forward_1.0", "model__0_forward"),  # the compile id goes, the AOT graph index stays
    ("model__1_forward_4.1", "model__1_forward"),
    ("model__12_backward_30.1", "model__12_backward"),
    ("model__3_inference_0", "model__3_inference"),
    ("onnx_export_2026-11-20_02-01-35-123456_success", "onnx_export"),
    ("mlp_3x128", "mlp_3x128"),
    ("jit__fun", "jit__fun"),
])
def test_normalize_program(raw, normalized):
    assert normalize_program(raw) == normalized


def dumps(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, orient="row", schema={
        "path": pl.String, "run_id": pl.String, "job": pl.String, "kind": pl.String, "stage": pl.String,
        "program": pl.String, "status": pl.String, "error": pl.String})


def test_renumbered_programs_are_one_series():
    d = dumps([
        ("n1/xla/module_0007.SyncTensorsGraph.2143.after_optimizations.txt", "n1", "xla", "xla_hlo", "after_optimizations", "SyncTensorsGraph.2143", "ok", None),
        ("n2/xla/module_0012.SyncTensorsGraph.2210.after_optimizations.txt", "n2", "xla", "xla_hlo", "after_optimizations", "SyncTensorsGraph.2210", "ok", None),
        ("n1/ind/a/model__0_forward_1.0/ir_post_fusion.txt", "n1", "ind", "inductor_ir", "post_fusion", "model__0_forward_1.0", "ok", None),
        ("n2/ind/a/model__0_forward_3.0/ir_post_fusion.txt", "n2", "ind", "inductor_ir", "post_fusion", "model__0_forward_3.0", "ok", None),
        ("n2/ind/notes.txt", "n2", "ind", "unknown", None, "notes", "ok", None),
    ])
    s = assign_series(d)
    assert s.get_column("series").to_list() == [
        "ind/model__0_forward/inductor_ir/post_fusion", "xla/SyncTensorsGraph/xla_hlo/after_optimizations",
        "ind/model__0_forward/inductor_ir/post_fusion", "xla/SyncTensorsGraph/xla_hlo/after_optimizations",
    ]


def test_inductor_graphs_are_told_by_their_graph_index():
    """A graph break gives model__0 and model__1 (forward and backward): four series, each by its AOT
    graph index, whatever order the folders sort in; none is a #2 and no same_name event is raised
    (main named them model__forward and model__forward#2, by folder order)."""
    graphs = ["model__0_forward_1.0", "model__1_forward_2.1", "model__1_backward_5.1", "model__0_backward_6.0"]
    d = dumps([(f"n{r}/ind/dbg/{g}/ir_post_fusion.txt", f"n{r}", "ind", "inductor_ir", "post_fusion", g, "ok", None)
               for r in (1, 2) for g in (graphs if r == 1 else graphs[::-1])])
    s = assign_series(d)
    assert sorted(set(s.get_column("series_program"))) == [
        "model__0_backward", "model__0_forward", "model__1_backward", "model__1_forward"]
    assert s.group_by("series_program").agg(pl.col("program").unique().sort()).sort("series_program").rows() == [
        ("model__0_backward", ["model__0_backward_6.0"]), ("model__0_forward", ["model__0_forward_1.0"]),
        ("model__1_backward", ["model__1_backward_5.1"]), ("model__1_forward", ["model__1_forward_2.1"])]
    runs = pl.DataFrame({"run_id": ["n1", "n2"], "started_at": [datetime(2026, 1, 1), datetime(2026, 1, 2)],
                         "commit": [None, None]}, schema_overrides={"commit": pl.String})
    assert series_events(d, s, run_order(runs)).get_column("event").to_list() == ["first_run"]


def test_same_name_is_said_once_per_job_and_run():
    """Two debug folders of one run that really cannot be told apart (two processes compiled the same
    model): one same_name event per run and job naming them, not one per dump."""
    d = dumps([(f"n{r}/ind/run_{p}/model__0_forward_1.0/ir_{stage}.txt", f"n{r}", "ind", "inductor_ir", stage,
                "model__0_forward_1.0", "ok", None)
               for r in (1, 2) for p in ("a", "b") for stage in ("pre_fusion", "post_fusion")])
    s = assign_series(d)
    assert sorted(set(s.get_column("series_program"))) == ["model__0_forward", "model__0_forward#2"]
    runs = pl.DataFrame({"run_id": ["n1", "n2"], "started_at": [datetime(2026, 1, 1), datetime(2026, 1, 2)],
                         "commit": [None, None]}, schema_overrides={"commit": pl.String})
    same = series_events(d, s, run_order(runs)).filter(pl.col("event") == "same_name")
    assert same.select("run_id", "job", "series", "path").rows() == [("n1", "ind", None, None), ("n2", "ind", None, None)]
    assert same.get_column("detail").to_list() == [
        "2 inductor_ir programs named model__0_forward: told apart by file order only, their series #2, #3... "
        "may swap between runs (name them in run.json's \"series\" or the settings' [series])"] * 2


def test_programs_colliding_in_one_run_stay_apart_in_compile_order():
    d = dumps([
        (f"n{r}/j/module_{i:04d}.jit_step.{i}.after_optimizations.txt", f"n{r}", "j", "xla_hlo", "after_optimizations", f"jit_step.{i + 10 * r}", "ok", None)
        for r in (1, 2) for i in (3, 9)
    ])
    s = assign_series(d)
    assert s.select("run_id", "series_program").rows() == [
        ("n1", "jit_step"), ("n1", "jit_step#2"), ("n2", "jit_step"), ("n2", "jit_step#2")]


def test_overrides_from_run_json_and_settings():
    d = dumps([
        ("n1/j/module_0001.SyncTensorsGraph.77.after_optimizations.txt", "n1", "j", "xla_hlo", "after_optimizations", "SyncTensorsGraph.77", "ok", None),
        ("n2/j/module_0001.SyncTensorsGraph.91.after_optimizations.txt", "n2", "j", "xla_hlo", "after_optimizations", "SyncTensorsGraph.91", "ok", None),
    ])
    settings = compile_overrides({r"SyncTensorsGraph\.\d+": "train_step"})
    assert assign_series(d, overrides=settings).get_column("series_program").to_list() == ["train_step", "train_step"]
    per_run = {"n2": {"SyncTensorsGraph.91": "eval_step"}}
    assert assign_series(d, per_run, settings).get_column("series_program").to_list() == ["train_step", "eval_step"]
    with pytest.raises(ValueError, match=r"\[series\] pattern"):
        compile_overrides({"(": "x"})


def test_events_new_vanished_missing_and_failed():
    d = dumps([
        ("n1/a/p.hlo", "n1", "a", "xla_hlo", "after_optimizations", "p", "ok", None),
        ("n1/a/q.hlo", "n1", "a", "xla_hlo", "after_optimizations", "q", "ok", None),
        ("n1/b/r.hlo", "n1", "b", "xla_hlo", "after_optimizations", "r", "ok", None),
        ("n2/a/p.hlo", "n2", "a", "xla_hlo", "after_optimizations", "p", "failed", "n2/a/p.hlo: line 3: bad\nmore"),
        ("n2/a/z.hlo", "n2", "a", "xla_hlo", "after_optimizations", "z", "ok", None),
    ])
    runs = pl.DataFrame({"run_id": ["n1", "n2"], "started_at": [datetime(2026, 1, 1), datetime(2026, 1, 2)], "commit": [None, None]},
                        schema_overrides={"commit": pl.String})
    order = run_order(runs)
    s = assign_series(d)
    ev = series_events(d, s, order)
    assert ev.select("run_id", "job", "series", "event").rows() == [
        ("n1", "a", None, "first_run"), ("n1", "b", None, "first_run"),
        ("n2", "a", "a/z/xla_hlo/after_optimizations", "new_series"),
        ("n2", "a", "a/q/xla_hlo/after_optimizations", "vanished"),
        ("n2", "a", "a/p/xla_hlo/after_optimizations", "failed_dump"),
        ("n2", "b", None, "job_missing"),
    ]
    assert ev.filter(pl.col("event") == "failed_dump").get_column("detail").to_list() == ["n2/a/p.hlo: line 3: bad"]
    empty_trends = pl.DataFrame(schema={"run_id": pl.String, "job": pl.String, "series": pl.String, "changed": pl.Boolean,
                                        "previous_value": pl.Float64})
    roll = run_rollups(d, s, empty_trends, ev, order)
    assert roll.select("run_id", "job", "dumps", "parsed", "failed", "series", "new_series", "vanished_series").rows() == [
        ("n1", "a", 2, 2, 0, 2, 0, 0), ("n1", "b", 1, 1, 0, 1, 0, 0), ("n2", "a", 2, 1, 1, 2, 1, 1)]
