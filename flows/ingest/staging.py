"""Parse one bucket object into staging Parquet keyed by its content hash.

``stage_object(fs, obj, staging_dir, limits=ParseLimits())`` reads the object from the
bucket exactly once, into a local spool (memory up to ``SPOOL_MEMORY`` bytes, a temp
file beyond), computing its sha256 on the way. Then:

- ``staging_dir/<sha256>/<kind>-v<parser_version>/`` exists, for the kind this path's
  dump gets (``transforms.parse.kind_of``: an empty file is unknown under one name and a
  failed HLO dump under another), and was not failed by a limit that ``limits`` raises
  (a retry, or the same content under another path): nothing is parsed, the staged
  summary is returned;
- the object is not a regular file inside the bucket (``flows.ingest.bucket_access.RefusedObject``: a
  symbolic link, a FIFO...): nothing is read, the result is ``failed`` with the reason,
  no content (``sha256`` None) and no tables;
- else the spool is parsed with ``transforms.parse.iter_dump`` (``dump_id`` = sha256),
  each table's batches are written as they come with one ``ParquetWriter`` per table
  (``<table>.parquet``), plus ``summary.json`` (kind, stage, program, status, errors,
  metrics, programs (each program's metrics: torch_trace), parser_version, sha256, size,
  rows per table, the limit that failed it),
  into a temp dir that is renamed into place last. A crash leaves at most an entry in
  ``.tmp/``, never a final dir without its summary. A failed dump stages its summary and
  no tables.

A summary staged (or held) for the same content under another path is returned with its
errors naming this path (each error starts with the path it was read under), and with the
stage and program that path's name gave taken from this path's name (``naming``).

Housekeeping of the staging directory (what a night may drop): ``flows.ingest.housekeeping``.

Spooling (instead of hashing while parsing) keeps bucket I/O separate from parsing:
bucket errors surface as ``BucketReadError`` before parsing starts (the gzip reader
would otherwise report them as a corrupt stream), the content is deduplicated before
it is parsed, and the Parquet files carry the real ``dump_id`` as they are written.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

import fsspec
import polars as pl
import pyarrow.parquet as pq

from flows.ingest.bucket import open_object
from flows.ingest.bucket_access import BucketReadError, RefusedObject, connect
from transforms.parsers.formats import parser_version
from transforms.layout import BucketObject
from transforms.parse import DEFAULT_LIMITS, ParseLimits, iter_dump, kind_of, named_at
from transforms.reading import HEAD_BYTES, LineReader, strip_gz
from transforms.records import DumpKind, TableBatch

SPOOL_MEMORY = 16 << 20
_CHUNK = 1 << 20
SUMMARY = "summary.json"


@dataclass(frozen=True, slots=True)
class StagedResult:
    sha256: str | None  # None: nothing was read (a refused object)
    dir: Path  # staging_dir/<sha256>/<kind>-v<parser_version>
    summary: dict[str, Any]
    parsed: bool  # False when an existing staging dir was reused

    @property
    def status(self) -> str:
        return self.summary["status"]

    @property
    def tables(self) -> dict[str, Path]:
        return {t: self.dir / f"{t}.parquet" for t in self.summary["rows"]}


def stage_object(fs: fsspec.AbstractFileSystem, obj: BucketObject, staging_dir: str | os.PathLike, *,
                 limits: ParseLimits = DEFAULT_LIMITS, held: dict[str, dict] | None = None) -> StagedResult:
    """Stage ``obj`` (see the module docstring). Raises ``BucketReadError`` on I/O errors only
    (a refused object is a failed result, not an error).

    ``held``: contents the warehouse already holds with their records (sha256 -> the
    summary fields of its dumps row, ``held_summary``): one of them under a new path is
    not parsed again — its result carries no tables, the load copies the stored rows."""
    staging = Path(staging_dir)
    with tempfile.SpooledTemporaryFile(SPOOL_MEMORY, dir=_tmp_root(staging)) as spool:
        try:
            sha, size = _spool(fs, obj, spool)
        except RefusedObject as exc:
            return StagedResult(None, staging, refused_summary(obj, exc.reason), parsed=False)
        spool.seek(0)
        # From a copy of the first bytes: a reader of the spool itself would close it.
        kind = _kind(obj, spool.read(HEAD_BYTES + 1024))
        if (known := _held_as(kind, (held or {}).get(sha))) is not None:
            return StagedResult(sha, staging / sha, naming(known, obj.path), parsed=False)
        if (done := find_staged(staging, sha, kind, limits)) is not None:
            return replace(done, summary=naming(done.summary, obj.path))
        spool.seek(0)
        return _parse_into(spool, obj, staging, sha, size, limits)  # type: ignore[arg-type]


def refused_summary(obj: BucketObject, reason: str) -> dict[str, Any]:
    """The staged summary of an object that was not read (``RefusedObject``): ``failed`` with
    ``reason``, its kind, stage and program as its name alone gives them."""
    *_, summary = iter_dump(io.BytesIO(b""), obj.path)  # an empty read: no tables, only the summary
    return {"sha256": None, "size": 0, "kind": str(summary.kind), "stage": summary.stage, "program": summary.program,
            "status": "failed", "errors": [f"{obj.path}: {reason}"], "metrics": {},
            "parser_version": parser_version(summary.kind), "rows": {}, "first_path": obj.path, "limit": None}


def naming(summary: dict[str, Any], path: str) -> dict[str, Any]:
    """``summary``, staged or held for its content under another path (``first_path``), with
    the errors that name that path naming ``path``, and the stage and program that path's name
    gave taken from this one's (``transforms.parse.named_at``): the same bytes, this object's names."""
    first = summary.get("first_path")
    if not first or first == path:
        return summary
    lead = f"{first}: "
    stage, program = named_at(DumpKind(summary["kind"]), path, first, summary["stage"], summary["program"])
    return summary | {"errors": [f"{path}: {e[len(lead):]}" if e.startswith(lead) else e for e in summary["errors"]],
                      "stage": stage, "program": program}


def recognise_held(fs: fsspec.AbstractFileSystem, obj: BucketObject, staging_dir: str | os.PathLike,
                   held: dict[str, dict]) -> StagedResult | None:
    """``stage_object``'s answer for a content the warehouse holds, found by hashing the
    object as it streams (no spool written), or None: not held, or not readable as
    listed (then ``stage_object`` reads it again, and says what is wrong). Most of a
    night is held contents under new paths: this is that night's whole parse stage.
    For local buckets (a second read of a new content is cheap there); threads run it
    in parallel, since hashlib and file reads release the GIL."""
    head = _Head()
    try:
        sha, _ = _spool(fs, obj, head)
    except BucketReadError:
        return None
    if sha not in held or (known := _held_as(_named_as(obj, held[sha]) or _kind(obj, head.bytes), held[sha])) is None:
        return None
    return StagedResult(sha, Path(staging_dir) / sha, naming(known, obj.path), parsed=False)


def _named_as(obj: BucketObject, known: dict) -> DumpKind | None:
    """The kind the warehouse holds this content as, when it holds it under a path of the
    same file name (``.gz`` aside), else None. ``kind_of`` reads only the file name and the
    bytes' head, and the same sha256 is the same head: sniffing it again (~0.4 ms a dump,
    under the GIL) was most of a night of held contents under new run directories. Not for a
    content held as unknown: a format learnt since is found by sniffing it again."""
    first = known.get("first_path")
    if not first or strip_gz(PurePosixPath(first).name) != strip_gz(PurePosixPath(obj.path).name):
        return None
    try:
        kind = DumpKind(known["kind"])
    except (KeyError, ValueError):
        return None
    return None if kind is DumpKind.UNKNOWN else kind


class _Head:
    """A spool that keeps only what ``_kind`` reads."""

    def __init__(self) -> None:
        self.bytes = b""

    def write(self, chunk: bytes) -> None:
        if len(self.bytes) < HEAD_BYTES + 1024:
            self.bytes += chunk[: HEAD_BYTES + 1024 - len(self.bytes)]


def _kind(obj: BucketObject, first: bytes) -> DumpKind:
    """The kind of ``obj`` from its first HEAD_BYTES + 1024 bytes (gzip never grows data:
    they hold the whole head) and its name."""
    return kind_of(obj.path, LineReader(io.BytesIO(first), head_only=True).head)


def _held_as(kind: DumpKind, known: dict | None) -> dict | None:
    """The held summary if the warehouse holds this content as ``kind`` by its current parser."""
    if known is not None and known["kind"] == kind and known["parser_version"] == parser_version(kind):
        return known
    return None


def held_summary(kind: str, stage: str | None, program: str | None, status: str, error: str | None,
                 parser_version: int, first_path: str | None = None) -> dict[str, Any]:
    """A staged summary for a content the warehouse holds (``stage_object``'s ``held``):
    no rows, no metrics (the load copies them from the stored path). ``first_path``: the
    stored path ``error`` names."""
    return {"kind": kind, "stage": stage, "program": program, "status": status, "parser_version": parser_version,
            "errors": error.split("\n") if error else [], "metrics": {}, "rows": {}, "held": True,
            "first_path": first_path}


def find_staged(staging_dir: str | os.PathLike, sha256: str, kind: DumpKind | None = None,
                limits: ParseLimits | None = None) -> StagedResult | None:
    """The staged result of this content by the current parser of its kind (of ``kind``
    when given), if any; with ``limits``, not one that a limit they raise had failed."""
    for summary_path in sorted(Path(staging_dir, sha256).glob(f"*-v*/{SUMMARY}")):
        try:
            summary = json.loads(summary_path.read_text())
            current = parser_version(DumpKind(summary["kind"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if summary.get("parser_version") != current or (kind is not None and summary["kind"] != kind):
            continue
        if limits is not None and _limit_raised(summary.get("limit"), limits):
            continue
        return StagedResult(sha256, summary_path.parent, summary, parsed=False)
    return None


def _limit_raised(limit: dict | None, limits: ParseLimits) -> bool:
    """Whether ``limits`` raise the limit that failed a staged parse (then parse again)."""
    if not isinstance(limit, dict) or limit.get("name") not in ("max_line_bytes", "max_dump_bytes", "max_seconds"):
        return False
    return getattr(limits, limit["name"]) > limit.get("value", float("inf"))


def _tmp_root(staging: Path) -> Path:
    tmp = staging / ".tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return tmp


def _spool(fs: fsspec.AbstractFileSystem, obj: BucketObject, spool) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open_object(fs, obj) as src:
        try:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                spool.write(chunk)
                size += len(chunk)
        except OSError as exc:
            raise BucketReadError(obj.path, f"read failed after {size} bytes: {type(exc).__name__}: {exc}") from exc
    if size != obj.size:
        raise BucketReadError(obj.path, f"changed since listing: {obj.size} bytes listed, {size} read")
    return digest.hexdigest(), size


def _to_arrow(frame: pl.DataFrame):
    """The batch as Arrow for the Parquet writer, its strings not copied where it can be.

    Polars' string columns go over as string views without a copy; the legacy export
    copies them into large strings (~2x the batch, which the allocator then keeps: +45 MiB
    peak RSS on a 54 MB HLO module). Parquet stores both as plain strings: DuckDB and
    polars read back the same rows. pyarrow cannot write an enum (a dictionary) of string
    views: frames with one take the legacy export (ONNX report tables, small)."""
    if any(isinstance(dtype, (pl.Enum, pl.Categorical)) for dtype in frame.dtypes):
        return frame.to_arrow()
    return frame.to_arrow(compat_level=pl.CompatLevel.newest())


def _parse_into(raw, obj: BucketObject, staging: Path, sha: str, size: int, limits: ParseLimits) -> StagedResult:
    tmp = _tmp_root(staging) / f"{sha}-{uuid.uuid4().hex}"
    tmp.mkdir()
    writers: dict[str, pq.ParquetWriter] = {}
    rows: dict[str, int] = {}
    try:
        summary = None
        for item in iter_dump(raw, obj.path, dump_id=sha, limits=limits):
            if isinstance(item, TableBatch):
                table = _to_arrow(item.frame)
                if item.table not in writers:
                    writers[item.table] = pq.ParquetWriter(tmp / f"{item.table}.parquet", table.schema)
                writers[item.table].write_table(table)
                rows[item.table] = rows.get(item.table, 0) + table.num_rows
            else:
                summary = item
        for w in writers.values():
            w.close()
        writers.clear()
        assert summary is not None
        if summary.failed:  # batches of a failed dump are discarded (transforms.parse)
            for t in rows:
                (tmp / f"{t}.parquet").unlink()
            rows = {}
        version = parser_version(summary.kind)
        record = {
            "sha256": sha,
            "size": size,
            "kind": str(summary.kind),
            "stage": summary.stage,
            "program": summary.program,
            "status": str(summary.status),
            "errors": summary.errors,
            "metrics": summary.metrics,
            # Each program's figures, for a dump holding several (torch_trace): the load stores
            # them instead of the totals. Staged only by parser versions that give them (a
            # torch_trace staged by version 1 has no such key and is parsed again: PARSER_VERSION).
            "programs": summary.programs,
            # A partial dump's lost figures when its parser tells (its other figures stand); None: all.
            "lost": None if summary.lost is None else list(summary.lost),
            "parser_version": version,
            "rows": rows,
            "first_path": obj.path,  # provenance only: the same content may sit under other paths
            # The limit that failed it, so that a run with a larger one parses it again.
            "limit": {"name": summary.limit, "value": getattr(limits, summary.limit)} if summary.limit else None,
        }
        (tmp / SUMMARY).write_text(json.dumps(record, indent=1))
        final = staging / sha / f"{summary.kind}-v{version}"
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another worker staged the same content first: keep theirs.
            if (done := find_staged(staging, sha, summary.kind, limits)) is not None:
                return replace(done, summary=naming(done.summary, obj.path))
            # What is there failed by a limit these limits raise: replace it.
            old = _tmp_root(staging) / f"{sha}-{uuid.uuid4().hex}-replaced"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        return StagedResult(sha, final, record, parsed=True)
    finally:
        for w in writers.values():
            with contextlib.suppress(Exception):  # already failing: keep the first error
                w.close()
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- the parse worker


@dataclass
class Outcome:
    """What the parse worker made of one object: staged, or why the bucket could not deliver it."""

    obj: BucketObject
    staged: StagedResult | None = None
    error: str | None = None


def stage_chunk(bucket: str | os.PathLike, storage_options: dict | None, chunk: list[BucketObject], staging_dir: Path,
                limits: ParseLimits = DEFAULT_LIMITS, held: dict[str, dict] | None = None) -> list[Outcome]:
    """The nightly's parse worker: stage each object of ``chunk``; an object the bucket could
    not deliver is an ``Outcome`` with its error (retried next night, nothing stored)."""
    fs, _ = connect(bucket, storage_options)
    out = []
    for obj in chunk:
        try:
            out.append(Outcome(obj, stage_object(fs, obj, staging_dir, limits=limits, held=held)))
        except BucketReadError as exc:  # retried next night: nothing is stored for it
            out.append(Outcome(obj, error=str(exc)))
    return out


def exit_with_parent(parent: int) -> None:
    """In each parse worker: exit when the flow process is gone (killed, OOM). A spawned
    worker holds both ends of its task queue, so it would never see the parent go."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
