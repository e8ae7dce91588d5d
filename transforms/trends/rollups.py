"""Per-run roll-ups and the events that are not regressions (polars).

- ``series_events``: what is reported *as such*, never as a regression: a job's
  first run, a new series, a series that vanished (its job ran, it did not show), a
  job missing from a run, failed and partial dumps.
- ``run_rollups``: one row per run and job: dumps by status, programs, series, new
  and vanished series, changed series (what got worse is the incidents' to say).
- ``job_totals``: per run, job, kind, stage and metric, the sum over the job's series
  and its delta against the job's previous run: the headline figures.
- ``not_regressions``: what a run's page lists as such (a new series that fails is its incident's).
"""

from __future__ import annotations

import polars as pl

EVENT = pl.Enum(["first_run", "new_series", "vanished", "job_missing", "failed_dump", "partial_dump", "same_name"])

EVENT_SCHEMA = pl.Schema({
    "run_id": pl.String, "started_at": pl.Datetime("us"), "job": pl.String, "series": pl.String,
    "event": EVENT, "path": pl.String, "detail": pl.String,
})
EVENT_DOCS = {
    "": "Events of a run that are reported as such, never as regressions: a job's first run, new series, vanished series, a job missing from a run, failed and partial dumps.",
    "run_id": "Run the event happened in.",
    "started_at": "Start of that run.",
    "job": "Job concerned.",
    "series": "Series concerned (NULL for job-level events: first_run, job_missing, same_name).",
    "event": "first_run (the job's first run), new_series, vanished (the job ran, the series did not show), job_missing (the job ran in the previous run, not in this one), failed_dump, partial_dump, same_name (once per run and job: programs of one kind and stage that have one name, told apart by file order only, #2, #3...; the detail names them; name them in run.json or the settings' [series]).",
    "path": "Dump path concerned (failed and partial dumps; for vanished, the path in the previous run).",
    "detail": "Human text: the error of a failed or partial dump, the previous run of a vanished series or missing job.",
}

ROLLUP_SCHEMA = pl.Schema({
    "run_id": pl.String, "started_at": pl.Datetime("us"), "job": pl.String, "dumps": pl.Int64,
    "parsed": pl.Int64, "partial": pl.Int64, "failed": pl.Int64, "unknown": pl.Int64, "programs": pl.Int64,
    "series": pl.Int64, "new_series": pl.Int64, "vanished_series": pl.Int64, "changed_series": pl.Int64,
})
ROLLUP_DOCS = {
    "": "One row per run and job: ingest health (dumps by status), programs and series seen, and how many series changed (what got worse is the incidents': incident_status, run_verdicts).",
    "run_id": "Run.", "started_at": "Start of the run.", "job": "Job.",
    "dumps": "Files of the job in the run (any kind).",
    "parsed": "Dumps of a known kind fully parsed (status ok).",
    "partial": "Dumps loaded with errors (status partial).",
    "failed": "Dumps that gave nothing usable (status failed).",
    "unknown": "Files of no known dump kind (kept, not parsed).",
    "programs": "Distinct programs (normalized names).",
    "series": "Series seen (program × kind × stage).",
    "new_series": "Series seen for the first time in this run (the job's first run excluded).",
    "vanished_series": "Series of the job's previous run not seen in this one.",
    "changed_series": "Series with at least one metric that moved against its previous run (metric_trends.changed, a first value aside).",
}

TOTAL_SCHEMA = pl.Schema({
    "run_id": pl.String, "started_at": pl.Datetime("us"), "job": pl.String, "kind": pl.String, "stage": pl.String,
    "metric": pl.String, "value": pl.Float64, "series": pl.Int64, "previous_run_id": pl.String,
    "previous_value": pl.Float64, "delta": pl.Float64, "ratio": pl.Float64,
})
TOTAL_DOCS = {
    "": "Per run, job, kind, stage and metric: the sum over the job's series, and its change against the job's previous run (the headline figures).",
    "run_id": "Run.", "started_at": "Start of the run.", "job": "Job.", "kind": "Dump format.",
    "stage": "Compiler stage (NULL when none).", "metric": "Metric name (docs/metrics.md).",
    "value": "Sum of the metric over the job's series in the run.",
    "series": "Series summed.",
    "previous_run_id": "The job's previous run with this metric.",
    "previous_value": "The sum in that run.",
    "delta": "value - previous_value.",
    "ratio": "value / previous_value (NULL when previous_value is 0 or NULL).",
}


def series_events(dumps: pl.DataFrame, series: pl.DataFrame, order: pl.DataFrame, from_seq: int = 0,
                  seen_before: pl.Series | None = None) -> pl.DataFrame:
    """``dumps``: path, run_id, job, kind, status, error. ``series``: path, run_id, job,
    series (``assign_series``). ``order``: ``trends.run_order``. ``from_seq``: the events
    of the runs from that one on are wanted (the others may be left out): only those
    runs, the run before them and each job's run before them are looked at.
    ``seen_before``: the series some run before ``from_seq`` has, when ``series`` holds
    only the runs above (else taken from ``series``)."""
    if from_seq > 0:
        return _recent_events(dumps, series, order, from_seq, seen_before)
    seq = order.select("run_id", "run_seq", "started_at")
    job_runs = dumps.select("job", "run_id").unique().join(seq, on="run_id").sort("job", "run_seq")
    job_runs = job_runs.with_columns(pl.col("run_id").shift(1).over("job").alias("prev_run"))
    # The run just before each run (any job): a job that ran there and not here is missing.
    runs_prev = seq.sort("run_seq").with_columns(pl.col("run_id").shift(1).alias("prev_run"))

    first = job_runs.filter(pl.col("prev_run").is_null()).select(
        "run_id", "job", pl.lit(None, pl.String).alias("series"), pl.lit("first_run").alias("event"),
        pl.lit(None, pl.String).alias("path"), pl.lit("first run of the job").alias("detail"))

    present = series.select("run_id", "job", "series", "path").unique(["run_id", "job", "series"])
    seen_before = present.join(job_runs.select("job", "run_id", "prev_run"), on=["job", "run_id"])
    first_seen = present.join(seq, on="run_id").group_by("series").agg(pl.col("run_seq").min().alias("first_seq"))
    new = (seen_before.filter(pl.col("prev_run").is_not_null()).join(seq.select("run_id", "run_seq"), on="run_id")
           .join(first_seen, on="series").filter(pl.col("run_seq") == pl.col("first_seq"))
           .select("run_id", "job", "series", pl.lit("new_series").alias("event"), "path",
                   pl.lit("first seen in this run").alias("detail")))

    prev_present = present.rename({"run_id": "prev_run", "path": "prev_path"})
    vanished = (job_runs.filter(pl.col("prev_run").is_not_null())
                .join(prev_present, on=["job", "prev_run"])
                .join(present, on=["run_id", "job", "series"], how="anti")
                .select("run_id", "job", "series", pl.lit("vanished").alias("event"), pl.col("prev_path").alias("path"),
                        pl.format("seen in {}, not in this run", "prev_run").alias("detail")))

    jobs_prev = dumps.select("job", pl.col("run_id").alias("prev_run")).unique()
    missing = (runs_prev.filter(pl.col("prev_run").is_not_null()).select("run_id", "prev_run")
               .join(jobs_prev, on="prev_run")
               .join(dumps.select("job", "run_id").unique(), on=["job", "run_id"], how="anti")
               .select("run_id", "job", pl.lit(None, pl.String).alias("series"), pl.lit("job_missing").alias("event"),
                       pl.lit(None, pl.String).alias("path"),
                       pl.format("no dumps of the job in this run (it had dumps in {})", "prev_run").alias("detail")))

    bad = (dumps.filter(pl.col("status").is_in(["failed", "partial"]))
           .join(series.select("path", "series"), on="path", how="left")
           .select("run_id", "job", "series", (pl.col("status") + "_dump").alias("event"), "path",
                   pl.col("error").str.split("\n").list.first().alias("detail")))

    # Series told apart by file order only (series rule 3): the night says so once per job, naming them.
    numbered = pl.col("series_program").str.extract(r"^(.*)#(\d+)$", 1)
    collided = series.with_columns(numbered.alias("_base")).filter(pl.col("_base").is_not_null())
    groups = (collided.group_by("run_id", "job", "kind", "_base")
              .agg((pl.col("series_program").n_unique() + 1).alias("_n"))  # the #2, #3... and the first
              .sort("run_id", "job", "kind", "_base"))
    same = (groups.group_by("run_id", "job", maintain_order=True)
            .agg(pl.format("{} {} programs named {}", "_n", "kind", "_base").str.join("; ").alias("_names"))
            .select("run_id", "job", pl.lit(None, pl.String).alias("series"), pl.lit("same_name").alias("event"),
                    pl.lit(None, pl.String).alias("path"),
                    pl.format("{}: told apart by file order only, their series #2, #3... may swap between runs "
                              "(name them in run.json's \"series\" or the settings' [series])", "_names").alias("detail")))
    parts = [f.with_columns(pl.col("event").cast(EVENT)) for f in (first, new, vanished, missing, bad, same)]
    out = pl.concat(parts, how="vertical_relaxed").join(seq, on="run_id")
    return out.select(EVENT_SCHEMA.names()).cast(dict(EVENT_SCHEMA)).sort("started_at", "run_id", "job", "event", "series", "path", nulls_last=False)


def not_regressions(events: pl.DataFrame, steps: pl.DataFrame, run_id: str | None) -> pl.DataFrame:
    """The events of ``run_id`` a run's page lists as "Not regressions": all but a job's first run,
    and but a new series whose figures fail in it (its failure incident opened with it there: a
    failure the first night it is seen is the incident's, never news of a new series).
    ``steps``: incident_steps rows (series, step, opened_run)."""
    failing = steps.filter((pl.col("step") == "failure") & (pl.col("opened_run") == (run_id or ""))).get_column("series")
    return events.filter((pl.col("run_id") == (run_id or "")) & (pl.col("event") != "first_run")
                         & ~((pl.col("event") == "new_series") & pl.col("series").is_in(failing.unique().implode())))


def _recent_events(dumps: pl.DataFrame, series: pl.DataFrame, order: pl.DataFrame, from_seq: int,
                   seen_before: pl.Series | None) -> pl.DataFrame:
    """``series_events`` of the runs from ``from_seq`` on, from the runs that decide them:
    those runs, the run before them (job_missing) and each job's last run before them
    (first_run, vanished); a series is new where no earlier run had it."""
    seq = order.select("run_id", "run_seq")
    job_runs = dumps.select("job", "run_id").unique().join(seq, on="run_id")
    last_before = (job_runs.filter(pl.col("run_seq") < from_seq).group_by("job").agg(pl.col("run_seq").max())
                   .join(seq, on="run_seq").select("run_id"))
    wanted = pl.concat([seq.filter(pl.col("run_seq") >= from_seq - 1).select("run_id"), last_before]).unique()
    older = (series.join(seq.filter(pl.col("run_seq") < from_seq), on="run_id", how="semi").get_column("series")
             if seen_before is None else seen_before)
    events = series_events(dumps.join(wanted, on="run_id", how="semi"), series.join(wanted, on="run_id", how="semi"), order)
    tonight = events.join(seq.filter(pl.col("run_seq") >= from_seq), on="run_id", how="semi")
    known = (pl.col("event") == "new_series") & pl.col("series").is_in(older.unique().implode())
    return tonight.filter(~known.fill_null(False))


def run_rollups(dumps: pl.DataFrame, series: pl.DataFrame, trends: pl.DataFrame, events: pl.DataFrame,
                order: pl.DataFrame) -> pl.DataFrame:
    status = dumps.group_by("run_id", "job").agg(
        pl.len().alias("dumps"),
        ((pl.col("status") == "ok") & (pl.col("kind") != "unknown")).sum().alias("parsed"),
        (pl.col("status") == "partial").sum().alias("partial"),
        (pl.col("status") == "failed").sum().alias("failed"),
        (pl.col("kind") == "unknown").sum().alias("unknown"),
    )
    progs = series.with_columns(pl.col("series").str.split("/").list.get(1).alias("_p")).group_by("run_id", "job").agg(
        pl.col("_p").n_unique().alias("programs"), pl.col("series").n_unique().alias("series"))
    ev = events.group_by("run_id", "job").agg(
        (pl.col("event") == "new_series").sum().alias("new_series"),
        (pl.col("event") == "vanished").sum().alias("vanished_series"))
    moved = trends.filter(pl.col("changed") & pl.col("previous_value").is_not_null()).group_by("run_id", "job").agg(
        pl.col("series").n_unique().alias("changed_series"))
    out = (status.join(progs, on=["run_id", "job"], how="left").join(ev, on=["run_id", "job"], how="left")
           .join(moved, on=["run_id", "job"], how="left").join(order.select("run_id", "started_at"), on="run_id"))
    counts = [c for c in ROLLUP_SCHEMA.names() if ROLLUP_SCHEMA[c] == pl.Int64]
    return out.with_columns(pl.col(counts).fill_null(0)).select(ROLLUP_SCHEMA.names()).cast(dict(ROLLUP_SCHEMA)).sort("started_at", "run_id", "job")


def job_totals(trends: pl.DataFrame, previous: pl.DataFrame | None = None) -> pl.DataFrame:
    """Totals of the runs in ``trends``; ``previous``: stored totals (TOTAL_SCHEMA) of
    earlier runs, which the first of these runs compares with."""
    keys = ["job", "kind", "stage", "metric"]
    totals = trends.group_by("run_id", "started_at", *keys).agg(
        pl.col("value").sum(), pl.col("series").n_unique().cast(pl.Int64).alias("series"))
    totals = totals.with_columns(pl.lit(False).alias("_old"))
    if previous is not None and previous.height:
        cols = totals.columns[:-1]
        old = previous.select(cols).cast({c: totals.schema[c] for c in cols}).with_columns(pl.lit(True).alias("_old"))
        totals = pl.concat([old, totals])
    totals = totals.sort("started_at", "run_id").with_columns(
        pl.col("run_id").shift(1).over(keys).alias("previous_run_id"),
        pl.col("value").shift(1).over(keys).alias("previous_value"))
    totals = totals.with_columns(
        (pl.col("value") - pl.col("previous_value")).alias("delta"),
        pl.when(pl.col("previous_value") != 0).then(pl.col("value") / pl.col("previous_value")).alias("ratio"))
    totals = totals.filter(~pl.col("_old"))
    return totals.select(TOTAL_SCHEMA.names()).cast(dict(TOTAL_SCHEMA)).sort("started_at", "run_id", *keys, nulls_last=False)
