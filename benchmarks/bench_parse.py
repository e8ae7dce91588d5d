"""Parse throughput per format on the seeds, peak RSS, and `dumpscope parse` latency.

Each measurement runs in a fresh child process (one core, nothing else loaded), so
its peak RSS is its own. Throughput counts the whole path a nightly run takes:
bytes → lines → records → polars frames with identity columns (iter_dump), with the
frames dropped as they come, as a loader would after writing them.

    .venv/bin/python benchmarks/bench_parse.py [FILE ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "tests" / "fixtures" / "seeds"

_CHILD = r"""
import json, resource, sys, time
from transforms.parse import iter_dump
from transforms.records import TableBatch
path = sys.argv[1]
best, rows, summary = None, 0, None
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter(); rows = 0
    with open(path, "rb") as raw:
        for item in iter_dump(raw, path, dump_id="bench"):
            if isinstance(item, TableBatch): rows += item.frame.height
            else: summary = item
    dt = time.perf_counter() - t0
    best = dt if best is None else min(best, dt)
print(json.dumps({"seconds": best, "rows": rows, "kind": summary.kind.value, "status": summary.status.value,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(path: Path, repeats: int = 3) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(repeats)], cwd=ROOT, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    got["mb"] = path.stat().st_size / 1e6
    got["mb_per_s"] = got["mb"] / got["seconds"]
    return got


def cli_latency(path: Path, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "flows.cli", "parse", "--json", str(path)], cwd=ROOT, capture_output=True, check=True)
        best = min(best, time.perf_counter() - t0)
    return best


def main(paths: list[Path]) -> None:
    print(f"{'file':<44} {'kind':<24} {'MB':>7} {'rows':>8} {'s':>7} {'MB/s':>7} {'RSS MiB':>8}")
    for path in paths:
        m = measure(path)
        print(f"{path.name[-44:]:<44} {m['kind']:<24} {m['mb']:>7.2f} {m['rows']:>8} {m['seconds']:>7.3f} {m['mb_per_s']:>7.1f} {m['peak_rss_mib']:>8.0f}")
    worst = max(paths, key=lambda p: p.stat().st_size)
    print(f"\n`dumpscope parse --json {worst.name}` wall time (process start included): {cli_latency(worst):.2f} s")


# The seeds, plus the largest real dump of each format the seeds lack.
DEFAULT = [
    *sorted(SEEDS.glob("*.txt")),
    ROOT / "tests/fixtures/xla_buffer_assignment/deep_grad/module_0008.jit_loss.cpu_after_optimizations-buffer-assignment-values.txt",
    ROOT / "tests/fixtures/xla_buffer_assignment/deep_grad/module_0008.jit_loss.cpu_after_optimizations-live-range.txt",
    *sorted((ROOT / "tests/fixtures/xla_memory_usage_report/deep_grad").glob("*.txt")),
    ROOT / "tests/fixtures/inductor_output_code/convnet/model__0_forward_1.0/output_code.py",
]

if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]] or DEFAULT)
