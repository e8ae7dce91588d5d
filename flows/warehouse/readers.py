"""Leases of the readers of a warehouse, so the writer's sweep spares the records files
an old generation lists while a reader may still read it.

A reader holding one connection across nights (a notebook) sees the generation it
opened, whose views list records files later nights unlist. ``connect_readonly`` takes a
lease, a file ``<warehouse>.readers/<pid>.<n>`` holding the process's id and start time, before it opens the file, and drops it when the connection object goes (or
the process ends). ``held`` is what the sweep asks: while a live lease of another
process exists, taken less than ``HELD_READER_DAYS`` ago, no unlisted file is unlinked;
the next writer after the reader goes sweeps them all. Dead processes' leases are
removed on the way. A reader opening the file with ``duckdb.connect`` itself takes no
lease: its old generation's files go at the writer's next sweep.

May import: the standard library only.
"""

from __future__ import annotations

import itertools
import os
import time
import weakref
from pathlib import Path

HELD_READER_DAYS = 7  # a lease older than this no longer holds the sweep back
_count = itertools.count()


def _start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22): with
    the pid, it tells a live process from a later one that reused its id. "" when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def leases_of(warehouse: Path) -> Path:
    """The directory of the leases of the warehouse file at ``warehouse``."""
    path = Path(os.path.abspath(warehouse))
    return path.with_name(path.name + ".readers")


def take(warehouse: Path) -> Path | None:
    """A lease for this process on ``warehouse`` (None when none can be written: a
    read-only directory, say; the reader then reads without)."""
    lease = leases_of(warehouse) / f"{os.getpid()}.{next(_count)}"
    for _ in range(3):  # the last lease's drop may remove the directory in between
        try:
            lease.parent.mkdir(exist_ok=True)
            lease.write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
            return lease
        except FileNotFoundError:
            continue
        except OSError:
            return None
    return None


def hold(connection, lease: Path | None) -> None:
    """Drop ``lease`` when ``connection`` is garbage."""
    if lease is not None:
        weakref.finalize(connection, drop, lease)


def drop(lease: Path | None) -> None:
    if lease is not None:
        try:
            lease.unlink()
            lease.parent.rmdir()  # the last one: nothing stays beside the warehouse
        except OSError:
            pass


def held(warehouse: Path, now: float | None = None) -> int:
    """Live leases of other processes taken less than ``HELD_READER_DAYS`` ago; removes
    the leases of processes that are gone and of those older."""
    now = time.time() if now is None else now
    live = 0
    directory = leases_of(warehouse)
    for lease in directory.iterdir() if directory.is_dir() else ():
        try:
            pid_text, _, started = lease.read_text().partition(" ")
            pid, age = int(pid_text), now - lease.stat().st_mtime
        except (OSError, ValueError):
            continue
        if pid == os.getpid():
            continue  # the writer's own process: its readers are its own business
        if age > HELD_READER_DAYS * 86400 or not _alive(pid, started.strip()):
            drop(lease)
            continue
        live += 1
    return live


def _alive(pid: int, started: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    return not started or _start_time(pid) in ("", started)


__all__ = ["HELD_READER_DAYS", "drop", "held", "hold", "leases_of", "take"]
