"""Staging: one object in, content-keyed Parquet + summary.json out (flows.ingest.staging)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import uuid
from pathlib import Path

import fsspec
import polars as pl
import pyarrow.parquet as pq
import pytest

from flows.ingest import staging

from flows.ingest import housekeeping
from flows.ingest.bucket import list_objects
from flows.ingest.bucket_access import BucketReadError
from flows.ingest.staging import stage_object
from transforms.parse import ParseLimits, parse_dump, parser_version
from transforms.records import DumpKind, ParseError

SEEDS = Path(__file__).parent / "fixtures" / "seeds"
SEED = SEEDS / "001_a0c5460ce1af2dbe.txt"
SAMPLE_GZ = "2026-11-20/jax-jit/module_0000.jit_train_step.cpu_after_optimizations.txt.gz"


@pytest.fixture
def bucket():
    url = f"memory://stage-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    yield url, fs
    if fs.exists(url):
        fs.rm(url, recursive=True)


def _put(bucket, path: str, data: bytes):
    url, fs = bucket
    fs.pipe(f"{url}/{path}", data)
    return next(o for o in list_objects(url) if o.path == path)


def _seed_gz() -> bytes:
    root = Path(__file__).parents[1] / "data" / "sample_bucket"
    return (root / SAMPLE_GZ).read_bytes()


@pytest.mark.parametrize("path, data", [("r/j/001.txt", SEED.read_bytes()), (SAMPLE_GZ, _seed_gz())], ids=["seed", "gz"])
def test_staged_tables_match_parse_dump(bucket, tmp_path, path, data):
    obj = _put(bucket, path, data)
    res = stage_object(bucket[1], obj, tmp_path)
    sha = hashlib.sha256(data).hexdigest()
    expected = parse_dump(io.BytesIO(data), path, dump_id=sha)
    assert res.parsed and res.sha256 == sha
    assert res.dir == tmp_path / sha / f"{expected.summary.kind}-v{parser_version(expected.summary.kind)}"
    assert expected.tables and set(res.tables) == set(expected.tables)
    for table, frame in expected.tables.items():
        got = pl.read_parquet(res.tables[table])
        assert got.height == frame.height == res.summary["rows"][table]
        assert got["dump_id"].unique().to_list() == [sha]
        assert got.cast(frame.schema).equals(frame)
    on_disk = json.loads((res.dir / "summary.json").read_text())
    assert on_disk == res.summary
    s = expected.summary
    assert (on_disk["kind"], on_disk["stage"], on_disk["program"], on_disk["status"]) == (s.kind, s.stage, s.program, s.status)
    assert (on_disk["errors"], on_disk["metrics"], on_disk["size"]) == (s.errors, s.metrics, len(data))
    assert list((tmp_path / ".tmp").iterdir()) == []


def test_same_content_under_two_paths_is_parsed_once(bucket, tmp_path, monkeypatch):
    calls = []
    real = staging.iter_dump
    monkeypatch.setattr(staging, "iter_dump", lambda *a, **k: (calls.append(a[1]), real(*a, **k))[1])
    data = SEED.read_bytes()
    first = stage_object(bucket[1], _put(bucket, "r1/j/a.txt", data), tmp_path)
    mtime = first.dir.stat().st_mtime_ns
    again = stage_object(bucket[1], _put(bucket, "r2/j/b.txt", data), tmp_path)
    retry = stage_object(bucket[1], _put(bucket, "r1/j/a.txt", data), tmp_path)
    assert calls == ["r1/j/a.txt"]
    assert (again.parsed, retry.parsed) == (False, False)
    assert again.dir == first.dir and again.summary == first.summary and first.dir.stat().st_mtime_ns == mtime


def test_a_new_parser_version_restages(bucket, tmp_path, monkeypatch):
    import transforms.parsers.xla_hlo as hlo

    obj = _put(bucket, "r/j/a.txt", SEED.read_bytes())
    old = stage_object(bucket[1], obj, tmp_path)
    monkeypatch.setattr(hlo, "PARSER_VERSION", hlo.PARSER_VERSION + 1)
    new = stage_object(bucket[1], obj, tmp_path)
    assert new.parsed and new.dir.name == f"xla_hlo-v{hlo.PARSER_VERSION}" and old.dir.exists()


def test_a_crash_mid_staging_leaves_no_final_dir(bucket, tmp_path, monkeypatch):
    class Exploding(pq.ParquetWriter):
        def write_table(self, *a, **k):
            raise RuntimeError("disk on fire")

    monkeypatch.setattr(staging.pq, "ParquetWriter", Exploding)
    data = SEED.read_bytes()
    obj = _put(bucket, "r/j/a.txt", data)
    with pytest.raises(RuntimeError, match="disk on fire"):
        stage_object(bucket[1], obj, tmp_path)
    sha = hashlib.sha256(data).hexdigest()
    assert not (tmp_path / sha).exists() and list((tmp_path / ".tmp").iterdir()) == []
    monkeypatch.undo()
    assert stage_object(bucket[1], obj, tmp_path).parsed  # the rerun completes


def test_a_corrupt_gz_stages_a_partial_summary(bucket, tmp_path):
    packed = gzip.compress(SEED.read_bytes())
    obj = _put(bucket, "r/j/cut.txt.gz", packed[: len(packed) // 2])
    res = stage_object(bucket[1], obj, tmp_path)
    assert res.summary["status"] == "partial" and res.summary["kind"] == DumpKind.XLA_HLO
    assert any(e.startswith("r/j/cut.txt.gz: line ") for e in res.summary["errors"])
    assert res.summary["rows"]  # the readable prefix is kept


def test_a_failed_dump_stages_a_summary_without_tables(bucket, tmp_path, monkeypatch):
    import transforms.parsers.xla_hlo as hlo

    real = hlo.parse

    def half_then_refuse(lines):
        yield from (item for item in real(lines) if not hasattr(item, "kind"))
        raise ParseError("gave up", 7)

    monkeypatch.setattr(hlo, "parse", half_then_refuse)
    res = stage_object(bucket[1], _put(bucket, "r/j/a.txt", SEED.read_bytes()), tmp_path)
    assert res.summary["status"] == "failed" and res.summary["errors"] == ["r/j/a.txt: line 7: gave up"]
    assert res.summary["rows"] == {} and sorted(p.name for p in res.dir.iterdir()) == ["summary.json"]


def test_unknown_files_stage_a_summary(bucket, tmp_path):
    res = stage_object(bucket[1], _put(bucket, "r/j/compiler_figures.json", b'{"a": 1}'), tmp_path)
    assert (res.summary["kind"], res.summary["status"], res.summary["rows"], res.dir.name) == ("unknown", "ok", {}, "unknown-v0")


def test_io_errors_raise_bucket_read_error(bucket, tmp_path):
    url, fs = bucket
    obj = _put(bucket, "r/j/a.txt", b"HloModule m\n")
    fs.pipe(f"{url}/r/j/a.txt", b"HloModule m\nmore\n")  # grew after listing
    with pytest.raises(BucketReadError, match="r/j/a.txt: changed since listing"):
        stage_object(fs, obj, tmp_path)
    fs.rm(f"{url}/r/j/a.txt")
    with pytest.raises(BucketReadError, match="r/j/a.txt: cannot open"):
        stage_object(fs, obj, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [".tmp"]


def test_sweep_tmp_removes_only_old_leftovers(tmp_path):
    import os

    old, fresh = tmp_path / ".tmp" / "old-dir", tmp_path / ".tmp" / "fresh-dir"
    for d in (old, fresh):
        d.mkdir(parents=True)
        (d / "t.parquet").write_bytes(b"x")
    os.utime(old, (0, 0))
    assert housekeeping.sweep_tmp(tmp_path, older_than_seconds=60) == 1
    assert [p.name for p in (tmp_path / ".tmp").iterdir()] == ["fresh-dir"]
    assert housekeeping.sweep_tmp(tmp_path / "absent") == 0


# --- Limits reach the parse; a larger limit parses again (issue 11, item 9) ---

LONG_LINE_HLO = (b"HloModule m\n\nENTRY e {\n  ROOT p = f32[] parameter(0), metadata={op_name=\""
                 + b"x" * (2 << 20) + b"\"}\n}\n")


def test_limits_reach_the_parse_and_a_larger_one_parses_again(bucket, tmp_path):
    obj = _put(bucket, "r/j/module_0001.big.after_optimizations.txt", LONG_LINE_HLO)
    small = ParseLimits(max_line_bytes=1 << 20)
    failed = stage_object(bucket[1], obj, tmp_path, limits=small)
    assert failed.summary["status"] == "failed" and failed.summary["rows"] == {}
    assert failed.summary["errors"] == [f"{obj.path}: line 4 is longer than max_line_bytes (1.0 MiB, 1,048,576 bytes); "
                                        "raise --max-line-bytes to read it"]
    assert failed.summary["limit"] == {"name": "max_line_bytes", "value": 1 << 20}
    assert not stage_object(bucket[1], obj, tmp_path, limits=small).parsed  # the same limit: the same verdict
    read = stage_object(bucket[1], obj, tmp_path, limits=ParseLimits(max_line_bytes=4 << 20))
    assert read.parsed and read.summary["status"] == "ok" and read.summary["limit"] is None
    assert read.dir == failed.dir and json.loads((read.dir / "summary.json").read_text()) == read.summary
    assert stage_object(bucket[1], obj, tmp_path, limits=small).summary == read.summary  # a good result stays
    assert list((tmp_path / ".tmp").iterdir()) == []


# --- The kind depends on the name: one content, two verdicts (issue 11, item 10) ---


def test_empty_content_gets_the_kind_each_name_promises(bucket, tmp_path):
    notes = stage_object(bucket[1], _put(bucket, "r/j/notes.txt", b""), tmp_path)
    hlo = stage_object(bucket[1], _put(bucket, "r/j/module_0001.jit_f.cpu_after_optimizations.txt", b""), tmp_path)
    code = stage_object(bucket[1], _put(bucket, "r/j/g/output_code.py", b""), tmp_path)
    again = stage_object(bucket[1], _put(bucket, "r/k/module_0002.jit_g.before_optimizations.txt", b""), tmp_path)
    assert (notes.summary["kind"], notes.summary["status"]) == ("unknown", "ok")
    assert (hlo.summary["kind"], hlo.summary["status"]) == ("xla_hlo", "failed") and hlo.parsed
    assert (code.summary["kind"], code.summary["status"]) == ("inductor_output_code", "failed") and code.parsed
    assert "is empty" in hlo.summary["errors"][0] and "is empty" in code.summary["errors"][0]
    assert not again.parsed and again.dir == hlo.dir
    assert len({notes.dir, hlo.dir, code.dir}) == 3 and notes.sha256 == hlo.sha256 == code.sha256


# --- Housekeeping (issue 11, item 3) ---


def test_clean_staging_leftovers_removes_what_killed_stagings_left(bucket, tmp_path):
    kept = stage_object(bucket[1], _put(bucket, "r/j/a.txt", SEED.read_bytes()), tmp_path)
    tmp = tmp_path / ".tmp"
    killed = tmp / f"{'ab' * 32}-{uuid.uuid4().hex}"  # a writer killed mid-way
    killed.mkdir()
    (killed / "hlo_instructions.parquet").write_bytes(b"PAR1 half written")
    (tmp / f"{'ab' * 32}-{uuid.uuid4().hex}").mkdir()  # one killed before it wrote anything
    (tmp / "tmpk1ll3d").write_bytes(b"spool of a killed worker")
    (tmp_path / ("cd" * 32)).mkdir()  # a content dir whose result never got renamed in
    assert housekeeping.clean_staging_leftovers(tmp_path) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".tmp", kept.sha256])
    assert list(tmp.iterdir()) == []
    assert staging.find_staged(tmp_path, kept.sha256) == staging.StagedResult(kept.sha256, kept.dir, kept.summary, False)
    assert housekeeping.clean_staging_leftovers(tmp_path) == 0
    assert housekeeping.clean_staging_leftovers(tmp_path / "absent") == 0


def test_prune_staging_keeps_only_what_it_is_told(bucket, tmp_path):
    staged = [stage_object(bucket[1], _put(bucket, f"r/j/{i}.txt", SEED.read_bytes() + b"\n" * i), tmp_path)
              for i in range(3)]
    stale = staged[0].dir.parent / "xla_hlo-v1"  # a result of an older parser version
    stale.mkdir()
    (stale / "summary.json").write_text(json.dumps({"kind": "xla_hlo", "parser_version": 1}))
    legacy = staged[0].dir.parent / "v0"  # the layout before results were keyed by kind
    legacy.mkdir()
    (legacy / "summary.json").write_text(json.dumps({"kind": "unknown", "parser_version": 0}))
    (tmp_path / ".tmp" / "in-flight").mkdir()
    assert housekeeping.prune_staging(tmp_path, {staged[0].sha256}) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".tmp", staged[0].sha256])
    assert [p.name for p in staged[0].dir.parent.iterdir()] == [staged[0].dir.name]  # the stale result went
    assert (tmp_path / ".tmp" / "in-flight").is_dir()  # prune leaves temp entries to clean_staging_leftovers
    assert stage_object(bucket[1], _put(bucket, "r/j/0.txt", SEED.read_bytes()), tmp_path).parsed is False
    assert housekeeping.prune_staging(tmp_path, set()) == 1 and sorted(p.name for p in tmp_path.iterdir()) == [".tmp"]


def test_drop_staged_removes_the_contents_it_is_given(bucket, tmp_path):
    staged = [stage_object(bucket[1], _put(bucket, f"r/j/{i}.txt", SEED.read_bytes() + b"\n" * i), tmp_path)
              for i in range(3)]
    assert housekeeping.staged_contents(tmp_path) == {s.sha256 for s in staged}
    assert housekeeping.drop_staged(tmp_path, {staged[1].sha256, "0" * 64}) == 1
    assert housekeeping.staged_contents(tmp_path) == {staged[0].sha256, staged[2].sha256}
    assert housekeeping.staged_contents(tmp_path / "absent") == set()


_KILLED_WRITER = r"""
import sys, time
import fsspec
from flows.ingest import staging
from flows.ingest.bucket import list_objects

real = staging.iter_dump

def stalls(*args, **kwargs):  # writes the first batch, then hangs: the parent kills it there
    for item in real(*args, **kwargs):
        yield item
        time.sleep(3600)

staging.iter_dump = stalls
bucket, out = sys.argv[1], sys.argv[2]
obj = next(o for o in list_objects(bucket) if o.path.endswith(".txt"))
staging.stage_object(fsspec.filesystem("file"), obj, out)
"""


@pytest.mark.integration
def test_a_killed_staging_leaves_leftovers_that_clean_staging_leftovers_removes(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "bucket" / "r" / "j").mkdir(parents=True)
    (tmp_path / "bucket" / "r" / "j" / "a.txt").write_bytes(SEED.read_bytes())
    out = tmp_path / "staging"
    child = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(tmp_path / "bucket"), str(out)],
                             cwd=Path(__file__).parents[1])
    try:
        deadline = time.monotonic() + 60
        while not list((out / ".tmp").glob("*/hlo_instructions.parquet")) and time.monotonic() < deadline:
            assert child.poll() is None, "the writer ended before it was killed"
            time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert list((out / ".tmp").glob("*/hlo_instructions.parquet"))  # what the kill left
    assert housekeeping.clean_staging_leftovers(out) >= 1
    assert list((out / ".tmp").iterdir()) == [] and sorted(p.name for p in out.iterdir()) == [".tmp"]


def test_a_held_content_is_recognised_by_hashing_alone_and_anything_else_is_left_to_stage_object(bucket, tmp_path):
    """``recognise_held`` (the nightly's threads, for contents the warehouse holds): the
    same answer ``stage_object`` gives for a held content, and None whenever that one
    would have to look further — not held, another kind under this name, another
    parser version, or bytes that are not what the listing said."""
    data = _seed_gz()
    sha = hashlib.sha256(data).hexdigest()
    obj = _put(bucket, SAMPLE_GZ, data)
    summary = staging.held_summary("xla_hlo", "after_optimizations", "jit_train_step", "ok", None,
                                   parser_version(DumpKind.XLA_HLO))
    held = {sha: summary}
    got = staging.recognise_held(bucket[1], obj, tmp_path, held)
    assert got == stage_object(bucket[1], obj, tmp_path, held=held)
    assert got.sha256 == sha and not got.parsed and got.summary["held"]
    assert staging.recognise_held(bucket[1], obj, tmp_path, {}) is None
    assert staging.recognise_held(bucket[1], obj, tmp_path, {sha: summary | {"kind": "xla_buffers"}}) is None
    assert staging.recognise_held(bucket[1], obj, tmp_path, {sha: summary | {"parser_version": 0}}) is None
    _put(bucket, SAMPLE_GZ, data + b"more")  # the object grew after it was listed
    assert staging.recognise_held(bucket[1], obj, tmp_path, held) is None
    assert housekeeping.staged_contents(tmp_path) == set()  # nothing staged


def test_a_held_content_under_the_file_name_it_was_held_under_is_not_sniffed_again(bucket, tmp_path, monkeypatch):
    """Its kind is the one the warehouse holds it as (``kind_of`` reads the file name and the
    head, and the same bytes have the same head); under another file name it is sniffed."""
    data = _seed_gz()
    sha = hashlib.sha256(data).hexdigest()
    obj = _put(bucket, SAMPLE_GZ, data)
    name = SAMPLE_GZ.rsplit("/", 1)[-1]
    held = {sha: staging.held_summary("xla_hlo", "after_optimizations", "jit_train_step", "ok", None,
                                      parser_version(DumpKind.XLA_HLO), first_path=f"2026-01-01/other-job/{name}")}
    sniffed = []
    real = staging._kind
    monkeypatch.setattr(staging, "_kind", lambda o, head: sniffed.append(o.path) or real(o, head))
    got = staging.recognise_held(bucket[1], obj, tmp_path, held)
    assert got is not None and got.sha256 == sha and sniffed == []
    assert got == stage_object(bucket[1], obj, tmp_path, held=held)
    elsewhere = {sha: held[sha] | {"first_path": "2026-01-01/other-job/module_0001.other.txt.gz"}}
    sniffed.clear()  # stage_object sniffs: its threads' shortcut is recognise_held's
    again = staging.recognise_held(bucket[1], obj, tmp_path, elsewhere)
    assert (again.sha256, again.summary["kind"], sniffed) == (sha, "xla_hlo", [obj.path])
    # A kind this version does not know, or held as unknown (a format learnt since would know it): sniffed.
    sniffed.clear()
    assert staging.recognise_held(bucket[1], obj, tmp_path, {sha: held[sha] | {"kind": "xla_buffers"}}) is None
    assert staging.recognise_held(bucket[1], obj, tmp_path, {sha: held[sha] | {"kind": "unknown", "parser_version": 0}}) is None
    assert sniffed == [obj.path, obj.path]
