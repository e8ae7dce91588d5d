"""The deployment files under examples/ (the README's "Deploying it") are what they say: every
dumpscope command in them parses as the CLI declares it, the settings load, the GitHub Actions
job is valid YAML whose `dumpscope check` step runs against a published snapshot."""

from __future__ import annotations

import configparser
import contextlib
import functools
import http.server
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
import typer.main
import yaml
from typer.testing import CliRunner

from flows.cli import app

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"


def _dumpscope_argv(line: str) -> list[str]:
    """The arguments of the `dumpscope` command in a shell line (what follows `.../dumpscope`)."""
    words = shlex.split(line, comments=True)
    at = next(i for i, w in enumerate(words) if w == "dumpscope" or w.endswith("/dumpscope"))
    argv = words[at + 1:]
    return argv[:argv.index(">>")] if ">>" in argv else argv[:argv.index(">")] if ">" in argv else argv


def _parses(argv: list[str]) -> None:
    """The command and every option of ``argv`` are the CLI's (click parses them without running)."""
    group = typer.main.get_command(app)
    command = group.commands[argv[0]]
    command.make_context(argv[0], list(argv[1:]))


def _unit(name: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read(EXAMPLES / name)
    return unit


def test_the_systemd_units_start_the_server_and_serve_a_whole_night():
    server, serve = _unit("prefect-server.service"), _unit("dumpscope-serve.service")
    assert "prefect server start --host 127.0.0.1 --port 4200" in server["Service"]["ExecStart"]
    assert serve["Unit"]["Requires"] == "prefect-server.service"
    env = serve["Service"]["Environment"]  # configparser keeps the last Environment= line
    assert "PREFECT_" in env or "DUMPSCOPE_" in env
    argv = _dumpscope_argv(serve["Service"]["ExecStart"])
    _parses(argv)
    assert argv[0] == "serve" and {"--site", "--publish", "--fail-on", "--settings"} <= set(argv)
    assert "PREFECT_API_URL=http://127.0.0.1:4200/api" in (EXAMPLES / "dumpscope-serve.service").read_text()


def test_the_systemd_units_wait_for_the_network_and_may_write_where_they_publish():
    """On main neither unit wanted network-online.target (After= alone orders nothing that is not
    started), and the serve unit published to /var/www/dumpscope: a link switched in /var/www,
    which its user may not write."""
    for name in ("prefect-server.service", "dumpscope-serve.service"):
        unit = _unit(name)
        assert unit["Unit"]["Wants"] == "network-online.target", name
        assert "network-online.target" in unit["Unit"]["After"].split(), name
        assert (unit["Service"]["User"], unit["Service"]["Group"]) == ("dumpscope", "dumpscope"), name
    text = (EXAMPLES / "dumpscope-serve.service").read_text()
    argv = _dumpscope_argv(_unit("dumpscope-serve.service")["Service"]["ExecStart"])
    publish = Path(argv[argv.index("--publish") + 1])
    # The directory DEST's link is switched in is made the service user's by the install steps.
    assert f"install -d -o dumpscope -g dumpscope /srv/dumpscope {publish.parent}" in text
    crontab = _dumpscope_argv((EXAMPLES / "crontab").read_text().splitlines()[-1].split("&&")[-1])
    assert crontab[crontab.index("--publish") + 1] == str(publish)


@pytest.mark.integration
def test_systemd_reads_the_units_without_a_warning(tmp_path):
    """systemd's own parser (systemd-analyze verify): an unknown key or section is only a warning
    to systemd, which then ignores it; the executables are named by the install, not here."""
    for name in ("prefect-server.service", "dumpscope-serve.service"):
        text = (EXAMPLES / name).read_text()
        (tmp_path / name).write_text(re.sub(r"/srv/dumpscope/\.venv/bin/\w+", "/bin/true", text))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", "prefect-server.service", "dumpscope-serve.service"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_crontab_line_runs_a_whole_night():
    [line] = [ln for ln in (EXAMPLES / "crontab").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    schedule, command = line.split(None, 5)[:5], line.split(None, 5)[5]
    assert schedule == ["0", "2", "*", "*", "*"]
    argv = _dumpscope_argv(command.split("&&")[-1])
    _parses(argv)
    assert argv[0] == "run" and {"--site", "--publish", "--fail-on"} <= set(argv)


@pytest.mark.integration
def test_the_crontab_line_exports_the_secrets_and_mails_a_status_that_is_not_0(prefect_home, tmp_path):
    """The crontab line, run by /bin/sh as cron runs it (a bare environment), with the paths moved
    under tmp_path: the secrets file's variables reach dumpscope (the bucket's S3 credentials,
    the notification target), the night publishes its site and snapshot (which carries the
    settings' [site] url), and the exit status 4 (--fail-on new) is one line on stdout, which
    cron mails; a night with nothing new mails nothing. On main the file was sourced without
    `set -a` (its variables reached no command) and every line went to the log."""
    import duckdb

    from tests.moto_s3 import moto_s3
    from tests.test_notify import receiver

    [line] = [ln for ln in (EXAMPLES / "crontab").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    srv, www, secrets = tmp_path / "srv", tmp_path / "www", tmp_path / "dumpscope.env"
    srv.mkdir()
    www.mkdir()
    (srv / ".venv").symlink_to(ROOT / ".venv")
    shutil.copyfile(EXAMPLES / "dumpscope.toml", srv / "dumpscope.toml")
    command = (line.split(None, 5)[5].replace("/srv/dumpscope", str(srv)).replace("/var/www/dumpscope", str(www))
               .replace("/etc/dumpscope.env", str(secrets)))
    cron_env = {"HOME": str(tmp_path), "LOGNAME": "dumpscope", "SHELL": "/bin/sh", "PATH": "/usr/bin:/bin",
                "PREFECT_HOME": str(prefect_home(tmp_path / "prefect-home")), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    with moto_s3("dumps") as (endpoint, client), receiver() as (hook, received):
        for night in ("2026-11-17", "2026-11-18"):
            for f in sorted((ROOT / "data" / "sample_bucket" / night).rglob("*")):
                if f.is_file():
                    client.upload_file(str(f), "dumps", f"nightly/{f.relative_to(ROOT / 'data' / 'sample_bucket').as_posix()}")
        secrets.write_text(f"DUMPSCOPE_NOTIFY='[\"{hook}\"]'\nAWS_ACCESS_KEY_ID=testing\nAWS_SECRET_ACCESS_KEY=testing\n"
                           f"AWS_DEFAULT_REGION=us-east-1\nAWS_ENDPOINT_URL_S3={endpoint}\n")
        nights = [subprocess.run(["/bin/sh", "-c", command], env=cron_env, capture_output=True, text=True, timeout=600)
                  for _ in range(2)]
    log = (srv / "nightly.log").read_text()
    first, again = nights
    assert (first.returncode, first.stdout, first.stderr) == (
        0, f"dumpscope run exited with status 4 (see {srv}/nightly.log)\n", ""), log[-3000:]
    assert (again.returncode, again.stdout, again.stderr) == (0, "", ""), log[-3000:]  # nothing new: no mail
    assert len(received) == 1 and "new incident" in received[0]["title"], received
    assert log.count("Notifications: 1 message(s) sent.") == 1
    assert log.count("Notifications: nothing new sent: this night loaded nothing new") == 1  # the second night
    assert f"Published: {www}/site (" in log and (www / "site" / "index.html").is_file()
    with duckdb.connect(str(www / "site" / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("SELECT value FROM schema_info WHERE key = 'site_url'").fetchall() == [
            ("https://dumps.example.org/nightly/",)]


def test_the_example_settings_load_as_written():
    from flows.verdict.settings import load_settings

    settings = load_settings(EXAMPLES / "dumpscope.toml")
    assert settings.site_url == "https://dumps.example.org/nightly/"
    assert settings.commit_url.endswith("/commit/{commit}") and "{base}...{head}" in settings.compare_url
    assert (settings.floor_bytes, settings.keep_records_runs) == (4096, 7)
    assert settings.series_patterns == {r"SyncTensorsGraph\.\d+": "train_step"}


def _steps() -> list[dict]:
    job = yaml.safe_load((EXAMPLES / "github" / "dumpscope-check.yml").read_text())
    assert job[True] == "pull_request" or job.get("on") == "pull_request"  # YAML 1.1 reads `on` as True
    assert job["permissions"]["pull-requests"] == "write"
    return job["jobs"]["check"]["steps"]


def _check_and_comment() -> tuple[dict, str, str]:
    """The job's check step, its `dumpscope check` line, and the file the comment step posts."""
    steps = _steps()
    [check] = [s for s in steps if "dumpscope check" in s.get("run", "")]
    [comment] = [s for s in steps if "gh pr comment" in s.get("run", "")]
    [line] = [ln for ln in check["run"].splitlines() if "dumpscope check" in ln]
    body = shlex.split(comment["run"])[shlex.split(comment["run"]).index("--body-file") + 1]
    return check, line, body


def test_the_github_actions_job_installs_dumpscope_with_its_constraints():
    """Without them pip took whatever versions it found (the stack's pins: docs/deploy.md)."""
    steps = _steps()
    [get] = [s for s in steps if s.get("with", {}).get("repository")]
    [install] = [s for s in steps if "pip install" in s.get("run", "")]
    source = get["with"]["path"]
    assert shlex.split(install["run"]) == ["pip", "install", "-c", f"{source}/constraints.txt", f"./{source}"]
    assert (ROOT / "constraints.txt").is_file()


def _published(sample_site, sample_warehouse, www: Path, site_url: str | None):
    from flows.publish.release import release

    release(sample_site.out, sample_warehouse, str(www), site_url=site_url)


def test_the_github_actions_job_checks_against_the_published_snapshot_and_comments(sample_warehouse, sample_site,
                                                                                     tmp_path, monkeypatch):
    _check, line, body = _check_and_comment()
    argv = _dumpscope_argv(line)
    assert line.split(" > ", 1)[1].split()[0] == body  # the comment is the check's Markdown
    # The step as the job runs it: last night's snapshot published and served over HTTP, a
    # change's dumps (here a copy of the last sample night) in ci-dumps/.
    _published(sample_site, sample_warehouse, tmp_path / "www", None)
    with _serving(tmp_path / "www") as base:
        shutil.copytree(ROOT / "data" / "sample_bucket" / "2026-11-20", tmp_path / "ci-dumps")
        monkeypatch.chdir(tmp_path)
        env = {"DUMPSCOPE_WAREHOUSE_URL": f"{base}/warehouse.duckdb"}
        argv = [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], a) for a in argv]
        out = CliRunner().invoke(app, argv)
    assert out.exit_code == 0, out.output  # the sample's last night against itself: nothing new
    assert out.stdout.startswith("### Dumpscope check against run ")


@pytest.mark.integration
def test_the_check_step_comments_links_to_the_pages_or_why_check_refused(sample_warehouse, sample_site, tmp_path):
    """The check step, run by bash as the job runs it, against a snapshot published by a night whose
    settings have [site] url: the comment links to the run, incident and series pages, each of
    which the published site serves. On main the comment had no link (the snapshot did not carry
    the URL and the job passes no settings), and was empty when check refused (exit 2)."""
    from tests.test_check import EVAL_HLO, ROOT_LINE, WITH_ALL_REDUCE, edit_gz

    check, _line, body = _check_and_comment()
    job = tmp_path / "job"
    shutil.copytree(ROOT / "data" / "sample_bucket" / "2026-11-20", job / "ci-dumps")
    edit_gz(job / "ci-dumps" / EVAL_HLO, ROOT_LINE, WITH_ALL_REDUCE)  # the change adds an all-reduce
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # the venv's dumpscope, as pip installs it

    def step(url: str) -> tuple[int, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DUMPSCOPE_", "PREFECT_API"))}
        done = subprocess.run(["bash", "-e", "-c", check["run"]], cwd=job, capture_output=True, text=True, timeout=300,
                              env=env | {"PATH": path, "DUMPSCOPE_WAREHOUSE_URL": url})
        return done.returncode, (job / body).read_text()

    with _serving(tmp_path / "www") as base:
        _published(sample_site, sample_warehouse, tmp_path / "www", f"{base}/")
        status, comment = step(f"{base}/warehouse.duckdb")
        assert status == 4, comment  # --fail-on new: the regression fails the step, and is commented
        links = re.findall(r"\]\((http://[^)]+)\)", comment)
        assert {link.removeprefix(base).split("/")[1] for link in links} == {"runs", "incidents", "series"}, comment
        assert f"against run [<code>2026-11-20</code>]({base}/runs/2026-11-20.html)" in comment
        assert re.search(r"- \*\*regression\*\* jax-jit / \[jit_eval_metrics\]\(http://[^)]+/series/jax-jit-jit-eval"
                         r"-metrics-xla-hlo-after-optimizations-[0-9a-f]{16}\.html\)", comment), comment
        for link in set(links):  # every page the comment links to is on the published site
            with urllib.request.urlopen(link, timeout=30) as page:
                assert page.status == 200
        status, comment = step(f"{base}/nothing-here/warehouse.duckdb")
    assert status == 2
    head, said, tail = comment.split("\n\n")
    assert (head, tail) == ("### Dumpscope check could not run (exit status 2)", "The job's log has check's whole output.\n")
    assert said.startswith(f"    error: --warehouse {base}/nothing-here/warehouse.duckdb: cannot fetch it (") and (
        "404" in said and "\n" not in said), comment


@contextlib.contextmanager
def _serving(directory: Path):
    """A static web server on 127.0.0.1 for ``directory`` (which may appear later): its base URL."""
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
