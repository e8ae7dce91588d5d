"""The report site's data: page contexts (``pages``) and Altair chart specs (``charts``),
built from the tables the trends write. Templates only format what these return.

May import ``transforms.units`` and ``transforms.trends``; never a parser.
"""
