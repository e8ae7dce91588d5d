"""The I/O half of Dumpscope: the ``dumpscope`` command, the Prefect flows and everything
that touches a bucket, a file or the warehouse.

- ``cli``: argument parsing only; each command calls one of the modules below.
- ``nightly`` (the flow: discover, parse, load, aggregate, report, site), with ``bucket``
  (listing and reading a bucket through fsspec) and ``staging`` (a dump's bytes to Parquet).
- ``aggregate``, ``accept``, ``diff``, ``report``, ``site``, ``query``, ``parse_files``:
  one command's work each; ``history``: what the aggregation reads of the runs before
  the night.
- ``warehouse``: the DuckDB schema (``schema``) and its one locked writer (``store``).

May import anything in ``transforms``; nothing in ``transforms`` imports ``flows``.
"""
