"""What ``run``, ``watch`` and ``serve`` share: a night's options (``NightOptions``), checked
before any work and turned into the nightly flow's settings (``flows.night_settings.NightSettings``),
the exit status a night ends with, and what the terminal shows after a night (``summary_lines``).

One definition for the three commands (the options themselves are declared once in
``flows.cli``, ``night_options``): storage options and notification targets go to the environment
(values are never flow parameters: ``flows.storage_secrets``), and each operator mistake exits 2
in one line before Prefect starts: the summary file's directory, the Dask scheduler, the storage
options, the notification URLs, the settings file, the memory limit, the warehouse, the site
directory and the report file, the bucket, the ``--publish`` destination, the Prefect server. The exit status a night ends
with is ``NightSummary.exit_status`` (``flows.night_summary``): ``run`` exits with it, a served
night's flow run ends in the state it names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from flows import storage_secrets
from flows.commands import preflight
from flows.errors import CommandError
from flows.night_settings import NightSettings

FAILURES_SHOWN = 3  # failures listed by default (all of them with --verbose)


@dataclass(frozen=True)
class NightOptions:
    """The options every command that runs nights takes (``flows.cli``'s shared declarations), as
    the person gave them: secrets included (``prepare`` keeps them out of the flow's settings)."""
    bucket: str
    warehouse: Path
    storage_option: list[str] = field(default_factory=list)
    storage_secret: str | None = None
    notify: list[str] = field(default_factory=list)
    settings: Path | None = None
    memory_limit: str | None = None
    workers: int | None = None
    site_dir: Path | None = None
    publish_to: str | None = None
    report_path: Path | None = None
    layout_regex: str | None = None
    marker: str | None = None
    max_line_bytes: int | None = None
    max_dump_bytes: int | None = None
    parse_seconds: float | None = None
    settle: float = 0.0  # seconds a file must stay unchanged before it is taken
    wait: bool = False  # for another writer holding the warehouse lock
    fail_on: str | None = None  # new or open: the exit status (a served run: its state) says incidents
    dask_address: str | None = None
    summary_json: Path | None = None
    verbose: bool = False
    log_level: str | None = None  # Prefect's log lines that reach the terminal (upper case)

    @property
    def console_level(self) -> str:
        """The level of Prefect's log lines the terminal shows."""
        return self.log_level or ("INFO" if self.verbose else "WARNING")


def prepare(options: NightOptions, *, prefect_wait: float = 0.0,
            notice: Callable[[str], None] | None = None) -> NightSettings:
    """Check ``options`` (exit 2 in one line on a mistake) and return the nightly flow's
    settings they make (storage options and notification targets exported to the
    environment instead; ``fail_on`` left to the command). ``prefect_wait``: how long a Prefect
    server that is starting is waited for (``serve``; ``notice`` is told), else none
    (``preflight.prefect_api``)."""
    from flows.ingest.bucket_access import check_bucket, parse_storage_options
    from flows.publish.release import storage_options_for

    summary_json = options.summary_json
    if summary_json is not None and not summary_json.parent.is_dir():  # found before the night, not after it
        problem = "is a file, not a directory" if summary_json.parent.exists() else "does not exist"
        raise CommandError(f"--summary-json {summary_json}: {summary_json.parent.absolute()} {problem}",
                           exit_code=preflight.BAD_ARGUMENT)
    if summary_json is not None and summary_json.is_dir():
        raise CommandError(f"--summary-json {summary_json} is a directory: give the summary's file",
                           exit_code=preflight.BAD_ARGUMENT)
    if options.dask_address is not None:
        preflight.dask_scheduler(options.dask_address)
    try:
        storage_options = parse_storage_options(options.storage_option)
    except ValueError as exc:
        raise CommandError(str(exc), exit_code=preflight.BAD_ARGUMENT) from None
    storage_secrets.export(storage_options)  # values by the environment, never as flow parameters
    storage_secrets.export_notify_targets(options.notify)
    preflight.notify_targets()
    conf = preflight.settings(options.settings)
    memory = preflight.memory_limit(options.memory_limit, conf, options.settings)
    preflight.warehouse_to_write(options.warehouse)
    if options.site_dir is not None:
        preflight.site_directory("--site", options.site_dir)
    if options.report_path is not None:
        preflight.report_file(options.report_path)
    if not options.storage_secret:  # with one, the options are Prefect's to give: the flow says it, unretried
        check_bucket(options.bucket, storage_secrets.resolve(None))
    if options.publish_to:
        store_options = storage_options_for(options.publish_to, options.bucket, storage_secrets.resolve(None))
        # With a storage secret, the bucket's options (on the same store, the publish's) are Prefect's to give.
        preflight.publish_destination(options.publish_to, store_options,
                                      look=not (options.storage_secret and store_options is not None))
    preflight.prefect_api(prefect_wait, notice)  # last: the other mistakes are found without a network call
    limits = {k: v for k, v in (("max_line_bytes", options.max_line_bytes), ("max_dump_bytes", options.max_dump_bytes),
                                ("parse_seconds", options.parse_seconds)) if v is not None}
    return NightSettings(
        bucket=options.bucket, warehouse=options.warehouse, storage_secret=options.storage_secret,
        storage_option_names=storage_secrets.option_names(storage_options) or None, settings_path=options.settings,
        memory_limit=memory, workers=options.workers, site_dir=options.site_dir, publish_to=options.publish_to,
        report_path=options.report_path, layout_regex=options.layout_regex, marker=options.marker,
        settle_seconds=options.settle, wait_for_lock=options.wait, dask_address=options.dask_address,
        summary_path=summary_json, state_path=options.warehouse.with_suffix(".settle.json") if options.settle else None,
        **limits)


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
