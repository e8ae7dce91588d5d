"""Publishing a night writes what the night changed, not the whole warehouse (issue 13).

The writer works on a standby copy brought level by replaying the previous night's
journal; the standby is then swapped in. These tests check that a replayed standby is
exactly the published warehouse, that a publish on a large history writes bytes of the
night's size, and that every odd case (a crash, a reader holding the old file, a journal
that does not match) falls back to a full copy and still ends right.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flows.warehouse import store as wh
from tests.test_concurrency import SAMPLE, snapshot


READER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print("open", flush=True)
sys.stdin.readline()
print(con.execute("SELECT count(*) FROM night").fetchall()[0][0], flush=True)
"""


@contextlib.contextmanager
def _reader(path: Path):
    """A reader in another process holding ``path`` open; yields ``count()``: the rows of
    its ``night`` table, read through that same connection (the reader then exits)."""
    reader = subprocess.Popen([sys.executable, "-c", READER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "open"
        yield lambda: int(reader.communicate("count\n", timeout=60)[0].strip())
    finally:
        reader.kill()


def _wchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


def _noop_publish(warehouse: Path) -> str:
    """A writer that changes nothing: it catches up and publishes the standby as is."""
    w = wh.Warehouse(warehouse)
    with w:
        pass
    return w.caught_up


def test_every_night_is_replayed_exactly_onto_the_standby(tmp_path):
    """Nights, an accept and a re-aggregation: after each, a writer that changes nothing
    catches up by replay alone and publishes the replayed standby — which must be the
    published warehouse row for row (a wrong replay would publish different tables)."""
    from flows.commands.accept import accept
    from transforms.trends.rules import Settings
    from flows.nightly import night_in_process

    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    nights = sorted(p.name for p in SAMPLE.iterdir() if p.is_dir())
    for i, night in enumerate(nights):
        shutil.copytree(SAMPLE / night, bucket / night)
        night_in_process(bucket=str(bucket), warehouse=warehouse, workers=1)  # the writer's work, not Prefect's
        before = snapshot(warehouse)
        assert _noop_publish(warehouse) == "replay", night
        assert snapshot(warehouse) == before, night
    with wh.Warehouse(warehouse) as con:
        series = con.execute("SELECT series FROM metric_trends ORDER BY series LIMIT 1").fetchall()[0][0]
        accept(con, Settings(), series, nights[-1], note="intended")
    before = snapshot(warehouse)
    assert _noop_publish(warehouse) == "replay"
    assert snapshot(warehouse) == before


def _filled(tmp_path: Path, rows: int) -> Path:
    """A warehouse with ``rows`` rows of history in one table (random strings: they do
    not compress), published by the writer."""
    warehouse = tmp_path / "wh.duckdb"
    with wh.Warehouse(warehouse) as con:
        con.execute("CREATE TABLE history AS SELECT range AS i, md5(range::VARCHAR) || md5((range * 7)::VARCHAR) AS s "
                    "FROM range(?)", [rows])
        con.execute("CREATE TABLE night (i BIGINT, s VARCHAR)")
    _noop_publish(warehouse)  # the standby level too
    return warehouse


def test_a_publish_writes_bytes_of_the_night_not_of_the_history(tmp_path):
    small, large = _filled(tmp_path / "a", 1_000), _filled(tmp_path / "b", 2_000_000)
    assert large.stat().st_size > 60 << 20
    written = {}
    for name, warehouse in (("small", small), ("large", large)):
        start = _wchar()
        w = wh.Warehouse(warehouse)
        with w as con:
            con.execute("INSERT INTO night SELECT range, md5(range::VARCHAR) FROM range(10000)")
        assert w.caught_up == "replay"
        written[name] = _wchar() - start
    # The same night on a 60+ MB history and on an empty one: the same bytes, within
    # DuckDB's metadata (a full copy would add the whole file).
    assert written["large"] < written["small"] + (4 << 20), written
    assert written["large"] < large.stat().st_size / 10


def test_a_failed_night_leaves_the_published_file_and_the_next_writer_copies_it(tmp_path):
    warehouse = _filled(tmp_path, 1_000)
    before = snapshot(warehouse)
    with pytest.raises(RuntimeError):
        with wh.Warehouse(warehouse) as con:
            con.execute("INSERT INTO night VALUES (1, 'half a night')")
            raise RuntimeError("killed")
    assert snapshot(warehouse) == before
    assert (tmp_path / "wh.duckdb.standby.dirty").exists()
    w = wh.Warehouse(warehouse)
    with w as con:
        con.execute("INSERT INTO night VALUES (2, 'the next night')")
    assert w.caught_up == "copy"
    assert snapshot(warehouse)["night"] == ["(2, 'the next night')"]
    assert _noop_publish(warehouse) == "replay"


def test_a_writer_that_gives_up_before_writing_leaves_the_next_a_replay_not_a_copy(tmp_path):
    """A writer that only read and then gave up (a refused accept) leaves the standby level with
    the published file: the next writer replays nothing instead of copying the whole file."""
    warehouse = _filled(tmp_path, 1_000)
    with wh.Warehouse(warehouse) as con:
        con.execute("INSERT INTO night VALUES (1, 'one')")
    before = snapshot(warehouse)
    with pytest.raises(RuntimeError):
        with wh.Warehouse(warehouse) as con:
            con.execute("SELECT count(*) FROM night").fetchall()
            raise RuntimeError("refused")
    assert snapshot(warehouse) == before
    assert not (tmp_path / "wh.duckdb.standby.dirty").exists()
    w = wh.Warehouse(warehouse)
    with w as con:
        con.execute("INSERT INTO night VALUES (2, 'two')")
    assert w.caught_up == "replay"
    assert snapshot(warehouse)["night"] == ["(1, 'one')", "(2, 'two')"]
    assert _noop_publish(warehouse) == "replay"


@pytest.mark.integration
def test_a_reader_holding_the_old_generation_makes_the_writer_copy(tmp_path):
    warehouse = _filled(tmp_path, 1_000)
    with wh.Warehouse(warehouse) as con:
        con.execute("INSERT INTO night VALUES (1, 'one')")
    # A reader in another process that opened yesterday's file and still holds it.
    with _reader(tmp_path / "wh.duckdb.standby") as count:
        w = wh.Warehouse(warehouse)
        with w as con:
            con.execute("INSERT INTO night VALUES (2, 'two')")
        assert w.caught_up == "copy"
        assert count() == 1  # its file is intact: the standby as it opened it, level with night one
    assert snapshot(warehouse)["night"] == ["(1, 'one')", "(2, 'two')"]


def test_the_standby_is_level_after_each_publish_so_the_next_night_replays_nothing(tmp_path):
    warehouse = _filled(tmp_path, 1_000)
    w = wh.Warehouse(warehouse)
    with w as con:
        con.execute("INSERT INTO night VALUES (1, 'one')")
    assert w.leveled == "replay"
    standby = tmp_path / "wh.duckdb.standby"
    assert snapshot(standby) == snapshot(warehouse)
    journal = tmp_path / "wh.duckdb.journal"
    assert [p.name for p in journal.iterdir()] == ["journal.json"]  # the night's files went with its replay
    start = _wchar()
    assert _noop_publish(warehouse) == "replay"
    assert _wchar() - start < 2 << 20  # no catching up: DuckDB's checkpoint and the journal only


@pytest.mark.integration
def test_a_reader_of_the_old_generation_at_publish_time_leaves_the_leveling_to_the_next_night(tmp_path):
    warehouse = _filled(tmp_path, 1_000)
    # A reader that opened the published file before the night's swap: the old generation.
    with _reader(warehouse) as count:
        w = wh.Warehouse(warehouse)
        with w as con:
            con.execute("INSERT INTO night VALUES (1, 'one')")
        assert w.leveled == "held by a reader"
        assert count() == 0  # its file is intact: the generation before the night
    # The reader is gone: the next writer replays the night onto the standby, as before.
    assert _night_two(warehouse) == "replay"


def _night_two(warehouse: Path) -> str:
    """The night after night one: it publishes both nights' rows and levels its standby to
    them; returns how it caught up."""
    w = wh.Warehouse(warehouse)
    with w as con:
        con.execute("INSERT INTO night VALUES (2, 'two')")
    assert w.leveled == "replay"
    assert snapshot(warehouse)["night"] == ["(1, 'one')", "(2, 'two')"]
    assert snapshot(warehouse.with_name(warehouse.name + ".standby")) == snapshot(warehouse)
    return w.caught_up


def test_a_hand_replaced_warehouse_is_copied_not_replayed_onto(tmp_path):
    warehouse = _filled(tmp_path, 1_000)
    other = _filled(tmp_path / "other", 10)
    shutil.copyfile(other, warehouse)  # someone restores a backup over it
    w = wh.Warehouse(warehouse)
    with w as con:
        con.execute("INSERT INTO night VALUES (3, 'three')")
    assert w.caught_up == "copy"
    assert len(snapshot(warehouse)["history"]) == 10


def test_a_leveling_that_breaks_leaves_the_night_published_and_the_next_writer_copies(tmp_path, monkeypatch):
    warehouse = _filled(tmp_path, 1_000)

    replay = wh.journal.replay

    def broken(con, directory, body):  # the catch-up (nothing to replay) works; the leveling breaks
        if body["steps"]:
            raise OSError("disk full")
        replay(con, directory, body)

    monkeypatch.setattr(wh.journal, "replay", broken)
    w = wh.Warehouse(warehouse)
    with w as con:
        con.execute("INSERT INTO night VALUES (1, 'one')")
    assert w.leveled == "failed (OSError: disk full)"
    assert snapshot(warehouse)["night"] == ["(1, 'one')"]  # published all the same
    monkeypatch.undo()
    assert _night_two(warehouse) == "copy"
