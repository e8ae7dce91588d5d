"""Hostile buckets through a whole night (flows.nightly on small copies of the sample):
a file name that is not UTF-8, broken run.json files, a bucket that does not exist, a
dump rewritten in place at the same size."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from flows.ingest.bucket_access import BucketNotFound
from flows.warehouse import store as wh

SAMPLE = Path(__file__).parents[1] / "data" / "sample_bucket"
PMAP = "jax-pmap"  # the smallest sample job: 9 dumps


def _night(bucket: Path, warehouse: Path):
    """A night's steps in this process (``night_in_process``)."""
    from flows.nightly import night_in_process

    return night_in_process(bucket=str(bucket), warehouse=warehouse, workers=2)


def _flow_night(bucket: Path, warehouse: Path):
    """The nightly flow itself: its discover task's retries are what is tested."""
    from flows.nightly import nightly

    return nightly(bucket=str(bucket), warehouse=warehouse, workers=2)


def _query(warehouse: Path, sql: str, params: list | None = None) -> list[tuple]:
    with wh.connect_readonly(warehouse) as con:
        return con.execute(sql, params or []).fetchall()


def _small_bucket(root: Path, nights: tuple[str, ...] = ("2026-11-20",), run_json: bool = True) -> Path:
    for night in nights:
        shutil.copytree(SAMPLE / night / PMAP, root / night / PMAP)
        if run_json:
            shutil.copy(SAMPLE / night / "run.json", root / night / "run.json")
    return root


def _count_listings(mp: pytest.MonkeyPatch) -> list[str]:
    """The buckets the nightly lists from now on (one per discover attempt)."""
    import flows.nightly as nightly_module

    calls: list[str] = []
    listing = nightly_module.list_objects

    def counting(bucket, **kwargs):
        calls.append(bucket)
        return listing(bucket, **kwargs)

    mp.setattr(nightly_module, "list_objects", counting)
    return calls


@pytest.fixture
def fast_discover_retries(monkeypatch):
    """discover as the nightly declares it, minus the waits between retries; counts the listings."""
    import flows.nightly as nightly_module

    monkeypatch.setattr(nightly_module, "discover", nightly_module.discover.with_options(retry_delay_seconds=0))
    return _count_listings(monkeypatch)


def test_undecodable_file_name_loads_escaped_with_the_rest_and_stays_loaded(tmp_path):
    bucket = _small_bucket(tmp_path / "bucket")
    hlo = gzip.decompress(next((bucket / "2026-11-20" / PMAP).glob("*.cpu_after_optimizations.txt.gz")).read_bytes())
    weird = os.fsencode(bucket / "2026-11-20" / PMAP) + b"/module_\xff.after_optimizations.txt.gz"
    with open(weird, "wb") as f:  # different bytes (cut short): its own dump, failed or partial, naming its file
        f.write(gzip.compress(hlo.replace(b"HloModule ", b"HloModule weird_", 1))[:-300])
    warehouse = tmp_path / "wh.duckdb"

    first = _night(bucket, warehouse)
    escaped = rf"2026-11-20/{PMAP}/module_\xff.after_optimizations.txt.gz"
    assert (first.seen, first.new, first.unreadable) == (10, 10, 0)
    assert first.parsed + first.failed == 10 and first.parsed >= 9
    assert _query(warehouse, "SELECT count(*) FROM dumps WHERE path <> ? AND status = 'ok'", [escaped]) == [(9,)]
    [(path, run_id, job, status, error)] = _query(
        warehouse, "SELECT path, run_id, job, status, error FROM dumps WHERE path LIKE '%module\\_\\\\x%' ESCAPE '\\'")
    assert (path, run_id, job) == (escaped, "2026-11-20", PMAP) and status in ("partial", "failed")
    assert escaped in error  # the parser's error names the file by its escaped name
    assert any(f.startswith(escaped) for f in first.failures)  # and so does the night's summary

    second = _night(bucket, warehouse)  # every later night: nothing new, nothing broken
    assert (second.seen, second.new, second.skipped, second.unreadable) == (10, 0, 10, 0)


@pytest.fixture(scope="module")
def bad_run_json_night(tmp_path_factory):
    """Two runs with broken run.json files, one night."""
    root = tmp_path_factory.mktemp("bad-run-json")
    bucket = _small_bucket(root / "bucket", ("2026-11-19", "2026-11-20"), run_json=False)
    (bucket / "2026-11-19" / "run.json").write_text("[" * 100_000)  # RecursionError in json.loads
    (bucket / "2026-11-20" / "run.json").write_text(
        '{"started_at": "9999-01-01T00:00:00Z", "commit": ["a", "b"], "tags": ["nightly", 3], "host": "ci-7", "n": NaN}')
    warehouse = root / "wh.duckdb"
    with pytest.MonkeyPatch.context() as mp:
        calls = _count_listings(mp)
        summary = _night(bucket, warehouse)
    return summary, warehouse, calls


def test_broken_run_json_keeps_the_night_going(bad_run_json_night):
    summary, warehouse, calls = bad_run_json_night
    assert len(calls) == 1  # discover did not fail (the deep one raised RecursionError, retried three times)
    assert (summary.new, summary.failed, summary.unreadable) == (18, 0, 0)
    assert "2026-11-19/run.json: nested too deeply to read (over 256 levels)" in summary.run_errors  # the summary says so
    assert "run.json errors" in summary.markdown()
    rows = _query(warehouse, 'SELECT run_id, started_at, "commit", tags, extra FROM runs ORDER BY run_id')
    assert [(r[0], r[1].isoformat(), r[2], r[3]) for r in rows] == [
        ("2026-11-19", "2026-11-19T00:00:00", None, []),  # the time from the run id, not year 9999
        ("2026-11-20", "2026-11-20T00:00:00", None, []),
    ]
    assert '"host"' in rows[1][4] and "NaN" not in rows[1][4]


def test_broken_run_json_errors_reach_the_warehouse(bad_run_json_night):
    _, warehouse, _ = bad_run_json_night
    assert dict(_query(warehouse, "SELECT run_id, meta_errors FROM runs")) == {
        "2026-11-19": ["2026-11-19/run.json: nested too deeply to read (over 256 levels)"],
        "2026-11-20": [
            "2026-11-20/run.json: started_at: 9999-01-01T00:00:00Z is outside 2000-01-01 .. now + 1 day",
            "2026-11-20/run.json: commit is a list, not a string of 1..256 characters",
            "2026-11-20/run.json: tags[1] is a number, not a string",
            "2026-11-20/run.json: n: holds NaN or Infinity, which JSON has no form for, left out",
        ],
    }


def test_missing_bucket_fails_the_night(prefect, tmp_path, fast_discover_retries):
    missing = str(tmp_path / "no-such-bucket")
    with pytest.raises(BucketNotFound, match=f"^no bucket at {missing}$"):
        _flow_night(Path(missing), tmp_path / "wh.duckdb")
    assert not (tmp_path / "wh.duckdb").exists()


def test_missing_bucket_is_not_retried(prefect, tmp_path, fast_discover_retries):
    with pytest.raises(BucketNotFound):
        _flow_night(tmp_path / "no-such-bucket", tmp_path / "wh.duckdb")
    assert len(fast_discover_retries) == 1


def test_cli_run_on_a_missing_bucket_exits_2(prefect, tmp_path, fast_discover_retries):
    from typer.testing import CliRunner

    from flows.cli import app

    missing = str(tmp_path / "no-such-bucket")
    result = CliRunner().invoke(app, ["run", "--bucket", missing, "--warehouse", str(tmp_path / "wh.duckdb")])
    assert result.exit_code == 2, result.output + repr(result.exception)
    assert f"error: no bucket at {missing}\n" in result.output


HLO = "HloModule same_size\n\nENTRY main {\n  ROOT p = f32[{n}] parameter(0)\n}\n"


def test_dump_rewritten_in_place_at_the_same_size_is_reloaded(tmp_path):
    bucket = tmp_path / "bucket"
    dump = bucket / "2026-11-20" / "jax" / "module_0001.same_size.before_optimizations.txt"
    dump.parent.mkdir(parents=True)
    dump.write_text(HLO.replace("{n}", "4"))
    warehouse = tmp_path / "wh.duckdb"
    _night(bucket, warehouse)
    [(before, version)] = _query(warehouse, "SELECT dump_id, source_version FROM dumps")
    assert version == str(dump.stat().st_mtime_ns)

    st = dump.stat()
    dump.write_text(HLO.replace("{n}", "8"))  # the same size, in place
    os.utime(dump, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))
    again = _night(bucket, warehouse)
    [(after, version)] = _query(warehouse, "SELECT dump_id, source_version FROM dumps")
    assert again.new == 1 and after != before and version == str(st.st_mtime_ns + 1_000)


def test_watch_on_a_missing_bucket_says_so_and_keeps_watching_once_it_was_there(prefect, tmp_path, fast_discover_retries,
                                                                                monkeypatch):
    """At the first look a missing bucket is a wrong --bucket: exit 2, one line. A bucket that
    goes missing later (a mount gone for a while) is a warning, and the watch goes on."""
    from typer.testing import CliRunner

    from flows.cli import app

    missing = str(tmp_path / "no-such-bucket")
    args = ["watch", "--warehouse", str(tmp_path / "wh.duckdb"), "--interval", "0", "--settle", "0"]
    first = CliRunner().invoke(app, [*args, "--bucket", missing, "--iterations", "3"])
    assert first.exit_code == 2 and f"error: no bucket at {missing}\n" in first.output, first.output
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    looks = []
    from flows import nightly as n

    real = n.nightly

    def look(**kw):  # there at the first look, gone at the second, back at the third
        looks.append(1)
        if len(looks) == 2:
            bucket.rename(tmp_path / "away")
        elif len(looks) == 3:
            (tmp_path / "away").rename(bucket)
        return real(**kw)

    monkeypatch.setattr(n, "nightly", look)
    later = CliRunner().invoke(app, [*args, "--bucket", str(bucket), "--iterations", "3"])
    assert later.exit_code == 0, later.output + repr(later.exception)
    assert len(looks) == 3 and f"warning: no bucket at {bucket}; looking again in 0 s\n" in later.output


# ---------------------------------------------------------------- S3 (a moto server), issue 27 item 7


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on 127.0.0.1 with the bucket "dumps"; yields its endpoint and a client."""
    from tests.moto_s3 import moto_s3

    with moto_s3() as (endpoint, client):
        yield endpoint, client


def _s3_options(endpoint: str, key: str = "testing") -> list[str]:
    return [f"key={key}", f"secret={key}", f"client_kwargs.endpoint_url={endpoint}", "client_kwargs.region_name=us-east-1"]


def test_s3_keys_that_name_no_run_or_job_are_refused_by_name(prefect, s3, tmp_path, monkeypatch):
    """'..' keys, a directory marker (a key ending in '/'), a run '2026-11-20 ' beside the real one:
    never runs or jobs (on main: runs '..' and '2026-11-20 ', a job '..'); each named in the night's failures."""
    from flows import storage_secrets
    from flows.ingest.bucket_access import parse_storage_options
    from flows.nightly import nightly

    endpoint, client = s3
    dump = gzip.decompress((SAMPLE / "2026-11-20" / PMAP / "module_0000.jit__fun.before_optimizations.txt.gz").read_bytes())
    for key in ("keys/2026-11-20/jax/module_0000.jit__fun.before_optimizations.txt", "keys/2026-11-20/jax/",
                "keys/2026-11-20/", "keys/../module_0001.jit__up.before_optimizations.txt",
                "keys/2026-11-20/../module_0002.jit__side.before_optimizations.txt",
                "keys/2026-11-20 /jax/module_0000.jit__fun.before_optimizations.txt"):
        client.put_object(Bucket="dumps", Key=key, Body=dump)
    monkeypatch.setenv(storage_secrets.ENV_VAR, json.dumps(parse_storage_options(_s3_options(endpoint))))
    warehouse = tmp_path / "wh.duckdb"
    summary = nightly(bucket="s3://dumps/keys", warehouse=warehouse, workers=1)
    assert _query(warehouse, "SELECT run_id FROM runs") == [("2026-11-20",)]
    assert _query(warehouse, "SELECT path, job, status FROM dumps") == [
        ("2026-11-20/jax/module_0000.jit__fun.before_optimizations.txt", "jax", "ok")]
    assert summary.failures == ["job name '..' names no directory: 1 object not read",
                                "run id '..' names no directory: 1 object not read",
                                "run id '2026-11-20 ' starts or ends with white space: 1 object not read"]


def test_s3_credentials_the_store_refuses_are_one_line_exit_2_and_not_retried(prefect, s3, tmp_path, monkeypatch):
    """On main: three retries (61 s) and 290 lines ending in a traceback."""
    from moto.core.authorization import enable_iam_authentication
    from typer.testing import CliRunner

    import flows.ingest.bucket as bucket_module
    import flows.ingest.bucket_access as bucket_access
    from flows import storage_secrets
    from flows.cli import app

    endpoint, _ = s3
    listings = _count_listings(monkeypatch)
    looks: list[str] = []
    real_connect = bucket_module.connect

    def counting_connect(url, options=None):  # every look at the bucket, the one before the night included
        looks.append(url)
        return real_connect(url, options)

    monkeypatch.setattr(bucket_module, "connect", counting_connect)  # the listing's
    monkeypatch.setattr(bucket_access, "connect", counting_connect)  # check_bucket's, before the night
    monkeypatch.setenv(storage_secrets.ENV_VAR, "")  # the run exports its options here: gone after the test
    args = ["run", "--bucket", "s3://dumps/keys", "--warehouse", str(tmp_path / "wh.duckdb")]
    for opt in _s3_options(endpoint, key="wrong"):
        args += ["--storage-option", opt]
    with enable_iam_authentication():
        result = CliRunner().invoke(app, args)
    assert (result.exit_code, result.stdout) == (2, ""), result.output + repr(result.exception)
    assert result.stderr == ("error: access to the bucket s3://dumps/keys denied (InvalidAccessKeyId: "
                             "The AWS Access Key Id you provided does not exist in our records.)\n")
    assert (looks, listings) == (["s3://dumps/keys"], [])
    assert not (tmp_path / "wh.duckdb").exists()
