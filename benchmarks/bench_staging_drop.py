"""Dropping the staging of many small dumps: ``flows.ingest.housekeeping.drop_staged`` and
``prune_staging`` over N staged contents (issue 27: 50,000 tiny files took 155 s of a
387 s night to delete their staging).

Each content is laid out as a parse stages it: ``<sha256>/<kind>-v<N>/`` holding a
``summary.json`` and two small Parquet files (a few hundred bytes each). Times: making
the layout (for scale), then dropping every content at once, as the nightly does after
its load; then the same for ``prune_staging`` keeping none. Benchmarks report, they do
not assert; the figures (wall seconds, ``benchmarks/harness.py``) go to
``benchmarks/out/bench_staging_drop.json`` (``--json``).

    .venv/bin/python benchmarks/bench_staging_drop.py [--contents 50000] [--dir /tmp] [--json FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from flows.ingest import staging  # noqa: E402
from flows.ingest import housekeeping

PARQUET = b"PAR1" + b"\0" * 300 + b"PAR1"


def make(root: Path, n: int) -> set[str]:
    shas = set()
    for i in range(n):
        sha = hashlib.sha256(str(i).encode()).hexdigest()
        result = root / sha / "xla_hlo-v4"
        result.mkdir(parents=True)
        (result / "summary.json").write_text('{"kind": "xla_hlo"}')
        (result / "hlo_modules.parquet").write_bytes(PARQUET)
        (result / "hlo_instructions.parquet").write_bytes(PARQUET)
        shas.add(sha)
    return shas


def timed(label: str, fn, figures: dict) -> None:
    got = harness.best_of(fn, 1)
    figures[label] = round(got["wall_s"], 2)
    print(f"{label}: {figures[label]:.2f} s ({got['result']})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contents", type=int, default=50_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to make the staging (default: the temp dir)")
    harness.add_json_option(parser, Path(__file__).parent / "out" / "bench_staging_drop.json")
    args = parser.parse_args()
    figures: dict = {"contents": args.contents, "files": 3 * args.contents}
    base = Path(tempfile.mkdtemp(prefix="bench-staging-", dir=args.dir))
    try:
        shas: set[str] = set()
        timed("make", lambda: len(shas.update(make(base / "staging", args.contents)) or shas), figures)
        timed("drop_staged", lambda: housekeeping.drop_staged(base / "staging", shas), figures)
        assert not housekeeping.staged_contents(base / "staging")
        timed("make again", lambda: len(make(base / "staging2", args.contents)), figures)
        timed("prune_staging", lambda: housekeeping.prune_staging(base / "staging2", set()), figures)
        assert not housekeeping.staged_contents(base / "staging2")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    harness.write_json(args.json, figures, indent=2)


if __name__ == "__main__":
    main()
