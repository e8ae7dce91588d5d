"""What the Parquet footer of each records store file says (its row count, its columns and the
content its rows belong to), read once per file identity and remembered across nights.

A night reads the footers of every store file twice: the damage check at discovery and
again when the writer enters (``records.damaged``), and the records views group the files
of a table by their columns (``records.refresh_views``). At a year that is 5,740 files,
~0.8 s a pass, on a night that may have nothing else to do. A store file is never written
after it is placed (``records.place`` renames it in; compaction unlinks it), so what its
footer says holds while the file keeps its identity: device, inode, size, mtime and ctime
(a write, a truncation, a replacement or a chmod moves the ctime, which no one can set
back). The content is the ``dump_id`` every row carries, read from the column statistics
(min = max in every row group); a file whose statistics do not say reads the column once. A
file put in another's place (the same table, even the same size) names another content: the
damage check (``records.damaged``) compares it with the listing. ``Footers`` keeps the footers read in this process and in ``<store>/.footers.json``
(``FILE``), for the store files listed when it was saved; an entry whose file's identity
moved is read again. The file is a cache: unreadable, oversized or malformed, it is
ignored; a reader that cannot write it (a read-only store) reads every footer, as before.
It is written under a temporary name and renamed; the temporary file of a process killed in
between is removed by the writer's sweep (``is_leftover``, ``records.sweep``).

May import: pyarrow, psutil, the standard library.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path

import psutil
import pyarrow.parquet as pq

from transforms import bounded_json

FILE = ".footers.json"  # in the store's root: the sweep only looks inside the tables' directories
_TMP = re.compile(re.escape(FILE) + r"\.(\d+)\.tmp")  # Footers.save writes here, then renames
MAX_BYTES = 64 << 20  # ~150 bytes an entry: far more files than a store of years holds
Footer = tuple[int, str, str]  # rows, columns key, content (the rows' one dump_id; "" when none or several)
_in_process: dict[tuple, Footer] = {}  # identity -> footer, every store read here
_loaded: dict[str, tuple[tuple, dict]] = {}  # footers file -> (its identity, what it held): parsed once per write


def is_leftover(path: Path) -> bool:
    """A footers file a process was writing when it was killed (``Footers.save``'s temporary
    name, its pid gone): ``records.sweep`` removes it. A live process's is not one."""
    match = _TMP.fullmatch(path.name)
    return bool(match) and not path.is_symlink() and path.is_file() and not psutil.pid_exists(int(match.group(1)))


def columns_key(schema) -> str:
    """A short hash of an Arrow schema's column names and types, in order."""
    text = "\n".join(f"{field.name}\t{field.type}" for field in schema)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def identity(path: Path, st: os.stat_result) -> tuple:
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Footers:
    """The footers of the store at ``root``: ``read(path, st)`` -> ``Footer`` (rows, columns key,
    content), from memory when the file's identity is known, else from the file (raising what
    pyarrow and the OS raise); ``save()`` writes those of the files read since loading."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.used: dict[tuple, Footer] = {}
        self.saved = self._load()

    def read(self, path: Path, st: os.stat_result) -> Footer:
        key = identity(path, st)
        found = self.saved.get(key) or _in_process.get(key)
        if found is None:
            meta = pq.read_metadata(path)
            found = (meta.num_rows, columns_key(meta.schema.to_arrow_schema()), _content(path, meta))
        _in_process[key] = self.used[key] = found
        return found

    def save(self) -> None:
        """Remember the footers read or used since loading, in place of what the file held
        (the store files no listing names any more drop out). Best effort: a store this
        process cannot write stays as it was."""
        if self.used == self.saved:
            return
        entries = [[*key, *value] for key, value in sorted(self.used.items())]
        target = self.root / FILE
        tmp = target.with_name(f"{FILE}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(entries, separators=(",", ":")), encoding="utf-8")
            os.replace(tmp, target)
            _loaded[str(target)] = (identity(target, target.stat()), dict(self.used))
        except OSError:
            tmp.unlink(missing_ok=True)
        self.saved = dict(self.used)

    def _load(self) -> dict[tuple, Footer]:
        path = self.root / FILE
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return {}
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
                return {}
            seen = identity(path, st)
            cached = _loaded.get(str(path))
            if cached is not None and cached[0] == seen:  # this process parsed this very write
                return dict(cached[1])
            with os.fdopen(fd, "rb", closefd=False) as f:
                entries = bounded_json.loads(f.read(MAX_BYTES + 1), 2)  # a list of lists of numbers and strings
        except (OSError, ValueError):
            return {}
        finally:
            os.close(fd)
        out: dict[tuple, Footer] = {}
        for e in entries if isinstance(entries, list) else ():
            if (isinstance(e, list) and len(e) == 9 and isinstance(e[0], str) and isinstance(e[7], str)
                    and isinstance(e[8], str) and all(type(v) is int for v in e[1:7])):
                out[tuple(e[:6])] = (e[6], e[7], e[8])
        _loaded[str(path)] = (seen, out)
        return dict(out)


def _content(path: Path, meta) -> str:
    """The one ``dump_id`` of the file's rows ("" when it has none, or several): from the column
    statistics of each row group, else from the column itself."""
    names = meta.schema.names
    if "dump_id" not in names or meta.num_rows == 0:
        return ""
    column = names.index("dump_id")
    seen: set[str] = set()
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            seen = set(pq.read_table(path, columns=["dump_id"]).column(0).unique().to_pylist())
            break
        seen |= {stats.min, stats.max}
    return next(iter(seen)) if len(seen) == 1 and isinstance(next(iter(seen)), str) else ""
