"""Aggregation: read the warehouse into polars, compute trends, events and diffs, write back.

Runs inside a ``Warehouse`` writer (the nightly flow's last step, ``dumpscope
aggregate`` and ``dumpscope accept``), so what it writes is published atomically
with the load. The one figure it writes beside the parsers' (``rank_figures``): a rank log's
``dynamo.rank_divergence``, which depends on the other ranks of its run. Derived rows are rewritten from the first run that changed, from what
``flows.verdict.history`` reads of the runs before it; structural items are kept per content in
``content_items`` and computed only for contents they do not hold yet (``flows.verdict.items``:
in batches, on the flow's task runner). The settings and the stamps saying what the derived
tables were computed with are ``flows.verdict.settings``; what a night clears away (superseded
records, items work directories) ``flows.verdict.compaction``.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb
import polars as pl

from flows.resources import MemoryBudget, peak_mib
from flows.stopwatch import Stopwatch
from flows.verdict import history
from flows.verdict import items
from flows.verdict.compaction import compact_records, work_dir
from flows.verdict.settings import accepts_stamp, aggregate_stamp
from flows.warehouse import schema as ws
from flows.warehouse.reads import frame_of, read_with, registered
from flows.warehouse.transactions import transaction
from transforms.trends import diffs as diff_mod
from transforms.trends import incident_rule
from transforms.trends import incident_walk
from transforms.trends import renames as renames_mod
from transforms.trends import metric_trends as trends
from transforms.trends import rank_divergence
from transforms.trends import rollups
from transforms.trends.rules import Settings


@dataclass
class AggregateResult:
    rows: dict[str, int] = field(default_factory=dict)
    from_run: str | None = None  # first run rewritten (None: nothing to do)
    seconds: dict[str, float] = field(default_factory=dict)
    items_computed: int = 0
    peak_mib: dict[str, float] = field(default_factory=dict)  # peak RSS of the process after each stage


def aggregate(con: duckdb.DuckDBPyConnection, settings: Settings | None = None, *, budget: MemoryBudget | None = None,
              run_items: items.ItemsRunner | None = None) -> AggregateResult:
    """Bring every derived table up to date in one transaction.

    Baselines look back, so trends are computed over every run; but the rows of a run
    depend only on that run and earlier ones. With the same aggregation version,
    settings and accept log as last time, only runs from the earliest one that got new
    dumps since then are rewritten (a night: its own rows); otherwise all of them.
    """
    budget = budget or MemoryBudget()
    budget.set_duckdb_limit(con, writing=False)  # the frames below take the Python side's share
    try:
        return _aggregate(con, settings or Settings(), budget, run_items)
    finally:
        budget.set_duckdb_limit(con, writing=True)


def _aggregate(con: duckdb.DuckDBPyConnection, settings: Settings, budget: MemoryBudget,
               run_items: items.ItemsRunner | None) -> AggregateResult:
    result = AggregateResult()
    lap = Stopwatch(result.seconds, gauges=[(result.peak_mib, peak_mib)]).mark

    runs = frame_of(con, "SELECT run_id, started_at, \"commit\", extra::VARCHAR AS extra FROM runs")
    accepts = frame_of(con, "SELECT series, run_id, metric, accepted_at, accepted_by, note, incident_id, closed_incidents FROM accepts")
    order = trends.run_order(runs)
    stamp, accepted = aggregate_stamp(settings), accepts_stamp(accepts)
    from_seq = history.first_dirty_run(con, stamp, order, accepts)
    result.from_run = None if from_seq is None else order.get_column("run_id")[from_seq] if from_seq < order.height else None
    if from_seq is None or from_seq >= order.height:
        lap("read")
        return result
    if from_seq == 0 and accepts.height:  # every run named again: the accept log keeps naming what it named
        accepts = _renamed_accepts(con, runs, accepts, settings)
    # Many runs to rewrite (a new aggregation version, other settings, an accept) go a
    # window of runs at a time, each pass as the night that ended there would have
    # aggregated it (its rows read back by the next): memory follows the pass, not the history.
    # A pass commits its rows (DuckDB holds a transaction's rows in memory): what readers
    # see is the published file, which the writer replaces only after the last pass.
    per_pass = runs_per_pass(con, order, budget)
    starts = list(range(from_seq, order.height, per_pass))
    for start in starts:
        end = min(start + per_pass, order.height)
        upto = order.filter(pl.col("run_seq") < end)
        with transaction(con):
            _aggregate_runs(con, settings, budget, run_items, runs.join(upto.select("run_id"), on="run_id", how="semi"),
                            accepts, upto, start, result, lap, walk=end == order.height, walk_every_job=len(starts) > 1)
            if end == order.height:
                watermark = con.execute("SELECT max(ingested_at) FROM dumps").fetchall()[0][0]
                con.execute("INSERT OR REPLACE INTO schema_info VALUES ('aggregated_with', ?), ('aggregated_through', ?), "
                            "('aggregated_accepts', ?)", [stamp, watermark.isoformat(sep=" "), accepted])
    lap("write")
    return result


def _renamed_accepts(con: duckdb.DuckDBPyConnection, runs: pl.DataFrame, accepts: pl.DataFrame,
                     settings: Settings) -> pl.DataFrame:
    """The accept log under today's series names (``transforms.trends.renames``), written back where
    a naming rule changed what it names; the same rows otherwise."""
    renames, incidents = history.accept_renames(con, runs, accepts, settings)
    renamed = renames_mod.renamed_accepts(accepts, renames, incidents)
    changed = [r for r, old in zip(renamed.to_dicts(), accepts.to_dicts()) if r != old]
    if changed:
        with transaction(con):
            for r in changed:
                con.execute("UPDATE accepts SET series = ?, incident_id = ?, closed_incidents = ? WHERE accepted_at = ? AND run_id = ?",
                            [r["series"], r["incident_id"], r.get("closed_incidents"), r["accepted_at"], r["run_id"]])
    return renamed


def runs_per_pass(con: duckdb.DuckDBPyConnection, order: pl.DataFrame, budget: MemoryBudget) -> int:
    """How many runs one aggregation pass rewrites: as many as hold ``pass_figures``,
    counting the warehouse's figures per run."""
    figures = con.execute("SELECT count(*) FROM metrics").fetchall()[0][0]
    return max(1, budget.pass_figures // max(1, figures // max(1, order.height)))


def _aggregate_runs(con: duckdb.DuckDBPyConnection, settings: Settings, budget: MemoryBudget,
                    run_items: items.ItemsRunner | None, runs: pl.DataFrame, accepts: pl.DataFrame, order: pl.DataFrame,
                    from_seq: int, result: AggregateResult, lap: Callable[[str], None], *, walk: bool,
                    walk_every_job: bool) -> None:
    """Rewrite the derived rows of the runs from ``from_seq`` to the last of ``order``
    (``runs`` and ``order`` end there), inside the caller's transaction. ``walk``: the
    incidents too (the last pass), of every job with ``walk_every_job``, else of the jobs
    whose new runs do not repeat their last."""
    accepted = accepts.join(order.select("run_id"), on="run_id", how="semi")
    # A night reads its window of runs, not the history (dumps and series of half a million
    # paths at a year); the jobs it walks for incidents read theirs a group at a time.
    dumps, series = history.night_frames(con, runs, order, from_seq, settings)
    dirty = order.filter(pl.col("run_seq") >= from_seq).select("run_id")
    # A rank log's dynamo.rank_divergence depends on the other ranks of its run: written with the night's figures,
    # before the trends and incidents read them.
    divergences, computed = rank_figures(con, dumps, series, dirty, budget, run_items or items.in_process)
    result.items_computed += computed
    # Figures of failed dumps, and of partial ones whose parser cannot tell what the damage cost,
    # are left out of trends: a cut file is not a compiler change (the incidents report it as a
    # failure about the dump). A partial dump that names what it lost keeps its other figures.
    usable = series.join(dumps.filter(incident_rule.figures_stand(dumps)).select("path"), on="path", how="semi")
    lap("read")

    prior = history.prior_trends(con, order, from_seq)
    # A night: the trends need each pair's last row before it (its previous value), not the history.
    recent = history.observations(con, usable) if prior is None else history.observations(
        con, usable, order=order, from_seq=from_seq, keep_before=1, prior=prior,
        elsewhere=lambda names: history.stored_usable(con, names, order, from_seq))
    trend = trends.metric_trends(recent, runs, settings, from_seq=from_seq)
    del recent, usable
    lap("trends")
    older = None if from_seq <= 0 else history.seen_before(
        con, series.join(order.filter(pl.col("run_seq") >= from_seq), on="run_id", how="semi").get_column("series"),
        order, from_seq)
    events = rollups.series_events(dumps, series, order, from_seq, seen_before=older)
    rows = {
        "dump_series": series,
        "metric_trends": trend,
        "series_events": events,
        "run_rollups": rollups.run_rollups(dumps, series, trend, events, order),
        "job_totals": rollups.job_totals(trend, previous=history.previous_totals(con, order, from_seq)),
    }
    lap("rollups")

    with_ids = series.join(dumps.select("path", "dump_id", "parser_version", "status"), on="path")
    pairs = diff_mod.consecutive_pairs(with_ids, order, from_seq)
    # Keys of the night's dumps (their dump_series rows) and of the dumps they are compared
    # with; a key depends on its own run's dumps only.
    keyed_runs = pl.concat([dirty, pairs.select(pl.col("previous_run_id").alias("run_id"))]).unique()
    keys = diff_mod.items_keys(with_ids.join(keyed_runs, on="run_id", how="semi"))
    rows["dump_series"] = series.join(keys, on="path", how="left")
    involved = pl.concat([with_ids.join(dirty, on="run_id", how="semi").select("path"),
                          pairs.select(pl.col("before_path").alias("path"))]).unique()
    wanted = keys.join(involved, on="path", how="semi").filter(pl.col("items_key").is_not_null())
    new_items = _new_items(con, wanted.join(with_ids, on="path").unique("items_key"), budget,
                           run_items or items.in_process)
    result.items_computed += new_items.get_column("items_key").n_unique()
    lap("items")
    pair_paths = pl.concat([pairs.get_column("before_path"), pairs.get_column("after_path")]).unique()
    pair_keys = keys.filter(pl.col("path").is_in(pair_paths.implode()) & pl.col("items_key").is_not_null())
    stored = _content_items(con, pair_keys.get_column("items_key").unique())
    items_by_path = pair_keys.join(pl.concat([stored, new_items]).unique(["items_key", "category", "key"]), on="items_key")
    rows["diffs"] = pl.concat([diff_mod.diff_pairs(pairs, items_by_path.drop("items_key")),
                               diff_mod.divergence_rows(divergences, series)])
    del items_by_path, stored
    lap("diffs")

    store_items(con, new_items)
    if walk:  # before the pass's series rows, as always: contents first named in it keep their records a night longer
        result.rows["compacted"] = compact_records(con, settings.keep_records_runs)
    with registered(con, _dirty=dirty):
        for name, frame in rows.items():
            frame = frame.join(dirty, on="run_id", how="semi")
            con.execute(f"DELETE FROM {ws.quote_ident(name)} WHERE run_id IN (SELECT run_id FROM _dirty)")
            result.rows[name] = result.rows.get(name, 0) + insert_frame(con, name, frame)
    del rows, trend, events, pairs, with_ids
    lap("write")
    if not walk:
        return
    # A night after the aggregated runs (one pass; ``from_seq`` is the first run that
    # changed) keeps every incident the runs before it made as stored: programs whose new
    # runs repeat their run before are not walked at all, and a walked program's incidents
    # untouched since ``from_seq`` are not written again. A rewrite of every run writes them all.
    nightly = bool(from_seq) and not walk_every_job
    programs = history.changed_programs(con, series, dumps, order, from_seq, accepts) if nightly else None
    walked = sorted(set(dumps.get_column("job").unique()) if programs is None else set(programs.get_column("job")))
    walk = _incidents(con, walked, series, order, from_seq, accepts.to_dicts(), settings,
                      batch_rows=budget.incidents_batch_rows, programs=programs, since=from_seq if nightly else None)
    lap("incidents")
    result.rows["incidents"], result.rows["incident_steps"] = _write_incidents(con, walk, programs=programs)
    lap("write")


def _incidents(con: duckdb.DuckDBPyConnection, jobs: list[str], series: pl.DataFrame, order: pl.DataFrame,
               from_seq: int, accepts: list[dict], settings: Settings, *, batch_rows: int,
               programs: pl.DataFrame | None, since: int | None) -> incident_walk.Walked:
    """``incidents.compute`` over the whole history of these jobs, in groups of jobs of at
    most ``batch_rows`` figures (one job can exceed it), each group's history read on its
    own: an incident is one program's, and a program belongs to one job, so the parts are
    the whole, and the night's memory follows the group, not the history. ``series``
    holds the runs from ``from_seq`` on, named tonight; ``programs`` (job, program): only
    these programs of the jobs (None: all); ``since``: only the incidents touched from that
    run on."""
    parts = []
    for group in history.job_groups(con, jobs, batch_rows):
        group_series, group_dumps = history.job_history(con, group, series, order, from_seq)
        if programs is not None:  # the job's dumps stay whole: a program's series is absent where the job ran without it
            group_series = group_series.join(programs.rename({"program": "series_program"}), on=["job", "series_program"],
                                             how="semi")
        usable = group_series.join(group_dumps.filter(incident_rule.figures_stand(group_dumps)).select("path"), on="path",
                                   how="semi")
        observations = history.observations(con, usable, slim=True)
        del usable
        parts.append(incident_rule.compute_incidents(group_series, group_dumps, observations, order, accepts, settings,
                                                     since=since))
        del observations, group_series, group_dumps
    if len(parts) == 1:
        return parts[0]
    return incident_walk.Walked(*incident_walk.in_order(pl.concat([p.incidents for p in parts]), pl.concat([p.steps for p in parts])),
                               [i for p in parts for i in p.unchanged])


def _write_incidents(con: duckdb.DuckDBPyConnection, walk: incident_walk.Walked, *,
                     programs: pl.DataFrame | None) -> tuple[int, int]:
    """Write the walk's incidents and their steps, each with its cause from ``diffs``, in
    place of the stored incidents of the walked ``programs`` (job, program; None: all) but
    those the walk found unchanged (a night's: the stored ones it did not touch are as it
    would write them; any other is stale). Returns the rows written."""
    incidents = walk.incidents.with_columns(_causes(con, walk.incidents, walk.steps))
    where = " WHERE incident_id NOT IN (SELECT incident_id FROM _unchanged)"
    frames = {"_unchanged": pl.DataFrame({"incident_id": walk.unchanged}, schema={"incident_id": pl.String})}
    if programs is not None:
        frames["_walked"] = programs
        where += " AND (job, program) IN (SELECT (job, program) FROM _walked)"
    with registered(con, **frames):
        for name, frame in (("incidents", incidents), ("incident_steps", walk.steps)):
            con.execute(f"DELETE FROM {ws.quote_ident(name)}{where}")
            insert_frame(con, name, frame)
    return incidents.height, walk.steps.height


def _causes(con: duckdb.DuckDBPyConnection, incidents: pl.DataFrame, steps: pl.DataFrame) -> pl.Series:
    """The top structural diff lines of each incident (``incident_rule.causes``), from ``diffs``."""
    wanted = steps.select("incident_id", "series", pl.col("opened_run").alias("run_id")).unique()
    diffs = read_with(con, {"_wanted": wanted}, """
        SELECT w.incident_id, d.series, d.category, d.description, d.bytes_before, d.bytes_after, d.value_after, d.excerpt_after
        FROM diffs d JOIN _wanted w USING (run_id, series)""")
    return incident_rule.causes(incidents, steps, diffs)


def rank_figures(con: duckdb.DuckDBPyConnection, dumps: pl.DataFrame, series: pl.DataFrame, dirty: pl.DataFrame,
                 budget: MemoryBudget, run_items: items.ItemsRunner) -> tuple[pl.DataFrame, int]:
    """The ``dynamo.rank_divergence`` metrics rows of the rank logs of the ``dirty`` runs
    (``transforms.trends.rank_divergence``), in place of those stored, from their ``rank_profile``
    items (computed and stored here when the warehouse holds none yet); returns the divergences
    and how many contents' items were computed."""
    logs = rank_divergence.rank_logs(series.join(dirty, on="run_id", how="semi"), dumps)
    with registered(con, _dirty=dirty):
        con.execute("DELETE FROM metrics WHERE metric = ? AND run_id IN (SELECT run_id FROM _dirty)",
                    [rank_divergence.METRIC])
    if logs.is_empty():
        return pl.DataFrame(schema=rank_divergence.DIVERGENCE_SCHEMA), 0
    keyed = diff_mod.items_keys(logs).filter(pl.col("items_key").is_not_null())
    new = _new_items(con, keyed.join(logs.select("path", "kind", "stage", "dump_id").unique("path"), on="path")
                     .unique("items_key"), budget, run_items)
    store_items(con, new)
    profiles = keyed.join(_content_items(con, keyed.get_column("items_key").unique()).filter(
        pl.col("category") == "rank_profile"), on="items_key").select("path", "key", "detail", "excerpt_lines", "excerpt")
    figures, divergences = rank_divergence.compare(logs, profiles)
    with registered(con, _rank_figures=figures):
        con.execute("""INSERT INTO metrics SELECT d.run_id, d.job, f.program, d.kind, d.stage, f.metric, f.value,
                              d.dump_id, d.path
                       FROM _rank_figures f JOIN dumps d USING (path)""")
    return divergences, new.get_column("items_key").n_unique()


def store_items(con: duckdb.DuckDBPyConnection, found: pl.DataFrame) -> int:
    """Content items (``CONTENT_ITEM_SCHEMA``) into content_item_rows, each excerpt text into
    excerpt_texts once (by its sha256): a night's new versions of a program repeat most of
    the texts of the versions before (a 10 %-changed big night: ~9 MiB a night otherwise)."""
    texts = found.select("excerpt").drop_nulls().unique()
    ids = texts.with_columns(pl.Series("excerpt_id", [hashlib.sha256(t.encode()).hexdigest() for t in texts.get_column("excerpt")],
                                       pl.String))
    if ids.height:
        with registered(con, _texts=ids.select("excerpt_id", "excerpt")):
            con.execute("INSERT INTO excerpt_texts SELECT excerpt_id, excerpt FROM _texts "
                        "WHERE excerpt_id NOT IN (SELECT excerpt_id FROM excerpt_texts)")
    rows = found.join(ids, on="excerpt", how="left").select(diff_mod.STORED_ITEM_SCHEMA.names())
    return insert_frame(con, "content_item_rows", rows)


def insert_frame(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame) -> int:
    if frame.height:
        cols = ", ".join(ws.quote_ident(c) for c in frame.columns)
        with registered(con, _rows=frame):
            con.execute(f"INSERT INTO {ws.quote_ident(table)} ({cols}) SELECT {cols} FROM _rows")
    return frame.height


def _content_items(con, keys: pl.Series) -> pl.DataFrame:
    """Stored items of these content keys."""
    return read_with(con, {"_item_keys": pl.DataFrame({"items_key": keys})},
                     "SELECT * FROM content_items WHERE items_key IN (SELECT items_key FROM _item_keys)")


def _new_items(con, wanted: pl.DataFrame, budget: MemoryBudget, run_items: items.ItemsRunner) -> pl.DataFrame:
    """Items of the wanted keys (items_key, kind, stage, dump_id) that ``content_items``
    does not hold: computed in batches (``flows.verdict.items``), each once."""
    have = read_with(con, {"_wanted_keys": wanted.select("items_key")},
                     "SELECT DISTINCT items_key FROM content_item_rows WHERE items_key IN (SELECT items_key FROM _wanted_keys)")
    todo = wanted.join(have, on="items_key", how="anti").select("items_key", "kind", "stage", "dump_id")
    if todo.is_empty():
        return pl.DataFrame(schema=diff_mod.CONTENT_ITEM_SCHEMA)
    work = work_dir(con)
    try:
        dirs = items.export_batches(con, todo, work, budget.items_batch_rows)
        return items.computed(dirs, run_items(dirs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
