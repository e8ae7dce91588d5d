"""Publishing a night's site and warehouse snapshot where readers get them (``run --publish DEST``).

A release is the built site plus, at its root, ``warehouse.duckdb``: a self-contained read-only
snapshot of the published warehouse (``flows.warehouse.snapshot``) that ``dumpscope check
--warehouse URL`` and analysts fetch. Two kinds of destination:

- **A directory** (a path, or ``file://``): ``DEST`` is a symbolic link to the latest release,
  ``DEST.releases/<id>/``, switched with one ``rename`` once the release is whole: a web server
  serving ``DEST`` (nginx ``root``) shows the old site or the new one, never half of each. The
  previous release is kept (a reader in the middle of it keeps working); older ones are removed.
  A ``DEST`` that exists and is not such a link is refused, never overwritten.
- **Any other fsspec URL** (``s3://bucket/prefix``, ``gs://``...): object stores replace one
  object at a time and have no atomic rename of many. Each file is uploaded whole (a reader never
  gets a cut file), the new pages before the pages that link to them (assets, then pages, the
  snapshot, the front page last), then the objects the new site no longer has are deleted: a
  reader never follows a link to a page that is not there yet, and for the seconds of the upload
  may see some pages of the night before.

Nothing here chooses a path from the dumps: the release id is the time of the publish.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from flows.warehouse.snapshot import write_snapshot

SNAPSHOT_NAME = "warehouse.duckdb"
KEEP_RELEASES = 2  # the latest and the one before it (a reader may be in the middle of it)


class BadDestination(ValueError):
    """``--publish DEST`` cannot be used; the message says why (one line)."""


@dataclass(frozen=True, slots=True)
class Released:
    dest: str
    files: int  # files of the release (site and snapshot)
    bytes: int
    snapshot: str  # where the snapshot is read from


def is_local(dest: str) -> bool:
    return "://" not in dest or dest.startswith("file://")


def local_path(dest: str) -> Path:
    return Path(dest.removeprefix("file://")).absolute()


def check_destination(dest: str, storage_options: dict | None = None) -> None:
    """Raise ``BadDestination`` when ``dest`` cannot take a release (before any work)."""
    if is_local(dest):
        path = local_path(dest)
        if not path.parent.is_dir():
            raise BadDestination(f"--publish {dest}: {path.parent} is not a directory")
        if (path.exists() or path.is_symlink()) and not _is_release_link(path):
            raise BadDestination(f"--publish {dest}: {path} exists and is not a link to a release made by "
                                 f"--publish ({path.name}.releases/...); give a new path, it becomes that link")
        return
    import fsspec

    protocol = dest.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError) as exc:
        raise BadDestination(f"--publish {dest}: no filesystem for {protocol}:// ({exc})") from None


def release(site_dir: Path, warehouse: Path, dest: str, storage_options: dict | None = None) -> Released:
    """Publish the site in ``site_dir`` and a snapshot of ``warehouse`` to ``dest``."""
    check_destination(dest, storage_options)
    if is_local(dest):
        return _release_to_directory(site_dir, warehouse, local_path(dest))
    return _release_to_store(site_dir, warehouse, dest.rstrip("/"), storage_options or {})


def _is_release_link(path: Path) -> bool:
    return path.is_symlink() and Path(os.readlink(path)).parent.name == path.name + ".releases"


def _release_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def _release_to_directory(site_dir: Path, warehouse: Path, dest: Path) -> Released:
    releases = dest.with_name(dest.name + ".releases")
    releases.mkdir(exist_ok=True)
    name = _release_id()
    building = releases / f".{name}.{os.getpid()}.tmp"  # two runs publishing at once never share it
    shutil.copytree(site_dir, building)
    write_snapshot(warehouse, building / SNAPSHOT_NAME)
    ready = releases / name
    building.rename(ready)
    link = releases / f".{name}.{os.getpid()}.link"
    link.symlink_to(Path(releases.name) / name)  # relative: the pair can be moved together
    os.replace(link, dest)  # the switch: one rename
    files = [f for f in ready.rglob("*") if f.is_file()]
    for old in sorted(r for r in releases.iterdir() if not r.name.startswith("."))[:-KEEP_RELEASES]:
        shutil.rmtree(old, ignore_errors=True)
    return Released(str(dest), len(files), sum(f.stat().st_size for f in files), str(dest / SNAPSHOT_NAME))


def _release_to_store(site_dir: Path, warehouse: Path, dest: str, storage_options: dict) -> Released:
    import fsspec

    fs, root = fsspec.core.url_to_fs(dest, **storage_options)
    root = root.rstrip("/")
    with tempfile.TemporaryDirectory(prefix="dumpscope-release-") as tmp:
        snapshot = Path(tmp) / SNAPSHOT_NAME
        write_snapshot(warehouse, snapshot)
        local = {f.relative_to(site_dir).as_posix(): f for f in sorted(site_dir.rglob("*")) if f.is_file()}
        local[SNAPSHOT_NAME] = snapshot
        before = {p[len(root) + 1:] for p in fs.find(root)} if fs.exists(root) else set()
        for rel in sorted(local, key=_upload_order):
            fs.put_file(str(local[rel]), f"{root}/{rel}")
        stale = sorted(before - set(local))
        if stale:
            fs.rm([f"{root}/{rel}" for rel in stale])
        size = sum(f.stat().st_size for f in local.values())
    return Released(dest, len(local), size, f"{dest}/{SNAPSHOT_NAME}")


def _upload_order(rel: str) -> tuple:
    """Assets first, then pages (the deepest first, a section's index after its pages), the
    snapshot, and the front page last: what links comes after what it links to."""
    if rel == "index.html":
        return (3,)
    if rel == SNAPSHOT_NAME:
        return (2,)
    if not rel.endswith(".html"):
        return (0, rel)
    return (1, -rel.count("/"), rel.rsplit("/", 1)[-1] == "index.html", rel)
