"""`run --publish DEST`: the site and a self-contained warehouse snapshot where readers get them
(``flows.publish.release``, ``flows.warehouse.snapshot``), and `check --warehouse URL` reading it."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from typer.testing import CliRunner

from flows.cli import app
from flows.publish import release as release_module
from flows.publish.release import MARKER, PUBLISHING, SNAPSHOT_NAME, BadDestination, release
from flows.publish.site import build_site
from flows.warehouse import store as wh
from tests.sample_build import build_sample_warehouse
from tests.site_links import links_by_file

ROOT = Path(__file__).parents[1]
LAST_NIGHT = ROOT / "data" / "sample_bucket" / "2026-11-20"
RECORDS_PER_RUN = """SELECT d.run_id, count(*) FROM hlo_instructions i JOIN dumps d ON d.dump_id = i.dump_id
                     GROUP BY ALL ORDER BY ALL"""


@pytest.fixture
def sample_site_dir(sample_site) -> Path:
    return sample_site.out


def _files(root: Path) -> dict[str, bytes]:
    return {f.relative_to(root).as_posix(): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def _release_files(www: Path, site: Path) -> dict[str, bytes]:
    """What a whole release of ``site`` at ``www`` holds: the site, the snapshot, the marker."""
    return _files(site) | {SNAPSHOT_NAME: (www / SNAPSHOT_NAME).read_bytes(), MARKER: (www / MARKER).read_bytes()}


def _query(warehouse: Path, sql: str) -> list[tuple]:
    with wh.connect_readonly(warehouse) as con:
        return con.execute(sql).fetchall()


def test_a_release_to_a_directory_is_switched_at_once_and_keeps_the_one_before(sample_warehouse, sample_site_dir, tmp_path):
    www = tmp_path / "www"
    first = release(sample_site_dir, sample_warehouse, str(www))
    assert www.is_symlink() and _files(www) == _release_files(www, sample_site_dir)
    assert (www / MARKER).read_text() == f"Dumpscope release {Path(os.readlink(www)).name} of www\n"
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


def _ours(releases: Path) -> list[str]:
    """The releases a publish made in ``releases`` (their marker names them)."""
    return sorted(p.name for p in releases.iterdir() if (p / MARKER).is_file() and not p.is_symlink()
                  and (p / MARKER).read_text().startswith(f"Dumpscope release {p.name} of "))


def test_a_directory_publish_deletes_only_the_releases_it_made(sample_warehouse, sample_site_dir, tmp_path):
    """Issue 43, item 7: the cleanup deleted every directory of DEST.releases but the two that sort
    last (a victim lost 0-projects/ and 2025-archive/), and with two entries sorting after the
    release ids (zz-notes/, ~backup/) each publish deleted its own new release: DEST dangled."""
    www, releases, elsewhere = tmp_path / "www", tmp_path / "www.releases", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "kept.txt").write_text("behind a link")
    releases.mkdir()
    for name in ("0-projects", "2025-archive", "zz-notes", "~backup"):
        (releases / name).mkdir()
        (releases / name / "kept.txt").write_text(name)
    (releases / "notes.txt").write_text("a file")
    (releases / "elsewhere").symlink_to(elsewhere)
    first = release(sample_site_dir, sample_warehouse, str(www))
    assert _files(www) == _release_files(www, sample_site_dir)
    # A copy of a release under another name, its marker with it: not a release (the marker names the first).
    shutil.copytree(releases / Path(os.readlink(www)).name, releases / "20990101T000000000000Z")
    made = [Path(os.readlink(www)).name]
    for _ in range(3):
        done = release(sample_site_dir, sample_warehouse, str(www))
        made.append(Path(os.readlink(www)).name)
        assert _files(www) == _release_files(www, sample_site_dir)  # DEST resolves to a whole release
    assert _ours(releases) == made[-2:]  # the latest and the one before it
    for name in ("0-projects", "2025-archive", "zz-notes", "~backup"):
        assert _files(releases / name) == {"kept.txt": name.encode()}
    assert (releases / "notes.txt").read_text() == "a file" and _files(elsewhere) == {"kept.txt": b"behind a link"}
    assert (releases / "elsewhere").is_symlink() and (releases / "20990101T000000000000Z" / "index.html").is_file()
    assert first.warning == (f"{releases} holds 6 entries no publish made (no .dumpscope-release marker), left "
                             "untouched: 0-projects, 2025-archive, elsewhere, notes.txt, zz-notes, ~backup")
    assert done.warning == (f"{releases} holds 7 entries no publish made (no .dumpscope-release marker), left untouched: "
                            "0-projects, 2025-archive, 20990101T000000000000Z, elsewhere, notes.txt, zz-notes, ~backup")


def test_a_releases_directory_that_is_a_link_is_refused_before_any_work(sample_warehouse, sample_site_dir, tmp_path):
    """A DEST.releases that is a symbolic link was followed: releases were written, and old entries
    deleted, wherever it pointed."""
    elsewhere = tmp_path / "projects"
    for name in ("0-projects", "2025-archive"):
        (elsewhere / name).mkdir(parents=True)
        (elsewhere / name / "kept.txt").write_text(name)
    (tmp_path / "www.releases").symlink_to(elsewhere)
    with pytest.raises(BadDestination, match=r"www.releases is a symbolic link; releases are written into a directory"):
        release(sample_site_dir, sample_warehouse, str(tmp_path / "www"))
    out = CliRunner().invoke(app, ["run", "--bucket", str(LAST_NIGHT.parent), "--warehouse", str(tmp_path / "w.duckdb"),
                                   "--publish", str(tmp_path / "www")])
    assert out.exit_code == 2 and out.output.count("\n") == 1 and "www.releases is a symbolic link" in out.output
    assert not (tmp_path / "w.duckdb").exists() and not (tmp_path / "www").exists()
    assert _files(elsewhere) == {"0-projects/kept.txt": b"0-projects", "2025-archive/kept.txt": b"2025-archive"}


def test_two_publishes_racing_keep_what_dest_resolves_to_and_what_readers_were_on(sample_warehouse, sample_site_dir,
                                                                                  tmp_path, monkeypatch):
    """A publish that starts and ends while another copies: neither deletes the release DEST resolves
    to, the one it resolved to when they began, or the other's."""
    www, releases = tmp_path / "www", tmp_path / "www.releases"
    release(sample_site_dir, sample_warehouse, str(www))
    before = Path(os.readlink(www)).name
    write_snapshot, racing = release_module.write_snapshot, []

    def another_publish_meanwhile(warehouse, target, site_url=None):
        if not racing:  # the first publish to write its snapshot: the other one starts and ends
            racing.append("started")
            release(sample_site_dir, sample_warehouse, str(www))
            racing.append(Path(os.readlink(www)).name)
        return write_snapshot(warehouse, target, site_url)

    monkeypatch.setattr(release_module, "write_snapshot", another_publish_meanwhile)
    release(sample_site_dir, sample_warehouse, str(www))
    outer = Path(os.readlink(www)).name
    assert outer < racing[1] and _ours(releases) == sorted([before, outer, racing[1]])
    assert _files(www) == _release_files(www, sample_site_dir)
    monkeypatch.undo()
    release(sample_site_dir, sample_warehouse, str(www))  # what DEST resolved to (outer) and newer stay
    assert _ours(releases) == sorted([outer, racing[1], Path(os.readlink(www)).name])
    assert _files(www) == _release_files(www, sample_site_dir)


@pytest.mark.integration
def test_a_killed_directory_publish_leaves_a_copy_the_next_one_removes(sample_warehouse, sample_site_dir, tmp_path):
    """A publish killed while it copies left ``DEST.releases/.<id>.<pid>.tmp`` (a whole site) for ever."""
    www, releases = tmp_path / "www", tmp_path / "www.releases"
    release(sample_site_dir, sample_warehouse, str(www))
    killed = ("import os, sys; from pathlib import Path; from flows.publish import release as r; "
              "r.write_snapshot = lambda *_: os.kill(os.getpid(), 9); r.release(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])")
    done = subprocess.run([sys.executable, "-c", killed, str(sample_site_dir), str(sample_warehouse), str(www)], cwd=ROOT)
    assert done.returncode == -9
    [left] = [p for p in releases.iterdir() if p.name.endswith(".tmp")]
    assert (left / "index.html").is_file() and not (left / SNAPSHOT_NAME).exists()
    again = release(sample_site_dir, sample_warehouse, str(www))
    assert not left.exists() and again.warning == "" and len(_ours(releases)) == 2
    assert _files(www) == _release_files(www, sample_site_dir)


def test_a_directory_publish_that_fails_removes_its_copy(sample_warehouse, sample_site_dir, tmp_path, monkeypatch):
    """A publish that failed in a process that lives on (``serve``) left its ``.tmp`` copy, named by
    that live pid: nothing removed it until the process ended."""
    www, releases = tmp_path / "www", tmp_path / "www.releases"
    release(sample_site_dir, sample_warehouse, str(www))

    def full_disk(warehouse, target, site_url=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(release_module, "write_snapshot", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        release(sample_site_dir, sample_warehouse, str(www))
    assert [p.name for p in releases.iterdir()] == [Path(os.readlink(www)).name]
    assert _files(www) == _release_files(www, sample_site_dir)


def test_the_night_warns_of_what_dest_releases_holds_that_no_publish_made(tmp_path):
    from flows.nightly import night_in_process

    shutil.copytree(LAST_NIGHT, tmp_path / "bucket" / LAST_NIGHT.name)
    (tmp_path / "www.releases" / "0-projects").mkdir(parents=True)
    summary = night_in_process(bucket=str(tmp_path / "bucket"), warehouse=tmp_path / "w.duckdb",
                               publish_to=str(tmp_path / "www"))
    warning = (f"{tmp_path / 'www.releases'} holds 1 entry no publish made (no .dumpscope-release marker), "
               "left untouched: 0-projects")
    assert summary.warnings() == [warning] and f"Warning: {warning}" in summary.markdown()
    assert (tmp_path / "www" / "index.html").is_file() and (tmp_path / "www.releases" / "0-projects").is_dir()


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


@pytest.fixture
def night_before_site(tmp_path_factory) -> Path:
    """The site of the sample bucket's first three runs: what DEST holds when its last night publishes."""
    out = tmp_path_factory.mktemp("night-before")
    for night in sorted(LAST_NIGHT.parent.iterdir())[:-1]:
        shutil.copytree(night, out / "bucket" / night.name)
    return build_site(build_sample_warehouse(out, out / "bucket"), out / "site").out


def _reached(links: dict[str, dict[str, set[str]]], version: dict[str, str]) -> tuple[set[str], list[str]]:
    """A store holding each path of ``version`` in that version (a key of ``links``: its files ->
    the files each links to, ``links_by_file``): the files a reader reaches from its front page,
    and ``"file: target"`` for each of their links to a file the store lacks."""
    reached, todo, broken = set(), ["index.html"] if "index.html" in version else [], []
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            for target in sorted(links[version[name]].get(name, ())):
                if target in version:
                    todo.append(target)
                else:
                    broken.append(f"{name}: {target}")
    return reached, broken


_PUT_FILE = MemoryFileSystem.put_file  # fsspec's own, whatever a test patched in


class _Killed(Exception):
    """The publish's process, killed before an upload."""


def _uploads(monkeypatch, root: str, killed_after: int | None = None) -> list[str]:
    """The files publishes to ``memory://{root}`` upload from now on, in order; with ``killed_after``,
    the upload after that many raises ``_Killed``."""
    uploads = []

    def put(self, lpath, rpath, *args, **kwargs):
        if len(uploads) == killed_after:
            raise _Killed(rpath)
        uploads.append(rpath.removeprefix(root + "/"))
        return _PUT_FILE(self, lpath, rpath, *args, **kwargs)

    monkeypatch.setattr(MemoryFileSystem, "put_file", put)
    return uploads


@pytest.fixture
def memory_root(tmp_path) -> Iterator[str]:
    """A path of its own in fsspec's memory:// store (one per process), emptied afterwards."""
    root = f"/{tmp_path.name}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def _store_files(root: str) -> dict[str, bytes]:
    fs = fsspec.filesystem("memory")
    return {path.removeprefix(root + "/"): fs.cat_file(path) for path in fs.find(root)}


def test_a_store_publish_stopped_after_any_upload_leaves_no_reachable_link_broken(
        sample_warehouse, sample_site_dir, night_before_site, memory_root, monkeypatch):
    """Issue 43, item 2: uploads went assets first, then pages by depth and name, the front page last;
    incident pages went up before the run page they link to. Stopped after any upload, the store
    must show a reader who comes in at the front page no link to a file it lacks."""
    for rel, data in _files(night_before_site).items():
        fsspec.filesystem("memory").pipe_file(f"{memory_root}/{rel}", data)
    uploads = _uploads(monkeypatch, memory_root)
    release(sample_site_dir, sample_warehouse, f"memory://{memory_root}")
    published = _store_files(memory_root)
    assert published == _files(sample_site_dir) | {SNAPSHOT_NAME: published[SNAPSHOT_NAME]}  # no record left
    links = {"old": links_by_file(night_before_site), "new": links_by_file(sample_site_dir)}
    new_files = sorted(set(links["new"]) - set(links["old"]))
    # and 7 incident pages, and the ONNX page's chart file: no ONNX figure moved in the first three runs (no chart).
    assert len(new_files) == 9 and {"runs/2026-11-20.html", "onnx.charts.js"} <= set(new_files)
    version, broken = dict.fromkeys(links["old"], "old"), {}
    for k, rel in enumerate(uploads, start=1):
        version[rel] = "new"
        broken[k] = _reached(links, version)[1]
    assert {k: b for k, b in broken.items() if b} == {} and len(uploads) == 164  # the site's 163 files, the snapshot
    assert len(_reached(links, version)[0]) == 117  # pages, their chart files and assets (of 163 files: assets/tables.js; the compile view and ranks pages)


def test_a_store_publish_killed_among_new_pages_lists_them_and_the_next_uploads_them_first(
        sample_warehouse, memory_root, tmp_path, monkeypatch):
    """A page a killed publish left may link to one it never uploaded (n1.html to n2.html): the killed
    one leaves it unreachable, and the next one must not take it as whole, or it would upload a
    page linking to it (a.html) first and show a reader the link to n2.html, which never comes."""
    def site(name: str, pages: dict[str, list[str]]) -> Path:
        for page, targets in pages.items():
            links = "".join(f'<a href="{t}">{t}</a>' for t in targets)
            (tmp_path / name).mkdir(exist_ok=True)
            (tmp_path / name / page).write_text(f"<html><body>{links}</body></html>")
        return tmp_path / name

    sites = {"at DEST": site("a", {"index.html": ["a.html"], "a.html": ["index.html"]}),
             "killed": site("b", {"index.html": ["a.html"], "a.html": ["index.html", "n1.html"],
                                  "n1.html": ["n2.html"], "n2.html": ["n1.html", "a.html"]}),
             "next": site("c", {"index.html": ["a.html"], "a.html": ["index.html", "n1.html"], "n1.html": ["a.html"]})}
    links = {name: links_by_file(path) for name, path in sites.items()}
    for rel, data in _files(sites["at DEST"]).items():
        fsspec.filesystem("memory").pipe_file(f"{memory_root}/{rel}", data)
    version = dict.fromkeys(links["at DEST"], "at DEST")

    uploads = _uploads(monkeypatch, memory_root, killed_after=1)
    with pytest.raises(_Killed):
        release(sites["killed"], sample_warehouse, f"memory://{memory_root}")
    assert uploads == ["n1.html"] and _store_files(memory_root)[PUBLISHING] == b'["n1.html", "n2.html"]'
    version["n1.html"] = "killed"
    assert _reached(links, version) == ({"index.html", "a.html"}, [])

    uploads = _uploads(monkeypatch, memory_root)
    release(sites["next"], sample_warehouse, f"memory://{memory_root}")
    assert uploads == ["n1.html", "a.html", "index.html", SNAPSHOT_NAME]
    for rel in uploads:
        version[rel] = "next"
        assert _reached(links, version)[1] == [], rel
    assert sorted(_store_files(memory_root)) == ["a.html", "index.html", "n1.html", SNAPSHOT_NAME]


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
