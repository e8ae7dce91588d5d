"""What the commands print with: values made fit for JSON, and rows as a table on a terminal or a pipe.

Shared by ``parse``, ``sql`` and ``incidents`` (a command never imports another's helpers).
"""

from __future__ import annotations

import math

from transforms.escape import plain_text


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
