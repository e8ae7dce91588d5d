"""Altair charts of the report site, as Vega-Lite specs (dicts) with their data inline.

One theme for every chart (``THEME``), time on x with zoom and pan, tooltips with
run, commit, value and change, regressions marked on the lines, and byte figures in
the binary unit that fits (B, KiB, MiB, GiB). Data comes in aggregated: the change
points of each line (compiler metrics are step functions of the runs: a value held
over many nights is drawn as a step, not as one point per night).

Altair builds the chart; the rows skip it (validating thousands of rows through its
schema classes took seconds a chart) and go into the spec as inline CSV with short
column names: a year of runs stays a few hundred kB a page. The small multiples of a
thousand series pages share one spec built once (``small_multiples_by``): only the title
and the data differ.
"""

from __future__ import annotations

import json
from functools import lru_cache

import altair as alt
import polars as pl

from transforms.units import is_bytes_metric

REGRESSED = "#d62728"
THEME = {
    "font": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif",
    "view": {"stroke": None},
    "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridOpacity": 0.4},
    "legend": {"labelFontSize": 11, "titleFontSize": 12, "orient": "bottom", "columns": 2, "labelLimit": 420},
    "title": {"fontSize": 14, "anchor": "start"},
    "range": {"category": {"scheme": "tableau10"}},
    "background": "transparent",
}
WIDTH = "container"
POINTS = alt.Data(name="points")  # replaced by the inline CSV in _spec
_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))
# Columns of the inline data: t time, r run, c commit, k line or panel, y value (scaled),
# d change against the previous run (scaled), v verdict.
_PARSE = {"t": "date", "y": "number", "d": "number"}


def byte_unit(max_value: float) -> tuple[str, int]:
    for name, size in _UNITS:
        if max_value >= size:
            return name, size
    return "B", 1


def change_points(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Rows where the value moved (or was judged), plus the first and last of each line."""
    ordered = frame.sort([*keys, "started_at", "run_id"])
    first = pl.int_range(pl.len()).over(keys) == 0
    last = pl.int_range(pl.len()).over(keys) == pl.len().over(keys) - 1
    return ordered.filter(first | last | (pl.col("verdict") != "unchanged"))


DAILY_DAYS = 14  # runs spanning this many days or fewer get a tick a day


def _time_axis(rows: pl.DataFrame, fmt: str = "%Y-%m-%d") -> alt.Axis:
    """Dates on x; a tick a day when the runs span two weeks or less (else Vega picks)."""
    span = rows.select(pl.col("started_at").max() - pl.col("started_at").min()).item() if rows.height else None
    return _axis(span is not None and span.days <= DAILY_DAYS, fmt)


def _axis(daily: bool, fmt: str) -> alt.Axis:
    return alt.Axis(format=fmt, labelAngle=-30, **({"tickCount": {"interval": "day", "step": 1}} if daily else {}))


def _points(rows: pl.DataFrame, key: str, scale: pl.Expr | float) -> pl.DataFrame:
    return rows.select(
        pl.col("started_at").dt.strftime("%Y-%m-%dT%H:%M").alias("t"), pl.col("run_id").alias("r"),
        pl.col("commit").fill_null("").alias("c"), pl.col(key).alias("k"),
        (pl.col("value") / scale).round_sig_figs(6).alias("y"), (pl.col("delta") / scale).round_sig_figs(6).alias("d"),
        pl.col("verdict").alias("v"))


def _tooltip(value_title: str) -> list[alt.Tooltip]:
    return [alt.Tooltip("r:N", title="run"), alt.Tooltip("c:N", title="commit"), alt.Tooltip("k:N", title="series"),
            alt.Tooltip("y:Q", title=value_title, format=",.4~r"), alt.Tooltip("d:Q", title="change", format="+,.4~r"),
            alt.Tooltip("v:N", title="verdict")]


def _marks(base: alt.Chart, tooltip: list, size: int = 28) -> alt.LayerChart:
    return alt.layer(
        base.mark_line(interpolate="step-after", strokeWidth=2),
        base.mark_point(filled=True, size=size).encode(tooltip=tooltip),
        base.transform_filter(alt.datum.v == "regressed").mark_point(
            shape="triangle-up", size=4 * size, filled=True, color=REGRESSED).encode(tooltip=tooltip),
    )


def trend_chart(rows: pl.DataFrame, *, title: str, color: str = "line", metric_label: str | None = None,
                height: int = 220) -> dict:
    """Lines over runs, one per ``color`` value. ``rows``: metric_trends rows (one metric,
    or metrics of one unit) with a ``line`` column naming each line."""
    rows = change_points(rows, [color, "metric"])
    metric = rows.get_column("metric")[0] if rows.height else ""
    unit, scale = byte_unit(float(rows.get_column("value").abs().max() or 0)) if is_bytes_metric(metric) else ("", 1)
    y_title = (metric_label or metric) + (f" ({unit})" if unit else "")
    base = alt.Chart(POINTS).encode(x=alt.X("t:T", title="run", axis=_time_axis(rows)), y=alt.Y("y:Q", title=y_title),
                                    color=alt.Color("k:N", title=None))
    chart = _marks(base, _tooltip(y_title)).properties(title=title, width=WIDTH, height=height).interactive(bind_y=False)
    return _spec(chart, _points(rows, color, scale))


def small_multiples(rows: pl.DataFrame, *, title: str, columns: int = 3) -> dict:
    """Every metric of one series over runs, one panel each, each in its own unit."""
    return small_multiples_by(rows.with_columns(pl.lit(title).alias("_chart")), "_chart", columns=columns)[title]


def small_multiples_by(rows: pl.DataFrame, key: str, *, columns: int = 3) -> dict[str, dict]:
    """``small_multiples`` of each value of ``key`` (a series), titled by it, in one pass."""
    rows = change_points(rows, [key, "metric"])
    if rows.is_empty():
        return {}
    units = rows.group_by(key, "metric").agg(pl.col("value").abs().max().alias("_max"))
    is_bytes = pl.col("metric").is_in([m for m in units.get_column("metric").unique().to_list() if is_bytes_metric(m)])
    unit, size = pl.lit("B"), pl.lit(1)
    for name, n in reversed(_UNITS[:-1]):  # byte_unit(): the largest unit the maximum reaches
        unit, size = pl.when(pl.col("_max") >= n).then(pl.lit(name)).otherwise(unit), pl.when(pl.col("_max") >= n).then(n).otherwise(size)
    units = units.select(key, "metric", pl.when(is_bytes).then(unit).otherwise(pl.lit("")).alias("_unit"),
                         pl.when(is_bytes).then(size).otherwise(1).cast(pl.Float64).alias("_scale"))
    rows = rows.join(units, on=[key, "metric"], how="left", maintain_order="left").with_columns(
        pl.when(pl.col("_unit") == "").then(pl.col("metric")).otherwise(pl.format("{} ({})", "metric", "_unit")).alias("panel"))
    daily = dict(rows.group_by(key).agg(
        ((pl.col("started_at").max() - pl.col("started_at").min()).dt.total_days() <= DAILY_DAYS).alias("d")).iter_rows())
    points = pl.concat([rows.select(key), _points(rows, "panel", pl.col("_scale"))], how="horizontal")
    out = {}
    for (name,), part in points.partition_by(key, as_dict=True, maintain_order=True).items():
        spec = json.loads(_small_multiples_spec(columns, bool(daily.get(name))))
        spec["title"] = name
        out[name] = _with_data(spec, part.drop(key))
    return out


@lru_cache(maxsize=8)
def _small_multiples_spec(columns: int, daily: bool) -> str:
    """The spec every series page shares (JSON text: each caller gets its own copy)."""
    x = alt.X("t:T", title=None, axis=_axis(daily, "%m-%d"))
    base = alt.Chart().encode(x=x, y=alt.Y("y:Q", title=None, scale=alt.Scale(zero=False)))
    layers = _marks(base, _tooltip("value"), size=22).properties(width=230, height=110)
    chart = layers.facet(facet=alt.Facet("k:N", title=None, header=alt.Header(labelLimit=260)), columns=columns,
                         data=POINTS).resolve_scale(y="independent").properties(title="")
    return json.dumps(chart.to_dict(validate=False))


def bar_chart(rows: pl.DataFrame, *, x: str, y: str, title: str, color: str | None = None, bytes_axis: bool = False) -> dict:
    """Horizontal bars (a breakdown of the latest run)."""
    unit, scale = byte_unit(float(rows.get_column(x).max() or 0)) if bytes_axis else ("", 1)
    x_title = f"{x} ({unit})" if unit else x
    data = rows.select(pl.col(y).alias("k"), (pl.col(x) / scale).round_sig_figs(6).alias("y"),
                       *([pl.col(color).alias("g")] if color else []))
    enc = {"x": alt.X("y:Q", title=x_title), "y": alt.Y("k:N", sort="-x", title=None),
           "tooltip": [alt.Tooltip("k:N", title=y), alt.Tooltip("y:Q", title=x_title, format=",.4~r")]}
    if color:
        enc["color"] = alt.Color("g:N", title=None)
    chart = alt.Chart(POINTS).mark_bar().encode(**enc).properties(
        title=title, width=WIDTH, height=max(60, 22 * data.get_column("k").n_unique()))
    return _spec(chart, data)


def _spec(chart: alt.TopLevelMixin, rows: pl.DataFrame) -> dict:
    return _with_data(chart.to_dict(validate=False), rows)


def _with_data(spec: dict, rows: pl.DataFrame) -> dict:
    spec["data"] = {"values": rows.write_csv(), "format": {"type": "csv", "parse": {c: _PARSE[c] for c in rows.columns if c in _PARSE}}}
    spec["config"] = THEME | spec.get("config", {})
    if "facet" not in spec:  # fit the page's width; facets keep their panel sizes
        spec["autosize"] = {"type": "fit-x", "contains": "padding"}
    return spec
