"""Publishing a night: the report file, the notifications and the static site.

- ``report``: the night's Markdown report file.
- ``notify``: the notifications (Apprise): a night's new incidents announced to every target,
  what was delivered and what is still owed.
- ``site``: the mkdocs-material site rendered from ``site_templates/``, ``site_hooks`` (its
  mkdocs hooks) and ``site_mkdocs`` (its incremental mkdocs build: only the pages that changed).
- ``release``: the site and a warehouse snapshot published where readers get them (``--publish``):
  a directory's releases (what a publish deletes: only what it made), or an object store's objects,
  uploaded in ``upload_order`` (the site's links, leaves first).

May import ``flows.resources``, ``flows.storage_secrets``, ``flows.ingest``, ``flows.warehouse``, ``flows.verdict`` and
``transforms``.
"""
