"""--notify: the summary of a run's new incidents reaches a webhook once, never again on a re-run."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from flows import storage_secrets
from flows.warehouse import store as wh

SAMPLE = Path(__file__).parents[1] / "data" / "sample_bucket"


@pytest.fixture
def webhook():
    """A receiver on 127.0.0.1 that keeps every JSON body posted to it."""
    received: list[dict] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (the http.server name)
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"json://127.0.0.1:{server.server_port}/hook", received
    server.shutdown()


def test_new_incidents_are_announced_once(prefect, tmp_path, webhook, monkeypatch):
    from flows.nightly import nightly

    url, received = webhook
    monkeypatch.delenv(storage_secrets.NOTIFY_VAR, raising=False)
    storage_secrets.export_notify_targets([url])
    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    shutil.copytree(SAMPLE / "2026-11-17", bucket / "2026-11-17")
    first = nightly(bucket=str(bucket), warehouse=warehouse, workers=1)
    assert (first.new_incidents, first.notified, received) == (0, 0, [])  # one night: nothing can step yet

    shutil.copytree(SAMPLE / "2026-11-18", bucket / "2026-11-18")
    second = nightly(bucket=str(bucket), warehouse=warehouse, workers=1)
    assert (second.new_incidents, second.notified) == (5, 1)
    [message] = received
    assert message["title"] == "Dumpscope: 5 new incident(s) in run 2026-11-18"
    # A webhook shows text: it gets the plain-text summary, not the Markdown's markup.
    assert "Last night: 5 new, " in message["message"] and "jax-pmap / jit" in message["message"]
    assert "**" not in message["message"] and "<code>" not in message["message"] and "&#" not in message["message"]
    assert "\ndumpscope diff 2026-11-17 2026-11-18 --series " in message["message"]

    again = nightly(bucket=str(bucket), warehouse=warehouse, workers=1)  # a re-run: nothing new, nothing sent
    assert (again.new_incidents, again.notified, len(received)) == (0, 0, 1)
    with wh.connect_readonly(warehouse) as con:
        rows = con.execute("SELECT run_id, target, new_incidents, delivered FROM notifications").fetchall()
    assert rows == [("2026-11-18", storage_secrets_digest(url), 5, True)]
    assert url not in json.dumps(rows)  # the URL (it may hold a token) is not stored


def storage_secrets_digest(url: str) -> str:
    from flows.notify import target_digest

    return target_digest(url)


def test_slack_gets_mrkdwn_not_the_markdown_source(monkeypatch):
    """Apprise's own Slack plugin (its HTTP call caught): code spans, links and names from dumps
    arrive as Slack shows them, not as the HTML entities and tags the Markdown carries."""
    from transforms.escape import code, md_text

    body = (f"Last night: **1 new**.\n\n### {md_text('model__forward <img src=x onerror=alert(1)>')} · {code('I-1a2b')}\n\n"
            f"Commits [{code('4e1d2a7')}](https://example.com/c/4e1d2a7) → {code('9b03c5e')}.\n")
    text = _slack_text(monkeypatch, body)
    assert "*1 new*" in text and "`I-1a2b`" in text and "<https://example.com/c/4e1d2a7|`4e1d2a7`>" in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text  # Slack shows it as text, never as markup
    assert "<code>" not in text and "&lt;code" not in text and "&#" not in text and "&amp;" not in text


def _slack_text(monkeypatch, body_markdown: str) -> str:
    """What Apprise's own Slack plugin posts (its HTTP call caught) for a summary in Markdown."""
    import duckdb
    import requests

    from flows.notify import notify_new
    from flows.warehouse.schema import _create_core

    posted: list[dict] = []

    class Ok:
        status_code, content, text = 200, b"ok", "ok"

    monkeypatch.setattr(requests, "request", lambda method, url, *a, **kw: posted.append(json.loads(kw["data"])) or Ok())
    con = duckdb.connect()
    con.execute(_create_core("notifications"))
    url = "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#perf"
    assert len(notify_new(con, [url], "r", "Dumpscope", body_markdown, "(text)", 1)) == 1
    return "\n".join(p["attachments"][0]["text"] for p in posted)


def test_slack_shows_names_as_they_are_and_no_heading_marks(sample_warehouse, monkeypatch):
    """The summary a chat gets (CHAT): Apprise's HTML-to-Markdown conversion backslash-escaped every
    underscore of plain text (Slack showed jit\\_train\\_step, memory.peak\\_live\\_bytes) and kept
    "###" headings, which Slack does not render. Names now come in code spans, verbatim."""
    from flows import verdict
    from flows.warehouse.store import connect_readonly
    from transforms.trends.night_report import CHAT, MARKDOWN, night_markdown

    with connect_readonly(sample_warehouse) as con:
        at, commit = verdict.incidents_at(con, "2026-11-18"), verdict.run_commit(con, "2026-11-18")
    before = _slack_text(monkeypatch, night_markdown("2026-11-18", commit, at, sections=("new",), style=MARKDOWN))
    assert "jit\\_train\\_step" in before and "### " in before  # what the site's Markdown gives Slack
    text = _slack_text(monkeypatch, night_markdown("2026-11-18", commit, at, sections=("new",), style=CHAT))
    assert "\\_" not in text and "#" not in text
    lines = text.splitlines()
    assert lines[:5] == ["*Dumpscope: run `2026-11-18` (commit `9b03c5e`)*", "",
                         "Last night: *5 new*, 0 still open, 0 fixed, 0 improvements, 0 lost.", "", "*New*"]
    assert "`jax-jit` / `jit_train_step` · regression · `I-b86084d8`" in lines
    assert "`jax-pmap` / `jit__fun` · regression · `I-48d7e96d`" in lines
    assert "`jax-jit / jit_train_step: memory.peak_live_bytes 65.0 KiB → 132.3 KiB (+67.2 KiB); " \
           "memory.temp_bytes 28.0 KiB → 54.0 KiB (+26.0 KiB); +9 more`" in lines


@pytest.mark.parametrize("name", ["<!channel>", "!here> x", "<@U123ABC>", "@U999> y", "a`b`c <!everyone>",
                                  "*bold* _it_", "<https://evil.example|click me>", "[x](javascript:alert(1))",
                                  "&lt;!channel&gt;"])
def test_a_hostile_name_reaches_slack_as_text(name, monkeypatch):
    """A name from a dump never pings a channel, mentions a user or makes a link in Slack: Apprise
    gets HTML and escapes what Slack reads (< > &) in what it converts."""
    from transforms.trends.night_report import CHAT

    text = _slack_text(monkeypatch, f"{CHAT.text(name)} / {CHAT.text(name)} · {CHAT.heading(3, CHAT.text(name))}")
    assert "<!" not in text and "<@" not in text and "<http" not in text
    assert ("&lt;" in text) == ("<" in name)
    assert all(part.strip().startswith("`") for part in text.replace("·", "/").split(" / "))  # each a code span


def test_the_nightly_hands_chats_the_chat_summary(sample_warehouse, monkeypatch):
    """The nightly's announcement: the chat summary (names in code spans, no headings) for targets
    that get HTML, the plain text for text-only ones."""
    import flows.notify
    from flows.nightly import _announce
    from flows.warehouse.store import connect_readonly
    from transforms.trends.rules import Settings

    handed = []
    monkeypatch.setattr(flows.notify, "notify_new", lambda con, targets, run_id, title, body, text, new:
                        handed.append((run_id, title, body, text, new)) or ["x"])
    monkeypatch.delenv(storage_secrets.NOTIFY_VAR, raising=False)
    storage_secrets.export_notify_targets(["json://127.0.0.1:9/hook"])
    with connect_readonly(sample_warehouse) as con:
        assert _announce(con, ["2026-11-18"], Settings()) == 1
    [(run_id, title, body, text, new)] = handed
    assert (run_id, title, new) == ("2026-11-18", "Dumpscope: 5 new incident(s) in run 2026-11-18", 5)
    assert body.startswith("**Dumpscope: run <code>2026-11-18</code> (commit <code>9b03c5e</code>)**\n")
    assert "\n<code>jax-jit</code> / <code>jit_train_step</code> · regression · <code>I-b86084d8</code>\n" in body
    assert not any(line.startswith("#") for line in body.splitlines())  # no heading
    assert text.startswith("Dumpscope: run 2026-11-18 (commit 9b03c5e)\n")
