"""`dumpscope check DIR`: a change's dumps against the sample warehouse, before it lands.

The candidate directories are copies of the sample's real nights; each designed change
edits the real dump text. Expected figures come from the warehouse (read-only) and from
parsing the edited dump, never typed in.
"""

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from flows.cli import app
from transforms.parse import parse_dump

ROOT = Path(__file__).parents[1]
BUCKET = ROOT / "data" / "sample_bucket"
LAST_NIGHT = "2026-11-20"
EVAL_HLO = "jax-jit/module_0002.jit_eval_metrics.cpu_after_optimizations.txt.gz"
EVAL_SERIES = "jax-jit/jit_eval_metrics/xla_hlo/after_optimizations"
PMAP_BUFFERS = "jax-pmap/module_0000.jit__fun.cpu_after_optimizations-buffer-assignment.txt.gz"
ROOT_LINE = "  ROOT %tuple.3 = (f32[], f32[]) tuple(%multiply_negate_fusion, %reduce_multiply_fusion)"
# One more collective in the real module: an all-reduce of the metric the program returns.
WITH_ALL_REDUCE = ("  %all-reduce = f32[] all-reduce(%reduce_multiply_fusion), channel_id=1, replica_groups={{0,1}}, "
                   "to_apply=%region_5.8\n"
                   "  ROOT %tuple.3 = (f32[], f32[]) tuple(%multiply_negate_fusion, %all-reduce)")


def check(warehouse: Path, directory: Path, *args: str):
    return CliRunner().invoke(app, ["check", str(directory), "--warehouse", str(warehouse), *args])


def check_json(warehouse: Path, directory: Path, *args: str) -> list[dict]:
    out = check(warehouse, directory, "--format", "json", *args)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def night_copy(tmp_path: Path, night: str = LAST_NIGHT) -> Path:
    return Path(shutil.copytree(BUCKET / night, tmp_path / "pr"))


def edit_gz(path: Path, old: str, new: str) -> None:
    text = gzip.decompress(path.read_bytes()).decode()
    assert text.count(old) == 1
    path.write_bytes(gzip.compress(text.replace(old, new).encode()))


def parsed_metrics(path: Path) -> dict[str, float]:
    with path.open("rb") as raw:
        return parse_dump(raw, str(path)).summary.metrics


def stored_value(warehouse: Path, run_id: str, series: str, metric: str) -> float | None:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        rows = con.execute("""SELECT m.value FROM metrics m JOIN dump_series s USING (path)
                              WHERE s.run_id = ? AND s.series = ? AND m.metric = ?""", [run_id, series, metric]).fetchall()
    return rows[0][0] if rows else None


def snapshot(warehouse: Path) -> tuple[str, list[str]]:
    """The warehouse file's sha256 and the names of every file beside it, but for the readers'
    registrations (``<warehouse>.readers/<pid>...``): the sample warehouse is shared, and a test on
    another worker that reads it at the same time registers there (flows.warehouse.readers), and the
    last one to go removes the directory: it is never walked into."""
    readers = warehouse.name + ".readers"
    names = []
    for parent, dirs, files in os.walk(warehouse.parent):
        dirs[:] = [d for d in dirs if not (parent == str(warehouse.parent) and d == readers)]
        names += [os.path.relpath(os.path.join(parent, n), warehouse.parent) for n in dirs + files]
    return hashlib.sha256(warehouse.read_bytes()).hexdigest(), sorted(names)


def tree(directory: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(directory)), p.stat().st_size) for p in directory.rglob("*") if p.is_file())


def test_an_unchanged_night_opens_nothing_and_writes_nothing(sample_warehouse, tmp_path):
    pr = night_copy(tmp_path)
    before, files = snapshot(sample_warehouse), tree(pr)
    out = check(sample_warehouse, pr, "--fail-on", "new")
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith(f"dumpscope check {pr} against run {LAST_NIGHT} (commit 1a8e6b4): 0 new incidents ")
    assert "Would open" not in out.stdout and "New programs" not in out.stdout
    assert check_json(sample_warehouse, pr) == []
    assert snapshot(sample_warehouse) == before
    assert tree(pr) == files  # nothing written into DIR either


def test_an_extra_all_reduce_is_one_new_regression_of_that_program(sample_warehouse, tmp_path):
    pr = night_copy(tmp_path)
    edit_gz(pr / EVAL_HLO, ROOT_LINE, WITH_ALL_REDUCE)
    after = parsed_metrics(pr / EVAL_HLO)
    before = snapshot(sample_warehouse)

    got = check_json(sample_warehouse, pr)
    [incident] = [r for r in got if r["change"] == "opens"]
    # The all-reduce is one more kernel launch too: on top of the program's open kernel.launches
    # regression (opened 2026-11-19), a further step, news of its own in the same new incident.
    launches = stored_value(sample_warehouse, LAST_NIGHT, EVAL_SERIES, "kernel.launches")
    with duckdb.connect(str(sample_warehouse), read_only=True) as con:
        [(below,)] = con.execute("""SELECT incident_id FROM incident_steps WHERE series = ? AND metric = 'kernel.launches'
                                    AND closed_run IS NULL""", [EVAL_SERIES]).fetchall()
    assert after["kernel.launches"] == launches + 1
    assert {k: incident[k] for k in ("change", "job", "program", "kind", "metrics", "last_good_run", "stacked_on")} == {
        "change": "opens", "job": "jax-jit", "program": "jit_eval_metrics", "kind": "regression",
        "metrics": ["kernel.collective.all-reduce", "kernel.collectives", "kernel.launches"], "last_good_run": LAST_NIGHT,
        "stacked_on": [below]}
    steps = {s["metric"]: s for s in incident["steps"]}
    # Last night's module had no collective (the parser omits a zero per-op count: 0 then).
    assert stored_value(sample_warehouse, LAST_NIGHT, EVAL_SERIES, "kernel.collectives") == 0
    assert stored_value(sample_warehouse, LAST_NIGHT, EVAL_SERIES, "kernel.collective.all-reduce") is None
    assert after["kernel.collectives"] == after["kernel.collective.all-reduce"] == 1
    for metric, step in steps.items():
        assert (step["series"], step["dump_kind"], step["stage"], step["step"]) == (
            EVAL_SERIES, "xla_hlo", "after_optimizations", "regression")
        was = launches if metric == "kernel.launches" else 0
        assert (step["before"], step["after"], step["change"]) == (was, after[metric], after[metric] - was)
    assert incident["headline"] == ("jax-jit / jit_eval_metrics: kernel.collectives 0 → 1 (+1); "
                                    "kernel.collective.all-reduce 0 → 1 (+1); +1 more")
    # Its cause: the structural diff against last night's dump, with the lines it stands on.
    assert incident["cause"] == ["all-reduce f32[] appeared (×1, 4 B)"]  # the edit gave it no source line
    [evidence] = [e for e in incident["evidence"] if e["description"] == incident["cause"][0]]
    assert evidence["after_path"] == str(pr / EVAL_HLO) and evidence["lines_after"]

    text = check(sample_warehouse, pr)
    assert text.exit_code == 0  # without --fail-on, a regression is reported, not failed
    assert f"  regression  jax-jit / jit_eval_metrics, on top of {below}" in text.stdout
    assert "      kernel.collectives 0 → 1 (+1)  [xla_hlo after_optimizations]" in text.stdout
    assert f"      kernel.launches {launches:.0f} → {launches + 1:.0f} (+1)  [xla_hlo after_optimizations]" in text.stdout
    failing = check(sample_warehouse, pr, "--fail-on", "new")
    assert failing.exit_code == 4 and "1 new incident(s) (regressions or failures)" in failing.stderr
    markdown = check(sample_warehouse, pr, "--format", "markdown")
    assert markdown.exit_code == 0
    assert f"### Dumpscope check against run <code>{LAST_NIGHT}</code> (commit <code>1a8e6b4</code>)" in markdown.stdout
    assert "**1 new incident: 1 regression, 0 failures**" in markdown.stdout
    assert "- **regression** jax-jit / jit_eval_metrics: kernel.collectives 0 → 1 (+1)" in markdown.stdout
    assert "<details><summary>steps, cause and evidence</summary>" in markdown.stdout
    assert "  - kernel.collective.all-reduce 0 → 1 (+1) (xla_hlo after_optimizations)" in markdown.stdout
    assert "  - all-reduce f32&#91;&#93; appeared (×1, 4 B)" in markdown.stdout
    assert snapshot(sample_warehouse) == before


def test_markdown_links_to_the_site_when_its_url_is_set(sample_warehouse, tmp_path):
    pr = night_copy(tmp_path)
    edit_gz(pr / EVAL_HLO, ROOT_LINE, WITH_ALL_REDUCE)
    settings = tmp_path / "dumpscope.toml"
    settings.write_text('[site]\nurl = "https://dumps.example.org/nightly"\n')
    out = check(sample_warehouse, pr, "--format", "markdown", "--settings", str(settings))
    assert out.exit_code == 0, out.output
    assert f"against run [<code>{LAST_NIGHT}</code>](https://dumps.example.org/nightly/runs/{LAST_NIGHT}.html)" in out.stdout
    assert "on top of [<code>I-" in out.stdout and "](https://dumps.example.org/nightly/incidents/i-" in out.stdout


def test_markdown_links_to_the_site_a_snapshot_carries_and_only_as_a_plain_url(sample_warehouse, tmp_path, monkeypatch):
    """A pull request's job passes no settings: the published snapshot carries the night's [site]
    url. On main it carried none, and the comment had no link. The value is a foreign file's:
    rebuilt from its parts, so nothing in it reaches the Markdown as syntax."""
    from flows.warehouse.snapshot import write_snapshot

    monkeypatch.chdir(tmp_path)  # no ./dumpscope.toml
    pr = night_copy(tmp_path)
    edit_gz(pr / EVAL_HLO, ROOT_LINE, WITH_ALL_REDUCE)
    snapshot_file = tmp_path / "warehouse.duckdb"
    write_snapshot(sample_warehouse, snapshot_file, "https://dumps.example.org/nightly")

    def comment(site_url: str | None = None, *args: str) -> str:
        if site_url is not None:
            with duckdb.connect(str(snapshot_file)) as con:
                con.execute("UPDATE schema_info SET value = ? WHERE key = 'site_url'", [site_url])
        out = check(snapshot_file, pr, "--format", "markdown", *args)
        assert out.exit_code == 0, out.output
        return out.stdout

    run_link = f"against run [<code>{LAST_NIGHT}</code>]({{}}runs/{LAST_NIGHT}.html)"
    assert run_link.format("https://dumps.example.org/nightly/") in comment()
    assert "jax-jit / [jit_eval_metrics](https://dumps.example.org/nightly/series/jax-jit-jit-eval-metrics-" in comment()
    hostile = comment("https://x.org/a) [e](javascript:alert(1)) <img src=x>")
    assert run_link.format("https://x.org/a%29%20%5Be%5D%28javascript%3Aalert%281%29%29%20%3Cimg%20src%3Dx%3E/") in hostile
    for value in ("javascript:alert(1)//https://x.org/", "https://x.org/?q=1", "https://user@x.org/", "//x.org/", ""):
        assert "](" not in comment(value), value  # no link at all
    settings = tmp_path / "mine.toml"
    settings.write_text('[site]\nurl = "https://mine.example.org/"\n')
    assert run_link.format("https://mine.example.org/") in comment(None, "--settings", str(settings))  # the settings win


def test_a_new_program_is_listed_as_new_not_as_a_regression(sample_warehouse, tmp_path):
    pr = night_copy(tmp_path)
    (pr / "jax-sharded").mkdir()
    shutil.copy(pr / "jax-pmap/module_0000.jit__fun.cpu_after_optimizations.txt.gz", pr / "jax-sharded")
    got = check_json(sample_warehouse, pr)
    assert got == [{"incident_id": None, "change": "new_program", "job": "jax-sharded", "program": "jit__fun",
                    "kind": "new_program", "headline": "jax-sharded / jit__fun: new program, not in the warehouse",
                    "metrics": [], "series": ["jax-sharded/jit__fun/xla_hlo/after_optimizations"], "steps": [],
                    "cause": [], "evidence": []}]
    out = check(sample_warehouse, pr, "--fail-on", "new")
    assert out.exit_code == 0, out.output
    assert "New programs (not in the warehouse, no baseline):\n  jax-sharded / jit__fun: " \
           "jax-sharded/jit__fun/xla_hlo/after_optimizations" in out.stdout


def test_a_damaged_dump_is_a_failure_naming_the_file(sample_warehouse, tmp_path):
    pr = night_copy(tmp_path)
    cut = pr / PMAP_BUFFERS.removesuffix(".gz")
    text = gzip.decompress((pr / PMAP_BUFFERS).read_bytes())
    cut.write_bytes(text[: len(text) // 2])
    (pr / PMAP_BUFFERS).unlink()
    with cut.open("rb") as raw:
        expected = parse_dump(raw, str(cut)).summary
    assert str(expected.status) == "partial" and expected.errors

    got = check_json(sample_warehouse, pr)
    assert [(r["job"], r["program"], r["kind"], r["metrics"]) for r in got] == [
        ("jax-pmap", "jit__fun", "failure", ["dump.status"])]
    [step] = got[0]["steps"]
    assert step["series"] == "jax-pmap/jit__fun/xla_buffer_assignment/buffer_assignment"
    assert step["detail"] == f"{cut}: " + "\n".join(expected.errors)
    assert got[0]["headline"] == f"jax-pmap / jit__fun: xla_buffer_assignment does not parse: {expected.errors[0].removeprefix(str(cut) + ': ')}"
    assert got[0]["cause"] == [f"xla_buffer_assignment does not parse: {expected.errors[0].removeprefix(str(cut) + ': ')} ({cut})"]
    out = check(sample_warehouse, pr, "--fail-on", "new")
    assert out.exit_code == 4
    assert f"Damaged dumps:\n  partial     {expected.errors[0]}" in out.stdout


def test_a_listing_its_values_file_tells_cut_is_a_failure_as_in_the_nightly(sample_warehouse, tmp_path):
    """The issue's example: cut before its temp arena, the listing reads ok by itself; its values
    file tells it (flows.warehouse.siblings, the nightly's check), so no improvement of temp memory is reported."""
    pr = night_copy(tmp_path)
    listing = pr / "jax-jit/module_0000.jit_train_step.cpu_after_optimizations-buffer-assignment.txt.gz"
    text = gzip.decompress(listing.read_bytes())
    listing.write_bytes(gzip.compress(text[:text.index(b"allocation 37: size 131584, preallocated-temp:")]))
    assert str(parsed_metrics(listing)["memory.temp_bytes"]) == "0"

    got = check_json(sample_warehouse, pr)
    assert [(r["job"], r["program"], r["kind"], r["metrics"]) for r in got] == [
        ("jax-jit", "jit_train_step", "failure", ["dump.status"])]
    [step] = got[0]["steps"]
    reason = (f"{listing}: its allocations add up to 158,416 of the 290,000 bytes its values file "
              "(module_0000.jit_train_step.cpu_after_optimizations-buffer-assignment-values.txt.gz) states: cut")
    assert step["detail"] == f"{listing}: {reason}"  # as every damaged dump's: its path, then its errors


def test_a_damaged_dump_of_a_new_program_still_fails_the_check(sample_warehouse, tmp_path):
    pr = night_copy(tmp_path)
    (pr / "jax-new").mkdir()
    empty = pr / "jax-new" / "module_0000.jit_step.cpu_after_optimizations.txt"
    empty.write_bytes(b"")
    got = check_json(sample_warehouse, pr)
    failures = [r for r in got if r["kind"] == "failure"]
    assert [(r["job"], r["program"], r["steps"][0]["detail"].split(": ")[0]) for r in failures] == [
        ("jax-new", "jit_step", str(empty))]
    assert check(sample_warehouse, pr, "--fail-on", "new").exit_code == 4


def test_against_an_earlier_run_gives_what_the_nightly_opened_the_next_night(sample_warehouse, tmp_path):
    """2026-11-19's dumps against 2026-11-18 open exactly the incidents the nightly opened at 2026-11-19."""
    pr = night_copy(tmp_path, "2026-11-19")
    got = check_json(sample_warehouse, pr, "--against", "2026-11-18")
    with duckdb.connect(str(sample_warehouse), read_only=True) as con:
        nightly = con.execute("""SELECT job, program, kind, metrics, headline, last_good_run FROM incidents
                                 WHERE opened_run = '2026-11-19'""").fetchall()
    assert nightly  # the sample's 2026-11-19 opens several incidents
    opens = [r for r in got if r["change"] == "opens"]
    assert sorted((r["job"], r["program"], r["kind"], r["metrics"], r["headline"], r["last_good_run"]) for r in opens) \
        == sorted((j, p, k, list(m), h, g) for j, p, k, m, h, g in nightly)
    # ...and the improvements it opened, and nothing else: the nightly's one rule.
    with duckdb.connect(str(sample_warehouse), read_only=True) as con:
        fixed = con.execute("SELECT incident_id FROM incidents WHERE closed_run = '2026-11-19' AND closed_how = 'fixed'").fetchall()
    assert sorted(r["incident_id"] for r in got if r["change"] == "fixes") == sorted(i for (i,) in fixed)
    assert {r["change"] for r in got} <= {"opens", "fixes"}
    # Each incident it opens carries the cause the nightly stored (the same diff: candidate against the reference).
    with duckdb.connect(str(sample_warehouse), read_only=True) as con:
        causes = dict(con.execute("SELECT job || '/' || program || '/' || kind, cause FROM incidents WHERE opened_run = '2026-11-19'").fetchall())
    for r in opens:
        assert "\n".join(r["cause"]) == (causes[f"{r['job']}/{r['program']}/{r['kind']}"] or "")


def test_the_history_is_read_a_group_of_jobs_at_a_time(sample_warehouse, tmp_path, monkeypatch):
    """A check reads the history of its jobs a group at a time (memory follows the group, not
    the history): one job per group gives what one group gives, and the same incidents."""
    from flows.resources import MemoryBudget
    from flows.verdict import history

    pr = night_copy(tmp_path, "2026-11-19")
    whole = check_json(sample_warehouse, pr, "--against", "2026-11-18")
    groups = []
    real = history.job_history  # the nightly's reader of a group's history
    monkeypatch.setattr(history, "job_history", lambda con, jobs, *rest: groups.append(jobs) or real(con, jobs, *rest))
    monkeypatch.setattr(MemoryBudget, "incidents_batch_rows", property(lambda self: 1))
    assert check_json(sample_warehouse, pr, "--against", "2026-11-18") == whole
    assert groups == [[job] for job in sorted(p.name for p in pr.iterdir() if p.is_dir())] and len(whole) >= 3


def test_a_hostile_job_name_is_escaped_in_markdown(sample_warehouse, tmp_path):
    pr = night_copy(tmp_path)
    job = "evil<img src=x onerror=alert(1)>|[x](javascript:y)"
    (pr / job).mkdir()
    shutil.copy(pr / "jax-pmap/module_0000.jit__fun.cpu_after_optimizations.txt.gz", pr / job)
    out = check(sample_warehouse, pr, "--format", "markdown")
    assert out.exit_code == 0, out.output
    assert "<img" not in out.stdout and "](javascript" not in out.stdout and "|" not in out.stdout
    assert "- evil&#60;img src=x onerror=alert(1)&#62;&#124;&#91;x&#93;(javascript:y) / jit&#95;&#95;fun: " in out.stdout


def test_bad_arguments_and_a_missing_run(sample_warehouse, tmp_path):
    pr = night_copy(tmp_path)
    missing = check(sample_warehouse, pr, "--against", "2026-01-01")
    assert missing.exit_code == 2
    assert missing.stderr == f"error: no run '2026-01-01' in the warehouse (latest: {LAST_NIGHT})\n"
    assert check(sample_warehouse, pr, "--format", "html").exit_code == 2
    assert check(sample_warehouse, pr, "--fail-on", "open").exit_code == 2
    nothing = check(tmp_path / "none.duckdb", pr)
    assert nothing.exit_code == 1 and "no warehouse at" in nothing.stderr
    assert not (tmp_path / "none.duckdb").exists()
    not_duckdb = tmp_path / "text.duckdb"
    not_duckdb.write_text("not a warehouse")
    assert check(not_duckdb, pr).exit_code == 1 and not_duckdb.read_text() == "not a warehouse"
    assert check(sample_warehouse, tmp_path / "missing-dir").exit_code == 2  # a bad argument


@pytest.mark.integration
def test_the_command_as_a_user_runs_it(sample_warehouse, tmp_path):
    pr = night_copy(tmp_path)
    edit_gz(pr / EVAL_HLO, ROOT_LINE, WITH_ALL_REDUCE)
    out = subprocess.run([sys.executable, "-m", "flows.cli", "check", str(pr), "--warehouse", str(sample_warehouse),
                          "--fail-on", "new"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 4, out.stderr
    assert "1 new incident: 1 regression, 0 failures (0 fixed; 0 improvements, 0 lost; 0 new programs, 0 damaged dumps)" \
        in out.stdout


def test_an_empty_directory_or_a_job_directory_is_refused_with_one_line(sample_warehouse, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = check(sample_warehouse, empty)
    assert out.exit_code == 2 and out.stderr == f"error: {empty} holds no job directory with files: check takes a run directory (DIR/<job>/...)\n"
    job = night_copy(tmp_path) / "jax-jit"  # one level too deep: a job's files
    out = check(sample_warehouse, job)
    assert out.exit_code == 2 and out.stderr.startswith(f"error: {job} holds dump files directly (")
    assert len(out.stderr.splitlines()) == 1


def test_a_directory_named_as_a_run_of_the_warehouse_is_still_the_candidate(sample_warehouse, tmp_path, monkeypatch):
    """`dumpscope check 2026-11-20` from where that directory lies: its dumps are the candidate's,
    named by their full path, never taken for the warehouse's run of the same name (whose paths
    are 2026-11-20/<job>/...): on main the two runs' figures and items were joined by path, and the
    extra all-reduce lost its own metric and its cause."""
    pr = Path(shutil.copytree(BUCKET / LAST_NIGHT, tmp_path / LAST_NIGHT))
    edit_gz(pr / EVAL_HLO, ROOT_LINE, WITH_ALL_REDUCE)
    absolute = check_json(sample_warehouse, pr)
    monkeypatch.chdir(tmp_path)
    assert check_json(sample_warehouse, Path(LAST_NIGHT)) == absolute
    [incident] = absolute
    assert incident["metrics"] == ["kernel.collective.all-reduce", "kernel.collectives", "kernel.launches"]
    assert incident["cause"] == ["all-reduce f32[] appeared (×1, 4 B)"]
    assert incident["evidence"][0]["after_path"] == f"{pr / EVAL_HLO}"


def test_dir_is_listed_as_the_nightly_lists_a_run(sample_warehouse, tmp_path):
    """The nightly's listing decides what DIR holds: a job name it refuses (white space at an end, a
    control character) is left out and said, as the nightly says it; of two files whose names read
    the same once escaped, the one it keeps is read. On main check read all four: three new
    programs (jit__fun#2, #3 and two jobs the nightly never has)."""
    from flows.ingest.bucket import list_objects

    pr = night_copy(tmp_path)
    hlo = pr / "jax-pmap/module_0000.jit__fun.cpu_after_optimizations.txt.gz"
    for job in ("jax-pmap ", "jax\x1bpmap"):
        (pr / job).mkdir()
        shutil.copy(hlo, pr / job)
    raw_name = os.fsencode(pr / "jax-pmap") + b"/module_0001.jit_odd\xff.cpu_after_optimizations.txt.gz"
    shutil.copy(hlo, raw_name)  # a name that is not UTF-8, and the text its escaped form reads
    shutil.copy(hlo, pr / "jax-pmap" / "module_0001.jit_odd\\xff.cpu_after_optimizations.txt.gz")
    bucket = tmp_path / "bucket"
    shutil.copytree(pr, bucket / "2026-11-21", symlinks=True)
    refused: list[str] = []
    nightly = list_objects(str(bucket), refused=refused)
    assert refused == ["job name 'jax-pmap ' starts or ends with white space: 1 object not read",
                       "job name 'jax\\x1bpmap' holds a control character: 1 object not read"]

    got = check_json(sample_warehouse, pr)
    assert [(r["job"], r["program"], r["series"]) for r in got] == [
        ("jax-pmap", "jit__fun#2", ["jax-pmap/jit__fun#2/xla_hlo/after_optimizations"])]
    out = check(sample_warehouse, pr)
    assert out.stdout.endswith("\n\nNot read (the nightly leaves these out of a run):\n" + "\n".join(
        f"  {line}" for line in refused) + "\n"), out.stdout
    from flows.verdict.candidate import list_directory

    listed, _ = list_directory(pr)
    assert [o.path.removeprefix(f"{pr}/") for o in listed] == [o.path.removeprefix("2026-11-21/") for o in nightly]


def test_a_damaged_dump_is_one_failure_whoever_judges_it():
    """``unjudged_damage`` fills in only what the rule leaves: a damaged dump of a new series or of
    none is a failure entry of its own; of a known series it is the rule's; and once the rule opens
    a failure for a new series itself (a first-night failure), it is not said twice."""
    from flows.verdict.candidate import unjudged_damage
    from transforms.trends.rules import Settings

    def damaged(path, program):
        return {"path": path, "job": "jax-new", "kind": "xla_hlo", "program": program, "status": "failed",
                "error": f"{path}: the file is empty (0 bytes), not XLA HLO module text"}

    fresh = pl.DataFrame({"path": ["a", "b", "c"], "series_program": ["new_step", "known_step", "judged_step"],
                          "series": ["jax-new/new_step/xla_hlo", "jax-new/known_step/xla_hlo", "jax-new/judged_step/xla_hlo"]})
    opened = pl.DataFrame({"series": ["jax-new/judged_step/xla_hlo"]})
    got = unjudged_damage([damaged("a", "new_step"), damaged("b", "known_step"), damaged("c", "judged_step"),
                           damaged("d", None)], fresh, opened, {"jax-new/new_step/xla_hlo", "jax-new/judged_step/xla_hlo"},
                          Settings())
    assert [(r["program"], r["steps"][0]["series"], r["headline"]) for r in got] == [
        ("new_step", "jax-new/new_step/xla_hlo", "jax-new / new_step: xla_hlo does not parse: the file is empty (0 bytes), "
                                                  "not XLA HLO module text"),
        ("", None, "jax-new / : xla_hlo does not parse: the file is empty (0 bytes), not XLA HLO module text")]
