"""XLA HLO text parser: throughput on one core, peak RSS, and XLA's own parser side by side.

    .venv/bin/python benchmarks/bench_hlo.py [--big-mb 200] [--real-mb 60] [--repeats 3] [--json FILE]

What is timed is the whole parse a nightly run does: iterate the text file's lines,
run ``transforms.parsers.xla_hlo.parse`` and build every polars frame it yields (frames are
dropped as they come). Wall time is ``time.perf_counter``; CPU time is shown too,
because on a shared machine the wall clock also counts other people's work. The
process is pinned to one CPU with ``POLARS_MAX_THREADS=1``.

Real modules (MB/s per core is what counts): XLA's LLM benchmark modules of
data/corpus/hlo_text (llama 3.1 8B, mixtral 8x7B: thousands of computations of a few
short lines each, the hardest case per byte; TORAX f64, with a comment header) and the
torch_xla llama 2 / MLPerf DLRM modules of data/corpus, each on its own, and all of them
concatenated to ``--real-mb`` (default ~60 MB), parsed in a child process.

The big file (default ~200 MB) concatenates the two seed modules (004, 001, 004, ...)
and is written once to benchmarks/out/. It is parsed in a child process that reports
its own peak RSS. XLA's parser (``jaxlib._hlo.hlo_module_from_text``) runs in-process
when jaxlib imports, else in ``.venv-samples`` if it exists; it takes one module per
call, so the big file is fed to it module by module. Best-of-N and the child processes' peak
RSS come from ``benchmarks/harness.py``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

SEEDS = [ROOT / "tests/fixtures/seeds/001_a0c5460ce1af2dbe.txt", ROOT / "tests/fixtures/seeds/004_83a80cec1e7cc5e6.txt"]
OUT = ROOT / "benchmarks" / "out"
REAL = [ROOT / "data/corpus/hlo_text" / f"{n}.hlo.gz" for n in (
    "hlo_llama31_8b_bf16_1x8", "hlo_mixtral_8x7b_bf16_1x8", "hlo_torax_iterhybrid_predictor_corrector_f64")] + [
    ROOT / "data/corpus" / f"{n}.txt.gz" for n in (
        "torch_xla_llama2_tp1_pp1.before_optimizations", "torch_xla_llama2_tp8_pp4.before_optimizations",
        "mlperf_dlrm_tpuv3_32.after_optimizations")]
SAMPLES_PY = ROOT / ".venv-samples" / "bin" / "python"


def one_core() -> None:
    os.environ["POLARS_MAX_THREADS"] = "1"
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def time_ours(path: Path, repeats: int) -> dict:
    """Best wall and CPU seconds over repeats (first run warms caches and imports)."""
    from transforms.parsers import xla_hlo
    from transforms.records import TableBatch

    def parse() -> int:
        rows = 0
        with path.open() as fh:
            for item in xla_hlo.parse(fh):
                if isinstance(item, TableBatch):
                    rows += item.frame.height
        return rows

    got = harness.best_of(parse, repeats)
    return {"wall": got["wall_s"], "cpu": got["cpu_s"], "rows": got["result"]}


_XLA = r"""
import json, resource, sys, time
from jaxlib import _hlo
res = {}
for path in sys.argv[2:]:
    text = open(path).read()
    pieces = text.split("\nHloModule ")
    modules = [m for m in [pieces[0]] + ["HloModule " + m for m in pieces[1:]] if "{" in m]  # a comment header alone: no
    best_wall = best_cpu = float("inf")
    try:
        for _ in range(int(sys.argv[1])):
            wall, cpu = time.perf_counter(), time.process_time()
            for m in modules:
                _hlo.hlo_module_from_text(m)
            best_wall, best_cpu = min(best_wall, time.perf_counter() - wall), min(best_cpu, time.process_time() - cpu)
    except Exception:  # this jaxlib rejects the module (older torch_xla custom-call syntax): no figure
        continue
    res[path] = {"wall": best_wall, "cpu": best_cpu,
                 "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
print(json.dumps(res))
"""


def time_xla(paths: list[Path], repeats: int) -> dict[str, dict] | None:
    """XLA's C++ parser on the same files (texts read before timing), or None if unavailable."""
    try:
        import jaxlib._hlo  # noqa: F401

        cmd = [sys.executable]
    except ImportError:
        if not SAMPLES_PY.exists():
            return None
        cmd = [str(SAMPLES_PY)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([*cmd, "-c", _XLA, str(repeats), *map(str, paths)], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout)


def real_files() -> list[Path]:
    """The real modules, uncompressed once into benchmarks/out/hlo_real/ (the parse is timed, not gunzip)."""
    out = []
    (OUT / "hlo_real").mkdir(parents=True, exist_ok=True)
    for gz in REAL:
        path = OUT / "hlo_real" / gz.name.removesuffix(".gz")
        if not path.exists():
            path.write_bytes(gzip.decompress(gz.read_bytes()))
        out.append(path)
    return out


def concatenated(name: str, texts: list[str], target_mb: float) -> Path:
    """``texts`` one after another, round robin, to ``target_mb`` (written once to benchmarks/out/)."""
    path = OUT / f"{name}_{int(target_mb)}mb.txt"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    size, i = 0, 0
    with path.open("w") as fh:
        while size < target_mb * 1e6:
            text = texts[i % len(texts)]
            fh.write(text if text.endswith("\n") else text + "\n")
            size += len(text) + 1
            i += 1
    return path


def big_file(target_mb: float) -> Path:
    return concatenated("hlo_concat", [SEEDS[1].read_text(), SEEDS[0].read_text()], target_mb)


def child(path: str, repeats: int) -> None:
    one_core()
    print(json.dumps(time_ours(Path(path), repeats)))


def in_child(path: Path, repeats: int) -> dict:
    got, m = harness.run_json([sys.executable, __file__, "--child", str(path), "--repeats", str(repeats)], cwd=ROOT)
    return got | {"peak_rss_mib": m["peak_rss_mib"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big-mb", type=float, default=200)
    ap.add_argument("--real-mb", type=float, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child")
    harness.add_json_option(ap, None)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.child:
        return child(args.child, args.repeats)
    one_core()
    big = big_file(args.big_mb)
    real = real_files()
    real_big = concatenated("hlo_real_concat", [p.read_text() for p in real], args.real_mb)
    rows = []
    for path in SEEDS + real:
        rows.append((path, time_ours(path, args.repeats + 2)))
    rows.append((real_big, in_child(real_big, args.repeats)))
    rows.append((big, in_child(big, args.repeats)))
    idle = harness.run([sys.executable, "-c", "import polars, transforms.parsers.xla_hlo"], cwd=ROOT)
    baseline = idle["peak_rss_mib"]
    xla = time_xla([p for p, _ in rows], args.repeats) or {}

    head = f"{'file':28} {'MB':>7} {'rows':>9} {'ours MB/s':>10} {'(cpu)':>7} {'XLA MB/s':>9} {'(cpu)':>7} " \
           f"{'ours/XLA':>8} {'peak RSS':>9}"  # (cpu): MB per second of this process's CPU time, one core
    print(head)
    print("-" * len(head))
    for path, got in rows:
        mb = path.stat().st_size / 1e6
        x = xla.get(str(path))
        xla_cols = f"{mb / x['wall']:9.1f} {mb / x['cpu']:7.1f} {x['wall'] / got['wall']:7.1f}x" if x else \
            f"{'-':>9} {'-':>7} {'-':>8}"
        rss = f"{got['peak_rss_mib']:6.0f} MiB" if "peak_rss_mib" in got else f"{'-':>9}"
        print(f"{path.name[:28]:28} {mb:7.1f} {got['rows']:9d} {mb / got['wall']:10.1f} {mb / got['cpu']:7.1f} "
              f"{xla_cols} {rss}")
    print(f"\nbig file parsed in a child process; an idle child with polars + the parser imported: {baseline:.0f} MiB.")
    if xla:
        peaks = ", ".join(f"{Path(p).name[:12]} {v['peak_rss_mib']:.0f} MiB" for p, v in xla.items())
        print(f"XLA peak RSS (its own process, texts held in memory): {peaks}")
    else:
        print("XLA's parser not available (no jaxlib here and no .venv-samples).")
    if args.json:
        harness.write_json(args.json, {"files": {str(p): got | {"mb": p.stat().st_size / 1e6} for p, got in rows},
                                       "idle_child_peak_rss_mib": baseline, "xla": xla})


if __name__ == "__main__":
    main()
