"""Bucket I/O through fsspec: list objects, read run.json, open objects, keep settle state.

Any fsspec URL works: a local path, ``file://``, ``memory://``, ``s3://bucket/prefix``
(s3fs is loaded by fsspec when the scheme is used; endpoint, credentials and region
come from ``storage_options`` — e.g. ``{"key": ..., "secret": ...,
"client_kwargs": {"endpoint_url": ..., "region_name": ...}}`` — or the usual AWS
environment variables and config files, which botocore reads itself:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``). S3 objects' ``LastModified`` and
``size`` are their mtime and size; their ``ETag`` (else ``VersionId``, listed when
the fs is ``version_aware``) is their ``version``; on a local disk the version is
``st_mtime_ns``. Where objects belong, and how a file name that is not UTF-8 is
written (``escape_name``), is decided by ``transforms.layout``.

``list_objects`` raises ``BucketNotFound(url)`` when the bucket itself is missing (a
local directory that does not exist, an S3 bucket that does not exist; an existing
but empty prefix is an empty bucket): a wrong ``--bucket``, not worth a retry.
Raises ``BucketReadError(path, reason)`` for other I/O failures (listing refused,
object vanished, permission denied) so a flow can retry or record them; bad
*content* (a broken run.json) is never raised, it is reported in
``RunInfo.meta_errors``.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from transforms.layout import (
    RUN_JSON_MAX_BYTES,
    BucketObject,
    Role,
    RunInfo,
    SettleState,
    escape_name,
    locate,
    parse_run_json,
    run_info,
)

log = logging.getLogger(__name__)

__all__ = [
    "BucketNotFound",
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

    def __reduce__(self):  # OSError would rebuild it from its message alone (Dask, process pools)
        return type(self), (self.path, self.reason)


class BucketNotFound(FileNotFoundError):
    """The bucket root does not exist (or is a file): a wrong URL, not worth retrying."""

    def __init__(self, url: str, detail: str = ""):
        self.url, self.detail = url, detail
        super().__init__(f"no bucket at {escape_name(url)}{f' ({detail})' if detail else ''}")

    def __reduce__(self):
        return type(self), (self.url, self.detail)


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
    the dumps (``role=dump``); filter on ``role`` for the dumps. Raises ``BucketNotFound``
    when the bucket root does not exist, ``BucketReadError`` when it cannot be listed.
    Should an escaped name equal a real one (the one ambiguity of ``escape_name``), the
    real one is listed and the other left out, with a warning.
    """
    fs, root = connect(bucket_url, storage_options)
    cause: OSError | None = None
    try:
        fs.invalidate_cache(root)  # fsspec caches fs instances and (s3, gcs...) their listings: look again
        found = fs.find(root, detail=True)
    except FileNotFoundError as exc:  # s3fs: "The specified bucket does not exist"
        found, cause = {}, exc
    except OSError as exc:
        raise BucketReadError(escape_name(bucket_url), f"cannot list: {exc}") from exc
    if not found:
        try:
            exists = _root_exists(fs, root)
        except OSError as exc:
            raise BucketReadError(escape_name(bucket_url), f"cannot list: {exc}") from exc
        if not exists:
            raise BucketNotFound(bucket_url) from cause
        if cause is not None:  # the bucket is there, something below it vanished: try again later
            raise BucketReadError(escape_name(bucket_url), f"cannot list: {cause}") from cause
    if list(found) == [root] and found[root].get("type", "file") == "file":
        raise BucketNotFound(bucket_url, "a file, not a directory")
    by_path: dict[str, BucketObject] = {}
    prefix = root + "/" if root else ""
    for full, info in found.items():
        if info.get("type", "file") != "file":
            continue
        rel = full.removeprefix(prefix)
        path = escape_name(rel)
        where = locate(path, layout_regex, marker=marker)
        if where is None:
            continue
        obj = BucketObject(path, full, int(info.get("size") or 0), _mtime(info), where.run_id, where.job, where.role,
                           _version(fs, full, info))
        if (other := by_path.get(path)) is not None:  # the name that needed no escaping wins
            keep, drop = (obj, other) if path == rel else (other, obj)
            log.warning("two names read %s once escaped: listing %r, leaving out %r", path, keep.full_path, drop.full_path)
            obj = keep
        by_path[path] = obj
    return sorted(by_path.values(), key=lambda o: o.path)


def _root_exists(fs: fsspec.AbstractFileSystem, root: str) -> bool:
    """Whether an empty listing of ``root`` is an empty bucket (True) or no bucket at all."""
    if fs.isdir(root):
        return True
    split = getattr(fs, "split_path", None)  # object stores: a prefix exists only while it holds objects
    if split is None:
        return False
    bucket = split(root)[0]
    try:
        return bool(bucket) and fs.exists(bucket)
    except PermissionError:  # may list the prefix but not look at the bucket: it is there
        return True


# Object stores name a write's identity differently: s3 "ETag" (and "VersionId" when
# version_aware), gcs "etag"/"generation", azure "etag".
_VERSION_KEYS = ("ETag", "etag", "VersionId", "version_id", "generation")


def _version(fs: fsspec.AbstractFileSystem, full: str, info: dict[str, Any]) -> str:
    """What identifies this write of the object (see ``BucketObject.version``)."""
    if isinstance(fs, LocalFileSystem):
        try:
            return str(os.stat(full).st_mtime_ns)  # fsspec's info has float seconds only
        except OSError:
            pass  # vanished since the listing: opening it will say so
    for key in _VERSION_KEYS:
        if info.get(key) not in (None, ""):
            return str(info[key])
    return str(round(_mtime(info) * 1e9))


def open_object(fs: fsspec.AbstractFileSystem, obj: BucketObject) -> BinaryIO:
    """The object's raw bytes as a binary stream (the caller closes it)."""
    try:
        return fs.open(obj.full_path, "rb")
    except (OSError, PermissionError) as exc:
        raise BucketReadError(obj.path, f"cannot open: {type(exc).__name__}: {exc}") from exc


def read_runs(fs: fsspec.AbstractFileSystem, objects: Iterable[BucketObject]) -> dict[str, RunInfo]:
    """One ``RunInfo`` per run in ``objects``, reading each run's run.json if listed.

    A run.json listed larger than ``RUN_JSON_MAX_BYTES`` is not read; at most that many
    bytes (and one more, to tell) are read of the others. What is wrong with one goes to
    ``RunInfo.meta_errors``; only I/O failures raise (``BucketReadError``).
    """
    by_run: dict[str, list[BucketObject]] = {}
    for o in objects:
        by_run.setdefault(o.run_id, []).append(o)
    runs = {}
    for run_id, objs in sorted(by_run.items()):
        meta, errors, meta_path = None, [], None
        for m in (o for o in objs if o.role is Role.RUN_META):
            meta_path = m.path
            if m.size > RUN_JSON_MAX_BYTES:
                meta = None
                errors.append(f"{m.path}: {m.size} bytes, larger than {RUN_JSON_MAX_BYTES}: not read")
                continue
            with open_object(fs, m) as f:
                try:
                    raw = f.read(RUN_JSON_MAX_BYTES + 1)
                except OSError as exc:
                    raise BucketReadError(m.path, f"cannot read: {exc}") from exc
            meta, bad = parse_run_json(raw, m.path)
            errors += bad
        runs[run_id] = run_info(run_id, meta, (o.mtime for o in objs), meta_errors=errors, meta_path=meta_path)
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
