"""Publishing a night's site and warehouse snapshot where readers get them (``run --publish DEST``).

A release is the built site plus, at its root, ``warehouse.duckdb``: a self-contained read-only
snapshot of the published warehouse (``flows.warehouse.snapshot``) that ``dumpscope check
--warehouse URL`` and analysts fetch. Two kinds of destination:

- **A directory** (a path, or ``file://``): ``DEST`` is a symbolic link to the latest release,
  ``DEST.releases/<id>/``, switched with one ``rename`` once the release is whole: a web server
  serving ``DEST`` (nginx ``root``) shows the old site or the new one, never half of each. A
  ``DEST`` that exists and is not such a link, or a ``DEST.releases`` that is not a directory
  of its own (a symbolic link), is refused before any work, never overwritten or entered.

  A publish deletes only what a publish made: a release directory is one when it holds the
  marker written into it before anything else (``MARKER``: its id and DEST's name, so a release
  copied under another name or from another DEST's releases is not one), never by its name or
  its place in a listing. It removes its own kind only inside ``DEST.releases``, never through a
  symbolic link, and keeps the release DEST resolves to when it looks (a publish racing it may
  have switched DEST), the one DEST resolved to when it began (a reader may be in the middle of
  it) and every release newer than that one (a racing publish's, which it may be about to
  switch to). What a killed publish left (its ``.<id>.<pid>.tmp`` copy, marked, or its
  ``.<id>.<pid>.link``) goes once that process is gone. Anything else there is left untouched
  and named in one warning line (``Released.warning``).
- **Any other fsspec URL** (``s3://bucket/prefix``, ``gs://``...): object stores replace one
  object at a time and have no atomic rename of many. Each file is uploaded whole (a reader never
  gets a cut file), in the order of the site's own links (``flows.publish.upload_order``: no page
  a reader can reach from the front page links to an object not there yet, wherever the upload
  stops), then the objects the new site no longer has are deleted. While the new objects of a
  component of pages that link to each other go up, ``PUBLISHING`` at DEST lists them: they may
  lack a link until all are up, so a publish killed then leaves objects the next one does not
  take as whole (it uploads them as new ones). For the seconds of the upload a reader may see
  some pages of the night before.

Nothing here chooses a path from the dumps: the release id is the time of the publish.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import psutil

from flows.publish.upload_order import site_links, upload_order
from flows.warehouse.snapshot import write_snapshot
from transforms import bounded_json
from transforms.escape import plain_text

SNAPSHOT_NAME = "warehouse.duckdb"
MARKER = ".dumpscope-release"  # in each release directory, written first (release_marker)
_RELEASE_ID = r"\d{8}T\d{12}Z"  # _release_id: the time of the publish, UTC, to the microsecond
_AT_WORK = re.compile(rf"\.(?P<id>{_RELEASE_ID})\.(?P<pid>\d+)\.(?P<kind>tmp|link)")  # a publish's copy, its new link
PUBLISHING = ".dumpscope-publishing.json"  # at a store's root: the objects that may lack a link (_Publishing)
_MAX_PUBLISHING_BYTES = 16 << 20
_NAMED_FOREIGN = 10  # the warning names this many entries, then counts the rest


class BadDestination(ValueError):
    """``--publish DEST`` cannot be used; the message says why (one line)."""


@dataclass(frozen=True, slots=True)
class Released:
    dest: str
    files: int  # files of the release (site and snapshot)
    bytes: int
    snapshot: str  # where the snapshot is read from
    warning: str = ""  # one line naming what a directory's releases hold that no publish made


def is_local(dest: str) -> bool:
    return "://" not in dest or dest.startswith("file://")


def local_path(dest: str) -> Path:
    return Path(dest.removeprefix("file://")).absolute()


def releases_dir(dest: Path) -> Path:
    """Where a directory DEST's releases are: ``DEST.releases``, beside it."""
    return dest.with_name(dest.name + ".releases")


def storage_options_for(dest: str, bucket: str, bucket_options: dict) -> dict | None:
    """The storage options a publish to ``dest`` uses: the bucket's when both are on the same kind
    of store (``s3://`` and ``s3://``), else none (the ``AWS_*`` environment, or the store's own)."""
    same_store = "://" in bucket and dest.split("://", 1)[0] == bucket.split("://", 1)[0]
    return bucket_options if same_store else None


def check_destination(dest: str, storage_options: dict | None = None) -> None:
    """Raise ``BadDestination`` when ``dest`` cannot take a release (before any work)."""
    if is_local(dest):
        path = local_path(dest)
        releases = releases_dir(path)
        if not path.parent.is_dir():
            raise BadDestination(f"--publish {dest}: {path.parent} is not a directory")
        if (path.exists() or path.is_symlink()) and not _is_release_link(path):
            raise BadDestination(f"--publish {dest}: {path} exists and is not a link to a release made by "
                                 f"--publish ({path.name}.releases/...); give a new path, it becomes that link")
        if releases.is_symlink() or (releases.exists() and not releases.is_dir()):
            what = "a symbolic link" if releases.is_symlink() else "not a directory"
            raise BadDestination(f"--publish {dest}: {releases} is {what}; releases are written into a "
                                 f"directory of their own there: move it away, or give another path")
        return
    import fsspec

    protocol = dest.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError) as exc:
        raise BadDestination(f"--publish {dest}: no filesystem for {protocol}:// ({exc})") from None


def release(site_dir: Path, warehouse: Path, dest: str, storage_options: dict | None = None,
            site_url: str | None = None) -> Released:
    """Publish the site in ``site_dir`` and a snapshot of ``warehouse`` to ``dest``; the snapshot
    carries ``site_url`` (``[site] url``), for ``check`` to link to the pages."""
    check_destination(dest, storage_options)
    if is_local(dest):
        return _release_to_directory(site_dir, warehouse, local_path(dest), site_url)
    return _release_to_store(site_dir, warehouse, dest.rstrip("/"), storage_options or {}, site_url)


def _linked_release(dest: Path) -> str | None:
    """The name of the release ``dest`` links to (an entry of ``DEST.releases``), if it is such a link."""
    try:
        target = os.readlink(dest)
    except OSError:  # not there, or not a link
        return None
    entry = Path(os.path.normpath(dest.parent / target))
    return entry.name if entry.parent == releases_dir(dest) else None


def _is_release_link(path: Path) -> bool:
    return _linked_release(path) is not None


def _release_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def release_marker(dest: Path, release_id: str) -> bytes:
    """What the marker of ``dest``'s release ``release_id`` holds (``MARKER``, in the release)."""
    return os.fsencode(f"Dumpscope release {release_id} of {dest.name}\n")


def _is_marked(path: Path, dest: Path, release_id: str) -> bool:
    """``path`` is a directory (not a link to one) holding the marker of ``dest``'s release ``release_id``."""
    expected = release_marker(dest, release_id)
    try:
        if not stat.S_ISDIR(path.lstat().st_mode) or not stat.S_ISREG((path / MARKER).lstat().st_mode):
            return False
        with open(path / MARKER, "rb") as marker:
            return marker.read(len(expected) + 1) == expected
    except OSError:
        return False


def _release_to_directory(site_dir: Path, warehouse: Path, dest: Path, site_url: str | None) -> Released:
    releases = releases_dir(dest)
    releases.mkdir(exist_ok=True)
    before = _linked_release(dest)  # what readers are on: kept, as every release after it
    name = _release_id()
    building = releases / f".{name}.{os.getpid()}.tmp"  # two runs publishing at once never share it
    building.mkdir()
    try:
        (building / MARKER).write_bytes(release_marker(dest, name))  # first: a copy killed midway is known as ours
        shutil.copytree(site_dir, building, dirs_exist_ok=True)
        write_snapshot(warehouse, building / SNAPSHOT_NAME, site_url)
    except BaseException:  # a full disk, an unreadable site: this process lives on (serve), its pid too
        shutil.rmtree(building, ignore_errors=True)
        raise
    ready = releases / name
    building.rename(ready)
    link = releases / f".{name}.{os.getpid()}.link"
    link.symlink_to(Path(releases.name) / name)  # relative: the pair can be moved together
    os.replace(link, dest)  # the switch: one rename
    files = [f for f in ready.rglob("*") if f.is_file() and f != ready / MARKER]
    foreign = _sweep(dest, keep={name, before}, before=before)
    return Released(str(dest), len(files), sum(f.stat().st_size for f in files), str(dest / SNAPSHOT_NAME),
                    _foreign_warning(releases, foreign))


def _sweep(dest: Path, keep: set[str | None], before: str | None) -> list[str]:
    """Remove from ``DEST.releases`` the releases no reader needs (marked, older than ``before``, not in
    ``keep``, not the one DEST resolves to now) and what killed publishes left; returns the names of
    the entries no publish made, left untouched."""
    releases = releases_dir(dest)
    keep = keep | {_linked_release(dest)}  # read now: a publish racing this one may have switched DEST
    foreign = []
    with os.scandir(releases) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        path = Path(entry.path)
        if work := _AT_WORK.fullmatch(entry.name):
            if psutil.pid_exists(int(work["pid"])):
                continue  # a publish at work
            if work["kind"] == "link" and entry.is_symlink() and os.readlink(path) == str(Path(releases.name) / work["id"]):
                path.unlink()  # the link itself, never what it names
            elif work["kind"] == "tmp" and _is_marked(path, dest, work["id"]):
                shutil.rmtree(path, ignore_errors=True)
            elif work["kind"] == "tmp" and entry.is_dir(follow_symlinks=False) and not any(path.iterdir()):
                path.rmdir()  # killed between its mkdir and its marker
            else:
                foreign.append(entry.name)
        elif _is_marked(path, dest, entry.name):
            if entry.name not in keep and _older(entry.name, before):
                shutil.rmtree(path, ignore_errors=True)
        else:
            foreign.append(entry.name)
    return foreign


def _older(name: str, before: str | None) -> bool:
    """Release ``name`` was made before release ``before`` (their ids are the times of their publishes)."""
    return before is not None and all(re.fullmatch(_RELEASE_ID, n) for n in (name, before)) and name < before


def _foreign_warning(releases: Path, foreign: list[str]) -> str:
    if not foreign:
        return ""
    named = ", ".join(plain_text(name) for name in foreign[:_NAMED_FOREIGN])
    more = f" and {len(foreign) - _NAMED_FOREIGN} more" if len(foreign) > _NAMED_FOREIGN else ""
    entries = "1 entry" if len(foreign) == 1 else f"{len(foreign)} entries"
    return f"{plain_text(releases)} holds {entries} no publish made (no {MARKER} marker), left untouched: {named}{more}"


def _release_to_store(site_dir: Path, warehouse: Path, dest: str, storage_options: dict,
                      site_url: str | None) -> Released:
    import fsspec

    fs, root = fsspec.core.url_to_fs(dest, **storage_options)
    root = root.rstrip("/")
    with tempfile.TemporaryDirectory(prefix="dumpscope-release-") as tmp:
        snapshot = Path(tmp) / SNAPSHOT_NAME
        write_snapshot(warehouse, snapshot, site_url)
        local = {f.relative_to(site_dir).as_posix(): f for f in sorted(site_dir.rglob("*")) if f.is_file()}
        local[SNAPSHOT_NAME] = snapshot
        at_dest = {p[len(root) + 1:] for p in fs.find(root)} - {PUBLISHING} if fs.exists(root) else set()
        publishing = _Publishing(fs, f"{root}/{PUBLISHING}")
        for component in upload_order(site_links(local), trusted=at_dest - publishing.listed):
            if len(component.fresh) + len(component.others) > 1:  # its new objects may name each other until all are up
                publishing.list(publishing.listed | set(component.fresh))
            for rel in component.fresh:
                fs.put_file(str(local[rel]), f"{root}/{rel}")
            publishing.list(publishing.listed - set(component.fresh))  # whole now: before anything links to them
            for rel in component.others:
                fs.put_file(str(local[rel]), f"{root}/{rel}")
        stale = sorted(at_dest - set(local))
        if stale:
            fs.rm([f"{root}/{rel}" for rel in stale])
        publishing.list(set())
        size = sum(f.stat().st_size for f in local.values())
    return Released(dest, len(local), size, f"{dest}/{SNAPSHOT_NAME}")


class _Publishing:
    """``PUBLISHING`` at a store's root: the objects there that may lack a link (the new objects of a
    component going up), which no page there links to. A publish killed meanwhile leaves it, and the
    next one takes those objects as new, not as whole ones (``upload_order``'s ``trusted``). It only
    orders uploads: one unreadable, oversized or not a list of paths is taken as empty."""

    def __init__(self, fs, path: str) -> None:
        self.fs, self.path = fs, path
        self.there = fs.exists(path)
        self.listed: set[str] = set()
        try:
            text = fs.cat_file(path, start=0, end=_MAX_PUBLISHING_BYTES + 1) if self.there else b"[]"
            listed = bounded_json.loads(text, 1) if len(text) <= _MAX_PUBLISHING_BYTES else []
        except (OSError, ValueError):  # unreadable, not JSON, not UTF-8, nested (a list of strings nests 1 deep)
            listed = []
        if isinstance(listed, list) and all(isinstance(rel, str) for rel in listed):
            self.listed = set(listed)

    def list(self, objects: set[str]) -> None:
        """Make the record say ``objects`` (none: no record), writing only a change."""
        if objects == self.listed and self.there == bool(objects):
            return
        if objects:
            self.fs.pipe_file(self.path, json.dumps(sorted(objects)).encode())
        elif self.there:
            self.fs.rm_file(self.path)
        self.listed, self.there = set(objects), bool(objects)
