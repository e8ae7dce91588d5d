"""A night killed as the OOM killer would (SIGKILL) leaves nothing running, and what it
left on disk is removed by the next: the structural items' work directories beside the
warehouse (flows.verdict.compaction.sweep_work_dirs), Prefect's temporary server (it dies with
its parent: flows.prefect_server)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flows.verdict.compaction import sweep_work_dirs
from tests.test_concurrency import ROOT, SAMPLE, _no_process_left_from


@pytest.mark.integration
def test_only_the_work_directories_of_gone_processes_are_swept(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead_dir, live_dir, own_dir, older = (tmp_path / f".items-{gone.pid}-x1", tmp_path / f".items-{alive.pid}-x2",
                                              tmp_path / f".items-{os.getpid()}-x3", tmp_path / ".items-ab12cd")
        for d in (dead_dir, live_dir, own_dir, older):
            (d / "batch-00000").mkdir(parents=True)
            (d / "batch-00000" / "t_hlo_instructions.parquet").write_bytes(b"PAR1")
        (tmp_path / ".items-1-file").write_text("not a directory: not ours")
        assert sorted(sweep_work_dirs(tmp_path)) == sorted([dead_dir, older])
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live_dir.name, own_dir.name, ".items-1-file"])
    finally:
        alive.kill()
        alive.wait()


@pytest.mark.integration
def test_a_night_killed_in_the_items_step_leaves_no_process_and_the_next_removes_its_work(prefect, prefect_home, tmp_path):
    """Ephemeral mode (no PREFECT_API_URL): the killed night starts its own temporary server. The
    next night talks to the session's server (its own start-up is not what this test is about)."""
    from prefect.settings import PREFECT_API_URL

    bucket, warehouse = tmp_path / "bucket", tmp_path / "w.duckdb"
    shutil.copytree(SAMPLE / "2026-11-17", bucket / "2026-11-17")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"PREFECT_HOME": str(prefect_home(tmp_path / "prefect"))}
    # --log-level INFO: Prefect's own lines (its temporary server's start) are what this test reads.
    args = ["run", "--workers", "1", "--bucket", str(bucket), "--warehouse", str(warehouse), "--log-level", "INFO"]
    with (tmp_path / "killed.log").open("w") as log:  # a file, not a pipe: orphans would hold a pipe open
        killed = subprocess.Popen([sys.executable, "-m", "tests.crash_at", "items", *args], cwd=ROOT,
                                  env=env | {"DUMPSCOPE_TEST_RUN": "items-killed"}, stdout=log, stderr=subprocess.STDOUT)
        assert killed.wait(timeout=300) == -9, (tmp_path / "killed.log").read_text()[-2000:]
    log_text = (tmp_path / "killed.log").read_text()
    assert "Starting temporary server" in log_text, log_text[-2000:]  # the night's own server ran
    _no_process_left_from("items-killed")
    left = [p.name for p in tmp_path.glob(".items-*")]
    assert len(left) == 1 and any((tmp_path / left[0]).iterdir()), left
    again = subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT,
                           env=env | {"PREFECT_API_URL": PREFECT_API_URL.value()}, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, (again.stdout[-2000:], again.stderr[-2000:])
    assert f"removed {left[0]}, left by a killed night" in again.stdout + again.stderr
    assert list(tmp_path.glob(".items-*")) == []
