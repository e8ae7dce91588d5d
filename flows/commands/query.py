"""``dumpscope sql``: a read-only query on the warehouse, printed as a table, CSV or JSON.

The query runs through ``flows.warehouse.inspect.rows_of`` on a locked-down read-only
connection. A refusal caused by the records store says so: a copied warehouse file whose
records directory (the one its writer named, elsewhere) is not there names the directory
(exit 2; the other tables answer), a damaged store names the file and the repair
(``inspect.store_damage``; a store gone from beside the file its writer wrote is one). Those errors, and a query on the
records tables that finds no row, say which runs the records tables hold
(``records.held_runs``: the last ``[warehouse] keep_records_runs`` runs' contents).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import duckdb

from flows.commands.shared import json_value, open_to_read, print_table
from flows.errors import CommandError
from flows.warehouse import records
from flows.warehouse.inspect import rows_of, store_damage
from transforms.escape import plain_text
from transforms.parsers.formats import all_tables

FORMATS = ("table", "csv", "json")


class QueryError(CommandError):
    """The warehouse could not be opened or the query was refused; the message is one line for people."""


def run_query(warehouse: Path, query: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows of ``query``; raises QueryError."""
    names, rows, _ = answer(warehouse, query)
    return names, rows


def answer(warehouse: Path, query: str) -> tuple[list[str], list[tuple], str | None]:
    """Column names and rows of ``query``, and a note for people when it read the records
    tables and found nothing (which runs they hold); raises QueryError."""
    con = open_to_read(warehouse, QueryError, say=_one_line, spill=False)
    try:
        names, rows = rows_of(con, query)
        note = None
        if not rows and _reads_records(query):
            note = _held(con)
        return names, rows, note
    except (duckdb.PermissionException, duckdb.InvalidInputException, duckdb.IOException) as exc:
        gone = _missing_root(con)
        # Gone from beside this very file: a damaged store, which a writer repairs (below).
        if gone is not None and gone != records.root_for(warehouse):
            raise QueryError(plain_text(
                f"the records directory {gone} is missing: the records tables (hlo_instructions, buffer_*, inductor_*, "
                "onnx_*) read their rows there: a copy of the warehouse file reads the directory its writer named, at that "
                f"path (the other tables answer without it; {_held(con)})"), exit_code=2) from None
        damage = store_damage(con, warehouse)
        if damage:
            raise QueryError(f"{damage} ({_held(con)})") from None
        if isinstance(exc, duckdb.IOException):
            raise QueryError(_one_line(exc)) from None
        raise QueryError(f"refused: {_one_line(exc)} (dumpscope sql only reads the warehouse; "
                         "see README, 'Operating it safely')") from None
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from None
    finally:
        con.close()


def _missing_root(con: duckdb.DuckDBPyConnection) -> Path | None:
    try:
        return records.missing_root(con)
    except (duckdb.Error, ValueError, OSError):  # an older warehouse (no listing), an in-memory one, no access
        return None


def _reads_records(query: str) -> bool:
    """Whether ``query`` names a records table (a word of it: a hint, not a parse)."""
    words = set(re.findall(r"[a-z_][a-z0-9_]*", query.lower()))
    return not words.isdisjoint(all_tables())


def _held(con: duckdb.DuckDBPyConnection) -> str:
    """Which runs the records tables hold, as plain text (run ids come from run.json)."""
    try:
        return plain_text(records.held_runs(con).describe())
    except duckdb.Error:  # a warehouse older than the records store: no listing to tell from
        return "the records tables' runs are unknown (an older warehouse)"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def main(*, query: str, warehouse: Path, fmt: str) -> None:
    names, rows, note = answer(warehouse, query)
    print_rows(names, rows, fmt)
    if note:  # on stderr: csv and json on stdout stay data
        print(f"note: no rows; {note}", file=sys.stderr)


def print_rows(names: list[str], rows: list[tuple], fmt: str) -> None:
    if fmt == "json":
        json.dump([{n: json_value(v) for n, v in zip(names, r)} for r in rows], sys.stdout, default=str, ensure_ascii=False)
        sys.stdout.write("\n")
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(names)
        w.writerows(rows)
    else:
        print_table(names, rows)
