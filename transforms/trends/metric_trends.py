"""Trends across runs: each figure against the series' previous run (polars).

Input: the metrics of every dump with its series (``transforms.trends.series``), the runs
and the settings (``transforms.trends.rules``). Output: the frame of the
``metric_trends`` table. Pure and lazy; ``flows.verdict.aggregate`` feeds it from DuckDB
through Arrow and writes the results back.

For each (series, metric), in run order (``runs.started_at``, then ``run_id``): its
value, the series' previous observation (the last run that had it), the delta and
ratio, and ``changed`` (a first value, or a move past the rule's noise). These are
facts, not a verdict: whether a figure got worse or better is said by the incidents
alone (``transforms.trends.incident_walk``, its step baselines), and the view
``figure_status`` puts each row beside the incident step open on it.
"""

from __future__ import annotations

import polars as pl

from transforms.trends.rules import ZERO_WHEN_ABSENT, Settings, rules_frame

TREND_SCHEMA = pl.Schema({
    "run_id": pl.String, "started_at": pl.Datetime("us"), "commit": pl.String, "series": pl.String,
    "job": pl.String, "kind": pl.String, "stage": pl.String, "program": pl.String, "metric": pl.String,
    "value": pl.Float64, "previous_run_id": pl.String, "previous_value": pl.Float64, "delta": pl.Float64,
    "ratio": pl.Float64, "direction": pl.Int8, "rule": pl.String, "changed": pl.Boolean,
})
TREND_DOCS = {
    "": "One row per series, metric and run it was seen in: the value, and its delta and ratio against the series' previous run. Facts only: whether a figure is worse or better than its baseline is the incidents' verdict (incident_steps; the view figure_status joins the two).",
    "run_id": "Run (runs.run_id).",
    "started_at": "Start of the run (runs.started_at): the time axis.",
    "commit": "Source commit the run built (runs.commit).",
    "series": "Series id <job>/<program>/<kind>[/<stage>]: one program followed across runs (docs: series identity).",
    "job": "Job directory of the dumps.",
    "kind": "Dump format.",
    "stage": "Compiler stage (NULL when the format has none).",
    "program": "Program name normalized across runs (renumbering stripped, or the override).",
    "metric": "Metric name (docs/metrics.md).",
    "value": "Value in this run.",
    "previous_run_id": "The series' previous run that had this metric (NULL on the first).",
    "previous_value": "Value in that run.",
    "delta": "value - previous_value.",
    "ratio": "value / previous_value (NULL when previous_value is 0 or NULL).",
    "direction": "Which way is worse for this metric: 1 more is worse, -1 fewer is worse, 0 neither.",
    "rule": "The metric's rule, in words (for example '> 2% increase'): the floor of its steps.",
    "changed": "True on the metric's first value in the series and where it moved past the rule's noise against the previous run.",
}


def run_order(runs: pl.DataFrame) -> pl.DataFrame:
    """run_id, started_at, commit and run_seq (0, 1, ... in time order)."""
    return (
        runs.select("run_id", pl.col("started_at").cast(pl.Datetime("us")), "commit")
        .sort("started_at", "run_id", nulls_last=False)
        .with_row_index("run_seq")
        .with_columns(pl.col("run_seq").cast(pl.Int64))
    )


def _zeros_for_absent_counts(obs: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """Rows of value 0 for the counts a series had in some run but not in a run where the
    series was seen (``rules.ZERO_WHEN_ABSENT``). ``obs``: sm, series_idx, run_seq, value."""
    counts = keys.filter(pl.col("metric").cast(pl.String).str.contains(ZERO_WHEN_ABSENT)).select("sm", "series_idx")
    if counts.is_empty():
        return obs
    seen = obs.select("series_idx", "run_seq").unique()
    missing = seen.join(counts, on="series_idx").join(obs, on=["sm", "run_seq"], how="anti")
    return pl.concat([obs, missing.with_columns(pl.lit(0.0).alias("value")).select(obs.columns)])


def metric_trends(observations: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame, settings: Settings, *,
                  from_seq: int = 0) -> pl.DataFrame:
    """The ``metric_trends`` frame (rows of runs with ``run_seq >= from_seq``).

    ``observations``: run_id, series, job, kind, stage, program, metric, value (one
    row per series, metric and run; NULL values are left out); strings or
    categoricals. Each pair's last row before ``from_seq`` (at least) must be there: it
    is the previous value of the pair's first row asked for.

    The work runs on integer ids (``sm`` = one series-metric pair, ``run_seq``): the
    shifts over millions of rows are several times faster on them than on the strings,
    which come back by position at the end.
    """
    order = run_order(runs)
    text = ["run_id", "series", "job", "kind", "stage", "program", "metric"]
    observations = (observations.lazy().filter(pl.col("value").is_not_null())
                    .with_columns(pl.col(text).cast(pl.Categorical)).collect())  # 4 bytes a row, not a string
    info = observations.select("series", "job", "kind", "stage", "program").unique("series").sort("series").with_row_index("series_idx")
    keys = (observations.select("series", "metric").unique().sort("series", "metric").with_row_index("sm")
            .join(info.select("series", "series_idx"), on="series"))
    obs = (observations.select("series", "metric", "run_id", "value")
           .join(keys.select("series", "metric", "sm", "series_idx"), on=["series", "metric"])
           .join(order.select(pl.col("run_id").cast(pl.Categorical), "run_seq"), on="run_id")
           .select("sm", "series_idx", "run_seq", "value"))
    # Counts the parsers omit when zero are 0 where their series was seen without them: the
    # run before a first fallback kernel reads 0 (that run is a step from 0), but no row is
    # written before a count's first appearance, so a run's rows never depend on whether
    # later runs were aggregated with it (one night, a pass of many, or all at once).
    first_seen = obs.group_by("sm").agg(pl.col("run_seq").min().alias("_first"))
    obs = _zeros_for_absent_counts(obs, keys)
    rules = rules_frame(settings, keys.select(pl.col("series", "metric").cast(pl.String)).iter_rows()).with_columns(keys.get_column("sm"))
    # Sorted by (sm, run_seq), a group's rows are contiguous: "previous row of the same
    # group" is a shift masked at group starts, cheaper than window functions.
    lazy = (obs.lazy().join(rules.select("sm", "direction", "noise").lazy(), on="sm", how="left")
            .sort(pl.col("sm").cast(pl.Int64) * (order.height + 1) + pl.col("run_seq")))  # one key: faster
    same_sm = (pl.col("sm") == pl.col("sm").shift(1)).fill_null(False)
    value, previous = pl.col("value"), pl.col("previous_value")
    lazy = lazy.with_columns(
        pl.when(same_sm).then(value.shift(1)).alias("previous_value"),
        pl.when(same_sm).then(pl.col("run_seq").shift(1)).alias("previous_seq"),
    ).filter(pl.col("run_seq") >= from_seq).with_columns(
        (value - previous).alias("delta"),
        pl.when(previous != 0).then(value / previous).alias("ratio"),
        (previous.is_null() | ((value - previous).abs() > pl.col("noise"))).alias("changed"),
    )
    core = lazy.collect(engine="in-memory")  # the streaming engine is slower on these shifts
    core = core.join(first_seen, on="sm").filter(pl.col("run_seq") >= pl.col("_first")).drop("_first")
    core = core.with_columns(rules.get_column("rule").gather(core.get_column("sm")).alias("rule"))
    return _with_names(core, keys, info, order)


def _with_names(core: pl.DataFrame, keys: pl.DataFrame, info: pl.DataFrame, order: pl.DataFrame) -> pl.DataFrame:
    """The string columns, by position (ids are row numbers of their tables): gathers,
    not hash joins, over millions of rows."""
    keys = keys.sort("sm")
    info = info.sort("series_idx")
    order = order.sort("run_seq")
    sm, series_idx = core.get_column("sm"), keys.get_column("series_idx").gather(core.get_column("sm"))
    seq, prev = core.get_column("run_seq"), core.get_column("previous_seq")
    run_ids = order.get_column("run_id")
    columns = {
        "run_id": run_ids.gather(seq), "started_at": order.get_column("started_at").gather(seq),
        "commit": order.get_column("commit").gather(seq), "series": info.get_column("series").gather(series_idx),
        **{c: info.get_column(c).gather(series_idx) for c in ("job", "kind", "stage", "program")},
        "metric": keys.get_column("metric").gather(sm), "previous_run_id": run_ids.gather(prev),
    }
    out = core.with_columns(pl.Series(name, col) for name, col in columns.items())
    return out.select(TREND_SCHEMA.names()).cast(dict(TREND_SCHEMA))
