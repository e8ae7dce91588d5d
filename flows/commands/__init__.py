"""The commands: one module each, values in; each does its work and prints at its end.

- ``parse``, ``query`` (``sql``), ``run``, ``aggregate``, ``accept``, ``incidents``, ``diff``,
  ``site``, ``watch`` (and ``serve``), ``check``, ``doctor``;
- ``night``: what ``run``, ``watch`` and ``serve`` share (a night's options, checked, handed to the flow);
- ``preflight``: the checks before any work (settings, memory limit, notify targets, the writer);
- ``signals``: Prefect's settings for this machine and the orderly exit on SIGTERM;
- ``shared``: what they share (opening the warehouse to read, JSON values, tables): no command imports
  another's helpers.

They hold no SQL (``tests/test_layout.py``): reads are calls into ``flows.warehouse`` and
``flows.verdict``. Each failure a person can act on is a ``flows.errors.CommandError`` whose
``exit_code`` is the exit status (``cli`` maps it once); a command that ends otherwise than 0
without an error (``--fail-on`` found incidents, ``doctor`` left problems) returns the status.
May import every other package of ``flows`` and ``transforms``.
"""
