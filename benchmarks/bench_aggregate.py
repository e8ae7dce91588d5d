"""Aggregation and diffs over 365 runs × 200 series × 40 metrics (issue 4's speed target).

Builds (once, kept in ``benchmarks/out/aggregate_365x200.duckdb``) a warehouse with
365 nightly runs of 200 series (10 jobs × 20 programs, XLA buffer assignments), each
with 40 metrics (2.92 M metric rows), and a structural item cache of 30 items per
dump (2.19 M items; a dump's content changes every ~9 nights, when 3 of its items
change). Memory metrics drift upward by a step now and then, so there are
regressions, changes and diffs to compute.

Then, in a fresh process per repeat, times ``flows.verdict.aggregate.aggregate`` on a copy
(read from DuckDB, series, trends, regressions, events, roll-ups, diffs, write back)
and reports its stages and the process's peak RSS (``benchmarks/harness.py``: its own,
not the benchmark's).

    .venv/bin/python benchmarks/bench_aggregate.py [--repeat 3] [--rebuild] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

OUT = ROOT / "benchmarks" / "out"
WAREHOUSE = OUT / "aggregate_365x200.duckdb"
RUNS, JOBS, PROGRAMS, METRICS, ITEMS = 365, 10, 20, 40, 30


# The first metrics carry real names, so the site's section pages have their charts.
REAL_NAMES = ("memory.total_bytes", "memory.temp_bytes", "memory.peak_live_bytes", "memory.parameter_bytes",
              "kernel.launches", "fusion.count", "kernel.custom_calls", "kernel.collectives")


def build(path: Path, *, runs: int = RUNS, jobs: int = JOBS, programs: int = PROGRAMS) -> None:
    from flows.warehouse import loading, store as wh
    from transforms.trends.diffs import ITEMS_VERSION

    RUNS, JOBS, PROGRAMS = runs, jobs, programs  # noqa: N806 (the module's defaults, overridden)

    run_ids = [f"2025-{i:03d}" for i in range(RUNS)]
    start = datetime(2025, 1, 1, 2)
    runs = [{"run_id": r, "started_at": start + timedelta(days=i), "commit": f"{i:07x}", "tags": [], "extra": {}}
            for i, r in enumerate(run_ids)]
    n_series = JOBS * PROGRAMS
    grid = pl.DataFrame({"run": pl.int_range(RUNS, eager=True)}).join(
        pl.DataFrame({"s": pl.int_range(n_series, eager=True)}), how="cross")
    # Content version of each series per run: changes with probability 1/9 a night.
    grid = grid.with_columns((pl.col("s").hash(seed=1) ^ pl.col("run").hash(seed=2)).mod(9).eq(0).alias("_changed"))
    grid = grid.sort("s", "run").with_columns(pl.col("_changed").cast(pl.Int64).cum_sum().over("s").alias("version")).sort("run", "s")
    dumps = grid.select(
        pl.col("run"), pl.col("s"), pl.col("version"),
        pl.format("2025-{}", pl.col("run").cast(pl.String).str.zfill(3)).alias("run_id"),
        pl.format("job{}", (pl.col("s") // PROGRAMS).cast(pl.String).str.zfill(2)).alias("job"),
        pl.format("prog{}", (pl.col("s") % PROGRAMS).cast(pl.String).str.zfill(2)).alias("program"),
    ).with_columns(
        pl.format("{}/{}/module_0001.{}.cpu_after_optimizations-buffer-assignment.txt", "run_id", "job", "program").alias("path"),
        pl.format("{}-{}", "s", "version").alias("dump_id"),
    )
    dump_rows = dumps.select(
        "path", "run_id", "job", pl.lit("xla_buffer_assignment").alias("kind"), pl.lit("buffer_assignment").alias("stage"),
        "program", pl.lit(1000, pl.Int64).alias("size_bytes"), "dump_id", pl.lit(1, pl.Int16).alias("parser_version"),
        pl.lit("ok").alias("status"), pl.lit(None, pl.String).alias("error"), pl.lit(datetime(2026, 1, 1)).alias("ingested_at"))
    # 40 metrics: 20 byte figures and 20 counts, growing 3 % per content version.
    names = pl.DataFrame({"m": pl.int_range(METRICS, eager=True)}).with_columns(
        pl.when(pl.col("m") < 20).then(pl.format("memory.m{}_bytes", pl.col("m").cast(pl.String).str.zfill(2)))
        .otherwise(pl.format("kernel.c{}", pl.col("m").cast(pl.String).str.zfill(2))).alias("metric"))
    names = names.with_columns(pl.col("metric").replace_strict(
        {f"memory.m{i:02d}_bytes": n for i, n in enumerate(REAL_NAMES[:4])}
        | {f"kernel.c{i:02d}": n for i, n in enumerate(REAL_NAMES[4:])}, default=pl.col("metric")))
    metrics = dumps.join(names, how="cross").select(
        "run_id", "job", "program", pl.lit("xla_buffer_assignment").alias("kind"), pl.lit("buffer_assignment").alias("stage"),
        "metric",
        ((pl.struct("s", "m").hash(seed=3) % (1 << 30) + (1 << 20)).cast(pl.Float64) * (1 + 0.03 * pl.col("version"))).alias("value"),
        "dump_id", "path")
    # Items per content: 30 per dump content; 3 of them grow with the content version.
    item_ids = pl.DataFrame({"i": pl.int_range(ITEMS, eager=True)})
    items = dumps.unique("dump_id").join(item_ids, how="cross").select(
        pl.format(f"i{ITEMS_VERSION}:{{}}:1", "dump_id").alias("items_key"), pl.lit("allocation").alias("category"),
        pl.format("k{}", "i").alias("key"), pl.format("allocation temp f32[{}]", "i").alias("label"),
        pl.lit(1, pl.Int64).alias("count"),
        (1024 * (1 + pl.col("i") + pl.when(pl.col("i") < 3).then(pl.col("version")).otherwise(0))).cast(pl.Int64).alias("bytes"),
        pl.lit(None, pl.Float64).alias("value"), pl.lit("model.py:42").alias("detail"))
    tmp = path.with_suffix(".tmp")
    for p in (tmp, path):
        p.unlink(missing_ok=True)
    with wh.Warehouse(tmp) as con:
        loading.upsert_runs(con, runs)
        for table, frame in (("dumps", dump_rows), ("metrics", metrics), ("content_item_rows", items)):
            con.register("_in", frame.to_arrow())
            cols = ", ".join(f'"{c}"' for c in frame.columns)  # by name: tables gain columns
            con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _in")
            con.unregister("_in")
    tmp.replace(path)
    print(f"built {path}: {RUNS} runs, {n_series} series, {metrics.height:,} metric rows, {items.height:,} items")


AGGREGATED = OUT / "aggregate_365x200.aggregated.duckdb"


def measure_once(mode: str) -> dict:
    """In this (fresh) process: aggregate a copy; stages, seconds, peak RSS.

    full: the warehouse as built, never aggregated (a first aggregation, or one after
    the settings or the accept log changed). nightly: aggregated through run 364, the
    last run's dumps newer than that (what a night does: all 365 runs computed, the
    new run's rows written). noop: aggregated, nothing new.
    """
    from flows.warehouse import store as wh
    from flows.verdict.aggregate import aggregate

    work = OUT / "aggregate_work.duckdb"
    shutil.copyfile(WAREHOUSE if mode == "full" else AGGREGATED, work)
    if mode == "nightly":
        with wh.Warehouse(work) as con:
            last = f"2025-{RUNS - 1:03d}"
            con.execute("UPDATE dumps SET ingested_at = ingested_at + INTERVAL 1 HOUR WHERE run_id = ?", [last])
    with wh.Warehouse(work) as con:
        t0 = time.perf_counter()
        result = aggregate(con)
        seconds = time.perf_counter() - t0
    if mode == "full":  # what nightly and noop start from: aggregated by this code (its version and settings)
        shutil.copyfile(work, AGGREGATED)
    work.unlink()
    return {"mode": mode, "seconds": seconds, "stages": result.seconds, "rows": result.rows,
            "from_run": result.from_run}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--once", help=argparse.SUPPRESS)
    ap.add_argument("--build", action="store_true", help=argparse.SUPPRESS)
    harness.add_json_option(ap, OUT / "bench_aggregate.json")
    args = ap.parse_args()
    if args.once:
        print(json.dumps(measure_once(args.once)))
        return
    if args.build:
        build(WAREHOUSE)
        return
    OUT.mkdir(parents=True, exist_ok=True)
    if args.rebuild or not WAREHOUSE.exists():
        AGGREGATED.unlink(missing_ok=True)
        # In a process of its own: the build's GiB go back to the machine before the measured runs
        # (which the harness measures on their own, whatever this process holds).
        subprocess.run([sys.executable, __file__, "--build"], check=True)
    results = []
    for mode in ("full", "nightly", "noop"):
        for _ in range(args.repeat if mode != "full" else 1):
            r, m = harness.run_json([sys.executable, __file__, "--once", mode])
            r["peak_rss_mib"] = m["peak_rss_mib"]
            results.append(r)
            stages = ", ".join(f"{k} {v:.2f}" for k, v in r["stages"].items())
            print(f"{mode:8s} {r['seconds']:.2f} s ({stages}); from {r['from_run']}; peak RSS {r['peak_rss_mib']:.0f} MiB")
    print("rows written (nightly):", next(r["rows"] for r in results if r["mode"] == "nightly"))
    for mode in ("full", "nightly", "noop"):
        these = [r for r in results if r["mode"] == mode]
        print(f"{mode}: best {min(r['seconds'] for r in these):.2f} s of {len(these)}, "
              f"peak RSS max {max(r['peak_rss_mib'] for r in these):.0f} MiB")
    harness.write_json(args.json, results, indent=2)


if __name__ == "__main__":
    main()
