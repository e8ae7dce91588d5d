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

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from flows.verdict import aggregate as aggregate_mod
from flows.verdict import history
from flows.verdict.settings import load_settings
from flows.warehouse import records
from flows.warehouse import store as wh
from tests.test_concurrency import SAMPLE, snapshot

ROOT = Path(__file__).parents[1]
NIGHTS = sorted(p.name for p in SAMPLE.iterdir() if p.is_dir())
RECORDS = ("hlo_instructions", "buffer_allocations", "buffer_values", "buffer_peak_values", "inductor_nodes",
           "inductor_kernels", "onnx_steps")


def _night(bucket: Path, warehouse: Path, night: str, source: str | None = None, settings: Path | None = None):
    from flows.nightly import night_in_process

    shutil.copytree(SAMPLE / (source or night), bucket / night)
    if source:  # the same dumps again under another run: run.json says which run it is
        meta = json.loads((bucket / night / "run.json").read_text())
        meta["started_at"] = "2026-11-21T03:00:00Z"
        meta["commit"] = "f" * 40
        (bucket / night / "run.json").write_text(json.dumps(meta))
    return night_in_process(bucket=str(bucket), warehouse=warehouse, workers=1, settings_path=settings)


def _count(warehouse: Path, sql: str):
    with wh.connect_readonly(warehouse) as con:
        return con.execute(sql).fetchall()[0][0]


@pytest.fixture(scope="module")
def four_nights(tmp_path_factory) -> tuple[Path, Path]:
    """The sample's nights one by one with the default settings (records of the last 7 runs kept)."""
    where = tmp_path_factory.mktemp("scale")
    bucket, warehouse = where / "bucket", where / "wh.duckdb"
    for night in NIGHTS:
        _night(bucket, warehouse, night)
    return bucket, warehouse


@pytest.fixture(scope="module")
def compacted_nights(tmp_path_factory) -> tuple[Path, Path]:
    """The same nights keeping the records of the latest run only (``keep_records_runs = 1``)."""
    where = tmp_path_factory.mktemp("compacted")
    settings = where / "keep_one.toml"
    settings.write_text("[warehouse]\nkeep_records_runs = 1\n")
    bucket, warehouse = where / "bucket", where / "wh.duckdb"
    for night in NIGHTS:
        _night(bucket, warehouse, night, settings=settings)
    return bucket, warehouse


def test_a_week_of_records_answers_a_query_per_run(four_nights):
    """"What changed in hlo_instructions this week": with the default retention every sample
    run's HLO dumps have their instruction rows, and the warehouse says it holds those runs."""
    _, warehouse = four_nights
    per_run = ("SELECT d.run_id, count(DISTINCT h.dump_id) FROM hlo_instructions h JOIN dumps d USING (dump_id) "
               "GROUP BY d.run_id ORDER BY d.run_id")
    hlo_dumps = ("SELECT run_id, count(DISTINCT dump_id) FROM dumps WHERE kind = 'xla_hlo' AND status <> 'failed' "
                 "GROUP BY run_id ORDER BY run_id")
    with wh.connect_readonly(warehouse) as con:
        found = con.execute(per_run).fetchall()
        assert found == con.execute(hlo_dumps).fetchall()
        assert [run for run, _ in found] == NIGHTS
        assert con.execute("SELECT count(*) FROM compacted_contents").fetchall() == [(0,)]
        assert records.held_runs(con) == records.HeldRuns(whole=tuple(reversed(NIGHTS)))


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


def test_compaction_keeps_only_the_latest_runs_records_and_every_figure_exact(compacted_nights, four_nights):
    _, compacted = compacted_nights
    _, full = four_nights  # four runs, seven kept: nothing compacted
    assert _count(full, "SELECT count(*) FROM compacted_contents") == 0
    latest = f"SELECT dump_id FROM dumps WHERE run_id = '{NIGHTS[-1]}'"
    for table in RECORDS:
        kept = _count(compacted, f"SELECT count(DISTINCT dump_id) FROM {table}")
        assert kept == _count(compacted, f"SELECT count(DISTINCT dump_id) FROM {table} WHERE dump_id IN ({latest})"), table
        assert _count(full, f"SELECT count(*) FROM {table}") >= _count(compacted, f"SELECT count(*) FROM {table}")
    assert _count(full, "SELECT count(*) FROM hlo_instructions") > _count(compacted, "SELECT count(*) FROM hlo_instructions")
    # Compacted records are gone from the disk, not only from the listing: the store holds
    # the files of the latest run's contents, exactly those records_files lists.
    def store(warehouse: Path) -> set[str]:
        return {f"{f.parent.name}/{f.name}" for f in records.root_for(warehouse).glob("*/*.parquet")}

    with wh.connect_readonly(compacted) as con:
        listed = {f for (f,) in con.execute("SELECT file FROM records_files").fetchall()}
        latest_ids = {d for (d,) in con.execute(latest).fetchall()}
    assert store(compacted) == listed and {name.split("/")[1][:64] for name in listed} <= latest_ids
    assert len(store(full)) > len(store(compacted))
    # The latest run is whole; an older run is held in part when it shares a content that has records with it
    # (in the sample no older run does).
    with wh.connect_readonly(compacted) as con:
        sharing = {r for (r,) in con.execute(f"SELECT DISTINCT run_id FROM dumps WHERE dump_id IN ({latest}) "
                                              f"AND dump_id IN (SELECT dump_id FROM records_files) "
                                              f"AND run_id <> '{NIGHTS[-1]}'").fetchall()}
        held = records.held_runs(con)
    assert held.whole == (NIGHTS[-1],)
    assert set(held.partial) == sharing and held.without == len(NIGHTS) - 1 - len(sharing)
    a, b = snapshot(compacted), snapshot(full)
    derived = ["dump_series", "metric_trends", "series_events", "run_rollups", "job_totals",
               "content_item_rows", "excerpt_texts", "diffs", "incidents", "incident_steps", "metrics", "dumps"]
    for table in derived:
        assert a[table] == b[table], table


def test_a_content_that_comes_back_after_compaction_is_loaded_again(compacted_nights, tmp_path):
    bucket, warehouse = compacted_nights
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
    from flows.verdict import items
    from transforms.trends import diffs as diff_mod

    with duckdb.connect(str(sample_warehouse), read_only=True) as con:  # the export writes Parquet: a full session
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
    script = Path(sys.executable).parent / "dumpscope"  # the console script of the venv running the tests
    cmd = [str(script), "run", "--bucket", str(bucket), "--warehouse", str(tmp_path / "w.duckdb"),
           "--workers", "1", "--memory-limit", "600MB", "--summary-json", str(out)]
    # The session's Prefect server (the harness): the process skips a temporary server's start-up.
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(out.read_text())
    assert summary["parsed"] > 0 and summary["caught_up"] == "new"
    assert {"parse", "load", "load.publish", "load.aggregate_items"} <= set(summary["seconds"])
    bad = subprocess.run(cmd[:-4] + ["--memory-limit", "lots"], capture_output=True, text=True, timeout=300, env=env)
    assert bad.returncode == 2 and "--memory-limit" in bad.stderr


def test_incidents_computed_job_by_job_are_the_incidents_of_the_whole(sample_warehouse, tmp_path, monkeypatch):
    """A year of observations is walked in groups of jobs (flows.verdict.aggregate._incidents):
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
    seen = aggregate_mod.incident_walk.compute
    monkeypatch.setattr(aggregate_mod.incident_walk, "compute", lambda *a, **k: calls.append(1) or seen(*a, **k))
    with wh.Warehouse(work) as con:
        con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")  # all runs again
        aggregate_mod.aggregate(con, load_settings(None), budget=MemoryBudget(1 << 30))
    with wh.connect_readonly(work) as con:
        parts = rows(con)
    assert len(calls) == jobs == 5  # one walk per job of the bucket
    for t in tables:
        assert parts[t].drop("cause", strict=False).equals(whole[t].drop("cause", strict=False)), t


def _derived(warehouse: Path) -> dict[str, pl.DataFrame]:
    """The incidents, and every row of the other derived tables a night writes."""
    tables = ("incidents", "incident_steps", "metric_trends", "regressions", "job_totals", "run_rollups", "series_events")
    with wh.connect_readonly(warehouse) as con:
        return {t: con.sql(f"SELECT * FROM {t}").pl().sort(pl.all()) for t in tables}


def test_a_night_that_repeats_the_last_run_keeps_the_incidents_without_walking_the_history(four_nights, tmp_path, monkeypatch):
    """An unchanged night (every dump byte-identical to the run before) cannot move an
    incident: no job's history is read or walked, and every derived table is what a
    full re-aggregation computes."""
    bucket, warehouse = four_nights
    work = tmp_path / "wh.duckdb"
    shutil.copyfile(warehouse, work)
    assert _count(work, "SELECT count(*) FROM incidents") >= 5
    walked = []
    seen = aggregate_mod.incident_walk.compute
    monkeypatch.setattr(aggregate_mod.incident_walk, "compute",
                        lambda obs, health, *a, **k: walked.append(health.height) or seen(obs, health, *a, **k))
    _night(_copy_bucket(bucket, tmp_path), work, "2026-11-21", source=NIGHTS[-1])
    assert walked == [0]  # one call, with no job in it
    night = _derived(work)
    with wh.Warehouse(work) as con:
        con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")  # every run, every job, again
        aggregate_mod.aggregate(con, load_settings(None))
    assert walked[-1] > 0
    full = _derived(work)
    assert night["metric_trends"].height > 100
    for table, frame in full.items():
        assert night[table].equals(frame), table


def _fifth_night(bucket: Path, tmp_path: Path, drop_job: bool = False) -> tuple[Path, str]:
    """A copy of ``bucket`` plus run 2026-11-21: the last sample night again with one job's
    HLO dump changed (an entry parameter twice as long: +512 bytes), and with
    ``drop_job`` without another job (it is missing) and without one dump of the changed
    job (its series vanished). Returns the bucket and the changed job."""
    copy = _copy_bucket(bucket, tmp_path)
    night = copy / "2026-11-21"
    shutil.copytree(SAMPLE / NIGHTS[-1], night)
    meta = json.loads((night / "run.json").read_text())
    (night / "run.json").write_text(json.dumps(meta | {"started_at": "2026-11-21T03:00:00Z"}))
    changed = night / "jax-jit" / "module_0002.jit_eval_metrics.cpu_after_optimizations.txt.gz"
    text = gzip.decompress(changed.read_bytes()).decode()
    param = "%params_0___b__.1 = f32[128]{0} parameter(0)"
    assert text.count(param) == 1
    changed.write_bytes(gzip.compress(text.replace(param, param.replace("f32[128]", "f32[256]")).encode()))
    if drop_job:
        shutil.rmtree(min(p for p in night.iterdir() if p.is_dir() and p.name != "jax-jit"))
        (night / "jax-jit" / "module_0000.jit_train_step.before_optimizations.txt.gz").unlink()
    return copy, "jax-jit"


def test_a_night_that_changes_one_job_walks_that_job_only(four_nights, tmp_path, monkeypatch):
    """The last sample night again, with one job's HLO dump changed (a longer entry
    parameter): that job is walked, the others keep their stored incidents; the tables are
    those of a full re-aggregation."""
    bucket, warehouse = four_nights
    work = tmp_path / "wh.duckdb"
    shutil.copyfile(warehouse, work)
    copy, job = _fifth_night(bucket, tmp_path)
    jobs = sorted(p.name for p in (copy / "2026-11-21").iterdir() if p.is_dir())
    walked = []
    seen = aggregate_mod.incident_walk.compute
    monkeypatch.setattr(aggregate_mod.incident_walk, "compute",
                        lambda obs, health, *a, **k: walked.append(set(health.get_column("job").cast(pl.String)))
                        or seen(obs, health, *a, **k))
    from flows.nightly import night_in_process
    night_in_process(bucket=str(copy), warehouse=work, workers=1)
    assert len(jobs) >= 3 and walked == [{job}]
    night = _derived(work)
    with wh.Warehouse(work) as con:
        con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")
        aggregate_mod.aggregate(con, load_settings(None))
    full = _derived(work)
    assert night["metric_trends"].height > 100
    for table, frame in full.items():
        assert night[table].equals(frame), table


@pytest.mark.parametrize("keep_before", [1, 2])
def test_a_night_reads_the_figures_of_its_window_and_gets_the_rows_of_every_run(four_nights, keep_before):
    """A night holds the dumps and series of its window of runs only (``night_frames``);
    the trends' rows (each pair's last rows before the night) are read from its last runs,
    then from every run for the series short of rows there (their other runs from the
    warehouse): the same rows as reading every run, for every night of the sample (series
    come and go in it)."""
    from transforms.trends import metric_trends as trends

    _, warehouse = four_nights
    with wh.connect_readonly(warehouse) as con:
        runs = aggregate_mod.frame_of(con, "SELECT run_id, started_at, \"commit\", extra::VARCHAR AS extra FROM runs")
        order = trends.run_order(runs)
        settings = load_settings(None)
        all_dumps, all_series = history.night_frames(con, runs, order, 0, settings)
        assert all_series.equals(con.sql("SELECT * EXCLUDE (items_key) FROM dump_series ORDER BY path").pl())
        every_ok = all_series.join(all_dumps.filter(pl.col("status") == "ok").select("path"), on="path", how="semi")
        checked, narrower, elsewhere = 0, 0, []
        for from_seq in range(keep_before + 1, order.height):
            dumps, series = history.night_frames(con, runs, order, from_seq, settings)
            assert series.equals(all_series.join(dumps.select("path"), on="path", how="semi")), from_seq
            narrower += dumps.height < all_dumps.height
            usable = series.join(dumps.filter(pl.col("status") == "ok").select("path"), on="path", how="semi")
            prior = history.prior_trends(con, order, from_seq)
            every = history.observations(con, every_ok, order=order, from_seq=from_seq, keep_before=keep_before)
            last = history.observations(
                con, usable, order=order, from_seq=from_seq, keep_before=keep_before, prior=prior,
                elsewhere=lambda names: elsewhere.append(names.len()) or history.stored_usable(con, names, order, from_seq))
            text = [pl.col(c).cast(pl.String) for c in every.columns if c != "value"]
            assert last.with_columns(text).sort(pl.all()).equals(every.with_columns(text).sort(pl.all())), from_seq
            checked += every.height
    assert checked > 300 and narrower >= 1 and sum(elsewhere) >= 1


def test_a_nights_events_come_from_its_runs_and_the_runs_before_them(four_nights, tmp_path):
    """``series_events`` of a night reads only the runs that decide its events; for every
    night of the sample (and a fifth run in which a job is missing, a series vanished, one
    came back and one is new), the same rows as computing every run's events."""
    from transforms.trends import metric_trends as trends
    from transforms.trends import rollups

    _, warehouse = four_nights
    with wh.connect_readonly(warehouse) as con:
        dumps = aggregate_mod.frame_of(con, "SELECT path, run_id, job, kind, stage, program, status, error, dump_id, "
                                            "parser_version, ingested_at FROM dumps")
        runs = aggregate_mod.frame_of(con, "SELECT run_id, started_at, \"commit\", extra::VARCHAR AS extra FROM runs")
        series = con.sql("SELECT * FROM dump_series").pl()
    last = runs.get_column("run_id").max()
    # A fifth run: the last one without its first job, without one series, and with a series of run one.
    first_job = dumps.get_column("job").min()
    gone = series.filter((pl.col("run_id") == last) & (pl.col("job") != first_job)).get_column("series").min()
    back = series.filter(pl.col("run_id") == runs.get_column("run_id").min()).join(
        series.filter(pl.col("run_id") == last), on="series", how="anti").head(1)
    fifth = series.filter((pl.col("run_id") == last) & (pl.col("job") != first_job) & (pl.col("series") != gone))
    fifth = pl.concat([fifth, back.filter(pl.col("job") != first_job)]).with_columns(
        pl.lit("2026-11-30").alias("run_id"), ("2026-11-30/" + pl.col("path")).alias("path"))
    fresh = fifth.head(1).with_columns(pl.col("series") + "-renamed")  # and a series never seen: new
    fifth = pl.concat([fifth.slice(1), fresh])
    dumps = pl.concat([dumps, dumps.join(fifth.select(pl.col("path").str.slice(11).alias("path")), on="path", how="semi")
                       .with_columns(pl.lit("2026-11-30").alias("run_id"), ("2026-11-30/" + pl.col("path")).alias("path"))])
    series = pl.concat([series, fifth])
    runs = pl.concat([runs, runs.tail(1).with_columns(pl.lit("2026-11-30").alias("run_id"),
                                                       pl.col("started_at") + pl.duration(days=10))])
    order = trends.run_order(runs)
    every = rollups.series_events(dumps, series, order)
    assert set(every.get_column("event").cast(pl.String)) >= {"first_run", "new_series", "vanished", "job_missing"}
    for from_seq in range(1, order.height):
        night = order.filter(pl.col("run_seq") >= from_seq).select("run_id")
        assert rollups.series_events(dumps, series, order, from_seq).equals(every.join(night, on="run_id", how="semi")), from_seq


@pytest.fixture(scope="module")
def narrow_nights(tmp_path_factory) -> tuple[Path, Path, Path]:
    """The sample nights aggregated with an old settings file (baseline_runs, which changes
    nothing now): a night's window (its run and the one before) leaves the first runs out."""
    where = tmp_path_factory.mktemp("narrow")
    bucket, warehouse, settings = where / "bucket", where / "wh.duckdb", where / "narrow.toml"
    settings.write_text("baseline_runs = 1\n")
    for night in NIGHTS:
        _night(bucket, warehouse, night, settings=settings)
    return bucket, warehouse, settings


def test_a_night_that_reads_only_its_window_writes_what_a_full_re_aggregation_writes(narrow_nights, tmp_path, monkeypatch):
    """A fifth night with one job changed (one of its series vanished) and another job gone,
    on a warehouse whose window is narrower than its history: the night reads the dumps of
    its window only, walks the changed job over its whole history, and every derived table
    (and the incidents, the vanished series' among them) is what a full re-aggregation
    writes."""
    from flows.nightly import night_in_process

    bucket, warehouse, settings = narrow_nights
    work = tmp_path / "wh.duckdb"
    shutil.copyfile(warehouse, work)
    copy, job = _fifth_night(bucket, tmp_path, drop_job=True)
    read_runs = []
    frames = history.night_frames
    monkeypatch.setattr(history, "night_frames",
                        lambda *a, **k: (lambda f: read_runs.append(f[0].get_column("run_id").n_unique()) or f)(frames(*a, **k)))
    night_in_process(bucket=str(copy), warehouse=work, workers=1, settings_path=settings)
    assert read_runs == [2]  # of 5: the night and the run before it
    with wh.connect_readonly(work) as con:
        events = con.sql("SELECT event::VARCHAR AS event FROM series_events WHERE run_id = '2026-11-21'").pl().get_column("event")
        vanished = con.sql("SELECT count(*) FROM incident_steps WHERE opened_run = '2026-11-21' AND job = ? "
                           "AND metric = 'dump.vanished'", params=[job]).fetchall()[0][0]
    assert {"job_missing", "vanished"} <= set(events) and vanished == 1
    night = _derived(work)
    with wh.Warehouse(work) as con:
        con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")
        aggregate_mod.aggregate(con, load_settings(settings))
    assert read_runs[-1] == 5
    full = _derived(work)
    assert night["metric_trends"].height > 100 and night["incidents"].height >= 5
    for table, frame in full.items():
        assert night[table].equals(frame), table


DERIVED = ("dump_series", "metric_trends", "regressions", "series_events", "run_rollups", "job_totals", "diffs",
           "incidents", "incident_steps")


def _every_derived(warehouse: Path) -> dict[str, pl.DataFrame]:
    """Every row of every derived table and of the incidents, sorted."""
    with wh.connect_readonly(warehouse) as con:
        return {t: con.sql(f"SELECT * FROM {t}").pl().sort(pl.all()) for t in DERIVED}


def test_a_re_aggregation_in_passes_of_one_run_writes_what_the_nights_wrote(four_nights, tmp_path, monkeypatch):
    """Rewriting every run (a new aggregation version, other settings, an accept) goes a
    window of runs at a time, each pass as the night that ended there: in passes of one
    run, the sample's derived tables and incidents are the ones its four nights wrote."""
    _, warehouse = four_nights
    work = tmp_path / "wh.duckdb"
    shutil.copyfile(warehouse, work)
    nights = _every_derived(work)
    passes = []
    frames = history.night_frames
    monkeypatch.setattr(history, "night_frames", lambda con, runs, order, *a, **k: passes.append(order.height)
                        or frames(con, runs, order, *a, **k))
    monkeypatch.setattr(aggregate_mod, "runs_per_pass", lambda *a: 1)
    with wh.Warehouse(work) as con:
        con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")  # every run again
        done = aggregate_mod.aggregate(con, load_settings(None))
    assert passes == [1, 2, 3, 4] and done.from_run == NIGHTS[0]
    again = _every_derived(work)
    assert nights["incidents"].height >= 5 and nights["diffs"].height > 10
    for t, frame in nights.items():
        assert again[t].equals(frame), t


@pytest.mark.parametrize(("run", "closed"), [
    (NIGHTS[2], ["I-01dc4499", "I-48d7e96d", "I-f515e5b1"]),
    # The last run: the incidents of other programs it does not touch stay as stored.
    (NIGHTS[3], ["I-01dc4499", "I-48d7e96d", "I-a4cd47e9", "I-f515e5b1"])])
def test_an_accept_rewrites_from_its_run_what_a_full_re_aggregation_writes(sample_warehouse, tmp_path, monkeypatch,
                                                                           run, closed):
    """An accept moves levels and incidents from its run on: it rewrites the runs from
    there, walks every job, and the derived tables and incidents are what a full
    re-aggregation with the same accept log writes."""
    from flows.commands.accept import accept

    work = tmp_path / "wh.duckdb"
    shutil.copyfile(sample_warehouse, work)
    passes = []
    real = aggregate_mod._aggregate_runs
    monkeypatch.setattr(aggregate_mod, "_aggregate_runs", lambda con, s, b, r, runs, acc, order, from_seq, *a, **k:
                        passes.append(order.get_column("run_id")[from_seq]) or real(con, s, b, r, runs, acc, order, from_seq, *a, **k))
    with wh.Warehouse(work) as con:
        done = accept(con, load_settings(None), "jax-pmap/*", run, note="intended")
    assert passes == [run] and done.closed == closed
    after = _every_derived(work)
    with wh.Warehouse(work) as con:
        con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")  # every run again, same accept log
        aggregate_mod.aggregate(con, load_settings(None))
    assert passes[-1] == NIGHTS[0]
    full = _every_derived(work)
    assert after["incident_steps"].filter(pl.col("series").str.starts_with("jax-pmap/") & (pl.col("closed_run") == run)
                                          & (pl.col("closed_how") == "accepted")).height
    assert after["incidents"].height == 24
    for t, frame in full.items():
        assert after[t].equals(frame), t


def test_a_re_aggregation_that_fails_after_a_committed_pass_publishes_nothing(four_nights, tmp_path, monkeypatch):
    """Passes commit on the standby, not on the published file: a pass that fails after
    another committed leaves readers the warehouse as it was, and the next writer, which
    copies the published file, rewrites every run as if the failed one never ran."""
    _, warehouse = four_nights
    work = tmp_path / "wh.duckdb"
    shutil.copyfile(warehouse, work)
    before = _every_derived(work)
    real, passes = aggregate_mod._aggregate_runs, []

    def second_fails(*a, **k):
        passes.append(1)
        if len(passes) == 2:
            raise RuntimeError("disk full")
        return real(*a, **k)

    monkeypatch.setattr(aggregate_mod, "runs_per_pass", lambda *a: 1)
    monkeypatch.setattr(aggregate_mod, "_aggregate_runs", second_fails)
    with pytest.raises(RuntimeError, match="disk full"):
        with wh.Warehouse(work) as con:
            con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")
            aggregate_mod.aggregate(con, load_settings(None))
    assert len(passes) == 2 and _same(_every_derived(work), before)
    with wh.connect_readonly(work) as con:
        assert con.execute("SELECT count(*) FROM schema_info WHERE key = 'aggregated_with'").fetchall()[0][0] == 1
    monkeypatch.setattr(aggregate_mod, "_aggregate_runs", real)
    with wh.Warehouse(work) as con:
        con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")
        aggregate_mod.aggregate(con, load_settings(None))
    assert _same(_every_derived(work), before)


def _same(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> bool:
    return a.keys() == b.keys() and all(a[t].equals(b[t]) for t in a)


def test_one_large_hlo_content_is_read_a_chunk_of_rows_at_a_time(sample_warehouse, tmp_path, monkeypatch):
    """A content larger than a batch (a 2 GB module) is never one frame: its instructions
    are read ``max_rows`` at a time, and its items are exactly those stored."""
    import pyarrow as pa

    from flows.verdict import items
    from transforms.trends import diffs as diff_mod

    with duckdb.connect(str(sample_warehouse), read_only=True) as con:  # the export writes Parquet: a full session
        todo = con.sql("""SELECT DISTINCT s.items_key, d.kind, d.stage, d.dump_id FROM dump_series s JOIN dumps d USING (path)
                          WHERE s.items_key IS NOT NULL AND d.kind = 'xla_hlo'
                            AND d.run_id = (SELECT max(run_id) FROM runs)""").pl().unique("items_key")
        stored = con.sql("SELECT * FROM content_items").pl().join(todo.select("items_key"), on="items_key", how="semi")
        dirs = items.export_batches(con, todo, tmp_path / "work", max_rows=50)
    sizes = {d: pl.scan_parquet(d / "t_hlo_instructions.parquet").select(pl.len()).collect().item() for d in dirs}
    assert max(sizes.values()) > 4 * 50  # contents several batches large
    frames: list[int] = []  # rows of every instruction frame made from a batch's files
    read_parquet, from_arrow = pl.read_parquet, pl.from_arrow

    def reading(path, *args, **kwargs):
        frame = read_parquet(path, *args, **kwargs)
        frames.extend([frame.height] if Path(path).name == "t_hlo_instructions.parquet" else [])
        return frame

    def converting(data, *args, **kwargs):
        frame = from_arrow(data, *args, **kwargs)
        frames.extend([frame.height] if isinstance(data, pa.RecordBatch) else [])
        return frame

    monkeypatch.setattr(pl, "read_parquet", reading)
    monkeypatch.setattr(pl, "from_arrow", converting)
    order = ["items_key", "category", "key"]
    run = items.reading(items.DumpSource(str(Path(__file__).parents[1] / "data" / "sample_bucket")))  # as the nightly
    got = items.computed(dirs, run(dirs)).sort(order)
    monkeypatch.undo()
    assert frames and max(frames) <= 50
    assert got.equals(stored.select(diff_mod.CONTENT_ITEM_SCHEMA.names()).sort(order))
    assert got.filter(pl.col("category") == "fusion").height > 20
