"""The records store (flows.warehouse.records): records rows as Parquet files beside the
warehouse, one per content and table; each records table a view of exactly the files its
generation lists; files unlisted are unlinked once no generation can read them."""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from flows.warehouse import records
from flows.warehouse.loading import StagedDump, load_dumps
from flows.warehouse.reads import frame_of
from flows.warehouse.store import Warehouse, connect_readonly
from transforms.parse import parse_dump

ROOT = Path(__file__).resolve().parent.parent
SEEDS = sorted((ROOT / "tests/fixtures/seeds").glob("*.txt"))


def staged(raw: bytes, name: str, path: str) -> StagedDump:
    dump_id = hashlib.sha256(raw).hexdigest()
    parsed = parse_dump(io.BytesIO(raw), name, dump_id=dump_id)
    return StagedDump.from_parsed(parsed, path=path, run_id="r1", job="job", size_bytes=len(raw), dump_id=dump_id)


@pytest.fixture(scope="module")
def hlo() -> tuple[StagedDump, StagedDump]:
    """The same path with two contents: a seed HLO module, then one constant changed."""
    seed = next(s for s in SEEDS if s.read_bytes().startswith(b"HloModule"))
    raw = seed.read_bytes()
    changed = raw.replace(b"constant(", b"constant( ", 1)
    assert changed != raw
    return staged(raw, seed.name, "r1/job/module.txt"), staged(changed, seed.name, "r1/job/module.txt")


READER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print("open", flush=True)
sys.stdin.readline()
print(*con.execute("SELECT count(*), min(dump_id) FROM hlo_instructions").fetchall()[0], flush=True)
"""


@contextlib.contextmanager
def reader_process(db: Path):
    """A reader in another process holding ``db`` open; yields ``read()``: its records
    view's (row count, first dump_id), read through that same connection (it then exits)."""
    reader = subprocess.Popen([sys.executable, "-c", READER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "open"
        yield lambda: reader.communicate("go\n", timeout=60)[0].split()
    finally:
        reader.kill()


def warehouse_with(db: Path, dump: StagedDump) -> Path:
    """``db`` (its directory made if need be), a new warehouse holding ``dump``."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with Warehouse(db) as con:
        load_dumps(con, [dump])
    return db


def store_files(db: Path) -> set[str]:
    root = records.root_for(db)
    return {f"{p.parent.name}/{p.name}" for p in root.glob("*/*") if p.is_file()}


def rows_of(d: StagedDump, table: str) -> int:
    return sum(f.height for f in (d.tables or {}).get(table, []))


@pytest.mark.integration
def test_records_are_files_the_views_read_and_unlisted_files_go_once_no_generation_lists_them(tmp_path, hlo):
    first, second = hlo
    db = warehouse_with(tmp_path / "w.duckdb", first)
    listed = store_files(db)
    assert listed and all(name.split("/")[1].startswith(first.dump_id) for name in listed)
    with connect_readonly(db) as con:
        assert con.execute("SELECT count(*), min(dump_id) FROM hlo_instructions").fetchall() == [
            (rows_of(first, "hlo_instructions"), first.dump_id)]
        assert {f for (f,) in con.execute("SELECT file FROM records_files").fetchall()} == listed
    # The path's bytes change while a reader (another process) holds this generation: its files stay for it.
    with reader_process(db) as read:
        writer = Warehouse(db)
        with writer as con:
            load_dumps(con, [second])
        assert writer.leveled == "held by a reader" and writer.swept == 0
        assert listed <= store_files(db)
        assert read() == [str(rows_of(first, "hlo_instructions")), first.dump_id]
    with connect_readonly(db) as con:  # the new generation reads only the new content
        assert con.execute("SELECT count(*), min(dump_id) FROM hlo_instructions").fetchall() == [
            (rows_of(second, "hlo_instructions"), second.dump_id)]
    # The next writer levels both generations, then unlinks what neither lists.
    writer = Warehouse(db)
    with writer:
        pass
    assert writer.leveled == "replay" and writer.swept == len(listed)
    assert all(name.split("/")[1].startswith(second.dump_id) for name in store_files(db))
    with connect_readonly(db) as con:
        assert {f for (f,) in con.execute("SELECT file FROM records_files").fetchall()} == store_files(db)


@pytest.mark.integration
def test_a_reader_holding_a_generation_through_two_nights_still_reads_its_records(tmp_path, hlo):
    first, second = hlo
    db = warehouse_with(tmp_path / "w.duckdb", first)
    first_files = store_files(db)
    with reader_process(db) as read:
        with Warehouse(db) as con:
            load_dumps(con, [second])
        writer = Warehouse(db)  # the reader holds the standby: this night copies the file
        with writer:
            pass
        assert writer.caught_up == "copy" and writer.swept == 0
        assert read() == [str(rows_of(first, "hlo_instructions")), first.dump_id]
    writer = Warehouse(db)
    with writer:
        pass
    assert writer.caught_up == "replay" and writer.swept == len(first_files)
    assert all(name.split("/")[1].startswith(second.dump_id) for name in store_files(db))


def test_loading_the_same_content_again_keeps_one_set_of_files(tmp_path, hlo):
    first, _ = hlo
    db = tmp_path / "w.duckdb"
    for _ in range(2):
        with Warehouse(db) as con:
            load_dumps(con, [first])
    with connect_readonly(db) as con:
        assert con.execute("SELECT count(*) FROM hlo_instructions").fetchall() == [(rows_of(first, "hlo_instructions"),)]
        assert con.execute("SELECT count(*) FROM records_files").fetchall()[0][0] == len(store_files(db))


def test_a_copied_warehouse_brings_its_records_and_one_without_them_marks_them_compacted(tmp_path, hlo):
    first, _ = hlo
    db = warehouse_with(tmp_path / "w.duckdb", first)
    n = rows_of(first, "hlo_instructions")
    copy = tmp_path / "copy" / "w.duckdb"
    copy.parent.mkdir()
    shutil.copyfile(db, copy)
    with connect_readonly(copy) as con:  # a reader of the copy reads the store the file names
        assert con.execute("SELECT count(*) FROM hlo_instructions").fetchall() == [(n,)]
    with Warehouse(copy):  # its first writer makes the store its own
        pass
    assert store_files(copy) == store_files(db)
    shutil.rmtree(records.root_for(db))
    with connect_readonly(copy) as con:
        assert con.execute("SELECT count(*) FROM hlo_instructions").fetchall() == [(n,)]
        assert con.execute("SELECT value FROM schema_info WHERE key = 'records_root'").fetchall() == [
            (str(records.root_for(copy)),)]
    # A copy whose store is gone: its contents count as compacted (parsed again when they come back).
    lost = tmp_path / "lost.duckdb"
    shutil.copyfile(db, lost)
    with Warehouse(lost):
        pass
    with connect_readonly(lost) as con:
        assert con.execute("SELECT count(*) FROM hlo_instructions").fetchall() == [(0,)]
        assert con.execute("SELECT count(*) FROM records_files").fetchall() == [(0,)]
        assert con.execute("SELECT dump_id FROM compacted_contents").fetchall() == [(first.dump_id,)]


def test_a_warehouse_moved_with_its_store_reads_its_records_at_once_after_its_next_writer(tmp_path, hlo):
    first, _ = hlo
    db = warehouse_with(tmp_path / "a" / "w.duckdb", first)
    files = store_files(db)
    moved = tmp_path / "b"
    (tmp_path / "a").rename(moved)
    with Warehouse(moved / "w.duckdb"):  # finds its store beside it: nothing to bring over, nothing lost
        pass
    assert store_files(moved / "w.duckdb") == files
    with connect_readonly(moved / "w.duckdb") as con:
        assert con.execute("SELECT count(*) FROM hlo_instructions").fetchall() == [(rows_of(first, "hlo_instructions"),)]
        assert con.execute("SELECT count(*) FROM compacted_contents").fetchall() == [(0,)]


def test_a_locked_down_reader_reads_the_records_views_and_no_other_file(tmp_path, hlo):
    first, _ = hlo
    db = warehouse_with(tmp_path / "w.duckdb", first)
    (tmp_path / "secret.csv").write_text("a\n1\n")
    other = records.root_for(db) / "hlo_instructions" / ("0" * 64 + ".v1.0.parquet")
    with connect_readonly(db, spill=False) as con:
        assert con.execute("SELECT count(*) FROM hlo_instructions").fetchall() == [(rows_of(first, "hlo_instructions"),)]
        for sql in (f"SELECT * FROM read_csv('{tmp_path / 'secret.csv'}')",
                    f"COPY (SELECT 1) TO '{other}' (FORMAT parquet)",
                    f"SELECT * FROM read_csv('{records.root_for(db)}/hlo_instructions/../../secret.csv')"):
            with pytest.raises(duckdb.Error, match="disabled by configuration|Permission"):
                con.execute(sql)
    assert not other.exists()


def test_store_names_are_made_from_declared_tables_and_content_hashes_only():
    good = "a" * 64
    assert records.store_name("hlo_instructions", good, 7, 0) == f"hlo_instructions/{good}.v7.0.parquet"
    for table, dump_id in (("../etc", good), ("hlo_instructions", "../../x"), ("hlo_instructions", "A" * 64),
                           ("hlo_instructions", good + "/x")):
        with pytest.raises(ValueError):
            records.store_name(table, dump_id, 1, 0)


def test_a_warehouse_path_with_quotes_and_markup_is_a_literal_in_the_views(tmp_path, hlo):
    first, _ = hlo
    db = warehouse_with(tmp_path / "x'; DROP TABLE dumps; -- <img src=x onerror=alert(1)> {%x%}" / "w.duckdb", first)
    for spill in (False, True):
        with connect_readonly(db, spill=spill) as con:
            assert con.execute("SELECT count(*) FROM hlo_instructions").fetchall() == [(rows_of(first, "hlo_instructions"),)]
            assert con.execute("SELECT count(*) FROM dumps").fetchall() == [(1,)]


LEASED_READER = """
import sys
from flows.warehouse.store import connect_readonly
con = connect_readonly(sys.argv[1])
print("open", flush=True)
sys.stdin.readline()
print(*con.execute("SELECT count(*), min(dump_id) FROM hlo_instructions").fetchall()[0], flush=True)
"""


@pytest.mark.integration
def test_a_reader_holding_connect_readonly_across_three_nights_reads_its_records_then_the_files_go(tmp_path, hlo):
    first, second = hlo
    db = warehouse_with(tmp_path / "w.duckdb", first)
    first_files = store_files(db)
    reader = subprocess.Popen([sys.executable, "-c", LEASED_READER, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert reader.stdout.readline().strip() == "open"
        for night in range(3):  # the first unlists the reader's files; nights two and three would sweep them
            with Warehouse(db) as con:
                if night == 0:
                    load_dumps(con, [second])
        assert first_files <= store_files(db)
        out = reader.communicate("go\n", timeout=60)[0].split()
        assert out == [str(rows_of(first, "hlo_instructions")), first.dump_id]
    finally:
        reader.kill()
    writer = Warehouse(db)  # the reader is gone: its lease no longer holds the sweep back
    with writer:
        pass
    assert writer.swept == len(first_files) and not first_files & store_files(db)


def test_a_view_reads_each_group_of_same_columned_files_from_one_footer_and_the_rest_by_name(tmp_path, hlo):
    """A table's files are read in groups of the same columns, each bound from its first file's
    footer (``union_by_name = false``): at a year one group of 1,636 files, where binding by name
    read every footer. Files of another schema (an older parser's, without a later column) are a
    group of their own, whose missing column reads as NULL; every row is read once either way."""
    db = warehouse_with(tmp_path / "wh.duckdb", hlo[0])
    with Warehouse(db) as con:
        before = con.execute("SELECT count(*), count(opcode) FROM hlo_instructions").fetchall()[0]
        view = con.execute("SELECT sql FROM duckdb_views() WHERE schema_name = ? AND view_name = 'hlo_instructions'",
                           [records.STORE_SCHEMA]).fetchall()[0][0]
        assert view.count("read_parquet(") == 1 and "union_by_name = false" in view
        older = frame_of(con, "SELECT * EXCLUDE (opcode) FROM hlo_instructions").with_columns(
            dump_id=pl.lit("b" * 64), parser_version=pl.lit(1))
        assert records.add_rows(con, "hlo_instructions", older) == 1
        view = con.execute("SELECT sql FROM duckdb_views() WHERE schema_name = ? AND view_name = 'hlo_instructions'",
                           [records.STORE_SCHEMA]).fetchall()[0][0]
        assert view.count("read_parquet(") == 2 and view.count("union_by_name = false") == 2
        assert con.execute("SELECT count(*), count(opcode), count(*) FILTER (dump_id = ?) FROM hlo_instructions",
                           ["b" * 64]).fetchall()[0] == (2 * before[0], before[1], before[0])
        # A file whose footer cannot be read (the writer heals such a file before it defines views):
        # read by name, as one group, DuckDB's error names the file.
        broken = records.root_for(db) / "hlo_instructions" / f"{'b' * 64}.v1.0.parquet"
        broken.write_bytes(b"not parquet")
        with pytest.raises(duckdb.Error, match=f"{'b' * 64}.v1.0.parquet' too small to be a Parquet file"):
            records.refresh_views(con, ["hlo_instructions"])
