"""Staging: one object in, content-keyed Parquet + summary.json out (flows.staging)."""

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

from flows import staging
from flows.bucket import BucketReadError, list_objects
from flows.staging import stage_object
from transforms.parse import parse_dump, parser_version
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
    assert res.dir == tmp_path / sha / f"v{parser_version(expected.summary.kind)}"
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
    assert new.parsed and new.dir.name == f"v{hlo.PARSER_VERSION}" and old.dir.exists()


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
    assert (res.summary["kind"], res.summary["status"], res.summary["rows"], res.dir.name) == ("unknown", "ok", {}, "v0")


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
    assert staging.sweep_tmp(tmp_path, older_than_seconds=60) == 1
    assert [p.name for p in (tmp_path / ".tmp").iterdir()] == ["fresh-dir"]
    assert staging.sweep_tmp(tmp_path / "absent") == 0
