"""Old (a reference copy, see compare_hlo_parser.py) vs new XLA HLO parser: CPU seconds, alternated.

    PYTHONPATH=.:/tmp/ref_parser .venv/bin/python benchmarks/ab_hlo.py FILE... [--repeats 5] [--json FILE]

Each repeat parses the file once with each parser (as bench_hlo times it: iterate the lines, build
every frame), so load on a shared machine falls on both alike; the best CPU time of each is shown
(each parse timed by ``benchmarks/harness.py``'s ``best_of``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["POLARS_MAX_THREADS"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ref_hlo import xla_hlo as old  # noqa: E402

from benchmarks import harness  # noqa: E402
from transforms.parsers import xla_hlo as new  # noqa: E402


def once(parser, path: str) -> float:
    def parse() -> None:
        with open(path) as fh:
            for _ in parser.parse(fh):
                pass

    return harness.best_of(parse, 1)["cpu_s"]


def main() -> None:
    args = sys.argv[1:]
    repeats = 5
    if "--repeats" in args:
        i = args.index("--repeats")
        repeats = int(args[i + 1])
        del args[i : i + 2]
    json_out = None
    if "--json" in args:
        i = args.index("--json")
        json_out = Path(args[i + 1])
        del args[i : i + 2]
    figures = {}
    for path in args:
        mb = Path(path).stat().st_size / 1e6
        best = {"old": float("inf"), "new": float("inf")}
        for _ in range(repeats):
            for name, parser in (("old", old), ("new", new)):
                best[name] = min(best[name], once(parser, path))
        figures[path] = {"mb": mb, "old_cpu_s": best["old"], "new_cpu_s": best["new"], "repeats": repeats}
        print(f"{Path(path).name[:44]:44s} {mb:7.1f} MB  old {mb / best['old']:6.1f} MB/s  "
              f"new {mb / best['new']:6.1f} MB/s  ({best['old'] / best['new']:.3f}x)", flush=True)
    if json_out:
        harness.write_json(json_out, figures)


if __name__ == "__main__":
    main()
