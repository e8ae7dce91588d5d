"""`dumpscope check` is the nightly's next run, written nowhere (issue 44's last target, issue 45 item 3).

On every night of the sample bucket and of each incident bucket (tests/incident_buckets):

- a byte-identical copy of the night (partial dumps, rank logs and failed exports included),
  checked against the warehouse of the bucket up to and including that night, is nothing new:
  exit 0 with ``--fail-on new``, no change listed;
- the night, checked against the warehouse of the nights before it, opens, fixes and loses exactly
  what the nightly then opens, fixes and loses: the same programs, kinds, headlines, steps (series,
  metric, before, after, detail), causes, evidence and stacked-on incidents (but an opened
  incident's id: check's would name a run no night has).

Each bucket is built once, a night at a time, in this process (``night_in_process``): the bucket
grows by one run directory, the night runs, and the published warehouse file is copied, the
warehouse as it was that morning (``check`` reads no records file: the copy needs no store).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.warehouse import store as wh

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[1]
INCIDENTS = Path(__file__).parent / "incident_buckets"
BUCKETS = {"sample": ROOT / "data" / "sample_bucket"} | {
    name: INCIDENTS / name for name in sorted(json.loads((INCIDENTS / "MANIFEST.json").read_text())["scenarios"])}
NIGHTS = {name: sorted(p.name for p in bucket.iterdir() if p.is_dir()) for name, bucket in BUCKETS.items()}
CASES = [(name, night) for name, nights in NIGHTS.items() for night in nights]


@pytest.fixture(scope="module")
def mornings(tmp_path_factory):
    """``mornings(bucket)``: night -> a copy of the bucket's warehouse the morning after that night."""
    built: dict[str, dict[str, Path]] = {}

    def of(name: str) -> dict[str, Path]:
        if name not in built:
            built[name] = _night_by_night(BUCKETS[name], tmp_path_factory.mktemp(name))
        return built[name]

    return of


def _night_by_night(source: Path, where: Path) -> dict[str, Path]:
    from flows.nightly import night_in_process

    bucket, warehouse, out = where / "bucket", where / "warehouse.duckdb", {}
    for night in sorted(p.name for p in source.iterdir() if p.is_dir()):
        shutil.copytree(source / night, bucket / night)
        night_in_process(bucket=str(bucket), warehouse=warehouse, workers=1, report_path=where / "report.md")
        out[night] = where / f"{night}.duckdb"
        shutil.copyfile(warehouse, out[night])
    return out


def _check(directory: Path, warehouse: Path, *args: str):
    return CliRunner().invoke(app, ["check", str(directory), "--warehouse", str(warehouse), "--format", "json", *args])


@pytest.mark.parametrize(("name", "night"), CASES)
def test_a_copy_of_a_night_is_nothing_new(mornings, name, night, tmp_path):
    copy = shutil.copytree(BUCKETS[name] / night, tmp_path / night)
    out = _check(copy, mornings(name)[night], "--fail-on", "new")
    got = [(r["job"], r["program"], r["kind"], r["metrics"]) for r in json.loads(out.stdout or "null") or []]
    # A copy of a night's timings is the same measurement, not a second one: the sample's one slow
    # compile (2026-11-18) copied is not two slow runs of three (docs/trends.md, "Noisy timings").
    assert (out.exit_code, got) == (0, []), out.output


@pytest.mark.parametrize(("name", "night"), [(name, night) for name, night in CASES if night != NIGHTS[name][0]])
def test_a_night_checked_the_morning_before_is_what_the_nightly_then_does(mornings, name, night, tmp_path):
    before = NIGHTS[name][NIGHTS[name].index(night) - 1]
    copy = shutil.copytree(BUCKETS[name] / night, tmp_path / night)
    out = _check(copy, mornings(name)[before])
    assert out.exit_code == 0, out.output
    # check names DIR's files by their path; the nightly by theirs in the bucket: <night>/<job>/...
    checked = json.loads(out.stdout.replace(json.dumps(f"{tmp_path}/")[1:-1], ""))
    assert sorted(_said(r) for r in checked if r["change"] != "new_program") == _nightly(mornings(name)[night], night)


def _figure(value: float | None) -> float | None:
    return None if value is None else float(value)


def _said(r: dict) -> tuple:
    """One change of check's JSON, as ``_nightly`` reads the same change from the warehouse."""
    opened = r["change"] == "opens"
    steps = sorted((s["series"], s["dump_kind"], s["stage"], s["metric"], s["step"], _figure(s["before"]),
                    _figure(s["after"]), s["detail"]) for s in r["steps"])
    evidence = [tuple(e.values()) for e in r["evidence"]]
    return (r["change"], None if opened else r["incident_id"], r["job"], r["program"], r["kind"], r["headline"],
            tuple(r["metrics"]), r["last_good_run"] if opened else None, tuple(r["stacked_on"]) if opened else (),
            tuple(steps), "\n".join(r["cause"]) if opened else "", tuple(evidence))


def _nightly(warehouse: Path, night: str) -> list[tuple]:
    """What the nightly opened, fixed, lost and reopened (a revert) at ``night``, in ``_said``'s terms."""
    with wh.connect_readonly(warehouse) as con:
        incidents = con.execute("""
            SELECT incident_id, opened_run = ? AS opened, CASE WHEN opened_run = ? THEN 'opens'
                   WHEN list_contains(reopened_runs, ?) THEN 'reopens'
                   WHEN closed_how = 'fixed' THEN 'fixes' ELSE 'loses' END, job, program, kind, headline, metrics,
                   last_good_run, stacked_on, coalesce(cause, '')
            FROM incidents WHERE opened_run = ? OR list_contains(reopened_runs, ?)
                              OR (closed_run = ? AND closed_how IN ('fixed', 'lost'))""",
                                [night] * 6).fetchall()
        out = []
        for iid, opened, change, job, program, kind, headline, metrics, last_good, stacked_on, cause in incidents:
            # A reopened incident lists the steps the revert reopened (incident_steps.reopened_run).
            reopened = "AND reopened_run = ?" if change == "reopens" else ""
            steps = con.execute(f"""SELECT series, dump_kind, stage, metric, step, {'baseline, value' if opened else
                                    'value, latest_value'}, detail FROM incident_steps WHERE incident_id = ? {reopened}""",
                                [iid, *([night] if reopened else [])]).fetchall()
            evidence = con.execute("""
                SELECT series, description, before_path, lines_before, after_path, lines_after FROM diffs
                WHERE run_id = ? AND series IN (SELECT series FROM incident_steps WHERE incident_id = ?)
                ORDER BY series, rank""", [night, iid]).fetchall() if opened else []
            out.append((change, None if opened else iid, job, program, kind, headline, tuple(metrics),
                        last_good if opened else None, tuple(stacked_on) if opened else (),
                        tuple(sorted(tuple(s[:5]) + (_figure(s[5]), _figure(s[6]), s[7]) for s in steps)),
                        cause if opened else "", tuple(evidence)))
    return sorted(out)
