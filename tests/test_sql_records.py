"""``dumpscope sql`` on the records tables (issue 29): a copy of the warehouse file without
its records directory names that directory (exit 2) and its other tables still answer; a
query on the records tables that finds nothing says which runs they hold."""

from __future__ import annotations

import shutil
from datetime import datetime

import pytest

from flows.commands import query
from flows.commands.query import QueryError, run_query
from flows.warehouse import records
from flows.warehouse.loading import load_dumps, upsert_runs
from flows.warehouse.store import Warehouse
from tests.test_records_store import hlo, warehouse_with  # noqa: F401 - hlo: the fixture

NIGHTS = ("2026-11-17", "2026-11-18", "2026-11-19", "2026-11-20")


def test_a_copy_without_its_records_directory_names_it_and_its_other_tables_answer(tmp_path, hlo):  # noqa: F811
    first, _ = hlo
    original = warehouse_with(tmp_path / "ci" / "wh.duckdb", first)
    with Warehouse(original) as con:
        upsert_runs(con, [{"run_id": "r1", "started_at": datetime(2026, 11, 20), "commit": None, "tags": [],
                           "extra": {}, "meta_errors": []}])
    laptop = tmp_path / "laptop" / "wh.duckdb"
    laptop.parent.mkdir()
    shutil.copyfile(original, laptop)  # the file only, as a laptop or CI gets it
    shutil.rmtree(tmp_path / "ci")  # ... where the machine that wrote it is not
    assert run_query(laptop, "SELECT count(*) FROM dumps") == (["count_star()"], [(1,)])
    with pytest.raises(QueryError) as refused:
        run_query(laptop, "SELECT count(*) FROM hlo_instructions")
    assert refused.value.exit_code == 2
    message = str(refused.value)
    assert "\n" not in message and "Permission" not in message
    assert message.startswith(f"the records directory {records.root_for(original)} is missing: ")
    assert message.endswith("(the other tables answer without it; the records tables hold every row of run r1 "
                            "([warehouse] keep_records_runs: the last N runs' contents are kept))")


def test_a_records_query_that_finds_nothing_says_which_runs_are_held(sample_warehouse, capsys):
    names, rows, note = query.answer(sample_warehouse, "SELECT name FROM hlo_instructions WHERE opcode = 'no-such-op'")
    assert (names, rows) == (["name"], [])
    assert note == (f"the records tables hold every row of runs {NIGHTS[0]} to {NIGHTS[-1]} (4 runs) "
                    "([warehouse] keep_records_runs: the last N runs' contents are kept)")
    # Other tables, or rows found: no note.
    assert query.answer(sample_warehouse, "SELECT run_id FROM runs WHERE run_id = 'none'")[2] is None
    assert query.answer(sample_warehouse, "SELECT count(*) FROM hlo_instructions")[2] is None
    query.main(query="SELECT name FROM hlo_instructions WHERE false", warehouse=sample_warehouse, fmt="csv")
    out, err = capsys.readouterr()
    assert out == "name\n" and err == f"note: no rows; {note}\n"


def test_the_query_page_says_which_runs_the_records_tables_hold(sample_site):
    import html
    import re

    page = html.unescape(re.sub(r"<[^>]+>", "", (sample_site.out / "query.html").read_text()))
    text = " ".join(page.split())
    assert f"They hold every row of runs {NIGHTS[0]} to {NIGHTS[-1]} (4 runs)." in text
    assert "keep_records_runs in dumpscope.toml, default 7" in text


def test_held_runs_tells_whole_runs_from_runs_held_in_part(tmp_path, hlo):  # noqa: F811
    """r1 had both contents, r2 the first only; the second's records compacted: r2 is whole,
    r1 held in part (its first content, which r2 still has), r0 (no dump) holds none."""
    from dataclasses import replace

    first, second = hlo
    db = warehouse_with(tmp_path / "wh.duckdb", first)
    with Warehouse(db) as con:
        load_dumps(con, [replace(second, path="r1/job/other.txt"),
                         replace(first, run_id="r2", path="r2/job/module.txt", tables=None, metrics=None)])
        upsert_runs(con, [{"run_id": r, "started_at": datetime(2026, 11, d), "commit": None, "tags": [], "extra": {},
                           "meta_errors": []} for r, d in (("r0", 19), ("r1", 20), ("r2", 21))])
        assert records.held_runs(con) == records.HeldRuns(whole=("r2", "r1"), without=1)
        records.drop_contents(con, f"SELECT '{second.dump_id}'")
        con.execute("INSERT INTO compacted_contents VALUES (?)", [second.dump_id])
        held = records.held_runs(con)
    assert held == records.HeldRuns(whole=("r2",), partial=("r1",), without=1)
    assert held.describe() == ("the records tables hold every row of run r2, and of run r1 the contents later runs "
                               "still have; 1 other run none ([warehouse] keep_records_runs: the last N runs' contents "
                               "are kept)")
