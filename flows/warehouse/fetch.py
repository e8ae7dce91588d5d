"""A published snapshot fetched from a URL (``check --warehouse https://…/warehouse.duckdb``): data
from elsewhere, downloaded within bounds and read as a foreign file.

The body is whatever the server sends: it may be endless, slow, cut short, redirect in a loop
or to ``file://``, or not be a DuckDB file at all. So the download

- stops at ``max_bytes`` (the settings' ``[check] max_download``) and after ``seconds``
  (``[check] download_seconds``): each read is bounded by the transport's own timeouts (HTTP:
  aiohttp's, S3: botocore's, ``flows.ingest.bucket_access.S3_TIMEOUTS``) and the whole by a deadline
  checked between reads;
- stops after the first block when it does not start as a DuckDB file does;
- lands in a directory of its own under the system's temporary directory
  (``dumpscope-snapshot-<pid>-*``), removed when the read is done, and by a later fetch when
  the process that made it is gone (killed mid-download);
- fails as ``FetchError``: one line naming the URL and what went wrong (exit 2), whatever the
  transport raised.

The file is then opened with ``foreign=True`` (``flows.warehouse.readonly``): no file access.

May import: fsspec, psutil, ``flows.errors``, ``flows.ingest.bucket``.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flows.errors import CommandError
from flows.ingest.bucket_access import S3_TIMEOUTS
from transforms.escape import plain_text

_PREFIX = "dumpscope-snapshot-"
_OWN_DIR = re.compile(rf"{_PREFIX}(\d+)-[\w]+\Z")
_BLOCK = 1 << 20
_MAGIC = b"DUCK"  # bytes 8..12 of a DuckDB file's main header
_HTTP_CONNECT_SECONDS = 10.0
_HTTP_READ_SECONDS = 60.0


class FetchError(CommandError, exit_code=2):
    """The snapshot could not be fetched; the message is one line naming the URL."""


def is_url(warehouse: str) -> bool:
    """Whether ``--warehouse`` names something to download rather than a local file."""
    return "://" in warehouse and not warehouse.startswith("file://")


@contextmanager
def fetched(url: str, storage_options: dict[str, Any] | None, *, max_bytes: int, seconds: float) -> Iterator[Path]:
    """The snapshot at ``url``, downloaded into a temporary directory removed afterwards."""
    sweep_leftovers()
    tmp = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
    try:
        target = tmp / "snapshot.duckdb"
        download(url, target, storage_options, max_bytes=max_bytes, seconds=seconds)
        yield target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def download(url: str, target: Path, storage_options: dict[str, Any] | None, *, max_bytes: int,
             seconds: float) -> int:
    """Copy ``url`` to ``target`` within the bounds (module docstring); returns its bytes."""
    import fsspec

    shown = plain_text(url)
    deadline = time.monotonic() + seconds
    written = 0
    try:
        fs, path = fsspec.core.url_to_fs(url, **_with_timeouts(url, storage_options or {}, seconds))
        streamed = fsspec.core.split_protocol(url)[0] in ("http", "https")  # one GET, read in order: no ranges
        with fs.open(path, "rb", block_size=0 if streamed else _BLOCK) as src, open(target, "wb") as dst:
            while block := src.read(_BLOCK):
                if not written and block[8:12] != _MAGIC:
                    raise FetchError(f"--warehouse {shown}: not a DuckDB file (it starts "
                                     f"{plain_text(repr(block[:16]))}): give a published snapshot's URL")
                written += len(block)
                if written > max_bytes:
                    raise FetchError(f"--warehouse {shown}: more than {max_bytes:,} bytes ([check] max_download): "
                                     "stopped")
                if time.monotonic() > deadline:
                    raise FetchError(f"--warehouse {shown}: not fetched within {seconds:g} s ([check] "
                                     f"download_seconds; {written:,} bytes read)")
                dst.write(block)
    except FetchError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the transport raises, the answer is one line
        raise FetchError(f"--warehouse {shown}: cannot fetch it ({_reason(exc)})") from None
    if not written:
        raise FetchError(f"--warehouse {shown}: the body is empty: give a published snapshot's URL")
    return written


def _with_timeouts(url: str, options: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The storage options with the transport's timeouts unless they set their own."""
    import fsspec

    protocol, _ = fsspec.core.split_protocol(url)
    options = copy.deepcopy(options)
    if protocol in ("http", "https"):
        import aiohttp

        client = options.setdefault("client_kwargs", {})
        client.setdefault("timeout", aiohttp.ClientTimeout(total=seconds, sock_connect=_HTTP_CONNECT_SECONDS,
                                                           sock_read=_HTTP_READ_SECONDS))
    elif protocol in ("s3", "s3a"):
        config = options.setdefault("config_kwargs", {})
        for key, value in S3_TIMEOUTS.items():
            config.setdefault(key, value)
        config.setdefault("retries", {"max_attempts": 2})
    return options


def _reason(exc: BaseException) -> str:
    """What went wrong, on one line: the exception's class and message, and its cause's."""
    parts = []
    while exc is not None and len(parts) < 3:
        text = " ".join(str(exc).split())
        parts.append(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
        exc = exc.__cause__ or exc.__context__
    return plain_text("; ".join(parts))[:500]


def sweep_leftovers() -> int:
    """Remove the download directories of processes that are gone (a killed ``check``): only
    directories of this user named as ``fetched`` names them, never through a link."""
    import psutil

    removed = 0
    root = tempfile.gettempdir()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        m = _OWN_DIR.match(entry.name)
        if m is None or int(m[1]) == os.getpid() or psutil.pid_exists(int(m[1])):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_dir(follow_symlinks=False) or st.st_uid != os.getuid():
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    return removed


__all__ = ["FetchError", "download", "fetched", "is_url", "sweep_leftovers"]
