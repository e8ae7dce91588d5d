"""The nightly ingest on a 1,000-dump bucket: first ingest, no-op re-run, Prefect start-up.

Issue 3, "Speed (a benchmark, not a test)". The bucket is built once under
``benchmarks/out/bucket_1000/`` (kept; rebuilt only when missing) by replicating the
nights of ``data/sample_bucket`` into ISO-dated runs and varying every file so its
sha256 differs while it stays a real, parseable dump: the night's date (in paths and
in the text: dump directories, timestamps, pids are left alone) is moved to the new
run's date, and each text gets ``run index + 1`` trailing blank lines. ``run.json``
is rewritten with the new date and a new commit. Exactly 1,000 dump objects
(``run.json`` excluded); the last run is a night cut short to make the count exact.

Each measurement is a fresh process ``dumpscope run --bucket B --warehouse W
--workers 2`` with its own fresh ``PREFECT_HOME`` (so a new Prefect database each
time, as on a fresh machine) and ``PREFECT_SERVER_ANALYTICS_ENABLED=false``:

1. first ingest into a new warehouse: wall time, dumps/s, the flow's own stage
   seconds (parsed from its printed summary), peak RSS;
2. the no-op re-run (nothing new): wall time and the flow's "total seconds";
3. Prefect's ephemeral start-up alone: a trivial empty flow, measured the same way.

Peak RSS is reported two ways (``benchmarks/harness.py``): the largest sum of RSS over
the whole process tree (psutil, polled every 50 ms), and the largest single process of
the tree as the kernel saw it (``wait4`` rusage: the child and every descendant it reaped).

    .venv/bin/python benchmarks/bench_ingest.py [--repeat N] [--first-repeat N] [--rebuild] [--profile] [--json FILE]

Extra figures: the empty flow and the no-op re-run with a warm PREFECT_HOME (one whose
Prefect database already exists, as on a machine that runs the nightly every night);
``--profile`` cProfiles the no-op's discover and load without Prefect.

Writes the figures to ``benchmarks/out/bench_ingest.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

SAMPLES = ROOT / "data" / "sample_bucket"
OUT = ROOT / "benchmarks" / "out"
BUCKET = OUT / "bucket_1000"
BUILT = OUT / "bucket_1000.built"  # outside the bucket: anything inside would be listed as a dump
WAREHOUSE = OUT / "bench_warehouse.duckdb"
RESULT = OUT / "bench_ingest.json"
DUMPSCOPE = ROOT / ".venv" / "bin" / "dumpscope"
PYTHON = ROOT / ".venv" / "bin" / "python"
N_DUMPS = 1000
FIRST_DAY = date(2026, 9, 1)
WORKERS = 2
# Prefect's default (20 s) is sometimes too short for a fresh PREFECT_HOME on this shared
# 2-core machine ("Timed out while attempting to connect to ephemeral Prefect API server");
# raised so that a slow start-up is measured rather than aborted. Timeouts are still counted.
STARTUP_TIMEOUT = 90

EMPTY_FLOW = """
from prefect import flow

@flow(name="bench-empty")
def empty():
    return 0

empty()
"""


# ---------------------------------------------------------------- the bucket


def build_bucket(force: bool = False) -> dict:
    if BUCKET.exists() and BUILT.exists() and not force:
        return _bucket_stats()
    nights = sorted(p for p in SAMPLES.iterdir() if p.is_dir())
    tmp = OUT / "bucket_1000.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    written, i = 0, 0
    while written < N_DUMPS:
        src = nights[i % len(nights)]
        day = FIRST_DAY + timedelta(days=i)
        written += _copy_night(src, tmp / day.isoformat(), i, day, N_DUMPS - written)
        i += 1
    shutil.rmtree(BUCKET, ignore_errors=True)
    BUILT.unlink(missing_ok=True)
    tmp.rename(BUCKET)
    BUILT.write_text(json.dumps({"dumps": written, "runs": i}) + "\n")
    return _bucket_stats()


def _copy_night(src: Path, dst: Path, index: int, day: date, budget: int) -> int:
    old_dash = src.name  # 2026-11-18
    old_us = old_dash.replace("-", "_")  # 2026_11_18 (Inductor's debug directory names)
    new_dash, new_us = day.isoformat(), day.isoformat().replace("-", "_")

    def redate(s: str) -> str:
        return s.replace(old_dash, new_dash).replace(old_us, new_us)

    n = 0
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = f.relative_to(src).as_posix()
        target = dst / redate(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel == "run.json":
            meta = json.loads(f.read_text())
            meta["started_at"] = redate(meta.get("started_at", f"{new_dash}T02:00:00+00:00"))
            meta["commit"] = f"{0x9b03c5e + 7919 * (index + 1):07x}"[-7:]
            target.write_text(json.dumps(meta, indent=1) + "\n")
            continue
        if n == budget:
            continue
        raw = f.read_bytes()
        gz = f.suffix == ".gz"
        text = (gzip.decompress(raw) if gz else raw).decode("utf-8")
        text = redate(text) + "\n" * (index + 1)  # harmless: trailing blank lines; unique per run
        data = text.encode("utf-8")
        target.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        n += 1
    return n


def _bucket_stats() -> dict:
    files = [p for p in BUCKET.rglob("*") if p.is_file()]
    dumps = [p for p in files if not (p.name == "run.json" and p.parent.parent == BUCKET)]
    raw = sum(p.stat().st_size for p in dumps)
    unpacked = sum(len(gzip.decompress(p.read_bytes())) if p.suffix == ".gz" else p.stat().st_size for p in dumps)
    runs = sorted(p.name for p in BUCKET.iterdir() if p.is_dir())
    return {"path": str(BUCKET.relative_to(ROOT)), "dumps": len(dumps), "runs": len(runs),
            "first_run": runs[0], "last_run": runs[-1],
            "mb_on_disk": raw / 1e6, "mb_uncompressed": unpacked / 1e6}


# ---------------------------------------------------------------- measuring


def measure(argv: list[str], label: str, home: str | None = None, keep_output: bool = False) -> dict:
    """Run argv in a fresh process with a fresh PREFECT_HOME (or ``home``); wall time, output, peak RSS
    (``benchmarks/harness.py``; ``keep_output``: and its whole stdout + stderr, as ``output``)."""
    with tempfile.TemporaryDirectory(prefix="bench-prefect-") as tmp:
        home = home or tmp
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(PREFECT_HOME=home, PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONUNBUFFERED="1",
                   PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=str(STARTUP_TIMEOUT))
        kinds: dict[int, bool] = {}
        peak_workers = 0

        def workers(tree: list[psutil.Process]) -> None:
            nonlocal peak_workers
            for p in tree:  # parse workers: multiprocessing spawn children (not the resource tracker)
                if p.pid not in kinds:
                    try:
                        kinds[p.pid] = "spawn_main" in " ".join(p.cmdline())
                    except psutil.Error:
                        kinds[p.pid] = False
            peak_workers = max(peak_workers, sum(kinds.get(p.pid, False) for p in tree))

        m = harness.run(argv, cwd=ROOT, env=env, capture=True, on_poll=workers)
    stdout, stderr = m["stdout"], m["stderr"]
    if m["returncode"] != 0:
        sys.stderr.write(f"{label}: exit code {m['returncode']}\n" + stdout[-3000:] + stderr[-3000:])
    return {"label": label, "returncode": m["returncode"],
            "startup_timed_out": "Timed out while attempting to connect to ephemeral" in stdout + stderr,
            "wall_s": m["wall_s"], "peak_rss_tree_mib": m["peak_rss_tree_mib"],
            "peak_rss_single_mib": m["peak_rss_mib"], "max_processes": m["max_processes"],
            "max_parse_workers": peak_workers, "parse_workers_started": sum(kinds.values()),
            "cpu_user_s": m["cpu_user_s"], "cpu_sys_s": m["cpu_sys_s"],
            "summary": _summary(stdout + "\n" + stderr)} | ({"output": stdout + "\n" + stderr} if keep_output else {})


_ROW = re.compile(r"^\|\s*([a-z_ ]+?)\s*\|\s*([0-9.]+)\s*\|\s*$", re.M)


def _summary(text: str) -> dict:
    """The flow's summary table (the last one printed): counts and seconds per stage."""
    rows: dict[str, float] = {}
    for key, value in _ROW.findall(text):
        rows[key] = float(value)
    return rows


def run_flow(label: str, home: str | None = None) -> dict:
    return measure([str(DUMPSCOPE), "run", "--bucket", str(BUCKET), "--warehouse", str(WAREHOUSE),
                    "--workers", str(WORKERS)], label, home)


def warehouse_counts() -> dict:
    import duckdb

    con = duckdb.connect(str(WAREHOUSE), read_only=True)
    try:
        by_status = con.execute("SELECT kind, status, count(*) FROM dumps GROUP BY ALL ORDER BY ALL").fetchall()
        distinct = con.execute("SELECT count(*), count(DISTINCT dump_id), count(DISTINCT run_id) FROM dumps").fetchone()
        tables = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
                  for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()}
    finally:
        con.close()
    return {"dumps": distinct[0], "distinct_dump_ids": distinct[1], "runs": distinct[2],
            "by_kind_status": [list(r) for r in by_status], "table_rows": tables}


def fresh_warehouse() -> None:
    for p in OUT.glob(WAREHOUSE.stem + ".*"):  # the file, its staging, lock and temporary files
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


# ---------------------------------------------------------------- profiling


_PROFILE_CHILD = r"""
import cProfile, pstats, sys, time
from pathlib import Path
from flows.nightly import discover
bucket, warehouse = sys.argv[1], Path(sys.argv[2])
t0 = time.perf_counter()
discover.fn(bucket, warehouse, 0.0, None, None, None, None)
print(f"discover (no Prefect, warm-up) {time.perf_counter() - t0:.3f} s")
pr = cProfile.Profile()
t0 = time.perf_counter()
pr.enable()
new, deferred, seen, runs = discover.fn(bucket, warehouse, 0.0, None, None, None, None)
pr.disable()
print(f"discover (no Prefect) {time.perf_counter() - t0:.3f} s: seen {seen}, new {len(new)}, runs {len(runs)}")
pstats.Stats(pr).sort_stats("cumulative").print_stats(18)
"""


def profile_noop() -> str:
    res = subprocess.run([str(PYTHON), "-c", _PROFILE_CHILD, str(BUCKET), str(WAREHOUSE)], cwd=ROOT,
                         capture_output=True, text=True)
    return res.stdout if res.returncode == 0 else f"profile failed:\n{res.stderr[-2000:]}"


def code_version() -> dict:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {"head": git("rev-parse", "--short", "HEAD"),
            "flows_transforms_dirty": bool(git("status", "--porcelain", "flows", "transforms"))}


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="no-op re-runs and empty flows to measure (median, min)")
    ap.add_argument("--first-repeat", type=int, default=1, help="first ingests to measure (each into a new warehouse)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the bucket even if it exists")
    ap.add_argument("--profile", action="store_true", help="also cProfile discover on the no-op (no Prefect)")
    harness.add_json_option(ap, RESULT)
    args = ap.parse_args()

    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    bucket = build_bucket(args.rebuild)
    print(f"bucket {bucket['path']}: {bucket['dumps']} dumps in {bucket['runs']} runs "
          f"({bucket['first_run']} … {bucket['last_run']}), {bucket['mb_on_disk']:.1f} MB on disk, "
          f"{bucket['mb_uncompressed']:.1f} MB uncompressed ({time.perf_counter() - t0:.1f} s)", flush=True)
    if bucket["dumps"] != N_DUMPS:
        raise SystemExit(f"expected {N_DUMPS} dumps, found {bucket['dumps']}: rerun with --rebuild")

    code_before = code_version()
    firsts = []
    for k in range(args.first_repeat):
        fresh_warehouse()
        firsts.append(run_flow(f"first ingest #{k + 1}"))
        _progress(firsts[-1])
    counts = warehouse_counts()
    noops = []
    for k in range(args.repeat):
        noops.append(run_flow(f"no-op re-run #{k + 1}"))
        _progress(noops[-1])
    empties = []
    for k in range(args.repeat):
        empties.append(measure([str(PYTHON), "-c", EMPTY_FLOW], f"empty flow #{k + 1}"))
        _progress(empties[-1])

    # Extra: the same with a PREFECT_HOME that already holds Prefect's database (a machine
    # that runs the nightly every night), primed by one empty flow.
    warm_empties, warm_noops = [], []
    with tempfile.TemporaryDirectory(prefix="bench-prefect-warm-") as warm:
        _progress(measure([str(PYTHON), "-c", EMPTY_FLOW], "warm PREFECT_HOME: priming empty flow", warm))
        for k in range(args.repeat):
            warm_empties.append(measure([str(PYTHON), "-c", EMPTY_FLOW], f"warm PREFECT_HOME: empty flow #{k + 1}", warm))
            _progress(warm_empties[-1])
        for k in range(args.repeat):
            warm_noops.append(run_flow(f"warm PREFECT_HOME: no-op re-run #{k + 1}", warm))
            _progress(warm_noops[-1])
    warm_empties = [r for r in warm_empties if r["returncode"] == 0] or [{"wall_s": float("nan")}]
    warm_noops = [r for r in warm_noops if r["returncode"] == 0] or [{"wall_s": float("nan"), "summary": {}}]

    all_firsts, all_noops, all_empties = firsts, noops, empties
    firsts = [r for r in firsts if r["returncode"] == 0]
    noops = [r for r in noops if r["returncode"] == 0]
    empties = [r for r in empties if r["returncode"] == 0]
    if not (firsts and noops and empties):
        raise SystemExit("a measurement failed every time (see above)")
    first = min(firsts, key=lambda r: r["wall_s"])
    fs = first["summary"]
    if fs.get("new") != N_DUMPS:
        raise SystemExit(f"first ingest took {fs.get('new')} new dumps, expected {N_DUMPS}")
    for r in noops:
        if r["summary"].get("new") != 0:
            raise SystemExit(f"{r['label']}: {r['summary'].get('new')} new dumps, expected 0")
    noop_wall = _med([r["wall_s"] for r in noops])
    noop_work = _med([r["summary"]["total seconds"] for r in noops])
    empty_wall = _med([r["wall_s"] for r in empties])
    result = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "code": {"before": code_before, "after": code_version()},
        "machine": {"cpus": os.cpu_count(), "mem_gib": psutil.virtual_memory().total / 2**30},
        "bucket": bucket,
        "workers": WORKERS,
        "first_ingest": {
            "wall_s": first["wall_s"], "dumps_per_s": N_DUMPS / first["wall_s"],
            "flow_dumps_per_s": N_DUMPS / fs["total seconds"],
            "discover_s": fs.get("discover seconds"), "parse_s": fs.get("parse seconds"),
            "load_s": fs.get("load seconds"), "total_s": fs.get("total seconds"),
            "outside_flow_s": first["wall_s"] - fs["total seconds"],
            "peak_rss_tree_mib": first["peak_rss_tree_mib"], "peak_rss_single_mib": first["peak_rss_single_mib"],
            "max_processes": first["max_processes"],
            "max_parse_workers_each_run": [r["max_parse_workers"] for r in firsts],
            "parse_s_each_run": [r["summary"].get("parse seconds") for r in firsts],
            "summary": fs, "all_runs": firsts,
        },
        "warehouse_after_first_ingest": counts,
        "noop_rerun": {
            "wall_s_median": noop_wall, "wall_s_min": min(r["wall_s"] for r in noops),
            "flow_total_s_median": noop_work, "flow_total_s_min": min(r["summary"]["total seconds"] for r in noops),
            "discover_s_median": _med([r["summary"]["discover seconds"] for r in noops]),
            "load_s_median": _med([r["summary"]["load seconds"] for r in noops]),
            "outside_flow_s_median": noop_wall - noop_work,
            "peak_rss_tree_mib": max(r["peak_rss_tree_mib"] for r in noops),
            "peak_rss_single_mib": max(r["peak_rss_single_mib"] for r in noops),
            "failed_runs": [r for r in all_noops if r["returncode"] != 0],
            "all_runs": noops,
        },
        "empty_flow": {
            "wall_s_median": empty_wall, "wall_s_min": min(r["wall_s"] for r in empties),
            "peak_rss_tree_mib": max(r["peak_rss_tree_mib"] for r in empties),
            "peak_rss_single_mib": max(r["peak_rss_single_mib"] for r in empties),
            "failed_runs": [r for r in all_empties if r["returncode"] != 0],
            "all_runs": empties,
        },
        "warm_prefect_home": {
            "empty_flow_wall_s_median": _med([r["wall_s"] for r in warm_empties]),
            "noop_wall_s_median": _med([r["wall_s"] for r in warm_noops]),
            "noop_flow_total_s_median": _med([r["summary"].get("total seconds", float("nan")) for r in warm_noops]),
            "empty_runs": warm_empties, "noop_runs": warm_noops,
        },
        "prefect_startup_timeout_s": STARTUP_TIMEOUT,
        "startup_timeouts": sum(r["startup_timed_out"] for r in all_firsts + all_noops + all_empties),
        "noop_split": {
            "flow_work_s": noop_work, "prefect_startup_s": empty_wall,
            "rest_s": noop_wall - noop_work - empty_wall,
            "target_work_s": 3.0, "meets_target": noop_work < 3.0,
        },
    }
    if result["code"]["before"] != result["code"]["after"] or code_before["flows_transforms_dirty"]:
        print(f"WARNING: flow code changed or uncommitted during the benchmark: {result['code']}")
    harness.write_json(args.json, result)
    if args.profile:
        result["noop_discover_profile"] = profile_noop()
    harness.write_json(args.json, result)
    _table(result)
    if args.profile:
        print("\n" + result["noop_discover_profile"])
    print(f"\nwritten {args.json}")


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def _progress(r: dict) -> None:
    s = r["summary"]
    extra = f", flow total {s['total seconds']:.2f} s, new {s.get('new'):.0f}" if "total seconds" in s else ""
    if r["returncode"]:
        extra += f", FAILED (exit {r['returncode']}{', Prefect start-up timed out' if r['startup_timed_out'] else ''})"
    if r["max_parse_workers"]:
        extra += f", parse s {s.get('parse seconds')}, parse workers at once {r['max_parse_workers']} (asked {WORKERS})"
    print(f"  {r['label']}: {r['wall_s']:.2f} s wall{extra}, peak RSS tree {r['peak_rss_tree_mib']:.0f} MiB",
          flush=True)


def _table(r: dict) -> None:
    f, n, e, s = r["first_ingest"], r["noop_rerun"], r["empty_flow"], r["noop_split"]
    rows = [
        ("first ingest: wall (process start to exit)", f"{f['wall_s']:.2f} s"),
        ("first ingest: dumps/s (1000 / wall)", f"{f['dumps_per_s']:.1f}"),
        ("first ingest: dumps/s (1000 / flow total)", f"{f['flow_dumps_per_s']:.1f}"),
        ("first ingest: discover / parse / load", f"{f['discover_s']:.2f} / {f['parse_s']:.2f} / {f['load_s']:.2f} s"),
        ("first ingest: flow total", f"{f['total_s']:.2f} s"),
        ("first ingest: outside the flow (Python, Prefect)", f"{f['outside_flow_s']:.2f} s"),
        ("first ingest: peak RSS, process tree (sum)", f"{f['peak_rss_tree_mib']:.0f} MiB ({f['max_processes']} processes)"),
        ("first ingest: peak RSS, biggest process", f"{f['peak_rss_single_mib']:.0f} MiB"),
        ("first ingest: parse workers at once, each run", f"{f['max_parse_workers_each_run']} (--workers {r['workers']})"),
        ("first ingest: parse seconds, each run", f"{f['parse_s_each_run']}"),
        ("no-op re-run: wall (median / min)", f"{n['wall_s_median']:.2f} / {n['wall_s_min']:.2f} s"),
        ("no-op re-run: flow total (median / min)", f"{n['flow_total_s_median']:.2f} / {n['flow_total_s_min']:.2f} s"),
        ("no-op re-run: discover / load (median)", f"{n['discover_s_median']:.2f} / {n['load_s_median']:.2f} s"),
        ("no-op re-run: peak RSS tree / biggest", f"{n['peak_rss_tree_mib']:.0f} / {n['peak_rss_single_mib']:.0f} MiB"),
        ("empty Prefect flow: wall (median / min)", f"{e['wall_s_median']:.2f} / {e['wall_s_min']:.2f} s"),
        ("empty Prefect flow: peak RSS tree / biggest", f"{e['peak_rss_tree_mib']:.0f} / {e['peak_rss_single_mib']:.0f} MiB"),
        ("no-op = work + Prefect start-up + rest",
         f"{s['flow_work_s']:.2f} + {s['prefect_startup_s']:.2f} + {s['rest_s']:.2f} s"),
        ("warm PREFECT_HOME: empty flow / no-op wall (median)",
         f"{r['warm_prefect_home']['empty_flow_wall_s_median']:.2f} / {r['warm_prefect_home']['noop_wall_s_median']:.2f} s"),
        ("warm PREFECT_HOME: no-op flow total (median)", f"{r['warm_prefect_home']['noop_flow_total_s_median']:.2f} s"),
        ("Prefect start-up timeouts (fresh-home runs above)", f"{r['startup_timeouts']} (timeout set to {r['prefect_startup_timeout_s']} s)"),
        ("target: < 3 s of work beyond start-up", "met" if s["meets_target"] else "NOT met"),
    ]
    w = max(len(k) for k, _ in rows)
    print(f"\ncode {r['code']['after']['head']}; {r['bucket']['dumps']} dumps, {r['bucket']['runs']} runs, {r['bucket']['mb_on_disk']:.1f} MB "
          f"({r['bucket']['mb_uncompressed']:.1f} MB uncompressed), --workers {r['workers']}, "
          f"{r['machine']['cpus']} cores")
    print(f"{'':-<{w + 2}}{'':-<36}")
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    c = r["warehouse_after_first_ingest"]
    print(f"\nwarehouse: {c['dumps']} dumps ({c['distinct_dump_ids']} distinct sha256: the samples hold the same "
          f"content under two paths within a night, kept as is), {c['runs']} runs; "
          + ", ".join(f"{k}/{st} {m}" for k, st, m in c["by_kind_status"]))


if __name__ == "__main__":
    main()
