"""Notifications: the summary of a run's NEW incidents, sent once per run and target.

Targets are Apprise URLs (Slack, Teams, email, GitHub, webhooks...: Apprise comes with
Prefect). What was sent is recorded in the ``notifications`` table by the writer that
holds the warehouse lock, keyed by run and by a digest of the target (never the URL: it
often carries a token), so a re-run of the night, or a second run at the same time, sends
nothing again. A notification is sent before the night is published: a crash between
the two sends it again the next time (at least once, never silently lost).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

import duckdb


def target_digest(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def notify_new(con: duckdb.DuckDBPyConnection, targets: list[str], run_id: str, title: str, body: str,
               new_incidents: int) -> list[str]:
    """Send ``body`` to each target not yet told about ``run_id``; returns the digests
    sent to. Nothing is sent for a run without new incidents."""
    if not targets or not new_incidents:
        return []
    import apprise

    sent = []
    for url in targets:
        digest = target_digest(url)
        done = con.execute("SELECT 1 FROM notifications WHERE run_id = ? AND target = ?", [run_id, digest]).fetchall()
        if done:
            continue
        sender = apprise.Apprise()
        if not sender.add(url):
            raise ValueError(f"--notify: not an Apprise URL Dumpscope can use (target {digest})")
        ok = sender.notify(body=body, title=title, body_format=apprise.NotifyFormat.MARKDOWN)
        con.execute("INSERT INTO notifications VALUES (?, ?, ?, ?, ?)",
                    [run_id, digest, new_incidents, bool(ok), datetime.now(timezone.utc).replace(tzinfo=None)])
        sent.append(digest)
    return sent
