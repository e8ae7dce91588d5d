"""Bucket discovery: layout, run metadata and time, settling (transforms.layout, flows.ingest.bucket)."""

from __future__ import annotations

import json
import os
import pickle
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import fsspec
import pytest

from flows.ingest.bucket import list_objects, open_object, read_runs
from flows.ingest.bucket_access import BucketNotFound, BucketReadError, connect
from flows.ingest.settle_state import load_settle_state, save_settle_state
from transforms.layout import (
    RUN_JSON_FIELDS,
    RUN_JSON_MAX_BYTES,
    BucketObject,
    Role,
    date_from_run_id,
    escape_name,
    locate,
    parse_run_json,
    run_info,
    settled,
    unescape_name,
)

SAMPLE = Path(__file__).parents[1] / "data" / "sample_bucket"
NIGHTS = ["2026-11-17", "2026-11-18", "2026-11-19", "2026-11-20"]
JOBS = {"jax-jit": 17, "jax-pmap": 9, "torch-inductor": 16, "torch-onnx": 2, "torch-trace": 2}


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
    assert "nightly" in r.tags and r.meta_errors == ()


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
    assert runs["broken"].time_source == "mtime" and runs["broken"].meta_errors[0].startswith("broken/run.json: not JSON: ")


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


def test_missing_object_raises_bucket_read_error(mem_bucket):
    url, fs = mem_bucket
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


# ---------------------------------------------------------------- names that are not UTF-8


def _write(path: bytes, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def test_escape_name_rule_and_its_one_ambiguity():
    assert escape_name("2026-11-20/jax/m.txt") == "2026-11-20/jax/m.txt"  # valid names unchanged
    assert escape_name("é/ü/日本.txt") == "é/ü/日本.txt"
    raw = b"r/j\xfe/module_\xff\xc3.txt"
    name = os.fsdecode(raw)  # what os.listdir and fsspec give: lone surrogates
    assert escape_name(name) == r"r/j\xfe/module_\xff\xc3.txt"
    assert escape_name(name) == raw.decode("utf-8", "backslashreplace")  # Python's own rule
    assert os.fsencode(unescape_name(escape_name(name))) == raw  # reversible
    assert escape_name("a\ud800b") == r"a\ud800b" and unescape_name(r"a\ud800b") == "a\ud800b"
    assert unescape_name(r"no\x41escape\\") == r"no\x41escape\\"  # \x00..\x7f is never written
    # the one ambiguity: a valid name holding the escape as text reads the same
    assert escape_name(r"a\xff") == escape_name("a\udcff") == r"a\xff"


def test_undecodable_names_listed_escaped_and_opened_by_full_path(tmp_path):
    root = os.fsencode(tmp_path)
    _write(root + b"/2026-11-20/jax/module_\xff.txt", b"HloModule a\n")
    _write(root + b"/2026-11-20/j\xe9b/ok.txt", b"x")  # latin-1 job directory
    _write(root + b"/r\xfcn/jax/b.txt", b"yy")  # latin-1 run directory
    _write(root + b"/2026-11-20/jax/plain.txt", b"z")
    objs = list_objects(str(tmp_path))
    assert [(o.path, o.run_id, o.job) for o in objs] == [
        (r"2026-11-20/j\xe9b/ok.txt", "2026-11-20", r"j\xe9b"),
        ("2026-11-20/jax/module_\\xff.txt", "2026-11-20", "jax"),
        ("2026-11-20/jax/plain.txt", "2026-11-20", "jax"),
        (r"r\xfcn/jax/b.txt", r"r\xfcn", "jax"),
    ]
    for o in objs:  # everything the warehouse stores is valid UTF-8
        for text in (o.path, o.run_id, o.job):
            text.encode("utf-8")
    fs = connect(str(tmp_path))[0]
    weird = objs[1]
    assert os.fsencode(weird.full_path) == root + b"/2026-11-20/jax/module_\xff.txt"
    assert os.fsencode(unescape_name(weird.path)) == b"2026-11-20/jax/module_\xff.txt"
    with open_object(fs, weird) as f:
        assert f.read() == b"HloModule a\n"
    runs = read_runs(fs, objs)
    assert set(runs) == {"2026-11-20", r"r\xfcn"} and runs[r"r\xfcn"].time_source == "mtime"


def test_escaped_name_equal_to_a_real_name_lists_the_real_one(tmp_path, caplog):
    root = os.fsencode(tmp_path)
    _write(root + b"/r/j/m\\xff.txt", b"literal backslash")  # a valid name: backslash, x, f, f
    _write(root + b"/r/j/m\xff.txt", b"undecodable byte")
    objs = list_objects(str(tmp_path))
    assert [o.path for o in objs] == [r"r/j/m\xff.txt"]  # one warehouse key, not two
    assert objs[0].full_path.endswith(r"r/j/m\xff.txt")  # the real name's file
    assert "two names read" in caplog.text


# ---------------------------------------------------------------- run.json

NOW = datetime(2026, 11, 21, 12, tzinfo=timezone.utc)


def _meta(raw: bytes, run_id: str = "2026-11-20"):
    meta, errors = parse_run_json(raw, f"{run_id}/run.json")
    return run_info(run_id, meta, [NOW.timestamp() - 3600], meta_errors=errors, now=NOW)


@pytest.mark.parametrize("raw, errors", [
    (b"[" * 100_000, ["2026-11-20/run.json: nested too deeply to read (over 256 levels)"]),
    # the depth is counted before json reads it (outside strings), so json never recurses near the interpreter's limit
    (b'{"x": ' + b"[" * 256 + b"]" * 256 + b"}", ["2026-11-20/run.json: nested too deeply to read (over 256 levels)"]),
    (b'{"deep": ' + b"[" * 40 + b'"' + b"[" * 300 + b'"' + b"]" * 40 + b"}",
     ["2026-11-20/run.json: deep: nested deeper than 32 levels, left out"]),
    (b"{not json", ["2026-11-20/run.json: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"]),
    (b'["a"]', ["2026-11-20/run.json: the top level is a list, not an object"]),
    (b'"x"', ["2026-11-20/run.json: the top level is a string, not an object"]),
    (b"\xff\xfe{}", None),  # not UTF-8: reported as not JSON (the message is Python's)
    (b'{"started_at": "9999-01-01T00:00:00"}',
     ["2026-11-20/run.json: started_at: 9999-01-01T00:00:00 is outside 2000-01-01 .. now + 1 day"]),
    (b'{"started_at": "1970-01-01T00:00:00Z"}',
     ["2026-11-20/run.json: started_at: 1970-01-01T00:00:00Z is outside 2000-01-01 .. now + 1 day"]),
    (b'{"started_at": "2026-02-30T02:00:00"}', ["2026-11-20/run.json: started_at: day is out of range for month"]),
    (b'{"started_at": "last tuesday"}', ["2026-11-20/run.json: started_at: Invalid isoformat string: 'last tuesday'"]),
    (b'{"started_at": 1795000000}', ["2026-11-20/run.json: started_at is a number, not an ISO 8601 time (UTC when it has no zone), 2000-01-01 .. now + 1 day"]),
    (b'{"commit": ["a", "b"]}', ["2026-11-20/run.json: commit is a list, not a string of 1..256 characters"]),
    (b'{"commit": ""}', ["2026-11-20/run.json: commit: String should have at least 1 character"]),
    (b'{"commit": "' + b"c" * 300 + b'"}', ["2026-11-20/run.json: commit: String should have at most 256 characters"]),
    (b'{"commit": "\\ud800"}', ["2026-11-20/run.json: commit is not valid Unicode (a lone surrogate)"]),
    (b'{"tags": "x"}', ["2026-11-20/run.json: tags is a string, not a list of at most 64 strings of 1..128 characters"]),
    (b'{"tags": [1, {}]}', ["2026-11-20/run.json: tags[0] is a number, not a string",
                            "2026-11-20/run.json: tags[1] is an object, not a string"]),
    (json.dumps({"tags": [f"t{i}" for i in range(65)]}).encode(),
     ["2026-11-20/run.json: tags: List should have at most 64 items after validation, not 65"]),
    (b'{"note": NaN}', ["2026-11-20/run.json: note: holds NaN or Infinity, which JSON has no form for, left out"]),
    (b'{"deep": ' + b"[" * 40 + b"]" * 40 + b"}", ["2026-11-20/run.json: deep: nested deeper than 32 levels, left out"]),
    (b'{"\\udcff": 1}', [r"2026-11-20/run.json: \xff: the name is not valid Unicode (a lone surrogate), left out"]),
    (b'{"v": "\\udcff"}', ["2026-11-20/run.json: v: not valid Unicode (a lone surrogate), left out"]),
], ids=["deep", "deep-257", "brackets-in-a-string", "not-json", "list", "string", "not-utf8", "year-9999", "1970", "feb-30", "not-iso", "number",
        "commit-list", "commit-empty", "commit-long", "commit-surrogate", "tags-string", "tags-items", "tags-many",
        "nan", "extra-deep", "bad-key", "bad-value"])
def test_bad_run_json_is_reported_per_field_and_the_time_falls_back(raw, errors):
    info = _meta(raw)  # never raises
    if errors is None:
        assert len(info.meta_errors) == 1 and info.meta_errors[0].startswith("2026-11-20/run.json: not JSON: ")
    else:
        assert list(info.meta_errors) == errors
    assert (info.started_at, info.time_source) == (datetime(2026, 11, 20, tzinfo=timezone.utc), "run_id")
    assert info.commit is None and info.tags == () and info.extra == {}
    for e in info.meta_errors:
        e.encode("utf-8")  # storable


def test_run_json_keeps_what_is_valid_in_utc():
    raw = json.dumps({"started_at": "2026-11-20T03:30:00+02:00", "commit": ["a"], "tags": ["nightly", "cpu"],
                      "host": {"name": "ci-7", "cores": 2}, "deep": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
                      "big": "x" * (70 << 10), "after": 1}).encode()
    info = _meta(raw)
    assert info.started_at == datetime(2026, 11, 20, 1, 30, tzinfo=timezone.utc)
    assert info.started_at.tzinfo is timezone.utc and info.time_source == "run.json"
    assert info.commit is None and info.tags == ("nightly", "cpu")
    assert info.extra == {"host": {"name": "ci-7", "cores": 2}, "after": 1}
    assert list(info.meta_errors) == [
        "2026-11-20/run.json: commit is a list, not a string of 1..256 characters",
        "2026-11-20/run.json: deep: nested deeper than 32 levels, left out",
        "2026-11-20/run.json: big: over the 64 KiB the free fields may take together, left out",
    ]
    # naive times are UTC; null known fields count as absent
    info = _meta(b'{"started_at": "2026-11-20 02:00", "commit": null, "tags": null}')
    assert (info.started_at, info.meta_errors) == (datetime(2026, 11, 20, 2, tzinfo=timezone.utc), ())
    assert set(RUN_JSON_FIELDS) == {"started_at", "commit", "tags"}


def test_run_times_outside_the_window_fall_through_to_a_believable_one():
    late = NOW + timedelta(days=2)
    info = run_info("9999-01-01", None, [NOW.timestamp() - 60, late.timestamp()], now=NOW)
    assert (info.started_at, info.time_source) == (NOW - timedelta(seconds=60), "mtime")
    info = run_info("adhoc", None, [0.0, late.timestamp()], now=NOW)
    assert (info.started_at, info.time_source) == (NOW, "now")
    assert run_info("adhoc", None, [], now=NOW).started_at == NOW


def test_read_runs_bounds_run_json(mem_bucket):
    url, fs = mem_bucket
    fs.pipe(f"{url}/2026-11-20/run.json", b'{"commit": "' + b"c" * RUN_JSON_MAX_BYTES + b'"}')
    fs.pipe(f"{url}/2026-11-20/j/a.txt", b"x")
    fs.pipe(f"{url}/2026-11-21/run.json", b"[" * 100_000)
    fs.pipe(f"{url}/2026-11-21/j/a.txt", b"x")
    runs = read_runs(fs, list_objects(url))
    assert runs["2026-11-20"].meta_errors == (
        f"2026-11-20/run.json: {RUN_JSON_MAX_BYTES + 14} bytes, larger than {RUN_JSON_MAX_BYTES}: not read",)
    assert runs["2026-11-21"].meta_errors == ("2026-11-21/run.json: nested too deeply to read (over 256 levels)",)
    assert parse_run_json(b" " * (RUN_JSON_MAX_BYTES + 1), "r/run.json")[1] == [
        f"r/run.json: larger than {RUN_JSON_MAX_BYTES} bytes, not read"]  # grew after the listing


# ---------------------------------------------------------------- missing buckets


def test_missing_bucket_raises_bucket_not_found(mem_bucket, tmp_path):
    for url in (str(tmp_path / "no-such-dir"), (tmp_path / "no-such-dir").as_uri(), f"{mem_bucket[0]}/nothing-here"):
        with pytest.raises(BucketNotFound) as caught:
            list_objects(url)
        assert str(caught.value) == f"no bucket at {url}" and caught.value.url == url
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(BucketNotFound, match="a-file \\(a file, not a directory\\)"):
        list_objects(str(tmp_path / "a-file"))
    (tmp_path / "empty").mkdir()
    assert list_objects(str(tmp_path / "empty")) == []  # an empty bucket is not an error
    url, fs = mem_bucket
    fs.mkdir(f"{url}/empty")
    assert list_objects(f"{url}/empty") == []


def test_a_listing_that_loses_a_folder_is_a_read_error_not_a_missing_bucket(tmp_path, monkeypatch):
    from fsspec.implementations.local import LocalFileSystem

    def vanished(self, path, **kwargs):
        raise FileNotFoundError(f"{path}/r: gone while listing")

    monkeypatch.setattr(LocalFileSystem, "find", vanished)
    with pytest.raises(BucketReadError, match="cannot list: .*gone while listing") as caught:
        list_objects(str(tmp_path))  # the bucket is there: retried, not reported as missing
    assert not isinstance(caught.value, BucketNotFound)


def test_bucket_errors_survive_pickling():
    """Dask and process pools pickle exceptions: they must come back whole."""
    for exc in (BucketNotFound("s3://b/p"), BucketReadError("r/j/a.txt", "cannot open: boom")):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc) and back.__dict__ == exc.__dict__


# ---------------------------------------------------------------- object versions


def test_local_version_is_mtime_ns_and_sees_a_same_size_rewrite(tmp_path):
    dump = tmp_path / "r" / "j" / "a.txt"
    dump.parent.mkdir(parents=True)
    dump.write_bytes(b"aaaa")
    before = list_objects(str(tmp_path))[0]
    assert before.version == str(dump.stat().st_mtime_ns)
    st = dump.stat()
    dump.write_bytes(b"bbbb")  # rewritten in place, same size, mtime 1 ns later: the float seconds cannot tell
    os.utime(dump, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    after = list_objects(str(tmp_path))[0]
    assert (after.size, after.mtime) == (before.size, before.mtime)
    assert after.version == str(st.st_mtime_ns + 1) != before.version


def test_memory_version_changes_with_a_rewrite(mem_bucket):
    url, fs = mem_bucket
    fs.pipe(f"{url}/r/j/a.txt", b"aaaa")
    before = list_objects(url)[0]
    assert before.version.isdigit()
    fs.pipe(f"{url}/r/j/a.txt", b"bbbb")
    assert list_objects(url)[0].version != before.version
