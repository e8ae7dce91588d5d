"""``dumpscope run``: the nightly flow once, in Prefect's ephemeral mode (no server needed).

Everything an operator can get wrong is checked before Prefect is imported or started, each
a one-line ``CommandError`` (``flows.commands.night.prepare``, shared with ``watch`` and
``serve``): the storage options, the notification targets, the settings and the memory
limit, the warehouse's place, the bucket, the ``--publish`` destination (exit 2). Then ``flows.nightly.run_nightly``:
a busy warehouse exits 3, a bucket that cannot be used 2. The exit status tells a scheduler
the rest: 4 when ``fail_on`` finds incidents, 5 when a message was not delivered (the night
is published).

What the terminal shows is written for a person, in plain text (``summary_lines``): what was
ingested, the latest run's verdict and its new incidents (``flows.publish.report.terminal_summary``;
with ``[site] url``, their pages), where the report and the site are, and what was sent to the
notification targets, or why nothing was (``notifications_line``). The night's counters and timings are shown with
``verbose`` (and written to ``summary_json``); Prefect's own log lines below ``log_level``
(default WARNING; INFO with ``verbose``) stay off the terminal and still reach Prefect's API.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from flows import storage_secrets
from flows.commands import preflight
from flows.commands.night import NightOptions, prepare
from flows.commands.signals import prefect_console, prefect_defaults
from flows.errors import FAILING

FAILURES_SHOWN = 3  # failures listed by default (all of them with --verbose)


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


def summary_lines(summary, night: NightOptions, verbose: bool = False) -> list[str]:
    """What the terminal shows after a night run with ``night``'s options, in plain text: what
    was ingested (and what failed), with ``verbose`` the night's counters and seconds, then the
    latest run's verdict and new incidents, then where the report and the site are, and what
    was sent to the notification targets."""
    from flows.publish.report import default_report_path, terminal_summary
    from transforms.escape import plain_text

    warehouse, report_path = night.warehouse, night.report_path
    site_dir = night.site_dir or (night.warehouse.with_suffix(".site") if night.publish_to else None)

    if summary.new:
        done = f"Loaded {summary.new} new dump(s) into {plain_text(warehouse)}"
        done += f" ({summary.partial} partial, {summary.failed + summary.unreadable} failed)." if (
            summary.partial or summary.failed or summary.unreadable) else "."
    else:
        done = f"Nothing new in the bucket ({summary.skipped} dump(s) loaded already, {summary.deferred} still settling)."
    lines = [done]
    problems = summary.failures + [f"run.json: {e}" for e in summary.run_errors]
    shown = problems if verbose else problems[:FAILURES_SHOWN]
    lines += [f"  {plain_text(p)}" for p in shown]
    if len(problems) > len(shown):
        lines.append(f"  … and {len(problems) - len(shown)} more (--verbose lists them)")
    if verbose:
        lines += ["", "Counters:"] + [f"  {k.replace('_', ' ')}: {v}" for k, v in asdict(summary).items()
                                      if isinstance(v, (int, str)) and v != ""]
        lines += ["Seconds:"] + [f"  {k}: {v:.2f}" for k, v in summary.seconds.items()]
    if Path(warehouse).exists():
        lines += [""] + terminal_summary(warehouse, site_url=preflight.settings(night.settings).site_url)
    lines += ["", f"Report: {plain_text(report_path or default_report_path(warehouse))}",
              f"Site: {plain_text(Path(site_dir) / 'index.html')}" if site_dir else "Site: not built (--site DIR builds it)"]
    if summary.published:
        lines.append(f"Published: {plain_text(summary.published)}")
    if (said := notifications_line(summary)) is not None:
        lines.append(said)
    return lines


def notifications_line(summary) -> str | None:
    """What the night sent to the notification targets (``--notify``, ``DUMPSCOPE_NOTIFY``), or
    why it sent nothing: a run's new incidents are sent once, by the night that loads the run.
    None without targets, and when a message was not delivered (its warning says so)."""
    if not storage_secrets.notify_targets() or summary.undelivered:
        return None
    if summary.notified:
        return f"Notifications: {summary.notified} message(s) sent."
    if not summary.new:
        why = ("this night loaded nothing new, and a run's new incidents are sent once, by the night that loads it "
               "(a re-run never sends them again)")
    elif not summary.new_incidents:
        why = "the runs this night loaded opened no regression or failure"
    else:
        why = "the new incidents of the runs this night loaded were sent already"
    return f"Notifications: nothing new sent: {why}."
