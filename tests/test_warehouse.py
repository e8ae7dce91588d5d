"""The warehouse: loads, idempotence, dedup by content, comments, migrations,
crash safety, the writer lock, storage compatibility and `dumpscope sql`."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from flows.warehouse.loading import StagedDump, load_dumps, needs_parse, table_counts, upsert_runs
from flows.warehouse.migrations import migrate, schema_version
from flows.warehouse.store import MAX_STORAGE_VERSION_1_5, Warehouse, WarehouseBusy, connect_readonly, storage_version_number
from flows.warehouse import schema as ws
from transforms.parsers.formats import all_tables
from transforms.parse import parse_dump

ROOT = Path(__file__).resolve().parent.parent
SEEDS = sorted((ROOT / "tests/fixtures/seeds").glob("*.txt"))


def stage(raw: bytes, name: str, path: str, run_id: str = "r1", job: str = "job") -> StagedDump:
    import io

    dump_id = hashlib.sha256(raw).hexdigest()
    parsed = parse_dump(io.BytesIO(raw), name, dump_id=dump_id)
    return StagedDump.from_parsed(parsed, path=path, run_id=run_id, job=job, size_bytes=len(raw), dump_id=dump_id)


@pytest.fixture(scope="module")
def batch() -> list[StagedDump]:
    out = [stage(s.read_bytes(), s.name, f"r1/job/{s.name}") for s in SEEDS]
    gz = gzip.compress(SEEDS[1].read_bytes(), mtime=0)
    out.append(stage(gz, SEEDS[1].name + ".gz", f"r1/job/gz/{SEEDS[1].name}.gz"))
    return out


def expected_counts(batch: list[StagedDump]) -> dict[str, int]:
    want = {t: 0 for t in all_tables()}
    for d in batch:
        for t, frames in (d.tables or {}).items():
            want[t] += sum(f.height for f in frames)
    return want


def records(counts: dict[str, int]) -> dict[str, int]:
    return {t: counts[t] for t in all_tables()}


def load(path: Path, batch: list[StagedDump]) -> dict[str, int]:
    with Warehouse(path) as con:
        upsert_runs(con, [{"run_id": "r1", "started_at": None, "commit": "abc", "tags": ["cpu"], "extra": {"x": 1}}])
        load_dumps(con, batch)
    with connect_readonly(path) as con:
        return table_counts(con)


def test_load_counts_match_frames_and_reload_is_idempotent(tmp_path, batch):
    db = tmp_path / "w.duckdb"
    first = load(db, batch)
    assert records(first) == expected_counts(batch)
    assert first["dumps"] == len(batch) and first["runs"] == 1
    assert first["metrics"] == sum(len(d.metrics or {}) for d in batch)
    assert load(db, batch) == first
    with connect_readonly(db) as con:
        assert con.execute("SELECT count(*) FROM dumps WHERE status IS NULL OR kind IS NULL").fetchall()[0][0] == 0
        assert con.execute("SELECT count(DISTINCT dump_id) FROM hlo_instructions").fetchall()[0][0] >= 2


def test_same_content_under_a_second_path_is_loaded_once(tmp_path, batch):
    db = tmp_path / "w.duckdb"
    first = load(db, batch[:2])
    seed = SEEDS[1]
    with Warehouse(db) as con:
        dump_id = hashlib.sha256(seed.read_bytes()).hexdigest()
        assert not needs_parse(con, dump_id, "xla_hlo", batch[1].parser_version)
        assert needs_parse(con, dump_id, "xla_hlo", batch[1].parser_version + 1)
        copy = StagedDump(path=f"r2/job/{seed.name}", run_id="r2", job="job", size_bytes=seed.stat().st_size, dump_id=dump_id)
        load_dumps(con, [copy])
        load_dumps(con, [copy])  # idempotent too
    with connect_readonly(db) as con:
        after = table_counts(con)
        assert records(after) == records(first)
        assert after["dumps"] == first["dumps"] + 1
        per_path = dict(con.execute("SELECT path, count(*) FROM metrics WHERE dump_id = ? GROUP BY path", [dump_id]).fetchall())
        assert per_path == {f"r1/job/{seed.name}": len(batch[1].metrics), f"r2/job/{seed.name}": len(batch[1].metrics)}
        row = con.execute("SELECT kind, status, parser_version, run_id FROM dumps WHERE path = ?", [copy.path]).fetchall()[0]
        assert row == ("xla_hlo", batch[1].status, batch[1].parser_version, "r2")


def test_changed_content_at_a_path_drops_the_old_records(tmp_path, batch):
    db = tmp_path / "w.duckdb"
    load(db, batch[:2])
    replaced = stage(SEEDS[4].read_bytes(), SEEDS[4].name, batch[1].path)
    with Warehouse(db) as con:
        load_dumps(con, [replaced])
    with connect_readonly(db) as con:
        ids = {r[0] for r in con.execute("SELECT DISTINCT dump_id FROM hlo_instructions").fetchall()}
    assert batch[1].dump_id not in ids and replaced.dump_id in ids


def test_every_table_view_and_column_is_commented(tmp_path, batch):
    db = tmp_path / "w.duckdb"
    load(db, batch[:1])
    with connect_readonly(db) as con:
        missing = con.execute(
            "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = 'w' AND schema_name = 'main' AND comment IS NULL"
        ).fetchall()
        assert missing == []
        tables = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'w' AND comment IS NULL").fetchall()
        assert tables == []
        views = dict(con.execute("SELECT view_name, comment FROM duckdb_views() WHERE database_name = 'w' AND NOT internal").fetchall())
        # The records tables are views over their Parquet files (flows.warehouse.records).
        assert set(views) == {"latest_metrics", "metric_series", "dump_items", "content_items"} | set(ws.VERDICT_VIEWS) | set(all_tables())
        assert all(views.values())
        assert set(ws.CORE_TABLES) <= {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'w'").fetchall()}


def test_views_and_comments_are_written_when_they_change_not_by_every_writer(tmp_path, monkeypatch):
    """Every writer checks the schema; the hundreds of COMMENT and view statements are
    written (and journaled, and replayed onto the standby) only when their text changed."""
    db = tmp_path / "w.duckdb"

    def documents_written() -> list[str]:
        with Warehouse(db) as rec:
            sqls = [step["sql"] for group in rec.steps for step in group.get("tx", [group])]
        return [sql for sql in sqls if sql.startswith(("COMMENT", "CREATE OR REPLACE VIEW"))]

    assert len(documents_written()) > 100  # a new warehouse
    assert documents_written() == []  # nothing changed since
    docs = ws.comments_sql

    def reworded(tables, table_docs):
        return [sql.replace("Metric name", "The name of the metric") for sql in docs(tables, table_docs)]

    monkeypatch.setattr(ws, "comments_sql", reworded)
    assert len(documents_written()) > 100
    with connect_readonly(db) as con:
        assert con.execute("SELECT comment FROM duckdb_columns() WHERE table_name = 'metrics' AND column_name = 'metric'"
                           ).fetchall()[0][0].startswith("The name of the metric")
    assert documents_written() == []


def test_views_answer(tmp_path, batch):
    db = tmp_path / "w.duckdb"
    load(db, batch)
    with connect_readonly(db) as con:
        n_latest = con.execute("SELECT count(*) FROM latest_metrics").fetchall()[0][0]
        keys = con.execute("SELECT count(*) FROM (SELECT DISTINCT job, kind, stage, program, metric FROM metrics)").fetchall()[0][0]
        assert n_latest == keys
        assert con.execute("SELECT count(*) FROM metric_series").fetchall()[0][0] == table_counts(con)["metrics"]


def test_migration_from_an_older_warehouse(tmp_path):
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))  # an "old release": no schema_info, a records table lacking a column
    con.execute("CREATE TABLE dumps (path VARCHAR PRIMARY KEY, run_id VARCHAR)")
    con.execute("CREATE TABLE hlo_modules (dump_id VARCHAR, parser_version SMALLINT)")
    con.execute("INSERT INTO dumps VALUES ('r/j/a.txt', 'r')")
    con.close()
    before = db.read_bytes()
    # Not a warehouse any release wrote (dumps lacks its columns): refused, file untouched.
    with pytest.raises(duckdb.Error):
        with Warehouse(db) as con:
            load_dumps(con, [])
    assert db.read_bytes() == before
    # A schema-9 file: its records rows in tables inside it, one table lacking a column.
    db = tmp_path / "v9.duckdb"
    with Warehouse(db):
        pass
    a, b = "a" * 64, "b" * 64
    con = duckdb.connect(str(db))
    con.execute("DROP VIEW hlo_modules")
    con.execute("DROP TABLE records_files")
    con.execute("CREATE TABLE hlo_modules (dump_id VARCHAR, parser_version SMALLINT, module VARCHAR, instructions INTEGER)")
    con.execute("INSERT INTO hlo_modules VALUES (?, 3, 'm', 7), (?, 3, 'n', 9), (?, 3, 'o', 1)", [a, b, b])
    con.execute(ws.set_version_sql(9))
    con.close()
    with Warehouse(db) as con:  # moves the rows out, a file per content
        assert schema_version(con) == ws.SCHEMA_VERSION
    with connect_readonly(db) as con:
        assert "hlo_modules" not in {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert con.execute("SELECT dump_id, module, instructions, fusions FROM hlo_modules ORDER BY module").fetchall() == [
            (a, "m", 7, None), (b, "n", 9, None), (b, "o", 1, None)]
        assert con.execute("SELECT dump_id, table_name, file, rows FROM records_files ORDER BY dump_id").fetchall() == [
            (a, "hlo_modules", f"hlo_modules/{a}.v3.0.parquet", 1), (b, "hlo_modules", f"hlo_modules/{b}.v3.0.parquet", 2)]
    assert sorted(p.name for p in (tmp_path / "v9.duckdb.records" / "hlo_modules").iterdir()) == [
        f"{a}.v3.0.parquet", f"{b}.v3.0.parquet"]
    # Opened by a release whose MIGRATIONS has one more step.
    step2 = ws.Migration(ws.SCHEMA_VERSION + 1, "test: dumps.note", ("ALTER TABLE dumps ADD COLUMN note VARCHAR", "COMMENT ON COLUMN dumps.note IS 'n'"))
    con = duckdb.connect(str(db))
    assert migrate(con, ws.MIGRATIONS + [step2]) == ws.SCHEMA_VERSION + 1
    cols = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'dumps'").fetchall()}
    assert "note" in cols
    assert con.execute("SELECT count(*) FROM hlo_modules").fetchall() == [(3,)]
    assert schema_version(con) == ws.SCHEMA_VERSION + 1
    con.close()
    with pytest.raises(ws.SchemaTooNew, match="newer than this Dumpscope"):
        with Warehouse(db):
            pass


def test_pending_migrations_is_pure():
    assert [m.version for m in ws.pending_migrations(0)] == list(range(1, ws.SCHEMA_VERSION + 1))
    assert ws.pending_migrations(ws.SCHEMA_VERSION) == []
    with pytest.raises(ws.SchemaTooNew):
        ws.pending_migrations(ws.SCHEMA_VERSION + 1)


def test_an_exception_leaves_the_published_file_untouched(tmp_path, batch):
    db = tmp_path / "w.duckdb"
    load(db, batch[:2])
    before = db.read_bytes()
    with pytest.raises(RuntimeError, match="boom"):
        with Warehouse(db) as con:
            load_dumps(con, batch[2:])
            raise RuntimeError("boom")
    assert db.read_bytes() == before
    assert not (tmp_path / "w.duckdb.next").exists()
    # A stale .next (a writer killed mid-load) is discarded by the next writer.
    (tmp_path / "w.duckdb.next").write_bytes(b"junk")
    assert records(load(db, batch)) == expected_counts(batch)


def test_a_second_writer_gets_busy(tmp_path):
    db = tmp_path / "w.duckdb"
    with Warehouse(db):
        with pytest.raises(WarehouseBusy, match=r"pid \d+"):
            with Warehouse(db, wait=False):
                pass
        # a reader still sees the (empty) published state without blocking
    with Warehouse(db, wait=False):
        pass


def test_storage_is_readable_by_duckdb_1_5(tmp_path, batch):
    db = tmp_path / "w.duckdb"
    load(db, batch[:1])
    load(db, batch)  # reopened and rewritten: still 1.5-compatible
    assert storage_version_number(db) <= MAX_STORAGE_VERSION_1_5
    plain = tmp_path / "plain.duckdb"
    duckdb.connect(str(plain)).close()
    assert storage_version_number(plain) > MAX_STORAGE_VERSION_1_5  # the check can tell them apart


@pytest.mark.integration
def test_sql_command_json(tmp_path, batch):
    db = tmp_path / "w.duckdb"
    load(db, batch)
    q = "SELECT kind, count(*) AS n FROM dumps GROUP BY kind ORDER BY kind"
    out = subprocess.run([sys.executable, "-m", "flows.cli", "sql", q, "--warehouse", str(db), "--format", "json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    kinds: dict[str, int] = {}
    for d in batch:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    assert json.loads(out.stdout) == [{"kind": k, "n": n} for k, n in sorted(kinds.items())]
    bad = subprocess.run([sys.executable, "-m", "flows.cli", "sql", "SELECT nope", "--warehouse", str(db)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "error" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "flows.cli", "sql", "SELECT 1", "--warehouse", str(tmp_path / "none.duckdb")],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "no warehouse" in missing.stderr


def test_reparse_with_a_new_parser_version_updates_every_path_of_the_content(tmp_path, batch):
    db = tmp_path / "w.duckdb"
    load(db, batch[1:2])
    first = batch[1]
    copy = StagedDump(path="r2/job/copy.txt", run_id="r2", job="job", size_bytes=first.size_bytes, dump_id=first.dump_id)
    newer = StagedDump(**{**{f: getattr(first, f) for f in StagedDump.__slots__}, "parser_version": first.parser_version + 1})
    with Warehouse(db) as con:
        load_dumps(con, [copy])
        load_dumps(con, [newer])
    with connect_readonly(db) as con:
        versions = dict(con.execute("SELECT path, parser_version FROM dumps").fetchall())
        assert versions == {first.path: first.parser_version + 1, copy.path: first.parser_version + 1}
        counts = table_counts(con)
        assert records(counts) == expected_counts([first])
        assert counts["metrics"] == 2 * len(first.metrics)


# Each of these worked on the "read-only" sql command before it was locked down.
REFUSED_SQL = {
    "copy over the warehouse": "COPY dumps TO '{db}'",
    "attach another file read-write": "ATTACH '{other}' (READ_WRITE)",
    "export the database": "EXPORT DATABASE '{tmp}/export'",
    "read a system file": "SELECT * FROM read_text('/etc/shadow')",
    "read the environment (AWS secrets)": "SELECT * FROM read_text('/proc/self/environ')",
    "list directories": "SELECT * FROM glob('/root/**')",
    "change a setting": "SET threads = 1",
    "turn external access back on": "SET enable_external_access = true",
    "load an extension": "LOAD httpfs",
    "write a table": "INSERT INTO runs (run_id) VALUES ('x')",
}


@pytest.mark.parametrize("what", sorted(REFUSED_SQL))
def test_sql_refuses_what_a_reader_must_not_do(tmp_path, batch, what):
    from flows.commands.query import QueryError, run_query

    db = tmp_path / "w.duckdb"
    load(db, batch)
    before = db.read_bytes()
    query = REFUSED_SQL[what].format(db=db, other=tmp_path / "other.duckdb", tmp=tmp_path)
    with pytest.raises(QueryError) as refused:
        run_query(db, query)
    assert "\n" not in str(refused.value)
    assert db.read_bytes() == before
    assert not (tmp_path / "other.duckdb").exists() and not (tmp_path / "export").exists()
    assert run_query(db, "SELECT count(*) FROM dumps")[1] == [(len(batch),)]


@pytest.mark.integration
def test_sql_refusal_is_one_line_not_a_traceback(tmp_path, batch):
    db = tmp_path / "w.duckdb"
    load(db, batch)
    out = subprocess.run([sys.executable, "-m", "flows.cli", "sql", "SELECT * FROM read_text('/proc/self/environ')",
                          "--warehouse", str(db)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: refused:") and "Traceback" not in out.stderr


def test_accepts_logged_before_schema_14_keep_no_closed_incidents(tmp_path):
    """Migration 14 adds accepts.closed_incidents (documented); older rows read NULL, not a guess."""
    db = tmp_path / "v13.duckdb"
    with Warehouse(db) as con:
        con.execute("INSERT INTO accepts (series, run_id, note, accepted_by, accepted_at) "
                    "VALUES ('jax/*', 'r1', 'old', 'ana', TIMESTAMP '2026-01-01 00:00:00')")
        con.execute("ALTER TABLE accepts DROP COLUMN closed_incidents")
        con.execute(ws.set_version_sql(13))
    with Warehouse(db) as con:
        assert schema_version(con) == ws.SCHEMA_VERSION
        assert con.execute("SELECT series, closed_incidents FROM accepts").fetchall() == [("jax/*", None)]
        [(comment,)] = con.execute("SELECT comment FROM duckdb_columns() WHERE table_name = 'accepts' "
                                   "AND column_name = 'closed_incidents'").fetchall()
        assert comment.startswith("The incidents this accept closed")


def test_dumps_loaded_before_schema_15_stand_behind_no_damaged_figure(tmp_path):
    """Migration 15 adds dumps.lost_metrics: an older partial dump reads NULL (every figure in doubt, the
    rule it was loaded under) until its content is parsed again."""
    db = tmp_path / "v14.duckdb"
    with Warehouse(db) as con:
        con.execute("INSERT INTO dumps (path, run_id, job, kind, status) VALUES ('r1/j/a.log', 'r1', 'j', 'torch_trace', "
                    "'partial')")
        con.execute("ALTER TABLE dumps DROP COLUMN lost_metrics")
        con.execute(ws.set_version_sql(14))
    with Warehouse(db) as con:
        assert schema_version(con) == ws.SCHEMA_VERSION
        assert con.execute("SELECT path, lost_metrics FROM dumps").fetchall() == [("r1/j/a.log", None)]
        [(comment,)] = con.execute("SELECT comment FROM duckdb_columns() WHERE table_name = 'dumps' "
                                   "AND column_name = 'lost_metrics'").fetchall()
        assert comment.startswith("Of a partial dump whose parser tells what its damage cost")
