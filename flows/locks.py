"""One process at a time: an exclusive ``flock`` on a lock file of our own.

``exclusive(path, wait=..., busy=...)`` holds ``path`` (created when absent; a symbolic link
or anything but a regular file there is refused, never followed) for the ``with`` block and
writes the holder's pid into it; without ``wait`` a held lock raises ``busy(holder pid)``.
The kernel drops the lock when the holder dies, so a killed process never leaves one held.
The file stays (removing it would let two processes lock two files of one name).

Used by the warehouse's one writer (``<warehouse>.lock``) and the site's one builder and
publisher (``<site>.lock``). May import: the standard library.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(path: Path, *, wait: bool, busy: Callable[[str], BaseException]) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0), 0o644)
    with os.fdopen(fd, "r+") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise busy(f"not a lock file: {path} is not a regular file")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise busy(f.read().strip() or "unknown") from None
        try:
            f.seek(0)
            f.truncate()
            f.write(str(os.getpid()))
            f.flush()
            yield
        finally:
            f.truncate(0)
            fcntl.flock(f, fcntl.LOCK_UN)


__all__ = ["exclusive"]
