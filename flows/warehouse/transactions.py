"""One transaction on a connection: committed when the block ends, rolled back when anything
(an error, an interrupt) leaves it.

Works on a DuckDB connection and on the writer's journaling recorder alike
(``flows.warehouse.journal``): anything with ``begin``, ``commit`` and ``rollback``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TypeVar

Connection = TypeVar("Connection")


@contextlib.contextmanager
def transaction(con: Connection) -> Iterator[Connection]:
    con.begin()
    try:
        yield con
    except BaseException:
        con.rollback()
        raise
    con.commit()
