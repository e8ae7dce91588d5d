"""The DuckDB warehouse, owned by the flows: ``schema`` declares it (DDL, comments, views,
migrations: pure SQL text built from the parsers' and trends' declared schemas) and
``store`` opens it (one locked writer that publishes atomically, read-only readers).

May import ``transforms`` (the declared schemas of parsers and trends); ``schema`` stays
pure SQL text, ``store`` alone connects.
"""
