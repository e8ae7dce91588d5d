"""Ingest: a dump bucket's listing and bytes, turned into staged Parquet.

- ``local_open``: opening a local file below the bucket root without following links.
- ``bucket_access``: reaching a bucket (a directory or any fsspec URL: ``connect``, ``check_bucket``,
  storage options) and the errors its readers raise.
- ``bucket``: listing and reading a bucket's objects and run.json.
- ``settle_state``: the state kept between nights of the objects still settling.
- ``staging``: one dump's bytes parsed into Parquet files in the staging directory, and the
  chunk a worker process stages; ``housekeeping``: what killed stagings left behind, and the
  content dirs a loaded night no longer needs.
- ``pool``: where a night's parsing runs (the spawned worker processes; held contents hashed in threads).

May import ``flows.errors``, ``flows.resources`` and ``transforms``. Nothing here imports Prefect or DuckDB at
import time: the nightly's spawned worker processes import this package.
"""
