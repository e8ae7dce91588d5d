"""A moto S3 server on 127.0.0.1 for the tests that read a bucket over S3."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def moto_s3(bucket: str = "dumps") -> Iterator[tuple[str, object]]:
    """A running moto S3 server holding the empty ``bucket``: its endpoint and a boto3 client."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=bucket)
        _empty(client, bucket)  # moto keeps one store per process: an earlier test's objects are still there
        yield endpoint, client
        _empty(client, bucket)
    finally:
        server.stop()


def _empty(client, bucket: str) -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=obj["Key"])
