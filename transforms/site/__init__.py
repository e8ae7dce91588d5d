"""The report site's data: page contexts (``pages``) and Altair chart specs (``charts``),
built from the tables the trends write. Templates only format what these return.

Values stay data: the templates escape them through ``transforms.escape``.

May import ``transforms.units``, ``transforms.escape`` and ``transforms.trends``; never a parser.
"""
