"""Big nights with a year of history: memory, time, bytes written, warehouse and site size.

Issue 13. The bucket is ``benchmarks/scale_workload.py``'s (40 jobs, 1,440 files, 1.09 GB
of text a night, 10 % of the files changed from one night to the next). Each real night
is a fresh process

    dumpscope run --bucket B --warehouse W --workers 2 --site S --memory-limit 2GB --summary-json F

with ``PREFECT_HOME=benchmarks/out/scale_bench/prefect`` (kept across nights) and
``PREFECT_SERVER_ANALYTICS_ENABLED=false``. The bucket holds only the night's own run
directory: Dumpscope ingests new objects only, and the runs it already holds must stay in
the warehouse when their objects leave the bucket (checked after night 2).

1. night 1 (one line), then night 2: REPORTED;
2. a year of history synthesised into the warehouse (``synthesise_year``): 362 runs, the
   nights 3-364, each a copy of night 2 as 10 %-changed nights would leave it;
3. night 365, a real warm-up night (its line only), then night 366: REPORTED;
4. night 367: night 366's files again, byte for byte, under a new run (an unchanged
   night): REPORTED; then ``dumpscope accept`` of one job's series at it (wall, peak RSS);
5. a fresh warehouse (``work/short``) through real nights 1-5, without the site: what
   grows with the history and what a new warehouse does in its first nights.

For each reported night: peak RSS of the whole process tree (psutil, polled every 50 ms,
summed over the tree), wall seconds, the flow's seconds per stage (from --summary-json,
else from the printed summary), bytes written by the tree (/proc/<pid>/io ``wchar`` and
``write_bytes`` of every process of the tree, last value seen while polling, summed; and
the kernel's block-output count of the reaped tree, ``wait4`` rusage; each night measured by
``benchmarks/harness.py``), the warehouse file
and its growth over the night, the staging directory, every other file beside the
warehouse, and the site. Then the targets, each PASS or FAIL as measured. Figures go to
``benchmarks/out/bench_scale.json``.

    .venv/bin/python benchmarks/bench_scale.py [--night-timeout 420] [--records-runs N] [--work DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import scale_workload as wl  # noqa: E402

from benchmarks import harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
# Where the nights run (``--work``; ``use_work`` sets these): bucket, warehouse, site, Prefect home.
WORK = OUT / "scale_bench"
BUCKET = WAREHOUSE = STAGING = RECORDS = SITE = PREFECT_HOME = Path()
RESULT = OUT / "bench_scale.json"
DUMPSCOPE = ROOT / ".venv" / "bin" / "dumpscope"
WORKERS = 2
MEMORY_LIMIT = "2GB"
SYNTH_NIGHTS = range(3, 365)  # nights 3..364: with 1, 2, 365 and 366, one run a day for a year
LEFT_ALONE = {"runs", "schema_info", "incidents", "incident_steps", "accepts", "notifications",
              "records_files"}  # the records store: its files are made by _synthesise_records
MiB = 1 << 20
GiB = 1 << 30

# Targets of issue 13 (measured below, never assumed).
TARGET_RSS = 2 * GiB
TARGET_WORK_S = 45.0
TARGET_UNCHANGED_S = 5.0
# Targets of issue 30: a night at the speed of its change (the flow's own work, site included).
TARGET_FIRST_NIGHT_S = 180.0
TARGET_CHANGED_NIGHT_S = 45.0
TARGET_UNCHANGED_NIGHT_S = 10.0
TARGET_YEAR_SITE_BYTES, TARGET_YEAR_SITE_FILES, TARGET_YEAR_SITE_S = 150e6, 3000, 30.0
SHORT_NIGHTS = 5  # the fresh warehouse's real nights (short_history)
SHORT_SETTLED_AFTER = 3  # its first nights grow while DuckDB has no free space to reuse
TARGET_GROWTH = 5 * MiB
TARGET_SITE_S = 20.0
TARGET_SITE_BYTES = 100 * 10**6


# ---------------------------------------------------------------- running one night


def use_work(work: Path) -> None:
    global WORK, BUCKET, WAREHOUSE, STAGING, RECORDS, SITE, PREFECT_HOME
    WORK = work.resolve()
    BUCKET, WAREHOUSE, SITE, PREFECT_HOME = WORK / "bucket", WORK / "warehouse.duckdb", WORK / "site", WORK / "prefect"
    STAGING = WAREHOUSE.with_suffix(".staging")  # <warehouse without .duckdb>.staging
    RECORDS = WAREHOUSE.with_name(WAREHOUSE.name + ".records")


def lock_work():
    """One bench at a time in a work directory: a second one would wipe the first's warehouse."""
    import fcntl

    WORK.mkdir(parents=True, exist_ok=True)
    f = open(WORK / ".bench.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        raise SystemExit(f"another bench_scale.py (pid {f.read().strip() or '?'}) is running in {WORK}: "
                         "wait for it, or give this one another --work directory") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def run_flags() -> dict[str, bool]:
    """Which of the flags this bench relies on ``dumpscope run`` has today."""
    text = subprocess.run([str(DUMPSCOPE), "run", "--help"], capture_output=True, text=True,
                          env=os.environ | {"COLUMNS": "200"}).stdout
    return {flag: flag in text for flag in ("--summary-json", "--memory-limit")}


def measure(argv: list[str], env: dict, timeout: float) -> dict:
    """Run ``argv`` in its own session (``benchmarks/harness.py``), polling the tree every 50 ms until it
    exits, SIGKILLed after ``timeout`` seconds; with the bytes its processes wrote (/proc/<pid>/io)."""
    io: dict[int, tuple[int, int]] = {}

    def writes(tree: list[psutil.Process]) -> None:
        for p in tree:
            try:
                c = p.io_counters()
                io[p.pid] = (c.write_chars, c.write_bytes)
            except psutil.Error:
                pass

    m = harness.run(argv, cwd=ROOT, env=env, capture=True, stderr=subprocess.STDOUT, timeout=timeout,
                    new_session=True, on_poll=writes)
    return {"returncode": m["returncode"], "timed_out": m["timed_out"], "wall_s": m["wall_s"],
            "peak_rss_tree_bytes": int(m["peak_rss_tree_mib"] * MiB), "max_processes": m["max_processes"],
            "wchar_bytes": sum(w for w, _ in io.values()), "write_bytes": sum(b for _, b in io.values()),
            "rusage_oublock_bytes": m["oublock_bytes"], "cpu_s": m["cpu_s"], "output": m["stdout"]}


_ROW = re.compile(r"^\|\s*([a-z_ ]+?)\s*\|\s*([0-9.]+)\s*\|\s*$", re.M)


def printed_summary(text: str) -> dict:
    """The flow's printed summary table (fallback when --summary-json is missing)."""
    rows = {k: float(v) for k, v in _ROW.findall(text)}
    seconds = {k.removesuffix(" seconds"): v for k, v in rows.items() if k.endswith(" seconds")}
    return {"seconds": seconds, "counts": {k: v for k, v in rows.items() if not k.endswith(" seconds")}}


def tree_bytes(path: Path) -> tuple[int, int]:
    """(apparent bytes, files) of a file or directory tree; (0, 0) when absent."""
    if path.is_file():
        return path.stat().st_size, 1
    total = n = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
                n += 1
            except OSError:
                pass
    return total, n


def warehouse_bytes() -> int:
    """What the warehouse holds: the published file and its records store (the Parquet
    files of the records rows, ``<warehouse>.records/``)."""
    return warehouse_file_bytes() + tree_bytes(RECORDS)[0]


def warehouse_file_bytes() -> int:
    """The DuckDB file alone: what every night adds for ever (its run's rows)."""
    return WAREHOUSE.stat().st_size if WAREHOUSE.exists() else 0


def beside_warehouse() -> dict:
    """Every file or directory named ``<warehouse>*``: bytes each."""
    out = {}
    for p in sorted(glob.glob(glob.escape(str(WAREHOUSE)) + "*")):
        size, n = tree_bytes(Path(p))
        out[Path(p).name] = {"bytes": size, "files": n}
    return out


def disk_used(paths: list[Path]) -> int:
    """Bytes of disk the files under ``paths`` take, each inode once (hard links share one)."""
    seen, total = set(), 0
    for root in paths:
        walk = [(str(root.parent), [], [root.name])] if root.is_file() else os.walk(root)
        for dirpath, _, names in walk:
            for name in names:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def run_night(k: int, flags: dict, timeout: float, report: bool, contents_of: int | None = None, site: bool = True) -> dict:
    """Write night k as the bucket's only run, run dumpscope on it, measure. ``contents_of``:
    night k's run holds that night's files, byte for byte (an unchanged night)."""
    t0 = time.perf_counter()
    for old in BUCKET.glob("*"):
        if old.is_dir() and old.name != wl.run_id(k):
            shutil.rmtree(old)
    made = wl.night(contents_of or k, BUCKET)
    if contents_of:
        shutil.rmtree(BUCKET / wl.run_id(k), ignore_errors=True)
        (BUCKET / wl.run_id(contents_of)).rename(BUCKET / wl.run_id(k))
        (BUCKET / wl.run_id(k) / "run.json").write_text(json.dumps(wl.run_json(k)))
        made["changed_from_previous"] = 0
    gen_s = time.perf_counter() - t0
    summary_file = WORK / f"summary-night{k}.json"
    summary_file.unlink(missing_ok=True)
    argv = [str(DUMPSCOPE), "run", "--bucket", str(BUCKET), "--warehouse", str(WAREHOUSE), "--workers", str(WORKERS)]
    argv += ["--site", str(SITE)] if site else []
    if flags["--memory-limit"]:
        argv += ["--memory-limit", MEMORY_LIMIT]
    if flags["--summary-json"]:
        argv += ["--summary-json", str(summary_file)]
    env = {k2: v for k2, v in os.environ.items() if not k2.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(PREFECT_HOME), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PYTHONUNBUFFERED": "1",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90"}
    size_before, file_before = warehouse_bytes(), warehouse_file_bytes()
    load_before = os.getloadavg()[0]  # others' work on this 2-core machine slows the night down
    m = measure(argv, env, timeout)
    load_after = os.getloadavg()[0]
    summary = {}
    if summary_file.exists():
        try:
            summary = json.loads(summary_file.read_text())
        except ValueError:
            summary = {}
    source = "summary-json" if summary else "printed summary"
    if not summary:
        summary = printed_summary(m["output"])
    size_after, file_after = warehouse_bytes(), warehouse_file_bytes()
    missing = not WAREHOUSE.exists()
    log = WORK / f"night{k}.log"
    log.write_text(m["output"], encoding="utf-8")
    site_bytes, site_files = tree_bytes(SITE)
    staging_bytes, staging_files = tree_bytes(STAGING)
    r = {"night": k, "run_id": wl.run_id(k), "generate_s": gen_s, "warehouse_missing_after": missing,
         "loadavg_1min_before": load_before, "loadavg_1min_after": load_after, "bucket_files": made["files"],
         "changed_files": made["changed_from_previous"], "summary_source": source, "summary": summary,
         **{key: v for key, v in m.items() if key != "output"},
         "warehouse_bytes_before": size_before, "warehouse_bytes": size_after, "warehouse_growth_bytes": size_after - size_before,
         "file_bytes": file_after, "file_growth_bytes": file_after - file_before,
         "records_growth_bytes": (size_after - file_after) - (size_before - file_before),
         "staging_bytes": staging_bytes, "staging_files": staging_files, "beside_warehouse": beside_warehouse(),
         "warehouse_disk_bytes": disk_used([Path(p) for p in glob.glob(glob.escape(str(WAREHOUSE)) + "*")] + [STAGING]),
         "site_bytes": site_bytes, "site_files": site_files, "output_tail": m["output"][-3000:]}
    secs = summary.get("seconds", {})
    status = "TIMEOUT (killed)" if m["timed_out"] else f"exit {m['returncode']}"
    counts = summary.get("counts", summary)
    print(f"night {k} ({wl.run_id(k)}){' [reported]' if report else ''}: {status}, wall {m['wall_s']:.1f} s, flow total "
          f"{secs.get('total', float('nan')):.1f} s, new paths {counts.get('new', '?')}, rows loaded {counts.get('rows_loaded', '?')}, peak RSS {m['peak_rss_tree_bytes'] / MiB:.0f} MiB, warehouse "
          f"{size_after / MiB:.1f} MiB ({(size_after - size_before) / MiB:+.1f}), written {m['write_bytes'] / MiB:.0f} MiB "
          f"(bucket written in {gen_s:.1f} s)", flush=True)
    if missing:
        print(f"  the warehouse file {WAREHOUSE} does not exist after this night", flush=True)
    if m["returncode"] != 0:
        lines = m["output"].strip().splitlines()
        errors = [line for line in lines if re.search(r"Error|error:|Traceback|Exception", line)]
        print("  " + "\n  ".join((errors[-8:] or lines[-8:])) + f"\n  (whole output: {log.relative_to(ROOT)})", flush=True)
    return r


# ---------------------------------------------------------------- the year


def _columns(con) -> dict[str, dict[str, str]]:
    base = {t for (t,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND NOT internal").fetchall()}
    out: dict[str, dict[str, str]] = {}
    for t, c, dtype in con.execute("SELECT table_name, column_name, data_type FROM duckdb_columns() "
                                   "WHERE schema_name = 'main' AND NOT internal ORDER BY table_name, column_index").fetchall():
        if t in base:
            out.setdefault(t, {})[c] = dtype
    return out


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def records_runs_default() -> int:
    """The records retention of the code under test: ``keep_records_runs`` of the default
    settings (records of the contents of the last N runs; 0 or absent: all of them)."""
    try:
        from transforms.trends.rules import Settings

        return int(getattr(Settings(), "keep_records_runs", 0) or 0)
    except Exception:  # noqa: BLE001 - an older or newer code base: keep every night's records
        return 0


def _versions_table(night2_ids: dict[str, str], live_night: int, records_runs: int) -> tuple[list[dict], int]:
    """Per changed file version of the synthetic nights: (rel, old id, new id, first and last
    night it is the file's content, whether its records are synthesised: those of the last
    ``records_runs`` synthetic nights, all when 0). A version that is still the file's
    content at ``live_night`` takes the real sha256 of its bytes, so the real night after
    it dedupes against the synthetic history as it would in production."""
    wl.materialise(live_night)
    files = wl.files()
    first, last = SYNTH_NIGHTS.start, SYNTH_NIGHTS.stop - 1
    oldest_with_records = last + 1 - records_runs if records_runs else first
    live = wl.versions(live_night)
    rows, seen = [], {}
    for k in SYNTH_NIGHTS:
        for i in wl.drawn(k):
            seen.setdefault(i, []).append(k)
    for i, nights in seen.items():
        f = files[i]
        rel = f"{f.job_name}/{f.rel}"
        old = night2_ids[rel]
        for n, v in enumerate(nights):
            to = nights[n + 1] - 1 if n + 1 < len(nights) else last
            if v == live[i]:
                new = hashlib.sha256(wl.stored(i, v).read_bytes()).hexdigest()
            else:
                new = hashlib.sha256(f"{old}:synthetic:{v}".encode()).hexdigest()
            rows.append({"rel": rel, "old_id": old, "new_id": new, "night_from": v, "night_to": to,
                         "records": to >= oldest_with_records})
    assert all(first <= r["night_from"] <= r["night_to"] <= last for r in rows)
    return rows, oldest_with_records


def synthesise_in_child(records_runs: int) -> dict:
    """``synthesise_year`` in a process of its own: it peaks at several GiB, which go back to
    the machine before the next nights. (The nights' own peaks, ``peak_mib`` per stage, do not
    depend on it any more: ``benchmarks/harness.py`` starts each night from a small launcher, so
    ru_maxrss, which survives fork and exec, starts from the launcher's, not this process's.)"""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        return child.submit(_synthesise_in, WORK, records_runs).result()


def _synthesise_in(work: Path, records_runs: int) -> dict:
    use_work(work)
    return synthesise_year(records_runs)


def synthesise_year(records_runs: int) -> dict:
    """Nights 3..364 in the warehouse, as copies of night 2, through the writer.

    Generic over the schema (``duckdb_columns()``): ``runs`` gets a row per night; every
    table with a ``run_id`` or a ``path`` column (dumps, metrics, dump_items, the derived
    tables) gets night 2's rows per night, with the run in ``run_id`` and in the other run
    columns (``*_run_id``, ``*_run``, ``regressed_since``: night 2 -> the night, night 1 ->
    the night before), the path prefix ``<run>/`` in ``path`` and ``*_path`` columns,
    ``started_at`` and ``commit`` of the night, ``ingested_at`` at its start (before the
    aggregation watermark, so the next aggregate takes these runs as aggregated), and
    ``dump_id`` of the file's version that night. Records tables (``dump_id``, no run or
    path) get night 2's rows of the changed file under each new version's id: as many
    rows as a year of nights with 10 % of their files changed leaves, under the code's
    retention (``records_runs``: the versions of the last N nights; 0: every night's).
    ``content_item_rows`` (keyed by content) gets night 2's items under the key of each version
    the last synthetic night holds (what night 365 compares with). Left alone: schema_info,
    incidents, incident_steps, accepts, notifications.
    """
    import pyarrow as pa

    from flows.warehouse.store import Warehouse

    t0 = time.perf_counter()
    night1, night2 = wl.run_id(1), wl.run_id(2)
    synth = [{"night": k, "run_id": wl.run_id(k), "prev_run_id": wl.run_id(k - 1),
              "started_at": datetime.fromisoformat(wl.run_json(k)["started_at"]).replace(tzinfo=None),
              "commit": wl.run_json(k)["commit"]} for k in SYNTH_NIGHTS]
    rows_before, rows_after, statements = {}, {}, []
    with Warehouse(WAREHOUSE) as con:
        cols = _columns(con)
        for t in cols:
            rows_before[t] = con.execute(f"SELECT count(*) FROM {_q(t)}").fetchall()[0][0]
        prefix = len(night2) + 2
        night2_ids = dict(con.execute("SELECT substr(path, ?), dump_id FROM dumps WHERE run_id = ?", [prefix, night2]).fetchall())
        vers, oldest = _versions_table(night2_ids, SYNTH_NIGHTS.stop - 1, records_runs)
        t_prep = time.perf_counter() - t0
        con.register("_synth", pa.Table.from_pylist(synth))
        con.register("_vers", pa.Table.from_pylist(vers))
        watermark = dict(con.execute("SELECT key, value FROM schema_info").fetchall()).get("aggregated_through")

        def timed(sql: str, params: list | None = None) -> None:
            t = time.perf_counter()
            con.execute(sql, params) if params else con.execute(sql)
            statements.append({"sql": " ".join(sql.split())[:160], "seconds": time.perf_counter() - t})

        runs_cols = cols["runs"]
        repl = ", ".join(f"s.{_q(c)} AS {_q(c)}" for c in ("run_id", "started_at", "commit") if c in runs_cols)
        timed(f"INSERT INTO runs SELECT r.* REPLACE ({repl}) FROM runs r CROSS JOIN _synth s WHERE r.run_id = ?", [night2])

        for t, tcols in cols.items():
            if t in LEFT_ALONE:
                continue
            has_run, has_path = "run_id" in tcols, "path" in tcols
            if has_run or has_path:
                exprs = {}
                for c, dtype in tcols.items():
                    qc = f"x.{_q(c)}"
                    if c == "run_id":
                        exprs[c] = "s.run_id"
                    elif dtype == "VARCHAR" and (c.endswith("_run_id") or c.endswith("_run") or c == "regressed_since"):
                        exprs[c] = f"CASE {qc} WHEN '{night2}' THEN s.run_id WHEN '{night1}' THEN s.prev_run_id ELSE {qc} END"
                    elif dtype == "VARCHAR" and (c == "path" or c.endswith("_path")):
                        exprs[c] = (f"CASE WHEN starts_with({qc}, '{night2}/') THEN s.run_id || substr({qc}, {len(night2) + 1}) "
                                    f"WHEN starts_with({qc}, '{night1}/') THEN s.prev_run_id || substr({qc}, {len(night1) + 1}) "
                                    f"ELSE {qc} END")
                    elif c == "started_at" and has_run:
                        exprs[c] = "s.started_at"
                    elif c == "commit" and has_run:
                        exprs[c] = 's."commit"'
                    elif c == "ingested_at":
                        exprs[c] = "s.started_at + INTERVAL 1 HOUR"
                    elif c == "dump_id":
                        exprs[c] = f"coalesce(v.new_id, {qc})"
                join = ("LEFT JOIN _vers v ON v.old_id = x.dump_id AND s.night BETWEEN v.night_from AND v.night_to"
                        if "dump_id" in tcols else "")
                where = "x.run_id = ?" if has_run else "starts_with(x.path, ?)"
                arg = night2 if has_run else night2 + "/"
                select = ", ".join(f"{exprs[c]} AS {_q(c)}" if c in exprs else f"x.{_q(c)}" for c in tcols)
                timed(f"INSERT INTO {_q(t)} ({', '.join(map(_q, tcols))}) SELECT {select} "
                      f"FROM {_q(t)} x CROSS JOIN _synth s {join} WHERE {where}", [arg])
            elif "dump_id" in tcols:
                select = ", ".join("v.new_id" if c == "dump_id" else f"x.{_q(c)}" for c in tcols)
                timed(f"INSERT INTO {_q(t)} ({', '.join(map(_q, tcols))}) SELECT {select} "
                      f"FROM {_q(t)} x JOIN _vers v ON x.dump_id = v.old_id WHERE v.records "
                      # each content's rows together, in their order, as a night's load leaves them
                      "ORDER BY v.new_id, x.rowid")
        # The structural items of the contents the last synthetic night holds, as the nights before
        # would have left them (keyed by content: night 2's items under each such version's key), so
        # that night 365 computes items for its own new contents only, as any night at a year does.
        # Older versions' items are not made: no night after the synthesis reads them.
        timed("""INSERT INTO content_item_rows SELECT ci.* REPLACE (replace(ci.items_key, v.old_id, v.new_id) AS items_key)
                  FROM content_item_rows ci JOIN _vers v ON contains(ci.items_key, v.old_id)
                  WHERE v.night_to = ? AND replace(ci.items_key, v.old_id, v.new_id) NOT IN (SELECT items_key FROM content_item_rows)""",
              [SYNTH_NIGHTS.stop - 1])
        con.unregister("_synth")
        con.unregister("_vers")
        started = time.perf_counter()
        made = _synthesise_records(con, vers)
        statements.append({"sql": f"records store: {made} files of the kept synthetic versions",
                           "seconds": time.perf_counter() - started})
        for t in cols:
            rows_after[t] = con.execute(f"SELECT count(*) FROM {_q(t)}").fetchall()[0][0]
        latest_ingest = con.execute("SELECT max(ingested_at) FROM dumps WHERE run_id <> ? AND run_id <> ?",
                                    [night1, night2]).fetchall()[0][0]
        t_sql = time.perf_counter() - t0 - t_prep
    total = time.perf_counter() - t0
    aggregated = watermark is not None and latest_ingest is not None and latest_ingest <= datetime.fromisoformat(watermark)
    return {"runs_added": len(synth), "versions": len(vers), "records_runs": records_runs,
            "versions_with_records": sum(v["records"] for v in vers),
            "records_from_night": oldest, "prepare_s": t_prep, "sql_s": t_sql, "publish_s": total - t_prep - t_sql,
            "seconds": total, "rows_before": rows_before, "rows_after": rows_after, "statements": statements,
            "aggregated_through": watermark, "synthetic_ingested_at_max": str(latest_ingest),
            "synthetic_runs_count_as_aggregated": aggregated}


def _synthesise_records(con, vers: list[dict]) -> int:
    """Records files of the synthetic versions whose records are kept: night 2's files of
    the file's content, its rows under the version's id, listed in ``records_files``."""
    import polars as pl

    from flows.warehouse import records

    root = records.root_of(con)
    by_id: dict[str, list[tuple[str, str, int]]] = {}
    for dump_id, table, name, n in con.execute("SELECT dump_id, table_name, file, rows FROM records_files").fetchall():
        by_id.setdefault(dump_id, []).append((table, name, n))
    listing = []
    for v in vers:
        if not v["records"]:
            continue
        for table, name, n in by_id.get(v["old_id"], []):
            version, part = re.fullmatch(r".*\.v(\d+)\.(\d+)\.parquet", name).groups()
            target = records.store_name(table, v["new_id"], int(version), int(part))
            (root / target).parent.mkdir(parents=True, exist_ok=True)
            pl.read_parquet(root / name).with_columns(pl.lit(v["new_id"]).alias("dump_id")).write_parquet(root / target)
            listing.append((v["new_id"], table, target, n))
    records.list_files(con, listing)
    records.refresh_views(con)
    return len(listing)


# ---------------------------------------------------------------- checks and report


def accept_at_a_year(timeout: float) -> dict:
    """``dumpscope accept`` of one job's series at the latest run, on the year's warehouse:
    a writer like the nightly, which rewrites from the accepted run on and walks every job."""
    pattern = f"{wl.job_name(4)}/*"
    argv = [str(DUMPSCOPE), "accept", pattern, "--warehouse", str(WAREHOUSE), "--note", "bench-scale",
            "--memory-limit", MEMORY_LIMIT]
    m = measure(argv, dict(os.environ), timeout)
    print(f"accept {pattern} at a year: exit {m['returncode']}, wall {m['wall_s']:.1f} s, "
          f"peak RSS {m['peak_rss_tree_bytes'] / MiB:.0f} MiB", flush=True)
    if m["returncode"] != 0:
        print(m["output"][-2000:], flush=True)
    # The year's synthetic history opens no incident, and an accept that closes nothing is
    # refused before it takes the writer (issue 29): then there is no writer to measure.
    refused = m["returncode"] == 2 and "closes nothing" in m["output"]
    return {"pattern": pattern, "refused_closes_nothing": refused} | {k: v for k, v in m.items() if k != "output"}


def warehouse_runs() -> dict:
    from flows.warehouse.store import connect_readonly

    con = connect_readonly(WAREHOUSE)
    try:
        runs = con.execute("SELECT count(*) FROM runs").fetchall()[0][0]
        per_run = dict(con.execute("SELECT run_id, count(*) FROM dumps GROUP BY 1").fetchall())
    finally:
        con.close()
    return {"runs": runs, "dumps_per_run": per_run}


def short_history(flags: dict, timeout: float, work: Path) -> list[dict]:
    """Real nights 1..SHORT_NIGHTS on a fresh warehouse (in ``work/short``, no site): the
    same churn as night 366 on a few nights of history, to tell what grows with the
    history from what a fresh warehouse does in its first nights."""
    prefect_home = PREFECT_HOME
    use_work(work / "short")
    globals()["PREFECT_HOME"] = prefect_home  # one Prefect home: a new one pays its set-up
    for q in [STAGING, BUCKET, *map(Path, glob.glob(glob.escape(str(WAREHOUSE)) + "*"))]:
        shutil.rmtree(q, ignore_errors=True) if q.is_dir() else q.unlink(missing_ok=True)
    BUCKET.mkdir(parents=True, exist_ok=True)
    try:
        return [run_night(k, flags, timeout, report=k > 1, site=False) for k in range(1, SHORT_NIGHTS + 1)]
    finally:
        use_work(work)


def targets(n2: dict, n366: dict, n367: dict, short: list[dict], accepted: dict) -> list[dict]:
    def work(r):  # the flow's own seconds: Prefect's start-up is outside it
        return r["summary"].get("seconds", {}).get("total")

    def publish(r):
        v = r["summary"].get("publish_bytes")
        return (v, "publish_bytes") if v is not None else (r["write_bytes"], "bytes written by the tree (no publish_bytes)")

    out = []
    for r in (n2, n366):
        k = r["night"]
        ok_run = r["returncode"] == 0 and not r["timed_out"]
        out.append({"target": f"night {k}: peak RSS of the tree <= 2 GiB", "measured": f"{r['peak_rss_tree_bytes'] / MiB:.0f} MiB",
                    "pass": ok_run and r["peak_rss_tree_bytes"] <= TARGET_RSS})
        w = work(r)
        out.append({"target": f"night {k} (10 % changed): <= 45 s of work beyond Prefect start-up (flow total)",
                    "measured": "n/a" if w is None else f"{w:.1f} s (wall {r['wall_s']:.1f} s)",
                    "pass": ok_run and w is not None and w <= TARGET_WORK_S})
        if k > 2:  # night 2's is a fresh warehouse's first night of reuse: see the short history's lines
            out.append({"target": f"night {k}: warehouse growth <= 5 MB", "measured": f"{r['warehouse_growth_bytes'] / MiB:+.1f} MiB",
                        "pass": ok_run and r["warehouse_growth_bytes"] <= TARGET_GROWTH})
        site_s = r["summary"].get("seconds", {}).get("site")
        out.append({"target": f"night {k}: site <= 20 s and <= 100 MB",
                    "measured": f"{'n/a' if site_s is None else f'{site_s:.1f} s'}, {r['site_bytes'] / 1e6:.1f} MB, {r['site_files']} files",
                    "pass": ok_run and site_s is not None and site_s <= TARGET_SITE_S and r["site_bytes"] <= TARGET_SITE_BYTES})
    def stage_peaks(r):  # the flow process's own peak after each stage (the tree adds Prefect's server, parse workers)
        peaks = r["summary"].get("peak_mib", {})
        return ", ".join(f"{k.replace('load.', '')} {peaks[k]:.0f}" for k in ("load.compact", "load.load", "load.aggregate_read",
                                                                               "load.aggregate_incidents", "load.publish")
                         if k in peaks)

    def flow_peak(r):  # MiB: the flow process's own (the tree adds the site build, which short nights skip)
        return max(r["summary"].get("peak_mib", {}).values(), default=float("nan"))
    # The control is the same churn on days of history: a fresh warehouse's nights 2-5, whose
    # peaks differ from night to night by what DuckDB's checkpoints merge, not by the history.
    fresh = [r for r in short if r["night"] > 1]
    fresh_mean = sum(flow_peak(r) for r in fresh) / len(fresh)
    trees = ", ".join(f"{r['peak_rss_tree_bytes'] / MiB:.0f}" for r in short)
    out.append({"target": f"the night's peak does not grow with the nights in the warehouse: night 366 (a year) <= 1.25 x the "
                          f"mean of nights {fresh[0]['night']}-{fresh[-1]['night']} of a fresh warehouse (the flow process's peak)",
                "measured": f"{flow_peak(n366):.0f} MiB vs {fresh_mean:.0f} MiB ({flow_peak(n366) / fresh_mean:.2f} x; per short "
                            f"night: {', '.join(f'{flow_peak(r):.0f}' for r in short)} MiB; night 2 {flow_peak(n2):.0f} MiB; "
                            f"process tree: night 2 {n2['peak_rss_tree_bytes'] / MiB:.0f}, night 366 {n366['peak_rss_tree_bytes'] / MiB:.0f}, "
                            f"short nights {trees} MiB. Flow process "
                            f"after compact, load, aggregate read, incidents, publish: night 2 {stage_peaks(n2)}; night 366 "
                            f"{stage_peaks(n366)}; unchanged night 367 {stage_peaks(n367)})",
                "pass": flow_peak(n366) <= 1.25 * fresh_mean})
    secs = n367["summary"].get("seconds", {})
    ingest = None if secs.get("total") is None else secs["total"] - secs.get("site", 0.0)
    out.append({"target": "night 367 (unchanged: night 366's bytes under a new run): <= 5 s of work beyond Prefect start-up "
                          "(flow total without the site build, which has its own target)",
                "measured": "n/a" if ingest is None else f"{ingest:.1f} s (flow total {secs['total']:.1f} s, site {secs.get('site', 0):.1f} s)",
                "pass": n367["returncode"] == 0 and not n367["timed_out"] and ingest is not None and ingest <= TARGET_UNCHANGED_S})
    site_s = secs.get("site")
    out.append({"target": "night 367: site <= 20 s and <= 100 MB",
                "measured": f"{'n/a' if site_s is None else f'{site_s:.1f} s'}, {n367['site_bytes'] / 1e6:.1f} MB",
                "pass": site_s is not None and site_s <= TARGET_SITE_S and n367["site_bytes"] <= TARGET_SITE_BYTES})
    out.append({"target": "night 367 (unchanged): warehouse growth <= 5 MB (its run's rows only)",
                "measured": f"{n367['warehouse_growth_bytes'] / MiB:+.1f} MiB",
                "pass": n367["warehouse_growth_bytes"] <= TARGET_GROWTH})
    (p2, what), (p366, _) = publish(n2), publish(n366)
    settled = [r for r in short if r["night"] > SHORT_SETTLED_AFTER]
    p_short = sum(publish(r)[0] for r in settled) / len(settled)
    out.append({"target": f"publish bytes independent of history: night 366 (a year) <= 1.25 x the mean of nights "
                          f"{settled[0]['night']}-{settled[-1]['night']} of a fresh warehouse (same churn, days of history)",
                "measured": f"{p366 / MiB:.1f} MiB vs {p_short / MiB:.1f} MiB ({p366 / p_short:.2f} x; per short night: "
                            f"{', '.join(f'{publish(r)[0] / MiB:.0f}' for r in short)} MiB; night 2 {p2 / MiB:.1f} MiB; {what})",
                "pass": p366 <= 1.25 * p_short})
    # Records of the last keep_records_runs runs (7) are kept: on a fresh warehouse each night's new
    # contents keep theirs until the window is full, so file and records together grow by about a
    # tenth of a night's records a night (by design, issue 29); once the window is full a night adds
    # what it drops (nights 366 and 367 above). What a fresh night adds for ever is in the file.
    fresh = [r for r in short if r["night"] > 1]
    out.append({"target": f"warehouse file growth <= 5 MB per 10 %-changed night of a fresh warehouse "
                          f"(nights {fresh[0]['night']}-{fresh[-1]['night']}; records: the window filling, reported beside)",
                "measured": ", ".join(f"{r['file_growth_bytes'] / MiB:+.1f}" for r in fresh) + " MiB (records store: "
                            + ", ".join(f"{r['records_growth_bytes'] / MiB:+.1f}" for r in fresh) + " MiB; file and records: "
                            + ", ".join(f"{r['warehouse_bytes'] / MiB:.0f}" for r in short) + " MiB)",
                "pass": all(r["file_growth_bytes"] <= TARGET_GROWTH for r in fresh)})
    out.append({"target": "an accept at a year (a writer like the night) holds the memory setting: peak RSS <= 2 GiB",
                "measured": f"{accepted['peak_rss_tree_bytes'] / MiB:.0f} MiB, {accepted['wall_s']:.1f} s"
                            + (" (refused: nothing open to close, no writer taken)" if accepted.get("refused_closes_nothing") else ""),
                "pass": None if accepted.get("refused_closes_nothing")
                else accepted["returncode"] == 0 and accepted["peak_rss_tree_bytes"] <= TARGET_RSS})
    s2, s366 = n2["staging_bytes"], n366["staging_bytes"]
    out.append({"target": "staging bounded (night 366 <= 1.25 x night 2 + 1 MiB)",
                "measured": f"{s2 / MiB:.1f} -> {s366 / MiB:.1f} MiB", "pass": s366 <= 1.25 * s2 + MiB})
    return out


def speed_targets(by: dict) -> list[dict]:
    """Issue 30's targets: each night's work (the flow's total beyond Prefect's start-up, site
    included) against what changed, and the site at a year (night 366's; the year's pages of
    incidents and series are measured by benchmarks/bench_site_year.py)."""
    def line(target, r, limit):
        total = r["summary"].get("seconds", {}).get("total")
        ok = r["returncode"] == 0 and not r["timed_out"] and total is not None
        return {"target": target, "measured": "n/a" if total is None else
                f"{total:.1f} s (site {r['summary']['seconds'].get('site', 0):.1f} s; wall {r['wall_s']:.1f} s, "
                f"load {r['loadavg_1min_before']:.1f})", "pass": ok and total <= limit}

    out = [line("night 1 (the first night of a new warehouse): <= 3 minutes of work", by[1], TARGET_FIRST_NIGHT_S)]
    out += [line(f"night {k} (10 % changed): <= 45 s of work, site included", by[k], TARGET_CHANGED_NIGHT_S)
            for k in (2, 365, 366)]
    out.append(line("night 367 (unchanged): <= 10 s of work, site included", by[367], TARGET_UNCHANGED_NIGHT_S))
    r = by[366]
    site_s = r["summary"].get("seconds", {}).get("site")
    out.append({"target": "the site at a year (night 366): <= 150 MB, <= 3,000 files, built in <= 30 s",
                "measured": f"{r['site_bytes'] / 1e6:.1f} MB, {r['site_files']} files, "
                            f"{'n/a' if site_s is None else f'{site_s:.1f} s'}",
                "pass": site_s is not None and r["site_bytes"] <= TARGET_YEAR_SITE_BYTES
                and r["site_files"] <= TARGET_YEAR_SITE_FILES and site_s <= TARGET_YEAR_SITE_S})
    out += [{"target": f"night {k}: peak RSS of the tree <= 2 GiB", "measured": f"{by[k]['peak_rss_tree_bytes'] / MiB:.0f} MiB",
             "pass": by[k]["peak_rss_tree_bytes"] <= TARGET_RSS} for k in (1, 365, 367)]
    return out


def print_table(result: dict) -> None:
    n = {r["night"]: r for r in result["nights"]}
    rep = [n[2], n[366], n[367]]
    stages = sorted({s for r in rep for s in r["summary"].get("seconds", {})})

    def row(label, f):
        return (label, *(f(r) for r in rep))

    rows = [
        row("exit", lambda r: "TIMEOUT" if r["timed_out"] else str(r["returncode"])),
        row("wall (process start to exit)", lambda r: f"{r['wall_s']:.1f} s"),
        row("peak RSS, whole tree", lambda r: f"{r['peak_rss_tree_bytes'] / MiB:.0f} MiB ({r['max_processes']} proc.)"),
        row("CPU (user+sys, reaped tree)", lambda r: f"{r['cpu_s']:.1f} s"),
        row("machine load (1 min) before, after", lambda r: f"{r['loadavg_1min_before']:.1f}, {r['loadavg_1min_after']:.1f}"),
        *[row(f"  {s} seconds", lambda r, s=s: f"{r['summary'].get('seconds', {}).get(s, float('nan')):.2f}") for s in stages],
        row("publish bytes (summary)", lambda r: f"{r['summary']['publish_bytes'] / MiB:.1f} MiB"
            if r["summary"].get("publish_bytes") is not None else "n/a"),
        row("written: wchar, tree", lambda r: f"{r['wchar_bytes'] / MiB:.0f} MiB"),
        row("written: write_bytes, tree", lambda r: f"{r['write_bytes'] / MiB:.0f} MiB"),
        row("written: rusage oublock", lambda r: f"{r['rusage_oublock_bytes'] / MiB:.0f} MiB"),
        row("warehouse (file and records)", lambda r: f"{r['warehouse_bytes'] / MiB:.1f} MiB"),
        row("warehouse growth over the night", lambda r: f"{r['warehouse_growth_bytes'] / MiB:+.1f} MiB"),
        row("  of which the file", lambda r: f"{r['file_growth_bytes'] / MiB:+.1f} MiB"),
        row("staging dir", lambda r: f"{r['staging_bytes'] / MiB:.1f} MiB ({r['staging_files']} files)"),
        *[row(f"beside: {name}", lambda r, name=name: f"{r['beside_warehouse'].get(name, {}).get('bytes', 0) / MiB:.1f} MiB")
          for name in sorted({x for r in rep for x in r["beside_warehouse"]}) if name != WAREHOUSE.name],
        row("disk used: warehouse*, staging", lambda r: f"{r['warehouse_disk_bytes'] / MiB:.1f} MiB (each inode once)"),
        row("site dir", lambda r: f"{r['site_bytes'] / 1e6:.1f} MB ({r['site_files']} files)"),
        row("summary from", lambda r: r["summary_source"]),
    ]
    w = max(len(r[0]) for r in rows)
    print(f"\n{'':<{w}}  {'night 2':>24}  {'night 366':>24}  {'night 367 (unchanged)':>24}")
    for label, a, b, c in rows:
        print(f"{label:<{w}}  {a:>24}  {b:>24}  {c:>24}")
    for title, key in (("targets (issue 13: memory, growth, history)", "targets"), ("targets (issue 30: speed)", "speed_targets")):
        print(f"\n{title}:")
        for t in result.get(key, []):
            print(f"  {'N/A ' if t['pass'] is None else 'PASS' if t['pass'] else 'FAIL'}  {t['target']}: {t['measured']}")
    for note in result["notes"]:
        print(f"note: {note}")


def code_version() -> dict:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {"head": git("rev-parse", "--short", "HEAD"), "dirty_flows_transforms": bool(git("status", "--porcelain", "flows", "transforms"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--night-timeout", type=float, default=420.0, help="kill a night's run after this many seconds")
    ap.add_argument("--records-runs", type=int, default=None,
                    help="synthesise the records of the last N synthetic nights' contents (0: every night's); "
                         "default: the code's keep_records_runs retention")
    ap.add_argument("--work", type=Path, default=WORK, help="directory of the bucket, warehouse, site and Prefect home")
    ap.add_argument("--result", "--json", dest="result", type=Path, default=RESULT, metavar="FILE",
                    help="where the figures go (JSON)")
    args = ap.parse_args()
    use_work(args.work)
    held = lock_work()
    records_runs = records_runs_default() if args.records_runs is None else args.records_runs
    t_start = time.perf_counter()
    for p in [SITE, STAGING, BUCKET, *map(Path, glob.glob(glob.escape(str(WAREHOUSE)) + "*"))]:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    BUCKET.mkdir(parents=True, exist_ok=True)
    PREFECT_HOME.mkdir(parents=True, exist_ok=True)
    flags = run_flags()
    notes = []
    for flag, present in flags.items():
        if not present:
            notes.append(f"TODO: `dumpscope run` has no {flag} yet: "
                         + ("stage seconds come from the printed summary and publish bytes fall back to bytes written by the tree"
                            if flag == "--summary-json" else "the night ran without a memory limit"))
    code = code_version()
    print(f"code {code['head']}{' (flows/transforms modified, uncommitted)' if code['dirty_flows_transforms'] else ''}; "
          f"workload: {len(wl.files())} files in {wl.N_JOBS} jobs a night, {wl.n_changed()} changed from night to night", flush=True)

    nights = [run_night(1, flags, args.night_timeout, report=False)]
    nights.append(run_night(2, flags, args.night_timeout, report=True))
    kept = warehouse_runs()
    older_kept = kept["dumps_per_run"].get(wl.run_id(1), 0) == len(wl.files())
    print(f"night 1's run left the bucket before night 2: the warehouse holds {kept['runs']} runs, "
          f"{kept['dumps_per_run'].get(wl.run_id(1), 0)} dumps of night 1 ({'kept' if older_kept else 'NOT KEPT'})", flush=True)
    if not older_kept:
        notes.append("runs removed from the bucket did not stay in the warehouse")

    synth = synthesise_in_child(records_runs)
    print(f"year synthesised in {synth['seconds']:.1f} s (prepare {synth['prepare_s']:.1f}, SQL {synth['sql_s']:.1f}, "
          f"publish {synth['publish_s']:.1f}): {synth['runs_added']} runs, {synth['versions']} file versions, records of "
          f"{synth['versions_with_records']} ({'every night' if not records_runs else 'the last %d night(s): the code keeps records of the last %d run(s)' % (records_runs, records_runs)}); "
          f"synthetic runs count as aggregated: {synth['synthetic_runs_count_as_aggregated']}", flush=True)
    print("rows per table after synthesis (before -> after):")
    for t in sorted(synth["rows_after"]):
        print(f"  {t:<24} {synth['rows_before'][t]:>12,} -> {synth['rows_after'][t]:>12,}")
    print(f"warehouse after synthesis: {WAREHOUSE.stat().st_size / MiB:.1f} MiB", flush=True)

    nights.append(run_night(365, flags, args.night_timeout, report=False))
    nights.append(run_night(366, flags, args.night_timeout, report=True))
    nights.append(run_night(367, flags, args.night_timeout, report=True, contents_of=366))
    accepted = accept_at_a_year(args.night_timeout)
    final = warehouse_runs() if WAREHOUSE.exists() else {"runs": 0, "dumps_per_run": {}}
    print("a fresh warehouse, for what its first nights do:", flush=True)
    short = short_history(flags, args.night_timeout, args.work)
    all_kept = final["runs"] == 367 and final["dumps_per_run"].get(wl.run_id(1), 0) == len(wl.files())
    print(f"after night 367 the warehouse holds {final['runs']} runs and {final['dumps_per_run'].get(wl.run_id(1), 0)} "
          f"dumps of night 1 (the bucket held only the night's own run each night)", flush=True)
    if not all_kept:
        notes.append(f"after night 367 the warehouse holds {final['runs']} runs (367 expected) and "
                     f"{final['dumps_per_run'].get(wl.run_id(1), 0)} dumps of night 1")
    by = {r["night"]: r for r in nights}
    for r in nights + short:
        if r["warehouse_missing_after"]:
            notes.append(f"the warehouse file was missing after night {r['night']}")
        if r["returncode"] != 0 or r["timed_out"]:
            notes.append(f"night {r['night']} did not finish well ({'timeout' if r['timed_out'] else 'exit %d' % r['returncode']}): "
                         f"see {(WORK / ('night%d.log' % r['night'])).relative_to(ROOT) if WORK.is_relative_to(ROOT) else WORK}")
    result = {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "code": {"before": code, "after": code_version()},
              "machine": {"cpus": os.cpu_count(), "mem_gib": psutil.virtual_memory().total / GiB},
              "flags": flags, "workload": {"files": len(wl.files()), "jobs": wl.N_JOBS, "changed_per_night": wl.n_changed()},
              "older_runs_kept_in_warehouse": older_kept and all_kept, "warehouse_runs_after_night2": kept["runs"],
              "warehouse_runs_after_night366": final["runs"],
              "synthesis": synth, "nights": nights, "short_history": short, "accept": accepted, "targets": targets(by[2], by[366], by[367], short, accepted), "speed_targets": speed_targets(by),
              "notes": notes,
              "bench_seconds": time.perf_counter() - t_start}
    result_path = harness.write_json(args.result, result)
    print_table(result)
    print(f"\nbench took {result['bench_seconds']:.0f} s; written {result_path}")
    held.close()


if __name__ == "__main__":
    main()
