"""The report site's data: what it reads and the links every page shares (``data``), page
contexts (``pages``; the figure pages' ``sections``; each program's ``compile_view``; ``ranks``, a job's rank
logs side by side; the monthly ``archive`` of what is older than the window) and Altair chart specs (``charts``), built from the tables the trends write. Templates only format what these return.

Values stay data: the templates escape them through ``transforms.escape``.

May import ``transforms.units``, ``transforms.escape`` and ``transforms.trends``; never a parser.
"""
