"""What ``dumpscope run`` prints: plain text for a person (the verdict line, each new incident
with its cause and a ``dumpscope diff`` to paste, where the report and the site are), and an
operator's mistake in one line, exit 2, before Prefect is imported or started."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
VERDICT = "Last night (2026-11-20, commit 1a8e6b4): 5 new, 10 still open, 2 fixed, 2 improvements, 0 lost."
PMAP_DIFF = "  dumpscope diff 2026-11-19 2026-11-20 --series 'jax-pmap/jit__fun/*'"
MARKUP = re.compile(r"&#?\w+;|</?[a-z]+>|\*\*|`")  # an HTML entity or tag, Markdown emphasis or code


def _incident(**fields) -> dict:
    row = dict(status="new", age_runs=1, incident_id="I-00000001", job="jax-jit", program="jit_step", kind="regression",
               opened_run="2026-11-20", opened_at=None, last_good_run="2026-11-19", last_good_commit="a",
               first_bad_commit="b", closed_run=None, closed_how=None, headline="jax-jit / jit_step: x 1 → 2 (+1)",
               cause="fusion grew\nanother line", metrics=None, series=None, impact=1.0, accepted_by=None,
               accepted_note=None, stacked_on=None)
    return row | fields


def test_the_summary_of_the_sample_is_plain_text_in_a_few_lines(sample_warehouse):
    """On main: the 38-row counter table and the report's Markdown (<code>, &#95;, **) in Prefect's log."""
    from flows.commands.night import NightOptions
    from flows.commands.night import summary_lines
    from flows.nightly import NightSummary

    night = NightOptions(bucket="data/sample_bucket", warehouse=sample_warehouse, site_dir=Path("site"))
    lines = summary_lines(NightSummary(seen=184, skipped=184), night)
    assert lines[:3] == ["Nothing new in the bucket (184 dump(s) loaded already, 0 still settling).", "", VERDICT]
    assert lines[-2:] == [f"Report: {sample_warehouse.with_suffix('.report.md')}", "Site: site/index.html"]
    assert PMAP_DIFF in lines
    assert [line.split(" ", 2)[:2] for line in lines if line.startswith("I-")] == [
        ["I-c2dd8bab", "regression:"], ["I-a4cd47e9", "regression:"], ["I-09fe0484", "regression:"],
        ["I-e8a66b9c", "regression:"], ["I-2c6ca158", "regression:"]]
    assert len(lines) <= 30
    assert [line for line in lines if MARKUP.search(line)] == []


def test_with_a_site_url_the_summary_gives_the_run_s_page_and_each_new_incident_s(sample_warehouse, tmp_path):
    """On main the terminal showed no page even with [site] url (the report and the chats had them)."""
    from flows.commands.night import NightOptions
    from flows.commands.night import summary_lines
    from flows.nightly import NightSummary
    from transforms.escape import slug

    settings = tmp_path / "dumpscope.toml"
    settings.write_text('[site]\nurl = "https://dumps.example.org/nightly"\n')
    night = NightOptions(bucket="data/sample_bucket", warehouse=sample_warehouse, settings=settings)
    lines = summary_lines(NightSummary(seen=184, skipped=184), night)
    assert lines[2:4] == [VERDICT, "  page: https://dumps.example.org/nightly/runs/2026-11-20.html"]
    new = [line.split()[0] for line in lines if line.startswith("I-")]
    assert len(new) == 5 and [line for line in lines if line.startswith("  page: ") and "/incidents/" in line] == [
        f"  page: https://dumps.example.org/nightly/incidents/{slug(i)}.html" for i in new]
    assert lines[lines.index(PMAP_DIFF) + 1].startswith("  page: https://dumps.example.org/nightly/incidents/i-")


def test_with_notification_targets_the_summary_says_what_was_sent_or_why_nothing(sample_warehouse, monkeypatch):
    """On main a night with --notify that sent nothing (a re-run) said nothing about it."""
    from flows.commands.night import NightOptions
    from flows.commands.night import summary_lines
    from flows.nightly import NightSummary

    night = NightOptions(bucket="data/sample_bucket", warehouse=sample_warehouse)
    assert not [line for line in summary_lines(NightSummary(seen=184, skipped=184), night) if "Notif" in line]
    monkeypatch.setenv("DUMPSCOPE_NOTIFY", '["json://127.0.0.1:9000/hook"]')
    for summary, said in (
            (NightSummary(seen=184, skipped=184), "nothing new sent: this night loaded nothing new, and a run's new "
             "incidents are sent once, by the night that loads it (a re-run never sends them again)."),
            (NightSummary(seen=190, new=6, skipped=184), "nothing new sent: the runs this night loaded opened no "
                                                         "regression or failure."),
            (NightSummary(seen=190, new=6, new_incidents=2, notified=1), "1 message(s) sent.")):
        assert summary_lines(summary, night)[-1] == f"Notifications: {said}"
    owed = NightSummary(seen=184, skipped=184, undelivered=["notification of run 2026-11-20 to json failed: refused"])
    assert "Notif" not in summary_lines(owed, night)[-1]  # its warning says it


def test_a_hostile_name_pastes_as_itself_and_shows_its_control_characters():
    from transforms.trends.night_report import night_brief

    job, program = "it's; rm -rf ~", "jit_\x1b[31mred\nx"
    at = pl.DataFrame([_incident(job=job, program=program, headline=f"{job} / {program}: x 1 → 2")])
    lines = night_brief("2026-11-20", "b", at)
    command = lines[-1].strip()
    assert command == "dumpscope diff 2026-11-19 2026-11-20 --series 'it'\"'\"'s; rm -rf ~/jit_␛[31mred x/*'"
    assert shlex.split(command)[-2:] == ["--series", "it's; rm -rf ~/jit_␛[31mred x/*"]
    assert lines[2] == "I-00000001 regression: it's; rm -rf ~ / jit_␛[31mred x: x 1 → 2"
    assert not any(ch < " " for line in lines for ch in line)


def test_new_incidents_past_the_limit_are_a_command_away():
    from transforms.trends.night_report import night_brief

    at = pl.DataFrame([_incident(incident_id=f"I-0000000{i}", impact=float(i), cause="one line") for i in range(1, 8)])
    lines = night_brief("2026-11-20", "b", at, limit=2)
    assert lines == [
        "Last night (2026-11-20, commit b): 7 new, 0 still open, 0 fixed, 0 improvements, 0 lost.",
        "", "I-00000007 regression: jax-jit / jit_step: x 1 → 2 (+1)", "  cause: one line",
        "  dumpscope diff 2026-11-19 2026-11-20 --series 'jax-jit/jit_step/*'",
        "", "I-00000006 regression: jax-jit / jit_step: x 1 → 2 (+1)", "  cause: one line",
        "  dumpscope diff 2026-11-19 2026-11-20 --series 'jax-jit/jit_step/*'",
        "", "… and 5 more new: dumpscope incidents --status new"]


# ------------------------------------------------------------ the CLI, in a process of its own

# Runs the CLI in this process and says afterwards whether Prefect was imported.
_PROBE = ("import sys\nfrom flows.cli import main\ntry:\n    main()\nfinally:\n"
          "    print('prefect imported' if 'prefect' in sys.modules else 'prefect not imported', file=sys.stderr)\n")


def _dumpscope(args: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {**os.environ, "PREFECT_HOME": str(cwd / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    base.pop("PREFECT_API_URL", None)
    base.pop("DUMPSCOPE_NOTIFY", None)
    env = base | (env or {})
    return subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


MISTAKES = {
    "no bucket": (["--bucket", "/typo"], "error: no bucket at /typo"),
    "warehouse is a directory": (["--warehouse", "."], "error: --warehouse . is a directory: give the warehouse file, "
                                                       "e.g. warehouse.duckdb"),
    "warehouse is no DuckDB file": (["--warehouse", "notes.txt"], "error: --warehouse notes.txt is not a DuckDB file"),
    "warehouse under a file": (["--warehouse", "notes.txt/wh.duckdb"],
                               "error: --warehouse notes.txt/wh.duckdb: {cwd}/notes.txt is a file, not a directory"),
    "settings file missing": (["--settings", "nope.toml"], None),
    "notify URL": (["--notify", "nonsense"], None),
    "summary JSON in no directory": (["--summary-json", "nope/summary.json"],
                                     "error: --summary-json nope/summary.json: {cwd}/nope does not exist"),
    "summary JSON under a file": (["--summary-json", "notes.txt/summary.json"],
                                  "error: --summary-json notes.txt/summary.json: {cwd}/notes.txt is a file, not a directory"),
    "Dask address no address": (["--dask-address", "scheduler"],
                                 "error: --dask-address scheduler: not a scheduler's address: give tcp://HOST:PORT"),
    # Port 9 (discard): nothing listens there. On main the night started and failed at its parse tasks.
    "no Dask scheduler there": (["--dask-address", "tcp://127.0.0.1:9"],
                                "error: --dask-address tcp://127.0.0.1:9: no scheduler answers there (Connection refused)"),
    # On main the night ran, then: the file moved aside and a site in its place (exit 0); the
    # directory of a letter swapped aside and removed; IsADirectoryError tracebacks (exit 1).
    "site is a file": (["--warehouse", "wh.duckdb", "--site", "notes.txt"],
                       "error: --site notes.txt is a file, not a directory: give the directory the site is built into"),
    "site in a directory of other files": (["--warehouse", "wh.duckdb", "--site", "letters"],
                                           "error: --site letters holds files that are not a site, and the build "
                                           "replaces the directory whole: give a new directory, or one a build made"),
    "report is a directory": (["--warehouse", "wh.duckdb", "--report", "letters"],
                              "error: --report letters is a directory: give the report's file"),
    "report under a file": (["--warehouse", "wh.duckdb", "--report", "notes.txt/report.md"],
                            "error: --report notes.txt/report.md: {cwd}/notes.txt is a file, not a directory"),
    "summary JSON is a directory": (["--warehouse", "wh.duckdb", "--summary-json", "letters"],
                                    "error: --summary-json letters is a directory: give the summary's file"),
}


def test_a_mistake_is_one_line_whatever_the_name_holds(tmp_path):
    """A name with a line break (a bucket path, an address) is said on one line, as spaces."""
    from typer.testing import CliRunner

    from flows.cli import app

    for args, said in ((["--bucket", "/typo\nsecond line"], "error: no bucket at /typo second line"),
                       (["--dask-address", "tcp://127.0.0.1:9\n<img src=x>"],
                        "error: --dask-address tcp://127.0.0.1:9 <img src=x>: not a scheduler's address: "
                        "give tcp://HOST:PORT")):
        out = CliRunner().invoke(app, ["run", "--warehouse", str(tmp_path / "w.duckdb"), *args])
        assert (out.exit_code, out.output.splitlines()) == (2, [said]), out.output


def test_a_dask_address_is_checked_by_connecting_to_it():
    """--dask-address: a scheduler's address that accepts a connection, or exit 2 in one line."""
    import socket

    from flows.commands import preflight
    from flows.errors import CommandError

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        for address in (f"tcp://127.0.0.1:{port}", f"127.0.0.1:{port}", f"tls://localhost:{port}/"):
            preflight.dask_scheduler(address)
    for address in ("tcp://127.0.0.1", "http://127.0.0.1:8786", "tcp://127.0.0.1:99999", "tcp://:8786",
                    "tcp://127.0.0.1:8786/x", "tcp://user@127.0.0.1:8786", "ucx://127.0.0.1:8786"):
        with pytest.raises(CommandError, match="not a scheduler's address: give tcp://HOST:PORT") as raised:
            preflight.dask_scheduler(address)
        assert raised.value.exit_code == 2 and str(raised.value).startswith(f"--dask-address {address}: ")
    with pytest.raises(CommandError, match=r"tcp://127\.0\.0\.1:\d+: no scheduler answers there \(Connection refused\)"):
        preflight.dask_scheduler(f"tcp://127.0.0.1:{port}")  # closed now


@pytest.mark.integration
@pytest.mark.parametrize("mistake", MISTAKES, ids=str)
def test_an_operators_mistake_is_one_line_exit_2_before_prefect(mistake, tmp_path):
    """On main: a warehouse that is a directory or no DuckDB file started Prefect and the night,
    and ended after about a minute with a traceback (exit 1)."""
    (tmp_path / "notes.txt").write_text("not a warehouse\n")
    (tmp_path / "letters").mkdir()
    (tmp_path / "letters" / "letter.txt").write_text("dear reader\n")
    (tmp_path / "data").symlink_to(ROOT / "data")
    args, said = MISTAKES[mistake]
    done = _dumpscope(["run", *args], tmp_path, timeout=60)
    *lines, probe = done.stderr.splitlines()
    assert (done.returncode, done.stdout, probe) == (2, "", "prefect not imported"), done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    if said:
        assert lines == [said.format(cwd=tmp_path)]
    assert not (tmp_path / "data" / "warehouse.duckdb").exists() or (ROOT / "data" / "warehouse.duckdb").exists()
    assert (tmp_path / "notes.txt").read_text() == "not a warehouse\n" and os.listdir(tmp_path / "letters") == ["letter.txt"]


NO_CREDENTIALS = ("Unable to locate credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the "
                  "environment, or --storage-option key=... --storage-option secret=...; anon=true for a public bucket")


@pytest.mark.integration
def test_an_s3_bucket_or_destination_without_credentials_is_one_line_exit_2_before_prefect(tmp_path):
    """On main an s3:// bucket without credentials was botocore's NoCredentialsError, 102 lines and
    exit 1; an s3:// --publish without them, or to a bucket that does not exist, failed once
    the whole night had run, at its publish."""
    from tests.moto_s3 import moto_s3

    (tmp_path / "data").symlink_to(ROOT / "data")
    with moto_s3("dumps") as (endpoint, _client):
        aws = {"AWS_ENDPOINT_URL_S3": endpoint, "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
               "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
        keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        for args, env, said in (
                (["--bucket", "s3://dumps/nightly"], aws,
                 f"error: access to the bucket s3://dumps/nightly denied ({NO_CREDENTIALS})"),
                (["--bucket", "s3://dumps/nightly"], aws | {"AWS_ACCESS_KEY_ID": "testing"},
                 "error: access to the bucket s3://dumps/nightly denied (Partial credentials found in env, missing: "
                 f"AWS_SECRET_ACCESS_KEY{NO_CREDENTIALS.removeprefix('Unable to locate credentials')})"),
                (["--publish", "s3://dumps/site"], aws,
                 f"error: --publish access to the bucket s3://dumps/site denied ({NO_CREDENTIALS})"),
                (["--publish", "s3://nosuch/site"], aws | keys, "error: --publish no bucket at s3://nosuch/site")):
            with pytest.MonkeyPatch.context() as mp:  # only the AWS_* variables of the case
                for k in [k for k in os.environ if k.startswith("AWS_")]:
                    mp.delenv(k)
                done = _dumpscope(["run", *args], tmp_path, timeout=120, env=env)
            *lines, probe = done.stderr.splitlines()
            assert (done.returncode, done.stdout, probe) == (2, "", "prefect not imported"), done.stderr
            assert lines == [said], done.stderr


@pytest.mark.integration
def test_a_publish_directory_this_user_may_not_write_is_one_line_exit_2_before_prefect(tmp_path):
    """--publish DIR/site switches a link in DIR: a DIR this user may not write failed the night at
    its publish, after all its work. Run as a user without root's powers (a user namespace), on a
    directory of mode 555."""
    (tmp_path / "data").symlink_to(ROOT / "data")
    (tmp_path / "www").mkdir(mode=0o555)
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run(["unshare", "--user", "--map-user=1000", "--map-group=1000", sys.executable, "-c", _PROBE,
                           "run", "--warehouse", "wh.duckdb", "--publish", "www/site"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    *lines, probe = done.stderr.splitlines()
    assert (done.returncode, done.stdout, probe) == (2, "", "prefect not imported"), done.stderr
    www = tmp_path / "www"
    assert lines == [f"error: --publish www/site: this user may not write {www} (each release goes into {www}/site.releases, "
                     "and DEST, a link to it, is switched in its directory): make that directory this user's, or "
                     "give a DEST in one that is"]


@pytest.mark.integration
@pytest.mark.parametrize("url, said", [
    ("http://127.0.0.1:9/api", "no Prefect server answers there (Connection refused)"),  # port 9: nothing listens
    ("127.0.0.1:4200/api", "not an http(s) URL: e.g. http://127.0.0.1:4200/api"),
])
def test_a_prefect_server_that_is_not_there_is_one_line_exit_2_before_prefect(url, said, tmp_path):
    """On main: Prefect's traceback once the night began (PREFECT_API_URL with a typo, a server not started)."""
    (tmp_path / "data").symlink_to(ROOT / "data")
    done = _dumpscope(["run"], tmp_path, timeout=60, env={"PREFECT_API_URL": url})
    *lines, probe = done.stderr.splitlines()
    assert (done.returncode, done.stdout, probe) == (2, "", "prefect not imported"), done.stderr
    assert lines == [f"error: PREFECT_API_URL {url}: {said}"]


def test_a_prefect_api_or_a_server_asking_for_a_key_passes_and_another_web_server_is_one_line(monkeypatch):
    """Prefect's /health says true; Prefect Cloud's workspace URLs may answer 401 without a key: a
    server is there all the same. Another web server at the address (a typo of the port) was
    taken for one, and the night ended in Prefect's 81-line traceback."""
    import http.server
    import threading

    from flows.commands import preflight
    from flows.errors import CommandError

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            prefect = self.path == "/api/health"
            self.send_response(200 if prefect or self.path.startswith("/web") else 404 if "nginx" in self.path else 401)
            self.end_headers()
            self.wfile.write(b"true" if prefect else b"<html>welcome</html>")

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_port}"
        try:
            for path in ("/api", "/api/", "/api/accounts/a/workspaces/w"):
                monkeypatch.setenv("PREFECT_API_URL", base + path)
                preflight.prefect_api()
            for path, said in (("/web", "did not say true"), ("/nginx/api", "HTTP 404")):
                monkeypatch.setenv("PREFECT_API_URL", base + path)
                with pytest.raises(CommandError) as refused:
                    preflight.prefect_api()
                assert refused.value.exit_code == 2 and said in str(refused.value)
                assert str(refused.value).startswith(f"PREFECT_API_URL {base}{path}: answers, but not as a Prefect API")
        finally:
            server.shutdown()
    monkeypatch.delenv("PREFECT_API_URL")
    preflight.prefect_api()  # unset: the command starts its own


@pytest.mark.integration
def test_run_on_the_sample_prints_plain_text_and_no_prefect_log(sample_warehouse, prefect_home, tmp_path):
    """A re-run of the sample's night through the CLI and its Prefect flow: on main ~180 lines of
    Prefect log lines holding the counter table and the report's Markdown."""
    shutil.copyfile(sample_warehouse, tmp_path / "wh.duckdb")
    done = _dumpscope(["run", "--bucket", str(ROOT / "data" / "sample_bucket"), "--warehouse", "wh.duckdb",
                       "--workers", "1"], tmp_path, timeout=300,
                     env={"PREFECT_HOME": str(prefect_home(tmp_path / "prefect-home"))})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == ["Nothing new in the bucket (184 dump(s) loaded already, 0 still settling).", "", VERDICT]
    assert PMAP_DIFF in lines and lines[-2:] == ["Report: wh.report.md", "Site: not built (--site DIR builds it)"]
    assert len(lines) <= 30 and [line for line in lines if MARKUP.search(line)] == []
    assert [line for line in done.stderr.splitlines() if "| INFO" in line or "Flow run" in line] == []
