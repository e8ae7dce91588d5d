"""What every command checks before any work starts, each failure an operator's mistake told
in one line (a ``CommandError``): the settings file and the memory limit (exit 2), the
notification targets and the ``--publish`` destination (exit 2: a directory this user may not
write, a store's bucket not there or without credentials), the site directory and the report
file (exit 2: the build replaces a site directory whole), the warehouse a night writes (exit 2: a directory, a file
that is no warehouse, a place this user cannot write), and the warehouse's one writer (exit 1
when the file is no warehouse, 3 when another writer holds it). The bucket's check is ``flows.ingest.bucket_access.check_bucket``
(exit 2), the warehouse file's ``flows.warehouse.inspect.check_warehouse`` (exit 1). The Dask
scheduler of ``--dask-address``, and the Prefect server ``PREFECT_API_URL`` names when it is
set, must answer before the night starts (exit 2); ``serve`` waits for a server that is still
starting (``PREFECT_WAIT_SECONDS``, ``--prefect-wait``), ``run`` does not. ``serve``'s ``--cron``
must be a schedule Prefect takes (exit 2, before anything else).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from flows.errors import CommandError
from flows.resources import MemoryBudget
from transforms.trends.rules import Settings

BAD_ARGUMENT = 2
DASK_CONNECT_SECONDS = 5.0  # a scheduler answers in milliseconds; a typo must not hold the night up for long
PREFECT_ANSWER_SECONDS = 10.0  # a server's health check, likewise
# run, watch: a server that takes the connection but does not answer in time is there, busy (a loaded
# machine's Prefect server took over 10 s while three nights wrote to it): asked again until this has passed.
PREFECT_BUSY_SECONDS = 60.0
# serve: a Prefect server started beside it (systemd starts both at boot) refuses connections
# until it is up, which took 30-60 s on a loaded machine; serve waits this long by default.
PREFECT_WAIT_SECONDS = 120.0
PREFECT_WAIT_VAR = "DUMPSCOPE_PREFECT_WAIT"  # --prefect-wait's environment variable
# What a server that is not up yet does: refuse or drop the connection, or not answer in time
# (a proxy in front of it answers 502-504). An unknown host or another answer is a mistake at once.
_NOT_UP_YET = (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError, TimeoutError)
_PROXY_WAITING = (502, 503, 504)


def settings(path: Path | None) -> Settings:
    """The settings (``path``, else ./dumpscope.toml when present), or exit 2 with the file's error."""
    from flows.verdict.settings import load_settings

    try:
        return load_settings(path)
    except (OSError, ValueError) as exc:
        raise CommandError(str(exc), exit_code=BAD_ARGUMENT) from None


def memory_limit(flag: str | None, loaded: Settings, settings_path: Path | None) -> int | None:
    """Bytes of the memory limit (the flag, else the settings file's), or exit 2 naming where
    the bad value came from."""
    from flows.resources import parse_memory

    try:
        return parse_memory(flag) if flag else parse_memory(loaded.memory_limit)
    except ValueError as exc:
        where = "--memory-limit" if flag else str(settings_path or "dumpscope.toml")
        raise CommandError(f"{where}: {exc}", exit_code=BAD_ARGUMENT) from None


def size_setting(value: str | int, key: str, settings_path: Path | None) -> int:
    """Bytes of a size in the settings file (\"4GB\", a number of bytes), or exit 2 naming it."""
    from pydantic import ByteSize, TypeAdapter

    try:
        size = int(TypeAdapter(ByteSize).validate_python(value))
    except ValueError:
        size = 0
    if size <= 0:
        raise CommandError(f"{settings_path or 'dumpscope.toml'}: {key} {value!r}: use a size such as 4GB",
                           exit_code=BAD_ARGUMENT)
    return size


def settings_and_budget(path: Path | None, flag: str | None) -> tuple[Settings, MemoryBudget]:
    """The settings and the memory budget of a command taking ``--settings`` and ``--memory-limit``."""
    conf = settings(path)
    return conf, MemoryBudget(memory_limit(flag, conf, path))


def notify_targets() -> None:
    """Exit 2 with one line unless every notification target (``--notify``, or the environment's
    DUMPSCOPE_NOTIFY) is a URL Apprise can use: checked before any work, never inside a night."""
    from flows import storage_secrets
    from flows.publish.notify import check_targets

    try:
        check_targets(storage_secrets.notify_targets())  # BadTarget: a CommandError, exit 2
    except ValueError as exc:
        if isinstance(exc, CommandError):
            raise
        raise CommandError(str(exc), exit_code=BAD_ARGUMENT) from None


def dask_scheduler(address: str) -> None:
    """Exit 2 with one line unless ``address`` (``--dask-address``) is a scheduler's address,
    ``tcp://HOST:PORT``, ``tls://HOST:PORT`` or ``HOST:PORT`` (Dask's default, tcp), that
    accepts a connection within ``DASK_CONNECT_SECONDS``: a typo is found before any work,
    not when the night's parse tasks start."""
    import socket
    from urllib.parse import urlsplit

    where = f"--dask-address {address}"
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = None
    if (parts.scheme not in ("tcp", "tls") or not parts.hostname or port is None or parts.path not in ("", "/")
            or parts.query or parts.fragment or parts.username is not None):
        raise CommandError(f"{where}: not a scheduler's address: give tcp://HOST:PORT", exit_code=BAD_ARGUMENT)
    try:
        with socket.create_connection((parts.hostname, port), timeout=DASK_CONNECT_SECONDS):
            pass
    except OSError as exc:  # refused, unknown host, unreachable, timed out
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise CommandError(f"{where}: no scheduler answers there ({reason})", exit_code=BAD_ARGUMENT) from None


def prefect_api(wait: float = 0.0, notice: Callable[[str], None] | None = None) -> None:
    """Exit 2 with one line when ``PREFECT_API_URL`` is set and no Prefect API answers there
    within ``PREFECT_ANSWER_SECONDS`` (a typo in its host or port, a server not started, another
    web server at that address): found here, not as Prefect's traceback once the night begins.
    A Prefect server answers ``<url>/health`` with ``true``; Prefect Cloud's workspace URLs may
    answer 401 or 403 without a key, which counts as a server (``serve`` says what the key lacks).
    Unset, the command starts its own temporary server.

    With ``wait`` (seconds, ``serve``), a server that is not up yet (the connection refused or
    dropped, no answer in time, a proxy's 502-504) is asked again every second until ``wait``
    has passed; ``notice`` is told once that it is waited for, and how long, and when it answered.
    Without (``run``, ``watch``), the first refusal is the answer: a wrong URL costs no time; a health
    check that timed out is asked again until ``PREFECT_BUSY_SECONDS`` have passed (a busy server)."""
    import urllib.error
    import urllib.request

    url = os.environ.get("PREFECT_API_URL")
    if not url:
        return
    where = f"PREFECT_API_URL {url}"
    if not url.startswith(("http://", "https://")):
        raise CommandError(f"{where}: not an http(s) URL: e.g. http://127.0.0.1:4200/api", exit_code=BAD_ARGUMENT)
    health = url.rstrip("/") + "/health"
    started = time.monotonic()
    told = False  # notice was told that the server is waited for
    while True:
        busy = False  # the connection was taken, the answer did not come in time
        try:
            with urllib.request.urlopen(health, timeout=PREFECT_ANSWER_SECONDS) as answer:
                body = answer.read(64)
            break
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):  # a server that wants a key: it is there
                body = b"true"
                break
            if exc.code not in _PROXY_WAITING:
                raise CommandError(f"{where}: answers, but not as a Prefect API (GET {health}: HTTP {exc.code}): "
                                   "give the server's API URL, e.g. http://127.0.0.1:4200/api",
                                   exit_code=BAD_ARGUMENT) from None
            reason, final = f"HTTP {exc.code}", False
        except (OSError, ValueError) as exc:  # refused, unknown host, timed out, a malformed URL
            cause = getattr(exc, "reason", None) or exc
            reason = getattr(cause, "strerror", None) or str(cause) or type(exc).__name__
            final = not isinstance(cause, _NOT_UP_YET)  # an unknown host, a malformed URL: no wait mends it
            busy = isinstance(cause, TimeoutError)
        left = max(wait, PREFECT_BUSY_SECONDS if busy else 0.0) - (time.monotonic() - started)
        if final or left <= 0:
            said = f"answered there in {wait:g} s" if wait and not final else "answers there"
            raise CommandError(f"{where}: no Prefect server {said} ({reason})", exit_code=BAD_ARGUMENT)
        if not told and notice is not None and wait:
            notice(f"waiting up to {wait:g} s for the Prefect server at {url} to start ({reason}; "
                   f"--prefect-wait or {PREFECT_WAIT_VAR} sets how long)")
            told = True
        time.sleep(min(1.0, left))
    if body.strip() != b"true":
        raise CommandError(f"{where}: answers, but not as a Prefect API (GET {health} did not say true): give the "
                           "server's API URL, e.g. http://127.0.0.1:4200/api", exit_code=BAD_ARGUMENT)
    if told:
        notice(f"the Prefect server at {url} answered after {time.monotonic() - started:.0f} s")


def cron_schedule(cron: str) -> None:
    """Exit 2 with one line unless ``cron`` (``serve --cron``) is a schedule Prefect takes (its own
    ``CronSchedule``): else Prefect's 67-line validation error came once the deployment was built."""
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    from transforms.escape import plain_text, shell_word

    try:
        CronSchedule(cron=cron)
    except ValidationError:
        raise CommandError(f"--cron {plain_text(shell_word(cron))}: not a schedule Prefect takes: five fields, minute "
                           "(0-59) hour (0-23) day of month (1-31) month (1-12) day of week (0-6, 0 Sunday), "
                           "e.g. '0 2 * * *' (02:00 each night)", exit_code=BAD_ARGUMENT) from None


def publish_destination(dest: str, storage_options: dict | None = None, *, look: bool = True) -> None:
    """Exit 2 with one line unless ``--publish DEST`` can take a release (``flows.publish.release``):
    a directory DEST's parent, where the link to each release is switched, and its releases
    directory must be this user's to write; a store's bucket must be there and take the
    credentials (``storage_options``, else the environment's), found with one cheap look as the
    bucket's are (``check_bucket``; not with ``look`` False: the options are not known yet).
    Else the night did all its work and failed at its publish."""
    from flows.ingest.bucket_access import BucketUnusable, check_bucket
    from flows.publish.release import BadDestination, check_destination, is_local, local_path, releases_dir
    from transforms.escape import plain_text

    try:
        check_destination(dest)
    except BadDestination as exc:
        raise CommandError(str(exc), exit_code=BAD_ARGUMENT) from None
    if not is_local(dest):
        if not look:
            return
        try:
            check_bucket(dest, storage_options)
        except BucketUnusable as exc:
            raise CommandError(f"--publish {exc}", exit_code=BAD_ARGUMENT) from None
        return
    path = local_path(dest)
    for place in (path.parent, releases_dir(path)):
        if place.is_dir() and not os.access(place, os.W_OK | os.X_OK):
            raise CommandError(f"--publish {plain_text(dest)}: this user may not write {plain_text(place)} (each release "
                               f"goes into {plain_text(releases_dir(path))}, and DEST, a link to it, is switched in its "
                               "directory): make that directory this user's, or give a DEST in one that is",
                               exit_code=BAD_ARGUMENT)


def site_directory(flag: str, path: Path) -> None:
    """Exit 2 with one line unless the site can be built into ``path`` (``--site``, ``site --out``):
    the build replaces the directory whole, so an existing one must be empty or a site built
    before (its ``index.html`` or its manifest), never a file or a directory of other files;
    else a night did all its work and then swapped the user's directory aside."""
    from flows.publish.site_mkdocs import MANIFEST
    from transforms.escape import plain_text

    shown = plain_text(path)
    if path.exists() and not path.is_dir():
        raise CommandError(f"{flag} {shown} is a file, not a directory: give the directory the site is built into",
                           exit_code=BAD_ARGUMENT)
    if path.is_dir() and any(path.iterdir()) and not ((path / "index.html").is_file() or (path / MANIFEST).is_file()):
        raise CommandError(f"{flag} {shown} holds files that are not a site, and the build replaces the directory "
                           "whole: give a new directory, or one a build made", exit_code=BAD_ARGUMENT)
    _under_directories(flag, path)


def report_file(path: Path) -> None:
    """Exit 2 with one line unless ``--report`` can be written: a file (not a directory) under
    directories (the night creates those missing), else the night failed once it wrote it."""
    from transforms.escape import plain_text

    if path.is_dir():
        raise CommandError(f"--report {plain_text(path)} is a directory: give the report's file", exit_code=BAD_ARGUMENT)
    _under_directories("--report", path)


def _under_directories(flag: str, path: Path) -> None:
    """Exit 2 when what ``path`` is to be made under holds a file where a directory must be."""
    from transforms.escape import plain_text

    place = path.absolute().parent
    while not place.exists() and place != place.parent:  # the directories the night creates
        place = place.parent
    if not place.is_dir():
        raise CommandError(f"{flag} {plain_text(path)}: {plain_text(place)} is a file, not a directory",
                           exit_code=BAD_ARGUMENT)


def warehouse_to_write(path: Path) -> None:
    """Exit 2 with one line unless a night can write ``path``: an existing warehouse file this
    user may write, or a new one in a directory this user may create or write (its writer
    keeps its lock and journal files beside it)."""
    from flows.warehouse.inspect import check_warehouse
    from flows.warehouse.records import root_for
    from transforms.escape import plain_text

    shown = plain_text(path)
    if path.is_dir():
        raise CommandError(f"--warehouse {shown} is a directory: give the warehouse file, e.g. "
                           f"{plain_text(path / 'warehouse.duckdb')}", exit_code=BAD_ARGUMENT)
    if path.exists():
        try:
            check_warehouse(path)
        except CommandError as exc:
            raise CommandError(f"--warehouse {exc}", exit_code=BAD_ARGUMENT) from None
    place = path.absolute().parent
    while not place.exists() and place != place.parent:  # the directories the night creates
        place = place.parent
    if not place.is_dir():
        raise CommandError(f"--warehouse {shown}: {plain_text(place)} is a file, not a directory", exit_code=BAD_ARGUMENT)
    if not os.access(place, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CommandError(f"--warehouse {shown}: this user may not write there ({plain_text(place)})",
                           exit_code=BAD_ARGUMENT)
    store = root_for(path)
    if store.exists() and not store.is_dir():
        raise CommandError(f"--warehouse {shown}: {plain_text(store)} is not a directory, and the warehouse keeps its "
                           "records store there: move it away", exit_code=BAD_ARGUMENT)


@contextmanager
def writer(path: Path, wait: bool, budget: MemoryBudget | None = None) -> Iterator:
    """The warehouse as its one writer (DuckDB within ``budget``); exits 1 when it does not
    exist, 3 when busy (``WarehouseBusy``)."""
    from flows.warehouse.inspect import check_warehouse
    from flows.warehouse.store import Warehouse

    check_warehouse(path)
    with Warehouse(path, wait=wait, budget=budget) as con:
        yield con
