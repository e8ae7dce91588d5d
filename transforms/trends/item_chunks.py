"""Items of one XLA HLO content too large for one frame: computed from its instructions in
chunks, to exactly the items ``diffs.items_of_contents`` computes in one piece.

``hlo_items_in_chunks(key, chunks, computations)``: ``key`` is one row (items_key, kind
``xla_hlo``, stage, dump_id); ``chunks(columns)`` gives a fresh iterator of frames of the
content's ``hlo_instructions`` rows (those columns), each time it is called, in
(module_index, computation, lineno) order; ``computations`` are its ``hlo_computations``
rows. Out: ``CONTENT_ITEM_SCHEMA`` rows, as ``items_of_contents`` makes them. Pure: the
caller reads the rows (``flows.verdict.items``). Raises ``ValueError`` when the rows are not in
that order (a computation's rows apart, or its lines out of order): the digests would
differ.

Memory follows the chunk, not the content. Besides one chunk it holds a few values per
computation (its digests, label opcodes and last row: a 2 GB module has ~220 k
computations for ~8 M instructions), the items found so far (one row per distinct item)
and a running digest for the one computation a chunk boundary cuts. Four passes:

1. each computation's flat digest (``diff_item_rows.flat_bodies``) and its last row;
2. each computation's fingerprint (``fingerprint_bodies``: it needs the flat digests of
   the computations it calls, which may come later in the order);
3. the instance rows of each chunk (``hlo_rows`` with those fingerprints), folded into
   partial items that fold again (``fold``): counts and bytes summed, values' maximum,
   the label and detail of the earliest instance that has one, the earliest line;
4. the rows the fusions' evidence stands on (their first instance), which with the last
   rows of pass 1 are all ``evidence.item_lines`` reads of the instructions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import polars as pl

from transforms.trends import diff_item_rows as item_rows
from transforms.trends import diffs
from transforms.trends.diff_items import ITEM_SCHEMA

Chunks = Callable[[list[str]], Iterable[pl.DataFrame]]
COMPUTATION = item_rows.COMPUTATION
_EVIDENCE_COLUMNS = [*COMPUTATION, "lineno", "called_computations"]
_ITEM = ["path", "category", "key"]


def hlo_items_in_chunks(key: pl.DataFrame, chunks: Chunks, computations: pl.DataFrame) -> pl.DataFrame:
    """The content items of ``key`` (module docstring)."""
    if key.height != 1 or key.get_column("kind")[0] != "xla_hlo":
        raise ValueError("hlo_items_in_chunks takes one xla_hlo key")
    dumps = diffs.key_dumps(key)
    flat, last_rows = _digests(chunks(item_rows.FINGERPRINT_COLUMNS), _flat_parts)
    flat = flat.rename({"digest": "flat"})
    fps, _ = _digests(chunks(item_rows.FINGERPRINT_COLUMNS), lambda ins: _fingerprint_parts(ins, flat))
    fps = fps.select(*COMPUTATION, pl.col("digest").alias("fp"),
                     pl.when(pl.col("ops").list.len() > 0).then("ops").otherwise("all_ops").alias("ops"))
    items = _items(dumps, chunks, fps)
    fusions = items.filter(pl.col("category") == "fusion").get_column("first").implode()
    firsts = pl.concat([last_rows, *(c.filter(pl.col("lineno").cast(pl.Int64).is_in(fusions))
                                     for c in chunks(_EVIDENCE_COLUMNS))]).unique([*COMPUTATION, "lineno"])
    records = {"hlo_instructions": firsts, "hlo_computations": computations}
    return diffs.content_items(key, items, dumps, {t: f for t, f in records.items() if f.width})


def _flat_parts(ins: pl.LazyFrame) -> pl.LazyFrame:
    return item_rows.flat_bodies(ins).with_columns(pl.lit([], pl.List(pl.String)).alias("ops"),
                                                   pl.lit([], pl.List(pl.String)).alias("all_ops"))


def _fingerprint_parts(ins: pl.LazyFrame, flat: pl.DataFrame) -> pl.LazyFrame:
    return item_rows.fingerprint_bodies(ins, flat.lazy())


class _Computation:
    """One computation's body so far: a running digest of its parts joined by ';' (a part
    that joined no token adds nothing, as ``str.join`` leaves nulls out) and its opcodes
    in order of first appearance."""

    def __init__(self, key: tuple, part: dict):
        self.key, self.hash, self.tokens = key, item_rows.digester(), 0
        self.ops: dict[str, None] = {}
        self.all_ops: dict[str, None] = {}
        self.last_line = -1
        self.add(part)

    def add(self, part: dict) -> None:
        if part["first_line"] <= self.last_line:
            raise ValueError(f"computation {self.key[2]!r}: its instructions are not in line order")
        self.last_line = part["last_line"]
        if part["tokens"]:
            self.hash.update(((";" if self.tokens else "") + part["body"]).encode())
            self.tokens += part["tokens"]
        self.ops.update(dict.fromkeys(part["ops"]))
        self.all_ops.update(dict.fromkeys(part["all_ops"]))

    def row(self) -> tuple:
        return (*self.key, self.hash.hexdigest(), list(self.ops), list(self.all_ops))


def _digests(frames: Iterable[pl.DataFrame], parts_of: Callable[[pl.LazyFrame], pl.LazyFrame]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(dump_id, module_index, computation, digest, ops, all_ops) of every computation and
    its last row, from chunks in computation order; ``parts_of`` gives the body of each
    computation a chunk holds (rows in line order within each)."""
    done: list[tuple] = []
    seen: set[tuple] = set()
    last_rows: list[pl.DataFrame] = []
    open_: _Computation | None = None

    def finish(c: _Computation) -> None:
        if c.key in seen:
            raise ValueError(f"computation {c.key[2]!r}: its instructions are not together")
        seen.add(c.key)
        done.append(c.row())

    for chunk in frames:
        if chunk.is_empty():
            continue
        if chunk.select((pl.col("lineno").diff().over(COMPUTATION) <= 0).any()).item():
            raise ValueError("instructions of a computation are not in line order")
        lines = chunk.lazy().group_by(COMPUTATION).agg(pl.col("lineno").min().alias("first_line"),
                                                       pl.col("lineno").max().alias("last_line"))
        parts = parts_of(chunk.lazy()).join(lines, on=COMPUTATION).collect()
        last = tuple(chunk.select(COMPUTATION).row(-1))
        by_key = {tuple(r[c] for c in COMPUTATION): r for r in parts.iter_rows(named=True)}
        if open_ is not None:
            if open_.key in by_key:
                open_.add(by_key.pop(open_.key))
            if open_.key != last:
                finish(open_)
                open_ = None
        for key, part in by_key.items():
            if key in seen:
                raise ValueError(f"computation {key[2]!r}: its instructions are not together")
            computation = _Computation(key, part)
            if key == last:
                open_ = computation
            else:
                finish(computation)
        last_rows.append(_own(chunk.select(_EVIDENCE_COLUMNS).unique(COMPUTATION, keep="last", maintain_order=True)))
    if open_ is not None:
        finish(open_)
    schema = {"dump_id": pl.String, "module_index": pl.Int32, "computation": pl.String, "digest": pl.String,
              "ops": pl.List(pl.String), "all_ops": pl.List(pl.String)}
    digests = pl.DataFrame(done, schema=schema, orient="row")
    if not last_rows:
        raise ValueError("no instructions")
    return digests, pl.concat(last_rows).unique(COMPUTATION, keep="last", maintain_order=True)


def _items(dumps: pl.DataFrame, chunks: Chunks, fps: pl.DataFrame) -> pl.DataFrame:
    """``diffs._items_with_first`` of the key's dump, folded chunk by chunk."""
    found: pl.DataFrame | None = None
    for chunk in chunks(item_rows.HLO_ROW_COLUMNS):
        parts = item_rows.hlo_rows(dumps, {"hlo_instructions": chunk}, fingerprints=fps)
        if not parts:
            continue
        partial = fold(pl.concat(parts).with_columns(
            pl.col("bytes").is_not_null().alias("known"),
            pl.when(pl.col("label").is_not_null()).then("order").alias("label_order"),
            pl.when(pl.col("detail").is_not_null()).then("order").alias("detail_order")))
        found = _own(partial if found is None else fold(pl.concat([found.lazy(), partial.lazy()])))
    if found is None:
        return pl.DataFrame(schema=ITEM_SCHEMA | {"first": pl.Int64})
    return found.select(*(c for c in ITEM_SCHEMA.names() if c != "bytes"),
                        pl.when(pl.col("known")).then("bytes").alias("bytes"), pl.col("order").alias("first")).select(
        *ITEM_SCHEMA.names(), "first").cast(ITEM_SCHEMA).sort(_ITEM)


def _own(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` holding only its own bytes. A polars string is a view into the buffers of
    the frame it was taken from: the few rows kept of each chunk would keep every chunk
    whole (on a 2 GB module, ~100 MiB more a pass per 200 MB). Through Arrow's plain
    strings the kept texts are copied out."""
    return pl.from_arrow(frame.to_arrow(compat_level=pl.CompatLevel.oldest()))


def fold(rows: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Instance rows (``ROW_SCHEMA`` with ``known``: bytes not null, and ``label_order`` /
    ``detail_order``: the order where label / detail is not null), or partial items of
    earlier folds, folded per (path, category, key) into partial items of the same columns:
    folding parts and folding the whole give the same rows."""
    def earliest(column: str) -> pl.Expr:
        # ``<column>_order`` is null where the column is: nulls last, the first is the earliest value
        return pl.col(column).sort_by(f"{column}_order", nulls_last=True).first()

    return rows.lazy().group_by(_ITEM).agg(
        pl.col("count").sum(), pl.col("bytes").sum(), pl.col("known").any(), pl.col("value").max(),
        earliest("label"), pl.col("label_order").min(), earliest("detail"), pl.col("detail_order").min(),
        pl.col("order").min(),
    ).collect()


__all__ = ["Chunks", "fold", "hlo_items_in_chunks"]
