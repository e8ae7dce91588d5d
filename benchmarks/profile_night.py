"""Where one night's time goes, stage by stage and statement by statement (issue 30).

Runs one night in this process (``flows.nightly.night_in_process``: the flow's steps without
Prefect) on BUCKET into WAREHOUSE, optionally with its site, under cProfile, timing every
statement the writer sends to DuckDB (``flows.warehouse.journal``'s connection surface:
``execute``, ``executemany``, ``sql``). Prints the night's stage seconds (its summary), the
statements by total time (their first 100 characters, calls, seconds) and the Python
functions by cumulative time; writes ``OUT_DIR/night.prof``, ``OUT_DIR/statements.json`` and
``OUT_DIR/summary.json``. The warehouse is written: profile a copy.

    .venv/bin/python benchmarks/profile_night.py BUCKET WAREHOUSE OUT_DIR [--site DIR] [--memory-limit 2GB]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed_statements():
    """Wrap the journal's connection surface; returns the {statement: [calls, seconds]} it fills."""
    from flows.warehouse import journal

    stats: dict[str, list] = defaultdict(lambda: [0, 0.0])
    cls = next(c for c in vars(journal).values() if isinstance(c, type) and "execute" in vars(c) and "sql" in vars(c))
    for name in ("execute", "executemany", "sql"):
        original = getattr(cls, name)

        def timed(self, sql, *args, _original=original, **kwargs):
            t = time.perf_counter()
            try:
                return _original(self, sql, *args, **kwargs)
            finally:
                entry = stats[re.sub(r"\s+", " ", str(sql).strip())[:100]]
                entry[0] += 1
                entry[1] += time.perf_counter() - t
        setattr(cls, name, timed)
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bucket")
    ap.add_argument("warehouse", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--site", type=Path, default=None)
    ap.add_argument("--memory-limit", default="2GB")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from flows.nightly import night_in_process
    from flows.resources import parse_memory

    stats = timed_statements()
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    summary = night_in_process(bucket=args.bucket, warehouse=args.warehouse, site_dir=args.site, workers=args.workers,
                               memory_limit=parse_memory(args.memory_limit))
    profile.disable()
    wall = time.perf_counter() - t0
    profile.dump_stats(args.out / "night.prof")
    (args.out / "summary.json").write_text(summary.json(), encoding="utf-8")
    rows = sorted(([s, n, round(t, 3)] for s, (n, t) in stats.items()), key=lambda r: -r[2])
    (args.out / "statements.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(f"\nnight: {wall:.1f} s under cProfile; stages (s): "
          + ", ".join(f"{k} {v:.2f}" for k, v in sorted(summary.seconds.items(), key=lambda kv: -kv[1])))
    print(f"\nstatements: {sum(r[1] for r in rows)} calls, {sum(r[2] for r in rows):.1f} s; the top {args.top}:")
    for statement, calls, seconds in rows[: args.top]:
        print(f"  {seconds:7.2f} s {calls:6d}x  {statement}")
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(args.top)
    print(text.getvalue())


if __name__ == "__main__":
    main()
