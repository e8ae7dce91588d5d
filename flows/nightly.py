"""The nightly flow: discover → parse (in parallel, to staging) → load and aggregate
(one writer) → regression summary.

Thin wiring of the packages, each task a call into them, and no SQL here (``tests/test_layout.py``):
``flows.ingest`` (the bucket, staging, the parse pool), ``flows.warehouse`` (discovery's reads,
the writer, loading), ``flows.verdict`` (aggregation) and ``flows.publish`` (report,
notifications, site):

- discover lists the bucket, keeps settled objects, and leaves out paths the
  warehouse already holds with the same size and the current parser version;
- parse stages each object into Parquet keyed by its content hash, in chunks (a
  Prefect task costs ~10 ms in threads but ~200 ms in a process pool, so a task
  per dump would cost more than the parsing); a retried chunk skips what is staged;
- load is the single writer: one transaction per batch of dumps, then the trends,
  events and diffs recomputed (``flows.verdict.aggregate``), published atomically together
  (``flows.warehouse.store.Warehouse``); a night with nothing new writes nothing;
- report writes the Markdown summary of the latest run's incidents to a file,
  stdout and a Prefect artifact; with ``site_dir``, the report site is rebuilt.

Objects the bucket could not deliver are reported and retried next night; dumps the
parsers could not read, and objects that are no regular file inside the bucket (a
symbolic link, a FIFO: ``flows.ingest.bucket.open_object`` never reads them), are stored as
``failed`` with their error; objects whose run id or job name is refused never become
runs or jobs, and the night's summary lists them among its failures.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.futures import as_completed
from prefect.states import Completed, Failed

from flows import storage_secrets
from flows.errors import FAILING, UNDELIVERED
from flows.ingest import staging
from flows.ingest import housekeeping
from flows.ingest.bucket import list_objects, read_runs
from flows.ingest.bucket_access import BucketUnusable, connect
from flows.ingest.settle_state import load_settle_state, save_settle_state
from flows.ingest.pool import chunks_of, process_pool, recognise_held, shut_down_pool
# The parse worker's code lives in flows.ingest.staging: a spawned worker imports that module
# (no Prefect, no DuckDB: ~60 MiB less per worker than importing this one).
from flows.ingest.staging import Outcome, stage_chunk
from flows.night_settings import DEFAULT_BUCKET, DEFAULT_LIMITS, NightSettings
from flows.night_summary import NightSummary
from flows.stopwatch import Stopwatch
from flows.publish.notify import announce, owes_notifications
from flows.publish.report import write_night_report
from flows.resources import MemoryBudget, night_limit, peak_mib
from flows.verdict import incident_reader
from flows.verdict.aggregate import aggregate
from flows.verdict.compaction import compact_records, sweep_work_dirs
from flows.verdict import items
from flows.verdict.items import DumpSource, items_runner
from flows.verdict.settings import load_settings, needs_aggregate
from flows.warehouse import loading, siblings, store as wh
from flows.warehouse.discovery import published, still_new, store_damaged, up_to_date
from transforms.layout import BucketObject, Role, settled
from transforms.parse import ParseLimits

# The clock settle ages are measured on: the wall clock, since objects carry wall-clock
# mtimes. A module name so a test can turn it instead of racing it.
wall_clock = time.time


def _retry_unless_missing(task, task_run, state) -> bool:
    """A bucket that does not exist will not appear in 20 s, nor refused credentials work: fail at once."""
    try:
        state.result()
    except BucketUnusable:
        return False
    except Exception:
        return True
    return True


@task(retries=3, retry_delay_seconds=[1, 5, 20], retry_condition_fn=_retry_unless_missing)
def discover(bucket: str, warehouse: Path, settle_seconds: float, state_path: Path | None,
             storage_options: dict | None, layout_regex: str | None, marker: str | None):
    refused: list[str] = []  # run ids and job names refused: never runs or jobs, told in the summary
    listing = list_objects(bucket, layout_regex=layout_regex, storage_options=storage_options, marker=marker,
                           refused=refused)
    fs, _ = connect(bucket, storage_options)
    runs = read_runs(fs, listing)
    state = load_settle_state(state_path) if state_path else {}
    # trust_mtime: a file whose own mtime is already settle_seconds old is taken at first
    # sight; otherwise a nightly would only ever take files it saw the night before.
    ready, deferred, state = settled(state, listing, wall_clock(), settle_seconds, trust_mtime=True)
    if state_path:
        save_settle_state(state_path, state)
    held = published(warehouse, [o.path for o in ready if o.role is Role.DUMP])
    new = [o for o in ready if o.role is Role.DUMP and not up_to_date(held.known.get(o.path), o)]
    dumps_seen = sum(o.role is Role.DUMP for o in listing)
    new_runs = {r: info for r, info in runs.items() if r not in held.runs}
    return new, len(deferred), dumps_seen, new_runs, held.held if new else {}, refused


@task(retries=2, retry_delay_seconds=[2, 10])
def parse_chunk(bucket: str, storage_options: dict | None, chunk: list[BucketObject], staging_dir: Path,
                workers: int, in_process: bool = False, limits: ParseLimits = DEFAULT_LIMITS,
                held: dict[str, dict] | None = None) -> list[Outcome]:
    # Parsing is CPU-bound Python: by default the chunk runs in a worker process (no
    # Prefect there), while the Prefect task itself stays a cheap thread. On Dask the
    # task already runs in a worker process of the cluster: it parses right there.
    if in_process:
        return stage_chunk(bucket, storage_options, chunk, staging_dir, limits, held)
    return process_pool(workers).submit(stage_chunk, bucket, storage_options, chunk, staging_dir, limits, held).result()


@dataclass
class LoadResult:
    rows: int = 0
    loaded_runs: list[str] = field(default_factory=list)  # runs this load added or changed dumps in
    new_incidents: int = 0  # regressions and failures opened in those runs
    notified: int = 0  # messages delivered
    undelivered: list[str] = field(default_factory=list)  # what was not delivered, and why
    staging_dropped: int = 0  # staged contents removed once loaded
    seconds: dict[str, float] = field(default_factory=dict)  # catch_up, load, aggregate stages, publish
    publish_bytes: int = 0
    caught_up: str = ""
    leveled: str = ""
    peak_mib: dict[str, float] = field(default_factory=dict)  # this process's peak RSS at the end of each stage
    written_mib: dict[str, float] = field(default_factory=dict)  # MiB written since the writer started, at each stage's end
    healed: list[str] = field(default_factory=list)  # damaged records files the writer found (and healed)


@task
def load(warehouse: Path, outcomes: list[Outcome], runs: dict, wait: bool, settings_path: Path | None = None,
         notify_count: int = 0, staging_dir: Path | None = None, memory_limit: int | None = None,
         run_items=None) -> LoadResult:
    """Load the staged dumps, recompute the derived tables and announce new incidents: one publish.

    What to load is decided again once the lock is held, against the warehouse about to
    change: a run that overlapped this one may have loaded the same objects meanwhile, and
    discovery only looked at the last published file. ``notify_count``: how many
    notification targets the environment holds (``storage_secrets.notify_targets``): they get
    the new incidents of the runs loaded, and any message still owed to them.
    """
    settings = load_settings(settings_path)  # a bad settings file fails before any write
    result = LoadResult()
    budget = MemoryBudget(memory_limit)
    written = _bytes_written()
    clock = Stopwatch(result.seconds, gauges=[(result.peak_mib, peak_mib),
                                              (result.written_mib, lambda: (_bytes_written() - written) / (1 << 20))])

    writer = wh.Warehouse(warehouse, wait=wait, budget=budget)
    with writer as con:
        clock.mark("catch_up")
        staged = still_new(con, [o for o in outcomes if o.staged is not None], healed=set(writer.healed_contents))
        result.healed = [f"records file {name} was {why}: its content was marked compacted and is parsed again when "
                         "a dump of it is in the bucket" for name, why in writer.healed.items()]
        loading.upsert_runs(con, [loading.run_row(info) for info in runs.values()])
        contents = sorted({o.staged.sha256 for o in staged if o.staged.sha256 is not None})  # None: a refused object
        if staged:  # unlists the superseded records files (unlinked after the publish)
            compact_records(con, settings.keep_records_runs, contents)
        clock.mark("compact")
        result.rows += loading.load_staged(con, staged, contents)
        clock.mark("load")
        done = aggregate(con, settings, budget=budget, run_items=run_items)
        result.seconds.update({f"aggregate_{k}": v for k, v in done.seconds.items()})
        result.peak_mib.update({f"aggregate_{k}": v for k, v in done.peak_mib.items()})
        clock.restart()
        result.loaded_runs = sorted({o.obj.run_id for o in staged})
        result.new_incidents = incident_reader.opened_in(con, result.loaded_runs)
        if notify_count:
            result.notified, result.undelivered = announce(
                con, result.loaded_runs if result.new_incidents else [], settings)
        if staging_dir is not None:
            result.staging_dropped = loading.drop_loaded_staging(con, staging_dir)
        clock.mark("announce")
    clock.mark("publish")
    # The publish lap holds the leveling of the standby (tonight's journal replayed onto it).
    result.seconds["publish"] -= writer.level_seconds
    result.seconds["level"] = writer.level_seconds
    result.publish_bytes, result.caught_up, result.leveled = _bytes_written() - written, writer.caught_up, writer.leveled
    return result


def _bytes_written() -> int:
    """Bytes this process has written so far (every write call: the DuckDB file, the journal)."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@task
def render_site(warehouse: Path, site_dir: Path, settings_path: Path | None = None) -> str:
    """The report site, rebuilt from the warehouse (replaced atomically)."""
    from flows.publish.site import build_site

    result = build_site(warehouse, site_dir, load_settings(settings_path))
    built = f"all built: {result.full_reason}" if result.full else f"{result.pages_built} built, the others unchanged"
    return f"site {result.out}: {result.pages} pages ({built}), {result.charts} charts"


@task
def publish_release(site_dir: Path, warehouse: Path, dest: str, storage_options: dict | None = None,
                    settings_path: Path | None = None):
    """The site and a warehouse snapshot, copied where readers get them (``flows.publish.release``);
    the snapshot carries the settings' ``[site] url``, for a pull request's ``check``."""
    from flows.publish.release import release

    return release(site_dir, warehouse, dest, storage_options, load_settings(settings_path).site_url)


@task
def report(warehouse: Path, report_path: Path | None, settings_path: Path | None = None) -> tuple[str, dict[str, int]]:
    """The latest run's summary: (Markdown, its incident counts)."""
    return write_night_report(warehouse, report_path, load_settings(settings_path))


@flow(name="nightly--bucket--duckdb", log_prints=True)
def nightly(
    bucket: str = DEFAULT_BUCKET,
    warehouse: Path = wh.DEFAULT_PATH,
    staging_dir: Path | None = None,
    settle_seconds: float = 0.0,
    state_path: Path | None = None,
    storage_secret: str | None = None,
    storage_option_names: list[str] | None = None,
    layout_regex: str | None = None,
    marker: str | None = None,
    wait_for_lock: bool = False,
    workers: int | None = None,
    dask_address: str | None = None,
    settings_path: Path | None = None,
    report_path: Path | None = None,
    site_dir: Path | None = None,
    max_line_bytes: int = DEFAULT_LIMITS.max_line_bytes,
    max_dump_bytes: int = DEFAULT_LIMITS.max_dump_bytes,
    parse_seconds: float = DEFAULT_LIMITS.max_seconds,
    memory_limit: int | None = None,
    publish_to: str | None = None,
    fail_on: str | None = None,
    summary_path: Path | None = None,
):
    """One night (its parameters: ``NightSettings``'s fields). ``dask_address`` is set by ``run_nightly``, which gives the flow a
    ``DaskTaskRunner``: the parse tasks then run (and parse) on the Dask workers.

    Storage options never arrive as parameters (``flows.storage_secrets``): they come from
    the environment or the Secret block ``storage_secret``; ``storage_option_names`` only
    records which were given. ``summary_path``: the night's summary is also written there as
    JSON (``--summary-json``). ``fail_on`` (a served deployment's): the flow run ends Failed when
    it finds incidents, Completed named "Undelivered" when a message is owed, with the exit
    status ``dumpscope run`` would give in the state's message; either way its result is the summary."""
    night = NightSettings(**locals())  # exactly the flow's parameters
    summary = _night(True, night)
    status, why = summary.exit_status(night.fail_on)
    if status == FAILING:
        return Failed(message=f"exit {status}: {why}", data=summary)
    if status == UNDELIVERED:
        return Completed(name="Undelivered", message=f"exit {status}: {why}", data=summary)
    return summary


def night_in_process(**parameters) -> NightSummary:
    """The nightly's steps with ``nightly``'s parameters, run as plain calls in this process:
    no Prefect flow run or server, no process pool (every chunk is staged here, the items
    computed here), no artifacts. The same functions in the same order as the flow, so a
    warehouse it builds is the flow's (``tests/test_sample_build.py``); the fast and slow test
    tiers build their nights with it."""
    if parameters.get("dask_address"):
        raise ValueError("dask_address needs the flow's Dask task runner: call run_nightly(..., dask_address=...)")
    # fail_on names the state of a flow run: there is none here.
    return _night(False, NightSettings(**parameters))


def _night(orchestrated: bool, night: NightSettings) -> NightSummary:
    """One night, in its steps: ``orchestrated``, each step is a Prefect task of the running flow
    (parse chunks submitted to its task runner, items on its task runner, artifacts); otherwise
    each step's function is called here, in order (``night_in_process``). The summary keeps the
    counters and, by its stopwatch, each step's seconds."""
    summary = NightSummary()
    clock = summary.stopwatch()
    with clock.lap("discover"):
        here = _Night.start(orchestrated, night)
        new, runs, held = _discover(here, summary)
    with clock.lap("parse"):
        outcomes = _parse(here, summary, new, held)
    summary.count_outcomes(outcomes)
    with clock.lap("load"):
        loaded = _load(here, outcomes, runs)
    summary.count_load(loaded)
    with clock.lap("report"):
        text, summary.incidents = _report(here)
    _site_and_release(here, summary, clock)
    clock.stop()
    _tell(here, summary, text)
    return summary


@dataclass(frozen=True)
class _Night:
    """What every step of a night reads: its settings, how its steps run, and what the start resolved."""
    night: NightSettings
    orchestrated: bool
    on_dask: bool
    memory_limit: int | None  # the night's, set or chosen
    storage_options: dict | None
    staging_dir: Path  # absolute: Dask workers do not share the flow's working directory

    @classmethod
    def start(cls, orchestrated: bool, night: NightSettings) -> _Night:
        """The night's memory limit (said), storage options and staging directory, and what killed
        nights left behind swept away."""
        memory_limit, chosen = night_limit(night.memory_limit)  # none set: a share of the machine's memory
        print(f"memory limit: {chosen}")
        on_dask = orchestrated and _on_dask()
        if night.dask_address and not on_dask:
            raise ValueError("dask_address needs the Dask task runner: call run_nightly(..., dask_address=...)")
        staging_dir = Path(night.staging_dir or Path(night.warehouse).with_suffix(".staging")).resolve()
        # What killed runs left half-written: older than any parse still going on (another run's).
        housekeeping.sweep_tmp(staging_dir, older_than_seconds=2 * night.parse_seconds + 60)
        for gone in sweep_work_dirs(Path(night.warehouse).resolve().parent):  # items work of a killed night (its pid is gone)
            print(f"removed {gone.name}, left by a killed night")
        return cls(night, orchestrated, on_dask, memory_limit, storage_secrets.resolve(night.storage_secret), staging_dir)

    def step(self, task_):
        """The task itself, or the plain function it wraps."""
        return task_ if self.orchestrated else task_.fn


def _discover(here: _Night, summary: NightSummary) -> tuple[list[BucketObject], dict, dict[str, dict]]:
    """The bucket's new dumps, its new runs and the contents the warehouse holds of them (counted in ``summary``)."""
    night = here.night
    new, deferred, seen, runs, held, refused = here.step(discover)(
        night.bucket, night.warehouse, night.settle_seconds, night.state_path, here.storage_options,
        night.layout_regex, night.marker)
    summary.count_listing(new=len(new), deferred=deferred, seen=seen, refused=refused,
                          run_errors=[e for info in runs.values() for e in info.meta_errors])
    return new, runs, held


def _parse(here: _Night, summary: NightSummary, new: list[BucketObject], held: dict[str, dict]) -> list[Outcome]:
    """Each new dump staged: contents the warehouse holds recognised by their hash, the rest parsed
    (in chunks on the task runner, or here; the process's peak memory then in ``summary``), XLA side
    files checked against their compile's."""
    night, workers = here.night, here.night.workers or os.cpu_count() or 2
    # Contents the warehouse holds, under tonight's paths: hashed here, in threads, and no
    # parse process is started for them (on Dask, or from object storage, the workers do it).
    recognised = ([] if here.on_dask else
                  recognise_held(night.bucket, here.storage_options, new, here.staging_dir, held, workers))
    taken = {r.obj.path for r in recognised}
    rest = [o for o in new if o.path not in taken]
    if here.orchestrated:
        futures = [parse_chunk.submit(night.bucket, here.storage_options, c, here.staging_dir, workers,
                                      in_process=here.on_dask, limits=night.limits, held=held)
                   for c in chunks_of(rest, 4 * workers)]
        outcomes = recognised + [o for chunk in _with_progress(futures, total=len(rest)) for o in chunk]
        shut_down_pool()  # its workers' memory is not needed for the rest of the night
    else:
        outcomes = recognised + (stage_chunk(night.bucket, here.storage_options, rest, here.staging_dir, night.limits,
                                             held) if rest else [])
    summary.peak_mib["parse"] = peak_mib()
    siblings.check_outcomes(outcomes, night.warehouse)  # XLA side files short of what their compile's other files state
    return outcomes


def _load(here: _Night, outcomes: list[Outcome], runs: dict) -> LoadResult:
    """The single writer's turn: when there is something to write (dumps or runs, derived tables
    computed with other settings, a message owed, a damaged records store); else nothing, and no
    lock or copy of the warehouse (the no-op night stays cheap)."""
    night = here.night
    stale = not (outcomes or runs) and needs_aggregate(night.warehouse, load_settings(night.settings_path))
    owed = not (outcomes or runs or stale) and owes_notifications(night.warehouse)
    damaged = not (outcomes or runs or stale or owed) and store_damaged(night.warehouse)
    if not (outcomes or runs or stale or owed or damaged):
        return LoadResult()
    source = DumpSource(night.bucket, here.storage_options)  # excerpts: read from the dumps
    run_items = (items_runner(MemoryBudget(here.memory_limit).items_workers, source=source) if here.orchestrated
                 else items.reading(source))
    return here.step(load)(night.warehouse, outcomes, runs, night.wait_for_lock, night.settings_path,
                           len(storage_secrets.notify_targets()), here.staging_dir, here.memory_limit,
                           run_items=run_items)


def _report(here: _Night) -> tuple[str, dict[str, int]]:
    """The latest run's summary (Markdown) and its incident counts, once there is a warehouse."""
    night = here.night
    if not Path(night.warehouse).exists():
        return "", {}
    return here.step(report)(night.warehouse, night.report_path, night.settings_path)


def _site_and_release(here: _Night, summary: NightSummary, clock: Stopwatch) -> None:
    """The report site rebuilt (with ``site_dir``, or beside the warehouse for ``publish_to``: a
    release is a site), then published; one site build and one publish at a time."""
    night = here.night
    site_dir = night.site_dir
    if night.publish_to and site_dir is None:
        site_dir = Path(night.warehouse).with_suffix(".site")
    if site_dir is None or not Path(night.warehouse).exists():
        return
    from flows.publish.site import one_builder

    with one_builder(Path(site_dir), wait=night.wait_for_lock):  # two runs at once: one site build, one publish at a time
        with clock.lap("site"):
            print(here.step(render_site)(night.warehouse, Path(site_dir), night.settings_path))
        if night.publish_to:
            from flows.publish.release import storage_options_for

            with clock.lap("publish_release"):
                done = here.step(publish_release)(
                    Path(site_dir), night.warehouse, night.publish_to,
                    storage_options_for(night.publish_to, night.bucket, here.storage_options), night.settings_path)
                summary.count_release(done)
            print(f"published {summary.published}")


def _tell(here: _Night, summary: NightSummary, text: str) -> None:
    """The night said: its summary to ``summary_path`` (the operator's --summary-json, a served
    night's too), its warnings to the log, its summary and incidents as artifacts and on stdout."""
    if here.night.summary_path is not None:
        Path(here.night.summary_path).write_text(summary.json(), encoding="utf-8")
    logger = get_run_logger() if here.orchestrated else logging.getLogger("dumpscope.nightly")
    for line in summary.warnings():  # a scheduled run's log shows them as warnings (the CLI prints them)
        logger.warning(line)
    if here.orchestrated:
        create_markdown_artifact(summary.markdown(), key="nightly-summary", description="Dumpscope nightly ingest")
        if text:
            create_markdown_artifact(text, key="nightly-incidents", description="Dumpscope: the latest run's incidents")
    print(summary.markdown())
    print()
    print(text)


def _with_progress(futures: list, total: int):
    """Chunk results as they finish, with a progress bar of dumps when a person is watching."""
    if not sys.stderr.isatty():
        yield from (f.result() for f in as_completed(futures))
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("parsing dumps"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as progress:
        bar = progress.add_task("parse", total=total)
        for f in as_completed(futures):
            chunk = f.result()
            progress.advance(bar, len(chunk))
            yield chunk


def _on_dask() -> bool:
    """Whether this flow run's task runner is prefect-dask's ``DaskTaskRunner``."""
    from prefect.context import FlowRunContext

    dask = sys.modules.get("prefect_dask")  # never imported: not on Dask (and distributed stays unloaded)
    ctx = FlowRunContext.get()
    return bool(dask and ctx and isinstance(ctx.task_runner, dask.DaskTaskRunner))


def run_nightly(*, dask_address: str | None = None, **kwargs) -> NightSummary:
    """``nightly(**kwargs)``; with ``dask_address`` (``tcp://HOST:PORT`` of a running Dask
    scheduler) the parse tasks run on that cluster through prefect-dask's ``DaskTaskRunner``.

    The workers must reach the bucket, the staging directory (next to the warehouse
    unless ``staging_dir`` says otherwise) and the Prefect API the flow reports to.
    """
    from prefect.settings import PREFECT_API_URL, temporary_settings

    run = functools.partial(on_cluster(dask_address), dask_address=dask_address) if dask_address else nightly
    if PREFECT_API_URL.value():
        return run(**kwargs)
    # Ephemeral mode: start the temporary API server here, dying with this process even if
    # it is killed (flows.prefect_server), and hand its URL to the tasks, else every Dask
    # worker starts a temporary server of its own (~10 s each, and the task runs land in
    # the workers' databases). It listens on 127.0.0.1 only: workers on other machines
    # need a real server (PREFECT_API_URL).
    from flows.prefect_server import temporary_server

    with temporary_settings(updates={PREFECT_API_URL: temporary_server().api_url}):
        return run(**kwargs)


def on_cluster(dask_address: str):
    """The nightly flow with prefect-dask's ``DaskTaskRunner`` on the scheduler at ``dask_address``."""
    from prefect_dask import DaskTaskRunner

    return nightly.with_options(task_runner=DaskTaskRunner(address=dask_address))


# A served night (`dumpscope serve --dask-address`) runs in a process of its own that imports
# this module by the deployment's entry point: its flow takes the cluster serve exported.
if os.environ.get(storage_secrets.DASK_VAR):
    nightly = on_cluster(os.environ[storage_secrets.DASK_VAR])
