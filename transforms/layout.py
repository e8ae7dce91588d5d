"""Where a bucket object belongs, when its run happened, and whether it is settled.

Pure: paths, listings and JSON already read in; nothing here touches a bucket.

Layout convention (paths relative to the bucket, POSIX separators)::

    <run_id>/run.json          optional run metadata: started_at, commit, tags, free fields
    <run_id>/<job>/**          dumps, any depth below the job

Other layouts: a ``layout_regex`` with named groups ``run_id`` (required) and
``job`` (optional; a match where it did not take part is a run-level file), matched
in full against the relative path; an optional ``rel`` group names the part below
the job (default: the whole path). A run-level ``run.json`` is the run's metadata;
a file whose base name is the configured completion marker (``_SUCCESS``, say) marks
its run complete; every other matched file is a dump candidate. Paths that do not
match (files at the bucket root, for instance) are ignored.

Run time: ``started_at`` of run.json, else an ISO date (``YYYY-MM-DD``, optionally
followed by a time) in the run id, else the earliest modification time among the
run's objects. Times are timezone-aware (UTC when the source gives no zone).

Settling (``settled``): an object is ready when the same (size, mtime) was seen at
two observations at least ``settle_seconds`` apart, or at once when its run has a
completion marker; ``settle_seconds <= 0`` makes everything ready at once.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import PurePosixPath
from typing import Any

RUN_META = "run.json"


class Role(enum.StrEnum):
    DUMP = "dump"
    RUN_META = "run_meta"
    MARKER = "marker"


@dataclass(frozen=True, slots=True)
class Located:
    run_id: str
    job: str | None  # None: a run-level file (run.json, a marker, a stray file)
    rel: str  # below the job (below the run for run-level files)
    role: Role


@dataclass(frozen=True, slots=True)
class BucketObject:
    """One listed object. ``path`` is relative to the bucket; ``full_path`` is what the fs opens."""

    path: str
    full_path: str
    size: int
    mtime: float
    run_id: str
    job: str | None
    role: Role = Role.DUMP


@dataclass(frozen=True, slots=True)
class RunInfo:
    run_id: str
    started_at: datetime
    time_source: str  # "run.json", "run_id" or "mtime"
    commit: str | None = None
    tags: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    meta_error: str | None = None  # run.json present but unusable (bad JSON, bad started_at)


def locate(path: str, layout_regex: str | re.Pattern[str] | None = None, *, marker: str | None = None) -> Located | None:
    """Where ``path`` (relative to the bucket) belongs, or None when it fits no run."""
    path = path.strip("/")
    if layout_regex is None:
        parts = path.split("/")
        if len(parts) < 2 or not all(parts):
            return None
        run_id, job, rel = (parts[0], None, parts[1]) if len(parts) == 2 else (parts[0], parts[1], "/".join(parts[2:]))
    else:
        m = re.fullmatch(layout_regex, path)
        if m is None or not m.groupdict().get("run_id"):
            return None
        groups = m.groupdict()
        run_id, job = groups["run_id"], groups.get("job") or None
        rel = groups.get("rel") or path
    base = PurePosixPath(path).name
    if marker is not None and base == marker:
        role = Role.MARKER
    elif job is None and base == RUN_META:
        role = Role.RUN_META
    else:
        role = Role.DUMP
    return Located(run_id, job, rel, role)


# A date, then optionally a time (T, _, - or space between; ':' or '-' inside the time).
_ISO_IN_ID = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?:[T_ -](\d{2})[:-]?(\d{2})(?:[:-]?(\d{2}))?)?(?!\d)")


def date_from_run_id(run_id: str) -> datetime | None:
    """The first valid ISO date (and time) in ``run_id``, in UTC; None when there is none."""
    for m in _ISO_IN_ID.finditer(run_id):
        y, mo, d, h, mi, s = (int(g) if g else 0 for g in m.groups())
        try:
            return datetime(y, mo, d, h, mi, s, tzinfo=timezone.utc)
        except ValueError:
            continue
    return None


def _parse_started_at(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"started_at is {type(value).__name__}, not an ISO string")
    t = datetime.fromisoformat(value)
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def run_info(run_id: str, meta: Mapping[str, Any] | None, mtimes: Iterable[float], *, meta_error: str | None = None) -> RunInfo:
    """The run's time and metadata from its run.json (already decoded, or None) and object mtimes.

    ``meta_error`` passes on why run.json could not be read; bad fields in ``meta``
    add their own. Never raises for bad metadata: the time falls back to the next source.
    """
    meta = dict(meta or {})
    started = None
    if "started_at" in meta:
        try:
            started = _parse_started_at(meta["started_at"])
        except ValueError as exc:
            meta_error = meta_error or f"{run_id}/{RUN_META}: bad started_at: {exc}"
    commit = meta.get("commit")
    tags = meta.get("tags") or ()
    extra = {k: v for k, v in meta.items() if k not in ("started_at", "commit", "tags")}
    common = dict(
        commit=str(commit) if commit is not None else None,
        tags=tuple(str(t) for t in tags) if isinstance(tags, (list, tuple)) else (str(tags),),
        extra=extra,
        meta_error=meta_error,
    )
    if started is not None:
        return RunInfo(run_id, started, "run.json", **common)
    if (from_id := date_from_run_id(run_id)) is not None:
        return RunInfo(run_id, from_id, "run_id", **common)
    times = list(mtimes)
    earliest = datetime.fromtimestamp(min(times), tz=timezone.utc) if times else datetime.fromtimestamp(0, tz=timezone.utc)
    return RunInfo(run_id, earliest, "mtime", **common)


SettleState = dict[str, tuple[int, float, float]]  # path -> (size, mtime, first seen with these)


def settled(
    prev: Mapping[str, tuple[int, float, float]],
    now_listing: Iterable[BucketObject],
    now: float,
    settle_seconds: float,
    *,
    trust_mtime: bool = False,
) -> tuple[list[BucketObject], list[BucketObject], SettleState]:
    """Split a listing into (ready, deferred) and return the state to keep for the next call.

    Markers and run metadata are not returned; a run that lists a marker object has
    all its objects ready. ``trust_mtime`` also takes, at first sight, an object whose
    own mtime is at least ``settle_seconds`` old (a bucket that is not being written).
    The new state holds every listed path (vanished paths drop out).
    """
    listing = list(now_listing)
    complete_runs = {o.run_id for o in listing if o.role is Role.MARKER}
    state: SettleState = {}
    ready: list[BucketObject] = []
    deferred: list[BucketObject] = []
    for obj in listing:
        old = prev.get(obj.path)
        same = old is not None and (old[0], old[1]) == (obj.size, obj.mtime)
        first_seen = old[2] if same else now  # type: ignore[index]
        state[obj.path] = (obj.size, obj.mtime, first_seen)
        if obj.role is not Role.DUMP:
            continue
        if (
            settle_seconds <= 0
            or obj.run_id in complete_runs
            or (same and now - first_seen >= settle_seconds)
            or (trust_mtime and now - obj.mtime >= settle_seconds)
        ):
            ready.append(obj)
        else:
            deferred.append(obj)
    return ready, deferred, state
