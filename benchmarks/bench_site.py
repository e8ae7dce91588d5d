"""The report site for 365 runs × 100 series (issue 5's speed target): build time, size.

Builds (once, kept in ``benchmarks/out/site_365x100.duckdb``) a warehouse of 365 runs
of 100 series (5 jobs × 20 programs) with 40 metrics each (``bench_aggregate.build``,
the first metrics under real names so the section pages draw their charts), aggregates
it, then times ``flows.publish.site.build_site`` in a fresh process and reports the pages, the
charts, the total size of the site and the transfer size of the overview page (its HTML
plus every asset it loads, as served: uncompressed, and gzip-compressed as a web server
would send it), with the peak RSS of that process (``benchmarks/harness.py``).

    .venv/bin/python benchmarks/bench_site.py [--repeat 2] [--rebuild] [--json FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

OUT = ROOT / "benchmarks" / "out"
WAREHOUSE = OUT / "site_365x100.duckdb"
SITE = OUT / "site_365x100"


def prepare() -> None:
    from benchmarks.bench_aggregate import build
    from flows.warehouse import store as wh
    from flows.verdict.aggregate import aggregate

    build(WAREHOUSE, runs=365, jobs=5, programs=20)
    with wh.Warehouse(WAREHOUSE) as con:
        aggregate(con)


def measure_once() -> dict:
    from flows.publish.site import build_site

    t0 = time.perf_counter()
    result = build_site(WAREHOUSE, SITE)
    seconds = time.perf_counter() - t0
    files = [p for p in SITE.rglob("*") if p.is_file()]
    overview = SITE / "index.html"
    html = overview.read_text()
    assets = [SITE / ref for ref in re.findall(r'(?:src|href)="((?:assets|search)/[^"#?]+)"', html)]
    loaded = [overview] + [a for a in assets if a.exists()]
    return {
        "seconds": seconds, "stages": result.seconds, "pages": result.pages, "charts": result.charts,
        "site_mb": sum(p.stat().st_size for p in files) / 1e6, "files": len(files),
        "overview_html_kb": overview.stat().st_size / 1e3,
        "overview_transfer_kb": sum(p.stat().st_size for p in loaded) / 1e3,
        "overview_transfer_gzip_kb": sum(len(gzip.compress(p.read_bytes())) for p in loaded) / 1e3,
        "largest_page_kb": max(p.stat().st_size for p in files if p.suffix == ".html") / 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    harness.add_json_option(ap, OUT / "bench_site.json")
    args = ap.parse_args()
    if args.once:
        print(json.dumps(measure_once()))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    if args.rebuild or not WAREHOUSE.exists():
        prepare()
    results = []
    for _ in range(args.repeat):
        r, m = harness.run_json([sys.executable, __file__, "--once"])
        r["peak_rss_mib"] = m["peak_rss_mib"]
        results.append(r)
        stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stages"].items())
        print(f"site {r['seconds']:.1f} s ({stages}); {r['pages']} pages, {r['charts']} charts, {r['files']} files, "
              f"{r['site_mb']:.1f} MB; overview {r['overview_html_kb']:.0f} kB HTML, transfer {r['overview_transfer_kb']:.0f} kB "
              f"({r['overview_transfer_gzip_kb']:.0f} kB gzip); largest page {r['largest_page_kb']:.0f} kB; "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB")
    harness.write_json(args.json, results, indent=2)


if __name__ == "__main__":
    main()
