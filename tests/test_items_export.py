"""The structural items' export (``flows.verdict.items.export_batches``) reads the records
store files of the contents it computes and no other: its cost follows the night's new
contents, not the size of the store (issue 30: a first big night's 257 batches each read
every file of every table through the records views)."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import polars as pl

from flows.verdict import items
from flows.warehouse import records
from flows.warehouse import store as wh
from flows.warehouse.reads import frame_of
from transforms.trends import diffs as diff_mod

BUCKET = Path(__file__).resolve().parents[1] / "data" / "sample_bucket"
ORDER = ["items_key", "category", "key"]


def test_a_batch_export_reads_only_the_store_files_of_its_own_contents(sample_warehouse, tmp_path):
    """With every other store file gone, the export of a few contents (a buffer assignment
    with the HLO dump it names, and one of each other kind) still gives exactly their
    stored items, in batches."""
    copy = tmp_path / "w.duckdb"
    shutil.copyfile(sample_warehouse, copy)
    with wh.Warehouse(copy):  # its first writer makes a store of its own (linked over)
        pass
    # The export writes Parquet (the writer's connection does, at night): a full session on the copy, not
    # a locked-down reader (flows.warehouse.readonly), which reaches no file.
    with duckdb.connect(str(copy), read_only=True) as con:
        latest = frame_of(con, """SELECT DISTINCT s.items_key, d.kind, d.stage, d.dump_id FROM dump_series s
                                  JOIN dumps d USING (path)
                                  WHERE s.items_key IS NOT NULL AND d.run_id = (SELECT max(run_id) FROM runs)""")
        latest = latest.unique("items_key").sort("items_key")
        naming_hlo = pl.col("items_key").str.contains("+", literal=True)  # a buffer assignment's key names its HLO dumps
        others = latest.filter(pl.col("kind").is_in(list(diff_mod.ITEM_TABLES)), pl.col("kind") != "xla_buffer_assignment")
        todo = pl.concat([latest.filter(pl.col("kind") == "xla_buffer_assignment", naming_hlo).head(1),
                          others.unique("kind", keep="first", maintain_order=True)])
        assert set(todo.get_column("kind")) == set(diff_mod.ITEM_TABLES)
        needed = set(diff_mod.key_contents(todo.get_column("items_key").to_list()).get_column("dump_id"))
        listed = frame_of(con, "SELECT dump_id, file FROM records_files")
        others = listed.filter(~pl.col("dump_id").is_in(list(needed))).get_column("file").to_list()
        assert len(others) > 3 * (listed.height - len(others))  # most of the store is gone
        root = records.root_of(con)
        assert root.parent == tmp_path
        for name in others:
            (root / name).unlink()
        stored = frame_of(con, "SELECT * FROM content_items").join(todo.select("items_key"), on="items_key", how="semi")
        dirs = items.export_batches(con, todo, tmp_path / "work", max_rows=100)
    assert len(dirs) >= 3
    got = items.computed(dirs, items.reading(items.DumpSource(str(BUCKET)))(dirs)).sort(ORDER)  # as the nightly
    assert got.equals(stored.select(diff_mod.CONTENT_ITEM_SCHEMA.names()).sort(ORDER))
    assert got.get_column("excerpt").is_not_null().sum() > 20
    assert got.filter(pl.col("category") != "none").height > 40
