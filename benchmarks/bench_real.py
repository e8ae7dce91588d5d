"""Parsing LLM-scale real HLO modules: CPU MB/s and peak RSS of every entry point (issue 14).

The inputs are made from the real modules of ``data/corpus`` (MLPerf DLRM and torch_xla
Llama 2 / BERT graphs, before optimizations; see its MANIFEST.json) into ONE module of
about ``--sizes`` MB each (``real_module``): copy k of a source module gets every
``%name`` (computations and instructions) suffixed with ``_c<k>`` and every ``op_name``
prefixed with ``copy<k>/`` (so metadata texts are as distinct as in a real big module,
one op name per layer), and loses its ``ENTRY`` keyword except the last copy, whose
header line the module takes. The copies cycle through the sources in whole rounds
(3.0 MB each) until the size is reached: 54 and 215 MB for the default 50 and 200.
Deterministic; written once under ``benchmarks/out/real/`` (git-ignored).

Each entry point runs in a fresh process; its peak RSS and CPU time (user + sys, all its
threads) come from ``benchmarks/harness.py`` (``os.wait4`` in a small launcher), for it alone:

- ``dumpscope parse FILE``;
- ``dumpscope parse --json FILE``;
- ``dumpscope parse --json --table hlo_instructions --limit 0 FILE`` (every row printed);
- staging: the nightly's parse worker (``flows.ingest.staging.stage_chunk``, what its process
  pool runs: a spawned worker imports ``flows.ingest.staging`` only, no Prefect, no DuckDB) on a
  local bucket holding the module, writing staged Parquet;
- stage_object: one object staged (``flows.ingest.staging.stage_object``), without the chunk.

Each run must say ``ok`` with the instruction count the copies add up to (the parser's
count of each source times its copies), and staging must stage that many rows.
Benchmarks report, they do not assert figures: peak RSS is printed with whether it is
under ``RSS_TARGET_MIB`` and flat (the largest size's peak within ``FLAT_SLACK_MIB`` of
the smallest's), and everything goes to ``benchmarks/out/bench_real.json`` (``--json``).

    .venv/bin/python benchmarks/bench_real.py [--sizes 50 200] [--only parse,json,rows,staging,stage_object]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

CORPUS = ROOT / "data" / "corpus"
OUT = ROOT / "benchmarks" / "out"
REAL = OUT / "real"
# Sources of the big module, in the order the copies cycle through; the last copy (whose
# header and ENTRY the module keeps) is of the last one.
SOURCES = (
    "mlperf_dlrm_tpuv3_32.before_optimizations.txt.gz",
    "torch_xla_bert_dp.before_optimizations.txt.gz",
    "torch_xla_bert_single.before_optimizations.txt.gz",
    "torch_xla_llama2_tp4_pp2.before_optimizations.txt.gz",
    "torch_xla_llama2_tp8_pp4.before_optimizations.txt.gz",
    "torch_xla_llama2_tp1_pp1.before_optimizations.txt.gz",
)
RSS_TARGET_MIB = 300
FLAT_SLACK_MIB = 40  # a 4x larger module may cost this much more peak RSS and still count as flat
ENTRY_POINTS = {
    "parse": ["parse"],
    "json": ["parse", "--json"],
    "rows": ["parse", "--json", "--table", "hlo_instructions", "--limit", "0"],
    "staging": None,  # the nightly's parse worker, see _STAGING_CHILD
    "stage_object": None,  # flows.ingest.staging.stage_object alone, in a process without Prefect
}

_NAME = re.compile(r"%([A-Za-z_][\w.\-]*)")
_OP_NAME = re.compile(r'\bop_name="')


@cache
def source_text(name: str) -> str:
    return gzip.decompress((CORPUS / name).read_bytes()).decode("utf-8")


@cache
def source_instructions(name: str) -> int:
    """What the parser counts in the source module (``hlo.instructions``)."""
    sys.path.insert(0, str(ROOT))
    from transforms.parse import iter_dump
    from transforms.records import DumpSummary

    raw = source_text(name).encode()
    summary = [i for i in iter_dump(io.BytesIO(raw), name) if isinstance(i, DumpSummary)][0]
    assert summary.status.value == "ok", summary.errors
    return int(summary.metrics["hlo.instructions"])


def copy_of(name: str, k: int, *, entry: bool) -> str:
    """The computations of copy ``k`` of a source module (its header line left out), with
    names and op names made its own."""
    body = source_text(name).partition("\n")[2]
    body = _NAME.sub(lambda m: f"%{m[1]}_c{k}", body)
    body = _OP_NAME.sub(f'op_name="copy{k}/', body)
    if not entry:
        body = body.replace("\nENTRY ", "\n")
    return body


def real_module(mb: int) -> tuple[Path, dict]:
    """The ~``mb`` MB module (built once) and what parsing it must say."""
    path = REAL / f"module_0000.llm_{mb}mb.before_optimizations.txt"
    plan, size, k = [], 0, 0
    while size < mb * 1e6 or k % len(SOURCES) != 0:  # whole rounds: the last copy is the last source's
        name = SOURCES[k % len(SOURCES)]
        plan.append(name)
        size += len(source_text(name))
        k += 1
    expected = {"instructions": sum(source_instructions(n) for n in plan), "copies": len(plan),
                "module": f"llm_{mb}mb"}
    stamp = path.with_suffix(".json")
    if not (path.exists() and stamp.exists() and json.loads(stamp.read_text()) == expected):
        REAL.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as out:
            for k, name in enumerate(plan):
                body = copy_of(name, k, entry=k == len(plan) - 1)
                if k == 0:  # the module's header is the entry copy's (its aliases name that ENTRY's parameters)
                    first = source_text(SOURCES[-1]).partition("\n")[0]
                    out.write(re.sub(r"HloModule\s+[^\s,]+", f"HloModule {expected['module']}", first, count=1) + "\n")
                out.write(body.rstrip("\n") + "\n\n")
        os.replace(tmp, path)
        stamp.write_text(json.dumps(expected))
    return path, expected


_STAGING_CHILD = r"""
import json, sys
from pathlib import Path
from flows.ingest.bucket import list_objects
from flows.ingest.bucket_access import connect
bucket, staging, worker = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "staging"
objs = [o for o in list_objects(bucket) if o.role.value == "dump"]
if worker:
    from flows.ingest.staging import stage_chunk
    [out] = stage_chunk(bucket, None, objs, staging)
    assert out.error is None, out.error
    staged = out.staged
else:
    from flows.ingest.staging import stage_object
    staged = stage_object(connect(bucket)[0], objs[0], staging)
print(json.dumps({"status": staged.status, "metrics": staged.summary["metrics"], "rows": staged.summary["rows"]}))
"""


def run_child(argv: list[str], stdout, scratch: Path) -> dict:
    """Run ``argv`` in a fresh process (``benchmarks/harness.py``); its wall time, CPU time and
    peak RSS (its own, not this process's)."""
    with (scratch / "stderr").open("w+b") as err:
        m = harness.run(argv, cwd=ROOT, stdout=stdout, stderr=err)
        if m["returncode"] != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(argv[-3:])}: exit failed\n{err.read().decode(errors='replace')[-2000:]}")
    return {"cpu_s": m["cpu_s"], "peak_rss_mib": m["peak_rss_mib"], "wall_s": m["wall_s"]}


def measure(entry: str, path: Path, expected: dict, scratch: Path) -> dict:
    mb = path.stat().st_size / 1e6
    out_file = scratch / f"{entry}.out"
    if entry in ("staging", "stage_object"):
        bucket = scratch / "bucket"
        job = bucket / "2026-01-01" / "job"
        job.mkdir(parents=True, exist_ok=True)
        os.link(path, job / path.name)
        staging = scratch / "staging"
        with out_file.open("wb") as out:
            got = run_child([sys.executable, "-c", _STAGING_CHILD, str(bucket), str(staging), entry], out, scratch)
        said = json.loads(out_file.read_text())
        got["rows"] = said["rows"].get("hlo_instructions", 0)
        if got["rows"] != expected["instructions"]:
            raise AssertionError(f"staged {got['rows']} instruction rows, expected {expected['instructions']}")
        shutil.rmtree(bucket)
        shutil.rmtree(staging)
    else:
        with out_file.open("wb") as out:
            got = run_child([sys.executable, "-m", "flows.cli", *ENTRY_POINTS[entry], str(path)], out, scratch)
        if entry == "parse":  # the rich report: the instruction count is in its metrics table
            said = {"status": "ok" if " ok" in out_file.read_text() else "?",
                    "metrics": {"hlo.instructions": _rich_metric(out_file.read_text(), "hlo.instructions")}}
        else:
            said = json.loads(out_file.open().readline())
            if entry == "rows":
                got["rows"] = len(said["table"]["rows"])
                if got["rows"] != expected["instructions"]:
                    raise AssertionError(f"printed {got['rows']} instruction rows, expected {expected['instructions']}")
    if said["status"] != "ok" or said["metrics"]["hlo.instructions"] != expected["instructions"]:
        raise AssertionError(f"{entry} on {path.name}: {said['status']}, "
                             f"{said['metrics'].get('hlo.instructions')} instructions, expected {expected['instructions']}")
    out_file.unlink()
    return got | {"mb": mb, "mb_per_cpu_s": mb / got["cpu_s"]}


def _rich_metric(text: str, key: str) -> int | None:
    m = re.search(rf"{re.escape(key)}\s*│\s*([\d,]+)", text)
    return int(m[1].replace(",", "")) if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 200], help="module sizes (MB)")
    ap.add_argument("--only", default=",".join(ENTRY_POINTS), help="entry points: " + ",".join(ENTRY_POINTS))
    harness.add_json_option(ap, OUT / "bench_real.json")
    args = ap.parse_args()
    entries = args.only.split(",")
    modules = {}
    for mb in args.sizes:
        t0 = time.perf_counter()
        modules[mb] = real_module(mb)
        path, expected = modules[mb]
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1e6:.1f} MB, {expected['copies']} copies, "
              f"{expected['instructions']:,} instructions ({time.perf_counter() - t0:.1f} s)")
    results: dict[str, dict[str, dict]] = {e: {} for e in entries}
    print(f"\n{'entry point':<12} {'MB':>6} {'CPU s':>7} {'MB/s/core':>10} {'wall s':>7} {'peak RSS MiB':>13}")
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        for entry in entries:
            for mb, (path, expected) in modules.items():
                got = measure(entry, path, expected, Path(tmp))
                results[entry][str(mb)] = got
                print(f"{entry:<12} {got['mb']:>6.1f} {got['cpu_s']:>7.1f} {got['mb_per_cpu_s']:>10.1f} "
                      f"{got['wall_s']:>7.1f} {got['peak_rss_mib']:>13.0f}")
    verdicts = {}
    small, big = str(min(args.sizes)), str(max(args.sizes))
    for entry, by_size in results.items():
        peak = by_size[big]["peak_rss_mib"]
        growth = peak - by_size[small]["peak_rss_mib"]
        # Start-up (imports) costs the same at every size: the difference between two sizes is the parse's own rate.
        marginal = (by_size[big]["mb"] - by_size[small]["mb"]) / max(by_size[big]["cpu_s"] - by_size[small]["cpu_s"], 1e-9)
        verdicts[entry] = {"peak_rss_mib": peak, "growth_mib": growth, "under_target": peak < RSS_TARGET_MIB,
                           "flat": growth <= FLAT_SLACK_MIB, "marginal_mb_per_cpu_s": marginal}
        print(f"{entry:<12}: peak {peak:.0f} MiB at {big} MB ({'<' if peak < RSS_TARGET_MIB else '>='} {RSS_TARGET_MIB}), "
              f"{growth:+.0f} MiB from {small} MB ({'flat' if growth <= FLAT_SLACK_MIB else 'GROWS'}); "
              f"{marginal:.0f} MB/s per core without start-up")
    report = {"measured": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpus": os.cpu_count(), "results": results,
              "verdicts": verdicts, "rss_target_mib": RSS_TARGET_MIB, "flat_slack_mib": FLAT_SLACK_MIB}
    written = harness.write_json(args.json, report)
    print(f"\nfigures: {written.resolve().relative_to(ROOT) if written.resolve().is_relative_to(ROOT) else written}")


if __name__ == "__main__":
    main()
