"""A candidate run (``dumpscope check``) judged against the warehouse's history, as the
nightly would judge it, without writing anything.

The history of the candidate's jobs up to the reference run is read through the caller's
read-only connection a group of jobs at a time (``history.job_groups``: memory follows the
group, not the history), and the nightly's rule (``transforms.trends.incident_rule``) runs
over history + candidate. The cause of each incident the candidate opens is the structural
diff of each series' candidate dump against its last dump in the history
(``transforms.trends.diffs``): the candidate's items are taken from the warehouse when it
holds the same content, else computed from the staged records, with excerpts read from
the candidate's file (``flows.ingest.bucket.open_object``: only the bytes that were parsed).

``history_runs`` raises ``NoSuchRun`` (exit 2) when ``against`` names no run and a
``CommandError`` when the warehouse holds no run. May import ``warehouse``, ``ingest`` and
``transforms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import polars as pl
from fsspec.implementations.local import LocalFileSystem

from flows.errors import CommandError
from flows.ingest.bucket import open_object
from flows.ingest.staging import StagedResult
from flows.verdict import history as history_mod
from flows.verdict.items import excerpts_of
from flows.warehouse.reads import NoSuchRun, frame_of, read_with
from transforms.layout import BucketObject
from transforms.trends import diffs as diff_mod
from transforms.trends import incident_rule
from transforms.trends import incidents as incident_mod
from transforms.trends import metric_trends as trends
from transforms.trends.rules import Settings
from transforms.trends.series import SERIES_SCHEMA

CANDIDATE_RUN = "candidate"  # the run id the candidate gets (another one if the warehouse has a run of that name)
# The columns of the warehouse's dumps table that series, health and items need.
DUMP_COLUMNS = ("path", "run_id", "job", "kind", "stage", "program", "status", "error", "dump_id", "parser_version",
                "lost_metrics")
DUMP_SCHEMA = {c: pl.String for c in DUMP_COLUMNS} | {"parser_version": pl.Int64, "lost_metrics": pl.List(pl.String)}


@dataclass
class Verdict:
    """What the candidate run would do: every incident and step over history + candidate
    (``incident_mod.in_order``), its new programs, and the ``diffs`` rows of what it opens."""

    incidents: pl.DataFrame
    steps: pl.DataFrame
    new_programs: list[dict]
    diffs: pl.DataFrame


def history_runs(con, against: str | None) -> tuple[pl.DataFrame, list[dict]]:
    """The warehouse's runs up to the reference run (``against``, default the latest), in run
    order, and the accept log."""
    order = trends.run_order(frame_of(con, 'SELECT run_id, started_at, "commit" FROM runs'))
    if order.is_empty():
        raise CommandError("the warehouse holds no run yet (run `dumpscope run` first)")
    if against is not None:
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


def judge(con, order: pl.DataFrame, accepts: list[dict], run_id: str, candidate: pl.DataFrame, fresh: pl.DataFrame,
          metrics: pl.DataFrame, staged: dict[str, StagedResult], objects: list[BucketObject], settings: Settings,
          batch_rows: int) -> Verdict:
    """The nightly's verdict on run ``run_id`` (the last of ``order``): ``candidate`` its dumps
    rows, ``fresh`` their series, ``metrics`` the figures of those that parsed ok. The history
    is read a group of jobs at a time, each of at most ``batch_rows`` stored figures."""
    parts, pairs, new_programs = [], [], []
    jobs = sorted(candidate.get_column("job").unique().to_list())
    for group in history_mod.job_groups(con, jobs, batch_rows):
        in_group = pl.col("job").is_in(pl.Series(group, dtype=pl.String).implode())
        history = _history_dumps(con, order, group)
        stored_series = _stored_series(con, history)
        history_metrics = _metrics_of(con, history.filter(incident_rule.figures_stand(history)).get_column("path"))
        group_fresh, group_candidate = fresh.filter(in_group), candidate.filter(in_group)
        new_programs += _new_programs(group_fresh, stored_series)
        pairs.append(_pairs(stored_series, history, group_fresh, order, run_id))
        parts.append(_incidents(pl.concat([stored_series, group_fresh]), pl.concat([history, group_candidate]),
                                pl.concat([history_metrics, metrics.join(group_candidate.select("path"), on="path",
                                                                         how="semi")]),
                                order, accepts, settings))
        del history, stored_series, history_metrics
    incidents, steps = incident_mod.in_order(pl.concat([p.incidents for p in parts]), pl.concat([p.steps for p in parts]))
    diffs = _candidate_diffs(con, pl.concat(pairs), candidate.join(fresh.select("path", "series"), on="path"),
                             staged, objects, steps.filter(pl.col("opened_run") == run_id))
    return Verdict(incidents, steps, new_programs, diffs)


def _history_dumps(con, order: pl.DataFrame, jobs: list[str]) -> pl.DataFrame:
    """The dumps of these jobs in the runs of ``order``."""
    return read_with(
        con, {"_check_runs": order.select("run_id"), "_check_jobs": pl.DataFrame({"job": jobs}, schema={"job": pl.String})},
        f"SELECT {', '.join(DUMP_COLUMNS)} FROM dumps WHERE run_id IN (SELECT run_id FROM _check_runs) "
        "AND job IN (SELECT job FROM _check_jobs)").cast(DUMP_SCHEMA)


def _stored_series(con, dumps: pl.DataFrame) -> pl.DataFrame:
    """The series the nightly gave these dumps (a series depends on its run alone)."""
    return read_with(con, {"_check_paths": dumps.select("path")},
                     f"SELECT {', '.join(SERIES_SCHEMA.names())} FROM dump_series "
                     "WHERE path IN (SELECT path FROM _check_paths)").cast(dict(SERIES_SCHEMA))


def _metrics_of(con, paths: pl.Series) -> pl.DataFrame:
    return read_with(con, {"_check_paths": pl.DataFrame({"path": paths})},
                     "SELECT path, program, metric, value FROM metrics WHERE path IN (SELECT path FROM _check_paths)")


def _new_programs(fresh: pl.DataFrame, stored: pl.DataFrame) -> list[dict]:
    """Programs of the candidate (job + series program) the history of their job never had."""
    known = stored.select("job", "series_program").unique()
    new = fresh.join(known, on=["job", "series_program"], how="anti")
    return [{"job": job, "program": program, "series": sorted(set(group.get_column("series").to_list()))}
            for (job, program), group in new.sort("job", "series_program").group_by("job", "series_program", maintain_order=True)]


def _incidents(series: pl.DataFrame, dumps: pl.DataFrame, metrics: pl.DataFrame, order: pl.DataFrame,
               accepts: list[dict], settings: Settings) -> incident_mod.Walked:
    """The nightly's incidents (``incident_rule.compute_incidents``) over history + candidate."""
    usable = series.join(dumps.filter(incident_rule.figures_stand(dumps)).select("path"), on="path", how="semi")
    # A series is a path and its program (a TORCH_TRACE log has one per compiled function).
    observations = usable.join(metrics, on=["path", "program"], nulls_equal=True).select("run_id", "series", "metric", "value")
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
    stored_keys = read_with(con, {"_check_paths": wanted.select(pl.col("before_path").alias("path"))},
                            "SELECT path, items_key FROM dump_series WHERE path IN (SELECT path FROM _check_paths)")
    mine = candidate.join(wanted.select(pl.col("after_path").alias("path")), on="path", how="semi")
    keyed = diff_mod.items_keys(candidate).join(mine.select("path", "kind", "stage", "dump_id"), on="path")
    keys = pl.concat([stored_keys.select("items_key"), keyed.select("items_key")]).drop_nulls().unique()
    held = read_with(con, {"_check_keys": keys},
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
