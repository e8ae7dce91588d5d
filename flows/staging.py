"""Parse one bucket object into staging Parquet keyed by its content hash.

``stage_object(fs, obj, staging_dir)`` reads the object from the bucket exactly once,
into a local spool (memory up to ``SPOOL_MEMORY`` bytes, a temp file beyond),
computing its sha256 on the way. Then:

- ``staging_dir/<sha256>/v<parser_version>/`` exists (a retry, or the same content
  under another path): nothing is parsed, the staged summary is returned;
- else the spool is parsed with ``transforms.parse.iter_dump`` (``dump_id`` = sha256),
  each table's batches are written as they come with one ``ParquetWriter`` per table
  (``<table>.parquet``), plus ``summary.json`` (kind, stage, program, status, errors,
  metrics, parser_version, sha256, size, rows per table), into a temp dir that is
  renamed into place last. A crash leaves at most an entry in ``.tmp/`` (``sweep_tmp``
  removes old ones), never a final dir without its summary. A failed dump stages its summary and no tables.

Spooling (instead of hashing while parsing) keeps bucket I/O separate from parsing:
bucket errors surface as ``BucketReadError`` before parsing starts (the gzip reader
would otherwise report them as a corrupt stream), the content is deduplicated before
it is parsed, and the Parquet files carry the real ``dump_id`` as they are written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pyarrow.parquet as pq

from flows.bucket import BucketReadError, open_object
from transforms.parsers.formats import parser_version
from transforms.layout import BucketObject
from transforms.parse import iter_dump
from transforms.records import DumpKind, TableBatch

SPOOL_MEMORY = 16 << 20
_CHUNK = 1 << 20
SUMMARY = "summary.json"


@dataclass(frozen=True, slots=True)
class StagedResult:
    sha256: str
    dir: Path  # staging_dir/<sha256>/v<parser_version>
    summary: dict[str, Any]
    parsed: bool  # False when an existing staging dir was reused

    @property
    def status(self) -> str:
        return self.summary["status"]

    @property
    def tables(self) -> dict[str, Path]:
        return {t: self.dir / f"{t}.parquet" for t in self.summary["rows"]}


def stage_object(fs: fsspec.AbstractFileSystem, obj: BucketObject, staging_dir: str | os.PathLike) -> StagedResult:
    """Stage ``obj`` (see the module docstring). Raises ``BucketReadError`` on I/O errors only."""
    staging = Path(staging_dir)
    with tempfile.SpooledTemporaryFile(SPOOL_MEMORY, dir=_tmp_root(staging)) as spool:
        sha, size = _spool(fs, obj, spool)
        if (done := find_staged(staging, sha)) is not None:
            return done
        spool.seek(0)
        return _parse_into(spool, obj, staging, sha, size)  # type: ignore[arg-type]


def find_staged(staging_dir: str | os.PathLike, sha256: str) -> StagedResult | None:
    """The staged result of this content by the current parser of its kind, if any."""
    for summary_path in sorted(Path(staging_dir, sha256).glob(f"v*/{SUMMARY}")):
        try:
            summary = json.loads(summary_path.read_text())
            current = parser_version(DumpKind(summary["kind"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if summary.get("parser_version") == current:
            return StagedResult(sha256, summary_path.parent, summary, parsed=False)
    return None


def sweep_tmp(staging_dir: str | os.PathLike, older_than_seconds: float = 3600.0) -> int:
    """Remove what killed stagings left in ``.tmp/`` (older than the limit); returns how many.

    Only entries older than any stage still running are removed: pick the limit above
    the longest parse. Final dirs are never touched.
    """
    tmp = Path(staging_dir) / ".tmp"
    cutoff = time.time() - older_than_seconds
    removed = 0
    for entry in tmp.iterdir() if tmp.is_dir() else ():
        if entry.lstat().st_mtime < cutoff:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink(missing_ok=True)
            removed += 1
    return removed


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


def _parse_into(raw, obj: BucketObject, staging: Path, sha: str, size: int) -> StagedResult:
    tmp = _tmp_root(staging) / f"{sha}-{uuid.uuid4().hex}"
    tmp.mkdir()
    writers: dict[str, pq.ParquetWriter] = {}
    rows: dict[str, int] = {}
    try:
        summary = None
        for item in iter_dump(raw, obj.path, dump_id=sha):
            if isinstance(item, TableBatch):
                table = item.frame.to_arrow()
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
            "parser_version": version,
            "rows": rows,
            "first_path": obj.path,  # provenance only: the same content may sit under other paths
        }
        (tmp / SUMMARY).write_text(json.dumps(record, indent=1))
        final = staging / sha / f"v{version}"
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another worker staged the same content first: keep theirs.
            if (done := find_staged(staging, sha)) is not None:
                return done
            raise
        return StagedResult(sha, final, record, parsed=True)
    finally:
        for w in writers.values():
            with contextlib.suppress(Exception):  # already failing: keep the first error
                w.close()
        shutil.rmtree(tmp, ignore_errors=True)
