"""TORCH_TRACE parse speed and memory on a large log made from the real ones.

    .venv/bin/python benchmarks/bench_torch_trace.py [--mb 200] [--small-mb 20] [--keep DIR] [--json FILE]

Builds a log of about ``--mb`` MB by repeating the records of the real logs in
tests/fixtures/torch_trace (every case but the ranked ones) with fresh compile ids: repetition
``i`` adds an offset to every ``frame_id`` and ``compile_id``, and moves the code to
``<file>.rep<i % 50>`` (50 programs), so each repetition is a new set of compiles, as a
long-running job that compiles many functions writes. Payloads are left as they are (their
MD5s still hold). Then parses it the way ``dumpscope parse`` does (``transforms.parse.iter_dump``
over the file, frames dropped as they come) in a fresh child process, one core, and prints
MB/s of CPU time and the child's peak RSS, for the large log and for one of ``--small-mb``:
flat memory means the two peaks are close. The peak comes from ``benchmarks/harness.py``.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

FIX = ROOT / "tests" / "fixtures" / "torch_trace"
PROGRAMS = 50

_CHILD = r"""
import json, sys
from benchmarks import harness
from benchmarks.bench_parse import parse_file
path = sys.argv[1]

got = harness.best_of(lambda: parse_file(path), 1)
rows, summary = got["result"]
print(json.dumps({"cpu_s": got["cpu_s"], "wall_s": got["wall_s"], "rows": rows,
                  "status": summary.status.value, "errors": summary.errors[:3], "programs": len(summary.programs),
                  "compiles": summary.metrics.get("dynamo.compiles")}))
"""

_FRAME = re.compile(r'"frame_id": (\d+)')
_CID = re.compile(r'"compile_id": "(\d+)/(\d+)"')


def _sources() -> list[list[str]]:
    logs = sorted(p for p in FIX.glob("*/dedicated_log_torch_trace_*.log.gz") if "_rank_" not in p.name)
    return [gzip.decompress(p.read_bytes()).decode().splitlines(keepends=True) for p in logs]


def build(path: Path, mb: float) -> None:
    """Write a log of about ``mb`` MB: the real logs repeated, compile ids and files renamed."""
    sources = _sources()
    frames = 1 + max(int(m[1]) for lines in sources for line in lines if not line.startswith("\t")
                     for m in _FRAME.finditer(line))
    target, written, rep = mb * 1e6, 0, 0
    with open(path, "w") as out:
        while written < target:
            for lines in sources:
                off = rep * frames
                suffix = f".rep{rep % PROGRAMS}"
                for line in lines:
                    if not line.startswith("\t"):
                        line = _FRAME.sub(lambda m: f'"frame_id": {int(m[1]) + off}', line)
                        line = _CID.sub(lambda m: f'"compile_id": "{int(m[1]) + off}/{m[2]}"', line)
                        line = line.replace('dumpscope_model.py"', f'dumpscope_model.py{suffix}"')
                    out.write(line)
                    written += len(line)
                rep += 1


def measure(path: Path) -> dict:
    got, m = harness.run_json([sys.executable, "-c", _CHILD, str(path)], cwd=ROOT)
    got["peak_rss_mib"] = m["peak_rss_mib"]
    got["mb"] = path.stat().st_size / 1e6
    got["mb_per_cpu_s"] = got["mb"] / got["cpu_s"]
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--small-mb", type=float, default=20)
    ap.add_argument("--keep", type=Path, help="write the logs here and keep them (default: a temporary directory)")
    harness.add_json_option(ap, None)
    args = ap.parse_args()
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        print(f"{'log':<34} {'MB':>7} {'compiles':>8} {'programs':>8} {'rows':>8} {'CPU s':>7} {'MB/s':>6} "
              f"{'RSS MiB':>8}  status")
        for mb in (args.small_mb, args.mb):
            path = where / f"dedicated_log_torch_trace_bench_{mb:g}mb.log"
            build(path, mb)
            m = measure(path)
            figures[path.name] = m
            print(f"{path.name:<34} {m['mb']:>7.1f} {m['compiles']:>8.0f} {m['programs']:>8} {m['rows']:>8} "
                  f"{m['cpu_s']:>7.2f} {m['mb_per_cpu_s']:>6.1f} {m['peak_rss_mib']:>8.0f}  {m['status']} {m['errors']}")
    if args.json:
        harness.write_json(args.json, figures)


if __name__ == "__main__":
    main()
