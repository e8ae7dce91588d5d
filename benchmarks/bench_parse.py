"""Parse throughput per format on the seeds, peak RSS, and `dumpscope parse` latency.

Each measurement runs in a fresh child process (one core, nothing else loaded), so
its peak RSS is its own. Throughput counts the whole path a nightly run takes:
bytes → lines → records → polars frames with identity columns (iter_dump), with the
frames dropped as they come, as a loader would after writing them.

Peak RSS and the CLI's wall time come from ``benchmarks/harness.py``.

    .venv/bin/python benchmarks/bench_parse.py [FILE ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

SEEDS = ROOT / "tests" / "fixtures" / "seeds"

def parse_file(path: str) -> tuple[int, object]:
    """Parse ``path`` the way a night does, bytes to frames: (rows, the dump's summary).
    Run in a fresh child (``_CHILD``, and bench_torch_trace's), timed there."""
    from transforms.parse import iter_dump
    from transforms.records import TableBatch

    rows, summary = 0, None
    with open(path, "rb") as raw:
        for item in iter_dump(raw, path, dump_id="bench"):
            if isinstance(item, TableBatch):
                rows += item.frame.height
            else:
                summary = item
    return rows, summary


_CHILD = r"""
import json, sys
from benchmarks import harness
from benchmarks.bench_parse import parse_file
got = harness.best_of(lambda: parse_file(sys.argv[1]), int(sys.argv[2]))
rows, summary = got["result"]
print(json.dumps({"seconds": got["wall_s"], "rows": rows, "kind": summary.kind.value, "status": summary.status.value}))
"""


def measure(path: Path, repeats: int = 3) -> dict:
    got, m = harness.run_json([sys.executable, "-c", _CHILD, str(path), str(repeats)], cwd=ROOT)
    got["peak_rss_mib"] = m["peak_rss_mib"]  # the child's whole life: imports, every repeat
    got["mb"] = path.stat().st_size / 1e6
    got["mb_per_s"] = got["mb"] / got["seconds"]
    return got


def cli_latency(path: Path, repeats: int = 3) -> dict:
    runs = [harness.run([sys.executable, "-m", "flows.cli", "parse", "--json", str(path)], cwd=ROOT, capture=True)
            for _ in range(repeats)]
    if any(r["returncode"] for r in runs):
        raise RuntimeError(f"dumpscope parse --json {path}: {[r['returncode'] for r in runs]}")
    return {k: v for k, v in harness.best(runs).items() if k not in ("stdout", "stderr")}


def main(paths: list[Path], json_out: Path | None) -> None:
    print(f"{'file':<44} {'kind':<24} {'MB':>7} {'rows':>8} {'s':>7} {'MB/s':>7} {'RSS MiB':>8}")
    figures: dict = {"files": {}}
    for path in paths:
        m = measure(path)
        figures["files"][str(path)] = m
        print(f"{path.name[-44:]:<44} {m['kind']:<24} {m['mb']:>7.2f} {m['rows']:>8} {m['seconds']:>7.3f} {m['mb_per_s']:>7.1f} {m['peak_rss_mib']:>8.0f}")
    worst = max(paths, key=lambda p: p.stat().st_size)
    cli = figures["cli_latency"] = {"file": str(worst)} | cli_latency(worst)
    print(f"\n`dumpscope parse --json {worst.name}` wall time (process start included): {cli['wall_s']:.2f} s")
    if json_out:
        harness.write_json(json_out, figures)


# The seeds, plus the largest real dump of each format the seeds lack.
DEFAULT = [
    *sorted(SEEDS.glob("*.txt")),
    ROOT / "tests/fixtures/xla_buffer_assignment/deep_grad/module_0008.jit_loss.cpu_after_optimizations-buffer-assignment-values.txt",
    ROOT / "tests/fixtures/xla_buffer_assignment/deep_grad/module_0008.jit_loss.cpu_after_optimizations-live-range.txt",
    *sorted((ROOT / "tests/fixtures/xla_memory_usage_report/deep_grad").glob("*.txt")),
    ROOT / "tests/fixtures/inductor_output_code/convnet/model__0_forward_1.0/output_code.py",
]

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="dumps to parse (default: the seeds and a few real dumps)")
    harness.add_json_option(ap, None)
    args = ap.parse_args()
    main(args.files or DEFAULT, args.json)
