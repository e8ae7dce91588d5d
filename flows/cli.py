"""The ``dumpscope`` command: Typer declarations only. Each command is one call into its module
of ``flows.commands`` (values in; the module does the work and prints), and every
``CommandError`` it raises becomes one line on stderr and its exit status, here, once
(``command``). Shared options are declared once (``Warehouse``, ``Settings``, ...).

Imports are deferred into each command, so commands that only read (``parse``) load
neither Prefect nor DuckDB and answer in a fraction of a second.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Optional

import typer

from flows.errors import CommandError

if TYPE_CHECKING:
    from flows.commands.night import NightOptions

app = typer.Typer(
    name="dumpscope",
    help="ML-compiler dumps (XLA HLO, buffer assignments, TorchInductor, ONNX export reports) "
    "into a DuckDB warehouse and a report site.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Help and error texts are plain text: rich markup would eat "[series]" and "[[rule]]"
    # (the settings file's sections) and any "[...]" of a value quoted in an error.
    rich_markup_mode=None,
)


@app.callback()
def _main() -> None:
    """Dumpscope: what got worse last night, in which program, and why."""


def command(name: str | None = None) -> Callable:
    """``app.command``, with a ``CommandError`` said in one line on stderr and ending the command
    with its exit status, and a status the command returns (an int) as the exit status."""
    def register(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                status = fn(*args, **kwargs)
            except CommandError as exc:
                typer.echo(f"error: {exc.line()}", err=True)
                raise typer.Exit(exc.exit_code) from None
            if status:
                raise typer.Exit(status)

        return app.command(name)(run)

    return register


def _parameters(fn: Callable) -> list[inspect.Parameter]:
    """``fn``'s parameters, their annotations evaluated (Typer reads them); ``NightOptions`` is
    imported only once a command runs, so it stands for itself here."""
    return list(inspect.signature(fn, eval_str=True, locals={"NightOptions": "NightOptions"}).parameters.values())


# Options shared by several commands: one declaration each.
DEFAULT_WAREHOUSE = Path("data/warehouse.duckdb")
DEFAULT_BUCKET = "data/sample_bucket"
SETTINGS_HELP = "Settings file (TOML: [series] names, [floors], [[rule]] thresholds, [site]); default ./dumpscope.toml when present."
MEMORY_HELP = ("Most memory the command may hold, e.g. 2GB (DuckDB and the Python side share it; a lower limit "
               "is slower, never wrong). Default: memory_limit in the settings file, else none.")
RUN_MEMORY_HELP = ("Most memory the night's processes may hold, e.g. 2GB (DuckDB and the Python side share it; a "
                   "lower limit is slower, never wrong). Default: memory_limit in the settings file, else half of "
                   "what the machine can give (the smaller of MemAvailable and the cgroup memory limit), stated in "
                   "the night's log line 'memory limit: ...'.")

Warehouse = Annotated[Path, typer.Option("--warehouse", help="DuckDB warehouse file.")]
Settings = Annotated[Optional[Path], typer.Option("--settings", help=SETTINGS_HELP)]
MemoryLimit = Annotated[Optional[str], typer.Option("--memory-limit", help=MEMORY_HELP)]
WaitForWriter = Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for another writer.")]
Bucket = Annotated[str, typer.Option("--bucket", help="Dump bucket: a local path or any fsspec URL (s3://bucket/prefix).")]
Settle = Annotated[float, typer.Option("--settle", help="Seconds a file's size and mtime must stay unchanged before it is taken.")]
Marker = Annotated[Optional[str], typer.Option(
    "--marker", help="Completion marker file name (e.g. _SUCCESS): a run is taken when it has one.")]
MaxLineBytes = Annotated[int, typer.Option("--max-line-bytes", help="Longest line a dump may have (bytes); a dump past it is "
                                           "failed. A parse holds about this much memory at most.")]
MaxDumpBytes = Annotated[int, typer.Option("--max-dump-bytes", help="Most text one dump may hold once decompressed (bytes).")]
StorageOptions = Annotated[Optional[list[str]], typer.Option(
    "--storage-option", metavar="KEY=VALUE",
    help="fsspec storage option for the bucket (repeatable); dotted keys nest, e.g. "
    "client_kwargs.endpoint_url=http://127.0.0.1:9000. Without them s3:// uses the usual AWS_* "
    "environment variables (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ...). Values are never "
    "recorded by Prefect (only the names).")]
Publish = Annotated[Optional[str], typer.Option(
    "--publish", metavar="DEST", help="Publish the site (built beside the warehouse unless --site says where) and a "
    "read-only snapshot of the warehouse (DEST/warehouse.duckdb, for `check --warehouse` and SQL) to DEST: a directory "
    "(becomes a link to its latest release, switched atomically) or an fsspec URL (s3://bucket/prefix).")]
ParseSeconds = Annotated[float, typer.Option("--parse-seconds", help="Longest one parse may take (seconds).")]
LINE_BYTES, DUMP_BYTES, PARSE_SECONDS = 64 << 20, 4 << 30, 600.0  # = transforms.parse.ParseLimits()


# The options of a night, taken alike by run, watch and serve: declared once, in ``night_options``.
LayoutRegex = Annotated[Optional[str], typer.Option(help="Regex with named groups run_id and job, for other bucket layouts.")]
Workers = Annotated[Optional[int], typer.Option(help="Parse processes (default: the cores).")]
StorageSecret = Annotated[Optional[str], typer.Option(
    help="Name of a Prefect Secret block holding the storage options as a JSON object "
    "(credentials kept in Prefect, not on the command line).")]
Report = Annotated[Optional[Path], typer.Option(help="Where the regression summary (Markdown) goes (default: <warehouse>.report.md).")]
FailOn = Annotated[Optional[str], typer.Option(
    "--fail-on", help="Exit with status 4 when this run opened incidents (new: regressions or failures opened "
    "by the runs this invocation loaded; a re-run with nothing new passes) or when any is open at the latest "
    "run (open). A served run ends Failed instead; watch warns and watches on.")]
Notify = Annotated[Optional[list[str]], typer.Option(
    "--notify", metavar="URL", help="Send the summary of NEW incidents to this Apprise URL (repeatable: Slack, "
    "Teams, email, GitHub, json:// webhooks...), once per run; never again on a re-run. A URL Apprise cannot "
    "use exits 2 before any work; a message not delivered is retried by the next run, and the run exits 5 "
    "(the night is published). Default: the DUMPSCOPE_NOTIFY environment variable (a JSON list).")]
SiteDir = Annotated[Optional[Path], typer.Option("--site", help="Also build the report site into this directory.")]
NightMemoryLimit = Annotated[Optional[str], typer.Option("--memory-limit", help=RUN_MEMORY_HELP)]
WaitForLock = Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for another run holding the warehouse lock.")]
DaskAddress = Annotated[Optional[str], typer.Option(
    help="Run the parse tasks on this existing Dask cluster (tcp://HOST:PORT); its workers must "
    "reach the bucket, the staging dir next to the warehouse, and the Prefect API.")]
FailOnRegression = Annotated[bool, typer.Option("--fail-on-regression", help="Same as --fail-on new.")]
SummaryJson = Annotated[Optional[Path], typer.Option(
    help="Also write the night's summary (counts, seconds per stage, bytes published) to this JSON file "
    "(watch and serve: the latest night's).")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Also print the night's counters and seconds, every "
                                       "failure, and Prefect's log lines (--log-level INFO).")]
LogLevel = Annotated[Optional[str], typer.Option(
    "--log-level", help="Prefect's log lines at this level and above reach the terminal: DEBUG, INFO, WARNING, "
    "ERROR or CRITICAL (default WARNING; INFO with --verbose). All of them still reach Prefect's API.")]


def night_options(
    bucket: Bucket = DEFAULT_BUCKET,
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    settle: Settle = 0.0,  # each command's own default (night_command)
    layout_regex: LayoutRegex = None,
    marker: Marker = None,
    workers: Workers = None,
    wait: WaitForLock = False,  # each command's own default (night_command)
    storage_option: StorageOptions = None,
    storage_secret: StorageSecret = None,
    dask_address: DaskAddress = None,
    settings: Settings = None,
    report: Report = None,
    fail_on: FailOn = None,
    fail_on_regression: FailOnRegression = False,
    notify: Notify = None,
    site_dir: SiteDir = None,
    publish: Publish = None,
    max_line_bytes: MaxLineBytes = LINE_BYTES,
    max_dump_bytes: MaxDumpBytes = DUMP_BYTES,
    parse_seconds: ParseSeconds = PARSE_SECONDS,
    memory_limit: NightMemoryLimit = None,
    summary_json: SummaryJson = None,
    verbose: Verbose = False,
    log_level: LogLevel = None,
) -> NightOptions:
    """The options of a night, declared once (``night_command`` gives them to run, watch and
    serve), as one value; the choices Typer does not check are checked here."""
    from flows.commands.night import NightOptions
    from flows.commands.signals import LOG_LEVELS

    if fail_on not in (None, "new", "open"):
        raise typer.BadParameter("use new or open", param_hint="--fail-on")
    if log_level is not None and log_level.upper() not in LOG_LEVELS:
        raise typer.BadParameter(f"use one of {', '.join(LOG_LEVELS)}", param_hint="--log-level")
    return NightOptions(bucket=bucket, warehouse=warehouse, storage_option=storage_option or [],
                        storage_secret=storage_secret, notify=notify or [], settings=settings, memory_limit=memory_limit,
                        workers=workers, site_dir=site_dir, publish_to=publish, report_path=report,
                        layout_regex=layout_regex, marker=marker, max_line_bytes=max_line_bytes,
                        max_dump_bytes=max_dump_bytes, parse_seconds=parse_seconds, settle=settle, wait=wait,
                        fail_on=fail_on or ("new" if fail_on_regression else None), dask_address=dask_address,
                        summary_json=summary_json, verbose=verbose, log_level=log_level.upper() if log_level else None)


def night_command(*, settle: float, wait: bool) -> Callable:
    """``command`` for a command that runs nights: it takes its own parameters, then every option of
    ``night_options`` (``settle`` and ``wait`` with this command's defaults), and its first
    parameter, ``night``, receives them as one ``NightOptions``."""
    shared = [p.replace(default=settle if p.name == "settle" else wait if p.name == "wait" else p.default)
              for p in _parameters(night_options)]

    def register(fn: Callable) -> Callable:
        own = _parameters(fn)[1:]  # after ``night``

        @functools.wraps(fn)
        def with_night(**kwargs):
            night = night_options(**{p.name: kwargs.pop(p.name) for p in shared})
            return fn(night, **kwargs)

        with_night.__signature__ = inspect.Signature(own + shared)
        with_night.__annotations__ = {p.name: p.annotation for p in own + shared}  # for Typer's get_type_hints
        return command()(with_night)

    return register


@command()
def parse(
    files: Annotated[list[Path], typer.Argument(exists=True, readable=True, help="Dump files (.gz read transparently), "
                                                "or directories: every file under each, as the nightly lists a bucket's.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per file (one per line).")] = False,
    table: Annotated[Optional[str], typer.Option("--table", help="Also print this records table.")] = None,
    limit: Annotated[int, typer.Option(help="Rows of --table to print (0: all).")] = 20,
    summary: Annotated[bool, typer.Option("--summary", help="One line per file: kind, stage, program, status.")] = False,
    max_line_bytes: MaxLineBytes = LINE_BYTES,
    max_dump_bytes: MaxDumpBytes = DUMP_BYTES,
    parse_seconds: ParseSeconds = PARSE_SECONDS,
) -> int:
    """Parse dumps: kind, stage, program, status, errors and metrics of each.

    Example:

    \b
        dumpscope parse --summary dumps/*.txt
        dumpscope parse --summary data/sample_bucket/2026-11-20
        dumpscope parse module.hlo.txt --table hlo_instr --limit 5
    """
    from flows.commands.parse import ParseLimits, print_parsed

    limits = ParseLimits(max_line_bytes=max_line_bytes, max_dump_bytes=max_dump_bytes, max_seconds=parse_seconds)
    try:
        failed = print_parsed(files, as_json=as_json, table=table, limit=limit, summary=summary, limits=limits)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--table") from None
    return 1 if failed else 0


@command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL to run (read-only).")],
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json (an array of row objects).")] = "table",
) -> None:
    """Run a read-only SQL query on the warehouse and print the result.

    Example:

    \b
        dumpscope sql "SELECT run_id, status FROM runs" --format csv
    """
    from flows.commands import query as command_module

    if fmt not in command_module.FORMATS:
        raise typer.BadParameter(f"unknown format {fmt!r}; use table, csv or json", param_hint="--format")
    command_module.main(query=query, warehouse=warehouse, fmt=fmt)


@night_command(settle=0.0, wait=False)
def run(night: NightOptions) -> int:
    """Run the nightly flow once (Prefect ephemeral mode: no server needed) and print, in plain text,
    what it loaded, the latest run's verdict, its new incidents with a `dumpscope diff` each, and
    where the report and the site are.

    Example:

    \b
        dumpscope run --bucket s3://dumps/nightly --warehouse data/warehouse.duckdb --fail-on new
    """
    from flows.commands import run as command_module

    return command_module.main(night)


@command("aggregate")
def aggregate_cmd(
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    settings: Settings = None,
    wait: WaitForWriter = False,
    memory_limit: MemoryLimit = None,
) -> None:
    """Recompute trends, regressions, events and diffs (after editing the settings).

    Example:

    \b
        dumpscope aggregate --settings dumpscope.toml --memory-limit 2GB
    """
    from flows.commands import aggregate as command_module

    command_module.main(warehouse=warehouse, settings=settings, wait=wait, memory_limit=memory_limit)


@command()
def accept(
    target: Annotated[str, typer.Argument(help="An incident id (I-1a2b3c4d, see `dumpscope incidents`), or a series id "
                                          "or shell pattern of series ids (jax-pmap/*).")],
    run_id: Annotated[Optional[str], typer.Argument(help="Run whose values become the new baseline: an id, latest or "
                                                    "previous (default: the latest).")] = None,
    # Optional to Typer so that a missing --note is one line (flows.commands.accept says it), not a usage box.
    note: Annotated[Optional[str], typer.Option(help="Why the change is intended (required; shown on the accepts page).")] = None,
    metric: Annotated[Optional[str], typer.Option(help="Accept only this metric (default: every metric).")] = None,
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    settings: Settings = None,
    wait: WaitForWriter = True,
    memory_limit: MemoryLimit = None,
) -> None:
    """Record that a change was intended: the incident closes as accepted, the baseline restarts.
    An accept that would close nothing is refused (exit 2); the accepts table and page list
    the incidents each accept closed.

    Example:

    \b
        dumpscope accept I-8e6059c4 --note "bigger tiles, intended"
        dumpscope accept 'jax-pmap/*' 2026-11-20 --metric kernel.collectives --note "psum per layer"
    """
    from flows.commands import accept as command_module

    command_module.main(target=target, run_id=run_id, note=note, metric=metric, warehouse=warehouse, settings=settings,
                        wait=wait, memory_limit=memory_limit)


@command()
def incidents(
    incident: Annotated[Optional[str], typer.Argument(help="One incident (I-xxxxxxxx): its steps, cause, evidence and page.")] = None,
    run_id: Annotated[Optional[str], typer.Option("--run", help="The run: an id, latest or previous (default: the latest); "
                                                  "what that run's summary listed.")] = None,
    status: Annotated[str, typer.Option(help="new (opened in the run), open (new or still open there), fixed, accepted, "
                                        "lost (improvements lost in the run), improvements (new or still in effect), "
                                        "or all (every incident ever, with its last status).")] = "open",
    fmt: Annotated[str, typer.Option("--format", help="table or json (a list of objects).")] = "table",
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    settings: Settings = None,
) -> None:
    """The incidents of a run: what got worse, in which program, since when, and why.

    Example:

    \b
        dumpscope incidents --status new
        dumpscope incidents I-8e6059c4
    """
    from flows.commands import incidents as command_module

    if status not in command_module.STATUS_CHOICES:
        raise typer.BadParameter(f"use one of {', '.join(command_module.STATUS_CHOICES)}", param_hint="--status")
    if fmt not in ("table", "json"):
        raise typer.BadParameter("use table or json", param_hint="--format")
    command_module.main(incident=incident, run_id=run_id, status=status, fmt=fmt, warehouse=warehouse, settings=settings)


@command()
def diff(
    run_a: Annotated[str, typer.Argument(help="The earlier run: an id, or previous (the run before the latest).")],
    run_b: Annotated[str, typer.Argument(help="The later run: an id, or latest.")],
    series: Annotated[Optional[str], typer.Option(help="Only series matching this pattern (shell-style, e.g. 'jax-pmap/*').")] = None,
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per change.")] = False,
) -> None:
    """What changed between two runs: structure (fusions, collectives, allocations...) and metrics.

    Example:

    \b
        dumpscope diff 2026-11-19 2026-11-20 --series 'jax-pmap/*'
        dumpscope diff previous latest
    """
    from flows.commands import diff as command_module

    command_module.main(run_a=run_a, run_b=run_b, series=series, warehouse=warehouse, as_json=as_json)


@command()
def site(
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    out: Annotated[Path, typer.Option(help="Directory the static site is built into (replaced atomically).")] = Path("site"),
    settings: Settings = None,
) -> None:
    """Build the report site (mkdocs-material, Altair charts, works offline) from the warehouse.

    Example:

    \b
        dumpscope site --warehouse data/warehouse.duckdb --out site
    """
    from flows.commands import site as command_module

    command_module.main(warehouse=warehouse, out=out, settings=settings)


@night_command(settle=30.0, wait=True)
def watch(
    night: NightOptions,
    interval: Annotated[float, typer.Option(help="Seconds between two looks at the bucket.")] = 60.0,
    iterations: Annotated[int, typer.Option(help="Stop after this many looks (0: never).")] = 0,
) -> None:
    """Keep polling the bucket; ingest new files once they have settled, each look a night as `run` runs it.

    Example:

    \b
        dumpscope watch --bucket /mnt/dumps --interval 300 --marker _SUCCESS --site site --notify json://127.0.0.1:9000/hook
    """
    from flows.commands import watch as command_module

    command_module.watch(night, interval=interval, iterations=iterations)


@night_command(settle=300.0, wait=True)
def serve(
    night: NightOptions,
    cron: Annotated[str, typer.Option(help="When the nightly runs (cron syntax, the server's time zone).")] = "0 2 * * *",
    prefect_wait: Annotated[float, typer.Option(
        "--prefect-wait", envvar="DUMPSCOPE_PREFECT_WAIT", min=0, metavar="SECONDS",  # preflight.PREFECT_WAIT_VAR
        help="How long to wait for the Prefect server at PREFECT_API_URL while it is starting (refusing "
        "connections): serve and the server often start together; said on stderr.")] = 120.0,  # PREFECT_WAIT_SECONDS
) -> None:
    """Register the nightly as a scheduled deployment and serve it (needs a Prefect server); each
    scheduled run is a night as `run` runs it.

    Example:

    \b
        PREFECT_API_URL=http://127.0.0.1:4200/api dumpscope serve --cron "0 2 * * *" --bucket s3://dumps/nightly \\
            --site /srv/dumpscope/site --publish /var/www/dumpscope --notify "$SLACK_URL"
    """
    from flows.commands import preflight
    from flows.commands import watch as command_module

    preflight.cron_schedule(cron)  # before anything else: a schedule Prefect refuses is a mistake, however the rest is
    command_module.serve(night, cron=cron, prefect_wait=prefect_wait)


@command()
def check(
    directory: Annotated[Path, typer.Argument(help="Dumps of a change, laid out as one night's jobs: DIR/<job>/... "
                                              "(like one run directory of the bucket; DIR/run.json optional).",
                                              exists=True, file_okay=False, dir_okay=True)],  # else exit 2: a bad argument
    against: Annotated[Optional[str], typer.Option("--against", help="The run to compare with: an id, latest or previous "
                                                   "(default: the latest).")] = None,
    warehouse: Annotated[str, typer.Option("--warehouse", help="DuckDB warehouse file (opened read-only), or the URL of a "
                                           "snapshot published by `run --publish` (https://…/warehouse.duckdb, "
                                           "s3://…: fetched first).")] = str(DEFAULT_WAREHOUSE),
    fmt: Annotated[str, typer.Option("--format", help="text, markdown (a pull-request comment) or json (a list of objects).")] = "text",
    fail_on: Annotated[Optional[str], typer.Option(
        "--fail-on", help="new: exit with status 4 when the change would open a regression or failure "
        "(a damaged dump counts; new programs do not).")] = None,
    settings: Settings = None,
    memory_limit: MemoryLimit = None,
    storage_option: StorageOptions = None,
) -> int:
    """What a change would open against last night, before it lands (writes nothing).

    Example:

    \b
        dumpscope check ci-dumps/ --format markdown --fail-on new --warehouse https://dumps.example.org/warehouse.duckdb
    """
    from flows.commands import check as command_module

    if fmt not in command_module.FORMATS:
        raise typer.BadParameter(f"use {', '.join(command_module.FORMATS)}", param_hint="--format")
    if fail_on not in (None, "new"):
        raise typer.BadParameter("use new", param_hint="--fail-on")
    return command_module.main(directory=directory, against=against, warehouse=warehouse, fmt=fmt, fail_on=fail_on,
                               settings=settings, memory_limit=memory_limit, storage_option=storage_option or [])


@command()
def doctor(
    warehouse: Warehouse = DEFAULT_WAREHOUSE,
    bucket: Annotated[Optional[str], typer.Option(help="The dump bucket: with --repair, damaged records are parsed "
                                                  "again from their dumps (one night is run on it).")] = None,
    repair: Annotated[bool, typer.Option("--repair", help="Fix what can be fixed (takes the writer lock).")] = False,
) -> int:
    """Check the warehouse and its records store (and repair them with --repair): exit 0 healthy, 1 problems left.

    Example:

    \b
        dumpscope doctor --warehouse data/warehouse.duckdb --repair --bucket s3://dumps/nightly
    """
    from flows.commands import doctor as command_module

    return command_module.main(warehouse=warehouse, bucket=bucket, repair_too=repair)


def main() -> None:
    """The console script. Once SIGTERM came, the exit status says so (128 + 15), whatever
    surfaces on the way out (``flows.commands.signals.stopped_by_sigterm``)."""
    from flows.commands import signals

    try:
        app()
    except BaseException as exc:
        if signals.stopped_by_sigterm(exc):
            raise SystemExit(signals.STOPPED) from None
        raise


if __name__ == "__main__":  # pragma: no cover
    main()
