"""A big night for Dumpscope, made from real dumps: 40 jobs, 1,440 files, 1.09 GB of text.

Issue 13 (scale). ``night(k, bucket)`` writes run ``<bucket>/<date of night k>/`` with a
``run.json`` (``started_at`` one day later each night, a fake 40-hex ``commit``) and 40
job directories. Each job holds:

- 25 XLA HLO dumps (``xla_dump/module_NNNN.<program>.<stage>.txt.gz``) made from the
  real modules of ``data/corpus`` (MLPerf DLRM on TPU before/after optimizations,
  torch_xla Llama 2 and BERT graphs; see its MANIFEST.json) and of
  ``tests/fixtures/seeds`` 001 (torch_xla GPU, after optimizations) and 004 (JAX pmap
  GPU, after optimizations); ``SLOTS`` says how many of each;
- the dump files of one job of the sample bucket (``data/sample_bucket/2026-11-20``:
  jax-jit, jax-pmap, torch-inductor or torch-onnx in turn): buffer assignments, live
  ranges, memory usage reports, Inductor debug directories, ONNX export reports...

Every file is distinct content, so nothing dedupes across jobs: an HLO dump carries its
own module name (``<module>_<copy>_j<job>``, first line), a sample file gets ``job + 1``
trailing newlines (harmless to every parser).

From one night to the next exactly ``round(10 % of the files)`` change content and every
other file is byte-identical to the night before. The changed files are drawn (seeded by
the night number) from the HLO dumps, and each gets one change a compiler commit makes:
a changed integer constant, a changed dimension in one instruction's shape (not a root's or a constant's: XLA refuses either alone), or an extra
instruction in the entry computation. Night k's content of a file is its base text with
the change of the last night <= k that drew it (none: the base), and that change depends
on the night, so a file drawn at night k always differs from night k-1.

Disk: every version of a file is written once, gzipped, into a store
(``benchmarks/out/scale/store-v<CHANGES_VERSION>``) and hard-linked into the run directory, so a night costs
only the versions it is the first to need (144 files, ~110 MB of text, ~7 MB gzipped,
for night k after night k-1; all of them for the first night or a night made directly).
A whole night: 1,440 files, 1.09 GB uncompressed (1.08 GB of it HLO), 68 MB gzipped;
written in ~9 s from an empty store on 2 cores (measured 2026-11-23).

    .venv/bin/python benchmarks/scale_workload.py --night 2 [--bucket DIR] [--verify]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import date, timedelta
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "data" / "corpus"
SEEDS = ROOT / "tests" / "fixtures" / "seeds"
SAMPLE_NIGHT = ROOT / "data" / "sample_bucket" / "2026-11-20"
SAMPLE_JOBS = ("jax-jit", "jax-pmap", "torch-inductor", "torch-onnx")
OUT = ROOT / "benchmarks" / "out" / "scale"
# The store holds each version once, by file and night: a change to what ``change`` writes is a new store.
# 2: shapes of roots and constants are not padded (the reader refuses them alone, as XLA does).
CHANGES_VERSION = 2
STORE = OUT / f"store-v{CHANGES_VERSION}"

N_JOBS = 40
CHANGE_FRACTION = 0.10
FIRST_NIGHT = date(2025, 11, 1)  # night 366 is 2026-11-01: run.json's started_at must not be in the future
GZIP_LEVEL = 6  # gzip's default


@dataclass(frozen=True)
class Slot:
    """``copies`` HLO dumps per job made from one real module."""

    key: str  # program name stem
    source: Path
    stage: str  # the stage part of XLA's dump file name
    copies: int


SLOTS = (
    Slot("gnmt_pmap", SEEDS / "004_83a80cec1e7cc5e6.txt", "sm_7.0_gpu_after_optimizations", 6),
    Slot("dlrm_tpu", CORPUS / "mlperf_dlrm_tpuv3_32.before_optimizations.txt.gz", "before_optimizations", 4),
    Slot("dlrm_tpu", CORPUS / "mlperf_dlrm_tpuv3_32.after_optimizations.txt.gz", "tpu_after_optimizations", 4),
    Slot("llama2_tp1", CORPUS / "torch_xla_llama2_tp1_pp1.before_optimizations.txt.gz", "before_optimizations", 4),
    Slot("llama2_tp8_pp4", CORPUS / "torch_xla_llama2_tp8_pp4.before_optimizations.txt.gz", "before_optimizations", 2),
    Slot("llama2_tp4_pp2", CORPUS / "torch_xla_llama2_tp4_pp2.before_optimizations.txt.gz", "before_optimizations", 1),
    Slot("bert_dp", CORPUS / "torch_xla_bert_dp.before_optimizations.txt.gz", "before_optimizations", 1),
    Slot("bert_single", CORPUS / "torch_xla_bert_single.before_optimizations.txt.gz", "before_optimizations", 1),
    Slot("qwen_decoder", SEEDS / "001_a0c5460ce1af2dbe.txt", "sm_8.0_gpu_after_optimizations", 2),
)


@dataclass(frozen=True)
class File:
    """One file of every night: ``job/rel``; HLO dumps (``slot`` set) may change, sample files never."""

    index: int
    job: int
    job_name: str
    rel: str
    slot: int | None = None  # index into SLOTS
    program: str | None = None  # the module name it carries
    sample: Path | None = None


# ---------------------------------------------------------------- the files of a night


def job_name(j: int) -> str:
    return f"{SAMPLE_JOBS[j % len(SAMPLE_JOBS)]}-{j:02d}"


@cache
def files() -> tuple[File, ...]:
    out: list[File] = []
    for j in range(N_JOBS):
        name = job_name(j)
        n = 0
        for s, slot in enumerate(SLOTS):
            for c in range(slot.copies):
                program = f"{slot.key}_{c}_j{j:02d}"
                rel = f"xla_dump/module_{n:04d}.{program}.{slot.stage}.txt.gz"
                out.append(File(len(out), j, name, rel, slot=s, program=program))
                n += 1
        src = SAMPLE_NIGHT / SAMPLE_JOBS[j % len(SAMPLE_JOBS)]
        for p in sorted(q for q in src.rglob("*") if q.is_file()):
            out.append(File(len(out), j, name, p.relative_to(src).as_posix(), sample=p))
    return tuple(out)


def changeable() -> list[int]:
    return [f.index for f in files() if f.slot is not None]


def n_changed() -> int:
    return round(CHANGE_FRACTION * len(files()))


def drawn(k: int) -> list[int]:
    """Indexes of the files whose content changes from night k-1 to night k (k >= 2)."""
    if k < 2:
        return []
    return sorted(random.Random(f"dumpscope-scale-night-{k}").sample(changeable(), n_changed()))


@cache
def versions(k: int) -> tuple[int, ...]:
    """Per file, the last night <= k that changed it (0: its base content)."""
    if k <= 1:
        return (0,) * len(files())
    out = list(versions(k - 1))
    for i in drawn(k):
        out[i] = k
    return tuple(out)


def run_id(k: int) -> str:
    return (FIRST_NIGHT + timedelta(days=k - 1)).isoformat()


def run_json(k: int) -> dict:
    return {"started_at": f"{run_id(k)}T02:00:00+00:00",
            "commit": hashlib.sha1(f"dumpscope-scale-commit-{k}".encode()).hexdigest(),
            "tags": ["nightly", "scale-bench"], "night": k}


# ---------------------------------------------------------------- contents


@cache
def _source_text(path: Path) -> str:
    raw = path.read_bytes()
    return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")


_CONSTANT = re.compile(r"(?m)^\s*(?:ROOT )?%?[\w.\-]+ = [a-z]+\d*\[\] constant\((-?\d+)\)")
# Not a ROOT (its computation's header states its shape) nor a constant (its literal has that many elements): XLA's
# parser refuses either padded alone, and so does the reader (transforms/parsers/hlo_checks.py).
_SHAPE = re.compile(r"(?m)^\s*%?[\w.\-]+ = [a-z]+\d*\[(\d+)[,\]](?![^\n]*\bconstant\()")
_ENTRY_ROOT = re.compile(r"(?m)^  ROOT ")


@cache
def _candidates(path: Path) -> dict[str, list[tuple[int, int]]]:
    """Where a change can go in a module's text: spans of integer scalar constants and of
    the first dimension of instruction shapes (>= 2; not a root's or a constant's), and the entry computation's ROOT."""
    text = _source_text(path)
    entry = text.find("\nENTRY ")
    root = _ENTRY_ROOT.search(text, entry) if entry >= 0 else None
    return {
        "constant": [m.span(1) for m in _CONSTANT.finditer(text)],
        "shape": [m.span(1) for m in _SHAPE.finditer(text) if int(m[1]) >= 2],
        "extra": [(root.start(), root.start())] if root else [],
    }


def _pick(*key: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "big")


def change(text: str, path: Path, index: int, night: int) -> tuple[str, str]:
    """``text`` (the module's source text) with the change night ``night`` makes to file
    ``index``, and what it was. Each change is a function of the night, never the base."""
    spots = _candidates(path)
    kinds = [k for k in ("constant", "shape", "extra") if spots[k]]
    kind = kinds[_pick("kind", index, night) % len(kinds)]
    start, end = spots[kind][_pick("spot", index, night) % len(spots[kind])]
    if kind == "constant":
        new = str(int(text[start:end]) + night)
    elif kind == "shape":
        new = str(int(text[start:end]) + 8 * night)  # a padded dimension
    else:
        pct = "%" if text.startswith("ROOT %", start + 2) else ""
        new = f"  {pct}bench.extra.{night} = s32[] constant({night})\n"
    return text[:start] + new + text[end:], f"{kind} at offset {start}"


def content(f: File, version: int) -> bytes:
    """The bytes of file ``f`` in version ``version`` (0: base; else the night that changed it)."""
    if f.sample is not None:
        raw = f.sample.read_bytes()
        gz = f.sample.suffix == ".gz"
        data = (gzip.decompress(raw) if gz else raw) + b"\n" * (f.job + 1)
        return gzip.compress(data, GZIP_LEVEL, mtime=0) if gz else data
    slot = SLOTS[f.slot]
    text = _source_text(slot.source)
    if version:
        text, _ = change(text, slot.source, f.index, version)
    first, _, rest = text.partition("\n")
    name = re.match(r"HloModule\s+([^\s,]+)", first)
    text = first[: name.start(1)] + f.program + first[name.end(1):] + "\n" + rest
    return gzip.compress(text.encode("utf-8"), GZIP_LEVEL, mtime=0)


def _stored(f: File, version: int) -> Path:
    return STORE / f.job_name / f"{f.rel}.v{version}"


def _materialise(item: tuple[int, int]) -> int:
    """Write one version into the store (no-op when there); returns its uncompressed size."""
    i, version = item
    f = files()[i]
    path = _stored(f, version)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.write_bytes(content(f, version))
        os.replace(tmp, path)
    return 0


# ---------------------------------------------------------------- writing a night


def materialise(k: int, *, workers: int | None = None) -> int:
    """Write into the store every version night ``k`` holds; returns how many were new."""
    todo = [(i, v) for i, v in enumerate(versions(k)) if not _stored(files()[i], v).exists()]
    if todo:
        with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
            list(pool.map(_materialise, todo, chunksize=8))
    return len(todo)


def stored(i: int, version: int) -> Path:
    """The store's file holding version ``version`` of file ``i`` (see ``materialise``)."""
    return _stored(files()[i], version)


def night(k: int, bucket: Path, *, workers: int | None = None) -> dict:
    """Write run ``run_id(k)`` into ``bucket`` (replacing it if present); returns its figures."""
    t0 = time.perf_counter()
    vers = versions(k)
    todo = materialise(k, workers=workers)
    run = bucket / run_id(k)
    tmp = bucket / f".{run_id(k)}.tmp"  # hidden: never listed as a run while being written
    shutil.rmtree(tmp, ignore_errors=True)
    for f, v in zip(files(), vers):
        dst = tmp / f.job_name / f.rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(_stored(f, v), dst)
        except OSError:
            shutil.copyfile(_stored(f, v), dst)
    (tmp / "run.json").write_text(json.dumps(run_json(k), indent=1) + "\n")
    shutil.rmtree(run, ignore_errors=True)
    tmp.rename(run)
    return {"night": k, "run_id": run_id(k), "path": str(run), "files": len(files()), "jobs": N_JOBS,
            "hlo_files": len(changeable()), "changed_from_previous": len(drawn(k)),
            "versions_written": todo, "seconds": time.perf_counter() - t0}


def describe(run: Path) -> dict:
    """Files, bytes on disk and uncompressed bytes (HLO and all) of a written run."""
    n = disk = text = hlo = 0
    for p in run.rglob("*"):
        if not p.is_file() or p.name == "run.json" and p.parent == run:
            continue
        raw = p.read_bytes()
        size = len(gzip.decompress(raw)) if p.suffix == ".gz" else len(raw)
        n, disk, text = n + 1, disk + len(raw), text + size
        hlo += size if "/xla_dump/" in p.as_posix() else 0
    return {"files": n, "bytes_on_disk": disk, "bytes_uncompressed": text, "hlo_bytes_uncompressed": hlo}


def compare(before: Path, after: Path) -> dict:
    """How many files of two runs differ in bytes (same job/rel paths)."""
    rels = sorted(p.relative_to(before) for p in before.rglob("*") if p.is_file() and p.name != "run.json")
    differ = sum(1 for r in rels if (after / r).read_bytes() != (before / r).read_bytes())
    missing = sum(1 for r in rels if not (after / r).exists())
    return {"files": len(rels), "differ": differ, "missing": missing, "fraction": differ / len(rels)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--night", type=int, required=True)
    ap.add_argument("--bucket", type=Path, default=OUT / "bucket")
    ap.add_argument("--verify", action="store_true",
                    help="also write night k-1 and count the files that differ between the two")
    args = ap.parse_args()
    args.bucket.mkdir(parents=True, exist_ok=True)
    fig = night(args.night, args.bucket)
    print(json.dumps(fig | describe(Path(fig["path"]))))
    if args.verify and args.night >= 2:
        prev = night(args.night - 1, args.bucket)
        print(json.dumps({"compare": compare(Path(prev["path"]), Path(fig["path"])), "expected": n_changed()}))


if __name__ == "__main__":
    main()
