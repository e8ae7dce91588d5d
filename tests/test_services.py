"""Long-running commands as a service manager runs them (issue 11, items 12 and 13)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SAMPLE = ROOT / "data" / "sample_bucket"


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        out |= {int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()}
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.integration
def test_sigterm_stops_watch_and_its_temporary_prefect_server(prefect_home, tmp_path):
    bucket, warehouse = tmp_path / "bucket", tmp_path / "w.duckdb"
    shutil.copytree(SAMPLE / "2026-11-20" / "jax-pmap", bucket / "2026-11-20" / "jax-pmap")
    env = {**os.environ, "PREFECT_HOME": str(prefect_home(tmp_path / "prefect-home"))}
    env.pop("PREFECT_API_URL", None)  # ephemeral mode: watch starts its own temporary API server
    log = (tmp_path / "watch.log").open("w")
    watch = subprocess.Popen([sys.executable, "-m", "flows.cli", "watch", "--bucket", str(bucket), "--warehouse",
                              str(warehouse), "--interval", "1", "--settle", "0"],
                             cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    children: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not warehouse.exists() and watch.poll() is None:
            time.sleep(0.3)
        assert warehouse.exists(), (tmp_path / "watch.log").read_text()
        children = _children(watch.pid)
        assert children  # the temporary API server (and the parse workers)
        watch.send_signal(signal.SIGTERM)
        # The SystemExit is raised in the main thread at once, but the interpreter then joins the task
        # runner's worker thread, which ends the DuckDB statement it is in: on CI's loaded 2 cores (three
        # workers, chromium) that took over 60 s once (e987ea0's CI), 15-20 s alone.
        assert watch.wait(timeout=180) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(c) for c in children):
            time.sleep(0.2)
        assert not [c for c in children if _alive(c)], "left running after SIGTERM"
    finally:
        for pid in [watch.pid, *children]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        log.close()


def test_watch_prints_and_writes_each_night_as_run_does(prefect, tmp_path):
    """watch --verbose --summary-json: each look's summary printed as `run` prints it, and the
    latest night's written as JSON."""
    from typer.testing import CliRunner

    from flows.cli import app

    bucket, warehouse, summary = tmp_path / "bucket", tmp_path / "w.duckdb", tmp_path / "night.json"
    shutil.copytree(SAMPLE / "2026-11-20" / "jax-pmap", bucket / "2026-11-20" / "jax-pmap")
    dumps = sum(1 for p in bucket.rglob("*") if p.is_file())
    out = CliRunner().invoke(app, ["watch", "--bucket", str(bucket), "--warehouse", str(warehouse), "--iterations", "2",
                                   "--interval", "0", "--settle", "0", "--summary-json", str(summary), "--verbose"])
    assert out.exit_code == 0, out.output
    assert f"Loaded {dumps} new dump(s) into {warehouse}." in out.output
    assert f"Nothing new in the bucket ({dumps} dump(s) loaded already, 0 still settling)." in out.output
    assert out.output.count("Counters:") == 2
    night = json.loads(summary.read_text())
    assert (night["new"], night["skipped"]) == (0, dumps)


@pytest.mark.integration
def test_storage_option_values_never_reach_the_prefect_api(prefect, tmp_path):
    """`--storage-option secret_token=...` is passed to fsspec, and Prefect records only its name."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    secret = "s3cr3t-value-4f1d9a"
    bucket, warehouse = tmp_path / "bucket", tmp_path / "w.duckdb"
    shutil.copytree(SAMPLE / "2026-11-20" / "jax-pmap", bucket / "2026-11-20" / "jax-pmap")
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    out = subprocess.run([sys.executable, "-m", "flows.cli", "run", "--bucket", str(bucket), "--warehouse", str(warehouse),
                          "--storage-option", f"secret_token={secret}", "--storage-option", "auto_mkdir=false"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr

    with get_client(sync_client=True) as client:  # sync: other tests may leave an event loop running
        runs = client.read_flow_runs() + client.read_task_runs()
    recorded = json.dumps([r.model_dump(mode="json") for r in runs])
    assert "secret_token" in recorded  # the name is recorded...
    assert secret not in recorded  # ...never the value


def test_a_stop_signal_decides_the_exit_status_whatever_surfaces(monkeypatch):
    """SIGTERM during a flow reaches Prefect's handler, not ours, and in the middle of a DuckDB
    query it comes out as "Query interrupted" (a RuntimeError): the exit status is still 128 + 15."""
    import pytest

    from flows import cli
    from flows.commands import signals

    def interrupted(signum, frame):  # what Prefect's bridge and DuckDB together make of it
        raise RuntimeError("Query interrupted")

    def a_query_when_the_signal_comes():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler runs here

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(signals, "_noted", None)
    try:
        signals.note_signals()
        signal.signal(signal.SIGTERM, interrupted)
        monkeypatch.setattr(cli, "app", a_query_when_the_signal_comes)
        with pytest.raises(SystemExit) as stop:
            cli.main()
        assert stop.value.code == 128 + signal.SIGTERM
        monkeypatch.setattr(cli, "app", lambda: (_ for _ in ()).throw(RuntimeError("a real failure")))
        with pytest.raises(RuntimeError):  # no signal since: a failure stays a failure
            cli.main()
    finally:
        signal.signal(signal.SIGTERM, before)
        signal.set_wakeup_fd(-1)
