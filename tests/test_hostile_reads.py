"""Nothing outside the bucket is read, nothing blocks (issue 27): hostile entries in a small
copy of the sample night (its jax-pmap job), through the real nightly and `dumpscope check`.

A secret file sits outside the bucket. Every case asserts that its text reaches no column of
any table or view of the warehouse (dumps.error and the excerpts included), no night summary
and no check output, and that the hostile entry is reported with its reason. The cases that
blocked for ever run under a watchdog (``_unblocking``) that, after ``WATCHDOG`` seconds,
keeps opening their FIFOs for writing, so a reader stuck in ``open()`` reads an empty file:
a night that would block ends late and fails on what it stored, instead of hanging the suite.
"""

from __future__ import annotations

import gzip
import os
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.warehouse import store as wh

SAMPLE = Path(__file__).parents[1] / "data" / "sample_bucket"
NIGHT = "2026-11-20"
PMAP = "jax-pmap"  # the smallest sample job: 9 dumps, 4 contents with excerpts
HLO = "module_0000.jit__fun.cpu_after_optimizations.txt.gz"
MARK = "dumpscope-test-secret-5f1c"
WATCHDOG = 120.0  # seconds before a blocked read is released (never reached when nothing blocks)


def _secret(where: Path, size: int | None = None) -> Path:
    """A private key outside the bucket: every line holds MARK, within a parser's 80-character
    quote; ``size``: cut to that many bytes (a swap the size check cannot see)."""
    where.parent.mkdir(parents=True, exist_ok=True)
    text = f"-----BEGIN OPENSSH PRIVATE KEY----- {MARK}\n" + "".join(f"{MARK} {i:06d}\n" for i in range(5000))
    where.write_bytes(text.encode()[:size] if size is not None else text.encode())
    return where


def _bucket(root: Path) -> Path:
    shutil.copytree(SAMPLE / NIGHT / PMAP, root / NIGHT / PMAP)
    shutil.copy(SAMPLE / NIGHT / "run.json", root / NIGHT / "run.json")
    return root


def _night(bucket: Path, warehouse: Path):
    from flows.nightly import night_in_process

    return night_in_process(bucket=str(bucket), warehouse=warehouse, workers=1)


def _query(warehouse: Path, sql: str, params: list | None = None) -> list[tuple]:
    with wh.connect_readonly(warehouse) as con:
        return con.execute(sql, params or []).fetchall()


def _leaks(warehouse: Path | None, *texts: str) -> list[str]:
    """Where the secret's text is: each column of each table and view of the warehouse, and ``texts``."""
    found = [f"text {i}" for i, text in enumerate(texts) if MARK in text]
    if warehouse is None:
        return found
    with wh.connect_readonly(warehouse) as con:
        columns = con.execute("SELECT table_name, column_name FROM duckdb_columns() "
                              "WHERE schema_name = 'main' AND NOT internal").fetchall()
        assert {t for t, _ in columns} >= {"dumps", "runs", "content_items", "excerpt_texts"}
        for table, column in columns:
            hits = con.execute(f'SELECT count(*) FROM "{table}" WHERE contains(CAST("{column}" AS VARCHAR), ?)',
                               [MARK]).fetchall()[0][0]
            if hits:
                found.append(f"{table}.{column}")
    return found


def _excerpts(warehouse: Path) -> list[tuple]:
    """Each item's excerpt (content items are keyed by content, so any copy of the night has the same)."""
    return _query(warehouse, "SELECT items_key, category, key, excerpt FROM content_items ORDER BY ALL")


@contextmanager
def _unblocking(fifos: list[Path]):
    """Yields a list that is non-empty once the watchdog had to release a reader blocked on one of ``fifos``."""
    released: list[bool] = []
    done = threading.Event()

    def watch() -> None:
        if done.wait(WATCHDOG):
            return
        released.append(True)
        while not done.wait(0.2):
            for fifo in fifos:
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO when nobody reads it
                except OSError:
                    pass

    thread = threading.Thread(target=watch, name="fifo-watchdog", daemon=True)
    thread.start()
    try:
        yield released
    finally:
        done.set()
        thread.join()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, list[tuple]]:
    """The small night loaded as it is (no hostile entry): its warehouse, and its excerpts."""
    root = tmp_path_factory.mktemp("reference")
    warehouse = root / "wh.duckdb"
    summary = _night(_bucket(root / "bucket"), warehouse)
    assert (summary.new, summary.failed, summary.unreadable) == (9, 0, 0)
    excerpts = _excerpts(warehouse)
    assert sum(e[3] is not None for e in excerpts) > 50
    return warehouse, excerpts


# ---------------------------------------------------------------- the nightly


def test_a_symlinked_dump_is_failed_and_never_read(tmp_path):
    bucket = _bucket(tmp_path / "bucket")
    link = bucket / NIGHT / PMAP / "module_0007.jit_leak.cpu_after_optimizations.txt"
    link.symlink_to(_secret(tmp_path / "home" / ".ssh" / "id_ed25519"))
    warehouse = tmp_path / "wh.duckdb"
    summary = _night(bucket, warehouse)
    path = f"{NIGHT}/{PMAP}/{link.name}"
    assert _query(warehouse, "SELECT status, error, dump_id, size_bytes FROM dumps WHERE path = ?", [path]) == [
        ("failed", f"{path}: not a regular file: symlink", None, 0)]
    assert (summary.new, summary.failed, summary.unreadable) == (10, 1, 0)
    assert _leaks(warehouse, summary.json(), summary.markdown()) == []


def test_a_symlinked_job_directory_is_failed_and_never_entered(tmp_path):
    bucket = _bucket(tmp_path / "bucket")
    key = _secret(tmp_path / "home" / ".ssh" / "module_0000.jit_key.cpu_after_optimizations.txt")
    (bucket / NIGHT / "jax-leak").symlink_to(key.parent)
    warehouse = tmp_path / "wh.duckdb"
    summary = _night(bucket, warehouse)
    assert _query(warehouse, "SELECT path, job, status, error FROM dumps WHERE path LIKE '%leak%'") == [
        (f"{NIGHT}/jax-leak", "", "failed", f"{NIGHT}/jax-leak: not a regular file: symlink")]
    assert _leaks(warehouse, summary.json(), summary.markdown()) == []


def test_a_job_name_that_is_not_utf8_is_read_by_its_real_name_never_the_escaped_one(tmp_path, reference):
    """Case 1a: jax-pmap\\xff (the byte) is stored as jax-pmap\\\\xff (the text); a directory of that
    literal name, holding a link to the secret under each dump's name, is never read."""
    bucket = _bucket(tmp_path / "bucket")
    real = os.fsencode(bucket / NIGHT) + b"/jax-pmap\xff"
    os.rename(bucket / NIGHT / PMAP, real)
    escaped = bucket / NIGHT / "jax-pmap\\xff"
    key = _secret(tmp_path / "home" / ".ssh" / "id_ed25519")
    escaped.mkdir()
    for name in (n for n in os.listdir(real) if os.path.isfile(real + b"/" + n)):
        (escaped / os.fsdecode(name)).symlink_to(key)
    warehouse = tmp_path / "wh.duckdb"
    summary = _night(bucket, warehouse)
    stored = _query(warehouse, "SELECT path, status FROM dumps ORDER BY path")
    assert stored == [(p.replace(f"/{PMAP}/", "/jax-pmap\\xff/"), s)
                      for p, s in _query(reference[0], "SELECT path, status FROM dumps ORDER BY path")]
    assert _excerpts(warehouse) == reference[1]  # read from the real files
    assert _leaks(warehouse, summary.json(), summary.markdown()) == []


def test_a_dump_swapped_for_a_symlink_between_listing_and_parse_is_refused(tmp_path, monkeypatch):
    """Case 1b: the secret has the dump's very size, so only the open can tell."""
    import flows.nightly as nightly_module

    bucket = _bucket(tmp_path / "bucket")
    dump = bucket / NIGHT / PMAP / HLO
    key = _secret(tmp_path / "home" / ".ssh" / "id_ed25519", size=dump.stat().st_size)
    listing = nightly_module.list_objects

    def listed_then_swapped(*args, **kwargs):
        objects = listing(*args, **kwargs)
        dump.unlink()
        dump.symlink_to(key)
        return objects

    monkeypatch.setattr(nightly_module, "list_objects", listed_then_swapped)
    warehouse = tmp_path / "wh.duckdb"
    summary = _night(bucket, warehouse)
    path = f"{NIGHT}/{PMAP}/{HLO}"
    assert _query(warehouse, "SELECT kind, status, error FROM dumps WHERE path = ?", [path]) == [
        ("xla_hlo", "failed", f"{path}: not a regular file: symlink")]
    assert _leaks(warehouse, summary.json(), summary.markdown()) == []


@pytest.mark.parametrize("swap", ["symlink", "rewritten"])
def test_a_dump_changed_between_parse_and_excerpts_gives_no_excerpt(tmp_path, monkeypatch, reference, swap):
    """Case 1b, later: each dump becomes a link to the secret, or a regular file holding its text,
    once parsed: the excerpts would quote it; they are dropped, the night goes on."""
    import flows.verdict.items as items_module

    bucket = _bucket(tmp_path / "bucket")
    key = _secret(tmp_path / "home" / ".ssh" / "id_ed25519")
    excerpts = items_module.with_excerpts

    def swapped_then_read(*args, **kwargs):
        for dump in (p for p in (bucket / NIGHT / PMAP).rglob("*") if p.is_file() and not p.is_symlink()):
            dump.unlink()
            dump.symlink_to(key) if swap == "symlink" else dump.write_bytes(key.read_bytes())
        return excerpts(*args, **kwargs)

    monkeypatch.setattr(items_module, "with_excerpts", swapped_then_read)
    warehouse = tmp_path / "wh.duckdb"
    summary = _night(bucket, warehouse)
    assert (summary.parsed, summary.failed) == (9, 0)
    assert _query(warehouse, "SELECT count(*), count(excerpt) FROM content_items") == [(len(reference[1]), 0)]
    assert _leaks(warehouse, summary.json(), summary.markdown()) == []


def test_a_fifo_under_an_escaped_name_blocks_nothing(tmp_path, reference):
    """Issue item 2: the excerpt reader opened jax-pmap\\\\xff/<dump>, a FIFO, and blocked the night
    inside the writer lock. The real files are read; the FIFOs collide with their escaped names
    and are left out of the listing."""
    bucket = _bucket(tmp_path / "bucket")
    real = os.fsencode(bucket / NIGHT) + b"/jax-pmap\xff"
    os.rename(bucket / NIGHT / PMAP, real)
    fifos = []
    for name in os.listdir(real):
        fifo = bucket / NIGHT / "jax-pmap\\xff" / os.fsdecode(name)
        fifo.parent.mkdir(parents=True, exist_ok=True)
        if os.path.isfile(real + b"/" + name):
            os.mkfifo(fifo)
            fifos.append(fifo)
    warehouse = tmp_path / "wh.duckdb"
    with _unblocking(fifos) as released:
        summary = _night(bucket, warehouse)
    assert _excerpts(warehouse) == reference[1]
    assert (summary.new, summary.parsed, summary.failed, released) == (9, 9, 0, [])


def test_a_fifo_as_a_dump_and_as_run_json_is_failed_and_the_night_ends(tmp_path):
    bucket = _bucket(tmp_path / "bucket")
    fifo = bucket / NIGHT / PMAP / "module_0009.jit_pipe.before_optimizations.txt"
    os.mkfifo(fifo)
    (bucket / NIGHT / "run.json").unlink()
    os.mkfifo(bucket / NIGHT / "run.json")
    warehouse = tmp_path / "wh.duckdb"
    with _unblocking([fifo, bucket / NIGHT / "run.json"]):
        summary = _night(bucket, warehouse)
    path = f"{NIGHT}/{PMAP}/{fifo.name}"
    assert _query(warehouse, "SELECT kind, status, error FROM dumps WHERE path = ?", [path]) == [
        ("xla_hlo", "failed", f"{path}: not a regular file: FIFO")]
    assert _query(warehouse, "SELECT run_id, meta_errors FROM runs") == [
        (NIGHT, [f"{NIGHT}/run.json: not a regular file: FIFO"])]
    assert (summary.new, summary.parsed, summary.failed) == (10, 9, 1)
    assert summary.run_errors == [f"{NIGHT}/run.json: not a regular file: FIFO"]


def test_run_ids_and_job_names_that_name_nothing_are_refused_by_name(tmp_path):
    """Item 7: '2026-11-20 ' beside '2026-11-20' (a second run that looks like the real one), a job
    padded with a space, a job with an escape sequence: never runs or jobs, each named once
    (escaped) in the night's failures with how many objects it held."""
    bucket = _bucket(tmp_path / "bucket")
    shutil.copytree(bucket / NIGHT, bucket / f"{NIGHT} ")
    shutil.copytree(bucket / NIGHT / PMAP, bucket / NIGHT / f" {PMAP}")
    (bucket / NIGHT / "jax\x1b[2Jpmap").mkdir()
    (bucket / NIGHT / "jax\x1b[2Jpmap" / HLO).write_bytes((bucket / NIGHT / PMAP / HLO).read_bytes())
    files = lambda d: sum(p.is_file() for p in d.rglob("*"))  # noqa: E731
    warehouse = tmp_path / "wh.duckdb"
    summary = _night(bucket, warehouse)
    assert _query(warehouse, "SELECT run_id FROM runs") == [(NIGHT,)]
    assert _query(warehouse, "SELECT DISTINCT run_id, job FROM dumps") == [(NIGHT, PMAP)]
    assert summary.new == files(bucket / NIGHT / PMAP)
    assert summary.failures == [
        f"job name ' {PMAP}' starts or ends with white space: {files(bucket / NIGHT / f' {PMAP}')} objects not read",
        "job name 'jax\\x1b[2Jpmap' holds a control character: 1 object not read",
        f"run id '{NIGHT} ' starts or ends with white space: {files(bucket / f'{NIGHT} ')} objects not read",
    ]


def test_the_same_damaged_content_under_two_paths_names_each_path(tmp_path):
    """Item 7: a content staged (or held by the warehouse) under one path is not parsed again
    under another, and each path's errors name that path, not the first one's."""
    bucket = _bucket(tmp_path / "bucket")
    text = gzip.decompress((bucket / NIGHT / PMAP / HLO).read_bytes())
    cut = text[: text.index(b"\n", len(text) // 2) + 1]
    name = "module_0100.jit_cut.cpu_after_optimizations.txt"
    for job in (PMAP, "jax-copy"):
        (bucket / NIGHT / job).mkdir(exist_ok=True)
        (bucket / NIGHT / job / name).write_bytes(cut)
    warehouse = tmp_path / "wh.duckdb"
    _night(bucket, warehouse)
    (bucket / "2026-11-21" / PMAP).mkdir(parents=True)
    (bucket / "2026-11-21" / PMAP / name).write_bytes(cut)  # the next night: held by the warehouse
    summary = _night(bucket, warehouse)
    assert summary.reused == 1
    rows = _query(warehouse, "SELECT path, status, error FROM dumps WHERE path LIKE '%jit_cut%' ORDER BY path")
    assert [r[0] for r in rows] == [f"{NIGHT}/jax-copy/{name}", f"{NIGHT}/{PMAP}/{name}", f"2026-11-21/{PMAP}/{name}"]
    first = rows[1][2].split("\n")
    assert rows[1][1] == "partial" and all(e.startswith(f"{rows[1][0]}: ") for e in first)
    for path, status, error in rows:
        assert (status, error.split("\n")) == ("partial", [f"{path}: " + e.split(": ", 1)[1] for e in first])


# ---------------------------------------------------------------- dumpscope check


def _check(warehouse: Path, directory: Path, fmt: str = "text"):
    from flows.cli import app

    return CliRunner().invoke(app, ["check", str(directory), "--warehouse", str(warehouse), "--format", fmt])


def _candidate(tmp_path: Path) -> Path:
    pr = tmp_path / "pr"
    shutil.copytree(SAMPLE / NIGHT / PMAP, pr / PMAP)
    shutil.copy(SAMPLE / NIGHT / "run.json", pr / "run.json")
    return pr


def test_check_refuses_a_symlink_out_of_dir_and_quotes_nothing_of_it(reference, tmp_path):
    pr = _candidate(tmp_path)
    link = pr / PMAP / "module_0007.jit_leak.cpu_after_optimizations.txt"
    link.symlink_to(_secret(tmp_path / "home" / ".ssh" / "id_ed25519"))
    text, markdown, as_json = (_check(reference[0], pr, fmt) for fmt in ("text", "markdown", "json"))
    assert f"Damaged dumps:\n  failed      {link}: not a regular file: symlink\n" in text.stdout, text.output
    assert _leaks(None, text.output, markdown.output, as_json.output) == []


def test_check_refuses_a_symlinked_job_directory(reference, tmp_path):
    pr = _candidate(tmp_path)
    key = _secret(tmp_path / "home" / ".ssh" / "module_0000.jit_key.cpu_after_optimizations.txt")
    (pr / "jax-leak").symlink_to(key.parent)
    out = _check(reference[0], pr)
    assert f"Damaged dumps:\n  failed      {pr}/jax-leak: not a regular file: symlink\n" in out.stdout, out.output
    assert _leaks(None, out.output) == []


def test_check_on_a_fifo_as_a_dump_and_as_run_json_ends_and_says_so(reference, tmp_path):
    pr = _candidate(tmp_path)
    fifo = pr / PMAP / "module_0009.jit_pipe.before_optimizations.txt"
    os.mkfifo(fifo)
    (pr / "run.json").unlink()
    os.mkfifo(pr / "run.json")
    with _unblocking([fifo, pr / "run.json"]) as released:
        out = _check(reference[0], pr)
    assert f"Damaged dumps:\n  failed      {fifo}: not a regular file: FIFO\n" in out.stdout, out.output
    assert f"run.json errors (the valid fields were kept):\n  {pr}/run.json: not a regular file: FIFO\n" in out.stdout
    assert released == []


# ---------------------------------------------------------------- the one open, alone


def test_open_object_reads_regular_files_only_and_says_what_it_refused(tmp_path, monkeypatch):
    """A socket (open: ENXIO), a device (as root: open succeeds, fstat refuses), a link below the
    root to a directory and to a file: refused with their kind; the root itself may be a link."""
    import socket

    from flows.ingest.bucket import list_objects, open_object

    from flows.ingest.bucket_access import RefusedObject, connect

    real = tmp_path / "real"
    job = real / NIGHT / PMAP
    job.mkdir(parents=True)
    (job / "module_0000.jit_ok.before_optimizations.txt").write_bytes(b"HloModule ok\n")
    server = socket.socket(socket.AF_UNIX)
    monkeypatch.chdir(job)  # a socket's path is at most 107 bytes: bound by its name
    server.bind("module_0001.jit_sock.before_optimizations.txt")
    if os.geteuid() == 0:
        os.mknod(job / "module_0002.jit_dev.before_optimizations.txt", 0o600 | 0o020000, os.makedev(1, 3))  # /dev/null
    secret = _secret(tmp_path / "home" / "module_0003.jit_key.before_optimizations.txt")
    (job / secret.name).symlink_to(secret)
    (real / NIGHT / "jax-leak").symlink_to(secret.parent)
    (tmp_path / "bucket").symlink_to(real)
    fs, _ = connect(str(tmp_path / "bucket"))
    said = {}
    for obj in list_objects(str(tmp_path / "bucket")):
        try:
            with open_object(fs, obj) as f:
                said[obj.path] = f.read()
        except RefusedObject as exc:
            said[obj.path] = str(exc)
    server.close()
    where = f"{NIGHT}/{PMAP}"
    assert said == {
        f"{where}/module_0000.jit_ok.before_optimizations.txt": b"HloModule ok\n",
        f"{where}/module_0001.jit_sock.before_optimizations.txt":
            f"{where}/module_0001.jit_sock.before_optimizations.txt: not a regular file: socket",
        f"{where}/{secret.name}": f"{where}/{secret.name}: not a regular file: symlink",
        f"{NIGHT}/jax-leak": f"{NIGHT}/jax-leak: not a regular file: symlink",
    } | ({f"{where}/module_0002.jit_dev.before_optimizations.txt":
          f"{where}/module_0002.jit_dev.before_optimizations.txt: not a regular file: character device"}
         if os.geteuid() == 0 else {})
