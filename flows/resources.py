"""The memory budget of a night: one setting, shared between DuckDB and the Python side.

``--memory-limit`` (or ``memory_limit`` in the settings file) is the most the whole
process tree of a night may hold. The stages of a night do not overlap in time — the
parse workers are gone before the writer opens the warehouse — so the budget is split
per stage, not summed:

- DuckDB gets ``DUCKDB_SHARE`` of it as its ``memory_limit`` while the Python side
  holds large frames (the aggregation, the site's reader) and ``WRITING_SHARE`` while the
  writer only moves rows (catching up, compacting, loading, checkpointing): a checkpoint
  that rewrites row groups with ``DUCKDB_SHARE`` spills them to the temp directory (on a
  year of big nights 4x the bytes it writes to the warehouse). Beyond its limit DuckDB
  spills to its temp directory;
- a re-aggregation of many runs goes a window of runs at a time, each of at most
  ``pass_figures`` figures;
- the structural items of new content are computed in batches of at most
  ``items_batch_rows`` records rows, ``items_workers`` at a time: a lower budget makes
  more, smaller batches (slower, same items), never a larger frame.

``None`` (no setting): DuckDB's own default (80 % of RAM) and batches sized for 2 GiB.
A night given no limit takes ``machine_limit()``: ``MACHINE_SHARE`` of the memory the
machine can give it now, the smaller of ``MemAvailable`` (/proc/meminfo) and the cgroup v2
``memory.max`` of its own cgroup and its ancestors (containers and CI runners have one;
v1's ``memory.limit_in_bytes`` on older hosts); never below the 256 MiB a night needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ByteSize, TypeAdapter

DUCKDB_SHARE = 0.15
WRITING_SHARE = 0.5
MIN_DUCKDB_BYTES = 128 << 20
DEFAULT_BUDGET = 2 << 30
MIN_LIMIT = 256 << 20
# A night with no limit set takes this share of what the machine can give it: the rest
# is headroom for what is not counted (Prefect's server, the interpreter, page cache).
MACHINE_SHARE = 0.5
# Records rows of one items batch per GiB of budget: an HLO instruction row with its
# item rows takes ~1.5 KiB in polars at the peak of the fusion digests (measured on
# the llama and mixtral modules), and two batches run at once.
ROWS_PER_GIB = 150_000
# Observations (series, metric, run, value) the incidents walk takes at once per GiB: at
# its peak the walk holds ~200 bytes an observation (+330 MiB for a group of 1.58 M on a
# year of big nights), on top of what the night holds already.
OBSERVATIONS_PER_GIB = 400_000
# Figures one aggregation pass rewrites per GiB (a re-aggregation of many runs goes a
# window of runs at a time): the trends of 1.7 M figures held ~850 MiB and writing their
# rows ~1 GiB more (a year of big nights, 99 runs in one pass).
PASS_FIGURES_PER_GIB = 250_000


def parse_memory(text: str | int | None) -> int | None:
    """``"2GB"``, ``"1.5GiB"``, ``"512MB"`` or a number of bytes -> bytes (None stays None)."""
    if text is None or text == "":
        return None
    try:
        value = int(TypeAdapter(ByteSize).validate_python(text))
    except ValueError:
        raise ValueError(f"memory limit {text!r}: use a size such as 2GB, 1500MiB or a number of bytes") from None
    if value < MIN_LIMIT:
        raise ValueError(f"memory limit {text!r} is below the 256 MiB a night needs at least")
    return value


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    total: int | None = None  # bytes; None: not set

    @property
    def duckdb_bytes(self) -> int | None:
        """DuckDB's limit beside large Python frames (aggregating, reading for the site)."""
        return None if self.total is None else max(MIN_DUCKDB_BYTES, int(self.total * DUCKDB_SHARE))

    @property
    def writing_bytes(self) -> int | None:
        """DuckDB's limit while the writer only moves rows."""
        return None if self.total is None else max(MIN_DUCKDB_BYTES, int(self.total * WRITING_SHARE))

    def duckdb_config(self, *, writing: bool = False) -> dict[str, str]:
        """Connection settings for DuckDB (``duckdb.connect(config=...)``)."""
        limit = self.writing_bytes if writing else self.duckdb_bytes
        return {} if limit is None else {"memory_limit": f"{limit // (1 << 20)}MiB"}

    def set_duckdb_limit(self, con, *, writing: bool) -> None:
        """Move the split on an open connection (a no-op without a limit)."""
        for name, value in self.duckdb_config(writing=writing).items():
            con.execute(f"SET {name} = '{value}'")  # value: a number and MiB, made above

    @property
    def items_workers(self) -> int:
        return 2

    @property
    def incidents_batch_rows(self) -> int:
        """Observations the incidents walk takes at once: it holds a few times their size
        (~65 bytes a row at its peak on a year of big nights)."""
        python_share = (self.total or DEFAULT_BUDGET) * (1 - DUCKDB_SHARE)
        return max(100_000, int(python_share / (1 << 30) * OBSERVATIONS_PER_GIB))

    @property
    def pass_figures(self) -> int:
        """Figures (metric rows) one aggregation pass rewrites at most (a pass takes at least one run)."""
        python_share = (self.total or DEFAULT_BUDGET) * (1 - DUCKDB_SHARE)
        return max(20_000, int(python_share / (1 << 30) * PASS_FIGURES_PER_GIB))

    @property
    def items_batch_rows(self) -> int:
        python_share = (self.total or DEFAULT_BUDGET) * (1 - DUCKDB_SHARE)
        return max(20_000, int(python_share / (1 << 30) * ROWS_PER_GIB / self.items_workers))


def mem_available(meminfo: str) -> int | None:
    """``MemAvailable`` of /proc/meminfo's text, bytes (None when absent)."""
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "MemAvailable":
            fields = rest.split()
            return int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return None


def cgroup_bytes(text: str | None) -> int | None:
    """A cgroup memory limit file's text (``memory.max``, v1's ``memory.limit_in_bytes``)
    -> bytes; None for ``max`` (no limit) or no file."""
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


def cgroup_files(proc_self_cgroup: str, root: Path = Path("/sys/fs/cgroup")) -> list[Path]:
    """The memory limit file of each cgroup of this process, from /proc/self/cgroup's text:
    its own cgroup first, then each ancestor up to ``root`` (a limit anywhere on the way
    holds). cgroup v2 (``0::/path``): ``memory.max``; v1 (``N:memory:/path``, older hosts):
    ``memory.limit_in_bytes``."""
    out: list[Path] = []
    for line in proc_self_cgroup.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            base, limit = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, limit = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        own = base / path.strip().lstrip("/")
        out += [d / limit for d in (own, *own.parents) if d == base or d.is_relative_to(base)]
    return out


def machine_limit(read=lambda path: Path(path).read_text()) -> tuple[int, str]:
    """The memory limit a night takes when none is set, and how it was chosen (for the log
    line): ``MACHINE_SHARE`` of the smaller of MemAvailable and the lowest cgroup memory
    limit on this process's way to the root. ``read``: path -> text."""
    def text(path) -> str | None:
        try:
            return read(path)
        except OSError:
            return None

    room = {"MemAvailable": mem_available(text("/proc/meminfo") or "")}
    for limit_file in cgroup_files(text("/proc/self/cgroup") or ""):
        cap = cgroup_bytes(text(limit_file))
        if cap is not None and (room.get("cgroup") is None or cap < room["cgroup"]):
            room["cgroup"] = cap
    known = {k: v for k, v in room.items() if v is not None}
    if not known:
        return DEFAULT_BUDGET, f"{_gib(DEFAULT_BUDGET)} (the machine's memory is unknown)"
    source = min(known, key=known.__getitem__)
    limit = max(MIN_LIMIT, int(known[source] * MACHINE_SHARE))
    what = "MemAvailable" if source == "MemAvailable" else "the cgroup memory limit"
    return limit, f"{_gib(limit)} ({MACHINE_SHARE:.0%} of {what}, {_gib(known[source])})"


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def night_limit(memory_limit: int | None) -> tuple[int, str]:
    """The limit a night keeps to: the one given, else ``machine_limit()``; and how it was
    chosen, for the log line."""
    if memory_limit is not None:
        return memory_limit, f"{_gib(memory_limit)} (set)"
    return machine_limit()


def peak_mib() -> float:
    """This process's peak RSS so far, MiB (Linux reports ru_maxrss in KiB; it carries
    over an exec, so a process started by a large one starts at that one's peak)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


__all__ = ["MemoryBudget", "cgroup_bytes", "cgroup_files", "machine_limit", "mem_available", "night_limit", "parse_memory",
           "peak_mib"]
