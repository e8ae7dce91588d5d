"""``dumpscope run``: the nightly flow once, in Prefect's ephemeral mode (no server needed).

Everything an operator can get wrong is checked before Prefect is imported or started, each
a one-line ``CommandError``: the storage options, the notification targets, the settings and
the memory limit, the warehouse's place, the bucket (exit 2). Then ``flows.nightly.run_nightly``:
a busy warehouse exits 3, a bucket that cannot be used 2. The exit status tells a scheduler
the rest: 4 when ``fail_on`` finds incidents, 5 when a message was not delivered (the night
is published).

What the terminal shows is written for a person, in plain text (``summary_lines``): what was
ingested, the latest run's verdict and its new incidents (``flows.publish.report.terminal_summary``),
where the report and the site are. The night's counters and timings are shown with
``verbose`` (and written to ``summary_json``); Prefect's own log lines below ``log_level``
(default WARNING; INFO with ``verbose``) stay off the terminal and still reach Prefect's API.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from flows import storage_secrets
from flows.commands import preflight
from flows.commands.signals import prefect_console, prefect_defaults
from flows.errors import CommandError

FAILING = 4  # --fail-on found incidents
UNDELIVERED = 5  # a notification is owed (retried by the next run)
FAILURES_SHOWN = 3  # failures listed by default (all of them with --verbose)


def main(*, bucket: str, warehouse: Path, storage_option: list[str], storage_secret: str | None, notify: list[str],
         fail_on: str | None, settings: Path | None, memory_limit: str | None, summary_json: Path | None,
         verbose: bool = False, log_level: str | None = None, **night) -> int:
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
    preflight.warehouse_to_write(warehouse)
    if not storage_secret:  # with one, the options are Prefect's to give: the flow says it, unretried
        check_bucket(bucket, storage_secrets.resolve(None))
    with prefect_console(log_level or ("INFO" if verbose else "WARNING")):
        # Imported once the checks passed: Prefect's logging would print the libraries' own
        # complaints about a bad target beside our one line.
        from flows.nightly import run_nightly

        summary = run_nightly(memory_limit=memory, bucket=bucket, warehouse=warehouse, storage_secret=storage_secret,
                              storage_option_names=storage_secrets.option_names(storage_options) or None,
                              settings_path=settings,
                              state_path=warehouse.with_suffix(".settle.json") if night["settle_seconds"] else None,
                              **night)
    if summary_json is not None:
        summary_json.write_text(summary.json(), encoding="utf-8")
    typer.echo("\n".join(summary_lines(summary, warehouse, night.get("report_path"), night.get("site_dir"), verbose)))
    for line in summary.undelivered:
        typer.echo(f"warning: {line}", err=True)
    failing = summary.new_incidents if fail_on == "new" else summary.incidents.get("new", 0) + summary.incidents.get("open", 0)
    if fail_on and failing:
        typer.echo(f"{failing} {'new' if fail_on == 'new' else 'open'} incident(s) (regressions or failures)", err=True)
        return FAILING
    if summary.undelivered:  # the night is published; the scheduler sees that a message is owed
        return UNDELIVERED
    return 0


def summary_lines(summary, warehouse: Path, report_path: Path | None, site_dir: Path | None,
                  verbose: bool = False) -> list[str]:
    """What the terminal shows after a night, in plain text: what was ingested (and what failed),
    with ``verbose`` the night's counters and seconds, then the latest run's verdict and new
    incidents, then where the report and the site are."""
    from flows.publish.report import default_report_path, terminal_summary
    from transforms.escape import plain_text

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
        lines += [""] + terminal_summary(warehouse)
    lines += ["", f"Report: {plain_text(report_path or default_report_path(warehouse))}",
              f"Site: {plain_text(Path(site_dir) / 'index.html')}" if site_dir else "Site: not built (--site DIR builds it)"]
    return lines
