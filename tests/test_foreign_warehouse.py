"""A warehouse file someone else wrote is data (issue 43): a published snapshot, a copy handed
over, a local path given to ``check``. Views and macros in it run when read, so every reader
opens it with external access off (``flows.warehouse.readonly``), refuses a view where a table
Dumpscope writes should be, and reads only its own records store's files; a snapshot fetched
from a URL is downloaded within bounds (``flows.warehouse.fetch``), each failure one line, exit 2.

The hostile files are the real sample warehouse's snapshot with one object redefined.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.warehouse import fetch
from flows.warehouse import store as wh
from flows.warehouse.readonly import NotAWarehouse
from flows.warehouse.snapshot import write_snapshot

ROOT = Path(__file__).parents[1]
LAST_NIGHT = ROOT / "data" / "sample_bucket" / "2026-11-20"
SECRET = "TOPSECRET-ssh-key-4f1c"
TOKEN = "CI_TOKEN_7d2e9a"


@pytest.fixture
def secret(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("CI_TOKEN", TOKEN)
    path = tmp_path / "id_ed25519"
    path.write_text(SECRET + "\n")
    return path


@pytest.fixture(scope="module")
def snapshot(sample_warehouse, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("snapshot") / "warehouse.duckdb"
    write_snapshot(sample_warehouse, out)
    return out


def hostile(snapshot: Path, where: Path, *statements: str) -> Path:
    """A copy of the sample snapshot with ``statements`` run on it by a full DuckDB session."""
    out = where / "evil.duckdb"
    shutil.copyfile(snapshot, out)
    con = duckdb.connect(str(out))
    for statement in statements:
        con.execute(statement)
    con.close()
    return out


def runs_reading(secret: Path) -> tuple[str, ...]:
    """``runs`` as a view that puts the key file into each run's commit and the environment into its tags."""
    return ("CREATE TABLE runs_kept AS SELECT * FROM runs", "DROP TABLE runs",
            f"""CREATE VIEW runs AS SELECT * REPLACE ((SELECT content FROM read_text('{secret}')) AS "commit")
                FROM runs_kept""")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def assert_refused_quietly(out, exit_code: int) -> None:
    assert out.exit_code == exit_code, out.output
    assert SECRET not in out.output and TOKEN not in out.output
    assert out.output.count("\n") == 1, out.output


def test_a_snapshot_whose_table_is_a_view_over_local_files_is_refused_by_every_reader(snapshot, secret, tmp_path):
    evil = hostile(snapshot, tmp_path, *runs_reading(secret))
    out = invoke("check", str(LAST_NIGHT), "--warehouse", str(evil), "--format", "markdown")
    assert_refused_quietly(out, 1)
    assert "'runs' is a view where Dumpscope writes a table" in out.output
    for command in (["sql", "--warehouse", str(evil), "SELECT * FROM runs"], ["incidents", "--warehouse", str(evil)],
                    ["site", "--warehouse", str(evil), "--out", str(tmp_path / "site")]):
        assert_refused_quietly(invoke(*command), 1)
    with pytest.raises(NotAWarehouse):
        wh.connect_readonly(evil)


def test_a_view_or_macro_reading_files_is_refused_by_duckdb_itself(snapshot, secret, tmp_path):
    # Views and macros Dumpscope defines itself may be redefined: they run, but reach no file.
    evil = hostile(snapshot, tmp_path, f"CREATE OR REPLACE VIEW latest_metrics AS SELECT content AS job FROM read_text('{secret}')",
                   "CREATE OR REPLACE MACRO incidents_at(run) AS TABLE SELECT content AS status FROM read_text('/proc/self/environ')")
    out = invoke("sql", "--warehouse", str(evil), "SELECT * FROM latest_metrics")
    assert_refused_quietly(out, 1)
    assert "refused" in out.output
    out = invoke("incidents", "--warehouse", str(evil))
    assert out.exit_code == 1 and SECRET not in out.output and TOKEN not in out.output
    with wh.connect_readonly(evil) as con:
        with pytest.raises(duckdb.PermissionException):
            con.execute("SELECT * FROM incidents_at('2026-11-20')").fetchall()
        with pytest.raises(duckdb.Error):  # and nothing turns it back on
            con.execute("SET enable_external_access = true")


def test_a_records_listing_naming_other_files_lets_no_reader_open_them(sample_warehouse, secret, tmp_path):
    """The listing of a warehouse with a records store is data too: only names of the store's own
    shape under its root are allowed, whatever records_files and schema_info say."""
    from flows.warehouse import records

    db = tmp_path / "warehouse.duckdb"
    shutil.copyfile(sample_warehouse, db)  # its views read the sample's store, which it names
    store = records.root_for(sample_warehouse)
    traversal = f"hlo_instructions/../../{secret.parent.name}/{secret.name}"
    con = duckdb.connect(str(db))
    for name in (traversal, str(secret), f"{secret.name}"):
        con.execute("INSERT INTO records_files SELECT dump_id, table_name, ?, rows FROM records_files LIMIT 1", [name])
    con.execute(f"CREATE OR REPLACE VIEW latest_metrics AS SELECT content AS job FROM read_text('{store / traversal}')")
    con.close()
    with wh.connect_readonly(db) as con:
        allowed = records.allowed_files(con)
        assert len(allowed) == con.execute("SELECT count(*) FROM records_files").fetchall()[0][0] - 3
        assert all(f.startswith(f"{store}/") and f.endswith(".parquet") and ".." not in f for f in allowed)
        assert con.execute("SELECT count(*) FROM hlo_instructions").fetchall()[0][0] > 0  # its own files: read
        with pytest.raises(duckdb.PermissionException):
            con.execute("SELECT * FROM latest_metrics").fetchall()


class _Server:
    """An HTTP server on 127.0.0.1 answering each path with a handler of the test's."""

    def __init__(self, routes: dict):
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - the http.server name
                outer.requests += 1
                routes[self.path.split("?")[0]](self)

            do_HEAD = do_GET

            def log_message(self, *args):
                pass

        self.requests = 0
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _endless(head: bytes):
    def handler(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.end_headers()
        if h.command == "HEAD":
            return
        try:
            h.wfile.write(head)
            block = b"\0" * (1 << 16)
            while True:
                h.wfile.write(block)
        except OSError:
            pass
    return handler


def _redirect(to: str):
    def handler(h):
        h.send_response(302)
        h.send_header("Location", to)
        h.send_header("Content-Length", "0")
        h.end_headers()
    return handler


def _short(h):
    h.send_response(200)
    h.send_header("Content-Length", str(10 << 20))
    h.end_headers()
    if h.command == "GET":
        h.wfile.write(b"\0" * 8 + b"DUCK" + b"\0" * (1 << 20))
        h.wfile.flush()
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)


def _file(path: Path):
    body = path.read_bytes()

    def handler(h):
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command == "GET":
            h.wfile.write(body)
    return handler


@pytest.fixture
def own_tmp(tmp_path, monkeypatch) -> Path:
    """The system's temporary directory, for this test alone (the downloads land there)."""
    tmp = tmp_path / "systmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def test_a_hostile_snapshot_over_http_is_refused_and_leaves_nothing(snapshot, secret, tmp_path, own_tmp):
    evil = hostile(snapshot, tmp_path, *runs_reading(secret))
    server = _Server({"/warehouse.duckdb": _file(evil), "/good.duckdb": _file(snapshot)})
    try:
        out = invoke("check", str(LAST_NIGHT), "--warehouse", f"{server.url}/warehouse.duckdb", "--format", "markdown")
        assert_refused_quietly(out, 1)
        assert "is a view where Dumpscope writes a table" in out.output
        out = invoke("check", str(LAST_NIGHT), "--warehouse", f"{server.url}/good.duckdb", "--format", "json")
        assert out.exit_code == 0, out.output
    finally:
        server.close()
    assert list(own_tmp.iterdir()) == []


@pytest.mark.parametrize("case, expected", [
    ("endless garbage", "not a DuckDB file"),
    ("endless DuckDB header", "more than 2,097,152 bytes ([check] max_download): stopped"),
    ("redirect to file://", "cannot fetch it"),
    ("redirect to ftp://", "cannot fetch it"),
    ("redirect loop", "cannot fetch it"),
    ("short body", "cannot fetch it"),
    ("not found", "cannot fetch it"),
])
def test_every_fetch_failure_is_one_line_exit_2_and_bounded(case, expected, tmp_path, own_tmp, secret):
    server = _Server({
        "/endless-garbage": _endless(b"<html>" * 100), "/endless-DuckDB-header": _endless(b"\0" * 8 + b"DUCK"),
        "/redirect-to-file://": _redirect(f"file://{secret}"), "/redirect-to-ftp://": _redirect("ftp://127.0.0.1/x"),
        "/redirect-loop": _redirect("/redirect-loop"), "/short-body": _short, "/not-found": lambda h: h.send_error(404)})
    settings = tmp_path / "dumpscope.toml"
    settings.write_text('[check]\nmax_download = "2MiB"\ndownload_seconds = 20\n')
    try:
        out = invoke("check", str(LAST_NIGHT), "--settings", str(settings), "--warehouse",
                     f"{server.url}/{case.replace(' ', '-')}")
    finally:
        server.close()
    assert_refused_quietly(out, 2)
    assert expected in out.output and out.output.startswith("error: --warehouse http://127.0.0.1:")
    assert list(own_tmp.iterdir()) == []  # the download's directory is gone


def test_an_s3_endpoint_that_is_down_is_one_line(tmp_path, own_tmp):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = invoke("check", str(LAST_NIGHT), "--warehouse", "s3://dumps/warehouse.duckdb",
                 "--storage-option", f"client_kwargs.endpoint_url=http://127.0.0.1:{port}", "--storage-option", "anon=true")
    assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
    assert "cannot fetch it" in out.output


def test_a_killed_checks_download_is_removed_by_the_next_and_nothing_else(own_tmp, tmp_path):
    dead = own_tmp / "dumpscope-snapshot-999999999-abc123"  # no such process
    dead.mkdir()
    (dead / "snapshot.duckdb").write_bytes(b"x" * 100)
    alive = own_tmp / f"dumpscope-snapshot-{os.getppid()}-def456"  # a live process's
    alive.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    (own_tmp / "dumpscope-snapshot-999999998-link00").symlink_to(victim)
    foreign = own_tmp / "dumpscope-snapshot-notapid-x"
    foreign.mkdir()
    assert fetch.sweep_leftovers() == 1
    assert not dead.exists() and alive.is_dir() and foreign.is_dir()
    assert (victim / "keep").read_text() == "mine"
