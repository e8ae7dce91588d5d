"""Deployed as the README's "Deploy it" says: a Prefect server, `dumpscope serve` with every option
of a night, a scheduled run that builds and publishes the site and the warehouse snapshot to an S3
bucket and notifies; then a pull request's `check` against the published snapshot."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app

ROOT = Path(__file__).parents[1]
SAMPLE = ROOT / "data" / "sample_bucket"


def _options(command: str) -> set[str]:
    import typer.main

    group = typer.main.get_command(app)
    return {p.name for p in group.commands[command].params}


def test_watch_and_serve_take_every_option_that_run_takes():
    night = _options("run")
    assert night <= _options("watch") and night <= _options("serve")
    assert {"site_dir", "publish", "notify", "settings", "storage_secret", "storage_option", "workers",
            "memory_limit", "fail_on", "wait", "dask_address", "fail_on_regression", "summary_json", "verbose",
            "log_level"} <= night


@pytest.mark.integration  # building the deployment runs `file` on the interpreter (platform.architecture)
def test_a_served_night_gets_the_options_run_would_give_its_flow(tmp_path, monkeypatch):
    """serve hands its nights what run hands its flow: the summary file (absolute), the lock wait,
    the Dask scheduler (a flow parameter, and the environment the served runs import
    flows.nightly in); the environment is put back when serve returns."""
    import flows.nightly  # noqa: F401
    from flows import storage_secrets

    # flows.nightly binds its task runner when first imported: imported here first (without the Dask
    # variable), so the serve below does not leave this worker's later nights tied to a closed scheduler.
    monkeypatch.delenv(storage_secrets.DASK_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    served = []
    monkeypatch.setattr("prefect.serve", lambda *deployments: served.append(
        (deployments, os.environ.get(storage_secrets.DASK_VAR))))
    # serve checks that the scheduler and the Prefect server answer before anything else
    with socket.socket() as scheduler, _answering_server() as api:
        monkeypatch.setenv("PREFECT_API_URL", api)
        scheduler.bind(("127.0.0.1", 0))
        scheduler.listen()
        address = f"tcp://127.0.0.1:{scheduler.getsockname()[1]}"
        out = CliRunner().invoke(app, ["serve", "--bucket", str(SAMPLE), "--warehouse", "w.duckdb", "--summary-json",
                                       "night.json", "--no-wait", "--dask-address", address,
                                       "--fail-on-regression", "--log-level", "error"])
    assert out.exit_code == 0, out.output
    [((deployment,), dask_env)] = served
    assert dask_env == address and storage_secrets.DASK_VAR not in os.environ
    assert {k: deployment.parameters[k] for k in ("summary_path", "wait_for_lock", "dask_address", "fail_on")} == {
        "summary_path": str(tmp_path / "night.json"), "wait_for_lock": False, "dask_address": address,
        "fail_on": "new"}


@pytest.mark.integration
def test_a_served_run_imports_the_nightly_on_the_dask_scheduler_serve_exported():
    from flows import storage_secrets

    code = "from flows.nightly import nightly; print(type(nightly.task_runner).__name__, nightly.task_runner.address)"
    env = {**os.environ, storage_secrets.DASK_VAR: "tcp://127.0.0.1:8786"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["DaskTaskRunner", "tcp://127.0.0.1:8786"], out.stderr[-2000:]


@pytest.mark.integration  # serve's --cron check imports Prefect's croniter, which runs `file` (platform.architecture)
def test_serve_and_watch_refuse_a_mistake_in_one_line_before_prefect_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # serve's check for a server passes; none runs
    for command in ("serve", "watch"):
        out = CliRunner().invoke(app, [command, "--bucket", str(tmp_path / "no-such-bucket"), "--warehouse",
                                       str(tmp_path / "w.duckdb")])
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, (command, out.output)
        out = CliRunner().invoke(app, [command, "--bucket", str(SAMPLE), "--warehouse", str(tmp_path / "w.duckdb"),
                                       "--notify", "nosuchscheme://x"])
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, (command, out.output)


@pytest.mark.integration  # serve's --cron check imports Prefect's croniter, which runs `file` (platform.architecture)
@pytest.mark.parametrize("command", ["watch", "serve"])
def test_watch_and_serve_find_before_the_night_what_it_would_fail_on(command, tmp_path, monkeypatch):
    """--summary-json into no directory and a --dask-address nothing answers at (a8ea99c, 4e40821
    checked them for run), and a PREFECT_API_URL nothing answers at: one line, exit 2, for watch
    and serve too (serve waits for a starting server: DUMPSCOPE_PREFECT_WAIT=0 here)."""
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # port 9: nothing listens
    monkeypatch.setenv("DUMPSCOPE_PREFECT_WAIT", "0")
    (tmp_path / "notes.txt").write_text("not a directory\n")
    night = [command, "--bucket", str(SAMPLE), "--warehouse", str(tmp_path / "w.duckdb")]
    for args, said in (
            (["--summary-json", str(tmp_path / "nope" / "s.json")],
             f"--summary-json {tmp_path}/nope/s.json: {tmp_path}/nope does not exist"),
            (["--summary-json", str(tmp_path / "notes.txt" / "s.json")],
             f"--summary-json {tmp_path}/notes.txt/s.json: {tmp_path}/notes.txt is a file, not a directory"),
            (["--dask-address", "tcp://127.0.0.1:9"], "--dask-address tcp://127.0.0.1:9: no scheduler answers there "
                                                      "(Connection refused)"),
            ([], "PREFECT_API_URL http://127.0.0.1:9/api: no Prefect server answers there (Connection refused)")):
        out = CliRunner().invoke(app, [*night, *args])
        assert (out.exit_code, out.output.splitlines()) == (2, [f"error: {said}"]), (args, out.output)
    assert not (tmp_path / "w.duckdb").exists()


CRON_REFUSED = ("error: --cron '0 25 * * *': not a schedule Prefect takes: five fields, minute (0-59) hour (0-23) "
                "day of month (1-31) month (1-12) day of week (0-6, 0 Sunday), e.g. '0 2 * * *' (02:00 each night)")


@pytest.mark.integration  # Prefect's croniter runs `file` on import (platform.architecture)
def test_a_cron_schedule_prefect_refuses_is_one_line_before_anything_else(tmp_path, monkeypatch):
    """On main: Prefect's 67 lines of pydantic once the deployment was built (exit 1), or, with no
    server running, "needs a Prefect server" or "no Prefect server answers there" instead."""
    args = ["serve", "--cron", "0 25 * * *", "--bucket", str(tmp_path / "no-such-bucket"), "--warehouse",
            str(tmp_path / "w.duckdb")]
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    out = CliRunner().invoke(app, args)
    assert (out.exit_code, out.output.splitlines()) == (2, [CRON_REFUSED])
    with _answering_server() as api:
        monkeypatch.setenv("PREFECT_API_URL", api)
        for cron in ("0 25 * * *", "0 2 * *", "H 2 * * *", "0 2 * * * *x"):
            out = CliRunner().invoke(app, [*args[:2], cron, *args[3:]])
            assert out.exit_code == 2 and out.output.splitlines() == [
                CRON_REFUSED.replace("'0 25 * * *'", f"'{cron}'")], out.output


def test_serve_waits_for_a_prefect_server_that_is_starting_and_says_so(monkeypatch):
    """serve and the Prefect server start together (systemd at boot): the server refuses connections
    until it is up, which took 30-60 s on a loaded machine; serve gave it one try of 10 s. Here
    the server comes up when serve says it waits; a wrong URL (an unknown host) is not waited for."""
    from flows.commands import preflight
    from flows.errors import CommandError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{port}/api")
    told: list[str] = []
    with contextlib.ExitStack() as later:
        def notice(line: str) -> None:
            told.append(line)
            if len(told) == 1:  # the server comes up now
                later.enter_context(_answering_server(port))

        preflight.prefect_api(wait=120, notice=notice)
    assert told[0] == (f"waiting up to 120 s for the Prefect server at http://127.0.0.1:{port}/api to start (Connection "
                       "refused; --prefect-wait or DUMPSCOPE_PREFECT_WAIT sets how long)")
    assert told[1].startswith(f"the Prefect server at http://127.0.0.1:{port}/api answered after ") and len(told) == 2
    with pytest.raises(CommandError, match=r"no Prefect server answers there \(Connection refused\)$"):
        preflight.prefect_api()  # run: no wait
    monkeypatch.setenv("PREFECT_API_URL", "http://no-such-host.invalid:4200/api")
    told.clear()
    with pytest.raises(CommandError, match=r"no Prefect server answers there \(") as refused:
        preflight.prefect_api(wait=120, notice=told.append)
    assert refused.value.exit_code == 2 and told == []


def test_run_asks_a_busy_prefect_server_again_and_a_silent_one_ends_in_one_line(monkeypatch):
    """CI at 164b786: three concurrent `run`s against one Prefect server on a loaded machine exited 2 with
    "no Prefect server answers there (timed out)": the server had taken the connection and not answered in
    10 s. A timed-out health check is asked again (PREFECT_BUSY_SECONDS); a refusal is still the answer at once."""
    import http.server
    import threading

    from flows.commands import preflight
    from flows.errors import CommandError

    monkeypatch.setattr(preflight, "PREFECT_ANSWER_SECONDS", 0.2)
    asked: list[float] = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(time.monotonic())
            if len(asked) <= limit["slow"]:
                time.sleep(0.5)  # past the health check's timeout
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"true")

        def log_message(self, *args):
            pass

    limit = {"slow": 2}
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{server.server_port}/api")
        preflight.prefect_api()  # run: no wait, yet the busy server is asked until it answers
        assert len(asked) == 3
        limit["slow"], asked[:] = 10**6, []
        monkeypatch.setattr(preflight, "PREFECT_BUSY_SECONDS", 1.5)
        with pytest.raises(CommandError, match=r"no Prefect server answers there \(timed out\)$") as silent:
            preflight.prefect_api()
        assert silent.value.exit_code == 2 and 2 <= len(asked) <= 4
        server.shutdown()


@pytest.mark.integration  # building the deployment runs `file` on the interpreter (platform.architecture)
@pytest.mark.parametrize("status, said", [
    (401, "the API refused GET /api/deployments/name/nightly--bucket--duckdb/dumpscope-nightly (HTTP 401): "
          "set PREFECT_API_KEY (a Prefect Cloud workspace wants one)"),
    (404, "the API refused POST /api/flows/ (HTTP 404): give a Prefect server's API URL, e.g. http://127.0.0.1:4200/api"),
])
def test_what_the_prefect_api_refuses_after_its_health_check_is_one_line(status, said, tmp_path):
    """A server that passes the health check (Prefect Cloud without a key answers 401; another API
    whose /health says true) and refuses the deployment: on main Prefect's 78-81-line traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DUMPSCOPE_"))}
    env |= {"PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    with _answering_server(refusing=status) as api:
        done = subprocess.run([sys.executable, "-m", "flows.cli", "serve", "--bucket", str(SAMPLE), "--warehouse",
                               str(tmp_path / "w.duckdb")], cwd=ROOT, env=env | {"PREFECT_API_URL": api},
                              capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout, done.stderr.splitlines()) == (2, "", [f"error: PREFECT_API_URL {api}: {said}"])


@contextlib.contextmanager
def _answering_server(port: int = 0, refusing: int | None = None):
    """A stand-in for a Prefect server's API URL: its health check answers; every other request
    is answered ``refusing`` (an HTTP status) when given, else as the health check (on ``port``)."""
    import http.server
    import threading

    class Health(http.server.BaseHTTPRequestHandler):
        def answer(self):
            health = self.path.endswith("/health")
            self.send_response(refusing if refusing and (refusing == 401 or not health) else 200)
            self.end_headers()
            self.wfile.write(b'{"detail": "no"}' if refusing and not health else b"true")

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = answer

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", port), Health) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_port}/api"
        finally:
            server.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, seconds: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} did not answer in {seconds} s: {log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.integration
def test_a_served_night_publishes_the_site_and_snapshot_to_s3_and_notifies(prefect_home, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tests.moto_s3 import moto_s3
    from tests.test_notify import receiver

    bucket, warehouse = tmp_path / "bucket", tmp_path / "srv" / "warehouse.duckdb"
    warehouse.parent.mkdir()
    for night in ("2026-11-17", "2026-11-18"):
        shutil.copytree(SAMPLE / night, bucket / night)
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DUMPSCOPE_"))}
    base_env |= {"PREFECT_HOME": str(prefect_home(tmp_path / "prefect-home")), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    server_log, serve_log = tmp_path / "server.log", tmp_path / "serve.log"
    with moto_s3("site") as (endpoint, client), receiver() as (hook, received):
        aws = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ENDPOINT_URL_S3": endpoint}
        # The secrets as the systemd unit's EnvironmentFile gives them: in serve's environment.
        secrets = aws | {"DUMPSCOPE_NOTIFY": json.dumps([hook])}
        server = serve = None
        try:
            # Started as systemd starts the two units: serve before the server answers, which it waits for.
            with serve_log.open("w") as out:
                serve = subprocess.Popen(
                    [sys.executable, "-m", "flows.cli", "serve", "--cron", "0 0 1 1 *", "--bucket", str(bucket),
                     "--warehouse", str(warehouse), "--settle", "0", "--workers", "1", "--site", str(tmp_path / "site"),
                     "--publish", "s3://site/nightly", "--fail-on", "new"],
                    cwd=ROOT, env=base_env | secrets | {"PREFECT_API_URL": api, "DUMPSCOPE_PREFECT_WAIT": "300"},
                    stdout=out, stderr=subprocess.STDOUT)
            waiting = f"waiting up to 300 s for the Prefect server at {api} to start (Connection refused; "
            while waiting not in serve_log.read_text():  # on main: exit 2, no Prefect server answers there
                assert serve.poll() is None, serve_log.read_text()[-3000:]
                time.sleep(0.5)
            with server_log.open("w") as out:
                server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                           "--port", str(port)], env=base_env, stdout=out, stderr=subprocess.STDOUT)
            _wait_for(f"{api}/health", 300, server, server_log)
            with temporary_settings(updates={PREFECT_API_URL: api}):
                deadline = time.monotonic() + 120
                while True:  # serve registers the deployment, then polls for its runs
                    assert serve.poll() is None, serve_log.read_text()[-3000:]
                    with get_client(sync_client=True) as api_client:
                        if any(d.name == "dumpscope-nightly" for d in api_client.read_deployments()):
                            break
                    assert time.monotonic() < deadline, serve_log.read_text()[-3000:]
                    time.sleep(1)
                # _sync: a test before this one on the worker may leave an event loop (run_deployment then returned a coroutine)
                flow_run = run_deployment("nightly--bucket--duckdb/dumpscope-nightly", timeout=600, _sync=True)
            # --fail-on new: the night opened incidents, so the run ends Failed, saying the exit status run gives.
            assert flow_run.state.is_failed() and flow_run.state.message.startswith("exit 4: "), flow_run.state
            keys = {o["Key"] for o in client.list_objects_v2(Bucket="site", Prefix="nightly/")["Contents"]}
            site_files = {f"nightly/{f.relative_to(tmp_path / 'site').as_posix()}"
                          for f in (tmp_path / "site").rglob("*") if f.is_file()}
            assert keys == site_files | {"nightly/warehouse.duckdb"} and "nightly/index.html" in keys
            assert len(received) == 1 and "new" in json.dumps(received[0])
            candidate = SAMPLE / "2026-11-19"
            local = CliRunner().invoke(app, ["check", str(candidate), "--warehouse", str(warehouse), "--format", "json"])
            published = CliRunner().invoke(app, [
                "check", str(candidate), "--warehouse", "s3://site/nightly/warehouse.duckdb", "--format", "json",
                "--storage-option", f"client_kwargs.endpoint_url={endpoint}", "--storage-option", "key=testing",
                "--storage-option", "secret=testing", "--storage-option", "client_kwargs.region_name=us-east-1"])
            assert local.exit_code == published.exit_code == 0, (local.output, published.output)
            assert json.loads(published.stdout) == json.loads(local.stdout) != []
            assert f"the Prefect server at {api} answered after " in serve_log.read_text()
        finally:
            if serve is not None:
                _stop(serve)
            if server is not None:
                _stop(server)
