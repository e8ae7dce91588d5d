"""Trends across runs: deltas, baselines and verdicts per series and metric (polars).

Input: the metrics of every dump with its series (``transforms.trends.series``), the runs,
the accept log and the settings (``transforms.trends.rules``). Output: the frames of the
``metric_trends`` and ``regressions`` tables. Pure and lazy; ``flows.aggregate``
feeds it from DuckDB through Arrow and writes the results back.

For each (series, metric), in run order (``runs.started_at``, then ``run_id``):

- ``previous_*``: the series' previous observation (the last run that had it);
- ``baseline``: the median of the previous ``baseline_runs`` values since the last
  accept (an accept at run R starts a new baseline at R: R itself has none);
- ``verdict``, first that holds:
  ``new`` (first value of the metric in the series), ``accepted`` (an accept at
  this run), ``regressed`` (worse than the baseline by more than the rule's
  threshold), ``improved`` / ``changed`` (differs from the previous run by more
  than the rule's noise: better, or any other way), ``unchanged``.
"""

from __future__ import annotations

import fnmatch

import polars as pl

from transforms.trends.rules import ZERO_WHEN_ABSENT, Settings, rules_frame

VERDICTS = ("new", "accepted", "regressed", "improved", "changed", "unchanged")
VERDICT = pl.Enum(VERDICTS)

TREND_SCHEMA = pl.Schema({
    "run_id": pl.String, "started_at": pl.Datetime("us"), "commit": pl.String, "series": pl.String,
    "job": pl.String, "kind": pl.String, "stage": pl.String, "program": pl.String, "metric": pl.String,
    "value": pl.Float64, "previous_run_id": pl.String, "previous_value": pl.Float64, "delta": pl.Float64,
    "ratio": pl.Float64, "baseline": pl.Float64, "baseline_runs": pl.Int32, "change": pl.Float64,
    "change_ratio": pl.Float64, "direction": pl.Int8, "rule": pl.String, "verdict": VERDICT,
    "regressed_since": pl.String,
})
TREND_DOCS = {
    "": "One row per series, metric and run it was seen in: the value, its delta and ratio against the series' previous run and against the baseline, and the verdict of the metric's regression rule.",
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
    "baseline": "Median of the previous baseline_runs values of the series since its last accept (NULL on a first value or at an accept).",
    "baseline_runs": "How many values the baseline is the median of.",
    "change": "value - baseline: what the regression rule judges.",
    "change_ratio": "change / |baseline| (NULL when the baseline is 0 or NULL).",
    "direction": "Which way is worse for this metric: 1 more is worse, -1 fewer is worse, 0 neither.",
    "rule": "The regression rule applied, in words (for example '> 2% increase').",
    "verdict": "new, accepted, regressed, improved, changed or unchanged (see the trends documentation).",
    "regressed_since": "For a regressed row: the first run of the uninterrupted streak of regressed runs this row belongs to.",
}

REGRESSION_COLUMNS = ("run_id", "started_at", "commit", "series", "job", "kind", "stage", "program", "metric",
                      "value", "previous_value", "baseline", "change", "change_ratio", "rule", "regressed_since")
REGRESSION_SCHEMA = pl.Schema({c: TREND_SCHEMA[c] for c in REGRESSION_COLUMNS} | {"also_in": pl.List(pl.String)})
REGRESSION_DOCS = {
    "": "The regressions: metric_trends rows whose verdict is regressed (worse than the baseline past the rule's threshold, not accepted). A figure that several files of one compile repeat (the buffer assignment and its values side file) is listed once, under its first series; also_in names the others.",
    **{c: TREND_DOCS[c] for c in REGRESSION_COLUMNS},
    "also_in": "Other series of the same job and program that report the same metric with the same value and baseline in this run.",
}


def run_order(runs: pl.DataFrame) -> pl.DataFrame:
    """run_id, started_at, commit and run_seq (0, 1, ... in time order)."""
    return (
        runs.select("run_id", pl.col("started_at").cast(pl.Datetime("us")), "commit")
        .sort("started_at", "run_id", nulls_last=False)
        .with_row_index("run_seq")
        .with_columns(pl.col("run_seq").cast(pl.Int64))
    )


def _epoch_starts(obs: pl.LazyFrame, accepts: pl.DataFrame, order: pl.DataFrame, keys: pl.DataFrame) -> pl.LazyFrame:
    """Adds ``epoch``: run_seq of the last accept at or before each row (-1: none)."""
    acc = accepts.join(order.select("run_id", "run_seq"), on="run_id").select(
        "series", "metric", pl.col("run_seq").alias("accept_seq"))
    if acc.is_empty():
        return obs.with_columns(pl.lit(-1, pl.Int64).alias("epoch"))
    # The accept log's series column is a series id or a shell pattern of them (incidents
    # read it the same way, ``incidents._accepted_at``): each accept names the series it matches.
    keys = keys.with_columns(pl.col("series", "metric").cast(pl.String))
    names = keys.get_column("series").unique().to_list()
    matched = [(pattern, name) for pattern in acc.get_column("series").unique().to_list()
               for name in fnmatch.filter(names, pattern)] if names else []
    acc = acc.join(pl.DataFrame(matched, schema={"pattern": pl.String, "name": pl.String}, orient="row"),
                   left_on="series", right_on="pattern").select(pl.col("name").alias("series"), "metric", "accept_seq")
    # An accept of the whole series applies to each of its metrics.
    whole = acc.filter(pl.col("metric").is_null()).drop("metric").join(keys.select("sm", "series", "metric"), on="series")
    one = acc.filter(pl.col("metric").is_not_null()).join(keys.select("sm", "series", "metric"), on=["series", "metric"])
    starts = pl.concat([whole.select("sm", "accept_seq"), one.select("sm", "accept_seq")]).unique().sort("accept_seq")
    obs = obs.sort("run_seq").join_asof(starts.lazy(), left_on="run_seq", right_on="accept_seq", by="sm",
                                        strategy="backward", check_sortedness=False)
    return obs.with_columns(pl.col("accept_seq").fill_null(-1).alias("epoch")).drop("accept_seq")


def _zeros_for_absent_counts(obs: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """Rows of value 0 for the counts a series had in some run but not in a run where the
    series was seen (``rules.ZERO_WHEN_ABSENT``). ``obs``: sm, series_idx, run_seq, value."""
    counts = keys.filter(pl.col("metric").cast(pl.String).str.contains(ZERO_WHEN_ABSENT)).select("sm", "series_idx")
    if counts.is_empty():
        return obs
    seen = obs.select("series_idx", "run_seq").unique()
    missing = seen.join(counts, on="series_idx").join(obs, on=["sm", "run_seq"], how="anti")
    return pl.concat([obs, missing.with_columns(pl.lit(0.0).alias("value")).select(obs.columns)])


def metric_trends(observations: pl.DataFrame | pl.LazyFrame, runs: pl.DataFrame, accepts: pl.DataFrame,
                  settings: Settings, *, from_seq: int = 0, prior: pl.DataFrame | None = None) -> pl.DataFrame:
    """The ``metric_trends`` frame (rows of runs with ``run_seq >= from_seq``: every run
    is computed, since baselines look back, but only these get their names).

    ``observations``: run_id, series, job, kind, stage, program, metric, value (one
    row per series, metric and run; NULL values are left out); strings or
    categoricals. ``accepts``: series, run_id, metric (NULL: every metric of the series).

    The work runs on integer ids (``sm`` = one series-metric pair, ``run_seq``): the
    window functions over millions of rows are several times faster on them than on
    the strings, which come back by position at the end.

    ``prior`` (series, metric, verdict, regressed_since: the stored row of each pair at
    its last run before ``from_seq``) makes the work bounded by the night, not the
    history: of the runs before ``from_seq`` only each pair's last ``baseline_runs``
    rows are kept (its previous value and baseline window), and a streak of regressed
    rows that began earlier takes its start from ``prior``.
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
    n = settings.baseline_runs
    windowed = prior is not None and from_seq > 0
    if windowed:  # each pair's last n rows before the night, and the night's
        obs = obs.sort("sm", "run_seq").filter(
            (pl.col("run_seq") >= from_seq)
            | ((pl.col("run_seq") < from_seq).cast(pl.Int32).cum_sum(reverse=True).over("sm") <= n))
        last_before = obs.filter(pl.col("run_seq") < from_seq).group_by("sm").agg(pl.col("run_seq").max().alias("_last"))
        carried = (prior.select(pl.col("series", "metric").cast(pl.String), pl.col("verdict").cast(pl.String).alias("_prior"),
                                "regressed_since")
                   .join(keys.select(pl.col("series", "metric").cast(pl.String), "sm"), on=["series", "metric"])
                   .join(order.select(pl.col("run_id").alias("regressed_since"), pl.col("run_seq").alias("_since_prior")),
                         on="regressed_since", how="left")
                   .join(last_before, on="sm").select("sm", pl.col("_last").alias("run_seq"), "_prior", "_since_prior"))
        obs = obs.join(carried, on=["sm", "run_seq"], how="left")
    rules = rules_frame(settings, keys.select(pl.col("series", "metric").cast(pl.String)).iter_rows()).with_columns(keys.get_column("sm"))
    params = rules.select("sm", "direction", "rel", "abs", "noise", "limit").lazy()
    lazy = _epoch_starts(obs.lazy(), accepts, order, keys).join(params, on="sm", how="left")

    # Sorted by (sm, run_seq), a group's rows are contiguous: "previous row of the same
    # group" is a shift masked at group starts, cheaper than window functions.
    lazy = lazy.sort(pl.col("sm").cast(pl.Int64) * (order.height + 1) + pl.col("run_seq"))  # one key: faster
    same_sm = pl.col("sm") == pl.col("sm").shift(1)
    epoch_start = ~same_sm.fill_null(False) | (pl.col("epoch") != pl.col("epoch").shift(1))
    row = pl.int_range(pl.len(), dtype=pl.Int64)
    prev = pl.col("value").shift(1)
    lazy = lazy.with_columns(
        pl.when(same_sm).then(prev).alias("previous_value"),
        pl.when(same_sm).then(pl.col("run_seq").shift(1)).alias("previous_seq"),
        (row - pl.when(epoch_start).then(row).forward_fill()).alias("_pos"),  # rows before, in the epoch
    )
    # A metric without a direction never regresses, so its history matters only as the
    # baseline window of the rows asked for: keep its last n rows before those.
    asked = pl.col("run_seq") >= from_seq
    first_asked = pl.when(asked & ~(asked.shift(1).fill_null(False) & same_sm.fill_null(False))).then(row).backward_fill()
    lazy = lazy.filter((pl.col("direction") != 0) | asked | (row >= first_asked - n))
    same_sm = pl.col("sm") == pl.col("sm").shift(1)
    # The median of the previous n values of the epoch: a plain rolling median over the
    # sorted column is right wherever its window stays in the epoch (_pos >= n); the
    # first rows of each epoch take the windowed one.
    group = pl.col("sm").cast(pl.Int64) * (order.height + 2) + pl.col("epoch") + 1
    lazy = lazy.with_columns(
        pl.when(pl.col("_pos") >= n).then(prev.rolling_median(n, min_samples=1))
        .when(pl.col("_pos") > 0).then(prev.rolling_median(n, min_samples=1).over(group)).alias("baseline"),
        pl.col("_pos").clip(upper_bound=n).cast(pl.Int32).alias("baseline_runs"),
    )
    value, base, direction = pl.col("value"), pl.col("baseline"), pl.col("direction")
    worse_by = (value - base) * direction
    past_threshold = (pl.col("rel").is_not_null() & (worse_by > pl.col("rel") * base.abs())) | (
        pl.col("abs").is_not_null() & (worse_by > pl.col("abs")))
    past_limit = pl.col("limit").is_null() | (value * direction > pl.col("limit") * direction)
    moved = (value - pl.col("previous_value")) * direction
    changed = (value - pl.col("previous_value")).abs() > pl.col("noise")

    def v(name: str) -> pl.Expr:  # enum literals: no string per row
        return pl.lit(name, VERDICT)

    verdict = (
        pl.when(pl.col("previous_value").is_null()).then(v("new"))
        .when(base.is_null()).then(v("accepted"))
        .when((direction != 0) & (worse_by > pl.col("noise")) & past_threshold & past_limit).then(v("regressed"))
        .when(changed & (direction != 0) & (moved < 0)).then(v("improved"))
        .when(changed).then(v("changed"))
        .otherwise(v("unchanged"))
    )
    lazy = lazy.with_columns(verdict.alias("verdict"))
    start_seq = pl.col("run_seq")
    if windowed:  # before the night: the stored verdicts (the rows kept there lack their own history)
        stored = pl.col("_prior").cast(VERDICT, strict=False)
        lazy = lazy.with_columns(pl.when(pl.col("run_seq") < from_seq).then(stored).otherwise(pl.col("verdict")).alias("verdict"))
        start_seq = pl.coalesce("_since_prior", "run_seq")
    # Each regressed row: the first run of its uninterrupted streak of regressed rows.
    is_reg = pl.col("verdict") == "regressed"
    streak_start = is_reg & ~(is_reg.shift(1).fill_null(False) & same_sm.fill_null(False))
    lazy = lazy.with_columns(
        pl.when(is_reg).then(pl.when(streak_start).then(start_seq).forward_fill()).alias("since_seq"))
    lazy = lazy.filter(pl.col("run_seq") >= from_seq).with_columns(
        (value - pl.col("previous_value")).alias("delta"),
        pl.when(pl.col("previous_value") != 0).then(value / pl.col("previous_value")).alias("ratio"),
        (value - base).alias("change"),
        pl.when(base != 0).then((value - base) / base.abs()).alias("change_ratio"),
    )
    core = lazy.collect(engine="in-memory")  # the streaming engine is slower on these windows
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
    seq, prev, since = core.get_column("run_seq"), core.get_column("previous_seq"), core.get_column("since_seq")
    run_ids = order.get_column("run_id")
    columns = {
        "run_id": run_ids.gather(seq), "started_at": order.get_column("started_at").gather(seq),
        "commit": order.get_column("commit").gather(seq), "series": info.get_column("series").gather(series_idx),
        **{c: info.get_column(c).gather(series_idx) for c in ("job", "kind", "stage", "program")},
        "metric": keys.get_column("metric").gather(sm), "previous_run_id": run_ids.gather(prev),
        "regressed_since": run_ids.gather(since),
    }
    out = core.with_columns(pl.Series(name, col) for name, col in columns.items())
    return out.select(TREND_SCHEMA.names()).cast(dict(TREND_SCHEMA))


def regressions(trends: pl.DataFrame) -> pl.DataFrame:
    """The ``regressions`` frame: regressed rows, worst relative change first per run."""
    same = ["run_id", "job", "program", "metric", "value", "baseline"]
    reg = trends.filter(pl.col("verdict") == "regressed").sort("series")
    reg = reg.with_columns(pl.col("series").implode().over(same).list.slice(1).alias("also_in")).unique(same, keep="first")
    return (reg.select(REGRESSION_SCHEMA.names()).cast(dict(REGRESSION_SCHEMA))
            .sort("started_at", "run_id", "change_ratio", "series", "metric", descending=[False, False, True, False, False], nulls_last=True))
