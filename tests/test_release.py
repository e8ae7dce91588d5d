"""`run --publish DEST`: the site and a self-contained warehouse snapshot where readers get them
(``flows.publish.release``, ``flows.warehouse.snapshot``), and `check --warehouse URL` reading it."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.publish.release import SNAPSHOT_NAME, BadDestination, release
from flows.warehouse import store as wh

ROOT = Path(__file__).parents[1]
LAST_NIGHT = ROOT / "data" / "sample_bucket" / "2026-11-20"
RECORDS_PER_RUN = """SELECT d.run_id, count(*) FROM hlo_instructions i JOIN dumps d ON d.dump_id = i.dump_id
                     GROUP BY ALL ORDER BY ALL"""


@pytest.fixture
def sample_site_dir(sample_site) -> Path:
    return sample_site.out


def _files(root: Path) -> dict[str, bytes]:
    return {f.relative_to(root).as_posix(): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def _query(warehouse: Path, sql: str) -> list[tuple]:
    with wh.connect_readonly(warehouse) as con:
        return con.execute(sql).fetchall()


def test_a_release_to_a_directory_is_switched_at_once_and_keeps_the_one_before(sample_warehouse, sample_site_dir, tmp_path):
    www = tmp_path / "www"
    first = release(sample_site_dir, sample_warehouse, str(www))
    assert www.is_symlink() and _files(www) == _files(sample_site_dir) | {SNAPSHOT_NAME: (www / SNAPSHOT_NAME).read_bytes()}
    assert first.files == len(_files(sample_site_dir)) + 1 and first.snapshot == str(www / SNAPSHOT_NAME)
    one = os.readlink(www)
    release(sample_site_dir, sample_warehouse, str(www))
    two = os.readlink(www)
    releases = tmp_path / "www.releases"
    assert two != one and sorted(p.name for p in releases.iterdir()) == sorted([Path(one).name, Path(two).name])
    release(sample_site_dir, sample_warehouse, str(www))  # the oldest goes; the latest and the one before stay
    assert Path(one).name not in {p.name for p in releases.iterdir()} and len(list(releases.iterdir())) == 2


def test_the_snapshot_holds_its_records_and_names_no_store(sample_warehouse, sample_site_dir, tmp_path):
    release(sample_site_dir, sample_warehouse, str(tmp_path / "www"))
    copied = tmp_path / "laptop" / "w.duckdb"  # the one file, away from any records directory
    copied.parent.mkdir()
    shutil.copy(tmp_path / "www" / SNAPSHOT_NAME, copied)
    assert _query(copied, RECORDS_PER_RUN) == _query(sample_warehouse, RECORDS_PER_RUN) != []
    assert _query(copied, "SELECT count(*) FROM records_files") == [(0,)]
    assert _query(copied, "SELECT count(*) FROM schema_info WHERE key = 'records_root'") == [(0,)]
    for table in ("incidents", "dumps", "runs"):
        assert sorted(_query(copied, f"SELECT * FROM {table}")) == sorted(_query(sample_warehouse, f"SELECT * FROM {table}"))
    [(documented,)] = _query(copied, "SELECT comment FROM duckdb_tables() WHERE table_name = 'hlo_instructions'")
    [(as_view,)] = _query(sample_warehouse, "SELECT comment FROM duckdb_views() WHERE view_name = 'hlo_instructions' AND schema_name = 'main'")
    assert documented == as_view and documented.startswith("One row per HLO instruction.")


def test_a_destination_that_is_not_a_release_link_is_refused_before_any_work(sample_warehouse, sample_site_dir, tmp_path):
    taken = tmp_path / "www"
    taken.mkdir()
    (taken / "index.html").write_text("someone else's site")
    with pytest.raises(BadDestination, match="exists and is not a link to a release"):
        release(sample_site_dir, sample_warehouse, str(taken))
    assert _files(taken) == {"index.html": b"someone else's site"}
    out = CliRunner().invoke(app, ["run", "--bucket", str(LAST_NIGHT.parent), "--warehouse", str(tmp_path / "w.duckdb"),
                                   "--publish", str(taken)])
    assert out.exit_code == 2 and "exists and is not a link to a release" in out.output
    assert not (tmp_path / "w.duckdb").exists()
    out = CliRunner().invoke(app, ["run", "--publish", "nosuchfs://x/y", "--warehouse", str(tmp_path / "w.duckdb")])
    assert out.exit_code == 2 and "no filesystem for nosuchfs://" in out.output


def _check(warehouse: str, *options: str) -> str:
    out = CliRunner().invoke(app, ["check", str(LAST_NIGHT), "--warehouse", warehouse, "--format", "json", *options])
    assert out.exit_code == 0, out.output
    return out.stdout


def test_check_against_a_snapshot_served_over_http_says_what_the_warehouse_says(sample_warehouse, sample_site_dir, tmp_path):
    release(sample_site_dir, sample_warehouse, str(tmp_path / "www"))
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # the server's access log is not the command's output
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path / "www"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert _check(f"{url}/{SNAPSHOT_NAME}") == _check(str(sample_warehouse))
        out = CliRunner().invoke(app, ["check", str(LAST_NIGHT), "--warehouse", f"{url}/nothing-here.duckdb"])
        assert out.exit_code == 2 and out.output.count("\n") == 1 and "cannot fetch it" in out.output
    finally:
        server.shutdown()


@pytest.mark.integration
def test_a_release_to_s3_uploads_the_site_and_the_snapshot_and_removes_what_left(sample_warehouse, sample_site_dir, tmp_path):
    from tests.moto_s3 import moto_s3

    with moto_s3("site") as (endpoint, client):
        options = {"key": "testing", "secret": "testing",
                   "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
        (client.put_object(Bucket="site", Key="nightly/gone.html", Body=b"a page of an older site"))
        done = release(sample_site_dir, sample_warehouse, "s3://site/nightly", options)
        keys = {o["Key"] for o in client.list_objects_v2(Bucket="site", Prefix="nightly/")["Contents"]}
        assert keys == {f"nightly/{rel}" for rel in _files(sample_site_dir)} | {f"nightly/{SNAPSHOT_NAME}"}
        assert done.snapshot == f"s3://site/nightly/{SNAPSHOT_NAME}"
        front = client.get_object(Bucket="site", Key="nightly/index.html")["Body"].read()
        assert front == (sample_site_dir / "index.html").read_bytes()
        cli_options = ["--storage-option", f"client_kwargs.endpoint_url={endpoint}", "--storage-option", "key=testing",
                       "--storage-option", "secret=testing", "--storage-option", "client_kwargs.region_name=us-east-1"]
        assert _check(done.snapshot, *cli_options) == _check(str(sample_warehouse))
