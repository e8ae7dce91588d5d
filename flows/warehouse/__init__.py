"""The DuckDB warehouse, owned by the flows: ``schema`` declares it (DDL, comments, views,
migrations: pure SQL text built from the parsers' and trends' declared schemas), ``store``
opens it (one locked writer that publishes atomically, read-only readers) and
``records`` keeps the records rows as Parquet files beside it, one per content and table;
``reads`` holds the shared read helpers (frames, registered frames, "no such run") and
``inspect`` looks at a warehouse from outside its writer (is it one, a person's own SQL,
a damaged records store).

May import ``flows.errors``, ``flows.resources``, ``flows.ingest`` and ``transforms`` (the declared schemas of parsers and trends); ``schema`` stays
pure SQL text; ``store`` and ``records`` touch the files.
"""
