"""``dumpscope check DIR``: what a change would do to the warehouse's figures, before it lands.

``DIR`` holds one night's jobs as a pull request's CI job wrote them (``DIR/<job>/**``,
like one run directory of the bucket, with an optional ``DIR/run.json``). Each file is
staged by the nightly's driver (``flows.ingest.staging.stage_object``: the same parsers and
limits, records written to Parquet) into a temporary directory that is removed at the
end, and named by the nightly's series rules (``transforms.trends.series``, with DIR's
run.json ``"series"`` mapping and the settings' ``[series]`` table).

The candidate is one more run after the reference run (the warehouse's latest, or
``against``): the history of the candidate's jobs up to the reference run is read from
the published warehouse through a read-only connection, a group of jobs at a time, and
the nightly's rule (``transforms.trends.incident_rule.compute_incidents``) runs over
history + candidate. The incidents the candidate run would open are the answer, with
their cause: the structural diff of each series' candidate dump against its last dump in
the history (``transforms.trends.diffs``; the candidate's items computed from its staged
records, or taken from the warehouse when the warehouse holds the same content), each
change with the dump lines it stands on. Nothing is written to the warehouse, beside it
or in DIR.

DIR's files are read as the nightly reads a bucket's (``flows.ingest.bucket.open_object``): only
regular files inside DIR, never through a symbolic link below it, never a FIFO or a
device, which are reported as failed dumps (a refused run.json as a run.json error),
quoting nothing of what they point to; excerpts only from the bytes that were parsed.

``check_dir`` raises ``CheckError`` (one line for people) when the warehouse does not
exist or is no DuckDB file; ``BadDirectory`` (a ``CheckError``, exit 2) when DIR is not a
directory, holds no job directory with files, or holds a job's files rather than job
directories; ``NoSuchRun`` (exit 2) when ``against`` names no run. Output: ``transforms.check_report``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from datetime import timedelta
from pathlib import Path

import duckdb
import polars as pl
from fsspec.implementations.local import LocalFileSystem

from flows.verdict import history as history_mod
from flows.warehouse.reads import frame_of
from flows.verdict.settings import load_settings
from flows.ingest.bucket import BucketReadError, open_object, read_runs
from flows.verdict.items import excerpts_of
from flows.commands.parse import json_value, number
from flows.resources import MemoryBudget, parse_memory
from flows.warehouse.siblings import told_by_siblings
from flows.ingest.staging import StagedResult, stage_object
from flows.warehouse.store import connect_readonly
from transforms.check_report import FORMATS, CheckResult, render
from transforms.layout import BucketObject, Role, escape_name, locate
from transforms.parse import DEFAULT_LIMITS, ParseLimits
from transforms.trends import diffs as diff_mod
from transforms.trends import incident_rule
from transforms.trends import incidents as incident_mod
from transforms.trends import metric_trends as trends
from transforms.trends.headlines import failure_text
from transforms.trends.rules import Settings
from transforms.trends.series import SERIES_SCHEMA, assign_series, compile_overrides

__all__ = ["FORMATS", "BadDirectory", "CheckError", "CheckResult", "NoSuchRun", "check_dir", "render"]
CANDIDATE_RUN = "candidate"  # the run id DIR gets (another one if the warehouse has a run of that name)
# The columns of the warehouse's dumps table that series, health and items need.
_DUMP_COLUMNS = ("path", "run_id", "job", "kind", "stage", "program", "status", "error", "dump_id", "parser_version")


class CheckError(Exception):
    """No warehouse (or not a DuckDB file): one line for people."""


class BadDirectory(CheckError):
    """DIR is not a run directory of job directories (a bad argument)."""


class NoSuchRun(CheckError):
    """``against`` names no run of the warehouse (a bad argument)."""


def check_dir(directory: Path, warehouse: Path, *, against: str | None = None, settings: Settings | None = None,
              limits: ParseLimits = DEFAULT_LIMITS, budget: MemoryBudget | None = None) -> CheckResult:
    """Compare the dumps under ``directory`` with the warehouse's run ``against`` (default: the
    latest). The history is read a group of the candidate's jobs at a time, each group of at
    most ``budget.incidents_batch_rows`` stored figures (an incident is one program's, and a
    program one job's): memory follows the group, not the history."""
    settings = settings if settings is not None else load_settings(None)
    budget = budget or MemoryBudget(parse_memory(settings.memory_limit))
    files = _list_dir(directory, CANDIDATE_RUN)  # DIR's shape is checked before the warehouse is opened
    try:
        con = connect_readonly(warehouse, budget=budget)
    except (FileNotFoundError, duckdb.Error) as exc:
        raise CheckError(str(exc)) from None
    work = Path(tempfile.mkdtemp(prefix="dumpscope-check-"))
    try:
        history_order, accepts = _history_runs(con, against)
        run_id = _fresh_run_id(history_order)
        objects = [_in_run(o, run_id) for o in files]
        info = read_runs(LocalFileSystem(), objects).get(run_id)
        candidate, metrics, damaged, staged = _parse(objects, work, limits)
        ref = history_order.row(-1, named=True)
        order = pl.concat([history_order, pl.DataFrame(
            {"run_seq": [ref["run_seq"] + 1], "run_id": [run_id], "started_at": [ref["started_at"] + timedelta(seconds=1)],
             "commit": [info.commit if info else None]}, schema=history_order.schema)])
        overrides = (info.extra or {}).get("series") if info else None
        fresh = assign_series(candidate, {run_id: {str(k): str(v) for k, v in overrides.items()}}
                              if isinstance(overrides, dict) else {}, compile_overrides(settings.series_patterns))
        result = CheckResult(against=ref["run_id"], against_commit=ref["commit"],
                             candidate_commit=info.commit if info else None, dumps=len(objects), damaged=damaged,
                             run_errors=list(info.meta_errors) if info else [], site_url=settings.site_url)
        parts, pairs = [], []
        jobs = sorted(candidate.get_column("job").unique().to_list())
        for group in history_mod.job_groups(con, jobs, budget.incidents_batch_rows):
            in_group = pl.col("job").is_in(pl.Series(group, dtype=pl.String).implode())
            history = _history_dumps(con, history_order, group)
            stored_series = _stored_series(con, history)
            history_metrics = _metrics_of(con, history.filter(pl.col("status") == "ok").get_column("path"))
            group_fresh, group_candidate = fresh.filter(in_group), candidate.filter(in_group)
            result.new_programs += _new_programs(group_fresh, stored_series)
            pairs.append(_pairs(stored_series, history, group_fresh, history_order, run_id))
            parts.append(_incidents(pl.concat([stored_series, group_fresh]), pl.concat([history, group_candidate]),
                                    pl.concat([history_metrics, metrics.join(group_candidate.select("path"), on="path",
                                                                             how="semi")]),
                                    order, accepts, settings))
            del history, stored_series, history_metrics
        incidents, steps = incident_mod.in_order(pl.concat([p.incidents for p in parts]), pl.concat([p.steps for p in parts]))
        opened = incidents.filter(pl.col("opened_run") == run_id)
        diffs = _candidate_diffs(con, pl.concat(pairs), candidate.join(fresh.select("path", "series"), on="path"),
                                 staged, objects, steps.filter(pl.col("opened_run") == run_id))
    finally:
        con.close()
        shutil.rmtree(work, ignore_errors=True)
    closed_here = (pl.col("closed_run") == run_id) & (pl.col("opened_run") != run_id)
    result.opened = _described(opened.filter(pl.col("kind") != "improvement"), steps, diffs, change="opens")
    result.improvements = _described(opened.filter(pl.col("kind") == "improvement"), steps, diffs, change="opens")
    result.fixed = _described(incidents.filter(closed_here & (pl.col("closed_how") == "fixed")), steps, diffs, change="fixes")
    result.lost = _described(incidents.filter(closed_here & (pl.col("closed_how") == "lost")), steps, diffs, change="loses")
    result.opened += _damaged_new(damaged, fresh, {s for p in result.new_programs for s in p["series"]})
    return result


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
    from dataclasses import replace

    return obj if obj.run_id == run_id else replace(obj, run_id=run_id)


def _history_runs(con, against: str | None) -> tuple[pl.DataFrame, list[dict]]:
    """The warehouse's runs up to the reference run, in run order, and the accept log."""
    order = trends.run_order(frame_of(con, 'SELECT run_id, started_at, "commit" FROM runs'))
    if order.is_empty():
        raise CheckError("the warehouse holds no run yet (run `dumpscope run` first)")
    if against is not None:
        at = order.filter(pl.col("run_id") == against)
        if at.is_empty():
            raise NoSuchRun(f"no run {against!r} in the warehouse (latest: {order.get_column('run_id')[-1]})")
        order = order.filter(pl.col("run_seq") <= at.get_column("run_seq")[0])
    accepts = frame_of(con, "SELECT series, run_id, metric, accepted_at, accepted_by, note, incident_id FROM accepts")
    return order, accepts.to_dicts()


def _fresh_run_id(order: pl.DataFrame) -> str:
    taken = set(order.get_column("run_id").to_list())
    run_id = CANDIDATE_RUN
    while run_id in taken:
        run_id += "'"
    return run_id


def _parse(objects: list[BucketObject], work: Path, limits: ParseLimits
           ) -> tuple[pl.DataFrame, pl.DataFrame, list[dict], dict[str, StagedResult]]:
    """(dumps rows, metrics rows of the dumps that parsed ok, damaged dumps, staged result by
    path) of the candidate, each staged by the nightly's driver into ``work``."""
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
        rows.append({"path": obj.path, "run_id": obj.run_id, "job": obj.job or "", "kind": s["kind"], "stage": s["stage"],
                     "program": s["program"], "status": s["status"], "error": error, "dump_id": result.sha256,
                     "parser_version": s["parser_version"]})
        if s["status"] == "ok":
            metric_rows += [(obj.path, k, json_value(float(v))) for k, v in sorted(s["metrics"].items())]
        elif s["kind"] != "unknown" or result.sha256 is None:  # a refused file fails whatever its name
            damaged.append({"path": obj.path, "job": obj.job or "", "kind": s["kind"], "program": s["program"],
                            "status": s["status"], "error": error or ""})
    schema = {c: pl.String for c in _DUMP_COLUMNS} | {"parser_version": pl.Int64}
    dumps = pl.DataFrame(rows, schema=schema)
    metrics = pl.DataFrame(metric_rows, schema={"path": pl.String, "metric": pl.String, "value": pl.Float64}, orient="row")
    return dumps, metrics, damaged, staged


def _history_dumps(con, order: pl.DataFrame, jobs: list[str]) -> pl.DataFrame:
    """The dumps of these jobs in the runs of ``order``."""
    return history_mod.read_with(
        con, {"_check_runs": order.select("run_id"), "_check_jobs": pl.DataFrame({"job": jobs}, schema={"job": pl.String})},
        f"SELECT {', '.join(_DUMP_COLUMNS)} FROM dumps WHERE run_id IN (SELECT run_id FROM _check_runs) "
        "AND job IN (SELECT job FROM _check_jobs)").cast({c: pl.String for c in _DUMP_COLUMNS} | {"parser_version": pl.Int64})


def _stored_series(con, dumps: pl.DataFrame) -> pl.DataFrame:
    """The series the nightly gave these dumps (a series depends on its run alone)."""
    return history_mod.read_with(con, {"_check_paths": dumps.select("path")},
                                 f"SELECT {', '.join(SERIES_SCHEMA.names())} FROM dump_series "
                                 "WHERE path IN (SELECT path FROM _check_paths)").cast(dict(SERIES_SCHEMA))


def _metrics_of(con, paths: pl.Series) -> pl.DataFrame:
    return history_mod.read_with(con, {"_check_paths": pl.DataFrame({"path": paths})},
                                 "SELECT path, metric, value FROM metrics WHERE path IN (SELECT path FROM _check_paths)")


def _incidents(series: pl.DataFrame, dumps: pl.DataFrame, metrics: pl.DataFrame, order: pl.DataFrame,
               accepts: list[dict], settings: Settings) -> incident_mod.Walked:
    """The nightly's incidents (``incident_rule.compute_incidents``) over history + candidate."""
    usable = series.join(dumps.filter(pl.col("status") == "ok").select("path"), on="path", how="semi")
    observations = usable.join(metrics, on="path").select("run_id", "series", "metric", "value")
    return incident_rule.compute_incidents(series, dumps, observations, order, accepts, settings)


def _pairs(stored: pl.DataFrame, history: pl.DataFrame, fresh: pl.DataFrame, order: pl.DataFrame, run_id: str) -> pl.DataFrame:
    """(pair columns, before_path, after_path) of each candidate series against its last usable
    dump in the history: what the nightly's ``diffs`` would compare (``diffs.consecutive_pairs``)."""
    usable = stored.join(history.filter(pl.col("status").is_in(["ok", "partial"])).select("path"), on="path", how="semi")
    last = (usable.join(order.select("run_id", "run_seq"), on="run_id").sort("run_seq", "path")
            .group_by("series").agg(pl.col("path").last().alias("before_path"), pl.col("run_id").last().alias("previous_run_id")))
    return fresh.join(last, on="series").select(
        pl.lit(run_id).alias("run_id"), "previous_run_id", "series", "job", pl.col("series_program").alias("program"),
        "kind", "stage", "before_path", pl.col("path").alias("after_path"))


def _candidate_diffs(con, pairs: pl.DataFrame, candidate: pl.DataFrame, staged: dict[str, StagedResult],
                     objects: list[BucketObject], opened_steps: pl.DataFrame) -> pl.DataFrame:
    """The ``diffs`` rows of the series whose figures would step (and of the dumps that would
    fail): each candidate dump's items against its series' last dump in the history."""
    wanted = pairs.join(opened_steps.select("series").unique(), on="series", how="semi")
    if wanted.is_empty():
        return pl.DataFrame(schema=diff_mod.DIFF_SCHEMA)
    stored_keys = history_mod.read_with(con, {"_check_paths": wanted.select(pl.col("before_path").alias("path"))},
                                        "SELECT path, items_key FROM dump_series WHERE path IN (SELECT path FROM _check_paths)")
    mine = candidate.join(wanted.select(pl.col("after_path").alias("path")), on="path", how="semi")
    keyed = diff_mod.items_keys(candidate).join(mine.select("path", "kind", "stage", "dump_id"), on="path")
    keys = pl.concat([stored_keys.select("items_key"), keyed.select("items_key")]).drop_nulls().unique()
    held = history_mod.read_with(con, {"_check_keys": keys},
                                 "SELECT * FROM content_items WHERE items_key IN (SELECT items_key FROM _check_keys)")
    todo = keyed.filter(pl.col("items_key").is_not_null()).join(held.select("items_key").unique(), on="items_key", how="anti")
    computed = _computed_items(todo, candidate, staged, {o.path: o for o in objects})
    items = pl.concat([held.cast(dict(diff_mod.CONTENT_ITEM_SCHEMA)), computed])
    by_path = pl.concat([stored_keys, keyed.select("path", "items_key")]).join(items, on="items_key").drop("items_key")
    return diff_mod.diff_pairs(wanted, by_path)


def _computed_items(todo: pl.DataFrame, candidate: pl.DataFrame, staged: dict[str, StagedResult],
                    objects: dict[str, BucketObject]) -> pl.DataFrame:
    """Items of the candidate's new contents (``todo``: path, items_key, kind, stage, dump_id),
    one key at a time from its staged records, with excerpts read from its file."""
    by_sha = {r.sha256: r for r in staged.values()}
    parts = []
    for row in todo.unique("items_key").iter_rows(named=True):
        contents = diff_mod.key_contents([row["items_key"]])
        records: dict[str, list[pl.DataFrame]] = {}
        for dump_id in contents.get_column("dump_id").to_list():
            result = by_sha.get(dump_id)
            for table, file in (result.tables.items() if result else ()):
                records.setdefault(table, []).append(pl.read_parquet(file))
        frames = {t: pl.concat(fs, how="diagonal_relaxed") for t, fs in records.items()}
        found = diff_mod.items_of_contents(pl.DataFrame([row]).select("items_key", "kind", "stage", "dump_id"), frames)
        parts.append(_with_excerpts(found, objects[row["path"]], row["dump_id"]))
    return pl.concat(parts) if parts else pl.DataFrame(schema=diff_mod.CONTENT_ITEM_SCHEMA)


def _with_excerpts(found: pl.DataFrame, obj: BucketObject, content: str) -> pl.DataFrame:
    """``found`` with the excerpt of each item read from the candidate's file (bounded as the
    nightly's), when the file still holds ``content`` (the sha256 that was parsed)."""
    items = found.sort("bytes", "category", "key", descending=[True, False, False], nulls_last=True)
    wanted = items.get_column("excerpt_lines").to_list()
    if not any(wanted):
        return found
    try:
        with open_object(LocalFileSystem(), obj) as raw:
            read = excerpts_of(raw, content, wanted)
    except OSError:
        return found
    if read is None:  # changed since it was parsed
        return found
    return items.with_columns(
        pl.Series("excerpt", [t for t, _ in read], pl.String),
        pl.Series("excerpt_lines", [shown if t is not None else lines for (t, shown), lines in zip(read, wanted)], pl.String),
        pl.Series("excerpt_from", [obj.path if t is not None else None for t, _ in read], pl.String))


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


def _new_programs(fresh: pl.DataFrame, stored: pl.DataFrame) -> list[dict]:
    """Programs of the candidate (job + series program) the history of their job never had."""
    known = stored.select("job", "series_program").unique()
    new = fresh.join(known, on=["job", "series_program"], how="anti")
    return [{"job": job, "program": program, "series": sorted(set(group.get_column("series").to_list()))}
            for (job, program), group in new.sort("job", "series_program").group_by("job", "series_program", maintain_order=True)]


def _damaged_new(damaged: list[dict], fresh: pl.DataFrame, new_series: set[str]) -> list[dict]:
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
        step = {"series": series, "dump_kind": d["kind"], "stage": None, "metric": "dump.status", "step": "failure",
                "before": None, "after": None, "change": None, "detail": f"{d['path']}: {d['error']}"}
        out.append({
            "incident_id": None, "change": "opens", "job": d["job"], "program": program, "kind": "failure",
            "headline": f"{d['job']} / {program}: " + failure_text(step), "metrics": ["dump.status"],
            "last_good_run": None, "stacked_on": [], "steps": [step], "cause": [], "evidence": [],
        })
    return out
