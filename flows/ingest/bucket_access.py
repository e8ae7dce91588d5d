"""Reaching a bucket through fsspec: ``connect`` (a local path or any fsspec URL with its
storage options), ``check_bucket`` (one cheap look before a night starts), ``--storage-option``
pairs (``parse_storage_options``), and the errors every bucket reader raises.

``BucketUnusable`` (``BucketNotFound``, ``BucketAccessDenied``) is an operator's mistake, exit 2,
not worth a retry; ``BucketReadError`` (``RefusedObject``: not a regular file inside the
bucket) is recorded against the object and retried or not by the caller. What is listed and
read, and how: ``flows.ingest.bucket``.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable
from typing import Any

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from flows.errors import CommandError
from transforms.layout import escape_name

__all__ = ["BucketAccessDenied", "BucketNotFound", "BucketReadError", "BucketUnusable", "RefusedObject", "S3_TIMEOUTS",
           "check_bucket", "connect", "listing_error", "parse_storage_options", "root_exists"]

# botocore's Config for S3 unless the storage options say otherwise (config_kwargs.*):
# an open or a read that hangs fails after this many seconds instead of holding the night.
S3_TIMEOUTS = {"connect_timeout": 10, "read_timeout": 60}


class BucketReadError(OSError):
    """An object (or the bucket) could not be read: the flow retries or records it."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")

    def __reduce__(self):  # OSError would rebuild it from its message alone (Dask, process pools)
        return type(self), (self.path, self.reason)


class RefusedObject(BucketReadError):
    """Not a regular file inside the bucket (a symlink, a FIFO, a device...): never read.
    Bad input, not an I/O failure: the object is recorded failed with ``reason``, not retried."""


class BucketUnusable(CommandError, OSError, exit_code=2):
    """The bucket cannot be used as given (a wrong URL, credentials the store refuses): an
    operator's mistake, said in one line and not retried."""

    def __init__(self, url: str, detail: str = ""):
        self.url, self.detail = url, detail
        super().__init__(self._message(escape_name(url)) + (f" ({detail})" if detail else ""))

    def _message(self, url: str) -> str:
        return f"cannot use the bucket {url}"

    def __reduce__(self):  # rebuilt from its arguments (Dask, process pools), not from its message
        return type(self), (self.url, self.detail)


class BucketNotFound(BucketUnusable, FileNotFoundError):
    """The bucket root does not exist (or is a file): a wrong URL, not worth retrying."""

    def _message(self, url: str) -> str:
        return f"no bucket at {url}"


class BucketAccessDenied(BucketUnusable, PermissionError):
    """The store refuses the credentials (or this bucket to them): not worth retrying."""

    def _message(self, url: str) -> str:
        return f"access to the bucket {url} denied"


def connect(bucket_url: str | os.PathLike, storage_options: dict[str, Any] | None = None
            ) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and root path (as the fs spells it) of ``bucket_url``. A ``Path`` is a local
    directory, never read as a URL: its name is its name (a ``::`` or ``://`` in it chains nothing)."""
    if isinstance(bucket_url, os.PathLike):
        return LocalFileSystem(), os.path.abspath(bucket_url).rstrip("/")
    options = storage_options or {}
    protocol, _ = fsspec.core.split_protocol(str(bucket_url))
    if protocol in ("s3", "s3a"):
        options = copy.deepcopy(options)
        config = options.setdefault("config_kwargs", {})
        for key, seconds in S3_TIMEOUTS.items():
            config.setdefault(key, seconds)
    fs, root = url_to_fs(str(bucket_url), **options)
    return fs, root.rstrip("/")


def _look(bucket_url: str, look, *, missing):
    """``look()``'s answer; ``missing`` when it raised FileNotFoundError; None for another OSError (the
    night retries it); a denial or a client's refusal raised as the commands' one-line errors."""
    try:
        return look()
    except FileNotFoundError:
        return missing
    except PermissionError as exc:
        raise BucketAccessDenied(bucket_url, _denial(exc)) from None
    except OSError:
        return None
    except Exception as exc:
        raise _client_refusal(bucket_url, exc) from None


def check_bucket(bucket_url: str, storage_options: dict[str, Any] | None = None) -> None:
    """Raise ``BucketNotFound`` or ``BucketAccessDenied`` when the bucket cannot be used as
    given, from one cheap look (its first level); other failures are left to the night,
    which retries them. For the commands, before any work starts."""
    fs, root = connect(bucket_url, storage_options)

    def first_level() -> bool:
        fs.invalidate_cache(root)
        fs.ls(root, detail=False)
        return True

    # an object store's empty prefix (FileNotFoundError), or no bucket at all: told apart by root_exists
    if _look(bucket_url, first_level, missing=True) is None:
        return
    exists = _look(bucket_url, lambda: root_exists(fs, root), missing=None)
    if exists is None:
        return
    if not exists:
        raise BucketNotFound(bucket_url)
    if isinstance(fs, LocalFileSystem) and not os.path.isdir(root):
        raise BucketNotFound(bucket_url, "a file, not a directory")


_NO_CREDENTIALS_HINT = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the "
                        "environment, or --storage-option key=... --storage-option secret=...; anon=true for a public bucket")


def _client_refusal(bucket_url: str, exc: Exception) -> Exception:
    """What the store's client raised before the store answered, when it is not an ``OSError``:
    botocore's credential errors (none found, a profile that does not exist, half of a key
    pair) are ``BucketAccessDenied``, its other errors (an endpoint that does not answer)
    ``BucketUnusable``: the client's own words on one line. Anything else is ``exc`` itself."""
    try:
        from botocore import exceptions as boto
    except ImportError:  # no S3 client installed: not one of its errors
        return exc
    said = " ".join(str(exc).split())
    if isinstance(exc, (boto.NoCredentialsError, boto.PartialCredentialsError, boto.ProfileNotFound,
                        boto.CredentialRetrievalError)):
        return BucketAccessDenied(bucket_url, f"{said}; {_NO_CREDENTIALS_HINT}")
    if isinstance(exc, boto.BotoCoreError):
        return BucketUnusable(bucket_url, said)
    return exc


def _denial(exc: BaseException) -> str:
    """What the store said when it refused: its error code and message (botocore's ClientError
    is the cause of s3fs's PermissionError), on one line."""
    error = getattr(exc.__cause__, "response", {}).get("Error", {}) if exc.__cause__ is not None else {}
    code, text = error.get("Code"), " ".join(str(exc).split())
    return f"{code}: {text}" if code and code not in text else text


def listing_error(bucket_url: str, exc: OSError) -> OSError:
    if isinstance(exc, PermissionError):
        return BucketAccessDenied(bucket_url, _denial(exc))
    return BucketReadError(escape_name(bucket_url), f"cannot list: {exc}")


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


def root_exists(fs: fsspec.AbstractFileSystem, root: str) -> bool:
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
