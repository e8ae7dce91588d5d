"""Bucket discovery: layout, run metadata and time, settling (transforms.layout, flows.bucket)."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import fsspec
import pytest

from flows.bucket import BucketReadError, connect, list_objects, load_settle_state, open_object, read_runs, save_settle_state
from transforms.layout import BucketObject, Role, date_from_run_id, locate, settled

SAMPLE = Path(__file__).parents[1] / "data" / "sample_bucket"
NIGHTS = ["2026-11-17", "2026-11-18", "2026-11-19", "2026-11-20"]
JOBS = {"jax-jit": 17, "jax-pmap": 9, "torch-inductor": 16, "torch-onnx": 2}


@pytest.fixture
def mem_bucket():
    url = f"memory://bucket-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    yield url, fs
    if fs.exists(url):
        fs.rm(url, recursive=True)


@pytest.mark.parametrize("url", [str(SAMPLE), SAMPLE.as_uri()], ids=["path", "file-url"])
def test_sample_bucket_listing(url):
    objs = list_objects(url)
    dumps = Counter((o.run_id, o.job) for o in objs if o.role is Role.DUMP)
    assert dumps == Counter({(n, j): c for n in NIGHTS for j, c in JOBS.items()})
    assert [o.path for o in objs if o.role is Role.RUN_META] == [f"{n}/run.json" for n in NIGHTS]
    one = next(o for o in objs if o.path.endswith("torch-onnx/compiler_figures.json"))
    assert one.size == (SAMPLE / one.path).stat().st_size and one.mtime == (SAMPLE / one.path).stat().st_mtime
    assert any(o.path.count("/") > 4 for o in objs if o.job == "torch-inductor")  # any depth below the job

    runs = read_runs(connect(url)[0], objs)
    assert list(runs) == NIGHTS
    r = runs["2026-11-17"]
    assert (r.started_at, r.time_source, r.commit) == (datetime(2026, 11, 17, 2, tzinfo=timezone.utc), "run.json", "4e1d2a7")
    assert "nightly" in r.tags and r.meta_error is None


def test_run_time_from_iso_date_in_run_id_then_earliest_mtime(mem_bucket):
    url, fs = mem_bucket
    fs.pipe(f"{url}/nightly-2026-03-04T05:06/jax/a.txt", b"HloModule a\n")
    fs.pipe(f"{url}/adhoc/jax/b.txt", b"x")
    fs.pipe(f"{url}/adhoc/jax/deep/c.txt", b"yy")
    fs.pipe(f"{url}/broken/run.json", b"{not json")
    fs.pipe(f"{url}/broken/j/d.txt", b"z")
    fs.pipe(f"{url}/README.md", b"ignored: bucket root")
    objs = list_objects(url)
    assert {o.path for o in objs} == {"nightly-2026-03-04T05:06/jax/a.txt", "adhoc/jax/b.txt", "adhoc/jax/deep/c.txt", "broken/run.json", "broken/j/d.txt"}
    runs = read_runs(fs, objs)
    assert (runs["nightly-2026-03-04T05:06"].started_at, runs["nightly-2026-03-04T05:06"].time_source) == (
        datetime(2026, 3, 4, 5, 6, tzinfo=timezone.utc), "run_id")
    adhoc = runs["adhoc"]
    assert adhoc.time_source == "mtime"
    assert adhoc.started_at.timestamp() == min(o.mtime for o in objs if o.run_id == "adhoc")
    assert runs["broken"].time_source == "mtime" and "broken/run.json: bad JSON" in runs["broken"].meta_error


def test_date_from_run_id():
    assert date_from_run_id("2026-11-17") == datetime(2026, 11, 17, tzinfo=timezone.utc)
    assert date_from_run_id("ci_2026-11-17_02-30-15_abc") == datetime(2026, 11, 17, 2, 30, 15, tzinfo=timezone.utc)
    assert date_from_run_id("2026-13-45-then-2026-01-02") == datetime(2026, 1, 2, tzinfo=timezone.utc)
    assert date_from_run_id("build-1234") is None


def test_layout_regex_maps_a_flat_layout(mem_bucket):
    url, fs = mem_bucket
    for name in ["2026-11-17__jax__m0.txt", "2026-11-17__torch__ir.txt", "2026-11-18__jax__m0.txt", "notes.txt"]:
        fs.pipe(f"{url}/flat/{name}", b"x")
    regex = r"flat/(?P<run_id>[^_]+)__(?P<job>[^_]+)__(?P<rel>.+)"
    objs = list_objects(url, layout_regex=regex)
    assert [(o.run_id, o.job, o.path) for o in objs] == [
        ("2026-11-17", "jax", "flat/2026-11-17__jax__m0.txt"),
        ("2026-11-17", "torch", "flat/2026-11-17__torch__ir.txt"),
        ("2026-11-18", "jax", "flat/2026-11-18__jax__m0.txt"),
    ]
    assert locate("flat/2026-11-17__jax__m0.txt", regex).rel == "m0.txt"
    # An optional job group: run-level files (no job) carry the run's metadata.
    opt = r"(?P<run_id>[^/]+)/(?:(?P<job>[^/]+)/)?.+"
    assert locate("r1/run.json", opt).role is Role.RUN_META
    assert locate("r1/j/run.json", opt).role is Role.DUMP


def test_missing_bucket_raises_bucket_read_error(mem_bucket, tmp_path):
    url, fs = mem_bucket
    assert list_objects(f"{url}/nothing-here") == []  # an empty bucket is not an error
    obj = BucketObject("r/j/gone.txt", f"{url}/r/j/gone.txt", 1, 0.0, "r", "j")
    with pytest.raises(BucketReadError, match="r/j/gone.txt: cannot open"):
        open_object(fs, obj)


def _obj(path: str, size: int, mtime: float, role: Role = Role.DUMP) -> BucketObject:
    run, job = path.split("/")[0], (path.split("/")[1] if path.count("/") > 1 else None)
    return BucketObject(path, "/" + path, size, mtime, run, job, role)


def test_settling_defers_a_growing_file_then_takes_it():
    state: dict = {}
    ready, deferred, state = settled(state, [_obj("r/j/a", 10, 1.0), _obj("r/j/b", 5, 1.0)], now=100.0, settle_seconds=30)
    assert ready == [] and len(deferred) == 2
    # a grows; b is unchanged but not yet settle_seconds old
    ready, deferred, state = settled(state, [_obj("r/j/a", 20, 2.0), _obj("r/j/b", 5, 1.0)], now=110.0, settle_seconds=30)
    assert ready == [] and {o.path for o in deferred} == {"r/j/a", "r/j/b"}
    ready, deferred, state = settled(state, [_obj("r/j/a", 20, 2.0), _obj("r/j/b", 5, 1.0)], now=131.0, settle_seconds=30)
    assert [o.path for o in ready] == ["r/j/b"] and [o.path for o in deferred] == ["r/j/a"]
    ready, deferred, state = settled(state, [_obj("r/j/a", 20, 2.0)], now=140.0, settle_seconds=30)
    assert [o.path for o in ready] == ["r/j/a"] and deferred == [] and set(state) == {"r/j/a"}  # b vanished


def test_settling_marker_zero_interval_and_trusted_mtime():
    listing = [_obj("r/j/a", 1, 99.0), _obj("r/_SUCCESS", 0, 99.0, Role.MARKER), _obj("s/j/b", 1, 99.0), _obj("s/run.json", 1, 99.0, Role.RUN_META)]
    ready, deferred, _ = settled({}, listing, now=100.0, settle_seconds=60)
    assert [o.path for o in ready] == ["r/j/a"] and [o.path for o in deferred] == ["s/j/b"]
    ready, deferred, _ = settled({}, listing, now=100.0, settle_seconds=0)
    assert [o.path for o in ready] == ["r/j/a", "s/j/b"] and deferred == []
    ready, _, _ = settled({}, listing, now=200.0, settle_seconds=60, trust_mtime=True)
    assert [o.path for o in ready] == ["r/j/a", "s/j/b"]


def test_settling_against_a_real_listing_with_marker(mem_bucket, tmp_path):
    url, fs = mem_bucket
    fs.pipe(f"{url}/r1/j/dump.txt", b"HloModule a\n")
    objs = list_objects(url, marker="_SUCCESS")
    _, deferred, state = settled({}, objs, now=1e12, settle_seconds=60)
    assert len(deferred) == 1
    save_settle_state(tmp_path / "settle.json", state)
    assert load_settle_state(tmp_path / "settle.json") == state
    assert load_settle_state(tmp_path / "absent.json") == {}
    fs.pipe(f"{url}/r1/_SUCCESS", b"")
    objs = list_objects(url, marker="_SUCCESS")
    assert {o.role for o in objs} == {Role.DUMP, Role.MARKER}
    ready, deferred, _ = settled(load_settle_state(tmp_path / "settle.json"), objs, now=1e12 + 1, settle_seconds=60)
    assert [o.path for o in ready] == ["r1/j/dump.txt"] and deferred == []
