"""Bucket I/O through fsspec: list objects, read run.json, open objects (reaching the bucket and
its errors: ``flows.ingest.bucket_access``; the settle state kept between nights:
``flows.ingest.settle_state``).

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
but empty prefix is an empty bucket) and ``BucketAccessDenied(url)`` when the store
refuses the credentials (InvalidAccessKeyId, SignatureDoesNotMatch, ExpiredToken,
AccessDenied on the listing; on S3, no credentials at all): both are ``BucketUnusable``, an
operator's mistake, not worth a retry; ``check_bucket`` finds them with one cheap look before a
night starts, and an S3 endpoint that does not answer too.
Raises ``BucketReadError(path, reason)`` for other I/O failures (listing refused,
object vanished, permission denied) so a flow can retry or record them; bad
*content* (a broken run.json) is never raised, it is reported in
``RunInfo.meta_errors``.

What is read (``open_object``, the one way every reader opens a bucket object): on a
local disk, only a regular file inside the bucket (``flows.ingest.local_open``). The path is walked from the bucket
root one component at a time (``O_NOFOLLOW``, ``dir_fd``) by its real name (the bytes
of a name that is not UTF-8, never its escaped form), so no symbolic link below the
root is followed (the root itself may be one); the file is opened ``O_NONBLOCK`` and
its descriptor must be a regular file, so a FIFO, a socket or a device is never read
and nothing blocks. Such an object raises ``RefusedObject``: the caller records it
failed with the reason ("not a regular file: symlink"), it is not retried. The listing
lists them too (as the store reports them) so that they are refused where people see
it, skips directory marker objects (keys ending in ``/``) and leaves out, with a
warning, objects whose run id or job name is refused (``transforms.layout.refused_name``).
Object stores hold no links: their objects are read through fsspec, with bounded
connect and read timeouts on S3 (``S3_TIMEOUTS``, unless the storage options set them).
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable
from datetime import datetime
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from flows.ingest import local_open
from flows.ingest.bucket_access import BucketNotFound, BucketReadError, RefusedObject, connect, listing_error, root_exists
from transforms.layout import (
    RUN_JSON_MAX_BYTES,
    BucketObject,
    Role,
    RunInfo,
    escape_name,
    locate,
    parse_run_json,
    refused_path,
    run_info,
)

log = logging.getLogger(__name__)

__all__ = ["BucketObject", "list_objects", "open_in_bucket", "open_object", "read_runs"]


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
    bucket_url: str | os.PathLike,
    *,
    layout_regex: str | None = None,
    storage_options: dict[str, Any] | None = None,
    marker: str | None = None,
    refused: list[str] | None = None,
    as_run: str | None = None,
) -> list[BucketObject]:
    """Every object under the bucket that belongs to a run, sorted by path.

    Includes run.json files (``role=run_meta``) and markers (``role=marker``) next to
    the dumps (``role=dump``); filter on ``role`` for the dumps. Entries that are not
    regular files (symbolic links, FIFOs...) are listed as objects too, for
    ``open_object`` to refuse; directories and directory markers (keys ending in ``/``)
    are not. Objects whose run id, job name or path ``refused_path`` refuses are left
    out, with a warning; with ``refused``, one line per reason (naming the run id, job
    or path, and how many objects) is appended to it. Raises ``BucketNotFound``
    when the bucket root does not exist, ``BucketAccessDenied`` when the store refuses
    the credentials, ``BucketReadError`` when it cannot be listed.
    Should an escaped name equal a real one (the one ambiguity of ``escape_name``), a
    regular file wins over anything else, then the real name; the other is left out,
    with a warning.

    ``as_run``: ``bucket_url`` is one run's directory rather than a bucket (``dumpscope check
    DIR``, a ``Path``): every object below it is located as ``<as_run>/<its name below it>``,
    so it is run ``as_run``'s, and its ``path`` is its full path (escaped): an absolute path,
    which no bucket's path (relative to its root) can equal.
    """
    fs, root = connect(bucket_url, storage_options)
    bucket_url = os.fspath(bucket_url)  # as given, in what is said of it
    cause: OSError | None = None
    try:
        fs.invalidate_cache(root)  # fsspec caches fs instances and (s3, gcs...) their listings: look again
        found = fs.find(root, detail=True)
    except FileNotFoundError as exc:  # s3fs: "The specified bucket does not exist"
        found, cause = {}, exc
    except OSError as exc:
        raise listing_error(bucket_url, exc) from exc
    if not found:
        try:
            exists = root_exists(fs, root)
        except OSError as exc:
            raise listing_error(bucket_url, exc) from exc
        if not exists:
            raise BucketNotFound(bucket_url) from cause
        if cause is not None:  # the bucket is there, something below it vanished: try again later
            raise BucketReadError(escape_name(bucket_url), f"cannot list: {cause}") from cause
    if list(found) == [root] and found[root].get("type", "file") == "file":
        raise BucketNotFound(bucket_url, "a file, not a directory")
    by_path: dict[str, BucketObject] = {}
    left_out: dict[str, int] = {}
    prefix = root + "/" if root else ""
    local = isinstance(fs, LocalFileSystem)
    for full, info in found.items():
        if info.get("type", "file") == "directory" or full.endswith("/"):  # S3 directory markers: "run/job/"
            continue
        rel = full.removeprefix(prefix)
        located = rel if as_run is None else f"{as_run}/{rel}"
        where = locate(escape_name(located), layout_regex, marker=marker)
        if where is None:
            continue
        if (why := refused_path(located, where)) is not None:
            left_out[why] = left_out.get(why, 0) + 1
            continue
        path, unescaped = escape_name(rel if as_run is None else full), escape_name(rel) == rel
        size, version = _size_and_version(fs, full, info) if local else (int(info.get("size") or 0), _version(info))
        obj = BucketObject(path, full, size, _mtime(info), where.run_id, where.job, where.role, version, root)
        if (other := by_path.get(path)) is not None:
            keep, drop = (obj, other) if _preferred(info, unescaped) > _preferred(found[other.full_path], not unescaped) \
                else (other, obj)
            log.warning("two names read %s once escaped: listing %r, leaving out %r", path, keep.full_path, drop.full_path)
            obj = keep
        by_path[path] = obj
    for why, n in sorted(left_out.items()):
        line = f"{why}: {n} object{'s' if n > 1 else ''} not read"
        log.warning("%s", line)
        if refused is not None:
            refused.append(line)
    return sorted(by_path.values(), key=lambda o: o.path)


def _preferred(info: dict[str, Any], unescaped: bool) -> tuple[bool, bool]:
    """Of two names that read the same once escaped: a regular file first, then the real name."""
    return info.get("type", "file") == "file", unescaped


# Object stores name a write's identity differently: s3 "ETag" (and "VersionId" when
# version_aware), gcs "etag"/"generation", azure "etag".
_VERSION_KEYS = ("ETag", "etag", "VersionId", "version_id", "generation")


def _version(info: dict[str, Any]) -> str:
    """What identifies this write of the object (see ``BucketObject.version``)."""
    for key in _VERSION_KEYS:
        if info.get(key) not in (None, ""):
            return str(info[key])
    return str(round(_mtime(info) * 1e9))


def _size_and_version(fs: fsspec.AbstractFileSystem, full: str, info: dict[str, Any]) -> tuple[int, str]:
    """A local object's own size and mtime in nanoseconds (fsspec's info has float seconds,
    and a link's size is its target's: never what is read of a link, which is nothing)."""
    try:
        st = os.lstat(full)
    except OSError:  # vanished since the listing: opening it will say so
        return int(info.get("size") or 0), _version(info)
    return (st.st_size if stat.S_ISREG(st.st_mode) else 0), str(st.st_mtime_ns)


def open_object(fs: fsspec.AbstractFileSystem, obj: BucketObject) -> BinaryIO:
    """The object's raw bytes as a binary stream (the caller closes it). Raises
    ``RefusedObject`` for what is not a regular file inside the bucket (see the module
    docstring), ``BucketReadError`` when it cannot be opened (vanished, permission denied)."""
    if isinstance(fs, LocalFileSystem):
        if obj.root and obj.full_path.startswith(obj.root.rstrip("/") + "/"):
            root, rel = obj.root, obj.full_path[len(obj.root.rstrip("/")) + 1 :]
        else:  # a root nobody told: the file itself is checked, not the directories above it
            root, rel = os.path.split(obj.full_path)
        return _open_local(root, rel, obj.path)
    try:
        return fs.open(obj.full_path, "rb")
    except OSError as exc:
        raise BucketReadError(obj.path, f"cannot open: {type(exc).__name__}: {exc}") from exc


def _open_local(root: str, rel: str, shown: str) -> BinaryIO:
    try:
        return local_open.open_regular_below(root, rel)
    except local_open.Refused as exc:
        raise RefusedObject(shown, exc.reason) from None
    except local_open.Unopened as exc:
        raise BucketReadError(shown, exc.reason) from None


def open_in_bucket(fs: fsspec.AbstractFileSystem, root: str, rel: str) -> BinaryIO:
    """``open_object`` for the object at ``rel`` (its real name, relative to the bucket root
    ``root`` as ``connect`` gives it) when no listing of it is at hand."""
    shown = escape_name(rel)
    if isinstance(fs, LocalFileSystem):
        return _open_local(root, rel, shown)
    if any(part in ("", ".", "..") for part in rel.split("/")):
        raise RefusedObject(shown, "an empty, '.' or '..' component in the path")
    try:
        return fs.open(f"{root}/{rel}", "rb")
    except OSError as exc:
        raise BucketReadError(shown, f"cannot open: {type(exc).__name__}: {exc}") from exc


def read_runs(fs: fsspec.AbstractFileSystem, objects: Iterable[BucketObject]) -> dict[str, RunInfo]:
    """One ``RunInfo`` per run in ``objects``, reading each run's run.json if listed.

    A run.json listed larger than ``RUN_JSON_MAX_BYTES`` is not read; at most that many
    bytes (and one more, to tell) are read of the others. What is wrong with one goes to
    ``RunInfo.meta_errors`` (a refused one too: a link, a FIFO); only I/O failures raise
    (``BucketReadError``).
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
            try:
                f = open_object(fs, m)
            except RefusedObject as exc:  # a link, a FIFO...: never read, said like bad content
                meta = None
                errors.append(str(exc))
                continue
            with f:
                try:
                    raw = f.read(RUN_JSON_MAX_BYTES + 1)
                except OSError as exc:
                    raise BucketReadError(m.path, f"cannot read: {exc}") from exc
            meta, bad = parse_run_json(raw, m.path)
            errors += bad
        runs[run_id] = run_info(run_id, meta, (o.mtime for o in objs), meta_errors=errors, meta_path=meta_path)
    return runs
