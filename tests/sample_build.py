"""The sample bucket's warehouse built without Prefect: the fast tier's way to the verdict layer.

``build_sample_warehouse`` does what one nightly over a fresh warehouse does (``flows.nightly``:
discover, parse, load, report), step for step, by calling the same functions the nightly's
tasks call, in this process and without a Prefect server, a process pool or a subprocess:

- discover: ``list_objects`` and ``read_runs`` (every object is settled: settle time 0, as the
  nightly's default; the warehouse is new, so nothing is held and nothing is skipped);
- parse: ``staging.stage_object`` for each dump, then the XLA sibling check
  (``siblings.check_outcomes``), as ``stage_chunk`` and the flow do;
- load: one ``Warehouse`` writer, ``loading.upsert_runs``, ``loading.load_staged`` (the nightly's own
  batching of first paths and copies) and ``aggregate`` with the
  items computed in the process, their excerpts read from the bucket (``items.reading``: what the
  nightly's Prefect tasks do on its task runner);
- report: ``write_night_report`` beside the warehouse (``report.md``), as the fixture's nightly.

One night over all four sample runs, as the session fixture's nightly sees it (not night by night:
the warehouse must equal that one, table by table; ``tests/test_sample_build.py`` proves it).
Whatever the nightly's ``load`` task does beyond this (compaction of an older night's records,
notifications, healing a damaged store) has nothing to do on a first night.
"""

from __future__ import annotations

from pathlib import Path

from flows.ingest import housekeeping, staging
from flows.ingest.bucket import connect, list_objects, read_runs
from flows.ingest.staging import Outcome
from flows.publish.report import write_night_report
from flows.resources import MemoryBudget, night_limit
from flows.verdict import items
from flows.verdict.aggregate import aggregate
from flows.warehouse import loading, siblings, store as wh
from transforms.layout import Role

SAMPLE_BUCKET = Path(__file__).resolve().parents[1] / "data" / "sample_bucket"


def build_sample_warehouse(out: Path, bucket: Path = SAMPLE_BUCKET) -> Path:
    """``out/warehouse.duckdb`` (and ``out/report.md``) from every night of ``bucket``; returns the warehouse."""
    warehouse = out / "warehouse.duckdb"
    listing = list_objects(str(bucket))
    fs, _ = connect(str(bucket))
    runs = read_runs(fs, listing)
    staging_dir = warehouse.with_suffix(".staging").resolve()
    outcomes = [Outcome(o, staging.stage_object(fs, o, staging_dir)) for o in listing if o.role is Role.DUMP]
    siblings.check_outcomes(outcomes, warehouse)
    memory_limit, _ = night_limit(None)  # the nightly's default budget
    with wh.Warehouse(warehouse, budget=MemoryBudget(memory_limit)) as con:
        loading.upsert_runs(con, [loading.run_row(info) for info in runs.values()])
        loading.load_staged(con, outcomes, sorted({o.staged.sha256 for o in outcomes if o.staged.sha256}))
        aggregate(con, budget=MemoryBudget(memory_limit), run_items=items.reading(items.DumpSource(str(bucket))))
    housekeeping.drop_staged(staging_dir, housekeeping.staged_contents(staging_dir))  # all loaded: the nightly drops them too
    write_night_report(warehouse, out / "report.md")
    return warehouse
