"""Structural items of new contents: in bounded batches, on the flow's task runner.

Items are computed once per content (``transforms.trends.diffs.items_keys``). For the
contents a night needs and ``content_items`` does not hold yet, the writer exports the
records each batch needs to Parquet files in a work directory (DuckDB's COPY streams
them from the store files of the batch's contents, no others: the step costs what its
contents hold, whatever the store's size; at most ``MemoryBudget.items_batch_rows``
records rows a batch), and each batch is
computed by ``compute_batch``: a Prefect task in the nightly flow, so on a Dask cluster
the workers take it, as they take the parses (they must reach the work directory, which
is beside the warehouse like the staging directory). Outside a flow (``dumpscope
aggregate``, ``accept``) the batches run one after another in the process.

Evidence: with a ``DumpSource`` (the bucket), each batch also reads the excerpt of each
item from a dump of its content (``transforms.trends.evidence``: one streaming pass
per dump, bounded lines and characters; gzip read as the parse reads it). The batch
names a few paths per content (the newest first); each is opened as every bucket
object is (``flows.ingest.bucket.open_in_bucket``: a regular file inside the bucket, by its
real name, never through a link, never blocking), and its excerpts are kept only when
its bytes, hashed whole while they are read, are the content the items came from
(its sha256): a dump rewritten or swapped since its parse gives no excerpt. A content
none of whose dumps is in the bucket any more, unchanged, keeps its line ranges and no
excerpt: never a failure. Without a source (``dumpscope aggregate``, ``accept``: they
are not given the bucket) no excerpt is read.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import polars as pl
import pyarrow.parquet as pq

from transforms.escape import sql_literal
from transforms.parsers.formats import all_tables
from transforms.parse import DEFAULT_LIMITS
from transforms.reading import LineReader, ReadLimitError
from transforms.trends import diffs as diff_mod
from transforms.trends import evidence, item_chunks

log = logging.getLogger(__name__)
PATHS_PER_CONTENT = 3  # bucket paths tried per content, newest first, before it counts as gone
CHUNKED = "chunked.json"  # in a batch directory: its one HLO content is read {"rows": N} rows at a time

# runs compute_batch over batch directories; returns the item files, in order
ItemsRunner = Callable[[list[Path]], list[Path]]


@dataclass(frozen=True)
class DumpSource:
    """The bucket the dumps are read back from for their excerpts (as the nightly reads it): its
    URL, or the ``Path`` of a local directory (``flows.ingest.bucket_access.connect``)."""

    bucket: str | os.PathLike
    storage_options: dict[str, Any] | None = field(default=None, hash=False)


def compute_batch(batch_dir: Path, source: DumpSource | None = None) -> Path:
    """Items of the keys in ``batch_dir/keys.parquet`` from the records files beside it,
    with their excerpts read from ``source``; written to ``batch_dir/items.parquet``
    (its path returned). A batch marked ``CHUNKED`` (one HLO content larger than a batch)
    is read a chunk of rows at a time (``transforms.trends.item_chunks``)."""
    batch_dir = Path(batch_dir)
    keys = pl.read_parquet(batch_dir / "keys.parquet")
    out = batch_dir / "items.parquet"
    if (batch_dir / CHUNKED).exists():
        found = _items_in_chunks(batch_dir, keys.select("items_key", "kind", "stage", "dump_id"))
    else:
        records = {p.stem: pl.read_parquet(p) for p in sorted(batch_dir.glob("t_*.parquet"))}
        records = {name.removeprefix("t_"): frame for name, frame in records.items()}
        found = diff_mod.items_of_contents(keys, records)
    if source is not None and "paths" in keys.columns:
        found = with_excerpts(found, keys, source)
    found.write_parquet(out)
    return out


def _items_in_chunks(batch_dir: Path, key: pl.DataFrame) -> pl.DataFrame:
    """Items of the batch's one HLO content, its instructions read ``CHUNKED``'s rows at a
    time (the export sorted them by computation); its computations read whole."""
    rows = int(json.loads((batch_dir / CHUNKED).read_text())["rows"])

    def chunks(columns: list[str]) -> Iterable[pl.DataFrame]:
        with pq.ParquetFile(batch_dir / "t_hlo_instructions.parquet") as f:
            for batch in f.iter_batches(batch_size=rows, columns=columns):
                yield pl.from_arrow(batch)

    return item_chunks.hlo_items_in_chunks(key, chunks, pl.read_parquet(batch_dir / "t_hlo_computations.parquet"))


def with_excerpts(found: pl.DataFrame, keys: pl.DataFrame, source: DumpSource) -> pl.DataFrame:
    """``found`` (content items) with excerpt and excerpt_from filled from a dump of each
    key's content (``keys``: items_key, paths), when its bytes are that content."""
    from flows.ingest.bucket_access import connect

    fs, root = connect(source.bucket, source.storage_options)
    parts = []
    paths = dict(keys.select("items_key", "paths").iter_rows())
    # The content whose lines the items name: the key's own (a buffer assignment's key also
    # names its HLO dumps, whose lines it does not quote).
    owners = diff_mod.key_contents(keys.get_column("items_key").to_list()).filter(pl.col("role") == "own")
    content = dict(owners.select("items_key", "dump_id").iter_rows())
    for (key,), items in found.group_by("items_key", maintain_order=True):
        # The per-dump cap serves the biggest items first.
        items = items.sort("bytes", "category", "key", descending=[True, False, False], nulls_last=True)
        wanted = items.get_column("excerpt_lines").to_list()
        read, path = _read_dump(fs, root, paths.get(key) or [], content.get(key), wanted) if any(wanted) else ([], None)
        if not read:
            parts.append(items)
            continue
        parts.append(items.with_columns(
            pl.Series("excerpt", [text for text, _ in read], pl.String),
            pl.Series("excerpt_lines", [shown if text is not None else lines for (text, shown), lines in zip(read, wanted)],
                      pl.String),
            pl.Series("excerpt_from", [path if text is not None else None for text, _ in read], pl.String)))
    return pl.concat(parts).sort("items_key", "category", "key") if parts else found


def _read_dump(fs, root: str, paths: list[str], content: str | None, wanted: list[str | None]) -> tuple[list, str | None]:
    """Excerpts from the first of ``paths`` (as the warehouse keeps them: escaped) whose bytes
    are ``content`` (sha256); ([], None) when none is."""
    from flows.ingest.bucket import open_in_bucket
    from flows.ingest.bucket_access import BucketReadError

    for path in paths if content else ():
        for name in _real_names(path):
            try:
                raw = open_in_bucket(fs, root, name)
            except (BucketReadError, ValueError) as exc:  # gone, refused: try the next name
                log.info("no excerpts from %s: %s", path, exc)
                continue
            with raw:
                try:
                    read = excerpts_of(raw, content, wanted)
                except OSError as exc:
                    log.info("no excerpts from %s: %s", path, exc)
                    continue
            if read is not None:
                return read, path
            log.info("no excerpts from %s: its bytes are not the content parsed (changed since)", path)
    return [], None


def _real_names(path: str) -> list[str]:
    """The names ``path`` (escaped, ``transforms.layout.escape_name``) may stand for: the real
    one first, then the text itself where it differs (the one ambiguity of the escaping:
    the digest tells which holds the content)."""
    from transforms.layout import unescape_name

    real = unescape_name(path)
    return [real] if real == path else [real, path]


def excerpts_of(raw, content: str, wanted: list[str | None]) -> list | None:
    """``evidence.read_excerpts`` of the dump whose raw bytes ``raw`` streams, or None unless
    those bytes, all of them, hash to ``content`` (sha256 hex, the dump_id)."""
    hashed = _Hashing(raw)
    read = evidence.read_excerpts(_lines(hashed), wanted)
    hashed.drain()
    return read if hashed.hexdigest() == content else None


class _Hashing(io.RawIOBase):
    """A raw stream that hashes every byte read through it; ``drain`` reads (and hashes) the rest."""

    def __init__(self, raw) -> None:
        self._raw, self._sha = raw, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self._raw.read(len(buffer))
        buffer[: len(data)] = data
        self._sha.update(data)
        return len(data)

    def drain(self) -> None:
        while chunk := self._raw.read(1 << 20):
            self._sha.update(chunk)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def _lines(raw) -> Iterable[str]:
    """The dump's lines as the parse read them (gzip by magic, same line breaks), up to
    a read limit or a damaged stream: what was read stays usable."""
    reader = LineReader(raw, max_line_bytes=DEFAULT_LIMITS.max_line_bytes, max_bytes=DEFAULT_LIMITS.max_dump_bytes,
                        max_seconds=DEFAULT_LIMITS.max_seconds)
    try:
        yield from reader
    except ReadLimitError:
        return


@functools.cache
def compute_batch_task():
    """``compute_batch`` as the Prefect task ``structural-items``, made on first use: commands
    that only read (``dumpscope check``) import this module without loading Prefect."""
    from prefect import task

    return task(name="structural-items")(compute_batch)


def in_process(dirs: list[Path]) -> list[Path]:
    return [compute_batch(d) for d in dirs]


def reading(source: DumpSource) -> ItemsRunner:
    """Batches one after another in the process, excerpts read from ``source``."""
    return lambda dirs: [compute_batch(d, source) for d in dirs]


def items_runner(at_once: int = 2, source: DumpSource | None = None) -> ItemsRunner:
    """Batches as Prefect tasks on the flow's task runner (threads, or Dask workers),
    ``at_once`` at a time: each holds one batch's records in memory (and reads its
    excerpts from ``source``, when given)."""
    def run(dirs: list[Path]) -> list[Path]:
        out: list[Path] = []
        for start in range(0, len(dirs), at_once):
            futures = [compute_batch_task().submit(d, source) for d in dirs[start : start + at_once]]
            out += [f.result() for f in futures]
        return out

    return run


def export_batches(con, todo: pl.DataFrame, work_dir: Path, max_rows: int) -> list[Path]:
    """One directory per batch of ``todo`` (items_key, kind, stage, dump_id): its keys and
    the records rows of its contents, table by table.

    Each table is exported from the store files of the batch's own contents (and of the
    HLO dumps its buffer assignments name) and no other: a records view reads every file
    of its table, so a batch read through the views cost as much as the whole store (a
    first big night: 481 COPY statements of ~0.47 s each, each HLO table 1,060 files;
    see docs/scale.md). A table none of the batch's contents has is a copy of one empty file,
    written once."""
    from flows.warehouse import records as store  # deferred: batch workers import this module without DuckDB
    from flows.warehouse.reads import read_with, registered

    contents = diff_mod.key_contents(todo.get_column("items_key").to_list()).join(
        todo.select("items_key", "kind"), on="items_key")
    tables = sorted({t for k in todo.get_column("kind").unique() for t in diff_mod.ITEM_TABLES.get(k, ())}
                    | ({"hlo_instructions"} if "xla_buffer_assignment" in todo.get_column("kind") else set()))
    tables = [t for t in tables if t in all_tables()]
    # the store files of each content, in the listing's (and so the views') order
    files = read_with(con, {"_item_contents": contents.select("dump_id").unique()},
                      """SELECT dump_id, table_name, file, rows FROM records_files
                         WHERE list_contains(?, table_name) AND dump_id IN (SELECT dump_id FROM _item_contents)
                         ORDER BY table_name, file""", [tables])
    per_content = files.group_by("dump_id").agg(pl.col("rows").sum().cast(pl.Int64).alias("n"))
    paths = _content_paths(con, todo.select("dump_id").unique())
    rows = contents.join(per_content, on="dump_id", how="left").group_by("items_key").agg(
        pl.col("n").fill_null(0).sum().alias("rows"))
    batches = diff_mod.item_batches(todo.join(rows, on="items_key", how="left").with_columns(pl.col("rows").fill_null(0)),
                                    max_rows)
    shutil.rmtree(work_dir, ignore_errors=True)
    root = store.root_of(con)
    empty = Path(work_dir) / "empty"
    empty.mkdir(parents=True)
    for t in tables:
        target = sql_literal(str(empty / f"t_{t}.parquet"))
        con.execute(f"COPY ({store.files_sql(con, t, [], root)}) TO {target} (FORMAT parquet)")
    dirs = []
    for i, batch in enumerate(batches):
        d = Path(work_dir) / f"batch-{i:05d}"
        d.mkdir(parents=True)
        keys = batch.select("items_key", "kind", "stage", "dump_id")
        keys.join(paths, on="dump_id", how="left").write_parquet(d / "keys.parquet")
        # One HLO content larger than a batch: its instructions in computation order, read
        # a batch's rows at a time (DuckDB sorts within its memory limit, spilling).
        chunked = batch.height == 1 and batch.get_column("kind")[0] == "xla_hlo" and batch.get_column("rows")[0] > max_rows
        roles = contents.join(keys.select("items_key"), on="items_key", how="semi")
        own = roles.filter(pl.col("role") == "own").select("dump_id").unique()
        hlo = roles.filter(pl.col("role") == "hlo").select("dump_id").unique()
        mine = files.join(pl.concat([own, hlo]).unique(), on="dump_id", how="semi").sort("file")  # the views' order
        sources = {t: f"({store.files_sql(con, t, names, root)})"
                   for t in tables if (names := mine.filter(pl.col("table_name") == t).get_column("file").to_list())}
        with registered(con, _batch_own=own, _batch_hlo=hlo):
            for t in tables:
                target = d / f"t_{t}.parquet"
                if t not in sources:
                    shutil.copyfile(empty / target.name, target)
                    continue
                order = " ORDER BY module_index, computation, lineno" if chunked and t == "hlo_instructions" else ""
                con.execute(f"COPY (SELECT * FROM {sources[t]} AS r WHERE {_batch_rows(t, sources)}{order}) "
                            f"TO {sql_literal(str(target))} (FORMAT parquet)")
        if chunked:
            (d / CHUNKED).write_text(json.dumps({"rows": max_rows}))
        dirs.append(d)
    return dirs


def _batch_rows(table: str, sources: dict[str, str]) -> str:
    """Which rows of ``table`` a batch exports: those of its own contents; and of the HLO
    dump a buffer assignment key names, only the instructions its values name (all its
    items read of them is their op metadata: a 2 GB module's instructions would be a
    2 GB batch). ``sources``: table -> the batch's rows of it (``export_batches``)."""
    own = "dump_id IN (SELECT dump_id FROM _batch_own)"
    if table != "hlo_instructions":
        return own
    named = " UNION ".join(f"SELECT instruction FROM {sources[t]} AS v WHERE {own}"
                           for t in ("buffer_values", "buffer_peak_values") if t in sources)
    if not named:
        return own
    return f"({own} OR (dump_id IN (SELECT dump_id FROM _batch_hlo) AND name IN ({named})))"


def _content_paths(con, dump_ids: pl.DataFrame) -> pl.DataFrame:
    """dump_id, paths: up to ``PATHS_PER_CONTENT`` bucket paths holding each content, newest run first."""
    from flows.warehouse.reads import read_with  # deferred: batch workers import this module without DuckDB

    return read_with(con, {"_excerpt_contents": dump_ids},
                     """SELECT dump_id, list(path ORDER BY run_id DESC, path)[1:?] AS paths FROM dumps
                        WHERE dump_id IN (SELECT dump_id FROM _excerpt_contents) GROUP BY dump_id""",
                     [PATHS_PER_CONTENT])


def computed(dirs: list[Path], files: Iterable[Path]) -> pl.DataFrame:
    frames = [pl.read_parquet(f) for f in files]
    return pl.concat(frames) if frames else pl.DataFrame(schema=diff_mod.CONTENT_ITEM_SCHEMA)


__all__ = ["DumpSource", "ItemsRunner", "compute_batch", "compute_batch_task", "computed", "excerpts_of", "export_batches", "in_process",
           "items_runner", "reading", "with_excerpts"]
