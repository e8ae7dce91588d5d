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
    assert "Last night: **5 new**" in message["message"] and "jax-pmap / jit" in message["message"]

    again = nightly(bucket=str(bucket), warehouse=warehouse, workers=1)  # a re-run: nothing new, nothing sent
    assert (again.new_incidents, again.notified, len(received)) == (0, 0, 1)
    with wh.connect_readonly(warehouse) as con:
        rows = con.execute("SELECT run_id, target, new_incidents, delivered FROM notifications").fetchall()
    assert rows == [("2026-11-18", storage_secrets_digest(url), 5, True)]
    assert url not in json.dumps(rows)  # the URL (it may hold a token) is not stored


def storage_secrets_digest(url: str) -> str:
    from flows.notify import target_digest

    return target_digest(url)
