"""What checking an excerpt source's sha256 costs (issue 27): ``flows.verdict.items.excerpts_of``
reads the whole dump through sha256 so that excerpts come only from the bytes that were
parsed; without the check the read stopped after the last wanted line.

Writes (once) a plain HLO text file of ``--mib`` MiB in ``benchmarks/out/``, then times
both reads for excerpt lines near its start and in its middle (``benchmarks/harness.py``).

    .venv/bin/python benchmarks/bench_excerpt_check.py [--mib 512] [--json FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from benchmarks import harness  # noqa: E402
from flows.verdict.items import _lines, excerpts_of  # noqa: E402
from transforms.trends import evidence  # noqa: E402

LINE = b"  %fusion.1 = f32[128,128]{1,0} fusion(f32[128,128]{1,0} %p0), kind=kLoop, calls=%fused_computation\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512)
    harness.add_json_option(parser, None)
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
    figures = []
    for wanted in (["2-3"], [f"{lines // 2}-{lines // 2 + 2}"]):
        def unchecked_read():
            with path.open("rb") as raw:
                return evidence.read_excerpts(_lines(raw), wanted)

        def checked_read():
            with path.open("rb") as raw:
                return excerpts_of(raw, sha, wanted)

        unchecked, checked = harness.best_of(unchecked_read, 1), harness.best_of(checked_read, 1)
        assert checked["result"] == unchecked["result"]
        figures.append({"mib": args.mib, "lines": wanted[0], "unchecked_s": unchecked["wall_s"],
                        "checked_s": checked["wall_s"]})
        print(f"{args.mib} MiB, lines {wanted[0]}: unchecked {unchecked['wall_s']:.2f} s, "
              f"checked {checked['wall_s']:.2f} s")
    if args.json:
        harness.write_json(args.json, figures)


if __name__ == "__main__":
    main()
