"""The sample bucket's warehouse built without Prefect: the fast tier's way to the verdict layer.

``build_sample_warehouse`` runs one night over a fresh warehouse with ``flows.nightly.night_in_process``:
the nightly's own steps (discover, parse, load, report) called in this process, without a
Prefect server, a process pool or a subprocess. One night over all four sample runs, as the
session fixture's nightly sees it (not night by night: the warehouse must equal that one, table
by table; ``tests/test_sample_build.py`` proves it).
"""

from __future__ import annotations

import os
from pathlib import Path

from flows import storage_secrets
from flows.nightly import night_in_process

SAMPLE_BUCKET = Path(__file__).resolve().parents[1] / "data" / "sample_bucket"


def build_sample_warehouse(out: Path, bucket: Path = SAMPLE_BUCKET) -> Path:
    """``out/warehouse.duckdb`` (and ``out/report.md``) from every night of ``bucket``; returns the warehouse."""
    warehouse = out / "warehouse.duckdb"
    # Built at its first use, before that test's own fixtures clear the environment: a
    # notification target or storage option another test left there would reach the night
    # (an announce to a dead URL recorded a notification row in the shared warehouse).
    saved = {k: os.environ.pop(k) for k in (storage_secrets.NOTIFY_VAR, storage_secrets.ENV_VAR) if k in os.environ}
    try:
        night_in_process(bucket=str(bucket), warehouse=warehouse, report_path=out / "report.md")
    finally:
        os.environ.update(saved)
    return warehouse
