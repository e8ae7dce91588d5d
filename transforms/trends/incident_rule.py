"""The one rule that turns a history of dumps into incidents, and what each incident says caused it.

``compute_incidents`` is what the nightly (``flows.verdict.aggregate``, a group of jobs at a time)
and ``dumpscope check`` (history + the candidate directory as one more run) both run:
each series' health per run (``program_health``: the worst status of its dumps, a partial
one that names what its damage cost ``ok`` or ``damaged`` by whether the verdict reads a
lost figure, or ``absent`` in a later run of its job that did not write it), the figures of
the dumps whose figures stand (``figures_stand``), and ``transforms.trends.incident_walk.compute``
with the settings' floors.

``causes`` attaches to each incident the top lines of its structural diff (rows of the
``diffs`` table, or computed in memory by ``check``): a failure's error first, then new
or vanished collectives, custom calls and fallbacks, kernels and fusions, then memory
items. Steps that merely did not run behind a failed one (an ONNX export's later steps)
are one line after its error; vanished dumps are one line. Pure: frames in, frames out.
"""

from __future__ import annotations

import fnmatch
import re

import polars as pl

from transforms.trends import incident_walk
from transforms.trends.headlines import failure_text
from transforms.trends.rules import DEFAULT_RULES, NEUTRAL, Settings
from transforms.volatile import normalise

CAUSE_LINES = 5
NOT_RUN = "then not run: "  # the one line for the ONNX export steps skipped after a failed one
# Which structural changes explain a program's step best: new or vanished collectives
# and custom calls first, then kernels and fusions, then memory items.
_CAUSE_ORDER = {"rank_divergence": -1, "compile_failure": 0, "graph_break": 0, "recompile": 0, "collective": 0,
                "collective_schedule": 0, "custom_call": 1, "fallback_kernel": 1, "fallback_call": 1, "onnx_step": 1,
                "compile_graph": 1, "compile_kernels": 1, "compile_code": 2, "compile_guard": 2,
                "fusion": 2, "fused_group": 2, "kernel_category": 3, "allocation": 4, "peak_value": 4}
_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?(?P<type>\w*(?:Error|Exception|Failure)\w*): (?P<message>.*)$")


def figures_stand(dumps: pl.DataFrame) -> pl.Expr:
    """Of ``dumps`` rows: whose figures are believed (stored, charted, judged): ok, or partial with
    what its damage cost named (``lost_metrics``: its other figures stand). SQL: ``reads.FIGURES_STAND``."""
    ok = pl.col("status") == "ok"
    return ok | ((pl.col("status") == "partial") & pl.col("lost_metrics").is_not_null()) \
        if "lost_metrics" in dumps.columns else ok


def program_health(series: pl.DataFrame, dumps: pl.DataFrame, order: pl.DataFrame,
                   settings: Settings | None = None) -> pl.DataFrame:
    """Each series' state per run for the incidents: the worst status of its dumps (ok,
    damaged, partial, failed), or ``absent`` in a later run of its job that did not write it.
    ``series``: dump_series rows; ``dumps``: path, run_id, job, status, error (, lost_metrics).
    A partial dump whose figures stand (``figures_stand``) is ``ok`` when the figures it lost
    are none the verdict reads (``settings``' rules give them no direction), else ``damaged``:
    a failure about the dump whose other figures are judged."""
    cols = ["path", "status", "error", *(["lost_metrics"] if "lost_metrics" in dumps.columns else [])]
    known = series.join(dumps.select(cols), on="path").filter(pl.col("kind") != "unknown")
    if "lost_metrics" in known.columns:
        known = _damage_judged(known, settings or Settings())
    rank = pl.col("status").replace_strict({"ok": 0, "damaged": 1, "partial": 2, "failed": 3}, default=3,
                                           return_dtype=pl.Int64)
    present = (known.with_columns(rank.alias("_rank")).sort("_rank", descending=True)
               .group_by("series", "run_id").first()
               .select("series", "job", pl.col("series_program").alias("program"), "kind", "stage", "run_id", "status",
                       pl.when(pl.col("status") != "ok").then(pl.concat_str("path", pl.lit(": "), pl.col("error").fill_null("")))
                       .alias("detail")))
    seq = order.select("run_id", "run_seq")
    job_runs = dumps.select("job", "run_id").unique().join(seq, on="run_id")
    first = (present.join(seq, on="run_id").group_by("series", "job", "program", "kind", "stage")
             .agg(pl.col("run_seq").min().alias("_first")))
    later = first.join(job_runs, on="job").filter(pl.col("run_seq") > pl.col("_first")).select(
        "series", "job", "program", "kind", "stage", "run_id")
    absent = later.join(present, on=["series", "run_id"], how="anti").with_columns(
        pl.lit("absent").alias("status"), pl.lit(None, pl.String).alias("detail"))
    return pl.concat([present, absent.select(present.columns)]).sort("series", "run_id")


def _damage_judged(known: pl.DataFrame, settings: Settings) -> pl.DataFrame:
    """``known`` (series rows with their dump's status, error, lost_metrics) with each partial dump
    whose figures stand ``ok`` (it lost none the verdict reads) or ``damaged`` (it did: the error
    then says which figures). Such dumps are rare: only their rows are looked at."""
    standing = (pl.col("status") == "partial") & pl.col("lost_metrics").is_not_null()
    damaged = known.filter(standing)
    if damaged.is_empty():
        return known
    read = [reads_any(settings, series, lost) for series, lost in damaged.select("series", "lost_metrics").iter_rows()]
    damaged = damaged.with_columns(pl.Series("_read", read, pl.Boolean)).with_columns(
        pl.when("_read").then(pl.lit("damaged")).otherwise(pl.lit("ok")).alias("status"),
        pl.when("_read").then(pl.concat_str(pl.lit("figures lost ("), pl.col("lost_metrics").list.join(", "),
                                            pl.lit("): "), pl.col("error").fill_null("")))
        .otherwise(pl.col("error")).alias("error")).drop("_read")
    return pl.concat([known.filter(~standing), damaged.select(known.columns)])


def reads_any(settings: Settings, series: str, patterns: list[str]) -> bool:
    """Whether the verdict reads a metric that one of ``patterns`` may name: a rule with a direction
    (the series' own and the defaults) whose metric pattern can match the same name."""
    rules = [r for r in settings.rules if fnmatch.fnmatchcase(series, r.series) and r.direction != NEUTRAL]
    rules += [r for r in DEFAULT_RULES if r.direction]
    return any(_may_overlap(p, r.metric) for p in patterns for r in rules)


def _may_overlap(a: str, b: str) -> bool:
    """Whether two shell patterns can match one name (an exact name against a pattern: whether it
    matches; two patterns: their literal beginnings agree, which over-reads, never under-reads)."""
    wild = re.compile(r"[*?\[]")
    if not wild.search(a) or not wild.search(b):
        return fnmatch.fnmatchcase(a, b) if not wild.search(a) else fnmatch.fnmatchcase(b, a)
    head_a, head_b = wild.split(a, 1)[0], wild.split(b, 1)[0]
    return head_a.startswith(head_b) or head_b.startswith(head_a)


def compute_incidents(series: pl.DataFrame, dumps: pl.DataFrame, observations: pl.DataFrame, order: pl.DataFrame,
                      accepts: list[dict], settings: Settings, *, since: int | None = None,
                      ) -> incident_walk.Walked:
    """Incidents and incident_steps (``incidents.Walked``), causes not attached, of the jobs of ``series``.

    ``series``: dump_series rows of every run of those jobs; ``dumps``: path, run_id, job,
    status, error of the same; ``observations``: series, metric, run_id, value of their
    dumps that parsed ok (strings or categoricals); ``order``: run_id, run_seq, started_at,
    commit of the runs; ``accepts``: the accept log's rows; ``since``: only the incidents
    touched from that run_seq on (``incidents.compute``)."""
    health = program_health(series, dumps, order, settings)
    ok = health.filter(pl.col("status").is_in(["ok", "damaged"])).select("series", "run_id")
    usable = series.join(dumps.filter(figures_stand(dumps)).select("path"), on="path", how="semi")
    info = usable.select("series", "job", pl.col("series_program").alias("program"), "kind", "stage").unique("series")
    if observations.schema.get("series") == pl.Categorical:  # categoricals: no string per row
        info = info.with_columns(pl.all().cast(pl.Categorical))
    floors = incident_walk.Floors(bytes=settings.floor_bytes, count=settings.floor_count)
    return incident_walk.compute(observations, health, order, accepts, settings, floors, ok=ok, info=info, since=since,
                                repeats=repeated_contents(usable, dumps, order))


def repeated_contents(series: pl.DataFrame, dumps: pl.DataFrame, order: pl.DataFrame) -> pl.DataFrame | None:
    """(series, run_id) of each run where a series' dump holds the bytes (``dumps.dump_id``) its
    dump held in an earlier run: a night copied into the bucket again, a log rewritten
    unchanged. A timing in it was measured once, in the earlier run; a median of runs
    (a rule's ``window``) that sampled it again would turn one slow run into two. None when
    ``dumps`` carries no content ids."""
    if "dump_id" not in dumps.columns:
        return None
    runs = series.select("series", "run_id", "path").join(dumps.select("path", "dump_id"), on="path")
    runs = runs.join(order.select("run_id", "run_seq"), on="run_id").sort("series", "run_seq")
    return runs.filter(~pl.col("dump_id").is_first_distinct().over("series")).select("series", "run_id")


def causes(incidents: pl.DataFrame, steps: pl.DataFrame, diffs: pl.DataFrame) -> pl.Series:
    """The ``cause`` of each incident (in ``incidents``' order): its failures' errors, then the
    top structural changes of its series in its opening run. ``diffs``: incident_id, series,
    category, description, bytes_before, bytes_after, value_after, excerpt_after of the
    diffs of the (series, opening run) pairs of each incident's steps. A series whose only
    step is a damaged or vanished dump gives no structural change: what a cut file lacks is
    not a change of the program."""
    if incidents.is_empty():
        return pl.Series("cause", [], pl.String)
    figures = steps.filter(~pl.col("metric").str.starts_with("dump.")).select("incident_id", "series").unique()
    diffs = diffs.join(figures, on=["incident_id", "series"], how="semi")
    by_incident = {iid: [] for iid in incidents.get_column("incident_id").to_list()}
    for r in steps.filter(pl.col("step") == "failure").sort("metric", "series").iter_rows(named=True):
        by_incident.setdefault(r["incident_id"], []).append(r)
    order = pl.col("category").replace_strict(_CAUSE_ORDER, default=5, return_dtype=pl.Int64)
    size = (pl.col("bytes_after").fill_null(0) - pl.col("bytes_before").fill_null(0)).abs()
    failed_first = pl.col("value_after").fill_null(0.5)  # an ONNX step now ❌ (0) before one now skipped (null)
    ranked = (diffs.unique(["incident_id", "description"])
              .sort(order, failed_first, size, "description", descending=[False, False, True, False]))
    changes = {iid: rows.to_dicts() for (iid,), rows in ranked.partition_by("incident_id", as_dict=True).items()}
    out = []
    for iid in incidents.get_column("incident_id").to_list():
        lines = _failure_lines(by_incident.get(iid, [])) + _change_lines(changes.get(iid, []))
        more = len(lines) - CAUSE_LINES
        out.append("\n".join(lines[:CAUSE_LINES] + ([f"… and {more} more"] if more > 0 else [])) or None)
    return pl.Series("cause", out, pl.String)


def _failure_lines(rows: list[dict]) -> list[str]:
    """A failure's error first, each once; the dumps that vanished as one line."""
    lines, vanished = [], []
    for r in rows:
        if r["metric"] == "dump.vanished":
            vanished.append(r["series"])
        elif r["metric"] in ("dump.status", "dump.lost"):
            text = failure_text(r)
            path = (r.get("detail") or "").split(": ", 1)[0]
            line = f"{text} ({path})" if path else text
            if line not in lines:
                lines.append(line)
    if vanished:
        names = ", ".join(sorted(vanished)[:3]) + (f" and {len(vanished) - 3} more" if len(vanished) > 3 else "")
        lines.append(f"{len(vanished)} dump{'s' if len(vanished) != 1 else ''} vanished: {names}")
    return lines


def _change_lines(rows: list[dict]) -> list[str]:
    """The changes' descriptions, a failed ONNX step with its error, the steps skipped after it in one line."""
    lines, skipped = [], []
    for r in rows:
        if r["category"] == "onnx_step" and r.get("value_after") is None and "→⚪" in r["description"]:
            skipped.append(r["description"].removeprefix("ONNX step ").split(" ", 1)[0])
            continue
        line = r["description"]
        if r["category"] == "onnx_step" and r.get("value_after") == 0.0 and (error := _first_exception(r.get("excerpt_after"))):
            line += f": {error}"
        lines.append(line)
    if skipped:
        after = next((i + 1 for i, line in enumerate(lines) if "→❌" in line), len(lines))
        lines.insert(after, NOT_RUN + ", ".join(sorted(skipped)))
    return lines


def _first_exception(excerpt: str | None, most: int = 200) -> str | None:
    """The first exception line of a failed ONNX step's excerpt, its type without its module."""
    for line in (excerpt or "").splitlines():
        if (m := _EXCEPTION.match(line.strip())) is not None:
            text = normalise(f"{m['type']}: {m['message']}")  # no address or path of the exporting process
            return text if len(text) <= most else text[: most - 1] + "…"
    return None


FIGURE_STATE = pl.Schema({"incident_id": pl.String, "step": pl.String, "baseline": pl.Float64, "opened_run": pl.String})


def figure_states(rows: pl.DataFrame, steps: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (series, metric, run_id: metric_trends rows) with the incident step open on each
    at its run (``FIGURE_STATE``; nulls where none is): the latest opened when steps are
    stacked. The one way a page tells a figure's state (the view ``figure_status`` in SQL).
    ``steps``: incident_steps rows; ``runs``: run_id, run_seq of every run."""
    seq = runs.select("run_id", pl.col("run_seq").cast(pl.Int64))
    if steps.is_empty() or rows.is_empty():
        return rows.with_columns(pl.lit(None, t).alias(c) for c, t in FIGURE_STATE.items())
    lives = pl.coalesce("reopened_run", "opened_run") if "reopened_run" in steps.columns else pl.col("opened_run")
    open_ = (steps.select("series", "metric", "incident_id", "step", "baseline", "opened_run", "closed_run",
                          lives.alias("_life"))
             .join(seq.rename({"run_id": "_life", "run_seq": "_from"}), on="_life").drop("_life")
             .join(seq.rename({"run_id": "closed_run", "run_seq": "_to"}), on="closed_run", how="left")
             .drop("closed_run"))
    keyed = rows.with_row_index("_row").join(seq.rename({"run_seq": "_at"}), on="run_id", how="left")
    hit = (keyed.select("_row", "series", "metric", "_at").join(open_, on=["series", "metric"])
           .filter((pl.col("_from") <= pl.col("_at")) & (pl.col("_to").is_null() | (pl.col("_to") > pl.col("_at"))))
           .sort("_row", "_from").group_by("_row").last().select("_row", *FIGURE_STATE.names()))
    return (keyed.drop("_at").join(hit, on="_row", how="left").sort("_row").drop("_row")
            .with_columns(pl.col(c).cast(t) for c, t in FIGURE_STATE.items()))
