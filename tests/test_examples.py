"""The deployment files under examples/ (the README's "Deploying it") are what they say: every
dumpscope command in them parses as the CLI declares it, the settings load, the GitHub Actions
job is valid YAML whose `dumpscope check` step runs against a published snapshot."""

from __future__ import annotations

import configparser
import functools
import http.server
import re
import shlex
import shutil
import threading
from pathlib import Path

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
    assert "PREFECT_" in env
    argv = _dumpscope_argv(serve["Service"]["ExecStart"])
    _parses(argv)
    assert argv[0] == "serve" and {"--site", "--publish", "--fail-on", "--settings"} <= set(argv)
    assert "PREFECT_API_URL=http://127.0.0.1:4200/api" in (EXAMPLES / "dumpscope-serve.service").read_text()


def test_the_crontab_line_runs_a_whole_night():
    [line] = [ln for ln in (EXAMPLES / "crontab").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    schedule, command = line.split(None, 5)[:5], line.split(None, 5)[5]
    assert schedule == ["0", "2", "*", "*", "*"]
    argv = _dumpscope_argv(command.split("&&")[-1])
    _parses(argv)
    assert argv[0] == "run" and {"--site", "--publish", "--fail-on"} <= set(argv)


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


def test_the_github_actions_job_checks_against_the_published_snapshot_and_comments(sample_warehouse, sample_site,
                                                                                     tmp_path, monkeypatch):
    from flows.publish.release import release

    steps = _steps()
    [check] = [s for s in steps if "dumpscope check" in s.get("run", "")]
    [comment] = [s for s in steps if "gh pr comment" in s.get("run", "")]
    argv = _dumpscope_argv(check["run"])
    report = check["run"].rsplit(">", 1)[1].strip()
    assert report in comment["run"]  # the comment is the check's Markdown
    # The step as the job runs it: last night's snapshot published and served over HTTP, a
    # change's dumps (here a copy of the last sample night) in ci-dumps/.
    release(sample_site.out, sample_warehouse, str(tmp_path / "www"))
    handler = functools.partial(_Quiet, directory=str(tmp_path / "www"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    shutil.copytree(ROOT / "data" / "sample_bucket" / "2026-11-20", tmp_path / "ci-dumps")
    monkeypatch.chdir(tmp_path)
    env = {"DUMPSCOPE_WAREHOUSE_URL": f"http://127.0.0.1:{server.server_address[1]}/warehouse.duckdb"}
    try:
        argv = [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], a) for a in argv]
        out = CliRunner().invoke(app, argv)
    finally:
        server.shutdown()
    assert out.exit_code == 0, out.output  # the sample's last night against itself: nothing new
    assert out.stdout.startswith("### Dumpscope check against run ")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
