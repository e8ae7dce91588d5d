"""The DuckDB warehouse, owned by the flows:

- ``schema`` declares it (DDL, comments, views, migrations: pure SQL text built from the
  parsers' and trends' declared schemas); ``migrations`` brings a file up to it.
- ``store`` opens it: one locked writer that publishes atomically (``journal`` levels its
  standby); ``readonly`` its readers, locked down whoever wrote the file (``readers`` leases
  the files they see); ``fetch`` downloads a published snapshot within bounds.
- ``loading`` writes a night's staged dumps into it; ``discovery`` reads what it already holds
  of a night's objects; ``siblings`` checks XLA side files against the compiles it holds.
- ``records`` keeps the records rows as Parquet files beside it, one per content and table;
  ``footers`` remembers what each file's Parquet footer says; ``snapshot`` copies the warehouse
  and its records into one read-only file to hand out.
- ``transactions``: one transaction on a connection (committed, or rolled back on any exit).
- ``reads``: the shared read helpers (frames, registered frames, the order of runs, "no such run");
  ``inspect`` looks at a warehouse from outside its writer (is it one, a person's own SQL, a
  damaged records store).

May import ``flows.errors``, ``flows.resources``, ``flows.ingest`` (the staged outcomes it loads) and ``transforms``
(the declared schemas of parsers and trends); ``schema`` stays pure SQL text.
"""
