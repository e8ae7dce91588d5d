"""The pure half of Dumpscope: bytes and tables in, tables out; no Prefect, no DuckDB, no files.

Packages, in pipeline order (each may import only those above it, plus the modules here):

- ``transforms.parsers``: one module per dump format and the sniffer that picks one.
- ``transforms.trends``: series identity, rules, trends, structural diffs and the night's
  summary; reads warehouse tables (as polars frames), never a parser.
- ``transforms.site``: page contexts and Altair charts, from the trends' tables.

Shared by all of them, at this level: ``records`` (the parser contract and the vocabulary
shared downstream, such as the collective opcodes), ``figure_bounds`` (what a figure of each
kind may be, declared once), ``reading`` (bytes to lines),
``naming`` (program names from paths), ``parse`` (the one entry point: a dump's bytes to
its summary and frames), ``layout`` (what a bucket path and run.json say), ``bounded_json`` (JSON from
outside decoded with its nesting bounded first), ``units``,
``volatile`` (the one function that replaces what changes from process to process: ids,
addresses, pids, temporary folders, path prefixes; every comparison and page goes through it),
``xla_siblings`` (a cut XLA side file told by the other files of its compile), ``check_report``
(what ``dumpscope check`` found, as text, Markdown or JSON), and ``escape`` (the one helper that makes a value from outside safe for where it lands: HTML
text or attribute, Markdown, a slug, a URL, SQL, a shell word).
"""
