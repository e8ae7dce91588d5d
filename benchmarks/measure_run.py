"""One ``dumpscope run`` measured by ``benchmarks/harness.py`` (issue 30): wall time, CPU,
peak RSS of the process tree; its summary JSON and log beside ``OUT``.

    .venv/bin/python benchmarks/measure_run.py BUCKET WAREHOUSE OUT.json [--memory-limit 2GB]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import harness

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bucket")
    parser.add_argument("warehouse")
    parser.add_argument("out", type=Path)
    parser.add_argument("--memory-limit", default="2GB")
    args = parser.parse_args()
    with open(args.out.with_suffix(".log"), "w") as log:
        measured = harness.run([str(ROOT / ".venv/bin/dumpscope"), "run", "--bucket", args.bucket, "--warehouse", args.warehouse,
                                "--memory-limit", args.memory_limit, "--verbose",
                                "--summary-json", str(args.out.with_suffix(".summary.json"))],
                               cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    args.out.write_text(json.dumps(measured, indent=1))
    print(json.dumps(measured))
