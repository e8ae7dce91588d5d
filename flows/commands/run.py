"""``dumpscope run``: the nightly flow once, in Prefect's ephemeral mode (no server needed).

Everything an operator can get wrong is checked before the night starts, each a one-line
``CommandError``: the storage options, the notification targets, the settings and the memory
limit, the bucket (exit 2). Then ``flows.nightly.run_nightly``: a busy warehouse exits 3, a
bucket that cannot be used 2. The exit status tells a scheduler the rest: 4 when ``fail_on``
finds incidents, 5 when a message was not delivered (the night is published).
"""

from __future__ import annotations

from pathlib import Path

import typer

from flows import storage_secrets
from flows.commands import preflight
from flows.commands.signals import prefect_defaults
from flows.errors import CommandError

FAILING = 4  # --fail-on found incidents
UNDELIVERED = 5  # a notification is owed (retried by the next run)


def main(*, bucket: str, warehouse: Path, storage_option: list[str], storage_secret: str | None, notify: list[str],
         fail_on: str | None, settings: Path | None, memory_limit: str | None, summary_json: Path | None,
         **night) -> int:
    """Run one night; ``night``: the rest of ``run_nightly``'s parameters. Returns the exit status."""
    prefect_defaults()
    from flows.ingest.bucket import check_bucket, parse_storage_options

    try:
        storage_options = parse_storage_options(storage_option)
    except ValueError as exc:
        raise CommandError(str(exc), exit_code=preflight.BAD_ARGUMENT) from None
    storage_secrets.export(storage_options)  # values by the environment, never as flow parameters
    storage_secrets.export_notify_targets(notify)
    preflight.notify_targets()
    conf = preflight.settings(settings)
    memory = preflight.memory_limit(memory_limit, conf, settings)
    if not storage_secret:  # with one, the options are Prefect's to give: the flow says it, unretried
        check_bucket(bucket, storage_secrets.resolve(None))
    if night.get("publish_to"):
        preflight.publish_destination(night["publish_to"])
    # Imported once the checks passed: Prefect's logging would print the libraries' own
    # complaints about a bad target beside our one line.
    from flows.nightly import run_nightly

    summary = run_nightly(memory_limit=memory, bucket=bucket, warehouse=warehouse, storage_secret=storage_secret,
                          storage_option_names=storage_secrets.option_names(storage_options) or None,
                          settings_path=settings,
                          state_path=warehouse.with_suffix(".settle.json") if night["settle_seconds"] else None, **night)
    if summary_json is not None:
        summary_json.write_text(summary.json(), encoding="utf-8")
    for line in summary.undelivered:
        typer.echo(f"warning: {line}", err=True)
    failing = summary.new_incidents if fail_on == "new" else summary.incidents.get("new", 0) + summary.incidents.get("open", 0)
    if fail_on and failing:
        typer.echo(f"{failing} {'new' if fail_on == 'new' else 'open'} incident(s) (regressions or failures)", err=True)
        return FAILING
    if summary.undelivered:  # the night is published; the scheduler sees that a message is owed
        return UNDELIVERED
    return 0
