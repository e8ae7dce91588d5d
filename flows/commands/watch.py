"""``dumpscope watch`` and ``dumpscope serve``: the nightly kept going, by polling the bucket
(``watch``) or as a scheduled Prefect deployment (``serve``, which needs a Prefect server).

Both take every option of a night that ``run`` takes (``flows.commands.night``), checked at
start (exit 2 in one line on a mistake), and run each night as ``run`` does: ingest, site,
publish, notifications. ``watch`` exits 2 when the bucket cannot be used at its first look (a wrong ``--bucket``,
said once, like ``run``); later (a mount or the network gone for a while) it warns and
looks again at the next interval.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer

from flows.commands import preflight
from flows import storage_secrets
from flows.commands.night import NightOptions, prepare
from flows.commands.signals import prefect_defaults
from flows.errors import CommandError


@storage_secrets.restores_environment
def watch(*, night: NightOptions, interval: float, settle: float, iterations: int, fail_on: str | None = None) -> None:
    """Look at the bucket every ``interval`` seconds, ``iterations`` times (0: never stop); each
    look is one night as ``dumpscope run`` runs it (``night``: its options, checked once here)."""
    prefect_defaults()
    parameters = prepare(night)  # exit 2 in one line on an operator's mistake, before Prefect starts
    from flows.ingest.bucket import BucketUnusable
    from flows.nightly import nightly

    done = 0
    while True:
        started = time.monotonic()
        try:
            summary = nightly(**parameters, settle_seconds=settle, wait_for_lock=True,
                              state_path=night.warehouse.with_suffix(".settle.json"))
            status, why = summary.exit_status(fail_on)
            if status:  # told, and watched on: the next look may fix it (a message owed is retried)
                typer.echo(f"warning: {why} (exit status {status} for `dumpscope run`)", err=True)
            for line in summary.undelivered:
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


@storage_secrets.restores_environment
def serve(*, night: NightOptions, cron: str, settle: float, fail_on: str | None = None) -> None:
    """Register the nightly as the deployment ``dumpscope-nightly`` on ``cron`` and serve it: each
    scheduled run is one night as ``dumpscope run`` runs it (``night``: its options, checked once
    here; storage options and notification targets stay in this process's environment, which
    the served runs inherit). With ``fail_on``, a run that finds incidents ends Failed."""
    if not os.environ.get("PREFECT_API_URL"):
        raise CommandError("scheduled runs need a Prefect server: start one with `prefect server start` "
                           "and set PREFECT_API_URL=http://127.0.0.1:4200/api (see README)", exit_code=preflight.BAD_ARGUMENT)
    parameters = prepare(night)
    from flows.nightly import nightly

    warehouse = night.warehouse.resolve()
    parameters |= {"warehouse": str(warehouse), "settle_seconds": settle, "wait_for_lock": True,
                   "state_path": str(warehouse.with_suffix(".settle.json")), "fail_on": fail_on}
    for key in ("site_dir", "report_path", "settings_path"):  # absolute: the served runs may start elsewhere
        if parameters.get(key) is not None:
            parameters[key] = str(Path(parameters[key]).resolve())
    from prefect import serve as serve_deployments
    from prefect.deployments.runner import EntrypointType

    # By module path, not file path: a served run loads the flow by importing flows.nightly
    # (loaded from the file, its postponed annotations such as Path did not resolve, and
    # every run failed its parameter validation).
    deployment = nightly.to_deployment(name="dumpscope-nightly", cron=cron, entrypoint_type=EntrypointType.MODULE_PATH,
                                       parameters={k: v for k, v in parameters.items() if v is not None})
    serve_deployments(deployment)
