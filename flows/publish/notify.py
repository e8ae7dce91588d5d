"""Notifications: the summary of a run's NEW incidents, delivered once per run and target
(``announce``, which the nightly's writer calls; ``owes_notifications`` tells it when a
message is still owed on a night with nothing new).

Targets are Apprise URLs (Slack, Teams, Discord, email, GitHub, webhooks...: Apprise comes
with Prefect). ``check_targets`` reads each with Apprise's own parser before any work
starts: a URL Apprise cannot use is an operator's error (``BadTarget``, named by its
position, scheme and digest, never by the URL, which often carries a token).

Each target gets the summary in the form it shows (``Target.form``) and escaped for its
service (``Target.service``, a key of ``transforms.escape.CHAT_MENTIONS``: no name from a
dump pings anyone there): targets that show text only (webhooks, SMS, Discord, Mattermost)
its plain-text rendering; the others the HTML Python-Markdown makes of the chat Markdown
(``night_report.chat_style``), which Apprise converts for each (Slack mrkdwn, e-mail HTML).

What was delivered, and what was not and why, is recorded in the ``notifications`` table by
the writer that holds the warehouse lock, keyed by run and by a digest of the target (never
the URL). A delivery is bounded (``DELIVERY_SECONDS``; all of a night's within
``ANNOUNCE_SECONDS``, the lock being held meanwhile) and never raises: a failure is recorded
``delivered = false`` with its reason, shown on the overview page and in the night's
summary, and retried by every later run that has the target (``owed``) until delivered;
a delivered message is never sent again, a re-run of the night sends nothing. A message is
sent before the night is published: a crash between the two sends it again the next time
(at least once, never silently lost), and so may a delivery that outlived its bound.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import unquote

import duckdb

from flows.errors import CommandError
from flows import storage_secrets
from flows.warehouse.store import connect_readonly
from transforms.escape import plain_text

DELIVERY_SECONDS = 30.0  # one message to one target (Apprise's own HTTP timeouts are 4 s + 4 s)
ANNOUNCE_SECONDS = 120.0  # every message of a night: what is left is owed to the next run
REASON_CHARS = 300

# Apprise plugin protocol -> the service whose escaping its messages get (anything else: "chat").
SERVICES = {"discord": "discord", "slack": "slack", "workflow": "teams", "workflows": "teams", "msteams": "teams",
            "mmost": "mattermost", "mmosts": "mattermost", **{p: "webhook" for p in ("json", "jsons", "form", "forms",
                                                                                   "xml", "xmls")}}
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]{0,31})://", re.IGNORECASE)


class BadTarget(CommandError, ValueError, exit_code=2):
    """A notification URL Apprise cannot use: the message names it without its token."""


def target_digest(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Target:
    url: str = field(repr=False)  # may hold a token: never printed, logged or stored
    index: int  # 1-based position among the targets given
    digest: str
    service: str  # a key of transforms.escape.CHAT_MENTIONS
    form: str  # "text" (plain text) or "html" (Apprise converts it)
    scheme: str = ""  # the URL's scheme as written ("" when it has none)
    problem: str | None = None  # why Apprise cannot use the URL

    @property
    def name(self) -> str:
        """How messages name the target: its digest and its service, never the URL."""
        return f"target {self.digest} ({self.service})"


@dataclass(frozen=True)
class Message:
    title: str
    body: str  # Markdown for a target of form "html", plain text for "text"
    new_incidents: int


@dataclass
class Delivery:
    sent: list[tuple[str, str]] = field(default_factory=list)  # (run_id, target digest) delivered now
    failed: list[str] = field(default_factory=list)  # one line each: what was not delivered, and why


def describe(url: str, index: int = 1) -> Target:
    """The target ``url`` names, read by Apprise's own parser (``Apprise.instantiate``)."""
    import apprise

    digest = target_digest(url)
    plugin = apprise.Apprise.instantiate(url) if isinstance(url, str) else None
    scheme = _SCHEME.match(url) if isinstance(url, str) else None
    scheme = scheme.group(1).lower() if scheme else ""
    if plugin is None:
        return Target(url, index, digest, "chat", "text", scheme, "not a notification URL Apprise can use")
    protocols = [p for attr in ("secure_protocol", "protocol") for p in _as_tuple(getattr(plugin, attr, None))]
    service = next((SERVICES[p] for p in protocols if p in SERVICES), "chat")
    form = "text" if plugin.notify_format == apprise.NotifyFormat.TEXT else "html"
    return Target(url, index, digest, service, form, scheme)


def check_targets(urls: list[str]) -> list[Target]:
    """Every target, or ``BadTarget`` naming the first that Apprise cannot use by its position,
    scheme and digest."""
    targets = [describe(url, i) for i, url in enumerate(urls, start=1)]
    for t in targets:
        if t.problem:
            shown = f"{t.scheme}://…" if t.scheme else "no scheme"
            raise BadTarget(f"notification target {t.index} ({shown}, {t.digest}): {t.problem} "
                            "(the forms it reads: https://appriseit.com/services/)")
    return targets


def has_owed(con: duckdb.DuckDBPyConnection, urls: list[str]) -> bool:
    """Whether a message is owed to one of these targets (recorded, not delivered)."""
    if not urls:
        return False
    return con.execute("SELECT count(*) FROM notifications WHERE NOT coalesce(delivered, false) "
                       "AND list_contains(?, target)", [[target_digest(u) for u in urls]]).fetchall()[0][0] > 0


def owed(con: duckdb.DuckDBPyConnection, digest: str, run_ids: list[str]) -> list[str]:
    """The runs of ``run_ids`` and those whose message is still owed to the target, without
    those already delivered to it, oldest run first."""
    return [r for (r,) in con.execute("""
        WITH asked AS (SELECT unnest(?::VARCHAR[]) AS run_id
                       UNION SELECT run_id FROM notifications WHERE target = ? AND NOT coalesce(delivered, false))
        SELECT a.run_id FROM asked a LEFT JOIN runs r USING (run_id)
        WHERE a.run_id NOT IN (SELECT run_id FROM notifications WHERE target = ? AND delivered)
        ORDER BY r.started_at NULLS LAST, a.run_id""", [run_ids, digest, digest]).fetchall()]


def notify_new(con: duckdb.DuckDBPyConnection, urls: list[str], run_ids: list[str],
               render: Callable[[str, Target], Message | None]) -> Delivery:
    """Deliver, to each target, the summary of each run of ``run_ids`` and of each run still
    owed to it (``render(run_id, target)``: the message in the target's form; None when the run
    has no new incident). Never raises for a target or a delivery: what failed is recorded and
    returned (``Delivery.failed``). After a failure, a target gets nothing more in this run."""
    result = Delivery()
    deadline = time.monotonic() + ANNOUNCE_SECONDS
    for index, url in enumerate(urls, start=1):
        target = describe(url, index)
        stopped: str | None = None
        for run_id in owed(con, target.digest, run_ids):
            message = render(run_id, target)
            if message is None:  # nothing new at that run any more: nothing is owed
                con.execute("DELETE FROM notifications WHERE run_id = ? AND target = ?", [run_id, target.digest])
                continue
            if stopped is None and time.monotonic() > deadline:
                stopped = f"not sent: the run's {ANNOUNCE_SECONDS:g} s for notifications ran out"
            if stopped is not None:  # owed to the next run
                _record(con, run_id, target, message, error=stopped, tried=False)
                continue
            error = target.problem or _deliver(target, message)
            _record(con, run_id, target, message, error=error, tried=True)
            if error is None:
                result.sent.append((run_id, target.digest))
                continue
            result.failed.append(plain_text(f"notification of run {run_id} to {target.name} failed: {error}"
                                            " (retried by the next run)"))
            stopped = "not sent: an earlier message to this target failed in the same run"
    return result



def announce(con: duckdb.DuckDBPyConnection, run_ids: list[str], settings) -> tuple[int, list[str]]:
    """The summary of each run of ``run_ids`` that opened regressions or failures, and of each run
    whose message is still owed to a target, to every target once, in the target's form and
    escaping (``notify_new``): (messages delivered, a line for each that was not). The nightly's
    writer calls it under the warehouse lock, before the publish."""
    import polars as pl

    from flows.verdict import incident_reader
    from transforms.escape import chat_title
    from transforms.trends.night_report import chat_style, counts, night_markdown, text_style

    how = dict(sections=("new",), commit_url=settings.commit_url, compare_url=settings.compare_url,
               site_url=settings.site_url)
    verdicts: dict[str, tuple] = {}

    def render(run_id: str, target) -> Message | None:
        if run_id not in verdicts:
            at = incident_reader.incidents_at(con, run_id)
            verdicts[run_id] = (at, incident_reader.run_commit(con, run_id))
        at, commit = verdicts[run_id]
        if not counts(at)["new"]:
            return None
        new = at.filter(pl.col("status") == "new").height
        style = text_style(target.service) if target.form == "text" else chat_style(target.service)
        name = chat_title(run_id)  # a name that is not plain is in the body only
        return Message(f"Dumpscope: {new} new incident(s)" + (f" in run {name}" if name else ""),
                       night_markdown(run_id, commit, at, **how, style=style), new)

    done = notify_new(con, storage_secrets.notify_targets(), run_ids, render)
    return len(done.sent), done.failed


def owes_notifications(warehouse: Path) -> bool:
    """Whether the published warehouse owes a message to a target this run has: the writer then
    retries it, even on a night with nothing new."""
    targets = storage_secrets.notify_targets()
    if not targets or not Path(warehouse).exists():
        return False
    with connect_readonly(warehouse) as con:
        try:
            return has_owed(con, targets)
        except duckdb.Error:  # a warehouse from before notifications were kept: nothing is owed
            return False

def _record(con: duckdb.DuckDBPyConnection, run_id: str, target: Target, message: Message, *,
            error: str | None, tried: bool) -> None:
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    key = [run_id, target.digest]
    if con.execute("SELECT 1 FROM notifications WHERE run_id = ? AND target = ?", key).fetchall():
        con.execute("""UPDATE notifications SET new_incidents = ?, delivered = ?, error = ?,
                       attempts = coalesce(attempts, 1) + ?, sent_at = CASE WHEN ? THEN ? ELSE sent_at END
                       WHERE run_id = ? AND target = ?""",
                    [message.new_incidents, error is None, error, int(tried), tried, now, *key])
    else:
        con.execute("INSERT INTO notifications (run_id, target, new_incidents, delivered, sent_at, error, attempts) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [*key, message.new_incidents, error is None, now if tried else None, error, int(tried)])


def _deliver(target: Target, message: Message) -> str | None:
    """Send one message, within ``DELIVERY_SECONDS``: None when Apprise reported it delivered,
    else why not (Apprise's warnings, without any part of the URL)."""
    outcome: dict = {}

    def attempt() -> None:
        import apprise
        import markdown

        with _Warnings() as warnings:
            try:
                sender = apprise.Apprise()
                sender.add(target.url)
                if target.form == "text":
                    ok = sender.notify(body=message.body, title=message.title, body_format=apprise.NotifyFormat.TEXT)
                else:
                    ok = sender.notify(body=markdown.markdown(message.body), title=message.title,
                                       body_format=apprise.NotifyFormat.HTML)
                outcome["ok"] = bool(ok)
            except Exception as exc:  # a plugin's own bug: this target failed, the others go on
                outcome["error"] = f"{type(exc).__name__}: {exc}"
        outcome["warnings"] = warnings.messages

    thread = threading.Thread(target=attempt, name=f"notify-{target.digest}", daemon=True)
    thread.start()
    thread.join(DELIVERY_SECONDS)
    if thread.is_alive():
        return f"no answer within {DELIVERY_SECONDS:g} s"
    if outcome.get("ok"):
        return None
    said = [outcome["error"]] if "error" in outcome else []
    said += outcome.get("warnings") or ([] if said else ["Apprise reported the message not delivered"])
    return _without_url("; ".join(dict.fromkeys(said)), target.url)


class _Warnings(logging.Handler):
    """Apprise's warnings and errors logged by this thread while the context is open (they say
    why a delivery failed: "Failed to send JSON notification to ...")."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.thread = threading.get_ident()
        self.logger = logging.getLogger("apprise")
        self.level_before = self.logger.level

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.messages.append(record.getMessage())

    def __enter__(self) -> "_Warnings":
        if not self.logger.isEnabledFor(logging.WARNING):
            self.logger.setLevel(logging.WARNING)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_before)


def _without_url(text: str, url: str) -> str:
    """``text`` on one line, shortened, with every piece of ``url`` past its scheme (host, user,
    token, path, query values) replaced by "…"."""
    rest = url.split("://", 1)[-1]
    pieces = {p for part in re.split(r"[/:@?&=#,;+\s]+", rest) for p in (part, unquote(part)) if len(p) >= 4}
    for piece in sorted(pieces, key=len, reverse=True):
        text = text.replace(piece, "…")
    text = plain_text(text)
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def _as_tuple(value) -> tuple:
    if not value:
        return ()
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)
