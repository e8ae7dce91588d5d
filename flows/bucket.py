"""Bucket I/O through fsspec: list objects, read run.json, open objects, keep settle state.

Any fsspec URL works: a local path, ``file://``, ``memory://``, ``s3://bucket/prefix``
(s3fs is loaded by fsspec when the scheme is used; endpoint, credentials and region
come from ``storage_options`` — e.g. ``{"key": ..., "secret": ...,
"client_kwargs": {"endpoint_url": ..., "region_name": ...}}`` — or the usual AWS
environment variables and config files, which botocore reads itself:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``). S3 objects' ``LastModified`` and
``size`` are their mtime and size. Where objects
belong is decided by ``transforms.layout``.

Raises ``BucketReadError(path, reason)`` for I/O failures (missing bucket, object
vanished, permission denied) so a flow can retry or record them; bad *content*
(a broken run.json) is never raised, it is reported in ``RunInfo.meta_error``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

import fsspec
from fsspec.core import url_to_fs

from transforms.layout import BucketObject, Role, RunInfo, SettleState, locate, run_info

__all__ = [
    "BucketObject",
    "BucketReadError",
    "connect",
    "list_objects",
    "load_settle_state",
    "open_object",
    "parse_storage_options",
    "read_runs",
    "save_settle_state",
]


class BucketReadError(OSError):
    """An object (or the bucket) could not be read: the flow retries or records it."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")


def connect(bucket_url: str, storage_options: dict[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and root path (as the fs spells it) of ``bucket_url``."""
    fs, root = url_to_fs(str(bucket_url), **(storage_options or {}))
    return fs, root.rstrip("/")


def parse_storage_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``["key=value", "client_kwargs.endpoint_url=http://..."]`` as a (nested) dict.

    Dotted keys nest (``a.b=1`` gives ``{"a": {"b": 1}}``). A value that reads as JSON
    (``true``, ``false``, ``null``, a number, an object) is decoded, so ``anon=true`` is a
    bool; anything else stays a string. Raises ``ValueError`` on a pair without ``=``.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"storage option {pair!r}: expected KEY=VALUE")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        *parents, leaf = key.split(".")
        node = options
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"storage option {pair!r}: {part!r} is already a value")
            node = child
        node[leaf] = value
    return options


def _mtime(info: dict[str, Any]) -> float:
    # Each fsspec backend names it differently: local "mtime", s3 "LastModified",
    # gcs "updated", memory "created" (float or datetime depending on the call).
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, str):
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        return float(value)
    return 0.0


def list_objects(
    bucket_url: str,
    *,
    layout_regex: str | None = None,
    storage_options: dict[str, Any] | None = None,
    marker: str | None = None,
) -> list[BucketObject]:
    """Every object under the bucket that belongs to a run, sorted by path.

    Includes run.json files (``role=run_meta``) and markers (``role=marker``) next to
    the dumps (``role=dump``); filter on ``role`` for the dumps.
    """
    fs, root = connect(bucket_url, storage_options)
    try:
        fs.invalidate_cache(root)  # fsspec caches fs instances and (s3, gcs...) their listings: look again
        found = fs.find(root, detail=True)
    except (OSError, PermissionError) as exc:
        raise BucketReadError(bucket_url, f"cannot list: {exc}") from exc
    objects = []
    prefix = root + "/" if root else ""
    for full, info in found.items():
        if info.get("type", "file") != "file":
            continue
        rel = full.removeprefix(prefix)
        where = locate(rel, layout_regex, marker=marker)
        if where is None:
            continue
        objects.append(BucketObject(rel, full, int(info.get("size") or 0), _mtime(info), where.run_id, where.job, where.role))
    return sorted(objects, key=lambda o: o.path)


def open_object(fs: fsspec.AbstractFileSystem, obj: BucketObject) -> BinaryIO:
    """The object's raw bytes as a binary stream (the caller closes it)."""
    try:
        return fs.open(obj.full_path, "rb")
    except (OSError, PermissionError) as exc:
        raise BucketReadError(obj.path, f"cannot open: {type(exc).__name__}: {exc}") from exc


def read_runs(fs: fsspec.AbstractFileSystem, objects: Iterable[BucketObject]) -> dict[str, RunInfo]:
    """One ``RunInfo`` per run in ``objects``, reading each run's run.json if listed."""
    by_run: dict[str, list[BucketObject]] = {}
    for o in objects:
        by_run.setdefault(o.run_id, []).append(o)
    runs = {}
    for run_id, objs in sorted(by_run.items()):
        meta, error = None, None
        for m in (o for o in objs if o.role is Role.RUN_META):
            with open_object(fs, m) as f:
                try:
                    raw = f.read()
                except OSError as exc:
                    raise BucketReadError(m.path, f"cannot read: {exc}") from exc
            try:
                meta = json.loads(raw)
                if not isinstance(meta, dict):
                    meta, error = None, f"{m.path}: not a JSON object"
            except ValueError as exc:
                error = f"{m.path}: bad JSON: {exc}"
        runs[run_id] = run_info(run_id, meta, (o.mtime for o in objs), meta_error=error)
    return runs


def load_settle_state(state_path: str | os.PathLike) -> SettleState:
    """The settle state saved by ``save_settle_state`` (empty when absent or unreadable)."""
    try:
        data = json.loads(Path(state_path).read_text())
        return {p: (int(v[0]), float(v[1]), float(v[2])) for p, v in data.items()}
    except (OSError, ValueError, TypeError, IndexError, AttributeError):
        return {}


def save_settle_state(state_path: str | os.PathLike, state: SettleState) -> None:
    """Write the state atomically (temp file, then rename)."""
    path = Path(state_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump({p: list(v) for p, v in state.items()}, f)
    os.replace(tmp, path)
