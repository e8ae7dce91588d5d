"""The nightly flow's other buckets and runners: S3 (a moto server) and a Dask cluster.

Both ingest the sample night 2026-11-20 and must leave the same warehouse counts as
ingesting the local copy.
"""

import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.warehouse import loading, store as wh
from flows.ingest.bucket import list_objects
from flows.ingest.bucket_access import BucketNotFound, connect, parse_storage_options

SAMPLE = Path(__file__).parents[1] / "data" / "sample_bucket"
NIGHT = "2026-11-20"


@pytest.fixture(scope="module")
def local_bucket(tmp_path_factory) -> Path:
    bucket = tmp_path_factory.mktemp("local") / "bucket"
    shutil.copytree(SAMPLE / NIGHT, bucket / NIGHT)
    return bucket


@pytest.fixture(scope="module")
def reference(prefect, local_bucket, tmp_path_factory) -> dict[str, int]:
    """Table counts after ingesting the local copy the usual way (process pool)."""
    from flows.nightly import nightly

    warehouse = tmp_path_factory.mktemp("reference") / "wh.duckdb"
    summary = nightly(bucket=str(local_bucket), warehouse=warehouse, workers=2)
    assert summary.new > 40 and summary.failed == summary.unreadable == 0
    counts = _counts(warehouse)
    assert counts["dumps"] == summary.new and counts["metrics"] > 0
    return counts


def _counts(warehouse: Path) -> dict[str, int]:
    with wh.connect_readonly(warehouse) as con:
        return loading.table_counts(con)


@pytest.fixture(scope="module")
def s3(local_bucket):
    """A moto S3 server on 127.0.0.1 holding the night under s3://dumps/nightly/."""
    from tests.moto_s3 import moto_s3

    with moto_s3() as (endpoint, client):
        started = time.time()
        for path in sorted(p for p in local_bucket.rglob("*") if p.is_file()):
            client.upload_file(str(path), "dumps", f"nightly/{path.relative_to(local_bucket).as_posix()}")
        yield endpoint, started, time.time()


def test_parse_storage_options_nests_dotted_keys_and_decodes_json_values():
    assert parse_storage_options(["key=AK", "client_kwargs.endpoint_url=http://h:1/x=y",
                                  "client_kwargs.region_name=eu-west-1", "anon=false", "default_block_size=1024"]) == {
        "key": "AK", "anon": False, "default_block_size": 1024,
        "client_kwargs": {"endpoint_url": "http://h:1/x=y", "region_name": "eu-west-1"}}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_storage_options(["no-equals-sign"])
    with pytest.raises(ValueError, match="already a value"):
        parse_storage_options(["a=1", "a.b=2"])


def test_s3_bucket_through_cli_storage_options(prefect, s3, local_bucket, reference, tmp_path):
    from flows.cli import app

    endpoint, uploaded_from, uploaded_to = s3
    options = ["key=testing", "secret=testing", f"client_kwargs.endpoint_url={endpoint}",
               "client_kwargs.region_name=us-east-1"]

    listing = list_objects("s3://dumps/nightly", storage_options=parse_storage_options(options))
    local = list_objects(str(local_bucket))
    assert [(o.path, o.size, o.run_id, o.job, o.role) for o in listing] == \
        [(o.path, o.size, o.run_id, o.job, o.role) for o in local]
    assert all(o.size > 0 for o in listing if o.path.endswith(".gz"))
    # S3's LastModified (whole seconds) is the object's mtime
    assert all(int(uploaded_from) - 1 <= o.mtime <= uploaded_to + 1 for o in listing)

    warehouse = tmp_path / "wh.duckdb"
    args = ["run", "--bucket", "s3://dumps/nightly", "--warehouse", str(warehouse), "--workers", "2"]
    for opt in options:
        args += ["--storage-option", opt]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert _counts(warehouse) == reference

    bad = CliRunner().invoke(app, ["run", "--bucket", "s3://dumps/nightly", "--warehouse", str(warehouse),
                                   "--storage-option", "no-equals-sign"])
    assert bad.exit_code == 2 and "KEY=VALUE" in bad.output


def test_s3_endpoint_and_credentials_from_the_aws_environment(s3, local_bucket, tmp_path, monkeypatch):
    from flows.nightly import stage_chunk

    endpoint, _, _ = s3
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)  # botocore reads it: s3fs needs no option

    listing = list_objects("s3://dumps/nightly")
    assert [(o.path, o.size) for o in listing] == [(o.path, o.size) for o in list_objects(str(local_bucket))]
    fs, root = connect("s3://dumps/nightly")
    assert root == "dumps/nightly" and fs.cat_file(listing[0].full_path)[:1]
    dumps = [o for o in listing if o.path.endswith(".gz")][:3]
    outcomes = stage_chunk("s3://dumps/nightly", None, dumps, tmp_path / "staging")
    assert [o.error for o in outcomes] == [None] * 3 and all(o.staged.status == "ok" for o in outcomes)

    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)  # the generic one works too
    fs.invalidate_cache()
    assert [o.path for o in list_objects("s3://dumps/nightly/")] == [o.path for o in listing]


def test_s3_versions_missing_buckets_and_empty_prefixes(s3):
    import boto3

    endpoint, _, _ = s3
    options = {"key": "testing", "secret": "testing",
               "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket="versions")
    client.put_object(Bucket="versions", Key="n/r/j/a.txt", Body=b"aaaa")
    before = list_objects("s3://versions/n", storage_options=options)[0]
    assert before.version == client.head_object(Bucket="versions", Key="n/r/j/a.txt")["ETag"]
    client.put_object(Bucket="versions", Key="n/r/j/a.txt", Body=b"bbbb")  # same size, same second
    after = list_objects("s3://versions/n", storage_options=options)[0]
    assert after.size == before.size and after.version != before.version

    assert list_objects("s3://versions/empty-prefix", storage_options=options) == []  # an empty bucket
    with pytest.raises(BucketNotFound, match="^no bucket at s3://no-such-bucket/nightly$"):
        list_objects("s3://no-such-bucket/nightly", storage_options=options)


def test_dask_cluster_runs_the_parse_tasks(prefect, local_bucket, reference, tmp_path):
    from distributed import Client, LocalCluster, get_task_stream

    from flows.nightly import run_nightly

    warehouse = tmp_path / "wh.duckdb"
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        with get_task_stream(client=client) as stream:
            summary = run_nightly(bucket=str(local_bucket), warehouse=warehouse, workers=2,
                                  dask_address=cluster.scheduler_address)
        workers = set(client.scheduler_info()["workers"])
    # the parse tasks ran (and parsed) on the cluster's worker processes
    parse_tasks = [t for t in stream.data if "parse_chunk" in str(t["key"])]
    assert len(parse_tasks) == 8 and {t["worker"] for t in parse_tasks} <= workers
    # and so did the structural items of the new contents (flows.verdict.items)
    item_tasks = [t for t in stream.data if "structural" in str(t["key"]) or "compute_batch" in str(t["key"])]
    assert item_tasks and {t["worker"] for t in item_tasks} <= workers, sorted({str(t["key"]) for t in stream.data})
    assert summary.new == reference["dumps"] and summary.failed == summary.unreadable == 0
    assert _counts(warehouse) == reference


def test_dask_address_without_the_dask_runner_is_refused(prefect, local_bucket, tmp_path):
    from flows.nightly import nightly

    with pytest.raises(ValueError, match="run_nightly"):
        nightly(bucket=str(local_bucket), warehouse=tmp_path / "wh.duckdb", dask_address="tcp://127.0.0.1:1")
