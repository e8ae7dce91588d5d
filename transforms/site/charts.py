"""Altair charts of the report site, as Vega-Lite specs (dicts) with their data inline.

One theme for every chart (``THEME``), time on x with zoom and pan, tooltips with
run, commit, value, change and the incident open on the figure, and byte figures in one
binary unit per chart (``transforms.units.byte_unit``: the table beside it uses the same).
What a reader looks for first is
last night: every trend chart rings the latest run's point of each line and writes its
value beside it, and the x axis runs a little past the last run, so a point there never
sits on the chart's border. Incidents are marked (triangles) on the run where they
opened, and the latest point of a figure with an open incident carries a red (a
regression or failure) or green (an improvement) ring that opens it. A point opens its
run's page; a mark its incident (Vega's ``href``). A layer is drawn only when it has
points (an empty one makes Vega warn of an infinite extent).

Rows come in from ``transforms.site`` with these columns: ``started_at``, ``run_id``,
``commit``, ``value``, ``delta``, ``metric``, the line's name, and optionally ``changed``,
``href`` (the run's page, relative to the page the chart is on), ``last`` (the row is the
latest run's), ``mark`` ("incident": one opened here), ``mark_href``, ``state`` (the open
step: "regression I-…"), ``baseline`` (its baseline), ``open`` and ``open_href``
(``transforms.site.data.marked``).
Section charts get a row for every run of the window (``steps=False``: straight lines
between nights), one panel per program so that one program's spike does not flatten the
others; the series pages' small multiples get the change points only (each line's first
and last run and every run where it moved or an incident opened), drawn as steps, which
is what a value held over many nights is. A panel whose figure did not move in the window
is not drawn (the page's table holds its value).

A spike never flattens an open step (``_zoom``): in a panel whose figure has an incident
open on it, the y axis spans at most three times the open step (its baseline to its values
since), so the step takes at least a third of the panel's height; a point beyond that span
is drawn on the panel's edge with its value written beside it ("↑ 7168 KiB"), its tooltip
saying the true value. The other panels span their values.

Altair builds the chart; the rows skip it (validating thousands of rows through its
schema classes took seconds a chart) and go into the spec as inline CSV with short
column names: a year of runs stays a few hundred kB a page. The small multiples of a
thousand series pages share one spec built once (``small_multiples_by``): only the title,
the time domain and the data differ. Panels are sized to the page by ``assets/charts.js``
(as many columns as fit, each as wide as the row allows): a spec's panel size is a default.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from functools import lru_cache
from typing import NamedTuple

import altair as alt
import polars as pl

from transforms.units import byte_unit, is_bytes_metric

REGRESSED = "#d62728"
IMPROVED = "#2ca02c"
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
# Columns of the inline data: t time, r run, c commit, k line or panel, y value (scaled),
# d change against the previous run (scaled), v the open incident step ("regression I-…"),
# h the run's page, l the label of last night's point (empty on other rows), m a mark opened
# here, i where the mark leads, o the open step's kind on a line's last point, j its incident;
# in the panels also z where the point is drawn when a zoom put it on the panel's edge (empty
# elsewhere: y) and x what is written beside it.
_PARSE = {"t": "date", "y": "number", "d": "number", "z": "number", "q": "number"}
LAST_NAME = "ds_last"  # Vega mark names (classes of their SVG groups): the browser tests find them
LABEL_NAME = "ds_label"
MARK_NAME = "ds_opened"
OPEN_NAME = "ds_open"
POINT_NAME = "ds_point"
OFF_NAME = "ds_off"  # a point beyond a zoomed panel's span: its value, at the edge
NOTE_NAME = "ds_note"  # a series none of whose figures moved: a line saying so, no panel
ZOOM_SPAN = 3  # a zoomed panel's y span: at most this many times its open step
DRAWN = "isNumber(datum.z) && isFinite(datum.z) ? datum.z : datum.y"  # Vega expression: where a point is drawn
DAILY_DAYS = 14  # runs spanning this many days or fewer get a tick a day
MAX_RUN_TICKS = 10  # this many runs or fewer: a tick at each run
Y_PAD = 14  # pixels above the highest point and below the lowest: a point is never cut in half
_PAD_RIGHT = 0.16  # share of the runs' span added after the last run: room for its label
_PAD_LEFT = 0.02
_PAD_RIGHT_PANELS = 0.05  # small panels: a label sits left of its point, less room needed


def change_points(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Rows where the value moved or an incident opened, plus the first and last of each line."""
    ordered = frame.sort([*keys, "started_at", "run_id"])
    first = pl.int_range(pl.len()).over(keys) == 0
    last = pl.int_range(pl.len()).over(keys) == pl.len().over(keys) - 1
    moved = pl.col("changed") if "changed" in frame.columns else pl.lit(True)
    opened = pl.col("mark").is_not_null() if "mark" in frame.columns else pl.lit(False)
    return ordered.filter(first | last | moved.fill_null(True) | opened)


def moved_lines(rows: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The ``keys`` of the lines of ``rows`` whose value moved (more than one value among them:
    change points hold every value a line took) or where an incident opened: the lines worth a
    panel. A flat line says nothing its table's value does not."""
    opened = pl.col("mark").is_not_null().any() if "mark" in rows.columns else pl.lit(False)
    return (rows.group_by(keys).agg(((pl.col("value").drop_nulls().n_unique() > 1) | opened).alias("_moved"))
            .filter("_moved").drop("_moved"))


def is_empty(rows: pl.DataFrame) -> bool:
    """Nothing to draw: no row, or no value other than 0 (a chart of flat zeros says
    nothing a sentence does not)."""
    return rows.is_empty() or rows.filter(pl.col("value").is_not_null() & (pl.col("value") != 0)).is_empty()


def _axis(daily: bool, fmt: str) -> alt.Axis:
    return alt.Axis(format=fmt, labelAngle=-30, **({"tickCount": {"interval": "day", "step": 1}} if daily else {}))


def _is_daily(first: datetime | None, last: datetime | None) -> bool:
    return first is not None and (last - first).days <= DAILY_DAYS


def _run_ticks(rows: pl.DataFrame) -> list[dict] | None:
    """A tick at each run when there are a few (a night's run at 02:00 is not the day's first
    tick, which may fall before the axis starts); Vega chooses for more."""
    times = rows.get_column("started_at").unique().sort().to_list()
    return [_datetime(t) for t in times] if 0 < len(times) <= MAX_RUN_TICKS else None


def _datetime(at: datetime) -> dict:
    """A Vega-Lite DateTime (local time, as Vega reads the data's ``t``)."""
    return {"year": at.year, "month": at.month, "date": at.day, "hours": at.hour, "minutes": at.minute}


def _time_domain(first: datetime | None, last: datetime | None, right: float = _PAD_RIGHT) -> list[dict] | None:
    """The runs' span, widened: the last run's point and label stay inside the chart."""
    if first is None:
        return None
    span = max(last - first, timedelta(days=1))
    return [_datetime(first - span * _PAD_LEFT), _datetime(last + span * right)]


def _number_text(x: pl.Expr) -> pl.Expr:
    """A figure in its unit as text, as ``transforms.units.number_in_unit`` writes it (four
    significant digits, a whole number from 1000 up, no ".0"). A value no integer holds (1e308,
    NaN, inf: a warehouse written before figures were checked may hold them) reads as polars
    prints it. Not strict: polars casts every row."""
    y = (pl.when(x.abs() >= 1e15).then(x).when(x.abs() >= 1000).then(x.round(0))
         .otherwise(x.round_sig_figs(4)))  # rounding 1e308 adds digits
    whole = y.cast(pl.Int64, strict=False)
    return pl.when(whole.is_not_null() & (whole == y)).then(whole.cast(pl.String)).otherwise(y.cast(pl.String))


def _points(rows: pl.DataFrame, key: str, scale: pl.Expr | float, unit: pl.Expr | str) -> pl.DataFrame:
    columns = rows.columns
    unit = pl.lit(unit) if isinstance(unit, str) else unit
    suffix = pl.when(unit == "").then(pl.lit("")).otherwise(pl.lit(" ") + unit)

    def text(name: str) -> pl.Expr:
        return (pl.col(name) if name in columns else pl.lit(None, pl.String)).fill_null("")

    last = pl.col("last") if "last" in columns else pl.lit(False)
    zoomed = []
    if "_z" in columns:  # a point a zoom put on its panel's edge: drawn there, its value written beside it
        side = pl.when(pl.col("_z") > pl.col("value")).then(pl.lit("↓ ")).otherwise(pl.lit("↑ "))
        zoomed = [(pl.col("_z") / scale).round_sig_figs(6).alias("z"),
                  pl.when(pl.col("_z").is_not_null()).then(pl.concat_str(side, _number_text(pl.col("value") / scale), suffix))
                  .otherwise(pl.lit("")).alias("x")]
    points = rows.select(
        pl.col("started_at").dt.strftime("%Y-%m-%dT%H:%M").alias("t"), pl.col("run_id").alias("r"),
        pl.col("commit").fill_null("").alias("c"), pl.col(key).alias("k"),
        (pl.col("value") / scale).round_sig_figs(6).alias("y"), (pl.col("delta") / scale).round_sig_figs(6).alias("d"),
        text("state").alias("v"), text("href").alias("h"),
        pl.when(last & pl.col("value").is_not_null()).then(pl.concat_str(_number_text(pl.col("value") / scale), suffix))
        .otherwise(pl.lit("")).alias("l"),
        text("mark").alias("m"),
        (pl.col("mark_href") if "mark_href" in columns else text("href")).fill_null("").alias("i"),
        text("open").alias("o"), text("open_href").alias("j"), *zoomed,
        *([pl.col("_end").alias("b")] if "_end" in columns else []))
    if "_end" in columns:  # an end's run is the page script's to fill (small_multiples_by)
        at_end = pl.col("b") != ""
        points = points.with_columns(pl.when(at_end).then(pl.lit("")).otherwise(pl.col(c)).alias(c) for c in "trchi")
    return points


def _zoom(rows: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``rows`` with ``_z``: where a point is drawn when its panel is zoomed to the incident open
    on its figure and the point lies beyond the zoom's span (its value clamped to the span's
    edge), else null. A panel is zoomed when its line's last row has an open incident step and
    its values span more than ``ZOOM_SPAN`` times that step: the step is the line's last stretch
    of rows with an open step (``state``) and the baseline it stepped from; the span keeps the
    step and as many of the other values as fit (those below first, then those above)."""
    if not {"state", "baseline", "open"} <= set(rows.columns) or rows.is_empty():
        return rows
    rows = rows.sort([*keys, "started_at", "run_id"], maintain_order=True)
    closed = (pl.col("state").fill_null("") == "").cast(pl.Int32)
    stretch = closed.cum_sum(reverse=True).over(keys) == 0  # the rows after the last one with no open step
    value = pl.col("value").filter(pl.col("_stretch") & pl.col("value").is_finite())
    baseline = pl.col("baseline").filter(pl.col("_stretch")).first()
    spans = (rows.with_columns(stretch.alias("_stretch"))
             .group_by(keys).agg(
                 (pl.col("open").fill_null("") != "").last().alias("_open"),
                 pl.min_horizontal(value.min(), baseline).alias("_a"), pl.max_horizontal(value.max(), baseline).alias("_b"),
                 pl.col("value").filter(pl.col("value").is_finite()).min().alias("_min"),
                 pl.col("value").filter(pl.col("value").is_finite()).max().alias("_max")))
    room = ZOOM_SPAN * (pl.col("_b") - pl.col("_a"))
    lo = pl.max_horizontal(pl.col("_min"), pl.col("_b") - room)
    spans = (spans.filter(pl.col("_open") & (room > 0) & (pl.col("_max") - pl.col("_min") > room))
             .select(*keys, lo.alias("_lo"), pl.min_horizontal(pl.col("_max"), lo + room).alias("_hi")))
    if spans.is_empty():
        return rows.with_columns(pl.lit(None, pl.Float64).alias("_z"))
    out = rows.join(spans, on=keys, how="left", maintain_order="left")
    beyond = pl.col("value").is_finite() & ((pl.col("value") < pl.col("_lo")) | (pl.col("value") > pl.col("_hi")))
    return out.with_columns(pl.when(beyond).then(pl.col("value").clip(pl.col("_lo"), pl.col("_hi")))
                            .otherwise(None).cast(pl.Float64).alias("_z")).drop("_lo", "_hi")


def _tooltip(value_title: str) -> list[alt.Tooltip]:
    return [alt.Tooltip("r:N", title="run"), alt.Tooltip("c:N", title="commit"), alt.Tooltip("k:N", title="series"),
            alt.Tooltip("y:Q", title=value_title, format=",.4~r"), alt.Tooltip("d:Q", title="change", format="+,.4~r"),
            alt.Tooltip("v:N", title="incident open on it")]


def _layers(points: pl.DataFrame) -> tuple[bool, bool]:
    """(any triangle, any open-incident ring): the layers a chart of these points draws."""
    return (points.height > 0 and (points.get_column("m") != "").any(),
            points.height > 0 and (points.get_column("o") != "").any())


def _marks(base: alt.Chart, tooltip: list, *, steps: bool, size: int = 28, label_right: bool = True,
           opened: bool = True, open_: bool = True, off: bool = False) -> alt.LayerChart:
    """Line, a point per row (its run's page), last night ringed and labelled, a triangle
    where an incident opened (``opened``), a coloured ring on the last point of a figure
    with an open incident (``open_``), each to its incident's page, and (``off``) the value of
    a point a zoom put on its panel's edge.

    The rings, labels and triangles are drawn on every row, sized 0 (or empty text) where they
    do not apply, never on filtered data: a panel where a filter keeps no row gives Vega an
    empty layer, whose y extent is infinite (it warns, and may draw the panel wrong)."""
    def only(field: str, area: int):
        return alt.condition(f"datum.{field} != ''", alt.value(area), alt.value(0))

    label = (dict(align="left", dx=8, dy=0) if label_right else dict(align="right", dx=3, dy=-9))
    layers = [
        base.mark_line(interpolate="step-after" if steps else "linear", strokeWidth=2),
        base.mark_point(filled=True, size=size, cursor="pointer").encode(tooltip=tooltip, href="h:N").properties(name=POINT_NAME),
        base.mark_point(filled=False, strokeWidth=2.5, cursor="pointer").encode(
            size=only("l", 5 * size), tooltip=tooltip, href="h:N").properties(name=LAST_NAME),
        base.mark_text(fontWeight="bold", fontSize=11, baseline="middle", **label).encode(text="l:N").properties(name=LABEL_NAME),
    ]
    if off:
        layers.append(base.mark_text(fontSize=10, baseline="bottom", align="center", dy=-5, fontStyle="italic")
                      .encode(text="x:N", tooltip=tooltip).properties(name=OFF_NAME))
    if opened:
        layers.append(base.mark_point(shape="triangle-up", filled=True, color=REGRESSED, cursor="pointer").encode(
            size=only("m", 4 * size), tooltip=tooltip, href="i:N").properties(name=MARK_NAME))
    if open_:
        colour = alt.condition("datum.o == 'improvement'", alt.value(IMPROVED), alt.value(REGRESSED))
        layers.append(base.mark_point(shape="diamond", filled=False, strokeWidth=3, cursor="pointer").encode(
            size=only("o", 9 * size), color=colour, tooltip=tooltip, href="j:N").properties(name=OPEN_NAME))
    return alt.layer(*layers)


def trend_chart(rows: pl.DataFrame, *, title: str, color: str = "line", metric_label: str | None = None,
                height: int = 220, steps: bool = False) -> dict:
    """Lines over runs, one per ``color`` value, on one y scale. ``rows``: metric_trends rows
    (one metric, or metrics of one unit) with a ``line`` column naming each line (module
    docstring). For counts of one kind (incidents per run); program figures go in ``panels``."""
    if steps:
        rows = change_points(rows, [color, "metric"])
    metric = rows.get_column("metric")[0] if rows.height else ""
    unit, scale = byte_unit(float(rows.get_column("value").abs().max() or 0)) if is_bytes_metric(metric) else ("", 1)
    y_title = (metric_label or metric) + (f" ({unit})" if unit else "")
    first, last = (rows.get_column("started_at").min(), rows.get_column("started_at").max()) if rows.height else (None, None)
    x = alt.X("t:T", title="run", axis=_axis(_is_daily(first, last), "%Y-%m-%d"),
              scale=alt.Scale(domain=_time_domain(first, last)) if first is not None else alt.Undefined)
    base = alt.Chart(POINTS).encode(x=x, y=alt.Y("y:Q", title=y_title, scale=alt.Scale(padding=Y_PAD)),
                                    color=alt.Color("k:N", title=None))
    points = _points(rows, color, scale, unit)
    opened, open_ = _layers(points)
    chart = _marks(base, _tooltip(y_title), steps=steps, opened=opened, open_=open_).properties(
        title=title, width=WIDTH, height=height)
    return _with_ticks(_spec(chart.interactive(bind_y=False), points), rows)


def faceted_trend_chart(rows: pl.DataFrame, *, title: str, facet: str, color: str, metric_label: str,
                        columns: int = 3) -> dict:
    """One small panel per ``facet`` value (a program), its lines coloured by ``color`` (a
    kind): ten programs of five kinds each stay readable. Runs (x) and colours are shared by
    the panels; each panel has its own y scale (programs differ by orders of magnitude)."""
    first, last = rows.get_column("started_at").min(), rows.get_column("started_at").max()
    x = alt.X("t:T", title=None, axis=_axis(_is_daily(first, last), "%m-%d"),
              scale=alt.Scale(domain=_time_domain(first, last, right=_PAD_RIGHT_PANELS)))
    base = alt.Chart().encode(x=x, y=alt.Y("y:Q", title=None, scale=alt.Scale(zero=False, padding=Y_PAD)),
                              color=alt.Color("k:N", title=None))
    points = pl.concat([rows.select(pl.col(facet).alias("p")), _points(rows, color, 1, "")], how="horizontal")
    opened, open_ = _layers(points)
    layers = _marks(base, _tooltip(metric_label), steps=False, size=22, label_right=False, opened=opened,
                    open_=open_).properties(width=260, height=130)
    chart = layers.facet(facet=alt.Facet("p:N", title=None, header=alt.Header(labelLimit=280)), columns=columns,
                         data=POINTS).resolve_scale(y="independent").resolve_axis(x="independent").properties(title=title)
    return _with_ticks(_spec(chart, points), rows)


def small_multiples(rows: pl.DataFrame, *, title: str, columns: int = 3) -> dict:
    """Every metric of one series over runs that moved, one panel each (bytes in one unit)."""
    return small_multiples_by(rows.with_columns(pl.lit(title).alias("_chart")), "_chart", columns=columns)[title]


def panels(rows: pl.DataFrame, *, title: str, panel: str = "line", columns: int = 3,
           unit: tuple[str, int] | None = None) -> dict:
    """One panel per ``panel`` value (a program) over every run of the window, each with its own
    y scale: one program's spike does not flatten the others. Bytes in ``unit`` (the table's
    beside it), else in the unit the chart's largest value takes."""
    return small_multiples_by(rows.with_columns(pl.lit(title).alias("_chart")), "_chart", panel=panel,
                              columns=columns, steps=False, unit=unit)[title]


class WindowEnds(NamedTuple):
    """The runs at the window's ends, for charts that leave them to the page's script: ``first``
    (the window's first run), ``latest`` (the latest run) and ``root`` (the site's root from the
    chart's page, ``"../"``)."""
    first: str | None
    latest: str | None
    root: str


def small_multiples_by(rows: pl.DataFrame, key: str, *, panel: str = "metric", columns: int = 3,
                       steps: bool = True, ends: WindowEnds | None = None,
                       unit: tuple[str, int] | dict[str, tuple[str, int]] | None = None) -> dict[str, dict]:
    """``small_multiples`` of each value of ``key`` (a series), titled by it, in one pass: a panel
    per ``panel`` value that moved (``moved_lines``), zoomed to an open step (``_zoom``), the
    bytes of every panel in one unit: ``unit`` (the table's beside the chart; a dict: each
    ``key`` value's), else the one the chart's largest byte figure takes (``units_by``).
    ``steps``: ``rows`` are change points (drawn as steps); else a row per run (straight lines). A value of ``key`` none of whose panels moved
    gets a spec that says so in a line (``NOTE_NAME``): its page keeps its chart's place.

    ``ends`` (with ``steps``): a line's first row at the window's first run and its last at the
    latest run, where nothing moved or opened, stand for "the window's start" and "now" (``b``
    is "s" or "n", their run, time, commit and page empty), and the time axis is left out:
    ``assets/charts.js`` fills both from ``assets/status-data.js``. So a series whose figures did
    not move has the same chart whichever runs the window holds, and its page is not built again
    (``flows/publish/site_mkdocs.py``)."""
    if steps:
        rows = change_points(rows, [key, panel])
        if ends is not None:
            rows = _floating_ends(rows, [key, panel], ends)
    if rows.is_empty():
        return {}
    every = rows.get_column(key).unique(maintain_order=True).to_list()
    unit_of = units_by(rows, key)
    if isinstance(unit, dict):
        unit_of |= unit
    elif unit:
        unit_of = dict.fromkeys(every, unit)
    rows = rows.join(moved_lines(rows, [key, panel]), on=[key, panel], how="semi", maintain_order="left")
    is_bytes = pl.col("metric").is_in([m for m in rows.get_column("metric").unique().to_list() if is_bytes_metric(m)])
    rows = _zoom(rows.with_columns(
        pl.when(is_bytes).then(pl.col(key).replace_strict({k: u[0] for k, u in unit_of.items()}, default=""))
        .otherwise(pl.lit("")).alias("_unit"),
        pl.when(is_bytes).then(pl.col(key).replace_strict({k: float(u[1]) for k, u in unit_of.items()}, default=1.0))
        .otherwise(pl.lit(1.0)).alias("_scale"),
    ).with_columns(
        pl.when(pl.col("_unit") == "").then(pl.col(panel)).otherwise(pl.format("{} ({})", panel, "_unit")).alias("_panel")),
        [key, panel])
    points = pl.concat([rows.select(key), _points(rows, "_panel", pl.col("_scale"), pl.col("_unit"))], how="horizontal")
    out = {}
    floating = ends is not None and steps  # the axis is the page script's (its rows' runs are not all here)
    if not floating:
        span = dict((name, (lo, hi)) for name, lo, hi in rows.group_by(key).agg(
            pl.col("started_at").min().alias("lo"), pl.col("started_at").max().alias("hi")).iter_rows())
        rows_of = rows.partition_by(key, as_dict=True, maintain_order=True)  # one pass, not a filter a series
    parts = points.partition_by(key, as_dict=True, maintain_order=True)
    for name in every:
        part = parts.get((name,))
        if part is None:
            out[name] = _note(name, "None of its figures moved in the runs shown: the table lists their values.")
            continue
        opened, open_ = _layers(part)
        off = "x" in part.columns and (part.get_column("x") != "").any()
        if floating:
            spec = json.loads(_small_multiples_spec(columns, False, steps, opened, open_, off))
            # What charts.js needs to draw the axis as _time_domain, _run_ticks and _is_daily would.
            spec["usermeta"] = {"dumpscopeEnds": {"root": ends.root, "left": _PAD_LEFT, "right": _PAD_RIGHT_PANELS,
                                                  "dailyDays": DAILY_DAYS, "maxTicks": MAX_RUN_TICKS}}
        else:
            first, last = span[name]
            spec = json.loads(_small_multiples_spec(columns, _is_daily(first, last), steps, opened, open_, off))
            _set_time_domain(spec, _time_domain(first, last, right=_PAD_RIGHT_PANELS), _run_ticks(rows_of[(name,)]))
        spec["title"] = name
        out[name] = _with_data(spec, part.drop(key) if off else part.drop(key, "z", "x", strict=False))
    return out


def units_by(rows: pl.DataFrame, key: str) -> dict[str, tuple[str, int]]:
    """The byte unit of each value of ``key`` (a chart, and the table beside it): ``byte_unit`` of
    the largest byte figure among its rows (change points hold every value a line took)."""
    bytes_metrics = [m for m in rows.get_column("metric").unique().to_list() if is_bytes_metric(m)]
    largest = dict(rows.filter(pl.col("metric").is_in(bytes_metrics) & pl.col("value").is_finite())
                   .group_by(key).agg(pl.col("value").abs().max()).iter_rows())
    return {name: byte_unit(largest.get(name)) for name in rows.get_column(key).unique().to_list()}


def _note(title: str, text: str) -> dict:
    """A chart that is a line of text: what a chart with nothing worth a panel says instead."""
    spec = json.loads(_note_spec())
    spec["title"] = title
    return _with_data(spec, pl.DataFrame({"k": [text]}))


@lru_cache(maxsize=1)
def _note_spec() -> str:
    """The note's spec without its title (JSON text): Altair builds and checks a chart in ~10 ms, and a
    year's site has a note for each of a thousand series whose figures did not move."""
    chart = alt.Chart(POINTS).mark_text(align="left", baseline="middle", fontSize=13, x=0, y=12).encode(
        text="k:N").properties(title="", width=WIDTH, height=24, name=NOTE_NAME)
    return json.dumps(chart.to_dict(validate=False))


def _floating_ends(rows: pl.DataFrame, keys: list[str], ends: WindowEnds) -> pl.DataFrame:
    """Change points (sorted, ``change_points``) with ``_end``: "s" on a line's first row when it
    is the window's first run and nothing moved or opened there, "n" on its last when it is the
    latest run and likewise, else "". A row where a figure moved keeps its run: it is the chart's
    content, not one of its ends."""
    index = pl.int_range(pl.len()).over(keys)
    moved = pl.col("changed").fill_null(True) if "changed" in rows.columns else pl.lit(True)
    opened = pl.col("mark").is_not_null() if "mark" in rows.columns else pl.lit(False)
    plain = ~moved & ~opened
    return rows.with_columns(
        pl.when(plain & (index == pl.len().over(keys) - 1) & (pl.col("run_id") == (ends.latest or ""))).then(pl.lit("n"))
        .when(plain & (index == 0) & (pl.col("run_id") == (ends.first or ""))).then(pl.lit("s"))
        .otherwise(pl.lit("")).alias("_end"))


@lru_cache(maxsize=64)
def _small_multiples_spec(columns: int, daily: bool, steps: bool, opened: bool, open_: bool, off: bool) -> str:
    """The spec the series pages (and the sections' panels) share (JSON text: each caller gets its own copy).
    Each panel has its own x axis: a row of panels that does not fill its columns draws no axis
    under an empty cell. A point is drawn at ``z`` (``DRAWN``: its zoomed place, else its value)."""
    x = alt.X("t:T", title=None, axis=_axis(daily, "%m-%d"))
    base = alt.Chart().encode(x=x, y=alt.Y("z:Q", title=None, scale=alt.Scale(zero=False, padding=Y_PAD)))
    layers = _marks(base, _tooltip("value"), steps=steps, size=22, label_right=False, opened=opened,
                    open_=open_, off=off).properties(width=230, height=110)
    chart = (layers.facet(facet=alt.Facet("k:N", title=None, header=alt.Header(labelLimit=260)), columns=columns,
                          data=POINTS).transform_calculate(z=DRAWN)
             .resolve_scale(y="independent").resolve_axis(x="independent").properties(title=""))
    return json.dumps(chart.to_dict(validate=False))


def _with_ticks(spec: dict, rows: pl.DataFrame) -> dict:
    ticks = _run_ticks(rows) if rows.height else None
    if ticks:
        _set_time_domain(spec, None, ticks)
    return spec


def _set_time_domain(spec: object, domain: list[dict] | None, ticks: list[dict] | None = None) -> None:
    """Every temporal x encoding of a (shared) spec gets this page's domain (and ticks)."""
    if isinstance(spec, dict):
        x = spec.get("encoding", {}).get("x") if isinstance(spec.get("encoding"), dict) else None
        if isinstance(x, dict) and x.get("type") == "temporal":
            if domain:
                x["scale"] = {**x.get("scale", {}), "domain": domain}
            if ticks:
                x["axis"] = {**{k: v for k, v in x.get("axis", {}).items() if k != "tickCount"}, "values": ticks}
        for value in spec.values():
            _set_time_domain(value, domain, ticks)
    elif isinstance(spec, list):
        for value in spec:
            _set_time_domain(value, domain, ticks)


def bar_chart(rows: pl.DataFrame, *, x: str, y: str, title: str, color: str | None = None,
              unit: tuple[str, int] | None = None, stack: list[str] | None = None) -> dict:
    """Horizontal bars (a breakdown of the latest run); ``unit``: bytes, in that unit (its table's);
    ``stack``: the values of ``color`` in the order their parts stack (and the legend lists them)."""
    unit, scale = unit or ("", 1)
    x_title = f"{x} ({unit})" if unit else x
    data = rows.select(pl.col(y).alias("k"), (pl.col(x) / scale).round_sig_figs(6).alias("y"),
                       *([pl.col(color).alias("g")] if color else []))
    enc = {"x": alt.X("y:Q", title=x_title), "y": alt.Y("k:N", sort="-x", title=None),
           "tooltip": [alt.Tooltip("k:N", title=y), alt.Tooltip("y:Q", title=x_title, format=",.4~r")]}
    if color:
        enc["color"] = alt.Color("g:N", title=None, **({"sort": stack} if stack else {}))
        enc["tooltip"].insert(1, alt.Tooltip("g:N", title=color))
    if stack:
        data = data.with_columns(pl.col("g").replace_strict(stack, list(range(len(stack))), default=len(stack),
                                                            return_dtype=pl.Int32).alias("q"))
        enc["order"] = alt.Order("q:Q")
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
