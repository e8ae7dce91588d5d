"""A cut XLA side file told by what the other files of its compile state.

XLA writes the files of one compile next to each other (``--xla_dump_to``), named
``<prefix>-buffer-assignment.txt`` (the allocation listing), ``-buffer-assignment-values.txt``
(XLA:CPU since jaxlib 0.5: ``Total bytes used`` and ``Used values``), ``-live-range.txt``
and ``-memory-usage-report.txt``, where ``<prefix>`` is
``module_NNNN.<name>.<platform>_after_optimizations``. Older XLA writes the listing,
total and used values in one file. The allocation listing states no count and no total,
so a listing cut between two allocations after those its output needs (XLA:CPU lists the
thread-local and temp allocations last) reads whole by itself; so do used values cut after
a computation whose users are all listed, and a newer report cut within the rounding of the
sizes it prints. What the other files state tells them (xla/service/buffer_assignment.cc:
``ValuesToString``, ``GetMemoryUsageReportProto``):

- the values file's ``Total bytes used`` and the report's ``Total bytes`` (one per memory
  space) add up every allocation's size: the listing's ``memory.total_bytes`` must equal
  them;
- the used values are the values the listing assigns, each once: ``memory.used_values``
  equals the listing's ``memory.values``;
- the report lists each memory space's allocations largest first, every one up to the
  51st at least (then it stops once the rest is under 5% of the space): its
  ``memory.report_allocations`` is at least ``min(allocations, 51)`` and at most
  ``allocations``; when it lists them all and hides no slot ("The rest N values ..."),
  its ``memory.report_values`` equals the listing's ``memory.values``.

Input (``short_dumps``): ``SiblingDump`` items, the staged summaries of a run's dumps (any
number of compiles: they are grouped here by directory and prefix). Only dumps that parsed
``ok`` are judged, and only those are evidence; a listing's counts are evidence only once
its total agrees with a stated one, or it states its own (the combined file): else it may be
the cut one. A cut only loses lines, so of two files that disagree the one that holds fewer
bytes, values or allocations is told cut; but a listing holding more bytes than its values
file states is of another compile (that total is the values file's first line), and a
report whose spaces' totals fall short of the listing may have lost a space or be another
compile's. A file that is not there is no evidence: a job may dump only some of them. Live ranges and HLO text are not
compared (their own parsers tell their cuts: ``max N`` entries, the peak, ENTRY).

Output: path -> the error that makes that dump ``partial`` (``downgraded`` applies it to a
staged summary): the figure it read, what the sibling (named by its file name) states, and
whether it falls short (a cut) or does not match (files of different compiles). Pure: no
I/O; the callers (``flows.warehouse.siblings``) bring the summaries.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Iterable, Mapping

from transforms.reading import strip_gz
from transforms.records import DumpKind

# The file names of one compile's side files; the prefix names the compile.
_SIDE_FILE = re.compile(r"^(?P<prefix>.+)-(?:buffer-assignment(?:-values)?|memory-usage-report|live-range)\.txt$")
KINDS = frozenset({DumpKind.XLA_BUFFER_ASSIGNMENT.value, DumpKind.XLA_MEMORY_USAGE_REPORT.value})
# The metrics read here (a caller that loads figures from the warehouse needs only these).
METRICS = ("memory.total_bytes", "memory.allocations", "memory.values", "memory.used_values",
           "memory.report_total_bytes", "memory.report_allocations", "memory.report_values",
           "memory.report_hidden_slots")
# XLA lists at least this many allocations of each memory space, largest first: in jaxlib 0.10's
# layout it stops only once it listed more than more_than_k = 50 (checked after each block: the
# 51st is always listed; deep_grad's report lists 51 of 132); the older layout names every one
# (jaxlib 0.7.2: 228 of 228, after a summary of 50).
REPORT_LISTS_AT_LEAST = 51


@dataclass(frozen=True, slots=True)
class SiblingDump:
    """What the check needs of one staged dump: its path (escaped, as stored), kind, stage,
    parse status and metrics."""

    path: str
    kind: str
    stage: str | None
    status: str
    metrics: Mapping[str, float] = field(default_factory=dict)


def compile_of(path: str) -> tuple[str, str] | None:
    """(directory, prefix) of an XLA side file's compile, or None for any other name."""
    where = PurePosixPath(path)
    m = _SIDE_FILE.match(strip_gz(where.name))
    return (str(where.parent), m["prefix"]) if m else None


def compiles(dumps: Iterable[SiblingDump]) -> list[list[SiblingDump]]:
    """The XLA side files among ``dumps``, by compile: only compiles of two files or more."""
    groups: dict[tuple[str, str], list[SiblingDump]] = defaultdict(list)
    for d in dumps:
        if d.kind in KINDS and (key := compile_of(d.path)) is not None:
            groups[key].append(d)
    return [group for _, group in sorted(groups.items()) if len(group) > 1]


def short_dumps(dumps: Iterable[SiblingDump]) -> dict[str, str]:
    """Path -> why, for each ``ok`` dump whose figures do not match what an ``ok`` file of
    its compile states. Each error starts with the dump's path, as every dump error does."""
    out: dict[str, str] = {}
    for group in compiles(dumps):
        out.update(_check_compile(group))
    return out


def downgraded(summary: Mapping, reason: str) -> dict:
    """A copy of a staged summary (``flows.ingest.staging``), ``partial`` with ``reason`` added."""
    return {**summary, "status": "partial", "errors": [*summary.get("errors", []), reason]}


def _role(d: SiblingDump) -> str | None:
    if d.kind == DumpKind.XLA_MEMORY_USAGE_REPORT:
        return "report" if "memory.report_total_bytes" in d.metrics else None
    if d.stage == "buffer_assignment" and "memory.allocations" in d.metrics:
        return "listing"
    if d.stage == "values" and "memory.total_bytes" in d.metrics:
        return "values"
    return None  # live ranges, or a file that read none of its figures


def _check_compile(group: list[SiblingDump]) -> dict[str, str]:
    by_role: dict[str, list[SiblingDump]] = defaultdict(list)
    for d in group:
        if d.status == "ok" and (role := _role(d)) is not None:
            by_role[role].append(d)
    # Stated totals: the values file's first (its "Total bytes used" is the allocations' sum), then the report's.
    stated = [(d, int(d.metrics["memory.total_bytes"]), "values file") for d in by_role["values"]] + \
             [(d, int(d.metrics["memory.report_total_bytes"]), "memory usage report") for d in by_role["report"]]
    out: dict[str, str] = {}
    for listing in by_role["listing"]:
        read = int(listing.metrics["memory.total_bytes"])
        whose = f"its allocation listing ({_name(listing)})"
        # A cut only loses allocations (or a report's spaces): the file that holds fewer bytes is the short one.
        more = next(((d, total, what) for d, total, what in stated if total > read), None)
        if more is not None:
            d, total, what = more
            out[listing.path] = _error(listing, f"its allocations add up to {read:,} of the {total:,} bytes its "
                                                f"{what} ({_name(d)}) states: cut")
            continue
        short_reports = {d.path: total for d, total, _ in stated if d in by_role["report"] and total < read}
        for path, total in short_reports.items():
            out[path] = _error_at(path, f"its memory spaces' Total bytes add up to {total:,} of the {read:,} "
                                        f"bytes {whose} holds: a memory space is cut off, or the files are not "
                                        "of one compile")
        fewer = next(((d, total) for d, total, _ in stated if total < read and d in by_role["values"]), None)
        if fewer is not None:  # the values file states its total first: it is never cut short of it
            d, total = fewer
            out[listing.path] = _error(listing, f"its allocations add up to {read:,} bytes, but its values file "
                                                f"({_name(d)}) states {total:,}: the files are not of one compile")
        elif stated or "memory.used_values" in listing.metrics:  # a combined file states its own total
            reports = [d for d in by_role["report"] if d.path not in short_reports]
            out.update(_against_listing(listing, by_role["values"], reports))
    return out


def _against_listing(listing: SiblingDump, values_files: list[SiblingDump],
                     reports: list[SiblingDump]) -> dict[str, str]:
    """A listing whose allocations add up to the stated total has them all; it may still end
    inside the values of its last one. Values counts that differ: the file that lists fewer
    was cut (no cut adds a value). Then the report's allocations against the listing's."""
    allocations, values = int(listing.metrics["memory.allocations"]), int(listing.metrics["memory.values"])
    counts = [(d, int(d.metrics.get("memory.used_values", 0)), "used values its values file") for d in values_files]
    counts += [(d, int(d.metrics.get("memory.report_values", 0)), "values its memory usage report") for d in reports
               if int(d.metrics.get("memory.report_allocations", 0)) == allocations  # every allocation, every slot
               and not d.metrics.get("memory.report_hidden_slots")]
    if (more := next(((d, n, what) for d, n, what in counts if n > values), None)) is not None:
        d, n, what = more
        return {listing.path: _error(listing, f"its allocations hold {values:,} values, of the {n:,} {what} "
                                              f"({_name(d)}) lists: cut")}
    out: dict[str, str] = {}
    whose = f"its allocation listing ({_name(listing)})"
    for d, n, _ in counts:
        if n < values:
            what = (f"it lists {n:,} used values" if d.kind == DumpKind.XLA_BUFFER_ASSIGNMENT
                    else f"its {allocations:,} allocations hold {n:,} values")
            out[d.path] = _error(d, f"{what}, of the {values:,} {whose} assigns: cut")
    for d in reports:
        listed = int(d.metrics.get("memory.report_allocations", 0))
        at_least = min(allocations, REPORT_LISTS_AT_LEAST)
        if listed > allocations:
            out[d.path] = _error(d, f"it lists {listed:,} allocations, but {whose} has {allocations:,}: the files are "
                                    "not of one compile")
        elif listed < at_least:
            out[d.path] = _error(d, f"it lists {listed:,} allocations, of the {allocations:,} {whose} has (XLA lists "
                                    f"at least the {at_least:,} largest): cut")
    return out


def _name(d: SiblingDump) -> str:
    return PurePosixPath(d.path).name


def _error(d: SiblingDump, msg: str) -> str:
    return _error_at(d.path, msg)


def _error_at(path: str, msg: str) -> str:
    return f"{path}: {msg}"
