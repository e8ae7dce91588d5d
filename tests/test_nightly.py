"""The nightly flow end to end on temporary buckets, under one Prefect test harness."""

import gzip
import shutil
from pathlib import Path

import pytest

from flows.warehouse import loading, store as wh

SAMPLE = Path(__file__).parents[1] / "data" / "sample_bucket"


def _run(bucket: Path, warehouse: Path):
    from flows.nightly import nightly

    return nightly(bucket=str(bucket), warehouse=warehouse, workers=2)


def _counts(warehouse: Path) -> dict[str, int]:
    with wh.connect_readonly(warehouse) as con:
        return loading.table_counts(con)


def test_ingest_rerun_add_run_and_a_corrupt_file(prefect, tmp_path):
    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    shutil.copytree(SAMPLE / "2026-11-17", bucket / "2026-11-17")
    shutil.copytree(SAMPLE / "2026-11-18", bucket / "2026-11-18")

    first = _run(bucket, warehouse)
    assert (first.seen, first.new, first.parsed, first.failed, first.unreadable) == (92, 92, 92, 0, 0)
    counts = _counts(warehouse)
    assert counts["dumps"] == 92 and counts["runs"] == 2 and counts["hlo_instructions"] > 0
    with wh.connect_readonly(warehouse) as con:
        assert con.execute("SELECT count(*) FROM dumps WHERE kind IS NULL OR status IS NULL").fetchall() == [(0,)]

    again = _run(bucket, warehouse)  # re-running the night changes nothing
    assert (again.new, again.skipped, again.rows_loaded) == (0, 92, 0)
    assert _counts(warehouse) == counts

    shutil.copytree(SAMPLE / "2026-11-19", bucket / "2026-11-19")
    hlo = next((bucket / "2026-11-19" / "jax-jit").glob("*.cpu_after_optimizations.txt.gz"))
    hlo.write_bytes(gzip.compress(b"HloModule broken\n\nENTRY %main {\n  %p = f32[] parameter(0)\n")[:-4])
    (bucket / "2026-11-19" / "jax-jit" / "junk.txt.gz").write_bytes(b"\x1f\x8b" + b"\x00" * 40)
    third = _run(bucket, warehouse)
    assert third.new == 47 and third.skipped == 92
    with wh.connect_readonly(warehouse) as con:
        status = dict(con.execute("SELECT path, status FROM dumps WHERE run_id = '2026-11-19'").fetchall())
        errors = dict(con.execute("SELECT path, error FROM dumps WHERE status <> 'ok'").fetchall())
    rel = hlo.relative_to(bucket).as_posix()
    assert status[rel] == "partial" and rel in errors[rel]
    assert sum(s == "ok" for s in status.values()) == 45
    assert _counts(warehouse)["runs"] == 3


def _one_night(tmp_path: Path) -> tuple[Path, Path]:
    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    shutil.copytree(SAMPLE / "2026-11-20" / "jax-pmap", bucket / "2026-11-20" / "jax-pmap")
    return bucket, warehouse


def test_a_growing_file_is_deferred_then_taken(prefect, tmp_path, monkeypatch):
    import os

    import flows.nightly
    from flows.nightly import nightly

    # The settle clock is turned by hand: under load a real 1 s window passed before
    # discovery and the growing file was taken at first sight (a CI failure).
    now = 1_800_000_000.0
    monkeypatch.setattr(flows.nightly, "wall_clock", lambda: now)
    bucket, warehouse = _one_night(tmp_path)
    for path in bucket.rglob("*"):
        os.utime(path, (now - 3600, now - 3600))  # the copied dumps were written an hour ago
    growing = bucket / "2026-11-20" / "jax-pmap" / "notes.txt"
    growing.write_text("first line\n")
    os.utime(growing, (now, now))
    kwargs = dict(bucket=str(bucket), warehouse=warehouse, workers=1, settle_seconds=60.0, state_path=tmp_path / "settle.json")
    first = nightly(**kwargs)  # the copied dumps are old enough; the new file is not
    assert (first.new, first.deferred) == (9, 1)
    now += 30
    with growing.open("a") as f:
        f.write("still writing\n")
    os.utime(growing, (now, now))
    second = nightly(**kwargs)  # it changed since: still deferred
    assert (second.new, second.deferred, second.skipped) == (0, 1, 9)
    now += 59
    assert nightly(**kwargs).deferred == 1  # unchanged, but seen unchanged for 59 s only
    now += 1
    third = nightly(**kwargs)
    assert (third.new, third.deferred, third.skipped) == (1, 0, 9)
    with wh.connect_readonly(warehouse) as con:
        assert con.execute("SELECT size_bytes FROM dumps WHERE path LIKE '%notes.txt'").fetchall() == [(25,)]


def test_a_crash_between_parse_and_load_loses_nothing_and_duplicates_nothing(prefect, tmp_path, monkeypatch):
    bucket, warehouse = _one_night(tmp_path)
    clean_bucket, clean_wh = _one_night(tmp_path / "clean")
    _run(clean_bucket, clean_wh)

    calls = []
    real_load = loading.load_dumps

    def crash_after_first_batch(con, batch):
        calls.append(len(batch))
        real_load(con, batch)
        raise KeyboardInterrupt("killed during load")

    monkeypatch.setattr(loading, "load_dumps", crash_after_first_batch)
    with pytest.raises(BaseException):
        _run(bucket, warehouse)
    assert calls and not warehouse.exists()  # nothing published: the next run starts from scratch
    monkeypatch.setattr(loading, "load_dumps", real_load)
    _run(bucket, warehouse)
    assert _counts(warehouse) == _counts(clean_wh)


def test_a_second_writer_is_told_the_warehouse_is_busy(prefect, tmp_path):
    bucket, warehouse = _one_night(tmp_path)
    _run(bucket, warehouse)
    (bucket / "2026-11-20" / "jax-pmap" / "late.txt").write_text("arrived later\n")
    with wh.Warehouse(warehouse):
        with pytest.raises(wh.WarehouseBusy, match="pid"):
            _run(bucket, warehouse)


def test_staging_is_emptied_by_a_good_night_and_kept_by_a_failed_one(prefect, tmp_path, monkeypatch):
    import os

    from flows.ingest import staging

    from flows.ingest import housekeeping

    bucket, warehouse = _one_night(tmp_path)
    staging_dir = warehouse.with_suffix(".staging")
    leftover = staging_dir / ".tmp" / "left-by-a-killed-run"
    leftover.mkdir(parents=True)
    os.utime(leftover, (0, 0))  # long ago: no parse of a live run is that old

    def crash(con, batch):
        raise RuntimeError("the disk filled up during the load")

    real_load = loading.load_dumps
    monkeypatch.setattr(loading, "load_dumps", crash)
    with pytest.raises(BaseException):
        _run(bucket, warehouse)
    kept = housekeeping.staged_contents(staging_dir)
    assert len(kept) == 9 and not leftover.exists()  # parsed work kept for the retry; the leftover swept
    monkeypatch.setattr(loading, "load_dumps", real_load)
    _run(bucket, warehouse)
    assert housekeeping.staged_contents(staging_dir) == set()  # the published warehouse is the record
    assert _counts(warehouse)["dumps"] == 9


@pytest.mark.slow
def test_the_summary_table_tells_its_two_incident_counts_apart():
    """A first ingest opens incidents in every run it loads; "last night" is the latest run's."""
    from flows.nightly import NightSummary

    text = NightSummary(new_incidents=10, incidents={"new": 0, "open": 9, "lost": 1}).markdown()
    assert "| incidents opened in the runs loaded | 10 |" in text
    assert "| latest run: incidents new | 0 |" in text and "| latest run: incidents open | 9 |" in text
    assert "| latest run: incidents lost | 1 |" in text
    assert "new_incidents" not in text
