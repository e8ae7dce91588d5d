"""The records store heals: a listed Parquet file deleted, cut, emptied or overwritten
between nights (or the whole ``<warehouse>.records/`` gone) is found by the next night,
which parses its content again from the bucket and ends as if nothing had happened;
``sql`` names the file; ``dumpscope doctor`` reports and repairs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from flows.warehouse import records
from flows.warehouse import schema as ws
from flows.warehouse import store as wh
from transforms.parsers.formats import all_tables

SAMPLE = Path(__file__).parents[1] / "data" / "sample_bucket"
FIRST, SECOND = ("2026-11-19", "jax-pmap"), ("2026-11-20", "jax-pmap")


def _night(bucket: Path, warehouse: Path):
    from flows.nightly import night_in_process

    return night_in_process(bucket=str(bucket), warehouse=warehouse, workers=1)


def _add(bucket: Path, run_job: tuple[str, str]) -> None:
    run, job = run_job
    shutil.copytree(SAMPLE / run / job, bucket / run / job)


def _state(warehouse: Path) -> dict[str, list[str]]:
    """Every derived table, the records views, metrics and what is compacted, row by row
    (order-free); not the dumps' ingested_at nor where the store is."""
    tables = list(ws.derived_tables()) + list(all_tables()) + ["metrics", "compacted_contents", "records_files"]
    with wh.connect_readonly(warehouse) as con:
        return {t: sorted(map(repr, con.execute(f"SELECT * FROM {ws.quote_ident(t)}").fetchall())) for t in tables}


def _listed_files(warehouse: Path) -> list[str]:
    with wh.connect_readonly(warehouse) as con:
        return [n for names in records.listed(con).values() for n in names]


def _hlo_file(warehouse: Path) -> Path:
    name = next(n for n in _listed_files(warehouse) if n.startswith("hlo_instructions/"))
    return records.root_for(warehouse) / name


def _delete(warehouse: Path) -> None:
    _hlo_file(warehouse).unlink()


def _truncate(warehouse: Path) -> None:
    f = _hlo_file(warehouse)
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _zero(warehouse: Path) -> None:
    _hlo_file(warehouse).write_bytes(b"")


def _garbage(warehouse: Path) -> None:
    f = _hlo_file(warehouse)
    f.write_bytes(b"not parquet at all\n" * 50)


def _store_gone(warehouse: Path) -> None:
    shutil.rmtree(records.root_for(warehouse))


DAMAGE = {"deleted": _delete, "truncated": _truncate, "zero bytes": _zero, "garbage": _garbage, "store gone": _store_gone}


@pytest.fixture(scope="module")
def undamaged(tmp_path_factory) -> dict[bool, dict]:
    """The state after night one and a good night two, with the same bucket (False) and with a new run (True)."""
    out = {}
    for changed in (False, True):
        root = tmp_path_factory.mktemp(f"undamaged-{changed}")
        bucket, warehouse = root / "bucket", root / "wh.duckdb"
        _add(bucket, FIRST)
        _night(bucket, warehouse)
        if changed:
            _add(bucket, SECOND)
        _night(bucket, warehouse)
        out[changed] = _state(warehouse)
    return out


@pytest.mark.parametrize("changed", [False, True], ids=["same bucket", "new run"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_store_heals_at_the_next_night_as_if_never_damaged(tmp_path, undamaged, damage, changed):
    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    _add(bucket, FIRST)
    _night(bucket, warehouse)
    DAMAGE[damage](warehouse)
    if changed:
        _add(bucket, SECOND)
    summary = _night(bucket, warehouse)
    assert _state(warehouse) == undamaged[changed]
    assert any("records file" in f and "parsed again" in f for f in summary.failures)
    from flows.publish.site import read_site_data

    repairs = read_site_data(warehouse).store_repairs  # recorded, and parsed again (what the overview says)
    assert repairs.height >= 1 and repairs.get_column("parsed_again").all()
    # every listed file is back and readable; nothing unlisted stays behind the sweep
    with wh.connect_readonly(warehouse) as con:
        assert records.damaged(con) == {}
    assert sorted(p.relative_to(records.root_for(warehouse)).as_posix()
                  for p in records.root_for(warehouse).glob("*/*.parquet")) == sorted(_listed_files(warehouse))


def test_a_damaged_file_whose_dump_left_the_bucket_is_repaired_by_a_night_with_nothing_new_and_the_overview_says_so(tmp_path):
    from flows.publish.site import _environment, read_site_data
    from transforms.site import pages

    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    _add(bucket, FIRST)
    _night(bucket, warehouse)
    damaged = _hlo_file(warehouse)
    name = damaged.relative_to(records.root_for(warehouse)).as_posix()
    _delete(warehouse)
    shutil.rmtree(bucket / FIRST[0])  # its dumps are gone too: nothing new, nothing to parse again
    summary = _night(bucket, warehouse)
    assert summary.new == 0
    assert summary.failures == [f"records file {name} was missing: its content was marked compacted and is parsed "
                                "again when a dump of it is in the bucket"]
    with wh.connect_readonly(warehouse) as con:
        assert records.damaged(con) == {}
        assert con.execute("SELECT file, reason FROM store_repairs").fetchall() == [(name, "missing")]
    page = _environment().get_template("overview.md.j2").render(
        **pages.overview_page(read_site_data(warehouse)), run_link=lambda run_id, here="": f"runs/{run_id}.md")
    [row] = [line for line in page.splitlines() if f"<code>{name}</code>" in line]
    assert "## Records store repaired" in page
    assert row.startswith(f"| <code>{name}</code> | missing | 20") and row.endswith(
        " UTC | no dump of it in the bucket: its instruction rows are gone (figures, items and diffs kept) |")


# ---------------------------------------------------------------- without a night (no Prefect)

from tests.test_records_store import hlo, warehouse_with  # noqa: E402,F401 - the fixture and helper


def _damaged_warehouse(tmp_path: Path, hlo, damage: str) -> Path:
    db = warehouse_with(tmp_path / "wh.duckdb", hlo[0])
    DAMAGE[damage](db)
    return db


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_the_writer_unlists_damaged_files_and_marks_their_content_compacted(tmp_path, hlo, damage):
    db = _damaged_warehouse(tmp_path, hlo, damage)
    writer = wh.Warehouse(db)
    with writer as con:
        assert con.execute("SELECT count(*) FROM hlo_instructions").fetchall() == [(0,)]  # the views read again
    assert writer.healed_contents == [hlo[0].dump_id] and len(writer.healed) >= 1
    with wh.connect_readonly(db) as con:
        assert con.execute("SELECT dump_id FROM compacted_contents").fetchall() == [(hlo[0].dump_id,)]
        assert con.execute("SELECT count(*) FROM records_files").fetchall() == [(0,)]
        assert con.execute("SELECT count(*) FROM dumps").fetchall() == [(1,)]  # the dump row and metrics stay


@pytest.mark.parametrize("damage", ["deleted", "truncated", "store gone"])
def test_sql_on_a_damaged_store_names_the_file_and_the_repair(tmp_path, hlo, damage):
    from typer.testing import CliRunner

    from flows.cli import app

    db = warehouse_with(tmp_path / "wh.duckdb", hlo[0])
    first = min(_listed_files(db)) if damage == "store gone" else _hlo_file(db).relative_to(records.root_for(db)).as_posix()
    DAMAGE[damage](db)
    result = CliRunner().invoke(app, ["sql", "SELECT count(*) FROM hlo_instructions", "--warehouse", str(db)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: records file {records.root_for(db) / first} is ")
    assert f"dumpscope doctor --warehouse {db} --repair --bucket B" in lines[0]


def test_site_on_a_damaged_store_fails_with_the_same_line_and_builds_nothing(tmp_path, hlo):
    from typer.testing import CliRunner

    from flows.cli import app

    db = _damaged_warehouse(tmp_path, hlo, "garbage")
    result = CliRunner().invoke(app, ["site", "--warehouse", str(db), "--out", str(tmp_path / "site")])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: records file ") and "is not a readable Parquet file" in line and "doctor" in line
    assert not (tmp_path / "site").exists()


def test_doctor_reports_the_damage_and_repair_leaves_a_healthy_warehouse(tmp_path, hlo):
    from typer.testing import CliRunner

    from flows.cli import app

    db = _damaged_warehouse(tmp_path, hlo, "truncated")
    leftover = tmp_path / ".items-killed"
    (leftover / "batch").mkdir(parents=True)
    orphan = records.root_for(db) / "hlo_instructions" / f"{'0' * 64}.v1.0.parquet"
    orphan.write_bytes(b"x")
    runner = CliRunner()

    found = runner.invoke(app, ["doctor", "--warehouse", str(db)])
    assert found.exit_code == 1
    problems = [line for line in found.output.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 2
    assert "is cut short" in problems[0] or "not a readable Parquet file" in problems[0]
    assert problems[1] == f"problem: leftover of a stopped night: {leftover}"
    assert "1 records files no listing names" in found.output
    assert leftover.exists() and orphan.exists()  # without --repair nothing changes

    fixed = runner.invoke(app, ["doctor", "--warehouse", str(db), "--repair"])
    assert fixed.exit_code == 0, fixed.output
    done = [line for line in fixed.output.splitlines() if line.startswith("repaired: ")]
    assert any("unlisted, its content marked compacted" in line for line in done)
    assert f"repaired: removed {leftover}" in done
    assert not leftover.exists() and not orphan.exists()
    assert not [line for line in fixed.output.splitlines() if line.startswith("problem: ")]
    assert runner.invoke(app, ["doctor", "--warehouse", str(db)]).exit_code == 0


def test_doctor_repair_with_the_bucket_parses_the_damaged_content_again(prefect, tmp_path, undamaged):
    from typer.testing import CliRunner

    from flows.cli import app

    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    _add(bucket, FIRST)
    _night(bucket, warehouse)
    _night(bucket, warehouse)
    _truncate(warehouse)
    fixed = CliRunner().invoke(app, ["doctor", "--warehouse", str(warehouse), "--repair", "--bucket", str(bucket)])
    assert fixed.exit_code == 0, fixed.output
    assert f"repaired: ran a night on {bucket}" in fixed.output
    assert _state(warehouse) == undamaged[False]


def test_a_footer_is_read_once_per_file_identity_and_a_file_damaged_since_is_read_again(tmp_path, hlo, monkeypatch):
    """A night checks the store at discovery and again when the writer enters, and the next night
    again: a check reads no footer of a file already read (in this process, or by an earlier one:
    the store's footers file), unless the file changed since. A footers file that is not one
    (garbage, a symlink) is ignored: every footer is read."""
    import pyarrow.parquet as pq

    from flows.warehouse import footers

    db = warehouse_with(tmp_path / "wh.duckdb", hlo[0])
    store = records.root_for(db)
    read = []
    real = pq.read_metadata
    monkeypatch.setattr(records.pq, "read_metadata", lambda path, *a, **k: read.append(Path(path).name) or real(path, *a, **k))
    monkeypatch.setattr(footers, "_in_process", {})  # a new process
    (store / footers.FILE).unlink(missing_ok=True)
    listed = len(_listed_files(db))
    with wh.connect_readonly(db) as con:
        assert records.damaged(con) == {} and len(read) == listed > 0
        read.clear()
        assert records.damaged(con) == {} and read == []
    monkeypatch.setattr(footers, "_in_process", {})  # the next night's process: the saved footers
    assert (store / footers.FILE).is_file()
    with wh.connect_readonly(db) as con:
        assert records.damaged(con) == {} and read == []
        hlo_file = _hlo_file(db)
        hlo_file.write_bytes(b"x" * hlo_file.stat().st_size)  # written over in place, same size: another ctime
        found = records.damaged(con)
        assert list(found) == [f"hlo_instructions/{hlo_file.name}"], found
        assert found[f"hlo_instructions/{hlo_file.name}"].startswith("not a readable Parquet file (")
        assert read == [hlo_file.name]
    for bad in (b"\x00garbage", b'[["/etc/passwd", 1, 2, 3, 4, 5, 6, "k"], 7]', None):
        monkeypatch.setattr(footers, "_in_process", {})
        (store / footers.FILE).unlink()
        if bad is None:
            (tmp_path / "elsewhere.json").write_text("[]")
            (store / footers.FILE).symlink_to(tmp_path / "elsewhere.json")
        else:
            (store / footers.FILE).write_bytes(bad)
        read.clear()
        with wh.connect_readonly(db) as con:
            assert list(records.damaged(con)) == [f"hlo_instructions/{hlo_file.name}"]
        assert len(read) == listed, bad

def test_the_writers_sweep_removes_a_footers_file_a_killed_process_left_half_written(tmp_path, hlo):
    """``Footers.save`` writes ``.footers.json.<pid>.tmp`` and renames it: a process killed in
    between leaves it, and the writer's sweep removes it; a live process's is left alone."""
    from flows.warehouse import footers

    db = warehouse_with(tmp_path / "wh.duckdb", hlo[0])
    store = records.root_for(db)
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    gone = next(pid for pid in range(pid_max - 1, 1, -1) if not Path(f"/proc/{pid}").exists())  # no such process
    dead, alive = store / f"{footers.FILE}.{gone}.tmp", store / f"{footers.FILE}.{os.getpid()}.tmp"
    dead.write_text("[")
    alive.write_text("[")
    assert records.sweep(store, set(_listed_files(db))) == 1
    assert not dead.exists() and alive.exists()
    assert [p.name for p in store.iterdir() if p.name.startswith(footers.FILE)] == [alive.name]


def _copied(sample_warehouse: Path, where: Path, *, with_store: bool) -> Path:
    """A copy of the sample warehouse file (which names the sample's store), with a copy of the store beside it."""
    where.mkdir()
    db = where / "warehouse.duckdb"
    shutil.copyfile(sample_warehouse, db)
    if with_store:
        shutil.copytree(records.root_for(sample_warehouse), records.root_for(db))
    return db


def _doctor(*args: str):
    from typer.testing import CliRunner

    from flows.cli import app

    return CliRunner().invoke(app, ["doctor", *args])


def _problems(out) -> list[str]:
    return [line for line in out.output.splitlines() if line.startswith("problem: ")]


def test_doctor_checks_the_store_beside_the_warehouse_it_is_given(sample_warehouse, tmp_path):
    """A copied or restored file names its original's store; the original is healthy, its own is not."""
    bare = _copied(sample_warehouse, tmp_path / "bare", with_store=False)
    out = _doctor("--warehouse", str(bare))
    assert out.exit_code == 1
    assert _problems(out) == [f"problem: the records store {records.root_for(bare)} is missing "
                              f"({len(_listed_files(sample_warehouse))} files listed): its next writer adopts the files "
                              "of the store the file names, where they still are"]
    restored = _copied(sample_warehouse, tmp_path / "restored", with_store=True)
    gone = records.root_for(restored) / _listed_files(sample_warehouse)[0]
    gone.unlink()
    out = _doctor("--warehouse", str(restored))
    assert out.exit_code == 1 and _problems(out) == [f"problem: records file {gone} is missing"]
    assert f"the file names the records store {records.root_for(sample_warehouse)}" in out.output
    assert _doctor("--warehouse", str(sample_warehouse)).exit_code == 0  # the original is whole


def test_a_records_file_put_in_another_contents_place_is_damage(sample_warehouse, tmp_path):
    import pyarrow.parquet as pq

    db = _copied(sample_warehouse, tmp_path / "w", with_store=True)
    store = records.root_for(db)
    by_rows: dict[int, list[str]] = {}
    for name in sorted(n for n in _listed_files(sample_warehouse) if n.startswith("hlo_instructions/")):
        by_rows.setdefault(pq.read_metadata(store / name).num_rows, []).append(name)
    victim, other = next(names for names in by_rows.values() if len(names) > 1)[:2]
    shutil.copyfile(store / other, store / victim)  # the same table and row count, another content's rows
    out = _doctor("--warehouse", str(db))
    assert out.exit_code == 1
    assert _problems(out) == [f"problem: records file {store / victim} is another content's file (its rows are of "
                              f"{other.split('/')[1][:12]}, the listing's of {victim.split('/')[1][:12]})"]
    fixed = _doctor("--warehouse", str(db), "--repair")
    assert fixed.exit_code == 0, fixed.output
    assert _doctor("--warehouse", str(db)).exit_code == 0


def test_a_file_where_the_records_store_goes_is_one_line_and_never_removed(sample_warehouse, tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    db = _copied(sample_warehouse, tmp_path / "w", with_store=False)
    records.root_for(db).write_text("someone's notes\n")
    out = _doctor("--warehouse", str(db))
    assert out.exit_code == 1 and _problems(out)[0].startswith(f"problem: {records.root_for(db)} is not a directory")
    out = _doctor("--warehouse", str(db), "--repair")
    assert out.exit_code == 1 and out.output.count("\n") == 1
    assert out.output.startswith(f"error: cannot repair: {records.root_for(db)} is not a directory")
    out = CliRunner().invoke(app, ["run", "--bucket", str(SAMPLE), "--warehouse", str(db)])
    assert out.exit_code == 2 and out.output.count("\n") == 1 and "is not a directory" in out.output
    assert records.root_for(db).read_text() == "someone's notes\n"
