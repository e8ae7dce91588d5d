"""A directory of dumps judged as the nightly's next run (``dumpscope check DIR``), writing nothing.

The candidate run is made by the nightly's own steps, DIR standing for one more run directory:
listed as one run (``flows.ingest.bucket.list_objects`` with ``as_run``: the same locating, the
same refusals, links and FIFOs listed for the read to refuse), its run.json read (``read_runs``),
each dump staged by the parse worker (``flows.ingest.staging.stage_chunk``, into a temporary
directory removed at the end) and checked against its XLA siblings (``flows.warehouse.siblings``),
made into dumps and metrics rows by the loader's builders (``flows.warehouse.loading``:
``staged_dump``, ``dump_rows``, ``metrics_of``) and named by the night's series rules
(``flows.verdict.history``: ``split_programs``, ``name_series``); its rank logs get the
``dynamo.rank_divergence`` the nightly's aggregation writes (``rank_figures``, and the ``diffs``
rows that name the rank that differs).

The history of the candidate's jobs up to the reference run is read through the caller's read-only
connection by the nightly's readers, a group of jobs at a time (``history.job_groups``,
``job_history``, ``observations``: memory follows the group, not the history), and the nightly's
rule (``transforms.trends.incident_rule.compute_incidents``) walks history + candidate. The cause of
each incident the candidate opens is the structural diff of each of its series' candidate dump
against the series' last usable dump (``diffs.consecutive_pairs``, ``diff_pairs``): items from the
warehouse when it holds the same content, else computed from the staged records by the nightly's
item batch (``flows.verdict.items.compute_batch``), excerpts read from DIR as from a bucket.

What check has beyond the nightly: the candidate's run id (``CANDIDATE_RUN``, primed until no run
of the warehouse has it), the reference run, the damaged dumps listed and a failure for each one the
rule cannot judge (``unjudged_damage``), and the answer (``transforms.check_report``).

``list_directory`` raises ``BadDirectory`` (exit 2) for a DIR that is not one run's jobs;
``history_runs`` raises ``NoSuchRun`` (exit 2) when ``against`` names no run and a
``CommandError`` when the warehouse holds no run. May import ``warehouse``, ``ingest`` and
``transforms``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import polars as pl

from flows.errors import CommandError
from flows.ingest.bucket import list_objects, read_runs
from flows.ingest.bucket_access import connect
from flows.ingest.staging import Outcome, stage_chunk
from flows.verdict import history
from flows.verdict import items as items_mod
from flows.warehouse import loading, siblings
from flows.warehouse.loading import StagedDump
from flows.warehouse.reads import NoSuchRun, frame_of, read_with, run_named
from flows.warehouse.snapshot import site_url_of
from transforms import check_report
from transforms.check_report import CheckResult
from transforms.layout import BucketObject, Role, escape_name
from transforms.parse import ParseLimits
from transforms.trends import diffs as diff_mod
from transforms.trends import incident_rule
from transforms.trends import incident_walk
from transforms.trends import metric_trends as trends
from transforms.trends import rank_divergence
from transforms.trends.headlines import failure_text
from transforms.trends.rules import Settings

CANDIDATE_RUN = "candidate"  # the run id the candidate gets (another one if the warehouse has a run of that name)
# The columns of the candidate's dumps rows that series, health and items read.
DUMP_COLUMNS = ("path", "run_id", "job", "kind", "stage", "program", "status", "error", "dump_id", "parser_version",
                "lost_metrics")


@dataclass
class Candidate:
    """The candidate run as the nightly's steps made it: its dumps rows, their series and
    metrics rows, the staged dumps (their records), and each path's name below DIR."""

    run_id: str
    directory: Path
    dumps: pl.DataFrame
    series: pl.DataFrame
    metrics: pl.DataFrame
    staged: list[StagedDump]
    names: dict[str, str]


@dataclass
class Verdict:
    """What the candidate run would do: every incident and step over history + candidate
    (``incident_walk.in_order``), its new programs, and the ``diffs`` rows of what it opens."""

    incidents: pl.DataFrame
    steps: pl.DataFrame
    new_programs: list[dict]
    diffs: pl.DataFrame


class BadDirectory(CommandError, exit_code=2):
    """DIR is not a run directory of job directories (a bad argument)."""


def list_directory(directory: Path) -> tuple[list[BucketObject], list[str]]:
    """DIR's objects as the nightly lists a run directory, and what it leaves out (one line per
    reason: a job name it refuses...). Raises ``BadDirectory`` when DIR is not a directory, holds
    a job's files rather than job directories, or no job directory with files."""
    if not Path(directory).is_dir():
        raise BadDirectory(f"{directory} is not a directory")
    refused: list[str] = []
    objects = list_objects(Path(directory), as_run=CANDIDATE_RUN, refused=refused)
    # A regular file beside the job directories: DIR is a job's directory (a link there is listed, and refused).
    loose = [o.path.rsplit("/", 1)[-1] for o in objects if o.job is None and o.role is Role.DUMP and _regular(o.full_path)]
    if loose:
        raise BadDirectory(f"{directory} holds dump files directly ({', '.join(loose[:3])}{', …' if len(loose) > 3 else ''}): "
                           "check takes a run directory whose job directories hold the dumps (DIR/<job>/...)")
    if not any(o.role is Role.DUMP for o in objects):
        raise BadDirectory(f"{directory} holds no job directory with files: check takes a run directory (DIR/<job>/...)")
    return objects, refused


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:  # vanished since the listing: nothing to read
        return False


def judge_directory(con, directory: Path, objects: list[BucketObject], not_read: list[str], *, against: str | None,
                    settings: Settings, limits: ParseLimits, batch_rows: int) -> CheckResult:
    """What DIR (``objects``: ``list_directory``'s) would do as the run after ``against`` (default:
    the latest) of the warehouse ``con`` reads."""
    order, accepts = history_runs(con, against)
    reference = order.row(-1, named=True)
    run_id = fresh_run_id(order)
    objects = [replace(o, run_id=run_id) for o in objects]
    fs, _ = connect(Path(directory))
    info = read_runs(fs, objects).get(run_id)
    order = with_candidate(order, run_id, info.commit if info else None)
    work = Path(tempfile.mkdtemp(prefix="dumpscope-check-"))
    try:
        outcomes = stage_chunk(Path(directory), None, [o for o in objects if o.role is Role.DUMP], work / "staging", limits)
        siblings.check_outcomes(outcomes, None)  # XLA side files short of what their compile's other files state
        staged = [loading.staged_dump(o, with_records=o.staged.sha256 is not None) for o in outcomes if o.staged is not None]
        dumps = pl.from_arrow(loading.dump_rows(staged)).select(DUMP_COLUMNS)
        metrics = pl.from_arrow(loading.metrics_of([d for d in staged if d.tables is not None]))
        mapping = history.series_mapping(info.extra) if info else None
        fresh = history.name_series(dumps, {run_id: mapping} if mapping else {}, settings,
                                    history.split_programs(dumps, metrics))
        names = {o.path: escape_name(o.full_path[len(o.root) + 1:]) for o in objects}
        candidate = Candidate(run_id, Path(directory), dumps, fresh, metrics, staged, names)
        divergences = rank_figures(con, candidate, work / "rank_items")
        verdict = judge(con, order, accepts, candidate, settings, batch_rows, work)
        verdict.diffs = pl.concat([verdict.diffs, diff_mod.divergence_rows(divergences, fresh)])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    damaged = _damaged(outcomes)
    result = CheckResult(against=reference["run_id"], against_commit=reference["commit"],
                         candidate_commit=info.commit if info else None, dumps=len(objects), damaged=damaged,
                         run_errors=list(info.meta_errors) if info else [], not_read=not_read,
                         site_url=settings.site_url or site_url_of(con),
                         new_programs=verdict.new_programs,
                         **check_report.changes(verdict.incidents, verdict.steps, verdict.diffs, run_id))
    result.opened += unjudged_damage(damaged, fresh, verdict.steps.filter(pl.col("opened_run") == run_id),
                                     {s for p in verdict.new_programs for s in p["series"]}, settings)
    return result


def history_runs(con, against: str | None) -> tuple[pl.DataFrame, list[dict]]:
    """The warehouse's runs up to the reference run (``against``, default the latest), in run
    order, and the accept log."""
    order = trends.run_order(frame_of(con, 'SELECT run_id, started_at, "commit" FROM runs'))
    if order.is_empty():
        raise CommandError("the warehouse holds no run yet (run `dumpscope run` first)")
    if against is not None:
        against = run_named(con, against)
        at = order.filter(pl.col("run_id") == against)
        if at.is_empty():
            raise NoSuchRun(against, tail=f" (latest: {order.get_column('run_id')[-1]})")
        order = order.filter(pl.col("run_seq") <= at.get_column("run_seq")[0])
    accepts = frame_of(con, "SELECT series, run_id, metric, accepted_at, accepted_by, note, incident_id FROM accepts")
    return order, accepts.to_dicts()


def fresh_run_id(order: pl.DataFrame) -> str:
    """The candidate's run id: ``CANDIDATE_RUN``, primed until no run of ``order`` has it."""
    taken = set(order.get_column("run_id").to_list())
    run_id = CANDIDATE_RUN
    while run_id in taken:
        run_id += "'"
    return run_id


def with_candidate(order: pl.DataFrame, run_id: str, commit: str | None) -> pl.DataFrame:
    """``order`` with the candidate as one more run, a second after its last."""
    ref = order.row(-1, named=True)
    return pl.concat([order, pl.DataFrame(
        {"run_seq": [ref["run_seq"] + 1], "run_id": [run_id], "started_at": [ref["started_at"] + timedelta(seconds=1)],
         "commit": [commit]}, schema=order.schema)])


def judge(con, order: pl.DataFrame, accepts: list[dict], candidate: Candidate, settings: Settings, batch_rows: int,
          work: Path) -> Verdict:
    """The nightly's verdict on the candidate run (the last of ``order``). The history is read a
    group of jobs at a time, each of at most ``batch_rows`` stored figures."""
    seq, run_id = order.height - 1, candidate.run_id
    parts, pairs, new_programs = [], [], []
    jobs = sorted(candidate.dumps.get_column("job").unique().to_list())
    for group in history.job_groups(con, jobs, batch_rows):
        in_group = pl.col("job").is_in(pl.Series(group, dtype=pl.String).implode())
        mine = candidate.series.filter(in_group)
        series, stored_dumps = history.job_history(con, group, mine, order, seq)
        dumps = pl.concat([stored_dumps, candidate.dumps.filter(in_group).select(stored_dumps.columns)])
        new_programs += _new_programs(mine, series.filter(pl.col("run_id") != run_id))
        usable = series.join(dumps.filter(incident_rule.figures_stand(dumps)).select("path"), on="path", how="semi")
        observations = pl.concat([history.observations(con, usable.filter(pl.col("run_id") != run_id), slim=True),
                                  _observations(usable.filter(pl.col("run_id") == run_id), candidate.metrics)])
        parts.append(incident_rule.compute_incidents(series, dumps, observations, order, accepts, settings))
        pairs.append(_pairs(con, series.join(mine.select("series").unique(), on="series", how="semi"), dumps, candidate,
                            order))
        del series, stored_dumps, dumps, observations
    incidents, steps = incident_walk.in_order(pl.concat([p.incidents for p in parts]), pl.concat([p.steps for p in parts]))
    diffs = _candidate_diffs(con, pl.concat(pairs), candidate, steps.filter(pl.col("opened_run") == run_id), work)
    return Verdict(incidents, steps, new_programs, diffs)


def rank_figures(con, candidate: Candidate, work: Path) -> pl.DataFrame:
    """The candidate's ``dynamo.rank_divergence`` figures added to its metrics rows, as the nightly's
    aggregation writes them (``aggregate.rank_figures``): from its rank logs' ``rank_profile`` items, the
    warehouse's when it holds the content, else computed from the staged records. Returns the divergences."""
    logs = rank_divergence.rank_logs(candidate.series, candidate.dumps)
    if logs.is_empty():
        return pl.DataFrame(schema=rank_divergence.DIVERGENCE_SCHEMA)
    keyed = diff_mod.items_keys(logs).filter(pl.col("items_key").is_not_null())
    held = read_with(con, {"_check_keys": keyed.select("items_key").unique()},
                     "SELECT * FROM content_items WHERE items_key IN (SELECT items_key FROM _check_keys)")
    todo = (keyed.join(logs.select("path", "kind", "stage", "dump_id").unique("path"), on="path")
            .join(held.select("items_key").unique(), on="items_key", how="anti"))
    items = pl.concat([held.cast(dict(diff_mod.CONTENT_ITEM_SCHEMA)), _computed_items(todo, candidate, work)])
    profiles = keyed.join(items.filter(pl.col("category") == "rank_profile"), on="items_key").select(
        "path", "key", "detail", "excerpt_lines", "excerpt")
    figures, divergences = rank_divergence.compare(logs, profiles)
    candidate.metrics = pl.concat([candidate.metrics, figures.cast(dict(candidate.metrics.schema))])
    return divergences


def _new_programs(fresh: pl.DataFrame, stored: pl.DataFrame) -> list[dict]:
    """Programs of the candidate (job + series program) the history of their job never had."""
    known = stored.select("job", "series_program").unique()
    new = fresh.join(known, on=["job", "series_program"], how="anti")
    return [{"job": job, "program": program, "series": sorted(set(group.get_column("series").to_list()))}
            for (job, program), group in new.sort("job", "series_program").group_by("job", "series_program", maintain_order=True)]


def _observations(usable: pl.DataFrame, metrics: pl.DataFrame) -> pl.DataFrame:
    """``history.observations`` (slim) of the candidate's usable series, from its metrics rows: a
    series is a path and its program (a TORCH_TRACE log has one per compiled function)."""
    return usable.join(metrics, on=["path", "program"], nulls_equal=True).select(
        pl.col("run_id", "series", "metric").cast(pl.Categorical), "value")


def _pairs(con, series: pl.DataFrame, dumps: pl.DataFrame, candidate: Candidate, order: pl.DataFrame) -> pl.DataFrame:
    """Each candidate series' dump against the series' last usable dump before it: the pairs the
    nightly's diffs compare (``diffs.consecutive_pairs``). ``series``: every run of the candidate's
    series; ``dumps``: their dumps rows."""
    stored = read_with(con, {"_check_paths": series.filter(pl.col("run_id") != candidate.run_id).select("path")},
                       "SELECT path, dump_id FROM dumps WHERE path IN (SELECT path FROM _check_paths)")
    ids = pl.concat([stored, candidate.dumps.select("path", "dump_id")])
    with_ids = series.join(dumps.select("path", "status"), on="path").join(ids, on="path")
    return diff_mod.consecutive_pairs(with_ids, order, order.height - 1)


def _candidate_diffs(con, pairs: pl.DataFrame, candidate: Candidate, opened_steps: pl.DataFrame, work: Path) -> pl.DataFrame:
    """The ``diffs`` rows of the series whose figures would step (and of the dumps that would
    fail): each candidate dump's items against its series' last dump in the history."""
    wanted = pairs.join(opened_steps.select("series").unique(), on="series", how="semi")
    if wanted.is_empty():
        return pl.DataFrame(schema=diff_mod.DIFF_SCHEMA)
    stored_keys = read_with(con, {"_check_paths": wanted.select(pl.col("before_path").alias("path"))},
                            "SELECT DISTINCT path, items_key FROM dump_series WHERE path IN (SELECT path FROM _check_paths)")
    mine = candidate.dumps.join(wanted.select(pl.col("after_path").alias("path")), on="path", how="semi")
    keyed = diff_mod.items_keys(candidate.dumps).join(mine.select("path", "kind", "stage", "dump_id"), on="path")
    keys = pl.concat([stored_keys.select("items_key"), keyed.select("items_key")]).drop_nulls().unique()
    held = read_with(con, {"_check_keys": keys},
                     "SELECT * FROM content_items WHERE items_key IN (SELECT items_key FROM _check_keys)")
    todo = keyed.filter(pl.col("items_key").is_not_null()).join(held.select("items_key").unique(), on="items_key", how="anti")
    computed = _computed_items(todo, candidate, work / "items")
    items = pl.concat([held.cast(dict(diff_mod.CONTENT_ITEM_SCHEMA)), computed])
    by_path = pl.concat([stored_keys, keyed.select("path", "items_key")]).join(items, on="items_key").drop("items_key")
    return diff_mod.diff_pairs(wanted, by_path)


def _computed_items(todo: pl.DataFrame, candidate: Candidate, work: Path) -> pl.DataFrame:
    """Items of the candidate's contents the warehouse holds none of (``todo``: path, items_key,
    kind, stage, dump_id), by the nightly's item batch (``items.compute_batch``): one batch
    directory a key, holding its keys and the staged records of its contents, excerpts read
    from the candidate's file in DIR (as a bucket's: only its bytes that were parsed)."""
    records = {d.dump_id: d.tables for d in candidate.staged if d.tables}
    source = items_mod.DumpSource(candidate.directory)
    done = []
    for i, row in enumerate(todo.unique("items_key", maintain_order=True).iter_rows(named=True)):
        batch = work / f"batch-{i:05d}"
        batch.mkdir(parents=True)
        tables: dict[str, list] = {}
        for content in diff_mod.key_contents([row["items_key"]]).get_column("dump_id").to_list():
            for table, files in records.get(content, {}).items():
                tables.setdefault(table, []).extend(files)
        for table, files in tables.items():
            pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed").write_parquet(batch / f"t_{table}.parquet")
        pl.DataFrame([{**{k: row[k] for k in ("items_key", "kind", "stage", "dump_id")},
                       "paths": [candidate.names[row["path"]]]}]).write_parquet(batch / "keys.parquet")
        done.append(items_mod.compute_batch(batch, source))
    return items_mod.computed([], done)


def _damaged(outcomes: list[Outcome]) -> list[dict]:
    """The candidate's dumps that did not parse ``ok`` (a file of no known kind is no dump, unless
    it was refused), and those the parse worker could not read at all (``unreadable``)."""
    out = []
    for o in outcomes:
        s = o.staged.summary if o.staged is not None else None
        if s is None:
            out.append({"path": o.obj.path, "job": o.obj.job or "", "kind": None, "program": None,
                        "status": "unreadable", "error": o.error})
        elif s["status"] != "ok" and (s["kind"] != "unknown" or o.staged.sha256 is None):
            out.append({"path": o.obj.path, "job": o.obj.job or "", "kind": s["kind"], "program": s["program"],
                        "status": s["status"], "error": "\n".join(s["errors"]),
                        "lost": loading.lost_of(s["status"], s.get("lost"))})
    return out


def unjudged_damage(damaged: list[dict], fresh: pl.DataFrame, opened_steps: pl.DataFrame, new_series: set[str],
                    settings: Settings) -> list[dict]:
    """A ``failure`` entry for each damaged dump the rule opens nothing for because it cannot
    judge it: of a program with no history (its series is new) or of none (a file no parser
    names): a check never passes a dump the parsers could not read. A damaged dump of a known
    series is the rule's alone: a failure incident when it parsed before, nothing new when its
    failure is open already. A partial dump whose damage cost no figure the verdict reads
    (``incident_rule.reads_any``) is listed, never a failure, as at night."""
    by_path = {p: (series, program) for p, series, program in fresh.select("path", "series", "series_program").iter_rows()}
    judged = set(opened_steps.get_column("series").to_list())
    out = []
    for d in damaged:
        series, program = by_path.get(d["path"], (None, d["program"] or ""))
        if series is not None and (series not in new_series or series in judged):
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
