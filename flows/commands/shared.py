"""What the commands share (a command never imports another's helpers): the warehouse opened to
read, with its refusal as the command's error (``open_to_read``); values made fit for JSON
(``json_value``), and rows as a table on a terminal or a pipe (``print_table``).

DuckDB is imported when a warehouse is opened: ``parse`` prints with this module and loads none.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from flows.errors import CommandError
from transforms.escape import plain_text


def open_to_read(warehouse: Path | str, refused: type[CommandError], *, say: Callable[[BaseException], str] = str,
                 **options):
    """A read-only connection to ``warehouse`` (``flows.warehouse.store.connect_readonly`` with
    ``options``); a file that is missing or no warehouse raises ``refused``, saying ``say(error)``."""
    import duckdb

    from flows.warehouse.store import connect_readonly

    try:
        return connect_readonly(warehouse, **options)
    except (FileNotFoundError, duckdb.Error) as exc:
        raise refused(say(exc)) from None


def json_value(value: object) -> object:
    """A value JSON can carry: non-finite floats become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def print_table(names: list[str], rows: list[tuple], title: str | None = None, width: int | None = None,
                column_options: dict[str, dict] | None = None) -> None:
    """Rows as a rich table, every header, cell and the title as plain text: ``Text``, never
    markup, since values come from dumps and paths (``float32[s0, 128]`` is data, and
    ``[/stage]`` in a column comment is not a closing tag), and control characters shown as
    symbols (``transforms.escape.plain_text``: an escape sequence would drive the terminal).
    ``width``: the table's width when printed to a pipe (else its natural width);
    ``column_options``: rich ``add_column`` options by column name (widths, ratios)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Table(title=None if title is None else Text(plain_text(title)), title_justify="left")
    for name in names:  # wrapped on a narrow screen, never cut with "…"
        out.add_column(Text(plain_text(name)), **({"overflow": "fold"} | (column_options or {}).get(name, {})))
    for r in rows:
        out.add_row(*(Text("" if v is None else plain_text(v)) for v in r))
    console = Console()
    if not console.is_terminal:
        # Piped or redirected there is no screen to fit: rows keep their natural width
        # rather than folding values over lines at 80 columns (or the width asked for).
        console = Console(width=width or max(80, Console(width=1 << 20).measure(out).maximum))
    console.print(out)
