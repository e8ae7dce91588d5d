"""The ``dumpscope`` command: argument parsing only; each command calls a flow module.

Imports are deferred into each command, so commands that only read (``parse``) load
neither Prefect nor DuckDB and answer in a fraction of a second.
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

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


def _prefect_defaults() -> None:
    # No network here for Prefect's telemetry; a first start (new database) on a busy
    # machine can take longer than Prefect's default 20 s ephemeral start-up limit.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    # systemd and Kubernetes stop a service with SIGTERM. Python's default action dies on the
    # spot and skips the atexit hook that stops Prefect's temporary API server, which then
    # keeps listening: exit in order instead, as on Ctrl-C.
    signal.signal(signal.SIGTERM, _exit_in_order)
    _note_signals()


def _check_notify() -> None:
    """Exit 2 with one line unless every notification target (``--notify``, or the environment's
    DUMPSCOPE_NOTIFY) is a URL Apprise can use: checked before any work, never inside a night."""
    from flows import storage_secrets
    from flows.publish.notify import BadTarget, check_targets

    try:
        check_targets(storage_secrets.notify_targets())
    except (BadTarget, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _exit_in_order(signum: int, frame) -> None:
    raise SystemExit(128 + signum)


_noted: int | None = None  # read end of the pipe the interpreter writes each signal's number to


def _note_signals() -> None:
    """Have every signal that reaches a Python handler noted, whichever handler that is:
    during a flow Prefect's engine has its own SIGTERM handler in place of ours."""
    global _noted
    if _noted is None:
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        _noted = read


def _signals_noted() -> set[int]:
    try:
        return set(os.read(_noted, 4096)) if _noted is not None else set()
    except BlockingIOError:
        return set()


MEMORY_HELP = ("Most memory the command may hold, e.g. 2GB (DuckDB and the Python side share it; a lower limit "
               "is slower, never wrong). Default: memory_limit in the settings file, else none.")
RUN_MEMORY_HELP = ("Most memory the night's processes may hold, e.g. 2GB (DuckDB and the Python side share it; a "
                   "lower limit is slower, never wrong). Default: memory_limit in the settings file, else half of "
                   "what the machine can give (the smaller of MemAvailable and the cgroup memory limit), stated in "
                   "the night's log line 'memory limit: ...'.")


@app.command()
def parse(
    files: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False, readable=True, help="Dump files (.gz read transparently).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per file (one per line).")] = False,
    table: Annotated[Optional[str], typer.Option("--table", help="Also print this records table.")] = None,
    limit: Annotated[int, typer.Option(help="Rows of --table to print (0: all).")] = 20,
    summary: Annotated[bool, typer.Option("--summary", help="One line per file: kind, stage, program, status.")] = False,
    max_line_bytes: Annotated[int, typer.Option(help="Longest line a dump may have (bytes).")] = 64 << 20,
    max_dump_bytes: Annotated[int, typer.Option(help="Most text one dump may hold once decompressed (bytes).")] = 4 << 30,
    parse_seconds: Annotated[float, typer.Option(help="Longest one parse may take (seconds).")] = 600.0,
) -> None:
    """Parse dumps: kind, stage, program, status, errors and metrics of each."""
    from flows.commands.parse import ParseLimits, print_parsed

    limits = ParseLimits(max_line_bytes=max_line_bytes, max_dump_bytes=max_dump_bytes, max_seconds=parse_seconds)
    try:
        failed = print_parsed(files, as_json=as_json, table=table, limit=limit, summary=summary, limits=limits)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--table") from None
    if failed:
        raise typer.Exit(1)


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL to run (read-only).")],
    warehouse: Annotated[Path, typer.Option("--warehouse", help="Warehouse file.")] = Path("data/warehouse.duckdb"),
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json (an array of row objects).")] = "table",
) -> None:
    """Run a read-only SQL query on the warehouse and print the result."""
    from flows.commands.query import FORMATS, QueryError, print_rows, run_query

    if fmt not in FORMATS:
        raise typer.BadParameter(f"unknown format {fmt!r}; use table, csv or json", param_hint="--format")
    try:
        names, rows = run_query(warehouse, query)
    except QueryError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    print_rows(names, rows, fmt)


@app.command()
def run(
    bucket: Annotated[str, typer.Option(help="Dump bucket: a local path or any fsspec URL (s3://bucket/prefix).")] = "data/sample_bucket",
    warehouse: Annotated[Path, typer.Option(help="DuckDB warehouse file.")] = Path("data/warehouse.duckdb"),
    settle: Annotated[float, typer.Option(help="Seconds a file's size and mtime must stay unchanged before it is taken.")] = 0.0,
    layout_regex: Annotated[Optional[str], typer.Option(help="Regex with named groups run_id and job, for other bucket layouts.")] = None,
    marker: Annotated[Optional[str], typer.Option(help="Completion marker file name (e.g. _SUCCESS): a run is taken when it has one.")] = None,
    workers: Annotated[Optional[int], typer.Option(help="Parse processes (default: the cores).")] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for another run holding the warehouse lock.")] = False,
    storage_option: Annotated[Optional[list[str]], typer.Option(
        "--storage-option", metavar="KEY=VALUE",
        help="fsspec storage option for the bucket (repeatable); dotted keys nest, e.g. "
        "client_kwargs.endpoint_url=http://127.0.0.1:9000. Without them s3:// uses the usual AWS_* "
        "environment variables (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ...). Values are never "
        "recorded by Prefect (only the names).")] = None,
    storage_secret: Annotated[Optional[str], typer.Option(
        help="Name of a Prefect Secret block holding the storage options as a JSON object "
        "(credentials kept in Prefect, not on the command line).")] = None,
    dask_address: Annotated[Optional[str], typer.Option(
        help="Run the parse tasks on this existing Dask cluster (tcp://HOST:PORT); its workers must "
        "reach the bucket, the staging dir next to the warehouse, and the Prefect API.")] = None,
    settings: Annotated[Optional[Path], typer.Option(help=SETTINGS_HELP)] = None,
    report: Annotated[Optional[Path], typer.Option(help="Where the regression summary (Markdown) goes (default: <warehouse>.report.md).")] = None,
    fail_on: Annotated[Optional[str], typer.Option(
        "--fail-on", help="Exit with status 4 when this run opened incidents (new: regressions or failures opened "
        "by the runs this invocation loaded; a re-run with nothing new passes) or when any is open at the latest "
        "run (open).")] = None,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="Same as --fail-on new.")] = False,
    notify: Annotated[Optional[list[str]], typer.Option(
        "--notify", metavar="URL", help="Send the summary of NEW incidents to this Apprise URL (repeatable: Slack, "
        "Teams, email, GitHub, json:// webhooks...), once per run; never again on a re-run. A URL Apprise cannot "
        "use exits 2 before any work; a message not delivered is retried by the next run, and the run exits 5 "
        "(the night is published). Default: the DUMPSCOPE_NOTIFY environment variable (a JSON list).")] = None,
    site_dir: Annotated[Optional[Path], typer.Option("--site", help="Also build the report site into this directory.")] = None,
    max_line_bytes: Annotated[int, typer.Option(help="Longest line a dump may have (bytes); a dump past it is failed. "
                                                "A parse holds about this much memory at most.")] = 64 << 20,  # = transforms.parse.ParseLimits()
    max_dump_bytes: Annotated[int, typer.Option(help="Most text one dump may hold once decompressed (bytes).")] = 4 << 30,
    parse_seconds: Annotated[float, typer.Option(help="Longest one parse may take (seconds).")] = 600.0,
    memory_limit: Annotated[Optional[str], typer.Option(help=RUN_MEMORY_HELP)] = None,
    summary_json: Annotated[Optional[Path], typer.Option(
        help="Also write the night's summary (counts, seconds per stage, bytes published) to this JSON file.")] = None,
) -> None:
    """Run the nightly flow once (Prefect ephemeral mode: no server needed)."""
    _prefect_defaults()
    from flows import storage_secrets
    from flows.ingest.bucket import parse_storage_options

    try:
        storage_options = parse_storage_options(storage_option or [])
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    storage_secrets.export(storage_options)  # values by the environment, never as flow parameters
    storage_secrets.export_notify_targets(notify or [])
    _check_notify()
    if fail_on not in (None, "new", "open"):
        raise typer.BadParameter("use new or open", param_hint="--fail-on")
    fail_on = fail_on or ("new" if fail_on_regression else None)
    from flows.ingest.bucket import BucketUnusable
    from flows.nightly import run_nightly
    from flows.warehouse.store import WarehouseBusy

    memory = _memory_limit(memory_limit, _check_settings(settings), settings)
    if not storage_secret:  # with one, the options are Prefect's to give: the flow says it, unretried
        _check_bucket(bucket, storage_secrets.resolve(None))
    try:
        summary = run_nightly(memory_limit=memory, bucket=bucket, warehouse=warehouse, settle_seconds=settle, layout_regex=layout_regex,
                              marker=marker, workers=workers, wait_for_lock=wait, storage_secret=storage_secret,
                              storage_option_names=storage_secrets.option_names(storage_options) or None,
                              dask_address=dask_address, settings_path=settings, report_path=report, site_dir=site_dir,
                              state_path=warehouse.with_suffix(".settle.json") if settle else None,
                              max_line_bytes=max_line_bytes, max_dump_bytes=max_dump_bytes, parse_seconds=parse_seconds)
    except WarehouseBusy as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3) from None
    except BucketUnusable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if summary_json is not None:
        summary_json.write_text(summary.json(), encoding="utf-8")
    for line in summary.undelivered:
        typer.echo(f"warning: {line}", err=True)
    failing = summary.new_incidents if fail_on == "new" else summary.incidents.get("new", 0) + summary.incidents.get("open", 0)
    if fail_on and failing:
        typer.echo(f"{failing} {'new' if fail_on == 'new' else 'open'} incident(s) (regressions or failures)", err=True)
        raise typer.Exit(4)
    if summary.undelivered:  # the night is published; the scheduler sees that a message is owed
        raise typer.Exit(5)


SETTINGS_HELP = "Settings file (TOML: [series] names, [floors], [[rule]] thresholds, [site]); default ./dumpscope.toml when present."


def _check_bucket(bucket: str, storage_options: Optional[dict]) -> None:
    """Exit 2 with one line when the bucket is missing or the store refuses the credentials:
    an operator's mistake, told before any work starts (no retries, no traceback)."""
    from flows.ingest.bucket import BucketUnusable, check_bucket

    try:
        check_bucket(bucket, storage_options)
    except BucketUnusable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _check_settings(path: Optional[Path]):
    """The settings, or exit 2 with the file's error (before any work starts)."""
    from flows.verdict.settings import load_settings

    try:
        return load_settings(path)
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _memory_limit(flag: Optional[str], loaded, settings_path: Optional[Path]) -> Optional[int]:
    """Bytes of the memory limit (the flag, else the settings file's), or exit 2."""
    from flows.resources import parse_memory

    try:
        return parse_memory(flag) if flag else parse_memory(loaded.memory_limit)
    except ValueError as exc:
        where = "--memory-limit" if flag else str(settings_path or "dumpscope.toml")
        typer.echo(f"error: {where}: {exc}", err=True)
        raise typer.Exit(2) from None


def _check_warehouse(warehouse: Path) -> None:
    """Exit 1 with one line unless ``warehouse`` is a DuckDB file."""
    from flows.warehouse.store import storage_version_number

    if not warehouse.exists():
        typer.echo(f"error: no warehouse at {warehouse} (run `dumpscope run` first)", err=True)
        raise typer.Exit(1)
    try:
        storage_version_number(warehouse)
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


@contextmanager
def _writer(warehouse: Path, wait: bool, budget=None):
    """The warehouse as its one writer (DuckDB within ``budget``); exits 1 when it does not
    exist, 3 when busy."""
    from flows.warehouse.store import Warehouse, WarehouseBusy

    _check_warehouse(warehouse)
    try:
        with Warehouse(warehouse, wait=wait, budget=budget) as con:
            yield con
    except WarehouseBusy as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3) from None


@app.command("aggregate")
def aggregate_cmd(
    warehouse: Annotated[Path, typer.Option(help="DuckDB warehouse file.")] = Path("data/warehouse.duckdb"),
    settings: Annotated[Optional[Path], typer.Option(help=SETTINGS_HELP)] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for another writer.")] = False,
    memory_limit: Annotated[Optional[str], typer.Option(help=MEMORY_HELP)] = None,
) -> None:
    """Recompute trends, regressions, events and diffs (after editing the settings)."""
    from flows.verdict.aggregate import aggregate
    from flows.resources import MemoryBudget

    conf = _check_settings(settings)
    budget = MemoryBudget(_memory_limit(memory_limit, conf, settings))
    with _writer(warehouse, wait, budget) as con:
        result = aggregate(con, conf, budget=budget)
    if result.from_run is None:
        typer.echo("derived tables are up to date")
    for table, n in result.rows.items():
        typer.echo(f"{table}: {n} rows")
    typer.echo("seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in result.seconds.items()))


@app.command()
def accept(
    target: Annotated[str, typer.Argument(help="An incident id (I-1a2b3c4d, see `dumpscope incidents`), or a series id "
                                          "or shell pattern of series ids (jax-pmap/*).")],
    run_id: Annotated[Optional[str], typer.Argument(help="Run whose values become the new baseline (default: the latest).")] = None,
    note: Annotated[Optional[str], typer.Option(help="Why the change is intended.")] = None,
    metric: Annotated[Optional[str], typer.Option(help="Accept only this metric (default: every metric).")] = None,
    warehouse: Annotated[Path, typer.Option(help="DuckDB warehouse file.")] = Path("data/warehouse.duckdb"),
    settings: Annotated[Optional[Path], typer.Option(help=SETTINGS_HELP)] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for another writer.")] = True,
    memory_limit: Annotated[Optional[str], typer.Option(help=MEMORY_HELP)] = None,
) -> None:
    """Record that a change was intended: the incident closes as accepted, the baseline restarts."""
    from flows.commands.accept import AcceptRefused
    from flows.commands.accept import accept as accept_change
    from flows.resources import MemoryBudget

    conf = _check_settings(settings)
    budget = MemoryBudget(_memory_limit(memory_limit, conf, settings))
    with _writer(warehouse, wait, budget) as con:
        try:
            done = accept_change(con, conf, target, run_id, metric, note, budget=budget)
        except AcceptRefused as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
    closed = ", ".join(done.closed) or "none"
    typer.echo(f"accepted {target} at {done.run_id}" + (f" ({metric})" if metric else "")
               + f"; incidents closed: {closed}; regressions left there: {done.regressions_left}. "
               "The site shows it from its next build (`dumpscope site`, or the next nightly).")


@app.command()
def incidents(
    incident: Annotated[Optional[str], typer.Argument(help="One incident (I-xxxxxxxx): its steps, cause, evidence and page.")] = None,
    run_id: Annotated[Optional[str], typer.Option("--run", help="The run (default: the latest): what that run's summary listed.")] = None,
    status: Annotated[str, typer.Option(help="new (opened in the run), open (new or still open there), fixed, accepted, "
                                        "lost (improvements lost in the run), improvements (new or still in effect), "
                                        "or all (every incident ever, with its last status).")] = "open",
    fmt: Annotated[str, typer.Option("--format", help="table or json (a list of objects).")] = "table",
    warehouse: Annotated[Path, typer.Option(help="DuckDB warehouse file.")] = Path("data/warehouse.duckdb"),
    settings: Annotated[Optional[Path], typer.Option(help=SETTINGS_HELP)] = None,
) -> None:
    """The incidents of a run: what got worse, in which program, since when, and why.

    Example: dumpscope incidents --status new; dumpscope incidents I-8e6059c4
    """
    from flows.commands.incidents import IncidentsError, NoSuchRun, STATUSES, list_incidents, one_incident, print_incidents, print_one

    if status not in STATUSES:
        raise typer.BadParameter(f"use one of {', '.join(STATUSES)}", param_hint="--status")
    if fmt not in ("table", "json"):
        raise typer.BadParameter("use table or json", param_hint="--format")
    try:
        if incident is not None:
            site_url = _check_settings(settings).site_url
            print_one(one_incident(warehouse, incident, run_id, site_url), fmt)
            return
        run, rows = list_incidents(warehouse, run_id, status)
    except IncidentsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2 if isinstance(exc, NoSuchRun) else 1) from None
    print_incidents(run, status, rows, fmt)


@app.command()
def diff(
    run_a: Annotated[str, typer.Argument(help="The earlier run.")],
    run_b: Annotated[str, typer.Argument(help="The later run.")],
    series: Annotated[Optional[str], typer.Option(help="Only series matching this pattern (shell-style, e.g. 'jax-pmap/*').")] = None,
    warehouse: Annotated[Path, typer.Option(help="DuckDB warehouse file.")] = Path("data/warehouse.duckdb"),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per change.")] = False,
) -> None:
    """What changed between two runs: structure (fusions, collectives, allocations...) and metrics."""
    from flows.commands.diff import DiffRefused, diff_warehouse, print_diff

    try:
        result = diff_warehouse(warehouse, run_a, run_b, series)
    except ValueError as exc:  # DiffRefused: a run or a --series pattern that names nothing
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2 if isinstance(exc, DiffRefused) else 1) from None
    print_diff(result, run_a, run_b, as_json=as_json)


@app.command()
def site(
    warehouse: Annotated[Path, typer.Option(help="DuckDB warehouse file.")] = Path("data/warehouse.duckdb"),
    out: Annotated[Path, typer.Option(help="Directory the static site is built into (replaced atomically).")] = Path("site"),
    settings: Annotated[Optional[Path], typer.Option(help=SETTINGS_HELP)] = None,
) -> None:
    """Build the report site (mkdocs-material, Altair charts, works offline) from the warehouse."""
    from flows.publish.site import build_site
    from flows.verdict.incidents import OlderWarehouse

    from flows.commands.query import damaged_store

    conf = _check_settings(settings)
    _check_warehouse(warehouse)
    # A records file gone or cut since the last night: a site with its rows silently missing
    # would mislead; the next night heals the store (and rebuilds the site with --site-dir).
    if (damage := damaged_store(warehouse)):
        typer.echo(f"error: {damage}", err=True)
        raise typer.Exit(1)
    try:
        result = build_site(warehouse, out, conf)
    except OlderWarehouse as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"site: {result.out} ({result.pages} pages, {result.charts} charts; "
               + ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items()) + ")")


@app.command()
def watch(
    bucket: Annotated[str, typer.Option(help="Dump bucket: a local path or any fsspec URL.")] = "data/sample_bucket",
    warehouse: Annotated[Path, typer.Option(help="DuckDB warehouse file.")] = Path("data/warehouse.duckdb"),
    interval: Annotated[float, typer.Option(help="Seconds between two looks at the bucket.")] = 60.0,
    settle: Annotated[float, typer.Option(help="Seconds a file must stay unchanged before it is taken.")] = 30.0,
    marker: Annotated[Optional[str], typer.Option(help="Completion marker file name.")] = None,
    iterations: Annotated[int, typer.Option(help="Stop after this many looks (0: never).")] = 0,
) -> None:
    """Keep polling the bucket; ingest new files once they have settled.

    Notification targets come from DUMPSCOPE_NOTIFY (a JSON list of Apprise URLs), checked at start.
    """
    import time

    _prefect_defaults()
    _check_notify()
    from flows import storage_secrets
    from flows.ingest.bucket import BucketUnusable
    from flows.nightly import nightly

    _check_bucket(bucket, storage_secrets.resolve(None))  # the options the nightly will resolve
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
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(2) from None
            # Later (a mount or the network gone for a while): said, and looked at again next time.
            typer.echo(f"warning: {exc}; looking again in {interval:g} s", err=True)
        done += 1
        if iterations and done >= iterations:
            return
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


@app.command()
def serve(
    cron: Annotated[str, typer.Option(help="When the nightly runs (cron syntax, the server's time zone).")] = "0 2 * * *",
    bucket: Annotated[str, typer.Option(help="Dump bucket: a local path or any fsspec URL.")] = "data/sample_bucket",
    warehouse: Annotated[Path, typer.Option(help="DuckDB warehouse file.")] = Path("data/warehouse.duckdb"),
    settle: Annotated[float, typer.Option(help="Seconds a file must stay unchanged before it is taken.")] = 300.0,
) -> None:
    """Register the nightly as a scheduled deployment and serve it (needs a Prefect server).

    Notification targets come from DUMPSCOPE_NOTIFY (a JSON list of Apprise URLs), checked at start.
    """
    _check_notify()
    if not os.environ.get("PREFECT_API_URL"):
        typer.echo("error: scheduled runs need a Prefect server: start one with `prefect server start` "
                   "and set PREFECT_API_URL=http://127.0.0.1:4200/api (see README)", err=True)
        raise typer.Exit(2)
    from flows.nightly import nightly

    nightly.serve(name="dumpscope-nightly", cron=cron, parameters={
        "bucket": bucket, "warehouse": str(warehouse.resolve()), "settle_seconds": settle,
        "state_path": str(warehouse.resolve().with_suffix(".settle.json")), "wait_for_lock": True})


@app.command()
def check(
    directory: Annotated[Path, typer.Argument(help="Dumps of a change, laid out as one night's jobs: DIR/<job>/... "
                                              "(like one run directory of the bucket; DIR/run.json optional).",
                                              exists=True, file_okay=False, dir_okay=True)],  # else exit 2: a bad argument
    against: Annotated[Optional[str], typer.Option("--against", help="The run to compare with (default: the latest).")] = None,
    warehouse: Annotated[Path, typer.Option(help="DuckDB warehouse file (opened read-only).")] = Path("data/warehouse.duckdb"),
    fmt: Annotated[str, typer.Option("--format", help="text, markdown (a pull-request comment) or json (a list of objects).")] = "text",
    fail_on: Annotated[Optional[str], typer.Option(
        "--fail-on", help="new: exit with status 4 when the change would open a regression or failure "
        "(a damaged dump counts; new programs do not).")] = None,
    settings: Annotated[Optional[Path], typer.Option(help=SETTINGS_HELP)] = None,
    memory_limit: Annotated[Optional[str], typer.Option(help=MEMORY_HELP)] = None,
) -> None:
    """What a change would open against last night, before it lands (writes nothing)."""
    from flows.commands.check import FORMATS, BadDirectory, CheckError, NoSuchRun, check_dir, render
    from flows.resources import MemoryBudget

    if fmt not in FORMATS:
        raise typer.BadParameter(f"use {', '.join(FORMATS)}", param_hint="--format")
    if fail_on not in (None, "new"):
        raise typer.BadParameter("use new", param_hint="--fail-on")
    conf = _check_settings(settings)
    budget = MemoryBudget(_memory_limit(memory_limit, conf, settings))
    try:
        result = check_dir(directory, warehouse, against=against, settings=conf, budget=budget)
    except CheckError as exc:  # NoSuchRun, BadDirectory: a bad argument
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2 if isinstance(exc, (NoSuchRun, BadDirectory)) else 1) from None
    typer.echo(render(result, str(directory), fmt))
    if fail_on and result.failing:
        typer.echo(f"{len(result.failing)} new incident(s) (regressions or failures)", err=True)
        raise typer.Exit(4)


@app.command()
def doctor(
    warehouse: Annotated[Path, typer.Option(help="DuckDB warehouse file.")] = Path("data/warehouse.duckdb"),
    bucket: Annotated[Optional[str], typer.Option(help="The dump bucket: with --repair, damaged records are parsed "
                                                  "again from their dumps (one night is run on it).")] = None,
    repair: Annotated[bool, typer.Option("--repair", help="Fix what can be fixed (takes the writer lock).")] = False,
) -> None:
    """Check the warehouse and its records store (and repair them with --repair): exit 0 healthy, 1 problems left."""
    from flows.commands import doctor as doc
    from flows.ingest.bucket import BucketNotFound
    from flows.warehouse.store import WarehouseBusy

    _check_warehouse(warehouse)
    if repair:
        if bucket is not None:
            _prefect_defaults()
        try:
            for line in doc.repair(warehouse, bucket):
                typer.echo(f"repaired: {line}")
        except BucketNotFound as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        except WarehouseBusy as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(3) from None
    found = doc.examine(warehouse)
    for line in found.lines():
        typer.echo(line)
    if found.problems:
        if not repair:
            typer.echo(f"{len(found.problems)} problem(s): dumpscope doctor --warehouse {warehouse} --repair [--bucket B]")
        raise typer.Exit(1)


def main() -> None:
    """The console script. Once SIGTERM came, the exit status says so (128 + 15), whatever
    surfaces on the way out: during a flow Prefect's handler takes the signal, and a DuckDB
    query it interrupts raises "Query interrupted", which would end the command as a failure (1)."""
    try:
        app()
    except BaseException as exc:
        stopped = 128 + signal.SIGTERM
        if not (isinstance(exc, SystemExit) and exc.code == stopped) and signal.SIGTERM in _signals_noted():
            raise SystemExit(stopped) from None
        raise


if __name__ == "__main__":  # pragma: no cover
    main()
