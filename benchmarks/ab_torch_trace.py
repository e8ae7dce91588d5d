"""Old (a git revision's) vs new TORCH_TRACE parser: the same output on every real log, and CPU and peak RSS.

    .venv/bin/python benchmarks/ab_torch_trace.py [--ref main] check [LOG...]
    .venv/bin/python benchmarks/ab_torch_trace.py [--ref 2dd4525] [--repeats 3] [--json FILE] LOG...

The old parser is ``transforms/parsers/torch_trace.py`` at ``--ref`` with the modules whose output
it holds (``volatile.py``: the texts' normalising, ``inductor_code.py``: the output code's rows)
taken from that revision too, as package ``ref_torch_trace`` in a temporary folder.

``check``: every real log (tests/fixtures/torch_trace, data/corpus/torch_trace), or the logs named, parsed as
``dumpscope parse`` does (``transforms.parse.iter_dump``) by both: each table's rows and the
summary must be equal; prints what differs and exits 1 if anything does.

``LOG...``: each log parsed by each parser in a fresh child (``benchmarks/harness.py``: its CPU
seconds and peak RSS; the modules imported before the clock starts, ~0.2 s that bench_torch_trace.py
counts), old and new alternated ``--repeats`` times so load on a shared machine
falls on both alike; the best CPU and the highest peak of each are shown.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

REAL_LOGS = (ROOT / "tests" / "fixtures" / "torch_trace", ROOT / "data" / "corpus" / "torch_trace")
_MODULE = "transforms.parsers.torch_trace"
# The ref's own copies of what shapes the parser's output, imported from one another.
_REF_FILES = {"torch_trace": "transforms/parsers/torch_trace.py", "volatile": "transforms/volatile.py",
              "inductor_code": "transforms/parsers/inductor_code.py"}
_IMPORTS = {"from transforms.volatile import": "from ref_torch_trace.volatile import",
            "from transforms.parsers import inductor_code": "from ref_torch_trace import inductor_code"}

_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[3])
if sys.argv[2] == "old":  # iter_dump finds the parser by its module name
    import ref_torch_trace.torch_trace as old
    sys.modules["transforms.parsers.torch_trace"] = old
import transforms.parse, transforms.parsers.torch_trace  # both imported before the clock starts
from benchmarks import harness
from benchmarks.bench_parse import parse_file
got = harness.best_of(lambda: parse_file(sys.argv[1]), 1)
rows, summary = got["result"]
print(json.dumps({"cpu_s": got["cpu_s"], "rows": rows, "status": summary.status.value}))
"""


def make_ref(rev: str, out: Path) -> Path:
    """The parser and the modules it holds output of, at ``rev``, as package ``ref_torch_trace`` under ``out``."""
    pkg = out / "ref_torch_trace"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    for name, path in _REF_FILES.items():
        text = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout
        for old, new in _IMPORTS.items():
            text = text.replace(old, new)
        (pkg / f"{name}.py").write_text(text)
    return out


def _load_ref(where: Path):
    sys.path.insert(0, str(where))
    import ref_torch_trace.torch_trace as ref  # noqa: PLC0415

    return ref


def _parse(module, path: Path) -> tuple[dict, object]:
    """Every table's rows (one frame each) and the summary of ``path`` through ``module``."""
    import polars as pl  # noqa: PLC0415

    from transforms.parse import iter_dump  # noqa: PLC0415
    from transforms.parsers.formats import module_for  # noqa: PLC0415
    from transforms.records import TableBatch  # noqa: PLC0415

    saved = sys.modules[_MODULE]
    sys.modules[_MODULE] = module
    module_for.cache_clear()  # it keeps the module it found first
    try:
        batches: dict[str, list] = {}
        summary = None
        with open(path, "rb") as raw:
            for item in iter_dump(raw, path.name, dump_id="ab"):
                if isinstance(item, TableBatch):
                    batches.setdefault(item.table, []).append(item.frame)
                else:
                    summary = item
    finally:
        sys.modules[_MODULE] = saved
        module_for.cache_clear()
    return {t: pl.concat(fs) for t, fs in batches.items()}, summary


def check(ref, logs: list[Path]) -> int:
    import transforms.parsers.torch_trace as new  # noqa: PLC0415

    bad = 0
    for path in logs:
        (old_tables, old_summary), (new_tables, new_summary) = _parse(ref, path), _parse(new, path)
        diffs = [f"tables {sorted(old_tables)} != {sorted(new_tables)}"] if old_tables.keys() != new_tables.keys() else []
        diffs += [f"{t}: {old_tables[t].height} rows != {new_tables[t].height}" for t in sorted(old_tables)
                  if t in new_tables and not old_tables[t].equals(new_tables[t])]
        if dataclasses.asdict(old_summary) != dataclasses.asdict(new_summary):
            diffs.append("summary differs")
        rows = sum(f.height for f in new_tables.values())
        print(f"{path}: {rows} rows, {'; '.join(diffs) or 'equal'}", flush=True)
        bad += bool(diffs)
    print(f"{len(logs)} logs, {bad} differ")
    return 1 if bad or not logs else 0


def measure(path: Path, which: str, ref_dir: Path) -> dict:
    got, m = harness.run_json([sys.executable, "-c", _CHILD, str(path), which, str(ref_dir)], cwd=ROOT)
    return got | {"peak_rss_mib": m["peak_rss_mib"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", default="main", help="git revision of the old parser (default: main)")
    ap.add_argument("--repeats", type=int, default=3)
    harness.add_json_option(ap, None)
    ap.add_argument("logs", nargs="+", help="'check', or TORCH_TRACE logs to time")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ab-torch-trace-") as tmp:
        ref_dir = make_ref(args.ref, Path(tmp))
        if args.logs[0] == "check":
            logs = [Path(p).resolve() for p in args.logs[1:]] or sorted(p for d in REAL_LOGS for p in d.rglob("*.log*"))
            sys.exit(check(_load_ref(ref_dir), logs))
        figures = {}
        for log in map(Path, args.logs):
            mb = log.stat().st_size / 1e6
            runs: dict[str, list[dict]] = {"old": [], "new": []}
            for _ in range(args.repeats):
                for which in runs:
                    runs[which].append(measure(log, which, ref_dir))
            figures[str(log)] = {"mb": mb, "ref": args.ref, **runs}
            best = {w: min(r["cpu_s"] for r in rs) for w, rs in runs.items()}
            peak = {w: max(r["peak_rss_mib"] for r in rs) for w, rs in runs.items()}
            print(f"{log.name[:44]:44s} {mb:7.1f} MB  old ({args.ref}) {mb / best['old']:5.1f} MB/s {peak['old']:4.0f} MiB"
                  f"  new {mb / best['new']:5.1f} MB/s {peak['new']:4.0f} MiB  ({best['old'] / best['new']:.3f}x)",
                  flush=True)
    if args.json:
        harness.write_json(args.json, figures)


if __name__ == "__main__":
    main()
