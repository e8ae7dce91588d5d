"""``dumpscope check DIR``: what a change would do to the warehouse's figures, before it lands.

``DIR`` holds one night's jobs as a pull request's CI job wrote them (``DIR/<job>/**``,
like one run directory of the bucket, with an optional ``DIR/run.json``). Each file is
staged by the nightly's driver (``flows.ingest.staging.stage_object``: the same parsers and
limits, records written to Parquet) into a temporary directory that is removed at the
end, and named by the nightly's series rules (``transforms.trends.series``, with DIR's
run.json ``"series"`` mapping and the settings' ``[series]`` table).

The candidate is one more run after the reference run (the warehouse's latest, or
``against``), judged against the history by ``flows.verdict.candidate`` as the nightly would
judge it, through a read-only connection. The incidents the candidate run would open are
the answer, with their cause and the dump lines it stands on (assembled here for
``transforms.check_report``). Nothing is written to the warehouse, beside it or in DIR.

DIR's files are read as the nightly reads a bucket's (``flows.ingest.bucket.open_object``): only
regular files inside DIR, never through a symbolic link below it, never a FIFO or a
device, which are reported as failed dumps (a refused run.json as a run.json error),
quoting nothing of what they point to; excerpts only from the bytes that were parsed.

``check_dir`` raises ``CheckError`` (a ``CommandError``, exit 1) when the warehouse does not
exist or is no DuckDB file; ``BadDirectory`` (a ``CheckError``, exit 2) when DIR is not a
directory, holds no job directory with files, or holds a job's files rather than job
directories; ``NoSuchRun`` (``flows.warehouse.reads``, exit 2) when ``against`` names no run. Output: ``transforms.check_report``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import replace
from pathlib import Path

import duckdb
import polars as pl
from fsspec.implementations.local import LocalFileSystem

import typer

from flows.commands import preflight
from flows.commands.parse import json_value, number
from flows.errors import CommandError
from flows.ingest.bucket import BucketReadError, read_runs
from flows.ingest.staging import StagedResult, stage_object
from flows.resources import MemoryBudget, parse_memory
from flows.verdict import candidate as judged
from flows.verdict.settings import load_settings
from flows.warehouse.fetch import fetched, is_url
from flows.warehouse.loading import lost_of
from flows.warehouse.reads import NoSuchRun
from flows.warehouse.siblings import told_by_siblings
from flows.warehouse.store import connect_readonly
from transforms.check_report import FORMATS, CheckResult, render
from transforms.layout import BucketObject, Role, escape_name, locate
from transforms.parse import DEFAULT_LIMITS, ParseLimits
from transforms.trends import incident_rule
from transforms.trends.headlines import failure_text
from transforms.trends.rules import Settings
from transforms.trends.series import assign_series, compile_overrides

__all__ = ["FORMATS", "BadDirectory", "CheckError", "CheckResult", "NoSuchRun", "check_dir", "main", "render"]
from flows.errors import FAILING  # --fail-on new: the change would open a regression or failure


class CheckError(CommandError):
    """No warehouse (or not a DuckDB file): one line for people (exit 1)."""


class BadDirectory(CheckError, exit_code=2):
    """DIR is not a run directory of job directories (a bad argument)."""


def check_dir(directory: Path, warehouse: Path, *, against: str | None = None, settings: Settings | None = None,
              limits: ParseLimits = DEFAULT_LIMITS, budget: MemoryBudget | None = None,
              foreign: bool = False) -> CheckResult:
    """Compare the dumps under ``directory`` with the warehouse's run ``against`` (default: the
    latest); ``foreign``: a snapshot fetched from elsewhere (read with no file access). The history is read a group of the candidate's jobs at a time, each group of at
    most ``budget.incidents_batch_rows`` stored figures (an incident is one program's, and a
    program one job's): memory follows the group, not the history."""
    settings = settings if settings is not None else load_settings(None)
    budget = budget or MemoryBudget(parse_memory(settings.memory_limit))
    files = _list_dir(directory, judged.CANDIDATE_RUN)  # DIR's shape is checked before the warehouse is opened
    try:
        con = connect_readonly(warehouse, budget=budget, foreign=foreign)
    except (FileNotFoundError, duckdb.Error) as exc:
        raise CheckError(str(exc)) from None
    work = Path(tempfile.mkdtemp(prefix="dumpscope-check-"))
    try:
        history_order, accepts = judged.history_runs(con, against)
        run_id = judged.fresh_run_id(history_order)
        objects = [_in_run(o, run_id) for o in files]
        info = read_runs(LocalFileSystem(), objects).get(run_id)
        order = judged.with_candidate(history_order, run_id, info.commit if info else None)
        candidate, metrics, damaged, staged = _parse(objects, work, limits)
        ref = history_order.row(-1, named=True)
        overrides = (info.extra or {}).get("series") if info else None
        # A dump giving each program's figures (TORCH_TRACE) has a series per program, as at night.
        split = metrics.join(candidate.select("path", pl.col("program").alias("named")), on="path").filter(
            pl.col("program").ne_missing(pl.col("named"))).select("path", "program").unique()
        fresh = assign_series(candidate, {run_id: {str(k): str(v) for k, v in overrides.items()}}
                              if isinstance(overrides, dict) else {}, compile_overrides(settings.series_patterns),
                              split)
        result = CheckResult(against=ref["run_id"], against_commit=ref["commit"],
                             candidate_commit=info.commit if info else None, dumps=len(objects), damaged=damaged,
                             run_errors=list(info.meta_errors) if info else [], site_url=settings.site_url)
        verdict = judged.judge(con, order, accepts, run_id, candidate, fresh, metrics, staged, objects, settings,
                               budget.incidents_batch_rows)
    finally:
        con.close()
        shutil.rmtree(work, ignore_errors=True)
    result.new_programs = verdict.new_programs
    incidents, steps, diffs = verdict.incidents, verdict.steps, verdict.diffs
    opened = incidents.filter(pl.col("opened_run") == run_id)
    closed_here = (pl.col("closed_run") == run_id) & (pl.col("opened_run") != run_id)
    result.opened = _described(opened.filter(pl.col("kind") != "improvement"), steps, diffs, change="opens")
    result.improvements = _described(opened.filter(pl.col("kind") == "improvement"), steps, diffs, change="opens")
    result.fixed = _described(incidents.filter(closed_here & (pl.col("closed_how") == "fixed")), steps, diffs, change="fixes")
    result.lost = _described(incidents.filter(closed_here & (pl.col("closed_how") == "lost")), steps, diffs, change="loses")
    # A revert reopens what the change it undoes had closed: the same incident again, not a new one.
    result.reopened = _described(incidents.filter(pl.col("reopened_runs").list.contains(run_id)),
                                 steps.filter(pl.col("reopened_run") == run_id), diffs, change="reopens")
    result.opened += _damaged_new(damaged, fresh, {s for p in result.new_programs for s in p["series"]}, settings)
    return result


def main(*, directory: Path, against: str | None, warehouse: str, fmt: str, fail_on: str | None,
         settings: Path | None, memory_limit: str | None, storage_option: list[str] = ()) -> int:
    """Print what DIR would open in ``fmt``; the exit status is 4 when ``fail_on`` finds some.
    ``warehouse``: a path, or the URL of a published snapshot (fetched with ``storage_option``)."""
    from flows.ingest.bucket import parse_storage_options

    try:
        storage_options = parse_storage_options(list(storage_option))
    except ValueError as exc:
        raise CommandError(str(exc), exit_code=preflight.BAD_ARGUMENT) from None
    conf, budget = preflight.settings_and_budget(settings, memory_limit)
    if is_url(warehouse):  # a published snapshot: downloaded within the settings' bounds, read as foreign
        max_bytes = preflight.size_setting(conf.check_max_download, "[check] max_download", settings)
        with fetched(warehouse, storage_options, max_bytes=max_bytes, seconds=conf.check_download_seconds) as local:
            result = check_dir(directory, local, against=against, settings=conf, budget=budget, foreign=True)
    else:
        result = check_dir(directory, Path(warehouse.removeprefix("file://")), against=against, settings=conf,
                           budget=budget)
    typer.echo(render(result, str(directory), fmt))
    if fail_on and result.failing:
        typer.echo(f"{len(result.failing)} new incident(s) (regressions or failures)", err=True)
        return FAILING
    return 0


def _list_dir(directory: Path, run_id: str) -> list[BucketObject]:
    """Every file under ``directory`` as an object of run ``run_id``, located as the nightly
    locates a run directory's files (``transforms.layout.locate``). ``path`` is the path a
    person reads (``directory`` joined with the file's relative path, escaped as the
    nightly escapes names), ``full_path`` the real one. Symbolic links (to files or
    directories), FIFOs and the like are listed, not followed: reading refuses them, as the
    nightly's listing lists them for its reads to refuse. Raises ``BadDirectory`` for a
    directory that is not one night's jobs."""
    if not directory.is_dir():
        raise BadDirectory(f"{directory} is not a directory")
    root = str(directory).rstrip("/") or "/"
    out, loose = [], []
    for parent, dirs, files in os.walk(root):
        dirs.sort()
        links = [d for d in dirs if os.path.islink(os.path.join(parent, d))]  # os.walk lists them, never enters
        for name in sorted(files + links):
            full = os.path.join(parent, name)
            rel = escape_name(os.path.relpath(full, root).replace(os.sep, "/"))
            where = locate(f"{run_id}/{rel}")
            if where is None:
                continue
            try:
                st = os.lstat(full)
            except OSError:
                continue  # vanished: nothing to read
            regular = stat.S_ISREG(st.st_mode)
            if where.job is None and where.role is Role.DUMP and regular:
                loose.append(rel)
                continue
            out.append(BucketObject(escape_name(full), full, st.st_size if regular else 0, st.st_mtime, run_id, where.job,
                                    where.role, root=root))
    if loose:
        raise BadDirectory(f"{directory} holds dump files directly ({', '.join(loose[:3])}{', …' if len(loose) > 3 else ''}): "
                           "check takes a run directory whose job directories hold the dumps (DIR/<job>/...)")
    if not any(o.role is Role.DUMP for o in out):
        raise BadDirectory(f"{directory} holds no job directory with files: check takes a run directory (DIR/<job>/...)")
    return out


def _in_run(obj: BucketObject, run_id: str) -> BucketObject:
    return obj if obj.run_id == run_id else replace(obj, run_id=run_id)


def _parse(objects: list[BucketObject], work: Path, limits: ParseLimits
           ) -> tuple[pl.DataFrame, pl.DataFrame, list[dict], dict[str, StagedResult]]:
    """(dumps rows, metrics rows (path, program, metric, value) of the dumps that parsed ok, damaged
    dumps, staged result by path) of the candidate, each staged by the nightly's driver into ``work``."""
    fs = LocalFileSystem()
    rows, metric_rows, damaged, staged, unreadable = [], [], [], {}, {}
    dumps = [obj for obj in objects if obj.role is Role.DUMP]
    for obj in dumps:
        try:
            staged[obj.path] = stage_object(fs, obj, work, limits=limits)
        except (BucketReadError, OSError) as exc:
            unreadable[obj.path] = str(exc)
    # XLA side files short of what their compile's other files state: partial, as the nightly says.
    staged.update(told_by_siblings([(obj, staged[obj.path]) for obj in dumps if obj.path in staged]))
    for obj in dumps:
        if (result := staged.get(obj.path)) is None:
            damaged.append({"path": obj.path, "job": obj.job or "", "kind": None, "program": None,
                            "status": "unreadable", "error": unreadable[obj.path]})
            continue
        s = result.summary
        error = "\n".join(s["errors"]) or None
        lost = lost_of(s["status"], s.get("lost"))
        rows.append({"path": obj.path, "run_id": obj.run_id, "job": obj.job or "", "kind": s["kind"], "stage": s["stage"],
                     "program": s["program"], "status": s["status"], "error": error, "dump_id": result.sha256,
                     "parser_version": s["parser_version"], "lost_metrics": lost})
        if s["status"] == "ok" or lost is not None:  # the nightly's metric rows (loading.metric_rows): per program when given
            figures = s.get("programs") or {s["program"]: s["metrics"]}
            metric_rows += [(obj.path, program, k, json_value(float(v)))
                            for program, values in sorted(figures.items()) for k, v in sorted(values.items())]
        if s["status"] != "ok" and (s["kind"] != "unknown" or result.sha256 is None):  # a refused file fails whatever its name
            damaged.append({"path": obj.path, "job": obj.job or "", "kind": s["kind"], "program": s["program"],
                            "status": s["status"], "error": error or "", "lost": lost})
    dumps = pl.DataFrame(rows, schema=judged.DUMP_SCHEMA)
    metrics = pl.DataFrame(metric_rows, schema={"path": pl.String, "program": pl.String, "metric": pl.String,
                                                "value": pl.Float64}, orient="row")
    return dumps, metrics, damaged, staged


def _described(incidents: pl.DataFrame, steps: pl.DataFrame, diffs: pl.DataFrame, *, change: str) -> list[dict]:
    """Incidents as plain objects, each with its steps (metric, before, after), and for those the
    candidate opens, its cause lines and their evidence."""
    out = []
    opened = change == "opens"
    for inc in incidents.sort("impact", "incident_id", descending=[True, False]).iter_rows(named=True):
        own = steps.filter(pl.col("incident_id") == inc["incident_id"]).sort("impact", "metric", "series",
                                                                            descending=[True, False, False])
        # Opened: from the level it stepped from to the candidate's value; closed: from the value
        # it opened at to the candidate's.
        shown = [_step(s, s["baseline"], s["value"]) if opened else _step(s, s["value"], s["latest_value"])
                 for s in own.iter_rows(named=True)]
        cause, evidence_rows = [], []
        if opened:
            mine = diffs.join(own.select("series").unique(), on="series", how="semi").with_columns(
                pl.lit(inc["incident_id"]).alias("incident_id"))
            cause = (incident_rule.causes(pl.DataFrame([inc]).select("incident_id"), own, mine)[0] or "").splitlines()
            evidence_rows = mine.sort("series", "rank").select(
                "series", "description", "before_path", "lines_before", "after_path", "lines_after").to_dicts()
        out.append({
            # An opened incident's id would name the candidate's run, which no night will have: none.
            "incident_id": None if opened else inc["incident_id"], "change": change, "job": inc["job"],
            "program": inc["program"], "kind": inc["kind"], "headline": inc["headline"], "metrics": inc["metrics"],
            "last_good_run": inc["last_good_run"], "stacked_on": inc["stacked_on"] or [],
            "steps": shown, "cause": cause, "evidence": evidence_rows,
        })
    return out


def _step(s: dict, before: float | None, after: float | None) -> dict:
    """One ``incident_steps`` row as the output lists it, with the figures this entry shows."""
    change = None if before is None or after is None else after - before
    return {"series": s["series"], "dump_kind": s["dump_kind"], "stage": s["stage"], "metric": s["metric"],
            "step": s["step"], "before": _num(before), "after": _num(after), "change": _num(change), "detail": s["detail"]}


def _num(value: float | None) -> float | int | None:
    return None if value is None else json_value(number(value))


def _damaged_new(damaged: list[dict], fresh: pl.DataFrame, new_series: set[str], settings: Settings) -> list[dict]:
    """A ``failure`` entry for each damaged dump of a new program (or of none: a file the
    parsers cannot name): a check never passes a dump the parsers could not read. A damaged
    dump of a known series is the rule's: a failure incident when it parsed before, nothing
    new when its failure is open already."""
    by_path = {p: (series, program) for p, series, program in fresh.select("path", "series", "series_program").iter_rows()}
    out = []
    for d in damaged:
        series, program = by_path.get(d["path"], (None, d["program"] or ""))
        if series is not None and series not in new_series:
            continue
        if d.get("lost") is not None and not incident_rule.reads_any(settings, series or "", d["lost"]):
            continue  # damage that cost no figure the verdict reads: listed, not a failure
        step = {"series": series, "dump_kind": d["kind"], "stage": None, "metric": "dump.status", "step": "failure",
                "before": None, "after": None, "change": None, "detail": f"{d['path']}: {d['error']}"}
        out.append({
            "incident_id": None, "change": "opens", "job": d["job"], "program": program, "kind": "failure",
            "headline": f"{d['job']} / {program}: " + failure_text(step), "metrics": ["dump.status"],
            "last_good_run": None, "stacked_on": [], "steps": [step], "cause": [], "evidence": [],
        })
    return out
