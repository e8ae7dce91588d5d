"""Old vs new XLA HLO parser: identical output on every HLO text input we have, whole and cut.

    PYTHONPATH=.:/tmp/ref_parser .venv/bin/python benchmarks/compare_hlo_parser.py [--big] [--cuts 10]

The old parser is a copy of transforms/parsers/{xla_hlo,xla_shapes,hlo_lines}.py and
transforms/reading.py at a git revision, importable as ``ref_hlo`` (imports renamed); make it with
``--make-ref REV DIR`` (e.g. ``--make-ref main /tmp/ref_parser``), then put DIR on PYTHONPATH.
Then the old and new ``LineReader`` must hand out the same lines (``compare_reading``). Each input goes
through ``transforms.parse.iter_dump`` (as the nightly reads it: gzip, line limits) once with each
parser; the batches (table, columns, dtypes, rows, values, nulls, batch heights) and the summary
(kind, stage, program, status, errors, truncated, metrics) must be equal. Inputs: every file under
data/corpus, data/sample_bucket and tests/fixtures that parses as xla_hlo, each whole and cut at
``--cuts`` offsets (mid-line and just after a newline), plus with ``--big`` the concatenations
bench_hlo builds in benchmarks/out/.
"""

from __future__ import annotations

import gzip
import io
import sys
from pathlib import Path

import polars as pl

import transforms.parse as parse_mod
from transforms.records import DumpKind, TableBatch

ROOT = Path(__file__).resolve().parents[1]
_module_for = parse_mod.module_for
_FILES = ("parsers/xla_hlo.py", "parsers/xla_shapes.py", "parsers/hlo_lines.py", "parsers/hlo_checks.py",
          "reading.py")


def make_ref(rev: str, out: Path) -> None:
    """The parser files at ``rev`` as package ``ref_hlo`` under ``out``, importing one another."""
    import subprocess

    pkg = out / "ref_hlo"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    for name in _FILES:
        got = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:transforms/{name}"],
                             capture_output=True, text=True)
        if got.returncode and name == "parsers/hlo_checks.py":  # before issue 48's checks: no such module
            continue
        got.check_returncode()
        text = got.stdout
        for mod in ("xla_shapes", "hlo_lines", "hlo_checks"):
            text = text.replace(f"from transforms.parsers import {mod}", f"from ref_hlo import {mod}")
            text = text.replace(f"from transforms.parsers.{mod} import", f"from ref_hlo.{mod} import")
        (pkg / name.rpartition("/")[2]).write_text(text)


def run(data: bytes, name: str, use_old: bool):
    parse_mod.module_for = (lambda k: old_hlo if k is DumpKind.XLA_HLO else _module_for(k)) if use_old else _module_for
    try:
        batches, summary = [], None
        for item in parse_mod.iter_dump(io.BytesIO(data), name):
            if isinstance(item, TableBatch):
                batches.append((item.table, item.frame))
            else:
                summary = item
    finally:
        parse_mod.module_for = _module_for
    return batches, summary


def same(a, b) -> str | None:
    (ba, sa), (bb, sb) = a, b
    for f in ("kind", "stage", "program", "status", "errors", "truncated", "metrics", "failed"):
        if getattr(sa, f, None) != getattr(sb, f, None):
            return f"summary.{f}: {getattr(sa, f, None)!r} != {getattr(sb, f, None)!r}"
    if [(t, f.height) for t, f in ba] != [(t, f.height) for t, f in bb]:
        return f"batches differ: {[(t, f.height) for t, f in ba][:20]} != {[(t, f.height) for t, f in bb][:20]}"
    for (t, fa), (_, fb) in zip(ba, bb):
        if fa.schema != fb.schema:
            return f"{t}: schema {fa.schema} != {fb.schema}"
        if not fa.equals(fb, null_equal=True):
            diff = pl.concat([fa.with_row_index("i"), fb.with_row_index("i")]).unique(keep="none", maintain_order=True)
            return f"{t}: values differ:\n{diff.head(6)}"
    return None


def read_all(reader_cls, data: bytes, **kw) -> tuple:
    """Every line with the reader's ``lines_read`` after it, then its error, or the exception it raised."""
    reader = reader_cls(io.BytesIO(data), **kw)
    got = [reader.head, reader.compressed]
    try:
        for line in reader:
            got.append((line, reader.lines_read))
    except Exception as exc:  # noqa: BLE001 - a limit: compare its text and line
        got.append((type(exc).__name__, str(exc), getattr(exc, "lineno", None)))
    got += [reader.error, reader.lines_read, reader.bytes_read]
    return tuple(got)


def compare_reading(files: list[Path]) -> tuple[int, int]:
    """The old and new ``LineReader`` hand out the same lines, count them alike at every step and end
    alike, on every file (gzip and plain, whole and cut) and on texts with every kind of line break."""
    from ref_hlo import reading as old_reading

    from transforms import reading as new_reading

    blobs = []
    for path in files:
        raw = path.read_bytes()
        blobs.append(raw)
        blobs += [raw[: len(raw) * j // 7] for j in range(1, 7)]
        if path.name.endswith(".gz") and len(raw) < 2_000_000:
            data = gzip.decompress(raw)
            blobs += [data[: len(data) * j // 5] for j in range(1, 5)]
    odd = "a\rb\r\nc\vd\fe\x1cf\x1dg\x1eh\x85i\u2028j\u2029k\n\nl"
    blobs += [odd.encode(), (odd * 50_000).encode(), b"x\xff\xfe\n\r" * 300_000, b"no newline", b"", b"\n",
              gzip.compress(odd.encode() * 100_000), b"\r" + b"y" * (1 << 20) + b"\r\n" * 3]
    cases = bad = 0
    for blob in blobs:
        for kw in ({}, {"max_line_bytes": 100}, {"max_bytes": len(blob) // 2}, {"max_line_bytes": 1 << 20}):
            cases += 1
            if read_all(old_reading.LineReader, blob, **kw) != read_all(new_reading.LineReader, blob, **kw):
                bad += 1
                print(f"DIFF reading {blob[:40]!r} ({len(blob)} bytes) {kw}", flush=True)
    return cases, bad


def inputs(big: bool) -> list[Path]:
    files = []
    for d in ("data/corpus", "data/sample_bucket", "tests/fixtures"):
        files += sorted(p for p in (ROOT / d).rglob("*") if p.is_file() and not p.name.endswith(".json"))
    if big:
        files += sorted((ROOT / "benchmarks/out").glob("*mb.txt"))
    return files


def main() -> int:
    if "--make-ref" in sys.argv:
        i = sys.argv.index("--make-ref")
        make_ref(sys.argv[i + 1], Path(sys.argv[i + 2]))
        return 0
    global old_hlo
    from ref_hlo import xla_hlo as old_hlo

    new = _module_for(DumpKind.XLA_HLO)
    assert Path(new.__file__).resolve().is_relative_to(ROOT), f"not this tree's parser: {new.__file__}"
    assert "ref_hlo" in old_hlo.hlo_text.__name__ and "ref_hlo" in old_hlo.hlo_lines.__name__, "ref imports"
    cuts = int(sys.argv[sys.argv.index("--cuts") + 1]) if "--cuts" in sys.argv else 10
    big = "--big" in sys.argv
    cases = bad = 0
    for path in inputs(big):
        raw = path.read_bytes()
        data = gzip.decompress(raw) if path.name.endswith(".gz") else raw
        name = str(path.relative_to(ROOT))
        full_old = run(raw, name, True)
        if full_old[1].kind is not DumpKind.XLA_HLO:
            continue
        variants = [(name, raw)]
        if len(data) < 50_000_000:
            plain = name.removesuffix(".gz")
            for j in range(1, cuts + 1):
                at = len(data) * j // (cuts + 1)
                nl = data.find(b"\n", at)
                variants.append((f"{plain} cut {at}", data[:at]))  # mid-line (or wherever it falls)
                if nl >= 0:
                    variants.append((f"{plain} cut {nl + 1}", data[: nl + 1]))  # right after a newline
        for label, blob in variants:
            cases += 1
            old = full_old if blob is raw else run(blob, label.split(" cut ")[0], True)
            why = same(old, run(blob, label.split(" cut ")[0], False))
            if why:
                bad += 1
                print(f"DIFF {label}: {why}", flush=True)
    print(f"{cases} cases, {bad} differ")
    r_cases, r_bad = compare_reading(inputs(False))
    print(f"reading: {r_cases} cases, {r_bad} differ")
    bad += r_bad
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
