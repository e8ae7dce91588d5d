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

Issue 27, item 5: ``--module-mb 2000`` adds the night of one ~2 GB plain HLO module
(``bench_real.real_module``: renamed copies of the real modules of ``data/corpus``, built
once under ``benchmarks/out/real/``), hard-linked into a bucket of its own:

3. a whole night with ``--memory-limit 2GB``, then one without (the limit the night
   picks from the machine, ``flows.resources.machine_limit``, as its log line states):
   peak RSS of the process tree against the limit;
4. a night SIGKILLed (as the OOM killer would) once its items work directory beside the
   warehouse holds a batch: which of its processes (the flow, Prefect's temporary
   server, parse workers) are still there after a bounded wait, what it left beside the
   warehouse, and whether the next night (measured too) removes it.

Benchmarks report, they do not assert: each figure is printed with whether it is
under 1 GiB (the big night's: under its limit), and written to
``benchmarks/out/bench_bomb.json`` (``--json``). Each run is measured by
``benchmarks/harness.py`` (through ``bench_ingest.measure``).

    .venv/bin/python benchmarks/bench_bomb.py [--line-gib 4] [--skip-night] [--module-mb 2000 [--only-module]]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import psutil
# the same process-tree measurement as the ingest bench
from bench_ingest import DUMPSCOPE, OUT, ROOT, STARTUP_TIMEOUT, measure

from benchmarks import harness  # bench_ingest put the repository on sys.path

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


def _limit_line(m: dict) -> str:
    """The night's 'memory limit: ...' log line, as measure() caught its output."""
    for line in (m.get("output") or "").splitlines():
        if "memory limit: " in line:
            return line.split("memory limit: ", 1)[1].strip()
    return "?"


def _show_big(label: str, m: dict, limit_bytes: int) -> None:
    verdict = "under" if m["peak_rss_tree_mib"] * (1 << 20) <= limit_bytes else "OVER"
    print(f"{label}: {m['wall_s']:.1f} s, exit {m['returncode']}, "
          f"peak RSS {m['peak_rss_tree_mib']:.0f} MiB (whole tree, "
          f"{m['max_processes']} processes at most): {verdict} the limit of {limit_bytes / GIB:.2f} GiB "
          f"[memory limit: {_limit_line(m)}]", flush=True)


def _night_env(home: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return env | {"PREFECT_HOME": home, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PYTHONUNBUFFERED": "1",
                  "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": str(STARTUP_TIMEOUT)}


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def killed_night(argv: list[str], warehouse: Path, scratch: Path, wait_s: float = 15.0) -> dict:
    """Start the night, SIGKILL its flow process once an items work directory beside the
    warehouse holds a batch's records, and see which of its processes remain after ``wait_s``."""
    env = _night_env(str(scratch / "prefect-killed"))
    with (scratch / "killed.log").open("w") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        root, seen, t0 = psutil.Process(proc.pid), {}, time.perf_counter()
        while proc.poll() is None:
            try:
                for p in [root, *root.children(recursive=True)]:
                    seen.setdefault(p.pid, (p, " ".join(p.cmdline())[:100]))
            except psutil.Error:
                pass
            if any(f.stat().st_size for d in warehouse.parent.glob(".items-*") for f in d.rglob("t_*.parquet")):
                break  # mid-items: a batch's records are being written
            time.sleep(0.2)
        at = time.perf_counter() - t0
        if proc.poll() is not None:
            return {"killed": False, "returncode": proc.returncode, "log": (scratch / "killed.log").read_text()[-2000:]}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + wait_s
    alive = [pid for pid, (p, _) in seen.items() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = [pid for pid in alive if seen[pid][0].is_running() and seen[pid][0].status() != psutil.STATUS_ZOMBIE]
    left = sorted(warehouse.parent.glob(".items-*"))
    return {"killed": True, "killed_after_s": at, "processes_seen": [c for _, c in seen.values()],
            "still_running_after_s": wait_s, "still_running": [seen[pid][1] for pid in alive],
            "left_beside_warehouse": {d.name: _du(d) for d in left}}


def big_module_night(mb: int, scratch: Path) -> dict:
    """Item 5 of issue 27: the ~``mb`` MB module's night with --memory-limit 2GB, without,
    and killed mid-items (module docstring, steps 3 and 4)."""
    sys.path.insert(0, str(ROOT))
    from bench_real import real_module

    from flows.resources import machine_limit, parse_memory

    t0 = time.perf_counter()
    module, expected = real_module(mb)
    print(f"module: {module.stat().st_size / 1e6:.0f} MB, {expected['instructions']:,} instructions "
          f"({expected['copies']} renamed copies of data/corpus modules; {time.perf_counter() - t0:.0f} s)", flush=True)
    job = scratch / "bucket" / "2026-01-01" / "job"
    job.mkdir(parents=True)
    try:
        os.link(module, job / module.name)  # same file system (scratch is under benchmarks/out): no 2 GB copy
    except OSError:
        shutil.copy(module, job / module.name)
    bucket = str(scratch / "bucket")
    out: dict = {"module": {"bytes": module.stat().st_size, **expected}}

    def night(name: str, *extra: str) -> tuple[list[str], Path]:
        warehouse = scratch / name / "wh.duckdb"
        warehouse.parent.mkdir()
        return [str(DUMPSCOPE), "run", "--bucket", bucket, "--warehouse", str(warehouse), "--workers", "1",
                "--summary-json", str(warehouse.parent / "summary.json"), *extra], warehouse

    def stages(m: dict, argv: list[str]) -> dict:
        """The flow process's peak RSS after each stage (the night's summary), MiB."""
        summary = Path(argv[argv.index("--summary-json") + 1])
        m["peak_mib_by_stage"] = json.loads(summary.read_text())["peak_mib"] if summary.exists() else {}
        print(f"  the flow process's peak after each stage, MiB: "
              f"{ {k: round(v) for k, v in m['peak_mib_by_stage'].items()} }", flush=True)
        return m

    argv, _ = night("limited", "--memory-limit", "2GB")
    limited = measure(argv, f"dumpscope run --memory-limit 2GB ({mb} MB module)", keep_output=True)
    _show_big(f"a night of the {mb} MB module with --memory-limit 2GB", limited, parse_memory("2GB"))
    stages(limited, argv)
    out["night_limit_2GB"] = limited
    default, how = machine_limit()
    argv, _ = night("default")
    unlimited = measure(argv, f"dumpscope run ({mb} MB module, default limit)", keep_output=True)
    _show_big(f"the same night without --memory-limit (default here: {how})", unlimited, default)
    stages(unlimited, argv)
    out["night_default_limit"] = unlimited | {"machine_limit": default, "chosen": how}
    argv, warehouse = night("killed")
    killed = killed_night(argv, warehouse, scratch)
    print(f"a night SIGKILLed in the items step after {killed.get('killed_after_s', 0):.0f} s: "
          f"{len(killed.get('still_running', []))} of its {len(killed.get('processes_seen', []))} processes "
          f"still running "
          f"{killed.get('still_running_after_s')} s later {killed.get('still_running')}; left beside the warehouse: "
          f"{killed.get('left_beside_warehouse')}", flush=True)
    after = measure(argv, f"the next night ({mb} MB module)", keep_output=True)
    left = sorted(p.name for p in warehouse.parent.glob(".items-*"))
    swept = [line for line in (after.get("output") or "").splitlines() if "left by a killed night" in line]
    print(f"the next night: exit {after['returncode']}, {after['wall_s']:.0f} s, "
          f"peak RSS {after['peak_rss_tree_mib']:.0f} MiB; "
          f"{swept}; .items-* beside the warehouse after it: {left}", flush=True)
    stages(after, argv)
    out["killed_night"] = killed
    out["next_night"] = after | {"items_dirs_after": left, "sweep_lines": swept}
    for m in (limited, unlimited, after):
        m.pop("output", None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--line-gib", type=float, default=4.0, help="length of the bomb's one line, GiB")
    ap.add_argument("--skip-night", action="store_true", help="only measure `dumpscope parse`")
    ap.add_argument("--module-mb", type=int, default=0,
                    help="also the night of one module of about this many MB (2000)")
    ap.add_argument("--only-module", action="store_true", help="only the --module-mb nights, not the gzip bomb")
    harness.add_json_option(ap, OUT / "bench_bomb.json")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    result: dict = {}
    if args.module_mb:
        with tempfile.TemporaryDirectory(prefix="bench-bomb-module-", dir=OUT) as tmp:  # beside the module: hard links
            result["module_night"] = big_module_night(args.module_mb, Path(tmp))
        if args.only_module:
            harness.write_json(args.json, result)
            return
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
    harness.write_json(args.json, result)


if __name__ == "__main__":
    main()
