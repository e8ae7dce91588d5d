"""``dumpscope watch`` and ``dumpscope serve``: the nightly kept going, by polling the bucket
(``watch``) or as a scheduled Prefect deployment (``serve``, which needs a Prefect server).

Both check the notification targets (DUMPSCOPE_NOTIFY) at start, exit 2 on a bad one.
``watch`` exits 2 when the bucket cannot be used at its first look (a wrong ``--bucket``,
said once, like ``run``); later (a mount or the network gone for a while) it warns and
looks again at the next interval.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer

from flows import storage_secrets
from flows.commands import preflight
from flows.commands.signals import prefect_defaults
from flows.errors import CommandError


def watch(*, bucket: str, warehouse: Path, interval: float, settle: float, marker: str | None, iterations: int) -> None:
    """Look at the bucket every ``interval`` seconds, ``iterations`` times (0: never stop)."""
    prefect_defaults()
    preflight.notify_targets()
    from flows.ingest.bucket import BucketUnusable, check_bucket
    from flows.nightly import nightly

    check_bucket(bucket, storage_secrets.resolve(None))  # the options the nightly will resolve
    done = 0
    while True:
        started = time.monotonic()
        try:
            summary = nightly(bucket=bucket, warehouse=warehouse, settle_seconds=settle, marker=marker,
                              wait_for_lock=True, state_path=warehouse.with_suffix(".settle.json"))
            for line in summary.undelivered:  # retried at the next look
                typer.echo(f"warning: {line}", err=True)
        except BucketUnusable as exc:
            if not done:  # at the first look: a wrong --bucket, said once, like `run`
                raise
            # Later (a mount or the network gone for a while): said, and looked at again next time.
            typer.echo(f"warning: {exc}; looking again in {interval:g} s", err=True)
        done += 1
        if iterations and done >= iterations:
            return
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


def serve(*, cron: str, bucket: str, warehouse: Path, settle: float) -> None:
    """Register the nightly as the deployment ``dumpscope-nightly`` on ``cron`` and serve it."""
    preflight.notify_targets()
    if not os.environ.get("PREFECT_API_URL"):
        raise CommandError("scheduled runs need a Prefect server: start one with `prefect server start` "
                           "and set PREFECT_API_URL=http://127.0.0.1:4200/api (see README)", exit_code=preflight.BAD_ARGUMENT)
    from flows.nightly import nightly

    nightly.serve(name="dumpscope-nightly", cron=cron, parameters={
        "bucket": bucket, "warehouse": str(warehouse.resolve()), "settle_seconds": settle,
        "state_path": str(warehouse.resolve().with_suffix(".settle.json")), "wait_for_lock": True})
