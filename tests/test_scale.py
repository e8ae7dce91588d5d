"""Work and storage that follow what changed, not the history (issue 13), on real nights.

- structural items are computed once per content: a run whose dumps are byte-identical
  to the last one adds paths, not items;
- records rows of superseded contents are compacted, and every figure, diff and item
  stays exactly what it is without compaction;
- a content that comes back after its records were compacted is parsed again;
- the memory setting reaches DuckDB and the items batches; batches of any size give the
  same items.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from flows import aggregate as aggregate_mod
from flows.warehouse import store as wh
from tests.test_concurrency import SAMPLE, snapshot

ROOT = Path(__file__).parents[1]
NIGHTS = sorted(p.name for p in SAMPLE.iterdir() if p.is_dir())
RECORDS = ("hlo_instructions", "buffer_allocations", "buffer_values", "buffer_peak_values", "inductor_nodes",
           "inductor_kernels", "onnx_steps")


def _night(bucket: Path, warehouse: Path, night: str, source: str | None = None, settings: Path | None = None):
    from flows.nightly import nightly

    shutil.copytree(SAMPLE / (source or night), bucket / night)
    if source:  # the same dumps again under another run: run.json says which run it is
        meta = json.loads((bucket / night / "run.json").read_text())
        meta["started_at"] = "2026-11-21T03:00:00Z"
        meta["commit"] = "f" * 40
        (bucket / night / "run.json").write_text(json.dumps(meta))
    return nightly(bucket=str(bucket), warehouse=warehouse, workers=1, settings_path=settings)


def _count(warehouse: Path, sql: str):
    with wh.connect_readonly(warehouse) as con:
        return con.execute(sql).fetchall()[0][0]


@pytest.fixture(scope="module")
def four_nights(prefect, tmp_path_factory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("scale")
    bucket, warehouse = where / "bucket", where / "wh.duckdb"
    for night in NIGHTS:
        _night(bucket, warehouse, night)
    return bucket, warehouse


def test_items_are_computed_once_per_content(four_nights, tmp_path):
    bucket, warehouse = four_nights
    work = tmp_path / "wh.duckdb"
    shutil.copyfile(warehouse, work)
    items = _count(work, "SELECT count(*) FROM content_items")
    paths = _count(work, "SELECT count(DISTINCT path) FROM dump_items")
    summary = _night(_copy_bucket(bucket, tmp_path), work, "2026-11-21",
                     source=NIGHTS[-1])
    assert summary.parsed > 0
    # Byte-identical to the latest run's dumps: none is parsed again, the stored rows are copied.
    assert summary.reused == _count(work, "SELECT count(*) FROM dumps WHERE run_id = '2026-11-21' AND status <> 'failed'")
    assert _count(work, "SELECT count(*) FROM content_items") == items  # nothing computed again
    new_paths = _count(work, "SELECT count(DISTINCT path) FROM dump_items WHERE path LIKE '2026-11-21/%'")
    assert new_paths == _count(work, "SELECT count(*) FROM dump_series JOIN dumps USING (path) "
                                     "WHERE dumps.run_id = '2026-11-21' AND status <> 'failed'") > 20
    assert _count(work, "SELECT count(DISTINCT path) FROM dump_items") == paths + new_paths
    # Same content, so no structural change and no diff rows for the new run.
    assert _count(work, "SELECT count(*) FROM diffs WHERE run_id = '2026-11-21'") == 0


def _copy_bucket(bucket: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "bucket"
    shutil.copytree(bucket, copy)
    return copy


def test_compaction_keeps_only_the_latest_runs_records_and_every_figure_exact(prefect, four_nights, tmp_path):
    _, compacted = four_nights
    settings = tmp_path / "keep_all.toml"
    settings.write_text("[warehouse]\nkeep_records_runs = 0\n")
    bucket, full = tmp_path / "bucket", tmp_path / "full.duckdb"
    for night in NIGHTS:
        _night(bucket, full, night, settings=settings)
    latest = f"SELECT dump_id FROM dumps WHERE run_id = '{NIGHTS[-1]}'"
    for table in RECORDS:
        kept = _count(compacted, f"SELECT count(DISTINCT dump_id) FROM {table}")
        assert kept == _count(compacted, f"SELECT count(DISTINCT dump_id) FROM {table} WHERE dump_id IN ({latest})"), table
        assert _count(full, f"SELECT count(*) FROM {table}") >= _count(compacted, f"SELECT count(*) FROM {table}")
    assert _count(full, "SELECT count(*) FROM hlo_instructions") > _count(compacted, "SELECT count(*) FROM hlo_instructions")
    a, b = snapshot(compacted), snapshot(full)
    derived = ["dump_series", "metric_trends", "regressions", "series_events", "run_rollups", "job_totals",
               "content_item_rows", "excerpt_texts", "diffs", "incidents", "incident_steps", "metrics", "dumps"]
    for table in derived:
        assert a[table] == b[table], table


def test_a_content_that_comes_back_after_compaction_is_loaded_again(four_nights, tmp_path):
    bucket, warehouse = four_nights
    work = tmp_path / "wh.duckdb"
    shutil.copyfile(warehouse, work)
    first = f"SELECT count(*) FROM hlo_instructions WHERE dump_id IN (SELECT dump_id FROM dumps WHERE run_id = '{NIGHTS[0]}')"
    only_first = (f"SELECT count(*) FROM dumps WHERE run_id = '{NIGHTS[0]}' AND kind = 'xla_hlo' AND dump_id NOT IN "
                  f"(SELECT dump_id FROM dumps WHERE run_id = '{NIGHTS[-1]}')")
    assert _count(work, only_first) > 0 and _count(work, first) < _count(work, "SELECT count(*) FROM hlo_instructions") + 1
    _night(_copy_bucket(bucket, tmp_path), work, "2026-11-21", source=NIGHTS[0])  # a revert to the first night
    revived = ("SELECT count(DISTINCT h.dump_id) FROM hlo_instructions h JOIN dumps d USING (dump_id) "
               "WHERE d.run_id = '2026-11-21'")
    assert _count(work, revived) == _count(work, "SELECT count(DISTINCT dump_id) FROM dumps WHERE run_id = '2026-11-21' "
                                                 "AND kind = 'xla_hlo' AND status <> 'failed'")


def test_the_memory_setting_reaches_duckdb_and_the_items_batches(tmp_path):
    from flows.resources import MemoryBudget, parse_memory

    budget = MemoryBudget(parse_memory("1GiB"))
    assert budget.duckdb_bytes == int((1 << 30) * 0.15) and budget.writing_bytes == (1 << 30) // 2
    limits = []
    with wh.Warehouse(tmp_path / "wh.duckdb", budget=budget) as con:
        limit = "SELECT current_setting('memory_limit')"
        limits.append(con.execute(limit).fetchall()[0][0])  # moving rows: the writing share
        seen = aggregate_mod.frame_of
        try:  # while the aggregation reads frames, DuckDB has the smaller share
            aggregate_mod.frame_of = lambda c, *a, **k: limits.append(c.execute(limit).fetchall()[0][0]) or seen(c, *a, **k)
            aggregate_mod.aggregate(con, budget=budget)
        finally:
            aggregate_mod.frame_of = seen
        limits.append(con.execute(limit).fetchall()[0][0])
    assert [limits[0], limits[1], limits[-1]] == ["512.0 MiB", "153.0 MiB", "512.0 MiB"], limits
    assert MemoryBudget(parse_memory("512MB")).items_batch_rows < MemoryBudget(parse_memory("4GB")).items_batch_rows
    with pytest.raises(ValueError, match="2GB"):
        parse_memory("lots")
    with pytest.raises(ValueError, match="256 MiB"):
        parse_memory("100MB")


def test_items_batches_of_any_size_give_the_same_items(sample_warehouse, tmp_path):
    from flows import items
    from transforms.trends import diffs as diff_mod

    with wh.connect_readonly(sample_warehouse) as con:
        todo = con.sql("""SELECT DISTINCT s.items_key, d.kind, d.stage, d.dump_id FROM dump_series s JOIN dumps d USING (path)
                              WHERE s.items_key IS NOT NULL AND d.run_id = (SELECT max(run_id) FROM runs)""").pl()
        todo = todo.unique("items_key")  # the latest run's contents: their records are kept
        stored = con.sql("SELECT * FROM content_items").pl().join(todo.select("items_key"), on="items_key", how="semi")
        whole = items.export_batches(con, todo, tmp_path / "one", max_rows=10**9)
        small = items.export_batches(con, todo, tmp_path / "many", max_rows=500)
    assert len(whole) == 1 and len(small) > 5
    order = ["items_key", "category", "key"]
    run = items.reading(items.DumpSource(str(Path(__file__).parents[1] / "data" / "sample_bucket")))  # as the nightly: excerpts too
    one = items.computed(whole, run(whole)).sort(order)
    many = items.computed(small, run(small)).sort(order)
    assert one.equals(many)
    assert one.equals(stored.select(diff_mod.CONTENT_ITEM_SCHEMA.names()).sort(order))
    assert one.get_column("excerpt").is_not_null().sum() > 200


def test_run_takes_a_memory_limit_and_writes_its_summary_as_json(prefect, tmp_path):
    out = tmp_path / "summary.json"
    bucket = tmp_path / "bucket"
    shutil.copytree(SAMPLE / NIGHTS[0], bucket / NIGHTS[0])
    cmd = [str(ROOT / ".venv" / "bin" / "dumpscope"), "run", "--bucket", str(bucket), "--warehouse", str(tmp_path / "w.duckdb"),
           "--workers", "1", "--memory-limit", "600MB", "--summary-json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(out.read_text())
    assert summary["parsed"] > 0 and summary["caught_up"] == "new"
    assert {"parse", "load", "load.publish", "load.aggregate_items"} <= set(summary["seconds"])
    bad = subprocess.run(cmd[:-4] + ["--memory-limit", "lots"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--memory-limit" in bad.stderr


def test_incidents_computed_job_by_job_are_the_incidents_of_the_whole(sample_warehouse, tmp_path, monkeypatch):
    """A year of observations is walked in groups of jobs (flows.aggregate._incidents):
    the sample's incidents, re-aggregated one job at a time, are the same rows."""
    from flows.resources import MemoryBudget

    work = tmp_path / "wh.duckdb"
    shutil.copyfile(sample_warehouse, work)
    tables = ("incidents", "incident_steps")

    def rows(con):
        return {t: con.sql(f"SELECT * FROM {t}").pl().sort(pl.all()) for t in tables}

    with wh.connect_readonly(work) as con:
        whole = rows(con)
        jobs = con.sql("SELECT count(DISTINCT job) FROM dumps").fetchall()[0][0]
        assert con.sql("SELECT count(DISTINCT job) FROM incidents").fetchall()[0][0] >= 3
    assert whole["incidents"].height >= 9
    monkeypatch.setattr(MemoryBudget, "incidents_batch_rows", property(lambda self: 1))  # a group per job
    calls = []
    seen = aggregate_mod.incident_mod.compute
    monkeypatch.setattr(aggregate_mod.incident_mod, "compute", lambda *a, **k: calls.append(1) or seen(*a, **k))
    with wh.Warehouse(work) as con:
        con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")  # all runs again
        aggregate_mod.aggregate(con, aggregate_mod.load_settings(None), budget=MemoryBudget(1 << 30))
    with wh.connect_readonly(work) as con:
        parts = rows(con)
    assert len(calls) == jobs == 4  # one walk per job of the bucket
    for t in tables:
        assert parts[t].drop("cause", strict=False).equals(whole[t].drop("cause", strict=False)), t
