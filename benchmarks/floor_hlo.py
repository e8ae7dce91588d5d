"""What the pieces of any Python HLO reader cost on one file: the floors behind docs/speed.md.

    .venv/bin/python benchmarks/floor_hlo.py [FILE.hlo[.gz] ...] [--repeats 7] [--json FILE]

Default files: XLA's LLM benchmark modules in data/corpus/hlo_text (llama 3.1 8B, mixtral 8x7B,
TORAX). One core (POLARS_MAX_THREADS=1), CPU time, best of ``--repeats`` after one warm-up call
(``benchmarks/harness.py``'s ``best_of``). Each row is a lower
bound of one way to read the file, none of them a parser: the budget column is what 100 MB/s
per core leaves for the whole parse (file size / 100 MB/s).

- ``lines``: the file's lines as Python strings (what every line-based reader starts from);
- ``loop``: a bare loop over them with one test a line (no row kept);
- ``split``: ``str.split(None, 3)`` of each instruction line (the line parser's fast path);
- ``rows``: the least a line-by-line reader does with each instruction line to keep its row:
  split it, cut out the opcode, look its shape up, append four columns (no checks, no
  computations, no metadata);
- ``regex``: one ``re.findall`` over the text that cuts every header and instruction line into
  its fields (C code, one tuple of strings a line);
- ``polars``: the lines as a polars column cut into name, shape, opcode and metadata key by
  string kernels, with the checks that make it read each line as the line parser does
  (branch ``block-hlo``'s ``_classify``, without the lines that are not instructions);
- ``parser``: ``transforms.parsers.xla_hlo`` itself, every frame built.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import sys
from pathlib import Path

os.environ["POLARS_MAX_THREADS"] = "1"

import polars as pl  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

DEFAULT = [ROOT / "data/corpus/hlo_text" / f"{n}.hlo.gz" for n in (
    "hlo_llama31_8b_bf16_1x8", "hlo_mixtral_8x7b_bf16_1x8", "hlo_torax_iterhybrid_predictor_corrector_f64")]
_FIELDS = re.compile(r"\n(?:(ENTRY )?%?([^\s(]+) [^\n]*\{(?=\n)|  (ROOT )?%?([^\s=]+) = ([^ (]\S*) ([\w\-]+)\(([^\n]*))")
_PLAIN = r"^  (?:ROOT )?[!-~]+ = [!-'*-~][!-~]* [A-Za-z0-9_.\-]+\("


def _polars(lines: list[str]) -> int:
    line, field = pl.col("line"), pl.col("parts").struct.field
    df = pl.DataFrame({"line": pl.Series(lines, dtype=pl.String)}).with_columns(
        plain=line.str.contains(_PLAIN) & ~line.str.contains("//", literal=True),
        parts=line.str.splitn(" = ", 2),
    ).with_columns(lhs=field("field_0"), parts=field("field_1").str.splitn(" ", 2)).with_columns(
        name=pl.col("lhs").str.strip_prefix("  ").str.strip_prefix("ROOT "), shape=field("field_0"),
        parts=field("field_1").str.splitn("metadata={", 2),
    ).with_columns(pre=field("field_0"), after=field("field_1")).with_columns(
        op=pl.col("pre").str.split_exact("(", 1).struct.field("field_0"),
        meta=pl.col("after").str.extract(r"^([^}]*\})", 1),
    )
    return int(df["plain"].sum())


def _parser(lines: list[str]) -> int:
    from transforms.parsers import xla_hlo

    return sum(1 for _ in xla_hlo.parse(iter(lines)))


def measure(path: Path, repeats: int) -> dict[str, float]:
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.name.endswith(".gz") else raw).decode()
    lines = text.splitlines(True)
    instructions = [x for x in lines if x.startswith("  ")]

    def loop() -> int:
        n = 0
        for x in lines:
            if x[:1] == " ":
                n += 1
        return n

    def rows() -> int:
        names, ops, sids, mids, ids = [], [], [], [], {}
        for x in instructions:
            name, _, shape, rest = x.split(None, 3)
            i = rest.find("(")
            sid = ids.get(shape)
            if sid is None:
                sid = ids[shape] = len(ids)
            names.append(name)
            ops.append(rest[:i])
            sids.append(sid)
            mids.append(rest.find("metadata={", i))
        return len(names)

    pieces = {
        "lines": lambda: len(text.splitlines(True)),
        "loop": loop,
        "split": lambda: sum(len(x.split(None, 3)) for x in instructions),
        "rows": rows,
        "regex": lambda: len(_FIELDS.findall(text)),
        "polars": lambda: _polars(lines),
        "parser": lambda: _parser(lines),
    }
    best = {name: harness.best_of(fn, repeats, warm=1)["cpu_s"] for name, fn in pieces.items()}  # warm: imports, caches
    best["MB"] = len(text.encode()) / 1e6
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description="What the pieces of any Python HLO reader cost on one file.")
    ap.add_argument("files", nargs="*", type=Path, help="HLO text, .gz too (default: XLA's LLM benchmark modules)")
    ap.add_argument("--repeats", type=int, default=7)
    harness.add_json_option(ap, None)
    args = ap.parse_args()
    figures = {}
    files, repeats = args.files or DEFAULT, args.repeats
    cols = ["lines", "loop", "split", "rows", "regex", "polars", "parser"]
    print(f"{'file':45s} {'MB':>5s} {'budget':>7s} " + " ".join(f"{c:>7s}" for c in cols) + "   (ms of CPU, one core)")
    for path in files:
        b = figures[str(path)] = measure(path, repeats)
        print(f"{path.name[:45]:45s} {b['MB']:5.2f} {b['MB'] * 10:7.1f} " + " ".join(f"{b[c] * 1e3:7.1f}" for c in cols)
              + f"   parser {b['MB'] / b['parser']:.0f} MB/s")
    if args.json:
        harness.write_json(args.json, {"cpu_s": figures, "repeats": repeats})


if __name__ == "__main__":
    main()
