"""Every ``.venv/bin/dumpscope`` command in README.md's code blocks runs as written.

Each command runs through typer's CliRunner (in this process, under the session's
Prefect harness: a `run` is a second, not twenty) in a fresh directory laid out like
the repository: ``data/sample_bucket`` and ``tests/fixtures`` are the real ones, and
``data/warehouse.duckdb`` is a copy of the sample warehouse, so relative paths resolve
as they do for a reader, and commands that write (run, accept, site) write only there.
Each command's exit status and a meaningful part of its output are checked against the
sample data. A command added to or changed in the README without an entry here fails,
and so does an entry whose command left the README.

None is skipped. The two that would leave the machine run in a safe form of the command
as written: `serve` without a Prefect server (it must stop at once, saying how to start
one, before any bucket or warehouse), and `run --notify URL` as a re-run with nothing
new (nothing is sent; tests/test_notify.py covers the sending).
"""

from __future__ import annotations

import glob
import json
import re
import shlex
import shutil
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from flows import storage_secrets
from flows.cli import app

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
# Every command as a user runs it: `run` starts the nightly (a flow and its temporary Prefect server).
pytestmark = pytest.mark.integration


def readme_commands() -> list[list[str]]:
    """The arguments of each dumpscope command in the README's ``sh`` blocks (a quoted
    argument may span lines; ``# ...`` comments dropped)."""
    commands = []
    for block in re.findall(r"^[ \t]*```sh\n(.*?)^[ \t]*```", README.read_text(encoding="utf-8"), flags=re.S | re.M):
        lines = block.splitlines()
        start = 0
        while start < len(lines):
            if not lines[start].strip().startswith(".venv/bin/dumpscope "):
                start += 1
                continue
            end = start + 1
            while True:  # until the quotes close
                try:
                    argv = shlex.split("\n".join(lines[start:end]), comments=True)
                    break
                except ValueError:
                    end += 1
                    assert end <= len(lines), f"unclosed quote in README command: {lines[start]}"
            commands.append(argv[1:])
            start = end
    return commands


def key(args: list[str]) -> str:
    """The command as one line (whitespace of multi-line SQL collapsed): EXPECTED's key."""
    return " ".join(" ".join(args).split())


def shell_words(args: list[str], cwd: Path) -> tuple[list[str], str | None]:
    """What the shell would pass, and the file of a ``> FILE`` redirect: an unquoted glob
    that matches files expands (README patterns such as 'jax-pmap/*' match no file here
    and stay as they are, as in sh)."""
    redirect = None
    if len(args) > 2 and args[-2] == ">":
        args, redirect = args[:-2], args[-1]
    out = []
    for a in args:
        matches = sorted(glob.glob(a, root_dir=cwd)) if "*" in a else []
        out.extend(matches or [a])
    return out, redirect


def query(warehouse: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return con.execute(sql).fetchall()


def cells(output: str) -> list[list[str]]:
    """The rows of a rich table in ``output``, as lists of stripped cells."""
    return [[c.strip() for c in line.strip("│ ").split("│")] for line in output.splitlines() if line.startswith("│")]


def has_row(*row: str):
    return lambda output: [*row] in [r[:len(row)] for r in cells(output)]


def json_is(expected):
    return lambda output: json.loads(output) == expected


def report_says(line: str):
    """The night's summary (data/warehouse.report.md, the default --report) holds ``line``."""
    return lambda d: line in (d / "data" / "warehouse.report.md").read_text(encoding="utf-8").splitlines()


NIGHT = "Last night: **5 new**, 10 still open, 2 fixed, 2 improvements, 0 lost."
PMAP_HEADLINE = ("jax-pmap / jit__fun: memory.peak_live_bytes 155.7 KiB → 265.2 KiB (+109.5 KiB); "
                 "memory.temp_bytes 103.7 KiB → 176.5 KiB (+72.8 KiB); +14 more")
ONNX_FIXED = "torch-onnx / inp+blocks+head(x): onnx.errors 0 → 3 (+3); ONNX export step translate fails"
TEMP_MIB_CSV = """run_id,program,temp_mib
2026-11-17,jit__fun,0.05199432373046875
2026-11-18,jit__fun,0.10131072998046875
2026-11-19,jit__fun,0.17237091064453125
2026-11-20,jit__fun,0.29224395751953125
2026-11-17,jit_eval_metrics,0.0079498291015625
2026-11-18,jit_eval_metrics,0.0118560791015625
2026-11-19,jit_eval_metrics,0.0236358642578125
2026-11-20,jit_eval_metrics,0.0314483642578125
2026-11-17,jit_train_step,0.02734375
2026-11-18,jit_train_step,0.052734375
2026-11-19,jit_train_step,0.08203125
2026-11-20,jit_train_step,0.12548828125
"""

# Each command: its exit status, what its output shows (a fragment, or a test of the
# whole output), and what it left behind in the directory (a test, or None).
EXPECTED: dict[str, tuple[int, list, object]] = {
    # `run` prints its summary in plain text; the report file holds it in Markdown. The sample
    # warehouse already has the bucket: a re-run loads nothing and opens nothing.
    "run --bucket data/sample_bucket --warehouse data/warehouse.duckdb --workers 2": (0, [
        "Last night (2026-11-20, commit 1a8e6b4): 5 new, 10 still open, 2 fixed, 2 improvements, 0 lost.",
        "  dumpscope diff 2026-11-19 2026-11-20 --series 'jax-pmap/jit__fun/*'"], report_says(NIGHT)),
    "run --fail-on new": (0, [], report_says(NIGHT)),
    # The URL is never called here: a re-run has no new incident to announce
    # (tests/test_notify.py sends to a local receiver).
    "run --notify json://127.0.0.1:9000/hook": (0, [
        "Notifications: nothing new sent: this night loaded nothing new, and a run's new incidents are sent once, by "
        "the night that loads it (a re-run never sends them again)."], lambda d: query(
        d / "data" / "warehouse.duckdb", "SELECT count(*) FROM notifications") == [(0,)]),
    "run --site site": (0, [], lambda d: "Dumpscope" in (d / "site" / "index.html").read_text(encoding="utf-8")),
    # Without a Prefect server `serve` stops at once with the way to start one; the
    # README's s3 bucket and /srv warehouse are never reached.
    "serve --cron 0 2 * * * --bucket s3://dumps/nightly --warehouse /srv/dumpscope/warehouse.duckdb --site /srv/dumpscope/site "
    "--publish /var/www/dumpscope/site --fail-on new": (
        2, ["error: scheduled runs need a Prefect server: start one with `prefect server start`"], None),
    # `check` against the run these dumps are: nothing new; against the night before,
    # the ONNX export failure they fix.
    "check pr-dumps/": (0, ["dumpscope check pr-dumps against run 2026-11-20 (commit 1a8e6b4): 0 new incidents"], None),
    "check pr-dumps/ --against 2026-11-19 --format json": (0, [lambda out: ("I-9e63cf25", "fixes") in [
        (r["incident_id"], r["change"]) for r in json.loads(out)]], None),
    "check pr-dumps/ --format markdown --fail-on new > comment.md": (0, [], lambda d: "**0 new incidents**" in (
        d / "comment.md").read_text(encoding="utf-8")),
    "incidents": (0, ["15 incident(s), open, run 2026-11-20",
                      has_row("I-f515e5b1", "open", "regression", "jax-pmap / jit__fun", "2026-11-19")], None),
    "incidents --run 2026-11-19 --status new --format json": (0, [lambda out: sorted(
        (r["incident_id"], r["kind"], r["job"], r["program"]) for r in json.loads(out)) == [
        ("I-3d901592", "regression", "torch-inductor", "model__0_backward"),
        ("I-662b25a4", "regression", "torch-trace", "forward at dumpscope_model.py:19"),
        ("I-84ab3494", "regression", "jax-jit", "jit_eval_metrics"),
        ("I-9e63cf25", "failure", "torch-onnx", "inp+blocks+head(x)"),
        ("I-e672331c", "regression", "torch-inductor", "model__0_forward"),
        ("I-f515e5b1", "regression", "jax-pmap", "jit__fun"),
        ("I-f61c3b88", "regression", "jax-jit", "jit_train_step")]], None),
    "incidents I-f515e5b1": (0, ["I-f515e5b1  regression, open  jax-pmap / jit__fun",
                                 "opened in 2026-11-19 (last good 2026-11-18); commits 9b03c5e → c71f0d2",
                                 "on top of I-48d7e96d", "site: incidents/i-f515e5b1-"], None),
    "accept I-f515e5b1 --note two more psums, intended": (
        0, ["accepted I-f515e5b1 at 2026-11-20; incidents closed: I-f515e5b1; regressions left there: 50."],
        lambda d: query(d / "data" / "warehouse.duckdb", "SELECT closed_run, closed_how, accepted_note FROM incidents "
                        "WHERE incident_id = 'I-f515e5b1'") == [("2026-11-20", "accepted", "two more psums, intended")]),
    # Which incidents a pattern closes: tests/test_cli.py (test_accepting_a_pattern_closes_its_open_incidents).
    "accept jax-pmap/* --note new sharding": (
        0, ["accepted jax-pmap/* at 2026-11-20; incidents closed: I-"],
        # The incidents it closed, as the incidents' own statuses at the run say.
        lambda d: query(d / "data" / "warehouse.duckdb", "SELECT series, run_id, note, closed_incidents FROM accepts") == [
            ("jax-pmap/*", "2026-11-20", "new sharding", [i for (i,) in query(
                d / "data" / "warehouse.duckdb", "SELECT incident_id FROM incident_status WHERE run_id = '2026-11-20' "
                "AND status = 'accepted' ORDER BY incident_id")])]),
    "diff 2026-11-19 2026-11-20 --series jax-pmap/*": (0, [
        "2026-11-19 → 2026-11-20\n\njax-pmap/jit__fun/xla_buffer_assignment/buffer_assignment\n  batch 96 → 128: 8 allocations rescaled\n",
        "  memory.temp_bytes 176.5 KiB → 299.3 KiB (+122.8 KiB, +69.5 %)\n",
        lambda out: "jax-jit/" not in out and "torch-" not in out], None),
    "sql SELECT status, incident_id, headline FROM incidents_at('2026-11-20')": (0, [
        has_row("open", "I-f515e5b1", PMAP_HEADLINE), has_row("new", "I-a4cd47e9"),
        has_row("fixed", "I-9e63cf25", ONNX_FIXED)], None),
    "site --warehouse data/warehouse.duckdb --out site": (0, [lambda out: out.startswith("site: ") and " pages, " in out],
                                                           lambda d: (d / "site" / "index.html").exists()),
    "sql SELECT table_name, comment FROM duckdb_tables()": (0, [has_row(
        "dump_series", "The series of each dump path: which program of which job it shows, under the name that stays "
        "the same across runs (docs: series identity).")], None),
    # Column comments hold "[/<stage>]": data, never rich markup (this crashed).
    "sql SELECT column_name, comment FROM duckdb_columns() WHERE table_name = 'dump_series'": (0, [
        has_row("series", "Series id <job>/<series_program>/<kind>[/<stage>]."),
        has_row("items_key", "Content key of the dump's structural items (content_items.items_key); NULL for failed dumps.")], None),
    "sql --format csv SELECT run_id, program, value / 2^20 AS temp_mib FROM metric_series WHERE metric = 'memory.temp_bytes' "
    "AND stage = 'buffer_assignment' ORDER BY program, run_id": (0, [lambda out: out == TEMP_MIB_CSV], None),
    "sql SELECT job, program, metric, value FROM latest_metrics WHERE stage = 'after_optimizations' AND metric LIKE "
    "'fusion.count%' ORDER BY ALL": (0, [lambda out: cells(out) == [
        ["jax-jit", "jit_eval_metrics", "fusion.count", "12.0"], ["jax-jit", "jit_eval_metrics", "fusion.count.kCustom", "4.0"],
        ["jax-jit", "jit_eval_metrics", "fusion.count.kLoop", "8.0"], ["jax-jit", "jit_train_step", "fusion.count", "31.0"],
        ["jax-jit", "jit_train_step", "fusion.count.kCustom", "10.0"], ["jax-jit", "jit_train_step", "fusion.count.kLoop", "21.0"],
        ["jax-pmap", "jit__fun", "fusion.count", "33.0"], ["jax-pmap", "jit__fun", "fusion.count.kCustom", "7.0"],
        ["jax-pmap", "jit__fun", "fusion.count.kLoop", "26.0"]]], None),
    "sql --format json SELECT d.run_id, n.kernel AS fallback_op, count(*) AS n FROM inductor_nodes n JOIN dumps d USING "
    "(dump_id) WHERE d.stage = 'post_fusion' AND n.sub_type LIKE '%Fallback%' GROUP BY ALL ORDER BY ALL": (0, [json_is(
        [{"run_id": "2026-11-19", "fallback_op": "torch.ops.aten.median.dim", "n": 1}])], None),
    "parse tests/fixtures/seeds/001_a0c5460ce1af2dbe.txt": (0, [
        "SyncTensorsGraph.2143", has_row("hlo.instructions", "1,886"), has_row("kernel.launches", "124")], None),
    "parse --json data/sample_bucket/2026-11-20/jax-jit/module_0000.jit_train_step.cpu_after_optimizations.txt.gz": (0, [
        lambda out: [json.loads(out)[k] for k in ("kind", "stage", "program", "status")]
        == ["xla_hlo", "after_optimizations", "jit_train_step", "ok"],
        lambda out: json.loads(out)["metrics"]["fusion.count"] == 31], None),
    "parse tests/fixtures/seeds/001_a0c5460ce1af2dbe.txt --table hlo_instructions --limit 10": (0, ["shape: (10, 21)"], None),
    "parse --summary tests/fixtures/seeds/*.txt": (0, [
        "5 dumps under tests/fixtures/seeds",
        has_row("004_83a80cec1e7cc5e6.txt", "xla_hlo", "after_optimizations", "pmap__multi_device_update_fn__2.16072", "ok"),
        has_row("000_d1eac3fb69f76648.txt", "onnx_report", "export")], None),
}


@pytest.fixture
def reader_dir(sample_warehouse, tmp_path, monkeypatch):
    """A directory laid out like the repository, with a copy of the sample warehouse."""
    (tmp_path / "data").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "data" / "sample_bucket").symlink_to(ROOT / "data" / "sample_bucket")
    (tmp_path / "tests" / "fixtures").symlink_to(ROOT / "tests" / "fixtures")
    shutil.copyfile(sample_warehouse, tmp_path / "data" / "warehouse.duckdb")
    # A pull request's dumps for `check`: the sample's last night, laid out as CI writes them.
    (tmp_path / "pr-dumps").symlink_to(ROOT / "data" / "sample_bucket" / "2026-11-20")
    monkeypatch.chdir(tmp_path)
    # `run --notify` exports its URLs to the environment: keep them out of later tests.
    monkeypatch.delenv(storage_secrets.NOTIFY_VAR, raising=False)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    return tmp_path


def test_every_readme_command_has_an_expectation():
    keys = [key(c) for c in readme_commands()]
    assert len(keys) == len(set(keys))
    assert sorted(keys) == sorted(EXPECTED), "a README command changed: update EXPECTED (or the README)"


@pytest.mark.parametrize("command", readme_commands(), ids=key)
def test_readme_command(command, reader_dir):
    status, shows, left = EXPECTED[key(command)]
    args, redirect = shell_words(command, reader_dir)
    result = CliRunner().invoke(app, args)
    output = result.output
    if redirect:
        (reader_dir / redirect).write_text(result.stdout, encoding="utf-8")
    assert result.exit_code == status, output + repr(result.exception)
    for part in shows:
        assert part(output) if callable(part) else part in output, (part, output)
    if left is not None:
        assert left(reader_dir)
