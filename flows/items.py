"""Structural items of new contents: in bounded batches, on the flow's task runner.

Items are computed once per content (``transforms.trends.diffs.items_keys``). For the
contents a night needs and ``content_items`` does not hold yet, the writer exports the
records each batch needs to Parquet files in a work directory (DuckDB's COPY streams
them; at most ``MemoryBudget.items_batch_rows`` records rows a batch), and each batch is
computed by ``compute_batch``: a Prefect task in the nightly flow, so on a Dask cluster
the workers take it, as they take the parses (they must reach the work directory, which
is beside the warehouse like the staging directory). Outside a flow (``dumpscope
aggregate``, ``accept``) the batches run one after another in the process.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Iterable

import polars as pl
from prefect import task

from transforms.escape import sql_literal
from transforms.trends import diffs as diff_mod

# runs compute_batch over batch directories; returns the item files, in order
ItemsRunner = Callable[[list[Path]], list[Path]]


def compute_batch(batch_dir: Path) -> Path:
    """Items of the keys in ``batch_dir/keys.parquet`` from the records files beside it;
    written to ``batch_dir/items.parquet`` (its path returned)."""
    batch_dir = Path(batch_dir)
    keys = pl.read_parquet(batch_dir / "keys.parquet")
    records = {p.stem: pl.read_parquet(p) for p in sorted(batch_dir.glob("t_*.parquet"))}
    records = {name.removeprefix("t_"): frame for name, frame in records.items()}
    out = batch_dir / "items.parquet"
    diff_mod.items_of_contents(keys, records).write_parquet(out)
    return out


@task(name="structural-items")
def compute_batch_task(batch_dir: Path) -> Path:
    return compute_batch(batch_dir)


def in_process(dirs: list[Path]) -> list[Path]:
    return [compute_batch(d) for d in dirs]


def items_runner(at_once: int = 2) -> ItemsRunner:
    """Batches as Prefect tasks on the flow's task runner (threads, or Dask workers),
    ``at_once`` at a time: each holds one batch's records in memory."""
    def run(dirs: list[Path]) -> list[Path]:
        out: list[Path] = []
        for start in range(0, len(dirs), at_once):
            futures = [compute_batch_task.submit(d) for d in dirs[start : start + at_once]]
            out += [f.result() for f in futures]
        return out

    return run


def export_batches(con, todo: pl.DataFrame, work_dir: Path, max_rows: int) -> list[Path]:
    """One directory per batch of ``todo`` (items_key, kind, stage, dump_id): its keys and
    the records rows of its contents, table by table."""
    from flows.aggregate import frame_of

    contents = diff_mod.key_contents(todo.get_column("items_key").to_list()).join(
        todo.select("items_key", "kind"), on="items_key")
    tables = sorted({t for k in todo.get_column("kind").unique() for t in diff_mod.ITEM_TABLES.get(k, ())}
                    | ({"hlo_instructions"} if "xla_buffer_assignment" in todo.get_column("kind") else set()))
    existing = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()}
    tables = [t for t in tables if t in existing]
    con.register("_item_contents", contents.select("dump_id").unique().to_arrow())
    try:
        counts = pl.concat([frame_of(con, f'SELECT dump_id, count(*) AS n FROM "{t}" WHERE dump_id IN '
                                          "(SELECT dump_id FROM _item_contents) GROUP BY dump_id") for t in tables]
                           or [pl.DataFrame(schema={"dump_id": pl.String, "n": pl.Int64})], how="vertical_relaxed")
    finally:
        con.unregister("_item_contents")
    per_content = counts.group_by("dump_id").agg(pl.col("n").sum())
    rows = contents.join(per_content, on="dump_id", how="left").group_by("items_key").agg(
        pl.col("n").fill_null(0).sum().alias("rows"))
    batches = diff_mod.item_batches(todo.join(rows, on="items_key", how="left").with_columns(pl.col("rows").fill_null(0)),
                                    max_rows)
    shutil.rmtree(work_dir, ignore_errors=True)
    dirs = []
    for i, batch in enumerate(batches):
        d = Path(work_dir) / f"batch-{i:05d}"
        d.mkdir(parents=True)
        keys = batch.select("items_key", "kind", "stage", "dump_id")
        keys.write_parquet(d / "keys.parquet")
        ids = contents.join(keys.select("items_key"), on="items_key", how="semi").select("dump_id").unique()
        con.register("_batch_ids", ids.to_arrow())
        try:
            for t in tables:
                target = sql_literal(str(d / f"t_{t}.parquet"))
                con.execute(f'COPY (SELECT * FROM "{t}" WHERE dump_id IN (SELECT dump_id FROM _batch_ids)) '
                            f"TO {target} (FORMAT parquet)")
        finally:
            con.unregister("_batch_ids")
        dirs.append(d)
    return dirs


def computed(dirs: list[Path], files: Iterable[Path]) -> pl.DataFrame:
    frames = [pl.read_parquet(f) for f in files]
    return pl.concat(frames) if frames else pl.DataFrame(schema=diff_mod.CONTENT_ITEM_SCHEMA)


__all__ = ["ItemsRunner", "compute_batch", "compute_batch_task", "computed", "export_batches", "in_process", "items_runner"]
