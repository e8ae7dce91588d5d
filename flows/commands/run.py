"""``dumpscope run``: the nightly flow once, in Prefect's ephemeral mode (no server needed).

Everything an operator can get wrong is checked before Prefect is imported or started, each
a one-line ``CommandError`` (``flows.commands.night.prepare``, shared with ``watch`` and
``serve``): the storage options, the notification targets, the settings and the memory
limit, the warehouse's place, the bucket, the ``--publish`` destination (exit 2). Then ``flows.nightly.run_nightly``:
a busy warehouse exits 3, a bucket that cannot be used 2. The exit status tells a scheduler
the rest: 4 when ``fail_on`` finds incidents, 5 when a message was not delivered (the night
is published).

What the terminal shows is written for a person, in plain text (``flows.commands.night.summary_lines``): what was
ingested, the latest run's verdict and its new incidents (``flows.publish.report.terminal_summary``;
with ``[site] url``, their pages), where the report and the site are, and what was sent to the
notification targets, or why nothing was (``notifications_line``). The night's counters and timings are shown with
``verbose`` (and written to ``summary_json``); Prefect's own log lines below ``log_level``
(default WARNING; INFO with ``verbose``) stay off the terminal and still reach Prefect's API.
"""

from __future__ import annotations

import typer

from flows import storage_secrets
from flows.commands.night import NightOptions, prepare, summary_lines
from flows.commands.signals import prefect_console, prefect_defaults
from flows.errors import FAILING


@storage_secrets.restores_environment
def main(night: NightOptions) -> int:
    """Run one night with ``night``'s options (checked first: ``flows.commands.night.prepare``).
    Returns the exit status (``NightSummary.exit_status``)."""
    prefect_defaults()
    settings = prepare(night)
    with prefect_console(night.console_level):
        # Imported once the checks passed: Prefect's logging would print the libraries' own
        # complaints about a bad target beside our one line.
        from flows.nightly import run_nightly

        summary = run_nightly(**settings.arguments())
    typer.echo("\n".join(summary_lines(summary, night, night.verbose)))
    for line in summary.warnings():
        typer.echo(f"warning: {line}", err=True)
    status, why = summary.exit_status(night.fail_on)
    if status == FAILING:
        typer.echo(why, err=True)
    return status
