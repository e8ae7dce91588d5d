"""Shared fixtures, and the suite's four tiers.

Every test is in exactly one tier (``make test`` runs them all; ``make test-fast`` the fast one):

- fast (no marker; ``make test-fast``): in this process only. No Prefect server, no flow run, no
  subprocess, no browser: ``_fast_tier_guard`` fails a fast test that starts a process (the
  Prefect API server is one: ``prefect_test_harness`` and a flow's ephemeral server both start
  uvicorn with ``subprocess.Popen``).
- ``integration``: a Prefect server and real nightly flows, subprocesses (``python -m flows.cli``,
  readers and killed writers, the real compilers' venv), S3 (moto) servers.
- ``browser``: headless chromium (these may need Prefect too: the tier says what they drive).
- ``slow``: in this process too (guarded as the fast tier is), but seconds each: sweeps over every cut
  of the real dumps, property tests of hundreds of examples, large synthetic inputs (a 50 MB line, a
  2-million-row warehouse, a year of history) and the writer's publish-and-crash scenarios.

A test's tier follows from what it uses (``TIER_BY_FIXTURE``) or its module (``SLOW_MODULES``); a
test that starts a process by itself says so with ``@pytest.mark.integration`` (or its module's
``pytestmark``), a slow one with ``@pytest.mark.slow``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import multiprocessing.util
import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SEEDS = FIXTURES / "seeds"
TIERS = ("browser", "integration", "slow")  # a test in several is in the first: a browser test may run a nightly
# Fixtures whose use puts a test in a tier: the marker goes on every test that uses one,
# directly or through another fixture (pytest's fixture closure).
TIER_BY_FIXTURE = {
    "browser": "browser",
    "prefect": "integration",
    "prefect_home": "integration",  # migrates a Prefect database in a subprocess
    "nightly_sample_warehouse": "integration",
    "s3": "integration",  # a moto S3 server (tests/moto_s3.py)
}


# Modules whose in-process tests are all slow (their integration and browser tests stay in those tiers).
# A module whose tests each build nights or a site (seconds apiece) is slow as a whole.
SLOW_MODULES = {"test_bucket_hostile", "test_evidence", "test_examples", "test_hlo_realworld", "test_hostile_reads",
                "test_incident_buckets", "test_incident_scenarios", "test_parse_memory", "test_publish",
                "test_foreign_warehouse", "test_records_heal", "test_records_store", "test_release", "test_scale", "test_siblings_nightly",
                "test_site_compile", "test_site_hostile", "test_site_names", "test_site_history", "test_sql_writes", "test_status_says_why",
                "test_torch_trace_verdict", "test_warehouse", "test_xla_cuts"}


@pytest.hookimpl(tryfirst=True)  # the tiers are marked before -m deselects by them
def pytest_collection_modifyitems(config, items):
    for item in items:
        marked = {m.name for m in item.iter_markers() if m.name in TIERS}
        used = {TIER_BY_FIXTURE[f] for f in item.fixturenames if f in TIER_BY_FIXTURE}
        if item.module.__name__.rpartition(".")[2] in SLOW_MODULES:
            used.add("slow")
        tier = next((t for t in TIERS if t in marked | used), None)  # the first of TIERS it has
        if tier is None:
            continue
        if marked - {tier}:
            raise pytest.UsageError(f"{item.nodeid}: marked {sorted(marked)}, but what it uses puts it in the {tier} "
                                    "tier: a test is in one tier")
        if tier not in marked:
            item.add_marker(tier)
    _schedule(items)


def _schedule(items) -> None:
    """The order the tests are handed out in (under pytest-xdist, a unit at a time to whichever
    worker is free: ``pytest_xdist_make_scheduler``): the tiers whose tests take seconds to a
    minute first, the fast tier's last, so a run ends on tests of a fraction of a second instead of
    one worker finishing a minute-long test while the other idles."""
    rank = {tier: i for i, tier in enumerate(TIERS)}  # browser, integration, slow; then the fast tier
    for item in items:
        scopes = {d.scope for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs}
        module = item.module.__name__.rpartition(".")[2]
        if scopes & {"module", "class", "package"} and module not in SHARED_FIXTURE_MODULES:
            raise pytest.UsageError(f"{item.nodeid} uses a module-scoped fixture: add {module} to "
                                    "SHARED_FIXTURE_MODULES (tests/conftest.py), or each worker builds it")
    items.sort(key=lambda item: min((rank[m.name] for m in item.iter_markers() if m.name in rank), default=len(rank)))


# Modules whose tests share a module-scoped fixture (a site built and opened in chromium, nights, an S3
# server): their tests are one unit of work, run by one worker, so the fixture is built once. Every
# other test is a unit of its own. (pytest-xdist's ``--dist loadgroup`` would do this from markers, but
# with pytest 9 its group suffix no longer reaches the node id, so the tests were spread anyway.)
SHARED_FIXTURE_MODULES = {"test_bad_input", "test_browser_harness", "test_bucket_hostile", "test_check_equals_nightly", "test_concurrency",
                          "test_evidence", "test_hostile_reads", "test_incident_scenarios", "test_one_verdict",
                          "test_onnx_report", "test_parse_memory", "test_foreign_warehouse", "test_records_heal", "test_records_store",
                          "test_s3_dask", "test_scale", "test_site", "test_site_daily", "test_site_names", "test_site_history",
                          "test_site_hostile", "test_site_incremental", "test_sql_records", "test_warehouse"}
# ... of which these build their fixture a bucket at a time, for the bucket a test names first
# (``[bucket-night]``): a unit per bucket, so the buckets are built on every worker at once.
SHARED_BY_BUCKET = {"test_check_equals_nightly"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``-n N`` (``--dist load``, xdist's default): units in the order ``_schedule`` sorted the tests,
    a unit at a time to the worker that has run out (a module of SHARED_FIXTURE_MODULES is one unit)."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixturesTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if Path(module).stem in SHARED_BY_BUCKET:  # one unit per bucket, the first parameter
                return f"{module}[{nodeid.partition('[')[2].split('-', 1)[0]}]"
            return module if Path(module).stem in SHARED_FIXTURE_MODULES else nodeid

    config.option.loadscopereorder = False  # keep _schedule's order (xdist would put the largest units first)
    return SharedFixturesTogether(config, log)


@pytest.fixture(autouse=True)
def _fast_tier_guard(request, monkeypatch):
    """A fast (or slow) test may not start a process: it fails, naming what it started, instead
    of slowing the fast tier down (mark it ``integration`` if it must)."""
    if request.node.get_closest_marker("integration") or request.node.get_closest_marker("browser"):
        yield
        return

    def refuse(what, argv_at):
        def refused(*args, **kwargs):
            pytest.fail(f"a fast-tier test started {what} {args[argv_at]!r}: mark it integration, or keep it in "
                        "this process (no Prefect flow run or server, no subprocess)")
        return refused

    # Popen's own launch (subprocess.run, asyncio, Prefect's uvicorn server), multiprocessing's spawn, and forks.
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("a subprocess", 1))
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", refuse("a spawned process", 1))
    monkeypatch.setattr(os, "fork", refuse("a forked process", slice(0)))
    monkeypatch.setattr(os, "posix_spawn", refuse("a process", 1))
    monkeypatch.setattr(os, "posix_spawnp", refuse("a process", 1))
    yield


def _log_handlers_off(streams) -> None:
    """Every logging handler writing to one of ``streams`` (or to a closed stream) writes to the
    process's stderr instead."""
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    for handler in {h for lg in loggers for h in lg.handlers}:
        stream = getattr(handler, "stream", None)
        if stream is not None and (any(stream is s for s in streams) or getattr(stream, "closed", False)):
            with handler.lock:
                handler.stream = sys.__stderr__
                if hasattr(handler, "console"):  # Prefect's handler prints through a rich Console
                    handler.console.file = sys.__stderr__


@pytest.fixture(autouse=True, scope="session")
def _cli_runner_streams_stay_the_runners():
    """A logging handler made while a CliRunner held sys.stdout/sys.stderr keeps that stream,
    which dies with the invocation: Prefect configures its console handler when a flow run
    starts its server (``create_app`` calls ``setup_logging``), so the next invocation or test
    that logs through it fails ("I/O operation on closed file", then RecursionError). Each
    invocation's streams are taken back from the handlers when it ends."""
    import click.testing
    import typer.testing

    def without_leaks(isolation):
        @contextlib.contextmanager
        def isolation_without_leaks(self, *args, **kwargs):
            with isolation(self, *args, **kwargs) as outputs:
                held = (sys.stdout, sys.stderr)
                try:
                    yield outputs
                finally:
                    _log_handlers_off(held)
        return isolation_without_leaks

    runners = {cls: cls.isolation for cls in (click.testing.CliRunner, typer.testing.CliRunner)}  # typer's is its own
    for cls, isolation in runners.items():
        cls.isolation = without_leaks(isolation)
    yield
    for cls, isolation in runners.items():
        cls.isolation = isolation


@pytest.fixture(autouse=True)
def _log_streams_outlive_the_test():
    """The same after each test, for a stream that closed some other way."""
    yield
    _log_handlers_off(())


@pytest.fixture(autouse=True)
def _no_secrets_left_by_another_test():
    """``run`` exports its storage options and notify targets to the environment (for its own
    worker processes): a test that ran the CLI in this process left them behind, and the next
    test's ``python -m flows.cli`` on this worker would notify that test's targets. Each test
    starts without them and ends without them: a session fixture built at the next test's set-up
    (before this fixture runs) must not inherit a target (``monkeypatch.delenv`` of a variable
    that is absent undoes nothing, so a test that then exported one left it behind)."""
    from flows import storage_secrets

    names = (storage_secrets.ENV_VAR, storage_secrets.NOTIFY_VAR, storage_secrets.DASK_VAR)
    for name in names:
        os.environ.pop(name, None)
    yield
    for name in names:
        os.environ.pop(name, None)


@pytest.fixture(scope="session")
def seeds() -> Path:
    return SEEDS


PREFECT_STARTUP_SECONDS = 90  # the CLI's start-up limit (flows.cli): a loaded 2-core machine passes the default 30 s


@pytest.fixture(scope="session")
def prefect(tmp_path_factory):
    """One Prefect API server (a temporary one, ~4.5 CPU s to start on a migrated database, ~1.5 CPU s a minute idle) for
    the whole test run. Alone, Prefect's test harness. Under pytest-xdist the first worker that
    needs it starts it for every worker (``_shared_prefect_server``) and the controller stops it
    when the run ends (``pytest_unconfigure``)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ["PREFECT_HOME"] = str(_migrated_prefect_home(tmp_path_factory, tmp_path_factory.mktemp("prefect-home")))
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        from prefect.testing.utilities import prefect_test_harness

        with prefect_test_harness(server_startup_timeout=PREFECT_STARTUP_SECONDS):
            yield
        return
    import prefect.context
    from prefect.settings import PREFECT_API_URL, temporary_settings

    url = _shared_prefect_server(tmp_path_factory, tmp_path_factory.getbasetemp().parent / SHARED_PREFECT)
    with temporary_settings(updates={PREFECT_API_URL: url}), \
            prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()):
        yield
        _drain_prefect_workers()


PREFECT_DATABASE = "prefect.db"  # in PREFECT_HOME: Prefect's default database URL


def _migrate_prefect_home(home: Path) -> Path:
    """A Prefect home whose SQLite database holds Prefect's schema (``prefect server database upgrade``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    subprocess.run([sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"], env=env, check=True,
                   stdout=subprocess.DEVNULL, timeout=PREFECT_STARTUP_SECONDS)
    return home / PREFECT_DATABASE


def _migrated_prefect_home(tmp_path_factory, home: Path) -> Path:
    """``home`` made a Prefect home whose database already holds Prefect's schema, copied from one
    migrated once per test run: a server started on a new database migrates it first, ~7 CPU s
    and ~12 s of each test that starts one (a temporary server, ``prefect server start``)."""
    template = _built_once(tmp_path_factory, "prefect-home-template", _migrate_prefect_home)
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, home / PREFECT_DATABASE)
    return home


@pytest.fixture(scope="session")
def prefect_home(tmp_path_factory):
    """``prefect_home(path)``: ``path`` made a Prefect home with a migrated database (``_migrated_prefect_home``),
    for a test whose process starts a Prefect server of its own; returns it."""
    return lambda home: _migrated_prefect_home(tmp_path_factory, Path(home))


SHARED_PREFECT = "prefect-server"  # in the run's temporary directory: the shared server's home, URL and pid


def _shared_prefect_server(tmp_path_factory, home: Path) -> str:
    """The API URL of the run's shared Prefect server, started here if no worker has yet: the
    command Prefect's harness runs (``SubprocessASGIServer``), in a session of its own so it
    outlives this worker, on a SQLite database in ``home``."""
    import socket
    import time
    import urllib.request

    with open(f"{home}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        url_file = home / "url"
        if url_file.exists():
            return url_file.read_text()
        shutil.rmtree(home, ignore_errors=True)
        _migrated_prefect_home(tmp_path_factory, home)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API_")}
        env |= {"PREFECT_HOME": str(home), "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
                "PREFECT__SERVER_FINAL": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{home / PREFECT_DATABASE}"}
        with open(home / "server.log", "w") as log:
            server = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app",
                                       "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on"],
                                      env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        (home / "pid").write_text(str(server.pid))
        url = f"http://127.0.0.1:{port}/api"
        deadline = time.monotonic() + PREFECT_STARTUP_SECONDS
        while True:
            if server.poll() is not None:
                pytest.fail(f"the shared Prefect server exited: {(home / 'server.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the shared Prefect server did not answer in {PREFECT_STARTUP_SECONDS} s")
                time.sleep(0.2)
        url_file.write_text(url)
        return url


def _drain_prefect_workers() -> None:
    """This worker's queued logs and events sent before it ends, as the harness does at its end
    (``drain_all`` may hand back an awaitable: awaited on the loop that made it)."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain() -> None:
        for worker in (APILogWorker, EventsWorker):
            with contextlib.suppress(RuntimeError):  # a worker that never started
                result = worker.drain_all()
                if inspect.isawaitable(result):
                    await result

    run_coro_as_sync(drain())


def pytest_unconfigure(config):
    """The controller of a pytest-xdist run stops the workers' shared Prefect server."""
    if hasattr(config, "workerinput") or not hasattr(config, "_tmp_path_factory"):
        return
    with contextlib.suppress(Exception):
        pid = int((config._tmp_path_factory.getbasetemp() / SHARED_PREFECT / "pid").read_text())
        os.killpg(pid, signal.SIGTERM)


@pytest.fixture(scope="session")
def browser():
    """Headless Debian chromium, one per session (tests/browser.py). Missing chromium fails:
    CI installs it (`make browser`, a step of `make test`)."""
    from tests.browser import close_browser, get_browser

    try:
        shared, missing = get_browser(), None
    except RuntimeError as exc:
        shared, missing = None, str(exc)
    if missing:
        pytest.fail(missing, pytrace=False)
    yield shared
    close_browser()


def _built_once(tmp_path_factory, name: str, build):
    """``build(directory)``'s result, built once per test run: under pytest-xdist the first
    worker to ask builds it in the run's shared temporary directory while the others wait on
    a lock, then each reads the pickled result. Only for read-only fixtures."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return build(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent / name  # the run's directory, above each worker's own
    done = shared / ".built.pickle"
    with open(f"{shared}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(shared, ignore_errors=True)  # a worker that failed half-way
            shared.mkdir()
            done.write_bytes(pickle.dumps(build(shared)))
    return pickle.loads(done.read_bytes())


@pytest.fixture(scope="session")
def sample_warehouse(tmp_path_factory) -> Path:
    """The whole sample bucket ingested and aggregated as one nightly does it, without Prefect
    (``tests/sample_build.py``; ``test_sample_build.py`` proves it equals the nightly's), and
    ``report.md`` beside it; built once per run. Read-only use: tests that write copy it first."""
    from tests.sample_build import build_sample_warehouse

    return _built_once(tmp_path_factory, "sample-warehouse", build_sample_warehouse)


@pytest.fixture(scope="session")
def nightly_sample_warehouse(prefect, tmp_path_factory) -> Path:
    """The whole sample bucket ingested and aggregated by the nightly flow (read-only use:
    tests that write copy it first)."""
    from flows.nightly import nightly

    out = tmp_path_factory.mktemp("nightly-sample-warehouse")
    warehouse = out / "warehouse.duckdb"
    bucket = Path(__file__).parents[1] / "data" / "sample_bucket"
    nightly(bucket=str(bucket), warehouse=warehouse, workers=2, report_path=out / "report.md")
    return warehouse


@pytest.fixture(scope="session")
def sample_site(sample_warehouse, tmp_path_factory):
    """The report site of ``sample_warehouse`` with the default settings, built once per run
    (``flows.publish.site.build_site``'s result: ``.out``, ``.pages``, ``.charts``). Read-only."""
    from flows.publish.site import build_site

    return _built_once(tmp_path_factory, "sample-site", lambda out: build_site(sample_warehouse, out / "site"))
