"""What checking an excerpt source's sha256 costs (issue 27): ``flows.items.excerpts_of``
reads the whole dump through sha256 so that excerpts come only from the bytes that were
parsed; without the check the read stopped after the last wanted line.

Writes (once) a plain HLO text file of ``--mib`` MiB in ``benchmarks/out/``, then times
both reads for excerpt lines near its start and in its middle.

    .venv/bin/python benchmarks/bench_excerpt_check.py [--mib 512]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from flows.items import _lines, excerpts_of  # noqa: E402
from transforms.trends import evidence  # noqa: E402

LINE = b"  %fusion.1 = f32[128,128]{1,0} fusion(f32[128,128]{1,0} %p0), kind=kLoop, calls=%fused_computation\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512)
    args = parser.parse_args()
    path = Path(__file__).parent / "out" / f"excerpt_check_{args.mib}.txt"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        with path.open("wb") as f:
            f.write(b"HloModule big\n\nENTRY main {\n")
            for _ in range(args.mib * 2**20 // len(LINE)):
                f.write(LINE)
            f.write(b"}\n")
    with path.open("rb") as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()
    lines = path.stat().st_size // len(LINE)
    for wanted in (["2-3"], [f"{lines // 2}-{lines // 2 + 2}"]):
        started = time.perf_counter()
        with path.open("rb") as raw:
            unchecked = evidence.read_excerpts(_lines(raw), wanted)
        middle = time.perf_counter()
        with path.open("rb") as raw:
            checked = excerpts_of(raw, sha, wanted)
        done = time.perf_counter()
        assert checked == unchecked
        print(f"{args.mib} MiB, lines {wanted[0]}: unchecked {middle - started:.2f} s, checked {done - middle:.2f} s")


if __name__ == "__main__":
    main()
