"""What a night's aggregation reads of the warehouse's history: its window, not the history.

A night rewrites the derived rows of its own runs; what it needs of the runs before them
is read here, each as narrowly as the figures allow (issue 13): the dumps and series of
the night's window of runs (``night_frames``), each (series, metric)'s last values before
the night (from the night's last runs; from every run only for series short of values
there), the stored state trends and job totals continue from, the jobs whose new run
repeats their last (not walked again), and the whole history of the jobs that are walked,
a group of jobs at a time (``job_history``). Reads only: DuckDB in, polars out; may import
polars, DuckDB and ``transforms``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import duckdb
import polars as pl

from flows.warehouse.reads import FIGURES_STAND, frame_of, read_with, registered
from transforms.trends.renames import series_renames
from transforms.trends.rules import Settings
from transforms.trends.series import SERIES_SCHEMA, assign_series, compile_overrides


def run_overrides(runs: pl.DataFrame) -> dict[str, dict[str, str]]:
    """run_id -> run.json's "series" mapping (kept in runs.extra)."""
    out = {}
    for run_id, extra in runs.select("run_id", "extra").iter_rows():
        if (mapping := series_mapping(extra)) is not None:
            out[run_id] = mapping
    return out


def series_mapping(extra: str | Mapping[str, Any] | None) -> dict[str, str] | None:
    """A run's run.json "series" mapping (program -> series name), from its free fields: the
    stored ``runs.extra`` (JSON text), or a listed run's ``RunInfo.extra``."""
    try:
        mapping = (json.loads(extra or "{}") if not isinstance(extra, Mapping) else extra).get("series")
    except (ValueError, AttributeError):
        mapping = None
    return {str(k): str(v) for k, v in mapping.items()} if isinstance(mapping, dict) else None


def name_series(dumps: pl.DataFrame, overrides: Mapping[str, Mapping[str, str]], settings: Settings,
                programs: pl.DataFrame) -> pl.DataFrame:
    """The series of ``dumps`` as a night names them (``transforms.trends.series``): with each
    run's run.json mapping (``overrides``: run_id -> mapping), the settings' ``[series]`` table,
    and one series per program of the dumps of ``programs`` (``split_programs``)."""
    return assign_series(dumps, overrides, compile_overrides(settings.series_patterns), programs)


def split_programs(dumps: pl.DataFrame, metrics: pl.DataFrame) -> pl.DataFrame:
    """(path, program) of those ``dumps`` (path, kind, program) whose ``metrics`` rows (path,
    program) name programs other than the dump's: a TORCH_TRACE log's, one set per compiled
    function, each of which ``name_series`` gives a series of its own."""
    logs = dumps.filter(pl.col("kind") == "torch_trace").select("path", pl.col("program").alias("_dump_program"))
    return (metrics.select("path", "program").join(logs, on="path")
            .filter(pl.col("program").ne_missing(pl.col("_dump_program"))).select("path", "program").unique())


def per_program_paths(con, dumps: pl.DataFrame) -> pl.DataFrame:
    """``split_programs`` of stored ``dumps``, from their stored metric rows."""
    logs = dumps.filter(pl.col("kind") == "torch_trace")
    metrics = read_with(con, {"_split": logs.select("path")},
                        "SELECT DISTINCT path, program FROM metrics WHERE path IN (SELECT path FROM _split)")
    return split_programs(logs, metrics)


DUMP_COLUMNS = "path, run_id, job, kind, stage, program, status, error, dump_id, parser_version, ingested_at, lost_metrics"


def first_dirty_run(con, stamp: str, order: pl.DataFrame, accepts: pl.DataFrame) -> int | None:
    """run_seq from which derived rows must be rewritten; None when nothing changed: the
    earliest run with dumps loaded since the last aggregation, or named by an accept logged
    since (an accept moves the baselines and incidents from its run on, never before it);
    every run (0) for another aggregation version or settings, or an accept log that did not
    only grow."""
    state = dict(con.execute("SELECT key, value FROM schema_info WHERE key IN "
                             "('aggregated_with', 'aggregated_through', 'aggregated_accepts')").fetchall())
    if state.get("aggregated_with") != stamp or "aggregated_through" not in state:
        return 0
    through = datetime.fromisoformat(state["aggregated_through"])
    dirty = frame_of(con, "SELECT DISTINCT run_id FROM dumps WHERE ingested_at > ?", [through])
    known = state.get("aggregated_accepts", "")
    if known:
        count, _, last = known.partition(" ")
        seen = accepts.filter(pl.col("accepted_at") <= datetime.fromisoformat(last))
        if seen.height != int(count):
            return 0
        dirty = pl.concat([dirty, accepts.filter(pl.col("accepted_at") > datetime.fromisoformat(last)).select("run_id")])
    else:
        dirty = pl.concat([dirty, accepts.select("run_id")])
    seqs = order.join(dirty, on="run_id", how="semi").get_column("run_seq")
    return None if seqs.is_empty() else int(seqs.min())


def night_frames(con, runs: pl.DataFrame, order: pl.DataFrame, from_seq: int, settings: Settings
                 ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(dumps, series) of the runs a night's aggregation looks at, not of the history: the
    runs from ``from_seq`` on and the one before them (trends, events),
    each job's last run before them (repeating jobs, events) and each of the night's
    series' last usable run before them (diff pairs). With ``from_seq`` 0, every run. The
    runs are those of ``order``, which may end before the warehouse's last run (a pass of
    a re-aggregation, ``flows.verdict.aggregate``).

    A series depends on its run alone (and the settings, unchanged when from_seq > 0):
    the stored rows of the runs before ``from_seq`` are read back, only the night's runs
    are named again. Jobs walked for incidents read their whole history (``job_history``)."""
    seq = order.select("run_id", "run_seq")
    if from_seq <= 0:
        dumps = read_with(con, {"_runs": seq.select("run_id")}, f"SELECT {DUMP_COLUMNS} FROM dumps WHERE run_id IN (SELECT run_id FROM _runs)")
        return dumps, name_series(dumps, run_overrides(runs), settings, per_program_paths(con, dumps))
    dirty = seq.filter(pl.col("run_seq") >= from_seq).select("run_id")
    tonight = read_with(con, {"_runs": dirty}, f"SELECT {DUMP_COLUMNS} FROM dumps WHERE run_id IN (SELECT run_id FROM _runs)")
    fresh = name_series(tonight, run_overrides(runs.join(dirty, on="run_id", how="semi")), settings,
                        per_program_paths(con, tonight))
    back = 1  # the run before the night: its events (a job missing) and the trends' previous values
    older = read_with(con, {"_order": seq, "_tonight": fresh.select("series").unique()}, f"""
        SELECT run_id FROM _order WHERE run_seq < {int(from_seq)} AND run_seq >= {int(from_seq) - back}
        UNION SELECT arg_max(o.run_id, o.run_seq) FROM (SELECT DISTINCT job, run_id FROM dumps) d JOIN _order o USING (run_id)
              WHERE o.run_seq < {int(from_seq)} GROUP BY d.job
        UNION SELECT arg_max(o.run_id, o.run_seq) FROM dump_series s JOIN dumps d USING (path) JOIN _order o ON o.run_id = s.run_id
              WHERE d.status IN ('ok', 'partial') AND o.run_seq < {int(from_seq)}
                AND s.series IN (SELECT series FROM _tonight) GROUP BY s.series""")
    dumps = pl.concat([read_with(con, {"_runs": older}, f"SELECT {DUMP_COLUMNS} FROM dumps WHERE run_id IN (SELECT run_id FROM _runs)")
                       .cast(dict(tonight.schema)), tonight])
    stored = read_with(con, {"_runs": older}, f"SELECT {', '.join(SERIES_SCHEMA.names())} FROM dump_series "
                                          "WHERE run_id IN (SELECT run_id FROM _runs)")
    return dumps, pl.concat([stored.cast(dict(SERIES_SCHEMA)), fresh]).sort("path")


def accept_renames(con, runs: pl.DataFrame, accepts: pl.DataFrame, settings: Settings) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(renames, incidents) for ``transforms.trends.renames.renamed_accepts``: the series the stored
    names and today's give differently in the runs the accept log needs (its runs, and the runs
    where the incidents it names opened), and those incidents as stored."""
    named = pl.concat([accepts.select(pl.col("incident_id").alias("id")),
                       accepts.select(pl.col("closed_incidents").alias("id")).explode("id")]).drop_nulls().unique()
    incidents = read_with(con, {"_named": named}, """
        SELECT incident_id, job, program, opened_run, kind FROM incidents WHERE incident_id IN (SELECT id FROM _named)""")
    wanted = pl.concat([accepts.select("run_id"), incidents.select(pl.col("opened_run").alias("run_id"))]).unique()
    dumps = read_with(con, {"_runs": wanted}, f"SELECT {DUMP_COLUMNS} FROM dumps WHERE run_id IN (SELECT run_id FROM _runs)")
    fresh = assign_series(dumps, run_overrides(runs.join(wanted, on="run_id", how="semi")),
                          compile_overrides(settings.series_patterns), per_program_paths(con, dumps))
    stored = read_with(con, {"_runs": wanted}, "SELECT path, program, run_id, job, series, series_program FROM dump_series "
                                               "WHERE run_id IN (SELECT run_id FROM _runs)")
    return series_renames(stored, fresh), incidents


def job_history(con, jobs: list[str], series: pl.DataFrame, order: pl.DataFrame, from_seq: int
                ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(series, dumps) of every run of these jobs, for the incidents walk: the dumps and the
    stored series of the runs before ``from_seq`` from the warehouse, the night's series
    (``series``, which holds every run from ``from_seq`` on) as named tonight."""
    names = pl.DataFrame({"job": jobs}, schema={"job": pl.String})
    seq = order.select("run_id", "run_seq")
    dumps = read_with(con, {"_jobs": names, "_runs": seq.select("run_id")},
                  "SELECT path, run_id, job, kind, stage, program, status, error, lost_metrics, dump_id FROM dumps "
                  "WHERE job IN (SELECT job FROM _jobs) AND run_id IN (SELECT run_id FROM _runs)")
    clean = seq.filter(pl.col("run_seq") < from_seq).select("run_id")
    stored = read_with(con, {"_jobs": names, "_runs": clean}, f"""
        SELECT {', '.join(SERIES_SCHEMA.names())} FROM dump_series
        WHERE job IN (SELECT job FROM _jobs) AND run_id IN (SELECT run_id FROM _runs)""")
    fresh = series.join(seq.filter(pl.col("run_seq") >= from_seq).select("run_id"), on="run_id", how="semi").join(
        names, on="job", how="semi")
    return pl.concat([stored.cast(dict(SERIES_SCHEMA)), fresh.select(SERIES_SCHEMA.names())]).sort("path"), dumps


def job_groups(con, jobs: list[str], batch_rows: int) -> list[list[str]]:
    """The jobs, in order, in groups of at most ``batch_rows`` figures of ok dumps over their
    history (a job may exceed it alone): what an incidents walk holds at once. An incident
    is one program's, and a program one job's, so walking the groups one by one walks all."""
    sizes = {}
    if jobs:
        names = pl.DataFrame({"job": jobs}, schema={"job": pl.String})
        sizes = dict(read_with(con, {"_jobs": names}, f"""
            SELECT d.job, count(*) AS n FROM metrics m JOIN dumps d USING (path)
            WHERE {FIGURES_STAND} AND d.job IN (SELECT job FROM _jobs) GROUP BY d.job""").iter_rows())
    groups: list[list[str]] = [[]]
    held = 0
    for job in jobs:
        if groups[-1] and held + sizes.get(job, 0) > batch_rows:
            groups.append([])
            held = 0
        groups[-1].append(job)
        held += sizes.get(job, 0)
    return groups


def stored_usable(con, names: pl.Series, order: pl.DataFrame, from_seq: int) -> pl.DataFrame:
    """Stored series rows, runs before ``from_seq``, of these series whose dump's figures stand."""
    clean = order.filter(pl.col("run_seq") < from_seq).select("run_id")
    stored = read_with(con, {"_names": names.cast(pl.String).to_frame("series"), "_runs": clean}, f"""
        SELECT {', '.join(SERIES_SCHEMA.names())} FROM dump_series
        WHERE series IN (SELECT series FROM _names) AND run_id IN (SELECT run_id FROM _runs)
          AND path IN (SELECT path FROM dumps WHERE {FIGURES_STAND})""")
    return stored.cast(dict(SERIES_SCHEMA))


def seen_before(con, names: pl.Series, order: pl.DataFrame, from_seq: int) -> pl.Series:
    """Those of ``names`` (series) that a run before ``from_seq`` has."""
    clean = order.filter(pl.col("run_seq") < from_seq).select("run_id")
    return read_with(con, {"_names": names.cast(pl.String).unique().to_frame("series"), "_runs": clean}, """
        SELECT DISTINCT series FROM dump_series
        WHERE series IN (SELECT series FROM _names) AND run_id IN (SELECT run_id FROM _runs)""").get_column("series")


def changed_programs(con, series: pl.DataFrame, dumps: pl.DataFrame, order: pl.DataFrame, from_seq: int | None,
                     accepts: pl.DataFrame) -> pl.DataFrame | None:
    """The programs (job, program) whose runs from ``from_seq`` on do not all repeat their
    job's run before exactly — the same series, each with dumps of the same statuses and
    the same figures — or None (every program) unless this is a night of new runs after
    the aggregated ones (no run grew since, none is named by an accept). The others'
    incidents cannot change — a value equal to the one before changes no step
    (``incidents.walk_metric``), an equal status neither, and a program's incidents are
    its own — so they are kept as stored, and their history is not read."""
    if not from_seq:
        return None
    seq = order.select("run_id", "run_seq")
    job_runs = dumps.select("job", "run_id", "ingested_at").join(seq, on="run_id")
    watermark = con.execute("SELECT value FROM schema_info WHERE key = 'aggregated_through'").fetchall()
    tonight = job_runs.filter(pl.col("run_seq") >= from_seq)
    accepted = accepts.join(seq.filter(pl.col("run_seq") >= from_seq), on="run_id", how="semi")
    if not watermark or not accepted.is_empty() or (
            tonight.get_column("ingested_at").min() <= datetime.fromisoformat(watermark[0][0])):
        return None
    runs = job_runs.select("job", "run_seq").unique()
    before = (runs.filter(pl.col("run_seq") < from_seq).group_by("job").agg(pl.col("run_seq").max())
              .join(tonight.select("job").unique(), on="job", how="semi"))
    compared = pl.concat([before, runs.filter(pl.col("run_seq") >= from_seq)]).join(before.select("job"), on="job", how="semi")
    paths = (series.select("path", "run_id", "job", pl.col("series_program").alias("program"), pl.col("program").alias("named"),
                           "series").join(seq, on="run_id")
             .join(compared, on=["job", "run_seq"], how="semi")
             .join(dumps.select("path", "status"), on="path"))
    figures = read_with(con, {"_paths": paths.select("path").unique()},
                        "SELECT path, program AS named, metric, value FROM metrics WHERE path IN (SELECT path FROM _paths)")
    # One text per dump and per figure (series, status, metric, value): a program's state in
    # a run is their sorted list (empty where the job ran without it), compared with the
    # job's run before.
    state = pl.concat([
        paths.select("job", "program", "run_seq", pl.concat_str("series", pl.lit("\x00"), "status").alias("k")),
        paths.join(figures, on=["path", "named"], nulls_equal=True).select(
            "job", "program", "run_seq",
            pl.concat_str("series", pl.lit("\x00"), "status", pl.lit("\x00"), "metric", pl.lit("\x00"),
                          pl.col("value").cast(pl.String).fill_null("null")).alias("k")),
    ]).group_by("job", "program", "run_seq").agg(pl.col("k").sort())
    grid = compared.join(paths.select("job", "program").unique(), on="job")
    state = grid.join(state, on=["job", "program", "run_seq"], how="left").sort("job", "program", "run_seq")
    changed: set[tuple[str, str]] = set()
    previous: dict[tuple[str, str], list[str]] = {}
    for job, program, _, keys in state.select("job", "program", "run_seq", "k").iter_rows():
        keys = keys or []
        if (job, program) in previous and previous[job, program] != keys:
            changed.add((job, program))
        previous[job, program] = keys
    first = (series.join(seq.filter(pl.col("run_seq") >= from_seq), on="run_id", how="semi")  # jobs new tonight: all theirs
             .join(before.select("job"), on="job", how="anti").select("job", "series_program").unique())
    changed |= set(first.iter_rows())
    return pl.DataFrame(sorted(changed), schema={"job": pl.String, "program": pl.String}, orient="row")


def observations(con, series: pl.DataFrame, *, order: pl.DataFrame | None = None, from_seq: int = 0,
                 keep_before: int = 0, slim: bool = False, prior: pl.DataFrame | None = None,
                 elsewhere: Callable[[pl.Series], pl.DataFrame] | None = None) -> pl.DataFrame:
    """Metric rows with their series, as categoricals: DuckDB joins and returns only
    numbers (millions of rows), the names come back by position. With ``order``: only the
    rows of runs from ``from_seq`` on and each (series, metric)'s last ``keep_before``
    non-null rows before them, chosen by DuckDB (within its memory limit). ``slim``: only
    run_id, series, metric and value (``_series_info`` has the rest, once per series).

    ``prior`` (series, metric: every pair stored before ``from_seq``) lets a night read only
    its last ``keep_before`` runs: a pair of a series the night has, short of
    ``keep_before`` rows there, is read from every run (the same rows either way).
    ``elsewhere`` (series names -> their rows that ``series`` may lack): where a night whose
    ``series`` holds only its window finds those series' other runs."""
    window = ""

    def numbered(rows: pl.DataFrame, first: int = 0) -> pl.DataFrame:
        index = rows.select("path", "program").with_row_index("dump_idx", offset=first)
        if order is None:
            return index
        return index.with_columns(
            rows.select(pl.col("run_id").replace_strict(order.get_column("run_id"), order.get_column("run_seq"),
                                                        return_dtype=pl.Int64).alias("run_seq"),
                        _series_code()))

    index = numbered(series)
    if order is not None:
        window = (f"WHERE m.value IS NOT NULL QUALIFY d.run_seq >= {int(from_seq)} OR row_number() OVER "
                  f"(PARTITION BY d.series_code, i.metric_idx, d.run_seq >= {int(from_seq)} ORDER BY d.run_seq DESC) "
                  f"<= {int(keep_before)}")
    if index.is_empty():  # no job walked: nothing to read (not even the metric names, a scan of every row)
        return series.select("run_id", "series", *(() if slim else ("job", "kind", "stage", pl.col("series_program").alias("program"))),
                             pl.lit(None, pl.String).alias("metric"), pl.lit(None, pl.Float64).alias("value")
                             ).clear().with_columns(pl.exclude("value").cast(pl.Categorical))
    metric_names = con.sql("SELECT DISTINCT metric FROM metrics ORDER BY metric").pl().with_row_index("metric_idx")

    def read(rows: pl.DataFrame) -> pl.DataFrame:
        with registered(con, _dump_idx=rows, _metric_idx=metric_names):
            # A series is a path and its program: a dump giving each program's figures has several.
            return con.sql(f"""SELECT d.dump_idx, i.metric_idx, m.value FROM metrics m
                               JOIN _dump_idx d ON d.path = m.path AND d.program IS NOT DISTINCT FROM m.program
                               JOIN _metric_idx i USING (metric) {window}""").pl()

    if order is not None and prior is not None and keep_before and from_seq > keep_before:
        values = read(index.filter(pl.col("run_seq") >= from_seq - keep_before))
        short = _short_pairs(values, index, series, metric_names, prior, from_seq, keep_before)
        if not short.is_empty():
            if elsewhere is not None:  # their runs outside the window, numbered after the rows read so far
                names = series.get_column("series").gather(index.join(short, on="series_code", how="semi")
                                                           .get_column("dump_idx")).unique()
                extra = elsewhere(names).join(series.select("path"), on="path", how="anti")
                extra = extra.select(series.columns).cast(dict(series.schema))
                index = pl.concat([index, numbered(extra, first=series.height)])
                series = pl.concat([series, extra])
            again = index.join(short, on="series_code", how="semi")
            values = pl.concat([values.join(again.select("dump_idx"), on="dump_idx", how="anti"),
                                read(again).cast(values.schema)])
    else:
        values = read(index)
    names = series.select("run_id", "series", *(() if slim else ("job", "kind", "stage", pl.col("series_program").alias("program"))))
    names = names.with_columns(pl.all().cast(pl.Categorical))
    metric = metric_names.get_column("metric").cast(pl.Categorical)
    at = values.get_column("dump_idx")
    return values.select(
        *(names.get_column(c).gather(at) for c in names.columns),
        metric.gather(values.get_column("metric_idx")).alias("metric"), "value")


def _series_code() -> pl.Expr:
    """A number per series name, the same in every frame (a hash: categorical codes are
    each frame's own, and a night numbers the rows it reads later apart)."""
    return pl.col("series").cast(pl.String).hash().alias("series_code")


def _short_pairs(values: pl.DataFrame, index: pl.DataFrame, series: pl.DataFrame, metric_names: pl.DataFrame,
                 prior: pl.DataFrame, from_seq: int, keep_before: int) -> pl.DataFrame:
    """Series (series_code) of the night with a pair — read in the last ``keep_before`` runs,
    or stored before (``prior``) — that has fewer than ``keep_before`` rows in those runs
    before the night: its older rows may be among its last ``keep_before``."""
    runs = index.select("dump_idx", "run_seq", "series_code")
    rows = values.join(runs, on="dump_idx")
    tonight = runs.filter(pl.col("run_seq") >= from_seq).select("series_code").unique()
    codes = series.select("series", _series_code()).unique()
    stored = (prior.select(pl.col("series").cast(pl.String), pl.col("metric").cast(pl.String))
              .join(codes.with_columns(pl.col("series").cast(pl.String)), on="series")
              .join(metric_names.with_columns(pl.col("metric_idx").cast(pl.UInt32)), on="metric")
              .select("series_code", pl.col("metric_idx").cast(rows.schema["metric_idx"])))
    pairs = pl.concat([rows.select("series_code", "metric_idx"), stored]).unique().join(tonight, on="series_code", how="semi")
    have = rows.filter(pl.col("run_seq") < from_seq).group_by("series_code", "metric_idx").len()
    short = pairs.join(have, on=["series_code", "metric_idx"], how="left").filter(pl.col("len").fill_null(0) < keep_before)
    return short.select("series_code").unique()


def prior_trends(con, order: pl.DataFrame, from_seq: int) -> pl.DataFrame | None:
    """Each (series, metric) stored before ``from_seq``: the pairs whose previous value a
    night must find, even far back (None when everything is rewritten)."""
    if from_seq <= 0:
        return None
    clean = order.filter(pl.col("run_seq") < from_seq).select("run_id")
    return read_with(con, {"_clean": clean},
                     "SELECT DISTINCT series, metric FROM metric_trends WHERE run_id IN (SELECT run_id FROM _clean)")


def previous_totals(con, order: pl.DataFrame, from_seq: int) -> pl.DataFrame:
    """Stored job totals of the last clean run, which the first dirty run compares with."""
    clean = order.filter(pl.col("run_seq") < from_seq).select("run_id")
    # The latest start per key first (a hash aggregate), then its row: a window sorted
    # over every stored total was a third of an unchanged night's aggregation at a year.
    return read_with(con, {"_clean": clean}, """WITH clean AS (SELECT * FROM job_totals WHERE run_id IN (SELECT run_id FROM _clean)),
                                latest AS (SELECT job, kind, stage, metric, max(started_at) AS started_at FROM clean GROUP BY ALL)
                                SELECT c.* FROM clean c JOIN latest l ON c.job IS NOT DISTINCT FROM l.job
                                  AND c.kind IS NOT DISTINCT FROM l.kind AND c.stage IS NOT DISTINCT FROM l.stage
                                  AND c.metric IS NOT DISTINCT FROM l.metric AND c.started_at IS NOT DISTINCT FROM l.started_at
                                QUALIFY row_number() OVER (PARTITION BY c.job, c.kind, c.stage, c.metric ORDER BY c.run_id DESC) = 1""")
