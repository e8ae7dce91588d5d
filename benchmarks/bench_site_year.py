"""The report site after a year of big nights (issue 13): seconds, pages, size, peak RSS.

Builds (once, kept in ``benchmarks/out/site_year.duckdb``) a warehouse of the shape of a
year of big nights, its derived tables synthesised directly with bulk SQL (the real
aggregation of 11 M metric rows would take most of the machine's memory and minutes):

- 366 nightly runs, 40 jobs (20 JAX, 20 PyTorch), 1,400 series a night (35 a job: 9
  programs × 4 dump kinds/stages), each with 15–40 metrics under real names where the
  site's sections look for them (11.5 M ``metric_trends`` rows);
- each night 10 % of the series change (their dump content, ~3 of their metrics step,
  three structural diff rows), 28 series vanish at
  run 150 (they stay in the history), one dump fails a night;
- ~3 incidents opened a night (1,100 in the year), most fixed or accepted within ten
  runs, a few left open; incident steps, accepts of the accepted ones;
- ``dump_series``/``dumps`` for every path (512 k), the structural item cache (10 items
  a dump), job totals, roll-ups, allocations and ONNX operators of the last run.

Then times ``flows.publish.site.build_site`` in a fresh process per repeat (``--history-runs N``
sets ``[site] history_runs``; 0: the whole history), and reports the stages (read,
render, mkdocs), its CPU seconds, pages, charts, files, the site's size, the largest page
and the peak RSS of that process (``benchmarks/harness.py``: its own, not the benchmark's).

``--runs N [N ...]`` builds the history at each length (366: ``site_year.duckdb``, any other
``site_year_N.duckdb``; kept) and measures each; then prints the site targets of issue 30 with
PASS/FAIL: each site ≤ 150 MB, ≤ 3,000 files (every file, assets included), its build ≤ 30 s
(the least wall time of the repeats), and with two lengths the longest history's site within
``FEW_PERCENT`` of the shortest's in files, bytes and build CPU seconds (least of the repeats):
the site follows the window, not the age of the warehouse.

``--incremental`` measures, at each length N, the three builds of a nightly site instead: a full
build from scratch (no previous site, no cached Vega bundle), an unchanged rebuild over it
(the same warehouse), and the rebuild after one more synthesised night (the warehouse of N + 1
runs, whose first N runs are the N-run warehouse's), each in a fresh process: CPU seconds, the
CPU seconds of each stage (read, render, assets, mkdocs: ``SiteResult.cpu_seconds``) and the pages mkdocs built.

    .venv/bin/python benchmarks/bench_site_year.py [--runs 366 730] [--repeat 2] [--history-runs 90] [--rebuild] [--json FILE]
    .venv/bin/python benchmarks/bench_site_year.py --incremental --runs 366
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

OUT = ROOT / "benchmarks" / "out"
WAREHOUSE = OUT / "site_year.duckdb"
SITE = OUT / "site_year"
RUNS, JOBS, PER_JOB = 366, 40, 35
# Issue 30's site targets (a year of big nights, the default window).
MAX_SITE_MB, MAX_FILES, MAX_SECONDS, FEW_PERCENT = 150, 3000, 30, 5


def warehouse_for(runs: int) -> Path:
    return WAREHOUSE if runs == RUNS else OUT / f"site_year_{runs}.duckdb"

# (kind, stage, metrics of that dump, the first under real names)
KINDS = {
    "jax": [("xla_hlo", "before_optimizations", 20, ["kernel.collectives", "kernel.collective.all-reduce",
                                                       "kernel.collective.all-gather", "hlo.instructions"]),
            ("xla_hlo", "after_optimizations", 40, ["kernel.launches", "kernel.custom_calls", "fusion.count",
                                                      "fusion.count.loop", "fusion.count.input", "fusion.count.output",
                                                      "kernel.custom_call.cublas_gemm", "hlo.instructions"]),
            ("xla_buffer_assignment", "buffer_assignment", 15, ["memory.total_bytes", "memory.temp_bytes",
                                                                 "memory.peak_live_bytes", "memory.parameter_bytes",
                                                                 "memory.output_bytes", "memory.allocations"]),
            ("xla_memory_usage_report", None, 15, ["memory.total_bytes", "memory.temp_bytes"])],
    "torch": [("inductor_ir", "pre_fusion", 20, ["inductor.nodes"]),
              ("inductor_ir", "post_fusion", 30, ["fusion.count", "fusion.fused_nodes", "kernel.extern", "kernel.fallback",
                                                   "kernel.user_triton", "memory.buffer_bytes", "inductor.nodes"]),
              ("inductor_output_code", None, 15, ["kernel.generated"]),
              ("onnx_report", None, 25, ["onnx.graph_nodes", "onnx.max_abs_diff", "onnx.errors", "onnx.step.export",
                                         "onnx.step.optimize", "onnx.step.verify", "onnx.step.accuracy"])],
}


def _frames(runs: int, jobs: int, per_job: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The series (s, job, program, kind, stage, series, cls) and the metrics of each class."""
    series, names = [], []
    classes = {(family, i): k for family, kinds in KINDS.items() for i, k in enumerate(kinds)}
    for (family, i), (kind, stage, n, real) in classes.items():
        cls = f"{family}{i}"
        filler = "memory.f{:02d}_bytes" if kind.startswith("xla_b") or kind.startswith("xla_m") else kind.split("_")[0] + ".f{:02d}"
        for m in range(n):
            names.append({"cls": cls, "m": m, "metric": real[m] if m < len(real) else filler.format(m)})
    for s in range(jobs * per_job):
        j, k = divmod(s, per_job)
        family = "jax" if j < max(1, jobs // 2) else "torch"
        kind, stage, _, _ = classes[(family, k % 4)]
        job, program = f"{family}-job{j:02d}", f"prog{k // 4:02d}"
        series.append({"s": s, "job": job, "program": program, "kind": kind, "stage": stage, "cls": f"{family}{k % 4}",
                       "series": "/".join([job, program, kind] + ([stage] if stage else [])),
                       "last_run": runs * 150 // 366 if s % 50 == 49 else runs})  # 1 in 50 vanish at 150 of 366
    return pl.DataFrame(series), pl.DataFrame(names)


def build(path: Path, *, runs: int = RUNS, jobs: int = JOBS, per_job: int = PER_JOB) -> None:
    """The warehouse (replaced); tests build smaller ones."""
    import duckdb

    from flows.warehouse import records
    from flows.warehouse import store as wh

    tmp = path.with_name(path.name + ".tmp")
    for p in path.parent.glob(tmp.name + "*"):
        p.unlink() if p.is_file() else None
    shutil.rmtree(records.root_for(tmp), ignore_errors=True)  # the file that named it goes with it
    with wh.Warehouse(tmp):  # the schema: core, records and derived tables, views, macros
        pass
    series, names = _frames(runs, jobs, per_job)
    t0 = time.perf_counter()
    con = duckdb.connect(str(tmp))
    con.execute("SET enable_progress_bar = false")
    con.register("_series", series.to_arrow())
    con.register("_names", names.to_arrow())
    con.execute(f"""
        CREATE TEMP TABLE r AS SELECT i AS run, strftime(TIMESTAMP '2025-01-01 02:00' + to_days(i), '%Y-%m-%d') AS run_id,
            TIMESTAMP '2025-01-01 02:00' + to_days(i) AS started_at, substr(md5(i::VARCHAR), 1, 7) AS "commit"
        FROM range({runs}) t(i);
        CREATE TEMP TABLE sr AS SELECT s.*, r.run, r.run_id, r.started_at, r."commit",
            (r.run > 0 AND hash(s.s, r.run, 'c') % 10 = 0) AS changed
        FROM _series s JOIN r ON r.run < s.last_run;
        CREATE TEMP TABLE sr2 AS SELECT *, sum(changed::INT) OVER (PARTITION BY s ORDER BY run) AS version,
            run_id || '/' || job || '/' || program || '.' || kind || coalesce('.' || stage, '') || '.txt' AS path FROM sr;
    """)
    con.execute("INSERT INTO runs (run_id, started_at, \"commit\", tags, extra, meta_errors) "
                "SELECT run_id, started_at, \"commit\", [], '{}', [] FROM r")
    con.execute(f"""INSERT INTO dumps (path, run_id, job, kind, stage, program, size_bytes, dump_id, parser_version, status,
                       error, ingested_at)
        SELECT path, run_id, job, kind, stage, program, 100000 + hash(s, version) % 1000000, sha256(s::VARCHAR || '-' || version),
            1, CASE WHEN hash(run, 'f') % {series.height} = s THEN 'failed' ELSE 'ok' END, NULL, started_at + INTERVAL 1 HOUR FROM sr2""")
    con.execute("""INSERT INTO dump_series (path, run_id, job, kind, stage, program, series_program, series)
                   SELECT path, run_id, job, kind, stage, program, program, series FROM sr2""")
    # Metric values: steps. A metric steps in a run where its series changed, 1 time in 8.
    con.execute("""
        CREATE TEMP TABLE g AS SELECT sr2.*, n.m, n.metric,
            (changed AND n.metric NOT LIKE 'onnx.step.%' AND hash(s, n.m, run) % 8 = 0) AS step
        FROM sr2 JOIN _names n USING (cls);
        CREATE TEMP TABLE g2 AS SELECT *, sum(step::INT) OVER (PARTITION BY s, m ORDER BY run) AS steps,
            CASE WHEN metric LIKE 'onnx.step.%' THEN 1.0
                 WHEN metric LIKE 'memory.%bytes' THEN (1048576 + hash(s, m) % 1073741824)::DOUBLE
                 ELSE (10 + hash(s, m) % 5000)::DOUBLE END AS base
        FROM g;
    """)
    con.execute("""
        INSERT INTO metric_trends
        SELECT run_id, started_at, "commit", series, job, kind, stage, program, metric, value,
            lag(run_id) OVER w AS previous_run_id, lag(value) OVER w AS previous_value, value - lag(value) OVER w AS delta,
            value / nullif(lag(value) OVER w, 0) AS ratio, 1 AS direction, 'any increase' AS rule,
            lag(value) OVER w IS NULL OR step AS changed
        FROM (SELECT *, CASE WHEN metric LIKE 'memory.%bytes' THEN base * (1 + 0.03 * steps) ELSE base + steps END AS value
              FROM g2)
        WINDOW w AS (PARTITION BY s, m ORDER BY run)
    """)
    con.execute("DROP TABLE g; DROP TABLE g2")
    con.execute("""INSERT INTO job_totals
        SELECT run_id, started_at, job, kind, stage, metric, v, n, lag(run_id) OVER w, lag(v) OVER w, v - lag(v) OVER w,
               v / nullif(lag(v) OVER w, 0)
        FROM (SELECT run_id, started_at, job, kind, stage, metric, sum(value) AS v, count(*) AS n FROM metric_trends
              GROUP BY ALL) WINDOW w AS (PARTITION BY job, kind, stage, metric ORDER BY started_at)""")
    con.execute("""INSERT INTO series_events
        SELECT run_id, started_at, job, NULL, 'first_run', NULL, NULL FROM sr2 WHERE run = 0 GROUP BY ALL
        UNION ALL SELECT r.run_id, r.started_at, s.job, s.series, 'vanished', NULL, 'last seen in the previous run'
            FROM _series s JOIN r ON r.run = s.last_run WHERE s.last_run < (SELECT max(run) + 1 FROM r)
        UNION ALL SELECT d.run_id, r.started_at, d.job, x.series, 'failed_dump', d.path, 'x.txt:1: not an HLO module'
            FROM dumps d JOIN dump_series x USING (path) JOIN r ON r.run_id = d.run_id WHERE d.status = 'failed'""")
    con.execute(f"""INSERT INTO run_rollups
        SELECT r.run_id, r.started_at, c.job, c.dumps, c.dumps - c.failed, 0, c.failed, 0, c.programs, c.dumps, 0,
               coalesce(v.vanished, 0), c.changed
        FROM (SELECT run_id, job, count(*) AS dumps, count(DISTINCT program) AS programs, sum(changed::INT) AS changed,
                     sum((hash(run, 'f') % {series.height} = s)::INT) AS failed FROM sr2 GROUP BY ALL) c
        JOIN r USING (run_id)
        LEFT JOIN (SELECT run_id, job, count(*) AS vanished FROM series_events WHERE event = 'vanished' GROUP BY ALL) v
            USING (run_id, job)""")
    con.execute("""INSERT INTO diffs (run_id, previous_run_id, series, job, program, kind, stage, category, key, label, change,
                              count_before, count_after, bytes_before, bytes_after, value_before, value_after, detail,
                              description)
        SELECT run_id, lag_run, series, job, program, kind, stage, cat, 'k' || i, cat || ' f32[' || (i * 64) || ']', 'grew',
               1, 1, 1024 * version, 1024 * (version + 1), NULL, NULL, 'model.py:' || (10 + i),
               cat || ' f32[' || (i * 64) || '] grew (+1.0 KiB)'
        FROM (SELECT *, lag(run_id) OVER (PARTITION BY s ORDER BY run) AS lag_run,
                     CASE WHEN kind = 'xla_buffer_assignment' THEN 'allocation' WHEN kind = 'xla_hlo' THEN 'fusion'
                          WHEN kind = 'inductor_ir' THEN 'fused_group' WHEN kind = 'onnx_report' THEN 'onnx_op'
                          ELSE 'kernel_category' END AS cat FROM sr2) JOIN range(3) t(i) ON true
        WHERE changed""")
    # Incidents: ~3 opened a night (a step of a program), closed 1-10 runs later (1 in 5 accepted); 1 in 150 never.
    con.execute(f"""
        CREATE TEMP TABLE inc AS SELECT 'I-' || substr(md5(series || run_id), 1, 8) AS incident_id, s, job, program, series,
            run, run_id, started_at, "commit",
            CASE WHEN hash(s, run, 'k') % 10 = 0 THEN 'improvement' WHEN hash(s, run, 'k') % 10 = 1 THEN 'failure'
                 ELSE 'regression' END AS kind,
            CASE WHEN hash(s, run, 'o') % 150 = 0 THEN NULL ELSE run + 1 + hash(s, run, 'd') % 10 END AS close_at
        FROM sr2 WHERE changed AND hash(s, run, 'i') % 47 = 0;
        INSERT INTO incidents SELECT i.incident_id, i.job, i.program, i.kind, i.run_id, i.started_at, p.run_id, p."commit",
            i."commit", c.run_id, CASE WHEN c.run_id IS NULL THEN NULL WHEN hash(i.s, i.run, 'a') % 5 = 0 THEN 'accepted'
                                       WHEN i.kind = 'improvement' THEN 'lost' ELSE 'fixed' END,
            i.program || ': memory.temp_bytes +12.0 MiB (+3.1 %), kernel.launches +4',
            'fusion f32[1024,64] appeared (×2, 512.0 KiB) model.py:42' || chr(10) || 'all-reduce f32[8,128] appeared',
            ['memory.temp_bytes', 'kernel.launches'], [i.series], (hash(i.s, i.run) % 1000) / 10.0,
            CASE WHEN hash(i.s, i.run, 'a') % 5 = 0 AND c.run_id IS NOT NULL THEN 'bench' END,
            CASE WHEN hash(i.s, i.run, 'a') % 5 = 0 AND c.run_id IS NOT NULL THEN 'intended' END, []::VARCHAR[],
            []::VARCHAR[], []::VARCHAR[], false
        FROM inc i JOIN r p ON p.run = i.run - 1 LEFT JOIN r c ON c.run = i.close_at;
        INSERT INTO incident_steps SELECT i.incident_id, i.job, i.program, i.series[1], s.kind, s.stage, m.metric,
            CASE WHEN i.kind = 'improvement' THEN 'improvement' WHEN i.kind = 'failure' THEN 'failure' ELSE 'regression' END,
            i.opened_run, i.last_good_run, i.closed_run, i.closed_how, 1048576, 1048576 * 1.03, 1048576 * 1.03, 31457,
            i.impact, 'fusion.42 = f32[1024,64] fusion(...), metadata={{source_file="model.py" source_line=42}}', NULL,
            NULL, false
        FROM incidents i JOIN _series s ON s.series = i.series[1] JOIN (VALUES ('memory.temp_bytes'), ('kernel.launches')) m(metric) ON true;
        INSERT INTO accepts SELECT NULL, closed_run, NULL, accepted_note, accepted_by, TIMESTAMP '2025-01-01' + to_days(1),
            incident_id, [incident_id] FROM incidents WHERE closed_how = 'accepted';
    """)
    last = f"(SELECT path, dump_id FROM dumps WHERE run_id = (SELECT max(run_id) FROM runs))"
    # The structural items: 10 a content (a view over content_items since items are kept per
    # content, dump_series.items_key; a table of them per path before).
    items = """SELECT {key}, 1,
            CASE WHEN d.kind = 'xla_buffer_assignment' THEN (CASE WHEN i < 5 THEN 'peak_value' ELSE 'allocation' END)
                 WHEN d.kind = 'inductor_ir' THEN 'fused_group' WHEN d.kind = 'xla_hlo' THEN 'fusion' ELSE 'onnx_op' END,
            'k' || i, 'fusion.' || i || ' · {{}} · f32[' || (64 * i) || ']', 1 + i, 1024 * (i + 1), NULL, 'model.py:' || i
        FROM {dumps} d JOIN range(10) t(i) ON true"""
    cols = "category, key, label, count, bytes, value, detail"
    rows = con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name IN ('content_item_rows', 'content_items')").fetchall()
    if rows:  # items per content: content_item_rows (schema 9), content_items before
        con.execute("UPDATE dump_series SET items_key = d.dump_id FROM dumps d WHERE d.path = dump_series.path")
        con.execute(f"INSERT INTO {sorted(r for (r,) in rows)[0]} (items_key, {cols}) " + items.format(
            key="d.dump_id", dumps="(SELECT DISTINCT dump_id, kind FROM dumps)").replace("SELECT d.dump_id, 1,", "SELECT d.dump_id,"))
        items = "10 items a content (content_items)"
    else:
        con.execute(f"INSERT INTO dump_items (path, dump_id, parser_version, {cols}) " + items.format(key="d.path, d.dump_id", dumps="dumps"))
        items = "10 items a dump (dump_items)"
    # Records of the latest run's contents, into the records store beside the file.
    records.add_rows(con, "buffer_allocations", con.sql("""
        SELECT DISTINCT d.dump_id, 1::SMALLINT AS parser_version, i::INTEGER AS allocation_index,
            4096 * (i + 1) * (1 + hash(d.dump_id) % 100) AS size_bytes, ['temp', 'parameter', 'output', 'constant'][1 + i % 4] AS kind
        FROM dumps d JOIN range(20) t(i) ON true
        WHERE d.kind = 'xla_buffer_assignment' AND d.run_id = (SELECT max(run_id) FROM runs) ORDER BY 1, 3""").pl())
    records.add_rows(con, "onnx_op_counts", con.sql("""
        SELECT DISTINCT d.dump_id, 1::SMALLINT AS parser_version, 'onnx_main_graph' AS source,
            ['MatMul', 'Add', 'Relu', 'Softmax', 'Gemm'][1 + i] AS op, 10 * (i + 1) AS count
        FROM dumps d JOIN range(5) t(i) ON true WHERE d.kind = 'onnx_report' AND d.run_id = (SELECT max(run_id) FROM runs)
        ORDER BY 1, 4""").pl())
    counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in (
        "runs", "dumps", "metric_trends", "job_totals", "run_rollups", "series_events", "diffs", "incidents",
        "incident_steps", "accepts")}
    con.execute("CHECKPOINT")
    con.close()
    tmp.replace(path)
    for p in path.parent.glob(tmp.name + "*"):
        p.unlink() if p.is_file() else None
    print(f"built {path} in {time.perf_counter() - t0:.0f} s ({path.stat().st_size / 1e6:.0f} MB): "
          + ", ".join(f"{k} {v:,}" for k, v in counts.items()) + f"; {items}")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process (DuckDB's too)
    return usage.ru_utime + usage.ru_stime


def measure_once(history_runs: int, runs: int = RUNS, fresh: bool = False) -> dict:
    """One build of the site of ``runs`` runs over the one in ``SITE`` (``fresh``: none, no cache)."""
    from flows.publish.site import build_site
    from transforms.trends.rules import parse_settings

    if fresh:
        for part in (SITE, SITE.with_name(SITE.name + ".src")):
            shutil.rmtree(part, ignore_errors=True)
    settings = parse_settings(f"[site]\nhistory_runs = {history_runs}\n") if history_runs >= 0 else None
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    result = build_site(warehouse_for(runs), SITE, settings)
    seconds, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
    files = [p for p in SITE.rglob("*") if p.is_file()]
    html = [p for p in files if p.suffix == ".html"]
    return {
        "runs": runs, "history_runs": history_runs, "seconds": seconds, "cpu_seconds": cpu, "stages": result.seconds,
        "stages_cpu": getattr(result, "cpu_seconds", {}),
        "pages": result.pages, "pages_built": getattr(result, "pages_built", result.pages), "archive_pages": len(list((SITE / "archive").glob("*.html"))),
        "charts": result.charts, "files": len(files), "html_pages": len(html),
        "site_mb": sum(p.stat().st_size for p in files) / 1e6,
        "largest_page_kb": max(p.stat().st_size for p in html) / 1e3,
        "run_pages": len(list((SITE / "runs").glob("*.html"))) - 1,
        "series_pages": len(list((SITE / "series").glob("*.html"))) - 1,
        "incident_pages": len(list((SITE / "incidents").glob("*.html"))) - 1,
    }


def targets(results: list[dict]) -> list[tuple[str, bool]]:
    """Each target of issue 30 for the site at a year, with whether it holds (PASS/FAIL)."""
    by_runs: dict[int, list[dict]] = {}
    for r in results:
        by_runs.setdefault(r["runs"], []).append(r)
    rows = []
    for runs, rs in sorted(by_runs.items()):
        best = min(rs, key=lambda r: r["seconds"])
        rows += [(f"{runs} runs: site {best['site_mb']:.1f} MB <= {MAX_SITE_MB} MB", best["site_mb"] <= MAX_SITE_MB),
                 (f"{runs} runs: {best['files']:,} files <= {MAX_FILES:,}", best["files"] <= MAX_FILES),
                 (f"{runs} runs: build {best['seconds']:.1f} s <= {MAX_SECONDS} s", best["seconds"] <= MAX_SECONDS)]
    if len(by_runs) > 1:
        short, long = by_runs[min(by_runs)], by_runs[max(by_runs)]
        for label, key in (("files", "files"), ("MB", "site_mb"), ("build CPU s", "cpu_seconds")):
            a, b = min(r[key] for r in short), min(r[key] for r in long)
            rows.append((f"{max(by_runs)} runs vs {min(by_runs)}: {label} {b:,.1f} vs {a:,.1f} "
                         f"({100 * (b - a) / a:+.1f} %, within {FEW_PERCENT} %)", b <= a * (1 + FEW_PERCENT / 100)))
    return rows


def incremental(lengths: list[int], history_runs: int, rebuild: bool) -> list[dict]:
    """At each length: a full build, an unchanged rebuild, the rebuild after one more night."""
    results = []
    for runs in lengths:
        for n in (runs, runs + 1):
            if rebuild or not warehouse_for(n).exists():
                build(warehouse_for(n), runs=n)
        for step, n, fresh in (("full", runs, True), ("unchanged", runs, False), ("one more night", runs + 1, False)):
            r, m = harness.run_json([sys.executable, __file__, "--once", "--history-runs", str(history_runs),
                                     "--runs", str(n)] + (["--fresh"] if fresh else []))
            r |= {"step": step, "peak_rss_mib": m["peak_rss_mib"]}
            results.append(r)
            stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stages_cpu"].items())
            print(f"{runs} runs, {step}: {r['seconds']:.1f} s, CPU {r['cpu_seconds']:.1f} s (CPU s: {stages}); "
                  f"{r['pages_built']} of {r['pages']} pages built; {r['files']} files, {r['site_mb']:.1f} MB; "
                  f"peak RSS {r['peak_rss_mib']:.0f} MiB")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--runs", type=int, nargs="+", default=[RUNS], help="history lengths to build and measure (runs)")
    ap.add_argument("--history-runs", type=int, default=-1,
                    help="[site] history_runs (0: the whole history; default: the setting's default)")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--incremental", action="store_true",
                    help="a full build, an unchanged rebuild and the rebuild after one more night, at each length")
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--fresh", action="store_true", help=argparse.SUPPRESS)
    harness.add_json_option(ap, OUT / "bench_site_year.json")
    args = ap.parse_args()
    if args.once:
        print(json.dumps(measure_once(args.history_runs, args.runs[0], args.fresh)))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    if args.incremental:
        harness.write_json(args.json, incremental(args.runs, args.history_runs, args.rebuild), indent=2)
        return
    results = []
    for runs in args.runs:
        if args.rebuild or not warehouse_for(runs).exists():
            build(warehouse_for(runs), runs=runs)
        for _ in range(args.repeat):
            r, m = harness.run_json([sys.executable, __file__, "--once", "--history-runs", str(args.history_runs),
                                     "--runs", str(runs)])
            r["peak_rss_mib"] = m["peak_rss_mib"]
            results.append(r)
            stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stages"].items())
            print(f"{runs} runs: site {r['seconds']:.1f} s ({stages}; CPU {r['cpu_seconds']:.1f} s); {r['pages']} pages "
                  f"({r['run_pages']} runs, {r['series_pages']} series, {r['incident_pages']} incidents, "
                  f"{r['archive_pages']} archive months), {r['charts']} charts, {r['files']} files, "
                  f"{r['site_mb']:.1f} MB; largest page {r['largest_page_kb']:.0f} kB; peak RSS {r['peak_rss_mib']:.0f} MiB")
    for label, ok in targets(results):
        print(f"{'PASS' if ok else 'FAIL'}  {label}")
    harness.write_json(args.json, results, indent=2)


if __name__ == "__main__":
    main()
