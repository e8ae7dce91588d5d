"""--notify: the summary of a run's new incidents reaches a webhook once, never again on a re-run;
a URL Apprise cannot use stops the command before any work; a failed delivery is owed, shown and
retried, never lost and never the end of a night; no name from a dump pings anyone."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import polars as pl
import pytest

from flows import storage_secrets
from flows.warehouse import store as wh

ROOT = Path(__file__).parents[1]
SAMPLE = ROOT / "data" / "sample_bucket"


@contextmanager
def receiver(port: int = 0):
    """A receiver on 127.0.0.1 that keeps every JSON body posted to it: (its json:// URL, the bodies)."""
    received: list[dict] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (the http.server name)
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", port), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"json://127.0.0.1:{server.server_port}/hook", received
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def webhook():
    with receiver() as (url, received):
        yield url, received


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (until a test starts a receiver there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # three nights
def test_new_incidents_are_announced_once(tmp_path, webhook, monkeypatch):
    from flows.nightly import night_in_process as nightly  # the night's announce step, not Prefect's orchestration

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
    from flows.publish.notify import target_digest

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
    from flows.publish.notify import Message

    posted = _posted(monkeypatch, SLACK, lambda run_id, target: Message("Dumpscope", body_markdown, 1))
    return "\n".join(p["attachments"][0]["text"] for p in posted)


SLACK = "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#perf"


def _notifications_db():
    import duckdb

    from flows.warehouse.schema import _create_core

    con = duckdb.connect()
    for table in ("runs", "notifications"):
        con.execute(_create_core(table))
    return con


def _posted(monkeypatch, url: str, render) -> list[dict]:
    """The JSON bodies Apprise's own plugin for ``url`` posts (its HTTP calls caught) for the
    message ``render`` makes of run "r" in that target's form."""
    from flows.publish.notify import notify_new

    posted = _capture(monkeypatch)
    done = notify_new(_notifications_db(), [url], ["r"], render)
    assert (len(done.sent), done.failed) == (1, [])
    return posted


def _capture(monkeypatch) -> list[dict]:
    """Apprise's HTTP calls caught: the JSON bodies they post, each answered 200."""
    import requests

    posted: list[dict] = []

    class Ok:
        status_code, content, text, headers = 200, b"ok", "ok", {}

    def post(*args, **kw):
        posted.append(kw["json"] if kw.get("json") is not None else json.loads(kw["data"]))
        return Ok()

    monkeypatch.setattr(requests, "request", lambda method, url, *a, **kw: post(**kw))
    monkeypatch.setattr(requests, "post", lambda url, *a, **kw: post(**kw))
    return posted


def test_slack_shows_names_as_they_are_and_no_heading_marks(sample_warehouse, monkeypatch):
    """The summary a chat gets (CHAT): Apprise's HTML-to-Markdown conversion backslash-escaped every
    underscore of plain text (Slack showed jit\\_train\\_step, memory.peak\\_live\\_bytes) and kept
    "###" headings, which Slack does not render. Names now come in code spans, verbatim."""
    from flows.verdict import incident_reader
    from flows.warehouse.store import connect_readonly
    from transforms.trends.night_report import CHAT, MARKDOWN, night_markdown

    with connect_readonly(sample_warehouse) as con:
        at, commit = incident_reader.incidents_at(con, "2026-11-18"), incident_reader.run_commit(con, "2026-11-18")
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
    import flows.publish.notify
    from flows.publish.notify import announce
    from flows.publish.notify import Delivery, describe
    from flows.warehouse.store import connect_readonly
    from transforms.trends.rules import Settings

    handed = []

    def fake(con, urls, run_ids, render):
        handed.extend((run_id, url, render(run_id, describe(url))) for run_id in run_ids for url in urls)
        return Delivery(sent=[(run_id, "x") for run_id in run_ids])

    monkeypatch.setattr(flows.publish.notify, "notify_new", fake)
    monkeypatch.delenv(storage_secrets.NOTIFY_VAR, raising=False)
    storage_secrets.export_notify_targets([SLACK, "json://127.0.0.1:9/hook"])
    with connect_readonly(sample_warehouse) as con:
        assert announce(con, ["2026-11-18"], Settings()) == (1, [])
    [(_, _, chat), (_, _, text)] = handed
    assert (chat.title, chat.new_incidents) == ("Dumpscope: 5 new incident(s) in run 2026-11-18", 5)
    assert chat.body.startswith("**Dumpscope: run <code>2026-11-18</code> (commit <code>9b03c5e</code>)**\n")
    assert "\n<code>jax-jit</code> / <code>jit_train_step</code> · regression · <code>I-b86084d8</code>\n" in chat.body
    assert not any(line.startswith("#") for line in chat.body.splitlines())  # no heading
    assert text.title == chat.title
    assert text.body.startswith("Dumpscope: run 2026-11-18 (commit 9b03c5e)\n")


# ---------------------------------------------------------------- an operator's typo: exit 2, before any work

def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != storage_secrets.NOTIFY_VAR} | (env or {})
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT, env=environ, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.integration
def test_a_url_apprise_cannot_use_stops_run_before_any_work(tmp_path):
    """On main the night ran, and every night that opened an incident ended rc 1 with nothing
    published (the ValueError came from inside the night, after the work)."""
    from flows.publish.notify import target_digest

    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    shutil.copytree(SAMPLE / "2026-11-17", bucket / "2026-11-17")
    good, bad = "json://127.0.0.1:9/hook", "notaurl://deploy:s3cr3t-t0ken@hooks.example.com/T0KEN-PATH"
    done = _cli("run", "--bucket", str(bucket), "--warehouse", str(warehouse), "--notify", good, "--notify", bad)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"error: notification target 2 (notaurl://…, {target_digest(bad)}): not a notification URL "
                           "Apprise can use (the forms it reads: https://appriseit.com/services/)\n")
    assert not list(tmp_path.glob("wh*"))  # no warehouse, lock, staging or report: nothing started


@pytest.mark.parametrize("command", [["watch", "--iterations", "1"], ["serve"]])
@pytest.mark.parametrize("value, said", [
    ('["json://127.0.0.1:9/hook", "discord://only-an-id"]', "error: notification target 2 (discord://…, "),
    ("json://127.0.0.1:9/hook", "error: DUMPSCOPE_NOTIFY is not a JSON list of Apprise URLs (strings)\n"),
])
@pytest.mark.integration
def test_watch_and_serve_check_the_environment_s_targets_at_start(tmp_path, command, value, said):
    done = _cli(*command, "--bucket", str(tmp_path / "bucket"), "--warehouse", str(tmp_path / "wh.duckdb"),
                env={storage_secrets.NOTIFY_VAR: value, "PREFECT_API_URL": "http://127.0.0.1:9/api"})
    assert done.returncode == 2 and done.stderr.startswith(said) and len(done.stderr.splitlines()) == 1
    assert "only-an-id" not in done.stderr
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------- a failed delivery: owed, shown, retried

def test_an_unreachable_target_is_owed_shown_and_retried_never_the_end_of_the_night(prefect, tmp_path, monkeypatch):
    """On main the failed message counted as notified (rc 0), was recorded and never sent again."""
    from prefect.logging.configuration import ensure_logging_setup
    from typer.testing import CliRunner

    from flows.cli import app
    from flows.publish.notify import target_digest
    from flows.publish.site import _environment, read_site_data
    from transforms.site import pages

    monkeypatch.delenv(storage_secrets.NOTIFY_VAR, raising=False)
    bucket, warehouse = tmp_path / "bucket", tmp_path / "wh.duckdb"
    for run in ("2026-11-17", "2026-11-18"):
        shutil.copytree(SAMPLE / run, bucket / run)
    port = closed_port()
    url = f"json://127.0.0.1:{port}/hook"
    digest = target_digest(url)
    night = ["run", "--bucket", str(bucket), "--warehouse", str(warehouse), "--workers", "1", "--notify", url]

    # Prefect's console handler is made at its first log line, on the stream it sees then: made inside
    # a CliRunner it writes to that runner's stream, closed by the next invoke (a RecursionError there).
    ensure_logging_setup()
    first = CliRunner().invoke(app, night)
    # Published (both runs, their incidents, the report) and the scheduler told: exit 5, one warning line.
    assert first.exit_code == 5, first.output
    [warning] = [line for line in first.output.splitlines() if line.startswith("warning: ")]
    assert warning.startswith(f"warning: notification of run 2026-11-18 to target {digest} (webhook) failed: ")
    assert warning.endswith(" (retried by the next run)") and str(port) not in warning
    with wh.connect_readonly(warehouse) as con:
        assert con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall() == [("2026-11-17",), ("2026-11-18",)]
        assert con.execute("SELECT count(*) FROM incidents WHERE opened_run = '2026-11-18'").fetchall() == [(5,)]
        [(delivered, attempts, error)] = con.execute("SELECT delivered, attempts, error FROM notifications "
                                                    "WHERE run_id = '2026-11-18' AND target = ?", [digest]).fetchall()
    assert (delivered, attempts) == (False, 1) and error and error in warning
    # The overview page says so.
    context = pages.overview_page(read_site_data(warehouse))
    page = _environment().get_template("overview.md.j2").render(
        **context, run_link=lambda run_id, here="": f"runs/{run_id}.md")
    assert "## Notifications not delivered" in page
    [row] = [line for line in page.splitlines() if f"<code>{digest}</code>" in line]
    assert row.startswith(f"| [2026-11-18](runs/2026-11-18.md) | <code>{digest}</code> | 5 | 1 | 20")
    assert row.endswith(" UTC | " + error + " |") and str(port) not in row

    with receiver(port) as (_, received):  # the target is back: the next run (nothing new in it) delivers
        second = CliRunner().invoke(app, night)
        assert second.exit_code == 0, second.output
        [message] = received
        assert message["title"] == "Dumpscope: 5 new incident(s) in run 2026-11-18"
        assert "Last night: 5 new, " in message["message"]
        third = CliRunner().invoke(app, night)  # delivered once: never again
        assert third.exit_code == 0 and len(received) == 1, third.output
    with wh.connect_readonly(warehouse) as con:
        assert con.execute("SELECT run_id, delivered, attempts, error FROM notifications").fetchall() == [
            ("2026-11-18", True, 2, None)]
    context = pages.overview_page(read_site_data(warehouse))
    assert context["undelivered"] == []


def test_a_delivery_is_bounded_and_its_reason_never_holds_the_url(monkeypatch):
    """A target that takes the connection and never answers, and one that refuses it: both recorded
    failed with a reason, none of which quotes the URL's host, path or token."""
    import flows.publish.notify
    from flows.publish.notify import Message, notify_new

    monkeypatch.setattr(flows.publish.notify, "DELIVERY_SECONDS", 0.5)  # Apprise's own read timeout is 4 s
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)  # the kernel accepts the connection; nobody ever reads or answers
    silent = f"json://127.0.0.1:{mute.getsockname()[1]}/hook/SILENT-t0ken"
    refused = f"json://127.0.0.1:{closed_port()}/hooks/REFUSED-t0ken?key=qs-s3cret"
    con = _notifications_db()
    try:
        done = notify_new(con, [silent, refused], ["r"], lambda run_id, target: Message("t", "body", 1))
    finally:
        mute.close()
    assert done.sent == [] and len(done.failed) == 2
    assert "failed: no answer within 0.5 s (retried by the next run)" in done.failed[0]
    rows = con.execute("SELECT delivered, attempts, error FROM notifications ORDER BY error").fetchall()
    assert [(d, a) for d, a, _ in rows] == [(False, 1), (False, 1)] and all(e for _, _, e in rows)
    said = " ".join(done.failed) + " ".join(e for _, _, e in rows)
    for secret in ("SILENT-t0ken", "REFUSED-t0ken", "qs-s3cret", "127.0.0.1", "hooks"):
        assert secret not in said


def test_a_plugin_that_raises_is_a_failed_delivery_and_the_next_target_still_gets_its_message(monkeypatch):
    """On main an exception from Apprise's notify went up through the night (rc 1, nothing published)."""
    import apprise

    from flows.publish.notify import Message, notify_new, target_digest

    broken, fine = "json://127.0.0.1:9/broken-T0KEN", "json://127.0.0.1:9/fine"

    def notify(sender, *args, **kwargs):
        if "broken-T0KEN" in sender[0].url(privacy=False):
            raise RuntimeError("plugin bug")
        return True

    monkeypatch.setattr(apprise.Apprise, "notify", notify)
    con = _notifications_db()
    done = notify_new(con, [broken, fine], ["r"], lambda run_id, target: Message("t", "body", 1))
    assert done.sent == [("r", target_digest(fine))]
    assert done.failed == [f"notification of run r to target {target_digest(broken)} (webhook) failed: "
                           "RuntimeError: plugin bug (retried by the next run)"]
    assert sorted(con.execute("SELECT target, delivered, attempts, error FROM notifications").fetchall()) == sorted([
        (target_digest(broken), False, 1, "RuntimeError: plugin bug"), (target_digest(fine), True, 1, None)])


def test_a_url_that_reaches_the_flow_anyway_is_a_failed_delivery_not_a_failed_night():
    """A flow run started without the CLI's check (a deployment, a Python call): on main
    notify_new raised ValueError inside the night."""
    from flows.publish.notify import Message, notify_new, target_digest

    con = _notifications_db()
    done = notify_new(con, ["notaurl://x"], ["r"], lambda run_id, target: Message("t", "body", 1))
    assert done.failed == [f"notification of run r to target {target_digest('notaurl://x')} (chat) failed: "
                           "not a notification URL Apprise can use (retried by the next run)"]
    assert con.execute("SELECT run_id, delivered, attempts, error FROM notifications").fetchall() == [
        ("r", False, 1, "not a notification URL Apprise can use")]


# ---------------------------------------------------------------- no name from a dump pings anyone

HOSTILE = "@everyone <!channel> <@123456789012345678> <at>Boss</at> @here [x](http://e) <!subteam^S1|team>"
# What any chat reads as a mention (CHAT_MENTIONS), as Discord, Slack, Teams, Mattermost or a webhook's
# consumer would find it in the text they get.
MENTION = re.compile(r"@(?:everyone|here|channel|all|room)\b|<[!@#&]|<at>|@[0-9]{17}", re.IGNORECASE)


def _hostile_incident() -> pl.DataFrame:
    """One new regression whose every name, headline and cause line is ``HOSTILE``."""
    return pl.DataFrame([{
        "incident_id": "I-1a2b3c4d", "kind": "regression", "status": "new", "impact": 1.0, "job": HOSTILE,
        "program": HOSTILE, "headline": HOSTILE, "cause": f"{HOSTILE}\nsecond line {HOSTILE}", "stacked_on": None,
        "last_good_commit": HOSTILE, "first_bad_commit": "9b03c5e", "last_good_run": HOSTILE, "opened_run": HOSTILE,
        "age_runs": 0, "accepted_by": None, "accepted_note": None}])


def _strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize("url, service, form", [
    ("discord://123456789012345678/abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ab", "discord", "text"),
    ("discord://123456789012345678/abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ab?format=markdown",
     "discord", "html"),
    (SLACK, "slack", "html"),
    ("workflows://prod-01.westus.logic.azure.com:443/abc123/sigabc?api-version=2016-06-01", "teams", "html"),
    ("mmosts://mm.example.com/3ccdd113474722377935511fc85d3dd4", "mattermost", "text"),
    ("json://127.0.0.1:9/hook", "webhook", "text"),
])
def test_a_hostile_name_pings_nobody_on_any_service(url, service, form, monkeypatch):
    """The nightly's summary of a run whose every name is a mention, through Apprise's own plugin
    for each service: no mention in what is posted (title included), no mention entity (Teams),
    no allow_mentions (Discord), no Markdown link where the service reads text as Markdown."""
    from flows.publish.notify import announce
    from flows.publish.notify import describe
    from transforms.trends.rules import Settings

    assert (describe(url).service, describe(url).form) == (service, form)
    monkeypatch.setattr("flows.verdict.incident_reader.incidents_at", lambda con, run_id: _hostile_incident())
    monkeypatch.setattr("flows.verdict.incident_reader.run_commit", lambda con, run_id: HOSTILE)
    posted = _capture(monkeypatch)
    monkeypatch.delenv(storage_secrets.NOTIFY_VAR, raising=False)
    storage_secrets.export_notify_targets([url])
    assert announce(_notifications_db(), [HOSTILE], Settings()) == (1, [])
    [payload] = posted
    text = "\n".join(_strings(payload))
    assert text.count("Boss") >= 7 and text.count("everyone") >= 7  # every name is there, shown
    assert not MENTION.search(text), MENTION.search(text)
    # The title, plain to some services and Markdown to others, holds no name that is not plain.
    assert any(s.startswith("Dumpscope: 1 new incident(s)") for s in _strings(payload)) and " in run " not in text
    assert "allow_mentions" not in payload and "entities" not in json.dumps(payload)
    if form == "html":  # every name of the body is a code span: shown verbatim, never a link (titles are plain)
        assert "[x](" not in "".join(text.split("`")[0::2])
    elif service in ("discord", "mattermost"):  # they show a text message as Markdown: it is escaped
        assert "[x](" not in text and "\\[x\\]\\(http\\:\\/\\/e\\)" in text


@pytest.mark.parametrize("service", ["discord", "slack", "teams", "mattermost", "webhook", "chat"])
def test_chat_text_leaves_no_mention_in_any_service(service):
    from transforms.escape import chat_code, chat_text

    text = chat_text(HOSTILE, service)
    assert not MENTION.search(text) and text.replace("\u200b", "").replace("\\", "") == HOSTILE
    assert not MENTION.search(str(chat_code(HOSTILE, service)).replace("&#60;", "<"))
    if service in ("discord", "mattermost"):  # they read a text message as Markdown
        assert "[x](" not in text and "\\[x\\]\\(http\\:\\/\\/e\\)" in text
    with pytest.raises(ValueError, match="not a notification service"):
        chat_text("x", "irc")


def test_with_a_site_url_the_summary_and_the_messages_link_to_the_incident_pages(sample_warehouse, sample_site,
                                                                                 monkeypatch, tmp_path):
    """``[site] url``: the nightly summary (the report file) and every notification link the run
    and each incident to their pages of the published site, pages the site has."""
    import flows.publish.notify
    from flows.publish.notify import Delivery, announce, describe
    from flows.publish.report import night_report
    from flows.verdict.settings import load_settings
    from flows.warehouse.store import connect_readonly

    settings_file = tmp_path / "dumpscope.toml"
    settings_file.write_text('[site]\nurl = "https://dumps.example.org/nightly/"\n')
    settings = load_settings(settings_file)
    text, counts = night_report(sample_warehouse, "2026-11-18", settings)
    site = "https://dumps.example.org/nightly/"
    assert text.startswith(f"# Dumpscope: run [2026-11-18]({site}runs/2026-11-18.html) (commit")
    linked = [line for line in text.splitlines() if f"]({site}incidents/i-" in line]
    assert len(linked) == counts["new"] + counts["open"] + counts["fixed"] + counts["improvements"] == 5
    for line in linked:  # each page is one the site has
        page = line.split(f"]({site}", 1)[1].split(")", 1)[0]
        assert (sample_site.out / page).is_file(), page

    handed = []

    def fake(con, urls, run_ids, render):
        handed.extend(render(run_id, describe(url)) for run_id in run_ids for url in urls)
        return Delivery(sent=[(run_id, "x") for run_id in run_ids])

    monkeypatch.setattr(flows.publish.notify, "notify_new", fake)
    monkeypatch.delenv(storage_secrets.NOTIFY_VAR, raising=False)
    storage_secrets.export_notify_targets([SLACK, "json://127.0.0.1:9/hook"])
    with connect_readonly(sample_warehouse) as con:
        announce(con, ["2026-11-18"], settings)
    chat, plain = handed
    assert chat.body.count(f"]({site}incidents/i-") == plain.body.count(f" ({site}incidents/i-") == 5


def test_a_run_in_a_process_that_goes_on_leaves_no_target_or_storage_option_behind(tmp_path):
    """`run` hands its targets and storage options to its night through the environment; called
    in a process that goes on (a CliRunner, a notebook), it takes them back when it ends, or the
    process's next night would announce to this run's targets."""
    from typer.testing import CliRunner

    from flows.cli import app

    res = CliRunner().invoke(app, ["run", "--bucket", str(tmp_path / "no-such-bucket"), "--warehouse", str(tmp_path / "w.duckdb"),
                                   "--notify", "json://127.0.0.1:9/hook", "--storage-option", "anon=true"])
    assert res.exit_code == 2, res.output
    assert storage_secrets.NOTIFY_VAR not in os.environ and storage_secrets.ENV_VAR not in os.environ
