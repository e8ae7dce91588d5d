"""The fast tier's sample warehouse (``tests/sample_build.py``, no Prefect) is the nightly's: every
table and view of the warehouse schema holds the same rows, and the night's report says the same."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from flows.warehouse.store import connect_readonly

# Times of day: when the writer loaded, accepted, notified or repaired (wall clock, not data).
TIMES_OF_DAY = {"ingested_at", "accepted_at", "sent_at", "repaired_at"}
# schema_info rows that are a time of day (the last load aggregated) or the warehouse's own path.
SCHEMA_INFO_ELSEWHERE = {"aggregated_through": None, "records_root": "warehouse.duckdb.records"}


def _relations(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables "
                                      "WHERE table_schema = 'main' ORDER BY table_name").fetchall()]


def _rows(con: duckdb.DuckDBPyConnection, relation: str) -> tuple[list[str], list[tuple]]:
    """(columns, rows sorted), the time-of-day columns left out; schema_info's path as its name."""
    columns = [c for (c,) in con.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
                                         "AND table_name = ? ORDER BY ordinal_position", [relation]).fetchall()
               if c not in TIMES_OF_DAY]
    rows = con.execute(f"SELECT {', '.join(duckdb_name(c) for c in columns)} FROM {duckdb_name(relation)}").fetchall()
    if relation == "schema_info":
        rows = [(k, SCHEMA_INFO_ELSEWHERE[k] if k == "aggregated_through" else Path(v).name if k in SCHEMA_INFO_ELSEWHERE else v)
                for k, v in rows]
    return columns, sorted(rows, key=repr)


def duckdb_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _tables(warehouse: Path) -> dict[str, tuple[list[str], list[tuple]]]:
    with connect_readonly(warehouse) as con:
        return {r: _rows(con, r) for r in _relations(con)}


@pytest.mark.integration
def test_the_warehouse_built_without_prefect_is_the_nightly_s_table_by_table(sample_warehouse, nightly_sample_warehouse):
    built, nightly = _tables(sample_warehouse), _tables(nightly_sample_warehouse)
    assert sorted(built) == sorted(nightly)
    assert len(built) > 40 and {"dumps", "metrics", "incidents", "content_items", "diffs", "hlo_instructions"} <= set(built)
    for relation in sorted(nightly):
        columns, rows = nightly[relation]
        assert built[relation][0] == columns, relation
        assert built[relation][1] == rows, relation
    assert sum(len(rows) for _, rows in nightly.values()) > 10_000  # the sample, not an empty schema
    assert (sample_warehouse.parent / "report.md").read_text() == (nightly_sample_warehouse.parent / "report.md").read_text()
