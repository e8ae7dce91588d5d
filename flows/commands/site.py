"""``dumpscope site``: build the report site from the published warehouse.

Refused with one line (exit 2) when ``--out`` is a file, or a directory of files that are not a
site (the build replaces it whole); (exit 1) when the file is no warehouse, when a records file is gone
or cut since the last night (a site with its rows silently missing would mislead; the next
night heals the store and rebuilds the site with --site-dir), or when the warehouse is
older than this Dumpscope (``OlderWarehouse``).
"""

from __future__ import annotations

from pathlib import Path

import typer

from flows.commands import preflight
from flows.errors import CommandError


def main(*, warehouse: Path, out: Path, settings: Path | None, wait: bool = True) -> None:
    from flows.publish.site import build_site, one_builder
    from flows.warehouse.inspect import check_warehouse, damaged_store

    conf = preflight.settings(settings)
    preflight.site_directory("--out", out)
    check_warehouse(warehouse)
    if (damage := damaged_store(warehouse)):
        raise CommandError(damage)
    with one_builder(out, wait=wait):  # a night building the same site at once: after it
        result = build_site(warehouse, out, conf)
    typer.echo(f"site: {result.out} ({result.pages} pages, {result.charts} charts; "
               + ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items()) + ")")
