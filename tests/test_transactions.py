"""``flows.warehouse.transactions.transaction``: the one way a write is made all or nothing."""

from __future__ import annotations

import duckdb
import pytest

from flows.warehouse.transactions import transaction


def test_a_transaction_commits_when_its_block_ends_and_rolls_back_when_an_error_leaves_it():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (x INTEGER)")
    with transaction(con):
        con.execute("INSERT INTO t VALUES (1), (2)")
    with pytest.raises(KeyboardInterrupt), transaction(con):
        con.execute("INSERT INTO t VALUES (3)")
        raise KeyboardInterrupt  # not an Exception: rolled back too
    assert con.execute("SELECT list(x ORDER BY x) FROM t").fetchone()[0] == [1, 2]
    con.execute("INSERT INTO t VALUES (4)")  # no transaction left open
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 3
