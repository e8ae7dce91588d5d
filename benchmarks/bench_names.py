"""Names multiply nothing: a night of one TORCH_TRACE log that compiled 20,000 functions.

Issue 43, item 5: one 9 MB log with 20,000 compiled functions made 20,044 pages (686 MB) in
294 s, and the night's process tree reached 1.42 GiB with or without ``--memory-limit 1GB``.
Pages, memory and time must follow what a reader needs (``[site] max_series_pages``), not
the number of names in the input.

The log (``many_functions_log``) repeats the first ``compilation_metrics`` record of a real
log (data/corpus/torch_trace/comp_metrics.log.gz, pytorch/tlparse's test input) once per
function, each a function of its own: ``fn_<i>`` at line ``<i>``, frame ``<i>``. A whole night,
``dumpscope run --site --memory-limit 1GB --workers 2`` with a fresh ``PREFECT_HOME``, is
measured by ``benchmarks/harness.py``: wall time, the peak RSS of the whole process tree
(psutil, every 50 ms), the site's pages, files and bytes.

    .venv/bin/python benchmarks/bench_names.py [--functions 20000] [--memory-limit 1GB] [--json FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

SOURCE = ROOT / "data" / "corpus" / "torch_trace" / "comp_metrics.log.gz"
LOG_NAME = "dedicated_log_torch_trace_rank_0_names.log"


def many_functions_log(path: Path, functions: int) -> int:
    """Write a log of ``functions`` compiled functions (module docstring); returns its bytes."""
    text = gzip.decompress(SOURCE.read_bytes()).decode()
    prefix, _, body = next(line for line in text.splitlines() if '{"compilation_metrics"' in line).partition("] ")
    record = json.loads(body)
    metrics = record["compilation_metrics"]
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        for i in range(functions):
            metrics.update(co_name=f"fn_{i}", co_firstlineno=i + 1, frame_key=str(i))
            record.update(frame_id=i, frame_compile_id=0, attempt=0)
            line = f"{prefix}] {json.dumps(record)}\n"
            out.write(line)
            written += len(line)
    return written


def site_figures(site: Path) -> dict:
    files = [f for f in site.rglob("*") if f.is_file()]
    return {"site_files": len(files), "site_pages": sum(f.suffix == ".html" for f in files),
            "series_pages": sum(p.name != "index.html" for p in (site / "series").glob("*.html")),
            "site_mb": sum(f.stat().st_size for f in files) / 1e6}


def night(functions: int, memory_limit: str, work: Path) -> dict:
    bucket = work / "bucket" / "2026-11-29" / "torch-compile"
    bucket.mkdir(parents=True)
    log_bytes = many_functions_log(bucket / LOG_NAME, functions)
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    m = harness.run([str(ROOT / ".venv" / "bin" / "dumpscope"), "run", "--bucket", str(work / "bucket"),
                     "--warehouse", str(work / "warehouse.duckdb"), "--site", str(work / "site"), "--workers", "2",
                     "--memory-limit", memory_limit], cwd=work, env=env, capture=True, stderr=-2, timeout=1800)
    if m["returncode"] != 0:
        raise RuntimeError(f"the night failed (exit {m['returncode']}):\n{m['stdout'][-3000:]}")
    return {"functions": functions, "log_mb": log_bytes / 1e6, "memory_limit": memory_limit, "wall_s": m["wall_s"],
            "cpu_s": m["cpu_s"], "peak_rss_tree_mib": m["peak_rss_tree_mib"], "peak_rss_mib": m["peak_rss_mib"],
            **site_figures(work / "site")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--functions", type=int, default=20_000)
    ap.add_argument("--memory-limit", default="1GB")
    ap.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary directory)")
    harness.add_json_option(ap, ROOT / "benchmarks" / "out" / "bench_names.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-names-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        got = night(args.functions, args.memory_limit, work)
    from flows.resources import parse_memory

    got["under_limit"] = got["peak_rss_tree_mib"] <= parse_memory(args.memory_limit) / harness.MiB
    for key, value in got.items():
        print(f"{key:>20}: {value:,.1f}" if isinstance(value, float) else f"{key:>20}: {value}")
    if args.json:
        harness.write_json(args.json, got)


if __name__ == "__main__":
    main()
