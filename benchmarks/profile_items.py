"""cProfile of a night's structural items step, in isolation (issue 30).

A copy of WAREHOUSE (its records store linked over by its first writer) has its content
items deleted and is aggregated again, every run, with the batches computed one after
another in this process (``flows.verdict.items.reading``: excerpts read from BUCKET, as
the nightly reads them). Writes ``OUT/items.prof`` and ``OUT/top.txt`` (cumulative top
30) and prints the step's wall time, the items made and the DuckDB statements by caller
(``export_batches``: its COPY statements). Run it with ``PYTHONPATH`` set to the tree
to measure (another commit's ``git archive``) to profile that tree's code.

    .venv/bin/python benchmarks/profile_items.py WAREHOUSE BUCKET OUT_DIR
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import shutil
import sys
import time
from pathlib import Path


def main(src: Path, bucket: str, out: Path) -> dict:
    import flows
    from flows.resources import MemoryBudget, parse_memory
    from flows.verdict import items
    from flows.verdict.aggregate import aggregate
    from flows.warehouse import store as wh

    out.mkdir(parents=True, exist_ok=True)
    copy = out / "wh.duckdb"
    shutil.rmtree(copy.with_name(copy.name + ".records"), ignore_errors=True)
    shutil.copyfile(src, copy)
    budget = MemoryBudget(parse_memory("2GB"))
    with wh.Warehouse(copy, budget=budget) as con:
        con.execute("DELETE FROM content_item_rows")
        con.execute("DELETE FROM schema_info WHERE key = 'aggregated_with'")  # every run again
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        aggregate(con, budget=budget, run_items=items.reading(items.DumpSource(bucket)))
        profile.disable()
        wall = time.perf_counter() - start
        rows, keys = con.execute("SELECT count(*), count(DISTINCT items_key) FROM content_item_rows").fetchall()[0]
    profile.dump_stats(out / "items.prof")
    stats = pstats.Stats(str(out / "items.prof"))
    # the writer's connection is the journal's (flows.warehouse.journal): its execute, by caller
    execute = next((k for k in stats.stats if k[2] == "execute" and k[0].endswith("journal.py")), None)
    callers = {f"{Path(f).name}:{name}": v[1] for (f, _, name), v in stats.stats[execute][4].items()} if execute else {}
    text = io.StringIO()
    pstats.Stats(str(out / "items.prof"), stream=text).sort_stats("cumulative").print_stats(30)
    (out / "top.txt").write_text(text.getvalue())
    return {"code": str(Path(flows.__file__).parent), "aggregate_wall_s": round(wall, 1), "content_item_rows": rows,
            "items_keys": keys, "statements_by_caller": callers}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])), indent=1))
