"""The `dumpscope` command end to end, as a user runs it: parse on seeds, the daily
commands (sql, diff, incidents, accept, --help) on the sample warehouse."""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.conftest import SEEDS

ROOT = Path(__file__).parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.integration
def test_parse_json_of_a_seed():
    out = run("parse", "--json", str(SEEDS / "001_a0c5460ce1af2dbe.txt"))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert set(got) == {"path", "kind", "stage", "program", "status", "errors", "metrics"}
    assert (got["kind"], got["stage"], got["program"], got["status"]) == ("xla_hlo", "after_optimizations", "SyncTensorsGraph.2143", "ok")
    assert got["metrics"]["hlo.instructions"] == 1886 and got["metrics"]["kernel.launches"] == 124


@pytest.mark.integration
def test_parse_json_with_a_table(tmp_path):
    gz = tmp_path / "ba.txt.gz"
    gz.write_bytes(gzip.compress((SEEDS / "002_5960cad812240b69.txt").read_bytes()))
    got = json.loads(run("parse", "--json", "--table", "buffer_allocations", "--limit", "3", str(gz)).stdout)
    assert got["kind"] == "xla_buffer_assignment" and got["metrics"]["memory.allocations"] == 54
    assert got["table"]["name"] == "buffer_allocations" and len(got["table"]["rows"]) == 3


@pytest.mark.integration
def test_parse_human_output_and_unknown_table():
    out = run("parse", str(SEEDS / "003_f2a980d458b1ffe8.txt"))
    assert out.returncode == 0 and "inductor_ir" in out.stdout and "inductor.nodes" in out.stdout
    bad = run("parse", "--table", "nope", str(SEEDS / "003_f2a980d458b1ffe8.txt"))
    assert bad.returncode == 2 and "unknown table 'nope'" in bad.stderr


@pytest.mark.integration
def test_parse_many_files_as_json_lines(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(os.urandom(4096))
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    out = run("parse", "--json", str(junk), str(empty), str(SEEDS / "000_d1eac3fb69f76648.txt"))
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["kind"] for r in rows] == ["unknown", "unknown", "onnx_report"]
    assert out.returncode == 0


@pytest.mark.integration
def test_parse_does_not_import_prefect():
    code = "import sys; from flows.cli import app; from transforms.parse import parse_dump; print('prefect' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "False"


@pytest.mark.integration
def test_parse_takes_the_limits(tmp_path):
    dump = tmp_path / "module_0001.long.after_optimizations.txt"
    dump.write_text("HloModule long\n\nENTRY main {\n  ROOT p = f32[8] parameter(0), metadata={op_name=\"" + "x" * 4096 + "\"}\n}\n")
    assert run("parse", "--json", str(dump)).returncode == 0
    capped = run("parse", "--json", "--max-line-bytes", "1024", str(dump))
    got = json.loads(capped.stdout)
    assert capped.returncode == 1 and got["status"] == "failed"
    assert "line 4 is longer than max_line_bytes" in got["errors"][0] and "--max-line-bytes" in got["errors"][0]


# The daily commands on the sample warehouse (tests/conftest.py), through typer's runner.

def invoke(*args: str):
    from typer.testing import CliRunner

    from flows.cli import app

    return CliRunner().invoke(app, list(args))


def writable(sample_warehouse: Path, tmp_path: Path) -> Path:
    target = tmp_path / "wh.duckdb"
    shutil.copyfile(sample_warehouse, target)
    return target


def accepts_logged(warehouse: Path) -> int:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return con.execute("SELECT count(*) FROM accepts").fetchone()[0]


VERBATIM_SQL = "SELECT 'float32[s0, 128]' AS shape, '[bold]x[/bold] [/<stage>]' AS \"[series]\""


def test_parse_takes_a_directory_and_parses_every_file_under_it_as_the_nightly_lists_them(tmp_path):
    """On main a directory was refused (a usage error: "is a directory"). Its files are parsed in
    path order, exactly as when named one by one; a run's run.json is metadata, not a dump; a
    symbolic link and a FIFO below it are failed, never read (a FIFO would block for ever)."""
    night = Path(shutil.copytree(ROOT / "data" / "sample_bucket" / "2026-11-20", tmp_path / "night"))
    (night / "jax-jit" / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(night / "jax-jit" / "pipe")
    files = sorted((p for p in night.rglob("*") if p.is_file() and p.name != "run.json" and not p.is_symlink()
                    and p.name != "pipe"), key=str)  # by path, as the nightly's listing sorts them
    assert (night / "run.json").is_file() and len(files) == 46
    whole = invoke("parse", "--json", str(night))
    one_by_one = invoke("parse", "--json", *map(str, files))
    assert whole.exit_code == 1  # the link and the FIFO failed
    got = [json.loads(line) for line in whole.stdout.splitlines()]
    refused = {g["path"]: g["errors"] for g in got if g["status"] == "failed"}
    assert refused == {f"{night}/jax-jit/passwd": [f"{night}/jax-jit/passwd: not read (not a regular file: symlink)"],
                       f"{night}/jax-jit/pipe": [f"{night}/jax-jit/pipe: not read (not a regular file: FIFO)"]}
    assert [g for g in got if g["status"] != "failed"] == [json.loads(line) for line in one_by_one.stdout.splitlines()]
    (tmp_path / "empty").mkdir()
    empty = invoke("parse", str(tmp_path / "empty"))
    assert (empty.exit_code, empty.output) == (2, f"error: {tmp_path}/empty holds no file to parse\n")


def test_sql_prints_values_verbatim_in_every_format(sample_warehouse):
    w = str(sample_warehouse)
    table = invoke("sql", VERBATIM_SQL, "--warehouse", w)
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert "┃ shape            ┃ [series]                  ┃" in lines
    assert "│ float32[s0, 128] │ [bold]x[/bold] [/<stage>] │" in lines
    csv_out = invoke("sql", "--format", "csv", VERBATIM_SQL, "--warehouse", w)
    assert csv_out.output == 'shape,[series]\n"float32[s0, 128]",[bold]x[/bold] [/<stage>]\n'
    as_json = invoke("sql", "--format", "json", VERBATIM_SQL, "--warehouse", w)
    assert json.loads(as_json.output) == [{"shape": "float32[s0, 128]", "[series]": "[bold]x[/bold] [/<stage>]"}]


def test_a_long_value_is_never_cut_when_piped(sample_warehouse):
    long = "f32[" + ",".join(["1024"] * 40) + "]"
    out = invoke("sql", f"SELECT '{long}' AS shape", "--warehouse", str(sample_warehouse))
    assert f"│ {long} │" in out.output.splitlines()


def test_diff_pattern_that_matches_nothing_is_an_error_not_no_differences(sample_warehouse):
    w = str(sample_warehouse)
    none = invoke("diff", "2026-11-19", "2026-11-20", "--series", "jax-pmap/jit__fun", "--warehouse", w)
    assert none.exit_code == 2
    assert none.output == (
        "error: no series matching 'jax-pmap/jit__fun' has a parsed dump in run '2026-11-19' or '2026-11-20'; "
        "series there include: jax-pmap/jit__fun/xla_hlo/after_optimizations, jax-pmap/jit__fun/xla_hlo/before_optimizations, "
        "jax-pmap/jit__fun/xla_buffer_assignment/values, jax-pmap/jit__fun/xla_buffer_assignment/live_ranges, "
        "jax-pmap/jit__fun/xla_buffer_assignment/buffer_assignment\n")
    # A real no-change still says so and passes.
    same = invoke("diff", "2026-11-20", "2026-11-20", "--series", "jax-pmap/*", "--warehouse", w)
    assert (same.exit_code, same.output) == (0, "No differences between 2026-11-20 and 2026-11-20.\n")
    missing = invoke("diff", "2026-11-19", "2099-01-01", "--warehouse", w)
    assert (missing.exit_code, missing.output) == (
        2, "error: no run '2099-01-01' in the warehouse; latest runs: 2026-11-20, 2026-11-19, 2026-11-18, 2026-11-17\n")


def test_latest_and_previous_name_runs_wherever_a_run_is_taken(sample_warehouse, tmp_path):
    """On main `diff latest` was "no run 'latest' in the warehouse" (exit 2)."""
    w = str(sample_warehouse)
    by_name = invoke("diff", "previous", "latest", "--series", "jax-pmap/*", "--warehouse", w)
    by_id = invoke("diff", "2026-11-19", "2026-11-20", "--series", "jax-pmap/*", "--warehouse", w)
    assert by_name.exit_code == 0 and by_name.output == by_id.output
    assert by_name.output.startswith("2026-11-19 → 2026-11-20\n")
    for name, run_id in (("latest", "2026-11-20"), ("previous", "2026-11-19")):
        assert invoke("incidents", "--run", name, "--format", "json", "--warehouse", w).output == invoke(
            "incidents", "--run", run_id, "--format", "json", "--warehouse", w).output
    one = invoke("incidents", "I-f515e5b1", "--run", "previous", "--format", "json", "--warehouse", w)
    assert json.loads(one.output)["status"] == "new"  # it opened in 2026-11-19
    check = invoke("check", str(ROOT / "data" / "sample_bucket" / "2026-11-20"), "--against", "previous",
                   "--format", "json", "--warehouse", w)
    assert check.exit_code == 0 and ("I-9e63cf25", "fixes") in [(r["incident_id"], r["change"]) for r in json.loads(check.output)]
    accepted = invoke("accept", "I-f515e5b1", "previous", "--note", "intended", "--warehouse", str(writable(sample_warehouse, tmp_path)))
    assert accepted.exit_code == 0 and accepted.output.startswith("accepted I-f515e5b1 at 2026-11-19; "), accepted.output
    # A warehouse with one run has no previous one.
    one_run = tmp_path / "one.duckdb"
    with duckdb.connect(str(sample_warehouse), read_only=True) as con:
        first = con.execute("SELECT run_id FROM runs ORDER BY started_at LIMIT 1").fetchall()[0][0]
    shutil.copyfile(sample_warehouse, one_run)
    with duckdb.connect(str(one_run)) as con:
        con.execute("DELETE FROM runs WHERE run_id <> ?", [first])
    out = invoke("diff", "previous", "latest", "--warehouse", str(one_run))
    assert (out.exit_code, out.output) == (2, f"error: no run 'previous' in the warehouse; latest runs: {first}\n")


def test_the_incidents_list_as_json_has_each_incident_s_steps_and_page(sample_warehouse, tmp_path):
    """On main the list's objects had neither (only one incident's JSON had them)."""
    w = str(sample_warehouse)
    settings = tmp_path / "dumpscope.toml"
    settings.write_text('[site]\nurl = "https://dumps.example.org/nightly"\n')
    listed = json.loads(invoke("incidents", "--format", "json", "--settings", str(settings), "--warehouse", w).output)
    assert len(listed) == 15 and all(r["steps"] for r in listed)
    for r in listed[:3] + listed[-1:]:
        one = json.loads(invoke("incidents", r["incident_id"], "--format", "json", "--settings", str(settings),
                                "--warehouse", w).output)
        assert (r["steps"], r["page"]) == (one["steps"], one["page"])
        assert r["page"].startswith("https://dumps.example.org/nightly/incidents/i-")
    every = json.loads(invoke("incidents", "--status", "all", "--format", "json", "--warehouse", w).output)
    pmap = next(r for r in every if r["incident_id"] == "I-f515e5b1")
    assert pmap["page"].startswith("incidents/i-f515e5b1-") and {s["series"] for s in pmap["steps"]} == {
        f"jax-pmap/jit__fun/{kind}" for kind in (
            "xla_hlo/before_optimizations", "xla_hlo/after_optimizations", "xla_buffer_assignment/buffer_assignment",
            "xla_buffer_assignment/values", "xla_buffer_assignment/live_ranges", "xla_memory_usage_report/memory_usage_report")}
    assert len({s["metric"] for s in pmap["steps"]}) == 16  # its headline: two metrics, "+14 more"


def test_site_never_builds_over_a_file_or_a_directory_of_other_files(sample_warehouse, tmp_path):
    """The build replaces its directory whole: on main `site --out letters` swapped the user's
    directory aside and removed it, and `--out notes.txt` moved the file aside (exit 0 both)."""
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "letters").mkdir()
    (tmp_path / "letters" / "letter.txt").write_text("dear reader\n")
    for out, said in (("notes.txt", "is a file, not a directory: give the directory the site is built into"),
                      ("letters", "holds files that are not a site, and the build replaces the directory whole: "
                                  "give a new directory, or one a build made")):
        done = invoke("site", "--warehouse", str(sample_warehouse), "--out", str(tmp_path / out))
        assert (done.exit_code, done.output) == (2, f"error: --out {tmp_path / out} {said}\n")
    assert (tmp_path / "notes.txt").read_text() == "mine\n" and os.listdir(tmp_path / "letters") == ["letter.txt"]
    assert sorted(os.listdir(tmp_path)) == ["letters", "notes.txt"]


def test_incidents_of_a_run_that_does_not_exist(sample_warehouse):
    out = invoke("incidents", "--run", "2026-11-21", "--warehouse", str(sample_warehouse))
    assert (out.exit_code, out.output) == (
        2, "error: no run '2026-11-21' in the warehouse; latest runs: 2026-11-20, 2026-11-19, 2026-11-18, 2026-11-17\n")


@pytest.mark.slow  # builds a site or several warehouses: seconds
def test_accept_names_what_is_wrong(sample_warehouse, tmp_path):
    w = writable(sample_warehouse, tmp_path)
    refused = {
        ("jax-pmap/*", "2026-11-21"):
            "no run '2026-11-21' in the warehouse; latest runs: 2026-11-20, 2026-11-19, 2026-11-18, 2026-11-17",
        ("I-00000000",): "no incident 'I-00000000'; list them with `dumpscope incidents --status all`",
        ("I-f515e5b1", "2026-11-18"):
            "incident I-f515e5b1 opened in run '2026-11-19', after run '2026-11-18': accept it at 2026-11-19 or a later run",
        ("I-f515e5b1", "--metric", "kernel.collective"):
            "no metric 'kernel.collective' in incident I-f515e5b1; closest: kernel.collectives, kernel.collective.all-reduce, "
            "kernel.launches, kernel.custom_calls, kernel.custom_call.xla.sdy.FuncResultSharding",
        ("jax-pmap/*", "--metric", "memory.temp_byte"):
            "no metric 'memory.temp_byte' in the series matching 'jax-pmap/*' in run '2026-11-20'; closest: memory.temp_bytes, "
            "memory.total_bytes, memory.parameter_bytes, memory.alias_bytes, memory.live_out_bytes",
    }
    for args, message in refused.items():
        out = invoke("accept", *args, "--note", "intended", "--warehouse", str(w))
        assert (out.exit_code, out.output) == (2, f"error: {message}\n"), args
    malformed = invoke("accept", "I-f515e5b", "--note", "intended", "--warehouse", str(w))
    assert malformed.exit_code == 2
    assert "no series matching 'I-f515e5b' has dumps in run '2026-11-20' (an incident id is I- and 8 hex digits" in malformed.output
    assert accepts_logged(w) == 0  # nothing refused was logged
    ok = invoke("accept", "I-f515e5b1", "--metric", "kernel.collectives", "--note", "intended", "--warehouse", str(w))
    assert ok.exit_code == 0 and ok.output.startswith("accepted I-f515e5b1 at 2026-11-20 (kernel.collectives); ")
    assert accepts_logged(w) == 1


def test_accepting_a_pattern_closes_its_open_incidents(sample_warehouse, tmp_path):
    w = writable(sample_warehouse, tmp_path)
    out = invoke("accept", "jax-pmap/*", "--note", "new sharding", "--warehouse", str(w))
    assert out.exit_code == 0 and "incidents closed: I-01dc4499, I-48d7e96d, I-a4cd47e9, I-f515e5b1;" in out.output


def test_a_file_that_is_not_a_warehouse_is_one_line(tmp_path):
    junk = tmp_path / "notes.duckdb"
    junk.write_text("not a database\n")
    for args in (["aggregate"], ["site", "--out", str(tmp_path / "site")], ["accept", "jax-pmap/*", "--note", "n"]):
        out = invoke(*args, "--warehouse", str(junk))
        assert (out.exit_code, out.output) == (1, f"error: {junk} is not a DuckDB file\n"), args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.duckdb"]  # no standby copy, no lock left


def bracketed_phrases(text: str) -> list[str]:
    return re.findall(r"\S*\[[^\]]*\]+\S*", text or "")


def test_help_keeps_every_bracket():
    """Rich markup ate "[series]" and "[[rule]]" from the help: every command's help shows
    each bracketed phrase of its docstring and options as written."""
    import typer.main

    from flows.cli import app

    group = typer.main.get_command(app)
    assert "[[rule]]" in invoke("run", "--help").output
    checked = 0
    for name, command in group.commands.items():
        rendered = "".join(invoke(name, "--help").output.split())
        for phrase in bracketed_phrases(command.help) + [p for param in command.params
                                                           for p in bracketed_phrases(getattr(param, "help", None))]:
            assert "".join(phrase.split()) in rendered, (name, phrase)
            checked += 1
    assert checked >= 5  # [series] and [[rule]] of each command taking --settings


def test_every_command_help_shows_an_example():
    """As sqlite-utils does: each command's help ends with a command line a person can copy."""
    import typer.main

    from flows.cli import app

    names = sorted(typer.main.get_command(app).commands)
    assert len(names) >= 12
    for name in names:
        example = invoke(name, "--help").output.partition("\n  Example:\n")[2].partition("\nOptions:")[0]
        assert re.search(rf"^ {{4,}}(\S+=\S+ )*dumpscope {name}( |$)", example, re.M), (name, example)


def test_a_new_incident_is_accepted_in_the_run_it_opened_in(sample_warehouse, tmp_path):
    """Last night's new incident, accepted by its id at last night: closed there, accepted."""
    w = writable(sample_warehouse, tmp_path)
    out = invoke("accept", "I-f515e5b1", "2026-11-19", "--note", "intended", "--warehouse", str(w))
    assert out.exit_code == 0 and "incidents closed: I-f515e5b1;" in out.output, out.output
    with duckdb.connect(str(w), read_only=True) as con:
        assert con.execute("SELECT opened_run, closed_run, closed_how, accepted_note FROM incidents WHERE incident_id = ?",
                           ["I-f515e5b1"]).fetchall() == [("2026-11-19", "2026-11-19", "accepted", "intended")]


def test_accept_and_aggregate_hold_the_memory_limit(sample_warehouse, tmp_path, monkeypatch):
    """Both rewrite derived tables, as a night does: --memory-limit (else the settings
    file's) reaches DuckDB and the aggregation's batches; a bad value is refused before any work."""
    import flows.commands.accept
    import flows.verdict.aggregate

    seen = []
    for module in (flows.commands.accept, flows.verdict.aggregate):
        real = module.aggregate
        monkeypatch.setattr(module, "aggregate", lambda con, settings, budget=None, _real=real, **k: seen.append(
            (budget.total, con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0])) or _real(
            con, settings, budget=budget, **k))
    w = writable(sample_warehouse, tmp_path)
    assert invoke("accept", "jax-pmap/*", "--note", "n", "--warehouse", str(w), "--memory-limit", "600MB").exit_code == 0
    settings = tmp_path / "dumpscope.toml"
    settings.write_text('memory_limit = "700MB"\n')
    assert invoke("aggregate", "--warehouse", str(w), "--settings", str(settings)).exit_code == 0
    assert seen == [(600 * 10**6, "286.0 MiB"), (700 * 10**6, "333.0 MiB")]  # DuckDB has half until the aggregation starts
    bad = invoke("aggregate", "--warehouse", str(w), "--memory-limit", "lots")
    assert bad.exit_code == 2 and "--memory-limit" in bad.output


def accepts_rows(warehouse: Path) -> list[tuple]:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return con.execute("SELECT coalesce(series, incident_id), run_id, note, closed_incidents FROM accepts "
                           "ORDER BY accepted_at").fetchall()


def test_a_repeated_pattern_accept_closes_nothing_and_is_refused(sample_warehouse, tmp_path):
    """Issue 29: the second `accept 'jax-pmap/*'` was logged again and exited 0. It closes
    nothing: exit 2, one line saying why, no accepts row, nothing re-aggregated."""
    w = writable(sample_warehouse, tmp_path)
    first = invoke("accept", "jax-pmap/*", "--note", "new sharding", "--warehouse", str(w))
    assert first.exit_code == 0, first.output
    user = accepts_logged_by(w)
    with duckdb.connect(str(w), read_only=True) as con:
        stamp = con.execute("SELECT value FROM schema_info WHERE key = 'aggregated_accepts'").fetchall()
    again = invoke("accept", "jax-pmap/*", "--note", "new sharding", "--warehouse", str(w))
    assert again.exit_code == 2
    assert again.output.startswith(
        f"error: accepting 'jax-pmap/*' at run '2026-11-20' closes nothing: it was accepted there already (by {user} at ")
    assert again.output.endswith(" UTC); open there: I-b86084d8 (jax-jit/jit_train_step/xla_hlo/after_optimizations), "
                                 "I-c2dd8bab (jax-jit/jit_train_step/xla_hlo/after_optimizations), "
                                 "I-e61e74c6 (jax-jit/jit_train_step/xla_hlo/after_optimizations)\n")
    assert len(again.output.splitlines()) == 1
    assert [r[0] for r in accepts_rows(w)] == ["jax-pmap/*"]
    with duckdb.connect(str(w), read_only=True) as con:
        assert con.execute("SELECT value FROM schema_info WHERE key = 'aggregated_accepts'").fetchall() == stamp


def accepts_logged_by(warehouse: Path) -> str:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return con.execute("SELECT accepted_by FROM accepts").fetchone()[0]


def test_a_pattern_with_no_open_step_is_refused_before_any_work(sample_warehouse, tmp_path):
    """A matching series with dumps there but no open step: refused, nothing logged."""
    w = writable(sample_warehouse, tmp_path)
    from flows.warehouse import store as wh

    with wh.Warehouse(w):  # a writer in place first: a copy's first writer adopts its records store (a write)
        pass
    out = invoke("accept", "jax-pmap/*", "2026-11-17", "--note", "intended", "--warehouse", str(w))
    assert (out.exit_code, out.output) == (2, "error: accepting 'jax-pmap/*' at run '2026-11-17' closes nothing: no incident "
                                              "open there has a step on a matching series; open there: none\n")
    assert accepts_logged(w) == 0
    # It took the writer to decide, and wrote nothing: the next night replays, it does not copy the file.
    assert not w.with_name(w.name + ".standby.dirty").exists()


def test_accept_without_a_note_is_one_line_and_exit_2(sample_warehouse, tmp_path):
    w = writable(sample_warehouse, tmp_path)
    for note in ([], ["--note", "  "]):
        out = invoke("accept", "I-f515e5b1", *note, "--warehouse", str(w))
        assert (out.exit_code, out.output) == (
            2, "error: --note is required: say why the change is intended, e.g. --note 'bigger tiles, intended'\n"), note
    assert accepts_logged(w) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wh.duckdb"]  # refused before the writer: no standby, no lock


@pytest.mark.slow  # builds a site or several warehouses: seconds
def test_each_accepts_row_lists_the_incidents_shown_accepted_at_its_run(sample_warehouse, tmp_path):
    """The one verdict: the accepts row's closed_incidents are the incidents incident_status
    shows accepted at that run (and open there before), for an id, a pattern and a series."""
    w = writable(sample_warehouse, tmp_path)

    def accepted_at(run: str) -> set[str]:
        with duckdb.connect(str(w), read_only=True) as con:
            return {i for (i,) in con.execute("SELECT incident_id FROM incident_status WHERE run_id = ? "
                                              "AND status = 'accepted'", [run]).fetchall()}

    assert invoke("accept", "I-f515e5b1", "2026-11-19", "--note", "two psums", "--warehouse", str(w)).exit_code == 0
    assert accepted_at("2026-11-19") == {"I-f515e5b1"}
    out = invoke("accept", "jax-pmap/*", "--note", "new sharding", "--warehouse", str(w))
    assert out.exit_code == 0, out.output
    shown = accepted_at("2026-11-20")
    assert "incidents closed: " + ", ".join(sorted(shown)) + ";" in out.output
    assert accepts_rows(w) == [("I-f515e5b1", "2026-11-19", "two psums", ["I-f515e5b1"]),
                               ("jax-pmap/*", "2026-11-20", "new sharding", sorted(shown))]
    assert sorted(shown) == ["I-01dc4499", "I-48d7e96d", "I-a4cd47e9"]


def test_the_status_choices_derive_from_the_one_status_vocabulary():
    """An incident's statuses are ``transforms.trends.incident_walk.STATUSES``; ``--status`` takes each of
    them, ``improvements`` and ``all``, and shows only statuses of that vocabulary."""
    from flows.commands.incidents import STATUS_CHOICES
    from flows.verdict.incident_reader import SHOWN_BY_STATUS
    from transforms.trends.incident_walk import STATUSES

    assert STATUS_CHOICES == ("new", "open", "fixed", "accepted", "lost", "improvements", "all")
    assert STATUS_CHOICES[:len(STATUSES)] == STATUSES
    assert sorted({s for shown in SHOWN_BY_STATUS.values() for s in shown}) == sorted(STATUSES)
