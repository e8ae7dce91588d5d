"""The records store heals: a listed Parquet file deleted, cut, emptied or overwritten
between nights (or the whole ``<warehouse>.records/`` gone) is found by the next night,
which parses its content again from the bucket and ends as if nothing had happened;
``sql`` names the file; ``dumpscope doctor`` reports and repairs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flows.warehouse import records
from flows.warehouse import schema as ws
from flows.warehouse import store as wh
from transforms.parsers.formats import all_tables

SAMPLE = Path(__file__).parents[1] / "data" / "sample_bucket"
FIRST, SECOND = ("2026-11-19", "jax-pmap"), ("2026-11-20", "jax-pmap")


def _night(bucket: Path, warehouse: Path):
    from flows.nightly import nightly

    return nightly(bucket=str(bucket), warehouse=warehouse, workers=1)


def _add(bucket: Path, run_job: tuple[str, str]) -> None:
    run, job = run_job
    shutil.copytree(SAMPLE / run / job, bucket / run / job)


def _state(warehouse: Path) -> dict[str, list[str]]:
    """Every derived table, the records views, metrics and what is compacted, row by row
    (order-free); not the dumps' ingested_at nor where the store is."""
    tables = list(ws.derived_tables()) + list(all_tables()) + ["metrics", "compacted_contents", "records_files"]
    with wh.connect_readonly(warehouse) as con:
        return {t: sorted(map(repr, con.execute(f"SELECT * FROM {ws.quote_ident(t)}").fetchall())) for t in tables}


def _listed_files(warehouse: Path) -> list[str]:
    with wh.connect_readonly(warehouse) as con:
        return [n for names in records.listed(con).values() for n in names]


def _hlo_file(warehouse: Path) -> Path:
    name = next(n for n in _listed_files(warehouse) if n.startswith("hlo_instructions/"))
    return records.root_for(warehouse) / name


def _delete(warehouse: Path) -> None:
    _hlo_file(warehouse).unlink()


def _truncate(warehouse: Path) -> None:
    f = _hlo_file(warehouse)
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _zero(warehouse: Path) -> None:
    _hlo_file(warehouse).write_bytes(b"")


def _garbage(warehouse: Path) -> None:
    f = _hlo_file(warehouse)
    f.write_bytes(b"not parquet at all\n" * 50)


def _store_gone(warehouse: Path) -> None:
    shutil.rmtree(records.root_for(warehouse))


DAMAGE = {"deleted": _delete, "truncated": _truncate, "zero bytes": _zero, "garbage": _garbage, "store gone": _store_gone}


@pytest.fixture(scope="module")
def undamaged(prefect, tmp_path_factory) -> dict[bool, dict]:
    """The state after night one and a good night two, with the same bucket (False) and with a new run (True)."""
    out = {}
    for changed in (False, True):
        root = tmp_path_factory.mktemp(f"undamaged-{changed}")
        bucket, warehouse = root / "bucket", root / "wh.duckdb"
        _add(bucket, FIRST)
        _night(bucket, warehouse)
        if changed:
            _add(bucket, SECOND)
        _night(bucket, warehouse)
        out[changed] = _state(warehouse)
    return out


@pytest.mark.parametrize("changed", [False, True], ids=["same bucket", "new run"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_store_heals_at_the_next_night_as_if_never_damaged(prefect, tmp_path, undamaged, damage, changed):
    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    _add(bucket, FIRST)
    _night(bucket, warehouse)
    DAMAGE[damage](warehouse)
    if changed:
        _add(bucket, SECOND)
    summary = _night(bucket, warehouse)
    assert _state(warehouse) == undamaged[changed]
    assert any("records file" in f and "parsed again" in f for f in summary.failures)
    # every listed file is back and readable; nothing unlisted stays behind the sweep
    with wh.connect_readonly(warehouse) as con:
        assert records.damaged(con) == {}
    assert sorted(p.relative_to(records.root_for(warehouse)).as_posix()
                  for p in records.root_for(warehouse).glob("*/*.parquet")) == sorted(_listed_files(warehouse))
