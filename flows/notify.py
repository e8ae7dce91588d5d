"""Notifications: the summary of a run's NEW incidents, sent once per run and target.

Targets are Apprise URLs (Slack, Teams, email, GitHub, webhooks...: Apprise comes with
Prefect). Each target gets the summary in the form it shows: targets that show text only
(webhooks, SMS) its plain-text rendering; the others the HTML Python-Markdown makes of the
chat Markdown (``night_report.CHAT``: names in code spans, inline HTML from
``transforms.escape``), which Apprise converts for each (Slack mrkdwn, e-mail HTML). Handed
the Markdown source, Slack showed ``<code>`` and ``&#95;`` as they are written; handed the
site's Markdown as HTML, ``jit\\_train\\_step`` and ``###``.

What was sent is recorded in the ``notifications`` table by the writer that holds the
warehouse lock, keyed by run and by a digest of the target (never the URL: it often
carries a token), so a re-run of the night, or a second run at the same time, sends
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
               text: str, new_incidents: int) -> list[str]:
    """Send the summary (``body`` in Markdown, ``text`` in plain text) to each target not yet
    told about ``run_id``; returns the digests sent to. Nothing is sent for a run without
    new incidents."""
    if not targets or not new_incidents:
        return []
    import apprise
    import markdown

    sent = []
    for url in targets:
        digest = target_digest(url)
        done = con.execute("SELECT 1 FROM notifications WHERE run_id = ? AND target = ?", [run_id, digest]).fetchall()
        if done:
            continue
        sender = apprise.Apprise()
        if not sender.add(url):
            raise ValueError(f"--notify: not an Apprise URL Dumpscope can use (target {digest})")
        if sender[0].notify_format == apprise.NotifyFormat.TEXT:
            ok = sender.notify(body=text, title=title, body_format=apprise.NotifyFormat.TEXT)
        else:
            ok = sender.notify(body=markdown.markdown(body), title=title, body_format=apprise.NotifyFormat.HTML)
        con.execute("INSERT INTO notifications VALUES (?, ?, ?, ?, ?)",
                    [run_id, digest, new_incidents, bool(ok), datetime.now(timezone.utc).replace(tzinfo=None)])
        sent.append(digest)
    return sent
