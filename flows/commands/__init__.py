"""The commands besides ``run``: one module each, values in and data out (``cli`` prints).

- ``accept``, ``check``, ``diff``, ``doctor``, ``incidents``, ``parse``, ``query``.

Each failure a person can act on is a ``CommandError`` whose ``exit_code`` is the exit status
(``cli`` maps it once). May import every other package of ``flows`` and ``transforms``.
"""
