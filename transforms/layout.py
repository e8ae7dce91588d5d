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

Names (``escape_name``): a relative path is the warehouse key and is shown on the site,
so it is always valid UTF-8. A file name that is not (Python hands its undecodable
bytes over as lone surrogates U+DC80..U+DCFF, "surrogateescape") has each such byte
written ``\\xNN`` (two lower-case hex digits: what ``bytes.decode(errors="backslashreplace")``
writes), any other lone surrogate ``\\uDNNN``; valid names are unchanged. ``unescape_name``
reverses it. The one ambiguity: a valid name that already holds the text ``\\x80`` ..
``\\xff`` (a backslash, then ``x`` and two such hex digits) reads back as that byte, and
collides with the name that really has it (likewise ``\\ud800`` .. ``\\udfff``). Layout regexes, run ids and jobs see the
escaped path; ``BucketObject.full_path`` keeps the name the filesystem needs.

Refused names (``refused_name``): a run id or job name that is empty, ``.`` or ``..``,
starts or ends with white space, or holds a control character is no name a compiler
wrote (``..`` from an S3 key, ``2026-11-20 `` beside ``2026-11-20``): such an object
never becomes a run or a job; the caller reports it (``shown_name`` makes it readable).
So is any path with an empty, ``.`` or ``..`` component below the job: a filesystem
cannot hold one, and an object store's key of that form names nothing a dump could be.

Run time: ``started_at`` of run.json, else an ISO date (``YYYY-MM-DD``, optionally
followed by a time) in the run id, else the earliest modification time among the
run's objects, else the time of the listing (``now``). Each source counts only inside
``EARLIEST_RUN`` .. now + ``FUTURE_SLACK``. Times are timezone-aware, in UTC (UTC is
assumed when the source gives no zone).

run.json (``parse_run_json``, then ``validate_run_meta``): at most ``RUN_JSON_MAX_BYTES``
and ``RUN_JSON_READ_DEPTH`` levels of brackets (counted before it is decoded), a JSON object. Its known fields are checked against ``RUN_JSON_FIELDS`` (the declared
schema, pydantic types); every other field is kept in ``extra`` when it is JSON (no
NaN or Infinity), valid Unicode, at most ``RUN_JSON_MAX_DEPTH`` levels deep, and the free
fields together stay under ``EXTRA_MAX_BYTES``. A field that fails is left out whole, a
``null`` known field counts as absent, and each problem becomes one entry of
``RunInfo.meta_errors`` naming the file: bad metadata never raises.

Settling (``settled``): an object is ready when the same (size, mtime) was seen at
two observations at least ``settle_seconds`` apart, or at once when its run has a
completion marker; ``settle_seconds <= 0`` makes everything ready at once.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import AfterValidator, Field, Strict, StringConstraints, TypeAdapter, ValidationError, ValidationInfo

from transforms import bounded_json

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
    """One listed object. ``path`` is relative to the bucket, valid UTF-8 (``escape_name``):
    the warehouse key; ``full_path`` is what the fs opens (it may hold lone surrogates).

    ``version`` is what the store says of this write of the object: the ETag (else the
    version id) on object stores, the modification time in nanoseconds on a local disk.
    A rewrite in place changes it, even at the same size ("" when the store says nothing).

    ``root`` is the bucket root as the fs spells it, ``full_path`` being ``root`` + ``/`` +
    the real relative name: a local open follows no link below it ("": the root is not
    known, only the file itself is checked).
    """

    path: str
    full_path: str
    size: int
    mtime: float
    run_id: str
    job: str | None
    role: Role = Role.DUMP
    version: str = ""
    root: str = ""


@dataclass(frozen=True, slots=True)
class RunInfo:
    run_id: str
    started_at: datetime  # timezone-aware, UTC
    time_source: str  # "run.json", "run_id", "mtime" or "now"
    commit: str | None = None
    tags: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    # What was wrong with run.json (unreadable, not JSON, a field of the wrong type...),
    # each entry naming the file; the valid fields were kept, these were not.
    meta_errors: tuple[str, ...] = ()


_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_BYTE = re.compile(r"\\x([89a-f][0-9a-f])|\\u(d[89a-f][0-9a-f]{2})")


def escape_name(name: str) -> str:
    """``name`` as valid UTF-8 text (the rule is in the module docstring)."""
    return _SURROGATE.sub(_escape_one, name)


def _escape_one(m: re.Match[str]) -> str:
    c = ord(m[0])
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"


def unescape_name(path: str) -> str:
    """The name ``escape_name`` was given (``os.fsencode`` of it: the raw bytes on POSIX)."""
    return _ESCAPED_BYTE.sub(lambda m: chr(0xDC00 + int(m[1], 16)) if m[1] else chr(int(m[2], 16)), path)


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def refused_name(name: str, what: str = "name") -> str | None:
    """Why ``name`` (a run id, a job; ``what`` says which) cannot be one, or None when it can."""
    if name in ("", ".", ".."):
        return f"{what} {shown_name(name)} names no directory"
    if name != name.strip():
        return f"{what} {shown_name(name)} starts or ends with white space"
    if _CONTROL.search(name):
        return f"{what} {shown_name(name)} holds a control character"
    return None


def refused_path(path: str, where: Located) -> str | None:
    """Why the object at ``path`` (relative to the bucket, as ``locate`` was given it) is
    refused although ``locate`` placed it at ``where``, or None."""
    why = refused_name(where.run_id, "run id")
    if why is None and where.job is not None:
        why = refused_name(where.job, "job name")
    if why is None and any(part in ("", ".", "..") for part in path.split("/")):
        why = "an empty, '.' or '..' component in the path"
    return why


def shown_name(name: str) -> str:
    """``name`` quoted, with its control characters as ``\\xNN`` and bytes that are not UTF-8 as
    ``escape_name`` writes them: white space at its ends stays visible, nothing reaches a terminal raw."""
    return "'" + _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", escape_name(name)) + "'"


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


# The window a run's time must fall in. Before 2000 no ML compiler wrote these dumps:
# an earlier time is a bug upstream (an epoch-0 default, seconds read as milliseconds).
# A run that already wrote dumps cannot start tomorrow: a day covers clock skew and a
# local time written without its zone (up to UTC+14). Outside it, one bad run.json
# (year 9999) would sort first forever and overflow every later date computation.
EARLIEST_RUN = datetime(2000, 1, 1, tzinfo=timezone.utc)
FUTURE_SLACK = timedelta(days=1)

RUN_JSON_MAX_BYTES = 1 << 20  # a larger run.json is not read
RUN_JSON_MAX_DEPTH = 32  # nesting levels of a free field (a list or object is one level)
RUN_JSON_READ_DEPTH = 256  # nesting levels a run.json is read at all (transforms.bounded_json)
EXTRA_MAX_BYTES = 64 << 10  # the free fields together, as compact JSON in UTF-8
COMMIT_MAX_CHARS = 256
TAGS_MAX = 64
TAG_MAX_CHARS = 128


def in_run_window(t: datetime, now: datetime) -> bool:
    """Whether ``t`` (timezone-aware) is a believable run time: EARLIEST_RUN .. now + FUTURE_SLACK."""
    try:
        return EARLIEST_RUN <= t <= now + FUTURE_SLACK
    except OverflowError:  # an offset pushing datetime.min/max out of range
        return False


def _iso_time(value: str, info: ValidationInfo) -> datetime:
    t = datetime.fromisoformat(value)  # ValueError (bad text, 2026-02-30) becomes the field's error
    t = t if t.tzinfo else t.replace(tzinfo=timezone.utc)
    if not in_run_window(t, info.context["now"]):
        raise ValueError(f"{value} is outside {EARLIEST_RUN:%Y-%m-%d} .. now + {FUTURE_SLACK.days} day")
    return t.astimezone(timezone.utc)


def _text(max_chars: int) -> Any:
    return Annotated[str, Strict(), StringConstraints(min_length=1, max_length=max_chars)]


@dataclass(frozen=True, slots=True)
class MetaField:
    expected: str  # in words, for people
    adapter: TypeAdapter


# The declared schema of run.json's known fields. Strings must be valid Unicode (a lone
# surrogate, as "\\ud800" in JSON, cannot be stored), null means absent.
RUN_JSON_FIELDS: dict[str, MetaField] = {
    "started_at": MetaField(
        f"an ISO 8601 time (UTC when it has no zone), {EARLIEST_RUN:%Y-%m-%d} .. now + {FUTURE_SLACK.days} day",
        TypeAdapter(Annotated[str, Strict(), StringConstraints(max_length=64), AfterValidator(_iso_time)])),
    "commit": MetaField(f"a string of 1..{COMMIT_MAX_CHARS} characters", TypeAdapter(_text(COMMIT_MAX_CHARS))),
    "tags": MetaField(
        f"a list of at most {TAGS_MAX} strings of 1..{TAG_MAX_CHARS} characters",
        TypeAdapter(Annotated[list[_text(TAG_MAX_CHARS)], Strict(), Field(max_length=TAGS_MAX)])),
}

_EXPECTED = {"string_type": "a string", "list_type": "a list"}  # inside a field (tags[1])


def _kind(value: Any) -> str:
    """A JSON value's type, in words."""
    if value is None:
        return "null"
    for types, word in (((bool,), "a boolean"), ((int, float), "a number"), ((str,), "a string"),
                        ((list, tuple), "a list"), ((dict,), "an object")):
        if isinstance(value, types):
            return word
    return type(value).__name__


def _problem(name: str, err: Mapping[str, Any]) -> str:
    """One pydantic error of the known field ``name``, in words."""
    where = name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
    if err["type"] == "string_unicode":
        return f"{where} is not valid Unicode (a lone surrogate)"
    if err["type"] in _EXPECTED:
        expected = _EXPECTED[err["type"]] if err["loc"] else RUN_JSON_FIELDS[name].expected
        return f"{where} is {_kind(err['input'])}, not {expected}"
    if err["type"] == "value_error":
        return f"{where}: {err['ctx']['error']}"
    return f"{where}: {err['msg']}"


def parse_run_json(raw: bytes, where: str) -> tuple[dict[str, Any] | None, list[str]]:
    """run.json's bytes as a dict, or None and why not (each error starts with ``where``)."""
    if len(raw) > RUN_JSON_MAX_BYTES:
        return None, [f"{where}: larger than {RUN_JSON_MAX_BYTES} bytes, not read"]
    try:
        meta = bounded_json.loads(raw, RUN_JSON_READ_DEPTH)
    except bounded_json.TooDeep as exc:
        return None, [f"{where}: {exc}"]
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int of over 4300 digits
        return None, [f"{where}: not JSON: {exc}"]
    if not isinstance(meta, dict):
        return None, [f"{where}: the top level is {_kind(meta)}, not an object"]
    return meta, []


def validate_run_meta(meta: Mapping[str, Any], where: str, *, now: datetime) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(known fields, free fields, errors) of a decoded run.json: what passed and why the rest did not."""
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    errors: list[str] = []
    extra_bytes = 0
    for key, value in meta.items():
        shown = escape_name(str(key))
        name = shown if len(shown) <= 80 else shown[:79] + "…"
        if key in RUN_JSON_FIELDS:
            if value is None:
                continue
            try:
                known[key] = RUN_JSON_FIELDS[key].adapter.validate_python(value, context={"now": now})
            except ValidationError as exc:
                errors += [f"{where}: {_problem(name, e)}" for e in exc.errors()]
            continue
        problem, size = _free_field_problem(value)
        if problem is None and extra_bytes + size > EXTRA_MAX_BYTES:
            problem = f"over the {EXTRA_MAX_BYTES >> 10} KiB the free fields may take together"
        if problem is not None or shown != key:
            errors.append(f"{where}: {name}: {problem or 'the name is not valid Unicode (a lone surrogate)'}, left out")
            continue
        extra[key] = value
        extra_bytes += size
    return known, extra, [escape_name(e) for e in errors]


def _free_field_problem(value: Any) -> tuple[str | None, int]:
    """(why a free field cannot be stored, or None; its size as compact JSON in UTF-8)."""
    stack = [(value, 1)]
    while stack:  # depth first, without recursion: the depth is what is being checked
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > RUN_JSON_MAX_DEPTH:
                return f"nested deeper than {RUN_JSON_MAX_DEPTH} levels", 0
            stack.extend((c, depth + 1) for c in (v.values() if isinstance(v, dict) else v))
    try:
        return None, len(json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    except UnicodeEncodeError:
        return "not valid Unicode (a lone surrogate)", 0
    except ValueError:  # allow_nan=False
        return "holds NaN or Infinity, which JSON has no form for", 0
    except TypeError as exc:  # not decoded from JSON (a caller's own dict)
        return f"not JSON ({exc})", 0


def run_info(
    run_id: str,
    meta: Mapping[str, Any] | None,
    mtimes: Iterable[float],
    *,
    meta_errors: Iterable[str] = (),
    meta_path: str | None = None,
    now: datetime | None = None,
) -> RunInfo:
    """The run's time and metadata from its run.json (already decoded, or None) and object mtimes.

    ``meta_errors`` passes on why run.json could not be read; bad fields in ``meta`` add
    their own, naming ``meta_path`` (default ``<run_id>/run.json``). ``now`` (default: the
    clock) bounds the believable times. Never raises for bad metadata: a field that fails
    is left out, and the time falls back to the next source.
    """
    now = now or datetime.now(timezone.utc)
    known, extra, errors = validate_run_meta(meta or {}, meta_path or f"{run_id}/{RUN_META}", now=now)
    common = dict(commit=known.get("commit"), tags=tuple(known.get("tags", ())), extra=extra,
                  meta_errors=(*meta_errors, *errors))
    if "started_at" in known:
        return RunInfo(run_id, known["started_at"], "run.json", **common)
    if (from_id := date_from_run_id(run_id)) is not None and in_run_window(from_id, now):
        return RunInfo(run_id, from_id, "run_id", **common)
    lo, hi = EARLIEST_RUN.timestamp(), (now + FUTURE_SLACK).timestamp()
    if times := [t for t in mtimes if lo <= t <= hi]:
        return RunInfo(run_id, datetime.fromtimestamp(min(times), tz=timezone.utc), "mtime", **common)
    return RunInfo(run_id, now.astimezone(timezone.utc), "now", **common)


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
