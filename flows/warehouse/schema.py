"""The warehouse schema as text: DDL, comments, views and forward migrations.

Pure: builds SQL strings from the parsers' declared schemas
(``transforms.parsers.formats.all_tables()`` / ``all_table_docs()``) and from the core
tables declared here; it never connects to a database (``flows.warehouse.store`` runs it).

Two kinds of tables, two ways to evolve:

- Core tables (``runs``, ``dumps``, ``metrics``, ``schema_info``) change only through
  the numbered ``MIGRATIONS``; ``SCHEMA_VERSION`` is the number of the last one, stored
  in ``schema_info``. Opening an older warehouse applies the missing migrations in
  order; a newer one is refused (``SchemaTooNew``).
- Records tables follow their parsers. Their rows are Parquet files beside the warehouse
  (``flows.warehouse.records``, listed in ``records_files``); each table is a view of its
  declared columns over the files listed (a column a file lacks reads as NULL; a parser
  that gains a column bumps its ``PARSER_VERSION``, so its dumps get re-parsed and fill it).
- Derived tables (``derived_tables()``: trends, regressions, diffs...) are recomputed
  from the rest by every aggregation; they are declared and synced the same way,
  without the identity columns.

Comments and views are re-stated on every writable open (``comments_sql``,
``views_sql``): they describe whatever the code declares now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import polars as pl

SCHEMA_VERSION = 15


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


IDENTITY_COLUMNS: dict[str, tuple[str, str]] = {
    "dump_id": ("VARCHAR", "sha256 (hex) of the dump's raw bytes as stored in the bucket (gzip included): the content's identity, shared by every path holding the same bytes."),
    "parser_version": ("SMALLINT", "PARSER_VERSION of the parser that wrote this row; a new version re-parses the dumps it reads differently."),
}

# name -> (doc, {column: (type, doc)}). Order of columns is the table's column order.
CORE_TABLES: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "runs": (
        "One row per run (a night's directory <bucket>/<run_id>/): when it started and what it built.",
        {
            "run_id": ("VARCHAR PRIMARY KEY", "Run directory name directly under the bucket."),
            "started_at": ("TIMESTAMP", "Start of the run: run.json's started_at, else an ISO date in the run id, else the earliest object time (UTC)."),
            "commit": ("VARCHAR", "Source commit the run built, from run.json (NULL when unknown)."),
            "tags": ("VARCHAR[]", "Free labels from run.json (for example the hardware or a branch)."),
            "extra": ("JSON", "Every other field of run.json, as given."),
            "meta_errors": ("VARCHAR[]", "What was wrong with run.json (not JSON, a field of the wrong type, an impossible date...), each naming the file; the valid fields were kept and these were not. Empty when run.json was fine or absent."),
        },
    ),
    "dumps": (
        "One row per dump file seen in the bucket (any kind, including unknown and failed): where it is, what it is, and how parsing went.",
        {
            "path": ("VARCHAR NOT NULL", "Object path relative to the bucket root: <run_id>/<job>/...; the row's key (one row per path: the writer replaces a path's row)."),
            "run_id": ("VARCHAR", "Run the dump belongs to (runs.run_id)."),
            "job": ("VARCHAR", "Job directory under the run (<bucket>/<run_id>/<job>/...)."),
            "kind": ("VARCHAR", "Dump format: xla_hlo, xla_buffer_assignment, xla_memory_usage_report, inductor_ir, inductor_output_code, onnx_report or unknown."),
            "stage": ("VARCHAR", "Compiler stage the dump shows (before_optimizations, after_optimizations, pass:<name>, pre_fusion, post_fusion, ...); NULL when the format has none."),
            "program": ("VARCHAR", "Program (HLO module, Inductor graph, ONNX export) the dump describes."),
            "size_bytes": ("BIGINT", "Size of the object in bytes, as stored (compressed when .gz)."),
            "dump_id": ("VARCHAR", IDENTITY_COLUMNS["dump_id"][1] + " Records tables join on it."),
            "parser_version": ("SMALLINT", "PARSER_VERSION the records of this content were parsed with (0 for unknown files)."),
            "status": ("VARCHAR", "ok: fully read; partial: records loaded but the dump was damaged or not fully understood; failed: nothing usable."),
            "error": ("VARCHAR", "Errors of the parse, each naming the file and line, joined by newlines; NULL when none."),
            "ingested_at": ("TIMESTAMP", "When this row was last written (UTC)."),
            "source_version": ("VARCHAR", "What the store said of the object's version when it was read: the ETag or version id on S3, else the modification time in nanoseconds. A different value makes the next night read the bytes again (and reload them when their hash changed)."),
            "lost_metrics": ("VARCHAR[]", "Of a partial dump whose parser tells what its damage cost: those metrics (shell patterns, e.g. kernel.*; empty: none); its other metrics stand and are stored, charted and judged like an ok dump's (a failure incident opens only when a lost one is a figure the verdict reads). NULL for every other dump: an ok one lost nothing, a failed one, or a partial one whose parser cannot tell, everything."),
        },
    ),
    "metrics": (
        "One row per metric of each parsed dump path (docs/metrics.md defines the metrics), and the dynamo.rank_divergence of each program of a rank log, which the aggregation writes from the other ranks of its run; the table trends are computed from.",
        {
            "run_id": ("VARCHAR", "Run of the dump (runs.run_id)."),
            "job": ("VARCHAR", "Job of the dump."),
            "program": ("VARCHAR", "Program the metric describes."),
            "kind": ("VARCHAR", "Dump format the metric comes from."),
            "stage": ("VARCHAR", "Compiler stage of the dump (NULL when the format has none)."),
            "metric": ("VARCHAR", "Metric name (docs/metrics.md)."),
            "value": ("DOUBLE", "Metric value (bytes, counts, seconds: see the metric's definition); NULL when not finite."),
            "dump_id": ("VARCHAR", "Content of the dump the value was read from (dumps.dump_id)."),
            "path": ("VARCHAR", "Dump path the row belongs to (dumps.path); rows are replaced per path."),
        },
    ),
    "accepts": (
        "The accept log: changes people declared intended (dumpscope accept). The series' baseline restarts at the accepted run, so the change stops being flagged.",
        {
            "series": ("VARCHAR", "Series id (metric_trends.series), or a shell pattern of series ids (jax-pmap/*); NULL when an incident was accepted by its id."),
            "run_id": ("VARCHAR", "Run whose values become the new baseline (the latest run when the accept was given)."),
            "metric": ("VARCHAR", "The one metric accepted; NULL: every metric of the series."),
            "note": ("VARCHAR", "Why the change is intended (free text)."),
            "accepted_by": ("VARCHAR", "Who accepted it (the login name of the user running the command)."),
            "accepted_at": ("TIMESTAMP", "When it was accepted (UTC)."),
            "incident_id": ("VARCHAR", "The incident accepted (incidents.incident_id); NULL when the accept names series."),
            "closed_incidents": ("VARCHAR[]", "The incidents this accept closed (incidents.incident_id, sorted): those open at run_id before it whose status there (incident_status) is accepted after the aggregation it ran. Empty when it closed steps of incidents that stay open (their other steps are not accepted); NULL for accepts logged before schema version 14, which did not record it."),
        },
    ),
    "compacted_contents": (
        "Contents whose records rows were compacted away (flows.verdict.compaction.compact_records): no dump of the latest [warehouse] keep_records_runs runs (default 7) held them and their items were stored. Their dumps, metrics and items stay; a content that comes back is parsed again and leaves this table.",
        {
            "dump_id": ("VARCHAR NOT NULL", "The content (dumps.dump_id) whose records rows are gone; listed once."),
        },
    ),
    "store_repairs": (
        "Records files the writer found damaged (missing, cut, not Parquet) and unlisted (flows.warehouse.records.heal): their content was marked compacted and is parsed again by the next night that finds a dump of it in the bucket. The overview lists the repairs of the last 7 days.",
        {
            "file": ("VARCHAR NOT NULL", "The damaged file, under the records store (records_files.file)."),
            "reason": ("VARCHAR NOT NULL", "What was wrong with it: missing, empty, unreadable, not a readable Parquet file, cut short."),
            "dump_id": ("VARCHAR NOT NULL", "The content (dumps.dump_id) whose records the file held."),
            "repaired_at": ("TIMESTAMP", "When the writer unlisted it (UTC)."),
        },
    ),
    "records_files": (
        "The Parquet files holding the records rows (docs/scale.md): one row per file, one file per content, records table and part, under <warehouse>.records/ (schema_info.records_root). Each records table is a view reading exactly the files listed here (through its inner view, records_store.<table>).",
        {
            "dump_id": ("VARCHAR NOT NULL", "The content (dumps.dump_id) whose rows the file holds."),
            "table_name": ("VARCHAR NOT NULL", "The records table (view) the file belongs to."),
            "file": ("VARCHAR NOT NULL", "Path of the file under the records store: <table>/<dump_id>.v<parser_version>.<part>.parquet."),
            "rows": ("BIGINT", "Rows in the file."),
        },
    ),
    "notifications": (
        "What was sent to whom (dumpscope run --notify): one row per run and target, so a run's new incidents are announced once; a message not delivered is retried by every later run that has the target until it is.",
        {
            "run_id": ("VARCHAR", "Run whose new incidents were announced."),
            "target": ("VARCHAR", "Digest (sha256, 16 hex digits) of the Apprise URL: the URL itself often holds a token."),
            "new_incidents": ("INTEGER", "How many new incidents the message listed."),
            "delivered": ("BOOLEAN", "Whether Apprise reported the message delivered. false: owed to the target, retried by the next run (and shown on the site's overview)."),
            "sent_at": ("TIMESTAMP", "When it was last sent or tried (UTC); NULL when it was never tried (its run ran out of time, or an earlier message to the target failed)."),
            "error": ("VARCHAR", "Why the last try failed (Apprise's words, without the URL); NULL once delivered."),
            "attempts": ("INTEGER", "How many times it was tried."),
        },
    ),
    "schema_info": (
        "Facts about the warehouse itself: schema_version holds the number of the last migration applied, aggregated_with what the derived tables were computed with (aggregation version and settings), aggregated_through the last dump ingestion they include, aggregated_accepts the accept log they include (its size and last entry), records_root the directory of the records files.",
        {
            "key": ("VARCHAR PRIMARY KEY", "Name of the fact (schema_version, aggregated_with, aggregated_through, aggregated_accepts, records_root)."),
            "value": ("VARCHAR", "Its value, as text."),
        },
    ),
}

VIEWS: dict[str, tuple[str, str]] = {
    "latest_metrics": (
        "The latest value of each metric per (job, kind, stage, program, metric): from the most recent run (runs.started_at, then run_id) that has the program; started_at tells how recent that is.",
        """
SELECT m.job, m.kind, m.stage, m.program, m.metric, m.value, m.run_id, r.started_at, m.dump_id, m.path
FROM metrics m LEFT JOIN runs r USING (run_id)
QUALIFY row_number() OVER (
    PARTITION BY m.job, m.kind, m.stage, m.program, m.metric
    ORDER BY r.started_at DESC NULLS LAST, m.run_id DESC, m.path) = 1
""",
    ),
    "content_items": (
        "Structural items of each dump content (fusions, collectives, allocations, fused groups, ONNX steps...), one row per (items_key, category, key), with the dump lines they come from; computed once per content and kept for ever (content_item_rows, their excerpt texts kept once in excerpt_texts). The view dump_items gives them per dump path.",
        """
SELECT r.items_key, r.category, r.key, r.label, r.count, r.bytes, r.value, r.detail, r.excerpt_lines, t.excerpt, r.excerpt_from
FROM content_item_rows r LEFT JOIN excerpt_texts t USING (excerpt_id)
""",
    ),
    "dump_items": (
        "The structural items of each dump path (content_items through dump_series.items_key), one row per (path, category, key): fusions, collectives, allocations, fused groups, ONNX steps...; a dump without items has one row of category 'none'. A TORCH_TRACE log is a series per program but its items are listed once.",
        """
SELECT s.path, d.dump_id, d.parser_version, c.category, c.key, c.label, c.count, c.bytes, c.value, c.detail,
       c.excerpt_lines, c.excerpt, c.excerpt_from
FROM (SELECT DISTINCT path, items_key FROM dump_series) s JOIN dumps d USING (path) JOIN content_items c USING (items_key)
""",
    ),
    "metric_series": (
        "Each metric of each (job, kind, stage, program) over the runs, one row per run and dump path, with the run's start time and commit: the input of trend charts.",
        """
SELECT r.started_at, m.run_id, r.commit, m.job, m.kind, m.stage, m.program, m.metric, m.value, m.dump_id, m.path
FROM metrics m LEFT JOIN runs r USING (run_id)
""",
    ),
}


# The verdict's views: incident_status is the one definition of each incident's status
# at each run (new, open, fixed, accepted, lost); incidents_at(run), run_verdicts (the
# counts), the summary, the CLI, the notifications and the site all read it.
_RUN_ORDER = "(started_at, run_id)"
VERDICT_VIEWS: dict[str, tuple[str, str]] = {
    "incident_status": (
        "Each incident's status at each run it is listed in, from the run it opened in to the run it closed in (or the latest run while open), but for the runs after a closing that a revert undid, up to the run that reopened it: new (opened there), open (opened earlier, not closed by then; also in the run a revert reopened it), fixed, accepted or lost (closed there). age_runs: runs since it opened. The one definition of every status and count Dumpscope shows.",
        f"""
WITH gaps AS (
    SELECT g.incident_id, (c.started_at, c.run_id) AS c_at, (o.started_at, o.run_id) AS o_at
    FROM (SELECT incident_id, unnest(reopened_after) AS closed_run, unnest(reopened_runs) AS reopened_run
          FROM incidents WHERE len(reopened_runs) > 0) g
    JOIN runs c ON c.run_id = g.closed_run JOIN runs o ON o.run_id = g.reopened_run)
SELECT r.run_id, i.incident_id,
       CASE WHEN i.closed_run = r.run_id THEN i.closed_how
            WHEN list_contains(i.reopened_after, r.run_id) THEN CASE WHEN i.kind = 'improvement' THEN 'lost' ELSE 'fixed' END
            WHEN i.opened_run = r.run_id THEN 'new'
            ELSE 'open' END AS status,
       (SELECT count(*) FROM runs x WHERE (x.started_at, x.run_id) > (o.started_at, o.run_id)
                                      AND (x.started_at, x.run_id) <= (r.started_at, r.run_id)) AS age_runs
FROM incidents i
JOIN runs o ON o.run_id = i.opened_run
LEFT JOIN runs c ON c.run_id = i.closed_run
JOIN runs r ON (r.started_at, r.run_id) >= (o.started_at, o.run_id)
           AND (c.run_id IS NULL OR (r.started_at, r.run_id) <= (c.started_at, c.run_id))
LEFT JOIN gaps g ON g.incident_id = i.incident_id AND (r.started_at, r.run_id) > g.c_at AND (r.started_at, r.run_id) < g.o_at
WHERE g.incident_id IS NULL
""",
    ),
    "run_verdicts": (
        "Per run, the counts of its verdict (what the summary's first line says): new, open (still open, opened earlier), fixed and accepted regression and failure incidents; improvements (new improvement incidents) and lost (improvements that went back). From incident_status.",
        """
SELECT r.run_id, r.started_at,
       count(*) FILTER (s.status = 'new' AND i.kind <> 'improvement') AS new,
       count(*) FILTER (s.status = 'open' AND i.kind <> 'improvement') AS open,
       count(*) FILTER (s.status = 'fixed') AS fixed,
       count(*) FILTER (s.status = 'accepted') AS accepted,
       count(*) FILTER (s.status = 'new' AND i.kind = 'improvement') AS improvements,
       count(*) FILTER (s.status = 'lost') AS lost
FROM runs r LEFT JOIN incident_status s USING (run_id) LEFT JOIN incidents i USING (incident_id)
GROUP BY r.run_id, r.started_at
""",
    ),
    "figure_status": (
        "Each metric_trends row beside the incident step open on its series and metric at its run (the top of the stack when steps are stacked): step (regression, improvement, failure; NULL when none is open), its incident, its baseline and the change against it.",
        """
SELECT t.*, s.incident_id, s.step, s.opened_run, s.baseline, t.value - s.baseline AS change
FROM metric_trends t JOIN runs r USING (run_id)
LEFT JOIN (SELECT s.*, o.started_at AS o_at, o.run_id AS from_run, c.started_at AS c_at FROM incident_steps s
           JOIN runs o ON o.run_id = coalesce(s.reopened_run, s.opened_run) LEFT JOIN runs c ON c.run_id = s.closed_run) s
  ON s.series = t.series AND s.metric = t.metric
 AND (s.o_at, s.from_run) <= (r.started_at, r.run_id)
 AND (s.closed_run IS NULL OR (s.c_at, s.closed_run) > (r.started_at, r.run_id))
QUALIFY row_number() OVER (PARTITION BY t.series, t.metric, t.run_id ORDER BY s.o_at DESC NULLS LAST, s.from_run DESC) = 1
""",
    ),
    "regressions": (
        "The figures worse than their baseline at each run: the rows of figure_status whose open step is a regression or a failure (one row per series, metric and run; the incident says what stepped).",
        "SELECT * FROM figure_status WHERE step IN ('regression', 'failure')",
    ),
}
VIEWS |= VERDICT_VIEWS

# Table macros: parameterised views. incidents_at(run) is incident_status at one run, with
# each incident's columns.
MACROS: dict[str, tuple[str, str, str]] = {
    "incidents_at": (
        "run",
        "The incidents as they stand at a run: incidents_at('2026-11-20'): incident_status at that run (status: new, open, fixed, accepted, lost; age_runs) with each incident's columns. Every count of new, open and fixed incidents shown anywhere comes from here.",
        """
SELECT s.status, s.age_runs, i.*
FROM incident_status s JOIN incidents i USING (incident_id)
WHERE s.run_id = run
""",
    ),
}

# Columns of each view (documented with the doc of the same column in metrics/runs).
VIEW_COLUMNS: dict[str, tuple[str, ...]] = {
    "latest_metrics": ("job", "kind", "stage", "program", "metric", "value", "run_id", "started_at", "dump_id", "path"),
    "metric_series": ("started_at", "run_id", "commit", "job", "kind", "stage", "program", "metric", "value", "dump_id", "path"),

    "content_items": ("items_key", "category", "key", "label", "count", "bytes", "value", "detail", "excerpt_lines", "excerpt",
                      "excerpt_from"),
    "dump_items": ("path", "dump_id", "parser_version", "category", "key", "label", "count", "bytes", "value", "detail",
                   "excerpt_lines", "excerpt", "excerpt_from"),
}


class SchemaTooNew(RuntimeError):
    """The warehouse was written by a newer Dumpscope than this one."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    summary: str
    # SQL, or a function of the connection for a step SQL cannot say (it runs its SQL on it).
    statements: tuple[str | Callable[..., None], ...]


def _drop_table_named(name: str) -> Callable[..., None]:
    """A step dropping the table ``name`` when there is one (a view of that name may already
    stand in its place: ``DROP TABLE IF EXISTS`` refuses a view)."""
    def drop(con) -> None:
        found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?",
                            [name]).fetchall()[0][0]
        if found:
            con.execute(f"DROP TABLE {quote_ident(name)}")
    return drop


def _create_core(name: str) -> str:
    cols = ",\n    ".join(f"{quote_ident(c)} {t}" for c, (t, _) in CORE_TABLES[name][1].items())
    return f"CREATE TABLE IF NOT EXISTS {quote_ident(name)} (\n    {cols}\n)"


# Ordered; each step takes the warehouse from version-1 to version. Never edit a
# released step: append a new one and bump SCHEMA_VERSION.
MIGRATIONS: list[Migration] = [
    Migration(1, "core tables runs, dumps, metrics, schema_info",
              tuple(_create_core(t) for t in ("runs", "dumps", "metrics", "schema_info"))),
    Migration(2, "accept log", (_create_core("accepts"),)),
    Migration(3, "run.json errors; the object version a dump was read at", (
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS meta_errors VARCHAR[]",
        "ALTER TABLE dumps ADD COLUMN IF NOT EXISTS source_version VARCHAR",
    )),
    Migration(4, "accepts by incident", ("ALTER TABLE accepts ADD COLUMN IF NOT EXISTS incident_id VARCHAR",)),
    Migration(5, "notifications sent", (_create_core("notifications"),)),
    # Items are kept per content now (content_items); dump_items becomes a view. The old
    # table was a cache by path: the next aggregation (AGGREGATE_VERSION 3) computes again.
    Migration(6, "structural items per content", ("DROP TABLE IF EXISTS dump_items",)),
    Migration(7, "compacted contents", (_create_core("compacted_contents"),)),
    # A key's index is rewritten whole at every checkpoint of its table: on a year of big
    # nights (half a million paths) that was megabytes per checkpoint, growing with the
    # history. The writer keeps paths and compacted contents unique itself.
    Migration(8, "dumps and compacted_contents without key indexes", tuple(
        stmt for table in ("dumps", "compacted_contents") for stmt in (
            f"ALTER TABLE {table} RENAME TO _{table}_v7",
            _create_core(table),
            # Every column named: a table lacking one (not a file a release wrote) is refused.
            f"INSERT INTO {table} SELECT {', '.join(quote_ident(c) for c in CORE_TABLES[table][1])} FROM _{table}_v7",
            f"DROP TABLE _{table}_v7"))),
    # Excerpt texts are kept once (excerpt_texts); the items' rows move to content_item_rows and
    # content_items becomes a view joining them (a warehouse without the table yet: nothing to move).
    Migration(9, "content items stored with their excerpt texts once", (
        "ALTER TABLE IF EXISTS content_items RENAME TO content_item_rows",)),
    # Records rows leave the file for Parquet files beside it (flows.warehouse.records):
    # compacting them is an unlink. The writer moves the old tables' rows out (records.adopt).
    Migration(10, "records rows as Parquet files listed in records_files", (_create_core("records_files"),)),
    # One verdict (issue 26): figures regress or improve only as incident steps. The rolling
    # baseline's columns go, and regressions becomes a view over the steps (figure_status).
    Migration(11, "the incidents' steps are the one verdict: rolling baselines and worse-again moves dropped", (
        _drop_table_named("regressions"),
        *(f"ALTER TABLE IF EXISTS metric_trends DROP COLUMN IF EXISTS {c}"
          for c in ("baseline", "baseline_runs", "change", "change_ratio", "verdict", "regressed_since")),
        *(f"ALTER TABLE IF EXISTS incident_steps DROP COLUMN IF EXISTS {c}" for c in ("worse_runs", "worse_from", "worse_to")),
        *(f"ALTER TABLE IF EXISTS run_rollups DROP COLUMN IF EXISTS {c}" for c in ("regressed_series", "regressions")),
    )),
    # A failed delivery was recorded and never tried again (issue 27): it is owed now, with its reason.
    Migration(12, "notifications: why a delivery failed and how often it was tried (failed ones are retried)", (
        "ALTER TABLE notifications ADD COLUMN IF NOT EXISTS error VARCHAR",
        "ALTER TABLE notifications ADD COLUMN IF NOT EXISTS attempts INTEGER",
        "UPDATE notifications SET attempts = 1 WHERE attempts IS NULL",
    )),
    # A damaged records file was healed silently: the overview says which, and whether its content came back.
    Migration(13, "store_repairs: the records files the writer found damaged and unlisted", (_create_core("store_repairs"),)),
    # A pattern accept did not say which incidents it closed (issue 29); older rows keep NULL.
    Migration(14, "accepts: the incidents each accept closed", (
        "ALTER TABLE accepts ADD COLUMN IF NOT EXISTS closed_incidents VARCHAR[]",)),
    # Damage spoils only what it touches (issue 44): a partial dump says which figures it lost; older rows
    # keep NULL (every figure in doubt) until their content is parsed again (torch_trace PARSER_VERSION 5).
    Migration(15, "dumps: the figures a partial dump's damage cost", (
        "ALTER TABLE dumps ADD COLUMN IF NOT EXISTS lost_metrics VARCHAR[]",)),
]


def derived_tables() -> dict[str, tuple[pl.Schema, dict[str, str]]]:
    """name -> (schema, docs with '' for the table) of every table aggregation writes."""
    from transforms.trends import diffs, incident_walk, rollups, series
    from transforms.trends import metric_trends as trends

    return {
        "dump_series": (series.SERIES_SCHEMA | {"items_key": pl.String}, series.SERIES_DOCS | {
            "items_key": "Content key of the dump's structural items (content_items.items_key); NULL for failed dumps."}),
        "metric_trends": (trends.TREND_SCHEMA, trends.TREND_DOCS),
        "series_events": (rollups.EVENT_SCHEMA, rollups.EVENT_DOCS),
        "run_rollups": (rollups.ROLLUP_SCHEMA, rollups.ROLLUP_DOCS),
        "job_totals": (rollups.TOTAL_SCHEMA, rollups.TOTAL_DOCS),
        "content_item_rows": (diffs.STORED_ITEM_SCHEMA, diffs.STORED_ITEM_DOCS),
        "excerpt_texts": (diffs.EXCERPT_TEXT_SCHEMA, diffs.EXCERPT_TEXT_DOCS),
        "diffs": (diffs.DIFF_SCHEMA, diffs.DIFF_DOCS),
        "incidents": (incident_walk.INCIDENT_SCHEMA, incident_walk.INCIDENT_DOCS),
        "incident_steps": (incident_walk.STEP_SCHEMA, incident_walk.STEP_DOCS),
    }


def pending_migrations(current: int, migrations: list[Migration] | None = None) -> list[Migration]:
    """The steps to apply to a warehouse at ``current``; raises ``SchemaTooNew``."""
    migrations = MIGRATIONS if migrations is None else migrations
    latest = migrations[-1].version if migrations else 0
    if current > latest:
        raise SchemaTooNew(
            f"warehouse schema version {current} is newer than this Dumpscope supports ({latest}); "
            "upgrade Dumpscope to open it (or point --warehouse at another file)"
        )
    return [m for m in migrations if m.version > current]


def duckdb_type(dtype: pl.DataType) -> str:
    """The DuckDB type a polars column is stored as (enums as VARCHAR)."""
    if isinstance(dtype, (pl.Enum, pl.Categorical)) or dtype == pl.String:
        return "VARCHAR"
    if isinstance(dtype, (pl.List, pl.Array)):
        return duckdb_type(dtype.inner) + "[]"
    simple = {
        pl.Boolean: "BOOLEAN", pl.Int8: "TINYINT", pl.Int16: "SMALLINT", pl.Int32: "INTEGER", pl.Int64: "BIGINT",
        pl.UInt8: "UTINYINT", pl.UInt16: "USMALLINT", pl.UInt32: "UINTEGER", pl.UInt64: "UBIGINT",
        pl.Float32: "FLOAT", pl.Float64: "DOUBLE", pl.Date: "DATE", pl.Datetime: "TIMESTAMP",
    }
    for pl_type, sql in simple.items():
        if dtype == pl_type or (pl_type is pl.Datetime and isinstance(dtype, pl.Datetime)):
            return sql
    raise TypeError(f"no DuckDB type for polars {dtype!r}")


def records_columns(schema: pl.Schema) -> dict[str, str]:
    """Column -> DuckDB type of a records table: identity columns, then the parser's."""
    cols = {name: t for name, (t, _) in IDENTITY_COLUMNS.items()}
    cols.update({name: duckdb_type(dtype) for name, dtype in schema.items()})
    return cols


def derived_sync_sql(tables: Mapping[str, pl.Schema], existing: Mapping[str, Mapping[str, str]]) -> list[str]:
    """DDL bringing the derived tables (declared as polars schemas) up to their declarations.

    ``existing``: table -> {column: DuckDB type} as the warehouse has them now.
    Creates missing tables, adds missing columns; columns the code no longer
    declares stay (NULL for new rows). A changed type raises: it needs a migration.
    (Records tables are views over Parquet files, made by ``flows.warehouse.records``.)
    """
    out: list[str] = []
    for table, schema in tables.items():
        want = {name: duckdb_type(dtype) for name, dtype in schema.items()}
        have = existing.get(table)
        if have is None:
            cols = ",\n    ".join(f"{quote_ident(c)} {t}" for c, t in want.items())
            out.append(f"CREATE TABLE IF NOT EXISTS {quote_ident(table)} (\n    {cols}\n)")
            continue
        for col, sql_type in want.items():
            if col not in have:
                out.append(f"ALTER TABLE {quote_ident(table)} ADD COLUMN {quote_ident(col)} {sql_type}")
            elif have[col].upper() != sql_type.upper():
                raise TypeError(f"{table}.{col} is {have[col]} in the warehouse but declared {sql_type}: add a migration")
    return out


def comments_sql(tables: Mapping[str, pl.Schema], docs: Mapping[str, Mapping[str, str]]) -> list[str]:
    """COMMENT ON statements for every table, column and view (records docs: '' = the table)."""
    out: list[str] = []
    for name, (doc, cols) in CORE_TABLES.items():
        out.append(f"COMMENT ON TABLE {quote_ident(name)} IS {quote_literal(doc)}")
        out += [f"COMMENT ON COLUMN {quote_ident(name)}.{quote_ident(c)} IS {quote_literal(d)}" for c, (_, d) in cols.items()]
    for table, schema in tables.items():
        out += records_comments_sql(table, schema, docs.get(table, {}))
    for table, (schema, tdocs) in derived_tables().items():
        out.append(f"COMMENT ON TABLE {quote_ident(table)} IS {quote_literal(tdocs[''])}")
        out += [f"COMMENT ON COLUMN {quote_ident(table)}.{quote_ident(c)} IS {quote_literal(tdocs[c])}" for c in schema.names()]
    out += [f"COMMENT ON MACRO TABLE {quote_ident(m)} IS {quote_literal(doc)}" for m, (_, doc, _) in MACROS.items()]
    from transforms.trends import diffs

    known = (CORE_TABLES["runs"][1] | CORE_TABLES["metrics"][1]
             | {c: ("", d) for c, d in diffs.CONTENT_ITEM_DOCS.items()}
             | {"path": ("", "Dump path (dumps.path)."), "parser_version": CORE_TABLES["dumps"][1]["parser_version"]})
    own = verdict_view_docs()
    for view, (doc, _) in VIEWS.items():
        out.append(f"COMMENT ON VIEW {quote_ident(view)} IS {quote_literal(doc)}")
        cols = own[view] if view in own else {c: known[c][1] for c in VIEW_COLUMNS[view]}
        out += [f"COMMENT ON COLUMN {quote_ident(view)}.{quote_ident(c)} IS {quote_literal(d)}" for c, d in cols.items()]
    return out


def verdict_view_docs() -> dict[str, dict[str, str]]:
    """Column docs of the verdict's views (``VERDICT_VIEWS``), in their column order."""
    from transforms.trends import incident_walk
    from transforms.trends import metric_trends as trends

    figure = {c: trends.TREND_DOCS[c] for c in trends.TREND_SCHEMA.names()} | {
        "incident_id": "The incident whose step is open on this figure at this run (the latest opened when steps are stacked); NULL when none is.",
        "step": "That step's kind: regression, improvement or failure; NULL when no step is open.",
        "opened_run": "Run the step opened in.",
        "baseline": incident_walk.STEP_DOCS["baseline"],
        "change": "value - baseline: how far the figure stands from the level before the step.",
    }
    return {
        "incident_status": {
            "run_id": "Run (runs.run_id).", "incident_id": "Incident (incidents.incident_id).",
            "status": "new (opened in this run), open (opened earlier, not closed by this run; or reopened in it by a revert), fixed, accepted or lost (closed in this run).",
            "age_runs": "Runs since the incident opened (0 in its opening run)."},
        "run_verdicts": {
            "run_id": "Run (runs.run_id).", "started_at": "Start of the run.",
            "new": "Regression and failure incidents opened in this run.",
            "open": "Regression and failure incidents opened earlier and still open at this run.",
            "fixed": "Regression and failure incidents fixed in this run.",
            "accepted": "Incidents accepted in this run.",
            "improvements": "Improvement incidents opened in this run.",
            "lost": "Improvement incidents lost in this run (their figures went back)."},
        "figure_status": figure,
        "regressions": figure,
    }


# Said on every records view (its comment): which runs it holds, and what a copy of the file needs.
RECORDS_HELD_DOC = (" Holds the rows of the contents of the last [warehouse] keep_records_runs runs (default 7; 0: every run;"
                    " a content shared by runs is stored once); older contents are compacted (compacted_contents), their"
                    " metrics, items and diffs kept. Rows are Parquet files under schema_info.records_root (records_files):"
                    " a copy of the warehouse file needs that directory too.")


# The schema of the records tables' inner views: each names its table's listed files and is
# replaced when the listing changes (``flows.warehouse.records.refresh_views``); ``main.<table>``,
# commented, selects from it and changes only with the declared columns.
RECORDS_STORE_SCHEMA = "records_store"


def records_views_sql(tables: Mapping[str, pl.Schema]) -> list[str]:
    """The views readers query for the records tables: their declared columns, from the inner views."""
    out = []
    for table, schema in tables.items():
        cols = ", ".join(quote_ident(c) for c in records_columns(schema))
        out.append(f"CREATE OR REPLACE VIEW {quote_ident(table)} AS SELECT {cols} "
                   f"FROM {quote_ident(RECORDS_STORE_SCHEMA)}.{quote_ident(table)}")
    return out


def records_comments_sql(table: str, schema: pl.Schema, tdocs: Mapping[str, str]) -> list[str]:
    """COMMENT ON statements for one records table (a view over its files)."""
    out = [f"COMMENT ON VIEW {quote_ident(table)} IS {quote_literal(tdocs.get('', table) + RECORDS_HELD_DOC)}"]
    col_docs = {c: d for c, (_, d) in IDENTITY_COLUMNS.items()} | {c: tdocs.get(c, c) for c in schema.names()}
    return out + [f"COMMENT ON COLUMN {quote_ident(table)}.{quote_ident(c)} IS {quote_literal(d)}" for c, d in col_docs.items()]


def views_sql() -> list[str]:
    """Views and table macros (after the derived tables they read exist)."""
    return ([f"CREATE OR REPLACE VIEW {quote_ident(v)} AS {body.strip()}" for v, (_, body) in VIEWS.items()]
            + [f"CREATE OR REPLACE MACRO {quote_ident(m)}({arg}) AS TABLE {body.strip()}" for m, (arg, _, body) in MACROS.items()])


def set_version_sql(version: int) -> str:
    return f"INSERT OR REPLACE INTO schema_info VALUES ('schema_version', '{int(version)}')"
