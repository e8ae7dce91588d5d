"""How many of a directory's ``.hlo`` files read ``ok``: the public test and benchmark modules XLA keeps.

    .venv/bin/python benchmarks/hlo_public_files.py DIR [--json FILE] [--verbose]

Each ``*.hlo`` file under DIR (recursively) goes through ``transforms.parse.parse_dump`` as the
nightly reads it (kind by content; a file with no ``HloModule`` claimed by its text is ``unknown``).
Prints the count per outcome (``ok``, ``partial``, ``failed``, or the kind when it is not
``xla_hlo``), then one line per file that is not ``ok``: its path and its first error. XLA's
repository keeps ~480 such files under 4 MiB (``git ls-tree -r main | grep '\\.hlo$'`` in a
snapshot of openxla/xla or of ROCm/xla, which carries its history; see docs/metrics.md for the
figures). A report, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transforms.parse import parse_dump  # noqa: E402
from transforms.records import DumpKind  # noqa: E402


def outcome(path: Path, root: Path) -> tuple[str, str]:
    """(outcome, first error or "") of one file, read as the nightly reads it."""
    with path.open("rb") as raw:
        s = parse_dump(raw, str(path.relative_to(root))).summary
    what = s.status.value if s.kind is DumpKind.XLA_HLO else s.kind.value
    return what, s.errors[0] if s.errors else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--json", type=Path, help="write {path: [outcome, first error]} here")
    ap.add_argument("--verbose", action="store_true", help="list the files that read ok too")
    args = ap.parse_args()
    files = sorted(args.dir.rglob("*.hlo"))
    if not files:
        sys.exit(f"no .hlo files under {args.dir}")
    got = {str(p.relative_to(args.dir)): outcome(p, args.dir) for p in files}
    counts = Counter(what for what, _ in got.values())
    print(f"{len(files)} files: " + ", ".join(f"{n} {what}" for what, n in counts.most_common()))
    for path, (what, error) in got.items():
        if what != "ok" or args.verbose:
            print(f"  {what:8} {path}  {error[:160]}")
    if args.json:
        args.json.write_text(json.dumps(got, indent=1))


if __name__ == "__main__":
    main()
