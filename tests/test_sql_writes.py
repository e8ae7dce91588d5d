"""``dumpscope sql`` writes nowhere: not beside the warehouse (its ``.tmp/`` included),
not elsewhere, not into the warehouse, not an extension, a secret or a setting."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flows.commands.query import QueryError, run_query
from flows.warehouse import store as wh


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "wh.duckdb"
    with wh.Warehouse(path):
        pass
    (tmp_path / "wh.duckdb.tmp").mkdir()  # DuckDB's default temporary directory of the file
    return path


def _tree(root: Path) -> dict[str, int]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = Path(d) / f
            out[str(p.relative_to(root))] = p.stat().st_size
    return out


def _writes(d: Path) -> list[str]:
    return [
        f"COPY (SELECT 1 AS x) TO '{d}/wh.duckdb.tmp/out.csv'",
        f"COPY (SELECT 1 AS x) TO '{d}/wh.duckdb.tmp/out.parquet' (FORMAT parquet)",
        f"COPY (SELECT 1 AS x) TO '{d}/out.csv'",
        "COPY (SELECT 1 AS x) TO 'relative.csv'",
        f"COPY runs TO '{d}/wh.duckdb.records/runs.parquet' (FORMAT parquet)",
        f"EXPORT DATABASE '{d}/wh.duckdb.tmp/export'",
        f"ATTACH '{d}/wh.duckdb.tmp/other.duckdb' AS other",
        f"ATTACH '{d}/other.duckdb' AS other",
        "INSTALL httpfs",
        "LOAD httpfs",
        "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
        "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
        "CREATE TABLE t AS SELECT 1",
        "INSERT INTO runs (run_id) VALUES ('x')",
        "DELETE FROM dumps",
        f"SET temp_directory = '{d}/elsewhere'",
        f"SET profiling_output = '{d}/profile.json'",
        "SET enable_external_access = true",
        "RESET allowed_paths",
    ]


def test_every_write_path_of_sql_is_refused_and_nothing_is_written(warehouse: Path, monkeypatch):
    d = warehouse.parent
    monkeypatch.chdir(d)
    before = _tree(d)
    allowed = []
    for statement in _writes(d):
        try:
            run_query(warehouse, statement)
        except QueryError:
            continue
        allowed.append(statement)
    assert allowed == []
    assert _tree(d) == before
