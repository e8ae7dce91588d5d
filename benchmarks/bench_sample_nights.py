"""What one small night costs in one process: the sample bucket's four nights, one by one, into a
fresh warehouse (``flows.nightly.night_in_process``: the nightly's steps without Prefect).

Most of the test suite's slow and integration tiers are nights like these, so their fixed
costs (schema and views of a new warehouse, the statements each night journals and replays
onto the standby, the publish) are what the suite pays hundreds of times. Reports the best of
``--repeat`` runs (wall and CPU seconds, each night's and the four's), and how many statements
the writer journaled (``flows.warehouse.journal.Recorder.execute`` calls).

    .venv/bin/python benchmarks/bench_sample_nights.py [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import harness  # noqa: E402

SAMPLE = ROOT / "data" / "sample_bucket"


def four_nights(where: Path) -> dict:
    """The sample's nights one by one into ``where/wh.duckdb``: seconds and statements per night."""
    from flows.nightly import night_in_process
    from flows.warehouse import journal

    calls = {"n": 0}
    execute = journal.Recorder.execute

    def counted(self, *args, **kwargs):
        calls["n"] += 1
        return execute(self, *args, **kwargs)

    journal.Recorder.execute = counted
    try:
        bucket, warehouse, nights = where / "bucket", where / "wh.duckdb", []
        for night in sorted(p.name for p in SAMPLE.iterdir() if p.is_dir()):
            shutil.copytree(SAMPLE / night, bucket / night)
            before, wall, cpu = calls["n"], time.perf_counter(), time.process_time()
            with contextlib.redirect_stdout(io.StringIO()):
                night_in_process(bucket=str(bucket), warehouse=warehouse, workers=1)
            nights.append({"night": night, "wall_s": round(time.perf_counter() - wall, 3),
                           "cpu_s": round(time.process_time() - cpu, 3), "statements": calls["n"] - before})
        return {"nights": nights}
    finally:
        journal.Recorder.execute = execute


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    harness.add_json_option(parser, ROOT / "benchmarks" / "out" / "bench_sample_nights.json")
    args = parser.parse_args()
    import flows.nightly  # noqa: F401 - imported before the clock starts

    runs = []
    for _ in range(max(args.repeat, 1)):
        with tempfile.TemporaryDirectory(prefix="sample-nights-") as tmp:
            m = harness.best_of(lambda: four_nights(Path(tmp)), 1)
            runs.append({"wall_s": round(m["wall_s"], 3), "cpu_s": round(m["cpu_s"], 3), **m["result"]})
    fastest = harness.best(runs)
    figures = {"best": fastest, "runs": runs}
    for night in fastest["nights"]:
        print(f"{night['night']}: {night['wall_s']:.2f} s wall, {night['cpu_s']:.2f} s CPU, {night['statements']} statements")
    print(f"four nights: {fastest['wall_s']:.2f} s wall, {fastest['cpu_s']:.2f} s CPU (best of {len(runs)})")
    if args.json:
        harness.write_json(args.json, figures)


if __name__ == "__main__":
    main()
