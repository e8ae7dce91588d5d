"""Runs that overlap end exactly as if they had run one after another (issue 11, item 1).

The writer decides what is new after it holds the lock: two runs that both discovered
the same night must not turn each other's loads into "copies" of nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flows.warehouse import store as wh

ROOT = Path(__file__).parents[1]
SAMPLE = ROOT / "data" / "sample_bucket"
NIGHTS = ("2026-11-17", "2026-11-18", "2026-11-19")
LAST = "2026-11-20"
VOLATILE = {"ingested_at"}  # when a row was written: differs between any two runs
VOLATILE_FACTS = ("aggregated_through", "records_root")  # schema_info: a time, likewise; where the files are


def snapshot(warehouse: Path) -> dict[str, list[str]]:
    """Every table and records view, row for row (sorted), without the write-time columns."""
    from transforms.parsers.formats import all_tables

    with wh.connect_readonly(warehouse) as con:
        tables = [t for (t,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY table_name").fetchall()]
        tables += sorted(all_tables())
        out = {}
        for table in tables:
            cols = [c for (c,) in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ? ORDER BY column_index",
                [table]).fetchall() if c not in VOLATILE]
            select = ", ".join(f'"{c}"' for c in cols)
            rows = con.execute(f'SELECT {select} FROM "{table}"').fetchall()
            if table == "schema_info":
                rows = [r for r in rows if r[0] not in VOLATILE_FACTS]
            out[table] = sorted(repr(r) for r in rows)
    return out


def _bucket(where: Path, nights: tuple[str, ...]) -> Path:
    bucket = where / "bucket"
    for night in nights:
        shutil.copytree(SAMPLE / night, bucket / night, dirs_exist_ok=True)
    return bucket


def _run(bucket: Path, warehouse: Path):
    """A night run one after another with nothing else: the nightly's steps in this process (the
    overlapping and killed runs below are real ``dumpscope run`` processes)."""
    from flows.nightly import night_in_process

    return night_in_process(bucket=str(bucket), warehouse=warehouse, workers=1)


@pytest.fixture(scope="module")
def one_after_another(tmp_path_factory) -> dict[str, list[str]]:
    """Three nights, then the fourth, each by one run: what every overlap must end as."""
    where = tmp_path_factory.mktemp("reference")
    bucket, warehouse = _bucket(where, NIGHTS), where / "wh.duckdb"
    _run(bucket, warehouse)
    shutil.copytree(SAMPLE / LAST, bucket / LAST)
    _run(bucket, warehouse)
    return snapshot(warehouse)


def _three_nights_loaded(tmp_path: Path) -> tuple[Path, Path]:
    bucket, warehouse = _bucket(tmp_path, NIGHTS), tmp_path / "wh.duckdb"
    _run(bucket, warehouse)
    shutil.copytree(SAMPLE / LAST, bucket / LAST)
    return bucket, warehouse


def test_two_runs_that_discovered_the_same_night_load_it_once(prefect, tmp_path, one_after_another):
    from flows import nightly as n

    bucket, warehouse = _three_nights_loaded(tmp_path)
    staging = warehouse.with_suffix(".staging")
    # Both runs list the bucket against the same published warehouse, then parse...
    found = [n.discover.fn(str(bucket), warehouse, 0.0, None, None, None, None) for _ in range(2)]
    assert [len(f[0]) for f in found] == [46, 46]
    outcomes = [n.stage_chunk(str(bucket), None, new, staging, held=held) for new, *_, held, _ in found]
    # ...then take the lock one after the other.
    from flows.verdict import items

    for (new, _, _, runs, *_), staged in zip(found, outcomes):  # excerpts read from the bucket, as the nightly does
        n.load.fn(warehouse, staged, runs, True, run_items=items.reading(items.DumpSource(str(bucket))))
    assert snapshot(warehouse) == one_after_another


@pytest.mark.parametrize("runs", [2, 3])
def test_concurrent_dumpscope_runs_end_as_one_run(prefect, tmp_path, one_after_another, runs):
    from prefect.settings import PREFECT_API_URL

    bucket, warehouse = _three_nights_loaded(tmp_path)
    # The session's Prefect server (started by the harness): each process skips its own start-up.
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    cmd = [sys.executable, "-m", "flows.cli", "run", "--wait", "--workers", "1",
           "--bucket", str(bucket), "--warehouse", str(warehouse), "--report", str(tmp_path / "report.md")]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(runs)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * runs, outputs
    assert snapshot(warehouse) == one_after_another


def _no_process_left_from(token: str) -> None:
    """No process started by the killed run (its environment carries ``token``) outlives it
    for long: parse workers exit with their parent, the temporary server is not theirs."""
    import time

    def orphans() -> list[str]:
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    env = Path(f"/proc/{entry}/environ").read_bytes()
                except OSError:
                    continue
                if f"DUMPSCOPE_TEST_RUN={token}".encode() in env.split(b"\0"):
                    out.append(entry)
        return out

    deadline = time.monotonic() + 15
    while orphans() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not orphans(), f"processes of the killed run {token} still running"


STAGES = ("discover", "parse", "load", "aggregate", "publish", "report")


@pytest.mark.parametrize("stage", STAGES)
def test_a_run_killed_at_any_stage_is_made_whole_by_the_next(prefect, tmp_path, one_after_another, stage):
    """SIGKILL at a stage of a night (a `dumpscope run` process); the next night ends with the
    warehouse of an uninterrupted one."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    where = tmp_path / stage
    bucket, warehouse = _three_nights_loaded(where)
    args = ["run", "--workers", "1", "--bucket", str(bucket), "--warehouse", str(warehouse),
            "--report", str(where / "report.md")]
    with (where / "killed.log").open("w") as log:  # a file, not a pipe: orphans would hold a pipe open
        killed = subprocess.Popen([sys.executable, "-m", "tests.crash_at", stage, *args], cwd=ROOT,
                                  env={**env, "DUMPSCOPE_TEST_RUN": stage}, stdout=log, stderr=subprocess.STDOUT)
        assert killed.wait(timeout=300) == -9, (stage, (where / "killed.log").read_text()[-2000:])
    _no_process_left_from(stage)
    # The next night, in this process (the killed one was a real `dumpscope run`): what it finds
    # beside the warehouse (a dead writer's lock, journal, staging, work directories) is the test.
    again = _run(bucket, warehouse)
    assert (again.failed, again.unreadable) == (0, 0), stage
    assert snapshot(warehouse) == one_after_another, stage


def test_concurrent_runs_with_a_site_and_a_publish_build_and_publish_one_at_a_time(prefect, tmp_path):
    """Three `run --site --publish` at once on a night with nothing new: the site build and the
    publish ran outside any lock, and all three exited 1 (FileExistsError on site.src/overrides,
    mkdocs' strict abort). Now they build one after another: the two with --wait exit 0, the one
    without exits 0 (it came first) or 3, saying the site is being built."""
    from prefect.settings import PREFECT_API_URL

    bucket, warehouse = _three_nights_loaded(tmp_path)
    _run(bucket, warehouse)
    site, dest = tmp_path / "site", tmp_path / "www"
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    cmd = [sys.executable, "-m", "flows.cli", "run", "--workers", "1",
           "--bucket", str(bucket), "--warehouse", str(warehouse), "--site", str(site), "--publish", str(dest)]
    procs = [subprocess.Popen([*cmd, *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for extra in (["--wait"], ["--wait"], [])]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    codes = [p.returncode for p in procs]
    assert codes[:2] == [0, 0] and codes[2] in (0, 3), outputs
    if codes[2] == 3:
        assert outputs[2].strip().splitlines()[-1].startswith(f"error: site {site.resolve()} is being built by another process")
    assert (dest / "index.html").is_file() and (dest / "warehouse.duckdb").is_file()
    assert (site / "index.html").is_file() and not site.with_name("site.src").joinpath("overrides.tmp").exists()
