"""Open a regular file below a directory on a local disk, and nothing else: the walk
``flows.ingest.bucket.open_object`` does for a local bucket (issue 27).

``open_regular_below(root, rel)`` opens ``root`` (it may be a symbolic link: operators
point ``--bucket`` at one), then each directory component of ``rel`` with
``O_DIRECTORY|O_NOFOLLOW`` relative to the one before (``dir_fd``), then the file with
``O_NOFOLLOW|O_NONBLOCK``, and checks the descriptor it got (``fstat``) is a regular
file before clearing ``O_NONBLOCK``. So no symbolic link below the root is followed,
even one swapped in after the listing, and a FIFO, a socket or a device is never read:
opening a FIFO without ``O_NONBLOCK`` blocks until a writer comes, for ever.

``rel`` is the real name (``str`` with surrogate escapes for bytes that are not UTF-8, as
``os.fsdecode`` gives them), never its escaped form. Raises ``Refused(reason)`` for what
is not a regular file (or a path with an empty, ``.`` or ``..`` component) and
``Unopened(reason)`` when it could not be opened (vanished, permission denied); the
reasons name a directory component by its escaped name (``transforms.layout.escape_name``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import BinaryIO

from transforms.layout import escape_name

__all__ = ["Refused", "Unopened", "kind_of", "open_regular_below"]


class Refused(Exception):
    """Not a regular file below the root: never read."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Unopened(Exception):
    """Could not be opened (vanished, permission denied...)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = ((stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory"),
          (stat.S_ISREG, "file"))


def kind_of(mode: int) -> str:
    """What a ``st_mode`` is, in the words of the reasons ("symlink", "FIFO"...)."""
    return next((word for test, word in _KINDS if test(mode)), "special file")


def open_regular_below(root: str, rel: str) -> BinaryIO:
    """The regular file at ``rel`` below the directory ``root`` as a binary stream (the
    caller closes it); see the module docstring."""
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise Refused("an empty, '.' or '..' component in the path")
    try:
        at = os.open(root or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the root may be a link
    except OSError as exc:
        raise Unopened(f"cannot open the bucket: {exc.strerror}") from None
    try:
        for depth, part in enumerate(parts[:-1], start=1):
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=at)
            except OSError as exc:
                raise _why(exc, part, at, f"its directory {escape_name('/'.join(parts[:depth]))}") from None
            os.close(at)
            at = fd
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=at)
        except OSError as exc:
            raise _why(exc, parts[-1], at, "") from None
    finally:
        os.close(at)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # what was opened, not what a look before the open saw
            raise Refused(f"not a regular file: {kind_of(mode)}")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _why(exc: OSError, name: str, at: int, component: str) -> Refused | Unopened:
    """Why ``name`` (in the directory ``at``; ``component``: how a directory is named, "" for
    the file) did not open: refused for what it is (a link: ELOOP; a socket: ENXIO; a device
    without a driver: ENODEV...), or an I/O failure."""
    if exc.errno == errno.ENOENT:
        return Unopened(f"vanished since the listing ({component or 'the file'} is gone)")
    try:
        mode: int | None = os.stat(name, dir_fd=at, follow_symlinks=False).st_mode
    except OSError:
        mode = None
    if mode is None and exc.errno == errno.ELOOP:  # swapped again since: O_NOFOLLOW saw a link
        kind: str | None = "symlink"
    elif mode is not None and not (stat.S_ISDIR(mode) if component else stat.S_ISREG(mode)):
        kind = kind_of(mode)
    else:
        kind = None
    if kind is not None:
        return Refused(f"not read: {component} is a {kind}" if component else f"not a regular file: {kind}")
    return Unopened(f"cannot open: {type(exc).__name__}: {exc.strerror}")
