"""The I/O half of Dumpscope: the ``dumpscope`` command, the Prefect flow and everything
that touches a bucket, a file or the warehouse. Its packages run in pipeline order, and
each may import only the ones before it (``tests/test_layout.py`` enforces the order and
that no module imports another in a cycle, deferred imports included):

1. ``resources``, ``storage_secrets``, ``errors``, ``locks``, ``stopwatch``: memory budgets, storage
   credentials (no I/O of dumps), ``CommandError``, the one error type a person can act on, the
   exclusive lock one writer (or one site builder) holds, and the one stopwatch of a night's stages.
2. ``ingest``: a bucket's listing and bytes, parsed into staged Parquet (spawn workers import it:
   no Prefect or DuckDB at import).
3. ``warehouse``: the DuckDB schema, its one locked writer and its readers, loading, the records
   store, the journal and the shared read helpers (``reads``).
4. ``verdict``: the aggregation (history, items, incidents) and reading the incidents back.
5. ``publish``: the night's report file, notifications and the static site.
6. ``nightly`` (the Prefect flow; each task one call into the packages above),
   ``night_settings`` (a night's settings: the flow's parameters, as one value),
   ``night_summary`` (what a night tells: counters, exit status) and ``prefect_server``
   (its temporary API server).
7. ``commands``: one module per command, values in, printed at its end; each failure a
   ``CommandError`` carrying its exit status.
8. ``cli``: the Typer declarations only.

May import anything in ``transforms``; nothing in ``transforms`` imports ``flows``.
"""
