"""The sample bucket's warehouse built without Prefect: the fast tier's way to the verdict layer.

``build_sample_warehouse`` does what one nightly over a fresh warehouse does (``flows.nightly``:
discover, parse, load, report), step for step, by calling the same functions the nightly's
tasks call, in this process and without a Prefect server, a process pool or a subprocess:

- discover: ``list_objects`` and ``read_runs`` (every object is settled: settle time 0, as the
  nightly's default; the warehouse is new, so nothing is held and nothing is skipped);
- parse: ``staging.stage_object`` for each dump, then the XLA sibling check
  (``siblings.check_outcomes``), as ``stage_chunk`` and the flow do;
- load: one ``Warehouse`` writer, ``upsert_runs``, ``load_dumps`` and ``aggregate`` with the
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

from flows.ingest import staging
from flows.ingest.bucket import connect, list_objects, read_runs
from flows.ingest.staging import Outcome
from flows.publish.report import write_night_report
from flows.resources import MemoryBudget, night_limit
from flows.verdict import items
from flows.verdict.aggregate import aggregate
from flows.warehouse import siblings, store as wh
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
        wh.upsert_runs(con, [_run_row(info) for info in runs.values()])
        wh.load_dumps(con, _dumps(outcomes))
        aggregate(con, budget=MemoryBudget(memory_limit), run_items=items.reading(items.DumpSource(str(bucket))))
    staging.drop_staged(staging_dir, staging.staged_contents(staging_dir))  # all loaded: the nightly drops them too
    write_night_report(warehouse, out / "report.md")
    return warehouse


def _run_row(info) -> dict:
    return {"run_id": info.run_id, "started_at": info.started_at, "commit": info.commit,
            "tags": list(info.tags or []), "extra": info.extra or {}, "meta_errors": list(info.meta_errors)}


def _dumps(outcomes: list[Outcome]) -> list[wh.StagedDump]:
    """One ``StagedDump`` per object: the first path of each content brings its records and
    metrics, the others are copies (the nightly's ``load``; a refused object has no content)."""
    seen: set[str] = set()
    batch = []
    for o in outcomes:
        s, obj, sha = o.staged.summary, o.obj, o.staged.sha256
        fields = {"path": obj.path, "run_id": obj.run_id, "job": obj.job or "", "size_bytes": obj.size,
                  "source_version": obj.version or None, "dump_id": sha, "kind": s["kind"], "stage": s["stage"],
                  "program": s["program"], "status": s["status"], "error": "\n".join(s["errors"]) or None,
                  "parser_version": s["parser_version"]}
        if sha is not None and sha not in seen:
            seen.add(sha)
            batch.append(wh.StagedDump(**fields, metrics=s["metrics"],
                                       tables={t: [p] for t, p in o.staged.tables.items()}))
        else:
            batch.append(wh.StagedDump(**fields))
    return batch
