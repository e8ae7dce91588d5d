"""A cut XLA side file told by its siblings, through the nightly (``flows.warehouse.siblings``): the issue's
own example, a listing cut before its temp arena, reads by itself as a smaller program."""

import gzip
import shutil
from pathlib import Path

from flows.warehouse import store as wh

SAMPLE = Path(__file__).parents[1] / "data" / "sample_bucket"
PREFIX = "2026-11-20/jax-jit/module_0000.jit_train_step.cpu_after_optimizations"
LISTING = f"{PREFIX}-buffer-assignment.txt.gz"
SERIES = "jax-jit/jit_train_step/xla_buffer_assignment/buffer_assignment"


def _rows(warehouse: Path, sql: str, params: list | None = None) -> list[tuple]:
    with wh.connect_readonly(warehouse) as con:
        return con.execute(sql, params or []).fetchall()


def test_a_listing_cut_before_its_temp_arena_is_partial_and_a_failure_not_an_improvement(tmp_path):
    from flows.nightly import night_in_process

    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    for night in ("2026-11-19", "2026-11-20"):
        shutil.copytree(SAMPLE / night / "jax-jit", bucket / night / "jax-jit")
        shutil.copyfile(SAMPLE / night / "run.json", bucket / night / "run.json")
    whole = gzip.decompress((bucket / LISTING).read_bytes())
    kept = whole[:whole.index(b"allocation 37: size 131584, preallocated-temp:")]  # a line-boundary cut
    (bucket / LISTING).write_bytes(gzip.compress(kept))

    night = night_in_process(bucket=str(bucket), warehouse=warehouse, workers=2)
    assert night.partial == 1

    path = LISTING
    values = "module_0000.jit_train_step.cpu_after_optimizations-buffer-assignment-values.txt.gz"
    reason = f"{path}: its allocations add up to 158,416 of the 290,000 bytes its values file ({values}) states: cut"
    assert _rows(warehouse, "SELECT status, error FROM dumps WHERE path = ?", [path]) == [("partial", reason)]
    assert _rows(warehouse, "SELECT count(*) FROM dumps WHERE run_id = '2026-11-20' AND status <> 'ok'") == [(1,)]
    # Its figures open no step (temp 131,584 -> 0 B would be an improvement): a failure about the dump does.
    steps = _rows(warehouse, "SELECT metric, step, detail FROM incident_steps WHERE series = ? AND opened_run = "
                             "'2026-11-20'", [SERIES])
    assert [(metric, step) for metric, step, _ in steps] == [("dump.status", "failure")]
    assert reason in steps[0][2]


def test_a_cut_listing_that_comes_a_night_after_its_siblings_is_told_by_the_loaded_ones(tmp_path):
    """The values file and report were loaded by an earlier night (the listing was not there yet):
    the warehouse's figures of them are evidence too."""
    from flows.nightly import night_in_process

    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    shutil.copytree(SAMPLE / "2026-11-20" / "jax-jit", bucket / "2026-11-20" / "jax-jit")
    shutil.copyfile(SAMPLE / "2026-11-20" / "run.json", bucket / "2026-11-20" / "run.json")
    whole = gzip.decompress((bucket / LISTING).read_bytes())
    (bucket / LISTING).unlink()
    assert night_in_process(bucket=str(bucket), warehouse=warehouse, workers=2).partial == 0

    (bucket / LISTING).write_bytes(gzip.compress(whole[:whole.index(b"allocation 37:")]))
    later = night_in_process(bucket=str(bucket), warehouse=warehouse, workers=2)
    assert (later.new, later.partial) == (1, 1)
    [(status, error)] = _rows(warehouse, "SELECT status, error FROM dumps WHERE path = ?", [LISTING])
    assert (status, error.split(": ", 1)[1]) == ("partial", "its allocations add up to 158,416 of the 290,000 bytes its "
                                                 "values file (module_0000.jit_train_step.cpu_after_optimizations-"
                                                 "buffer-assignment-values.txt.gz) states: cut")


def test_siblings_the_warehouse_holds_are_evidence_without_a_parse(tmp_path):
    """The next run's files are byte-identical to the last run's: its values file and report are held,
    not parsed (their staged summaries carry no figures), and their stored figures tell the cut
    listing; the listing, partial last run, is parsed again and named by its own path."""
    from flows.nightly import night_in_process

    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    shutil.copytree(SAMPLE / "2026-11-20" / "jax-jit", bucket / "2026-11-20" / "jax-jit")
    shutil.copyfile(SAMPLE / "2026-11-20" / "run.json", bucket / "2026-11-20" / "run.json")
    whole = gzip.decompress((bucket / LISTING).read_bytes())
    (bucket / LISTING).write_bytes(gzip.compress(whole[:whole.index(b"allocation 37:")]))
    assert night_in_process(bucket=str(bucket), warehouse=warehouse, workers=2).partial == 1

    shutil.copytree(bucket / "2026-11-20", bucket / "2026-11-21")
    (bucket / "2026-11-21" / "run.json").write_text('{"started_at": "2026-11-21T02:00:00+00:00"}')
    night = night_in_process(bucket=str(bucket), warehouse=warehouse, workers=2)
    assert (night.new, night.reused, night.partial) == (17, 16, 1)
    listing = LISTING.replace("2026-11-20", "2026-11-21")
    assert _rows(warehouse, "SELECT status, error FROM dumps WHERE path = ?", [listing]) == [(
        "partial", f"{listing}: its allocations add up to 158,416 of the 290,000 bytes its values file "
                   "(module_0000.jit_train_step.cpu_after_optimizations-buffer-assignment-values.txt.gz) states: cut")]
