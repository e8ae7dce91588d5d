"""A gzip bomb against the parse limits: peak RSS of one parse and of a whole night.

Issue 11, item 9. The bomb is ~4 MB of gzip holding one 4 GiB line of 'a' with no
newline, made streaming with zlib (never held in memory) in a temp dir, under an XLA
dump name (``module_0001.bomb.after_optimizations.txt.gz``), so it is read as an HLO
dump. ``transforms.parse.ParseLimits`` must stop it at ``max_line_bytes`` (64 MiB by
default) without holding the line:

1. ``dumpscope parse`` on the bomb, in a fresh process: wall time and peak RSS;
2. a whole night, ``dumpscope run --workers 1`` with a fresh ``PREFECT_HOME`` on a
   bucket ``<tmp>/bucket/2026-01-01/job/`` holding the bomb and one real sample dump:
   wall time, peak RSS of the whole process tree (psutil, polled every 50 ms: the flow,
   Prefect's API server, the parse worker), and what the warehouse says of both dumps;
   measured first on the real dump alone, so that the bomb's own cost shows.

Benchmarks report, they do not assert: each figure is printed with whether it is
under 1 GiB, and written to ``benchmarks/out/bench_bomb.json``.

    .venv/bin/python benchmarks/bench_bomb.py [--line-gib 4] [--skip-night]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from bench_ingest import DUMPSCOPE, OUT, ROOT, measure  # the same process-tree measurement as the ingest bench

REAL_DUMP = ROOT / "data/sample_bucket/2026-11-20/jax-jit/module_0000.jit_train_step.cpu_after_optimizations.txt.gz"
BOMB_NAME = "module_0001.bomb.after_optimizations.txt.gz"
GIB = 1 << 30


def make_bomb(path: Path, line_bytes: int) -> int:
    """gzip of ``line_bytes`` of 'a' and no newline, written 16 MiB at a time; returns its size."""
    block = b"a" * (16 << 20)
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with path.open("wb") as out:
        left = line_bytes
        while left:
            n = min(left, len(block))
            out.write(z.compress(block[:n]))
            left -= n
        out.write(z.flush())
    return path.stat().st_size


def warehouse_dumps(warehouse: Path) -> list[dict]:
    sys.path.insert(0, str(ROOT))
    from flows.warehouse import store as wh

    with wh.connect_readonly(warehouse) as con:
        rows = con.execute("SELECT path, kind, status, error FROM dumps ORDER BY path").fetchall()
    return [{"path": p, "kind": k, "status": s, "error": e} for p, k, s, e in rows]


def _show(label: str, m: dict) -> None:
    peak = max(m["peak_rss_tree_mib"], m["peak_rss_single_mib"])
    verdict = "under" if peak < 1024 else "OVER"
    print(f"{label}: {m['wall_s']:.1f} s, exit {m['returncode']}, peak RSS {m['peak_rss_tree_mib']:.0f} MiB "
          f"(whole tree, {m['max_processes']} processes at most), largest single process "
          f"{m['peak_rss_single_mib']:.0f} MiB: {verdict} 1 GiB", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--line-gib", type=float, default=4.0, help="length of the bomb's one line, GiB")
    ap.add_argument("--skip-night", action="store_true", help="only measure `dumpscope parse`")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    result: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-bomb-") as tmp:
        job = Path(tmp, "bucket", "2026-01-01", "job")
        job.mkdir(parents=True)
        bomb = job / BOMB_NAME
        t0 = time.perf_counter()
        line = int(args.line_gib * GIB)
        size = make_bomb(bomb, line)
        print(f"bomb: {size / 1e6:.1f} MB of gzip holding one {line / GIB:g} GiB line "
              f"(made in {time.perf_counter() - t0:.1f} s)", flush=True)
        result["bomb"] = {"gzip_bytes": size, "line_bytes": line}

        parse = measure([str(DUMPSCOPE), "parse", "--json", str(bomb)], "dumpscope parse (bomb)")
        _show("dumpscope parse on the bomb (exit 1: the dump failed, as it should)", parse)
        out = subprocess.run([str(DUMPSCOPE), "parse", "--json", str(bomb)], capture_output=True, text=True).stdout
        parse["verdict"] = {k: v for k, v in json.loads(out).items() if k in ("kind", "status", "errors")}
        print(f"  {parse['verdict']}", flush=True)
        result["parse"] = parse

        if not args.skip_night:
            shutil.copy(REAL_DUMP, job / REAL_DUMP.name)
            plain = Path(tmp, "plain", "2026-01-01", "job")
            plain.mkdir(parents=True)
            shutil.copy(REAL_DUMP, plain / REAL_DUMP.name)
            baseline = measure([str(DUMPSCOPE), "run", "--bucket", str(plain.parents[1]), "--warehouse",
                                str(Path(tmp, "plain.duckdb")), "--workers", "1"], "dumpscope run (the real dump alone)")
            _show("for comparison, a night with the real dump alone", baseline)
            result["night_without_bomb"] = baseline
            warehouse = Path(tmp, "wh.duckdb")
            night = measure([str(DUMPSCOPE), "run", "--bucket", str(Path(tmp, "bucket")), "--warehouse", str(warehouse),
                             "--workers", "1"], "dumpscope run (bomb + a real dump)")
            _show("a night with the bomb and a real dump", night)
            result["night"] = night
            if warehouse.exists():
                result["dumps"] = warehouse_dumps(warehouse)
                for d in result["dumps"]:
                    print(f"  {d['path']}: {d['kind']} {d['status']}  {(d['error'] or '')[:160]}")
    (OUT / "bench_bomb.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
