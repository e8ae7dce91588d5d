"""Loading staged dumps into the warehouse the writer holds: idempotent, keyed by content.

- ``load_dumps(con, batch)``: one transaction per batch of ``StagedDump``, keyed by ``dump_id``;
  the records rows go into the records store beside the file (``flows.warehouse.records``),
  which the writer sweeps once both generations are level. Loading the same batch again
  changes nothing.
- ``dump_rows``, ``metric_rows``/``metrics_of``: the dumps and metrics rows a ``StagedDump`` loads
  as (``dumpscope check`` judges its candidate on the same rows, never loaded).
- ``needs_parse``/``parsed_contents``/``with_records``: what the warehouse already holds of a
  content; ``upsert_runs``: the runs rows; ``table_counts``: rows per table.
- The nightly's side: ``load_staged`` turns a night's staged outcomes (``flows.ingest.staging``)
  into batches of ``StagedDump`` (``LOAD_BATCH`` dumps a transaction), ``run_row`` a bucket's
  run into a runs row, and ``drop_loaded_staging`` removes the staged contents once loaded.

A partial dump whose parser named what its damage cost keeps those in ``dumps.lost_metrics`` and
its other figures in ``metrics`` (the driver dropped the lost ones): they are believed like an ok
dump's (``flows.warehouse.reads.FIGURES_STAND``). Any other partial or failed dump's rows are
kept for people to read, never judged (``lost_metrics`` NULL).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import duckdb
import polars as pl
import pyarrow as pa

from flows.ingest import staging

from flows.ingest import housekeeping
from flows.ingest.staging import Outcome
from flows.warehouse import records
from flows.warehouse import schema as ws
from flows.warehouse.reads import registered, strings
from flows.warehouse.transactions import transaction
from transforms.parsers.formats import all_tables

LOAD_BATCH = 2000  # dumps a load transaction takes: each batch scans the dumps and metrics tables


@dataclass(slots=True)
class StagedDump:
    """One dump ready to load. ``tables`` None (and ``metrics`` None): the content was
    already parsed under another path (``needs_parse`` False); records are kept, the
    dumps row and metrics are copied from that content's existing rows."""

    path: str
    run_id: str
    job: str
    size_bytes: int
    dump_id: str
    kind: str | None = None
    stage: str | None = None
    program: str | None = None
    status: str | None = None
    error: str | None = None
    parser_version: int | None = None
    source_version: str | None = None
    metrics: dict[str, float] | None = None
    # Each program's metrics, for a dump holding several (torch_trace's DumpSummary.programs):
    # when set, its metric rows are these, one set per program (metrics.program = the program),
    # not the dump's totals.
    programs: dict[str, dict[str, float]] | None = None
    # table -> parquet files and/or polars frames (with dump_id, parser_version first)
    tables: dict[str, list[Path | pl.DataFrame]] | None = None
    # A partial dump's figures its damage cost, when its parser tells (DumpSummary.lost): its metric
    # rows are the others, believed like an ok dump's (dumps.lost_metrics). None: every figure.
    lost: list[str] | None = None

    @classmethod
    def from_parsed(cls, parsed, *, path: str, run_id: str, job: str, size_bytes: int, dump_id: str) -> "StagedDump":
        """From a ``transforms.parse.ParsedDump`` (frames parsed with this ``dump_id``)."""
        from transforms.parsers.formats import parser_version

        s = parsed.summary
        return cls(
            path=path, run_id=run_id, job=job, size_bytes=size_bytes, dump_id=dump_id,
            kind=s.kind.value, stage=s.stage, program=s.program, status=s.status.value,
            error="\n".join(s.errors) or None, parser_version=parser_version(s.kind),
            metrics=dict(s.metrics), programs=dict(s.programs) or None, tables={t: [f] for t, f in parsed.tables.items()},
            lost=lost_of(s.status.value, s.lost),
        )


def lost_of(status: str, lost) -> list[str] | None:
    """``dumps.lost_metrics`` of a dump: what a partial dump's damage cost when its parser tells
    (its other figures stand); NULL otherwise (an ok dump loses nothing, a failed one all)."""
    return list(lost) if status == "partial" and lost is not None else None


def needs_parse(con: duckdb.DuckDBPyConnection, dump_id: str, kind: str, parser_version: int) -> bool:
    """False when this content was already parsed as ``kind`` with this parser version
    (under any path): then only a dumps row and metrics rows are copied."""
    return (dump_id, str(kind), parser_version) not in parsed_contents(con, [dump_id])


def parsed_contents(con: duckdb.DuckDBPyConnection, contents: list[str]) -> set[tuple[str, str, int]]:
    """(dump_id, kind, parser_version) of these contents as the warehouse parsed them
    (``needs_parse`` for many at once)."""
    return {(d, k, v) for d, k, v in con.execute(
        "SELECT DISTINCT dump_id, kind, parser_version FROM dumps WHERE list_contains(?, dump_id)",
        [sorted(set(contents))]).fetchall()}


def with_records(con: duckdb.DuckDBPyConnection, contents: list[str]) -> set[str]:
    """Of these contents, those the warehouse holds the records rows of: all but those
    compacted away (``flows.verdict.compaction.compact_records``), which a new dump bringing them
    back has parsed again."""
    gone = {d for (d,) in con.execute("SELECT dump_id FROM compacted_contents WHERE list_contains(?, dump_id)",
                                      [sorted(set(contents))]).fetchall()}
    return set(contents) - gone


def upsert_runs(con: duckdb.DuckDBPyConnection, runs: Iterable[dict]) -> None:
    """Insert or replace runs rows (dicts with run_id, started_at, commit, tags, extra, meta_errors)."""
    import json

    rows = list(runs)
    if not rows:
        return
    arrow = pa.table({
        "run_id": [r["run_id"] for r in rows],
        "started_at": pa.array([r.get("started_at") for r in rows], pa.timestamp("us")),
        "commit": pa.array([r.get("commit") for r in rows], pa.string()),
        "tags": pa.array([list(r.get("tags") or []) for r in rows], pa.list_(pa.string())),
        "extra": pa.array([json.dumps(r.get("extra") or {}, default=str) for r in rows], pa.string()),
        "meta_errors": pa.array([list(r.get("meta_errors") or []) for r in rows], pa.list_(pa.string())),
    })
    with registered(con, _runs_in=arrow):
        con.execute("""INSERT OR REPLACE INTO runs (run_id, started_at, "commit", tags, extra, meta_errors)
                       SELECT run_id, started_at, "commit", tags, extra::JSON, meta_errors FROM _runs_in""")


def load_dumps(con: duckdb.DuckDBPyConnection, batch: list[StagedDump]) -> dict[str, int]:
    """Load one batch in one transaction; returns rows inserted per records table.

    Parsed dumps (``tables`` set) replace every records row of their ``dump_id``;
    dumps rows are upserted by path and metrics rows replaced per path. Records of a
    content no dumps row refers to any more (a path whose bytes changed) are dropped.
    """
    parsed = [d for d in batch if d.tables is not None]
    copies = [d for d in batch if d.tables is None]
    ids = sorted({d.dump_id for d in parsed})
    paths = [d.path for d in batch]
    inserted: dict[str, int] = {}
    with transaction(con):
        listed = records.listed(con)
        # _ids is empty when nothing was parsed: then no statement reads it (nor journals it).
        with registered(con, _paths=strings("path", paths), _ids=strings("dump_id", ids)):
            old_ids = [r[0] for r in con.execute("SELECT DISTINCT dump_id FROM dumps JOIN _paths USING (path) WHERE dump_id IS NOT NULL").fetchall()]
            if ids:
                records.drop_contents(con, "SELECT dump_id FROM _ids")
                con.execute("DELETE FROM compacted_contents WHERE dump_id IN (SELECT dump_id FROM _ids)")  # records again
            inserted = _place_records(con, parsed)
            _upsert_dumps(con, parsed, copies)
            _replace_metrics(con, parsed, copies)
            if ids:  # other paths of re-parsed content now hold the new version's results
                _refresh_other_paths(con)
            _drop_orphans(con, old_ids)
            records.refresh_changed(con, listed)
    return inserted


def _place_records(con, parsed: list[StagedDump]) -> dict[str, int]:
    """The parsed contents' records into the store, listed in ``records_files``; rows per table."""
    root = records.root_of(con)
    tables = all_tables()
    rows: list[tuple[str, str, str, int]] = []
    done: set[str] = set()
    for d in parsed:
        if d.dump_id in done:  # the same bytes under two paths: one content, one set of files
            continue
        done.add(d.dump_id)
        for table in tables:
            for name, n in records.place(root, table, d.dump_id, d.parser_version or 0, (d.tables or {}).get(table, [])):
                rows.append((d.dump_id, table, name, n))
    records.list_files(con, rows)
    inserted: dict[str, int] = {}
    for _, table, _, n in rows:
        inserted[table] = inserted.get(table, 0) + n
    return inserted


DUMP_FIELDS = ("path", "run_id", "job", "kind", "stage", "program", "size_bytes", "dump_id", "parser_version", "status",
               "error", "source_version", "lost_metrics")  # the dumps columns a StagedDump gives
_DUMP_TYPES = {"size_bytes": pa.int64(), "parser_version": pa.int16(), "lost_metrics": pa.list_(pa.string())}
_DUMP_ATTRS = {"lost_metrics": "lost"}  # a column whose StagedDump field is named otherwise


def dump_rows(rows: list[StagedDump]) -> pa.Table:
    """The dumps rows of these dumps (``DUMP_FIELDS``), as they are loaded: a copy's unknown
    fields are null here (the load takes them from its content's existing row)."""
    return pa.table({c: pa.array([getattr(d, _DUMP_ATTRS.get(c, c)) for d in rows], _DUMP_TYPES.get(c, pa.string()))
                     for c in DUMP_FIELDS})


def _upsert_dumps(con, parsed: list[StagedDump], copies: list[StagedDump]) -> None:
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    rows = parsed + copies
    if not rows:
        return
    arrow = dump_rows(rows)
    with registered(con, _dumps_in=arrow):
        # A copy takes the fields it does not know from the content's existing row; the
        # batch's paths then replace their rows (one row per path, kept by the writer: a
        # key index would be rewritten whole at every checkpoint).
        con.execute(
            """
            CREATE OR REPLACE TEMP TABLE _dumps_new AS
            SELECT i.path, i.run_id, i.job,
                   coalesce(i.kind, e.kind) AS kind, coalesce(i.stage, e.stage) AS stage,
                   coalesce(i.program, e.program) AS program, i.size_bytes, i.dump_id,
                   coalesce(i.parser_version, e.parser_version) AS parser_version,
                   coalesce(i.status, e.status) AS status, CASE WHEN i.status IS NULL THEN e.error ELSE i.error END AS error,
                   ?::TIMESTAMP AS ingested_at, i.source_version,
                   CASE WHEN i.status IS NULL THEN e.lost_metrics ELSE i.lost_metrics END AS lost_metrics
            FROM _dumps_in i
            LEFT JOIN (SELECT * FROM dumps WHERE path NOT IN (SELECT path FROM _dumps_in)
                         AND dump_id IN (SELECT dump_id FROM _dumps_in)  -- the batch's contents, not the history
                       QUALIFY row_number() OVER (PARTITION BY dump_id ORDER BY parser_version DESC, path) = 1) e
              ON i.status IS NULL AND e.dump_id = i.dump_id
            """,
            [now],
        )
        con.execute("DELETE FROM dumps WHERE path IN (SELECT path FROM _dumps_in)")
        con.execute("INSERT INTO dumps BY NAME SELECT * FROM _dumps_new")
        con.execute("DROP TABLE _dumps_new")


def metric_rows(d: StagedDump) -> list[tuple[str, str | None, str, float]]:
    """(path, program, metric, value) rows of a parsed dump: one set per program when the dump
    gives each program's figures (``programs``), else its metrics under the dump's program."""
    if d.programs:
        return [(d.path, p, k, v) for p, figures in sorted(d.programs.items()) for k, v in sorted(figures.items())]
    return [(d.path, d.program, k, v) for k, v in sorted((d.metrics or {}).items())]


def metrics_of(parsed: list[StagedDump]) -> pa.Table:
    """The metrics rows (path, program, metric, value) of parsed dumps as they are loaded: a
    value that is not finite is null."""
    rows = [r for d in parsed for r in metric_rows(d)]
    return pa.table({
        "path": pa.array([r[0] for r in rows], pa.string()),
        "program": pa.array([r[1] for r in rows], pa.string()),
        "metric": pa.array([r[2] for r in rows], pa.string()),
        "value": pa.array([_finite(r[3]) for r in rows], pa.float64()),
    })


def _replace_metrics(con, parsed: list[StagedDump], copies: list[StagedDump]) -> None:
    con.execute("DELETE FROM metrics WHERE path IN (SELECT path FROM _paths)")
    with registered(con, _metrics_in=metrics_of(parsed)):
        con.execute(
            """INSERT INTO metrics SELECT d.run_id, d.job, m.program, d.kind, d.stage, m.metric, m.value, d.dump_id, d.path
               FROM _metrics_in m JOIN dumps d USING (path)"""
        )
    if copies:
        with registered(con, _copies=strings("path", [d.path for d in copies])):
            _copy_metrics_to(con, "SELECT path FROM _copies")


def _copy_metrics_to(con, target_paths_sql: str) -> None:
    """Metrics for ``target_paths`` copied from another path holding the same content (a row of
    one program of a dump giving each program's figures keeps its program; others take the
    target's program, which its path may give)."""
    con.execute(
        f"""
        INSERT INTO metrics
        SELECT d.run_id, d.job, CASE WHEN m.program IS DISTINCT FROM src.program THEN m.program ELSE d.program END,
               d.kind, d.stage, m.metric, m.value, d.dump_id, d.path
        FROM dumps d
        JOIN (SELECT dump_id, min(path) AS src FROM metrics
              WHERE path NOT IN ({target_paths_sql})
                AND dump_id IN (SELECT dump_id FROM dumps WHERE path IN ({target_paths_sql}))  -- only their contents
              GROUP BY dump_id) s USING (dump_id)
        JOIN metrics m ON m.path = s.src
        JOIN dumps src ON src.path = s.src
        WHERE d.path IN ({target_paths_sql})
        """
    )


def _refresh_other_paths(con) -> None:
    """Paths outside the batch whose content was just re-parsed take the new results."""
    con.execute(
        """
        UPDATE dumps SET parser_version = n.parser_version, status = n.status, error = n.error, lost_metrics = n.lost_metrics
        FROM (SELECT * FROM dumps WHERE path IN (SELECT path FROM _paths) AND dump_id IN (SELECT dump_id FROM _ids)) n
        WHERE dumps.dump_id = n.dump_id AND dumps.path NOT IN (SELECT path FROM _paths)
        """
    )
    stale = "SELECT path FROM dumps WHERE dump_id IN (SELECT dump_id FROM _ids) AND path NOT IN (SELECT path FROM _paths)"
    con.execute(f"DELETE FROM metrics WHERE path IN ({stale})")
    _copy_metrics_to(con, stale)


def _drop_orphans(con, old_ids: list[str]) -> None:
    if not old_ids:
        return
    with registered(con, _old=strings("dump_id", old_ids)):
        records.drop_contents(con, "SELECT dump_id FROM _old WHERE dump_id NOT IN "
                                   "(SELECT dump_id FROM dumps WHERE dump_id IS NOT NULL)")


def _finite(v: float) -> float | None:
    v = float(v)
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def table_counts(con: duckdb.DuckDBPyConnection, *, every: bool = False) -> dict[str, int]:
    """Rows per table (core and records): for summaries and tests; ``every``: every table
    the file holds (whatever version of the code made it), to check a replay."""
    if every:
        names = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY table_name").fetchall()]
    else:
        names = list(ws.CORE_TABLES) + list(all_tables()) + list(ws.derived_tables())
    return {t: con.execute(f"SELECT count(*) FROM {ws.quote_ident(t)}").fetchall()[0][0] for t in names}


# ---------------------------------------------------------------- a night's staged outcomes

def run_row(info) -> dict:
    """The runs row of a bucket's run (``flows.ingest.bucket.read_runs``), for ``upsert_runs``."""
    return {"run_id": info.run_id, "started_at": info.started_at, "commit": info.commit,
            "tags": list(info.tags or []), "extra": info.extra or {}, "meta_errors": list(info.meta_errors)}


def staged_dump(o: Outcome, *, with_records: bool) -> StagedDump:
    """The ``StagedDump`` of a staged outcome; ``with_records``: its records and metrics too (the
    first path of a content the warehouse does not hold parsed), else a copy of the held ones."""
    s, obj = o.staged.summary, o.obj
    fields = {"path": obj.path, "run_id": obj.run_id, "job": obj.job or "", "size_bytes": obj.size,
              "source_version": obj.version or None,
              "dump_id": o.staged.sha256, "kind": s["kind"], "stage": s["stage"], "program": s["program"],
              "status": s["status"], "error": "\n".join(s["errors"]) or None, "parser_version": s["parser_version"],
              "lost": lost_of(s["status"], s.get("lost"))}
    if not with_records:  # content already loaded (another path): its records and metrics are reused
        return StagedDump(**fields)
    return StagedDump(**fields, metrics=s["metrics"], programs=s.get("programs") or None, tables={t: [p] for t, p in o.staged.tables.items()})


def load_staged(con: duckdb.DuckDBPyConnection, staged: list[Outcome], contents: list[str]) -> int:
    """The staged outcomes (``still_new``'s) loaded in batches of ``LOAD_BATCH``, each content's
    records once (the first of its paths; the others are copies); ``contents``: their sha256s.
    Returns the records rows inserted."""
    rows = 0
    seen: set[str] = set()
    # Contents whose records were compacted away since: loaded again, not copied.
    kept = with_records(con, contents)
    done = parsed_contents(con, contents)  # one query, not one per dump
    for start in range(0, len(staged), LOAD_BATCH):
        batch = []
        for o in staged[start : start + LOAD_BATCH]:
            s = o.staged.summary
            # A refused object has no content: its row alone, as a copy with nothing to copy.
            first = o.staged.sha256 is not None and o.staged.sha256 not in seen and (
                o.staged.sha256 not in kept or (o.staged.sha256, s["kind"], s["parser_version"]) not in done)
            if first and o.staged.summary.get("held"):
                continue  # not parsed (held at discovery), and its records went since: the next night parses it
            seen.add(o.staged.sha256)
            batch.append(staged_dump(o, with_records=first))
        rows += sum(load_dumps(con, batch).values())
    return rows


def drop_loaded_staging(con: duckdb.DuckDBPyConnection, staging_dir: Path) -> int:
    """Staged contents the warehouse now holds (this night's and any earlier night's) are
    not needed again: the published warehouse is the record. What is not loaded (a night
    that failed before this point) stays, so its retry needs no re-parse."""
    staged = housekeeping.staged_contents(staging_dir)
    if not staged:
        return 0
    held = {d for (d,) in con.execute("SELECT DISTINCT dump_id FROM dumps WHERE list_contains(?, dump_id)",
                                      [sorted(staged)]).fetchall()}
    return housekeeping.drop_staged(staging_dir, held)
