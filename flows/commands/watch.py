"""``dumpscope watch`` and ``dumpscope serve``: the nightly kept going, by polling the bucket
(``watch``) or as a scheduled Prefect deployment (``serve``, which needs a Prefect server).

Both take every option that ``run`` takes (``flows.commands.night`` and ``flows.cli``'s shared
declarations), checked at start (exit 2 in one line on a mistake), and run each night as ``run``
does: ingest, site, publish, notifications, the summary JSON, Dask, Prefect's log level.
``watch`` exits 2 when the bucket cannot be used at its first look (a wrong ``--bucket``, said
once, like ``run``); later (a mount or the network gone for a while) it warns and looks again
at the next interval.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import replace

import typer

from flows.commands import preflight
from flows import storage_secrets
from flows.commands.night import NightOptions, prepare, summary_lines
from flows.commands.signals import prefect_console, prefect_defaults
from flows.errors import CommandError


@storage_secrets.restores_environment
def watch(night: NightOptions, *, interval: float, iterations: int) -> None:
    """Look at the bucket every ``interval`` seconds, ``iterations`` times (0: never stop); each
    look is one night as ``dumpscope run`` runs it (``night``: its options, checked once here),
    its summary printed as ``run`` prints it when it loaded something (every look with
    ``verbose``), and written to ``summary_json`` (the latest night's)."""
    prefect_defaults()
    settings = prepare(night)  # exit 2 in one line on an operator's mistake, before Prefect starts
    settings = replace(settings, state_path=night.warehouse.with_suffix(".settle.json"))  # --settle 0 too
    from flows.ingest.bucket_access import BucketUnusable

    done = 0
    with prefect_console(night.console_level):
        from flows.nightly import run_nightly

        while True:
            started = time.monotonic()
            try:
                summary = run_nightly(**settings.arguments())
                if summary.new or night.verbose:
                    typer.echo("\n".join(summary_lines(summary, night, night.verbose)))
                status, why = summary.exit_status(night.fail_on)
                if status:  # told, and watched on: the next look may fix it (a message owed is retried)
                    typer.echo(f"warning: {why} (exit status {status} for `dumpscope run`)", err=True)
                for line in summary.warnings():
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
def serve(night: NightOptions, *, cron: str, prefect_wait: float = preflight.PREFECT_WAIT_SECONDS) -> None:
    """Register the nightly as the deployment ``dumpscope-nightly`` on ``cron`` and serve it: each
    scheduled run is one night as ``dumpscope run`` runs it (``night``: its options, checked once
    here; storage options, notification targets and the Dask scheduler stay in this process's
    environment, which the served runs inherit). With ``fail_on``, a run that finds incidents
    ends Failed; ``summary_json`` is each served night's summary (the latest's). ``cron`` is
    checked before (``preflight.cron_schedule``, by the command). A Prefect server that is still
    starting is waited for ``prefect_wait`` seconds, said on stderr. What the server refuses
    afterwards (a key it wants, an API that is not Prefect's) is one line too."""
    url = os.environ.get("PREFECT_API_URL")
    if not url:
        raise CommandError("scheduled runs need a Prefect server: start one with `prefect server start` "
                           "and set PREFECT_API_URL=http://127.0.0.1:4200/api (see README)", exit_code=preflight.BAD_ARGUMENT)
    settings = prepare(night, prefect_wait=prefect_wait, notice=lambda line: typer.echo(line, err=True))
    # A served run's state says what run's exit status would (fail_on), and it keeps its settle state (--settle 0 too).
    settings = replace(settings, fail_on=night.fail_on, state_path=night.warehouse.with_suffix(".settle.json"))
    if night.dask_address:  # the served runs import flows.nightly, which takes its task runner from here
        os.environ[storage_secrets.DASK_VAR] = night.dask_address
    with prefect_console(night.console_level):
        from flows.nightly import nightly
        from prefect import serve as serve_deployments
        from prefect.deployments.runner import EntrypointType

        # By module path, not file path: a served run loads the flow by importing flows.nightly
        # (loaded from the file, its postponed annotations such as Path did not resolve, and
        # every run failed its parameter validation).
        # _sync: the deployment itself, even where an event loop or a run context is about (else a coroutine).
        with _said_in_one_line(url):
            deployment = nightly.to_deployment(name="dumpscope-nightly", cron=cron,
                                               entrypoint_type=EntrypointType.MODULE_PATH,
                                               parameters=settings.parameters(),
                                               _sync=True)
            serve_deployments(deployment)


@contextlib.contextmanager
def _said_in_one_line(url: str) -> Iterator[None]:
    """What the Prefect API at ``url`` refuses (an HTTP error: a key it wants, an API that is not a
    Prefect server's), exit 2, or a server that stops answering, exit 1, as one line: it was
    Prefect's traceback of 70-80 lines."""
    import httpx

    where = f"PREFECT_API_URL {url}"
    try:
        yield
    except httpx.HTTPStatusError as exc:
        code = exc.response.status_code
        hint = ("set PREFECT_API_KEY (a Prefect Cloud workspace wants one)" if code in (401, 403)
                else "give a Prefect server's API URL, e.g. http://127.0.0.1:4200/api")
        raise CommandError(f"{where}: the API refused {exc.request.method} {exc.request.url.path} (HTTP {code}): {hint}",
                           exit_code=preflight.BAD_ARGUMENT) from None
    except (httpx.TransportError, OSError) as exc:
        raise CommandError(f"{where}: the Prefect server stopped answering ({type(exc).__name__}: {exc})") from None
